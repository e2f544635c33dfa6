"""What WMMA supports: the WMMA rows of the instruction catalogue, as a lookup table.

The facts (A/B types, C/D pairs, shapes, layouts, minimum arch, bmma ops) are the
``"wmma"`` rows of :data:`jaxwarp._src.catalogue.isa.ROWS` (the CUDA programming guide,
section "Warp Matrix Functions"); :data:`TABLE` is a view of them, one
:class:`WmmaEntry` per A/B type, and every check, error message, docstring table and
test of ``jaxwarp``'s WMMA model reads it. :func:`describe` prints it.

``b1`` is multiplied with ``bmma_sync``: ``bmmaBitOpXOR`` from sm_75,
``bmmaBitOpAND`` from sm_80. Sub-byte types are ``nvcuda::wmma::experimental``.

Type names follow PTX: ``f16`` (``__half``), ``bf16`` (``__nv_bfloat16``),
``tf32`` (``precision::tf32``, stored as ``float``), ``f64`` (``double``), ``s8`` /
``u8`` (``signed char`` / ``unsigned char``), ``s4`` / ``u4`` / ``b1``
(``experimental::precision``), and for accumulators ``f16``, ``f32``, ``s32``
(``int``) and ``f64``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp
import numpy as np

from jaxwarp._src.catalogue import isa
from jaxwarp._src.catalogue.arch import parse_target
from jaxwarp._src.numerics.formats import FORMATS

USES = ("matrix_a", "matrix_b", "accumulator")
LAYOUTS = ("row_major", "col_major")
MEM_LAYOUTS = ("mem_row_major", "mem_col_major")
#: The b1 operations of ``bmma_sync`` (the catalogue's).
BMMA_OPS = isa.B1_OPS

Shape = tuple[int, int, int]


@dataclasses.dataclass(frozen=True)
class ElementType:
    """How one WMMA element type is held.

    Attributes:
        name: PTX-style name (``"f16"``, ``"s4"``, ...).
        bits: width of one element in bits.
        value_dtype: dtype of one element as a logical matrix entry (``s4`` as int8
            in [-8, 7], ``u4`` as uint8 in [0, 15], ``b1`` as uint8 0/1, ``tf32`` as
            the float32 word).
        storage_dtype: dtype of ``frag.x`` (CUDA's ``storage_element_type``): sub-byte
            types pack ``32 // bits`` elements into one 32-bit word (``s4`` ``int``,
            ``u4`` and ``b1`` ``unsigned``).
        memory_dtype: dtype of the flat memory buffer that ``load_matrix_sync`` and
            ``store_matrix_sync`` read and write; sub-byte types use a uint8 byte
            buffer, packed as CUDA packs them (lower index in the low bits).
        bits_dtype: unsigned integer dtype of the same width as one storage element,
            for raw-bit comparisons.
    """

    name: str
    bits: int
    value_dtype: Any
    storage_dtype: Any
    memory_dtype: Any
    bits_dtype: Any

    @property
    def packed(self) -> bool:
        """True for sub-byte types, whose storage words pack several elements."""
        return self.bits < 8

    @property
    def per_storage(self) -> int:
        """Elements per storage element (8 for s4/u4, 32 for b1, else 1)."""
        return 32 // self.bits if self.packed else 1

    @property
    def ldm_multiple(self) -> int:
        """``ldm`` must be a multiple of this many elements (16 bytes)."""
        return 128 // self.bits

    @property
    def align_elements(self) -> int:
        """Element offsets must be multiples of this (the 256-bit pointer alignment)."""
        return 256 // self.bits


def _et(name: str, storage: Any = None, memory: Any = None) -> ElementType:
    """A WMMA element type: width and value dtype from the format registry; the
    fragment storage (sub-byte types pack into 32-bit words) and memory dtypes here."""
    fmt = FORMATS[name]
    storage = fmt.storage_dtype if storage is None else np.dtype(storage)
    memory = storage if memory is None else memory
    raw = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}[np.dtype(storage).itemsize * 8]
    width = fmt.bits if fmt.bits < 8 else fmt.storage_dtype.itemsize * 8  # tf32: a 32-bit word
    return ElementType(name, width, fmt.storage_dtype,
                       np.dtype(storage), np.dtype(memory), np.dtype(raw))


ELEMENT_TYPES: dict[str, ElementType] = {
    t.name: t
    for t in (
        _et("f16"),
        _et("bf16"),
        _et("tf32"),
        _et("f64"),
        _et("s8"),
        _et("u8"),
        _et("s4", jnp.int32, jnp.uint8),
        _et("u4", jnp.uint32, jnp.uint8),
        _et("b1", jnp.uint32, jnp.uint8),
        _et("f32"),
        _et("s32"),
    )
}

MULTIPLICAND_TYPES = isa.a_formats("wmma")
ACCUMULATOR_TYPES = isa.accumulator_types("wmma")


@dataclasses.dataclass(frozen=True)
class WmmaEntry:
    """One row of the table: an A/B element type and everything it allows.

    Attributes:
        operand_format: element type of matrix_a and matrix_b (both the same).
        cd_types: allowed (C type, D type) pairs.
        shapes: allowed (m, n, k).
        a_layouts: allowed layouts of matrix_a fragments.
        b_layouts: allowed layouts of matrix_b fragments.
        min_sm: smallest compute capability (70 = sm_70) that has it.
        experimental: in ``nvcuda::wmma::experimental``.
        bmma_ops: for b1: op name -> smallest compute capability; empty otherwise.
    """

    operand_format: str
    cd_types: tuple[tuple[str, str], ...]
    shapes: tuple[Shape, ...]
    a_layouts: tuple[str, ...] = LAYOUTS
    b_layouts: tuple[str, ...] = LAYOUTS
    min_sm: int = 70
    experimental: bool = False
    bmma_ops: tuple[tuple[str, int], ...] = ()

    @property
    def accumulator_types(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(t for pair in self.cd_types for t in pair))

    def layouts(self, use: str) -> tuple[str, ...]:
        return self.a_layouts if use == "matrix_a" else self.b_layouts


_LAYOUT_NAME = {"row": "row_major", "col": "col_major"}


def _entry(row: isa.Row, operand_format: str) -> WmmaEntry:
    a_lay = tuple(dict.fromkeys(_LAYOUT_NAME[a] for a, _ in row.layouts))
    b_lay = tuple(dict.fromkeys(_LAYOUT_NAME[b] for _, b in row.layouts))
    return WmmaEntry(operand_format, row.cd, row.shapes, a_lay, b_lay, row.min_sm,
                     row.experimental, row.b1_ops)


def _table() -> tuple[WmmaEntry, ...]:
    """One entry per A/B type, from the catalogue's ``"wmma"`` rows."""
    out = []
    for t in isa.a_formats("wmma"):
        (row,) = isa.rows("wmma", t)  # WMMA has one row per A/B type
        out.append(_entry(row, t))
    return tuple(out)


TABLE: tuple[WmmaEntry, ...] = _table()

_BY_TYPE = {e.operand_format: e for e in TABLE}


shape_name = isa.shape_name


def _shapes_text(shapes) -> str:
    return ", ".join(shape_name(s) for s in shapes)


def describe() -> str:
    """The whole table as text, one line per A/B type (used in error messages)."""
    lines = []
    for e in TABLE:
        cd = ", ".join(f"{c}->{d}" for c, d in e.cd_types)
        lines.append(
            f"  {e.operand_format}: shapes {_shapes_text(e.shapes)}; C->D {cd}; "
            f"A {'/'.join(e.a_layouts)}, B {'/'.join(e.b_layouts)}; sm_{e.min_sm}+"
        )
    return "\n".join(lines)


def all_shapes() -> tuple[Shape, ...]:
    """Every (m, n, k) some entry allows, in table order."""
    return tuple(dict.fromkeys(s for e in TABLE for s in e.shapes))


def _check_shape_tuple(shape: Any) -> Shape:
    try:
        m, n, k = (int(v) for v in shape)
    except (TypeError, ValueError):
        raise ValueError(f"shape must be (m, n, k), got {shape!r}") from None
    return m, n, k


def entry(operand_format: str, shape: Shape | None = None) -> WmmaEntry:
    """Returns the table entry of A/B type ``operand_format`` (optionally checking ``shape``).

    Raises:
        ValueError: ``operand_format`` is not a WMMA A/B type, or ``shape`` is not allowed for
            it; the message lists what is valid.
    """
    e = _BY_TYPE.get(operand_format)
    if e is None:
        raise ValueError(f"unsupported WMMA A/B type {operand_format!r}; valid: "
                         f"{', '.join(_BY_TYPE)}\n{describe()}")
    if shape is not None:
        shape = _check_shape_tuple(shape)
        if shape not in e.shapes:
            raise ValueError(
                f"unsupported WMMA combination (a_format={operand_format!r}, shape={shape}); "
                f"valid for {operand_format}: {_shapes_text(e.shapes)}"
            )
    return e


def check_fragment(use: str, m: int, n: int, k: int, type: str, layout: str | None) -> None:
    """Checks a fragment declaration ``fragment<use, m, n, k, type, layout>``.

    Raises:
        ValueError: anything the table does not allow, naming the argument and listing
            the valid choices.
    """
    if use not in USES:
        raise ValueError(f"use={use!r} is not a fragment use; allowed: {USES}")
    shape = (m, n, k)
    if shape not in all_shapes():
        raise ValueError(f"unsupported WMMA shape {shape_name(shape)} {shape}; valid shapes: "
                         f"{_shapes_text(all_shapes())}")
    if use == "accumulator":
        valid = tuple(dict.fromkeys(t for e in TABLE if shape in e.shapes
                                    for t in e.accumulator_types))
        if type not in valid:
            raise ValueError(f"unsupported accumulator type={type!r} for {shape_name(shape)}; "
                             f"valid: {valid}")
        if layout is not None:
            raise ValueError(
                f"layout={layout!r}: accumulator fragments have no layout (give the memory "
                f"layout, {MEM_LAYOUTS}, to load_matrix_sync/store_matrix_sync instead)")
        return
    valid_types = tuple(e.operand_format for e in TABLE if shape in e.shapes)
    if type not in _BY_TYPE:
        raise ValueError(f"unsupported {use} type={type!r}; valid WMMA A/B types: "
                         f"{', '.join(_BY_TYPE)}")
    if type not in valid_types:
        e = _BY_TYPE[type]
        raise ValueError(
            f"unsupported WMMA combination (a_format={type!r}, shape={shape}); valid for "
            f"{type}: {_shapes_text(e.shapes)} (types valid for {shape_name(shape)}: "
            f"{', '.join(valid_types)})"
        )
    allowed = _BY_TYPE[type].layouts(use)
    if layout is None:
        raise ValueError(f"layout is required for {use} fragments; allowed for {type}: "
                         f"{allowed}")
    if layout not in allowed:
        raise ValueError(f"layout={layout!r} is not allowed for a {type} {use} fragment; "
                         f"allowed: {allowed}")


def check_mma(operand_format: str, c_format: str, d_format: str, shape: Shape, arch: Any = "sm_90",
              *, bmma_op: str | None = None) -> WmmaEntry:
    """Checks one ``mma_sync`` / ``bmma_sync`` against the table; returns the entry.

    Raises:
        ValueError: the combination (A/B type, shape, C type, D type, arch, op) is not
            in the table; the message lists the valid ones.
    """
    e = entry(operand_format, shape)
    if (c_format, d_format) not in e.cd_types:
        pairs = ", ".join(f"(c_format={c!r}, d_format={d!r})" for c, d in e.cd_types)
        raise ValueError(
            f"unsupported WMMA combination (a_format={operand_format!r}, c_format={c_format!r}, "
            f"d_format={d_format!r}); valid for {operand_format}: {pairs}")
    sm = parse_target(arch).sm
    if sm < e.min_sm:
        raise ValueError(f"WMMA with {operand_format} needs sm_{e.min_sm} or newer; arch={arch!r}")
    ops = dict(e.bmma_ops)
    if bmma_op is not None:
        if not ops:
            raise ValueError(f"bmma_sync takes b1 fragments, got a_format={operand_format!r}")
        if bmma_op not in ops:
            raise ValueError(f"op={bmma_op!r} is not a bmma op; allowed: {tuple(ops)}")
        if sm < ops[bmma_op]:
            raise ValueError(f"bmma op={bmma_op!r} needs sm_{ops[bmma_op]} or newer; "
                             f"arch={arch!r}")
    elif ops:
        raise ValueError(f"{operand_format} fragments are multiplied with "
                         f"bmma_sync(a, b, c, op=...), "
                         f"not mma_sync")
    return e


def __getattr__(name: str):
    """``parse_arch`` of 0.1.0 (``"sm_90"`` -> 90) resolves for one more release, with a
    DeprecationWarning naming its replacement, ``jaxwarp.parse_target(arch).sm``."""
    if name == "parse_arch":
        import warnings

        warnings.warn("jaxwarp.wmma_table.parse_arch is deprecated and will be removed in "
                      "the next release; use jaxwarp.parse_target(arch).sm",
                      DeprecationWarning, stacklevel=2)
        return _parse_arch
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _parse_arch(arch: Any, name: str = "arch") -> int:
    from jaxwarp._src.catalogue.arch import parse_target

    return parse_target(arch, name).sm
