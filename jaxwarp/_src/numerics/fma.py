"""IEEE binary64 fused multiply-add, two ways: on integers, and from float64 operations.

* :func:`fma64`: ``fma(a, b, c)`` on uint64 bit patterns with 128-bit integer arithmetic on
  (hi, lo) uint64 pairs, round to nearest even; NaN payloads as the H100 returns them.
* :func:`fma64_native`: the same from native float64 operations (error-free
  transformations and rounding to odd), exact for operands and results in the ranges
  :data:`NATIVE_OPERAND_RANGE` / :data:`NATIVE_ACC_RANGE`, which :func:`native_operand_ok`,
  :func:`native_acc_ok` and :func:`native_result_ok` test. It is the one place where
  jaxwarp's arithmetic runs on XLA floats, and it says for which operands that is exact.

Both need ``jax_enable_x64``. The f64 tensor-core datapath (``arithmetic/datapath.py``)
uses :func:`fma64_native` where a whole call is in range and :func:`fma64` otherwise. The
decoded-term conventions are those of ``softfloat.py``, the rounding engine.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxwarp._src.numerics.softfloat import NEG_BIG

__all__ = [
    "NATIVE_ACC_RANGE",
    "NATIVE_OPERAND_RANGE",
    "fma64",
    "fma64_native",
    "native_acc_ok",
    "native_operand_ok",
    "native_result_ok",
]


# --------------------------------------------------------------------------------------
# binary64 fma, with 128-bit integer arithmetic on (hi, lo) uint64 pairs.

_U64 = jnp.uint64


def _sl(x, s):
    return jnp.where((s >= 64) | (s < 0), _U64(0), x << jnp.clip(s, 0, 63).astype(_U64))


def _sr(x, s):
    return jnp.where((s >= 64) | (s < 0), _U64(0), x >> jnp.clip(s, 0, 63).astype(_U64))


def _shl128(hi, lo, s):
    return _sl(hi, s) | _sr(lo, 64 - s) | _sl(lo, s - 64), _sl(lo, s)


def _shr128(hi, lo, s):
    return _sr(hi, s), _sr(lo, s) | _sl(hi, 64 - s) | _sr(hi, s - 64)


def _bitlen64(x):
    return (64 - lax.clz(x)).astype(jnp.int32)


def _bitlen128(hi, lo):
    return jnp.where(hi != 0, 64 + _bitlen64(hi), _bitlen64(lo))


def _low_nonzero128(hi, lo, s):
    """Whether any of the bits below position s (0 <= s) is set."""
    lo_m = jnp.where(s >= 64, ~_U64(0), _sl(_U64(1), s) - 1)
    hi_m = jnp.where(s >= 128, ~_U64(0), jnp.where(s > 64, _sl(_U64(1), s - 64) - 1, _U64(0)))
    return ((lo & lo_m) | (hi & hi_m)) != 0


def _align128(hi, lo, s):
    """(hi, lo) * 2**s: left shift for s >= 0, right shift with a sticky bit otherwise."""
    lh, ll = _shl128(hi, lo, jnp.maximum(s, 0))
    rh, rl = _shr128(hi, lo, jnp.maximum(-s, 0))
    sticky = _low_nonzero128(hi, lo, jnp.maximum(-s, 0)).astype(_U64)
    return jnp.where(s >= 0, lh, rh), jnp.where(s >= 0, ll, rl | sticky)


def _decode64(bits):
    neg = (bits >> 63) != 0
    e = ((bits >> 52) & 0x7FF).astype(jnp.int32)
    f = bits & _U64((1 << 52) - 1)
    sig = jnp.where(e == 0, f, f | _U64(1 << 52))
    lsb = jnp.where(e == 0, 1, e) - 1075
    return neg, e, f, sig, lsb


def fma64(a: jax.Array, b: jax.Array, c: jax.Array) -> jax.Array:
    """IEEE binary64 ``fma(a, b, c)``, round to nearest even, on uint64 bit patterns.

    Needs ``jax_enable_x64``. A NaN operand propagates quieted (B's over C's over A's, as
    the H100 returns them); ``inf - inf`` and ``0 * inf`` give ``0xFFF8000000000000``.
    An exact zero sum is +0 unless both the product and ``c`` are -0.

    Example:
      >>> import jax, numpy as np
      >>> with jax.enable_x64(True):
      ...     u = lambda v: np.float64(v).view(np.uint64)
      ...     r = fma64(u(1 + 2**-30), u(1 - 2**-30), u(-1.0))  # exact: -2**-60
      ...     float(np.uint64(r).view(np.float64)) == -2.0**-60
      True
    """
    an, ae, af, asig, alsb = _decode64(a)
    bn, be, bf, bsig, blsb = _decode64(b)
    cn, ce, cf, csig, clsb = _decode64(c)
    pn = an ^ bn
    # 106-bit product in (hi, lo).
    m32 = _U64(0xFFFFFFFF)
    a0, a1, b0, b1 = asig & m32, asig >> 32, bsig & m32, bsig >> 32
    ll = a0 * b0
    mid = a0 * b1 + a1 * b0
    lo = ll + (mid << 32)
    hi = a1 * b1 + (mid >> 32) + (lo < ll).astype(_U64)
    plsb = alsb + blsb
    pz = (hi == 0) & (lo == 0)
    cz = csig == 0
    plead = jnp.where(pz, NEG_BIG, plsb + _bitlen128(hi, lo) - 1)
    clead = jnp.where(cz, NEG_BIG, clsb + _bitlen64(csig) - 1)
    w = jnp.maximum(plead, clead) + 1 - 126  # exponent of the window's bit 0
    ph, pl = _align128(hi, lo, plsb - w)
    ch, cl = _align128(jnp.zeros_like(csig), csig, clsb - w)
    ph = jnp.where(pz, _U64(0), ph)
    pl = jnp.where(pz, _U64(0), pl)
    # Signed add of magnitudes.
    s_lo = pl + cl
    s_hi = ph + ch + (s_lo < pl).astype(_U64)
    p_ge = (ph > ch) | ((ph == ch) & (pl >= cl))
    xh, xl = jnp.where(p_ge, ph, ch), jnp.where(p_ge, pl, cl)
    yh, yl = jnp.where(p_ge, ch, ph), jnp.where(p_ge, cl, pl)
    d_lo = xl - yl
    d_hi = xh - yh - (xl < yl).astype(_U64)
    same = pn == cn
    mh, ml = jnp.where(same, s_hi, d_hi), jnp.where(same, s_lo, d_lo)
    rneg = jnp.where(same, pn, jnp.where(p_ge, pn, cn))
    # Round (mh, ml) * 2**w to binary64.
    L = _bitlen128(mh, ml)
    r = jnp.maximum(w + L - 1 - 52, -1074)
    sh = r - w
    qh, ql = _shr128(mh, ml, jnp.maximum(sh, 0))
    q = jnp.where(sh >= 0, ql, _sl(ml, -sh))
    rbit = jnp.where(sh >= 1, _shr128(mh, ml, sh - 1)[1] & 1, _U64(0))
    sticky = jnp.where(sh >= 2, _low_nonzero128(mh, ml, sh - 1), False)
    up = (rbit == 1) & (sticky | ((q & 1) == 1))
    q = q + up.astype(_U64)
    carry = q >= _U64(1 << 53)
    q = jnp.where(carry, q >> 1, q)
    r = r + carry.astype(jnp.int32)
    normal = q >= _U64(1 << 52)
    biased = jnp.where(normal, r + 1075, 0)
    mag_bits = jnp.where(normal, (biased.astype(_U64) << 52) | (q & _U64((1 << 52) - 1)), q)
    mag_bits = jnp.where(biased >= 2047, _U64(0x7FF0000000000000), mag_bits)
    zero = (mh == 0) & (ml == 0)
    sign = jnp.where(zero, pz & cz & pn & cn, rneg)  # exact zero: +0 unless -0 + -0
    out = mag_bits | (sign.astype(_U64) << 63)
    # Special operands.
    inf_bits = _U64(0x7FF0000000000000)
    a_inf, a_nan = (ae == 2047) & (af == 0), (ae == 2047) & (af != 0)
    b_inf, b_nan = (be == 2047) & (bf == 0), (be == 2047) & (bf != 0)
    c_inf, c_nan = (ce == 2047) & (cf == 0), (ce == 2047) & (cf != 0)
    a_zero, b_zero = (ae == 0) & (af == 0), (be == 0) & (bf == 0)
    p_inf = (a_inf | b_inf) & ~a_nan & ~b_nan
    invalid = (a_inf & b_zero) | (b_inf & a_zero) | (p_inf & c_inf & (pn != cn))
    out = jnp.where(c_inf, c, out)
    out = jnp.where(p_inf, inf_bits | (pn.astype(_U64) << 63), out)
    out = jnp.where(invalid, _U64(0xFFF8000000000000), out)
    quiet = _U64(1 << 51)
    # NaN operands propagate quieted. Which one: the H100 returned B's NaN over A's
    # (capture_extra_mma, kind nan_payload) and the accumulator's NaN over A's (the
    # fresh mma.sync f64 captures: a chain whose accumulator became a NaN at k1 keeps
    # that payload through a quiet-NaN A at k2); B over C is not separated.
    out = jnp.where(a_nan, a | quiet, out)
    out = jnp.where(c_nan, c | quiet, out)
    out = jnp.where(b_nan, b | quiet, out)
    return out


# --------------------------------------------------------------------------------------
# binary64 fma from native binary64 operations (error-free transformations and rounding
# to odd), for the operand ranges where those transformations are exact.

_SPLIT64 = 134217729.0  # 2**27 + 1: Veltkamp's splitter for 53-bit significands
# The ranges where fma64_native is exact, with margin. Above: Veltkamp's C * x stays finite
# for |x| < 2**995, every sum below 2**1021. Below: XLA's CPU runtime flushes subnormal
# inputs and results to zero, so every intermediate must be a normal number or an exact
# zero: with operand exponents >= -450, Veltkamp's halves (last bit at 2**(e - 52)) and
# Dekker's smallest partial product (last bit at 2**(ea + eb - 104) >= 2**-1004) are
# multiples of 2**-1022, and with an accumulator zero or at least 2**-960 so is every sum
# and error term.
NATIVE_OPERAND_RANGE = (2.0**-450, 2.0**496)  # a, b: zero or min <= |x| < max
NATIVE_ACC_RANGE = (2.0**-960, 2.0**1020)  # c and the result: zero or min <= |x| < max


def _bits_in_range(x, rng):
    """Zero or min <= |x| < max, from float64 x's bits behind an optimization barrier:
    XLA's CPU runtime reads subnormals as zero, and LLVM (assuming IEEE subnormals) turns
    bit tests of a float it can see into float compares, which then say 0 for them."""
    bits = lax.optimization_barrier(lax.bitcast_convert_type(x, jnp.int64))
    mag = bits & jnp.int64(0x7FFFFFFFFFFFFFFF)
    lo, hi = (int(np.float64(v).view(np.int64)) for v in rng)
    return (mag == 0) | ((mag >= lo) & (mag < hi))


def native_operand_ok(x: jax.Array) -> jax.Array:
    """Where float64 ``x`` may be an ``a`` or ``b`` of :func:`fma64_native`."""
    return _bits_in_range(x, NATIVE_OPERAND_RANGE)


def native_acc_ok(x: jax.Array) -> jax.Array:
    """Where float64 ``x`` may be the ``c``, or is a result, of :func:`fma64_native`."""
    return _bits_in_range(x, NATIVE_ACC_RANGE)


def native_result_ok(d: jax.Array) -> jax.Array:
    """:func:`native_acc_ok` for a result of :func:`fma64_native` whose operands were in
    range, with float compares: such a result is zero or a multiple of 2**-1022, never
    subnormal, so a flushing runtime compares it correctly."""
    ad = jnp.abs(d)
    return (d == 0) | ((ad >= NATIVE_ACC_RANGE[0]) & (ad < NATIVE_ACC_RANGE[1]))


def _two_sum(x, y):
    s = x + y
    yy = s - x
    return s, (x - (s - yy)) + (y - yy)


def _split(x):
    t = _SPLIT64 * x
    hi = t - (t - x)
    return hi, x - hi


def _two_prod(x, y):
    p = x * y
    xh, xl = _split(x)
    yh, yl = _split(y)
    return p, ((xh * yh - p) + xh * yl + xl * yh) + xl * yl


def _add_odd(x, y):
    """x + y rounded to odd: truncated, then the last bit set if anything was cut off."""
    s, e = _two_sum(x, y)
    bits = lax.bitcast_convert_type(s, jnp.int64)
    # s even and inexact: the odd neighbour on e's side (one step of the magnitude bits
    # away from zero when e has s's sign, towards zero otherwise).
    step = jnp.where((e > 0) == (s > 0), jnp.int64(1), jnp.int64(-1))
    bits = jnp.where(((bits & 1) == 0) & (e != 0), bits + step, bits)
    return lax.bitcast_convert_type(bits, jnp.float64)


def fma64_native(a: jax.Array, b: jax.Array, c: jax.Array) -> jax.Array:
    """IEEE binary64 ``fma(a, b, c)`` from native float64 operations, exact in a range.

    The result equals :func:`fma64` of the same operands bit for bit where
    :func:`native_operand_ok` holds for ``a`` and ``b`` and :func:`native_acc_ok` for
    ``c`` and for the result (zeros, or magnitudes in ``NATIVE_OPERAND_RANGE`` /
    ``NATIVE_ACC_RANGE``); elsewhere it is meaningless and the caller must use
    :func:`fma64` (NaNs, infinities, subnormals, values near the ends of the range).

    The method is Boldo and Melquiond's emulated FMA ("Emulation of FMA and correctly
    rounded sums: proved algorithms using rounding to odd", IEEE Trans. Computers 57(4),
    2008): the exact product as a pair (Dekker's product with Veltkamp's split), the exact
    sum of ``c`` and the product's high part (Knuth's TwoSum), the two low parts added with
    rounding to odd, and one final addition to nearest. Where the low parts cancel exactly
    the high sum is the result as it is, which keeps IEEE's sign of an exact zero.

    It relies on every multiply and add being rounded on its own (no contraction into
    fused multiply-adds by the compiler), which XLA's CPU and GPU backends keep; the tests
    compare it with :func:`fma64` on both.
    """
    ph, pl = _two_prod(a, b)
    sh, sl = _two_sum(c, ph)
    v = _add_odd(sl, pl)
    # v is a multiple of 2**-1022 in range, so a float compare with zero is exact here.
    return jnp.where(v == 0, sh, sh + v)
