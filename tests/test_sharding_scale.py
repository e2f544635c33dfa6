"""Scale-out keeps the bits: data parallel, tensor parallel, several processes.

On 4 forced CPU devices (``--xla_force_host_platform_device_count=4``, set before
jax starts, hence subprocesses):

* ``grouped_value_and_grad`` of an emulated loss gives the same value and
  gradients on meshes of 1, 2 and 4 devices (exact mode);
* an emulated product with ``a`` sharded along M or ``b`` along N, or with a
  ``with_sharding_constraint`` inside the function, keeps the sharding through
  ``emulate`` and equals the 1-device product (exact and fast);
* ``experiments/multihost.py`` on 2 processes of 2 devices (``jax.distributed``,
  gloo) prints the same digests as one process on one device.
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

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _run(code: str, devices: int = 4, timeout: int = 300) -> str:
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}")
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=timeout)
    assert res.returncode == 0, res.stderr[-3000:]
    return res.stdout


_COMMON = textwrap.dedent(
    """
    import jax, jax.numpy as jnp, numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P
    import jaxwarp

    assert len(jax.devices()) == 4, jax.devices()
    rng = np.random.default_rng(0)

    def same(x, y):
        lx, ly = jax.tree_util.tree_leaves(x), jax.tree_util.tree_leaves(y)
        return len(lx) == len(ly) and all(
            np.asarray(a).dtype == np.asarray(b).dtype
            and np.asarray(a).tobytes() == np.asarray(b).tobytes() for a, b in zip(lx, ly))

    def mlp_loss(params, x, y):
        h = jax.nn.relu(x @ params["w1"] + params["b1"])
        return jnp.mean((h @ params["w2"] - y) ** 2)

    params = {"w1": rng.standard_normal((16, 32), np.float32),
              "b1": rng.standard_normal(32, np.float32),
              "w2": rng.standard_normal((32, 16), np.float32)}
    x = rng.standard_normal((64, 16), np.float32)
    y = rng.standard_normal((64, 16), np.float32)

    def grouped(loss, d):
        mesh = jaxwarp.batch_mesh(jax.devices()[:d])
        step = jax.jit(jaxwarp.grouped_value_and_grad(loss, 4, mesh=mesh))
        batch = NamedSharding(mesh, P("batch"))
        out = step(params, jax.device_put(x, batch), jax.device_put(y, batch))
        assert len(out[1]["w1"].sharding.device_set) == d  # replicated over the mesh
        return out
    """
)

_DATA_PARALLEL = _COMMON + textwrap.dedent(
    """
    loss = jaxwarp.emulate(mlp_loss, operand_format="bf16", mode="exact")
    one = grouped(loss, 1)
    for d in (2, 4):
        assert same(one, grouped(loss, d)), d
    # It is the mean of the groups' means: close to the whole batch's gradient.
    value, grads = jax.value_and_grad(loss)(params, x, y)
    np.testing.assert_allclose(one[0], value, rtol=1e-6)
    np.testing.assert_allclose(one[1]["w1"], grads["w1"], rtol=1e-5, atol=1e-6)
    print("ok")
    """
)

_TENSOR_PARALLEL = _COMMON + textwrap.dedent(
    """
    mesh = jaxwarp.batch_mesh()
    a = rng.standard_normal((64, 48), np.float32)
    b = rng.standard_normal((48, 32), np.float32)
    rows, cols = NamedSharding(mesh, P("batch", None)), NamedSharding(mesh, P(None, "batch"))
    for mode in ("exact", "fast"):
        f = jax.jit(jaxwarp.emulate(lambda a, b: a @ b, operand_format="bf16", mode=mode))
        one = f(a, b)
        assert len(one.sharding.device_set) == 1
        by_m = f(jax.device_put(a, rows), b)
        by_n = f(a, jax.device_put(b, cols))
        assert by_m.sharding.spec == P("batch", None) and len(by_m.sharding.device_set) == 4
        assert by_n.sharding.spec == P(None, "batch") and len(by_n.sharding.device_set) == 4
        # Fast mode's bits are the backend dot's, which may sum a shard differently.
        assert mode == "fast" or (same(one, by_m) and same(one, by_n)), mode
        # A constraint inside the emulated function survives emulate's interpreter.
        g = jax.jit(jaxwarp.emulate(
            lambda a, b: jax.lax.with_sharding_constraint(a, rows) @ b,
            operand_format="bf16", mode=mode))
        assert "sharding_constraint" in str(jax.make_jaxpr(g)(a, b))
        inside = g(a, b)
        assert len(inside.sharding.device_set) == 4, inside.sharding
        assert mode == "fast" or same(one, inside), mode
    print("ok")
    """
)


# The quick default check: data parallel (plain fp32 loss) and tensor parallel (fast mode,
# sharded input and a constraint inside emulate), 1 vs 4 devices. The exact-mode
# variants below compile the tensor-core datapath several times (minutes on 2 cores).
_QUICK = _COMMON + textwrap.dedent(
    """
    one = grouped(mlp_loss, 1)
    assert same(one, grouped(mlp_loss, 4))
    mesh = jaxwarp.batch_mesh()
    rows = NamedSharding(mesh, P("batch", None))
    a = rng.standard_normal((64, 48), np.float32)
    b = rng.standard_normal((48, 32), np.float32)
    # Fast mode keeps the sharding; its bits are the backend's dot's, which may block a
    # 16-row shard's sum differently from the whole (seen on one CPU), so the bits are
    # checked in exact mode, on a product small enough to compile quickly.
    f = jax.jit(jaxwarp.emulate(lambda a, b: jax.lax.with_sharding_constraint(a, rows) @ b,
                                operand_format="bf16", mode="fast"))
    assert len(f(a, b).sharding.device_set) == 4
    a, b = a[:, :16], b[:16, :16]
    f = jax.jit(jaxwarp.emulate(lambda a, b: jax.lax.with_sharding_constraint(a, rows) @ b,
                                operand_format="bf16", mode="exact"))
    want = jax.jit(jaxwarp.emulate(lambda a, b: a @ b, operand_format="bf16", mode="exact"))(a, b)
    got = f(a, b)
    assert len(got.sharding.device_set) == 4 and len(want.sharding.device_set) == 1
    assert same(want, got)
    # dispatch="per_device": one single-device program per group, so even fast mode
    # (whose backward dot XLA compiles differently in a module of several partitions)
    # gives the same bits on 1, 2 and 4 devices; the results live on the first device.
    fast = jaxwarp.emulate(mlp_loss, operand_format="bf16", mode="fast")
    def per_device(d):
        mesh = jaxwarp.batch_mesh(jax.devices()[:d])
        return jaxwarp.grouped_value_and_grad(fast, 4, mesh=mesh, dispatch="per_device")(
            params, x, y)
    one = per_device(1)
    assert same(one, per_device(2)) and same(one, per_device(4))
    assert one[1]["w1"].sharding.device_set == {jax.devices()[0]}
    print("ok")
    """
)


def test_quick_data_and_tensor_parallel_same_bits_on_4_devices():
    assert _run(_QUICK).strip().endswith("ok")


@pytest.mark.slow
def test_data_parallel_exact_same_bits_on_1_2_4_devices():
    assert _run(_DATA_PARALLEL).strip().endswith("ok")


@pytest.mark.slow
def test_tensor_parallel_product_same_bits_exact_and_fast():
    assert _run(_TENSOR_PARALLEL).strip().endswith("ok")


# Fast mode's data-parallel gradients with dispatch="spmd" are the backend dot's: XLA's
# CPU backend may compile a group's backward dot differently in a module of several
# partitions, and whether it does depends on the CPU (same bits on the CI VM, different
# on the H100 host's CPU). The loss value is the same; dispatch="per_device" gives the
# same gradients on any device count (the quick test checks that).
_FAST_DATA_PARALLEL = _COMMON + textwrap.dedent(
    """
    loss = jaxwarp.emulate(mlp_loss, operand_format="bf16", mode="fast")
    one = grouped(loss, 1)
    assert same(one[0], grouped(loss, 2)[0]) and same(one[0], grouped(loss, 4)[0])
    print("ok")
    """
)


@pytest.mark.slow
def test_data_parallel_fast_same_loss_on_cpu_devices():
    assert _run(_FAST_DATA_PARALLEL).strip().endswith("ok")


@pytest.mark.slow
def test_multihost_two_processes_same_digests_as_one_device():
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               XLA_FLAGS="--xla_force_host_platform_device_count=2")
    script = [sys.executable, "experiments/multihost.py"]
    port = 20000 + os.getpid() % 20000
    procs = [subprocess.Popen([*script, "--coordinator", f"localhost:{port}",
                               "--num-processes", "2", "--process-id", str(i)],
                              cwd=ROOT, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs[0][1][-2000:] + outs[1][1][-2000:]
    import json

    many = json.loads(outs[0][0].strip().splitlines()[-1])
    assert (many["processes"], many["devices"], many["local_devices"]) == (2, 4, 2)
    single = json.loads(_run("import runpy, sys; sys.argv = ['multihost.py', '--devices', '1'];"
                             "runpy.run_path('experiments/multihost.py', run_name='__main__')",
                             devices=1).strip().splitlines()[-1])
    assert single["devices"] == 1
    for w in ("warp", "dp", "tp"):
        assert many[w] == single[w], w


def test_grouped_value_and_grad_one_device():
    """On one device: the mean of the groups' losses and gradients, added in order."""
    loss = lambda w, x: jnp.mean((x @ w) ** 2)  # noqa: E731
    w = jnp.asarray([1.0, -2.0], jnp.float32)
    x = jnp.asarray(np.arange(12, dtype=np.float32).reshape(6, 2))
    value, grad = jaxwarp.grouped_value_and_grad(loss, 3, mesh=jaxwarp.batch_mesh(
        jax.devices()[:1]))(w, x)
    per = [jax.value_and_grad(loss)(w, x[2 * i:2 * i + 2]) for i in range(3)]
    np.testing.assert_array_equal(value, (per[0][0] + per[1][0] + per[2][0]) / 3)
    np.testing.assert_array_equal(grad, (per[0][1] + per[1][1] + per[2][1]) / 3)
    value, grad = jaxwarp.grouped_value_and_grad(loss, 3, mesh=jaxwarp.batch_mesh(
        jax.devices()[:1]), dispatch="per_device")(w, np.asarray(x))
    np.testing.assert_array_equal(value, (per[0][0] + per[1][0] + per[2][0]) / 3)
    np.testing.assert_array_equal(grad, (per[0][1] + per[1][1] + per[2][1]) / 3)


def test_grouped_dispatch_bad_inputs():
    loss = lambda w, x: jnp.mean(x * w)  # noqa: E731
    mesh = jaxwarp.batch_mesh(jax.devices()[:1])
    with pytest.raises(ValueError, match="dispatch must be 'spmd' or 'per_device', got 'pmap'"):
        jaxwarp.grouped_value_and_grad(loss, 2, mesh=mesh, dispatch="pmap")
    f = jaxwarp.grouped_value_and_grad(loss, 2, mesh=mesh, dispatch="per_device")
    with pytest.raises(TypeError, match="cannot be traced"):
        jax.jit(f)(jnp.float32(1), jnp.ones(4, jnp.float32))
    with pytest.raises(ValueError, match=r"batch\[0\] has leading \(batch\) size 3"):
        f(jnp.float32(1), jnp.ones(3, jnp.float32))
    with pytest.raises(ValueError, match="no batch argument"):
        f(jnp.float32(1))


@pytest.mark.parametrize("groups, exc, match", [
    (0, ValueError, "groups must be an int >= 1"),
    (2.0, TypeError, "groups must be a Python int, got float"),
    (True, TypeError, "groups must be a Python int, got bool")], ids=["zero", "float", "bool"])
def test_grouped_bad_groups(groups, exc, match):
    with pytest.raises(exc, match=match):
        jaxwarp.grouped_value_and_grad(lambda w, x: w, groups)


def test_grouped_batch_not_a_multiple():
    f = jaxwarp.grouped_value_and_grad(lambda w, x: jnp.mean(x * w), 4,
                                       mesh=jaxwarp.batch_mesh(jax.devices()[:1]))
    with pytest.raises(ValueError, match=r"batch\[0\] has leading \(batch\) size 6; it must "
                                         r"be a multiple of groups=4"):
        f(jnp.float32(1), jnp.ones(6, jnp.float32))
    with pytest.raises(ValueError, match="no batch argument"):
        f(jnp.float32(1))


def test_devices_option_names_what_is_allowed(capsys):
    sys.path.insert(0, str(ROOT / "experiments"))
    import _study_utils as su

    assert su.devices_count("all") == "all" and su.devices_count("2") == 2
    assert su.pick_devices(1) == jax.devices()[:1]
    with pytest.raises(SystemExit, match=r"--devices 999: this machine has \d+ .* up to \d+ "
                                         r"or 'all'"):
        su.pick_devices(999)
    import warp_programs

    with pytest.raises(SystemExit):
        warp_programs.main(["--devices", "0"])
    assert "argument --devices: expected 'all' or an integer >= 1, got '0'" in \
        capsys.readouterr().err
