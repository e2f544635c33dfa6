"""The fp6, fp4 and block-scale formats (e3m2, e2m3, e2m1, ue8m0, ue4m3) in the registry,
softfloat and round_to, against the exact reference of ``tests/reference_narrow.py``
(fractions, written from the formats' definitions, sharing nothing with jaxwarp)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
import reference_narrow as R

import jaxwarp
from jaxwarp._src.numerics import softfloat
from jaxwarp._src.numerics.convert import round_to
from jaxwarp._src.numerics.formats import FORMATS, from_bits, get_format, to_bits

NEW = ("e3m2", "e2m3", "e2m1", "ue8m0", "ue4m3")
ML = {"e3m2": ml_dtypes.float6_e3m2fn, "e2m3": ml_dtypes.float6_e2m3fn,
      "e2m1": ml_dtypes.float4_e2m1fn, "ue8m0": ml_dtypes.float8_e8m0fnu}
MODES = ("rn", "rz", "rna")

# The PTX / kind::f8f6f4 facts, from the PTX ISA (cvt packing; the f8f6f4 operand bytes):
# (bits, register bits, lowest code bit in an unpacked f8f6f4 byte, signed)
PTX_FACTS = {"e3m2": (6, 8, 0, True), "e2m3": (6, 8, 0, True), "e2m1": (4, 4, 2, True),
             "ue8m0": (8, 8, 0, False), "ue4m3": (7, 8, 0, False)}


# --------------------------------------------------------------------------- registry


@pytest.mark.parametrize("name", NEW)
def test_registry_agrees_with_the_definition(name):
    f, s = FORMATS[name], R.SPECS[name]
    assert f.is_float and f.code_storage and f.storage_dtype == np.uint8
    assert (f.exponent_bits, f.mantissa_bits, f.bias) == (s.eb, s.mb, s.bias)
    assert (f.bits, f.register_bits, f.unpacked_lsb, f.signed) == PTX_FACTS[name]
    assert f.storage_bits == 8 and f.bits_dtype == np.uint8 and f.ignored_bits == 0
    assert f.max_value == R.max_value(name) and f.min_subnormal == R.min_value(name)
    assert f.min_value == (-f.max_value if s.signed else (0 if f.has_zero else f.min_normal))
    assert f.max_exponent == math.floor(math.log2(f.max_value))
    assert f.has_inf is False and f.has_nan == bool(s.nan_codes)
    assert f.has_subnormals == s.subnormals and f.has_zero == (name != "ue8m0")
    assert f.sign_bit == s.sign_bit
    if name in ML:  # ml_dtypes defines the same values
        fi = ml_dtypes.finfo(ML[name])
        assert f.numpy_dtype == np.dtype(ML[name])
        assert (f.max_value, f.min_normal) == (float(fi.max), float(fi.smallest_normal))
        assert f.min_subnormal == float(fi.smallest_subnormal)
    else:
        assert f.numpy_dtype is None


def test_ue8m0_has_no_zero_and_no_subnormals():
    f = FORMATS["ue8m0"]
    assert f.min_exponent == -127 and f.min_normal == 2.0**-127 and f.max_value == 2.0**127
    assert softfloat.emin("ue8m0") == -127 and softfloat.lsb_min("ue8m0") == -127


@pytest.mark.parametrize("alias, name", [("float4_e2m1fn", "e2m1"), ("float6_e2m3fn", "e2m3"),
                                         ("float6_e3m2fn", "e3m2"), ("e8m0", "ue8m0"),
                                         ("float8_e8m0fnu", "ue8m0")])
def test_aliases(alias, name):
    assert get_format(alias) is FORMATS[name]
    assert get_format(np.dtype(ML[name])) is FORMATS[name]  # a dtype names its format


@pytest.mark.parametrize("name", NEW)
def test_bits_round_trip(name):
    u = np.arange(256, dtype=np.uint8)
    x = from_bits(jnp.asarray(u), name)
    assert x.dtype == np.uint8
    np.testing.assert_array_equal(np.asarray(to_bits(x)), u)
    np.testing.assert_array_equal(np.asarray(from_bits(jnp.asarray(u.astype(np.uint32)), name)),
                                  u)


# --------------------------------------------------------------------------- softfloat


def _ref_decode(name):
    """(neg, value, nan) of every code, from the reference."""
    out = []
    for c in R.codes(name):
        v = R.value(c, name)
        if v == R.NAN:
            out.append((False, None, True))
        else:
            neg = R.SPECS[name].signed and bool(c & R.SPECS[name].sign_bit)
            out.append((neg, abs(v), False))
    return out


@pytest.mark.parametrize("name", NEW)
def test_decode_every_code(name):
    c = jnp.arange(len(R.codes(name)), dtype=jnp.uint32)
    # One program (eagerly each operation would compile on its own).
    decoded = jax.jit(softfloat.decode, static_argnums=1)(c, name)
    neg, lsb, sig, lead, inf, nan = (np.asarray(v) for v in decoded)
    assert not inf.any()
    for i, (rneg, rval, rnan) in enumerate(_ref_decode(name)):
        assert bool(nan[i]) == rnan, i
        if rnan:
            continue
        assert bool(neg[i]) == rneg, i
        got = R.Fraction(int(sig[i])) * R.Fraction(2) ** int(lsb[i])
        assert got == rval, (i, got, rval)
        if sig[i]:
            assert 2 ** int(lead[i]) <= got < 2 ** (int(lead[i]) + 1)


@pytest.mark.parametrize("name", NEW)
def test_decode_ignores_bits_above_the_code(name):
    width = FORMATS[name].code_bits
    c = np.arange(1 << width, dtype=np.uint32)
    hi = c | np.uint32(0xFFFFFF00 | (0xFF << width) & 0xFF)
    a = softfloat.decode(jnp.asarray(c), name)
    b = softfloat.decode(jnp.asarray(hi), name)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.mark.parametrize("name", NEW)
def test_encode_inverts_decode(name):
    """encode and encode_rounded give back every non-NaN code (-0 included)."""
    c = jnp.arange(len(R.codes(name)), dtype=jnp.uint32)

    @jax.jit  # one program (eagerly each operation would compile on its own)
    def decode_encode(c):
        neg, lsb, sig, _, _, nan = softfloat.decode(c, name)
        e1 = softfloat.encode(neg, sig.astype(jnp.uint32), lsb, name)
        q, l2 = softfloat.round_sig(sig.astype(jnp.uint32), lsb, softfloat.emin(name),
                                    FORMATS[name].mantissa_bits, "rn")
        return nan, e1, softfloat.encode_rounded(neg, q, l2, name)

    nan, e1, e2 = (np.asarray(v) for v in decode_encode(c))
    keep = ~nan
    np.testing.assert_array_equal(e1[keep], np.asarray(c)[keep])
    np.testing.assert_array_equal(e2[keep], np.asarray(c)[keep])


# --------------------------------------------------------------------------- round_to


def round_to_reference(bits: int, name: str, mode: str) -> int:
    """float32 bits of round_to(x, name, mode), from the documented rules."""
    s = R.SPECS[name]
    x = R.f32_fraction(bits)
    sign = bits & 0x80000000
    quiet_nan = 0x7FC00000
    if x == R.NAN:
        keep = bits & ((0xFFFFFFFF << (23 - s.mb)) & 0xFFFFFFFF)
        return keep if keep & 0x7FFFFFFF != 0x7F800000 else keep | 0x00400000
    top = R.max_value(name)
    has_nan = bool(s.nan_codes)
    if isinstance(x, float):  # ±inf: no infinities in these formats
        if not has_nan:
            return R.fraction_f32_bits(top, bool(sign))
        return quiet_nan | (sign if s.signed else 0)
    mag = abs(x)
    if not s.signed and mag != 0 and sign:
        v, code = R.round_magnitude(mag, name, mode)
        if v is None or v != 0:  # a negative number: NaN (ue8m0: nothing rounds to 0)
            return quiet_nan
    if name == "ue8m0" and mag == 0:
        return quiet_nan
    v, code = R.round_magnitude(mag, name, mode)
    if v is None:  # ue8m0, rz below 2**-127
        v = R.min_value(name)
    elif code is None:  # past the largest value
        v = top if mode == "rz" or not has_nan else None
        if v is None:
            return quiet_nan | (sign if s.signed else 0)
    neg = bool(sign) and s.signed
    return R.fraction_f32_bits(v, neg)


@pytest.fixture(scope="module")
def dense_inputs():
    return {name: np.array(R.interesting_f32(name), np.uint32) for name in NEW}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", NEW)
def test_round_to_matches_the_reference(name, mode, dense_inputs):
    u = dense_inputs[name]
    got = np.asarray(round_to(jnp.asarray(u.view(np.float32)), name, mode)).view(np.uint32)
    want = np.array([round_to_reference(int(b), name, mode) for b in u], np.uint32)
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, [(hex(u[i]), hex(got[i]), hex(want[i])) for i in bad[:8]]


@pytest.mark.parametrize("name", ("e3m2", "e2m3", "e2m1"))
def test_round_to_agrees_with_ml_dtypes_except_nan(name):
    """ml_dtypes' conversion (rn, saturating) gives the same values; NaN aside (it gives -0)."""
    rng = np.random.default_rng(3)
    x = (rng.standard_normal(4096) * 2.0 ** rng.integers(-12, 8, 4096)).astype(np.float32)
    x[:3] = [np.inf, -np.inf, 1e30]
    got = np.asarray(round_to(jnp.asarray(x), name))
    want = x.astype(ML[name]).astype(np.float32)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def test_ml_dtypes_e8m0_misrounds_float32_subnormals():
    """Why the ue8m0 reference is not ml_dtypes: 1.25 * 2**-127 (a float32 subnormal) is
    nearer 2**-127 than 2**-126, but ml_dtypes 0.6 rounds its bits up to 2**-126."""
    x = np.float32(1.25 * 2.0**-127)
    assert float(round_to(jnp.float32(x), "ue8m0")) == 2.0**-127
    assert float(x.astype(ML["ue8m0"]).astype(np.float32)) in (2.0**-127, 2.0**-126)


@pytest.mark.parametrize("name", NEW)
def test_round_to_is_idempotent_on_every_value(name):
    vals = [v for v, _ in R.finite_values(name)]
    bits = np.array([R.fraction_f32_bits(v, n) for v in vals for n in (False, True)
                     if R.SPECS[name].signed or not n], np.uint32)
    x = jnp.asarray(bits.view(np.float32))
    for mode in MODES:
        np.testing.assert_array_equal(np.asarray(round_to(x, name, mode)).view(np.uint32), bits)


def test_round_to_new_formats_under_jit_and_float64():
    x = np.float32([2.5, 7.0, -0.3, 1e-9])
    f = jax.jit(lambda x: round_to(x, "e2m1"))
    np.testing.assert_array_equal(np.asarray(f(x)), np.asarray(round_to(x, "e2m1")))
    with jax.enable_x64(True):  # one rounding from the double: 2.5 + 2**-40 is above the tie
        assert float(round_to(jnp.float64(2.5 + 2.0**-40), "e2m1")) == 3.0
        assert float(round_to(jnp.float64(1.5 - 2.0**-40), "ue8m0")) == 1.0


def test_the_registry_lists_the_new_formats_at_the_top_level():
    assert set(NEW) <= set(jaxwarp.FORMATS)
