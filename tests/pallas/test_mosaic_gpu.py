"""Mosaic GPU kernels (JAX's ``jax.experimental.pallas.ops.gpu``) run on a CPU in JAX's GPU
interpret mode with every wgmma through jaxwarp's exact chain (``pallas.mosaic_gpu``).

The hardware test compares with ``hopper_matmul_mgpu`` run on an H200 (JAX 0.11.2); the
other kernels are consistency checks against the chain of ``jaxwarp.matmul(...,
instruction="wgmma")`` that their code implies, not hardware records.
"""

import dataclasses
import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxwarp._src.pallas import mosaic_gpu as mg
from jaxwarp._src.pallas.model import dtype_format

jax_gpu_interpret = pytest.importorskip("jax._src.pallas.mosaic_gpu.interpret.params")
hm = pytest.importorskip("jax.experimental.pallas.ops.gpu.hopper_matmul_mgpu")

SAMPLE = pathlib.Path(__file__).parent.parent / "data" / "pallas_sample.npz"
KEY = "pallas_mgpu/f16_128x128x64/"


@dataclasses.dataclass(frozen=True)
class Model:
    """A stand-in for the pallas layer's model record."""

    operand_format: str | None = None
    arch: str = "sm_90a"
    mode: str = "exact"
    instruction: str | None = None
    promote_every: int | None = None


def kernel_eqn(fn, *args, num_sms=2):
    """The Mosaic GPU equation of fn's jaxpr (traced with the target's SM count)."""
    from jax.extend import core as jcore

    with mg.target_sm_count(num_sms):
        closed = jax.make_jaxpr(fn)(*args)

    def find(jaxpr):  # entering wrappers (custom_vjp_call, jit) as emulate does
        for e in jaxpr.eqns:
            if mg.is_mosaic_gpu(e):
                yield e
            else:
                for sub in jcore.jaxprs_in_params(e.params):
                    yield from find(sub)

    eqns = list(find(closed.jaxpr))
    assert len(eqns) == 1, [e.primitive.name for e in closed.jaxpr.eqns]
    return eqns[0]


def run(fn, *args, model=Model(), num_sms=2):
    return mg.run_kernel(kernel_eqn(fn, *args, num_sms=num_sms), list(args), model)


def hopper(config, c=False):
    if c:
        return lambda a, b, c_: hm.matmul(a, b, c_, config)
    return lambda a, b: hm.matmul(a, b, None, config)


def chain(a, b, c=None, acc_dtype=jnp.float32, **kw):
    """What one wgmma chain over all of K gives (the kernel's k loop continues the same
    chain from tile to tile), rounded to the kernel's output dtype."""
    fmt = dtype_format(a.dtype)
    acc = jnp.zeros((a.shape[0], b.shape[1]), acc_dtype) if c is None else c
    return mg.wgmma_chain(acc, a, b, operand_format=fmt, accumulator="f32", **kw)


def bits(x):
    x = np.asarray(x)
    return x.view({2: np.uint16, 4: np.uint32, 1: np.uint8}[x.dtype.itemsize])


def load_sample():
    if not SAMPLE.exists():
        pytest.skip(f"{SAMPLE.name} is absent (the capture helper writes it)")
    d = np.load(SAMPLE)
    if KEY + "a" not in d.files:
        pytest.skip(f"{SAMPLE.name} has no {KEY!r} record")
    meta = json.loads(str(d[KEY + "meta"]))
    return (d[KEY + "a"].view(np.float16), d[KEY + "b"].view(np.float16), d[KEY + "out"],
            meta)


@pytest.mark.slow
def test_hardware_sample_slice():
    """hopper_matmul_mgpu on the first 128 x 128 output block equals the H200's bits.

    Output tiles are independent and each element's arithmetic is the k16 chain of
    wgmma from zero, the same for any tile m / n: tile_m=64 keeps two m iterations (one
    output tile makes XLA's CPU compiler fold the kernel's planar_snake down to a
    remainder by zero, a SIGFPE in JAX 0.10.2); tile_k and max_concurrent_steps are the
    record's."""
    a, b, out, meta = load_sample()
    a, b, want = a[:128], b[:, :128], out[:128, :128]
    assert (meta["tile_k"], meta["max_concurrent_steps"]) == (64, 2)
    cfg = hm.TuningConfig(tile_m=64, tile_n=64, tile_k=meta["tile_k"],
                          max_concurrent_steps=meta["max_concurrent_steps"])
    got, = run(hopper(cfg), jnp.asarray(a), jnp.asarray(b))
    assert got.dtype == jnp.float16
    np.testing.assert_array_equal(bits(got), want)
    # the sample is one the model matters for: numpy's f32 matmul differs from it
    npm = (a.astype(np.float32) @ b.astype(np.float32)).astype(np.float16)
    assert (bits(npm) != want).sum() > 0


def test_model_is_used():
    """Operands whose exact wgmma chain and numpy's f32 matmul differ: the kernel gives
    the chain's bits, not those of JAX's plain interpret mode (np.matmul)."""
    a, b = random((64, 256), jnp.float16, 1), random((256, 32), jnp.float16, 2)
    kernel = one_wgmma(64, 32, 256, jnp.float16)
    got, = run(kernel, a, b)
    want = chain(a, b)
    np.testing.assert_array_equal(bits(got), bits(want))
    npm = np.asarray(a, np.float32) @ np.asarray(b, np.float32)
    assert (bits(npm) != bits(want)).sum() > 0
    # the kernel itself untouched (no global patch left behind): JAX's interpret mode
    # still gives np.matmul's bits
    eqn = kernel_eqn(kernel, a, b)
    inner = mg._wrapped_kernel(eqn).jaxpr.eqns[0]
    params = dict(inner.params, interpret=jax_gpu_interpret.InterpretGPUParams())
    plain, = inner.primitive.bind(a, b, **params)
    np.testing.assert_array_equal(bits(plain), bits(npm))


# --- Consistency with the chain of wgmma that each kernel's code implies (not hardware).


def random(shape, dtype, seed):
    x = np.random.default_rng(seed).standard_normal(shape)
    return jnp.asarray(x, jnp.float32).astype(dtype)


SLOW = pytest.mark.slow


@pytest.mark.parametrize("dtype", [pytest.param(jnp.float16, marks=SLOW),
                                   pytest.param(jnp.bfloat16, marks=SLOW)])
def test_hopper_without_c(dtype):
    a, b = random((128, 128), dtype, 2), random((128, 128), dtype, 3)
    cfg = hm.TuningConfig(tile_m=64, tile_n=64, tile_k=64, max_concurrent_steps=2)
    got, = run(hopper(cfg), a, b)
    assert got.dtype == dtype
    np.testing.assert_array_equal(bits(got), bits(chain(a, b).astype(dtype)))


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [jnp.float16, pytest.param(jnp.bfloat16, marks=SLOW)])
def test_hopper_with_c(dtype):
    """With C the kernel's epilogue adds C to the rounded product in the output dtype
    (``out_smem += acc``: one rounding of the sum of two f16 / bf16 numbers)."""
    a, b = random((128, 128), dtype, 4), random((128, 128), dtype, 5)
    c = random((128, 128), dtype, 6)
    cfg = hm.TuningConfig(tile_m=64, tile_n=64, tile_k=64, max_concurrent_steps=2)
    got, = run(hopper(cfg, c=True), a, b, c)
    want = (chain(a, b).astype(dtype).astype(jnp.float32) + c.astype(jnp.float32))
    np.testing.assert_array_equal(bits(got), bits(want.astype(dtype)))


@pytest.mark.slow
def test_hopper_mixed_type():
    """int8 A converted to bf16 in registers, then wgmma with A from registers."""
    mixed = pytest.importorskip(
        "jax.experimental.pallas.ops.gpu.hopper_mixed_type_matmul_mgpu")
    a = jnp.asarray(np.random.default_rng(7).integers(-128, 128, (128, 128)), jnp.int8)
    b = random((128, 128), jnp.bfloat16, 8)
    cfg = mixed.TuningConfig(tile_m=64, tile_n=64, tile_k=64, max_concurrent_steps=2)
    got, = run(lambda a, b: mixed.mixed_matmul_kernel(a, b, out_dtype=jnp.bfloat16,
                                                       config=cfg), a, b)
    want = chain(a.astype(jnp.bfloat16), b).astype(jnp.bfloat16)
    np.testing.assert_array_equal(bits(got), bits(want))


def ragged_chain(lhs, rhs, group_sizes):
    """Row r of ragged_dot: lhs[r] @ rhs[group of r], one wgmma chain, rounded to f16."""
    g_of_row = np.repeat(np.arange(rhs.shape[0]), np.asarray(group_sizes))
    want = np.zeros((lhs.shape[0], rhs.shape[2]), lhs.dtype)
    for g in range(rhs.shape[0]):
        rows = g_of_row == g
        want[rows] = np.asarray(chain(lhs[rows], rhs[g]).astype(lhs.dtype))
    return want


@pytest.mark.slow
@pytest.mark.parametrize("transpose_rhs", [pytest.param(False, marks=SLOW), True])
def test_ragged_dot(transpose_rhs):
    """ragged_dot_mgpu (its grid is 132 SMs, fixed): rows of three groups, the rhs read
    transposed (plgpu.transpose_ref) or not."""
    rd = pytest.importorskip("jax.experimental.pallas.ops.gpu.ragged_dot_mgpu")
    lhs = random((256, 128), jnp.float16, 9)
    rhs = random((3, 128, 128), jnp.float16, 10)
    group_sizes = jnp.array([100, 60, 96], jnp.int32)
    r = jnp.swapaxes(rhs, 1, 2) if transpose_rhs else rhs

    def f(gs, lhs, r):
        return rd.ragged_dot(lhs, r, group_sizes=gs, block_m=64, block_n=64, block_k=64,
                             max_concurrent_steps=2, grid_block_n=1,
                             transpose_rhs=transpose_rhs)

    got, = run(f, group_sizes, lhs, r)
    np.testing.assert_array_equal(bits(got), bits(ragged_chain(lhs, rhs, group_sizes)))


@pytest.mark.slow
def test_attention(monkeypatch):
    """attention_mgpu (forward, with the lse residual): its run_state accumulator
    (``plgpu.ACC.init``) and register operand (p16) included. With q = 0 every score is
    0 and p = exp2(0) = 1 on any GPU or CPU, so out = (ones @ v) / kv_len is products
    only: one wgmma chain over kv from zero (the kernel's kv loop continues it), divided
    by a power of two. For general q, exp2 (ex2.approx.ftz under approx_math=True on the
    GPU, XLA's exp2 here), the division, the row sums' order and lse's log differ between
    GPU and CPU; the QK and PV products are exact either way."""
    import types

    am = pytest.importorskip("jax.experimental.pallas.ops.gpu.attention_mgpu")
    # the kernel asserts JAX's CUDA plugin; the version only gates causal masking
    monkeypatch.setattr(am, "cuda_versions",
                        types.SimpleNamespace(cuda_runtime_get_version=lambda: 12090))
    q = jnp.zeros((1, 128, 1, 64), jnp.float16)
    k = random((1, 128, 1, 64), jnp.float16, 25)
    # v: +-2048 pairs in every k16 block and small values: the chain's alignment drops
    # low bits that numpy's f32 sum keeps (60 of the 64 outputs differ from it)
    v = np.random.default_rng(26).standard_normal((128, 64)) * 0.01
    v[0::16], v[1::16] = 2048, -2048
    v = jnp.asarray(v, jnp.float16)[None, :, None, :]
    cfg = am.TuningConfig(block_q=64, block_kv=64, max_concurrent_steps=2)
    out, lse = run(lambda q, k, v: am.attention(q, k, v, cfg, save_residuals=True),
                   q, k, v)
    assert out.shape == q.shape and lse.shape == (1, 1, 128)
    ones = jnp.ones((128, 128), jnp.float16)
    want = (chain(ones, v[0, :, 0]) / 128).astype(jnp.float16)
    np.testing.assert_array_equal(bits(out[0, :, 0]), bits(want))
    npm = (np.asarray(v[0, :, 0], np.float32).sum(0) / 128).astype(np.float16)
    assert (bits(npm) != bits(want[0])).any()


# --- A small kernel of one wgmma, for the formats and the errors.


def one_wgmma(m, n, k, dtype, acc_dtype=jnp.float32, extra=None, b_view=None,
              b_shape=None):
    """A plgpu.kernel computing ``a @ b`` with one plgpu.wgmma (operands in SMEM; the rhs
    read as ``b_view(b_smem)`` if given, b of shape ``b_shape``)."""
    import jax.experimental.pallas as pl
    import jax.experimental.pallas.mosaic_gpu as plgpu

    def smem(shape, dt):
        swizzle = plgpu.find_swizzle(shape[-1] * jnp.dtype(dt).itemsize * 8)
        elems = swizzle // jnp.dtype(dt).itemsize
        return plgpu.SMEM(shape, dt, transforms=(plgpu.TilingTransform((8, elems)),
                                                 plgpu.SwizzleTransform(swizzle)))

    def body(a_gmem, b_gmem, o_gmem, a_smem, b_smem, o_smem, barriers):
        plgpu.copy_gmem_to_smem(a_gmem, a_smem, barriers.at[0])
        plgpu.copy_gmem_to_smem(b_gmem, b_smem, barriers.at[1])
        plgpu.barrier_wait(barriers.at[0])
        plgpu.barrier_wait(barriers.at[1])

        def scope(acc_ref):
            plgpu.wgmma(acc_ref, a_smem, b_smem if b_view is None else b_view(b_smem))
            plgpu.wgmma_wait(0)
            return acc_ref[...]

        acc = pl.run_scoped(scope, plgpu.ACC((m, n), acc_dtype))
        if extra is not None:
            acc = extra(acc)
        o_smem[...] = acc
        plgpu.commit_smem()
        plgpu.copy_smem_to_gmem(o_smem, o_gmem)
        plgpu.wait_smem_to_gmem(0)

    return plgpu.kernel(
        body, out_type=jax.ShapeDtypeStruct((m, n), acc_dtype),
        scratch_types=[smem((m, k), dtype), smem(b_shape or (k, n), dtype),
                       plgpu.SMEM((m, n), acc_dtype), plgpu.Barrier(num_barriers=2)],
        compiler_params=plgpu.CompilerParams(
            lowering_semantics=plgpu.LoweringSemantics.Warpgroup))


@pytest.mark.parametrize("dtype", [jnp.float16, jnp.bfloat16, jnp.float32,
                                   jnp.float8_e4m3fn, jnp.float8_e5m2])
def test_one_wgmma_formats(dtype):
    """f16 / bf16 (k16), f32 operands as tf32 (k8, low 13 bits dropped), e4m3 / e5m2
    (k32): the kernel's wgmma is the chain."""
    a, b = random((64, 64), dtype, 11), random((64, 32), dtype, 12)
    if dtype == jnp.float32:  # low bits set: the tf32 read drops them
        a = a * jnp.float32(1 + 2 ** -20)
    got, = run(one_wgmma(64, 32, 64, dtype), a, b)
    np.testing.assert_array_equal(bits(got), bits(chain(a, b)))
    if dtype == jnp.float32:  # not __float_to_tf32's rounding, which a CUDA program adds
        import jaxwarp

        rounded = jaxwarp.matmul(a, b, operand_format="tf32", instruction="wgmma")
        assert (bits(rounded) != bits(got)).any()


def test_transposed_and_sliced_rhs():
    """b stored (N', K) and read as ``transpose_ref(b, (1, 0)).at[:, 32:64]``: the
    transpose applied to the value, then the slice (the interpreter reads neither)."""
    import jax.experimental.pallas.mosaic_gpu as plgpu

    a, bt = random((64, 64), jnp.float16, 29), random((96, 64), jnp.float16, 30)
    kernel = one_wgmma(64, 32, 64, jnp.float16, b_shape=(96, 64),
                       b_view=lambda b: plgpu.transpose_ref(b, (1, 0)).at[:, 32:64])
    got, = run(kernel, a, bt)
    np.testing.assert_array_equal(bits(got), bits(chain(a, bt.T[:, 32:64])))


def test_one_wgmma_f16_accumulator():
    a, b = random((64, 64), jnp.float16, 13), random((64, 32), jnp.float16, 14)
    got, = run(one_wgmma(64, 32, 64, jnp.float16, jnp.float16), a, b)
    want = mg.wgmma_chain(jnp.zeros((64, 32), jnp.float16), a, b, operand_format="f16",
                          accumulator="f16")
    assert got.dtype == jnp.float16
    np.testing.assert_array_equal(bits(got), bits(want))


def test_operand_format_override():
    """model.operand_format: the kernel's f16 data run as bf16 operands (rounded)."""
    a, b = random((64, 64), jnp.float16, 15), random((64, 32), jnp.float16, 16)
    got, = run(one_wgmma(64, 32, 64, jnp.float16), a, b, model=Model(operand_format="bf16"))
    want = mg.wgmma_chain(jnp.zeros((64, 32)), a, b, operand_format="bf16",
                          accumulator="f32")
    np.testing.assert_array_equal(bits(got), bits(want))
    assert (bits(got) != bits(chain(a, b))).any()


def test_pallas_call_kernel_and_sites():
    """A pl.pallas_call with Mosaic GPU compiler params (operands in SMEM; JAX 0.10.2's
    interpreter cannot copy into SMEM blocks with tiling transforms), and the wgmma site
    run_kernel_and_sites reports."""
    import jax.experimental.pallas as pl
    import jax.experimental.pallas.mosaic_gpu as plgpu

    def body(a_ref, b_ref, o_ref):
        def scope(acc_ref):
            plgpu.wgmma(acc_ref, a_ref, b_ref)
            plgpu.wgmma_wait(0)
            return acc_ref[...]
        o_ref[...] = pl.run_scoped(scope, plgpu.ACC((64, 32), jnp.float32))

    smem = plgpu.BlockSpec(memory_space=plgpu.SMEM)
    f = pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct((64, 32), jnp.float32),
                       in_specs=[smem, smem], out_specs=smem,
                       compiler_params=plgpu.CompilerParams(), name="one_wgmma")
    a, b = random((64, 64), jnp.bfloat16, 27), random((64, 32), jnp.bfloat16, 28)
    eqn = kernel_eqn(f, a, b)
    assert eqn.primitive.name == "pallas_call"
    (got,), sites = mg.run_kernel_and_sites(eqn, [a, b], Model())
    np.testing.assert_array_equal(bits(got), bits(chain(a, b)))
    site, = sites
    assert (site.m, site.n, site.k, site.operand_format, site.accumulator, site.instruction,
            site.lhs_dtype, site.kernel) == (64, 32, 64, "bf16", "f32", "wgmma", "bfloat16",
                                             "one_wgmma")


# --- Errors.


@pytest.mark.parametrize("model, match", [
    (Model(arch="sm_80"), "arch"),
    (Model(arch="sm_120a"), "arch"),
    (Model(mode="fast"), "mode"),
    (Model(instruction="mma_sync"), "instruction"),
    (Model(arch="sm_100a"), "wgmma"),
    (Model(arch="sm_100a", instruction="wgmma"), "instruction"),
    (Model(operand_format="f64"), "operand_format"),
])
def test_bad_model(model, match):
    a, b = random((64, 64), jnp.float16, 17), random((64, 32), jnp.float16, 18)
    eqn = kernel_eqn(one_wgmma(64, 32, 64, jnp.float16), a, b)
    with pytest.raises(ValueError, match=match):
        mg.run_kernel(eqn, [a, b], model)


def test_bf16_cannot_accumulate_in_f16():
    a, b = random((64, 64), jnp.bfloat16, 19), random((64, 32), jnp.bfloat16, 20)
    eqn = kernel_eqn(one_wgmma(64, 32, 64, jnp.bfloat16, jnp.float16), a, b)
    with pytest.raises(ValueError, match="bf16 operands cannot accumulate in float16"):
        mg.run_kernel(eqn, [a, b], Model())


def test_shape_the_target_cannot_issue():
    """wgmma's M is 64 per warpgroup instruction: a 32-row accumulator cannot issue."""
    a, b = random((32, 64), jnp.float16, 21), random((64, 32), jnp.float16, 22)
    eqn = kernel_eqn(one_wgmma(32, 32, 64, jnp.float16), a, b)
    with pytest.raises(ValueError, match=r"cannot issue an \(32, 32, 64\) product"):
        mg.run_kernel(eqn, [a, b], Model())


def test_int8_wgmma_is_not_modelled():
    a = jnp.ones((64, 64), jnp.int8)
    b = jnp.ones((64, 32), jnp.int8)
    eqn = kernel_eqn(one_wgmma(64, 32, 64, jnp.int8, jnp.int32), a, b)
    with pytest.raises(NotImplementedError, match="int8 operands is not modelled"):
        mg.run_kernel(eqn, [a, b], Model())


def test_other_products_are_refused():
    """A dot_general on register values inside a kernel: an error, not np.matmul."""
    a, b = random((64, 64), jnp.float16, 23), random((64, 32), jnp.float16, 24)
    sq = one_wgmma(64, 32, 64, jnp.float16, extra=lambda acc: acc @ jnp.ones((32, 32)))
    eqn = kernel_eqn(sq, a, b)
    with pytest.raises(NotImplementedError, match="dot_general inside a Mosaic GPU"):
        mg.run_kernel(eqn, [a, b], Model())


@pytest.mark.parametrize("dtype", [jnp.float16, jnp.bfloat16])
def test_blackwell_kernel(dtype):
    """JAX's blackwell_matmul_mgpu, unchanged, on sm_100a: the output is the chain of
    tcgen05_mma_logical over k (k16 steps, from zero) rounded to the kernel's dtype, on
    every element. Its warp-level core_map and TMEM need the GPU interpreter of JAX
    >= 0.11; before that, a clear error names what the interpreter lacks."""
    bm = pytest.importorskip("jax.experimental.pallas.ops.gpu.blackwell_matmul_mgpu")
    from jaxwarp._src.instructions.tcgen05 import tcgen05_mma_logical

    a, b = random((256, 128), dtype, 41), random((128, 256), dtype, 42)
    cfg = bm.TuningConfig(tile_m=128, tile_n=128, tile_k=64, max_concurrent_steps=2,
                          collective=False)
    eqn = kernel_eqn(lambda a, b: bm.matmul_kernel(a, b, cfg), a, b)
    if jax.__version_info__ < (0, 11):
        with pytest.raises(NotImplementedError, match="Mosaic GPU interpret mode cannot"):
            mg.run_kernel(eqn, [a, b], Model(arch="sm_100a"))
        return
    (got,), sites = mg.run_kernel_and_sites(eqn, [a, b], Model(arch="sm_100a"))
    fmt = {jnp.float16: "f16", jnp.bfloat16: "bf16"}[dtype]
    want = np.zeros((256, 256), np.float32)
    for i in range(0, 256, 128):
        for j in range(0, 256, 128):
            d = jnp.zeros((128, 128), jnp.float32)
            for k0 in range(0, 128, 16):
                d = tcgen05_mma_logical(f"m128n128k16.kind::f16.f32.{fmt}.{fmt}",
                                        a[i:i + 128, k0:k0 + 16], b[k0:k0 + 16, j:j + 128], d)
            want[i:i + 128, j:j + 128] = np.asarray(d)
    np.testing.assert_array_equal(bits(got), bits(jnp.asarray(want).astype(dtype)))
    assert {(s.instruction, s.m, s.n, s.k) for s in sites} == {("tcgen05", 128, 128, 64)}


def tcgen05_kernel(m, n, k, tile_k, dtype):
    """A plgpu.kernel with a k loop of plgpu.tcgen05_mma into TMEM (accumulate=(ki > 0):
    the first step ignores the uninitialized accumulator), its completion observed on a
    barrier, the result read with async_load_tmem."""
    import jax.experimental.pallas as pl
    import jax.experimental.pallas.mosaic_gpu as plgpu

    def smem(shape, dt):
        swizzle = plgpu.find_swizzle(shape[-1] * jnp.dtype(dt).itemsize * 8)
        elems = swizzle // jnp.dtype(dt).itemsize
        return plgpu.SMEM(shape, dt, transforms=(plgpu.TilingTransform((8, elems)),
                                                 plgpu.SwizzleTransform(swizzle)))

    def body(a_gmem, b_gmem, o_gmem, a_smem, b_smem, acc_tmem, o_smem, tma, mma):
        def step(ki, _):
            plgpu.copy_gmem_to_smem(a_gmem.at[:, pl.ds(ki * tile_k, tile_k)], a_smem,
                                    tma.at[0])
            plgpu.copy_gmem_to_smem(b_gmem.at[pl.ds(ki * tile_k, tile_k), :], b_smem,
                                    tma.at[1])
            plgpu.barrier_wait(tma.at[0])
            plgpu.barrier_wait(tma.at[1])
            plgpu.tcgen05_mma(acc_tmem, a_smem, b_smem, mma.at[0], accumulate=ki > 0)
            plgpu.barrier_wait(mma.at[0])

        jax.lax.fori_loop(0, k // tile_k, step, None)
        o_smem[...] = plgpu.async_load_tmem(acc_tmem)
        plgpu.wait_load_tmem()
        plgpu.commit_smem()
        plgpu.copy_smem_to_gmem(o_smem, o_gmem)
        plgpu.wait_smem_to_gmem(0)

    return plgpu.kernel(
        body, out_type=jax.ShapeDtypeStruct((m, n), jnp.float32),
        scratch_types=[smem((m, tile_k), dtype), smem((tile_k, n), dtype),
                       plgpu.TMEM((m, n), jnp.float32), plgpu.SMEM((m, n), jnp.float32),
                       plgpu.Barrier(num_barriers=2),
                       plgpu.Barrier(num_arrivals=1, num_barriers=1,
                                     orders_tensor_core=True)])


@pytest.mark.parametrize("dtype", [jnp.float16, jnp.bfloat16])
def test_tcgen05_kernel(dtype):
    """On sm_100a a kernel's tcgen05_mma is the chain of tcgen05_mma_logical over k
    (MMA-Sim's Blackwell model), starting from zero where accumulate is false; numpy's
    f32 matmul gives other bits."""
    from jaxwarp._src.instructions.tcgen05 import tcgen05_mma_logical

    a, b = random((128, 128), dtype, 31), random((128, 64), dtype, 32)
    (got,), sites = mg.run_kernel_and_sites(
        kernel_eqn(tcgen05_kernel(128, 64, 128, 64, dtype), a, b), [a, b],
        Model(arch="sm_100a"))
    fmt = {jnp.float16: "f16", jnp.bfloat16: "bf16"}[dtype]
    d = jnp.zeros((128, 64), jnp.float32)
    for k0 in range(0, 128, 16):
        d = tcgen05_mma_logical(f"m128n64k16.kind::f16.f32.{fmt}.{fmt}", a[:, k0:k0 + 16],
                                b[k0:k0 + 16], d)
    np.testing.assert_array_equal(bits(got), bits(d))
    npm = np.asarray(a, np.float32) @ np.asarray(b, np.float32)
    assert (bits(npm) != bits(d)).any()
    site, = sites
    assert (site.instruction, site.m, site.n, site.k, site.operand_format) == (
        "tcgen05", 128, 64, 64, fmt)


def test_tcgen05_kernel_needs_blackwell():
    a, b = random((128, 64), jnp.float16, 33), random((64, 64), jnp.float16, 34)
    eqn = kernel_eqn(tcgen05_kernel(128, 64, 64, 64, jnp.float16), a, b)
    with pytest.raises(ValueError, match="tcgen05"):
        mg.run_kernel(eqn, [a, b], Model(arch="sm_90a"))


def test_not_a_kernel():
    closed = jax.make_jaxpr(lambda x: x + 1)(1.0)
    assert not mg.is_mosaic_gpu(closed.jaxpr.eqns[0])
    with pytest.raises(ValueError, match="not a Mosaic GPU kernel"):
        mg.run_kernel(closed.jaxpr.eqns[0], [1.0], Model())


def test_target_sm_count():
    with mg.target_sm_count(132):
        assert hm.get_num_sms() == 132
        from jax.extend import backend
        assert backend.get_default_device().core_count == 132
    assert not hasattr(jax.extend.backend.get_default_device(), "core_count") or \
        jax.default_backend() != "cpu"
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="num_sms"):
            with mg.target_sm_count(bad):
                pass


def test_hardware_sample_through_emulate():
    """The public path: JAX's hopper_matmul_mgpu, unchanged, under jaxwarp.emulate (the
    SM count the kernel asks for given by jaxwarp.kernels.target_sm_count)."""
    import jaxwarp

    a, b, out, meta = load_sample()
    a, b, want = a[:128], b[:, :128], out[:128, :128]
    cfg = hm.TuningConfig(tile_m=64, tile_n=64, tile_k=meta["tile_k"],
                          max_concurrent_steps=meta["max_concurrent_steps"])
    with jaxwarp.kernels.target_sm_count(2):
        got, rep = jaxwarp.emulate(hopper(cfg), arch="sm_90a", report=True)(
            jnp.asarray(a), jnp.asarray(b))
    np.testing.assert_array_equal(bits(got), want)
    kernel = [e for e in rep.entries if e.emulated]
    assert kernel and all(e.instruction == "wgmma" for e in kernel), str(rep)
