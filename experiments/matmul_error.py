"""Study 1: how accurate is a tensor-core matrix product as K grows?

For random (M x K) @ (K x N) products with K from 16 up, this measures the relative
error against float64 of

* ``matmul(..., mode="exact")``: the WMMA GEMM through the emulated H100 tensor
  core (fp16, bf16 or tf32 operands, fp32 accumulator): products aligned to the
  block's largest exponent and truncated, each block's sum rounded toward zero;
* ``matmul(..., mode="fast")``: the same tiled product with the same operand
  rounding, accumulated in fp32 with round-to-nearest (``dot_general``);
* ``fp32``: ``jnp.matmul`` in float32 with ``precision=HIGHEST`` (no operand rounding).

Two errors per matrix, both ``||D - R||_F / ||R||_F``:

* total: R is the float64 product of the fp32 inputs (what a user sees);
* accumulation: R is the float64 product of the *converted* operands (f16, bf16,
  tf32 values), so only the accumulation's error is left.

plus the signed bias ``sum(D - R) / sum(|R|)`` (the accumulation's), which shows the
truncation toward zero when all products are positive.

Many random matrices per point are vmapped, and that batch axis is sharded over
``--devices`` devices (``jaxwarp`` ``sharded_vmap``; default 1, ``all``: every
device; the numbers are the same on any count). Inputs: ``normal`` (N(0, 1)) and
``uniform`` (U[0, 1), all positive: truncation errors add up instead of cancelling).

Writes ``matmul_error.csv`` and ``matmul_error.png`` to ``--out`` (default
``experiments/out/``) and prints Markdown tables of the medians.

Usage:
    python experiments/matmul_error.py                 # CPU default: 512 matrices, K to 4096
    python experiments/matmul_error.py --large         # GPU: K to 16384, 1024 matrices of 32x32
    python experiments/matmul_error.py --out experiments/results
    python experiments/matmul_error.py --large --devices all  # over every GPU
    python experiments/matmul_error.py --arch gfx942   # exact mode on MI300's MFMA (CDNA3)
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

FORMATS = ("f16", "bf16", "tf32")
#: (label, operand format, mode); fp32 is the plain float32 product.
SERIES = tuple((f"{f} {m}", f, m) for f in FORMATS for m in ("exact", "fast")) + (
    ("fp32", "fp32", "plain"),
)
DISTS = ("normal", "uniform")
COLUMNS = ("dist", "series", "format", "mode", "K", "M", "N", "matrices", "kind",
           "median", "p10", "p90", "mean", "bias_mean")
KINDS = ("total", "accumulation")

DEFAULT = dict(batch=512, mn=16, kmin=16, kmax=4096)
LARGE = dict(batch=1024, mn=32, kmin=16, kmax=16384)


def sample(key: jax.Array, dist: str, m: int, k: int, n: int) -> tuple[jax.Array, jax.Array]:
    """One pair of fp32 matrices ``a`` (m, k), ``b`` (k, n) from ``dist``."""
    ka, kb = jax.random.split(key)
    if dist == "normal":
        draw = functools.partial(jax.random.normal, dtype=jnp.float32)
    elif dist == "uniform":
        draw = functools.partial(jax.random.uniform, dtype=jnp.float32)
    else:
        raise ValueError(f"unknown distribution {dist!r}; allowed: {DISTS}")
    return draw(ka, (m, k)), draw(kb, (k, n))


#: AMD targets (``--arch``): their exact products are ``instruction="mfma"`` chains.
AMD_ARCHS = ("gfx908", "gfx90a", "gfx942")


def series_for(arch: str | None) -> tuple:
    """The series of a target: on an AMD target f16 and bf16 (CDNA3's xf32 converts its
    operands otherwise than tf32, so this study's "accumulation" reference, tf32's
    rounding, would not be its operands), exact and fast; elsewhere ``SERIES``."""
    if arch not in AMD_ARCHS:
        return SERIES
    return tuple((f"{f} {m}", f, m) for f in ("f16", "bf16") for m in ("exact", "fast")) + (
        SERIES[-1],)


def product(a: jax.Array, b: jax.Array, fmt: str, mode: str, arch: str | None = None
            ) -> jax.Array:
    """One matrix product of the series (fp32 result); ``arch``: the target of the exact
    mode (None: the H100's WMMA)."""
    if fmt == "fp32":
        return jnp.matmul(a, b, precision=jax.lax.Precision.HIGHEST)
    if mode == "exact" and arch in AMD_ARCHS:
        return jaxwarp.matmul(a, b, operand_format=fmt, accumulator="f32", mode=mode,
                              instruction="mfma", arch=arch)
    if mode == "exact" and arch is not None:
        return jaxwarp.matmul(a, b, operand_format=fmt, accumulator="f32", mode=mode, arch=arch)
    return jaxwarp.matmul(a, b, operand_format=fmt, accumulator="f32", mode=mode)


def operand(x: jax.Array, fmt: str) -> jax.Array:
    """The values the tensor core multiplies (the fp32 input for plain fp32)."""
    return x if fmt == "fp32" else jaxwarp.to_operand(x, fmt)


def rel_errors(a_ref, b_ref, d) -> jax.Array:
    """``[||D - R||_F / ||R||_F, sum(D - R) / sum|R|]`` with ``R = a_ref @ b_ref`` in float64.

    Must be traced with 64-bit mode on (``jax.enable_x64(True)``).
    """
    r = jnp.matmul(a_ref.astype(jnp.float64), b_ref.astype(jnp.float64),
                   precision=jax.lax.Precision.HIGHEST)
    e = d.astype(jnp.float64) - r
    return jnp.stack([jnp.linalg.norm(e) / jnp.linalg.norm(r), jnp.sum(e) / jnp.sum(jnp.abs(r))])


@functools.cache
def _sharded(name: str, devices: tuple | None, *static):
    """The vmapped kernels sharded over ``devices`` (None: every device), built once so
    that jit caches by shape."""
    sv = functools.partial(jaxwarp.sharded_vmap, devices=devices)
    if name == "sample":
        dist, m, k, n = static
        return sv(lambda key: sample(key, dist, m, k, n))
    if name == "product":
        fmt, mode, arch = static
        return sv(lambda a, b: product(a, b, fmt, mode, arch))
    if name == "operand":
        (fmt,) = static
        return sv(lambda a, b: (operand(a, fmt), operand(b, fmt)))
    if name == "errors":
        return sv(rel_errors)
    raise KeyError(name)


def measure_point(seed: int, dist: str, k: int, *, batch: int, mn: int, series=SERIES,
                  progress=None, devices=None, arch: str | None = None
                  ) -> dict[tuple[str, str], np.ndarray]:
    """Per-matrix errors of every series at one (dist, K), the matrices sharded over
    ``devices`` (default: every device).

    Returns:
        ``{(label, kind): float64[batch, 2]}`` with columns (relative Frobenius
        error, signed bias), kind ``"total"`` or ``"accumulation"``.
    """
    key = jax.random.fold_in(jax.random.fold_in(jax.random.PRNGKey(seed), DISTS.index(dist)), k)
    keys = jax.random.split(key, batch)
    devs = None if devices is None else tuple(devices)
    a, b = _sharded("sample", devs, dist, mn, k, mn)(keys)
    out = {}
    for label, fmt, mode in series:
        d = _sharded("product", devs, fmt, mode, arch)(a, b)
        a_op, b_op = _sharded("operand", devs, fmt)(a, b) if fmt != "fp32" else (a, b)
        with jax.enable_x64(True):
            out[label, "total"] = np.asarray(_sharded("errors", devs)(a, b, d))
            out[label, "accumulation"] = np.asarray(_sharded("errors", devs)(a_op, b_op, d))
        if progress is not None:
            progress.update(1)
    return out


def summarize(dist: str, k: int, mn: int, errs: dict, series=SERIES) -> list[dict]:
    """CSV rows (one per series and kind) from ``measure_point``'s per-matrix errors."""
    rows = []
    for label, fmt, mode in series:
        for kind in KINDS:
            e = errs[label, kind]
            fro, bias = e[:, 0], e[:, 1]
            p10, med, p90 = np.percentile(fro, [10, 50, 90])
            rows.append(dict(dist=dist, series=label, format=fmt, mode=mode, K=k, M=mn, N=mn,
                             matrices=len(fro), kind=kind, median=f"{med:.4e}",
                             p10=f"{p10:.4e}", p90=f"{p90:.4e}", mean=f"{fro.mean():.4e}",
                             bias_mean=f"{bias.mean():.4e}"))
    return rows


def k_values(kmin: int, kmax: int, factor: int = 2) -> list[int]:
    """``kmin, kmin * factor, ...`` up to ``kmax``."""
    if kmin < 16 or kmin % 16 or kmax < kmin or factor < 2:
        raise ValueError(f"need 16 <= kmin <= kmax, kmin a multiple of 16 and kfactor >= 2; "
                         f"got kmin={kmin}, kmax={kmax}, kfactor={factor}")
    ks = [kmin]
    while ks[-1] * factor <= kmax:
        ks.append(ks[-1] * factor)
    return ks


def run(ks, *, batch: int, mn: int, dists=DISTS, seed: int = 0, series=None,
        progress: bool = True, devices=None, arch: str | None = None) -> list[dict]:
    """Every (dist, K, series) point, sharded over ``devices`` (default: every device),
    exact mode on ``arch`` (None: the H100; series default: ``series_for(arch)``);
    returns the CSV rows."""
    series = series_for(arch) if series is None else series
    rows = []
    with tqdm(total=len(dists) * len(ks) * len(series), desc="matmul error", unit="pt",
              disable=not progress, file=sys.stderr) as bar:
        for dist in dists:
            for k in ks:
                bar.set_postfix(dist=dist, K=k)
                errs = measure_point(seed, dist, k, batch=batch, mn=mn, series=series,
                                     progress=bar, devices=devices, arch=arch)
                rows += summarize(dist, k, mn, errs, series)
    return rows


def tables(rows: list[dict]) -> str:
    """Markdown tables of the median error, one per (dist, kind), K down, series across."""
    labels = list(dict.fromkeys(r["series"] for r in rows))
    parts = []
    for dist in dict.fromkeys(r["dist"] for r in rows):
        for kind in KINDS:
            sel = [r for r in rows if r["dist"] == dist and r["kind"] == kind]
            ks = sorted({r["K"] for r in sel})
            get = {(r["K"], r["series"]): r for r in sel}
            body = [[k, *(f"{float(get[k, s]['median']):.2e}" for s in labels)] for k in ks]
            parts.append(f"median relative error, {kind}, {dist} inputs\n\n"
                         + su.markdown_table(["K", *labels], body))
        sel = [r for r in rows if r["dist"] == dist and r["kind"] == "accumulation"]
        ks = sorted({r["K"] for r in sel})
        get = {(r["K"], r["series"]): r for r in sel}
        body = [[k, *(f"{float(get[k, s]['bias_mean']):+.1e}" for s in labels)] for k in ks]
        parts.append(f"mean signed bias sum(D - R)/sum|R| of the accumulation, {dist} inputs\n\n"
                     + su.markdown_table(["K", *labels], body))
    return "\n\n".join(parts)


_COLORS = {"f16": "C0", "bf16": "C1", "tf32": "C2", "fp32": "k"}
_MARKERS = {"f16": "o", "bf16": "s", "tf32": "^", "fp32": "D"}
#: Shown on the figure: what the series are.
EXPLAIN = ("exact: the H100 tensor core bit for bit (each block of 16 products, 4 for tf32, "
           "aligned and truncated, its fp32 sum rounded toward zero).   fast: the same "
           "operands, one XLA dot with fp32 accumulation\n(round to nearest on a CPU; "
           "the real tensor cores for f16/bf16 on an NVIDIA GPU).   fp32: float32 matmul, no "
           "operand rounding.   Open markers, dashed: fast.   Grey: reference slopes.   "
           "\"a = b\": lines that coincide.")
#: Below the explanation: why the fp32 (and fast) lines flatten on a CPU.
FLATTEN_NOTE = ("On a CPU, fp32 and fast stop growing from K = 2048 on: XLA's CPU dot adds "
                "chunks of 2048 products (each chunk's dot, then the chunk sums), so the "
                "rounding error grows no faster than the result. On an H100 they keep "
                "growing like sqrt(K).")


def _series_style(fmt: str, mode: str) -> dict:
    fast = mode == "fast"
    return dict(color=_COLORS[fmt], marker=_MARKERS[fmt], ls="--" if fast else "-",
                mfc="white" if fast else _COLORS[fmt], ms=5 if fast else 3.5, lw=1.3,
                mew=1.0, zorder=3 if fast else 2)


def _coinciding(curves: dict[str, np.ndarray], rtol: float = 0.05) -> list[list[str]]:
    """Groups of series whose medians agree within ``rtol`` at every K (drawn on top of
    each other, so the panel says so)."""
    groups: list[list[str]] = []
    for label, y in curves.items():
        for g in groups:
            if np.all(np.abs(y / curves[g[0]] - 1) <= rtol):
                g.append(label)
                break
        else:
            groups.append([label])
    return groups


def _group_name(labels: list[str]) -> str:
    """``["f16 exact", "f16 fast", "tf32 exact"]`` -> ``"f16 exact/fast = tf32 exact"``."""
    by_fmt: dict[str, list[str]] = {}
    for label in labels:
        fmt, _, mode = label.partition(" ")
        by_fmt.setdefault(fmt, []).append(mode)
    return " = ".join(f"{f} {'/'.join(m)}".strip() for f, m in by_fmt.items())


def _reference_slopes(k: np.ndarray, curves: dict[str, np.ndarray]) -> list[tuple]:
    """Lines proportional to K and to sqrt(K), both starting at half the lowest
    curve's first point: ``[(label, y)]``."""
    y0 = 0.5 * min(float(c[0]) for c in curves.values())
    return [("∝ K", y0 * (k / k[0])), ("∝ √K", y0 * np.sqrt(k / k[0]))]


def plot(rows: list[dict], path, title: str = "") -> None:
    """Log-log error vs K: rows = distributions, columns = total / accumulation error.

    One line per format and mode (median over the matrices), band = 10-90 percentiles.
    Series that coincide are named together at the right end of the line; grey dotted
    lines show slopes proportional to K and to sqrt(K).
    """
    plt = su.pyplot()
    dists = list(dict.fromkeys(r["dist"] for r in rows))
    labels = list(dict.fromkeys(r["series"] for r in rows))
    fig, axes = plt.subplots(len(dists), 2, figsize=(13, 4.6 * len(dists) + 1.3),
                             squeeze=False)
    for i, dist in enumerate(dists):
        for j, kind in enumerate(KINDS):
            ax = axes[i, j]
            curves = {}
            for label in labels:
                sel = sorted((r for r in rows if r["dist"] == dist and r["kind"] == kind
                              and r["series"] == label), key=lambda r: r["K"])
                k = np.array([r["K"] for r in sel])
                med, lo, hi = (np.array([float(r[c]) for r in sel])
                               for c in ("median", "p10", "p90"))
                fmt, mode = sel[0]["format"], sel[0]["mode"]
                ax.plot(k, med, label=label, **_series_style(fmt, mode))
                ax.fill_between(k, lo, hi, color=_COLORS[fmt], alpha=0.10, lw=0)
                curves[label] = med
            # Name every line (or group of coinciding lines) at its right end, spread
            # apart vertically so that the names do not overlap.
            ends = [(float(curves[g[0]][-1]), _group_name(g), _COLORS[g[0].split()[0]])
                    for g in _coinciding(curves)]
            for name, y in _reference_slopes(k, curves):
                ax.plot(k, y, ":", color="0.45", lw=1.0, zorder=1)
                ends.append((float(y[-1]), name, "0.35"))
            last = -np.inf
            for y, name, color in sorted(ends):
                ly = max(np.log10(y), last + 0.17)
                last = ly
                ax.annotate(name, (k[-1], y), xytext=(k[-1] * 1.35, 10 ** ly),
                            fontsize=7, color=color, va="center",
                            arrowprops=dict(arrowstyle="-", color="0.75", lw=0.5))
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlim(k[0] / 1.3, k[-1] * 16)  # room for the names on the right
            ax.set_xticks(k[:: max(1, len(k) // 6)])
            ax.grid(True, which="both", alpha=0.3)
            what = ("total error (operand rounding + accumulation)" if kind == "total" else
                    "accumulation error only (R from the rounded operands)")
            ax.set_title(f"{what}, {dist} inputs", fontsize=9.5)
            ax.set_ylabel("||D - R||_F / ||R||_F (median)", fontsize=8.5)
            ax.set_xlabel("K (inner dimension)", fontsize=8.5)
            ax.tick_params(labelsize=8)
    handles, names = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, names, loc="lower center", ncol=len(names), fontsize=8,
               frameon=False, bbox_to_anchor=(0.5, 0.085))
    fig.text(0.5, 0.045, EXPLAIN, ha="center", va="center", fontsize=7.5)
    fig.text(0.5, 0.012, FLATTEN_NOTE, ha="center", va="center", fontsize=7.5,
             style="italic")
    fig.suptitle(title or "WMMA GEMM relative error vs float64 (median, 10-90% band)",
                 fontsize=10)
    fig.tight_layout(rect=(0, 0.11, 1, 1))
    su.save_png(fig, path, dpi=80)
    plt.close(fig)


def main(argv=None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n".join(__doc__.splitlines()[2:]))
    p.add_argument("--large", action="store_true",
                   help=f"the GPU size: {_sizes(LARGE)} (default: {_sizes(DEFAULT)}); "
                        "the options below override single values")
    p.add_argument("--batch", type=su.int_at_least(1), metavar="N",
                   help=f"random matrices per point (vmapped, sharded over devices), >= 1 "
                        f"(default {DEFAULT['batch']}, --large {LARGE['batch']})")
    p.add_argument("--mn", type=su.int_at_least(16, 16), metavar="N",
                   help=f"M = N of each product, a multiple of 16 "
                        f"(default {DEFAULT['mn']}, --large {LARGE['mn']})")
    p.add_argument("--kmin", type=su.int_at_least(16, 16), metavar="K",
                   help=f"smallest K, a multiple of 16 (default {DEFAULT['kmin']})")
    p.add_argument("--kmax", type=su.int_at_least(16), metavar="K",
                   help=f"largest K, >= --kmin (default {DEFAULT['kmax']}, "
                        f"--large {LARGE['kmax']})")
    p.add_argument("--kfactor", type=su.int_at_least(2), default=2, metavar="F",
                   help="K grows by this factor from --kmin to --kmax, >= 2 (default 2)")
    p.add_argument("--dists", nargs="+", choices=DISTS, default=list(DISTS), metavar="DIST",
                   help=f"input distributions, one or more of: {' '.join(DISTS)} "
                        "(normal: N(0, 1); uniform: U[0, 1), all positive) (default: both)")
    p.add_argument("--arch", default=None, choices=("sm_90", *AMD_ARCHS), metavar="ARCH",
                   help="the exact mode's target: sm_90 (the H100's WMMA, the default) or an "
                        "AMD matrix core, gfx908 (CDNA1), gfx90a (CDNA2), gfx942 (CDNA3), "
                        "f16 and bf16; fast mode and fp32 do not depend on it")
    su.add_common_options(p)
    su.add_devices_option(p)
    args = p.parse_args(argv)
    devices = su.pick_devices(args.devices)
    cfg = dict(LARGE if args.large else DEFAULT)
    for name in cfg:
        if getattr(args, name) is not None:
            cfg[name] = getattr(args, name)
    try:
        ks = k_values(cfg["kmin"], cfg["kmax"], args.kfactor)
    except ValueError as e:
        p.error(str(e))
    out = su.out_dir(args.out)
    print(su.run_header(argv, devices))
    print(f"matrices per point: {cfg['batch']} of {cfg['mn']}x K @ K x{cfg['mn']}, K = {ks}, "
          f"seed {args.seed}\n", flush=True)
    with su.Timer() as t:
        rows = run(ks, batch=cfg["batch"], mn=cfg["mn"], dists=args.dists, seed=args.seed,
                   progress=not args.no_progress, devices=devices,
                   arch=None if args.arch == "sm_90" else args.arch)
    print(tables(rows))
    su.write_csv(out / "matmul_error.csv", rows, COLUMNS)
    plot(rows, out / "matmul_error.png",
         title=f"{'MFMA ' + args.arch if args.arch in AMD_ARCHS else 'WMMA'} GEMM "
               f"relative error vs float64 ({cfg['mn']}xK @ Kx{cfg['mn']}, "
               f"{cfg['batch']} matrices per point: median, 10-90% band)  "
               f"[{su.device_summary(devices)}]")
    print(f"\nwrote {out / 'matmul_error.csv'} and {out / 'matmul_error.png'}; "
          f"{t.seconds:.0f} s")
    return rows


def _sizes(cfg: dict) -> str:
    return (f"{cfg['batch']} matrices of {cfg['mn']}xK @ Kx{cfg['mn']} per point, "
            f"K = {cfg['kmin']} ... {cfg['kmax']}")


if __name__ == "__main__":
    main()
