"""The instruction catalogue: what every tensor-core instruction accepts, stated once.

One :class:`Row` per instruction family, operand types and group of shapes that share
a minimum target and one datapath model. Every other tensor-core module reads these
rows: the WMMA table (``wmma_table.TABLE``), the ``mma.sync`` and ``wgmma`` parsers, the
target checks of ``arch.py``, the argument checks of ``datapath.mma`` and ``matmul``,
their error messages and the support tables of the README and the docs. Adding an
instruction or an architecture is adding rows here (and, for a new architecture, a
datapath preset in ``arch.py``); see ``docs/extending.md``.

Sources: the CUDA programming guide ("Warp Matrix Functions") for ``wmma``; the PTX ISA
("Warp-level matrix multiply-accumulate instructions: mma", "Asynchronous Warpgroup
Level Matrix Multiply-Accumulate Instructions", and their target notes) for
``mma.sync`` and ``wgmma``, narrowed to what ptxas of CUDA 13.0 accepts for sm_90a (the
captures: a mixed f16/f32 C/D only at ``mma.sync`` m8n8k4, and there not C f32 with
D f16).

Element storage (the dtype of one logical matrix entry) comes from the format registry
(``jaxwarp._src.numerics.formats.FORMATS[name].storage_dtype``): :func:`storage_dtype`.

Example:
    >>> parse_shape("m16n8k16")
    (16, 8, 16)
    >>> [r.min_sm for r in rows("mma_sync", "f16")]
    [70, 75, 80]
    >>> min_target("mma_sync", "f16", k=16)
    (80, False)
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import numpy as np

from jaxwarp._src.numerics.formats import FORMATS
from jaxwarp._src.numerics.fp8 import FP8_FORMATS

Shape = tuple[int, int, int]

#: Instruction families, in the order every table lists them.
INSTRUCTIONS = ("wmma", "mma_sync", "wgmma", "tcgen05")
#: The fp8 operand types: the names of the number layer's ``FP8_FORMATS`` (its one home, a
#: dict name -> storage type), as the tuple every catalogue user reads.
FP8_TYPES: tuple[str, ...] = tuple(FP8_FORMATS)
#: The operand types of ``kind::f8f6f4`` and ``kind::mxf8f6f4`` (PTX order): fp8, fp6, fp4.
F8F6F4_TYPES = ("e5m2", "e4m3", "e3m2", "e2m3", "e2m1")
#: Layouts of A and B (PTX names; WMMA spells them ``row_major`` / ``col_major``).
LAYOUTS = ("row", "col")
ROW_COL = (("row", "col"),)
ALL_LAYOUTS = (("row", "col"), ("row", "row"), ("col", "row"), ("col", "col"))
#: Datapath kinds of rows that are not a float datapath of ``arch.py``.
EXACT_DATAPATHS = ("int", "f64", "bmma")
#: Every compilation target the catalogue names, oldest first: ``sm_XY`` and its ``a``
#: form. ``arch.ARCHS`` has a datapath preset for most (``arch.TARGETS``); the targets of
#: an ``a`` feature are read from here (:func:`a_targets`).
TARGETS = ("sm_70", "sm_75", "sm_80", "sm_86", "sm_87", "sm_89", "sm_90", "sm_90a",
           "sm_100", "sm_100a", "sm_101", "sm_101a", "sm_103", "sm_103a", "sm_120",
           "sm_120a", "sm_121", "sm_121a")


def generation(sm: int) -> int:
    """The generation of ``sm_XY`` (its hundreds and tens): an ``a`` feature of one
    target is on the later ``a`` targets of its generation only."""
    return sm // 10


def a_targets(sm: int) -> tuple[str, ...]:
    """The ``a`` targets of :data:`TARGETS` that have an ``a`` feature of ``sm_{sm}a``.

    Example:
        >>> a_targets(100), a_targets(120)
        (('sm_100a', 'sm_101a', 'sm_103a'), ('sm_120a', 'sm_121a'))
    """
    return tuple(t for t in TARGETS if t.endswith("a") and int(t[3:-1]) >= sm
                 and generation(int(t[3:-1])) == generation(sm))


@dataclasses.dataclass(frozen=True)
class Row:
    """One catalogue row: an instruction family on some operand types and shapes.

    Attributes:
      instruction: ``"wmma"``, ``"mma_sync"``, ``"wgmma"`` or ``"tcgen05"``.
      a_formats: A types of the row. B pairs with A as ``pairing`` says.
      pairing: ``"same"`` (B type == A type) or ``"mixed"`` (B any of ``a_formats``).
      shapes: the (m, n, k) of the row (wgmma: one per n).
      cd: allowed (C type, D type) pairs, in the order messages list them.
      min_sm: smallest ``sm_XY`` (as XY) that has these shapes.
      arch_specific: needs the ``a`` target (``sm_90a``).
      layouts: allowed (A layout, B layout) pairs.
      datapath: the arithmetic: a float datapath family of ``arch.FAMILIES``
        (``"hmma"``, ``"wgmma_fp8"`` ...), or ``"int"``, ``"f64"``, ``"bmma"``.
      k_auto: ``datapath.mma`` may pick this k by itself (False: only on request, as
        the m8n8k4 f16 quadpair unit).
      satfinite: ``.satfinite`` may be given (integer types).
      scale: ``imm-scale-a/b`` exist (wgmma floats; tcgen05: negate A/B).
      transpose: ``imm-trans-a/b`` exist (wgmma f16 / bf16; tcgen05: MN-major operands).
      a_in_registers: A may come from registers (wgmma) or tensor memory (tcgen05).
      b1_ops: for b1: (op, minimum sm) of ``.xor.popc`` / ``.and.popc``.
      experimental: WMMA ``nvcuda::wmma::experimental`` types.
      group: a name for the row's types where they are several (``"fp8"``, ``"int"``);
        default: the A type.
      kind: the ``.kind::`` qualifier the row is issued with (``"f8f6f4"``: ``mma.sync``
        of sm_120a, every A/B element in a byte of its own), or ``""``.
      not_on: targets (``sm_XY`` as XY) at or above ``min_sm`` that do not issue the row
        (tcgen05 ``kind::i8``: sm_103a).
    """

    instruction: str
    a_formats: tuple[str, ...]
    shapes: tuple[Shape, ...]
    cd: tuple[tuple[str, str], ...]
    min_sm: int
    datapath: str
    pairing: str = "same"
    arch_specific: bool = False
    layouts: tuple[tuple[str, str], ...] = ROW_COL
    k_auto: bool = True
    satfinite: bool = False
    scale: bool = False
    transpose: bool = False
    a_in_registers: bool = False
    b1_ops: tuple[tuple[str, int], ...] = ()
    experimental: bool = False
    group: str = ""
    kind: str = ""
    not_on: tuple[int, ...] = ()

    @property
    def group_name(self) -> str:
        return self.group or self.a_formats[0]

    def b_formats(self, a_format: str) -> tuple[str, ...]:
        """The B types that go with A type ``a_format`` in this row."""
        return self.a_formats if self.pairing == "mixed" else (a_format,)

    @property
    def ks(self) -> tuple[int, ...]:
        return tuple(dict.fromkeys(s[2] for s in self.shapes))

    @property
    def target(self) -> str:
        """The minimum target's name, ``"sm_80"`` or ``"sm_90a"``."""
        return f"sm_{self.min_sm}" + ("a" if self.arch_specific else "")


_CD_F16 = (("f16", "f16"), ("f16", "f32"), ("f32", "f16"), ("f32", "f32"))
_F32 = (("f32", "f32"),)
_F32_F16 = (("f32", "f32"), ("f16", "f16"))
_S32 = (("s32", "s32"),)
_F64 = (("f64", "f64"),)
_WMMA_K16 = ((16, 16, 16), (32, 8, 16), (8, 32, 16))
_WMMA_ALL = tuple((a, b) for a in LAYOUTS for b in LAYOUTS)
#: wgmma n: multiples of 8 (floats); 8, 16, 24, then multiples of 16 (integers, b1).
WGMMA_N_FLOAT = tuple(range(8, 257, 8))
WGMMA_N_INT = (8, 16, 24) + tuple(range(32, 257, 16))


def _m64(k: int, ns: tuple[int, ...]) -> tuple[Shape, ...]:
    return tuple((64, n, k) for n in ns)


# --- tcgen05 (Blackwell) rows: kept together (helper "tcgen05") ------------------------
#: tcgen05.mma (cta_group::1, dense, no ``.ws``): the PTX ISA's table "Various
#: combinations of .kind and shapes" (section "Matrix Shape" of the tcgen05 chapter;
#: its number moves between ISA versions): 64xNxK and 128xNxK; kind::f16 K = 16, kind::tf32 K = 8,
#: kind::f8f6f4 K = 32 with N = {8, 16, 24, ... 256} steps of 8; kind::i8 (.s32 <- .s8 /
#: .u8) K = 32 with N = {8, 16, 24, 32, 48, ... 256}, "steps of 16 after N > 32" (CUTLASS's
#: SM100_MMA_S8_SS static_assert admits fewer: 8 and the multiples of 16, no 24). K is 32
#: bytes of operand throughout. D = A @ B + D, so C type == D type; the group
#: of a row is its ``.kind``. A may come from tensor memory (``a_in_registers``),
#: either operand may be MN-major (``transpose``; the instruction descriptor's
#: transpose bits exist for every kind) and the float kinds may negate A or B
#: (``scale``). Only the ``a`` targets sm_100a / sm_103a issue it, and kind::i8 only
#: sm_100a (the ISA's target notes list kind::i8 for sm_100a and sm_110a; ptxas refuses
#: it for sm_103a): ``not_on``.
TCGEN05_M = (64, 128)
TCGEN05_N_INT = (8, 16, 24) + tuple(range(32, 257, 16))  # kind::i8 (the ISA's table)


def _tcgen05(k: int, ns: tuple[int, ...]) -> tuple[Shape, ...]:
    return tuple((m, n, k) for m in TCGEN05_M for n in ns)


_TC5 = dict(arch_specific=True, transpose=True, a_in_registers=True)
TCGEN05_ROWS: tuple[Row, ...] = (
    Row("tcgen05", ("f16",), _tcgen05(16, WGMMA_N_FLOAT), _F32_F16, 100, "tcgen05_f16",
        scale=True, group="f16", **_TC5),
    Row("tcgen05", ("bf16",), _tcgen05(16, WGMMA_N_FLOAT), _F32, 100, "tcgen05_f16",
        scale=True, group="f16", **_TC5),
    Row("tcgen05", ("tf32",), _tcgen05(8, WGMMA_N_FLOAT), _F32, 100, "tcgen05_tf32",
        scale=True, group="tf32", **_TC5),
    Row("tcgen05", F8F6F4_TYPES, _tcgen05(32, WGMMA_N_FLOAT), _F32_F16, 100,
        "tcgen05_f8f6f4", pairing="mixed", scale=True, group="f8f6f4", **_TC5),
    Row("tcgen05", ("s8", "u8"), _tcgen05(32, TCGEN05_N_INT), _S32, 100, "int",
        pairing="mixed", satfinite=True, group="i8", not_on=(103,), **_TC5),
)
# --- end of the tcgen05 rows ---------------------------------------------------------


#: The catalogue. Rows of one (instruction, A type) are listed smallest target first.
ROWS: tuple[Row, ...] = (
    # WMMA (CUDA programming guide, "Warp Matrix Functions"; A type == B type).
    Row("wmma", ("f16",), _WMMA_K16, _CD_F16, 70, "hmma", layouts=_WMMA_ALL),
    Row("wmma", ("bf16",), _WMMA_K16, _F32, 80, "hmma", layouts=_WMMA_ALL),
    Row("wmma", ("tf32",), ((16, 16, 8),), _F32, 80, "hmma_tf32_k4", layouts=_WMMA_ALL),
    Row("wmma", ("f64",), ((8, 8, 4),), _F64, 80, "f64", layouts=_WMMA_ALL),
    Row("wmma", ("s8", "u8"), _WMMA_K16, _S32, 72, "int", layouts=_WMMA_ALL),
    Row("wmma", ("s4", "u4"), ((8, 8, 32),), _S32, 75, "int", experimental=True),
    Row("wmma", ("b1",), ((8, 8, 128),), _S32, 75, "bmma", experimental=True,
        b1_ops=(("xor", 75), ("and", 80))),
    # mma.sync.aligned (PTX ISA target notes; C/D pairs as ptxas 13.0 accepts them).
    Row("mma_sync", ("f16",), ((8, 8, 4),), (("f16", "f16"), ("f16", "f32"), ("f32", "f32")),
        70, "mma_sync_m8n8k4_f16", layouts=ALL_LAYOUTS, k_auto=False),
    Row("mma_sync", ("f16",), ((16, 8, 8),), (("f16", "f16"), ("f32", "f32")), 75, "hmma"),
    Row("mma_sync", ("f16",), ((16, 8, 16),), (("f16", "f16"), ("f32", "f32")), 80, "hmma"),
    Row("mma_sync", ("bf16",), ((16, 8, 8), (16, 8, 16)), _F32, 80, "hmma"),
    Row("mma_sync", ("tf32",), ((16, 8, 4),), _F32, 80, "hmma_tf32_k4"),
    Row("mma_sync", ("tf32",), ((16, 8, 8),), _F32, 80, "hmma_tf32_k8"),
    Row("mma_sync", ("f64",), ((8, 8, 4),), _F64, 80, "f64"),
    Row("mma_sync", ("f64",), ((16, 8, 4), (16, 8, 8), (16, 8, 16)), _F64, 90, "f64"),
    Row("mma_sync", FP8_TYPES, ((16, 8, 16),), _F32_F16, 89, "mma_sync_fp8_k16",
        pairing="mixed"),
    Row("mma_sync", FP8_TYPES, ((16, 8, 32),), _F32_F16, 89, "mma_sync_fp8_k32",
        pairing="mixed"),
    Row("mma_sync", F8F6F4_TYPES, ((16, 8, 32),), _F32_F16, 120, "mma_sync_f8f6f4",
        pairing="mixed", arch_specific=True, group="f8f6f4", kind="f8f6f4"),
    Row("mma_sync", ("s8", "u8"), ((8, 8, 16),), _S32, 75, "int", pairing="mixed",
        satfinite=True),
    Row("mma_sync", ("s8", "u8"), ((16, 8, 16), (16, 8, 32)), _S32, 80, "int",
        pairing="mixed", satfinite=True),
    Row("mma_sync", ("s4", "u4"), ((8, 8, 32),), _S32, 75, "int", pairing="mixed",
        satfinite=True),
    Row("mma_sync", ("s4", "u4"), ((16, 8, 32), (16, 8, 64)), _S32, 80, "int",
        pairing="mixed", satfinite=True),
    Row("mma_sync", ("b1",), ((8, 8, 128),), _S32, 75, "bmma",
        b1_ops=(("xor", 75), ("and", 80))),
    Row("mma_sync", ("b1",), ((16, 8, 128), (16, 8, 256)), _S32, 80, "bmma",
        b1_ops=(("xor", 80), ("and", 80))),
    # wgmma.mma_async (sm_90a only; D = A @ B + D, so C type == D type).
    Row("wgmma", ("f16",), _m64(16, WGMMA_N_FLOAT), _F32_F16, 90, "hmma", arch_specific=True,
        scale=True, transpose=True, a_in_registers=True),
    Row("wgmma", ("bf16",), _m64(16, WGMMA_N_FLOAT), _F32, 90, "hmma", arch_specific=True,
        scale=True, transpose=True, a_in_registers=True),
    Row("wgmma", ("tf32",), _m64(8, WGMMA_N_FLOAT), _F32, 90, "hmma_tf32_k8",
        arch_specific=True, scale=True, a_in_registers=True),
    Row("wgmma", FP8_TYPES, _m64(32, WGMMA_N_FLOAT), _F32_F16, 90, "wgmma_fp8",
        pairing="mixed", arch_specific=True, scale=True, a_in_registers=True, group="fp8"),
    Row("wgmma", ("s8", "u8"), _m64(32, WGMMA_N_INT), _S32, 90, "int", pairing="mixed",
        arch_specific=True, satfinite=True, a_in_registers=True, group="int"),
    Row("wgmma", ("b1",), _m64(256, WGMMA_N_INT), _S32, 90, "bmma", arch_specific=True,
        b1_ops=(("and", 90),)),
    *TCGEN05_ROWS,
)
#: The b1 operations (``.xor.popc``, ``.and.popc``; WMMA ``bmmaBitOpXOR`` / ``AND``), in
#: catalogue order: every b1 row's ``b1_ops``.
B1_OPS: tuple[str, ...] = tuple(dict.fromkeys(op for r in ROWS for op, _ in r.b1_ops))


# --------------------------------------------------------------------------------------
# Views of the catalogue.


def rows(instruction: str, a_format: str | None = None) -> tuple[Row, ...]:
    """The rows of one instruction family (and A type), in catalogue order."""
    return tuple(r for r in ROWS if r.instruction == instruction
                 and (a_format is None or a_format in r.a_formats))


def a_formats(instruction: str) -> tuple[str, ...]:
    """Every A type of an instruction family, in catalogue order."""
    return tuple(dict.fromkeys(t for r in rows(instruction) for t in r.a_formats))


def shapes(instruction: str, a_format: str) -> tuple[Shape, ...]:
    """Every (m, n, k) of an instruction family with A type ``a_format``."""
    return tuple(dict.fromkeys(s for r in rows(instruction, a_format) for s in r.shapes))


def row_of(instruction: str, a_format: str, shape: Shape, kind: str | None = None,
           b_format: str | None = None) -> Row | None:
    """The first row that has this (m, n, k) (with ``.kind::`` ``kind`` if given, and
    B type ``b_format`` if given), or None."""
    for r in rows(instruction, a_format):
        if (tuple(shape) in r.shapes and (kind is None or r.kind == kind)
                and (b_format is None or b_format in r.b_formats(a_format))):
            return r
    return None


def kinds(instruction: str) -> tuple[str, ...]:
    """The ``.kind::`` qualifiers of an instruction family's rows."""
    return tuple(dict.fromkeys(r.kind for r in rows(instruction) if r.kind))


def cd_pairs(instruction: str, a_format: str, shape: Shape | None = None
             ) -> tuple[tuple[str, str], ...]:
    """Allowed (C type, D type) pairs (at one shape, or at any shape)."""
    rs = rows(instruction, a_format) if shape is None else (row_of(instruction, a_format, shape),)
    return tuple(dict.fromkeys(p for r in rs if r is not None for p in r.cd))


def b_formats(instruction: str, a_format: str) -> tuple[str, ...]:
    """The B types that go with A type ``a_format``."""
    return tuple(dict.fromkeys(b for r in rows(instruction,
                                               a_format) for b in r.b_formats(a_format)))


def mixed_pairs(instruction: str | None = None) -> tuple[frozenset[str], ...]:
    """The groups of types that may be mixed as (A, B), e.g. {e4m3, e5m2}."""
    return tuple(dict.fromkeys(frozenset(r.a_formats) for r in ROWS if r.pairing == "mixed"
                               and (instruction is None or r.instruction == instruction)))


def instruction_ks(instruction: str, a_format: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(k values tried when k is derived, largest first; k values only on request)."""
    rs = rows(instruction, a_format)
    auto = sorted({k for r in rs if r.k_auto for k in r.ks}, reverse=True)
    extra = sorted({k for r in rs if not r.k_auto for k in r.ks} - set(auto), reverse=True)
    return tuple(auto), tuple(extra)


def min_target(instruction: str, a_format: str, k: int | None = None) -> tuple[int, bool]:
    """(minimum sm, needs the ``a`` target) of an instruction family and A type, at k
    (the smallest over the shapes with that k) or at any shape.

    Raises:
      KeyError: no row has this instruction, type (and k).
    """
    rs = [r for r in rows(instruction, a_format) if k is None or k in r.ks]
    if not rs:
        raise KeyError((instruction, a_format, k))
    best = min(rs, key=lambda r: (r.min_sm, r.arch_specific))
    return best.min_sm, best.arch_specific


def datapath_family(instruction: str, a_format: str, k: int, b_format: str | None = None) -> str:
    """The datapath model of one instruction (a float family of ``arch.FAMILIES``, or
    ``"int"`` / ``"f64"`` / ``"bmma"``): the first row with this k that takes A type
    ``a_format`` with B type ``b_format`` (e4m3 with e2m1 is ``kind::f8f6f4``)."""
    for r in rows(instruction, a_format):
        if k in r.ks and (b_format is None or b_format in r.b_formats(a_format)):
            return r.datapath
    raise KeyError((instruction, a_format, k))


def float_datapaths() -> tuple[str, ...]:
    """Every float datapath family some row uses."""
    return tuple(dict.fromkeys(r.datapath for r in ROWS
                               if r.datapath not in EXACT_DATAPATHS))


# --------------------------------------------------------------------------------------
# Element types.


def storage_dtype(name: str) -> np.dtype:
    """dtype of one logical matrix entry of type ``name`` (from the format registry)."""
    return np.dtype(FORMATS[name].storage_dtype)


def element_bits(name: str) -> int:
    """Bits one element takes in a register or in memory: the format registry's
    ``register_bits`` (tf32: the 32-bit word; e2m3 / e3m2: a byte, whose top two bits
    are zero; e2m1: 4, two to a byte). An unpacked ``kind::f8f6f4`` operand takes a byte
    per element whatever its format (``mma_sync.MmaInstruction.elem_bits``).

    Example:
        >>> element_bits("tf32"), element_bits("e2m3"), element_bits("e2m1"), element_bits("b1")
        (32, 8, 4, 1)
    """
    return FORMATS[name].register_bits


def accumulator_types(instruction: str | None = None) -> tuple[str, ...]:
    """Every C / D type (of one family, or of all)."""
    return tuple(dict.fromkeys(t for r in ROWS
                               if instruction is None or r.instruction == instruction
                               for p in r.cd for t in p))


# --------------------------------------------------------------------------------------
# Qualifier parsing.

_SHAPE = re.compile(r"m([1-9][0-9]*)n([1-9][0-9]*)k([1-9][0-9]*)")


def parse_shape(text: Any) -> Shape | None:
    """``"m16n8k16"`` -> ``(16, 8, 16)``; None unless the whole text is such a shape
    (strict: no leading zeros, no empty part, no sign, no spaces).

    Example:
        >>> parse_shape("m64n256k32"), parse_shape("m016n8k16"), parse_shape("mnk")
        ((64, 256, 32), None, None)
    """
    if not isinstance(text, str):
        return None
    m = _SHAPE.fullmatch(text)
    return None if m is None else tuple(int(g) for g in m.groups())


def shape_name(shape: Shape) -> str:
    """``(16, 8, 16)`` -> ``"m16n8k16"`` (the inverse of :func:`parse_shape`)."""
    m, n, k = shape
    return f"m{m}n{n}k{k}"


# --------------------------------------------------------------------------------------
# The support table of the docs (README and docs/index.md read it).


def _shapes_text(shapes_: tuple[Shape, ...]) -> str:
    ks = {s[2] for s in shapes_}
    ms = tuple(dict.fromkeys(s[0] for s in shapes_))
    if len(ks) == 1 and (ms == (64,) or ms == TCGEN05_M):
        ns = [s[1] for s in shapes_ if s[0] == ms[0]]
        m = "64" if ms == (64,) else "{" + ",".join(map(str, ms)) + "}"
        return f"m{m}nNk{ks.pop()} (N = {ns[0]}..{ns[-1]})"
    return ", ".join(shape_name(s) for s in shapes_)


def support_table() -> str:
    """The catalogue as a Markdown table, one line per row."""
    lines = ["| instruction | A / B types | shapes | C / D types | min target |",
             "|---|---|---|---|---|"]
    for r in ROWS:
        ab = ", ".join(r.a_formats) + (" (mixed)" if r.pairing == "mixed" else "")
        cd = ", ".join(f"{c}/{d}" for c, d in r.cd)
        extra = ""
        if r.b1_ops:
            extra = " (" + ", ".join(f".{op}.popc sm_{sm}" for op, sm in r.b1_ops) + ")"
        shapes_ = _shapes_text(r.shapes) + (f" .kind::{r.kind}" if r.kind else "")
        lines.append(f"| {r.instruction} | {ab} | {shapes_} | {cd} | "
                     f"{r.target}{extra} |")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------
# Sparse MMA (2:4 structured sparsity): ``mma.sp`` / ``mma.sp::ordered_metadata`` and
# ``wgmma.mma_async.sp``. Their own rows: A holds K/2 stored elements per row and a
# metadata register says where each sits. Sources: the PTX ISA ("mma.sp" and "Sparse
# matrix storage"; "wgmma.mma_async.sp"), narrowed to what ptxas of CUDA 13.0 accepts for
# sm_90a (``tools/capture/FORMAT_SP.md``: 152 mma.sp configurations; e4m3/e5m2 with an f16
# accumulator rejected). The arithmetic is the dense datapath of k = K/2 of the dense
# family (``dense``), over the stored products only: H100 captures.

SPARSE_INSTRUCTIONS = ("mma_sp", "wgmma_sp")


@dataclasses.dataclass(frozen=True)
class SparseRow:
    """One sparse MMA shape on some operand types.

    Attributes:
      instruction: ``"mma_sp"`` (``mma.sp{::ordered_metadata}.sync.aligned``) or
        ``"wgmma_sp"`` (``wgmma.mma_async.sp.sync.aligned``).
      a_formats, pairing, shapes, cd, min_sm, arch_specific, satfinite,
        a_in_registers: as :class:`Row`; ``shapes`` give the logical (dense) K.
      selectors: sparsity selectors allowed: 0 .. selectors - 1.
      unit_bits: what one 2-bit metadata index selects: a 16-bit unit (f16, bf16; for
        tf32 one half of a 32-bit element, two indices per element) or an 8-bit one (s8,
        u8, fp8; for s4/u4 a pair of elements). A metadata nibble covers 4 units; 2 of
        them are stored.
      legacy: the legacy ``mma.sp`` (without ``::ordered_metadata``) exists too.
    """

    instruction: str
    a_formats: tuple[str, ...]
    shapes: tuple[Shape, ...]
    cd: tuple[tuple[str, str], ...]
    min_sm: int
    selectors: int
    unit_bits: int
    pairing: str = "same"
    arch_specific: bool = False
    satfinite: bool = False
    a_in_registers: bool = False
    legacy: bool = False

    @property
    def k(self) -> int:
        return self.shapes[0][2]

    @property
    def dense(self) -> str:
        """The dense instruction family whose datapath (at k = K/2) does the arithmetic."""
        return "mma_sync" if self.instruction == "mma_sp" else "wgmma"

    def b_formats(self, a_format: str) -> tuple[str, ...]:
        return self.a_formats if self.pairing == "mixed" else (a_format,)

    @property
    def target(self) -> str:
        return f"sm_{self.min_sm}" + ("a" if self.arch_specific else "")


def _sp(k: int) -> tuple[Shape, ...]:
    return ((16, 8, k),)


_SPF16 = (("f16", "f16"), ("f32", "f32"))
_WG_SP = dict(arch_specific=True, a_in_registers=True)
SPARSE_ROWS: tuple[SparseRow, ...] = (
    SparseRow("mma_sp", ("f16",), _sp(16), _SPF16, 80, 4, 16, legacy=True),
    SparseRow("mma_sp", ("f16",), _sp(32), _SPF16, 80, 2, 16, legacy=True),
    SparseRow("mma_sp", ("bf16",), _sp(16), _F32, 80, 4, 16, legacy=True),
    SparseRow("mma_sp", ("bf16",), _sp(32), _F32, 80, 2, 16, legacy=True),
    SparseRow("mma_sp", ("tf32",), _sp(8), _F32, 80, 4, 16, legacy=True),
    SparseRow("mma_sp", ("tf32",), _sp(16), _F32, 80, 2, 16, legacy=True),
    SparseRow("mma_sp", FP8_TYPES, _sp(64), _F32, 89, 1, 8, pairing="mixed", legacy=True),
    SparseRow("mma_sp", ("s8", "u8"), _sp(32), _S32, 80, 2, 8, pairing="mixed",
              satfinite=True, legacy=True),
    SparseRow("mma_sp", ("s8", "u8"), _sp(64), _S32, 80, 1, 8, pairing="mixed",
              satfinite=True, legacy=True),
    SparseRow("mma_sp", ("s4", "u4"), _sp(64), _S32, 80, 2, 8, pairing="mixed",
              satfinite=True, legacy=True),
    SparseRow("mma_sp", ("s4", "u4"), _sp(128), _S32, 80, 1, 8, pairing="mixed",
              satfinite=True, legacy=True),
    SparseRow("wgmma_sp", ("f16",), _m64(32, WGMMA_N_FLOAT), _F32_F16, 90, 2, 16, **_WG_SP),
    SparseRow("wgmma_sp", ("bf16",), _m64(32, WGMMA_N_FLOAT), _F32, 90, 2, 16, **_WG_SP),
    SparseRow("wgmma_sp", ("tf32",), _m64(16, WGMMA_N_FLOAT), _F32, 90, 2, 16, **_WG_SP),
    SparseRow("wgmma_sp", FP8_TYPES, _m64(64, WGMMA_N_FLOAT), _F32_F16, 90, 1, 8,
              pairing="mixed", **_WG_SP),
    SparseRow("wgmma_sp", ("s8", "u8"), _m64(64, WGMMA_N_INT), _S32, 90, 1, 8,
              pairing="mixed", satfinite=True, **_WG_SP),
)


def sparse_rows(instruction: str | None = None, a_format: str | None = None
                ) -> tuple[SparseRow, ...]:
    """The sparse rows (of one instruction family, with A type ``a_format``).

    Example:
        >>> [(r.k, r.selectors) for r in sparse_rows("mma_sp", "f16")]
        [(16, 4), (32, 2)]
    """
    return tuple(r for r in SPARSE_ROWS if instruction in (None, r.instruction)
                 and (a_format is None or a_format in r.a_formats))


def sparse_row_of(instruction: str, a_format: str, shape: Shape) -> SparseRow | None:
    """The sparse row with this A type and (m, n, K), or None."""
    for r in sparse_rows(instruction, a_format):
        if tuple(shape) in r.shapes:
            return r
    return None


def sparse_support_table() -> str:
    """The sparse rows as a Markdown table (README, docs/sparse.md)."""
    lines = ["| instruction | A / B types | shapes | C / D types | selectors | min target |",
             "|---|---|---|---|---|---|"]
    for r in SPARSE_ROWS:
        ab = ", ".join(r.a_formats) + (" (mixed)" if r.pairing == "mixed" else "")
        cd = ", ".join(f"{c}/{d}" for c, d in r.cd)
        name = "mma.sp" if r.instruction == "mma_sp" else "wgmma.sp"
        sat = " .satfinite" if r.satfinite else ""
        lines.append(f"| {name} | {ab} | {_shapes_text(r.shapes)}{sat} | {cd} | "
                     f"0..{r.selectors - 1} | {r.target} |")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------
# Block-scaled MMA (microscaling): ``mma.sync ... .block_scale`` and ``tcgen05.mma ...
# .block_scale``. Their own rows: A / B element types, the (block, scale type) pairs of
# each kind, and the exact targets (arch-specific features are not inherited by later
# targets). Sources: the PTX ISA ("mma" with ``.kind::mxf8f6f4 / mxf4 / mxf4nvf4`` and
# ``.block_scale``; "tcgen05.mma"), as MMA-Sim 2.1.1 lists them.

#: tcgen05.mma (cta_group::1) block-scaled N: 8 .. 256 in steps of 8. The element types
#: of ``kind::mxf8f6f4`` are ``F8F6F4_TYPES``.
TCGEN05_N = WGMMA_N_FLOAT


@dataclasses.dataclass(frozen=True)
class BlockScaleRow:
    """One block-scaled MMA kind of one instruction family.

    Attributes:
      instruction: ``"mma_sync"`` or ``"tcgen05"``.
      kind: ``"mxf8f6f4"``, ``"mxf4"`` or ``"mxf4nvf4"``.
      a_formats: the A types; B is any of them (A and B may differ).
      shapes: the (m, n, k) of one instruction.
      scales: allowed (block size, scale type) pairs, in the order messages list them.
      targets: the targets that have it (``sm_120a``: mma.sync; ``sm_100a``: tcgen05).
      packed: operands are two e2m1 per byte along k in registers and memory
        (``kind::mxf4*``); otherwise one element per byte.
      cd: (C type, D type) pairs.
    """

    instruction: str
    kind: str
    a_formats: tuple[str, ...]
    shapes: tuple[Shape, ...]
    scales: tuple[tuple[int, str], ...]
    targets: tuple[str, ...]
    packed: bool = False
    cd: tuple[tuple[str, str], ...] = _F32

    @property
    def k(self) -> int:
        return self.shapes[0][2]


_MMA_BS = a_targets(120)
_TC05_BS = a_targets(100)
_NVF4_SCALES = ((32, "ue8m0"), (16, "ue8m0"), (16, "ue4m3"))
BLOCK_SCALE_INSTRUCTIONS = ("mma_sync", "tcgen05")
BLOCK_SCALE_ROWS: tuple[BlockScaleRow, ...] = (
    BlockScaleRow("mma_sync", "mxf8f6f4", F8F6F4_TYPES, ((16, 8, 32),), ((32, "ue8m0"),),
                  _MMA_BS),
    BlockScaleRow("mma_sync", "mxf4", ("e2m1",), ((16, 8, 64),), ((32, "ue8m0"),), _MMA_BS,
                  packed=True),
    BlockScaleRow("mma_sync", "mxf4nvf4", ("e2m1",), ((16, 8, 64),), _NVF4_SCALES, _MMA_BS,
                  packed=True),
    BlockScaleRow("tcgen05", "mxf8f6f4", F8F6F4_TYPES, tuple((128, n, 32) for n in TCGEN05_N),
                  ((32, "ue8m0"),), _TC05_BS),
    BlockScaleRow("tcgen05", "mxf4", ("e2m1",), tuple((128, n, 64) for n in TCGEN05_N),
                  ((32, "ue8m0"),), _TC05_BS, packed=True),
    BlockScaleRow("tcgen05", "mxf4nvf4", ("e2m1",), tuple((128, n, 64) for n in TCGEN05_N),
                  _NVF4_SCALES, _TC05_BS, packed=True),
)


#: The scale types of the block-scaled rows (``ue8m0``, ``ue4m3``), in catalogue order.
BLOCK_SCALE_TYPES: tuple[str, ...] = tuple(dict.fromkeys(s for r in BLOCK_SCALE_ROWS
                                                         for _, s in r.scales))


def block_scale_rows(instruction: str | None = None) -> tuple[BlockScaleRow, ...]:
    """The block-scaled rows (of one instruction family).

    Example:
        >>> [(r.kind, r.k, r.scales[-1]) for r in block_scale_rows("mma_sync")][1:]
        [('mxf4', 64, (32, 'ue8m0')), ('mxf4nvf4', 64, (16, 'ue4m3'))]
    """
    return tuple(r for r in BLOCK_SCALE_ROWS if instruction in (None, r.instruction))
