"""Checked mode reports undefined behaviour with the lane and the argument."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxwarp

FULL = 0xFFFFFFFF
X = jnp.arange(32, dtype=jnp.int32)


def _error(fn, *args, jit=False):
    f = jaxwarp.checked(fn)
    if jit:
        f = jax.jit(f)
    err, _ = f(*args)
    return err.get()


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_source_lane_outside_mask(jit):
    msg = _error(lambda x: jaxwarp.shfl_sync(0xFFFF, x, 20), X, jit=jit)
    assert "lane 0 reads source lane 20 in __shfl_sync" in msg and "not in its mask" in msg


@pytest.mark.parametrize("width", [0, 3, 12, 33, 64])
def test_width_not_power_of_two(width):
    msg = _error(lambda x: jaxwarp.shfl_xor_sync(FULL, x, 1, width), X)
    assert f"__shfl_xor_sync(width={width})" in msg and "powers of two in [1, 32]" in msg


def test_calling_lane_missing_from_its_own_mask():
    masks = jnp.full((32,), 0xFF, jnp.uint32).at[9].set(0xFF)  # lane 9 passes 0xFF
    masks = masks.at[8:].set(0).at[9].set(0xFF)
    msg = _error(lambda m, x: jaxwarp.shfl_down_sync(m, x, 1), masks, X, jit=True)
    assert "lane 9 calls __shfl_down_sync with mask 255, which lacks its own bit" in msg


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_disjoint_groups_may_pass_different_masks(jit):
    # Two groups (even and odd lanes) each passing its own members, as a labeled partition
    # does: CUDA allows it (the lanes a mask names all pass that mask).
    even = jnp.uint32(0x55555555)
    masks = jnp.where(X % 2 == 0, even, ~even).astype(jnp.uint32)
    assert _error(lambda m, x: jaxwarp.reduce_add_sync(m, x), masks, X.astype(jnp.uint32),
                  jit=jit) is None
    # A group whose mask names a lane of the other group still fails.
    bad = masks.at[0].set(even | 2)
    msg = _error(lambda m, x: jaxwarp.reduce_add_sync(m, x), bad, X.astype(jnp.uint32), jit=jit)
    assert "lanes 0 and 1 call __reduce_add_sync with different masks" in msg


def test_lanes_with_different_masks():
    masks = jnp.full((32,), FULL, jnp.uint32).at[5].set(0x7FFFFFFF).astype(jnp.uint32)
    msg = _error(lambda m, x: jaxwarp.reduce_add_sync(m, x), masks, X.astype(jnp.uint32))
    assert "lanes 0 and 5 call __reduce_add_sync with different masks" in msg
    msg = _error(lambda m, x: jaxwarp.ballot_sync(m, x > 3), masks, X)
    assert "__ballot_sync with different masks" in msg


def test_vmap_names_the_warp():
    masks = jnp.array([[FULL] * 32, [0xFFFF] * 32], jnp.uint32)
    f = jax.vmap(jaxwarp.checked(lambda m, x: jaxwarp.shfl_sync(m[0], x, 31)))
    err, _ = f(masks, jnp.stack([X, X]))
    assert "at mapped index 1" in err.get()


def test_nanosleep_limit():
    msg = _error(lambda n: jaxwarp.nanosleep(n), jnp.uint32(2_000_000), jit=True)
    assert "nanosleep(ns=2000000)" in msg


def test_clean_programs_pass_and_results_are_unchanged():
    def program(x):
        y = jaxwarp.shfl_up_sync(0xFFFF, x, 1, 8)
        return jaxwarp.reduce_add_sync(0xFFFF, y.astype(jnp.uint32))

    err, out = jax.jit(jaxwarp.checked(program))(X)
    assert err.get() is None
    np.testing.assert_array_equal(out, program(X))
    with pytest.raises(Exception, match="reads source lane 20"):
        jaxwarp.checked(lambda x: jaxwarp.shfl_sync(0xFFFF, x, 20))(X)[0].throw()


def test_mma_nan_inf_reported_only_when_asked():
    a = jaxwarp.fill_fragment(jaxwarp.fragment("matrix_a", 16, 16, 16, "f16", "row_major"), 1.0)
    b = jaxwarp.fill_fragment(jaxwarp.fragment("matrix_b", 16, 16, 16, "f16", "col_major"), 1.0)
    c = jaxwarp.fill_fragment(jaxwarp.fragment("accumulator", 16, 16, 16, "f32"), 0.0)
    c = c.replace(x=c.x.at[5, 3].set(jnp.inf))
    err, _ = jaxwarp.checked(jaxwarp.mma_sync)(a, b, c)
    assert err.get() is None
    nan_inf = jax.jit(jaxwarp.checked(jaxwarp.mma_sync, nan_inf=True))  # compiled once
    err, d = nan_inf(a, b, c)
    assert "mma_sync: c[" in err.get() and "is NaN or inf" in err.get()
    np.testing.assert_array_equal(d.x, jaxwarp.mma_sync(a, b, c).x)
    err, _ = nan_inf(a, b, c.replace(x=c.x.at[5, 3].set(0)))
    assert err.get() is None
