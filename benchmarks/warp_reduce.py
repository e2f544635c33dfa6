"""Butterfly warp reduction (5 x ``shfl_xor_sync`` + add) over many warps.

Prints JSON: for each lowering of the lane permutation it measures, warps/s,
bytes/s, the fraction of a device-to-device copy's bandwidth (copy measured in
the same run), whether the bits equal NumPy's, and the kernels in XLA's
optimised HLO on the backend it runs on; plus the device and the jax version.

Lowerings (the same butterfly, the same bits):

* ``gather``: what jaxwarp did before its shuffles became reshapes: the source lanes ``lane ^ m`` as
  an int32 table and a gather of the raw bits; written here as ``jaxwarp.shfl_sync``
  with that table as a per-lane ``src_lane`` array, which takes the same path.
* ``static``: what ``jaxwarp.shfl_xor_sync`` does now with a static
  ``lane_mask``/``delta``/``src_lane`` (source lanes known at trace time): split the
  lane axis into its five bits, ``(32,) -> (2, 2, 2, 2, 2)``, reverse the axes
  of the bits of ``m`` and reshape back (shfl_up/down: slices + concatenate;
  shfl with a constant source: slice + broadcast); still on the raw bits.

What the optimised HLO looks like (``jax.jit(f).lower(x).compile().as_text()``,
jax 0.10.2, CPU, 2^16 warps, float32):

* ``gather``: 2 loop fusions in ENTRY (step 1 | steps 2-5) and 5 constant
  index tables (s32[32,1]); inside, one gather per step with a bitcast-convert,
  a transpose and a copy around it (the batched gather puts the lane axis first,
  so XLA transposes back).
* ``static``: 2 loop fusions (step 1 | steps 2-5), no constants, gathers,
  transposes or copies: bitcast-convert, reverse and add only (the reshapes
  became layout bitcasts). The lowering removes the gathers, but not the split.

Why two: XLA's fusion passes refuse a fusion whose emitter would evaluate one
producer more than about 15 times per output element
(``FusionNodeIndexingEvaluation``, ``kAllowedCodeDuplication = 15``; a
shape-changing op such as the reshape around each reverse counts as a new index).
Each butterfly step reads its input at 2 lane positions, so k fused steps read
the first one's input at 2^k positions: 4 steps (16) already pass the limit when
the last step is fused in from the root, and all 5 (32) can never be one loop
fusion under that rule. Any per-element (loop) fusion of the whole butterfly
must read 32 inputs per output element; two kernels move twice a copy's bytes,
so 0.5 of a copy is the ceiling for two kernels.

``static_first_steps`` times the first k steps alone. CPU (this machine, loaded,
2^16 warps): k = 1, 2 run at about 0.6 of a copy, k = 3, 4 (one kernel each)
at 0.08 and 0.05: on the CPU a fused kernel with 8 or 16 reversed reads is much
slower than two short ones. The full butterfly: gather 0.008-0.018 of a copy,
static 0.06-0.14 (about 8x faster; three runs, the ratio steady, the absolute
numbers noisy because other work shared the two cores).

The GPU compiler has its own fusion pass: recent XLA's GPU priority fusion
checks an IR-size budget (``ProducerConsumerMergedTooLarge``) and a cost model
instead of the 15-copy rule, so it may well fuse all five steps into one kernel
that reads each warp's 128 bytes 32 times (from L1) per output element; whether
it does, and what that kernel costs next to one or two short ones, is what
``kernels`` and ``static_first_steps`` show when this runs there; they must be
read there, not guessed from the CPU numbers above. On the H100 (jax 0.11.2,
2^22 warps) the gather path ran at 0.37-0.39 of a copy and a reshape + reverse
butterfly (the same ops as ``static`` less the bitcasts) at 0.42
(records h100_fast_vs_exact_shuffle_lowering.json and h100_matmul_fast.json in git
history, commit 8371f64; shuffle_lowering.py).

``kernel``: ``jaxwarp.warp_kernel(butterfly)`` on the Triton backend, the same program
as one Pallas (Triton) kernel on a GPU (``jax.vmap`` elsewhere, so on the CPU it is
``static``), for a few ``(warps_per_block, num_warps)``. Inside the kernel a block of
warps sits in registers and each xor shuffle is a reshape, a transpose, a split into
halves and a join, so the five steps are one pass over memory. On the H100 (jax 0.11.2,
2^22 warps, 2026-11-24, ``results/h100_warp_reduce.json``): 0.92-0.96 of a copy with 32 or 128 warps
per block, 0.68-0.70 with 512 (register pressure), against 0.37-0.40 for ``static``
(three kernels); one kernel in the HLO; ``kernel_random_bits_equal_xla``, the kernel's
bits against XLA's lowering on every bit pattern (NaN payloads, infinities, subnormals):
134,217,728/134,217,728. The Pallas Triton backend is deprecated in JAX (a warning says
so); ``warp_kernel`` will need a Mosaic GPU lowering when it goes. What JAX 0.10.2's Mosaic
GPU lowering (Lane semantics) takes, checked by lowering for CUDA on a CPU: register-level
``transpose``, ``split`` and ``concatenate`` are unimplemented, so a shuffle must go through
shared memory (store the block to an SMEM scratch ref, copy its halves crosswise through
``ref.reshape(b, g, 2, m)`` views, load it back); that lowers for ``m`` = 16, 8, 4, 2, but
not for ``m`` = 1, where the views' last axis is 1 and the store's strided layout wants a
vector of 2 ("The contiguous dimension of the reference must be a multiple of the layout's
vector size"). Reductions over one axis need a tiled layout ("No support for axes yet" in
the strided one), ``population_count`` has no rule, and ``iota`` needs a
``plgpu.layout_cast``.

Usage: python benchmarks/warp_reduce.py [--log2-warps N] [--dtype float32|int32]
"""

from __future__ import annotations

import argparse
import collections
import re
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from _common import best_time, device_info, emit

import jaxwarp

STEPS = (16, 8, 4, 2, 1)
#: (warps_per_block, num_warps) of the ``warp_kernel`` configurations timed.
KERNEL_CONFIGS = ((32, None), (128, None), (128, 8), (512, None), (512, 8))
#: Warps per CTA of the Mosaic GPU ``warp_kernel`` timed (one warpgroup a CTA).
MGPU_BLOCKS = (4, 8, 16, 32, 64)


def butterfly(value: jax.Array, steps: tuple[int, ...] = STEPS) -> jax.Array:
    for i in steps:
        value = value + jaxwarp.shfl_xor_sync(0xFFFFFFFF, value, i)
    return value


def _gather_xor(v: jax.Array, m: int) -> jax.Array:
    """The lowering jaxwarp used before: a gather with a source-lane table (``shfl_sync``
    with a per-lane ``src_lane`` array gathers the raw bits)."""
    src = jnp.asarray(np.arange(jaxwarp.WARP_SIZE, dtype=np.int32) ^ m)
    return jaxwarp.shfl_sync(jaxwarp.FULL_MASK, v, src)


def butterfly_gather(value: jax.Array) -> jax.Array:
    for i in STEPS:
        value = value + _gather_xor(value, i)
    return value


LOWERINGS: dict[str, Callable[[jax.Array], jax.Array]] = {
    "gather": butterfly_gather,
    "static": butterfly,
}


def butterfly_numpy(x: np.ndarray) -> np.ndarray:
    lane = np.arange(32)
    for i in STEPS:
        x = x + x[:, lane ^ i]
    return x


_NOT_KERNELS = {
    "parameter", "constant", "bitcast", "tuple", "get-tuple-element", "opt-barrier",
    "call", "async-start", "async-update", "async-done", "while", "conditional",
}


def hlo_kernels(fn: Any, x: jax.Array) -> dict[str, Any]:
    """Counts the operations that run as kernels in the optimised HLO of ``fn(x)``.

    Looks at every computation that is not the body of a fusion (ENTRY, and the
    computations a GPU command buffer calls): each fusion and each other real op
    there runs as (at least) one kernel on a GPU, one loop nest on the CPU.
    Parameters, constants, bitcasts, tuples and calls are not counted.
    """
    text = fn.lower(x).compile().as_text()
    fused = set(re.findall(r"calls=%?([\w.-]+)", text))  # fusion bodies
    for op, body in re.findall(r" ([\w-]+)\(.*to_apply=%?([\w.-]+)", text):
        if op != "call":  # reducers, comparators; a call's body (command buffer) counts
            fused.add(body)
    ops: collections.Counter[str] = collections.Counter()
    name = None
    for line in text.splitlines():
        head = re.match(r"(?:ENTRY )?%?([\w.-]+) [(].*[{]$", line)
        if head:
            name = head.group(1)
            continue
        m = re.match(r"\s*(?:ROOT )?%?[\w.-]+ = .*? ([\w-]+)\(", line)
        if m and name is not None and name not in fused:
            ops[m.group(1)] += 1
    kernels = sum(n for op, n in ops.items() if op not in _NOT_KERNELS)
    return {"kernels": kernels, "ops_outside_fusions": dict(sorted(ops.items()))}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--log2-warps",
        type=int,
        default=None,
        help="number of warps, as a power of two (default 2^16 on CPU, 2^22 on GPU)",
    )
    p.add_argument("--dtype", default="float32", choices=["float32", "int32"])
    args = p.parse_args()
    on_cpu = jax.default_backend() == "cpu"
    log2 = args.log2_warps if args.log2_warps is not None else (16 if on_cpu else 22)
    warps = 1 << log2
    rng = np.random.default_rng(0)
    x_np = rng.integers(-1000, 1000, (warps, 32)).astype(args.dtype)
    x = jax.device_put(x_np)
    want = butterfly_numpy(x_np)
    nbytes = 2 * x_np.nbytes  # read the input once, write the output once
    copy = jax.jit(lambda a: jnp.copy(a))
    t_copy = best_time(lambda: copy(x).block_until_ready())
    result: dict[str, Any] = {
        "benchmark": "warp_reduce_butterfly",
        **device_info(),
        "warps": warps,
        "dtype": args.dtype,
        "bytes_moved": nbytes,
        "copy_bytes_per_s": nbytes / t_copy,
    }
    times = {}
    for name, body in LOWERINGS.items():
        fn = jax.jit(jax.vmap(body))
        got = np.asarray(fn(x))
        t = times[name] = best_time(lambda fn=fn: fn(x).block_until_ready())
        result[name] = {
            "matches_numpy": bool(np.array_equal(got.view(np.uint32), want.view(np.uint32))),
            "warps_per_s": warps / t,
            "bytes_per_s": nbytes / t,
            "fraction_of_copy": t_copy / t,
            **hlo_kernels(fn, x),
        }
    # jaxwarp.warp_kernel: the same butterfly as one Pallas kernel on a GPU (vmap
    # elsewhere), on the Triton backend ("auto" takes Mosaic GPU where it runs a program).
    result["kernel"] = {}
    for b, nw in KERNEL_CONFIGS:
        with jaxwarp.config.override(warp_kernel_backend="triton"):
            kern = jaxwarp.warp_kernel(butterfly, warps_per_block=b, num_warps=nw)
            fn = jax.jit(kern)
            got = np.asarray(fn(x))
            runs_as = "pallas" if not on_cpu and kern.explain(x) is None else "vmap"
        key = f"block{b}_warps{nw or 'default'}"
        t = times["kernel_" + key] = best_time(lambda fn=fn: fn(x).block_until_ready())
        result["kernel"][key] = {
            "runs_as": runs_as,
            "matches_numpy": bool(np.array_equal(got.view(np.uint32), want.view(np.uint32))),
            "warps_per_s": warps / t,
            "fraction_of_copy": t_copy / t,
            **hlo_kernels(fn, x),
        }
    # The same on the Mosaic GPU backend (jaxwarp.config.warp_kernel_backend): each lane a
    # thread, each shuffle a shfl.sync.
    result["kernel_mosaic_gpu"] = {}
    for b in MGPU_BLOCKS if not on_cpu else ():
        with jaxwarp.config.override(warp_kernel_backend="mosaic_gpu"):
            kern = jaxwarp.warp_kernel(butterfly, warps_per_block=b)
            fn = jax.jit(kern)
            got = np.asarray(fn(x))
            runs_as = "pallas" if kern.explain(x) is None else "vmap"
        key = f"block{b}"
        t = times["mgpu_" + key] = best_time(lambda fn=fn: fn(x).block_until_ready())
        result["kernel_mosaic_gpu"][key] = {
            "runs_as": runs_as,
            "matches_numpy": bool(np.array_equal(got.view(np.uint32), want.view(np.uint32))),
            "warps_per_s": warps / t,
            "fraction_of_copy": t_copy / t,
        }
    # Every bit pattern (NaNs with payloads, infinities, subnormals): the kernel's bits
    # against the XLA lowering's on this backend.
    xr = jax.device_put(rng.integers(0, 2**32, (warps, 32), dtype=np.uint32).view(np.float32)
                        if args.dtype == "float32" else x_np)
    ref = np.asarray(jax.jit(jax.vmap(butterfly))(xr)).view(np.uint32)
    with jaxwarp.config.override(warp_kernel_backend="triton"):
        got = np.asarray(jax.jit(jaxwarp.warp_kernel(butterfly))(xr)).view(np.uint32)
    result["kernel_random_bits_equal_xla"] = f"{int((ref == got).sum())}/{ref.size}"
    if not on_cpu:
        with jaxwarp.config.override(warp_kernel_backend="mosaic_gpu"):
            got = np.asarray(jax.jit(jaxwarp.warp_kernel(butterfly))(xr)).view(np.uint32)
        result["kernel_mosaic_gpu_random_bits_equal_xla"] = (
            f"{int((ref == got).sum())}/{ref.size}")
    # The first k steps only (k = 1..4): where the compiler splits kernels, and what a
    # kernel costs as it reads its input at more lane positions (2**k per element).
    result["static_first_steps"] = {}
    for k in range(1, len(STEPS)):
        fn = jax.jit(jax.vmap(lambda v, k=k: butterfly(v, STEPS[:k])))
        t = times[f"first_{k}"] = best_time(lambda fn=fn: fn(x).block_until_ready())
        result["static_first_steps"][str(k)] = {
            "fraction_of_copy": t_copy / t,
            "kernels": hlo_kernels(fn, x)["kernels"],
        }
    # Copy again: the fraction uses the better of the two copy timings (less noise).
    t_copy = min(t_copy, best_time(lambda: copy(x).block_until_ready()))
    result["copy_bytes_per_s"] = nbytes / t_copy
    for name in LOWERINGS:
        result[name]["fraction_of_copy"] = t_copy / times[name]
    for key, r in result["kernel"].items():
        r["fraction_of_copy"] = t_copy / times["kernel_" + key]
    for key, r in result["kernel_mosaic_gpu"].items():
        r["fraction_of_copy"] = t_copy / times["mgpu_" + key]
    for k, r in result["static_first_steps"].items():
        r["fraction_of_copy"] = t_copy / times[f"first_{k}"]
    result["static_over_gather"] = times["gather"] / times["static"]
    # The keys earlier runs printed, for the default (jaxwarp) lowering.
    result["matches_numpy"] = result["static"]["matches_numpy"]
    result["jaxwarp_warps_per_s"] = result["static"]["warps_per_s"]
    result["jaxwarp_bytes_per_s"] = result["static"]["bytes_per_s"]
    result["fraction_of_copy"] = result["static"]["fraction_of_copy"]
    if on_cpu:
        t_np = best_time(lambda: butterfly_numpy(x_np))
        result["numpy_warps_per_s"] = warps / t_np
        result["speedup_vs_numpy"] = t_np / times["static"]
    emit(result)


if __name__ == "__main__":
    main()
