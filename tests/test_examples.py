"""The seed documents' warp programs print what the GPU prints."""

import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "experiments"))

import seed_warp_programs as seed  # noqa: E402


def _expected_blocks():
    text = (ROOT / "tests" / "data" / "seed_shfl_outputs.txt").read_text()
    return dict(re.findall(r"## (.*?)\n(.*?)(?=\n## |\Z)", text, re.S))


def test_shuffle_programs_print_what_the_gpu_prints():
    want = _expected_blocks()
    assert len(want) == 4
    for name, fn, width in seed.SHUFFLES:
        assert "\n".join(seed.shuffle_lines(fn, width)) == want[name].strip(), name


def test_worked_examples():
    np.testing.assert_array_equal(seed.bcast(1234), 1234)
    start = 31 - np.arange(32)
    want = np.concatenate([np.cumsum(start[i : i + 8]) for i in range(0, 32, 8)])
    np.testing.assert_array_equal(seed.scan4(), want)
    np.testing.assert_array_equal(seed.warp_reduce(), np.full(32, 496))


def test_script_runs():
    out = subprocess.run(
        [sys.executable, str(ROOT / "experiments" / "seed_warp_programs.py")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "Thread 31 final value = 496" in out and "failed" not in out


import jax.numpy as jnp  # noqa: E402
import wmma_examples  # noqa: E402

import jaxwarp  # noqa: E402


def test_guide_wmma_kernel_equals_the_model():
    rng = np.random.default_rng(1)
    a = rng.normal(size=(16, 16)).astype(np.float16)
    b = rng.normal(size=(16, 16)).astype(np.float16)
    c = np.asarray(wmma_examples.wmma_ker(jnp.asarray(a.T.reshape(-1)),
                                          jnp.asarray(b.reshape(-1)))).reshape(16, 16)
    want = np.asarray(jaxwarp.matmul(jnp.asarray(a, jnp.float32), jnp.asarray(b, jnp.float32)))
    np.testing.assert_array_equal(c.view(np.uint32), want.view(np.uint32))


@pytest.mark.slow
def test_seed_tiled_gemm_one_warp_per_tile():
    rng = np.random.default_rng(2)
    A = rng.normal(size=(32, 64)).astype(np.float16)
    B = rng.normal(size=(64, 48)).astype(np.float16)
    C = np.asarray(wmma_examples.tiled_gemm(jnp.asarray(A), jnp.asarray(B)))
    want = np.asarray(jaxwarp.matmul(jnp.asarray(A, jnp.float32), jnp.asarray(B, jnp.float32)))
    np.testing.assert_array_equal(C.view(np.uint32), want.view(np.uint32))
    assert np.abs(C - A.astype(np.float64) @ B.astype(np.float64)).max() < 1e-4
