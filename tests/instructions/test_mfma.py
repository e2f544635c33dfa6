"""``jaxwarp.mfma_logical``: AMD's ``v_mfma_*`` on logical matrices. The conformance tests
compare every configuration with MMA-Sim's files; these check the names and, on values
worked out by hand, what sets the three generations' datapaths apart."""

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np

import jaxwarp
from jaxwarp._src.catalogue import mfma_table


def test_catalogue_counts_and_names():
    assert [len(mfma_table.suffixes(g)) for g in ("gfx908", "gfx90a", "gfx942")] == [15, 22, 27]
    for spelling in ("v_mfma_f32_32x32x8_f16", "f32_32x32x8f16", "V_MFMA_F32_32X32X8F16"):
        assert mfma_table.mfma_row(spelling, "MI200").suffix == "f32_32x32x8f16"
        assert mfma_table.mfma_row(spelling, "CDNA3").suffix == "f32_32x32x8_f16"
    row = mfma_table.mfma_row("v_mfma_f32_4x4x4_16b_f16", "gfx942")
    assert (row.m, row.n, row.k, row.blocks) == (4, 4, 4, 16)
    assert mfma_table.mfma_row("f32_32x32x1f32", "gfx908").blocks == 2
    assert mfma_table.mfma_row("f32_16x16x32_fp8_bf8", "gfx942").a_format == "e4m3fnuz"
    assert mfma_table.mfma_row("f32_16x16x8_xf32", "gfx942").a_format == "tf32"


def _row_col(a_vals, b_vals, m=16, n=16, k=16, dtype=np.float16):
    a = np.zeros((m, k), dtype)
    b = np.zeros((k, n), dtype)
    a[0, :len(a_vals)] = a_vals
    b[:len(b_vals), 0] = b_vals
    return a, b, np.zeros((m, n), np.float32)


def test_the_three_generations_round_differently():
    # Products 1 and 3 * 2**-25: CDNA1 sums exactly and rounds once (up); CDNA2 adds f32
    # products (up); CDNA3 truncates 3 * 2**-25 to 2**-24 below the group's exponent,
    # and 1 + 2**-24 is a tie: to even.
    a, b, c = _row_col([1.0, 3 * 2.0**-13], [1.0, 2.0**-12], m=4, n=4, k=4)
    got = {g: float(jaxwarp.mfma_logical(suffix, a, b, c, arch=g)[0, 0])
           for g, suffix in (("gfx908", "f32_4x4x4f16"), ("gfx90a", "f32_4x4x4f16"),
                             ("gfx942", "f32_4x4x4_16b_f16"))}
    assert got == {"gfx908": 1 + 2.0**-23, "gfx90a": 1 + 2.0**-23, "gfx942": 1.0}


def test_cdna2_flushes_products_and_sums_below_f32_normals():
    a, b, c = _row_col([-(2.0**-70)], [2.0**-70], k=2, dtype=ml_dtypes.bfloat16)
    d2 = jaxwarp.mfma_logical("f32_16x16x2bf16", a, b, c, arch="gfx90a")
    assert np.asarray(d2).view(np.uint32)[0, 0] == 0  # -0 product + 0 product + 0 = +0
    # CDNA1 keeps f32 subnormals: -2**-140 is one, 2**9 times f32's smallest.
    d1 = jaxwarp.mfma_logical("f32_16x16x2bf16", a, b, c, arch="gfx908")
    assert np.asarray(d1).view(np.uint32)[0, 0] == 0x80000000 | (1 << 9)
    # A sum below the normal range is a zero of its sign: -1.5 * 2**-126 + 2**-126 (one
    # group: a next group's +0 would make it +0).
    a, b, c = _row_col([2.0**-63], [2.0**-63], k=2, dtype=ml_dtypes.bfloat16)
    c[0, 0] = -1.5 * 2.0**-126
    d2 = jaxwarp.mfma_logical("f32_16x16x2bf16", a, b, c, arch="gfx90a")
    assert np.asarray(d2).view(np.uint32)[0, 0] == 0x80000000
    d1 = jaxwarp.mfma_logical("f32_16x16x2bf16", a, b, c, arch="gfx908")
    assert float(d1[0, 0]) == -(2.0**-127)


def test_fnuz_nan_and_xf32_low_bits():
    a = np.full((16, 32), 0x40, np.uint8)  # 1.0 in e4m3fnuz (bias 8)
    b = np.full((32, 16), 0x40, np.uint8)
    a[0, 5] = 0x80  # the one NaN
    c = np.zeros((16, 16), np.float32)
    d = np.asarray(jaxwarp.mfma_logical("f32_16x16x32_fp8_fp8", a, b, c)).view(np.uint32)
    assert d[0, 0] == 0x7FFFFFFF and d[1, 0] == np.float32(32.0).view(np.uint32)
    # xf32: the low 13 bits of each word are not read.
    x = np.full((16, 8), 1 + 2.0**-20, np.float32)
    y = np.ones((8, 16), np.float32)
    assert float(jaxwarp.mfma_logical("f32_16x16x8_xf32", x, y, c)[0, 0]) == 8.0
    assert float(jaxwarp.mfma_logical("f32_16x16x4_f32", x[:, :4], y[:4], c)[0, 0]) == \
        float(np.float32(4 * (1 + 2.0**-20)))


def test_multi_block_forms_batch_and_jit():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((16, 4, 4)).astype(np.float16)
    b = rng.standard_normal((16, 4, 4)).astype(np.float16)
    c = rng.standard_normal((16, 4, 4)).astype(np.float32)
    whole = np.asarray(jaxwarp.mfma_logical("f32_4x4x4_16b_f16", a, b, c))
    for i in (0, 7, 15):
        one = np.asarray(jaxwarp.mfma_logical("f32_4x4x4_16b_f16", a[i], b[i], c[i]))
        np.testing.assert_array_equal(whole[i].view(np.uint32), one.view(np.uint32))
    jitted = jax.jit(lambda x, y, z: jaxwarp.mfma_logical("f32_4x4x4_16b_f16", x, y, z))
    np.testing.assert_array_equal(np.asarray(jitted(a, b, c)).view(np.uint32),
                                  whole.view(np.uint32))
    bits = jaxwarp.mfma_logical("f32_4x4x4_16b_f16", a.view(np.uint16), b.view(np.uint16),
                                c.view(np.uint32))
    np.testing.assert_array_equal(np.asarray(bits).view(np.uint32), whole.view(np.uint32))


def test_f64_is_an_fma_chain():
    with jax.enable_x64(True):
        a = jnp.asarray(np.array([[1.0, 2.0**-60, 0, 0]] * 4))
        b = jnp.asarray(np.array([[1.0] * 4, [1.0] * 4, [0.0] * 4, [0.0] * 4]))
        c = jnp.asarray(np.full((4, 4), -1.0))
        d = jaxwarp.mfma_logical("f64_4x4x4_4b_f64", a, b, c, arch="gfx942")
        assert float(d[0, 0]) == 2.0**-60  # fma(1, 1, -1) = 0 exactly, then + 2**-60


def test_cdna3_fp8_drops_a_far_smaller_c_even_nan():
    """fp8 / bf8: a C more than F + 1 binades below the products counts as zero; an inf
    or NaN C has exponent -1 there (MMA-Sim's frexp), so products of 2**26 drop it."""
    big = np.full((16, 32), 0x74, np.uint8)  # 2**13 in e5m2fnuz (bias 16)
    one = np.full((16, 32), 0x40, np.uint8)  # 1.0
    c = np.full((16, 16), np.nan, np.float32)
    d = jaxwarp.mfma_logical("f32_16x16x32_bf8_bf8", big, big.T.copy(), c)
    assert float(d[0, 0]) == 2.0**31
    d = jaxwarp.mfma_logical("f32_16x16x32_bf8_bf8", one, one.T.copy(), c)
    assert np.isnan(float(d[0, 0]))


def test_cdna1_exact_sum_keeps_c_below_cancelling_products():
    """Products of bf16's largest values cancel exactly: the sum is C, 2**-149, more than
    the 192-bit window below them (summed again in a window of its own)."""
    big = float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)
    a, b, c = _row_col([big, -1.5], [1.5, big], k=2, dtype=ml_dtypes.bfloat16)
    c[0, 0] = 2.0**-149
    d = jaxwarp.mfma_logical("f32_16x16x2bf16", a[:, :2], b[:2], c, arch="gfx908")
    assert np.asarray(d).view(np.uint32)[0, 0] == 1
