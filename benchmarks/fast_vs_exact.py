"""How often does fast mode (the backend's own dot) give the exact model's bits?

On CPU, ``mode="fast"`` accumulates in fp32 with round-to-nearest, so it differs from
the tensor core. On an NVIDIA GPU, XLA runs an f16/bf16 ``dot_general`` with fp32
accumulation on the tensor cores themselves: this measures how close that is to the
exact H100 model, per element, for single WMMA tiles and for longer K.

Prints JSON. Usage: python benchmarks/fast_vs_exact.py [--tiles N]
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np
from _common import device_info, emit

import jaxwarp


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tiles", type=int, default=4096)
    args = p.parse_args()
    rng = np.random.default_rng(0)
    out = {"benchmark": "fast_vs_exact", **device_info(), "tiles": args.tiles, "results": []}
    for fmt in ("f16", "bf16", "tf32"):
        for k in (16, 256, 4096):
            n = max(1, args.tiles * 16 // k)
            a = jnp.asarray(rng.normal(size=(n, 16, k)), jnp.float32)
            b = jnp.asarray(rng.normal(size=(n, k, 16)), jnp.float32)
            f = {m: jax.jit(jax.vmap(lambda a, b, m=m, fmt=fmt: jaxwarp.matmul(
                a, b, operand_format=fmt, mode=m))) for m in ("exact", "fast")}
            ex, fa = (np.asarray(f[m](a, b)).view(np.uint32) for m in ("exact", "fast"))
            out["results"].append({"operand_format": fmt, "K": k, "matrices": n,
                                   "fast_equals_exact": float(np.mean(ex == fa))})
    emit(out)


if __name__ == "__main__":
    main()
