"""The fused exact kernel on Pallas' Mosaic GPU backend against the Triton kernel and XLA
(H100 / H200).

Default (timing): for bf16 and f16 at ``--size``^3 (4096 on a GPU) with C, the seconds
of the Mosaic GPU kernel (``jaxwarp.backends.fused_mgpu_chain``, its ``finite`` variant,
operands in fp32's range), the Triton kernel (``fused_chain``, the same variant), exact
``matmul`` with ``gemm_kernel_backend`` "mosaic_gpu" and "triton" (the range check and the
cond included) and ``jnp.matmul`` (XLA, fp32 output, plus C): TFLOP/s, ratios, and the
bits of each kernel against the Triton kernel and against exact mode with the kernel off
(``gemm_fused_kernel="off"``: XLA's exact loop).

``--check``: smaller products through the Mosaic GPU kernel against exact mode, bit for
bit: f16 inf / NaN operands and C (the cond to the non-finite kernel), f16 subnormals,
bf16 products near 2**122 in cancelling pairs, bf16's non-finite variant with C inf /
NaN, sums of 16 terms past 2**31 (the int32 carry), M, N and K the tile does not divide.

``--variants``: the timing of Mosaic GPU kernel settings (:data:`VARIANTS`: compute
warpgroups, rows a warpgroup, tile columns, k block, stages, the TMA warpgroup's
registers, fp32 operands, terms truncated by integer operations) at
``--size``, bf16 (``--variant-formats`` for others), each with its bits
against the default kernel's.

Every case runs in its own try/except: an error is reported in its JSON record (type,
message, the traceback's tail), never ends the run. One JSON line per case as it
finishes, the whole record at the end (and in ``--out`` if given). Not yet run on a GPU:
most of a run is compiles (each Mosaic GPU kernel lowered on a CPU in 1-2 s; ptxas time
unknown), so run the parts one at a time at first and pick variants with
``--variant-names`` if a part passes 4 minutes.

``--once B``: two calls of one kernel and nothing else, for a profiler (``run_once``).

Usage (from the repository root)::

    python benchmarks/fused_mgpu.py                        # timing, 4096^3
    python benchmarks/fused_mgpu.py --check --variants --out fused_mgpu.json
"""

from __future__ import annotations

import argparse
import functools
import json
import pathlib
import sys
import time
import warnings

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from _common import compare_bits, error_record, write_record  # noqa: E402

#: ``--variants``: name -> Mosaic GPU kernel settings (``fused_mgpu_plan``'s arguments);
#: the register budget of a compute warpgroup follows from ``wgs`` and
#: ``memory_registers`` (64K registers split: 2 -> 232, 3 -> 152, 4 -> 112).
VARIANTS = {
    "default": {},
    "wgs3": dict(wgs=3),
    "wgs4": dict(wgs=4),
    "wgs4_bn16": dict(wgs=4, bn=16),
    "wgs2_bn64": dict(wgs=2, bn=64),
    "wgs2_wm128_bn16": dict(wgs=2, wm=128, bn=16),
    "wgs3_bk32_stages4": dict(wgs=3, bk=32, stages=4),
    "wgs4_bk16_stages6": dict(wgs=4, bk=16, stages=6),
    "wgs4_mem24": dict(wgs=4, memory_registers=24),
    "wgs4_bk32_f32_operands": dict(wgs=4, bk=32, stages=4, f32_operands=True),
    "wgs2_int_terms4": dict(int_terms=4),
    "wgs4_int_terms3": dict(wgs=4, int_terms=3),
    "wgs4_int_terms5": dict(wgs=4, int_terms=5),
}

#: ``--check`` cases: (format, kind, finite, M, K, N).
CHECK_CASES = (
    ("f16", "special", None, 512, 512, 512),
    ("f16", "subnormal", None, 256, 1024, 256),
    ("bf16", "big", True, 512, 512, 512),
    ("bf16", "c_special", False, 256, 512, 256),
    ("bf16", "carry", True, 256, 256, 256),
    ("f16", "carry", True, 256, 256, 256),
    ("f16", "wide", None, 200, 1040, 136),  # K = 1040: k blocks of 16; M, N padded
    ("bf16", "wide", True, 300, 4144, 72),  # K = 4096 + 48
)




def _operands(fmt, M, K, N, kind="normal", seed=0):
    import jax.numpy as jnp
    import numpy as np

    rng = np.random.default_rng(seed)
    a, b = rng.standard_normal((M, K)), rng.standard_normal((K, N))
    c = rng.standard_normal((M, N)) * 2.0 ** rng.integers(-4, 5, (M, N))
    if kind == "normal":
        a, b = a * 2.0 ** rng.integers(-4, 5, (M, K)), b * 2.0 ** rng.integers(-4, 5, (K, N))
    elif kind == "wide":
        r = 20 if fmt == "bf16" else 6
        a, b = a * 2.0 ** rng.integers(-r, r, (M, K)), b * 2.0 ** rng.integers(-r, r, (K, N))
        a *= rng.random((M, K)) < 0.7
    elif kind == "subnormal":
        a, b = a * 2.0 ** rng.integers(-26, 4, (M, K)), b * 2.0 ** rng.integers(-26, 4, (K, N))
        a[0] = -0.0
    elif kind == "big":
        a, b = a * 2.0 ** 60, b * 2.0 ** 60
        a[:, 1::2] = a[:, ::2]
        b[1::2] = -b[::2] * (1 + 2.0 ** -7 * rng.integers(-2, 3, (K // 2, N)))
        c = c * 2.0 ** 90
    elif kind == "carry":
        a = np.full((M, K), 1.9921875) * np.where(rng.random((M, 1)) < 0.5, 1, -1)
        b = np.full((K, N), 1.9921875 if fmt == "bf16" else 1.9990234375)
        c = np.sign(a[:, :1]) * np.full((M, N), 1.99)  # C at the products' E
    dt = jnp.bfloat16 if fmt == "bf16" else jnp.float16
    a, b, c = jnp.asarray(a, dt), jnp.asarray(b, dt), jnp.asarray(c, jnp.float32)
    if kind == "special":
        a = a.at[0, 0].set(jnp.inf).at[1, 3].set(jnp.nan).at[2, 0].set(-jnp.inf)
        b = b.at[0, 2].set(0).at[5, 7].set(jnp.inf)
    if kind in ("special", "c_special"):
        c = c.at[3, 3].set(jnp.inf).at[4, 4].set(-jnp.inf).at[5, 5].set(jnp.nan)
    return a, b, c.at[0, 1].set(-0.0)


def _dp(fmt):
    import jaxwarp

    return jaxwarp.datapath_for("sm_90", "wgmma", fmt, 16)


def _kernel(backend: str, fmt: str, finite, **settings):
    """The jitted chain of one kernel: Mosaic GPU or Triton, on stored operands."""
    import jax

    from jaxwarp import backends

    chain = backends.fused_mgpu_chain if backend == "mosaic_gpu" else backends.fused_chain
    fn = jax.jit(functools.partial(chain, dp=_dp(fmt), fmt=fmt, finite=finite, **settings))
    return lambda a, b, c: jax.block_until_ready(fn(a, b, c))


def _matmul(fmt: str, backend: str | None):
    """Exact ``matmul`` traced under ``gemm_kernel_backend=backend`` (None: the kernel off,
    XLA's exact loop)."""
    import jax

    import jaxwarp

    fn = jax.jit(functools.partial(jaxwarp.matmul, operand_format=fmt, mode="exact",
                                   instruction="wgmma", arch="sm_90a"))
    opts = (dict(gemm_fused_kernel="off") if backend is None
            else dict(gemm_fused_kernel="on", gemm_kernel_backend=backend,
                      gemm_kernel_any_range_below=0))

    def call(a, b, c):
        with jaxwarp.config.override(**opts):
            return jax.block_until_ready(fn(a, b, c))

    return call


def run_check() -> list:
    out = []
    for i, (fmt, kind, finite, M, K, N) in enumerate(CHECK_CASES):
        r = {"format": fmt, "kind": kind, "finite": finite, "shape": [M, K, N]}
        t0 = time.perf_counter()
        try:
            a, b, c = _operands(fmt, M, K, N, kind, seed=i)
            want = _matmul(fmt, None)(a, b, c)
            for backend in ("mosaic_gpu", "triton"):
                try:
                    r[backend] = compare_bits(_kernel(backend, fmt, finite)(a, b, c), want)
                except Exception as e:  # noqa: BLE001
                    r[backend] = error_record(e)
        except Exception as e:  # noqa: BLE001
            r.update(error_record(e))
        r["seconds"] = round(time.perf_counter() - t0, 2)
        print("check", json.dumps(r), flush=True)
        out.append(r)
    return out


def _time(fn, args, flops, r, what, results):
    from _common import best_time

    try:
        t0 = time.perf_counter()
        results[what] = fn(*args)
        first = time.perf_counter() - t0
        t = best_time(lambda: fn(*args), 3, 0.3)
        r[what] = {"seconds": t, "tflops": flops / t / 1e12, "first_call_s": round(first, 2)}
    except Exception as e:  # noqa: BLE001
        r[what] = error_record(e)


def run_timing(n: int) -> dict:
    import jax
    import jax.numpy as jnp

    flops = 2 * n**3
    out = {"size": [n, n, n]}
    for fmt in ("bf16", "f16"):
        r = out[fmt] = {}
        try:
            a, b, c = _operands(fmt, n, n, n, seed=1)
            xla = jax.jit(lambda a, b, c: jnp.matmul(
                a, b, preferred_element_type=jnp.float32) + c)
            fns = {"mosaic_gpu": _kernel("mosaic_gpu", fmt, True),
                   "triton": _kernel("triton", fmt, True),
                   "matmul_mosaic_gpu": _matmul(fmt, "mosaic_gpu"),
                   "matmul_triton": _matmul(fmt, "triton"),
                   "xla": lambda a, b, c, xla=xla: jax.block_until_ready(xla(a, b, c))}
            results = {}
            for what, fn in fns.items():
                _time(fn, (a, b, c), flops, r, what, results)
                print(fmt, what, json.dumps(r[what])[:300], flush=True)
            for x, y in (("mosaic_gpu", "triton"), ("mosaic_gpu", "xla"), ("triton", "xla"),
                         ("matmul_mosaic_gpu", "matmul_triton")):
                if "tflops" in r.get(x, {}) and "tflops" in r.get(y, {}):
                    r[f"{x}_over_{y}"] = r[x]["tflops"] / r[y]["tflops"]
            try:
                want = _matmul(fmt, None)(a, b, c)
                for what in results:
                    if what != "xla":
                        r[f"{what}_bits_vs_exact"] = compare_bits(results[what], want)
            except Exception as e:  # noqa: BLE001
                r["exact"] = error_record(e)
            if "mosaic_gpu" in results and "triton" in results:
                r["mosaic_gpu_bits_vs_triton"] = compare_bits(results["mosaic_gpu"],
                                                          results["triton"])
        except Exception as e:  # noqa: BLE001
            r.update(error_record(e))
        print(fmt, json.dumps({k: v for k, v in r.items() if "over" in k or "bits" in k}),
              flush=True)
    return out


def run_variants(n: int, formats: list[str], names: list[str] | None) -> dict:
    flops = 2 * n**3
    out = {"size": [n, n, n]}
    for fmt in formats:
        r = out[fmt] = {}
        a, b, c = _operands(fmt, n, n, n, seed=2)
        results = {}
        for name, settings in VARIANTS.items():
            if names and name not in names:
                continue
            _time(_kernel("mosaic_gpu", fmt, True, **settings), (a, b, c), flops, r, name,
                  results)
            r[name]["settings"] = settings
            if name in results and "default" in results and name != "default":
                r[name]["bits_vs_default"] = compare_bits(results[name],
                                                      results["default"])["bits_equal"]
            print("variant", fmt, name, json.dumps(r[name])[:300], flush=True)
    return out


def run_once(backend: str, n: int) -> None:
    """Compile and call one kernel twice (bf16 n^3 with C, finite): the kernel launches a
    profiler sees. The recorded Nsight Compute run (``results/h100_ncu.csv``, sections
    ``fused_mgpu_bf16`` and ``fused_kernel_bf16_same_run``) was
    ``ncu --csv --kernel-name regex:'jaxwarp|mosaic' --launch-count 1 --section
    SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats
    --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --metrics <the
    pipes' sm__inst_executed_pipe_*> python benchmarks/fused_mgpu.py --once B --size 2048``."""
    import jax

    if jax.default_backend() != "gpu":
        raise SystemExit(f"--once runs the kernel on a GPU; JAX's backend here is "
                         f"{jax.default_backend()!r}")
    a, b, c = jax.block_until_ready(_operands("bf16", n, n, n, seed=2))
    fn = _kernel(backend, "bf16", True)
    fn(a, b, c)
    fn(a, b, c)
    print("done", backend, n, flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="bits against exact mode")
    ap.add_argument("--timing", action="store_true",
                    help="timing as well (the default without --check / --variants)")
    ap.add_argument("--variants", action="store_true", help="time the kernel's settings")
    ap.add_argument("--variant-names", default=None, help="comma-separated VARIANTS names")
    ap.add_argument("--variant-formats", default="bf16", help="comma-separated: bf16,f16")
    ap.add_argument("--size", type=int, default=None, help="M = N = K of the timing")
    ap.add_argument("--out", type=pathlib.Path, default=None, help="JSON file to write")
    ap.add_argument("--once", choices=("mosaic_gpu", "triton"), default=None,
                    help="two calls of one kernel (bf16, finite, default settings) at --size "
                         "and nothing else: the run to hand a profiler such as ncu")
    args = ap.parse_args()
    if args.once:
        return run_once(args.once, args.size or 2048)

    import jax
    from _common import device_info

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        record: dict = {"benchmark": "fused_mgpu", **device_info()}
        gpu = jax.default_backend() == "gpu"
        n = args.size or (4096 if gpu else 256)
        try:
            import jaxwarp

            record["gemm_kernel_backend_auto"] = jaxwarp.config.gemm_kernel_backend
        except Exception as e:  # noqa: BLE001
            record["import"] = error_record(e)
        if args.timing or not (args.check or args.variants):
            record["timing"] = run_timing(n)
        if args.check:
            record["check"] = run_check()
            n_ok = sum(r.get("mosaic_gpu", {}).get("bits_equal", False)
                       for r in record["check"])
            record["check_summary"] = f"{n_ok} of {len(record['check'])} cases bit-equal"
        if args.variants:
            names = args.variant_names.split(",") if args.variant_names else None
            record["variants"] = run_variants(n, args.variant_formats.split(","), names)
    write_record(record, caught, args.out)


if __name__ == "__main__":
    main()
