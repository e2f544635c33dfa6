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

``grouped_value_and_grad(loss, groups)`` is data-parallel training that keeps
the bits: XLA's own data parallelism (the batch sharded, the loss's batch mean
and the weight gradients' sums split into per-device partial sums and an
all-reduce) adds in an order that depends on the device count, so a step on 4
devices differs from one device in the last bits. Here the batch is cut into a
fixed number of groups; each group's loss and gradient is computed on one
device (the groups sharded like ``sharded_vmap``'s batch), and the group
results are gathered and added in group order on every device::

    batch of n ──► groups g0 g1 ... g(G-1)   (G fixed, n / G examples each)
                   [dev 0: g0 g1 | dev 1: g2 g3 | ...]   value_and_grad per group
    ((g0 + g1) + g2) + ... + g(G-1), / G     (gathered, the same order on every device)

so the step is the same for every device count that divides G. On GPUs that
holds with XLA's deterministic settings (``deterministic_xla``): without them an
embedding's gradient (a scatter-add) is summed with atomics in a different order
on every run, and the autotuner may give each compile another GEMM kernel. Tensor
parallelism needs nothing of jaxwarp: a product whose operand is sharded along
M (rows of ``a``) or N (columns of ``b``) computes every output element on one
device, and ``emulate`` keeps sharded inputs and ``with_sharding_constraint``.
"""

from __future__ import annotations

import concurrent.futures
import functools
import inspect
import os
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxwarp._src import checks
from jaxwarp._src.gemm import k_loop

BATCH_AXIS = "batch"

#: XLA flags that make a GPU program give the same bits on every run and every
#: compile: scatter-adds without atomics (and XLA's other deterministic kernels),
#: and no autotuning (each GEMM keeps XLA's default kernel). Harmless on a CPU.
DETERMINISTIC_XLA_FLAGS = ("--xla_gpu_deterministic_ops=true", "--xla_gpu_autotune_level=0")


def deterministic_xla() -> str:
    """Adds XLA's deterministic-GPU flags to ``XLA_FLAGS``; call it before JAX starts a backend.

    On a GPU, two runs of the same jitted training step can differ in the last
    bits: the gradient of an embedding lookup is a scatter-add that XLA sums with
    atomics (in whatever order the threads arrive), and XLA's autotuner times
    several GEMM kernels per compile and keeps the fastest, so the 1-device and the
    4-device programs may get different kernels for a plain (not emulated)
    ``dot``. ``DETERMINISTIC_XLA_FLAGS`` turns both off. jaxwarp's own arithmetic
    (exact mode) needs neither; the rest of a model (embedding gradients, fast
    mode's ``dot``) does, for ``grouped_value_and_grad`` to give the same bits on
    any device count and for a rerun to repeat a run. XLA reads ``XLA_FLAGS`` once,
    when the first backend starts (the first ``jax.devices()`` or computation), so
    this must come before that; the studies' ``--devices`` option calls it. From a
    shell: ``XLA_FLAGS="--xla_gpu_deterministic_ops=true --xla_gpu_autotune_level=0"``.

    Returns:
        The new ``XLA_FLAGS`` value (flags already there are not repeated).

    Raises:
        RuntimeError: a backend has already started and ``XLA_FLAGS`` lacks a flag
            (too late for it to take effect).

    Example:
        >>> import os
        >>> os.environ.get("XLA_FLAGS", "").count("--xla_gpu_autotune_level=0") <= 1
        True
        >>> "--xla_gpu_deterministic_ops=true" in jaxwarp.DETERMINISTIC_XLA_FLAGS
        True
    """
    from jax._src import xla_bridge

    have = os.environ.get("XLA_FLAGS", "").split()
    missing = [f for f in DETERMINISTIC_XLA_FLAGS if f not in have]
    if not missing:
        return " ".join(have)
    if xla_bridge.backends_are_initialized():
        raise RuntimeError(
            f"deterministic_xla(): JAX has already started a backend, so XLA_FLAGS can no "
            f"longer change; call it before the first jax.devices() or computation, or "
            f"set XLA_FLAGS={' '.join(have + missing)!r} in the environment (missing: "
            f"{' '.join(missing)})")
    os.environ["XLA_FLAGS"] = " ".join(have + missing)
    return os.environ["XLA_FLAGS"]


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


def _fixed_order_mean(x: jax.Array) -> jax.Array:
    """``(x[0] + x[1] + ... + x[G-1]) / G`` added left to right, whatever the devices."""
    acc = x[0]
    for i in range(1, x.shape[0]):
        acc = acc + x[i]
    return acc / jnp.asarray(x.shape[0], acc.dtype)


def _group_size(x: Any, where: str, groups: int) -> int:
    """The examples per group of the batch leaf ``x`` (named ``where``), or raises: a
    scalar has no batch axis, and the batch size must be a multiple of ``groups``."""
    if not np.ndim(x):
        what = (x.aval.str_short() if isinstance(x, jax.core.Tracer)
                else f"{type(x).__name__} {x!r}")
        raise ValueError(f"grouped_value_and_grad: {where} is a scalar ({what}) with no "
                         f"leading (batch) axis; every batch leaf needs one whose size is a "
                         f"multiple of groups={groups}")
    n = np.shape(x)[0]
    if n % groups:
        raise ValueError(f"grouped_value_and_grad: {where} has leading (batch) size "
                         f"{n}; it must be a multiple of groups={groups}")
    return n // groups


def _inline(loss: Callable[..., jax.Array]) -> Callable[..., jax.Array]:
    """``loss`` with its exact products traced inline (``k_loop.inline``): the
    per-group program must be the same on every number of devices, and the CPU's shared
    executables are for one device only."""
    @functools.wraps(loss)
    def traced_inline(*args):
        with k_loop.inline():
            return loss(*args)

    return traced_inline


def _per_device_value_and_grad(loss: Callable[..., jax.Array], groups: int,
                               mesh: Mesh) -> Callable[..., tuple[jax.Array, Any]]:
    """``grouped_value_and_grad(..., dispatch="per_device")``: see there."""
    devices = list(mesh.devices.flat)
    one_group = jax.jit(jax.value_and_grad(_inline(loss)))
    average = jax.jit(lambda outs: jax.tree_util.tree_map(
        lambda *xs: _fixed_order_mean(jnp.stack(xs)), *outs))

    def f(params, *batch):
        if not batch:
            raise ValueError("grouped_value_and_grad: no batch argument after params")
        if any(isinstance(x, jax.core.Tracer)
               for x in jax.tree_util.tree_leaves((params, batch))):
            raise TypeError("grouped_value_and_grad(..., dispatch='per_device') runs compiled "
                            "programs from Python and cannot be traced (jit, grad, vmap): "
                            "call it outside jax.jit and jit the update, or use "
                            "dispatch='spmd'")

        n = jax.tree_util.tree_leaves(jax.tree_util.tree_map_with_path(
            lambda path, x: _group_size(x, "batch" + jax.tree_util.keystr(path), groups),
            batch))[0]
        on = [jax.device_put(params, d) for d in devices]

        def run(k):
            # Device k's groups k, k + d, ...; one thread per device, so that the first
            # call compiles the program for every device at once.
            res = []
            for i in range(k, groups, len(devices)):
                group = jax.tree_util.tree_map(
                    lambda x, lo=i * n: jax.device_put(x[lo:lo + n], devices[k]), batch)
                res.append(one_group(on[k], *group))
            return res

        if len(devices) == 1:
            per_device = [run(0)]
        else:
            with concurrent.futures.ThreadPoolExecutor(len(devices)) as pool:
                per_device = list(pool.map(run, range(len(devices))))
        outs = [per_device[i % len(devices)][i // len(devices)] for i in range(groups)]
        return average(jax.device_put(outs, devices[0]))

    return f


def grouped_value_and_grad(
    loss: Callable[..., jax.Array],
    groups: int,
    *,
    mesh: Mesh | None = None,
    dispatch: str = "spmd",
) -> Callable[..., tuple[jax.Array, Any]]:
    """``jax.value_and_grad`` of a batch-mean loss, data-parallel and the same bits on any mesh.

    The batch (the leading axis of every argument after the first) is cut into
    ``groups`` equal groups of consecutive examples; ``loss(params, *group)`` and its
    gradient are computed per group, the groups sharded over ``mesh``'s ``"batch"``
    axis (each group on one device), and the ``groups`` values and gradients are
    gathered and averaged in group order, the same additions on every device. The
    result therefore does not depend on the number of devices (any divisor of
    ``groups``): 1, 2 or 4 devices give the same bits, as long as each device computes
    a group as one device does (tested on CPU devices and on H100s). It is the
    mean of the groups' means, which for equal groups is the batch mean up to
    rounding, but not bit for bit ``jax.value_and_grad(loss)`` of the whole batch.
    On GPUs, call ``deterministic_xla()`` before JAX starts (or set its flags):
    a model's embedding gradients and fast mode's plain ``dot`` are otherwise not
    repeatable from one compile or run to the next.

    Use it inside a jitted training step (it works eagerly too); wrap ``loss`` in
    ``jaxwarp.emulate`` first to run every product of the forward and backward
    pass on the emulated tensor core.

    Args:
        loss: ``loss(params, *batch) -> scalar``, the mean over the examples of
            ``batch`` (pytrees of arrays sharing the leading batch size).
        groups: the number of groups G, an int >= 1; the batch size must be a
            multiple of G, and G a multiple of the mesh size.
        mesh: the mesh from ``batch_mesh`` (default: all devices).
        dispatch: ``"spmd"`` (default): one program over the mesh (``shard_map``),
            usable inside ``jax.jit``; its bits equal across device counts where XLA
            compiles the per-group work of a 1-device and a d-device module alike
            (the CPU backend). ``"per_device"``: one single-device program (jitted
            ``value_and_grad`` of one group), compiled once per device and run for
            group i on device i mod d, dispatched from Python (one thread per
            device), then the results moved to the mesh's first device and averaged
            there in group order. Every device count runs the very same program, so
            the bits are equal on GPUs too (with ``deterministic_xla``); it cannot be
            traced (call it outside ``jit`` and jit the update).

    Returns:
        ``f(params, *batch) -> (value, grads)``, grads shaped like ``params``,
        replicated over the mesh (``"per_device"``: on the mesh's first device).

    Raises:
        TypeError: ``groups`` is not an int (a bool or a float, say) or ``loss`` is
            not callable; (when called, ``"per_device"``) traced arguments.
        ValueError: ``groups`` is < 1 or not a multiple of the mesh size; (when
            called) no batch argument, a scalar in the batch, or a batch size that is
            not a multiple of ``groups``.

    Example:
        >>> loss = lambda w, x, y: jnp.mean((x @ w - y) ** 2)
        >>> f = jaxwarp.grouped_value_and_grad(loss, 4,
        ...                                    mesh=jaxwarp.batch_mesh(jax.devices()[:1]))
        >>> x = jnp.ones((8, 3), jnp.float32); y = jnp.zeros((8,), jnp.float32)
        >>> value, grad = jax.jit(f)(jnp.ones(3, jnp.float32), x, y)
        >>> float(value), grad.tolist()
        (9.0, [6.0, 6.0, 6.0])
    """
    groups = checks.static_int(groups, "groups")
    if groups < 1:
        raise ValueError(f"groups must be an int >= 1, got {groups}")
    mesh = batch_mesh() if mesh is None else mesh
    if (not isinstance(mesh, (Mesh, jax.sharding.AbstractMesh))
            or BATCH_AXIS not in mesh.axis_names):
        raise TypeError(f"mesh must be None or a jax.sharding.Mesh with a {BATCH_AXIS!r} "
                        f"axis (jaxwarp.batch_mesh(devices)), got {type(mesh).__name__} "
                        f"{mesh!r}")
    if groups % mesh.size:
        raise ValueError(f"groups must be a multiple of the mesh size {mesh.size} (each "
                         f"device computes whole groups), got groups={groups}")
    if not callable(loss):
        raise TypeError(f"loss must be callable, got {type(loss).__name__} {loss!r}")
    if dispatch not in ("spmd", "per_device"):
        raise ValueError(f"dispatch must be 'spmd' or 'per_device', got {dispatch!r}")
    if dispatch == "per_device":
        return _positional_batch(_per_device_value_and_grad(loss, groups, mesh))
    replicated = NamedSharding(mesh, P())
    value_and_grad = jax.value_and_grad(_inline(loss))

    def split(x, where):
        n = _group_size(x, where, groups)
        return jnp.reshape(x, (groups, n, *np.shape(x)[1:]))

    def on_one_device(params, batch):
        # This device's groups one after the other (lax.map, not vmap): each group runs
        # the same compiled program whatever the number of groups per device, so even
        # XLA's choice of dot kernel (which can depend on a vmapped batch size) is fixed.
        return lax.map(lambda b: value_and_grad(params, *b), batch)

    def f(params, *batch):
        if not batch:
            raise ValueError("grouped_value_and_grad: no batch argument after params")
        batch = jax.tree_util.tree_map_with_path(
            lambda path, x: split(x, "batch" + jax.tree_util.keystr(path)), batch)
        values, grads = jax.shard_map(
            on_one_device, mesh=mesh, in_specs=(P(), P(BATCH_AXIS)),
            out_specs=P(BATCH_AXIS),
            # emulate's matmul starts from zero accumulators that are not marked as
            # varying over the mesh; the values are unaffected.
            check_vma=False)(params, batch)
        values, grads = lax.with_sharding_constraint((values, grads), replicated)
        return _fixed_order_mean(values), jax.tree_util.tree_map(_fixed_order_mean, grads)

    return _positional_batch(f)


def _positional_batch(f: Callable[..., Any]) -> Callable[..., Any]:
    """``f(params, *batch)`` that names the rule when the batch comes as keywords."""

    @functools.wraps(f)
    def wrapper(params, *batch, **kwargs):
        if kwargs:
            raise TypeError(f"grouped_value_and_grad's function takes the batch as "
                            f"positional arguments after params, f(params, x, y), each "
                            f"split into groups along its axis 0; got keyword argument(s) "
                            f"{sorted(kwargs)}")
        return f(params, *batch)

    return wrapper
