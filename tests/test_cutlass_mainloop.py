"""experiments/cutlass_mainloop.py: ldmatrix -> mma.sync main loop == the logical GEMM,
bit for bit."""

import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "experiments"))

import cutlass_mainloop as cm  # noqa: E402


def _bits(x):
    return np.asarray(jax.lax.bitcast_convert_type(x, jnp.uint32))


@pytest.mark.parametrize("dtype, k", [("f16", 64),
                                      pytest.param("e4m3", 64, marks=pytest.mark.slow)])
def test_mainloop_equals_logical_gemm(dtype, k):
    r = cm.run(warps=3, k=k, dtype=dtype, seed=1)
    assert r["bit_equal"] == r["elements"] == 3 * 16 * 16
    a, b = cm.make_tiles(np.random.default_rng(1), 3, k, dtype)
    np.testing.assert_array_equal(_bits(r["c"]), _bits(cm.reference_steps(a, b, dtype)))
    assert r["max_rel_err_vs_f64"] < 1e-3
    assert r["mma_sync"] == 3 * 2 * (k // cm.instr_k(dtype))


def test_main_prints_summary(capsys):
    cm.main(["--warps", "3", "--k", "64", "--seed", "1"])  # same shapes: jit cache hit
    out = capsys.readouterr().out
    assert "bit-equal to datapath.mma GEMM: 768/768 elements" in out
    assert "m16n8k16.row.col.f32.f16.f16.f32" in out


def test_bad_arguments():
    with pytest.raises(ValueError, match="multiple of 32"):
        cm.run(warps=1, k=48, dtype="e4m3")
    with pytest.raises(ValueError, match="allowed"):
        cm.run(warps=1, k=32, dtype="bf16")


# Slow: a fresh interpreter for the --help text only.
@pytest.mark.slow
def test_help():
    out = subprocess.run([sys.executable, str(ROOT / "experiments" / "cutlass_mainloop.py"),
                          "--help"], capture_output=True, text=True, check=True).stdout
    assert "--warps" in out and "--dtype" in out
