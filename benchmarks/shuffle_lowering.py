"""Which XLA lowering of a static lane permutation runs fastest? (butterfly, 5 steps)

The same butterfly reduction, with the lane permutation ``lane ^ m`` written as
``jaxwarp.shfl_xor_sync`` (now: reshape + reverse on raw bits for a
static lane mask), a gather on raw bits (jaxwarp's path before), a plain gather,
``jnp.take``, reshape + reverse, and slices + concatenate. All give identical
bits; this prints achieved bytes/s of each, the number of kernels (non-trivial
ENTRY operations) in the optimised HLO of the backend it runs on, and a
device-to-device copy, measured in one run, as JSON.

H100, jax 0.11.2, 2^22 warps (benchmarks/results/h100_shuffle_lowering.json, before
``jaxwarp`` existed here): gather_bits 0.39, gather_plain 0.39, take 0.40,
reshape_rev 0.42, slices_concat 0.25 of the copy's bytes/s.

Usage: python benchmarks/shuffle_lowering.py [--log2-warps N]
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np
from _common import best_time, device_info, emit
from warp_reduce import hlo_kernels

import jaxwarp

LANES = np.arange(jaxwarp.WARP_SIZE, dtype=np.int32)


def _reshape_rev(v, m):
    """lane ^ m by splitting the lane index into its 5 bits and reversing bit log2(m)."""
    split = v.reshape((2,) * 5)
    return jax.lax.rev(split, (4 - (m.bit_length() - 1),)).reshape(32)


def _concat_xor(v, m):
    w = v.reshape(32 // (2 * m), 2, m)
    return jnp.concatenate([w[:, 1:], w[:, :1]], axis=1).reshape(32)


VARIANTS = {
    "jaxwarp": lambda v, m: jaxwarp.shfl_xor_sync(0xFFFFFFFF, v, m),
    # shfl_sync with a per-lane source-lane array: a gather of the raw bits.
    "gather_bits": lambda v, m: jaxwarp.shfl_sync(jaxwarp.FULL_MASK, v, jnp.asarray(LANES ^ m)),
    "gather_plain": lambda v, m: v[jnp.asarray(LANES ^ m)],
    "take": lambda v, m: jnp.take(v, LANES ^ m, axis=0),
    "reshape_rev": _reshape_rev,
    "slices_concat": _concat_xor,
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--log2-warps", type=int, default=None)
    args = p.parse_args()
    log2 = args.log2_warps or (16 if jax.default_backend() == "cpu" else 22)
    x = jnp.asarray(np.random.default_rng(0).normal(size=(1 << log2, 32)), jnp.float32)
    nbytes = 2 * x.nbytes
    res = {"benchmark": "shuffle_lowering", **device_info(), "warps": 1 << log2}
    want = None
    for name, perm in VARIANTS.items():
        def butterfly(v, perm=perm):
            for m in (16, 8, 4, 2, 1):
                v = v + perm(v, m)
            return v

        f = jax.jit(jax.vmap(butterfly))
        got = np.asarray(f(x))
        want = got if want is None else want
        res[f"{name}_bytes_per_s"] = nbytes / best_time(lambda f=f: f(x).block_until_ready())
        res[f"{name}_same_bits"] = bool(np.array_equal(got.view(np.uint32), want.view(np.uint32)))
        res[f"{name}_kernels"] = hlo_kernels(f, x)["kernels"]
    copy = jax.jit(lambda a: jnp.copy(a))
    res["copy_bytes_per_s"] = nbytes / best_time(lambda: copy(x).block_until_ready())
    emit(res)


if __name__ == "__main__":
    main()
