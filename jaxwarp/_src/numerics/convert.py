"""Rounding onto a format and the CUDA conversion intrinsics, bit-exact.

:func:`round_to` rounds float32 (or float64) values onto a format's value set with a
chosen rounding mode, and the ``float2half_rn``-style functions reproduce the CUDA
conversions bit for bit, NaN outputs included, as measured on an H100
(``tests/data/h100_warp.npz``, keys ``cvt_x`` / ``cvt_out``).

Every rounding is done by the soft-float engine (``softfloat.py``: decode, round_sig,
encode) on the bit patterns, with uint32 operations for float32 sources and uint64 ones for
float64 sources (x64 on), so a float64 value is rounded once, straight onto the target
grid, never through float32. XLA's float converts are not used: they may flush subnormals
on some backends and do not reproduce the GPU's NaN bits. ``lax.reduce_precision`` is not
used either: it flushes values that are subnormal in the *target* format to zero (it gives
0 for 0.9 * 2**-24 where fp16 has 2**-24) and has no rz / rna; the integer path agrees with
it everywhere else.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxwarp._src import checks
from jaxwarp._src.numerics import bitops, softfloat, user_formats
from jaxwarp._src.numerics.formats import (
    ALIASES,
    FLOAT_FORMATS,
    FORMATS,
    ROUNDING_MODES,
    Format,
    get_format,
)

__all__ = [
    "CVT_FUNCTIONS",
    "bfloat162float",
    "float2bfloat16_rn",
    "float2bfloat16_rz",
    "float2half_rn",
    "float2half_rz",
    "float_to_tf32",
    "half2float",
    "narrow_to",
    "round_to",
]

# The float format of each input dtype round_to and the conversions accept.
_SOURCE_FORMAT = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64"}


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
# Kernels on bit patterns: ``u`` holds values of the float format ``src`` ("f32" in uint32,
# "f64" in uint64); every rounding is one softfloat.round_sig.
# --------------------------------------------------------------------------------------


def _round_once(u: jax.Array, src: str, dst: Format, mode: str):
    """Decodes ``src`` bits and rounds them once onto ``dst``'s grid (subnormals included,
    exponent unbounded above): ``(neg, q, lsb, inf, nan)``, value ``(-1)**neg * q * 2**lsb``."""
    neg, lsb, sig, _, inf, nan = softfloat.decode(u, src)
    q, lsb = softfloat.round_sig(sig.astype(u.dtype), lsb, dst.min_exponent,
                                 dst.mantissa_bits, mode)
    return neg, q, lsb, inf, nan


def _round_bits(u: jax.Array, src: str, dst: Format, mode: str) -> jax.Array:
    """Rounds the ``src``-encoded values ``u`` onto ``dst``'s value set; result in ``src`` bits.

    Finite values are rounded once (:func:`_round_once`) and re-encoded exactly in ``src``.
    Results above ``dst``'s largest finite value become inf (rn, rna) or that largest
    value (rz); for a format without infinities (e4m3) NaN instead of inf, as ml_dtypes'
    conversion does, and for one without NaN either (e3m2, e2m3, e2m1) the largest value
    in every mode. Infinities pass through (e4m3, ue4m3, ue8m0: NaN; fp6 / fp4: ±max). NaNs
    keep their sign and the top ``dst.mantissa_bits`` of their payload; if that leaves no
    payload, the quiet bit is set. Unsigned formats: a negative result is NaN, except that
    a zero loses its sign (ue4m3); ue8m0 has no zero: ±0 is NaN, and a positive value below
    its smallest ``2**-127`` becomes ``2**-127`` in every mode.
    """
    s = FORMATS[src]
    t = u.dtype.type
    ms, mt = s.mantissa_bits, dst.mantissa_bits
    if dst.exponent_bits >= s.exponent_bits and mt >= ms:
        return u
    sign_bit = s.sign_bit
    inf_bits = ((1 << s.exponent_bits) - 1) << ms
    quiet = 1 << (ms - 1)
    mag = u & t(sign_bit - 1)
    neg, q, lsb, _, _ = _round_once(u, src, dst, mode)
    out = softfloat.encode(jnp.zeros_like(neg), q, lsb, src)  # exact: dst's grid is in src's

    max_bits = int(np.array(dst.max_value, s.storage_dtype).view(s.uint_dtype))
    if dst.exponent_bits < s.exponent_bits or not dst.has_inf:
        # dst's largest finite value in src's encoding (448 for e4m3, whose all-ones
        # exponent field still holds numbers). Beyond it: +-max under rz, else +-inf,
        # or NaN for a format without infinities, or +-max for one without NaN either.
        big = (t(inf_bits) if dst.has_inf else t(inf_bits | quiet) if dst.has_nan
               else t(max_bits))
        out = jnp.where(out > t(max_bits), t(max_bits) if mode == "rz" else big, out)
    if not dst.has_zero:  # ue8m0: nothing below 2**-127 to round to
        min_bits = int(np.array(dst.min_value, s.storage_dtype).view(s.uint_dtype))
        out = jnp.where(out < t(min_bits), t(min_bits), out)

    nan_payload = mag & t(~((1 << (ms - mt)) - 1) & (sign_bit - 1))
    nan = jnp.where(nan_payload == t(inf_bits), t(inf_bits | quiet), nan_payload)
    # inf: passes through, or NaN (e4m3, ue4m3, ue8m0), or max (fp6 / fp4: no NaN).
    inf_out = mag if dst.has_inf else t(inf_bits | quiet) if dst.has_nan else t(max_bits)
    out = jnp.where(mag > t(inf_bits), nan, jnp.where(mag == t(inf_bits), inf_out, out))
    out = (u & t(sign_bit)) | out
    if not dst.signed:  # no sign: a negative result is NaN, a zero loses its sign
        out = jnp.where((out > t(sign_bit)) & (mag <= t(inf_bits)), t(inf_bits | quiet), out)
        out = jnp.where(out == t(sign_bit), t(0), out)
    if not dst.has_zero:
        out = jnp.where(mag == 0, t(inf_bits | quiet), out)
    return out


def _narrow_bits(u: jax.Array, src: str, dst: Format, mode: str, nan_bits: int) -> jax.Array:
    """Rounds ``src`` bits once into ``dst`` bits (uint32): a CUDA conversion to f16 / bf16.

    Beyond ``dst``'s largest finite value: ±inf under rn, ±max under rz; ±inf stay ±inf;
    every NaN becomes ``nan_bits``.
    """
    neg, q, lsb, inf, nan = _round_once(u, src, dst, mode)
    q = q.astype(jnp.uint32)  # q < 2**(dst.mantissa_bits + 1)
    code = softfloat.encode_rounded(neg, q, lsb, dst.name)  # saturates at inf
    inf_dst = ((1 << dst.exponent_bits) - 1) << dst.mantissa_bits
    sign = jnp.uint32(dst.sign_bit)
    if mode == "rz":  # no rounding up to inf: the largest finite value
        over = (code & ~sign) == jnp.uint32(inf_dst)
        code = jnp.where(over, (code & sign) | jnp.uint32(inf_dst - 1), code)
    code = jnp.where(inf, jnp.uint32(inf_dst) | (neg.astype(jnp.uint32) * sign), code)
    return jnp.where(nan, jnp.uint32(nan_bits), code)


def _widen_bits(u: jax.Array, src: Format, dst: Format, nan_bits: int) -> jax.Array:
    """Exactly re-encodes ``src`` bits (uint32) as ``dst`` bits (uint32); NaN -> nan_bits."""
    neg, lsb, sig, _, inf, nan = softfloat.decode(u, src.name)
    out = softfloat.encode(neg, sig.astype(jnp.uint32), lsb, dst.name)  # always representable
    inf_dst = ((1 << dst.exponent_bits) - 1) << dst.mantissa_bits
    out = jnp.where(inf, jnp.uint32(inf_dst) | (neg.astype(jnp.uint32) << (dst.bits - 1)), out)
    return jnp.where(nan, jnp.uint32(nan_bits), out)


@functools.partial(jax.jit, static_argnums=(1, 2))
def _rounding_fn(x: jax.Array, fmt: str, mode: str) -> jax.Array:
    u = bitops.uint_view(x)
    return lax.bitcast_convert_type(_round_bits(u, _SOURCE_FORMAT[x.dtype], FORMATS[fmt], mode),
                                    x.dtype)


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
    ``"rna"`` (NaN for ``"e4m3"``, ``"ue4m3"`` and ``"ue8m0"``, which have no
    infinity) and saturates to ±max under ``"rz"``. ``"e3m2"``, ``"e2m3"`` and
    ``"e2m1"`` have neither infinity nor NaN: beyond their largest value every mode
    saturates to ±max, and ±inf becomes ±max too (as ml_dtypes' conversion and PTX's
    ``cvt.satfinite`` do). (For the conversions of CUDA and PTX, with their
    ``satfinite`` rules, use ``jaxwarp.fp8``, ``jaxwarp.fp6`` and ``jaxwarp.fp4``.) ±0
    is returned unchanged, and so is ±inf in every mode for a format with infinities;
    ``"e4m3"`` has none, so ±inf becomes NaN (in every mode, as ml_dtypes'
    ``float8_e4m3fn`` does).
    NaN stays NaN with its sign and the top ``fmt.mantissa_bits`` of its payload (as the
    H100's ``cvt.rna.tf32.f32`` does); if that leaves no payload bit, the quiet bit is set.
    This holds for the formats without a NaN too (the result is in ``x``'s dtype, and no
    number of the format stands for a NaN; ml_dtypes gives -0 there).
    The unsigned scale formats: ``"ue4m3"`` (e4m3 without a sign) and ``"ue8m0"``
    (powers of two ``2**-127 .. 2**127``, no zero, no subnormals). A negative result is
    NaN, except that a zero loses its sign (``"ue4m3"``: ``-1e-9`` gives +0). ``"ue8m0"``
    has no zero: ±0 is NaN and a positive value below ``2**-127`` gives ``2**-127`` in
    every mode. With no fraction bits a tie (``1.5 * 2**k``) has two odd neighbours;
    ``"rn"`` takes the larger, as ``"rna"`` does (and as ml_dtypes'
    ``float8_e8m0fnu`` does).
    Computed with integer operations on the bits only, so the result is the same on CPU,
    GPU and TPU. The gradient is the identity (straight-through).

    Args:
      x: float32 array (or float64 when ``jax_enable_x64`` is on), any shape.
      fmt: static float format name: ``"f16"``, ``"bf16"``, ``"tf32"``, ``"f32"``,
        ``"f64"``, ``"e4m3"``, ``"e5m2"``, ``"e3m2"``, ``"e2m3"``, ``"e2m1"``,
        ``"ue8m0"``, ``"ue4m3"``, an alias (``"fp16"``, ``"float4_e2m1fn"``, ...), or a
        :class:`Format`. A format at least as wide as ``x`` is the identity. A format
        made by ``jaxwarp.define_format`` rounds by its own rules (its overflow rule;
        a NaN gives the canonical NaN of ``x``'s dtype).
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
      >>> round_to(jnp.float32([2.5, 100.0, -0.2]), "e2m1")  # tie to even; saturates
      Array([ 2.,  6., -0.], dtype=float32)
      >>> round_to(jnp.float32([3.0, 0.8, 0.0]), "ue8m0")    # powers of two; no zero
      Array([ 4.,  1., nan], dtype=float32)
    """
    f = get_format(fmt, "fmt", FLOAT_FORMATS, user=True)
    mode = checks.static_choice(mode, "mode", ROUNDING_MODES)
    if f.user_defined:  # its rules: jaxwarp.define_format
        return user_formats.round_to_user(_float_input(x, "x"), f, mode)
    return _round_ste(_float_input(x, "x"), f.name, mode)



# --------------------------------------------------------------------------------------
# CUDA conversions. Each has a bits -> bits kernel (what conformance calls) and a typed
# public wrapper on float32; :func:`narrow_to` also takes float64 (x64 on) and rounds it
# once, as PTX ``cvt.rn.f16.f64`` does.
# --------------------------------------------------------------------------------------

_FP32, _FP16, _BF16, _TF32 = (FORMATS[n] for n in ("f32", "f16", "bf16", "tf32"))
# What the H100 returns for any NaN input (sign and payload dropped).
_CANONICAL_NAN = {"f16": 0x7FFF, "bf16": 0x7FFF, "f32": 0x7FFFFFFF}


def _to_16(dst: Format, mode: str):
    """The conversion to ``dst`` under ``mode``: a jitted kernel of (bits, source format)."""
    def kernel(u: jax.Array, src: str) -> jax.Array:
        if (src, mode) == ("f32", "rn"):  # the same bits in a few integer operations
            inf = ((1 << dst.exponent_bits) - 1) << dst.mantissa_bits
            return softfloat.f32_to_rn_bits(u, dst.name, inf, _CANONICAL_NAN[dst.name])
        return _narrow_bits(u, src, dst, mode, _CANONICAL_NAN[dst.name])

    kernel.__name__ = f"_bits_to_{dst.name}_{mode}"
    return jax.jit(kernel, static_argnums=1)


def _f32_bits_kernel(kernel):
    """``kernel`` on uint32 float32 bits (the capture's rows)."""
    def f32_kernel(u: jax.Array) -> jax.Array:
        return kernel(_uint32_input(u, "u"), "f32")

    f32_kernel.__name__ = kernel.__name__.replace("_bits_", "_f32_bits_")
    return f32_kernel


_to_f16_rn = _to_16(_FP16, "rn")
_to_bf16_rn = _to_16(_BF16, "rn")
_to_f16_rz = _to_16(_FP16, "rz")
_to_bf16_rz = _to_16(_BF16, "rz")


@functools.partial(jax.jit, static_argnums=1)
def _to_tf32(u: jax.Array, src: str) -> jax.Array:
    """Source bits -> tf32 bits in a float32 word (uint32)."""
    if src == "f64":
        # One rna rounding onto the tf32 grid; NaN -> the canonical float32 NaN, truncated
        # (what __float_to_tf32 makes of the NaN a conversion to float32 returns).
        neg, q, lsb, inf, nan = _round_once(u, "f64", _TF32, "rna")
        out = softfloat.encode(neg, q.astype(jnp.uint32), lsb, "f32")
        out = jnp.where(inf, jnp.uint32(0x7F800000) | (neg.astype(jnp.uint32) << 31), out)
        return jnp.where(nan, jnp.uint32(_CANONICAL_NAN["f32"] & bitops.TF32_MASK), out)
    # A NaN is truncated, not rounded: its low 13 bits are cleared, so a NaN whose payload
    # lies only there becomes inf (0x7F800001 -> 0x7F800000 on the H100).
    # Ties away from zero on the magnitude bits: adding half of the kept lsb (0x1000) and
    # cutting the low 13 bits rounds |x| half up, subnormals and the overflow to inf
    # included (the same bits as ``_round_bits(u, "f32", _TF32, "rna")`` in two integer
    # operations); an infinity has nothing below its lsb and stays.
    nan = (u & jnp.uint32(0x7FFFFFFF)) > jnp.uint32(0x7F800000)
    rna = (u + jnp.uint32(0x1000)) & jnp.uint32(bitops.TF32_MASK)
    return jnp.where(nan, u & jnp.uint32(bitops.TF32_MASK), rna)


_float2half_rn_bits = _f32_bits_kernel(_to_f16_rn)
_float2bfloat16_rn_bits = _f32_bits_kernel(_to_bf16_rn)
_float2half_rz_bits = _f32_bits_kernel(_to_f16_rz)
_float2bfloat16_rz_bits = _f32_bits_kernel(_to_bf16_rz)
_float_to_tf32_bits = _f32_bits_kernel(_to_tf32)


def _f32_arg(x: Any) -> jax.Array:
    arr = checks.array_arg(x, "x")  # float64 with x64 off: TypeError, not a double rounding
    if arr.dtype != jnp.float32:
        hint = (" (for float64 use round_to(x, fmt), which rounds once)"
                if arr.dtype == jnp.float64 else "")
        raise TypeError(f"x must be a float32 array, got dtype {arr.dtype}{hint}")
    return lax.bitcast_convert_type(arr, jnp.uint32)


# The conversion narrow_to applies for each format: (kernel, result dtype).
_NARROW = {"f16": (_to_f16_rn, jnp.float16), "bf16": (_to_bf16_rn, jnp.bfloat16),
           "tf32": (_to_tf32, jnp.float32)}


def narrow_to(x: Any, fmt: str) -> jax.Array:
    """Float32 or float64 values to ``fmt``'s storage dtype, rounded once, as CUDA does.

    For float32 ``x`` this is :func:`float2half_rn`, :func:`float2bfloat16_rn` or
    :func:`float_to_tf32`, bit for bit. A float64 ``x`` (x64 on) is rounded once, straight
    from the double onto ``fmt``'s grid (PTX ``cvt.rn.f16.f64``, ``cvt.rn.bf16.f64``; tf32
    has no f64 form, so ``cvt.rna`` semantics on the double), never through float32: a
    double just above an f16 tie rounds up, where float32 would first round it onto the
    tie. NaN becomes the canonical NaN of the result (``0x7FFF``; tf32 ``0x7FFFE000``).

    Args:
      x: float32 array, or float64 with ``jax_enable_x64``.
      fmt: static, ``"f16"``, ``"bf16"`` or ``"tf32"``.

    Returns:
      float16 / bfloat16 / float32 (tf32 values) array of ``x``'s shape.

    Raises:
      TypeError: ``x`` is not float32 / float64.
      ValueError: ``fmt`` is not one of the allowed names.

    Example:
      >>> import jax.numpy as jnp
      >>> narrow_to(jnp.float32(1 + 2**-11), "f16")  # a tie: to even
      Array(1., dtype=float16)
    """
    fmt = checks.format_name(fmt, "fmt", tuple(_NARROW), ALIASES)
    return narrow(_float_input(x, "x"), fmt)


def narrow(x: jax.Array, fmt: str) -> jax.Array:
    """:func:`narrow_to` on arguments already checked: ``x`` a float32 / float64 JAX array
    (or tracer), ``fmt`` ``"f16"``, ``"bf16"`` or ``"tf32"``. For front-ends that check
    their operands once (``matmul``), so that the conversion does not check them again.

    Example:
      >>> import jax.numpy as jnp
      >>> narrow(jnp.float32(1 + 2**-8), "bf16")  # a tie: to even
      Array(1, dtype=bfloat16)
    """
    kernel, dtype = _NARROW[fmt]
    out = kernel(bitops.uint_view(x), _SOURCE_FORMAT[x.dtype])
    return lax.bitcast_convert_type(out.astype(bitops.uint_dtype(8 * np.dtype(dtype).itemsize)),
                                    dtype)


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


#: The ``cvt_out`` rows of the H100 capture, in order: (name, fn), each fn mapping uint32
#: fp32 bits to uint32 result bits (16-bit results zero-extended).
CVT_FUNCTIONS = (
    ("float2half_rn", _float2half_rn_bits),
    ("float2bfloat16_rn", _float2bfloat16_rn_bits),
    ("float_to_tf32", _float_to_tf32_bits),
    ("float2half_rz", _float2half_rz_bits),
    ("float2bfloat16_rz", _float2bfloat16_rz_bits),
)
