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
    return jax.jit(jax.value_and_grad(jaxwarp.emulate(_loss, recipe=recipe, mode=mode),
                                      argnums=(0, 1)))


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
