"""Tests of the ``tcgen05.mma`` front-end (jaxwarp/_src/instructions/tcgen05.py, smem.py).

Reference data: tests/data/fixtures/mmasim_tcgen05.npz, outputs of MMA-Sim 2.1.1's Blackwell
model (``mmasim.nv_ptx.TCGen05MMA``) made by ``tools/crosscheck/dev_tcgen05.py`` (``gen
--small``, ``ref``, ``testdata``): every dense qualifier of kind::f16 / kind::tf32 and all
25 A/B pairs of kind::f8f6f4 (fp8, fp6, fp4) with both D types at m64n8, one trial per
input kind (normal, wide, random_bits, cancel, tiny, specials). MMA-Sim itself is never
needed here.
"""

from __future__ import annotations

import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jaxwarp
from jaxwarp._src.arithmetic import datapath
from jaxwarp._src.catalogue import isa
from jaxwarp._src.instructions import tcgen05 as T
from jaxwarp._src.instructions import tcgen05_parse
from jaxwarp._src.layouts import smem

ROOT = pathlib.Path(__file__).resolve().parents[2]
REF = np.load(ROOT / "tests" / "data" / "fixtures" / "mmasim_tcgen05.npz")
QUALIFIERS = sorted({k.rsplit("/", 1)[0] for k in REF.files if k != "device"})


def _c(bits):
    return bits.view(np.float32 if bits.dtype == np.uint32 else np.float16)


def _bits(d):
    d = np.asarray(d)
    return d.view(np.uint32 if d.dtype.itemsize == 4 else np.uint16)


# --------------------------------------------------------------------------------------
# Bits against the reference model.


_FP6FP4 = ("e3m2", "e2m3", "e2m1")
#: fp6 / fp4 qualifiers run by default (the other 38 are slow): every fp6 / fp4 type as A
#: and as B, with both D types.
_FAST_FP6FP4 = ("m64n8k32.kind::f8f6f4.f32.e2m1.e2m1", "m64n8k32.kind::f8f6f4.f16.e3m2.e2m3",
                "m64n8k32.kind::f8f6f4.f32.e4m3.e3m2", "m64n8k32.kind::f8f6f4.f16.e2m1.e5m2",
                "m64n8k32.kind::f8f6f4.f32.e2m3.e2m1")


def _ref_param(q):
    slow = any(t in q.split(".")[3:] for t in _FP6FP4) and q not in _FAST_FP6FP4
    return pytest.param(q, marks=pytest.mark.slow) if slow else q


@pytest.mark.parametrize("q", [_ref_param(q) for q in QUALIFIERS])
def test_logical_matches_mmasim(q):
    a, b, c, want = (REF[f"{q}/{f}"] for f in "ABCD")
    got = _bits(T.tcgen05_mma_logical(q, a, b, _c(c)))  # every trial at once (batch)
    np.testing.assert_array_equal(got, want)


def test_reference_covers_every_input_kind():
    kinds = {str(k) for q in QUALIFIERS for k in REF[f"{q}/kind"]}
    assert kinds == {"normal", "wide", "random_bits", "cancel", "tiny", "specials"}
    assert {q.split(".")[1] for q in QUALIFIERS} == {"kind::f16", "kind::tf32",
                                                     "kind::f8f6f4"}
    f8f6f4 = {(q.split(".")[3], q.split(".")[4]) for q in QUALIFIERS if "f8f6f4" in q}
    assert len(f8f6f4) == 25 and set(_FAST_FP6FP4) <= set(QUALIFIERS)


# --------------------------------------------------------------------------------------
# Qualifiers and the instruction descriptor.


def test_parse_both_spellings():
    p = tcgen05_parse.parse_tcgen05("tcgen05.mma.cta_group::1.m128n256k16.kind::f16.f32.bf16.bf16")
    assert p == tcgen05_parse.parse_tcgen05("m128n256k16.kind::f16.f32.bf16.bf16")
    assert (p.m, p.n, p.k, p.kind, p.d_format, p.a_format, p.b_format) == (
        128, 256, 16, "f16", "f32", "bf16", "bf16")
    assert p.opcode == "tcgen05.mma.cta_group::1.kind::f16"
    assert tcgen05_parse.parse_tcgen05(p.qualifier) == p


@pytest.mark.parametrize("q, exc, must", [
    ("m64n8k16.kind::f16.f16.bf16.bf16", ValueError, "dtype 'f16'"),
    ("m64n8k16.kind::f16.f32.f16.bf16", ValueError, "btype 'bf16'"),
    ("m32n8k16.kind::f16.f32.f16.f16", ValueError, "M must be one of (64, 128)"),
    ("m64n12k16.kind::f16.f32.f16.f16", ValueError, "N=12"),
    ("m64n8k32.kind::f16.f32.f16.f16", ValueError, "K must be 16"),
    ("m64n40k32.kind::i8.s32.s8.s8", ValueError, "N=40"),
    ("m64n8k32.kind::mxf8f6f4.f32.e4m3.e4m3", ValueError, "is not a kind"),
    ("tcgen05.mma.cta_group::2.m128n16k16.kind::f16.f32.f16.f16", NotImplementedError,
     "cta_group::2"),
    ("tcgen05.mma.ws.cta_group::1.m64n64k16.kind::f16.f32.f16.f16", NotImplementedError,
     ".ws"),
])
def test_parse_refuses(q, exc, must):
    with pytest.raises(exc) as e:
        tcgen05_parse.parse_tcgen05(q)
    assert must in str(e.value)


ALL_QUALIFIERS = [f"m{m}n{n}k{r.ks[0]}.kind::{r.group_name}.{d}.{a}.{b}"
                  for r in isa.rows("tcgen05") for (m, n, _) in r.shapes
                  for _, d in r.cd for a in r.a_formats for b in r.b_formats(a)]


@settings(max_examples=200, derandomize=True, deadline=None)
@given(st.sampled_from(ALL_QUALIFIERS), st.booleans(), st.booleans(), st.booleans(),
       st.booleans(), st.booleans())
def test_instr_descriptor_round_trip(q, na, nb, ta, tb, sat):
    instr = tcgen05_parse.parse_tcgen05(q)
    if instr.kind == "i8":
        na = nb = False
    else:
        sat = False
    idesc = tcgen05_parse.make_instr_descriptor(q, neg_a=na, neg_b=nb, transpose_a=ta,
                                    transpose_b=tb, saturate=sat)
    assert idesc.dtype == np.uint32
    f = tcgen05_parse.decode_instr_descriptor(idesc, instr.kind)
    assert f == (instr, na, nb, ta, tb, sat)


def test_instr_descriptor_fields():
    # PTX ISA table: dtype f32 = 1 at bits 4-5, bf16 = 1 at 7-9 and 10-12, N >> 3 at 17,
    # M >> 4 at 24; i8: s8 = 1, saturate bit 3, dtype s32 = 2.
    assert int(tcgen05_parse.make_instr_descriptor("m128n256k16.kind::f16.f32.bf16.bf16")) == (
        1 << 4 | 1 << 7 | 1 << 10 | 32 << 17 | 8 << 24)
    assert int(tcgen05_parse.make_instr_descriptor("m64n16k32.kind::i8.s32.s8.u8",
                                                   saturate=True)) == (
        1 << 3 | 2 << 4 | 1 << 7 | 0 << 10 | 2 << 17 | 4 << 24)
    assert int(tcgen05_parse.make_instr_descriptor("m64n8k32.kind::f8f6f4.f16.e5m2.e4m3",
                                       neg_b=True)) == (1 << 7 | 1 << 14 | 1 << 17 | 4 << 24)
    with pytest.raises(NotImplementedError, match="sparsity"):
        tcgen05_parse.decode_instr_descriptor(int(tcgen05_parse.make_instr_descriptor(
            "m64n8k16.kind::f16.f32.f16.f16")) | 4, "f16")
    with pytest.raises(ValueError, match="atype code 2"):
        tcgen05_parse.decode_instr_descriptor(2 << 7 | 1 << 4 | 1 << 17 | 4 << 24, "f16")


@settings(max_examples=200, derandomize=True, deadline=None)
@given(st.integers(0, 2**14 - 1), st.integers(0, 2**14 - 1), st.integers(0, 2**14 - 1),
       st.sampled_from(list(smem.TCGEN05_SWIZZLE_MODE)), st.integers(0, 7),
       st.integers(0, 1))
def test_smem_descriptor_round_trip(start, lbo, sbo, sw, base, mode):
    d = jaxwarp.make_smem_descriptor(16 * start, 16 * lbo, 16 * sbo, swizzle=sw,
                                     base_offset=base, lbo_mode=mode)
    assert (int(d) >> 46) & 7 == 1  # the fixed version bits
    assert jaxwarp.decode_smem_descriptor(d) == (16 * start, 16 * lbo, 16 * sbo, base,
                                                 mode, sw)


def test_smem_descriptor_is_not_wgmma_descriptor():
    w = jaxwarp.make_descriptor(1024, 16, 1024, swizzle=128)
    with pytest.raises(ValueError, match="bits 46-48 must be 0b001"):
        jaxwarp.decode_smem_descriptor(w)
    # The 3-bit swizzle field at bits 61-63 reads, at bits 62-63, as wgmma's 2-bit one
    # (0 none, 1 128B, 2 64B, 3 32B); the 128B swizzle with 32-byte atoms is bit 61.
    for sw in (0, 32, 64, 128):
        t = jaxwarp.make_smem_descriptor(1024, 16, 1024, swizzle=sw)
        assert jaxwarp.decode_descriptor(t).swizzle == sw
    t = jaxwarp.make_smem_descriptor(1024, 16, 1024, swizzle="128B_base32B")
    assert int(t) >> 61 == 1
    with pytest.raises(ValueError, match="swizzle mode 3"):
        jaxwarp.decode_smem_descriptor(int(t) & ~(7 << 61) | 3 << 61)


# --------------------------------------------------------------------------------------
# The descriptor path equals the logical path.


def _layout(rows, k, ebytes, mn_major, sw, base):
    if not mn_major:
        lbo, sbo = (128, 256) if sw == 0 else (16, 8 * sw)
        size = sbo * (rows // 8)
    elif sw == 0:
        sbo, lbo = 128, 128 * -(-rows * ebytes // 16)
        size = lbo * -(-k // 8)
    else:
        lbo = 8 * sw
        sbo = lbo * -(-rows * ebytes // sw)
        size = sbo * -(-k // 8)
    return jaxwarp.make_smem_descriptor(base, lbo, sbo, swizzle=sw), size


def _random_bits(rng, shape, dtype):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, shape, endpoint=True).astype(dtype)


_SLOW = pytest.mark.slow
DESC_CASES = [
    ("m64n8k16.kind::f16.f32.f16.f16", False, False, 0, 0),
    pytest.param("m128n16k16.kind::f16.f32.bf16.bf16", True, False, 128, 64, marks=_SLOW),
    pytest.param("m64n24k16.kind::f16.f16.f16.f16", False, True, 32, 0, marks=_SLOW),
    pytest.param("m64n8k8.kind::tf32.f32.tf32.tf32", True, True, 64, 128, marks=_SLOW),
    ("m128n8k32.kind::f8f6f4.f32.e4m3.e5m2", True, True, 128, 32),
    pytest.param("m64n32k32.kind::i8.s32.s8.u8", True, False, 0, 64, marks=_SLOW),
]


@pytest.mark.parametrize("q, ta, tb, swa, swb", DESC_CASES)
def test_descriptor_path_equals_logical(q, ta, tb, swa, swb):
    rng = np.random.default_rng(hash(q) % 2**32)
    instr = tcgen05_parse.parse_tcgen05(q)
    a = _random_bits(rng, (instr.m, instr.k), tcgen05_parse.BITS_DTYPE[instr.a_format])
    b = _random_bits(rng, (instr.k, instr.n), tcgen05_parse.BITS_DTYPE[instr.b_format])
    if instr.kind != "i8":  # finite floats of moderate size: wrap exponents
        a = a & np.asarray(~(3 << (a.dtype.itemsize * 8 - 3)) & (256 ** a.dtype.itemsize - 1),
                           a.dtype)
        b = b & np.asarray(~(3 << (b.dtype.itemsize * 8 - 3)) & (256 ** b.dtype.itemsize - 1),
                           b.dtype)
    d = np.asarray(rng.standard_normal((instr.m, instr.n)) * 4).astype(
        tcgen05_parse.D_DTYPE[instr.d_format])
    da, size_a = _layout(instr.m, instr.k, a.dtype.itemsize, ta, swa, 0)
    base_b = -(-size_a // 1024) * 1024
    db, size_b = _layout(instr.n, instr.k, b.dtype.itemsize, tb, swb, base_b)
    mem = jnp.zeros(base_b + size_b + 1024, jnp.uint8)
    mem = T.write_operand(mem, da, q, "a", a, transpose=ta)
    mem = T.write_operand(mem, db, q, "b", b, transpose=tb)
    np.testing.assert_array_equal(T.read_operand(mem, da, q, "a", transpose=ta), a)
    np.testing.assert_array_equal(T.read_operand(mem, db, q, "b", transpose=tb), b)
    neg = instr.kind != "i8"
    idesc = tcgen05_parse.make_instr_descriptor(q, transpose_a=ta, transpose_b=tb, neg_a=neg)
    got = T.tcgen05_mma(instr.opcode, d, da, db, idesc, mem)
    want = T.tcgen05_mma_logical(q, a, b, d, neg_a=neg)
    np.testing.assert_array_equal(np.asarray(got).view(np.uint8),
                                  np.asarray(want).view(np.uint8))
    if not ta:  # A from tensor memory (a logical array): the same bits
        got_t = T.tcgen05_mma(instr.opcode, d, a, db, idesc, mem)
        np.testing.assert_array_equal(np.asarray(got_t).view(np.uint8),
                                      np.asarray(want).view(np.uint8))


def test_swizzle_reads_other_bytes():
    # The same descriptor fields with and without a swizzle read different bytes: the
    # swizzle field is read.
    q = "m64n8k16.kind::f16.f32.f16.f16"
    mem = jnp.arange(16384, dtype=jnp.uint32).astype(jnp.uint8)
    plain = T.read_operand(mem, jaxwarp.make_smem_descriptor(0, 16, 1024), q, "a")
    sw = T.read_operand(mem, jaxwarp.make_smem_descriptor(0, 16, 1024, swizzle=128), q, "a")
    assert not np.array_equal(np.asarray(plain), np.asarray(sw))


# --------------------------------------------------------------------------------------
# Modifiers, from first principles.


def test_scale_input_d_is_exact_power_of_two():
    q = "m64n8k16.kind::f16.f32.f16.f16"
    a = jnp.zeros((64, 16), jnp.float16)
    b = jnp.ones((16, 8), jnp.float16)
    rng = np.random.default_rng(1)
    d = jnp.asarray(rng.standard_normal((64, 8)), jnp.float32)
    for s in (0, 1, 7, 15):
        got = T.tcgen05_mma_logical(q, a, b, d, scale_input_d=s)
        np.testing.assert_array_equal(np.asarray(got), np.asarray(d) * np.float32(2.0 ** -s))
    # with products: 3 * 1 + 8 * 2**-3 = 4 exactly
    a3 = jnp.zeros((64, 16), jnp.float16).at[:, 0].set(3.0)
    got = T.tcgen05_mma_logical(q, a3, b, jnp.full((64, 8), 8.0, jnp.float32),
                                scale_input_d=3)
    assert float(got[0, 0]) == 4.0


def test_scale_input_d_only_for_f16_and_tf32_kinds():
    a = jnp.ones((64, 32), jnp.float8_e4m3fn)
    with pytest.raises(ValueError, match="kind::f16 and kind::tf32 only"):
        T.tcgen05_mma_logical("m64n8k32.kind::f8f6f4.f32.e4m3.e4m3", a, a[:, :8].T.T[:32],
                              jnp.zeros((64, 8), jnp.float32), scale_input_d=1)
    h = jnp.ones((16, 16), jnp.float16)
    with pytest.raises(ValueError, match="only for tcgen05"):
        jaxwarp.mma(h, h, jnp.zeros((16, 16), jnp.float32), a_format="f16", c_format="f32",
                    d_format="f32", scale_input_d=2)


def test_enable_input_d():
    q = "m64n8k32.kind::f8f6f4.f32.e4m3.e4m3"
    a = jnp.ones((64, 32), jnp.float8_e4m3fn)
    b = jnp.ones((32, 8), jnp.float8_e4m3fn)
    d = jnp.full((64, 8), jnp.nan, jnp.float32)
    assert float(T.tcgen05_mma_logical(q, a, b, d, enable_input_d=False)[0, 0]) == 32.0
    f = jax.jit(lambda p: T.tcgen05_mma_logical(q, a, b, d, enable_input_d=p))
    assert float(f(jnp.bool_(False))[0, 0]) == 32.0
    assert np.isnan(float(f(jnp.bool_(True))[0, 0]))


def test_negate_flips_products():
    q = "m64n8k16.kind::f16.f32.f16.f16"
    rng = np.random.default_rng(3)
    a = jnp.asarray(rng.standard_normal((64, 16)), jnp.float16)
    b = jnp.asarray(rng.standard_normal((16, 8)), jnp.float16)
    z = jnp.zeros((64, 8), jnp.float32)
    pos = T.tcgen05_mma_logical(q, a, b, z)
    neg = T.tcgen05_mma_logical(q, a, b, z, neg_a=True)
    both = T.tcgen05_mma_logical(q, a, b, z, neg_a=True, neg_b=True)
    np.testing.assert_array_equal(np.asarray(neg), -np.asarray(pos) + 0.0)
    np.testing.assert_array_equal(np.asarray(both), np.asarray(pos))


def test_i8_exact_and_saturate():
    rng = np.random.default_rng(5)
    a = rng.integers(-128, 128, (128, 32)).astype(np.int8)
    b = rng.integers(0, 256, (32, 16)).astype(np.uint8)
    d = rng.integers(-2**31, 2**31, (128, 16)).astype(np.int32)
    q = "m128n16k32.kind::i8.s32.s8.u8"
    exact = a.astype(np.int64) @ b.astype(np.int64) + d
    wrap = ((exact + 2**31) % 2**32 - 2**31).astype(np.int32)
    np.testing.assert_array_equal(np.asarray(T.tcgen05_mma_logical(q, a, b, d)), wrap)
    sat = np.clip(exact, -2**31, 2**31 - 1).astype(np.int32)
    np.testing.assert_array_equal(
        np.asarray(T.tcgen05_mma_logical(q, a, b, d, saturate=True)), sat)


def test_mma_instruction_tcgen05_equals_logical():
    q = QUALIFIERS[0]
    a, b, c = (REF[f"{q}/{f}"][0] for f in "ABC")
    instr = tcgen05_parse.parse_tcgen05(q)
    st_ = datapath.STORAGE_DTYPE
    got = jaxwarp.mma(a.view(st_[instr.a_format]), b.view(st_[instr.b_format]), _c(c),
                      a_format=instr.a_format, b_format=instr.b_format, c_format=instr.d_format,
                      d_format=instr.d_format, instruction="tcgen05", arch="sm_100a")
    np.testing.assert_array_equal(_bits(got), REF[f"{q}/D"][0])


def test_fp8_kind_keeps_full_alignment():
    # tcgen05 kind::f8f6f4 aligns at F = 25 (sm_90 wgmma fp8: F = 13): 1 + 2**-16 is kept.
    dp = jaxwarp.datapath_for("sm_100a", "tcgen05", "e4m3", 32)
    assert (dp.F, dp.block_k, dp.sum_mbits) == (25, 32, 23)
    f8 = jnp.float8_e4m3fn
    a = jnp.zeros((64, 32), f8).at[:, :2].set(jnp.array([1.0, 2.0 ** -8], f8))
    b = jnp.zeros((32, 8), f8).at[:2].set(jnp.array([[1.0], [2.0 ** -8]], f8))
    z = jnp.zeros((64, 8), jnp.float32)
    got = T.tcgen05_mma_logical("m64n8k32.kind::f8f6f4.f32.e4m3.e4m3", a, b, z)
    assert float(got[0, 0]) == 1 + 2.0 ** -16
    h100 = jaxwarp.mma(a, b, z, a_format="e4m3", c_format="f32", d_format="f32",
                       instruction="wgmma", arch="sm_90a")
    assert float(h100[0, 0]) == 1.0


def test_arch_must_have_tcgen05():
    q = "m64n8k16.kind::f16.f32.f16.f16"
    a, b = jnp.ones((64, 16), jnp.float16), jnp.ones((16, 8), jnp.float16)
    d = jnp.zeros((64, 8), jnp.float32)
    with pytest.raises(ValueError, match="needs sm_100a"):
        T.tcgen05_mma_logical(q, a, b, d, arch="sm_90a")
    assert float(T.tcgen05_mma_logical(q, a, b, d, arch="sm_103a")[0, 0]) == 16.0


def test_matmul_runs_on_tcgen05():
    # M = 100 and N = 30 are zero-padded to the 64 / 8 tiles; f16 blocks of 16 at F = 25
    # are the sm_90 wgmma f16 datapath too, so the bits equal wgmma's; fp8 differs (F).
    rng = np.random.default_rng(11)
    x = jnp.asarray(rng.standard_normal((100, 64)), jnp.float32)
    y = jnp.asarray(rng.standard_normal((64, 30)), jnp.float32)
    got = jaxwarp.matmul(x, y, operand_format="f16", instruction="tcgen05", arch="sm_100a")
    want = jaxwarp.matmul(x, y, operand_format="f16", instruction="wgmma", arch="sm_90a")
    np.testing.assert_array_equal(np.asarray(got).view(np.uint32),
                                  np.asarray(want).view(np.uint32))
    with pytest.raises(ValueError, match="needs sm_100a"):
        jaxwarp.matmul(x, y, operand_format="f16", instruction="tcgen05", arch="sm_90a")


def test_i8_shapes_are_the_isa_table():
    # PTX ISA, tcgen05 "Matrix Shape" table, kind::i8 / no .ws / cta_group::1 / dense:
    # 64xNxK and 128xNxK, N = {8, 16, 24, 32, 48, ... 256} ("steps of 16 after N > 32"),
    # K = 32. The float kinds take every multiple of 8 (N = 40 is f8f6f4's, not i8's).
    ns = [8, 16, 24] + list(range(32, 257, 16))
    assert set(isa.shapes("tcgen05", "s8")) == {(m, n, 32) for m in (64, 128) for n in ns}
    assert T.parse_tcgen05("m128n24k32.kind::i8.s32.s8.u8").n == 24
    assert T.parse_tcgen05("m64n40k32.kind::f8f6f4.f32.e4m3.e4m3").n == 40
    for n in (40, 264):
        with pytest.raises(ValueError, match=f"m64n{n}k32"):
            T.parse_tcgen05(f"m64n{n}k32.kind::i8.s32.s8.s8")


def test_i8_is_not_in_sm103a():
    # PTX ISA target notes: .kind::i8 needs sm_100a (or sm_110a); not sm_103a (sm_100a
    # runs it in test_i8_exact_and_saturate; the float kinds run on sm_103a).
    q = "m64n8k32.kind::i8.s32.s8.s8"
    a, b = jnp.ones((64, 32), jnp.int8), jnp.ones((32, 8), jnp.int8)
    d = jnp.zeros((64, 8), jnp.int32)
    with pytest.raises(ValueError, match="needs sm_100a; sm_103 does not issue it"):
        T.tcgen05_mma_logical(q, a, b, d, arch="sm_103a")
