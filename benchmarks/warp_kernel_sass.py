"""Static profile of ``warp_kernel``'s Pallas kernels: their SASS for sm_90, compiled on a
machine without a GPU.

The kernel's Triton IR (what Pallas hands to XLA, printed by ``pallas_call(debug=True)``)
is compiled by the ``triton`` package (not a jaxwarp dependency: ``pip install triton``;
its wheel carries ptxas and nvdisasm for sm_90), and its instructions are counted: per
program of ``benchmarks/warp_divergence.py``, per block configuration and per form of the
output scatter (``jaxwarp.config.warp_kernel_output_scatter``: "store", masked stores to
the computed slots, or "onehot", the scatter's value as a one-hot selection), the
registers per thread, the instructions of the kernel, and the issue slots per warp of
data: instructions x CUDA warps of a program / warps of data in its block. A loop (the
radix sort's 32 steps) is counted once. The device's Triton (the one inside jaxlib) may
schedule differently; the counts say what a warp of data costs and where.

Against a device copy: a warp of data moves 256 bytes (32 words read, 32 written); an
H100 copies about 3.0 TB/s and issues about 132 x 4 x 1.755e9 = 9.3e11 warp
instructions a second, so a kernel that issues more than about 80 instructions per warp
of data cannot keep up with the copy, whatever its memory traffic.

Usage: python benchmarks/warp_kernel_sass.py [--programs compact,radix_step]
           [--configs 8x4,128x8] [--forms store,onehot]
Prints one JSON record.
"""

from __future__ import annotations

import argparse
import collections
import json
import pathlib
import re
import sys
import tempfile

import jax
import jax.numpy as jnp
from _common import SASS_OPCODE, sm90_sass, triton_module

import jaxwarp

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import warp_divergence  # noqa: E402  (the programs and their loader)

#: (warps of data per program, CUDA warps per program): warp_kernel's defaults for a
#: program with one-hot forms (8, Pallas' 4) and without (128), and others timed on GPUs.
CONFIGS = ("8x4", "8x2", "32x4", "128x4", "128x8")
#: Issue rate of an H100 SXM: 132 SMs x 4 schedulers x 1.755 GHz, one warp instruction each
#: a cycle; and a device copy's rate (KINDS.md of the device library: about 3.0 TB/s).
ISSUE_PER_S = 132 * 4 * 1.755e9
COPY_BYTES_PER_S = 3.0e12


def ttir(fn, block: int, num_warps: int) -> str:
    """The Triton module of ``warp_kernel(fn)``'s kernel for (blocks of) uint32 warps."""
    x = jax.ShapeDtypeStruct((1 << 12, 32), jnp.uint32)
    k = jaxwarp.warp_kernel(fn, warps_per_block=block, num_warps=num_warps, force="pallas")

    def kernel(v):  # the kernel itself: warp_kernel's call checks that v is on a GPU
        why, out_block, program = k._trace([v])
        if why is not None:
            raise ValueError(f"not a kernel: {why}")
        return k._pallas(program, [v], out_block)

    return triton_module(lambda: jax.jit(kernel).trace(x).lower(lowering_platforms=("cuda",)))


def sass(text: str, num_warps: int, work: pathlib.Path) -> tuple[int, collections.Counter]:
    """(registers per thread, SASS opcodes counted, less NOP / EXIT / BRA) of a module."""
    regs, _, lines = sm90_sass(text, num_warps, work)
    ops: collections.Counter = collections.Counter()
    for s in lines:
        m = re.search(SASS_OPCODE, s)
        if m and m.group(1) not in ("NOP", "EXIT", "BRA"):
            ops[m.group(1)] += 1
    return regs, ops


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--programs", default="compact,compact_ballot,radix_step,radix_sort")
    p.add_argument("--configs", default=",".join(CONFIGS),
                   help="BLOCKxWARPS: warps of data and CUDA warps per program")
    p.add_argument("--forms", default="store,onehot")
    args = p.parse_args()
    programs = warp_divergence.programs()
    copy_s = 256 / COPY_BYTES_PER_S  # seconds a warp of data takes in a device copy
    result: dict = {"benchmark": "warp_kernel_sass", "target": "sm_90 (Triton's ptxas)",
                    "jax": jax.__version__, "issue_per_s": ISSUE_PER_S,
                    "copy_bytes_per_s": COPY_BYTES_PER_S,
                    "issue_slots_per_warp_at_copy_speed": round(copy_s * ISSUE_PER_S, 1)}
    try:
        import triton
        result["triton"] = triton.__version__
    except ImportError:
        sys.exit("warp_kernel_sass.py needs the triton package (pip install triton)")
    with tempfile.TemporaryDirectory() as work:
        for name in args.programs.split(","):
            fn = programs[name][0]
            rows = {}
            for form in args.forms.split(","):
                for cfg in args.configs.split(","):
                    block, nw = (int(v) for v in cfg.split("x"))
                    with jaxwarp.config.override(warp_kernel_output_scatter=form):
                        text = ttir(fn, block, nw)
                    regs, ops = sass(text, nw, pathlib.Path(work))
                    total = sum(ops.values())
                    per_warp = total * nw / block
                    rows[f"{form}:{cfg}"] = {
                        "registers": regs, "instructions": total,
                        "issue_slots_per_data_warp": round(per_warp, 1),
                        "issue_bound_fraction_of_copy": round(
                            min(1.0, copy_s * ISSUE_PER_S / per_warp), 3),
                        "top": dict(ops.most_common(8))}
                    print(name, form, cfg, json.dumps(rows[f"{form}:{cfg}"]),
                          file=sys.stderr, flush=True)
            result[name] = rows
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
