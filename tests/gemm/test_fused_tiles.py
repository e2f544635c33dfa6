"""Exact ``jaxwarp.mma`` through the fused kernel on batches of tiles (``fused_tiles``):
in Pallas' interpreter here (``gemm_fused_kernel="on"``), bit for bit against the model's
XLA ops (``"off"``); ``benchmarks/mma_exact.py`` checks the GPU's bits the same way."""

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import jaxwarp
from jaxwarp._src.arithmetic.datapath_blocks import in_fp32_range
from jaxwarp._src.arithmetic.datapath_checks import plan_chain
from jaxwarp._src.gemm.kernels import fused_tiles

_DT = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "e4m3": ml_dtypes.float8_e4m3fn,
       "e5m2": ml_dtypes.float8_e5m2, "tf32": np.float32}  # tf32: fp32 words, low bits too
_UINT = {"f16": np.uint16, "bf16": np.uint16, "e4m3": np.uint8, "e5m2": np.uint8,
         "tf32": np.uint32}
_HAS_INF = ("f16", "bf16", "e5m2", "tf32")


def _bits(x):
    return np.asarray(x).view(np.uint32)


def _operand(fmt, shape, rng, kind, side):
    """Operands (..., rows, cols) of ``fmt``: "normal", Gaussian values with exponents over
    +-6 (bf16: in fp32's product range); "bits", every finite bit pattern alike (zeros, -0,
    subnormals, the largest values, both signs), with a zero row of A / column of B, the
    largest values, NaN and (where the format has them) infinities at fixed places."""
    if kind == "normal":
        x = rng.standard_normal(shape) * 2.0 ** rng.integers(-6, 6, shape)
        return jnp.asarray(x, jnp.float32).astype(_DT[fmt])
    u = _UINT[fmt]
    x = rng.integers(0, np.iinfo(u).max, shape, dtype=u, endpoint=True).view(_DT[fmt])
    x = x.astype(np.float32)
    x = np.where(np.isfinite(x), x, 0.0)
    x = np.where(rng.random(shape) < 0.1, -0.0, x)
    big = float(ml_dtypes.finfo(_DT[fmt]).max)
    inf = np.inf if fmt in _HAS_INF else np.nan
    if side == "a":  # rows: 2 all zero (D is C, cut to the block's bits), 3 the largest
        x[..., 2, :] = 0.0
        x[..., 3, ::3], x[..., 3, 1::3] = big, -big
        x[..., 0, 5] = np.nan
        x[..., 1, 7], x[..., 1, 9] = inf, -inf
    else:  # columns: 1 all zero, 2 the largest; an inf against a zero (NaN)
        x[..., :, 1] = 0.0
        x[..., ::2, 2] = big
        x[..., 11, 3] = np.nan
        x[..., 0, 4] = inf
        x[..., 5, 0] = 0.0
    return jnp.asarray(x).astype(_DT[fmt])


def _acc(rng, shape):
    """C: values over +-40 binades, zeros, -0, subnormals, huge values, +-inf and NaN, some
    on A's zero row (where D is C itself)."""
    c = rng.standard_normal(shape) * 2.0 ** rng.integers(-40, 40, shape)
    c = np.asarray(c, np.float32)
    n = shape[-1]
    sub = rng.integers(1, 1 << 23, (n,), dtype=np.uint32).view(np.float32)
    c[..., 2, :] = sub
    c[..., 2, ::4] = -sub[::4]
    c[..., 2, 1], c[..., 2, 2], c[..., 2, 3] = -0.0, 0.0, 3.0e38
    c[..., 2, 5], c[..., 2, 6] = np.inf, np.nan
    c[..., 5, 0], c[..., 5, 1], c[..., 5, 2] = -0.0, 2.0 ** -130, -3.3e38
    c[..., 6, 0], c[..., 6, 1] = -np.inf, np.nan
    c[..., 7, :] = 0.0
    return jnp.asarray(c)


def _inputs(fa, fb, batch, m, n, k, kind, seed, c_batch=None):
    rng = np.random.default_rng(seed)
    return (_operand(fa, (*batch, m, k), rng, kind, "a"),
            _operand(fb, (*batch, k, n), rng, kind, "b"),
            _acc(rng, (*(batch if c_batch is None else c_batch), m, n)))


def _kw(fa, fb, instruction, arch, ik=None):
    return dict(a_format=fa, b_format=fb, c_format="f32", d_format="f32",
                instruction=instruction, arch=arch, instruction_k=ik)


@pytest.fixture
def calls(monkeypatch):
    """The tile counts of the kernel's calls (``fused_tiles.chain``)."""
    seen = []
    chain = fused_tiles.chain
    monkeypatch.setattr(fused_tiles, "chain",
                        lambda a, *x, **k: seen.append(a.shape[0]) or chain(a, *x, **k))
    return seen


def _both(a, b, c, kw, calls, tiles):
    """mma's bits with the kernel ("on") and without ("off"); the kernel ran once, on
    ``tiles`` tiles."""
    with jaxwarp.config.override(gemm_fused_kernel="off"):
        want = _bits(jaxwarp.mma(a, b, c, **kw))
    assert not calls
    with jaxwarp.config.override(gemm_fused_kernel="on"):
        got = _bits(jaxwarp.mma(a, b, c, **kw))
    assert calls == [tiles]
    np.testing.assert_array_equal(got, want)
    return want


# (fa, fb, instruction, arch, instruction k, (m, n, k), batch)
_CASES = {
    "f16_wmma_m16n16k16_x3": ("f16", "f16", "wmma", "sm_90", None, (16, 16, 32), (3,)),
    "f16_mma_sync_m16n8k16": ("f16", "f16", "mma_sync", "sm_90", 16, (16, 8, 48), ()),
    "e4m3_e5m2_wgmma_m16n8k32_2x5": ("e4m3", "e5m2", "wgmma", "sm_90a", 32, (16, 8, 64),
                                     (2, 5)),
    "e5m2_wgmma_m64n24k32": ("e5m2", "e5m2", "wgmma", "sm_90a", 32, (64, 24, 32), (3,)),
    "e4m3_sm89_mma_sync_m16n8k16": ("e4m3", "e4m3", "mma_sync", "sm_89", 16, (16, 8, 32),
                                    (3,)),
    # two blocks of 8 an instruction, the first's fp32 result the second's C
    "bf16_sm80_mma_sync_m16n8k16": ("bf16", "bf16", "mma_sync", "sm_80", 16, (16, 8, 32),
                                    (3,)),
    # tf32: fp32 words whose low 13 bits the kernel clears, as the tensor core reads them
    "tf32_mma_sync_m16n8k8": ("tf32", "tf32", "mma_sync", "sm_90", 8, (16, 8, 16), (3,)),
}


@pytest.mark.parametrize("case", list(_CASES))
def test_tiles_bit_equal(case, calls):
    # Edge values in A, B and C (zeros, -0, subnormals, the largest values, inf, NaN); K a
    # chain of instructions (48: k padded to 64, the padding never read), m / n padded to
    # powers of two (n 24), tile counts that are no multiple of the group (10 m16n8 tiles:
    # groups of 8).
    fa, fb, instr, arch, ik, (m, n, k), batch = _CASES[case]
    a, b, c = _inputs(fa, fb, batch, m, n, k, "bits", seed=len(case))
    want = _both(a, b, c, _kw(fa, fb, instr, arch, ik), calls, int(np.prod(batch)))
    assert np.isnan(want.view(np.float32)).any()  # the specials reach D


def test_bf16_in_range_and_fallback(calls, options):
    # bf16: below gemm_kernel_any_range_below the general form alone; from it a cond on
    # the operands' range: the in-range kernel, else (products beyond fp32's exponents,
    # subnormals, inf, NaN) the general form's.
    kw = _kw("bf16", "bf16", "wmma", "sm_90")
    a, b, c = _inputs("bf16", "bf16", (5,), 16, 16, 32, "bits", seed=3)
    assert not in_fp32_range(a, b)
    _both(a, b, c, kw, calls, 5)
    options(gemm_kernel_any_range_below=0)
    calls.clear()
    _both(a, b, c, kw, calls, 5)  # out of range: the general branch
    a, b, _ = _inputs("bf16", "bf16", (5,), 16, 16, 32, "normal", seed=4)
    assert in_fp32_range(a, b)
    calls.clear()
    _both(a, b, c, kw, calls, 5)  # in range: the in-range kernel, C's specials kept


def test_wgmma_blocks_and_the_finite_cond(calls):
    # A wgmma m64n8 tile runs as two blocks of 32 rows. f16 / fp8 take no pass over the
    # operands by default; with cond=True a cond on finite operands chooses the kernel
    # without the IEEE sum where they are: the same bits either way.
    kw = _kw("f16", "f16", "wgmma", "sm_90a", 16)
    dp = jaxwarp.datapath_for("sm_90a", "wgmma", "f16", 16)
    for kind, seed in (("normal", 5), ("bits", 6)):
        a, b, c = _inputs("f16", "f16", (3,), 64, 8, 32, kind, seed)
        calls.clear()
        want = _both(a, b, c, kw, calls, 3)
        got = fused_tiles.chain(a, b, c, dp, "f16", cond=True, interpret=True)
        np.testing.assert_array_equal(_bits(got), want)


def test_broadcast_batch(calls):
    # Batch dims broadcast as mma's do: A (2, 5, ...), B without a batch, C (5, ...).
    a, b, c = _inputs("f16", "f16", (2, 5), 16, 16, 16, "normal", seed=7, c_batch=(5,))
    b = b[0, 0]
    want = _both(a, b, c, _kw("f16", "f16", "wmma", "sm_90"), calls, 10)
    assert want.shape == (2, 5, 16, 16)


def test_gradient_unchanged(calls):
    # mma's straight-through gradient, bit for bit the same with the kernel as without.
    a, b, c = _inputs("f16", "f16", (3,), 16, 16, 32, "normal", seed=8)
    w = jnp.asarray(np.random.default_rng(9).standard_normal(c.shape), jnp.float32)
    kw = _kw("f16", "f16", "wmma", "sm_90")

    def loss(a, b, c):
        return jnp.sum(jaxwarp.mma(a, b, c, **kw) * w)

    grads = {}
    for switch in ("off", "on"):
        with jaxwarp.config.override(gemm_fused_kernel=switch):
            grads[switch] = jax.grad(loss, argnums=(0, 1, 2))(a, b, c)
    assert calls == [3]
    for x, y in zip(grads["on"], grads["off"], strict=True):
        assert x.dtype == y.dtype
        np.testing.assert_array_equal(np.asarray(x).view(np.uint8),
                                      np.asarray(y).view(np.uint8))


def test_jit(calls):
    a, b, c = _inputs("e4m3", "e4m3", (4,), 16, 16, 32, "bits", seed=10)
    kw = _kw("e4m3", "e4m3", "wgmma", "sm_90a", 32)
    with jaxwarp.config.override(gemm_fused_kernel="off"):
        want = _bits(jaxwarp.mma(a, b, c, **kw))
    with jaxwarp.config.override(gemm_fused_kernel="on"):
        got = _bits(jax.jit(lambda a, b, c: jaxwarp.mma(a, b, c, **kw))(a, b, c))
    assert calls == [4]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(("fa", "c_format", "d_format", "instr", "arch", "satf"), [
    ("f16", "f16", "f16", "wmma", "sm_90", False),  # an f16 accumulator
    ("f16", "f32", "f16", "wmma", "sm_90", False),  # an f16 D
    ("e4m3", "f32", "f32", "mma_sync", "sm_90", False),  # two f16 HMMAs, C last
    ("e4m3", "f32", "f32", "mma_sync", "sm_120a", False),  # F 25 over 32 terms: > int32
    ("f16", "f32", "f32", "wmma", "sm_90", True),  # satf
])
def test_other_chains_keep_the_model(fa, c_format, d_format, instr, arch, satf, calls):
    k = 8 if fa == "tf32" else 32 if fa == "e4m3" else 16
    dt = {"tf32": jnp.float32, "f16": jnp.float16, "e4m3": jnp.float8_e4m3fn}[fa]
    a, b = jnp.ones((2, 16, k), dt), jnp.ones((2, k, 8 if instr == "mma_sync" else 16), dt)
    c = jnp.ones((2, 16, b.shape[-1]), jnp.dtype(c_format.replace("f", "float")))
    kw = dict(a_format=fa, c_format=c_format, d_format=d_format, instruction=instr,
              arch=arch, satf=satf)
    with jaxwarp.config.override(gemm_fused_kernel="on"):
        d = jaxwarp.mma(a, b, c, **kw)
    assert not calls
    assert float(d[0, 0, 0]) == k + 1


def test_runs_switch():
    cfg = plan_chain("f16", "f16", "f32", "f32", "sm_90", "wmma", 16)
    with jaxwarp.config.override(gemm_fused_kernel="auto"):
        assert fused_tiles.runs(cfg) == (jax.default_backend() == "gpu")
    with jaxwarp.config.override(gemm_fused_kernel="off"):
        assert not fused_tiles.runs(cfg)
    with jaxwarp.config.override(gemm_fused_kernel="on"):
        assert fused_tiles.runs(cfg) and not fused_tiles.runs(cfg, satf=True)
        assert not fused_tiles.runs(cfg._replace(c_shift=1))


def test_empty_and_checks(calls):
    # No tile, or k = 0: nothing runs; the kernel's own checks name what is wrong.
    kw = _kw("f16", "f16", "wmma", "sm_90")
    with jaxwarp.config.override(gemm_fused_kernel="on"):
        d = jaxwarp.mma(jnp.ones((0, 16, 16), jnp.float16), jnp.ones((16, 16), jnp.float16),
                        jnp.ones((16, 16)), **kw)
        assert d.shape == (0, 16, 16)
        d = jaxwarp.mma(jnp.ones((2, 16, 0), jnp.float16), jnp.ones((0, 16), jnp.float16),
                        jnp.full((16, 16), -0.0), **kw)
        assert d.shape == (2, 16, 16) and np.signbit(d).all()
    assert not calls
    dp = jaxwarp.datapath_for("sm_90", "wmma", "f16", 16)
    a, c = jnp.ones((2, 16, 24), jnp.float16), jnp.zeros((2, 16, 16))
    with pytest.raises(ValueError, match="k a multiple of the instruction's k=16"):
        fused_tiles.chain(a, a.transpose(0, 2, 1), c, dp, "f16", interpret=True)
    a = a[..., :16]
    with pytest.raises(ValueError, match="form='general': allowed"):
        fused_tiles.chain(a, a, c, dp, "f16", form="general", interpret=True)
    with pytest.raises(ValueError, match="cond=True chooses the form"):
        fused_tiles.chain(a, a, c, dp, "f16", form="unrolled", cond=True, interpret=True)
    with pytest.raises(ValueError, match="group=3: a power of two"):
        fused_tiles.chain(a, a, c, dp, "f16", group=3, interpret=True)
    with pytest.raises(ValueError, match="fmt='f16', b_fmt='bf16'"):
        fused_tiles.chain(a, a, c, dp, "f16", b_fmt="bf16", interpret=True)


def test_layout():
    assert fused_tiles.layout(1 << 20, 16, 16, 16) == (4, (16, 16), (1 << 20, 16, 16, 16))
    assert fused_tiles.layout(10, 16, 8, 32) == (8, (16, 8), (16, 16, 8, 32))
    assert fused_tiles.layout(3, 64, 256, 16) == (1, (32, 32), (3, 64, 256, 16))
    assert fused_tiles.layout(1, 16, 16, 48) == (1, (16, 16), (1, 16, 16, 64))
    assert fused_tiles.layout(7, 16, 16, 16, group=2, block=(8, 16))[:2] == (2, (8, 16))


# --- The longer sweep: every modelled instruction family and format, and the kernel's
# variants (the same bits).

_SWEEP = [
    (fa, fb, instr, arch, ik, shape, batch)
    for fa, fb, instr, arch, ik, shape in (
        ("f16", "f16", "wmma", "sm_90", None, (16, 16, 16)),
        ("f16", "f16", "wmma", "sm_90", None, (32, 8, 16)),
        ("f16", "f16", "wmma", "sm_90", None, (8, 32, 16)),
        ("bf16", "bf16", "wmma", "sm_90", None, (16, 16, 64)),
        ("bf16", "bf16", "mma_sync", "sm_90", 16, (16, 8, 16)),
        ("f16", "f16", "wgmma", "sm_90a", 16, (64, 8, 16)),
        ("bf16", "bf16", "wgmma", "sm_90a", 16, (64, 40, 32)),
        ("f16", "f16", "tcgen05", "sm_100a", 16, (64, 16, 16)),
        ("bf16", "bf16", "mma_sync", "sm_120a", 16, (16, 8, 32)),
        ("e4m3", "e4m3", "wgmma", "sm_90a", 32, (64, 16, 96)),
        ("e5m2", "e4m3", "wgmma", "sm_90a", 32, (16, 8, 32)),
        ("e5m2", "e5m2", "mma_sync", "sm_89", 16, (16, 8, 16)),
        ("e4m3", "e5m2", "mma_sync", "sm_89", 32, (16, 8, 64)),  # blocks of 16
        ("f16", "f16", "wmma", "sm_80", None, (16, 16, 32)),  # blocks of 8
        ("bf16", "bf16", "mma_sync", "sm_86", 16, (16, 8, 16)),
        ("f16", "f16", "mma_sync", "sm_75", 8, (16, 8, 16)),
        ("f16", "f16", "wmma", "sm_70", None, (16, 16, 16)),  # blocks of 4
        ("tf32", "tf32", "wmma", "sm_90", None, (16, 16, 16)),  # k8, blocks of 4
        ("tf32", "tf32", "wgmma", "sm_90a", 8, (64, 16, 32)),
        ("tf32", "tf32", "mma_sync", "sm_80", 8, (16, 8, 16)),
    )
    for batch in ((), (7,))
]


@pytest.mark.slow
@pytest.mark.parametrize("case", _SWEEP, ids=lambda c: "_".join(map(str, c[:4])) +
                         f"_m{c[5][0]}n{c[5][1]}k{c[5][2]}_b{len(c[6])}")
@pytest.mark.parametrize("kind", ["bits", "normal"])
def test_sweep(case, kind, calls, options):
    fa, fb, instr, arch, ik, (m, n, k), batch = case
    a, b, c = _inputs(fa, fb, batch, m, n, k, kind, seed=m * n + k)
    if kind == "normal":
        options(gemm_kernel_any_range_below=0)  # the conds' fast branches
    _both(a, b, c, _kw(fa, fb, instr, arch, ik), calls, int(np.prod(batch)))


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["f16", "bf16", "e4m3"])
def test_variants(fmt):
    # Groups, blocks, warps, fp32 operands and the loop over a step's products.
    ik = 32 if fmt == "e4m3" else 16
    dp = jaxwarp.datapath_for("sm_90a", "wgmma", fmt, ik)
    a, b, c = _inputs(fmt, fmt, (6,), 16, 16, 2 * ik, "bits", seed=11)
    kw = _kw(fmt, fmt, "wgmma", "sm_90a", ik)
    with jaxwarp.config.override(gemm_fused_kernel="off"):
        want = _bits(jaxwarp.mma(a, b, c, **kw))
    for v in (dict(group=1), dict(group=8, block=(8, 16)), dict(num_warps=8, unroll=ik),
              dict(f32_operands=True, unroll=4), dict(block=(16, 4), group=2),
              dict(cond=True), dict(cond=False)):
        got = _bits(fused_tiles.chain(a, b, c, dp, fmt, interpret=True, **v))
        np.testing.assert_array_equal(got, want, err_msg=str(v))


@pytest.mark.parametrize(("fa", "fb", "shape", "kw"), [
    ("f16", "f16", (64, 24, 48), {}),
    ("bf16", "bf16", (16, 16, 16), dict(cond=True)),
    ("e4m3", "e5m2", (16, 8, 32), {}),
])
def test_lowers_for_the_gpu(fa, fb, shape, kw):
    # Pallas' Triton lowering on the CPU (for the CUDA platform): the 3-D blocks, the
    # padded shapes, fp8 loads and both kernels of a cond lower as the GPU gets them.
    import re

    m, n, k = shape
    ik = 32 if fa in ("e4m3", "e5m2") else 16
    dp = jaxwarp.datapath_for("sm_90a", "wgmma", fa, ik, fb)
    args = (jax.ShapeDtypeStruct((1000, m, k), _DT[fa]),
            jax.ShapeDtypeStruct((1000, k, n), _DT[fb]),
            jax.ShapeDtypeStruct((1000, m, n), jnp.float32))
    fn = jax.jit(lambda a, b, c: fused_tiles.chain(a, b, c, dp, fa, b_fmt=fb, **kw))
    text = fn.trace(*args).lower(lowering_platforms=("cuda",)).as_text()
    names = re.findall(r'name = "(\w+)"', text)
    assert names.count(fused_tiles.KERNEL_NAME) == (2 if kw else 1), names


def test_auto_takes_the_kernel_from_the_size_option(monkeypatch):
    # On a GPU, "auto" leaves small calls (a test's, a conformance run's) to XLA's form of
    # the chain, whose compile is shorter, and takes the kernel from gemm_fused_min_macs.
    cfg = plan_chain("f16", "f16", "f32", "f32", "sm_90", "wmma", 16)
    monkeypatch.setattr(fused_tiles.jax, "default_backend", lambda: "gpu")
    with jaxwarp.config.override(gemm_fused_kernel="auto", gemm_fused_min_macs=1 << 20):
        assert not fused_tiles.runs(cfg, macs=(1 << 20) - 1)
        assert fused_tiles.runs(cfg, macs=1 << 20)
    with jaxwarp.config.override(gemm_fused_kernel="on"):
        assert fused_tiles.runs(cfg, macs=1)
