"""The tiled WMMA GEMM: equal to the fragment program, errors, jit/vmap, gradients."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

import jaxwarp


def _rand(shape, seed, scale=1.0):
    return jnp.asarray(np.random.default_rng(seed).normal(size=shape) * scale, jnp.float32)


def _fragment_gemm(a, b, c, fmt, tile):
    """The seed's WMMA kernel, warp by warp: load, mma_sync along k, store."""
    m, n, k = tile
    M, K = a.shape
    N = b.shape[1]
    cvt = {"f16": jaxwarp.float2half_rn, "bf16": jaxwarp.float2bfloat16_rn,
           "tf32": jaxwarp.float_to_tf32}[fmt]
    a_mem = cvt(a).reshape(-1)
    b_mem = cvt(b).reshape(-1)
    out = np.zeros((M, N), np.float32)
    for i in range(0, M, m):
        for j in range(0, N, n):
            acc = jaxwarp.fragment("accumulator", m, n, k, "f32")
            acc = jaxwarp.load_matrix_sync(acc, c.reshape(-1), N, "mem_row_major",
                                           offset=i * N + j)
            for kk in range(0, K, k):
                fa = jaxwarp.load_matrix_sync(jaxwarp.fragment("matrix_a", m, n, k, fmt,
                                                               "row_major"),
                                              a_mem, K, offset=i * K + kk)
                fb = jaxwarp.load_matrix_sync(jaxwarp.fragment("matrix_b", m, n, k, fmt,
                                                               "row_major"),
                                              b_mem, N, offset=kk * N + j)
                acc = jaxwarp.mma_sync(fa, fb, acc)
            mem = jaxwarp.store_matrix_sync(jnp.zeros(m * n, jnp.float32), acc, n,
                                            "mem_row_major")
            out[i:i + m, j:j + n] = np.asarray(mem).reshape(m, n)
    return out


@pytest.mark.parametrize("fmt,tile", [("f16", (16, 16, 16)), ("bf16", (8, 32, 16)),
                                      ("tf32", (16, 16, 8))], ids=["f16", "bf16", "tf32"])
def test_equals_the_fragment_program(fmt, tile):
    a, b, c = _rand((32, 48), 0), _rand((48, 32), 1), _rand((32, 32), 2)
    got = jax.jit(lambda a, b, c: jaxwarp.matmul(a, b, c, operand_format=fmt, tile=tile))(a, b, c)
    want = _fragment_gemm(a, b, c, fmt, tile)
    np.testing.assert_array_equal(np.asarray(got).view(np.uint32), want.view(np.uint32))


def test_fast_mode_is_a_rounded_dot():
    a, b = _rand((32, 64), 3), _rand((64, 32), 4)
    got = jaxwarp.matmul(a, b, operand_format="bf16", mode="fast")
    want = jnp.dot(a.astype(jnp.bfloat16), b.astype(jnp.bfloat16),
                   preferred_element_type=jnp.float32, precision="highest")
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    exact = jaxwarp.matmul(a, b, operand_format="bf16")
    assert not np.array_equal(np.asarray(exact), np.asarray(got))  # truncation shows


def test_all_positive_truncation_bias():
    # Round-toward-zero accumulation of positive terms only ever loses: exact <= fast.
    a, b = jnp.abs(_rand((16, 512), 5)), jnp.abs(_rand((512, 16), 6))
    exact = np.asarray(jaxwarp.matmul(a, b, operand_format="f16"))
    fast = np.asarray(jaxwarp.matmul(a, b, operand_format="f16", mode="fast"))
    ref = np.asarray(a, np.float64).astype(np.float16).astype(np.float64) @ \
        np.asarray(b, np.float64).astype(np.float16).astype(np.float64)
    assert np.all(exact <= ref) and np.mean(ref - exact) > np.mean(np.abs(ref - fast))


def test_vmap_and_jit():
    a, b = _rand((3, 16, 32), 7), _rand((3, 32, 16), 8)
    f = jax.jit(jax.vmap(lambda a, b: jaxwarp.matmul(a, b, operand_format="tf32")))
    got = f(a, b)
    for i in range(3):
        np.testing.assert_array_equal(got[i], jaxwarp.matmul(a[i], b[i], operand_format="tf32"))


def test_gradients_go_through_the_tensor_core():
    a, b = _rand((32, 16), 9), _rand((16, 16), 10)
    g = jnp.asarray(np.random.default_rng(11).normal(size=(32, 16)), jnp.float32)
    _, vjp = jax.vjp(lambda a, b: jaxwarp.matmul(a, b, operand_format="bf16"), a, b)
    da, db = vjp(g)
    np.testing.assert_array_equal(da, jaxwarp.matmul(g, b.T, operand_format="bf16"))
    np.testing.assert_array_equal(db, jaxwarp.matmul(a.T, g, operand_format="bf16"))
    with jax.enable_x64(True):
        a64 = jnp.asarray(np.random.default_rng(12).normal(size=(8, 8)))
        b64 = jnp.asarray(np.random.default_rng(13).normal(size=(8, 8)))
        check_grads(lambda a, b: jaxwarp.matmul(a, b, operand_format="f64", accumulator="f64"),
                    (a64, b64), order=1, modes=("rev",))


def test_bad_input():
    a, b = _rand((16, 16), 0), _rand((16, 16), 1)
    with pytest.raises(ValueError, match="K=24 is not a multiple of the tile's 16"):
        jaxwarp.matmul(_rand((16, 24), 0), _rand((24, 16), 1))
    with pytest.raises(ValueError, match="inner dimensions differ"):
        jaxwarp.matmul(a, _rand((32, 16), 1))
    with pytest.raises(ValueError, match=r"tile=\(16, 16, 8\) is not a WMMA shape for "
                                         r"operand_format='f16'"):
        jaxwarp.matmul(a, b, tile=(16, 16, 8))
    with pytest.raises(ValueError, match="operand_format='fp8' is not supported"):
        jaxwarp.matmul(a, b, operand_format="fp8")
    with pytest.raises(ValueError, match="accumulator='f16' is not supported"):
        jaxwarp.matmul(a, b, operand_format="bf16", accumulator="f16")
    with pytest.raises(ValueError, match="mode='approx' is not supported"):
        jaxwarp.matmul(a, b, mode="approx")
    with pytest.raises(ValueError, match="c must have shape"):
        jaxwarp.matmul(a, b, _rand((8, 8), 2))
