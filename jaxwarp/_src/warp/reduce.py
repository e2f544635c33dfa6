"""Warp reductions: ``__reduce_{add,min,max,and,or,xor}_sync`` (sm_80 and later).

Each lane that calls gets the reduction of ``value`` over the lanes of its
``mask`` that call. ``add`` wraps modulo 2**32; ``min``/``max`` compare as signed
for int32 and as unsigned for uint32, as CUDA's overloads do; ``and``/``or``/``xor``
exist for unsigned only. Lanes outside ``mask`` do not call: their result is their
own input. Floats are not reduced by sm_80/sm_90 (CUDA has no such overload);
``redux_sync`` also models PTX's sm_100a ``redux.sync`` f32 min/max (unverified).
Inside ``jaxwarp.branch``/``jaxwarp.lane_while`` only executing lanes call.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from jaxwarp._src import checks
from jaxwarp._src.warp.active import active_lanes
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
    if mask_int is not None or checks.mask_array(mask).ndim == 0:
        # One mask for the whole warp: reduce once, give every caller the result.
        calls = participating(mask, f"__reduce_{op}_sync")
        r = _combine(op, jnp.where(calls.reshape((WARP_SIZE, *extra)), value, ident), 0)
        if mask_int == FULL_MASK and active_lanes() is None:
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


# PTX redux.sync: the integer forms are the __reduce_*_sync intrinsics; the f32 form
# (min/max, optional .abs and .NaN) is sm_100a's. {type: (dtype, ops)}
_REDUX_TYPES = {
    "u32": ("uint32", ("add", "min", "max")),
    "s32": ("int32", ("add", "min", "max")),
    "b32": ("uint32", ("and", "or", "xor")),
    "f32": ("float32", ("min", "max")),
}
_CANONICAL_NAN = 0x7FFFFFFF  # PTX's canonical NaN


def _parse_redux(instr: Any) -> tuple[str, bool, bool, str]:
    """``"min.abs.NaN.f32"`` -> ("min", abs, nan, "f32"), checked against the PTX ISA."""
    if not isinstance(instr, str):
        raise TypeError(f"instr must be a str such as 'min.NaN.f32', got "
                        f"{type(instr).__name__} {instr!r}")
    parts = instr.removeprefix("redux.sync.").split(".")
    forms = [f"{op}.{t}" for t, (_, ops) in _REDUX_TYPES.items() for op in ops]
    forms += ["{min,max}{.abs}{.NaN}.f32"]
    bad = ValueError(f"redux.sync.{instr.removeprefix('redux.sync.')} is not a PTX redux.sync "
                     f"form; allowed: {', '.join(forms)}")
    if len(parts) < 2 or parts[-1] not in _REDUX_TYPES:
        raise bad
    op, quals, ty = parts[0], parts[1:-1], parts[-1]
    if op not in _REDUX_TYPES[ty][1]:
        raise bad
    if quals and (ty != "f32" or quals not in (["abs"], ["NaN"], ["abs", "NaN"])):
        raise bad
    return op, "abs" in quals, "NaN" in quals, ty


def _f32_key(bits: jax.Array) -> jax.Array:
    """uint32 float bits -> int32 keys in the order of the values, -0 below +0."""
    k = lax.bitcast_convert_type(bits, jnp.int32)
    return jnp.where(k < 0, k ^ jnp.int32(0x7FFFFFFF), k)


def _redux_f32(op: str, absolute: bool, nan: bool, mask: Any, value: jax.Array) -> jax.Array:
    calls, member = members(mask, f"redux.sync.{op}.f32")
    extra = (1,) * (value.ndim - 1)
    bits = lax.bitcast_convert_type(value, jnp.uint32)
    if absolute:
        bits = bits & jnp.uint32(0x7FFFFFFF)
    is_nan = (bits & jnp.uint32(0x7FFFFFFF)) > jnp.uint32(0x7F800000)
    key = _f32_key(bits)
    ident = jnp.int32(2**31 - 1 if op == "min" else -(2**31))
    mem = member.reshape((WARP_SIZE, WARP_SIZE, *extra))
    terms = jnp.where(mem & ~is_nan[None], key[None], ident)
    r = jnp.min(terms, axis=1) if op == "min" else jnp.max(terms, axis=1)
    r_bits = lax.bitcast_convert_type(jnp.where(r < 0, r ^ jnp.int32(0x7FFFFFFF), r), jnp.uint32)
    nan_in = jnp.any(mem & is_nan[None], axis=1)
    number_in = jnp.any(mem & ~is_nan[None], axis=1)
    give_nan = nan_in if nan else ~number_in
    r_bits = jnp.where(give_nan, jnp.uint32(_CANONICAL_NAN), r_bits)
    out = lax.bitcast_convert_type(r_bits, jnp.float32)
    return jnp.where(calls.reshape((WARP_SIZE, *extra)), out, value)


def redux_sync(instr: str, mask: Any, value: Any) -> jax.Array:
    """PTX ``redux.sync.<instr> dst, src, membermask`` for one warp.

    ``instr`` is the PTX qualifier string: ``add``/``min``/``max`` with ``.u32``
    or ``.s32``, ``and``/``or``/``xor`` with ``.b32`` (these are the
    ``__reduce_*_sync`` intrinsics, sm_80, verified on an H100), or
    ``min``/``max`` with optional ``.abs`` and ``.NaN`` and ``.f32`` (sm_100a).

    The f32 form follows the PTX ISA and is **unverified** (no sm_100 capture):
    ``+0.0 > -0.0``; ``.abs`` reduces the absolute values; without ``.NaN``,
    NaN inputs are ignored and the result is the canonical NaN (``0x7FFFFFFF``)
    only when every input is NaN; with ``.NaN`` any NaN input gives the canonical
    NaN. Subnormals are compared as they are (min/max do not flush).

    Args:
        instr: static PTX qualifiers, e.g. ``"min.s32"``, ``"xor.b32"``,
            ``"max.abs.NaN.f32"`` (a leading ``"redux.sync."`` is allowed).
        mask: lanes taking part: a 32-bit int, or uint32/int32 scalar or (32,)
            array (one mask per lane). May be traced.
        value: (32, ...) of the type's dtype: uint32 (``.u32``, ``.b32``), int32
            (``.s32``) or float32 (``.f32``).

    Returns:
        (32, ...) of ``value``'s dtype: each calling lane holds the reduction over
        the calling lanes of its mask; lanes outside ``mask`` hold their input.

    Raises:
        ValueError: ``instr`` is not a PTX ``redux.sync`` form.
        TypeError: ``value``'s dtype is not the one ``instr`` names.

    Example:
        >>> x = jnp.array([3.0, -0.0, 0.0, -7.5] * 8, jnp.float32).at[5].set(jnp.nan)
        >>> jaxwarp.redux_sync("min.f32", 0xFFFFFFFF, x)[0]
        Array(-7.5, dtype=float32)
        >>> jaxwarp.redux_sync("min.abs.f32", 0xFFFFFFFF, x)[0]
        Array(0., dtype=float32)
        >>> jaxwarp.redux_sync("max.NaN.f32", 0xFFFFFFFF, x)[0]
        Array(nan, dtype=float32)
        >>> jaxwarp.redux_sync("max.s32", 0x0000000F, jnp.arange(32, dtype=jnp.int32))[0]
        Array(3, dtype=int32)
    """
    op, absolute, nan, ty = _parse_redux(instr)
    value = checks.lane_array(value, "value")
    want = _REDUX_TYPES[ty][0]
    if value.dtype.name != want:
        raise TypeError(f"redux.sync.{instr.removeprefix('redux.sync.')}: value has dtype "
                        f"{value.dtype}; allowed: {want} (.{ty})")
    if ty == "f32":
        return _redux_f32(op, absolute, nan, mask, value)
    return reduce_sync(op, mask, value)
