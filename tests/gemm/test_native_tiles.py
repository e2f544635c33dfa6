"""Exact ``jaxwarp.mma`` tiles on a Hopper GPU's tensor cores (the option
``gemm_exact_tensor_cores``): several tiles to one ``wgmma``, laid out block-diagonally.

Off the GPU the kernel runs in Pallas' interpreter, where each ``wgmma`` product is the
exact model's chain, so the layout (the gathers of B and C, the diagonal blocks, the k
pieces, the padding of the batch) must give exact mode's bits. The route is checked with
a pretended Hopper GPU; on an H100 / H200 the tensor cores' bits are checked.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxwarp
from jaxwarp._src.arithmetic import datapath
from jaxwarp._src.gemm import native
from jaxwarp._src.gemm.kernels import native_tiles

HOPPER = native.device_error() is None
ACC = {"f32": jnp.float32, "f16": jnp.float16}


def _bits(x):
    x = np.asarray(x)
    return x.view(np.uint32 if x.dtype.itemsize == 4 else np.uint16)


def _tiles(fmt, acc, T, m, K, n, seed=0, special=True, fb=None):
    """Operands in their storage dtypes (B's format ``fb``, default A's), with inf, NaN,
    -0 and subnormals in them."""
    rng = np.random.default_rng(seed)

    def draw(shape):
        x = rng.standard_normal(shape).astype(np.float32)
        return x * np.exp2(rng.integers(-3, 4, shape)).astype(np.float32)

    store = jaxwarp.get_format(fmt).storage_dtype
    a, b, c = draw((T, m, K)), draw((T, K, n)), draw((T, m, n))
    if special:
        tiny = float(jaxwarp.get_format(fmt).min_subnormal) if fmt != "tf32" else 2.0 ** -130
        a[0, 0, :4] = [np.inf, np.nan, tiny, -0.0]
        b[-1, 1, 0] = -np.inf
        c[1 % T, 2, 3] = np.nan
        c[0, 1, :] = -0.0
        a[0, 1, :] = 0.0  # row 1 of tile 0: -0 C plus zero products
    return (jnp.asarray(a).astype(store),
            jnp.asarray(b).astype(jaxwarp.get_format(fb or fmt).storage_dtype),
            jnp.asarray(c).astype(ACC[acc]))


def _exact(a, b, c, fmt, acc, instruction="wgmma", arch="sm_90a"):
    with jaxwarp.config.override(gemm_exact_tensor_cores="off"):
        return jaxwarp.mma(a, b, c, a_format=fmt, c_format=acc, d_format=acc, arch=arch,
                           instruction=instruction, mode="exact")


_LAYOUTS = [  # (format, accumulator, T, m, K, n, groups): the batch padded, k in pieces
    ("e4m3", "f32", 5, 32, 96, 8, None),
]
_MORE = [
    ("f16", "f16", 9, 16, 48, 16, None),
    ("tf32", "f32", 6, 16, 8, 16, 2),
    ("bf16", "f32", 7, 64, 32, 32, None),
    ("e5m2", "f32", 12, 16, 32, 16, 2),
    ("f16", "f32", 3, 16, 16 * 9, 16, None),  # k = 144: blocks of 128 and 16
]


@pytest.mark.parametrize("fmt, acc, T, m, K, n, groups", _LAYOUTS + [
    pytest.param(*x, marks=pytest.mark.slow) for x in _MORE])
def test_layout_gives_exact_modes_bits(fmt, acc, T, m, K, n, groups):
    a, b, c = _tiles(fmt, acc, T, m, K, n)
    ik = native.NATIVE_K[fmt]
    spec = native_tiles.native_kernels.DotSpec(fmt, fmt, acc, ik, native.B_KMAJOR[fmt])
    got = native_tiles.chain(a, b, c, spec, groups=groups, interpret=True)
    np.testing.assert_array_equal(_bits(got), _bits(_exact(a, b, c, fmt, acc)))


@pytest.mark.parametrize("fa, fb, T, K", [
    ("e4m3", "e4m3", 9, 64), pytest.param("e5m2", "e4m3", 4, 32, marks=pytest.mark.slow)])
def test_hmma_pair_gives_sm90_fp8_mma_sync_bits(fa, fb, T, K):
    """sm_90's fp8 ``mma.sync``: f16 HMMAs over k % 4 in {0, 1}, then {2, 3}, from +0, and
    C added last, on the layout (interpreter: the model's f16 wgmma chain)."""
    a, b, c = _tiles(fa, "f32", T, 16, K, 8, fb=fb)
    spec = native_tiles.native_kernels.DotSpec("f16", "f16", "f32", 16)
    nan = jaxwarp.datapath_for("sm_90", "mma_sync", fa, 32, fb).nan_f32
    got = native_tiles.chain(a, b, c, spec, hmma_pair=True, nan=nan, interpret=True)
    with jaxwarp.config.override(gemm_exact_tensor_cores="off"):
        want = jaxwarp.mma(a, b, c, a_format=fa, b_format=fb, c_format="f32", d_format="f32",
                           arch="sm_90", instruction="mma_sync", mode="exact")
    np.testing.assert_array_equal(_bits(got), _bits(want))
    with pytest.raises(ValueError, match="hmma_pair runs f16 wgmma k16"):
        native_tiles.chain(a, b, c, dataclasses.replace(spec, k=32), hmma_pair=True,
                           interpret=True)


def test_fits_names_what_does_not_fit():
    assert native_tiles.fits(16, 16, 32, 32) is None
    assert native_tiles.fits(64, 256, 16, 16) is None
    assert "m = 24" in native_tiles.fits(24, 16, 32, 32)
    assert "power of two" in native_tiles.fits(16, 12, 32, 32)  # 48 columns
    assert "from 16 to 256" in native_tiles.fits(16, 128, 16, 16)  # 512 columns
    assert "multiple of the instruction's k" in native_tiles.fits(16, 16, 48, 32)
    with pytest.raises(ValueError, match="m = 24 does not divide 64"):
        spec = native_tiles.native_kernels.DotSpec("f16", "f16", "f32", 16)
        native_tiles.chain(jnp.ones((2, 24, 16), jnp.float16),
                           jnp.ones((2, 16, 16), jnp.float16),
                           jnp.zeros((2, 24, 16)), spec, interpret=True)


_ROUTES = [  # (instruction, arch, format, k, m, n, extra, taken)
    ("mma_sync", "sm_90", "tf32", 8, 16, 8, {}, True),
    ("mma_sync", "sm_80", "bf16", 16, 16, 8, {}, False),  # blocks of 8, F = 24
] + [pytest.param(*x, marks=pytest.mark.slow) for x in [
    ("wgmma", "sm_90a", "e4m3", 32, 16, 16, {}, True),
    ("wmma", "sm_90", "f16", 16, 16, 16, {}, True),  # the catalogue: wgmma's datapath
    ("tcgen05", "sm_100a", "bf16", 16, 64, 16, {}, True),
    ("mma_sync", "sm_90", "e4m3", 32, 16, 8, {}, True),  # two f16 HMMAs and an FADD
    ("mma_sync", "sm_90", "e5m2", 32, 16, 8, {"b_format": "e4m3"}, True),
    ("mma_sync", "sm_89", "e4m3", 32, 16, 8, {}, False),  # Ada's fp8 datapath
    ("mma_sync", "sm_90", "e4m3", 32, 16, 8, {"c_format": "f16", "d_format": "f16"},
     False),  # the HMMAs chain in f16
    ("wmma", "sm_90", "tf32", 8, 16, 16, {}, False),  # two k4 blocks
    ("wgmma", "sm_90a", "f16", 16, 24, 16, {}, False),  # m does not divide 64
    ("wgmma", "sm_90a", "f16", 16, 16, 16, {"satf": True}, False),
    ("wmma", "sm_90", "f16", 16, 16, 16, {"d_format": "f16"}, False),  # C, D differ
]]


@pytest.mark.parametrize("instruction, arch, fmt, k, m, n, extra, taken", _ROUTES)
def test_route_follows_the_catalogue(instruction, arch, fmt, k, m, n, extra, taken,
                                     monkeypatch):
    """With the option on and a Hopper GPU (pretended: the kernel runs in the
    interpreter), exact ``mma`` takes the tensor cores exactly for wgmma's chains (and
    sm_90's fp8 ``mma.sync``), with exact mode's bits; with the option off it does not.
    (tf32 also takes a gradient through the route: ``mma``'s straight-through rule,
    the same either way.)"""
    monkeypatch.setattr(native, "device_error", lambda: None)
    seen, run = [], native.run_tiles

    def spy(a, b, c, cfg):
        seen.append(cfg.dp)
        return run(a, b, c, cfg, interpret=True)

    monkeypatch.setattr(native, "run_tiles", spy)
    one = extra.get("d_format", "f32") != extra.get("c_format", "f32")  # one instruction
    a, b, c = _tiles(fmt, "f32", 4, m, k if one else 2 * k, n, seed=3, special=False,
                     fb=extra.get("b_format"))
    if extra.get("c_format") == "f16":
        c = c.astype(jnp.float16)
    kw = {**dict(a_format=fmt, c_format="f32", d_format="f32", arch=arch,
                 instruction=instruction, mode="exact"), **extra}
    b = b[0]  # one B for every tile: the batch broadcasts

    def f(a, b, c):
        return jaxwarp.mma(a, b, c, **kw)

    want = f(a, b, c)  # the option is "off" by default
    assert not seen
    jax.clear_caches()
    with jaxwarp.config.override(gemm_exact_tensor_cores="auto"):
        got = jax.jit(f)(a, b, c)
        grads = jax.grad(lambda a, b: jnp.sum(f(a, b, c).astype(jnp.float32)),
                         argnums=(0, 1))(a.astype(jnp.float32), b.astype(jnp.float32)) \
            if fmt in ("tf32",) else None
    assert bool(seen) == taken, seen
    np.testing.assert_array_equal(_bits(got), _bits(want))
    if grads is not None:  # tf32: float operands, mma's straight-through gradient
        g0 = jax.grad(lambda a, b: jnp.sum(f(a, b, c)), argnums=(0, 1))(a, b)
        for x, y in zip(grads, g0, strict=True):
            np.testing.assert_array_equal(_bits(x), _bits(y))


def test_run_tiles_refuses_other_chains():
    """run_tiles runs what its cfg's datapath says, whatever the option: a chain that is
    not wgmma's (sm_80's blocks of 8) is an error, not other arithmetic."""
    a, b, c = _tiles("bf16", "f32", 4, 16, 16, 8, special=False)
    cfg = datapath.check_mma(a, b, c, a_format="bf16", c_format="f32", d_format="f32",
                             instruction="mma_sync", arch="sm_80").cfg
    with pytest.raises(ValueError, match="neither sm_90a wgmma's nor sm_90's fp8 mma.sync"):
        native.run_tiles(a, b, c, cfg, interpret=True)


def test_route_reads_the_datapath(monkeypatch):
    """The data drives it: the chain's datapath one field from wgmma's, no route."""
    monkeypatch.setattr(native, "device_error", lambda: None)
    a, b, c = _tiles("f16", "f32", 4, 16, 16, 16, special=False)
    dp = datapath.matmul_datapath("sm_90a", "wgmma", "f16", "f16", "f32", 16)
    with jaxwarp.config.override(gemm_exact_tensor_cores="auto"):
        for d, taken in ((dp, True), (dataclasses.replace(dp, F=dp.F - 1), False)):
            checked = datapath.check_mma(a, b, c, a_format="f16", c_format="f32",
                                         d_format="f32", instruction="wgmma",
                                         arch="sm_90a", datapath=d)
            assert native.tiles_on_tensor_cores(checked, False) == taken


@pytest.mark.skipif(not HOPPER, reason="the tensor cores of an H100 / H200")
@pytest.mark.parametrize("instruction, arch, fmt, acc, k", [
    ("wgmma", "sm_90a", "e4m3", "f32", 32), ("wgmma", "sm_90a", "e5m2", "f32", 64),
    ("wmma", "sm_90", "f16", "f32", 16), ("wgmma", "sm_90a", "f16", "f16", 32),
    ("wmma", "sm_90", "bf16", "f32", 48), ("mma_sync", "sm_90", "tf32", "f32", 8),
    ("tcgen05", "sm_100a", "bf16", "f32", 16), ("mma_sync", "sm_90", "e4m3", "f32", 32),
    ("mma_sync", "sm_90", "e5m2", "f32", 64)])
def test_tensor_cores_give_the_models_bits(instruction, arch, fmt, acc, k):
    """On a Hopper GPU: the tiles on the tensor cores equal the model's own arithmetic
    (XLA's ops), special values included, 2^12 tiles of m16n16 (1,024 instances)."""
    a, b, c = _tiles(fmt, acc, 1 << 12, 16, k, 16, seed=5)
    check_tensor_cores(a, b, c, native_tiles.KERNEL_NAME, a_format=fmt, c_format=acc,
                       d_format=acc, arch=arch, instruction=instruction)


def check_tensor_cores(a, b, c, kernel: str, options=(), **kw) -> None:
    """Exact ``mma`` of the tiles with the tensor-core route on (and ``options``, more
    of ``jaxwarp.config``'s): the program runs ``kernel`` (its name) and its bits equal
    the model's own arithmetic (XLA's ops)."""
    with jaxwarp.config.override(gemm_exact_tensor_cores="auto", **dict(options)):
        f = jax.jit(lambda a, b, c: jaxwarp.mma(a, b, c, **kw, mode="exact"))
        assert kernel in str(jax.make_jaxpr(f)(a, b, c))
        got = f(a, b, c)
    with jaxwarp.config.override(gemm_exact_tensor_cores="off", gemm_fused_kernel="off"):
        want = jax.jit(lambda a, b, c: jaxwarp.mma(a, b, c, **kw, mode="exact"))(a, b, c)
    np.testing.assert_array_equal(_bits(got), _bits(want))


def test_route_without_pallas_triton(monkeypatch):
    """The kernel is Pallas-Triton's: a JAX without that backend takes the Mosaic GPU
    kernel where it runs the chain, and keeps the model's arithmetic for sm_90's fp8
    ``mma.sync`` (the Triton kernel's alone) instead of failing (pretended Hopper GPU)."""
    monkeypatch.setattr(native, "device_error", lambda: None)
    a, b, c = _tiles("f16", "f32", 4, 16, 32, 16, special=False)
    fp8 = [x.astype(jnp.float8_e4m3fn) for x in (a, b)]
    wgmma = datapath.check_mma(a, b, c, a_format="f16", c_format="f32", d_format="f32",
                               instruction="wgmma", arch="sm_90a")
    pair = datapath.check_mma(*fp8, c, a_format="e4m3", c_format="f32", d_format="f32",
                              instruction="mma_sync", arch="sm_90")
    with jaxwarp.config.override(gemm_exact_tensor_cores="auto"):
        assert native.tiles_on_tensor_cores(wgmma, False)
        assert native.tiles_on_tensor_cores(pair, False)
        monkeypatch.setattr(native.native_mgpu, "triton_missing", lambda: True)
        assert native.tiles_backend(wgmma.cfg, 16, 16, 32) == "mosaic_gpu"
        assert native.tiles_on_tensor_cores(wgmma, False)
        assert not native.tiles_on_tensor_cores(pair, False)
