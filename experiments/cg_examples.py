"""The cooperative-groups examples of the CUDA programming guide, run on jaxwarp.cg.

Prints what ``tools/capture/capture_cg.py`` prints for the same programs on the GPU
(``cg_examples.txt``; kernels in ``tools/capture/cg.cu``):

0. tiled reduction: each ``thread_block_tile<32>`` sums ints and floats with
   ``cg::reduce(tile, v, cg::plus<>())``; the float sums show the butterfly's order;
1. stream compaction: ``cg::exclusive_scan`` of the valid flags gives each kept value its
   output slot;
2. ``labeled_partition`` aggregation: one partition per label, its size added to a
   histogram and its float sum (``cg::reduce`` over a non-contiguous group) recorded;
3. ``coalesced_threads`` atomic aggregation (``atomicAggInc``): the lanes of a branch
   take consecutive slots with one atomic add per group.

The inputs are fixed (an integer hash of the index), so the output is the same on every
run. Usage: python experiments/cg_examples.py
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np

import jaxwarp
import jaxwarp.cg as cg

SIZES = {0: 1024, 1: 128, 2: 128, 3: 128}


def example_input(n: int, salt: int) -> np.ndarray:
    """uint32 hash of i + salt·2^20 for i < n (the murmur3 finaliser)."""
    v = (np.arange(n, dtype=np.uint64) + np.uint64(salt << 20)) & np.uint64(0xFFFFFFFF)
    for shift, mul in ((16, 0x85EBCA6B), (13, 0xC2B2AE35), (16, None)):
        v ^= v >> np.uint64(shift)
        if mul:
            v = (v * np.uint64(mul)) & np.uint64(0xFFFFFFFF)
    return v.astype(np.uint32)


def spread_exponent(v):
    """Float bits with the sign and fraction of v and an exponent in 2^-20 .. 2^19."""
    if isinstance(v, np.ndarray):
        v = v.astype(np.uint32)
        return (v & np.uint32(0x807FFFFF)) | ((((v >> np.uint32(8)) % np.uint32(40))
                                               + np.uint32(107)) << np.uint32(23))
    u = jnp.uint32
    return (v & u(0x807FFFFF)) | ((((v >> u(8)) % u(40)) + u(107)) << u(23))


def f32(bits):
    return jax.lax.bitcast_convert_type(bits, jnp.float32)


def u32(x):
    return jax.lax.bitcast_convert_type(x, jnp.uint32)


# Each program is one warp (x: uint32[32]); jax.vmap runs the warps of the grid.


def tiled_reduction(x):
    """Example 0: (int sum, float sum bits) of the warp's tile, read from rank 0."""
    tile = cg.thread_block_tile(32)
    vi = (x & 0xFFFF).astype(jnp.int32) - 0x8000
    si = cg.reduce(tile, vi, cg.plus)
    sf = cg.reduce(tile, f32(x), cg.plus)
    return si[0], u32(sf)[0]


def stream_compaction(x):
    """Example 1: the compacted values (slots past the count stay -1) and the count."""
    tile = cg.thread_block_tile(32)
    valid = (x % 3 != 0).astype(jnp.int32)
    slot = cg.exclusive_scan(tile, valid)
    out = jnp.full(32, -1, jnp.int32).at[jnp.where(valid == 1, slot, 32)].set(
        x.astype(jnp.int32), mode="drop")
    return out, cg.reduce(tile, valid, cg.plus)[0]


def labeled_aggregation(x):
    """Example 2: per label 0..3 of the warp: partition size and float sum bits."""
    tile = cg.thread_block_tile(32)
    label = (x % 4).astype(jnp.int32)
    part = cg.labeled_partition(tile, label)
    s = u32(cg.reduce(part, f32(spread_exponent(x)), cg.plus))
    lead = part.thread_rank() == 0
    sizes = jnp.zeros(4, jnp.int32).at[jnp.where(lead, label, 4)].add(
        part.num_threads(), mode="drop")
    sums = jnp.full(4, 0xFFFFFFFF, jnp.uint32).at[jnp.where(lead, label, 4)].set(s, mode="drop")
    return sizes, sums


def atomic_agg_inc(x):
    """Example 3: the slot each odd lane gets (-1 elsewhere) and the counter's value."""

    def taken(counter):
        g = cg.coalesced_threads()
        # Rank 0 does atomicAdd(counter, g.num_threads()) and gets the old value (here the
        # counter starts at 0 and this is the warp's only group); the others add their rank.
        prev = jnp.where(g.thread_rank() == 0, counter, 0)
        return g.thread_rank() + g.shfl(prev, 0), counter + g.num_threads()

    def skipped(counter):
        return jnp.full(32, -1, jnp.int32), counter

    odd = (x & 1) == 1
    zero = jnp.zeros(32, jnp.int32)
    slot, counter = jaxwarp.branch(odd, taken, skipped, zero)
    return slot, jnp.max(jnp.where(odd, counter, 0))


def run_all() -> dict[str, np.ndarray]:
    """Every example over its warps, as the arrays the capture records."""
    r: dict[str, np.ndarray] = {}
    x0 = spread_exponent(example_input(SIZES[0], 0)).reshape(-1, 32)
    si, sf = jax.vmap(tiled_reduction)(jnp.asarray(x0))
    r["ex0/oi"], r["ex0/of"] = np.asarray(si), np.asarray(sf)
    r["ex0/ctr"] = np.array([np.asarray(si).astype(np.int32).sum(dtype=np.int32)])
    out, cnt = jax.vmap(stream_compaction)(jnp.asarray(example_input(SIZES[1], 1).reshape(-1, 32)))
    r["ex1/oi"], r["ex1/ctr"] = np.asarray(out).reshape(-1), np.asarray(cnt)
    sizes, sums = jax.vmap(labeled_aggregation)(
        jnp.asarray(example_input(SIZES[2], 2).reshape(-1, 32)))
    r["ex2/ctr"], r["ex2/of"] = np.asarray(sizes).sum(0), np.asarray(sums).reshape(-1)
    slot, ctr = jax.vmap(atomic_agg_inc)(jnp.asarray(example_input(SIZES[3], 3).reshape(-1, 32)))
    r["ex3/oi"], r["ex3/ctr"] = np.asarray(slot).reshape(-1), np.asarray(ctr)
    return r


def report(r: dict[str, np.ndarray]) -> str:
    """The printed report (the format of tools/capture/capture_cg.py)."""
    lines = ["tiled reduction (thread_block_tile<32>, cg::reduce plus):"]
    for i, (si, sf) in enumerate(zip(r["ex0/oi"], r["ex0/of"], strict=True)):
        f = np.uint32(sf).view(np.float32)
        lines.append(f"  tile {i:2d}: int sum {int(si)}, float sum {float(f)!r} (0x{int(sf):08x})")
    lines.append(f"  total (atomicAdd of the tile sums): {int(r['ex0/ctr'][0])}")
    lines.append("stream compaction (cg::exclusive_scan of the valid flags, x % 3 != 0):")
    for b, cnt in enumerate(r["ex1/ctr"]):
        kept = r["ex1/oi"][32 * b : 32 * b + int(cnt)]
        lines.append(f"  block {b}: kept {int(cnt)}: " + " ".join(str(int(k) % 1000) for k in kept))
    lines.append("labeled_partition aggregation (label x % 4):")
    lines.append("  histogram: " + " ".join(str(int(h)) for h in r["ex2/ctr"]))
    for w in range(len(r["ex2/of"]) // 4):
        sums = r["ex2/of"][4 * w : 4 * w + 4]
        lines.append(f"  warp {w} float sums: " + " ".join(f"0x{int(s):08x}" for s in sums))
    lines.append("coalesced_threads atomic aggregation (atomicAggInc, odd x):")
    for b, cnt in enumerate(r["ex3/ctr"]):
        slots = r["ex3/oi"][32 * b : 32 * b + 32]
        text = " ".join(str(int(s)) for s in slots)
        lines.append(f"  block {b}: counter {int(cnt)}, slots {text}")
    return "\n".join(lines) + "\n"


def main(argv=None) -> str:
    argparse.ArgumentParser(description=__doc__.split("\n")[0]).parse_args(argv)
    text = report(run_all())
    print(text, end="")
    return text


if __name__ == "__main__":
    main()
