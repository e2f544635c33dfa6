"""tcgen05.mma ... .block_scale through descriptors (jaxwarp/_src/instructions/
tcgen05_block_scale.py) reduces to the logical form, ``mma_block_scale_logical``.

A and B are stored in shared memory in canonical layouts (K-major and M/N-major,
swizzled or not), the instruction descriptor is built here from the PTX ISA's tables
("Instruction descriptor format for .kind::mxf8f6f4" / "for .kind::mxf4 and
.kind::mxf4nvf4"), and D must equal the logical form's bits.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

import jaxwarp
from jaxwarp._src.instructions import tcgen05 as T
from jaxwarp._src.instructions import tcgen05_block_scale as TB
from jaxwarp._src.instructions.tcgen05_parse import Tcgen05Instruction

AB = {"mxf8f6f4": {"e4m3": 0, "e5m2": 1, "e2m3": 3, "e3m2": 4, "e2m1": 5},
      "mxf4": {"e2m1": 1}, "mxf4nvf4": {"e2m1": 1}}
LSB = {"e2m1": 2, "e2m3": 0, "e3m2": 0, "e4m3": 0, "e5m2": 0}
CODE_BITS = {"e2m1": 4, "e2m3": 6, "e3m2": 6, "e4m3": 8, "e5m2": 8}


def _idesc(kind, n, a, b, scale, ta=0, tb=0, neg_a=0, neg_b=0):
    """The ISA's table, bit by bit (M = 128, dense, scale factor IDs 0)."""
    return (AB[kind][a] << 7 | AB[kind][b] << 10 | neg_a << 13 | neg_b << 14 | ta << 15
            | tb << 16 | (n >> 3) << 17 | (scale == "ue8m0") << 23 | (128 >> 7) << 27)


def _layout(rows, kbytes, mn_major, sw, base):
    if not mn_major:
        lbo, sbo = (128, 256) if sw == 0 else (16, 8 * sw)
        return jaxwarp.make_smem_descriptor(base, lbo, sbo, swizzle=sw), sbo * (rows // 8)
    if sw == 0:
        sbo, lbo = 128, 128 * -(-rows // 16)
        return jaxwarp.make_smem_descriptor(base, lbo, sbo, swizzle=0), lbo * -(-kbytes // 8)
    lbo = 8 * sw
    sbo = lbo * -(-rows // sw)
    return jaxwarp.make_smem_descriptor(base, lbo, sbo, swizzle=sw), sbo * -(-kbytes // 8)


# kind, N, a, b, scale, block, opcode suffix, (A, B) M/N-major, swizzles. The default run
# takes the first (about 15 s of compiling on a 2-core VM); -m slow the rest.
CASES = [
    pytest.param("mxf8f6f4", 16, "e4m3", "e2m1", "ue8m0", 32, "", (True, False), (64, 128),
                 id="mxf8f6f4-e4m3-e2m1"),
    pytest.param("mxf4nvf4", 8, "e2m1", "e2m1", "ue4m3", 16, ".block16", (False, False),
                 (0, 32), id="mxf4nvf4-block16-ue4m3", marks=pytest.mark.slow),
    pytest.param("mxf4", 24, "e2m1", "e2m1", "ue8m0", 32, "", (False, False), (128, 0),
                 id="mxf4-block32", marks=pytest.mark.slow),
]


@pytest.mark.parametrize("kind, n, a_fmt, b_fmt, scale, block, sfx, major, sw", CASES)
def test_descriptor_path_reduces_to_the_logical_form(kind, n, a_fmt, b_fmt, scale, block,
                                                     sfx, major, sw):
    rng = np.random.default_rng(n)
    packed = kind != "mxf8f6f4"
    K = 64 if packed else 32
    a = rng.integers(0, 2 ** CODE_BITS[a_fmt], (128, K)).astype(np.uint8)
    b = rng.integers(0, 2 ** CODE_BITS[b_fmt], (K, n)).astype(np.uint8)
    c = (rng.standard_normal((128, n)) * 8).astype(np.float32)
    lo, hi = (0x18, 0x58) if scale == "ue4m3" else (112, 142)
    sa = rng.integers(lo, hi, (128, K // block)).astype(np.uint8)
    sb = rng.integers(lo, hi, (n, K // block)).astype(np.uint8)
    want = jaxwarp.mma_block_scale_logical(a, b, c, sa, sb.T, a_format=a_fmt, b_format=b_fmt,
                                           kind=kind, scale_format=scale, block=block,
                                           instruction="tcgen05", arch="sm_100a")
    # Shared memory: one element per byte (code at its lsb), or two e2m1 per byte, the
    # lower k in the lower nibble.
    if packed:
        a_bytes, b_bytes = a[:, 0::2] | a[:, 1::2] << 4, b[0::2] | b[1::2] << 4
        dense = Tcgen05Instruction(128, n, K // 2, "i8", "s32", "u8", "u8")
    else:
        a_bytes, b_bytes = a << LSB[a_fmt], b << LSB[b_fmt]
        dense = Tcgen05Instruction(128, n, K, "f8f6f4", "f32", a_fmt, b_fmt)
    da, size_a = _layout(128, K // (2 if packed else 1), major[0], sw[0], 0)
    base_b = -(-size_a // 1024) * 1024
    db, size_b = _layout(n, K // (2 if packed else 1), major[1], sw[1], base_b)
    smem = jnp.zeros(base_b + size_b + 1024, jnp.uint8)
    smem = T.write_operand(smem, da, dense, "a", a_bytes, transpose=major[0])
    smem = T.write_operand(smem, db, dense, "b", b_bytes, transpose=major[1])
    idesc = _idesc(kind, n, a_fmt, b_fmt, scale, *map(int, major))
    q = f"m128n{n}k{K}.kind::{kind}.block{block}.f32.{a_fmt}.{b_fmt}.{scale}"
    assert int(TB.make_block_scale_instr_descriptor(
        q, transpose_a=major[0], transpose_b=major[1])) == idesc
    d = jaxwarp.tcgen05_mma_block_scale(f"tcgen05.mma.cta_group::1.kind::{kind}.block_scale"
                                        f"{sfx}", c, da, db, idesc, sa, sb, smem)
    np.testing.assert_array_equal(np.asarray(d).view(np.uint32),
                                  np.asarray(want).view(np.uint32))
    # Negating both operands (idesc bits 13, 14) leaves every product as it was.
    neg = jaxwarp.tcgen05_mma_block_scale(f"kind::{kind}.block_scale{sfx}", c, da, db,
                                          idesc | 3 << 13, sa, sb, smem)
    np.testing.assert_array_equal(np.asarray(neg).view(np.uint32),
                                  np.asarray(want).view(np.uint32))


def test_descriptor_fields_round_trip_and_refusals():
    q = "m128n256k64.kind::mxf4nvf4.block16.f32.e2m1.e2m1.ue4m3"
    d = TB.make_block_scale_instr_descriptor(q, neg_b=True)
    f = TB.decode_block_scale_instr_descriptor(d, "mxf4nvf4")
    assert (f.m, f.n, f.k, f.scale_format, f.neg_a, f.neg_b) == (128, 256, 64, "ue4m3",
                                                                 False, True)
    with pytest.raises(NotImplementedError, match="scale factor IDs sfa_id=2"):
        TB.decode_block_scale_instr_descriptor(int(d) | 2 << 29, "mxf4nvf4")
    with pytest.raises(NotImplementedError, match="K = 96"):
        TB.decode_block_scale_instr_descriptor(int(d) | 1 << 31, "mxf4nvf4")
    with pytest.raises(ValueError, match="reserved bit 12"):
        TB.decode_block_scale_instr_descriptor(int(d) | 1 << 12, "mxf4")
    with pytest.raises(ValueError, match="atype code 0 is not defined for kind::mxf4"):
        TB.decode_block_scale_instr_descriptor(int(d) & ~(7 << 7), "mxf4")
    with pytest.raises(ValueError, match="K-major only"):
        TB.make_block_scale_instr_descriptor(q, transpose_a=True)
    with pytest.raises(ValueError, match=r"kind::mxf4nvf4 needs a scale vector size"):
        TB.tcgen05_mma_block_scale("kind::mxf4nvf4.block_scale", np.zeros((128, 256),
                                   np.float32), 0, 0, d, np.zeros((128, 4), np.uint8),
                                   np.zeros((256, 4), np.uint8), np.zeros(64, np.uint8))
    with pytest.raises(ValueError, match=r"\.scale_vec::2X is not allowed with "
                                         r"kind::mxf8f6f4"):
        TB.tcgen05_mma_block_scale("kind::mxf8f6f4.block_scale.scale_vec::2X",
                                   np.zeros((128, 8), np.float32), 0, 0, 0x8821400,
                                   np.zeros((128, 1), np.uint8), np.zeros((8, 1), np.uint8),
                                   np.zeros(64, np.uint8))
