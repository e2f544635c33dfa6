"""jaxwarp.mx.matmul: the block-scaled GEMM is the chain of its instructions, its fast
mode the dequantized product, its gradients block-scaled GEMMs along the right axes."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxwarp
from jaxwarp import mx
from jaxwarp._src.gemm import block_scale_gemm as bsg


def _data(shape, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape) * np.exp2(rng.integers(-3, 4, shape))
    return jnp.asarray(x, jnp.float32)


def _chained(ta, tb, instruction):
    """The GEMM as its instructions: (M, N) tiles of the instruction's shape, K in steps of
    its k, D of one step the C of the next (mma_block_scale_logical per step)."""
    kind, kblock, scale_format = bsg.kind_for(ta.fmt, tb.fmt)
    row = jaxwarp._src.arithmetic.block_scale.block_scale_row(instruction, kind)
    tm, tn, tk = 16 if instruction == "mma_sync" else 128, 8, row.k
    codes = [np.asarray(jax.lax.bitcast_convert_type(t.elements, jnp.uint8))
             if t.elements.dtype != jnp.uint8 else np.asarray(t.elements) for t in (ta, tb)]
    sa, sb = np.asarray(ta.scales), np.asarray(tb.scales)
    if isinstance(tb.block, tuple):  # 2D weight blocks: each scale for its 16 columns
        sb = np.repeat(sb, tb.block[1], axis=1)
    fa, fb = (mx.MX_FORMATS[t.fmt].element for t in (ta, tb))
    M, K = codes[0].shape
    N = codes[1].shape[1]
    out = np.zeros((M, N), np.float32)
    nb = tk // kblock
    for i in range(0, M, tm):
        for j in range(0, N, tn):
            d = jnp.zeros((tm, tn), jnp.float32)
            for s in range(K // tk):
                ks, kb = slice(s * tk, (s + 1) * tk), slice(s * nb, (s + 1) * nb)
                d = jaxwarp.mma_block_scale_logical(
                    codes[0][i:i + tm, ks], codes[1][ks, j:j + tn], d, sa[i:i + tm, kb],
                    sb[kb, j:j + tn], a_format=fa, b_format=fb, kind=kind,
                    scale_format=scale_format, block=kblock, instruction=instruction)
            out[i:i + tm, j:j + tn] = np.asarray(d)
    if ta.tensor_scale is not None:  # the epilogue: (s_A * s_B) * acc, fp32 each
        alpha = np.float32(ta.tensor_scale) * np.float32(tb.tensor_scale)
        out = out * alpha
    return out


def _check_chain(fmt, instruction, shape, b_block=None, jit=False):
    M, K, N = shape
    fa, fb = (fmt, fmt) if isinstance(fmt, str) else fmt
    ta = mx.quantize(_data((M, K), 1), fa, axis=-1)
    tb = mx.quantize(_data((K, N), 2), fb, block=b_block, axis=-1 if b_block else 0)
    want = _chained(ta, tb, instruction)
    got = mx.matmul(ta, tb, instruction=instruction)
    np.testing.assert_array_equal(np.asarray(got).view(np.uint32), want.view(np.uint32))
    if jit:
        f = jax.jit(lambda a, b: mx.matmul(a, b, instruction=instruction))
        np.testing.assert_array_equal(np.asarray(f(ta, tb)).view(np.uint32),
                                      want.view(np.uint32))


def test_exact_gemm_is_the_chain_of_its_instructions():
    # The only default check of the rule: one tcgen05 tile, two k steps, eager and jit.
    _check_chain("mxfp8_e4m3", "tcgen05", (128, 64, 8), jit=True)


def test_exact_gemm_row_blocks_change_no_bit():
    # The exact GEMM computes blocks of rows one after another (lax.map) to bound its
    # memory: the blocks are independent chains.
    ta = mx.quantize(_data((64, 64), 1), "mxfp8_e5m2")
    tb = mx.quantize(_data((64, 16), 2), "mxfp8_e5m2", axis=0)
    cfg = jaxwarp._src.arithmetic.block_scale.BlockScaleCfg(
        "e5m2", "e5m2", "ue8m0", 32, 32, jaxwarp._src.arithmetic.block_scale.PRODUCT_TERMS)
    args = (bsg._codes(ta), bsg._codes(tb), ta.scales, tb.scales, cfg)
    whole, blocks = bsg._chain(*args, 64), bsg._chain(*args, 16)
    np.testing.assert_array_equal(np.asarray(whole).view(np.uint32),
                                  np.asarray(blocks).view(np.uint32))
    assert bsg._rows((4096, 4096), (4096, 4096)) == 256


@pytest.mark.slow
@pytest.mark.parametrize("fmt, instruction, shape, b_block", [
    ("mxfp8_e5m2", "mma_sync", (32, 96, 16), None),
    (("mxfp8_e4m3", "mxfp6_e3m2"), "tcgen05", (128, 64, 16), None),
    ("mxfp4_e2m1", "tcgen05", (128, 128, 8), None),
    ("nvfp4", "tcgen05", (128, 128, 16), None),
    ("nvfp4", "mma_sync", (16, 64, 16), (16, 16)),
], ids=["e5m2-mma_sync", "e4m3xe3m2", "mxfp4", "nvfp4", "nvfp4-2d-weights"])
def test_exact_gemm_chain_formats(fmt, instruction, shape, b_block):
    _check_chain(fmt, instruction, shape, b_block, jit=True)


def test_fast_mode_is_the_dequantized_product():
    # Integers up to 8 are exact MXFP8 e4m3 values (under the default rule, rceil, as under
    # OCP's), and their products' sums are exact in fp32 in any order: fast mode must give
    # the exact product.
    rng = np.random.default_rng(3)
    a, b = rng.integers(-8, 9, (4, 64)), rng.integers(-8, 9, (64, 8))
    got = mx.matmul(jnp.asarray(a, jnp.float32), jnp.asarray(b, jnp.float32), mode="fast")
    np.testing.assert_array_equal(np.asarray(got), (a @ b).astype(np.float32))
    # e2m1 rounds 5 to 4 (a tie, to even; A's MXFP4 block scale 1 by either rule).
    # K = 64, kind::mxf4's k; B's second block (amax 3) gets 2**-1, 3 / 2**-1 = 6 exact.
    got = mx.matmul(jnp.full((2, 64), 5.0), jnp.full((64, 2), 3.0).at[0].set(-6.0),
                    "mxfp4_e2m1", mode="fast")
    np.testing.assert_array_equal(np.asarray(got), np.full((2, 2), 4.0 * (63 * 3 - 6)))


def test_default_is_the_mxfp8_recipe_and_rceil():
    # One default scale rule: mx.matmul on defaults quantizes as emulate(recipe="mxfp8")
    # does (rceil), bit for bit; OCP's rule, the old default, saturates U[0, 1) blocks'
    # largest elements and gives other bits.
    rng = np.random.default_rng(11)
    a = jnp.asarray(rng.uniform(0, 1, (8, 64)), jnp.float32)
    b = jnp.asarray(rng.uniform(0, 1, (64, 8)), jnp.float32)
    bits = {}
    for name, f in (("default", lambda x, w: mx.matmul(x, w, "mxfp8_e4m3")),
                    ("rceil", lambda x, w: mx.matmul(x, w, "mxfp8_e4m3", scale_rule="rceil")),
                    ("ocp", lambda x, w: mx.matmul(x, w, "mxfp8_e4m3", scale_rule="ocp")),
                    ("recipe", jaxwarp.emulate(lambda x, w: x @ w, recipe="mxfp8"))):
        bits[name] = np.asarray(f(a, b)).view(np.uint32)
    np.testing.assert_array_equal(bits["default"], bits["rceil"])
    np.testing.assert_array_equal(bits["default"], bits["recipe"])
    assert (bits["default"] != bits["ocp"]).any()


def test_k_rule_is_matmuls():
    # K a multiple of the instruction's k (both GEMM entry points refuse others, saying
    # to pad); a K that is not a multiple of 64 takes one all-zero k step inside, which
    # leaves the bits those of the MXTensor path (no padding there).
    a, b = _data((4, 96), 21), _data((96, 8), 22)
    got = mx.matmul(a, b, "mxfp6_e3m2")
    want = mx.matmul(mx.quantize(a, "mxfp6_e3m2", axis=-1),
                     mx.quantize(b, "mxfp6_e3m2", axis=-2))
    np.testing.assert_array_equal(np.asarray(got).view(np.uint32),
                                  np.asarray(want).view(np.uint32))
    a, b = _data((4, 100), 23), _data((100, 8), 24)
    with pytest.raises(ValueError, match="pad K .* with zeros to a multiple of 32"):
        mx.matmul(a, b)
    with pytest.raises(ValueError, match="K=100 is not a multiple of the tile's 32"):
        jaxwarp.matmul(a, b, operand_format="e4m3", instruction="tcgen05")
    # K = 0: no instruction runs, D = +0 in both.
    d = mx.matmul(jnp.ones((2, 4, 0)), jnp.ones((0, 8)))
    assert d.shape == (2, 4, 8)
    np.testing.assert_array_equal(np.asarray(d).view(np.uint32), 0)
    np.testing.assert_array_equal(
        np.asarray(jaxwarp.matmul(jnp.ones((64, 0)), jnp.ones((0, 8)), operand_format="e4m3",
                                  instruction="tcgen05")).view(np.uint32), 0)


def test_gradients_quantize_along_each_contraction_axis():
    # dA = dD @ B^T with dD and B quantized along N; dB = A^T @ dD along M. Fast mode,
    # so that the check is the quantization axes (an axis mix-up changes the scales).
    a, b, g = _data((64, 32), 5), _data((32, 64), 6), _data((64, 64), 7)
    _, vjp = jax.vjp(lambda x, y: mx.matmul(x, y, "mxfp8_e4m3", mode="fast"), a, b)
    da, db = vjp(g)

    def fq(x, axis):
        return mx.dequantize(mx.quantize(x, "mxfp8_e4m3", axis=axis))

    hi = jax.lax.Precision.HIGHEST
    np.testing.assert_array_equal(np.asarray(da),
                                  np.asarray(jnp.matmul(fq(g, -1), fq(b.T, 0), precision=hi)))
    np.testing.assert_array_equal(np.asarray(db),
                                  np.asarray(jnp.matmul(fq(a.T, -1), fq(g, 0), precision=hi)))


def test_random_hadamard_is_orthogonal_and_exact_on_powers_of_two():
    key = jax.random.key_data(jax.random.key(3))
    x = jnp.zeros((32, 3), jnp.float32).at[5, 0].set(8.0).at[20, 1].set(-0.5)
    y = bsg.random_hadamard(x, 0, key)
    # A spike spreads over its 16-run as +-value / 4 (exact), nothing else moves.
    np.testing.assert_array_equal(np.abs(np.asarray(y[:16, 0])), np.full(16, 2.0))
    np.testing.assert_array_equal(np.asarray(y[16:, 0]), np.zeros(16))
    np.testing.assert_array_equal(np.abs(np.asarray(y[16:, 1])), np.full(16, 0.125))
    # Orthogonal: the column norms are kept (exactly here: every entry is a power of two).
    np.testing.assert_array_equal(np.sum(np.asarray(y) ** 2, 0), np.sum(np.asarray(x) ** 2, 0))
