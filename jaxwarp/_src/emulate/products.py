"""The products emulate computes: a GEMM through ``jaxwarp.matmul``, zero-padded to the
tile, and the recipes (per-tensor scaling, a gradient format) with their custom_vjp."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxwarp._src.emulate.config import FP8_FORMATS, MARKER, Config
from jaxwarp._src.numerics import bits as bits_
from jaxwarp._src.numerics import formats, softfloat
from jaxwarp._src.numerics.formats import FORMATS
from jaxwarp._src.tensorcore.matmul import matmul


def _pair(fa: str, fb: str):
    # Mixed fp8 pairs (e5m2 gradient x e4m3 weight) as matmul's (a, b) tuple: it models
    # the four fp8 pairings of mma.sync and wgmma.
    # (Other formats are never mixed: _recipe_bwd converts both to the gradient's.)
    return fa if fa == fb else (fa, fb)


#: Per-tensor scale exponents are clamped to [-SCALE_EXP_MAX, SCALE_EXP_MAX].
SCALE_EXP_MAX = 126
_F32_INF = 0x7F800000
#: Canonical quiet NaN and infinity bits of the formats a rescaled product has.
_SPECIAL_BITS = {"f32": (0x7FC00000, _F32_INF), "f16": (0x7E00, 0x7C00)}


def times_pow2(x: jax.Array, k: jax.Array, out_fmt: str) -> jax.Array:
    """``x * 2**k`` rounded once (to nearest, ties to even) into ``out_fmt`` (``"f32"`` or
    ``"f16"``), computed on the bits with integer operations.

    No floating-point operation is involved, so the result is the same on every backend:
    XLA's CPU backend flushes subnormal operands and results of float operations to zero
    and its GPU backend does not, and an integer result cannot be contracted into a fused
    multiply-add with whatever the program adds to it. Subnormal inputs and results are
    exact or rounded once; beyond the largest finite value the result is infinite; NaN
    stays NaN and infinities keep their sign.

    Args:
      x: float array of a ``softfloat.DECODE_FORMATS`` dtype (float32, float16,
        bfloat16, fp8); other floats are converted to float32 first.
      k: int32 exponent (broadcasts against ``x``).
      out_fmt: static, ``"f32"`` or ``"f16"``.
    """
    fmt = formats.ALIASES.get(x.dtype.name, x.dtype.name)
    if fmt not in softfloat.DECODE_FORMATS or fmt == "tf32":
        x, fmt = x.astype(jnp.float32), "f32"
    bits = bits_.to_u32(x)
    neg, lsb, sig, _, inf, nan = softfloat.decode(bits, fmt)
    q, e = softfloat.round_sig(sig.astype(jnp.uint32), lsb + k, softfloat.emin(out_fmt),
                               FORMATS[out_fmt].mantissa_bits, "rn")
    code = softfloat.encode_rounded(neg, q, e, out_fmt)
    nan_bits, inf_bits = _SPECIAL_BITS[out_fmt]
    sign = neg.astype(jnp.uint32) << (FORMATS[out_fmt].bits - 1)
    code = jnp.where(nan, jnp.uint32(nan_bits), jnp.where(inf, sign | inf_bits, code))
    return bits_.from_u32(code, FORMATS[out_fmt].storage_dtype)


def tensor_scale_exponent(x: jax.Array, fmt: str) -> jax.Array:
    """Current per-tensor scale exponent: the largest int32 ``k`` with
    ``amax(|x|) * 2**k <= max_value(fmt)``, clamped to ``[-SCALE_EXP_MAX, SCALE_EXP_MAX]``;
    0 where the amax is 0 or not finite.

    The scale is a power of two, so scaling and unscaling are exact (:func:`times_pow2`,
    in fp32's normal range) and the recipe's bits are the same on every backend: no
    division (XLA's GPU division is ``div.full.f32``, not correctly rounded), no float
    operation at all. The amax and ``k`` come from the operand's fp32 bits (an integer
    maximum of the magnitudes). Scales are constants to the derivative (``stop_gradient``),
    as in fp8 training recipes: they choose the representation, not the value.
    """
    f32 = times_pow2(x, jnp.int32(0), "f32")
    bits = jnp.max(lax.bitcast_convert_type(f32, jnp.int32) & 0x7FFFFFFF)
    top = int(np.array(FORMATS[fmt].max_value, np.float32).view(np.int32))
    # amax = 1.f * 2**e and max = 1.F * 2**E (biased e, E): amax * 2**k <= max for
    # k <= E - e when f <= F, else k <= E - e - 1. A subnormal amax (e = 0) gives a k
    # above the clamp.
    k = (top >> 23) - (bits >> 23) - ((bits & 0x7FFFFF) > (top & 0x7FFFFF)).astype(jnp.int32)
    k = jnp.clip(k, -SCALE_EXP_MAX, SCALE_EXP_MAX)
    k = jnp.where((bits > 0) & (bits < _F32_INF), k, 0)  # not 0, inf or NaN
    return lax.stop_gradient(k)


def _raw_product(x, y, fx, fy, cfg: Config, batched: bool):
    """x @ y (x: (B,)M,K, y: (B,)K,N) through matmul, with the recipe's per-tensor scales.

    Scaled: ``D = rn(T * 2**-(kx + ky))`` in the accumulator's format, ``T`` the tensor
    core's ``rn32(x * 2**kx) @ rn32(y * 2**ky)``: every scaling is :func:`times_pow2`,
    exact or rounded once, on the bits (the same on every backend)."""
    kw = cfg.matmul_kwargs(_pair(fx, fy))
    if cfg.scaling == "tensor":
        kx, ky = tensor_scale_exponent(x, fx), tensor_scale_exponent(y, fy)
        x, y = times_pow2(x, kx, "f32"), times_pow2(y, ky, "f32")
    mm = functools.partial(matmul, **kw)
    out = jax.vmap(mm)(x, y) if batched else mm(x, y)
    if cfg.scaling == "tensor":
        out = times_pow2(out, -(kx + ky), cfg.accumulator)
    return out


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3))
def _recipe_product(x, y, cfg, batched):
    return _raw_product(x, y, cfg.operand_format, cfg.operand_format, cfg, batched)


def _recipe_fwd(x, y, cfg, batched):
    return _recipe_product(x, y, cfg, batched), (x, y)


def _recipe_bwd(cfg, batched, res, g):
    # The recipe's backward: the gradient in backward_format (e5m2 in the hybrid fp8
    # recipe) with its own per-tensor scale, the saved operand in operand_format.
    x, y = res
    f, gf = cfg.operand_format, cfg.backward_format or cfg.operand_format
    if not (f in FP8_FORMATS and gf in FP8_FORMATS):
        f = gf  # no tensor core mixes other formats: both operands in the gradient's format
    g = g.astype(jnp.float32 if g.dtype != jnp.float64 else g.dtype)
    dx = _raw_product(g, jnp.swapaxes(y, -1, -2), gf, f, cfg, batched)
    dy = _raw_product(jnp.swapaxes(x, -1, -2), g, f, gf, cfg, batched)
    return dx.astype(x.dtype), dy.astype(y.dtype)


_recipe_product.defvjp(_recipe_fwd, _recipe_bwd)


def gemm(x, y, cfg: Config, batched: bool):
    """(B,)M,K @ (B,)K,N -> (B,)M,N in the accumulator's dtype, zero-padded to the tile."""
    M, K = x.shape[-2:]
    N = y.shape[-1]
    p = cfg.pad_multiple
    Mp, Np, Kp = (-(-d // p) * p for d in (M, N, K))
    lead = [(0, 0)] * (x.ndim - 2)
    if (Mp, Kp) != (M, K):
        x = jnp.pad(x, lead + [(0, Mp - M), (0, Kp - K)])
    if (Kp, Np) != (K, N):
        y = jnp.pad(y, lead + [(0, Kp - K), (0, Np - N)])
    with jax.named_scope(MARKER):
        if cfg.custom_recipe:
            out = _recipe_product(x, y, cfg, batched)
        else:
            mm = functools.partial(matmul, **cfg.matmul_kwargs(cfg.operand_format))
            out = jax.vmap(mm)(x, y) if batched else mm(x, y)
    return out[..., :M, :N]


def as_float_operand(x):
    # Integer operands of a mixed product are converted to f32 (exact below 2**24),
    # then to the operand format by matmul, as a kernel that widens int8 would.
    return x if jnp.issubdtype(x.dtype, jnp.floating) else x.astype(jnp.float32)

