"""Tests of jaxwarp._src.numerics.formats and .convert: format table, bit views, round_to,
CUDA conversions."""

import doctest

import hypothesis.extra.numpy as hnp
import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from jax import lax

import jaxwarp
from jaxwarp._src.numerics import convert, formats
from jaxwarp._src.numerics.convert import (
    CVT_FUNCTIONS,
    bfloat162float,
    float2bfloat16_rn,
    float2bfloat16_rz,
    float2half_rn,
    float2half_rz,
    float_to_tf32,
    half2float,
    round_to,
)
from jaxwarp._src.numerics.formats import FORMATS, from_bits, get_format, to_bits

CVT_ROWS = ("float2half_rn", "float2bfloat16_rn", "float_to_tf32", "float2half_rz",
            "float2bfloat16_rz")
NARROW = ("fp16", "bf16", "tf32")
MODES = ("rn", "rz", "rna")
N = 256  # elements per Hypothesis example (a fixed shape: one compilation per function)
PROPERTY = settings(derandomize=True, max_examples=25, deadline=None)
BITS32 = hnp.arrays(np.uint32, N)

_round = jax.jit(round_to, static_argnames=("fmt", "mode"))


def f32(u):
    return np.asarray(u, np.uint32).view(np.float32)


def u32(x):
    return np.asarray(x).view(np.uint32)


def finite(u):
    return ((u >> 23) & 0xFF) != 0xFF


def is_nan(u):
    return ((u & 0x7FFFFFFF) > 0x7F800000)


# --------------------------------------------------------------------------- hardware


def test_cvt_function_order():
    assert tuple(name for name, _ in CVT_FUNCTIONS) == CVT_ROWS


@pytest.mark.parametrize("row", range(5), ids=CVT_ROWS)
def test_cvt_bits_match_h100(warp_capture, row):
    _, fn = CVT_FUNCTIONS[row]
    out = jax.jit(fn)(jnp.asarray(warp_capture["cvt_x"]))
    assert out.dtype == jnp.uint32
    np.testing.assert_array_equal(np.asarray(out), warp_capture["cvt_out"][row])


@pytest.mark.parametrize(
    "row, fn, width",
    [(0, float2half_rn, 16), (1, float2bfloat16_rn, 16), (2, float_to_tf32, 32),
     (3, float2half_rz, 16), (4, float2bfloat16_rz, 16)],
    ids=CVT_ROWS)
def test_typed_conversions_match_h100(warp_capture, row, fn, width):
    out = np.asarray(to_bits(fn(jnp.asarray(f32(warp_capture["cvt_x"])))))
    assert out.dtype == np.dtype(f"uint{width}")
    np.testing.assert_array_equal(out.astype(np.uint32), warp_capture["cvt_out"][row])


def test_tf32_is_round_to_rna_on_the_capture(warp_capture):
    """float_to_tf32 is round_to(.., "tf32", "rna"), NaNs included, on every captured input."""
    x = jnp.asarray(f32(warp_capture["cvt_x"]))
    np.testing.assert_array_equal(u32(round_to(x, "tf32", "rna")), warp_capture["cvt_out"][2])


def test_hardware_nan_handling(warp_capture):
    x, out = warp_capture["cvt_x"], warp_capture["cvt_out"]
    nan = is_nan(x)
    assert nan.any()
    for row in (0, 1, 3, 4):  # fp16 and bf16: one canonical NaN, sign dropped
        np.testing.assert_array_equal(out[row][nan], 0x7FFF)
    # tf32: sign and top payload bits kept, nothing else set.
    np.testing.assert_array_equal(out[2][nan], x[nan] & 0xFFFFE000)


# --------------------------------------------------------------------------- format table


@pytest.mark.parametrize("name, dtype", [("fp16", np.float16), ("bf16", ml_dtypes.bfloat16),
                                         ("fp32", np.float32), ("fp64", np.float64)])
def test_float_formats_agree_with_finfo(name, dtype):
    f, info = FORMATS[name], ml_dtypes.finfo(dtype)
    assert f.max_value == float(info.max) and f.min_value == -float(info.max)
    assert f.min_normal == float(info.smallest_normal)
    assert f.min_subnormal == float(info.smallest_subnormal)
    assert f.mantissa_bits == info.nmant and f.bits == info.bits


def test_tf32_format():
    f = FORMATS["tf32"]
    assert (f.exponent_bits, f.mantissa_bits, f.bits) == (8, 10, 19)
    assert f.max_value == (2 - 2**-10) * 2.0**127 and f.storage_dtype == np.float32


@pytest.mark.parametrize("name, dtype, storage", [
    ("s32", np.int32, np.int32), ("s8", np.int8, np.int8), ("u8", np.uint8, np.uint8),
    # 4-bit values are held one per byte (s4 sign-extended), as in fragments and captures.
    ("s4", ml_dtypes.int4, np.int8), ("u4", ml_dtypes.uint4, np.uint8)])
def test_int_formats_agree_with_iinfo(name, dtype, storage):
    f, info = FORMATS[name], ml_dtypes.iinfo(dtype)
    assert (f.min_value, f.max_value, f.bits) == (info.min, info.max, info.bits)
    assert not f.is_float and f.storage_dtype == np.dtype(storage)
    assert f.uint_dtype == np.dtype(f"uint{8 * np.dtype(storage).itemsize}")


@pytest.mark.parametrize("name, dtype", [("e4m3", ml_dtypes.float8_e4m3fn),
                                         ("e5m2", ml_dtypes.float8_e5m2)])
def test_fp8_formats_from_finfo(name, dtype):
    f, fi = FORMATS[name], ml_dtypes.finfo(dtype)
    assert (f.exponent_bits, f.mantissa_bits, f.bits) == (fi.nexp, fi.nmant, 8)
    assert f.max_value == float(fi.max) and f.storage_dtype == np.dtype(dtype)
    assert f.has_inf == (name == "e5m2")


@pytest.mark.parametrize("alias, name", [("fp16", "f16"), ("fp32", "f32"), ("fp64", "f64"),
                                         ("float8_e4m3fn", "e4m3"), ("bfloat16", "bf16")])
def test_aliases_resolve_everywhere(alias, name):
    assert FORMATS[alias] is FORMATS[name] and alias in FORMATS and alias not in tuple(FORMATS)
    assert formats.get_format(alias).name == name
    if FORMATS[name].is_float and name != "f64":
        x = jnp.asarray(np.float32([1.1, -3.7e3, 1e-6]))
        np.testing.assert_array_equal(np.asarray(convert.round_to(x, alias)),
                                      np.asarray(convert.round_to(x, name)))


def test_ptx_names_are_the_registry():
    assert tuple(FORMATS) == ("f64", "f32", "tf32", "bf16", "f16", "e4m3", "e5m2", "e3m2",
                              "e2m3", "e2m1", "ue8m0", "ue4m3", "s32", "s8", "u8", "s4", "u4",
                              "b1")


@pytest.mark.parametrize("name, dtype", [("e4m3", ml_dtypes.float8_e4m3fn),
                                         ("e5m2", ml_dtypes.float8_e5m2)])
def test_round_to_fp8_matches_ml_dtypes(name, dtype):
    rng = np.random.default_rng(7)
    x = (rng.standard_normal(20000) * 2.0 ** rng.integers(-24, 18, 20000)).astype(np.float32)
    x[:6] = [np.inf, -np.inf, np.nan, 0.0, -0.0, 1e30]
    got = np.asarray(convert.round_to(jnp.asarray(x), name))
    want = x.astype(dtype).astype(np.float32)
    same = (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))
    assert same.all(), x[~same][:5]


def test_b1_format():
    assert (FORMATS["b1"].min_value, FORMATS["b1"].max_value, FORMATS["b1"].bits) == (0, 1, 1)


def test_get_format():
    assert get_format("bf16") is FORMATS["bf16"]
    assert get_format(FORMATS["tf32"]) is FORMATS["tf32"]
    with pytest.raises(ValueError, match=r"name='fp8'.*allowed.*'f16'.*'b1'.*aliases.*'fp16'"):
        get_format("fp8")


# --------------------------------------------------------------------------- round_to


@pytest.mark.parametrize("fmt, dtype", [("fp16", np.float16), ("bf16", ml_dtypes.bfloat16)])
@given(u=BITS32)
@PROPERTY
def test_rn_agrees_with_ml_dtypes(fmt, dtype, u):
    keep = ~is_nan(u)
    with np.errstate(over="ignore"):
        want = u32(f32(u).astype(dtype).astype(np.float32))
    np.testing.assert_array_equal(u32(_round(f32(u), fmt))[keep], want[keep])


def _rz_reference(u, dtype):
    """Round to nearest with ml_dtypes, then step one ulp toward zero if that went outward."""
    x = f32(u)
    with np.errstate(over="ignore"):
        rn = x.astype(dtype)
    back = rn.astype(np.float32)
    outward = np.abs(back) > np.abs(x)
    width = np.dtype(dtype).itemsize * 8
    ub = rn.view(f"uint{width}").copy()
    ub[outward] -= 1  # one ulp toward zero (also turns inf into MAX)
    return u32(ub.view(dtype).astype(np.float32))


@pytest.mark.parametrize("fmt, dtype", [("fp16", np.float16), ("bf16", ml_dtypes.bfloat16)])
@given(u=BITS32)
@PROPERTY
def test_rz_agrees_with_stepped_reference(fmt, dtype, u):
    keep = finite(u)
    got = u32(_round(f32(u), fmt, "rz"))
    np.testing.assert_array_equal(got[keep], _rz_reference(u, dtype)[keep])


@pytest.mark.parametrize("fmt", NARROW)
@pytest.mark.parametrize("mode", MODES)
@given(u=BITS32)
@PROPERTY
def test_rounding_is_idempotent(fmt, mode, u):
    once = _round(f32(u), fmt, mode)
    for m in MODES:  # a representable value is left alone by every mode
        np.testing.assert_array_equal(u32(_round(once, fmt, m)), u32(once))


@pytest.mark.parametrize("fmt", NARROW)
@pytest.mark.parametrize("mode", MODES)
@given(u=BITS32)
@PROPERTY
def test_rounding_is_monotonic_and_odd(fmt, mode, u):
    x = np.sort(np.where(finite(u), f32(u), np.float32(0)))  # fixed shape: one compilation
    r = np.asarray(_round(x, fmt, mode))
    assert np.all(r[1:] >= r[:-1])
    np.testing.assert_array_equal(u32(_round(-x, fmt, mode)), u32(-_round(x, fmt, mode)))


@pytest.mark.parametrize("fmt", NARROW)
@given(u=BITS32)
@PROPERTY
def test_modes_bracket_the_value(fmt, u):
    """rz is never outward, rn and rna are within half an ulp, and differ only at ties."""
    keep = finite(u)
    x = f32(u).astype(np.float64)
    rz = np.asarray(_round(f32(u), fmt, "rz"), np.float64)
    rn = np.asarray(_round(f32(u), fmt, "rn"), np.float64)
    rna = np.asarray(_round(f32(u), fmt, "rna"), np.float64)
    keep &= np.isfinite(rn) & np.isfinite(rna)
    x, rz, rn, rna = x[keep], rz[keep], rn[keep], rna[keep]
    assert np.all(np.abs(rz) <= np.abs(x))
    assert np.all(np.abs(x - rn) <= np.abs(x - rz))
    assert np.all(np.abs(x - rna) == np.abs(x - rn))
    differ = rn != rna
    assert np.all(np.abs(rna[differ]) > np.abs(rn[differ]))  # ties went away from zero


@pytest.mark.parametrize(
    "fmt, x, rn, rz, rna",
    [
        # fp16: ties at 1 + 2**-11 (half an ulp), overflow at 65520.
        ("fp16", 1 + 2**-11, 1.0, 1.0, 1 + 2**-10),
        ("fp16", 1 + 3 * 2**-11, 1 + 2**-9, 1 + 2**-10, 1 + 2**-9),
        ("fp16", 65519.0, 65504.0, 65504.0, 65504.0),
        ("fp16", 65520.0, np.inf, 65504.0, np.inf),
        ("fp16", 1e30, np.inf, 65504.0, np.inf),
        ("fp16", np.inf, np.inf, np.inf, np.inf),
        # fp16 subnormals: the grid is 2**-24 below 2**-14.
        ("fp16", 2.0**-25, 0.0, 0.0, 2.0**-24),
        ("fp16", 3 * 2.0**-25, 2 * 2.0**-24, 2.0**-24, 2 * 2.0**-24),
        ("fp16", 0.99 * 2.0**-24, 2.0**-24, 0.0, 2.0**-24),
        ("fp16", 2.0**-14 - 2.0**-25, 2.0**-14, 2.0**-14 - 2.0**-24, 2.0**-14),
        # bf16 / tf32: ties and the top of the float32 range.
        ("bf16", 1 + 2**-8, 1.0, 1.0, 1 + 2**-7),
        ("bf16", 3.4028234663852886e38, np.inf, 3.3895313892515355e38, np.inf),
        ("tf32", 1 + 2**-11, 1.0, 1.0, 1 + 2**-10),
        ("tf32", 3.4028234663852886e38, np.inf, (2 - 2**-10) * 2.0**127, np.inf),
        # tf32 keeps float32's exponent range: its subnormal grid is 2**-136.
        ("tf32", 2.0**-136, 2.0**-136, 2.0**-136, 2.0**-136),
        ("tf32", 2.0**-137, 0.0, 0.0, 2.0**-136),
        ("tf32", 2.0**-149, 0.0, 0.0, 0.0),
    ],
)
def test_known_values(fmt, x, rn, rz, rna):
    for sign in (1.0, -1.0):
        xs = jnp.float32(sign * x)
        for mode, want in (("rn", rn), ("rz", rz), ("rna", rna)):
            got = round_to(xs, fmt, mode)
            np.testing.assert_array_equal(u32(got), u32(np.float32(sign * want)),
                                          err_msg=f"{fmt} {mode} {sign * x!r}")


@pytest.mark.parametrize("fmt", NARROW)
@pytest.mark.parametrize("mode", MODES)
def test_zeros_infs_and_nans(fmt, mode):
    u = np.array([0x0, 0x80000000, 0x7F800000, 0xFF800000,
                  0x7FC00000, 0xFFC12345, 0x7F800001, 0xFF801FFF], np.uint32)
    got = u32(round_to(f32(u), fmt, mode))
    np.testing.assert_array_equal(got[:4], u[:4])
    mant = FORMATS[fmt].mantissa_bits
    keep = np.uint32((0xFFFFFFFF << (23 - mant)) & 0xFFFFFFFF)
    np.testing.assert_array_equal(got[4:6], u[4:6] & keep)  # payload truncated, sign kept
    # A payload that lives only in the dropped bits: the quiet bit keeps it a NaN.
    np.testing.assert_array_equal(got[6:], u[6:] & keep | 0x00400000)


@pytest.mark.parametrize("fmt", ("bf16", "tf32"))
def test_rn_agrees_with_reduce_precision_where_it_applies(warp_capture, fmt):
    """Same exponent range as float32: lax.reduce_precision gives the same values."""
    u = warp_capture["cvt_x"]
    f = FORMATS[fmt]
    want = u32(lax.reduce_precision(jnp.asarray(f32(u)), f.exponent_bits, f.mantissa_bits))
    keep = ~is_nan(u)
    np.testing.assert_array_equal(u32(round_to(f32(u), fmt))[keep], want[keep])


def test_reduce_precision_flushes_fp16_subnormals():
    """Why round_to does not use reduce_precision: fp16 has 2**-24, reduce_precision gives 0."""
    x = jnp.float32(0.9 * 2.0**-24)
    assert float(lax.reduce_precision(x, 5, 10)) == 0.0
    assert float(round_to(x, "fp16")) == 2.0**-24


def test_wide_formats_are_identity():
    u = np.array([0x00000001, 0x3F800001, 0x7F7FFFFF, 0xFFC00001], np.uint32)
    for fmt in ("fp32", "fp64"):
        for mode in MODES:
            np.testing.assert_array_equal(u32(round_to(f32(u), fmt, mode)), u)


def test_float64_inputs():
    rng = np.random.default_rng(0)
    x = rng.uniform(1, 2, 4096) * 2.0 ** rng.integers(-160, 140, 4096)
    x *= rng.choice([-1.0, 1.0], 4096)
    with jax.enable_x64(True):
        with np.errstate(over="ignore"):
            for fmt, dtype in (("fp32", np.float32), ("fp16", np.float16),
                               ("bf16", ml_dtypes.bfloat16)):
                got = np.asarray(round_to(jnp.asarray(x), fmt))
                assert got.dtype == np.float64
                # float64 -> narrow format directly (no double rounding) via ml_dtypes.
                np.testing.assert_array_equal(got, x.astype(dtype).astype(np.float64))
            got = np.asarray(round_to(jnp.asarray(x), "fp32", "rz"))
            assert np.all(np.abs(got) <= np.abs(x))


# Float64 values just beside a tie of the narrow format, where rounding through float32
# first (onto the tie) gives another result than one rounding: (format, mode, x, want).
_DOUBLE_ROUNDING = [
    ("f16", "rn", 1 + 2.0**-11 + 2.0**-40, 1 + 2.0**-10),  # above the tie: up
    ("f16", "rn", -(1 + 2.0**-11 + 2.0**-40), -(1 + 2.0**-10)),
    ("f16", "rn", 2.0**-25 + 2.0**-60, 2.0**-24),  # above half the smallest subnormal
    ("bf16", "rn", 1 + 2.0**-8 + 2.0**-40, 1 + 2.0**-7),
    ("tf32", "rna", 1 + 2.0**-11 - 2.0**-40, 1.0),  # below the tie: down
    ("f16", "rna", 1 + 2.0**-11 - 2.0**-40, 1.0),
    ("e4m3", "rn", 1 + 2.0**-4 + 2.0**-40, 1 + 2.0**-3),
]


@pytest.mark.parametrize("fmt, mode, x, want", _DOUBLE_ROUNDING,
                         ids=[f"{f}-{m}-{x!r}" for f, m, x, _ in _DOUBLE_ROUNDING])
def test_float64_rounds_once(fmt, mode, x, want):
    # Through float32 the value lands on the tie first, and the tie rule then goes the
    # other way: the premise of the test.
    x32 = float(np.float32(x))
    assert abs(x32) == 1 + 2.0**-FORMATS[fmt].mantissa_bits / 2 or abs(x32) == 2.0**-25
    with jax.enable_x64(True):
        got = round_to(jnp.float64(x), fmt, mode)
        assert got.dtype == jnp.float64 and float(got) == want
        assert float(round_to(jnp.float32(x32), fmt, mode)) != want
        if mode == ("rna" if fmt == "tf32" else "rn") and fmt in ("f16", "bf16", "tf32"):
            out = convert.narrow_to(jnp.float64(x), fmt)
            assert float(out) == want
            assert float(convert.narrow_to(jnp.float32(x32), fmt)) != want
            # matmul's operand conversion rounds a float64 once too.
            assert float(jaxwarp.to_operand(jnp.float64(x), fmt)) == want


def test_narrow_to_float64_rounds_once_everywhere():
    # One rounding from the double: narrow_to agrees with round_to on float64 values
    # (finite, infinite, NaN -> the canonical NaN), and with the CUDA function on float32.
    rng = np.random.default_rng(1)
    u = rng.integers(0, 2**64, 4096, dtype=np.uint64)
    x = np.concatenate([u.view(np.float64), [np.inf, -np.inf, np.nan, 0.0, -0.0, 65520.0,
                                             65519.99999, 2.0**-25, 3.4e38, 3.5e38]])
    x[:2048] = rng.uniform(-2, 2, 2048) * 2.0 ** rng.integers(-150, 130, 2048)
    cuda = {"f16": float2half_rn, "bf16": float2bfloat16_rn, "tf32": float_to_tf32}
    nan = {"f16": 0x7FFF, "bf16": 0x7FFF, "tf32": 0x7FFFE000}
    with jax.enable_x64(True):
        for fmt in ("f16", "bf16", "tf32"):
            got = np.asarray(to_bits(convert.narrow_to(jnp.asarray(x), fmt)))
            mode = "rna" if fmt == "tf32" else "rn"
            want = np.asarray(round_to(jnp.asarray(x), fmt, mode))
            with np.errstate(invalid="ignore"):
                want = to_bits(jnp.asarray(want.astype(FORMATS[fmt].storage_dtype)))
            want = np.where(np.isnan(x), nan[fmt], np.asarray(want))
            np.testing.assert_array_equal(got, want, err_msg=fmt)
            with np.errstate(over="ignore", invalid="ignore"):
                x32 = x[2048:2048 + 512].astype(np.float32)
            np.testing.assert_array_equal(
                np.asarray(to_bits(convert.narrow_to(jnp.asarray(x32), fmt))),
                np.asarray(to_bits(cuda[fmt](jnp.asarray(x32)))), err_msg=fmt)


# --------------------------------------------------------------------------- widening, bits


@pytest.mark.parametrize("fn, dtype", [(half2float, np.float16),
                                       (bfloat162float, ml_dtypes.bfloat16)],
                         ids=["half2float", "bfloat162float"])
def test_widening_is_exact_on_every_pattern(fn, dtype):
    x = np.arange(2**16, dtype=np.uint16).view(dtype)
    got = u32(fn(jnp.asarray(x)))
    nan = np.isnan(x.astype(np.float32))
    np.testing.assert_array_equal(got[~nan], u32(x.astype(np.float32))[~nan])
    np.testing.assert_array_equal(got[nan], 0x7FFFFFFF)


@pytest.mark.parametrize("fmt, dtype", [("fp16", np.float16), ("bf16", ml_dtypes.bfloat16),
                                        ("fp32", np.float32), ("tf32", np.float32),
                                        ("s8", np.int8), ("u8", np.uint8)])
def test_bits_round_trip(fmt, dtype):
    width = np.dtype(dtype).itemsize * 8
    u = np.random.default_rng(1).integers(0, 2**width, 1000, dtype=np.uint64)
    u = u.astype(f"uint{width}")
    x = from_bits(jnp.asarray(u), fmt)
    assert x.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(np.asarray(to_bits(x)), u)


def test_from_bits_takes_zero_extended_words():
    out = CVT_FUNCTIONS[0][1](jnp.asarray(u32(np.float32([1.0, -2.5]))))
    np.testing.assert_array_equal(np.asarray(from_bits(out, "fp16")), np.float16([1.0, -2.5]))


def test_float64_bits():
    with jax.enable_x64(True):
        assert to_bits(jnp.float64(1.0)).dtype == jnp.uint64
        assert int(to_bits(jnp.float64(1.0))) == 0x3FF0000000000000
        assert float(from_bits(jnp.uint64(0x3FF0000000000000), "fp64")) == 1.0


# --------------------------------------------------------------------------- transformations


@pytest.mark.parametrize("shape", [(), (7,), (3, 32)], ids=str)
@pytest.mark.parametrize("fn", [float2half_rn, float2bfloat16_rz, float_to_tf32,
                                lambda x: round_to(x, "fp16", "rna")],
                         ids=["float2half_rn", "float2bfloat16_rz", "float_to_tf32", "round_to"])
def test_jit_and_vmap_any_shape(fn, shape):
    x = jnp.asarray(np.random.default_rng(2).normal(size=(4, *shape)).astype(np.float32))
    want = np.stack([np.asarray(fn(xi)) for xi in x])
    np.testing.assert_array_equal(np.asarray(jax.jit(fn)(x)), want)
    np.testing.assert_array_equal(np.asarray(jax.vmap(fn)(x)), want)


def test_jit_does_not_retrace():
    traces = []

    def f(x):
        traces.append(x)
        return round_to(x, "fp16", "rz")

    jf = jax.jit(f)
    x = jnp.ones((8,), jnp.float32)
    jf(x)
    jf(x + 1)
    assert len(traces) == 1


def test_gradient_is_straight_through():
    x = jnp.asarray([1.2345, -3e-6, 7e4], jnp.float32)
    for fmt, mode in (("fp16", "rn"), ("bf16", "rz"), ("tf32", "rna")):
        y, dy = jax.jvp(lambda x, fmt=fmt, mode=mode: round_to(x, fmt, mode), (x,), (x * 2,))
        np.testing.assert_array_equal(u32(y), u32(round_to(x, fmt, mode)))
        np.testing.assert_array_equal(np.asarray(dy), np.asarray(x * 2))
        g = jax.vmap(jax.grad(lambda x, fmt=fmt, mode=mode: round_to(x, fmt, mode)))(x)
        np.testing.assert_array_equal(np.asarray(g), np.ones(3, np.float32))


# --------------------------------------------------------------------------- bad inputs


def test_round_to_rejects_bad_arguments():
    x = jnp.ones(3, jnp.float32)
    with pytest.raises(TypeError, match=r"\bx\b.*int32"):
        round_to(jnp.ones(3, jnp.int32), "fp16")
    with pytest.raises(TypeError, match=r"\bx\b.*float16"):
        round_to(jnp.ones(3, jnp.float16), "fp16")
    with pytest.raises(ValueError, match=r"fmt='fp8'.*allowed.*'fp16'"):
        round_to(x, "fp8")
    with pytest.raises(ValueError, match=r"fmt='s8'.*allowed"):
        round_to(x, "s8")
    with pytest.raises(ValueError, match=r"mode='rd'.*allowed.*'rn', 'rz', 'rna'"):
        round_to(x, "fp16", "rd")


def test_traced_static_argument_is_named():
    x = jnp.ones(3, jnp.float32)
    with pytest.raises(TypeError, match="mode is a static argument"):
        jax.jit(lambda x, m: round_to(x, "fp16", m))(x, jnp.int32(0))
    with pytest.raises(TypeError, match="fmt is a static argument"):
        jax.jit(lambda x, f: round_to(x, f))(x, jnp.int32(0))


@pytest.mark.parametrize("fn", [float2half_rn, float2half_rz, float2bfloat16_rn,
                                float2bfloat16_rz, float_to_tf32, half2float, bfloat162float])
def test_conversions_reject_wrong_dtype(fn):
    with pytest.raises(TypeError, match=r"\bx must be"):
        fn(jnp.ones(3, jnp.int32))


def test_bit_helpers_reject_bad_arguments():
    with pytest.raises(TypeError, match=r"\bx\b"):
        to_bits(jnp.ones(3, jnp.bool_))
    with pytest.raises(TypeError, match=r"\bu\b"):
        from_bits(jnp.ones(3, jnp.float32), "fp32")
    with pytest.raises(TypeError, match=r"\bu\b"):
        from_bits(jnp.ones(3, jnp.uint16), "fp32")
    with pytest.raises(ValueError, match=r"fmt='s4'.*allowed"):
        from_bits(jnp.ones(3, jnp.uint8), "s4")
    with pytest.raises(TypeError, match=r"\bu\b"):
        CVT_FUNCTIONS[0][1](jnp.ones(3, jnp.float32))


# Slow: the same examples run by default in tests/test_docs.py::test_docstring_example.
@pytest.mark.slow
@pytest.mark.parametrize("module", [formats, convert], ids=lambda m: m.__name__.split(".")[-1])
def test_docstring_examples(module):
    result = doctest.testmod(module, extraglobs={"jaxwarp": jaxwarp},
                             optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 3 and result.failed == 0
