"""Warp reductions: ``__reduce_{add,min,max,and,or,xor}_sync`` (sm_80 and later).

Each lane that calls gets the reduction of ``value`` over the lanes of its
``mask`` that call. ``add`` wraps modulo 2**32; ``min``/``max`` compare as signed
for int32 and as unsigned for uint32, as CUDA's overloads do; ``and``/``or``/``xor``
exist for unsigned only. Lanes outside ``mask`` do not call: their result is their
own input. Floats are not reduced by the hardware (CUDA has no such overload).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from jaxwarp._src import checks
from jaxwarp._src.warp.lanes import FULL_MASK, WARP_SIZE, members, participating

_OPS = ("add", "min", "max", "and", "or", "xor")
_UNSIGNED_ONLY = ("and", "or", "xor")


def _identity(op: str, dtype) -> Any:
    info = jnp.iinfo(dtype)
    return {
        "add": 0,
        "or": 0,
        "xor": 0,
        "and": info.max,
        "min": info.max,
        "max": info.min,
    }[op]


def _combine(op: str, x: jax.Array, axis: int) -> jax.Array:
    if op == "add":
        return jnp.sum(x, axis=axis, dtype=x.dtype)  # wraps modulo 2**32
    if op == "min":
        return jnp.min(x, axis=axis)
    if op == "max":
        return jnp.max(x, axis=axis)
    fn = {"and": jnp.bitwise_and, "or": jnp.bitwise_or, "xor": jnp.bitwise_xor}[op]
    return fn.reduce(x, axis=axis)


def _check_value(op: str, value: Any) -> jax.Array:
    value = checks.lane_array(value, "value")
    allowed = ("uint32",) if op in _UNSIGNED_ONLY else ("int32", "uint32")
    if value.dtype.name not in allowed:
        raise TypeError(
            f"__reduce_{op}_sync: value has dtype {value.dtype}; allowed: {allowed} "
            f"(CUDA defines {op} for "
            f"{'unsigned only' if op in _UNSIGNED_ONLY else 'int and unsigned'})"
        )
    return value


def reduce_sync(op: str, mask: Any, value: Any) -> jax.Array:
    """``__reduce_<op>_sync(mask, value)`` for one warp.

    Args:
        op: static, one of ``"add"``, ``"min"``, ``"max"``, ``"and"``, ``"or"``, ``"xor"``.
        mask: lanes taking part: a 32-bit int, or uint32/int32 scalar or (32,)
            array (one mask per lane). May be traced.
        value: (32, ...) int32 or uint32 (``and``/``or``/``xor``: uint32 only).

    Returns:
        (32, ...) of ``value``'s dtype: each calling lane holds the reduction over
        the calling lanes of its mask; lanes outside ``mask`` hold their input.

    Raises:
        TypeError: ``value`` is not int32/uint32 (or signed for a bitwise op).
        ValueError: ``op`` unknown; ``value`` has no leading lane axis of 32.

    Example:
        >>> jaxwarp.reduce_add_sync(0xFFFFFFFF, jnp.arange(32, dtype=jnp.uint32))[0]
        Array(496, dtype=uint32)
    """
    op = checks.static_choice(op, "op", _OPS)
    value = _check_value(op, value)
    extra = (1,) * (value.ndim - 1)
    ident = jnp.asarray(_identity(op, value.dtype), value.dtype)
    mask_int = checks.mask_value(mask)  # validates Python/NumPy int masks (None: an array)
    if mask_int is not None:
        # One mask for the whole warp: reduce once, give every caller the result.
        calls = participating(mask_int)
        r = _combine(op, jnp.where(calls.reshape((WARP_SIZE, *extra)), value, ident), 0)
        if mask_int == FULL_MASK:
            return jnp.broadcast_to(r, value.shape)
        return jnp.where(calls.reshape((WARP_SIZE, *extra)), r[None], value)
    calls, member = members(mask, f"__reduce_{op}_sync")
    terms = jnp.where(member.reshape((WARP_SIZE, WARP_SIZE, *extra)), value[None], ident)
    r = _combine(op, terms, 1)
    return jnp.where(calls.reshape((WARP_SIZE, *extra)), r, value)


def reduce_add_sync(mask: Any, value: Any) -> jax.Array:
    """``__reduce_add_sync``: wrapping sum over the lanes in ``mask``. See `reduce_sync`.

    Example:
        Lanes 0-15 sum 0 + 1 + ... + 15; lane 16 is outside the mask and keeps its input:

        >>> x = jnp.arange(32, dtype=jnp.int32)
        >>> jaxwarp.reduce_add_sync(0x0000FFFF, x)[jnp.array([0, 15, 16])]
        Array([120, 120,  16], dtype=int32)
    """
    return reduce_sync("add", mask, value)


def reduce_min_sync(mask: Any, value: Any) -> jax.Array:
    """``__reduce_min_sync``: signed for int32, unsigned for uint32. See `reduce_sync`.

    Example:
        The same bits, -3 .. 28: as int32 the minimum is -3; as uint32 -3 is
        4294967293 and the minimum is 0:

        >>> v = jnp.arange(32, dtype=jnp.int32) - 3
        >>> jaxwarp.reduce_min_sync(0xFFFFFFFF, v)[0]
        Array(-3, dtype=int32)
        >>> jaxwarp.reduce_min_sync(0xFFFFFFFF, v.astype(jnp.uint32))[0]
        Array(0, dtype=uint32)
    """
    return reduce_sync("min", mask, value)


def reduce_max_sync(mask: Any, value: Any) -> jax.Array:
    """``__reduce_max_sync``: signed for int32, unsigned for uint32. See `reduce_sync`.

    Example:
        The same bits, -3 .. 28: as int32 the maximum is 28; as uint32 -1 is the largest:

        >>> v = jnp.arange(32, dtype=jnp.int32) - 3
        >>> jaxwarp.reduce_max_sync(0xFFFFFFFF, v)[0]
        Array(28, dtype=int32)
        >>> jaxwarp.reduce_max_sync(0xFFFFFFFF, v.astype(jnp.uint32))[0]
        Array(4294967295, dtype=uint32)
    """
    return reduce_sync("max", mask, value)


def reduce_and_sync(mask: Any, value: Any) -> jax.Array:
    """``__reduce_and_sync``: bitwise AND, uint32 only. See `reduce_sync`.

    Example:
        Every lane holds 0xFF except lane 5, which holds 0x0F:

        >>> w = jnp.full(32, 0xFF, jnp.uint32).at[5].set(0x0F)
        >>> jaxwarp.reduce_and_sync(0xFFFFFFFF, w)[0]
        Array(15, dtype=uint32)
    """
    return reduce_sync("and", mask, value)


def reduce_or_sync(mask: Any, value: Any) -> jax.Array:
    """``__reduce_or_sync``: bitwise OR, uint32 only. See `reduce_sync`.

    Example:
        Lane l holds bit l; the OR over lanes 0-7 sets bits 0-7:

        >>> bit = jnp.uint32(1) << jnp.arange(32, dtype=jnp.uint32)
        >>> hex(int(jaxwarp.reduce_or_sync(0x000000FF, bit)[0]))
        '0xff'
    """
    return reduce_sync("or", mask, value)


def reduce_xor_sync(mask: Any, value: Any) -> jax.Array:
    """``__reduce_xor_sync``: bitwise XOR, uint32 only. See `reduce_sync`.

    Example:
        Lanes 0-3 get 0 ^ 1 ^ 2 ^ 3 = 0; lane 4 is outside the mask and keeps its input:

        >>> x = jnp.arange(32, dtype=jnp.uint32)
        >>> jaxwarp.reduce_xor_sync(0b1111, x)[:5]
        Array([0, 0, 0, 0, 4], dtype=uint32)
    """
    return reduce_sync("xor", mask, value)
