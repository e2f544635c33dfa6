"""PTX ``mma.sync.aligned``: the qualifiers and :class:`MmaInstruction`.

The instruction side of the PTX warp-level ``mma`` front-end (PTX ISA 9.7.14.5,
"Warp-level matrix multiply-accumulate instructions: mma"): which qualifier strings
exist and what each says. The register fragments are in
:mod:`jaxwarp._src.layouts.mma_sync_registers`, the entry points in
:mod:`jaxwarp._src.instructions.mma_sync`.

Instructions
------------
:func:`parse_mma` reads the text after ``mma.sync.aligned.``, e.g.
``"m16n8k32.row.col.f32.e4m3.e5m2.f32"``, into a frozen :class:`MmaInstruction`. It accepts
exactly the 94 configurations that ptxas of CUDA 13.0 accepts for sm_90a and the 50 of
``m16n8k32.row.col.kind::f8f6f4`` of sm_120a (:func:`mma_instructions` lists them): the
``"mma_sync"`` rows of the instruction
catalogue (``jaxwarp._src.catalogue.isa.ROWS``; its table is in ``docs/extending.md``),
each with its shapes, (C, D) types, A/B pairings and minimum target per shape
(:attr:`MmaInstruction.min_arch`, :attr:`MmaInstruction.min_target`).

Only f16 m8n8k4 takes layouts other than ``.row.col``. ptxas rejects a mixed f16/f32
C/D at m16n8k*, C f32 with D f16 at m8n8k4, and any mixed C/D with fp8; the parser says
so. ``.and.popc`` needs sm_80 at every shape.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax.numpy as jnp

from jaxwarp._src import checks
from jaxwarp._src.catalogue import isa
from jaxwarp._src.catalogue.arch import ArchModel, has, parse_target, supported_target
from jaxwarp._src.numerics.formats import FORMATS

__all__ = [
    "MmaInstruction",
    "parse_mma",
    "mma_instructions",
    "check_arch",
    "need_x64",
]

WARP_SIZE = checks.WARP_SIZE
PREFIX = "mma.sync.aligned."
USES = ("a", "b", "c", "d")
LAYOUTS = isa.LAYOUTS

_ROWS = isa.rows("mma_sync")
#: Every type name of a qualifier: the A/B types, then the C/D types (catalogue order).
TYPES = isa.a_formats("mma_sync") + tuple(t for t in isa.accumulator_types("mma_sync")
                                         if t not in isa.a_formats("mma_sync"))
# Element types: bits in a register, logical dtype (from the format registry).
ELEMENT_BITS = {t: isa.element_bits(t) for t in TYPES}
LOGICAL_DTYPE = {t: jnp.dtype(isa.storage_dtype(t)) for t in TYPES}


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
        return 8 if self.kind and use in ("a", "b") else ELEMENT_BITS[ty]

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
    for word in ("satfinite", *isa.B1_OPS, "popc") + LAYOUTS:
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
        if len(tail) != 2 or tail[0] not in isa.B1_OPS or tail[1] != "popc":
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


def parse_mma(qualifier: str | MmaInstruction) -> MmaInstruction:
    """Parses a PTX ``mma.sync.aligned`` qualifier string into a frozen instruction record.

    Args:
      qualifier: the text after ``mma.sync.aligned.`` (the prefix itself may be
        included), e.g. ``"m16n8k16.row.col.f32.f16.f16.f32"``. A record this function
        returned is returned unchanged.

    Returns:
      The frozen, hashable record (a static argument of every ``mma.sync`` function):
      ``m``, ``n``, ``k``; ``a_layout``, ``b_layout`` (``"row"`` / ``"col"``);
      ``a_format``, ``b_format``, ``c_format``, ``d_format`` (PTX type names);
      ``satfinite``; ``b1_op`` (``"xor"`` / ``"and"`` for b1, else None); ``kind``
      (``"f8f6f4"`` or ``""``); ``qualifier`` (the canonical text) and ``nregs(use)``
      (registers per lane of operand ``"a"``, ``"b"``, ``"c"`` or ``"d"``).

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
      ValueError: ...: shape m16n8k32 with a type f16 is not allowed; f16 allows m8n8k4, ...
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


def check_arch(instr: MmaInstruction, arch: Any) -> None:
    """Raises a ValueError naming the target ``instr`` needs when ``arch`` (a target name
    or an ``ArchModel``) cannot issue it."""
    if isinstance(arch, ArchModel):
        target = parse_target(arch.name)
    else:
        target = supported_target(arch)
    needs_a = _row(instr.a_format, instr.shape, instr.kind).arch_specific
    if not has(target, instr.min_arch, needs_a):
        need = instr.min_target if needs_a else f"{instr.min_target} or newer"
        raise ValueError(f"arch={target.name!r} lacks mma.sync.aligned.{instr.qualifier}: it "
                         f"needs {need}")


def need_x64(instr: MmaInstruction, what: str) -> None:
    """f64 operands need ``jax_enable_x64`` (64-bit registers): an error naming ``what``."""
    if instr.word_bits == 64:
        checks.require_x64(f"{what} with f64 operands")
