"""Native mode's Mosaic GPU kernel (``native_mgpu``): its structure on a CPU, the backend
choice.

The kernel runs unchanged under ``jaxwarp.emulate(fn, arch="sm_90a")``: JAX's GPU
interpret mode with every ``plgpu.wgmma`` the exact model's wgmma chain from the
accumulator's value. Its blocks, pipeline, promotion, C, padding and K-major B must then
give exact mode's bits (``matmul``'s k loop on the same converted operands). On an H100
the tensor cores' bits are checked by ``benchmarks/native_mgpu.py --check`` and by
``tests/gemm/test_native.py`` (whose GPU tests run the backend ``native_backend`` picks).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxwarp
from jaxwarp._src.gemm import native
from jaxwarp._src.gemm.kernels import native_mgpu
from jaxwarp._src.gemm.matmul import Cfg, tiled, to_operand

#: The kernel under JAX's GPU interpret mode: on a GPU backend the interpreter's steps
#: run as device programs one at a time (one test ran past 200 s on an H100); the CPU
#: runs these checks in CI, and benchmarks/native_mgpu.py --check runs the kernel itself.
_INTERPRETER_ON_CPU = pytest.mark.skipif(
    jax.default_backend() == "gpu",
    reason="the GPU interpret mode on a GPU backend takes minutes; run on the CPU")


def _bits(x):
    x = np.asarray(x)
    return x.view(np.uint32 if x.dtype.itemsize == 4 else np.uint16)


def _operands(fmt, acc, M, K, N, seed=0, spread=4):
    rng = np.random.default_rng(seed)

    def draw(shape):
        x = rng.standard_normal(shape).astype(np.float32)
        return x * np.exp2(rng.integers(-spread, spread + 1, shape)).astype(np.float32)

    c = jnp.asarray(draw((M, N))).astype(jnp.float32 if acc == "f32" else jnp.float16)
    a, b = to_operand(jnp.asarray(draw((M, K))), fmt), to_operand(jnp.asarray(draw((K, N))), fmt)
    return a, b, c


def _check(fmt, acc, promote, shape, c_given=True, tile="auto", order="snake"):
    """native.chain through the Mosaic GPU backend, emulated, against exact mode."""
    M, K, N = shape
    k = native.NATIVE_K[fmt]
    a, b, c = _operands(fmt, acc, M, K, N, seed=K + N)
    if not c_given:
        c = jnp.zeros_like(c)
    cfg = Cfg(fmt, fmt, acc, (64, 8, k), "wgmma", "sm_90", "native", promote, False)
    with jaxwarp.config.override(native_backend="mosaic_gpu", native_mgpu_tile=tile,
                                 native_mgpu_order=order):
        assert native.backend(cfg) == "mosaic_gpu"
        got = jaxwarp.emulate(lambda a, b, c: native.chain(a, b, c, cfg), arch="sm_90a")(a, b, c)
    want = tiled(a, b, c, Cfg(fmt, fmt, acc, (64, 8, k), "wgmma", "sm_90", "exact", promote,
                              False))
    np.testing.assert_array_equal(_bits(got), _bits(want))


# One tile each (a few seconds in the interpreter).
@pytest.mark.parametrize("fmt, acc, promote, shape", [
    ("f16", "f32", None, (128, 128, 256)),  # the 4096^3 tile: bk 64, C as the chain's start
    ("e4m3", "f32", 64, (64, 256, 40)),  # promotion from +0, B K-major, M and N padded
], ids=["f16", "e4m3-promote64"])
@_INTERPRETER_ON_CPU
def test_kernel_structure_under_emulate(fmt, acc, promote, shape):
    _check(fmt, acc, promote, shape)


@pytest.mark.slow
@pytest.mark.parametrize("fmt, acc, promote, shape", [
    ("bf16", "f32", 64, (128, 192, 256)),  # promotion every block of 64
    ("bf16", "f32", 32, (128, 112, 128)),  # K = 112: blocks of 16; a shorter last interval
    ("f16", "f16", None, (100, 48, 24)),  # f16 accumulator; K below one block
    ("e4m3", "f32", None, (128, 256, 256)),  # the 13-bit C of fp8 across the blocks
    ("e4m3", "f16", None, (128, 160, 128)),  # K = 160: blocks of 32
    ("e5m2", "f32", 64, (64, 96, 40)),
    ("tf32", "f32", None, (128, 56, 64)),  # k-8 blocks, B K-major
    ("tf32", "f32", 16, (64, 96, 32)),
], ids=["bf16-promote64", "bf16-K112-promote32", "f16-f16acc", "e4m3", "e4m3-f16acc-K160",
        "e5m2-promote64", "tf32", "tf32-promote16"])
@_INTERPRETER_ON_CPU
def test_kernel_structure_under_emulate_every_format(fmt, acc, promote, shape):
    _check(fmt, acc, promote, shape)


@_INTERPRETER_ON_CPU
@pytest.mark.slow  # 14-21 s each in the interpreter (the default order, snake, is in the
@pytest.mark.parametrize("order", ["grid", "persistent"])  # default tier's checks)
def test_kernel_tile_orders(order, monkeypatch):
    """Every tile order gives exact mode's bits: 2 x 2 tiles, taken by 3 CTAs in the
    persistent order (one of them loops: a C staged and a D stored a second time)."""
    monkeypatch.setattr(native_mgpu, "sm_count", lambda: 3)
    _check("bf16", "f32", None, (256, 64, 512), order=order)
    _check("f16", "f32", 32, (256, 64, 256), order=order, c_given=False)


@_INTERPRETER_ON_CPU
@pytest.mark.slow
def test_kernel_with_a_zero_c_and_several_tiles():
    _check("bf16", "f32", None, (256, 64, 512), c_given=False)


@_INTERPRETER_ON_CPU
@pytest.mark.slow
@pytest.mark.parametrize("tile", ["128x128", "128x256"])
def test_kernel_tiles_the_option_asks_for(tile):
    _check("f16", "f32", 32, (128, 96, 256), tile=tile)
    _check("e4m3", "f32", None, (128, 256, 256), tile=tile)


def test_tile_option_sets_the_plan():
    p = native_mgpu.plan("bf16", "f32", 4096, 4096, 4096, None, "128x128")
    assert (p.bn, p.stages) == (128, 4)
    p = native_mgpu.plan("bf16", "f32", 4096, 4096, 4096, 128, "128x256")
    assert (p.bn, p.stages) == (256, 3)


@_INTERPRETER_ON_CPU
@pytest.mark.parametrize("fmt, promote", [
    ("f16", None), pytest.param("e5m2", 64, marks=pytest.mark.slow)])
def test_kernel_without_c_reads_none_and_starts_from_zero(fmt, promote):
    """``c_acc=None``: the kernel has no C operand; its chains (and the promoted total)
    start from +0, as exact mode's from a zero C."""
    M, K, N = 64, 128, 64
    a, b, c = _operands(fmt, "f32", M, K, N, seed=3)
    cfg = Cfg(fmt, fmt, "f32", (64, 8, native.NATIVE_K[fmt]), "wgmma", "sm_90", "native",
              promote, False)
    with jaxwarp.config.override(native_backend="mosaic_gpu"):
        got, report = jaxwarp.emulate(lambda a, b: native.chain(a, b, None, cfg),
                                      arch="sm_90a", report=True)(a, b)
    want = tiled(a, b, jnp.zeros_like(c), Cfg(fmt, fmt, "f32", cfg.tile, "wgmma", "sm_90",
                                               "exact", promote, False))
    np.testing.assert_array_equal(_bits(got), _bits(want))
    assert report.entries and all(e.instruction == "wgmma" for e in report.entries)


def test_block_k_divides_k_and_the_interval():
    assert native_mgpu.block_k("f16", 4096) == 64
    assert native_mgpu.block_k("f16", 4096 + 48) == 16
    assert native_mgpu.block_k("e4m3", 4096) == 128
    assert native_mgpu.block_k("e4m3", 4096, 64) == 64
    assert native_mgpu.block_k("tf32", 56) == 8
    with pytest.raises(ValueError, match="multiples of the f16 instruction's k=16"):
        native_mgpu.block_k("f16", 40)


def test_plan_fits_shared_memory():
    for fmt in native_mgpu.DTYPES:
        for promote in (None, 128):
            p = native_mgpu.plan(fmt, "f32", 4096, 4096, 4096, promote)
            size = jnp.dtype(native_mgpu.DTYPES[fmt]).itemsize
            smem = p.stages * (native_mgpu.BM + p.bn) * p.bk * size + 2 * 64 * p.wn * 4
            assert 3 <= p.stages <= 4 and smem <= 227 * 1024, (fmt, promote, p)
            assert p.bn == (128 if promote else 256)


def _cfg(fa, fb, acc="f32"):
    return Cfg(fa, fb, acc, (64, 8, native.NATIVE_K[fa]), "wgmma", "sm_90", "native", None,
               False)


def test_backend_follows_the_option():
    assert native.backend(_cfg("bf16", "bf16")) == "mosaic_gpu"  # JAX 0.10.2 has the API
    assert native.backend(_cfg("e5m2", "e4m3")) == "triton"  # one dtype a plgpu.wgmma
    with jaxwarp.config.override(native_backend="triton"):
        assert native.backend(_cfg("bf16", "bf16")) == "triton"
    with jaxwarp.config.override(native_backend="mosaic_gpu"):
        with pytest.raises(ValueError, match=r"native_backend='mosaic_gpu'.*two formats"):
            native.backend(_cfg("e5m2", "e4m3"))
    with pytest.raises(ValueError, match="native_backend='cuda' is not allowed"):
        jaxwarp.config.update("native_backend", "cuda")


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_mosaic_backend_refusal_is_eager_and_under_jit(jit):
    a = jnp.ones((64, 32), jnp.float8_e5m2)
    b = jnp.ones((32, 64), jnp.float8_e4m3fn)

    def f(a, b):
        return jaxwarp.mma(a, b, jnp.zeros((64, 64), jnp.float32), a_format="e5m2",
                           b_format="e4m3", c_format="f32", d_format="f32",
                           instruction="wgmma", arch="sm_90a", mode="native")

    with jaxwarp.config.override(native_backend="mosaic_gpu"):
        with pytest.raises(ValueError, match=r"native_backend='mosaic_gpu'.*two formats"):
            (jax.jit(f) if jit else f)(a, b)


@_INTERPRETER_ON_CPU
@pytest.mark.slow
def test_mma_batch_dims_through_one_vmap():
    """``mma(mode="native")``'s batch dims (broadcast, two of them) become one vmap: one
    more grid dim of the Mosaic GPU kernel, whatever the batch rank."""
    from jaxwarp._src.arithmetic import datapath

    rng = np.random.default_rng(2)
    a = jnp.asarray(rng.standard_normal((2, 3, 64, 32)), jnp.float32).astype(jnp.bfloat16)
    b = jnp.asarray(rng.standard_normal((3, 32, 16)), jnp.float32).astype(jnp.bfloat16)
    c = jnp.asarray(rng.standard_normal((64, 16)), jnp.float32)
    cfg = datapath.ChainCfg("bf16", "bf16", "f32", "f32", None, 16)
    with jaxwarp.config.override(native_backend="mosaic_gpu"):
        got = jaxwarp.emulate(lambda a, b, c: native.run_mma(a, b, c, cfg),
                              arch="sm_90a")(a, b, c)
    want = jaxwarp.mma(a, b, c, a_format="bf16", c_format="f32", d_format="f32",
                       instruction="wgmma", arch="sm_90a")
    assert got.shape == (2, 3, 64, 16)
    np.testing.assert_array_equal(_bits(got), _bits(want))


def test_a_jax_without_the_api_takes_triton_or_says_what_is_missing(monkeypatch):
    from jax.experimental.pallas import mosaic_gpu as plgpu

    monkeypatch.delattr(plgpu, "emit_pipeline_warp_specialized")
    err = native_mgpu.api_error()
    assert "plgpu.emit_pipeline_warp_specialized" in err and jax.__version__ in err
    assert native.backend(_cfg("f16", "f16")) == "triton"
    with jaxwarp.config.override(native_backend="mosaic_gpu"):
        with pytest.raises(ValueError, match=r"needs plgpu\.emit_pipeline_warp_specialized"):
            native.backend(_cfg("f16", "f16"))


_PTX_TYPE = {"f16": "f16", "bf16": "bf16", "tf32": "tf32", "e4m3": "e4m3", "e5m2": "e5m2"}


@pytest.mark.parametrize("fmt, acc, promote, c_given, tile, K", [
    ("f16", "f32", None, True, "auto", 512),
    ("bf16", "f32", 64, True, "auto", 512),
    ("tf32", "f32", None, True, "auto", 512),
    ("e4m3", "f32", 128, False, "auto", 512),
    ("e5m2", "f16", None, True, "auto", 512),
    ("f16", "f16", None, False, "128x128", 512),
    # k blocks of 16 and 32 (32- and 64-byte rows of A): B swizzled as A is (on the
    # H100 with JAX 0.11.2 these failed Mosaic GPU's layout inference before)
    ("bf16", "f32", None, True, "auto", 528),
    ("f16", "f32", None, False, "auto", 544),
])
def test_kernel_lowers_for_cuda_to_its_formats_wgmma(fmt, acc, promote, c_given, tile, K):
    """Mosaic GPU lowers the kernel on a CPU (``jax.export`` for the CUDA platform): every
    layout, copy and wgmma of it is one the backend builds, and its only tensor-core
    instruction is wgmma m64nNkK of the format, with the accumulator's type."""
    import re

    from jax import export

    M, N = 256, 512
    a = jax.ShapeDtypeStruct((M, K), native_mgpu.DTYPES[fmt])
    b = jax.ShapeDtypeStruct((K, N), native_mgpu.DTYPES[fmt])
    c = jax.ShapeDtypeStruct((M, N), native_mgpu.ACC_DTYPES[acc])
    with jaxwarp.config.override(native_mgpu_tile=tile):
        if c_given:
            fn = jax.jit(lambda a, b, c: native_mgpu.chain(a, b, c, fmt, acc, promote))
            text = export.export(fn, platforms=["cuda"])(a, b, c).mlir_module()
        else:
            fn = jax.jit(lambda a, b: native_mgpu.chain(a, b, None, fmt, acc, promote))
            text = export.export(fn, platforms=["cuda"])(a, b).mlir_module()
        p = native_mgpu.plan(fmt, acc, M, K, N, promote, tile)
    k, t = native.NATIVE_K[fmt], _PTX_TYPE[fmt]
    want = f"wgmma.mma_async.sync.aligned.m64n{p.wn}k{k}.{acc}.{t}.{t}"
    assert set(re.findall(r"wgmma\.mma_async[\w.]*", text)) == {want}
    assert "mma.sync" not in text and "@mosaic_gpu" in text
