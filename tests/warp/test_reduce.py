"""Warp reductions: H100 captures, signedness, per-lane masks, bad input."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jaxwarp

OPS = (
    ("add", np.uint32),
    ("min", np.uint32),
    ("max", np.uint32),
    ("add", np.int32),
    ("min", np.int32),
    ("max", np.int32),
    ("and", np.uint32),
    ("or", np.uint32),
    ("xor", np.uint32),
)


def test_h100_capture_bit_exact(warp_capture):
    cfg, x, want = warp_capture["reduce_cfg"], warp_capture["reduce_x"], warp_capture["reduce_out"]
    in_mask = ((cfg[:, 1:2].astype(np.int64) & 0xFFFFFFFF) >> np.arange(32)) & 1 == 1
    for code, (op, dt) in enumerate(OPS):
        sel = np.flatnonzero(cfg[:, 0] == code)
        assert len(sel), f"capture has no warps for op code {code}"
        got = jax.jit(jax.vmap(lambda m, v, op=op: jaxwarp.reduce_sync(op, m, v)))(
            cfg[sel, 1].astype(np.uint32), x[sel].view(dt)
        )
        got = np.where(in_mask[sel], np.asarray(got).view(np.uint32), 0xDEADBEEF)
        np.testing.assert_array_equal(got.astype(np.uint32), want[sel], err_msg=op)


@pytest.mark.slow
@settings(derandomize=True, max_examples=100, deadline=None)
@given(
    mask=st.integers(1, 2**32 - 1),
    seed=st.integers(0, 2**32 - 1),
    code=st.integers(0, len(OPS) - 1),
)
def test_matches_numpy(mask, seed, code):
    op, dt = OPS[code]
    x = np.random.default_rng(seed).integers(0, 2**32, 32, dtype=np.uint32).view(dt)
    inm = (mask >> np.arange(32)) & 1 == 1
    sub = x[inm]
    want = {
        "add": lambda: np.sum(sub, dtype=dt),
        "min": sub.min,
        "max": sub.max,
        "and": lambda: np.bitwise_and.reduce(sub),
        "or": lambda: np.bitwise_or.reduce(sub),
        "xor": lambda: np.bitwise_xor.reduce(sub),
    }[op]()
    got = np.asarray(jaxwarp.reduce_sync(op, mask, jnp.asarray(x)))
    np.testing.assert_array_equal(got[inm], want)
    np.testing.assert_array_equal(got[~inm], x[~inm])
    # The same masks passed per lane, traced, give the same answer.
    per_lane = jnp.full((32,), mask, jnp.uint32)
    np.testing.assert_array_equal(
        jax.jit(lambda m, v: jaxwarp.reduce_sync(op, m, v))(per_lane, x), got
    )


def test_signedness_follows_dtype():
    x = np.zeros(32, np.int32)
    x[3] = -5
    assert int(jaxwarp.reduce_min_sync(0xFFFFFFFF, jnp.asarray(x))[0]) == -5
    assert int(jaxwarp.reduce_min_sync(0xFFFFFFFF, jnp.asarray(x.view(np.uint32)))[0]) == 0
    big = jnp.full((32,), 2**31, jnp.uint32)
    assert int(jaxwarp.reduce_add_sync(0xFFFFFFFF, big)[0]) == 0  # wraps modulo 2**32


def test_bad_input():
    with pytest.raises(TypeError, match=r"value has dtype int32; allowed: \('uint32',\)"):
        jaxwarp.reduce_and_sync(0xFFFFFFFF, jnp.zeros(32, jnp.int32))
    with pytest.raises(TypeError, match="value has dtype float32"):
        jaxwarp.reduce_add_sync(0xFFFFFFFF, jnp.zeros(32, jnp.float32))
    with pytest.raises(ValueError, match="op='mul' is not supported"):
        jaxwarp.reduce_sync("mul", 0xFFFFFFFF, jnp.zeros(32, jnp.uint32))
    with pytest.raises(ValueError, match="value must have a leading lane axis"):
        jax.jit(lambda v: jaxwarp.reduce_max_sync(0xFFFFFFFF, v))(jnp.zeros(31, jnp.int32))
    with pytest.raises(TypeError, match="mask must be a 32-bit integer"):
        jaxwarp.reduce_add_sync(jnp.float32(0), jnp.zeros(32, jnp.uint32))
