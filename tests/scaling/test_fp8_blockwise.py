"""DeepSeek-V3's fine-grained fp8 GEMM: block scales applied on each promotion, bit for bit
against a reference of the stated order (plain ints / fractions, no jaxwarp arithmetic)."""

import functools

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
import reference_tc as R

import jaxwarp
from jaxwarp._src.scaling.tensor_scale import fma_rn

F32 = R.FMTS["f32"]


def _u32(x):
    return np.asarray(x, np.float32).view(np.uint32)


def _ref_scales(x, block, power_of_two):
    """Block scales in NumPy: fp32 amax / 448, or 1 / pow2_floor(fl32(448 / amax))."""
    x = np.asarray(x, np.float32)
    bm, bk = block
    M, K = x.shape
    out = np.ones((-(-M // bm), -(-K // bk)), np.float32)
    for i in range(out.shape[0]):
        for j in range(out.shape[1]):
            amax = np.abs(x[i * bm:(i + 1) * bm, j * bk:(j + 1) * bk]).max()
            if amax == 0 or not np.isfinite(amax):
                continue
            if power_of_two:
                t = np.float32(448) / amax  # numpy fp32 division: IEEE, rn
                out[i, j] = np.float32(2.0 ** -np.frexp(t)[1] * 2)  # 1 / (t's power of 2)
            else:
                out[i, j] = amax / np.float32(448)
    return out


def _ref_quantize(x, s, block):
    full = np.repeat(np.repeat(s, block[0], 0), block[1], 1)[:x.shape[0], :x.shape[1]]
    q = np.clip(np.asarray(x, np.float32) / full, -448, 448)  # satfinite (no NaN here)
    return q.astype(ml_dtypes.float8_e4m3fn)


def _ref_chain(qa, qb):
    """The wgmma chain of fp8 qa @ qb from a zero accumulator (reference_tc, plain ints)."""
    P = R.preset_for("wgmma", "e4m3", "m16n8k32")
    A = qa.view(np.uint8).tolist()
    B = qb.view(np.uint8).tolist()
    d = np.zeros((qa.shape[0], qb.shape[1]), np.uint32).tolist()
    for k0 in range(0, qa.shape[1], 32):
        d = R.mma_tile([r[k0:k0 + 32] for r in A], B[k0:k0 + 32], d, "e4m3", "e4m3", "f32",
                       "f32", P)
    return np.asarray(d, np.uint32)


def _ref_blockwise(a, b, c, sa, sb, a_block, b_block):
    """acc = C; for each 128-k block: acc = fma(fl32(sa[m, kb] * sb[kb, n]), P_kb, acc)."""
    qa, qb = _ref_quantize(a, sa, a_block), _ref_quantize(b, sb, b_block)
    M, K = a.shape
    N = b.shape[1]
    sa_rows = np.repeat(sa, a_block[0], 0)[:M]
    sb_cols = np.repeat(sb, b_block[1], 1)[:, :N]
    acc = _u32(c).copy()
    for kb, k0 in enumerate(range(0, K, 128)):
        p = _ref_chain(qa[:, k0:k0 + 128], qb[k0:k0 + 128])
        s = _u32(sa_rows[:, kb][:, None] * sb_cols[kb][None, :])  # numpy fp32 multiply: rn
        for i in range(M):
            for j in range(N):
                acc[i, j] = R.fma_rn(R.decode(s[i, j], F32), R.decode(p[i, j], F32),
                                     R.decode(acc[i, j], F32), F32, 0x7FC00000)
    return acc


# Slow (a jit of each layout): the default run checks the promotion order with
# test_block_scales_are_fused_into_the_promotion.
@pytest.mark.slow
@pytest.mark.parametrize("power_of_two,b_block", [(False, (128, 128)), (True, (128, 1))],
                         ids=["fp32-scales-128x128", "pow2-scales-128x1"])
def test_block_scaled_matmul_bits(power_of_two, b_block):
    # K = 320: two full blocks and a last block of 64. A rows of very different size, so
    # that the 1x128 tiles' scales differ by orders of magnitude.
    rng = np.random.default_rng(40)
    M, K, N = 16, 320, 16
    a = (rng.normal(size=(M, K)) * 10.0 ** rng.integers(-3, 3, (M, 1))).astype(np.float32)
    b = (rng.normal(size=(K, N)) * 0.02).astype(np.float32)
    c = rng.normal(size=(M, N)).astype(np.float32)
    qa, sa = jaxwarp.fp8.quantize_blockwise(a, block=(1, 128), power_of_two=power_of_two)
    qb, sb = jaxwarp.fp8.quantize_blockwise(b.T, block=b_block[::-1],
                                            power_of_two=power_of_two)
    sb = sb.T  # b's scales: (Kb, Nb) or (Kb, N)
    np.testing.assert_array_equal(_u32(sa), _u32(_ref_scales(a, (1, 128), power_of_two)))
    np.testing.assert_array_equal(_u32(sb), _u32(_ref_scales(b, b_block, power_of_two)))
    np.testing.assert_array_equal(np.asarray(qa).view(np.uint8),
                                  _ref_quantize(a, np.asarray(sa), (1, 128)).view(np.uint8))
    mm = functools.partial(jaxwarp.matmul, operand_format="e4m3", instruction="wgmma")
    got = jax.jit(mm)(a, b, c, a_scale=sa, b_scale=sb)
    want = _ref_blockwise(a, b, c, np.asarray(sa), np.asarray(sb), (1, 128), b_block)
    np.testing.assert_array_equal(_u32(got), want)
    if not power_of_two:  # eager, and promote_every=128 is the same
        np.testing.assert_array_equal(_u32(mm(a, b, c, a_scale=sa, b_scale=sb,
                                             promote_every=128)), want)
    # Each fp8 operand is within 2**-4 of its value: a bound from first principles.
    bound = np.abs(a).astype(np.float64) @ np.abs(b) * (2 * 2.0**-4 + 2.0**-8) + 1e-6
    assert (np.abs(np.asarray(got) - (a.astype(np.float64) @ b + c)) <= bound).all()


def test_block_scales_are_fused_into_the_promotion():
    # Two blocks: acc = fma(s0, P0, C), then fma(s1, P1, acc), s = fl32(sa * sb). With
    # these values an fma (one rounding) differs from fl32(fl32(P * s) + acc).
    a = np.zeros((1, 256), np.float32)
    a[0, 0] = a[0, 128] = 1 + 2.0**-3  # e4m3 exact
    b = np.zeros((256, 8), np.float32)
    b[0] = b[128] = 1 + 2.0**-3
    b[128, 1] = -3  # column 1's second block cancels
    c = np.full((1, 8), -1.0, np.float32)
    sa = np.array([[1 + 2.0**-10 + 2.0**-23, 3.0]], np.float32)
    sb = np.array([[1.0], [1 / 3]], np.float32)
    f = jax.jit(functools.partial(jaxwarp.matmul, operand_format="e4m3"))
    got = _u32(f(a, b, c, a_scale=sa, b_scale=sb))
    qa, qb = _ref_quantize(a, sa, (1, 128)), _ref_quantize(b, sb, (128, 128))
    acc = _u32(c)[0].tolist()
    for kb in range(2):
        p = _ref_chain(qa[:, kb * 128:kb * 128 + 128], qb[kb * 128:kb * 128 + 128])[0]
        s = _u32(sa[0, kb] * sb[kb, 0])
        acc = [R.fma_rn(R.decode(s, F32), R.decode(pj, F32), R.decode(aj, F32), F32, 0)
               for pj, aj in zip(p.tolist(), acc, strict=True)]
    np.testing.assert_array_equal(got[0], acc)
    p0 = np.float32((1 + 2.0**-3) ** 2)
    assert np.float32(np.float32(p0 * sa[0, 0]) - 1) != np.float32(
        np.float64(p0) * np.float64(sa[0, 0]) - 1)  # the two roundings would differ


def test_fma_rn_bits():
    rng = np.random.default_rng(41)
    n = 600
    x = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)
    y = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)
    z = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)
    # Cancellation (z ~ -x * y), subnormal products and results, far-apart exponents.
    x2, y2 = rng.normal(size=(2, n)).astype(np.float32)
    z2 = (-(x2.astype(np.float64) * y2) * (1 + rng.normal(size=n) * 2.0 ** -rng.integers(
        1, 40, n))).astype(np.float32)
    x3 = (rng.normal(size=n) * 2.0**-70).astype(np.float32)
    z3 = (rng.normal(size=n) * 2.0 ** rng.integers(-149, 60, n)).astype(np.float32)
    sp = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, 3.4e38, 1.0, -1.0], np.float32)
    sx, sy, sz = (v.ravel() for v in np.meshgrid(sp, sp, sp))
    X, Y, Z = (np.concatenate(v) for v in ((x, x2, x3, sx), (y, y2, y2, sy), (z, z2, z3, sz)))
    got = _u32(jax.jit(fma_rn)(X, Y, Z))
    want = [R.fma_rn(R.decode(u, F32), R.decode(v, F32), R.decode(w, F32), F32, 0x7FC00000)
            for u, v, w in zip(_u32(X).tolist(), _u32(Y).tolist(), _u32(Z).tolist(), strict=True)]
    want = np.asarray(want, np.uint32)
    nan = (want & 0x7FFFFFFF) > 0x7F800000
    assert ((got[nan] & 0x7FFFFFFF) > 0x7F800000).all()
    np.testing.assert_array_equal(got[~nan], want[~nan])


@pytest.mark.slow
def test_block_scaled_gradients_and_fast_mode():
    rng = np.random.default_rng(42)
    a = rng.normal(size=(8, 256)).astype(np.float32)
    b = rng.normal(size=(256, 8)).astype(np.float32)
    _, sa = jaxwarp.fp8.quantize_blockwise(a)
    _, sbt = jaxwarp.fp8.quantize_blockwise(b.T, block=(128, 128))
    f = functools.partial(jaxwarp.matmul, operand_format="e4m3", a_scale=sa, b_scale=sbt.T)
    ga, gb = jax.grad(lambda a, b: f(a, b).sum(), argnums=(0, 1))(a, b)
    # The backward products are matmul's own fp8 ones (per-tensor power-of-two scales).
    g = jnp.ones((8, 8), jnp.float32)
    want_a = jax.vjp(functools.partial(jaxwarp.matmul, operand_format="e4m3",
                                       promote_every=128), a, b)[1](g)
    np.testing.assert_array_equal(_u32(ga), _u32(want_a[0]))
    np.testing.assert_array_equal(_u32(gb), _u32(want_a[1]))
    fast = f(a, b, mode="fast")
    exact = f(a, b)
    assert np.abs(np.asarray(fast) - np.asarray(exact)).max() < 1e-3 * np.abs(exact).max()


@pytest.mark.parametrize("kw,msg", [
    (dict(a_scale=np.ones((8, 3), np.float32)), r"a_scale must be a scalar .* or block "
     r"scales of shape \(8, 2\) or \(1, 2\)"),
    (dict(b_scale=np.ones((2, 3), np.float32)), r"b_scale .* \(2, 8\) or \(2, 1\)"),
    (dict(a_scale=np.ones((8, 2), np.float32), promote_every=64), "promote_every=64"),
    (dict(a_scale=np.ones((8, 2), np.float32), accumulator="f16"), "accumulator='f32'"),
])
def test_block_scale_errors(kw, msg):
    a = np.ones((8, 256), np.float32)
    b = np.ones((256, 8), np.float32)
    with pytest.raises(ValueError, match=msg):
        jaxwarp.matmul(a, b, **{"operand_format": "e4m3", **kw})
