"""Builds the small ground-truth subset in tests/data/ from the full H100 captures.

Usage: python tools/make_test_data.py [SRC_DIR]   (default ../shared/hw/h100)

warp.npz and layout.npz are small and copied whole (DPX operands cut to 8192). For
the mma files every configuration keeps ``PER_KIND`` trials of each input kind (16 when a
configuration has a single kind, as the integer ones do), so
every configuration and every kind stays represented.
"""

import pathlib
import sys

import numpy as np

PER_KIND = 2
DPX_N = 8192


def main() -> None:
    src = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "../shared/hw/h100")
    dst = pathlib.Path(__file__).resolve().parents[1] / "tests" / "data"
    dst.mkdir(parents=True, exist_ok=True)
    warp = dict(np.load(src / "warp.npz"))
    for k in ("dpx_a", "dpx_b", "dpx_c"):
        warp[k] = warp[k][:DPX_N]
    warp["dpx_out"] = warp["dpx_out"][:, :DPX_N]
    warp["dpx_pred"] = warp["dpx_pred"][:, :DPX_N]
    np.savez_compressed(dst / "h100_warp.npz", **warp)
    np.savez_compressed(dst / "h100_layout.npz", **dict(np.load(src / "layout.npz")))
    for name in ("mma_fp", "mma_int"):
        d = np.load(src / f"{name}.npz")
        out = {"device": d["device"]}
        for cfg in sorted({k.split("/")[0] for k in d.files if "/" in k}):
            kinds = d[f"{cfg}/kind"]
            uniq = np.unique(kinds)
            per = PER_KIND if len(uniq) > 1 else 8 * PER_KIND  # integer configs: one kind only
            keep = np.concatenate([np.flatnonzero(kinds == k)[:per] for k in uniq])
            keep.sort()
            for part in ("A", "B", "C", "D", "kind"):
                out[f"{cfg}/{part}"] = d[f"{cfg}/{part}"][keep]
        np.savez_compressed(dst / f"h100_{name}.npz", **out)
    for f in sorted(dst.glob("*.npz")):
        print(f.name, f.stat().st_size)


if __name__ == "__main__":
    main()
