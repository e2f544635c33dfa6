"""PTX ``mma.sync.aligned``: where A, B, C and D sit in the registers of a warp.

The register side of the PTX warp-level ``mma`` front-end (PTX ISA 9.7.14.5): the named
layouts of every operand (:func:`operand_layout`, :func:`fragment_coords`) and the maps
between logical operands and one warp's registers (:func:`to_registers`,
:func:`from_registers`). The qualifiers are parsed in
:mod:`jaxwarp._src.catalogue.mma_sync_parse`. A sparse ``mma.sp`` record (``parse_mma_sp``'s)
is taken too: its operands have the layouts of the dense instructions its ``dense(use)``
names (:func:`operand_instruction`); ``jaxwarp.to_registers`` parses ``mma.sp`` opcodes.

Registers
---------
A warp holds each operand as a ``(32, nregs)`` array: a leading lane axis and one column
per 32-bit register (``uint32``), or per 64-bit register (``uint64``) for f64. A register
holds ``P = 32 // bits`` elements, the lower-numbered element in the lower bits: f16 and
bf16 two, e4m3/e5m2/s8/u8 four, s4/u4 eight, b1 thirty-two, f32/tf32/s32 one (its bits);
f64 one per ``uint64``. Integers are stored as their two's-complement bit fields.
``.kind::f8f6f4`` (sm_120a) holds every A / B element in a byte of its own, four to a
register as e4m3: e2m3 / e3m2 codes in bits 5:0 of the byte, e2m1 codes in bits 5:2
(PTX ISA, "Packing format"; the other bits are zero when written and ignored when
read); their logical operands are the uint8 codes (the format registry's storage).

groupID ``g = lane // 4`` and threadID_in_group ``t = lane % 4``. All m16n8k* and m8n8k*
fragments are built from *core matrices* of 8 rows x 4 registers (4P elements, 128 bits
per row), in which lane ``l`` holds row ``l // 4``, register-column ``l % 4``::

    core matrix (8 rows, 4P elements per row; P elements per cell, low one first)
              elems 0..P-1  P..2P-1   2P..3P-1  3P..4P-1
      row 0:     T0          T1         T2        T3
      row 1:     T4          T5         T6        T7
      ...
      row 7:     T28         T29        T30       T31

A (m16 x k, row): a 2 x (k/4P) grid of cores; register r is the core in row-block r % 2,
column-block r // 2::

    f16 m16n8k16 A (16 x 16; P = 2)      s8 m16n8k32 A (16 x 32; P = 4)
                cols 0-7   cols 8-15                 cols 0-15  cols 16-31
    rows 0-7     reg 0      reg 2        rows 0-7     reg 0      reg 2
    rows 8-15    reg 1      reg 3        rows 8-15    reg 1      reg 3

B (k x n8, col): k/4P cores stacked along k, each *transposed*: register r holds rows
(k) ``r·4P + t·P … + P-1`` of column ``g``::

    f16 m16n8k16 B (16 x 8)             lane l: column n = l // 4
      k 0-7   : reg 0   (k = 2t, 2t+1)
      k 8-15  : reg 1   (k = 8+2t, 8+2t+1)

C/D (m16 x n8): elements c0, c1 in row ``g``, c2, c3 in row ``g + 8``, columns
``2t, 2t+1``; f32/s32 one register each, f16 two registers of two (row g, row g+8)::

    f32 C/D 16 x 8                        f16 C/D 16 x 8
              cols 2t    2t+1                       cols (2t, 2t+1)
    row g     c0 reg0    c1 reg1          row g     reg 0 (low, high)
    row g+8   c2 reg2    c3 reg3          row g+8   reg 1

m8n8k* (integer, b1, f64 m8n8k4): A is one row of cores (row g, elements t·P …), B one
column of transposed cores, C/D c0, c1 at row g, columns 2t, 2t+1. f64 at m16n8k*
follows the m16 rules with P = 1 and 4 "elements" per core row.

m8n8k4 with f16 (9.7.14.5.1) is different: the warp runs **four independent MMAs**, one
per *quadpair* ``q = (lane // 4) % 4`` (lanes 4q..4q+3 and 4q+16..4q+19); ``hi = 4`` for
lanes 16..31, ``i = lane % 4``. Logical operands of such an instruction carry an extra
axis of 4 in front of (rows, cols)::

    A .row (8 x 4): lane holds row i + hi, cols 0..3 (2 regs)
    A .col        : lane holds col i,      rows hi .. hi+3
    B .row (4 x 8): lane holds row i,      cols hi .. hi+3
    B .col        : lane holds col i + hi, rows 0..3
    C/D f16 (8x8) : lane holds row i + hi, cols 0..7 (4 regs)
    C/D f32       : element e at row (lane & 1) + (e & 2) + hi,
                    col (e & 4) + (lane & 2) + (e & 1) (8 regs)
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxwarp._src import checks
from jaxwarp._src.catalogue.mma_sync_parse import (
    ELEMENT_BITS,
    LOGICAL_DTYPE,
    USES,
    WARP_SIZE,
    MmaInstruction,
    need_x64,
    parse_mma,
)
from jaxwarp._src.layouts import layouts
from jaxwarp._src.numerics import bitops
from jaxwarp._src.numerics.formats import FORMATS

__all__ = [
    "fragment_coords",
    "operand_instruction",
    "operand_layout",
    "to_registers",
    "from_registers",
    "pack",
    "unpack",
    "regs_arg",
]


def operand_layout(instr: MmaInstruction, use: str) -> layouts.Layout:
    """The :class:`~jaxwarp._src.layouts.layouts.Layout` of operand ``use`` of ``instr``.

    A named layout of ``layouts`` (``MMA_A_M16``, ``MMA_A_M8``, ``MMA_B`` packed with
    ``P`` elements per register; ``MMA_CD_M16N8``, ``MMA_CD_M8N8``; the quadpair layouts
    of f16 m8n8k4), cut to the operand's elements and logical shape.

    Example:
      >>> lay = operand_layout(parse_mma("m16n8k16.row.col.f32.f16.f16.f32"), "a")
      >>> lay.shape, lay.num_elements, lay.elem_bases
      ((16, 16), 8, ((0, 1), (8, 0), (0, 8)))
    """
    checks.static_choice(use, "use", USES)
    P = instr.elems_per_reg(use)
    E = instr.nregs(use) * P
    name = f"mma.sync.aligned.{instr.qualifier} {use.upper()}"
    if instr.quadpair:
        if use == "a":
            base = layouts.MMA_M8N8K4_A_ROW if instr.a_layout == "row" else \
                layouts.MMA_M8N8K4_A_COL
        elif use == "b":
            base = layouts.MMA_M8N8K4_B_ROW if instr.b_layout == "row" else \
                layouts.MMA_M8N8K4_B_COL
        elif instr.elem_type(use) == "f16":
            base = layouts.MMA_M8N8K4_CD_F16
        else:
            base = layouts.MMA_M8N8K4_CD_F32
        return base.take(E, instr.logical_shape(use), name)
    if use in ("c", "d"):
        base = layouts.MMA_CD_M16N8 if instr.m == 16 else layouts.MMA_CD_M8N8
    elif use == "a":
        base = (layouts.MMA_A_M16 if instr.m == 16 else layouts.MMA_A_M8).packed(P, 1)
    else:
        base = layouts.MMA_B.packed(P, 0)
    return base.take(E, instr.dims(use), name)


@functools.cache
def fragment_coords(instr: MmaInstruction, use: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Where each register element of a lane sits in the logical operand (PTX ISA 9.7.14.5).

    Args:
      instr: the instruction (``parse_mma``'s result).
      use: ``"a"``, ``"b"``, ``"c"`` or ``"d"``.

    Returns:
      (q, row, col), int arrays of shape (32, nregs * P): element ``e`` of lane ``l``
      (register ``e // P``, bits ``(e % P) * bits …``) is entry (row, col) of MMA ``q``
      of the warp (``q`` is 0 except for f16 m8n8k4, which runs one MMA per quadpair);
      :func:`operand_layout`'s coordinates.

    Example:
      >>> q, r, c = fragment_coords(parse_mma("m16n8k16.row.col.f32.f16.f16.f32"), "a")
      >>> [(int(r[5, e]), int(c[5, e])) for e in range(0, 8, 2)]   # lane 5: g=1, t=1
      [(1, 2), (9, 2), (1, 10), (9, 10)]
    """
    # Fresh writable arrays, as before: indexing with the layout's cached read-only arrays,
    # once used with x64 off, failed with x64 on (int32 against int64 in JAX's indexing).
    coords = tuple(np.array(c) for c in operand_layout(instr, use).coords())
    if instr.quadpair:
        return coords
    return (np.zeros_like(coords[0]), *coords)


@functools.cache
def _inverse(instr: MmaInstruction, use: str) -> tuple[np.ndarray, np.ndarray]:
    """(lane, element) arrays over the logical shape (q, rows, cols)."""
    q, row, col = fragment_coords(instr, use)
    rows, cols = instr.dims(use)
    lane_of = np.full((instr.mmas_per_warp, rows, cols), -1, np.int64)
    e_of = np.full_like(lane_of, -1)
    lanes = np.broadcast_to(np.arange(WARP_SIZE)[:, None], q.shape)
    es = np.broadcast_to(np.arange(q.shape[1])[None, :], q.shape)
    lane_of[q, row, col] = lanes
    e_of[q, row, col] = es
    assert (lane_of >= 0).all()
    return lane_of, e_of


def _uint_of(bits: int):
    return bitops.uint_dtype(bits).type


def _elem_bits(x: jax.Array, ty: str, word: Any, lsb: int = 0) -> jax.Array:
    """Logical elements -> their bit fields, in the register word dtype (a code-stored
    format's code at bit ``lsb`` of its field)."""
    bits = ELEMENT_BITS[ty]
    if lsb or FORMATS[ty].code_storage:
        return (x.astype(word) & word(bitops.low_mask(FORMATS[ty].code_bits))) << word(lsb)
    if bits in (8, 16, 32, 64) and not jnp.issubdtype(x.dtype, jnp.integer):
        return bitops.uint_view(x).astype(word)
    if bits == 64:
        return lax.bitcast_convert_type(x, word)
    v = bitops.uint_view(x) if x.dtype.itemsize * 8 in (8, 16, 32) else x
    return v.astype(word) & word(bitops.low_mask(bits))


def _bits_elem(v: jax.Array, ty: str, lsb: int = 0) -> jax.Array:
    """Bit fields (register word dtype) -> logical elements (a code-stored format's code
    read from bit ``lsb`` of its field; the other bits of the field are ignored)."""
    bits, dt = ELEMENT_BITS[ty], LOGICAL_DTYPE[ty]
    if lsb or FORMATS[ty].code_storage:
        return ((v >> lsb) & ((1 << FORMATS[ty].code_bits) - 1)).astype(dt)
    if bits == 64:
        return lax.bitcast_convert_type(v, dt)
    if bits in (8, 16, 32):
        return bitops.from_bits(v.astype(_uint_of(bits)), dt)
    if ty == "s4":
        return bitops.sext(v, 4).astype(dt)
    return v.astype(dt)


def operand_instruction(qualifier: Any, use: str) -> tuple[MmaInstruction, str]:
    """The dense instruction whose fragment layout operand ``use`` of ``qualifier`` has,
    and the instruction's name for messages.

    ``qualifier`` is an ``mma.sync`` qualifier (a string or :func:`parse_mma`'s record),
    or a sparse record (:func:`jaxwarp.parse_mma_sp`'s): its ``dense(use)`` names the dense
    layout (the stored A: A of m16n8k(K/2); B, C, D: those of m16n8kK, which need not
    exist as a dense instruction).

    Example:
      >>> operand_instruction("m16n8k16.row.col.f32.f16.f16.f32", "b")[0].shape
      (16, 8, 16)
    """
    if isinstance(qualifier, (str, MmaInstruction)):
        instr = parse_mma(qualifier)
        checks.static_choice(use, "use", USES)
        return instr, instr.qualifier
    dense, ptx = getattr(qualifier, "dense", None), getattr(qualifier, "ptx", None)
    if not callable(dense) or not isinstance(ptx, str):
        raise TypeError(f"qualifier must be a str like 'm16n8k16.row.col.f32.f16.f16.f32' or "
                        f"'mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.f16."
                        f"f16.f32' (static), or parse_mma / parse_mma_sp's record; got "
                        f"{type(qualifier).__name__}")
    checks.static_choice(use, "use", USES)
    instr = dense(use)
    if not isinstance(instr, MmaInstruction):
        raise TypeError(f"{ptx} is not a warp-level instruction: its registers are a "
                        f"warpgroup's (jaxwarp.wgmma_sp; the accumulator as the dense "
                        f"wgmma's)")
    part = f"stored A ({instr.m} x {instr.k})" if use == "a" else use.upper()
    return instr, f"{ptx} (its {part}: the fragment layout of dense m{instr.m}n{instr.n}k{instr.k})"


def to_registers(qualifier: Any, use: str, x: Any) -> jax.Array:
    """Logical operand -> one warp's registers (the fragment the instruction reads).

    A register holds ``32 // bits`` elements, the lower-numbered element in the lower
    bits (``.kind::f8f6f4``: one element per byte, e2m3 / e3m2 codes in bits 5:0, e2m1
    in bits 5:2); which lane and register hold which element is the PTX ISA's fragment
    layout of the instruction (its "Matrix Fragments for mma.mMnNkK" sections).

    Sparse ``mma.sp`` (a :func:`jaxwarp.parse_mma_sp` record here; ``jaxwarp.to_registers``
    also parses its opcode strings): ``"a"`` is the stored half of A (16 x K/2, as
    ``jaxwarp.sparse.compress_2_4`` gives it) in the layout of A of the dense
    m16n8k(K/2); ``"b"`` (K x 8), ``"c"`` and ``"d"`` are laid out as those of the dense
    m16n8kK (docs/sparse.md, "Register layouts").

    Args:
      qualifier: the instruction (a string or :func:`jaxwarp.parse_mma`'s result, or
        :func:`jaxwarp.parse_mma_sp`'s), static.
      use: ``"a"``, ``"b"``, ``"c"`` or ``"d"``, static.
      x: (..., rows, cols) in the logical dtype of the operand's type (as
        :func:`jaxwarp.mma_sync_ptx_logical` takes it; ``.kind::f8f6f4``'s elements as
        uint8 codes); for f16 m8n8k4 (..., 4, rows, cols), one matrix per quadpair.

    Returns:
      (..., 32, nregs) uint32 (uint64 for f64).

    Example:
      >>> import jax.numpy as jnp
      >>> i = parse_mma("m16n8k16.row.col.f32.f16.f16.f32")
      >>> a = jnp.arange(256, dtype=jnp.float16).reshape(16, 16)
      >>> r = to_registers(i, "a", a)
      >>> r.shape, hex(int(r[1, 0]))    # lane 1: row 0, cols 2 (low half), 3 (high half)
      ((32, 4), '0x42004000')
    """
    instr, name = operand_instruction(qualifier, use)
    need_x64(instr, "to_registers")
    x = checks.array_arg(x, "x")
    ty = instr.elem_type(use)
    x = jnp.asarray(x)
    want = instr.logical_shape(use)
    if x.dtype != LOGICAL_DTYPE[ty]:
        raise TypeError(f"{use}: the logical {ty} operand of {name} must have dtype "
                        f"{LOGICAL_DTYPE[ty]}, got {x.dtype}")
    if x.ndim < len(want) or tuple(x.shape[x.ndim - len(want):]) != want:
        raise ValueError(f"{use}: the logical operand of {name} must have shape "
                         f"(..., {', '.join(map(str, want))}), got {tuple(x.shape)}")
    return pack(instr, use, x)


@functools.partial(jax.jit, static_argnums=(0, 1))
def pack(instr: MmaInstruction, use: str, x: jax.Array) -> jax.Array:
    """The jitted body of :func:`to_registers` (arguments already checked)."""
    ty = instr.elem_type(use)
    word = _uint_of(instr.word_bits)
    q, row, col = fragment_coords(instr, use)
    if not instr.quadpair:
        x = x[..., None, :, :]
    el = _elem_bits(x[..., q, row, col], ty, word, instr.elem_lsb(use))  # (..., 32, E)
    P = instr.elems_per_reg(use)
    el = el.reshape(el.shape[:-1] + (instr.nregs(use), P))
    shifts = (jnp.arange(P, dtype=jnp.uint32) * instr.elem_bits(use)).astype(word)
    return jnp.sum(el << shifts, axis=-1, dtype=word)  # disjoint bit fields: sum == or


def from_registers(qualifier: Any, use: str, regs: Any) -> jax.Array:
    """One warp's registers -> the logical operand (inverse of :func:`to_registers`).

    Args:
      qualifier: the instruction (a string or :func:`jaxwarp.parse_mma`'s result, or
        :func:`jaxwarp.parse_mma_sp`'s: the layouts of :func:`to_registers`), static.
      use: ``"a"``, ``"b"``, ``"c"`` or ``"d"``, static.
      regs: (..., 32, nregs) uint32 (uint64 for f64).

    Returns:
      (..., rows, cols) (f16 m8n8k4: (..., 4, rows, cols)) in the logical dtype.

    Example:
      >>> import jax.numpy as jnp
      >>> i = parse_mma("m8n8k32.row.col.s32.s4.s4.s32")
      >>> regs = jnp.full((32, 1), 0x89ABCDEF, jnp.uint32)
      >>> from_registers(i, "a", regs)[0, :8].tolist()   # low nibble first, sign-extended
      [-1, -2, -3, -4, -5, -6, -7, -8]
    """
    instr, name = operand_instruction(qualifier, use)
    need_x64(instr, "from_registers")
    regs = checks.array_arg(regs, "regs")
    r = regs_arg(instr, use, regs, f"{use} registers", name)
    return unpack(instr, use, r)


@functools.partial(jax.jit, static_argnums=(0, 1))
def unpack(instr: MmaInstruction, use: str, r: jax.Array) -> jax.Array:
    """The jitted body of :func:`from_registers` (arguments already checked)."""
    ty = instr.elem_type(use)
    P, bits = instr.elems_per_reg(use), instr.elem_bits(use)
    word = _uint_of(instr.word_bits)
    if P == 1:
        el = r
    else:
        shifts = (jnp.arange(P, dtype=jnp.uint32) * bits).astype(word)
        el = (r[..., None] >> shifts) & word((1 << bits) - 1)
        el = el.reshape(el.shape[:-2] + (-1,))
    lane_of, e_of = _inverse(instr, use)
    out = _bits_elem(el[..., lane_of, e_of], ty, instr.elem_lsb(use))
    return out if instr.quadpair else out[..., 0, :, :]


def regs_arg(instr: MmaInstruction, use: str, regs: Any, name: str,
             instr_name: str | None = None) -> jax.Array:
    """Registers of operand ``use`` as a (..., 32, nregs) array of the register dtype, or a
    TypeError naming ``name`` (and ``instr_name``, ``instr``'s qualifier when None)."""
    r = jnp.asarray(regs)
    n = instr.nregs(use)
    want = instr.reg_dtype()
    if r.ndim < 2 or r.shape[-2:] != (WARP_SIZE, n) or r.dtype != want:
        raise TypeError(f"{name} of {instr_name or instr.qualifier} must be a (..., 32, {n}) "
                        f"{want} array (a lane axis of 32 and {n} register(s) per lane, raw "
                        f"bits); got shape {tuple(r.shape)} dtype {r.dtype}")
    return r

