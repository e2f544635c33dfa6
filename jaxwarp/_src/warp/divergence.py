"""Divergent control flow inside a one-warp program: ``branch``, ``lane_while`` and
``lane_for``.

On a GPU, the lanes of a warp that disagree on a branch condition run the two paths
one after the other, each with only its own lanes executing, and meet again after
the branch (reconvergence). A loop whose trip count differs per lane keeps running
while any lane still loops; lanes that left wait with their values untouched.

jaxwarp computes every path as array code over all 32 lanes and keeps, while a path
is traced, the set of lanes executing it (``active.running``). Everything that reads
that set sees exactly the lanes that took the path, as on the GPU:
``jaxwarp.activemask()``, the shuffles, votes, matches and reductions (a lane that is
not executing does not call: its result is its own input, and a lane reading from it
reads what a lane outside ``mask`` gives, 0), ``jaxwarp.syncwarp`` and
``jaxwarp.elect_sync``. After the branch, each lane keeps the result of the path it
took (``jnp.where`` on the predicate), which is what reconvergence does to registers.

Order of the paths: the GPU's order is visible only through side effects (printf,
stores that both paths make to one address); the values of a pure program do not
depend on it. jaxwarp traces (and so runs side effects of, e.g. ``jax.debug.print``)
the ``then`` path first, then the ``else`` path. Both paths are computed even when no
lane takes one of them (its results are then discarded); both must return values of
the same structure, shapes and dtypes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from jaxwarp._src import checks
from jaxwarp._src.warp import checked
from jaxwarp._src.warp.active import active_lanes, lanes_mask, running
from jaxwarp._src.warp.active import looping as in_loop
from jaxwarp._src.warp.vote import lane_predicate

WARP_SIZE = checks.WARP_SIZE


def _per_lane(tree: Any, what: str) -> Any:
    """Every leaf as a (32, ...) array; a 0-d leaf stands for every lane's value."""

    def one(x):
        x = checks.array_arg(x, what, complex_ok=True)
        if x.ndim == 0:
            return jnp.broadcast_to(x, (WARP_SIZE,))
        if x.shape[0] != WARP_SIZE:
            raise ValueError(
                f"{what} must be per-lane values with a leading lane axis of {WARP_SIZE} "
                f"(or 0-d, the same in every lane); got shape {tuple(x.shape)}")
        return x

    return jax.tree.map(one, tree)


def _operands(tree: Any) -> Any:
    """Checks that every leaf is a per-lane (32, ...) or 0-d array; passes them as given."""

    def one(x):
        arr = checks.array_arg(x, "operands", complex_ok=True)
        if arr.ndim and arr.shape[0] != WARP_SIZE:
            raise ValueError(f"operands must be per-lane values with a leading lane axis of "
                             f"{WARP_SIZE} (or 0-d); got shape {tuple(arr.shape)}")
        return x

    jax.tree.map(one, tree)
    return tree


def _select(lanes: jax.Array, on: Any, off: Any) -> Any:
    """Per lane: ``on`` where ``lanes``, else ``off`` (pytrees of (32, ...) arrays)."""

    def one(a, b):
        return jnp.where(lanes.reshape((WARP_SIZE,) + (1,) * (a.ndim - 1)), a, b)

    return jax.tree.map(one, on, off)


def _same_structure(a: Any, b: Any, what: str) -> None:
    ta, tb = jax.tree.structure(a), jax.tree.structure(b)
    if ta != tb:
        raise TypeError(f"{what}: the results have different structures: {ta} and {tb}; "
                        f"allowed: the same pytree of per-lane arrays")
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        if x.shape != y.shape or x.dtype != y.dtype:
            raise TypeError(f"{what}: results {x.dtype}{list(x.shape)} and "
                            f"{y.dtype}{list(y.shape)} differ; allowed: the same shape "
                            f"and dtype on both sides")


def _within(lanes: jax.Array) -> jax.Array:
    """``lanes`` restricted to the lanes executing now."""
    outer = active_lanes()
    return lanes if outer is None else outer & lanes


def _callable(fn: Any, name: str) -> None:
    if not callable(fn):
        raise TypeError(f"{name} must be callable (a function of the operands), got "
                        f"{type(fn).__name__} {fn!r}")


def branch(pred: Any, then_fn: Callable[..., Any], else_fn: Callable[..., Any],
           *operands: Any) -> Any:
    """``if (pred) then_fn(...) else else_fn(...)`` in a one-warp program, per lane.

    Each path runs with the lanes that took it executing (those of the enclosing
    path whose ``pred`` holds, or does not): inside it, ``jaxwarp.activemask()``
    is their mask, and shuffles, votes, matches and reductions see only them.
    After the branch each lane holds the result of its own path, as after
    reconvergence on the GPU. Branches nest, and work under ``jax.jit``,
    ``jax.vmap`` (many warps, each with its own lanes) and ``jax.grad`` (the
    derivative of each lane is that of its own path).

    ``then_fn`` is traced (and its side effects run) before ``else_fn``; both
    are computed over all lanes and the lanes of the other path are discarded, so
    a path must not fail on values it does not take (as with ``jnp.where``).

    Args:
        pred: (32,) bool or integer (non-zero = true), one condition per lane.
        then_fn: function of ``*operands`` run by the lanes where ``pred`` holds.
        else_fn: the same for the other lanes; its results must have the same
            structure, shapes and dtypes as ``then_fn``'s.
        *operands: pytrees of per-lane (32, ...) arrays passed to both paths.

    Returns:
        The pytree the paths return, every leaf (32, ...): lane ``l`` holds
        ``then_fn``'s value if ``pred[l]`` else ``else_fn``'s. A 0-d leaf counts
        as the same value in every lane and comes back as (32,).

    Raises:
        TypeError: a function is not callable; the two paths return different
            structures, shapes or dtypes; ``pred`` is not bool or integer.
        ValueError: ``pred`` or a result has no leading lane axis of 32.

    Example:
        The even lanes add their neighbour's value, the odd lanes count the lanes
        executing with them (16: ``__popc(__activemask())``):

        >>> x = jnp.arange(32, dtype=jnp.int32)
        >>> def even(x):
        ...     return x + jaxwarp.shfl_xor_sync(jaxwarp.activemask(), x, 2)
        >>> def odd(x):
        ...     return jnp.full(32, jax.lax.population_count(jaxwarp.activemask()), jnp.int32)
        >>> jaxwarp.branch(x % 2 == 0, even, odd, x)[:6]
        Array([ 2, 16,  2, 16, 10, 16], dtype=int32)
    """
    p = lane_predicate(pred)
    _callable(then_fn, "then_fn")
    _callable(else_fn, "else_fn")
    operands = _operands(operands)
    with running(_within(p)):
        on = _per_lane(then_fn(*operands), "then_fn's result")
    with running(_within(~p)):
        off = _per_lane(else_fn(*operands), "else_fn's result")
    _same_structure(on, off, "branch")
    return _select(p, on, off)


def _reverse_mode(tree: Any) -> bool:
    """True when a leaf of ``tree`` is being linearized (``jax.grad`` / ``jax.vjp`` traced
    eagerly; under ``jax.jit`` the loop is linearized after tracing and JAX says so)."""
    todo = [x for x in jax.tree_util.tree_leaves(tree)  # integers carry no gradient
            if jnp.issubdtype(getattr(x, "dtype", jnp.int32), jnp.inexact)]
    for _ in range(64):
        if not todo:
            return False
        x = todo.pop()
        if type(x).__name__ in ("LinearizeTracer", "JaxprTracer"):
            return True
        todo += [getattr(x, a) for a in ("val", "primal") if hasattr(x, a)]
    return False


def _max_trips(max_trips: Any) -> int | None:
    """``max_trips`` checked: None or a static int >= 0."""
    if max_trips is None:
        return None
    max_trips = checks.static_int(max_trips, "max_trips")
    if max_trips < 0:
        raise ValueError(f"max_trips={max_trips}; allowed: None or an int >= 0")
    return max_trips


def _refuse_reverse(state: Any, name: str) -> None:
    """A per-lane loop without ``max_trips`` is a ``lax.while_loop``: say so to reverse mode."""
    if _reverse_mode(state):
        raise ValueError(
            f"{name} with max_trips=None is a lax.while_loop, which reverse-mode "
            "differentiation (jax.grad, jax.vjp, jax.linearize) cannot go through; "
            "pass max_trips=N (a static bound: a lax.scan of N iterations, "
            "differentiable; lanes still looping after N are reported by "
            "jaxwarp.checked)")


def _trip(body: Callable[[Any], Any], s: Any, lanes: jax.Array, everyone: jax.Array,
          what: str) -> Any:
    """One trip of a per-lane loop: ``body(s)`` run by ``lanes`` (of ``everyone``, the
    lanes that reached the loop), kept where they ran."""
    with running(lanes), in_loop(everyone, lanes):
        new = _per_lane(body(s), "body_fn's result")
    _same_structure(s, new, what)
    return _select(lanes, new, s)


def lane_while(cond_fn: Callable[[Any], Any], body_fn: Callable[[Any], Any], init: Any, *,
               max_trips: int | None = None) -> Any:
    """``while (cond(v)) v = body(v);`` in a one-warp program, with per-lane trip counts.

    Every lane of the enclosing path evaluates ``cond_fn``; the lanes where it holds
    run ``body_fn`` and evaluate ``cond_fn`` again, until no lane loops. In each
    iteration only the lanes still looping execute (``jaxwarp.activemask()`` is
    theirs, and intrinsics see only them); a lane that left keeps its values.

    With ``max_trips=None`` the loop is a ``lax.while_loop`` (``jax.jit``,
    ``jax.vmap`` and forward-mode derivatives; JAX has no reverse mode for it).
    With an int, it is a ``lax.scan`` of ``max_trips`` iterations, which
    ``jax.grad`` differentiates; lanes still looping after them stop there, and
    ``jaxwarp.checked`` reports it.

    Args:
        cond_fn: function of the state returning (32,) bool or integer, per lane.
        body_fn: function of the state returning the next state (same structure,
            shapes and dtypes).
        init: the state: a pytree of per-lane (32, ...) arrays (a 0-d leaf counts
            as the same value in every lane and is carried as (32,)).
        max_trips: static; None (no limit) or the number of iterations to run. Reverse-mode
            differentiation (``jax.grad``) needs an int: with None, a state being
            differentiated raises ``ValueError`` saying so.

    Returns:
        The state after every lane has left the loop.

    Raises:
        TypeError: a function is not callable; ``body_fn`` changes the structure,
            a shape or a dtype of the state; ``max_trips`` is not an int.
        ValueError: a state leaf has no leading lane axis of 32; ``max_trips`` < 0.

    Example:
        Lane ``l`` halves its value until it is odd: trip counts differ per lane.
        The count of lanes still looping is summed in each iteration:

        >>> x = jnp.arange(1, 33, dtype=jnp.int32)
        >>> def body(s):
        ...     v, n = s
        ...     alive = jax.lax.population_count(jaxwarp.activemask()).astype(jnp.int32)
        ...     return v // 2, n + alive
        >>> v, n = jaxwarp.lane_while(lambda s: s[0] % 2 == 0, body, (x, jnp.int32(0)))
        >>> v[:8]
        Array([1, 1, 3, 1, 5, 3, 7, 1], dtype=int32)
        >>> n[:8]
        Array([ 0, 16,  0, 24,  0, 16,  0, 28], dtype=int32)
    """
    _callable(cond_fn, "cond_fn")
    _callable(body_fn, "body_fn")
    max_trips = _max_trips(max_trips)
    state = _per_lane(init, "init")
    outer = active_lanes()
    everyone = jnp.ones((WARP_SIZE,), jnp.bool_) if outer is None else outer

    def test(lanes, s):
        with running(lanes):
            return lanes & lane_predicate(cond_fn(s))

    def step(carry):
        s, looping = carry
        s = _trip(body_fn, s, looping, everyone, "lane_while body_fn")
        return s, test(looping, s)

    carry = (state, test(everyone, state))
    if max_trips is None:
        _refuse_reverse(state, "lane_while")
        state, _ = lax.while_loop(lambda c: jnp.any(c[1]), step, carry)
        return state
    (state, looping), _ = lax.scan(lambda c, _: (step(c), None), carry, None,
                                   length=max_trips)
    checked.check(~jnp.any(looping),
                  "lane_while(max_trips={n}): lanes {lanes} still loop after max_trips "
                  "iterations (they stop there)", n=jnp.int32(max_trips),
                  lanes=lanes_mask(looping))
    return state


_REMAINDERS = ("after", "before")


def lane_for(trips: Any, body_fn: Callable[[Any, Any], Any], init: Any, *, unroll: int = 1,
             remainder: str = "after", max_trips: int | None = None) -> Any:
    """``for (int i = 0; i < n; ++i) v = body(i, v);`` with a per-lane ``n``, in the loop
    shape the compiler gives it.

    Which lanes run a trip together is not the source's to say: CUDA promises no
    reconvergence inside a loop, and nvcc may unroll a loop whose trip count is known
    at entry by ``U`` behind a *remainder* loop. With ``unroll=1`` the loop runs as
    written (each trip by the lanes still looping, as ``lane_while``). With
    ``unroll=U`` it runs in the unrolled shape: a main loop whose iteration ``t`` runs
    the body ``U`` times (``i = U t .. U t + U - 1``) with the lanes that have
    ``n // U > t`` executing all ``U`` copies, and a remainder loop of ``n % U`` trips
    (``i`` from ``n - n % U``), its trip ``e`` run by the lanes with ``n % U > e``. The
    warp reconverges between the two. ``remainder="before"`` runs the remainder trips
    first (``i`` from 0), then the main loop. Only what the lanes see together changes
    (``jaxwarp.activemask()``, shuffles, votes, reductions in the body, and branches
    inside it, which split the lanes running that copy); a body without warp
    intrinsics gives the same values in every shape. ``docs/divergence.md`` says which
    shape nvcc chose for which flags on an H100.

    Args:
        trips: per-lane trip counts, (32,) integers (or 0-d, the same in every lane); a
            count below 1 runs no trip.
        body_fn: function of ``(i, state)``, ``i`` the (32,) int32 trip index of each
            lane, returning the next state (same structure, shapes and dtypes).
        init: the state: a pytree of per-lane (32, ...) arrays (0-d leaves as in
            ``lane_while``).
        unroll: static int >= 1, the unroll factor of the main loop.
        remainder: ``"after"`` (the remainder loop follows the main loop) or
            ``"before"``.
        max_trips: static; None, or a bound on every lane's ``n``: the loops become
            ``lax.scan``s that ``jax.grad`` differentiates, and ``jaxwarp.checked``
            reports a lane whose ``n`` is above it (it stops after ``max_trips``).

    Returns:
        The state after every lane has made its trips.

    Raises:
        TypeError: ``body_fn`` is not callable or changes the state's structure, a shape
            or a dtype; ``trips`` is not integer; ``unroll`` or ``max_trips`` is not an
            int.
        ValueError: ``unroll`` < 1, ``max_trips`` < 0, ``remainder`` not one of the
            allowed values, a leaf without a leading lane axis of 32.

    Example:
        Each lane reads ``__activemask()`` on its last trip. As written, lanes read it
        with the lanes that loop at least as long; unrolled by 4 with the remainder
        after, lanes whose counts differ by a multiple of 4 read it together:

        >>> n = jnp.array([1, 5, 2, 4, 8] + [0] * 27, jnp.int32)
        >>> def body(i, m):
        ...     last = i == n - 1
        ...     return jaxwarp.branch(last, lambda m: jaxwarp.activemask() + 0 * m,
        ...                           lambda m: m, m)
        >>> m0 = jnp.zeros(32, jnp.uint32)
        >>> [hex(int(v)) for v in jaxwarp.lane_for(n, body, m0)[:5]]
        ['0x1', '0x2', '0x4', '0x8', '0x10']
        >>> [hex(int(v)) for v in jaxwarp.lane_for(n, body, m0, unroll=4)[:5]]
        ['0x3', '0x3', '0x4', '0x8', '0x10']
    """
    _callable(body_fn, "body_fn")
    unroll = checks.static_int(unroll, "unroll")
    if unroll < 1:
        raise ValueError(f"unroll={unroll}; allowed: an int >= 1 (1: the loop as written)")
    if remainder not in _REMAINDERS:
        raise ValueError(f"remainder={remainder!r}; allowed: {', '.join(_REMAINDERS)}")
    max_trips = _max_trips(max_trips)
    n = checks.array_arg(trips, "trips")
    if not jnp.issubdtype(n.dtype, jnp.integer):
        raise TypeError(f"trips must be integer trip counts, got dtype {n.dtype}")
    n = _per_lane(n, "trips").astype(jnp.int32)
    if n.ndim != 1:
        raise ValueError(f"trips must be (32,) per-lane counts or 0-d, got shape {n.shape}")
    state = _per_lane(init, "init")
    outer = active_lanes()
    everyone = jnp.ones((WARP_SIZE,), jnp.bool_) if outer is None else outer
    n = jnp.where(everyone, jnp.maximum(n, 0), 0)
    if max_trips is not None:
        checked.check(jnp.all(n <= max_trips),
                      "lane_for(max_trips={m}): lanes {lanes} have more trips (they stop "
                      "after max_trips)", m=jnp.int32(max_trips), lanes=lanes_mask(n > max_trips))
        n = jnp.minimum(n, max_trips)
    main, rest = n // unroll, n % unroll

    def trip(s, i, lanes):
        i = jnp.broadcast_to(jnp.asarray(i, jnp.int32), (WARP_SIZE,))
        return _trip(lambda s: body_fn(i, s), s, lanes, everyone, "lane_for body_fn")

    def main_iter(t, s):
        lanes = everyone & (main > t)
        for j in range(unroll):
            s = trip(s, t * unroll + j + (rest if remainder == "before" else 0), lanes)
        return s

    def remainder_loop(s):
        base = n - rest if remainder == "after" else jnp.zeros_like(n)
        for e in range(unroll - 1):
            s = trip(s, base + e, everyone & (rest > e))
        return s

    if remainder == "before":
        state = remainder_loop(state)
    if max_trips is None:
        _refuse_reverse(state, "lane_for")
        _, state = lax.while_loop(lambda c: jnp.any(main > c[0]),
                                  lambda c: (c[0] + 1, main_iter(c[0], c[1])),
                                  (jnp.int32(0), state))
    else:
        state, _ = lax.scan(lambda s, t: (main_iter(t, s), None), state,
                            jnp.arange(max_trips // unroll, dtype=jnp.int32))
    if remainder == "after":
        state = remainder_loop(state)
    return state
