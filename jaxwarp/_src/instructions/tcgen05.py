"""Blackwell ``tcgen05.mma`` (sm_100a / sm_103a): instruction, descriptors, logical view.

``tcgen05.mma.cta_group::1.kind [d-tmem], a-desc|[a-tmem], b-desc, idesc,
enable-input-d {, scale-input-d}`` computes ``D = A @ B + D`` (PTX ISA, "tcgen05.mma"):
D (M x N) lives in *tensor memory*, B (K x N) in shared memory read through a 64-bit
shared memory descriptor, A (M x K) in shared memory (a descriptor) or tensor memory.
The shapes and types are not in the opcode but in the 32-bit *instruction descriptor*
``idesc`` (:func:`make_instr_descriptor`); the opcode carries only the ``.kind``.

Arithmetic: ``datapath.mma`` with the sm_100a tcgen05 datapaths of ``arch.py`` (one
truncated fused dot-product-add per instruction, F = 25, RZ to fp32 or RNE to f16;
kind::i8 exact modulo 2**32, or clamped with the idesc's saturate bit). Checked bit for
bit against MMA-Sim 2.1.1's Blackwell model, not against hardware (none was available).

* ``enable-input-d`` false: ``D = A @ B`` (C taken as +0; may be a traced predicate);
* ``scale-input-d`` s (kind::f16 and kind::tf32 only, 0..15): ``D = A @ B + D * 2**-s``,
  the scaled D entering the fused sum exactly (its exponent lowered after the
  subnormal rule; a model: MMA-Sim does not cover it);
* idesc negate-A / negate-B (float kinds) flip the sign bit of every element;
  transpose-A / transpose-B select the M/N-major shared-memory layout.

Not modelled (refused with an error that says so): ``cta_group::2`` (a CTA pair sharing
A, B and D across two shared and tensor memories) and ``.ws`` (warp-specialised, with
collector buffers and zero-column masks), whose data movement the ISA describes but
whose arithmetic no reference model covers; sparse (``.sp``) and block-scaled kinds;
``disable-output-lane``; the tensor-memory address space itself (tensor memory operands
are logical (M, N) / (M, K) arrays here); a non-zero descriptor base offset with a
swizzle, the 128-byte swizzle with 32-byte atoms and the absolute LBO mode.

Operands are arrays of raw bits (uint16 f16/bf16, uint32 tf32: the whole fp32 word,
uint8 e4m3/e5m2/u8, int8 s8; fp6 / fp4 one element per uint8 byte as in shared memory,
e3m2 / e2m3 in bits 5:0 and e2m1 in bits 5:2, the other bits 0: ``tcgen05_mma_logical``
refuses others, or reports them in ``jaxwarp.checked`` when traced) or the dtype
``datapath.mma`` takes (float16, bfloat16, float32, float8_*); D is float32 (f32),
float16 (f16) or int32 (s32). Leading batch axes broadcast.

Example:
    >>> import jax.numpy as jnp
    >>> q = "m64n8k16.kind::f16.f32.f16.f16"
    >>> a = jnp.ones((64, 16), jnp.float16); b = jnp.ones((16, 8), jnp.float16)
    >>> d = tcgen05_mma_logical(q, a, b, jnp.full((64, 8), 8.0, jnp.float32))
    >>> float(d[0, 0])
    24.0
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxwarp._src import checks
from jaxwarp._src.arithmetic import datapath
from jaxwarp._src.arithmetic.datapath_checks import check_code_bits
from jaxwarp._src.catalogue.arch import Target, check_target, supported_target
from jaxwarp._src.instructions.tcgen05_parse import (
    BITS_DTYPE,
    BYTE_CODES,
    D_DTYPE,
    FLOAT_TYPES,
    Tcgen05Instruction,
    check_modifiers,
    decode_instr_descriptor,
    flag,
    kind_of,
    parse_tcgen05,
    strip_opcode,
)
from jaxwarp._src.layouts.smem import (
    SmemDescriptorFields,
    as_smem,
    check_range,
    decode_smem_descriptor,
    descriptor_arg,
    gather,
    keep_c,
    layout_addresses,
    logical_bits,
    scatter,
)
from jaxwarp._src.numerics import bitops
from jaxwarp._src.numerics.formats import FORMATS

__all__ = [
    "read_operand", "tcgen05_mma", "tcgen05_mma_logical", "write_operand",
]

_SIGN = {t: 1 << (FORMATS[t].unpacked_lsb + FORMATS[t].bits - 1) if t in BYTE_CODES
         else 1 << (np.dtype(BITS_DTYPE[t]).itemsize * 8 - 1) for t in FLOAT_TYPES}


def _storage(bits: jax.Array, t: str) -> jax.Array:
    """Raw bits -> the dtype ``datapath.mma`` takes (fp6 / fp4: the code, low bits)."""
    if t in BYTE_CODES:
        return FORMATS[t].code_in_byte(bits)
    return bitops.from_bits(bits, datapath.STORAGE_DTYPE[t])


# --------------------------------------------------------------------------------------
# Shared memory.


def _fields(desc: Any, what: str) -> SmemDescriptorFields:
    descriptor_arg(desc, what, decode_smem_descriptor, "make_smem_descriptor")
    f = decode_smem_descriptor(desc)
    if f.base_offset and f.swizzle:
        raise NotImplementedError(
            f"{what}: base_offset={f.base_offset} with a swizzle is not modelled; use 0 "
            f"with patterns that start on their repeat boundary")
    if f.swizzle == "128B_base32B":
        raise NotImplementedError(f"{what}: the 128-byte swizzle with 32-byte atoms (mode "
                                  f"1) is not modelled")
    if f.lbo_mode:
        raise NotImplementedError(f"{what}: the absolute LBO mode (bit 52; sm_103a, 48-byte "
                                  f"K) is not modelled")
    return f


def _addresses(desc: Any, instr: Tcgen05Instruction, operand: str, transpose: Any):
    checks.static_choice(operand, "operand", ("a", "b"))
    t = instr.a_format if operand == "a" else instr.b_format
    rows = instr.m if operand == "a" else instr.n
    f = _fields(desc, f"desc_{operand}")
    bits = np.dtype(BITS_DTYPE[t]).itemsize * 8
    addr, bit = layout_addresses(f.start_address, f.leading_byte_offset,
                                 f.stride_byte_offset, f.swizzle, rows, instr.k, bits,
                                 int(flag(transpose, "transpose")))
    return addr, bit, bits, t, f


def read_operand(smem: Any, desc: Any, qualifier: Any, operand: str, *,
                 transpose: bool = False) -> jax.Array:
    """Reads A (M x K) or B (K x N) from shared memory through a tcgen05 shared memory
    descriptor, in the canonical layouts (``smem.layout_addresses``).

    Args:
      smem: (..., nbytes) uint8. desc: the descriptor (static int).
      qualifier: the configuration. operand: ``"a"`` or ``"b"``.
      transpose: the operand is M/N-major (the idesc's transpose bit).

    Returns:
      Logical A (..., M, K) or B (..., K, N) as raw bits (``BITS_DTYPE``).

    Example:
      >>> import jax.numpy as jnp
      >>> smem = jnp.arange(4096, dtype=jnp.uint32).astype(jnp.uint8)
      >>> from jaxwarp import make_smem_descriptor
      >>> b = read_operand(smem, make_smem_descriptor(2048, 128, 256),
      ...                  "m64n8k32.kind::i8.s32.u8.u8", "b")
      >>> b.shape, int(b[1, 0]), int(b[0, 1])
      ((32, 8), 1, 16)
    """
    instr = parse_tcgen05(qualifier)
    addr, bit, bits, t, f = _addresses(desc, instr, operand, transpose)
    s = as_smem(smem)
    check_range(addr, s.shape[-1], f"operand {operand}", desc, f)
    v = gather(s, addr, bit, bits, BITS_DTYPE[t])
    return v if operand == "a" else jnp.swapaxes(v, -1, -2)


def write_operand(smem: Any, desc: Any, qualifier: Any, operand: str, x: Any, *,
                  transpose: bool = False) -> jax.Array:
    """Stores logical A (M x K) or B (K x N) where ``desc`` points: the inverse of
    :func:`read_operand` for a layout whose elements do not overlap (other bytes keep
    their value).

    Args:
      smem: (nbytes,) uint8. desc, qualifier, operand, transpose: as :func:`read_operand`.
      x: the operand as raw bits (``BITS_DTYPE``; any integer dtype of that width).

    Returns:
      The updated (nbytes,) uint8 shared memory.

    Example:
      >>> import jax.numpy as jnp
      >>> from jaxwarp import make_smem_descriptor
      >>> q = "m64n8k16.kind::f16.f32.f16.f16"
      >>> b = jnp.arange(128, dtype=jnp.uint16).reshape(16, 8)
      >>> d = make_smem_descriptor(0, 16, 256, swizzle=32)
      >>> smem = write_operand(jnp.zeros(512, jnp.uint8), d, q, "b", b)
      >>> bool((read_operand(smem, d, q, "b") == b).all())
      True
    """
    instr = parse_tcgen05(qualifier)
    addr, bit, bits, t, f = _addresses(desc, instr, operand, transpose)
    s = as_smem(smem)
    if s.ndim != 1:
        raise ValueError(f"write_operand takes one shared memory (nbytes,), got {s.shape}; "
                         f"use jax.vmap for many")
    x = jnp.asarray(x)
    want = (instr.m, instr.k) if operand == "a" else (instr.k, instr.n)
    if x.shape != want:
        raise ValueError(f"x must be operand {operand} of shape {want}, got {x.shape}")
    if not jnp.issubdtype(x.dtype, jnp.integer) or x.dtype.itemsize * 8 != bits:
        raise TypeError(f"x must hold {t} elements as {bits}-bit integers "
                        f"({BITS_DTYPE[t]}), got {x.dtype}")
    check_range(addr, s.shape[-1], f"operand {operand}", desc, f)
    return scatter(s, addr, bit, bits, x if operand == "a" else x.T)


# --------------------------------------------------------------------------------------
# Arithmetic on logical matrices.


def _target(arch: Any, instr: Tcgen05Instruction) -> Target:
    target = supported_target(arch)
    check_target(target, "tcgen05", instr.a_format, instr.b_format, instr.k)
    return target


def _bits_arg(x: Any, name: str, t: str, shape: tuple[int, int]) -> jax.Array:
    """A logical operand as raw bits: its bits dtype, or the datapath storage dtype."""
    return logical_bits(x, name, t, shape, BITS_DTYPE[t], datapath.STORAGE_DTYPE.get(t))


def _d_arg(d: Any, instr: Tcgen05Instruction) -> jax.Array:
    d = jnp.asarray(d)
    want = D_DTYPE[instr.d_format]
    if d.ndim < 2 or d.shape[-2:] != (instr.m, instr.n):
        raise ValueError(f"d must have shape (..., {instr.m}, {instr.n}) (D in tensor memory), "
                         f"got {d.shape}")
    if d.dtype != want:
        raise TypeError(f"d must have dtype {want} for dtype {instr.d_format!r}, got {d.dtype}")
    return d


def _arith(instr: Tcgen05Instruction, a_bits, b_bits, d, *, neg_a: bool, neg_b: bool,
           saturate: bool, enable_input_d: Any, scale_input_d: int,
           target: Target) -> jax.Array:
    if neg_a:
        a_bits = a_bits ^ jnp.asarray(_SIGN[instr.a_format], a_bits.dtype)
    if neg_b:
        b_bits = b_bits ^ jnp.asarray(_SIGN[instr.b_format], b_bits.dtype)
    c = keep_c(d, enable_input_d, "enable_input_d")
    batch = np.broadcast_shapes(a_bits.shape[:-2], b_bits.shape[:-2], c.shape[:-2])
    a_bits = jnp.broadcast_to(a_bits, batch + a_bits.shape[-2:])
    b_bits = jnp.broadcast_to(b_bits, batch + b_bits.shape[-2:])
    c = jnp.broadcast_to(c, batch + c.shape[-2:])
    return datapath.mma(_storage(a_bits, instr.a_format), _storage(b_bits, instr.b_format), c,
                        a_format=instr.a_format, b_format=instr.b_format, c_format=instr.d_format,
                        d_format=instr.d_format, arch=target.name, satf=saturate,
                        instruction="tcgen05", instruction_k=instr.k,
                        scale_input_d=scale_input_d)


def _scale_input_d(value: Any, instr: Tcgen05Instruction) -> int:
    v = checks.static_int(value, "scale_input_d")
    if v and instr.kind not in ("f16", "tf32"):
        raise ValueError(f"scale_input_d={v} exists for kind::f16 and kind::tf32 only, not "
                         f"kind::{instr.kind}")
    if not 0 <= v <= 15:
        raise ValueError(f"scale_input_d={v} must be in 0..15")
    return v


def tcgen05_mma_logical(qualifier: Any, a: Any, b: Any, d: Any, *, neg_a: bool = False,
                        neg_b: bool = False, saturate: bool = False,
                        enable_input_d: Any = True, scale_input_d: int = 0,
                        arch: Any = "sm_100a") -> jax.Array:
    """One ``tcgen05.mma.cta_group::1`` on logical matrices: the new D.

    ``D = (±A) @ (±B) + D * 2**-scale_input_d`` (``D = (±A) @ (±B)`` when
    ``enable_input_d`` is false): one truncated fused dot-product-add per instruction
    (F = 25, toward zero to fp32 or to nearest even to f16; kind::i8 exact modulo
    2**32, or clamped with ``saturate``), checked against MMA-Sim 2.1.1's Blackwell
    model, not against hardware. ``scale_input_d`` lowers D's exponent before D enters
    the fused sum exactly (a model: MMA-Sim does not cover it).

    Args:
      qualifier: ``m{M}n{N}k{K}.kind::{kind}.{D}.{A}.{B}`` (MMA-Sim's spelling, optionally
        after ``tcgen05.mma.cta_group::1.``; see :func:`parse_tcgen05`).
      a: (..., M, K) raw bits (``BITS_DTYPE``) or the datapath dtype of A's type.
      b: (..., K, N), likewise.
      d: (..., M, N) D in tensor memory: float32 (f32), float16 (f16) or int32 (s32).
      neg_a, neg_b: the idesc's negate bits (float kinds).
      saturate: kind::i8: clamp the exact ``A @ B + D`` to the int32 range.
      enable_input_d: the enable-input-d predicate (may be traced; any shape that
        broadcasts to the batch shape); false: ``D = A @ B``.
      scale_input_d: 0..15, kinds f16 and tf32 only.
      arch: ``"sm_100a"`` or ``"sm_103a"``.

    Returns:
      The new D, (..., M, N) in d's dtype.

    Raises:
      ValueError/TypeError: a bad qualifier, shape, dtype, modifier or target (named).

    Example:
      >>> import jax.numpy as jnp
      >>> q = "m128n16k32.kind::i8.s32.s8.u8"
      >>> a = jnp.full((128, 32), -1, jnp.int8); b = jnp.full((32, 16), 200, jnp.uint8)
      >>> int(tcgen05_mma_logical(q, a, b, jnp.zeros((128, 16), jnp.int32))[0, 0])
      -6400
    """
    a, b, d = checks.array_args(a=a, b=b, d=d)
    instr = parse_tcgen05(qualifier)
    target = _target(arch, instr)
    flags = [flag(v, n) for v, n in ((neg_a, "neg_a"), (neg_b, "neg_b"),
                                       (saturate, "saturate"))]
    check_modifiers(instr, flags[0], flags[1], False, False, flags[2])
    s = _scale_input_d(scale_input_d, instr)
    a_bits = _bits_arg(a, "a", instr.a_format, (instr.m, instr.k))
    b_bits = _bits_arg(b, "b", instr.b_format, (instr.k, instr.n))
    check_code_bits(a_bits, "a", instr.a_format, "smem", "tcgen05_mma_logical")
    check_code_bits(b_bits, "b", instr.b_format, "smem", "tcgen05_mma_logical")
    return _arith(instr, a_bits, b_bits, _d_arg(d, instr), neg_a=flags[0], neg_b=flags[1],
                  saturate=flags[2], enable_input_d=enable_input_d, scale_input_d=s,
                  target=target)


def tcgen05_mma(opcode: Any, d: Any, a: Any, desc_b: Any, idesc: Any, smem: Any, *,
                enable_input_d: Any = True, scale_input_d: int = 0,
                arch: Any = "sm_100a") -> jax.Array:
    """``tcgen05.mma.cta_group::1.kind [d-tmem], a-desc|[a-tmem], b-desc, idesc,
    enable-input-d {, scale-input-d}``: the new D.

    A and B are read from ``smem`` where their shared memory descriptors point, in the
    layout the instruction descriptor's transpose bits select (K-major, or M/N-major
    when set); shape, types, negation and saturation come from ``idesc``.

    Args:
      opcode: ``"tcgen05.mma.cta_group::1.kind::f16"`` or just ``"kind::f16"`` (the kind
        says how ``idesc``'s type fields read).
      d: (..., M, N) D in tensor memory (float32, float16 or int32, as idesc's dtype).
      a: A's shared memory descriptor (a static int), or A in tensor memory: an
        (..., M, K) array as :func:`tcgen05_mma_logical` takes (K-major only).
      desc_b: B's shared memory descriptor (static int).
      idesc: the 32-bit instruction descriptor (static int; :func:`make_instr_descriptor`).
      smem: (..., nbytes) uint8 shared memory (byte address = index).
      enable_input_d, scale_input_d, arch: as :func:`tcgen05_mma_logical`.

    Returns:
      The new D, (..., M, N).

    Raises:
      ValueError/TypeError/NotImplementedError: as :func:`decode_instr_descriptor` and
        :func:`tcgen05_mma_logical`; a descriptor that points outside ``smem`` or a
        shared-memory layout that is not modelled.

    Example:
      >>> import jax.numpy as jnp
      >>> from jaxwarp import make_smem_descriptor
      >>> from jaxwarp import make_instr_descriptor
      >>> q = "m64n8k32.kind::i8.s32.s8.s8"
      >>> da, db = make_smem_descriptor(0, 128, 256), make_smem_descriptor(2048, 128, 256)
      >>> smem = jnp.zeros(4096, jnp.uint8).at[:2048].set(1).at[2048:].set(2)
      >>> d = tcgen05_mma("kind::i8", jnp.zeros((64, 8), jnp.int32), da, db,
      ...                 make_instr_descriptor(q), smem)
      >>> int(d[63, 7])
      64
    """
    if not isinstance(opcode, str):
        raise TypeError(f"opcode must be a str such as 'tcgen05.mma.cta_group::1.kind::f16', "
                        f"got {type(opcode).__name__} {opcode!r}")
    parts = strip_opcode(opcode.strip().split("."), opcode)
    if len(parts) != 1:
        raise ValueError(f"opcode {opcode!r}: expected 'tcgen05.mma.cta_group::1.kind::KIND' "
                         f"(shape and types are in idesc)")
    kind = kind_of(parts[0], opcode)
    smem, d = checks.array_args(smem=smem, d=d)
    a_from_smem = np.ndim(a) == 0
    fields = decode_instr_descriptor(idesc, kind)
    instr = fields.instruction
    target = _target(arch, instr)
    s = _scale_input_d(scale_input_d, instr)
    d = _d_arg(d, instr)
    mem = as_smem(smem)
    if a_from_smem:
        a_bits = read_operand(mem, a, instr, "a", transpose=fields.transpose_a)
    else:
        if fields.transpose_a:
            raise ValueError("A from tensor memory is K-major: idesc's transpose-A bit must "
                             "be 0")
        a_bits = _bits_arg(checks.array_arg(a, "a"), "a", instr.a_format, (instr.m, instr.k))
    b_bits = read_operand(mem, desc_b, instr, "b", transpose=fields.transpose_b)
    return _arith(instr, a_bits, b_bits, d, neg_a=fields.neg_a, neg_b=fields.neg_b,
                  saturate=fields.saturate, enable_input_d=enable_input_d,
                  scale_input_d=s, target=target)
