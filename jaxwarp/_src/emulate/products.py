"""The products emulate computes: a GEMM through ``jaxwarp.matmul``, zero-padded to the
tile, and the recipes (per-tensor scaling, a gradient format) with their custom_vjp."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax

from jaxwarp._src.emulate.config import FP8_FORMATS, MARKER, Config, fmt_max
from jaxwarp._src.tensorcore.matmul import matmul


def _pair(fa: str, fb: str):
    # Mixed fp8 pairs (e5m2 gradient x e4m3 weight) as an (a, b) tuple: the form
    # assumed for issue 10's matmul, which models mma.sync's four fp8 pairings.
    # (Other formats are never mixed: _recipe_bwd converts both to the gradient's.)
    return fa if fa == fb else (fa, fb)


def _tensor_scale(x: jax.Array, fmt: str) -> jax.Array:
    """Current per-tensor scale ``fmt_max / amax(x)`` in fp32 (1 where amax is 0 or not finite).

    Scales are constants to the derivative (``stop_gradient``), as in fp8 training
    recipes: they choose the representation, not the value.
    """
    amax = jnp.max(jnp.abs(x.astype(jnp.float32)))
    scale = jnp.float32(fmt_max(fmt)) / amax
    scale = jnp.where(jnp.isfinite(scale) & (amax > 0), scale, jnp.float32(1))
    return lax.stop_gradient(scale)


def _raw_product(x, y, fx, fy, cfg: Config, batched: bool):
    """x @ y (x: (B,)M,K, y: (B,)K,N) through matmul, with the recipe's per-tensor scales."""
    kw = cfg.matmul_kwargs(_pair(fx, fy))
    if cfg.scaling == "tensor":
        sx, sy = _tensor_scale(x, fx), _tensor_scale(y, fy)
        x = x.astype(jnp.float32) * sx
        y = y.astype(jnp.float32) * sy
    mm = functools.partial(matmul, **kw)
    out = jax.vmap(mm)(x, y) if batched else mm(x, y)
    if cfg.scaling == "tensor":
        out = out / (sx * sy).astype(out.dtype)
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
    t = (lambda a: jnp.swapaxes(a, -1, -2))
    dx = _raw_product(g, t(y), gf, f, cfg, batched)
    dy = _raw_product(t(x), g, f, gf, cfg, batched)
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

