"""Tests of jaxwarp._src.numerics.bitops: views, bit-keeping gathers, sign extension, masks."""

import doctest

import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from jaxwarp._src.numerics import bitops


# Slow: the same examples run by default in tests/test_docs.py::test_docstring_example.
@pytest.mark.slow
def test_doctests():
    assert doctest.testmod(bitops).failed == 0


@pytest.mark.parametrize("nbits", [1, 4, 8, 12])
def test_sext_every_field(nbits):
    x = np.arange(1 << nbits, dtype=np.uint32)
    want = np.where(x >= 1 << (nbits - 1), x.astype(np.int64) - (1 << nbits), x)
    got = np.asarray(bitops.sext(jnp.asarray(x | (0xF0 << nbits)), nbits))  # high bits ignored
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dt", [np.float16, ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn,
                                np.float32, np.int8, np.uint16])
def test_u32_round_trip(dt):
    w = np.dtype(dt).itemsize
    raw = np.random.default_rng(0).integers(0, 1 << (8 * w), 64, dtype=np.uint64)
    x = raw.astype(bitops.uint_dtype(8 * w)).view(dt)
    u = bitops.to_u32(jnp.asarray(x))
    assert u.dtype == jnp.uint32
    np.testing.assert_array_equal(np.asarray(u), raw.astype(np.uint32))
    back = np.asarray(bitops.from_u32(u, dt))
    u_dt = bitops.uint_dtype(8 * w)
    np.testing.assert_array_equal(back.view(u_dt), x.view(u_dt))


def test_take_bits_keeps_nan_payloads():
    raw = np.array([0x7F81, 0xFFC3, 0x3F80], np.uint16)
    x = jnp.asarray(raw.view(ml_dtypes.bfloat16))
    out = bitops.take_bits(x, jnp.array([1, 0, 2, 1]))
    assert out.dtype == x.dtype
    np.testing.assert_array_equal(np.asarray(out).view(np.uint16), raw[[1, 0, 2, 1]])


def test_views_and_masks():
    assert bitops.as_bits(jnp.int8(-1)).dtype == jnp.int8
    assert bitops.uint_view(jnp.int8(-1)).tolist() == 255
    assert bitops.from_bits(jnp.uint32(0x3F800000), jnp.float32).tolist() == 1.0
    assert bitops.low_mask(4) == 0xF and bitops.TF32_MASK == 0xFFFFE000
    x = jnp.asarray(np.array([0x3F801FFF, 0x7F800001], np.uint32).view(np.float32))
    assert np.asarray(bitops.tf32_keep(x)).view(np.uint32).tolist() == [0x3F800000, 0x7F800000]
    with pytest.raises(ValueError, match="nbits"):
        bitops.uint_dtype(4)
