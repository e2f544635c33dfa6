"""Cuts the small PTX mma test files tests/data/h100_ptx_{int,float}.npz out of a full capture.

    python tools/capture/subset_ptx.py DIR_WITH_ptx_mma_full*.npz [--out tests/data]

Per configuration it keeps a few trials of every kind (integers and b1: 3 per kind; floats:
2 per kind; f16 m8n8k4, whose warp runs 4 MMAs, one whole warp = 4 trials per kind),
chosen at random (seed 0), with their original trial numbers under ``trial``. Keys as in
FORMAT_PTX.md: ``ptx/{name}/{A,B,C,D,kind,trial}`` and ``device``.
"""

from __future__ import annotations

import argparse
import glob
import pathlib

import numpy as np

INT = ("s8", "u8", "s4", "u4", "b1")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src")
    ap.add_argument("--out", default="tests/data")
    args = ap.parse_args()
    z = {}
    device = None
    for f in sorted(glob.glob(str(pathlib.Path(args.src) / "ptx_mma_full*.npz"))):
        d = np.load(f)
        device = str(d["device"])
        z.update({k: d[k] for k in d.files if k.startswith("ptx/")})
    names = sorted({k.split("/")[1] for k in z})
    rng = np.random.default_rng(0)
    out = {"int": {"device": np.array(device)}, "float": {"device": np.array(device)}}
    for name in names:
        kind = z[f"ptx/{name}/kind"]
        quad = name.startswith("f16.f16.") and ".m8n8k4" in name
        is_int = name.split(".")[0] in INT
        pick = []
        for kd in dict.fromkeys(kind.tolist()):
            idx = np.flatnonzero(kind == kd)
            if quad:
                groups = sorted({i // 4 for i in idx if all(kind[4 * (i // 4):4 * (i // 4) + 4] == kd)})
                g = groups[rng.integers(len(groups))]
                pick += list(range(4 * g, 4 * g + 4))
            else:
                pick += sorted(rng.choice(idx, size=min(3 if is_int else 2, len(idx)), replace=False))
        pick = np.array(pick)
        dst = out["int" if is_int else "float"]
        for key in ("A", "B", "C", "D", "kind"):
            dst[f"ptx/{name}/{key}"] = z[f"ptx/{name}/{key}"][pick]
        dst[f"ptx/{name}/trial"] = pick.astype(np.int32)
    for which, arrays in out.items():
        path = pathlib.Path(args.out) / f"h100_ptx_{which}.npz"
        np.savez_compressed(path, **arrays)
        print(path, path.stat().st_size, "bytes,", (len(arrays) - 1) // 6, "configurations")


if __name__ == "__main__":
    main()
