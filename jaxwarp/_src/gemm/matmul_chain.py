"""matmul's k loop: the chain of tensor-core instructions over converted operands.

Every output tile starts from its C tile (or zero, ``fill_fragment(acc, 0)``) and a loop
over k chains the accumulator through one tensor-core instruction per step, one (m, n, k)
tile at a time (the CUDA guide's WMMA kernel)::

    for kIter in range(0, K, WMMA_K):
        load_matrix_sync(aFrag, A + aRow * lda + kIter, lda)
        load_matrix_sync(bFrag, B + kIter * ldb + bCol, ldb)
        mma_sync(accFrag, aFrag, bFrag, accFrag)

The fragments' lane layout does not change the arithmetic, so the loop runs on
logical tiles (``tests/gemm/test_matmul.py`` checks it against the fragment path);
all output tiles of a step go through the model at once, and ``jax.lax.scan``
runs the k loop.

Promotion (``promote_every=N``, DeepSeek-V3 section 3.3.2): the k loop is cut
into intervals of N k-elements (a multiple of the instruction's k; the last
interval is shorter when N does not divide K). Each interval's tensor-core chain
starts from a zero accumulator, and its fp32 result ``P_i`` is added to an fp32
accumulator in ordinary fp32 arithmetic (round to nearest even)::

    acc = C (or 0 when scaled);  acc = fl32(acc + P_1);  acc = fl32(acc + P_2) ...

Promotion needs ``accumulator="f32"``.

With block scales each promotion applies its block's scales (``matmul_scales.promote``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from jaxwarp._src.arithmetic import datapath
from jaxwarp._src.arithmetic.datapath_blocks import in_fp32_range
from jaxwarp._src.config import config
from jaxwarp._src.gemm import fused_kernel, native, shared_chain
from jaxwarp._src.gemm.k_loop import in_range_cond, xla_loop
from jaxwarp._src.gemm.matmul_tiles import ACC_DTYPE, Cfg, issue_arch


def _fused_datapath(cfg: Cfg, k: int, scales, macs: int):
    """The datapath of this product's instructions if the fused kernel runs it, else None
    (the options ``gemm_fused_kernel`` and ``gemm_fused_min_macs``: with bf16's general
    branch on the host, ``shared_chain.general_on_host``, every size takes the kernel)."""
    switch = config.gemm_fused_kernel
    if (switch == "off" or scales is not None or cfg.promote_every is not None
            or cfg.a_format != cfg.b_format or cfg.a_format not in fused_kernel.FORMATS
            or (switch == "auto" and (jax.default_backend() != "gpu" or (
                macs < config.gemm_fused_min_macs
                and not shared_chain.general_on_host(cfg, scales))))):
        return None
    dp = datapath.matmul_datapath(issue_arch(cfg.instruction, cfg.arch), cfg.instruction,
                                  cfg.a_format, cfg.b_format, cfg.accumulator, k)
    ok = dp is not None and fused_kernel.models(dp, cfg.a_format, cfg.b_format,
                                                cfg.accumulator, k)
    return dp if ok else None


def _pad_to(x, rows, cols):
    r, c = x.shape
    if (r, c) == (rows, cols):
        return x
    return jnp.pad(x, ((0, rows - r), (0, cols - c)))


def _fast(a_op, b_op, c_acc, cfg: Cfg):
    if cfg.legacy:
        return datapath.mma(a_op, b_op, c_acc, a_format=cfg.a_format, c_format=cfg.accumulator,
                            d_format=cfg.accumulator, arch=cfg.arch, mode="fast")
    prod = jnp.matmul(datapath.as_f32(a_op), datapath.as_f32(b_op),
                      precision=lax.Precision.HIGHEST)
    return (prod + c_acc.astype(jnp.float32)).astype(ACC_DTYPE[cfg.accumulator])


def tiled(a_op, b_op, c_acc, cfg: Cfg, scales=None):
    """The k loop over the whole (M, N) output, on converted operands.

    M, N and K are padded with zeros to the tile (only where matmul's checks allow it, or
    in the backward products, where a zero k-slice leaves the sum as it is). ``scales``:
    the block scales ``(sa (M, Kb), sb (Kb, N))`` applied on each promotion
    (``matmul_scales.promote``)."""
    if cfg.mode == "fast":
        # Fast mode: one dot_general over the whole K (the backend's own accumulation);
        # tiling (and promotion) change nothing there but speed.
        return _fast(a_op, b_op, c_acc, cfg)
    if cfg.mode == "native":  # the same chain, issued on the GPU's tensor cores
        return native.chain(a_op, b_op, c_acc, cfg)
    (M, K), N = a_op.shape, b_op.shape[1]
    m, n, k = cfg.tile
    Mp, Np, Kp = (-(-d // t) * t for d, t in ((M, m), (N, n), (K, k)))
    a_op, b_op, acc = _pad_to(a_op, Mp, Kp), _pad_to(b_op, Kp, Np), _pad_to(c_acc, Mp, Np)
    if scales is not None:
        scales = (_pad_to(scales[0], Mp, scales[0].shape[1]),
                  _pad_to(scales[1], scales[1].shape[0], Np))
    fused_dp = _fused_datapath(cfg, k, scales, Mp * Np * Kp)
    if fused_dp is None and shared_chain.applies(cfg, scales):
        # One executable per instruction for every product shape (the CPU's default).
        return shared_chain.chain(a_op, b_op, acc, cfg)[:M, :N]
    if fused_dp is None:
        # XLA's k loop; bf16 / tf32 operands whose every product is a normal fp32 number
        # may take the fast path's arithmetic under one cond (arith_in_range_path).
        return xla_loop(a_op, b_op, acc, cfg, scales,
                        cond=in_range_cond(cfg, Mp * Np * Kp))[:M, :N]
    interpret = jax.default_backend() != "gpu"
    f16 = cfg.a_format == "f16"
    if f16 or fused_kernel.any_range(Mp, Np, Kp):
        # The kernel alone: every f16 product is a normal fp32 number; a small bf16
        # product takes the kernel for operands of any value, no range check.
        return fused_kernel.chain(a_op, b_op, acc, fused_dp, cfg.a_format,
                                  form=None if f16 else "general",
                                  interpret=interpret)[:M, :N]

    def in_range(acc):  # bf16 in fp32's range through the kernel
        return fused_kernel.chain(a_op, b_op, acc, fused_dp, cfg.a_format, finite=True,
                                  interpret=interpret)

    # One cond for the whole product; the rest through XLA's general loop, or beside the
    # kernel on an accelerator, through the shared executables on the host.
    if shared_chain.general_on_host(cfg, scales):
        def general(acc):
            return shared_chain.chain(a_op, b_op, acc, cfg)
    else:
        def general(acc):
            return xla_loop(a_op, b_op, acc, cfg, scales, known="general")
    vals = datapath.range_values(a_op, b_op, cfg.a_format, cfg.b_format)
    return lax.cond(in_fp32_range(*vals), in_range, general, acc)[:M, :N]
