"""matmul's fp8 scales: their checks, the per-tensor epilogue and the block-scale
promotion.

Per-tensor scaling (``a_scale``, ``b_scale``; fp8 formats only), as fp8 GEMM recipes
(cuBLASLt's ``A_SCALE``/``B_SCALE``, Transformer Engine, DeepSeek-V3) do it::

    qa = fp8_satfinite_rn(fl32(a / a_scale))      # same for b with b_scale
    T  = tensor-core chain of qa @ qb, from a zero accumulator
    s  = fl32(a_scale * b_scale)
    D  = fl(fl32(T * s) + C)                      # fp32 rn; rounded (rn) to the
                                                  # accumulator type at the end

where ``fl32`` is an IEEE fp32 operation rounded to nearest even, subnormals kept. All
four are computed on the bits (``numerics.scaling.divide_rn``, ``multiply_rn``,
``softfloat.add_rn``), the same on every backend: XLA's GPU division is not correctly
rounded and its CPU backend flushes subnormal operands and results. A missing scale
counts as 1. Without any scale, C is the chain's initial accumulator, as in the unscaled
kernel (and D is the tensor core's own result).

Block scales (DeepSeek-V3's fine-grained fp8, section 3.3.2; ``a_scale`` of shape
``(M, K/128)`` -- 1x128 tiles -- or ``(M/128, K/128)``, ``b_scale`` of shape ``(K/128,
N/128)`` -- 128x128 blocks -- or ``(K/128, N)``; sizes rounded up): each operand element is
divided by its block's scale (``divide_rn``) and converted as above; the k loop is
promoted every 128 k-elements, and each block's scales are applied on its promotion, as
DeepGEMM's sm_90 kernel does (``acc += (scale_a * scale_b) * accum``, which ``nvcc``
contracts into one ``FFMA``)::

    acc = C (or 0)
    for each 128-k block kb:  P = tensor-core chain of the block from a zero accumulator
                              s = fl32(a_scale[m, kb] * b_scale[kb, n])
                              acc = fma_rn(s, P, acc)     # one rounding (numerics.scaling)
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from jaxwarp._src.catalogue.isa import FP8_TYPES
from jaxwarp._src.numerics import bitops, softfloat
from jaxwarp._src.scaling import blockwise
from jaxwarp._src.scaling.tensor_scale import fma_rn, multiply_rn, times_pow2


def _scale_arg(s: Any, name: str, shapes: tuple) -> jax.Array | None:
    """A per-tensor scale (a scalar) or block scales (one of the 2-D ``shapes``)."""
    if s is None:
        return None
    s = jnp.asarray(s)
    if s.shape not in ((), *shapes) or not (jnp.issubdtype(s.dtype, jnp.floating)
                                            or jnp.issubdtype(s.dtype, jnp.integer)):
        raise ValueError(f"{name} must be a scalar (one per-tensor scale) or block scales of "
                         f"shape {' or '.join(str(t) for t in dict.fromkeys(shapes))} (per "
                         f"{blockwise.BLOCK} k-elements), got {s.dtype}{list(s.shape)}")
    return s.astype(jnp.float32)


def _block_shapes(M: int, K: int, N: int) -> tuple[tuple, tuple]:
    """Allowed block-scale shapes of a and b: 1x128 tiles of a's rows ``(M, Kb)`` or 128x128
    blocks ``(Mb, Kb)``; b: ``(Kb, N)`` (128x1 tiles of its columns) or ``(Kb, Nb)``."""
    kb, mb, nb = (-(-d // blockwise.BLOCK) for d in (K, M, N))
    return ((M, kb), (mb, kb)), ((kb, N), (kb, nb))


def check_scales(a_scale, b_scale, shape: tuple[int, int, int], fa: str, operand_format: Any,
                 accumulator: str, tile: tuple[int, int, int], promote_every: int | None):
    """Checks ``a_scale`` / ``b_scale`` of an (M, K) x (K, N) = ``shape`` product.

    Returns ``(a_scale, b_scale, promote_every, scaled, block)``: the scales as fp32 (block
    scales broadcast to their full shape, a missing one 1), the promotion interval (128 with
    block scales), whether any scale is given and whether they are block scales."""
    M, K, N = shape
    k = tile[2]
    a_shapes, b_shapes = _block_shapes(M, K, N)
    a_scale, b_scale = (_scale_arg(a_scale, "a_scale", a_shapes),
                        _scale_arg(b_scale, "b_scale", b_shapes))
    scaled = a_scale is not None or b_scale is not None
    if scaled and fa not in FP8_TYPES:
        raise ValueError(f"a_scale / b_scale are per-tensor scales of the fp8 formats "
                         f"{FP8_TYPES}; got operand_format={operand_format!r}")
    block = any(s is not None and s.ndim == 2 for s in (a_scale, b_scale))
    if block:
        # DeepSeek-V3's fine-grained scaling: the scales are applied on each promotion.
        if promote_every not in (None, blockwise.BLOCK):
            raise ValueError(
                f"block scales (a_scale / b_scale of 2 dimensions) are applied on each "
                f"promotion every {blockwise.BLOCK} k-elements; got promote_every="
                f"{promote_every!r} (use None or {blockwise.BLOCK})")
        if accumulator != "f32" or blockwise.BLOCK % k:
            raise ValueError(f"block scales need accumulator='f32' and an instruction k "
                             f"dividing {blockwise.BLOCK}; got accumulator={accumulator!r}, "
                             f"tile={tile}")
        promote_every = blockwise.BLOCK
        one = jnp.ones((), jnp.float32)
        a_scale = jnp.broadcast_to(one if a_scale is None else a_scale,
                                   a_scale.shape if a_scale is not None and a_scale.ndim
                                   else a_shapes[0])
        b_scale = jnp.broadcast_to(one if b_scale is None else b_scale,
                                   b_scale.shape if b_scale is not None and b_scale.ndim
                                   else b_shapes[0])
    return a_scale, b_scale, promote_every, scaled, block


def epilogue(t, s, c):
    """``fl32(fl32(t * s) + c)``: two roundings, never one fused multiply-add.

    Both are IEEE operations on the bits (``multiply_rn``, ``softfloat.add_rn``): XLA's
    CPU backend flushes subnormal operands and results (the GPU does not) and contracts
    ``t * s + c`` into an FMA inside a fusion; integer operations do neither."""
    f32 = functools.partial(times_pow2, k=jnp.int32(0), out_fmt="f32")  # exact widening
    p = multiply_rn(f32(t), jnp.asarray(s, jnp.float32))
    out = softfloat.add_rn(softfloat.term(bitops.to_u32(p), "f32"),
                           softfloat.term(bitops.to_u32(f32(c)), "f32"), "f32", 0x7FC00000)
    return bitops.from_u32(out, jnp.float32)


def promote(acc, p, kb, scales):
    """One promotion: ``acc + P`` (fp32, rn); with block scales DeepGEMM's
    ``acc += (sa * sb) * P``: ``fma_rn(fl32(sa[m, kb] * sb[kb, n]), P, acc)``."""
    if scales is None:
        return acc + p
    sa = lax.dynamic_index_in_dim(scales[0], kb, axis=1, keepdims=True)  # (Mp, 1)
    sb = lax.dynamic_index_in_dim(scales[1], kb, axis=0, keepdims=True)  # (1, Np)
    return fma_rn(multiply_rn(sa, sb), p, acc)
