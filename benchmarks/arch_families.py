"""Exact-mode speed per multiply-add of every architecture family, against sm_90's.

The issue "every generation" asks that the datapaths of the other architectures run at
the speed per multiply-add (MAC) of the sm_90 ones of the same operand width. For each
family this times ``jaxwarp.mma(..., mode="exact")`` on a batch of independent tiles of
the family's own instruction shape, and in the same run (interleaved, best of
``--repeats``) sm_90's instruction of the same operand format: ``mma.sync`` (hardware
verified on an H100) and, for the asynchronous ``tcgen05.mma``, also ``wgmma``. Prints
one JSON record per row: M MAC/s, the sm_90 baseline's, and ``vs_sm90`` (a speed ratio:
1.0 is as fast per MAC, 0.5 half as fast), then a summary record. On a CPU the time is the
process's CPU seconds (``--clock cpu``, every XLA thread counted): on a host shared with
other jobs, wall-clock rates of one code moved by up to 7x within a run, CPU seconds far
less.

The bits are not checked here: ``tools/crosscheck`` compares every family with MMA-Sim
(and sm_90 with the H100 captures). On a CPU, time the rows on an idle host, or read only
the ratios (``host_load_1min`` says how busy it was).

``--gemm`` adds ``jaxwarp.matmul(instruction="mma_sync")`` per target at its default tile
(sm_70: m8n8k4), a chain of instructions along K, against sm_90.

Usage: python benchmarks/arch_families.py [--macs N] [--only LABEL,...] [--repeats R]
       [--clock auto|cpu|wall] [--gemm]
"""

from __future__ import annotations

import argparse
import functools
import os
import time

import jax
import ml_dtypes
import numpy as np
from _common import best_time, device_info, emit, versions

import jaxwarp

# label: (arch, instruction, a_format, (m, n, k), what the datapath is)
FAMILIES = {
    "sm_70 f16 mma.sync m8n8k4": ("sm_70", "mma_sync", "f16", (8, 8, 4),
                                  "Volta: F = 23, one chunk of 4"),
    "sm_70 f16 wmma m16n16k16": ("sm_70", "wmma", "f16", (16, 16, 16),
                                 "Volta: F = 23, 4 chunks of 4"),
    "sm_75 f16 mma.sync m16n8k8": ("sm_75", "mma_sync", "f16", (16, 8, 8),
                                   "Turing: F = 24, one chunk of 8"),
    "sm_80 f16 mma.sync m16n8k16": ("sm_80", "mma_sync", "f16", (16, 8, 16),
                                    "Ampere: F = 24, 2 chunks of 8"),
    "sm_80 bf16 mma.sync m16n8k16": ("sm_80", "mma_sync", "bf16", (16, 8, 16),
                                     "Ampere: F = 24, 2 chunks of 8"),
    "sm_80 tf32 mma.sync m16n8k8": ("sm_80", "mma_sync", "tf32", (16, 8, 8),
                                    "Ampere: F = 24, 2 chunks of 4"),
    "sm_89 e4m3 mma.sync m16n8k32": ("sm_89", "mma_sync", "e4m3", (16, 8, 32),
                                     "Ada fp8: F = 13, 2 chunks of 16, f32 cut to 13 bits"),
    "sm_90 f16 mma.sync m16n8k16": ("sm_90", "mma_sync", "f16", (16, 8, 16),
                                    "Hopper (H100 captures): one chunk of 16"),
    "sm_100a f16 tcgen05 m128n64k16": ("sm_100a", "tcgen05", "f16", (128, 64, 16),
                                       "Blackwell kind::f16: one chunk of 16"),
    "sm_100a e4m3 tcgen05 m128n64k32": ("sm_100a", "tcgen05", "e4m3", (128, 64, 32),
                                        "Blackwell kind::f8f6f4: one chunk of 32, F = 25"),
    "sm_120a e4m3 mma.sync m16n8k32": ("sm_120a", "mma_sync", "e4m3", (16, 8, 32),
                                       "RTX Blackwell fp8: one chunk of 32, F = 25"),
    "sm_120a e2m1 mma.sync kind::f8f6f4 m16n8k32": (
        "sm_120a", "mma_sync", "e2m1", (16, 8, 32),
        "RTX Blackwell kind::f8f6f4 fp4: one chunk of 32"),
}
#: sm_90's instruction per operand format: the baseline of the same width. fp4 codes sit
#: one per byte (kind::f8f6f4), so e2m1 is compared with the 8-bit e4m3.
SM90_MMA_SYNC = {"f16": (16, 8, 16), "bf16": (16, 8, 16), "tf32": (16, 8, 8),
                 "e4m3": (16, 8, 32)}
SM90_WGMMA = {"f16": (64, 64, 16), "e4m3": (64, 64, 32)}
_WIDTH_OF = {"e2m1": "e4m3"}
_DTYPE = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "tf32": np.float32,
          "e4m3": ml_dtypes.float8_e4m3fn}


def _operand(rng, shape, fmt):
    if fmt == "e2m1":  # a code in the low 4 bits of a byte, as kind::f8f6f4 holds it
        return rng.integers(0, 16, shape).astype(np.uint8)
    return rng.standard_normal(shape, np.float32).astype(_DTYPE[fmt])


def _timer(arch, instruction, fmt, shape, macs):
    """A zero-argument function that runs one batch, and the MACs it does."""
    m, n, k = shape
    tiles = max(2, macs // (m * n * k))
    rng = np.random.default_rng(0)
    a = jax.device_put(_operand(rng, (tiles, m, k), fmt))
    b = jax.device_put(_operand(rng, (tiles, k, n), fmt))
    c = jax.device_put(rng.standard_normal((tiles, m, n), np.float32))

    @jax.jit
    def exact(a, b, c):
        # The model's XLA ops for every family (on a GPU "auto" would send the families
        # the fused kernel models, sm_90's among them, through that kernel instead).
        with jaxwarp.config.override(gemm_fused_kernel="off"):
            return jaxwarp.mma(a, b, c, a_format=fmt, c_format="f32", d_format="f32",
                               instruction=instruction, instruction_k=k, arch=arch)

    return (lambda: exact(a, b, c).block_until_ready()), tiles * m * n * k


#: ``--gemm``: ``jaxwarp.matmul(instruction="mma_sync")`` at the target's default tile
#: (the largest k it issues), against sm_90's m16n8k16 / m16n8k32 of the same format.
GEMM_ARCHS = {"sm_70": "f16", "sm_75": "f16", "sm_80": "f16", "sm_89": "e4m3",
              "sm_100": "f16", "sm_120a": "e4m3"}


def _gemm_timer(arch, fmt, size):
    m, k = size
    rng = np.random.default_rng(0)
    a = jax.device_put(rng.standard_normal((m, k), np.float32))
    b = jax.device_put(rng.standard_normal((k, m), np.float32))
    f = jax.jit(functools.partial(jaxwarp.matmul, operand_format=fmt,
                                  instruction="mma_sync", arch=arch))
    return (lambda: f(a, b).block_until_ready()), m * m * k


def _cpu_seconds(fn, min_time: float = 0.2) -> float:
    """CPU seconds of the process (every thread) per call of ``fn``: on a host shared with
    other jobs, the work a call does, not the time it waited for a core."""
    n, t0 = 0, time.process_time()
    while True:
        fn()
        n += 1
        dt = time.process_time() - t0
        if dt >= min_time:
            return dt / n


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--macs", type=int, default=None,
                   help="multiply-adds per batch (default 2^20 on a CPU, 2^28 otherwise)")
    p.add_argument("--only", default=None, help="comma-separated labels (default: all)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--gemm", action="store_true",
                   help="also time jaxwarp.matmul (mma_sync, default tile) per target: "
                        "M = N = 128, K = 512 on a CPU, 2048^3 otherwise")
    p.add_argument("--clock", choices=("auto", "cpu", "wall"), default="auto",
                   help="cpu: process CPU seconds (all threads); wall: best_time's wall "
                        "clock; auto: cpu on a CPU backend, wall otherwise")
    args = p.parse_args()
    clock = args.clock if args.clock != "auto" else (
        "cpu" if jax.default_backend() == "cpu" else "wall")
    macs = args.macs or (2**20 if jax.default_backend() == "cpu" else 2**28)
    labels = list(FAMILIES) if args.only is None else args.only.split(",")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    emit({"benchmark": "arch_families", **device_info(), "versions": versions(),
          "host_cpus": os.cpu_count(), "host_load_1min": load, "macs_per_batch": macs,
          "clock": clock})
    summary = {}
    for label in labels:
        arch, instruction, fmt, shape, what = FAMILIES[label]
        width = _WIDTH_OF.get(fmt, fmt)
        runs = {"family": _timer(arch, instruction, fmt, shape, macs),
                "sm_90 mma.sync": _timer("sm_90", "mma_sync", width, SM90_MMA_SYNC[width],
                                         macs)}
        if instruction == "tcgen05":
            runs["sm_90a wgmma"] = _timer("sm_90a", "wgmma", width, SM90_WGMMA[width], macs)
        for fn, _n in runs.values():
            fn()  # compile
        best = {name: float("inf") for name in runs}
        for _ in range(args.repeats):  # interleaved: a busy host slows every run alike
            for name, (fn, _n) in runs.items():
                t = _cpu_seconds(fn) if clock == "cpu" else best_time(fn, repeats=1)
                best[name] = min(best[name], t)
        rate = {name: runs[name][1] / best[name] / 1e6 for name in runs}
        summary[label] = rate["family"] / rate["sm_90 mma.sync"]
        rec = {"benchmark": f"arch_families/{label}", "arch": arch,
               "instruction": instruction, "a_format": fmt, "shape": list(shape),
               "datapath": what, "m_macs_per_s": rate["family"],
               "sm90_mma_sync_m_macs_per_s": rate["sm_90 mma.sync"],
               "vs_sm90": rate["family"] / rate["sm_90 mma.sync"]}
        if "sm_90a wgmma" in rate:
            rec["sm90a_wgmma_m_macs_per_s"] = rate["sm_90a wgmma"]
            rec["vs_sm90a_wgmma"] = rate["family"] / rate["sm_90a wgmma"]
        emit(rec)
    gemm = {}
    if args.gemm:
        size = (128, 512) if jax.default_backend() == "cpu" else (2048, 2048)
        for arch, fmt in GEMM_ARCHS.items():
            runs = {"family": _gemm_timer(arch, fmt, size),
                    "sm_90": _gemm_timer("sm_90", fmt, size)}
            for fn, _n in runs.values():
                fn()
            best = {name: float("inf") for name in runs}
            for _ in range(args.repeats):
                for name, (fn, _n) in runs.items():
                    t = _cpu_seconds(fn) if clock == "cpu" else best_time(fn, repeats=1)
                    best[name] = min(best[name], t)
            rate = {name: runs[name][1] / best[name] / 1e6 for name in runs}
            gemm[f"{arch} {fmt} matmul"] = rate["family"] / rate["sm_90"]
            emit({"benchmark": f"arch_families/gemm/{arch}", "arch": arch, "a_format": fmt,
                  "m_n_k": [size[0], size[0], size[1]], "m_macs_per_s": rate["family"],
                  "sm90_m_macs_per_s": rate["sm_90"], "vs_sm90": gemm[f"{arch} {fmt} matmul"]})
    emit({"benchmark": "arch_families/summary", "clock": clock,
          "vs_sm90_mma_sync": {k: round(v, 3) for k, v in summary.items()},
          **({"gemm_vs_sm90": {k: round(v, 3) for k, v in gemm.items()}} if gemm else {})})


if __name__ == "__main__":
    main()
