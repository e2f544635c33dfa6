"""One exact float tensor-core instruction, bit for bit (the model: ``datapath.py``'s
docstring).

Decoded accumulator terms (``decode_acc``); the operands of the fast path (f16, fp8, fp6 and
fp4 values, whose products fp32 holds exactly: ``block_fast``) and of the general path
(bf16, tf32: significands and exponents, ``Operand``, which ``datapath.decode_operand``
decodes once per chain; ``block_general``); the exact sum of a block's truncated terms
(``_sum_terms``) with its special values; the rounding of a block's sum to fp32 or fp16
bits, IEEE additions; and one instruction made of blocks and C as ``Datapath.c_mode``
says (``INSTR_BY_C_MODE``; ``instruction``, the one function the chain calls: C's bits
in, D's bits out). ``block_scale.py`` builds its product terms on the same block FMA and
rounding.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxwarp._src.arithmetic.datapath_checks import ChainCfg
from jaxwarp._src.catalogue.arch import Datapath
from jaxwarp._src.config import config
from jaxwarp._src.numerics import bitops, softfloat
from jaxwarp._src.numerics.formats import FORMATS

# --------------------------------------------------------------------------------------
# Decoded terms (the soft-float helpers live in ``numerics/softfloat.py``).

_NEG_BIG = softfloat.NEG_BIG  # "exponent" of a zero term: below any real one
_Acc = softfloat.Term  # a decoded accumulator term


def decode_acc(bits, fmt: str, dp: Datapath, out: str | None = None, shift: int = 0) -> _Acc:
    """An accumulator term of ``fmt`` bits, as the block that sums into ``out`` (default
    ``fmt``) sees it: with ``c_sub_exp="emin"`` its alignment exponent (``lead``) is at
    least ``emin(out)`` (an f16 subnormal C of an fp32 D keeps its own), with
    ``e_floor`` at least ``emin(out) - e_floor`` also for a zero, which then bounds E.
    ``shift``: the term is C * 2**-shift exactly (tcgen05 scale-input-d: its exponents
    lowered after the subnormal rule, before the floor)."""
    return _acc_term(softfloat.term(bits, fmt), fmt, dp, out, shift)


def _acc_term(t: _Acc, fmt: str, dp: Datapath, out: str | None = None,
              shift: int = 0) -> _Acc:
    """``decode_acc`` of a term already decoded (``softfloat.term`` of ``fmt`` bits, or
    ``_rounded_term``)."""
    lo = softfloat.emin(out or fmt)
    if dp.c_sub_exp != "lead":
        sub = lo if dp.c_sub_exp == "emin" else softfloat.emin(fmt)
        t = t._replace(lead=jnp.where(t.sig != 0, jnp.maximum(t.lead, sub), t.lead))
    if shift:
        t = t._replace(lead=jnp.where(t.sig != 0, t.lead - shift, t.lead), lsb=t.lsb - shift)
    if dp.e_floor is not None:
        t = t._replace(lead=jnp.maximum(t.lead, lo - dp.e_floor))
    return t


# "No accumulator" (the +0 that ``c_mode="end"`` starts from; no term, no sign).
_NO_ACC = _Acc(np.bool_(False), np.int32(0), np.int32(0), np.int32(_NEG_BIG),
               np.bool_(False), np.bool_(False), np.bool_(False), np.bool_(True))


def _pow2(e):
    """2.0**(e - 127) as float32 from an int32 biased exponent e in [1, 254]."""
    return lax.bitcast_convert_type(e << 23, jnp.float32)


def _col(x, i):  # operand i of the a side, (..., m, 1)
    return x[..., :, i:i + 1]


def _row(x, i):  # operand i of the b side, (..., 1, n)
    return x[..., i:i + 1, :]


# How a block's k products are built (the option ``arith_block_form``, read at trace
# time): "unrolled", one (..., m, n) array per k index; "reduce", arrays with a trailing
# k axis whose maximum and sums are reductions (a program of one size for any k); or
# "rolled", the "reduce" form whose truncated terms are summed by ``fori_loop``s over k
# (``_rolled_sums``: each term's code once in the program). The bits are the same: the
# sums are of int32 (wrapping, associative) and maxima, and the fp32 sum that finds the
# specials is NaN, +-inf or -0 in any order. (Why "unrolled" is the default: config.py.)


def _take(x, ks, axis: int):
    """The k indices ``ks`` (static, in this order) of axis ``axis`` of x."""
    lo = ks[0]
    if list(ks) == list(range(lo, lo + len(ks))):
        return lax.slice_in_dim(x, lo, lo + len(ks), axis=axis)
    return jnp.take(x, np.asarray(ks), axis=axis)


def _cols(x, ks):  # operands ks of the a side, (..., m, 1, k)
    return _take(x, ks, x.ndim - 1)[..., :, None, :]


def _rows(x, ks):  # operands ks of the b side, (..., 1, n, k)
    return jnp.swapaxes(_take(x, ks, x.ndim - 2), -1, -2)[..., None, :, :]


# Products per int32 partial sum: every aligned term is below 2**(F + 2) <= 2**30.
_GROUP = 8


def _sum_terms(terms, acc: _Acc, E, F, trunc):
    """Exact sum of the truncated product terms (int32, in units of 2**(E - F); a list of
    (..., m, n) arrays, or one (..., m, n, k) array in k order) and the accumulator
    (truncated here) -> (neg, mag (uint32), g): value (-1)**neg * mag * 2**g."""
    if isinstance(terms, list):
        groups = [sum(terms[i:i + _GROUP]) for i in range(0, len(terms), _GROUP)]
        hi = sum(x >> 1 for x in groups)
        lo = sum(x & 1 for x in groups)
    else:  # the same int32 sums (associative, also where they wrap) as reductions
        k = terms.shape[-1]
        ng = -(-k // _GROUP)
        if ng > 1:
            if k % _GROUP:
                terms = jnp.pad(terms, [(0, 0)] * (terms.ndim - 1) + [(0, ng * _GROUP - k)])
            groups = terms.reshape(*terms.shape[:-1], ng, _GROUP).sum(-1, dtype=jnp.int32)
        else:
            groups = terms.sum(-1, keepdims=True, dtype=jnp.int32)
        hi = (groups >> 1).sum(-1, dtype=jnp.int32)
        lo = (groups & 1).sum(-1, dtype=jnp.int32)
    return _sum_halves(hi, lo, acc, E, F, trunc)


def _sum_halves(hi, lo, acc: _Acc, E, F, trunc):
    """``_sum_terms`` from the terms' partial sums: ``hi`` the sum of each group's sum
    (``_GROUP`` terms in k order, int32) shifted right by one, ``lo`` the sum of their
    low bits."""
    g = E - F
    sh = acc.lsb - g
    cv = softfloat.shift(acc.sig, sh)
    cv = jnp.where(acc.neg, -cv, cv)
    if trunc == "floor":  # toward minus infinity: a negative C with lost bits goes down
        lost = jnp.where(sh >= 0, False, jnp.where(
            sh <= -31, acc.sig != 0, (acc.sig & ((1 << jnp.clip(-sh, 0, 30)) - 1)) != 0))
        cv = cv - (lost & acc.neg).astype(jnp.int32)
    hi = hi + (cv >> 1)
    lo = lo + (cv & 1)
    # sum = 2 * hi + lo exactly in int32 (|sum| may pass 2**31 but stays below 2**32).
    neg = hi + (lo >> 1) < 0
    u = (hi.astype(jnp.uint32) << 1) + lo.astype(jnp.uint32)
    return neg, jnp.where(neg, jnp.uint32(0) - u, u), g


def _acc_special(acc: _Acc):
    """The accumulator's stand-in in the IEEE special sum: NaN, +-inf, -0 (a zero of
    negative sign, or no accumulator) or +0."""
    return jnp.where(acc.nan, jnp.float32(jnp.nan),
                     jnp.where(acc.pinf, jnp.float32(jnp.inf),
                               jnp.where(acc.ninf, jnp.float32(-jnp.inf),
                                         jnp.where(acc.negzero, jnp.float32(-0.0),
                                                   jnp.float32(0)))))


def _specials(prods, acc: _Acc, dp: Datapath):
    """(nan, +inf, -inf, negzero) of a block from the IEEE fp32 sum of its exact
    products (or of stand-ins with their signs and specials) and the accumulator's
    stand-in: that sum is NaN / +-inf exactly when the block result is, and -0 exactly
    when every term is a zero of negative sign (a sum rounded to nearest is -0 only
    then; the products here are never fp32 subnormals, so no flush can fake one)."""
    if isinstance(prods, list):
        sp = functools.reduce(jnp.add, prods, _acc_special(acc))
    else:  # (..., m, n, k): any order of the sum gives the same NaN, inf and -0
        sp = _acc_special(acc) + prods.sum(-1)
    return _special_flags(sp, dp)


def _special_flags(sp, dp: Datapath):
    """(nan, +inf, -inf, negzero) from the IEEE sum ``sp`` of ``_specials``."""
    nan = jnp.isnan(sp)
    negzero = (sp == 0) & jnp.signbit(sp) if dp.zero == "ieee" else jnp.bool_(False)
    return nan, sp == jnp.inf, sp == -jnp.inf, negzero


def _trunc(v, p, trunc: str):
    """Aligned fp32 term v (of the product p) -> int32, toward zero or minus infinity."""
    t = v.astype(jnp.int32)
    if trunc == "floor":
        inexact = (t.astype(jnp.float32) != v) | ((v == 0) & (p != 0))
        t = t - (inexact & (p < 0)).astype(jnp.int32)
    return t


class Block(NamedTuple):
    """A block's exact truncated sum (-1)**neg * mag * 2**g and its specials."""

    neg: jax.Array
    mag: jax.Array
    g: jax.Array
    nan: jax.Array
    pinf: jax.Array
    ninf: jax.Array
    negzero: jax.Array


# How XLA sees a block: the k loop is unrolled into element-wise operations on
# (..., m, n) arrays, so the whole block fuses into one loop over the outputs and no
# (..., m, n, k) tensor is ever stored. The fast path (f16 and fp8 operands, whose
# values and products fp32 holds exactly as normal numbers) is then fp32 arithmetic: the
# product itself, the sum of the operands' alignment exponents whose maximum gives the
# block exponent E, the product scaled onto the grid of 2**(E - F), one conversion to
# int32 (the truncation) and one int32 addition. inf and NaN follow from the IEEE fp32
# sum of the products, which is NaN / +-inf exactly when the block result is. bf16 and
# tf32 take the general path (``Operand``): their products may leave fp32's range.
# (On the H100, jax 0.11, a 2**18-tile batch: XLA stores each k slice of the operands
# once and fuses the rest; folding the slices into k reductions, or a cond choosing
# this path for bf16 in range, measured slower.)
# (XLA on CPU flushes fp32 subnormals: every fp32 value formed here is normal, zero,
# or only ever truncated to zero.)


def _at(x, j):
    """Index j (traced) of x's trailing k axis, kept as an axis of 1."""
    return lax.dynamic_slice_in_dim(x, j, 1, axis=x.ndim - 1)


def _rolled_sums(nk: int, term_at, shape):
    """``_sum_terms``' partial sums (hi, lo) of the ``nk`` truncated terms
    ``term_at(j)`` (int32, ``shape``) as loops (``arith_block_form="rolled"``): each group of
    ``_GROUP`` terms in k order summed by an inner ``fori_loop`` (int32 sums wrap: the
    same group sums), the groups folded by an outer one."""
    zero = jnp.zeros(shape, jnp.int32)

    def group(j0, n):
        return lax.fori_loop(0, n, lambda j, t: t + term_at(j0 + j), zero)

    full, rem = divmod(nk, _GROUP)
    if not full:
        t = group(0, rem)
        return t >> 1, t & 1

    def fold(i, hl, n=_GROUP):
        t = group(i * _GROUP, n)
        return hl[0] + (t >> 1), hl[1] + (t & 1)

    hi, lo = lax.fori_loop(0, full, fold, (zero, zero)) if full > 1 else fold(0, (zero, zero))
    if rem:
        hi, lo = fold(full, (hi, lo), rem)  # the short last group (rem < _GROUP terms)
    return hi, lo


def _ebits(x):
    """Biased exponent of fp32 x: 0 for zero, 255 for inf and NaN."""
    return (lax.bitcast_convert_type(x, jnp.int32) >> 23) & 0xFF


#: Operand formats of the fast path: f16 holds every value, fp32 every product of two
#: values exactly as a normal number (bf16 and tf32 products may leave fp32's range).
FAST_FORMATS = frozenset({"f16", "e4m3", "e5m2", "e3m2", "e2m3", "e2m1"})


def as_f16(x, fmt: str):
    """Operand values of ``fmt`` as float16 (exact): fp8 by a conversion, the fp6 / fp4
    codes (uint8, ``Format.code_storage``) from their decoded significand and exponent."""
    if not FORMATS[fmt].code_storage:
        return x.astype(jnp.float16)
    neg, lsb, sig, _, _, _ = softfloat.decode(x.astype(jnp.uint32), fmt)
    v = sig.astype(jnp.float32) * _pow2(lsb + 127)  # lsb >= -4: a normal fp32 scale
    return jnp.where(neg, -v, v).astype(jnp.float16)


def fast_align(x, fmt: str, dp: Datapath):
    """Alignment exponent + 127 of the fp32 operand x (an ``fmt`` value): its biased
    exponent, a subnormal's raised to the format's smallest normal one
    (``sub_exp="emin"``); -1000 for zero (its products count for nothing)."""
    e = _ebits(x)
    if dp.sub_exp == "emin":
        e = jnp.maximum(e, softfloat.emin(fmt) + 127)
    return jnp.where(x == 0, -1000, e)


def block_fast(a, b, ks, acc: _Acc, dp: Datapath, *, fmts: tuple[str, str],
                emin: int, finite: bool = False) -> Block:
    """One block FMA over the k indices ``ks`` for f16 / fp8 operands (a (..., m, k),
    b (..., k, n) as f16: fp8 is converted exactly), converted to fp32 slice by slice here
    (so that XLA fuses the conversions instead of storing fp32 copies). ``emin``: the
    lowest alignment exponent of a non-zero product. ``finite``: every operand is known
    to be finite and every product a normal fp32 number or zero (bf16 / tf32 operands in
    range, ``in_fp32_range``): the block is special only where C is, and no IEEE sum
    of the products is formed (with ``zero="plus"`` only)."""
    a, a_al = a if isinstance(a, tuple) else (a, None)  # (values, alignments) or values
    b, b_al = b if isinstance(b, tuple) else (b, None)
    form = config.arith_block_form
    if form != "unrolled":
        return _block_fast_k(a, a_al, b, b_al, ks, acc, dp, fmts, emin, finite, form)
    av = [_col(a, i).astype(jnp.float32) for i in ks]
    bv = [_row(b, i).astype(jnp.float32) for i in ks]
    prods = [x * y for x, y in zip(av, bv, strict=True)]  # exact, normal or zero
    if dp.align == "nominal":  # the sum of the operands' alignment exponents
        if a_al is None:
            ea = [fast_align(x, fmts[0], dp) for x in av]
            eb = [fast_align(y, fmts[1], dp) for y in bv]
        else:  # computed beforehand (``_store_decoded``)
            ea = [_col(a_al, i).astype(jnp.int32) for i in ks]
            eb = [_row(b_al, i).astype(jnp.int32) for i in ks]
        top = functools.reduce(jnp.maximum, [x + y for x, y in zip(ea, eb, strict=True)])
        top = top - 127  # biased once, as _ebits; <= 0 when every product is zero
    else:  # the product's own leading bit
        top = _ebits(functools.reduce(jnp.maximum, [jnp.abs(p) for p in prods]))
    # top: 255 or more only with an inf / NaN operand (the result is then special).
    E = jnp.maximum(jnp.where(top > 0, top - 127, _NEG_BIG), acc.lead)
    # A non-zero product has E >= emin; otherwise the scale is never used.
    scale = _pow2(dp.F - jnp.clip(E, emin, 127) + 127)
    terms = [_trunc(p * scale, p, dp.trunc) for p in prods]
    neg, mag, g = _sum_terms(terms, acc, E, dp.F, dp.trunc)
    return Block(neg, mag, g, *(_acc_specials(acc, dp) if finite
                                 else _specials(prods, acc, dp)))


def _acc_specials(acc: _Acc, dp: Datapath):
    """``_specials`` of a block whose products are all finite, and whose IEEE sum of
    them could overflow (bf16 products up to 2**128): the accumulator's own NaN and
    infinities (``zero="plus"`` only: no sign of a zero sum is needed)."""
    if dp.zero != "plus":
        raise ValueError("finite blocks are modelled for zero='plus' only")
    return acc.nan, acc.pinf & ~acc.nan, acc.ninf & ~acc.nan, jnp.bool_(False)


def _block_fast_k(a, a_al, b, b_al, ks, acc: _Acc, dp: Datapath, fmts, emin: int,
                  finite: bool = False, form: str = "reduce") -> Block:
    """``block_fast`` on (..., m, n, k) arrays (``arith_block_form="reduce"``), or with its
    terms summed by loops over k (``"rolled"``: only the maximum for E and the IEEE sum
    of the specials are reductions)."""
    av, bv = _cols(a, ks).astype(jnp.float32), _rows(b, ks).astype(jnp.float32)
    prods = av * bv  # exact, normal or zero
    if dp.align == "nominal":
        if a_al is None:
            ea, eb = fast_align(av, fmts[0], dp), fast_align(bv, fmts[1], dp)
        else:
            ea, eb = _cols(a_al, ks).astype(jnp.int32), _rows(b_al, ks).astype(jnp.int32)
        top = (ea + eb).max(-1) - 127
    else:
        top = _ebits(jnp.abs(prods).max(-1))
    E = jnp.maximum(jnp.where(top > 0, top - 127, _NEG_BIG), acc.lead)
    scale = _pow2(dp.F - jnp.clip(E, emin, 127) + 127)
    if form == "rolled":
        def term_at(j):
            p = _at(av, j) * _at(bv, j)
            return _trunc(p * scale[..., None], p, dp.trunc)[..., 0]

        hi, lo = _rolled_sums(len(ks), term_at, E.shape)
        neg, mag, g = _sum_halves(hi, lo, acc, E, dp.F, dp.trunc)
    else:
        terms = _trunc(prods * scale[..., None], prods, dp.trunc)
        neg, mag, g = _sum_terms(terms, acc, E, dp.F, dp.trunc)
    return Block(neg, mag, g, *(_acc_specials(acc, dp) if finite
                                 else _specials(prods, acc, dp)))


# bf16 and tf32 operands in range. A product of two bf16 / tf32 values is exact in fp32
# unless it leaves fp32's normal range, which takes operands beyond about 2**+-63: in
# trained networks they almost never are. Where every product of a step is a normal fp32
# number (and no operand is inf or NaN) the fast path's arithmetic gives the general
# path's bits at its cost (fewer operations per product, and no IEEE sum of products); a
# ``lax.cond`` on ``in_fp32_range`` of the step's operands chooses it, on the CPU only
# (on the H100 a cond in the k loop measured slower; see ``block_fast``'s note).

#: Exponent bounds (unbiased) of the fast path for bf16 / tf32: every non-zero product
#: at least 2**RANGE_LO (so that the scale 2**(F - E) of the block, E >= RANGE_LO, is a
#: normal fp32 number for F <= 25) and below 2**128.
RANGE_LO = -100
RANGE_HI = 126


def _exp_range(x):
    """(largest biased exponent, smallest biased exponent of a non-zero element) of the
    values x (255 if x holds no non-zero element; inf and NaN give 255)."""
    u = lax.bitcast_convert_type(x.astype(jnp.float32), jnp.int32) & 0x7FFFFFFF
    e = u >> 23  # on the bits: XLA's CPU comparisons see a subnormal as zero
    return e.max(initial=0), jnp.where(u == 0, 255, e).min(initial=255)


def _in_range_all(a, b):
    amax, amin = _exp_range(a)
    bmax, bmin = _exp_range(b)
    return ((amax < 255) & (bmax < 255) & (amin > 0) & (bmin > 0)  # finite, no subnormal
            & (amax + bmax - 254 <= RANGE_HI) & (amin + bmin - 254 >= RANGE_LO))


@jax.custom_batching.custom_vmap
def in_fp32_range(a, b):
    """Whether every product of an element of a and one of b (bf16 / fp32 values) is
    exact as a normal fp32 number of at least 2**RANGE_LO (or zero), and no element is
    inf, NaN or subnormal: a scalar bool. Under ``vmap`` it is one scalar for the whole batch (so
    that a ``lax.cond`` on it stays a cond and runs one branch)."""
    return _in_range_all(a, b)


@in_fp32_range.def_vmap
def _in_fp32_range_vmap(axis_size, in_batched, a, b):
    del axis_size, in_batched  # a mapped axis is one more axis of the same arrays
    return _in_range_all(a, b), False


class Operand(NamedTuple):
    """Operands of the general path, decoded once per element into 4 bytes.

    sig: float16 signed significand (an integer below 2**11, exact in fp16), +-inf or
      NaN for inf and NaN operands: the fp32 sum of the products ``sig_a * sig_b``
      (below 2**26 when finite) is then NaN / +-inf exactly when the block result is.
    exp: int16 ``16 * lsb + (align - lsb)``: the exponents of sig's last bit and the
      operand's alignment exponent (lsb -1000 for zero, inf and NaN, so that their
      products get no exponent and scale to nothing).

    On the CPU (``datapath.decode_operand(..., stored=True)``) sig is float32 and exp
    int32, the same values.
    """

    sig: jax.Array
    exp: jax.Array


def lead_only(dp: Datapath) -> bool:
    """Whether the alignment exponent alone gives the lsb: with nominal alignment and a
    subnormal at the minimum normal exponent, lsb = align - mbits for every non-zero
    finite operand (a normal's exponent, a subnormal's emin, less the fraction bits)."""
    return dp.align == "nominal" and dp.sub_exp == "emin"


def block_general(a: Operand, b: Operand, ks, acc: _Acc, dp: Datapath, *,
                   emin: int, mbits: int) -> Block:
    """One block FMA for any operand formats (bf16, tf32, fp8: products may leave
    fp32's range): like ``block_fast`` on decoded operands (``datapath.decode_operand``), each
    product of significands scaled by its own power of two. ``mbits``: the fraction
    bits of a's format plus b's."""
    align_only = lead_only(dp)  # exp is the alignment exponent; lsb_a + lsb_b = pe - mbits

    def unpack(s, e):  # -> (fp32 significand, int32 lsb, int32 alignment exponent)
        e = e.astype(jnp.int32)
        if align_only:
            return s.astype(jnp.float32), None, e
        lsb = e >> 4
        return s.astype(jnp.float32), lsb, lsb + (e & 15)

    form = config.arith_block_form
    if form != "unrolled":  # (..., m, n, k) arrays; "rolled": terms summed by loops
        x, y = unpack(_cols(a.sig, ks), _cols(a.exp, ks)), unpack(_rows(b.sig, ks),
                                                                   _rows(b.exp, ks))
        prods = x[0] * y[0]

        def exps(x, y, p):  # the alignment exponent
            return x[2] + y[2] if dp.align == "nominal" else x[1] + y[1] + _ebits(p) - 127

        E = jnp.maximum(exps(x, y, prods).max(-1), acc.lead)
        fe = dp.F - jnp.maximum(E, emin) + 127
        fe = fe - mbits if align_only else fe

        def terms_of(x, y, p):
            lsbs = exps(x, y, p) if align_only else x[1] + y[1]
            return _trunc(p * _pow2(jnp.maximum(lsbs + fe[..., None], 1)), p, dp.trunc)

        if form == "rolled":
            def term_at(j):
                xj, yj = ([None if v is None else _at(v, j) for v in t] for t in (x, y))
                return terms_of(xj, yj, xj[0] * yj[0])[..., 0]

            hi, lo = _rolled_sums(len(ks), term_at, E.shape)
            neg, mag, g = _sum_halves(hi, lo, acc, E, dp.F, dp.trunc)
        else:
            neg, mag, g = _sum_terms(terms_of(x, y, prods), acc, E, dp.F, dp.trunc)
        return Block(neg, mag, g, *_specials(prods, acc, dp))
    ops_a = [unpack(_col(a.sig, i), _col(a.exp, i)) for i in ks]
    ops_b = [unpack(_row(b.sig, i), _row(b.exp, i)) for i in ks]
    prods = [x[0] * y[0] for x, y in zip(ops_a, ops_b, strict=True)]  # exact: < 2**22
    if dp.align == "nominal":
        pe = [x[2] + y[2] for x, y in zip(ops_a, ops_b, strict=True)]
    else:  # the product's own leading bit
        pe = [x[1] + y[1] + _ebits(p) - 127 for x, y, p in zip(ops_a, ops_b, prods,
                                                               strict=True)]
    # Zero, inf and NaN operands give exponents far below any real one (lsb -1000); if
    # neither a product nor C is non-zero, E does not matter.
    E = functools.reduce(jnp.maximum, pe, acc.lead)
    # Products only need a valid scale when one is non-zero (then E >= emin).
    fe = dp.F - jnp.maximum(E, emin) + 127
    if align_only:
        lsbs, fe = pe, fe - mbits
    else:
        lsbs = [x[1] + y[1] for x, y in zip(ops_a, ops_b, strict=True)]
    terms = [_trunc(p * _pow2(jnp.maximum(lsb + fe, 1)), p, dp.trunc)
             for p, lsb in zip(prods, lsbs, strict=True)]
    neg, mag, g = _sum_terms(terms, acc, E, dp.F, dp.trunc)
    return Block(neg, mag, g, *_specials(prods, acc, dp))


# --------------------------------------------------------------------------------------
# Rounding a block, IEEE additions.


def _specials_to(bits, r, nan_bits: int, inf_bits: int, sign: int):
    bits = jnp.where(r.nan, jnp.uint32(nan_bits), bits)
    bits = jnp.where(r.pinf & ~r.nan, jnp.uint32(inf_bits), bits)
    return jnp.where(r.ninf & ~r.nan, jnp.uint32(inf_bits | sign), bits)


def _zero_rule(bits, r: Block, dp: Datapath, sign: int):
    if dp.zero == "ieee":
        bits = jnp.where(r.mag == 0, jnp.where(r.negzero, jnp.uint32(sign), 0), bits)
    return bits


def _rounded_term(r: Block, dp: Datapath, fmt: str) -> _Acc:
    """``softfloat.term`` of ``f32_bits(r, dp)`` (``fmt`` "f32") or ``_f16_bits(r, dp)``
    ("f16"), built from the rounded significand without encoding the bits and decoding
    them again (the accumulator of a chain's next block: one instruction of 4 blocks,
    sm_70 WMMA, ran 1.18x faster on the CPU). The same value, leading exponent, specials
    (an overflow is an infinity) and zero sign; ``sig`` and ``lsb`` may be another pair
    of the same value (``q`` keeps the rounding grid's bits), and ``neg`` is that of
    ``_block``'s sum where no value reads it (zeros, inf, NaN)."""
    emin_, emax, mbits, mode, zero_plus = (
        (-126, 127, dp.sum_mbits, dp.block_round, dp.f32_zero == "plus")
        if fmt == "f32" else (-14, 15, 10, dp.f16_round, dp.f16_zero == "plus"))
    q, lsb = softfloat.round_sig(r.mag, r.g, emin_, mbits, mode)
    lead = lsb + softfloat.bitlen(q) - 1
    over = (q != 0) & (lead > emax)  # encode's infinity
    nan = r.nan
    pinf = ~nan & (r.pinf | (~r.ninf & over & ~r.neg))
    ninf = ~nan & (r.ninf | (~r.pinf & over & r.neg))
    finite = ~(nan | pinf | ninf)
    # The sign of a zero result: _zero_rule's, else encode's (round_sig's q of 0).
    zsign = jnp.where(r.mag == 0, r.negzero, r.neg) if dp.zero == "ieee" else r.neg
    negzero = (finite & (q == 0) & zsign) if not zero_plus else jnp.bool_(False)
    num = finite & (q != 0)
    return _Acc(r.neg, lsb, jnp.where(num, q, 0).astype(jnp.int32),
                jnp.where(num, lead, _NEG_BIG), nan, pinf, ninf, negzero)


def f32_bits(r: Block, dp: Datapath):
    """A block sum -> fp32 bits (``block_round``, ``sum_mbits``)."""
    q, lsb = softfloat.round_sig(r.mag, r.g, -126, dp.sum_mbits, dp.block_round)
    # round_sig to fp32's own grid (sum_mbits 23): encode_rounded, the same bits cheaper
    enc = softfloat.encode_rounded if dp.sum_mbits == 23 else softfloat.encode
    bits = _zero_rule(enc(r.neg, q, lsb, "f32"), r, dp, 1 << 31)
    if dp.f32_zero == "plus":
        bits = jnp.where(bits == jnp.uint32(0x80000000), jnp.uint32(0), bits)
    return _specials_to(bits, r, dp.nan_f32, 0x7F800000, 1 << 31)


def _f16_bits(r: Block, dp: Datapath):
    """A block sum -> fp16 bits directly (``f16_round``, ``f16_zero``)."""
    q, lsb = softfloat.round_sig(r.mag, r.g, -14, 10, dp.f16_round)
    bits = _zero_rule(softfloat.encode_rounded(r.neg, q, lsb, "f16"), r, dp, 0x8000)
    if dp.f16_zero == "plus":
        bits = jnp.where(bits == 0x8000, jnp.uint32(0), bits)
    return _specials_to(bits, r, dp.nan_f16, 0x7C00, 0x8000)


def _f32_to_f16(bits, dp: Datapath):
    """fp32 bits -> fp16 bits (``f16_round``; NaN -> ``nan_f16``)."""
    neg, lsb, sig, _, inf, nan = softfloat.decode(bits, "f32")
    q, l16 = softfloat.round_sig(sig.astype(jnp.uint32), lsb, -14, 10, dp.f16_round)
    out = softfloat.encode_rounded(neg, q, l16, "f16")
    out = jnp.where(inf, jnp.uint32(0x7C00) | (out & 0x8000), out)
    return jnp.where(nan, jnp.uint32(dp.nan_f16), out)


def _add_rn(x: _Acc, y: _Acc, out: str, dp: Datapath):
    """IEEE ``x + y`` to nearest even into ``out`` ("f32"/"f16") bits; NaN -> dp's."""
    return softfloat.add_rn(x, y, out, dp.nan_f32 if out == "f32" else dp.nan_f16)


def _f32_acc(x) -> _Acc:
    """An fp32 value (normal, zero, inf or NaN) as an accumulator term."""
    return softfloat.term(bitops.to_u32(x), "f32")


# --------------------------------------------------------------------------------------
# Instructions.


def k_order(ks: list[int], dp: Datapath) -> list[int]:
    if dp.k_split == "mod4":  # k % 4 in {0, 1} first (the low halves of fp8 registers)
        return [k for j, k in enumerate(ks) if j % 4 < 2] + [k for j, k in enumerate(ks)
                                                             if j % 4 >= 2]
    return ks


def _instr_fused(a, b, ks, acc, block, cfg: ChainCfg, c_format: str):
    dp = cfg.dp
    blocks = [ks[j:j + dp.block_k] for j in range(0, len(ks), dp.block_k)]
    for j, kb in enumerate(blocks):
        r = block(a, b, kb, acc, dp)
        if j + 1 < len(blocks):  # the block result is the next block's accumulator
            fmt = "f16" if dp.block_out == "d" and cfg.d_format == "f16" else "f32"
            acc = _acc_term(_rounded_term(r, dp, fmt), fmt, dp)  # rounded as D or fp32
    if cfg.d_format == "f32":
        return f32_bits(r, dp)
    if c_format == "f16" and dp.f16_out == "direct":
        return _f16_bits(r, dp)
    return _f32_to_f16(f32_bits(r, dp), dp)


def _instr_end(a, b, ks, acc_c, block, cfg: ChainCfg, c_format: str):
    dp = cfg.dp
    acc = _NO_ACC
    for j in range(0, len(ks), dp.block_k):
        r = block(a, b, ks[j:j + dp.block_k], acc, dp)
        if cfg.d_format == "f32":
            acc = decode_acc(f32_bits(r, dp), "f32", dp)
        else:
            acc = decode_acc(_f16_bits(r, dp), "f16", dp)
    return _add_rn(acc_c, acc, cfg.d_format, dp)


def _instr_ffma(a, b, ks, acc_c, block, cfg: ChainCfg, c_format: str):
    del block, c_format
    dp = cfg.dp
    prods = [_f32_acc(_col(a, i).astype(jnp.float32) * _row(b, i).astype(jnp.float32))
             for i in ks]
    if cfg.d_format == "f32":
        acc = _NO_ACC._replace(negzero=np.bool_(False))  # fma(a0, b0, +0)
        for p in prods:
            acc = decode_acc(_add_rn(p, acc, "f32", dp), "f32", dp)
        return _add_rn(acc_c, acc, "f32", dp)
    if len(ks) != 4:
        raise ValueError("the FFMA routine with an f16 D is modelled for k = 4 only")
    p01 = decode_acc(_add_rn(prods[1], prods[0], "f32", dp), "f32", dp)
    p23 = decode_acc(_add_rn(prods[3], prods[2], "f32", dp), "f32", dp)
    s1 = decode_acc(_add_rn(acc_c, p01, "f32", dp), "f32", dp)
    return _f32_to_f16(_add_rn(s1, p23, "f32", dp), dp)


INSTR_BY_C_MODE = {"fused": _instr_fused, "end": _instr_end, "ffma": _instr_ffma}


def instruction(a, b, ks, c_bits, c_format: str, block, cfg: ChainCfg, shift: int = 0):
    """One instruction of a chain, as bits of D (uint32): its C given as bits
    (``bitops.to_u32``) of ``c_format`` (the chain's C, or the previous instruction's D),
    decoded here as its blocks see it (``decode_acc``: ``shift`` is tcgen05's
    scale-input-d, the first instruction's only), then the blocks over the k indices
    ``ks`` in order, as ``cfg.dp.c_mode`` says (``INSTR_BY_C_MODE``); ``a``, ``b``: the
    prepared operands (f16 values, or ``Operand``) and ``block`` the block FMA that reads
    them."""
    # An fp32 C makes the instruction an fp32-accumulating one: its blocks sum into fp32
    # (subnormal rule and floor of fp32) and an f16 D is that fp32 result rounded.
    out = "f32" if c_format == "f32" else cfg.d_format
    acc = decode_acc(c_bits, c_format, cfg.dp, out, shift)
    return INSTR_BY_C_MODE[cfg.dp.c_mode](a, b, ks, acc, block, cfg, c_format)
