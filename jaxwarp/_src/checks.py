"""Argument checking shared by every module.

Static arguments (widths, formats, shapes, layouts, ops) must be concrete Python
values at trace time; data arguments (values, lanes, masks) are arrays and may be
traced. Every failure names the argument, what was given and what is allowed.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

try:  # jax >= 0.4.36 moved it; the old name warns and will go away.
    from jax.extend.core import concrete_or_error as _concrete_or_error
except ImportError:  # pragma: no cover
    from jax.core import concrete_or_error as _concrete_or_error

WARP_SIZE = 32


def static_int(value: Any, name: str) -> int:
    """Returns ``value`` as a Python int, or raises naming ``name`` if it is traced."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be a Python int, got bool {value!r}")
    try:
        return _concrete_or_error(
            operator.index,
            value,
            f"{name} is a static argument and must be a concrete Python int, not a traced "
            f"value (mark it static in jax.jit via static_argnums/static_argnames)",
        )
    except TypeError as e:
        if isinstance(e, jax.errors.ConcretizationTypeError):
            raise
        raise TypeError(f"{name} must be a Python int, got {type(value).__name__} {value!r}") from e


def static_choice(value: Any, name: str, allowed: Iterable[Any]) -> Any:
    """Checks that a static ``value`` is one of ``allowed``."""
    allowed = tuple(allowed)
    if isinstance(value, jax.core.Tracer):
        raise TypeError(
            f"{name} is a static argument and must be a concrete Python value, "
            f"not a traced value; allowed: {allowed}"
        )
    if value not in allowed:
        raise ValueError(f"{name}={value!r} is not supported; allowed: {allowed}")
    return value


def lane_array(var: Any, name: str = "var") -> jax.Array:
    """Checks that ``var`` has a leading lane axis of size 32 and returns it as an array."""
    arr = jnp.asarray(var)
    if arr.ndim == 0 or arr.shape[0] != WARP_SIZE:
        raise ValueError(
            f"{name} must have a leading lane axis of size {WARP_SIZE} (one entry per lane); "
            f"got shape {tuple(arr.shape)}. Use jax.vmap for many warps."
        )
    return arr


def mask_array(mask: Any, name: str = "mask") -> jax.Array:
    """Returns a 32-bit lane mask as a uint32 scalar or (32,) array (each lane passes its own).

    Python ints must be in [-2**31, 2**32); arrays must have a 32-bit integer dtype.
    """
    if isinstance(mask, bool):
        raise TypeError(f"{name} must be a 32-bit integer lane mask, got bool")
    if isinstance(mask, np.integer):
        if mask.dtype.itemsize > 4 and not -(2**31) <= int(mask) < 2**32:
            raise ValueError(
                f"{name}={int(mask):#x} does not fit in 32 bits; allowed: 0 .. 0xFFFFFFFF")
        mask = int(mask)
    if isinstance(mask, int):
        if not -(2**31) <= mask < 2**32:
            raise ValueError(f"{name}={mask:#x} does not fit in 32 bits; allowed: 0 .. 0xFFFFFFFF")
        return jnp.uint32(mask & 0xFFFFFFFF)
    if isinstance(mask, np.ndarray) and mask.dtype not in (np.uint32, np.int32):
        raise TypeError(
            f"{name} must be a 32-bit integer lane mask (uint32 or int32, or a Python int), "
            f"got dtype {mask.dtype}"
        )
    arr = jnp.asarray(mask)
    if arr.dtype not in (jnp.dtype(jnp.uint32), jnp.dtype(jnp.int32)):
        raise TypeError(
            f"{name} must be a 32-bit integer lane mask (uint32 or int32, or a Python int), "
            f"got dtype {arr.dtype}"
        )
    if arr.shape not in ((), (WARP_SIZE,)):
        raise ValueError(
            f"{name} must be a scalar or one mask per lane with shape ({WARP_SIZE},), "
            f"got shape {tuple(arr.shape)}"
        )
    return arr.astype(jnp.uint32) if arr.dtype != jnp.uint32 else arr


def per_lane_int(value: Any, name: str) -> jax.Array:
    """Returns an int32 per-lane argument (Python int, scalar or (32,) integer array) as (32,)."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an integer or a (32,) integer array, got bool")
    if isinstance(value, int):
        if not -(2**31) <= value < 2**32:
            raise ValueError(f"{name}={value} does not fit in 32 bits")
        value = np.int64(value).astype(np.uint32).view(np.int32)
        return jnp.full((WARP_SIZE,), value, jnp.int32)
    arr = jnp.asarray(value)
    if not jnp.issubdtype(arr.dtype, jnp.integer):
        raise TypeError(
            f"{name} must be an integer or a (32,) integer array, got dtype {arr.dtype}"
        )
    if arr.shape not in ((), (WARP_SIZE,)):
        raise ValueError(
            f"{name} must be a scalar or one value per lane with shape ({WARP_SIZE},), "
            f"got shape {tuple(arr.shape)}"
        )
    return jnp.broadcast_to(arr.astype(jnp.int32), (WARP_SIZE,))


def require_x64(what: str) -> None:
    """Raises a clear error if 64-bit types are needed but ``jax_enable_x64`` is off."""
    if not jax.config.jax_enable_x64:
        raise RuntimeError(
            f"{what} needs 64-bit types: call jax.config.update('jax_enable_x64', True) "
            f"(or set JAX_ENABLE_X64=1) before using it"
        )
