"""The fused exact kernel on fp8 operands (e4m3, e5m2, mixed: sm_90 wgmma, block k 32,
F 13, 14 bits kept) gives exact mode's bits: in Pallas' interpreter here, against XLA's
exact path (``gemm_fused_kernel="off"``); ``benchmarks/fused_kernel_check.py`` checks
the GPU."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxwarp
from jaxwarp._src.gemm import matmul as matmul_module
from jaxwarp._src.gemm.kernels import fused_kernel

_DT = {"e4m3": jnp.float8_e4m3fn, "e5m2": jnp.float8_e5m2}
_MAX = {"e4m3": 448.0, "e5m2": 57344.0}
_PAIRS = [("e4m3", "e4m3"), ("e5m2", "e5m2"), ("e4m3", "e5m2"), ("e5m2", "e4m3")]


def _bits(x):
    return np.asarray(x).view(np.uint32)


def _operand(fmt, shape, rng, kind, side):
    """fp8 operands: "bits", every finite bit pattern alike (zeros, -0, subnormals, the
    largest finite values, both signs) with a zero row / column, the largest values, NaN
    (and for e5m2 +-inf, also against zeros) at fixed places; "normal", Gaussian values
    (many cancel: truncated terms) with exponents spread over +-6."""
    dt = _DT[fmt]
    if kind == "normal":
        x = rng.standard_normal(shape) * 2.0 ** rng.integers(-6, 6, shape)
        return jnp.asarray(x, jnp.float32).astype(dt)
    bits = rng.integers(0, 256, shape, dtype=np.uint8)
    x = np.asarray(bits.view(dt)).astype(np.float32)
    x = np.where(np.isfinite(x), x, 0.0)  # the specials at fixed places only
    x = np.where(rng.random(shape) < 0.1, -0.0, x)
    if side == "a":  # rows: 2 all zero (D is C cut to 14 bits), 3 the largest, 0 / 1 specials
        x[2] = 0.0
        x[3, ::3] = _MAX[fmt]
        x[3, 1::3] = -_MAX[fmt]
        x[0, 5] = np.nan
        if fmt == "e5m2":
            x[1, 7], x[1, 9], x[4, 0] = np.inf, -np.inf, -np.inf
    else:  # columns: 1 all zero, 2 the largest, 0 / 3 specials
        x[:, 1] = 0.0
        x[::2, 2] = _MAX[fmt]
        x[11, 3] = np.nan
        if fmt == "e5m2":
            x[0, 0], x[4, 3] = np.inf, np.inf
        x[0, 4] = 0.0  # against row 4's -inf (e5m2): NaN
    return jnp.asarray(x).astype(dt)


def _acc(rng, M, N):
    """C: values over +-40 binades, zeros, -0, subnormals, huge values, +-inf and NaN, some
    on the zero row of A (where D is C itself, cut to the block's bits)."""
    c = rng.standard_normal((M, N)) * 2.0 ** rng.integers(-40, 40, (M, N))
    c = jnp.asarray(c, jnp.float32)
    sub = jnp.asarray(rng.integers(1, 1 << 23, (N,), dtype=np.uint32).view(np.float32))
    c = c.at[2].set(sub).at[2, ::4].set(-sub[::4]).at[2, 1].set(-0.0).at[2, 2].set(0.0)
    c = c.at[2, 3].set(3.0e38).at[2, 5].set(jnp.inf).at[2, 6].set(jnp.nan)
    c = c.at[5, 0].set(-0.0).at[5, 1].set(2.0 ** -130).at[5, 2].set(-3.3e38)
    c = c.at[6, 0].set(-jnp.inf).at[6, 1].set(jnp.nan).at[7, :].set(0.0)
    return c


def _inputs(fa, fb, M, N, K, kind, seed):
    rng = np.random.default_rng(seed)
    return (_operand(fa, (M, K), rng, kind, "a"), _operand(fb, (K, N), rng, kind, "b"),
            _acc(rng, M, N))


def _matmul_bits(a, b, c, fa, fb, switch):
    with jaxwarp.config.override(gemm_fused_kernel=switch):  # matmul's forward: traced
        return _bits(jaxwarp.matmul(a, b, c, operand_format=(fa, fb), mode="exact"))


@pytest.mark.parametrize(("fa", "fb"), _PAIRS[:3])
def test_matmul_fp8_through_the_kernel(fa, fb, monkeypatch):
    # exact fp8 matmul with the kernel ("on": the interpreter off the GPU) and through
    # XLA's exact path: the same bits, specials, subnormals and C-only rows included. M
    # and N are padded to the kernel's and wgmma's tiles; K is three instructions.
    a, b, c = _inputs(fa, fb, 40, 24, 96, "bits", seed=hash((fa, fb)) % 1000)
    calls = []
    chain = fused_kernel.chain
    monkeypatch.setattr(fused_kernel, "chain", lambda *x, **k: calls.append(k) or
                        chain(*x, **k))
    want = _matmul_bits(a, b, c, fa, fb, "off")
    assert not calls
    got = _matmul_bits(a, b, c, fa, fb, "on")
    assert [k["b_fmt"] for k in calls] == [fb]
    np.testing.assert_array_equal(got, want)
    assert np.isnan(_bits(want).view(np.float32)).any()  # the specials reach D
    cut = _bits(c)[2, 7:] & ~np.uint32(0x3FF)  # A's zero row: C cut to 14 bits, -0 as +0
    np.testing.assert_array_equal(want[2, 7:], np.where(cut << 1 == 0, 0, cut))
    assert want[2, 1] == want[2, 2] == 0


def test_kernel_variants_fp8(options):
    # The kernel's forms, roundings and loops over a step's products (u an iteration),
    # and the cond on finite operands (``gemm_kernel_any_range_below`` 0: the kernel
    # without the IEEE sum where every operand is finite): XLA's exact bits.
    options(gemm_fused_kernel="off")
    fa, fb = "e5m2", "e4m3"
    dp = jaxwarp.datapath_for("sm_90", "wgmma", fa, 32)
    a, b, c = _inputs(fa, fb, 16, 16, 64, "bits", 1)
    want = _bits(jaxwarp.matmul(a, b, c, operand_format=(fa, fb), mode="exact"))
    for form, rounding, unroll, f32 in (("split", "float", 32, True),
                                        ("unrolled", "int", 4, False),
                                        ("reduce", "float", None, False),
                                        ("split", "float", 1, True)):
        got = _bits(fused_kernel.chain(a, b, c, dp, fa, b_fmt=fb, interpret=True,
                                       block=(16, 16), form=form, rounding=rounding,
                                       unroll=unroll, f32_operands=f32))
        np.testing.assert_array_equal(got, want, err_msg=f"{form} {rounding} u={unroll}")
    options(gemm_kernel_any_range_below=0)
    # finite operands (C with inf and NaN): the cond's kernel without the IEEE sum
    a, b, c = _inputs(fa, fb, 16, 16, 64, "normal", 2)
    want = _bits(jaxwarp.matmul(a, b, c, operand_format=(fa, fb), mode="exact"))
    got = _bits(fused_kernel.chain(a, b, c, dp, fa, b_fmt=fb, interpret=True, block=(16, 16)))
    np.testing.assert_array_equal(got, want)


def test_kernel_reads_the_datapath_fp8():
    # F and the kept bits come from the datapath: one instruction against the model's mma
    # with the preset and with F or sum_mbits changed (the bits differ).
    wg = jaxwarp.datapath_for("sm_90", "wgmma", "e4m3", 32)
    a, b, c = _inputs("e4m3", "e4m3", 16, 16, 32, "bits", seed=7)
    c = jnp.where(jnp.isfinite(c), c, 1.0)
    a, b = (jnp.where(jnp.isnan(x.astype(jnp.float32)), 1.0, x).astype(x.dtype) for x in (a, b))
    out = []
    for dp in (wg, wg.replace(F=10), wg.replace(sum_mbits=9)):
        assert fused_kernel.models(dp, "e4m3", "e4m3", "f32", 32)
        got = _bits(fused_kernel.chain(a, b, c, dp, "e4m3", interpret=True, block=(16, 16)))
        want = _bits(jaxwarp.mma(a, b, c, a_format="e4m3", c_format="f32", d_format="f32",
                                 instruction="wgmma", arch="sm_90a", datapath=dp))
        np.testing.assert_array_equal(got, want, err_msg=str(dp))
        out.append(got)
    assert (out[0] != out[1]).any() and (out[0] != out[2]).any()


def test_fewer_kept_bits_in_the_int_rounding():
    # The kept bits on the integers (``_rz_bits``' mask), also for subnormal results: the
    # general bf16 form with sum_mbits 13 (a datapath of no GPU) against the model's mma,
    # on products near fp32's subnormals (results below 2**-126).
    dp = jaxwarp.datapath_for("sm_90", "wmma", "bf16", 16).replace(sum_mbits=13, e_floor=None)
    rng = np.random.default_rng(8)
    a = jnp.asarray(rng.standard_normal((16, 32)) * 2.0 ** rng.integers(-133, -124, (16, 32)),
                    jnp.bfloat16)
    b = jnp.asarray(rng.standard_normal((32, 16)) * 2.0 ** rng.integers(-16, -4, (32, 16)),
                    jnp.bfloat16)
    c = jnp.asarray(rng.standard_normal((16, 16)) * 2.0 ** rng.integers(-149, -127, (16, 16)),
                    jnp.float32)
    got = _bits(fused_kernel.chain(a, b, c, dp, "bf16", form="general", interpret=True,
                                   block=(16, 16)))
    want = _bits(jaxwarp.mma(a, b, c, a_format="bf16", c_format="f32", d_format="f32",
                             datapath=dp))
    np.testing.assert_array_equal(got, want)
    d = want.view(np.float32)
    assert ((np.abs(d) < 2.0 ** -126) & (d != 0)).sum() > 20  # subnormal results


def test_models_fp8():
    wg = jaxwarp.datapath_for("sm_90", "wgmma", "e4m3", 32)
    for fa, fb in _PAIRS:
        assert fused_kernel.models(wg, fa, fb, "f32", 32)
    assert not fused_kernel.models(wg, "e4m3", "e4m3", "f16", 32)  # an f16 accumulator
    assert not fused_kernel.models(wg, "e4m3", "bf16", "f32", 32)
    assert not fused_kernel.models(wg, "e4m3", "e4m3", "f32", 16)  # k != block_k
    assert not fused_kernel.models(wg.replace(F=25), "e4m3", "e4m3", "f32", 32)  # int32
    # mma.sync's fp8 (two f16 HMMAs, C added last) and sm_120's F = 25 over 32 terms
    for arch in ("sm_90", "sm_120"):
        dp = jaxwarp.datapath_for(arch, "mma_sync", "e4m3", 32)
        assert not fused_kernel.models(dp, "e4m3", "e4m3", "f32", 32)
    assert fused_kernel.takes("e5m2", "e4m3") and not fused_kernel.takes("f16", "bf16")


def test_chain_checks_fp8():
    dp = jaxwarp.datapath_for("sm_90", "wgmma", "e4m3", 32)
    a, c = jnp.ones((16, 48), jnp.float8_e4m3fn), jnp.zeros((16, 16))
    with pytest.raises(ValueError, match="K=48 is not a multiple of the instruction's k=32"):
        fused_kernel.chain(a, a.T, c, dp, "e4m3", interpret=True)
    with pytest.raises(ValueError, match="unroll=3: allowed 1, 2, 4, 8, 16, 32"):
        fused_kernel.chain(a[:, :32], a[:, :32].T, c, dp, "e4m3", unroll=3, interpret=True)
    with pytest.raises(ValueError, match="fmt='e4m3', b_fmt='bf16'"):
        fused_kernel.chain(a[:, :32], a[:, :32].T, c, dp, "e4m3", b_fmt="bf16",
                           interpret=True)


def test_fp8_promotion_through_the_kernel(monkeypatch):
    # promote_every: each interval's chain through the kernel from +0 (``fused_fp8``), the
    # promotions between them as XLA's loop adds them: the same bits (K = 160: two
    # intervals of 64 and one of 32). f16 / bf16 with promotion keep XLA's loop.
    from jaxwarp._src.gemm.matmul_tiles import Cfg

    a, b, c = _inputs("e4m3", "e5m2", 24, 40, 160, "bits", seed=11)
    calls = []
    chain = fused_kernel.chain
    monkeypatch.setattr(fused_kernel, "chain", lambda *x, **k: calls.append(x[0].shape[1])
                        or chain(*x, **k))
    out = {}
    for switch in ("off", "on"):
        with jaxwarp.config.override(gemm_fused_kernel=switch):
            out[switch] = _bits(jaxwarp.matmul(a, b, c, operand_format=("e4m3", "e5m2"),
                                               mode="exact", promote_every=64))
    assert calls == [64, 32]  # the scan's kernel (traced once) and the last interval's
    np.testing.assert_array_equal(out["on"], out["off"])
    with jaxwarp.config.override(gemm_fused_kernel="on"):
        for fmt, tile in (("f16", (16, 16, 16)), ("bf16", (16, 16, 16))):
            cfg = Cfg(fmt, fmt, "f32", tile, "wmma", "sm_90", "exact", 64, False)
            assert matmul_module._fused_datapath(cfg, 16, None, 1 << 30) is None


@pytest.mark.slow
@pytest.mark.parametrize(("fa", "fb"), _PAIRS)
@pytest.mark.parametrize("K", [32, 64, 160, 256])
def test_matmul_fp8_sweep(fa, fb, K):
    # More shapes and draws: M, N not multiples of the tiles, K of 1 to 8 instructions.
    for kind in ("bits", "normal"):
        a, b, c = _inputs(fa, fb, 64 if K % 64 else 40, 64 if K % 64 else 56, K, kind,
                          seed=K)
        np.testing.assert_array_equal(_matmul_bits(a, b, c, fa, fb, "on"),
                                      _matmul_bits(a, b, c, fa, fb, "off"),
                                      err_msg=f"{kind} K={K}")


@pytest.mark.slow
@pytest.mark.parametrize(("fa", "fb"), _PAIRS[1:3])
def test_fp8_grad_through_the_kernel(fa, fb):
    # jax.grad of an exact fp8 matmul (its backward products: fp8 with per-tensor
    # power-of-two scales, through the kernel too): the same bits with the kernel.
    rng = np.random.default_rng(9)
    a = jnp.asarray(rng.standard_normal((32, 64)), jnp.float32)
    b = jnp.asarray(rng.standard_normal((64, 40)), jnp.float32)

    def loss(a, b):
        d = jaxwarp.matmul(a, b, operand_format=(fa, fb), mode="exact")
        return jnp.sum(d * d)

    out = {}
    for switch in ("off", "on"):
        with jaxwarp.config.override(gemm_fused_kernel=switch):
            jax.clear_caches()
            out[switch] = [_bits(g) for g in jax.grad(loss, argnums=(0, 1))(a, b)]
    for got, want in zip(out["on"], out["off"], strict=True):
        np.testing.assert_array_equal(got, want)


@pytest.mark.slow
@pytest.mark.parametrize("scales", ["block", "tensor"])
def test_fp8_scaled_products_through_the_kernel(scales):
    # Block scales (promotion every 128, the scales applied on each) and per-tensor
    # scales with promotion: the kernel's intervals give XLA's exact bits.
    rng = np.random.default_rng(12)
    M, N, K = 40, 72, 320
    a = jnp.asarray(rng.standard_normal((M, K)) * 2.0 ** rng.integers(-10, 10, (M, K)),
                    jnp.float32)
    b = jnp.asarray(rng.standard_normal((K, N)) * 2.0 ** rng.integers(-10, 10, (K, N)),
                    jnp.float32)
    c = _acc(rng, M, N)
    if scales == "block":
        kw = dict(a_scale=jnp.asarray(1.3 * 2.0 ** rng.integers(-3, 3, (M, 3)), jnp.float32),
                  b_scale=jnp.asarray(0.7 * 2.0 ** rng.integers(-3, 3, (3, 1)), jnp.float32))
    else:
        kw = dict(a_scale=2.5, b_scale=0.75, promote_every=128)
    out = {}
    for switch in ("off", "on"):
        with jaxwarp.config.override(gemm_fused_kernel=switch):
            out[switch] = _bits(jaxwarp.matmul(a, b, c, operand_format="e4m3", mode="exact",
                                               **kw))
    np.testing.assert_array_equal(out["on"], out["off"])


@pytest.mark.slow
def test_sm89_mma_sync_fp8_through_the_kernel():
    # sm_89's fp8 mma.sync m16n8k16 (one block of 16 fused with C, F 13, 14 bits; an E
    # floor of 6, C's own emin) is a datapath the kernel computes too: the same bits.
    # m16n8k32 is two such blocks, the first's fp32 result the second's C.
    for fa, fb, k in (("e4m3", "e5m2", 16), ("e5m2", "e5m2", 16), ("e4m3", "e4m3", 32)):
        a, b, c = _inputs(fa, fb, 32, 32, 64, "bits", seed=5)
        out = {}
        for switch in ("off", "on"):
            with jaxwarp.config.override(gemm_fused_kernel=switch):
                out[switch] = _bits(jaxwarp.matmul(a, b, c, operand_format=(fa, fb),
                                                   mode="exact", instruction="mma_sync",
                                                   arch="sm_89", tile=(16, 8, k)))
        np.testing.assert_array_equal(out["on"], out["off"], err_msg=f"{fa} {fb} k{k}")
