"""Host-side tests of tools/crosscheck/make_golden.py (no MMA-Sim needed): drawing,
bit encodings and the kinds of trials. ml_dtypes decodes the bits independently. And
dev_tcgen05.py's shared-memory writer, which uses only public jaxwarp names."""

import pathlib
import sys

import ml_dtypes
import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tools" / "crosscheck"))
import dev_tcgen05 as dt  # noqa: E402
import make_golden as mg  # noqa: E402

_VALUE_DTYPES = {"f64": np.float64, "f32": np.float32, "f16": np.float16,
                 "bf16": ml_dtypes.bfloat16, "e4m3": ml_dtypes.float8_e4m3fn,
                 "e5m2": ml_dtypes.float8_e5m2, "e3m2": ml_dtypes.float6_e3m2fn,
                 "e2m3": ml_dtypes.float6_e2m3fn, "e2m1": ml_dtypes.float4_e2m1fn,
                 "ue8m0": ml_dtypes.float8_e8m0fnu}


def _reference(bits: np.ndarray, t: str) -> np.ndarray:
    """Values of raw bits through ml_dtypes (fp4 sits in bits 5:2 of its byte)."""
    if t == "e2m1":
        bits = bits >> 2
    dt = np.dtype(_VALUE_DTYPES[t])
    with np.errstate(invalid="ignore"):  # NaN payloads: only "is NaN" is compared
        return bits.astype(np.dtype(f"u{dt.itemsize}")).view(dt).astype(np.float64)


@pytest.mark.parametrize("t", sorted(_VALUE_DTYPES))
@pytest.mark.parametrize("kind", ["normal", "wide", "random_bits", "tiny", "specials"])
def test_draw_gives_codes_of_the_format(t, kind):
    rng = np.random.default_rng(0)
    bits = mg.draw(t, kind, (4096,), rng)
    assert bits.dtype == mg.storage_dtype(t)
    assert bits.dtype.itemsize == np.dtype(_VALUE_DTYPES[t]).itemsize
    width = {"e3m2": 6, "e2m3": 6, "e2m1": 6}.get(t, 8 * bits.dtype.itemsize)
    assert (bits.astype(np.uint64) >> np.uint64(width) == 0).all()
    ours, ref = mg.decode(bits, t), _reference(bits, t)
    np.testing.assert_array_equal(ours, ref)
    finite = np.isfinite(ref)
    if kind == "specials" and t not in ("e3m2", "e2m3", "e2m1"):
        assert not finite.all()  # NaN (and inf where the format has it) are drawn
    elif kind != "specials":
        assert finite.all()
    if kind == "tiny" and t not in ("ue8m0",):
        f = ml_dtypes.finfo(_VALUE_DTYPES[t]) if t not in ("f64", "f32") else np.finfo(
            _VALUE_DTYPES[t])
        assert (np.abs(ref) < 4 * float(f.smallest_normal)).all()
        assert (np.abs(ref) < float(f.smallest_normal)).any()  # subnormals drawn


@pytest.mark.parametrize("t", ["f32", "f16", "bf16", "e4m3", "e5m2", "e3m2", "e2m3", "e2m1"])
def test_encode_rounds_to_nearest_even_and_saturates(t):
    rng = np.random.default_rng(1)
    v = np.concatenate([rng.normal(0, 4, 2000), [0.0, -0.0, 1e30, -1e30]])
    got = mg.decode(mg.encode(v, t), t)
    dt = _VALUE_DTYPES[t]
    big = float(ml_dtypes.finfo(dt).max)
    want = np.clip(v, -big, big).astype(dt).astype(np.float64)  # ml_dtypes: nearest even
    np.testing.assert_array_equal(got, want)


def test_cancel_repeats_a_first_row_and_cancels_its_sum():
    cfg = mg.parse("mma", "m16n8k16.f32.f16.f16.f32")
    trial = mg.draw_trial(cfg, "cancel", np.random.default_rng(2))
    np.testing.assert_array_equal(trial["B"], np.repeat(trial["A"][0][:, None], 8, 1))
    a = mg.decode(trial["A"][0], "f16")
    row0 = a @ a + mg.decode(trial["C"][0], "f32")
    assert np.abs(row0).max() < 1e-3 * (a @ a)


@pytest.mark.parametrize(("family", "q", "shapes"), [
    ("mma", "m16n8k32.kind::f8f6f4.f16.e5m2.e2m1.f16", {"A": (2, 16, 32), "C": (2, 16, 8)}),
    ("tcgen05", "m64n8k16.kind::f16.f32.bf16.bf16", {"A": (2, 64, 16), "C": (2, 64, 8)}),
    ("mma_block_scale", "m16n8k64.kind::mxf4nvf4.block16.f32.e2m1.e2m1.f32.ue4m3",
     {"A": (2, 16, 32), "B": (2, 32, 8), "SA": (2, 16, 4), "SB": (2, 4, 8)}),
])
def test_field_shapes_follow_the_format(family, q, shapes):
    got = mg.field_shapes(mg.parse(family, q), 2)
    for f, s in shapes.items():
        assert got[f] == s


# --------------------------------------------------------------------------------------
# dev_tcgen05.py: its own canonical-layout writer (public jaxwarp names only) agrees with
# jaxwarp's, and the descriptor path gives the logical path's bits.


@pytest.mark.parametrize("q", ["m64n8k16.kind::f16.f32.f16.f16",
                               "m128n16k8.kind::tf32.f32.tf32.tf32",
                               "m64n16k32.kind::f8f6f4.f32.e4m3.e2m1"])
@pytest.mark.parametrize("sw", [0, 32, 64, 128])
@pytest.mark.parametrize("mn_major", [False, True])
def test_dev_tcgen05_store_is_jaxwarps_canonical_layout(q, sw, mn_major):
    import jaxwarp
    from jaxwarp._src.instructions import tcgen05

    instr = jaxwarp.parse_tcgen05(q)
    bits = np.dtype(tcgen05.BITS_DTYPE[instr.a_format])
    rng = np.random.default_rng(sw + mn_major)
    a = rng.integers(0, 1 << min(8 * bits.itemsize, 31), (instr.m, instr.k)).astype(bits)
    desc, size, (lbo, sbo) = dt._layout(instr.m, instr.k, bits.itemsize, mn_major, sw, 1024)
    ours = dt.store(np.zeros(size + 3072, np.uint8), a, 1024, lbo, sbo, sw, mn_major)
    want = tcgen05.write_operand(np.zeros(size + 3072, np.uint8), desc, q, "a", a,
                                 transpose=mn_major)
    np.testing.assert_array_equal(ours, np.asarray(want))


@pytest.mark.parametrize("q", ["m64n8k16.kind::f16.f32.bf16.bf16",
                               "m64n8k32.kind::f8f6f4.f32.e5m2.e3m2"])
def test_dev_tcgen05_descriptor_path_is_the_logical_path(q):
    import jaxwarp

    instr = jaxwarp.parse_tcgen05(q)
    rng = np.random.default_rng(3)
    a = mg.draw(instr.a_format, "normal", (instr.m, instr.k), rng)
    b = mg.draw(instr.b_format, "normal", (instr.k, instr.n), rng)
    c = np.zeros((instr.m, instr.n), np.float32)
    for seed in range(4):  # random layouts and swizzles
        got = np.asarray(dt.run_desc(q, a, b, c, np.random.default_rng(seed)))
        want = np.asarray(jaxwarp.tcgen05_mma_logical(q, a, b, c))
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
