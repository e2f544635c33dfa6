"""An independent, parametrised reference model of Hopper tensor-core arithmetic.

Plain Python integers only (no NumPy arithmetic, no floats): every operand is decoded
into (sign, integer significand, exponent of its last bit); products are exact; the
alignment, truncation and rounding of the datapath are spelled out on integers. Slow and
meant to be obviously right; an oracle for tests and for scoring hypotheses.

The datapath is a small frozen dataclass, :class:`Datapath`; :data:`PRESETS` holds the
parameters that reproduce every element of the H100 captures (WMMA ``shared/hw/h100``,
PTX ``mma.sync`` and ``wgmma`` ``shared/hw/h100_ptx``):

* ``"hmma"`` (WMMA, ``mma.sync`` and ``wgmma`` with f16 / bf16 operands): one fused
  block of 16 products (or the instruction's k if smaller) and C, F = 25.
* ``"hmma_tf32_k4"`` / ``"hmma_tf32_k8"``: the same with tf32 operands, one block per
  instruction (``mma.sync`` m16n8k4 / m16n8k8, ``wgmma`` m64nNk8). WMMA m16n16k8 tf32 is
  two k4 instructions in k order (``"hmma_tf32_k4"`` on k = 8).
* ``"mma_sync_fp8"``: ``mma.sync`` m16n8k32 with e4m3/e5m2 operands. sm_90 has no fp8
  ``mma.sync`` unit: ptxas (CUDA 13.0, sm_90 and sm_90a) emits ``F2FP.F16.E4M3.UNPACK_B``
  / ``...E5M2...`` conversions, ``HMMA.16816.F32 acc, A_lo, B_lo, RZ``,
  ``HMMA.16816.F32 acc, A_hi, B_hi, acc`` and ``FADD d, c, acc`` (f16: ``HMMA.16816.F16``
  twice and ``HADD2``). ``A_lo`` holds bytes 0-1 of every fp8 register, i.e. by the PTX
  fragment layout the k with k % 4 in {0, 1}.
* ``"wgmma_fp8"``: ``wgmma`` m64nNk32 with e4m3/e5m2 operands: one fused block of the 32
  products and C with only F = 13 alignment bits, the sum then cut toward zero to a
  14-bit significand (fp32 word with its 10 low bits zero); an f16 D is rounded to
  nearest from the block sum directly.

One output element ``d = sum_k a_k b_k + c`` is computed as follows.

0. ``operand_via="f16"``: fp8 operands are first converted (exactly) to f16, so that e4m3
   subnormals become f16 normals. ``k_split="mod4"`` reorders k as {k % 4 < 2} then
   {k % 4 >= 2} before the blocks are cut.
1. The k axis is cut into blocks of ``block_k`` products (in k order).
2. Per block, every product ``a_k b_k`` is exact. Its *alignment exponent* is

   * ``align="nominal"``: the sum of the operands' exponents, where a normal
     operand counts with its leading-bit exponent and a subnormal operand with
     ``sub_exp="lead"`` its leading-bit exponent or with ``sub_exp="emin"`` the
     format's minimum normal exponent (the exponent field read as 1, significand
     0.f: what an adder of biased exponent fields sees; this is what the H100 does);
   * ``align="normalised"``: the exponent of the exact product's leading bit.

   The accumulator (when it joins the block) counts with its leading-bit exponent
   (``c_sub_exp="emin"``: a subnormal accumulator with the fp32 minimum exponent).
3. ``E`` = the largest alignment exponent among the non-zero terms. Every term is
   truncated to a multiple of ``2**(E - F)``: toward zero on its magnitude
   (``trunc="rz"``) or toward minus infinity (``trunc="floor"``, two's complement).
4. The truncated terms are added exactly. The sum becomes fp32 with ``block_round``
   (``"rz"`` / ``"rn"``), first cut to ``sum_mbits`` fraction bits when that is below
   23; beyond the fp32 range gives inf (also toward zero).
5. Where C goes (``c_mode``):

   * ``"fused"``: C is a term of the first block; each later block takes the previous
     block's fp32 result as its accumulator term. (HMMA, wgmma.)
   * ``"end"``: the blocks chain from a +0 accumulator of d's type (each block rounded
     to d's type: fp32 as in 4, fp16 as in 6), and C is added last by an IEEE
     addition rounded to nearest even in d's type (FADD / HADD2). (mma.sync fp8.)
   * ``"after"`` / ``"after_fused"`` (rejected hypotheses, kept for scoring): blocks
     never see C; each block's fp32 result is added to the running accumulator by an
     IEEE rn addition, or by a two-term fused block of width F.

6. An fp16 result: ``f16_out="direct"`` with an fp16 C rounds the last block's exact
   sum to fp16 (``f16_round``), and with ``f16_zero="plus"`` a -0 result becomes +0;
   otherwise (fp32 C, or ``f16_out="via_f32"``) the fp32 result is rounded to fp16.

Specials: a NaN operand, ``0 * inf`` or infinities of both signs give NaN (bits
``nan_f32`` / ``nan_f16``, canonical); otherwise an infinity gives that infinity. An
exact zero sum gives +0 (``zero="plus"``) or, with ``zero="ieee"``, -0 only when every
term is a zero of negative sign (the captures do not tell these apart).

f64 is a chain of IEEE fused multiply-adds; integers add exactly, then wrap modulo
2**32 or (``satfinite``) clamp.

Example:
    >>> P = PRESETS["wgmma_fp8"]
    >>> one = 0x38  # e4m3 1.0
    >>> d = mma_tile([[one] * 32], [[one]] * 32, [[0]], "e4m3", "e4m3", "f32", "f32", P)
    >>> hex(d[0][0])  # 32.0
    '0x42000000'
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction

# --------------------------------------------------------------------------------------
# Formats.


@dataclasses.dataclass(frozen=True)
class Fmt:
    """``width`` bits, ``ebits`` exponent bits, ``mbits`` fraction bits.

    ``ignored``: low bits cleared before decoding (tf32 in an fp32 word).
    ``fn``: the "finite" variant (e4m3fn): no infinities, only S.1111.111 is NaN.
    """

    name: str
    width: int
    ebits: int
    mbits: int
    ignored: int = 0
    fn: bool = False

    @property
    def bias(self) -> int:
        return (1 << (self.ebits - 1)) - 1

    @property
    def emax_field(self) -> int:
        return (1 << self.ebits) - 1

    @property
    def emin(self) -> int:
        return 1 - self.bias


FMTS = {
    "f16": Fmt("f16", 16, 5, 10),
    "bf16": Fmt("bf16", 16, 8, 7),
    "tf32": Fmt("tf32", 32, 8, 23, ignored=13),
    "f32": Fmt("f32", 32, 8, 23),
    "f64": Fmt("f64", 64, 11, 52),
    "e4m3": Fmt("e4m3", 8, 4, 3, fn=True),
    "e5m2": Fmt("e5m2", 8, 5, 2),
}

NAN, INF, FIN = "nan", "inf", "fin"


class Num:
    """``(-1)**neg * sig * 2**exp``; ``lead``: exponent of sig's top bit; ``sub``: the
    operand was subnormal (exponent field 0) with a non-zero significand."""

    __slots__ = ("kind", "neg", "sig", "exp", "lead", "sub", "emin")

    def __init__(self, kind, neg, sig=0, exp=0, sub=False, emin=0):
        self.kind, self.neg, self.sig, self.exp, self.sub, self.emin = (
            kind, neg, sig, exp, sub, emin)
        self.lead = exp + sig.bit_length() - 1 if sig else None

    @property
    def zero(self):
        return self.kind == FIN and self.sig == 0

    def nom(self, sub_exp: str) -> int:
        """Alignment exponent of this operand."""
        if self.sub and sub_exp == "emin":
            return self.emin
        return self.lead

    def __repr__(self):
        return f"Num({self.kind}, neg={self.neg}, sig={self.sig}, exp={self.exp})"


def decode(bits: int, fmt: Fmt) -> Num:
    bits = int(bits) & ((1 << fmt.width) - 1)
    bits &= ~((1 << fmt.ignored) - 1)
    neg = (bits >> (fmt.width - 1)) & 1 == 1
    e = (bits >> fmt.mbits) & fmt.emax_field
    f = bits & ((1 << fmt.mbits) - 1)
    if fmt.fn:
        if e == fmt.emax_field and f == (1 << fmt.mbits) - 1:
            return Num(NAN, neg)
    elif e == fmt.emax_field:
        return Num(INF if f == 0 else NAN, neg)
    if e == 0:
        return Num(FIN, neg, f, fmt.emin - fmt.mbits, sub=f != 0, emin=fmt.emin)
    return Num(FIN, neg, f | (1 << fmt.mbits), e - fmt.bias - fmt.mbits, emin=fmt.emin)


def value(x: Num) -> Fraction:
    v = Fraction(x.sig) * Fraction(2) ** x.exp
    return -v if x.neg else v


def inf_bits(neg: bool, fmt: Fmt) -> int:
    return (int(neg) << (fmt.width - 1)) | (fmt.emax_field << fmt.mbits)


def round_to(neg: bool, mag: int, g: int, fmt: Fmt, mode: str) -> int:
    """Rounds ``(-1)**neg * mag * 2**g`` to ``fmt`` bits (rn / rz / rna); overflow
    after rounding gives inf in every mode; zero keeps the sign ``neg``."""
    sign = int(neg) << (fmt.width - 1)
    if mag == 0:
        return sign
    e = g + mag.bit_length() - 1
    lsb = max(e, fmt.emin) - fmt.mbits
    sh = lsb - g
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
    if n == 1 << (fmt.mbits + 1):
        n >>= 1
        lsb += 1
    if n >= 1 << fmt.mbits:
        field = lsb + fmt.mbits + fmt.bias
        if field >= fmt.emax_field:
            return sign | inf_bits(False, fmt)
        return sign | (field << fmt.mbits) | (n - (1 << fmt.mbits))
    return sign | n


# --------------------------------------------------------------------------------------
# The datapath parameters.


@dataclasses.dataclass(frozen=True)
class Datapath:
    """Parameters of one tensor-core floating-point datapath (see module docstring)."""

    block_k: int = 16
    F: int = 25
    c_mode: str = "fused"           # fused | end | ffma | after | after_fused
    align: str = "nominal"          # nominal | normalised
    sub_exp: str = "lead"           # lead | emin  (subnormal operands' exponent)
    c_sub_exp: str = "lead"         # lead | emin  (a non-zero accumulator: at least
                                    #   the minimum normal exponent of the block's output)
    e_floor: int | None = None      # E >= emin(output) - e_floor, also with a zero C
    trunc: str = "rz"               # rz | floor
    block_round: str = "rz"         # rz | rn  (block sum -> fp32)
    f16_out: str = "direct"         # direct | via_f32
    f16_round: str = "rn"
    f16_zero: str = "plus"          # plus | keep
    zero: str = "plus"              # plus | ieee
    nan_f32: int = 0x7FFFFFFF
    nan_f16: int = 0x7FFF
    k_split: str = "contig"         # contig | mod4 (order of k before cutting blocks)
    operand_via: str = ""           # "" | "f16": fp8 operands first converted (exactly) to f16
    sum_mbits: int = 23             # fraction bits kept when a block sum becomes fp32

    def replace(self, **kw) -> Datapath:
        return dataclasses.replace(self, **kw)


# --------------------------------------------------------------------------------------
# The engine.


class Sum:
    """A block result: kind nan/inf(neg)/fin with value s * 2**g (s signed int);
    ``negzero``: an exact zero whose IEEE sign would be negative."""

    __slots__ = ("kind", "neg", "s", "g", "negzero")

    def __init__(self, kind, neg=False, s=0, g=0, negzero=False):
        self.kind, self.neg, self.s, self.g, self.negzero = kind, neg, s, g, negzero


def _terms(pairs, P: Datapath):
    """Exact product terms of a block, or a special result."""
    nan = pinf = ninf = False
    terms = []
    allnegzero = True
    for a, b in pairs:
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
        elif a.zero or b.zero:
            allnegzero &= neg
        else:
            allnegzero = False
            sig = a.sig * b.sig
            exp = a.exp + b.exp
            if P.align == "nominal":
                nom = a.nom(P.sub_exp) + b.nom(P.sub_exp)
            else:
                nom = exp + sig.bit_length() - 1
            terms.append((neg, sig, exp, nom))
    return nan, pinf, ninf, terms, allnegzero


def _fuse(terms, F: int, trunc: str) -> tuple[int, int]:
    """Aligns to the largest alignment exponent, truncates to 2**(E-F), sums."""
    E = max(t[3] for t in terms)
    g = E - F
    s = 0
    for neg, sig, exp, _ in terms:
        sh = exp - g
        if sh >= 0:
            s += -(sig << sh) if neg else sig << sh
        elif trunc == "rz":
            m = sig >> -sh
            s += -m if neg else m
        else:  # floor on the signed value
            s += (-sig) >> -sh if neg else sig >> -sh
    return s, g


def _c_term(c: Num, P: Datapath, out: Fmt | None = None):
    if P.c_sub_exp == "emin":
        nom = max(c.lead, (out.emin if out is not None else c.emin))
    else:
        nom = c.lead
    return (c.neg, c.sig, c.exp, nom)


def _block(pairs, acc: Num | None, P: Datapath, out: Fmt | None = None) -> Sum:
    """One fused block; ``acc`` joins it as a term whose format's block sums into
    ``out`` (default: the accumulator's own format)."""
    nan, pinf, ninf, terms, allnegzero = _terms(pairs, P)
    floor = None
    if acc is not None and acc.kind == FIN and P.e_floor is not None:
        floor = (out.emin if out is not None else acc.emin) - P.e_floor
    if acc is not None:
        if acc.kind == NAN:
            nan = True
        elif acc.kind == INF:
            if acc.neg:
                ninf = True
            else:
                pinf = True
        elif acc.sig:
            terms.append(_c_term(acc, P, out))
            allnegzero = False
        else:
            allnegzero &= acc.neg
    if nan or (pinf and ninf):
        return Sum(NAN)
    if pinf or ninf:
        return Sum(INF, ninf)
    if not terms:
        return Sum(FIN, negzero=allnegzero)
    if floor is not None:  # a zero-valued term that only bounds E from below
        terms.append((False, 0, 0, floor))
    s, g = _fuse(terms, P.F, P.trunc)
    return Sum(FIN, s=s, g=g)


F32 = FMTS["f32"]
F16 = FMTS["f16"]


def _to_fmt(r: Sum, fmt: Fmt, mode: str, P: Datapath, nan_bits: int) -> int:
    if r.kind == NAN:
        return nan_bits
    if r.kind == INF:
        return inf_bits(r.neg, fmt)
    if r.s == 0:
        return (1 << (fmt.width - 1)) if (P.zero == "ieee" and r.negzero) else 0
    return round_to(r.s < 0, abs(r.s), r.g, fmt, mode)


def _f32(r: Sum, P: Datapath) -> int:
    if P.sum_mbits < 23 and r.kind == FIN and r.s:
        # Round to a significand of sum_mbits fraction bits first (same exponent range).
        g = Fmt("acc", 32, 8, P.sum_mbits)
        bits = round_to(r.s < 0, abs(r.s), r.g, g, P.block_round)
        x = decode(bits, g)
        if x.kind == INF:
            return inf_bits(x.neg, F32)
        return round_to(x.neg, x.sig, x.exp, F32, "rz")
    return _to_fmt(r, F32, P.block_round, P, P.nan_f32)


def _add_rn(x: Num, y: Num, fmt: Fmt, nan_bits: int) -> int:
    """IEEE addition of two decoded numbers, rounded to nearest even into fmt."""
    if x.kind == NAN or y.kind == NAN:
        return nan_bits
    if x.kind == INF and y.kind == INF:
        return nan_bits if x.neg != y.neg else inf_bits(x.neg, fmt)
    if x.kind == INF:
        return inf_bits(x.neg, fmt)
    if y.kind == INF:
        return inf_bits(y.neg, fmt)
    v = value(x) + value(y)
    if v == 0:
        neg = x.zero and y.zero and x.neg and y.neg
        return int(neg) << (fmt.width - 1)
    q = v.denominator
    return round_to(v < 0, abs(v.numerator), -(q.bit_length() - 1), fmt, "rn")


def f32_to_f16(x: int, mode: str, nan_bits: int) -> int:
    """fp32 bits -> fp16 bits (NaN -> nan_bits)."""
    d = decode(x, F32)
    if d.kind == NAN:
        return nan_bits
    if d.kind == INF:
        return inf_bits(d.neg, F16)
    return round_to(d.neg, d.sig, d.exp, F16, mode)


def to_f16_exact(x: Num) -> int:
    """fp16 bits of a decoded fp8 value (exact: every e4m3 / e5m2 value is an fp16
    value; e4m3 subnormals become fp16 normals, e5m2 subnormals stay subnormal).
    NaN -> 0x7FFF (its payload never shows: the tensor core's NaN is canonical)."""
    if x.kind == NAN:
        return 0x7FFF
    if x.kind == INF:
        return inf_bits(x.neg, F16)
    bits = round_to(x.neg, x.sig, x.exp, F16, "rz")
    assert value(decode(bits, F16)) == value(x)
    return bits


def fma_rn(x: Num, y: Num, z: Num, fmt: Fmt, nan_bits: int) -> int:
    """IEEE fma(x, y, z) rounded to nearest even into fmt (a GPU FFMA without ftz):
    NaN operand or invalid -> nan_bits; an exact zero is +0 unless both addends are
    zeros of negative sign."""
    if NAN in (x.kind, y.kind, z.kind):
        return nan_bits
    pneg = x.neg != y.neg
    if (x.kind == INF and y.zero) or (y.kind == INF and x.zero):
        return nan_bits
    if x.kind == INF or y.kind == INF:
        if z.kind == INF and z.neg != pneg:
            return nan_bits
        return inf_bits(pneg, fmt)
    if z.kind == INF:
        return inf_bits(z.neg, fmt)
    v = Fraction(x.sig * y.sig) * Fraction(2) ** (x.exp + y.exp)
    v = (-v if pneg else v) + value(z)
    if v == 0:
        both_neg_zero = (x.zero or y.zero) and pneg and z.zero and z.neg
        return int(both_neg_zero) << (fmt.width - 1)
    q = v.denominator
    return round_to(v < 0, abs(v.numerator), -(q.bit_length() - 1), fmt, "rn")


def _ffma_elem(arow, bcol, c: Num, c_fmt: Fmt, d_fmt: Fmt, P: Datapath) -> int:
    """sm_90 has no m8n8k4 f16 unit: ptxas calls a software routine
    (``__cuda_sm_8x_mma_row_col_*``) of FFMA / FMUL / FADD on fp32 values (rn, IEEE).
    f32 D: ``d = c + fma(a3, b3, fma(a2, b2, fma(a1, b1, fma(a0, b0, +0))))``.
    f16 D: ``p01 = fma(a1, b1, a0*b0)``, ``p23 = fma(a3, b3, a2*b2)``,
    ``d = f16_rn((c + p01) + p23)``; k = 0..3 in the instruction's k order."""
    nan = P.nan_f32
    zero = Num(FIN, False)
    if d_fmt is F32:
        acc = zero
        for a, b in zip(arow, bcol, strict=True):
            acc = decode(fma_rn(a, b, acc, F32, nan), F32)
        return _add_rn(c, acc, F32, nan)
    assert len(arow) == 4, "f16 D of the FFMA routine is only modelled for k = 4"
    c32 = decode(f16_to_f32(c), F32) if c_fmt is F16 else c
    p01 = fma_rn(arow[1], bcol[1], decode(fma_rn(arow[0], bcol[0], zero, F32, nan), F32),
                 F32, nan)
    p23 = fma_rn(arow[3], bcol[3], decode(fma_rn(arow[2], bcol[2], zero, F32, nan), F32),
                 F32, nan)
    s1 = _add_rn(c32, decode(p01, F32), F32, nan)
    s2 = _add_rn(decode(s1, F32), decode(p23, F32), F32, nan)
    return f32_to_f16(s2, "rn", P.nan_f16)


def f16_to_f32(x: Num) -> int:
    """Exact fp16 -> fp32 bits of a decoded fp16 (NaN -> 0x7FFFFFFF)."""
    if x.kind == NAN:
        return 0x7FFFFFFF
    if x.kind == INF:
        return inf_bits(x.neg, F32)
    return round_to(x.neg, x.sig, x.exp, F32, "rz")


def mma_elem(arow, bcol, c: Num, c_fmt: Fmt, d_fmt: Fmt, P: Datapath) -> int:
    """One output element from decoded operands (lists over k) and decoded C."""
    k = len(arow)
    bk = P.block_k
    nan_d = P.nan_f32 if d_fmt.width == 32 else P.nan_f16
    if P.c_mode == "fused":
        acc, out = c, d_fmt  # C joins the first block as D's format sees it
        for k0 in range(0, k, bk):
            r = _block(zip(arow[k0:k0 + bk], bcol[k0:k0 + bk], strict=True), acc, P, out)
            out = None
            last = k0 + bk >= k
            if not last:
                acc = decode(_f32(r, P), F32)
        if d_fmt is F32:
            return _f32(r, P)
        if P.f16_out == "direct" and c_fmt is F16:
            out = _to_fmt(r, F16, P.f16_round, P, P.nan_f16)
            if P.f16_zero == "plus" and out == 0x8000:
                out = 0
            return out
        return f32_to_f16(_f32(r, P), P.f16_round, P.nan_f16)
    if P.c_mode == "ffma":
        return _ffma_elem(arow, bcol, c, c_fmt, d_fmt, P)
    if P.k_split == "mod4":
        # Products with k % 4 in {0, 1} form the first half of k, the rest the second
        # (how sm_90 feeds an fp8 k32 fragment to two f16 k16 HMMAs).
        order = [i for i in range(k) if i % 4 < 2] + [i for i in range(k) if i % 4 >= 2]
        arow = [arow[i] for i in order]
        bcol = [bcol[i] for i in order]
    if P.c_mode == "end":
        # The products alone through a chain of fused blocks starting from a +0
        # accumulator of the output type (each block rounded to d's type as that
        # type's block FMA does), then an IEEE addition of C rounded to nearest.
        acc = None
        for k0 in range(0, k, bk):
            r = _block(zip(arow[k0:k0 + bk], bcol[k0:k0 + bk], strict=True), acc, P)
            if d_fmt is F32:
                acc = decode(_f32(r, P), F32)
            else:
                out = _to_fmt(r, F16, P.f16_round, P, P.nan_f16)
                if P.f16_zero == "plus" and out == 0x8000:
                    out = 0
                acc = decode(out, F16)
        return _add_rn(c, acc, d_fmt, nan_d)
    # C after the products.
    acc = c
    acc_fmt = c_fmt
    for k0 in range(0, k, bk):
        r = _block(zip(arow[k0:k0 + bk], bcol[k0:k0 + bk], strict=True), None, P)
        last = k0 + bk >= k
        out_fmt = d_fmt if last else F32
        out_nan = nan_d if last else P.nan_f32
        if P.c_mode == "after":
            blk = decode(_f32(r, P), F32)
            bits = _add_rn(acc, blk, out_fmt, out_nan)
        else:  # after_fused: acc + block result in a 2-term fused adder
            blk = decode(_f32(r, P), F32)
            terms = []
            sp = Sum(FIN)
            kinds = (acc.kind, blk.kind)
            if NAN in kinds:
                sp = Sum(NAN)
            elif INF in kinds:
                infs = {x.neg for x in (acc, blk) if x.kind == INF}
                sp = Sum(NAN) if len(infs) == 2 else Sum(INF, infs.pop())
            else:
                for x in (acc, blk):
                    if x.sig:
                        terms.append(_c_term(x, P))
                if terms:
                    s, g = _fuse(terms, P.F, P.trunc)
                    sp = Sum(FIN, s=s, g=g)
                else:
                    sp = Sum(FIN, negzero=acc.neg and blk.neg)
            mode = P.block_round if out_fmt is F32 else P.f16_round
            bits = _to_fmt(sp, out_fmt, mode, P, out_nan)
        acc = decode(bits, out_fmt)
        acc_fmt = out_fmt
    if d_fmt is F16 and P.f16_zero == "plus" and bits == 0x8000:
        bits = 0
    del acc_fmt
    return bits


def mma_tile(A, B, C, a_fmt: str, b_fmt: str, c_fmt: str, d_fmt: str, P: Datapath):
    """(m, k) A, (k, n) B, (m, n) C as nested lists of raw bits -> nested list of D bits."""
    af, bf, cf, df = FMTS[a_fmt], FMTS[b_fmt], FMTS[c_fmt], FMTS[d_fmt]
    m, k, n = len(A), len(B), len(B[0])

    def dec(v, f):
        x = decode(v, f)
        if P.operand_via == "f16" and f.width == 8:
            x = decode(to_f16_exact(x), F16)
        return x

    ad = [[dec(v, af) for v in row] for row in A]
    bd = [[dec(B[kk][j], bf) for kk in range(k)] for j in range(n)]
    return [[mma_elem(ad[i], bd[j], decode(C[i][j], cf), cf, df, P) for j in range(n)]
            for i in range(m)]


# --------------------------------------------------------------------------------------
# f64 and integers.

F64_INVALID = 0xFFF8000000000000
F64_QUIET = 1 << 51


def fma64(a: int, b: int, c: int) -> int:
    f = FMTS["f64"]
    x, y, z = decode(a, f), decode(b, f), decode(c, f)
    for bits, num in ((b, y), (a, x), (c, z)):
        if num.kind == NAN:
            return int(bits) | F64_QUIET
    pneg = x.neg != y.neg
    if (x.kind == INF and y.zero) or (y.kind == INF and x.zero):
        return F64_INVALID
    if x.kind == INF or y.kind == INF:
        if z.kind == INF and z.neg != pneg:
            return F64_INVALID
        return inf_bits(pneg, f)
    if z.kind == INF:
        return int(c)
    v = Fraction(x.sig * y.sig) * Fraction(2) ** (x.exp + y.exp)
    v = (-v if pneg else v) + value(z)
    if v == 0:
        both_neg_zero = (x.zero or y.zero) and pneg and z.zero and z.neg
        return 1 << 63 if both_neg_zero else 0
    q = v.denominator
    return round_to(v < 0, abs(v.numerator), -(q.bit_length() - 1), f, "rn")


def f64_tile(A, B, C):
    m, k, n = len(A), len(B), len(B[0])
    out = []
    for i in range(m):
        row = []
        for j in range(n):
            acc = C[i][j]
            for kk in range(k):
                acc = fma64(A[i][kk], B[kk][j], acc)
            row.append(acc)
        out.append(row)
    return out


def int_tile(A, B, C, satfinite: bool):
    m, k, n = len(A), len(B), len(B[0])
    out = []
    for i in range(m):
        row = []
        for j in range(n):
            v = sum(A[i][kk] * B[kk][j] for kk in range(k)) + C[i][j]
            if satfinite:
                v = min(max(v, -(1 << 31)), (1 << 31) - 1)
            else:
                v &= (1 << 32) - 1
                v = v - (1 << 32) if v >> 31 else v
            row.append(v)
        out.append(row)
    return out


# --------------------------------------------------------------------------------------
# The parameters that reproduce the H100 captures (see the module docstring).

# How sm_90 aligns the accumulator (found on dense subnormal probes of the H100): a
# non-zero C counts at least at the minimum normal exponent of the format its block sums
# into, and the alignment exponent E is never below that exponent less 7.
_SM90_C = dict(c_sub_exp="emin", e_floor=7)

PRESETS = {
    "hmma": Datapath(block_k=16, F=25, c_mode="fused", sub_exp="emin", **_SM90_C),
    "hmma_tf32_k4": Datapath(block_k=4, F=25, c_mode="fused", sub_exp="emin", **_SM90_C),
    "hmma_tf32_k8": Datapath(block_k=8, F=25, c_mode="fused", sub_exp="emin", **_SM90_C),
    "mma_sync_fp8": Datapath(block_k=16, F=25, c_mode="end", k_split="mod4",
                             operand_via="f16", sub_exp="emin", **_SM90_C),
    "wgmma_fp8": Datapath(block_k=32, F=13, c_mode="fused", sum_mbits=13, sub_exp="emin",
                          **_SM90_C),
    # mma.sync m8n8k4 f16 (Volta shape): a software FFMA routine on sm_90 (from the SASS).
    "mma_sync_m8n8k4_f16": Datapath(c_mode="ffma"),
    # mma.sync fp8 m16n8k16: the same lowering as k32 with two HMMA.1688 (blocks of 8).
    "mma_sync_fp8_k16": Datapath(block_k=8, F=25, c_mode="end", k_split="mod4",
                                 operand_via="f16", sub_exp="emin", **_SM90_C),
}


def preset_for(instruction: str, a_format: str, shape: str) -> Datapath:
    """The preset for ``instruction`` in {"wmma", "mma_sync", "wgmma"}, the operand type
    and the instruction's shape (``"m16n8k32"``; WMMA tf32 m16n16k8 runs as two k4
    instructions)."""
    if instruction not in ("wmma", "mma_sync", "wgmma"):
        raise ValueError(f"instruction must be 'wmma', 'mma_sync' or 'wgmma', got {instruction!r}")
    k = int(shape.split("k")[-1])
    if a_format in ("e4m3", "e5m2"):
        if instruction == "wmma":
            raise ValueError("WMMA has no fp8 operands")
        if instruction == "wgmma":
            return PRESETS["wgmma_fp8"]
        return PRESETS["mma_sync_fp8" if k == 32 else "mma_sync_fp8_k16"]
    if a_format == "tf32":
        return PRESETS["hmma_tf32_k4" if instruction == "wmma" or k == 4 else "hmma_tf32_k8"]
    if a_format in ("f16", "bf16"):
        if instruction == "mma_sync" and shape == "m8n8k4":
            return PRESETS["mma_sync_m8n8k4_f16"]
        return PRESETS["hmma"]
    raise ValueError(f"a_format must be f16, bf16, tf32, e4m3 or e5m2, got {a_format!r}")
