"""One large bf16 product under ``jaxwarp.emulate`` in exact mode.

Times ``jaxwarp.emulate(lambda a, b: a @ b, operand_format="bf16", mode="exact")`` on
bf16 matrices of M = N = K = size (4096 on a GPU, 512 on a CPU), and prints one JSON
record:

* ``seconds`` (best of the repeats, after the first call), ``compile_seconds`` and
  ``first_call_seconds``; the target: at most 1 s at 4096^3 on an H100;
* memory: on an accelerator the device's ``peak_bytes_in_use`` after the first call
  (this process's first computation, so the counter holds the inputs, the product's
  temporaries and its output) over the bytes of the inputs and the output; on every
  backend XLA's compiled memory analysis. Target: at most 2x inputs + outputs;
* ``bit_equal_to_matmul``: the emulated product equals
  ``jaxwarp.matmul(a, b, operand_format="bf16")`` (f32) rounded to the product's output
  dtype (bf16, as ``a @ b`` of bf16 matrices has), bit for bit, over all M x N
  elements; with ``--f32-output`` the lambda is
  ``jnp.matmul(a, b, preferred_element_type=float32)`` and the comparison is with
  ``matmul``'s f32 result itself;
* ``matmul_seconds`` (``jaxwarp.matmul`` alone, the same product) and XLA's own
  ``a @ b`` for scale, with the ratios.

Usage: python benchmarks/emulate_gemm.py [--size N] [--format bf16] [--f32-output]
       [--repeats R]
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from _common import (
    aot_compile,
    best_time,
    device_info,
    emit,
    host_info,
    memory_of,
    peak_bytes,
    timed_first_call,
    versions,
)

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # this checkout
import jaxwarp  # noqa: E402

TARGET_SECONDS = 1.0  # 4096^3 bf16, exact, on an H100
TARGET_MEMORY = 2.0  # peak <= 2x (inputs + outputs)
_DTYPES = {"bf16": jnp.bfloat16, "f16": jnp.float16}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=None,
                   help="M = N = K (default 4096 on a GPU, 512 on a CPU)")
    p.add_argument("--format", default="bf16", choices=sorted(_DTYPES))
    p.add_argument("--f32-output", action="store_true",
                   help="emulate jnp.matmul(a, b, preferred_element_type=f32) instead of a @ b")
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    t_start = time.perf_counter()
    size = args.size or (512 if jax.default_backend() == "cpu" else 4096)
    fmt, dt = args.format, _DTYPES[args.format]
    rng = np.random.default_rng(0)
    a = jax.device_put(rng.standard_normal((size, size), np.float32).astype(dt))
    b = jax.device_put(rng.standard_normal((size, size), np.float32).astype(dt))
    jax.block_until_ready((a, b))

    if args.f32_output:
        def product(x, y):
            return jnp.matmul(x, y, preferred_element_type=jnp.float32)
    else:
        def product(x, y):
            return x @ y

    emulated = jaxwarp.emulate(product, operand_format=fmt, mode="exact")
    out_dtype = jax.eval_shape(product, a, b).dtype
    io = a.nbytes + b.nbytes + size * size * np.dtype(out_dtype).itemsize

    # The emulated product is this process's first computation: the peak counter sees it.
    peak0 = peak_bytes()
    comp, compile_s = aot_compile(emulated, a, b)
    peak_c = peak_bytes()  # compile-time autotuning may allocate on the device
    first_s = timed_first_call(lambda: comp(a, b).block_until_ready())
    peak1 = peak_bytes()
    memory = {"compiled": memory_of(comp)}
    if peak1 is not None:
        memory.update(device_peak_bytes_before=peak0, device_peak_bytes_after_compile=peak_c,
                      device_peak_bytes=peak1,
                      device_peak_over_io=peak1 / io,
                      how="peak_bytes_in_use after the first call, the process's first "
                          "computation (inputs + temporaries + output) / (inputs + output)")
    t = best_time(lambda: comp(a, b).block_until_ready(), args.repeats)
    out = comp(a, b)

    mm, _ = aot_compile(lambda x, y: jaxwarp.matmul(x, y, operand_format=fmt, mode="exact"),
                        a, b)
    ref = mm(a, b)
    t_mm = best_time(lambda: mm(a, b).block_until_ready(), args.repeats)
    ref_c = ref.astype(out_dtype)
    width = {2: jnp.uint16, 4: jnp.uint32}[np.dtype(out_dtype).itemsize]
    mismatches = int(jnp.count_nonzero(jax.lax.bitcast_convert_type(out, width)
                                       != jax.lax.bitcast_convert_type(ref_c, width)))
    xla, _ = aot_compile(product, a, b)
    t_xla = best_time(lambda: xla(a, b).block_until_ready(), args.repeats)
    flops = 2.0 * size ** 3
    peak = memory.get("device_peak_over_io", memory["compiled"].get("peak_estimate_over_io"))
    emit({
        "benchmark": "emulate_gemm",
        "product": ("jnp.matmul(a, b, preferred_element_type=f32)" if args.f32_output
                    else "a @ b"),
        "operand_format": fmt, "mode": "exact", "M": size, "N": size, "K": size,
        "input_dtype": str(a.dtype), "output_dtype": str(np.dtype(out_dtype)),
        "seconds": t, "tflops": flops / t / 1e12,
        "compile_seconds": compile_s, "first_call_seconds": first_s,
        "io_bytes": int(io), "memory": memory, "memory_over_io": peak,
        "bit_equal_to_matmul": mismatches == 0, "mismatches": mismatches,
        "elements_compared": size * size,
        "compared_with": f"jaxwarp.matmul(a, b, operand_format={fmt!r}) (f32)"
                         + ("" if args.f32_output else f" rounded to {np.dtype(out_dtype)}"),
        "matmul_seconds": t_mm, "emulate_over_matmul": t_mm / t,
        "xla_seconds": t_xla, "xla_tflops": flops / t_xla / 1e12,
        "emulate_over_xla": t_xla / t,
        "targets": {"seconds": TARGET_SECONDS, "memory_over_io": TARGET_MEMORY,
                    "applies": "4096^3 bf16 on an H100",
                    "meets_seconds": t <= TARGET_SECONDS if size == 4096 else None,
                    "meets_memory": None if peak is None else peak <= TARGET_MEMORY},
        **device_info(), "versions": versions(), **host_info(),
        "wall_seconds": time.perf_counter() - t_start,
        "note": "ratios are speed ratios (t_other / t_emulate), same process, same inputs",
    })


if __name__ == "__main__":
    main()
