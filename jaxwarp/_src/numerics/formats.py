"""Number formats, rounding and the CUDA conversion intrinsics, bit-exact.

One table, :data:`FORMATS`, describes every element format the warp-level units
read or write, by PTX name (f64 f32 tf32 bf16 f16 e4m3 e5m2 s32 s8 u8 s4 u4 b1; the older
names fp16/fp32/fp64 stay as aliases).
:func:`round_to` rounds float32 (or float64) values onto a format's value set
with a chosen rounding mode, and the ``float2half_rn``-style functions reproduce
the CUDA conversions bit for bit, NaN outputs included, as measured on an H100
(``tests/data/h100_warp.npz``, keys ``cvt_x`` / ``cvt_out``).

Everything is computed with unsigned integer operations on the bit patterns
(uint32 for float32 inputs), never with XLA's float converts: those may flush
subnormals on some backends and do not reproduce the GPU's NaN bits.
``lax.reduce_precision`` is not used either, because it flushes values that are
subnormal in the *target* format to zero (it gives 0 for 0.9 * 2**-24 where fp16
has 2**-24); the integer path below agrees with it everywhere else.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jax import lax

from jaxwarp._src import checks
from jaxwarp._src.numerics import bits as _bitops

__all__ = [
    "CVT_FUNCTIONS",
    "FLOAT_FORMATS",
    "FORMATS",
    "ROUNDING_MODES",
    "Format",
    "bfloat162float",
    "bits",
    "float2bfloat16_rn",
    "float2bfloat16_rz",
    "float2half_rn",
    "float2half_rz",
    "float_to_tf32",
    "from_bits",
    "get_format",
    "half2float",
    "round_to",
]


@dataclasses.dataclass(frozen=True)
class Format:
    """An element format as the GPU stores and interprets it.

    Attributes:
      name: the PTX name (``"f16"``, ``"tf32"``, ``"e4m3"``, ``"s8"`` ...). Older names
        (``"fp16"``, ``"fp32"``, ``"fp64"``) and dtype names are accepted as aliases by
        :func:`get_format` and by every function that takes a format (:data:`ALIASES`).
      kind: ``"float"`` or ``"int"``.
      bits: significant bits of one element (19 for tf32, 4 for int4, 1 for b1).
      storage_dtype: the dtype jaxwarp holds one element in (tf32 lives in a float32
        whose low 13 fraction bits the tensor core ignores; s4 in an int8 in [-8, 7],
        u4 in a uint8 in [0, 15], b1 in a uint8 0/1; e4m3/e5m2 in ml_dtypes'
        ``float8_e4m3fn`` / ``float8_e5m2``).
      uint_dtype: the unsigned integer dtype as wide as ``storage_dtype`` (what
        :func:`bits` returns).
      exponent_bits: exponent field width (0 for integer formats); taken from
        ``ml_dtypes.finfo`` where the format has its own dtype.
      mantissa_bits: stored fraction bits (0 for integer formats); likewise.
      signed: whether negative values exist.
      has_inf: whether the format encodes infinities (e4m3 does not).
      has_nan: whether the format encodes NaNs.
      min_value: most negative finite value (a Python int for integer formats).
      max_value: largest finite value (448 for e4m3: its top code is NaN, not a number).
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

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def bias(self) -> int:
        """Exponent bias (floats only)."""
        return (1 << (self.exponent_bits - 1)) - 1

    @property
    def min_normal(self) -> float:
        """Smallest positive normal value (floats only)."""
        return 2.0 ** (1 - self.bias)

    @property
    def min_subnormal(self) -> float:
        """Smallest positive subnormal value (floats only)."""
        return 2.0 ** (1 - self.bias - self.mantissa_bits)


def _float_format(name: str, dtype: Any, *, exponent_bits: int | None = None,
                  mantissa_bits: int | None = None) -> Format:
    fi = ml_dtypes.finfo(dtype)
    eb = int(fi.nexp) if exponent_bits is None else exponent_bits
    mb = int(fi.nmant) if mantissa_bits is None else mantissa_bits
    # tf32 shares float32's dtype but keeps 10 fraction bits: its maximum is computed.
    max_value = float(fi.max) if mantissa_bits is None else (2.0 - 2.0**-mb) * 2.0**fi.maxexp / 2
    has_inf = bool(np.isinf(np.array(np.inf).astype(dtype)))
    dt = np.dtype(dtype)
    return Format(name, "float", 1 + eb + mb, dt, _bitops.uint_dtype(8 * dt.itemsize), eb, mb,
                  signed=True, has_inf=has_inf, has_nan=True, min_value=-max_value,
                  max_value=max_value)


def _int_format(name: str, bits: int, signed: bool, dtype: Any) -> Format:
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    dt = np.dtype(dtype)
    return Format(name, "int", bits, dt, _bitops.uint_dtype(8 * dt.itemsize), signed=signed,
                  min_value=lo, max_value=hi)


#: Other names accepted for each format (older jaxwarp names, dtype names, CUDA names).
ALIASES: dict[str, str] = {
    "fp16": "f16", "half": "f16", "float16": "f16",
    "bfloat16": "bf16",
    "fp32": "f32", "float": "f32", "float32": "f32",
    "fp64": "f64", "double": "f64", "float64": "f64",
    "fp8_e4m3": "e4m3", "float8_e4m3fn": "e4m3", "e4m3fn": "e4m3",
    "fp8_e5m2": "e5m2", "float8_e5m2": "e5m2",
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
    _int_format("s32", 32, True, np.int32),
    _int_format("s8", 8, True, np.int8),
    _int_format("u8", 8, False, np.uint8),
    _int_format("s4", 4, True, np.int8),
    _int_format("u4", 4, False, np.uint8),
    _int_format("b1", 1, False, np.uint8),
))


#: Names of the floating-point formats (what round_to accepts as ``fmt``).
FLOAT_FORMATS = tuple(name for name, f in FORMATS.items() if f.is_float)

#: Rounding modes of :func:`round_to`, named as in PTX (``cvt.rn``, ``cvt.rz``, ``cvt.rna``).
ROUNDING_MODES = ("rn", "rz", "rna")

# The float format of each input dtype round_to accepts.
_SOURCE_FORMAT = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64"}


def get_format(name: str | Format, argname: str = "name",
               allowed: tuple[str, ...] | None = None) -> Format:
    """Returns the :class:`Format` called ``name``.

    Args:
      name: a format name (see :data:`FORMATS`) or a :class:`Format`, returned as is.
      argname: the argument name to use in error messages.
      allowed: restricts the accepted names (default: every name in :data:`FORMATS`).

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
    if isinstance(name, Format):
        name = name.name
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


def _float_input(x: Any, name: str) -> jax.Array:
    """Checks that ``x`` is a float32 or float64 array and returns it.

    A float64 NumPy input with x64 off raises (JAX would narrow it to float32 first,
    rounding twice); see the 64-bit policy in ``checks``.
    """
    arr = checks.array_arg(x, name)
    if arr.dtype not in _SOURCE_FORMAT:
        raise TypeError(f"{name} must be a float32 array (or float64 with jax_enable_x64), "
                        f"got dtype {arr.dtype}")
    return arr


def _uint32_input(u: Any, name: str) -> jax.Array:
    arr = checks.array_arg(u, name)
    if arr.dtype not in (jnp.dtype(jnp.uint32), jnp.dtype(jnp.int32)):
        raise TypeError(f"{name} must be a uint32 (or int32) array of bits, got dtype {arr.dtype}")
    return lax.bitcast_convert_type(arr, jnp.uint32) if arr.dtype == jnp.int32 else arr


# --------------------------------------------------------------------------------------
# Integer kernels. All work on the unsigned bit pattern ``u`` of a source float format
# ``src`` (uint32 for fp32, uint64 for fp64) using only operations of that width.
# --------------------------------------------------------------------------------------


def _round_bits(u: jax.Array, src: Format, dst: Format, mode: str) -> jax.Array:
    """Rounds the ``src``-encoded values ``u`` onto ``dst``'s value set; result in ``src`` bits.

    Finite values: the significand is cut at ``dst``'s quantum for the value's exponent
    (wider in ``dst``'s subnormal range) and rounded per ``mode``; a carry ripples into
    the exponent field. Results above ``dst``'s largest finite value become inf (rn, rna)
    or that largest value (rz). Infinities pass through. NaNs keep their sign and the top
    ``dst.mantissa_bits`` of their payload; if that leaves no payload, the quiet bit is set.
    """
    t = u.dtype.type
    ms, mt = src.mantissa_bits, dst.mantissa_bits
    if dst.exponent_bits >= src.exponent_bits and mt >= ms:
        return u
    sign_bit = 1 << (src.bits - 1)
    inf_bits = ((1 << src.exponent_bits) - 1) << ms
    sign = u & t(sign_bit)
    mag = u & t(sign_bit - 1)
    exp = mag >> t(ms)
    exp_eff = jnp.maximum(exp, t(1))  # subnormals share the scale of exponent 1
    sig = jnp.where(exp != 0, mag & t((1 << ms) - 1) | t(1 << ms), mag)

    # Number of low significand bits below dst's quantum.
    drop = ms - mt
    dst_min_exp = 1 - dst.bias + src.bias  # dst's smallest normal exponent, in src bias
    if dst_min_exp > 1:
        extra = jnp.where(exp_eff < t(dst_min_exp), t(dst_min_exp) - exp_eff, t(0))
        shift = jnp.minimum(t(drop) + extra, t(ms + 2))  # beyond ms + 1 everything is dropped
    else:
        shift = jnp.full_like(u, drop)
    unit = t(1) << shift
    q = sig >> shift
    rem = sig & (unit - t(1))
    half = unit >> t(1)
    if mode == "rz":
        inc = jnp.zeros_like(u)
    elif mode == "rna":
        inc = ((rem != 0) & (rem >= half)).astype(u.dtype)
    else:  # rn: ties to even
        tie_up = (rem == half) & (rem != 0) & ((q & t(1)) == 1)
        inc = ((rem > half) | tie_up).astype(u.dtype)
    sig = (q + inc) << shift
    # (exp_eff - 1) << ms plus the significand (implicit bit included) re-encodes the value,
    # letting a rounding carry move into the exponent field.
    out = jnp.where(sig == 0, t(0), ((exp_eff - t(1)) << t(ms)) + sig)

    if dst.exponent_bits < src.exponent_bits or not dst.has_inf:
        # dst's largest finite value in src's encoding (448 for e4m3, whose all-ones
        # exponent field still holds numbers). Beyond it: +-max under rz, else +-inf,
        # or NaN for a format without infinities (e4m3, as ml_dtypes' conversion does).
        max_bits = int(np.array(dst.max_value, src.storage_dtype).view(u.dtype))
        over = out > t(max_bits)
        nan_bits = inf_bits | (1 << (ms - 1))
        big = t(inf_bits) if dst.has_inf else t(nan_bits)
        out = jnp.where(over, t(max_bits) if mode == "rz" else big, out)

    nan_payload = mag & t(~((1 << (ms - mt)) - 1) & (sign_bit - 1))
    nan = jnp.where(nan_payload == t(inf_bits), t(inf_bits | (1 << (ms - 1))), nan_payload)
    inf_out = mag if dst.has_inf else t(inf_bits | (1 << (ms - 1)))  # e4m3: inf -> NaN
    out = jnp.where(mag > t(inf_bits), nan, jnp.where(mag == t(inf_bits), inf_out, out))
    return sign | out


def _narrow_bits(u: jax.Array, src: Format, dst: Format, nan_bits: int) -> jax.Array:
    """Re-encodes ``src`` bits already representable in ``dst`` as ``dst`` bits (same dtype).

    NaNs become ``nan_bits`` whatever their sign and payload.
    """
    t = u.dtype.type
    ms, mt = src.mantissa_bits, dst.mantissa_bits
    sign_bit = 1 << (src.bits - 1)
    inf_src = ((1 << src.exponent_bits) - 1) << ms
    inf_dst = ((1 << dst.exponent_bits) - 1) << mt
    mag = u & t(sign_bit - 1)
    exp = mag >> t(ms)
    frac = mag & t((1 << ms) - 1)
    rebias = src.bias - dst.bias  # dst exponent = src exponent - rebias
    normal = (((exp - t(rebias)) << t(mt)) | (frac >> t(ms - mt))) if rebias else mag >> t(ms - mt)
    if rebias:
        # Below dst's normal range: a dst subnormal (exact after _round_bits) or zero.
        sig = jnp.where(exp != 0, frac | t(1 << ms), frac)
        extra = t(rebias + 1) - jnp.maximum(exp, t(1))
        shift = jnp.minimum(t(ms - mt) + extra, t(ms + 1))
        normal = jnp.where(exp > t(rebias), normal, sig >> shift)
    sign = (u >> t(src.bits - dst.bits)) & t(1 << (dst.bits - 1))
    out = jnp.where(mag >= t(inf_src), t(inf_dst), normal)
    return jnp.where(mag > t(inf_src), t(nan_bits), sign | out)


def _widen_bits(u: jax.Array, src: Format, dst: Format, nan_bits: int) -> jax.Array:
    """Exactly re-encodes ``src`` bits (low bits of a uint32) as ``dst`` bits; NaN -> nan_bits."""
    t = u.dtype.type
    ms, mt = src.mantissa_bits, dst.mantissa_bits
    sign = (u >> t(src.bits - 1) & t(1)) << t(dst.bits - 1)
    mag = u & t((1 << (src.bits - 1)) - 1)
    exp = mag >> t(ms)
    frac = mag & t((1 << ms) - 1)
    inf_src = ((1 << src.exponent_bits) - 1) << ms
    inf_dst = ((1 << dst.exponent_bits) - 1) << mt
    rebias = dst.bias - src.bias
    out = ((exp + t(rebias)) << t(mt)) | (frac << t(mt - ms))
    if rebias:
        # src subnormal: normalise. Its leading one sits at bit p = 31 - clz(frac) < ms,
        # value = 2**(p - ms + 1 - src.bias) * 1.f.
        p = t(31) - lax.clz(frac)
        sub = ((p + t(1 - ms + rebias)) << t(mt)) | ((frac << (t(mt) - p)) & t((1 << mt) - 1))
        out = jnp.where(exp == 0, jnp.where(frac == 0, t(0), sub), out)
    out = jnp.where(mag >= t(inf_src), t(inf_dst), out)
    return jnp.where(mag > t(inf_src), t(nan_bits), sign | out)


@functools.partial(jax.jit, static_argnums=(1, 2))
def _rounding_fn(x: jax.Array, fmt: str, mode: str) -> jax.Array:
    src = FORMATS[_SOURCE_FORMAT[x.dtype]]
    u = _bitops.uint_view(x)
    return lax.bitcast_convert_type(_round_bits(u, src, FORMATS[fmt], mode), x.dtype)


# Straight-through estimator: rounding is piecewise constant, so its true derivative is
# zero almost everywhere; like reduce_precision's JVP rule, pass the tangent through.
_round_ste = jax.custom_jvp(_rounding_fn, nondiff_argnums=(1, 2))


@_round_ste.defjvp
def _round_ste_jvp(fmt, mode, primals, tangents):
    (x,), (dx,) = primals, tangents
    return _round_ste(x, fmt, mode), dx


def round_to(x: Any, fmt: str | Format, mode: str = "rn") -> jax.Array:
    """Rounds values to the nearest representable values of ``fmt``, kept in ``x``'s dtype.

    This is what a GPU conversion to ``fmt`` followed by the exact widening back does,
    e.g. ``__half2float(__float2half_rn(x))`` for ``round_to(x, "fp16")`` (apart from NaN
    bits, which the CUDA conversions canonicalise; see :func:`float2half_rn`).

    Finite values: ``"rn"`` rounds to nearest, ties to even; ``"rz"`` toward zero;
    ``"rna"`` to nearest, ties away from zero (PTX ``cvt.rna``). Values in ``fmt``'s
    subnormal range are rounded on its subnormal grid (fp16's ``2**-24``). A result
    beyond ``fmt``'s largest finite value overflows to ±inf under ``"rn"`` and
    ``"rna"`` (NaN for ``"e4m3"``, which has no infinity) and saturates to ±max under
    ``"rz"``. (For the fp8 conversions of CUDA and PTX, with their ``satfinite``
    rules, use ``jaxwarp.fp8``.) ±0 and ±inf are returned unchanged.
    NaN stays NaN with its sign and the top ``fmt.mantissa_bits`` of its payload (as the
    H100's ``cvt.rna.tf32.f32`` does); if that leaves no payload bit, the quiet bit is set.
    Computed with integer operations on the bits only, so the result is the same on CPU,
    GPU and TPU. The gradient is the identity (straight-through).

    Args:
      x: float32 array (or float64 when ``jax_enable_x64`` is on), any shape.
      fmt: static float format name: ``"f16"``, ``"bf16"``, ``"tf32"``, ``"f32"``,
        ``"f64"``, ``"e4m3"``, ``"e5m2"``, an alias (``"fp16"``, ...), or a
        :class:`Format`. A format at least as wide as ``x`` is the identity.
      mode: static rounding mode, one of ``"rn"``, ``"rz"``, ``"rna"``.

    Returns:
      An array of ``x``'s dtype and shape holding values representable in ``fmt``.

    Raises:
      TypeError: ``x`` is not float32/float64, or ``fmt`` / ``mode`` is traced.
      ValueError: ``fmt`` or ``mode`` is not one of the allowed values.

    Example:
      >>> import jax.numpy as jnp
      >>> round_to(jnp.float32(1 + 2**-11), "f16")          # a tie: to even
      Array(1., dtype=float32)
      >>> round_to(jnp.float32(70000.0), "fp16", mode="rz")  # saturates ("fp16": alias)
      Array(65504., dtype=float32)
      >>> round_to(jnp.float32(300.0), "e4m3")               # 288 and 320 are e4m3 values
      Array(288., dtype=float32)
    """
    fmt = get_format(fmt, "fmt", FLOAT_FORMATS).name
    mode = checks.static_choice(mode, "mode", ROUNDING_MODES)
    return _round_ste(_float_input(x, "x"), fmt, mode)


# --------------------------------------------------------------------------------------
# CUDA conversions. Each has a bits -> bits kernel (what conformance calls) and a typed
# public wrapper.
# --------------------------------------------------------------------------------------

_FP32, _FP16, _BF16, _TF32 = (FORMATS[n] for n in ("f32", "f16", "bf16", "tf32"))
# What the H100 returns for any NaN input (sign and payload dropped).
_CANONICAL_NAN = {"f16": 0x7FFF, "bf16": 0x7FFF, "f32": 0x7FFFFFFF}


def _to_16_bits(dst: Format, mode: str):
    def kernel(u: jax.Array) -> jax.Array:
        u = _uint32_input(u, "u")
        rounded = _round_bits(u, _FP32, dst, mode)
        return _narrow_bits(rounded, _FP32, dst, _CANONICAL_NAN[dst.name])

    kernel.__name__ = f"_f32_bits_to_{dst.name}_{mode}"
    return jax.jit(kernel)


_float2half_rn_bits = _to_16_bits(_FP16, "rn")
_float2bfloat16_rn_bits = _to_16_bits(_BF16, "rn")
_float2half_rz_bits = _to_16_bits(_FP16, "rz")
_float2bfloat16_rz_bits = _to_16_bits(_BF16, "rz")


@jax.jit
def _float_to_tf32_bits(u: jax.Array) -> jax.Array:
    u = _uint32_input(u, "u")
    # A NaN is truncated, not rounded: its low 13 bits are cleared, so a NaN whose payload
    # lies only there becomes inf (0x7F800001 -> 0x7F800000 on the H100).
    nan = (u & jnp.uint32(0x7FFFFFFF)) > jnp.uint32(0x7F800000)
    return jnp.where(nan, u & jnp.uint32(_bitops.TF32_MASK), _round_bits(u, _FP32, _TF32, "rna"))


def _f32_arg(x: Any) -> jax.Array:
    arr = checks.array_arg(x, "x")  # float64 with x64 off: TypeError, not a double rounding
    if arr.dtype != jnp.float32:
        hint = (" (for float64 use round_to(x, fmt), which rounds once)"
                if arr.dtype == jnp.float64 else "")
        raise TypeError(f"x must be a float32 array, got dtype {arr.dtype}{hint}")
    return lax.bitcast_convert_type(arr, jnp.uint32)


def _as16(u32: jax.Array, dtype: Any) -> jax.Array:
    return lax.bitcast_convert_type(u32.astype(jnp.uint16), dtype)


def float2half_rn(x: Any) -> jax.Array:
    """CUDA ``__float2half_rn``: float32 to fp16, round to nearest even.

    Bit-exact with the H100 (``cvt.rn.f16.f32``): fp16 subnormals are produced (no
    flush), values from 65520 up overflow to ±inf, ±inf stay ±inf, and every NaN becomes
    the canonical ``0x7FFF`` (sign and payload dropped).

    Args:
      x: float32 array, any shape.

    Returns:
      float16 array of ``x``'s shape.

    Raises:
      TypeError: ``x`` is not float32.

    Example:
      >>> import jax.numpy as jnp
      >>> float2half_rn(jnp.float32(65520.0))
      Array(inf, dtype=float16)
    """
    return _as16(_float2half_rn_bits(_f32_arg(x)), jnp.float16)


def float2half_rz(x: Any) -> jax.Array:
    """CUDA ``__float2half_rz``: float32 to fp16, round toward zero.

    Bit-exact with the H100: finite values beyond 65504 saturate to ±65504 (``0x7BFF``),
    ±inf stay ±inf, subnormals are truncated onto fp16's subnormal grid, and every NaN
    becomes ``0x7FFF``.

    Args:
      x: float32 array, any shape.

    Returns:
      float16 array of ``x``'s shape.

    Raises:
      TypeError: ``x`` is not float32.

    Example:
      >>> import jax.numpy as jnp
      >>> float(float2half_rz(jnp.float32(1e6)))
      65504.0
    """
    return _as16(_float2half_rz_bits(_f32_arg(x)), jnp.float16)


def float2bfloat16_rn(x: Any) -> jax.Array:
    """CUDA ``__float2bfloat16_rn``: float32 to bfloat16, round to nearest even.

    Bit-exact with the H100: keeps float32 subnormals (rounded), overflows to ±inf past
    the largest bfloat16, and every NaN becomes ``0x7FFF``.

    Args:
      x: float32 array, any shape.

    Returns:
      bfloat16 array of ``x``'s shape.

    Raises:
      TypeError: ``x`` is not float32.

    Example:
      >>> import jax.numpy as jnp
      >>> float2bfloat16_rn(jnp.float32(1 + 2**-8))  # a tie: to even
      Array(1, dtype=bfloat16)
    """
    return _as16(_float2bfloat16_rn_bits(_f32_arg(x)), jnp.bfloat16)


def float2bfloat16_rz(x: Any) -> jax.Array:
    """CUDA ``__float2bfloat16_rz``: float32 to bfloat16, round toward zero.

    Bit-exact with the H100: the low 16 bits are cut off, except that every NaN becomes
    ``0x7FFF`` (so no NaN turns into an infinity or changes sign).

    Args:
      x: float32 array, any shape.

    Returns:
      bfloat16 array of ``x``'s shape.

    Raises:
      TypeError: ``x`` is not float32.

    Example:
      >>> import jax.numpy as jnp
      >>> float2bfloat16_rz(jnp.float32(1.999))
      Array(1.99219, dtype=bfloat16)
    """
    return _as16(_float2bfloat16_rz_bits(_f32_arg(x)), jnp.bfloat16)


def float_to_tf32(x: Any) -> jax.Array:
    """CUDA ``nvcuda::wmma::__float_to_tf32`` (PTX ``cvt.rna.tf32.f32``).

    Rounds to 10 fraction bits, to nearest with ties *away* from zero, and returns a
    float32 whose low 13 bits are zero. Bit-exact with the H100: float32 subnormals are
    rounded, not flushed; ``0x7F7FFFFF`` (float32 max) rounds up to inf; ±inf stay ±inf.
    A NaN keeps its sign and the top 10 bits of its payload, quiet bit *not* forced (a
    signalling ``0x7F8829D6`` gives ``0x7F882000``); a NaN whose payload lies only in the
    low 13 bits becomes inf (``0x7F800001`` gives ``0x7F800000``, seen through WMMA in
    ``tests/data/capture_extra_mma.npz``). ``round_to(x, "tf32", "rna")`` differs here: it
    keeps every NaN a NaN.

    Args:
      x: float32 array, any shape.

    Returns:
      float32 array of ``x``'s shape.

    Raises:
      TypeError: ``x`` is not float32.

    Example:
      >>> import jax.numpy as jnp
      >>> float_to_tf32(jnp.float32(1 + 2**-11))  # a tie: away from zero
      Array(1.0009766, dtype=float32)
    """
    return lax.bitcast_convert_type(_float_to_tf32_bits(_f32_arg(x)), jnp.float32)


@functools.partial(jax.jit, static_argnums=1)
def _widen_to_f32(x: jax.Array, src: Format) -> jax.Array:
    u = lax.bitcast_convert_type(x, jnp.uint16).astype(jnp.uint32)
    out = _widen_bits(u, src, _FP32, _CANONICAL_NAN["f32"])
    return lax.bitcast_convert_type(out, jnp.float32)


def _widen(x: Any, dtype: Any, src: Format) -> jax.Array:
    arr = jnp.asarray(x)
    if arr.dtype != dtype:
        raise TypeError(f"x must be a {np.dtype(dtype).name} array, got dtype {arr.dtype}")
    return _widen_to_f32(arr, src)


def half2float(x: Any) -> jax.Array:
    """CUDA ``__half2float``: fp16 to float32, exact.

    Every finite fp16 value (subnormals included, computed with integer operations so no
    backend flushes them) and ±inf are represented exactly. NaN: the capture holds no
    fp16 inputs; the model returns the canonical ``0x7FFFFFFF``, as the H100 does for
    NaNs in the narrowing direction.

    Args:
      x: float16 array, any shape.

    Returns:
      float32 array of ``x``'s shape.

    Raises:
      TypeError: ``x`` is not float16.

    Example:
      >>> import jax.numpy as jnp
      >>> half2float(jnp.float16(2**-24))
      Array(5.9604645e-08, dtype=float32)
    """
    checks.check_64bit(x, "x")
    return _widen(x, jnp.float16, _FP16)


def bfloat162float(x: Any) -> jax.Array:
    """CUDA ``__bfloat162float``: bfloat16 to float32, exact (the bits shifted left by 16).

    NaN: not in the capture; the model returns the canonical ``0x7FFFFFFF``, as the H100
    does for NaNs in the narrowing direction.

    Args:
      x: bfloat16 array, any shape.

    Returns:
      float32 array of ``x``'s shape.

    Raises:
      TypeError: ``x`` is not bfloat16.

    Example:
      >>> import jax.numpy as jnp
      >>> bfloat162float(jnp.bfloat16(1.5))
      Array(1.5, dtype=float32)
    """
    checks.check_64bit(x, "x")
    return _widen(x, jnp.bfloat16, _BF16)


# --------------------------------------------------------------------------------------
# Bit views.
# --------------------------------------------------------------------------------------

# Formats whose elements fill whole bytes, so from_bits can bitcast to them.
_BYTE_FORMATS = ("f16", "bf16", "tf32", "f32", "f64", "e4m3", "e5m2", "s32", "s8", "u8")


def bits(x: Any) -> jax.Array:
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
      >>> bits(jnp.float16(1.0))
      Array(15360, dtype=uint16)
    """
    arr = checks.array_arg(x, "x", complex_ok=True)  # 64-bit with x64 off: TypeError
    if jnp.issubdtype(arr.dtype, jnp.complexfloating):
        raise TypeError(f"x must be a real (float or integer) array, got dtype {arr.dtype}")
    if arr.dtype == jnp.bool_ or arr.dtype.itemsize not in (1, 2, 4, 8) or arr.dtype in (
            jnp.dtype(ml_dtypes.int4), jnp.dtype(ml_dtypes.uint4)):
        raise TypeError(f"x must have an 8, 16, 32 or 64-bit dtype, got dtype {arr.dtype}")
    return _bitops.uint_view(arr)


def from_bits(u: Any, fmt: str | Format) -> jax.Array:
    """Interprets raw bits as values of ``fmt`` (the inverse of :func:`bits`).

    Args:
      u: integer array holding the bits. Its width must equal ``fmt``'s storage width,
        or be 32 bits for a narrower format (the zero-extended results of
        :data:`CVT_FUNCTIONS`), in which case the low bits are used.
      fmt: static format name whose storage is a whole number of bytes: ``"f16"``,
        ``"bf16"``, ``"tf32"``, ``"f32"``, ``"f64"``, ``"e4m3"``, ``"e5m2"``, ``"s32"``,
        ``"s8"``, ``"u8"`` (or an alias such as ``"fp16"``).

    Returns:
      Array of ``fmt.storage_dtype`` and ``u``'s shape.

    Raises:
      TypeError: ``u`` is not an integer array of an accepted width.
      ValueError: ``fmt`` is not one of the allowed names.

    Example:
      >>> import jax.numpy as jnp
      >>> from_bits(jnp.uint32(0x3C00), "fp16")
      Array(1., dtype=float16)
    """
    f = get_format(fmt, "fmt", _BYTE_FORMATS)
    arr = checks.array_arg(u, "u", complex_ok=True)  # 64-bit with x64 off: TypeError
    width = f.storage_dtype.itemsize
    if not jnp.issubdtype(arr.dtype, jnp.integer) or arr.dtype.itemsize not in (width, 4) or (
            arr.dtype.itemsize == 4 and width > 4):
        given = fmt if isinstance(fmt, str) else f.name
        raise TypeError(f"u must be an integer array of {8 * width} bits (or 32 bits) for "
                        f"fmt={given!r}, got dtype {arr.dtype}")
    if arr.dtype.itemsize != width:
        arr = _bitops.uint_view(arr).astype(_bitops.uint_dtype(8 * width))
    return lax.bitcast_convert_type(arr, f.storage_dtype)



#: The ``cvt_out`` rows of the H100 capture, in order: (name, fn), each fn mapping uint32
#: fp32 bits to uint32 result bits (16-bit results zero-extended).
CVT_FUNCTIONS = (
    ("float2half_rn", _float2half_rn_bits),
    ("float2bfloat16_rn", _float2bfloat16_rn_bits),
    ("float_to_tf32", _float_to_tf32_bits),
    ("float2half_rz", _float2half_rz_bits),
    ("float2bfloat16_rz", _float2bfloat16_rz_bits),
)
