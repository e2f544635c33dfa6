"""Number formats: the one table of every element format, and views of their bits.

One table, :data:`FORMATS`, describes every element format the warp-level units
read or write, by PTX name (f64 f32 tf32 bf16 f16 e4m3 e5m2 e3m2 e2m3 e2m1 ue8m0 ue4m3 s32
s8 u8 s4 u4 b1; the older names fp16/fp32/fp64 stay as aliases). Every other module reads
a format's facts (storage dtype, widths, exponent and fraction bits, range, how PTX packs
it in registers) from it instead of keeping a table of its own. :func:`to_bits` and
:func:`from_bits` move between values and their raw bits.

Rounding lives above this table: ``softfloat.py`` (the one rounding engine) and
``convert.py`` (:func:`~jaxwarp._src.numerics.convert.round_to` and the CUDA
conversions).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jax import lax

from jaxwarp._src import checks
from jaxwarp._src.numerics import bitops

__all__ = [
    "ALIASES",
    "FLOAT_FORMATS",
    "FNUZ_ALIASES",
    "FNUZ_FORMATS",
    "FORMATS",
    "ROUNDING_MODES",
    "SPECIALS",
    "Format",
    "from_bits",
    "get_format",
    "register_format",
    "to_bits",
    "user_formats",
]

#: Where a user-defined format keeps its infinities and NaN (``Format.specials``):
#: ``"ieee"`` (the all-ones exponent field: ±inf and NaNs, as f16), ``"fn"`` (no
#: infinities, the all-ones magnitude is NaN, as e4m3), ``"fnuz"`` (no infinities, no
#: -0: the code of -0 is the one NaN), ``"p3109"`` (as ``"fnuz"``, with ±inf at the
#: all-ones magnitudes: IEEE P3109's binary8 formats) and ``"none"`` (every code is a
#: number, as e2m1).
SPECIALS = ("ieee", "fn", "fnuz", "p3109", "none")


@dataclasses.dataclass(frozen=True)
class Format:
    """An element format as the GPU stores and interprets it.

    Attributes:
      name: the PTX name (``"f16"``, ``"tf32"``, ``"e4m3"``, ``"s8"`` ...). Older names
        (``"fp16"``, ``"fp32"``, ``"fp64"``) and dtype names are accepted as aliases by
        ``jaxwarp.get_format`` and by every function that takes a format.
      kind: ``"float"`` or ``"int"``.
      bits: significant bits of one element (19 for tf32, 4 for int4, 1 for b1).
      storage_dtype: the dtype jaxwarp holds one element in (tf32 lives in a float32
        whose low 13 fraction bits the tensor core ignores; s4 in an int8 in [-8, 7],
        u4 in a uint8 in [0, 15], b1 in a uint8 0/1; e4m3/e5m2 in ml_dtypes'
        ``float8_e4m3fn`` / ``float8_e5m2``; the fp6, fp4 and scale formats as uint8
        *codes*, see ``code_storage``).
      uint_dtype: the unsigned integer dtype as wide as ``storage_dtype`` (what
        :func:`to_bits` returns).
      exponent_bits: exponent field width (0 for integer formats); taken from
        ``ml_dtypes.finfo`` where the format has its own dtype.
      mantissa_bits: stored fraction bits (0 for integer formats); likewise.
      signed: whether negative values exist.
      has_inf: whether the format encodes infinities (e4m3 does not).
      has_nan: whether the format encodes NaNs (e2m1, e2m3, e3m2 do not; ue8m0's NaN is
        0xFF, e4m3's and ue4m3's the all-ones magnitude).
      min_value: smallest finite value: the most negative one of a signed format (a
        Python int for integer formats), 0 for ue4m3, ``2**-127`` for ue8m0 (no zero).
      max_value: largest finite value (448 for e4m3: its top code is NaN, not a number).
      has_zero: whether zero is a value (ue8m0, a power-of-two scale, has none).
      has_subnormals: whether an exponent field of 0 means a subnormal; for ue8m0 it is
        the normal ``2**-127``.
      code_storage: ``storage_dtype`` holds the raw code in its low ``bits`` bits, not a
        value: the fp6 and fp4 formats (XLA has no 6-bit type, and its 4-bit
        ``float4_e2m1fn`` packs two per byte) and the block-scale formats ue8m0 and
        ue4m3 are held as uint8 codes, as PTX registers and MMA-Sim's files hold them.
      numpy_dtype: the NumPy (ml_dtypes) dtype that holds the format's values, for
        host-side conversions: ``storage_dtype`` for value-stored formats,
        ``float6_e2m3fn``, ``float6_e3m2fn``, ``float4_e2m1fn``, ``float8_e8m0fnu``
        for the code formats; None for ue4m3 and the integer formats.
      unpacked_lsb: lowest bit of the code in the byte that holds one element of a
        ``kind::f8f6f4`` (and ``kind::mxf8f6f4``) operand: e2m3/e3m2 sit in bits 5:0
        (0), e2m1 in bits 5:2 (2); 0 for every other format.
      exponent_bias: the exponent bias where it is not IEEE's ``2**(exponent_bits - 1)
        - 1`` (None: IEEE's; a format made by ``jaxwarp.define_format`` has its own).
      specials: None for the built-in formats (``has_inf`` / ``has_nan`` and IEEE's
        encodings say it all); for a user-defined format where its infinities and NaN
        sit, one of ``"ieee"``, ``"fn"``, ``"fnuz"``, ``"p3109"``, ``"none"`` (see
        ``jaxwarp.define_format``).
      saturate: a user-defined format's overflow rule: a finite value beyond the
        largest one becomes ±max in every rounding mode (False: as the built-ins).

    Example:
        >>> e4m3 = jaxwarp.FORMATS["e4m3"]
        >>> e4m3.exponent_bits, e4m3.mantissa_bits, e4m3.max_value, e4m3.has_inf
        (4, 3, 448.0, False)
        >>> jaxwarp.get_format("fp16").name
        'f16'
        >>> e2m1 = jaxwarp.FORMATS["e2m1"]
        >>> e2m1.bits, e2m1.register_bits, e2m1.max_value, e2m1.has_nan, e2m1.unpacked_lsb
        (4, 4, 6.0, False, 2)
    """

    name: str
    kind: str
    bits: int
    storage_dtype: np.dtype
    uint_dtype: np.dtype
    exponent_bits: int = 0
    mantissa_bits: int = 0
    signed: bool = True
    has_inf: bool = False
    has_nan: bool = False
    min_value: float | int = 0
    max_value: float | int = 0
    has_zero: bool = True
    has_subnormals: bool = True
    code_storage: bool = False
    numpy_dtype: np.dtype | None = None
    unpacked_lsb: int = 0
    exponent_bias: int | None = None
    specials: str | None = None
    saturate: bool = False

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def bias(self) -> int:
        """Exponent bias (floats only): ``exponent_bias``, or IEEE's."""
        if self.exponent_bias is not None:
            return self.exponent_bias
        return (1 << (self.exponent_bits - 1)) - 1

    @property
    def user_defined(self) -> bool:
        """Whether ``jaxwarp.define_format`` made the format (it is not built in)."""
        return self.specials is not None

    @property
    def min_normal(self) -> float:
        """Smallest positive normal value (floats only)."""
        return 2.0 ** self.min_exponent

    @property
    def min_subnormal(self) -> float:
        """Smallest positive subnormal value (floats only; ue8m0: its smallest value)."""
        if not self.has_subnormals:
            return self.min_normal
        return 2.0 ** (self.min_exponent - self.mantissa_bits)

    @property
    def min_exponent(self) -> int:
        """Exponent of the smallest normal value, ``1 - bias`` (floats only; -14 for f16);
        ``-bias`` for a format without subnormals (-127 for ue8m0)."""
        return 1 - self.bias if self.has_subnormals else -self.bias

    @property
    def max_exponent(self) -> int:
        """Exponent of the largest finite value (floats only; 15 for f16, 8 for e4m3)."""
        return int(np.frexp(self.max_value)[1]) - 1

    @property
    def storage_bits(self) -> int:
        """Bits of ``storage_dtype`` (32 for tf32, 8 for s4 / u4 / b1 / e2m1)."""
        return 8 * self.storage_dtype.itemsize

    @property
    def register_bits(self) -> int:
        """Bits one element takes in a packed register or in memory (PTX ``cvt`` and
        block-scaled operands): ``bits`` for integers (4 for s4, 1 for b1); for floats
        the smallest of 4, 8, 16, 32, 64 bits that holds it (32 for tf32, 16 for f16; 4
        for e2m1, two to a byte in ``.e2m1x2`` and ``kind::mxf4``; 8 for e2m3 / e3m2, a
        byte with its top two bits zero in ``.e2m3x2``). An unpacked ``kind::f8f6f4``
        operand takes a byte per element (see ``unpacked_lsb``)."""
        if not self.is_float:
            return self.bits
        return max(4, 1 << (self.bits - 1).bit_length())

    @property
    def ignored_bits(self) -> int:
        """Low bits of a float's storage word the format ignores (13 for tf32, else 0)."""
        if not self.is_float or self.code_storage:
            return 0
        return self.storage_bits - self.bits

    @property
    def code_bits(self) -> int:
        """Bits of a float's raw pattern, ignored low bits included: the storage word of
        a value-stored format (32 for tf32), the code of a code-stored one (4 for e2m1,
        7 for ue4m3, whose byte's top bit is not part of the code)."""
        return self.ignored_bits + self.bits

    def code_in_byte(self, x: Any) -> Any:
        """The code held in the bytes ``x`` of a ``kind::f8f6f4`` operand (one element
        per byte, the code from bit ``unpacked_lsb`` up); NumPy or JAX integers alike.

        Example:
            >>> int(jaxwarp.FORMATS["e2m1"].code_in_byte(np.uint8(0x3C)))
            15
        """
        return (x >> self.unpacked_lsb) & ((1 << self.code_bits) - 1)

    @property
    def sign_bit(self) -> int:
        """The sign bit of a float's raw pattern, as an int (``0x8000`` for f16, ``0x8``
        for e2m1); 0 for an unsigned format (ue8m0, ue4m3)."""
        return 1 << (self.code_bits - 1) if self.signed else 0

    @property
    def bits_dtype(self) -> np.dtype:
        """The integer dtype one element's raw bits are held in (captures, registers):
        ``uint_dtype`` for floats, ``storage_dtype`` for integers (int8 for s8 and s4)."""
        return self.uint_dtype if self.is_float else self.storage_dtype


def _float_format(name: str, dtype: Any, *, exponent_bits: int | None = None,
                  mantissa_bits: int | None = None) -> Format:
    fi = ml_dtypes.finfo(dtype)
    eb = int(fi.nexp) if exponent_bits is None else exponent_bits
    mb = int(fi.nmant) if mantissa_bits is None else mantissa_bits
    # tf32 shares float32's dtype but keeps 10 fraction bits: its maximum is computed.
    max_value = float(fi.max) if mantissa_bits is None else (2.0 - 2.0**-mb) * 2.0**fi.maxexp / 2
    has_inf = bool(np.isinf(np.array(np.inf).astype(dtype)))
    dt = np.dtype(dtype)
    return Format(name, "float", 1 + eb + mb, dt, bitops.uint_dtype(8 * dt.itemsize), eb, mb,
                  signed=True, has_inf=has_inf, has_nan=True, min_value=-max_value,
                  max_value=max_value, numpy_dtype=dt)


def _code_format(name: str, dtype: Any, *, unpacked_lsb: int = 0) -> Format:
    """A format held as uint8 codes whose values ml_dtypes' ``dtype`` defines (fp6, fp4,
    ue8m0): field widths, range and specials read from it."""
    fi, dt = ml_dtypes.finfo(dtype), np.dtype(dtype)
    eb, mb = int(fi.nexp), int(fi.nmant)
    with np.errstate(invalid="ignore", over="ignore"):
        has_nan = bool(np.isnan(np.array(np.nan, np.float32).astype(dt).astype(np.float32)))
        signed = bool(np.array(-1.0, np.float32).astype(dt).astype(np.float32) == -1.0)
        has_zero = bool(np.array(0.0, np.float32).astype(dt).astype(np.float32) == 0.0)
    max_value, smallest = float(fi.max), float(fi.smallest_normal)
    return Format(name, "float", int(signed) + eb + mb, np.dtype(np.uint8),
                  np.dtype(np.uint8), eb, mb, signed=signed, has_inf=False, has_nan=has_nan,
                  min_value=-max_value if signed else (0.0 if has_zero else smallest),
                  max_value=max_value, has_zero=has_zero,
                  has_subnormals=has_zero and fi.smallest_subnormal < fi.smallest_normal,
                  code_storage=True, numpy_dtype=dt, unpacked_lsb=unpacked_lsb)


def _unsigned_e4m3() -> Format:
    """ue4m3, the block scale of NVFP4 (``kind::mxf4nvf4`` with ``.ue4m3`` scales): e4m3
    without its sign, a uint8 code in bits 6:0 (bit 7 is not part of the code; PTX
    writes it as 0). Values, subnormals and the NaN 0x7F are e4m3's; no ml_dtypes type."""
    e4m3 = ml_dtypes.finfo(ml_dtypes.float8_e4m3fn)
    u8 = np.dtype(np.uint8)
    return Format("ue4m3", "float", int(e4m3.nexp) + int(e4m3.nmant), u8, u8,
                  int(e4m3.nexp), int(e4m3.nmant), signed=False, has_inf=False,
                  has_nan=True, min_value=0.0, max_value=float(e4m3.max), code_storage=True)


def _int_format(name: str, nbits: int, signed: bool, dtype: Any) -> Format:
    lo, hi = (-(1 << (nbits - 1)), (1 << (nbits - 1)) - 1) if signed else (0, (1 << nbits) - 1)
    dt = np.dtype(dtype)
    return Format(name, "int", nbits, dt, bitops.uint_dtype(8 * dt.itemsize), signed=signed,
                  min_value=lo, max_value=hi)


#: Other names accepted for each format (older jaxwarp names, dtype names, CUDA names).
ALIASES: dict[str, str] = {
    "fp16": "f16", "half": "f16", "float16": "f16",
    "bfloat16": "bf16",
    "fp32": "f32", "float": "f32", "float32": "f32",
    "fp64": "f64", "double": "f64", "float64": "f64",
    "fp8_e4m3": "e4m3", "float8_e4m3fn": "e4m3", "e4m3fn": "e4m3",
    "fp8_e5m2": "e5m2", "float8_e5m2": "e5m2",
    "float6_e3m2fn": "e3m2", "fp6_e3m2": "e3m2",
    "float6_e2m3fn": "e2m3", "fp6_e2m3": "e2m3",
    "float4_e2m1fn": "e2m1", "fp4_e2m1": "e2m1",
    "float8_e8m0fnu": "ue8m0", "e8m0": "ue8m0", "e8m0fnu": "ue8m0",
    "int32": "s32", "int8": "s8", "uint8": "u8", "int4": "s4", "uint4": "u4",
}


class _Registry(Mapping[str, Format]):
    """A read-only name -> :class:`Format` table that also answers to the aliases.

    Iterating gives the PTX names only, so ``tuple(FORMATS)`` lists each format once.
    """

    def __init__(self, formats: tuple[Format, ...]):
        self._by_name = {f.name: f for f in formats}

    def __getitem__(self, name: str) -> Format:
        return self._by_name[ALIASES.get(name, name)]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and ALIASES.get(name, name) in self._by_name

    def __iter__(self):
        return iter(self._by_name)

    def __len__(self) -> int:
        return len(self._by_name)

    def __repr__(self) -> str:
        return f"FORMATS({', '.join(self._by_name)})"


#: Every element format, by PTX name: the single source of truth for their parameters.
#: Lookups also accept :data:`ALIASES` (``FORMATS["fp16"] is FORMATS["f16"]``).
FORMATS: Mapping[str, Format] = _Registry((
    _float_format("f64", np.float64),
    _float_format("f32", np.float32),
    _float_format("tf32", np.float32, exponent_bits=8, mantissa_bits=10),
    _float_format("bf16", ml_dtypes.bfloat16),
    _float_format("f16", np.float16),
    _float_format("e4m3", ml_dtypes.float8_e4m3fn),
    _float_format("e5m2", ml_dtypes.float8_e5m2),
    _code_format("e3m2", ml_dtypes.float6_e3m2fn),
    _code_format("e2m3", ml_dtypes.float6_e2m3fn),
    _code_format("e2m1", ml_dtypes.float4_e2m1fn, unpacked_lsb=2),
    _code_format("ue8m0", ml_dtypes.float8_e8m0fnu),
    _unsigned_e4m3(),
    _int_format("s32", 32, True, np.int32),
    _int_format("s8", 8, True, np.int8),
    _int_format("u8", 8, False, np.uint8),
    _int_format("s4", 4, True, np.int8),
    _int_format("u4", 4, False, np.uint8),
    _int_format("b1", 1, False, np.uint8),
))


def _fnuz_format(name: str, dtype: Any) -> Format:
    """An AMD fp8 format (ml_dtypes' ``float8_e4m3fnuz`` / ``float8_e5m2fnuz``, LLVM's
    ``Float8E4M3FNUZ`` / ``Float8E5M2FNUZ``): no infinities, no -0; the code of -0 (0x80)
    is the one NaN; bias ``2**(exponent_bits - 1)``. Value-stored in its ml_dtypes type,
    with the code rules of ``specials="fnuz"`` (``jaxwarp.define_format``)."""
    fi, dt = ml_dtypes.finfo(dtype), np.dtype(dtype)
    eb, mb = int(fi.nexp), int(fi.nmant)
    return Format(name, "float", 1 + eb + mb, dt, np.dtype(np.uint8), eb, mb, signed=True,
                  has_inf=False, has_nan=True, min_value=-float(fi.max),
                  max_value=float(fi.max), numpy_dtype=dt, exponent_bias=1 << (eb - 1),
                  specials="fnuz")


#: AMD's fp8 formats of CDNA3's matrix cores (``fp8`` and ``bf8`` of the ISA guide).
#: Apart from :data:`FORMATS` (whose formats PTX names), accepted where an entry point
#: takes the user-defined formats (``jaxwarp.to_format``, ``jaxwarp.from_format``,
#: ``jaxwarp.round_to``, ``jaxwarp.fused_dot``) and by ``jaxwarp.mfma_logical``.
FNUZ_FORMATS: Mapping[str, Format] = {
    f.name: f for f in (_fnuz_format("e4m3fnuz", ml_dtypes.float8_e4m3fnuz),
                        _fnuz_format("e5m2fnuz", ml_dtypes.float8_e5m2fnuz))}
#: Other names of the fnuz formats (ml_dtypes' dtype names; AMD's ``fp8`` / ``bf8`` are
#: not aliases: elsewhere "fp8" means e4m3).
FNUZ_ALIASES = {"float8_e4m3fnuz": "e4m3fnuz", "float8_e5m2fnuz": "e5m2fnuz"}


#: Names of the floating-point formats (what ``round_to`` accepts as ``fmt``).
FLOAT_FORMATS = tuple(name for name, f in FORMATS.items() if f.is_float)

#: Rounding modes of ``round_to``, named as in PTX (``cvt.rn``, ``cvt.rz``, ``cvt.rna``).
ROUNDING_MODES = ("rn", "rz", "rna")

# Formats made by ``jaxwarp.define_format`` (``user_defined``), by name: apart from
# FORMATS, so that code which iterates the registry sees the built-in formats only; an
# entry point takes them where it passes ``user=True`` to :func:`get_format`.
_USER_FORMATS: dict[str, Format] = {}


def register_format(fmt: Format) -> Format:
    """Adds a user-defined format to the registry (``jaxwarp.define_format`` calls it).

    Registering the same format again returns the one registered; a name that a built-in
    format or alias has, or that a different user format has, is refused (ValueError).
    """
    if fmt.name in FORMATS or fmt.name in ALIASES or fmt.name in FNUZ_FORMATS:
        raise ValueError(f"name={fmt.name!r} is a built-in format (or alias); choose another")
    old = _USER_FORMATS.get(fmt.name)
    if old is not None and old != fmt:
        raise ValueError(f"name={fmt.name!r} is already defined with other fields ({old}); "
                         f"a name defines one format")
    return _USER_FORMATS.setdefault(fmt.name, fmt)


def user_formats() -> tuple[str, ...]:
    """Names of the formats defined so far by ``jaxwarp.define_format``."""
    return tuple(_USER_FORMATS)


def get_format(name: str | Format, argname: str = "name",
               allowed: tuple[str, ...] | None = None, user: bool = False) -> Format:
    """Returns the :class:`Format` called ``name``.

    Args:
      name: a format name (see :data:`FORMATS`), an alias, a dtype that names a format
        (``jnp.bfloat16``, ``np.float16``), or a :class:`Format`, returned as is.
      argname: the argument name to use in error messages.
      allowed: restricts the accepted names (default: every name in :data:`FORMATS`).
      user: also accept the formats made by ``jaxwarp.define_format`` (by name, or the
        :class:`Format` it returned).

    Returns:
      The format.

    Raises:
      ValueError: ``name`` is not one of the allowed names (the message lists them).
      TypeError: ``name`` is a traced value.

    Example:
      >>> get_format("f16").max_value
      65504.0
      >>> get_format("fp16") is get_format("f16")  # an alias
      True
    """
    allowed = tuple(FORMATS) if allowed is None else allowed
    if isinstance(name, np.dtype) or (isinstance(name, type) and issubclass(name, np.generic)):
        name = np.dtype(name).name
    if user and isinstance(name, (str, Format)):
        key = name.name if isinstance(name, Format) else name
        key = FNUZ_ALIASES.get(key, key)
        if key in FNUZ_FORMATS:
            return FNUZ_FORMATS[key]
        if key in _USER_FORMATS:
            if isinstance(name, Format) and name != _USER_FORMATS[key]:
                raise ValueError(f"{argname}: format {key!r} is not the one define_format "
                                 f"registered under that name")
            return _USER_FORMATS[key]
        allowed = allowed + tuple(_USER_FORMATS) + tuple(FNUZ_FORMATS)
    if isinstance(name, Format):
        name = name.name
    elif not isinstance(name, (str, jax.core.Tracer, bool, int, float, complex, type(None))):
        try:  # a dtype that names a format (jnp.bfloat16, np.dtype("float16")): its name
            name = np.dtype(name).name
        except TypeError:
            pass
    if isinstance(name, str) and ALIASES.get(name) in allowed:
        name = ALIASES[name]
    if not isinstance(name, str) or name not in allowed:
        names = ", ".join(repr(a) for a in allowed)
        aliases = ", ".join(f"{k!r}" for k, v in ALIASES.items() if v in allowed)
        if not isinstance(name, str):
            checks.static_choice(name, argname, allowed)  # traced / not a str -> TypeError
        raise ValueError(f"{argname}={name!r} is not supported; allowed: ({names}); "
                         f"aliases: ({aliases})")
    return FORMATS[name]


# --------------------------------------------------------------------------------------
# Bit views.
# --------------------------------------------------------------------------------------

# Formats whose storage fills whole bytes, so from_bits can bitcast to them (every float,
# the code-stored ones as their uint8 codes; s32, s8, u8).
_BYTE_FORMATS = tuple(n for n, f in FORMATS.items() if f.is_float or f.bits == f.storage_bits)


def to_bits(x: Any) -> jax.Array:
    """Returns the raw bits of ``x`` as the unsigned integer of the same width.

    Args:
      x: array of a 8/16/32/64-bit dtype (float16 and bfloat16 give uint16, float32 gives
        uint32, float64 gives uint64; integers give the unsigned type of their width).

    Returns:
      Unsigned integer array of ``x``'s shape; the bits are not changed.

    Raises:
      TypeError: ``x`` has no such width (bool, int4, ...).

    Example:
      >>> import jax.numpy as jnp
      >>> to_bits(jnp.float16(1.0))
      Array(15360, dtype=uint16)
    """
    arr = checks.array_arg(x, "x", complex_ok=True)  # 64-bit with x64 off: TypeError
    if jnp.issubdtype(arr.dtype, jnp.complexfloating):
        raise TypeError(f"x must be a real (float or integer) array, got dtype {arr.dtype}")
    if arr.dtype == jnp.bool_ or arr.dtype.itemsize not in (1, 2, 4, 8) or arr.dtype in (
            jnp.dtype(ml_dtypes.int4), jnp.dtype(ml_dtypes.uint4)):
        raise TypeError(f"x must have an 8, 16, 32 or 64-bit dtype, got dtype {arr.dtype}")
    return bitops.uint_view(arr)


def from_bits(u: Any, fmt: str | Format) -> jax.Array:
    """Interprets raw bits as values of ``fmt`` (the inverse of :func:`to_bits`).

    Args:
      u: integer array holding the bits. Its width must equal ``fmt``'s storage width,
        or be 32 bits for a narrower format (the zero-extended results of
        ``convert.CVT_FUNCTIONS``), in which case the low bits are used.
      fmt: static format name whose storage is a whole number of bytes: ``"f16"``,
        ``"bf16"``, ``"tf32"``, ``"f32"``, ``"f64"``, ``"e4m3"``, ``"e5m2"``, ``"e3m2"``,
        ``"e2m3"``, ``"e2m1"``, ``"ue8m0"``, ``"ue4m3"``, ``"s32"``, ``"s8"``, ``"u8"``
        (or an alias such as ``"fp16"``), or a format made by ``jaxwarp.define_format``.

    Returns:
      Array of ``fmt.storage_dtype`` and ``u``'s shape. For a code-stored format
      (``Format.code_storage``: fp6, fp4, ue8m0, ue4m3, the user-defined formats) that
      is the code (uint8; uint16 for a user format of 9 to 16 bits), the low byte(s) of
      ``u`` unchanged (no bits are masked).

    Raises:
      TypeError: ``u`` is not an integer array of an accepted width.
      ValueError: ``fmt`` is not one of the allowed names.

    Example:
      >>> import jax.numpy as jnp
      >>> from_bits(jnp.uint32(0x3C00), "fp16")
      Array(1., dtype=float16)
    """
    f = get_format(fmt, "fmt", _BYTE_FORMATS, user=True)
    arr = checks.array_arg(u, "u", complex_ok=True)  # 64-bit with x64 off: TypeError
    width = f.storage_dtype.itemsize
    if not jnp.issubdtype(arr.dtype, jnp.integer) or arr.dtype.itemsize not in (width, 4) or (
            arr.dtype.itemsize == 4 and width > 4):
        given = fmt if isinstance(fmt, str) else f.name
        raise TypeError(f"u must be an integer array of {8 * width} bits (or 32 bits) for "
                        f"fmt={given!r}, got dtype {arr.dtype}")
    if arr.dtype.itemsize != width:
        arr = bitops.uint_view(arr).astype(bitops.uint_dtype(8 * width))
    return lax.bitcast_convert_type(arr, f.storage_dtype)
