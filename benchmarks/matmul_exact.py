"""Exact-mode ``jaxwarp.matmul`` on square matrices against XLA's own product.

For each operand format (f16, bf16, tf32, e4m3), times
``jaxwarp.matmul(a, b, operand_format=F, mode="exact")`` (fp32 accumulator) on
M = N = K = size and, in the same process on the same inputs, XLA's product
``jnp.matmul(a, b, preferred_element_type=float32)``. Prints one JSON record:

* ``seconds``, ``tflops`` (2MNK / seconds) of the exact product, ``xla_seconds``,
  ``xla_tflops`` and ``exact_over_xla`` (speed ratio t_xla / t_exact: 1.0 = as fast as
  XLA), compile time and the first call;
* memory: on an accelerator the device's ``peak_bytes_in_use`` after the first exact
  call, measured in a fresh process per format (so the counter holds nothing else:
  the inputs, the exact product's temporaries and its output), over the bytes of the
  inputs and the output; on every backend XLA's compiled memory analysis
  ((arguments + output + temp) / (arguments + output));
* a self-check: a 64x64 block of the big result equals, bit for bit, the same
  ``jaxwarp.matmul`` on just those 64 rows of A and 64 columns of B (the whole K); and
  ``--reference`` (default 8) random elements of it equal the plain-integer reference
  model ``tests/reference_tc.py`` run as a chain of single instructions over K;
* targets: exact 4096^3 f16 and bf16 in at most 1 s on an H100, peak
  memory at most 2x inputs + outputs.

e4m3: inputs are ``float8_e4m3fn`` arrays; the exact product runs on ``wgmma``
(``--fp8-instruction``, default; ``mma_sync`` also has e4m3); XLA's baseline is the
fp8 product ``jnp.matmul(a8, b8, preferred_element_type=float32)`` where the backend
compiles it, and, always, the f16 product of the same values (``xla_f16_*``).

``--scaling``: times the exact product while one of M, N, K grows (the other two fixed
at ``--base``) and writes ``<out>/<device>_matmul_exact.json`` and ``.png`` (the
``results/`` naming, the date inside; the kept record holds the JSON as its section
``scaling`` of ``<device>_matmul_exact.txt``).

Usage:
    python benchmarks/matmul_exact.py [--size N] [--formats f16,bf16,e4m3]
        [--fp8-instruction wgmma|mma_sync] [--repeats R] [--no-isolate]
    python benchmarks/matmul_exact.py --scaling [--format f16] [--sizes 128,256,512,1024]
        [--base B] [--out DIR]

Defaults: size 4096 on a GPU, 1024 on a CPU; scaling sizes 512..4096 with base 2048 on
a GPU, 128..1024 with base 512 on a CPU.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # this checkout's jaxwarp, before any installed one
FORMATS = ("f16", "bf16", "tf32", "e4m3")
#: ``jaxwarp.matmul``'s default instruction per format, and its default tile (the
#: instruction's first shape) per instruction and format, as its docstring states them;
#: for the record only (``matmul`` is called with ``tile=None``).
DEFAULT_INSTRUCTION = {"f16": "wmma", "bf16": "wmma", "tf32": "wmma", "e4m3": "wgmma"}
DEFAULT_TILE = {
    "wmma": {"f16": (16, 16, 16), "bf16": (16, 16, 16), "tf32": (16, 16, 8)},
    "mma_sync": {"f16": (16, 8, 16), "bf16": (16, 8, 16), "tf32": (16, 8, 8),
                 "e4m3": (16, 8, 32)},
    "wgmma": {"f16": (64, 8, 16), "bf16": (64, 8, 16), "tf32": (64, 8, 8),
              "e4m3": (64, 8, 32)},
}
TARGET_SECONDS = 1.0  # exact 4096^3 f16 / bf16 on an H100
TARGET_MEMORY = 2.0  # peak <= 2x (inputs + outputs)
BLOCK = 64


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=None,
                   help="M = N = K (default 4096 on a GPU, 1024 on a CPU)")
    p.add_argument("--formats", default=",".join(FORMATS),
                   help=f"comma-separated, from {FORMATS}")
    p.add_argument("--instruction", default=None, choices=["wmma", "mma_sync", "wgmma"],
                   help="instruction for f16/bf16 (default: matmul's default, wmma)")
    p.add_argument("--fp8-instruction", default="wgmma", choices=["wgmma", "mma_sync"])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--reference", type=int, default=8,
                   help="output elements to recompute with tests/reference_tc.py (0: none)")
    p.add_argument("--no-isolate", action="store_true",
                   help="run every format in this process (the device peak then only "
                        "covers the first format)")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--scaling", action="store_true")
    p.add_argument("--format", default="f16", help="operand format of --scaling")
    p.add_argument("--sizes", default=None, help="comma-separated sizes of --scaling")
    p.add_argument("--base", type=int, default=None,
                   help="size of the two fixed dimensions in --scaling")
    p.add_argument("--out", default=str(HERE / "results"),
                   help="folder of the --scaling files")
    return p


def _instruction(fmt: str, args) -> str | None:
    return args.fp8_instruction if fmt == "e4m3" else args.instruction


def _inputs(fmt: str, m: int, n: int, k: int, seed: int = 0):
    import jax
    import jax.numpy as jnp
    import ml_dtypes
    import numpy as np

    dt = {"f16": np.float16, "bf16": jnp.bfloat16, "tf32": np.float32,
          "e4m3": ml_dtypes.float8_e4m3fn}[fmt]
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k), np.float32).astype(dt)
    b = rng.standard_normal((k, n), np.float32).astype(dt)
    if fmt == "tf32":  # tf32 values (low 13 bits clear): the conversion leaves them as they are
        a, b = ((x.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32) for x in (a, b))
    return jax.device_put(a), jax.device_put(b)


def _exact_fn(fmt: str, instruction: str | None):
    import jaxwarp

    def f(a, b):
        return jaxwarp.matmul(a, b, operand_format=fmt, accumulator="f32", mode="exact",
                              instruction=instruction)

    return f


def _bits_equal(x, y) -> tuple[bool, int]:
    import numpy as np

    x, y = np.asarray(x), np.asarray(y)
    xb, yb = x.view(np.uint32), y.view(np.uint32)
    bad = int(np.count_nonzero(xb != yb))
    return bad == 0 and x.shape == y.shape, bad


def _reference_check(a, b, big, fmt: str, instruction: str, tile, count: int) -> dict:
    """``count`` output elements recomputed with the plain-integer reference model
    (``tests/reference_tc.py``): a chain of single instructions over the whole K, from a
    +0 accumulator, each D fed back as the next C, compared bit for bit."""
    import numpy as np

    sys.path.insert(0, str(HERE.parent / "tests"))
    try:
        import reference_tc
    except ImportError:
        return {"available": False}
    m, n, k = tile
    bits = {"f16": np.uint16, "bf16": np.uint16, "tf32": np.uint32, "e4m3": np.uint8}[fmt]
    K = a.shape[1]
    params = reference_tc.preset_for(instruction, fmt, f"m{m}n{n}k{k}")
    rng = np.random.default_rng(1)
    rows = rng.integers(0, a.shape[0], count)
    cols = rng.integers(0, b.shape[1], count)
    a_rows = np.asarray(a[np.sort(rows)]).view(bits)
    b_cols = np.asarray(b[:, np.sort(cols)]).view(bits)
    order_r, order_c = np.argsort(np.argsort(rows)), np.argsort(np.argsort(cols))
    got = np.asarray(big)[rows, cols].view(np.uint32)
    t0 = time.perf_counter()
    bad = 0
    for e in range(count):
        ar = a_rows[order_r[e]].astype(int).tolist()
        bc = b_cols[:, order_c[e]].astype(int).tolist()
        acc = 0  # +0.0f
        for k0 in range(0, K, k):
            acc = reference_tc.mma_tile([ar[k0:k0 + k]], [[v] for v in bc[k0:k0 + k]],
                                        [[acc]], fmt, fmt, "f32", "f32", params)[0][0]
        bad += int(acc != int(got[e]))
    return {"available": True, "elements": count, "mismatches": bad, "bit_equal": bad == 0,
            "seconds": time.perf_counter() - t0,
            "what": "random elements, chain of single instructions in tests/reference_tc.py"}


def run_format(fmt: str, size: int, args) -> dict:
    """One format, all measurements, in this process (the first device computation)."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from _common import aot_compile, best_time, memory_of, peak_bytes, timed_first_call

    ins = _instruction(fmt, args)
    used = ins or DEFAULT_INSTRUCTION[fmt]
    m = n = k = size
    a, b = _inputs(fmt, m, n, k)
    jax.block_until_ready((a, b))
    io = a.nbytes + b.nbytes + m * n * 4
    flops = 2.0 * m * n * k
    rec: dict = {"operand_format": fmt, "instruction": used,
                 "tile": list(DEFAULT_TILE[used][fmt]), "accumulator": "f32",
                 "M": m, "N": n, "K": k, "input_dtype": str(a.dtype),
                 "io_bytes": int(io)}
    peak0 = peak_bytes()
    exact, rec["compile_seconds"] = aot_compile(_exact_fn(fmt, ins), a, b)
    peak_c = peak_bytes()  # compile-time autotuning may allocate on the device
    rec["first_call_seconds"] = timed_first_call(lambda: exact(a, b).block_until_ready())
    peak1 = peak_bytes()
    rec["memory"] = {"compiled": memory_of(exact)}
    if peak1 is not None:
        rec["memory"].update({
            "device_peak_bytes_before": peak0, "device_peak_bytes_after_compile": peak_c,
            "device_peak_bytes": peak1,
            "device_peak_over_io": peak1 / io,
            "how": "fresh process per format: peak_bytes_in_use after the first exact call "
                   "(inputs + temporaries + output) / (inputs + output)"
            if not args.no_isolate else "one process: the peak of the first format only"})
    t = best_time(lambda: exact(a, b).block_until_ready(), args.repeats)
    rec.update(seconds=t, tflops=flops / t / 1e12)
    big = exact(a, b)

    # Self-check: a 64x64 block of the result from its own rows and columns, whole K.
    r0, c0 = max(m - BLOCK, 0), (n // 2) // 16 * 16
    small = jax.jit(_exact_fn(fmt, ins))(a[r0:r0 + BLOCK], b[:, c0:c0 + BLOCK])
    ok, bad = _bits_equal(big[r0:r0 + BLOCK, c0:c0 + BLOCK], small)
    rec["self_check"] = {"rows": [r0, r0 + BLOCK], "cols": [c0, c0 + BLOCK], "K": k,
                         "bit_equal": ok, "mismatches": bad,
                         "elements": int(np.prod(small.shape))}
    if args.reference:
        rec["reference_check"] = _reference_check(a, b, big, fmt, used, rec["tile"],
                                                  args.reference)

    def xla(x, y):
        return jnp.matmul(x, y, preferred_element_type=jnp.float32)

    def time_xla(x, y, prefix):
        try:
            comp, _ = aot_compile(xla, x, y)
            tx = best_time(lambda: comp(x, y).block_until_ready(), args.repeats)
        except Exception as e:  # noqa: BLE001 - e.g. a backend without an fp8 dot
            rec[f"{prefix}error"] = f"{type(e).__name__}: {str(e)[:200]}"
            return None, None
        rec[f"{prefix}seconds"], rec[f"{prefix}tflops"] = tx, flops / tx / 1e12
        return tx, comp(x, y)

    tx, ref = time_xla(a, b, "xla_")
    if fmt == "e4m3":
        a16, b16 = a.astype(jnp.float16), b.astype(jnp.float16)  # the same values
        tx16, ref16 = time_xla(a16, b16, "xla_f16_")
        if tx is None:
            tx, ref = tx16, ref16
            rec["xla_baseline"] = "f16 product of the same values (no fp8 dot here)"
        else:
            rec["xla_baseline"] = "fp8 product jnp.matmul(e4m3, e4m3) -> f32"
            rec["exact_over_xla_f16"] = tx16 / t
    else:
        rec["xla_baseline"] = f"jnp.matmul({a.dtype}, {b.dtype}, preferred_element_type=f32)"
    if tx is not None:
        rec["exact_over_xla"] = tx / t
        scale = float(jnp.max(jnp.abs(ref)))
        rec["max_rel_diff_to_xla"] = float(jnp.max(jnp.abs(big - ref))) / scale
    if fmt in ("f16", "bf16"):
        peak = rec["memory"].get("device_peak_over_io",
                                 rec["memory"]["compiled"].get("peak_estimate_over_io"))
        rec["targets"] = {
            "seconds_at_4096": TARGET_SECONDS, "memory_over_io": TARGET_MEMORY,
            "applies": "M = N = K = 4096 on an H100",
            "meets_seconds": t <= TARGET_SECONDS if size == 4096 else None,
            "meets_memory": None if peak is None else peak <= TARGET_MEMORY,
        }
    return rec


def _child_main(args) -> None:
    import jax
    from _common import device_info, emit, host_info, versions

    size = args.size or (1024 if jax.default_backend() == "cpu" else 4096)
    emit({**device_info(), "versions": versions(), **host_info(),
          **run_format(args.child, size, args)})


def _parent_main(args) -> None:
    formats = [f.strip() for f in args.formats.split(",") if f.strip()]
    for f in formats:
        if f not in FORMATS:
            raise SystemExit(f"--formats: {f!r} is not one of {FORMATS}")
    t0 = time.perf_counter()
    results, meta = [], {}
    if args.no_isolate:
        import jax
        from _common import device_info, host_info, versions

        size = args.size or (1024 if jax.default_backend() == "cpu" else 4096)
        meta = {**device_info(), "versions": versions(), **host_info()}
        results = [run_format(f, size, args) for f in formats]
    else:
        # One fresh process per format: the device's peak counter then sees only that
        # format's product, and this process never opens the device (no preallocation).
        for f in formats:
            cmd = [sys.executable, str(pathlib.Path(__file__).resolve()), "--child", f,
                   "--repeats", str(args.repeats), "--fp8-instruction", args.fp8_instruction,
                   "--reference", str(args.reference)]
            if args.size:
                cmd += ["--size", str(args.size)]
            if args.instruction:
                cmd += ["--instruction", args.instruction]
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(
                [str(HERE), str(HERE.parent), os.environ.get("PYTHONPATH", "")])}
            p = subprocess.run(cmd, capture_output=True, text=True, env=env)
            if p.returncode:
                results.append({"operand_format": f, "error": f"exit {p.returncode}",
                                "stderr_tail": p.stderr[-1500:]})
                continue
            rec = json.loads(p.stdout[p.stdout.index("{"):])
            for key in ("backend", "device", "device_count", "jax", "cpu", "versions",
                        "host_cpus", "host_load_1min"):
                meta[key] = rec.pop(key, meta.get(key))
            results.append(rec)
    from _common import emit  # this process never imports jaxwarp or opens the device

    summary = {r["operand_format"]: {k: r.get(k) for k in
               ("instruction", "seconds", "tflops", "xla_tflops", "exact_over_xla")}
               for r in results if "error" not in r}
    for r in results:
        if "memory" in r:
            mem = r["memory"]
            summary[r["operand_format"]]["memory_over_io"] = mem.get(
                "device_peak_over_io", mem["compiled"].get("peak_estimate_over_io"))
            summary[r["operand_format"]]["self_check_bit_equal"] = r["self_check"]["bit_equal"]
            summary[r["operand_format"]]["reference_check_bit_equal"] = r.get(
                "reference_check", {}).get("bit_equal")
    emit({"benchmark": "matmul_exact", **meta,
          "size": results[0].get("M") if results else args.size,
          "isolated_processes": not args.no_isolate,
          "summary": summary, "results": results,
          "wall_seconds": time.perf_counter() - t0,
          "note": "exact_over_xla = t_xla / t_exact (speed ratio, same process, same "
                  "inputs); memory_over_io = device peak / (inputs + output) on a GPU, "
                  "XLA's compiled estimate on a CPU"})


def _scaling_main(args) -> None:
    import jax
    from _common import aot_compile, best_time, device_info, device_slug, emit, host_info, versions

    on_cpu = jax.default_backend() == "cpu"
    sizes = ([int(s) for s in args.sizes.split(",")] if args.sizes else
             ([128, 256, 512, 1024] if on_cpu else [512, 1024, 2048, 4096]))
    base = args.base or (512 if on_cpu else 2048)
    fmt = args.format
    ins = _instruction(fmt, args)
    fn = _exact_fn(fmt, ins)
    t0 = time.perf_counter()
    cache: dict = {}
    rows = []
    for axis in ("M", "N", "K"):
        for s in sizes:
            m, n, k = (s if axis == d else base for d in "MNK")
            if (m, n, k) not in cache:
                a, b = _inputs(fmt, m, n, k)
                exact, comp_s = aot_compile(fn, a, b)
                t = best_time(lambda exact=exact, a=a, b=b: exact(a, b).block_until_ready(),
                              args.repeats)
                cache[(m, n, k)] = (t, comp_s)
                del a, b, exact
            t, comp_s = cache[(m, n, k)]
            rows.append({"axis": axis, "size": s, "M": m, "N": n, "K": k, "seconds": t,
                         "tflops": 2.0 * m * n * k / t / 1e12, "compile_seconds": comp_s})
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"{device_slug()}_matmul_exact"  # results/: {device}_{benchmark}.{ext}
    record = {"benchmark": "matmul_exact_scaling", "date": date, **device_info(),
              "versions": versions(),
              **host_info(),
              "operand_format": fmt, "instruction": ins or "default", "base": base,
              "sizes": sizes, "rows": rows, "wall_seconds": time.perf_counter() - t0,
              "note": "one of M, N, K = size, the other two = base; exact mode, f32 "
                      "accumulator; seconds = best of the repeats"}
    stem.with_suffix(".json").write_text(json.dumps(record, indent=1) + "\n")
    record["files"] = [str(stem.with_suffix(".json"))]
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 4))
        for axis, style in zip("MNK", ("o-", "s-", "^-"), strict=True):
            pts = [(r["size"], r["seconds"]) for r in rows if r["axis"] == axis]
            ax.plot(*zip(*pts, strict=True), style, label=f"{axis} grows")
        s0, t0_ = sizes[0], min(r["seconds"] for r in rows if r["size"] == sizes[0])
        ax.plot(sizes, [t0_ * s / s0 for s in sizes], "k:", label="linear in size")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("size of the growing dimension")
        ax.set_ylabel("seconds (exact matmul)")
        ax.set_title(f"jaxwarp.matmul exact {fmt}, other dims {base}\n"
                     f"{record['device']}, jax {record['jax']}", fontsize=9)
        ax.legend()
        fig.tight_layout()
        fig.savefig(stem.with_suffix(".png"), dpi=120)
        record["files"].append(str(stem.with_suffix(".png")))
    except ImportError:
        record["plot"] = "matplotlib not installed: no png"
    emit(record)


def main() -> None:
    args = _parser().parse_args()
    if args.child:
        _child_main(args)
    elif args.scaling:
        _scaling_main(args)
    else:
        _parent_main(args)


if __name__ == "__main__":
    main()
