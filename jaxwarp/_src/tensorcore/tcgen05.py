"""Blackwell ``tcgen05.mma`` (sm_100a / sm_103a): instruction, descriptors, logical view.

``tcgen05.mma.cta_group::1.kind [d-tmem], a-desc|[a-tmem], b-desc, idesc,
enable-input-d {, scale-input-d}`` computes ``D = A @ B + D`` (PTX ISA, "tcgen05.mma"):
D (M x N) lives in *tensor memory*, B (K x N) in shared memory read through a 64-bit
shared memory descriptor, A (M x K) in shared memory (a descriptor) or tensor memory.
The shapes and types are not in the opcode but in the 32-bit *instruction descriptor*
``idesc`` (:func:`make_instr_descriptor`); the opcode carries only the ``.kind``.

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
e3m2 / e2m3 in bits 5:0 and e2m1 in bits 5:2, the other bits ignored) or the dtype
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

import dataclasses
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxwarp._src import checks
from jaxwarp._src.numerics import bitops
from jaxwarp._src.numerics.formats import FORMATS
from jaxwarp._src.tensorcore import datapath, isa
from jaxwarp._src.tensorcore.arch import Target, check_target, supported_target
from jaxwarp._src.tensorcore.smem import (
    SmemDescriptorFields,
    as_smem,
    check_range,
    decode_smem_descriptor,
    descriptor_arg,
    gather,
    is_descriptor,
    keep_c,
    layout_addresses,
    logical_bits,
    scatter,
)

__all__ = [
    "InstrDescriptorFields", "Tcgen05Instruction", "decode_instr_descriptor",
    "make_instr_descriptor", "parse_tcgen05", "read_operand", "tcgen05_mma",
    "tcgen05_mma_logical", "write_operand",
]

# --------------------------------------------------------------------------------------
# The instruction table: a view of the catalogue's "tcgen05" rows.

_ROWS = isa.rows("tcgen05")
#: The kinds, in catalogue order (a row's group is its ``.kind``).
KINDS = tuple(dict.fromkeys(r.group_name for r in _ROWS))
_KIND_ROWS = {kind: tuple(r for r in _ROWS if r.group_name == kind) for kind in KINDS}
_FLOAT_TYPES = tuple(t for t in isa.a_formats("tcgen05") if FORMATS[t].is_float)
#: fp6 / fp4: one element per byte, the code at bits ``unpacked_lsb`` and up (e2m3 and
#: e3m2 in bits 5:0, e2m1 in bits 5:2; the other bits are ignored).
_BYTE_CODES = tuple(t for t in _FLOAT_TYPES if FORMATS[t].code_storage)
#: dtype of an operand element's raw bits per type: unsigned words of the element's
#: width for floats (tf32: the fp32 word; fp6 / fp4: the byte), the storage dtype for
#: s8 / u8.
BITS_DTYPE: Mapping[str, np.dtype] = MappingProxyType({
    t: np.dtype(np.uint8) if t in _BYTE_CODES else
    np.dtype(f"uint{isa.element_bits(t)}") if t in _FLOAT_TYPES else isa.storage_dtype(t)
    for t in isa.a_formats("tcgen05")})
#: dtype of D (tensor memory) per D type.
D_DTYPE: Mapping[str, np.dtype] = MappingProxyType(
    {t: isa.storage_dtype(t) for t in isa.accumulator_types("tcgen05")})
_SIGN = {t: 1 << (FORMATS[t].unpacked_lsb + FORMATS[t].bits - 1) if t in _BYTE_CODES
         else 1 << (np.dtype(BITS_DTYPE[t]).itemsize * 8 - 1) for t in _FLOAT_TYPES}


def _storage(bits: jax.Array, t: str) -> jax.Array:
    """Raw bits -> the dtype ``datapath.mma`` takes (fp6 / fp4: the code, low bits)."""
    if t in _BYTE_CODES:
        return FORMATS[t].code_in_byte(bits)
    return bitops.from_bits(bits, datapath.STORAGE_DTYPE[t])


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


def _kind_of(text: str, qualifier: Any) -> str:
    kind = text[len("kind::"):] if text.startswith("kind::") else None
    if kind not in KINDS:
        raise ValueError(f"qualifier {qualifier!r}: {text!r} is not a kind; allowed: "
                         f"{tuple('kind::' + k for k in KINDS)}")
    return kind


def _strip_opcode(parts: list[str], qualifier: Any) -> list[str]:
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
      The :class:`Tcgen05Instruction`.

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
    parts = _strip_opcode(parts, qualifier)
    if len(parts) != 5:
        raise ValueError(f"qualifier {qualifier!r}: expected "
                         f"m{{M}}n{{N}}k{{K}}.kind::{{kind}}.{{D}}.{{A}}.{{B}}; allowed: "
                         f"{_combos_text()}")
    shape = isa.parse_shape(parts[0])
    if shape is None:
        raise ValueError(f"qualifier {qualifier!r}: shape {parts[0]!r} is not of the form "
                         f"m{{M}}n{{N}}k{{K}}")
    kind = _kind_of(parts[1], qualifier)
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


def _flag(value: Any, name: str) -> bool:
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
    flags = [_flag(v, n) for v, n in ((neg_a, "neg_a"), (neg_b, "neg_b"),
                                       (transpose_a, "transpose_a"),
                                       (transpose_b, "transpose_b"), (saturate, "saturate"))]
    _check_modifiers(instr, *flags)
    codes = _AB_CODE[instr.kind]
    d = (_D_CODE[instr.d_format] << 4 | codes[instr.a_format] << 7 | codes[instr.b_format] << 10
         | (instr.n >> 3) << 17 | (instr.m >> 4) << 24)
    for bit, on in zip((13, 14, 15, 16, 3), flags, strict=True):
        d |= int(on) << bit
    return np.uint32(d)


def _check_modifiers(instr: Tcgen05Instruction, neg_a: bool, neg_b: bool,
                     transpose_a: bool, transpose_b: bool, saturate: bool) -> None:
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
    kind = _kind_of(kind if str(kind).startswith("kind::") else f"kind::{kind}", kind)
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
    _check_modifiers(instr, *flags)
    return InstrDescriptorFields(instr, *flags)


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
                                 int(_flag(transpose, "transpose")))
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
      >>> from jaxwarp._src.tensorcore.smem import make_smem_descriptor
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
      >>> from jaxwarp._src.tensorcore.smem import make_smem_descriptor
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
    ``enable_input_d`` is false), in the arithmetic of the module docstring.

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
    flags = [_flag(v, n) for v, n in ((neg_a, "neg_a"), (neg_b, "neg_b"),
                                       (saturate, "saturate"))]
    _check_modifiers(instr, flags[0], flags[1], False, False, flags[2])
    s = _scale_input_d(scale_input_d, instr)
    a_bits = _bits_arg(a, "a", instr.a_format, (instr.m, instr.k))
    b_bits = _bits_arg(b, "b", instr.b_format, (instr.k, instr.n))
    return _arith(instr, a_bits, b_bits, _d_arg(d, instr), neg_a=flags[0], neg_b=flags[1],
                  saturate=flags[2], enable_input_d=enable_input_d, scale_input_d=s,
                  target=target)


def tcgen05_mma(opcode: Any, d: Any, a: Any, desc_b: Any, idesc: Any, smem: Any, *,
                enable_input_d: Any = True, scale_input_d: int = 0,
                arch: Any = "sm_100a") -> jax.Array:
    """``tcgen05.mma.cta_group::1.kind [d-tmem], a-desc|[a-tmem], b-desc, idesc,
    enable-input-d {, scale-input-d}``: the new D.

    A and B are read from ``smem`` where their shared memory descriptors point, in the
    layout the instruction descriptor's transpose bits select (``read_operand``); shape,
    types, negation and saturation come from ``idesc``.

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
      ValueError/TypeError/NotImplementedError: as :func:`decode_instr_descriptor`,
        :func:`read_operand` and :func:`tcgen05_mma_logical`.

    Example:
      >>> import jax.numpy as jnp
      >>> from jaxwarp._src.tensorcore.smem import make_smem_descriptor
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
    parts = _strip_opcode(opcode.strip().split("."), opcode)
    if len(parts) != 1:
        raise ValueError(f"opcode {opcode!r}: expected 'tcgen05.mma.cta_group::1.kind::KIND' "
                         f"(shape and types are in idesc)")
    kind = _kind_of(parts[0], opcode)
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
