"""Warp vote and match: ``__ballot_sync``, ``__any_sync``, ``__all_sync``,
``__match_any_sync`` and ``__match_all_sync``.

Each calling lane (a lane whose own bit is set in its ``mask``) looks at the
calling lanes of its mask. Lanes outside ``mask`` do not call; the model gives
them 0 (on the GPU they simply have no result).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxwarp._src import checks
from jaxwarp._src.warp.active import lanes_mask
from jaxwarp._src.warp.lanes import WARP_SIZE, members, participating

# NumPy, not jnp: a module-level jnp array would start the backend at import, before
# a multi-host program can call jax.distributed.initialize.
_BITS = np.uint32(1) << np.arange(WARP_SIZE, dtype=np.uint32)


def lane_predicate(pred: Any) -> jax.Array:
    pred = checks.lane_array(pred, "pred")
    if pred.ndim != 1:
        raise ValueError(f"pred must have shape (32,) (one predicate per lane), got {pred.shape}")
    if not (pred.dtype == jnp.bool_ or jnp.issubdtype(pred.dtype, jnp.integer)):
        raise TypeError(
            f"pred must be bool or an integer (non-zero = true), got dtype {pred.dtype}"
        )
    return pred != 0 if pred.dtype != jnp.bool_ else pred


def _lane_bits(member: jax.Array) -> jax.Array:
    """bool[32, 32] -> uint32[32]: bit j of row l set where member[l, j]."""
    return jnp.sum(jnp.where(member, _BITS[None, :], jnp.uint32(0)), axis=1, dtype=jnp.uint32)


def ballot_sync(mask: Any, pred: Any) -> jax.Array:
    """``__ballot_sync(mask, pred)``: bit j set when lane j is in ``mask`` and its pred holds.

    Args:
        mask: 32-bit lane mask (int, or uint32/int32 scalar or (32,) array); may be traced.
        pred: (32,) bool or integer, non-zero meaning true.

    Returns:
        uint32[32]; 0 for lanes outside ``mask``.

    Example:
        >>> hex(int(jaxwarp.ballot_sync(0xFFFFFFFF, jaxwarp.lane_id() % 2 == 1)[0]))
        '0xaaaaaaaa'
    """
    p = lane_predicate(pred)
    m = checks.mask_array(mask)
    if m.ndim == 0:  # one mask for the warp: every caller gets the same bits
        calls = participating(m, "__ballot_sync")
        return jnp.where(calls, lanes_mask(calls & p), jnp.uint32(0))
    calls, member = members(mask, "__ballot_sync")
    return jnp.where(calls, _lane_bits(member & p[None, :]), jnp.uint32(0))


def any_sync(mask: Any, pred: Any) -> jax.Array:
    """``__any_sync(mask, pred)``: int32[32], 1 where any lane of ``mask`` has pred true.

    Lanes outside ``mask`` get 0. See `ballot_sync` for the arguments.

    Example:
        Only lane 7 votes true, so every lane of the full mask gets 1; with the mask of
        lanes 0-15, lanes 16-31 (where the pred holds) neither count nor get a result:

        >>> lane = jaxwarp.lane_id()
        >>> jaxwarp.any_sync(0xFFFFFFFF, lane == 7)[:4]
        Array([1, 1, 1, 1], dtype=int32)
        >>> jaxwarp.any_sync(0x0000FFFF, lane >= 16)[jnp.array([0, 16])]
        Array([0, 0], dtype=int32)
    """
    return (ballot_sync(mask, pred) != 0).astype(jnp.int32)


def all_sync(mask: Any, pred: Any) -> jax.Array:
    """``__all_sync(mask, pred)``: int32[32], 1 where every lane of ``mask`` has pred true.

    Lanes outside ``mask`` get 0. See `ballot_sync` for the arguments.

    Example:
        ``lane < 16`` holds on lanes 0-15 only: true over their mask, false over all 32:

        >>> lane = jaxwarp.lane_id()
        >>> jaxwarp.all_sync(0xFFFFFFFF, lane < 16)[0]
        Array(0, dtype=int32)
        >>> jaxwarp.all_sync(0x0000FFFF, lane < 16)[jnp.array([0, 16])]
        Array([1, 0], dtype=int32)
    """
    p = lane_predicate(pred)
    if checks.mask_array(mask).ndim == 0:  # one mask for the warp
        calls = participating(mask, "__all_sync")
        return (calls & ~jnp.any(calls & ~p)).astype(jnp.int32)
    calls, member = members(mask, "__all_sync")
    ok = jnp.all(~member | p[None, :], axis=1)
    return (calls & ok).astype(jnp.int32)


def _key_bits(value: Any) -> jax.Array:
    value = checks.lane_array(value, "value")
    if value.ndim != 1:
        raise ValueError(f"value must have shape (32,) (one key per lane), got {value.shape}")
    dt = value.dtype
    if dt.itemsize not in (4, 8) or not (
        jnp.issubdtype(dt, jnp.integer) or jnp.issubdtype(dt, jnp.floating)
    ):
        raise TypeError(
            f"value must be a 32- or 64-bit int or float (CUDA: int, unsigned, long long, "
            f"unsigned long long, float, double), got dtype {dt}"
        )
    if jnp.issubdtype(dt, jnp.floating):  # match compares bit patterns
        return lax.bitcast_convert_type(value, jnp.uint32 if dt.itemsize == 4 else jnp.uint64)
    return value


def match_any_sync(mask: Any, value: Any) -> jax.Array:
    """``__match_any_sync(mask, value)``: lanes of ``mask`` whose value has the same bits.

    Args:
        mask: 32-bit lane mask; may be traced.
        value: (32,) 32- or 64-bit ints or floats; floats compare as bit patterns
            (so -0.0 differs from +0.0 and equal NaN payloads match), as on the GPU.

    Returns:
        uint32[32]; 0 for lanes outside ``mask``.

    Example:
        Keys ``lane % 4``: lanes 0, 4, 8, ... hold 0 and match each other (bits 0, 4,
        8, ... set), lanes 1, 5, 9, ... hold 1, and so on:

        >>> keys = jaxwarp.lane_id() % 4
        >>> [hex(int(m)) for m in jaxwarp.match_any_sync(0xFFFFFFFF, keys)[:4]]
        ['0x11111111', '0x22222222', '0x44444444', '0x88888888']
    """
    key = _key_bits(value)
    calls, member = members(mask, "__match_any_sync")
    same = member & (key[:, None] == key[None, :])
    return jnp.where(calls, _lane_bits(same), jnp.uint32(0))


def match_all_sync(mask: Any, value: Any) -> tuple[jax.Array, jax.Array]:
    """``__match_all_sync(mask, value, &pred)``: ``mask`` if all its lanes hold the same bits.

    Returns:
        (uint32[32], int32[32]): the lanes of ``mask`` that call (the mask) and 1
        where every lane of ``mask`` has the same value, else (0, 0). Lanes outside
        ``mask`` get (0, 0). See `match_any_sync` for the arguments.

    Example:
        ``lane // 16`` is 0 on lanes 0-15 and 1 on lanes 16-31: no match over the
        whole warp, a match over lanes 0-15 (lane 16, outside that mask, gets (0, 0)):

        >>> half = jaxwarp.lane_id() // 16
        >>> mask, pred = jaxwarp.match_all_sync(0xFFFFFFFF, half)
        >>> hex(int(mask[0])), int(pred[0])
        ('0x0', 0)
        >>> mask, pred = jaxwarp.match_all_sync(0x0000FFFF, half)
        >>> hex(int(mask[0])), int(pred[0]), int(mask[16]), int(pred[16])
        ('0xffff', 1, 0, 0)
    """
    key = _key_bits(value)
    calls, member = members(mask, "__match_all_sync")
    differs = member & (key[:, None] != key[None, :])
    ok = calls & ~jnp.any(differs, axis=1)
    return jnp.where(ok, _lane_bits(member), jnp.uint32(0)), ok.astype(jnp.int32)


def elect_sync(mask: Any) -> tuple[jax.Array, jax.Array]:
    """PTX ``elect.sync d|p, membermask`` (sm_90): elect one leader lane of ``mask``.

    The leader is the lowest-numbered calling lane of ``mask``. The PTX ISA promises
    only a deterministic choice among the active lanes of ``membermask``; CUDA's
    ``cg::invoke_one`` uses ``elect.sync`` where the target has it and otherwise
    calls the lane of ``thread_rank() == 0``, the lowest. Inside ``jaxwarp.branch``
    or ``jaxwarp.lane_while`` only executing lanes call, so the leader is the
    lowest executing lane of ``mask``.

    Args:
        mask: 32-bit lane mask (int, or uint32/int32 scalar or (32,) array); may be
            traced.

    Returns:
        (int32[32], bool[32]): ``d``, the leader's lane id, and ``p``, true in the
        leader only. Lanes that do not call get (0, False).

    Example:
        >>> d, p = jaxwarp.elect_sync(0xFFFFFF00)
        >>> int(d[8]), int(jnp.argmax(p)), int(p.sum())
        (8, 8, 1)
    """
    lane = jnp.arange(WARP_SIZE, dtype=jnp.int32)
    if checks.mask_array(mask).ndim == 0:  # one mask for the warp: one leader
        calls = participating(mask, "elect.sync")
        leader = jnp.min(jnp.where(calls, lane, WARP_SIZE))
    else:
        calls, member = members(mask, "elect.sync")
        leader = jnp.min(jnp.where(member, lane[None, :], WARP_SIZE), axis=1)
    d = jnp.where(calls, leader, 0).astype(jnp.int32)
    return d, calls & (leader == lane)
