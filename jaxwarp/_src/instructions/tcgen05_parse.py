"""Blackwell ``tcgen05.mma`` (sm_100a / sm_103a): the configurations and the instruction
descriptor.

The instruction side of the ``tcgen05.mma`` front-end: :func:`parse_tcgen05` reads a
shape-and-type string into a :class:`Tcgen05Instruction`; :func:`make_instr_descriptor`
and :func:`decode_instr_descriptor` encode and decode the 32-bit instruction descriptor
``idesc`` that carries shape, types and modifiers in the PTX instruction (whose opcode
carries only the ``.kind``). The instruction itself is
:mod:`jaxwarp._src.instructions.tcgen05`.

Kinds (dense, ``cta_group::1``; the ``"tcgen05"`` rows of the instruction catalogue
``isa.ROWS``), M = 64 or 128 and K = 32 bytes of operand:

==============  =============================  ==========  ====  ==================
kind            A / B                          D           K     N
==============  =============================  ==========  ====  ==================
kind::f16       f16, bf16 (A type == B type)   f32; f16    16    8..256 step 8
                                               (f16 A/B)
kind::tf32      tf32                           f32         8     8..256 step 8
kind::f8f6f4    e4m3, e5m2, e3m2, e2m3, e2m1   f32, f16    32    8..256 step 8
                (any pairing)
kind::i8        s8, u8 (any pairing)           s32         32    8, 16, 24, 32..256
                                                                 step 16
==============  =============================  ==========  ====  ==================
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

import jax
import numpy as np

from jaxwarp._src.catalogue import isa
from jaxwarp._src.layouts.smem import is_descriptor
from jaxwarp._src.numerics.formats import FORMATS

__all__ = [
    "BITS_DTYPE", "BYTE_CODES", "D_DTYPE", "FLOAT_TYPES", "InstrDescriptorFields", "KINDS",
    "Tcgen05Instruction", "check_modifiers", "decode_instr_descriptor", "flag", "kind_of",
    "make_instr_descriptor", "parse_tcgen05", "strip_opcode",
]

# --------------------------------------------------------------------------------------
# The instruction table: a view of the catalogue's "tcgen05" rows.

_ROWS = isa.rows("tcgen05")
#: The kinds, in catalogue order (a row's group is its ``.kind``).
KINDS = tuple(dict.fromkeys(r.group_name for r in _ROWS))
_KIND_ROWS = {kind: tuple(r for r in _ROWS if r.group_name == kind) for kind in KINDS}
FLOAT_TYPES = tuple(t for t in isa.a_formats("tcgen05") if FORMATS[t].is_float)
#: fp6 / fp4: one element per byte, the code at bits ``unpacked_lsb`` and up (e2m3 and
#: e3m2 in bits 5:0, e2m1 in bits 5:2; the other bits are ignored).
BYTE_CODES = tuple(t for t in FLOAT_TYPES if FORMATS[t].code_storage)
#: dtype of an operand element's raw bits per type: unsigned words of the element's
#: width for floats (tf32: the fp32 word; fp6 / fp4: the byte), the storage dtype for
#: s8 / u8.
BITS_DTYPE: Mapping[str, np.dtype] = MappingProxyType({
    t: np.dtype(np.uint8) if t in BYTE_CODES else
    np.dtype(f"uint{isa.element_bits(t)}") if t in FLOAT_TYPES else isa.storage_dtype(t)
    for t in isa.a_formats("tcgen05")})
#: dtype of D (tensor memory) per D type.
D_DTYPE: Mapping[str, np.dtype] = MappingProxyType(
    {t: isa.storage_dtype(t) for t in isa.accumulator_types("tcgen05")})


@dataclasses.dataclass(frozen=True)
class Tcgen05Instruction:
    """One ``tcgen05.mma.cta_group::1`` configuration (static, hashable).

    Attributes:
      m, n, k: the shape (M 64 or 128; K = 32 bytes of operand).
      kind: ``"f16"``, ``"tf32"``, ``"f8f6f4"`` or ``"i8"``.
      d_format, a_format, b_format: PTX type names (C has D's type).
    """

    m: int
    n: int
    k: int
    kind: str
    d_format: str
    a_format: str
    b_format: str

    @property
    def qualifier(self) -> str:
        """MMA-Sim's spelling, ``m{M}n{N}k{K}.kind::{kind}.{D}.{A}.{B}``."""
        return (f"m{self.m}n{self.n}k{self.k}.kind::{self.kind}.{self.d_format}."
                f"{self.a_format}.{self.b_format}")

    @property
    def opcode(self) -> str:
        """The PTX opcode, ``tcgen05.mma.cta_group::1.kind::{kind}``."""
        return f"tcgen05.mma.cta_group::1.kind::{self.kind}"


def _combos_text() -> str:
    out = []
    for kind, rows in _KIND_ROWS.items():
        for r in rows:
            ab = ",".join(r.a_formats)
            d = ",".join(dict.fromkeys(d for _, d in r.cd))
            out.append(f"m{{64,128}}nNk{r.ks[0]}.kind::{kind}.{{{d}}}.{{{ab}}}.{{{ab}}}")
    return "; ".join(out)


_OPCODE = ("tcgen05", "mma")


def kind_of(text: str, qualifier: Any) -> str:
    """The kind named by ``kind::KIND`` (a ValueError listing the kinds otherwise)."""
    kind = text[len("kind::"):] if text.startswith("kind::") else None
    if kind not in KINDS:
        raise ValueError(f"qualifier {qualifier!r}: {text!r} is not a kind; allowed: "
                         f"{tuple('kind::' + k for k in KINDS)}")
    return kind


def strip_opcode(parts: list[str], qualifier: Any) -> list[str]:
    """Drops ``tcgen05.mma.cta_group::1`` (refusing what is not modelled)."""
    if parts[0] == "tcgen05":
        if parts[:2] != list(_OPCODE):
            raise ValueError(f"qualifier {qualifier!r}: the opcode must be 'tcgen05.mma'")
        parts = parts[2:]
    for p in parts:
        if p in ("ws", "sp") or p.startswith(("block_scale", "collector", "scale_vec")):
            raise NotImplementedError(
                f"qualifier {qualifier!r}: .{p} is not modelled (dense tcgen05.mma "
                f"cta_group::1 only: no reference model covers it)")
        if p.startswith("cta_group::") and p != "cta_group::1":
            raise NotImplementedError(
                f"qualifier {qualifier!r}: .{p} is not modelled: only cta_group::1 (a CTA "
                f"pair's shared A/B and two tensor memories are not modelled)")
    return [p for p in parts if p != "cta_group::1"]


def parse_tcgen05(qualifier: Any) -> Tcgen05Instruction:
    """Parses a tcgen05.mma configuration.

    Accepts MMA-Sim's shape-and-type string ``m{M}n{N}k{K}.kind::{kind}.{D}.{A}.{B}``,
    optionally after the PTX opcode ``tcgen05.mma.cta_group::1.`` (the PTX instruction
    itself carries shape and types in its instruction descriptor: see
    :func:`decode_instr_descriptor`).

    Args:
      qualifier: e.g. ``"m128n256k16.kind::f16.f32.bf16.bf16"``,
        ``"tcgen05.mma.cta_group::1.m64n8k32.kind::f8f6f4.f16.e4m3.e5m2"``,
        ``"m64n16k32.kind::i8.s32.s8.u8"``.

    Returns:
      A frozen, hashable record: ``m``, ``n``, ``k`` (M 64 or 128; K = 32 bytes of
      operand), ``kind``, ``d_format``, ``a_format``, ``b_format`` (C has D's type),
      ``qualifier`` (MMA-Sim's spelling) and ``opcode`` (the PTX opcode).

    Raises:
      TypeError: not a str. ValueError: a part that is not allowed (named, with what is).
      NotImplementedError: ``cta_group::2``, ``.ws``, ``.sp``, block scaling.

    Example:
      >>> parse_tcgen05("tcgen05.mma.cta_group::1.m128n64k8.kind::tf32.f32.tf32.tf32").m
      128
      >>> parse_tcgen05("m64n8k32.kind::f8f6f4.f32.e4m3.e5m2").b_format
      'e5m2'
    """
    if isinstance(qualifier, Tcgen05Instruction):
        return qualifier
    if not isinstance(qualifier, str):
        raise TypeError(f"qualifier must be a str such as 'm64n8k16.kind::f16.f32.f16.f16', "
                        f"got {type(qualifier).__name__} {qualifier!r}")
    parts = qualifier.strip().split(".")
    if "" in parts:
        raise ValueError(f"qualifier {qualifier!r}: empty part (two dots in a row, or a "
                         f"leading or trailing dot)")
    parts = strip_opcode(parts, qualifier)
    if len(parts) != 5:
        raise ValueError(f"qualifier {qualifier!r}: expected "
                         f"m{{M}}n{{N}}k{{K}}.kind::{{kind}}.{{D}}.{{A}}.{{B}}; allowed: "
                         f"{_combos_text()}")
    shape = isa.parse_shape(parts[0])
    if shape is None:
        raise ValueError(f"qualifier {qualifier!r}: shape {parts[0]!r} is not of the form "
                         f"m{{M}}n{{N}}k{{K}}")
    kind = kind_of(parts[1], qualifier)
    d_format, a_format, b_format = parts[2:]
    return _check(shape, kind, d_format, a_format, b_format, f"qualifier {qualifier!r}")


def _check(shape, kind: str, d_format: str, a_format: str, b_format: str,
           where: str) -> Tcgen05Instruction:
    rows = _KIND_ROWS[kind]
    a_formats = tuple(t for r in rows for t in r.a_formats)
    if a_format not in a_formats:
        raise ValueError(f"{where}: atype {a_format!r} is not a kind::{kind} type; allowed: "
                         f"{a_formats}")
    (row,) = (r for r in rows if a_format in r.a_formats)
    if b_format not in row.b_formats(a_format):
        raise ValueError(f"{where}: btype {b_format!r} cannot go with atype {a_format!r}; "
                         f"allowed btype: {row.b_formats(a_format)}")
    d_formats = tuple(d for _, d in row.cd)
    if d_format not in d_formats:
        raise ValueError(f"{where}: dtype {d_format!r} is not allowed for kind::{kind} with "
                         f"atype {a_format!r}; allowed dtype: {d_formats}")
    m, n, k = shape
    if k != row.ks[0]:
        raise ValueError(f"{where}: K must be {row.ks[0]} for kind::{kind} (32 bytes of "
                         f"operand), got k{k}")
    if m not in isa.TCGEN05_M:
        raise ValueError(f"{where}: M must be one of {isa.TCGEN05_M} (cta_group::1), got m{m}")
    ns = tuple(s[1] for s in row.shapes if s[0] == m)
    if n not in ns:
        raise ValueError(f"{where}: N={n} is not allowed for kind::{kind}; allowed N: {ns}")
    return Tcgen05Instruction(m, n, k, kind, d_format, a_format, b_format)


# --------------------------------------------------------------------------------------
# The instruction descriptor (PTX ISA, tcgen05 "Instruction descriptor", for
# .kind::tf32, .kind::f16, .kind::f8f6f4 and .kind::i8).

#: dtype field (bits 4-5) per D type.
_D_CODE = {"f16": 0, "f32": 1, "s32": 2}
#: atype / btype field (bits 7-9 / 10-12) per kind and type.
_AB_CODE = {
    "f16": {"f16": 0, "bf16": 1},
    "tf32": {"tf32": 2},
    "f8f6f4": {"e4m3": 0, "e5m2": 1, "e2m3": 3, "e3m2": 4, "e2m1": 5},
    "i8": {"u8": 0, "s8": 1},
}
_RESERVED_BITS = (6, 23, 29)


class InstrDescriptorFields(NamedTuple):
    """A decoded instruction descriptor.

    Attributes:
      instruction: the :class:`Tcgen05Instruction` (kind from the opcode).
      neg_a, neg_b: negate A / B (bits 13, 14; float kinds).
      transpose_a, transpose_b: M/N-major A / B (bits 15, 16).
      saturate: kind::i8 saturate (bit 3).
    """

    instruction: Tcgen05Instruction
    neg_a: bool = False
    neg_b: bool = False
    transpose_a: bool = False
    transpose_b: bool = False
    saturate: bool = False


def flag(value: Any, name: str) -> bool:
    """A bool or 0 / 1 argument as a bool (a TypeError naming ``name`` otherwise)."""
    if not isinstance(value, (bool, int, np.integer)) or value not in (0, 1):
        raise TypeError(f"{name} must be a bool (or 0 / 1), got {type(value).__name__} "
                        f"{value!r}")
    return bool(value)


def make_instr_descriptor(qualifier: Any, *, neg_a: bool = False, neg_b: bool = False,
                          transpose_a: bool = False, transpose_b: bool = False,
                          saturate: bool = False) -> np.uint32:
    """Encodes the 32-bit instruction descriptor of a dense tcgen05.mma.

    Bit fields (PTX ISA, tcgen05 "Instruction descriptor")::

        bits 0-1  sparsity selector (0)     bits 13, 14  negate A, negate B
        bit  2    sparsity: 0 dense         bits 15, 16  transpose A, B (M/N-major)
        bit  3    saturate (kind::i8)       bits 17-22   N >> 3
        bits 4-5  dtype: f16 0, f32 1,      bits 24-28   M >> 4
                  s32 2                     bits 30-31   .ws B reuse shift (0)
        bits 7-9, 10-12  atype, btype: kind::f16 f16 0, bf16 1; kind::tf32 2;
                  kind::f8f6f4 e4m3 0, e5m2 1, e2m3 3, e3m2 4, e2m1 5; kind::i8 u8 0, s8 1

    Args:
      qualifier: the configuration (see :func:`parse_tcgen05`).
      neg_a, neg_b: negate A / B (float kinds only).
      transpose_a, transpose_b: A / B stored M/N-major in shared memory.
      saturate: clamp to the int32 range (kind::i8 only).

    Returns:
      The descriptor as ``numpy.uint32``.

    Example:
      >>> hex(make_instr_descriptor("m128n256k16.kind::f16.f32.bf16.bf16"))
      '0x8400490'
    """
    instr = parse_tcgen05(qualifier)
    flags = [flag(v, n) for v, n in ((neg_a, "neg_a"), (neg_b, "neg_b"),
                                       (transpose_a, "transpose_a"),
                                       (transpose_b, "transpose_b"), (saturate, "saturate"))]
    check_modifiers(instr, *flags)
    codes = _AB_CODE[instr.kind]
    d = (_D_CODE[instr.d_format] << 4 | codes[instr.a_format] << 7 | codes[instr.b_format] << 10
         | (instr.n >> 3) << 17 | (instr.m >> 4) << 24)
    for bit, on in zip((13, 14, 15, 16, 3), flags, strict=True):
        d |= int(on) << bit
    return np.uint32(d)


def check_modifiers(instr: Tcgen05Instruction, neg_a: bool, neg_b: bool,
                     transpose_a: bool, transpose_b: bool, saturate: bool) -> None:
    """Refuses negation for kind::i8 and saturation for the float kinds."""
    del transpose_a, transpose_b  # every kind has both layouts
    if (neg_a or neg_b) and instr.kind == "i8":
        raise ValueError("negate A / B exists for the float kinds only, not kind::i8")
    if saturate and instr.kind != "i8":
        raise ValueError(f"saturate exists for kind::i8 only, not kind::{instr.kind}")


def decode_instr_descriptor(idesc: Any, kind: str) -> InstrDescriptorFields:
    """Decodes an instruction descriptor (the inverse of :func:`make_instr_descriptor`).

    Args:
      idesc: a static 32-bit integer.
      kind: the opcode's kind, ``"f16"``, ``"tf32"``, ``"f8f6f4"``, ``"i8"`` (or
        ``"kind::f16"`` ...): the type fields mean different types per kind.

    Raises:
      ValueError: a field value the ISA does not define for this kind (named), a sparse
        descriptor, a .ws reuse shift, or reserved bits set.

    Example:
      >>> f = decode_instr_descriptor(0x8400490, "kind::f16")
      >>> f.instruction.qualifier
      'm128n256k16.kind::f16.f32.bf16.bf16'
    """
    if isinstance(idesc, jax.core.Tracer) or isinstance(idesc, bool) or not is_descriptor(
            idesc):
        raise TypeError(f"idesc must be a static 32-bit Python or numpy integer, got "
                        f"{type(idesc).__name__}")
    d = int(np.asarray(idesc)[()]) if isinstance(idesc, np.ndarray) else int(idesc)
    if isinstance(idesc, np.signedinteger) and d < 0:
        d &= 0xFFFFFFFF
    if not 0 <= d < 1 << 32:
        raise ValueError(f"idesc={d:#x} does not fit in 32 bits")
    kind = kind_of(kind if str(kind).startswith("kind::") else f"kind::{kind}", kind)
    where = f"idesc={d:#010x} (kind::{kind})"
    if (d >> 2) & 1 or d & 3:
        raise NotImplementedError(f"{where}: sparsity (bits 0-2) is not modelled; dense "
                                  f"descriptors have them 0")
    if d >> 30:
        raise ValueError(f"{where}: bits 30-31 (the .ws B reuse shift) must be 0 without "
                         f".ws (not modelled)")
    for bit in _RESERVED_BITS:
        if (d >> bit) & 1:
            raise ValueError(f"{where}: reserved bit {bit} must be 0")
    inv_d = {v: k for k, v in _D_CODE.items()}
    inv_ab = {v: k for k, v in _AB_CODE[kind].items()}
    fields = {"dtype": ((d >> 4) & 3, inv_d), "atype": ((d >> 7) & 7, inv_ab),
              "btype": ((d >> 10) & 7, inv_ab)}
    names = {}
    for name, (code, table) in fields.items():
        if code not in table:
            raise ValueError(f"{where}: {name} code {code} is not defined for kind::{kind}; "
                             f"allowed: {table}")
        names[name] = table[code]
    shape = ((d >> 24) & 0x1F) << 4, ((d >> 17) & 0x3F) << 3, _KIND_ROWS[kind][0].ks[0]
    instr = _check(shape, kind, names["dtype"], names["atype"], names["btype"], where)
    flags = tuple(bool((d >> b) & 1) for b in (13, 14, 15, 16, 3))
    check_modifiers(instr, *flags)
    return InstrDescriptorFields(instr, *flags)


