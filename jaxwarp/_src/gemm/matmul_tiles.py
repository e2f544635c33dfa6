"""matmul's instruction tables: which instructions, operand formats, tiles and
accumulators a GEMM can chain, and the tile chosen per target.

Every table here is a view of the instruction catalogue (``isa.ROWS``): ``TILES`` lists the
(m, n, k) shapes per instruction and operand format, ``ACCUMULATORS`` the C types whose D
has the same type, ``DEFAULT_INSTRUCTION`` / ``DEFAULT_TILE`` what ``matmul`` runs when not
told, and :func:`default_tile` the first tile a target issues (the largest k it has for
``mma.sync``: m8n8k4 on sm_70).

Instructions: ``"wmma"`` (``nvcuda::wmma::mma_sync``; f16, bf16, tf32, f64),
``"mma_sync"`` (PTX ``mma.sync.aligned.m16n8kK``; f16, bf16, tf32, e4m3, e5m2),
``"wgmma"`` (PTX ``wgmma.mma_async`` m64nNkK; f16, bf16, tf32, e4m3, e5m2) and
``"tcgen05"`` (m64 or m128).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from jaxwarp._src.catalogue import isa
from jaxwarp._src.catalogue.arch import has, parse_target
from jaxwarp._src.numerics import formats

INSTRUCTIONS = isa.INSTRUCTIONS
# matmul chains the float datapaths (and f64 through WMMA): a row's types are operand
# formats where its datapath is a float family, or f64 on WMMA. (``.kind::`` rows, whose
# fp6 / fp4 operands have no conversion here, are left to ``jaxwarp.mma``.)
# Rows that ``datapath.mma`` takes only on request (``k_auto=False``: the m8n8k4 f16
# quadpair unit, Volta's only ``mma.sync`` shape) are tiles too: matmul names its k.
_TILE_ROWS = tuple(r for r in isa.ROWS if not r.kind and (
    r.datapath not in isa.EXACT_DATAPATHS or (r.instruction, r.datapath) == ("wmma", "f64")))
# (fp6 / fp4, held as codes, have no float dtype to convert a matrix to: not here.)
OPERAND_FORMATS = tuple(dict.fromkeys(t for r in _TILE_ROWS for t in r.a_formats
                                      if not formats.FORMATS[t].code_storage))


def _tiles(instruction: str) -> dict[str, tuple[tuple[int, int, int], ...]]:
    """Per operand format, the instruction's shapes: catalogue order for WMMA (the CUDA
    guide's), largest k first for mma_sync (m16n8k16, m16n8k8, m8n8k4 for f16), every n
    (smallest first) for wgmma."""
    out: dict[str, list] = {}
    for r in _TILE_ROWS:
        if r.instruction == instruction:
            for t in (t for t in r.a_formats if t in OPERAND_FORMATS):
                out.setdefault(t, []).extend(r.shapes)
    if instruction == "mma_sync":
        return {t: tuple(sorted(s, key=lambda s: -s[2])) for t, s in out.items()}
    return {t: tuple(s) for t, s in out.items()}


#: Allowed (m, n, k) per instruction and (a's) operand format; the first is the default.
TILES: dict[str, dict[str, tuple[tuple[int, int, int], ...]]] = {
    i: _tiles(i) for i in INSTRUCTIONS}
_WGMMA_K = {f: shapes[0][2] for f, shapes in TILES["wgmma"].items()}
#: n of the wgmma shapes m64nNkK: multiples of 8 from 8 to 256.
WGMMA_N = tuple(dict.fromkeys(s[1] for shapes in TILES["wgmma"].values() for s in shapes))
#: Default wgmma n: every output element's arithmetic is the same for any n, so the
#: smallest n (the least zero padding of N) is the default.
WGMMA_DEFAULT_N = min(WGMMA_N)

#: The instruction used when ``instruction=None``: WMMA for the formats WMMA has, wgmma
#: (the H100's own fp8 unit) for fp8.
DEFAULT_INSTRUCTION = {f: "wmma" if f in TILES["wmma"] else "wgmma" for f in OPERAND_FORMATS}

#: Default tile per operand format (of its default instruction, on sm_90): the WMMA
#: shapes the CUDA guide lists first, and wgmma m64n8k32 for fp8. Other targets:
#: :func:`default_tile`.
DEFAULT_TILE = {f: TILES[DEFAULT_INSTRUCTION[f]][f][0] for f in OPERAND_FORMATS}

#: Instructions whose M (64 / 128) and N tiles may run past the matrices (zero padding).
PADDED = ("wgmma", "tcgen05")


def default_arch(instruction: Any) -> str:
    """The target ``matmul`` models when given ``arch=None``: ``"sm_90"`` (the H100's,
    verified against one; it stands for ``"sm_90a"`` with wgmma, :func:`issue_arch`),
    or the first target of an instruction that sm_90 lacks (tcgen05: ``"sm_100a"``).

    Example:
        >>> default_arch("wgmma"), default_arch("tcgen05"), default_arch(None)
        ('sm_90', 'sm_100a', 'sm_90')
    """
    rows = [(r.min_sm, r.arch_specific) for r in isa.ROWS if r.instruction == instruction]
    if not rows:  # None (the format's default instruction, sm_90's) or not one: checked later
        return "sm_90"
    sm, specific = min(rows)
    return "sm_90" if sm <= 90 else f"sm_{sm}{'a' if specific else ''}"


def issue_arch(instruction: str, arch: Any) -> Any:
    """wgmma is only in the architecture-specific target: sm_90 means sm_90a for it."""
    return "sm_90a" if instruction == "wgmma" and arch == "sm_90" else arch


def _target_has(instruction: str, fmt: str, k: int, arch: Any) -> bool:
    """Whether ``arch`` (a target name or an ``ArchModel``) issues the instruction's
    shapes of instruction k ``k`` on ``fmt`` operands."""
    name = arch if isinstance(arch, str) else getattr(arch, "name", None)
    try:
        target = parse_target(issue_arch(instruction, name))
    except (ValueError, TypeError):
        return False  # an unknown target: the checks that follow name it
    return has(target, *isa.min_target(instruction, fmt, k))


def default_tile(instruction: str, fmt: str, arch: Any = "sm_90") -> tuple[int, int, int]:
    """The tile ``matmul`` uses when ``tile=None``: the first of ``TILES[instruction]
    [fmt]`` that the target ``arch`` issues (the largest k it has for ``mma.sync``:
    m8n8k4 on sm_70, m16n8k8 on sm_75, m16n8k16 from sm_80 for f16).

    Where the target has none of them, the first: matmul's target check then names the
    architectures that have it.

    Example:
        >>> default_tile("mma_sync", "f16", "sm_70"), default_tile("mma_sync", "f16", "sm_75")
        ((8, 8, 4), (16, 8, 8))
        >>> default_tile("mma_sync", "f16", "sm_80")
        (16, 8, 16)
    """
    shapes = TILES[instruction][fmt]
    if instruction != "wmma":  # WMMA's shapes share their targets (wmma_table checks)
        for s in shapes:
            if _target_has(instruction, fmt, s[2], arch):
                return s
    return shapes[0]


def tiles_text(instruction: str, fmt: str) -> str:
    """The allowed tiles of an error message (the padded families' n range in words)."""
    if instruction == "wgmma":
        return f"(64, n, {_WGMMA_K[fmt]}) with n a multiple of 8 from 8 to 256"
    if instruction == "tcgen05":
        k = TILES["tcgen05"][fmt][0][2]
        return f"(64 or 128, n, {k}) with n a multiple of 8 from 8 to 256"
    return str(list(TILES[instruction][fmt]))


#: Accumulators a GEMM can chain: C types whose D has the same type, at the tiles.
ACCUMULATORS = {
    i: {f: tuple(dict.fromkeys(c for r in _TILE_ROWS if r.instruction == i and f in r.a_formats
                               for c, d in r.cd if c == d))
        for f in TILES[i]}
    for i in INSTRUCTIONS}
#: The storage dtype of each accumulator type.
ACC_DTYPE = {t: isa.storage_dtype(t) for t in ("f16", "f32", "f64")}


@dataclasses.dataclass(frozen=True)
class Cfg:
    """Static configuration of one product (hashable: a custom_vjp nondiff argument)."""

    a_format: str
    b_format: str
    accumulator: str
    tile: tuple[int, int, int]
    instruction: str
    arch: Any
    mode: str
    promote_every: int | None
    scaled: bool
    blockwise: bool = False  # a_scale / b_scale are block scales (DeepSeek-V3's recipe)

    @property
    def fp8(self) -> bool:
        return self.a_format in isa.FP8_TYPES

    @property
    def legacy(self) -> bool:
        """The WMMA path exactly as before instructions and fp8 existed."""
        return self.instruction == "wmma"
