"""fp8 training recipes: TransformerEngine's delayed scaling (a scale that follows its amax
history) and emulate's blockwise recipe (DeepSeek-V3), against NumPy references."""

import functools

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import jaxwarp
from jaxwarp import fp8
from jaxwarp._src.scaling.blockwise import block_scales


def _u32(x):
    return np.asarray(x, np.float32).view(np.uint32)


def _te_scales(amaxes, history_len, algo, margin, fmax=448.0):
    """TransformerEngine's amax_and_scale_update, step by step, in NumPy fp32: record the
    amax in slot 0, reduce, scale = (fmax * 2**-margin) / amax (or the previous scale),
    roll by one and zero slot 0."""
    hist = [np.float32(0)] * history_len
    scale, out = np.float32(1), []
    for a in amaxes:
        hist[0] = np.float32(a)
        red = max(hist) if algo == "max" else hist[0]
        if np.isfinite(red) and red > 0:
            scale = np.float32(fmax * 2.0**-margin) / red  # IEEE fp32 division
        out.append(scale)
        hist = hist[1:] + hist[:1]
        hist[0] = np.float32(0)
    return np.asarray(out, np.float32)


AMAXES = [3.0, 40.0, 0.7, 0.7, 0.7, np.inf, 0.0, 5.5, 0.3, 0.3, 0.3, 0.3]


@pytest.mark.parametrize("history_len,algo,margin", [(1, "max", 0), (3, "max", 0),
                                                      (5, "max", 2), (4, "most_recent", 1)])
def test_delayed_scale_follows_history(history_len, algo, margin):
    r = fp8.DelayedScaling(margin=margin, amax_history_len=history_len, amax_compute_algo=algo)
    step = jax.jit(r.update)
    s, got = r.init(1), []
    for a in AMAXES:
        s = step(s, jnp.array([a], jnp.float32))
        got.append(s.scale[0])
    np.testing.assert_array_equal(_u32(got), _u32(_te_scales(AMAXES, history_len, algo,
                                                              margin)))
    assert s.amax_history.shape == (history_len, 1)
    assert float(s.amax_history[0, 0]) == 0  # slot 0 zeroed for the next step


def test_history_len_changes_the_scale():
    # After the 40.0 spike, a window of 3 forgets it a step before a window of 5 does.
    def scales(n):
        r = fp8.DelayedScaling(amax_history_len=n)
        s, out = r.init(1), []
        for a in AMAXES[:6]:
            s = r.update(s, jnp.array([a], jnp.float32))
            out.append(float(s.scale[0]))
        return out

    s3, s5 = scales(3), scales(5)
    assert s3[:4] == s5[:4]
    assert s3[4] == np.float32(448) / np.float32(0.7) and s5[4] == np.float32(448) / np.float32(40)


# Slow (two jits); the default run checks delayed_matmul's numbers in its doctest.
@pytest.mark.slow
def test_delayed_matmul_bits():
    # TransformerEngine's step: qa = fp8(fl32(a * sa)), D = fl32(T * fl32(1/sa * 1/sb)),
    # then the state records amax(|a|), amax(|b|) and updates the scales.
    rng = np.random.default_rng(50)
    a = (rng.normal(size=(16, 64)) * 0.01).astype(np.float32)
    b = (rng.normal(size=(64, 8)) * 300).astype(np.float32)
    r = fp8.DelayedScaling(amax_history_len=2)
    prior = np.array([0.05, 1500.0], np.float32)  # above this step's amaxes: no saturation
    state = r.update(r.init(), prior)
    step = jax.jit(functools.partial(fp8.delayed_matmul, recipe=r))
    d, new = step(a, b, state)
    sa, sb = np.asarray(state.scale)
    qa = np.clip(a * sa, -448, 448).astype(ml_dtypes.float8_e4m3fn)
    qb = np.clip(b * sb, -448, 448).astype(ml_dtypes.float8_e4m3fn)
    t = jaxwarp.matmul(qa, qb, operand_format="e4m3")
    inv = (np.float32(1) / sa) * (np.float32(1) / sb)
    np.testing.assert_array_equal(_u32(d), _u32(np.asarray(t) * inv))
    amax = np.array([np.abs(a).max(), np.abs(b).max()], np.float32)
    want = np.maximum(amax, prior)  # the window holds both steps
    np.testing.assert_array_equal(_u32(new.scale), _u32(np.float32(448) / want))
    # Each fp8 operand is within 2**-4 of its value (no saturation): a first-principles bound.
    bound = np.abs(a).astype(np.float64) @ np.abs(b) * (2 * 2.0**-4 + 2.0**-8)
    assert (np.abs(np.asarray(d) - a.astype(np.float64) @ b) <= bound).all()


# Slow: a jit of the emulated forward and backward; the arithmetic of each block-scaled
# product is checked bit for bit by tests/scaling/test_fp8_blockwise.py.
@pytest.mark.slow
@pytest.mark.parametrize("scaling", ["blockwise", "blockwise_pow2"])
def test_emulate_blockwise_recipe(scaling):
    # DeepSeek-V3's Figure 7: fprop x (1x128) @ W (128x128); dgrad dy (1x128) @ W^T
    # (128x128); wgrad x^T (1x128 along the tokens) @ dy (128x1 along the tokens). M = 40
    # is zero-padded by emulate, which changes no amax and no sum.
    rng = np.random.default_rng(51)
    x = (rng.normal(size=(40, 256)) * 10.0 ** rng.integers(-2, 2, (40, 1))).astype(np.float32)
    w = (rng.normal(size=(256, 128)) * 0.05).astype(np.float32)
    dy = rng.normal(size=(40, 128)).astype(np.float32)
    f = jaxwarp.emulate(lambda x, w: x @ w, operand_format="e4m3", scaling=scaling)
    out, vjp = jax.vjp(f, x, w)
    dx, dw = vjp(dy)
    pow2 = scaling == "blockwise_pow2"

    def product(p, q, q_block):
        sa = block_scales(jnp.asarray(p), "e4m3", (1, 128), pow2)
        sb = block_scales(jnp.asarray(q), "e4m3", q_block, pow2)
        return jax.jit(functools.partial(jaxwarp.matmul, operand_format="e4m3"))(
            p, q, a_scale=sa, b_scale=sb)

    np.testing.assert_array_equal(_u32(out), _u32(product(x, w, (128, 128))))
    np.testing.assert_array_equal(_u32(dx), _u32(product(dy, w.T, (128, 128))))
    pad = ((0, 24), (0, 0))  # the tokens to 64, a multiple of wgmma's k (zeros: no change)
    np.testing.assert_array_equal(_u32(dw), _u32(product(np.pad(x, pad).T, np.pad(dy, pad),
                                                         (128, 1))))
