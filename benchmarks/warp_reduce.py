"""Butterfly warp reduction (5 x ``shfl_xor_sync`` + add) over many warps.

Prints JSON: warps/s of jaxwarp (jit + vmap) and of the same computation written
with NumPy fancy indexing, measured in the same run, and on an accelerator the
achieved bytes/s against a device-to-device copy of the same array.

Usage: python benchmarks/warp_reduce.py [--log2-warps N] [--dtype float32|int32]
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np
from _common import best_time, device_info, emit

import jaxwarp


def butterfly(value: jax.Array) -> jax.Array:
    for i in (16, 8, 4, 2, 1):
        value = value + jaxwarp.shfl_xor_sync(0xFFFFFFFF, value, i)
    return value


def butterfly_numpy(x: np.ndarray) -> np.ndarray:
    lane = np.arange(32)
    for i in (16, 8, 4, 2, 1):
        x = x + x[:, lane ^ i]
    return x


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
    fn = jax.jit(jax.vmap(butterfly))
    got = np.asarray(fn(x))
    want = butterfly_numpy(x_np)
    exact = bool(np.array_equal(got, want))
    t_jax = best_time(lambda: fn(x).block_until_ready())
    nbytes = 2 * x_np.nbytes  # read the input once, write the output once
    result = {
        "benchmark": "warp_reduce_butterfly",
        **device_info(),
        "warps": warps,
        "dtype": args.dtype,
        "matches_numpy": exact,
        "jaxwarp_warps_per_s": warps / t_jax,
        "jaxwarp_bytes_per_s": nbytes / t_jax,
    }
    if on_cpu:
        t_np = best_time(lambda: butterfly_numpy(x_np))
        result["numpy_warps_per_s"] = warps / t_np
        result["speedup_vs_numpy"] = t_np / t_jax
    copy = jax.jit(lambda a: jnp.copy(a))
    t_copy = best_time(lambda: copy(x).block_until_ready())
    result["copy_bytes_per_s"] = nbytes / t_copy
    result["fraction_of_copy"] = t_copy / t_jax
    emit(result)


if __name__ == "__main__":
    main()
