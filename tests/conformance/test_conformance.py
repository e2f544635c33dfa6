"""The conformance command: every committed capture is bit-exact; the report's contract."""

import json
import re
import subprocess
import sys

import numpy as np
import pytest
from conftest import DATA

from jaxwarp import conformance

# The PTX-level samples (h100_*_sample.npz) are checked per family in test_ptx_samples.py;
# the front-ends' own data files bit for bit by their tests (test_mma_sync_ptx.py, test_wgmma.py,
# test_datapath_hw.py), so running the conformance command on them again would only
# repeat those compilations.
_FRONT_END_DATA = {"h100_ptx_float.npz", "h100_ptx_int.npz", "h100_wgmma.npz",
                   "h100_tc_edges.npz",
                   # nvcc's loop shapes: tests/warp/test_loop_capture.py, per build
                   "h100_loopmask.npz",
                   # AMD's documented register layouts, not a capture:
                   # tests/layouts/test_mfma_registers.py
                   "mfma_register_layouts.npz"}
# The MMA-Sim reference-model files (mmasim_golden_*.npz) are not hardware: test_golden.py.
CAPTURES = sorted(p.name for p in DATA.glob("*.npz")
                  if not p.name.endswith("_sample.npz") and p.name not in _FRONT_END_DATA
                  and not p.name.startswith("mmasim_"))


# The largest file runs with -m slow; by default its configurations are checked by
# tests/instructions/test_wmma.py (a sample) and test_reference.py (the reference against it).
# h100_layout.npz is checked whole by default by test_report_format_and_json; the warp
# captures by default in tests/warp and tests/numerics/test_formats.py (the same data); the
# sparse captures by default in tests/instructions/test_sparse.py (a configuration of it);
# h100_diverge.npz: by default one program in tests/warp/test_divergence_capture.py.
_SLOW = {"h100_mma_fp.npz", "h100_layout.npz", "capture_extra_warp.npz", "h100_warp.npz",
         "h100_sparse.npz", "h100_diverge.npz",
         "h100_cg.npz"}  # cooperative groups: a sample by default in tests/warp/test_cg.py
# By default these files are checked on a spread of their configurations (every n-th group
# of keys, a group being a key without its last "/" part), the whole file with -m slow.
_SPREAD = {"capture_extra_ldst.npz": 6, "capture_extra_mma.npz": 3,
           "capture_extra_subnormal.npz": 2, "h100_mma_int.npz": 3}


def _capture_params():
    for n in CAPTURES:
        if n in _SPREAD:
            yield pytest.param(n, _SPREAD[n], id=f"{n}-every{_SPREAD[n]}")
        yield pytest.param(n, 1, id=n,
                           marks=pytest.mark.slow if n in _SLOW or n in _SPREAD else ())


def _spread(name: str, every: int, folder) -> str:
    """A copy of the capture holding every ``every``-th group of its keys (and the keys
    outside any group, such as ``device``)."""
    z = np.load(DATA / name)
    groups = sorted({k.rsplit("/", 1)[0] for k in z.files if "/" in k})
    kept = set(groups[::every])
    assert len(kept) >= 2, f"{name}: too few groups to spread"
    path = folder / name
    np.savez(path, **{k: z[k] for k in z.files if "/" not in k or k.rsplit("/", 1)[0] in kept})
    return str(path)


@pytest.mark.parametrize("name, every", list(_capture_params()))
def test_capture_is_bit_exact(name, every, tmp_path):
    path = str(DATA / name) if every == 1 else _spread(name, every, tmp_path)
    results, device = conformance.check_file(path)
    assert "H100" in device
    assert results, "no group was checked"
    bad = [r for r in results if not r.ok]
    assert not bad, "\n".join(f"{r.group}: {r.matched}/{r.total} {r.note}" for r in bad)
    assert not [r for r in results if r.group.startswith("unhandled/")]


# By default on the file's first groups (every layout is checked bit for bit by
# tests/layouts/test_fragments.py); on the whole file with -m slow.
@pytest.mark.parametrize("groups", [pytest.param(8, id="part"),
                                    pytest.param(None, marks=pytest.mark.slow, id="whole")])
def test_report_format_and_json(tmp_path, capsys, groups):
    out = tmp_path / "report.json"
    path = DATA / "h100_layout.npz"
    if groups is not None:
        d = np.load(path)
        path = tmp_path / "h100_layout_part.npz"
        keys = ["device"] + [k for k in d.files if k != "device"][:groups]
        np.savez(path, **{k: d[k] for k in keys})
    status = conformance.main([str(path), "--json", str(out)])
    lines = capsys.readouterr().out.strip().splitlines()
    assert status == 0
    assert re.fullmatch(r"conformance: (\d+)/\1 bit-exact \(100\.000%\)", lines[-1])
    assert any(line.startswith("  layout/a.f16.m16n16k16.r ") for line in lines)
    assert any(line.startswith("  = layout: ") for line in lines)  # the family subtotal
    report = json.loads(out.read_text())
    assert report["matched"] == report["total"] > 0 and report["percent"] == "100.000"
    assert report["error_groups"] == 0 and report["mismatched_groups"] == 0
    groups = report["files"][0]["groups_detail"]
    assert sum(g["total"] for g in groups) == report["total"]


def test_a_flipped_bit_fails_and_is_named(tmp_path, capsys):
    d = dict(np.load(DATA / "h100_warp.npz"))
    keep = {k: d[k] for k in ("device", "cvt_x", "cvt_out")}
    keep["cvt_out"] = keep["cvt_out"].copy()
    keep["cvt_out"][2, 7] ^= 1  # one float_to_tf32 result
    path = tmp_path / "flipped.npz"
    np.savez(path, **keep)
    status = conformance.main([str(path)])
    out = capsys.readouterr().out
    assert status == 1
    n = keep["cvt_x"].size
    assert re.search(rf"cvt/float_to_tf32\s+{n}\s+{n - 1}\s+\d+\.\d{{3}}%\s+MISMATCH", out)
    assert out.strip().splitlines()[-1].startswith(f"conformance: {5 * n - 1}/{5 * n} ")


def test_cli_runs_as_a_module():
    res = subprocess.run([sys.executable, "-m", "jaxwarp.conformance", "--help"],
                         capture_output=True, text=True, check=True)
    assert "FILE.npz" in res.stdout
    res = subprocess.run([sys.executable, "-m", "jaxwarp.conformance", "/no/such.npz"],
                         capture_output=True, text=True)
    assert res.returncode == 2 and res.stderr.startswith("error: /no/such.npz: no such")
