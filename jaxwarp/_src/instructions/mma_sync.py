"""PTX ``mma.sync.aligned``: the two entry points.

This is the front-end of the PTX warp-level ``mma`` instruction (PTX ISA 9.7.14.5,
"Warp-level matrix multiply-accumulate instructions: mma"), in three modules:
:mod:`~jaxwarp._src.catalogue.mma_sync_parse` knows which qualifier strings exist
(:func:`~jaxwarp._src.catalogue.mma_sync_parse.parse_mma`),
:mod:`~jaxwarp._src.layouts.mma_sync_registers` where every element of A, B, C and D
sits in the registers of a warp, and this one hands the arithmetic to
:mod:`jaxwarp._src.arithmetic.datapath` (``datapath.mma`` for floats and integers,
``datapath.bmma`` for ``b1``).

Entry points
------------
:func:`mma_sync_ptx` works on registers, :func:`mma_sync_ptx_logical` on logical matrices; both
compute ``D = A @ B + C`` through the datapath. Logical element dtypes: f16 float16,
bf16 bfloat16, tf32 float32 (the whole word; the tensor core ignores its low 13 bits),
f32 float32, f64 float64, e4m3 ``float8_e4m3fn``, e5m2 ``float8_e5m2``, s8 int8, u8
uint8, s4 int8 in [-8, 7], u4 uint8 in [0, 15], b1 uint8 0/1 (sub-byte types: only the
low bits count), s32 int32. Leading batch axes are allowed (and broadcast) in front of
the lane axis / the matrix axes, so both also work under ``jax.vmap`` and ``jax.jit``.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxwarp._src import checks
from jaxwarp._src.arithmetic import datapath
from jaxwarp._src.arithmetic.datapath_checks import check_code_bits
from jaxwarp._src.catalogue.mma_sync_parse import (
    LOGICAL_DTYPE,
    MmaInstruction,
    check_arch,
    need_x64,
    parse_mma,
)
from jaxwarp._src.layouts.mma_sync_registers import pack, regs_arg, unpack

__all__ = [
    "mma_sync_ptx",
    "mma_sync_ptx_logical",
]


def _compute(instr: MmaInstruction, a: jax.Array, b: jax.Array, c: jax.Array,
             arch: Any) -> jax.Array:
    if instr.a_format == "b1":
        return datapath.bmma(a, b, c, op=instr.b1_op)
    return datapath.mma(a, b, c, a_format=instr.a_format, b_format=instr.b_format,
                        c_format=instr.c_format, d_format=instr.d_format, instruction="mma_sync",
                        instruction_k=instr.k, arch=arch, satf=instr.satfinite)


def mma_sync_ptx_logical(qualifier: str | MmaInstruction, a: Any, b: Any, c: Any, *,
            arch: Any = "sm_90") -> jax.Array:
    """``D = A @ B + C`` of one ``mma.sync.aligned`` on logical matrices.

    Args:
      qualifier: static, e.g. ``"m16n8k32.row.col.f32.e4m3.e5m2.f32"`` (see
        :func:`parse_mma`).
      a: (..., m, k) in the A type's logical dtype: f16 float16, bf16 bfloat16, tf32
        float32 (the whole word; the tensor core ignores its low 13 bits), f32 float32,
        f64 float64, e4m3 ``float8_e4m3fn``, e5m2 ``float8_e5m2``, s8 int8, u8 uint8, s4
        int8 in [-8, 7], u4 uint8 in [0, 15], b1 uint8 0/1 (sub-byte types: only the low
        bits count), s32 int32.
      b: (..., k, n) in the B type's logical dtype.
      c: (..., m, n) in the C type's logical dtype. Leading batch axes of a, b, c
        broadcast. Layouts (``.row``/``.col``) only matter for registers.
      arch: a key of ``jaxwarp.ARCHS`` (``"sm_70"`` ... ``"sm_90"``, ``"sm_100a"``,
        ``"sm_120a"`` ...) or a ``jaxwarp.ArchModel``; it must have the instruction
        (fp8 needs sm_89 or newer, ``.kind::f8f6f4`` sm_120a or sm_121a).

    Returns:
      (..., m, n) in the D type's logical dtype.

    Raises:
      ValueError/TypeError: bad qualifier, arch, dtype or shape (at trace time).

    Example:
      >>> import jax.numpy as jnp
      >>> a = jnp.full((8, 16), 3, jnp.int8); b = jnp.full((16, 8), 200, jnp.uint8)
      >>> c = jnp.full((8, 8), 2**31 - 1, jnp.int32)
      >>> int(mma_sync_ptx_logical("m8n8k16.row.col.satfinite.s32.s8.u8.s32", a, b, c)[0, 0])
      2147483647
    """
    instr = parse_mma(qualifier)
    check_arch(instr, arch)
    need_x64(instr, "mma_sync_ptx_logical")
    a, b, c = checks.array_args(a=a, b=b, c=c)
    ops = []
    for use, x in (("a", a), ("b", b), ("c", c)):
        x = jnp.asarray(x)
        ty, dims = instr.elem_type(use), instr.dims(use)
        if x.dtype != LOGICAL_DTYPE[ty]:
            raise TypeError(f"{use} of {instr.qualifier} must have dtype {LOGICAL_DTYPE[ty]} "
                            f"({ty}), got {x.dtype}")
        if x.ndim < 2 or tuple(x.shape[-2:]) != dims:
            raise ValueError(f"{use} of {instr.qualifier} must have shape (..., {dims[0]}, "
                             f"{dims[1]}), got {tuple(x.shape)}")
        check_code_bits(x, use, ty, "low", "mma_sync_ptx_logical")
        ops.append(x)
    try:
        np.broadcast_shapes(*(x.shape[:-2] for x in ops))
    except ValueError as e:
        raise ValueError(f"batch axes of a {ops[0].shape}, b {ops[1].shape}, c "
                         f"{ops[2].shape} do not broadcast") from e
    # Layouts only matter for registers: the four m8n8k4 layouts share one computation.
    return _compute_jit(dataclasses.replace(instr, a_layout="row", b_layout="col"), arch, *ops)


@functools.partial(jax.jit, static_argnums=(0, 1))
def _compute_jit(instr: MmaInstruction, arch: Any, a, b, c) -> jax.Array:
    return _compute(instr, a, b, c, arch)


def mma_sync_ptx(qualifier: str | MmaInstruction, a_regs: Any, b_regs: Any, c_regs: Any, *,
                 arch: Any = "sm_90") -> jax.Array:
    """One warp's ``mma.sync.aligned`` on registers: ``{d} = mma({a}, {b}, {c})``.

    Args:
      qualifier: static, e.g. ``"m16n8k16.row.col.f32.f16.f16.f32"``.
      a_regs, b_regs, c_regs: (..., 32, nregs) uint32 register words (uint64 for f64) in
        the instruction's fragment layouts (as :func:`jaxwarp.to_registers` lays the
        logical matrices out); leading batch axes (many warps) broadcast.
        ``jaxwarp.parse_mma(qualifier).nregs(use)`` gives nregs.
      arch: as in :func:`mma_sync_ptx_logical`.

    Returns:
      d registers, (..., 32, nregs("d")) uint32 (uint64 for f64).

    Example:
      >>> import jax.numpy as jnp
      >>> q = "m16n8k16.row.col.f32.f16.f16.f32"
      >>> one = jnp.full((32, 4), 0x3C003C00, jnp.uint32)   # every f16 of A is 1.0
      >>> b = jnp.full((32, 2), 0x40004000, jnp.uint32)     # every f16 of B is 2.0
      >>> d = mma_sync_ptx(q, one, b, jnp.zeros((32, 4), jnp.uint32))
      >>> d.shape, hex(int(d[0, 0]))                         # 32.0 in fp32
      ((32, 4), '0x42000000')
    """
    instr = parse_mma(qualifier)
    check_arch(instr, arch)
    need_x64(instr, "mma_sync_ptx")
    a_regs, b_regs, c_regs = checks.array_args(a_regs=a_regs, b_regs=b_regs, c_regs=c_regs)
    regs = [regs_arg(instr, u, r, f"{u}_regs")
            for u, r in (("a", a_regs), ("b", b_regs), ("c", c_regs))]
    try:
        np.broadcast_shapes(*(r.shape[:-2] for r in regs))
    except ValueError as e:
        raise ValueError(f"batch axes of a_regs {regs[0].shape}, b_regs {regs[1].shape}, "
                         f"c_regs {regs[2].shape} do not broadcast") from e
    return _mma_sync_core(instr, arch, *regs)


@functools.partial(jax.jit, static_argnums=(0, 1))
def _mma_sync_core(instr: MmaInstruction, arch: Any, a_regs, b_regs, c_regs) -> jax.Array:
    a, b, c = (unpack(instr, u, r) for u, r in zip("abc", (a_regs, b_regs, c_regs),
                                                        strict=True))
    return pack(instr, "d", _compute(instr, a, b, c, arch))
