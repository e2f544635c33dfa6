"""Which lanes of the warp are executing: the one home of divergence state.

On a GPU, the lanes of a warp that took a branch execute it while the others wait;
``__activemask()``, a coalesced group and the lanes a shuffle or vote may name are those
lanes. jaxwarp runs every path as array code over all 32 lanes, so the set of lanes
that are executing the current path is carried here, while that path is traced, as a
``bool[32]`` array (traced, and batched under ``jax.vmap`` like any other lane value).
``None`` means all 32 lanes execute, which is the state outside any branch.

Divergent control flow (``jaxwarp.branch``, ``jaxwarp.lane_while``) sets it with
:func:`running`; warp primitives and cooperative groups read it with
:func:`active_lanes`.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

import jax
import jax.numpy as jnp

_ACTIVE: contextvars.ContextVar = contextvars.ContextVar("jaxwarp_active_lanes", default=None)
# The innermost per-lane loop being traced: (lanes that reached it, lanes looping now).
_LOOP: contextvars.ContextVar = contextvars.ContextVar("jaxwarp_loop_lanes", default=None)
_LANE_BITS = tuple(1 << l for l in range(32))


def active_lanes() -> jax.Array | None:
    """The lanes executing the path being traced: ``bool[32]``, or ``None`` for all 32."""
    return _ACTIVE.get()


@contextlib.contextmanager
def running(active: jax.Array | None) -> Iterator[None]:
    """Traces the body with ``active`` (``bool[32]`` or ``None``) as the executing lanes."""
    token = _ACTIVE.set(active)
    try:
        yield
    finally:
        _ACTIVE.reset(token)


@contextlib.contextmanager
def looping(entry: jax.Array, now: jax.Array) -> Iterator[None]:
    """Traces a loop's body with ``entry`` (the lanes that reached the loop) and ``now``
    (those running this trip), both ``bool[32]``, as the innermost loop's lanes."""
    token = _LOOP.set((entry, now))
    try:
        yield
    finally:
        _LOOP.reset(token)


def loop_lanes() -> tuple[jax.Array, jax.Array] | None:
    """``(entry, now)`` of the innermost per-lane loop being traced, or ``None``."""
    return _LOOP.get()


def lanes_mask(lanes: jax.Array) -> jax.Array:
    """``bool[32]`` -> ``uint32`` scalar with bit ``l`` set where ``lanes[l]``."""
    bits = jnp.asarray(_LANE_BITS, jnp.uint32)
    return jnp.sum(jnp.where(lanes, bits, jnp.uint32(0)), dtype=jnp.uint32)
