"""Tests of jaxwarp._src.numerics.fp8 and fp8_intrinsics: the PTX and cuda_fp8.h fp8
conversions.

The reference here is written from first principles and shares nothing with the model:
it lists the fp8 values from their bit fields, finds the two neighbours of the input by
bisection in float64 (exact for every f32/f16/bf16 input and fp8 midpoint) and breaks ties
toward the even code. When an H100 capture (tools/capture/capture_movcvt.py) is present,
the model is also compared with it bit for bit.
"""

from __future__ import annotations

import bisect
import doctest
import glob
import math
import os
import pathlib

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import jaxwarp
from jaxwarp._src.numerics import fp8, fp8_intrinsics
from jaxwarp._src.numerics.fp8 import (
    FP8_FORMATS,
    PTX_FORMS,
    cvt_f16x2_to_fp8x2,
    cvt_f32_to_e4m3x2,
    cvt_f32_to_e5m2x2,
    cvt_f32_to_fp8x2,
    cvt_fp8x2_to_f16x2,
)
from jaxwarp._src.numerics.fp8_intrinsics import (
    bfloat16raw2_to_fp8x2,
    bfloat16raw_to_fp8,
    float2_to_fp8x2,
    float_to_fp8,
    fp8_to_halfraw,
    fp8x2_to_halfraw2,
    halfraw2_to_fp8x2,
    halfraw_to_fp8,
)
from jaxwarp._src.scaling import ue8m0

FMTS = ("e4m3", "e5m2")
# (exponent bits, mantissa bits, MAX_NORM code, has inf) from the OCP FP8 / PTX definitions
SPEC = {"e4m3": (4, 3, 0x7E, False), "e5m2": (5, 2, 0x7B, True)}


# ----------------------------------------------------------------------------------------
# First-principles reference.


def fp8_value(code: int, fmt: str) -> float:
    eb, mb, maxcode, has_inf = SPEC[fmt]
    bias = (1 << (eb - 1)) - 1
    mag = code & 0x7F
    if mag > maxcode:
        if not has_inf or mag > maxcode + 1:
            return math.nan
        return -math.inf if code & 0x80 else math.inf
    e, m = mag >> mb, mag & ((1 << mb) - 1)
    v = m * 2.0 ** (1 - bias - mb) if e == 0 else (1 + m / (1 << mb)) * 2.0 ** (e - bias)
    return -v if code & 0x80 else v


def _grid(fmt):
    maxcode = SPEC[fmt][2]
    vals = [fp8_value(c, fmt) for c in range(maxcode + 1)]
    top_ulp = vals[-1] - vals[-2]
    # the value after MAX_NORM with an unbounded exponent, and its code's parity
    return vals + [vals[-1] + top_ulp], list(range(maxcode + 2))


GRIDS = {f: _grid(f) for f in FMTS}


def ref_round(v: float, fmt: str, sat: bool, relu: bool = False) -> int:
    """fp8 code of float v: round to nearest, ties to the even code."""
    _, _, maxcode, has_inf = SPEC[fmt]
    if math.isnan(v):
        return 0x7F
    neg = math.copysign(1.0, v) < 0
    a = abs(v)
    vals, codes = GRIDS[fmt]
    if a >= vals[-1]:
        code = maxcode + 1
    else:
        i = bisect.bisect_right(vals, a) - 1
        lo, hi = vals[i], vals[i + 1]
        if a - lo < hi - a or (a - lo == hi - a and codes[i] % 2 == 0):
            code = codes[i]
        else:
            code = codes[i + 1]
    if code == maxcode + 1:  # overflow
        code = maxcode if sat else (0x7C if has_inf else 0x7F)
    code |= 0x80 if neg else 0
    if relu and code & 0x80:
        code = 0
    return code


def ref_many(values, fmt, sat, relu=False):
    with np.errstate(invalid="ignore"):
        values = np.asarray(values).astype(np.float64)
    return np.array([ref_round(float(v), fmt, sat, relu) for v in values], np.uint8)


def u8(x):
    return np.asarray(x).view(np.uint8)


ALL16 = np.arange(1 << 16, dtype=np.uint16)


def f32_samples(seed=0, n=20000):
    """Every fp8 midpoint and value with f32 neighbours, boundaries, specials, random bits."""
    rng = np.random.default_rng(seed)
    parts = [rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)]
    for fmt in FMTS:
        vals = np.array(GRIDS[fmt][0])
        mids = (vals[1:] + vals[:-1]) / 2
        for arr in (vals, mids, -vals, -mids, 2 * vals):
            b = arr.astype(np.float32).view(np.uint32).astype(np.int64)
            parts += [(b + d).astype(np.uint32) for d in (-1, 0, 1)]
    parts.append(np.array([0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00001, 0x7F800001, 0,
                           0x80000000, 1, 0x80000001, 0x7F7FFFFF], np.uint32))
    return np.unique(np.concatenate(parts))


# ----------------------------------------------------------------------------------------
# Exhaustive and sampled comparisons with the reference.


@pytest.mark.parametrize("sat", [True, False], ids=["satfinite", "nosat"])
@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("src", ["f16", "bf16"])
def test_every_16_bit_pattern_rounds_as_the_reference(src, fmt, sat):
    dt = np.float16 if src == "f16" else ml_dtypes.bfloat16
    fn = halfraw_to_fp8 if src == "f16" else bfloat16raw_to_fp8
    got = u8(fn(ALL16, fmt, sat))
    want = ref_many(ALL16.view(dt), fmt, sat)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("sat", [True, False], ids=["satfinite", "nosat"])
@pytest.mark.parametrize("fmt", FMTS)
def test_f32_ties_boundaries_and_random_bits(fmt, sat):
    x = f32_samples()
    got = u8(float_to_fp8(x, fmt, sat))
    np.testing.assert_array_equal(got, ref_many(x.view(np.float32), fmt, sat))


@pytest.mark.parametrize("fmt", FMTS)
def test_every_fp8_pattern_round_trips(fmt):
    codes = np.arange(256, dtype=np.uint8)
    nan = np.isnan([fp8_value(int(c), fmt) for c in codes])
    inf = np.isinf([fp8_value(int(c), fmt) for c in codes])

    @jax.jit  # one program for every conversion of the test
    def round_trips(codes):
        h = fp8_to_halfraw(codes, fmt)
        return {sat: (halfraw_to_fp8(h, fmt, sat),
                      float_to_fp8(jnp.asarray(h).astype(jnp.float32), fmt, sat))
                for sat in (True, False)}

    for sat, (back, back32) in round_trips(codes).items():
        want = codes.copy()
        if sat:  # satfinite turns +-inf (e5m2) into +-MAX_NORM
            want[inf] = (codes[inf] & 0x80) | SPEC[fmt][2]
        back = u8(back)
        np.testing.assert_array_equal(back[~nan], want[~nan])
        assert set(back[nan].tolist()) == {0x7F}
        np.testing.assert_array_equal(u8(back32)[~nan], want[~nan])


@pytest.mark.parametrize("fmt", FMTS)
def test_fp8_to_half_is_exact_and_nan_is_canonical(fmt):
    codes = np.arange(256, dtype=np.uint8)
    vals = np.array([fp8_value(int(c), fmt) for c in codes])
    h = np.asarray(fp8_to_halfraw(codes, fmt))
    fin = ~np.isnan(vals)
    np.testing.assert_array_equal(h[fin].astype(np.float64), vals[fin])
    np.testing.assert_array_equal(np.signbit(h[fin]), np.signbit(vals[fin]))
    assert set(h[~fin].view(np.uint16).tolist()) == {0x7FFF}
    np.testing.assert_array_equal(h, np.asarray(fp8_to_halfraw(codes.view(FP8_FORMATS[fmt]), fmt)))


@pytest.mark.parametrize("val,fmt,sat,want", [
    (464.0, "e4m3", True, 0x7E),        # MAX_NORM + ulp/2 ties to the even MAX_NORM
    (464.0, "e4m3", False, 0x7E),
    (np.nextafter(np.float32(464), np.float32(1e9)), "e4m3", False, 0x7F),
    (np.nextafter(np.float32(464), np.float32(1e9)), "e4m3", True, 0x7E),
    (-np.inf, "e4m3", True, 0xFE),
    (-np.inf, "e4m3", False, 0xFF),
    (61440.0, "e5m2", False, 0x7C),     # MAX_NORM + ulp/2 ties to the even 2**16: inf
    (61440.0, "e5m2", True, 0x7B),
    (np.inf, "e5m2", True, 0x7B),
    (-(2.0 ** -10), "e4m3", True, 0x80),  # half the least subnormal: -0
    (2.0 ** -17 * 1.5, "e5m2", True, 0x01),
    (np.nan, "e5m2", True, 0x7F),
])
def test_saturation_overflow_and_zero_boundaries(val, fmt, sat, want):
    assert int(u8(float_to_fp8(np.float32(val), fmt, sat))) == want


# ----------------------------------------------------------------------------------------
# Packing, relu, the PTX table.


def test_x2_operand_order():
    one, m2 = np.float32(1.0), np.float32(-2.0)
    assert int(cvt_f32_to_e4m3x2(one, m2)) == 0x38C0  # PTX: a -> upper byte
    assert int(cvt_f32_to_e5m2x2(one, m2)) == 0x3CC0
    assert int(float2_to_fp8x2(np.array([one, m2]), "e4m3", True)) == 0xC038  # .x -> low
    assert int(cvt_f16x2_to_fp8x2(np.uint32(0xC0003C00), "e4m3")) == 0xC038
    assert int(halfraw2_to_fp8x2(np.array([1, -2], np.float16), "e4m3", True)) == 0xC038
    assert int(bfloat16raw2_to_fp8x2(np.array([1, -2], ml_dtypes.bfloat16), "e4m3",
                                     False)) == 0xC038
    assert int(cvt_fp8x2_to_f16x2(np.uint16(0xC038), "e4m3")) == 0xC0003C00
    np.testing.assert_array_equal(np.asarray(fp8x2_to_halfraw2(np.uint16(0xC038), "e4m3")),
                                  np.array([1, -2], np.float16))


@pytest.mark.parametrize("fmt", FMTS)
def test_x2_forms_are_two_independent_lanes(fmt):
    x = f32_samples(1, 4000)
    n = len(x) // 2
    a, b = x[:n], x[n:2 * n]
    w = ALL16.astype(np.uint32) << 16 | ALL16[::-1].astype(np.uint32)

    @jax.jit  # one program for every conversion of the test
    def lanes(a, b, w, h):
        return (cvt_f32_to_fp8x2(a, b, fmt), float_to_fp8(a, fmt, True),
                float_to_fp8(b, fmt, True), cvt_f16x2_to_fp8x2(w, fmt),
                halfraw_to_fp8(h, fmt, True), halfraw_to_fp8(h[::-1], fmt, True))

    d, da, db, d16, dh, dh_rev = (np.asarray(v) for v in lanes(a, b, w, ALL16))
    np.testing.assert_array_equal(d >> 8, u8(da))
    np.testing.assert_array_equal(d & 0xFF, u8(db))
    np.testing.assert_array_equal(d16 >> 8, u8(dh))
    np.testing.assert_array_equal(d16 & 0xFF, u8(dh_rev))


@pytest.mark.parametrize("fmt", FMTS)
def test_relu(fmt):
    x = f32_samples(2, 2000)

    @jax.jit  # one program for every conversion of the test
    def relu_and_plain(x, codes):
        return (cvt_f32_to_fp8x2(x, x, fmt, relu=True), cvt_fp8x2_to_f16x2(codes, fmt, relu=True),
                cvt_fp8x2_to_f16x2(codes, fmt))

    got, h, plain = (np.asarray(v) for v in relu_and_plain(x, ALL16))
    got = got & 0xFF
    np.testing.assert_array_equal(got, ref_many(x.view(np.float32), fmt, True, relu=True))
    lo = h & 0xFFFF
    plain = plain & 0xFFFF
    neg = (plain & 0x8000 != 0) & (plain != 0x7FFF)
    np.testing.assert_array_equal(lo[neg], 0)
    np.testing.assert_array_equal(lo[~neg], plain[~neg])


def test_ptx_table_lists_the_forms_ptxas_accepts_for_sm_90():
    want = {f"cvt.rn.satfinite{r}.{f}x2.{s}" for f in FMTS for r in ("", ".relu")
            for s in ("f32", "f16x2")}
    want |= {f"cvt.rn{r}.f16x2.{f}x2" for f in FMTS for r in ("", ".relu")}
    assert set(PTX_FORMS) == want


def test_bad_arguments_say_what_is_allowed():
    with pytest.raises(ValueError, match=r"fmt='e3m4'.*allowed: \('e4m3', 'e5m2'\)"):
        float_to_fp8(np.float32(1), "e3m4", True)
    with pytest.raises(ValueError, match="satfinite"):
        cvt_f32_to_fp8x2(np.float32(1), np.float32(1), "e4m3", satfinite=False)
    with pytest.raises(TypeError, match="x must be a float32 array or its raw bits as uint32"):
        float_to_fp8(np.float16(1), "e4m3", True)
    with pytest.raises(TypeError, match="x must be a uint16 register word"):
        cvt_fp8x2_to_f16x2(np.uint32(1), "e4m3")
    with pytest.raises(ValueError, match="trailing axis of size 2"):
        float2_to_fp8x2(np.zeros(3, np.float32), "e4m3", True)
    with pytest.raises(ValueError, match="saturate"):
        float_to_fp8(np.float32(1), "e4m3", "yes")


# Slow: every fp8 entry point runs under jax.jit by default in tests/test_entry_points.py.
@pytest.mark.slow
def test_jit_and_vmap():
    x = f32_samples(3, 512)[:512]
    f = jax.jit(float_to_fp8, static_argnames=("fmt", "saturate"))
    np.testing.assert_array_equal(u8(f(x, "e4m3", True)), u8(float_to_fp8(x, "e4m3", True)))
    g = jax.vmap(lambda a, b: cvt_f32_to_fp8x2(a, b, "e5m2"))
    xx = x.reshape(16, 32)
    np.testing.assert_array_equal(np.asarray(g(xx, xx[::-1])),
                                  np.asarray(cvt_f32_to_fp8x2(xx, xx[::-1], "e5m2")))


def test_xla_convert_agrees_in_range():
    # In range, on this backend, XLA's convert rounds f16 once (no double rounding through
    # f32 was seen); the model still does its own rounding because XLA has no satfinite and
    # (seen with jax 0.4/0.5 on CPU) keeps the sign of NaN (e4m3 0xFF, PTX model 0x7F).
    v = ALL16.view(np.float16)
    xla = u8(jnp.asarray(v).astype(ml_dtypes.float8_e4m3fn))
    ours = u8(halfraw_to_fp8(ALL16, "e4m3", False))
    fin = np.isfinite(v) & (np.abs(v.astype(np.float32)) <= 448)
    np.testing.assert_array_equal(xla[fin], ours[fin])


# Slow: the same examples run by default in tests/test_docs.py::test_docstring_example.
@pytest.mark.slow
def test_docstring_examples():
    for module in (fp8, fp8_intrinsics, ue8m0):
        result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
        assert result.attempted > 10 and result.failed == 0


# ----------------------------------------------------------------------------------------
# Conformance with an H100 capture, when one is present.


def _capture_file(name):
    here = pathlib.Path(__file__).resolve().parents[1] / "data"
    cands = [here / f"h100_{name}", here / name]
    for root in filter(None, (os.environ.get("JAXWARP_CAPTURES"),)):
        cands += sorted(pathlib.Path(p) for p in glob.glob(f"{root}/**/{name}", recursive=True))
    return next((p for p in cands if p.exists()), None)


CVT_CAPTURE = _capture_file("cvt_fp8.npz")


def model_of(name: str, kind: str, x: np.ndarray) -> np.ndarray | None:
    """The model's output for one recorded form (capture conventions: FORMAT_MOVCVT.md)."""
    if name in PTX_FORMS:
        f = PTX_FORMS[name]
        return np.asarray(f(x[:, 0], x[:, 1]) if kind == "f32pair" else f(x))
    if not name.startswith("nv_cvt_"):
        return None
    parts = name.split(".")
    fn, fmt = parts[0], parts[1]
    sat = len(parts) > 2 and parts[2] == "satfinite"
    pair16 = np.stack([x & 0xFFFF, x >> 16], -1).astype(np.uint16) if x.dtype == np.uint32 \
        else None
    table = {
        "nv_cvt_float_to_fp8": lambda: u8(float_to_fp8(x, fmt, sat)),
        "nv_cvt_float2_to_fp8x2": lambda: np.asarray(float2_to_fp8x2(x, fmt, sat)),
        "nv_cvt_halfraw_to_fp8": lambda: u8(halfraw_to_fp8(x, fmt, sat)),
        "nv_cvt_halfraw2_to_fp8x2": lambda: np.asarray(halfraw2_to_fp8x2(pair16, fmt, sat)),
        "nv_cvt_bfloat16raw_to_fp8": lambda: u8(bfloat16raw_to_fp8(x, fmt, sat)),
        "nv_cvt_bfloat16raw2_to_fp8x2": lambda: np.asarray(
            bfloat16raw2_to_fp8x2(pair16, fmt, sat)),
        "nv_cvt_fp8_to_halfraw": lambda: np.asarray(fp8_to_halfraw(x, fmt)).view(np.uint16),
        "nv_cvt_fp8x2_to_halfraw2": lambda: (lambda h: h[..., 0].astype(np.uint32)
                                             | h[..., 1].astype(np.uint32) << 16)(
            np.asarray(fp8x2_to_halfraw2(x, fmt)).view(np.uint16)),
    }
    return table[fn]()


@pytest.mark.skipif(CVT_CAPTURE is None, reason="no cvt_fp8.npz capture in tests/data; set "
                    "JAXWARP_CAPTURES to a folder of captures")
def test_matches_the_h100_capture_bit_for_bit():
    d = np.load(CVT_CAPTURE)
    forms = sorted({k[4:-2] for k in d.files if k.startswith("cvt/") and k.endswith("/y")})
    assert forms, "capture has no recorded forms"
    bad = {}
    for name in forms:
        kind = str(d[f"cvt/{name}/kind"])
        x, y = d[f"cvt/inputs/{kind}"], d[f"cvt/{name}/y"]
        got = model_of(name, kind, x)
        assert got is not None, f"no model for recorded form {name}"
        n = int(np.sum(got.astype(np.uint32) != y.astype(np.uint32)))
        if n:
            i = int(np.flatnonzero(got.astype(np.uint32) != y.astype(np.uint32))[0])
            bad[name] = f"{n}/{len(y)} differ, e.g. x={x[i].tolist()} model={int(got[i]):#x} " \
                        f"gpu={int(y[i]):#x}"
    assert not bad, f"{CVT_CAPTURE} ({d['device']}): {bad}"


def test_double_to_fp8_rounds_once():
    # Just above an e4m3 / e5m2 tie: through float32 the value would land on the tie and
    # round to even (down); one rounding from the double goes up.
    fmts = ("e4m3", "e5m2")

    @jax.jit  # one program for every conversion below
    def three_ways(x):
        return {fmt: (fp8_intrinsics.float_to_fp8(x.astype(jnp.float32), fmt, True),
                      fp8_intrinsics.double_to_fp8(x, fmt, True), jaxwarp.to_operand(x, fmt))
                for fmt in fmts}

    @jax.jit
    def both_widths(x64, x32):
        return {(fmt, sat): (fp8_intrinsics.double_to_fp8(x64, fmt, sat),
                             fp8_intrinsics.float_to_fp8(x32, fmt, sat))
                for fmt in fmts for sat in (True, False)}

    with jax.enable_x64(True):
        cases = (("e4m3", 1 + 2.0**-4 + 2.0**-40, 1.125),
                 ("e5m2", -(1 + 2.0**-3 + 2.0**-40), -1.25),
                 ("e4m3", 2.0**-10 + 2.0**-50, 2.0**-9))  # half the subnormal
        out = three_ways(jnp.asarray([x for _, x, _ in cases], jnp.float64))
        for i, (fmt, x, want) in enumerate(cases):
            via_f32, once, operand = (float(np.asarray(v[i], np.float32)) for v in out[fmt])
            assert float(np.float32(x)) != x
            assert via_f32 != want
            assert once == want
            assert operand == want
        # Elsewhere the same as the float32 conversion of the same value (every float32
        # that is a double exactly), saturating or not.
        rng = np.random.default_rng(5)
        u = rng.integers(0, 2**32, 4096, dtype=np.uint64).astype(np.uint32)
        x32 = u.view(np.float32)
        with np.errstate(invalid="ignore"):  # signalling NaNs: quiet, still NaN
            x64 = x32.astype(np.float64)
        for got, want in both_widths(jnp.asarray(x64), jnp.asarray(x32)).values():
            np.testing.assert_array_equal(np.asarray(got).view(np.uint8),
                                          np.asarray(want).view(np.uint8))
        with pytest.raises(TypeError, match="float64"):
            fp8_intrinsics.double_to_fp8(jnp.float32(1.0), "e4m3", True)
