"""Which lanes read ``__activemask()`` together in a loop with per-lane trip counts, for
several unroll pragmas and optimisation levels (``loopmask.cu``).

CUDA promises no reconvergence inside such a loop, so the answer is the compiler's loop
shape. For every (pragma, flags) build this records, per trial (one warp), the lanes'
trip counts and what each program returned, and keeps the SASS of the build
(``cuobjdump -sass``) so the loop shape can be read: ``loopmask.npz`` with keys
``loop/{build}/{program}/{trips,out}`` (trips (T, 32) int32; out (T, 32, W) uint32) and
``loopmask_sass/{build}.txt``.

    python tools/capture/probe_loopmask.py --out DIR [--trials 512] [--seed 0]
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import pathlib
import subprocess
import sys
import tempfile

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
PROGRAMS = ("last_trip", "every_trip", "countdown", "last_trip_ballot")
PRAGMAS = {"none": "", "u1": "unroll 1", "u2": "unroll 2", "u4": "unroll 4", "u8": "unroll 8"}
FLAGS = {"O2": ["-O2"], "O3": ["-O3"], "O0": ["-O0"], "G": ["-G"],
         "O2_ptxasO0": ["-O2", "-Xptxas", "-O0"], "O2_ptxasO1": ["-O2", "-Xptxas", "-O1"]}


def trips_set(rng, trials):
    """(T, 32) trip counts of four kinds: uniform 0..12, 0..33, a few values, 1..9."""
    parts = []
    for i in range(trials):
        kind = i % 4
        if kind == 0:
            t = rng.integers(0, 13, 32)
        elif kind == 1:
            t = rng.integers(0, 34, 32)
        elif kind == 2:
            t = rng.choice(rng.integers(0, 17, 3), 32)
        else:
            t = rng.integers(1, 10, 32)
        parts.append(t)
    return np.stack(parts).astype(np.int32)


def build(name, pragma, flags, arch, tmp):
    exe = tmp / f"loopmask_{name}"
    define = [f"-DUNROLL=_Pragma(\"{pragma}\")"] if pragma else []
    cmd = ["nvcc", f"-arch={arch}", *flags, *define, "-o", str(exe), str(HERE / "loopmask.cu")]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        return name, None, r.stderr
    sass = subprocess.run(["cuobjdump", "-sass", str(exe)], capture_output=True, text=True)
    return name, exe, sass.stdout


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=pathlib.Path, required=True)
    ap.add_argument("--trials", type=int, default=512)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--arch", default="sm_90a")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    tmp = pathlib.Path(tempfile.mkdtemp())
    trips = trips_set(np.random.default_rng(args.seed), args.trials)
    tfile = tmp / "trips.bin"
    trips.tofile(tfile)
    out, info = {}, {}
    sass_dir = args.out / "loopmask_sass"
    sass_dir.mkdir(exist_ok=True)
    jobs = [(f"{p}_{f}", PRAGMAS[p], FLAGS[f]) for p in PRAGMAS for f in FLAGS]
    with cf.ThreadPoolExecutor(8) as ex:
        built = list(ex.map(lambda j: build(*j, args.arch, tmp), jobs))
    for name, exe, text in built:
        (sass_dir / f"{name}.txt").write_text(text)
        if exe is None:
            info[name] = "build failed"
            print(name, "build failed", text[:300], flush=True)
            continue
        for pi, prog in enumerate(PROGRAMS):
            ofile = tmp / f"out_{name}_{pi}.bin"
            r = subprocess.run([str(exe), str(pi), str(args.trials), str(tfile), str(ofile)],
                               capture_output=True, text=True, timeout=60)
            if r.returncode:
                info[f"{name}/{prog}"] = f"exit {r.returncode}: {r.stderr[:200]}"
                continue
            w = 33 if prog == "every_trip" else 2
            res = np.fromfile(ofile, np.uint32).reshape(args.trials, 32, w)
            out[f"loop/{name}/{prog}/trips"] = trips
            out[f"loop/{name}/{prog}/out"] = res
        print(name, "ok", flush=True)
    np.savez_compressed(args.out / "loopmask.npz", **out)
    (args.out / "loopmask.json").write_text(json.dumps(
        {"seed": args.seed, "trials": args.trials, "arch": args.arch, "problems": info,
         "nvcc": subprocess.run(["nvcc", "--version"], capture_output=True,
                                text=True).stdout.strip().splitlines()[-1]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
