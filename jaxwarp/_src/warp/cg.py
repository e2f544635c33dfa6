"""Cooperative groups over one warp: thread_block_tile, coalesced groups and partitions.

CUDA's ``cooperative_groups`` (``<cooperative_groups.h>``) names sets of threads and gives
them collectives. Over one warp these are masks of lanes, and every collective is one of
the warp intrinsics (``__shfl_sync``, ``__ballot_sync``, ``__match_any_sync``) with the
group's mask, which is how the CUDA 13 header implements them. jaxwarp does the same: a
group is, per lane, the mask of the lanes in its group (``uint32[32]``), and its methods
call `jaxwarp.shfl_sync` and the votes with that mask, with the header's arithmetic for
ranks and source lanes:

* :func:`thread_block_tile` / :func:`tiled_partition` of 1, 2, 4, 8, 16 or 32 lanes:
  lane ``l`` is rank ``l % N`` of the tile of lanes ``l & ~(N-1) ...``; shuffles pass
  ``width = N``; ``ballot``/``match_*`` shift the warp's bits down to the tile's;
* :func:`coalesced_threads`: the lanes executing the traced path (all 32 outside
  ``jaxwarp.branch``; see ``jaxwarp._src.warp.active``), ranked by lane; ``shfl(x, r)``
  reads the lane of rank ``r`` (found with PTX ``fns``; a rank past the group reads lane
  31, which gives 0 unless lane 31 is in the group), ``shfl_up``/``shfl_down`` move by
  ranks (a lane with no source keeps its value), ``ballot``/``match_*`` pack the bits by
  rank;
* :func:`labeled_partition` / :func:`binary_partition`: the lanes of a group with equal
  labels (``__match_any_sync``), ranked among the partitions by their lowest lane;
  ``tiled_partition(coalesced_group, n)``: runs of ``n`` consecutive ranks.

The reductions and scans are in ``cg_reduce.py``. Lanes outside a group (lanes that are not
executing) get 0 from every method.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxwarp._src import checks
from jaxwarp._src.warp import active as active_state
from jaxwarp._src.warp import lanes, vote

WARP_SIZE = checks.WARP_SIZE
TILE_SIZES = (1, 2, 4, 8, 16, 32)
_LANE = np.arange(WARP_SIZE, dtype=np.uint32)
_BIT = np.uint32(1) << _LANE
_FULL = 0xFFFFFFFF


# ----------------------------------------------------------------------------------------
# Bit helpers on per-lane masks (uint32[32]).


def _popc(x: jax.Array) -> jax.Array:
    return lax.population_count(x.astype(jnp.uint32)).astype(jnp.int32)


def _mask_bits(mask: jax.Array) -> jax.Array:
    """uint32[32] -> bool[32, 32]: [l, p] = bit p of lane l's mask."""
    return ((mask[:, None] >> jnp.asarray(_LANE)[None, :]) & 1) == 1


@jax.jit  # traced once per shape and reused: the groups call it many times
def find_nth_set(mask: jax.Array, base: jax.Array, offset: jax.Array) -> jax.Array:
    """PTX ``fns.b32 d, mask, base, offset`` per lane: the position of the ``|offset|``-th
    set bit of ``mask`` counting from ``base`` up (offset > 0) or down (offset < 0), base
    itself for offset 0 if set; ``0xFFFFFFFF`` (as int32: -1) when there is none."""
    bits = _mask_bits(mask)
    p = jnp.arange(WARP_SIZE, dtype=jnp.int32)[None, :]
    base = base[:, None]
    up = bits & (p >= base)
    down = bits & (p <= base)
    n_up = jnp.cumsum(up, axis=1, dtype=jnp.int32)  # set bits in [base, p]
    # set bits in [p, base]
    n_down = jnp.flip(jnp.cumsum(jnp.flip(down, 1), axis=1, dtype=jnp.int32), 1)
    off = offset[:, None]
    hit = jnp.where(off > 0, up & (n_up == off), down & (n_down == -off))
    hit = jnp.where(off == 0, bits & (p == base), hit)
    found = jnp.any(hit, axis=1)
    return jnp.where(found, jnp.argmax(hit, axis=1).astype(jnp.int32), jnp.int32(-1))


def _pack(bits: jax.Array, mask: jax.Array) -> jax.Array:
    """Packs ``bits`` (uint32[32]) by the rank of each lane in ``mask`` (``_packLanes``)."""
    member = _mask_bits(mask)
    rank = jnp.cumsum(member, axis=1, dtype=jnp.int32) - 1
    sel = member & _mask_bits(bits)
    shifted = jnp.where(sel, jnp.uint32(1) << jnp.clip(rank, 0, 31).astype(jnp.uint32), 0)
    return jnp.sum(shifted, axis=1, dtype=jnp.uint32)


def bit_view(x: jax.Array) -> jax.Array:
    u = {2: jnp.uint16, 4: jnp.uint32, 8: jnp.uint64}[x.dtype.itemsize]
    return lax.bitcast_convert_type(x, u)


def from_bit_view(b: jax.Array, dtype) -> jax.Array:
    return lax.bitcast_convert_type(b, dtype)


@jax.custom_jvp
def select(p: jax.Array, a: jax.Array, b: jax.Array) -> jax.Array:
    """``where(p, a, b)`` that keeps every bit of a float (XLA's select on the CPU may
    quiet a bfloat16 or float16 NaN); ``p`` broadcasts over trailing axes of a lane array."""
    p = p.reshape(p.shape + (1,) * (a.ndim - p.ndim)) if p.ndim < a.ndim else p
    if jnp.issubdtype(a.dtype, jnp.floating):
        return from_bit_view(jnp.where(p, bit_view(a), bit_view(b)), a.dtype)
    return jnp.where(p, a, b)


@select.defjvp
def _select_jvp(primals, tangents):
    p, a, b = primals
    _, ta, tb = tangents
    pp = p.reshape(p.shape + (1,) * (a.ndim - p.ndim)) if p.ndim < a.ndim else p
    return select(p, a, b), jnp.where(pp, ta, tb)


def active_mask() -> jax.Array:
    """uint32 scalar: bits of the lanes executing the traced path."""
    act = active_state.active_lanes()
    if act is None:
        return jnp.uint32(_FULL)
    return jnp.sum(jnp.where(act, jnp.asarray(_BIT), jnp.uint32(0)), dtype=jnp.uint32)


def _executing() -> jax.Array | None:
    return active_state.active_lanes()


def lane_index() -> jax.Array:
    return jnp.arange(WARP_SIZE, dtype=jnp.int32)


def _pred(pred: Any, name: str = "pred") -> jax.Array:
    p = checks.lane_array(pred, name)
    if p.ndim != 1 or not (p.dtype == jnp.bool_ or jnp.issubdtype(p.dtype, jnp.integer)):
        raise TypeError(f"{name} must be a (32,) bool or integer array (non-zero = true), "
                        f"got {p.dtype}{list(p.shape)}")
    return p != 0 if p.dtype != jnp.bool_ else p


# ----------------------------------------------------------------------------------------
# Groups.


@jax.tree_util.register_pytree_node_class
class ThreadBlock:
    """``cg::this_thread_block()`` seen from one warp: ``warp`` is the warp's index in the
    block and ``threads`` the block's size (static); ``thread_rank = 32·warp + lane``."""

    def __init__(self, threads: int, warp: Any):
        self.threads = threads
        self.warp = warp

    def tree_flatten(self):
        return (self.warp,), (self.threads,)

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(aux[0], children[0])

    def thread_rank(self) -> jax.Array:
        """int32[32]: ``32·warp + lane``."""
        return jnp.asarray(self.warp, jnp.int32) * WARP_SIZE + lane_index()

    def num_threads(self) -> jax.Array:
        """int32[32]: the block's size."""
        return jnp.full((WARP_SIZE,), self.threads, jnp.int32)

    size = num_threads

    def sync(self) -> None:
        """``block.sync()``: nothing to do for one warp."""


def this_thread_block(threads: int = WARP_SIZE, warp: Any = 0) -> ThreadBlock:
    """``cg::this_thread_block()`` for the warp ``warp`` of a block of ``threads`` threads.

    Args:
        threads: static block size, a multiple of 32 in 32 .. 1024.
        warp: this warp's index in the block (an int, or a traced int32 scalar, e.g. from
            ``jax.vmap`` over warps), in 0 .. threads / 32 - 1.

    Returns:
        A `ThreadBlock`; pass it to `tiled_partition`.

    Example:
        >>> block = jaxwarp.cg.this_thread_block(64, warp=1)
        >>> block.thread_rank()[:3]
        Array([32, 33, 34], dtype=int32)
    """
    threads = checks.static_int(threads, "threads")
    if not (WARP_SIZE <= threads <= 1024 and threads % WARP_SIZE == 0):
        raise ValueError(f"threads={threads}: a block of whole warps is modelled; allowed: "
                         f"multiples of 32 in 32 .. 1024")
    w = checks.int_value(warp, "warp")
    if w is not None and not 0 <= w < threads // WARP_SIZE:
        raise ValueError(f"warp={w} is not a warp of a block of {threads} threads; allowed: "
                         f"0 .. {threads // WARP_SIZE - 1}")
    if w is None:
        warp = checks.array_arg(warp, "warp")
        if warp.ndim != 0 or not jnp.issubdtype(warp.dtype, jnp.integer):
            raise TypeError(f"warp must be an integer scalar, got {warp.dtype}{list(warp.shape)}")
    return ThreadBlock(threads, warp)


@jax.tree_util.register_pytree_node_class
class Group:
    """A cooperative group over one warp, as each lane sees it.

    ``mask`` (uint32[32]) is, per lane, the lanes of its group (0 for a lane in no group);
    ``tile`` is N for a ``thread_block_tile<N>`` (static) and ``None`` for a
    ``coalesced_group``; ``meta_rank`` / ``meta_size`` (int32[32]) are what
    ``meta_group_rank()`` / ``meta_group_size()`` return; ``tiled`` marks a coalesced group
    made by ``tiled_partition`` of a tiled group (the header's ``is_tiled``).
    """

    def __init__(self, mask, tile, meta_rank, meta_size, tiled=False):
        self.mask = mask
        self.tile = tile
        self.meta_rank = meta_rank
        self.meta_size = meta_size
        self.tiled = tiled

    def tree_flatten(self):
        return (self.mask, self.meta_rank, self.meta_size), (self.tile, self.tiled)

    @classmethod
    def tree_unflatten(cls, aux, children):
        mask, meta_rank, meta_size = children
        return cls(mask, aux[0], meta_rank, meta_size, aux[1])

    def __repr__(self) -> str:
        kind = f"thread_block_tile<{self.tile}>" if self.tile else "coalesced_group"
        return f"jaxwarp.cg.{kind}"

    # -- sizes and ranks --------------------------------------------------------------

    def num_threads(self) -> jax.Array:
        """int32[32]: the number of lanes in each lane's group (``num_threads()``)."""
        if self.tile is not None:
            return jnp.where(self.mask != 0, self.tile, 0).astype(jnp.int32)
        return _popc(self.mask)

    size = num_threads

    def thread_rank(self) -> jax.Array:
        """int32[32]: the lane's rank in its group (lanes below it in the group)."""
        lt = jnp.asarray((np.uint32(1) << _LANE) - np.uint32(1))
        return jnp.where(self.mask != 0, _popc(self.mask & lt), 0)

    def meta_group_rank(self) -> jax.Array:
        """int32[32]: the group's index among the groups its parent was split into."""
        return jnp.broadcast_to(jnp.asarray(self.meta_rank, jnp.int32), (WARP_SIZE,))

    def meta_group_size(self) -> jax.Array:
        """int32[32]: how many groups the parent was split into."""
        return jnp.broadcast_to(jnp.asarray(self.meta_size, jnp.int32), (WARP_SIZE,))

    def sync(self) -> None:
        """``group.sync()`` (``__syncwarp(mask)``): nothing to compute in the array model."""

    # -- the mask the intrinsics get ---------------------------------------------------

    def _call_mask(self):
        """The mask to pass to a warp intrinsic: a static int when every lane calls with
        the full mask (a static shuffle), else the per-lane masks (0 = does not call)."""
        if self.tile is not None and isinstance(self.mask, np.ndarray):
            return _FULL  # all lanes call; width = N keeps every source in the tile
        return self.mask

    def _is_full(self) -> jax.Array:
        return self.mask == jnp.uint32(_FULL)

    def _shift(self) -> jax.Array:
        """Tiles: the lane of the tile's rank 0 (``laneid & ~(N-1)``)."""
        return (lane_index() & ~(self.tile - 1)).astype(jnp.uint32)

    # -- shuffles -----------------------------------------------------------------------

    def shfl(self, var: Any, src_rank: Any) -> jax.Array:
        """``group.shfl(var, srcRank)``: the value of the lane of rank ``src_rank``.

        Tiles: ``__shfl_sync(tile mask, var, srcRank, N)`` (srcRank taken modulo N).
        Coalesced groups: the lane of that rank (rank 0: the lowest lane; a full group:
        lane ``srcRank``); a rank outside the group reads lane 31 (0 unless lane 31 is a
        member). Any dtype; the bits are moved.
        """
        var = checks.lane_array(var, "var", complex_ok=True)
        if self.tile is not None:
            return lanes.shfl_sync(self._call_mask(), var, src_rank, self.tile)
        r = checks.per_lane_int(src_rank, "src_rank")
        zeros = jnp.zeros(WARP_SIZE, jnp.int32)
        first = find_nth_set(self.mask, zeros, jnp.ones(WARP_SIZE, jnp.int32))
        nth = find_nth_set(self.mask, jnp.zeros(WARP_SIZE, jnp.int32), r + 1)
        src = jnp.where(r == 0, first, jnp.where(self._is_full(), r, nth))
        # A rank past the group reads lane 31 (fns finds no lane: 0xFFFFFFFF & 31). On the
        # H100 that lane's value comes back whenever lane 31 is executing the shuffle, even
        # from another partition; 0 when it is not: the executing lanes act as the mask.
        calls = jnp.where(self.mask != 0, active_mask(), jnp.uint32(0))
        return lanes.shfl_sync(calls, var, src, WARP_SIZE)

    def _shfl_rel(self, var, delta, sign: int, mode: str):
        var = checks.lane_array(var, "var", complex_ok=True)
        if self.tile is not None:
            fn = lanes.shfl_up_sync if mode == "up" else lanes.shfl_down_sync
            return fn(self._call_mask(), var, delta, self.tile)
        d = checks.per_lane_int(delta, "delta")
        lane = lane_index()
        src = find_nth_set(self.mask, lane, sign * (d + 1))
        src = jnp.where((src < 0) | (src >= WARP_SIZE), lane, src)
        fn = lanes.shfl_up_sync if mode == "up" else lanes.shfl_down_sync
        # A whole-warp group shuffles by lanes; the other lanes do not make that call.
        full = fn(jnp.where(self._is_full(), self.mask, jnp.uint32(0)), var, d, WARP_SIZE)
        part = lanes.shfl_sync(self.mask, var, src, WARP_SIZE)
        return select(self._is_full(), full, part)

    def shfl_up(self, var: Any, delta: Any) -> jax.Array:
        """``group.shfl_up(var, delta)``: the value of the lane ``delta`` ranks lower (a
        lane with none keeps its own value). Tiles: ``__shfl_up_sync(.., width=N)``."""
        return self._shfl_rel(var, delta, -1, "up")

    def shfl_down(self, var: Any, delta: Any) -> jax.Array:
        """``group.shfl_down(var, delta)``: the value of the lane ``delta`` ranks higher (a
        lane with none keeps its own value). Tiles: ``__shfl_down_sync(.., width=N)``."""
        return self._shfl_rel(var, delta, 1, "down")

    def shfl_xor(self, var: Any, lane_mask: Any) -> jax.Array:
        """``tile.shfl_xor(var, laneMask)`` (thread_block_tile only):
        ``__shfl_xor_sync(tile mask, var, laneMask, N)``."""
        if self.tile is None:
            raise TypeError("shfl_xor is a method of thread_block_tile only (CUDA's "
                            "coalesced_group has shfl, shfl_up and shfl_down)")
        var = checks.lane_array(var, "var", complex_ok=True)
        # lane ^ laneMask can fall below the tile (PTX bounds it above only): that lane is
        # outside the tile's mask and reads 0, so the mask is the tile's, not the warp's.
        mask = self._call_mask() if self.tile == WARP_SIZE else jnp.asarray(self.mask)
        return lanes.shfl_xor_sync(mask, var, lane_mask, self.tile)

    # -- votes and matches ---------------------------------------------------------------

    def _ballot_raw(self, pred) -> jax.Array:
        return vote.ballot_sync(self.mask, _pred(pred))

    def ballot(self, pred: Any) -> jax.Array:
        """uint32[32]: bit r set where the group's rank-r lane has ``pred`` true."""
        raw = self._ballot_raw(pred)
        if self.tile is not None:
            return raw >> self._shift()
        return jnp.where(self._is_full(), raw, _pack(raw, self.mask))

    def any(self, pred: Any) -> jax.Array:
        """int32[32]: 1 where ``pred`` holds on some lane of the group."""
        return ((self._ballot_raw(pred) != 0) & (self.mask != 0)).astype(jnp.int32)

    def all(self, pred: Any) -> jax.Array:
        """int32[32]: 1 where ``pred`` holds on every lane of the group."""
        return ((self._ballot_raw(pred) == self.mask) & (self.mask != 0)).astype(jnp.int32)

    def match_any(self, value: Any) -> jax.Array:
        """uint32[32]: the ranks (as bits) of the group's lanes whose value has the same bits."""
        raw = vote.match_any_sync(self.mask, value)
        if self.tile is not None:
            return raw >> self._shift()
        return jnp.where(self._is_full(), raw, _pack(raw, self.mask))

    def match_all(self, value: Any) -> tuple[jax.Array, jax.Array]:
        """(uint32[32], int32[32]): the group's ranks as bits and 1 where every lane of the
        group holds the same bits; (0, 0) otherwise."""
        raw, pred = vote.match_all_sync(self.mask, value)
        if self.tile is not None:
            return raw >> self._shift(), pred
        return jnp.where(self._is_full(), raw, _pack(raw, self.mask)), pred


# ----------------------------------------------------------------------------------------
# Making groups.


def _check_tile_size(n: Any) -> int:
    n = checks.static_int(n, "size")
    if n not in TILE_SIZES:
        raise ValueError(f"tile size {n} is not supported; allowed: {TILE_SIZES} "
                         f"(thread_block_tile of one warp or less)")
    return n


def _tile_of(n: int, rank: jax.Array, size: jax.Array) -> Group:
    """thread_block_tile<n> whose parent has this thread_rank / size per lane."""
    base = (_LANE & ~np.uint32(n - 1)).astype(np.uint32)
    mask = ((np.uint32((1 << n) - 1) if n < 32 else np.uint32(_FULL)) << base).astype(np.uint32)
    act = _executing()
    if act is not None:
        mask = jnp.where(act, jnp.asarray(mask), jnp.uint32(0))
    return Group(mask, n, rank // n, (size + n - 1) // n)


def tiled_partition(parent: Any, size: int) -> Group:
    """``cg::tiled_partition<size>(parent)`` / ``cg::tiled_partition(parent, size)``.

    Args:
        parent: a `ThreadBlock` (`this_thread_block`), a thread_block_tile (`Group` with
            ``tile`` set) larger than ``size``, or a coalesced group.
        size: static, one of 1, 2, 4, 8, 16, 32.

    Returns:
        A thread_block_tile of ``size`` lanes (its meta_group_rank is the parent's
        thread_rank // size, meta_group_size ``ceil(parent size / size)``), or for a
        coalesced parent a coalesced group of ``size`` consecutive ranks (the whole parent
        if it has at most ``size`` lanes).

    Raises:
        ValueError: a size not in 1 .. 32 (powers of two), or a tile not smaller than its
            parent tile.
        TypeError: ``parent`` is not a group.

    Example:
        >>> tile = jaxwarp.cg.tiled_partition(jaxwarp.cg.this_thread_block(), 8)
        >>> tile.thread_rank()[6:10], tile.meta_group_rank()[6:10]
        (Array([6, 7, 0, 1], dtype=int32), Array([0, 0, 1, 1], dtype=int32))
    """
    n = _check_tile_size(size)
    if isinstance(parent, ThreadBlock):
        rank = parent.thread_rank()
        return _tile_of(n, rank, jnp.int32(parent.threads))
    if not isinstance(parent, Group):
        raise TypeError(f"parent must be a jaxwarp.cg group (this_thread_block(), a tile or "
                        f"a coalesced group), got {type(parent).__name__}")
    if parent.tile is not None:
        if n >= parent.tile:
            raise ValueError(f"tile size {n} must be smaller than the parent tile's "
                             f"{parent.tile} (CUDA: static_assert)")
        return _tile_of(n, parent.thread_rank(), jnp.int32(parent.tile))
    return _tile_coalesced(parent, n)


def _tile_coalesced(g: Group, n: int) -> Group:
    size = g.num_threads()
    rank = g.thread_rank()
    lane = lane_index()
    if g.tiled:
        base = rank & ~(n - 1)
        length = jnp.minimum(size - base, n)
        m = jnp.where(length > 0, jnp.uint32(_FULL) >> (32 - length).astype(jnp.uint32), 0)
        m = (m << (lane & ~(n - 1)).astype(jnp.uint32)).astype(jnp.uint32)
        meta = (rank // n, size // n)
    else:
        member = _mask_bits(g.mask)
        r = jnp.cumsum(member, axis=1, dtype=jnp.int32) - 1  # rank of each member lane
        first = (rank // n) * n
        take = member & (r >= first[:, None]) & (r < first[:, None] + n)
        m = jnp.sum(jnp.where(take, jnp.asarray(_BIT)[None, :], 0), axis=1, dtype=jnp.uint32)
        meta = (rank // n, (size + n - 1) // n)
    small = size <= n
    mask = jnp.where(small, g.mask, m)
    mask = jnp.where(g.mask != 0, mask, jnp.uint32(0))
    meta_rank = jnp.where(small, g.meta_group_rank(), meta[0])
    meta_size = jnp.where(small, g.meta_group_size(), meta[1])
    return Group(mask, None, meta_rank, meta_size, tiled=g.tiled)


def thread_block_tile(size: int, *, threads: int = WARP_SIZE, warp: Any = 0) -> Group:
    """``cg::tiled_partition<size>(cg::this_thread_block())``: a tile of ``size`` lanes.

    Args:
        size: static, one of 1, 2, 4, 8, 16, 32.
        threads, warp: the block (see `this_thread_block`); they only set
            meta_group_rank / meta_group_size.

    Returns:
        A `Group` with ``tile == size``.

    Raises:
        ValueError: ``size`` is not a power of two in 1 .. 32.

    Example:
        >>> tile = jaxwarp.cg.thread_block_tile(4)
        >>> x = jaxwarp.lane_id()
        >>> tile.shfl_xor(x, 1)[:4], tile.shfl(x, 3)[4:8]
        (Array([1, 0, 3, 2], dtype=int32), Array([7, 7, 7, 7], dtype=int32))
    """
    return tiled_partition(this_thread_block(threads, warp), size)


def coalesced_threads() -> Group:
    """``cg::coalesced_threads()``: the lanes executing the traced path.

    Outside a ``jaxwarp.branch`` every lane executes, so this is the whole warp; inside
    one it is the lanes that took the branch (``__activemask()``). meta_group_rank 0,
    meta_group_size 1.

    Returns:
        A coalesced `Group` (``tile`` None).

    Example:
        >>> g = jaxwarp.cg.coalesced_threads()
        >>> int(g.num_threads()[0]), g.thread_rank()[:3]
        (32, Array([0, 1, 2], dtype=int32))
    """
    m = active_mask()
    act = _executing()
    mask = jnp.full((WARP_SIZE,), m, jnp.uint32)
    if act is not None:
        mask = jnp.where(act, mask, jnp.uint32(0))
    zeros = jnp.zeros(WARP_SIZE, jnp.int32)
    return Group(mask, None, zeros, zeros + (mask != 0).astype(jnp.int32))


def _group_arg(group: Any, fn: str) -> Group:
    if not isinstance(group, Group):
        raise TypeError(f"{fn}: group must be a jaxwarp.cg group (a tile or a coalesced "
                        f"group), got {type(group).__name__}")
    return group


def labeled_partition(group: Any, label: Any) -> Group:
    """``cg::labeled_partition(group, label)``: the lanes of ``group`` with equal labels.

    Args:
        group: a thread_block_tile or coalesced group.
        label: (32,) integer labels (int32/uint32, or 64-bit with x64), compared as bits.

    Returns:
        A coalesced `Group` per lane: the lanes of its group with its label; its
        meta_group_rank counts the partitions whose lowest lane is below its own lowest
        lane, meta_group_size is the number of partitions.

    Raises:
        TypeError: ``label`` is not an integer array, or ``group`` is not a group.

    Example:
        >>> part = jaxwarp.cg.labeled_partition(jaxwarp.cg.thread_block_tile(32),
        ...                                     jaxwarp.lane_id() % 3)
        >>> part.num_threads()[:4], part.meta_group_rank()[:4]
        (Array([11, 11, 10, 11], dtype=int32), Array([0, 1, 2, 0], dtype=int32))
    """
    g = _group_arg(group, "labeled_partition")
    label = checks.lane_array(label, "label")
    if label.ndim != 1 or not jnp.issubdtype(label.dtype, jnp.integer):
        raise TypeError(f"label must be a (32,) integer array (CUDA: an integral label), "
                        f"got {label.dtype}{list(label.shape)}")
    sub = vote.match_any_sync(g.mask, label)
    leader = _ffs(sub)
    is_leader = (leader == lane_index()) & (g.mask != 0)
    leaders = vote.ballot_sync(g.mask, is_leader)
    below = jnp.where(leader >= 0, (jnp.uint32(1) << jnp.clip(leader, 0, 31).astype(jnp.uint32))
                      - jnp.uint32(1), 0)
    rank = _popc(leaders & below)
    return Group(sub, None, rank, _popc(leaders))


def _ffs(mask: jax.Array) -> jax.Array:
    """Lowest set lane of each mask (int32), -1 for 0."""
    return find_nth_set(mask, jnp.zeros(WARP_SIZE, jnp.int32), jnp.ones(WARP_SIZE, jnp.int32))


def binary_partition(group: Any, pred: Any) -> Group:
    """``cg::binary_partition(group, pred)``: the lanes of ``group`` with the same ``pred``.

    Args:
        group: a thread_block_tile or coalesced group.
        pred: (32,) bool or integer (non-zero = true).

    Returns:
        A coalesced `Group`: meta_group_rank 1 for the true lanes and 0 for the false
        ones, meta_group_size 2; when all lanes agree, the whole group with (0, 1).

    Example:
        >>> part = jaxwarp.cg.binary_partition(jaxwarp.cg.coalesced_threads(),
        ...                                    jaxwarp.lane_id() < 8)
        >>> part.num_threads()[jnp.array([0, 8])], part.meta_group_rank()[jnp.array([0, 8])]
        (Array([ 8, 24], dtype=int32), Array([1, 0], dtype=int32))
    """
    g = _group_arg(group, "binary_partition")
    p = _pred(pred)
    set_mask = vote.ballot_sync(g.mask, p)
    same = (set_mask == g.mask) | (set_mask == 0)
    sub = g.mask & jnp.where(p, set_mask, ~set_mask)
    mask = jnp.where(same, g.mask, sub)
    rank = jnp.where(same, 0, p.astype(jnp.int32))
    size = jnp.where(same, 1, 2).astype(jnp.int32)
    on = g.mask != 0
    return Group(jnp.where(on, mask, jnp.uint32(0)), None, jnp.where(on, rank, 0),
                 jnp.where(on, size, 0))
