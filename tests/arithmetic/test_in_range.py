"""The in-range arithmetic of exact bf16 / tf32 (the option ``arith_in_range_path``) gives the
general path's bits, and its predicate (``datapath_blocks.in_fp32_range``) is exact."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxwarp
from jaxwarp._src.arithmetic import datapath
from jaxwarp._src.arithmetic.datapath_blocks import RANGE_HI, RANGE_LO, in_fp32_range


def _pow2(e):
    return jnp.float32(2.0) ** e


@pytest.mark.parametrize(("a", "b", "want"), [
    # largest allowed products: exponents summing to RANGE_HI, and one more
    ([2.0 ** 63, 0.0], [2.0 ** (RANGE_HI - 63)], True),
    ([2.0 ** 63, 1.0], [2.0 ** (RANGE_HI - 62)], False),
    # smallest allowed: exponents summing to RANGE_LO, and one less
    ([2.0 ** -50, 0.0], [-(2.0 ** (RANGE_LO + 50))], True),
    ([2.0 ** -50], [1.5 * 2.0 ** (RANGE_LO + 49)], False),
    ([1.0, np.inf], [1.0], False),
    ([1.0, np.nan], [1.0], False),
    ([1.0, 2.0 ** -130], [1.0], False),  # an fp32 subnormal (flushed by XLA on a CPU)
    ([0.0, -0.0], [0.0], True),  # no non-zero product at all
], ids=["hi", "hi+1", "lo", "lo-1", "inf", "nan", "subnormal", "zeros"])
def test_predicate(a, b, want):
    a, b = jnp.asarray(a, jnp.float32), jnp.asarray(b, jnp.float32)
    assert bool(in_fp32_range(a, b)) is want
    assert bool(in_fp32_range(a.astype(jnp.bfloat16), b.astype(jnp.bfloat16))) is want


def test_predicate_is_one_scalar_under_vmap():
    # The cond stays a cond (one branch runs) instead of becoming a select of both; one
    # batch element out of range sends the whole batch to the general path
    # (test_matmul_one_cond_same_bits).
    a = jnp.ones((3, 4, 2), jnp.float32)
    b = jnp.ones((3, 2, 4), jnp.float32)
    jaxpr = jax.make_jaxpr(jax.vmap(lambda a, b: jax.lax.cond(
        in_fp32_range(a, b), lambda: a.sum(), lambda: -a.sum())))(a, b)
    assert [e.primitive.name for e in jaxpr.jaxpr.eqns][-1] == "cond"


def _draw(rng, kind, shape, fmt):
    s = rng.choice([-1.0, 1.0], shape) * (1 + rng.random(shape))
    e = {"spread": (-50, 51), "hi": (55, 63), "lo": (-50, -44)}.get(kind)
    x = s * 2.0 ** rng.integers(*e, shape) if e else rng.integers(-3, 4, shape) / 4.0
    x = np.where(rng.random(shape) < 0.1, 0.0, x).astype(np.float32)
    if fmt == "tf32":  # low bits the tensor core ignores
        return jnp.asarray((x.view(np.uint32) | np.uint32(0x1234)).view(np.float32))
    return jnp.asarray(x).astype(jnp.bfloat16)


def _c(rng, shape, scale):
    c = rng.standard_normal(shape).astype(np.float32) * np.float32(scale)
    sp = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 1e-40, -1e-42, 3e38, 2.0 ** -140],
                  np.float32)
    return jnp.asarray(np.where(rng.random(shape) < 0.3, rng.choice(sp, shape), c))


def _same_bits(cases, fmt, arch, instruction, k):
    out = {}
    for mode in ("off", "on"):
        with jaxwarp.config.override(arith_in_range_path=mode):  # a new function: traced
            f = jax.jit(lambda a, b, c: datapath.mma(
                a, b, c, a_format=fmt, c_format="f32", d_format="f32", arch=arch,
                instruction=instruction, instruction_k=k))
            out[mode] = [np.asarray(f(*abc)).view(np.uint32) for abc in cases]
    for x, y in zip(out["off"], out["on"], strict=True):
        np.testing.assert_array_equal(y, x)


def test_in_range_same_bits_one_tile():
    # The only default check of the arithmetic (the cond: the slow tests): sm_90 WMMA
    # bf16, products spread over 2**+-100, C with inf, NaN, -0 and fp32 subnormals, through
    # the in-range branch alone and the general path.
    rng = np.random.default_rng(0)
    a, b = _draw(rng, "spread", (2, 16, 16), "bf16"), _draw(rng, "spread", (2, 16, 16), "bf16")
    c = _c(rng, (2, 16, 16), 2.0 ** 20)
    assert bool(in_fp32_range(a, b))
    out = {}
    for path in ("general", "in_range"):
        with datapath.known_range(path):
            d = datapath.mma(a, b, c, a_format="bf16", c_format="f32", d_format="f32")
        out[path] = np.asarray(d).view(np.uint32)
    np.testing.assert_array_equal(out["in_range"], out["general"])


CONFIGS = [("sm_90", "wmma", "tf32", 16, 16, 8), ("sm_90", "mma_sync", "tf32", 16, 8, 4),
           ("sm_90a", "wgmma", "bf16", 64, 8, 16), ("sm_80", "mma_sync", "bf16", 16, 8, 16),
           ("sm_120", "mma_sync", "tf32", 16, 8, 4)]


@pytest.mark.slow  # five exact models, each traced and compiled twice
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: "_".join(map(str, c[:4])))
def test_in_range_same_bits(config):
    arch, instruction, fmt, m, n, k = config
    rng = np.random.default_rng(k + m)
    cases = []
    for kind, batch in itertools.product(["spread", "hi", "lo", "cancel"], [4]):
        a = _draw(rng, kind, (batch, m, 2 * k), fmt)
        b = _draw(rng, kind, (batch, 2 * k, n), fmt)
        c = _c(rng, (batch, m, n), 2.0 ** -100 if kind == "lo" else 2.0 ** 20)
        cases.append((a, b, c))
    _same_bits(cases, fmt, arch, instruction, k)


@pytest.mark.slow  # two exact matmuls traced and compiled twice
@pytest.mark.parametrize("fmt", ["bf16", "tf32"])
def test_matmul_one_cond_same_bits(fmt):
    # matmul's k loop under one cond (in range: the fast arithmetic; out of range: the
    # general path), also vmapped (the cond keeps one branch) and with promotion.
    rng = np.random.default_rng(7)
    a = _draw(rng, "spread", (2, 48, 64), fmt)
    b = _draw(rng, "spread", (2, 64, 32), fmt)
    big = a.at[1, 0, 0].set(2.0 ** 90)
    out = {}
    for mode in ("off", "on"):
        with jaxwarp.config.override(arith_in_range_path=mode):
            f = jax.jit(jax.vmap(lambda a, b: jaxwarp.matmul(a, b, operand_format=fmt,
                                                             mode="exact")))
            g = jax.jit(lambda a, b: jaxwarp.matmul(a, b, operand_format=fmt, mode="exact",
                                                    promote_every=32))
            out[mode] = [np.asarray(x).view(np.uint32)
                         for x in (f(a, b), f(big, b), g(a[0], b[0]), g(big[1], b[1]))]
    for x, y in zip(out["off"], out["on"], strict=True):
        np.testing.assert_array_equal(y, x)


def test_matmul_cond_branches_out_of_range(options):
    # Products beyond fp32's range both ways under matmul's one cond: the general branch
    # runs the general arithmetic (its trace is not the in-range branch's, which JAX's
    # cache of mma's custom_vjp once reused for it), so "on" gives "off"'s bits.
    import jaxwarp

    options(gemm_shared="off", gemm_fused_kernel="off")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((32, 64)).astype(np.float32)
    b = rng.standard_normal((64, 32)).astype(np.float32)
    a[:, :8] *= 2.0 ** 100
    b[:8, :] *= 2.0 ** 40  # products above 2**128
    a[1, 9], b[9, :] = 2.0 ** -120, 2.0 ** -30  # and below fp32's subnormals
    out, exact = {}, {}
    for mode in ("off", "on"):
        with jaxwarp.config.override(arith_in_range_path=mode):
            f = jax.jit(lambda a, b: jaxwarp.matmul(a, b, operand_format="bf16"))
            exact[mode] = str(jax.make_jaxpr(f)(a, b)).count("jit[name=_mma_float_exact")
            out[mode] = np.asarray(f(a, b)).view(np.uint32)
    assert exact == {"off": 1, "on": 2}  # one trace per branch
    np.testing.assert_array_equal(out["on"], out["off"])
