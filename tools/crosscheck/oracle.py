"""Runs MMA-Sim on drawn inputs. Executed by the crosscheck venv's Python, never by jaxwarp.

Usage (the maker, ``make_golden.py``, calls it; you rarely need to):

    .crosscheck-venv/bin/python tools/crosscheck/oracle.py --list
    .crosscheck-venv/bin/python tools/crosscheck/oracle.py JOBS.json INPUTS.npz OUTPUTS.npz

``--list`` prints, as JSON, every configuration MMA-Sim models:
``{family: {arch: [qualifier, ...]}}`` read from MMA-Sim's own catalogue modules (arch
names with spaces written as ``_``), and its version.

Otherwise ``JOBS.json`` is a list of ``{"key", "family", "arch", "qualifier", "steps"}``
and ``INPUTS.npz`` holds ``{key}/A``, ``{key}/B``, ``{key}/C`` (and ``{key}/SA``,
``{key}/SB`` for the block-scaled families) as raw bits in the layout of
``golden/{family}/{arch}/{qualifier}/{field}`` (see README.md). Trials are cut into
chains of ``steps`` consecutive trials: the C of a trial that is not the first of its
chain is replaced by the D of the trial before it (only where C has D's type).
``OUTPUTS.npz`` gets ``{key}/C`` (with the chained C) and ``{key}/D``. One line
``done {key}`` per job goes to stdout, for the maker's progress bar.

Only MMA-Sim's public classes are used (``mmasim.nv_ptx.MMA``, ``MMABlockScale``,
``TCGen05MMA``, ``TCGen05MMABlockScale``), one trial per call, as its README shows.
"""

from __future__ import annotations

import importlib.metadata
import json
import sys

import numpy as np
import torch
from mmasim import nv_ptx
from mmasim.nv_ptx import isa_mma, isa_tcgen05mma

_OPS = {
    "mma": nv_ptx.MMA,
    "mma_block_scale": nv_ptx.MMABlockScale,
    "tcgen05": nv_ptx.TCGen05MMA,
    "tcgen05_block_scale": nv_ptx.TCGen05MMABlockScale,
}

# Raw-bit views: PTX type -> (signed integer view numpy can share with torch, torch dtype).
_VIEWS = {
    "f64": (np.int64, torch.float64),
    "f32": (np.int32, torch.float32),
    "tf32": (np.int32, torch.float32),
    "f16": (np.int16, torch.float16),
    "bf16": (np.int16, torch.bfloat16),
    "e4m3": (np.uint8, torch.float8_e4m3fn),
    "e5m2": (np.uint8, torch.float8_e5m2),
    "ue8m0": (np.uint8, torch.float8_e8m0fnu),
    "ue4m3": (np.uint8, torch.float8_e4m3fn),
    "e3m2": (np.uint8, torch.uint8),
    "e2m3": (np.uint8, torch.uint8),
    "e2m1": (np.uint8, torch.uint8),
}


def catalogue() -> dict:
    """Every configuration MMA-Sim models, by family and arch (spaces as ``_``)."""
    lists = {
        "mma": isa_mma.mma_shape_and_type,
        "mma_block_scale": isa_mma.mma_block_scale_shape_and_type,
        "tcgen05": isa_tcgen05mma.tcgen05mma_shape_and_type,
        "tcgen05_block_scale": isa_tcgen05mma.tcgen05mma_block_scale_shape_and_type,
    }
    return {fam: {arch.replace(" ", "_"): list(qs) for arch, qs in by_arch.items()}
            for fam, by_arch in lists.items()}


def types_of(family: str, qualifier: str) -> dict:
    """Field -> PTX type of one qualifier (the grammar of README.md)."""
    parts = qualifier.split(".")
    if family == "mma":
        d, a, b, c = parts[-4:]
        return {"A": a, "B": b, "C": c, "D": d}
    if family == "mma_block_scale":
        d, a, b, c, s = parts[-5:]
        return {"A": a, "B": b, "C": c, "D": d, "SA": s, "SB": s}
    if family == "tcgen05":
        d, a, b = parts[-3:]
        return {"A": a, "B": b, "C": d, "D": d}
    d, a, b, s = parts[-4:]
    return {"A": a, "B": b, "C": d, "D": d, "SA": s, "SB": s}


def to_torch(bits: np.ndarray, t: str) -> torch.Tensor:
    view, dt = _VIEWS[t]
    x = torch.from_numpy(np.ascontiguousarray(bits).view(view))
    return x if dt == torch.uint8 else x.view(dt)


def to_bits(x: torch.Tensor, t: str, like: np.dtype) -> np.ndarray:
    view, _ = _VIEWS[t]
    ints = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[x.element_size()]
    return x.contiguous().view(ints).numpy().view(view).view(like)


def run_job(job: dict, inputs) -> dict[str, np.ndarray]:
    family, qualifier, key = job["family"], job["qualifier"], job["key"]
    op = _OPS[family](job["arch"].replace("_", " "), qualifier)
    types = types_of(family, qualifier)
    A, B = inputs[f"{key}/A"], inputs[f"{key}/B"]
    C = inputs[f"{key}/C"].copy()
    scaled = family.endswith("block_scale")
    SA = inputs[f"{key}/SA"] if scaled else None
    SB = inputs[f"{key}/SB"] if scaled else None
    bits = {"f64": np.uint64, "f32": np.uint32, "f16": np.uint16}
    D = np.zeros(C.shape, bits[types["D"]])
    steps = int(job["steps"])
    if steps > 1 and types["C"] != types["D"]:
        raise ValueError(f"{key}: a chain needs C of D's type; got {types}")
    for t in range(len(A)):
        if t % steps:
            C[t] = D[t - 1]
        args = [to_torch(A[t], types["A"]), to_torch(B[t], types["B"]),
                to_torch(C[t], types["C"])]
        if scaled:
            args += [to_torch(SA[t], types["SA"]), to_torch(SB[t], types["SB"])]
        D[t] = to_bits(op(*args), types["D"], D.dtype)
    return {f"{key}/C": C, f"{key}/D": D}


def main(argv: list[str]) -> int:
    if argv == ["--list"]:
        print(json.dumps({"version": importlib.metadata.version("mmasim"),
                          "torch": torch.__version__, "catalogue": catalogue()}))
        return 0
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    jobs_path, in_path, out_path = argv
    with open(jobs_path) as f:
        jobs = json.load(f)
    inputs = np.load(in_path)
    out: dict[str, np.ndarray] = {}
    for job in jobs:
        out.update(run_job(job, inputs))
        print(f"done {job['key']}", flush=True)
    np.savez(out_path, **out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
