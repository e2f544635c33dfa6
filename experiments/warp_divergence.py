"""Warp programs written with divergence: stream compaction and a radix sort step.

Both are the CUDA idioms a kernel developer writes with a branch:

* ``compact``: the lanes whose value passes a test take a branch; inside it
  ``__activemask()`` is the set of those lanes, so each one's output slot is
  ``__popc(__activemask() & lanemask_lt)`` and the count is ``__popc(__activemask())``
  (the ballot + popc prefix, with the ballot done by the branch itself).
* ``radix_step``: a stable split of a warp's keys on one bit. The lanes whose bit is 0
  take one path and go to ``__popc(active & lanemask_lt)``; the others go after all
  the zeros. 32 steps (bit 0 .. 31) sort the warp's 32 keys (an LSD radix sort).

Prints one warp's run of each (input, active mask of each path, output), then checks
them against NumPy on many warps. ``--large`` runs millions of warps (2^20 by default,
``--log2-warps``) through ``jax.vmap`` and through ``jaxwarp.warp_kernel`` (which runs the
program as one Pallas kernel on a GPU where every operation has a bit-exact Triton
lowering, and says why not where it falls back), with the time of each. The stores to
computed slots say that the slots are distinct (``unique_indices=True``): XLA leaves which
of two stores to one element wins unspecified, and ``warp_kernel`` runs a scatter only
where it is defined.

Usage: python experiments/warp_divergence.py [--large] [--log2-warps N] [--seed S]
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

import jaxwarp

FULL = 0xFFFFFFFF
LANE = np.arange(32, dtype=np.uint32)


def lanemask_lt() -> jax.Array:
    """``%lanemask_lt``: the bits of the lanes below each lane."""
    lane = jnp.asarray(LANE)
    return jnp.where(lane == 0, jnp.uint32(0), (jnp.uint32(1) << lane) - jnp.uint32(1))


def popc(x: jax.Array) -> jax.Array:
    return jax.lax.population_count(x).astype(jnp.int32)


def compact(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Keeps the values with ``x % 3 != 0`` in lane order: (out with -1 after the
    kept values, count in every lane)."""

    def kept(x):
        active = jaxwarp.activemask()
        return popc(active & lanemask_lt()), jnp.broadcast_to(popc(active), (32,))

    def dropped(x):
        # The other lanes: the kept ones are those not executing here (a warp of 32).
        kept_lanes = ~jaxwarp.activemask()
        return 32 + jaxwarp.lane_id(), jnp.broadcast_to(popc(kept_lanes), (32,))

    slot, count = jaxwarp.branch(x % 3 != 0, kept, dropped, x)
    # Store: the kept lanes write x to out[slot]; the others' slots (32 + lane) are past
    # the end, so dropped: every slot is distinct (unique_indices), as a store's are.
    out = jnp.full((32,), -1, jnp.int32).at[slot].set(x.astype(jnp.int32), mode="drop",
                                                     unique_indices=True)
    return out, count


def radix_step(keys: jax.Array, bit: int | jax.Array) -> jax.Array:
    """A stable split of the warp's keys on ``bit``: zeros first, then ones."""
    b = (keys >> jnp.uint32(bit)) & 1
    zeros = popc(jaxwarp.ballot_sync(FULL, b == 0))

    def zero_side(k):
        return popc(jaxwarp.activemask() & lanemask_lt())

    def one_side(k):
        return zeros + popc(jaxwarp.activemask() & lanemask_lt())

    dest = jaxwarp.branch(b == 0, zero_side, one_side, keys)
    return jnp.zeros_like(keys).at[dest].set(keys, unique_indices=True)  # a permutation


def radix_sort(keys: jax.Array, bits: int = 32) -> jax.Array:
    """LSD radix sort of a warp's keys: ``radix_step`` on bit 0, 1, ..., bits - 1."""
    return jax.lax.fori_loop(0, bits, lambda i, k: radix_step(k, i), keys)


def radix_step_numpy(keys: np.ndarray, bit: int) -> np.ndarray:
    b = (keys >> np.uint32(bit)) & 1
    order = np.argsort(b, axis=1, kind="stable")
    return np.take_along_axis(keys, order, axis=1)


def show_one_warp(rng: np.random.Generator) -> None:
    x = rng.integers(0, 100, 32).astype(np.uint32)
    print("## compact: one warp, keep x % 3 != 0")
    print("x        =", x.tolist())
    active = int(np.sum((x % 3 != 0).astype(np.uint64) << LANE.astype(np.uint64)))
    print(f"activemask() in the kept path = {active:#010x}")
    out, count = jax.jit(compact)(jnp.asarray(x))
    print("out      =", np.asarray(out).tolist())
    print("count    =", int(count[0]))
    keys = rng.integers(0, 16, 32).astype(np.uint32)
    print("## radix_step: one warp, bit 0, then the full sort of 4-bit keys")
    print("keys     =", keys.tolist())
    print("step(0)  =", np.asarray(jax.jit(radix_step, static_argnums=1)(keys, 0)).tolist())
    print("sorted   =", np.asarray(jax.jit(radix_sort, static_argnums=1)(keys, 4)).tolist())


def check_many(rng: np.random.Generator, warps: int) -> None:
    x = rng.integers(0, 2**32, (warps, 32), dtype=np.uint32)
    out, count = jax.jit(jax.vmap(compact))(x)
    want_out, want_count = compact_numpy(x)
    ok = np.array_equal(np.asarray(out), want_out)
    ok_count = np.array_equal(np.asarray(count), want_count)
    print(f"## {warps} warps: compact equals NumPy: {ok and ok_count}")
    step = np.asarray(jax.jit(jax.vmap(lambda k: radix_step(k, 7)))(x))
    print(f"## {warps} warps: radix_step(bit 7) equals NumPy's stable split: "
          f"{np.array_equal(step, radix_step_numpy(x, 7))}")
    srt = np.asarray(jax.jit(jax.vmap(radix_sort))(x))
    print(f"## {warps} warps: 32 radix steps equal np.sort: "
          f"{np.array_equal(srt, np.sort(x, axis=1))}")


def compact_numpy(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``compact`` in NumPy: the kept words (as int32, what ``compact`` stores) in lane
    order, -1 after them; the count."""
    out = np.full(x.shape, -1, np.int32)
    count = np.zeros(x.shape, np.int32)
    for w, row in enumerate(x):
        kept = row[row % 3 != 0].view(np.int32)
        out[w, :len(kept)] = kept
        count[w] = len(kept)
    return out, count


def timed(fn, *args) -> tuple[float, object]:
    out = jax.block_until_ready(fn(*args))  # compile and warm up
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        out = jax.block_until_ready(fn(*args))
        best = min(best, time.perf_counter() - t0)
    return best, out


def run_large(rng: np.random.Generator, log2_warps: int) -> None:
    warps = 1 << log2_warps
    x = jax.device_put(rng.integers(0, 2**32, (warps, 32), dtype=np.uint32))
    programs = {
        "compact": lambda v: compact(v)[0],
        "radix_step": lambda v: radix_step(v, 7),
    }
    for name, fn in programs.items():
        vm = jax.jit(jax.vmap(fn))
        t_vmap, out_vmap = timed(vm, x)
        kern = jaxwarp.warp_kernel(fn)
        why = kern.explain(x)
        t_kern, out_kern = timed(jax.jit(kern), x)
        same = bool(np.array_equal(np.asarray(out_vmap), np.asarray(out_kern)))
        print(f"## {name}, {warps} warps on {jax.default_backend()}: vmap "
              f"{warps / t_vmap:.3e} warps/s; warp_kernel {warps / t_kern:.3e} warps/s "
              f"({'one Pallas kernel' if why is None else 'runs vmap: ' + why}); "
              f"same bits: {same}")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n".join(__doc__.splitlines()[2:]))
    p.add_argument("--large", action="store_true", help="time millions of warps")
    p.add_argument("--log2-warps", type=int, default=20, help="warps of --large, as 2^N")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    show_one_warp(rng)
    check_many(rng, 256)
    if args.large:
        run_large(rng, args.log2_warps)


if __name__ == "__main__":
    main()
