"""jaxwarp.emulate: every product of a program through jaxwarp.matmul, bit for bit."""

import math
import os
import pathlib
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import jaxwarp
from jaxwarp._src.emulate import (
    EmulationReport,
    Product,
    ProductFilter,
    UnsupportedProductError,
    emulate,
)

ROOT = pathlib.Path(__file__).resolve().parents[1]
FORMATS = ["bf16", "f16", "tf32"]
RNG = np.random.default_rng(0)


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def same_bits(got, want):
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape,
                                                                 want.dtype, want.shape)
    np.testing.assert_array_equal(got.view(f"u{got.dtype.itemsize}"),
                                  want.view(f"u{want.dtype.itemsize}"))


# One compiled matmul per call signature, shared by the tests (an eager matmul runs its
# operations one by one, each compiled on its first use).
_MATMUL = jax.jit(jaxwarp.matmul, static_argnames=(
    "operand_format", "accumulator", "tile", "arch", "mode", "instruction", "promote_every"))


def mm(fmt, **kw):
    return lambda a, b: _MATMUL(a, b, operand_format=fmt, **kw)


# --- the contract -----------------------------------------------------------------------

@pytest.mark.parametrize("fmt", FORMATS)
def test_matmul_contract(fmt):
    a, b = rand(32, 48), rand(48, 16)
    same_bits(emulate(lambda x, y: x @ y, operand_format=fmt)(a, b), mm(fmt)(a, b))


# f16 by default; bf16 and tf32 (the same rule, slower) with -m slow.
@pytest.mark.parametrize("fmt", [f if f == "f16" else pytest.param(f, marks=pytest.mark.slow)
                                 for f in FORMATS])
def test_grad_contract(fmt):
    a, b = rand(32, 48), rand(48, 16)
    def loss_e(x, y):
        return jnp.sum(jnp.sin(emulate(lambda p, q: p @ q, operand_format=fmt)(x, y)))
    def loss_m(x, y):
        return jnp.sum(jnp.sin(mm(fmt)(x, y)))
    for g, h in zip(jax.jit(jax.grad(loss_e, (0, 1)))(a, b),
                    jax.jit(jax.grad(loss_m, (0, 1)))(a, b), strict=True):
        same_bits(g, h)


def test_grad_inside_emulate_equals_grad_of_matmul():
    # emulate(grad(f)): the transposed products appear as dot_generals and are emulated by
    # matmul's forward, which is what matmul's own backward rule computes. The loss's
    # cotangent (x @ y) * 2 * 0.5 is exact (multiplications by powers of two): the two
    # sides are different XLA programs, and an elementwise derivative such as tanh's
    # (1 - t) * (1 + t), which cancels where tanh saturates, is compiled per program
    # (fusion, FMA contraction, the GPU's tanh) and need not agree to the bit on a GPU.
    a, b = rand(32, 32), rand(32, 32)
    def f(x, y):
        return 0.5 * jnp.sum(jnp.square(x @ y))
    got = emulate(jax.grad(f, (0, 1)), operand_format="bf16")(a, b)
    want = jax.jit(jax.grad(lambda x, y: 0.5 * jnp.sum(jnp.square(mm("bf16")(x, y))),
                            (0, 1)))(a, b)
    for g, h in zip(got, want, strict=True):
        same_bits(g, h)


@pytest.mark.slow
def test_batched_einsum_is_per_batch_matmul():
    a, b = rand(3, 16, 32), rand(3, 32, 16)
    got = emulate(lambda x, y: jnp.einsum("bmk,bkn->bmn", x, y), operand_format="bf16")(a, b)
    same_bits(got, np.stack([mm("bf16")(a[i], b[i]) for i in range(3)]))


def test_contracting_dims_anywhere_and_several():
    # lhs (k1, m, k2), rhs (n, k2, k1): K = (k1, k2) row-major, in dimension_numbers order.
    a, b = rand(4, 16, 8), rand(16, 8, 4)
    dn = (((0, 2), (2, 1)), ((), ()))
    got = emulate(lambda x, y: lax.dot_general(x, y, dn), operand_format="bf16")(a, b)
    a2 = a.transpose(1, 0, 2).reshape(16, 32)
    b2 = b.transpose(2, 1, 0).reshape(32, 16)
    same_bits(got, mm("bf16")(a2, b2))


def test_batch_dims_not_leading():
    a, b = rand(16, 2, 32), rand(32, 16, 2)  # batch at 1 and 2
    dn = (((2,), (0,)), ((1,), (2,)))
    got = emulate(lambda x, y: lax.dot_general(x, y, dn), operand_format="f16")(a, b)
    want = np.stack([mm("f16")(a[:, i], b[:, :, i]) for i in range(2)])
    same_bits(got, want)


def test_preferred_element_type_and_mixed_dtypes():
    a = rand(16, 32).astype(jnp.bfloat16)
    b = rand(32, 16)
    def f(x, y):
        return lax.dot_general(x, y, (((1,), (0,)), ((), ())),
                               preferred_element_type=jnp.float32)
    got = emulate(f, operand_format="bf16")(a, b)
    same_bits(got, mm("bf16")(a, b))
    # bf16 x bf16 -> bf16: the f32 accumulator rounded to nearest at the end.
    a16, b16 = a, b.astype(jnp.bfloat16)
    got = emulate(lambda x, y: x @ y, operand_format="bf16")(a16, b16)
    same_bits(got, mm("bf16")(a16, b16).astype(jnp.bfloat16))


def test_vector_products_and_padding():
    # Shapes that are no multiple of the tile are zero-padded; a zero-padded K adds
    # all-zero k steps, which leave the accumulator's bits unchanged.
    a, b = rand(5, 20), rand(20, 3)
    got = emulate(lambda x, y: x @ y, operand_format="tf32")(a, b)
    want = mm("tf32")(np.pad(a, ((0, 11), (0, 12))), np.pad(b, ((0, 12), (0, 13))))[:5, :3]
    same_bits(got, want)
    v = rand(20)
    same_bits(emulate(lambda x, y: x @ y, operand_format="bf16")(v, b),
              mm("bf16")(np.pad(v[None], ((0, 15), (0, 12))), np.pad(b, ((0, 12), (0, 13))))[0, :3])


@pytest.mark.slow
def test_k_padding_changes_no_bit():
    a, b = rand(16, 24), rand(24, 16)  # tf32 K=24 is a tile multiple; emulate pads to 32
    same_bits(emulate(lambda x, y: x @ y, operand_format="tf32")(a, b), mm("tf32")(a, b))


# --- transformations ----------------------------------------------------------------------

@pytest.mark.slow
def test_jit_vmap_nesting():
    a, b = rand(4, 16, 32), rand(32, 16)
    want = np.stack([mm("bf16")(a[i], b) for i in range(4)])
    def f(x, y):
        return x @ y
    def e(g):
        return emulate(g, operand_format="bf16")
    same_bits(jax.jit(e(f))(a[0], b), want[0])
    same_bits(e(jax.jit(f))(a[0], b), want[0])
    same_bits(jax.vmap(e(f), (0, None))(a, b), want)
    same_bits(e(jax.vmap(f, (0, None)))(a, b), want)
    same_bits(jax.jit(jax.vmap(e(jax.jit(f)), (0, None)))(a, b), want)


def test_no_retrace():
    count = []

    def f(x, y):
        count.append(1)
        return x @ y

    g = emulate(f, operand_format="bf16")
    a, b = rand(16, 16), rand(16, 16)
    g(a, b)
    g(a + 1, b)
    assert len(count) == 1


def test_control_flow_and_wrappers():
    x = rand(16, 16) * 0.3

    def prog(dot):
        def f(x):
            y = jax.jit(lambda z: dot(z, z))(x)
            y = lax.scan(lambda c, _: (dot(c, x), None), y, None, length=2)[0]
            y = lax.while_loop(lambda s: s[0] < 2, lambda s: (s[0] + 1, dot(s[1], x)), (0, y))[1]
            y = lax.cond(True, lambda z: dot(z, x), lambda z: z, y)
            y = jax.checkpoint(lambda z: dot(z, x))(y)
            return y
        return f

    got, rep = emulate(prog(lambda p, q: p @ q), operand_format="bf16", report=True)(x)
    same_bits(got, jax.jit(prog(mm("bf16")))(x))
    assert [e.product.context for e in rep.entries] == [
        ("jit",), ("scan",), ("while",), ("cond",), ("checkpoint",)]
    assert rep.entries[0].product.name_stack == "jit(<lambda>)"


@pytest.mark.slow
def test_custom_jvp_and_custom_vjp():
    x = rand(16, 16) * 0.3

    @jax.custom_jvp
    def g(z):
        return jnp.tanh(z @ z)

    @g.defjvp
    def g_jvp(p, t):
        (z,), (dz,) = p, t
        y = g(z)
        return y, (1 - y * y) * (dz @ z + z @ dz)

    @jax.custom_vjp
    def h(z):
        return z @ z

    h.defvjp(lambda z: (h(z), z), lambda z, ct: (ct @ z.T + z.T @ ct,))

    def f(z):
        return h(g(z))
    got = emulate(f, operand_format="bf16")(x)
    y = jnp.tanh(mm("bf16")(x, x))
    same_bits(got, mm("bf16")(y, y))
    # Gradient: g's primal inside its jvp rule is emulated (so the forward value under
    # differentiation is the emulated one); the user's bwd of h is emulated too.
    _, rep = emulate(jax.grad(lambda z: f(z).sum()), operand_format="bf16", report=True)(x)
    reasons = {e.reason for e in rep.skipped}
    assert rep.count >= 3 and reasons <= {
        "product on tangents in a custom_jvp rule (run as written)"}
    gr = jax.grad(lambda z: emulate(f, operand_format="bf16")(z).sum())(x)
    assert np.isfinite(np.asarray(gr)).all()


def test_shard_map():
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]), ("x",))
    P = jax.sharding.PartitionSpec
    f = jax.shard_map(lambda a, b: a @ b, mesh=mesh, in_specs=(P("x"), P()), out_specs=P("x"))
    a, b = rand(32, 32), rand(32, 16)
    same_bits(emulate(f, operand_format="bf16")(a, b), mm("bf16")(a, b))


def test_conv_is_implicit_gemm_in_kh_kw_cin_order():
    x = rand(2, 6, 7, 3)  # NHWC
    w = rand(3, 3, 3, 5)  # HWIO
    dn = ("NHWC", "HWIO", "NHWC")
    def conv(x, w):
        return lax.conv_general_dilated(x, w, (1, 2), ((1, 1), (0, 1)),
                                        dimension_numbers=dn, rhs_dilation=(1, 1))
    got = emulate(conv, operand_format="bf16")(x, w)
    # im2col by hand: rows (n, oh, ow), k = (kh, kw, cin) row-major.
    xp = np.pad(x, ((0, 0), (1, 1), (0, 1), (0, 0)))
    oh, ow = got.shape[1:3]
    rows = np.stack([xp[n, i:i + 3, 2 * j:2 * j + 3, :].reshape(-1)
                     for n in range(2) for i in range(oh) for j in range(ow)])
    want = mm("bf16")(np.pad(rows, ((0, (-len(rows)) % 16), (0, 5))),
                      np.pad(w.reshape(27, 5), ((0, 5), (0, 11))))[:len(rows), :5]
    same_bits(got, np.asarray(want).reshape(2, oh, ow, 5))
    # and it is the convolution: within bf16's operand rounding of the fp32 one
    def exact(x, w):
        return lax.conv_general_dilated(x, w, (1, 2), ((1, 1), (0, 1)),
                                        dimension_numbers=dn,
                                        precision=lax.Precision.HIGHEST)
    scale = np.asarray(exact(np.abs(x), np.abs(w)))
    assert np.all(np.abs(np.asarray(got) - np.asarray(exact(x, w))) <= 2.0 ** -7 * scale)


@pytest.mark.slow
def test_conv_groups_dilation_and_layouts():
    rng = np.random.default_rng(7)  # own data: the result must not depend on test order
    x = rng.standard_normal((2, 4, 9, 8)).astype(np.float32)  # NCHW
    w = rng.standard_normal((6, 2, 2, 3)).astype(np.float32)  # OIHW, 2 groups of 2 channels
    def conv(x, w):
        return lax.conv_general_dilated(
        x, w, (2, 1), ((0, 1), (2, 0)), lhs_dilation=(1, 2), rhs_dilation=(2, 1),
        feature_group_count=2, dimension_numbers=("NCHW", "OIHW", "NCHW"),
        precision=lax.Precision.HIGHEST)
    got = np.asarray(emulate(conv, operand_format="tf32")(x, w), np.float64)
    # The same convolution of the operands converted as emulate converts them
    # (__float_to_tf32), summed in fp32: the two differ only by the tensor core's
    # truncating accumulation, a few units of 2**-23 of the sum of |terms| per output.
    def tf32(v):
        return np.asarray(jaxwarp.float_to_tf32(v))
    want = np.asarray(conv(tf32(x), tf32(w)), np.float64)
    scale = np.asarray(conv(np.abs(tf32(x)), np.abs(tf32(w))), np.float64)
    assert got.shape == want.shape
    assert np.all(np.abs(got - want) <= 2.0 ** -20 * scale), np.max(np.abs(got - want) / scale)
    g = jax.grad(lambda x: emulate(conv, operand_format="tf32")(x, w).sum())(x)
    np.testing.assert_allclose(g, jax.grad(lambda x: conv(x, w).sum())(x), rtol=2e-3, atol=2e-3)


# --- choosing and reporting ---------------------------------------------------------------

def test_filter_by_name_and_size():
    a, b = rand(16, 64), rand(64, 16)

    def f(x, y):
        with jax.named_scope("logits"):
            z = x @ y
        return z @ y.T[:16, :16] + (x[:, :4] @ y[:4, :])

    flt = ProductFilter.min_size(k=16) & ~ProductFilter.name_contains("logits")
    got, rep = emulate(f, operand_format="bf16", filter=flt, report=True)(a, b)
    want = jax.jit(lambda x, y: mm("bf16")(x @ y, y.T[:16, :16]) + x[:, :4] @ y[:4, :])(a, b)
    same_bits(got, want)
    assert [e.emulated for e in rep.entries] == [False, True, False]
    assert rep.entries[0].reason == "filtered out" and "logits" in rep.entries[0].product.name_stack
    assert rep.entries[2].product.k == 4
    assert "1 of 3 products emulated" in str(rep)


def test_filter_predicate_and_report_through_jit_and_grad():
    a, b = rand(16, 32), rand(32, 16)
    def pred(p):
        return p.m * p.n >= 256
    f = emulate(lambda x, y: (x @ y).sum(), operand_format="f16", filter=pred, report=True)
    out, rep = jax.jit(f)(a, b)
    assert isinstance(rep, EmulationReport) and rep.count == 1
    g, rep2 = jax.grad(f, has_aux=True)(a, b)
    assert rep2.count == 1 and g.shape == a.shape
    assert rep.entries[0].product == Product(
        "dot_general", (16, 32), (32, 16), "float32", "float32", (16, 16), "float32",
        1, 16, 16, 32, rep.entries[0].product.name_stack, (), weight="rhs")


def test_integer_products_left_alone():
    a = RNG.integers(-5, 5, (16, 16)).astype(np.int32)
    got, rep = emulate(lambda x: x @ x, operand_format="bf16", report=True)(a)
    np.testing.assert_array_equal(got, a @ a)
    assert rep.count == 0 and "integer product" in rep.entries[0].reason


def test_unsupported_error_and_skip():
    c = (rand(16, 16) + 1j * rand(16, 16)).astype(np.complex64)
    with pytest.raises(UnsupportedProductError, match=r"dot_general .*complex64\[16, 16\]"):
        emulate(lambda x: x @ x, operand_format="bf16")(c)
    got, rep = emulate(lambda x: x @ x, operand_format="bf16", on_unsupported="skip",
                       report=True)(c)
    np.testing.assert_array_equal(got, jnp.matmul(c, c))
    assert rep.skipped[0].reason.startswith("complex operands")


def test_f64_operands_need_f64_format():
    with jax.enable_x64(True):
        a = rand(16, 16).astype(np.float64)
        with pytest.raises(UnsupportedProductError, match="f64 operands"):
            emulate(lambda x: x @ x, operand_format="tf32")(a)
        got = emulate(lambda x: x @ x, operand_format="f64", accumulator="f64")(a)
        same_bits(got, _MATMUL(a, a, operand_format="f64", accumulator="f64"))


@pytest.mark.parametrize("kw, exc, match", [
    (dict(operand_format="fp12"), ValueError, r"allowed: \('f16', 'bf16', 'tf32', 'f64'"),
    (dict(operand_format="bf16", instruction="hmma"), ValueError, "allowed: \\('wmma'"),
    (dict(operand_format="bf16", accumulator="f16"), ValueError, "accumulator"),
    (dict(operand_format="bf16", mode="fastest"), ValueError, "mode"),
    (dict(operand_format="bf16", tile=(8, 8, 8)), ValueError, "tile"),
    (dict(operand_format="bf16", scaling="block"), ValueError, "scaling"),
    (dict(operand_format="bf16", on_unsupported="warn"), ValueError, "on_unsupported"),
    (dict(operand_format="bf16", filter=3), TypeError, "filter"),
], ids=["format", "instruction", "accumulator", "mode", "tile", "scaling", "on_unsupported",
        "filter"])
def test_bad_settings(kw, exc, match):
    with pytest.raises(exc, match=match):
        emulate(lambda x: x, **kw)


def test_fast_mode_and_nested_emulate():
    a, b = rand(32, 32), rand(32, 32)
    same_bits(emulate(lambda x, y: x @ y, operand_format="bf16", mode="fast")(a, b),
              mm("bf16", mode="fast")(a, b))
    inner = emulate(lambda x, y: x @ y, operand_format="bf16", mode="fast")
    got, rep = emulate(inner, operand_format="f16", report=True)(a, b)
    same_bits(got, mm("bf16", mode="fast")(a, b))  # the outer emulate leaves them alone
    assert rep.count == 0


def test_static_arguments_and_outputs():
    a = rand(16, 16)
    f = emulate(lambda x, n, act: (act(x @ x) * n, act), operand_format="bf16")
    out, act = f(a, 2.0, jnp.tanh)
    assert act is jnp.tanh
    same_bits(out, jnp.tanh(mm("bf16")(a, a)) * 2.0)


# --- recipes -----------------------------------------------------------------------------

def pow2_exponent(x, fmax):
    """The largest k with amax(|x|) * 2**k <= fmax, within +-126 (0 for amax 0): float64."""
    amax = float(np.abs(np.asarray(x, np.float64)).max())
    if amax == 0 or not np.isfinite(amax):
        return 0
    k = math.floor(math.log2(fmax / amax))
    while amax * 2.0 ** (k + 1) <= fmax:
        k += 1
    while amax * 2.0 ** k > fmax:
        k -= 1
    return min(max(k, -126), 126)


def rescaled(t, k):
    """t * 2**-k computed exactly in float64, rounded once to t's dtype."""
    t = np.asarray(t)
    return (t.astype(np.float64) * 2.0 ** -k).astype(t.dtype)


@pytest.mark.slow
def test_tensor_scaling_recipe():
    a, b = rand(16, 32) * 1e-3, rand(32, 16) * 50
    got = emulate(lambda x, y: x @ y, operand_format="f16", scaling="tensor")(a, b)
    ka, kb = pow2_exponent(a, 65504), pow2_exponent(b, 65504)
    assert (ka, kb) != (0, 0)
    want = rescaled(mm("f16")(a * np.float32(2.0 ** ka), b * np.float32(2.0 ** kb)), ka + kb)
    same_bits(got, want)
    # The backward products run on scaled operands too (the gradient with its own scale).
    g = jax.grad(lambda x: emulate(lambda p, q: p @ q, operand_format="f16",
                                   scaling="tensor")(x, b).sum())(a)
    ct = np.ones((16, 16), np.float32)
    kg = pow2_exponent(ct, 65504)
    assert kg == 15  # 2**15 <= 65504 < 2**16
    same_bits(g, rescaled(mm("f16")(ct * np.float32(2.0 ** kg), b.T * np.float32(2.0 ** kb)),
                          kg + kb))


@pytest.mark.parametrize("fmt", ["f16", "e4m3", "e5m2"])
def test_tensor_scale_is_the_largest_power_of_two(fmt):
    # The scale exponent from the amax's bits equals the float64 definition, at the
    # edges (the format's largest value, powers of two, one ulp on either side) and
    # over magnitudes from 2**-100 to 2**100; NaN, inf and zero amax give 2**0.
    from jaxwarp._src.emulate.products import tensor_scale_exponent
    from jaxwarp._src.numerics.formats import FORMATS

    fmax = FORMATS[fmt].max_value
    edges = [fmax, fmax / 2, 1.0, 2.0 ** -100, 2.0 ** 100, 3e38]
    amaxes = [np.float32(v) for v in edges]
    amaxes += [np.nextafter(v, np.float32(np.inf)) for v in amaxes[:4]]
    amaxes += [np.nextafter(v, np.float32(0)) for v in amaxes[:4]]
    amaxes += list(np.float32(2.0) ** RNG.uniform(-100, 100, 200).astype(np.float32))
    xs = np.stack([np.array([-v, v / 3], np.float32) for v in amaxes]
                  + [np.array([v, 1.0], np.float32) for v in (np.nan, np.inf, 0.0)])
    got = np.asarray(jax.jit(jax.vmap(lambda x: tensor_scale_exponent(x, fmt)))(xs))
    want = [pow2_exponent(x, fmax) for x in xs[:-3]]
    np.testing.assert_array_equal(got[:-3], want)
    # NaN and inf amax give 2**0; a zero beside 1.0 gives 1.0's exponent.
    np.testing.assert_array_equal(got[-3:], [0, 0, pow2_exponent([1.0], fmax)])


@pytest.mark.parametrize("out", ["f32", "f16"])
def test_rescale_is_rounded_once_on_the_bits(out):
    # times_pow2 (every scaling step of the recipe) equals x * 2**k computed exactly in
    # float64 and rounded once, for normal, subnormal and special inputs and results,
    # with integer operations only (XLA's CPU flushes subnormal float results, the
    # GPU does not: on the bits both give these).
    from jaxwarp._src.emulate.products import times_pow2

    x = (RNG.standard_normal(4000) * 2.0 ** RNG.uniform(-140, 120, 4000)).astype(np.float32)
    x = np.concatenate([x, np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -3e-39,
                                     3.4e38, 65504.0, 65520.0], np.float32)])
    rescale = jax.jit(times_pow2, static_argnums=2)
    for k in (0, 1, -1, 13, -30, 126, -126, 250, -250):
        got = np.asarray(rescale(jnp.asarray(x), jnp.int32(k), out))
        with np.errstate(over="ignore"):
            want = (x.astype(np.float64) * 2.0 ** k).astype(got.dtype)
        nan = np.isnan(want)
        assert np.isnan(got[nan]).all()
        same_bits(got[~nan], want[~nan])


@pytest.mark.parametrize("kw", [
    dict(operand_format="bf16"), dict(operand_format="bf16", mode="fast"),
    dict(operand_format="f16", scaling="tensor"),
    dict(operand_format="e4m3", scaling="tensor", backward_format="e5m2"),
    dict(operand_format="tf32", backward_format="bf16"),
    dict(operand_format="e4m3"),
], ids=["bf16", "bf16-fast", "f16-scaled", "fp8-hybrid-scaled", "tf32-bf16-grads",
        "fp8-matmul-vjp"])
def test_gradient_program_is_backend_independent(kw):
    # Every product in the forward and backward program states its precision (an fp32
    # dot at DEFAULT precision runs as TF32 on an H100), and off the CPU there is no float
    # division (XLA's GPU division is div.full.f32, not correctly rounded). On a CPU the
    # exact datapath stores decoded operands through divisions by +-1
    # (datapath.decode_operand: exact, and XLA's CPU division is IEEE); that program
    # is traced on the CPU only.
    cpu = jax.default_backend() == "cpu"
    from jax.extend import core as jcore

    def eqns(jaxpr):
        for e in jaxpr.eqns:
            yield e
            for sub in jcore.jaxprs_in_params(e.params):
                yield from eqns(sub)

    f = emulate(lambda x, y: x @ y, **kw)
    closed = jax.make_jaxpr(jax.grad(lambda x, y: f(x, y).sum(), (0, 1)))(rand(32, 64),
                                                                          rand(64, 32))
    seen = list(eqns(closed.jaxpr))
    assert len(seen) > 100
    for e in seen:
        float_out = jnp.issubdtype(e.outvars[0].aval.dtype, jnp.floating)
        if e.primitive.name == "dot_general" and float_out:
            assert e.params["precision"] == (lax.Precision.HIGHEST,) * 2, e
            assert e.params["preferred_element_type"] is not None, e
        assert cpu or not (e.primitive.name == "div" and float_out), e


@pytest.mark.parametrize("fmt", ["bf16", "tf32", "f64"])
def test_tensor_scaling_is_refused_for_fp32_range_formats(fmt):
    with pytest.raises(ValueError, match=r"scaling='tensor' is for the operand formats "
                                         r"\('f16', 'e4m3', 'e5m2'\)"):
        with jax.enable_x64(fmt == "f64"):
            emulate(lambda x, y: x @ y, operand_format=fmt, scaling="tensor")
    with pytest.raises(ValueError, match="backward_format='bf16'"):
        emulate(lambda x, y: x @ y, operand_format="f16", scaling="tensor",
                backward_format="bf16")


def test_format_as_dtype_or_alias():
    a, b = rand(16, 32), rand(32, 16)
    want = mm("bf16")(a, b)
    for fmt in (jnp.bfloat16, np.dtype(jnp.bfloat16), "bfloat16"):
        same_bits(emulate(lambda x, y: x @ y, operand_format=fmt)(a, b), want)
    f = emulate(lambda x, y: x @ y, operand_format=jnp.float16, backward_format=jnp.bfloat16)
    assert f.config["operand_format"] == "f16" and f.config["backward_format"] == "bf16"


def test_backward_format_recipe():
    a, b = rand(32, 32), rand(32, 32)
    def loss(x, y):
        return jnp.sum(jnp.sin(x @ y))
    ga = jax.grad(lambda x: loss(x, b) if False else emulate(
        loss, operand_format="bf16", backward_format="f16")(x, b))(a)
    gd = jnp.cos(mm("bf16")(a, b))
    same_bits(ga, mm("f16")(gd, b.T))


@pytest.mark.slow
@pytest.mark.parametrize("promote", [None, 128], ids=["no_promotion", "promote128"])
def test_fp8_hybrid_recipe(promote):
    a, b = rand(32, 256), rand(256, 32)
    f = emulate(lambda x, y: x @ y, operand_format="e4m3", backward_format="e5m2",
                scaling="tensor", promote_every=promote)
    got = f(a, b)
    ka, kb = pow2_exponent(a, 448), pow2_exponent(b, 448)
    kw = {} if promote is None else {"promote_every": promote}
    t = jaxwarp.matmul(a * np.float32(2.0 ** ka), b * np.float32(2.0 ** kb),
                       operand_format="e4m3", **kw)
    same_bits(got, rescaled(t, ka + kb))
    jax.grad(lambda x: f(x, b).sum())(a)


def test_fp8_instruction_wgmma():
    emulate(lambda x, y: x @ y, operand_format="e4m3", instruction="wgmma")


# --- sharding ------------------------------------------------------------------------------

_FOUR = textwrap.dedent(
    """
    import jax, jax.numpy as jnp, numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    from jaxwarp._src.emulate import emulate
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 16, 32), dtype=np.float32)
    w1 = rng.standard_normal((32, 48), dtype=np.float32)
    w2 = rng.standard_normal((48, 16), dtype=np.float32)

    def model(w1, w2, x):
        return jnp.tanh(jnp.einsum("bsd,de->bse", x, w1)) @ w2

    emulated = emulate(model, operand_format="bf16")
    # The outputs and the gradients (whose weight products reduce over the sharded
    # batch inside the emulated GEMMs); a loss's own mean is XLA's cross-device sum.
    step = jax.jit(lambda w1, w2, x: (emulated(w1, w2, x), jax.grad(
        lambda a, b: jnp.mean(emulated(a, b, x) ** 2), (0, 1))(w1, w2)))
    outs = []
    for n in (1, 4):
        mesh = Mesh(np.array(jax.devices()[:n]), ("b",))
        xs = jax.device_put(x, NamedSharding(mesh, P("b")))
        r = step(w1, w2, xs)
        if n == 4:
            assert len(xs.sharding.device_set) == 4
        outs.append([np.asarray(t) for t in jax.tree_util.tree_leaves(r)])
    for o, m in zip(*outs):
        assert o.tobytes() == m.tobytes()
    print("ok")
    """
)


@pytest.mark.slow
def test_sharded_batch_one_and_four_devices():
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4",
               JAX_PLATFORMS="cpu")
    res = subprocess.run([sys.executable, "-c", _FOUR], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.strip().endswith("ok")


@pytest.mark.slow
def test_docstring_examples():
    import doctest

    from jaxwarp._src.emulate import api, report

    for mod in (api, report):
        result = doctest.testmod(mod, extraglobs={"jaxwarp": jaxwarp, "jnp": jnp},
                                 optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
        assert result.attempted > 0 and result.failed == 0


