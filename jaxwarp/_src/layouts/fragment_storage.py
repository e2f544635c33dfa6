"""The registers of WMMA fragments as storage words: sub-byte packing, value ranges and
the conversion of ``fill_fragment``'s value.

``s4``/``u4`` pack 8 elements into one 32-bit word (element ``j`` in bits
``4j..4j+3``), ``b1`` 32 (element ``j`` in bit ``j``); other element types are one
per storage element.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxwarp._src import checks
from jaxwarp._src.catalogue import wmma_table as table
from jaxwarp._src.numerics import bitops
from jaxwarp._src.warp import checked


def _shifts(et: table.ElementType) -> jax.Array:
    return jnp.arange(et.per_storage, dtype=jnp.uint32) * jnp.uint32(et.bits)


def pack_values(et: table.ElementType, values: jax.Array) -> jax.Array:
    """Packs sub-byte values (..., N * per_storage) into storage words (..., N)."""
    if not et.packed:
        return values
    mask = jnp.uint32((1 << et.bits) - 1)
    v = values.astype(jnp.int32).astype(jnp.uint32) & mask  # s4 -1 -> 0xF
    v = v.reshape(*v.shape[:-1], -1, et.per_storage) << _shifts(et)
    words = jnp.sum(v, axis=-1, dtype=jnp.uint32)  # disjoint bit fields: sum == or
    if et.storage_dtype == np.dtype(np.int32):
        words = bitops.from_bits(words, jnp.int32)
    return words


def unpack_values(et: table.ElementType, words: jax.Array) -> jax.Array:
    """Unpacks storage words (..., N) into values (..., N * per_storage), value dtype."""
    if not et.packed:
        return words
    words = bitops.uint_view(words)
    v = (words[..., None] >> _shifts(et)) & jnp.uint32((1 << et.bits) - 1)
    v = v.reshape(*v.shape[:-2], -1)
    if et.value_dtype == np.dtype(np.int8):  # s4: sign-extend the nibble
        return bitops.sext(v, et.bits)
    return v.astype(et.value_dtype)


def packed_range(et: table.ElementType) -> tuple[int, int]:
    """The values a sub-byte element type holds: s4 (-8, 7), u4 (0, 15), b1 (0, 1)."""
    if et.value_dtype == np.dtype(np.int8):
        return -(1 << (et.bits - 1)), (1 << (et.bits - 1)) - 1
    return 0, (1 << et.bits) - 1


def check_packed_range(et: table.ElementType, values: Any, name: str) -> None:
    """Checks sub-byte values: concrete ones raise ``ValueError``, traced ones are
    reported by ``jaxwarp.checked`` (outside it only the low bits are kept)."""
    lo, hi = packed_range(et)
    if isinstance(values, jax.core.Tracer):
        if checked.enabled():
            v = values.astype(jnp.int32)
            bad = (v < lo) | (v > hi)
            flat = jnp.argmax(bad.reshape(-1))
            checked.check(~jnp.any(bad), f"{name} has value {{value}} at flat index {{index}}, "
                          f"outside the {et.name} range {lo} .. {hi}",
                          value=v.reshape(-1)[flat], index=flat)
        return
    v = np.asarray(values).astype(np.int64)
    bad = (v < lo) | (v > hi)
    if bad.any():
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(f"{name} holds {int(v[idx])} at index {idx}, outside the {et.name} "
                         f"range {lo} .. {hi} (allowed: {lo} .. {hi})")


def fill_storage(frag: Any, v: Any, refuse: tuple[type, ...] = ()) -> jax.Array:
    """The storage ``x`` of a ``frag`` (a ``FragmentType``) whose elements are all ``v``:
    the checks and the conversion of ``fill_fragment`` (whose docstring states them),
    after its fragment argument has been read. ``refuse``: classes that are no scalar
    number although they have a ``dtype`` (``Fragment``, ``FragmentType``)."""
    et = frag.element_type
    if isinstance(v, refuse) or v is None or isinstance(v, (str, bytes)):
        raise TypeError(f"v must be a scalar number (int, float or a 0-d numeric array), "
                        f"got {type(v).__name__} {v!r}")
    if np.ndim(v) != 0:
        raise ValueError(f"v must be a scalar (fill_fragment sets every element to one "
                         f"value), got shape {np.shape(v)}")
    if isinstance(v, complex) and not isinstance(v, np.generic):
        raise TypeError(f"v must be a real scalar, got complex {v!r} (its imaginary part "
                        f"would be dropped)")
    weak = isinstance(v, (bool, int, float)) and not isinstance(v, np.generic)
    if weak:
        if isinstance(v, int) and not isinstance(v, bool) and not -(2**63) <= v < 2**64:
            raise ValueError(f"v={v} does not fit in 64 bits")
        value = v
    else:
        dtype = getattr(v, "dtype", None)
        if dtype is None or not (jnp.issubdtype(dtype, jnp.number) or dtype == np.bool_):
            raise TypeError(f"v must be a scalar number (int, float or a 0-d numeric array), "
                            f"got {type(v).__name__} {v!r}")
        value = checks.array_arg(v, "v")  # 64-bit with x64 off, complex: TypeError
    frag._require_x64()  # f64 storage: x64 on, or the fill would be narrowed
    storage = et.storage_dtype
    integer_elems = not jnp.issubdtype(storage, jnp.floating)
    is_float = (isinstance(value, float) if weak else jnp.issubdtype(value.dtype, jnp.floating))
    if et.packed:
        lo, hi = packed_range(et)
    elif integer_elems:
        info = np.iinfo(storage)
        lo, hi = int(info.min), int(info.max)
    if (integer_elems and is_float and isinstance(value, jax.core.Tracer)
            and not checked.enabled()):
        raise TypeError(f"v is a traced float for a {et.name} fragment: a NaN, inf or "
                        f"out-of-range value would be converted silently; pass an integer "
                        f"value (convert it yourself, e.g. jnp.trunc(v).astype(jnp.int32) "
                        f"after handling NaN), or run under jaxwarp.checked to have it "
                        f"checked")
    if integer_elems and (et.packed or is_float):
        _check_fill_range(value, weak, is_float, lo, hi, et.name)
    if et.packed:
        ints = jnp.asarray(value).astype(jnp.int32) if not weak else jnp.int32(
            int(value) if not is_float else int(np.trunc(value)))
        vals = jnp.full((checks.WARP_SIZE, frag.num_elements), ints)
        x = pack_values(et, vals)
    else:
        if weak and integer_elems and not is_float:
            # C++ integer conversion: wrap modulo 2**bits.
            fill = jnp.asarray(np.array(int(value) & ((1 << (8 * storage.itemsize)) - 1),
                                        np.uint64).astype(storage))
        elif weak and integer_elems:
            fill = jnp.asarray(np.array(np.trunc(value)).astype(storage))
        elif weak:
            fill = jnp.asarray(value, storage)  # one rounding, from the Python value
        else:
            fill = value.astype(storage)
        x = jnp.full((checks.WARP_SIZE, frag.num_storage_elements), fill, storage)
    return x


def _check_fill_range(value: Any, weak: bool, is_float: bool, lo: int, hi: int,
                      type_name: str) -> None:
    """``v`` must convert into [lo, hi] (floats: finite, truncated toward zero)."""
    what = f"a {type_name} fragment (allowed: {lo} .. {hi}"
    what += ", finite floats truncated toward zero)" if is_float else ")"
    if isinstance(value, jax.core.Tracer):
        if checked.enabled():
            f = value.astype(jnp.float32) if is_float else value
            t = jnp.trunc(f) if is_float else f
            ok = (t >= lo) & (t <= hi)
            if is_float:
                ok = ok & jnp.isfinite(f)
            checked.check(ok, "fill_fragment: v={v} does not fit " + what, v=value)
        return
    if is_float:
        f = float(np.asarray(value))
        if not np.isfinite(f) or not lo <= np.trunc(f) <= hi:
            raise ValueError(f"v={f!r} does not fit {what}; C++ leaves this conversion "
                             f"undefined")
        return
    i = int(np.asarray(value))
    if not lo <= i <= hi:
        raise ValueError(f"v={i} does not fit {what}")
