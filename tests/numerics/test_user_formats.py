"""User-defined formats (``jaxwarp.define_format``): rounding onto them bit for bit against
an exact reference written here from the definition, with Python fractions.

The reference: every code's value from the format's fields (sign, exponent field, fraction,
bias; the codes ``specials`` reserves), the sorted finite magnitudes plus the one past the
largest (``max + ulp``, where an unbounded exponent would put it: a value that rounds to it
overflows), and the midpoints between neighbours, each checked exact in float64 with
``Fraction``; a float32 input (exact in float64) is then placed among them by exact float64
comparisons. Ties go to the even code (rn) or away (rna); rz takes the lower neighbour.
"""

from __future__ import annotations

import dataclasses
import doctest
import pathlib
from fractions import Fraction

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import jaxwarp


@dataclasses.dataclass(frozen=True)
class Spec:
    """The fields of a test format, as given to define_format (bias resolved)."""

    name: str
    eb: int
    mb: int
    bias: int
    specials: str = "ieee"
    signed: bool = True
    saturate: bool = False

    def define(self):
        return jaxwarp.define_format(self.name, exponent_bits=self.eb, mantissa_bits=self.mb,
                                     bias=self.bias, specials=self.specials,
                                     signed=self.signed, saturate=self.saturate)


# P3109 interim report (binary8pP: P - 1 fraction bits, bias 2**(7 - P)); FNUZ as LLVM's
# Float8E4M3FNUZ; a 16-bit format; a saturating e5m2; an unsigned one; one with no specials.
SPECS = {s.name: s for s in (
    Spec("t_binary8p3", 5, 2, 16, "p3109"),
    Spec("t_binary8p5", 3, 4, 4, "p3109"),
    Spec("t_e4m3fnuz_sat", 4, 3, 8, "fnuz", saturate=True),
    Spec("t_e6m9", 6, 9, 31, "ieee"),  # 16 bits: its reference takes seconds (slow)
    Spec("t_e4m7", 4, 7, 7, "ieee"),
    Spec("t_e5m2_sat", 5, 2, 15, "ieee", saturate=True),
    Spec("t_ue4m4", 4, 4, 7, "fn", signed=False),
    Spec("t_e3m3_none", 3, 3, 2, "none"),
)}


def _decode_ref(s: Spec, code: int):
    """'nan', ('inf', sign) or the exact Fraction of a code: the definition."""
    width = s.eb + s.mb
    sign = (code >> width) & 1 if s.signed else 0
    mag = code & ((1 << width) - 1)
    e, f = mag >> s.mb, mag & ((1 << s.mb) - 1)
    all_ones = mag == (1 << width) - 1
    if s.specials == "ieee" and e == (1 << s.eb) - 1:
        return "nan" if f else ("inf", sign)
    if s.specials == "fn" and all_ones:
        return "nan"
    if s.specials in ("fnuz", "p3109") and sign and mag == 0:
        return "nan"
    if s.specials == "p3109" and all_ones:
        return ("inf", sign)
    v = Fraction(f, 1 << s.mb) * Fraction(2) ** (1 - s.bias) if e == 0 else (
        (1 + Fraction(f, 1 << s.mb)) * Fraction(2) ** (e - s.bias))
    return -v if sign else v


class _Ref:
    """The grid of one format: magnitudes (float64, exact) with their codes."""

    def __init__(self, s: Spec):
        self.s = s
        codes = range(1 << (s.signed + s.eb + s.mb))
        vals = {c: _decode_ref(s, c) for c in codes}
        self.vals = vals
        mags = sorted({v for v in vals.values() if isinstance(v, Fraction) and v >= 0})
        self.code_of = {v: c for c, v in vals.items() if isinstance(v, Fraction) and v >= 0
                        and not (v == 0 and c != 0)}
        top = mags[-1]
        # The top's own binade: ulp = 2**(exponent(top) - mb).
        e_top = 1 - s.bias
        while Fraction(2) ** (e_top + 1) <= top:
            e_top += 1
        ulp = Fraction(2) ** (max(e_top, 1 - s.bias) - s.mb)
        self.max = top
        ext = [*mags, top + ulp]  # the value past the top: overflow
        self.mags = np.array([float(v) for v in ext])
        mids = [(x + y) / 2 for x, y in zip(ext, ext[1:], strict=False)]
        self.mids = np.array([float(v) for v in mids])
        assert all(Fraction(float(v)) == v for v in ext + mids)  # exact in float64
        # Parity of each grid point's code (the one past the top: the next code up).
        self.odd = np.array([self.code_of[v] & 1 for v in mags] + [
            (self.code_of[top] + 1) & 1], bool)

    def codes(self, x: np.ndarray, mode: str) -> np.ndarray:
        """Reference codes of finite float32 x."""
        s, ax = self.s, np.abs(x.astype(np.float64))
        i = np.clip(np.searchsorted(self.mags, ax, side="right") - 1, 0, len(self.mags) - 1)
        lo_exact = self.mags[i] == ax
        nxt = np.minimum(i + 1, len(self.mags) - 1)
        if mode == "rz":
            j = i
        else:
            mid = self.mids[np.minimum(i, len(self.mids) - 1)]
            up = ax > mid
            tie = ax == mid
            up |= tie & (self.odd[i] if mode == "rn" else True)
            j = np.where(lo_exact, i, np.where(up, nxt, i))
        beyond = ax > self.mags[-1]
        over = (j == len(self.mags) - 1) | beyond
        max_code = self.code_of[self.max]
        mag_codes = np.array([self.code_of[Fraction(v)] for v in self.mags[:-1]] + [0],
                             np.int64)
        code = mag_codes[np.minimum(j, len(self.mags) - 2)]
        neg = np.signbit(x)
        sign_bit = 1 << (s.eb + s.mb) if s.signed else 0
        inf_code = next((c for c, v in self.vals.items() if v == ("inf", 0)), None)
        nan_code = None  # the NaN written: the positive all-ones one, or the -0 code
        if s.specials in ("ieee", "fn"):
            nan_code = (1 << (s.eb + s.mb)) - 1
        elif s.specials in ("fnuz", "p3109"):
            nan_code = sign_bit
        if s.saturate or mode == "rz":
            big, big_signed = max_code, True
        elif inf_code is not None:
            big, big_signed = inf_code, True
        elif nan_code is not None:
            big, big_signed = nan_code, False
        else:
            big, big_signed = max_code, True
        code = np.where(over, big, code)
        signed_part = np.where(over & ~big_signed, 0, sign_bit * neg)
        if s.specials in ("fnuz", "p3109"):
            signed_part = np.where(code == 0, 0, signed_part)
        if not s.signed:
            return np.where(neg & (code != 0), nan_code if nan_code is not None else 0, code)
        return code | signed_part


_REFS: dict[str, _Ref] = {}


def _ref(name: str) -> _Ref:
    if name not in _REFS:
        _REFS[name] = _Ref(SPECS[name])
    return _REFS[name]


def _inputs(ref: _Ref, n: int, seed: int) -> np.ndarray:
    """Finite float32 inputs: the grid, its midpoints (ties) and their float32
    neighbours, and random bit patterns over the format's range and a little beyond."""
    rng = np.random.default_rng(seed)
    pts = np.concatenate([ref.mags, ref.mids]).astype(np.float32)
    near = np.concatenate([pts, np.nextafter(pts, np.float32(np.inf)),
                           np.nextafter(pts, np.float32(0))])
    lo = ref.s.bias + ref.s.mb + 3  # a few binades below the smallest subnormal
    e = rng.integers(max(127 - lo, 1), min(127 + int(np.log2(float(ref.max))) + 3, 254), n)
    rand = ((e.astype(np.uint32) << 23) | rng.integers(0, 1 << 23, n, dtype=np.uint32))
    x = np.concatenate([near, rand.view(np.float32), [0.0]]).astype(np.float32)
    sign = rng.integers(0, 2, len(x)).astype(bool)
    return np.where(sign, -x, x)


def _check(name: str, mode: str, n: int, seed: int = 0):
    s = SPECS[name]
    f = s.define()
    ref = _ref(name)
    x = _inputs(ref, n, seed)
    want = ref.codes(x, mode)
    got = np.asarray(jaxwarp.to_format(x, f, mode)).astype(np.int64)
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, (name, mode, x[bad[:5]], got[bad[:5]], want[bad[:5]])
    # round_to: the value of that code (NaN for a NaN code).
    vals = np.array([float(v) if isinstance(v, Fraction) else np.nan if v == "nan"
                     else (-np.inf if v[1] else np.inf) for v in ref.vals.values()],
                    np.float32)
    vals[(vals == 0) & (np.arange(len(vals)) >= (1 << (s.eb + s.mb)))] = -0.0  # -0 codes
    r = np.asarray(jaxwarp.round_to(x, name, mode))
    w = vals[want]
    same = (r.view(np.uint32) == w.view(np.uint32)) | (np.isnan(r) & np.isnan(w))
    assert same.all(), (name, mode, x[~same][:5], r[~same][:5], w[~same][:5])
    return len(x)


@pytest.mark.parametrize("name", ["t_binary8p3", pytest.param("t_e4m7", marks=pytest.mark.slow)])
def test_rn_matches_fraction_reference(name):
    assert _check(name, "rn", 100_000) >= 100_000


_SMALL = [n for n in SPECS if n != "t_e6m9"]
_MODES = ("rn", "rz", "rna")


def _spread(pairs, keep):
    """pytest params of ``pairs``; those not in ``keep`` marked slow."""
    return [pytest.param(*p, id="-".join(p), marks=() if p in keep else pytest.mark.slow)
            for p in pairs]


# The default run: every format once, the modes in turn; -m slow: every pair.
@pytest.mark.parametrize("name,mode", _spread(
    [(n, m) for n in SPECS for m in _MODES],
    {("t_e4m3fnuz_sat", "rz"), ("t_ue4m4", "rna"), ("t_e3m3_none", "rn")}))
def test_every_format_and_mode_matches_reference(name, mode):
    _check(name, mode, 20_000, seed=1)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SPECS))
def test_rn_matches_reference_on_a_million(name):
    assert _check(name, "rn", 1_000_000, seed=2) >= 1_000_000


@pytest.mark.parametrize("name", [n if n == "t_binary8p3" else
                                  pytest.param(n, marks=pytest.mark.slow) for n in SPECS])
def test_every_code_round_trips(name):
    s = SPECS[name]
    f, ref = s.define(), _ref(s.name)
    codes = np.arange(1 << f.bits, dtype=f.storage_dtype)
    v = np.asarray(jaxwarp.from_format(codes, f))
    for c in range(1 << f.bits):
        want = ref.vals[c]
        if want == "nan":
            assert np.isnan(v[c]), (s.name, c)
        elif isinstance(want, tuple):
            assert v[c] == (-np.inf if want[1] else np.inf), (s.name, c)
        else:
            assert Fraction(float(v[c])) == want, (s.name, c)
    finite = np.array([isinstance(ref.vals[c], Fraction) for c in range(len(codes))])
    back = np.asarray(jaxwarp.to_format(v[finite], f)).astype(np.int64)
    np.testing.assert_array_equal(back, np.where(
        (v[finite] == 0) & (s.specials in ("fnuz", "p3109")), 0, codes[finite]))


def test_specials():
    p3 = SPECS["t_binary8p3"].define()
    x = np.float32([np.inf, -np.inf, np.nan, -0.0, 0.0, -1e-30])
    np.testing.assert_array_equal(np.asarray(jaxwarp.to_format(x, p3)),
                                  np.uint8([0x7F, 0xFF, 0x80, 0, 0, 0]))
    sat = SPECS["t_e4m3fnuz_sat"].define()  # no inf: saturate gives max
    np.testing.assert_array_equal(np.asarray(jaxwarp.to_format(x, sat)),
                                  np.uint8([0x7F, 0xFF, 0x80, 0, 0, 0]))
    none = SPECS["t_e3m3_none"].define()  # no NaN: NaN is +max; -0 kept
    np.testing.assert_array_equal(np.asarray(jaxwarp.to_format(x, none)),
                                  np.uint8([0x3F, 0x7F, 0x3F, 0x40, 0, 0x40]))
    r = np.asarray(jaxwarp.round_to(x, none))
    assert np.isnan(r[2]) and r[0] == 60.0 and r[1] == -60.0


# Each field is read: two formats differing in that field alone round differently.
_BASE = dict(exponent_bits=4, mantissa_bits=3, bias=7, specials="fn", signed=True,
             saturate=False)
_CHANGED = {"exponent_bits": 5, "mantissa_bits": 2, "bias": 8, "specials": "ieee",
            "signed": False, "saturate": True}


@pytest.mark.parametrize("field", [f if f in ("bias", "specials", "saturate") else
                                   pytest.param(f, marks=pytest.mark.slow) for f in _CHANGED])
def test_each_field_changes_the_rounding(field):
    x = np.float32([0.3, 1.1, 3.3, 300.0, 470.0, 1e6, -2.5, 2.0**-9, np.inf])
    a = jaxwarp.define_format("t_base", **_BASE)
    other = {**_BASE, field: _CHANGED[field]}
    b = jaxwarp.define_format(f"t_base_{field}", **other)
    ra, rb = np.asarray(jaxwarp.round_to(x, a)), np.asarray(jaxwarp.round_to(x, b))
    assert not np.array_equal(ra.view(np.uint32), rb.view(np.uint32))
    for name, fmt in (("t_base", _BASE), (f"t_base_{field}", other)):
        s = Spec(name, fmt["exponent_bits"], fmt["mantissa_bits"], fmt["bias"],
                 fmt["specials"], fmt["signed"], fmt["saturate"])
        SPECS.setdefault(name, s)
        ref = _ref(name)
        want = ref.codes(x[:-1], "rn")
        np.testing.assert_array_equal(
            np.asarray(jaxwarp.to_format(x[:-1], fmt=name)).astype(np.int64), want)


@pytest.mark.parametrize("fields,dtype", [
    (dict(exponent_bits=4, mantissa_bits=3, specials="fnuz"), ml_dtypes.float8_e4m3fnuz),
    (dict(exponent_bits=5, mantissa_bits=2, specials="fnuz"), ml_dtypes.float8_e5m2fnuz),
    (dict(exponent_bits=4, mantissa_bits=3, specials="fnuz", bias=11),
     ml_dtypes.float8_e4m3b11fnuz),
    (dict(exponent_bits=3, mantissa_bits=4), ml_dtypes.float8_e3m4),
], ids=["e4m3fnuz", "e5m2fnuz", "e4m3b11fnuz", "e3m4"])
@pytest.mark.slow  # the Fraction reference is the default check; this one is extra
def test_agrees_with_ml_dtypes(fields, dtype):
    f = jaxwarp.define_format(f"t_ml_{np.dtype(dtype).name}", **fields)
    rng = np.random.default_rng(3)
    x = (rng.standard_normal(20_000) * np.exp2(rng.integers(-20, 20, 20_000))).astype(np.float32)
    with np.errstate(over="ignore"):
        want = x.astype(dtype)
    np.testing.assert_array_equal(np.asarray(jaxwarp.to_format(x, f)), want.view(np.uint8))
    got = np.asarray(jaxwarp.round_to(x, f))
    w = want.astype(np.float32)
    assert ((got == w) | (np.isnan(got) & np.isnan(w))).all()


@pytest.mark.slow
@pytest.mark.parametrize("name,dtype", [("e4m3", ml_dtypes.float8_e4m3fn),
                                        ("e5m2", ml_dtypes.float8_e5m2),
                                        ("bf16", ml_dtypes.bfloat16),
                                        ("e2m1", ml_dtypes.float4_e2m1fn)])
def test_builtin_layouts_agree_with_ml_dtypes(name, dtype):
    rng = np.random.default_rng(4)
    x = (rng.standard_normal(5000) * np.exp2(rng.integers(-20, 20, 5000))).astype(np.float32)
    with np.errstate(over="ignore"):
        want = x.astype(dtype).astype(np.float32)
    got = np.asarray(jaxwarp.from_format(jaxwarp.to_format(x, name), name))
    assert ((got == want) | (np.isnan(got) & np.isnan(want))).all()


def test_registry():
    s = SPECS["t_binary8p3"]
    f = s.define()
    assert s.define() is f  # the same fields again: the same format
    assert jaxwarp.get_format("t_binary8p3", user=True) is f
    with pytest.raises(ValueError, match="already defined with other fields"):
        jaxwarp.define_format(s.name, exponent_bits=5, mantissa_bits=2, specials="fnuz")
    for name in ("e4m3", "fp16", "float8_e5m2"):
        with pytest.raises(ValueError, match="built-in format"):
            jaxwarp.define_format(name, exponent_bits=4, mantissa_bits=3)
    # Built-in lookups do not see it; the entry points that take it do.
    assert "t_binary8p3" not in jaxwarp.FORMATS
    with pytest.raises(ValueError, match="t_binary8p3"):
        jaxwarp.mma(jnp.zeros((16, 16), jnp.uint8), jnp.zeros((16, 16), jnp.uint8),
                    jnp.zeros((16, 16), jnp.float32), a_format="t_binary8p3",
                    c_format="f32", d_format="f32")
    codes = jnp.uint8([0x40, 0x3C])
    assert jaxwarp.from_bits(codes, "t_binary8p3").dtype == jnp.uint8
    assert jaxwarp.from_bits(jnp.uint32([0x40]), f).dtype == jnp.uint8
    wide = SPECS["t_e6m9"].define()
    assert wide.storage_dtype == np.uint16 and wide.bits == 16
    assert jaxwarp.from_bits(jnp.uint16([1]), wide).dtype == jnp.uint16


def test_jit_and_grad():
    f = SPECS["t_binary8p3"].define()
    x = jnp.float32([0.3, 1.7])
    jitted = jax.jit(lambda v: jaxwarp.round_to(v, f))
    np.testing.assert_array_equal(jitted(x), jaxwarp.round_to(x, f))
    g = jax.grad(lambda v: jaxwarp.round_to(v, "t_binary8p3").sum())(x)
    np.testing.assert_array_equal(g, np.ones(2, np.float32))  # straight through
    np.testing.assert_array_equal(jax.jit(lambda v: jaxwarp.to_format(v, f))(x),
                                  jaxwarp.to_format(x, f))


def test_float64_rounds_once():
    f = SPECS["t_e6m9"].define()
    with jax.enable_x64(True):
        # 1 + 2**-10 + 2**-40 is above the tie between 1 and 1 + 2**-9: rounds up; the
        # same value narrowed to float32 first would be the tie, rounding to even (1).
        x = np.float64([1 + 2.0**-10 + 2.0**-40])
        r = np.asarray(jaxwarp.round_to(x, f))
        assert r.dtype == np.float64 and r[0] == 1 + 2.0**-9
    assert np.asarray(jaxwarp.round_to(np.float32(x), f))[0] == 1.0


@pytest.mark.slow  # about 4 s; the docstring examples run the same calls
def test_docs_page_examples_run():
    """docs/formats.md ("Your own formats"): its P3109 examples run as written."""
    page = pathlib.Path(__file__).resolve().parents[2] / "docs" / "formats.md"
    res = doctest.testfile(str(page), module_relative=False, optionflags=doctest.ELLIPSIS
                           | doctest.NORMALIZE_WHITESPACE)
    assert res.attempted >= 10 and res.failed == 0
