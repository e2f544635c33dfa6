"""The register form of ``mma.sync ... .block_scale`` (jaxwarp/_src/instructions/
mma_sync_block_scale.py) reduces to the logical one, ``mma_block_scale_logical``.

The registers are built here from the PTX ISA's formulas (the m16n8k32 / m16n8k64
fragment tables, "Matrix Fragments for mma.m16n8k32 / m16n8k64", and the scale
selectors of "Block Scaling for mma.sync"), independently of the module's own maps;
lanes and bytes the selectors do not pick hold random bits, which must not matter.
"""

from __future__ import annotations

import zlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxwarp
from jaxwarp._src.instructions.mma_sync_block_scale import parse_mma_block_scale

LANE = np.arange(32)
G, T = LANE // 4, LANE % 4


def _a_coords(k: int):
    """(register, shift, row, col) per lane and element of A (ISA fragment formulas)."""
    if k == 32:  # one element per byte, i = 0..15
        i = np.arange(16)
        row = G[:, None] + 8 * ((i // 4) % 2)
        col = T[:, None] * 4 + (i & 3) + 16 * (i >= 8)
        return i // 4, 8 * (i % 4), row, col
    i = np.arange(32)  # m16n8k64: eight e2m1 per register
    row = G[:, None] + 8 * ((i // 8) % 2)
    col = T[:, None] * 8 + (i & 7) + 32 * (i >= 16)
    return i // 8, 4 * (i % 8), row, col


def _b_coords(k: int):
    if k == 32:
        i = np.arange(8)
        return i // 4, 8 * (i % 4), T[:, None] * 4 + (i & 3) + 16 * (i >= 4), G[:, None] + 0 * i
    i = np.arange(16)
    return i // 8, 4 * (i % 8), T[:, None] * 8 + (i & 7) + 32 * (i >= 8), G[:, None] + 0 * i


def _cd_coords():
    i = np.arange(4)
    return i, 0 * i, G[:, None] + 8 * (i >= 2), T[:, None] * 2 + (i & 1)


def _to_regs(x: np.ndarray, coords, nregs: int) -> np.ndarray:
    """(..., rows, cols) uint32 fields -> (..., 32, nregs) uint32 registers."""
    reg, shift, row, col = coords
    out = np.zeros(x.shape[:-2] + (32, nregs), np.uint32)
    fields = x[..., row, col].astype(np.uint32) << shift.astype(np.uint32)  # (..., 32, E)
    for r in range(nregs):
        out[..., r] = np.bitwise_or.reduce(fields[..., reg == r], axis=-1)
    return out


def _from_regs(regs: np.ndarray, coords, shape) -> np.ndarray:
    reg, _, row, col = coords
    out = np.zeros(regs.shape[:-2] + shape, np.uint32)
    out[..., row, col] = regs[..., LANE[:, None], reg]
    return out


def _scale_regs(rng, scales: np.ndarray, lane_of, byte_id: int) -> np.ndarray:
    """(..., R, vec) codes -> (..., 32, 1) registers: random bits, except byte
    ``byte_id + j`` of lane ``lane_of[r]``, which holds scale j of row / column r."""
    regs = rng.integers(0, 2**32, scales.shape[:-2] + (32,), dtype=np.uint64).astype(np.uint32)
    for r, lane in enumerate(lane_of):
        for j in range(scales.shape[-1]):
            sh = np.uint32(8 * (byte_id + j))
            regs[..., lane] = (regs[..., lane] & ~(np.uint32(0xFF) << sh)) | (
                scales[..., r, j].astype(np.uint32) << sh)
    return regs[..., None]


LSB = {"e2m1": 2, "e2m3": 0, "e3m2": 0, "e4m3": 0, "e5m2": 0}
CODE_BITS = {"e2m1": 4, "e2m3": 6, "e3m2": 6, "e4m3": 8, "e5m2": 8}

# (qualifier, byte_id_a, thread_id_a, byte_id_b, thread_id_b): every kind and scale_vec.
# The default run takes one (about 15 s of compiling on a 2-core VM); -m slow the rest.
CASES = [
    pytest.param("m16n8k32.row.col.kind::mxf8f6f4.block_scale.scale_vec::1X.f32.e4m3.e2m1"
                 ".f32.ue8m0", 3, 1, 2, 3, id="mxf8f6f4-1X-e4m3-e2m1", marks=pytest.mark.slow),
    pytest.param("m16n8k32.row.col.kind::mxf8f6f4.block_scale.f32.e3m2.e5m2.f32.ue8m0",
                 1, 0, 0, 2, id="mxf8f6f4-1X-e3m2-e5m2", marks=pytest.mark.slow),
    pytest.param("m16n8k32.row.col.kind::mxf8f6f4.block_scale.f32.e2m3.e2m3.f32.ue8m0",
                 0, 1, 3, 1, id="mxf8f6f4-1X-e2m3", marks=pytest.mark.slow),
    pytest.param("m16n8k64.row.col.kind::mxf4.block_scale.scale_vec::2X.f32.e2m1.e2m1.f32"
                 ".ue8m0", 2, 1, 0, 1, id="mxf4-2X", marks=pytest.mark.slow),
    pytest.param("m16n8k64.row.col.kind::mxf4nvf4.block_scale.scale_vec::2X.f32.e2m1.e2m1"
                 ".f32.ue8m0", 0, 0, 2, 3, id="mxf4nvf4-2X-ue8m0", marks=pytest.mark.slow),
    pytest.param("m16n8k64.row.col.kind::mxf4nvf4.block_scale.scale_vec::4X.f32.e2m1.e2m1"
                 ".f32.ue8m0", 0, 0, 0, 2, id="mxf4nvf4-4X-ue8m0", marks=pytest.mark.slow),
    pytest.param("m16n8k64.row.col.kind::mxf4nvf4.block_scale.scale_vec::4X.f32.e2m1.e2m1"
                 ".f32.ue4m3", 0, 1, 0, 3, id="mxf4nvf4-4X-ue4m3"),
]


@pytest.mark.parametrize("q, byte_a, tid_a, byte_b, tid_b", CASES)
def test_registers_reduce_to_the_logical_form(q, byte_a, tid_a, byte_b, tid_b):
    instr = parse_mma_block_scale(q)
    rng = np.random.default_rng(zlib.crc32(instr.qualifier.encode()))
    W, K, vec = 2, instr.k, instr.scale_vec  # two warps: leading batch axis
    a = rng.integers(0, 2 ** CODE_BITS[instr.a_format], (W, 16, K)).astype(np.uint8)
    b = rng.integers(0, 2 ** CODE_BITS[instr.b_format], (W, K, 8)).astype(np.uint8)
    c = (rng.standard_normal((W, 16, 8)) * 2.0 ** rng.integers(-8, 8, (W, 16, 8))).astype(
        np.float32)
    lo, hi = (0x18, 0x58) if instr.scale_format == "ue4m3" else (112, 142)
    sa = rng.integers(lo, hi, (W, 16, vec)).astype(np.uint8)
    sb = rng.integers(lo, hi, (W, vec, 8)).astype(np.uint8)
    want = jaxwarp.mma_block_scale_logical(
        a, b, c, sa, sb, a_format=instr.a_format, b_format=instr.b_format, kind=instr.kind,
        scale_format=instr.scale_format, block=instr.block)

    packed = K == 64
    a_regs = _to_regs(a.astype(np.uint32) << (0 if packed else LSB[instr.a_format]),
                      _a_coords(K), 4)
    b_regs = _to_regs(b.astype(np.uint32) << (0 if packed else LSB[instr.b_format]),
                      _b_coords(K), 2)
    c_regs = _to_regs(c.view(np.uint32), _cd_coords(), 4)
    m = np.arange(16)
    # thread-id-a picks the thread pair 2 * tid_a, 2 * tid_a + 1 of each quad (the lower
    # lane holds row g, the upper row g + 8); thread-id-b the thread tid_b of quad n.
    sa_regs = _scale_regs(rng, sa, 4 * (m % 8) + 2 * tid_a + m // 8, byte_a)
    sb_regs = _scale_regs(rng, np.swapaxes(sb, -1, -2), 4 * np.arange(8) + tid_b, byte_b)

    d = jaxwarp.mma_block_scale(q, a_regs, b_regs, c_regs, sa_regs, sb_regs,
                                byte_id_a=byte_a, thread_id_a=tid_a, byte_id_b=byte_b,
                                thread_id_b=tid_b)
    assert d.shape == (W, 32, 4) and d.dtype == jnp.uint32
    got = _from_regs(np.asarray(d), _cd_coords(), (16, 8))
    np.testing.assert_array_equal(got, np.asarray(want).view(np.uint32))


def test_parser_defaults_orders_and_refusals():
    mx = parse_mma_block_scale("mma.sync.aligned.m16n8k32.row.col.kind::mxf8f6f4.block_scale"
                               ".f32.e2m1.e2m3.f32.ue8m0")
    assert (mx.scale_vec, mx.block, mx.byte_ids) == (1, 32, (0, 1, 2, 3))
    assert parse_mma_block_scale(mx.ptx) == mx
    # kind / block_scale / scale_vec before the shape, as CUTLASS writes it.
    q4 = "kind::mxf4nvf4.block_scale.scale_vec::4X.m16n8k64.row.col.f32.e2m1.e2m1.f32.ue4m3"
    nv = parse_mma_block_scale(q4)
    assert nv.qualifier == ("m16n8k64.row.col.kind::mxf4nvf4.block_scale.scale_vec::4X.f32"
                            ".e2m1.e2m1.f32.ue4m3") and nv.byte_ids == (0,)
    assert parse_mma_block_scale(nv.qualifier.replace(".scale_vec::4X", "").replace(
        "mxf4nvf4", "mxf4").replace("ue4m3", "ue8m0")).scale_vec == 2
    bad = {
        "kind::mxf4nvf4 needs .scale_vec::NX": "m16n8k64.row.col.kind::mxf4nvf4.block_scale"
                                               ".f32.e2m1.e2m1.f32.ue8m0",
        "scale type ue4m3 is not allowed": "m16n8k64.row.col.kind::mxf4nvf4.block_scale"
                                           ".scale_vec::2X.f32.e2m1.e2m1.f32.ue4m3",
        ".scale_vec::2X is not allowed with kind::mxf8f6f4": (
            "m16n8k32.row.col.kind::mxf8f6f4.block_scale.scale_vec::2X.f32.e4m3.e4m3.f32"
            ".ue8m0"),
        "a type e4m3 is not a kind::mxf4 type": "m16n8k64.row.col.kind::mxf4.block_scale"
                                                ".f32.e4m3.e2m1.f32.ue8m0",
        "kind::mxf4 has shape m16n8k64": "m16n8k32.row.col.kind::mxf4.block_scale.f32.e2m1"
                                         ".e2m1.f32.ue8m0",
        "only .row.col": "m16n8k32.col.col.kind::mxf8f6f4.block_scale.f32.e4m3.e4m3.f32"
                         ".ue8m0",
    }
    for msg, q in bad.items():
        with pytest.raises(ValueError, match=msg.replace(".", r"\.").replace("(", r"\(")):
            parse_mma_block_scale(q)


Q1 = "m16n8k32.row.col.kind::mxf8f6f4.block_scale.f32.e4m3.e4m3.f32.ue8m0"
Q2 = "m16n8k64.row.col.kind::mxf4.block_scale.f32.e2m1.e2m1.f32.ue8m0"
Q4 = "m16n8k64.row.col.kind::mxf4nvf4.block_scale.scale_vec::4X.f32.e2m1.e2m1.f32.ue8m0"
REGS = (np.zeros((32, 4), np.uint32), np.zeros((32, 2), np.uint32),
        np.zeros((32, 4), np.uint32), np.zeros((32, 1), np.uint32),
        np.zeros((32, 1), np.uint32))


@pytest.mark.parametrize("q, kw, msg", [
    (Q2, {"byte_id_a": 1}, r"byte_id_a=1 is not a valid selector with \.scale_vec::2X; "
                           r"allowed: \(0, 2\)"),
    (Q1, {"byte_id_b": 4}, r"byte_id_b=4 .*allowed: \(0, 1, 2, 3\)"),
    (Q4, {"byte_id_a": 2}, r"byte_id_a=2 .*scale_vec::4X; allowed: \(0,\)"),
    (Q1, {"thread_id_a": 2}, r"thread_id_a=2 .*allowed: \(0, 1\)"),
    (Q1, {"thread_id_b": -1}, r"thread_id_b=-1 .*allowed: \(0, 1, 2, 3\)"),
    (Q1, {"arch": "sm_100a"}, r"arch='sm_100a' .*sm_120a"),
], ids=["byte_id_a-2X", "byte_id_b-1X", "byte_id_a-4X", "thread_id_a", "thread_id_b", "arch"])
def test_out_of_range_selectors_are_refused_eagerly_and_under_jit(q, kw, msg):
    with pytest.raises(ValueError, match=msg):
        jaxwarp.mma_block_scale(q, *REGS, **kw)
    with pytest.raises(ValueError, match=msg):
        jax.jit(lambda *r: jaxwarp.mma_block_scale(q, *r, **kw))(*REGS)


def test_traced_selector_and_bad_registers_name_the_argument():
    with pytest.raises(TypeError, match="thread_id_b is a static argument"):
        jax.jit(lambda t: jaxwarp.mma_block_scale(Q1, *REGS, thread_id_b=t))(1)
    with pytest.raises(TypeError, match=r"scale_b_data of .* must be a \(\.\.\., 32, 1\) "
                                        r"uint32 .*got shape \(32,\)"):
        jaxwarp.mma_block_scale(Q1, *REGS[:4], np.zeros(32, np.uint32))
    with pytest.raises(TypeError, match=r"b_regs of m16n8k64\.row\.col\.kind::mxf4\..* must be "
                                        r"a \(\.\.\., 32, 2\) uint32 .*got shape \(32, 4\)"):
        jaxwarp.mma_block_scale(Q2, REGS[0], REGS[0], *REGS[2:])
