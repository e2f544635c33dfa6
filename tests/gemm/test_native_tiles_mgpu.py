"""Exact ``jaxwarp.mma`` tiles on a Hopper GPU's tensor cores through the Mosaic GPU kernel
(``native_tiles_mgpu``: a group's A's stacked, one ``wgmma`` chain a tile).

Off the GPU the kernel runs unchanged under ``jaxwarp.emulate(fn, arch="sm_90a")``, JAX's
GPU interpret mode with every ``plgpu.wgmma`` the exact model's chain, so the layout (the
stacked A and C, the selection of each tile's rows, B K-major or as it is, the runs of groups a CTA
takes through its stages, the padded batch) must give exact mode's bits. The backend
choice is checked with a pretended Hopper GPU; on an H100 / H200 the tensor cores' bits
are checked against the model's XLA ops.
"""

from __future__ import annotations

import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxwarp
from jaxwarp._src.arithmetic import datapath
from jaxwarp._src.gemm import native
from jaxwarp._src.gemm.kernels import native_tiles_mgpu as ntm

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from test_native_tiles import ACC, _bits, _exact, _tiles, check_tensor_cores  # noqa: E402

HOPPER = native.device_error() is None
_INTERPRETER_ON_CPU = pytest.mark.skipif(
    jax.default_backend() == "gpu",
    reason="the GPU interpret mode on a GPU backend runs step by step; run on the CPU")


def _emulated(fmt, acc, **kw):
    return jaxwarp.emulate(lambda a, b, c: ntm.chain(a, b, c, fmt, acc, **kw), arch="sm_90a")


_LAYOUTS = [  # (format, accumulator, T, m, K, n, the kernel's plan)
    ("bf16", "f32", 9, 16, 16, 8, {}),  # m16n8k16: 3 groups, the last padded
    # 5 groups, one a stage, 2 CTAs: runs of 3 stages and (the last) 2; n = 16: B as it
    # is (n-major), where the first layout's is transposed
    ("bf16", "f32", 20, 16, 16, 16, dict(ctas=2, stages=2, stage_groups=1)),
]
_MORE = [
    ("f16", "f16", 9, 16, 48, 16, dict(ctas=2, stages=2, stage_groups=1)),
    ("e4m3", "f32", 5, 32, 96, 8, dict(ctas=2)),
    ("tf32", "f32", 6, 16, 8, 16, dict(ctas=2, stages=1)),  # one stage: copies waited for
    ("e5m2", "f16", 7, 16, 32, 8, {}),  # an f16 C of 16-byte rows: not swizzled
    ("bf16", "f32", 3, 64, 32, 32, {}),  # wgmma's own m64: one tile a group
    ("f16", "f32", 11, 8, 16, 32, dict(ctas=1, stages=3, stage_groups=1)),  # m8n32, 3 deep
    ("f16", "f32", 4, 16, 16 * 9, 16, {}),  # k = 144: swizzle-wide k groups
    ("bf16", "f32", 48, 16, 32, 8, dict(ctas=2, stage_groups=4)),  # stages of 4 groups
]


@_INTERPRETER_ON_CPU
@pytest.mark.parametrize("fmt, acc, T, m, K, n, kw", _LAYOUTS + [
    pytest.param(*x, marks=pytest.mark.slow) for x in _MORE])
def test_layout_gives_exact_modes_bits(fmt, acc, T, m, K, n, kw):
    a, b, c = _tiles(fmt, acc, T, m, K, n)
    if fmt == "tf32":  # fp32 words with low bits set: the tensor core reads the top 19
        a = jax.lax.bitcast_convert_type(
            jax.lax.bitcast_convert_type(a, jnp.uint32) | 0x1357, jnp.float32)
    got = _emulated(fmt, acc, **kw)(a, b, c)
    np.testing.assert_array_equal(_bits(got), _bits(_exact(a, b, c, fmt, acc)))


def test_plan_sizes_the_runs():
    p = ntm.plan("bf16", "f32", 16, 8, 16, 1 << 20, ctas=1000, stage_groups=8)
    # 262,144 groups in 32,768 stages of 8: 33 a CTA, the last CTA 29; nothing padded
    assert (p.group, p.stage_groups, p.units, p.per_cta, p.ctas) == (4, 8, 32768, 33, 993)
    assert p.tiles == 1 << 20
    # 75 groups: stages of 5 (the largest that divides them, at most 8)
    odd = ntm.plan("bf16", "f32", 16, 8, 16, 300, stage_groups=8)
    assert (odd.stage_groups, odd.units, odd.tiles) == (5, 15, 300)
    small = ntm.plan("bf16", "f32", 16, 8, 16, 9)  # 3 groups, the last padded
    assert (small.stage_groups, small.ctas, small.stages, small.tiles) == (3, 1, 1, 12)
    assert ntm.plan("f16", "f32", 16, 16, 16, 1 << 20, stages=4).stages == 4
    # a stage stays within a quarter of SM_SHARED: m64n256 k128 bf16 groups one a stage
    assert ntm.plan("bf16", "f32", 64, 256, 128, 1 << 10).stage_groups == 1
    # a copy moves at most 256 tiles of 8 rows a side: B's block of G x 256 rows (m8n32)
    assert ntm.plan("f16", "f16", 8, 32, 16, 1 << 12, stage_groups=16).stage_groups == 8
    # and a stage fits the shared memory: 42 KiB a group of m16n64 k16 bf16, 5 (of 16)
    # fit, 4 of them divide the 1,024 groups
    assert ntm.plan("bf16", "f32", 16, 64, 16, 1 << 12, stage_groups=16).stage_groups == 4
    # an f16 C of 24 columns is not tiled: its copies at most 256 rows, 4 groups
    assert ntm.plan("f16", "f16", 16, 24, 16, 1 << 12, stage_groups=8).stage_groups == 4
    for name in ("ctas", "stages", "stage_groups"):
        with pytest.raises(ValueError, match=f"{name} must be a positive int"):
            ntm.plan("bf16", "f32", 16, 8, 16, 64, **{name: 0})
    with pytest.raises(ValueError, match="T must be a positive int"):
        ntm.plan("bf16", "f32", 16, 8, 16, 0)


@pytest.mark.parametrize("args, match", [
    (("bf16", "bf16", "f32", 24, 8, 16), "m = 24 does not divide 64"),
    (("bf16", "bf16", "f32", 16, 12, 16), "n = 12 is not a multiple of 8"),
    (("bf16", "bf16", "f32", 16, 264, 16), "from 8 to 256"),
    (("e4m3", "e4m3", "f32", 16, 8, 48), "k = 48 is not a multiple of the instruction's k = 32"),
    (("e5m2", "e4m3", "f32", 16, 8, 32), "plgpu.wgmma takes one dtype"),
    (("bf16", "bf16", "f16", 16, 8, 16), "accumulator 'f16' for bf16: allowed 'f32'"),
    (("bf16", "bf16", "f32", 2, 128, 16), "32 tiles of n = 128 make 4096 columns"),
    (("f16", "f16", "f32", 16, 72, 16), "more than 256"),  # 4 x 72 = 288
    (("bf16", "bf16", "f32", 64, 256, 256), "more than a CTA's stages may"),
])
def test_unsupported_names_what_does_not_fit(args, match):
    assert match in ntm.unsupported(*args)


def _cfg(instruction, arch, fa, k, fb=None, acc="f32"):
    a = jnp.ones((2, 16, k), jaxwarp.get_format(fa).storage_dtype)
    b = jnp.ones((k, 8), jaxwarp.get_format(fb or fa).storage_dtype)
    return datapath.check_mma(a, b, jnp.zeros((16, 8), ACC[acc]), a_format=fa, b_format=fb,
                              c_format=acc, d_format=acc, instruction=instruction,
                              arch=arch).cfg


@pytest.mark.parametrize("option, triton, chain, want, n", [
    ("auto", True, ("wgmma", "sm_90a", "bf16", 16), "triton", 8),
    ("auto", True, ("wgmma", "sm_90a", "bf16", 16), "mosaic_gpu", 24),  # no Triton layout
    ("triton", True, ("wgmma", "sm_90a", "bf16", 16), None, 24),
    ("auto", False, ("wgmma", "sm_90a", "bf16", 16), "mosaic_gpu", 8),  # a JAX without Triton
    ("mosaic_gpu", True, ("wgmma", "sm_90a", "e4m3", 32), "mosaic_gpu", 8),
    ("triton", False, ("wgmma", "sm_90a", "bf16", 16), None, 8),
    # sm_90's fp8 mma.sync (two f16 HMMAs and an FADD): the Triton kernel's alone
    ("auto", False, ("mma_sync", "sm_90", "e4m3", 32), None, 8),
    ("mosaic_gpu", True, ("mma_sync", "sm_90", "e4m3", 32), None, 8),
    ("auto", True, ("mma_sync", "sm_90", "e4m3", 32), "triton", 8),
])
def test_backend_follows_the_option(option, triton, chain, want, n, monkeypatch):
    monkeypatch.setattr(native.native_mgpu, "triton_missing", lambda: not triton)
    cfg = _cfg(*chain)
    with jaxwarp.config.override(gemm_tiles_backend=option):
        assert native.tiles_backend(cfg, 16, n, chain[3]) == want


def test_backend_needs_the_mosaic_gpu_api(monkeypatch):
    """Without Triton and with a JAX whose Mosaic GPU lacks what the kernel uses, the
    tiles keep the model's arithmetic (pretended Hopper GPU) instead of failing."""
    monkeypatch.setattr(native, "device_error", lambda: None)
    monkeypatch.setattr(native.native_mgpu, "triton_missing", lambda: True)
    a, b, c = _tiles("bf16", "f32", 4, 16, 16, 8, special=False)
    checked = datapath.check_mma(a, b, c, a_format="bf16", c_format="f32", d_format="f32",
                                 instruction="wgmma", arch="sm_90a")
    with jaxwarp.config.override(gemm_exact_tensor_cores="auto"):
        assert native.tiles_on_tensor_cores(checked, False)
        monkeypatch.setattr(ntm, "api_error", lambda: "Mosaic GPU needs plgpu.wgmma")
        assert not native.tiles_on_tensor_cores(checked, False)
        with pytest.raises(ValueError, match="no tiles kernel takes"):
            native.run_tiles(a, b, c, checked.cfg)


@_INTERPRETER_ON_CPU
@pytest.mark.slow
def test_route_runs_the_kernel_with_exact_modes_bits(monkeypatch):
    """``jaxwarp.mma`` with the option on, the Mosaic GPU backend and a pretended Hopper
    GPU takes the kernel (its name in the program); ``run_tiles`` (B broadcast over the
    batch, as ``mma`` takes it) gives exact mode's bits with the kernel under
    ``emulate`` (its wgmmas the model's)."""
    monkeypatch.setattr(native, "device_error", lambda: None)
    a, b, c = _tiles("bf16", "f32", 6, 16, 32, 8)
    b = b[0]  # one B for every tile
    kw = dict(a_format="bf16", c_format="f32", d_format="f32", arch="sm_90",
              instruction="mma_sync")
    with jaxwarp.config.override(gemm_exact_tensor_cores="auto",
                                 gemm_tiles_backend="mosaic_gpu"):
        program = jax.make_jaxpr(lambda a, b, c: jaxwarp.mma(a, b, c, **kw, mode="exact"))
        assert ntm.KERNEL_NAME in str(program(a, b, c))
    # (the emulator's own wgmma chains are exact matmuls: with the option on and the
    # pretended GPU they would take the tensor cores too)
    cfg = datapath.check_mma(a, b, c, **kw).cfg
    with jaxwarp.config.override(gemm_tiles_backend="mosaic_gpu"):
        got = jaxwarp.emulate(lambda a, b, c: native.run_tiles(a, b, c, cfg),
                              arch="sm_90a")(a, b, c)
    with jaxwarp.config.override(gemm_exact_tensor_cores="off"):
        want = jaxwarp.mma(a, b, c, **kw, mode="exact")
    np.testing.assert_array_equal(_bits(got), _bits(want))


@pytest.mark.skipif(not HOPPER, reason="the tensor cores of an H100 / H200")
@pytest.mark.parametrize("instruction, arch, fmt, acc, m, n, k", [
    ("mma_sync", "sm_90", "bf16", "f32", 16, 8, 16), ("wgmma", "sm_90a", "e4m3", "f32", 16, 8, 64),
    ("wgmma", "sm_90a", "e5m2", "f16", 16, 8, 32), ("wmma", "sm_90", "f16", "f32", 16, 16, 16),
    ("mma_sync", "sm_90", "f16", "f16", 16, 8, 16), ("mma_sync", "sm_90", "tf32", "f32", 16, 8, 8),
    ("tcgen05", "sm_100a", "bf16", "f32", 64, 64, 32), ("wmma", "sm_90", "f16", "f32", 8, 32, 16),
    ("wgmma", "sm_90a", "bf16", "f32", 64, 24, 16),  # n = 24: no Triton layout
    ("wgmma", "sm_90a", "f16", "f32", 64, 256, 16),  # B as it is: 16 swizzle tiles wide
    ("wmma", "sm_90", "bf16", "f32", 16, 16, 16),  # B as it is, 4 tiles a group
])
def test_tensor_cores_give_the_models_bits(instruction, arch, fmt, acc, m, n, k):
    """On a Hopper GPU: the Mosaic GPU kernel's tiles equal the model's own arithmetic
    (XLA's ops), special values included, 2^12 tiles."""
    a, b, c = _tiles(fmt, acc, 1 << 12, m, k, n, seed=7)
    check_tensor_cores(a, b, c, ntm.KERNEL_NAME, {"gemm_tiles_backend": "mosaic_gpu"},
                       a_format=fmt, c_format=acc, d_format=acc, arch=arch,
                       instruction=instruction)
