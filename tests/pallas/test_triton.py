"""Triton-style Pallas kernels under ``jaxwarp.emulate``: the hardware sample's kernels bit
for bit, the fold of accumulator adds, each operand dtype's chain, errors, jit and vmap."""

from __future__ import annotations

import functools
import json
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pltriton

import jaxwarp
from jaxwarp.kernels import triton_matmul

from ..conftest import DATA

SAMPLE = DATA / "pallas_sample.npz"
DTYPES = {"bf16": jnp.bfloat16, "f16": jnp.float16, "e4m3": jnp.float8_e4m3fn,
          "e5m2": jnp.float8_e5m2, "f32": jnp.float32}


def _emulated(**kw):
    opts = {k: kw.pop(k) for k in ("instruction", "on_unsupported", "report", "arch",
                                   "operand_format", "promote_every") if k in kw}
    opts.setdefault("arch", "sm_90a")
    opts.setdefault("operand_format", None)
    return jaxwarp.emulate(functools.partial(triton_matmul, **kw), **opts)


def _bits(x):
    x = np.asarray(x)
    return x.view({2: np.uint16, 4: np.uint32}[x.dtype.itemsize])


def _operands(dtype, M, N, K, seed=0, c=False):
    ka, kb, kc = jax.random.split(jax.random.key(seed), 3)
    a = jax.random.normal(ka, (M, K), jnp.float32).astype(dtype)
    b = jax.random.normal(kb, (K, N), jnp.float32).astype(dtype)
    return (a, b, jax.random.normal(kc, (M, N), jnp.float32)) if c else (a, b)


def _sample_keys():
    if not SAMPLE.exists():
        return []
    with np.load(SAMPLE) as z:
        return sorted({k.rsplit("/", 1)[0] for k in z.files if k.startswith("pallas/")})


@pytest.mark.parametrize("key", _sample_keys() or ["absent"])
def test_hardware_sample(key):
    """Each Triton-style kernel of the hardware sample, rebuilt from its meta with
    triton_matmul and run under emulate on the CPU, gives the hardware's bits."""
    if key == "absent":
        pytest.skip(f"{SAMPLE.name} is not in tests/data (the capture of Pallas kernels "
                    f"on the H100 / H200 adds it)")
    with np.load(SAMPLE) as z:
        meta = json.loads(str(z[key + "/meta"]))
        dt = DTYPES[meta["dtype"]]
        a = lax.bitcast_convert_type(jnp.asarray(z[key + "/a"]), dt)
        b = lax.bitcast_convert_type(jnp.asarray(z[key + "/b"]), dt)
        want = z[key + "/out"]
        c = (lax.bitcast_convert_type(jnp.asarray(z[key + "/c"]), jnp.float32)
             if key + "/c" in z.files else None)
    out_dtype = jnp.dtype(meta.get("out_dtype", "float32"))
    f = _emulated(block=(meta["bm"], meta["bn"], meta["bk"]), num_warps=meta["num_warps"],
                  form=meta["form"], out_dtype=out_dtype)
    got = f(a, b) if c is None else f(a, b, c)
    np.testing.assert_array_equal(_bits(got), want)


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
@pytest.mark.parametrize("form", ["tiled", "c_init", "c_epilogue", "two_dots"])
def test_forms_equal_matmul_chains(dtype, form):
    """Every form is the chain jaxwarp.matmul runs: the K blocks chained through one
    accumulator (the add folded), C as the chain's start or added after in fp32."""
    dt = DTYPES[dtype]
    a, b, c = _operands(dt, 32, 32, 128, seed=1, c=True)
    f = _emulated(block=(16, 16, 64), num_warps=1, form=form, report=True)
    got, rep = f(a, b, c) if form in ("c_init", "c_epilogue") else f(a, b)
    assert len(rep.entries) == (2 if form == "two_dots" else 1)
    assert all("add folded" in e.note for e in rep.entries)
    mm = functools.partial(jaxwarp.matmul, operand_format=dtype, instruction="mma_sync")
    want = {"tiled": lambda: mm(a, b), "two_dots": lambda: mm(a, b),
            "c_init": lambda: mm(a, b, c), "c_epilogue": lambda: mm(a, b) + c}[form]()
    np.testing.assert_array_equal(_bits(got), _bits(want))


def test_fold_changes_bits():
    """Without the fold (each block's product from zero, then an fp32 add) the bits differ:
    the fold is what the tests above check."""
    a, b = _operands(jnp.bfloat16, 32, 32, 256, seed=2)
    got = jax.block_until_ready(_emulated(block=(32, 32, 32), num_warps=1)(a, b))
    mm = functools.partial(jaxwarp.matmul, operand_format="bf16", instruction="mma_sync")
    unfolded = jnp.zeros((32, 32), jnp.float32)
    for i in range(0, 256, 32):
        # One product at a time: eager exact products dispatched back to back on a 2-core
        # CPU, each a host callback running the shared executables, waited on each other
        # forever here twice (a deadlock of nested dispatch, not yet understood).
        unfolded = jax.block_until_ready(unfolded + mm(a[:, i:i + 32], b[i:i + 32]))
    assert (_bits(got) != _bits(unfolded)).any()


def test_wgmma_where_triton_issues_it():
    """4 warps and M a multiple of 64: wgmma (same bits as mma.sync on sm_90), reported."""
    a, b = _operands(jnp.float16, 64, 32, 64, seed=3)
    out, rep = _emulated(block=(64, 32, 32), num_warps=4, report=True)(a, b)
    (entry,) = rep.entries
    assert entry.emulated and entry.instruction == "wgmma" and entry.operand_format == "f16"
    assert "wgmma" in str(rep) and (entry.product.m, entry.product.n, entry.product.k) == (
        64, 32, 32)
    for ins in ("wgmma", "mma_sync"):
        want = jaxwarp.matmul(a, b, operand_format="f16", instruction=ins)
        np.testing.assert_array_equal(_bits(out), _bits(want))
    _, rep = _emulated(block=(32, 32, 32), num_warps=4, report=True)(a, b)
    assert rep.entries[0].instruction == "mma_sync"


def _perm(K, w=32):
    k = np.arange(min(w, K))
    one = np.concatenate([k[k % 4 < 2], k[k % 4 >= 2]])
    return np.concatenate([i + one for i in range(0, K, min(w, K))])


@pytest.mark.parametrize("dtype,bk", [("e4m3", 64), ("e5m2", 32), ("e4m3", 16)])
def test_fp8_is_permuted_f16_mma_sync(dtype, bk):
    """fp8: converted to f16, f16 mma.sync, k permuted in windows of 32 (16 for bk=16)."""
    a, b = _operands(DTYPES[dtype], 32, 16, 128, seed=4)
    out, rep = _emulated(block=(16, 16, bk), num_warps=4, report=True)(a, b)
    perm = _perm(128, min(32, bk))
    want = jaxwarp.matmul(a[:, perm], b[perm], operand_format="f16", instruction="mma_sync")
    np.testing.assert_array_equal(_bits(out), _bits(want))
    e = rep.entries[0]
    assert (e.instruction, e.operand_format) == ("mma_sync", "f16") and "window" in e.note


def test_f32_default_precision_is_tf32():
    """f32 at default precision: Pallas lowers it with input_precision TF32, and Triton
    rounds each operand to tf32 to nearest, ties away (cvt.rna), before the tf32 chain
    (an H100 capture: 100%; the raw words, low bits ignored, 0.3%)."""
    a, b = _operands(jnp.float32, 32, 16, 64, seed=5)
    out = _emulated(block=(16, 16, 32), num_warps=1)(a, b)
    rna = jaxwarp.float_to_tf32
    want = jaxwarp.matmul(rna(a), rna(b), operand_format="tf32", instruction="mma_sync")
    np.testing.assert_array_equal(_bits(out), _bits(want))
    keep = jaxwarp._src.numerics.bitops.tf32_keep  # noqa: SLF001 (the tensor core's own cut)
    raw = jaxwarp.matmul(keep(a), keep(b), operand_format="tf32", instruction="mma_sync")
    assert (_bits(out) != _bits(raw)).any()


def _round_f32(q: Fraction) -> np.float32:
    """The exact rational q rounded to float32, nearest even (subnormals kept)."""
    if q == 0:
        return np.float32(0.0)
    neg, q = q < 0, abs(q)
    e = q.numerator.bit_length() - q.denominator.bit_length()
    if Fraction(2) ** e > q:
        e -= 1
    e = max(e, -126)
    ulp = Fraction(2) ** (e - 23)
    n, r = divmod(q / ulp, 1)
    n = int(n) + (1 if r > Fraction(1, 2) or (r == Fraction(1, 2) and int(n) % 2) else 0)
    v = np.float32(n * ulp) if n * ulp < Fraction(2) ** 128 else np.float32(np.inf)
    return -v if neg else v


def _ieee_kernel(a_ref, b_ref, c_ref, o_ref):  # o_ref is c_ref's buffer (aliased)
    o_ref[...] += jnp.dot(a_ref[...], b_ref[...],
                                      precision=lax.Precision.HIGHEST,
                                      preferred_element_type=jnp.float32)


def test_f32_highest_is_an_fma_chain():
    """f32 at HIGHEST: Triton's FMA dot, checked against fma chains computed on rationals;
    the kernel's ``o_ref[...] += dot`` is folded (C = the output block)."""
    M, N, K = 8, 8, 32
    rng = np.random.default_rng(6)
    a = (rng.standard_normal((M, K)) * 2.0 ** rng.integers(-20, 20, (M, K))).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    c = rng.standard_normal((M, N)).astype(np.float32)
    call = pl.pallas_call(_ieee_kernel, out_shape=jax.ShapeDtypeStruct((M, N), jnp.float32),
                          input_output_aliases={2: 0},
                          compiler_params=pltriton.CompilerParams(num_warps=1))
    with jax.enable_x64(True):
        out, rep = jaxwarp.emulate(call, operand_format=None, report=True)(
            jnp.asarray(a), jnp.asarray(b), jnp.asarray(c))
    want = np.empty((M, N), np.float32)
    for i in range(M):
        for j in range(N):
            acc = c[i, j]
            for k in range(K):
                acc = _round_f32(Fraction(float(a[i, k])) * Fraction(float(b[k, j]))
                                 + Fraction(float(acc)))
            want[i, j] = acc
    np.testing.assert_array_equal(_bits(out), _bits(want))
    assert rep.entries[0].instruction == "fma" and "unverified" in rep.entries[0].note


def test_f32_highest_needs_x64():
    call = pl.pallas_call(_ieee_kernel, out_shape=jax.ShapeDtypeStruct((16, 16), jnp.float32),
                          input_output_aliases={2: 0})
    x = jnp.ones((16, 16), jnp.float32)
    with pytest.raises(jaxwarp.UnsupportedProductError, match="jax_enable_x64"):
        jaxwarp.emulate(call, operand_format=None)(x, x, x)


def test_jit_and_vmap():
    a, b = _operands(jnp.bfloat16, 32, 32, 64, seed=7)
    f = _emulated(block=(16, 16, 32), num_warps=1)
    want = f(a, b)
    np.testing.assert_array_equal(_bits(jax.jit(f)(a, b)), _bits(want))
    a3 = jnp.stack([a, a[::-1]])
    got = jax.vmap(f)(a3, jnp.stack([b, b]))
    np.testing.assert_array_equal(_bits(got[0]), _bits(want))
    np.testing.assert_array_equal(_bits(got[1]), _bits(f(a[::-1], b)))


def test_kernel_without_interpret_runs_interpreted():
    """A kernel written for the GPU (interpret=False) runs on the CPU under emulate."""
    a, b = _operands(jnp.float16, 16, 16, 32, seed=8)
    got = _emulated(block=(16, 16, 16), num_warps=1, interpret=False)(a, b)
    want = jaxwarp.matmul(a, b, operand_format="f16", instruction="mma_sync")
    np.testing.assert_array_equal(_bits(got), _bits(want))


def test_instruction_and_promote_every_pass_through():
    a, b = _operands(jnp.bfloat16, 16, 16, 64, seed=9)
    f = _emulated(block=(16, 16, 64), num_warps=1, instruction="wmma", promote_every=32)
    want = jaxwarp.matmul(a, b, operand_format="bf16", instruction="wmma", promote_every=32)
    np.testing.assert_array_equal(_bits(f(a, b)), _bits(want))


def _mixed_kernel(a_ref, b_ref, o_ref):
    o_ref[...] = lax.dot_general(a_ref[...], b_ref[...], (((1,), (0,)), ((), ())),
                                 preferred_element_type=jnp.float32)


def _call(kernel, shape, dtype=jnp.float32):
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(shape, dtype),
                          compiler_params=pltriton.CompilerParams(num_warps=1))


@pytest.mark.parametrize("case,make,match", [
    ("arch", lambda: _emulated(block=(16, 16, 16), num_warps=1, arch="sm_100a"),
     "arch='sm_100a' are not modelled"),
    ("format", lambda: _emulated(block=(16, 16, 16), num_warps=1, operand_format="f16"),
     "operand_format='f16' differs .* bfloat16"),
    ("block", lambda: _emulated(block=(8, 16, 16), num_warps=1), "M=8 \\(a multiple of 16"),
])
def test_errors(case, make, match):
    a, b = _operands(jnp.bfloat16, 16, 16, 32, seed=10)
    with pytest.raises(jaxwarp.UnsupportedProductError, match=match):
        make()(a, b)


def test_error_mixed_and_int8():
    x8 = jnp.ones((16, 16), jnp.int8)
    f = jaxwarp.emulate(_call(_mixed_kernel, (16, 16)), operand_format=None)
    with pytest.raises(jaxwarp.UnsupportedProductError, match="int8.*modelled"):
        f(x8, x8)
    with pytest.raises(jaxwarp.UnsupportedProductError, match="one dtype"):
        f(jnp.ones((16, 16), jnp.float16), jnp.ones((16, 16), jnp.bfloat16))


def test_skip_runs_unemulated_and_reports():
    x8 = jnp.ones((16, 16), jnp.int8)
    out, rep = jaxwarp.emulate(_call(_mixed_kernel, (16, 16)), operand_format=None,
                               on_unsupported="skip", report=True)(x8, x8)
    assert float(out[0, 0]) == 16.0
    (e,) = rep.entries
    assert not e.emulated and "Pallas kernel" in e.reason


def test_products_outside_kernels_need_a_format():
    x = jnp.ones((16, 16), jnp.float32)
    with pytest.raises(ValueError, match="operand_format=None means"):
        jaxwarp.emulate(lambda a: a @ a, operand_format=None)(x)


@pytest.mark.parametrize("kw,exc,match", [
    (dict(form="split"), ValueError, "form='split' is not supported"),
    (dict(block=(16, 16)), TypeError, "block must be"),
    (dict(block=(24, 16, 16)), ValueError, "M=32 is not a multiple of its block 24"),
    (dict(num_warps=0), TypeError, "num_warps"),
    (dict(form="c_init"), ValueError, "needs c"),
    (dict(out_dtype=jnp.int32), TypeError, "out_dtype"),
])
def test_triton_matmul_checks(kw, exc, match):
    a, b = _operands(jnp.bfloat16, 32, 32, 32, seed=11)
    kw = {"block": (16, 16, 16), **kw}
    with pytest.raises(exc, match=match):
        triton_matmul(a, b, **kw)


def _rows_kernel(a_ref, b_ref, o_ref):  # every program of a row writes the same block
    o_ref[...] = jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)


def test_parallel_grid_equals_sequential(monkeypatch):
    """The grid's programs run side by side only where provably equal to JAX's sequential
    interpreter: the same bits either way, and a kernel whose programs write one output
    block (the last one wins) keeps the sequential interpreter."""
    from jaxwarp._src.pallas import rewrite

    taken = []
    real = rewrite.parallel_grid

    def spy(params, invals):
        out = real(params, invals)
        taken.append(out is not None)
        return out

    a, b = _operands(jnp.bfloat16, 64, 32, 64, seed=12)
    f = _emulated(block=(16, 16, 32), num_warps=1)
    monkeypatch.setattr(rewrite, "parallel_grid", spy)
    par = f(a, b)
    monkeypatch.setattr(rewrite, "parallel_grid", lambda params, invals: None)
    seq = _emulated(block=(16, 16, 32), num_warps=1)(a, b)
    np.testing.assert_array_equal(_bits(par), _bits(seq))
    assert taken == [True]

    call = pl.pallas_call(
        _rows_kernel, out_shape=jax.ShapeDtypeStruct((16, 16), jnp.float32), grid=(4, 2),
        in_specs=[pl.BlockSpec((16, 16), lambda i, j: (i, 0)),
                  pl.BlockSpec((16, 16), lambda i, j: (0, j))],
        out_specs=pl.BlockSpec((16, 16), lambda i, j: (0, 0)),
        compiler_params=pltriton.CompilerParams(num_warps=1))
    monkeypatch.setattr(rewrite, "parallel_grid", spy)
    got = jaxwarp.emulate(call, operand_format=None)(a, b)
    assert taken == [True, False]
    want = jaxwarp.matmul(a[48:64, :16], b[:16, 16:32], operand_format="bf16",
                          instruction="mma_sync")  # the last program's block
    np.testing.assert_array_equal(_bits(got), _bits(want))


@jax.jit
def _jitted_dot(a, b):  # a pjit inside the kernel: inlined, its add still folded
    return jnp.dot(a, b, preferred_element_type=jnp.float32)


def _nested_kernel(a_ref, b_ref, n_ref, o_ref):
    n = n_ref[0]  # a dynamic trip count: a while loop

    def body(i, acc):
        a = a_ref[:, pl.ds(i * 16, 16)]
        b = b_ref[pl.ds(i * 16, 16), :]
        return lax.cond(i % 2 == 0, lambda: acc + _jitted_dot(a, b),
                        lambda: _jitted_dot(a, b) + acc)

    o_ref[...] = lax.fori_loop(0, n, body, jnp.zeros(o_ref.shape, jnp.float32))


def test_products_in_while_cond_and_pjit():
    """Products inside a while loop, both branches of a cond and a jitted helper are
    modelled, each add folded (either operand order): the whole K chain."""
    a, b = _operands(jnp.float16, 16, 16, 64, seed=13)
    call = pl.pallas_call(_nested_kernel, out_shape=jax.ShapeDtypeStruct((16, 16),
                                                                          jnp.float32),
                          compiler_params=pltriton.CompilerParams(num_warps=1))
    out, rep = jaxwarp.emulate(call, operand_format=None, report=True)(
        a, b, jnp.array([4], jnp.int32))
    want = jaxwarp.matmul(a, b, operand_format="f16", instruction="mma_sync")
    np.testing.assert_array_equal(_bits(out), _bits(want))
    assert len(rep.entries) == 2 and all(e.instruction == "mma_sync" for e in rep.entries)


def _plain_dot_kernel(a_ref, b_ref, o_ref):
    o_ref[...] = jnp.dot(a_ref[...], b_ref[...])  # the operands' dtype out


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_output_in_operand_dtype(dtype):
    """An f16 product with an f16 output accumulates in f16 (Pallas's Triton lowering); a
    bf16 one accumulates in f32 and is rounded to bf16 once."""
    dt = DTYPES[dtype]
    a, b = _operands(dt, 16, 16, 64, seed=14)
    out = jaxwarp.emulate(_call(_plain_dot_kernel, (16, 16), dt), operand_format=None)(a, b)
    acc = "f16" if dtype == "f16" else "f32"
    want = jaxwarp.matmul(a, b, operand_format=dtype, accumulator=acc,
                          instruction="mma_sync").astype(dt)
    assert out.dtype == dt
    np.testing.assert_array_equal(_bits(out), _bits(want))


def _nt_kernel(a_ref, bt_ref, o_ref):  # B given as (N, K): Triton transposes it
    o_ref[...] = lax.dot_general(a_ref[...], bt_ref[...], (((1,), (1,)), ((), ())),
                                 preferred_element_type=jnp.float32)


def test_transposed_operand():
    a, b = _operands(jnp.bfloat16, 16, 16, 32, seed=15)
    out = jaxwarp.emulate(_call(_nt_kernel, (16, 16)), operand_format=None)(a, b.T)
    want = jaxwarp.matmul(a, b, operand_format="bf16", instruction="mma_sync")
    np.testing.assert_array_equal(_bits(out), _bits(want))


def test_vmap_inside_the_function():
    """A vmapped kernel (Pallas adds a grid axis) inside the emulated function."""
    a = jnp.stack([_operands(jnp.bfloat16, 32, 32, 64, seed=s)[0] for s in (16, 17)])
    b = jnp.stack([_operands(jnp.bfloat16, 32, 32, 64, seed=s)[1] for s in (16, 17)])
    kern = functools.partial(triton_matmul, block=(16, 16, 32), num_warps=1)
    out = jaxwarp.emulate(lambda x, y: jax.vmap(kern)(x, y), operand_format=None)(a, b)
    for i in range(2):
        want = jaxwarp.matmul(a[i], b[i], operand_format="bf16", instruction="mma_sync")
        np.testing.assert_array_equal(_bits(out[i]), _bits(want))
