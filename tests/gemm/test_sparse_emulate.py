"""``jaxwarp.sparse.as_2_4`` and emulate's sparse products.

Outside emulate the marker is the identity with a zero gradient at pruned positions; under
emulate a product contracting a marked operand along its axis is ``matmul(...,
sparsity="2:4")`` bit for bit (a right-hand operand as ``D^T = W^T X^T``), and
``emulate(grad(f))`` equals ``grad(emulate(f))``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxwarp


def _data(seed=7):
    rng = np.random.default_rng(seed)
    x = jnp.asarray(rng.standard_normal((8, 32)), jnp.float32)
    w = jaxwarp.sparse.prune_2_4(jnp.asarray(rng.standard_normal((16, 32)), jnp.float32)).T
    return x, w  # w (K, N) = (32, 16), 2:4 along axis 0


def test_as_2_4_is_the_identity_with_a_masked_gradient():
    x, w = _data()

    @jax.jit
    def run(w):
        same = jaxwarp.sparse.as_2_4(w)
        grad = jax.grad(lambda w: jnp.sum(jaxwarp.sparse.as_2_4(w) * 3.0))(w)
        # vmap moves the marked axis: a batch of (K, N) weights, 2:4 along K
        batch = jax.vmap(lambda w: jaxwarp.sparse.as_2_4(w, axis=0), in_axes=1,
                         out_axes=1)(jnp.stack([w, w], 1))
        return same, grad, batch

    same, grad, batch = run(w)
    np.testing.assert_array_equal(np.asarray(same), np.asarray(w))
    np.testing.assert_array_equal(np.asarray(grad), np.where(np.asarray(w) != 0, 3.0, 0.0))
    np.testing.assert_array_equal(np.asarray(batch), np.asarray(jnp.stack([w, w], 1)))


@pytest.mark.slow
def test_emulate_runs_marked_products_sparse():
    x, w = _data()
    kw = dict(operand_format="f16", instruction="mma_sync")
    f = lambda x, w: jnp.tanh(x @ jaxwarp.sparse.as_2_4(w))  # noqa: E731
    got = jaxwarp.emulate(f, **kw)(x, w)
    want = jnp.tanh(jaxwarp.matmul(w.T, x.T, sparsity="2:4", **kw).T)
    np.testing.assert_array_equal(np.asarray(got).view(np.uint32),
                                  np.asarray(want).view(np.uint32))
    # a left-hand operand: A itself, 2:4 along its last axis
    h = lambda a, b: jaxwarp.sparse.as_2_4(a, axis=1) @ b  # noqa: E731
    got = jaxwarp.emulate(h, **kw)(w.T, x.T)
    want = jaxwarp.matmul(w.T, x.T, sparsity="2:4", **kw)
    np.testing.assert_array_equal(np.asarray(got).view(np.uint32),
                                  np.asarray(want).view(np.uint32))
    # emulate(grad) = grad(emulate): the forward sparse, dX dense, dW masked
    loss = lambda x, w: jnp.sum(f(x, w))  # noqa: E731
    g1 = jaxwarp.emulate(jax.grad(loss, argnums=(0, 1)), **kw)(x, w)
    g2 = jax.grad(lambda x, w: jnp.sum(jaxwarp.emulate(f, **kw)(x, w)), argnums=(0, 1))(x, w)
    for a, b in zip(g1, g2, strict=True):
        np.testing.assert_array_equal(np.asarray(a).view(np.uint32),
                                      np.asarray(b).view(np.uint32))
    assert not np.asarray(g1[1])[np.asarray(w) == 0].any()


@pytest.mark.slow
def test_checked_mode_reports_a_marked_weight_that_is_not_2_4():
    f = jax.jit(lambda w: jaxwarp.sparse.as_2_4(w))
    err, _ = jaxwarp.checked(f)(jnp.ones((8, 4), jnp.float32))
    with pytest.raises(Exception, match="w is not 2:4 sparse along axis 0"):
        err.throw()
    err, _ = jaxwarp.checked(f)(_data()[1])
    err.throw()  # a 2:4 weight: nothing to report
