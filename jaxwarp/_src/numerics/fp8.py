"""fp8 (e4m3 and e5m2) conversions of PTX ``cvt``, bit-exact, and their bit kernels.

The PTX forms work on register words as ``cvt`` sees them (``.b16`` holds two fp8, ``.b32``
two f16): :func:`cvt_f32_to_fp8x2` (``cvt.rn.satfinite{.relu}.{e4m3x2,e5m2x2}.f32``),
:func:`cvt_f16x2_to_fp8x2` (``... .f16x2``) and :func:`cvt_fp8x2_to_f16x2`
(``cvt.rn{.relu}.f16x2.{e4m3x2,e5m2x2}``). :data:`PTX_FORMS` lists them by their PTX name.
The bit kernels :func:`to_fp8_bits` and :func:`fp8_to_f16_bits` hold the arithmetic;
the ``cuda_fp8.h`` intrinsics (``fp8_intrinsics.py``) run on them too. The ue8m0
block-scale conversions are in ``ue8m0.py``.

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
from jaxwarp._src.numerics import narrow, softfloat
from jaxwarp._src.numerics.formats import ALIASES, FORMATS

__all__ = [
    "FP8_FORMATS",
    "PTX_FORMS",
    "cvt_f16x2_to_fp8x2",
    "cvt_f32_to_e4m3x2",
    "cvt_f32_to_e5m2x2",
    "cvt_f32_to_fp8x2",
    "cvt_fp8x2_to_f16x2",
    "fp8_to_f16_bits",
    "to_fp8_bits",
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


@functools.partial(jax.jit, static_argnums=(1, 2, 3, 4))  # one program, also when eager
def to_fp8_bits(u: jax.Array, src: str, fmt: str, satfinite: bool, relu: bool) -> jax.Array:
    """Source bits (zero-extended to uint32; uint64 for f64) -> fp8 bits (uint32), one RNE
    rounding onto the fp8 grid, with the rules of the module docstring.

    The kernel of every conversion to fp8 (the PTX forms here, the ``cuda_fp8.h``
    intrinsics of ``fp8_intrinsics.py``); it checks no argument.

    Args:
      u: uint32 bit patterns of ``src`` (uint64 for ``"f64"``, x64 on).
      src: static, ``"f64"``, ``"f32"``, ``"f16"`` or ``"bf16"``.
      fmt: static, ``"e4m3"`` or ``"e5m2"``.
      satfinite: static; beyond MAX_NORM gives ±MAX_NORM (else NaN for e4m3, ±inf for
        e5m2).
      relu: static; a negative result becomes +0.

    Example:
      >>> import jax.numpy as jnp
      >>> x = jnp.uint32(0x43FA0000)  # 500.0
      >>> [hex(int(to_fp8_bits(x, "f32", "e4m3", sat, False))) for sat in (True, False)]
      ['0x7e', '0x7f']
    """
    u = u if src == "f64" else u.astype(jnp.uint32)
    D = FORMATS[fmt]
    max_bits = int(np.array(D.max_value, D.storage_dtype).view(np.uint8))
    if src == "f32":  # the same rounding in a few integer operations on the magnitude
        big = max_bits if satfinite else (max_bits + 1 if D.has_inf else _NAN8)
        code = softfloat.f32_to_rn_bits(u, fmt, big, _NAN8)
        if relu:
            code = jnp.where((code & jnp.uint32(0x80)) != 0, jnp.uint32(0), code)
        return code
    neg, lsb, sig, _, inf, nan = softfloat.decode(u, src)
    q, lsb = softfloat.round_sig(sig.astype(u.dtype), lsb, softfloat.emin(fmt),
                                 D.mantissa_bits, "rn")
    code = softfloat.encode_rounded(neg, q.astype(jnp.uint32), lsb, fmt)
    # Beyond MAX_NORM (rounded with an unbounded exponent): e5m2's next code is inf, e4m3's
    # is NaN; with satfinite, MAX_NORM.
    max_lsb, max_q = _overflow_limit(fmt)
    over = (lsb > max_lsb) | ((lsb == max_lsb) & (q > max_q)) | inf
    big = max_bits if satfinite else (max_bits + 1 if D.has_inf else _NAN8)
    code = jnp.where(over, jnp.uint32(big) | (neg.astype(jnp.uint32) << 7), code)
    code = jnp.where(nan, jnp.uint32(_NAN8), code)
    if relu:
        code = jnp.where((code & jnp.uint32(0x80)) != 0, jnp.uint32(0), code)
    return code


@functools.partial(jax.jit, static_argnums=(1, 2))
def fp8_to_f16_bits(b: jax.Array, fmt: str, relu: bool) -> jax.Array:
    """fp8 bits (uint32, low byte) -> f16 bits (uint32), exact; NaN -> 0x7FFF.

    The kernel of every conversion from fp8; ``relu``: a negative value becomes +0.

    Example:
      >>> import jax.numpy as jnp
      >>> hex(int(fp8_to_f16_bits(jnp.uint32(0xC0), "e4m3", False)))  # -2.0
      '0xc000'
    """
    b = b.astype(jnp.uint32) & jnp.uint32(0xFF)
    neg, lsb, sig, _, inf, nan = softfloat.decode(b, fmt)
    h = softfloat.encode(neg, sig.astype(jnp.uint32), lsb, "f16")  # always representable
    h = jnp.where(inf, jnp.uint32(0x7C00) | (h & jnp.uint32(0x8000)), h)
    if relu:
        h = jnp.where(neg, jnp.uint32(0), h)
    return jnp.where(nan, jnp.uint32(_NAN16), h)


# ----------------------------------------------------------------------------------------
# Argument handling (the shared helpers are in ``narrow``).


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
    return _pack8(to_fp8_bits(ua, "f32", fmt, True, relu),
                  to_fp8_bits(ub, "f32", fmt, True, relu))


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
    lo = to_fp8_bits(u & jnp.uint32(0xFFFF), "f16", fmt, True, relu)
    hi = to_fp8_bits(u >> 16, "f16", fmt, True, relu)
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
    lo = fp8_to_f16_bits(u & jnp.uint32(0xFF), fmt, relu)
    hi = fp8_to_f16_bits(u >> 8, fmt, relu)
    return (hi << 16) | lo


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

