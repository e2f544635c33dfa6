"""Soft float: decoding, rounding and encoding float bit patterns with integer operations.

The one rounding engine of jaxwarp, shared by the conversions (``convert.py``,
``fp8.py``) and the tensor-core arithmetic (``arithmetic/datapath.py``). Everything works
on uint32 / int32 arrays, or on uint64 / int64 for float64 bit patterns (which needs
``jax_enable_x64``), never on XLA floats, which may flush subnormals and do not keep NaN
bits. The binary64 fused multiply-add is in ``fma.py`` (on this module's terms).

A finite value is held as ``(-1)**neg * sig * 2**lsb`` with an integer significand ``sig``
and the exponent ``lsb`` of its last bit:

* :func:`decode`: bits of a format -> ``(neg, lsb, sig, lead, inf, nan)``;
* :func:`round_sig`: ``mag * 2**g`` -> a significand of ``mbits`` fraction bits on the grid
  of a format with minimum normal exponent ``emin`` (subnormals below), ``"rz"``, ``"rn"``
  (ties to even) or ``"rna"`` (ties away);
* :func:`encode`: ``(neg, q, lsb)`` -> bits of a format;
* :func:`add_rn`: IEEE addition of two decoded terms (:class:`Term`), to nearest even.

Format facts (exponent and fraction bits, storage width, the low bits tf32 ignores, whether
the format has infinities) come from :data:`~jaxwarp._src.numerics.formats.FORMATS`.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from jaxwarp._src.numerics.formats import get_format

__all__ = [
    "DECODE_FORMATS",
    "NEG_BIG",
    "ROUNDINGS",
    "Term",
    "add_rn",
    "bitlen",
    "decode",
    "emin",
    "encode",
    "encode_rounded",
    "lsb_min",
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

#: Rounding modes of :func:`round_sig`, on magnitudes: toward zero, to nearest (ties to
#: even, ties away), and "away" (the magnitude rounded up: PTX ``.rp`` of a positive value
#: and ``.rm`` of a negative one).
ROUNDINGS = ("rz", "rn", "rna", "away")


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
      mode: static ``"rz"`` (toward zero), ``"rn"`` (to nearest, ties to even),
        ``"rna"`` (to nearest, ties away from zero) or ``"away"`` (away from zero:
        any inexact magnitude rounds up).

    Returns:
      ``(q, lsb)``: ``q < 2**(mbits + 1)`` of mag's dtype and int32 ``lsb``, the value
      ``q * 2**lsb``; a carry into a new binade is folded into ``lsb``. The exponent is not
      bounded above: overflow is the caller's (or :func:`encode`'s) business.

    Example:
      >>> import jax.numpy as jnp
      >>> [tuple(int(v) for v in round_sig(jnp.uint32(0b10110), jnp.int32(0), -126, 2, m))
      ...  for m in ("rz", "rn", "rna", "away")]  # 22 = 101.10b * 4: a tie
      [(5, 2), (6, 2), (6, 2), (6, 2)]
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
    if mode == "away":
        rem = jnp.where(sh >= width, mag,
                        jnp.where(sh > 0, mag & ((ut(1) << shc) - 1), 0))
        q = q + ((sh > 0) & (rem != 0)).astype(ut)
        carry = q >= (1 << (mbits + 1))
        q = jnp.where(carry, q >> 1, q)
        lsb = lsb + carry.astype(jnp.int32)
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


def f32_to_rn_bits(u: jax.Array, fmt: str, limit: int, nan_bits: int) -> jax.Array:
    """float32 bits (uint32) -> ``fmt`` bits (uint32), one rounding to nearest even, in a
    few integer operations on the magnitude: the same bits as ``decode`` + ``round_sig``
    + ``encode_rounded`` of a float32, for the formats whose conversions every emulated
    product runs (an operand's conversion is then tens of compiled instructions, not a
    hundred and more). A normal result drops the low ``23 - m`` bits of the rebiased word
    (adding half an lsb less one, plus the kept lsb: ties to even); a subnormal one shifts
    the significand with its leading bit right. A magnitude code above ``limit`` (the
    infinity's code, or the largest finite one for a saturating conversion) becomes
    ``limit``; an infinity too. NaN gives ``nan_bits`` (no sign).

    Args:
      u: uint32 float32 bit patterns.
      fmt: static name of a format with a sign bit and IEEE-style subnormals (``"f16"``,
        ``"bf16"``, ``"e4m3"``, ``"e5m2"``).
      limit: static, the largest magnitude code returned.
      nan_bits: static, the code of every NaN.
    """
    f = _facts(fmt)
    ebits, mbits = f.eb, f.mb
    bias = (1 << (ebits - 1)) - 1
    d = 23 - mbits
    one = jnp.uint32(1)
    a = u & jnp.uint32(0x7FFFFFFF)
    sign = (u >> (31 - ebits - mbits)) & jnp.uint32(1 << (ebits + mbits))
    enorm = 128 - bias  # float32 biased exponent of fmt's smallest normal
    normal = ((a + jnp.uint32((1 << (d - 1)) - 1) + ((a >> d) & one)) >> d) \
        - jnp.uint32((127 - bias) << mbits)
    if enorm > 1:  # fmt's subnormals are float32 normals: shift with the leading bit
        e = jnp.maximum(a >> 23, one)  # a float32 subnormal counts at exponent 1
        m = (a & jnp.uint32(0x7FFFFF)) | jnp.where(a >= jnp.uint32(0x800000),
                                                   jnp.uint32(0x800000), jnp.uint32(0))
        sh = jnp.minimum(jnp.uint32(151 - bias - mbits) - jnp.minimum(e, jnp.uint32(enorm - 1)),
                         jnp.uint32(31))
        q = m >> sh
        rem = m & ((one << sh) - one)
        half = one << (sh - one)
        sub = q + ((rem > half) | ((rem == half) & ((q & one) == one))).astype(jnp.uint32)
        normal = jnp.where(a >= jnp.uint32(enorm << 23), normal, sub)
    mag = jnp.minimum(normal, jnp.uint32(limit))
    return jnp.where(a > jnp.uint32(0x7F800000), jnp.uint32(nan_bits), sign | mag)


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
# Kernel forms: fp32 results of a block sum held as int32, in the operations a GPU kernel
# body lowers (Pallas' Triton and Mosaic GPU backends: no 64-bit words, no unsigned
# compares), for the fused exact kernels. The same rounding as :func:`round_sig` and
# :func:`encode` toward zero (``tests/numerics/test_softfloat.py`` holds them equal).


def kept_mask(n: int) -> int:
    """The fraction bits of an fp32 number past its leading n (a mask; 0 for n >= 24)."""
    return (1 << max(24 - n, 0)) - 1


def f32_term_rz(cb, E, F: int):
    """C (fp32 bits cb) truncated toward zero on the grid of ``2**(E - F)`` (E at least
    C's exponent, a subnormal C's at -126; F <= 25) as int32, without a conversion: C's
    significand (24 bits, a subnormal's fraction) shifted by its lsb's exponent less
    E - F, at most F - 23 to the left."""
    cf = (cb >> 23) & 0xFF
    csig = (cb & 0x7FFFFF) | jnp.where(cf > 0, 0x800000, 0)  # C = csig * 2**(max(cf, 1) - 150)
    sh = jnp.maximum(cf, 1) - 150 - E + F
    cv = jnp.where(sh >= 0, csig << jnp.clip(sh, 0, 31),
                   lax.shift_right_logical(csig, jnp.clip(-sh, 0, 31)))
    return jnp.where(cb < 0, -cv, cv)


def rz_f32_bits(mag, neg, g, low: int = 0):
    """fp32 bits of (-1)**neg * mag * 2**g (mag: uint32 bits in int32) toward zero, as
    :func:`round_sig` rounds: 24 significant bits, no bit below ``2**-149`` (a
    subnormal keeps the bits above it), an infinity past fp32's largest exponent, and a
    zero +0; the fraction bits ``low`` then cleared (``kept_mask(n)``: n significant bits
    of a normal result, and a subnormal's bits from ``2**(-125 - n)`` up, ``round_sig``'s
    grid with ``emin`` -126 and n - 1 fraction bits)."""
    lz = lax.clz(mag)
    lead = g + 31 - lz  # the exponent of the leading bit
    frac = lax.shift_right_logical(mag << jnp.minimum(lz, 31), 8) & 0x7FFFFF
    normal = jnp.where(lead >= 128, jnp.int32(0x7F800000), ((lead + 127) << 23) | frac)
    sub_sh = -149 - g  # a subnormal's fraction: mag on the grid of 2**-149, toward zero
    sub = jnp.where(sub_sh >= 0, lax.shift_right_logical(mag, jnp.clip(sub_sh, 0, 31)),
                    mag << jnp.clip(-sub_sh, 0, 31))
    bits = jnp.where(mag == 0, 0, jnp.where(lead >= -126, normal, sub))
    if low:
        bits = bits & ~low
    return jnp.where(bits == 0, 0, bits | (neg.astype(jnp.int32) << 31))
