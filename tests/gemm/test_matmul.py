"""The tiled WMMA GEMM: equal to the fragment program, errors, jit/vmap, gradients."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import fast_dot_rounding
from jax.test_util import check_grads

import jaxwarp

# One compiled program per call signature, shared by the tests (an eager matmul runs its
# operations one by one, each compiled on its first use).
_MATMUL = jax.jit(jaxwarp.matmul, static_argnames=(
    "operand_format", "accumulator", "tile", "arch", "mode", "instruction", "promote_every"))


def _rand(shape, seed, scale=1.0):
    return jnp.asarray(np.random.default_rng(seed).normal(size=shape) * scale, jnp.float32)


@functools.partial(jax.jit, static_argnums=(3, 4))
def _fragment_gemm(a, b, c, fmt, tile):
    """The seed's WMMA kernel, warp by warp: load, mma_sync along k, store (one program)."""
    m, n, k = tile
    M, K = a.shape
    N = b.shape[1]
    cvt = {"f16": jaxwarp.float2half_rn, "bf16": jaxwarp.float2bfloat16_rn,
           "tf32": jaxwarp.float_to_tf32}[fmt]
    a_mem = cvt(a).reshape(-1)
    b_mem = cvt(b).reshape(-1)
    rows = []
    for i in range(0, M, m):
        tiles = []
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
            tiles.append(mem.reshape(m, n))
        rows.append(jnp.concatenate(tiles, axis=1))
    return jnp.concatenate(rows, axis=0)


@pytest.mark.parametrize("fmt,tile", [("f16", (16, 16, 16)), ("bf16", (8, 32, 16)),
                                      ("tf32", (16, 16, 8))], ids=["f16", "bf16", "tf32"])
def test_equals_the_fragment_program(fmt, tile):
    # Two or more tiles along M, N or K for every format: 8 mma_sync in the program.
    a, b, c = _rand((32, 32), 0), _rand((32, 32), 1), _rand((32, 32), 2)
    got = _MATMUL(a, b, c, operand_format=fmt, tile=tile)
    want = np.asarray(_fragment_gemm(a, b, c, fmt, tile))
    np.testing.assert_array_equal(np.asarray(got).view(np.uint32), want.view(np.uint32))


def test_fast_mode_is_a_rounded_dot():
    rounding = fast_dot_rounding()
    a, b = _rand((32, 64), 3), _rand((64, 32), 4)
    got = _MATMUL(a, b, operand_format="bf16", mode="fast")
    exact = _MATMUL(a, b, operand_format="bf16")
    if rounding == "tensor_core":  # the GPU's own tensor cores: the exact model's bits
        np.testing.assert_array_equal(np.asarray(got).view(np.uint32),
                                      np.asarray(exact).view(np.uint32))
        return
    want = jnp.dot(a.astype(jnp.bfloat16), b.astype(jnp.bfloat16),
                   preferred_element_type=jnp.float32, precision="highest")
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    assert not np.array_equal(np.asarray(exact), np.asarray(got))  # truncation shows


# Slow: K=512; the truncation itself is checked bit for bit by the chain tests.
@pytest.mark.slow
def test_all_positive_truncation_bias():
    # Round-toward-zero accumulation of positive terms only ever loses: exact <= fast.
    rounding = fast_dot_rounding()
    a, b = jnp.abs(_rand((16, 512), 5)), jnp.abs(_rand((512, 16), 6))
    exact = np.asarray(jaxwarp.matmul(a, b, operand_format="f16"))
    fast = np.asarray(jaxwarp.matmul(a, b, operand_format="f16", mode="fast"))
    ref = np.asarray(a, np.float64).astype(np.float16).astype(np.float64) @ \
        np.asarray(b, np.float64).astype(np.float16).astype(np.float64)
    assert np.all(exact <= ref)
    if rounding == "tensor_core":  # the GPU's dot truncates as the model does
        np.testing.assert_array_equal(fast.view(np.uint32), exact.view(np.uint32))
    else:
        assert np.mean(ref - exact) > np.mean(np.abs(ref - fast))


# Slow: vmap and jit of the model are checked by default in test_datapath.py and test_emulate.py.
@pytest.mark.slow
def test_vmap_and_jit():
    a, b = _rand((3, 16, 32), 7), _rand((3, 32, 16), 8)
    f = jax.jit(jax.vmap(lambda a, b: jaxwarp.matmul(a, b, operand_format="tf32")))
    got = f(a, b)
    for i in range(3):
        np.testing.assert_array_equal(got[i], jaxwarp.matmul(a[i], b[i], operand_format="tf32"))


# Slow: the rule is checked by test_new_instruction_gradients_16bit by default.
@pytest.mark.slow
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


# The CPU's shared executables (k_loop) against the inline k loop: products, their
# backward products, vmapped products, odd shapes (blocks and k chunks cut mid-way), every
# float format, with C, zeros, -0 and wide exponents.
@pytest.mark.skipif(jax.default_backend() != "cpu", reason="the CPU's shared executables")
@pytest.mark.parametrize("fmt,shapes,kw", [
    ("bf16", ((16, 32), (32, 16)), {}),
    ("f16", ((96, 48), (48, 128)), {}),
    ("tf32", ((64, 64), (64, 208)), {}),
    ("e4m3", ((80, 64), (64, 40)), {}),
    ("e5m2", ((70, 64), (64, 40)), dict(instruction="wgmma")),
    ("bf16", ((16, 528), (528, 32)), {}),
    ("f16", ((32, 16), (16, 32)), dict(instruction="mma_sync", tile=(8, 8, 4), arch="sm_70")),
])
def test_shared_executables_give_the_same_bits(monkeypatch, fmt, shapes, kw):
    from jaxwarp._src.gemm import k_loop

    rng = np.random.default_rng(7)

    def r(*s):
        x = rng.standard_normal(s).astype(np.float32) * np.exp2(
            rng.integers(-30, 30, s)).astype(np.float32)
        x[rng.random(s) < 0.05] = 0
        x[rng.random(s) < 0.02] = -0.0
        return x

    (sa, sb) = shapes
    a, b, c = r(*sa), r(*sb), r(sa[0], sb[1])

    def f(a, b, c):
        return jaxwarp.matmul(a, b, c, operand_format=fmt, **kw)

    def loss(a, b, c):
        return jnp.sum(jnp.sin(f(a, b, c)))

    host, calls = k_loop._host, []

    def counted(*args, **kwargs):
        calls.append(1)
        return host(*args, **kwargs)

    monkeypatch.setattr(k_loop, "_host", counted)
    got, ran = {}, {}
    for mode in ("auto", "off"):
        with jaxwarp.config.override(gemm_shared=mode):
            jax.clear_caches()  # a user's jax.jit is keyed without the options
            calls.clear()
            got[mode] = jax.block_until_ready((
                jax.jit(f)(a, b, c), jax.jit(jax.grad(loss, (0, 1)))(a, b, c),
                jax.vmap(f)(np.stack([a, -a]), np.stack([b, b]), np.stack([c, c]))))
            ran[mode] = len(calls)
    assert ran == {"auto": 5, "off": 0}  # forward; forward and two backward; vmapped
    for x, y in zip(jax.tree.leaves(got["auto"]), jax.tree.leaves(got["off"]), strict=True):
        x, y = _bits(x), _bits(y)
        np.testing.assert_array_equal(x, y)


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="the CPU's shared executables")
def test_promoted_products_give_the_same_bits(monkeypatch, options):
    # A product promoted to its whole loop (compiled in the background) gives the bits of
    # the blocks and of the inline loop, plain and vmapped.
    from jaxwarp._src.gemm import k_loop

    rng = np.random.default_rng(11)
    a = (rng.standard_normal((48, 96)) * np.exp2(rng.integers(-40, 40, (48, 96)))).astype(
        np.float32)
    b = rng.standard_normal((96, 80)).astype(np.float32)
    a[0, :3] = [np.inf, np.nan, 0.0]

    def f(a, b):
        return jaxwarp.matmul(a, b, operand_format="bf16")

    def run(f):
        return (np.asarray(jax.jit(f)(a, b)),
                np.asarray(jax.vmap(f)(np.stack([a, -a]), np.stack([b, b]))))

    options(gemm_promote_after=0.0)
    k_loop.clear_products()  # this test's products only
    blocks = run(f)  # the first calls: the blocks, then the promotions start
    assert k_loop.wait_for_promotions() == []
    promoted = [p for p in k_loop.products() if p.whole is not None]
    assert len(promoted) >= 2

    def no_blocks(*args, **kwargs):
        raise AssertionError("a promoted product ran the blocks")

    monkeypatch.setattr(k_loop, "_blocks", no_blocks)
    whole = run(f)
    options(gemm_shared="off")
    jax.clear_caches()
    inline = run(f)
    for x, y, z in zip(blocks, whole, inline, strict=True):
        np.testing.assert_array_equal(x.view(np.uint32), z.view(np.uint32))
        np.testing.assert_array_equal(y.view(np.uint32), z.view(np.uint32))


def _range_cases(fmt):
    # Operand pairs about the in-range bounds (RANGE_LO, RANGE_HI), with zeros, -0, inf,
    # NaN, subnormals and (tf32) values whose only set bits are the low 13 the tensor
    # core does not read.
    rng = np.random.default_rng(5)
    for ea, eb in ((-50, -50), (-51, -50), (63, 63), (63, 64), (0, 0), (-126, 0), (125, 1),
                   (125, 2)):
        a = (rng.standard_normal((16, 32)) + 3).astype(np.float32) * np.float32(2.0 ** ea)
        b = (rng.standard_normal((32, 16)) + 3).astype(np.float32) * np.float32(2.0 ** eb)
        a[0, :2] = [0.0, -0.0]
        yield a, b
        for special in (np.inf, np.nan, 1e-40, -1e-45):
            x = a.copy()
            x[1, 1] = special
            yield x, b
    tiny = np.full((16, 32), 1.0, np.float32)
    tiny.view(np.uint32)[0, 0] = 0x00001000  # below tf32's bits: zero to it, not bf16
    yield tiny, np.ones((32, 16), np.float32)
    yield np.zeros((16, 32), np.float32), np.full((32, 16), np.inf, np.float32)


@pytest.mark.parametrize("fmt", ["bf16", "tf32"])
def test_shared_executables_host_range_check_is_in_fp32_range(fmt):
    # The shared executables check the operands' range on the host (numpy) and run the
    # in-range or the general arithmetic: the check must be the cond's in_fp32_range,
    # bit for bit, or the two paths would be taken where the inline loop takes the other.
    from jaxwarp._src.arithmetic import datapath
    from jaxwarp._src.arithmetic.datapath_blocks import in_fp32_range
    from jaxwarp._src.gemm import k_loop
    from jaxwarp._src.gemm.matmul_tiles import Cfg

    k = {"bf16": 16, "tf32": 8}[fmt]
    cfg = Cfg(a_format=fmt, b_format=fmt, accumulator="f32", tile=(16, 16, k),
              instruction="wmma", arch="sm_90", mode="exact", promote_every=None,
              scaled=False, blockwise=False)
    seen = set()
    for a, b in _range_cases(fmt):
        a_op = np.asarray(to_operand(jnp.asarray(a), fmt))
        b_op = np.asarray(to_operand(jnp.asarray(b), fmt))
        want = bool(in_fp32_range(*datapath.range_values(jnp.asarray(a_op), jnp.asarray(b_op),
                                                         fmt, fmt)))
        got = k_loop._known(a_op, b_op, cfg)
        assert got == ("in_range" if want else "general"), (fmt, a, b)
        seen.add(got)
    assert seen == {"in_range", "general"}
    with jaxwarp.config.override(arith_in_range_path="off"):
        assert k_loop._known(a_op, b_op, cfg) is None


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="the CPU's shared executables")
@pytest.mark.parametrize("fmt", ["bf16", "f16"])
def test_shared_executables_chain_calls_and_groups(monkeypatch, fmt):
    # A group's k chain runs in calls of at most STEPS k steps (here 2: a k chain of 5
    # steps takes 3 calls, the accumulator carried between them), the blocks in groups of
    # 256, 64 and 16 (360 blocks: 256, 64, 16, 16, 16), operands in and out of fp32's
    # range: the bits of the
    # inline loop, every call on the shared executables' own device.
    from jaxwarp._src.gemm import k_loop

    monkeypatch.setattr(k_loop, "STEPS", 2)
    run, devices = k_loop._run, []

    def recorded(*args, **kwargs):
        out = run(*args, **kwargs)
        devices.append(out.devices())
        return out

    monkeypatch.setattr(k_loop, "_run", recorded)
    rng = np.random.default_rng(21)
    a = rng.standard_normal((320, 80)).astype(np.float32)
    b = rng.standard_normal((80, 288)).astype(np.float32)
    c = rng.standard_normal((320, 288)).astype(np.float32)
    wide = a * np.exp2(rng.integers(-140, 120, a.shape)).astype(np.float32)
    wide[0, :3] = [np.inf, np.nan, 1e-42]

    def f(a, b, c):
        return jaxwarp.matmul(a, b, c, operand_format=fmt)

    got = {}
    for mode in ("auto", "off"):
        with jaxwarp.config.override(gemm_shared=mode):
            jax.clear_caches()
            got[mode] = [np.asarray(jax.jit(f)(x, b, c)) for x in (a, wide)]
    jax.clear_caches()
    assert len(devices) == 2 * 5 * 3  # 2 products, 5 groups, 3 calls each
    assert {d for ds in devices for d in ds} == {k_loop.host_device()}
    for x, y in zip(got["auto"], got["off"], strict=True):
        np.testing.assert_array_equal(_bits(x), _bits(y))


def test_shared_executables_through_pure_callback():
    # On an accelerator the host's branch is a pure_callback, which hands the host JAX
    # arrays, not numpy views of the program's buffers (the CPU's buffer_callback): the
    # same host function, in and out of fp32's range, gives the inline loop's bits.
    from jaxwarp._src.gemm import k_loop
    from jaxwarp._src.gemm.matmul_tiles import Cfg

    cfg = Cfg(a_format="bf16", b_format="bf16", accumulator="f32", tile=(16, 16, 16),
              instruction="wmma", arch="sm_90", mode="exact", promote_every=None,
              scaled=False, blockwise=False)
    rng = np.random.default_rng(22)
    b = jnp.asarray(rng.standard_normal((48, 32)), jnp.bfloat16)
    c = jnp.asarray(rng.standard_normal((32, 32)), jnp.float32)
    host = functools.partial(k_loop._host, cfg=cfg, options=jaxwarp.config.snapshot())

    @jax.jit
    def via_pure_callback(a, b, c):
        return jax.pure_callback(host, jax.ShapeDtypeStruct(c.shape, c.dtype), a, b, c)

    for scale in (1.0, 2.0 ** 120):  # in range, then products beyond fp32's
        a = jnp.asarray(rng.standard_normal((32, 48)) * scale, jnp.bfloat16)
        np.testing.assert_array_equal(
            _bits(via_pure_callback(a, b, c)),
            _bits(jax.jit(functools.partial(k_loop.xla_loop, cfg=cfg))(a, b, c)))


@pytest.mark.skipif(jax.default_backend() != "gpu", reason="the fused kernel's GPU path")
@pytest.mark.parametrize("any_range_below", [None, 0])
def test_bf16_out_of_range_on_the_host_beside_the_kernel(monkeypatch, options,
                                                         any_range_below):
    # On a GPU a small bf16 product runs the kernel for any operand value (no range check;
    # any_range_below None, the default); a larger one (0: every size) the kernel where its
    # operands are in fp32's range and the shared executables on the host for the rest.
    # Both give the bits of XLA's general loop, for operands out of range.
    from jaxwarp._src.gemm import k_loop

    if any_range_below is not None:
        options(gemm_kernel_any_range_below=any_range_below)
    rng = np.random.default_rng(12)
    a = (rng.standard_normal((48, 64)) * np.exp2(rng.integers(-130, 126, (48, 64)))).astype(
        np.float32)
    b = (rng.standard_normal((64, 48)) * np.exp2(rng.integers(-130, 126, (64, 48)))).astype(
        np.float32)
    a[0, :4] = [np.inf, np.nan, 1e-40, -0.0]
    c = rng.standard_normal((48, 48)).astype(np.float32)
    blocks, calls = k_loop._blocks, []

    def counted(*args, **kwargs):
        calls.append(1)
        return blocks(*args, **kwargs)

    monkeypatch.setattr(k_loop, "_blocks", counted)

    def f(a, b, c):
        return jaxwarp.matmul(a, b, c, operand_format="bf16")

    got = {}
    for mode in ("auto", "off"):
        with jaxwarp.config.override(gemm_shared=mode):
            jax.clear_caches()
            got[mode] = (np.asarray(jax.jit(f)(a, b, c)),
                         np.asarray(jax.jit(f)(np.ones_like(a), np.full_like(b, 2.0), c)))
    jax.clear_caches()
    for x, y in zip(got["auto"], got["off"], strict=True):
        np.testing.assert_array_equal(x.view(np.uint32), y.view(np.uint32))
    # the host: the out-of-range product, in "auto" only, where a range check runs
    assert len(calls) == (0 if any_range_below is None else 1)


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


# --- instructions, fp8, promotion, scales ------------------------------------------------------

import os  # noqa: E402
import pathlib  # noqa: E402

import ml_dtypes  # noqa: E402
import reference_tc as R  # noqa: E402

from jaxwarp._src.arithmetic import datapath  # noqa: E402
from jaxwarp._src.gemm import matmul_tiles  # noqa: E402
from jaxwarp._src.gemm.matmul import to_operand  # noqa: E402
from jaxwarp._src.numerics import fp8, fp8_intrinsics  # noqa: E402

_BITS = {1: np.uint8, 2: np.uint16, 4: np.uint32}
_STORE = {"f32": np.float32, "f16": np.float16}
# A folder of H100 captures holding wgmma/wgmma_chain.npz and ptx/ptx_chain.npz.
CAPS = os.environ.get("JAXWARP_FP8_CHAINS")


def _bits(x):
    x = np.asarray(x)
    return x.view(_BITS[x.dtype.itemsize])


@pytest.fixture
def datapath_mma():
    """The datapath's ``mma`` (the tests compare matmul with it and with reference_tc)."""
    return datapath.mma


def _fp8_values(shape, seed, fmt="e4m3", dist="normal"):
    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 4, shape) if dist == "positive" else rng.normal(size=shape)
    return np.asarray(x.astype(fp8.FP8_FORMATS[fmt]), np.float32)


def _ref_chain(a, b, c, fa, fb, instruction, k, promote=None):
    """Plain-int reference of the whole product (a, b fp8 values as f32, c f32)."""
    P = R.preset_for(instruction, fa, f"m16n8k{k}")
    A = _bits(a.astype(fp8.FP8_FORMATS[fa])).tolist()
    B = _bits(b.astype(fp8.FP8_FORMATS[fb])).tolist()
    K = len(B)
    step = promote or K
    acc = c.astype(np.float32)
    out = acc if promote else None
    for p0 in range(0, K, step):
        d = (np.zeros_like(acc) if promote else acc).view(np.uint32).tolist()
        for k0 in range(p0, p0 + step, k):
            d = R.mma_tile([r[k0:k0 + k] for r in A], B[k0:k0 + k], d, fa, fb, "f32", "f32", P)
        d = np.asarray(d, np.uint32).view(np.float32)
        out = out + d if promote else d
    return out


def test_defaults_and_tables():
    assert matmul_tiles.DEFAULT_TILE["f16"] == (16, 16, 16)
    assert matmul_tiles.DEFAULT_TILE["tf32"] == (16, 16, 8)
    assert matmul_tiles.DEFAULT_TILE["e4m3"] == (64, 8, 32)
    assert matmul_tiles.DEFAULT_INSTRUCTION["e5m2"] == "wgmma"
    assert matmul_tiles.TILES["mma_sync"]["e4m3"][0] == (16, 8, 32)
    assert matmul_tiles.TILES["mma_sync"]["tf32"][0] == (16, 8, 8)
    assert matmul_tiles.TILES["wgmma"]["bf16"][0] == (64, 8, 16)
    a, b = _rand((16, 32), 0), _rand((32, 16), 1)
    np.testing.assert_array_equal(_MATMUL(a, b, operand_format="fp16"),
                                  _MATMUL(a, b))  # aliases keep working


def test_arch_defaults_to_the_instructions_target():
    # arch=None: tcgen05 runs on sm_100a (as jaxwarp.mx.matmul takes its instruction's
    # target), every other instruction on sm_90 (sm_90a for wgmma), the same bits as
    # naming them; an explicit target the instruction lacks is still an error.
    assert [matmul_tiles.default_arch(i) for i in ("wmma", "mma_sync", "wgmma", "tcgen05",
                                                   None)] == ["sm_90"] * 3 + ["sm_100a",
                                                                                "sm_90"]
    a, b = _rand((64, 64), 0), _rand((64, 16), 1)
    for kw, arch in ((dict(operand_format="e4m3", instruction="tcgen05"), "sm_100a"),
                     (dict(operand_format="e4m3", instruction="wgmma"), "sm_90"),
                     (dict(operand_format="bf16"), "sm_90")):
        np.testing.assert_array_equal(
            np.asarray(jaxwarp.matmul(a, b, **kw)).view(np.uint32),
            np.asarray(jaxwarp.matmul(a, b, arch=arch, **kw)).view(np.uint32))
    with pytest.raises(ValueError, match="needs sm_100a"):
        jaxwarp.matmul(a, b, operand_format="e4m3", instruction="tcgen05", arch="sm_90")


def test_fp8_operand_conversion_saturates():
    x = jnp.asarray([500.0, -1e9, 1.0, 0.3, jnp.inf], jnp.float32)
    to_jit = jax.jit(to_operand, static_argnums=1)
    q = to_jit(x, "e4m3")
    assert q.dtype == ml_dtypes.float8_e4m3fn
    np.testing.assert_array_equal(np.asarray(q, np.float32), [448, -448, 1, 0.3125, 448])
    q = to_jit(x, "e5m2", scale=jnp.float32(2.0))
    np.testing.assert_array_equal(np.asarray(q, np.float32)[:3], [256, -57344, 0.5])


@pytest.mark.parametrize("instruction,fmt,k", [("wgmma", "e4m3", 32), ("mma_sync", "e5m2", 32),
                                               ("mma_sync", ("e5m2", "e4m3"), 32),
                                               ("wgmma", ("e4m3", "e5m2"), 32)])
def test_fp8_chain_equals_reference(datapath_mma, instruction, fmt, k):
    fa, fb = (fmt, fmt) if isinstance(fmt, str) else fmt
    M = 64 if instruction == "wgmma" else 16
    a, b = _fp8_values((M, 128), 1, fa), _fp8_values((128, 8), 2, fb)
    c = _rand((M, 8), 3)
    got = jax.jit(functools.partial(jaxwarp.matmul, operand_format=fmt,
                                    instruction=instruction))(a, b, c)
    want = _ref_chain(np.asarray(a), np.asarray(b), np.asarray(c), fa, fb, instruction, k)
    np.testing.assert_array_equal(_bits(got), _bits(want))


def test_wgmma_k4096_equals_reference(datapath_mma):
    # One row, two columns (the matrix is padded to wgmma's 64 rows and n = 8).
    a, b = _fp8_values((1, 4096), 4, dist="positive"), _fp8_values((4096, 2), 5, dist="positive")
    c = np.zeros((1, 2), np.float32)
    got = _MATMUL(a, b, c, operand_format="e4m3", instruction="wgmma")
    want = _ref_chain(a, b, c, "e4m3", "e4m3", "wgmma", 32)
    np.testing.assert_array_equal(_bits(got), _bits(want))
    exact = np.asarray(a, np.float64) @ np.asarray(b, np.float64)
    assert np.all(np.asarray(got) < exact)  # the 14-bit accumulator truncates


def test_promotion_equals_reference(datapath_mma):
    a, b = _fp8_values((1, 512), 6, dist="positive"), _fp8_values((512, 2), 7, dist="positive")
    c = np.full((1, 2), 3.0, np.float32)
    got = _MATMUL(a, b, c, operand_format="e4m3", promote_every=128)
    want = _ref_chain(a, b, c, "e4m3", "e4m3", "wgmma", 32, promote=128)
    np.testing.assert_array_equal(_bits(got), _bits(want))
    # A last interval shorter than promote_every (K = 512 = 3 * 160 + 32).
    got = _MATMUL(a, b, c, operand_format="e4m3", promote_every=160)
    p = [_ref_chain(a[:, i:i + 160], b[i:i + 160], np.zeros_like(c), "e4m3", "e4m3", "wgmma", 32)
         for i in range(0, 512, 160)]
    want = ((((c + p[0]) + p[1]) + p[2]) + p[3]).astype(np.float32)
    np.testing.assert_array_equal(_bits(got), _bits(want))


# Slow: the scaled product's bits are checked by test_scaled_epilogue_keeps_subnormals.
@pytest.mark.slow
def test_scales(datapath_mma):
    rng = np.random.default_rng(8)
    a = jnp.asarray(rng.normal(size=(16, 64)) * 1e-3, jnp.float32)
    b = jnp.asarray(rng.normal(size=(64, 8)) * 50, jnp.float32)
    c = _rand((16, 8), 9)
    sa, sb = jnp.float32(1e-3 / 64), jnp.float32(0.5)
    f = jax.jit(lambda a, b, c, sa, sb: jaxwarp.matmul(
        a, b, c, operand_format="e4m3", instruction="mma_sync", a_scale=sa, b_scale=sb))
    got = f(a, b, c, sa, sb)
    qa = np.asarray(to_operand(a, "e4m3", sa), np.float32)
    qb = np.asarray(to_operand(b, "e4m3", sb), np.float32)
    t = _ref_chain(qa, qb, np.zeros((16, 8), np.float32), "e4m3", "e4m3", "mma_sync", 32)
    want = t * (sa * sb) + np.asarray(c)
    np.testing.assert_array_equal(_bits(got), _bits(np.asarray(want, np.float32)))
    ref = np.asarray(a, np.float64) @ np.asarray(b, np.float64) + np.asarray(c)
    assert np.max(np.abs(np.asarray(got) - ref)) < 0.1 * np.max(np.abs(ref))
    # Saturation: without a scale the large b saturates at 448 (and a mostly flushes).
    assert np.asarray(to_operand(b * 100, "e4m3"), np.float32).max() == 448


@pytest.mark.parametrize("rolled", [False, True])
def test_scale_division_is_correctly_rounded(rolled):
    # to_operand's x / scale is IEEE fp32 division rounded once (on the bits, subnormal
    # operands and results kept). Reference: the float64 quotient rounded to float32
    # (double rounding is innocuous for division when 53 >= 2 * 24 + 2). rolled: the
    # division's steps as a loop (the NVFP4 quantizer's), the same bits.
    from jaxwarp._src.scaling.tensor_scale import divide_rn

    rng = np.random.default_rng(30)
    n = 20000
    x = (rng.standard_normal(n) * 2.0 ** rng.uniform(-149, 126, n)).astype(np.float32)
    y = (rng.standard_normal(n) * 2.0 ** rng.uniform(-149, 126, n)).astype(np.float32)
    sp = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -3e-39, 3.4e38, 1.0, 3.0,
                   448.0, 2.0 ** -126], np.float32)
    sx, sy = np.meshgrid(sp, sp)
    x, y = np.concatenate([x, sx.ravel(), x[:50]]), np.concatenate([y, sy.ravel(), x[:50]])
    got = np.asarray(jax.jit(functools.partial(divide_rn, rolled=rolled))(x, y))
    with np.errstate(all="ignore"):
        want = (x.astype(np.float64) / y.astype(np.float64)).astype(np.float32)
    nan = np.isnan(want)
    assert np.isnan(got[nan]).all()
    np.testing.assert_array_equal(_bits(got[~nan]), _bits(want[~nan]))
    # to_operand divides with it: e5m2(rn32(x / s)).
    s = np.float32(0.3)
    v = x[:1000]
    with np.errstate(all="ignore"):
        q = (v.astype(np.float64) / np.float64(s)).astype(np.float32)
    want = np.asarray(jax.jit(fp8_intrinsics.float_to_fp8, static_argnums=(1, 2))(
        q, "e5m2", True))
    got = jax.jit(to_operand, static_argnums=1)(v, "e5m2", s)
    np.testing.assert_array_equal(_bits(got), _bits(want))


def test_scale_product_is_correctly_rounded():
    # multiply_rn (a_scale * b_scale, T * s) is IEEE fp32 multiplication rounded once, on
    # the bits: subnormal operands and results kept (XLA's CPU flushes them). Reference:
    # the float64 product (exact: 48 bits) rounded once to float32.
    from jaxwarp._src.scaling.tensor_scale import multiply_rn

    rng = np.random.default_rng(31)
    n = 20000
    x = (rng.standard_normal(n) * 2.0 ** rng.uniform(-149, 126, n)).astype(np.float32)
    y = (rng.standard_normal(n) * 2.0 ** rng.uniform(-149, 126, n)).astype(np.float32)
    x[:5000] = (rng.standard_normal(5000) * 2.0 ** rng.uniform(-100, 0, 5000)).astype(np.float32)
    y[:5000] = (rng.standard_normal(5000) * 2.0 ** rng.uniform(-60, 0, 5000)).astype(np.float32)
    sp = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -3e-39, 3.4e38, 1.0, 3.0],
                  np.float32)
    sx, sy = np.meshgrid(sp, sp)
    x, y = np.concatenate([x, sx.ravel()]), np.concatenate([y, sy.ravel()])
    got = np.asarray(jax.jit(multiply_rn)(x, y))
    with np.errstate(all="ignore"):
        want = (x.astype(np.float64) * y.astype(np.float64)).astype(np.float32)
    nan = np.isnan(want)
    assert np.isnan(got[nan]).all()
    np.testing.assert_array_equal(_bits(got[~nan]), _bits(want[~nan]))


def test_scaled_epilogue_keeps_subnormals(datapath_mma):
    # Tiny scales: s = a_scale * b_scale and T * s are subnormal, C subnormal too. Every
    # step is an IEEE fp32 operation rounded once (a float64 reference rounded once to
    # float32 per step; double rounding is innocuous for +, *, / at 53 >= 2 * 24 + 2).
    rng = np.random.default_rng(32)
    a = (rng.normal(size=(16, 64)) * 2.0 ** -70).astype(np.float32)
    b = (rng.normal(size=(64, 8)) * 2.0 ** -66).astype(np.float32)
    c = (rng.normal(size=(16, 8)) * 2.0 ** -128).astype(np.float32)
    sa, sb = np.float32(1.3 * 2.0 ** -72), np.float32(1.7 * 2.0 ** -68)
    got = jax.jit(lambda a, b, c, sa, sb: jaxwarp.matmul(
        a, b, c, operand_format="e4m3", instruction="mma_sync", a_scale=sa, b_scale=sb))(
        a, b, c, sa, sb)
    f64 = lambda v: np.asarray(v, np.float64)  # noqa: E731
    qa = (f64(a) / f64(sa)).astype(np.float32)
    qb = (f64(b) / f64(sb)).astype(np.float32)
    # cvt.rn.satfinite.e4m3 of these finite values: clamp to +-448, round to nearest even.
    qa = np.clip(qa, -448, 448).astype(ml_dtypes.float8_e4m3fn).astype(np.float32)
    qb = np.clip(qb, -448, 448).astype(ml_dtypes.float8_e4m3fn).astype(np.float32)
    t = _ref_chain(qa, qb, np.zeros((16, 8), np.float32), "e4m3", "e4m3", "mma_sync", 32)
    s = (f64(sa) * f64(sb)).astype(np.float32)
    assert 0 < s < np.finfo(np.float32).tiny  # a subnormal scale
    p = (f64(t) * f64(s)).astype(np.float32)
    want = (f64(p) + f64(c)).astype(np.float32)
    assert np.any((want != 0) & (np.abs(want) < np.finfo(np.float32).tiny))
    np.testing.assert_array_equal(_bits(got), _bits(want))


# Slow: fast mode is checked by test_fast_mode_is_a_rounded_dot by default.
@pytest.mark.slow
def test_fast_mode_fp8():
    a, b = _fp8_values((64, 64), 10), _fp8_values((64, 16), 11)
    got = jaxwarp.matmul(a, b, operand_format="e4m3", mode="fast", promote_every=32)
    np.testing.assert_allclose(got, np.asarray(a, np.float64) @ np.asarray(b, np.float64),
                               rtol=1e-6, atol=1e-5)


# Slow: fp8 gradients' bits are checked by test_fp8_gradients_use_power_of_two_scales.
@pytest.mark.slow
def test_fp8_gradients(datapath_mma):
    a, b = _rand((16, 32), 12), _rand((32, 8), 13)
    g = _rand((16, 8), 14)
    f = functools.partial(jaxwarp.matmul, operand_format="e4m3", instruction="mma_sync")
    _, vjp = jax.vjp(lambda a, b, sa: f(a, b, a_scale=sa), a, b, jnp.float32(0.01))
    da, db, dsa = vjp(g)
    assert da.shape == a.shape and db.shape == b.shape and float(dsa) == 0.0
    want = np.asarray(g, np.float64) @ np.asarray(b, np.float64).T
    assert np.max(np.abs(np.asarray(da) - want)) < 0.15 * np.max(np.abs(want))


def _pow2_scale_exponent(x, fmt):
    """The largest k with amax(|x|) * 2**k <= max_value(fmt), in exact float64 (powers
    of two), clamped to [-126, 126]; 0 for a zero amax."""
    amax = float(np.max(np.abs(np.asarray(x, np.float64))))
    if amax == 0:
        return 0
    fmax = float(ml_dtypes.finfo(fp8.FP8_FORMATS[fmt]).max)
    k = int(np.floor(np.log2(fmax / amax)))
    while amax * 2.0 ** (k + 1) <= fmax:
        k += 1
    while amax * 2.0 ** k > fmax:
        k -= 1
    return max(-126, min(126, k))


def _ref_scaled_product(x, y, fx, fy):
    """x @ y with power-of-two current scales: x * 2**kx exact in float64, rounded once to
    fp8 (via float32, exact there); the tensor core chain; times 2**-(kx + ky) exact in
    float64, rounded once to float32."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    kx, ky = _pow2_scale_exponent(x, fx), _pow2_scale_exponent(y, fy)
    qx = (x * 2.0 ** kx).astype(np.float32).astype(fp8.FP8_FORMATS[fx])
    qy = (y * 2.0 ** ky).astype(np.float32).astype(fp8.FP8_FORMATS[fy])
    t = _ref_chain(qx.astype(np.float32), qy.astype(np.float32),
                   np.zeros((x.shape[0], y.shape[1]), np.float32), fx, fy, "mma_sync", 32)
    return (t.astype(np.float64) * 2.0 ** -(kx + ky)).astype(np.float32)


@pytest.mark.parametrize("fa,fb,scale", [("e4m3", "e4m3", 1.0), ("e5m2", "e4m3", 1e-30),
                                         ("e4m3", "e5m2", 1e30)])
def test_fp8_gradients_use_power_of_two_scales(datapath_mma, fa, fb, scale):
    # The backward products scale each operand by 2**k (k from its amax, the largest with
    # amax * 2**k <= max_value), exactly, and unscale the tensor core's result once: the
    # bits equal a float64 reference rounded once (no float division or multiply, so the
    # same on every backend). Tiny / huge gradients need scale exponents near the clamp.
    a, b = _rand((16, 64), 20), _rand((64, 8), 21)
    g = _rand((16, 8), 22, scale)
    f = functools.partial(jaxwarp.matmul, operand_format=(fa, fb), instruction="mma_sync")
    _, vjp = jax.vjp(jax.jit(f), a, b)
    da, db = vjp(g)
    np.testing.assert_array_equal(_bits(da), _bits(_ref_scaled_product(g, b.T, fa, fb)))
    np.testing.assert_array_equal(_bits(db), _bits(_ref_scaled_product(a.T, g, fa, fb)))
    # A zero gradient keeps the scale 2**0 and gives zero gradients.
    da0, db0 = vjp(jnp.zeros_like(g))
    assert not np.any(np.asarray(da0)) and not np.any(np.asarray(db0))
    # No float division anywhere in the backward program (nested jaxprs included).
    from jax.extend import core as jcore

    def eqns(jaxpr):
        for e in jaxpr.eqns:
            yield e
            for sub in jcore.jaxprs_in_params(e.params):
                yield from eqns(sub)

    seen = list(eqns(jax.make_jaxpr(vjp)(g).jaxpr))
    assert len(seen) > 50
    assert not [e for e in seen if e.primitive.name == "div"
                and jnp.issubdtype(e.outvars[0].aval.dtype, jnp.floating)]


def test_new_instruction_gradients_16bit(datapath_mma):
    a, b = _rand((16, 16), 15), _rand((16, 8), 16)
    g = _rand((16, 8), 17)
    f = functools.partial(_MATMUL, operand_format="bf16", instruction="mma_sync")
    da, db = jax.jit(lambda a, b, g: jax.vjp(f, a, b)[1](g))(a, b, g)
    np.testing.assert_array_equal(da, f(g, b.T, tile=(16, 8, 8)))
    np.testing.assert_array_equal(db, f(a.T, g, tile=(16, 8, 16)))


def test_instruction_errors():
    a, b = _rand((64, 64), 0), _rand((64, 64), 1)
    bad = [
        (dict(instruction="hmma"), "instruction='hmma' is not supported; allowed: "
                                   r"\('wmma', 'mma_sync', 'wgmma', 'tcgen05'\)"),
        (dict(operand_format="e4m3", instruction="wmma"),
         "instruction='wmma' has no operand_format='e4m3'.*'mma_sync' or 'wgmma'"),
        (dict(operand_format="f64", instruction="wgmma"), "instruction='wgmma' has no"),
        (dict(operand_format=("e4m3", "bf16")), "mixes formats"),
        (dict(operand_format=("e4m3", "fp8")), "operand_format=.fp8. is not supported"),
        (dict(operand_format=("f16", "bf16")), "mixes formats; only the fp8"),
        (dict(operand_format="e4m3", tile=(16, 8, 32)),
         r"tile=\(16, 8, 32\) is not a wgmma shape.*\(64, n, 32\)"),
        (dict(operand_format="e4m3", instruction="mma_sync", tile=(16, 8, 8)),
         r"not a mma_sync shape for operand_format='e4m3'; allowed: \[\(16, 8, 32\)"),
        (dict(operand_format="e4m3", accumulator="f64"), "accumulator='f64' is not supported"),
        (dict(operand_format="e4m3", promote_every=48), "promote_every=48 must be a positive "
                                                        "multiple of the instruction's k=32"),
        (dict(promote_every=0), "promote_every=0 must be a positive multiple"),
        (dict(operand_format="e4m3", accumulator="f16", promote_every=64),
         "needs accumulator='f32'"),
        (dict(a_scale=2.0), "per-tensor scales of the fp8 formats"),
        (dict(operand_format="e4m3", a_scale=jnp.ones(2)), "a_scale must be a scalar"),
        (dict(operand_format="e4m3", instruction="wgmma", arch="sm_80"), "needs sm_90"),
    ]
    for kw, msg in bad:
        with pytest.raises(ValueError, match=msg):
            jaxwarp.matmul(a, b, **kw)
        with pytest.raises(ValueError, match=msg):
            jax.jit(lambda a, b, kw=kw: jaxwarp.matmul(a, b, **kw))(a, b)
    with pytest.raises(TypeError, match="promote_every must be a Python int"):
        jaxwarp.matmul(a, b, promote_every=32.0)
    with pytest.raises(ValueError, match="K=40 is not a multiple of the tile's 32"):
        jaxwarp.matmul(_rand((64, 40), 0), _rand((40, 8), 1), operand_format="e4m3")
    with pytest.raises(ValueError, match="M=8 is not a multiple of the tile's 16"):
        jaxwarp.matmul(_rand((8, 32), 0), _rand((32, 8), 1), operand_format="e4m3",
                       instruction="mma_sync")


# Slow: padding is checked by default by test_wgmma_k4096_equals_reference (1 x 2 padded).
@pytest.mark.slow
def test_wgmma_pads_rows_and_columns(datapath_mma):
    a, b = _fp8_values((64, 64), 18), _fp8_values((64, 16), 19)
    full = jaxwarp.matmul(a, b, operand_format="e5m2")
    part = jaxwarp.matmul(a[:5], b[:, :3], operand_format="e5m2")
    np.testing.assert_array_equal(part, full[:5, :3])


def _chain_cases(path, prefix):
    if not path.exists():
        return []
    z = np.load(path)
    return [(path, k[:-2]) for k in z.files if k.startswith(prefix) and k.endswith("/A")
            and ("e4m3" in k or "e5m2" in k) and "f32f32" in k]


_HW = [] if CAPS is None else (
    _chain_cases(pathlib.Path(CAPS) / "wgmma" / "wgmma_chain.npz", "chain/wgmma/")
    + _chain_cases(pathlib.Path(CAPS) / "ptx" / "ptx_chain.npz", "chain/ptx/"))


@pytest.mark.skipif(not _HW, reason="no fp8 hardware chains: set JAXWARP_FP8_CHAINS to a "
                    "folder of captures (wgmma/wgmma_chain.npz, ptx/ptx_chain.npz)")
@pytest.mark.parametrize("path,name", _HW, ids=[n.split("/")[-1] for _, n in _HW])
def test_hardware_fp8_chains(path, name):
    z = np.load(path)
    fa, fb, _, shape = name.split("/")[-1].split(".")[:4]
    k = int(shape.split("k")[1].split("x")[0])
    instruction = "wgmma" if "/wgmma/" in name else "mma_sync"
    A = z[name + "/A"].view(fp8.FP8_FORMATS[fa]).astype(np.float32)
    B = z[name + "/B"].view(fp8.FP8_FORMATS[fb]).astype(np.float32)
    C, D = z[name + "/C"].view(np.float32), z[name + "/D"]
    f = jax.jit(jax.vmap(functools.partial(
        jaxwarp.matmul, operand_format=(fa, fb), instruction=instruction,
        tile=(A.shape[1], 8, k))))
    got = _bits(f(A, B, C))
    assert got.size == D.size and np.array_equal(got, D.view(np.uint32)), \
        f"{np.sum(got != D.view(np.uint32))}/{D.size} elements differ"


def test_fp8_arrays_are_used_as_they_are():
    # Data already in an fp8 dtype (no scale) goes to the tensor core unchanged, as in a
    # CUDA program: an e5m2 infinity stays infinite; a float32 infinity is converted by
    # cvt.rn.satfinite and saturates.
    inf8 = jnp.full((16, 32), jnp.inf, jnp.float8_e5m2)
    assert bool(jnp.isinf(to_operand(inf8, "e5m2")).all())
    assert float(jax.jit(to_operand, static_argnums=1)(jnp.float32(jnp.inf), "e5m2")) == 57344.0
    e4 = jax.lax.bitcast_convert_type(jnp.arange(256, dtype=jnp.uint8), jnp.float8_e4m3fn)
    assert to_operand(e4, "e4m3") is e4
    ones = jnp.ones((32, 16), jnp.float8_e5m2)
    d = _MATMUL(inf8, ones, operand_format="e5m2", instruction="mma_sync")
    assert bool(jnp.isinf(d).all())


def _sm70_case():
    r = np.random.default_rng(20)
    a = jnp.asarray(r.normal(size=(16, 16)) * 2.0 ** r.integers(-12, 12, (16, 16)), jnp.float32)
    b = _rand((16, 8), 21)
    ah, bh = a.astype(jnp.float16), b.astype(jnp.float16)
    want = jnp.zeros((16, 8), jnp.float32)
    for kk in range(0, 16, 4):  # the kernel: one m8n8k4 per (8 x 8) tile and k step
        want = jnp.concatenate([jaxwarp.mma_sync_ptx_logical(
            "m8n8k4.row.col.f32.f16.f16.f32", ah[i:i + 8, kk:kk + 4], bh[kk:kk + 4],
            want[i:i + 8], arch="sm_70") for i in (0, 8)])
    return a, b, want, functools.partial(jaxwarp.matmul, instruction="mma_sync", arch="sm_70")


def test_sm70_mma_sync_chains_m8n8k4():
    # Volta's only mma.sync shape is m8n8k4: matmul's default tile there, bit for bit a
    # chain of m8n8k4 instructions along K; other shapes name the targets that have them.
    assert [matmul_tiles.default_tile("mma_sync", "f16", t) for t in ("sm_70", "sm_75", "sm_80")] \
        == [(8, 8, 4), (16, 8, 8), (16, 8, 16)]
    a, b, want, f = _sm70_case()
    np.testing.assert_array_equal(_bits(jax.jit(f)(a, b)), _bits(want))
    for kw, msg in ((dict(operand_format="bf16"), "bf16 operands needs sm_80 or newer"),
                    (dict(tile=(16, 8, 16)), r"k = 16 \(m16n8k16\) needs sm_80 or newer")):
        with pytest.raises(ValueError, match=msg):
            f(a, b, **kw)


@pytest.mark.slow
def test_sm70_mma_sync_eager_and_emulate_gradients():
    a, b, want, f = _sm70_case()
    np.testing.assert_array_equal(_bits(f(a, b)), _bits(want))
    assert not np.array_equal(_bits(want), _bits(f(a, b, arch="sm_80")))  # Volta's own
    g = _rand((16, 8), 22)
    em = jaxwarp.emulate(lambda x, y: jnp.vdot(g, x @ y), operand_format="f16",
                         instruction="mma_sync", arch="sm_70")
    da, db = jax.grad(em, argnums=(0, 1))(a, b)  # through the same tensor core
    np.testing.assert_array_equal(_bits(da), _bits(f(g, b.T)))
    np.testing.assert_array_equal(_bits(db), _bits(f(a.T, g)))
