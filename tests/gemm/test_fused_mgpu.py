"""The fused exact kernel on Mosaic GPU (``fused_mgpu``): exact mode's bits in JAX's GPU
interpret mode (under ``jaxwarp.emulate``, as the native Mosaic kernel's tests run), its
lowering for CUDA on a CPU, the option ``gemm_kernel_backend``.
``benchmarks/fused_mgpu.py`` checks the GPU's bits and times it."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxwarp
from jaxwarp._src.gemm.kernels import fused_kernel, fused_mgpu

_DT = {"bf16": jnp.bfloat16, "f16": jnp.float16}


def _bits(x):
    return np.asarray(x).view(np.uint32)


def _operands(fmt, M, N, K, kind, seed=0):
    rng = np.random.default_rng(seed)
    a, b = rng.standard_normal((M, K)), rng.standard_normal((K, N))
    c = rng.standard_normal((M, N)) * 2.0 ** rng.integers(-30, 30, (M, N))
    if kind == "wide":  # exponents far apart: terms truncated, C dominant or cut
        r = 20 if fmt == "bf16" else 6
        a, b = a * 2.0 ** rng.integers(-r, r, (M, K)), b * 2.0 ** rng.integers(-r, r, (K, N))
        a[:, :16] *= rng.random((M, 16)) < 0.3  # zeros: some whole blocks of zero products
        b[16:32] *= 0
    elif kind == "subnormal":  # f16 subnormal operands, zeros and -0
        a, b = a * 2.0 ** rng.integers(-26, 4, (M, K)), b * 2.0 ** rng.integers(-26, 4, (K, N))
        a[0, :] = -0.0
    elif kind == "big":  # bf16 products up to 2**122 in cancelling pairs, C near them
        a, b = a * 2.0 ** 60, b * 2.0 ** 60
        a[:, 1::2] = a[:, ::2]
        b[1::2] = -b[::2] * (1 + 2.0 ** -7 * rng.integers(-2, 3, (K // 2, N)))
        c = c * 2.0 ** 90
    elif kind == "carry":  # 16 terms near 2**27 of one sign and C: the sum passes 2**31
        a = np.full((M, K), 1.9921875) * np.where(rng.random((M, 1)) < 0.5, 1, -1)
        b = np.full((K, N), 1.9921875 if fmt == "bf16" else 1.9990234375)
        c = np.sign(a[:, :1]) * np.full((M, N), 1.99)  # C at the products' E
    a, b = jnp.asarray(a, _DT[fmt]), jnp.asarray(b, _DT[fmt])
    c = jnp.asarray(c, jnp.float32).at[0, 1].set(-0.0).at[1, 1].set(2.0 ** -130)
    if kind == "special":  # inf / NaN operands (f16) and C
        a = a.at[0, 0].set(jnp.inf).at[1, 3].set(jnp.nan).at[2, 0].set(-jnp.inf)
        b = b.at[0, 2].set(0).at[5, 7].set(jnp.inf)
    if kind in ("special", "c_special"):
        c = c.at[3, 3].set(jnp.inf).at[4, 4].set(-jnp.inf).at[5, 5].set(jnp.nan)
    return a, b, c


def _exact(a, b, c, fmt):
    with jaxwarp.config.override(gemm_fused_kernel="off"):
        return jaxwarp.matmul(a, b, c, operand_format=fmt, mode="exact", instruction="wgmma",
                              arch="sm_90a")


def _check(fmt, kind, finite, shape=(128, 32, 64), seed=0, triton=False, **settings):
    M, N, K = shape
    a, b, c = _operands(fmt, M, N, K, kind, seed)
    dp = jaxwarp.datapath_for("sm_90", "wgmma", fmt, 16)
    got = jaxwarp.emulate(lambda a, b, c: fused_mgpu.chain(a, b, c, dp, fmt, finite=finite,
                                                           **settings),
                          arch="sm_90a")(a, b, c)
    np.testing.assert_array_equal(_bits(got), _bits(_exact(a, b, c, fmt)))
    if triton:  # and the Triton kernel's bits (its interpreter)
        want = fused_kernel.chain(a, b, c, dp, fmt, finite=finite, interpret=True)
        np.testing.assert_array_equal(_bits(got), _bits(want))


# One tile each, a few seconds in the interpreter.
@pytest.mark.parametrize("fmt, kind, finite", [
    ("bf16", "wide", True),  # 4 instructions in two k blocks of 32, zero blocks, -0
    ("f16", "special", None),  # the cond: inf / NaN operands and C, the non-finite kernel
], ids=["bf16-wide-finite", "f16-special"])
def test_kernel_bits_under_emulate(fmt, kind, finite):
    _check(fmt, kind, finite, triton=True)


@pytest.mark.slow
@pytest.mark.parametrize("fmt, kind, finite, shape", [
    ("bf16", "big", True, (128, 32, 64)),
    ("bf16", "c_special", False, (128, 32, 64)),  # bf16's non-finite variant, C inf / NaN
    ("bf16", "carry", True, (128, 32, 64)),
    ("f16", "carry", True, (128, 32, 64)),
    ("f16", "subnormal", None, (128, 32, 256)),  # 4 pipeline steps through the ring
    ("f16", "wide", False, (100, 40, 48)),  # M, N padded; K = 48: k blocks of 16
    ("bf16", "wide", True, (256, 64, 128)),  # several tiles
], ids=["bf16-big", "bf16-c-special", "bf16-carry", "f16-carry", "f16-subnormal-K256",
        "f16-padded-K48", "bf16-tiles"])
def test_kernel_bits_under_emulate_more(fmt, kind, finite, shape):
    _check(fmt, kind, finite, shape)


@pytest.mark.slow
@pytest.mark.parametrize("fmt, kind, finite, shape", [
    ("f16", "special", None, (128, 32, 64)),  # the cond, the non-finite kernel
    ("f16", "wide", False, (100, 40, 48)),  # M, N padded; K = 48: k blocks of 16
    ("bf16", "carry", True, (256, 64, 256)),  # several CTAs, 4 steps through the ring
], ids=["f16-special", "f16-padded-K48", "bf16-carry-tiles"])
def test_specialized_pipeline_bits_under_emulate(fmt, kind, finite, shape):
    # a warpgroup issuing the copies, two computing (the default is the plain pipeline)
    _check(fmt, kind, finite, shape, pipeline="specialized")


@pytest.mark.slow
def test_tile_settings_keep_the_bits():
    a, b, c = _operands("bf16", 128, 64, 64, "wide", seed=5)
    dp = jaxwarp.datapath_for("sm_90", "wgmma", "bf16", 16)
    want = _bits(_exact(a, b, c, "bf16"))
    ws = dict(pipeline="specialized")  # a warpgroup copying, wgs computing
    for settings in (ws, dict(ws, wgs=1, wm=128, bn=16, bk=32, stages=2),
                     dict(ws, wgs=2, bn=64, bk=16), dict(ws, wgs=2, f32_operands=True),
                     dict(ws, int_terms=5), dict(int_terms=16), dict(bn=32, bk=64, stages=3),
                     dict(wm=128, bn=16, bk=16), dict(int_terms=4, stages=1)):
        got = jaxwarp.emulate(lambda a, b, c, s=settings: fused_mgpu.chain(
            a, b, c, dp, "bf16", finite=True, **s), arch="sm_90a")(a, b, c)
        np.testing.assert_array_equal(_bits(got), want, err_msg=str(settings))


@pytest.mark.parametrize("fmt", ["bf16", "f16"])
def test_kernel_lowers_for_cuda_at_4096(fmt):
    """Mosaic GPU lowers the 4096^3 kernels (both variants of the cond: two Mosaic GPU
    custom calls) on a CPU (``jax.export`` for CUDA): every layout, broadcast, load and
    integer operation of them is one the backend builds."""
    from jax import export

    dp = jaxwarp.datapath_for("sm_90", "wgmma", fmt, 16)
    a = jax.ShapeDtypeStruct((4096, 4096), _DT[fmt])
    c = jax.ShapeDtypeStruct((4096, 4096), jnp.float32)
    fn = jax.jit(lambda a, b, c: fused_mgpu.chain(a, b, c, dp, fmt))
    text = export.export(fn, platforms=["cuda"])(a, a, c).mlir_module()
    assert text.count("@mosaic_gpu") == 2


def test_plan_settings():
    p = fused_mgpu.plan("bf16", 4096, 25, 0x7FFFFFFF, True)
    assert (p.pipeline, p.bm, p.bn, p.bk, p.rounding) == (
        fused_mgpu.PIPELINE, fused_mgpu.WM, fused_mgpu.BN, fused_mgpu.BK, "int")
    ws = fused_mgpu.plan("bf16", 4096, 25, 0x7FFFFFFF, True, pipeline="specialized")
    assert (ws.wgs, ws.bm) == (fused_mgpu.WGS, fused_mgpu.WGS * fused_mgpu.WM)
    assert fused_mgpu.plan("f16", 48, 25, 0, True).bk == 16
    assert fused_mgpu.plan("f16", 96, 25, 0, True).bk == 32
    assert fused_mgpu.plan("f16", 4096, 25, 0, True, N=8).bn == 8
    with pytest.raises(ValueError, match="K=40 must be a positive multiple of 16"):
        fused_mgpu.plan("f16", 40, 25, 0, True)
    with pytest.raises(ValueError, match="wm=96"):
        fused_mgpu.plan("f16", 64, 25, 0, True, wm=96)
    with pytest.raises(ValueError, match=r"wgs \* wm = 320 rows"):
        fused_mgpu.plan("f16", 64, 25, 0, True, wgs=5)
    with pytest.raises(ValueError, match="bytes of shared memory"):
        fused_mgpu.plan("f16", 4096, 25, 0, True, wgs=4, bn=256, stages=4)
    with pytest.raises(ValueError, match="rounding='float'"):
        fused_mgpu.plan("f16", 64, 25, 0, True, rounding="float")
    plain = fused_mgpu.plan("bf16", 4096, 25, 0, True, pipeline="plain")
    assert (plain.wgs, plain.bm, plain.pipeline) == (1, fused_mgpu.WM, "plain")
    with pytest.raises(ValueError, match="pipeline='plain' takes wgs=1"):
        fused_mgpu.plan("f16", 64, 25, 0, True, pipeline="plain", wgs=2)
    with pytest.raises(ValueError, match="pipeline='fast'; allowed"):
        fused_mgpu.plan("f16", 64, 25, 0, True, pipeline="fast")


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_option_refuses_what_the_kernel_cannot_run(jit):
    a = jnp.ones((64, 32), jnp.bfloat16)
    dp = jaxwarp.datapath_for("sm_90", "wgmma", "bf16", 16)

    def f(a, c):
        return fused_mgpu.by_option(a, a.T, c, dp, "bf16", form="general")

    with jaxwarp.config.override(gemm_kernel_backend="mosaic_gpu"):
        with pytest.raises(ValueError, match=r"gemm_kernel_backend='mosaic_gpu'.*general"):
            (jax.jit(f) if jit else f)(a, jnp.zeros((64, 64)))
        with pytest.raises(ValueError, match=r"gemm_kernel_backend='mosaic_gpu'.*'split'"):
            fused_mgpu.by_option(a, a.T, jnp.zeros((64, 64)), dp, "bf16", form="split")
        if fused_mgpu.api_error() is None:  # the Triton kernel's alone: sm_80's blocks of
            sm80 = jaxwarp.datapath_for("sm_80", "mma_sync", "bf16", 16)  # 8, fp8, tf32
            with pytest.raises(ValueError, match=r"mosaic_gpu'.*blocks of 8 products"):
                fused_mgpu.by_option(a, a.T, jnp.zeros((64, 64)), sm80, "bf16")
            with pytest.raises(ValueError, match=r"Mosaic GPU kernel: .*blocks of 8 products"):
                fused_mgpu.chain(a, a.T, jnp.zeros((64, 64)), sm80, "bf16")  # called directly
            for fmt, k in (("e4m3", 32), ("tf32", 8)):
                x = jnp.ones((64, 32), jnp.float32)
                with pytest.raises(ValueError, match=rf"formats '{fmt}' x '{fmt}'"):
                    fused_mgpu.by_option(x, x.T, jnp.zeros((64, 64)),
                                         jaxwarp.datapath_for("sm_90", "wgmma", fmt, k), fmt)
    with pytest.raises(ValueError, match="gemm_kernel_backend='cuda' is not allowed"):
        jaxwarp.config.update("gemm_kernel_backend", "cuda")


def _matmul(a, b, c, fmt):
    return jaxwarp.matmul(a, b, c, operand_format=fmt, mode="exact", instruction="wgmma",
                          arch="sm_90a")


@pytest.mark.parametrize("backend", ["triton", "mosaic_gpu"])
def test_matmul_takes_the_kernel_the_option_names(backend):
    """Exact ``matmul`` with the fused kernel ("on": off the GPU too) runs the kernel of
    the backend ``gemm_kernel_backend`` names: exact mode's bits (the Mosaic GPU kernel
    under ``emulate``, the Triton kernel in Pallas' interpreter, as matmul runs it)."""
    a, b, c = _operands("f16", 128, 32, 32, "special", seed=1)
    with jaxwarp.config.override(gemm_fused_kernel="on", gemm_kernel_backend=backend):
        jaxpr = str(jax.make_jaxpr(lambda a, b, c: _matmul(a, b, c, "f16"))(a, b, c))
        run = (jaxwarp.emulate(_matmul, arch="sm_90a") if backend == "mosaic_gpu" else
               _matmul)  # (emulate's Pallas interpreter batches; the kernel's trunc can't)
        got = run(a, b, c, "f16")
    assert ("mpmd_map" in jaxpr) == (backend == "mosaic_gpu")
    assert ("pallas_call" in jaxpr) == (backend == "triton")
    np.testing.assert_array_equal(_bits(got), _bits(_exact(a, b, c, "f16")))


def _without_triton(monkeypatch):
    monkeypatch.setattr(fused_mgpu.native_mgpu, "triton_missing", lambda: True)
    return jaxwarp.config.override(gemm_fused_kernel="on", gemm_kernel_backend="auto")


def test_auto_takes_the_mosaic_gpu_kernel_where_jax_has_no_triton(monkeypatch):
    """On a JAX without Pallas Triton, "auto" runs exact matmul's products through this
    kernel where it models them (f16; bf16 under the range check's cond, small products
    too), and XLA's exact loop where it does not (sm_80's blocks of 8)."""
    a, b, c = _operands("bf16", 128, 32, 32, "wide", seed=2)
    with _without_triton(monkeypatch):
        assert fused_mgpu.backend() == "mosaic_gpu"
        for fmt in ("f16", "bf16"):
            x, y = a.astype(_DT[fmt]), b.astype(_DT[fmt])
            jaxpr = str(jax.make_jaxpr(lambda x, y, c, f=fmt: _matmul(x, y, c, f))(x, y, c))
            assert "mpmd_map" in jaxpr and "pallas_call" not in jaxpr, fmt
        sm80 = str(jax.make_jaxpr(lambda a, b, c: jaxwarp.matmul(
            a, b, c, operand_format="bf16", mode="exact", instruction="mma_sync",
            arch="sm_80"))(a, b, c))
        assert "mpmd_map" not in sm80 and "pallas_call" not in sm80


@pytest.mark.slow
@pytest.mark.parametrize("fmt, kind", [("f16", "special"), ("bf16", "wide")])
def test_auto_without_triton_gives_exact_modes_bits(fmt, kind, monkeypatch):
    a, b, c = _operands(fmt, 128, 32, 32, kind, seed=3)
    with _without_triton(monkeypatch):
        got = jaxwarp.emulate(_matmul, arch="sm_90a")(a, b, c, fmt)
    np.testing.assert_array_equal(_bits(got), _bits(_exact(a, b, c, fmt)))


def test_a_jax_without_the_api_is_named(monkeypatch):
    from jax.experimental.pallas import mosaic_gpu as plgpu

    monkeypatch.delattr(plgpu, "emit_pipeline_warp_specialized")
    assert "plgpu.emit_pipeline_warp_specialized" in fused_mgpu.api_error()
    a = jnp.ones((64, 32), jnp.float16)
    dp = jaxwarp.datapath_for("sm_90", "wgmma", "f16", 16)
    with jaxwarp.config.override(gemm_kernel_backend="mosaic_gpu"):
        with pytest.raises(ValueError, match=r"mosaic_gpu'.*emit_pipeline_warp_specialized"):
            fused_mgpu.by_option(a, a.T, jnp.zeros((64, 64)), dp, "f16", finite=True)
