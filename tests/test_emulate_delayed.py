"""emulate with TransformerEngine's delayed scaling (``scaling=jaxwarp.fp8.DelayedScaling``):
every emulated product is ``jaxwarp.fp8.delayed_matmul`` with its own amax history, the
state threaded through the call."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxwarp
from jaxwarp import fp8


def _model(x, w1, w2):
    return jnp.maximum(x @ w1, 0.0) @ w2  # a ReLU: exact, and so is its derivative


def _data(n=64):
    rng = np.random.default_rng(0)
    # The steps' activations change range by orders of magnitude, so the scale of each
    # step (from the history) differs from the current amax's.
    xs = [jnp.float32(rng.normal(size=(n, n)) * s) for s in (1.0, 300.0, 0.01)]
    w1 = jnp.float32(rng.normal(size=(n, n)) * 0.1)
    w2 = jnp.float32(rng.normal(size=(n, n)))
    return xs, w1, w2


def _bits(x):
    return np.asarray(x).view(np.uint32)


def _reference(recipe, mode, xs, w1, w2):
    """The model's steps by hand, with delayed_matmul: outputs, states, gradients of w1."""
    step = jax.jit(functools.partial(fp8.delayed_matmul, recipe=recipe, mode=mode))

    def loss(w, x, s1, s2):
        h, s1 = step(x, w, s1)
        d, s2 = step(jnp.maximum(h, 0.0), w2, s2)
        return d.sum(), (d, s1, s2)

    s1 = s2 = recipe.init()
    outs = []
    for x in xs:
        g, (d, s1, s2) = jax.grad(loss, has_aux=True)(w1, x, s1, s2)
        outs.append((d, (s1, s2), g))
    return outs


@pytest.mark.slow  # about 30 s of CPU (fast) and more (exact): grad and 3 steps, twice
@pytest.mark.parametrize("mode", ["fast", "exact"])
def test_equals_delayed_matmul_step_by_step(mode):
    recipe = fp8.DelayedScaling(amax_history_len=2, margin=1)
    xs, w1, w2 = _data()
    f = jaxwarp.emulate(_model, operand_format="e4m3", scaling=recipe, mode=mode)

    def loss(w, x, state):
        out, state = f(x, w, w2, scaling_state=state)
        return out.sum(), (out, state)

    state = None  # TransformerEngine's initial buffers
    for (want, want_state, want_g), x in zip(_reference(recipe, mode, xs, w1, w2), xs,
                                             strict=True):
        g, (out, state) = jax.grad(loss, has_aux=True)(w1, x, state)
        np.testing.assert_array_equal(_bits(out), _bits(want))
        assert len(state) == 2  # one site per product, in program order
        for got_s, ref_s in zip(state, want_state, strict=True):
            np.testing.assert_array_equal(_bits(got_s.scale), _bits(ref_s.scale))
            np.testing.assert_array_equal(_bits(got_s.amax_history),
                                          _bits(ref_s.amax_history))
        np.testing.assert_array_equal(_bits(g), _bits(want_g))


def test_history_length_changes_the_result():
    xs, w1, _ = _data(32)
    xs = [xs[1], xs[0], xs[2]]  # 300x, 1x, 0.01x: the window decides the third scale

    def run(n):
        recipe = fp8.DelayedScaling(amax_history_len=n)
        f = jaxwarp.emulate(lambda x, w: x @ w, mode="fast", scaling=recipe)
        state = (recipe.init(),)  # given from the start: one trace
        for x in xs:
            out, state = f(x, w1, scaling_state=state)
        return out, state

    (o1, s1), (o3, s3) = run(1), run(3)
    # A window of 3 still holds the 300x step's amax: a smaller scale, another result.
    assert float(s3[0].scale[0]) < float(s1[0].scale[0])
    assert not np.array_equal(_bits(o1), _bits(o3))


def test_state_must_match_the_products():
    xs, w1, w2 = _data(32)
    recipe = fp8.DelayedScaling(amax_history_len=2)
    f = jaxwarp.emulate(_model, operand_format="e4m3", mode="fast", scaling=recipe)
    with pytest.raises(ValueError, match=r"scaling_state has 1 entries, but the function "
                                         r"has more emulated products"):
        f(xs[0], w1, w2, scaling_state=(recipe.init(),))
    with pytest.raises(ValueError, match=r"scaling_state\[0\] holds an amax_history of "
                                         r"shape \(4, 2\)"):
        f(xs[0], w1, w2, scaling_state=(fp8.DelayedScaling(amax_history_len=4).init(),) * 2)


def test_product_in_a_loop_is_unsupported():
    recipe = fp8.DelayedScaling(amax_history_len=2)

    def fn(x, w):
        return jax.lax.fori_loop(0, 2, lambda i, h: h @ w, x)

    x = jnp.ones((32, 32), jnp.float32)
    with pytest.raises(jaxwarp.UnsupportedProductError, match="own amax history"):
        jaxwarp.emulate(fn, operand_format="e4m3", mode="fast", scaling=recipe)(x, x)
