"""The fp8 study runs (tiny): CSV columns, and promotion helps wgmma at K = 4096."""

import csv
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "experiments"))

import fp8_study  # noqa: E402


@pytest.mark.slow
def test_fp8_study_tiny(tmp_path):
    rows = fp8_study.main(["--ks", "4096", "--series", "wgmma,wgmma promote128", "--no-progress",
                           "--out", str(tmp_path), "--captures", str(tmp_path / "none")])
    with open(tmp_path / "fp8_study.csv") as f:
        table = list(csv.DictReader(f))
    assert tuple(table[0]) == fp8_study.COLUMNS
    assert (tmp_path / "fp8_study.png").stat().st_size > 1000
    assert {r["source"] for r in table} == {"model"}  # no captures there: skipped
    err = {(r["dist"], r["series"]): r for r in rows}
    for dist in fp8_study.DISTS:
        plain, promoted = err[dist, "wgmma"], err[dist, "wgmma promote128"]
        assert plain["K"] == 4096 and plain["elements"] == 512
        assert plain["max_rel_err"] > promoted["max_rel_err"]
        assert plain["median_rel_err"] > promoted["median_rel_err"]
    # All-positive inputs: the 14-bit accumulator loses percents, promotion keeps < 0.1%.
    assert err["uniform", "wgmma"]["median_rel_err"] > 0.01
    assert err["uniform", "wgmma promote128"]["max_rel_err"] < 1e-3
