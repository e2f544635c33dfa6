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

``--variants``: the timing of Mosaic GPU kernel settings (:data:`VARIANTS`: the
pipeline, compute warpgroups, rows a warpgroup, tile columns, k block, stages, the TMA
warpgroup's registers, fp32 operands, terms truncated by integer operations) at
``--size``, bf16 (``--variant-formats`` for others), each with its bits against the
default kernel's (``--variants-triton``: the Triton kernel timed first, each variant's
speed over it and its bits against it).

Every case runs in its own try/except: an error is reported in its JSON record (type,
message, the traceback's tail), never ends the run. One JSON line per case as it
finishes, the whole record at the end (and in ``--out`` if given). Most of a run is
compiles (on an H100 1-8 s a Mosaic GPU kernel; one warp-specialized variant, 2 x (64 x
64), did not finish in 190 s), so pick variants with ``--variant-names``.

``--once B``: two calls of one kernel and nothing else, for a profiler (``run_once``).

Usage (from the repository root)::

    python benchmarks/fused_mgpu.py                        # timing, 4096^3
    python benchmarks/fused_mgpu.py --check --variants --out fused_mgpu.json
    python benchmarks/fused_mgpu.py --variants --variants-triton --variant-names default,specialized
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

#: The settings the variants below start from: the warp-specialized pipeline as it was the
#: default (2 compute warpgroups and a TMA one, (128, 32) tiles, k blocks of 64 through 3
#: stages), and the plain one at the same k blocks.
_WS = dict(pipeline="specialized", wgs=2, bn=32, bk=64, stages=3)
_PLAIN = dict(pipeline="plain", bn=32, bk=64, stages=3)
#: ``--variants``: name -> Mosaic GPU kernel settings (``fused_mgpu_plan``'s arguments;
#: "default" is the plan's defaults); in the warp-specialized pipeline the register
#: budget of a compute warpgroup follows from ``wgs`` and ``memory_registers`` (64K
#: registers split: 2 -> 232, 3 -> 152, 4 -> 112), in the plain one it is ptxas's.
VARIANTS = {
    "default": {},
    "specialized": _WS,
    "wgs3": dict(_WS, wgs=3),
    "wgs4": dict(_WS, wgs=4),
    "wgs4_bn16": dict(_WS, wgs=4, bn=16),
    "wgs2_bn64": dict(_WS, wgs=2, bn=64),
    "wgs2_wm128_bn16": dict(_WS, wgs=2, wm=128, bn=16),
    "wgs3_bk32_stages4": dict(_WS, wgs=3, bk=32, stages=4),
    "wgs4_bk16_stages6": dict(_WS, wgs=4, bk=16, stages=6),
    "wgs4_mem24": dict(_WS, wgs=4, memory_registers=24),
    "wgs4_bk32_f32_operands": dict(_WS, wgs=4, bk=32, stages=4, f32_operands=True),
    "wgs2_int_terms4": dict(_WS, int_terms=4),
    "wgs4_int_terms3": dict(_WS, wgs=4, int_terms=3),
    "wgs4_int_terms5": dict(_WS, wgs=4, int_terms=5),
    # one warpgroup a CTA that copies and computes (plgpu.emit_pipeline): the registers
    # ptxas's choice, several CTAs an SM
    "plain": _PLAIN,
    "plain_bn16": dict(_PLAIN, bn=16),
    "plain_bn64": dict(_PLAIN, bn=64),
    "plain_wm128_bn16": dict(_PLAIN, wm=128, bn=16),
    "plain_bk32_stages4": dict(_PLAIN, bk=32, stages=4),
    "plain_int_terms4": dict(_PLAIN, int_terms=4),
    "plain_bn8": dict(_PLAIN, bn=8),
    "plain_bn16_stages2": dict(_PLAIN, bn=16, stages=2),
    "plain_bn16_bk32_stages4": dict(_PLAIN, bn=16, bk=32, stages=4),
    "plain_bn16_int_terms2": dict(_PLAIN, bn=16, int_terms=2),
    "plain_bn24": dict(_PLAIN, bn=24),
    "plain_bn16_bk16_stages8": dict(_PLAIN, bn=16, bk=16, stages=8),
    "plain_bn16_bk32_f32_operands": dict(_PLAIN, bn=16, bk=32, stages=4, f32_operands=True),
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


def run_check(variant: str = "default") -> list:
    """The :data:`CHECK_CASES` through the Mosaic GPU kernel with the settings of
    ``variant`` (and, for the default, the Triton kernel), bits against exact mode."""
    settings = VARIANTS[variant]
    out = []
    for i, (fmt, kind, finite, M, K, N) in enumerate(CHECK_CASES):
        r = {"format": fmt, "kind": kind, "finite": finite, "shape": [M, K, N],
             "variant": variant}
        t0 = time.perf_counter()
        try:
            a, b, c = _operands(fmt, M, K, N, kind, seed=i)
            want = _matmul(fmt, None)(a, b, c)
            for backend in ("mosaic_gpu", "triton") if variant == "default" else ("mosaic_gpu",):
                try:
                    kernel = _kernel(backend, fmt, finite,
                                     **(settings if backend == "mosaic_gpu" else {}))
                    r[backend] = compare_bits(kernel(a, b, c), want)
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


def run_variants(n: int, formats: list[str], names: list[str] | None,
                 triton: bool = False) -> dict:
    """Each named variant's time (and ``triton``: the Triton kernel's first, each variant's
    speed over it, the same operands)."""
    flops = 2 * n**3
    out = {"size": [n, n, n]}
    for fmt in formats:
        r = out[fmt] = {}
        a, b, c = _operands(fmt, n, n, n, seed=2)
        results = {}
        if triton:
            _time(_kernel("triton", fmt, True), (a, b, c), flops, r, "triton", results)
            print("variant", fmt, "triton", json.dumps(r["triton"])[:300], flush=True)
        for name, settings in VARIANTS.items():
            if names and name not in names:
                continue
            _time(_kernel("mosaic_gpu", fmt, True, **settings), (a, b, c), flops, r, name,
                  results)
            r[name]["settings"] = settings
            if name in results and "default" in results and name != "default":
                r[name]["bits_vs_default"] = compare_bits(results[name],
                                                      results["default"])["bits_equal"]
            if name in results and "triton" in results:
                r[name]["bits_vs_triton"] = compare_bits(results[name],
                                                     results["triton"])["bits_equal"]
                r[name]["over_triton"] = r[name]["tflops"] / r["triton"]["tflops"]
            print("variant", fmt, name, json.dumps(r[name])[:300], flush=True)
    return out


def run_once(backend: str, n: int, variant: str = "default") -> None:
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
    fn = _kernel(backend, "bf16", True, **(VARIANTS[variant] if backend == "mosaic_gpu" else {}))
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
    ap.add_argument("--variants-triton", action="store_true",
                    help="--variants: time the Triton kernel too (each variant's ratio to it)")
    ap.add_argument("--size", type=int, default=None, help="M = N = K of the timing")
    ap.add_argument("--out", type=pathlib.Path, default=None, help="JSON file to write")
    ap.add_argument("--once", choices=("mosaic_gpu", "triton"), default=None,
                    help="two calls of one kernel (bf16, finite, the --variant settings) at "
                         "--size and nothing else: the run to hand a profiler such as ncu")
    ap.add_argument("--variant", choices=sorted(VARIANTS), default="default",
                    help="the Mosaic GPU settings --check and --once use")
    args = ap.parse_args()
    if args.once:
        return run_once(args.once, args.size or 2048, args.variant)

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
            record["check"] = run_check(args.variant)
            n_ok = sum(r.get("mosaic_gpu", {}).get("bits_equal", False)
                       for r in record["check"])
            record["check_summary"] = f"{n_ok} of {len(record['check'])} cases bit-equal"
        if args.variants:
            names = args.variant_names.split(",") if args.variant_names else None
            record["variants"] = run_variants(n, args.variant_formats.split(","), names,
                                              args.variants_triton)
    write_record(record, caught, args.out)


if __name__ == "__main__":
    main()
