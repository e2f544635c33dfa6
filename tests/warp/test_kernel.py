"""``jaxwarp.warp_kernel``: the Pallas kernel path gives ``jax.vmap(fn)``'s bits.

The kernel body runs here in Pallas's interpreter (``interpret=True``), which executes the
same traced kernel (with the Triton-friendly shuffle lowering of ``lanes._apply_plan_kernel``)
on the CPU; the Triton compilation itself is exercised on the H100 by
``benchmarks/warp_reduce.py`` (bits compared with XLA's on every bit pattern).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxwarp
from jaxwarp._src.warp import kernel as kernel_mod
from jaxwarp._src.warp import lanes

pytestmark = pytest.mark.usefixtures("triton_warp_kernel")  # the Triton kernel's tests

FULL = 0xFFFFFFFF


def _bits(x):
    return np.asarray(x).view(np.uint32 if np.asarray(x).dtype.itemsize == 4 else np.uint16)


def _random_f32(shape, seed=0):
    rng = np.random.default_rng(seed)
    return jnp.asarray(rng.integers(0, 2**32, shape, dtype=np.uint32).view(np.float32))


def butterfly(v):
    for m in (16, 8, 4, 2, 1):
        v = v + jaxwarp.shfl_xor_sync(FULL, v, m)
    return v


def _under_kernel_lowering(fn):
    def run(*xs):
        with lanes.kernel_lowering():
            return jax.vmap(fn)(*xs)
    return run


@pytest.mark.slow
@pytest.mark.parametrize("shfl", ["xor", "idx"])
def test_kernel_lowering_of_every_static_plan_matches(shfl):
    # Every lane mask / source lane and width that gives an xor or broadcast plan: the
    # kernel lowering moves the same bits as the XLA lowering (NaN payloads included).
    x = _random_f32((16, 32), seed=1)
    fn = jaxwarp.shfl_xor_sync if shfl == "xor" else jaxwarp.shfl_sync
    covered = 0
    for b in range(0, 34):
        for width in (1, 2, 4, 8, 16, 32, 3, 12, 64):
            def f(v, b=b, width=width):
                return fn(FULL, v, b, width)
            plan = lanes._static_plan(np.asarray(lanes.source_lanes(
                "bfly" if shfl == "xor" else "idx", b, width)))
            # (other plans become a gather with a constant table: test_kernel_ops.py)
            covered += plan[0] in lanes.KERNEL_PLANS
            np.testing.assert_array_equal(_bits(_under_kernel_lowering(f)(x)),
                                          _bits(jax.vmap(f)(x)))
    assert covered > 250


def test_butterfly_kernel_interpreted_matches_vmap():
    x = _random_f32((40, 32))  # 40 warps: the last block of 16 is partly outside
    k = jaxwarp.warp_kernel(butterfly, warps_per_block=16, force="pallas", interpret=True)
    np.testing.assert_array_equal(_bits(k(x)), _bits(jax.vmap(butterfly)(x)))
    np.testing.assert_array_equal(_bits(jax.jit(k)(x)), _bits(jax.vmap(butterfly)(x)))


def test_several_inputs_and_outputs_interpreted():
    def prog(v, w):
        s = v + jaxwarp.shfl_xor_sync(FULL, v, 3)
        t = (w ^ jaxwarp.shfl_sync(FULL, w, 5, 8)) + jnp.uint32(7)
        return s, jaxwarp.shfl_xor_sync(FULL, t, 17, 16)

    x = _random_f32((8, 32), seed=2)
    y = jnp.asarray(np.random.default_rng(3).integers(0, 2**32, (8, 32), dtype=np.uint32))
    k = jaxwarp.warp_kernel(prog, warps_per_block=4, force="pallas", interpret=True)
    assert k.explain(x, y) is None
    got, want = k(x, y), jax.vmap(prog)(x, y)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(_bits(g), _bits(w))


def test_gradient_through_the_kernel_is_vmaps():
    x = jnp.asarray(np.random.default_rng(4).standard_normal((8, 32)), jnp.float32)
    k = jaxwarp.warp_kernel(butterfly, warps_per_block=4, force="pallas", interpret=True)
    def loss(f):
        return lambda v: jnp.sum(f(v) * jnp.arange(32.0))
    g = jax.grad(loss(k))(x)
    np.testing.assert_array_equal(_bits(g), _bits(jax.grad(loss(jax.vmap(butterfly)))(x)))
    _, t = jax.jvp(k, (x,), (jnp.ones_like(x),))
    np.testing.assert_array_equal(_bits(t), _bits(jnp.full_like(x, 32.0)))


def test_zero_warps():
    x = jnp.zeros((0, 32), jnp.float32)
    out = jaxwarp.warp_kernel(butterfly, force="pallas", interpret=True)(x)
    assert out.shape == (0, 32)


def test_cpu_runs_vmap_and_matches():
    x = _random_f32((5, 32))
    k = jaxwarp.warp_kernel(butterfly)
    np.testing.assert_array_equal(_bits(k(x)), _bits(jax.vmap(butterfly)(x)))


@pytest.mark.parametrize("fn, why", [
    (lambda v: v * 2.0, "mul on float32"),
    (lambda v: jaxwarp.shfl_down_sync(FULL, v[:, None], 1)[:, 0], "plan 'down' on shape"),
    (lambda v: v / 3.0, "div on float32"),
    (lambda v: jnp.broadcast_to(v[:, None], (32, 3)).max(1), "sizes are powers of two"),
    (lambda v: v[:16].sum() + v, "slice (no bit-exact Triton lowering here)"),
    (lambda v: v.astype(jnp.float16), "convert_element_type"),
])
def test_explain_names_what_keeps_a_program_out_of_the_kernel(fn, why):
    x = jnp.ones((4, 32), jnp.float32)
    k = jaxwarp.warp_kernel(fn)
    reason = k.explain(x)
    assert reason is not None and why in reason
    np.testing.assert_array_equal(_bits(k(x)), _bits(jax.vmap(fn)(x)))  # falls back
    with pytest.raises(NotImplementedError, match="warp_kernel"):
        jaxwarp.warp_kernel(fn, force="pallas", interpret=True)(x)


def test_allowlist_drives_the_decision(monkeypatch):
    # The allowed-operation tables are the model of what Triton runs bit-exactly:
    # removing float32 addition from them sends the butterfly back to vmap.
    x = jnp.ones((4, 32), jnp.float32)
    assert jaxwarp.warp_kernel(butterfly).explain(x) is None
    monkeypatch.setattr(kernel_mod, "_F32_OPS", frozenset({"sub"}))
    assert "add on float32" in jaxwarp.warp_kernel(butterfly).explain(x)


@pytest.mark.parametrize("kwargs, match", [
    ({"warps_per_block": 3}, "warps_per_block=3"),
    ({"warps_per_block": 0}, "warps_per_block=0"),
    ({"num_warps": 6}, "num_warps=6"),
    ({"force": "triton"}, "force='triton'"),
])
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        jaxwarp.warp_kernel(butterfly, **kwargs)


def test_bad_shapes_and_fn():
    k = jaxwarp.warp_kernel(butterfly)
    with pytest.raises(ValueError, match=r"argument 0 has shape \(4, 16\)"):
        k(jnp.ones((4, 16), jnp.float32))
    with pytest.raises(ValueError, match="argument 0 has shape"):
        jax.jit(k)(jnp.ones((32,), jnp.float32))
    with pytest.raises(TypeError, match="not callable"):
        jaxwarp.warp_kernel(3)


@pytest.mark.skipif(jax.default_backend() != "gpu", reason="the Triton kernel needs a GPU")
@pytest.mark.parametrize("width", [32, 16, 8, 4, 2, 1])
def test_triton_kernel_matches_vmap_on_gpu(width):
    # The compiled Triton kernel (not the interpreter): every xor mask and broadcast
    # source at this width, with integer and float work around them, on every bit pattern.
    def prog(v, w):
        outs = []
        for b in range(32):
            outs.append(jaxwarp.shfl_xor_sync(FULL, v, b, width) + v)
            outs.append(jaxwarp.shfl_sync(FULL, w, b, width) ^ (w >> 3))
        return tuple(outs)

    x = _random_f32((1000, 32), seed=width)
    y = jnp.asarray(np.random.default_rng(width).integers(0, 2**32, (1000, 32),
                                                         dtype=np.uint32))
    k = jaxwarp.warp_kernel(prog, warps_per_block=64, force="pallas")
    for g, w in zip(jax.jit(k)(x, y), jax.vmap(prog)(x, y), strict=True):
        np.testing.assert_array_equal(_bits(g), _bits(w))


@pytest.mark.skipif(jax.default_backend() != "gpu", reason="the Triton kernel needs a GPU")
def test_triton_kernel_gradient_on_gpu():
    x = jnp.asarray(np.random.default_rng(6).standard_normal((300, 32)), jnp.float32)
    k = jaxwarp.warp_kernel(butterfly, warps_per_block=64, force="pallas")
    def loss(f):
        return lambda v: jnp.sum(f(v) * jnp.arange(32.0))
    np.testing.assert_array_equal(_bits(jax.jit(jax.grad(loss(k)))(x)),
                                  _bits(jax.jit(jax.grad(loss(jax.vmap(butterfly))))(x)))
    np.testing.assert_array_equal(_bits(jax.jit(k)(x)), _bits(jax.vmap(butterfly)(x)))
