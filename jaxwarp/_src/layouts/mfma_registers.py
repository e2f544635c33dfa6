"""Where AMD's ``v_mfma_*`` operands sit in a wave64's registers (CDNA1-3).

:func:`mfma_lane_map` gives, for each of the 64 lanes and each element a lane holds (its
"item", in register order), the (block, row, column) of the logical matrix: A (M, K), B
(K, N), C and D (M, N), ``block`` the block of a multi-block form. Items are packed
low-bits first into 32-bit registers: two f16 / bf16 or four fp8 / bf8 per register, one
f32 per register, one f64 per register pair; item ``i`` of A is in register
``i // per_register``. The rules (the same for every generation):

* A and B: lane ``l`` holds row ``l % M`` of A (column ``l % N`` of B); its group
  ``l // M`` selects the block and the k range, ``items`` consecutive k per lane (for the
  f64 4-block forms the block varies fastest over the groups, otherwise the k range);
* C and D (not f64): lane ``l`` holds column ``l % N``; item ``v`` with slot
  ``s = (v // 4) * (64 / N) + l // N`` holds row ``4 * (s % (M / 4)) + v % 4`` of block
  ``s // (M / 4)``; f64: slot ``s = l // N + (64 / N) * v``, block ``s % blocks``, row
  ``s // blocks``.

These layouts were checked against AMD's Matrix Instruction Calculator for all 64
instructions (the tests keep its output), not against hardware.

Example:
    >>> m = mfma_lane_map("v_mfma_f32_32x32x8_f16", "D", arch="gfx942")
    >>> m.shape, m[40, 9].tolist()  # lane 40, register v9: D[21][8]
    ((64, 16, 3), [0, 21, 8])
"""

from __future__ import annotations

import numpy as np

from jaxwarp._src import checks
from jaxwarp._src.catalogue import mfma_table

__all__ = ["MATRICES", "mfma_lane_map"]

#: The matrices of an MFMA (C has D's layout).
MATRICES = ("A", "B", "C", "D")
_LANES = 64


def mfma_lane_map(suffix: str, matrix: str, arch: str = "gfx942") -> np.ndarray:
    """(64, items, 3) int array: the (block, row, column) that each lane's item holds.

    Args:
      suffix: the instruction, as ``jaxwarp.mfma_logical`` takes it.
      matrix: ``"A"``, ``"B"``, ``"C"`` or ``"D"``.
      arch: the architecture, as ``jaxwarp.mfma_logical`` takes it.

    Raises:
      ValueError: an unknown matrix, instruction or architecture (listing what is allowed).
    """
    matrix = checks.static_choice(matrix, "matrix", MATRICES)
    row = mfma_table.mfma_row(suffix, arch)
    M, N, K, B = row.m, row.n, row.k, row.blocks
    f64 = row.c_format == "f64"
    lane = np.arange(_LANES)[:, None]
    if matrix in ("A", "B"):
        rows = M if matrix == "A" else N
        items = rows * K * B // _LANES
        item = np.arange(items)[None, :]
        idx, grp = lane % rows, lane // rows
        kg = K // items
        pb, pk = (grp % B, grp // B) if f64 else (grp // kg, grp % kg)
        k = items * pk + item
        idx, pb = np.broadcast_to(idx, k.shape), np.broadcast_to(pb, k.shape)
        out = (pb, idx, k) if matrix == "A" else (pb, k, idx)
    else:
        items = M * N * B // _LANES
        item = np.arange(items)[None, :]
        G = _LANES // N
        if f64:
            s = lane // N + G * item
            pb, r = s % B, s // B
        else:
            s = (item // 4) * G + lane // N
            pb, r = s // (M // 4), 4 * (s % (M // 4)) + item % 4
        out = (pb, r, np.broadcast_to(lane % N, r.shape))
    return np.stack(out, axis=-1).astype(np.int32)
