"""The f64 mma: a chain of IEEE fused multiply-adds in k order, rounded to nearest even
(the model: ``datapath.py``'s docstring).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from jaxwarp._src.numerics import fma

# --------------------------------------------------------------------------------------
# fp64: IEEE fma chain. Native float64 operations (fma.fma64_native) where they are
# exact for every element of the call, else the 128-bit integer emulation (fma.fma64).

_U64 = jnp.uint64


def _f64_chain_soft(a, b, c):
    ab = lax.bitcast_convert_type(a, _U64)
    bb = lax.bitcast_convert_type(b, _U64)
    acc = lax.bitcast_convert_type(c, _U64)
    for kk in range(a.shape[-1]):
        acc = fma.fma64(ab[..., :, kk:kk + 1], bb[..., kk:kk + 1, :], acc)
    return lax.bitcast_convert_type(acc, jnp.float64)


def _f64_chain_native(a, b, c):
    """The chain in native float64 operations, and whether every element was in the range
    where they are exact (fma.native_*_ok): a result leaving it becomes NaN."""
    ok = (jnp.all(fma.native_operand_ok(a)) & jnp.all(fma.native_operand_ok(b))
          & jnp.all(fma.native_acc_ok(c)))
    acc = c
    for kk in range(a.shape[-1]):
        d = fma.fma64_native(a[..., :, kk:kk + 1], b[..., kk:kk + 1, :], acc)
        acc = jnp.where(fma.native_result_ok(d), d, jnp.nan)
    # Stored once, so that the check reads it instead of recomputing the chain.
    acc = lax.optimization_barrier(acc)
    return acc, ok & ~jnp.any(jnp.isnan(acc))


def _vmap_as_batch(fn):
    """``fn`` over (..., rows, cols) operands whose leading dims broadcast, with a vmap
    rule that makes the mapped axis one more leading batch dim of the same call: a
    whole-call ``lax.cond`` inside stays one branch instead of becoming a select that
    computes both branches."""
    f = jax.custom_batching.custom_vmap(fn)

    @f.def_vmap
    def rule(axis_size, in_batched, *args):
        del axis_size
        nd = max(x.ndim - 2 - int(bt) for x, bt in zip(args, in_batched, strict=True))
        lifted = []
        for x, bt in zip(args, in_batched, strict=True):
            lead, rest = (x.shape[:1], x.shape[1:]) if bt else ((1,), x.shape)
            lifted.append(x.reshape(*lead, *(1,) * (nd - (len(rest) - 2)), *rest))
        return f(*lifted), True

    return f


@_vmap_as_batch
@jax.jit
def mma_f64_exact(a, b, c):
    # One branch for the whole call (and, through _vmap_as_batch, for a vmapped call):
    # where any element leaves the native range, every element takes the integer
    # emulation.
    acc, ok = _f64_chain_native(a, b, c)
    return lax.cond(ok, lambda: acc, lambda: _f64_chain_soft(a, b, c))
