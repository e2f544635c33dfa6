"""fp8 products with promotion through the fused exact kernel (``fused_kernel``).

Promotion (``promote_every=N``, DeepSeek-V3's fp8 GEMM; ``k_loop``'s docstring) cuts the
k loop into intervals of N k-elements: each interval's chain of instructions starts from
+0 and its fp32 result ``P`` is added to the fp32 accumulator by an ordinary addition, or
with block scales as DeepGEMM's ``acc += (sa * sb) * P`` (``matmul_scales.promote``).
Here each interval's chain is one call of the fused kernel (K = N; a shorter
last interval one more; the backend that ``gemm_kernel_backend`` names) and the
promotions run in the calling program between the calls, the function that
``k_loop.xla_loop`` applies between its intervals: the same bits.

The intervals run as a ``lax.scan`` over k (one kernel traced and lowered for all of
them). What the route adds to one kernel over the whole K: per interval the kernel reads
a zero C and writes its (M, N) fp32 result, and the promotion reads that and the
accumulator and writes the accumulator. At 4096^3 with N = 128 (32 intervals) that is
about 10 GB of memory traffic, an estimate of a few milliseconds at an H100's bandwidth
beside about 28 ms of the kernel's arithmetic at the f16 kernel's speed (not yet timed).
"""

from __future__ import annotations

from collections.abc import Callable

import jax.numpy as jnp
from jax import lax

from jaxwarp._src.catalogue.arch import Datapath
from jaxwarp._src.gemm.kernels import fused_kernel, fused_mgpu


def promoted_chain(a, b, acc, dp: Datapath, fmt: str, every: int,
                   promote: Callable, *, b_fmt: str | None = None,
                   interpret: bool = False):
    """``acc`` promoted with the chain of every interval of ``every`` k-elements of
    ``a @ b`` (fp8 (M, K) @ (K, N), K a multiple of ``dp.block_k``; ``acc`` (M, N) fp32)
    through :func:`fused_kernel.chain`, each from +0: ``promote(acc, p, kb)`` adds
    interval kb's result p (its block scales too, where the caller has them).

    Example:
        >>> dp = jaxwarp.datapath_for("sm_90", "wgmma", "e4m3", 32)
        >>> a = jnp.ones((8, 96), jnp.float8_e4m3fn)
        >>> promoted_chain(a, a.T, jnp.ones((8, 8)), dp, "e4m3", 64,
        ...                lambda acc, p, kb: acc + p, interpret=True)[0, :2]
        Array([97., 97.], dtype=float32)
    """
    (M, K), N = a.shape, b.shape[1]
    if every <= 0 or every % dp.block_k or K % dp.block_k:
        raise ValueError(f"promoted_chain: every={every} and K={K} must be multiples of the "
                         f"instruction's k={dp.block_k} (every > 0)")
    bm, bn = fused_kernel.BLOCK
    Mp, Np = -(-M // bm) * bm, -(-N // bn) * bn  # padded once, not per interval
    a, b = fused_kernel.pad_to(a, (Mp, K)), fused_kernel.pad_to(b, (K, Np))
    zero = jnp.zeros((Mp, Np), jnp.float32)

    def part(k0, n):  # the chain over k-elements k0 .. k0 + n - 1 from +0, (M, N)
        at = lax.dynamic_slice_in_dim(a, k0, n, axis=1)
        bt = lax.dynamic_slice_in_dim(b, k0, n, axis=0)
        return fused_mgpu.by_option(at, bt, zero, dp, fmt, b_fmt=b_fmt,
                                    interpret=interpret)[:M, :N]

    def interval(carry, _):
        acc, kb = carry
        return (promote(acc, part(kb * every, every), kb), kb + 1), None

    full, rem = divmod(K, every)
    if full:
        acc = lax.scan(interval, (acc, jnp.int32(0)), None, length=full)[0][0]
    if rem:
        acc = promote(acc, part(full * every, rem), full)
    return acc
