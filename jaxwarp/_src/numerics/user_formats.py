"""Formats beyond the hardware's: :func:`define_format`, and values to and from codes.

:func:`define_format` makes a :class:`~jaxwarp._src.numerics.formats.Format` from its
fields (exponent and fraction widths, bias, where the infinities and NaN sit, whether
it is signed, its overflow rule) and registers it, so that its name works where a format
name does: :func:`~jaxwarp._src.numerics.convert.round_to`, ``from_bits``,
:func:`to_format` / :func:`from_format`, and as an operand or accumulator format of
``jaxwarp.fused_dot``. Proposed formats, such as IEEE P3109's binary8 family, can so be
studied through the same rounding and dot-product models as the hardware's.

Every code layout is read from the format's fields (:class:`Layout`), one code path for
all of them; the built-in float formats of up to 16 bits (and f32) are read the same way
(:data:`LAYOUT_FORMATS`). Rounding is one :func:`~jaxwarp._src.numerics.softfloat.round_sig`
onto the format's grid (subnormals included, the exponent unbounded above), then the
format's overflow rule.
"""

from __future__ import annotations

import functools
from fractions import Fraction
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxwarp._src import checks
from jaxwarp._src.numerics import bitops, softfloat
from jaxwarp._src.numerics.formats import (
    ROUNDING_MODES,
    SPECIALS,
    Format,
    get_format,
    register_format,
)

__all__ = [
    "LAYOUT_FORMATS",
    "Layout",
    "decode_codes",
    "define_format",
    "encode_rounded",
    "from_format",
    "layout",
    "round_to_user",
    "to_fnuz",
    "to_format",
]

#: Built-in float formats whose codes :func:`layout` reads (the ones of at most 16 bits
#: whose specials are IEEE's, e4m3's or none, and f32); ``to_format`` / ``from_format``
#: and ``fused_dot`` take these and every user-defined format.
LAYOUT_FORMATS = ("f32", "bf16", "f16", "e4m3", "e5m2", "e3m2", "e2m3", "e2m1", "ue4m3")

# Source formats of to_format / round_to_user, by dtype; their sign and inf bits.
_SOURCE = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64"}
_SIGN = {"f32": 1 << 31, "f64": 1 << 63}
_INF = {"f32": 0x7F800000, "f64": 0x7FF << 52}


class Layout(NamedTuple):
    """A float format's code layout: sign bit (``signed``) above ``eb`` exponent bits
    above ``mb`` fraction bits; ``bias``; ``specials`` (one of ``SPECIALS``);
    ``saturate`` (overflow gives ±max)."""

    eb: int
    mb: int
    bias: int
    specials: str
    signed: bool
    saturate: bool

    @property
    def emin(self) -> int:
        """Exponent of the smallest normal value."""
        return 1 - self.bias

    @property
    def sign_bit(self) -> int:
        return 1 << (self.eb + self.mb) if self.signed else 0

    @property
    def all_ones(self) -> int:
        """The all-ones magnitude code."""
        return (1 << (self.eb + self.mb)) - 1

    @property
    def max_code(self) -> int:
        """Magnitude code of the largest finite value."""
        if self.specials == "ieee":
            return (((1 << self.eb) - 2) << self.mb) | ((1 << self.mb) - 1)
        return self.all_ones - (self.specials in ("fn", "p3109"))

    @property
    def inf_code(self) -> int | None:
        """Magnitude code of +inf (None: no infinities)."""
        return {"ieee": ((1 << self.eb) - 1) << self.mb, "p3109": self.all_ones}.get(
            self.specials)

    @property
    def nan_code(self) -> int | None:
        """The NaN this library writes (None: no NaN): the positive all-ones NaN (ieee,
        fn; what the tensor cores write), the code of -0 (fnuz, p3109)."""
        if self.specials in ("ieee", "fn"):
            return self.all_ones
        return self.sign_bit if self.specials in ("fnuz", "p3109") else None

    def value(self, code: int) -> Fraction | None:
        """The exact value of a code (None for inf and NaN): the definition, in Python."""
        neg, mag = bool(code & self.sign_bit), code & self.all_ones
        e, f = mag >> self.mb, mag & ((1 << self.mb) - 1)
        if ((self.specials == "ieee" and e == (1 << self.eb) - 1)
                or (self.specials in ("fn", "p3109") and mag == self.all_ones)
                or (self.specials in ("fnuz", "p3109") and code == self.sign_bit)):
            return None
        v = (Fraction(f, 1 << self.mb) + (e > 0)) * Fraction(2) ** (max(e, 1) - self.bias)
        return -v if neg else v


@functools.cache
def layout(fmt: Format) -> Layout:
    """The :class:`Layout` of a user-defined format or of one of :data:`LAYOUT_FORMATS`.

    Example:
        >>> layout(jaxwarp.FORMATS["e4m3"])
        Layout(eb=4, mb=3, bias=7, specials='fn', signed=True, saturate=False)
    """
    if fmt.user_defined:
        specials = fmt.specials
    elif fmt.name in LAYOUT_FORMATS:
        specials = "ieee" if fmt.has_inf else "fn" if fmt.has_nan else "none"
    else:
        raise ValueError(f"format {fmt.name!r} has no code layout here; allowed: "
                         f"{LAYOUT_FORMATS} and the user-defined formats")
    return Layout(fmt.exponent_bits, fmt.mantissa_bits, fmt.bias, specials, fmt.signed,
                  fmt.saturate)


# --------------------------------------------------------------------------------------
# define_format


def _int_field(value: Any, name: str, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be a Python int, got {type(value).__name__} {value!r}")
    if not lo <= int(value) <= hi:
        raise ValueError(f"{name}={value!r} is out of range; allowed: {lo} .. {hi}")
    return int(value)


def define_format(name: str, *, exponent_bits: int, mantissa_bits: int,
                  bias: int | None = None, specials: str = "ieee", signed: bool = True,
                  saturate: bool = False) -> Format:
    """Defines a float format of up to 16 bits and registers it under ``name``.

    A code is a sign bit (if ``signed``) above ``exponent_bits`` exponent bits above
    ``mantissa_bits`` fraction bits. An exponent field ``e > 0`` holds ``(1 + f / 2**m) *
    2**(e - bias)``, ``e == 0`` the subnormal ``f / 2**m * 2**(1 - bias)``, except the
    codes ``specials`` reserves:

    * ``"ieee"``: the all-ones exponent field: ±inf (fraction 0) and NaN (as f16);
    * ``"fn"``: no infinities; the all-ones magnitude is NaN (as e4m3);
    * ``"fnuz"``: no infinities and no -0: the code of -0 is the one NaN (as LLVM's
      ``Float8E4M3FNUZ``);
    * ``"p3109"``: as ``"fnuz"``, and the all-ones magnitudes are ±inf: the IEEE P3109
      interim report's binary8 formats (``binary8pP``: P - 1 fraction bits, 8 - P
      exponent bits, bias ``2**(7 - P)``; one zero 0x00, NaN 0x80, +inf 0x7F, -inf 0xFF);
    * ``"none"``: every code is a number (as e2m1).

    Rounding onto it (:func:`jaxwarp.round_to`,
    :func:`to_format`): ``"rn"`` to nearest, ties to even, ``"rz"`` toward zero,
    ``"rna"`` ties away, subnormals on their grid. A finite value beyond the largest one
    becomes ±max if ``saturate`` (every mode) or under ``"rz"``, else ±inf where the
    format has infinities, else NaN where it has one, else ±max. ±inf stays ±inf where
    the format has infinities, else it is ±max with ``saturate``, else NaN (±max for a
    format with neither). A NaN becomes the format's NaN (``"none"``: +max, as PTX
    ``cvt`` to fp6 does). In a format without -0 (fnuz, p3109) every zero is +0. An
    unsigned format turns a negative value that does not round to zero into its NaN (or
    +0 if it has none).

    Args:
      name: the format's name: not a built-in format or alias. Defining it again with
        the same fields returns the same format; with other fields is an error.
      exponent_bits: exponent field width, 1 .. 15 (2 or more for ``"ieee"``).
      mantissa_bits: stored fraction bits, 0 or more (1 or more for ``"ieee"``); with
        the exponent and sign bits at most 16 bits in all.
      bias: exponent bias; default ``2**(exponent_bits - 1) - 1`` (IEEE's), or
        ``2**(exponent_bits - 1)`` for ``"fnuz"`` and ``"p3109"`` (P3109's
        ``2**(7 - P)``). Every value of the format must be a float32 value (exponents
        -149 .. 127), so that float32 holds them exactly.
      specials: one of ``"ieee"``, ``"fn"``, ``"fnuz"``, ``"p3109"``, ``"none"``
        (``"fnuz"`` and ``"p3109"`` need a sign bit).
      signed: whether there is a sign bit.
      saturate: overflow gives ±max instead of inf / NaN.

    Returns:
      The :class:`jaxwarp.Format` (``user_defined``;
      ``code_storage``: held as uint8 codes, uint16 above 8 bits).

    Raises:
      ValueError: a field out of range, a name that is built in or already defined
        otherwise, a format whose values float32 cannot hold.
      TypeError: a field of the wrong type.

    Example:
        >>> p3 = jaxwarp.define_format("binary8p3", exponent_bits=5, mantissa_bits=2,
        ...                            specials="p3109")
        >>> p3.bias, p3.max_value, p3.min_subnormal, p3.has_inf
        (16, 49152.0, 7.62939453125e-06, True)
        >>> jaxwarp.round_to(jnp.float32([1.1, 1e6, -3e-6]), "binary8p3")
        Array([ 1., inf,  0.], dtype=float32)
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"name must be a non-empty str, got {name!r}")
    eb = _int_field(exponent_bits, "exponent_bits", 1, 15)
    mb = _int_field(mantissa_bits, "mantissa_bits", 0, 15)
    specials = checks.static_choice(specials, "specials", SPECIALS)
    for flag, value in (("signed", signed), ("saturate", saturate)):
        if not isinstance(value, bool):
            raise TypeError(f"{flag} must be a bool, got {type(value).__name__} {value!r}")
    if signed + eb + mb > 16:
        raise ValueError(f"a format has at most 16 bits; sign {int(signed)} + exponent_bits "
                         f"{eb} + mantissa_bits {mb} = {signed + eb + mb}")
    if specials == "ieee" and (eb < 2 or mb < 1):
        raise ValueError(f"specials='ieee' needs exponent_bits >= 2 and mantissa_bits >= 1 "
                         f"(NaN has a nonzero fraction), got {eb} and {mb}")
    if specials in ("fnuz", "p3109") and not signed:
        raise ValueError(f"specials={specials!r} needs a sign bit (its NaN is the code of "
                         f"-0); signed=False given")
    if bias is None:
        bias = (1 << (eb - 1)) - (specials not in ("fnuz", "p3109"))
    bias = _int_field(bias, "bias", -(1 << 16), 1 << 16)
    lay = Layout(eb, mb, bias, specials, signed, saturate)
    max_value = lay.value(lay.max_code)
    lsb_min = 1 - bias - mb
    if max_value is None or max_value <= 0:
        raise ValueError(f"format {name!r} has no positive finite value")
    if max_value >= 2**128 or lsb_min < -149:
        raise ValueError(f"format {name!r}'s values span 2**{lsb_min} .. {float(max_value)!r}"
                         f"; every value must be a float32 value (2**-149 .. 2**128): "
                         f"change bias ({bias}) or exponent_bits ({eb})")
    bits = signed + eb + mb
    dt = np.dtype(np.uint8 if bits <= 8 else np.uint16)
    fmt = Format(name, "float", bits, dt, dt, eb, mb, signed=signed,
                 has_inf=lay.inf_code is not None, has_nan=lay.nan_code is not None,
                 min_value=-float(max_value) if signed else 0.0, max_value=float(max_value),
                 code_storage=True, exponent_bias=bias, specials=specials,
                 saturate=saturate)
    return register_format(fmt)


# --------------------------------------------------------------------------------------
# Kernels on codes (uint32).


def decode_codes(c: jax.Array, lay: Layout):
    """Codes (uint32, higher bits ignored) -> ``(neg, sig, lsb, align, inf, nan)``.

    ``value = (-1)**neg * sig * 2**lsb`` (int32 ``sig``, 0 for zero, inf and NaN);
    ``align`` is the exponent field's exponent, the minimum normal one for a subnormal
    or zero (what an adder of exponent fields sees).

    Example:
        >>> lay = layout(jaxwarp.FORMATS["e4m3"])
        >>> [int(v) for v in decode_codes(jnp.uint32(0xB9), lay)[:4]]  # -1.125
        [1, 9, -3, 0]
    """
    c = c.astype(jnp.uint32) & jnp.uint32(lay.sign_bit | lay.all_ones)
    neg = (c & jnp.uint32(lay.sign_bit)) != 0 if lay.signed else jnp.zeros(c.shape, bool)
    mag = c & jnp.uint32(lay.all_ones)
    e = (mag >> lay.mb).astype(jnp.int32)
    f = (mag & jnp.uint32((1 << lay.mb) - 1)).astype(jnp.int32)
    nan = jnp.zeros(c.shape, bool)
    inf = jnp.zeros(c.shape, bool)
    if lay.specials == "ieee":
        top = e == (1 << lay.eb) - 1
        nan, inf = top & (f != 0), top & (f == 0)
    elif lay.specials == "fn":
        nan = mag == jnp.uint32(lay.all_ones)
    elif lay.specials in ("fnuz", "p3109"):
        nan = c == jnp.uint32(lay.sign_bit)
        if lay.specials == "p3109":
            inf = mag == jnp.uint32(lay.all_ones)
    sig = jnp.where(nan | inf, 0, jnp.where(e == 0, f, f | (1 << lay.mb)))
    align = jnp.maximum(e, 1) - lay.bias
    return neg, sig, align - lay.mb, align, inf, nan


def encode_rounded(neg: jax.Array, q: jax.Array, lsb: jax.Array, lay: Layout, mode: str,
                   inf_on_overflow: bool = False) -> jax.Array:
    """Codes (uint32) of ``(-1)**neg * q * 2**lsb`` as :func:`softfloat.round_sig` left
    it on the format's grid (``emin``, ``mb``), with the format's overflow rule (see
    :func:`define_format`; ``inf_on_overflow``: ±inf in every mode where the format has
    infinities, as a tensor core's result, else that rule). Zeros: see
    :func:`define_format`.

    Example:
        >>> lay = layout(jaxwarp.FORMATS["e4m3"])
        >>> q, l = softfloat.round_sig(jnp.uint32(9), jnp.int32(-3), lay.emin, 3, "rn")
        >>> hex(int(encode_rounded(jnp.bool_(True), q, l, lay, "rn")))
        '0xb9'
    """
    q = q.astype(jnp.uint32)
    d = jnp.clip(lsb - (lay.emin - lay.mb), 0, 1 << (lay.eb + 1)).astype(jnp.uint32)
    mag = jnp.where(q == 0, jnp.uint32(0), (d << lay.mb) + q)
    over = mag > jnp.uint32(lay.max_code)
    s = neg.astype(jnp.uint32) << (lay.eb + lay.mb) if lay.signed else jnp.uint32(0)
    if inf_on_overflow and lay.inf_code is not None:
        big = s | jnp.uint32(lay.inf_code)
    elif lay.saturate or mode == "rz":
        big = s | jnp.uint32(lay.max_code)
    elif lay.inf_code is not None:
        big = s | jnp.uint32(lay.inf_code)
    elif lay.nan_code is not None:
        big = jnp.uint32(lay.nan_code)
    else:
        big = s | jnp.uint32(lay.max_code)
    if lay.specials in ("fnuz", "p3109"):  # no -0
        s = jnp.where(mag == 0, jnp.uint32(0), s)
    code = jnp.where(over, big, mag | s)
    if not lay.signed:  # a negative value that does not round to zero: NaN, or +0
        code = jnp.where(neg & (mag != 0), jnp.uint32(lay.nan_code or 0), code)
    return code


def _special_codes(code, neg, inf, nan, lay: Layout):
    """±inf and NaN inputs -> codes (the rules of :func:`define_format`)."""
    s = neg.astype(jnp.uint32) << (lay.eb + lay.mb) if lay.signed else jnp.uint32(0)
    if lay.inf_code is not None:
        inf_c = s | jnp.uint32(lay.inf_code)
    elif lay.saturate or lay.nan_code is None:
        inf_c = s | jnp.uint32(lay.max_code)
    else:
        inf_c = jnp.uint32(lay.nan_code)
    if not lay.signed:  # -inf: NaN, or +0 without one (as a negative value)
        inf_c = jnp.where(neg, jnp.uint32(lay.nan_code or 0), inf_c)
    nan_c = jnp.uint32(lay.nan_code if lay.nan_code is not None else lay.max_code)
    return jnp.where(nan, nan_c, jnp.where(inf, inf_c, code))


def _codes_from_float(u: jax.Array, src: str, lay: Layout, mode: str) -> jax.Array:
    neg, lsb, sig, _, inf, nan = softfloat.decode(u, src)
    q, lsb = softfloat.round_sig(sig.astype(u.dtype), lsb, lay.emin, lay.mb, mode)
    code = encode_rounded(neg, q, lsb, lay, mode)
    return _special_codes(code, neg, inf, nan, lay)


def _float_from_codes(c: jax.Array, lay: Layout, dst: str) -> jax.Array:
    """Codes -> ``dst`` ("f32" / "f64") bits; exact (the values are float32 values)."""
    neg, sig, lsb, _, inf, nan = decode_codes(c, lay)
    ut = jnp.uint64 if dst == "f64" else jnp.uint32
    out = softfloat.encode(neg, sig.astype(ut), lsb, dst)
    one = ut(1)
    inf_bits = (ut(0x7FF) << 52) if dst == "f64" else ut(0x7F800000)
    sign = one << (63 if dst == "f64" else 31)
    out = jnp.where(inf, inf_bits | jnp.where(neg, sign, ut(0)), out)
    nan_bits = (ut(0xFFF) << 51) if dst == "f64" else ut(0x7FC00000)
    return jnp.where(nan, nan_bits, out)


def _float_arg(x: Any) -> jax.Array:
    arr = checks.array_arg(x, "x")
    if arr.dtype not in _SOURCE:
        raise TypeError(f"x must be a float32 array (or float64 with jax_enable_x64), got "
                        f"dtype {arr.dtype}")
    return arr


def _format_arg(fmt: Any) -> Format:
    return get_format(fmt, "fmt", LAYOUT_FORMATS, user=True)


@functools.partial(jax.jit, static_argnums=(1, 2))
def _to_format(x: jax.Array, fmt: Format, mode: str) -> jax.Array:
    lay = layout(fmt)
    code = _codes_from_float(bitops.uint_view(x), _SOURCE[x.dtype], lay, mode)
    if fmt.code_storage:
        return code.astype(fmt.storage_dtype)
    return lax.bitcast_convert_type(code.astype(fmt.uint_dtype), fmt.storage_dtype)


def to_format(x: Any, fmt: str | Format, mode: str = "rn") -> jax.Array:
    """Rounds float32 (or float64) values into ``fmt``, as ``fmt``'s storage.

    One rounding (``"rn"``, ``"rz"``, ``"rna"``) onto ``fmt``'s grid, then its overflow
    and special-value rules (:func:`define_format`; for a built-in format they are
    :func:`jaxwarp.round_to`'s, but a NaN becomes the format's all-ones NaN where it has
    one). e2m1, e2m3 and e3m2 have no NaN and no infinity: there NaN becomes +max (code
    0b0111 / 0b011111), ±inf and overflows ±max.

    Args:
      x: float32 array (float64 with ``jax_enable_x64``: rounded once).
      fmt: static: a format made by :func:`define_format`, or one of ``"f32"``,
        ``"bf16"``, ``"f16"``, ``"e4m3"``, ``"e5m2"``, ``"e3m2"``, ``"e2m3"``,
        ``"e2m1"``, ``"ue4m3"``.
      mode: static ``"rn"`` (ties to even), ``"rz"`` or ``"rna"`` (ties away).

    Returns:
      ``fmt``'s storage (``Format.storage_dtype``): the codes (uint8; uint16 above 8
      bits) of a code-stored format, the values of the others (float16 for f16).

    Raises:
      TypeError: ``x`` is not float32 / float64; a static argument is traced.
      ValueError: an unknown ``fmt`` or ``mode`` (the message lists what is allowed).

    Example:
        >>> p4 = jaxwarp.define_format("binary8p4", exponent_bits=4, mantissa_bits=3,
        ...                            specials="p3109")
        >>> [hex(c) for c in jaxwarp.to_format(jnp.float32([1.0, -0.0, 1e9, jnp.nan]), p4)]
        ['0x40', '0x0', '0x7f', '0x80']
    """
    f = _format_arg(fmt)
    mode = checks.static_choice(mode, "mode", ROUNDING_MODES)
    return _to_format(_float_arg(x), f, mode)


@functools.partial(jax.jit, static_argnums=1)
def _from_format(v: jax.Array, fmt: Format) -> jax.Array:
    c = bitops.uint_view(v).astype(jnp.uint32)
    return lax.bitcast_convert_type(_float_from_codes(c, layout(fmt), "f32"), jnp.float32)


def from_format(v: Any, fmt: str | Format) -> jax.Array:
    """Values of ``fmt``'s storage as float32 (exact; the inverse of :func:`to_format`).

    Args:
      v: array of ``fmt``'s storage dtype (codes for a code-stored format: their low
        bits, higher ones ignored).
      fmt: static, as for :func:`to_format`.

    Returns:
      float32 array of ``v``'s shape; ±inf for infinities, NaN (0x7FC00000) for NaNs.

    Raises:
      TypeError: ``v`` is not of ``fmt``'s storage dtype.
      ValueError: an unknown ``fmt``.

    Example:
        >>> p4 = jaxwarp.define_format("binary8p4", exponent_bits=4, mantissa_bits=3,
        ...                            specials="p3109")
        >>> [float(v) for v in jaxwarp.from_format(jnp.uint8([0x40, 0x01, 0x7E, 0xFF, 0x80]), p4)]
        [1.0, 0.0009765625, 224.0, -inf, nan]
    """
    f = _format_arg(fmt)
    arr = checks.array_arg(v, "v")
    if arr.dtype != f.storage_dtype:
        raise TypeError(f"v must be an array of {f.name}'s storage dtype "
                        f"{f.storage_dtype.name}, got dtype {arr.dtype}")
    return _from_format(arr, f)


@functools.partial(jax.jit, static_argnums=(1, 2))
def _round_user(x: jax.Array, fmt: Format, mode: str) -> jax.Array:
    lay = layout(fmt)
    u = bitops.uint_view(x)
    src = _SOURCE[x.dtype]
    code = _codes_from_float(u, src, lay, mode)
    out = _float_from_codes(code, lay, src)
    mag = u & u.dtype.type(_SIGN[src] - 1)
    isnan = mag > u.dtype.type(_INF[src])
    canonical = u.dtype.type(0xFFF << 51 if src == "f64" else 0x7FC00000)
    return lax.bitcast_convert_type(jnp.where(isnan, canonical, out), x.dtype)


# Straight-through estimator, as round_to's (rounding is piecewise constant).
_round_user_ste = jax.custom_jvp(_round_user, nondiff_argnums=(1, 2))


@_round_user_ste.defjvp
def _round_user_jvp(fmt, mode, primals, tangents):
    (x,), (dx,) = primals, tangents
    return _round_user_ste(x, fmt, mode), dx


def round_to_user(x: jax.Array, fmt: Format, mode: str) -> jax.Array:
    """``round_to`` for a user-defined format (checked arguments): the value of
    :func:`to_format`'s code in ``x``'s dtype; a NaN input gives the canonical NaN of
    ``x``'s dtype (also for a format without NaN)."""
    return _round_user_ste(x, fmt, mode)


@functools.partial(jax.jit, static_argnums=(1, 2))
def _to_fnuz(x: jax.Array, fmt: Format, saturate: bool) -> jax.Array:
    if saturate:  # finite values clamped to +-max first; inf and NaN left to the rounding
        top = jnp.asarray(fmt.max_value, x.dtype)
        x = jnp.where(jnp.isfinite(x), jnp.clip(x, -top, top), x)
    return _to_format(x, fmt, "rn")


def to_fnuz(x: Any, fmt: str = "e4m3fnuz", *, saturate: bool = True) -> jax.Array:
    """float32 (or float64) -> AMD's fp8 ``e4m3fnuz`` / ``e5m2fnuz``, rounded to nearest
    even, as HIP's conversions (``amd_hip_fp8.h``) do: with ``saturate`` (HIP's
    ``__HIP_SATFINITE``) a finite value is first clamped to ±max (240 / 57344), without it
    (``__HIP_NOSAT``, and ml_dtypes' cast) a value that rounds beyond max gives the NaN
    0x80; ±inf and NaN give 0x80 either way (fnuz formats have no infinity).

    Args:
      x: float32 array (float64 with ``jax_enable_x64``).
      fmt: static, ``"e4m3fnuz"`` or ``"e5m2fnuz"`` (or ml_dtypes' names).
      saturate: static bool.

    Returns:
      An array of ml_dtypes' ``float8_e4m3fnuz`` / ``float8_e5m2fnuz``.

    Example:
        >>> x = jnp.float32([300.0, -1e9, jnp.inf, 1.0])
        >>> [hex(v) for v in jaxwarp.to_fnuz(x).view(jnp.uint8)]
        ['0x7f', '0xff', '0x80', '0x40']
        >>> [hex(v) for v in jaxwarp.to_fnuz(x, saturate=False).view(jnp.uint8)]
        ['0x80', '0x80', '0x80', '0x40']
    """
    f = get_format(fmt, "fmt", (), user=True)
    if f.specials != "fnuz" or f.user_defined and f.code_storage:
        raise ValueError(f"fmt={fmt!r} is not supported; allowed: ('e4m3fnuz', 'e5m2fnuz')")
    if not isinstance(saturate, bool):
        raise TypeError(f"saturate must be a bool, got {type(saturate).__name__} {saturate!r}")
    return _to_fnuz(_float_arg(x), f, saturate)
