"""Static-offset shuffles lower to reshapes/reversals/slices: same bits as the gather path."""

import itertools

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import jaxwarp
from jaxwarp._src.warp import lanes

FULL = 0xFFFFFFFF
SHUFFLES = {
    "idx": jaxwarp.shfl_sync,
    "up": jaxwarp.shfl_up_sync,
    "down": jaxwarp.shfl_down_sync,
    "bfly": jaxwarp.shfl_xor_sync,
}
WIDTHS = (1, 2, 4, 8, 16, 32)


@pytest.mark.slow
def test_plan_reproduces_every_source_table():
    # Every (mode, width, b) a static shuffle can see, including widths CUDA leaves
    # undefined: the plan, applied to the lane ids, gives back the PTX source table.
    kinds, moved = set(), {}
    ids = jnp.arange(32, dtype=jnp.int32)
    for mode in lanes._MODES:
        for width in (*range(-2, 35), 64, 2**31 - 1, -(2**31)):
            for b in (*range(0, 33), -1, 2**31 - 1):
                j = np.asarray(lanes.source_lanes(mode, b, width))
                plan = lanes._static_plan(j)
                kinds.add(plan[0])
                if plan not in moved:
                    moved[plan] = np.asarray(lanes._apply_plan(ids, plan))
                assert np.array_equal(moved[plan], j), (mode, width, b, plan)
                if width in WIDTHS:  # what CUDA defines never needs a gather
                    assert plan[0] != "gather", (mode, width, b, plan)
    assert kinds == {"id", "xor", "bcast", "down", "up", "gather"}


def _hlo_ops(fn, x):
    return fn.lower(x).compile().as_text()


@pytest.mark.parametrize("mode", lanes._MODES)
def test_no_gather_for_static_offsets(mode):
    x = jnp.zeros((4, 32), jnp.float32)
    fn = jax.jit(jax.vmap(lambda v: SHUFFLES[mode](FULL, v, 5, 16)))
    assert " gather(" not in _hlo_ops(fn, x)
    # A traced offset still gathers.
    fn = jax.jit(jax.vmap(lambda v, b: SHUFFLES[mode](FULL, v, b, 16)))
    assert " gather(" in fn.lower(x, jnp.zeros(4, jnp.int32)).compile().as_text()


def _nan_rich(dtype, shape, seed):
    """Random raw bits with many NaNs (odd payloads, signalling ones) for float dtypes."""
    dt = np.dtype(dtype)
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, (*shape, dt.itemsize), dtype=np.uint8).view(dt).reshape(shape)
    if dt.kind == "f" or dt == np.dtype(ml_dtypes.bfloat16):
        u = raw.view(f"u{dt.itemsize}").copy()
        nbits = 8 * dt.itemsize
        exp_mask = {16: 0x7F80 if dt == np.dtype(ml_dtypes.bfloat16) else 0x7C00,
                    32: 0x7F800000, 64: 0x7FF0000000000000}[nbits]
        pick = rng.random(shape) < 0.5
        u[pick] |= np.array(exp_mask, u.dtype)  # all-ones exponent: inf or NaN
        raw = u.view(dt)
    return raw


@pytest.mark.parametrize(
    "dtype",
    # bfloat16 by default (the fastest); every other width with -m slow.
    [pytest.param(d, marks=pytest.mark.slow) if d is not ml_dtypes.bfloat16 else d
     for d in (np.uint32, np.int8, np.float16, ml_dtypes.bfloat16, np.float32, np.float64)],
    ids=lambda d: np.dtype(d).name,
)
def test_static_and_traced_offsets_move_the_same_bits(dtype):
    # The static lowering against the gather path (the offset as a jax array), for
    # every mode, CUDA width and some offsets, full and partial masks; eagerly (the
    # butterfly test below covers jit + vmap).
    with jax.enable_x64(np.dtype(dtype).itemsize == 8):
        x = jnp.asarray(_nan_rich(dtype, (32, 3, 2), 7))
        u = f"u{np.dtype(dtype).itemsize}"
        offsets = (1, 3, 8, 17) if np.dtype(dtype).itemsize != 4 else (0, 1, 3, 8, 17, 31)
        for mode, mask in itertools.product(lanes._MODES, (FULL, 0xF0FF0FFF)):
            for width, b in itertools.product(WIDTHS, offsets):
                got = np.asarray(SHUFFLES[mode](mask, x, b, width))
                want = np.asarray(SHUFFLES[mode](mask, x, jnp.int32(b), width))
                np.testing.assert_array_equal(
                    got.view(u), want.view(u), err_msg=f"{mode} width={width} b={b} mask={mask:#x}")


def test_static_xor_matches_numpy_bits_for_nan_payloads():
    x = _nan_rich(np.float32, (32, 4), 3)
    for m in range(32):
        got = np.asarray(jaxwarp.shfl_xor_sync(FULL, jnp.asarray(x), m))
        np.testing.assert_array_equal(got.view(np.uint32), x[np.arange(32) ^ m].view(np.uint32))


def test_butterfly_is_bit_exact_and_gathers_nothing():
    x = np.random.default_rng(0).normal(size=(8, 32)).astype(np.float32)

    def butterfly(v):
        for m in (16, 8, 4, 2, 1):
            v = v + jaxwarp.shfl_xor_sync(FULL, v, m)
        return v

    fn = jax.jit(jax.vmap(butterfly))
    want = x.copy()
    for m in (16, 8, 4, 2, 1):
        want = want + want[:, np.arange(32) ^ m]
    np.testing.assert_array_equal(np.asarray(fn(x)).view(np.uint32), want.view(np.uint32))
    text = _hlo_ops(fn, jnp.asarray(x))
    assert " gather(" not in text and " transpose(" not in text


def test_static_plan_gradients():
    x = jnp.asarray(np.random.default_rng(2).normal(size=(32, 2)), jnp.float32)
    w = jnp.arange(1.0, 33.0, dtype=jnp.float32)[:, None]
    for mode, mask in itertools.product(lanes._MODES, (FULL, 0x7FFFFFFE)):
        fn = SHUFFLES[mode]
        g_static = jax.grad(lambda v, fn=fn, mask=mask: jnp.sum(fn(mask, v, 3, 8) * w))(x)
        g_traced = jax.grad(
            lambda v, fn=fn, mask=mask: jnp.sum(fn(mask, v, jnp.int32(3), 8) * w))(x)
        np.testing.assert_array_equal(g_static, g_traced)
        t_static = jax.jvp(lambda v, fn=fn, mask=mask: fn(mask, v, 3, 8), (x,), (w * x,))[1]
        t_traced = jax.jvp(
            lambda v, fn=fn, mask=mask: fn(mask, v, jnp.int32(3), 8), (x,), (w * x,))[1]
        np.testing.assert_array_equal(t_static, t_traced)
