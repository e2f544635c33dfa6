"""``jaxwarp.emulate`` on the AMD targets (``arch="gfx908" | "gfx90a" | "gfx942"``): every
product is ``jaxwarp.matmul(..., instruction="mfma", arch=...)``, bit for bit, and so are
its gradients."""

import pathlib
import sys

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import jaxwarp
from jaxwarp import emulate

RNG = np.random.default_rng(7)
# M, K, N not multiples of the 32 x 32 x k blocks: the GEMM pads them itself.
A = (RNG.standard_normal((40, 40)) * 2.0 ** RNG.integers(-6, 6, (40, 40))).astype(np.float32)
B = RNG.standard_normal((40, 24)).astype(np.float32)


def bits(x):
    x = np.asarray(x)
    return x.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[x.dtype.itemsize])


def mfma(x, y, fmt, arch):
    return jaxwarp.matmul(x, y, operand_format=fmt, instruction="mfma", arch=arch)


SLOW = pytest.mark.slow  # each a few seconds of XLA compile on a CPU


@pytest.mark.parametrize("arch, fmt", [
    ("gfx942", "f16"), ("gfx90a", "bf16"), ("gfx908", "f32"), ("MI300", "e4m3fnuz"),
    pytest.param("gfx942", "bf16", marks=SLOW), pytest.param("gfx942", "tf32", marks=SLOW),
    pytest.param("gfx908", "f16", marks=SLOW), pytest.param("gfx908", "bf16", marks=SLOW),
    pytest.param("CDNA2", "f16", marks=SLOW)])
def test_product_is_the_mfma_gemm(arch, fmt):
    f = emulate(lambda x, y: x @ y, operand_format=fmt, arch=arch)
    np.testing.assert_array_equal(bits(f(A, B)), bits(mfma(A, B, fmt, arch)))
    assert (f.config["instruction"], f.config["arch"]) == ("mfma", arch)


def test_format_dtypes_and_batched_products():
    # dtypes name the formats; a batched dot_general is the GEMM per batch element.
    x = np.stack([A, -A])
    y = np.stack([B, 2 * B])
    f = emulate(lambda p, q: jnp.einsum("bmk,bkn->bmn", p, q),
                operand_format=ml_dtypes.float8_e5m2fnuz, arch="gfx942")
    want = np.stack([mfma(x[i], y[i], "e5m2fnuz", "gfx942") for i in range(2)])
    np.testing.assert_array_equal(bits(f(x, y)), bits(want))
    # instruction="mfma" without arch: matmul's default target, MI300's.
    g = emulate(lambda p, q: p @ q, operand_format=jnp.bfloat16, instruction="mfma")
    assert (g.config["operand_format"], g.config["arch"]) == ("bf16", "gfx942")


def test_differs_from_the_h100():
    # The two targets' arithmetic differs (else the test above could not fail).
    mi300 = emulate(lambda x, y: x @ y, operand_format="f16", arch="gfx942")(A, B)
    h100 = emulate(lambda x, y: x @ y, operand_format="f16")(A, B)
    assert not np.array_equal(bits(mi300), bits(h100))


def _tanh_loss(mm):
    return lambda x, y: jnp.sum(jnp.tanh(mm(x, y)))


@pytest.mark.parametrize("arch, fmt", [("gfx942", "bf16"),
                                       pytest.param("gfx908", "f16", marks=SLOW)])
def test_gradients_are_mfma_chains(arch, fmt):
    got = jax.grad(emulate(_tanh_loss(jnp.matmul), operand_format=fmt, arch=arch),
                   (0, 1))(A, B)
    # The backward products by hand: dA = dD @ B^T, dB = A^T @ dD on the same MFMA.
    dd = jax.jit(jax.grad(lambda d: jnp.sum(jnp.tanh(d))))(mfma(A, B, fmt, arch))
    by_hand = (mfma(dd, B.T, fmt, arch), mfma(A.T, dd, fmt, arch))
    for g, h in zip(got, by_hand, strict=True):
        np.testing.assert_array_equal(bits(g), bits(h))


@SLOW
@pytest.mark.parametrize("arch, fmt", [("gfx942", "bf16"), ("gfx90a", "f16")])
def test_gradients_equal_matmuls_inside_and_outside(arch, fmt):
    want = jax.jit(jax.grad(_tanh_loss(lambda x, y: mfma(x, y, fmt, arch)), (0, 1)))(A, B)
    outside = jax.grad(emulate(_tanh_loss(jnp.matmul), operand_format=fmt, arch=arch),
                       (0, 1))(A, B)
    # emulate(grad(f)): the transposed products are emulated as products themselves.
    inside = emulate(jax.grad(_tanh_loss(jnp.matmul), (0, 1)), operand_format=fmt,
                     arch=arch)(A, B)
    for g, h, w in zip(outside, inside, want, strict=True):
        np.testing.assert_array_equal(bits(g), bits(w))
        np.testing.assert_array_equal(bits(h), bits(w))


def test_fnuz_products_have_no_gradient_rule():
    f = emulate(lambda x, y: jnp.sum(x @ y), operand_format="e4m3fnuz", arch="gfx942")
    with pytest.raises(NotImplementedError, match="no gradient rule for e4m3fnuz"):
        jax.grad(f)(A, B)
    # backward_format: emulate's own rule, the backward products in bf16 MFMA chains.
    g = jax.grad(emulate(lambda x, y: jnp.sum(x @ y), operand_format="e4m3fnuz",
                         backward_format="bf16", arch="gfx942"))(A, B)
    ones = np.ones((40, 24), np.float32)  # d sum / dD
    np.testing.assert_array_equal(bits(g), bits(mfma(ones, B.T, "bf16", "gfx942")))


@pytest.mark.parametrize("kw, must", [
    (dict(operand_format="e4m3", arch="gfx942"),
     ("operand_format='e4m3'", "allowed", "'e4m3fnuz'", "'f16'")),
    (dict(operand_format="tf32", arch="gfx90a"), ("operand_format='tf32'", "CDNA2", "'bf16'")),
    (dict(operand_format="f16", arch="gfx942", mode="fast"), ("mode='fast'", "('exact',)")),
    (dict(operand_format="f16", arch="gfx942", instruction="wgmma"),
     ("instruction='wgmma'", "'mfma' or None")),
    (dict(recipe="mxfp8", arch="gfx942"), ("recipe='mxfp8'", "no block-scaled", "recipe=None")),
    (dict(operand_format="f16", arch="sm_90", instruction="mfma"),
     ("arch='sm_90'", "allowed", "'gfx942'")),
    (dict(operand_format="f16", arch="gfx1100", instruction="mfma"),
     ("arch='gfx1100'", "'gfx908'", "'CDNA3'")),
])
def test_bad_settings_name_what_is_allowed(kw, must):
    with pytest.raises(ValueError) as e:
        emulate(lambda x, y: x @ y, **kw)
    for m in must:
        assert m in str(e.value), (m, str(e.value))


# --- The studies' --arch (experiments/emulated_training.py, experiments/training.py). ---

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "experiments"))
import emulated_training  # noqa: E402
import training  # noqa: E402


def test_studies_take_the_amd_targets():
    et = emulated_training
    assert et.settings_for("bf16") is et.CONFIGS["bf16"]  # the default run is unchanged
    assert et.settings_for("bf16", "gfx942") == {"operand_format": "bf16", "arch": "gfx942"}
    with pytest.raises(NotImplementedError, match=r"operand_format='tf32'.*CDNA2.*allowed"):
        et.settings_for("tf32", "gfx90a")
    with pytest.raises(NotImplementedError, match="scaling recipes"):
        et.settings_for("fp8-promote128", "gfx942")
    assert training.skip_reason("bf16 exact", "gfx942") is None
    assert training.skip_reason("bf16 fast", "sm_90") is None
    assert "exact mode only" in training.skip_reason("bf16 fast", "gfx942")
    assert "CDNA1" in training.skip_reason("tf32 exact", "gfx908")


@SLOW
def test_emulated_training_runs_on_gfx942(tmp_path, capsys):
    emulated_training.main(["--arch", "gfx942", "--configs", "bf16", "fp8", "--p", "5",
                            "--width", "8", "--heads", "2", "--steps", "2", "--log-every", "1",
                            "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert "products on gfx942" in out and "fp8: skipped" in out
    rows = (tmp_path / "emulated_training_gfx942.csv").read_text().splitlines()
    assert rows[0] == "config,seed,step,train_loss,accuracy" and len(rows) == 3
    assert not (tmp_path / "emulated_training.csv").exists()


def test_kernels_and_sparse_operands_are_refused_on_amd_targets():
    from jaxwarp.kernels import triton_matmul  # noqa: PLC0415

    a = jnp.ones((64, 32), jnp.float16)
    b = jnp.ones((32, 64), jnp.float16)
    kernel = emulate(lambda x, y: triton_matmul(x, y, block=(64, 64, 32), interpret=True),
                     operand_format="f16", arch="gfx942")
    with pytest.raises(jaxwarp.UnsupportedProductError, match="NVIDIA targets only"):
        kernel(a, b)
    sparse = emulate(lambda x, w: x @ jaxwarp.sparse.as_2_4(w, axis=0), operand_format="f16",
                     arch="gfx90a")
    with pytest.raises(ValueError, match=r"arch='gfx90a'.*no sparse MFMA.*allowed"):
        sparse(a, b)
