"""The values of a warp program walked one thread at a time (``program.Walk``): what
a register holds, what a moved value is, and the PTX facts the walk issues by.

A value is kept by what it depends on; its shape says which, as the block the program is
traced on has neither 1 nor 32 warps (:data:`TRACE_WARPS`): the warp and the lane
((b, 32)), the warp only ((b,), (b, 1)), the lane only ((32,), (1, 32)) or nothing.
"""

from __future__ import annotations

import functools

import numpy as np

WARP = 32
#: Warps of the block the program is traced on: neither 1 nor 32, so that a value's shape
#: says whether it depends on the warp, the lane, or both.
TRACE_WARPS = 8
DTYPES = frozenset({"float32", "int32", "uint32", "int16", "uint16", "int8", "uint8",
                    "bool"})


class Unsupported(Exception):
    """The program has an operation the thread walk does not run with XLA's bits."""


def is_int(dtype) -> bool:
    return np.issubdtype(dtype, np.integer) or np.dtype(dtype) == np.bool_


def bit_width(dtype) -> int:
    return 1 if np.dtype(dtype) == np.bool_ else np.dtype(dtype).itemsize * 8


def ptx_source(mode: str, b, c: int, lane=None) -> tuple[np.ndarray, np.ndarray]:
    """``shfl.sync``'s source lane ``j`` and validity for every lane (PTX ISA, shfl.sync;
    ``b`` an int or one per lane, ``lane`` the lanes, default 0..31): a lane whose source
    is not valid keeps its own value."""
    lane = np.arange(WARP) if lane is None else np.asarray(lane)
    seg = (c >> 8) & 0x1F
    cval = c & 0x1F
    max_lane = (lane & seg) | (cval & ~seg)
    min_lane = lane & seg
    b = np.asarray(b) & 0x1F
    if mode == "up":
        j = lane - b
        return j, j >= max_lane
    j = {"down": lane + b, "bfly": lane ^ b, "idx": min_lane | (b & ~seg)}[mode]
    return j, j <= max_lane


@functools.lru_cache(maxsize=1)
def all_shuffles() -> tuple:
    """(mode, b, c, effective source table) of every static ``shfl.sync`` of a width."""
    out = []
    for w in (32, 16, 8, 4, 2, 1):
        for mode in ("bfly", "up", "down", "idx"):
            c = ((WARP - w) << 8) | (0 if mode == "up" else 0x1F)
            for b in range(WARP):
                j, ok = ptx_source(mode, b, c)
                out.append((mode, b, c, np.where(ok, j, np.arange(WARP))))
    return tuple(out)


@functools.lru_cache(maxsize=4096)
def shuffle_for(src: tuple, care: tuple) -> tuple[str, int, int] | None:
    """The static ``shfl.sync`` (mode, b, c) whose lane ``l`` reads ``src[l]`` wherever
    ``care[l]``, or None."""
    s, m = np.asarray(src), np.asarray(care, bool)
    for mode, b, c, table in all_shuffles():
        if np.array_equal(table[m], s[m]):
            return mode, b, c
    return None


class Regs:
    """A value as registers: ``regs`` (one per warp of the thread), its dtype and kind
    ("full": (b, 32); "warp": the same in every lane; "lane": the same in every warp;
    "scalar")."""

    __slots__ = ("regs", "dtype", "kind")

    def __init__(self, regs, dtype, kind):
        self.regs, self.dtype, self.kind = list(regs), np.dtype(dtype), kind


class Moved:
    """A value under data movement: ``codes`` (its shape, in the traced block) say for each
    element which base (a :class:`Regs`), which warp and which lane it is."""

    __slots__ = ("codes", "bases", "dtype")

    def __init__(self, codes, bases, dtype):
        self.codes, self.bases, self.dtype = codes, bases, np.dtype(dtype)


STRIDE = TRACE_WARPS * WARP


def kind_of(shape) -> str | None:
    """What a value of this shape depends on (its size-1 axes aside), or None for an
    intermediate of a move."""
    sq = tuple(int(n) for n in shape if n != 1)
    return {(): "scalar", (WARP,): "lane", (TRACE_WARPS,): "warp",
            (TRACE_WARPS, WARP): "full"}.get(sq)


CANONICAL = {"full": (TRACE_WARPS, WARP), "warp": (TRACE_WARPS, 1), "lane": (1, WARP),
              "scalar": (1, 1)}


def as_block(a: np.ndarray, kind: str) -> np.ndarray:
    """An array of a ``kind`` shape as the (warps, 32) block it stands for."""
    return np.broadcast_to(a.reshape(CANONICAL[kind]), (TRACE_WARPS, WARP))


def of_block(block: np.ndarray, shape) -> np.ndarray:
    """The (warps, 32) block as an array of ``shape`` (a kind's shape)."""
    kind = kind_of(shape)
    pick = {"full": block, "warp": block[:, :1], "lane": block[:1, :],
            "scalar": block[:1, :1]}[kind]
    return pick.reshape(shape)


JOINS = {frozenset({"scalar"}): "scalar", frozenset({"lane"}): "lane",
         frozenset({"warp"}): "warp"}


def join(kinds) -> str:
    k = frozenset(kinds) - {"scalar"} or frozenset({"scalar"})
    return JOINS.get(k, "full")


def scatter_form(eqn) -> bool:
    """A scatter of one update per lane into a warp's 32 lanes: indices (b, 32, 1) with
    updates (b, 32), or indices (32, 1) shared by every warp."""
    d = eqn.params["dimension_numbers"]
    op, idx, upd = (v.aval for v in eqn.invars)
    if kind_of(op.shape) != "full" or kind_of(upd.shape) != "full" or op.ndim != 2 \
            or idx.shape[-1:] != (1,) or tuple(d.inserted_window_dims) != (1,) \
            or tuple(d.scatter_dims_to_operand_dims) != (1,):
        return False
    if idx.ndim == 3:
        return (tuple(d.update_window_dims) == () and tuple(d.operand_batching_dims) == (0,)
                and tuple(d.scatter_indices_batching_dims) == (0,))
    return idx.ndim == 2 and tuple(d.update_window_dims) == (0,) \
        and not tuple(d.operand_batching_dims)


def uint_of(dtype):
    if np.dtype(dtype) == np.bool_:
        return np.dtype(np.bool_)
    return np.dtype({1: np.uint8, 2: np.uint16, 4: np.uint32}[np.dtype(dtype).itemsize])
