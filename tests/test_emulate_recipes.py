"""emulate(fn, recipe=...): the MXFP8 and NVFP4 block-scaled training recipes."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxwarp
from jaxwarp import mx


def _data(shape, seed):
    return jnp.asarray(np.random.default_rng(seed).standard_normal(shape), jnp.float32)


X, W = _data((32, 64), 0), _data((64, 48), 1)


def _loss(x, w):
    return jnp.sum(jnp.tanh(x @ w))


def _train_step(recipe, mode="fast"):
    # w, the second argument, holds the parameters (params_argnums=1).
    return jax.jit(jax.value_and_grad(jaxwarp.emulate(_loss, recipe=recipe, mode=mode,
                                                      params_argnums=1), argnums=(0, 1)))


def _step(recipe, mode="fast", **call):
    return _train_step(recipe, mode)(X, W, **call)


def _bits(tree):
    return [np.asarray(x).view(np.uint32) for x in jax.tree.leaves(tree)]


def _equal(a, b):
    return all(np.array_equal(x, y) for x, y in zip(_bits(a), _bits(b), strict=True))


@pytest.mark.parametrize("mode", ["fast", pytest.param("exact", marks=pytest.mark.slow)])
def test_mxfp8_recipe_is_the_block_scaled_gemm(mode):
    # The recipe: every tensor MXFP8 e4m3 with rceil scales, in each product along its
    # contraction axis: jaxwarp.mx.matmul's own vjp, bit for bit, value and gradients.
    def ref(x, w):
        return jnp.sum(jnp.tanh(mx.matmul(x, w, "mxfp8_e4m3", scale_rule="rceil",
                                          mode=mode)))

    want = jax.jit(jax.value_and_grad(ref, argnums=(0, 1)))(X, W)
    assert _equal(_step("mxfp8", mode), want)


def test_recipe_field_changes_the_result():
    base = mx.RECIPES["mxfp8"]
    assert not _equal(_step(base), _step(base.replace(scale_rule="ocp")))


@pytest.mark.slow
@pytest.mark.parametrize("field, value", [
    ("weight_block", None), ("stochastic_gradients", False), ("rht_wgrad", False),
    ("gradient", "nvfp4"),  # unchanged: a control that the comparison can succeed
])
def test_nvfp4_recipe_fields(field, value):
    key = dict(rng_key=jax.random.key(0))
    base = mx.RECIPES["nvfp4"]
    same = getattr(base, field) == value
    assert _equal(_step(base, **key), _step(base.replace(**{field: value}), **key)) == same


@pytest.mark.slow  # NVFP4's quantizers take long to compile on the CPU
def test_nvfp4_recipe_keys():
    # Stochastic rounding of gradients and the Hadamard signs come from rng_key: the same
    # key gives the same bits, another key other gradients (the forward has neither).
    f = _train_step("nvfp4")
    (v0, g0), (v1, g1) = (f(X, W, rng_key=jax.random.key(k)) for k in (0, 1))
    assert _equal((v0, g0), f(X, W, rng_key=jax.random.key(0)))
    assert _equal(v0, v1)
    assert not _equal(g0[0], g1[0]) and not _equal(g0[1], g1[1])


def test_recipe_report_and_instruction():
    f = jaxwarp.emulate(lambda x, w: x @ w, recipe="mxfp8", mode="fast", report=True,
                        instruction="mma_sync")
    _, rep = f(X, W)
    assert rep.entries[0].operand_format == "mxfp8"
    assert f.config["recipe"].instruction == "mma_sync"
    assert f.config["arch"] is None  # the instruction's first target (sm_120a)


def test_report_header_names_the_recipe_not_an_operand_format():
    x, w = jnp.ones((32, 64)), jnp.ones((64, 64))
    _, rep = jaxwarp.emulate(lambda x, w: x @ w, recipe="mxfp8", report=True)(x, w)
    header = str(rep).splitlines()[0]
    assert "recipe=mxfp8" in header
    assert "operand_format" not in header and "Plan(" not in header
    _, rep = jaxwarp.emulate(lambda x, w: x @ w, operand_format="bf16", report=True)(x, w)
    assert "operand_format=bf16" in str(rep).splitlines()[0]


def test_recipe_docstring_points_at_public_names_only():
    doc = jaxwarp.mx.Recipe.__doc__
    assert "_src" not in doc and "module docstring" not in doc
    assert "fprop" in doc and "dgrad" in doc and "wgrad" in doc  # the table is here


@pytest.mark.parametrize("recipe", [None, "mxfp8"])
def test_a_key_is_accepted_and_ignored_where_unused(recipe):
    x, w = jnp.ones((32, 64)), jnp.ones((64, 64))
    kw = dict(recipe=recipe) if recipe else dict(operand_format="bf16")
    f = jaxwarp.emulate(lambda x, w: x @ w, **kw)
    want = np.asarray(f(x, w))
    for k in (0, 1):  # a different key changes nothing: no random bits are drawn
        np.testing.assert_array_equal(np.asarray(f(x, w, rng_key=jax.random.key(k))), want)
    with pytest.raises(ValueError, match="rng_key must be a single PRNG key"):
        f(x, w, rng_key=jax.random.split(jax.random.key(0), 2))  # still checked


def test_a_missing_key_says_how_to_pass_one():
    f = jaxwarp.emulate(lambda x, w: x @ w, recipe="nvfp4")
    with pytest.raises(ValueError, match=r"rng_key=jax.random.key\(0\)"):
        f(jnp.ones((32, 64)), jnp.ones((64, 64)))


# --------------------------------------------------------------------------------------
# Scope: TransformerEngine's ("linear": products of a weight) or every product ("all").

WQ, WO = _data((64, 64), 2), _data((16, 48), 3)
XA = _data((2, 16, 64), 4)


def _mx(a, b):  # one product of the mxfp8 recipe, fast mode, K zero-padded as emulate pads
    pad = -a.shape[-1] % 32
    a = jnp.pad(a, [(0, 0)] * (a.ndim - 1) + [(0, pad)])
    b = jnp.pad(b, [(0, 0)] * (b.ndim - 2) + [(0, pad), (0, 0)])
    return mx.matmul(a, b, "mxfp8_e4m3", scale_rule="rceil", mode="fast")


def _block(p, x, einsum=jnp.einsum, dense=jnp.matmul):
    """A linear layer, an attention-style batched product of activations (QK^T), a head
    (``einsum`` and ``dense``: the references' products)."""
    q = dense(x.reshape(32, 64), p["wq"]).reshape(2, 16, 64)  # M = 32, a weight
    s = einsum("bqd,bkd->bqk", q, q)  # batch dims, no weight: attention's QK^T
    return jnp.sum(jnp.tanh(dense(jax.nn.softmax(s / 4096.0).reshape(32, 16), p["wo"])))


def _mx_qk(spec, a, b):  # the batched product through the recipe's GEMM, as "all" runs it
    return _mx(a, jnp.swapaxes(b, 1, 2))


def _value_and_grad(f, *args):
    return jax.jit(jax.value_and_grad(f, has_aux=True))(*args)


def _scope_run(scope, grads):
    """emulate(_block) in ``scope`` and its reference (mx.matmul for each recipe GEMM),
    values and (``grads``) gradients, and the report."""
    p = dict(wq=WQ, wo=WO)
    qk = jnp.einsum if scope == "linear" else _mx_qk
    f = jaxwarp.emulate(_block, recipe="mxfp8", mode="fast", report=True, scope=scope)
    ref = lambda p, x: (_block(p, x, qk, _mx), None)  # noqa: E731
    if grads:
        (value, rep), g = _value_and_grad(f, p, XA)
        (want, _), want_g = _value_and_grad(ref, p, XA)
        return (value, g), (want, want_g), rep
    (value, rep), (want, _) = jax.jit(f)(p, XA), jax.jit(ref)(p, XA)
    return value, want, rep


def test_linear_scope_quantizes_the_weights_products_only():
    # The default with a recipe: the products of a weight are the recipe's GEMMs (values
    # and gradients), attention's batched product runs as written.
    got, want, rep = _scope_run("linear", grads=True)
    assert _equal(got, want)
    assert [e.emulated for e in rep.entries] == [True, False, True]
    assert [e.product.weight for e in rep.entries] == ["rhs", None, "rhs"]
    assert "outside scope='linear'" in rep.entries[1].reason
    f = jaxwarp.emulate(_block, recipe="mxfp8")
    assert f.config["scope"] == "linear" and f.config["params_argnums"] == (0,)


@pytest.mark.parametrize("grads", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_scope_all_is_every_product(grads):
    # scope="all" (the behaviour before scopes): every product the recipe's GEMM, the
    # right-hand operand the weight, attention's batched product included.
    got, want, rep = _scope_run("all", grads)
    assert _equal(got, want)
    assert rep.count == 3 and {e.product.weight for e in rep.entries} == {"rhs"}
    if grads:
        assert not _equal(got, _scope_run("linear", grads)[0])
    else:  # the value with QK^T as written (the linear scope's reference)
        p = dict(wq=WQ, wo=WO)
        assert not _equal(got, jax.jit(lambda p, x: _block(p, x, jnp.einsum, _mx))(p, XA))


def test_without_a_recipe_every_product_stays_the_default():
    p = dict(wq=WQ, wo=WO)
    f = jaxwarp.emulate(_block, operand_format="bf16", report=True)
    assert f.config["scope"] == "all" and f.config["params_argnums"] is None
    assert f(p, XA)[1].count == 3
    # The scope is there when asked for: bf16, and delayed scaling (one state per product
    # in scope).
    assert jaxwarp.emulate(_block, operand_format="bf16", report=True, scope="linear")(
        p, XA)[1].count == 2
    (_, state), rep = jaxwarp.emulate(_block, scaling=jaxwarp.fp8.DelayedScaling(),
                                      mode="fast", scope="linear", report=True)(p, XA)
    assert len(state) == rep.count == 2


#: A recipe whose weight has its own format, so that which operand is the weight shows.
_E5M2_WEIGHTS = mx.RECIPES["mxfp8"].replace(name="w-e5m2", weight="mxfp8_e5m2")


def test_a_weight_on_the_left_is_found_and_kept_the_weight():
    # Equinox's Linear computes W @ x: the weight is the left operand. The product runs
    # as D^T = x^T @ W^T with W^T the weight: the same bits as the layer written x @ W.
    w, x = _data((48, 64), 5), _data((64, 32), 6)

    def left(w, x):
        return jnp.sum(jnp.tanh(w @ x))

    def right(w, x):
        return jnp.sum(jnp.tanh((x.T @ w.T).T))

    kw = dict(recipe=_E5M2_WEIGHTS, mode="fast", report=True)
    (v, rep), g = _value_and_grad(jaxwarp.emulate(left, **kw), w, x)
    (v_right, _), g_right = _value_and_grad(jaxwarp.emulate(right, **kw), w, x)
    assert _equal((v, g), (v_right, g_right))
    assert rep.entries[0].product.weight == "lhs" and "weight: lhs" in str(rep)
    # The role matters in this recipe: x as the weight (scope="all") gives other bits.
    assert not _equal(v, jaxwarp.emulate(left, scope="all", **kw)(w, x)[0])


def test_weights_are_found_through_scan_jit_and_custom_vjp():
    # Stacked layers scanned over, a jitted layer and a custom_vjp: each product's
    # weight is a slice / transpose / cast of a parameter leaf.
    ws = jnp.stack([WQ, WQ * 0.5])

    @jax.custom_vjp
    def layer(w, h):
        return h @ w

    layer.defvjp(lambda w, h: (h @ w, (w, h)), lambda r, g: (r[1].T @ g, g @ r[0].T))

    def f(ws, x):
        h, _ = jax.lax.scan(lambda h, w: (jnp.tanh(h @ w.astype(jnp.bfloat16).astype(
            jnp.float32)), None), x, ws)
        h = jax.jit(lambda h, w: h @ w.T)(h, ws[0])
        return jnp.sum(layer(ws[1], h) @ (h.T @ h))  # the last two: activations only

    _, rep = jaxwarp.emulate(f, recipe="mxfp8", mode="fast", report=True)(ws, X)
    assert [e.emulated for e in rep.entries] == [True, True, True, False, False]


def test_filter_narrows_the_scope():
    # The filter sees the products in scope (with their weight) and narrows them; the
    # products outside the scope never reach it.
    seen = []

    def keep_first(p):
        seen.append(p)
        return p.k == 64  # x @ wq, not the head

    _, rep = jaxwarp.emulate(_block, recipe="mxfp8", mode="fast", filter=keep_first,
                             report=True)(dict(wq=WQ, wo=WO), XA)
    assert [e.emulated for e in rep.entries] == [True, False, False]
    assert rep.entries[2].reason == "filtered out"
    assert [p.weight for p in seen] == ["rhs", "rhs"]  # attention's never asked
    # With scope="all" the same filter sees every product (and keeps QK^T, k = 64).
    seen.clear()
    _, rep = jaxwarp.emulate(_block, recipe="mxfp8", mode="fast", filter=keep_first,
                             scope="all", report=True)(dict(wq=WQ, wo=WO), XA)
    assert len(seen) == 3 and [e.emulated for e in rep.entries] == [True, True, False]


def test_flax_block_in_te_scope():
    # A Flax block: the attention's projections and the MLP's Dense layers are in scope,
    # its two batched products (QK^T, PV) are not.
    nn = pytest.importorskip("flax.linen")

    class Block(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = x + nn.MultiHeadDotProductAttention(num_heads=2, qkv_features=64)(x, x)
            return x + nn.Dense(64)(nn.gelu(nn.Dense(128)(x)))

    model = Block()
    params = model.init(jax.random.key(1), XA)
    _, rep = jaxwarp.emulate(model.apply, recipe="mxfp8", mode="fast", report=True)(
        params, XA)
    skipped = [e.product.name_stack for e in rep.skipped]
    assert rep.count == 6 and len(skipped) == 2
    assert all("MultiHeadDotProductAttention" in n and "->" in n for n in skipped)
    assert {e.product.weight for e in rep.emulated} == {"rhs"}


def test_equinox_linear_weights_are_left_operands():
    eqx = pytest.importorskip("equinox")
    mlp = eqx.nn.MLP(64, 32, 64, depth=2, key=jax.random.key(0))
    _, rep = jaxwarp.emulate(lambda m, x: jax.vmap(m)(x), recipe="mxfp8", mode="fast",
                             report=True)(mlp, X)
    assert rep.count == 3 and {e.product.weight for e in rep.entries} == {"lhs"}


def test_blockwise_scaling_moves_a_left_weight_too():
    # DeepSeek-V3's blockwise fp8 scaling gives the weight 128x128 blocks: under
    # scope="linear" a left-hand weight gets them, as in the layer written x @ W.
    w, x = _data((128, 256), 7), _data((256, 128), 8) * 100
    kw = dict(operand_format="e4m3", scaling="blockwise", scope="linear", mode="fast")
    got = jaxwarp.emulate(lambda w, x: w @ x, **kw)(w, x)
    assert _equal(got, jaxwarp.emulate(lambda w, x: (x.T @ w.T).T, **kw)(w, x))
    assert not _equal(got, jaxwarp.emulate(lambda w, x: w @ x, **{**kw, "scope": "all"})(w, x))
