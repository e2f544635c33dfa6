"""PTX ``mma.sync.aligned``: the instruction table, register fragments and two entry points.

This is the front-end of the PTX warp-level ``mma`` instruction (PTX ISA 9.7.14.5,
"Warp-level matrix multiply-accumulate instructions: mma"). It knows which qualifier
strings exist, where every element of A, B, C and D sits in the registers of a warp, and
hands the arithmetic to :mod:`jaxwarp._src.tensorcore.datapath` (``datapath.mma`` for
floats and integers, ``datapath.bmma`` for ``b1``).

Instructions
------------
:func:`parse_mma` reads the text after ``mma.sync.aligned.``, e.g.
``"m16n8k32.row.col.f32.e4m3.e5m2.f32"``, into a frozen :class:`MmaInstruction`. It accepts
exactly the 94 configurations that ptxas of CUDA 13.0 accepts for sm_90a and the 50 of
``m16n8k32.row.col.kind::f8f6f4`` of sm_120a (:func:`mma_instructions` lists them): the
``"mma_sync"`` rows of the instruction
catalogue (``jaxwarp._src.tensorcore.isa.ROWS``; its table is in ``docs/extending.md``),
each with its shapes, (C, D) types, A/B pairings and minimum target per shape
(:attr:`MmaInstruction.min_arch`, :attr:`MmaInstruction.min_target`).

Only f16 m8n8k4 takes layouts other than ``.row.col``. ptxas rejects a mixed f16/f32
C/D at m16n8k*, C f32 with D f16 at m8n8k4, and any mixed C/D with fp8; the parser says
so. ``.and.popc`` needs sm_80 at every shape.

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
from typing import Any, Union

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxwarp._src import checks
from jaxwarp._src.numerics import bitops
from jaxwarp._src.numerics.formats import FORMATS
from jaxwarp._src.tensorcore import datapath, isa, layouts
from jaxwarp._src.tensorcore.arch import ArchModel, has, parse_target, supported_target

__all__ = [
    "MmaInstruction",
    "parse_mma",
    "mma_instructions",
    "fragment_coords",
    "operand_layout",
    "to_registers",
    "from_registers",
    "mma_sync_ptx",
    "mma_sync_ptx_logical",
]

WARP_SIZE = checks.WARP_SIZE
PREFIX = "mma.sync.aligned."
USES = ("a", "b", "c", "d")
LAYOUTS = ("row", "col")
B1_OPS = ("xor", "and")

_ROWS = isa.rows("mma_sync")
#: Every type name of a qualifier: the A/B types, then the C/D types (catalogue order).
TYPES = isa.a_formats("mma_sync") + tuple(t for t in isa.accumulator_types("mma_sync")
                                         if t not in isa.a_formats("mma_sync"))
# Element types: bits in a register, logical dtype (from the format registry).
_BITS = {t: isa.element_bits(t) for t in TYPES}
_LOGICAL = {t: jnp.dtype(isa.storage_dtype(t)) for t in TYPES}


def _shape_str(s: tuple[int, int, int]) -> str:
    return isa.shape_name(s)


def _row(a_format: str, shape: tuple[int, int, int], kind: str = "") -> isa.Row:
    row = isa.row_of("mma_sync", a_format, shape, kind)
    if row is None:
        raise KeyError((a_format, shape))
    return row


@dataclasses.dataclass(frozen=True)
class MmaInstruction:
    """One ``mma.sync.aligned`` configuration (frozen, hashable: usable as a static arg).

    Attributes:
      m, n, k: the shape.
      a_layout, b_layout: ``"row"`` or ``"col"``.
      a_format, b_format, c_format, d_format: PTX type names (``"f16"``, ``"e4m3"``, ``"s32"`` …).
      satfinite: ``.satfinite`` (integer types only).
      b1_op: ``"xor"`` or ``"and"`` for ``b1`` (``.xor.popc`` / ``.and.popc``), else None.
      kind: ``"f8f6f4"`` for ``.kind::f8f6f4`` (sm_120a: A and B of e4m3, e5m2, e3m2,
        e2m3, e2m1, one element per byte), else ``""``.
    """

    m: int
    n: int
    k: int
    a_layout: str
    b_layout: str
    a_format: str
    b_format: str
    c_format: str
    d_format: str
    satfinite: bool = False
    b1_op: str | None = None
    kind: str = ""

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.m, self.n, self.k)

    @property
    def qualifier(self) -> str:
        """The canonical text after ``mma.sync.aligned.`` (what :func:`parse_mma` reads)."""
        s = f"{_shape_str(self.shape)}.{self.a_layout}.{self.b_layout}"
        if self.kind:
            s += f".kind::{self.kind}"
        if self.satfinite:
            s += ".satfinite"
        s += f".{self.d_format}.{self.a_format}.{self.b_format}.{self.c_format}"
        if self.b1_op:
            s += f".{self.b1_op}.popc"
        return s

    @property
    def ptx(self) -> str:
        """The whole PTX opcode, ``mma.sync.aligned.…``."""
        return PREFIX + self.qualifier

    @property
    def quadpair(self) -> bool:
        """m8n8k4 with f16: the warp runs 4 independent MMAs, one per quadpair."""
        return self.a_format == "f16" and self.shape == (8, 8, 4)

    @property
    def mmas_per_warp(self) -> int:
        return 4 if self.quadpair else 1

    @property
    def word_bits(self) -> int:
        """Width of one register: 64 for f64, else 32."""
        return 64 if self.a_format == "f64" else 32

    @property
    def min_arch(self) -> int:
        """Lowest sm_XY (as XY) that has the instruction (PTX ISA target notes)."""
        row = _row(self.a_format, self.shape, self.kind)
        return max(row.min_sm, dict(row.b1_ops).get(self.b1_op, 0))

    @property
    def min_target(self) -> str:
        """The lowest target that has the instruction: ``"sm_80"``, or ``"sm_120a"``
        where only the ``a`` target of a generation has it (``.kind::f8f6f4``)."""
        row = _row(self.a_format, self.shape, self.kind)
        return f"sm_{self.min_arch}" + ("a" if row.arch_specific else "")

    def elem_bits(self, use: str) -> int:
        """Bits one element of operand ``use`` takes in a register: 8 for every A / B
        element of ``.kind::f8f6f4`` (fp6 / fp4 codes in a byte of their own)."""
        ty = self.elem_type(use)
        return 8 if self.kind and use in ("a", "b") else _BITS[ty]

    def elem_lsb(self, use: str) -> int:
        """Lowest bit of an element's code in its bit field (``.kind::f8f6f4``: e2m1 in
        bits 5:2 of its byte, e2m3 / e3m2 in bits 5:0; the format registry's
        ``unpacked_lsb``); 0 otherwise."""
        ty = self.elem_type(use)
        return FORMATS[ty].unpacked_lsb if self.kind and use in ("a", "b") else 0

    def elem_type(self, use: str) -> str:
        return {"a": self.a_format, "b": self.b_format, "c": self.c_format, "d": self.d_format}[use]

    def dims(self, use: str) -> tuple[int, int]:
        """(rows, cols) of one logical operand: A (m, k), B (k, n), C/D (m, n)."""
        return {"a": (self.m, self.k), "b": (self.k, self.n)}.get(use, (self.m, self.n))

    def logical_shape(self, use: str) -> tuple[int, ...]:
        """Trailing logical shape of one warp's operand ((4,) in front for quadpairs)."""
        return ((4,) if self.quadpair else ()) + self.dims(use)

    def elems_per_reg(self, use: str) -> int:
        return self.word_bits // self.elem_bits(use)

    def nregs(self, use: str) -> int:
        """Registers per lane for operand ``use`` (``"a"``, ``"b"``, ``"c"``, ``"d"``)."""
        rows, cols = self.dims(use)
        total = self.mmas_per_warp * rows * cols * self.elem_bits(use)
        return total // (WARP_SIZE * self.word_bits)

    def reg_dtype(self) -> jnp.dtype:
        return jnp.dtype(jnp.uint64) if self.word_bits == 64 else jnp.dtype(jnp.uint32)


def _allowed_instrs() -> tuple[MmaInstruction, ...]:
    """Every configuration of the catalogue's ``"mma_sync"`` rows, A type by A type."""
    out = []
    for a_format in isa.a_formats("mma_sync"):
        for row in isa.rows("mma_sync", a_format):
            if row.satfinite:
                variants = [(False, None), (True, None)]
            elif row.b1_ops:
                variants = [(False, op) for op, _ in row.b1_ops]
            else:
                variants = [(False, None)]
            for shape in row.shapes:
                for b_format in row.b_formats(a_format):
                    for c, d in row.cd:
                        for al, bl in row.layouts:
                            for sat, op in variants:
                                out.append(MmaInstruction(*shape, al, bl, a_format, b_format, c, d,
                                                    sat, op, row.kind))
    return tuple(out)


ALLOWED: tuple[MmaInstruction, ...] = _allowed_instrs()
_ALLOWED_SET = frozenset(ALLOWED)


def mma_instructions() -> tuple[str, ...]:
    """Every qualifier string :func:`parse_mma` accepts (94 that ptxas of CUDA 13.0
    accepts for sm_90a, and the 50 ``kind::f8f6f4`` ones of sm_120a).

    Example:
      >>> qs = mma_instructions()
      >>> len(qs), qs[0]
      (144, 'm8n8k4.row.col.f16.f16.f16.f16')
    """
    return tuple(i.qualifier for i in ALLOWED)


_PTXAS = "ptxas (CUDA 13.0, sm_90a) rejects it"


def _err(qual: str, msg: str) -> ValueError:
    return ValueError(f"mma qualifier {qual!r}: {msg}")


@functools.lru_cache(maxsize=512)
def _parse(qual: str) -> MmaInstruction:
    text = qual.strip()
    if text.startswith("mma."):
        if not text.startswith(PREFIX):
            raise _err(qual, f"the opcode must be {PREFIX!r} followed by the qualifiers")
        text = text[len(PREFIX):]
    parts = text.split(".")
    grammar = ("shape.alayout.blayout[.kind::f8f6f4][.satfinite].dtype.atype.btype.ctype"
               "[.xor|.and.popc]")
    if "" in parts:
        raise _err(qual, f"empty qualifier (two dots in a row, or a leading or trailing dot) "
                   f"at part {parts.index('') + 1}; expected {grammar}")
    for word in ("satfinite", "xor", "and", "popc") + LAYOUTS:
        count = parts.count(word) if word not in LAYOUTS else parts[3:].count(word)
        if count > (0 if word in LAYOUTS else 1):
            raise _err(qual, f"qualifier .{word} is duplicated or out of place; ptxas "
                       f"accepts each once, in the order {grammar}")
    if len(parts) < 7:
        raise _err(qual, f"too few parts ({len(parts)}); expected {grammar}")
    shape = isa.parse_shape(parts[0])
    all_shapes = sorted({s for r in _ROWS for s in r.shapes})
    if shape is None:
        raise _err(qual, f"shape {parts[0]!r} is not a shape like m16n8k16; allowed shapes: "
                   f"{', '.join(_shape_str(s) for s in all_shapes)}")
    for name, lay in (("a layout", parts[1]), ("b layout", parts[2])):
        if lay not in LAYOUTS:
            raise _err(qual, f"{name} {lay!r} is not allowed; allowed: .row, .col")
    rest = parts[3:]
    kind = ""
    if rest and rest[0].startswith("kind::"):
        kind, rest = rest[0][len("kind::"):], rest[1:]
        if kind not in isa.kinds("mma_sync"):
            raise _err(qual, f".kind::{kind} is not a kind of mma.sync; allowed: "
                       f"{', '.join('.kind::' + k for k in isa.kinds('mma_sync'))}")
    sat = False
    if rest and rest[0] == "satfinite":
        sat, rest = True, rest[1:]
    if len(rest) < 4:
        raise _err(qual, f"expected four types .dtype.atype.btype.ctype after the layouts "
                   f"(and optional .satfinite); got {rest}; grammar: {grammar}")
    tys, tail = rest[:4], rest[4:]
    for name, ty in zip(("d type", "a type", "b type", "c type"), tys, strict=True):
        if ty not in TYPES:
            raise _err(qual, f"{name} {ty!r} is not a type; allowed: {', '.join(TYPES)}")
    d_format, a_format, b_format, c_format = tys
    op = None
    if tail:
        if len(tail) != 2 or tail[0] not in B1_OPS or tail[1] != "popc":
            raise _err(qual, f"unexpected trailing parts {'.'.join(tail)!r}; only b1 takes "
                       f"a suffix, .xor.popc or .and.popc")
        op = tail[0]
    a_formats = isa.a_formats("mma_sync")
    if a_format not in a_formats:
        raise _err(qual, f"a type {a_format} is not an mma operand type; allowed: "
                   f"{', '.join(a_formats)}")
    b_formats, shapes = isa.b_formats("mma_sync", a_format), isa.shapes("mma_sync", a_format)
    if b_format not in b_formats:
        raise _err(qual, f"b type {b_format} is not allowed with a type {a_format}; allowed: "
                   f"{', '.join(b_formats)}")
    if shape not in shapes:
        raise _err(qual, f"shape {_shape_str(shape)} with a type {a_format} is not allowed; "
                   f"{a_format} allows {', '.join(_shape_str(s) for s in shapes)}")
    row = isa.row_of("mma_sync", a_format, shape, kind, b_format)
    if row is None:
        other = isa.row_of("mma_sync", a_format, shape, None, b_format)
        if kind:
            raise _err(qual, f".kind::{kind} does not take a type {a_format} with b type "
                       f"{b_format} at {_shape_str(shape)}")
        raise _err(qual, f"a type {a_format} with b type {b_format} at {_shape_str(shape)} "
                   f"needs .kind::{other.kind} after the layouts")
    if (parts[1], parts[2]) not in row.layouts:
        with_all = [f"{t} {_shape_str(s)}" for r in _ROWS if len(r.layouts) > 1
                    for t in r.a_formats for s in r.shapes]
        raise _err(qual, f"layouts .{parts[1]}.{parts[2]} are not allowed for {a_format} "
                   f"{_shape_str(shape)}; only .row.col ({', '.join(with_all)} allows all "
                   f"four)")
    cd = row.cd
    if (c_format, d_format) not in cd:
        allowed = ", ".join(f"c {c} / d {d}" for c, d in cd)
        why = ""
        if {c_format, d_format} <= {"f16", "f32"} and a_format in ("f16", "e4m3", "e5m2"):
            why = f"; {_PTXAS} (mixed f16/f32 accumulators)"
        raise _err(qual, f"c type {c_format} with d type {d_format} is not allowed for "
                   f"{a_format} {_shape_str(shape)}; allowed: {allowed}{why}")
    if sat and not row.satfinite:
        sat_types = "/".join(dict.fromkeys(t for r in _ROWS if r.satfinite for t in r.a_formats))
        raise _err(qual, f".satfinite is only allowed with {sat_types} operands, not "
                   f"{a_format}")
    if row.b1_ops and op not in dict(row.b1_ops):
        raise _err(qual, f"{a_format} needs the suffix "
                   f"{' or '.join(f'.{o}.popc' for o, _ in row.b1_ops)}")
    if not row.b1_ops and op is not None:
        raise _err(qual, f".{op}.popc is only allowed with b1 operands, not {a_format}")
    instr = MmaInstruction(*shape, parts[1], parts[2], a_format, b_format, c_format, d_format, sat,
                           op,
                     kind)
    assert instr in _ALLOWED_SET, instr  # the checks above mirror the table
    return instr


def parse_mma(qualifier: Union[str, MmaInstruction]) -> MmaInstruction:
    """Parses a PTX ``mma.sync.aligned`` qualifier string into an :class:`MmaInstruction`.

    Args:
      qualifier: the text after ``mma.sync.aligned.`` (the prefix itself may be
        included), e.g. ``"m16n8k16.row.col.f32.f16.f16.f32"``. An ``MmaInstruction`` is
        returned unchanged.

    Returns:
      The frozen :class:`MmaInstruction`.

    Raises:
      TypeError: not a string.
      ValueError: a configuration ptxas (CUDA 13.0, sm_90a) does not accept; the message
        names the wrong part and lists what is allowed.

    Example:
      >>> i = parse_mma("mma.sync.aligned.m16n8k32.row.col.satfinite.s32.s8.u8.s32")
      >>> i.shape, i.a_format, i.b_format, i.satfinite, i.nregs("a"), i.nregs("c")
      ((16, 8, 32), 's8', 'u8', True, 4, 4)
      >>> parse_mma("m16n8k32.row.col.f32.f16.f16.f32")
      Traceback (most recent call last):
      ...
      ValueError: mma qualifier 'm16n8k32.row.col.f32.f16.f16.f32': shape m16n8k32 with a type f16 is not allowed; f16 allows m8n8k4, m16n8k8, m16n8k16
    """
    if isinstance(qualifier, MmaInstruction):
        if qualifier not in _ALLOWED_SET:
            raise ValueError(f"{qualifier} is not an allowed mma configuration; see "
                             f"mma_instructions()")
        return qualifier
    if not isinstance(qualifier, str):
        raise TypeError(f"qualifier must be a str like 'm16n8k16.row.col.f32.f16.f16.f32' "
                        f"(static), got {type(qualifier).__name__}")
    return _parse(qualifier)


# --------------------------------------------------------------------------------------
# Register fragments.

def _check_arch(instr: MmaInstruction, arch: Any) -> None:
    if isinstance(arch, ArchModel):
        target = parse_target(arch.name)
    else:
        target = supported_target(arch)
    needs_a = _row(instr.a_format, instr.shape, instr.kind).arch_specific
    if not has(target, instr.min_arch, needs_a):
        need = instr.min_target if needs_a else f"{instr.min_target} or newer"
        raise ValueError(f"arch={target.name!r} lacks mma.sync.aligned.{instr.qualifier}: it "
                         f"needs {need}")


def operand_layout(instr: MmaInstruction, use: str) -> layouts.Layout:
    """The :class:`~jaxwarp._src.tensorcore.layouts.Layout` of operand ``use`` of ``instr``.

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


@functools.lru_cache(maxsize=None)
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


@functools.lru_cache(maxsize=None)
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
    bits = _BITS[ty]
    if lsb or FORMATS[ty].code_storage:
        return (x.astype(word) & word(bitops.low_mask(bits))) << word(lsb)
    if bits in (8, 16, 32, 64) and not jnp.issubdtype(x.dtype, jnp.integer):
        return bitops.uint_view(x).astype(word)
    if bits == 64:
        return lax.bitcast_convert_type(x, word)
    v = bitops.uint_view(x) if x.dtype.itemsize * 8 in (8, 16, 32) else x
    return v.astype(word) & word(bitops.low_mask(bits))


def _bits_elem(v: jax.Array, ty: str, lsb: int = 0) -> jax.Array:
    """Bit fields (register word dtype) -> logical elements (a code-stored format's code
    read from bit ``lsb`` of its field; the other bits of the field are ignored)."""
    bits, dt = _BITS[ty], _LOGICAL[ty]
    if lsb or FORMATS[ty].code_storage:
        return ((v >> lsb) & ((1 << bits) - 1)).astype(dt)
    if bits == 64:
        return lax.bitcast_convert_type(v, dt)
    if bits in (8, 16, 32):
        return bitops.from_bits(v.astype(_uint_of(bits)), dt)
    if ty == "s4":
        return bitops.sext(v, 4).astype(dt)
    return v.astype(dt)


def _instr_arg(qualifier: Any) -> MmaInstruction:
    return parse_mma(qualifier)


def _need_x64(instr: MmaInstruction, what: str) -> None:
    if instr.word_bits == 64:
        checks.require_x64(f"{what} with f64 operands")


def to_registers(qualifier: Union[str, MmaInstruction], use: str, x: Any) -> jax.Array:
    """Logical operand -> one warp's registers (the fragment the instruction reads).

    Args:
      qualifier: the instruction (string or :class:`MmaInstruction`), static.
      use: ``"a"``, ``"b"``, ``"c"`` or ``"d"``, static.
      x: (..., rows, cols) in the logical dtype of the operand's type (module docstring);
        for f16 m8n8k4 (..., 4, rows, cols), one matrix per quadpair.

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
    instr = _instr_arg(qualifier)
    checks.static_choice(use, "use", USES)
    _need_x64(instr, "to_registers")
    x = checks.array_arg(x, "x")
    ty = instr.elem_type(use)
    x = jnp.asarray(x)
    want = instr.logical_shape(use)
    if x.dtype != _LOGICAL[ty]:
        raise TypeError(f"{use}: the logical {ty} operand of {instr.qualifier} must have dtype "
                        f"{_LOGICAL[ty]}, got {x.dtype}")
    if x.ndim < len(want) or tuple(x.shape[x.ndim - len(want):]) != want:
        raise ValueError(f"{use}: the logical operand of {instr.qualifier} must have shape "
                         f"(..., {', '.join(map(str, want))}), got {tuple(x.shape)}")
    return _to_regs(instr, use, x)


@functools.partial(jax.jit, static_argnums=(0, 1))
def _to_regs(instr: MmaInstruction, use: str, x: jax.Array) -> jax.Array:
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


def from_registers(qualifier: Union[str, MmaInstruction], use: str, regs: Any) -> jax.Array:
    """One warp's registers -> the logical operand (inverse of :func:`to_registers`).

    Args:
      qualifier: the instruction (string or :class:`MmaInstruction`), static.
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
    instr = _instr_arg(qualifier)
    checks.static_choice(use, "use", USES)
    _need_x64(instr, "from_registers")
    regs = checks.array_arg(regs, "regs")
    r = _regs_arg(instr, use, regs, f"{use} registers")
    return _from_regs(instr, use, r)


@functools.partial(jax.jit, static_argnums=(0, 1))
def _from_regs(instr: MmaInstruction, use: str, r: jax.Array) -> jax.Array:
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


def _regs_arg(instr: MmaInstruction, use: str, regs: Any, name: str) -> jax.Array:
    r = jnp.asarray(regs)
    n = instr.nregs(use)
    want = instr.reg_dtype()
    if r.ndim < 2 or r.shape[-2:] != (WARP_SIZE, n) or r.dtype != want:
        raise TypeError(f"{name} of {instr.qualifier} must be a (..., 32, {n}) {want} array "
                        f"(a lane axis of 32 and {n} register(s) per lane, raw bits); got "
                        f"shape {tuple(r.shape)} dtype {r.dtype}")
    return r


# --------------------------------------------------------------------------------------
# Arithmetic through the datapath.


def _compute(instr: MmaInstruction, a: jax.Array, b: jax.Array, c: jax.Array,
             arch: Any) -> jax.Array:
    if instr.a_format == "b1":
        return datapath.bmma(a, b, c, op=instr.b1_op)
    return datapath.mma(a, b, c, a_format=instr.a_format, b_format=instr.b_format,
                        c_format=instr.c_format, d_format=instr.d_format, instruction="mma_sync",
                        instruction_k=instr.k, arch=arch, satf=instr.satfinite)


def mma_sync_ptx_logical(qualifier: Union[str, MmaInstruction], a: Any, b: Any, c: Any, *,
            arch: Any = "sm_90") -> jax.Array:
    """``D = A @ B + C`` of one ``mma.sync.aligned`` on logical matrices.

    Args:
      qualifier: static, e.g. ``"m16n8k32.row.col.f32.e4m3.e5m2.f32"`` (see
        :func:`parse_mma`).
      a: (..., m, k) in the A type's logical dtype (module docstring).
      b: (..., k, n) in the B type's logical dtype.
      c: (..., m, n) in the C type's logical dtype. Leading batch axes of a, b, c
        broadcast. Layouts (``.row``/``.col``) only matter for registers.
      arch: a key of ``arch.ARCHS`` (``"sm_70"`` ... ``"sm_90"``, ``"sm_100a"``,
        ``"sm_120a"`` ...) or an ``arch.ArchModel``; it must have the instruction
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
    instr = _instr_arg(qualifier)
    _check_arch(instr, arch)
    _need_x64(instr, "mma_sync_ptx_logical")
    a, b, c = checks.array_args(a=a, b=b, c=c)
    ops = []
    for use, x in (("a", a), ("b", b), ("c", c)):
        x = jnp.asarray(x)
        ty, dims = instr.elem_type(use), instr.dims(use)
        if x.dtype != _LOGICAL[ty]:
            raise TypeError(f"{use} of {instr.qualifier} must have dtype {_LOGICAL[ty]} "
                            f"({ty}), got {x.dtype}")
        if x.ndim < 2 or tuple(x.shape[-2:]) != dims:
            raise ValueError(f"{use} of {instr.qualifier} must have shape (..., {dims[0]}, "
                             f"{dims[1]}), got {tuple(x.shape)}")
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


def mma_sync_ptx(qualifier: Union[str, MmaInstruction], a_regs: Any, b_regs: Any, c_regs: Any, *,
                 arch: Any = "sm_90") -> jax.Array:
    """One warp's ``mma.sync.aligned`` on registers: ``{d} = mma({a}, {b}, {c})``.

    Args:
      qualifier: static, e.g. ``"m16n8k16.row.col.f32.f16.f16.f32"``.
      a_regs, b_regs, c_regs: (..., 32, nregs) uint32 register words (uint64 for f64) in
        the fragment layouts of the module docstring; leading batch axes (many warps)
        broadcast. ``MmaInstruction.nregs(use)`` gives nregs.
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
    instr = _instr_arg(qualifier)
    _check_arch(instr, arch)
    _need_x64(instr, "mma_sync_ptx")
    a_regs, b_regs, c_regs = checks.array_args(a_regs=a_regs, b_regs=b_regs, c_regs=c_regs)
    regs = [_regs_arg(instr, u, r, f"{u}_regs")
            for u, r in (("a", a_regs), ("b", b_regs), ("c", c_regs))]
    try:
        np.broadcast_shapes(*(r.shape[:-2] for r in regs))
    except ValueError as e:
        raise ValueError(f"batch axes of a_regs {regs[0].shape}, b_regs {regs[1].shape}, "
                         f"c_regs {regs[2].shape} do not broadcast") from e
    return _mma_sync_core(instr, arch, *regs)


@functools.partial(jax.jit, static_argnums=(0, 1))
def _mma_sync_core(instr: MmaInstruction, arch: Any, a_regs, b_regs, c_regs) -> jax.Array:
    a, b, c = (_from_regs(instr, u, r) for u, r in zip("abc", (a_regs, b_regs, c_regs),
                                                        strict=True))
    return _to_regs(instr, "d", _compute(instr, a, b, c, arch))
