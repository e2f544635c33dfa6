"""ue8m0, the power-of-two block scale of ``cuda_fp8.h`` (sm_100a, sm_120a): its conversions.

The PTX forms :func:`cvt_f32_to_ue8m0x2` (``cvt.{rz,rp}{.satfinite}.ue8m0x2.f32``),
:func:`cvt_bf16x2_to_ue8m0x2` (``... .ue8m0x2.bf16x2``) and :func:`cvt_ue8m0x2_to_bf16x2`
(``cvt.rn.bf16x2.ue8m0x2``), listed in :data:`E8M0_PTX_FORMS`, and the intrinsics
:func:`float_to_e8m0`, :func:`float2_to_e8m0x2`, :func:`double_to_e8m0`,
:func:`bfloat16raw_to_e8m0`, :func:`bfloat162raw_to_e8m0x2`, :func:`e8m0_to_bf16raw` and
:func:`e8m0x2_to_bf162raw`. A code is a uint8 (``__nv_fp8_storage_t``), a pair a uint16.
The bit kernels are ``narrow.py``'s. These follow the PTX ISA text and ``cuda_fp8.h``'s
documentation, not verified on hardware (the H100 has no ue8m0 ``cvt``).
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
from jaxwarp._src.numerics.formats import FORMATS

__all__ = [
    "E8M0_PTX_FORMS",
    "E8M0_ROUNDINGS",
    "bfloat162raw_to_e8m0x2",
    "bfloat16raw_to_e8m0",
    "cvt_bf16x2_to_ue8m0x2",
    "cvt_f32_to_ue8m0x2",
    "cvt_ue8m0x2_to_bf16x2",
    "double_to_e8m0",
    "e8m0_to_bf16raw",
    "e8m0x2_to_bf162raw",
    "float2_to_e8m0x2",
    "float_to_e8m0",
]

#: Rounding modes of the conversions to ue8m0, by PTX name: ``"rz"`` (``cudaRoundZero``)
#: and ``"rp"`` (``cudaRoundPosInf``).
E8M0_ROUNDINGS = narrow.E8M0_ROUNDINGS

# Source type of the __nv_cvt_* intrinsics: (dtype of the values, bytes per element).
_NV_SOURCE = {f: (FORMATS[f].storage_dtype, FORMATS[f].storage_dtype.itemsize)
              for f in ("f32", "bf16")}


def _bool_arg(v: Any, name: str) -> bool:
    return checks.static_choice(v, name, (True, False))


def _pack8(hi: jax.Array, lo: jax.Array) -> jax.Array:
    return ((hi << 8) | lo).astype(jnp.uint16)


_E8M0_RULES = """The magnitude is rounded to a power of two (the destination has no sign: the
    input's sign is ignored), ``"rz"`` down and ``"rp"`` up; a magnitude at or below
    ``2**-127`` (zero included; ``"rz"``: below ``2**-126``) gives code 0, ``2**-127``
    (the format has no zero); a result beyond ``2**127`` and ±inf give 0xFE (``2**127``)
    with ``satfinite``, else the NaN 0xFF; NaN gives 0xFF. PTX ISA (cvt, ``.satfinite``:
    "positive MAX_NORM in .ue8m0x2 for which destination sign is not supported") and
    ``cuda_fp8.h``; not verified on hardware."""


def _e8m0_args(rounding: Any, satfinite: Any, name: str = "satfinite") -> tuple[str, bool]:
    return (checks.static_choice(rounding, "rounding", E8M0_ROUNDINGS),
            _bool_arg(satfinite, name))


def cvt_f32_to_ue8m0x2(a: Any, b: Any, rounding: str, *, satfinite: bool = False) -> jax.Array:
    """PTX ``cvt.{rz,rp}{.satfinite}.ue8m0x2.f32 d, a, b`` (sm_100a, sm_120a).

    ``a`` goes to the upper byte of ``d`` and ``b`` to the lower byte (PTX ISA, cvt).
    {rules}

    Args:
      a: float32 array (or its uint32 bits).
      b: float32 array (or bits) of a shape that broadcasts with ``a``.
      rounding: static, ``"rz"`` or ``"rp"`` (PTX ``.frnd3``).
      satfinite: static; ``.satfinite``.

    Returns:
      uint16 array: the ``.b16`` register ``d``.

    Raises:
      TypeError: an operand is not float32 (or uint32 bits).
      ValueError: ``rounding`` or ``satfinite`` is not allowed, or the shapes do not
        broadcast together.

    Example:
      >>> import jax.numpy as jnp
      >>> a, b = jnp.float32(3.0), jnp.float32(-0.75)
      >>> hex(int(cvt_f32_to_ue8m0x2(a, b, "rz"))), hex(int(cvt_f32_to_ue8m0x2(a, b, "rp")))
      ('0x807e', '0x817f')
    """
    mode, sat = _e8m0_args(rounding, satfinite)
    ua, ub = narrow.f32_pair_args(a, b)
    return _pack8(narrow.to_e8m0_bits(ua, "f32", mode, sat),
                  narrow.to_e8m0_bits(ub, "f32", mode, sat))


def cvt_bf16x2_to_ue8m0x2(x: Any, rounding: str, *, satfinite: bool = False) -> jax.Array:
    """PTX ``cvt.{rz,rp}{.satfinite}.ue8m0x2.bf16x2 d, a`` (sm_100a, sm_120a).

    The bf16 in the upper half of ``a`` goes to the upper byte of ``d``.
    {rules}

    Args:
      x: uint32 array: the ``.bf16x2`` register ``a``.
      rounding: static, ``"rz"`` or ``"rp"``.
      satfinite: static; ``.satfinite``.

    Returns:
      uint16 array of ``x``'s shape.

    Raises:
      TypeError: ``x`` is not uint32.
      ValueError: ``rounding`` or ``satfinite`` is not allowed.

    Example:
      >>> import jax.numpy as jnp
      >>> hex(int(cvt_bf16x2_to_ue8m0x2(jnp.uint32(0x7F80_4040), "rp", satfinite=True)))
      '0xfe81'
    """
    mode, sat = _e8m0_args(rounding, satfinite)
    u = narrow.word_arg(x, "x", np.uint32)
    return _pack8(narrow.to_e8m0_bits(u >> 16, "bf16", mode, sat),
                  narrow.to_e8m0_bits(u & jnp.uint32(0xFFFF), "bf16", mode, sat))


def cvt_ue8m0x2_to_bf16x2(x: Any) -> jax.Array:
    """PTX ``cvt.rn.bf16x2.ue8m0x2 d, a`` (sm_100a, sm_120a): exact.

    The upper byte of ``a`` goes to the upper half of ``d``. Code ``c`` is ``2**(c -
    127)``: code 0 is the bf16 subnormal ``2**-127`` (0x0040); the NaN 0xFF gives the
    canonical bf16 NaN 0x7FFF (``cuda_fp8.h``). Not verified on hardware.

    Args:
      x: uint16 array: the ``.b16`` register ``a``.

    Returns:
      uint32 array of ``x``'s shape: the ``.bf16x2`` register ``d``.

    Raises:
      TypeError: ``x`` is not uint16.

    Example:
      >>> import jax.numpy as jnp
      >>> hex(int(cvt_ue8m0x2_to_bf16x2(jnp.uint16(0x7F00))))
      '0x3f800040'
    """
    u = narrow.word_arg(x, "x", np.uint16)
    return (narrow.e8m0_to_bf16_bits(u >> 8) << 16) | narrow.e8m0_to_bf16_bits(u)


def _nv_to_e8m0(x: Any, src: str, saturate: Any, rounding: Any) -> jax.Array:
    mode, sat = _e8m0_args(rounding, saturate, "saturate")
    u = narrow.bits_arg(x, "x", *_NV_SOURCE[src])
    return narrow.to_e8m0_bits(u, src, mode, sat).astype(jnp.uint8)


def _nv_to_e8m0x2(x: Any, src: str, saturate: Any, rounding: Any) -> jax.Array:
    mode, sat = _e8m0_args(rounding, saturate, "saturate")
    lo, hi = narrow.pair_arg(x, "x", *_NV_SOURCE[src])
    return _pack8(narrow.to_e8m0_bits(hi, src, mode, sat), narrow.to_e8m0_bits(lo, src, mode, sat))


def float_to_e8m0(x: Any, saturate: bool, rounding: str) -> jax.Array:
    """``__nv_cvt_float_to_e8m0(x, saturate ? __NV_SATFINITE : __NV_NOSAT, rounding)``.

    {rules}

    Args:
      x: float32 array (or its uint32 bits).
      saturate: static bool: True for ``__NV_SATFINITE``, False for ``__NV_NOSAT``.
      rounding: static, ``"rz"`` (``cudaRoundZero``) or ``"rp"`` (``cudaRoundPosInf``).

    Returns:
      uint8 array (``__nv_fp8_storage_t``): ue8m0 codes.

    Raises:
      TypeError: ``x`` is not float32 (or uint32 bits).
      ValueError: ``saturate`` or ``rounding`` is not allowed.

    Example:
      >>> import jax.numpy as jnp
      >>> float_to_e8m0(jnp.float32([1.0, 1.5, 0.0, jnp.inf]), True, "rp")
      Array([127, 128,   0, 254], dtype=uint8)
    """
    return _nv_to_e8m0(x, "f32", saturate, rounding)


def float2_to_e8m0x2(x: Any, saturate: bool, rounding: str) -> jax.Array:
    """``__nv_cvt_float2_to_e8m0x2``: ``x[..., 0]`` (``.x``) to the low byte.

    Example:
      >>> import jax.numpy as jnp
      >>> hex(int(float2_to_e8m0x2(jnp.float32([1.0, 3.0]), False, "rz")))
      '0x807f'
    """
    return _nv_to_e8m0x2(x, "f32", saturate, rounding)


def double_to_e8m0(x: Any, saturate: bool, rounding: str) -> jax.Array:
    """``__nv_cvt_double_to_e8m0``: float64 to a ue8m0 code, rounded once from the double,
    with the rules of :func:`float_to_e8m0` (a double beyond float32's range overflows or
    gives code 0, as the header's conversion through float32 with a sticky bit does).

    Args:
      x: float64 array (needs ``jax_enable_x64``).
      saturate: static bool (``__NV_SATFINITE`` / ``__NV_NOSAT``).
      rounding: static, ``"rz"`` or ``"rp"``.

    Returns:
      uint8 array: ue8m0 codes.

    Raises:
      TypeError: ``x`` is not float64 (with x64 off a float64 NumPy input raises too).
      ValueError: ``saturate`` or ``rounding`` is not allowed.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> with jax.enable_x64(True):  # just above 2**-127: up to 2**-126
      ...     print(double_to_e8m0(jnp.float64(2.0**-127 * (1 + 2**-40)), True, "rp"))
      1
    """
    mode, sat = _e8m0_args(rounding, saturate, "saturate")
    arr = checks.array_arg(x, "x")
    if arr.dtype != jnp.float64:
        raise TypeError(f"x must be a float64 array (with jax_enable_x64), got dtype {arr.dtype}")
    return narrow.to_e8m0_bits(bitops.uint_view(arr), "f64", mode, sat).astype(jnp.uint8)


def bfloat16raw_to_e8m0(x: Any, saturate: bool, rounding: str) -> jax.Array:
    """``__nv_cvt_bfloat16raw_to_e8m0``: bf16 (bfloat16 or uint16 bits) to a ue8m0 code.

    Example:
      >>> import jax.numpy as jnp, ml_dtypes
      >>> bfloat16raw_to_e8m0(jnp.array(-5.0, ml_dtypes.bfloat16), False, "rp")
      Array(130, dtype=uint8)
    """
    return _nv_to_e8m0(x, "bf16", saturate, rounding)


def bfloat162raw_to_e8m0x2(x: Any, saturate: bool, rounding: str) -> jax.Array:
    """``__nv_cvt_bfloat162raw_to_e8m0x2``: (..., 2) bf16 (``.x``, ``.y``) to a uint16 word.

    Example:
      >>> import jax.numpy as jnp, ml_dtypes
      >>> hex(int(bfloat162raw_to_e8m0x2(jnp.array([1, 3], ml_dtypes.bfloat16), False, "rz")))
      '0x807f'
    """
    return _nv_to_e8m0x2(x, "bf16", saturate, rounding)


def e8m0_to_bf16raw(x: Any) -> jax.Array:
    """``__nv_cvt_e8m0_to_bf16raw``: a ue8m0 code (uint8) to bfloat16, exact; NaN (0xFF)
    gives 0x7FFF.

    Example:
      >>> import jax.numpy as jnp
      >>> e8m0_to_bf16raw(jnp.uint8([127, 130, 255]))
      Array([1, 8, nan], dtype=bfloat16)
    """
    u = narrow.word_arg(x, "x", np.uint8)
    return bitops.from_u32(narrow.e8m0_to_bf16_bits(u), jnp.bfloat16)


def e8m0x2_to_bf162raw(x: Any) -> jax.Array:
    """``__nv_cvt_e8m0x2_to_bf162raw``: a uint16 word to (..., 2) bfloat16 (``.x`` = low
    byte).

    Example:
      >>> import jax.numpy as jnp
      >>> e8m0x2_to_bf162raw(jnp.uint16(0x807F))
      Array([1, 2], dtype=bfloat16)
    """
    u = narrow.word_arg(x, "x", np.uint16)
    lo, hi = narrow.e8m0_to_bf16_bits(u), narrow.e8m0_to_bf16_bits(u >> 8)
    return bitops.from_u32(jnp.stack([lo, hi], -1), jnp.bfloat16)


for _f in (cvt_f32_to_ue8m0x2, cvt_bf16x2_to_ue8m0x2, float_to_e8m0):
    if _f.__doc__:  # None under python -OO
        _f.__doc__ = _f.__doc__.replace("{rules}", _E8M0_RULES)


def _e8m0_table() -> dict[str, Callable[..., jax.Array]]:
    t: dict[str, Callable[..., jax.Array]] = {}
    for mode in E8M0_ROUNDINGS:
        for sat in (False, True):
            s = ".satfinite" if sat else ""
            t[f"cvt.{mode}{s}.ue8m0x2.f32"] = functools.partial(
                cvt_f32_to_ue8m0x2, rounding=mode, satfinite=sat)
            t[f"cvt.{mode}{s}.ue8m0x2.bf16x2"] = functools.partial(
                cvt_bf16x2_to_ue8m0x2, rounding=mode, satfinite=sat)
    t["cvt.rn.bf16x2.ue8m0x2"] = cvt_ue8m0x2_to_bf16x2
    return t


#: The ue8m0 PTX forms (sm_100a, sm_120a; not in fp8's
#: :data:`~jaxwarp._src.numerics.fp8.PTX_FORMS`, which lists the sm_90 forms the H100
#: captures hold): PTX name -> function of the register words:
#: ``(a, b)`` float32 (or uint32 bits) -> uint16, ``a`` uint32 (bf16x2) -> uint16, ``a``
#: uint16 -> uint32 (bf16x2).
E8M0_PTX_FORMS: dict[str, Callable[..., jax.Array]] = _e8m0_table()
