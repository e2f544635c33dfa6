"""The microscaling study runs (tiny): CSV columns and plots of both parts, exact sums
give zero accumulation error, and zero-padding K in front leaves the GEMM's bits
unchanged."""

import csv
import pathlib
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "experiments"))

import mx_study  # noqa: E402

SERIES = {s.label: s for s in mx_study.SERIES}


@pytest.mark.slow
def test_mx_study_tiny(tmp_path):
    rows = mx_study.main(["--parts", "gemm", "--ks", "128,256", "--series",
                          "MXFP8 e4m3,Hopper e4m3", "--no-progress", "--out",
                          str(tmp_path)])["gemm"]
    with open(tmp_path / "mx_study.csv") as f:
        table = list(csv.DictReader(f))
    assert tuple(table[0]) == mx_study.COLUMNS
    assert len(table) == len(rows) == 2 * 2 * 2 * 2  # measures x dists x series x K
    assert (tmp_path / "mx_study.png").stat().st_size > 1000
    err = {(r["measure"], r["dist"], r["series"], r["K"]): r for r in rows}
    for dist in mx_study.DISTS:
        # Hopper's 14-bit fp8 sum loses far more than sm_100a's fp32-level one.
        mx, hop = err["accumulation", dist, "MXFP8 e4m3", 256], err[
            "accumulation", dist, "Hopper e4m3", 256]
        assert mx["max_rel_err"] <= 256 * mx_study.FP32_U < hop["max_rel_err"]
        # The total error is the quantization's: far above the accumulation error.
        assert err["total", dist, "MXFP8 e4m3", 256]["median_rel_err"] > 100 * mx[
            "max_rel_err"]


@pytest.mark.slow
def test_exact_sums_have_zero_accumulation_error():
    # Integers 0..7 are e4m3 values under their block's scale (OCP rule: amax 4..7 ->
    # 2**(2 - 8), so at most 448; smaller amax, smaller scale); every partial sum of
    # their products is an integer below 2**24, so an fp32-exact accumulation gives
    # the exact product: zero error, in one instruction (K = 32) and chained over 8 of
    # them (K = 256). Random non-integers do not.
    rng = np.random.default_rng(1)
    s = SERIES["MXFP8 e4m3"]
    for k in (32, 256):
        a = rng.integers(0, 8, (2, 128, k)).astype(np.float32)
        b = rng.integers(0, 8, (2, k, 16)).astype(np.float32)
        e = mx_study.errors_of(s, a, b)
        np.testing.assert_array_equal(e["accumulation"], 0)
        np.testing.assert_array_equal(e["total"], 0)
    a = rng.uniform(0, 1, (1, 128, 256)).astype(np.float32)
    b = rng.uniform(0, 1, (1, 256, 16)).astype(np.float32)
    assert mx_study.errors_of(s, a, b)["accumulation"].max() > 0


@pytest.mark.slow
@pytest.mark.parametrize("label", ["NVFP4", "Hopper e4m3 promote128"])
def test_zero_padding_in_front_keeps_the_bits(label):
    rng = np.random.default_rng(2)
    a = rng.standard_normal((1, 64, 256)).astype(np.float32)
    b = rng.standard_normal((1, 256, 16)).astype(np.float32)
    ap = np.concatenate([np.zeros((1, 64, 128), np.float32), a], axis=2)
    bp = np.concatenate([np.zeros((1, 128, 16), np.float32), b], axis=1)
    fn = mx_study.gemm_fn(SERIES[label])
    d, dp = np.asarray(fn(a, b)[0]), np.asarray(fn(ap, bp)[0])
    np.testing.assert_array_equal(dp.view(np.uint32), d.view(np.uint32))


@pytest.mark.slow
def test_mx_study_training_tiny(tmp_path):
    rows = mx_study.main(["--parts", "train", "--train-steps", "3", "--train-configs",
                          "bf16,mxfp8", "--no-progress", "--out", str(tmp_path)])["train"]
    with open(tmp_path / "mx_study_training.csv") as f:
        table = list(csv.DictReader(f))
    assert tuple(table[0]) == mx_study.TRAIN_COLUMNS
    assert (tmp_path / "mx_study_training.png").stat().st_size > 1000
    assert [(r["config"], r["step"]) for r in rows] == [("bf16", 3), ("mxfp8", 3)]
    bf16, mxfp8 = rows
    assert bf16["ratio_to_bf16"] == 1.0
    assert mxfp8["ratio_to_bf16"] == mxfp8["train_loss"] / bf16["train_loss"] != 1.0
