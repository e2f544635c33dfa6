"""Warp programs with divergence over many warps: stream compaction and radix sort steps.

Prints JSON: for each program of ``experiments/warp_divergence.py`` (``compact``,
``radix_step`` on bit 7, ``radix_sort`` of 32 steps) and for the same compaction written
without a branch (``compact_ballot``: ``__ballot_sync`` of the predicate and ``__popc`` of
the lanes below, the same bits), warps/s and bytes/s through ``jax.jit(jax.vmap(fn))``
and through ``jaxwarp.warp_kernel(fn)`` (with why it falls back to ``vmap`` where it
does), the fraction of a device-to-device copy's bandwidth (copy measured in the same
run), and whether the bits equal NumPy's; plus the device and the versions.

Usage: python benchmarks/warp_divergence.py [--log2-warps N]
  (default 2^14 warps on CPU, 2^20 on GPU)
"""

from __future__ import annotations

import argparse
import pathlib
import sys
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from _common import best_time, device_info, emit, versions

import jaxwarp

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "experiments"))
import warp_divergence as wd  # noqa: E402


def compact_ballot(x: jax.Array) -> jax.Array:
    """``wd.compact``'s output without a branch: ballot + popc prefix over the warp."""
    keep = x % 3 != 0
    m = jaxwarp.ballot_sync(wd.FULL, keep)
    slot = jnp.where(keep, wd.popc(m & wd.lanemask_lt()), 32 + jaxwarp.lane_id())
    return jnp.full((32,), -1, jnp.int32).at[slot].set(x.astype(jnp.int32), mode="drop",
                                                      unique_indices=True)


def programs() -> dict[str, tuple[Any, Any]]:
    """name -> (one-warp program, NumPy reference over (warps, 32))."""
    return {
        "compact": (lambda v: wd.compact(v)[0], lambda x: wd.compact_numpy(x)[0]),
        "compact_ballot": (compact_ballot, lambda x: wd.compact_numpy(x)[0]),
        "radix_step": (lambda v: wd.radix_step(v, 7), lambda x: wd.radix_step_numpy(x, 7)),
        "radix_sort": (wd.radix_sort, lambda x: np.sort(x, axis=1)),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--log2-warps", type=int, default=None,
                   help="number of warps as a power of two (default 14 on CPU, 20 on GPU)")
    args = p.parse_args()
    on_cpu = jax.default_backend() == "cpu"
    log2 = args.log2_warps if args.log2_warps is not None else (14 if on_cpu else 20)
    warps = 1 << log2
    x_np = np.random.default_rng(0).integers(0, 2**32, (warps, 32), dtype=np.uint32)
    x = jax.device_put(x_np)
    nbytes = 2 * x_np.nbytes
    copy = jax.jit(lambda a: jnp.copy(a))
    t_copy = best_time(lambda: copy(x).block_until_ready())
    result: dict[str, Any] = {"benchmark": "warp_divergence", **device_info(), **versions(),
                              "warps": warps, "bytes_moved": nbytes,
                              "copy_bytes_per_s": nbytes / t_copy}
    for name, (fn, ref) in programs().items():
        want = ref(x_np)
        entry: dict[str, Any] = {}
        for how, run in (("vmap", jax.jit(jax.vmap(fn))),
                         ("warp_kernel", jax.jit(jaxwarp.warp_kernel(fn)))):
            got = np.asarray(run(x))
            t = best_time(lambda run=run: run(x).block_until_ready(), repeats=3)
            entry[how] = {"matches_numpy": bool(np.array_equal(got, want)),
                          "warps_per_s": warps / t, "bytes_per_s": nbytes / t,
                          "fraction_of_copy": t_copy / t}
        entry["warp_kernel"]["falls_back_because"] = jaxwarp.warp_kernel(fn).explain(x)
        result[name] = entry
    emit(result)


if __name__ == "__main__":
    main()
