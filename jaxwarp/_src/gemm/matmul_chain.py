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

from jaxwarp._src.arithmetic import datapath as mma_arith
from jaxwarp._src.arithmetic.datapath_blocks import in_fp32_range
from jaxwarp._src.gemm import fused_kernel, native, shared_chain
from jaxwarp._src.gemm.matmul_scales import promote
from jaxwarp._src.gemm.matmul_tiles import ACC_DTYPE, Cfg, issue_arch


def _mma(at, bt, acc, cfg: Cfg):
    """One instruction per output tile (k = the tile's k), exact mode."""
    arch = issue_arch(cfg.instruction, cfg.arch)
    return mma_arith.mma(at, bt, acc, a_format=cfg.a_format, b_format=cfg.b_format,
                         c_format=cfg.accumulator, d_format=cfg.accumulator, arch=arch,
                         mode="exact", instruction=cfg.instruction,
                         instruction_k=cfg.tile[2])


def _k_step(a_op, b_op, acc, kk, cfg: Cfg):
    """The kk-th k step of every output tile as a single (..., M, k) x (..., k, N)
    instruction call: an instruction's output element depends only on its row of A, its
    column of B and its C element, so the M / N tiling changes no bit, and the operands and
    the accumulator are read and written in their own layouts (no tile transposes, which
    XLA had made into a copy of B before the loop)."""
    k = cfg.tile[2]
    at = lax.dynamic_slice_in_dim(a_op, kk * k, k, axis=a_op.ndim - 1)  # (..., M, k)
    bt = lax.dynamic_slice_in_dim(b_op, kk * k, k, axis=b_op.ndim - 2)  # (..., k, N)
    if k < 8 and at.dtype == bt.dtype == jnp.float16 and jax.default_backend() == "cpu":
        at, bt = mma_arith.stored_f16(at), mma_arith.stored_f16(bt)
    return _mma(at, bt, acc, cfg)


#: Whether exact f16 / bf16 products run as one fused GPU kernel per output tile
#: (``fused_kernel``): "auto" (on a GPU, for the datapaths the kernel models), "on" (also
#: off the GPU, in Pallas' interpreter: for tests) or "off". Read at trace time
#: (``jax.clear_caches()`` after changing it); the bits are the same.
FUSED_KERNEL = "auto"
#: Multiply-adds of a product from which "auto" takes the kernel where bf16's general
#: branch is XLA's loop (``shared_chain.SHARED = "off"``): below, the kernel beside that
#: loop adds compiles to a small product's, so small products keep XLA's k loop alone.
#: With the general branch on the host (the default, ``shared_chain.general_on_host``)
#: every size takes the kernel: one Triton kernel per product shape compiles in less
#: time than XLA's k loop, and runs faster (``docs/compile_time.md``).
_FUSED_MIN_MACS = 1 << 24


def _fused_datapath(cfg: Cfg, k: int, scales, macs: int):
    """The datapath of this product's instructions if the fused kernel runs it, else None."""
    if (FUSED_KERNEL == "off" or scales is not None or cfg.promote_every is not None
            or cfg.a_format != cfg.b_format or cfg.a_format not in fused_kernel.FORMATS
            or (FUSED_KERNEL == "auto" and (jax.default_backend() != "gpu" or (
                macs < _FUSED_MIN_MACS and not shared_chain.general_on_host(cfg, scales))))):
        return None
    dp = mma_arith.matmul_datapath(issue_arch(cfg.instruction, cfg.arch), cfg.instruction,
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
        return mma_arith.mma(a_op, b_op, c_acc, a_format=cfg.a_format, c_format=cfg.accumulator,
                             d_format=cfg.accumulator, arch=cfg.arch, mode="fast")
    prod = jnp.matmul(mma_arith.as_f32(a_op), mma_arith.as_f32(b_op),
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
    kt = Kp // k
    if scales is not None:
        scales = (_pad_to(scales[0], Mp, scales[0].shape[1]),
                  _pad_to(scales[1], scales[1].shape[0], Np))

    def step(carry, _):
        acc, kk = carry
        return (_k_step(a_op, b_op, acc, kk, cfg), kk + 1), None

    def chain(acc, k0, length):  # k tiles k0 .. k0 + length - 1, in order
        return lax.scan(step, (acc, jnp.asarray(k0, jnp.int32)), None, length=length)[0][0]

    def k_loop(acc):
        return _k_loop(acc, cfg, kt, chain, scales)

    def known(path):
        def run(acc):
            with mma_arith.known_range(path):
                return k_loop(acc)
        return run

    fused_dp = _fused_datapath(cfg, k, scales, Mp * Np * Kp)
    if fused_dp is None and shared_chain.applies(cfg, scales):
        # One executable per instruction for every product shape (the CPU's default).
        return shared_chain.chain(a_op, b_op, acc, cfg, _k_step, tiled)[:M, :N]
    interpret = jax.default_backend() != "gpu"
    f16 = cfg.a_format == "f16"
    if fused_dp is not None and (f16 or fused_kernel.any_range(Mp, Np, Kp)):
        # The kernel alone: every f16 product is a normal fp32 number; a small bf16
        # product takes the kernel for operands of any value, no range check.
        return fused_kernel.chain(a_op, b_op, acc, fused_dp, cfg.a_format,
                                  form=None if f16 else "general",
                                  interpret=interpret)[:M, :N]
    if fused_dp is not None:  # bf16 in fp32's range through the kernel
        def in_range(acc):
            return fused_kernel.chain(a_op, b_op, acc, fused_dp, cfg.a_format, finite=True,
                                      interpret=interpret)
    elif mma_arith.in_range_matmul(issue_arch(cfg.instruction, cfg.arch), cfg.instruction,
                                 cfg.a_format, cfg.b_format, cfg.accumulator, k,
                                 Mp * Np * Kp):
        # bf16 / tf32 operands whose every product is a normal fp32 number take the fast
        # path's arithmetic (datapath.IN_RANGE_PATH).
        in_range = known("in_range")
    else:
        return k_loop(acc)[:M, :N]
    # One cond for the whole product; the rest through XLA's general loop, or beside the
    # kernel on an accelerator, through the shared executables on the host.
    if fused_dp is not None and shared_chain.general_on_host(cfg, scales):
        def general(acc):
            return shared_chain.chain(a_op, b_op, acc, cfg, _k_step, tiled)
    else:
        general = known("general")
    vals = mma_arith.range_values(a_op, b_op, cfg.a_format, cfg.b_format)
    return lax.cond(in_fp32_range(*vals), in_range, general, acc)[:M, :N]


def _k_loop(acc, cfg: Cfg, kt: int, chain, scales):
    """The chain over the kt k tiles, with promotion (``tiled``'s loop)."""
    k = cfg.tile[2]
    if cfg.promote_every is None:
        acc = chain(acc, 0, kt)
    else:
        # Promotion: each interval's chain starts from +0; its fp32 result is added to
        # the fp32 accumulator with an ordinary (round-to-nearest) fp32 addition.
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
