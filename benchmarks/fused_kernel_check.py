"""The fused exact kernel (``jaxwarp.backends.fused_chain``) on a GPU: bits and speed.

Parts (one process; each case in its own try/except that prints the traceback):

* ``timing``: 4096^3 with C (``--shape M,N,K`` for another), interleaved rounds of the
  kernel (:data:`VARIANTS`: tiles, warps, forms, products written out per iteration of
  the step loop, ``_uN``; f16 also without the "finite" knowledge), XLA's exact path and
  ``jnp.matmul``: best seconds, TFLOP/s, ratios (target: kernel >= 3x the XLA exact
  path), and each kernel's bits against XLA's exact path;
* ``bits``: exact ``matmul`` with the kernel (``jaxwarp.config.gemm_fused_kernel="on"``: the
  kernel at every size; on a CPU Pallas' interpreter) against XLA's exact path
  (``"off"``), bf16 and f16, random GEMMs: odd shapes (wgmma tiles: M, N padded), wide
  exponents, zeros, cancellation, f16 subnormals, inf and NaN, bf16 out of fp32's
  range (the host branch of the cond; below ``gemm_kernel_any_range_below`` multiply-adds
  the kernel for any value), with C; equal / total per case;
* ``ptx``: (``--ptx``, a child process with XLA's dump) the PTX opcodes of one small
  kernel, counted.

``--formats`` picks the operand formats of both parts (default ``bf16,f16``; also
``tf32``, matmul's default WMMA k8, blocks of 4, its operands fp32 words with low bits
set that the kernel clears; ``e4m3``, ``e5m2`` and ``e4m3e5m2``, A e4m3 and B e5m2: sm_90
wgmma fp8, k = 32, K a multiple of 32), e.g. ``--formats e4m3,e5m2,e4m3e5m2 --parts
timing,bits`` to time and check fp8 at 4096^3: its kernels, XLA's exact path and
``jnp.matmul`` on the fp8 arrays.

Writes ``OUT/fused_kernel_check.json`` (``--out``, default ``$OUT`` or ``.``) and
prints progress. On a CPU ``--dry`` runs the machinery on small shapes (the kernel in
Pallas' interpreter).

Usage: python benchmarks/fused_kernel_check.py [--out DIR] [--dry] [--ptx]
       [--parts timing,bits] [--variants NAME,...] [--shape M,N,K] [--formats F,...]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import re
import subprocess
import sys
import tempfile
import time
import traceback

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

T0 = time.perf_counter()


def log(*a):
    print(f"[{time.perf_counter() - T0:6.1f}s]", *a, flush=True)


#: The formats of ``--formats``: (A's, B's).
FORMATS = {"bf16": ("bf16", "bf16"), "f16": ("f16", "f16"), "tf32": ("tf32", "tf32"),
           "e4m3": ("e4m3", "e4m3"), "e5m2": ("e5m2", "e5m2"), "e4m3e5m2": ("e4m3", "e5m2")}
FP8 = ("e4m3", "e5m2", "e4m3e5m2")


def _dtypes(fmt):
    import jax.numpy as jnp
    dt = {"bf16": jnp.bfloat16, "f16": jnp.float16, "tf32": jnp.float32,
          "e4m3": jnp.float8_e4m3fn, "e5m2": jnp.float8_e5m2}
    return tuple(dt[f] for f in FORMATS[fmt])


def _operand_format(fmt):
    """matmul's operand_format of a ``--formats`` name."""
    fa, fb = FORMATS[fmt]
    return fa if fa == fb else (fa, fb)


def _datapath(fmt):
    import jaxwarp
    if fmt in FP8:
        return jaxwarp.datapath_for("sm_90", "wgmma", FORMATS[fmt][0], 32)
    return jaxwarp.datapath_for("sm_90", "wmma", fmt, 8 if fmt == "tf32" else 16)


def _operands(rng, fmt, M, N, K, kind):
    import jax.numpy as jnp
    import numpy as np
    if fmt in FP8:
        return _fp8_operands(rng, fmt, M, N, K, kind)
    dt = _dtypes(fmt)[0]
    a, b = rng.standard_normal((M, K)), rng.standard_normal((K, N))
    if kind == "wide":
        r = 20 if fmt in ("bf16", "tf32") else 6
        a = a * 2.0 ** rng.integers(-r, r, (M, K))
        b = b * 2.0 ** rng.integers(-r, r, (K, N))
    elif kind == "zeros":
        a = a * (rng.random((M, K)) < 0.3)
        b = b * (rng.random((K, N)) < 0.3)
    elif kind == "cancel":  # pairs of equal and opposite products, some off by an ulp
        a[:, 1::2] = a[:, ::2]
        b[1::2] = -b[::2] * (1 + 2.0 ** -7 * rng.integers(-2, 3, (K // 2, N)))
    elif kind == "subnormal":
        a = a * 2.0 ** rng.integers(-26, 4, (M, K))
        b = b * 2.0 ** rng.integers(-26, 4, (K, N))
    elif kind == "out_of_range":
        a = a * 2.0 ** 70
    if fmt == "tf32":  # bits below tf32's 10 that the tensor core ignores
        a, b = (x * (1 + rng.random(x.shape) * 2.0 ** -9) for x in (a, b))
    a, b = jnp.asarray(a, dt), jnp.asarray(b, dt)
    if kind == "special":
        a = a.at[0, 0].set(jnp.inf).at[1, 3].set(jnp.nan).at[2, 0].set(-jnp.inf)
        b = b.at[0, 2].set(0).at[5, 7].set(jnp.inf)
    del np
    return a, b


def _fp8_operands(rng, fmt, M, N, K, kind):
    """fp8 operands (``--formats`` e4m3, e5m2, e4m3e5m2): "normal", Gaussian; "wide",
    exponents over +-6; "bits", every finite bit pattern alike (zeros, -0, subnormals,
    the largest values); "special", "bits" with NaN (and e5m2 +-inf, also against a zero)
    at a few places; "zeros", 70% zeros."""
    import jax.numpy as jnp
    import numpy as np
    out = []
    for x_shape, dt in zip(((M, K), (K, N)), _dtypes(fmt), strict=True):
        if kind in ("bits", "special"):
            bits = rng.integers(0, 256, x_shape, dtype=np.uint8)
            x = np.asarray(bits.view(dt)).astype(np.float32)
            x = np.where(np.isfinite(x), x, 0.0)
        else:
            x = rng.standard_normal(x_shape)
            if kind == "wide":
                x = x * 2.0 ** rng.integers(-6, 6, x_shape)
            elif kind == "zeros":
                x = x * (rng.random(x_shape) < 0.3)
        x = jnp.asarray(x, jnp.float32).astype(dt)
        if kind == "special":
            inf = jnp.inf if dt == jnp.float8_e5m2 else jnp.nan
            x = x.at[0, 0].set(jnp.nan).at[1, 3].set(inf).at[2, 0].set(-inf).at[3, 1].set(0)
        out.append(x)
    return tuple(out)


CASES = [  # (fmt, M, N, K, kind, with C, instruction); 4096^3 with C: the timing part
    ("bf16", 100, 72, 80, "normal", True, "wgmma"),
    ("f16", 100, 72, 80, "normal", True, "wgmma"),
    ("bf16", 256, 384, 512, "wide", True, "wmma"),
    ("f16", 256, 384, 512, "wide", True, "wmma"),
    ("f16", 256, 256, 256, "special", True, "wmma"),
    ("bf16", 256, 256, 256, "out_of_range", True, "wmma"),
    # below gemm_kernel_any_range_below: the kernel for any bf16 value, no cond
    ("bf16", 128, 96, 128, "out_of_range", True, "wmma"),
    ("bf16", 128, 96, 128, "special", True, "wgmma"),
    ("bf16", 256, 256, 256, "cancel", True, "wmma"),
    ("f16", 256, 256, 256, "cancel", True, "wmma"),
    ("f16", 256, 256, 256, "subnormal", True, "wmma"),
    ("bf16", 256, 256, 256, "zeros", False, "wmma"),
    ("f16", 256, 256, 256, "zeros", False, "wmma"),
    # tf32 (--formats): bf16's routes, mma.sync's blocks of 8 and WMMA's of 4
    ("tf32", 100, 72, 80, "normal", True, "mma_sync"),
    *(("tf32", 256, 384, 512, kind, True, "wmma") for kind in ("wide", "cancel")),
    *(("tf32", s, s * 3 // 4, s, kind, True, "wmma") for s in (128, 256)
      for kind in ("out_of_range", "special")),
    # fp8 (--formats): wgmma, k = 32; M, N padded to the tile
    *((f, 100, 72, 96, "normal", True, "wgmma") for f in FP8),
    *((f, 256, 384, 512, kind, True, "wgmma") for f in FP8 for kind in ("wide", "bits")),
    *((f, 256, 256, 256, "special", True, "wgmma") for f in FP8),
    *((f, 256, 256, 256, "zeros", False, "wgmma") for f in FP8),
]
DRY_CASES = [(f, 48, 40, 64, kind, c, "wgmma") for f, _, _, _, kind, c, _ in CASES]


def part_bits(dry: bool, budget: float, formats=("bf16", "f16")) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np

    import jaxwarp

    rng = np.random.default_rng(0)
    cases = [case for case in (DRY_CASES if dry else CASES) if case[0] in formats]
    inputs = []
    for fmt, M, N, K, kind, with_c, _ in cases:
        a, b = _operands(rng, fmt, M, N, K, kind)
        c = jnp.asarray(rng.standard_normal((M, N)) * 2.0 ** rng.integers(-8, 8, (M, N)),
                        jnp.float32) if with_c else None
        inputs.append((a, b, c))
    results = {}
    for switch in ("off", "on"):  # "on": the kernel at every size (auto: from 2**24 MACs)
        jaxwarp.config.update("gemm_fused_kernel", switch)
        jax.clear_caches()
        for (fmt, M, N, K, kind, with_c, ins), (a, b, c) in zip(cases, inputs, strict=True):
            name = f"{fmt}_{M}x{N}x{K}_{kind}{'_C' if with_c else ''}_{ins}"
            if time.perf_counter() - T0 > budget:
                results.setdefault(name, {})[switch] = "skipped: out of time"
                continue
            try:
                t = time.perf_counter()
                d = jax.block_until_ready(jaxwarp.matmul(
                    a, b, c, operand_format=_operand_format(fmt), mode="exact",
                    instruction=ins))
                results.setdefault(name, {})[switch] = np.asarray(d).view(np.uint32)
                log(f"bits {switch:4s} {name}: {time.perf_counter() - t:.1f} s")
            except Exception as e:  # noqa: BLE001
                traceback.print_exc()
                results.setdefault(name, {})[switch] = repr(e)[:400]
    jaxwarp.config.update("gemm_fused_kernel", "auto")
    jax.clear_caches()
    out = {}
    for name, r in results.items():
        ref, got = r.get("off"), r.get("on")
        if isinstance(ref, np.ndarray) and isinstance(got, np.ndarray):
            bad = np.argwhere(ref != got)
            out[name] = {"equal": int(ref.size - len(bad)), "total": int(ref.size)}
            if len(bad):
                i = tuple(bad[0])
                out[name]["first"] = [list(map(int, i)), hex(ref[i]), hex(got[i])]
        else:
            out[name] = {"error": [x if isinstance(x, str) else "ok" for x in (ref, got)]}
        log("bits", name, out[name])
    return out


VARIANTS = {  # name: (fmt, block, warps, finite, form, rounding, fp32 operands)
    "bf16_32x32_w4": ("bf16", (32, 32), 4, True, "unrolled", "float", False),
    "bf16_32x32_w4_split": ("bf16", (32, 32), 4, True, "split", "float", False),
    "bf16_32x32_w4_split_f32": ("bf16", (32, 32), 4, True, "split", "float", True),
    "bf16_64x32_w8_split_f32": ("bf16", (64, 32), 8, True, "split", "float", True),
    "bf16_64x32_w4_split_f32": ("bf16", (64, 32), 4, True, "split", "float", True),
    "bf16_32x32_w8_split_f32": ("bf16", (32, 32), 8, True, "split", "float", True),
    "bf16_32x16_w2_split_f32": ("bf16", (32, 16), 2, True, "split", "float", True),
    "bf16_16x32_w2_split_f32": ("bf16", (16, 32), 2, True, "split", "float", True),
    "bf16_32x32_w4_reduce": ("bf16", (32, 32), 4, True, "reduce", "float", False),
    "bf16_32x32_w4_int": ("bf16", (32, 32), 4, True, "unrolled", "int", False),
    "f16_32x32_w4": ("f16", (32, 32), 4, True, "unrolled", "float", False),
    "f16_32x32_w4_split_f32": ("f16", (32, 32), 4, True, "split", "float", True),
    "f16_32x32_w4_split_f32_specials": ("f16", (32, 32), 4, False, "split", "float", True),
    # A loop over a step's products, u written out per iteration (Plan.unroll, what
    # chain takes for small products): the run time it costs.
    **{f"bf16_32x32_w4_split_f32_u{u}": ("bf16", (32, 32), 4, True, "split", "float", True)
       for u in (1, 2, 4, 8)},
    "f16_32x32_w4_split_f32_u4": ("f16", (32, 32), 4, True, "split", "float", True),
    # tf32 (timed with --formats tf32): WMMA's blocks of 4, in range and any value
    "tf32_32x32_w4_split_f32": ("tf32", (32, 32), 4, True, "split", "float", True),
    "tf32_32x32_w4_general": ("tf32", (32, 32), 4, False, "general", "float", False),
    # The kernel for bf16 operands of any value (what small bf16 products run, with no
    # range check or cond), and f16 with the IEEE sum of products (small f16 products).
    "bf16_32x32_w4_general": ("bf16", (32, 32), 4, False, "general", "float", False),
    "bf16_32x32_w4_general_u4": ("bf16", (32, 32), 4, False, "general", "float", False),
    "f16_32x32_w4_split_f32_specials_u4": ("f16", (32, 32), 4, False, "split", "float",
                                           True),
    # A probe, not a kernel: the conversions (fp32 -> int32) replaced by bitcasts (wrong
    # bits): how much of the time the conversion pipe takes.
    "bf16_32x32_w4_split_f32_probe_noconv": ("bf16", (32, 32), 4, True, "split", "float",
                                             True),
    # fp8 (sm_90 wgmma, k = 32; timed with --formats, or named by --variants): the kernel
    # chain runs for finite operands, with the IEEE sum of the products (NaN / inf), a
    # loop over a step's products, other tiles; e4m3e5m2: A e4m3, B e5m2.
    **{f"{f}_32x32_w4_split_f32": (f, (32, 32), 4, True, "split", "float", True)
       for f in FP8},
    **{f"{f}_32x32_w4_split_f32_specials": (f, (32, 32), 4, False, "split", "float", True)
       for f in FP8},
    "e4m3_32x32_w4_split_f32_u8": ("e4m3", (32, 32), 4, True, "split", "float", True),
    "e4m3_64x32_w8_split_f32": ("e4m3", (64, 32), 8, True, "split", "float", True),
    "e4m3_32x32_w4_unrolled": ("e4m3", (32, 32), 4, True, "unrolled", "float", False),
}


def _unroll(name: str, ik: int) -> int:
    """Plan.unroll of a variant: its suffix ``_uN``, else its datapath's block ``ik``."""
    m = re.search(r"_u(\d+)$", name)
    return int(m.group(1)) if m else ik


def _shape(text: str) -> tuple[int, int, int]:
    """``--shape``: three positive integers M,N,K, K a multiple of 16."""
    try:
        M, N, K = (int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected M,N,K, three integers") from None
    if min(M, N, K) < 1 or K % 16:
        raise argparse.ArgumentTypeError(f"{text!r}: M, N, K must be positive and K a "
                                         "multiple of 16 (the instruction's k)")
    return M, N, K


def part_timing(dry: bool, budget: float, only: list[str] | None = None,
                shape: tuple[int, int, int] | None = None,
                formats=("bf16", "f16")) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np

    import jaxwarp
    from jaxwarp import backends

    M, N, K = shape or ((64,) * 3 if dry else (4096,) * 3)
    rng = np.random.default_rng(1)
    selected = {name: v for name, v in VARIANTS.items()
                if (name in only if only else v[0] in formats)}
    # the baselines: every format of --formats and of the variants timed
    fmts = list(dict.fromkeys([*formats, *(v[0] for v in selected.values())]))
    ops = {}
    for fmt in fmts:
        da, db = _dtypes(fmt)
        x, y = rng.standard_normal((M, K)), rng.standard_normal((K, N))
        if fmt == "tf32":  # tf32 values, as matmul's conversion gives the kernel
            x, y = ((v.astype(np.float32).view(np.uint32) & 0xFFFFE000).view(np.float32)
                    for v in (x, y))
        ops[fmt] = (jnp.asarray(x, da), jnp.asarray(y, db),
                    jnp.asarray(rng.standard_normal((M, N)), jnp.float32))
    fns = {}
    for name, (fmt, block, warps, finite, form, rounding, f32) in selected.items():
        dp = _datapath(fmt)
        unroll = _unroll(name, dp.block_k)
        fa, fb = FORMATS[fmt]
        fns[name] = jax.jit(lambda a, b, c, dp=dp, fa=fa, fb=fb, block=block, warps=warps,
                            finite=finite, form=form, rounding=rounding, f32=f32,
                            unroll=unroll:
                            backends.fused_chain(a, b, c, dp, fa, finite=finite, block=block,
                                               num_warps=warps, interpret=dry, form=form,
                                               rounding=rounding, f32_operands=f32,
                                               unroll=unroll, b_fmt=fb))
    jaxwarp.config.update("gemm_fused_kernel", "off")
    jax.clear_caches()
    for fmt in fmts:
        fns[f"{fmt}_xla_exact"] = jax.jit(lambda a, b, c, fmt=fmt: jaxwarp.matmul(
            a, b, c, operand_format=_operand_format(fmt), mode="exact"))
        fns[f"{fmt}_jnp_matmul"] = jax.jit(lambda a, b, c: jnp.matmul(
            a, b, preferred_element_type=jnp.float32) + c)
    ready, first = {}, {}
    for name, fn in fns.items():  # compile, warm up, check against the XLA exact path
        fmt = name.split("_")[0]
        try:
            t = time.perf_counter()
            if "probe_noconv" in name:  # traced with bitcasts for the conversions
                with backends.fused_conversions_as_bitcasts():
                    ready[name] = jax.block_until_ready(fn(*ops[fmt]))
            else:
                ready[name] = jax.block_until_ready(fn(*ops[fmt]))
            first[name] = time.perf_counter() - t
            log(f"timing: {name} compiled and ran in {first[name]:.1f} s")
        except Exception:  # noqa: BLE001
            traceback.print_exc()
    jaxwarp.config.update("gemm_fused_kernel", "auto")
    times: dict[str, list[float]] = {k: [] for k in ready}
    rounds = 0
    while rounds < 2 or (rounds < 5 and time.perf_counter() - T0 < budget):
        for name in ready:  # interleaved: every variant once per round
            fmt = name.split("_")[0]
            t = time.perf_counter()
            jax.block_until_ready(fns[name](*ops[fmt]))
            times[name].append(time.perf_counter() - t)
        rounds += 1
    out = {"shape": [M, N, K], "rounds": rounds, "variants": {}}
    flop = 2.0 * M * N * K
    for name, ts in times.items():
        fmt = name.split("_")[0]
        best = min(ts) if ts else None
        row = {"first_call_s": round(first[name], 3), "times_s": [round(t, 5) for t in ts]}
        if best:
            row["best_s"] = round(best, 5)
            row["tflops"] = round(flop / best / 1e12, 3)
        ref = ready.get(f"{fmt}_xla_exact")
        if ref is not None and "jnp" not in name:
            row["bits_equal_xla_exact"] = int((np.asarray(ref).view(np.uint32)
                                               == np.asarray(ready[name]).view(np.uint32)).sum())
            row["bits_total"] = int(ready[name].size)
        out["variants"][name] = row
    for name, row in out["variants"].items():
        fmt = name.split("_")[0]
        for base in ("xla_exact", "jnp_matmul"):
            b = out["variants"].get(f"{fmt}_{base}", {}).get("best_s")
            if b and row.get("best_s"):
                row[f"speed_vs_{base}"] = round(b / row["best_s"], 3)
        log("timing", name, {k: v for k, v in row.items() if k != "times_s"})
    return out


def part_ptx(out_dir: pathlib.Path) -> dict:
    """A child process compiles one small kernel with XLA's dump on; PTX opcodes counted."""
    dump = pathlib.Path(tempfile.mkdtemp())
    env = dict(os.environ, XLA_FLAGS=f"--xla_dump_to={dump}")
    code = ("import jax, jax.numpy as jnp, jaxwarp; from jaxwarp import backends; "
            "dp = jaxwarp.datapath_for('sm_90', 'wmma', 'bf16', 16); "
            "a = jnp.ones((64, 64), jnp.bfloat16); "
            "jax.block_until_ready(jax.jit(lambda a, b, c: backends.fused_chain(a, b, c, dp, "
            "'bf16', finite=True))(a, a, jnp.ones((64, 64))))")
    r = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, timeout=60,
                       capture_output=True, text=True)
    out: dict = {"rc": r.returncode, "stderr_tail": r.stderr[-1500:]}
    for f in sorted(dump.rglob("*")) if dump.exists() else []:
        text = f.read_text(errors="replace") if f.is_file() else ""
        if "fused_exact" not in text or ".target" not in text:
            continue
        counts: dict[str, int] = {}
        for m in re.finditer(r"^\s+(?:@%p\d+\s+)?([a-z][\w.]*)", text, re.M):
            counts[m.group(1)] = counts.get(m.group(1), 0) + 1
        out[f.name] = dict(sorted(counts.items(), key=lambda kv: -kv[1]))
        (out_dir / "fused_kernel.ptx").write_text(text)
        log("ptx", f.name, out[f.name])
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--dry", action="store_true")
    ap.add_argument("--ptx", action="store_true")
    ap.add_argument("--budget", type=float, default=200.0)
    ap.add_argument("--variants", default=None,
                    help="comma-separated names of VARIANTS to time (default: all)")
    ap.add_argument("--shape", default=None, type=_shape, metavar="M,N,K",
                    help="the timing part's product (default 4096,4096,4096)")
    ap.add_argument("--parts", default="timing,bits", help="timing, bits (and --ptx)")
    ap.add_argument("--formats", default="bf16,f16",
                    help=f"comma-separated operand formats of both parts: {', '.join(FORMATS)}")
    args = ap.parse_args()
    out_dir = pathlib.Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    import jax
    import jaxlib
    res = {"device": str(jax.devices()[0]), "device_kind": jax.devices()[0].device_kind,
           "jax": jax.__version__, "jaxlib": jaxlib.__version__,
           "python": platform.python_version(), "dry": args.dry}
    log(res)
    path = out_dir / "fused_kernel_check.json"
    only = args.variants.split(",") if args.variants else None
    unknown = sorted(set(only or ()) - set(VARIANTS))
    if unknown:
        raise SystemExit(f"--variants: unknown {unknown}; VARIANTS has {sorted(VARIANTS)}")
    formats = args.formats.split(",")
    if not set(formats) <= set(FORMATS):
        raise SystemExit(f"--formats: {args.formats!r}; allowed: {', '.join(FORMATS)}")
    parts = args.parts.split(",")
    if not set(parts) <= {"timing", "bits", "ptx"}:
        raise SystemExit(f"--parts: {args.parts!r}; allowed: timing, bits, ptx")
    for name, fn in (("timing", lambda: part_timing(args.dry, args.budget * 0.6, only,
                                                    args.shape, formats)),
                     ("bits", lambda: part_bits(args.dry, args.budget, formats)),
                     ("ptx", lambda: part_ptx(out_dir))):
        if name not in parts and not (name == "ptx" and args.ptx):
            continue
        try:
            res[name] = fn()
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            res[name] = {"error": repr(e)[:1000]}
        path.write_text(json.dumps(res, indent=1, default=str))
    log("wrote", path)


if __name__ == "__main__":
    main()
