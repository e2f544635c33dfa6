"""Hopper warpgroup MMA ``wgmma.mma_async`` (sm_90a): the register fragments.

Where the accumulator and A (when it comes from registers) sit in the registers of the
128 threads of a warpgroup, and the maps between those registers and logical matrices.
The qualifiers are parsed in :mod:`jaxwarp._src.catalogue.wgmma_parse`, the
instruction is :mod:`jaxwarp._src.instructions.wgmma`.

Accumulator fragment (``d_layout``; f32 and s32: N/2 registers per thread; measured
with the bit-plane probes of the H100 captures, every plain configuration)::

    thread t: warp w = t // 32, g = (t % 32) // 4, q = t % 4; register i = 4c + j
    row = 16 w + g + 8 (j // 2)          col = 8 c + 2 q + (j % 2)

                col 8c+0  8c+1 | 8c+2  8c+3 | 8c+4  8c+5 | 8c+6  8c+7
    row 16w+g     T0:d0 T0:d1  | T1:d0 T1:d1 | T2:d0 T2:d1 | T3:d0 T3:d1
    row 16w+g+8   T0:d2 T0:d3  | T1:d2 T1:d3 | T2:d2 T2:d3 | T3:d2 T3:d3
        (T = thread 32w + 4g + q; dj = register 4c + j; repeats for c = 0 .. N/8-1)

    warp 0: rows  0..15   warp 1: rows 16..31   warp 2: rows 32..47   warp 3: rows 48..63

f16 accumulators pack two halves per 32-bit register (N/4 registers, lower column in bits
15..0): register i = 2c + j holds row ``16w + g + 8j``, columns ``8c + 2q`` and
``8c + 2q + 1``.

A from registers (``a_layout``; 4 registers per thread; row ``16w + g + 8 (r % 2)``
for register r): f16/bf16 half h of register r is column ``2q + h + 8 (r // 2)``; 8-bit
types byte j is column ``4q + j + 16 (r // 2)``; tf32 register r is column
``q + 4 (r // 2)``. This is the accumulator pattern of an m64 x 16-byte tile.

Registers are arrays with the warpgroup axis (128) second to last and registers last:
``(..., 128, NR)``; f32 accumulators are float32, s32 int32, f16 accumulators and A
registers uint32 words. Leading batch axes broadcast.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxwarp._src.catalogue.wgmma_parse import (
    BITS_DTYPE,
    MATRIX_DTYPE,
    REGISTER_DTYPE,
    WARPGROUP_SIZE,
    M,
    instruction_of,
)
from jaxwarp._src.layouts import layouts
from jaxwarp._src.numerics import bitops

__all__ = [
    "a_layout", "a_matrix", "a_register_layout", "a_registers", "accumulator_matrix",
    "accumulator_registers", "d_layout", "d_register_layout",
]


def d_layout(qualifier: Any) -> tuple[np.ndarray, np.ndarray]:
    """(row, col) of every accumulator element held by the warpgroup.

    Returns:
      Two int arrays of shape (128, NR, h): thread, register, half (h = 2 for f16
      accumulators, lower column in bits 15..0; 1 otherwise). See the module docstring
      for the drawing.

    Example:
      >>> row, col = d_layout("m64n16k16.f32.f16.f16")
      >>> row.shape, int(row[37, 2, 0]), int(col[37, 5, 0])
      ((128, 8, 1), 25, 11)
    """
    instr = instruction_of(qualifier)
    h = 2 if instr.d_format == "f16" else 1  # f16: elements 2i, 2i + 1 in register i
    row, col = d_register_layout(instr).coords()
    shape = (WARPGROUP_SIZE, instr.n // 2 // h, h)
    return np.array(row).reshape(shape), np.array(col).reshape(shape)  # fresh copies


def d_register_layout(qualifier: Any) -> layouts.Layout:
    """The accumulator's :class:`~jaxwarp._src.layouts.layouts.Layout`:
    ``layouts.WGMMA_D`` cut to N/2 elements per thread on the 64 x N tile.

    Example:
      >>> d_register_layout("m64n16k16.f32.f16.f16").num_elements
      8
    """
    instr = instruction_of(qualifier)
    return layouts.WGMMA_D.take(instr.n // 2, (M, instr.n), f"wgmma {instr.qualifier} D")


def a_layout(qualifier: Any) -> tuple[np.ndarray, np.ndarray]:
    """(row, col) of A held in registers: arrays (128, 4, per word).

    16-bit types: 2 elements per register; 8-bit types: 4; tf32: 1.

    Example:
      >>> row, col = a_layout("m64n8k32.f32.e4m3.e4m3")
      >>> row.shape, int(row[5, 1, 0]), int(col[5, 3, 2])
      ((128, 4, 4), 9, 22)
    """
    instr = instruction_of(qualifier)
    if not instr.family.a_in_registers:
        raise ValueError(f"A from registers is not supported for atype {instr.a_format!r}")
    row, col = a_register_layout(instr).coords()
    shape = (WARPGROUP_SIZE, 4, 32 // instr.a_bits)
    return np.array(row).reshape(shape), np.array(col).reshape(shape)  # fresh copies


def a_register_layout(qualifier: Any) -> layouts.Layout:
    """A's :class:`~jaxwarp._src.layouts.layouts.Layout` when it comes from registers:
    ``layouts.WGMMA_A`` with ``32 // bits`` elements per register, on the 64 x K tile.

    Example:
      >>> a_register_layout("m64n8k16.f32.f16.f16").elem_bases
      ((0, 1), (8, 0), (0, 8))
    """
    instr = instruction_of(qualifier)
    if not instr.family.a_in_registers:
        raise ValueError(f"A from registers is not supported for atype {instr.a_format!r}")
    per = 32 // instr.a_bits
    return layouts.WGMMA_A.packed(per, 1).take(4 * per, (M, instr.k),
                                               f"wgmma {instr.qualifier} A")


def _regs(x: Any, name: str, nregs: int, dtype: np.dtype) -> jax.Array:
    x = jnp.asarray(x)
    if x.ndim < 2 or x.shape[-2:] != (WARPGROUP_SIZE, nregs):
        raise ValueError(f"{name} must have shape (..., {WARPGROUP_SIZE}, {nregs}) (threads of "
                         f"the warpgroup, registers), got {x.shape}")
    if x.dtype != dtype:
        raise TypeError(f"{name} must have dtype {dtype}, got {x.dtype}")
    return x


def accumulator_matrix(d_regs: Any, qualifier: Any) -> jax.Array:
    """Accumulator registers (..., 128, NR) -> logical D (..., 64, N).

    f32 -> float32, s32 -> int32, f16 (uint32 words) -> float16.

    Example:
      >>> import jax.numpy as jnp
      >>> regs = jnp.arange(128 * 4, dtype=jnp.float32).reshape(128, 4)
      >>> d = accumulator_matrix(regs, "m64n8k16.f32.f16.f16")
      >>> float(d[0, 1]), float(d[8, 0])
      (1.0, 2.0)
    """
    instr = instruction_of(qualifier)
    x = _regs(d_regs, "d_regs", instr.num_d_registers, REGISTER_DTYPE[instr.d_format])
    row, col = d_layout(instr)
    inv = np.zeros((M, instr.n), np.int64)
    flat = np.arange(row.size).reshape(row.shape)
    inv[row, col] = flat
    batch = x.shape[:-2]
    if instr.d_format == "f16":
        halves = jnp.stack([x & jnp.uint32(0xFFFF), x >> jnp.uint32(16)], axis=-1)
        x = bitops.from_u32(halves, jnp.float16)
    x = x.reshape(*batch, -1)
    return x[..., inv]


def accumulator_registers(d: Any, qualifier: Any) -> jax.Array:
    """Logical D (..., 64, N) -> accumulator registers (..., 128, NR).

    d: float32 (f32), float16 (f16; packed two per uint32 word) or int32 (s32).

    Example:
      >>> import jax.numpy as jnp
      >>> d = jnp.arange(64 * 8, dtype=jnp.float32).reshape(64, 8)
      >>> r = accumulator_registers(d, "m64n8k16.f32.f16.f16")
      >>> r.shape, float(r[1, 0]), float(r[32, 2])
      ((128, 4), 2.0, 192.0)
    """
    instr = instruction_of(qualifier)
    d = jnp.asarray(d)
    want = MATRIX_DTYPE[instr.d_format]
    if d.ndim < 2 or d.shape[-2:] != (M, instr.n):
        raise ValueError(f"d must have shape (..., 64, {instr.n}), got {d.shape}")
    if d.dtype != want:
        raise TypeError(f"d must have dtype {want} for d_format {instr.d_format!r}, got {d.dtype}")
    row, col = d_layout(instr)
    v = d[..., row, col]  # (..., 128, NR, h)
    if instr.d_format == "f16":
        u = bitops.to_u32(v)
        return u[..., 0] | (u[..., 1] << jnp.uint32(16))
    return v[..., 0]


def a_registers(a: Any, qualifier: Any) -> jax.Array:
    """Logical A (..., 64, K) raw bits -> A registers (..., 128, 4) uint32.

    Example:
      >>> import jax.numpy as jnp
      >>> a = jnp.arange(64 * 16, dtype=jnp.uint16).reshape(64, 16)
      >>> hex(int(a_registers(a, "m64n8k16.f32.f16.f16")[1, 0]))
      '0x30002'
    """
    instr = instruction_of(qualifier)
    bits = instr.a_bits
    a = jnp.asarray(a)
    if a.ndim < 2 or a.shape[-2:] != (M, instr.k):
        raise ValueError(f"a must have shape (..., 64, {instr.k}), got {a.shape}")
    if not jnp.issubdtype(a.dtype, jnp.integer) or a.dtype.itemsize * 8 != bits:
        raise TypeError(f"a must hold {instr.a_format} elements as {bits}-bit integers "
                        f"({BITS_DTYPE[instr.a_format]}), got {a.dtype}")
    row, col = a_layout(instr)
    u = bitops.to_u32(a[..., row, col])
    word = u[..., 0]
    for j in range(1, u.shape[-1]):
        word = word | (u[..., j] << jnp.uint32(j * bits))
    return word


def a_matrix(a_regs: Any, qualifier: Any) -> jax.Array:
    """A registers (..., 128, 4) uint32 -> logical A (..., 64, K) raw bits.

    Example:
      >>> import jax.numpy as jnp
      >>> q = "m64n8k32.s32.s8.s8"
      >>> a = jnp.arange(64 * 32, dtype=jnp.int32).reshape(64, 32).astype(jnp.int8)
      >>> bool((a_matrix(a_registers(a, q), q) == a).all())
      True
    """
    instr = instruction_of(qualifier)
    x = _regs(a_regs, "a_regs", 4, np.dtype(np.uint32))
    bits = instr.a_bits
    row, col = a_layout(instr)
    mask = jnp.uint32((1 << bits) - 1) if bits < 32 else jnp.uint32(0xFFFFFFFF)
    parts = jnp.stack([(x >> jnp.uint32(j * bits)) & mask for j in range(row.shape[-1])],
                      axis=-1)
    v = bitops.from_u32(parts, BITS_DTYPE[instr.a_format])
    inv = np.zeros((M, instr.k), np.int64)
    inv[row, col] = np.arange(row.size).reshape(row.shape)
    return v.reshape(*v.shape[:-3], -1)[..., inv]
