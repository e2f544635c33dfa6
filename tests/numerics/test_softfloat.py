"""Tests of jaxwarp._src.numerics.softfloat against NumPy / exact rational arithmetic."""

import doctest
from fractions import Fraction

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from jaxwarp._src.numerics import softfloat
from jaxwarp._src.numerics.convert import round_to
from jaxwarp._src.numerics.softfloat import (
    add_rn,
    bitlen,
    decode,
    emin,
    encode,
    lsb_min,
    round_sig,
    shift,
    term,
)

_DT = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "e4m3": ml_dtypes.float8_e4m3fn,
       "e5m2": ml_dtypes.float8_e5m2, "f32": np.float32}
_UI = {1: np.uint8, 2: np.uint16, 4: np.uint32}


def _all_patterns(fmt):
    w = np.dtype(_DT[fmt]).itemsize
    return np.arange(1 << (8 * w), dtype=np.uint64).astype(_UI[w])


# Slow: the same examples run by default in tests/test_docs.py::test_docstring_example.
@pytest.mark.slow
def test_doctests():
    assert doctest.testmod(softfloat).failed == 0


@pytest.mark.parametrize("fmt", ["f16", "bf16", "e4m3", "e5m2"])
def test_decode_every_pattern(fmt):
    u = _all_patterns(fmt)
    with np.errstate(invalid="ignore"):
        vals = u.view(_DT[fmt]).astype(np.float64)
    neg, lsb, sig, lead, inf, nan = (np.asarray(v) for v in jax.jit(
        lambda x: decode(x, fmt))(jnp.asarray(u.astype(np.uint32))))
    np.testing.assert_array_equal(nan, np.isnan(vals))
    np.testing.assert_array_equal(inf, np.isinf(vals))
    fin = np.isfinite(vals)
    np.testing.assert_array_equal((np.where(neg, -1.0, 1.0) * sig * 2.0 ** lsb)[fin],
                                  np.abs(vals[fin]) * np.where(neg, -1.0, 1.0)[fin])
    np.testing.assert_array_equal(neg, np.signbit(vals) & ~np.isnan(vals) | (neg & np.isnan(vals)))
    nz = fin & (vals != 0)
    np.testing.assert_array_equal(lead[nz], np.floor(np.log2(np.abs(vals[nz]))).astype(int))
    assert (lead[~nz] == softfloat.NEG_BIG).all()


def test_decode_tf32_ignores_low_bits_and_sub_emin():
    u = jnp.asarray(np.array([0x3F801FFF, 0x00001FFF, 0x00002000], np.uint32))
    _, lsb, sig, lead, _, _ = decode(u, "tf32", sub_emin=True)
    assert sig.tolist() == [1024, 0, 1]
    assert lsb.tolist() == [-10, -136, -136]
    assert lead.tolist() == [0, softfloat.NEG_BIG, emin("tf32")]
    assert lsb_min("tf32") == -136


def _f32_sample(n, seed=0):
    rng = np.random.default_rng(seed)
    u = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
    u[: n // 4] = (u[: n // 4] & 0x87FFFFFF) | 0x30000000  # near f16 / bf16 small range
    u[n // 4: n // 2] &= 0x807FFFFF  # f32 subnormals and zeros
    return u


@pytest.mark.parametrize("fmt", ["f16", "bf16"])
@pytest.mark.parametrize("mode", ["rn", "rz", "rna"])
def test_round_encode_matches_round_to(fmt, mode):
    u = _f32_sample(1 << 16)
    x = u.view(np.float32)
    keep = np.isfinite(x) & (np.abs(x) < float(ml_dtypes.finfo(_DT[fmt]).max) / 2)
    u, x = u[keep], x[keep]
    mb = {"f16": 10, "bf16": 7}[fmt]

    @jax.jit
    def ours(v):
        neg, lsb, sig, _, _, _ = decode(v, "f32")
        q, l2 = round_sig(sig.astype(jnp.uint32), lsb, emin(fmt), mb, mode)
        return encode(neg, q, l2, fmt)

    got = np.asarray(ours(jnp.asarray(u)))
    want = np.asarray(round_to(jnp.asarray(x), fmt, mode)).astype(_DT[fmt]).view(np.uint16)
    np.testing.assert_array_equal(got, want.astype(np.uint32))


def test_round_sig_rounds_far_below_to_zero_or_one_quantum():
    mag = jnp.asarray(np.array([0xFFFFFFFF, 0x80000000, 0x80000001, 1], np.uint32))
    g = jnp.int32(-200)  # every value is far below the f16 grid (2**-24) except none
    for mode in ("rz", "rn", "rna"):
        q, _ = round_sig(mag, g, -14, 10, mode)
        assert q.tolist() == [0, 0, 0, 0]
    # exactly half a quantum: ties
    q, lsb = round_sig(jnp.uint32(1), jnp.int32(-25), -14, 10, "rn")
    assert (int(q), int(lsb)) == (0, -24)
    q, lsb = round_sig(jnp.uint32(1), jnp.int32(-25), -14, 10, "rna")
    assert (int(q), int(lsb)) == (1, -24)
    with pytest.raises(ValueError, match="mode"):
        round_sig(jnp.uint32(1), jnp.int32(0), -14, 10, "ru")


def test_encode_overflow_and_signed_zero():
    assert int(encode(jnp.bool_(False), jnp.uint32(1), jnp.int32(16), "f16")) == 0x7C00
    assert int(encode(jnp.bool_(True), jnp.uint32(0), jnp.int32(0), "f16")) == 0x8000
    # e4m3 has no infinity: 2**8 * 1.875 is encoded as the NaN magnitude, the caller decides
    assert int(encode(jnp.bool_(False), jnp.uint32(15), jnp.int32(5), "e4m3")) == 0x7F


def test_bitlen_shift():
    x = jnp.asarray(np.array([0, 1, 2, 3, 255, 2**31 - 1], np.int32))
    assert bitlen(x).tolist() == [0, 1, 2, 2, 8, 31]
    assert shift(jnp.int32(3), jnp.asarray(np.array([0, 1, -1, -2, 31, -32], np.int32))
                 ).tolist() == [3, 6, 1, 0, -2**31, 0]


def test_add_rn_matches_numpy_f32():
    rng = np.random.default_rng(1)
    n = 1 << 15
    a, b = _f32_sample(n, 2), _f32_sample(n, 3)
    # mix exponents: b near a in half the cases, so that cancellation happens
    near = rng.random(n) < 0.5
    b = np.where(near, (a ^ 0x80000000) + rng.integers(-40, 40, n).astype(np.uint32), b)
    b[:8] = [0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0, 0x80000000, 1, 0x80000001]
    a[:8] = [0x80000000, 0xFF800000, 0xFF800000, 0x3F800000, 0x80000000, 0, 0x80000001, 1]
    with np.errstate(all="ignore"):
        want = (a.view(np.float32) + b.view(np.float32)).view(np.uint32)
    got = np.asarray(jax.jit(lambda x, y: add_rn(term(x, "f32"), term(y, "f32"), "f32",
                                                  0x7FFFFFFF))(jnp.asarray(a), jnp.asarray(b)))
    nan = np.isnan(want.view(np.float32))
    assert (got[nan] == 0x7FFFFFFF).all()
    np.testing.assert_array_equal(got[~nan], want[~nan])


# --------------------------------------------------------------------------- 64-bit path


def _f64_values(n=4096, seed=3):
    rng = np.random.default_rng(seed)
    u = rng.integers(0, 2**64, n, dtype=np.uint64)  # every exponent, subnormals, NaN, inf
    x = u.view(np.float64).copy()
    x[: n // 2] = rng.uniform(-2, 2, n // 2) * 2.0 ** rng.integers(-160, 140, n // 2)
    return x


def test_decode_encode_f64_round_trip():
    x = _f64_values()
    with jax.enable_x64(True):
        u = jnp.asarray(x.view(np.uint64))
        neg, lsb, sig, _, inf, nan = decode(u, "f64")
        assert sig.dtype == jnp.int64
        back = np.asarray(encode(neg, sig.astype(jnp.uint64), lsb, "f64"))
    finite = np.isfinite(x)
    np.testing.assert_array_equal(back[finite], x.view(np.uint64)[finite])
    np.testing.assert_array_equal(np.asarray(inf), np.isinf(x))
    np.testing.assert_array_equal(np.asarray(nan), np.isnan(x))


def _round_exact(f, emin_, mb):
    """f rounded to nearest even on the grid of mb fraction bits, exponents >= emin_."""
    if f == 0:
        return f
    e = abs(f).numerator.bit_length() - abs(f).denominator.bit_length()
    if Fraction(2) ** e > abs(f):
        e -= 1
    step = Fraction(2) ** (max(e, emin_) - mb)
    q, r = divmod(f / step, 1)
    q += 1 if r > Fraction(1, 2) or (r == Fraction(1, 2) and q % 2 == 1) else 0
    return q * step


@pytest.mark.parametrize("fmt", ["f32", "f16", "bf16"])
def test_round_sig_f64_once_to_nearest(fmt):
    # uint64 significands rounded once onto a narrower grid: NumPy's float64 -> float32 /
    # float16 conversions round once (bf16: exact rationals, ml_dtypes goes via float32).
    x = _f64_values()
    x = x[np.isfinite(x) & (np.abs(x) < 2.0**100)]
    with jax.enable_x64(True):
        neg, lsb, sig, _, _, _ = decode(jnp.asarray(x.view(np.uint64)), "f64")
        mb = {"f32": 23, "f16": 10, "bf16": 7}[fmt]
        q, l2 = round_sig(sig.astype(jnp.uint64), lsb, emin(fmt), mb, "rn")
        q, l2 = np.asarray(q), np.asarray(l2)
    got = np.where(np.asarray(neg), -1.0, 1.0) * q.astype(np.float64) * np.exp2(l2.astype(float))
    if fmt == "bf16":
        for v, g in zip(x[:500], got[:500], strict=True):
            assert Fraction(g) == _round_exact(Fraction(v), -126, mb), v
        return
    with np.errstate(over="ignore"):
        want = x.astype({"f32": np.float32, "f16": np.float16}[fmt]).astype(np.float64)
    ok = np.isfinite(want)
    np.testing.assert_array_equal(got[ok], want[ok])


# --- The kernel forms: the same rounding as round_sig and encode. ----------------------


@pytest.mark.parametrize("kept", [24, pytest.param(14, marks=pytest.mark.slow)])
def test_rz_f32_bits_is_round_sig_and_encode(kept):
    # int32 magnitudes (uint32 bits) at exponents from far below fp32's subnormals to past
    # its largest, both signs, n kept bits: round_sig toward zero on fp32's grid with
    # n - 1 fraction bits, encoded (an overflow is an infinity), a zero +0.
    rng = np.random.default_rng(kept)
    mag = rng.integers(0, 1 << 32, 4000, dtype=np.uint64).astype(np.uint32)
    mag >>= rng.integers(0, 32, mag.shape).astype(np.uint32)
    mag[:7] = [0, 1, 3, 0xFFFFFFFF, 0x80000000, 0x00FFFFFF, 0x01000001]
    g = rng.integers(-200, 140, mag.shape).astype(np.int32)
    neg = rng.random(mag.shape) < 0.5
    got = softfloat.rz_f32_bits(jnp.asarray(mag.view(np.int32)), jnp.asarray(neg),
                                jnp.asarray(g), softfloat.kept_mask(kept))
    q, lsb = round_sig(jnp.asarray(mag), jnp.asarray(g), -126, kept - 1, "rz")
    want = np.asarray(encode(jnp.asarray(neg), q, lsb, "f32")).astype(np.uint32)
    want[want == 0x80000000] = 0  # the kernels' zero is +0
    np.testing.assert_array_equal(np.asarray(got).view(np.uint32), want)


def test_f32_term_rz_truncates_on_the_grid():
    # fp32 C (normal, subnormal, zero, both signs) on the grid of 2**(E - F), E at least
    # C's exponent: sign * floor(|C| / 2**(E - F)), exactly.
    rng = np.random.default_rng(7)
    c = (rng.standard_normal(3000) * 2.0 ** rng.integers(-150, 120, 3000)).astype(np.float32)
    c[:4] = [0.0, -0.0, np.float32(2.0 ** -149), -np.float32(1.5 * 2.0 ** -127)]
    cexp = np.maximum(np.floor(np.log2(np.abs(c.astype(np.float64)) + 2.0 ** -160)), -126)
    for F in (13, 24, 25):
        E = (cexp + rng.integers(0, 40, c.shape)).astype(np.int32)
        got = np.asarray(softfloat.f32_term_rz(jnp.asarray(c.view(np.int32)), jnp.asarray(E),
                                               F))
        want = [int(Fraction(float(abs(v))) / Fraction(2) ** int(e - F)) * (-1 if v < 0 else 1)
                for v, e in zip(c, E, strict=True)]
        np.testing.assert_array_equal(got, np.asarray(want, np.int64), err_msg=f"F={F}")
