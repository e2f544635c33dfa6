"""Mosaic GPU kernels (JAX's ``jax.experimental.pallas.ops.gpu``) run on a CPU in JAX's GPU
interpret mode with every wgmma through jaxwarp's exact chain (``pallas.mosaic_gpu``).

The hardware test compares with ``hopper_matmul_mgpu`` run on an H200 (JAX 0.11.2); the
other kernels are consistency checks against the chain of ``jaxwarp.matmul(...,
instruction="wgmma")`` that their code implies, not hardware records.
"""

import dataclasses
import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxwarp._src.pallas import mosaic_gpu as mg

jax_gpu_interpret = pytest.importorskip("jax._src.pallas.mosaic_gpu.interpret.params")
hm = pytest.importorskip("jax.experimental.pallas.ops.gpu.hopper_matmul_mgpu")

SAMPLE = pathlib.Path(__file__).parent.parent / "data" / "pallas_sample.npz"
KEY = "pallas_mgpu/f16_128x128x64/"


@dataclasses.dataclass(frozen=True)
class Model:
    """A stand-in for the pallas layer's model record."""

    operand_format: str | None = None
    arch: str = "sm_90a"
    mode: str = "exact"
    instruction: str | None = None
    promote_every: int | None = None


def kernel_eqn(fn, *args, num_sms=2):
    """The Mosaic GPU equation of fn's jaxpr (traced with the target's SM count)."""
    with mg.target_sm_count(num_sms):
        closed = jax.make_jaxpr(fn)(*args)
    eqns = [e for e in closed.jaxpr.eqns if mg.is_mosaic_gpu(e)]
    assert len(eqns) == 1, [e.primitive.name for e in closed.jaxpr.eqns]
    return eqns[0]


def run(fn, *args, model=Model(), num_sms=2):
    return mg.run_kernel(kernel_eqn(fn, *args, num_sms=num_sms), list(args), model)


def hopper(config, c=False):
    if c:
        return lambda a, b, c_: hm.matmul(a, b, c_, config)
    return lambda a, b: hm.matmul(a, b, None, config)


def chain(a, b, c=None, acc_dtype=jnp.float32, **kw):
    """What one wgmma chain over all of K gives (the kernel's k loop continues the same
    chain from tile to tile), rounded to the kernel's output dtype."""
    fmt = mg._WGMMA_FORMATS[str(a.dtype)]
    acc = jnp.zeros((a.shape[0], b.shape[1]), acc_dtype) if c is None else c
    return mg.wgmma_chain(acc, a, b, operand_format=fmt, accumulator="f32", **kw)


def bits(x):
    x = np.asarray(x)
    return x.view({2: np.uint16, 4: np.uint32, 1: np.uint8}[x.dtype.itemsize])


def load_sample():
    if not SAMPLE.exists():
        pytest.skip(f"{SAMPLE.name} is absent (the capture helper writes it)")
    d = np.load(SAMPLE)
    if KEY + "a" not in d.files:
        pytest.skip(f"{SAMPLE.name} has no {KEY!r} record")
    meta = json.loads(str(d[KEY + "meta"]))
    return (d[KEY + "a"].view(np.float16), d[KEY + "b"].view(np.float16), d[KEY + "out"],
            meta)


def test_hardware_sample_slice():
    """hopper_matmul_mgpu on the first 128 x 128 output block equals the H200's bits.

    Output tiles are independent and each element's arithmetic is the k16 chain of
    wgmma from zero, the same for any tile m / n: tile_m=64 keeps two m iterations (one
    output tile makes XLA's CPU compiler fold the kernel's planar_snake down to a
    remainder by zero, a SIGFPE in JAX 0.10.2); tile_k and max_concurrent_steps are the
    record's."""
    a, b, out, meta = load_sample()
    a, b, want = a[:128], b[:, :128], out[:128, :128]
    assert (meta["tile_k"], meta["max_concurrent_steps"]) == (64, 2)
    cfg = hm.TuningConfig(tile_m=64, tile_n=64, tile_k=meta["tile_k"],
                          max_concurrent_steps=meta["max_concurrent_steps"])
    got, = run(hopper(cfg), jnp.asarray(a), jnp.asarray(b))
    assert got.dtype == jnp.float16
    np.testing.assert_array_equal(bits(got), want)
    # the sample is one the model matters for: numpy's f32 matmul differs from it
    npm = (a.astype(np.float32) @ b.astype(np.float32)).astype(np.float16)
    assert (bits(npm) != want).sum() > 0


@pytest.mark.slow
def test_hardware_sample_full_config():
    """The whole recorded problem (512 x 1024 @ 1024 x 512) with the recorded config."""
    a, b, want, meta = load_sample()
    if a.shape != (meta["M"], meta["K"]):
        pytest.skip("tests/data holds the trimmed sample only")
    cfg = hm.TuningConfig(tile_m=meta["tile_m"], tile_n=meta["tile_n"],
                          tile_k=meta["tile_k"],
                          max_concurrent_steps=meta["max_concurrent_steps"])
    got, = run(hopper(cfg), jnp.asarray(a), jnp.asarray(b), num_sms=132)
    np.testing.assert_array_equal(bits(got), want)


def test_model_is_used():
    """Operands whose exact wgmma chain and numpy's f32 matmul differ: the kernel gives
    the chain's bits, and JAX's plain interpret mode (np.matmul) gives the other."""
    rng = np.random.default_rng(1)
    a = jnp.asarray(rng.standard_normal((128, 256)), jnp.float16)
    b = jnp.asarray(rng.standard_normal((256, 128)), jnp.float16)
    cfg = hm.TuningConfig(tile_m=64, tile_n=64, tile_k=64, max_concurrent_steps=2)
    got, = run(hopper(cfg), a, b)
    want = chain(a, b).astype(jnp.float16)
    np.testing.assert_array_equal(bits(got), bits(want))
    npm = (np.asarray(a, np.float32) @ np.asarray(b, np.float32)).astype(np.float16)
    assert (bits(npm) != bits(want)).sum() > 0
