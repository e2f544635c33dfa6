"""AMD Instinct matrix cores: every ``v_mfma_*`` variant of CDNA1, CDNA2 and CDNA3, and
the datapath each one's arithmetic follows.

One :class:`MfmaRow` per (architecture, instruction): its name as AMD's ISA guide spells
it (``v_mfma_f32_32x32x8f16`` on CDNA1 / CDNA2, ``v_mfma_f32_32x32x8_f16`` on CDNA3, the
multi-block ``_2b`` / ``_4b`` / ``_16b`` forms, ``_1k`` bf16 of CDNA2, the fp8 / bf8 pairs
of CDNA3), one block's shape (M, N, K), the number of blocks, the operand formats, and a
:class:`MfmaDatapath`: the arithmetic as data (read by ``arithmetic/mfma.py``). The rows and
the datapath parameters follow the published reference model MMA-Sim 2.1.1 (Xie et al.,
arXiv 2511.10909), whose authors validated it on MI100, MI250 and MI300 class GPUs:

=============  ==========================  ===============================================
generation     operands                    arithmetic (``MfmaDatapath.kind``)
=============  ==========================  ===============================================
CDNA1, CDNA2   f32; CDNA2 f64              ``"fma"``: IEEE fma chain in k order
CDNA1          f16 / bf16                  ``"exact"``: groups of 4 (f16) / 2 (bf16)
                                           products and C summed exactly, rounded once to
                                           nearest even into f32
CDNA2          f16 / bf16                  ``"ftz_chain"``: f32 products, pairs added,
                                           (pairs of pairs for f16 and bf16_1k), added to
                                           C; inputs below their format's normal
                                           range read as +0, products and sums below
                                           f32's as zeros of their sign
CDNA3          f32, f64                    ``"fma"``
CDNA3          f16 / bf16 / xf32           ``"trunc"``: groups of 8 (xf32: 4) products
                                           truncated to 24 bits below the group's largest
                                           exponent, then C joined with 32 / 24 bits,
                                           floored to 31 fraction bits, rounded to nearest
                                           even into f32 (xf32: tf32 operands)
CDNA3          fp8 / bf8 (fnuz)            ``"trunc_split"``: as ``"trunc"`` over groups of
                                           16, the even and the odd products summed apart
=============  ==========================  ===============================================

Example:
    >>> row = mfma_row("v_mfma_f32_32x32x8_f16", "gfx942")
    >>> row.name, (row.m, row.n, row.k), row.blocks, row.datapath.kind, row.datapath.group
    ('v_mfma_f32_32x32x8_f16', (32, 32, 8), 1, 'trunc', 8)
    >>> mfma_row("f32_16x16x4f16", "CDNA1").blocks
    4
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

__all__ = [
    "ARCH_NAMES",
    "GENERATIONS",
    "MFMA_FORMATS",
    "MfmaDatapath",
    "MfmaRow",
    "ROWS",
    "generation",
    "mfma_row",
    "suffixes",
]

#: The generations MMA-Sim models, with the gfx target and product names of each.
GENERATIONS = ("CDNA1", "CDNA2", "CDNA3")
#: Every accepted architecture name -> its generation.
ARCH_NAMES = {
    "CDNA1": "CDNA1", "gfx908": "CDNA1", "MI100": "CDNA1",
    "CDNA2": "CDNA2", "gfx90a": "CDNA2", "MI200": "CDNA2",
    "CDNA3": "CDNA3", "gfx942": "CDNA3", "MI300": "CDNA3",
}
#: AMD's operand type names in instruction names -> jaxwarp's formats.
MFMA_FORMATS = {"f64": "f64", "f32": "f32", "xf32": "tf32", "f16": "f16", "bf16": "bf16",
                "fp8": "e4m3fnuz", "bf8": "e5m2fnuz"}

#: Datapath kinds (see the module docstring).
KINDS = ("fma", "exact", "ftz_chain", "trunc", "trunc_split")


@dataclasses.dataclass(frozen=True)
class MfmaDatapath:
    """The arithmetic of one MFMA, as parameters.

    Attributes:
      kind: one of ``"fma"``, ``"exact"``, ``"ftz_chain"``, ``"trunc"``, ``"trunc_split"``.
      group: products fused in one step (``"exact"``, ``"trunc"``, ``"trunc_split"``: k is
        cut into groups of ``min(group, K)``; ``"ftz_chain"``: 2 or 4, the products
        added pairwise before C).
      alignment_bits: F: products truncated to a multiple of ``2**(E - F)``, E the
        largest product exponent of the group (and C to the same below the joined
        exponent).
      sum_bits: F2: the product sum joins C with ``F2 + 1`` fraction bits (floored) and
        the joined sum is floored to ``F2`` fraction bits before rounding to f32.
    """

    kind: str
    group: int = 1
    alignment_bits: int = 24
    sum_bits: int = 31

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"MfmaDatapath.kind must be one of {KINDS}, got {self.kind!r}")


@dataclasses.dataclass(frozen=True)
class MfmaRow:
    """One ``v_mfma_*`` instruction of one generation (see the module docstring)."""

    arch: str
    suffix: str
    m: int
    n: int
    k: int
    blocks: int
    a_format: str
    b_format: str
    c_format: str
    datapath: MfmaDatapath

    @property
    def name(self) -> str:
        """The instruction as AMD's ISA guide of the generation names it."""
        return "v_mfma_" + self.suffix


_CDNA1 = (
    "f32_32x32x2f32", "f32_32x32x1f32", "f32_16x16x4f32", "f32_16x16x1f32", "f32_4x4x1f32",
    "f32_32x32x8f16", "f32_32x32x4f16", "f32_16x16x16f16", "f32_16x16x4f16", "f32_4x4x4f16",
    "f32_32x32x4bf16", "f32_32x32x2bf16", "f32_16x16x8bf16", "f32_16x16x2bf16",
    "f32_4x4x2bf16",
)
_CDNA2 = _CDNA1 + (
    "f64_16x16x4f64", "f64_4x4x4f64",
    "f32_32x32x8bf16_1k", "f32_32x32x4bf16_1k", "f32_16x16x16bf16_1k",
    "f32_16x16x4bf16_1k", "f32_4x4x4bf16_1k",
)
_CDNA3 = (
    "f64_16x16x4_f64", "f64_4x4x4_4b_f64",
    "f32_32x32x1_2b_f32", "f32_16x16x1_4b_f32", "f32_4x4x1_16b_f32", "f32_32x32x2_f32",
    "f32_16x16x4_f32",
    "f32_16x16x8_xf32", "f32_32x32x4_xf32",
    "f32_32x32x4_2b_f16", "f32_16x16x4_4b_f16", "f32_4x4x4_16b_f16", "f32_32x32x8_f16",
    "f32_16x16x16_f16",
    "f32_32x32x4_2b_bf16", "f32_16x16x4_4b_bf16", "f32_4x4x4_16b_bf16", "f32_32x32x8_bf16",
    "f32_16x16x16_bf16",
    "f32_16x16x32_bf8_bf8", "f32_16x16x32_bf8_fp8", "f32_16x16x32_fp8_bf8",
    "f32_16x16x32_fp8_fp8", "f32_32x32x16_bf8_bf8", "f32_32x32x16_bf8_fp8",
    "f32_32x32x16_fp8_bf8", "f32_32x32x16_fp8_fp8",
)
_SUFFIXES = {"CDNA1": _CDNA1, "CDNA2": _CDNA2, "CDNA3": _CDNA3}

_OLD = re.compile(r"(f32|f64)_(\d+)x(\d+)x(\d+)(f32|f64|f16|bf16)(_1k)?$")
_NEW = re.compile(r"(f32|f64)_(\d+)x(\d+)x(\d+)(?:_(\d+)b)?_(f32|f64|f16|bf16|xf32|fp8|bf8)"
                  r"(?:_(fp8|bf8))?$")


def _blocks_old(m: int, k: int, t: str, one_k: bool) -> int:
    """Blocks of a CDNA1 / CDNA2 name (no ``_Nb`` in it): a 64-lane wave's output is
    M * N = 1024 (f32) or 256 (f64, 16x16; 4x4x4f64: 4 blocks) per block group; the
    reduced-k forms are multi-block (AMD's CDNA3 guide renames them ``_Nb``)."""
    if t == "f64":
        return 4 if m == 4 else 1
    if m == 4:
        return 16
    full_k = {"f32": {32: 2, 16: 4}, "f16": {32: 8, 16: 16}, "bf16": {32: 4, 16: 8}}[t]
    if one_k:
        full_k = {32: 8, 16: 16}
    return 1 if k == full_k[m] else 2 if m == 32 else 4


def _row(arch: str, suffix: str) -> MfmaRow:
    mo = _OLD.match(suffix)
    if mo:
        d, m, n, k, t, one_k = mo.groups()
        m, n, k = int(m), int(n), int(k)
        a = b = t
        blocks = _blocks_old(m, k, t, bool(one_k))
    else:
        mn = _NEW.match(suffix)
        assert mn, suffix
        d, m, n, k, nb, a, b = mn.groups()
        m, n, k = int(m), int(n), int(k)
        b = b or a
        blocks = int(nb) if nb else 1
    if a in ("f32", "f64"):
        dp = MfmaDatapath("fma")
    elif a in ("fp8", "bf8"):
        dp = MfmaDatapath("trunc_split", group=16)
    elif arch == "CDNA1":
        dp = MfmaDatapath("exact", group=4 if a == "f16" else 2)
    elif arch == "CDNA2":
        dp = MfmaDatapath("ftz_chain", group=2 if a == "bf16" and not suffix.endswith("_1k")
                          else 4)
    else:
        dp = MfmaDatapath("trunc", group=4 if a == "xf32" else 8)
    return MfmaRow(arch, suffix, m, n, k, blocks, MFMA_FORMATS[a], MFMA_FORMATS[b],
                   MFMA_FORMATS[d], dp)


#: Every row, by (generation, MMA-Sim's suffix).
ROWS: dict[tuple[str, str], MfmaRow] = {
    (g, s): _row(g, s) for g, names in _SUFFIXES.items() for s in names}


def _squash(name: str) -> str:
    return name.lower().removeprefix("v_mfma_").replace("_", "")


_BY_SQUASHED = {(g, _squash(s)): r for (g, s), r in ROWS.items()}


def generation(arch: Any, argname: str = "arch") -> str:
    """``"gfx942"``, ``"MI300"`` or ``"CDNA3"`` -> ``"CDNA3"`` (likewise CDNA1, CDNA2).

    Raises:
      ValueError: an unknown name (the message lists the allowed ones).

    Example:
      >>> generation("gfx90a"), generation("MI100")
      ('CDNA2', 'CDNA1')
    """
    if not isinstance(arch, str) or arch not in ARCH_NAMES:
        raise ValueError(f"{argname}={arch!r} is not an AMD matrix-core architecture; "
                         f"allowed: {tuple(ARCH_NAMES)}")
    return ARCH_NAMES[arch]


def suffixes(arch: Any) -> tuple[str, ...]:
    """The instruction suffixes (MMA-Sim's, AMD's names without ``v_mfma_``) of a
    generation.

    Example:
      >>> len(suffixes("CDNA1")), len(suffixes("gfx90a")), len(suffixes("gfx942"))
      (15, 22, 27)
    """
    return _SUFFIXES[generation(arch)]


def mfma_row(suffix: Any, arch: Any, argname: str = "suffix") -> MfmaRow:
    """The row of an instruction on an architecture. ``suffix`` is AMD's name with or
    without ``v_mfma_`` and in either generation's spelling (``f32_32x32x8f16`` or
    ``f32_32x32x8_f16``; case and underscores are not significant).

    Raises:
      ValueError: an unknown architecture, or an instruction the generation does not have
        (the message lists the ones it has).
    """
    gen = generation(arch)
    row = _BY_SQUASHED.get((gen, _squash(suffix))) if isinstance(suffix, str) else None
    if row is None:
        have = [g for g in GENERATIONS if isinstance(suffix, str)
                and (g, _squash(suffix)) in _BY_SQUASHED]
        where = f" (it is on {have})" if have else ""
        raise ValueError(f"{argname}={suffix!r} is not an MFMA of {gen} ({arch}){where}; "
                         f"allowed: {tuple('v_mfma_' + s for s in _SUFFIXES[gen])}")
    return row
