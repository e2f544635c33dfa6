"""Static profile of the fused exact kernel: its SASS for sm_90, compiled on a machine
without a GPU.

The kernel's Triton IR (what Pallas hands to XLA, printed by ``pallas_call(debug=True)``)
is compiled by the ``triton`` package (not a jaxwarp dependency: ``pip install triton``;
its wheel carries ptxas and nvdisasm for sm_90) and the instructions of the k loop (the
block between the loop's label and its backward branch) are counted per multiply-add of
one thread, with the registers and stack (spills) per thread. The device's Triton (the
one inside jaxlib) may schedule differently; the counts show what one k step costs and
where, and so the bound of the kernel's form (docs/native.md, "What bounds the kernel").
Prints one line per config on stderr as it goes, then the JSON (with the versions and
the ``triton`` package's).

Usage: python benchmarks/fused_kernel_sass.py [--configs bf16:split:32x32:4:f32 ...]
Each config: fmt:form:BMxBN:warps[:f32][:int][:specials][:sm80] (sm80: sm_80's datapath,
blocks of 8 products, where the others are sm_90's blocks of 16).
"""

from __future__ import annotations

import argparse
import collections
import json
import pathlib
import re
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from _common import SASS_OPCODE, emit, sm90_sass, triton_module, versions  # noqa: E402

DEFAULT = ["bf16:unrolled:32x32:4", "bf16:split:32x32:4", "bf16:split:32x32:4:f32",
           "bf16:split:64x32:4:f32", "f16:split:32x32:4:f32",
           "f16:split:32x32:4:f32:specials", "bf16:split:32x32:4:f32:sm80"]


def ttir(cfg: str, K: int = 4096) -> tuple[str, int, int]:
    """(Triton IR text, warps, multiply-adds per thread and k step) of one config."""
    import jax
    import jax.numpy as jnp

    from jaxwarp import backends

    fmt, form, tile, warps, *flags = cfg.split(":")
    bm, bn = map(int, tile.split("x"))
    warps = int(warps)
    # sm80: sm_80's datapath (blocks of 8 products, F = 24), else sm_90's (16, F = 25).
    ik, F = (8, 24) if "sm80" in flags else (16, 25)
    plan = backends.FusedPlan(fmt, K, F, 0x7FFFFFFF, "specials" not in flags, (bm, bn), warps,
                   form=form, rounding="int" if "int" in flags else "float",
                   f32_operands="f32" in flags, ik=ik, unroll=ik)
    dt = {"bf16": jnp.bfloat16, "f16": jnp.float16}[fmt]
    args = (jax.ShapeDtypeStruct((bm, K), dt), jax.ShapeDtypeStruct((K, bn), dt),
            jax.ShapeDtypeStruct((bm, bn), jnp.float32))
    text = triton_module(lambda: jax.jit(lambda a, b, c: backends.fused_gemm(
        a, b, c, plan)).trace(*args).lower(lowering_platforms=("cuda",)))
    return text, warps, bm * bn * ik // (32 * warps)  # ik: the instruction's k


def sass(cfg: str, work: pathlib.Path) -> dict:
    text, warps, macs = ttir(cfg)
    regs, stack, lines = sm90_sass(text, warps, work)
    back = max(i for i, s in enumerate(lines) if re.search(r"BRA `\(\.L_x_\d+\)", s)
               and "@" in s)
    label = re.search(r"BRA `\((\.L_x_\d+)\)", lines[back]).group(1)
    start = next(i for i, s in enumerate(lines) if s.startswith(label + ":"))
    ops: collections.Counter = collections.Counter()
    for s in lines[start:back + 1]:
        m = re.search(SASS_OPCODE, s)
        if m:
            ops[m.group(1)] += 1
    total = sum(ops.values())
    return {"registers": regs, "stack_bytes": stack, "macs_per_thread_step": macs,
            "instructions_per_mac": round(total / macs, 2),
            "per_mac": {o: round(n / macs, 2) for o, n in ops.most_common()}}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--configs", nargs="*", default=DEFAULT)
    args = ap.parse_args()
    res = {}
    with tempfile.TemporaryDirectory() as work:
        for cfg in args.configs:
            res[cfg] = sass(cfg, pathlib.Path(work))
            print(cfg, json.dumps(res[cfg]), file=sys.stderr, flush=True)
    import triton  # noqa: PLC0415 (present: sass() compiled with it)

    emit({"benchmark": "fused_kernel_sass", "target": "sm_90", **versions(),
          "triton": triton.__version__, "configs": res})


if __name__ == "__main__":
    main()
