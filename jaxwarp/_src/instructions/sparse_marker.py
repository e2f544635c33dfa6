"""``as_2_4``: marks a 2:4 operand so that ``jaxwarp.emulate`` runs its products on the
sparse tensor cores.

Outside ``emulate`` the marker is the identity (its gradient is zero where the operand is
pruned: a 2:4 weight's zeros are not variables). ``emulate``'s interpreter recognises the
primitive :data:`as_2_4_p` where its output is an operand of a ``dot_general`` that
contracts it along the marked axis and runs that product as ``matmul(...,
sparsity="2:4")`` with the marked operand as the sparse A (a right-hand operand by
``D^T = W^T X^T``). Products that contract it along another axis (the backward product
``dX = dD @ W^T``) stay dense, as in ``matmul``'s own gradient.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir

from jaxwarp._src import checks
from jaxwarp._src.instructions import sparse
from jaxwarp._src.warp import checked

__all__ = ["as_2_4", "as_2_4_p", "GROUP"]

#: Elements of a 2:4 group along the marked axis.
GROUP = 4


def _kept(x, axis):
    return jnp.moveaxis(sparse.kept(jnp.moveaxis(x, axis, -1), GROUP), -1, axis)


def _identity(x, *, axis):
    del axis
    return x


as_2_4_p = Primitive("jaxwarp_as_2_4")
as_2_4_p.def_impl(_identity)
as_2_4_p.def_abstract_eval(lambda x, *, axis: x)
mlir.register_lowering(as_2_4_p, mlir.lower_fun(_identity, multiple_results=False))


def _jvp(primals, tangents, *, axis):
    # The pruned elements are zeros by contract, not variables: no gradient reaches them
    # (what matmul(..., sparsity="2:4") gives its A).
    (x,), (t,) = primals, tangents
    y = as_2_4_p.bind(x, axis=axis)
    if type(t) is ad.Zero:
        return y, t
    return y, jnp.where(_kept(x, axis), t, jnp.zeros_like(t))


ad.primitive_jvps[as_2_4_p] = _jvp


def _batch(args, dims, *, axis):
    (x,), (d,) = args, dims
    if d is None:  # not mapped
        return as_2_4_p.bind(x, axis=axis), d
    return as_2_4_p.bind(x, axis=axis + (d <= axis)), d


batching.primitive_batchers[as_2_4_p] = _batch


def as_2_4(w: Any, *, axis: int = 0) -> jax.Array:
    """Marks ``w`` as 2:4 sparse along ``axis``: ``jaxwarp.emulate`` runs the products
    that contract it along ``axis`` on the sparse tensor cores (``mma.sp`` /
    ``wgmma.mma_async.sp``, ``matmul(..., sparsity="2:4")``); anywhere else it is the
    identity.

    Args:
      w: a float array that is 2:4 along ``axis`` (at most 2 non-zeros in every 4
        consecutive elements; ``prune_2_4`` makes one). Concrete values are checked here;
        traced ones in checked mode (``jaxwarp.checked``). tf32 products need 1:2
        (``prune_2_4(w, group=2)``); emulate checks it in checked mode.
      axis: the axis the groups of 4 run along, the contracted one of the products to
        sparsify: 0 for a (K, N) weight of ``x @ w`` (default), -1 for a (N, K) one of
        ``x @ w.T`` (mark ``w`` before transposing: ``x @ as_2_4(w, axis=-1).T`` is not
        followed through the transpose; ``as_2_4(w.T, axis=0)`` is).

    Returns:
      ``w`` unchanged. Its gradient is zero at the pruned positions (the elements
      ``prune_2_4`` would drop), the incoming gradient elsewhere.

    Raises:
      ValueError: ``axis`` is not an axis of ``w``, its length is not a multiple of 4, or
        a concrete ``w`` is not 2:4 along it.

    Example:
      >>> import jax.numpy as jnp, jaxwarp
      >>> w = jaxwarp.sparse.prune_2_4(jnp.ones((4, 8))).T   # (K, N) = (8, 4), 2:4 along K
      >>> f = lambda x, w: x @ jaxwarp.sparse.as_2_4(w)
      >>> jaxwarp.emulate(f, operand_format="bf16", instruction="mma_sync")(jnp.ones((2, 8)), w)
      Array([[4., 4., 4., 4.],
             [4., 4., 4., 4.]], dtype=float32)
    """
    w = checks.array_arg(w, "w")
    axis = checks.static_int(axis, "axis")
    if not -w.ndim <= axis < w.ndim:
        raise ValueError(f"axis={axis} is not an axis of w (shape {tuple(w.shape)})")
    axis %= w.ndim
    if not jnp.issubdtype(w.dtype, jnp.floating):
        raise TypeError(f"w must be a float array (a weight of a float product), got "
                        f"{w.dtype}")
    if w.shape[axis] % GROUP:
        raise ValueError(f"w's axis {axis} (length {w.shape[axis]}) must be a multiple of "
                         f"{GROUP}: groups of {GROUP} run along it")
    groups = jnp.moveaxis(w, axis, -1).reshape(w.shape[:axis] + w.shape[axis + 1:]
                                               + (-1, GROUP)) != 0
    if not isinstance(w, jax.core.Tracer):
        nz = np.asarray(groups).sum(-1)
        if (nz > GROUP // 2).any():
            raise ValueError(f"w is not 2:4 sparse along axis {axis}: {int((nz > 2).sum())} "
                             f"groups of {GROUP} have more than {GROUP // 2} non-zeros "
                             f"(jaxwarp.sparse.prune_2_4 prunes by magnitude)")
    checked.check(jnp.all(jnp.sum(groups, axis=-1) <= GROUP // 2),
                  f"w is not 2:4 sparse along axis {axis}")
    return as_2_4_p.bind(w, axis=axis)
