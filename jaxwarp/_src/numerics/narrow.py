"""Bit kernels of the conversions to and from the fp6, fp4 and ue8m0 formats (sm_100a /
sm_120a ``cvt`` and ``cuda_fp6.h`` / ``cuda_fp4.h`` / ``cuda_fp8.h``), on softfloat.

Each kernel (jitted, its format and mode arguments static) maps uint32 source bits
(zero-extended; uint64 for f64, x64 on) to uint32 result bits, one element per entry; the public
functions in ``fp6.py``, ``fp4.py`` and ``fp8.py`` check arguments (with the helpers at
the end of this module, shared by every fp8 / fp6 / fp4 conversion) and pack pairs into
register words. Every rounding is one :func:`~jaxwarp._src.numerics.softfloat.round_sig`;
format facts come from :data:`~jaxwarp._src.numerics.formats.FORMATS`.

The rules (PTX ISA, "Data Movement and Conversion Instructions: cvt", the ``.satfinite``
and ``.relu`` modifiers; the ``cuda_fp4.h`` / ``cuda_fp6.h`` / ``cuda_fp8.h`` function
documentation) are stated in the docstrings of the public functions. They follow the
documentation and are not verified on hardware (no sm_100a / sm_120a GPU was available).
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxwarp._src import checks
from jaxwarp._src.numerics import bitops, softfloat
from jaxwarp._src.numerics.formats import FORMATS

__all__ = [
    "E8M0_NAN",
    "E8M0_ROUNDINGS",
    "FP4_FORMATS",
    "FP6_FORMATS",
    "FP_ROUNDINGS",
    "bits_arg",
    "code_to_f16_bits",
    "e8m0_to_bf16_bits",
    "f32_pair_args",
    "max_code",
    "pair_arg",
    "to_code_bits",
    "to_e8m0_bits",
    "word_arg",
]

#: The fp6 and fp4 formats, by PTX name.
FP6_FORMATS = ("e2m3", "e3m2")
FP4_FORMATS = ("e2m1",)

#: Rounding modes of the ``cuda_fp4.h`` / ``cuda_fp6.h`` conversions, by PTX name:
#: ``cudaRoundNearest`` (ties to even) and ``cudaRoundZero``, the two the headers accept
#: (``cuda_fp6.hpp`` asserts one of them; the hardware ``cvt`` has only ``.rn``).
FP_ROUNDINGS = ("rn", "rz")

#: Rounding modes of the conversions to ue8m0 (PTX ``.frnd3``; ``cudaRoundZero``,
#: ``cudaRoundPosInf``).
E8M0_ROUNDINGS = ("rz", "rp")

#: ue8m0's NaN code.
E8M0_NAN = 0xFF

_NAN16 = 0x7FFF  # the canonical f16 / bf16 NaN


@functools.cache
def _max_code(fmt: str) -> int:
    """The code of the largest finite value (sign bit clear)."""
    f = FORMATS[fmt]
    n = (1 << (f.exponent_bits + f.mantissa_bits)) - 1
    return n - 1 if f.has_nan else n  # fp6/fp4: every code is a number


@functools.partial(jax.jit, static_argnums=(1, 2, 3, 4))
def to_code_bits(u: jax.Array, src: str, fmt: str, mode: str, relu: bool) -> jax.Array:
    """``src`` bits -> fp6 / fp4 codes (uint32), saturating: one rounding (``mode``: rn
    or rz) onto ``fmt``'s grid; beyond MAX_NORM (infinities included) ±MAX_NORM; NaN ->
    +MAX_NORM; with ``relu`` a negative result (-0 included) is +0."""
    u = u if src == "f64" else u.astype(jnp.uint32)
    f = FORMATS[fmt]
    neg, lsb, sig, _, inf, nan = softfloat.decode(u, src)
    q, lsb = softfloat.round_sig(sig.astype(u.dtype), lsb, softfloat.emin(fmt),
                                 f.mantissa_bits, mode)
    code = softfloat.encode_rounded(jnp.zeros_like(neg), q.astype(jnp.uint32), lsb, fmt)
    top = _max_code(fmt)
    over = (code > top) | inf
    code = jnp.where(over, jnp.uint32(top), code) | (neg.astype(jnp.uint32) << (f.bits - 1))
    code = jnp.where(nan, jnp.uint32(top), code)
    if relu:
        code = jnp.where(code >= (1 << (f.bits - 1)), jnp.uint32(0), code)
    return code


@functools.partial(jax.jit, static_argnums=(1, 2))
def code_to_f16_bits(c: jax.Array, fmt: str, relu: bool) -> jax.Array:
    """An fp6 / fp4 code (low bits of uint32 ``c``; higher bits ignored) -> f16 bits,
    exact; with ``relu`` a negative value (-0 included) is +0."""
    neg, lsb, sig, _, _, _ = softfloat.decode(c.astype(jnp.uint32), fmt)
    h = softfloat.encode(neg, sig.astype(jnp.uint32), lsb, "f16")  # always representable
    if relu:
        h = jnp.where(neg, jnp.uint32(0), h)
    return h


@functools.partial(jax.jit, static_argnums=(1, 2, 3))
def to_e8m0_bits(u: jax.Array, src: str, mode: str, satfinite: bool) -> jax.Array:
    """``src`` bits -> ue8m0 codes (uint32). The magnitude is rounded (rz: down, rp: up)
    to a power of two; below ``2**-127`` (zero included) the code is 0 (``2**-127``: the
    format has no zero); beyond ``2**127`` (and ±inf) 0xFE with ``satfinite``, else the
    NaN 0xFF; NaN -> 0xFF."""
    u = u if src == "f64" else u.astype(jnp.uint32)
    _, lsb, sig, _, inf, nan = softfloat.decode(u, src)
    q, e = softfloat.round_sig(sig.astype(u.dtype), lsb, softfloat.emin("ue8m0"), 0,
                               "rz" if mode == "rz" else "away")
    code = softfloat.encode_rounded(jnp.zeros(jnp.shape(u), jnp.bool_), q.astype(jnp.uint32),
                                    e, "ue8m0")  # q == 0 (below 2**-127 under rz, or 0): 0
    over = (e > FORMATS["ue8m0"].max_exponent) | inf
    big = _max_code("ue8m0") if satfinite else E8M0_NAN
    code = jnp.where(over, jnp.uint32(big), code)
    return jnp.where(nan, jnp.uint32(E8M0_NAN), code)


@jax.jit
def e8m0_to_bf16_bits(c: jax.Array) -> jax.Array:
    """A ue8m0 code (low byte of uint32 ``c``) -> bf16 bits, exact (``2**-127`` is the
    bf16 subnormal 0x0040); NaN -> the canonical 0x7FFF."""
    c = c.astype(jnp.uint32) & jnp.uint32(0xFF)
    _, lsb, sig, _, _, nan = softfloat.decode(c, "ue8m0")
    h = softfloat.encode(jnp.zeros(jnp.shape(c), jnp.bool_), sig.astype(jnp.uint32), lsb,
                         "bf16")
    return jnp.where(nan, jnp.uint32(_NAN16), h)


def max_code(fmt: str) -> int:
    """The code of ``fmt``'s largest finite value (0x7 for e2m1, 0x1F for fp6, 0xFE for
    ue8m0)."""
    return _max_code(fmt)


# ----------------------------------------------------------------------------------------
# Argument handling shared by the fp8, fp6 and fp4 conversions.

def bits_arg(x: Any, name: str, float_dtype: Any, width: int) -> jax.Array:
    """``x`` as uint32 bits: a ``float_dtype`` array (its bits) or an unsigned array of
    ``width`` bytes (taken as bits). Python scalars are converted to ``float_dtype``."""
    checks.check_64bit(x, name)
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        x = np.asarray(x, float_dtype)
    arr = jnp.asarray(x)
    if arr.dtype == jnp.dtype(float_dtype):
        return bitops.to_u32(arr)
    if arr.dtype == bitops.uint_dtype(8 * width):
        return arr.astype(jnp.uint32)
    raise TypeError(f"{name} must be a {np.dtype(float_dtype).name} array or its raw bits as "
                    f"{bitops.uint_dtype(8 * width).name}; got dtype {arr.dtype}")


def pair_arg(x: Any, name: str, float_dtype: Any, width: int) -> tuple[jax.Array, jax.Array]:
    """A trailing axis of 2 (``.x``, ``.y``) -> their bits as uint32."""
    u = bits_arg(x, name, float_dtype, width)
    if u.ndim == 0 or u.shape[-1] != 2:
        raise ValueError(f"{name} must have a trailing axis of size 2 (.x, .y); got shape "
                         f"{tuple(u.shape)}")
    return u[..., 0], u[..., 1]


def word_arg(x: Any, name: str, dtype: Any) -> jax.Array:
    """A register word (or packed storage) argument of exactly ``dtype``, as uint32;
    Python ints are converted to ``dtype``."""
    checks.check_64bit(x, name)
    if isinstance(x, int) and not isinstance(x, bool):
        x = np.asarray(x, dtype)
    arr = jnp.asarray(x)
    if arr.dtype != jnp.dtype(dtype):
        raise TypeError(f"{name} must be a {np.dtype(dtype).name} register word array; got "
                        f"dtype {arr.dtype}")
    return arr.astype(jnp.uint32)


def f32_pair_args(a: Any, b: Any) -> tuple[jax.Array, jax.Array]:
    """The ``a`` and ``b`` operands of a ``cvt ... .f32 d, a, b``: float32 values (or
    their uint32 bits) whose shapes broadcast together, as uint32 bits."""
    ua = bits_arg(a, "a", np.float32, 4)
    ub = bits_arg(b, "b", np.float32, 4)
    try:
        np.broadcast_shapes(ua.shape, ub.shape)
    except ValueError:
        raise ValueError(f"a and b must have shapes that broadcast together (each a pair "
                         f"is a[i], b[i]), got a shape {tuple(ua.shape)} and b shape "
                         f"{tuple(ub.shape)}") from None
    return ua, ub
