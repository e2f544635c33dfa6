"""Batches of warps (or matrices) spread over every device of a machine.

``sharded_vmap(fn)`` is ``jax.vmap(fn)`` whose batch axis is split over all
devices: a one-axis ``Mesh`` named ``"batch"`` over ``jax.devices()``, inputs
placed with ``NamedSharding(mesh, P("batch"))``, the batch padded to a multiple
of the device count and the padding stripped from the results::

    batch of n  ──pad to n' = ceil(n / d) * d──►  [dev 0 | dev 1 | ... | dev d-1]
                                                  each runs vmap(fn) on n'/d items
    results  ◄──strip back to n──  sharded on the same mesh

Each batch item is computed on one device by the same per-item program, so the
results are the single-device ``jax.vmap(fn)`` results bit for bit (the
integer tensor-core model trivially; float programs too on the backends tested,
``tests/test_sharding.py`` checks it on 4 CPU devices). On one device it is
``jax.jit(jax.vmap(fn))`` with a trivial mesh, so scripts need no branch.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxwarp._src import checks

BATCH_AXIS = "batch"


def batch_mesh(devices: Sequence[jax.Device] | None = None) -> Mesh:
    """A one-axis ``Mesh`` named ``"batch"`` over ``devices`` (default: all devices).

    Args:
        devices: the devices of the mesh, in order (default ``jax.devices()``).

    Returns:
        ``jax.sharding.Mesh`` with the single axis ``"batch"``, as `shard_batch` and
        `sharded_vmap` use it.

    Raises:
        ValueError: ``devices`` is empty.

    Example:
        >>> mesh = jaxwarp.batch_mesh(jax.devices()[:1])
        >>> mesh.axis_names, mesh.size
        (('batch',), 1)
    """
    devices = list(jax.devices() if devices is None else devices)
    if not devices:
        raise ValueError("batch_mesh needs at least one device")
    return Mesh(np.asarray(devices, dtype=object), (BATCH_AXIS,))


def _normalize_in_axes(in_axes: Any, nargs: int) -> tuple[int | None, ...]:
    axes = in_axes if isinstance(in_axes, (tuple, list)) else (in_axes,) * nargs
    if len(axes) != nargs:
        raise ValueError(f"in_axes has {len(axes)} entries for {nargs} positional arguments")
    for ax in axes:
        if isinstance(ax, (bool, np.bool_)) or ax not in (0, None):
            raise ValueError(
                f"sharded_vmap maps the leading axis only: in_axes entries must be 0 or None, "
                f"got {in_axes!r}"
            )
    return tuple(axes)


def _positional(fn: Callable[..., Any], args: tuple, kwargs: dict) -> tuple:
    """Keyword arguments of ``fn`` turned positional (``in_axes`` counts positions)."""
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
    except (TypeError, ValueError) as e:
        raise TypeError(f"sharded_vmap: cannot bind keyword arguments {sorted(kwargs)} to "
                        f"fn: {e}; pass the arguments positionally") from None
    if bound.kwargs:  # keyword-only and **kwargs parameters have no position for in_axes
        names = sorted(k for k in kwargs if k not in bound.arguments or k in bound.kwargs)
        raise TypeError(f"sharded_vmap: keyword-only arguments {names} are not supported "
                        f"(fn takes them as keyword-only or **kwargs parameters, and in_axes "
                        f"counts positional arguments); bind them with functools.partial "
                        f"before sharded_vmap")
    return tuple(bound.args)


def _pad_leading(x: Any, pad: int) -> Any:
    """Pads the leading axis by repeating the last item ``pad`` times (edge padding).

    Repeating a real item (rather than zeros) keeps the padded lanes inside the
    function's domain, so they cannot raise or slow down anything; they are
    dropped afterwards.
    """
    if pad == 0:
        return x
    x = jnp.asarray(x) if not isinstance(x, (np.ndarray, jax.Array)) else x
    xp = np if isinstance(x, np.ndarray) else jnp
    tail = xp.repeat(x[-1:], pad, axis=0)
    return xp.concatenate([x, tail], axis=0)


def _checked_leaves(tree: Any, name: str) -> Any:
    """Every leaf of ``tree`` through `checks.array_arg`, named by its path in the tree
    (``x``, ``x['key']``, ``x[0]``): the 64-bit policy before anything is placed. NumPy
    leaves stay NumPy arrays (they are placed by ``jax.device_put``)."""
    def leaf(path, x):
        where = name + jax.tree_util.keystr(path)
        if isinstance(x, np.ndarray):
            checks.check_64bit(x, where)
            return x
        return checks.array_arg(x, where)
    return jax.tree_util.tree_map_with_path(leaf, tree)


def shard_batch(tree: Any, mesh: Mesh | None = None) -> tuple[Any, int]:
    """Pads the leading axis of every leaf to a multiple of the mesh size and shards it.

    Args:
        tree: a pytree of arrays (NumPy or JAX) sharing the leading batch size n.
        mesh: the mesh from ``batch_mesh`` (default: all devices).

    Returns:
        ``(sharded_tree, n)``: leaves of leading size ``ceil(n / d) * d`` placed
        with ``NamedSharding(mesh, P("batch"))``, and the original n.

    Raises:
        ValueError: leaves disagree on the leading size, or a leaf is a scalar.

    Example:
        On a mesh of one device nothing is padded; on d devices the leading size
        becomes the next multiple of d:

        >>> mesh = jaxwarp.batch_mesh(jax.devices()[:1])
        >>> tree, n = jaxwarp.shard_batch({"x": np.zeros((3, 2), np.float32)}, mesh)
        >>> n, tree["x"].shape, tree["x"].sharding.spec == jax.sharding.PartitionSpec("batch")
        (3, (3, 2), True)
    """
    mesh = batch_mesh() if mesh is None else mesh
    tree = _checked_leaves(tree, "tree")
    leaves = jax.tree_util.tree_leaves(tree)
    sizes = {np.shape(x)[0] if np.ndim(x) else None for x in leaves}
    if None in sizes:
        raise ValueError("shard_batch: every leaf needs a leading batch axis; got a scalar")
    if len(sizes) != 1:
        raise ValueError(f"shard_batch: leaves have different leading sizes {sorted(sizes)}")
    (n,) = sizes
    pad = -n % mesh.size
    sharding = NamedSharding(mesh, P(BATCH_AXIS))
    return jax.tree_util.tree_map(lambda x: jax.device_put(_pad_leading(x, pad), sharding),
                                  tree), n


def _arg_name(fn: Callable[..., Any], i: int) -> str:
    """The name of ``fn``'s positional parameter ``i`` (for error messages)."""
    try:
        params = [p for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    return params[i].name if i < len(params) else f"argument {i}"


def sharded_vmap(
    fn: Callable[..., Any],
    in_axes: int | None | Sequence[int | None] = 0,
    *,
    devices: Sequence[jax.Device] | None = None,
) -> Callable[..., Any]:
    """``jax.vmap(fn)`` over the leading axis, that axis sharded over all devices.

    Args:
        fn: a function of one batch item (one warp's (32, ...) lanes, one matrix,
            one random key...). It is traced once per input shape, as under ``jit``.
        in_axes: per positional argument, ``0`` (mapped over its leading axis) or
            ``None`` (the same for every item, replicated on each device); a single
            value applies to all arguments. Arguments may be pytrees.
        devices: the devices to use (default ``jax.devices()``, every device of
            the default backend).

    Returns:
        A function of the batched arguments returning ``fn``'s outputs stacked
        along a new leading axis of the batch size n. When n is a multiple of the
        device count the outputs stay sharded over the devices
        (``NamedSharding(mesh, P("batch"))``); otherwise the batch is padded (the
        last item repeated), and the padding is sliced off the results, which
        XLA may then lay out differently. The function has a ``mesh`` attribute.

        Keyword arguments of the returned function are bound to ``fn``'s
        parameters and then count as positional ones for ``in_axes``.

    Raises:
        ValueError: ``in_axes`` names an axis other than 0 or None, or the mapped
            arguments disagree on the batch size.
        TypeError: ``fn`` is not callable; keyword arguments that do not bind to
            ``fn``'s positional parameters.

    Example:
        >>> f = sharded_vmap(lambda x: jaxwarp.reduce_add_sync(0xFFFFFFFF, x))
        >>> f(jnp.ones((10, 32), jnp.uint32))[:, 0]
        Array([32, 32, 32, 32, 32, 32, 32, 32, 32, 32], dtype=uint32)
    """
    mesh = batch_mesh(devices)
    batched = NamedSharding(mesh, P(BATCH_AXIS))
    replicated = NamedSharding(mesh, P())

    @functools.cache
    def compiled(axes: tuple[int | None, ...]):
        return jax.jit(jax.vmap(fn, in_axes=axes), out_shardings=batched)

    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__} {fn!r}")

    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        if kwargs:
            args = _positional(fn, args, kwargs)
        axes = _normalize_in_axes(in_axes, len(args))
        args = [_checked_leaves(a, _arg_name(fn, i)) for i, a in enumerate(args)]
        mapped = [a for a, ax in zip(args, axes, strict=True) if ax == 0]
        if not mapped:
            raise ValueError("sharded_vmap: no argument is mapped (all in_axes are None)")
        placed, n = shard_batch(mapped, mesh)
        it = iter(placed)
        args = [
            next(it) if ax == 0 else jax.device_put(a, replicated)
            for a, ax in zip(args, axes, strict=True)
        ]
        out = compiled(axes)(*args)
        if -n % mesh.size:
            out = jax.tree_util.tree_map(lambda x: x[:n], out)
        return out

    wrapped.mesh = mesh  # type: ignore[attr-defined]
    return wrapped
