"""jaxwarp.mx with user-defined element formats (``jaxwarp.define_format``), bit for bit
against an exact reference written here with Python fractions.

The reference reads nothing from the library: every code's value comes from the format's
fields (sign, exponent field, fraction, bias, the codes ``specials`` reserves); a block's
shared exponent from its amax by each scale rule's definition (OCP MX v1.0 section 6.3;
torchao's FLOOR / CEIL / EVEN; RCEIL's float32 ``amax * (1 / max)``, rounded by NumPy's
IEEE float32 arithmetic); each element is ``x / 2**e`` rounded once onto the format's grid
(exponent unbounded above, ties to even, or stochastically with the 32 random bits added
under the first dropped bit), then the overflow rule (±max when saturating, else the
format's infinity, else its NaN).
"""

from __future__ import annotations

import dataclasses
import functools
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxwarp
from jaxwarp import mx

RULES = ("ocp", "floor", "ceil", "even", "rceil")


@dataclasses.dataclass(frozen=True)
class Spec:
    name: str
    eb: int
    mb: int
    bias: int
    specials: str
    saturate: bool = False

    @property
    def fmt(self):
        return jaxwarp.define_format(self.name, exponent_bits=self.eb, mantissa_bits=self.mb,
                                     bias=self.bias, specials=self.specials,
                                     saturate=self.saturate)


# IEEE P3109 interim report: binary8p3 (bias 2**4) and a saturating binary8p5 (bias
# 2**2); an IEEE-style e3m4 (infinities, -0); a 6-bit format with no special codes.
SPECS = {s.name: s for s in (
    Spec("mxu_binary8p3", 5, 2, 16, "p3109"),
    Spec("mxu_binary8p5_sat", 3, 4, 4, "p3109", saturate=True),
    Spec("mxu_e3m4", 3, 4, 3, "ieee"),
    Spec("mxu_e3m2_none", 3, 2, 3, "none"),
)}


def P2(k: int) -> Fraction:
    return Fraction(2) ** k


def floor_log2(v: Fraction) -> int:
    k = v.numerator.bit_length() - v.denominator.bit_length()
    return k if P2(k) <= v else k - 1


@functools.cache
def codes_of(s: Spec):
    """{code: value} by the definition: a Fraction, "nan", "+inf" or "-inf"."""
    width = s.eb + s.mb
    out = {}
    for code in range(1 << (width + 1)):
        sign, mag = code >> width, code & ((1 << width) - 1)
        e, f = mag >> s.mb, mag & ((1 << s.mb) - 1)
        if s.specials == "ieee" and e == (1 << s.eb) - 1:
            out[code] = "nan" if f else ("-inf" if sign else "+inf")
        elif s.specials == "p3109" and code == 1 << width:
            out[code] = "nan"
        elif s.specials == "p3109" and mag == (1 << width) - 1:
            out[code] = "-inf" if sign else "+inf"
        else:
            v = (Fraction(f, 1 << s.mb) + (e > 0)) * P2(max(e, 1) - s.bias)
            out[code] = -v if sign else v
    return out


@functools.cache
def facts(s: Spec):
    """(max, emax, code of a finite value (+0 for zero), nan code or None, +inf code)."""
    table = codes_of(s)
    finite = {v: c for c, v in sorted(table.items(), reverse=True) if not isinstance(v, str)}
    finite[Fraction(0)] = 0  # +0 (the code 0 in every layout here)
    top = max(v for v in finite)
    # The NaN written: the positive all-ones one where it is a NaN (as the tensor cores),
    # else the format's one NaN (P3109's 0x80).
    nans = [c for c, v in table.items() if v == "nan"]
    ones = (1 << (s.eb + s.mb)) - 1
    nan = ones if ones in nans else (nans[0] if nans else None)
    inf = next((c for c, v in table.items() if v == "+inf"), None)
    return top, floor_log2(top), finite, nan, inf


def ref_scale(amax: Fraction, s: Spec, rule: str) -> int:
    """The unclamped shared exponent of a finite nonzero amax."""
    top, emax = facts(s)[:2]
    if rule == "ocp":
        return floor_log2(amax) - emax
    if rule == "floor":  # the float32 exponent field less 127 (-127 for a subnormal)
        return max(floor_log2(amax), -127) - emax
    if rule == "ceil":
        return floor_log2(amax) + (P2(floor_log2(amax)) != amax) - emax
    if rule == "even":  # amax to mb fraction bits, ties away, then floor(log2)
        q = P2(floor_log2(amax) - s.mb)
        n, r = divmod(amax, q)
        return floor_log2((n + (2 * r >= q)) * q) - emax
    d = Fraction(float(np.float32(float(amax)) * (np.float32(1) / np.float32(float(top)))))
    if d == 0:
        return -127
    k = floor_log2(d)
    return k + (P2(k) != d)


def ref_element(v: Fraction, neg: bool, s: Spec, saturate: bool, r: int | None) -> int:
    """The code of ``(-1)**neg * |v|`` rounded onto the format (r: random bits for
    stochastic rounding)."""
    top, _, finite, nan, inf = facts(s)
    a = abs(v)
    if a:
        q = P2(max(floor_log2(a), 1 - s.bias) - s.mb)
        n, rem = divmod(a, q)
        if r is None:
            n += 2 * rem > q or (2 * rem == q and n % 2 == 1)
        else:
            n += rem + q * Fraction(r, 1 << 32) >= q
        a = n * q
    sign = 1 << (s.eb + s.mb)
    if a > top:
        if saturate or (inf is None and nan is None):
            code = finite[top]
        elif inf is not None:
            return inf | (sign if neg else 0)
        else:
            return nan
    else:
        code = finite[a]
    if neg and not (a == 0 and s.specials == "p3109"):
        code |= sign
    return code


def ref_quantize(x: np.ndarray, s: Spec, rule: str, saturate: bool, rbits=None):
    """(scale codes (rows, blocks), element codes, dequantized float32 bits) of blocks
    of 32 along the last axis."""
    rows, n = x.shape
    scales = np.zeros((rows, n // 32), np.uint32)
    codes = np.zeros(x.shape, np.uint32)
    deq = np.zeros(x.shape, np.float32)
    nan = facts(s)[3]
    for i in range(rows):
        for b in range(n // 32):
            blk = x[i, 32 * b:32 * b + 32]
            if not np.isfinite(blk).all():
                scales[i, b] = 0xFF
                codes[i, 32 * b:32 * b + 32] = nan if nan is not None else 0
                deq[i, 32 * b:32 * b + 32] = np.nan
                continue
            amax = max(abs(Fraction(float(v))) for v in blk)
            e = -127 if amax == 0 else min(max(ref_scale(amax, s, rule), -127), 127)
            scales[i, b] = e + 127
            for j in range(32):
                v = Fraction(float(blk[j]))
                r = None if rbits is None else int(rbits[i, 32 * b + j])
                c = ref_element(v / P2(e), bool(np.signbit(blk[j])), s, saturate, r)
                codes[i, 32 * b + j] = c
                val = codes_of(s)[c]
                if isinstance(val, str):
                    deq[i, 32 * b + j] = np.float32(val)
                else:
                    w = float(val * P2(e))
                    assert Fraction(float(np.float32(w))) == val * P2(e)  # exact in f32
                    deq[i, 32 * b + j] = np.copysign(np.float32(w), -1.0 if c >> (
                        s.eb + s.mb) else 1.0)
    return scales, codes, deq


def make_x(s: Spec, seed: int, rows: int = 8) -> np.ndarray:
    """Blocks of every kind: wide and narrow spreads, exact ties of the grid, values
    that overflow it after the scale (amax just below the next binade), zero blocks."""
    rng = np.random.default_rng(seed)
    x = np.zeros((rows, 32), np.float32)
    for i in range(rows):
        k = int(rng.integers(-20, 20))
        kind = i % 4
        if kind == 0:  # a spread over 2**-12 .. 1 of 2**k
            x[i] = rng.choice([-1, 1], 32) * np.exp2(rng.uniform(-12, 0, 32) + k)
        elif kind == 1:  # midpoints of the grid (ties) and their neighbours
            m = rng.integers(1 << s.mb, 1 << (s.mb + 1), 32)
            ties = (2 * m + 1) / 2 ** (s.mb + 1)  # 1 + (2m+1)/2**(mb+1)-ish, a tie
            x[i] = rng.choice([-1, 1], 32) * ties * np.exp2(rng.integers(-8, 1, 32) + k)
            x[i, 0] = 1.999 * 2.0**k  # amax: the next binade is not reached
        elif kind == 2:  # amax just below a power of two: elements past max (overflow)
            x[i] = rng.uniform(-1, 1, 32) * 2.0**k
            x[i, :4] = [1.99 * 2.0**k, -1.97 * 2.0**k, 1.9 * 2.0**k, -1.999 * 2.0**k]
        elif i % 8 == 3:
            x[i] = 0.0
            x[i, 5] = -0.0
        else:
            x[i] = rng.normal(size=32) * 2.0**k
            x[i, 7] = [np.nan, np.inf, -np.inf][i % 3]
    return x


def _check(s: Spec, rule: str, x: np.ndarray, saturate=None, mode="rn", key=None):
    sat = s.saturate if saturate is None else saturate
    t = mx.quantize(x, s.fmt, scale_rule=rule, saturate=saturate, mode=mode, key=key)
    rbits = None if key is None else np.asarray(jax.random.bits(key, x.shape, jnp.uint32))
    scales, codes, deq = ref_quantize(x, s, rule, sat, rbits)
    assert t.elements.dtype == np.uint8 and t.fmt == s.name
    np.testing.assert_array_equal(np.asarray(t.scales), scales)
    np.testing.assert_array_equal(np.asarray(t.elements), codes)
    np.testing.assert_array_equal(np.asarray(mx.dequantize(t)).view(np.uint32),
                                  deq.view(np.uint32))


# The default run: two (format, rule) pairs (the saturating format's own flag among
# them; the rules' code is the built-in formats', which tests/scaling/test_mx.py runs
# by default); -m slow: every pair.
_DEFAULT = {("mxu_binary8p3", "ocp"), ("mxu_binary8p5_sat", "even")}


@pytest.mark.parametrize("name, rule", [
    pytest.param(n, r, id=f"{n}-{r}", marks=() if (n, r) in _DEFAULT else pytest.mark.slow)
    for n in SPECS for r in RULES])
def test_quantize_matches_exact_reference(name, rule):
    s = SPECS[name]
    _check(s, rule, make_x(s, seed=len(name) * 7 + RULES.index(rule)))


@pytest.mark.slow  # about 1 s each; the default run saturates by binary8p5_sat's flag
@pytest.mark.parametrize("name", ["mxu_binary8p3", "mxu_e3m4"])
def test_saturate_overrides_the_format_flag(name):
    # binary8p3 and e3m4 overflow to ±inf by their own flag; saturate=True clamps.
    s = SPECS[name]
    x = make_x(s, seed=3)
    _check(s, "ocp", x, saturate=True)
    t = mx.quantize(x, s.fmt, scale_rule="ocp")  # OCP's rule overflows ("rceil" never)
    assert (np.asarray(t.elements) == facts(s)[4]).any()  # an overflow to +inf happened


@pytest.mark.slow  # the stochastic carry is the built-in formats' (test_mx.py, default)
def test_stochastic_rounding_matches_reference():
    s = SPECS["mxu_binary8p3"]
    _check(s, "ocp", make_x(s, seed=5), mode="rs", key=jax.random.key(7))


def test_ties_go_to_even_and_zero_blocks():
    s = SPECS["mxu_binary8p3"]  # a block with amax 1.5 (its max 1.5 * 2**15): e = -15
    x = np.zeros((2, 32), np.float32)
    x[0, :5] = [1.5, 1.125, 1.375, -1.125, 0.0]
    x[1, 3] = -0.0
    t = mx.quantize(x, s.fmt)
    np.testing.assert_array_equal(np.asarray(t.scales[:, 0]), [127 - 15, 0])
    vals = np.asarray(mx.dequantize(t))
    # 1.125 is the tie between 1.0 (fraction 00) and 1.25 (01): to even, 1.0; 1.375 the
    # tie between 1.25 and 1.5 (10): to 1.5. Zeros (and the all-zero block) stay +0.
    np.testing.assert_array_equal(vals[0, :5], [1.5, 1.0, 1.5, -1.0, 0.0])
    assert not np.signbit(vals[1]).any()


@pytest.mark.slow  # about 4 s
def test_fake_quantize_jit_and_grad():
    s = SPECS["mxu_binary8p3"]
    x = make_x(s, seed=9, rows=4)[:3]
    want = mx.dequantize(mx.quantize(x, s.fmt))
    got = jax.jit(lambda v: mx.fake_quantize(v, s.name))(x)
    np.testing.assert_array_equal(np.asarray(got).view(np.uint32),
                                  np.asarray(want).view(np.uint32))
    g = jax.grad(lambda v: mx.fake_quantize(v, s.fmt).sum())(jnp.float32(x))
    np.testing.assert_array_equal(np.asarray(g), np.ones_like(x))


@pytest.mark.slow  # about 6 s; docs/formats.md runs the same study
def test_elements_feed_fused_dot():
    # A P3109 study end to end: quantize both operands with binary8p3, one block of 32
    # along k; fused_dot multiplies the codes; the product of the scales rescales it.
    s = SPECS["mxu_binary8p3"]
    rng = np.random.default_rng(1)
    a = rng.normal(size=(4, 32)).astype(np.float32)
    b = rng.normal(size=(32, 2)).astype(np.float32)
    qa, qb = mx.quantize(a, s.fmt, saturate=True), mx.quantize(b, s.fmt, axis=0,
                                                               saturate=True)
    dp = jaxwarp.FusedDot(alignment_bits=28, block=32, rounding="rn")  # exact here
    d = jaxwarp.fused_dot(qa.elements, qb.elements, jnp.zeros((4, 2), jnp.float32),
                          a_format=s.fmt, datapath=dp)
    ea = np.asarray(qa.scales[:, 0], np.int64) - 127
    eb = np.asarray(qb.scales[0], np.int64) - 127
    got = np.asarray(d) * np.exp2(ea[:, None] + eb[None, :])
    da, db = (np.asarray(mx.dequantize(q), np.float64) for q in (qa, qb))
    np.testing.assert_array_equal(got, (da @ db).astype(np.float32))
