"""Votes and matches: H100 captures, bit-pattern keys, bad input."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxwarp


def _vote_all(m, v):
    p = (v & 1) != 0
    key = v >> 1
    mv, mp = jaxwarp.match_all_sync(m, key)
    return jnp.stack(
        [
            jaxwarp.ballot_sync(m, p),
            jaxwarp.any_sync(m, p).astype(jnp.uint32),
            jaxwarp.all_sync(m, p).astype(jnp.uint32),
            jaxwarp.match_any_sync(m, key),
            mv,
            mp.astype(jnp.uint32),
        ],
        axis=-1,
    )


def test_h100_capture_bit_exact(warp_capture):
    mask, x, want = warp_capture["vote_mask"], warp_capture["vote_x"], warp_capture["vote_out"]
    got = np.asarray(jax.jit(jax.vmap(_vote_all))(mask.astype(np.uint32), x))
    in_mask = ((mask[:, None].astype(np.int64) >> np.arange(32)) & 1 == 1)[:, :, None]
    got = np.where(in_mask, got, 0xDEADBEEF).astype(np.uint32)
    np.testing.assert_array_equal(got, want)


def test_first_principles():
    lane = jaxwarp.lane_id()
    assert int(jaxwarp.ballot_sync(0xFFFFFFFF, lane < 4)[7]) == 0xF
    assert int(jaxwarp.ballot_sync(0x0000FFF0, lane < 8)[7]) == 0xF0
    np.testing.assert_array_equal(jaxwarp.ballot_sync(0xFF, lane < 4)[8:], 0)  # did not call
    assert int(jaxwarp.any_sync(0xFFFFFFF0, lane < 4)[10]) == 0
    assert int(jaxwarp.all_sync(0x0000000F, lane < 4)[0]) == 1
    keys = lane % 3
    got = np.asarray(jaxwarp.match_any_sync(0xFFFFFFFF, keys))
    for l in range(32):
        assert got[l] == sum(1 << j for j in range(32) if j % 3 == l % 3)


def test_float_keys_compare_bits():
    v = jnp.zeros(32, jnp.float32).at[1].set(-0.0)
    got = np.asarray(jaxwarp.match_any_sync(0x3, v))
    assert got[0] == 0x1 and got[1] == 0x2  # +0.0 and -0.0 differ
    nan = jnp.full((32,), jnp.nan, jnp.float32)
    mv, mp = jaxwarp.match_all_sync(0xFFFFFFFF, nan)
    assert int(mv[0]) == 0xFFFFFFFF and int(mp[0]) == 1


def test_64_bit_keys():
    with jax.enable_x64(True):
        v = jnp.full((32,), 2**40, jnp.int64).at[5].set(2**40 + 2**33)
        mv, mp = jaxwarp.match_all_sync(0xFFFFFFFF, v)
        assert int(mv[0]) == 0 and int(mp[0]) == 0
        assert int(jaxwarp.match_any_sync(0xFFFFFFFF, v)[5]) == 1 << 5


def test_bad_input():
    with pytest.raises(TypeError, match="pred must be bool or an integer"):
        jaxwarp.ballot_sync(0xFFFFFFFF, jnp.zeros(32, jnp.float32))
    with pytest.raises(ValueError, match="pred must have a leading lane axis"):
        jaxwarp.any_sync(0xFFFFFFFF, jnp.zeros(8, jnp.bool_))
    with pytest.raises(TypeError, match="value must be a 32- or 64-bit int or float"):
        jaxwarp.match_any_sync(0xFFFFFFFF, jnp.zeros(32, jnp.int16))
    with pytest.raises(ValueError, match="value must have shape"):
        jaxwarp.match_all_sync(0xFFFFFFFF, jnp.zeros((32, 2), jnp.int32))
