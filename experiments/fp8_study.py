"""Study: the accumulation error of fp8 GEMMs on Hopper, with and without promotion.

DeepSeek-V3 (arXiv 2412.19437, section 3.3.2) reports that the fp8 GEMM of the H800
keeps only about 14 bits in its accumulation, so that with K = 4096 the maximum
relative error is near 2% without their fix: promoting the tensor core's partial
sums to fp32 CUDA-core registers every 128 k-elements (``promote_every=128``).

This study measures that error on the emulated H100 tensor core, for

* ``wgmma`` e4m3 (m64n8k32; one fused block of 32 products and C per instruction, 13
  alignment bits, the sum cut to a 14-bit significand), and
* ``mma_sync`` e4m3 (m16n8k32; on sm_90 two f16 HMMAs from zero and an fp32 FADD),

each without promotion and with ``promote_every=128``. The error is the
accumulator's, not the quantisation's: operands are e4m3 values (fp32 inputs
converted once) and the reference is the exact (float64) sum of the *same* fp8
operands. Per output element: ``|D - R| / (|A| @ |B|)`` (for the all-positive
inputs that is ``|D - R| / |R|``); median and max over all elements of all trials.
Inputs: ``uniform`` (U[0, 1), all positive, as the worst case DeepSeek describes:
truncation errors add up) and ``normal`` (N(0, 1)).

"measured on the H100 itself": the same metric from the hardware chains in
``--captures`` (``wgmma/wgmma_chain.npz``, ``ptx/ptx_chain.npz``; K = 4096 chains
of e4m3 x e4m3 with a random C: ``R = A @ B + C`` exactly and the denominator
``|A| @ |B| + |C|``); series missing from the captures are skipped (said so on stderr).

Writes ``fp8_study.csv`` and ``fp8_study.png`` to ``--out`` (default
``experiments/results/``) and prints a Markdown table.

Usage:
    python experiments/fp8_study.py                  # CPU default: K 128..4096, 1 trial
    python experiments/fp8_study.py --large          # K to 16384, 8 trials
    python experiments/fp8_study.py --captures CAPTURES_DIR --out OUT_DIR
    python experiments/fp8_study.py --large --devices all   # the trials over every GPU

The trials of a point are one batch (``jaxwarp.sharded_vmap``), sharded over
``--devices`` devices (default 1; ``all``: every device; the same numbers on any
count).
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import _study_utils as su
import jax.numpy as jnp
import numpy as np
from tqdm import tqdm

import jaxwarp

#: (label, instruction, promote_every)
SERIES = (("wgmma", "wgmma", None), ("wgmma promote128", "wgmma", 128),
          ("mma_sync", "mma_sync", None), ("mma_sync promote128", "mma_sync", 128))
DISTS = ("uniform", "normal")
COLUMNS = ("source", "dist", "series", "instruction", "promote_every", "K", "M", "N",
           "elements", "median_rel_err", "max_rel_err", "mean_rel_err")
DEEPSEEK_MAX_REL_ERR_K4096 = 0.02  # "nearly 2%" (section 3.3.2)
DEEPSEEK_BITS = 14

DEFAULT = dict(trials=1, m=64, n=8, ks=(128, 256, 512, 1024, 2048, 4096))
LARGE = dict(trials=8, m=64, n=8, ks=(128, 256, 512, 1024, 2048, 4096, 8192, 16384))
_CHAINS = (("wgmma", "wgmma/wgmma_chain.npz", "chain/wgmma/e4m3.e4m3.f32f32.m64n8k32x128"),
           ("mma_sync", "ptx/ptx_chain.npz", "chain/ptx/e4m3.e4m3.f32f32.m16n8k32x128"))
_KIND_DIST = {"positive": "uniform", "normal": "normal"}


def sample(rng: np.random.Generator, dist: str, m: int, k: int, n: int):
    """fp32 matrices (m, k), (k, n) whose values are e4m3 values."""
    draw = (lambda s: rng.uniform(0, 1, s)) if dist == "uniform" else rng.standard_normal
    a = np.asarray(draw((m, k)), np.float32)
    b = np.asarray(draw((k, n)), np.float32)
    q = [np.asarray(jaxwarp.to_operand(jnp.asarray(x), "e4m3"),
                    np.float32) for x in (a, b)]
    return q[0], q[1]


def rel_errors(d: np.ndarray, a: np.ndarray, b: np.ndarray, c: np.ndarray | None = None):
    """``|D - R| / (|A| @ |B| + |C|)`` per element, R the exact float64 result."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    r = a64 @ b64
    den = np.abs(a64) @ np.abs(b64)
    if c is not None:
        r, den = r + c.astype(np.float64), den + np.abs(c.astype(np.float64))
    return (np.abs(d.astype(np.float64) - r) / den).ravel()


def _row(source, dist, label, instr, promote, K, M, N, errs):
    return dict(source=source, dist=dist, series=label, instruction=instr,
                promote_every=promote or "", K=K, M=M, N=N, elements=errs.size,
                median_rel_err=float(np.median(errs)), max_rel_err=float(np.max(errs)),
                mean_rel_err=float(np.mean(errs)))


def model_rows(cfg: dict, seed: int, progress: bool, series=SERIES, dists=DISTS,
               devices=None) -> list[dict]:
    """The model's series: per point, the trials sharded over ``devices`` (default:
    every device)."""
    rng = np.random.default_rng(seed)
    fns = {(ins, p): jaxwarp.sharded_vmap(lambda a, b, ins=ins, p=p: jaxwarp.matmul(
        a, b, operand_format="e4m3", instruction=ins, promote_every=p), devices=devices)
        for _, ins, p in series}
    rows = []
    todo = [(d, K) for d in dists for K in cfg["ks"]]
    for dist, K in tqdm(todo, desc="fp8 study", disable=not progress, file=sys.stderr):
        pairs = [sample(rng, dist, cfg["m"], K, cfg["n"]) for _ in range(cfg["trials"])]
        a_all, b_all = np.stack([a for a, _ in pairs]), np.stack([b for _, b in pairs])
        for label, ins, p in series:
            d_all = np.asarray(fns[ins, p](a_all, b_all))
            errs = np.concatenate([rel_errors(d, a, b)
                                   for d, (a, b) in zip(d_all, pairs, strict=True)])
            rows.append(_row("model", dist, label, ins, p, K, cfg["m"], cfg["n"], errs))
    return rows


def hardware_rows(captures: pathlib.Path) -> list[dict]:
    """The metric on the H100's own K = 4096 chains (C included)."""
    rows = []
    for instr, rel, key in _CHAINS:
        path = captures / rel
        if not path.exists():
            print(f"note: {path} not found: skipping the hardware {instr} series",
                  file=sys.stderr)
            continue
        z = np.load(path)
        if key + "/A" not in z.files:
            print(f"note: {key} not in {path}: skipping", file=sys.stderr)
            continue
        e4m3 = jnp.float8_e4m3fn
        A = z[key + "/A"].view(e4m3).astype(np.float32)
        B = z[key + "/B"].view(e4m3).astype(np.float32)
        C, D = z[key + "/C"].view(np.float32), z[key + "/D"].view(np.float32)
        kinds = z[key + "/kind"]
        for kind, dist in _KIND_DIST.items():
            sel = np.flatnonzero(kinds == kind)
            if not sel.size:
                continue
            errs = np.concatenate([rel_errors(D[t], A[t], B[t], C[t]) for t in sel])
            rows.append(_row("hardware", dist, f"{instr} H100", instr, None, A.shape[2],
                             A.shape[1], B.shape[2], errs))
    return rows


def plot(rows: list[dict], path: pathlib.Path) -> None:
    plt = su.pyplot()
    fig, axes = plt.subplots(1, len(DISTS), figsize=(11, 4.2), sharey=True)
    for ax, dist in zip(axes, DISTS, strict=True):
        for label, _, _ in SERIES:
            rs = [r for r in rows if r["source"] == "model" and r["dist"] == dist
                  and r["series"] == label]
            if not rs:
                continue
            ks = [r["K"] for r in rs]
            line, = ax.plot(ks, [r["max_rel_err"] for r in rs], "o-", label=f"{label} max")
            ax.plot(ks, [r["median_rel_err"] for r in rs], "o--", color=line.get_color(),
                    alpha=0.6, label=f"{label} median")
        for r in rows:
            if r["source"] == "hardware" and r["dist"] == dist:
                ax.plot([r["K"]], [r["max_rel_err"]], "k*", ms=11)
                ax.annotate(r["series"], (r["K"], r["max_rel_err"]), fontsize=7,
                            xytext=(-60, 6), textcoords="offset points")
        ax.plot([4096], [DEEPSEEK_MAX_REL_ERR_K4096], "rX", ms=10,
                label="DeepSeek-V3: ~2% at K=4096")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("K")
        ax.set_title(f"e4m3 GEMM accumulation error, {dist} inputs")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("|D - exact| / (|A| @ |B|)")
    axes[-1].legend(fontsize=6, loc="lower right")
    fig.tight_layout()
    su.save_png(fig, path)
    plt.close(fig)


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--large", action="store_true",
                   help="K up to 16384 and 8 trials (default: K 128..4096, 1 trial of 64x8)")
    p.add_argument("--trials", type=su.int_at_least(1),
                   help="random (64 x K) @ (K x 8) products per point (overrides the preset)")
    p.add_argument("--kmax", type=su.int_at_least(128, 128),
                   help="largest K (a multiple of 128; overrides the preset)")
    p.add_argument("--ks", metavar="K,K,...",
                   help="comma-separated K values (multiples of 128; overrides the preset)")
    p.add_argument("--series", metavar="NAME,...",
                   help=f"comma-separated subset of {[s[0] for s in SERIES]} (default: all)")
    p.add_argument("--captures", metavar="DIR", default=None,
                   help="folder with wgmma/wgmma_chain.npz and ptx/ptx_chain.npz, as "
                        "tools/capture/capture_all.sh writes it: adds the H100's own chains "
                        "as hardware series (default: none, model series only)")
    su.add_common_options(p)
    su.add_devices_option(p)
    p.set_defaults(out=str(su.ROOT / "experiments" / "results"))
    args = p.parse_args(argv)
    devices = su.pick_devices(args.devices)
    cfg = dict(LARGE if args.large else DEFAULT)
    if args.trials:
        cfg["trials"] = args.trials
    if args.kmax:
        cfg["ks"] = tuple(k for k in (*cfg["ks"], *(2 ** i for i in range(15))) if
                          128 <= k <= args.kmax)
        cfg["ks"] = tuple(sorted(set(cfg["ks"])))
    if args.ks:
        cfg["ks"] = su.parse_ks(p, args.ks, multiple=128)
    series = su.pick_series(p, args.series, SERIES)
    print(su.run_header(argv, devices))
    rows = model_rows(cfg, args.seed, not args.no_progress, series, devices=devices)
    if args.captures is None:
        print("no --captures folder: the hardware series are left out "
              "(record them with tools/capture/capture_all.sh on an sm_90 GPU)")
    else:
        rows += hardware_rows(pathlib.Path(args.captures))
    out = su.out_dir(args.out)
    su.write_csv(out / "fp8_study.csv", rows, COLUMNS)
    plot(rows, out / "fp8_study.png")
    print(su.markdown_table(
        ["source", "dist", "series", "K", "elements", "median", "max"],
        [[r["source"], r["dist"], r["series"], r["K"], r["elements"],
          f"{r['median_rel_err']:.2e}", f"{r['max_rel_err']:.2e}"] for r in rows]))
    print(f"\nDeepSeek-V3 (H800): ~{DEEPSEEK_BITS} bits kept, max relative error ~2% at "
          f"K=4096 without promotion; 2**-{DEEPSEEK_BITS} = {2.0 ** -DEEPSEEK_BITS:.1e}")
    print(f"wrote {out / 'fp8_study.csv'} and {out / 'fp8_study.png'}")
    return rows


if __name__ == "__main__":
    main()
