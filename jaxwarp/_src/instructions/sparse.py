"""2:4 structured sparsity: pruning, compression and the metadata of the sparse tensor cores.

A sparse MMA (``mma.sp``, ``wgmma.mma_async.sp``) takes A with K/2 *stored* elements per
row and a 32-bit *metadata* register per lane that says where each stored element sits in
the dense row. The unit a 2-bit index selects is 16 bits (f16, bf16; tf32: half of a
32-bit element) or 8 bits (s8, u8, e4m3, e5m2; s4/u4: a pair of elements); a 4-bit nibble
``i0 | i1 << 2`` holds the indices of the two stored units of a group of four, so:

============  =========================  ================================================
A type        a group (one nibble)       nibble -> columns of the stored elements
============  =========================  ================================================
f16, bf16,    4 elements, 2 stored       ``i0``, ``i1`` (2:4)
s8, u8, fp8
tf32          2 elements, 1 stored       valid: 0b0100 -> 0, 0b1110 -> 1 (its two halves)
s4, u4        8 elements, 4 stored       ``2 i0, 2 i0 + 1, 2 i1, 2 i1 + 1`` (pairs)
============  =========================  ================================================

Where nibble c of row m lies in the warp (``g = m % 8``, ``F`` the sparsity selector, ``W``
the words a row needs: chunks / 4 for 16-bit units, chunks / 8 for 8-bit ones)::

    16-bit units: lane 4g + F*W + c // 4, bits 16*(m >= 8) + 4*(c % 4)
                  (one word: 4 nibbles of row g low, 4 of row g + 8 high)
     8-bit units: lane 4g + 2*(F*W + c // 8) + (m >= 8), bits 4*(c % 8)
                  (one word: 8 nibbles of one row)

e.g. ``mma.sp`` f16 m16n8k32, selector 1: lanes 4g + 2 and 4g + 3 hold rows g and g + 8.
A ``wgmma.mma_async.sp`` warp w holds rows 16w .. 16w + 15 the same way.

The ISA leaves repeated indices (0b0000, 0b0101, 0b1010, 0b1111) undefined, and
decreasing ones (``i0 > i1``) for ``::ordered_metadata``. An H100 does what the
arithmetic of :func:`gather_b` says: every stored unit multiplies the B unit its index
names (two stored elements may multiply the same B row; a tf32 element built from the
halves its two indices name). :func:`undefined_nibbles` finds them (checked mode).

Example:
    >>> import jax.numpy as jnp
    >>> x = jnp.array([[1.0, -3.0, 0.5, 2.0, 0.0, 0.0, 7.0, 1.0]])
    >>> prune_2_4(x).tolist()
    [[0.0, -3.0, 0.0, 2.0, 0.0, 0.0, 7.0, 1.0]]
    >>> vals, idx = compress_2_4(prune_2_4(x))
    >>> vals.tolist(), idx.tolist()
    ([[-3.0, 2.0, 7.0, 1.0]], [[1, 3, 2, 3]])
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxwarp._src import checks
from jaxwarp._src.catalogue import isa
from jaxwarp._src.catalogue.mma_sync_parse import MmaInstruction
from jaxwarp._src.catalogue.wgmma_parse import WgmmaInstruction, instruction_of
from jaxwarp._src.warp import checked

__all__ = [
    "SparseInstruction",
    "Geometry",
    "geometry",
    "prune_2_4",
    "kept",
    "compress_2_4",
    "decompress_2_4",
    "metadata_words",
    "nibbles_from_words",
    "nibbles_from_indices",
    "gather_b",
    "stored_rows",
    "undefined_nibbles",
]

#: Valid tf32 nibbles (element 0, element 1 of the pair).
TF32_NIBBLES = (0b0100, 0b1110)


@dataclasses.dataclass(frozen=True)
class Geometry:
    """Where the stored elements and the metadata of one sparse shape are.

    Attributes:
      a_format: A's type.
      k: the logical (dense) K.
      unit_bits: bits one metadata index selects (``isa.SparseRow.unit_bits``).
      m: rows of A (16 for mma.sp, 64 for wgmma.sp: 4 warps of 16).
    """

    a_format: str
    k: int
    unit_bits: int
    m: int = 16

    @property
    def elem_bits(self) -> int:
        return isa.element_bits(self.a_format)

    @property
    def group(self) -> int:
        """Dense elements one nibble covers (4; tf32 2; s4/u4 8)."""
        return 4 * self.unit_bits // self.elem_bits

    @property
    def stored(self) -> int:
        """Stored elements per group."""
        return self.group // 2

    @property
    def chunks(self) -> int:
        """Nibbles per row."""
        return self.k // self.group

    @property
    def words_per_row(self) -> int:
        return max(1, self.chunks // (4 if self.unit_bits == 16 else 8))

    def slots(self, selector: int) -> tuple[np.ndarray, np.ndarray]:
        """(lane, shift) of each nibble, int arrays (m, chunks); lanes count over the
        warpgroup (128) when m = 64."""
        r = np.arange(self.m)[:, None]
        c = np.arange(self.chunks)[None, :]
        mw, warp = r % 16, r // 16
        g, hi = mw % 8, (mw >= 8).astype(np.int64)
        W = self.words_per_row
        if self.unit_bits == 16:
            lane = 4 * g + selector * W + c // 4
            shift = 16 * hi + 4 * (c % 4)
        else:
            lane = 4 * g + 2 * (selector * W + c // 8) + hi
            shift = 4 * (c % 8) + 0 * hi
        return lane + 32 * warp, shift


#: Opcode prefixes of the sparse instructions.
MMA_SP_ORDERED = "mma.sp::ordered_metadata.sync.aligned."
MMA_SP_LEGACY = "mma.sp.sync.aligned."
WGMMA_SP = "wgmma.mma_async.sp.sync.aligned."


@dataclasses.dataclass(frozen=True)
class SparseInstruction:
    """One ``mma.sp`` or ``wgmma.mma_async.sp`` configuration (frozen: a static argument).

    Attributes:
      family: ``"mma_sp"`` or ``"wgmma_sp"`` (``isa.SPARSE_INSTRUCTIONS``).
      m, n, k: the shape; k is the logical (dense) K.
      a_format, b_format, c_format, d_format: PTX type names (wgmma.sp: C is D).
      satfinite: ``.satfinite`` (integer types).
      ordered: ``mma.sp::ordered_metadata`` (False: legacy ``mma.sp``; ``wgmma.sp`` has
        no ordered form, its repeated indices stay undefined).
    """

    family: str
    m: int
    n: int
    k: int
    a_format: str
    b_format: str
    c_format: str
    d_format: str
    satfinite: bool = False
    ordered: bool = True

    @property
    def qualifier(self) -> str:
        sat = ".satfinite" if self.satfinite else ""
        if self.family == "wgmma_sp":
            return f"m64n{self.n}k{self.k}{sat}.{self.d_format}.{self.a_format}.{self.b_format}"
        return (f"m{self.m}n{self.n}k{self.k}.row.col{sat}.{self.d_format}.{self.a_format}."
                f"{self.b_format}.{self.c_format}")

    @property
    def ptx(self) -> str:
        if self.family == "wgmma_sp":
            return WGMMA_SP + self.qualifier
        return (MMA_SP_ORDERED if self.ordered else MMA_SP_LEGACY) + self.qualifier

    @property
    def instruction(self) -> str:
        """The dense instruction whose datapath runs it: ``"mma_sync"`` or ``"wgmma"``."""
        return "wgmma" if self.family == "wgmma_sp" else "mma_sync"

    @property
    def lanes(self) -> int:
        """Threads that pass a metadata register: 32 (a warp) or 128 (a warpgroup)."""
        return 128 if self.family == "wgmma_sp" else 32

    @property
    def row(self) -> isa.SparseRow:
        return isa.sparse_row_of(self.family, self.a_format, (self.m, self.n, self.k))

    @property
    def geometry(self) -> Geometry:
        return geometry(self.family, self.a_format, self.k)

    def dense(self, use: str) -> MmaInstruction | WgmmaInstruction:
        """The dense instruction whose fragment layout operand ``use`` has: A (the stored
        K/2 columns) of m16n8k(K/2), B / C / D of m16n8kK (``mma_sp``); A and the
        accumulator of m64nNk(K/2) (``wgmma_sp``; B comes from shared memory)."""
        if self.family == "wgmma_sp":
            if use == "b":
                raise ValueError(f"{self.ptx} reads B from shared memory only (K = {self.k} "
                                 f"has no dense register layout)")
            sat = ".satfinite" if self.satfinite else ""
            return instruction_of(f"m64n{self.n}k{self.k // 2}{sat}.{self.d_format}."
                                  f"{self.a_format}.{self.b_format}")
        k = self.k // 2 if use == "a" else self.k
        return MmaInstruction(self.m, self.n, k, "row", "col", self.a_format, self.b_format,
                              self.c_format, self.d_format, self.satfinite)

    def nregs(self, use: str) -> int:
        """Registers per lane of operand ``use`` (``mma_sp``)."""
        return self.dense(use).nregs(use)


@functools.cache
def geometry(instruction: str, a_format: str, k: int) -> Geometry:
    """The :class:`Geometry` of a catalogue row (``isa.SPARSE_ROWS``)."""
    row = next(r for r in isa.sparse_rows(instruction, a_format) if r.k == k)
    return Geometry(a_format, k, row.unit_bits, row.shapes[0][0])


# --------------------------------------------------------------------------------------
# Dense <-> compressed.


def prune_2_4(x: Any, *, group: int = 4) -> jax.Array:
    """Keeps the largest half (by magnitude) of every ``group`` consecutive elements of
    the last axis and zeroes the rest: a 2:4 matrix (``group=2``: 1:2, as tf32 needs;
    ``group=8``: 4:8). Ties keep the lower index; NaN counts as largest.

    Args:
      x: (..., K) array, K a multiple of ``group``.
      group: 2, 4 or 8.

    Returns:
      x with the pruned elements set to zero (same dtype).

    Example:
      >>> import jax.numpy as jnp
      >>> prune_2_4(jnp.array([[4.0, 1.0, -5.0, 2.0]])).tolist()
      [[4.0, 0.0, -5.0, 0.0]]
    """
    x = checks.array_arg(x, "x")
    checks.static_choice(group, "group", (2, 4, 8))
    if x.ndim < 1 or x.shape[-1] % group:
        raise ValueError(f"x must have a last axis that is a multiple of group={group}, "
                         f"got shape {tuple(x.shape)}")
    return prune_groups(x, group)


def kept(x, group):
    """True where :func:`prune_2_4` keeps an element of x (the mask it prunes with)."""
    g = x.reshape(x.shape[:-1] + (x.shape[-1] // group, group))
    mag = jnp.abs(g.astype(jnp.float32)) if jnp.issubdtype(g.dtype, jnp.floating) \
        else jnp.abs(g.astype(jnp.int32)).astype(jnp.float32)
    mag = jnp.where(jnp.isnan(mag), jnp.inf, mag)
    order = jnp.argsort(-mag, axis=-1, stable=True)
    keep = jnp.zeros(g.shape, bool)
    keep = jnp.put_along_axis(keep, order[..., : group // 2], True, axis=-1, inplace=False)
    return keep.reshape(x.shape)


@functools.partial(jax.jit, static_argnums=1)
def prune_groups(x, group):
    return jnp.where(kept(x, group), x, jnp.zeros_like(x))


def compress_2_4(x: Any, *, group: int = 4) -> tuple[jax.Array, jax.Array]:
    """A dense matrix that is 2:4 (at most half of every ``group`` non-zero) -> its stored
    elements and their columns inside their groups, as ``mma.sp`` wants them.

    The stored elements of a group are its non-zeros and, where it has fewer, its first
    zero columns, in column order (indices increase, as ``::ordered_metadata`` needs).
    A group with more non-zeros is not 2:4: concrete input raises; traced input is
    reported in checked mode (``jaxwarp.checked``) and otherwise keeps its first
    ``group // 2`` non-zeros.

    Args:
      x: (..., K) array.
      group: 4 (2:4), 2 (1:2, tf32) or 8 (s4/u4: 4:8 in pairs is checked by the caller).

    Returns:
      (values (..., K/2) of x's dtype, indices (..., K/2) int32 in [0, group)).

    Raises:
      ValueError: concrete ``x`` that is not 2:4 (naming the first bad group).

    Example:
      >>> import jax.numpy as jnp
      >>> v, i = compress_2_4(jnp.array([[0.0, 3.0, 0.0, 0.0]]))
      >>> v.tolist(), i.tolist()
      ([[0.0, 3.0]], [[0, 1]])
    """
    x = checks.array_arg(x, "x")
    checks.static_choice(group, "group", (2, 4, 8))
    if x.ndim < 1 or x.shape[-1] % group:
        raise ValueError(f"x must have a last axis that is a multiple of group={group}, "
                         f"got shape {tuple(x.shape)}")
    if not isinstance(x, jax.core.Tracer):
        nz = np.asarray(x != 0).reshape(x.shape[:-1] + (-1, group)).sum(-1)
        if (nz > group // 2).any():
            where = tuple(int(v) for v in np.argwhere(nz > group // 2)[0])
            raise ValueError(f"x is not {group // 2}:{group} sparse: group {where} (columns "
                             f"{where[-1] * group}..{where[-1] * group + group - 1} of row "
                             f"{where[:-1]}) has {int(nz[where])} non-zeros; allowed: at most "
                             f"{group // 2} (prune_2_4 prunes by magnitude)")
    return compress_groups(x, group)


def compress_groups(x, group):
    g = x.reshape(x.shape[:-1] + (x.shape[-1] // group, group))
    nz = g != 0
    checked.check(jnp.all(jnp.sum(nz, axis=-1) <= group // 2),
                  f"A is not {group // 2}:{group} sparse: a group of {group} columns has "
                  f"more than {group // 2} non-zeros")
    # non-zeros first (column order), then zeros (column order): a stable sort on ~nz
    order = jnp.argsort(~nz, axis=-1, stable=True)[..., : group // 2]
    order = jnp.sort(order, axis=-1)
    vals = jnp.take_along_axis(g, order, axis=-1)
    shape = x.shape[:-1] + (x.shape[-1] // 2,)
    return vals.reshape(shape), order.astype(jnp.int32).reshape(shape)


def decompress_2_4(values: Any, indices: Any, *, group: int = 4) -> jax.Array:
    """Inverse of :func:`compress_2_4`: (..., K/2) values and their columns in their
    groups -> the dense (..., K) matrix (zeros elsewhere; a repeated index keeps the
    later value).

    Args:
      values: (..., K/2) stored elements.
      indices: (..., K/2) integers in ``[0, group)``: each stored element's column in its
        group. Concrete indices outside it raise ``ValueError``; traced ones are reported
        by ``jaxwarp.checked`` (outside it such an element is dropped: its group keeps
        zeros there).
      group: 4 (2:4), 2 (1:2) or 8 (4:8).

    Raises:
      TypeError: ``indices`` are not integers.
      ValueError: shapes that differ, an index outside ``[0, group)``.

    Example:
      >>> import jax.numpy as jnp
      >>> decompress_2_4(jnp.array([[3.0, 4.0]]), jnp.array([[1, 3]])).tolist()
      [[0.0, 3.0, 0.0, 4.0]]
    """
    values, indices = checks.array_args(values=values, indices=indices)
    checks.static_choice(group, "group", (2, 4, 8))
    per = group // 2
    kh = values.shape[-1]
    if kh % per or indices.shape[-1] != kh:
        raise ValueError(f"values {tuple(values.shape)} and indices {tuple(indices.shape)} "
                         f"must share a last axis that is a multiple of {per}")
    if not jnp.issubdtype(indices.dtype, jnp.integer):
        raise TypeError(f"indices must be integers (columns in a group of {group}), got "
                        f"{indices.dtype}")
    checked.refuse_values(indices, lambda i: (i < 0) | (i >= group), "indices",
                          f"0 .. {group - 1} (the column of a stored element in its group "
                          f"of {group})")
    idx = indices.astype(jnp.int32)
    col = jnp.arange(kh) // per * group + idx
    col = jnp.where((idx >= 0) & (idx < group), col, kh * 2)  # out of range: dropped
    out = jnp.zeros(values.shape[:-1] + (kh * 2,), values.dtype)
    return jnp.put_along_axis(out, col, values, axis=-1, inplace=False, mode="drop")


# --------------------------------------------------------------------------------------
# Metadata.


def nibbles_from_indices(geo: Geometry, indices: jax.Array) -> jax.Array:
    """Stored elements' columns in their groups (..., m, K/2) -> nibbles (..., m, chunks).

    tf32: 0 -> 0b0100, 1 -> 0b1110; s4/u4: the pair of element 4c + 2j is column // 2.
    """
    idx = indices.astype(jnp.int32)
    if geo.a_format == "tf32":
        return jnp.where(idx == 0, TF32_NIBBLES[0], TF32_NIBBLES[1]).astype(jnp.int32)
    if geo.group == 8:
        idx = idx[..., 0::2] // 2
    pairs = idx.reshape(idx.shape[:-1] + (geo.chunks, 2))
    return pairs[..., 0] | (pairs[..., 1] << 2)


def indices_from_nibbles(geo: Geometry, nib: jax.Array) -> jax.Array:
    """Nibbles -> the column of each stored element in its group (tf32: bit 1, which is
    what the valid nibbles say; the halves of an undefined one: :func:`gather_b`)."""
    if geo.a_format == "tf32":
        return ((nib >> 1) & 1).astype(jnp.int32)
    i0, i1 = nib & 3, nib >> 2
    if geo.group == 8:
        cols = jnp.stack([2 * i0, 2 * i0 + 1, 2 * i1, 2 * i1 + 1], -1)
    else:
        cols = jnp.stack([i0, i1], -1)
    return cols.reshape(nib.shape[:-1] + (-1,)).astype(jnp.int32)


def nibbles_from_words(geo: Geometry, words: jax.Array, selector: int) -> jax.Array:
    """Metadata registers (..., lanes) uint32 -> nibbles (..., m, chunks) int32."""
    lane, shift = geo.slots(selector)
    w = words.astype(jnp.uint32)[..., lane]
    return ((w >> jnp.asarray(shift, jnp.uint32)) & 15).astype(jnp.int32)


def words_from_nibbles(geo: Geometry, nib: jax.Array, selector: int) -> jax.Array:
    """Nibbles (..., m, chunks) -> metadata registers (..., 32 * m // 16) uint32; lanes the
    selector does not name are 0."""
    lane, shift = geo.slots(selector)
    lanes = 32 * max(1, geo.m // 16)
    onehot = jnp.asarray(np.arange(lanes)[:, None, None] == lane[None], jnp.uint32)
    v = nib.astype(jnp.uint32) << jnp.asarray(shift, jnp.uint32)
    return jnp.sum(onehot * v[..., None, :, :], axis=(-2, -1), dtype=jnp.uint32)


def metadata_words(indices: Any, *, a_format: str, k: int, selector: int = 0,
                   instruction: str = "mma_sp") -> jax.Array:
    """The metadata register of every lane for stored-element columns ``indices``.

    Args:
      indices: (..., m, K/2) ints: the column of each stored element inside its group
        (:func:`compress_2_4`'s second result; tf32 0 or 1; s4/u4 0..7 in pairs; else
        0..3). Concrete values outside the range raise ``ValueError``; traced ones are
        reported by ``jaxwarp.checked`` (outside it only the low bits of each field are
        kept).
        m = 16 (``mma_sp``) or 64 (``wgmma_sp``).
      a_format, k: A's type and the logical K (a row of ``isa.SPARSE_ROWS``).
      selector: the sparsity selector (which lanes hold the metadata).
      instruction: ``"mma_sp"`` or ``"wgmma_sp"``.

    Returns:
      (..., 32) uint32 (``wgmma_sp``: (..., 128)); lanes the selector does not name hold 0.

    Example:
      >>> import jax.numpy as jnp
      >>> idx = jnp.tile(jnp.array([0, 1, 2, 3], jnp.int32), (16, 4))   # (16, 16)
      >>> w = metadata_words(idx, a_format="f16", k=32, selector=1)
      >>> [hex(int(v)) for v in w[:4]]   # lanes 2, 3: nibbles 0b0100, 0b1110 of rows 0, 8
      ['0x0', '0x0', '0xe4e4e4e4', '0xe4e4e4e4']
    """
    checks.static_choice(instruction, "instruction", isa.SPARSE_INSTRUCTIONS)
    rows = isa.sparse_rows(instruction)
    a_format = checks.static_choice(a_format, "a_format",
                                    tuple(dict.fromkeys(t for r in rows for t in r.a_formats)))
    ks = tuple(r.k for r in isa.sparse_rows(instruction, a_format))
    k = checks.static_choice(k, "k", ks)
    row = next(r for r in isa.sparse_rows(instruction, a_format) if r.k == k)
    selector = checks.static_choice(selector, "selector", tuple(range(row.selectors)))
    geo = geometry(instruction, a_format, k)
    indices = checks.array_arg(indices, "indices")
    if indices.ndim < 2 or tuple(indices.shape[-2:]) != (geo.m, k // 2):
        raise ValueError(f"indices must have shape (..., {geo.m}, {k // 2}), got "
                         f"{tuple(indices.shape)}")
    if not jnp.issubdtype(indices.dtype, jnp.integer):
        raise TypeError(f"indices must be integers, got {indices.dtype}")
    checked.refuse_values(indices, lambda i: (i < 0) | (i >= geo.group), "indices",
                          f"0 .. {geo.group - 1} (a column in a group of {geo.group} for "
                          f"{a_format})")
    keep = 1 if a_format == "tf32" else geo.group - 1  # the bits of a field (traced)
    return words_from_nibbles(geo, nibbles_from_indices(geo, indices & keep), selector)


def undefined_nibbles(geo: Geometry, nib: jax.Array, ordered: bool) -> jax.Array:
    """True where a nibble is one the ISA calls undefined: repeated indices; with
    ``ordered`` (``::ordered_metadata``) also decreasing ones; tf32 anything but
    0b0100 / 0b1110."""
    if geo.a_format == "tf32":
        return (nib != TF32_NIBBLES[0]) & (nib != TF32_NIBBLES[1])
    i0, i1 = nib & 3, nib >> 2
    bad = i0 == i1
    return bad | (i0 > i1) if ordered else bad


# --------------------------------------------------------------------------------------
# The arithmetic's view: which B unit each stored unit multiplies.


def stored_rows(geo: Geometry, nib: jax.Array) -> jax.Array:
    """Nibbles (..., m, chunks) -> the row of B (the dense column of A) each stored
    element stands for, (..., m, K/2) int32 (:func:`indices_from_nibbles` in its group)."""
    col = indices_from_nibbles(geo, nib)
    return jnp.arange(col.shape[-1], dtype=jnp.int32) // geo.stored * geo.group + col



def gather_b(geo: Geometry, b: jax.Array, nib: jax.Array) -> jax.Array:
    """B (..., K, N) and nibbles (..., m, chunks) -> per row of A the B rows its stored
    elements multiply, (..., m, K/2, N): ``D[m] = A[m] @ gather_b(...)[m] + C[m]``.

    A 2-bit index selects a unit of B's column: the element (f16, bf16, 8-bit types),
    the pair of elements (s4/u4), or the 16-bit half (tf32: a stored element's low half
    multiplies the half its first index names, its high half the one its second names;
    a valid nibble names both halves of one element). This is what an H100 does with
    every nibble, the undefined ones included.
    """
    G, per = geo.group, geo.stored
    i0, i1 = (nib & 3).astype(jnp.int32), (nib >> 2).astype(jnp.int32)
    base = (jnp.arange(geo.chunks, dtype=jnp.int32) * G)[:, None]

    def take(x, r):  # x (..., K, N), r (..., m, K/2) -> (..., m, K/2, N)
        batch = jnp.broadcast_shapes(x.shape[:-2], r.shape[:-2])
        x = jnp.broadcast_to(x[..., None, :, :], batch + (1,) + x.shape[-2:])
        r = jnp.broadcast_to(r, batch + r.shape[-2:])
        return jnp.take_along_axis(x, r[..., None], axis=-2)

    if geo.a_format == "tf32":
        bits = jax.lax.bitcast_convert_type(b, jnp.uint32)

        def half(i):  # (..., m, chunks) -> the 16-bit unit i of each pair, (..., m, K/2, N)
            w = take(bits, jnp.arange(geo.chunks, dtype=jnp.int32) * 2 + (i >> 1))
            return (w >> (16 * (i & 1)).astype(jnp.uint32)[..., None]) & 0xFFFF

        word = (half(i1) << 16) | half(i0)
        return jax.lax.bitcast_convert_type(word, jnp.float32)
    if G == 8:  # s4 / u4: pairs
        j = jnp.arange(per, dtype=jnp.int32)
        pair = jnp.where(j < 2, i0[..., None], i1[..., None])
        r = base + 2 * pair + (j & 1)
    else:
        r = base + jnp.stack([i0, i1], -1)
    return take(b, r.reshape(nib.shape[:-1] + (geo.chunks * per,)))
