"""fp6 (e2m3 and e3m2) conversions of PTX ``cvt`` (sm_100a, sm_120a) and ``cuda_fp6.h``.

Two families, as for fp8 (``fp8.py``):

* PTX forms on register words: :func:`cvt_f32_to_fp6x2`
  (``cvt.rn.satfinite{.relu}.{e2m3x2,e3m2x2}.f32 d, a, b``; :func:`cvt_f32_to_e2m3x2`,
  :func:`cvt_f32_to_e3m2x2`) and :func:`cvt_fp6x2_to_f16x2`
  (``cvt.rn{.relu}.f16x2.{e2m3x2,e3m2x2} d, a``). :data:`PTX_FORMS` lists them by name.
* The ``cuda_fp6.h`` intrinsics: :func:`float_to_fp6`, :func:`float2_to_fp6x2`,
  :func:`double_to_fp6`, :func:`halfraw_to_fp6`, :func:`halfraw2_to_fp6x2`,
  :func:`bfloat16raw_to_fp6`, :func:`bfloat16raw2_to_fp6x2`, :func:`fp6_to_halfraw`,
  :func:`fp6x2_to_halfraw2`. An fp6 value is a uint8 code in bits 5:0 (``__nv_fp6_storage_t``);
  a pair is a uint16 word, ``.x`` in the low byte (``__nv_fp6x2_storage_t``).

Arithmetic (PTX ISA, "Data Movement and Conversion Instructions: cvt", its ``.satfinite``
and ``.relu`` modifiers; ``cuda_fp6.h``): one rounding onto the fp6 grid, subnormals
included (PTX: to nearest even; the intrinsics: ``rounding``, to nearest even
or toward zero). e2m3 and e3m2
have neither infinity nor NaN: a value beyond MAX_NORM (7.5 for e2m3, 28 for e3m2) and
±inf become ±MAX_NORM, and NaN becomes *positive* MAX_NORM (code 0x1F), as the ISA's
``.satfinite`` and ``cuda_fp6.h`` say. Zeros keep their sign. ``.relu`` turns a negative
result (-0 included) into +0. fp6 to f16 is exact (every fp6 value is an f16 value).
A register holds each fp6 code in a byte whose top two bits are zero; the conversions
from fp6 read only bits 5:0 of each byte.

These follow the ISA text and the header's documentation; they are not verified on
hardware (our GPU is an sm_90 H100, which has no fp6 ``cvt``).
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
    "FP6_FORMATS",
    "PTX_FORMS",
    "ROUNDINGS",
    "bfloat16raw2_to_fp6x2",
    "bfloat16raw_to_fp6",
    "cvt_f32_to_e2m3x2",
    "cvt_f32_to_e3m2x2",
    "cvt_f32_to_fp6x2",
    "cvt_fp6x2_to_f16x2",
    "double_to_fp6",
    "float2_to_fp6x2",
    "float_to_fp6",
    "fp6_to_halfraw",
    "fp6x2_to_halfraw2",
    "halfraw2_to_fp6x2",
    "halfraw_to_fp6",
]

#: The fp6 formats, by PTX name.
FP6_FORMATS = narrow.FP6_FORMATS

#: Rounding modes of the intrinsics, by PTX name: ``"rn"`` (``cudaRoundNearest``, ties
#: to even) and ``"rz"`` (``cudaRoundZero``), the two ``cuda_fp6.hpp`` / ``cuda_fp4.hpp``
#: accept (they assert it; ``cudaRoundPosInf`` / ``cudaRoundMinInf`` are not supported).
ROUNDINGS = narrow.FP_ROUNDINGS


def _fmt_arg(fmt: Any) -> str:
    return checks.format_name(fmt, "fmt", FP6_FORMATS, ALIASES)


def _bool_arg(v: Any, name: str) -> bool:
    return checks.static_choice(v, name, (True, False))


def _rounding_arg(rounding: Any) -> str:
    return checks.static_choice(rounding, "rounding", ROUNDINGS)


def _check_satfinite(satfinite: Any) -> None:
    if not _bool_arg(satfinite, "satfinite"):
        raise ValueError("satfinite=False: PTX requires .satfinite for an fp6 destination "
                         "(cvt.rn.satfinite{.relu}.{e2m3x2,e3m2x2}.f32); allowed: True")


def _pack(hi: jax.Array, lo: jax.Array) -> jax.Array:
    return ((hi << 8) | lo).astype(jnp.uint16)


# ----------------------------------------------------------------------------------------
# PTX forms.


def cvt_f32_to_fp6x2(a: Any, b: Any, fmt: str, *, relu: bool = False,
                     satfinite: bool = True) -> jax.Array:
    """PTX ``cvt.rn.satfinite{.relu}.{e2m3x2,e3m2x2}.f32 d, a, b`` (sm_100a, sm_120a).

    ``a`` goes to bits 13:8 of ``d`` and ``b`` to bits 5:0; bits 15:14 and 7:6 are zero
    (PTX ISA, cvt). Round to nearest even; beyond MAX_NORM and ±inf: ±MAX_NORM; NaN:
    +MAX_NORM (0x1F). Follows the ISA text, not verified on hardware.

    Args:
      a: float32 array (or its uint32 bits).
      b: float32 array (or bits) of a shape that broadcasts with ``a``.
      fmt: static, ``"e2m3"`` or ``"e3m2"``.
      relu: static; ``.relu``: a negative result (-0 too) becomes +0.
      satfinite: static; must be True (PTX has no other form).

    Returns:
      uint16 array: the ``.b16`` register ``d``.

    Raises:
      TypeError: an operand is not float32 (or uint32 bits).
      ValueError: ``fmt`` is not allowed, ``satfinite`` is False, or the shapes do not
        broadcast together.

    Example:
      >>> import jax.numpy as jnp
      >>> hex(int(cvt_f32_to_fp6x2(jnp.float32(1.0), jnp.float32(-100.0), "e2m3")))
      '0x83f'
    """
    fmt = _fmt_arg(fmt)
    relu = _bool_arg(relu, "relu")
    _check_satfinite(satfinite)
    ua, ub = narrow.f32_pair_args(a, b)
    return _pack(narrow.to_code_bits(ua, "f32", fmt, "rn", relu),
                 narrow.to_code_bits(ub, "f32", fmt, "rn", relu))


def cvt_f32_to_e2m3x2(a: Any, b: Any, *, relu: bool = False, satfinite: bool = True) -> jax.Array:
    """PTX ``cvt.rn.satfinite{.relu}.e2m3x2.f32 d, a, b``: :func:`cvt_f32_to_fp6x2`, e2m3.

    Example:
      >>> import jax.numpy as jnp
      >>> hex(int(cvt_f32_to_e2m3x2(jnp.float32(7.75), jnp.float32(jnp.nan))))
      '0x1f1f'
    """
    return cvt_f32_to_fp6x2(a, b, "e2m3", relu=relu, satfinite=satfinite)


def cvt_f32_to_e3m2x2(a: Any, b: Any, *, relu: bool = False, satfinite: bool = True) -> jax.Array:
    """PTX ``cvt.rn.satfinite{.relu}.e3m2x2.f32 d, a, b``: :func:`cvt_f32_to_fp6x2`, e3m2.

    Example:
      >>> import jax.numpy as jnp
      >>> hex(int(cvt_f32_to_e3m2x2(jnp.float32(-1.0), jnp.float32(0.3), relu=True)))
      '0x5'
    """
    return cvt_f32_to_fp6x2(a, b, "e3m2", relu=relu, satfinite=satfinite)


def cvt_fp6x2_to_f16x2(x: Any, fmt: str, *, relu: bool = False) -> jax.Array:
    """PTX ``cvt.rn{.relu}.f16x2.{e2m3x2,e3m2x2} d, a``: exact.

    The upper byte of ``a`` goes to the upper half of ``d``. Only bits 5:0 of each byte
    are read (the ISA has them with the top two bits zero). Follows the ISA text, not
    verified on hardware.

    Args:
      x: uint16 array: the ``.b16`` register ``a``.
      fmt: static, ``"e2m3"`` or ``"e3m2"``.
      relu: static, ``.relu``: a negative value (-0 too) becomes +0.

    Returns:
      uint32 array of ``x``'s shape: the ``.f16x2`` register ``d``.

    Raises:
      TypeError: ``x`` is not uint16.
      ValueError: ``fmt`` is not allowed.

    Example:
      >>> import jax.numpy as jnp
      >>> hex(int(cvt_fp6x2_to_f16x2(jnp.uint16(0x083F), "e2m3")))
      '0x3c00c780'
    """
    fmt = _fmt_arg(fmt)
    relu = _bool_arg(relu, "relu")
    u = narrow.word_arg(x, "x", np.uint16)
    lo = narrow.code_to_f16_bits(u & jnp.uint32(0x3F), fmt, relu)
    hi = narrow.code_to_f16_bits((u >> 8) & jnp.uint32(0x3F), fmt, relu)
    return (hi << 16) | lo


# ----------------------------------------------------------------------------------------
# cuda_fp6.h intrinsics.

# Source of the __nv_cvt_* intrinsics: (dtype of the values, bytes per element).
_NV_SOURCE = {f: (FORMATS[f].storage_dtype, FORMATS[f].storage_dtype.itemsize)
              for f in ("f32", "f16", "bf16")}


def _nv_to_fp6(x: Any, src: str, fmt: Any, rounding: Any) -> jax.Array:
    fmt, mode = _fmt_arg(fmt), _rounding_arg(rounding)
    u = narrow.bits_arg(x, "x", *_NV_SOURCE[src])
    return narrow.to_code_bits(u, src, fmt, mode, False).astype(jnp.uint8)


def _nv_to_fp6x2(x: Any, src: str, fmt: Any, rounding: Any) -> jax.Array:
    fmt, mode = _fmt_arg(fmt), _rounding_arg(rounding)
    lo, hi = narrow.pair_arg(x, "x", *_NV_SOURCE[src])
    return _pack(narrow.to_code_bits(hi, src, fmt, mode, False),
                 narrow.to_code_bits(lo, src, fmt, mode, False))


def float_to_fp6(x: Any, fmt: str, rounding: str) -> jax.Array:
    """``__nv_cvt_float_to_fp6(x, fmt, rounding)``: float32 to an fp6 code.

    One rounding in the mode asked for; out-of-range values and ±inf saturate to
    ±MAX_NORM, NaN gives +MAX_NORM (``cuda_fp6.h``). Not verified on hardware.

    Args:
      x: float32 array (or its uint32 bits).
      fmt: static, ``"e2m3"`` (``__NV_E2M3``) or ``"e3m2"`` (``__NV_E3M2``).
      rounding: static, ``"rn"`` (``cudaRoundNearest``) or ``"rz"``
        (``cudaRoundZero``); the headers accept no other.

    Returns:
      uint8 array (``__nv_fp6_storage_t``): the code in bits 5:0.

    Raises:
      TypeError: ``x`` is not float32 (or uint32 bits).
      ValueError: ``fmt`` or ``rounding`` is not allowed.

    Example:
      >>> import jax.numpy as jnp
      >>> x = jnp.float32([1.1, -1.1])
      >>> float_to_fp6(x, "e2m3", "rn"), float_to_fp6(x, "e2m3", "rz")
      (Array([ 9, 41], dtype=uint8), Array([ 8, 40], dtype=uint8))
    """
    return _nv_to_fp6(x, "f32", fmt, rounding)


def double_to_fp6(x: Any, fmt: str, rounding: str) -> jax.Array:
    """``__nv_cvt_double_to_fp6``: float64 to an fp6 code, rounded once from the double
    (never through float32), with the rules of :func:`float_to_fp6`.

    Args:
      x: float64 array (needs ``jax_enable_x64``).
      fmt: static, ``"e2m3"`` or ``"e3m2"``.
      rounding: static, ``"rn"`` or ``"rz"``.

    Returns:
      uint8 array: the code in bits 5:0.

    Raises:
      TypeError: ``x`` is not float64 (with x64 off a float64 NumPy input raises too).
      ValueError: ``fmt`` or ``rounding`` is not allowed.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> with jax.enable_x64(True):  # just above the tie 1.0625: up
      ...     print(double_to_fp6(jnp.float64(1 + 2**-4 + 2**-40), "e2m3", "rn"))
      9
    """
    fmt, mode = _fmt_arg(fmt), _rounding_arg(rounding)
    arr = checks.array_arg(x, "x")
    if arr.dtype != jnp.float64:
        raise TypeError(f"x must be a float64 array (with jax_enable_x64), got dtype {arr.dtype}")
    return narrow.to_code_bits(bitops.uint_view(arr), "f64", fmt, mode, False).astype(jnp.uint8)


def float2_to_fp6x2(x: Any, fmt: str, rounding: str) -> jax.Array:
    """``__nv_cvt_float2_to_fp6x2``: ``x[..., 0]`` (``.x``) to the low byte.

    Args:
      x: float32 array (or uint32 bits) with a trailing axis of 2: ``.x``, ``.y``.
      fmt: static, ``"e2m3"`` or ``"e3m2"``.
      rounding: static, ``"rn"`` or ``"rz"``.

    Returns:
      uint16 array (``__nv_fp6x2_storage_t``) of ``x.shape[:-1]``.

    Example:
      >>> import jax.numpy as jnp
      >>> hex(int(float2_to_fp6x2(jnp.array([1.0, -2.0], jnp.float32), "e3m2", "rn")))
      '0x300c'
    """
    return _nv_to_fp6x2(x, "f32", fmt, rounding)


def halfraw_to_fp6(x: Any, fmt: str, rounding: str) -> jax.Array:
    """``__nv_cvt_halfraw_to_fp6``: fp16 (float16 or its uint16 bits) to an fp6 code.

    Example:
      >>> import jax.numpy as jnp
      >>> halfraw_to_fp6(jnp.float16(-1e4), "e3m2", "rz")
      Array(63, dtype=uint8)
    """
    return _nv_to_fp6(x, "f16", fmt, rounding)


def halfraw2_to_fp6x2(x: Any, fmt: str, rounding: str) -> jax.Array:
    """``__nv_cvt_halfraw2_to_fp6x2``: (..., 2) fp16 (``.x``, ``.y``) to a uint16 word.

    Example:
      >>> import jax.numpy as jnp
      >>> hex(int(halfraw2_to_fp6x2(jnp.array([1.0, -2.0], jnp.float16), "e3m2", "rn")))
      '0x300c'
    """
    return _nv_to_fp6x2(x, "f16", fmt, rounding)


def bfloat16raw_to_fp6(x: Any, fmt: str, rounding: str) -> jax.Array:
    """``__nv_cvt_bfloat16raw_to_fp6``: bf16 (bfloat16 or uint16 bits) to an fp6 code.

    Example:
      >>> import jax.numpy as jnp, ml_dtypes
      >>> bfloat16raw_to_fp6(jnp.array(0.3, ml_dtypes.bfloat16), "e2m3", "rz")
      Array(2, dtype=uint8)
    """
    return _nv_to_fp6(x, "bf16", fmt, rounding)


def bfloat16raw2_to_fp6x2(x: Any, fmt: str, rounding: str) -> jax.Array:
    """``__nv_cvt_bfloat16raw2_to_fp6x2``: (..., 2) bf16 (``.x``, ``.y``) to a uint16 word.

    Example:
      >>> import jax.numpy as jnp, ml_dtypes
      >>> hex(int(bfloat16raw2_to_fp6x2(jnp.array([1, -2], ml_dtypes.bfloat16), "e3m2", "rn")))
      '0x300c'
    """
    return _nv_to_fp6x2(x, "bf16", fmt, rounding)


def fp6_to_halfraw(x: Any, fmt: str) -> jax.Array:
    """``__nv_cvt_fp6_to_halfraw``: an fp6 code (uint8, bits 5:0 read) to float16, exact.

    Example:
      >>> import jax.numpy as jnp
      >>> fp6_to_halfraw(jnp.uint8(0x1F), "e3m2")
      Array(28., dtype=float16)
    """
    fmt = _fmt_arg(fmt)
    u = narrow.word_arg(x, "x", np.uint8)
    return bitops.from_u32(narrow.code_to_f16_bits(u & jnp.uint32(0x3F), fmt, False), jnp.float16)


def fp6x2_to_halfraw2(x: Any, fmt: str) -> jax.Array:
    """``__nv_cvt_fp6x2_to_halfraw2``: a uint16 word to (..., 2) float16 (``.x`` = low byte).

    Example:
      >>> import jax.numpy as jnp
      >>> fp6x2_to_halfraw2(jnp.uint16(0x300C), "e3m2")
      Array([ 1., -2.], dtype=float16)
    """
    fmt = _fmt_arg(fmt)
    u = narrow.word_arg(x, "x", np.uint16)
    lo = narrow.code_to_f16_bits(u & jnp.uint32(0x3F), fmt, False)
    hi = narrow.code_to_f16_bits((u >> 8) & jnp.uint32(0x3F), fmt, False)
    return bitops.from_u32(jnp.stack([lo, hi], -1), jnp.float16)


# ----------------------------------------------------------------------------------------
# The PTX forms by name.


def _ptx_table() -> dict[str, Callable[..., jax.Array]]:
    t: dict[str, Callable[..., jax.Array]] = {}
    for fmt in FP6_FORMATS:
        for relu in (False, True):
            r = ".relu" if relu else ""
            t[f"cvt.rn.satfinite{r}.{fmt}x2.f32"] = functools.partial(
                cvt_f32_to_fp6x2, fmt=fmt, relu=relu)
            t[f"cvt.rn{r}.f16x2.{fmt}x2"] = functools.partial(
                cvt_fp6x2_to_f16x2, fmt=fmt, relu=relu)
    return t


#: PTX name -> function of the register words: ``(a, b)`` float32 (or uint32 bits) ->
#: uint16 for ``.f32`` sources, ``a`` uint16 -> uint32 for ``.f16x2`` destinations.
PTX_FORMS: dict[str, Callable[..., jax.Array]] = _ptx_table()
