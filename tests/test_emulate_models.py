"""Real models under jaxwarp.emulate: Flax NNX and Equinox, an MLP and a small transformer.

Bits where bits are defined: an MLP against the same network written with
``jaxwarp.matmul`` (forward and gradients), and every model with all products
filtered out against the plain jitted model (the interpreter changes nothing
else). The transformers are checked for what emulate did (the report), closeness
to fp32 at bf16's precision, and finite gradients.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxwarp
from jaxwarp._src.emulate import emulate

D, SEQ, HEADS, BATCH = 32, 8, 2, 2


def same_bits(got, want):
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want), strict=True):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_array_equal(g.view(np.uint32), w.view(np.uint32))


def close(got, want, tol):
    """Within ``tol`` of the largest magnitude in ``want`` (a gradient that is zero in
    exact arithmetic, such as attention's key bias, is rounding noise in both)."""
    got, want = jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)
    scale = max(float(np.abs(np.asarray(w)).max()) for w in want)
    for g, w in zip(got, want, strict=True):
        g, w = np.asarray(g), np.asarray(w)
        assert np.isfinite(g).all()
        assert np.abs(g - w).max() <= tol * scale, (np.abs(g - w).max(), scale)


def tokens(seed=0):
    return np.random.default_rng(seed).standard_normal((BATCH, SEQ, D)).astype(np.float32)


# --- Flax NNX --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def nnx():
    return pytest.importorskip("flax.nnx")


def nnx_mlp(nnx):
    class MLP(nnx.Module):
        def __init__(self, rngs):
            self.l1 = nnx.Linear(D, 2 * D, rngs=rngs)
            self.l2 = nnx.Linear(2 * D, D, rngs=rngs)

        def __call__(self, x):
            return self.l2(jax.nn.relu(self.l1(x)))

    return MLP(nnx.Rngs(0))


def nnx_transformer(nnx):
    class Block(nnx.Module):
        def __init__(self, rngs):
            self.ln1 = nnx.LayerNorm(D, rngs=rngs)
            self.att = nnx.MultiHeadAttention(HEADS, D, decode=False, rngs=rngs)
            self.ln2 = nnx.LayerNorm(D, rngs=rngs)
            self.mlp = nnx_mlp(nnx)
            self.out = nnx.Linear(D, 10, rngs=rngs)

        def __call__(self, x):
            mask = nnx.make_causal_mask(jnp.ones(x.shape[:2]))
            x = x + self.att(self.ln1(x), mask=mask)
            x = x + self.mlp(self.ln2(x))
            return self.out(x)

    return Block(nnx.Rngs(1))


@pytest.mark.slow
def test_nnx_mlp_bits_forward_and_backward(nnx):
    model = nnx_mlp(nnx)
    graphdef, state = nnx.split(model)
    x = tokens().reshape(-1, D)

    def loss(state, x):
        return jnp.mean(nnx.merge(graphdef, state)(x) ** 2)

    def by_hand(state, x):
        def mm(a, b):
            return jaxwarp.matmul(a, b, operand_format="bf16")
        p = nnx.to_pure_dict(state)
        h = jax.nn.relu(mm(x, p["l1"]["kernel"]) + p["l1"]["bias"])
        return jnp.mean((mm(h, p["l2"]["kernel"]) + p["l2"]["bias"]) ** 2)

    e = emulate(loss, operand_format="bf16")
    same_bits(jax.jit(e)(state, x), jax.jit(by_hand)(state, x))
    g_e = jax.jit(jax.grad(e))(state, x)
    g_h = jax.jit(jax.grad(by_hand))(state, x)
    same_bits(nnx.to_pure_dict(g_e), nnx.to_pure_dict(g_h))


def test_nnx_module_as_argument(nnx):
    model = nnx_mlp(nnx)
    x = tokens().reshape(-1, D)
    got = emulate(lambda m, x: m(x), operand_format="tf32")(model, x)
    close(got, model(x), 2e-3)


def with_output(loss_and_out, **settings):
    """One compile for the forward output, the report and the gradient."""
    e = emulate(loss_and_out, report=True, **settings)

    def f(*args):
        (loss, out), rep = e(*args)
        return loss, (out, rep)

    return f


@pytest.mark.slow
def test_nnx_transformer(nnx):
    model = nnx_transformer(nnx)
    graphdef, state = nnx.split(model)
    x = tokens()

    def loss_and_out(state, x):
        out = nnx.merge(graphdef, state)(x)
        return jnp.mean(out ** 2), out

    (_, out32), g32 = jax.jit(jax.value_and_grad(loss_and_out, has_aux=True))(state, x)
    (_, out), rep = emulate(loss_and_out, operand_format="bf16", report=True)(state, x)
    # q, k, v, logits, weights @ v, out projection, 2 MLP layers, the head.
    assert rep.count == 9 and not rep.skipped
    close(out, out32, 0.03)
    # Gradients in fast mode: the same interpreter and vjps, a tenth of exact's XLA compile
    # time (exact gradients are checked bit for bit on the MLP above).
    f = with_output(loss_and_out, operand_format="bf16", mode="fast")
    (_, (out, rep)), g = jax.jit(jax.value_and_grad(f, has_aux=True))(state, x)
    assert rep.count == 9
    close(g, g32, 0.05)
    nothing = emulate(loss_and_out, operand_format="bf16", filter=lambda p: False)
    same_bits(nothing(state, x), jax.jit(loss_and_out)(state, x))


# --- Equinox ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def eqx():
    return pytest.importorskip("equinox")


def eqx_transformer(eqx):
    class Block(eqx.Module):
        ln1: eqx.nn.LayerNorm
        att: eqx.nn.MultiheadAttention
        ln2: eqx.nn.LayerNorm
        mlp: eqx.nn.MLP
        out: eqx.nn.Linear

        def __init__(self, key):
            k1, k2, k3 = jax.random.split(key, 3)
            self.ln1, self.ln2 = eqx.nn.LayerNorm(D), eqx.nn.LayerNorm(D)
            self.att = eqx.nn.MultiheadAttention(HEADS, D, key=k1)
            self.mlp = eqx.nn.MLP(D, D, 2 * D, 1, activation=jax.nn.gelu, key=k2)
            self.out = eqx.nn.Linear(D, 10, key=k3)

        def __call__(self, x):  # x: (SEQ, D)
            h = jax.vmap(self.ln1)(x)
            mask = jnp.tril(jnp.ones((SEQ, SEQ), bool))
            x = x + self.att(h, h, h, mask=mask)
            x = x + jax.vmap(self.mlp)(jax.vmap(self.ln2)(x))
            return jax.vmap(self.out)(x)

    return Block(jax.random.key(2))


@pytest.mark.slow
def test_eqx_mlp_forward_and_backward(eqx):
    mlp = eqx.nn.MLP(D, D, 2 * D, 2, activation=jax.nn.tanh, key=jax.random.key(0))
    x = tokens().reshape(-1, D)
    def loss(m, x):
        return jnp.mean(jax.vmap(m)(x) ** 2)
    out, rep = emulate(lambda m, x: jax.vmap(m)(x), operand_format="f16", report=True)(mlp, x)
    assert rep.count == 3
    close(out, jax.vmap(mlp)(x), 3e-3)
    # Equinox's own filtering: the activation function is a static leaf for emulate.
    g = eqx.filter_jit(eqx.filter_grad(emulate(loss, operand_format="f16")))(mlp, x)
    g32 = eqx.filter_jit(eqx.filter_grad(loss))(mlp, x)
    close(g, g32, 0.02)
    nothing = emulate(loss, operand_format="f16", filter=lambda p: False)
    same_bits(nothing(mlp, x), eqx.filter_jit(loss)(mlp, x))


@pytest.mark.slow
def test_eqx_transformer(eqx):
    model = eqx_transformer(eqx)
    x = tokens()

    def loss_and_out(m, x):
        out = jax.vmap(m)(x)
        return jnp.mean(out ** 2), out

    (_, out32), g32 = eqx.filter_jit(eqx.filter_value_and_grad(loss_and_out, has_aux=True))(
        model, x)
    (_, out), rep = emulate(loss_and_out, operand_format="bf16", report=True)(model, x)
    assert rep.count == 9 and not rep.skipped
    close(out, out32, 0.03)
    f = with_output(loss_and_out, operand_format="bf16", mode="fast")  # see test_nnx_transformer
    (_, (out, rep)), g = eqx.filter_jit(eqx.filter_value_and_grad(f, has_aux=True))(model, x)
    assert rep.count == 9
    close(g, g32, 0.05)
