"""A Triton-style Pallas matmul kernel under ``jaxwarp.emulate`` against the same product
as ``jnp.matmul`` under ``emulate``, both exact.

The kernel is ``jaxwarp.kernels.triton_matmul`` (grid of output blocks, a fori_loop over
the K blocks) on bf16 matrices of M = N = K = size (default 1024), blocks
``--block`` (default 128x128x64, 4 warps: Triton issues wgmma); emulate interprets it on
this machine. The reference is ``emulate(jnp.matmul, operand_format="bf16",
instruction=<the kernel's instruction>)`` with an f32 output, the same chain of
instructions: the two give the same bits (checked, ``bit_equal``). Prints one JSON
record: seconds of each (best of the repeats after a first call, the two interleaved),
the first calls, and the ratio kernel / matmul (target: at most 3).

Usage: python benchmarks/pallas_triton.py [--size N] [--block 128,128,64] [--warps 4]
       [--repeats R]
"""

from __future__ import annotations

import argparse
import functools
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
from _common import best_time, emit, host_info, timed_first_call, versions

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # this checkout
import jaxwarp  # noqa: E402

TARGET_RATIO = 3.0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--block", default="128,128,64")
    p.add_argument("--warps", type=int, default=4)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    block = tuple(int(x) for x in args.block.split(","))
    n = args.size
    ka, kb = jax.random.split(jax.random.key(0))
    a = jax.random.normal(ka, (n, n), jnp.float32).astype(jnp.bfloat16)
    b = jax.random.normal(kb, (n, n), jnp.float32).astype(jnp.bfloat16)
    kernel = jaxwarp.emulate(
        functools.partial(jaxwarp.kernels.triton_matmul, block=block, num_warps=args.warps),
        arch="sm_90a", operand_format=None, report=True)
    _, rep = kernel(a, b)
    instruction = rep.entries[0].instruction
    ref = jaxwarp.emulate(
        lambda x, y: jnp.matmul(x, y, preferred_element_type=jnp.float32),
        operand_format="bf16", instruction=instruction)

    def run_kernel():
        return jax.block_until_ready(kernel(a, b)[0])

    def run_ref():
        return jax.block_until_ready(ref(a, b))

    first_kernel = timed_first_call(run_kernel)
    first_ref = timed_first_call(run_ref)
    equal = bool(np.array_equal(np.asarray(run_kernel()).view(np.uint32),
                                np.asarray(run_ref()).view(np.uint32)))
    # Interleaved: the two see the same load (the host may be shared).
    t_kernel, t_ref = float("inf"), float("inf")
    for _ in range(args.repeats):
        t_kernel = min(t_kernel, best_time(run_kernel, repeats=1, min_time=0.0))
        t_ref = min(t_ref, best_time(run_ref, repeats=1, min_time=0.0))
    emit({
        "benchmark": "pallas_triton",
        "size": n, "block": list(block), "num_warps": args.warps,
        "instruction": instruction,
        "kernel_seconds": round(t_kernel, 4), "matmul_seconds": round(t_ref, 4),
        "ratio": round(t_kernel / t_ref, 3), "target_ratio": TARGET_RATIO,
        "first_call_kernel_seconds": round(first_kernel, 3),
        "first_call_matmul_seconds": round(first_ref, 3),
        "bit_equal": equal,
        "backend": jax.default_backend(), **host_info(), **versions(),
    })


if __name__ == "__main__":
    main()
