"""``cg::reduce``, ``cg::inclusive_scan``, ``cg::exclusive_scan`` and ``cg::invoke_one``.

The float results depend on the order of the operations, which is that of the CUDA 13
header (``cooperative_groups/details/coalesced_reduce.h``, ``coalesced_scan.h``):

* reduce over a thread_block_tile of N lanes, or a coalesced group of all 32 lanes: a
  butterfly, ``out = op(out, shfl_xor(out, m))`` for m = N/2, ..., 1 (each lane combines
  its own partial first, so with NaN or signed zeros under ``less``/``greater`` lanes can
  end with different values); for int32/uint32 with the built-in ops the hardware
  ``redux.sync`` gives the same (order-free) result;
* reduce over a smaller coalesced group: the inclusive scan below, then every lane reads the
  result of the group's highest lane;
* inclusive scan (every group): for i = 1, 2, 4, ...: ``out = op(out, out of rank - i)``
  where ``i <= rank`` (Hillis-Steele over ranks, own partial first);
* exclusive scan: ``inclusive - x`` for ``plus`` on integers; else the inclusive result of
  rank - 1, and ``T{}`` (0, +0.0) on rank 0.

Float ``plus`` is IEEE addition rounded to nearest even on the bits (``softfloat.add_rn``;
binary64 through ``fma.fma64``), never XLA's float add, which flushes subnormals on the CPU.
A NaN sum is the canonical NaN for float32 (``0x7FFFFFFF``), float16 and bfloat16 (``0x7FFF``)
and, for float64, the NaN operand quieted: a signalling one before a quiet one, else the
first operand's: in a scan the lane's own partial, in a butterfly the partner's (the H100's
results on both captured seeds).
``less``/``greater`` are the header's ``(b < a) ? b : a`` / ``(a < b) ? b : a``, compared on
the bits (so -0 and +0 tie and a NaN never compares less).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxwarp._src import checks
from jaxwarp._src.numerics import fma, softfloat
from jaxwarp._src.warp import checked, lanes
from jaxwarp._src.warp.active import lanes_mask
from jaxwarp._src.warp.cg import (
    WARP_SIZE,
    Group,
    bit_view,
    find_nth_set,
    from_bit_view,
    lane_index,
    select,
)

OPS = ("plus", "less", "greater", "bit_and", "bit_or", "bit_xor")
_INT_ONLY = ("bit_and", "bit_or", "bit_xor")
_FLOATS = {"float16": "f16", "bfloat16": "bf16", "float32": "f32", "float64": "f64"}
_INTS = ("int32", "uint32", "int64", "uint64")
#: The NaN a float ``plus`` returns, per format (the H100's canonical NaN).
NAN_BITS = {"f16": 0x7FFF, "bf16": 0x7FFF, "f32": 0x7FFFFFFF}


@dataclasses.dataclass(frozen=True)
class Op:
    """A ``cooperative_groups`` function object (``cg::plus<T>()`` ...), by name."""

    name: str

    def __call__(self, a: jax.Array, b: jax.Array) -> jax.Array:
        return _apply(self.name, a, b)

    def __repr__(self) -> str:
        return f"jaxwarp.cg.{self.name}"


plus = Op("plus")
less = Op("less")
greater = Op("greater")
bit_and = Op("bit_and")
bit_or = Op("bit_or")
bit_xor = Op("bit_xor")


# ----------------------------------------------------------------------------------------
# The binary operations on values.


_QUIET64 = 1 << 51
_EXP64 = 0x7FF0000000000000


def _dadd(ua: jax.Array, ub: jax.Array) -> jax.Array:
    """binary64 ``a + b`` on bits: the sum of ``fma64(a, 1, b)``; a NaN result is a NaN
    operand quieted, a signalling NaN before a quiet one, else ``a``'s before ``b``'s."""
    one = jnp.full(ua.shape, 0x3FF0000000000000, jnp.uint64)
    r = fma.fma64(ua, one, ub)
    mag = jnp.uint64(0x7FFFFFFFFFFFFFFF)
    na, nb = (ua & mag) > jnp.uint64(_EXP64), (ub & mag) > jnp.uint64(_EXP64)
    q = jnp.uint64(_QUIET64)
    sa, sb = na & ((ua & q) == 0), nb & ((ub & q) == 0)
    pick_a = na & ~(sb & ~sa)  # as the H100's DADD: a signalling NaN first, then a's
    nan = jnp.where(pick_a, ua, ub) | q
    return jnp.where(na | nb, nan, r)


@jax.custom_jvp
def _fadd(a: jax.Array, b: jax.Array) -> jax.Array:
    return _fadd_bits(a, b)


# One traced (and, under vmap, batched) copy per shape and dtype, reused by every step of
# every tree: a reduction and its scans call the soft-float adder many times, and tracing
# it inline each time was most of the time of tracing them.
@jax.jit
def _fadd_bits(a: jax.Array, b: jax.Array) -> jax.Array:
    fmt = _FLOATS[a.dtype.name]
    if fmt == "f64":
        return from_bit_view(_dadd(bit_view(a), bit_view(b)), a.dtype)
    ua, ub = bit_view(a).astype(jnp.uint32), bit_view(b).astype(jnp.uint32)
    r = softfloat.add_rn(softfloat.term(ua, fmt), softfloat.term(ub, fmt), fmt, NAN_BITS[fmt])
    return from_bit_view(r.astype(bit_view(a).dtype), a.dtype)


@_fadd.defjvp
def _fadd_jvp(primals, tangents):
    # The value is the rounded sum; its derivative is that of a + b.
    a, b = primals
    ta, tb = tangents
    return _fadd(a, b), ta + tb


def _key(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(ordered integer key, is NaN) of a float: -0 and +0 share key 0."""
    u = bit_view(x)
    nb = 8 * x.dtype.itemsize
    sign = jnp.asarray(1 << (nb - 1), u.dtype)
    mag = u & ~sign
    fmt = _float_fields(x.dtype.name)
    exp_mask = ((1 << fmt[0]) - 1) << fmt[1]
    nan = (mag > exp_mask) if nb <= 32 else (mag > jnp.uint64(exp_mask))
    si = jnp.int64 if nb == 64 else jnp.int32
    m = mag.astype(si)
    return jnp.where((u & sign) != 0, -m, m), nan


def _float_fields(name: str) -> tuple[int, int]:
    """(exponent bits, fraction bits) of a float dtype name."""
    return {"float16": (5, 10), "bfloat16": (8, 7), "float32": (8, 23), "float64": (11, 52)}[name]


@jax.jit  # traced once per dtype and reused
def _lt(a: jax.Array, b: jax.Array) -> jax.Array:
    if jnp.issubdtype(a.dtype, jnp.floating):
        ka, na = _key(a)
        kb, nb = _key(b)
        return (ka < kb) & ~na & ~nb
    return a < b


def _apply(name: str, a: jax.Array, b: jax.Array) -> jax.Array:
    if name == "plus":
        return _fadd(a, b) if jnp.issubdtype(a.dtype, jnp.floating) else a + b
    if name == "less":
        return select(_lt(b, a), b, a)
    if name == "greater":
        return select(_lt(a, b), b, a)
    fn = {"bit_and": jnp.bitwise_and, "bit_or": jnp.bitwise_or, "bit_xor": jnp.bitwise_xor}
    return fn[name](a, b)


def _op_arg(op: Any, value: jax.Array, fn: str) -> Callable | Op:
    if isinstance(op, str):
        op = Op(checks.static_choice(op, "op", OPS))
    if isinstance(op, Op):
        if op.name not in OPS:
            raise ValueError(f"{fn}: op={op.name!r} is not a cooperative-groups operator; "
                             f"allowed: {OPS}")
        if op.name in _INT_ONLY and not jnp.issubdtype(value.dtype, jnp.integer):
            raise TypeError(f"{fn}: op={op.name!r} needs an integer value, got dtype "
                            f"{value.dtype} (allowed: {_INTS})")
        return op
    if callable(op):
        return op
    raise TypeError(f"{fn}: op must be one of {OPS}, a jaxwarp.cg operator or a callable "
                    f"op(a, b), got {type(op).__name__}")


def _value_arg(value: Any, fn: str) -> jax.Array:
    v = checks.lane_array(value, "value")
    if v.dtype.name not in _INTS + tuple(_FLOATS):
        raise TypeError(f"{fn}: value has dtype {v.dtype}; allowed: "
                        f"{_INTS + tuple(_FLOATS)}")
    return v


def _group_arg(group: Any, fn: str) -> Group:
    if not isinstance(group, Group):
        raise TypeError(f"{fn}: group must be a jaxwarp.cg group (a tile or a coalesced "
                        f"group), got {type(group).__name__}")
    return group


# ----------------------------------------------------------------------------------------
# The trees.


_STEPS = (1, 2, 4, 8, 16)  # the scan's strides over ranks, and the butterfly's (reversed)
_BELOW = np.uint32(1) << np.arange(WARP_SIZE, dtype=np.uint32)
_BELOW = _BELOW - np.uint32(1)  # [l]: the bits of the lanes below lane l


@jax.jit  # traced once per shape and reused
def _rank_sources(mask: jax.Array) -> jax.Array:
    """int32[5, 32]: [k, l] = the lane of rank ``rank(l) - 2**k`` in lane l's group, i.e.
    the ``2**k``-th set bit of ``mask[l]`` below lane l; lane l itself where there is none.

    Elementwise on the masks (the highest set bit, cleared, 16 times): no table over ranks
    and no gather."""
    lane = lane_index()
    m = mask.astype(jnp.uint32) & jnp.asarray(_BELOW)
    out = []
    for k in range(1, _STEPS[-1] + 1):
        top = 31 - lax.clz(m).astype(jnp.int32)  # -1 where m == 0
        if k in _STEPS:
            out.append(jnp.where(top >= 0, top, lane))
        m = m & ~jnp.where(top >= 0, jnp.uint32(1) << jnp.clip(top, 0, 31).astype(jnp.uint32),
                           jnp.uint32(0))
    return jnp.stack(out)


@jax.custom_jvp
def _take_bits(v: jax.Array, src: jax.Array) -> jax.Array:
    """``v[src]`` along the lane axis, moving the bits (a float NaN keeps its payload)."""
    if jnp.issubdtype(v.dtype, jnp.floating):
        return from_bit_view(bit_view(v)[src], v.dtype)
    return v[src]


@_take_bits.defjvp
def _take_bits_jvp(primals, tangents):
    v, src = primals
    return _take_bits(v, src), tangents[0][src]


class _Shuffler:
    """``__shfl_sync(group mask, var, src)`` for the lanes of one group, many times.

    The lanes that call (own bit in their mask, executing) and, as one 32-bit word, the
    lanes a source may be, are found once; each shuffle is then one gather: a lane whose
    source is outside its mask or does not call reads 0, a lane that does not call keeps
    its own value, as `jaxwarp.shfl_sync` does (which checked mode still calls, for its
    reports)."""

    def __init__(self, mask: jax.Array):
        self.mask = mask
        self.checked = checked.enabled()
        if not self.checked:
            self.calls = lanes.participating(mask)
            self.callers = lanes_mask(self.calls)

    def __call__(self, v: jax.Array, src: jax.Array) -> jax.Array:
        if self.checked:
            return lanes.shfl_sync(self.mask, v, src, WARP_SIZE)
        s = src.astype(jnp.uint32)
        ok = (((self.mask.astype(jnp.uint32) >> s) & 1) & ((self.callers >> s) & 1)) == 1
        moved = select(ok, _take_bits(v, src), jnp.zeros_like(v))
        return select(self.calls, moved, v)


def _coalesced_steps(group: Group, v: jax.Array, op, full, shfl=None) -> jax.Array:
    """The header's trees over a coalesced group, one shuffle and one ``op`` per step.

    A lane of a smaller group runs the scan's step ``op(out, out of rank - i)`` (i = 1, 2,
    ..., 16, where ``i <= rank``); with ``full`` (bool[32] or None), a lane of a whole-warp
    group runs the butterfly's step ``op(out, shfl_xor(out, m))`` (m = 16, ..., 1) instead:
    the two trees share each step's shuffle and ``op`` (each lane picks its source and its
    operands), so every lane gets the bits of its own tree at the cost of one.

    The five steps are a ``fori_loop``: each step gathers the partials of the step before
    at data-dependent lanes, and unrolled, XLA (CPU) fused those gathers into the next
    step's loop, evaluating the earlier steps' float additions again for every read (an
    optimization barrier did not stop it); the loop stores each step's partials once.
    Checked mode unrolls the steps (its reports are not made inside loops)."""
    rank = group.thread_rank()
    src = _rank_sources(group.mask)
    lane = lane_index()
    swap = op == plus and jnp.issubdtype(v.dtype, jnp.floating)
    shfl = _Shuffler(group.mask) if shfl is None else shfl

    def step(k, out):
        take = jnp.left_shift(1, k) <= rank
        j = src[k]
        if full is not None:
            j = jnp.where(full, lane ^ jnp.right_shift(_STEPS[-1], k), j)
            take = take | full
        other = shfl(out, j)
        if full is not None and swap:  # the butterfly adds partner + own (see _butterfly)
            res = op(select(full, other, out), select(full, out, other))
        else:
            res = op(out, other)
        return select(take, res, out)

    if shfl.checked:
        out = v
        for k in range(len(_STEPS)):
            out = step(k, out)
        return out
    return lax.fori_loop(0, len(_STEPS), step, v)


def _scan(group: Group, v: jax.Array, op) -> jax.Array:
    if group.tile is None:
        return _coalesced_steps(group, v, op, None)
    rank = group.thread_rank()
    out = v
    i = 1
    while i < group.tile:
        tmp = lanes.shfl_up_sync(group._call_mask(), out, i, group.tile)
        out = select(i <= rank, op(out, tmp), out)
        i *= 2
    return out


def _lanes_shape(p: jax.Array, v: jax.Array) -> jax.Array:
    return p.reshape((WARP_SIZE,) + (1,) * (v.ndim - 1))


def _butterfly(mask, v: jax.Array, op, n: int) -> jax.Array:
    """``out = op(out, shfl_xor(out, m))`` for m = n/2 .. 1 with width n.

    A float ``plus`` adds ``partner + own``: the sum is the same, and from two NaNs of one
    kind (both quiet or both signalling) the H100 returned the partner's in every
    float64 butterfly of both captured seeds (the scans return the own partial's)."""
    swap = op == plus and jnp.issubdtype(v.dtype, jnp.floating)
    out = v
    m = n // 2
    while m > 0:
        other = lanes.shfl_xor_sync(mask, out, m, n)
        out = op(other, out) if swap else op(out, other)
        m //= 2
    return out


def reduce(group: Any, value: Any, op: Any) -> jax.Array:
    """``cg::reduce(group, value, op)``: each lane gets the reduction over its group.

    Args:
        group: a thread_block_tile or coalesced group (`jaxwarp.cg.thread_block_tile`,
            `coalesced_threads`, `labeled_partition` ...).
        value: (32,) int32, uint32, int64, uint64 (x64), float16, bfloat16, float32 or
            float64 (x64).
        op: ``"plus"``, ``"less"``, ``"greater"``, ``"bit_and"``, ``"bit_or"``,
            ``"bit_xor"`` (or `jaxwarp.cg.plus` ...), or any ``op(a, b)`` on arrays (the
            header's generic path).

    Returns:
        (32,) of ``value``'s dtype: per lane, the reduction in the CUDA 13 header's
        order: over a tile of N lanes (or a coalesced group of all 32) a butterfly,
        ``out = op(out, shfl_xor(out, m))`` for m = N/2, ..., 1; over a smaller
        coalesced group the inclusive scan, then the group's highest lane's result
        (docs/cooperative_groups.md has the NaN and signed-zero rules); lanes outside
        any group get an unspecified value.

    Raises:
        TypeError: an unsupported dtype, a bitwise op on floats, or not a group.

    Example:
        A float sum over tiles of 4 lanes: the butterfly adds (x0 + x2) + (x1 + x3):

        >>> x = jnp.array([1e8, 1.0, -1e8, 1.0] * 8, jnp.float32)
        >>> jaxwarp.cg.reduce(jaxwarp.cg.thread_block_tile(4), x, "plus")[:4]
        Array([2., 2., 2., 2.], dtype=float32)
    """
    g = _group_arg(group, "reduce")
    v = _value_arg(value, "reduce")
    op = _op_arg(op, v, "reduce")
    if g.tile is not None:
        return _butterfly(g.mask if not isinstance(g.mask, np.ndarray) else 0xFFFFFFFF,
                          v, op, g.tile)
    is_full = g.mask == jnp.uint32(0xFFFFFFFF)
    # A whole-warp group's lanes run the butterfly, the others the scan, step by step.
    shfl = _Shuffler(g.mask)
    out = _coalesced_steps(g, v, op, is_full, shfl)
    # Then every lane of a smaller group reads the result of its group's highest lane.
    last = 31 - lax.clz(g.mask.astype(jnp.uint32)).astype(jnp.int32)
    src = jnp.where(is_full, lane_index(), jnp.clip(last, 0, 31))
    return shfl(out, src)


def inclusive_scan(group: Any, value: Any, op: Any = "plus") -> jax.Array:
    """``cg::inclusive_scan(group, value, op)``: lane of rank r gets op over ranks 0..r.

    Args:
        group, value, op: as in `reduce` (``op`` defaults to ``plus``).

    Returns:
        (32,) of ``value``'s dtype, combined as ``op(own partial, lower partial)`` in
        steps of 1, 2, 4, ... ranks.

    Example:
        >>> tile = jaxwarp.cg.thread_block_tile(8)
        >>> jaxwarp.cg.inclusive_scan(tile, jnp.ones(32, jnp.int32))[:10]
        Array([1, 2, 3, 4, 5, 6, 7, 8, 1, 2], dtype=int32)
    """
    g = _group_arg(group, "inclusive_scan")
    v = _value_arg(value, "inclusive_scan")
    return _scan(g, v, _op_arg(op, v, "inclusive_scan"))


def exclusive_scan(group: Any, value: Any, op: Any = "plus") -> jax.Array:
    """``cg::exclusive_scan(group, value, op)``: lane of rank r gets op over ranks 0..r-1.

    Rank 0 gets ``T{}`` (0, or +0.0) for every op except integer ``plus``, which the header
    computes as ``inclusive - value`` (also 0 on rank 0).

    Args:
        group, value, op: as in `reduce` (``op`` defaults to ``plus``).

    Returns:
        (32,) of ``value``'s dtype.

    Example:
        Stream compaction: the output slot of each kept lane.

        >>> keep = (jaxwarp.lane_id() % 3 != 0).astype(jnp.int32)
        >>> jaxwarp.cg.exclusive_scan(jaxwarp.cg.thread_block_tile(32), keep)[:6]
        Array([0, 0, 1, 2, 2, 3], dtype=int32)
    """
    g = _group_arg(group, "exclusive_scan")
    v = _value_arg(value, "exclusive_scan")
    opf = _op_arg(op, v, "exclusive_scan")
    inc = _scan(g, v, opf)
    if opf == plus and jnp.issubdtype(v.dtype, jnp.integer):
        return inc - v
    prev = g.shfl_up(inc, 1)
    return select(g.thread_rank() == 0, jnp.zeros_like(v), prev)


# ----------------------------------------------------------------------------------------
# invoke_one (elect.sync).


def elected(group: Any) -> jax.Array:
    """bool[32]: the lane ``elect.sync`` picks in each group (its lowest lane).

    Example:
        >>> part = jaxwarp.cg.labeled_partition(jaxwarp.cg.coalesced_threads(),
        ...                                     jaxwarp.lane_id() % 4)
        >>> jnp.nonzero(jaxwarp.cg.elected(part))[0]
        Array([0, 1, 2, 3], dtype=int32)
    """
    g = _group_arg(group, "elected")
    first = find_nth_set(g.mask, jnp.zeros(WARP_SIZE, jnp.int32), jnp.ones(WARP_SIZE, jnp.int32))
    return (first == lane_index()) & (g.mask != 0)


def invoke_one_broadcast(group: Any, fn: Callable, *args: Any) -> Any:
    """``cg::invoke_one_broadcast(group, fn, args...)``: ``fn`` on the elected lane, its
    result given to every lane of the group.

    ``fn`` is called once on the per-lane ``args`` (arrays with a leading lane axis), and
    each lane gets the elected lane's result (a pytree of (32, ...) arrays).

    Example:
        >>> x = jaxwarp.lane_id() + 100
        >>> jaxwarp.cg.invoke_one_broadcast(jaxwarp.cg.thread_block_tile(8),
        ...                                 lambda v: v * 2, x)[6:10]
        Array([200, 200, 216, 216], dtype=int32)
    """
    g = _group_arg(group, "invoke_one_broadcast")
    if not callable(fn):
        raise TypeError(f"invoke_one_broadcast: fn must be callable (the function the "
                        f"elected lane runs), got {type(fn).__name__} {fn!r}; call it as "
                        f"invoke_one_broadcast(group, fn, *args)")
    out = fn(*args)
    first = find_nth_set(g.mask, jnp.zeros(WARP_SIZE, jnp.int32), jnp.ones(WARP_SIZE, jnp.int32))
    src = jnp.where(first < 0, lane_index(), first)
    return jax.tree_util.tree_map(lambda r: lanes.shfl_sync(g.mask, r, src, WARP_SIZE), out)
