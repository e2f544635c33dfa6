"""The three studies in experiments/, run at tiny sizes: outputs written and numbers sane;
every script's command line documented and free of shell quoting."""

import argparse
import csv
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest
from conftest import fast_dot_rounding

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "experiments"))

import matmul_error  # noqa: E402
import seed_warp_programs  # noqa: E402
import training  # noqa: E402
import warp_programs  # noqa: E402
import wmma_examples  # noqa: E402

SCRIPTS = {"matmul_error.py": matmul_error, "training.py": training,
           "warp_programs.py": warp_programs, "seed_warp_programs.py": seed_warp_programs,
           "wmma_examples.py": wmma_examples}


def _read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


# --- Study 1: matrix product error. -----------------------------------------------


@pytest.fixture(scope="module")
def matmul_rows(tmp_path_factory):
    out = tmp_path_factory.mktemp("matmul")
    argv = ["--batch", "24", "--kmin", "16", "--kmax", "256", "--kfactor", "4", "--no-progress",
            "--out", str(out)]
    rows = matmul_error.main(argv)
    return out, rows


def _median(rows, dist, series, kind, k):
    want = (dist, series, kind, k)
    (r,) = [r for r in rows if (r["dist"], r["series"], r["kind"], r["K"]) == want]
    return float(r["median"]), float(r["mean"]), float(r["bias_mean"])


@pytest.mark.slow
def test_matmul_outputs(matmul_rows):
    out, rows = matmul_rows
    csv_rows = _read_csv(out / "matmul_error.csv")
    assert tuple(csv_rows[0]) == matmul_error.COLUMNS
    # 2 dists x 3 K values (16, 64, 256) x 7 series x 2 kinds.
    assert len(csv_rows) == len(rows) == 2 * 3 * 7 * 2
    png = out / "matmul_error.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size < 150_000
    for r in csv_rows:
        lo, med, hi = float(r["p10"]), float(r["median"]), float(r["p90"])
        assert 0 < lo <= med <= hi < 1e-2, r


@pytest.mark.slow
def test_matmul_exact_error_grows_with_k(matmul_rows):
    _, rows = matmul_rows
    for dist in ("normal", "uniform"):
        for series in ("bf16 exact", "tf32 exact", "f16 exact"):
            small = _median(rows, dist, series, "accumulation", 16)[0]
            big = _median(rows, dist, series, "accumulation", 256)[0]
            assert big > 2 * small, (dist, series)
        # Operand rounding dominates the total error: bf16 (8 bits) > tf32 (11 bits) > fp32.
        bf, tf, fp = (_median(rows, dist, s, "total", 256)[0] for s in
                      ("bf16 exact", "tf32 exact", "fp32"))
        assert bf > tf > 10 * fp


@pytest.mark.slow
def test_matmul_truncation_bias_on_positive_inputs(matmul_rows):
    rounding = fast_dot_rounding()
    _, rows = matmul_rows
    for fmt in ("f16", "bf16", "tf32"):
        for k in (64, 256):
            ex = _median(rows, "uniform", f"{fmt} exact", "accumulation", k)
            fa = _median(rows, "uniform", f"{fmt} fast", "accumulation", k)
            assert ex[2] < 0, (fmt, k)  # the model truncates: biased low
            if rounding == "tensor_core" and fmt != "tf32":
                # An f16/bf16 dot runs on the GPU's tensor cores: the exact model's bits,
                # so every statistic of the two series is the same number.
                assert ex == fa, (fmt, k)
                continue
            # A CPU's dot, and a GPU's fp32 dot at HIGHEST precision (fast tf32), round
            # to nearest.
            assert ex[1] > fa[1], (fmt, k)  # truncation error >= nearest, on average
            assert abs(ex[2]) > 10 * abs(fa[2]), (fmt, k)  # biased low


def test_matmul_sampling_is_deterministic():
    a1 = matmul_error.measure_point(3, "normal", 32, batch=4, mn=16,
                                    series=(("bf16 exact", "bf16", "exact"),))
    a2 = matmul_error.measure_point(3, "normal", 32, batch=4, mn=16,
                                    series=(("bf16 exact", "bf16", "exact"),))
    for key in a1:
        np.testing.assert_array_equal(a1[key], a2[key])


# --- Study 2: training. ---------------------------------------------------------------


@pytest.mark.slow
def test_training_outputs(tmp_path):
    argv = ["--models", "linear", "--runs", "2", "--steps", "50", "--configs", "fp32",
            "bf16-exact", "--no-progress", "--out", str(tmp_path)]
    results = training.main(argv)
    rows = _read_csv(tmp_path / "training.csv")
    assert tuple(rows[0]) == training.COLUMNS
    assert [(r["model"], r["config"]) for r in rows] == [("linear", "fp32"),
                                                         ("linear", "bf16 exact")]
    png = tmp_path / "training.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size < 150_000
    for label, (losses, _) in results["linear"].items():
        assert losses.shape == (2, 50) and np.all(np.isfinite(losses)), label
        assert losses[:, -5:].mean() < 0.5 * losses[:, :5].mean(), label


@pytest.mark.slow
def test_training_linear_loss_floor_follows_the_format():
    # Noise-free linear regression: the loss falls until the arithmetic stops it, bf16
    # (8-bit significands) well above tf32 (11 bits), tf32 well above fp32.
    cfg = dict(training.DEFAULT, runs=1, steps=600, batch=32)
    results = training.run(cfg, models=("linear",), configs=("fp32", "bf16 exact", "tf32 exact"),
                           progress=False)
    test = {label: float(t.mean()) for label, (_, t) in results["linear"].items()}
    assert test["bf16 exact"] > 10 * test["tf32 exact"] > 100 * test["fp32"], test


@pytest.mark.slow
def test_training_mlp_learns_through_the_tensor_core():
    cfg = dict(training.DEFAULT, runs=2, steps=40)
    results = training.run(cfg, models=("mlp",), configs=("bf16 exact",), progress=False)
    losses, test = results["mlp"]["bf16 exact"]
    assert losses.shape == (2, 40) and np.all(np.isfinite(losses)) and np.all(np.isfinite(test))
    assert losses[:, -5:].mean() < 0.5 * losses[:, :5].mean()


# --- Study 3: warp programs. ----------------------------------------------------------


def test_warp_programs_match_numpy(tmp_path):
    rows = warp_programs.main(["--warps", "999", "--repeat", "1", "--no-progress",
                               "--out", str(tmp_path)])
    assert {r["program"] for r in rows} == set(warp_programs.PROGRAMS)
    assert all(r["check"] == "ok" and float(r["warps_per_s"]) > 0 for r in rows)
    csv_rows = _read_csv(tmp_path / "warp_programs.csv")
    assert tuple(csv_rows[0]) == warp_programs.COLUMNS and len(csv_rows) == len(rows)


@pytest.mark.slow
def test_warp_sort_and_scan_directly():
    import jax

    x = warp_programs.random_warps(300, seed=5)
    np.testing.assert_array_equal(jax.vmap(warp_programs.bitonic_sort)(x), np.sort(x, axis=1))
    np.testing.assert_array_equal(jax.vmap(warp_programs.inclusive_scan)(x),
                                  np.cumsum(x, axis=1, dtype=np.int32))
    # Ties and already-sorted / reversed warps.
    special = np.stack([np.zeros(32), np.arange(32), np.arange(32)[::-1],
                        np.arange(32) % 3]).astype(np.int32)
    np.testing.assert_array_equal(jax.vmap(warp_programs.bitonic_sort)(special),
                                  np.sort(special, axis=1))


# --- The scripts' command lines. -----------------------------------------------------


class _Parsed(Exception):
    pass


def _parser_of(module, monkeypatch) -> argparse.ArgumentParser:
    """The ArgumentParser a script's main() builds (caught at parse_args)."""
    seen = {}

    def capture(self, *args, **kwargs):
        seen["parser"] = self
        raise _Parsed

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", capture)
    with pytest.raises(_Parsed):
        module.main([]) if module.main.__code__.co_argcount else module.main()
    return seen["parser"]


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_every_option_is_documented_and_needs_no_quoting(script, monkeypatch):
    parser = _parser_of(SCRIPTS[script], monkeypatch)
    for action in parser._actions:
        assert action.help, (script, action.option_strings)
        for choice in action.choices or ():
            # Plain tokens: typed as is in any shell, no quotes, no commas.
            assert re.fullmatch(r"[A-Za-z0-9_.+-]+", str(choice)), (script, choice)


@pytest.mark.parametrize("script", ["matmul_error.py", "training.py", "warp_programs.py"])
def test_help(script):
    res = subprocess.run([sys.executable, str(ROOT / "experiments" / script), "--help"],
                         capture_output=True, text=True, check=True, timeout=60)
    assert "--large" in res.stdout and "--seed" in res.stdout and "--out" in res.stdout
    assert "default" in res.stdout


@pytest.mark.parametrize("argv, message", [
    (["--kmin", "10"], "a multiple of 16"),
    (["--batch", "0"], ">= 1"),
    (["--kmin", "64", "--kmax", "32"], "kmax"),
    (["--dists", "gauss"], "invalid choice"),
])
def test_matmul_error_rejects_bad_options(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        matmul_error.main(argv)
    assert e.value.code == 2 and message in capsys.readouterr().err


def test_helpers_are_not_scripts():
    """Modules that start with _ are imported by the scripts; every other file is a script."""
    for path in (ROOT / "experiments").glob("*.py"):
        text = path.read_text()
        is_script = 'if __name__ == "__main__":' in text
        assert is_script != path.name.startswith("_"), path.name
        assert not text.startswith("#!") or is_script, path.name


def test_program_and_config_names_are_plain_tokens():
    for name in [*warp_programs.PROGRAMS, *map(training.config_token, training.CONFIGS)]:
        assert re.fullmatch(r"[A-Za-z0-9_.+-]+", name), name
    assert set(warp_programs.DESCRIPTIONS) == set(warp_programs.PROGRAMS)


def test_coinciding_series_are_named_together():
    k = np.array([16, 32, 64])
    curves = {"f16 exact": np.array([1.0, 2, 4]), "f16 fast": np.array([1.01, 2, 4]),
              "tf32 exact": np.array([1.0, 2.02, 4]), "bf16 exact": np.array([1.0, 3, 9])}
    groups = matmul_error._coinciding(curves)
    assert groups == [["f16 exact", "f16 fast", "tf32 exact"], ["bf16 exact"]]
    assert matmul_error._group_name(groups[0]) == "f16 exact/fast = tf32 exact"
    refs = dict(matmul_error._reference_slopes(k, curves))
    np.testing.assert_allclose(refs["∝ K"] / refs["∝ K"][0], k / 16)
    np.testing.assert_allclose(refs["∝ √K"] / refs["∝ √K"][0], np.sqrt(k / 16))


@pytest.mark.slow
def test_matmul_error_on_an_amd_target_runs_its_mfma():
    """--arch gfx942: the exact series are CDNA3's MFMA chains (other numbers than the
    H100's on the same matrices), fast mode and fp32 are the same."""
    kw = dict(batch=4, mn=16, dists=("uniform",), progress=False)
    amd = matmul_error.run([64], arch="gfx942", **kw)
    h100 = matmul_error.run([64], **kw)
    assert {r["series"] for r in amd} == {"f16 exact", "f16 fast", "bf16 exact", "bf16 fast",
                                         "fp32"}

    def med(rows, series):
        return [r["median"] for r in rows if r["series"] == series]

    assert med(amd, "f16 exact") != med(h100, "f16 exact")
    assert med(amd, "f16 fast") == med(h100, "f16 fast")
    assert med(amd, "fp32") == med(h100, "fp32")
