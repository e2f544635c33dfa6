"""The fp8 (e4m3 and e5m2) conversions of ``cuda_fp8.h``, bit-exact to an H100.

The ``__nv_cvt_*`` intrinsics, on the C types they take: :func:`float_to_fp8`,
:func:`float2_to_fp8x2`, :func:`double_to_fp8`, :func:`halfraw_to_fp8`,
:func:`halfraw2_to_fp8x2`, :func:`bfloat16raw_to_fp8`, :func:`bfloat16raw2_to_fp8x2`,
:func:`fp8_to_halfraw`, :func:`fp8x2_to_halfraw2`. A ``float2`` / ``__half2_raw`` /
``__nv_bfloat162_raw`` is a trailing axis of 2 (``[..., 0]`` is ``.x``); an
``__nv_fp8x2_storage_t`` is a uint16 word (``.x`` in the low byte).

The arithmetic is that of the PTX ``cvt`` forms (``fp8.py``, whose bit kernels these
run on; its module docstring states the rules): one rounding to nearest even onto the fp8
grid, ``__NV_SATFINITE`` as ``.satfinite``; with ``__NV_NOSAT`` a result beyond the finite
range is NaN (e4m3) or ±inf (e5m2). On sm_90 the ``__NV_NOSAT`` and bf16 intrinsics are a
software conversion in ``cuda_fp8.hpp`` (PTX has no such ``cvt``), with the same results.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxwarp._src import checks
from jaxwarp._src.numerics import bitops, fp8, narrow
from jaxwarp._src.numerics.formats import ALIASES, FORMATS

__all__ = [
    "bfloat16raw2_to_fp8x2",
    "bfloat16raw_to_fp8",
    "double_to_fp8",
    "float2_to_fp8x2",
    "float_to_fp8",
    "fp8_to_halfraw",
    "fp8x2_to_halfraw2",
    "halfraw2_to_fp8x2",
    "halfraw_to_fp8",
]


def _fmt_arg(fmt: Any) -> str:
    return checks.format_name(fmt, "fmt", tuple(fp8.FP8_FORMATS), ALIASES)


def _bool_arg(v: Any, name: str) -> bool:
    return checks.static_choice(v, name, (True, False))


def _as_fp8(code: jax.Array, fmt: str) -> jax.Array:
    return bitops.from_u32(code, fp8.FP8_FORMATS[fmt])


def _pack8(hi: jax.Array, lo: jax.Array) -> jax.Array:
    return ((hi << 8) | lo).astype(jnp.uint16)


def _sat_arg(saturate: Any) -> bool:
    return _bool_arg(saturate, "saturate")


# Source type of the __nv_cvt_* intrinsics: (dtype of the values, bytes per element).
_NV_SOURCE = {f: (FORMATS[f].storage_dtype, FORMATS[f].storage_dtype.itemsize)
              for f in ("f32", "f16", "bf16")}


def _nv_to_fp8(x: Any, src: str, fmt: str, saturate: Any) -> jax.Array:
    """One element of ``src`` (values or bits) to fp8, as the __nv_cvt_*_to_fp8 intrinsics."""
    fmt, sat = _fmt_arg(fmt), _sat_arg(saturate)
    u = narrow.bits_arg(x, "x", *_NV_SOURCE[src])
    return _as_fp8(fp8.to_fp8_bits(u, src, fmt, sat, False), fmt)


def _nv_to_fp8x2(x: Any, src: str, fmt: str, saturate: Any) -> jax.Array:
    """(..., 2) elements of ``src`` (``.x``, ``.y``) to one uint16 word, ``.x`` low."""
    fmt, sat = _fmt_arg(fmt), _sat_arg(saturate)
    lo, hi = narrow.pair_arg(x, "x", *_NV_SOURCE[src])
    return _pack8(fp8.to_fp8_bits(hi, src, fmt, sat, False),
                  fp8.to_fp8_bits(lo, src, fmt, sat, False))


def float_to_fp8(x: Any, fmt: str, saturate: bool) -> jax.Array:
    """``__nv_cvt_float_to_fp8(x, saturate ? __NV_SATFINITE : __NV_NOSAT, fmt)``.

    Args:
      x: float32 array (or its uint32 bits).
      fmt: static, ``"e4m3"`` (``__NV_E4M3``) or ``"e5m2"`` (``__NV_E5M2``).
      saturate: static bool: True for ``__NV_SATFINITE``, False for ``__NV_NOSAT``.

    Returns:
      Array of ``ml_dtypes.float8_e4m3fn`` / ``float8_e5m2`` (the storage byte).

    Raises:
      TypeError: ``x`` is not float32.
      ValueError: ``fmt`` or ``saturate`` is not allowed.

    Example:
      >>> import jax.numpy as jnp
      >>> float_to_fp8(jnp.float32(500.0), "e4m3", saturate=True)
      Array(448, dtype=float8_e4m3fn)
    """
    return _nv_to_fp8(x, "f32", fmt, saturate)


def double_to_fp8(x: Any, fmt: str, saturate: bool) -> jax.Array:
    """``__nv_cvt_double_to_fp8(x, saturate ? __NV_SATFINITE : __NV_NOSAT, fmt)``.

    The double is rounded once, straight onto the fp8 grid (never through float32, which
    could first round it onto a tie), with the rules of :func:`float_to_fp8`. No GPU
    capture holds this intrinsic; it is the same arithmetic on a wider source.

    Args:
      x: float64 array (needs ``jax_enable_x64``).
      fmt: static, ``"e4m3"`` or ``"e5m2"``.
      saturate: static bool: True for ``__NV_SATFINITE``, False for ``__NV_NOSAT``.

    Returns:
      Array of ``ml_dtypes.float8_e4m3fn`` / ``float8_e5m2``.

    Raises:
      TypeError: ``x`` is not float64 (with x64 off a float64 NumPy input raises too).
      ValueError: ``fmt`` or ``saturate`` is not allowed.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> with jax.enable_x64(True):
      ...     print(double_to_fp8(jnp.float64(1 + 2**-4 + 2**-40), "e4m3", True))
      1.125
    """
    fmt, sat = _fmt_arg(fmt), _sat_arg(saturate)
    arr = checks.array_arg(x, "x")
    if arr.dtype != jnp.float64:
        raise TypeError(f"x must be a float64 array (with jax_enable_x64), got dtype {arr.dtype}")
    return _as_fp8(fp8.to_fp8_bits(bitops.uint_view(arr), "f64", fmt, sat, False), fmt)


def float2_to_fp8x2(x: Any, fmt: str, saturate: bool) -> jax.Array:
    """``__nv_cvt_float2_to_fp8x2``: ``x[..., 0]`` (``.x``) to the low byte.

    Args:
      x: float32 array (or uint32 bits) with a trailing axis of 2: ``.x``, ``.y``.
      fmt: static, ``"e4m3"`` or ``"e5m2"``.
      saturate: static bool (``__NV_SATFINITE`` / ``__NV_NOSAT``).

    Returns:
      uint16 array (``__nv_fp8x2_storage_t``) of ``x.shape[:-1]``.

    Example:
      >>> import jax.numpy as jnp
      >>> hex(int(float2_to_fp8x2(jnp.array([1.0, -2.0], jnp.float32), "e4m3", True)))
      '0xc038'
    """
    return _nv_to_fp8x2(x, "f32", fmt, saturate)


def halfraw_to_fp8(x: Any, fmt: str, saturate: bool) -> jax.Array:
    """``__nv_cvt_halfraw_to_fp8``: fp16 (float16 or its uint16 bits) to fp8.

    Example:
      >>> import jax.numpy as jnp
      >>> halfraw_to_fp8(jnp.float16(-1e4), "e5m2", saturate=False)
      Array(-10240, dtype=float8_e5m2)
      >>> halfraw_to_fp8(jnp.float16(-65504), "e5m2", saturate=False)
      Array(-inf, dtype=float8_e5m2)
    """
    return _nv_to_fp8(x, "f16", fmt, saturate)


def halfraw2_to_fp8x2(x: Any, fmt: str, saturate: bool) -> jax.Array:
    """``__nv_cvt_halfraw2_to_fp8x2``: (..., 2) fp16 (``.x``, ``.y``) to a uint16 word.

    Example:
      >>> import jax.numpy as jnp
      >>> hex(int(halfraw2_to_fp8x2(jnp.array([1.0, -2.0], jnp.float16), "e4m3", True)))
      '0xc038'
    """
    return _nv_to_fp8x2(x, "f16", fmt, saturate)


def bfloat16raw_to_fp8(x: Any, fmt: str, saturate: bool) -> jax.Array:
    """``__nv_cvt_bfloat16raw_to_fp8``: bf16 (bfloat16 or uint16 bits) to fp8.

    Example:
      >>> import jax.numpy as jnp, ml_dtypes
      >>> bfloat16raw_to_fp8(jnp.array(1e9, ml_dtypes.bfloat16), "e5m2", saturate=False)
      Array(inf, dtype=float8_e5m2)
    """
    return _nv_to_fp8(x, "bf16", fmt, saturate)


def bfloat16raw2_to_fp8x2(x: Any, fmt: str, saturate: bool) -> jax.Array:
    """``__nv_cvt_bfloat16raw2_to_fp8x2``: (..., 2) bf16 (``.x``, ``.y``) to a uint16 word.

    Example:
      >>> import jax.numpy as jnp, ml_dtypes
      >>> hex(int(bfloat16raw2_to_fp8x2(jnp.array([1, -2], ml_dtypes.bfloat16), "e4m3", True)))
      '0xc038'
    """
    return _nv_to_fp8x2(x, "bf16", fmt, saturate)


def fp8_to_halfraw(x: Any, fmt: str) -> jax.Array:
    """``__nv_cvt_fp8_to_halfraw``: fp8 (its ml_dtypes type, or uint8 bits) to float16.

    Exact; NaN becomes 0x7FFF.

    Example:
      >>> import jax.numpy as jnp
      >>> fp8_to_halfraw(jnp.uint8(0x7E), "e4m3")
      Array(448., dtype=float16)
    """
    fmt = _fmt_arg(fmt)
    u = narrow.bits_arg(x, "x", fp8.FP8_FORMATS[fmt], 1)
    return bitops.from_u32(fp8.fp8_to_f16_bits(u, fmt, False), jnp.float16)


def fp8x2_to_halfraw2(x: Any, fmt: str) -> jax.Array:
    """``__nv_cvt_fp8x2_to_halfraw2``: a uint16 word to (..., 2) float16 (``.x`` = low byte).

    Example:
      >>> import jax.numpy as jnp
      >>> fp8x2_to_halfraw2(jnp.uint16(0xC038), "e4m3")
      Array([ 1., -2.], dtype=float16)
    """
    fmt = _fmt_arg(fmt)
    u = narrow.word_arg(x, "x", np.uint16)
    lo = fp8.fp8_to_f16_bits(u & jnp.uint32(0xFF), fmt, False)
    hi = fp8.fp8_to_f16_bits(u >> 8, fmt, False)
    return bitops.from_u32(jnp.stack([lo, hi], -1), jnp.float16)
