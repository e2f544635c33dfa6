"""Integer mma and ``bmma`` (the model: ``datapath.py``'s docstring).

s8 / u8 / s4 / u4 products are added exactly to C modulo 2**32, or with ``satf`` each
instruction's exact ``A @ B + C`` is clamped to the int32 range; ``bmma`` (b1) adds
``popc(a_row op b_col)`` to C modulo 2**32.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax

from jaxwarp._src import checks
from jaxwarp._src.arithmetic.datapath_checks import BMMA_OPS, check_array, check_shapes
from jaxwarp._src.numerics import bitops

# --------------------------------------------------------------------------------------
# Integer mma and bmma.


def _sat_add_i32(x, y):
    """Saturating int32 x + y without 64-bit types."""
    s = (x.astype(jnp.uint32) + y.astype(jnp.uint32)).astype(jnp.int32)
    ovf = ((x >= 0) == (y >= 0)) & ((s >= 0) != (x >= 0))
    return jnp.where(ovf, jnp.where(x >= 0, jnp.int32(2**31 - 1), jnp.int32(-(2**31))), s)


def _mma_int(a, b, c, satf):
    # |sum of k products| <= k * 255 * 255 fits int32 for every WMMA shape (k <= 32).
    prod = lax.dot_general(a.astype(jnp.int32), b.astype(jnp.int32),
                           (((a.ndim - 1,), (b.ndim - 2,)), ((), ())),
                           preferred_element_type=jnp.int32) if a.ndim == 2 else \
        jnp.einsum("...mk,...kn->...mn", a.astype(jnp.int32), b.astype(jnp.int32),
                   preferred_element_type=jnp.int32)
    if satf:
        return _sat_add_i32(prod, c)
    return (prod.astype(jnp.uint32) + c.astype(jnp.uint32)).astype(jnp.int32)


def mma_int_chain(a, b, c, a_format: str, b_format: str, ik: int, satf: bool):
    """Integer mma over k: one sum where it wraps modulo 2**32 (associative), else a chain
    of instructions of k ``ik``, each saturating."""
    if a_format in ("s4", "u4"):
        # 4-bit elements: only the low 4 bits exist (the fragment path packs them so),
        # s4 sign-extended from bit 3, as the tensor core reads them.
        a = _low_nibble(a, a_format == "s4")
    if b_format in ("s4", "u4"):
        b = _low_nibble(b, b_format == "s4")
    k = a.shape[-1]
    if not satf or k == ik:  # wrapping modulo 2**32 is associative
        return _mma_int(a, b, c, satf)
    d = c
    for i0 in range(0, k, ik):  # each instruction saturates
        d = _mma_int(a[..., i0:i0 + ik], b[..., i0:i0 + ik, :], d, satf)
    return d


def _low_nibble(x: jax.Array, signed: bool) -> jax.Array:
    v = bitops.sext(x, 4) if signed else x.astype(jnp.int32) & 0xF
    return v.astype(x.dtype)


def bmma(a, b, c, *, op: str) -> jax.Array:
    """Single-bit ``bmma_sync`` with POPC accumulation: ``d = c + popc(a_row op b_col)``.

    Args:
      a: (..., m, k) uint8 of 0/1 bits. b: (..., k, n) uint8 0/1. c: (..., m, n) int32.
      op: ``"xor"`` (bmmaBitOpXOR) or ``"and"`` (bmmaBitOpAND).

    Returns:
      (..., m, n) int32, wrapping modulo 2**32.

    Example:
      >>> import jax.numpy as jnp
      >>> a = jnp.ones((8, 128), jnp.uint8); b = jnp.zeros((128, 8), jnp.uint8)
      >>> int(bmma(a, b, jnp.zeros((8, 8), jnp.int32), op="xor")[0, 0])
      128
    """
    a, b, c = checks.array_args(a=a, b=b, c=c)
    checks.static_choice(op, "op", BMMA_OPS)
    a = check_array(a, "a", jnp.dtype(jnp.uint8))
    b = check_array(b, "b", jnp.dtype(jnp.uint8))
    c = check_array(c, "c", jnp.dtype(jnp.int32))
    check_shapes(a, b, c)
    ai = (a & 1).astype(jnp.int32)
    bi = (b & 1).astype(jnp.int32)
    dot = functools.partial(jnp.einsum, "...mk,...kn->...mn", preferred_element_type=jnp.int32)
    if op == "and":
        cnt = dot(ai, bi)
    else:  # a xor b = a + b - 2ab
        cnt = (ai.sum(-1, dtype=jnp.int32)[..., :, None]
               + bi.sum(-2, dtype=jnp.int32)[..., None, :] - 2 * dot(ai, bi))
    return (cnt.astype(jnp.uint32) + c.astype(jnp.uint32)).astype(jnp.int32)
