"""The kernels XLA makes of one exact ``mma`` batch: prints, per operand type, the
fusions and other ops of the optimised HLO's ENTRY computation with their output shapes
(what is stored between kernels), and the time and device peak of the batch. The batch is
traced with ``jaxwarp.config.gemm_fused_kernel="off"``: on a GPU "auto" runs large exact
``mma`` batches through the fused Pallas kernel instead, one custom call.

Usage: python benchmarks/hlo_kernels.py [--tiles N] [--types f16,bf16]
"""

from __future__ import annotations

import argparse
import re

import jax
import jax.numpy as jnp
import numpy as np
from _common import best_time, device_info, emit

import jaxwarp


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tiles", type=int, default=1 << 18)
    p.add_argument("--types", default="f16,bf16")
    args = p.parse_args()
    rng = np.random.default_rng(0)
    for t in args.types.split(","):
        dt = jaxwarp.get_format(t).storage_dtype
        k = 8 if t == "tf32" else 16
        a = jnp.asarray(rng.standard_normal((args.tiles, 16, k)), dt)
        b = jnp.asarray(rng.standard_normal((args.tiles, k, 16)), dt)
        c = jnp.asarray(rng.standard_normal((args.tiles, 16, 16)), jnp.float32)
        def batch(a, b, c, t=t):
            with jaxwarp.config.override(gemm_fused_kernel="off"):  # XLA's kernels
                return jaxwarp.mma(a, b, c, a_format=t, c_format="f32", d_format="f32")

        f = jax.jit(batch)
        txt = f.lower(a, b, c).compile().as_text()
        entry = txt[txt.index("ENTRY"):]
        ops = []
        for line in entry.splitlines()[1:]:
            m = re.match(r"\s*(?:ROOT )?%?([\w.-]+) = (\(.*?\)|\S+) ([\w-]+)\(", line)
            if m and m.group(3) not in ("parameter", "constant", "bitcast",
                                         "get-tuple-element", "tuple"):
                ops.append(f"{m.group(3)} {m.group(1)} -> {m.group(2)}")
        best = best_time(lambda f=f, a=a, b=b, c=c: f(a, b, c).block_until_ready(), 3)
        stats = jax.devices()[0].memory_stats() or {}
        emit({"benchmark": "hlo_kernels", **device_info(), "a_format": t,
              "tiles": args.tiles, "seconds": best,
              "tiles_per_s": args.tiles / best, "peak_bytes": stats.get("peak_bytes_in_use"),
              "entry_ops": ops, "n_entry_ops": len(ops)})


if __name__ == "__main__":
    main()
