"""Tests of jaxwarp._src.layouts.layouts: the named fragment layouts equal the lane maps
written from the PTX ISA's formulas, for every mma.sync and wgmma configuration, and the
WMMA layouts equal the H100's (tests/data/h100_layout.npz, through the fragment tests)."""

import doctest
import itertools

import numpy as np
import pytest

from jaxwarp._src.catalogue import mma_sync_parse, wgmma_parse
from jaxwarp._src.layouts import fragments, layouts, mma_sync_registers, wgmma_registers
from jaxwarp._src.layouts.layouts import Layout

# --------------------------------------------------------------------------- references
# The lane maps as the PTX ISA writes them (groupID g = lane // 4, threadID_in_group
# t = lane % 4), one formula per operand family, independent of layouts.py.


def ptx_mma_coords(instr, use):
    """(q, row, col) of element e of lane l: PTX ISA 9.7.14.5 "Matrix fragments for mma"."""
    P = instr.elems_per_reg(use)
    E = instr.nregs(use) * P
    lane = np.arange(32)[:, None]
    e = np.arange(E)[None, :]
    full = np.zeros((32, E), np.int64)
    if instr.quadpair:  # m8n8k4 f16: one MMA per quadpair (9.7.14.5.1)
        q = (lane // 4) % 4 + full
        hi = 4 * (lane // 16)
        i = lane % 4
        if use == "a":
            rc = (i + hi, e) if instr.a_layout == "row" else (e + hi, i)
        elif use == "b":
            rc = (i, e + hi) if instr.b_layout == "row" else (e, i + hi)
        elif instr.elem_type(use) == "f16":
            rc = (i + hi, e)
        else:
            rc = ((lane & 1) + (e & 2) + hi, (e & 4) + (lane & 2) + (e & 1))
        return q, rc[0] + full, rc[1] + full
    g, t = lane // 4, lane % 4
    reg, j = e // P, e % P
    if use in ("c", "d"):
        row, col = g + 8 * (e // 2), 2 * t + e % 2
    elif use == "a":
        blocks_r = instr.m // 8
        row = g + 8 * (reg % blocks_r)
        col = (reg // blocks_r) * 4 * P + t * P + j
    else:
        row, col = reg * 4 * P + t * P + j, g + 0 * e
    return full, row + full, col + full


def ptx_wgmma_d(instr):
    """(row, col) of the accumulator, (128, NR, h): PTX ISA "Register fragments" for wgmma."""
    t = np.arange(128).reshape(-1, 1, 1)
    w, g, q = t // 32, (t % 32) // 4, t % 4
    if instr.d_format == "f16":
        i = np.arange(instr.n // 4).reshape(1, -1, 1)
        h = np.arange(2).reshape(1, 1, -1)
        row, col = 16 * w + g + 8 * (i % 2), 8 * (i // 2) + 2 * q + h
    else:
        i = np.arange(instr.n // 2).reshape(1, -1, 1)
        row, col = 16 * w + g + 8 * ((i % 4) // 2), 8 * (i // 4) + 2 * q + (i % 2)
    shape = (128, i.shape[1], 2 if instr.d_format == "f16" else 1)
    return np.broadcast_to(row, shape), np.broadcast_to(col, shape)


def ptx_wgmma_a(instr):
    """(row, col) of A from registers, (128, 4, per)."""
    t = np.arange(128).reshape(-1, 1, 1)
    w, g, q = t // 32, (t % 32) // 4, t % 4
    r = np.arange(4).reshape(1, -1, 1)
    per = 32 // instr.a_bits
    j = np.arange(per).reshape(1, 1, -1)
    nbytes = instr.a_bits // 8
    row = 16 * w + g + 8 * (r % 2)
    col = (4 // nbytes) * q + j + (16 // nbytes) * (r // 2)
    shape = (128, 4, per)
    return np.broadcast_to(row, shape), np.broadcast_to(col, shape)


def _wgmma_qualifiers():
    out = []
    for a, d, n, k in itertools.product(("f16", "bf16", "tf32", "e4m3", "e5m2", "s8", "u8",
                                         "b1"), ("f32", "f16", "s32"), range(8, 257, 8),
                                        (8, 16, 32, 256)):
        for b in (("e4m3", "e5m2") if a in ("e4m3", "e5m2") else (a,)):
            q = f"m64n{n}k{k}.{d}.{a}.{b}" + (".and.popc" if a == "b1" else "")
            try:
                wgmma_parse.parse_wgmma(q)
            except ValueError:
                continue
            out.append(q)
    return out


# The sm_90a configurations (the captures'); kind::f8f6f4 (sm_120a) has no capture here.
MMA = tuple(q for q in mma_sync_parse.mma_instructions() if ".kind::" not in q)
WGMMA = _wgmma_qualifiers()

# --------------------------------------------------------------------------- tests


def test_every_configuration_is_covered():
    assert len(MMA) == 94 and len(WGMMA) == 438


@pytest.mark.parametrize("qualifier", MMA)
def test_mma_layouts_are_the_ptx_formulas(qualifier):
    instr = mma_sync_parse.parse_mma(qualifier)
    for use in "abcd":
        want = ptx_mma_coords(instr, use)
        got = mma_sync_registers.fragment_coords(instr, use)
        for w, g in zip(want, got, strict=True):
            np.testing.assert_array_equal(g, w, err_msg=f"{qualifier} {use}")
        lay = mma_sync_registers.operand_layout(instr, use)
        assert lay.num_lanes == 32 and lay.shape == instr.logical_shape(use)


def test_mma_named_layouts():
    # Each named layout is the operand layout of the instructions of its family.
    i = mma_sync_parse.parse_mma
    assert mma_sync_registers.operand_layout(i("m16n8k8.row.col.f32.tf32.tf32.f32"), "a") == \
        layouts.MMA_A_M16.take(4, (16, 8))
    assert mma_sync_registers.operand_layout(i("m8n8k4.row.col.f64.f64.f64.f64"), "a") == \
        layouts.MMA_A_M8.take(1, (8, 4))
    assert mma_sync_registers.operand_layout(i("m16n8k16.row.col.f64.f64.f64.f64"), "b") == \
        layouts.MMA_B.take(4, (16, 8))
    for q in MMA:
        ins = i(q)
        for use in "cd":
            lay = mma_sync_registers.operand_layout(ins, use)
            if ins.quadpair:
                want = (layouts.MMA_M8N8K4_CD_F16 if ins.elem_type(use) == "f16"
                        else layouts.MMA_M8N8K4_CD_F32)
            else:
                want = layouts.MMA_CD_M16N8 if ins.m == 16 else layouts.MMA_CD_M8N8
            assert lay == want, (q, use)
        if ins.quadpair:
            a = {"row": layouts.MMA_M8N8K4_A_ROW, "col": layouts.MMA_M8N8K4_A_COL}
            b = {"row": layouts.MMA_M8N8K4_B_ROW, "col": layouts.MMA_M8N8K4_B_COL}
            assert mma_sync_registers.operand_layout(ins, "a") == a[ins.a_layout]
            assert mma_sync_registers.operand_layout(ins, "b") == b[ins.b_layout]


@pytest.mark.parametrize("qualifier", WGMMA[::7] + WGMMA[-3:])
def test_wgmma_layouts_are_the_ptx_formulas(qualifier):
    instr = wgmma_parse.parse_wgmma(qualifier)
    for w, g in zip(ptx_wgmma_d(instr), wgmma_registers.d_layout(instr), strict=True):
        np.testing.assert_array_equal(g, w, err_msg=qualifier)
    assert wgmma_registers.d_register_layout(instr) == layouts.WGMMA_D.take(instr.n // 2,
                                                                            (64, instr.n))
    if instr.family.a_in_registers:
        for w, g in zip(ptx_wgmma_a(instr), wgmma_registers.a_layout(instr), strict=True):
            np.testing.assert_array_equal(g, w, err_msg=qualifier)


def test_wgmma_every_configuration():
    # All 438 configurations, without the parametrization's overhead.
    for q in WGMMA:
        instr = wgmma_parse.parse_wgmma(q)
        for w, g in zip(ptx_wgmma_d(instr), wgmma_registers.d_layout(instr), strict=True):
            np.testing.assert_array_equal(g, w, err_msg=q)
        if instr.family.a_in_registers:
            for w, g in zip(ptx_wgmma_a(instr), wgmma_registers.a_layout(instr), strict=True):
                np.testing.assert_array_equal(g, w, err_msg=q)


def test_wgmma_tiles_the_mma_warp_layouts():
    # Restricted to warp 0 (lanes 0..31), the wgmma layouts are mma.sync's m16 ones.
    d = layouts.WGMMA_D.take(4, (16, 8))
    assert d.lane_bases[:5] == layouts.MMA_CD_M16N8.lane_bases
    assert d.elem_bases == layouts.MMA_CD_M16N8.elem_bases
    a = layouts.WGMMA_A
    assert a.lane_bases[:5] == layouts.MMA_A_M16.lane_bases
    assert a.elem_bases == layouts.MMA_A_M16.elem_bases[:2]


def test_wmma_layouts_are_the_bases():
    # Every WMMA fragment type: its Layout's coordinates are what the bases say.
    for ft in _wmma_types():
        lane_b, elem_b = fragments.layout_bases(ft)
        lay = ft.register_layout()
        assert lay.lane_bases == tuple(lane_b) and lay.elem_bases == tuple(elem_b)
        rows, cols = fragments.lane_map(ft)
        lanes = np.arange(32)[:, None]
        elems = np.arange(ft.num_elements)[None, :]
        r = np.zeros_like(rows)
        c = np.zeros_like(cols)
        for idx, bases in ((lanes, lane_b), (elems, elem_b)):
            for bit, (dr, dc) in enumerate(bases):
                r ^= ((idx >> bit) & 1) * dr
                c ^= ((idx >> bit) & 1) * dc
        np.testing.assert_array_equal(rows, r)
        np.testing.assert_array_equal(cols, c)


def _wmma_types():
    out = []
    for use, (m, n, k), ty in itertools.product(
            ("matrix_a", "matrix_b", "accumulator"),
            ((16, 16, 16), (32, 8, 16), (8, 32, 16), (16, 16, 8), (8, 8, 4), (8, 8, 32),
             (8, 8, 128)),
            ("f16", "bf16", "tf32", "f64", "s8", "u8", "s4", "u4", "b1", "f32", "s32")):
        for layout in ((None,) if use == "accumulator" else ("row_major", "col_major")):
            try:
                out.append(fragments.fragment_type(use, m, n, k, ty, layout))
                break
            except ValueError:
                continue
    assert len(out) > 40
    return out


def test_layout_is_static_and_checked():
    lay = layouts.MMA_CD_M16N8
    assert hash(lay) == hash(Layout("another name", (16, 8), lay.lane_bases, lay.elem_bases))
    assert {lay: 1}[layouts.MMA_CD_M16N8.take(4)] == 1
    with pytest.raises(ValueError, match="coordinates"):
        Layout("bad", (16, 8), ((1, 0, 0),), ())
    with pytest.raises(ValueError, match="num_elements"):
        Layout("bad", (16, 8), (), ((0, 1), (8, 0)), num_elements=2)
    with pytest.raises(ValueError, match="more"):
        layouts.MMA_CD_M8N8.take(4)
    with pytest.raises(ValueError, match="power of two"):
        layouts.MMA_B.packed(3, 0)
    with pytest.raises(ValueError, match="two-dimensional"):
        layouts.MMA_M8N8K4_A_ROW.text()


def test_text_draws_the_cd_layout():
    text = layouts.MMA_CD_M16N8.text().splitlines()
    assert text[1].split()[:5] == ["0", "0:0", "0:1", "1:0", "1:1"]
    assert text[9].split()[:3] == ["8", "0:2", "0:3"]


# Slow: the same examples run by default in tests/test_docs.py::test_docstring_example.
@pytest.mark.slow
def test_doctests():
    assert doctest.testmod(layouts).failed == 0
