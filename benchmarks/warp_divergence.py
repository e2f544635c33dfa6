"""Warp programs with divergence over many warps: stream compaction and radix sort steps.

Prints JSON: for each program of ``experiments/warp_divergence.py`` (``compact``,
``radix_step`` on bit 7, ``radix_sort`` of 32 steps) and for the same compaction written
without a branch (``compact_ballot``: ``__ballot_sync`` of the predicate and ``__popc`` of
the lanes below, the same bits), warps/s and bytes/s through ``jax.jit(jax.vmap(fn))``
and through ``jaxwarp.warp_kernel(fn)`` (with why it falls back to ``vmap`` where it
does), the fraction of a device-to-device copy's bandwidth (copy measured in the same
run), and whether the bits equal NumPy's; plus the device and the versions.
``warp_kernel`` is the option's default backend (``backend``: Mosaic GPU where its walk
runs the program). On a GPU, ``warp_kernel_configs`` times the Triton kernel for each
``(warps_per_block, num_warps)`` of ``KERNEL_CONFIGS`` (with whether its bits equal
``vmap``'s) and ``best_config`` names the fastest; ``warp_kernel_mosaic_gpu`` the Mosaic
GPU kernel for each CTA size of ``MGPU_BLOCKS``. In the Triton kernel, the compaction
and the radix step end with a store to computed slots (a scatter that sets the output),
written with masked stores; the radix sort's scatters feed its next step, and the kernel
does those as (warps, 32, 32) one-hot selections held in registers, where the block size
matters more than for a butterfly.
``warp_kernel_onehot`` times the Triton kernel with its output scatters in the one-hot form too
(``jaxwarp.config.warp_kernel_output_scatter="onehot"``), in the same run.

On a GPU, ``--backends mosaic_gpu`` leaves out the Triton kernel's configurations and
its one-hot form (``warp_kernel`` with the option's default is still timed).

Usage: python benchmarks/warp_divergence.py [--log2-warps N] [--programs a,b]
                                            [--backends triton,mosaic_gpu]
  (run from the repository root; default 2^14 warps on CPU, 2^20 on GPU)
"""

from __future__ import annotations

import argparse
import importlib.util
import pathlib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from _common import best_time, device_info, emit, versions

import jaxwarp


def _load_programs():
    # The programs live in experiments/warp_divergence.py, a module of this file's own name:
    # loaded from its path under another name, so neither shadows the other (this file may
    # be run as a script or imported as warp_divergence from benchmarks/).
    path = pathlib.Path(__file__).resolve().parents[1] / "experiments" / "warp_divergence.py"
    spec = importlib.util.spec_from_file_location("warp_divergence_programs", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


wd = _load_programs()


def compact_ballot(x: jax.Array) -> jax.Array:
    """``wd.compact``'s output without a branch: ballot + popc prefix over the warp."""
    keep = x % 3 != 0
    m = jaxwarp.ballot_sync(wd.FULL, keep)
    slot = jnp.where(keep, wd.popc(m & wd.lanemask_lt()), 32 + jaxwarp.lane_id())
    return jnp.full((32,), -1, jnp.int32).at[slot].set(x.astype(jnp.int32), mode="drop",
                                                      unique_indices=True)


#: (warps_per_block, num_warps) of the warp_kernel configurations timed on a GPU (None:
#: warp_kernel's default: 128 warps per block, 8 for programs with one-hot gathers or
#: scatters).
KERNEL_CONFIGS = ((None, None), (4, None), (8, 2), (16, None), (16, 8), (32, 8),
                  (128, 8))
#: Warps per CTA of the Mosaic GPU warp_kernel timed (None: its default, 32).
MGPU_BLOCKS = (None, 4, 8, 32)


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
    p.add_argument("--programs", default=None,
                   help="comma-separated names of the programs to run (default: all)")
    p.add_argument("--backends", default="triton,mosaic_gpu",
                   help="on a GPU, the kernels whose configurations are timed: triton, "
                        "mosaic_gpu or both (default: both)")
    args = p.parse_args()
    backends = set(args.backends.split(","))
    if not backends or not backends <= {"triton", "mosaic_gpu"}:
        p.error(f"--backends={args.backends!r}: allowed are 'triton', 'mosaic_gpu' or both, "
                f"comma-separated")
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
    chosen = args.programs.split(",") if args.programs else list(programs())
    for name, (fn, ref) in programs().items():
        if name not in chosen:
            continue
        want = ref(x_np)
        entry: dict[str, Any] = {}
        vmap_out = None
        for how, run in (("vmap", jax.jit(jax.vmap(fn))),
                         ("warp_kernel", jax.jit(jaxwarp.warp_kernel(fn)))):
            got = np.asarray(run(x))
            vmap_out = got if how == "vmap" else vmap_out
            t = best_time(lambda run=run: run(x).block_until_ready(), repeats=3)
            entry[how] = {"matches_numpy": bool(np.array_equal(got, want)),
                          "same_bits_as_vmap": bool(np.array_equal(got, vmap_out)),
                          "warps_per_s": warps / t, "bytes_per_s": nbytes / t,
                          "fraction_of_copy": t_copy / t}
        entry["warp_kernel"]["falls_back_because"] = jaxwarp.warp_kernel(fn).explain(x)
        entry["warp_kernel"]["backend"] = jaxwarp.warp_kernel(fn).backend(x)
        if "triton" in backends:
            # The same kernel with an output scatter as a one-hot selection (the form
            # before the stores to computed slots), timed in the same run.
            with jaxwarp.config.override(warp_kernel_output_scatter="onehot",
                                         warp_kernel_backend="triton"):
                run = jax.jit(jaxwarp.warp_kernel(fn))
                got = np.asarray(run(x))
            t = best_time(lambda run=run: run(x).block_until_ready(), repeats=3)
            entry["warp_kernel_onehot"] = {
                "same_bits_as_vmap": bool(np.array_equal(got, vmap_out)),
                "fraction_of_copy": t_copy / t}
        if not on_cpu and "triton" in backends:
            configs = {}
            for b, nw in KERNEL_CONFIGS:
                key = f"block{b or 'default'}_warps{nw or 'default'}"
                try:
                    with jaxwarp.config.override(warp_kernel_backend="triton"):
                        run = jax.jit(jaxwarp.warp_kernel(fn, warps_per_block=b,
                                                          num_warps=nw))
                        got = np.asarray(run(x))
                    t = best_time(lambda run=run: run(x).block_until_ready(), repeats=3)
                except Exception as e:  # a configuration Triton cannot compile: say so
                    configs[key] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
                    continue
                configs[key] = {"same_bits_as_vmap": bool(np.array_equal(got, vmap_out)),
                                "fraction_of_copy": t_copy / t}
            entry["warp_kernel_configs"] = configs
            timed = {k: v["fraction_of_copy"] for k, v in configs.items()
                     if v.get("same_bits_as_vmap")}
            entry["best_config"] = max(timed, key=timed.get) if timed else None
        if not on_cpu and "mosaic_gpu" in backends:
            # The Mosaic GPU kernel: each lane a thread, a shuffle shfl.sync, a scatter
            # through the warp's row of shared memory.
            mgpu = {}
            with jaxwarp.config.override(warp_kernel_backend="mosaic_gpu"):
                why = jaxwarp.warp_kernel(fn).explain(x)
                for b in MGPU_BLOCKS if why is None else ():
                    run = jax.jit(jaxwarp.warp_kernel(fn, warps_per_block=b, force="pallas"))
                    key = f"block{b or 'default'}"
                    try:
                        got = np.asarray(run(x))
                        t = best_time(lambda run=run: run(x).block_until_ready(), repeats=3)
                    except Exception as e:  # a configuration that does not compile: say so
                        mgpu[key] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
                        continue
                    mgpu[key] = {"same_bits_as_vmap": bool(np.array_equal(got, vmap_out)),
                                 "fraction_of_copy": t_copy / t}
            entry["warp_kernel_mosaic_gpu"] = {"falls_back_because": why, **mgpu}
        result[name] = entry
    emit(result)


if __name__ == "__main__":
    main()
