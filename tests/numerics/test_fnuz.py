"""AMD's fp8 formats e4m3fnuz / e5m2fnuz (CDNA3's ``fp8`` / ``bf8``): every code
round-trips, conversions agree with ml_dtypes (round to nearest even; no infinity, no -0:
overflow, ±inf and NaN give the one NaN 0x80)."""

import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import jaxwarp
from jaxwarp._src.numerics import formats

FNUZ = [("e4m3fnuz", ml_dtypes.float8_e4m3fnuz, 240.0, 8),
        ("e5m2fnuz", ml_dtypes.float8_e5m2fnuz, 57344.0, 16)]


@pytest.mark.parametrize("name, dtype, top, bias", FNUZ)
def test_registry_facts(name, dtype, top, bias):
    f = formats.get_format(name, user=True)
    assert f is formats.FNUZ_FORMATS[name]
    assert formats.get_format(np.dtype(dtype).name, user=True) is f
    assert (f.max_value, f.bias, f.has_inf, f.has_nan, f.specials) == (top, bias, False, True,
                                                                       "fnuz")
    assert f.storage_dtype == np.dtype(dtype)
    with pytest.raises(ValueError, match="built-in"):
        jaxwarp.define_format(name, exponent_bits=4, mantissa_bits=3, specials="fnuz")


@pytest.mark.parametrize("name, dtype, top, bias", FNUZ)
def test_every_code_round_trips(name, dtype, top, bias):
    codes = np.arange(256, dtype=np.uint8)
    v = np.asarray(jaxwarp.from_format(jnp.asarray(codes.view(dtype)), name))
    want = codes.view(dtype).astype(np.float32)
    np.testing.assert_array_equal(np.isnan(v), codes == 0x80)  # the one NaN: -0's code
    ok = ~np.isnan(want)
    np.testing.assert_array_equal(v[ok].view(np.uint32), want[ok].view(np.uint32))
    back = np.asarray(jaxwarp.to_format(jnp.asarray(v), name)).view(np.uint8)
    np.testing.assert_array_equal(back, codes)


@pytest.mark.parametrize("name, dtype, top, bias", FNUZ)
def test_conversion_matches_ml_dtypes(name, dtype, top, bias):
    rng = np.random.default_rng(3)
    x = (rng.standard_normal(50000) * 2.0 ** rng.integers(-28, 20, 50000)).astype(np.float32)
    x[:8] = [np.inf, -np.inf, np.nan, -0.0, 0.0, 1e30, top * 1.0625, -top * 1.07]
    got = np.asarray(jaxwarp.to_format(jnp.asarray(x), name)).view(np.uint8)
    np.testing.assert_array_equal(got, x.astype(dtype).view(np.uint8))
    assert list(got[:6]) == [0x80, 0x80, 0x80, 0, 0, 0x80]  # no inf, no -0
    r = np.asarray(jaxwarp.round_to(jnp.asarray(x), name))
    want = x.astype(dtype).astype(np.float32)
    np.testing.assert_array_equal(np.isnan(r), np.isnan(want))
    np.testing.assert_array_equal(r[~np.isnan(r)], want[~np.isnan(want)])


@pytest.mark.parametrize("name, dtype, top, bias", FNUZ)
def test_to_fnuz_saturates_finite_values_as_hip(name, dtype, top, bias):
    rng = np.random.default_rng(5)
    x = (rng.standard_normal(4000) * 2.0 ** rng.integers(-20, 20, 4000)).astype(np.float32)
    x[:6] = [np.inf, -np.inf, np.nan, 1e30, -1e30, top * 1.07]
    sat = np.asarray(jaxwarp.to_fnuz(jnp.asarray(x), name)).view(np.uint8)
    want = np.clip(x, -top, top).astype(dtype).view(np.uint8)
    want[:3] = 0x80  # inf and NaN are not clipped: they give the NaN
    np.testing.assert_array_equal(sat, want)
    assert list(sat[3:6]) == [0x7F, 0xFF, 0x7F]
    nosat = np.asarray(jaxwarp.to_fnuz(jnp.asarray(x), name, saturate=False)).view(np.uint8)
    np.testing.assert_array_equal(nosat, x.astype(dtype).view(np.uint8))
    with pytest.raises(ValueError, match=r"fmt='e4m3'.*allowed.*'e4m3fnuz', 'e5m2fnuz'"):
        jaxwarp.to_fnuz(jnp.asarray(x), "e4m3")
