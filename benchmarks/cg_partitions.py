"""Cooperative-groups reductions and scans over coalesced groups and partitions.

Prints JSON: warps/s of one-warp programs through ``jax.jit(jax.vmap(fn))``, each inside
``jaxwarp.branch(lane_id() < k, ...)`` with a random ``k`` in 1 .. 32 per warp (so a
coalesced group is a random prefix of the warp, and a whole warp where ``k = 32``), float32
values, all measured in one run (one call of each program per round, rounds interleaved,
the best of each kept), with each program's trace + compile seconds measured separately
(``jax.jit(...).lower(...).compile()``), and the device, versions and host load:

* ``coalesced_reduce`` / ``coalesced_inclusive_scan``: ``cg.reduce`` /
  ``cg.inclusive_scan`` on ``cg.coalesced_threads()`` with ``cg.plus``;
* ``labeled_*``: on ``cg.labeled_partition(cg.coalesced_threads(), label)``, labels
  random in 0 .. 3 per lane;
* ``binary_*``: on ``cg.binary_partition(cg.coalesced_threads(), pred)``, pred random;
* ``tile8_reduce``: ``cg.reduce(cg.thread_block_tile(8), x, cg.plus)`` (the reference);
* ``reduce_add_sync``: ``jaxwarp.reduce_add_sync(jaxwarp.activemask(), x)`` on int32
  (CUDA defines ``__reduce_add_sync`` for integers only).

``ratio_to_tile8`` is each program's warps/s over ``tile8_reduce``'s of the same run.
The float sums are the CUDA 13 header's trees, bit for bit (the conformance command
checks them against the H100's captures); this file only times them.

Usage: python benchmarks/cg_partitions.py [--warps N] [--rounds R] [--only a,b]
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import jax
import numpy as np
from _common import device_info, emit, host_info, versions

import jaxwarp
import jaxwarp.cg as cg


def _in_branch(body):
    """``fn(x, k, label, pred)``: ``body`` on the lanes below ``k``, others keep ``x``."""

    def fn(x, k, label, pred):
        return jaxwarp.branch(jaxwarp.lane_id() < k, lambda v: body(v, label, pred),
                              lambda v: v, x)

    return fn


def programs() -> dict[str, tuple[Any, bool]]:
    """name -> (one-warp program of (x, k, label, pred), whether x is int32)."""
    groups = {
        "coalesced": lambda label, pred: cg.coalesced_threads(),
        "labeled": lambda label, pred: cg.labeled_partition(cg.coalesced_threads(), label),
        "binary": lambda label, pred: cg.binary_partition(cg.coalesced_threads(), pred),
    }
    out: dict[str, tuple[Any, bool]] = {}
    for gname, group in groups.items():
        for fname, fn in (("reduce", cg.reduce), ("inclusive_scan", cg.inclusive_scan)):
            out[f"{gname}_{fname}"] = (_in_branch(
                lambda v, label, pred, group=group, fn=fn: fn(group(label, pred), v, cg.plus)),
                False)
    out["tile8_reduce"] = (_in_branch(
        lambda v, label, pred: cg.reduce(cg.thread_block_tile(8), v, cg.plus)), False)
    out["reduce_add_sync"] = (_in_branch(
        lambda v, label, pred: jaxwarp.reduce_add_sync(jaxwarp.activemask(), v)), True)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--warps", type=int, default=100_000)
    p.add_argument("--rounds", type=int, default=5, help="timed calls of each program")
    p.add_argument("--only", default="", help="comma-separated program names (default all)")
    args = p.parse_args()
    rng = np.random.default_rng(0)
    n = args.warps
    xf = jax.device_put(rng.standard_normal((n, 32)).astype(np.float32))
    xi = jax.device_put(rng.integers(-1000, 1000, (n, 32)).astype(np.int32))
    k = jax.device_put(rng.integers(1, 33, n).astype(np.int32))
    label = jax.device_put(rng.integers(0, 4, (n, 32)).astype(np.int32))
    pred = jax.device_put(rng.integers(0, 2, (n, 32)).astype(np.int32))
    progs = programs()
    if args.only:
        progs = {name: progs[name] for name in args.only.split(",")}
    compiled, compile_s = {}, {}
    for name, (fn, is_int) in progs.items():
        x = xi if is_int else xf
        t0 = time.perf_counter()
        compiled[name] = jax.jit(jax.vmap(fn)).lower(x, k, label, pred).compile()
        compile_s[name] = time.perf_counter() - t0
        compiled[name](x, k, label, pred).block_until_ready()  # first run
    best = {name: float("inf") for name in progs}
    for _ in range(args.rounds):
        for name, (_, is_int) in progs.items():
            x = xi if is_int else xf
            t0 = time.perf_counter()
            compiled[name](x, k, label, pred).block_until_ready()
            best[name] = min(best[name], time.perf_counter() - t0)
    ref = best.get("tile8_reduce")
    result: dict[str, Any] = {"benchmark": "cg_partitions", **device_info(), **versions(),
                              **host_info(), "warps": n, "rounds": args.rounds}
    for name in progs:
        entry = {"warps_per_s": n / best[name], "seconds": best[name],
                 "compile_s": compile_s[name]}
        if ref is not None:
            entry["ratio_to_tile8"] = ref / best[name]
        result[name] = entry
    result["host_load_1min_after"] = host_info()["host_load_1min"]
    emit(result)


if __name__ == "__main__":
    main()
