"""The fused exact kernel (``fused_kernel``, Pallas) gives exact mode's bits: in Pallas'
interpreter here; ``benchmarks/fused_kernel_check.py`` checks the GPU."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxwarp
from jaxwarp._src.gemm import matmul as matmul_module
from jaxwarp._src.gemm.kernels import fused_kernel

_DT = {"bf16": jnp.bfloat16, "f16": jnp.float16, "tf32": jnp.float32}


def _bits(x):
    return np.asarray(x).view(np.uint32)


def _operands(fmt, M, N, K, kind, seed=0):
    rng = np.random.default_rng(seed)
    a, b = rng.standard_normal((M, K)), rng.standard_normal((K, N))
    if kind == "wide":  # exponents far apart: terms truncated, C dominant or cut
        r = 20 if fmt == "bf16" else 6
        a = a * 2.0 ** rng.integers(-r, r, (M, K))
        b = b * 2.0 ** rng.integers(-r, r, (K, N))
    elif kind == "zeros":  # whole blocks of zero products: D is C (a -0 as +0)
        a = a * (rng.random((M, K)) < 0.2)
        b = b * (rng.random((K, N)) < 0.2)
    elif kind == "cancel":  # equal and opposite products, some an ulp apart
        a[:, 1::2] = a[:, ::2]
        b[1::2] = -b[::2] * (1 + 2.0 ** -7 * rng.integers(-2, 3, (K // 2, N)))
    elif kind == "subnormal":  # f16 subnormal operands
        a = a * 2.0 ** rng.integers(-26, 4, (M, K))
        b = b * 2.0 ** rng.integers(-26, 4, (K, N))
    elif kind == "big":  # bf16 products up to 2**122, still in fp32's range
        a, b = a * 2.0 ** 60, b * 2.0 ** 60
    elif kind == "out_of_range":  # bf16 products past fp32's range: XLA's branch
        a = a * 2.0 ** 70
    elif kind == "tiny":  # bf16 subnormals, products near the floor, subnormal results
        a = a * 2.0 ** rng.integers(-133, -118, (M, K))
        b = b * 2.0 ** rng.integers(-12, 3, (K, N))
    elif kind == "huge":  # bf16 products near 2**127, in cancelling pairs, and overflows
        a = a * 2.0 ** rng.integers(55, 66, (M, K))
        b = b * 2.0 ** rng.integers(55, 66, (K, N))
        a[:, 1::2] = a[:, ::2]
        b[1::2] = -b[::2] * (1 + 2.0 ** -7 * rng.integers(-1, 2, (K // 2, N)))
    elif kind == "span":  # bf16 exponents over +-70: products past fp32's range both ways
        a = a * 2.0 ** rng.integers(-70, 70, (M, K))
        b = b * 2.0 ** rng.integers(-70, 70, (K, N))
    elif kind == "bits":  # every bf16 bit pattern alike (inf, NaN, subnormals, zeros)
        a, b = (rng.integers(0, 1 << 16, s, dtype=np.uint32).astype(np.uint16)
                .view(jnp.bfloat16).astype(np.float32) for s in ((M, K), (K, N)))
    a, b = jnp.asarray(a, _DT[fmt]), jnp.asarray(b, _DT[fmt])
    if kind == "special":
        a = a.at[0, 0].set(jnp.inf).at[1, 3].set(jnp.nan).at[2, 0].set(-jnp.inf)
        b = b.at[0, 2].set(0).at[5, 7].set(jnp.inf)
    lo, hi = {"tiny": (-149, -124), "huge": (100, 128), "span": (-140, 128)}.get(kind,
                                                                                (-30, 30))
    c = jnp.asarray(rng.standard_normal((M, N)) * 2.0 ** rng.integers(lo, hi, (M, N)),
                    jnp.float32).at[0, 1].set(-0.0).at[1, 1].set(2.0 ** -130)
    if kind == "bits":
        c = jnp.asarray(rng.integers(0, 1 << 32, (M, N), dtype=np.uint64).astype(np.uint32)
                        .view(np.float32))
    return a, b, c


def test_kernel_bits_bf16():
    # One tile, two instructions, in the interpreter: exact mode's bits.
    a, b, c = _operands("bf16", 16, 16, 32, "normal")
    dp = jaxwarp.datapath_for("sm_90", "wmma", "bf16", 16)
    plan = fused_kernel.Plan("bf16", 32, dp.F, dp.nan_f32, True, (16, 16), form="reduce")
    got = fused_kernel.gemm(a, b, c, plan, interpret=True)
    want = jaxwarp.matmul(a, b, c, operand_format="bf16", mode="exact")
    np.testing.assert_array_equal(_bits(got), _bits(want))


_CASES = ([("bf16", k, "split", 16) for k in ("wide", "zeros", "cancel", "big")]
          + [("f16", k, "split", 16) for k in ("wide", "cancel", "subnormal", "special")]
          + [("bf16", "wide", "unrolled", 16), ("f16", "special", "unrolled", 16),
             ("bf16", "cancel", "reduce", 16), ("f16", "special", "reduce", 16)]
          # a step's products in a loop, u an iteration (the kernel of small products)
          + [("bf16", "wide", "split", 4), ("bf16", "zeros", "split", 1),
             ("f16", "special", "split", 4), ("f16", "subnormal", "split", 2),
             ("f16", "special", "unrolled", 8), ("bf16", "cancel", "unrolled", 4)])


@pytest.mark.slow
@pytest.mark.parametrize(("fmt", "kind", "form", "unroll"), _CASES)
def test_kernel_bits(fmt, kind, form, unroll):
    a, b, c = _operands(fmt, 32, 32, 64, kind)
    dp = jaxwarp.datapath_for("sm_90", "wmma", fmt, 16)
    got = fused_kernel.chain(a, b, c, dp, fmt, interpret=True, form=form,
                             f32_operands=form == "split",
                             finite=None if fmt == "f16" else True, unroll=unroll)
    want = jaxwarp.matmul(a, b, c, operand_format=fmt, mode="exact")
    np.testing.assert_array_equal(_bits(got), _bits(want))


def test_rolled_kernel_bits(options):
    # The loop over a step's products (Plan.unroll < 16) against the written-out step and
    # XLA's exact path: the same bits, with zeros, -0 and a subnormal C, f16 inf and NaN.
    # On a GPU the compiled kernels, elsewhere Pallas' interpreter.
    gpu = jax.default_backend() == "gpu"
    kinds = ([("bf16", k) for k in ("wide", "zeros", "cancel", "big")]
             + [("f16", k) for k in ("special", "subnormal", "cancel")] if gpu
             else [("bf16", "wide"), ("f16", "special")])
    options(gemm_fused_kernel="off")
    for fmt, kind in kinds:
        dp = jaxwarp.datapath_for("sm_90", "wmma", fmt, 16)
        a, b, c = _operands(fmt, 64 if gpu else 16, 48 if gpu else 16, 96 if gpu else 48,
                            kind, seed=3)
        out = {u: _bits(fused_kernel.chain(a, b, c, dp, fmt, interpret=not gpu, unroll=u,
                                           block=None if gpu else (16, 16),
                                           finite=None if fmt == "f16" else True))
               for u in ((16, 8, 4, 2, 1) if gpu else (16, 4, 1))}
        want = _bits(jaxwarp.matmul(a, b, c, operand_format=fmt, mode="exact"))
        for u, got in out.items():
            np.testing.assert_array_equal(got, want, err_msg=f"{fmt} {kind} unroll={u}")


def test_int_rounding_kernel_bits():
    # rounding="int" (C's term and the rounding to fp32 on the bits, the helpers the
    # general form shares) against exact mode, in Pallas' interpreter.
    dp = jaxwarp.datapath_for("sm_90", "wmma", "bf16", 16)
    for kind in ("wide", "cancel"):
        a, b, c = _operands("bf16", 16, 16, 48, kind, seed=5)
        got = fused_kernel.chain(a, b, c, dp, "bf16", finite=True, rounding="int",
                                 form="unrolled", f32_operands=False, interpret=True,
                                 block=(16, 16))
        want = jaxwarp.matmul(a, b, c, operand_format="bf16", mode="exact")
        np.testing.assert_array_equal(_bits(got), _bits(want), err_msg=kind)


def test_general_kernel_bits(options):
    # The kernel for bf16 operands of any value (form "general", what small bf16 products
    # run, with no range check): exact mode's bits where products leave fp32's range both
    # ways, with inf, NaN, subnormal operands and results, random bit patterns, and the
    # chain through a subnormal or infinite C. On a GPU the compiled kernels (with and
    # without the loop over a step's products), elsewhere Pallas' interpreter.
    gpu = jax.default_backend() == "gpu"
    kinds = (("wide", "zeros", "cancel", "big", "out_of_range", "special", "tiny", "huge",
              "span", "bits") if gpu else ("special", "tiny", "huge", "bits"))
    options(gemm_fused_kernel="off")
    dp = jaxwarp.datapath_for("sm_90", "wmma", "bf16", 16)
    for kind in kinds:
        a, b, c = _operands("bf16", 64 if gpu else 16, 48 if gpu else 16, 96 if gpu else 48,
                            kind, seed=4)
        want = _bits(jaxwarp.matmul(a, b, c, operand_format="bf16", mode="exact"))
        for u in ((16, 8, 4, 2, 1) if gpu else (16, 4)):
            got = _bits(fused_kernel.chain(a, b, c, dp, "bf16", form="general", unroll=u,
                                           interpret=not gpu,
                                           block=None if gpu else (16, 16)))
            np.testing.assert_array_equal(got, want, err_msg=f"{kind} unroll={u}")


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(6))
def test_general_kernel_bits_sweep(options, seed):
    # More draws of the general form's hardest inputs (Pallas' interpreter): random bit
    # patterns, exponents over the whole range, subnormal results, cancelling products
    # near fp32's largest; odd M, N a multiple of 8 (both padded to the kernel's tile), K
    # of 1 to 5 instructions; the reference XLA's exact wgmma chain (the same datapath).
    options(gemm_fused_kernel="off")
    dp = jaxwarp.datapath_for("sm_90", "wmma", "bf16", 16)
    rng = np.random.default_rng(100 + seed)
    for kind in ("bits", "span", "tiny", "huge"):
        M, N, K = (int(rng.integers(2, 40)), 8 * int(rng.integers(1, 5)),
                   16 * int(rng.integers(1, 6)))
        a, b, c = _operands("bf16", M, N, K, kind, seed=int(rng.integers(1 << 30)))
        want = _bits(jaxwarp.matmul(a, b, c, operand_format="bf16", mode="exact",
                                    instruction="wgmma"))
        for u in (16, 1):
            got = _bits(fused_kernel.chain(a, b, c, dp, "bf16", form="general", unroll=u,
                                           interpret=True, block=(16, 16)))
            np.testing.assert_array_equal(got, want, err_msg=f"{kind} {M}x{N}x{K} u={u}")


def test_general_kernel_reads_the_floor():
    # The general kernel's E floor is the datapath's e_floor: one instruction of tiny
    # products against the model's mma with and without it (the two differ).
    h100 = jaxwarp.datapath_for("sm_90", "wmma", "bf16", 16)
    rng = np.random.default_rng(6)  # products 2**-150 .. 2**-139: below the floor 2**-133
    a = jnp.asarray(rng.standard_normal((16, 16)) * 2.0 ** rng.integers(-126, -120, (16, 16)),
                    jnp.bfloat16)
    b = jnp.asarray(rng.standard_normal((16, 16)) * 2.0 ** rng.integers(-24, -20, (16, 16)),
                    jnp.bfloat16)
    c = jnp.zeros((16, 16), jnp.float32)
    out = {}
    for e_floor in (7, None):
        dp = h100.replace(e_floor=e_floor)
        got = _bits(fused_kernel.chain(a, b, c, dp, "bf16", form="general", interpret=True,
                                       block=(16, 16)))
        want = _bits(jaxwarp.mma(a, b, c, a_format="bf16", c_format="f32", d_format="f32",
                                 datapath=dp))
        np.testing.assert_array_equal(got, want, err_msg=f"e_floor={e_floor}")
        out[e_floor] = got
    assert (out[7] != out[None]).any()
    with pytest.raises(ValueError, match="form='general' takes bf16 .* fmt='f16'"):
        fused_kernel.chain(a.astype(jnp.float16), b.astype(jnp.float16), c, h100, "f16",
                           form="general", interpret=True)
    with pytest.raises(ValueError, match="f32_operands=True .allowed: 'bf16', 'tf32'; None"):
        fused_kernel.chain(a, b, c, h100, "bf16", form="general", f32_operands=True,
                           interpret=True)


def test_kernel_per_shape_and_size(monkeypatch, options):
    """A product shape used again in a program traces the kernel once (``gemm`` is
    jitted per plan); the size rule picks the loop over a step's products for small
    products (``gemm_kernel_unroll_small``) and the written-out step from
    ``gemm_kernel_rolled_below``."""
    dp = jaxwarp.datapath_for("sm_90", "wmma", "bf16", 16)
    plans = []
    kernel = fused_kernel.kernel

    def counted(*refs, plan):
        plans.append(plan)
        return kernel(*refs, plan=plan)

    monkeypatch.setattr(fused_kernel, "kernel", counted)
    a, b = jnp.ones((32, 32), jnp.bfloat16), jnp.ones((32, 64), jnp.bfloat16)

    def trace():  # a new function each time (make_jaxpr caches by function)
        def f(c1, c2):
            return [fused_kernel.chain(x, b, c, dp, "bf16", finite=True, interpret=True)
                    for x, c in ((a, c1), (a, c2), (a[:16], c1[:16]))]
        jax.make_jaxpr(f)(jnp.zeros((32, 64)), jnp.ones((32, 64)))

    jax.clear_caches()
    trace()
    assert len(plans) == 1  # M = 16 is padded to the tile: the same shape
    assert plans[0].unroll == jaxwarp.config.gemm_kernel_unroll_small
    options(gemm_kernel_unroll_small=2, gemm_kernel_rolled_below=32 * 32 * 64 + 1)
    trace()
    assert [p.unroll for p in plans[1:]] == [2]
    options(gemm_kernel_rolled_below=32 * 32 * 64)
    trace()
    assert [p.unroll for p in plans[1:]] == [2, fused_kernel.IK]
    with pytest.raises(ValueError, match="unroll=3"):
        fused_kernel.chain(a, b, jnp.zeros((32, 64)), dp, "bf16", finite=True, unroll=3,
                           interpret=True)
    jax.clear_caches()


@pytest.mark.slow
@pytest.mark.parametrize(("fmt", "kind", "shape", "instruction"), [
    ("bf16", "normal", (40, 24, 48), "wgmma"),  # M, N padded to the kernel's tile
    ("bf16", "out_of_range", (32, 32, 32), "wmma"),  # the cond's XLA branch
    ("f16", "special", (48, 16, 32), "mma_sync"),
])
def test_matmul_switch(fmt, kind, shape, instruction):
    # matmul through the kernel (gemm_fused_kernel="on": the interpreter off the GPU) and
    # through XLA's exact loop: the same bits.
    M, N, K = shape
    a, b, c = _operands(fmt, M, N, K, kind, seed=1)
    tile = (16, 8, 16) if instruction == "mma_sync" else None
    out = {}
    for switch in ("off", "on"):
        with jaxwarp.config.override(gemm_fused_kernel=switch):  # matmul's forward: traced
            out[switch] = _bits(jaxwarp.matmul(a, b, c, operand_format=fmt, mode="exact",
                                               instruction=instruction, tile=tile))
    np.testing.assert_array_equal(out["on"], out["off"])


def test_models():
    # f16 / bf16 datapaths of blocks fused with an fp32 C and D, an instruction a whole
    # number of blocks, each block's int32 sum in range.
    h100 = jaxwarp.datapath_for("sm_90", "wmma", "f16", 16)
    sm80 = jaxwarp.datapath_for("sm_80", "wmma", "f16", 16)  # blocks of 8
    assert fused_kernel.models(h100, "f16", "f16", "f32", 16)
    assert fused_kernel.models(sm80, "f16", "f16", "f32", 16)
    assert not fused_kernel.models(h100, "f16", "f16", "f16", 16)
    assert not fused_kernel.models(h100.replace(F=26), "f16", "f16", "f32", 16)
    assert fused_kernel.models(sm80.replace(F=26), "f16", "f16", "f32", 16)  # 8 terms
    assert not fused_kernel.models(sm80.replace(F=27), "f16", "f16", "f32", 16)
    assert not fused_kernel.models(h100, "f16", "f16", "f32", 8)  # half a block
    assert not fused_kernel.models(sm80.replace(block_k=12), "f16", "f16", "f32", 24)
    assert not fused_kernel.models(sm80.replace(c_mode="end"), "f16", "f16", "f32", 16)


@pytest.mark.parametrize(("arch", "instruction", "fmt", "kinds"), [
    ("sm_80", "mma_sync", "bf16", ("wide", "bits")),
    pytest.param("sm_80", "mma_sync", "bf16", ("zeros", "cancel", "big", "out_of_range",
                                               "tiny", "huge", "span"), marks=pytest.mark.slow),
    pytest.param("sm_80", "mma_sync", "f16", ("special", "subnormal", "cancel"),
                 marks=pytest.mark.slow),
    pytest.param("sm_75", "wmma", "f16", ("wide", "special"), marks=pytest.mark.slow),
    pytest.param("sm_70", "wmma", "f16", ("special", "subnormal"), marks=pytest.mark.slow),
])
def test_blocks_of_older_architectures(arch, instruction, fmt, kinds):
    # sm_70 to sm_89 fuse blocks of 4 or 8 products in a k16 instruction, each taking the
    # previous one's fp32 result as its C: the kernel steps by the block. matmul through
    # it (the interpreter here) and through XLA's loop: the same bits, in range or not.
    tile = (16, 8, 16) if instruction == "mma_sync" else None
    for kind in kinds:
        a, b, c = _operands(fmt, 48, 32, 64, kind, seed=2)
        out = {}
        for switch in ("off", "on"):
            with jaxwarp.config.override(gemm_fused_kernel=switch):
                out[switch] = _bits(jaxwarp.matmul(a, b, c, operand_format=fmt, mode="exact",
                                                   arch=arch, instruction=instruction,
                                                   tile=tile))
        np.testing.assert_array_equal(out["on"], out["off"], err_msg=f"{arch} {fmt} {kind}")


@pytest.mark.parametrize(("arch", "fmt", "form"), [
    ("sm_80", "bf16", "split"), ("sm_80", "bf16", "general"), ("sm_70", "f16", "split"),
    ("sm_90", "tf32", "split"), ("sm_90", "tf32", "general")])
def test_blocks_of_4_and_8_lower_for_the_gpu(arch, fmt, form):
    # Pallas' Triton lowering on the CPU (for CUDA): the kernel stepping by blocks of 8
    # (sm_80) and 4 (sm_70, tf32's WMMA) products, tf32's int32 bit patterns, lowers as
    # the GPU gets it.
    dp = jaxwarp.datapath_for(arch, "wmma", fmt, 8 if fmt == "tf32" else 16)
    args = [jax.ShapeDtypeStruct(s, d) for s, d in (((512, 256), _DT[fmt]),
                                                    ((256, 128), _DT[fmt]),
                                                    ((512, 128), jnp.float32))]
    fn = jax.jit(lambda a, b, c: fused_kernel.chain(a, b, c, dp, fmt, finite=True, form=form))
    text = fn.trace(*args).lower(lowering_platforms=("cuda",)).as_text()
    assert "__gpu$xla.gpu.triton" in text and fused_kernel.KERNEL_NAME in text


def _tf32_operands(kind, seed):
    """tf32 operands as fp32 words: bf16's kinds with low bits set past tf32's 10 (the
    tensor core ignores them), or "bits", every fp32 pattern alike."""
    a, b, c = _operands("bf16", 48, 32, 64, kind, seed=seed)
    rng = np.random.default_rng(seed)
    a, b = (np.asarray(x, np.float32) * (1 + rng.random(x.shape) * 2.0 ** -9) for x in (a, b))
    if kind == "bits":
        a, b = (rng.integers(0, 1 << 32, x.shape, dtype=np.uint64).astype(np.uint32)
                .view(np.float32) for x in (a, b))
    return jnp.asarray(a), jnp.asarray(b), c


@pytest.mark.parametrize(("arch", "instruction", "tile", "kinds"), [
    ("sm_90", "mma_sync", (16, 8, 8), ("wide", "bits")),
    pytest.param("sm_90", "wmma", None, ("zeros", "cancel", "big", "out_of_range", "tiny",
                                         "huge", "span"), marks=pytest.mark.slow),
    pytest.param("sm_80", "mma_sync", (16, 8, 8), ("wide", "tiny", "bits"),
                 marks=pytest.mark.slow),
    pytest.param("sm_90a", "wgmma", (64, 8, 8), ("wide", "huge", "bits"),
                 marks=pytest.mark.slow),
])
@pytest.mark.parametrize("any_range_below", [None, pytest.param(0, marks=pytest.mark.slow)])
def test_tf32_through_the_kernel(arch, instruction, tile, kinds, any_range_below, monkeypatch,
                                 options):
    # tf32 (fp32's exponents, 10 fraction bits; the kernel reads each word with its low 13
    # bits cleared) takes bf16's routes: the general form on the bits of small products
    # (any_range_below None), or the in-range kernel under a cond on the range (0).
    plans = []
    plan_for = fused_kernel.plan_for  # called where chain is traced (once per options)
    monkeypatch.setattr(fused_kernel, "plan_for", lambda *a, **k: plans.append(k["form"])
                        or plan_for(*a, **k))
    if any_range_below is not None:
        options(gemm_kernel_any_range_below=any_range_below)
    for kind in kinds:
        a, b, c = _tf32_operands(kind, seed=3)
        out = {}
        for switch in ("off", "on"):
            with jaxwarp.config.override(gemm_fused_kernel=switch):
                out[switch] = _bits(jaxwarp.matmul(a, b, c, operand_format="tf32", mode="exact",
                                                   arch=arch, instruction=instruction,
                                                   tile=tile))
        np.testing.assert_array_equal(out["on"], out["off"], err_msg=f"{arch} {kind}")
    assert set(plans) == ({"general"} if any_range_below is None else {"split"}), plans


def test_kernel_steps_by_the_datapaths_block():
    # The block size is read from the datapath: sm_90's instruction with blocks of 8 (and
    # sm_80's F) gives other bits, and the kernel gives each one's (the model's mma).
    h100 = jaxwarp.datapath_for("sm_90", "wmma", "bf16", 16)
    a, b, c = _operands("bf16", 16, 16, 32, "wide", seed=4)
    out = []
    for dp in (h100, h100.replace(block_k=8, F=24)):
        got = _bits(fused_kernel.chain(a, b, c, dp, "bf16", finite=True, interpret=True,
                                       block=(16, 16)))
        want = c
        for k in range(0, 32, 16):
            want = jaxwarp.mma(a[:, k:k + 16], b[k:k + 16], want, a_format="bf16",
                               c_format="f32", d_format="f32", datapath=dp)
        np.testing.assert_array_equal(got, _bits(want), err_msg=str(dp.block_k))
        out.append(got)
    assert (out[0] != out[1]).any()


def test_auto_takes_the_kernel_from_a_size_on_a_gpu(monkeypatch, options):
    """"auto": never off the GPU; on it, every size where bf16's general branch runs on the
    host (the default), else XLA's k loop for small products (their compile is what a
    user waits for) and the kernel from ``gemm_fused_min_macs`` multiply-adds."""
    from jaxwarp._src.gemm.matmul_tiles import Cfg

    cfg = Cfg("bf16", "bf16", "f32", (16, 16, 16), "wmma", "sm_90", "exact", None, False)
    big = jaxwarp.config.gemm_fused_min_macs
    small = big - 1
    options(gemm_fused_kernel="auto")
    monkeypatch.setattr(matmul_module.jax, "default_backend", lambda: "cpu")
    assert matmul_module._fused_datapath(cfg, 16, None, big) is None  # off the GPU
    monkeypatch.setattr(matmul_module.jax, "default_backend", lambda: "gpu")
    assert matmul_module._fused_datapath(cfg, 16, None, 16 ** 3) is not None
    options(gemm_shared="off")
    assert matmul_module._fused_datapath(cfg, 16, None, small) is None
    assert matmul_module._fused_datapath(cfg, 16, None, big) is not None
    options(gemm_fused_kernel="on")
    assert matmul_module._fused_datapath(cfg, 16, None, small) is not None
