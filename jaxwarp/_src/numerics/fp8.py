"""fp8 (e4m3 and e5m2) conversions of PTX ``cvt`` and ``cuda_fp8.h``, bit-exact.

Two families of functions:

* PTX forms, on register words as ``cvt`` sees them (``.b16`` holds two fp8, ``.b32``
  two f16): :func:`cvt_f32_to_fp8x2` (``cvt.rn.satfinite{.relu}.{e4m3x2,e5m2x2}.f32``),
  :func:`cvt_f16x2_to_fp8x2` (``... .f16x2``) and :func:`cvt_fp8x2_to_f16x2`
  (``cvt.rn{.relu}.f16x2.{e4m3x2,e5m2x2}``). :data:`PTX_FORMS` lists them by their
  PTX name.
* The ``cuda_fp8.h`` intrinsics, on the C types they take: :func:`float_to_fp8`,
  :func:`float2_to_fp8x2`, :func:`double_to_fp8`, :func:`halfraw_to_fp8`,
  :func:`halfraw2_to_fp8x2`, :func:`bfloat16raw_to_fp8`, :func:`bfloat16raw2_to_fp8x2`,
  :func:`fp8_to_halfraw`, :func:`fp8x2_to_halfraw2`. A ``float2`` / ``__half2_raw`` /
  ``__nv_bfloat162_raw`` is a trailing axis of 2 (``[..., 0]`` is ``.x``); an
  ``__nv_fp8x2_storage_t`` is a uint16 word (``.x`` in the low byte).

Arithmetic (PTX ISA, ``cvt``; ``cuda_fp8.h``): round to nearest, ties to even, onto the
fp8 grid including its subnormals; zeros and results that round to zero keep their sign.
With ``.satfinite`` / ``__NV_SATFINITE`` a result beyond MAX_NORM (448 for e4m3, 57344 for
e5m2), infinities included, becomes ±MAX_NORM; without it, e4m3 gives NaN (it has no
infinity) and e5m2 gives ±inf, and the boundary is where rounding with an unbounded exponent
leaves the finite range (above 464 for e4m3, from 61440 up for e5m2). Every NaN becomes
0x7F. ``.relu`` turns a negative result into +0 (NaN stays NaN). fp8 to f16 is exact; NaN
becomes the canonical f16 NaN 0x7FFF.

Formats come from :data:`~jaxwarp._src.numerics.formats.FORMATS` (read from
``ml_dtypes.finfo``), the one registry of their parameters. Rounding is done on the bit
patterns by the soft-float helpers of ``numerics/softfloat.py`` (decode, round to nearest
even, encode), with uint32/int32 operations, never with XLA's ``convert``: XLA
has no ``.satfinite``, keeps the sign of NaN (e4m3 0xFF; measured with jax 0.10 on CPU)
and a backend may flush subnormals. In range it agrees with this model on every f16 and
bf16 pattern (no double rounding through f32 was seen on CPU; ``tests/numerics/test_fp8.py``).

sm_90 notes (ptxas 13.0, ``tools/capture/FORMAT_MOVCVT.md``): PTX requires ``.satfinite``
for an fp8 destination, and has no bf16x2 <-> fp8x2 ``cvt``; the ``__NV_NOSAT`` and bf16
intrinsics are a software conversion in ``cuda_fp8.hpp``, with the same results as above.

ue8m0, the power-of-two block scale of ``cuda_fp8.h`` (sm_100a, sm_120a): the PTX forms
:func:`cvt_f32_to_ue8m0x2` (``cvt.{rz,rp}{.satfinite}.ue8m0x2.f32``),
:func:`cvt_bf16x2_to_ue8m0x2` (``... .ue8m0x2.bf16x2``) and :func:`cvt_ue8m0x2_to_bf16x2`
(``cvt.rn.bf16x2.ue8m0x2``), listed in :data:`E8M0_PTX_FORMS`, and the intrinsics
:func:`float_to_e8m0`, :func:`float2_to_e8m0x2`, :func:`double_to_e8m0`,
:func:`bfloat16raw_to_e8m0`, :func:`bfloat162raw_to_e8m0x2`, :func:`e8m0_to_bf16raw` and
:func:`e8m0x2_to_bf162raw`. A code is a uint8 (``__nv_fp8_storage_t``), a pair a uint16.
These follow the PTX ISA text and ``cuda_fp8.h``'s documentation, not verified on hardware
(the H100 has no ue8m0 ``cvt``).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxwarp._src import checks
from jaxwarp._src.numerics import bitops, narrow, softfloat
from jaxwarp._src.numerics.formats import ALIASES, FORMATS

__all__ = [
    "E8M0_PTX_FORMS",
    "E8M0_ROUNDINGS",
    "FP8_FORMATS",
    "PTX_FORMS",
    "bfloat162raw_to_e8m0x2",
    "bfloat16raw2_to_fp8x2",
    "bfloat16raw_to_e8m0",
    "bfloat16raw_to_fp8",
    "cvt_bf16x2_to_ue8m0x2",
    "cvt_f16x2_to_fp8x2",
    "cvt_f32_to_e4m3x2",
    "cvt_f32_to_e5m2x2",
    "cvt_f32_to_fp8x2",
    "cvt_f32_to_ue8m0x2",
    "cvt_fp8x2_to_f16x2",
    "cvt_ue8m0x2_to_bf16x2",
    "double_to_e8m0",
    "double_to_fp8",
    "e8m0_to_bf16raw",
    "e8m0x2_to_bf162raw",
    "float2_to_e8m0x2",
    "float2_to_fp8x2",
    "float_to_e8m0",
    "float_to_fp8",
    "fp8_to_halfraw",
    "fp8x2_to_halfraw2",
    "halfraw2_to_fp8x2",
    "halfraw_to_fp8",
]

#: The fp8 formats, by the name PTX gives them, and their ml_dtypes storage type (read from
#: :data:`~jaxwarp._src.numerics.formats.FORMATS`).
FP8_FORMATS = {f: FORMATS[f].storage_dtype.type for f in ("e4m3", "e5m2")}
_NAN8 = 0x7F  # the NaN every conversion to fp8 returns
_NAN16 = 0x7FFF  # the NaN every conversion to f16 returns


@functools.cache
def _overflow_limit(fmt: str) -> tuple[int, int]:
    """(lsb, q) of the largest finite fp8 value ``q * 2**lsb`` (q of nmant + 1 bits), from
    :data:`~jaxwarp._src.numerics.formats.FORMATS`."""
    f = FORMATS[fmt]
    _, e = math.frexp(f.max_value)  # max_value = m * 2**e, 0.5 <= m < 1
    lsb = e - 1 - f.mantissa_bits
    return lsb, int(f.max_value / 2.0**lsb)


def _fmt_arg(fmt: Any) -> str:
    return checks.format_name(fmt, "fmt", tuple(FP8_FORMATS), ALIASES)


def _bool_arg(v: Any, name: str) -> bool:
    return checks.static_choice(v, name, (True, False))


# ----------------------------------------------------------------------------------------
# Bit kernels (uint32 in, uint32 out).


def _to_fp8_bits(u: jax.Array, src: str, fmt: str, satfinite: bool, relu: bool) -> jax.Array:
    """Source bits (zero-extended to uint32; uint64 for f64) -> fp8 bits (uint32), one RNE
    rounding onto the fp8 grid."""
    u = u if src == "f64" else u.astype(jnp.uint32)
    neg, lsb, sig, _, inf, nan = softfloat.decode(u, src)
    D = FORMATS[fmt]
    q, lsb = softfloat.round_sig(sig.astype(u.dtype), lsb, softfloat.emin(fmt),
                                 D.mantissa_bits, "rn")
    code = softfloat.encode_rounded(neg, q.astype(jnp.uint32), lsb, fmt)
    # Beyond MAX_NORM (rounded with an unbounded exponent): e5m2's next code is inf, e4m3's
    # is NaN; with satfinite, MAX_NORM.
    max_lsb, max_q = _overflow_limit(fmt)
    over = (lsb > max_lsb) | ((lsb == max_lsb) & (q > max_q)) | inf
    max_bits = int(np.array(D.max_value, D.storage_dtype).view(np.uint8))
    big = max_bits if satfinite else (max_bits + 1 if D.has_inf else _NAN8)
    code = jnp.where(over, jnp.uint32(big) | (neg.astype(jnp.uint32) << 7), code)
    code = jnp.where(nan, jnp.uint32(_NAN8), code)
    if relu:
        code = jnp.where((code & jnp.uint32(0x80)) != 0, jnp.uint32(0), code)
    return code


def _fp8_to_f16_bits(b: jax.Array, fmt: str, relu: bool) -> jax.Array:
    """fp8 bits (uint32, low byte) -> f16 bits (uint32), exact; NaN -> 0x7FFF."""
    b = b.astype(jnp.uint32) & jnp.uint32(0xFF)
    neg, lsb, sig, _, inf, nan = softfloat.decode(b, fmt)
    h = softfloat.encode(neg, sig.astype(jnp.uint32), lsb, "f16")  # always representable
    h = jnp.where(inf, jnp.uint32(0x7C00) | (h & jnp.uint32(0x8000)), h)
    if relu:
        h = jnp.where(neg, jnp.uint32(0), h)
    return jnp.where(nan, jnp.uint32(_NAN16), h)


# ----------------------------------------------------------------------------------------
# Argument handling (the shared helpers are in ``narrow``).


def _as_fp8(code: jax.Array, fmt: str) -> jax.Array:
    return bitops.from_u32(code, FP8_FORMATS[fmt])


def _pack8(hi: jax.Array, lo: jax.Array) -> jax.Array:
    return ((hi << 8) | lo).astype(jnp.uint16)


def _check_satfinite(satfinite: Any) -> None:
    if not _bool_arg(satfinite, "satfinite"):
        raise ValueError("satfinite=False: on sm_90 PTX requires .satfinite for an fp8 "
                         "destination (ptxas: \"'.satfinite' modifier required for "
                         "instruction 'cvt' with destination type '.e4m3x2'\"); allowed: True. "
                         "The __NV_NOSAT intrinsics (float_to_fp8(..., saturate=False)) exist.")


# ----------------------------------------------------------------------------------------
# PTX forms.


def cvt_f32_to_fp8x2(a: Any, b: Any, fmt: str, *, relu: bool = False,
                     satfinite: bool = True) -> jax.Array:
    """PTX ``cvt.rn.satfinite{.relu}.{e4m3x2,e5m2x2}.f32 d, a, b``.

    ``a`` goes to the upper byte of ``d`` and ``b`` to the lower byte (PTX ISA).

    Args:
      a: float32 array (or its uint32 bits): the first source operand.
      b: float32 array (or bits) of a shape that broadcasts with ``a``.
      fmt: static, ``"e4m3"`` or ``"e5m2"``.
      relu: static; ``.relu``: negative results become +0, NaN stays NaN.
      satfinite: static; must be True (sm_90 has no other form).

    Returns:
      uint16 array: the ``.b16`` register ``d``.

    Raises:
      TypeError: an operand is not float32 (or uint32 bits).
      ValueError: ``fmt`` is not allowed, ``satfinite`` is False, or ``a`` and ``b``
        do not broadcast together.

    Example:
      >>> import jax.numpy as jnp
      >>> hex(int(cvt_f32_to_fp8x2(jnp.float32(1.0), jnp.float32(-2.0), "e4m3")))
      '0x38c0'
    """
    fmt = _fmt_arg(fmt)
    relu = _bool_arg(relu, "relu")
    _check_satfinite(satfinite)
    ua, ub = narrow.f32_pair_args(a, b)
    return _pack8(_to_fp8_bits(ua, "f32", fmt, True, relu),
                  _to_fp8_bits(ub, "f32", fmt, True, relu))


def cvt_f32_to_e4m3x2(a: Any, b: Any, *, relu: bool = False, satfinite: bool = True) -> jax.Array:
    """PTX ``cvt.rn.satfinite{.relu}.e4m3x2.f32 d, a, b``: :func:`cvt_f32_to_fp8x2` with e4m3.

    Example:
      >>> import jax.numpy as jnp
      >>> hex(int(cvt_f32_to_e4m3x2(jnp.float32(1e6), jnp.float32(0.0))))
      '0x7e00'
    """
    return cvt_f32_to_fp8x2(a, b, "e4m3", relu=relu, satfinite=satfinite)


def cvt_f32_to_e5m2x2(a: Any, b: Any, *, relu: bool = False, satfinite: bool = True) -> jax.Array:
    """PTX ``cvt.rn.satfinite{.relu}.e5m2x2.f32 d, a, b``: :func:`cvt_f32_to_fp8x2` with e5m2.

    Example:
      >>> import jax.numpy as jnp
      >>> hex(int(cvt_f32_to_e5m2x2(jnp.float32(1e6), jnp.float32(1.0))))
      '0x7b3c'
    """
    return cvt_f32_to_fp8x2(a, b, "e5m2", relu=relu, satfinite=satfinite)


def cvt_f16x2_to_fp8x2(x: Any, fmt: str, *, relu: bool = False,
                       satfinite: bool = True) -> jax.Array:
    """PTX ``cvt.rn.satfinite{.relu}.{e4m3x2,e5m2x2}.f16x2 d, a``.

    The f16 in the upper half of ``a`` goes to the upper byte of ``d``.

    Args:
      x: uint32 array: the ``.f16x2`` register ``a``.
      fmt: static, ``"e4m3"`` or ``"e5m2"``.
      relu: static, ``.relu``.
      satfinite: static; must be True.

    Returns:
      uint16 array of ``x``'s shape.

    Raises:
      TypeError: ``x`` is not uint32.
      ValueError: ``fmt`` is not allowed, or ``satfinite`` is False.

    Example:
      >>> import jax.numpy as jnp
      >>> hex(int(cvt_f16x2_to_fp8x2(jnp.uint32(0xC000_3C00), "e4m3")))
      '0xc038'
    """
    fmt = _fmt_arg(fmt)
    relu = _bool_arg(relu, "relu")
    _check_satfinite(satfinite)
    u = narrow.word_arg(x, "x", np.uint32)
    lo = _to_fp8_bits(u & jnp.uint32(0xFFFF), "f16", fmt, True, relu)
    hi = _to_fp8_bits(u >> 16, "f16", fmt, True, relu)
    return _pack8(hi, lo)


def cvt_fp8x2_to_f16x2(x: Any, fmt: str, *, relu: bool = False) -> jax.Array:
    """PTX ``cvt.rn{.relu}.f16x2.{e4m3x2,e5m2x2} d, a``: exact; NaN -> 0x7FFF.

    The upper byte of ``a`` goes to the upper half of ``d``.

    Args:
      x: uint16 array: the ``.b16`` register ``a``.
      fmt: static, ``"e4m3"`` or ``"e5m2"``.
      relu: static, ``.relu``: negative results become +0.

    Returns:
      uint32 array of ``x``'s shape.

    Raises:
      TypeError: ``x`` is not uint16.
      ValueError: ``fmt`` is not allowed.

    Example:
      >>> import jax.numpy as jnp
      >>> hex(int(cvt_fp8x2_to_f16x2(jnp.uint16(0xC038), "e4m3")))
      '0xc0003c00'
    """
    fmt = _fmt_arg(fmt)
    relu = _bool_arg(relu, "relu")
    u = narrow.word_arg(x, "x", np.uint16)
    lo = _fp8_to_f16_bits(u & jnp.uint32(0xFF), fmt, relu)
    hi = _fp8_to_f16_bits(u >> 8, fmt, relu)
    return (hi << 16) | lo


# ----------------------------------------------------------------------------------------
# cuda_fp8.h intrinsics.


def _sat_arg(saturate: Any) -> bool:
    return _bool_arg(saturate, "saturate")


# Source type of the __nv_cvt_* intrinsics: (dtype of the values, bytes per element).
_NV_SOURCE = {f: (FORMATS[f].storage_dtype, FORMATS[f].storage_dtype.itemsize)
              for f in ("f32", "f16", "bf16")}


def _nv_to_fp8(x: Any, src: str, fmt: str, saturate: Any) -> jax.Array:
    """One element of ``src`` (values or bits) to fp8, as the __nv_cvt_*_to_fp8 intrinsics."""
    fmt, sat = _fmt_arg(fmt), _sat_arg(saturate)
    u = narrow.bits_arg(x, "x", *_NV_SOURCE[src])
    return _as_fp8(_to_fp8_bits(u, src, fmt, sat, False), fmt)


def _nv_to_fp8x2(x: Any, src: str, fmt: str, saturate: Any) -> jax.Array:
    """(..., 2) elements of ``src`` (``.x``, ``.y``) to one uint16 word, ``.x`` low."""
    fmt, sat = _fmt_arg(fmt), _sat_arg(saturate)
    lo, hi = narrow.pair_arg(x, "x", *_NV_SOURCE[src])
    return _pack8(_to_fp8_bits(hi, src, fmt, sat, False), _to_fp8_bits(lo, src, fmt, sat, False))


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
    return _as_fp8(_to_fp8_bits(bitops.uint_view(arr), "f64", fmt, sat, False), fmt)


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
    u = narrow.bits_arg(x, "x", FP8_FORMATS[fmt], 1)
    return bitops.from_u32(_fp8_to_f16_bits(u, fmt, False), jnp.float16)


def fp8x2_to_halfraw2(x: Any, fmt: str) -> jax.Array:
    """``__nv_cvt_fp8x2_to_halfraw2``: a uint16 word to (..., 2) float16 (``.x`` = low byte).

    Example:
      >>> import jax.numpy as jnp
      >>> fp8x2_to_halfraw2(jnp.uint16(0xC038), "e4m3")
      Array([ 1., -2.], dtype=float16)
    """
    fmt = _fmt_arg(fmt)
    u = narrow.word_arg(x, "x", np.uint16)
    lo = _fp8_to_f16_bits(u & jnp.uint32(0xFF), fmt, False)
    hi = _fp8_to_f16_bits(u >> 8, fmt, False)
    return bitops.from_u32(jnp.stack([lo, hi], -1), jnp.float16)


# ----------------------------------------------------------------------------------------
# The PTX forms by name, each mapping its register words to register words.


def _ptx_table() -> dict[str, Callable[..., jax.Array]]:
    t: dict[str, Callable[..., jax.Array]] = {}
    for fmt in FP8_FORMATS:
        for relu in (False, True):
            r = ".relu" if relu else ""
            t[f"cvt.rn.satfinite{r}.{fmt}x2.f32"] = functools.partial(
                cvt_f32_to_fp8x2, fmt=fmt, relu=relu)
            t[f"cvt.rn.satfinite{r}.{fmt}x2.f16x2"] = functools.partial(
                cvt_f16x2_to_fp8x2, fmt=fmt, relu=relu)
            t[f"cvt.rn{r}.f16x2.{fmt}x2"] = functools.partial(
                cvt_fp8x2_to_f16x2, fmt=fmt, relu=relu)
    return t


#: PTX name -> function of the register words: ``(a, b)`` uint32 -> uint16 for ``.f32``
#: sources, ``a`` uint32 -> uint16 for ``.f16x2``, ``a`` uint16 -> uint32 for ``.f16x2``
#: destinations. Every fp8 ``cvt`` form ptxas 13.0 accepts for sm_90.
PTX_FORMS: dict[str, Callable[..., jax.Array]] = _ptx_table()


# ----------------------------------------------------------------------------------------
# ue8m0: the power-of-two block scale (sm_100a, sm_120a; cuda_fp8.h).

#: Rounding modes of the conversions to ue8m0, by PTX name: ``"rz"`` (``cudaRoundZero``)
#: and ``"rp"`` (``cudaRoundPosInf``).
E8M0_ROUNDINGS = narrow.E8M0_ROUNDINGS

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


#: The ue8m0 PTX forms (sm_100a, sm_120a; not in :data:`PTX_FORMS`, which lists the
#: sm_90 forms the H100 captures hold): PTX name -> function of the register words:
#: ``(a, b)`` float32 (or uint32 bits) -> uint16, ``a`` uint32 (bf16x2) -> uint16, ``a``
#: uint16 -> uint32 (bf16x2).
E8M0_PTX_FORMS: dict[str, Callable[..., jax.Array]] = _e8m0_table()
