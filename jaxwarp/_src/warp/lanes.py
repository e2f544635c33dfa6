"""Lanes and shuffles: ``__shfl_sync`` and friends on a leading lane axis of 32.

Every function here models one warp. The lane axis is the leading axis of size
32; many warps are a ``jax.vmap`` away.

The source lane of every shuffle follows the PTX ``shfl.sync`` definition with
the ``c`` operand that CUDA's wrappers pass (``sm_30_intrinsics.hpp``)::

    c       = ((32 - width) << 8) | 0x1f      (__shfl_sync, _down, _xor)
    c       = ((32 - width) << 8)             (__shfl_up_sync)
    segmask = c[12:8]          cval = c[4:0]          bval = b[4:0]
    maxLane = (lane & segmask) | (cval & ~segmask)
    minLane = lane & segmask
    idx:  j = minLane | (bval & ~segmask)   valid = j <= maxLane
    up:   j = lane - bval                   valid = j >= maxLane
    down: j = lane + bval                   valid = j <= maxLane
    bfly: j = lane ^ bval                   valid = j <= maxLane
    if not valid: j = lane

This is what an H100 (sm_90) does for every width in the captures, including
widths that are not powers of two and widths above 32 (which CUDA calls
undefined): ``b`` is taken modulo 32 and ``width`` only enters through ``c``.

With a static ``b`` (a Python/NumPy int) the source lanes are known when tracing,
and the shuffle lowers to reshapes, reversals, slices and broadcasts of the raw
bits (``_static_plan``), which XLA fuses with the surrounding arithmetic; a traced
``b`` gathers. Both move the same bits.

Lanes outside ``mask`` do not take part: their result is their own input. A lane
whose source lane is not in its ``mask`` (or did not call) reads 0, which is what
the H100 did (CUDA: undefined). ``jaxwarp.checked`` reports both situations.

Inside a divergent path (``jaxwarp.branch``, ``jaxwarp.lane_while``) only the lanes
executing it call (``active.active_lanes``): a lane that is not executing keeps its
input, and a source lane that is not executing counts as one that did not call.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxwarp._src import checks
from jaxwarp._src.warp import checked
from jaxwarp._src.warp.active import active_lanes, lanes_mask, loop_lanes

WARP_SIZE = checks.WARP_SIZE
FULL_MASK = 0xFFFFFFFF
_MODES = ("idx", "up", "down", "bfly")
_LANES = np.arange(WARP_SIZE, dtype=np.int32)


def lane_id() -> jax.Array:
    """Returns each lane's index, ``%laneid``: ``int32[32]`` = ``[0, 1, ..., 31]``.

    Example:
        >>> jaxwarp.lane_id()[:4]
        Array([0, 1, 2, 3], dtype=int32)
    """
    return jnp.arange(WARP_SIZE, dtype=jnp.int32)


def activemask() -> jax.Array:
    """``__activemask()``: a ``uint32`` scalar with bit ``l`` set for every executing lane.

    Outside any branch every lane of the (32,) axis executes, so this is
    ``0xFFFFFFFF``. Inside a path of ``jaxwarp.branch`` or an iteration of
    ``jaxwarp.lane_while`` it is the lanes executing that path (the same value in
    every lane, as on the GPU, where all of them read the same mask).

    Example:
        >>> hex(int(jaxwarp.activemask()))
        '0xffffffff'
        >>> jaxwarp.reduce_add_sync(jaxwarp.activemask(), jnp.ones(32, jnp.uint32))[0]
        Array(32, dtype=uint32)
        >>> odd = jaxwarp.lane_id() % 2 == 1
        >>> m = jaxwarp.branch(odd, lambda: jaxwarp.activemask(), lambda: jnp.uint32(0))
        >>> hex(int(m[1]))
        '0xaaaaaaaa'
    """
    act = active_lanes()
    loop = loop_lanes()
    if loop is not None and checked.enabled():  # the lanes reading it: the loop's shape
        entry, now = loop
        checked.check(jnp.all(entry == now) | ~jnp.any(now),
                      "activemask() inside a loop whose lanes diverged (reached the loop: "
                      "{entry}, running this trip: {now}): which lanes run a trip together is "
                      "the compiler's choice, which CUDA leaves open (nvcc may unroll the "
                      "loop behind a remainder loop; jaxwarp.lane_for(..., unroll=U) models "
                      "that shape)", entry=lanes_mask(entry), now=lanes_mask(now))
    if act is None:
        return jnp.uint32(FULL_MASK)
    return lanes_mask(act)


def syncwarp(mask: Any = FULL_MASK) -> None:
    """``__syncwarp(mask)``: validated, then a no-op in the functional model.

    On the GPU the calling lanes wait until every lane of ``mask`` has reached a
    ``__syncwarp`` with the same mask; jaxwarp runs the lanes of a path in lock
    step, so there is nothing to wait for. ``jaxwarp.checked`` reports what CUDA
    leaves undefined: a calling lane missing from its own (per-lane) mask, calling
    lanes passing different masks, and (inside ``jaxwarp.branch`` or
    ``jaxwarp.lane_while``) a mask naming lanes that are not executing.

    Args:
        mask: lanes taking part: a 32-bit int, or a uint32/int32 scalar or (32,)
            array (each lane passes its own mask). May be traced.

    Raises:
        TypeError, ValueError: ``mask`` is not a 32-bit lane mask.

    Example:
        >>> jaxwarp.syncwarp() is None
        True
        >>> inside = lambda: jaxwarp.syncwarp(0xFFFFFFFF) or jnp.int32(0)
        >>> err, _ = jaxwarp.checked(jaxwarp.branch)(jaxwarp.lane_id() < 8, inside, inside)
        >>> "names lane 8, which is not executing" in err.get()
        True
    """
    participating(mask, "__syncwarp")
    return None


def nanosleep(ns: Any) -> None:
    """``__nanosleep(ns)``: validated, then a no-op in the functional model.

    On the GPU the thread sleeps for about ``ns`` nanoseconds (CUDA caps the
    sleep at about 1 millisecond, ``ns`` in [0, 1000000]). Timing is not
    modelled, so nothing happens here; values outside that range raise
    (``jaxwarp.checked`` also reports traced values above the cap).

    Args:
        ns: nanoseconds, a Python int or an unsigned integer scalar.

    Raises:
        ValueError: a concrete ``ns`` outside [0, 1000000].
        TypeError: ``ns`` is not an integer.

    Example:
        >>> jaxwarp.nanosleep(100) is None
        True
        >>> jaxwarp.nanosleep(2_000_000)
        Traceback (most recent call last):
        ...
        ValueError: ns=2000000 is outside what __nanosleep accepts: 0 .. 1000000
    """
    if isinstance(ns, (bool, np.bool_)):
        raise TypeError("ns must be an unsigned integer number of nanoseconds, got bool")
    if isinstance(ns, (int, np.integer)):
        if not 0 <= int(ns) <= 1_000_000:
            raise ValueError(f"ns={int(ns)} is outside what __nanosleep accepts: 0 .. 1000000")
        return None
    if isinstance(ns, np.ndarray) and ns.ndim == 0 and ns.dtype.kind in "iu":
        return nanosleep(ns[()])  # a concrete 0-d array: checked exactly, as an int
    arr = checks.array_arg(ns, "ns", complex_ok=True)
    if not jnp.issubdtype(arr.dtype, jnp.integer) or arr.ndim != 0:
        raise TypeError(
            f"ns must be an integer scalar number of nanoseconds, got {arr.dtype}{list(arr.shape)}"
        )
    if not isinstance(arr, jax.core.Tracer):  # concrete: check now, as for Python ints
        if not 0 <= int(arr) <= 1_000_000:
            raise ValueError(f"ns={int(arr)} is outside what __nanosleep accepts: 0 .. 1000000")
        return None
    checked.check(
        (arr >= 0) & (arr <= 1_000_000),
        "nanosleep(ns={ns}): CUDA sleeps at most about 1 ms (ns in 0 .. 1000000)",
        ns=arr,
    )
    return None


def _shfl_c(mode: str, width: int) -> tuple[int, int]:
    """Returns (segmask, cval) of the ``c`` operand CUDA's wrapper passes for ``width``."""
    c = ((WARP_SIZE - width) << 8) & 0xFFFFFFFF
    if mode != "up":
        c |= 0x1F
    return (c >> 8) & 0x1F, c & 0x1F


def source_lanes(mode: str, b: Any, width: int = WARP_SIZE) -> jax.Array:
    """Returns the lane each lane reads in ``shfl.sync.mode`` (its own lane if clamped).

    Args:
        mode: ``"idx"``, ``"up"``, ``"down"`` or ``"bfly"`` (static).
        b: the source lane, delta or lane mask: a Python int or an int (32,) array.
        width: the CUDA ``width`` argument (static).

    Returns:
        ``int32[32]`` source lane of each lane.
    """
    mode = checks.static_choice(mode, "mode", _MODES)
    width = checks.static_int(width, "width")
    segmask, cval = _shfl_c(mode, width)
    lane = _LANES
    max_lane = (lane & segmask) | (cval & ~segmask)
    bint = checks.int_value(b, _B_NAME[mode])
    if bint is not None:
        bval = np.full(WARP_SIZE, bint & 0x1F, np.int32)
        xp = np
    else:
        bval = checks.per_lane_int(b, _B_NAME[mode]) & 0x1F
        xp = jnp
    if mode == "idx":
        j = (lane & segmask) | (bval & ~segmask)
        valid = j <= max_lane
    elif mode == "up":
        j = lane - bval
        valid = j >= max_lane
    elif mode == "down":
        j = lane + bval
        valid = j <= max_lane
    else:
        j = lane ^ bval
        valid = j <= max_lane
    return xp.where(valid, j, lane).astype(np.int32)


_B_NAME = {"idx": "src_lane", "up": "delta", "down": "delta", "bfly": "lane_mask"}
_EXAMPLES = {  # what the examples print for lanes 0..7 (the CUDA guide's outputs)
    "idx": "Array([2, 2, 2, 2, 2, 2, 2, 2], dtype=int32)",
    "up": "Array([0, 1, 0, 1, 2, 3, 4, 5], dtype=int32)",
    "down": "Array([3, 4, 5, 6, 7, 5, 6, 7], dtype=int32)",
    "bfly": "Array([3, 2, 1, 0, 7, 6, 5, 4], dtype=int32)",
}
_CUDA_NAME = {
    "idx": "__shfl_sync",
    "up": "__shfl_up_sync",
    "down": "__shfl_down_sync",
    "bfly": "__shfl_xor_sync",
}


def participating(mask: Any, what: str = "") -> jax.Array:
    """Returns bool[32]: lane l calls the intrinsic iff bit l of its own mask is set
    and lane l is executing (``active_lanes``; all lanes outside a branch).

    In checked mode (``what`` names the intrinsic) it also reports calling lanes
    with different masks and, where masks are given per lane, a lane with a
    non-zero mask that lacks its own bit (a lane that does not call passes 0).
    A single mask for the whole warp just says which lanes call. Inside a
    divergent path it reports a calling lane whose mask names a lane that is not
    executing (CUDA: undefined).
    """
    m = checks.mask_array(mask)
    per_lane = m.ndim == 1
    m = jnp.broadcast_to(m, (WARP_SIZE,))
    own = ((m >> jnp.arange(WARP_SIZE, dtype=jnp.uint32)) & 1) == 1
    act = active_lanes()
    calls = own if act is None else own & act
    if what and checked.enabled() and per_lane:
        missing = (m != 0) & ~own
        if act is not None:
            missing = missing & act
        l = checked.first_lane(missing)
        checked.check(
            ~jnp.any(missing),
            "lane {lane} calls " + what + " with mask {mask}, which lacks its own bit "
            "(CUDA: every calling lane must be in mask)",
            lane=l,
            mask=m[l],
        )
        # CUDA: the lanes a mask names must pass that same mask; lanes whose masks name
        # disjoint sets of lanes (a labeled partition's groups) may pass different ones.
        named = ((m[:, None] >> _LANES.astype(np.uint32)[None, :]) & 1) == 1
        clash = named & calls[:, None] & calls[None, :] & (m[None, :] != m[:, None])
        a = checked.first_lane(jnp.any(clash, axis=1))
        b = checked.first_lane(clash[a])
        checked.check(
            ~jnp.any(clash),
            "lanes {a} and {b} call " + what + " with different masks {ma} and {mb}, "
            "and lane {a}'s mask names lane {b} (CUDA: all lanes of mask must pass the "
            "same mask)",
            a=a,
            b=b,
            ma=m[a],
            mb=m[b],
        )
    if what and checked.enabled() and act is not None:
        outside = m & ~lanes_mask(act)
        bad = calls & (outside != 0)
        l = checked.first_lane(bad)
        named = checked.first_lane(((outside[l] >> _LANES.astype(np.uint32)) & 1) == 1)
        checked.check(
            ~jnp.any(bad),
            "lane {lane} calls " + what + " with mask {mask}, which names lane {other}, "
            "which is not executing (active mask {active}; CUDA: undefined)",
            lane=l,
            mask=m[l],
            other=named,
            active=lanes_mask(act),
        )
    return calls


def members(mask: Any, what: str) -> tuple[jax.Array, jax.Array]:
    """Returns (calls bool[32], member bool[32, 32]): member[l, j] = j calls and is in l's mask.

    ``what`` names the intrinsic for checked mode (see `participating`).
    """
    m0 = checks.mask_array(mask)
    m = jnp.broadcast_to(m0, (WARP_SIZE,))
    calls = participating(m0, what)
    member = ((m[:, None] >> jnp.arange(WARP_SIZE, dtype=jnp.uint32)[None, :]) & 1) == 1
    return calls, member & calls[None, :]


def _shuffle(mode: str, mask: Any, var: Any, b: Any, width: int) -> jax.Array:
    var = checks.lane_array(var, "var", complex_ok=True)
    width = checks.static_int(width, "width")
    if not -(2**31) <= width < 2**31:
        raise ValueError(f"width={width} does not fit in CUDA's int; allowed: any int32 "
                         f"(CUDA defines powers of two in 1 .. 32)")
    mask_int = checks.mask_value(mask)  # validates Python/NumPy int masks (None: an array)
    what = _CUDA_NAME[mode]
    if checked.enabled() and not (1 <= width <= WARP_SIZE and width & (width - 1) == 0):
        checked.check(
            False,
            what + f"(width={width}): CUDA defines width only for powers "
            "of two in [1, 32] (the H100 follows the PTX formula)",
        )
    j = source_lanes(mode, b, width)  # a NumPy array when b is a Python/NumPy int
    if mask_int == FULL_MASK and active_lanes() is None:
        # Every lane calls and every source is a member: a pure permutation.
        return _move(var, j, None, None)
    m0 = checks.mask_array(mask)
    m = jnp.broadcast_to(m0, (WARP_SIZE,))
    calls = participating(m0, what)
    jj = jnp.asarray(j)
    src_ok = (((m >> jj.astype(jnp.uint32)) & 1) == 1) & calls[jj]
    if checked.enabled():
        bad = calls & ~src_ok
        l = checked.first_lane(bad)
        checked.check(
            ~jnp.any(bad),
            "lane {lane} reads source lane {src} in " + what + ", which is not in its "
            "mask or does not call (CUDA: undefined; the H100 returns 0)",
            lane=l,
            src=jj[l],
        )
    return _move(var, j if isinstance(j, np.ndarray) else jj, src_ok, calls)


def _static_plan(j: np.ndarray) -> tuple:
    """Returns a hashable recipe that moves lanes by the static source table ``j``.

    XLA fuses reshapes, reversals, slices, concatenations and broadcasts into the
    surrounding elementwise work as index arithmetic; a gather (even with
    constant indices) stays a gather on an index table (batched by ``vmap``, with
    a transpose around it). So the source tables that shuffles with a static
    ``b`` produce are recognised here, from ``j`` alone (the result is checked
    against ``j`` for every mode, width and ``b`` in the tests):

    * ``("id",)``: every lane reads itself.
    * ``("xor", m, keep)``: ``j = lane ^ m``, except the lanes in the bit mask
      ``keep``, which read themselves (``shfl_xor``: ``keep`` is 0 when
      ``lane_mask < width``): reverse the axes of the bits of ``m`` after
      splitting the lane axis into its five bits, then select.
    * ``("bcast", w, s)``: every segment of ``w`` lanes reads its lane ``s``.
    * ``("down", w, d)``/``("up", w, d)``: in every segment of ``w`` lanes, lane
      ``p`` reads ``p + d`` (``p - d``) if that stays in the segment, else itself.
    * ``("gather", j)``: anything else (a gather with constant indices).
    """
    return _static_plan_cached(tuple(int(v) for v in j))


@functools.lru_cache(maxsize=1024)
def _static_plan_cached(jt: tuple) -> tuple:
    j = np.asarray(jt, np.int32)
    lane = _LANES
    if np.array_equal(j, lane):
        return ("id",)
    moved = j != lane
    m = int(j[moved][0] ^ lane[moved][0])
    if np.all(~moved | (j == lane ^ m)):
        return ("xor", m, int(np.sum(~moved << lane.astype(np.int64))))
    d_down, d_up = int(j[0]), WARP_SIZE - 1 - int(j[-1])
    for w in (32, 16, 8, 4, 2):
        pos, start = lane % w, lane - lane % w
        if j[0] < w and np.array_equal(j, start + j[0]):
            return ("bcast", w, int(j[0]))
        if 0 < d_down < w and np.array_equal(j, np.where(pos + d_down < w, lane + d_down, lane)):
            return ("down", w, d_down)
        if 0 < d_up < w and np.array_equal(j, np.where(pos >= d_up, lane - d_up, lane)):
            return ("up", w, d_up)
    return ("gather", jt)


# Set while ``jaxwarp.warp_kernel`` traces a warp program for a Pallas (Triton) kernel:
# Triton has no reversal, slice or general concatenation, so there the static plans lower
# to the operations it has (reshape, transpose, split into halves, join of two halves).
_KERNEL_LOWERING = contextvars.ContextVar("jaxwarp_kernel_lowering", default=False)


@contextlib.contextmanager
def kernel_lowering():
    """Within this context, static shuffles lower for a Triton kernel
    (``_apply_plan_kernel``)."""
    token = _KERNEL_LOWERING.set(True)
    try:
        yield
    finally:
        _KERNEL_LOWERING.reset(token)


#: Plans that ``_apply_plan_kernel`` lowers to register moves; the others ("down", "up",
#: "gather") become a gather with a constant table of source lanes, which ``warp_kernel``
#: runs as a one-hot selection.
KERNEL_PLANS = ("id", "xor", "bcast")


def _plan_lanes(plan: tuple) -> np.ndarray:
    """The source lane table ``j`` of a "down", "up" or "gather" plan."""
    if plan[0] == "gather":
        return np.asarray(plan[1], np.int32)
    w, d = plan[1], plan[2]
    pos = _LANES % w
    if plan[0] == "down":
        return np.where(pos + d < w, _LANES + d, _LANES).astype(np.int32)
    return np.where(pos >= d, _LANES - d, _LANES).astype(np.int32)


def _swap_halves(v, g: int, m: int):
    """(32,) -> (32,): the lanes with bit log2(m) set trade places with those without
    (``lane ^ m``), as reshape, transpose, split and join."""
    v = jnp.swapaxes(v.reshape(g, 2, m), 1, 2)  # (g, m, 2)
    lo, hi = lax.split(v, (1, 1), axis=2)
    return jnp.swapaxes(lax.concatenate([hi, lo], 2), 1, 2).reshape(WARP_SIZE)


def _pick(v, w: int, s: int):
    """(32,) -> (32,): every segment of ``w`` lanes reads its lane ``s`` (halving
    splits, then a broadcast)."""
    g = WARP_SIZE // w
    size = w
    v = v.reshape(g, w)
    while size > 1:
        size //= 2
        halves = lax.split(jnp.swapaxes(v.reshape(g, 2, -1), 1, 2), (1, 1), axis=2)
        v = halves[(s // size) % 2].reshape(g, -1)
    return jnp.broadcast_to(v, (g, w)).reshape(WARP_SIZE)


def _apply_plan_kernel(var, plan: tuple):
    """``_apply_plan`` for a Triton kernel, on one warp's (32,) lanes: register moves for
    the ``KERNEL_PLANS``, a gather with a constant table for the others."""
    kind = plan[0]
    if var.shape != (WARP_SIZE,):
        raise NotImplementedError(f"plan {kind!r} on shape {var.shape} in a warp kernel")
    if kind not in KERNEL_PLANS:
        return var[_plan_lanes(plan)]
    if kind == "id":
        return var
    if kind == "bcast":
        return _pick(var, plan[1], plan[2])
    m, v = plan[1], var
    for k in range(5):
        if (m >> k) & 1:
            v = _swap_halves(v, WARP_SIZE >> (k + 1), 1 << k)
    if plan[2]:
        lane = lax.iota(jnp.uint32, WARP_SIZE)
        keep = ((jnp.uint32(plan[2]) >> lane) & 1) == 1
        v = jnp.where(keep, var, v)
    return v


def _apply_plan(var, plan: tuple):
    """``var[j]`` along the leading lane axis, for the ``j`` that ``plan`` stands for."""
    if _KERNEL_LOWERING.get():
        return _apply_plan_kernel(var, plan)
    kind, rest = plan[0], var.shape[1:]
    if kind == "id":
        return var
    if kind == "gather":
        return var[np.asarray(plan[1], np.int32)]
    if kind == "xor":
        m = plan[1]
        bits = [k for k in range(5) if (m >> k) & 1]
        # lane = 16*b4 + 8*b3 + 4*b2 + 2*b1 + b0; axis a of (2,)*5 holds bit 4 - a.
        v = lax.rev(var.reshape((2,) * 5 + rest), tuple(4 - k for k in bits))
        v = v.reshape(var.shape)
        if plan[2]:
            keep = (plan[2] >> _LANES.astype(np.int64)) & 1 == 1
            v = jnp.where(keep.reshape((WARP_SIZE,) + (1,) * len(rest)), var, v)
        return v
    w, k = plan[1], plan[2]
    v = var.reshape((WARP_SIZE // w, w) + rest)
    if kind == "bcast":
        v = jnp.broadcast_to(v[:, k : k + 1], v.shape)
    elif kind == "down":
        v = jnp.concatenate([v[:, k:], v[:, w - k :]], axis=1)
    else:  # up
        v = jnp.concatenate([v[:, :k], v[:, : w - k]], axis=1)
    return v.reshape(var.shape)


def _take_lanes(var, j):
    """``var[j]``: a plan (tuple) or a static NumPy ``j`` lowers through `_apply_plan`
    (fusible), a traced ``j`` gathers."""
    if isinstance(j, tuple):
        return _apply_plan(var, j)
    if isinstance(j, np.ndarray):
        return _apply_plan(var, _static_plan(j))
    return var[j]


def _move_values(var, j, src_ok, calls):
    """Lane l gets var[j[l]] (0 where not src_ok; its own var where it does not call)."""
    out = _take_lanes(var, j)
    if src_ok is None:
        return out
    extra = (1,) * (var.ndim - 1)
    out = jnp.where(src_ok.reshape((WARP_SIZE, *extra)), out, jnp.zeros((), var.dtype))
    return jnp.where(calls.reshape((WARP_SIZE, *extra)), out, var)


_UINT = {2: jnp.uint16, 4: jnp.uint32, 8: jnp.uint64}


@jax.custom_jvp
def _move_bits(var, j, src_ok, calls):
    # Shuffles move bits: gathering floats directly lets XLA on CPU canonicalise bf16 NaN
    # payloads, which the GPU keeps (capture_extra_warp, shflbf*). So move the raw bits.
    u = lax.bitcast_convert_type(var, _UINT[var.dtype.itemsize])
    return lax.bitcast_convert_type(_move_values(u, j, src_ok, calls), var.dtype)


@functools.partial(jax.custom_jvp, nondiff_argnums=(1,))
def _move_bits_static(var, plan, src_ok, calls):
    # As _move_bits, for a static source table given by its (hashable) plan.
    u = lax.bitcast_convert_type(var, _UINT[var.dtype.itemsize])
    return lax.bitcast_convert_type(_move_values(u, plan, src_ok, calls), var.dtype)


@_move_bits_static.defjvp
def _move_bits_static_jvp(plan, primals, tangents):
    var, src_ok, calls = primals
    return (_move_bits_static(var, plan, src_ok, calls),
            _move_values(tangents[0], plan, src_ok, calls))


@_move_bits.defjvp
def _move_bits_jvp(primals, tangents):
    # A shuffle is linear in var: its tangent is the same shuffle of var's tangent.
    var, j, src_ok, calls = primals
    return _move_bits(var, j, src_ok, calls), _move_values(tangents[0], j, src_ok, calls)


@jax.custom_jvp
def _permute_bits(var, j):
    u = lax.bitcast_convert_type(var, _UINT[var.dtype.itemsize])
    return lax.bitcast_convert_type(u[j], var.dtype)


@_permute_bits.defjvp
def _permute_bits_jvp(primals, tangents):
    var, j = primals
    return _permute_bits(var, j), tangents[0][j]


def _move(var, j, src_ok, calls):
    """Moves lanes: ``var[j]``, masked by ``src_ok``/``calls`` (None: full mask).

    ``j`` is a NumPy array when the source lanes are known at trace time (then
    the move lowers to reshapes/reversals/slices that XLA fuses, see
    `_static_plan`), else a traced int32 (32,) array (a gather).
    """
    is_float = jnp.issubdtype(var.dtype, jnp.floating) and var.dtype.itemsize in _UINT
    if isinstance(j, np.ndarray):
        if is_float:
            return _move_bits_static(var, _static_plan(j), src_ok, calls)
        return _move_values(var, j, src_ok, calls)
    if is_float:
        if src_ok is None:
            return _permute_bits(var, j)
        return _move_bits(var, j, src_ok, calls)
    return _move_values(var, j, src_ok, calls)


# Each shuffle's source lane j in PTX shfl.sync's terms (its docstring shows its own).
_SOURCE_LANE = {
    "idx": ("((32 - width) << 8) | 0x1f", "j = minLane | (bval & ~segmask)", "j <= maxLane"),
    "up": ("(32 - width) << 8", "j = lane - bval", "j >= maxLane"),
    "down": ("((32 - width) << 8) | 0x1f", "j = lane + bval", "j <= maxLane"),
    "bfly": ("((32 - width) << 8) | 0x1f", "j = lane ^ bval", "j <= maxLane"),
}


def _shuffle_doc(mode: str, cuda: str, b_name: str, b_doc: str, example: str):
    c, j, valid = _SOURCE_LANE[mode]

    def wrap(fn):
        fn.__doc__ = f"""``{cuda}(mask, var, {b_name}, width)`` for one warp.

    {b_doc}

    The source lane ``j`` is PTX ``shfl.sync``'s with the ``c`` operand CUDA passes,
    which is what an H100 does for every ``width`` (also where CUDA says undefined):

        c = {c};  segmask = c[12:8];  cval = c[4:0];  bval = {b_name} & 31
        maxLane = (lane & segmask) | (cval & ~segmask);  minLane = lane & segmask
        {j};  valid = {valid};  if not valid: j = lane

    Args:
        mask: lanes taking part: a 32-bit int, or a uint32/int32 scalar or (32,)
            array (each lane passes its own mask, as in CUDA). May be traced.
        var: (32, ...) values, any dtype (ints, bool, fp16, bf16, fp32, fp64);
            trailing axes are shuffled together, as 64-bit values are on the GPU.
        {b_name}: a Python int or an integer (32,) array (one per lane); may be
            traced. Only its low 5 bits count, as on the hardware.
        width: static Python int, the CUDA ``width`` (default 32). CUDA defines
            powers of two in [1, 32]; other values do what an H100 does (the
            formula above).

    Returns:
        (32, ...) array of ``var``'s dtype. Lanes outside ``mask`` get their own
        input back; a lane whose source lane is outside ``mask`` gets 0.

    Raises:
        ValueError: ``var`` has no leading lane axis of 32; a shape is wrong.
        TypeError: ``width`` is traced or not an int; ``mask`` or ``{b_name}``
            have a non-integer dtype.

    Example:
        >>> jaxwarp.{fn.__name__}(0xFFFFFFFF, jaxwarp.lane_id(), {example})[:8]
        {_EXAMPLES[mode]}
    """
        return fn

    return wrap


@_shuffle_doc(
    "idx",
    "__shfl_sync",
    "src_lane",
    "Each lane reads ``var`` from lane ``src_lane`` of its own width-sized segment.",
    "2, 16",
)
def shfl_sync(mask: Any, var: Any, src_lane: Any, width: int = WARP_SIZE) -> jax.Array:
    return _shuffle("idx", mask, var, src_lane, width)


@_shuffle_doc(
    "up",
    "__shfl_up_sync",
    "delta",
    "Each lane reads from ``lane - delta``; lanes whose source would fall below "
    "their segment keep their own value.",
    "2, 16",
)
def shfl_up_sync(mask: Any, var: Any, delta: Any, width: int = WARP_SIZE) -> jax.Array:
    return _shuffle("up", mask, var, delta, width)


@_shuffle_doc(
    "down",
    "__shfl_down_sync",
    "delta",
    "Each lane reads from ``lane + delta``; lanes whose source would pass the end "
    "of their segment keep their own value.",
    "3, 8",
)
def shfl_down_sync(mask: Any, var: Any, delta: Any, width: int = WARP_SIZE) -> jax.Array:
    return _shuffle("down", mask, var, delta, width)


@_shuffle_doc(
    "bfly",
    "__shfl_xor_sync",
    "lane_mask",
    "Each lane reads from ``lane ^ lane_mask`` (butterfly); sources past the end "
    "of the segment are clamped to the lane itself.",
    "3, 32",
)
def shfl_xor_sync(mask: Any, var: Any, lane_mask: Any, width: int = WARP_SIZE) -> jax.Array:
    return _shuffle("bfly", mask, var, lane_mask, width)
