"""Hopper warpgroup MMA ``wgmma.mma_async`` (sm_90a): the qualifiers.

The instruction side of the ``wgmma`` front-end: :func:`parse_wgmma` reads a qualifier
into a :class:`WgmmaInstruction` and :func:`target_for` checks that a target can issue it.
The register fragments of the warpgroup are in
:mod:`jaxwarp._src.layouts.wgmma_registers`, the instruction in
:mod:`jaxwarp._src.instructions.wgmma`.

Shapes and types (PTX ISA, "Matrix shape" and "Data types"; every K is 32 bytes of a row)
are the ``"wgmma"`` rows of the instruction catalogue
(``jaxwarp._src.catalogue.isa.ROWS``; :data:`FAMILIES` is a view of them, its table is
in ``docs/extending.md``): f16 (D f32 or f16) and bf16 (f32) at K = 16, tf32 (f32) at
K = 8, e4m3/e5m2 in any pairing (f32 or f16) and s8/u8 in any pairing (s32,
``.satfinite`` optional) at K = 32, b1 (s32, ``.and.popc``) at K = 256; N a multiple of
8 from 8 to 256 for the floating-point types
(integer and b1 N: 8, 16, 24, then multiples of 16 from 32 to 256). ``imm-scale-a`` and
``imm-scale-b`` (±1) exist for the floating-point types only, ``imm-trans-a/b`` (operand
stored M/N-major instead of K-major) for f16 and bf16 only, and ``imm-trans-a`` only when
A comes from shared memory.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

import numpy as np

from jaxwarp._src.catalogue import isa
from jaxwarp._src.catalogue.arch import Target, has, supported_target
from jaxwarp._src.numerics.formats import FORMATS

__all__ = [
    "BITS_DTYPE", "FAMILIES", "MATRIX_DTYPE", "REGISTER_DTYPE", "WgmmaInstruction",
    "instruction_of", "parse_wgmma", "target_for",
]

WARPGROUP_SIZE = 128
M = 64

# --------------------------------------------------------------------------------------
# The instruction table (PTX ISA, wgmma "Matrix shape" / "Data types").

# bits of one element in shared memory / registers, and the logical (bits) dtype used for
# operands read from shared memory (the capture files use the same).
_ELEM_BITS = {t: isa.element_bits(t) for t in isa.a_formats("wgmma")}
# Floats as unsigned words of their width, integers (and b1 0/1) as their storage dtype.
FLOAT_TYPES = tuple(t for t in isa.a_formats("wgmma") if FORMATS[t].is_float)
BITS_DTYPE: Mapping[str, np.dtype] = MappingProxyType({
    t: np.dtype(f"uint{isa.element_bits(t)}") if t in FLOAT_TYPES else isa.storage_dtype(t)
    for t in isa.a_formats("wgmma")})
#: dtype of the accumulator registers per d_format: the element's storage dtype, f16
#: packed two to a 32-bit word.
REGISTER_DTYPE: Mapping[str, np.dtype] = MappingProxyType({
    t: np.dtype(np.uint32) if isa.element_bits(t) < 32 else isa.storage_dtype(t)
    for t in isa.accumulator_types("wgmma")})
MATRIX_DTYPE = {t: isa.storage_dtype(t) for t in isa.accumulator_types("wgmma")}


class _Family(NamedTuple):
    a_formats: tuple[str, ...]
    same_ab: bool  # a_format must equal b_format
    d_formats: tuple[str, ...]
    k: int
    n_values: tuple[int, ...]
    float_scale: bool  # imm-scale-a/b allowed
    transpose: bool  # imm-trans-a/b allowed
    satfinite: bool  # .satfinite allowed
    bop: str | None  # b1: the required ".and.popc"
    a_in_registers: bool


def _family(row: isa.Row) -> _Family:
    return _Family(row.a_formats, row.pairing == "same", tuple(d for _, d in row.cd),
                   row.ks[0], tuple(s[1] for s in row.shapes), row.scale, row.transpose,
                   row.satfinite, row.b1_ops[0][0] if row.b1_ops else None,
                   row.a_in_registers)


#: One entry per type family: a view of the catalogue's ``"wgmma"`` rows (``isa.ROWS``).
FAMILIES: Mapping[str, _Family] = MappingProxyType(
    {r.group_name: _family(r) for r in isa.rows("wgmma")})
FAMILY_OF = {t: name for name, f in FAMILIES.items() for t in f.a_formats}


def _combos_text() -> str:
    rows = []
    for f in FAMILIES.values():
        ab = "{" + ",".join(f.a_formats) + "}"
        tail = ".satfinite optional" if f.satfinite else ""
        tail += f".{f.bop}.popc" if f.bop else ""
        rows.append(f"m64nNk{f.k}.{{{','.join(f.d_formats)}}}.{ab}.{ab}"
                    + (" (a_format == b_format)" if f.same_ab and len(f.a_formats) > 1 else "")
                    + (f" {tail}" if tail else ""))
    return "; ".join(rows)


@dataclasses.dataclass(frozen=True)
class WgmmaInstruction:
    """A parsed ``wgmma.mma_async`` qualifier (static, hashable).

    Attributes:
      n: N of m64nNkK. k: K. m: always 64.
      d_format, a_format, b_format: PTX type names ("f32", "f16", "s32"; "f16", "bf16",
        "tf32", "e4m3", "e5m2", "s8", "u8", "b1").
      satfinite: integer ``.satfinite`` (clamp instead of wrap).
      bop: ``"and"`` for b1 (``.and.popc``), else None.
    """

    n: int
    k: int
    d_format: str
    a_format: str
    b_format: str
    satfinite: bool = False
    bop: str | None = None
    m: int = M

    @property
    def family(self) -> _Family:
        return FAMILIES[FAMILY_OF[self.a_format]]

    @property
    def qualifier(self) -> str:
        """The canonical PTX spelling, e.g. ``m64n8k32.satfinite.s32.s8.u8``."""
        s = f"m64n{self.n}k{self.k}" + (".satfinite" if self.satfinite else "")
        s += f".{self.d_format}.{self.a_format}.{self.b_format}"
        return s + (f".{self.bop}.popc" if self.bop else "")

    @property
    def num_d_registers(self) -> int:
        """32-bit accumulator registers per thread: N/2 (f32, s32) or N/4 (f16)."""
        return self.n // 4 if self.d_format == "f16" else self.n // 2

    @property
    def a_bits(self) -> int:
        return _ELEM_BITS[self.a_format]

    @property
    def b_bits(self) -> int:
        return _ELEM_BITS[self.b_format]


_PREFIX = ("wgmma", "mma_async", "sync", "aligned")


def parse_wgmma(qualifier: str) -> WgmmaInstruction:
    """Parses the qualifiers of a ``wgmma.mma_async`` instruction.

    Accepts the PTX order ``shape[.satfinite].dtype.atype.btype[.and.popc]`` with or
    without the ``wgmma.mma_async.sync.aligned.`` prefix; ``.satfinite`` may also come
    last.

    Args:
      qualifier: e.g. ``"m64n128k16.f32.f16.f16"``, ``"m64n64k32.f32.e4m3.e5m2"``,
        ``"m64n8k32.s32.s8.u8.satfinite"``, ``"m64n256k256.s32.b1.b1.and.popc"``.

    Returns:
      The ``WgmmaInstruction``.

    Raises:
      TypeError: qualifier is not a str.
      ValueError: naming the bad part and listing what is allowed.

    Example:
      >>> parse_wgmma("m64n8k32.s32.s8.u8.satfinite").qualifier
      'm64n8k32.satfinite.s32.s8.u8'
      >>> parse_wgmma("wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16").n
      16
    """
    if not isinstance(qualifier, str):
        raise TypeError(f"qualifier must be a str such as 'm64n128k16.f32.f16.f16', got "
                        f"{type(qualifier).__name__} {qualifier!r}")
    parts = qualifier.strip().split(".")
    if "" in parts:
        raise ValueError(f"qualifier {qualifier!r}: empty qualifier (two dots in a row, or a "
                         f"leading or trailing dot) at part {parts.index('') + 1}")
    if parts[0] in _PREFIX:
        if tuple(parts[:len(_PREFIX)]) != _PREFIX:
            raise ValueError(f"qualifier {qualifier!r}: the opcode must be "
                             f"'{'.'.join(_PREFIX)}' in full (ptxas accepts no partial "
                             f"prefix), followed by the qualifiers")
        parts = parts[len(_PREFIX):]
    for word in ("satfinite", *isa.B1_OPS, "popc") + _PREFIX:
        if parts.count(word) > (0 if word in _PREFIX else 1):
            raise ValueError(f"qualifier {qualifier!r}: qualifier .{word} is duplicated or "
                             f"out of place; ptxas accepts each once, in the order "
                             f"shape[.satfinite].dtype.atype.btype[.and.popc]")
    if "satfinite" in parts and parts.index("satfinite") not in (1, len(parts) - 1):
        raise ValueError(f"qualifier {qualifier!r}: .satfinite must follow the shape "
                         f"(or come last)")
    if not parts:
        raise ValueError(f"qualifier {qualifier!r} is empty; expected e.g. "
                         f"'m64n128k16.f32.f16.f16'")
    shape = isa.parse_shape(parts[0])
    if shape is None:
        raise ValueError(f"qualifier {qualifier!r}: shape {parts[0]!r} is not of the form "
                         f"m64nNkK; allowed: {_combos_text()}")
    m, n, k = shape
    rest = parts[1:]
    satfinite = "satfinite" in rest
    rest = [p for p in rest if p != "satfinite"]
    bop = None
    if rest[-2:] in (["and", "popc"], ["xor", "popc"]):
        bop = rest[-2]
        rest = rest[:-2]
    if len(rest) != 3:
        raise ValueError(f"qualifier {qualifier!r}: expected shape.dtype.atype.btype after "
                         f"the shape, got {'.'.join(rest)!r}; allowed: {_combos_text()}")
    d_format, a_format, b_format = rest
    if a_format not in FAMILY_OF:
        raise ValueError(f"qualifier {qualifier!r}: atype {a_format!r} is not supported; "
                         f"allowed: {tuple(FAMILY_OF)}")
    fam = FAMILIES[FAMILY_OF[a_format]]
    if b_format not in fam.a_formats or (fam.same_ab and b_format != a_format):
        allowed = (a_format,) if fam.same_ab else fam.a_formats
        raise ValueError(f"qualifier {qualifier!r}: btype {b_format!r} cannot go with atype "
                         f"{a_format!r}; allowed btype: {allowed}")
    if d_format not in fam.d_formats:
        raise ValueError(f"qualifier {qualifier!r}: dtype {d_format!r} is not allowed for "
                         f"atype {a_format!r}; allowed dtype: {fam.d_formats}")
    if m != M:
        raise ValueError(f"qualifier {qualifier!r}: M must be 64 (shape m64nNk{fam.k}), "
                         f"got m{m}")
    if k != fam.k:
        raise ValueError(f"qualifier {qualifier!r}: K must be {fam.k} for atype {a_format!r} "
                         f"(shape m64nNk{fam.k}), got k{k}")
    if n not in fam.n_values:
        raise ValueError(f"qualifier {qualifier!r}: N={n} is not allowed for atype "
                         f"{a_format!r}; allowed N: {fam.n_values}")
    if satfinite and not fam.satfinite:
        raise ValueError(f"qualifier {qualifier!r}: .satfinite exists only for the integer "
                         f"types (s8, u8), not atype {a_format!r}")
    if bop != fam.bop:
        if fam.bop is None:
            raise ValueError(f"qualifier {qualifier!r}: .{bop}.popc exists only for b1")
        raise ValueError(f"qualifier {qualifier!r}: b1 needs the bit operation "
                         f"'.{fam.bop}.popc' (the only one wgmma has on sm_90a), got "
                         f"{('.' + bop + '.popc') if bop else 'none'}")
    return WgmmaInstruction(n=n, k=k, d_format=d_format, a_format=a_format, b_format=b_format,
                            satfinite=satfinite, bop=bop)


def instruction_of(qualifier: Any) -> WgmmaInstruction:
    """A :class:`WgmmaInstruction` as it is, or a qualifier parsed by :func:`parse_wgmma`."""
    if isinstance(qualifier, WgmmaInstruction):
        return qualifier
    return parse_wgmma(qualifier)


# --------------------------------------------------------------------------------------
# Architectures.


def target_for(arch: Any, instr: WgmmaInstruction) -> Target:
    """The target, which must be able to issue ``instr`` (the catalogue's minimum)."""
    target = supported_target(arch)
    sm, needs_a = isa.min_target("wgmma", instr.a_format)
    if not has(target, sm, needs_a):
        want = f"sm_{sm}a" if needs_a else f"sm_{sm} or newer"
        raise ValueError(f"arch={arch!r} is not supported: wgmma needs {want}")
    return target

