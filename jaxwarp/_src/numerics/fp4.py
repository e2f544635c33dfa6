"""fp4 (e2m1) conversions of PTX ``cvt`` (sm_100a, sm_120a) and ``cuda_fp4.h``.

* PTX forms on register words: :func:`cvt_f32_to_e2m1x2`
  (``cvt.rn.satfinite{.relu}.e2m1x2.f32 d, a, b``) and :func:`cvt_e2m1x2_to_f16x2`
  (``cvt.rn{.relu}.f16x2.e2m1x2 d, a``). :data:`PTX_FORMS` lists them by name.
* The ``cuda_fp4.h`` intrinsics: :func:`float_to_fp4`, :func:`float2_to_fp4x2`,
  :func:`double_to_fp4`, :func:`halfraw_to_fp4`, :func:`halfraw2_to_fp4x2`,
  :func:`bfloat16raw_to_fp4`, :func:`bfloat16raw2_to_fp4x2`, :func:`fp4_to_halfraw`,
  :func:`fp4x2_to_halfraw2`. An fp4 value is a uint8 code in bits 3:0
  (``__nv_fp4_storage_t``); a pair is one uint8, ``.x`` in the low nibble
  (``__nv_fp4x2_storage_t``).

Arithmetic (PTX ISA, "Data Movement and Conversion Instructions: cvt", its ``.satfinite``
and ``.relu`` modifiers; ``cuda_fp4.h``): one rounding onto e2m1's grid {0, 0.5, 1, 1.5, 2,
3, 4, 6} (PTX: to nearest even; the intrinsics: ``rounding``, to nearest even or
toward zero). e2m1 has
neither infinity nor NaN: a value beyond 6 and ±inf become ±6, and NaN becomes *positive*
6 (code 0x7). Zeros keep their sign. ``.relu`` turns a negative result (-0 included) into
+0. e2m1 to f16 is exact. In a ``.b8`` register ``a`` of ``cvt ... d, a, b`` goes to the
upper nibble.

These follow the ISA text and the header's documentation; they are not verified on
hardware (our GPU is an sm_90 H100, which has no fp4 ``cvt``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxwarp._src import checks
from jaxwarp._src.numerics import bitops, narrow
from jaxwarp._src.numerics.formats import ALIASES, FORMATS

__all__ = [
    "FP4_FORMATS",
    "PTX_FORMS",
    "ROUNDINGS",
    "bfloat16raw2_to_fp4x2",
    "bfloat16raw_to_fp4",
    "cvt_e2m1x2_to_f16x2",
    "cvt_f32_to_e2m1x2",
    "double_to_fp4",
    "float2_to_fp4x2",
    "float_to_fp4",
    "fp4_to_halfraw",
    "fp4x2_to_halfraw2",
    "halfraw2_to_fp4x2",
    "halfraw_to_fp4",
]

#: The fp4 formats, by PTX name.
FP4_FORMATS = narrow.FP4_FORMATS

#: Rounding modes of the intrinsics, by PTX name: ``"rn"`` (``cudaRoundNearest``, ties
#: to even) and ``"rz"`` (``cudaRoundZero``), the two ``cuda_fp6.hpp`` / ``cuda_fp4.hpp``
#: accept (they assert it; ``cudaRoundPosInf`` / ``cudaRoundMinInf`` are not supported).
ROUNDINGS = narrow.FP_ROUNDINGS


def _fmt_arg(fmt: Any) -> str:
    return checks.format_name(fmt, "fmt", FP4_FORMATS, ALIASES)


def _bool_arg(v: Any, name: str) -> bool:
    return checks.static_choice(v, name, (True, False))


def _rounding_arg(rounding: Any) -> str:
    return checks.static_choice(rounding, "rounding", ROUNDINGS)


def _pack4(hi: jax.Array, lo: jax.Array) -> jax.Array:
    return ((hi << 4) | lo).astype(jnp.uint8)


def _unpack4(u: jax.Array, relu: bool) -> tuple[jax.Array, jax.Array]:
    """(high nibble, low nibble) of uint32 words as f16 bits."""
    lo = narrow.code_to_f16_bits(u & jnp.uint32(0xF), "e2m1", relu)
    hi = narrow.code_to_f16_bits((u >> 4) & jnp.uint32(0xF), "e2m1", relu)
    return hi, lo


# ----------------------------------------------------------------------------------------
# PTX forms.


def cvt_f32_to_e2m1x2(a: Any, b: Any, *, relu: bool = False,
                      satfinite: bool = True) -> jax.Array:
    """PTX ``cvt.rn.satfinite{.relu}.e2m1x2.f32 d, a, b`` (sm_100a, sm_120a).

    ``a`` goes to bits 7:4 of the ``.b8`` register ``d`` and ``b`` to bits 3:0 (PTX
    ISA, cvt). Round to nearest even; beyond 6 and ±inf: ±6; NaN: +6 (0x7). Follows the
    ISA text, not verified on hardware.

    Args:
      a: float32 array (or its uint32 bits).
      b: float32 array (or bits) of a shape that broadcasts with ``a``.
      relu: static; ``.relu``: a negative result (-0 too) becomes +0.
      satfinite: static; must be True (PTX has no other form).

    Returns:
      uint8 array: the ``.b8`` register ``d``.

    Raises:
      TypeError: an operand is not float32 (or uint32 bits).
      ValueError: ``satfinite`` is False, or the shapes do not broadcast together.

    Example:
      >>> import jax.numpy as jnp
      >>> hex(int(cvt_f32_to_e2m1x2(jnp.float32(2.5), jnp.float32(-100.0))))
      '0x4f'
    """
    relu = _bool_arg(relu, "relu")
    if not _bool_arg(satfinite, "satfinite"):
        raise ValueError("satfinite=False: PTX requires .satfinite for an fp4 destination "
                         "(cvt.rn.satfinite{.relu}.e2m1x2.f32); allowed: True")
    ua, ub = narrow.f32_pair_args(a, b)
    return _pack4(narrow.to_code_bits(ua, "f32", "e2m1", "rn", relu),
                  narrow.to_code_bits(ub, "f32", "e2m1", "rn", relu))


def cvt_e2m1x2_to_f16x2(x: Any, *, relu: bool = False) -> jax.Array:
    """PTX ``cvt.rn{.relu}.f16x2.e2m1x2 d, a``: exact.

    The upper nibble of the ``.b8`` register ``a`` goes to the upper half of ``d``.
    Follows the ISA text, not verified on hardware.

    Args:
      x: uint8 array: the ``.b8`` register ``a``.
      relu: static, ``.relu``: a negative value (-0 too) becomes +0.

    Returns:
      uint32 array of ``x``'s shape: the ``.f16x2`` register ``d``.

    Raises:
      TypeError: ``x`` is not uint8.

    Example:
      >>> import jax.numpy as jnp
      >>> hex(int(cvt_e2m1x2_to_f16x2(jnp.uint8(0x4F)))), hex(int(cvt_e2m1x2_to_f16x2(
      ...     jnp.uint8(0x4F), relu=True)))
      ('0x4000c600', '0x40000000')
    """
    relu = _bool_arg(relu, "relu")
    hi, lo = _unpack4(narrow.word_arg(x, "x", np.uint8), relu)
    return (hi << 16) | lo


# ----------------------------------------------------------------------------------------
# cuda_fp4.h intrinsics.

_NV_SOURCE = {f: (FORMATS[f].storage_dtype, FORMATS[f].storage_dtype.itemsize)
              for f in ("f32", "f16", "bf16")}


def _nv_to_fp4(x: Any, src: str, fmt: Any, rounding: Any) -> jax.Array:
    fmt, mode = _fmt_arg(fmt), _rounding_arg(rounding)
    u = narrow.bits_arg(x, "x", *_NV_SOURCE[src])
    return narrow.to_code_bits(u, src, fmt, mode, False).astype(jnp.uint8)


def _nv_to_fp4x2(x: Any, src: str, fmt: Any, rounding: Any) -> jax.Array:
    fmt, mode = _fmt_arg(fmt), _rounding_arg(rounding)
    lo, hi = narrow.pair_arg(x, "x", *_NV_SOURCE[src])
    return _pack4(narrow.to_code_bits(hi, src, fmt, mode, False),
                  narrow.to_code_bits(lo, src, fmt, mode, False))


def float_to_fp4(x: Any, fmt: str, rounding: str) -> jax.Array:
    """``__nv_cvt_float_to_fp4(x, __NV_E2M1, rounding)``: float32 to an e2m1 code.

    One rounding in the mode asked for; out-of-range values and ±inf saturate to ±6, NaN
    gives +6 (``cuda_fp4.h``). Not verified on hardware.

    Args:
      x: float32 array (or its uint32 bits).
      fmt: static, ``"e2m1"`` (``__NV_E2M1``).
      rounding: static, ``"rn"`` (``cudaRoundNearest``) or ``"rz"``
        (``cudaRoundZero``); the headers accept no other.

    Returns:
      uint8 array (``__nv_fp4_storage_t``): the code in bits 3:0.

    Raises:
      TypeError: ``x`` is not float32 (or uint32 bits).
      ValueError: ``fmt`` or ``rounding`` is not allowed.

    Example:
      >>> import jax.numpy as jnp
      >>> x = jnp.float32([5.5, -5.0, jnp.nan])  # -5.0: a tie, to the even code (-4)
      >>> float_to_fp4(x, "e2m1", "rn"), float_to_fp4(x, "e2m1", "rz")
      (Array([ 7, 14,  7], dtype=uint8), Array([ 6, 14,  7], dtype=uint8))
    """
    return _nv_to_fp4(x, "f32", fmt, rounding)


def double_to_fp4(x: Any, fmt: str, rounding: str) -> jax.Array:
    """``__nv_cvt_double_to_fp4``: float64 to an e2m1 code, rounded once from the double
    (never through float32), with the rules of :func:`float_to_fp4`.

    Args:
      x: float64 array (needs ``jax_enable_x64``).
      fmt: static, ``"e2m1"``.
      rounding: static, ``"rn"`` or ``"rz"``.

    Returns:
      uint8 array: the code in bits 3:0.

    Raises:
      TypeError: ``x`` is not float64 (with x64 off a float64 NumPy input raises too).
      ValueError: ``fmt`` or ``rounding`` is not allowed.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> with jax.enable_x64(True):  # just above the tie 2.5: up to 3
      ...     print(double_to_fp4(jnp.float64(2.5 + 2**-40), "e2m1", "rn"))
      5
    """
    fmt, mode = _fmt_arg(fmt), _rounding_arg(rounding)
    arr = checks.array_arg(x, "x")
    if arr.dtype != jnp.float64:
        raise TypeError(f"x must be a float64 array (with jax_enable_x64), got dtype {arr.dtype}")
    return narrow.to_code_bits(bitops.uint_view(arr), "f64", fmt, mode, False).astype(jnp.uint8)


def float2_to_fp4x2(x: Any, fmt: str, rounding: str) -> jax.Array:
    """``__nv_cvt_float2_to_fp4x2``: ``x[..., 0]`` (``.x``) to the low nibble.

    Args:
      x: float32 array (or uint32 bits) with a trailing axis of 2: ``.x``, ``.y``.
      fmt: static, ``"e2m1"``.
      rounding: static, ``"rn"`` or ``"rz"``.

    Returns:
      uint8 array (``__nv_fp4x2_storage_t``) of ``x.shape[:-1]``.

    Example:
      >>> import jax.numpy as jnp
      >>> hex(int(float2_to_fp4x2(jnp.array([1.0, -2.0], jnp.float32), "e2m1", "rn")))
      '0xc2'
    """
    return _nv_to_fp4x2(x, "f32", fmt, rounding)


def halfraw_to_fp4(x: Any, fmt: str, rounding: str) -> jax.Array:
    """``__nv_cvt_halfraw_to_fp4``: fp16 (float16 or its uint16 bits) to an e2m1 code.

    Example:
      >>> import jax.numpy as jnp
      >>> halfraw_to_fp4(jnp.float16(0.7), "e2m1", "rz")
      Array(1, dtype=uint8)
    """
    return _nv_to_fp4(x, "f16", fmt, rounding)


def halfraw2_to_fp4x2(x: Any, fmt: str, rounding: str) -> jax.Array:
    """``__nv_cvt_halfraw2_to_fp4x2``: (..., 2) fp16 (``.x``, ``.y``) to one uint8.

    Example:
      >>> import jax.numpy as jnp
      >>> hex(int(halfraw2_to_fp4x2(jnp.array([1.0, -2.0], jnp.float16), "e2m1", "rn")))
      '0xc2'
    """
    return _nv_to_fp4x2(x, "f16", fmt, rounding)


def bfloat16raw_to_fp4(x: Any, fmt: str, rounding: str) -> jax.Array:
    """``__nv_cvt_bfloat16raw_to_fp4``: bf16 (bfloat16 or uint16 bits) to an e2m1 code.

    Example:
      >>> import jax.numpy as jnp, ml_dtypes
      >>> bfloat16raw_to_fp4(jnp.array(0.7, ml_dtypes.bfloat16), "e2m1", "rz")
      Array(1, dtype=uint8)
    """
    return _nv_to_fp4(x, "bf16", fmt, rounding)


def bfloat16raw2_to_fp4x2(x: Any, fmt: str, rounding: str) -> jax.Array:
    """``__nv_cvt_bfloat16raw2_to_fp4x2``: (..., 2) bf16 (``.x``, ``.y``) to one uint8.

    Example:
      >>> import jax.numpy as jnp, ml_dtypes
      >>> hex(int(bfloat16raw2_to_fp4x2(jnp.array([1, -2], ml_dtypes.bfloat16), "e2m1", "rn")))
      '0xc2'
    """
    return _nv_to_fp4x2(x, "bf16", fmt, rounding)


def fp4_to_halfraw(x: Any, fmt: str) -> jax.Array:
    """``__nv_cvt_fp4_to_halfraw``: an e2m1 code (uint8, bits 3:0 read) to float16, exact.

    Example:
      >>> import jax.numpy as jnp
      >>> fp4_to_halfraw(jnp.uint8(0xF), "e2m1")
      Array(-6., dtype=float16)
    """
    fmt = _fmt_arg(fmt)
    u = narrow.word_arg(x, "x", np.uint8)
    return bitops.from_u32(narrow.code_to_f16_bits(u & jnp.uint32(0xF), fmt, False), jnp.float16)


def fp4x2_to_halfraw2(x: Any, fmt: str) -> jax.Array:
    """``__nv_cvt_fp4x2_to_halfraw2``: one uint8 to (..., 2) float16 (``.x`` = low nibble).

    Example:
      >>> import jax.numpy as jnp
      >>> fp4x2_to_halfraw2(jnp.uint8(0xC2), "e2m1")
      Array([ 1., -2.], dtype=float16)
    """
    _fmt_arg(fmt)
    hi, lo = _unpack4(narrow.word_arg(x, "x", np.uint8), False)
    return bitops.from_u32(jnp.stack([lo, hi], -1), jnp.float16)


# ----------------------------------------------------------------------------------------
# The PTX forms by name.


def _ptx_table() -> dict[str, Callable[..., jax.Array]]:
    t: dict[str, Callable[..., jax.Array]] = {}
    for relu in (False, True):
        r = ".relu" if relu else ""
        t[f"cvt.rn.satfinite{r}.e2m1x2.f32"] = functools.partial(cvt_f32_to_e2m1x2, relu=relu)
        t[f"cvt.rn{r}.f16x2.e2m1x2"] = functools.partial(cvt_e2m1x2_to_f16x2, relu=relu)
    return t


#: PTX name -> function of the register words: ``(a, b)`` float32 (or uint32 bits) ->
#: uint8 for the ``.f32`` source, ``a`` uint8 -> uint32 for the ``.f16x2`` destination.
PTX_FORMS: dict[str, Callable[..., jax.Array]] = _ptx_table()
