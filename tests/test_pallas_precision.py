"""experiments/pallas_precision.py at a tiny size: the CSV and the plot are written, the
numbers are those of the kernels' instructions (Triton's bf16 wgmma keeps the fp32
accumulator's precision, the fp8 wgmma of jaxwarp.matmul its 14 bits), and the options
are checked."""

import csv
import importlib.util
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "experiments"))

import pallas_precision as pp  # noqa: E402

_NO_KERNELS = importlib.util.find_spec("jaxwarp.kernels") is None


@pytest.mark.xfail(_NO_KERNELS, run=False,
                   reason="jaxwarp.kernels (the Triton-style kernel) is not in this version")
def test_tiny_run_writes_csv_and_plot(tmp_path, capsys):
    rows = pp.main(["--ks", "128", "--trials", "1", "--no-progress", "--out", str(tmp_path),
                    "--series", "triton bf16,triton e4m3,matmul e4m3 wgmma"])
    with open(tmp_path / "pallas_precision.csv", newline="") as f:
        table = list(csv.DictReader(f))
    assert tuple(table[0]) == pp.COLUMNS and len(table) == len(rows) == 2 * 3
    png = tmp_path / "pallas_precision.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    err = {(r["dist"], r["series"]): r["max_rel_err"] for r in rows}
    assert all(r["elements"] == 128 * 128 for r in rows)
    # Triton's kernels accumulate in fp32 (bf16 wgmma, e4m3 via f16 mma.sync): errors
    # of a few fp32 ulps; the fp8 wgmma's 14-bit accumulation is orders of magnitude worse.
    assert 0 < err["uniform", "triton bf16"] < 1e-5
    assert err["uniform", "triton e4m3"] < 1e-6
    assert err["uniform", "matmul e4m3 wgmma"] > 100 * err["uniform", "triton bf16"]
    assert "| uniform |" in capsys.readouterr().out


def test_options_are_checked_and_documented(capsys):
    for argv, says in ((["--series", "nope"], "--series: unknown ['nope']"),
                       (["--ks", "100"], "multiple of 128"),
                       (["--ks", "x"], "comma-separated integers")):
        with pytest.raises(SystemExit):
            pp.main(argv)
        assert says in capsys.readouterr().err
    with pytest.raises(SystemExit):
        pp.main(["--help"])
    text = capsys.readouterr().out
    for option in ("--quick", "--trials", "--ks", "--series", "--seed", "--out",
                   "--no-progress"):
        assert option in text
