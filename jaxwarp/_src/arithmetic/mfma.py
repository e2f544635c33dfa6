"""The arithmetic of AMD's matrix cores (``v_mfma_*`` of CDNA1, CDNA2, CDNA3) on bits.

:func:`mfma_bits` computes one block ``D = A @ B + C`` as the instruction's
:class:`~jaxwarp._src.catalogue.mfma_table.MfmaDatapath` says (the kinds are listed in
``catalogue/mfma_table.py``), on raw bit patterns, with the number layer's one rounding
engine (``softfloat.round_sig`` / ``encode_rounded``, ``softfloat.add_rn``; the fp32 and
fp64 fused multiply-adds of ``scaling/tensor_scale`` and ``arithmetic/datapath_f64``).
The model is the published reference model MMA-Sim 2.1.1 (Xie et al., arXiv 2511.10909);
the steps of each kind, per output element and group of products:

* ``"fma"``: ``d = fma(a[k], b[k], d)`` for k = 0, 1, ... (IEEE, nearest even, subnormals
  kept), starting from C.
* ``"exact"`` (CDNA1 f16 / bf16): the group's products and C summed exactly, rounded once
  to nearest even into f32 (subnormals kept, beyond f32's range infinity); an exact zero
  sum is +0. (Summed in a 192-bit window below the largest term, with a sticky bit; the
  terms below it are summed in a window of their own where those inside cancel.)
* ``"ftz_chain"`` (CDNA2 f16 / bf16): operands below their format's smallest normal (and
  -0), and C below f32's, become +0; each product is rounded to f32; products are added
  in pairs (then the pairs, for groups of 4), the group's sum is added to C, every
  addition IEEE f32 to nearest even; every product and sum below f32's smallest normal
  becomes a zero of its sign.
* ``"trunc"`` (CDNA3 f16 / bf16 / xf32): each product's exponent is the sum of its
  operands' (a subnormal counts at its format's minimum normal exponent), E the group's
  largest; every product is truncated toward zero to a multiple of ``2**(E - F)`` and
  the truncated products summed (a product of 2**128 or more is an infinity). Then C
  (exponent e_c, at least -126) joins: with J = max(E, e_c), the product sum is floored to
  a multiple of ``2**(J - F2 - 1)`` and C to one of ``2**(J - F)``; their exact sum is
  floored to ``F2`` fraction bits below its leading bit (at least ``2**(-126 - F2)``) and
  rounded to nearest even into f32. NaN is 0x7FFFFFFF.
* ``"trunc_split"`` (CDNA3 fp8 / bf8): as ``"trunc"``, but the even-k and the odd-k
  products are truncated and summed apart (each with its own E), the two sums floored to
  the larger E's grid and added; a C below ``2**(J - F - 1)`` counts as zero, an infinite
  or NaN C too (its exponent is taken as -1), so that a NaN of one group can vanish in the
  next, as in MMA-Sim.

NaN bits: the ``"trunc"`` kinds write 0x7FFFFFFF, as MMA-Sim does. The others compute, in
MMA-Sim, with its host CPU's floats, whose NaN is an operand's (quieted) or, for an invalid
operation, the default NaN 0xFFC00000 (f64: 0xFFF8000000000000); they write the NaN an
x86-64 host gives: the C library's fma takes a's NaN, then b's, then c's; torch's float
products and sums the second operand's, then the first's, and its float64 reduction of a
CDNA1 group its own order (:func:`_exact_nan_bits`). These are the host's bits, not the
hardware's (which were not measured).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from jaxwarp._src.arithmetic import datapath_f64
from jaxwarp._src.catalogue.mfma_table import MfmaDatapath
from jaxwarp._src.numerics import bitops, softfloat
from jaxwarp._src.numerics.user_formats import Layout, decode_codes
from jaxwarp._src.scaling import tensor_scale

__all__ = ["F32_NAN", "NAN_EXACT_KINDS", "mfma_bits"]

#: The NaN every f32 result of these datapaths carries.
F32_NAN = 0x7FFFFFFF
#: The kinds whose NaN bits MMA-Sim defines (0x7FFFFFFF); the others' come from its host
#: (modelled here for an x86-64 host).
NAN_EXACT_KINDS = ("trunc", "trunc_split")

_FNUZ = {"e4m3fnuz": Layout(4, 3, 8, "fnuz", True, False),
         "e5m2fnuz": Layout(5, 2, 16, "fnuz", True, False)}
_EMIN_F32 = -126
_U = jnp.uint32
_I = jnp.int32


def _decode(bits, fmt: str):
    """uint32 bits -> ``(neg, sig, lsb, e, inf, nan)``: value ``(-1)**neg * sig * 2**lsb``;
    ``e`` the exponent of the leading bit (a subnormal: the format's minimum normal
    exponent; zero, inf, NaN: ``softfloat.NEG_BIG``)."""
    if fmt in _FNUZ:
        neg, sig, lsb, align, inf, nan = decode_codes(bits, _FNUZ[fmt])
        e = jnp.where(sig == 0, softfloat.NEG_BIG, align)
        return neg, sig, lsb, e, inf, nan
    neg, lsb, sig, lead, inf, nan = softfloat.decode(bits, fmt, sub_emin=True)
    return neg, sig.astype(_I), lsb, lead, inf, nan


def _products(a, b):
    """Decoded operands (..., m, 1, L) and (..., 1, n, L) -> the exact products."""
    na, sa, la, ea, ia, qa = a
    nb, sb, lb, eb, ib, qb = b
    za, zb = (sa == 0) & ~ia & ~qa, (sb == 0) & ~ib & ~qb
    neg = na ^ nb
    sig = sa * sb  # below 2**24 for every operand format here
    nan = qa | qb | (ia & zb) | (ib & za)
    inf = (ia | ib) & ~nan
    return neg, sig, la + lb, ea + eb, inf, nan


def _signed(neg, mag):
    return jnp.where(neg, -mag, mag)


# --------------------------------------------------------------------------------------
# "trunc" and "trunc_split": truncated sums, C joined, floored, rounded.


def _trunc_sum(neg, sig, lsb, e, F: int):
    """Products (last axis) truncated below the largest exponent E and summed:
    ``(D, E)``, value ``D * 2**(E - F)`` (E = NEG_BIG when every product is zero)."""
    nz = sig != 0
    E = jnp.max(jnp.where(nz, e, softfloat.NEG_BIG), axis=-1)
    mag = softfloat.shift(sig, lsb - (E[..., None] - F))
    return jnp.sum(_signed(neg, jnp.where(nz, mag, 0)), axis=-1), E


def _floor_shift(x, s):
    """``floor(x * 2**-s)`` for int32 x and s >= 0 (any size)."""
    return x >> jnp.clip(s, 0, 31)


def _hi_lo(v, t):
    """``v * 2**t`` (int32 v, 0 <= t <= 15) as (hi, lo): hi * 2**16 + lo."""
    return (v >> 16) << t, (v & 0xFFFF) << t


def _round_joined(hi, lo, g, F2: int):
    """``X = (hi * 2**16 + lo) * 2**g`` (hi, lo int32, lo >= 0) floored to ``F2`` fraction
    bits below its leading bit (grid at least ``2**(-126 - F2)``), then rounded to nearest
    even into f32 -> (f32 bits without the zero rule, X == 0, X < 0)."""
    hi = hi + (lo >> 16)
    lo = lo & 0xFFFF
    neg = hi < 0
    mh = jnp.where(neg, jnp.where(lo > 0, -hi - 1, -hi), hi).astype(_U)
    ml = jnp.where(neg & (lo > 0), 0x10000 - lo, lo).astype(_U)
    n = jnp.where(mh > 0, 16 + softfloat.bitlen(mh), softfloat.bitlen(ml))
    lead = g + n - 1
    G = jnp.maximum(lead - F2, _EMIN_F32 - F2)  # the floor's grid
    k = G - g  # bits dropped (<= 16 here)
    kk = jnp.clip(k, 0, 16).astype(_U)
    full = (mh << 16) | ml  # exact where k <= 0 (then the value has <= 32 bits)
    part = (mh << (16 - kk)) | (ml >> kk)
    lost = (ml & ((_U(1) << kk) - 1)) != 0
    r = jnp.where(k > 0, part, full << jnp.clip(-k, 0, 31).astype(_U))
    G = jnp.where(k > 0, G, g - jnp.clip(-k, 0, 31))
    lost = (k > 0) & lost
    up = neg & lost  # floor of a negative value: its magnitude rounds up
    r2 = r + up.astype(_U)
    wrap = up & (r2 == 0)
    r2 = jnp.where(wrap, _U(1 << 31), r2)
    G = G + wrap.astype(_I)
    q, qlsb = softfloat.round_sig(r2, G, _EMIN_F32, 23, "rn")
    bits = softfloat.encode_rounded(neg, q, qlsb, "f32")
    return bits, (mh == 0) & (ml == 0), neg


def _trunc_group(a, b, c, dp: MfmaDatapath, split: bool):
    """One group of a ``"trunc"`` / ``"trunc_split"`` datapath: decoded operands, C as
    f32 bits (..., m, n) -> D's bits."""
    F, F2 = dp.alignment_bits, dp.sum_bits
    pneg, psig, plsb, pe, pinf, pnan = _products(a, b)
    plead = plsb + softfloat.bitlen(psig) - 1
    over = (psig != 0) & (plead >= 128)  # beyond f32's range: an infinity
    pinf = pinf | over
    psig = jnp.where(over, 0, psig)
    if split:
        de, ee = _trunc_sum(pneg[..., 0::2], psig[..., 0::2], plsb[..., 0::2],
                            pe[..., 0::2], F)
        do, eo = _trunc_sum(pneg[..., 1::2], psig[..., 1::2], plsb[..., 1::2],
                            pe[..., 1::2], F)
        edot = jnp.maximum(ee, eo)
        d = _floor_shift(de, edot - ee) + _floor_shift(do, edot - eo)
    else:
        d, edot = _trunc_sum(pneg, psig, plsb, pe, F)
    cn, cs, cl, ce, ci, cq = _decode(c, "f32")
    # C's exponent: a zero's is f32's minimum normal one; an inf's or NaN's is -1 (the
    # exponent MMA-Sim's frexp gives them).
    ec = jnp.where(ci | cq, -1, jnp.where(cs == 0, _EMIN_F32, ce))
    J = jnp.maximum(edot, ec)
    s1 = edot - J + (F2 + 1 - F)
    d = jnp.where(s1 >= 0, d, _floor_shift(d, -s1))
    lsb_d = jnp.where(s1 >= 0, edot - F, J - F2 - 1)
    csig = _signed(cn, cs)
    s2 = cl - (J - F)
    csig = jnp.where(s2 >= 0, csig, _floor_shift(csig, -s2))
    lsb_c = jnp.where(s2 >= 0, cl, J - F)
    if split:  # a C far below the products is dropped (an inf or NaN one too)
        gone = ec < J - F - 1
        csig = jnp.where(gone, 0, csig)
        ci, cq = ci & ~gone, cq & ~gone
    hd, ld = _hi_lo(d, 0)
    hc, lc = _hi_lo(csig, jnp.clip(lsb_c - lsb_d, 0, 15))
    bits, zero, _ = _round_joined(hd + hc, ld + lc, lsb_d, F2)
    bits = jnp.where(zero, _U(0), bits)  # an exact zero sum is +0
    ppos = jnp.any(pinf & ~pneg, axis=-1) | (ci & ~cn)
    pmin = jnp.any(pinf & pneg, axis=-1) | (ci & cn)
    nan = jnp.any(pnan, axis=-1) | cq | (ppos & pmin)
    bits = jnp.where(ppos, _U(0x7F800000), jnp.where(pmin, _U(0xFF800000), bits))
    return jnp.where(nan, _U(F32_NAN), bits)


# --------------------------------------------------------------------------------------
# "exact": the group's products and C summed exactly, rounded once.

_LIMBS = 12  # 16-bit limbs: a 192-bit window below the largest term


def _window_sum(neg, sig, lsb, g):
    """Terms (last axis; int32 ``sig`` below 2**24, 0 for an unused term) summed in a
    192-bit window of 16-bit limbs whose bit 1 is ``2**(g + 1)`` (g: (..., 1)) and whose
    bit 0 is a sticky bit: a term's bits below bit 1 are floored away (toward -inf, so
    that the exact sum lies above the window's) and bit 0 says whether any were. ->
    (f32 bits rounded to nearest even, the window's sum is zero)."""
    shape = sig.shape[:-1]
    o = lsb - g
    drop = jnp.clip(1 - o, 0, 31)
    gone = jnp.where(1 - o >= 31, sig != 0, (sig & ((1 << drop) - 1)) != 0)
    kept = (sig >> drop) + (neg & gone).astype(_I)
    at = jnp.maximum(o, 1)
    j16 = 16 * jnp.arange(_LIMBS, dtype=_I)
    parts = softfloat.shift(kept[..., None], at[..., None] - j16) & 0xFFFF  # (.., T, L)
    sums = jnp.sum(_signed(neg[..., None], parts), axis=-2)
    limbs = [sums[..., j] for j in range(_LIMBS)]
    limbs[0] = limbs[0] + jnp.any(gone, axis=-1).astype(_I)

    def normalized(ls):
        out, carry = [], jnp.zeros(shape, _I)
        for x in ls:
            x = x + carry
            carry = x >> 16
            out.append(x & 0xFFFF)
        return out, carry  # carry: the sign (0 or -1)

    pos, sgn = normalized(limbs)
    negl, _ = normalized([-x for x in limbs])
    neg = sgn < 0
    mag = jnp.stack([jnp.where(neg, y, x) for x, y in zip(pos, negl, strict=True)], -1)
    mag = mag.astype(_U)
    nz = mag != 0
    J = jnp.max(jnp.where(nz, jnp.arange(_LIMBS, dtype=_I), -1), axis=-1)
    padded = jnp.concatenate([jnp.zeros(shape + (2,), _U), mag], -1)

    def limb(i):  # limb i (i >= -2; below 0: zero)
        return jnp.take_along_axis(padded, (i + 2)[..., None], -1)[..., 0]

    Jc = jnp.maximum(J, 0)
    l0, l1, l2 = limb(Jc), limb(Jc - 1), limb(Jc - 2)
    bl = softfloat.bitlen(l0)
    sb = bl.astype(_U)
    r = (l0 << (32 - sb)) | (l1 << (16 - sb)) | (l2 >> jnp.clip(sb, 0, 16))
    below = jnp.cumsum(nz.astype(_I), axis=-1) - nz.astype(_I)  # nonzero limbs below i
    under = jnp.take_along_axis(jnp.concatenate([jnp.zeros(shape + (2,), _I), below], -1),
                                (Jc)[..., None], -1)[..., 0] > 0  # below limb J - 2
    sticky = ((l2 & ((_U(1) << sb) - 1)) != 0) | under
    gr = g[..., 0] + 16 * Jc + bl - 32
    q, qlsb = softfloat.round_sig(r | sticky.astype(_U), gr, _EMIN_F32, 23, "rn")
    bits = softfloat.encode_rounded(neg, q, qlsb, "f32")
    return jnp.where(J < 0, _U(0), bits), J < 0  # an exact zero sum is +0


def _top(sig, lsb):
    lead = jnp.where(sig != 0, lsb + softfloat.bitlen(sig) - 1, softfloat.NEG_BIG)
    return jnp.max(lead, axis=-1, keepdims=True) - 16 * _LIMBS + 5  # four spare top bits


class _Special(NamedTuple):
    """A term of MMA-Sim's float64 sum of a group, as far as its specials go."""

    nan: jax.Array
    bits: jax.Array  # the f32 bits of its NaN
    pinf: jax.Array
    ninf: jax.Array


def _sum_special(x: _Special, y: _Special, y_first: bool) -> _Special:
    """``x + y`` on the host: a NaN operand's NaN (``y``'s first if ``y_first``), the
    default NaN for inf - inf."""
    invalid = (x.pinf & y.ninf) | (x.ninf & y.pinf)
    nan = x.nan | y.nan | invalid
    first, second = (y, x) if y_first else (x, y)
    bits = jnp.where(first.nan, first.bits, jnp.where(second.nan, second.bits,
                                                      _U(0xFFC00000)))
    return _Special(nan, bits, (x.pinf | y.pinf) & ~nan, (x.ninf | y.ninf) & ~nan)


def _exact_nan_bits(terms: list[_Special]) -> jax.Array:
    """The NaN MMA-Sim's group sum gives: its float64 sum over the group's products and C
    (torch's reduction order on the host: in order for 3 terms; for 5, partial sums of
    the first four with the fifth added to the first, then the partial sums combined),
    each addition passing on a NaN operand's payload."""
    if len(terms) == 5:
        acc0 = _sum_special(terms[0], terms[4], y_first=False)
        for t in terms[1:4]:
            acc0 = _sum_special(acc0, t, y_first=True)
        return acc0.bits
    acc = terms[0]
    for t in terms[1:]:
        acc = _sum_special(acc, t, y_first=False)
    return acc.bits


def _exact_group(a, b, c, a_fmt: str, b_fmt: str, a_bits, b_bits):
    pneg, psig, plsb, _, pinf, pnan = _products(a, b)
    cn, cs, cl, _, ci, cq = _decode(c, "f32")
    shape = jnp.broadcast_shapes(psig.shape[:-1], cs.shape)
    # A NaN product: b's NaN, else a's (quieted), else the default NaN (0 * inf).
    pbits = _nan_of(_f32_nan_bits(b_bits, b_fmt), _f32_nan_bits(a_bits, a_fmt), _U(0), False)
    specials = [_Special(*(jnp.broadcast_to(x[..., i], shape) for x in (
        pnan, pbits, pinf & ~pneg, pinf & pneg))) for i in range(psig.shape[-1])]
    specials.append(_Special(cq, c | _U(1 << 22), ci & ~cn, ci & cn))
    nan_bits = _exact_nan_bits(specials)

    def terms(p, x):  # the products and C along a last axis
        return jnp.concatenate([jnp.broadcast_to(p, shape + p.shape[-1:]),
                                jnp.broadcast_to(x, shape)[..., None]], -1)

    neg, sig, lsb = terms(pneg, cn), terms(psig, cs), terms(plsb, cl)
    g = _top(sig, lsb)
    bits, _ = _window_sum(neg, sig, lsb, g)
    # Where the terms inside the window cancel exactly, the sum is that of the terms that
    # lose bits below it: summed again in a window of their own.
    low = (lsb - g < 1) & (sig != 0)
    _, high_zero = _window_sum(neg, jnp.where(low, 0, sig), lsb, g)
    sig_low = jnp.where(low, sig, 0)
    low_bits, _ = _window_sum(neg, sig_low, lsb, _top(sig_low, lsb))
    bits = jnp.where(high_zero & jnp.any(low, axis=-1), low_bits, bits)
    ppos = jnp.any(pinf & ~pneg, axis=-1) | (ci & ~cn)
    pmin = jnp.any(pinf & pneg, axis=-1) | (ci & cn)
    nan = jnp.any(pnan, axis=-1) | cq | (ppos & pmin)
    bits = jnp.where(ppos, _U(0x7F800000), jnp.where(pmin, _U(0xFF800000), bits))
    return jnp.where(nan, nan_bits, bits)


# --------------------------------------------------------------------------------------
# "ftz_chain": f32 products and additions, flushed to zero below the normal range.


def _flush(bits, keep_sign: bool):
    tiny = (bits & _U(0x7FFFFFFF)) < _U(0x00800000)
    return jnp.where(tiny, bits & _U(1 << 31) if keep_sign else _U(0), bits)


def _add(x, y):
    s = softfloat.add_rn(softfloat.term(x, "f32"), softfloat.term(y, "f32"), "f32", F32_NAN)
    s = jnp.where(_is_nan(s, False), _nan_of(y, x, _U(0), False), s)  # y's NaN first
    return _flush(s, True)


def _f32_nan_bits(bits, fmt: str):
    """f16 / bf16 bits -> the f32 bits of the same NaN (payload shifted up); not NaN:
    bits that are not NaN either."""
    if fmt == "bf16":
        return bits << 16
    nan = (bits & _U(0x7FFF)) > _U(0x7C00)
    return jnp.where(nan, ((bits & _U(0x8000)) << 16) | _U(0x7F800000)
                     | ((bits & _U(0x3FF)) << 13), _U(0))


def _ftz_operand(d, fmt: str):
    """An operand with its format's subnormals (and -0) read as +0."""
    neg, sig, lsb, e, inf, nan = d
    del e
    tiny = (sig != 0) & (lsb + softfloat.bitlen(sig) - 1 < softfloat.emin(fmt))
    zero = tiny | ((sig == 0) & ~inf & ~nan)
    return (neg & ~zero, jnp.where(tiny, 0, sig), lsb, lsb, inf, nan)


def _ftz_group(a, b, c, P: int, a_fmt: str, b_fmt: str, a_bits, b_bits):
    neg, sig, lsb, _, inf, nan = _products(_ftz_operand(a, a_fmt), _ftz_operand(b, b_fmt))
    q, qlsb = softfloat.round_sig(sig.astype(_U), lsb, _EMIN_F32, 23, "rn")
    p = softfloat.encode_rounded(neg, q, qlsb, "f32")
    p = jnp.where(inf, (neg.astype(_U) << 31) | _U(0x7F800000), p)
    # A NaN product: b's NaN, else a's, quieted; else the default NaN (as MMA-Sim's host).
    pnan = _nan_of(_f32_nan_bits(b_bits, b_fmt), _f32_nan_bits(a_bits, a_fmt), _U(0), False)
    p = _flush(jnp.where(nan, pnan, p), True)
    for i in range(0, p.shape[-1], P):
        s = _add(p[..., i], p[..., i + 1])
        if P == 4:
            s = _add(s, _add(p[..., i + 2], p[..., i + 3]))
        c = _add(c, s)
    return c


# --------------------------------------------------------------------------------------
# "fma": IEEE fma chains, with the NaN of x86's fused multiply-add.


def _is_nan(x, f64: bool):
    if f64:
        return (x & jnp.uint64(0x7FFFFFFFFFFFFFFF)) > jnp.uint64(0x7FF0000000000000)
    return (x & _U(0x7FFFFFFF)) > _U(0x7F800000)


def _nan_of(a, b, c, f64: bool):
    """The NaN an x86 fma(a, b, c) gives: the first NaN operand of a, b, c, quieted; the
    default NaN (negative, quiet) for an invalid operation (0 * inf, inf - inf). MMA-Sim's
    fma chains run on its host, so their NaN bits are these."""
    quiet = jnp.uint64(1 << 51) if f64 else _U(1 << 22)
    default = jnp.uint64(0xFFF8000000000000) if f64 else _U(0xFFC00000)
    out = jnp.where(_is_nan(c, f64), c | quiet, default)
    out = jnp.where(_is_nan(b, f64), b | quiet, out)
    return jnp.where(_is_nan(a, f64), a | quiet, out)


def _fma_chain(a, b, c, f64: bool):
    d = c
    for i in range(a.shape[-1]):
        ak, bk = a[..., :, i:i + 1], b[..., i:i + 1, :]
        if f64:
            f = functools.partial(lax.bitcast_convert_type, new_dtype=jnp.float64)
            r = lax.bitcast_convert_type(datapath_f64.mma_f64_exact(f(ak), f(bk), f(d)),
                                         jnp.uint64)
        else:
            r = bitops.to_u32(tensor_scale.fma_rn(bitops.from_u32(ak, jnp.float32),
                                                  bitops.from_u32(bk, jnp.float32),
                                                  bitops.from_u32(d, jnp.float32)))
        d = jnp.where(_is_nan(r, f64), _nan_of(ak, bk, d, f64), r)
    return d


# --------------------------------------------------------------------------------------
# The entry point.


def _groups(x, L: int, axis: int):
    """k at ``axis`` cut into groups of L -> list of arrays with k (L) last."""
    x = jnp.moveaxis(x, axis, -1)
    return [x[..., i:i + L] for i in range(0, x.shape[-1], L)]


@functools.partial(jax.jit, static_argnums=(3, 4, 5))
def _mfma_bits(a, b, c, a_fmt: str, b_fmt: str, dp: MfmaDatapath):
    k = a.shape[-1]
    if dp.kind == "fma":
        return _fma_chain(a, b, c, a_fmt == "f64")
    a, b = a.astype(_U), b.astype(_U)
    d = c
    L = min(k, dp.group) if dp.kind != "ftz_chain" else k
    for ga, gb in zip(_groups(a, L, -1), _groups(b, L, -2), strict=True):
        da = tuple(x[..., :, None, :] for x in _decode(ga, a_fmt))
        db = tuple(x[..., None, :, :] for x in _decode(gb, b_fmt))
        if dp.kind == "exact":
            d = _exact_group(da, db, d, a_fmt, b_fmt, ga[..., :, None, :], gb[..., None, :, :])
        elif dp.kind == "ftz_chain":
            d = _ftz_group(da, db, _flush(d, False), dp.group, a_fmt, b_fmt,
                           ga[..., :, None, :], gb[..., None, :, :])
        else:
            d = _trunc_group(da, db, d, dp, dp.kind == "trunc_split")
    return d


def mfma_bits(a: jax.Array, b: jax.Array, c: jax.Array, a_format: str, b_format: str,
              datapath: MfmaDatapath) -> jax.Array:
    """One MFMA block on bits: ``a`` (..., M, K) and ``b`` (..., K, N) unsigned bit
    patterns of ``a_format`` / ``b_format`` (f64, f32, tf32 (the whole f32 word), f16,
    bf16, e4m3fnuz, e5m2fnuz), ``c`` (..., M, N) f32 bits (uint32) or f64 bits (uint64)
    -> D's bits, the same dtype as ``c``. The caller checks shapes and formats
    (``instructions/mfma.py``)."""
    if a_format == "f64":
        return _mfma_bits(a, b, c, a_format, b_format, datapath)
    return _mfma_bits(a.astype(_U), b.astype(_U), c.astype(_U), a_format, b_format, datapath)
