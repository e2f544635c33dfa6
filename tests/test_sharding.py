"""sharded_vmap: the batch axis split over devices gives the single-device results bit for bit.

XLA_FLAGS must be set before jax starts, so the 4-device check runs in a
subprocess with ``--xla_force_host_platform_device_count=4``.
"""

import os
import pathlib
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxwarp
from jaxwarp._src.sharding import batch_mesh, shard_batch, sharded_vmap

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_one_device_equals_vmap():
    x = np.arange(7 * 32, dtype=np.uint32).reshape(7, 32)
    f = lambda v: jaxwarp.reduce_add_sync(0xFFFFFFFF, v)  # noqa: E731
    got = sharded_vmap(f)(x)
    np.testing.assert_array_equal(got, jax.vmap(f)(x))


def test_in_axes_none_and_pytrees():
    xs = {"a": np.ones((5, 32), np.int32), "b": np.arange(5, dtype=np.int32)}
    f = lambda t, s: t["a"] * t["b"] + s  # noqa: E731
    got = sharded_vmap(f, in_axes=(0, None))(xs, jnp.int32(3))
    np.testing.assert_array_equal(got, np.arange(5)[:, None] * np.ones((5, 32)) + 3)


def test_shard_batch_pads_with_last_item():
    mesh = batch_mesh()
    x = np.arange(6, dtype=np.int32)
    placed, n = shard_batch(x, mesh)
    assert n == 6 and placed.shape[0] % mesh.size == 0
    np.testing.assert_array_equal(np.asarray(placed)[:6], x)


@pytest.mark.parametrize("in_axes", [1, (0, 2)], ids=["axis1", "axis2"])
def test_bad_in_axes(in_axes):
    with pytest.raises(ValueError, match="in_axes"):
        sharded_vmap(lambda a, b: a, in_axes=in_axes)(np.ones((2, 3)), np.ones((2, 3)))


def test_mismatched_batch_sizes():
    with pytest.raises(ValueError, match="leading sizes"):
        sharded_vmap(lambda a, b: a + b)(np.ones((2, 3), np.float32), np.ones((3, 3), np.float32))


_FOUR_DEVICES = textwrap.dedent(
    """
    import sys
    import jax, jax.numpy as jnp, numpy as np
    sys.path.insert(0, "experiments")
    import warp_programs as wp
    from jaxwarp._src.gemm.matmul import matmul
    from jaxwarp._src.sharding import sharded_vmap
    import jaxwarp

    # Before the backend starts: the deterministic flags join the device-count flag, once.
    flags = jaxwarp.deterministic_xla()
    assert "--xla_force_host_platform_device_count=4" in flags.split(), flags
    assert all(f in flags.split() for f in jaxwarp.DETERMINISTIC_XLA_FLAGS), flags
    assert jaxwarp.deterministic_xla() == flags
    assert len(jax.devices()) == 4, jax.devices()
    rng = np.random.default_rng(0)

    def same(fn, *args, in_axes=0):
        one = jax.jit(jax.vmap(fn, in_axes=in_axes))(*args)  # default device only
        f = sharded_vmap(fn, in_axes=in_axes)
        assert f.mesh.size == 4
        many = f(*args)
        for o, m in zip(jax.tree_util.tree_leaves(one), jax.tree_util.tree_leaves(many)):
            assert len(o.sharding.device_set) == 1
            o, m = np.asarray(o), np.asarray(m)
            assert o.shape == m.shape and o.dtype == m.dtype, (o.shape, m.shape)
            assert o.tobytes() == m.tobytes(), fn
        return many

    # Batches of 8 (no padding) and 10 (padded to 12, stripped), matrices of 16x32x16.
    for n in (8, 10):
        a = rng.standard_normal((n, 16, 32), dtype=np.float32)
        b = rng.standard_normal((n, 32, 16), dtype=np.float32)
        for fmt in ("f16", "bf16", "tf32"):
            for mode in ("exact", "fast") if n == 10 else ("exact",):
                same(lambda x, y: matmul(x, y, operand_format=fmt, mode=mode), a, b)
        same(lambda x, y: jnp.matmul(x, y, precision="highest"), a, b)
        g = lambda x, y: jax.grad(
            lambda x: matmul(x, y, operand_format="bf16").sum())(x)
        same(g, a, b)

    # The sharded output really lives on 4 devices when no padding is needed.
    out = sharded_vmap(lambda x: x * 2)(np.ones((8, 32), np.int32))
    assert len(out.sharding.device_set) == 4
    assert len(out.addressable_shards) == 4

    # Warp programs over 4 devices, with padding (1001 warps).
    data = wp.random_warps(1001, seed=1)
    for name, (fn, ref) in wp.PROGRAMS.items():
        got = same(fn, data)
        np.testing.assert_array_equal(np.asarray(got), ref(data), err_msg=name)
    print("ok")
    """
)


def test_deterministic_xla_too_late(monkeypatch):
    # This process has a backend already: a missing flag can no longer take effect.
    jax.devices()
    monkeypatch.setenv("XLA_FLAGS", "--xla_gpu_autotune_level=0")
    with pytest.raises(RuntimeError, match="already started a backend.*xla_gpu_deterministic_ops"):
        jaxwarp.deterministic_xla()
    monkeypatch.setenv("XLA_FLAGS", " ".join(jaxwarp.DETERMINISTIC_XLA_FLAGS))
    assert jaxwarp.deterministic_xla() == " ".join(jaxwarp.DETERMINISTIC_XLA_FLAGS)


@pytest.mark.slow
def test_four_devices_bit_for_bit():
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4",
               JAX_PLATFORMS="cpu")
    res = subprocess.run([sys.executable, "-c", _FOUR_DEVICES], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.strip().endswith("ok")


# Slow: the same examples run by default in tests/test_docs.py::test_docstring_example.
@pytest.mark.slow
def test_docstring_examples():
    import doctest

    from jaxwarp._src import sharding

    result = doctest.testmod(sharding, extraglobs={"jaxwarp": jaxwarp, "jnp": jnp},
                             optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
