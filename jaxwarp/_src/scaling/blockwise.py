"""Fine-grained (blockwise) fp8 scales: DeepSeek-V3's 1x128 / 128x128 recipe.

DeepSeek-V3 (arXiv 2412.19437, section 3.3.2, "Fine-Grained Quantization") gives every
1x128 tile of an activation (one token, 128 channels) and every 128x128 block of a weight
(128 input x 128 output channels) its own scale, from the block's amax, and converts all
of them to e4m3. TransformerEngine documents the same recipe as ``Float8BlockScaling``
(not available in its JAX API): the scale of a block is ``max_fp8 / amax`` computed in
fp32, and by default a power of two, rounded down by keeping only the sign and exponent
bits of that fp32 quotient ("Scaling factors are stored as 32-bit floating point
numbers. By default, they are constrained to powers of 2"; FP32 scales on Hopper with
``NVTE_FP8_BLOCK_SCALING_FP32_SCALES=1``); an amax of 0, inf or NaN gives the scale 1, a
quotient that overflows the largest fp32 value.

Here a block's scale is the *dequantization* factor ``s`` (``x ~= q * s``), the value a
block-scaled GEMM multiplies by (DeepGEMM's ``sfa`` / ``sfb``; TransformerEngine's
``scale_inv``), and the quantized value is ``q = cvt.rn.satfinite(fl32(x / s))``:

* ``power_of_two=False`` (DeepSeek-V3's fp32 scales, its reference ``act_quant``):
  ``s = fl32(amax / max_fp8)``; ``s = 1`` where the amax is 0, inf or NaN or the quotient
  underflows to 0.
* ``power_of_two=True`` (TransformerEngine's default): ``t = fl32(max_fp8 / amax)``
  (``t`` = the largest fp32 where it overflows), ``t`` with its fraction bits cleared,
  and ``s = 1 / t`` (exact: a power of two); ``s = 1`` where the amax is 0, inf or NaN.
  ``x / s = x * t``, TransformerEngine's own quantization, rounded once.

Every step is an IEEE fp32 operation rounded once on the bits (``scaling.divide_rn``):
the same bits on every backend. The amax is an integer maximum of the fp32 magnitudes.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from jaxwarp._src import checks
from jaxwarp._src.numerics import bitops
from jaxwarp._src.numerics.formats import ALIASES, FORMATS
from jaxwarp._src.numerics.fp8 import FP8_FORMATS
from jaxwarp._src.numerics.fp8_intrinsics import float_to_fp8
from jaxwarp._src.scaling.tensor_scale import divide_rn, times_pow2

__all__ = ["BLOCK", "BLOCKS", "block_amax", "block_scales", "expand_scales",
           "quantize_blockwise"]

#: DeepSeek-V3's block length along K (and its promotion interval N_C).
BLOCK = 128
#: The block shapes of the recipe: 1x128 tiles (activations, gradients) and 128x128
#: blocks (weights).
BLOCKS = ((1, BLOCK), (BLOCK, BLOCK))
_FP8 = tuple(FP8_FORMATS)
_F32_MAX_BITS = 0x7F7FFFFF


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def block_amax(x: jax.Array, block: tuple[int, int]) -> jax.Array:
    """amax(|x|) of each ``block`` of a 2-D array (zero padding past the edges), as fp32.

    The maximum is taken on the fp32 magnitudes' bits (exact; a NaN counts above inf).
    """
    x32 = times_pow2(x, jnp.int32(0), "f32")  # exact widening, on the bits
    mag = lax.bitcast_convert_type(x32, jnp.int32) & 0x7FFFFFFF
    (m, k), (bm, bk) = x.shape, block
    mp, kp = _cdiv(m, bm) * bm, _cdiv(k, bk) * bk
    mag = jnp.pad(mag, ((0, mp - m), (0, kp - k)))
    top = mag.reshape(mp // bm, bm, kp // bk, bk).max(axis=(1, 3))
    return lax.bitcast_convert_type(top, jnp.float32)


def block_scales(x: jax.Array, operand_format: str, block: tuple[int, int],
                 power_of_two: bool) -> jax.Array:
    """The dequantization scale of each block (see the module docstring), fp32, shape
    ``(ceil(M / bm), ceil(K / bk))``; a constant to the derivative."""
    amax = block_amax(x, block)
    fmax = jnp.float32(FORMATS[operand_format].max_value)
    bad = (amax == 0) | ~jnp.isfinite(amax)
    if power_of_two:
        t = divide_rn(fmax, amax)
        t = jnp.where(jnp.isinf(t), bitops.from_u32(jnp.uint32(_F32_MAX_BITS), jnp.float32), t)
        k = (bitops.to_u32(t) >> 23).astype(jnp.int32) - 127  # t >= 2**-126: normal
        s = times_pow2(jnp.float32(1), -k, "f32")  # 2**-k, exact (2**-127 subnormal)
    else:
        s = divide_rn(amax, fmax)
        bad = bad | (s == 0)
    return lax.stop_gradient(jnp.where(bad, jnp.float32(1), s))


def expand_scales(s: jax.Array, shape: tuple[int, int], block: tuple[int, int]) -> jax.Array:
    """Block scales repeated to every element of a ``shape`` array (cut at the edges)."""
    out = jnp.repeat(jnp.repeat(s, block[0], axis=0), block[1], axis=1)
    return out[:shape[0], :shape[1]]


def quantize_blockwise(x: Any, operand_format: str = "e4m3", block: tuple[int, int] = (1, 128),
                       power_of_two: bool = False) -> tuple[jax.Array, jax.Array]:
    """Blockwise fp8 quantization (DeepSeek-V3's fine-grained recipe; TransformerEngine's
    ``Float8BlockScaling``): one fp32 scale per block from the block's amax.

    Each block's dequantization scale ``s`` is ``fl32(amax / max_fp8)`` (DeepSeek-V3's fp32
    scales) or, with ``power_of_two``, ``1 / t`` for ``t`` the fp32 ``max_fp8 / amax``
    rounded down to a power of two (TransformerEngine's default); ``s = 1`` where the amax
    is 0, inf or NaN. Then ``q = cvt.rn.satfinite(fl32(x / s))``: IEEE fp32 division
    rounded once, and the fp8 conversion (nearest even, saturating to the largest finite
    value, NaN kept). ``x ~= q * s`` blockwise. See ``docs/fp8_recipes.md``.

    Args:
        x: (M, K) float array (converted to fp32, exactly from f16 / bf16).
        operand_format: ``"e4m3"`` (the recipe's format) or ``"e5m2"``.
        block: ``(1, 128)`` (activation tiles: one row, 128 columns) or ``(128, 128)``
            (weight blocks); edge blocks may be smaller.
        power_of_two: static bool; see above.

    Returns:
        ``(q, s)``: ``q`` the fp8 array (``float8_e4m3fn`` / ``float8_e5m2``) of x's shape,
        ``s`` the fp32 scales, shape ``(ceil(M / block[0]), ceil(K / block[1]))``: ``(M,
        K / 128)`` for 1x128 tiles, ``(M / 128, K / 128)`` for 128x128 blocks, the layouts
        ``jaxwarp.matmul``'s ``a_scale`` and (transposed roles) ``b_scale`` take.

    Raises:
        ValueError: a format, block or shape that is not allowed.

    Example:
        >>> x = jnp.arange(256, dtype=jnp.float32).reshape(1, 256)
        >>> q, s = jaxwarp.fp8.quantize_blockwise(x)
        >>> s  # amax / 448 of each 128-column tile: 127 / 448 and 255 / 448
        Array([[0.28348213, 0.5691964 ]], dtype=float32)
        >>> q[0, 127], q[0, 255]
        (Array(448, dtype=float8_e4m3fn), Array(448, dtype=float8_e4m3fn))
    """
    x = checks.array_arg(x, "x")
    operand_format = checks.format_name(operand_format, "operand_format", _FP8, ALIASES)
    if not isinstance(block, tuple) or tuple(block) not in BLOCKS:
        raise ValueError(f"block={block!r} is not supported; allowed: {BLOCKS}")
    if not isinstance(power_of_two, bool):
        raise TypeError(f"power_of_two must be a Python bool, got {power_of_two!r}")
    if x.ndim != 2 or not jnp.issubdtype(x.dtype, jnp.floating):
        raise ValueError(f"x must be a 2-D float matrix, got {x.dtype}{list(x.shape)}")
    s = block_scales(x, operand_format, block, power_of_two)
    x32 = times_pow2(x, jnp.int32(0), "f32") if x.dtype != jnp.float64 else x.astype(jnp.float32)
    q = float_to_fp8(divide_rn(x32, expand_scales(s, x.shape, block)), operand_format,
                             saturate=True)
    return q, s
