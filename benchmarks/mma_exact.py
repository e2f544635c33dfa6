"""Exact-mode ``mma`` (m16n16k16, f16 x f16 + f32 -> f32) over many independent tiles.

Prints JSON: tiles/s of ``jaxwarp.mma(..., mode="exact")`` on a batch of tiles, and,
measured in the same run on the same tiles, tiles/s of XLA's own batched fp16 product
``jnp.einsum('tmk,tkn->tmn', a, b, preferred_element_type=f32) + c``, their ratio,
and the memory exact mode needs: the compiled temp buffer against the bytes of its
arguments and output, and on an accelerator the device's peak bytes in use.

Usage: python benchmarks/mma_exact.py [--tiles N] [--a-type f16|bf16] [--c-type f32|f16]
       [--arch sm_90|sm_80|...]  (the architecture's datapath: sm_70 / sm_75 / sm_80 / sm_89
       cut k = 16 into 4 or 2 chunks, sm_90 / sm_100 / sm_120 take it in one)
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np
from _common import best_time, compiled_memory, device_info, emit

import jaxwarp


def _memory(fn, *args) -> dict:
    """Compiled memory analysis of ``fn`` (temp vs argument + output bytes)."""
    m = compiled_memory(fn, *args)
    if "temp_bytes" in m:
        m["temp_over_io"] = m["temp_bytes"] / m["arg_plus_out_bytes"]
    return m


def _peak_bytes() -> int | None:
    stats = jax.devices()[0].memory_stats()
    return None if not stats else stats.get("peak_bytes_in_use")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--tiles",
        type=int,
        default=None,
        help="number of 16x16x16 tiles (default 2^16 on CPU, 2^20 otherwise)",
    )
    p.add_argument("--a-type", default="f16", choices=["f16", "bf16"])
    p.add_argument("--c-type", default="f32", choices=["f32", "f16"])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--arch", default="sm_90", help="target of the datapath model")
    args = p.parse_args()
    on_cpu = jax.default_backend() == "cpu"
    tiles = args.tiles if args.tiles is not None else (1 << 16 if on_cpu else 1 << 20)
    a_dt = {"f16": np.float16, "bf16": jnp.bfloat16}[args.a_format]
    c_dt = {"f32": np.float32, "f16": np.float16}[args.c_format]
    d_format = args.c_format
    rng = np.random.default_rng(0)
    a_np = rng.standard_normal((tiles, 16, 16), np.float32).astype(a_dt)
    b_np = rng.standard_normal((tiles, 16, 16), np.float32).astype(a_dt)
    c_np = rng.standard_normal((tiles, 16, 16), np.float32).astype(c_dt)
    a, b, c = (jax.device_put(x) for x in (a_np, b_np, c_np))
    del a_np, b_np, c_np

    def exact(a, b, c):
        return jaxwarp.mma(a, b, c, a_format=args.a_format, c_format=args.c_format,
                           d_format=d_format,
                           arch=args.arch)

    def einsum(a, b, c):
        d = jnp.einsum("tmk,tkn->tmn", a, b, preferred_element_type=jnp.float32)
        return (d + c.astype(jnp.float32)).astype(c.dtype)

    io_bytes = a.nbytes + b.nbytes + c.nbytes + c.nbytes  # output has c's shape and dtype
    f_exact = jax.jit(exact)
    # Exact mode first, so that the device's peak counter sees nothing else.
    base = _peak_bytes()
    d = f_exact(a, b, c).block_until_ready()
    peak = _peak_bytes()
    t_exact = best_time(lambda: f_exact(a, b, c).block_until_ready(), args.repeats)
    f_einsum = jax.jit(einsum)
    ref = f_einsum(a, b, c).block_until_ready()
    t_einsum = best_time(lambda: f_einsum(a, b, c).block_until_ready(), args.repeats)
    close = bool(
        jnp.allclose(
            d.astype(jnp.float32),
            ref.astype(jnp.float32),
            rtol=1e-2 if args.c_format == "f16" else 1e-5,
            atol=1e-3,
        )
    )
    result = {
        "benchmark": f"mma_exact_m16n16k16_{args.a_format}_{args.c_format}{d_format}",
        "arch": args.arch,
        **device_info(),
        "tiles": tiles,
        "exact_close_to_einsum": close,
        "exact_tiles_per_s": tiles / t_exact,
        "einsum_tiles_per_s": tiles / t_einsum,
        "exact_over_einsum": t_einsum / t_exact,
        "io_bytes": io_bytes,
        **{f"exact_{k}": v for k, v in _memory(exact, a, b, c).items()},
    }
    if peak is not None:
        result["device_peak_bytes_before"] = base
        result["device_peak_bytes_exact"] = peak
        result["device_peak_over_io"] = peak / io_bytes
    emit(result)


if __name__ == "__main__":
    main()
