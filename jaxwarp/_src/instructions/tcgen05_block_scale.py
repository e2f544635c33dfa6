"""Blackwell ``tcgen05.mma ... .block_scale`` (sm_100a) through descriptors.

``tcgen05.mma.cta_group::1.kind::{kind}.block_scale{.scale_vectorsize} [d-tmem],
a-desc|[a-tmem], b-desc, idesc, [scale-A-tmem], [scale-B-tmem], enable-input-d`` computes
``D = (A * scale_A) @ (B * scale_B) + D`` (PTX ISA, tcgen05 "Block Scaling" and
"Instruction descriptor", Tables "Instruction descriptor format for .kind::mxf8f6f4" and
"... for .kind::mxf4 and .kind::mxf4nvf4"). A and B are read from shared memory where
their descriptors point (as :func:`~jaxwarp._src.instructions.tcgen05.tcgen05_mma` reads
them); shape, types, scale type, negation and transposition come from ``idesc``; the
arithmetic is :func:`~jaxwarp._src.arithmetic.block_scale.mma_block_scale_logical`
(``instruction="tcgen05"``, MMA-Sim 2.1.1's model).

* ``kind::mxf8f6f4`` (K 32): one element per byte in shared memory, as kind::f8f6f4
  (e2m3 / e3m2 in bits 5:0, e2m1 in bits 5:2); K-major or M/N-major.
* ``kind::mxf4`` / ``kind::mxf4nvf4`` (K 64): two e2m1 per byte with no padding (the
  ISA's packing format); the element of the lower k is taken from the lower nibble (the
  ISA shows the order only in a figure; an assumption, as for the registers of
  mma.sync). K-major only (the idesc's transpose bits must be 0).
* ``.scale_vec::NX`` / ``.blockN``: N scales per row of A and per column of B (1X /
  block32 for mxf8f6f4; 2X / block32 for mxf4, its default; 2X / block32 or 4X / block16
  for mxf4nvf4, which has no default).

Tensor memory is modelled as logical arrays, as in ``tcgen05.py``: D is (M, N) float32,
``scale_a`` the (M, K / block) scale codes of A's rows and ``scale_b`` the
(N, K / block) codes of B's columns (uint8). The idesc's scale factor IDs (which byte or
half-word of a tensor-memory word holds them) must be 0: where in tensor memory the
scales sit is not modelled. Not modelled either: ``.sp``, ``.ws``, ``cta_group::2``,
the K = 96 form of ``kind::mxf4*`` and ``disable-output-lane``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxwarp._src import checks
from jaxwarp._src.arithmetic import block_scale
from jaxwarp._src.catalogue import isa
from jaxwarp._src.instructions.tcgen05 import read_operand
from jaxwarp._src.instructions.tcgen05_parse import Tcgen05Instruction, flag
from jaxwarp._src.layouts.smem import as_smem, is_descriptor, keep_c
from jaxwarp._src.numerics.formats import FORMATS

__all__ = ["BlockScaleInstrFields", "decode_block_scale_instr_descriptor",
           "make_block_scale_instr_descriptor", "tcgen05_mma_block_scale"]

_ROWS = {r.kind: r for r in isa.block_scale_rows("tcgen05")}
#: atype / btype codes (bits 7-9 / 10-12, or 10-11 for the mxf4 kinds) per kind.
_AB_CODE = {"mxf8f6f4": {"e4m3": 0, "e5m2": 1, "e2m3": 3, "e3m2": 4, "e2m1": 5},
            "mxf4": {"e2m1": 1}, "mxf4nvf4": {"e2m1": 1}}
#: Scale matrix type (bit 23).
_SCALE_CODE = {"ue8m0": 1, "ue4m3": 0}


class BlockScaleInstrFields(NamedTuple):
    """A decoded block-scaled instruction descriptor.

    Attributes:
      kind, m, n, k, a_format, b_format, scale_format: the configuration.
      neg_a, neg_b, transpose_a, transpose_b: bits 13-16.
      sfa_id, sfb_id: the scale factor A / B IDs (bits 29-30, 4-5).
    """

    kind: str
    m: int
    n: int
    k: int
    a_format: str
    b_format: str
    scale_format: str
    neg_a: bool = False
    neg_b: bool = False
    transpose_a: bool = False
    transpose_b: bool = False
    sfa_id: int = 0
    sfb_id: int = 0


def _check_fields(f: BlockScaleInstrFields, where: str) -> BlockScaleInstrFields:
    row = _ROWS[f.kind]
    if (f.m, f.n, f.k) not in row.shapes:
        raise ValueError(f"{where}: kind::{f.kind} has M = 128 and N = 8..256 in steps of 8, "
                         f"got M = {f.m}, N = {f.n}")
    if f.kind != "mxf8f6f4" and (f.transpose_a or f.transpose_b):
        raise ValueError(f"{where}: kind::{f.kind} operands are K-major only (transpose "
                         f"bits 15, 16 must be 0)")
    if f.sfa_id or f.sfb_id:
        raise NotImplementedError(
            f"{where}: scale factor IDs sfa_id={f.sfa_id}, sfb_id={f.sfb_id}: only 0 is "
            f"modelled (the scales are logical arrays, not tensor-memory words)")
    return f


def make_block_scale_instr_descriptor(qualifier: Any, *, neg_a: bool = False,
                                      neg_b: bool = False, transpose_a: bool = False,
                                      transpose_b: bool = False) -> np.uint32:
    """Encodes the 32-bit instruction descriptor of a block-scaled tcgen05.mma.

    Bit fields (PTX ISA, tcgen05 "Instruction descriptor", block-scaled kinds)::

        bit  2     sparsity (0)           bits 13, 14  negate A, B
        bits 4-5   scale factor B ID (0)  bits 15, 16  transpose A, B
        bits 7-9   atype                  bits 17-22   N >> 3
        bits 10-12 btype (10-11 mxf4*)    bit  23      scale type: ue8m0 1, ue4m3 0
        bits 27-28 M >> 7                 bits 29-30   scale factor A ID (0)
        bit  31    K = 96 (mxf4*; 0)
        types: kind::mxf8f6f4 e4m3 0, e5m2 1, e2m3 3, e3m2 4, e2m1 5; kind::mxf4* e2m1 1

    Args:
      qualifier: MMA-Sim's spelling ``m128n{N}k{K}.kind::{kind}.block{16|32}.f32.{A}.{B}
        .{scale}``, e.g. ``"m128n16k64.kind::mxf4nvf4.block16.f32.e2m1.e2m1.ue4m3"``.
      neg_a, neg_b, transpose_a, transpose_b: the modifier bits (transposes: mxf8f6f4).

    Returns:
      The descriptor as ``numpy.uint32``.

    Example:
      >>> hex(make_block_scale_instr_descriptor(
      ...     "m128n8k32.kind::mxf8f6f4.block32.f32.e4m3.e2m1.ue8m0"))
      '0x8821400'
    """
    q = block_scale.parse_qualifier("tcgen05_block_scale", qualifier)
    m, n, k = q["shape"]
    flags = [flag(v, name) for v, name in ((neg_a, "neg_a"), (neg_b, "neg_b"),
                                           (transpose_a, "transpose_a"),
                                           (transpose_b, "transpose_b"))]
    f = _check_fields(BlockScaleInstrFields(q["kind"], m, n, k, q["a_format"], q["b_format"],
                                            q["scale_format"], *flags), f"qualifier "
                                                                        f"{qualifier!r}")
    codes = _AB_CODE[f.kind]
    d = (codes[f.a_format] << 7 | codes[f.b_format] << 10 | (n >> 3) << 17
         | _SCALE_CODE[f.scale_format] << 23 | (m >> 7) << 27)
    for bit, on in zip((13, 14, 15, 16), flags, strict=True):
        d |= int(on) << bit
    return np.uint32(d)


def decode_block_scale_instr_descriptor(idesc: Any, kind: str) -> BlockScaleInstrFields:
    """Decodes a block-scaled instruction descriptor (inverse of
    :func:`make_block_scale_instr_descriptor`).

    Args:
      idesc: a static 32-bit integer. kind: ``"mxf8f6f4"``, ``"mxf4"`` or ``"mxf4nvf4"``
        (the opcode's kind: the type fields mean different types per kind).

    Raises:
      ValueError: a field value the ISA does not define for the kind (named), reserved
        bits set. NotImplementedError: sparsity, K = 96, non-zero scale factor IDs.

    Example:
      >>> f = decode_block_scale_instr_descriptor(0x8821400, "mxf8f6f4")
      >>> f.m, f.n, f.a_format, f.b_format, f.scale_format
      (128, 8, 'e4m3', 'e2m1', 'ue8m0')
    """
    if isinstance(idesc, jax.core.Tracer) or isinstance(idesc, bool) or not is_descriptor(
            idesc):
        raise TypeError(f"idesc must be a static 32-bit Python or numpy integer, got "
                        f"{type(idesc).__name__}")
    d = int(np.asarray(idesc)[()]) & 0xFFFFFFFF
    if int(np.asarray(idesc)[()]) >= 1 << 32:
        raise ValueError(f"idesc={int(np.asarray(idesc)[()]):#x} does not fit in 32 bits")
    checks.static_choice(kind, "kind", tuple(_ROWS))
    where = f"idesc={d:#010x} (kind::{kind})"
    packed = kind != "mxf8f6f4"
    if (d >> 2) & 1:
        raise NotImplementedError(f"{where}: sparsity (bit 2) is not modelled")
    if packed and d >> 31:
        raise NotImplementedError(f"{where}: K = 96 (bit 31) is not modelled")
    reserved = (0, 1, 3, 6, 24, 25, 26, 31) + ((12,) if packed else ())
    for bit in reserved:
        if (d >> bit) & 1 and not (bit == 31 and packed):
            raise ValueError(f"{where}: reserved bit {bit} must be 0")
    inv = {v: t for t, v in _AB_CODE[kind].items()}
    mask = 3 if packed else 7  # btype: bits 10-11 (mxf4*) or 10-12
    names = {}
    for name, code in (("atype", (d >> 7) & 7), ("btype", (d >> 10) & mask)):
        if code not in inv:
            raise ValueError(f"{where}: {name} code {code} is not defined for kind::{kind}; "
                             f"allowed: {_AB_CODE[kind]}")
        names[name] = inv[code]
    scale = {v: s for s, v in _SCALE_CODE.items()}[(d >> 23) & 1]
    row = _ROWS[kind]
    f = BlockScaleInstrFields(kind, ((d >> 27) & 3) << 7, ((d >> 17) & 0x3F) << 3, row.k,
                              names["atype"], names["btype"], scale,
                              *(bool((d >> b) & 1) for b in (13, 14, 15, 16)),
                              sfa_id=(d >> 29) & 3, sfb_id=(d >> 4) & 3)
    if scale not in {s for _, s in row.scales}:
        raise ValueError(f"{where}: scale type {scale} (bit 23) is not allowed for "
                         f"kind::{kind}; allowed: {sorted({s for _, s in row.scales})}")
    return _check_fields(f, where)


def _opcode(opcode: Any) -> tuple[str, int]:
    """``tcgen05.mma.cta_group::1.kind::K.block_scale[.scale_vec::NX|.blockN]`` ->
    (kind, block)."""
    if not isinstance(opcode, str):
        raise TypeError(f"opcode must be a str such as 'tcgen05.mma.cta_group::1.kind::mxf4"
                        f".block_scale', got {type(opcode).__name__} {opcode!r}")
    parts = opcode.strip().split(".")
    if parts[:2] == ["tcgen05", "mma"]:
        parts = parts[2:]
    if parts and parts[0] == "cta_group::1":
        parts = parts[1:]
    want = "'tcgen05.mma.cta_group::1.kind::KIND.block_scale[.scale_vec::NX | .blockN]'"
    if len(parts) not in (2, 3) or parts[1] != "block_scale" or not parts[0].startswith(
            "kind::"):
        raise ValueError(f"opcode {opcode!r}: expected {want} (shape and types are in idesc; "
                         f"cta_group::2, .ws and .sp are not modelled)")
    kind = parts[0][len("kind::"):]
    checks.static_choice(kind, "kind", tuple(_ROWS))
    row = _ROWS[kind]
    blocks = tuple(dict.fromkeys(b for b, _ in row.scales))
    spell = {f"block{b}": b for b in blocks} | {f"scale_vec::{row.k // b}X": b for b in blocks}
    if len(parts) == 2:
        if len(blocks) > 1:
            raise ValueError(f"opcode {opcode!r}: kind::{kind} needs a scale vector size; "
                             f"allowed: {', '.join('.' + s for s in spell)}")
        return kind, blocks[0]
    if parts[2] not in spell:
        raise ValueError(f"opcode {opcode!r}: .{parts[2]} is not allowed with kind::{kind}; "
                         f"allowed: {', '.join('.' + s for s in spell)}")
    return kind, spell[parts[2]]


def _codes(x: jax.Array, fmt: str, packed: bool) -> jax.Array:
    """Operand bytes read from shared memory -> one code per element."""
    if packed:  # (..., rows, K / 2) bytes -> (..., rows, K): lower k in the lower nibble
        x = jnp.stack([x & jnp.uint8(0xF), x >> jnp.uint8(4)], axis=-1)
        return x.reshape(x.shape[:-2] + (-1,))
    return FORMATS[fmt].code_in_byte(x)


def _negate(x: jax.Array, fmt: str) -> jax.Array:
    return x ^ jnp.uint8(1 << (FORMATS[fmt].code_bits - 1))


def tcgen05_mma_block_scale(opcode: Any, d: Any, a: Any, desc_b: Any, idesc: Any,
                            scale_a: Any, scale_b: Any, smem: Any, *,
                            enable_input_d: Any = True, arch: Any = "sm_100a") -> jax.Array:
    """``tcgen05.mma.cta_group::1.kind::K.block_scale [d], a-desc|[a-tmem], b-desc, idesc,
    [scale-A-tmem], [scale-B-tmem], enable-input-d``: the new D.

    Args:
      opcode: e.g. ``"tcgen05.mma.cta_group::1.kind::mxf4nvf4.block_scale.block16"`` (or
        just ``"kind::mxf4nvf4.block_scale.scale_vec::4X"``).
      d: (..., M, N) float32, D in tensor memory.
      a: A's shared memory descriptor (static int), or A in tensor memory: (..., M, K)
        uint8 codes, one per entry.
      desc_b: B's shared memory descriptor (static int).
      idesc: the instruction descriptor (:func:`make_block_scale_instr_descriptor`).
      scale_a: (..., M, K / block) uint8 scale codes of A's rows.
      scale_b: (..., N, K / block) uint8 scale codes of B's columns.
      smem: (..., nbytes) uint8 shared memory.
      enable_input_d: the predicate (may be traced); false: ``D = A @ B``.
      arch: ``"sm_100a"``, ``"sm_101a"`` or ``"sm_103a"``.

    Returns:
      The new D, (..., M, N) float32.

    Raises:
      ValueError / TypeError / NotImplementedError: a bad opcode, descriptor, shape,
        dtype or target, named.

    Example:
      >>> import jax.numpy as jnp
      >>> from jaxwarp import make_smem_descriptor
      >>> q = "m128n8k32.kind::mxf8f6f4.block32.f32.e4m3.e4m3.ue8m0"
      >>> da, db = make_smem_descriptor(0, 128, 256), make_smem_descriptor(4096, 128, 256)
      >>> smem = jnp.full(8192, 0x38, jnp.uint8)                 # every e4m3 is 1.0
      >>> d = tcgen05_mma_block_scale(
      ...     "kind::mxf8f6f4.block_scale", jnp.zeros((128, 8), jnp.float32), da, db,
      ...     make_block_scale_instr_descriptor(q), jnp.full((128, 1), 128, jnp.uint8),
      ...     jnp.full((8, 1), 126, jnp.uint8), smem)          # scales 2 and 1/2
      >>> float(d[0, 0])
      32.0
    """
    smem, d, scale_a, scale_b = checks.array_args(smem=smem, d=d, scale_a=scale_a,
                                                  scale_b=scale_b)
    kind, block = _opcode(opcode)
    f = decode_block_scale_instr_descriptor(idesc, kind)
    if (block, f.scale_format) not in _ROWS[kind].scales:
        raise ValueError(f"opcode {opcode!r} (block {block}) with idesc's scale type "
                         f"{f.scale_format}: kind::{kind} allows (block, scale type) "
                         f"{_ROWS[kind].scales}")
    packed = kind != "mxf8f6f4"
    dense = Tcgen05Instruction(f.m, f.n, f.k // 2 if packed else f.k,
                               "i8" if packed else "f8f6f4", "s32" if packed else "f32",
                               "u8" if packed else f.a_format, "u8" if packed else f.b_format)
    mem = as_smem(smem)
    if np.ndim(a) == 0:
        a_codes = _codes(read_operand(mem, a, dense, "a", transpose=f.transpose_a),
                         f.a_format, packed)
    else:
        if f.transpose_a:
            raise ValueError("A from tensor memory is K-major: idesc's transpose-A bit must "
                             "be 0")
        a_codes = checks.array_arg(a, "a")
    b_codes = _codes(jnp.swapaxes(read_operand(mem, desc_b, dense, "b",
                                               transpose=f.transpose_b), -1, -2),
                     f.b_format, packed)
    b_codes = jnp.swapaxes(b_codes, -1, -2)  # (..., K, N)
    if f.neg_a:
        a_codes = _negate(a_codes, f.a_format)
    if f.neg_b:
        b_codes = _negate(b_codes, f.b_format)
    if d.dtype != jnp.float32 or d.ndim < 2 or d.shape[-2:] != (f.m, f.n):
        raise TypeError(f"d must be a (..., {f.m}, {f.n}) float32 array (D in tensor "
                        f"memory), got shape {tuple(d.shape)} dtype {d.dtype}")
    if scale_b.ndim < 2 or scale_b.shape[-2:] != (f.n, f.k // block):
        raise ValueError(f"scale_b must have shape (..., {f.n}, {f.k // block}) (N, K / "
                         f"block), got {tuple(scale_b.shape)}")
    c = keep_c(d, enable_input_d, "enable_input_d")
    return block_scale.mma_block_scale_logical(
        a_codes, b_codes, c, scale_a, jnp.swapaxes(scale_b, -1, -2), a_format=f.a_format,
        b_format=f.b_format, kind=kind, scale_format=f.scale_format, block=block,
        instruction="tcgen05", arch=arch)
