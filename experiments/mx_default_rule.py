"""Measurement: MXFP8 on the library's defaults against the MXFP8 recipe and plain fp8.

The question a comparison run on defaults asks: on all-positive inputs, is MXFP8
(``jaxwarp.mx.matmul(A, B, "mxfp8_e4m3")``) as accurate as the MXFP8 training recipe
(``jaxwarp.emulate(..., recipe="mxfp8")``) and as per-tensor scaled e4m3? It is when
they quantize alike: the MX formats' default scale rule is ``"rceil"``, the recipe's
(cuBLAS's); OCP's ``"ocp"`` rule, the default before, saturates the largest elements of
all-positive blocks (docs/microscaling.md, "Scale rules").

Series, each on sm_100a ``tcgen05`` in exact mode, on the same U[0, 1) float32 A (M x K)
and B (K x N):

* ``mx.matmul default``: ``jaxwarp.mx.matmul(A, B, "mxfp8_e4m3")``;
* ``mx.matmul ocp``: the same with ``scale_rule="ocp"`` (the old default);
* ``emulate recipe mxfp8``: ``jaxwarp.emulate(lambda x, w: x @ w, recipe="mxfp8",
  params_argnums=1)`` (w the weight);
* ``per-tensor e4m3``: ``jaxwarp.matmul(A, B, operand_format="e4m3",
  instruction="tcgen05")`` with a power-of-two per-tensor scale that maps each operand's
  amax to at most 448 (exact scaling).

Error per output element: ``|D - R| / (|A| @ |B|)``, R the float64 product of the fp32
inputs (quantization plus summation, what a user sees; ``mx_study.py``'s "total
error"); the median and the max over the M x N outputs. Prints JSON and writes it to
``--out`` (default ``experiments/results/mx_default_rule.json``).

Usage:
    python experiments/mx_default_rule.py                  # K = 4096, 64 x 16, seed 0
    python experiments/mx_default_rule.py --k 1024 --out OUT_FILE
"""

from __future__ import annotations

import argparse
import datetime
import json
import pathlib
import sys

import _study_utils as su
import jax
import jax.numpy as jnp
import numpy as np

import jaxwarp
import jaxwarp.mx

SERIES = ("mx.matmul default", "mx.matmul ocp", "emulate recipe mxfp8", "per-tensor e4m3")
E4M3_MAX = 448.0


def _pow2_scale(x: np.ndarray) -> np.float32:
    """A power of two ``s`` with ``amax(x) / s <= 448``: dividing by it is exact."""
    return np.float32(2.0 ** np.ceil(np.log2(np.max(np.abs(x)) / E4M3_MAX)))


def products(a: np.ndarray, b: np.ndarray) -> dict[str, np.ndarray]:
    """Each series' D (float32) of the float32 ``a @ b``."""
    x, w = jnp.asarray(a), jnp.asarray(b)
    sa, sb = _pow2_scale(a), _pow2_scale(b)
    out = {
        "mx.matmul default": jaxwarp.mx.matmul(x, w, "mxfp8_e4m3"),
        "mx.matmul ocp": jaxwarp.mx.matmul(x, w, "mxfp8_e4m3", scale_rule="ocp"),
        "emulate recipe mxfp8": jaxwarp.emulate(lambda u, v: u @ v, recipe="mxfp8",
                                               params_argnums=1)(x, w),
        "per-tensor e4m3": jaxwarp.matmul(x, w, operand_format="e4m3",
                                          instruction="tcgen05", a_scale=sa, b_scale=sb),
    }
    return {k: np.asarray(v, np.float32) for k, v in out.items()}


def measure(k: int = 4096, m: int = 64, n: int = 16, seed: int = 0) -> dict:
    """The median and max relative error of each series (see the module docstring)."""
    rng = np.random.default_rng(seed)
    a = rng.uniform(0, 1, (m, k)).astype(np.float32)
    b = rng.uniform(0, 1, (k, n)).astype(np.float32)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    den = np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)
    ds = products(a, b)
    errors = {}
    for name, d in ds.items():
        e = np.abs(d.astype(np.float64) - ref) / den
        errors[name] = {"median_rel_err": float(np.median(e)), "max_rel_err": float(e.max())}
    bits = {name: d.view(np.uint32) for name, d in ds.items()}
    same = {name: bool((bits[name] == bits["mx.matmul default"]).all())
            for name in SERIES[1:]}
    return {"inputs": "uniform [0, 1)", "M": m, "K": k, "N": n, "seed": seed,
            "target": "sm_100a tcgen05, exact", "errors": errors,
            "same_bits_as_default": same,
            "default_scale_rule": jaxwarp.mx.DEFAULT_SCALE_RULE,
            "jax": jax.__version__, "device": su.device_summary(),
            "date": datetime.date.today().isoformat()}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--k", type=su.int_at_least(64, 64), default=4096,
                   help="K, a multiple of 64 (default 4096)")
    p.add_argument("--m", type=su.int_at_least(1), default=64, help="M (default 64)")
    p.add_argument("--n", type=su.int_at_least(1), default=16, help="N (default 16)")
    p.add_argument("--seed", type=int, default=0, help="NumPy seed (default 0)")
    p.add_argument("--out", metavar="FILE", default=str(
        pathlib.Path(__file__).resolve().parent / "results" / "mx_default_rule.json"),
        help="where the JSON goes (default experiments/results/mx_default_rule.json)")
    args = p.parse_args(argv)
    rec = measure(args.k, args.m, args.n, args.seed)
    text = json.dumps(rec, indent=2)
    pathlib.Path(args.out).write_text(text + "\n")
    print(text)
    return rec


if __name__ == "__main__":
    main(sys.argv[1:])
