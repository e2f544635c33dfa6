"""Hopper warpgroup MMA ``wgmma.mma_async`` (sm_90a): the instruction.

One ``wgmma.mma_async.sync.aligned.m64nNkK.<dtype>.<atype>.<btype>`` is issued by a
*warpgroup* of 128 threads (4 consecutive warps) and computes ``D = A @ B + D`` for a
64 x N accumulator held in registers (PTX ISA, "Asynchronous Warpgroup Level Matrix
Multiply-Accumulate Instructions"). A (64 x K) comes from shared memory through a 64-bit
*matrix descriptor* or from registers; B (K x N) always comes from shared memory through a
descriptor. The front-end parses the qualifiers, encodes and decodes
descriptors, reads operand tiles out of a shared-memory byte array exactly as the
descriptor tells the hardware to (canonical layouts, 32/64/128-byte swizzles), maps the
accumulator and A fragments to and from the registers of the warpgroup, and hands the
logical matrices to the one datapath model, ``datapath.mma`` (``datapath.bmma`` for b1).

The front-end is three modules: :mod:`~jaxwarp._src.catalogue.wgmma_parse` (the
qualifiers, :func:`~jaxwarp._src.catalogue.wgmma_parse.parse_wgmma`),
:mod:`~jaxwarp._src.layouts.wgmma_registers` (the accumulator and A fragments of the
warpgroup) and this one (operands in shared memory, the instruction itself).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxwarp._src import checks
from jaxwarp._src.arithmetic import datapath
from jaxwarp._src.catalogue import isa
from jaxwarp._src.catalogue.arch import Target
from jaxwarp._src.catalogue.wgmma_parse import (
    BITS_DTYPE,
    FLOAT_TYPES,
    MATRIX_DTYPE,
    M,
    WgmmaInstruction,
    instruction_of,
    target_for,
)
from jaxwarp._src.layouts.smem import (
    DescriptorFields,
    as_smem,
    check_range,
    decode_descriptor,
    descriptor_arg,
    gather,
    is_descriptor,
    keep_c,
    logical_bits,
    make_descriptor,
    operand_addresses,
    scatter,
)
from jaxwarp._src.layouts.wgmma_registers import (
    a_matrix,
    accumulator_matrix,
    accumulator_registers,
)
from jaxwarp._src.numerics import bitops

__all__ = [
    "DescriptorFields", "decode_descriptor", "make_descriptor", "operand_addresses",
    "read_operand", "wgmma", "wgmma_logical", "write_operand",
]


# --------------------------------------------------------------------------------------
# Operands in shared memory (descriptors and layouts: ``smem.py``, shared with tcgen05).


def _operand_geometry(instr: WgmmaInstruction, operand: str) -> tuple[int, int, str]:
    checks.static_choice(operand, "operand", ("a", "b"))
    if operand == "a":
        return M, instr.a_bits, instr.a_format
    return instr.n, instr.b_bits, instr.b_format


def read_operand(smem: Any, desc: Any, qualifier: Any, operand: str, *,
                 transpose: int = 0) -> jax.Array:
    """Reads A (64 x K) or B (K x N) from shared memory through a descriptor.

    Args:
      smem: (..., nbytes) uint8, the shared memory (byte address = index).
      desc: the operand's descriptor (static int).
      qualifier: the instruction (str or ``WgmmaInstruction``).
      operand: ``"a"`` or ``"b"``.
      transpose: imm-trans of that operand (1: stored M/N-major; f16/bf16 only).

    Returns:
      Logical A (..., 64, K) or B (..., K, N) as raw bits: uint16 (f16, bf16), uint32
      (tf32), uint8 (e4m3, e5m2, u8, b1 as 0/1), int8 (s8).

    Raises:
      ValueError: an address beyond ``smem`` (naming the descriptor), or transpose for a
        type that has no M/N-major layout.

    Example:
      >>> import jax.numpy as jnp
      >>> smem = jnp.arange(4096, dtype=jnp.uint32).astype(jnp.uint8)
      >>> b = read_operand(smem, make_descriptor(2048, 128, 256), "m64n8k32.s32.u8.u8", "b")
      >>> b.shape, int(b[1, 0]), int(b[0, 1])
      ((32, 8), 1, 16)
    """
    instr = instruction_of(qualifier)
    rows, bits, t = _operand_geometry(instr, operand)
    tr = checks.static_int(transpose, "transpose")
    checks.static_choice(tr, "transpose", (0, 1))
    if tr and not instr.family.transpose:
        raise ValueError(f"transpose=1 (imm-trans) exists for f16 and bf16 only, not "
                         f"{t!r}")
    s = as_smem(smem)
    addr, bit = operand_addresses(desc, rows, instr.k, bits, transpose=tr)
    check_range(addr, s.shape[-1], f"operand {operand}", desc, decode_descriptor(desc))
    v = gather(s, addr, bit, bits, BITS_DTYPE[t])
    return v if operand == "a" else jnp.swapaxes(v, -1, -2)


def write_operand(smem: Any, desc: Any, qualifier: Any, operand: str, x: Any, *,
                  transpose: int = 0) -> jax.Array:
    """Stores logical A (64 x K) or B (K x N) into shared memory where ``desc`` points.

    The inverse of ``read_operand`` for a layout whose elements do not overlap: every
    element's bytes (b1: bits) go to the addresses ``operand_addresses`` gives; other
    bytes keep their value.

    Args:
      smem: (nbytes,) uint8. desc, qualifier, operand, transpose: as ``read_operand``.
      x: A (64, K) or B (K, N) as raw bits (the dtypes ``read_operand`` returns; any
        integer dtype of that width is taken as bits).

    Returns:
      The updated (nbytes,) uint8 shared memory.

    Example:
      >>> import jax.numpy as jnp
      >>> q = "m64n8k16.f32.f16.f16"
      >>> b = jnp.arange(128, dtype=jnp.uint16).reshape(16, 8)
      >>> d = make_descriptor(0, 16, 256, swizzle=32)
      >>> smem = write_operand(jnp.zeros(512, jnp.uint8), d, q, "b", b)
      >>> bool((read_operand(smem, d, q, "b") == b).all())
      True
    """
    instr = instruction_of(qualifier)
    rows, bits, t = _operand_geometry(instr, operand)
    tr = checks.static_int(transpose, "transpose")
    checks.static_choice(tr, "transpose", (0, 1))
    s = as_smem(smem)
    if s.ndim != 1:
        raise ValueError(f"write_operand takes one shared memory (nbytes,), got {s.shape}; "
                         f"use jax.vmap for many")
    x = jnp.asarray(x)
    want = (M, instr.k) if operand == "a" else (instr.k, instr.n)
    if x.shape != want:
        raise ValueError(f"x must be operand {operand} of shape {want}, got {x.shape}")
    if not jnp.issubdtype(x.dtype, jnp.integer) or x.dtype.itemsize * 8 != max(bits, 8):
        raise TypeError(f"x must hold {t} elements as {max(bits, 8)}-bit integers "
                        f"({BITS_DTYPE[t]}), got {x.dtype}")
    xr = x if operand == "a" else x.T  # (rows, k)
    addr, bit = operand_addresses(desc, rows, instr.k, bits, transpose=tr)
    check_range(addr, s.shape[-1], f"operand {operand}", desc, decode_descriptor(desc))
    return scatter(s, addr, bit, bits, xr)


# --------------------------------------------------------------------------------------
# Arithmetic.


_SIGN = {t: 1 << (isa.element_bits(t) - 1) for t in FLOAT_TYPES}


def _negate_bits(x: jax.Array, t: str) -> jax.Array:
    """Flips the sign bit of float elements held as raw bits (imm-scale = -1)."""
    return x ^ jnp.asarray(_SIGN[t], x.dtype)


def _storage(bits: jax.Array, t: str) -> jax.Array:
    """Raw bits -> the dtype ``datapath.mma`` takes for type t."""
    want = datapath.STORAGE_DTYPE.get(t)
    if want is None:
        raise NotImplementedError(f"datapath.mma has no storage dtype for {t!r} yet")
    return bitops.from_bits(bits, want)


def _arith(instr: WgmmaInstruction, a_bits: jax.Array, b_bits: jax.Array, c: jax.Array,
           arch: Target) -> jax.Array:
    """D = A @ B + C on logical matrices; a, b raw bits, c in the matrix dtype of d_format."""
    if instr.a_format == "b1":
        return datapath.bmma(a_bits, b_bits, c, op=instr.bop)
    kwargs: dict[str, Any] = dict(a_format=instr.a_format, b_format=instr.b_format,
                                  c_format=instr.d_format, d_format=instr.d_format,
                                  arch=arch.name, satf=instr.satfinite,
                                  instruction="wgmma", instruction_k=instr.k)
    return datapath.mma(_storage(a_bits, instr.a_format), _storage(b_bits, instr.b_format), c,
                        **kwargs)


def _static_flag(value: Any, name: str, allowed: tuple[int, ...]) -> int:
    v = checks.static_int(int(value) if isinstance(value, bool) else value, name)
    checks.static_choice(v, name, allowed)
    return v


def _check_modifiers(instr: WgmmaInstruction, scale_a: int, scale_b: int, tnsp_a: int,
                     tnsp_b: int, a_regs: bool) -> None:
    fam = instr.family
    if (scale_a, scale_b) != (1, 1) and not fam.float_scale:
        raise ValueError(f"imm-scale-a/b (negation) exists for the floating-point types "
                         f"only (f16, bf16, tf32, e4m3, e5m2), not {instr.a_format!r}")
    if (tnsp_a or tnsp_b) and not fam.transpose:
        raise ValueError(f"imm-trans-a/b (M/N-major operands) exist for f16 and bf16 only, "
                         f"not {instr.a_format!r}; other types must be K-major")
    if tnsp_a and a_regs:
        raise ValueError("tnsp_a applies to A in shared memory only; A from registers has no "
                         "imm-trans-a")


def wgmma(qualifier: Any, a: Any, desc_b: Any, smem: Any, d_regs: Any, *, scale_d: Any = 1,
          imm_scale_a: int = 1, imm_scale_b: int = 1, tnsp_a: int = 0, tnsp_b: int = 0,
          arch: Any = "sm_90a") -> jax.Array:
    """One ``wgmma.mma_async.sync.aligned`` at the register and descriptor level.

    ``wgmma.mma_async.sync.aligned.<qualifier> d, a-desc|{a0..a3}, b-desc, scale-d,
    imm-scale-a, imm-scale-b, imm-trans-a, imm-trans-b`` followed by its
    ``commit_group`` / ``wait_group 0``: returns the new accumulator registers.

    Operands are read from ``smem`` exactly where the descriptors point (start address,
    LBO, SBO and swizzle; ``jaxwarp.decode_descriptor`` shows them): a wrong
    LBO/SBO/swizzle reads the wrong bytes, as on the GPU; an address beyond ``smem`` is a
    ``ValueError``. The arithmetic is :func:`jaxwarp.mma` (:func:`jaxwarp.bmma` for b1) on
    the logical matrices.

    Args:
      qualifier: e.g. ``"m64n64k16.f32.f16.f16"`` (see ``parse_wgmma``).
      a: A's descriptor (a static Python/numpy int), or A in registers: (..., 128, 4)
        uint32 (layout ``WGMMA_A`` of docs/lane_maps.md: warp w holds rows 16w ..
        16w + 15 as an ``mma.sync`` m16n8k* A of the type, 4 registers).
      desc_b: B's descriptor (static int).
      smem: (..., nbytes) uint8 shared memory (byte address = index).
      d_regs: (..., 128, NR) accumulator registers: float32 (f32), int32 (s32) or uint32
        (f16, two halves per word), in layout ``WGMMA_D`` of docs/lane_maps.md (warp w
        holds rows 16w .. 16w + 15 as ``mma.sync`` m16n8k* holds C, repeated every 8
        columns). Batch axes of a, smem and d_regs broadcast.
      scale_d: the scale-d predicate (may be traced, any shape broadcasting to the batch):
        0 gives ``D = A @ B`` as if C were +0 (C's NaN/inf are ignored; the sign of an
        exactly zero result is unverified: the captures have none); 1 ``D = A @ B + C``.
        A concrete integer other than 0 and 1 is a ``ValueError``; a traced integer
        predicate counts any non-zero value as 1.
      imm_scale_a, imm_scale_b: 1 or -1 (negate A or B: the sign bit of every element is
        flipped); floating-point types only.
      tnsp_a, tnsp_b: imm-trans-a/b, 0 (K-major) or 1 (M/N-major); f16/bf16 only.
      arch: ``"sm_90a"`` (a target that has wgmma: ``jaxwarp.isa.ROWS``).

    Returns:
      The accumulator registers after the instruction, same shape/dtype as ``d_regs``
      (with the broadcast batch shape).

    Raises:
      ValueError/TypeError: bad qualifier, modifier, shape, dtype or address.

    Example:
      >>> import jax.numpy as jnp
      >>> q = "m64n8k32.s32.s8.s8"
      >>> da, db = make_descriptor(0, 128, 256), make_descriptor(2048, 128, 256)
      >>> smem = jnp.zeros(4096, jnp.uint8)
      >>> smem = write_operand(smem, da, q, "a", jnp.ones((64, 32), jnp.int8))
      >>> smem = write_operand(smem, db, q, "b", jnp.full((32, 8), 2, jnp.int8))
      >>> d = wgmma(q, da, db, smem, jnp.zeros((128, 4), jnp.int32))
      >>> int(d[0, 0]), int(accumulator_matrix(d, q)[63, 7])
      (64, 64)
    """
    smem, d_regs = checks.array_args(smem=smem, d_regs=d_regs)
    if np.ndim(a) == 0:  # a scalar can only be A's descriptor
        descriptor_arg(a, "a (desc_a, A's descriptor)")
    descriptor_arg(desc_b, "desc_b")
    a = a if is_descriptor(a) else checks.array_arg(a, "a")
    instr = instruction_of(qualifier)
    arch_p = target_for(arch, instr)
    sa = _static_flag(imm_scale_a, "imm_scale_a", (1, -1))
    sb = _static_flag(imm_scale_b, "imm_scale_b", (1, -1))
    ta = _static_flag(tnsp_a, "tnsp_a", (0, 1))
    tb = _static_flag(tnsp_b, "tnsp_b", (0, 1))
    a_is_desc = is_descriptor(a)
    _check_modifiers(instr, sa, sb, ta, tb, not a_is_desc)
    s = as_smem(smem)
    c = accumulator_matrix(d_regs, instr)
    if a_is_desc:
        a_bits = read_operand(s, a, instr, "a", transpose=ta)
    else:
        if not instr.family.a_in_registers:
            raise ValueError(f"A from registers is not supported for atype {instr.a_format!r}")
        a_bits = a_matrix(a, instr)
    b_bits = read_operand(s, desc_b, instr, "b", transpose=tb)
    d = _logical(instr, a_bits, b_bits, c, scale_d, sa < 0, sb < 0, arch_p)
    return accumulator_registers(d, instr)


def _logical(instr, a_bits, b_bits, c, scale_d, neg_a, neg_b, arch_p):
    if neg_a:
        a_bits = _negate_bits(a_bits, instr.a_format)
    if neg_b:
        b_bits = _negate_bits(b_bits, instr.b_format)
    c = keep_c(c, scale_d, "scale_d")
    batch = np.broadcast_shapes(a_bits.shape[:-2], b_bits.shape[:-2], c.shape[:-2])
    a_bits = jnp.broadcast_to(a_bits, batch + a_bits.shape[-2:])
    b_bits = jnp.broadcast_to(b_bits, batch + b_bits.shape[-2:])
    c = jnp.broadcast_to(c, batch + c.shape[-2:])
    return _arith(instr, a_bits, b_bits, c, arch_p)


def _bits_arg(x: Any, name: str, t: str, shape: tuple[int, int]) -> jax.Array:
    """A logical operand as raw bits: its bits dtype, or the datapath storage dtype."""
    return logical_bits(x, name, t, shape, BITS_DTYPE[t], datapath.STORAGE_DTYPE.get(t))


def wgmma_logical(qualifier: Any, a: Any, b: Any, c: Any, *, scale_d: Any = True,
                  neg_a: bool = False, neg_b: bool = False, arch: Any = "sm_90a") -> jax.Array:
    """``D = (±A) @ (±B) + C`` of one wgmma on logical matrices (no layouts involved).

    Args:
      qualifier: e.g. ``"m64n8k32.f32.e4m3.e5m2"`` (see ``parse_wgmma``).
      a: (..., 64, K), b: (..., K, N): raw bits (uint16 f16/bf16, uint32 tf32, uint8
        e4m3/e5m2/u8/b1, int8 s8) or the dtype :func:`jaxwarp.mma` takes for the type
        (float16, bfloat16, float32 for tf32).
      c: (..., 64, N): float32 (f32), float16 (f16) or int32 (s32).
      scale_d: the scale-d predicate (may be traced); False: ``D = A @ B`` (C as +0).
      neg_a, neg_b: imm-scale-a/b = -1 (floating-point types only).
      arch: ``"sm_90a"``.

    Returns:
      D (..., 64, N) in c's dtype.

    Example:
      >>> import jax.numpy as jnp
      >>> a = jnp.ones((64, 256), jnp.uint8); b = jnp.ones((256, 8), jnp.uint8)
      >>> d = wgmma_logical("m64n8k256.s32.b1.b1.and.popc", a, b, jnp.zeros((64, 8), jnp.int32))
      >>> int(d[0, 0])
      256
    """
    a, b, c = checks.array_args(a=a, b=b, c=c)
    instr = instruction_of(qualifier)
    arch_p = target_for(arch, instr)
    if not isinstance(neg_a, bool) or not isinstance(neg_b, bool):
        raise TypeError(f"neg_a and neg_b must be Python bools, got {neg_a!r}, {neg_b!r}")
    _check_modifiers(instr, -1 if neg_a else 1, -1 if neg_b else 1, 0, 0, False)
    a_bits = _bits_arg(a, "a", instr.a_format, (M, instr.k))
    b_bits = _bits_arg(b, "b", instr.b_format, (instr.k, instr.n))
    c = jnp.asarray(c)
    want = MATRIX_DTYPE[instr.d_format]
    if c.ndim < 2 or c.shape[-2:] != (M, instr.n):
        raise ValueError(f"c must have shape (..., 64, {instr.n}), got {c.shape}")
    if c.dtype != want:
        raise TypeError(f"c must have dtype {want} for dtype {instr.d_format!r}, got {c.dtype}")
    return _logical(instr, a_bits, b_bits, c, scale_d, neg_a, neg_b, arch_p)
