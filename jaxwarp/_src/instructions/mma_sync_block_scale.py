"""PTX ``mma.sync.aligned ... .block_scale`` (sm_120a) on the registers of a warp.

``mma.sync.aligned.m16n8k{32,64}.row.col.kind::{kind}.block_scale[.scale_vec::NX]
.f32.<atype>.<btype>.f32.<stype> d, a, b, c, scale-a-data, {byte-id-a, thread-id-a},
scale-b-data, {byte-id-b, thread-id-b}`` computes ``D = (A * scale_A) @ (B * scale_B) + C``
(PTX ISA, "Block Scaling for mma.sync", 9.7.14.3 of PTX ISA 8.7 / 9.7.15.3 of later
versions; the instruction itself in "Multiply-and-Accumulate Instruction: mma"). This
module is its register view; the arithmetic is :mod:`jaxwarp._src.arithmetic.block_scale`
(:func:`~jaxwarp._src.arithmetic.block_scale.mma_block_scale_logical`, the logical view,
modelled as MMA-Sim 2.1.1 does).

Qualifiers (the ``"mma_sync"`` rows of ``isa.BLOCK_SCALE_ROWS``)::

    m16n8k32 .kind::mxf8f6f4 [.scale_vec::1X]  A, B each e4m3 e5m2 e3m2 e2m3 e2m1, ue8m0
    m16n8k64 .kind::mxf4     [.scale_vec::2X]  e2m1, ue8m0
    m16n8k64 .kind::mxf4nvf4  .scale_vec::2X   e2m1, ue8m0
    m16n8k64 .kind::mxf4nvf4  .scale_vec::4X   e2m1, ue8m0 or ue4m3

``.scale_vec::NX`` gives N scales per row of A and per column of B, one per block of
``k / N`` elements along k (32, 32, 32, 16 above); it may be left out where the kind has
one (1X for mxf8f6f4, 2X for mxf4), never for mxf4nvf4.

Registers (leading lane axis of 32, then one column per 32-bit register, ``uint32``):

* A (4 registers), B (2) and C, D (4, the bits of f32) are where the unscaled
  instructions put them: kind::mxf8f6f4 as ``m16n8k32 .kind::f8f6f4`` (one element per
  byte, four to a register; e2m1 codes in bits 5:2 of the byte, e2m3 / e3m2 in bits 5:0,
  the other bits ignored: the ISA gives both kinds this packing), kind::mxf4 and
  kind::mxf4nvf4 as ``m16n8k64`` with u4 (eight e2m1 codes to a register, the lower
  element in the lower nibble, no padding: the ISA's m16n8k64 fragments are one layout
  for u4, s4 and e2m1). So ``jaxwarp.to_registers`` with those qualifiers builds them.
* ``scale-a-data``, ``scale-b-data``: one ``.b32`` register per lane, (..., 32, 1). With
  groupID ``g = lane // 4`` and threadID_in_group ``t = lane % 4``, the scales of row
  ``m`` of A come from the lanes ``t = 2 * thread_id_a`` (row ``m = g``) and
  ``t = 2 * thread_id_a + 1`` (row ``m = g + 8``): ``thread-id-a`` picks the lower or
  the upper thread-pair of each quad; those of column ``n`` of B from lane
  ``4 n + thread_id_b``. Scale ``j`` of a row or column (the block ``j`` along k) is
  byte ``byte_id + j`` of that register: one byte for 1X (``byte_id`` 0..3), the byte
  pair ``byte_id``, ``byte_id + 1`` for 2X (``byte_id`` 0 or 2), all four for 4X
  (``byte_id`` 0). Every other lane and byte is ignored::

      scale-a-data, thread_id_a = 0        scale-b-data, thread_id_b = 0
      lane 4g + 0: row g       (of A)      lane 4n: column n (of B)
      lane 4g + 1: row g + 8               (lanes 4n + 1 .. 4n + 3 ignored)
      (lanes 4g + 2, 4g + 3 ignored)

  The ISA states which threads and bytes supply scales in words and leaves the row
  within the lane pair and the order of the bytes of one lane to its Figures 43 and 45:
  the lower lane of the pair holding row g and byte ``byte_id + j`` holding block j is
  how kernels that issue the instruction read them (CUDA's own SM120 layouts among
  them), not checked on hardware here. Selector values outside the ISA's table of valid
  values (its behaviour is undefined there) are refused.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxwarp._src import checks
from jaxwarp._src.arithmetic import block_scale
from jaxwarp._src.catalogue import isa
from jaxwarp._src.catalogue.arch import parse_target
from jaxwarp._src.catalogue.mma_sync_parse import WARP_SIZE, MmaInstruction, parse_mma
from jaxwarp._src.layouts.mma_sync_registers import pack, unpack

__all__ = ["MmaBlockScaleInstruction", "parse_mma_block_scale", "mma_block_scale"]

PREFIX = "mma.sync.aligned."
_ROWS = {r.kind: r for r in isa.block_scale_rows("mma_sync")}
#: Selector values the ISA defines (its "Valid values for various selector components").
THREAD_IDS_A = (0, 1)
THREAD_IDS_B = (0, 1, 2, 3)
#: An f32 m16n8 accumulator: C and D of every block-scaled mma.sync sit where its do.
_ACC = parse_mma("m16n8k32.row.col.kind::f8f6f4.f32.e4m3.e4m3.f32")


def _vecs(row: isa.BlockScaleRow) -> tuple[int, ...]:
    """The ``.scale_vec::NX`` of a kind: N = k / block, per allowed block size."""
    return tuple(dict.fromkeys(row.k // block for block, _ in row.scales))


@dataclasses.dataclass(frozen=True)
class MmaBlockScaleInstruction:
    """One ``mma.sync.aligned ... .block_scale`` configuration (frozen, hashable).

    Attributes:
      m, n, k: the shape (16, 8, 32 or 64).
      kind: ``"mxf8f6f4"``, ``"mxf4"`` or ``"mxf4nvf4"``.
      scale_vec: N of ``.scale_vec::NX``: scales per row of A / column of B.
      a_format, b_format: the element types. scale_format: ``"ue8m0"`` or ``"ue4m3"``.

    Example:
      >>> i = parse_mma_block_scale("m16n8k64.row.col.kind::mxf4.block_scale.f32.e2m1.e2m1"
      ...                           ".f32.ue8m0")
      >>> i.scale_vec, i.block, i.qualifier
      (2, 32, 'm16n8k64.row.col.kind::mxf4.block_scale.scale_vec::2X.f32.e2m1.e2m1.f32.ue8m0')
    """

    m: int
    n: int
    k: int
    kind: str
    scale_vec: int
    a_format: str
    b_format: str
    scale_format: str

    @property
    def block(self) -> int:
        """Elements along k that share one scale: ``k / scale_vec``."""
        return self.k // self.scale_vec

    @property
    def qualifier(self) -> str:
        """The canonical text after ``mma.sync.aligned.`` (``.scale_vec`` spelled out)."""
        return (f"{isa.shape_name((self.m, self.n, self.k))}.row.col.kind::{self.kind}"
                f".block_scale.scale_vec::{self.scale_vec}X.f32.{self.a_format}."
                f"{self.b_format}.f32.{self.scale_format}")

    @property
    def ptx(self) -> str:
        """The whole PTX opcode, ``mma.sync.aligned.…``."""
        return PREFIX + self.qualifier

    @property
    def byte_ids(self) -> tuple[int, ...]:
        """The valid ``byte-id-a`` / ``byte-id-b``: 0..3 (1X), 0 or 2 (2X), 0 (4X)."""
        return tuple(range(0, 4, self.scale_vec))

    def operand_instruction(self) -> MmaInstruction:
        """The unscaled ``mma.sync`` whose A, B, C and D registers this one shares."""
        if self.kind == "mxf8f6f4":
            return parse_mma(f"m16n8k32.row.col.kind::f8f6f4.f32.{self.a_format}."
                             f"{self.b_format}.f32")
        return parse_mma("m16n8k64.row.col.s32.u4.u4.s32")


def _err(qualifier: Any, msg: str) -> ValueError:
    return ValueError(f"mma block_scale qualifier {qualifier!r}: {msg}")


_GRAMMAR = ("shape.row.col.kind::KIND.block_scale[.scale_vec::NX].f32.atype.btype.f32.stype "
            "(kind, block_scale and scale_vec may also come first)")


@functools.lru_cache(maxsize=256)
def _parse(qualifier: str) -> MmaBlockScaleInstruction:
    text = qualifier.strip()
    if text.startswith("mma."):
        if not text.startswith(PREFIX):
            raise _err(qualifier, f"the opcode must be {PREFIX!r} followed by the qualifiers")
        text = text[len(PREFIX):]
    parts = text.split(".")
    if "" in parts:
        raise _err(qualifier, f"empty part (two dots in a row, or a leading or trailing "
                   f"dot); expected {_GRAMMAR}")
    # ptxas also takes .kind / .block_scale / .scale_vec before the shape (as CUTLASS
    # writes it): move that group behind the layouts.
    lead = 0
    while lead < len(parts) and parts[lead].startswith(("kind::", "block_scale", "scale_vec")):
        lead += 1
    if lead:
        parts = parts[lead:lead + 3] + parts[:lead] + parts[lead + 3:]
    if len(parts) < 10:
        raise _err(qualifier, f"too few parts ({len(parts)}); expected {_GRAMMAR}")
    shape = isa.parse_shape(parts[0])
    shapes = {r.shapes[0]: r for r in _ROWS.values()}
    if shape not in shapes:
        raise _err(qualifier, f"shape {parts[0]!r} is not allowed; allowed: "
                   f"{', '.join(sorted({isa.shape_name(s) for s in shapes}))}")
    if parts[1:3] != ["row", "col"]:
        raise _err(qualifier, f"layouts .{parts[1]}.{parts[2]} are not allowed; only .row.col")
    kind_text = parts[3]
    kind = kind_text[len("kind::"):] if kind_text.startswith("kind::") else None
    if kind not in _ROWS:
        raise _err(qualifier, f"{kind_text!r} is not a block-scaled kind; allowed: "
                   f"{', '.join('kind::' + k for k in _ROWS)}")
    row = _ROWS[kind]
    if parts[4] != "block_scale":
        raise _err(qualifier, f"expected .block_scale after .kind::{kind}, got .{parts[4]}")
    rest = parts[5:]
    vecs = _vecs(row)
    if rest[0].startswith("scale_vec::"):
        text_vec = rest[0][len("scale_vec::"):]
        allowed = ", ".join(f"scale_vec::{v}X" for v in vecs)
        if text_vec not in [f"{v}X" for v in vecs]:
            raise _err(qualifier, f".{rest[0]} is not allowed with kind::{kind}; allowed: "
                       f"{allowed}")
        vec, rest = int(text_vec[:-1]), rest[1:]
    elif len(vecs) == 1:
        vec = vecs[0]
    else:
        raise _err(qualifier, f"kind::{kind} needs .scale_vec::NX (no default); allowed: "
                   f"{', '.join(f'scale_vec::{v}X' for v in vecs)}")
    if len(rest) != 5:
        raise _err(qualifier, f"expected five types .f32.atype.btype.f32.stype after "
                   f".block_scale, got {'.'.join(rest)!r}")
    d_format, a_format, b_format, c_format, scale_format = rest
    if shape != row.shapes[0]:
        raise _err(qualifier, f"kind::{kind} has shape {isa.shape_name(row.shapes[0])}, "
                   f"not {isa.shape_name(shape)}")
    if (c_format, d_format) not in row.cd:
        raise _err(qualifier, f"c type {c_format} with d type {d_format} is not allowed; "
                   f"allowed: {', '.join(f'c {c} / d {d}' for c, d in row.cd)}")
    for name, fmt in (("a type", a_format), ("b type", b_format)):
        if fmt not in row.a_formats:
            raise _err(qualifier, f"{name} {fmt} is not a kind::{kind} type; allowed: "
                       f"{', '.join(row.a_formats)}")
    block = row.k // vec
    if (block, scale_format) not in row.scales:
        ok = [s for b, s in row.scales if b == block]
        raise _err(qualifier, f"scale type {scale_format} is not allowed with kind::{kind} "
                   f".scale_vec::{vec}X; allowed: {', '.join(ok)}")
    return MmaBlockScaleInstruction(*shape, kind, vec, a_format, b_format, scale_format)


def parse_mma_block_scale(qualifier: Any) -> MmaBlockScaleInstruction:
    """Parses a PTX ``mma.sync.aligned ... .block_scale`` qualifier.

    Args:
      qualifier: the text after ``mma.sync.aligned.`` (the prefix may be included), e.g.
        ``"m16n8k32.row.col.kind::mxf8f6f4.block_scale.scale_vec::1X.f32.e4m3.e2m1.f32
        .ue8m0"``; ``.kind``, ``.block_scale`` and ``.scale_vec`` may also come before
        the shape. An :class:`MmaBlockScaleInstruction` is returned unchanged.

    Returns:
      The frozen :class:`MmaBlockScaleInstruction`.

    Raises:
      TypeError: not a string. ValueError: a part the PTX ISA does not allow (named,
        with what is allowed), or a kind without its required ``.scale_vec``.

    Example:
      >>> parse_mma_block_scale("kind::mxf4nvf4.block_scale.scale_vec::4X.m16n8k64.row.col"
      ...                       ".f32.e2m1.e2m1.f32.ue4m3").block
      16
    """
    if isinstance(qualifier, MmaBlockScaleInstruction):
        return qualifier
    if not isinstance(qualifier, str):
        raise TypeError(f"qualifier must be a str like 'm16n8k32.row.col.kind::mxf8f6f4."
                        f"block_scale.f32.e4m3.e4m3.f32.ue8m0' (static), got "
                        f"{type(qualifier).__name__}")
    return _parse(qualifier)


def _selector(value: Any, name: str, allowed: tuple[int, ...], why: str) -> int:
    v = checks.static_int(value, name)
    if v not in allowed:
        raise ValueError(f"{name}={v} is not a valid selector {why}; allowed: {allowed} "
                         f"(the PTX ISA leaves other values undefined)")
    return v


def _regs(x: jax.Array, name: str, nregs: int, instr: MmaBlockScaleInstruction) -> jax.Array:
    x = jnp.asarray(x)
    if x.ndim < 2 or x.shape[-2:] != (WARP_SIZE, nregs) or x.dtype != jnp.uint32:
        raise TypeError(f"{name} of {instr.qualifier} must be a (..., 32, {nregs}) uint32 "
                        f"array (a lane axis of 32 and {nregs} .b32 register(s) per lane, "
                        f"raw bits); got shape {tuple(x.shape)} dtype {x.dtype}")
    return x


def _scales(data: jax.Array, lanes: np.ndarray, byte0: int, vec: int) -> jax.Array:
    """uint8 scale codes ``[..., r, j]`` = byte ``byte0 + j`` of lane ``lanes[r]``."""
    words = data[..., lanes, 0]  # (..., R)
    shifts = jnp.asarray([8 * (byte0 + j) for j in range(vec)], jnp.uint32)
    return ((words[..., None] >> shifts) & jnp.uint32(0xFF)).astype(jnp.uint8)


def _scale_lanes(thread_id_a: int, thread_id_b: int) -> tuple[np.ndarray, np.ndarray]:
    """The lane that supplies the scales of each row of A (16) and column of B (8)."""
    m = np.arange(16)
    return 4 * (m % 8) + 2 * thread_id_a + m // 8, 4 * np.arange(8) + thread_id_b


@functools.partial(jax.jit, static_argnums=(0, 1, 2))
def _core(instr: MmaBlockScaleInstruction, selectors: tuple[int, int, int, int], arch: str,
          a_regs, b_regs, c_regs, scale_a_data, scale_b_data) -> jax.Array:
    byte_a, tid_a, byte_b, tid_b = selectors
    ops = instr.operand_instruction()
    a, b = unpack(ops, "a", a_regs), unpack(ops, "b", b_regs)
    c = unpack(_ACC, "c", c_regs)  # float32
    lanes_a, lanes_b = _scale_lanes(tid_a, tid_b)
    sa = _scales(scale_a_data, lanes_a, byte_a, instr.scale_vec)  # (..., 16, vec)
    sb = jnp.swapaxes(_scales(scale_b_data, lanes_b, byte_b, instr.scale_vec), -1, -2)
    batch = np.broadcast_shapes(*(x.shape[:-2] for x in (a, b, c, sa, sb)))
    a, b, c, sa, sb = (jnp.broadcast_to(x, batch + x.shape[-2:]) for x in (a, b, c, sa, sb))
    d = block_scale.mma_block_scale_logical(
        a, b, c, sa, sb, a_format=instr.a_format, b_format=instr.b_format, kind=instr.kind,
        scale_format=instr.scale_format, block=instr.block, instruction="mma_sync", arch=arch)
    return pack(_ACC, "d", d)


def mma_block_scale(qualifier: Any, a_regs: Any, b_regs: Any, c_regs: Any,
                    scale_a_data: Any, scale_b_data: Any, *, byte_id_a: int = 0,
                    thread_id_a: int = 0, byte_id_b: int = 0, thread_id_b: int = 0,
                    arch: Any = "sm_120a") -> jax.Array:
    """One warp's ``mma.sync.aligned ... .block_scale`` on registers.

    ``d = mma(a, b, c, scale-a-data, {byte-id-a, thread-id-a}, scale-b-data,
    {byte-id-b, thread-id-b})``, reduced to :func:`jaxwarp.mma_block_scale_logical`
    (``instruction="mma_sync"``), bit for bit. A, B, C and D are where the unscaled
    instructions hold them (:func:`jaxwarp.to_registers` with ``m16n8k32 .kind::f8f6f4``
    for mxf8f6f4, ``m16n8k64`` u4 for the mxf4 kinds). The scales of rows ``g`` and
    ``g + 8`` of A come from lanes ``4 g + 2 thread_id_a`` and ``4 g + 2 thread_id_a +
    1``, those of column ``n`` of B from lane ``4 n + thread_id_b``; scale ``j`` (block
    ``j`` along k) is byte ``byte_id + j`` of that lane's register. docs/microscaling.md
    ("Block-scaled MMA on registers") has the whole layout.

    Args:
      qualifier: static, e.g. ``"m16n8k32.row.col.kind::mxf8f6f4.block_scale
        .scale_vec::1X.f32.e4m3.e4m3.f32.ue8m0"``: m16n8k32 ``kind::mxf8f6f4`` or
        m16n8k64 ``kind::mxf4`` / ``kind::mxf4nvf4`` (the ``"mma_sync"`` rows of
        ``jaxwarp.isa.BLOCK_SCALE_ROWS``).
      a_regs: (..., 32, 4) uint32, A's registers. b_regs: (..., 32, 2) uint32.
      c_regs: (..., 32, 4) uint32, the bits of C's f32 elements.
      scale_a_data, scale_b_data: (..., 32, 1) uint32, one register per lane. Leading
        batch axes of all five broadcast.
      byte_id_a, byte_id_b: static byte selectors: 0..3 with ``.scale_vec::1X``, 0 or 2
        with 2X, 0 with 4X.
      thread_id_a: static, 0 or 1: the lower or upper thread-pair of each quad supplies
        A's scales. thread_id_b: static, 0..3: the thread of each quad that supplies B's.
      arch: ``"sm_120a"`` or ``"sm_121a"``.

    Returns:
      (..., 32, 4) uint32: D's registers (f32 bits; NaN as 0x7FFFFFFF).

    Raises:
      ValueError / TypeError: a bad qualifier, selector, arch, register shape or dtype;
        the message names the argument and says what is allowed (eagerly and under
        ``jax.jit``).

    Example:
      >>> import jax.numpy as jnp
      >>> q = "m16n8k32.row.col.kind::mxf8f6f4.block_scale.f32.e4m3.e4m3.f32.ue8m0"
      >>> ones = jnp.full((32, 4), 0x38383838, jnp.uint32)      # every e4m3 of A is 1.0
      >>> sa = jnp.full((32, 1), 127 + 2, jnp.uint32)           # byte 0: 2**2
      >>> sb = jnp.full((32, 1), (127 - 1) << 8, jnp.uint32)    # byte 1: 2**-1
      >>> d = mma_block_scale(q, ones, ones[:, :2], jnp.zeros((32, 4), jnp.uint32), sa, sb,
      ...                     byte_id_b=1)
      >>> hex(int(d[0, 0]))                                     # 32 * 4 * 0.5 = 64.0
      '0x42800000'
    """
    a_regs, b_regs, c_regs, scale_a_data, scale_b_data = checks.array_args(
        a_regs=a_regs, b_regs=b_regs, c_regs=c_regs, scale_a_data=scale_a_data,
        scale_b_data=scale_b_data)
    instr = parse_mma_block_scale(qualifier)
    row = _ROWS[instr.kind]
    target = parse_target(arch).name
    if target not in row.targets:
        raise ValueError(f"arch={arch!r} lacks mma.sync.aligned.{instr.qualifier}: it needs "
                         f"one of {row.targets}")
    vec = f"with .scale_vec::{instr.scale_vec}X"
    selectors = (_selector(byte_id_a, "byte_id_a", instr.byte_ids, vec),
                 _selector(thread_id_a, "thread_id_a", THREAD_IDS_A, "(a thread pair)"),
                 _selector(byte_id_b, "byte_id_b", instr.byte_ids, vec),
                 _selector(thread_id_b, "thread_id_b", THREAD_IDS_B, "(a thread of the quad)"))
    regs = [_regs(x, name, n, instr) for x, name, n in (
        (a_regs, "a_regs", 4), (b_regs, "b_regs", 2), (c_regs, "c_regs", 4),
        (scale_a_data, "scale_a_data", 1), (scale_b_data, "scale_b_data", 1))]
    try:
        np.broadcast_shapes(*(r.shape[:-2] for r in regs))
    except ValueError as e:
        raise ValueError("batch axes of a_regs, b_regs, c_regs, scale_a_data, scale_b_data "
                         f"{[tuple(r.shape) for r in regs]} do not broadcast") from e
    return _core(instr, selectors, target, *regs)
