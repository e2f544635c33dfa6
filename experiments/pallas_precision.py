"""Study: how the accumulation error of Pallas matmul kernels on Hopper grows with K.

The kernels run under ``jaxwarp.emulate(..., arch="sm_90a")``, so every product in them
is the tensor-core instruction chain their compiler issues on an H100:

* ``triton bf16``: ``jaxwarp.kernels.triton_matmul`` (Triton-style, block 64x64x128,
  4 warps: bf16 ``wgmma`` chained over K through the fp32 accumulator),
* ``triton e4m3``: the same kernel on e4m3 operands (Triton's fp8 dot on sm_90, as
  jaxwarp models it: the operands converted to f16 and f16 ``mma.sync``),
* ``triton e4m3 promote128``: that kernel with ``promote_every=128`` (partial sums
  promoted to fp32 every 128 k),
* ``mgpu bf16``: JAX's Mosaic GPU ``hopper_matmul_mgpu`` (bf16 ``wgmma``, fp32
  accumulator, f32 output through an f32 C of zeros), where this jaxwarp can enter it,
* and for comparison ``matmul e4m3 wgmma`` / ``... promote128``: ``jaxwarp.matmul`` with
  the fp8 ``wgmma`` (its 14-bit accumulation, DeepSeek-V3 section 3.3.2), which the
  Triton-style kernel does not issue.

The error is the accumulation's, not the quantisation's: operands are values of their
format and the reference is the exact (float64) product of the *same* operands. Per
output element ``|D - R| / (|A| @ |B|)``; the median and the max over every element of
every trial. Inputs: ``uniform`` (U[0, 1), all positive: rounding errors add up) and
``normal`` (N(0, 1)). A series whose kernel this jaxwarp cannot enter is left out (said
so on stderr).

Writes ``pallas_precision.csv`` and ``pallas_precision.png`` to ``--out`` (default
``experiments/results/``) and prints a Markdown table.

Usage:
    python experiments/pallas_precision.py               # K 256..8192, 3 trials of 128x128
    python experiments/pallas_precision.py --quick       # K 256 and 1024, 1 trial
    python experiments/pallas_precision.py --series "triton bf16,triton e4m3" --out DIR
"""

from __future__ import annotations

import argparse
import functools
import sys

import _study_utils as su
import jax
import jax.numpy as jnp
import numpy as np
from tqdm import tqdm

import jaxwarp

#: (label, operand dtype, how it runs, promote_every)
SERIES = (("triton bf16", "bfloat16", "triton", None),
          ("triton e4m3", "float8_e4m3fn", "triton", None),
          ("triton e4m3 promote128", "float8_e4m3fn", "triton", 128),
          ("mgpu bf16", "bfloat16", "mgpu", None),
          ("matmul e4m3 wgmma", "float8_e4m3fn", "matmul", None),
          ("matmul e4m3 wgmma promote128", "float8_e4m3fn", "matmul", 128))
DISTS = ("uniform", "normal")
COLUMNS = ("dist", "series", "dtype", "kernel", "promote_every", "K", "M", "N", "elements",
           "median_rel_err", "max_rel_err", "mean_rel_err")
DEFAULT = dict(trials=3, m=128, n=128, ks=(256, 512, 1024, 2048, 4096, 8192))
QUICK = dict(trials=1, m=128, n=128, ks=(256, 1024))
#: The Triton-style kernel's block and warps (wgmma for bf16: 4 warps, M % 64 == 0).
BLOCK, WARPS = (64, 64, 128), 4


def sample(rng: np.random.Generator, dist: str, dtype: str, m: int, k: int, n: int):
    """(a, b) of ``dtype`` (values of the format, drawn as float64 and rounded once)."""
    draw = (lambda s: rng.uniform(0, 1, s)) if dist == "uniform" else rng.standard_normal
    return (jnp.asarray(np.asarray(draw(s), np.float32)).astype(dtype)
            for s in ((m, k), (k, n)))


def rel_errors(d, a, b) -> np.ndarray:
    """``|D - R| / (|A| @ |B|)`` per element, R the exact float64 product of a and b."""
    a64, b64 = (np.asarray(x.astype(jnp.float32), np.float64) for x in (a, b))
    r, den = a64 @ b64, np.abs(a64) @ np.abs(b64)
    return (np.abs(np.asarray(d, np.float64) - r) / den).ravel()


def runner(kind: str, promote: int | None):
    """The series' function of (a, b) -> f32 (M, N), jitted under ``emulate``."""
    if kind == "triton":
        from jaxwarp.kernels import triton_matmul

        fn = functools.partial(triton_matmul, block=BLOCK, num_warps=WARPS)
        return jaxwarp.emulate(fn, operand_format=None, arch="sm_90a", promote_every=promote)
    if kind == "mgpu":
        from jax.experimental.pallas.ops.gpu import hopper_matmul_mgpu as hm

        config = hm.TuningConfig(tile_m=64, tile_n=64, tile_k=64, max_concurrent_steps=2)

        def mgpu(a, b):  # an f32 C of zeros: the f32 accumulator comes out unrounded
            return hm.matmul(a, b, jnp.zeros((a.shape[0], b.shape[1]), jnp.float32), config)

        emulated = jaxwarp.emulate(mgpu, operand_format="bf16", arch="sm_90a")

        def run_on_a_small_gpu(a, b):  # the kernel's grid is the SM count; no bit depends on it
            from jaxwarp.kernels import target_sm_count

            with target_sm_count(2):
                return emulated(a, b)

        return run_on_a_small_gpu
    return jax.jit(lambda a, b: jaxwarp.matmul(a, b, operand_format="e4m3",
                                               instruction="wgmma", promote_every=promote))


def run(cfg: dict, seed: int, progress: bool, series=SERIES, dists=DISTS) -> list[dict]:
    rng = np.random.default_rng(seed)
    fns, rows, dropped = {}, [], set()
    todo = [(d, K) for d in dists for K in cfg["ks"]]
    for dist, K in tqdm(todo, desc="pallas precision", disable=not progress, file=sys.stderr):
        for label, dtype, kind, promote in series:
            if label in dropped:
                continue
            errs = []
            for _ in range(cfg["trials"]):
                a, b = sample(rng, dist, dtype, cfg["m"], K, cfg["n"])
                try:
                    if label not in fns:
                        fns[label] = runner(kind, promote)
                    d = fns[label](a, b)
                except (ImportError, NotImplementedError, ValueError, AttributeError) as e:
                    print(f"note: {label!r} left out: this jaxwarp / JAX cannot run it "
                          f"({type(e).__name__}: {str(e)[:200]})", file=sys.stderr)
                    dropped.add(label)
                    break
                errs.append(rel_errors(d, a, b))
            if label in dropped:
                continue
            e = np.concatenate(errs)
            rows.append(dict(dist=dist, series=label, dtype=dtype, kernel=kind,
                             promote_every=promote or "", K=K, M=cfg["m"], N=cfg["n"],
                             elements=e.size, median_rel_err=float(np.median(e)),
                             max_rel_err=float(np.max(e)), mean_rel_err=float(np.mean(e))))
    return rows


#: Where an error of exactly 0 is drawn on the log scale.
FLOOR = 1e-10


def plot(rows: list[dict], path) -> None:
    plt = su.pyplot()
    fig, axes = plt.subplots(1, len(DISTS), figsize=(13, 4.4), sharey=True)
    for ax, dist in zip(axes, DISTS, strict=True):
        for label, *_ in SERIES:
            rs = [r for r in rows if r["dist"] == dist and r["series"] == label]
            if not rs:
                continue
            ks = [r["K"] for r in rs]
            line, = ax.plot(ks, [max(r["max_rel_err"], FLOOR) for r in rs], "o-",
                            label=f"{label} max" if ax is axes[0] else None)
            ax.plot(ks, [max(r["median_rel_err"], FLOOR) for r in rs], "o--",
                    color=line.get_color(), alpha=0.6,
                    label=f"{label} median" if ax is axes[0] else None)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("K")
        ax.set_title(f"Pallas kernels on the emulated H100, {dist} inputs", fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel(f"|D - exact| / (|A| @ |B|)  (0 drawn at {FLOOR:.0e})")
    fig.legend(fontsize=7, loc="center right")
    fig.tight_layout(rect=(0, 0, 0.8, 1))
    su.save_png(fig, path)
    plt.close(fig)


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="K 256 and 1024, 1 trial (default: K 256..8192, 3 trials of 128x128)")
    p.add_argument("--trials", type=su.int_at_least(1),
                   help="random (128 x K) @ (K x 128) products per point (overrides the preset)")
    p.add_argument("--ks", metavar="K,K,...",
                   help="comma-separated K values (multiples of 128; overrides the preset)")
    p.add_argument("--series", metavar="NAME,...",
                   help=f"comma-separated subset of {[s[0] for s in SERIES]} (default: all)")
    su.add_common_options(p)
    p.set_defaults(out=str(su.ROOT / "experiments" / "results"))
    args = p.parse_args(argv)
    cfg = dict(QUICK if args.quick else DEFAULT)
    if args.trials:
        cfg["trials"] = args.trials
    if args.ks:
        cfg["ks"] = su.parse_ks(p, args.ks, multiple=128)
    series = su.pick_series(p, args.series, SERIES)
    print(su.run_header(argv))
    rows = run(cfg, args.seed, not args.no_progress, series)
    out = su.out_dir(args.out)
    su.write_csv(out / "pallas_precision.csv", rows, COLUMNS)
    plot(rows, out / "pallas_precision.png")
    print(su.markdown_table(
        ["dist", "series", "K", "elements", "median", "max"],
        [[r["dist"], r["series"], r["K"], r["elements"], f"{r['median_rel_err']:.2e}",
          f"{r['max_rel_err']:.2e}"] for r in rows]))
    print(f"wrote {out / 'pallas_precision.csv'} and {out / 'pallas_precision.png'}")
    return rows


if __name__ == "__main__":
    main()
