"""The WMMA examples of the CUDA guide and of the seed documents, run on jaxwarp.

1. The guide's ``wmma_ker`` (section "Warp Matrix Functions", example): one warp
   computes a 16x16x16 product, A column-major and B row-major half matrices, fp32
   accumulator filled with 0, stored row-major.
2. The seed's tiled WMMA GEMM: a grid of warps, each owning one 16x16 tile of C,
   looping over K in steps of 16 with ``load_matrix_sync`` from pointer offsets
   (``mtrA + aRow * lda + aCol``) and ``mma_sync`` into one accumulator; every warp of
   the grid is one element of a ``jax.vmap``.

Both print a corner of the result and compare it with ``jaxwarp.matmul`` (the same
arithmetic on logical matrices: the bits must be equal) and with float64.

Usage: python experiments/wmma_examples.py [--m 64 --n 64 --k 128] [--seed 0]
(m, n, k: multiples of 16)
"""

from __future__ import annotations

import argparse

import _study_utils as su
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import jaxwarp

T = 16  # WMMA_M = WMMA_N = WMMA_K


def wmma_ker(a_mem: jax.Array, b_mem: jax.Array) -> jax.Array:
    """The guide's kernel: a (col-major) and b (row-major) 16x16 half, c row-major float."""
    a_frag = jaxwarp.fragment("matrix_a", T, T, T, "f16", "col_major")
    b_frag = jaxwarp.fragment("matrix_b", T, T, T, "f16", "row_major")
    c_frag = jaxwarp.fragment("accumulator", T, T, T, "f32")
    c_frag = jaxwarp.fill_fragment(c_frag, 0.0)
    a_frag = jaxwarp.load_matrix_sync(a_frag, a_mem, 16)
    b_frag = jaxwarp.load_matrix_sync(b_frag, b_mem, 16)
    c_frag = jaxwarp.mma_sync(a_frag, b_frag, c_frag)
    return jaxwarp.store_matrix_sync(jnp.zeros(T * T, jnp.float32), c_frag, 16, "mem_row_major")


def gemm_warp(mtr_a, mtr_b, c_row, c_col, *, M: int, N: int, K: int) -> jax.Array:
    """One warp of the seed's tiled GEMM: the 16x16 tile of C at (c_row, c_col)."""
    lda, ldb = K, N
    acc = jaxwarp.fill_fragment(jaxwarp.fragment("accumulator", T, T, T, "f32"), 0.0)
    a_spec = jaxwarp.fragment("matrix_a", T, T, T, "f16", "row_major")
    b_spec = jaxwarp.fragment("matrix_b", T, T, T, "f16", "row_major")

    def step(i, acc):
        k_iter = i * T
        # aOffsetPtr = mtrA + aRow * lda + aCol: the 16 rows the fragment reads from there.
        a_ptr = lax.dynamic_slice(mtr_a, (c_row * lda + k_iter,), ((T - 1) * lda + T,))
        b_ptr = lax.dynamic_slice(mtr_b, (k_iter * ldb + c_col,), ((T - 1) * ldb + T,))
        a = jaxwarp.load_matrix_sync(a_spec, a_ptr, lda)
        b = jaxwarp.load_matrix_sync(b_spec, b_ptr, ldb)
        return jaxwarp.mma_sync(a, b, acc)

    acc = lax.fori_loop(0, K // T, step, acc)
    return jaxwarp.store_matrix_sync(jnp.zeros(T * T, jnp.float32), acc, T, "mem_row_major")


def tiled_gemm(a: jax.Array, b: jax.Array) -> jax.Array:
    """C = A @ B (A: MxK, B: KxN half, row-major), one warp per 16x16 tile of C."""
    (M, K), N = a.shape, b.shape[1]
    rows, cols = jnp.meshgrid(jnp.arange(0, M, T), jnp.arange(0, N, T), indexing="ij")
    warp = jax.vmap(lambda r, c: gemm_warp(a.reshape(-1), b.reshape(-1), r, c, M=M, N=N, K=K))
    tiles = warp(rows.reshape(-1), cols.reshape(-1)).reshape(M // T, N // T, T, T)
    return tiles.transpose(0, 2, 1, 3).reshape(M, N)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n".join(__doc__.splitlines()[2:]))
    p.add_argument("--m", type=su.int_at_least(T, T), default=64,
                   help="rows of A and C in the tiled GEMM, a multiple of 16 (default 64)")
    p.add_argument("--n", type=su.int_at_least(T, T), default=64,
                   help="columns of B and C, a multiple of 16 (default 64); one warp per "
                        "16x16 tile of C")
    p.add_argument("--k", type=su.int_at_least(T, T), default=128,
                   help="columns of A and rows of B, a multiple of 16 (default 128)")
    p.add_argument("--seed", type=su.int_at_least(0), default=0,
                   help="random seed of the half-precision inputs, >= 0 (default 0)")
    args = p.parse_args()
    rng = np.random.default_rng(args.seed)

    a = rng.normal(size=(T, T)).astype(np.float16)
    b = rng.normal(size=(T, T)).astype(np.float16)
    c = np.asarray(jax.jit(wmma_ker)(jnp.asarray(a.T.reshape(-1)), jnp.asarray(b.reshape(-1))))
    c = c.reshape(T, T)
    ref = jaxwarp.matmul(jnp.asarray(a, jnp.float32), jnp.asarray(b, jnp.float32))
    print("wmma_ker (guide): c[:2, :4] =", c[:2, :4])
    print("  same bits as jaxwarp.matmul:", np.array_equal(c.view(np.uint32),
                                                         np.asarray(ref).view(np.uint32)))
    print("  max |c - float64| =", np.abs(c - a.astype(np.float64) @ b.astype(np.float64)).max())

    A = rng.normal(size=(args.m, args.k)).astype(np.float16)
    B = rng.normal(size=(args.k, args.n)).astype(np.float16)
    C = np.asarray(jax.jit(tiled_gemm)(jnp.asarray(A), jnp.asarray(B)))
    ref = np.asarray(jaxwarp.matmul(jnp.asarray(A, jnp.float32), jnp.asarray(B, jnp.float32)))
    print(f"tiled GEMM (seed), {args.m}x{args.k} @ {args.k}x{args.n}, "
          f"{(args.m // T) * (args.n // T)} warps: C[:2, :4] =", C[:2, :4])
    print("  same bits as jaxwarp.matmul:", np.array_equal(C.view(np.uint32), ref.view(np.uint32)))
    print("  max |C - float64| =",
          np.abs(C - A.astype(np.float64) @ B.astype(np.float64)).max())


if __name__ == "__main__":
    main()
