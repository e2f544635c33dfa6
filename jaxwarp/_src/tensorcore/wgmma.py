"""Hopper warpgroup MMA ``wgmma.mma_async`` (sm_90a): instruction, descriptors, layouts.

One ``wgmma.mma_async.sync.aligned.m64nNkK.<dtype>.<atype>.<btype>`` is issued by a
*warpgroup* of 128 threads (4 consecutive warps) and computes ``D = A @ B + D`` for a
64 x N accumulator held in registers (PTX ISA, "Asynchronous Warpgroup Level Matrix
Multiply-Accumulate Instructions"). A (64 x K) comes from shared memory through a 64-bit
*matrix descriptor* or from registers; B (K x N) always comes from shared memory through a
descriptor. This module is the front-end: it parses the qualifiers, encodes and decodes
descriptors, reads operand tiles out of a shared-memory byte array exactly as the
descriptor tells the hardware to (canonical layouts, 32/64/128-byte swizzles), maps the
accumulator and A fragments to and from the registers of the warpgroup, and hands the
logical matrices to the one datapath model, ``datapath.mma`` (``datapath.bmma`` for b1).

Shapes and types (PTX ISA, "Matrix shape" and "Data types"; every K is 32 bytes of a row)
are the ``"wgmma"`` rows of the instruction catalogue
(``jaxwarp._src.tensorcore.isa.ROWS``; :data:`FAMILIES` is a view of them, its table is
in ``docs/extending.md``): f16 (D f32 or f16) and bf16 (f32) at K = 16, tf32 (f32) at
K = 8, e4m3/e5m2 in any pairing (f32 or f16) and s8/u8 in any pairing (s32,
``.satfinite`` optional) at K = 32, b1 (s32, ``.and.popc``) at K = 256; N a multiple of
8 from 8 to 256 for the floating-point types
(integer and b1 N: 8, 16, 24, then multiples of 16 from 32 to 256). ``imm-scale-a`` and
``imm-scale-b`` (±1) exist for the floating-point types only, ``imm-trans-a/b`` (operand
stored M/N-major instead of K-major) for f16 and bf16 only, and ``imm-trans-a`` only when
A comes from shared memory.

Accumulator fragment (``d_layout``; f32 and s32: N/2 registers per thread; measured
with the bit-plane probes of the H100 captures, every plain configuration)::

    thread t: warp w = t // 32, g = (t % 32) // 4, q = t % 4; register i = 4c + j
    row = 16 w + g + 8 (j // 2)          col = 8 c + 2 q + (j % 2)

                col 8c+0  8c+1 | 8c+2  8c+3 | 8c+4  8c+5 | 8c+6  8c+7
    row 16w+g     T0:d0 T0:d1  | T1:d0 T1:d1 | T2:d0 T2:d1 | T3:d0 T3:d1
    row 16w+g+8   T0:d2 T0:d3  | T1:d2 T1:d3 | T2:d2 T2:d3 | T3:d2 T3:d3
        (T = thread 32w + 4g + q; dj = register 4c + j; repeats for c = 0 .. N/8-1)

    warp 0: rows  0..15   warp 1: rows 16..31   warp 2: rows 32..47   warp 3: rows 48..63

f16 accumulators pack two halves per 32-bit register (N/4 registers, lower column in bits
15..0): register i = 2c + j holds row ``16w + g + 8j``, columns ``8c + 2q`` and
``8c + 2q + 1``.

A from registers (``a_layout``; 4 registers per thread; row ``16w + g + 8 (r % 2)``
for register r): f16/bf16 half h of register r is column ``2q + h + 8 (r // 2)``; 8-bit
types byte j is column ``4q + j + 16 (r // 2)``; tf32 register r is column
``q + 4 (r // 2)``. This is the accumulator pattern of an m64 x 16-byte tile.

Registers are arrays with the warpgroup axis (128) second to last and registers last:
``(..., 128, NR)``; f32 accumulators are float32, s32 int32, f16 accumulators and A
registers uint32 words. Leading batch axes broadcast.
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
from jaxwarp._src.tensorcore import datapath, isa, layouts
from jaxwarp._src.tensorcore.arch import Target, has, supported_target
from jaxwarp._src.tensorcore.smem import (
    DescriptorFields,
    as_smem,
    check_range,
    decode_descriptor,
    descriptor_arg,
    gather,
    is_descriptor,
    keep_c,
    logical_bits,  # the wgmma descriptor is re-exported here
    make_descriptor,
    operand_addresses,
    scatter,
)

__all__ = [
    "DescriptorFields", "WgmmaInstruction", "a_layout",
    "a_matrix", "a_register_layout", "a_registers", "accumulator_matrix",
    "accumulator_registers", "d_layout", "d_register_layout",
    "decode_descriptor", "make_descriptor", "operand_addresses", "parse_wgmma",
    "read_operand", "wgmma", "wgmma_logical", "write_operand",
]

WARPGROUP_SIZE = 128
M = 64

# --------------------------------------------------------------------------------------
# The instruction table (PTX ISA, wgmma "Matrix shape" / "Data types").

# bits of one element in shared memory / registers, and the logical (bits) dtype used for
# operands read from shared memory (the capture files use the same).
_ELEM_BITS = {t: isa.element_bits(t) for t in isa.a_formats("wgmma")}
# Floats as unsigned words of their width, integers (and b1 0/1) as their storage dtype.
_FLOAT_TYPES = tuple(t for t in isa.a_formats("wgmma") if FORMATS[t].is_float)
BITS_DTYPE: Mapping[str, np.dtype] = MappingProxyType({
    t: np.dtype(f"uint{isa.element_bits(t)}") if t in _FLOAT_TYPES else isa.storage_dtype(t)
    for t in isa.a_formats("wgmma")})
#: dtype of the accumulator registers per d_format: the element's storage dtype, f16
#: packed two to a 32-bit word.
REGISTER_DTYPE: Mapping[str, np.dtype] = MappingProxyType({
    t: np.dtype(np.uint32) if isa.element_bits(t) < 32 else isa.storage_dtype(t)
    for t in isa.accumulator_types("wgmma")})
_MATRIX_DTYPE = {t: isa.storage_dtype(t) for t in isa.accumulator_types("wgmma")}


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
_FAMILY_OF = {t: name for name, f in FAMILIES.items() for t in f.a_formats}


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
        return FAMILIES[_FAMILY_OF[self.a_format]]

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
    for word in ("satfinite", "and", "xor", "popc") + _PREFIX:
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
    if a_format not in _FAMILY_OF:
        raise ValueError(f"qualifier {qualifier!r}: atype {a_format!r} is not supported; "
                         f"allowed: {tuple(_FAMILY_OF)}")
    fam = FAMILIES[_FAMILY_OF[a_format]]
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


def _instr(qualifier: Any) -> WgmmaInstruction:
    if isinstance(qualifier, WgmmaInstruction):
        return qualifier
    return parse_wgmma(qualifier)


# --------------------------------------------------------------------------------------
# Architectures.


def _arch(arch: Any, instr: WgmmaInstruction) -> Target:
    """The target, which must be able to issue ``instr`` (the catalogue's minimum)."""
    target = supported_target(arch)
    sm, needs_a = isa.min_target("wgmma", instr.a_format)
    if not has(target, sm, needs_a):
        want = f"sm_{sm}a" if needs_a else f"sm_{sm} or newer"
        raise ValueError(f"arch={arch!r} is not supported: wgmma needs {want}")
    return target


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
    instr = _instr(qualifier)
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
    instr = _instr(qualifier)
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
# Register fragments of the warpgroup.


def d_layout(qualifier: Any) -> tuple[np.ndarray, np.ndarray]:
    """(row, col) of every accumulator element held by the warpgroup.

    Returns:
      Two int arrays of shape (128, NR, h): thread, register, half (h = 2 for f16
      accumulators, lower column in bits 15..0; 1 otherwise). See the module docstring
      for the drawing.

    Example:
      >>> row, col = d_layout("m64n16k16.f32.f16.f16")
      >>> row.shape, int(row[37, 2, 0]), int(col[37, 5, 0])
      ((128, 8, 1), 25, 11)
    """
    instr = _instr(qualifier)
    h = 2 if instr.d_format == "f16" else 1  # f16: elements 2i, 2i + 1 in register i
    row, col = d_register_layout(instr).coords()
    shape = (WARPGROUP_SIZE, instr.n // 2 // h, h)
    return np.array(row).reshape(shape), np.array(col).reshape(shape)  # fresh copies


def d_register_layout(qualifier: Any) -> layouts.Layout:
    """The accumulator's :class:`~jaxwarp._src.tensorcore.layouts.Layout`:
    ``layouts.WGMMA_D`` cut to N/2 elements per thread on the 64 x N tile.

    Example:
      >>> d_register_layout("m64n16k16.f32.f16.f16").num_elements
      8
    """
    instr = _instr(qualifier)
    return layouts.WGMMA_D.take(instr.n // 2, (M, instr.n), f"wgmma {instr.qualifier} D")


def a_layout(qualifier: Any) -> tuple[np.ndarray, np.ndarray]:
    """(row, col) of A held in registers: arrays (128, 4, per word).

    16-bit types: 2 elements per register; 8-bit types: 4; tf32: 1.

    Example:
      >>> row, col = a_layout("m64n8k32.f32.e4m3.e4m3")
      >>> row.shape, int(row[5, 1, 0]), int(col[5, 3, 2])
      ((128, 4, 4), 9, 22)
    """
    instr = _instr(qualifier)
    if not instr.family.a_in_registers:
        raise ValueError(f"A from registers is not supported for atype {instr.a_format!r}")
    row, col = a_register_layout(instr).coords()
    shape = (WARPGROUP_SIZE, 4, 32 // instr.a_bits)
    return np.array(row).reshape(shape), np.array(col).reshape(shape)  # fresh copies


def a_register_layout(qualifier: Any) -> layouts.Layout:
    """A's :class:`~jaxwarp._src.tensorcore.layouts.Layout` when it comes from registers:
    ``layouts.WGMMA_A`` with ``32 // bits`` elements per register, on the 64 x K tile.

    Example:
      >>> a_register_layout("m64n8k16.f32.f16.f16").elem_bases
      ((0, 1), (8, 0), (0, 8))
    """
    instr = _instr(qualifier)
    if not instr.family.a_in_registers:
        raise ValueError(f"A from registers is not supported for atype {instr.a_format!r}")
    per = 32 // instr.a_bits
    return layouts.WGMMA_A.packed(per, 1).take(4 * per, (M, instr.k),
                                               f"wgmma {instr.qualifier} A")


def _regs(x: Any, name: str, nregs: int, dtype: np.dtype) -> jax.Array:
    x = jnp.asarray(x)
    if x.ndim < 2 or x.shape[-2:] != (WARPGROUP_SIZE, nregs):
        raise ValueError(f"{name} must have shape (..., {WARPGROUP_SIZE}, {nregs}) (threads of "
                         f"the warpgroup, registers), got {x.shape}")
    if x.dtype != dtype:
        raise TypeError(f"{name} must have dtype {dtype}, got {x.dtype}")
    return x


def accumulator_matrix(d_regs: Any, qualifier: Any) -> jax.Array:
    """Accumulator registers (..., 128, NR) -> logical D (..., 64, N).

    f32 -> float32, s32 -> int32, f16 (uint32 words) -> float16.

    Example:
      >>> import jax.numpy as jnp
      >>> regs = jnp.arange(128 * 4, dtype=jnp.float32).reshape(128, 4)
      >>> d = accumulator_matrix(regs, "m64n8k16.f32.f16.f16")
      >>> float(d[0, 1]), float(d[8, 0])
      (1.0, 2.0)
    """
    instr = _instr(qualifier)
    x = _regs(d_regs, "d_regs", instr.num_d_registers, REGISTER_DTYPE[instr.d_format])
    row, col = d_layout(instr)
    inv = np.zeros((M, instr.n), np.int64)
    flat = np.arange(row.size).reshape(row.shape)
    inv[row, col] = flat
    batch = x.shape[:-2]
    if instr.d_format == "f16":
        halves = jnp.stack([x & jnp.uint32(0xFFFF), x >> jnp.uint32(16)], axis=-1)
        x = bitops.from_u32(halves, jnp.float16)
    x = x.reshape(*batch, -1)
    return x[..., inv]


def accumulator_registers(d: Any, qualifier: Any) -> jax.Array:
    """Logical D (..., 64, N) -> accumulator registers (..., 128, NR).

    d: float32 (f32), float16 (f16; packed two per uint32 word) or int32 (s32).

    Example:
      >>> import jax.numpy as jnp
      >>> d = jnp.arange(64 * 8, dtype=jnp.float32).reshape(64, 8)
      >>> r = accumulator_registers(d, "m64n8k16.f32.f16.f16")
      >>> r.shape, float(r[1, 0]), float(r[32, 2])
      ((128, 4), 2.0, 192.0)
    """
    instr = _instr(qualifier)
    d = jnp.asarray(d)
    want = _MATRIX_DTYPE[instr.d_format]
    if d.ndim < 2 or d.shape[-2:] != (M, instr.n):
        raise ValueError(f"d must have shape (..., 64, {instr.n}), got {d.shape}")
    if d.dtype != want:
        raise TypeError(f"d must have dtype {want} for d_format {instr.d_format!r}, got {d.dtype}")
    row, col = d_layout(instr)
    v = d[..., row, col]  # (..., 128, NR, h)
    if instr.d_format == "f16":
        u = bitops.to_u32(v)
        return u[..., 0] | (u[..., 1] << jnp.uint32(16))
    return v[..., 0]


def a_registers(a: Any, qualifier: Any) -> jax.Array:
    """Logical A (..., 64, K) raw bits -> A registers (..., 128, 4) uint32.

    Example:
      >>> import jax.numpy as jnp
      >>> a = jnp.arange(64 * 16, dtype=jnp.uint16).reshape(64, 16)
      >>> hex(int(a_registers(a, "m64n8k16.f32.f16.f16")[1, 0]))
      '0x30002'
    """
    instr = _instr(qualifier)
    bits = instr.a_bits
    a = jnp.asarray(a)
    if a.ndim < 2 or a.shape[-2:] != (M, instr.k):
        raise ValueError(f"a must have shape (..., 64, {instr.k}), got {a.shape}")
    if not jnp.issubdtype(a.dtype, jnp.integer) or a.dtype.itemsize * 8 != bits:
        raise TypeError(f"a must hold {instr.a_format} elements as {bits}-bit integers "
                        f"({BITS_DTYPE[instr.a_format]}), got {a.dtype}")
    row, col = a_layout(instr)
    u = bitops.to_u32(a[..., row, col])
    word = u[..., 0]
    for j in range(1, u.shape[-1]):
        word = word | (u[..., j] << jnp.uint32(j * bits))
    return word


def a_matrix(a_regs: Any, qualifier: Any) -> jax.Array:
    """A registers (..., 128, 4) uint32 -> logical A (..., 64, K) raw bits.

    Example:
      >>> import jax.numpy as jnp
      >>> q = "m64n8k32.s32.s8.s8"
      >>> a = jnp.arange(64 * 32, dtype=jnp.int32).reshape(64, 32).astype(jnp.int8)
      >>> bool((a_matrix(a_registers(a, q), q) == a).all())
      True
    """
    instr = _instr(qualifier)
    x = _regs(a_regs, "a_regs", 4, np.dtype(np.uint32))
    bits = instr.a_bits
    row, col = a_layout(instr)
    mask = jnp.uint32((1 << bits) - 1) if bits < 32 else jnp.uint32(0xFFFFFFFF)
    parts = jnp.stack([(x >> jnp.uint32(j * bits)) & mask for j in range(row.shape[-1])],
                      axis=-1)
    v = bitops.from_u32(parts, BITS_DTYPE[instr.a_format])
    inv = np.zeros((M, instr.k), np.int64)
    inv[row, col] = np.arange(row.size).reshape(row.shape)
    return v.reshape(*v.shape[:-3], -1)[..., inv]


# --------------------------------------------------------------------------------------
# Arithmetic.


_SIGN = {t: 1 << (isa.element_bits(t) - 1) for t in _FLOAT_TYPES}


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

    Operands are read from ``smem`` exactly where the descriptors point (see
    ``operand_addresses``): a wrong LBO/SBO/swizzle reads the wrong bytes, as on the GPU;
    an address beyond ``smem`` is a ``ValueError``. The arithmetic is ``datapath.mma``
    (``datapath.bmma`` for b1) on the logical matrices.

    Args:
      qualifier: e.g. ``"m64n64k16.f32.f16.f16"`` (see ``parse_wgmma``).
      a: A's descriptor (a static Python/numpy int), or A in registers: (..., 128, 4)
        uint32 (layout ``a_layout``).
      desc_b: B's descriptor (static int).
      smem: (..., nbytes) uint8 shared memory (byte address = index).
      d_regs: (..., 128, NR) accumulator registers: float32 (f32), int32 (s32) or uint32
        (f16, two halves per word). Batch axes of a, smem and d_regs broadcast.
      scale_d: the scale-d predicate (may be traced, any shape broadcasting to the batch):
        0 gives ``D = A @ B`` as if C were +0 (C's NaN/inf are ignored; the sign of an
        exactly zero result is unverified: the captures have none); 1 ``D = A @ B + C``.
        A concrete integer other than 0 and 1 is a ``ValueError``; a traced integer
        predicate counts any non-zero value as 1.
      imm_scale_a, imm_scale_b: 1 or -1 (negate A or B: the sign bit of every element is
        flipped); floating-point types only.
      tnsp_a, tnsp_b: imm-trans-a/b, 0 (K-major) or 1 (M/N-major); f16/bf16 only.
      arch: ``"sm_90a"`` (a target that has wgmma: ``isa.ROWS``).

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
    instr = _instr(qualifier)
    arch_p = _arch(arch, instr)
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
        e4m3/e5m2/u8/b1, int8 s8) or the dtype ``datapath.mma`` takes for the type
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
    instr = _instr(qualifier)
    arch_p = _arch(arch, instr)
    if not isinstance(neg_a, bool) or not isinstance(neg_b, bool):
        raise TypeError(f"neg_a and neg_b must be Python bools, got {neg_a!r}, {neg_b!r}")
    _check_modifiers(instr, -1 if neg_a else 1, -1 if neg_b else 1, 0, 0, False)
    a_bits = _bits_arg(a, "a", instr.a_format, (M, instr.k))
    b_bits = _bits_arg(b, "b", instr.b_format, (instr.k, instr.n))
    c = jnp.asarray(c)
    want = _MATRIX_DTYPE[instr.d_format]
    if c.ndim < 2 or c.shape[-2:] != (M, instr.n):
        raise ValueError(f"c must have shape (..., 64, {instr.n}), got {c.shape}")
    if c.dtype != want:
        raise TypeError(f"c must have dtype {want} for dtype {instr.d_format!r}, got {c.dtype}")
    return _logical(instr, a_bits, b_bits, c, scale_d, neg_a, neg_b, arch_p)
