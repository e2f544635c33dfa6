"""jaxwarp.to_registers / from_registers with mma.sp opcodes: every sparse shape and type.

The stored A, B, C and D of every ``mma.sp`` configuration (one accumulator type each,
both for f16) round-trip through the registers, and the registers built this way (with
``sparse.metadata_words``) make ``jaxwarp.mma_sp`` give the bits of
``jaxwarp.mma_sp_logical`` on the logical operands. The H100 captures check the layouts
themselves (test_sparse.py); this checks that the public functions reach them.
"""

from __future__ import annotations

import itertools

import jax.numpy as jnp
import numpy as np
import pytest

import jaxwarp
from jaxwarp._src.catalogue import isa


def _configs():
    """One ordered opcode per (shape, A type, B type, C/D type) of isa.SPARSE_ROWS (the
    mixed integer / fp8 pairings only with B of A's type and the other one once); the
    first of each row runs by default, the others are slow."""
    out = []
    for r in isa.sparse_rows("mma_sp"):
        ((m, n, k),) = r.shapes
        for a in r.a_formats:
            for b in dict.fromkeys((a, r.b_formats(a)[-1])):
                for c, d in r.cd:
                    sat = ".satfinite" if r.satfinite else ""
                    q = (f"mma.sp::ordered_metadata.sync.aligned.m{m}n{n}k{k}.row.col{sat}."
                         f"{d}.{a}.{b}.{c}")
                    first = not out or out[-1].values[1] is not r
                    out.append(pytest.param(q, r, id=q.rsplit(".aligned.", 1)[1],
                                            marks=() if first else pytest.mark.slow))
    return out


CONFIGS = _configs()


def test_configs_cover_every_sparse_row_and_type():
    got = {(i.a_format, i.k, i.c_format) for i in
           (jaxwarp.parse_mma_sp(p.values[0]) for p in CONFIGS)}
    want = {(a, r.k, c) for r in isa.sparse_rows("mma_sp") for a in r.a_formats
            for c, _ in r.cd}
    assert got == want


def _values(rng, fmt, shape):
    dt = jnp.dtype(isa.storage_dtype(fmt))
    if jnp.issubdtype(dt, jnp.integer):
        lo, hi = {"s4": (-8, 8), "u4": (0, 16)}.get(fmt, (jnp.iinfo(dt).min,
                                                          int(jnp.iinfo(dt).max) + 1))
        return jnp.asarray(rng.integers(lo, hi, shape), dt)
    x = jnp.asarray(rng.standard_normal(shape), dt)
    if fmt == "tf32":  # a tf32 value: the low 13 bits of its f32 word are zero
        x = (x.view(jnp.uint32) & jnp.uint32(0xFFFFE000)).view(jnp.float32)
    return x


def _indices(rng, group, shape):
    """Valid ordered indices (..., 16, K/2): 2 of 4 columns; tf32 1 of 2; s4/u4 2 of 4
    pairs (columns 2i, 2i+1)."""
    rows, stored = shape
    if group == 2:
        return jnp.asarray(rng.integers(0, 2, shape), jnp.int32)
    pairs = np.asarray(list(itertools.combinations(range(4), 2)))
    pick = pairs[rng.integers(0, len(pairs), (rows, stored // (group // 2)))]
    if group == 8:
        pick = np.stack([2 * pick[..., 0], 2 * pick[..., 0] + 1,
                         2 * pick[..., 1], 2 * pick[..., 1] + 1], -1)
    return jnp.asarray(pick.reshape(shape), jnp.int32)


def _bits(x):
    x = np.asarray(x)
    return x.view(f"u{x.dtype.itemsize}")


@pytest.mark.parametrize("q, row", CONFIGS)
def test_registers_round_trip_and_feed_mma_sp(q, row):
    instr = jaxwarp.parse_mma_sp(q)
    assert instr.row is row
    rng = np.random.default_rng(instr.k + len(q))
    m, n, k = instr.m, instr.n, instr.k
    a = _values(rng, instr.a_format, (m, k // 2))
    b = _values(rng, instr.b_format, (k, n))
    c = _values(rng, instr.c_format, (m, n))
    idx = _indices(rng, instr.geometry.group, (m, k // 2))
    regs = {}
    for use, x in (("a", a), ("b", b), ("c", c)):
        regs[use] = jaxwarp.to_registers(q, use, x)
        assert regs[use].shape == (32, instr.nregs(use)), use
        back = jaxwarp.from_registers(instr, use, regs[use])
        np.testing.assert_array_equal(_bits(back), _bits(x), err_msg=use)
    selector = instr.row.selectors - 1
    e = jaxwarp.sparse.metadata_words(idx, a_format=instr.a_format, k=k, selector=selector)
    d_regs = jaxwarp.mma_sp(q, regs["a"], regs["b"], regs["c"], e, selector=selector)
    want = jaxwarp.mma_sp_logical(q, a, b, c, indices=idx)
    np.testing.assert_array_equal(_bits(jaxwarp.from_registers(q, "d", d_regs)), _bits(want))
    np.testing.assert_array_equal(np.asarray(d_regs),
                                  np.asarray(jaxwarp.to_registers(instr, "d", want)))


def test_legacy_opcode_and_record_give_the_same_registers():
    b = jnp.arange(32 * 8, dtype=jnp.float16).reshape(32, 8)
    ordered = "mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.f16.f16.f32"
    legacy = "mma.sp.sync.aligned.m16n8k32.row.col.f32.f16.f16.f32"
    want = np.asarray(jaxwarp.to_registers(ordered, "b", b))
    np.testing.assert_array_equal(np.asarray(jaxwarp.to_registers(legacy, "b", b)), want)
    np.testing.assert_array_equal(
        np.asarray(jaxwarp.to_registers(jaxwarp.parse_mma_sp(ordered), "b", b)), want)
    # lane 4g + t holds rows 8i + 2t, 8i + 2t + 1 of column g in register i
    lane, reg = 4 * 3 + 1, 2
    word = int(want[lane, reg])
    assert [word & 0xFFFF, word >> 16] == [int(b[16 + 2, 3].view(jnp.uint16)),
                                           int(b[16 + 3, 3].view(jnp.uint16))]


def test_sparse_a_is_the_stored_half_in_the_layout_of_the_dense_half_k():
    """mma.sp f16 m16n8k16's A registers are those of mma.sync f16 m16n8k8 (unprefixed:
    the dense qualifier, whose A is 16 x 16)."""
    x = jnp.arange(16 * 8, dtype=jnp.float16).reshape(16, 8)
    got = jaxwarp.to_registers("mma.sp::ordered_metadata.sync.aligned.m16n8k16.row.col."
                               "f32.f16.f16.f32", "a", x)
    np.testing.assert_array_equal(
        np.asarray(got),
        np.asarray(jaxwarp.to_registers("m16n8k8.row.col.f32.f16.f16.f32", "a", x)))
    assert jaxwarp.to_registers("m16n8k16.row.col.f32.f16.f16.f32", "a",
                                jnp.zeros((16, 16), jnp.float16)).shape == (32, 4)
