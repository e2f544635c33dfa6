"""The products emulate computes: a GEMM through ``jaxwarp.matmul``, zero-padded to the
tile, and the recipes (per-tensor scaling, a gradient format) with their custom_vjp."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from jaxwarp._src.emulate.settings import BLOCK_SCALINGS, FP8_TYPES, MARKER, Settings
from jaxwarp._src.gemm import matmul_sparse
from jaxwarp._src.gemm.matmul import matmul
from jaxwarp._src.recipes import recipe as recipes
from jaxwarp._src.scaling.blockwise import BLOCK, block_scales
from jaxwarp._src.scaling.tensor_scale import tensor_scale_exponent, times_pow2
from jaxwarp._src.warp import checked


def _pair(fa: str, fb: str):
    # Mixed fp8 pairs (e5m2 gradient x e4m3 weight) as matmul's (a, b) tuple: it models
    # the four fp8 pairings of mma.sync and wgmma.
    # (Other formats are never mixed: _recipe_bwd converts both to the gradient's.)
    return fa if fa == fb else (fa, fb)


#: y's blocks in each product of the blockwise recipe (x always has 1x128 tiles along K):
#: DeepSeek-V3's Figure 7, with the right operand of the forward product as the weight.
_Y_BLOCK = {"fprop": (BLOCK, BLOCK), "dgrad": (BLOCK, BLOCK), "wgrad": (BLOCK, 1)}


def _raw_product(x, y, fx, fy, cfg: Settings, batched: bool, which: str = "fprop"):
    """x @ y (x: (B,)M,K, y: (B,)K,N) through matmul, with the recipe's scales.

    Per-tensor: ``D = rn(T * 2**-(kx + ky))`` in the accumulator's format, ``T`` the
    tensor core's ``rn32(x * 2**kx) @ rn32(y * 2**ky)``: every scaling is
    :func:`times_pow2`, exact or rounded once, on the bits (the same on every backend).
    Blockwise: x's 1x128 tiles and y's blocks (``_Y_BLOCK[which]``) get their scales
    from their amax (``numerics.blockwise``), applied by matmul on each promotion."""
    kw = cfg.matmul_kwargs(_pair(fx, fy))
    if cfg.scaling in BLOCK_SCALINGS:
        pow2 = cfg.scaling == "blockwise_pow2"

        def block_scaled(x, y):
            sa = block_scales(x, fx, (1, BLOCK), pow2)  # (M, K/128)
            sb = block_scales(y, fy, _Y_BLOCK[which], pow2)  # (K/128, N/128) or (K/128, N)
            return matmul(x, y, a_scale=sa, b_scale=sb, **kw)

        return jax.vmap(block_scaled)(x, y) if batched else block_scaled(x, y)
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
    if not (f in FP8_TYPES and gf in FP8_TYPES):
        f = gf  # no tensor core mixes other formats: both operands in the gradient's format
    g = g.astype(jnp.float32 if g.dtype != jnp.float64 else g.dtype)
    dx = _raw_product(g, jnp.swapaxes(y, -1, -2), gf, f, cfg, batched, "dgrad")
    dy = _raw_product(jnp.swapaxes(x, -1, -2), g, f, gf, cfg, batched, "wgrad")
    return dx.astype(x.dtype), dy.astype(y.dtype)


_recipe_product.defvjp(_recipe_fwd, _recipe_bwd)


def gemm(x, y, cfg: Settings, batched: bool):
    """(B,)M,K @ (B,)K,N -> (B,)M,N in the accumulator's dtype, zero-padded to the tile."""
    if cfg.recipe is not None:  # a block-scaled recipe: its own GEMM (pads K itself)
        with jax.named_scope(MARKER):
            return recipes.gemm(x, y, cfg.plan)
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



def sparse_gemm(x, y, cfg: Settings, batched: bool, sparse: list):
    """A product with a ``jaxwarp.sparse.as_2_4`` operand (``sparse``: [lhs, rhs] marked
    and contracted along its axis): ``matmul(..., sparsity="2:4")`` with it as A (a
    right-hand one as ``D^T = Y^T X^T``), K zero-padded to the sparse instruction's."""
    if all(sparse):
        raise ValueError("jaxwarp.sparse.as_2_4 marks both operands of a product; a sparse "
                         "tensor core takes one 2:4 operand (mark one)")
    if cfg.instruction == "mfma":
        raise ValueError(f"a product of a jaxwarp.sparse.as_2_4 operand on arch={cfg.arch!r}: "
                         f"no sparse MFMA is modelled (2:4 products run on the NVIDIA "
                         f"targets' mma.sp / wgmma.sp); allowed: an NVIDIA arch, or an "
                         f"operand without as_2_4")
    fixed = dict(tile=cfg.tile, promote_every=cfg.promote_every, scaling=cfg.scaling,
                 backward_format=cfg.backward_format, recipe=cfg.recipe)
    given = {k: v for k, v in fixed.items() if v is not None}
    if given or cfg.mode != "exact":
        raise ValueError(f"a product of a jaxwarp.sparse.as_2_4 operand runs as "
                         f"matmul(..., sparsity='2:4'): mode='exact' and no "
                         f"{'/'.join(fixed)}; got mode={cfg.mode!r}"
                         + "".join(f", {k}={v!r}" for k, v in given.items()))
    swap = sparse[1]
    a, b = (jnp.swapaxes(y, -1, -2), jnp.swapaxes(x, -1, -2)) if swap else (x, y)
    fmt, acc = cfg.operand_format, cfg.accumulator
    instruction = cfg.instruction or "mma_sync"
    K = a.shape[-1]
    step = matmul_sparse.k_step(instruction, fmt, acc)
    if K % step:
        pad = [(0, 0)] * (a.ndim - 1)
        a = jnp.pad(a, pad + [(0, step - K % step)])
        b = jnp.pad(b, pad[:-1] + [(0, step - K % step), (0, 0)])
    if fmt == "tf32":  # its sparse instructions are 1:2: a 2:4 weight is not enough
        pairs = jnp.sum(a.reshape(a.shape[:-1] + (-1, 2)) != 0, axis=-1)
        checked.check(jnp.all(pairs <= 1), "a jaxwarp.sparse.as_2_4 operand of a tf32 "
                      "product is not 1:2 (tf32's sparse instructions keep 1 of every 2; "
                      "prune_2_4(w, group=2))")
    mm = functools.partial(matmul, operand_format=fmt, accumulator=acc, arch=cfg.arch,
                           instruction=instruction, sparsity="2:4")
    out = jax.vmap(mm)(a, b) if batched else mm(a, b)
    return jnp.swapaxes(out, -1, -2) if swap else out
