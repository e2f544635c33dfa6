"""matmul's exact k loop in XLA: one tensor-core instruction per k step, scanned.

The bottom of the GEMM layer's exact backends: :func:`k_step` is one instruction on
every output tile at once (the k-th k-slice of the operands), :func:`xla_loop` the chain
of them over k, with promotion and block scales, as one ``lax.scan`` in the calling
program. ``matmul_chain.tiled`` chooses between this loop, the fused kernel, the shared
executables (``shared_chain``, which runs :func:`k_step` per call and promotes a hot
product to :func:`xla_loop`) and native mode; both import this module, which imports
neither.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from jaxwarp._src.arithmetic import datapath
from jaxwarp._src.arithmetic.datapath_blocks import in_fp32_range
from jaxwarp._src.gemm.matmul_scales import promote
from jaxwarp._src.gemm.matmul_tiles import Cfg, issue_arch


def _mma(at, bt, acc, cfg: Cfg):
    """One instruction per output tile (k = the tile's k), exact mode."""
    arch = issue_arch(cfg.instruction, cfg.arch)
    return datapath.mma(at, bt, acc, a_format=cfg.a_format, b_format=cfg.b_format,
                        c_format=cfg.accumulator, d_format=cfg.accumulator, arch=arch,
                        mode="exact", instruction=cfg.instruction,
                        instruction_k=cfg.tile[2])


def k_step(a_op, b_op, acc, kk, cfg: Cfg):
    """The kk-th k step of every output tile as a single (..., M, k) x (..., k, N)
    instruction call: an instruction's output element depends only on its row of A, its
    column of B and its C element, so the M / N tiling changes no bit, and the operands and
    the accumulator are read and written in their own layouts (no tile transposes, which
    XLA had made into a copy of B before the loop)."""
    k = cfg.tile[2]
    at = lax.dynamic_slice_in_dim(a_op, kk * k, k, axis=a_op.ndim - 1)  # (..., M, k)
    bt = lax.dynamic_slice_in_dim(b_op, kk * k, k, axis=b_op.ndim - 2)  # (..., k, N)
    if k < 8 and at.dtype == bt.dtype == jnp.float16 and jax.default_backend() == "cpu":
        at, bt = datapath.stored_f16(at), datapath.stored_f16(bt)
    return _mma(at, bt, acc, cfg)


def in_range_cond(cfg: Cfg, macs: int) -> bool:
    """Whether :func:`xla_loop` of ``macs`` multiply-adds is traced twice, in range and
    not, under one ``lax.cond`` (``datapath.in_range_matmul``: the option
    ``arith_in_range_path``)."""
    return datapath.in_range_matmul(issue_arch(cfg.instruction, cfg.arch), cfg.instruction,
                                    cfg.a_format, cfg.b_format, cfg.accumulator, cfg.tile[2],
                                    macs)


def xla_loop(a_op, b_op, acc, cfg: Cfg, scales=None, *, known: str | None = None,
             cond: bool = False):
    """The chain over the k tiles of padded operands (M, N, K multiples of the tile),
    with promotion; ``scales``: ``tiled``'s block scales, padded. ``known``: trace the
    instructions as operands known in range or not (``datapath.known_range``: "in_range"
    or "general"); ``cond``: both, under one ``lax.cond`` on the operands' range
    (:func:`in_range_cond` says when)."""
    if cond:
        vals = datapath.range_values(a_op, b_op, cfg.a_format, cfg.b_format)
        return lax.cond(in_fp32_range(*vals),
                        lambda acc: xla_loop(a_op, b_op, acc, cfg, scales, known="in_range"),
                        lambda acc: xla_loop(a_op, b_op, acc, cfg, scales, known="general"),
                        acc)
    if known is not None:
        with datapath.known_range(known):
            return xla_loop(a_op, b_op, acc, cfg, scales)
    k = cfg.tile[2]
    kt = a_op.shape[-1] // k

    def step(carry, _):
        acc, kk = carry
        return (k_step(a_op, b_op, acc, kk, cfg), kk + 1), None

    def chain(acc, k0, length):  # k tiles k0 .. k0 + length - 1, in order
        return lax.scan(step, (acc, jnp.asarray(k0, jnp.int32)), None, length=length)[0][0]

    if cfg.promote_every is None:
        return chain(acc, 0, kt)
    # Promotion: each interval's chain starts from +0; its fp32 result is added to the
    # fp32 accumulator with an ordinary (round-to-nearest) fp32 addition.
    s = cfg.promote_every // k
    full, rem = divmod(kt, s)
    zero = jnp.zeros_like(acc)

    def interval(carry, _):
        acc, k0 = carry
        return (promote(acc, chain(zero, k0, s), k0 // s, scales), k0 + s), None

    if full:
        acc = lax.scan(interval, (acc, jnp.int32(0)), None, length=full)[0][0]
    if rem:
        acc = promote(acc, chain(zero, full * s, rem), full, scales)
    return acc
