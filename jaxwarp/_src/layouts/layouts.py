"""Named register layouts of the tensor-core fragments, as linear layouts over GF(2).

Every fragment layout of WMMA, PTX ``mma.sync`` and ``wgmma`` that the H100 uses is
*linear over GF(2)*: the logical coordinates of the element that lane ``l`` holds as its
element ``e`` are the XOR of one basis vector per set bit of ``l`` and one per set bit of
``e``. A :class:`Layout` is that description: frozen, hashable (a ``jax.jit`` static
argument, a dict key), with the logical ``shape``, the ``lane_bases`` (5 for a warp, 7 for a
warpgroup) and the ``elem_bases``. :meth:`Layout.coords` gives the coordinate arrays,
:meth:`Layout.text` draws it.

The named layouts below are the building blocks; an instruction's operand layout is one
of them, with ``P`` elements packed per register (:meth:`Layout.packed`: ``32 // bits``
elements, lower-numbered in the lower bits) and as many registers as the operand has
(:meth:`Layout.take`):

* ``mma.sync`` m16n8k* and m8n8k*: :data:`MMA_A_M16`, :data:`MMA_A_M8`, :data:`MMA_B`
  (register granularity), :data:`MMA_CD_M16N8`, :data:`MMA_CD_M8N8` (elements);
  f16 m8n8k4's four quadpair MMAs: :data:`MMA_M8N8K4_A_ROW` ... :data:`MMA_M8N8K4_CD_F32`
  (coordinates ``(q, row, col)``, ``q`` the quadpair's MMA);
* ``wgmma`` (128 lanes): :data:`WGMMA_A` (registers), :data:`WGMMA_D` (elements): the
  m16 warp tiles of ``mma.sync`` stacked over the four warps of the warpgroup;
* WMMA: ``fragments.layout_bases`` builds one per fragment type (:func:`wmma_layout`).

groupID ``g = lane // 4`` and threadID_in_group ``t = lane % 4``, as in the PTX ISA.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

__all__ = [
    "MMA_A_M8",
    "MMA_A_M16",
    "MMA_B",
    "MMA_CD_M8N8",
    "MMA_CD_M16N8",
    "MMA_M8N8K4_A_COL",
    "MMA_M8N8K4_A_ROW",
    "MMA_M8N8K4_B_COL",
    "MMA_M8N8K4_B_ROW",
    "MMA_M8N8K4_CD_F16",
    "MMA_M8N8K4_CD_F32",
    "WGMMA_A",
    "WGMMA_D",
    "Layout",
    "wmma_layout",
]

Basis = tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class Layout:
    """A linear layout: (lane, element) -> logical coordinates, as XORs of basis vectors.

    Attributes:
      name: what it is, for messages and drawings (not compared: two layouts are equal
        when they map every (lane, element) alike on the same shape).
      shape: the logical tile, e.g. ``(16, 8)`` (or ``(4, 8, 4)`` with a leading MMA axis).
      lane_bases: one vector of ``len(shape)`` ints per lane bit.
      elem_bases: one vector per bit of the element index; a zero vector repeats
        elements (f16 WMMA A/B hold each element twice).
      num_elements: elements per lane (default ``2 ** len(elem_bases)``; fewer when the
        last basis is only partly used, e.g. 12 for a wgmma n24 accumulator).

    Example:
      >>> rows, cols = MMA_CD_M16N8.coords()
      >>> [(int(rows[5, e]), int(cols[5, e])) for e in range(4)]  # lane 5: g=1, t=1
      [(1, 2), (1, 3), (9, 2), (9, 3)]
      >>> MMA_CD_M16N8 == Layout(MMA_CD_M16N8.name, (16, 8), MMA_CD_M16N8.lane_bases,
      ...                        MMA_CD_M16N8.elem_bases)
      True
    """

    name: str = dataclasses.field(compare=False)
    shape: tuple[int, ...]
    lane_bases: tuple[Basis, ...]
    elem_bases: tuple[Basis, ...]
    num_elements: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(int(s) for s in self.shape))
        for field in ("lane_bases", "elem_bases"):
            bases = tuple(tuple(int(v) for v in b) for b in getattr(self, field))
            for b in bases:
                if len(b) != len(self.shape):
                    raise ValueError(f"{self.name}: basis {b} of {field} has {len(b)} "
                                     f"coordinates; the shape {self.shape} has {len(self.shape)}")
            object.__setattr__(self, field, bases)
        full = 1 << len(self.elem_bases)
        n = full if self.num_elements is None else int(self.num_elements)
        if not full // 2 < n <= full and not (n == full == 1):
            raise ValueError(f"{self.name}: num_elements={n} needs {len(self.elem_bases)} "
                             f"element bases; allowed: {full // 2 + 1} .. {full}")
        object.__setattr__(self, "num_elements", n)

    @property
    def num_lanes(self) -> int:
        """Lanes: 32 for a warp, 128 for a warpgroup."""
        return 1 << len(self.lane_bases)

    def coords(self) -> tuple[np.ndarray, ...]:
        """One read-only int64 array ``(num_lanes, num_elements)`` per logical axis: the
        coordinates of the element each lane holds as each element index."""
        return _coords(self)

    def packed(self, per_word: int, axis: int, name: str | None = None) -> Layout:
        """This layout of registers with ``per_word`` elements in each, consecutive along
        ``axis``, the lower-numbered element in the lower bits: every coordinate along
        ``axis`` is scaled by ``per_word`` and the element index gains ``log2(per_word)``
        low bits.

        Example:
          >>> MMA_B.packed(2, 0).elem_bases[:3]   # f16: two k-values per register
          ((1, 0), (8, 0), (16, 0))
        """
        if per_word < 1 or per_word & (per_word - 1):
            raise ValueError(f"per_word must be a power of two, got {per_word}")

        def scale(b: Basis) -> Basis:
            return tuple(v * per_word if i == axis else v for i, v in enumerate(b))

        unit = [tuple((1 << s) if i == axis else 0 for i in range(len(self.shape)))
                for s in range(per_word.bit_length() - 1)]
        shape = tuple(v * per_word if i == axis else v for i, v in enumerate(self.shape))
        return Layout(name or f"{self.name} x{per_word}", shape,
                      tuple(scale(b) for b in self.lane_bases),
                      tuple(unit) + tuple(scale(b) for b in self.elem_bases))

    def take(self, num_elements: int, shape: tuple[int, ...] | None = None,
             name: str | None = None) -> Layout:
        """The first ``num_elements`` elements of each lane (the bases they need), on a
        logical tile of ``shape`` (default: unchanged).

        Example:
          >>> MMA_CD_M16N8.take(2, (8, 8)) == MMA_CD_M8N8
          True
        """
        nbits = max(0, (num_elements - 1).bit_length())
        if nbits > len(self.elem_bases):
            raise ValueError(f"{self.name} has {self.num_elements} elements per lane; "
                             f"num_elements={num_elements} is more")
        return Layout(name or self.name, self.shape if shape is None else shape,
                      self.lane_bases, self.elem_bases[:nbits], num_elements)

    def text(self) -> str:
        """The layout as an ASCII grid (two-dimensional layouts): cell ``lane:e``; where an
        element is held more than once, the first (lane, e)."""
        if len(self.shape) != 2:
            raise ValueError(f"{self.name}: text() draws two-dimensional layouts; shape "
                             f"{self.shape}")
        rows, cols = self.coords()
        cell = np.full(self.shape, "", dtype=object)
        for lane in range(self.num_lanes - 1, -1, -1):
            for e in range(self.num_elements - 1, -1, -1):
                cell[rows[lane, e], cols[lane, e]] = f"{lane}:{e}"
        width = max(len(c) for c in cell.reshape(-1))
        lines = ["     " + " ".join(f"{c:>{width}}" for c in range(self.shape[1]))]
        for r in range(self.shape[0]):
            lines.append(f"{r:>4} " + " ".join(f"{c:>{width}}" for c in cell[r]))
        return "\n".join(lines)


@functools.cache
def _coords(layout: Layout) -> tuple[np.ndarray, ...]:
    lanes = np.arange(layout.num_lanes)[:, None]
    elems = np.arange(layout.num_elements)[None, :]
    out = []
    for axis in range(len(layout.shape)):
        c = np.zeros((layout.num_lanes, layout.num_elements), np.int64)
        for idx, bases in ((lanes, layout.lane_bases), (elems, layout.elem_bases)):
            for bit, b in enumerate(bases):
                c ^= ((idx >> bit) & 1) * b[axis]
        c.setflags(write=False)
        out.append(c)
    return tuple(out)


def wmma_layout(name: str, shape: tuple[int, int], lane_bases, elem_bases,
                num_elements: int) -> Layout:
    """A WMMA fragment's layout from its bases (``fragments.layout_bases`` computes them)."""
    return Layout(name, shape, tuple(lane_bases), tuple(elem_bases), num_elements)


# ----------------------------------------------------------------------------------------
# mma.sync: core matrices of 8 rows x 4 registers, lane l at row g, register-column t.

_CORE_LANES = ((0, 1), (0, 2), (1, 0), (2, 0), (4, 0))  # t bits -> columns, g bits -> rows

MMA_A_M16 = Layout("mma.sync A m16 (registers)", (16, 16), _CORE_LANES,
                   ((8, 0), (0, 4), (0, 8)))
"""A of m16n8k*, one element per register (``packed(32 // bits, 1)`` for narrower types):
a 2 x (R/2) grid of core matrices, register r in row-block r % 2, column-block r // 2::

    register columns   0    1    2    3  |  4  ..  7
    rows 0-7          T0   T1   T2   T3  |           <- reg 0 | reg 2
    row g             T4g  ...     T4g+3 |
    rows 8-15          reg 1             |  reg 3

(f64 m16n8k16 has 8 registers: column-blocks 0..3.)
"""

MMA_A_M8 = Layout("mma.sync A m8 (registers)", (8, 4), _CORE_LANES, ())
"""A of m8n8k* (s8/u8, s4/u4, b1, f64): one core matrix, one register per lane::

    register columns   0    1    2    3
    row g             T4g T4g+1 T4g+2 T4g+3
"""

MMA_B = Layout("mma.sync B (registers)", (16, 8), ((1, 0), (2, 0), (0, 1), (0, 2), (0, 4)),
               ((4, 0), (8, 0)))
"""B of every m16n8k* and m8n8k* (k x 8, ``.col``): core matrices stacked along k, each
transposed; register r holds k rows ``4r + t`` (``packed(32 // bits, 0)``: k = ``r·4P +
t·P + j``) of column g::

               col g (lanes 4g .. 4g+3)
    k 4r + t        T(4g + t)       for register r = 0, 1, ...
"""

MMA_CD_M16N8 = Layout("mma.sync C/D m16n8", (16, 8),
                      ((0, 2), (0, 4), (1, 0), (2, 0), (4, 0)), ((0, 1), (8, 0)))
"""C/D of m16n8k* (every type; f16 packs two elements per register): elements c0, c1 in
row g, c2, c3 in row g + 8, columns 2t, 2t + 1::

              cols 2t  2t+1
    row g      c0      c1
    row g+8    c2      c3
"""

MMA_CD_M8N8 = Layout("mma.sync C/D m8n8", (8, 8), MMA_CD_M16N8.lane_bases, ((0, 1),))
"""C/D of m8n8k* (s32, f64): c0, c1 at row g, columns 2t, 2t + 1::

              cols 2t  2t+1
    row g      c0      c1
"""

# f16 m8n8k4: four MMAs, one per quadpair q = (lane // 4) % 4; coordinates (q, row, col);
# lane bits 0, 1: i = lane % 4; bits 2, 3: q; bit 4: hi = 4 for lanes 16..31.
_Q = ((1, 0, 0), (2, 0, 0))

MMA_M8N8K4_A_ROW = Layout("mma.sync m8n8k4 A .row", (4, 8, 4),
                          ((0, 1, 0), (0, 2, 0), *_Q, (0, 4, 0)), ((0, 0, 1), (0, 0, 2)))
"""f16 m8n8k4 A ``.row`` (per MMA 8 x 4): lane holds row ``i + hi``, columns 0..3::

    MMA q, row i + hi:   e0 e1 e2 e3   (lane 4q + i, or 4q + 16 + i for hi = 4)
"""

MMA_M8N8K4_A_COL = Layout("mma.sync m8n8k4 A .col", (4, 8, 4),
                          ((0, 0, 1), (0, 0, 2), *_Q, (0, 4, 0)), ((0, 1, 0), (0, 2, 0)))
"""f16 m8n8k4 A ``.col``: lane holds column ``i``, rows ``hi .. hi + 3``::

    MMA q, col i:   rows hi+0 .. hi+3 = e0 .. e3
"""

MMA_M8N8K4_B_ROW = Layout("mma.sync m8n8k4 B .row", (4, 4, 8),
                          ((0, 1, 0), (0, 2, 0), *_Q, (0, 0, 4)), ((0, 0, 1), (0, 0, 2)))
"""f16 m8n8k4 B ``.row`` (per MMA 4 x 8): lane holds row ``i``, columns ``hi .. hi + 3``::

    MMA q, row i:   cols hi+0 .. hi+3 = e0 .. e3
"""

MMA_M8N8K4_B_COL = Layout("mma.sync m8n8k4 B .col", (4, 4, 8),
                          ((0, 0, 1), (0, 0, 2), *_Q, (0, 0, 4)), ((0, 1, 0), (0, 2, 0)))
"""f16 m8n8k4 B ``.col``: lane holds column ``i + hi``, rows 0..3::

    MMA q, col i + hi:   rows 0 .. 3 = e0 .. e3
"""

MMA_M8N8K4_CD_F16 = Layout("mma.sync m8n8k4 C/D f16", (4, 8, 8),
                           ((0, 1, 0), (0, 2, 0), *_Q, (0, 4, 0)),
                           ((0, 0, 1), (0, 0, 2), (0, 0, 4)))
"""f16 m8n8k4 C/D (per MMA 8 x 8): lane holds row ``i + hi``, columns 0..7::

    MMA q, row i + hi:   e0 e1 e2 e3 e4 e5 e6 e7
"""

MMA_M8N8K4_CD_F32 = Layout("mma.sync m8n8k4 C/D f32", (4, 8, 8),
                           ((0, 1, 0), (0, 0, 2), *_Q, (0, 4, 0)),
                           ((0, 0, 1), (0, 2, 0), (0, 0, 4)))
"""f32 m8n8k4 C/D: element e at row ``(lane & 1) + (e & 2) + hi``, column
``(e & 4) + (lane & 2) + (e & 1)``::

    (lanes with lane & 3 = 0..3, hi = 0)
              col 0  1    2  3    4  5    6  7
    row 0     L0:e0 e1  L2:e0 e1  L0:e4 e5  L2:e4 e5
    row 1     L1:e0 e1  L3:e0 e1  L1:e4 e5  L3:e4 e5
    row 2     L0:e2 e3  L2:e2 e3  L0:e6 e7  L2:e6 e7
    row 3     L1:e2 e3  L3:e2 e3  L1:e6 e7  L3:e6 e7
"""

# ----------------------------------------------------------------------------------------
# wgmma: the m16 warp tiles above, warp w = lane // 32 taking rows 16w .. 16w + 15.

_WARPS = ((16, 0), (32, 0))

WGMMA_A = Layout("wgmma A (registers)", (64, 8), (*_CORE_LANES, *_WARPS), ((8, 0), (0, 4)))
"""A from registers (m64 x 16 bytes of K; 4 registers per thread,
``packed(32 // bits, 1)``): :data:`MMA_A_M16` of 4 registers in each warp::

    thread t: w = t // 32, g = (t % 32) // 4, q = t % 4; register r
    row 16w + g + 8 (r % 2)      register-column q + 4 (r // 2)
"""

WGMMA_D = Layout("wgmma D", (64, 256), (*MMA_CD_M16N8.lane_bases, *_WARPS),
                 ((0, 1), (8, 0), (0, 8), (0, 16), (0, 32), (0, 64), (0, 128)))
"""The accumulator (``take(N // 2)`` for m64nNk*; f16 packs elements 2i, 2i + 1 into
register i): :data:`MMA_CD_M16N8` in each warp, repeated along N every 8 columns::

    thread t: w = t // 32, g = (t % 32) // 4, q = t % 4; element e = 4c + j
    row 16w + g + 8 (j // 2)          col 8c + 2q + (j % 2)

                col 8c+0  8c+1 | 8c+2  8c+3 | ...
    row 16w+g     T0:e0 T0:e1  | T1:e0 T1:e1 | ...
    row 16w+g+8   T0:e2 T0:e3  | T1:e2 T1:e3 | ...
"""
