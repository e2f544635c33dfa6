"""Bit-level helpers shared by the numerics and tensor-core modules.

Views between values and their raw bits (``uint_view``, ``as_bits``, ``from_bits``,
``to_u32``, ``from_u32``), gathers that keep every bit (``take_bits``: XLA's CPU gather
canonicalises bfloat16 NaNs, so values are moved as unsigned integers), sign extension of
narrow fields (``sext``) and masks (``low_mask``, ``TF32_MASK``, ``tf32_keep``).

None of these check their arguments: they are internal building blocks, called with
arrays whose dtypes the public functions have already checked.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

__all__ = [
    "TF32_MASK",
    "as_bits",
    "from_bits",
    "from_u32",
    "low_mask",
    "sext",
    "take_bits",
    "tf32_keep",
    "to_u32",
    "uint_dtype",
    "uint_view",
]

_UINTS = {8: np.dtype(np.uint8), 16: np.dtype(np.uint16), 32: np.dtype(np.uint32),
          64: np.dtype(np.uint64)}

#: The bits of a float32 word that a tf32 operand keeps (the tensor core ignores the low 13).
TF32_MASK = 0xFFFFE000


def uint_dtype(nbits: int) -> np.dtype:
    """The unsigned integer dtype of ``nbits`` (8, 16, 32 or 64) bits.

    Example:
      >>> uint_dtype(16)
      dtype('uint16')
    """
    try:
        return _UINTS[nbits]
    except KeyError:
        raise ValueError(f"nbits must be one of {tuple(_UINTS)}, got {nbits!r}") from None


def low_mask(nbits: int) -> int:
    """``2**nbits - 1``: the mask of the low ``nbits`` bits (a Python int).

    Example:
      >>> hex(low_mask(13))
      '0x1fff'
    """
    return (1 << nbits) - 1


def uint_view(x: jax.Array) -> jax.Array:
    """The raw bits of ``x`` (any 8/16/32/64-bit dtype) as the unsigned type of its width.

    Example:
      >>> import jax.numpy as jnp
      >>> uint_view(jnp.float16(1.0))
      Array(15360, dtype=uint16)
    """
    want = uint_dtype(x.dtype.itemsize * 8)
    return x if x.dtype == want else lax.bitcast_convert_type(x, want)


def as_bits(x: jax.Array) -> jax.Array:
    """Floats as same-width unsigned ints (other dtypes unchanged), so that gathers and
    scatters keep NaN payloads bit for bit.

    Example:
      >>> import jax.numpy as jnp
      >>> as_bits(jnp.array([1.0], jnp.bfloat16)), as_bits(jnp.int8(-1))
      (Array([16256], dtype=uint16), Array(-1, dtype=int8))
    """
    return uint_view(x) if jnp.issubdtype(x.dtype, jnp.floating) else x


def from_bits(x: jax.Array, dtype: Any) -> jax.Array:
    """The inverse of :func:`as_bits`: ``x`` reinterpreted as ``dtype`` (same width).

    Example:
      >>> import jax.numpy as jnp
      >>> from_bits(jnp.uint16(0x3C00), jnp.float16)
      Array(1., dtype=float16)
    """
    dtype = np.dtype(dtype)
    return lax.bitcast_convert_type(x, dtype) if x.dtype != dtype else x


def take_bits(x: jax.Array, indices: Any, axis: int = -1) -> jax.Array:
    """``jnp.take`` of constant in-bounds indices that keeps every bit (NaN payloads too).

    Example:
      >>> import jax.numpy as jnp
      >>> take_bits(jnp.array([1.0, 2.0, 3.0], jnp.float32), jnp.array([2, 0]))
      Array([3., 1.], dtype=float32)
    """
    return from_bits(jnp.take(as_bits(x), indices, axis=axis, mode="clip"), x.dtype)


def to_u32(x: jax.Array) -> jax.Array:
    """The raw bits of ``x`` (an 8/16/32-bit dtype) zero-extended to uint32.

    Example:
      >>> import jax.numpy as jnp
      >>> hex(int(to_u32(jnp.float16(-2.0))))
      '0xc000'
    """
    return uint_view(x).astype(jnp.uint32)


def from_u32(u: jax.Array, dtype: Any) -> jax.Array:
    """The low bits of the uint32 ``u`` as a ``dtype`` (8, 16 or 32 bits) value.

    Example:
      >>> import jax.numpy as jnp
      >>> from_u32(jnp.uint32(0x3C00), jnp.float16)
      Array(1., dtype=float16)
    """
    dtype = np.dtype(dtype)
    return from_bits(u.astype(uint_dtype(dtype.itemsize * 8)), dtype)


def sext(x: jax.Array, nbits: int) -> jax.Array:
    """Sign-extends the low ``nbits`` bits of the integer ``x`` (bits above are ignored);
    int32 result.

    Example:
      >>> import jax.numpy as jnp
      >>> sext(jnp.array([0x7, 0x8, 0xF, 0x1F], jnp.uint8), 4)
      Array([ 7, -8, -1, -1], dtype=int32)
    """
    sign = 1 << (nbits - 1)
    return ((x.astype(jnp.int32) & low_mask(nbits)) ^ sign) - sign


def tf32_keep(x: jax.Array) -> jax.Array:
    """The float32 ``x`` with the low 13 bits cleared: the tf32 value the tensor core reads.

    Example:
      >>> import jax.numpy as jnp
      >>> float(tf32_keep(jnp.float32(1 + 2**-11)))
      1.0
    """
    return lax.bitcast_convert_type(
        lax.bitcast_convert_type(x, jnp.uint32) & jnp.uint32(TF32_MASK), jnp.float32)
