"""Block-scaled MMA (``mma.sync`` / ``tcgen05.mma`` ``.block_scale``) on logical matrices.

Bits against ``tests/data/mmasim_block_scale_sample.npz`` (MMA-Sim 2.1.1 outputs of 16
configurations, every input kind, made by ``tools/crosscheck/dev_block_scale.py gen
--small``), and the rules of the model from first principles.
"""

import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxwarp
from jaxwarp._src.arithmetic import block_scale as bs

DATA = pathlib.Path(__file__).resolve().parents[1] / "data"
SAMPLE = DATA / "mmasim_block_scale_sample.npz"
NAN = 0x7FFFFFFF


def _configs():
    with np.load(SAMPLE) as d:
        return sorted({"/".join(k.split("/")[1:4]) for k in d.files if "block_scale" in k})


CONFIGS = _configs()
# Every test here compiles the model for its shapes (a few CPU-seconds each): the default
# run keeps the sample bits of one configuration per family and kind and the rules; the
# rest (all 16 sample configurations, chains, transformations, every datapath field) are
# marked slow.
# One configuration of each family and kind runs by default, the rest are slow.
FAST = {"mma_block_scale/RTX_Blackwell/m16n8k32.kind::mxf8f6f4.block32.f32.e5m2.e2m1.f32.ue8m0",
        "mma_block_scale/RTX_Blackwell/m16n8k64.kind::mxf4nvf4.block16.f32.e2m1.e2m1.f32.ue4m3",
        "tcgen05_block_scale/Blackwell/m128n8k32.kind::mxf8f6f4.block32.f32.e3m2.e2m3.ue8m0",
        "tcgen05_block_scale/Blackwell/m128n8k64.kind::mxf4.block32.f32.e2m1.e2m1.ue8m0"}


@pytest.mark.parametrize("key", [pytest.param(k, id=k.split("/")[-1], marks=() if k in FAST
                                              else pytest.mark.slow) for k in CONFIGS])
def test_mmasim_sample_bits(key):
    family, _, qualifier = key.split("/")
    with np.load(SAMPLE) as d:
        g = {f: d[f"golden/{key}/{f}"] for f in ("A", "B", "C", "D", "SA", "SB", "kind")}
    assert set(g["kind"]) == {"normal", "wide", "random_bits", "cancel", "tiny", "specials"}
    got = np.asarray(bs.from_golden(family, qualifier, g["A"], g["B"], g["C"], g["SA"],
                                    g["SB"]))
    np.testing.assert_array_equal(got, g["D"])


def test_sample_covers_every_kind_and_family():
    kinds = {bs.parse_qualifier(k.split("/")[0], k.split("/")[2])["kind"] for k in CONFIGS}
    fams = {k.split("/")[0] for k in CONFIGS}
    assert kinds == set(bs.KINDS) and fams == {"mma_block_scale", "tcgen05_block_scale"}


# --------------------------------------------------------------------------------------
# Rules, from first principles.

E2M1 = {0.0: 0, 0.5: 1, 1.0: 2, 1.5: 3, 2.0: 4, 3.0: 5, 4.0: 6, 6.0: 7}


def e2m1(x):
    """Codes of e2m1 values."""
    x = np.asarray(x, np.float64)
    return (np.vectorize(lambda v: E2M1[abs(v)])(x) | np.where(np.signbit(x), 8, 0)).astype(
        np.uint8)


def e4m3(x):
    return np.array(jnp.asarray(x, jnp.float8_e4m3fn).view(jnp.uint8))


def bits(d):
    return np.asarray(d).view(np.uint32)


def run(a, b, c, sa, sb, **kw):
    kw.setdefault("a_format", "e4m3")
    return jaxwarp.mma_block_scale_logical(a, b, jnp.asarray(c, jnp.float32), sa, sb, **kw)


def fp4_case(rng, batch=4, m=16, n=8, k=64, block=16, scale_format="ue8m0"):
    a = rng.integers(0, 16, (batch, m, k)).astype(np.uint8)
    b = rng.integers(0, 16, (batch, k, n)).astype(np.uint8)
    lo, hi = (120, 135) if scale_format == "ue8m0" else (0x28, 0x50)
    sa = rng.integers(lo, hi, (batch, m, k // block)).astype(np.uint8)
    sb = rng.integers(lo, hi, (batch, k // block, n)).astype(np.uint8)
    c = rng.standard_normal((batch, m, n)).astype(np.float32)
    kw = dict(a_format="e2m1", kind="mxf4nvf4", block=block, scale_format=scale_format)
    return (a, b, c, sa, sb), kw


def fp8_case(rng, batch=4, m=16, n=8, k=32):
    a = e4m3(rng.standard_normal((batch, m, k)) * 4)
    b = e4m3(rng.standard_normal((batch, k, n)) * 4)
    sa = rng.integers(120, 135, (batch, m, k // 32)).astype(np.uint8)
    sb = rng.integers(120, 135, (batch, k // 32, n)).astype(np.uint8)
    c = rng.standard_normal((batch, m, n)).astype(np.float32)
    return (a, b, c, sa, sb), dict(a_format="e4m3")


def test_scale_times_two_to_the_k_shifts_the_result_exactly():
    rng = np.random.default_rng(0)
    for (a, b, _, sa, sb), kw in (fp8_case(rng), fp4_case(rng),
                                  fp4_case(rng, scale_format="ue4m3")):
        c = np.zeros(a.shape[:-1] + b.shape[-1:], np.float32)
        d0 = np.asarray(run(a, b, c, sa, sb, **kw))
        if kw.get("scale_format") == "ue4m3":  # e4m3 exponent field + 3
            up, down = sa + (3 << 3), sb
        else:
            up, down = sa + 5, sb - 2
        d1 = np.asarray(run(a, b, c, up, down, **kw))
        assert np.count_nonzero(d0) > d0.size // 2
        np.testing.assert_array_equal(d1, d0 * np.float32(2.0**3))


def test_nan_scale_gives_nan_in_its_row_only():
    rng = np.random.default_rng(1)
    for (a, b, c, sa, sb), kw in (fp8_case(rng, batch=1), fp4_case(rng, batch=1)):
        sa = sa.copy()
        sa[0, 3, -1] = 0xFF
        a = a.copy()
        a[0, 3] = 0  # zero products: still NaN
        d = bits(run(a, b, c, sa, sb, **kw))
        assert (d[0, 3] == NAN).all()
        assert not (np.delete(d[0], 3, axis=0) == NAN).any()


def test_ue4m3_sign_bit_is_ignored_and_0x7f_is_nan():
    rng = np.random.default_rng(2)
    args, kw = fp4_case(rng, scale_format="ue4m3")
    a, b, c, sa, sb = args
    d = bits(run(*args, **kw))
    np.testing.assert_array_equal(bits(run(a, b, c, sa | 0x80, sb | 0x80, **kw)), d)
    sb = sb.copy()
    sb[:, 0, 0] = 0xFF  # 0x7F with the sign bit
    assert (bits(run(a, b, c, sa, sb, **kw))[:, :, 0] == NAN).all()


def test_group_of_zeros_has_e_zero_but_a_cancelling_group_its_scale():
    # Group 0 (k 0..15) has a huge scale: products that cancel to 0 still bring the
    # scale's exponent 2**40 into E and cut group 1's 2**-17 away; all-zero products
    # count at e_zero and leave it.
    a = np.zeros((16, 64))
    b = np.zeros((64, 8))
    a[:, 16:32] = 1.0
    b[16:32, :] = 0.5  # group 1: 16 * 0.5 = 8, times 2**-20
    sa = np.full((16, 4), 127, np.uint8)
    sb = np.full((4, 8), 127, np.uint8)
    sa[:, 0] = 127 + 40
    sa[:, 1] = 127 - 20
    kw = dict(a_format="e2m1", kind="mxf4nvf4", block=16)
    c = np.zeros((16, 8), np.float32)
    assert float(run(e2m1(a), e2m1(b), c, sa, sb, **kw)[0, 0]) == 2.0**-17
    a[:, 0:2] = 1.0
    b[0:2, :] = [[1.0], [-1.0]]
    assert float(run(e2m1(a), e2m1(b), c, sa, sb, **kw)[0, 0]) == 0.0


def test_negative_zero_becomes_plus_zero():
    z8 = np.zeros((16, 32), np.uint8)
    sa, sb = np.full((16, 1), 127, np.uint8), np.full((1, 8), 127, np.uint8)
    d = run(z8, np.zeros((32, 8), np.uint8), np.full((16, 8), -0.0, np.float32), sa, sb)
    assert (bits(d) == 0).all()
    a = e4m3(np.full((16, 32), -1.0))  # 32 * -2**-157 truncates to -0 -> +0
    d = run(a, e4m3(np.ones((32, 8))), np.zeros((16, 8)), np.full((16, 1), 0, np.uint8),
            np.full((1, 8), 127 - 30, np.uint8))
    assert (bits(d) == 0).all()


def test_product_terms_align_on_operand_and_scale_exponents():
    # One product -2**-8 * 2**-20 = -2**-28 (the scale's exponent is the product's) and C:
    # with C = 1, E = 0 and the product is cut at 2**-25 (F = 25); with C = 2**-3 it
    # stays and the exact sum truncates to fp32 below 2**-3.
    a = np.zeros((16, 32))
    b = np.zeros((32, 8))
    a[:, 0] = -1.0
    b[0, :] = 2.0**-8
    sa = np.full((16, 1), 127, np.uint8)
    sb = np.full((1, 8), 127 - 20, np.uint8)
    one = np.ones((16, 8), np.float32)
    assert bits(run(e4m3(a), e4m3(b), one, sa, sb))[0, 0] == 0x3F800000
    f28 = bs.PRODUCT_TERMS.replace(F=28, chunk=4)  # 32 bits hold 4 products at F = 28
    assert bits(run(e4m3(a), e4m3(b), one, sa, sb, datapath=f28))[0, 0] == 0x3F7FFFFF
    eighth = np.full((16, 8), 0.125, np.float32)
    assert bits(run(e4m3(a), e4m3(b), eighth, sa, sb))[0, 0] == 0x3DFFFFFF


@pytest.mark.slow  # about 10 CPU-seconds of compiling
@pytest.mark.parametrize("field, value", [("F", 24), ("chunk", 16), ("e_zero", -100)])
def test_product_datapath_fields_change_bits(field, value):
    rng = np.random.default_rng(3)
    (a, b, c, sa, sb), kw = fp8_case(rng, batch=64)
    if field == "e_zero":  # a zero product at 2**-100 cuts small C and products
        a[:, :, 0] = 0
        sa, sb = np.full_like(sa, 127 - 60), np.full_like(sb, 127 - 60)
        c = (c * 2.0**-110).astype(np.float32)
    d0 = bits(run(a, b, c, sa, sb, **kw))
    d1 = bits(run(a, b, c, sa, sb, datapath=bs.PRODUCT_TERMS.replace(**{field: value}),
                  **kw))
    assert (d0 != d1).any()


def test_group_size_is_where_sums_are_cut():
    # Block 0 (scale 2**40) sets E = 40: the grid is 2**(40 - 35) = 32. Block 1 (scale 1)
    # holds two groups of 16 products summing to 24 each: cut to 0 one by one, but their
    # sum 48 as one group of 32 is cut to 32. C = -2**40 leaves what block 1 adds.
    a = np.zeros((16, 64))
    b = np.zeros((64, 8))
    a[:, 0] = b[0, :] = 1.0
    a[:, 32:] = 1.5
    b[32:, :] = 1.0
    sa = np.full((16, 2), 127, np.uint8)
    sb = np.full((2, 8), 127, np.uint8)
    sa[:, 0] = 127 + 40
    kw = dict(a_format="e2m1", kind="mxf4")
    c = np.full((16, 8), -(2.0**40), np.float32)
    assert float(run(e2m1(a), e2m1(b), c, sa, sb, **kw)[0, 0]) == 0.0
    g32 = bs.GROUP_TERMS.replace(group=32)
    assert float(run(e2m1(a), e2m1(b), c, sa, sb, datapath=g32, **kw)[0, 0]) == 32.0


@pytest.mark.slow  # about 10 CPU-seconds of compiling
@pytest.mark.parametrize("field, value", [("F", 30), ("chunk", 32),
                                          ("e_zero", -60), ("nan_f32", 0x7FC00000)])
def test_group_datapath_fields_change_bits(field, value):
    rng = np.random.default_rng(4)
    (a, b, c, sa, sb), kw = fp4_case(rng, batch=64, block=32)
    if field == "e_zero":
        a[..., :16] = 0
        sa, sb = np.full_like(sa, 127 - 40), np.full_like(sb, 127 - 40)
        c = (c * 2.0**-70).astype(np.float32)
    if field == "nan_f32":
        sa[0, 0, 0] = 0xFF
    d0 = bits(run(a, b, c, sa, sb, **kw))
    d1 = bits(run(a, b, c, sa, sb, datapath=bs.GROUP_TERMS.replace(**{field: value}), **kw))
    assert (d0 != d1).any()


@pytest.mark.slow  # about 10 CPU-seconds of compiling
def test_long_k_is_a_chain_of_instructions():
    rng = np.random.default_rng(5)
    for (a, b, c, sa, sb), kw in (fp8_case(rng, k=96), fp4_case(rng, k=128)):
        d = run(a, b, c, sa, sb, **kw)
        ik = 64 if kw["a_format"] == "e2m1" else 32
        nb = ik // kw.get("block", 32)
        want = jnp.asarray(c)
        for i in range(a.shape[-1] // ik):
            want = run(a[..., i * ik:(i + 1) * ik], b[..., i * ik:(i + 1) * ik, :], want,
                       sa[..., i * nb:(i + 1) * nb], sb[..., i * nb:(i + 1) * nb, :], **kw)
        np.testing.assert_array_equal(bits(d), bits(want))


@pytest.mark.slow  # about 10 CPU-seconds of compiling
def test_tcgen05_is_the_same_arithmetic():
    rng = np.random.default_rng(6)
    (a, b, c, sa, sb), kw = fp4_case(rng, batch=1, m=128, n=16)
    d = run(a, b, c, sa, sb, instruction="tcgen05", **kw)
    d16 = run(a.reshape(8, 16, 64), b[..., :8], c.reshape(8, 16, 16)[..., :8],
              sa.reshape(8, 16, 4), sb[..., :8], **kw)
    np.testing.assert_array_equal(bits(d)[0].reshape(8, 16, 16)[..., :8], bits(d16))


def test_fp8_dtypes_and_high_bits_of_codes():
    rng = np.random.default_rng(7)
    (a, b, c, sa, sb), kw = fp8_case(rng, batch=1)
    d = bits(run(a, b, c, sa, sb, **kw))
    np.testing.assert_array_equal(
        bits(run(a.view(jnp.float8_e4m3fn), b.view(jnp.float8_e4m3fn), c, sa, sb, **kw)), d)
    (a, b, c, sa, sb), kw = fp4_case(rng, batch=1)
    # Bits outside e2m1's bits 3:0: refused when concrete, ignored when traced outside
    # jaxwarp.checked (which reports them).
    with pytest.raises(ValueError, match=r"e2m1 codes in bits 3:0"):
        run(a | 0xF0, b, c, sa, sb, **kw)
    np.testing.assert_array_equal(
        bits(jax.jit(lambda *x: run(*x, **kw))(a | 0xF0, b | 0x30, c, sa, sb)),
        bits(run(a, b, c, sa, sb, **kw)))


@pytest.mark.slow  # about 10 CPU-seconds of compiling
def test_jit_vmap_and_batch_agree():
    rng = np.random.default_rng(8)
    (a, b, c, sa, sb), kw = fp4_case(rng, batch=3)
    d = bits(run(a, b, c, sa, sb, **kw))
    f = jax.jit(lambda *x: run(*x, **kw))
    np.testing.assert_array_equal(bits(f(a, b, c, sa, sb)), d)
    np.testing.assert_array_equal(bits(jax.vmap(f)(a, b, c, sa, sb)), d)
    # broadcast: one B and its scales for every A
    d2 = bits(run(a, b[0], c, sa, sb[0], **kw))
    np.testing.assert_array_equal(d2[1], bits(run(a[1], b[0], c[1], sa[1], sb[0], **kw)))


def test_parse_qualifier_rejects_bad_text():
    with pytest.raises(ValueError, match="not a mma_block_scale qualifier"):
        bs.parse_qualifier("mma_block_scale", "m16n8k32.kind::mxf8f6f4.f32.e4m3.e4m3.f32")
    with pytest.raises(ValueError, match="has no shape m16n8k64"):
        bs.parse_qualifier("mma_block_scale",
                           "m16n8k64.kind::mxf8f6f4.block32.f32.e4m3.e4m3.f32.ue8m0")
