"""Sparse tensor cores (mma.sp, wgmma.mma_async.sp) and the 2:4 helpers.

Bit-exact against the H100 captures of tests/data/h100_sparse.npz (schema:
tools/capture/FORMAT_SP.md), through the register form (the metadata words the lanes
passed); the logical forms agree with it; the metadata layout against the capture's
decoded indices; the rules the model states (pruned elements are never multiplied,
undefined metadata and non-2:4 A in checked mode) from first principles. Set
JAXWARP_SPARSE_CAPTURES to a folder of capture_sp.py outputs (another seed) to check them
all (slow).
"""

from __future__ import annotations

import os
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import load_capture

import jaxwarp
from jaxwarp._src.catalogue import isa
from jaxwarp._src.conformance.handlers import sparse as handlers_sparse
from jaxwarp._src.instructions import sparse
from jaxwarp._src.layouts.mma_sync_registers import pack, unpack

CAP = load_capture("sparse")
CONFIGS = sorted({k.rsplit("/", 1)[0] for k in CAP.files if k.count("/") == 2})
# The default run: tf32 with selector 2 (its undefined nibbles select 16-bit halves); the
# rest (legacy metadata, every selector, f16 / bf16 / fp8 / integer types) is slow.
DEFAULT = ("sp/tf32.tf32.f32f32.m16n8k8.ordered.sel2",)


def _params():
    return [pytest.param(c, id=c, marks=() if c in DEFAULT else pytest.mark.slow)
            for c in CONFIGS if c.startswith("sp/")]


def _logical(raw, fmt):
    dt = jnp.dtype(isa.storage_dtype(fmt))
    raw = np.asarray(raw)
    same = raw.dtype.itemsize == dt.itemsize and raw.dtype.kind != dt.kind
    return jnp.asarray(raw.view(dt) if same else raw.astype(dt))


@pytest.mark.parametrize("name", _params())
def test_registers_bit_exact(name):
    family, cfg = name.split("/")
    instr, sel, _ = handlers_sparse.parse_name(family, cfg)
    a, b, c = (_logical(CAP[f"{name}/{u}"], f) for u, f in
               (("A", instr.a_format), ("B", instr.b_format), ("C", instr.c_format)))
    regs = [pack(instr.dense(u), u, x) for u, x in (("a", a), ("b", b), ("c", c))]
    d = jaxwarp.mma_sp(instr, *regs, jnp.asarray(CAP[f"{name}/meta"]), selector=sel)
    got = np.asarray(unpack(instr.dense("d"), "d", d))
    want = CAP[f"{name}/D"]
    np.testing.assert_array_equal(got.view(want.dtype) if got.dtype != want.dtype else got, want)


def test_metadata_layout_against_capture():
    """metadata_words of the capture's decoded indices = the words the named lanes passed
    (valid metadata only; the other lanes carry decoys)."""
    name = "sp/f16.f16.f16f16.m16n8k32.ordered.sel1"
    kinds = CAP[f"{name}/kind"]
    ok = ~np.isin(kinds, ["undefined_meta", "unordered_meta"])
    e = CAP[f"{name}/E"][ok].astype(np.int32)
    words = np.asarray(jaxwarp.sparse.metadata_words(e, a_format="f16", k=32, selector=1))
    named = [4 * g + j for g in range(8) for j in (2, 3)]
    np.testing.assert_array_equal(words[:, named], CAP[f"{name}/meta"][ok][:, named])
    assert not words[:, [i for i in range(32) if i not in named]].any()


@pytest.mark.slow
def test_logical_forms_agree_with_registers():
    """Dense 2:4 A, stored A + indices and the register form give the same bits."""
    rng = np.random.default_rng(0)
    q = "mma.sp.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16"
    instr = jaxwarp.parse_mma_sp(q)
    dense = jaxwarp.sparse.prune_2_4(jnp.asarray(rng.standard_normal((16, 16)), jnp.float16))
    b = jnp.asarray(rng.standard_normal((16, 8)), jnp.float16)
    c = jnp.asarray(rng.standard_normal((16, 8)), jnp.float16)
    vals, idx = jaxwarp.sparse.compress_2_4(dense)
    d1 = jaxwarp.mma_sp_logical(q, dense, b, c)
    d2 = jaxwarp.mma_sp_logical(q, vals, b, c, indices=idx)
    e = jaxwarp.sparse.metadata_words(idx, a_format="f16", k=16, selector=3)
    regs = [pack(instr.dense(u), u, x) for u, x in (("a", vals), ("b", b), ("c", c))]
    d3 = unpack(instr.dense("d"), "d", jaxwarp.mma_sp(q, *regs, e, selector=3))
    for d in (d2, d3):
        np.testing.assert_array_equal(np.asarray(d).view(np.uint16), np.asarray(d1).view(np.uint16))


@pytest.mark.slow
def test_pruned_elements_are_never_multiplied():
    """B's inf where A was pruned gives no NaN; the same product through the dense
    datapath (0 * inf) would. (A group with fewer than two non-zeros stores a zero, which
    is multiplied: compress_2_4 stores the first zero columns.)"""
    a = jnp.zeros((16, 16), jnp.float16).at[:, jnp.array([0, 3])].set(1.0)
    a = a.at[:, jnp.array([5, 6])].set(0.5)
    b = jnp.ones((16, 8), jnp.float16).at[1].set(jnp.inf)
    c = jnp.zeros((16, 8), jnp.float32)
    d = jaxwarp.mma_sp_logical("m16n8k16.row.col.f32.f16.f16.f32", a, b, c)
    assert np.all(np.asarray(d) == 3.0)
    dense = jaxwarp.mma(a, b, c, a_format="f16", c_format="f32", d_format="f32",
                        instruction="mma_sync", instruction_k=16)
    assert np.all(np.isnan(np.asarray(dense)))


def test_checked_mode_reports_undefined_metadata():
    q = "m16n8k16.row.col.f32.f16.f16.f32"
    b = jnp.ones((16, 8), jnp.float16)
    c = jnp.zeros((16, 8), jnp.float32)
    vals = jnp.ones((16, 8), jnp.float16)
    good = jnp.tile(jnp.array([0, 2], jnp.int32), (16, 4))
    f = jax.jit(lambda v, i: jaxwarp.mma_sp_logical(q, v, b, c, indices=i))
    err, _ = jaxwarp.checked(f)(vals, good)
    assert err.get() is None
    for bad in (good.at[3, 3].set(0), good.at[0, :2].set(jnp.array([2, 0]))):  # 0b0000, 0b0010
        err, _ = jaxwarp.checked(f)(vals, bad)
        assert "undefined" in str(err.get())


@pytest.mark.slow
def test_checked_mode_legacy_order_and_dense_a():
    q = "m16n8k16.row.col.f32.f16.f16.f32"
    b = jnp.ones((16, 8), jnp.float16)
    c = jnp.zeros((16, 8), jnp.float32)
    vals = jnp.ones((16, 8), jnp.float16)
    good = jnp.tile(jnp.array([0, 2], jnp.int32), (16, 4))
    legacy = jax.jit(lambda v, i: jaxwarp.mma_sp_logical("mma.sp.sync.aligned." + q, v, b, c,
                                                         indices=i))
    err, _ = jaxwarp.checked(legacy)(vals, good.at[0, :2].set(jnp.array([2, 0])))
    assert err.get() is None  # decreasing indices are legal for the legacy form
    dense = jnp.ones((16, 16), jnp.float16)
    err, _ = jaxwarp.checked(jax.jit(lambda a: jaxwarp.mma_sp_logical(q, a, b, c)))(dense)
    assert "not 2:4" in str(err.get())
    with pytest.raises(ValueError, match="not 2:4 sparse"):
        jaxwarp.mma_sp_logical(q, dense, b, c)


@pytest.mark.slow
def test_prune_keeps_the_largest_half():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((8, 32)).astype(np.float32)
    p = np.asarray(jaxwarp.sparse.prune_2_4(x))
    g, pg = x.reshape(8, 8, 4), p.reshape(8, 8, 4)
    assert ((pg != 0).sum(-1) == 2).all()
    kept = np.sort(np.abs(pg), -1)[..., 2:]
    np.testing.assert_array_equal(kept, np.sort(np.abs(g), -1)[..., 2:])
    vals, idx = jaxwarp.sparse.compress_2_4(p)
    np.testing.assert_array_equal(np.asarray(jaxwarp.sparse.decompress_2_4(vals, idx)), p)


@pytest.mark.slow
def test_wgmma_sp_logical_is_four_mma_sp_rows():
    """wgmma.sp on 64 rows with N = 8 = the mma.sp model of its rows (both the dense
    datapath at K/2; the wgsp captures check it against the GPU)."""
    rng = np.random.default_rng(2)
    a = jaxwarp.sparse.prune_2_4(jnp.asarray(rng.integers(-9, 9, (64, 64)), jnp.int8))
    b = jnp.asarray(rng.integers(-9, 9, (64, 8)), jnp.int8)
    c = jnp.asarray(rng.integers(-99, 99, (64, 8)), jnp.int32)
    d = jaxwarp.wgmma_sp_logical("m64n8k64.s32.s8.s8", a, b, c)
    want = np.asarray(a, np.int64) @ np.asarray(b, np.int64) + np.asarray(c)
    np.testing.assert_array_equal(np.asarray(d), want)


@pytest.mark.slow
def test_held_out_captures():
    """Every sp/, chain/sp/ and wgsp/ configuration of the files in
    $JAXWARP_SPARSE_CAPTURES (capture_sp.py with another seed) is bit-exact."""
    folder = os.environ.get("JAXWARP_SPARSE_CAPTURES")
    if not folder:
        pytest.skip("JAXWARP_SPARSE_CAPTURES is not set")
    files = sorted(pathlib.Path(folder).glob("*.npz"))
    assert files, f"no .npz files in {folder}"
    bad = []
    for f in files:
        z = np.load(f)
        keys = {k for k in z.files if handlers_sparse.is_sparse_key(k)}
        bad += [r for r in handlers_sparse.configs(z, keys) if not r.ok]
    assert not bad, bad[:5]


def test_catalogue_rows_have_their_geometry():
    """Every sparse row's metadata fills its lanes exactly once per selector."""
    for r in isa.SPARSE_ROWS:
        for a in r.a_formats:
            geo = sparse.geometry(r.instruction, a, r.k)
            seen = set()
            for sel in range(r.selectors):
                lane, shift = geo.slots(sel)
                pairs = set(zip(lane.ravel().tolist(), shift.ravel().tolist(), strict=True))
                assert len(pairs) == lane.size and not pairs & seen
                seen |= pairs
            assert len(seen) == 8 * 32 * max(1, geo.m // 16), (r.instruction, a, r.k)


def test_mma_sp_instructions_parse():
    ops = jaxwarp.mma_sp_instructions()
    assert len(ops) == 88 and all(jaxwarp.parse_mma_sp(o).ptx == o for o in ops)
    assert isinstance(jaxwarp.parse_mma_sp(ops[0]), sparse.SparseInstruction)


@pytest.mark.slow
def test_matmul_2_4_is_a_chain_of_mma_sp():
    """matmul(..., sparsity="2:4") = prune_2_4, then mma.sp m16n8k32 tiles chained along K."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal((16, 64)).astype(np.float32)
    b = rng.standard_normal((64, 8)).astype(np.float32)
    d = jaxwarp.matmul(a, b, operand_format="f16", sparsity="2:4")
    ap = jaxwarp.sparse.prune_2_4(jnp.asarray(a, jnp.float16))
    bh = jnp.asarray(b, jnp.float16)
    c = jnp.zeros((16, 8), jnp.float32)
    for k0 in (0, 32):
        c = jaxwarp.mma_sp_logical("m16n8k32.row.col.f32.f16.f16.f32", ap[:, k0:k0 + 32],
                                   bh[k0:k0 + 32], c)
    np.testing.assert_array_equal(np.asarray(d).view(np.uint32), np.asarray(c).view(np.uint32))
