"""jaxwarp.mx against an independent reference in exact rational arithmetic.

The reference below is written from the sources' text (OCP Microscaling Formats (MX)
Specification v1.0, section 6.3; torchao's FLOOR / CEIL / EVEN; cuBLAS / cuDNN's RCEIL;
TransformerEngine's NVFP4 recipe), with :class:`fractions.Fraction` values and element
grids stated here from the specifications' tables, not read from the library. Each test
compares bits: block-scale codes, element values (decoded by ml_dtypes) with their signs,
and dequantized float32 words.
"""

from __future__ import annotations

import functools
import math
import pathlib
from fractions import Fraction

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import jaxwarp
from jaxwarp import mx

# --------------------------------------------------------------------------------------
# The reference.

# Element grids (OCP MX v1.0, tables 1 and 2; OFP8): (exponent bias, fraction bits,
# largest magnitude, whether an overflow can give inf / NaN). MXINT8: a fixed point grid
# of 2**-6 with a symmetric range of 127/64 (emax 0).
ELEM = {
    "e4m3": (7, 3, Fraction(448)),
    "e5m2": (15, 2, Fraction(57344)),
    "e2m3": (1, 3, Fraction(15, 2)),
    "e3m2": (3, 2, Fraction(28)),
    "e2m1": (1, 1, Fraction(6)),
}
EMAX = {"e4m3": 8, "e5m2": 15, "e2m3": 2, "e3m2": 4, "e2m1": 2, "int8": 0}
MXF = {"mxfp8_e4m3": "e4m3", "mxfp8_e5m2": "e5m2", "mxfp6_e2m3": "e2m3",
       "mxfp6_e3m2": "e3m2", "mxfp4_e2m1": "e2m1", "mxint8": "int8"}
HAVE_FP4 = "e2m1" in jaxwarp.FORMATS
NEED_FP4 = pytest.mark.skipif(not HAVE_FP4, reason="the format registry lacks e2m1/e2m3/e3m2")
MX_NAMES = [n for n, e in MXF.items() if HAVE_FP4 or e in ("e4m3", "e5m2", "int8")]
RULES = ("ocp", "floor", "ceil", "even", "rceil")
NAN = "nan"


@functools.cache
def P2(k: int) -> Fraction:
    """2**k as a Fraction."""
    return Fraction(1 << k) if k >= 0 else Fraction(1, 1 << -k)


def f32_value(u: int):
    """A float32 bit pattern's value: a Fraction, or "nan" / +-"inf"."""
    e, m, s = (u >> 23) & 0xFF, u & 0x7FFFFF, -1 if u >> 31 else 1
    if e == 0xFF:
        return NAN if m else ("inf" if s > 0 else "-inf")
    v = Fraction(m, 1 << 149) if e == 0 else (m | 1 << 23) * P2(e - 150)
    return s * v


def floor_log2(v: Fraction) -> int:
    k = v.numerator.bit_length() - v.denominator.bit_length()
    return k if P2(k) <= v else k - 1


def round_grid(v: Fraction, q: Fraction, mode: str = "rne") -> Fraction:
    """|v| (>= 0) to a multiple of q: nearest even, nearest away, or truncation."""
    n, r = divmod(v, q)
    if mode == "rz":
        return n * q
    if r * 2 > q or (r * 2 == q and (mode == "rna" or n % 2 == 1)):
        n += 1
    return n * q


def round_float(v: Fraction, bias: int, mbits: int, mode: str = "rne") -> Fraction:
    """|v| onto a float grid with subnormals, exponent unbounded above."""
    if v == 0:
        return v
    e = max(floor_log2(v), 1 - bias)
    return round_grid(v, P2(e - mbits), mode)


F32_MAX = (2 - Fraction(1, 1 << 23)) * Fraction(2) ** 127


def fl32(v: Fraction):
    """The float32 rounding (to nearest even) of a finite value: Fraction or +-inf."""
    r = round_float(abs(v), 127, 23)
    if r > F32_MAX:
        return "inf" if v > 0 else "-inf"
    return r if v >= 0 else -r


def f32_bits(v, neg_zero: bool = False) -> int:
    """A value's float32 bits (it must be representable)."""
    if v == NAN:
        return 0x7FC00000
    if v in ("inf", "-inf"):
        return 0x7F800000 | (0x80000000 if v == "-inf" else 0)
    sign = 0x80000000 if v < 0 or (v == 0 and neg_zero) else 0
    a = abs(v)
    if a == 0:
        return sign
    e = floor_log2(a)
    if e < -126:
        m = a * P2(149)
        assert m.denominator == 1
        return sign | int(m)
    m = a / P2(e) * (1 << 23)
    assert m.denominator == 1 and e <= 127
    return sign | (e + 127) << 23 | (int(m) - (1 << 23))


def elem_round(v: Fraction, elem: str, mode: str, r: int | None):
    """x / X onto the element grid, saturating; ``r`` the 32 random bits for "rs"."""
    a = abs(v)
    if elem == "int8":
        q, top = Fraction(1, 64), Fraction(127, 64)
    else:
        bias, mbits, top = ELEM[elem]
        q = P2(max(floor_log2(a), 1 - bias) - mbits) if a else Fraction(1)
    if mode == "rn":
        out = round_grid(a, q)
    else:  # add the random bits under the first dropped bit, then truncate
        out = round_grid(a + q * Fraction(r, 1 << 32), q, "rz")
    return min(out, top), v < 0


def e8m0(amax, fmt: str, rule: str) -> int:
    """The ue8m0 code of a block's scale."""
    if amax in (NAN, "inf"):
        return 0xFF
    elem = MXF[fmt]
    if amax == 0:
        e = -127
    elif rule in ("ocp", "floor"):
        e = floor_log2(amax) - EMAX[elem]
    elif rule == "ceil":
        e = floor_log2(amax) + (P2(floor_log2(amax)) != amax) - EMAX[elem]
    elif rule == "even":
        mbits = 6 if elem == "int8" else ELEM[elem][1]
        e = floor_log2(round_float(amax, 10**6, mbits, "rna")) - EMAX[elem]
    else:  # rceil: the smallest power of two >= fl32(amax / max)
        top = Fraction(127, 64) if elem == "int8" else ELEM[elem][2]
        d = fl32(amax / top)
        if d == 0:
            e = -127
        else:
            k = floor_log2(d)
            e = k if P2(k) == d else k + 1
    return min(max(e, -127), 127) + 127


def ref_mx(u: np.ndarray, fmt: str, rule: str, mode: str = "rn", rbits=None):
    """Reference for 1D blocks along the last axis of uint32 patterns ``u`` (n, block):
    (scale codes, element values as float32 bits, dequantized float32 bits)."""
    elem = MXF[fmt]
    nb, bs = u.shape
    codes = np.zeros(nb, np.uint8)
    vals = np.zeros((nb, bs), np.uint32)
    deq = np.zeros((nb, bs), np.uint32)
    for i in range(nb):
        xs = [f32_value(int(w)) for w in u[i]]
        specials = [x for x in xs if isinstance(x, str)]
        amax = NAN if specials else max(abs(x) for x in xs)
        c = e8m0(amax, fmt, rule)
        codes[i] = c
        if c == 0xFF:
            deq[i] = 0x7FC00000
            vals[i] = 0x7FC00000 if elem in ("e4m3", "e5m2") else 0
            continue
        X = P2(c - 127)
        for j, x in enumerate(xs):
            r = None if rbits is None else int(rbits[i, j])
            v, _ = elem_round(x / X, elem, mode, r)
            neg = bool(u[i, j] >> 31) and (v != 0 or elem != "int8")  # int8 has no -0
            vals[i, j] = f32_bits(-v if neg else v, neg)
            d = fl32(v * X)  # beyond float32's range: inf
            deq[i, j] = f32_bits(("-inf" if d == "inf" else -d) if neg else d, neg)
    return codes, vals, deq


def element_values(t) -> np.ndarray:
    """The elements' values as float32 bits, decoded with ml_dtypes (not the library)."""
    el = np.asarray(t.elements)
    if t.fmt == "mxint8":
        return (el.astype(np.float32) / 64).view(np.uint32)
    if el.dtype == np.uint8:  # codes of fp6 / fp4
        dt = {"mxfp6_e2m3": ml_dtypes.float6_e2m3fn, "mxfp6_e3m2": ml_dtypes.float6_e3m2fn,
              "mxfp4_e2m1": ml_dtypes.float4_e2m1fn, "nvfp4": ml_dtypes.float4_e2m1fn}[t.fmt]
        return el.view(dt).astype(np.float32).view(np.uint32)
    return el.astype(np.float32).view(np.uint32)


# --------------------------------------------------------------------------------------
# Inputs: blocks of float32 patterns with ties, subnormals, saturation, zeros, specials.


def _grid_points(elem: str) -> list[Fraction]:
    """Every non-negative value of the element grid, in order."""
    if elem == "int8":
        return [Fraction(k, 64) for k in range(128)]
    bias, mbits, top = ELEM[elem]
    pts, v = [], Fraction(0)
    while v <= top:
        pts.append(v)
        v += P2(max(floor_log2(v) if v else 0, 1 - bias) - mbits)
    return pts


def _to_bits(vals) -> np.ndarray:
    return np.array([f32_bits(fl32(v)) if not isinstance(v, str) else f32_bits(v)
                     for v in vals], np.uint32)


def make_blocks(fmt: str, nblocks: int, seed: int, bs: int = 32) -> np.ndarray:
    """(nblocks, bs) float32 patterns; kinds cycle through the cases the rules split on."""
    rng = np.random.default_rng(seed)
    elem = MXF[fmt]
    grid = _grid_points(elem)
    out = np.zeros((nblocks, bs), np.uint32)
    for i in range(nblocks):
        kind = i % 8
        if kind == 0:  # random patterns within a few binades (random exponent base)
            base = int(rng.integers(1, 250))
            e = np.clip(base + rng.integers(-12, 3, bs), 0, 254).astype(np.uint32)
            row = (rng.integers(0, 2, bs).astype(np.uint32) << 31) | (e << 23) | \
                rng.integers(0, 1 << 23, bs).astype(np.uint32)
        elif kind == 1:  # ties and near-ties between element grid points, times 2**k
            k = int(rng.integers(-130, 120))
            vals = []
            for _ in range(bs):
                j = int(rng.integers(0, len(grid) - 1))
                mid = (grid[j] + grid[j + 1]) / 2
                jitter = Fraction(int(rng.integers(-1, 2)), 1 << 30) * (grid[j + 1] - grid[j])
                vals.append((mid + jitter) * P2(k) * (1 if rng.random() < .5 else -1))
            vals[0] = grid[-1] * P2(k)  # fixes the scale at k (ocp rule)
            row = _to_bits(vals)
        elif kind == 2:  # saturation: amax just below the next power of two
            k = int(rng.integers(-100, 100))
            row = _to_bits([(2 - Fraction(int(rng.integers(1, 64)), 1024))
                            * Fraction(2) ** (k + int(rng.integers(-3, 1)))
                            for _ in range(bs)])
        elif kind == 3:  # float32 subnormals (amax clamps the scale at 2**-127)
            row = rng.integers(0, 1 << 23, bs).astype(np.uint32) | \
                (rng.integers(0, 2, bs).astype(np.uint32) << 31)
        elif kind == 4:  # zero block (signed zeros)
            row = rng.integers(0, 2, bs).astype(np.uint32) << 31
        elif kind == 5:  # a NaN or an infinity among finite values
            row = rng.integers(0x3F000000, 0x40000000, bs).astype(np.uint32)
            row[int(rng.integers(0, bs))] = [0x7FC00000, 0x7F800000, 0xFF800000,
                                             0x7F800001][i // 8 % 4]
        elif kind == 6:  # huge and tiny magnitudes (scale clamps at +-127)
            e = rng.choice([1, 2, 3, 252, 253, 254], bs).astype(np.uint32)
            row = (e << 23) | rng.integers(0, 1 << 23, bs).astype(np.uint32)
        else:  # element subnormals: one large value, the rest far smaller
            e = int(rng.integers(20, 230))
            ex = np.clip(e - rng.integers(0, 30, bs), 1, 254).astype(np.uint32)
            row = (ex << 23) | rng.integers(0, 1 << 23, bs).astype(np.uint32)
            row[0] = (e << 23) | 0x7FFFFF
        out[i] = row
    return out


def _check(fmt, rule, u, mode="rn", key=None):
    x = u.view(np.float32)
    t = mx.quantize(x, fmt, scale_rule=rule, mode=mode, key=key)
    rbits = None
    if mode == "rs":
        rbits = np.asarray(jax.random.bits(key, u.shape, jnp.uint32))
    codes, vals, deq = ref_mx(u, fmt, rule, mode, rbits)
    np.testing.assert_array_equal(np.asarray(t.scales).reshape(codes.shape), codes)
    np.testing.assert_array_equal(element_values(t), vals)
    np.testing.assert_array_equal(np.asarray(mx.dequantize(t)).view(np.uint32), deq)
    return u.size


# --------------------------------------------------------------------------------------
# Bit-for-bit against the reference.

DEFAULT_VALUES = 10**5  # over all (format, rule) cases (10**6 more under -m slow)


def _default_blocks() -> int:
    """Blocks of 32 per (format, rule) case: together the cases compare 10**5 values (the
    default run makes a spread of the cases: conftest.DEFAULT_CASES)."""
    return -(-DEFAULT_VALUES // (32 * len(MX_NAMES) * len(RULES)))


def _seed(*parts) -> int:
    return int.from_bytes("/".join(map(str, parts)).encode()[-8:], "little")


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("fmt", MX_NAMES)
def test_mx_matches_reference(fmt, rule):
    _check(fmt, rule, make_blocks(fmt, _default_blocks(), seed=_seed(fmt, rule)))


@pytest.mark.slow
@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("fmt", MX_NAMES)
def test_mx_matches_reference_large(fmt, rule):
    nblocks = -(-10**6 // (32 * len(MX_NAMES) * len(RULES)))
    _check(fmt, rule, make_blocks(fmt, nblocks, seed=_seed("slow", fmt, rule)))


@pytest.mark.parametrize("fmt", MX_NAMES)
def test_stochastic_rounding_matches_reference(fmt):
    key = jax.random.key(3)
    _check(fmt, "ocp", make_blocks(fmt, 64, seed=11), mode="rs", key=key)


def test_one_default_scale_rule():
    # The registry's default rule is what quantize and fake_quantize use when given none:
    # rceil for every MX format (user-defined too), NVFP4's own for NVFP4.
    p3 = jaxwarp.define_format("mx_default_p3", exponent_bits=5, mantissa_bits=2,
                               specials="p3109")
    rng = np.random.default_rng(5)
    x = jnp.asarray(rng.uniform(0, 1, (4, 64)), jnp.float32)  # all positive: rules differ
    for fmt in (*mx.MX_FORMATS, p3):
        f = mx.MX_FORMATS[fmt] if isinstance(fmt, str) else None
        rule = "nvfp4" if fmt == "nvfp4" else mx.DEFAULT_SCALE_RULE
        assert f is None or f.default_scale_rule == rule
        want = mx.quantize(x, fmt, scale_rule=rule)
        got = mx.quantize(x, fmt)
        np.testing.assert_array_equal(np.asarray(got.scales), np.asarray(want.scales))
        if fmt in ("mxfp8_e4m3", p3):  # fake_quantize reads the same default
            np.testing.assert_array_equal(
                np.asarray(mx.fake_quantize(x, fmt)).view(np.uint32),
                np.asarray(mx.dequantize(want)).view(np.uint32))
    assert mx.DEFAULT_SCALE_RULE == "rceil"
    assert mx.RECIPES["mxfp8"].scale_rule == mx.DEFAULT_SCALE_RULE


def test_floor_equals_ocp_on_float32():
    """torchao's FLOOR (the fp32 exponent field) and OCP's floor(log2(amax)) agree on
    every float32 input once clamped to ue8m0's range."""
    u = make_blocks("mxfp8_e4m3", _default_blocks(), seed=5)  # the shape compiled above
    for fmt in MX_NAMES:
        a = mx.quantize(u.view(np.float32), fmt, scale_rule="ocp").scales
        b = mx.quantize(u.view(np.float32), fmt, scale_rule="floor").scales
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


# --------------------------------------------------------------------------------------
# Layouts: axes, 2D blocks, vmap, jit.


def test_axis_and_2d_blocks_are_the_1d_reference_on_views():
    u = make_blocks("mxfp8_e4m3", 64, seed=2).reshape(64, 32)
    x = u.view(np.float32)
    t0 = mx.quantize(x.T, "mxfp8_e4m3", axis=0)  # blocks along axis 0 of (32, 64)
    t1 = mx.quantize(x, "mxfp8_e4m3")
    np.testing.assert_array_equal(np.asarray(t0.scales).T, np.asarray(t1.scales))
    np.testing.assert_array_equal(np.asarray(mx.dequantize(t0)).T.view(np.uint32),
                                  np.asarray(mx.dequantize(t1)).view(np.uint32))
    # A 16x16 block is the 1D reference on the tile's 256 elements.
    w = make_blocks("mxfp8_e4m3", 32, seed=9, bs=32).reshape(32, 32)
    t2 = mx.quantize(w.view(np.float32), "mxfp8_e4m3", block=(16, 16), scale_rule="ocp")
    tiles = w.reshape(2, 16, 2, 16).transpose(0, 2, 1, 3).reshape(4, 256)
    codes, _, deq = ref_mx(tiles, "mxfp8_e4m3", "ocp")
    np.testing.assert_array_equal(np.asarray(t2.scales).reshape(4), codes)
    got = np.asarray(mx.dequantize(t2)).view(np.uint32)
    np.testing.assert_array_equal(got.reshape(2, 16, 2, 16).transpose(0, 2, 1, 3)
                                  .reshape(4, 256), deq)


def test_jit_vmap_grad():
    x = make_blocks("mxfp8_e4m3", 8, seed=4)[[0, 1, 2, 7]].view(np.float32)  # finite rows
    eager = mx.quantize(x, "mxfp8_e5m2")
    jitted = jax.jit(lambda v: mx.quantize(v, "mxfp8_e5m2"))(x)
    mapped = jax.vmap(lambda v: mx.quantize(v, "mxfp8_e5m2"))(x)
    for t in (jitted, mapped):
        np.testing.assert_array_equal(np.asarray(t.scales).ravel(),
                                      np.asarray(eager.scales).ravel())
        np.testing.assert_array_equal(np.asarray(mx.dequantize(t)).view(np.uint32),
                                      np.asarray(mx.dequantize(eager)).view(np.uint32))
    back = jax.vmap(mx.dequantize)(mapped)
    np.testing.assert_array_equal(np.asarray(back).view(np.uint32),
                                  np.asarray(mx.dequantize(eager)).view(np.uint32))
    g = jax.grad(lambda v: (mx.fake_quantize(v, "mxint8") * 3.0).sum())(x)
    np.testing.assert_array_equal(np.asarray(g), np.full(x.shape, 3.0, np.float32))
    # Straight-through in both modes: the tangent and the cotangent pass unchanged.
    f = jax.jit(lambda v: mx.fake_quantize(v, "mxfp8_e4m3", block=(4, 32), axis=-1))
    t = np.linspace(-2, 2, x.size, dtype=np.float32).reshape(x.shape)
    out, tan = jax.jvp(f, (x,), (t,))
    np.testing.assert_array_equal(np.asarray(out), np.asarray(mx.dequantize(
        mx.quantize(x, "mxfp8_e4m3", block=(4, 32)))))
    np.testing.assert_array_equal(np.asarray(tan), t)
    np.testing.assert_array_equal(np.asarray(jax.vjp(f, x)[1](t)[0]), t)


# --------------------------------------------------------------------------------------
# Properties.


def _representable(fmt: str, codes, k: int) -> np.ndarray:
    """A block of representable values: element grid values * 2**k, one at the top
    binade (so that "ocp" picks k)."""
    grid = _grid_points(MXF[fmt])
    vals = [grid[c % len(grid)] * (-1 if c & 1 << 10 else 1) * P2(k)
            for c in codes]
    vals[0] = grid[-1] * P2(k)
    return np.array([f32_bits(v) for v in vals], np.uint32)


@settings(max_examples=30, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(MX_NAMES), st.lists(st.integers(0, 2047), min_size=32, max_size=32),
       st.integers(-110, 110))
def test_representable_values_round_trip(fmt, codes, k):
    k = k - 15 if MXF[fmt] == "e5m2" and k > 95 else k  # keep 57344 * 2**k in float32
    u = _representable(fmt, codes, k)
    x = u.view(np.float32)
    back = np.asarray(mx.dequantize(mx.quantize(x, fmt))).view(np.uint32)
    np.testing.assert_array_equal(back, u)


def test_stochastic_rounding_is_unbiased_and_deterministic():
    x = np.array([1 + 1 / 3, 2.6, -0.3, 5.1, 0.07, 3.9, 1.0, 2.2] * 4, np.float32)
    x[0] = 7.0  # amax: scale 2**(2 - 8) for e4m3
    keys = jax.random.split(jax.random.key(0), 4000)
    f = jax.jit(jax.vmap(lambda k: mx.fake_quantize(x, "mxfp8_e4m3", mode="rs", key=k)))
    samples = np.asarray(f(keys), np.float64)
    mean = samples.mean(axis=0)
    # Each sample is one of two neighbours q apart: the mean's standard error is at most
    # q / (2 * sqrt(n)); five of them is a statistical bound, not bits.
    t = mx.quantize(x, "mxfp8_e4m3")
    q = np.array([2.0 ** (max(math.floor(math.log2(abs(v) / 2.0 ** (int(t.scales[0]) - 127)))
                               if v else -6, -6) - 3 + int(t.scales[0]) - 127) for v in x])
    assert np.all(np.abs(mean - x.astype(np.float64)) <= 5 * q / (2 * np.sqrt(len(keys))))
    again = np.asarray(f(keys), np.float64)
    np.testing.assert_array_equal(samples, again)
    assert len(np.unique(samples[:, 1])) == 2  # 2.6 is not on the grid: both neighbours


# --------------------------------------------------------------------------------------
# NVFP4 (needs e2m1 and ue4m3 in the format registry).

E4M3 = (7, 3, Fraction(448))


def ref_nvfp4(u: np.ndarray, mode: str = "rn", rbits=None):
    """TransformerEngine's two-level recipe in torchao's order, every float32 step
    rounded to nearest even: s_t = amax / 2688; s_b = e4m3(clamp((amax_b / 6) / s_t,
    2**-6, 448)); element e2m1(x * ((1 / s_t) / s_b))."""
    xs = [[f32_value(int(w)) for w in row] for row in u]
    flat = [v for row in xs for v in row]
    if any(isinstance(v, str) for v in flat):
        return None
    tmax = max(abs(v) for v in flat)
    s_t = Fraction(1) if tmax == 0 else fl32(tmax / 2688)
    codes, vals, deq = [], [], []
    for i, row in enumerate(xs):
        amax = max(abs(v) for v in row)
        q = min(max(fl32(fl32(amax / 6) / s_t), Fraction(1, 64)), E4M3[2])
        sb = round_float(q, E4M3[0], E4M3[1])
        codes.append(sb)
        factor = fl32(fl32(1 / s_t) / sb)
        for j, x in enumerate(row):
            neg = bool(u[i, j] >> 31)
            r = None if rbits is None else int(rbits[i, j])
            v, _ = elem_round(fl32(x * factor), "e2m1", mode, r)
            vals.append(f32_bits(-v if neg else v, neg))
            d = fl32(v * sb * s_t)
            deq.append(f32_bits(-d if neg else d, neg))
    return s_t, codes, np.array(vals, np.uint32), np.array(deq, np.uint32)


NV_SHAPE = (128, 16)  # one shape for every NVFP4 test: one compilation per mode


@NEED_FP4
@pytest.mark.parametrize("mode", ["rn", "rs"])
@pytest.mark.parametrize("seed", [0, 1] + [pytest.param(s, marks=pytest.mark.slow)
                                           for s in range(2, 8)])
def test_nvfp4_matches_reference(seed, mode):
    rng = np.random.default_rng(seed)
    u = make_blocks("mxfp4_e2m1", 192, seed=seed, bs=16)
    u = u[np.isfinite(u.view(np.float32)).all(axis=1)]  # specials: their own test
    u = u[rng.permutation(len(u))[:NV_SHAPE[0]]]
    key = jax.random.key(seed)
    t = mx.quantize(u.view(np.float32), "nvfp4", mode=mode, key=key if mode == "rs" else None)
    rbits = np.asarray(jax.random.bits(key, u.shape, jnp.uint32)) if mode == "rs" else None
    s_t, codes, vals, deq = ref_nvfp4(u, mode, rbits)
    assert f32_bits(s_t) == int(np.asarray(t.tensor_scale).view(np.uint32))
    got_sb = np.asarray(t.scales).astype(np.uint8).view(ml_dtypes.float8_e4m3fn)
    np.testing.assert_array_equal(got_sb.astype(np.float32).ravel(),
                                  np.array([float(c) for c in codes], np.float32))
    np.testing.assert_array_equal(element_values(t).ravel(), vals)
    np.testing.assert_array_equal(np.asarray(mx.dequantize(t)).view(np.uint32).ravel(), deq)


@NEED_FP4
def test_nvfp4_specials_make_nan():
    x = np.ones(NV_SHAPE, np.float32)
    for bad in (np.nan, np.inf, -np.inf):
        y = x.copy()
        y[1, 3] = bad
        assert np.isnan(np.asarray(mx.dequantize(mx.quantize(y, "nvfp4")))).all()
    z = mx.quantize(np.zeros(NV_SHAPE, np.float32), "nvfp4")
    assert float(z.tensor_scale) == 1.0 and not np.asarray(mx.dequantize(z)).any()


# --------------------------------------------------------------------------------------
# torchao's quantizer (golden file made by tools/mx_torchao_golden.py with torchao 0.18.0
# on torch 2.13 CPU).

GOLDEN = (pathlib.Path(__file__).resolve().parents[1] / "data" / "quantizers"
          / "torchao_mx_golden.npz")
TORCHAO_ELEM = {"e4m3": "mxfp8_e4m3", "e5m2": "mxfp8_e5m2", "e2m3": "mxfp6_e2m3",
                "e3m2": "mxfp6_e3m2", "e2m1": "mxfp4_e2m1"}


def _codes(t) -> np.ndarray:
    el = np.asarray(t.elements)
    return el if el.dtype == np.uint8 else el.view(np.uint8)


@NEED_FP4
@pytest.mark.parametrize("rule", ["floor", "ceil", "even", "rceil"])
@pytest.mark.parametrize("elem", list(TORCHAO_ELEM))
def test_torchao_mx_golden(elem, rule):
    """Every ue8m0 scale equals torchao's; every element code too, except in blocks whose
    scale is 2**-127 (code 0): torchao 0.18 divides those by 2**-126 (it clamps the
    float32 scale to the smallest normal, a workaround its source comments on)."""
    g = np.load(GOLDEN)
    x = g["mx_x"]
    t = mx.quantize(x.view(np.float32), TORCHAO_ELEM[elem], scale_rule=rule)
    scales = np.asarray(t.scales).ravel()
    np.testing.assert_array_equal(scales, g[f"mx/{elem}/{rule}/scales"])
    keep = scales != 0
    assert keep.sum() > 400
    np.testing.assert_array_equal(_codes(t)[keep], g[f"mx/{elem}/{rule}/codes"][keep])


@NEED_FP4
def test_torchao_nvfp4_golden():
    g = np.load(GOLDEN)
    for i in range(8):
        x = g[f"nvfp4/{i}/x"]  # (32, 64): blocks of 16 along the rows, as NV_SHAPE's
        t = mx.quantize(x.view(np.float32).reshape(NV_SHAPE), "nvfp4")
        assert int(np.asarray(t.tensor_scale).view(np.uint32)) == int(g[f"nvfp4/{i}/tensor_scale"])
        np.testing.assert_array_equal(np.asarray(t.scales).reshape(32, 4),
                                      g[f"nvfp4/{i}/scales"])
        np.testing.assert_array_equal(_codes(t).reshape(32, 64), g[f"nvfp4/{i}/codes"])


@pytest.mark.parametrize("fmt,big,sat,nosat", [
    ("mxfp8_e4m3", 500.0, 448.0, np.nan),      # 500 rounds to 512 > 448: e4m3 has no inf
    ("mxfp8_e5m2", 65000.0, 57344.0, np.inf),  # 65000 rounds to 65536 > 57344
])
def test_saturate_argument(fmt, big, sat, nosat):
    """"ocp" puts 500 (e4m3) and 65000 (e5m2) at scale 2**0, above the element's largest
    value: saturate=True clamps to it, saturate=False overflows as a plain conversion."""
    x = np.zeros(32, np.float32)
    x[:2] = big, -big
    for saturate, want in ((True, sat), (False, nosat)):
        t = mx.quantize(x, fmt, scale_rule="ocp", saturate=saturate)
        assert int(t.scales[0]) == 127
        got = np.asarray(mx.dequantize(t))[:2]
        np.testing.assert_array_equal(got, np.array([want, -want], np.float32))
