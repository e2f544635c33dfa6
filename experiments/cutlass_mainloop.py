"""A CUTLASS-style warp main loop written as a jaxwarp program.

Every warp owns a 16 x 16 tile of C and loops over K. Per k step it reads its A and B
slices from a shared-memory tile with ``ldmatrix`` (PTX ``ldmatrix.sync.aligned.m8n8.x4``)
straight into the register fragments of ``mma.sync.aligned`` and issues two
``mma.sync`` (one per n8 half of the tile), the fp32 accumulator registers carried from
step to step, as CUTLASS's ``MmaTensorOp`` main loop does::

    for s in range(K // k):                 # lax.fori_loop
        a  = ldmatrix.x4(A_smem, rows 0-15, k slice s)          # 4 regs = A fragment
        b  = ldmatrix.x4[.trans](B_smem, k slice s, n 0-15)     # 2 regs per n8 half
        d0 = mma.sync(a, b[:, 0:2], d0);  d1 = mma.sync(a, b[:, 2:4], d1)

Two variants (``--dtype``):

* ``f16``: ``mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32``. Shared memory is uint16
  words; A is 16 x K row-major, B is K x 16 row-major and is read with ``ldmatrix.trans``
  (memory rows are k, the fragment wants n-major pairs along k).
* ``e4m3``: ``mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32``. Shared memory is uint8
  bytes; A is 16 x K row-major, B is stored transposed (16 x K, "col-major B") because
  ``ldmatrix`` moves 16-bit pairs and cannot transpose 8-bit elements.

Warps are a ``jax.vmap``: each has its own shared-memory tile. The result is compared
bit for bit with the logical GEMM ``jaxwarp.mma`` (one call over all of K with
``instruction="mma_sync"``, i.e. the same chain of instructions) and with float64.

Usage: python experiments/cutlass_mainloop.py [--warps 64] [--k 256] [--dtype f16|e4m3]
       [--seed 0]
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxwarp import from_registers, ldmatrix, mma, mma_sync_ptx, parse_mma

M = N = 16  # warp tile
QUALIFIER = {"f16": "m16n8k16.row.col.f32.f16.f16.f32",
             "e4m3": "m16n8k32.row.col.f32.e4m3.e4m3.f32"}
DTYPES = tuple(QUALIFIER)
_LANE = np.arange(32, dtype=np.int32)


def instr_k(dtype: str) -> int:
    return parse_mma(QUALIFIER[dtype]).k


def make_tiles(rng: np.random.Generator, warps: int, k: int, dtype: str):
    """Random logical A (warps, 16, k), B (warps, k, 16) in the operand dtype."""
    a = rng.standard_normal((warps, M, k)).astype(np.float32)
    b = rng.standard_normal((warps, k, N)).astype(np.float32)
    dt = jnp.float16 if dtype == "f16" else jnp.float8_e4m3fn
    return jnp.asarray(a).astype(dt), jnp.asarray(b).astype(dt)


def to_smem(a: jax.Array, b: jax.Array, dtype: str) -> jax.Array:
    """One warp's shared memory: A row-major, then B (f16: K x 16 row-major; e4m3: B^T).

    Returns a flat uint16 (f16) or uint8 (e4m3) array.
    """
    if dtype == "f16":
        return jnp.concatenate([lax.bitcast_convert_type(a, jnp.uint16).reshape(-1),
                                lax.bitcast_convert_type(b, jnp.uint16).reshape(-1)])
    return jnp.concatenate([lax.bitcast_convert_type(a, jnp.uint8).reshape(-1),
                            lax.bitcast_convert_type(b.T, jnp.uint8).reshape(-1)])


def _addresses(step: jax.Array, k: int, dtype: str) -> tuple[jax.Array, jax.Array]:
    """(32,) byte addresses of the A and B ldmatrix.x4 of k step ``step``.

    Lanes 8i .. 8i+7 point at rows 0..7 of matrix i (16 bytes each). Matrix i of A is
    the 8 x 16-byte block (rows 8 (i % 2), bytes step*32 + 16 (i // 2)): registers 0..3
    of the m16 A fragment. Matrix i of B is (k half i % 2, n half i // 2).
    """
    mat, r = _LANE // 8, _LANE % 8
    row_bytes = 2 * k if dtype == "f16" else k  # one row of A (16 x k elements)
    kb = step * 32  # bytes of one k step of a row (16 f16 or 32 e4m3)
    a = (8 * (mat % 2) + r) * row_bytes + kb + 16 * (mat // 2)
    b0 = M * row_bytes
    if dtype == "f16":  # B is K x 16 row-major (32 bytes a row), read .trans
        krow = step * 16 + 8 * (mat % 2) + r
        b = b0 + krow * 32 + 16 * (mat // 2)
    else:  # B^T is 16 x K bytes row-major, read as is
        b = b0 + (8 * (mat // 2) + r) * k + kb + 16 * (mat % 2)
    return a.astype(jnp.int32), b.astype(jnp.int32)


def warp_mainloop(smem: jax.Array, k: int, dtype: str) -> jax.Array:
    """One warp: the K loop. Returns the accumulator registers (2, 32, 4) uint32."""
    q = QUALIFIER[dtype]
    steps = k // instr_k(dtype)

    def body(s, acc):
        a_addr, b_addr = _addresses(s, k, dtype)
        a = ldmatrix(smem, a_addr, num=4)
        b = ldmatrix(smem, b_addr, num=4, trans=(dtype == "f16"))
        d0 = mma_sync_ptx(q, a, b[:, 0:2], acc[0])
        d1 = mma_sync_ptx(q, a, b[:, 2:4], acc[1])
        return jnp.stack([d0, d1])

    acc0 = jnp.zeros((2, 32, 4), jnp.uint32)  # +0.0 in every fp32 accumulator
    return lax.fori_loop(0, steps, body, acc0)


def gemm_tiles(smem: jax.Array, k: int, dtype: str) -> jax.Array:
    """Many warps (vmap over smem's leading axis) -> C tiles (warps, 16, 16) float32."""
    regs = jax.vmap(lambda s: warp_mainloop(s, k, dtype))(smem)  # (W, 2, 32, 4)
    c = from_registers(QUALIFIER[dtype], "d", regs)  # (W, 2, 16, 8)
    return jnp.concatenate([c[:, 0], c[:, 1]], axis=-1)


gemm_tiles_jit = jax.jit(gemm_tiles, static_argnames=("k", "dtype"))


def reference(a: jax.Array, b: jax.Array, dtype: str) -> jax.Array:
    """The logical GEMM: ``jaxwarp.mma`` over all of K, a chain of mma_sync of k each."""
    c = jnp.zeros(a.shape[:-1] + (N,), jnp.float32)
    return mma(a, b, c, a_format=dtype, b_format=dtype, c_format="f32", d_format="f32",
               instruction="mma_sync", instruction_k=instr_k(dtype))


def reference_steps(a: jax.Array, b: jax.Array, dtype: str) -> jax.Array:
    """The same as an explicit Python chain of one-instruction ``jaxwarp.mma`` calls."""
    kk = instr_k(dtype)
    acc = jnp.zeros(a.shape[:-1] + (N,), jnp.float32)
    for s in range(a.shape[-1] // kk):
        acc = mma(a[..., s * kk:(s + 1) * kk], b[..., s * kk:(s + 1) * kk, :], acc,
                  a_format=dtype, b_format=dtype, c_format="f32", d_format="f32",
                  instruction="mma_sync", instruction_k=kk)
    return acc


def run(warps: int, k: int, dtype: str, seed: int = 0) -> dict:
    """Runs the main loop and the references; returns a summary dict."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype={dtype!r} is not supported; allowed: {DTYPES}")
    kk = instr_k(dtype)
    if k <= 0 or k % kk:
        raise ValueError(f"k={k} must be a positive multiple of {kk} for {dtype}")
    if warps <= 0:
        raise ValueError(f"warps={warps} must be positive")
    a, b = make_tiles(np.random.default_rng(seed), warps, k, dtype)
    smem = jax.vmap(lambda x, y: to_smem(x, y, dtype))(a, b)
    t0 = time.perf_counter()
    c = jax.block_until_ready(gemm_tiles_jit(smem, k=k, dtype=dtype))
    t1 = time.perf_counter()
    ref = reference(a, b, dtype)
    same = np.asarray(lax.bitcast_convert_type(c, jnp.uint32)
                      == lax.bitcast_convert_type(ref, jnp.uint32))
    exact = np.einsum("wmk,wkn->wmn", np.asarray(a.astype(jnp.float32), np.float64),
                      np.asarray(b.astype(jnp.float32), np.float64))
    rel = np.abs(np.asarray(c, np.float64) - exact).max() / np.abs(exact).max()
    return {"dtype": dtype, "qualifier": QUALIFIER[dtype], "warps": warps, "k": k,
            "k_steps": k // kk, "mma_sync": warps * 2 * (k // kk),
            "ldmatrix": warps * 2 * (k // kk), "bit_equal": int(same.sum()),
            "elements": same.size, "max_rel_err_vs_f64": float(rel),
            "seconds": t1 - t0, "c": c, "ref": ref}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(
        description="CUTLASS-style warp main loop (ldmatrix -> mma.sync over K) on jaxwarp, "
                    "checked bit for bit against the logical GEMM (jaxwarp.mma).")
    ap.add_argument("--warps", type=int, default=64, help="warps (16x16 C tiles), default 64")
    ap.add_argument("--k", type=int, default=256,
                    help="K, a multiple of 16 (f16) or 32 (e4m3); default 256")
    ap.add_argument("--dtype", choices=DTYPES, default="f16",
                    help="f16: m16n8k16 f32 accumulate; e4m3: m16n8k32 f32 accumulate")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    r = run(args.warps, args.k, args.dtype, args.seed)
    print(f"mma.sync.aligned.{r['qualifier']}: {r['warps']} warps x 16x16 tiles, K={r['k']} "
          f"({r['k_steps']} k steps): {r['mma_sync']} mma.sync, {r['ldmatrix']} ldmatrix.x4")
    print(f"bit-equal to datapath.mma GEMM: {r['bit_equal']}/{r['elements']} elements; "
          f"max |C - C_f64| / max |C_f64| = {r['max_rel_err_vs_f64']:.3g}; "
          f"main loop {r['seconds']:.2f} s (incl. compile)")
    print("C[0, :2, :4] =", np.asarray(r["c"][0, :2, :4]).tolist())
    return r


if __name__ == "__main__":
    main()
