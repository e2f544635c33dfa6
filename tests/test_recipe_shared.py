"""A recipe's products through the shared executables (jaxwarp.config recipe_shared):
the same bits as the inline path, values and gradients, exact and fast, with the
stochastic rounding and Hadamard transform of NVFP4 under a PRNG key."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxwarp
import jaxwarp.backends
from jaxwarp._src.gemm import block_scale_gemm as bsg
from jaxwarp._src.recipes import shared
from jaxwarp._src.scaling import mx_kernels

pytestmark = pytest.mark.skipif(jax.default_backend() != "cpu",
                                reason="the shared executables are the CPU's")


def _data(shape, seed, scale=1.0):
    return jnp.asarray(np.random.default_rng(seed).standard_normal(shape) * scale,
                       jnp.float32)


def _bits(tree):
    return [np.asarray(x).view(np.uint32) for x in jax.tree.leaves(tree)]


def _assert_same_bits(a, b):
    for i, (x, y) in enumerate(zip(_bits(a), _bits(b), strict=True)):
        np.testing.assert_array_equal(x, y, err_msg=f"leaf {i}")


def _two_layer(x, w1, w2):
    return jnp.sin(jnp.tanh(x @ w1) @ w2)


def _step(recipe, mode, shared_on, x, w1, w2, key=None):
    # A two-layer step: 6 products (fprop, dgrad, wgrad per layer), each its own number
    # in the key's folds. Compared: the output and the gradients, not the loss (the sum
    # of the outputs is XLA's own float reduction, whose order XLA may choose anew when
    # the program around it changes).
    fn = jaxwarp.emulate(_two_layer, recipe=recipe, mode=mode, params_argnums=(1, 2))
    kw = {} if key is None else dict(rng_key=key)

    def loss(*a):
        y = fn(*a, **kw)
        return jnp.sum(y), y

    f = jax.value_and_grad(loss, argnums=(0, 1, 2), has_aux=True)
    with jaxwarp.config.override(recipe_shared="auto" if shared_on else "off"):
        assert shared.applies() == shared_on
        (_, y), grads = jax.jit(f)(x, w1, w2)
    return y, grads


def _check(recipe, mode, m=24, k=40, h=72, n=10, key=None):
    x, w1, w2 = _data((m, k), 0, 3.0), _data((k, h), 1), _data((h, n), 2)
    x = x.at[0, 0].set(1e-40).at[1, 1].set(-0.0)  # a subnormal and -0
    _assert_same_bits(_step(recipe, mode, True, x, w1, w2, key),
                      _step(recipe, mode, False, x, w1, w2, key))


def _one_product(fn, plan, x, w, key):
    def loss(x, w):
        y = fn(x, w, key, plan)
        return jnp.sum(jnp.nan_to_num(y)), y

    (_, y), grads = jax.jit(jax.value_and_grad(loss, (0, 1), has_aux=True))(x, w)
    return y, grads


def test_mxfp8_fast_product_same_bits_as_inline():
    # Fast mode: the dequantized operands come from the host, the dot stays in the
    # program in the inline path's form (B transposed): value and gradients of one
    # product (its three GEMMs).
    plan = jaxwarp.mx.RECIPES["mxfp8"].plan("fast")
    x, w = _data((20, 40), 0, 3.0).at[0, 0].set(1e-40), _data((40, 24), 1)
    key = jnp.zeros((2,), jnp.uint32)
    _assert_same_bits(_one_product(shared.gemm, plan, x, w, key),
                      _one_product(bsg.gemm, plan, x, w, key))


@pytest.mark.slow
@pytest.mark.parametrize("recipe", ["mxfp8", "nvfp4"])
@pytest.mark.parametrize("mode", ["exact", "fast"])
def test_recipe_same_bits_as_inline(recipe, mode):
    # NVFP4 with a key: stochastic rounding of the gradients and the Hadamard signs, each
    # product its own fold of the key; odd shapes (K, M, N padded).
    key = jax.random.key(11) if recipe == "nvfp4" else None
    _check(recipe, mode, key=key)


@pytest.mark.slow
def test_nvfp4_specials_and_batch_same_bits_as_inline():
    # inf / NaN in an operand (NVFP4's tensor scale becomes NaN), a batched product.
    plan = jaxwarp.mx.RECIPES["nvfp4"].plan("exact")
    x = _data((2, 20, 64), 3).at[0, 2, 5].set(jnp.inf)
    w = _data((64, 33), 4)
    key = jax.random.key_data(jax.random.key(5))

    _assert_same_bits(_one_product(shared.gemm, plan, x, w, key),
                      _one_product(bsg.gemm, plan, x, w, key))
    y = _data((2, 20, 64), 6)
    _assert_same_bits(jax.jit(lambda a, b: shared.gemm(a, b, key, plan))(y, w),
                      jax.jit(lambda a, b: bsg.gemm(a, b, key, plan))(y, w))


def test_random_bits_by_index_are_jax_random_bits():
    # The host draws a tensor's stochastic-rounding bits in runs of its flat indices.
    kd = jax.random.key_data(jax.random.fold_in(jax.random.key(3), 5))
    shape = mx_kernels.blocks_shape((48, 40), -2, 16)
    want = np.asarray(mx_kernels.random_bits(kd, shape)).reshape(-1)
    got = np.concatenate([np.asarray(jax.jit(shared._bits, static_argnums=2)(
        kd, jnp.uint32(s), 512)) for s in range(0, want.size, 512)])[:want.size]
    np.testing.assert_array_equal(got, want)


def test_the_step_program_holds_callbacks_not_the_quantizers():
    # Lowering only (nothing compiled): one callback per product, a small program.
    fn = jaxwarp.emulate(_two_layer, recipe="nvfp4", mode="exact", params_argnums=(1, 2))
    x, w1, w2 = _data((8, 32), 0), _data((32, 16), 1), _data((16, 8), 2)
    f = jax.value_and_grad(lambda *a: jnp.sum(fn(*a, rng_key=jax.random.key(0))),
                           argnums=(1, 2))
    text = jax.jit(lambda *a: f(*a)[1]).lower(x, w1, w2).as_text()
    assert text.count("callback") >= 5, text.count("callback")  # (no dx of layer 1)
    assert len(text.splitlines()) < 2000, len(text.splitlines())


def test_off_and_checked_mode_keep_the_inline_path():
    with jaxwarp.config.override(recipe_shared="off"):
        assert not shared.applies()
    seen = []

    def probe(x):
        seen.append(shared.applies())
        return x

    jaxwarp.checked(probe)(jnp.float32(0))
    assert seen == [False]
    assert shared.applies() == (jax.device_count() == 1)


def _promoted_bits(recipe, mode, key=None, m=24, k=40, h=72, n=10):
    # Three calls of one step with gemm_promote_after=0: the first two through the shared
    # executables (the second promotes its products), the third through the promoted ones.
    x, w1, w2 = _data((m, k), 0, 3.0), _data((k, h), 1), _data((h, n), 2)
    fn = jaxwarp.emulate(_two_layer, recipe=recipe, mode=mode, params_argnums=(1, 2))
    kw = {} if key is None else dict(rng_key=key)
    f = jax.jit(jax.grad(lambda *a: jnp.sum(fn(*a, **kw)), argnums=(0, 1, 2)))
    with jaxwarp.config.override(gemm_promote_after=0.0):
        first = f(x, w1, w2)
        jax.block_until_ready(f(x, w1, w2))
    assert not jaxwarp.backends.wait_for_promotions()
    assert any(p.whole is not None for p in shared._PRODUCTS.values())
    _assert_same_bits(f(x, w1, w2), first)


def test_promoted_products_give_the_same_bits():
    # One product's forward (the backward products stay in the shared executables).
    plan = jaxwarp.mx.RECIPES["mxfp8"].plan("fast")
    x, w, key = _data((8, 32), 0), _data((32, 8), 1), jnp.zeros((2,), jnp.uint32)
    f = jax.jit(lambda x, w: shared.gemm(x, w, key, plan))
    shared._PRODUCTS.clear()
    with jaxwarp.config.override(gemm_promote_after=0.0):
        first = f(x, w)
        jax.block_until_ready(f(x, w))
    assert not jaxwarp.backends.wait_for_promotions()
    assert [p.whole is not None for p in shared._PRODUCTS.values()] == [True]
    _assert_same_bits(f(x, w), first)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["exact", "fast"])
def test_promoted_nvfp4_products_give_the_same_bits(mode):
    _promoted_bits("nvfp4", mode, jax.random.key(3))


@pytest.mark.parametrize("recipe, mode", [
    ("mxfp8", "fast"), pytest.param("nvfp4", "exact", marks=pytest.mark.slow)])
def test_an_empty_operand_same_bits_as_inline(recipe, mode):
    # M = 0: no blocks to quantize; the wgrad product has K = 0 (no instruction: +0).
    plan = jaxwarp.mx.RECIPES[recipe].plan(mode)
    x, w, key = jnp.zeros((0, 32), jnp.float32), _data((32, 8), 1), jnp.zeros((2,), jnp.uint32)
    got = _one_product(shared.gemm, plan, x, w, key)
    _assert_same_bits(got, _one_product(bsg.gemm, plan, x, w, key))
    assert got[1][1].shape == (32, 8) and not np.asarray(got[1][1]).any()
