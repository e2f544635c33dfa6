"""Key names of reference-model files: ``golden/{family}/{arch}/{qualifier}/{field}``.

Files written by ``tools/crosscheck`` (outputs of the published reference model MMA-Sim,
not of a GPU). ``family`` is ``mma``, ``mma_block_scale``, ``tcgen05`` or
``tcgen05_block_scale``; ``arch`` is MMA-Sim's architecture name (spaces as ``_``);
``qualifier`` is MMA-Sim's shape-and-type string in PTX order::

    mma                  m{M}n{N}k{K}[.kind::f8f6f4].{D}.{A}.{B}.{C}
    mma_block_scale      m{M}n{N}k{K}.kind::{KIND}.block{32|16}.{D}.{A}.{B}.{C}.{S}
    tcgen05              m{M}n{N}k{K}.kind::{f16|tf32|f8f6f4}.{D}.{A}.{B}   (C has D's type)
    tcgen05_block_scale  m{M}n{N}k{K}.kind::{KIND}.block{32|16}.{D}.{A}.{B}.{S}

(block-scaled ``KIND``: ``mxf8f6f4``, ``mxf4`` or ``mxf4nvf4``)

Fields hold raw bits, one trial per leading index: ``A`` (T, M, K), ``B`` (T, K, N),
``C``/``D`` (T, M, N), block-scaled ``SA`` (T, M, K/block) and ``SB`` (T, K/block, N),
and the optional ``kind`` (T,) saying how each trial was drawn. ``kind::mxf4`` and
``kind::mxf4nvf4`` pack two e2m1 per byte along K (A is (T, M, K/2), B (T, K/2, N)).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from jaxwarp._src.catalogue import isa, mfma_table
from jaxwarp._src.conformance.registry import CaptureError
from jaxwarp._src.numerics.formats import FNUZ_FORMATS, FORMATS

#: MMA-Sim's architecture names -> the target jaxwarp models them with.
ARCH_TARGETS = {
    "Volta": "sm_70", "Turing": "sm_75", "Ampere": "sm_80", "Ada_Lovelace": "sm_89",
    "Hopper": "sm_90", "Blackwell": "sm_100a", "RTX_Blackwell": "sm_120a",
}
FAMILIES = ("mma", "mma_block_scale", "tcgen05", "tcgen05_block_scale", "mfma")
#: MMA-Sim's AMD architectures (family ``mfma``): the generations of the MFMA catalogue.
MFMA_ARCHS = mfma_table.GENERATIONS
#: Operand types of the files; fp6 (e3m2, e2m3) and fp4 (e2m1) one element per byte.
OPERAND_TYPES = ("f64", "tf32", "f16", "bf16", "e4m3", "e5m2", "e3m2", "e2m3", "e2m1")
ACCUMULATOR_TYPES = ("f16", "f32", "f64")
SCALE_TYPES = isa.BLOCK_SCALE_TYPES
FP6_FP4 = tuple(t for t in isa.F8F6F4_TYPES if t not in isa.FP8_TYPES)
#: The ``.kind::`` of each family's qualifiers (the block-scaled ones: the catalogue's).
_KINDS = {
    "mma": ("", "f8f6f4"),
    "mma_block_scale": tuple(r.kind for r in isa.block_scale_rows("mma_sync")),
    "tcgen05": ("f16", "tf32", "f8f6f4"),
    "tcgen05_block_scale": tuple(r.kind for r in isa.block_scale_rows("tcgen05")),
}
_TYPE_SLOTS = {
    "mma": ("D", "A", "B", "C"),
    "mma_block_scale": ("D", "A", "B", "C", "S"),
    "tcgen05": ("D", "A", "B"),
    "tcgen05_block_scale": ("D", "A", "B", "S"),
}
#: Fields every group needs, and the optional ones.
FIELDS = ("A", "B", "C", "D")
SCALE_FIELDS = ("SA", "SB")
OPTIONAL_FIELDS = ("kind",)


def raw_dtype(t: str) -> np.dtype:
    """How a file stores one element of ``t``: unsigned bits as wide as the format
    (tf32 as the whole fp32 word); fp6/fp4 and scale codes one per byte.

    Example:
      >>> raw_dtype("bf16"), raw_dtype("tf32"), raw_dtype("e2m1")
      (dtype('uint16'), dtype('uint32'), dtype('uint8'))
    """
    if t in FP6_FP4 or t in SCALE_TYPES or t in FNUZ_FORMATS:
        return np.dtype(np.uint8)
    return np.dtype(FORMATS[t].uint_dtype)


@dataclasses.dataclass(frozen=True)
class GoldenName:
    """A parsed ``golden/{family}/{arch}/{qualifier}`` group name.

    Attributes:
      family, arch, qualifier: as in the key.
      m, n, k: the instruction's shape.
      kind: the ``kind::`` qualifier without its prefix (``""`` when absent).
      block: the scale block size of the block-scaled families (0 otherwise).
      a_format, b_format, c_format, d_format: element types (``tcgen05``: C has D's type).
      s_type: the scale type of the block-scaled families (``""`` otherwise).
    """

    family: str
    arch: str
    qualifier: str
    m: int
    n: int
    k: int
    kind: str
    block: int
    a_format: str
    b_format: str
    c_format: str
    d_format: str
    s_type: str = ""

    @property
    def group(self) -> str:
        return f"golden/{self.family}/{self.arch}/{self.qualifier}"

    @property
    def target(self) -> str:
        """The jaxwarp target of the architecture (``"Hopper"`` -> ``"sm_90"``; an AMD
        generation is its own target name: ``"CDNA3"``)."""
        return self.arch if self.family == "mfma" else ARCH_TARGETS[self.arch]

    @property
    def packed(self) -> bool:
        """Two e2m1 per byte along K (``kind::mxf4``, ``kind::mxf4nvf4``)."""
        return self.kind in ("mxf4", "mxf4nvf4")

    @property
    def ptx_qualifier(self) -> str:
        """The ``mma.sync.aligned`` qualifier jaxwarp's ``mma_sync_ptx_logical`` takes.

        Example:
          >>> parse_golden_name("mma", "Ampere", "m16n8k8.f32.tf32.tf32.f32").ptx_qualifier
          'm16n8k8.row.col.f32.tf32.tf32.f32'
        """
        kind = f"kind::{self.kind}." if self.kind else ""
        return (f"m{self.m}n{self.n}k{self.k}.row.col.{kind}{self.d_format}.{self.a_format}."
                f"{self.b_format}.{self.c_format}")

    def field_shapes(self) -> dict[str, tuple[int, ...]]:
        """Each field's shape after the trial axis, and its raw dtype's type name."""
        ka = self.k // 2 if self.packed else self.k
        out = {"A": (self.m, ka), "B": (ka, self.n), "C": (self.m, self.n),
               "D": (self.m, self.n)}
        if self.block:
            out.update(SA=(self.m, self.k // self.block), SB=(self.k // self.block, self.n))
        return out

    def field_type(self, field: str) -> str:
        return {"A": self.a_format, "B": self.b_format, "C": self.c_format, "D": self.d_format,
                "SA": self.s_type, "SB": self.s_type}[field]


def split_golden_key(key: str) -> tuple[str, str, str, str] | None:
    """``golden/{family}/{arch}/{qualifier}/{field}`` -> its four parts; None for a key
    outside ``golden/`` (a qualifier has no ``/``, so the split is unique).

    Example:
      >>> split_golden_key("golden/mma/Hopper/m16n8k16.f32.bf16.bf16.f32/D")
      ('mma', 'Hopper', 'm16n8k16.f32.bf16.bf16.f32', 'D')
    """
    parts = key.split("/")
    if len(parts) != 5 or parts[0] != "golden":
        return None
    return parts[1], parts[2], parts[3], parts[4]


def is_golden_key(key: str) -> bool:
    """Every key under ``golden/`` (a malformed one too: the handler names its fault)."""
    return key.startswith("golden/")


def parse_golden_name(family: str, arch: str, qualifier: str) -> GoldenName:
    """Parses one group name of a reference-model file.

    Raises:
      CaptureError: an unknown family, architecture, kind, block size or type, or a
        qualifier that does not follow the grammar (the message names the group and
        what is allowed).

    Example:
      >>> g = parse_golden_name("tcgen05", "Blackwell", "m64n8k32.kind::f8f6f4.f16.e5m2.e3m2")
      >>> (g.m, g.n, g.k, g.kind, g.a_format, g.b_format, g.c_format, g.d_format)
      (64, 8, 32, 'f8f6f4', 'e5m2', 'e3m2', 'f16', 'f16')
    """
    where = f"golden/{family}/{arch}/{qualifier}"
    if family not in FAMILIES:
        raise CaptureError(f"{where}: family {family!r} unknown; valid: {FAMILIES}")
    if family == "mfma":
        return _parse_mfma_name(where, arch, qualifier)
    if arch not in ARCH_TARGETS:
        raise CaptureError(f"{where}: architecture {arch!r} unknown; valid: "
                           f"{tuple(ARCH_TARGETS)}")
    parts = qualifier.split(".")
    mnk = isa.parse_shape(parts[0]) if parts else None
    if mnk is None:
        raise CaptureError(f"{where}: qualifier {qualifier!r} does not start with a shape "
                           f"'m{{M}}n{{N}}k{{K}}'")
    rest = parts[1:]
    kind = ""
    if rest and rest[0].startswith("kind::"):
        kind = rest.pop(0)[len("kind::"):]
    if kind not in _KINDS[family]:
        raise CaptureError(f"{where}: kind {kind or '(none)'!r} is not one of {family}'s "
                           f"{tuple(k or '(none)' for k in _KINDS[family])}")
    block = 0
    if family.endswith("block_scale"):
        if not rest or rest[0] not in ("block16", "block32"):
            raise CaptureError(f"{where}: a block-scaled qualifier needs 'block16' or "
                               f"'block32' after the kind")
        block = int(rest.pop(0)[len("block"):])
    slots = _TYPE_SLOTS[family]
    if len(rest) != len(slots):
        raise CaptureError(f"{where}: qualifier {qualifier!r} needs {len(slots)} types "
                           f"({'.'.join(slots)}) after the shape and kind; got {rest}")
    ty = dict(zip(slots, rest, strict=True))
    ty.setdefault("C", ty["D"])
    for slot, allowed in (("A", OPERAND_TYPES), ("B", OPERAND_TYPES),
                          ("C", ACCUMULATOR_TYPES), ("D", ACCUMULATOR_TYPES),
                          ("S", SCALE_TYPES)):
        if slot in ty and ty[slot] not in allowed:
            raise CaptureError(f"{where}: {slot} type {ty[slot]!r} unknown; valid: {allowed}")
    m, n, k = mnk
    if block and k % block:
        raise CaptureError(f"{where}: k = {k} is not a multiple of the block {block}")
    return GoldenName(family, arch, qualifier, m, n, k, kind, block, ty["A"], ty["B"],
                      ty["C"], ty["D"], ty.get("S", ""))


def _parse_mfma_name(where: str, arch: str, suffix: str) -> GoldenName:
    """``golden/mfma/{CDNA1|CDNA2|CDNA3}/{suffix}``: the suffix is MMA-Sim's (AMD's
    instruction name without ``v_mfma_``); M, N, K are one block's; C has D's type.

    Example:
      >>> g = parse_golden_name("mfma", "CDNA3", "f32_16x16x32_fp8_bf8")
      >>> (g.m, g.n, g.k, g.a_format, g.b_format, g.c_format, g.target)
      (16, 16, 32, 'e4m3fnuz', 'e5m2fnuz', 'f32', 'CDNA3')
    """
    if arch not in MFMA_ARCHS:
        raise CaptureError(f"{where}: architecture {arch!r} unknown for mfma; valid: "
                           f"{MFMA_ARCHS}")
    try:
        row = mfma_table.mfma_row(suffix, arch)
    except ValueError as e:
        raise CaptureError(f"{where}: {e}") from None
    return GoldenName("mfma", arch, suffix, row.m, row.n, row.k, "", 0, row.a_format,
                      row.b_format, row.c_format, row.c_format)
