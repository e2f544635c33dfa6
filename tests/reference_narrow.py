"""An independent reference for the narrow element formats (fp8, fp6, fp4 and the block
scales), in exact rational arithmetic.

Nothing here is read from jaxwarp: each format is written down from its definition (OCP
Microscaling Formats (MX) v1.0 for e2m1 / e2m3 / e3m2 / e8m0, OCP 8-bit Floating Point for
e4m3 / e5m2, the PTX ISA for ue4m3: e4m3 without its sign bit), its values are listed
code by code as ``fractions.Fraction`` and a value is rounded by comparing it with its
two neighbours. It is slow and obvious on purpose; tests compare jaxwarp's bits with it.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import math
import struct
from fractions import Fraction

NAN = "nan"


@dataclasses.dataclass(frozen=True)
class Spec:
    """A binary float format, by its definition."""

    name: str
    signed: bool
    eb: int  # exponent bits
    mb: int  # fraction bits
    bias: int
    inf: bool  # IEEE-style: exponent all ones is inf (fraction 0) or NaN
    nan_codes: tuple[int, ...]  # magnitudes that are NaN in a format without infinities
    subnormals: bool = True

    @property
    def width(self) -> int:
        return int(self.signed) + self.eb + self.mb

    @property
    def sign_bit(self) -> int:
        return 1 << (self.eb + self.mb) if self.signed else 0


SPECS = {s.name: s for s in (
    Spec("e4m3", True, 4, 3, 7, False, (0x7F,)),
    Spec("e5m2", True, 5, 2, 15, True, ()),
    Spec("e3m2", True, 3, 2, 3, False, ()),
    Spec("e2m3", True, 2, 3, 1, False, ()),
    Spec("e2m1", True, 2, 1, 1, False, ()),
    Spec("ue8m0", False, 8, 0, 127, False, (0xFF,), subnormals=False),
    Spec("ue4m3", False, 4, 3, 7, False, (0x7F,)),
)}


def value(code: int, fmt: str):
    """The value of a code: a Fraction, ``NAN``, or ``±math.inf``."""
    s = SPECS[fmt]
    neg = s.signed and bool(code & s.sign_bit)
    mag = code & ((1 << (s.eb + s.mb)) - 1)
    e, f = mag >> s.mb, mag & ((1 << s.mb) - 1)
    if s.inf and e == (1 << s.eb) - 1:
        return NAN if f else (-math.inf if neg else math.inf)
    if not s.inf and mag in s.nan_codes:
        return NAN
    if e == 0 and s.subnormals:
        v = Fraction(f, 1 << s.mb) * Fraction(2) ** (1 - s.bias)
    else:
        v = (1 + Fraction(f, 1 << s.mb)) * Fraction(2) ** (e - s.bias)
    return -v if neg else v


def codes(fmt: str) -> range:
    return range(1 << SPECS[fmt].width)


@functools.cache
def finite_values(fmt: str) -> list[tuple[Fraction, int]]:
    """Every non-negative finite value with its code, ascending (+0 only)."""
    out = {}
    for c in codes(fmt):
        v = value(c, fmt)
        if isinstance(v, Fraction) and v >= 0 and not (v == 0 and c):
            out.setdefault(v, c)
    return sorted(out.items())


def max_value(fmt: str) -> Fraction:
    return finite_values(fmt)[-1][0]


def min_value(fmt: str) -> Fraction:
    """The smallest positive value."""
    return next(v for v, _ in finite_values(fmt) if v > 0)


@functools.cache
def _keys(fmt: str) -> list[Fraction]:
    return [v for v, _ in finite_values(fmt)]


def neighbours(x: Fraction, fmt: str):
    """(lo, hi): the format's values on each side of ``x >= 0`` (lo <= x <= hi), as
    (value, code) pairs; hi is None above the largest value, lo None below the smallest."""
    vals, keys = finite_values(fmt), _keys(fmt)
    i = bisect.bisect_left(keys, x)
    if i < len(keys) and keys[i] == x:
        return vals[i], vals[i]
    lo = vals[i - 1] if i > 0 else None
    hi = vals[i] if i < len(vals) else None
    return lo, hi


def round_magnitude(x: Fraction, fmt: str, mode: str):
    """``x >= 0`` rounded onto the format's grid continued past its largest value (an
    unbounded exponent): ``(value, code)``, the code None past the largest value or
    below the smallest of a format without zero (rz there). ``mode``: rn (ties to the
    even code; with no fraction bits every significand is odd, and the larger value is
    taken), rz, rp (toward +inf), rna (ties away from zero)."""
    s = SPECS[fmt]
    vals = finite_values(fmt)
    (top, top_code), (second, _) = vals[-1], vals[-2]
    past = (2 * top if s.mb == 0 else 2 * top - second, None)  # the next grid value
    if x > top:
        if x >= past[0]:
            return past
        lo, hi = (top, top_code), past
    else:
        lo, hi = neighbours(x, fmt)
    if lo is None:  # below the smallest value of a format without zero
        return (None, None) if mode == "rz" else hi
    if lo[0] == x or mode == "rz":
        return lo
    if mode == "rp":
        return hi
    dlo, dhi = x - lo[0], hi[0] - x
    if dlo != dhi:
        return lo if dlo < dhi else hi
    if mode == "rna" or s.mb == 0:
        return hi
    return lo if lo[1] % 2 == 0 else hi


def f32_fraction(bits: int):
    """The exact value of a float32 pattern: Fraction, NAN or ±inf."""
    e, f, neg = (bits >> 23) & 0xFF, bits & 0x7FFFFF, bits >> 31
    if e == 0xFF:
        return NAN if f else (-math.inf if neg else math.inf)
    v = Fraction(f, 1 << 23) * Fraction(2) ** -126 if e == 0 else \
        (1 + Fraction(f, 1 << 23)) * Fraction(2) ** (e - 127)
    return -v if neg else v


def fraction_f32_bits(v: Fraction, neg: bool = False) -> int:
    """The float32 pattern of a value float32 holds exactly (every narrow format's values)."""
    sign = 0x80000000 if neg else 0
    if v == 0:
        return sign
    e = v.numerator.bit_length() - v.denominator.bit_length()
    if Fraction(2) ** e > v:
        e -= 1
    e = max(e, -126)  # subnormals: the grid of 2**-149
    f = v / Fraction(2) ** (e - 23)
    assert f.denominator == 1 and f < 1 << 24, v
    field = e + 127 if f >= 1 << 23 else 0
    return sign | (field << 23) | (int(f) & 0x7FFFFF)


def interesting_f32(fmt: str) -> list[int]:
    """float32 patterns near every value and every midpoint of ``fmt`` (both signs, a few
    ulps either side), near the overflow and underflow boundaries, ±0, subnormals,
    ±inf and NaNs: the inputs where a rounding rule can go wrong."""
    vals = [v for v, _ in finite_values(fmt)]
    points = set(vals)
    points.update((a + b) / 2 for a, b in zip(vals[:-1], vals[1:], strict=True))
    top = vals[-1]
    step = top - vals[-2] if SPECS[fmt].mb else top
    points.update({top + step / 2, top + step, 2 * top, 4 * top})
    points.update({vals[1] / 2, vals[1] / 4, vals[1] * 3 / 4} if vals[0] == 0 else
                  {vals[0] / 2, vals[0] * 3 / 4})
    out = set()
    for p in points:
        if p > Fraction(2) ** 128 or p == 0:
            continue
        b = _nearest_f32_bits(p)
        for d in (-2, -1, 0, 1, 2):
            c = b + d
            if 0 <= c < 0x7F800000:
                out.add(c)
                out.add(c | 0x80000000)
    out.update({0, 0x80000000, 1, 0x80000001, 0x007FFFFF, 0x00400000, 0x00800000,
                0x7F7FFFFF, 0xFF7FFFFF, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000,
                0x7F800001, 0x7FBFFFFF, 0xFFFFFFFF})
    return sorted(out)


def _nearest_f32_bits(p: Fraction) -> int:
    """A float32 pattern whose value is p or next to it (p > 0, in float32's range)."""
    x = min(float(p), 3.4028234663852886e38)  # float64, then float32 (within an ulp)
    return struct.unpack("<I", struct.pack("<f", x))[0]
