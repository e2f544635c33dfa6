"""matmul(mode="native"): the exact chain issued on a Hopper GPU's tensor cores.

Off a Hopper GPU: the error (eager and under jit, matmul and emulate), the chains that
native mode refuses whatever the device, and the kernel's structure -- its k blocks, the
tails of a K the block does not divide, promotion -- in Pallas' interpreter, where each
block product is the exact model's chain of the same wgmma instructions, so the kernel
must give exact mode's bits. On an H100 / H200 (``native.device_error() is None``): the
tensor cores' bits against exact mode's.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxwarp
from jaxwarp._src.arithmetic import datapath
from jaxwarp._src.gemm import native
from jaxwarp._src.gemm.kernels.native_kernels import pieces
from jaxwarp._src.gemm.matmul import Cfg, tiled, to_operand
from jaxwarp._src.gemm.matmul_tiles import issue_arch

HOPPER = native.device_error() is None
needs_hopper = pytest.mark.skipif(not HOPPER, reason="mode='native' needs an H100 / H200")
off_hopper = pytest.mark.skipif(HOPPER, reason="the error is for devices without wgmma")


def _bits(x):
    x = np.asarray(x)
    return x.view(np.uint32 if x.dtype.itemsize == 4 else np.uint16)


def _operands(fmt, acc, M, K, N, seed=0, spread=4):
    rng = np.random.default_rng(seed)

    def draw(shape):
        x = rng.standard_normal(shape).astype(np.float32)
        return x * np.exp2(rng.integers(-spread, spread + 1, shape)).astype(np.float32)

    c = jnp.asarray(draw((M, N))).astype(jnp.float32 if acc == "f32" else jnp.float16)
    return jnp.asarray(draw((M, K))), jnp.asarray(draw((K, N))), c


@off_hopper
@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("api", ["matmul", "mma"])
def test_off_hopper_is_an_error_naming_what_is_needed(api, jit):
    if api == "matmul":
        a = b = jnp.ones((64, 32), jnp.float32)
        f = functools.partial(jaxwarp.matmul, operand_format="bf16", mode="native")
    else:
        a, b = jnp.ones((64, 32), jnp.bfloat16), jnp.ones((32, 64), jnp.bfloat16)
        f = functools.partial(jaxwarp.mma, c=jnp.zeros((64, 64), jnp.float32),
                              a_format="bf16", c_format="f32", d_format="f32", mode="native")
    with pytest.raises(ValueError, match=r"mode='native'.*Hopper GPU.*compute capability 9\.0"):
        (jax.jit(f) if jit else f)(a, b.T if api == "matmul" else b)


@off_hopper
def test_emulate_native_off_hopper_is_an_error():
    with pytest.raises(ValueError, match=r"mode='native'.*Hopper GPU"):  # at emulate's checks
        jaxwarp.emulate(lambda x: x @ x, operand_format="bf16", mode="native")


@pytest.mark.parametrize("kw, must", [
    (dict(instruction="mma_sync", tile=(16, 8, 8)), ("wgmma m64nNk16", "tile=(16, 8, 8)")),
    (dict(operand_format="e4m3", instruction="mma_sync"), ("wgmma m64nNk32", "mma_sync_fp8")),
    (dict(operand_format="tf32"), ("wgmma m64nNk8", "hmma_tf32_k4")),  # WMMA m16n16k8
    (dict(arch="sm_80", instruction="mma_sync"), ("arch='sm_80'", "sm_90")),
], ids=["mma_sync-k8", "fp8-mma_sync", "wmma-tf32", "sm_80"])
def test_chains_the_gpu_does_not_issue_are_refused(kw, must):
    a = jnp.ones((64, 64), jnp.float32)
    with pytest.raises(ValueError) as e:
        jaxwarp.matmul(a, a, mode="native", **kw)
    for s in ("mode='native'", *must):
        assert s in str(e.value)


@pytest.mark.parametrize("kw, must", [
    (dict(satf=True), ("no satf",)),
    (dict(c_format="f16", d_format="f32"), ("c_format='f16'", "d_format='f32'")),
    (dict(a_format="tf32"), ("wgmma m64nNk8", "hmma_tf32_k4")),  # WMMA m16n16k8
    (dict(a_format="e4m3", instruction="mma_sync", arch="sm_90"), ("mma_sync_fp8",)),
    (dict(instruction="mma_sync", instruction_k=8), ("tile=(64, 8, 8)",)),
    (dict(a_format="s8", c_format="s32", d_format="s32", instruction="mma_sync"),
     ("operand_format='s8'",)),
], ids=["satf", "c-d", "wmma-tf32", "fp8-mma_sync", "mma_sync-k8", "s8"])
def test_mma_chains_the_gpu_does_not_issue_are_refused(kw, must):
    kw = {"a_format": "f16", "c_format": "f32", "d_format": "f32", **kw}
    dt = {"f16": jnp.float16, "tf32": jnp.float32, "e4m3": jnp.float8_e4m3fn,
          "s8": jnp.int8}[kw["a_format"]]
    c = jnp.zeros((16, 16), jnp.int32 if kw["c_format"] == "s32" else
                  jnp.float16 if kw["c_format"] == "f16" else jnp.float32)
    a = jnp.ones((16, 16 if kw["c_format"] != kw["d_format"] else 32), dt)  # one instruction
    with pytest.raises(ValueError) as e:
        jaxwarp.mma(a, a.T, c, mode="native", **kw)
    for s in ("mode='native'", *must):
        assert s in str(e.value)


def test_b_is_k_major_for_fp8_only():
    def spec(fmt):
        cfg = Cfg(fmt, fmt, "f32", (64, 8, native.NATIVE_K[fmt]), "wgmma", "sm_90", "native",
                  None, False)
        return native.plan(cfg, 256, 256, 256).spec

    assert spec("e4m3").b_kmajor and spec("e5m2").b_kmajor and not spec("f16").b_kmajor


def test_pieces_cover_k_in_order_with_whole_instructions():
    for length, block, k in ((4096, 64, 16), (4144, 64, 16), (48, 64, 16), (4128, 128, 32),
                             (8, 32, 8), (0, 64, 16)):
        ps = pieces(length, block)
        assert sum(s * n for s, n in ps) == length
        assert all(s % k == 0 and s & (s - 1) == 0 and s <= block for s, _ in ps)
        assert [s for s, _ in ps] == sorted((s for s, _ in ps), reverse=True)


@pytest.mark.slow
@pytest.mark.parametrize("fmt, acc, promote, shape", [
    ("f16", "f32", 32, (8, 80, 24)),  # promotion intervals of two instructions; a tail
    ("e4m3", "f32", None, (16, 96, 8)),  # the 13-bit C of wgmma fp8 through a tail
    ("e5m2", "f32", 64, (16, 160, 8)),  # promotion with a shorter last interval
    ("tf32", "f32", 16, (16, 56, 8)),  # a k-8 block; promotion from an opaque zero
    ("e4m3", "f16", None, (16, 64, 8)),
    ("bf16", "f32", None, (70, 80, 16)),
], ids=["f16-promote32", "e4m3", "e5m2-promote64", "tf32", "e4m3-f16acc", "bf16"])
def test_kernel_structure_in_the_interpreter(fmt, acc, promote, shape):
    """The kernel with the exact model as its block product gives exact mode's bits:
    its blocks, tails and promotion chain the instructions as exact mode does."""
    M, K, N = shape
    k = native.NATIVE_K[fmt]
    a, b, c = _operands(fmt, acc, M, K, N)
    a, b = to_operand(a, fmt), to_operand(b, fmt)
    cfg = Cfg(fmt, fmt, acc, (64, 8, k), "wgmma", "sm_90", "native", promote, False)
    got = native.chain(a, b, c, cfg, interpret=True)
    want = tiled(a, b, c, Cfg(fmt, fmt, acc, (64, 8, k), "wgmma", "sm_90", "exact", promote,
                              False))
    np.testing.assert_array_equal(_bits(got), _bits(want))


@pytest.mark.slow
def test_mma_native_structure_in_the_interpreter():
    """mma's native path (batch dims through vmap, tf32 words cut to their top 19 bits)
    with the exact model as the kernel's block product gives exact mode's bits."""
    rng = np.random.default_rng(1)
    a = jnp.asarray(rng.standard_normal((2, 16, 24)), jnp.float32)  # low 13 bits set
    b = jnp.asarray(rng.standard_normal((24, 8)), jnp.float32)
    c = jnp.asarray(rng.standard_normal((16, 8)), jnp.float32)
    cfg = datapath.ChainCfg("tf32", "tf32", "f32", "f32", None, 8)
    got = native.run_mma(a, b, c, cfg, interpret=True)
    want = jaxwarp.mma(a, b, c, a_format="tf32", c_format="f32", d_format="f32",
                       instruction="wgmma", arch="sm_90a")
    np.testing.assert_array_equal(_bits(got), _bits(want))


@needs_hopper
@pytest.mark.parametrize("fa, fb, acc, instruction, batch, shape", [
    ("f16", "f16", "f32", "wmma", (), (16, 64, 16)),
    ("bf16", "bf16", "f32", "mma_sync", (2,), (16, 32, 8)),
    ("tf32", "tf32", "f32", "wgmma", (2,), (64, 40, 16)),  # low 13 bits set
    ("e5m2", "e4m3", "f16", "wgmma", (), (64, 96, 24)),
])
def test_mma_native_bits_equal_exact_on_hopper(fa, fb, acc, instruction, batch, shape):
    M, K, N = shape
    rng = np.random.default_rng(K)
    store = {"tf32": jnp.float32, "f16": jnp.float16, "bf16": jnp.bfloat16,
             "e4m3": jnp.float8_e4m3fn, "e5m2": jnp.float8_e5m2}
    a = jnp.asarray(rng.standard_normal(batch + (M, K)), jnp.float32).astype(store[fa])
    b = jnp.asarray(rng.standard_normal((K, N)), jnp.float32).astype(store[fb])
    c = jnp.asarray(rng.standard_normal((M, N)), jnp.float32).astype(
        jnp.float32 if acc == "f32" else jnp.float16)
    kw = dict(a_format=fa, b_format=fb, c_format=acc, d_format=acc, instruction=instruction,
              arch="sm_90a" if instruction == "wgmma" else "sm_90")
    got = jax.jit(functools.partial(jaxwarp.mma, mode="native", **kw))(a, b, c)
    want = jax.jit(functools.partial(jaxwarp.mma, mode="exact", **kw))(a, b, c)
    np.testing.assert_array_equal(_bits(got), _bits(want))


@needs_hopper
@pytest.mark.parametrize("fmt, acc, instruction, promote, shape", [
    ("f16", "f32", None, None, (128, 1040, 80)),  # WMMA (the default): N a multiple of 16
    ("f16", "f16", "wgmma", None, (64, 528, 64)),
    ("bf16", "f32", "mma_sync", None, (256, 2064, 136)),
    ("tf32", "f32", "wgmma", 32, (64, 528, 64)),  # was folded into one chain by Triton
    ("tf32", "f32", "mma_sync", None, (64, 520, 64)),
    ("e4m3", "f32", None, None, (200, 4128, 136)),
    ("e4m3", "f32", None, 128, (200, 4128, 136)),
    ("e5m2", "f16", None, None, (64, 512, 64)),
])
def test_native_bits_equal_exact_on_hopper(fmt, acc, instruction, promote, shape):
    M, K, N = shape
    a, b, c = _operands(fmt, acc, M, K, N, seed=K)
    kw = dict(operand_format=fmt, accumulator=acc, instruction=instruction,
              promote_every=promote)
    got = jax.jit(functools.partial(jaxwarp.matmul, mode="native", **kw))(a, b, c)
    want = jax.jit(functools.partial(jaxwarp.matmul, mode="exact", **kw))(a, b, c)
    np.testing.assert_array_equal(_bits(got), _bits(want))



@needs_hopper
@pytest.mark.parametrize("fmt", ["bf16", "e4m3"])
def test_native_without_c_reads_no_c(fmt, monkeypatch):
    """``matmul(a, b)`` without ``c``: the Mosaic GPU kernel is handed no C (its chains
    start from +0; no M x N zeros written and read back); its bits and gradients are
    those of an explicit zero C."""
    from jaxwarp._src.gemm.kernels import native_mgpu

    M, K, N = 256, 256, 512
    a, b, c = _operands(fmt, "f32", M, K, N, seed=5)
    kw = dict(operand_format=fmt, instruction="wgmma", mode="native")
    f = functools.partial(jaxwarp.matmul, **kw)
    with jaxwarp.config.override(native_backend="mosaic_gpu"):
        seen, kernel = [], native_mgpu.chain

        def spy(a_op, b_op, c_acc, *args):
            seen.append(c_acc is None)
            return kernel(a_op, b_op, c_acc, *args)

        monkeypatch.setattr(native_mgpu, "chain", spy)
        jax.clear_caches()  # a trace cached by an earlier test would not call the spy
        jax.make_jaxpr(f)(a, b)
        jax.make_jaxpr(f)(a, b, c)
        assert seen == [True, False]
        monkeypatch.undo()
        got = jax.jit(f)(a, b)
        want = jax.jit(f)(a, b, jnp.zeros_like(c))
        np.testing.assert_array_equal(_bits(got), _bits(want))
        a32, b32 = a.astype(jnp.float32), b.astype(jnp.float32)
        g = jax.grad(lambda a, b: jnp.sum(f(a, b)), argnums=(0, 1))(a32, b32)
        g0 = jax.grad(lambda a, b: jnp.sum(f(a, b, jnp.zeros_like(c))), argnums=(0, 1))(a32, b32)
        for x, y in zip(g, g0, strict=True):
            np.testing.assert_array_equal(_bits(x), _bits(y))


# --- exact mode on the tensor cores (the option gemm_exact_tensor_cores) -------------------

_SAME_AS_HOPPER = [  # (arch, instruction, format, tile, whether the chain is wgmma's)
    ("sm_100a", "tcgen05", "bf16", (128, 8, 16), True),  # the catalogue: Hopper's datapath
    ("sm_100a", "tcgen05", "f16", (64, 8, 16), True),
    ("sm_100a", "tcgen05", "tf32", (128, 8, 8), True),
    ("sm_90", "wmma", "f16", (16, 16, 16), True),
    ("sm_120a", "mma_sync", "bf16", (16, 8, 16), True),
    ("sm_90", "wgmma", "e4m3", (64, 8, 32), True),
    ("sm_90", "mma_sync", "e4m3", (16, 8, 32), True),  # two f16 HMMAs and an FADD
    ("sm_80", "mma_sync", "bf16", (16, 8, 16), False),  # blocks of 8, F = 24
    ("sm_89", "mma_sync", "f16", (16, 8, 16), False),
    ("sm_90", "mma_sync", "f16", (16, 8, 8), False),  # k = 8: blocks of 8 products
    ("sm_100a", "tcgen05", "e4m3", (128, 8, 32), False),  # F = 25 over 32 terms
]


def _dp(arch, instruction, fmt, k):
    return datapath.matmul_datapath(issue_arch(instruction, arch), instruction, fmt, fmt,
                                    "f32", k)


@pytest.mark.parametrize("arch, instruction, fmt, tile, same", _SAME_AS_HOPPER)
def test_exact_on_tensor_cores_follows_the_catalogue(arch, instruction, fmt, tile, same,
                                                      monkeypatch):
    """The route is taken exactly where the catalogue's datapath of the chain equals
    Hopper's wgmma (with the option on and a Hopper GPU, here pretended)."""
    monkeypatch.setattr(native, "device_error", lambda: None)
    cfg = Cfg(fmt, fmt, "f32", tile, instruction, arch, "exact", None, False)
    dp = _dp(arch, instruction, fmt, tile[2])
    assert native.exact_on_tensor_cores(cfg, dp) is None  # "off", the default
    with jaxwarp.config.override(gemm_exact_tensor_cores="auto"):
        got = native.exact_on_tensor_cores(cfg, dp)
        assert (got is not None) == same
        pair = instruction == "mma_sync" and fmt == "e4m3"  # f16 chains, promoted
        if same:
            assert (got.mode, got.instruction, got.a_format, got.tile[2], got.promote_every) \
                == (("native", "wgmma", "f16", 16, 32) if pair else
                    ("native", "wgmma", fmt, tile[2], None))
            # the data drives it: one field of the datapath changed, no route
            assert native.exact_on_tensor_cores(cfg, dataclasses.replace(dp, F=dp.F - 1)) is None
            if pair:
                assert native.exact_on_tensor_cores(
                    cfg, dataclasses.replace(dp, k_split="contig")) is None
            for other in (dict(promote_every=2 * tile[2]), dict(scaled=True),
                          dict(mode="fast")):
                assert native.exact_on_tensor_cores(dataclasses.replace(cfg, **other), dp) is None
    monkeypatch.undo()
    if not HOPPER:  # the device decides too
        with jaxwarp.config.override(gemm_exact_tensor_cores="auto"):
            assert native.exact_on_tensor_cores(cfg, dp) is None


@needs_hopper
@pytest.mark.parametrize("arch, instruction, fmt, tile", [
    c[:4] for c in _SAME_AS_HOPPER if c[4]])
def test_exact_on_tensor_cores_gives_the_models_bits(arch, instruction, fmt, tile,
                                                     monkeypatch):
    """On a Hopper GPU, exact ``matmul`` through the tensor cores equals the model's own
    arithmetic bit for bit, special values and gradients included (N = 264 where the
    instruction allows it: the backward product dA = dD @ B^T then has K = 264, which both
    routes pad to 272 with zero products)."""
    M, K, N = 256, 512, 256 if instruction == "wmma" else 264
    a, b, c = _operands(fmt, "f32", M, K, N, seed=11)
    # special values: inf (fp8: saturated to the largest finite by the conversion), NaN,
    # subnormal operands and a NaN and -0 in C
    tiny = {"f16": 2.0 ** -20, "bf16": 2.0 ** -130, "tf32": 2.0 ** -130}.get(fmt, 2.0 ** -8)
    a = a.at[0, :3].set(jnp.array([jnp.inf, jnp.nan, tiny]))
    b = b.at[5, 7].set(-jnp.inf).at[9, :2].set(tiny)
    c = c.at[3, 4].set(jnp.nan).at[4, :3].set(-0.0)
    kw = dict(operand_format=fmt, instruction=instruction, arch=arch, mode="exact")
    f = functools.partial(jaxwarp.matmul, **kw)
    seen, kernel = [], native.chain

    def spy(*args, **kwargs):
        seen.append(True)
        return kernel(*args, **kwargs)

    monkeypatch.setattr(native, "chain", spy)
    jax.clear_caches()
    with jaxwarp.config.override(gemm_exact_tensor_cores="auto"):
        got = jax.jit(f)(a, b, c)
        g = jax.grad(lambda a, b: jnp.sum(f(a, b, c) * c), argnums=(0, 1))(a, b)
    assert seen  # the route ran
    with jaxwarp.config.override(gemm_exact_tensor_cores="off"):
        want = jax.jit(f)(a, b, c)
        g0 = jax.grad(lambda a, b: jnp.sum(f(a, b, c) * c), argnums=(0, 1))(a, b)
    np.testing.assert_array_equal(_bits(got), _bits(want))
    for x, y in zip(g, g0, strict=True):
        np.testing.assert_array_equal(_bits(x), _bits(y))


def test_exact_on_tensor_cores_pads_k_as_exact_mode_does(monkeypatch):
    """A backward product's K need not be a multiple of the instruction's k: exact mode
    pads it with zero products, and the route hands the tensor cores the same padded
    chain (pretended Hopper GPU; the kernel replaced by a record of its operands)."""
    monkeypatch.setattr(native, "device_error", lambda: None)
    seen = []

    def record(a_op, b_op, c_acc, cfg):
        seen.append((a_op.shape, b_op.shape, cfg.mode, cfg.instruction))
        return jnp.zeros((a_op.shape[0], b_op.shape[1]), jnp.float32)

    monkeypatch.setattr(native, "chain", record)
    a, b, _ = _operands("bf16", "f32", 32, 48, 40)
    f = functools.partial(jaxwarp.matmul, operand_format="bf16", instruction="tcgen05",
                          arch="sm_100a", mode="exact")
    jax.clear_caches()
    with jaxwarp.config.override(gemm_exact_tensor_cores="auto"):
        jax.grad(lambda a, b: jnp.sum(f(a, b)), argnums=(0, 1))(a, b)
    assert sorted(seen) == sorted([
        ((32, 48), (48, 40), "native", "wgmma"),  # the forward product
        ((32, 48), (48, 48), "native", "wgmma"),  # dA = dD @ B^T: K = 40 padded to 48
        ((48, 32), (32, 40), "native", "wgmma"),  # dB = A^T @ dD: K = 32
    ]), seen


@pytest.mark.slow
def test_exact_on_tensor_cores_runs_sm90_fp8_mma_sync_as_f16_chains(monkeypatch):
    """sm_90's fp8 ``mma.sync`` on the tensor cores: f16 operands in the HMMAs' k order,
    f16 wgmma chains from +0 promoted every instruction. In Pallas' interpreter (each
    block the model's f16 wgmma chain; pretended Hopper GPU) the route gives exact mode's
    bits, forward and backward (K = 40 in dA padded to 64)."""
    monkeypatch.setattr(native, "device_error", lambda: None)
    seen, kernel = [], native.chain

    def interpreted(a_op, b_op, c_acc, cfg):
        seen.append((a_op.dtype, cfg.a_format, cfg.promote_every))
        return kernel(a_op, b_op, c_acc, cfg, interpret=True)

    monkeypatch.setattr(native, "chain", interpreted)
    a, b, c = _operands("e4m3", "f32", 64, 64, 40, seed=4)
    f = functools.partial(jaxwarp.matmul, operand_format="e4m3", instruction="mma_sync",
                          arch="sm_90", mode="exact")

    def run():
        jax.clear_caches()
        d = f(a, b, c)
        return d, jax.grad(lambda a, b: jnp.sum(f(a, b, c) * c), argnums=(0, 1))(a, b)

    want = run()
    assert not seen
    with jaxwarp.config.override(gemm_exact_tensor_cores="auto"):
        got = run()
    assert seen and all(s == (jnp.dtype(jnp.float16), "f16", 32) for s in seen), seen
    for x, y in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_array_equal(_bits(x), _bits(y))
