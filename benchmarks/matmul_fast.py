"""Fast mode against XLA's own products, on the same operands in the same run.

Prints JSON, per operand format (f16, bf16):

* ``matmul``: ``jaxwarp.matmul(a, b, operand_format=..., mode="fast")`` on square
  matrices against ``jnp.matmul(a, b, preferred_element_type=float32)``;
* ``tiles``: ``jaxwarp.mma(a, b, c, mode="fast")`` on a batch of m16n16k16 tiles
  against ``jnp.einsum('tmk,tkn->tmn', a, b, preferred_element_type=float32) + c``;

with TFLOP/s and the ratio of throughputs (1.0 = as fast as XLA).

Usage: python benchmarks/matmul_fast.py [--size N] [--tiles T] [--formats f16,bf16]
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np
from _common import best_time, device_info, emit

import jaxwarp

_DTYPES = {"f16": jnp.float16, "bf16": jnp.bfloat16}


def _compare(f_ours, f_xla, args, flops, repeats):
    t_ours = best_time(lambda: f_ours(*args).block_until_ready(), repeats)
    t_xla = best_time(lambda: f_xla(*args).block_until_ready(), repeats)
    return {
        "jaxwarp_tflops": flops / t_ours / 1e12,
        "xla_tflops": flops / t_xla / 1e12,
        "jaxwarp_over_xla": t_xla / t_ours,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--size",
        type=int,
        default=None,
        help="M = N = K of the matrices (default 1024 on CPU, 8192 otherwise)",
    )
    p.add_argument(
        "--tiles",
        type=int,
        default=None,
        help="number of 16x16x16 tiles (default 2^16 on CPU, 2^20 otherwise)",
    )
    p.add_argument("--formats", default="f16,bf16")
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    on_cpu = jax.default_backend() == "cpu"
    size = args.size or (1024 if on_cpu else 8192)
    tiles = args.tiles or (1 << 16 if on_cpu else 1 << 20)
    rng = np.random.default_rng(0)
    result = {"benchmark": "fast_mode_vs_xla", **device_info(), "size": size, "tiles": tiles}
    for fmt in args.formats.split(","):
        dt = _DTYPES[fmt]
        a = jax.device_put(rng.standard_normal((size, size), np.float32).astype(dt))
        b = jax.device_put(rng.standard_normal((size, size), np.float32).astype(dt))
        ours = jax.jit(
            lambda a, b, fmt=fmt: jaxwarp.matmul(
                a, b, operand_format=fmt, accumulator="f32", mode="fast"
            )
        )
        xla = jax.jit(lambda a, b: jnp.matmul(a, b, preferred_element_type=jnp.float32))
        err = float(jnp.max(jnp.abs(ours(a, b) - xla(a, b))) / jnp.max(jnp.abs(xla(a, b))))
        result[f"matmul_{fmt}"] = {
            **_compare(ours, xla, (a, b), 2 * size**3, args.repeats),
            "max_rel_diff": err,
        }
        del a, b
        at = jax.device_put(rng.standard_normal((tiles, 16, 16), np.float32).astype(dt))
        bt = jax.device_put(rng.standard_normal((tiles, 16, 16), np.float32).astype(dt))
        ct = jax.device_put(rng.standard_normal((tiles, 16, 16), np.float32))
        ours_t = jax.jit(
            lambda a, b, c, fmt=fmt: jaxwarp.mma(
                a, b, c, a_format=fmt, c_format="f32", d_format="f32", mode="fast"
            )
        )
        xla_t = jax.jit(
            lambda a, b, c: jnp.einsum("tmk,tkn->tmn", a, b, preferred_element_type=jnp.float32) + c
        )
        result[f"tiles_{fmt}"] = _compare(
            ours_t, xla_t, (at, bt, ct), 2 * 16**3 * tiles, args.repeats
        )
        del at, bt, ct
    emit(result)


if __name__ == "__main__":
    main()
