"""Soft float: decoding, rounding and encoding float bit patterns with integer operations.

The one rounding engine of jaxwarp, shared by the conversions (``convert.py``,
``fp8.py``) and the tensor-core arithmetic (``tensorcore/datapath.py``). Everything works
on uint32 / int32 arrays, or on uint64 / int64 for float64 bit patterns (which needs
``jax_enable_x64``; fma64 too), never on XLA floats, which may flush subnormals and do not
keep NaN bits; the one exception, :func:`fma64_native`, says for which operands its float64
result is exact.

A finite value is held as ``(-1)**neg * sig * 2**lsb`` with an integer significand ``sig``
and the exponent ``lsb`` of its last bit:

* :func:`decode`: bits of a format -> ``(neg, lsb, sig, lead, inf, nan)``;
* :func:`round_sig`: ``mag * 2**g`` -> a significand of ``mbits`` fraction bits on the grid
  of a format with minimum normal exponent ``emin`` (subnormals below), ``"rz"``, ``"rn"``
  (ties to even) or ``"rna"`` (ties away);
* :func:`encode`: ``(neg, q, lsb)`` -> bits of a format;
* :func:`add_rn`: IEEE addition of two decoded terms (:class:`Term`), to nearest even;
* :func:`fma64`: IEEE binary64 fused multiply-add on uint64 bit patterns;
* :func:`fma64_native`: the same from native float64 operations where they are exact.

Format facts (exponent and fraction bits, storage width, the low bits tf32 ignores, whether
the format has infinities) come from :data:`~jaxwarp._src.numerics.formats.FORMATS`.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxwarp._src.numerics.formats import get_format

__all__ = [
    "DECODE_FORMATS",
    "NATIVE_ACC_RANGE",
    "NATIVE_OPERAND_RANGE",
    "NEG_BIG",
    "ROUNDINGS",
    "Term",
    "add_rn",
    "bitlen",
    "decode",
    "emin",
    "encode",
    "encode_rounded",
    "fma64",
    "fma64_native",
    "lsb_min",
    "native_acc_ok",
    "native_operand_ok",
    "native_result_ok",
    "round_sig",
    "shift",
    "term",
]

#: "Exponent" of a zero term: below any real one.
NEG_BIG = -(1 << 20)

#: Formats :func:`decode` and :func:`encode` read: uint32 bit patterns, and uint64 for f64
#: (every float format of the registry; the code-stored ones as their codes).
DECODE_FORMATS = ("f64", "f32", "tf32", "bf16", "f16", "e4m3", "e5m2", "e3m2", "e2m3", "e2m1",
                  "ue8m0", "ue4m3")

#: Rounding modes of :func:`round_sig`.
ROUNDINGS = ("rz", "rn", "rna")


class _Facts(NamedTuple):
    eb: int  # exponent bits
    mb: int  # fraction bits
    width: int  # width of the raw pattern in bits (storage word, or code: 4 for e2m1)
    ign: int  # low storage bits the format ignores (13 for tf32)
    fn: bool  # "fn": no infinities; a NaN (if any) is the all-ones magnitude
    signed: bool  # a sign bit at width - 1 (ue8m0, ue4m3 have none)
    nan: bool  # the format has a NaN (e2m1, e2m3, e3m2 have none)
    sub: bool  # exponent field 0 is subnormal (ue8m0: the normal 2**-127)
    code: bool  # the raw pattern is a code in the low bits of its byte


@functools.cache
def _facts(fmt: str) -> _Facts:
    f = get_format(fmt, "fmt", DECODE_FORMATS)
    return _Facts(f.exponent_bits, f.mantissa_bits, f.code_bits, f.ignored_bits,
                  not f.has_inf, f.signed, f.has_nan, f.has_subnormals, f.code_storage)


def emin(fmt: str) -> int:
    """The minimum normal exponent of a format.

    Example:
      >>> emin("f16"), emin("e4m3"), emin("e2m1"), emin("ue8m0")
      (-14, -6, 0, -127)
    """
    return get_format(fmt, "fmt", DECODE_FORMATS).min_exponent


def lsb_min(fmt: str) -> int:
    """The exponent of a format's smallest subnormal (ue8m0: of its smallest value).

    Example:
      >>> lsb_min("f16"), lsb_min("tf32"), lsb_min("e2m1")
      (-24, -136, -1)
    """
    return emin(fmt) - _facts(fmt).mb


def _i32(x):
    return jnp.asarray(x, jnp.int32)


# The unsigned and signed integer dtypes of a 32- or 64-bit word.
_UINT = {32: jnp.uint32, 64: jnp.uint64}
_INT = {32: jnp.int32, 64: jnp.int64}


def bitlen(x: jax.Array) -> jax.Array:
    """Bit length of a non-negative integer array (int32; 0 for 0): 32-bit inputs, or
    64-bit ones (int64 / uint64, with x64).

    Example:
      >>> import jax.numpy as jnp
      >>> bitlen(jnp.array([0, 1, 5, 2**31], jnp.uint32))
      Array([ 0,  1,  3, 32], dtype=int32)
    """
    width = 64 if x.dtype.itemsize == 8 else 32
    return (width - lax.clz(x.astype(_UINT[width]))).astype(jnp.int32)


def shift(x: jax.Array, s: jax.Array) -> jax.Array:
    """``x * 2**s`` on non-negative int32 ``x``, truncating; ``s`` may be any int32.

    Example:
      >>> import jax.numpy as jnp
      >>> shift(jnp.int32(5), jnp.array([2, -1, -40], jnp.int32))
      Array([20,  2,  0], dtype=int32)
    """
    left = x << jnp.clip(s, 0, 31)
    right = jnp.where(s <= -32, 0, x >> jnp.clip(-s, 0, 31))
    return jnp.where(s >= 0, left, right)


def decode(bits: jax.Array, fmt: str, sub_emin: bool = False):
    """Bits of a float format -> ``(neg, lsb, sig, lead, inf, nan)``.

    ``value = (-1)**neg * sig * 2**lsb`` (``sig`` 0 for zero, inf and NaN);
    ``lead`` is the exponent of sig's top bit (:data:`NEG_BIG` for zero, inf and NaN), or
    with ``sub_emin`` for a subnormal the format's minimum normal exponent. tf32 ignores
    the low 13 bits of its word; e4m3 and ue4m3 have no infinity and one NaN magnitude;
    e3m2, e2m3 and e2m1 have neither (every code is a number); ue8m0 has no sign, no
    zero and no subnormals (code 0 is ``2**-127``) and its NaN is 0xFF. A code-stored
    format (``Format.code_storage``) is read from the low bits of ``bits`` (4 for e2m1, 6
    for e2m3 / e3m2, 7 for ue4m3, whose bit 7 is ignored, as MMA-Sim does); higher
    bits are ignored. An unsigned format's ``neg`` is False.

    Args:
      bits: uint32 array of bit patterns (zero-extended); uint64 for ``"f64"`` (x64 on).
      fmt: static, one of :data:`DECODE_FORMATS`.
      sub_emin: static; a subnormal's ``lead`` is the minimum normal exponent.

    Returns:
      bool ``neg``, int32 ``lsb``, ``sig`` (int32; int64 for f64), int32 ``lead``, bool
      ``inf`` and ``nan``.

    Example:
      >>> import jax.numpy as jnp
      >>> neg, lsb, sig, lead, inf, nan = decode(jnp.uint32(0xBE00), "f16")  # -1.5
      >>> bool(neg), int(lsb), int(sig), int(lead)
      (True, -10, 1536, 0)
      >>> [bool(v) for v in decode(jnp.uint32(0x7F), "e4m3")[4:]]  # (inf, nan)
      [False, True]
      >>> [int(v) for v in decode(jnp.uint32(0xF), "e2m1")[:4]]  # -6 = -3 * 2**1
      [1, 1, 3, 2]
    """
    eb, mb, width, ign, fn, signed, has_nan, sub, _ = _facts(fmt)
    word = 64 if width == 64 else 32
    rawmb = mb + ign
    bias = (1 << (eb - 1)) - 1
    emax = (1 << eb) - 1
    if signed:
        neg = ((bits >> (width - 1)) & 1).astype(jnp.bool_)
    else:
        neg = jnp.zeros(jnp.shape(bits), jnp.bool_)
    e = _i32((bits >> rawmb) & emax)
    f = jnp.asarray(bits & ((1 << rawmb) - 1), _INT[word]) >> ign
    if fn:  # no infinities; the all-ones magnitude is the NaN, if the format has one
        nan = (e == emax) & (f == (1 << mb) - 1) & has_nan
        inf = jnp.zeros_like(nan)
        special = nan
    else:
        special = e == emax
        inf = special & (f == 0)
        nan = special & (f != 0)
    if sub:
        sig = jnp.where(special, 0, jnp.where(e == 0, f, f | (1 << mb)))
        lsb = jnp.where(e == 0, 1 - bias - mb, e - bias - mb)
    else:  # ue8m0: every exponent field (but the NaN) is a normal power of two
        sig = jnp.where(special, 0, f | (1 << mb))
        lsb = e - bias - mb
    lead = jnp.where(sig == 0, NEG_BIG, lsb + bitlen(sig) - 1)
    if sub_emin and sub:
        lead = jnp.where((e == 0) & (sig != 0), 1 - bias, lead)
    return neg, lsb, sig, lead, inf, nan


def round_sig(mag: jax.Array, g: jax.Array, emin: int, mbits: int, mode: str):
    """``mag * 2**g`` (``mag`` unsigned) rounded to a significand of ``mbits`` fraction
    bits with exponents down to ``emin`` (subnormals below), in one rounding.

    Args:
      mag: uint32 magnitudes, or uint64 ones (x64 on: a float64 significand).
      g: int32 exponent of mag's last bit.
      emin: static minimum normal exponent of the target grid.
      mbits: static fraction bits of the target grid.
      mode: static ``"rz"`` (toward zero), ``"rn"`` (to nearest, ties to even) or
        ``"rna"`` (to nearest, ties away from zero).

    Returns:
      ``(q, lsb)``: ``q < 2**(mbits + 1)`` of mag's dtype and int32 ``lsb``, the value
      ``q * 2**lsb``; a carry into a new binade is folded into ``lsb``. The exponent is not
      bounded above: overflow is the caller's (or :func:`encode`'s) business.

    Example:
      >>> import jax.numpy as jnp
      >>> [tuple(int(v) for v in round_sig(jnp.uint32(0b10110), jnp.int32(0), -126, 2, m))
      ...  for m in ("rz", "rn", "rna")]  # 22 = 101.10b * 4: a tie
      [(5, 2), (6, 2), (6, 2)]
    """
    if mode not in ROUNDINGS:
        raise ValueError(f"mode must be one of {ROUNDINGS}, got {mode!r}")
    width = 64 if mag.dtype.itemsize == 8 else 32
    ut = _UINT[width]
    n = bitlen(mag)
    lsb = jnp.maximum(g + n - 1 - mbits, emin - mbits)
    sh = lsb - g
    shc = jnp.clip(sh, 0, width - 1).astype(ut)
    q = jnp.where(sh >= width, ut(0),
                  jnp.where(sh >= 0, mag >> shc,
                            mag << jnp.clip(-sh, 0, width - 1).astype(ut)))
    if mode in ("rn", "rna"):
        rem = jnp.where(sh >= width, mag,
                        jnp.where(sh > 0, mag & ((ut(1) << shc) - 1), 0))
        half = jnp.where(sh > width, ut((1 << width) - 1),
                         jnp.where(sh > 0, ut(1) << jnp.clip(sh - 1, 0, width - 1)
                                   .astype(ut), 0))
        if mode == "rn":
            up = (sh > 0) & ((rem > half) | ((rem == half) & ((q & 1) == 1)))
        else:  # beyond `width` dropped bits the half is 2**width or more: never reached
            up = (sh > 0) & (sh <= width) & (rem >= half)
        q = q + up.astype(ut)
        carry = q >= (1 << (mbits + 1))
        q = jnp.where(carry, q >> 1, q)
        lsb = lsb + carry.astype(jnp.int32)
    return q, lsb


def encode(neg: jax.Array, q: jax.Array, lsb: jax.Array, fmt: str) -> jax.Array:
    """Bits of ``(-1)**neg * q * 2**lsb`` in a format (uint32; uint64 for f64).

    The value must be on the format's grid (as :func:`round_sig` leaves it). Beyond the
    largest exponent it becomes inf in a format with infinities; for the formats without
    (e4m3, ue4m3, e3m2, e2m3, e2m1, ue8m0) the caller must handle values above their
    largest finite one. Zeros keep their sign. For an unsigned format (ue8m0, ue4m3)
    ``neg`` is ignored, and ue8m0's zero (which it cannot hold) is the caller's too:
    a ``q`` of 0 gives code 0.

    Args:
      neg: bool signs.
      q: unsigned significands (uint32; uint64 for f64).
      lsb: int32 exponents of q's last bit.
      fmt: static, one of :data:`DECODE_FORMATS` (tf32 is encoded in its 19 bits).

    Example:
      >>> import jax.numpy as jnp
      >>> hex(int(encode(jnp.bool_(True), jnp.uint32(3), jnp.int32(-1), "f16")))  # -1.5
      '0xbe00'
      >>> hex(int(encode(jnp.bool_(False), jnp.uint32(1), jnp.int32(-24), "f16")))
      '0x1'
    """
    eb, mb, width, _, fn, signed, _, _, _ = _facts(fmt)
    word = 64 if width == 64 else 32
    ut = _UINT[word]
    q = q.astype(ut)
    bias = (1 << (eb - 1)) - 1
    lo = emin(fmt)
    n = bitlen(q)
    lead = lsb + n - 1
    normal = lead >= lo
    field = lead + bias
    s = mb - (n - 1)
    frac = jnp.where(s >= 0, q << jnp.clip(s, 0, word - 1).astype(ut),
                     q >> jnp.clip(-s, 0, word - 1).astype(ut)) & ((1 << mb) - 1)
    sub = q << jnp.clip(lsb - (lo - mb), 0, word - 1).astype(ut)
    out = jnp.where(normal, (field.astype(ut) << mb) | frac, sub)
    if not fn:
        inf = ut(((1 << eb) - 1) << mb)
        out = jnp.where(normal & (field >= (1 << eb) - 1), inf, out)
    out = jnp.where(q == 0, ut(0), out)
    return out | (neg.astype(ut) << (eb + mb)) if signed else out


def encode_rounded(neg: jax.Array, q: jax.Array, lsb: jax.Array, fmt: str) -> jax.Array:
    """:func:`encode` for what ``round_sig(..., emin(fmt), mbits of fmt, mode)`` returns:
    ``q`` is then a subnormal's significand at ``lsb == lsb_min(fmt)`` or a normal one of
    ``mbits + 1`` bits, so the bits are ``((lsb - lsb_min) << mbits) + q`` (cheaper).

    Above the largest exponent the result is inf in a format with infinities; for e4m3 the
    caller must handle values above 448, and every format's caller what :func:`encode`
    leaves to it (ue8m0's zero, signs of unsigned formats).

    Example:
      >>> import jax.numpy as jnp
      >>> q, lsb = round_sig(jnp.uint32(3), jnp.int32(-1), emin("f16"), 10, "rn")  # 1.5
      >>> hex(int(encode_rounded(jnp.bool_(True), q, lsb, "f16")))
      '0xbe00'
    """
    eb, mb, _, _, fn, signed, _, sub, _ = _facts(fmt)
    code = ((lsb - lsb_min(fmt)).astype(jnp.uint32) << mb) + q
    if not sub:  # no subnormals: the hidden bit is not part of the code (ue8m0)
        code = code - jnp.uint32(1 << mb)
    if not fn:
        code = jnp.minimum(code, jnp.uint32(((1 << eb) - 1) << mb))
    code = jnp.where(q == 0, jnp.uint32(0), code)
    return code | (neg.astype(jnp.uint32) << (eb + mb)) if signed else code


class Term(NamedTuple):
    """A decoded operand of an addition: value ``(-1)**neg * sig * 2**lsb``, alignment
    exponent ``lead``; specials; ``negzero``: it is a zero of negative sign."""

    neg: jax.Array
    lsb: jax.Array
    sig: jax.Array
    lead: jax.Array
    nan: jax.Array
    pinf: jax.Array
    ninf: jax.Array
    negzero: jax.Array


def term(bits: jax.Array, fmt: str, sub_emin: bool = False) -> Term:
    """Bits (uint32) of a format -> a :class:`Term` (see :func:`decode`).

    Example:
      >>> import jax.numpy as jnp
      >>> t = term(jnp.uint32(0x80000000), "f32")
      >>> bool(t.negzero), int(t.sig)
      (True, 0)
    """
    neg, lsb, sig, lead, inf, nan = decode(bits, fmt, sub_emin)
    return Term(neg, lsb, sig, lead, nan, inf & ~neg, inf & neg,
                neg & (sig == 0) & ~inf & ~nan)


def add_rn(x: Term, y: Term, out: str, nan_bits: int) -> jax.Array:
    """IEEE ``x + y`` rounded to nearest even into ``out`` (``"f32"``/``"f16"``) bits.

    On integers (XLA's fp32 addition on CPU flushes subnormals). Both terms are aligned on
    the grid ``2**(E - 26)``, E the larger leading exponent; a smaller term loses bits
    only when the exponents are 3 or more apart, and then its floor plus a sticky bit
    (round to odd) keeps the nearest-even rounding to 24 bits exact. An exact zero sum is
    +0 unless both are -0; a NaN result is ``nan_bits``.

    Example:
      >>> import jax.numpy as jnp
      >>> one, tiny = term(jnp.uint32(0x3F800000), "f32"), term(jnp.uint32(1), "f32")
      >>> hex(int(add_rn(one, one, "f32", 0x7FFFFFFF))), hex(int(add_rn(tiny, tiny, "f32", 0)))
      ('0x40000000', '0x2')
    """
    lx = jnp.where(x.sig == 0, NEG_BIG, x.lsb + bitlen(x.sig) - 1)
    ly = jnp.where(y.sig == 0, NEG_BIG, y.lsb + bitlen(y.sig) - 1)
    g = jnp.maximum(lx, ly) - 26

    def aligned(t):
        sh = t.lsb - g
        v = jnp.where(t.neg, -t.sig, t.sig)
        left = v << jnp.clip(sh, 0, 31)
        right = v >> jnp.clip(-sh, 0, 31)  # arithmetic: floor
        lost = (t.sig & ((1 << jnp.clip(-sh, 0, 30)) - 1)) != 0
        lost = jnp.where(sh <= -31, t.sig != 0, lost)
        return jnp.where(sh >= 0, left, right), (sh < 0) & lost

    vx, sx = aligned(x)
    vy, sy = aligned(y)
    s = (vx + vy) | (sx | sy).astype(jnp.int32)
    neg = s < 0
    mag = jnp.abs(s).astype(jnp.uint32)
    eb, mb = _facts(out).eb, _facts(out).mb
    q, lsb = round_sig(mag, g, emin(out), mb, "rn")
    bits = encode(neg, q, lsb, out)
    sign = 1 << (eb + mb)
    bits = jnp.where(s == 0, jnp.where(x.negzero & y.negzero, jnp.uint32(sign), 0), bits)
    inf_bits = ((1 << eb) - 1) << mb
    pinf, ninf = x.pinf | y.pinf, x.ninf | y.ninf
    bits = jnp.where(pinf, jnp.uint32(inf_bits), bits)
    bits = jnp.where(ninf, jnp.uint32(inf_bits | sign), bits)
    nan = x.nan | y.nan | (pinf & ninf)
    return jnp.where(nan, jnp.uint32(nan_bits), bits)


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
