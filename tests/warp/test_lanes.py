"""Shuffles: H100 captures, first principles, dtypes, transformations, bad input."""

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jax.test_util import check_grads

import jaxwarp
from jaxwarp._src.warp import lanes

FULL = 0xFFFFFFFF
SHUFFLES = {
    "idx": jaxwarp.shfl_sync,
    "up": jaxwarp.shfl_up_sync,
    "down": jaxwarp.shfl_down_sync,
    "bfly": jaxwarp.shfl_xor_sync,
}
MODE_CODES = ("idx", "up", "down", "bfly")  # shfl_cfg mode order


@pytest.mark.slow
def test_h100_capture_bit_exact(warp_capture):
    cfg, x, want = warp_capture["shfl_cfg"], warp_capture["shfl_x"], warp_capture["shfl_out"]
    in_mask = ((cfg[:, 3:4].astype(np.int64) & 0xFFFFFFFF) >> np.arange(32)) & 1 == 1
    checked = 0
    for mode, width in sorted({(int(r[0]), int(r[2])) for r in cfg}):
        sel = np.flatnonzero((cfg[:, 0] == mode) & (cfg[:, 2] == width))
        fn = SHUFFLES[MODE_CODES[mode]]
        got = jax.jit(jax.vmap(lambda m, v, b, fn=fn, w=width: fn(m, v, b, w)))(
            cfg[sel, 3].astype(np.uint32), x[sel], cfg[sel, 1]
        )
        got = np.where(in_mask[sel], np.asarray(got), 0xDEADBEEF).astype(np.uint32)
        np.testing.assert_array_equal(got, want[sel], err_msg=f"mode={mode} width={width}")
        checked += len(sel)
    assert checked == len(cfg)


def _reference(mode, mask, x, b, width):
    """PTX shfl.sync restated with Python ints, lane by lane."""
    c = ((32 - width) << 8) & 0xFFFFFFFF
    if mode != "up":
        c |= 0x1F
    seg, cval = (c >> 8) & 31, c & 31
    out = []
    for lane in range(32):
        if not (mask >> lane) & 1:
            out.append(x[lane])
            continue
        bv = b & 31
        max_lane = (lane & seg) | (cval & ~seg)
        j, ok = {
            "idx": ((lane & seg) | (bv & ~seg), None),
            "up": (lane - bv, None),
            "down": (lane + bv, None),
            "bfly": (lane ^ bv, None),
        }[mode]
        ok = j >= max_lane if mode == "up" else j <= max_lane
        j = j if ok else lane
        out.append(x[j] if (mask >> j) & 1 else 0)
    return np.array(out, np.uint32)


@pytest.mark.slow
@settings(derandomize=True, max_examples=200, deadline=None)
@given(
    mode=st.sampled_from(MODE_CODES),
    mask=st.integers(0, FULL),
    b=st.integers(-(2**31), 2**31 - 1),
    width=st.integers(-40, 70),
    seed=st.integers(0, 2**32 - 1),
)
def test_matches_ptx_definition(mode, mask, b, width, seed):
    x = np.random.default_rng(seed).integers(0, 2**32, 32, dtype=np.uint32)
    got = SHUFFLES[mode](mask, x, b, width)
    np.testing.assert_array_equal(np.asarray(got), _reference(mode, mask, list(x), b, width))


@pytest.mark.slow
def test_power_of_two_widths_stay_in_segment():
    # CUDA guide: with a power-of-two width, idx/up/down stay in the lane's segment;
    # xor may reach earlier segments (when lane_mask >= width) but never later ones.
    x = jaxwarp.lane_id()
    seg = np.arange(32) // np.arange(1, 33)[:, None]
    for width in (1, 2, 4, 8, 16, 32):
        for b in range(32):
            for mode, fn in SHUFFLES.items():
                y = np.asarray(fn(FULL, x, b, width))
                if mode == "bfly":
                    assert np.all(y // width <= np.arange(32) // width)
                    if b < width:
                        np.testing.assert_array_equal(y // width, np.arange(32) // width)
                else:
                    np.testing.assert_array_equal(y // width, seg[width - 1])


def test_xor_is_an_involution_and_identities():
    x = jnp.arange(100, 132, dtype=jnp.int32)
    for m in range(32):
        once = jaxwarp.shfl_xor_sync(FULL, x, m)
        np.testing.assert_array_equal(jaxwarp.shfl_xor_sync(FULL, once, m), x)
    np.testing.assert_array_equal(jaxwarp.shfl_sync(FULL, x, jaxwarp.lane_id()), x)
    np.testing.assert_array_equal(jaxwarp.shfl_up_sync(FULL, x, 0), x)
    np.testing.assert_array_equal(jaxwarp.shfl_down_sync(FULL, x, 0), x)


def test_source_outside_mask_reads_zero_and_outside_lanes_keep_input():
    x = jnp.arange(1, 33, dtype=jnp.uint32)
    mask = 0x0000FFFF
    y = np.asarray(jaxwarp.shfl_down_sync(mask, x, 8))
    np.testing.assert_array_equal(y[:8], np.arange(9, 17))
    np.testing.assert_array_equal(y[8:16], 0)  # sources 16..23 are outside the mask
    np.testing.assert_array_equal(y[16:], np.arange(17, 33))  # did not call


@pytest.mark.parametrize(
    "dtype",
    [np.int8, np.uint16, np.int32, np.uint32, np.float16, ml_dtypes.bfloat16, np.float32, np.bool_],
    ids=lambda d: np.dtype(d).name,
)
def test_dtypes_move_bits_unchanged(dtype):
    rng = np.random.default_rng(0)
    raw = rng.integers(0, 256, (32, 3, np.dtype(dtype).itemsize), dtype=np.uint8)
    x = raw.view(dtype).reshape(32, 3) if dtype != np.bool_ else raw[..., 0] % 2 == 1
    y = np.asarray(jaxwarp.shfl_xor_sync(FULL, jnp.asarray(x), 5))
    want = x[np.arange(32) ^ 5]
    np.testing.assert_array_equal(y.view(np.uint8), want.view(np.uint8))


def test_64_bit_values():
    with jax.enable_x64(True):
        x = np.random.default_rng(1).integers(0, 2**63, 32, dtype=np.int64).astype(np.uint64)
        for dt in (np.uint64, np.float64):
            v = jnp.asarray(x.view(dt))
            y = np.asarray(jaxwarp.shfl_sync(0xFFFF00FF, v, 20))
            assert y.dtype == dt
            want = np.full(32, x[20])
            want[8:16] = x[8:16]  # these lanes did not call
            np.testing.assert_array_equal(y.view(np.uint64), want)
            y = np.asarray(jaxwarp.shfl_sync(0xFFFF00FF, v, 10))
            want = np.zeros(32, np.uint64)  # lane 10 is outside the mask: reads 0
            want[8:16] = x[8:16]
            np.testing.assert_array_equal(y.view(np.uint64), want)


def test_per_lane_src_lane_and_mask():
    x = jnp.arange(32, dtype=jnp.int32) * 10
    src = 31 - jaxwarp.lane_id()
    np.testing.assert_array_equal(jaxwarp.shfl_sync(FULL, x, src), x[::-1])
    masks = jnp.full((32,), FULL, jnp.uint32)
    np.testing.assert_array_equal(jaxwarp.shfl_sync(masks, x, src), x[::-1])


def test_jit_does_not_retrace_for_new_masks_and_lanes():
    traces = []

    @jax.jit
    def f(mask, x, b):
        traces.append(1)
        return jaxwarp.shfl_down_sync(mask, x, b, 16)

    x = jnp.arange(32, dtype=jnp.float32)
    for mask, b in [(FULL, 1), (0xFF, 3), (0x0F0F0F0F, 31)]:
        got = f(jnp.uint32(mask), x, jnp.int32(b))
        np.testing.assert_array_equal(got, jaxwarp.shfl_down_sync(mask, x, b, 16))
    assert len(traces) == 1


def test_vmap_over_warps():
    xs = jnp.arange(4 * 32, dtype=jnp.int32).reshape(4, 32)
    got = jax.vmap(lambda x: jaxwarp.shfl_xor_sync(FULL, x, 1))(xs)
    np.testing.assert_array_equal(got, xs.reshape(4, 16, 2)[:, :, ::-1].reshape(4, 32))
    bs = jnp.array([0, 1, 2, 3], jnp.int32)
    got = jax.vmap(lambda x, b: jaxwarp.shfl_sync(FULL, x, b))(xs, bs)
    np.testing.assert_array_equal(
        got, np.repeat(np.asarray(xs)[np.arange(4), [0, 1, 2, 3]][:, None], 32, 1)
    )


@pytest.mark.parametrize("mode", MODE_CODES)
def test_gradients(mode):
    x = jnp.asarray(np.random.default_rng(2).normal(size=(32, 2)), jnp.float32)
    fn = SHUFFLES[mode]

    def f(v):
        return fn(0x7FFFFFFE, v, 3, 8) * jnp.arange(1.0, 33.0, dtype=jnp.float32)[:, None]

    check_grads(f, (x,), order=1, modes=("fwd", "rev"), atol=1e-2, rtol=1e-2)
    # The gradient of a permutation is the transposed permutation (exact here).
    g = jax.grad(lambda v: jnp.sum(fn(FULL, v, 3) * jnp.arange(32.0, dtype=jnp.float32)[:, None]))(
        x
    )
    j = np.asarray(lanes.source_lanes(mode, 3))
    want = np.zeros((32, 2), np.float32)
    np.add.at(want, j, np.arange(32.0, dtype=np.float32)[:, None])
    np.testing.assert_array_equal(g, want)


def test_bad_input_names_the_argument():
    x = jnp.zeros(32, jnp.int32)
    with pytest.raises(ValueError, match="var must have a leading lane axis of size 32"):
        jaxwarp.shfl_sync(FULL, jnp.zeros(16), 0)
    with pytest.raises(ValueError, match="var must have a leading lane axis"):
        jax.jit(lambda v: jaxwarp.shfl_sync(FULL, v, 0))(jnp.zeros((4, 32)))
    with pytest.raises(TypeError, match="width must be a Python int"):
        jaxwarp.shfl_sync(FULL, x, 0, 16.0)
    with pytest.raises(jax.errors.ConcretizationTypeError, match="width is a static argument"):
        jax.jit(lambda w: jaxwarp.shfl_sync(FULL, x, 0, w))(16)
    with pytest.raises(ValueError, match=r"src_lane must be a scalar or one value per lane"):
        jaxwarp.shfl_sync(FULL, x, jnp.zeros(16, jnp.int32))
    with pytest.raises(TypeError, match="lane_mask must be an integer"):
        jaxwarp.shfl_xor_sync(FULL, x, jnp.zeros(32, jnp.float32))
    with pytest.raises(TypeError, match="mask must be a 32-bit integer lane mask"):
        jaxwarp.shfl_sync(jnp.float32(1.0), x, 0)
    with pytest.raises(TypeError, match="mask must be a 32-bit integer lane mask"):
        jax.jit(lambda m: jaxwarp.shfl_up_sync(m, x, 1))(jnp.zeros((), jnp.int16))
    with pytest.raises(ValueError, match="mask=0x100000000 does not fit in 32 bits"):
        jaxwarp.shfl_sync(2**32, x, 0)


def test_nanosleep_and_masks():
    assert jaxwarp.nanosleep(1000) is None
    jax.jit(lambda n: jaxwarp.nanosleep(n))(jnp.uint32(5))
    with pytest.raises(ValueError, match="ns=2000000 is outside"):
        jaxwarp.nanosleep(2_000_000)
    with pytest.raises(TypeError, match="ns must be an integer"):
        jaxwarp.nanosleep(jnp.float32(1.0))
    assert int(jaxwarp.activemask()) == FULL
    np.testing.assert_array_equal(jaxwarp.lane_id(), np.arange(32))
