"""Where each element of a WMMA fragment sits in the lanes' registers: the lane maps.

The layouts here are functions of a fragment type's ``(use, m, n, k, type)`` (see
``fragment_types.FragmentType``; the public ``lane_map``, ``lane_map_text``,
``layout_bases`` and ``register_layout`` in ``fragments.py`` take a type or those
five).

CUDA calls the mapping from (lane, i) to matrix element unspecified. This module
reproduces what an H100 (sm_90) does, element for element, for every fragment type
of the WMMA table (``tests/data/h100_layout.npz`` checks each one). Every layout is
linear over GF(2): the (row, col) of lane ``l``, element ``i`` is the XOR of one
basis vector per set bit of ``l`` and of ``i``. The bases follow from three rules:

* Atom: lane ``l`` holds one 32-bit word (a 64-bit one for f64) of an 8 x 4-word
  block: row ``l >> 2`` and word ``l & 3`` of that row, where a word is ``32 / bits``
  consecutive elements along k (for A and B) or 2 along n (accumulators, whatever
  their type). So lane bits 0, 1 step along k (n), lane bits 2..4 step rows 1, 2, 4.
* Tiles: further element-index bits step the atom over the matrix, for A (and the
  accumulator) first to rows 8..15, then along k (n), then to rows 16..31; for B
  first along k, then along n.
* Transpose: ``m8n32k16`` is done as ``m32n8k16`` on transposed operands, so its A
  has the layout of the transposed ``m32n8k16`` B (and vice versa) and its
  accumulator that of the transposed ``m32n8k16`` accumulator.

The memory layout (row_major / col_major) changes only how ``load_matrix_sync``
reads memory, never what lands in the registers. ``f16`` A and B fragments have
16 elements per lane (CUDA's ``__frag_base<__half, 16>``) but, from sm_80 on, hold
only 8 distinct ones: ``x[8:16]`` repeats ``x[0:8]`` (for ``m32n8k16`` B and
``m8n32k16`` A, four copies of ``x[0:4]``). ``s4``/``u4`` pack 8 elements into one
32-bit word (element ``j`` in bits ``4j..4j+3``), ``b1`` 32 (element ``j`` in bit ``j``).

Lane maps (``lane_map_text``), each cell ``lane:i``. ``f16`` ``matrix_a`` m16n16k16
(row_major and col_major alike; ``x[8:16]`` repeats ``x[0:8]``), rows m, cols k::

            0    1    2    3    4    5    6    7    8    9   10   11   12   13   14   15
       0  0:0  0:1  1:0  1:1  2:0  2:1  3:0  3:1  0:4  0:5  1:4  1:5  2:4  2:5  3:4  3:5
       1  4:0  4:1  5:0  5:1  6:0  6:1  7:0  7:1  4:4  4:5  5:4  5:5  6:4  6:5  7:4  7:5
       2  8:0  8:1  9:0  9:1 10:0 10:1 11:0 11:1  8:4  8:5  9:4  9:5 10:4 10:5 11:4 11:5
       3 12:0 12:1 13:0 13:1 14:0 14:1 15:0 15:1 12:4 12:5 13:4 13:5 14:4 14:5 15:4 15:5
       4 16:0 16:1 17:0 17:1 18:0 18:1 19:0 19:1 16:4 16:5 17:4 17:5 18:4 18:5 19:4 19:5
       5 20:0 20:1 21:0 21:1 22:0 22:1 23:0 23:1 20:4 20:5 21:4 21:5 22:4 22:5 23:4 23:5
       6 24:0 24:1 25:0 25:1 26:0 26:1 27:0 27:1 24:4 24:5 25:4 25:5 26:4 26:5 27:4 27:5
       7 28:0 28:1 29:0 29:1 30:0 30:1 31:0 31:1 28:4 28:5 29:4 29:5 30:4 30:5 31:4 31:5
       8  0:2  0:3  1:2  1:3  2:2  2:3  3:2  3:3  0:6  0:7  1:6  1:7  2:6  2:7  3:6  3:7
       9  4:2  4:3  5:2  5:3  6:2  6:3  7:2  7:3  4:6  4:7  5:6  5:7  6:6  6:7  7:6  7:7
      10  8:2  8:3  9:2  9:3 10:2 10:3 11:2 11:3  8:6  8:7  9:6  9:7 10:6 10:7 11:6 11:7
      11 12:2 12:3 13:2 13:3 14:2 14:3 15:2 15:3 12:6 12:7 13:6 13:7 14:6 14:7 15:6 15:7
      12 16:2 16:3 17:2 17:3 18:2 18:3 19:2 19:3 16:6 16:7 17:6 17:7 18:6 18:7 19:6 19:7
      13 20:2 20:3 21:2 21:3 22:2 22:3 23:2 23:3 20:6 20:7 21:6 21:7 22:6 22:7 23:6 23:7
      14 24:2 24:3 25:2 25:3 26:2 26:3 27:2 27:3 24:6 24:7 25:6 25:7 26:6 26:7 27:6 27:7
      15 28:2 28:3 29:2 29:3 30:2 30:3 31:2 31:3 28:6 28:7 29:6 29:7 30:6 30:7 31:6 31:7

Accumulator m16n16k16 (f16, f32 and s32 alike; also m16n16k8 f32)::

            0    1    2    3    4    5    6    7    8    9   10   11   12   13   14   15
       0  0:0  0:1  1:0  1:1  2:0  2:1  3:0  3:1  0:4  0:5  1:4  1:5  2:4  2:5  3:4  3:5
       1  4:0  4:1  5:0  5:1  6:0  6:1  7:0  7:1  4:4  4:5  5:4  5:5  6:4  6:5  7:4  7:5
       2  8:0  8:1  9:0  9:1 10:0 10:1 11:0 11:1  8:4  8:5  9:4  9:5 10:4 10:5 11:4 11:5
       3 12:0 12:1 13:0 13:1 14:0 14:1 15:0 15:1 12:4 12:5 13:4 13:5 14:4 14:5 15:4 15:5
       4 16:0 16:1 17:0 17:1 18:0 18:1 19:0 19:1 16:4 16:5 17:4 17:5 18:4 18:5 19:4 19:5
       5 20:0 20:1 21:0 21:1 22:0 22:1 23:0 23:1 20:4 20:5 21:4 21:5 22:4 22:5 23:4 23:5
       6 24:0 24:1 25:0 25:1 26:0 26:1 27:0 27:1 24:4 24:5 25:4 25:5 26:4 26:5 27:4 27:5
       7 28:0 28:1 29:0 29:1 30:0 30:1 31:0 31:1 28:4 28:5 29:4 29:5 30:4 30:5 31:4 31:5
       8  0:2  0:3  1:2  1:3  2:2  2:3  3:2  3:3  0:6  0:7  1:6  1:7  2:6  2:7  3:6  3:7
       9  4:2  4:3  5:2  5:3  6:2  6:3  7:2  7:3  4:6  4:7  5:6  5:7  6:6  6:7  7:6  7:7
      10  8:2  8:3  9:2  9:3 10:2 10:3 11:2 11:3  8:6  8:7  9:6  9:7 10:6 10:7 11:6 11:7
      11 12:2 12:3 13:2 13:3 14:2 14:3 15:2 15:3 12:6 12:7 13:6 13:7 14:6 14:7 15:6 15:7
      12 16:2 16:3 17:2 17:3 18:2 18:3 19:2 19:3 16:6 16:7 17:6 17:7 18:6 18:7 19:6 19:7
      13 20:2 20:3 21:2 21:3 22:2 22:3 23:2 23:3 20:6 20:7 21:6 21:7 22:6 22:7 23:6 23:7
      14 24:2 24:3 25:2 25:3 26:2 26:3 27:2 27:3 24:6 24:7 25:6 25:7 26:6 26:7 27:6 27:7
      15 28:2 28:3 29:2 29:3 30:2 30:3 31:2 31:3 28:6 28:7 29:6 29:7 30:6 30:7 31:6 31:7
"""

from __future__ import annotations

import functools

import numpy as np

from jaxwarp._src import checks
from jaxwarp._src.catalogue import wmma_table as table
from jaxwarp._src.layouts import layouts

WARP_SIZE = checks.WARP_SIZE


def num_elements(use: str, m: int, n: int, k: int, type: str) -> int:
    """CUDA's ``frag.num_elements`` of a fragment type (packed elements counted singly)."""
    if use != "accumulator" and type == "f16":
        return 16  # __frag_base<__half, 16> for every shape; duplicated from sm_80 on.
    rows, cols = {"matrix_a": (m, k), "matrix_b": (k, n), "accumulator": (m, n)}[use]
    return rows * cols // WARP_SIZE


def _operand_bases(role: str, r: int, kdim: int, w: int, nbits: int):
    """Bases in (r, k) coordinates of an operand whose words hold ``w`` k-elements."""
    word = [(0, 1 << i) for i in range(w.bit_length() - 1)]
    lane = [(0, w), (0, 2 * w), (1, 0), (2, 0), (4, 0)]
    ktiles = [(0, t) for t in _powers(4 * w, kdim)]
    rtiles = [(t, 0) for t in _powers(8, r)]
    extra = rtiles[:1] + ktiles + rtiles[1:] if role == "a" else ktiles + rtiles
    elem = (word + extra + [(0, 0)] * nbits)[:nbits]
    return lane, elem


def _powers(start: int, end: int):
    t = start
    while t < end:
        yield t
        t *= 2


def layout_bases_of(use: str, m: int, n: int, k: int, type: str):
    """(lane bases, element bases) of a fragment type, by the rules above."""
    nbits = num_elements(use, m, n, k, type).bit_length() - 1
    bits = table.ELEMENT_TYPES[type].bits
    swap = lambda vs: [(c, r) for r, c in vs]  # noqa: E731
    if use == "accumulator":
        if m >= n:
            return _operand_bases("a", m, n, 2, nbits)
        lane, elem = _operand_bases("a", n, m, 2, nbits)
        return swap(lane), swap(elem)
    w = max(1, 32 // bits)
    # Canonical shapes have m >= n; m8n32k16 runs as m32n8k16 with A and B swapped.
    if use == "matrix_a":
        lane, elem = _operand_bases("a" if m >= n else "b", m, k, w, nbits)
        return lane, elem  # (m, k) is A's (row, col)
    lane, elem = _operand_bases("b" if m >= n else "a", n, k, w, nbits)
    return swap(lane), swap(elem)  # (n, k) -> B's (k, n)


@functools.cache
def register_layout_of(use: str, m: int, n: int, k: int, type: str) -> layouts.Layout:
    """The bases as one ``layouts.Layout`` (cached)."""
    lane_b, elem_b = layout_bases_of(use, m, n, k, type)
    shape = {"matrix_a": (m, k), "matrix_b": (k, n)}.get(use, (m, n))
    return layouts.wmma_layout(f"wmma {use} m{m}n{n}k{k} {type}", shape, lane_b, elem_b,
                               num_elements(use, m, n, k, type))


@functools.cache
def lane_map_of(use: str, m: int, n: int, k: int, type: str) -> tuple[np.ndarray, np.ndarray]:
    """Read-only (rows, cols) of the element each (lane, i) holds (cached)."""
    rows, cols = (c.astype(np.int32) for c in register_layout_of(use, m, n, k, type).coords())
    rows.setflags(write=False)
    cols.setflags(write=False)
    return rows, cols


@functools.cache
def gather_maps_of(use: str, m: int, n: int, k: int, type: str):
    """(linear index per (lane, element), first flat (lane, element) per linear index)."""
    rows, cols = lane_map_of(use, m, n, k, type)
    ncols = k if use == "matrix_a" else n
    nrows = k if use == "matrix_b" else m
    lin = (rows * ncols + cols).astype(np.int32)
    flat = lin.reshape(-1)
    inv = np.full(nrows * ncols, -1, np.int64)
    # First occurrence wins: iterate in reverse so earlier positions overwrite.
    inv[flat[::-1]] = np.arange(flat.size - 1, -1, -1)
    assert (inv >= 0).all(), (use, m, n, k, type)
    lin.setflags(write=False)
    inv = inv.astype(np.int32)
    inv.setflags(write=False)
    return lin, inv
