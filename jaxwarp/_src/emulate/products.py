"""The products emulate computes: a GEMM through ``jaxwarp.matmul``, zero-padded to the
tile, and the recipes (per-tensor scaling, a gradient format) with their custom_vjp."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxwarp._src.emulate.config import FP8_FORMATS, MARKER, Config
from jaxwarp._src.numerics.formats import FORMATS
from jaxwarp._src.tensorcore.matmul import matmul


def _pair(fa: str, fb: str):
    # Mixed fp8 pairs (e5m2 gradient x e4m3 weight) as matmul's (a, b) tuple: it models
    # the four fp8 pairings of mma.sync and wgmma.
    # (Other formats are never mixed: _recipe_bwd converts both to the gradient's.)
    return fa if fa == fb else (fa, fb)


#: Per-tensor scale exponents are clamped to [-SCALE_EXP_MAX, SCALE_EXP_MAX], so that
#: every scale and half of every rescale exponent is a normal fp32 power of two.
SCALE_EXP_MAX = 126


def pow2(k: jax.Array) -> jax.Array:
    """``2.0**k`` as float32 for int32 ``k`` in [-126, 127], built from its bits (exact)."""
    return lax.bitcast_convert_type((k + 127) << 23, jnp.float32)


def tensor_scale_exponent(x: jax.Array, fmt: str) -> jax.Array:
    """Current per-tensor scale exponent: the largest int32 ``k`` with
    ``amax(|x|) * 2**k <= max_value(fmt)``, clamped to ``[-SCALE_EXP_MAX, SCALE_EXP_MAX]``;
    0 where the amax is 0 or not finite.

    The scale is a power of two, so scaling and unscaling are exact multiplications
    (in fp32's normal range) and the recipe's bits are the same on every backend: no
    division (XLA's GPU division is ``div.full.f32``, not correctly rounded) and no
    rounding that a fused multiply-add could change. It is computed from the bits of
    the amax (an exact maximum) with integer operations. Scales are constants to the
    derivative (``stop_gradient``), as in fp8 training recipes: they choose the
    representation, not the value.
    """
    amax = jnp.max(jnp.abs(x.astype(jnp.float32)))
    bits = lax.bitcast_convert_type(amax, jnp.int32)
    top = int(np.array(FORMATS[fmt].max_value, np.float32).view(np.int32))
    # amax = 1.f * 2**e and max = 1.F * 2**E (biased e, E): amax * 2**k <= max for
    # k <= E - e when f <= F, else k <= E - e - 1. A subnormal amax (e = 0) gives a k
    # above the clamp.
    k = (top >> 23) - (bits >> 23) - ((bits & 0x7FFFFF) > (top & 0x7FFFFF)).astype(jnp.int32)
    k = jnp.clip(k, -SCALE_EXP_MAX, SCALE_EXP_MAX)
    k = jnp.where(jnp.isfinite(amax) & (amax > 0), k, 0)
    return lax.stop_gradient(k)


def _raw_product(x, y, fx, fy, cfg: Config, batched: bool):
    """x @ y (x: (B,)M,K, y: (B,)K,N) through matmul, with the recipe's per-tensor scales.

    Scaled: ``D = fl32(fl32(T * 2**n1) * 2**n2)`` with ``T = fl32(x * 2**kx) @
    fl32(y * 2**ky)`` through the tensor core, ``n1 = floor(n / 2)``, ``n2 = n - n1``,
    ``n = -(kx + ky)``: multiplications by powers of two, exact in fp32's normal range,
    so D is T * 2**n rounded once there (twice at most where the result is subnormal),
    in this order on every backend; an optimization barrier keeps the last one apart
    from whatever the program adds to the product (no FMA contraction)."""
    kw = cfg.matmul_kwargs(_pair(fx, fy))
    if cfg.scaling == "tensor":
        kx, ky = tensor_scale_exponent(x, fx), tensor_scale_exponent(y, fy)
        x = x.astype(jnp.float32) * pow2(kx)
        y = y.astype(jnp.float32) * pow2(ky)
    mm = functools.partial(matmul, **kw)
    out = jax.vmap(mm)(x, y) if batched else mm(x, y)
    if cfg.scaling == "tensor":
        n = -(kx + ky)
        n1 = n >> 1  # floor(n / 2): n1 and n - n1 in [-126, 126]
        rescaled = (out.astype(jnp.float32) * pow2(n1)) * pow2(n - n1)
        out = lax.optimization_barrier(rescaled.astype(out.dtype))
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

