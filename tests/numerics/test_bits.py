"""Tests of jaxwarp._src.numerics.bits: views, bit-keeping gathers, sign extension, masks."""

import doctest

import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from jaxwarp._src.numerics import bits


# Slow: the same examples run by default in tests/test_docs.py::test_docstring_example.
@pytest.mark.slow
def test_doctests():
    assert doctest.testmod(bits).failed == 0


@pytest.mark.parametrize("nbits", [1, 4, 8, 12])
def test_sext_every_field(nbits):
    x = np.arange(1 << nbits, dtype=np.uint32)
    want = np.where(x >= 1 << (nbits - 1), x.astype(np.int64) - (1 << nbits), x)
    got = np.asarray(bits.sext(jnp.asarray(x | (0xF0 << nbits)), nbits))  # high bits ignored
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dt", [np.float16, ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn,
                                np.float32, np.int8, np.uint16])
def test_u32_round_trip(dt):
    w = np.dtype(dt).itemsize
    raw = np.random.default_rng(0).integers(0, 1 << (8 * w), 64, dtype=np.uint64)
    x = raw.astype(bits.uint_dtype(8 * w)).view(dt)
    u = bits.to_u32(jnp.asarray(x))
    assert u.dtype == jnp.uint32
    np.testing.assert_array_equal(np.asarray(u), raw.astype(np.uint32))
    back = np.asarray(bits.from_u32(u, dt))
    np.testing.assert_array_equal(back.view(bits.uint_dtype(8 * w)), x.view(bits.uint_dtype(8 * w)))


def test_take_bits_keeps_nan_payloads():
    raw = np.array([0x7F81, 0xFFC3, 0x3F80], np.uint16)
    x = jnp.asarray(raw.view(ml_dtypes.bfloat16))
    out = bits.take_bits(x, jnp.array([1, 0, 2, 1]))
    assert out.dtype == x.dtype
    np.testing.assert_array_equal(np.asarray(out).view(np.uint16), raw[[1, 0, 2, 1]])


def test_views_and_masks():
    assert bits.as_bits(jnp.int8(-1)).dtype == jnp.int8
    assert bits.uint_view(jnp.int8(-1)).tolist() == 255
    assert bits.from_bits(jnp.uint32(0x3F800000), jnp.float32).tolist() == 1.0
    assert bits.low_mask(4) == 0xF and bits.TF32_MASK == 0xFFFFE000
    x = jnp.asarray(np.array([0x3F801FFF, 0x7F800001], np.uint32).view(np.float32))
    assert np.asarray(bits.tf32_keep(x)).view(np.uint32).tolist() == [0x3F800000, 0x7F800000]
    with pytest.raises(ValueError, match="nbits"):
        bits.uint_dtype(4)
