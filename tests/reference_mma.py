"""An independent, slow reference of the tensor-core arithmetic, for tests only.

Written from the documented model (``jaxwarp._src.arithmetic.datapath``'s module docstring and
``docs/capture_format.md``), not from its code, with nothing but Python integers and
``fractions.Fraction``: every float is decoded into (sign, integer significand,
exponent of its last bit); products and sums are exact; the alignment, truncation and
rounding are spelled out on integers. It is slow (a few milliseconds per tile) and
meant to be obviously right; ``tests/test_reference.py`` checks it against the H100
captures and then uses it as an oracle for the JAX model.

The model, as implemented here:

* f16 / bf16 / tf32 operands, fp16 or fp32 accumulators (sm_90). The k axis is cut
  into blocks (16 products for f16 and bf16, 4 for tf32). Per block and output
  element: the exact products and the accumulator are the terms; the block exponent
  E is the largest *nominal* exponent of a non-zero term (for a product the sum of
  the operands' leading-bit exponents, a subnormal operand counting with its format's
  minimum normal exponent; for the accumulator its leading-bit exponent, but at least
  the minimum normal exponent emin of the format the block sums into: D's for the
  block C joins, fp32 for a block result passed on); E is never below that emin - 7,
  also when the accumulator is zero;
  every term is truncated toward zero to a multiple of 2**(E - 25); the truncated
  terms are summed exactly. A block that is not the last one is rounded to fp32
  toward zero and becomes the accumulator of the next block. The last block's sum
  is rounded: fp32 D toward zero; fp16 D from an fp32 C through fp32 (toward zero)
  and then to nearest even; fp16 D from an fp16 C to nearest even directly, where a
  result of -0 becomes +0. Beyond the range gives inf (also toward zero). An exact
  zero sum is +0.
* Specials per block: a NaN operand, 0 * inf, or infinite terms of both signs give
  NaN (0x7FFFFFFF / 0x7FFF); otherwise an infinite term gives that infinity.
* tf32 operands are fp32 words whose low 13 fraction bits are ignored (cleared before
  decoding, so a word that is NaN only through those bits reads as inf).
* f64: a chain of IEEE fma in k order, rounded to nearest even. A NaN operand
  propagates quieted, B's over A's over the accumulator's; an invalid operation
  (0 * inf, inf - inf) gives 0xFFF8000000000000.
* Integers: exact sum wrapped modulo 2**32, or clamped to int32 with satf. b1:
  ``c + popc(a_row op b_col)`` modulo 2**32.

Every rule above reproduces every trial of ``tests/data/h100_mma_*.npz`` and
``capture_extra_mma.npz`` (and of the larger ``shared/hw/h100/mma_*.npz``) bit for bit.
Two choices are not pinned down by those captures and are shared with the model
rather than checked independently: an f64 NaN in A against a NaN of another payload
in the accumulator (A is taken; the captures only show B winning over A), and fp16 /
tf32 behaviour on other architectures (only sm_90 is modelled here).
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction

import numpy as np

# --------------------------------------------------------------------------------------
# Floating-point formats.


@dataclasses.dataclass(frozen=True)
class Fmt:
    """A binary floating-point format: ``width`` bits, ``ebits`` exponent bits and
    ``mbits`` stored fraction bits; ``ignored`` low bits are cleared before decoding."""

    name: str
    width: int
    ebits: int
    mbits: int
    ignored: int = 0

    @property
    def bias(self) -> int:
        return (1 << (self.ebits - 1)) - 1

    @property
    def emax_field(self) -> int:
        return (1 << self.ebits) - 1


FMTS = {
    "f16": Fmt("f16", 16, 5, 10),
    "bf16": Fmt("bf16", 16, 8, 7),
    "tf32": Fmt("tf32", 32, 8, 23, ignored=13),
    "f32": Fmt("f32", 32, 8, 23),
    "f64": Fmt("f64", 64, 11, 52),
}
BITS_DTYPE = {16: np.uint16, 32: np.uint32, 64: np.uint64}

NAN = "nan"
INF = "inf"
FIN = "fin"


class Num:
    """A decoded float: ``(-1)**neg * sig * 2**exp`` when ``kind`` is ``"fin"``.

    ``lead`` is the exponent of the leading bit of ``sig`` (None for zero, inf, NaN);
    ``zero`` says the number is a (signed) zero.
    """

    __slots__ = ("kind", "neg", "sig", "exp", "lead", "zero", "nom")

    def __init__(self, kind: str, neg: bool, sig: int = 0, exp: int = 0):
        self.kind, self.neg, self.sig, self.exp = kind, neg, sig, exp
        self.lead = exp + sig.bit_length() - 1 if sig else None
        self.nom = self.lead  # alignment exponent; decode() sets it for subnormals
        self.zero = kind == FIN and sig == 0

    def __repr__(self) -> str:
        return f"Num({self.kind}, neg={self.neg}, sig={self.sig}, exp={self.exp})"


def decode(bits: int, fmt: Fmt) -> Num:
    """Raw bits -> Num, reading the fields one by one."""
    bits = int(bits)
    bits &= ~((1 << fmt.ignored) - 1)
    neg = (bits >> (fmt.width - 1)) & 1 == 1
    e = (bits >> fmt.mbits) & fmt.emax_field
    f = bits & ((1 << fmt.mbits) - 1)
    if e == fmt.emax_field:
        return Num(INF if f == 0 else NAN, neg)
    if e == 0:  # zero or subnormal: no implicit bit, exponent of 1 - bias
        x = Num(FIN, neg, f, 1 - fmt.bias - fmt.mbits)
        if f:
            # The H100 aligns a product with a subnormal operand as if that operand had
            # the format's minimum normal exponent (its exponent field read as 1, the
            # significand as 0.f), not its leading bit's exponent.
            x.nom = 1 - fmt.bias
        return x
    return Num(FIN, neg, f | (1 << fmt.mbits), e - fmt.bias - fmt.mbits)


def value(x: Num) -> Fraction:
    """The exact value of a finite Num."""
    assert x.kind == FIN
    v = Fraction(x.sig) * Fraction(2) ** x.exp
    return -v if x.neg else v


def inf_bits(neg: bool, fmt: Fmt) -> int:
    return (int(neg) << (fmt.width - 1)) | (fmt.emax_field << fmt.mbits)


def round_to(neg: bool, mag: int, g: int, fmt: Fmt, mode: str) -> int:
    """Rounds ``(-1)**neg * mag * 2**g`` (``mag >= 0`` an int) to ``fmt``; returns bits.

    ``mode``: ``"rn"`` nearest even, ``"rz"`` toward zero, ``"rna"`` nearest with ties
    away from zero. Magnitudes of 2**(emax+1) or more after rounding are inf in every
    mode (the tensor core's toward-zero overflows to inf too). A zero ``mag`` gives a
    zero of sign ``neg``.
    """
    sign = int(neg) << (fmt.width - 1)
    if mag == 0:
        return sign
    e = g + mag.bit_length() - 1  # exponent of the leading bit
    lsb = max(e, 1 - fmt.bias) - fmt.mbits  # exponent of the result's last bit
    sh = lsb - g  # bits of mag below the result's last bit
    if sh <= 0:
        n, rem, half = mag << -sh, 0, 1
    else:
        n, rem, half = mag >> sh, mag & ((1 << sh) - 1), 1 << (sh - 1)
    if mode == "rn":
        if rem > half or (rem == half and n & 1):
            n += 1
    elif mode == "rna":
        if rem >= half:
            n += 1
    elif mode != "rz":
        raise ValueError(mode)
    if n == 1 << (fmt.mbits + 1):  # carried into the next binade
        n >>= 1
        lsb += 1
    if n >= 1 << fmt.mbits:  # normal
        field = lsb + fmt.mbits + fmt.bias
        if field >= fmt.emax_field:
            return sign | inf_bits(False, fmt)
        return sign | (field << fmt.mbits) | (n - (1 << fmt.mbits))
    return sign | n  # subnormal (or zero)


def round_fraction(x: Fraction, fmt: Fmt, mode: str) -> int:
    """``round_to`` for an exact rational whose denominator is a power of two."""
    q = x.denominator
    assert q & (q - 1) == 0, x
    return round_to(x < 0, abs(x.numerator), -(q.bit_length() - 1), fmt, mode)


# --------------------------------------------------------------------------------------
# The block model for f16 / bf16 / tf32.

F_BITS = 25  # fraction bits kept below the block exponent (sm_90)
C_FLOOR = 7  # E >= emin(output) - C_FLOOR (sm_90)
BLOCK_K = {"f16": 16, "bf16": 16, "tf32": 4}
NAN_BITS = {"f32": 0x7FFFFFFF, "f16": 0x7FFF}


def _block(prods: list[tuple[Num, Num]], acc: Num, out: Fmt) -> tuple[str, bool, int, int]:
    """One block FMA on exact terms, summing into format ``out`` (D's format for the
    block that C joins, fp32 for a block result passed on).

    Returns ``(kind, neg, s, g)``: kind ``"nan"``, ``"inf"`` (sign ``neg``) or ``"fin"``
    with value ``s * 2**g`` (``s`` a signed Python int).
    """
    nan = acc.kind == NAN
    pinf = acc.kind == INF and not acc.neg
    ninf = acc.kind == INF and acc.neg
    terms = []  # (neg, sig, exp, nominal exponent)
    for a, b in prods:
        neg = a.neg != b.neg
        if a.kind == NAN or b.kind == NAN:
            nan = True
        elif a.kind == INF or b.kind == INF:
            if a.zero or b.zero:
                nan = True
            elif neg:
                ninf = True
            else:
                pinf = True
        elif not (a.zero or b.zero):
            terms.append((neg, a.sig * b.sig, a.exp + b.exp, a.nom + b.nom))
    if nan or (pinf and ninf):
        return NAN, False, 0, 0
    if pinf or ninf:
        return INF, ninf, 0, 0
    emin = 1 - out.bias  # the minimum normal exponent of the output format
    if acc.sig:  # a non-zero accumulator counts at least at emin
        terms.append((acc.neg, acc.sig, acc.exp, max(acc.lead, emin)))
    if not terms:
        return FIN, False, 0, 0
    # E is never below emin - 7, also with a zero accumulator.
    E = max(max(t[3] for t in terms), emin - C_FLOOR)
    g = E - F_BITS
    s = 0
    for neg, sig, exp, _ in terms:
        # Truncate |term| toward zero to a multiple of 2**g.
        sh = exp - g
        mag = sig << sh if sh >= 0 else sig >> -sh
        s += -mag if neg else mag
    return FIN, False, s, g


def _f32_rz(kind: str, neg: bool, s: int, g: int) -> int:
    f32 = FMTS["f32"]
    if kind == NAN:
        return NAN_BITS["f32"]
    if kind == INF:
        return inf_bits(neg, f32)
    out = round_to(s < 0, abs(s), g, f32, "rz")
    # A non-zero sum that truncates to zero gives +0: the H100 never returns -0 from
    # the fused datapath into fp32 (bf16/tf32 captures with tiny products and C = -0).
    return 0 if out == 0x80000000 else out


def _finish(kind, neg, s, g, c_format, d_format) -> int:
    if d_format == "f32":
        return _f32_rz(kind, neg, s, g)
    f16 = FMTS["f16"]
    if kind == NAN:
        return NAN_BITS["f16"]
    if kind == INF:
        return inf_bits(neg, f16)
    if c_format == "f32":  # through fp32 (toward zero), then to fp16 (nearest even)
        x = decode(_f32_rz(kind, neg, s, g), FMTS["f32"])
        if x.kind == INF:
            return inf_bits(x.neg, f16)
        return round_to(x.neg, x.sig, x.exp, f16, "rn")
    out = round_to(s < 0, abs(s), g, f16, "rn")
    return 0 if out == 0x8000 else out


def _mma_float_elem(arow: list[Num], bcol: list[Num], c: Num, a_format, c_format, d_format) -> int:
    bk = BLOCK_K[a_format]
    k = len(arow)
    # C joins the first block as the format it sums into sees it: fp32 when C is fp32 (an
    # f16 D is then the fp32 result rounded; H100: tools/capture/probe_f16d.py)
    acc, out = c, FMTS["f32" if c_format == "f32" else d_format]
    for k0 in range(0, k, bk):
        kind, neg, s, g = _block(list(zip(arow[k0:k0 + bk], bcol[k0:k0 + bk], strict=True)),
                                 acc, out)
        if k0 + bk < k:
            acc, out = decode(_f32_rz(kind, neg, s, g), FMTS["f32"]), FMTS["f32"]
    return _finish(kind, neg, s, g, c_format, d_format)


# --------------------------------------------------------------------------------------
# f64: IEEE fma chain.

F64_INVALID = 0xFFF8000000000000
F64_QUIET = 1 << 51


def fma64(a: int, b: int, c: int) -> int:
    """IEEE binary64 fma(a, b, c) on bit patterns, with the NaN rules above."""
    f = FMTS["f64"]
    x, y, z = decode(a, f), decode(b, f), decode(c, f)
    for bits, num in ((b, y), (c, z), (a, x)):  # NaN priority: B, then C, then A
        if num.kind == NAN:
            return bits | F64_QUIET
    pneg = x.neg != y.neg
    if (x.kind == INF and y.zero) or (y.kind == INF and x.zero):
        return F64_INVALID
    if x.kind == INF or y.kind == INF:
        if z.kind == INF and z.neg != pneg:
            return F64_INVALID
        return inf_bits(pneg, f)
    if z.kind == INF:
        return c
    v = Fraction(x.sig * y.sig) * Fraction(2) ** (x.exp + y.exp)
    v = (-v if pneg else v) + value(z)
    if v == 0:
        # IEEE 754 6.3: an exact zero sum is +0 in round-to-nearest, unless both
        # addends are zeros of negative sign.
        both_neg_zero = (x.zero or y.zero) and pneg and z.zero and z.neg
        return 1 << 63 if both_neg_zero else 0
    return round_fraction(v, f, "rn")


# --------------------------------------------------------------------------------------
# Public entry points.


def _as_int_list(x: np.ndarray) -> list:
    return np.asarray(x).astype(object).tolist()


def mma_ref(A, B, C, *, a_format: str, c_format: str, d_format: str, satf: bool = False
            ) -> np.ndarray:
    """``D = A @ B + C`` for one tile in the documented sm_90 arithmetic.

    Args:
      A: (m, k), B: (k, n): raw bits (uint16 for f16/bf16, uint32 for tf32, uint64 for
        f64) or integer values (s8/s4 as signed ints, u8/u4 as unsigned).
      C: (m, n): raw bits of c_format (uint16 f16, uint32 f32, uint64 f64) or int32.
      a_format, c_format, d_format: as in ``jaxwarp.mma``.
      satf: integers only: clamp instead of wrap.

    Returns:
      (m, n) raw bits of d_format (uint16 / uint32 / uint64), or int32 for integers.
    """
    A, B, C = np.asarray(A), np.asarray(B), np.asarray(C)
    m, k = A.shape
    n = B.shape[1]
    assert B.shape == (k, n) and C.shape == (m, n)
    if a_format in ("s8", "u8", "s4", "u4"):
        return _mma_int(A, B, C, satf)
    al, bl, cl = _as_int_list(A), _as_int_list(B), _as_int_list(C)
    if a_format == "f64":
        out = [[0] * n for _ in range(m)]
        for i in range(m):
            for j in range(n):
                acc = cl[i][j]
                for kk in range(k):
                    acc = fma64(al[i][kk], bl[kk][j], acc)
                out[i][j] = acc
        return np.array(out, dtype=np.uint64)
    af, cf = FMTS[a_format], FMTS[c_format]
    ad = [[decode(v, af) for v in row] for row in al]
    bd = [[decode(bl[kk][j], af) for kk in range(k)] for j in range(n)]  # columns
    out = [[_mma_float_elem(ad[i], bd[j], decode(cl[i][j], cf), a_format, c_format, d_format)
            for j in range(n)] for i in range(m)]
    return np.array(out, dtype=BITS_DTYPE[FMTS[d_format].width])


def _wrap_or_sat(v: int, satf: bool) -> int:
    if satf:
        return min(max(v, -(1 << 31)), (1 << 31) - 1)
    v &= (1 << 32) - 1
    return v - (1 << 32) if v >> 31 else v


def _mma_int(A, B, C, satf: bool) -> np.ndarray:
    al, bl, cl = _as_int_list(A), _as_int_list(B), _as_int_list(C)
    m, k, n = len(al), len(bl), len(bl[0])
    out = [[_wrap_or_sat(sum(al[i][kk] * bl[kk][j] for kk in range(k)) + cl[i][j], satf)
            for j in range(n)] for i in range(m)]
    return np.array(out, dtype=np.int32)


def bmma_ref(A, B, C, *, op: str) -> np.ndarray:
    """b1 ``bmma_sync`` with POPC: ``c + popc(a_row op b_col)`` modulo 2**32."""
    al, bl, cl = _as_int_list(A), _as_int_list(B), _as_int_list(C)
    m, k, n = len(al), len(bl), len(bl[0])
    # Bit strings as Python ints, bit kk = element kk.
    rows = [sum((al[i][kk] & 1) << kk for kk in range(k)) for i in range(m)]
    cols = [sum((bl[kk][j] & 1) << kk for kk in range(k)) for j in range(n)]
    fn = {"xor": lambda x, y: x ^ y, "and": lambda x, y: x & y}[op]
    out = [[_wrap_or_sat(cl[i][j] + bin(fn(rows[i], cols[j])).count("1"), False)
            for j in range(n)] for i in range(m)]
    return np.array(out, dtype=np.int32)


def tf32_round(bits: int) -> int:
    """``__float_to_tf32``: nearest, ties away from zero, on the fp32 word (NaN and
    inf keep their top bits). Used for the ``tf32cvt`` capture configurations."""
    bits = int(bits)
    if (bits >> 23) & 0xFF == 0xFF:
        return bits & 0xFFFFE000
    x = decode(bits, FMTS["f32"])
    # tf32 is fp32 with 10 fraction bits: round on that 19-bit format, then shift back.
    return round_to(x.neg, x.sig, x.exp, TF32_GRID, "rna") << 13


TF32_GRID = Fmt("tf32grid", 19, 8, 10)
