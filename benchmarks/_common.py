"""Timing helpers shared by the benchmarks (wall clock, best of several runs)."""

from __future__ import annotations

import json
import platform
import time
from collections.abc import Callable
from typing import Any

import jax


def device_info() -> dict[str, Any]:
    d = jax.devices()[0]
    return {
        "backend": jax.default_backend(),
        "device": getattr(d, "device_kind", str(d)),
        "device_count": jax.device_count(),
        "jax": jax.__version__,
        "cpu": platform.processor() or platform.machine(),
    }


def best_time(fn: Callable[[], Any], repeats: int = 5, min_time: float = 0.2) -> float:
    """Best wall-clock seconds of one call of ``fn`` (which must block until done)."""
    fn()  # compile and warm up
    best = float("inf")
    for _ in range(repeats):
        n, t0 = 0, time.perf_counter()
        while True:
            fn()
            n += 1
            dt = time.perf_counter() - t0
            if dt >= min_time:
                break
        best = min(best, dt / n)
    return best


def emit(result: dict[str, Any]) -> None:
    print(json.dumps(result, indent=1, sort_keys=False))


# --- Helpers added for matmul_exact.py, emulate_gemm.py and emulate_step.py. ----------


def versions() -> dict[str, str]:
    """Versions of jaxwarp, jax, jaxlib, numpy and Python (and the CUDA driver's, if any)."""
    import sys

    import numpy as np

    import jaxwarp

    out = {"jaxwarp": jaxwarp.__version__, "jax": jax.__version__, "numpy": np.__version__,
           "python": sys.version.split()[0]}
    try:
        import jaxlib

        out["jaxlib"] = jaxlib.__version__
    except ImportError:  # pragma: no cover
        pass
    return out


def peak_bytes() -> int | None:
    """The device's ``peak_bytes_in_use`` (None where the backend keeps no statistics, e.g. CPU).

    The counter only grows during a process: measure one computation per process, or
    read it before and after a computation that is the first to exceed the old peak."""
    stats = jax.devices()[0].memory_stats()
    return None if not stats else stats.get("peak_bytes_in_use")


def aot_compile(fn: Callable[..., Any], *args: Any) -> tuple[Any, float]:
    """``jax.jit(fn).lower(*args).compile()`` and the seconds it took (trace + compile).

    Call the returned executable with the same arguments; its ``memory_analysis()``
    is what :func:`memory_of` reads, so a benchmark compiles each function once."""
    t0 = time.perf_counter()
    compiled = jax.jit(fn).lower(*args).compile()
    return compiled, time.perf_counter() - t0


def memory_of(compiled: Any) -> dict[str, Any]:
    """XLA's memory analysis of a compiled executable: temp, argument and output bytes.

    CPU and GPU implement it; the temp buffer is what the computation needs beyond its
    arguments and outputs, so ``peak_estimate_over_io = (io + temp) / io``."""
    try:
        ma = compiled.memory_analysis()
    except Exception as e:  # noqa: BLE001 - not every backend implements it
        return {"memory_analysis": f"unavailable ({type(e).__name__})"}
    if ma is None:
        return {"memory_analysis": "unavailable"}
    io = ma.argument_size_in_bytes + ma.output_size_in_bytes
    return {
        "temp_bytes": int(ma.temp_size_in_bytes),
        "arg_plus_out_bytes": int(io),
        "peak_estimate_over_io": (io + ma.temp_size_in_bytes) / io,
    }


def compiled_memory(fn: Callable[..., Any], *args: Any) -> dict[str, Any]:
    """:func:`memory_of` ``jax.jit(fn)`` compiled for ``args`` (one extra compile)."""
    try:
        compiled, _ = aot_compile(fn, *args)
    except Exception as e:  # noqa: BLE001
        return {"memory_analysis": f"unavailable ({type(e).__name__})"}
    return memory_of(compiled)


def device_slug() -> str:
    """Short lower-case device name for file names: ``cpu``, ``h100``, ``h200``, ``a100``..."""
    import re

    if jax.default_backend() == "cpu":
        return "cpu"
    kind = getattr(jax.devices()[0], "device_kind", "") or jax.default_backend()
    words = [w for w in re.split(r"[^a-z0-9]+", kind.lower()) if w and w not in ("nvidia", "tesla")]
    return words[0] if words else jax.default_backend()


def timed_first_call(fn: Callable[[], Any]) -> float:
    """Seconds of one call of ``fn`` (which must block), e.g. compile plus first run."""
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def host_info() -> dict[str, Any]:
    """CPU count and 1-minute load average of the host (a busy host slows CPU timings)."""
    import os

    try:
        load = round(os.getloadavg()[0], 2)
    except OSError:  # pragma: no cover - not on every platform
        load = None
    return {"host_cpus": os.cpu_count(), "host_load_1min": load}


# --- Bits and errors in the JSON records of the kernel benchmarks (native_mgpu.py,
# fused_mgpu.py). -------------------------------------------------------------------------


def exact_path(jaxpr_text: str) -> str:
    """Which backend ran exact ``jaxwarp.mma`` in a traced program (its jaxpr as text):
    "tensor_cores" (the Triton tiles kernel), "tensor_cores_mosaic_gpu" (the Mosaic GPU
    one), "kernel" (the fused kernel) or "xla"."""
    from jaxwarp import backends

    if backends.NATIVE_TILES_MGPU_NAME in jaxpr_text:
        return "tensor_cores_mosaic_gpu"
    if backends.NATIVE_TILES_NAME in jaxpr_text:
        return "tensor_cores"
    return "kernel" if backends.FUSED_TILES_NAME in jaxpr_text else "xla"


def bit_view(x):
    """x as unsigned words of its width (NumPy)."""
    import numpy as np

    x = np.asarray(x)
    return x.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[x.dtype.itemsize])


def compare_bits(got, want) -> dict:
    """Equal elements of two arrays, bit for bit, and the first that differs."""
    import numpy as np

    same = bit_view(got) == bit_view(want)
    out = {"equal": int(same.sum()), "total": int(same.size), "bits_equal": bool(same.all())}
    if not same.all():
        i = tuple(int(j) for j in np.argwhere(~same)[0])
        out["first_difference"] = {"index": i, "got": float(np.asarray(got)[i]),
                                   "want": float(np.asarray(want)[i])}
    return out


def error_record(e: BaseException) -> dict:
    """An exception as a record's fields: its type and message, the traceback's tail."""
    import traceback

    return {"error": f"{type(e).__name__}: {str(e)[:1500]}",
            "traceback_tail": traceback.format_exc()[-3000:]}


def write_record(record: dict, caught, out) -> None:
    """Adds the warnings ``caught`` (``warnings.catch_warnings(record=True)``) to
    ``record``, prints it as JSON and writes it to ``out`` (a path) if given."""
    record["warnings"] = sorted({f"{w.category.__name__}: {str(w.message)[:200]}"
                                 for w in caught})
    text = json.dumps(record, indent=1)
    print(text)
    if out is not None:
        out.write_text(text + "\n")


def triton_module(lower: Callable[[], Any]) -> str:
    """The Triton module of the one Pallas kernel that ``lower()`` lowers (for CUDA), as
    Pallas prints it with ``pallas_call(debug=True)``, its debug locations removed."""
    import contextlib
    import functools
    import io
    import re

    from jax.experimental import pallas as pl

    out = io.StringIO()
    keep = pl.pallas_call  # the kernels call jax.experimental.pallas.pallas_call by name
    pl.pallas_call = functools.partial(keep, debug=True)
    try:
        with contextlib.redirect_stdout(out):
            lower()
    finally:
        pl.pallas_call = keep
    text = out.getvalue()
    text = text[text.index("The Triton module"):]
    text = text[text.index("\n") + 1:]
    text = re.sub(r" \[unknown\]", "", text)  # debug locations
    text = re.sub(r' "[^"\n]*"\(#loc\d+\)', "", text)
    text = re.sub(r"^#loc.*\n", "", text, flags=re.M)
    return text[text.index("module @"):text.rindex("\n}\n") + 3]  # the module alone


def sm90_sass(text: str, num_warps: int, work) -> tuple[int, int, list[str]]:
    """A Triton module compiled for sm_90 by the ``triton`` package (its ptxas; no GPU
    needed) -> (registers per thread, stack bytes, nvdisasm's lines of the SASS)."""
    import pathlib
    import re
    import subprocess

    import triton
    from triton.backends.compiler import GPUTarget

    src = pathlib.Path(work) / "kernel.ttir"
    src.write_text(text)
    k = triton.compile(str(src), target=GPUTarget("cuda", 90, 32),
                       options={"num_warps": num_warps, "num_stages": 1})
    cubin = src.with_suffix(".cubin")
    cubin.write_bytes(k.asm["cubin"])
    bindir = pathlib.Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
    usage = subprocess.run([bindir / "cuobjdump", "--dump-resource-usage", cubin],
                           capture_output=True, text=True, check=True).stdout
    lines = subprocess.run([bindir / "nvdisasm", "-c", cubin], capture_output=True,
                           text=True, check=True).stdout.splitlines()
    return (int(re.search(r"REG:(\d+)", usage).group(1)),
            int(re.search(r"STACK:(\d+)", usage).group(1)), lines)


#: A SASS line's opcode (after an optional predicate), from nvdisasm's output.
SASS_OPCODE = r"\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)"
