"""Architecture as data: what a target can issue, and how its tensor cores add.

Two separate things:

* a :class:`Target` is a *capability*: the ``sm_XY[a]`` a kernel is compiled for
  (:func:`parse_target`, the one parser of an architecture name). Which instructions,
  operand types and shapes it can issue is the instruction catalogue's business
  (``isa.ROWS``: minimum ``sm`` and ``a`` target per shape); :func:`check_target` and
  :func:`instruction_k` read it;
* a :class:`Datapath` is the *arithmetic* of one instruction family and operand type:
  how many products are fused per block, how many alignment bits are kept, where C is
  added, how the block sum is rounded. An :class:`ArchModel` collects the datapaths of
  one architecture; :data:`ARCHS` maps every target name to one.

Datapath models (see ``jaxwarp._src.arithmetic.datapath`` for what each field does), and
what each was checked against bit for bit (:attr:`ArchModel.verified`, per family
:meth:`ArchModel.verification`):

===============  ====================================================  ===============
target           model                                                 verified
===============  ====================================================  ===============
sm_90(a)         H100: f16/bf16 blocks of 16, tf32 one block per k4/k8  hardware (H100
                 instruction, F = 25; fp8 ``mma.sync`` lowered to two   captures)
                 f16 HMMAs + FADD; ``wgmma`` fp8 blocks of 32 with
                 F = 13 and a 13-bit sum; ``mma.sync`` m8n8k4 f16 an
                 FFMA routine
sm_70            Volta: f16 chunks of 4, F = 23, E >= emin(D) - 5,      MMA-Sim 2.1.1
                 each chunk rounded as D                                (WMMA: unverified)
sm_75            Turing: f16 chunks of 8, F = 24, E >= emin(D) - 6;     MMA-Sim 2.1.1
                 m8n8k4 f16 with Volta's arithmetic
sm_80/86/87      Ampere: f16/bf16 chunks of 8, tf32 of 4, F = 24,       MMA-Sim 2.1.1
                 E >= emin(D) - 6                                       (m8n8k4 f16:
                                                                        unverified)
sm_89            Ada: Ampere's; fp8 ``mma.sync`` chunks of 16, F = 13,  MMA-Sim 2.1.1
                 an f32 D cut to 13 fraction bits                       (m8n8k4 f16:
                                                                        unverified)
sm_100(a)        Blackwell: sm_90's f16/bf16/tf32 datapaths (MMA-Sim's  MMA-Sim 2.1.1
                 Hopper parameters); fp8 ``mma.sync`` and m8n8k4 f16   (fp8, m8n8k4:
                 as sm_90 lowers them                                   unverified)
sm_103(a)        the sm_100 model                                       unverified
sm_120(a)        RTX Blackwell: sm_90's f16/bf16/tf32 datapaths; fp8    MMA-Sim 2.1.1
                 and ``kind::f8f6f4`` (sm_120a) chunks of 32, F = 25;  (m8n8k4:
                 m8n8k4 f16 as sm_90 lowers it                          unverified)
sm_121(a)        the sm_120 model                                       unverified
sm_100a,         ``tcgen05.mma`` dense kinds: one chunk per instruction   MMA-Sim 2.1.1
sm_103a          (16 f16/bf16, 8 tf32, 32 fp8/fp6/fp4), F = 25,         (sm_103a:
                 E >= emin(D) - 7; kind::i8 exact                       unverified)
===============  ====================================================  ===============

"MMA-Sim 2.1.1": every ``mma.sync`` configuration that the reference model MMA-Sim
(Xie et al. 2025, validated on the GPUs by its authors) has for the architecture gives
its bits (single instructions and chains along k; counts per configuration in the
benchmark records); where it and the sm_90 hardware captures disagree, the hardware is
kept.

Example:
    >>> parse_target("sm_90a")
    Target(name='sm_90a', sm=90, arch_specific=True)
    >>> datapath_for("sm_90a", "wgmma", "e4m3", 32).F
    13
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from jaxwarp._src.catalogue import isa
from jaxwarp._src.checks import format_name, static_choice
from jaxwarp._src.numerics.formats import ALIASES

_TARGET_RE = re.compile(r"sm_?([1-9][0-9]*)([af]?)")


# --------------------------------------------------------------------------------------
# Targets (capabilities).


@dataclasses.dataclass(frozen=True)
class Target:
    """A compilation target ``sm_{sm}`` (``arch_specific``: the ``a`` suffix).

    Example:
        >>> jaxwarp.Target("sm_90a", 90, True) == jaxwarp.parse_target("sm_90a")
        True
    """

    name: str
    sm: int
    arch_specific: bool = False


def parse_target(arch: Any, argname: str = "arch") -> Target:
    """The one parser of an architecture name: ``"sm_90a"`` -> ``Target("sm_90a", 90,
    True)``. ``"sm90"`` is read as ``"sm_90"``; any ``sm_XY[a|f]`` is a target (what it
    can issue is jaxwarp.isa's business); a function that computes on the target also
    asks for a datapath model of it (a key of ``jaxwarp.ARCHS``).

    Raises:
      ValueError: naming ``argname``, if ``arch`` is not an ``sm_XY`` name.

    Example:
        >>> jaxwarp.parse_target("sm_90a")
        Target(name='sm_90a', sm=90, arch_specific=True)
        >>> jaxwarp.parse_target("sm90").name
        'sm_90'
    """
    if isinstance(arch, Target):
        return arch
    m = _TARGET_RE.fullmatch(arch.strip().lower()) if isinstance(arch, str) else None
    if m is None:
        raise ValueError(f"{argname}={arch!r} is not an architecture name; expected e.g. "
                         f"'sm_80', 'sm_90'")
    return Target(f"sm_{m.group(1)}{m.group(2)}", int(m.group(1)), m.group(2) == "a")


def supported_target(arch: Any, argname: str = "arch") -> Target:
    """:func:`parse_target`, for a target that has a datapath model (:data:`TARGETS`).

    Raises:
      ValueError: naming ``argname`` and listing :data:`TARGETS`.
    """
    target = parse_target(arch, argname) if isinstance(arch, str) else None
    if target is None or target.name not in TARGETS:
        raise ValueError(f"{argname}={arch!r} is not supported; allowed: {TARGETS}")
    return target


def _need(sm: int, arch_specific: bool) -> str:
    return f"sm_{sm}a" if arch_specific else f"sm_{sm} or newer"


def has(target: Target, sm: int, arch_specific: bool = False) -> bool:
    """True if ``target`` is ``sm_{sm}`` or newer; with ``arch_specific``, an ``a``
    target of the same generation (the hundreds and tens of ``sm``: what ``sm_90a``
    adds is not in ``sm_100a``, what ``sm_120a`` adds is also in ``sm_121a``).

    Example:
        >>> [has(parse_target(t), 120, True) for t in ("sm_120", "sm_121a", "sm_100a")]
        [False, True, False]
    """
    if arch_specific:
        return (target.arch_specific and target.sm >= sm
                and isa.generation(target.sm) == isa.generation(sm))
    return target.sm >= sm


def check_target(target: Target, instruction: str, a_format: str, b_format: str,
                 k: int | None = None) -> None:
    """Raises ValueError if ``target`` cannot issue ``instruction`` on these types (at
    instruction k ``k``, or at its smallest target). Minimums: ``isa.ROWS``."""
    for t in dict.fromkeys((a_format, b_format)):
        if not isa.rows(instruction, t):
            raise ValueError(f"instruction={instruction!r} has no {t!r} operands; it takes "
                             f"{sorted(isa.a_formats(instruction))}")
        sm, needs_a = isa.min_target(instruction, t)
        if not has(target, sm, needs_a):
            raise ValueError(f"{instruction} with {t} operands needs {_need(sm, needs_a)}; "
                             f"arch={target.name!r}")
        if k is not None:
            sm, needs_a = isa.min_target(instruction, t, k)
            if not has(target, sm, needs_a):
                shapes = [isa.shape_name(s) for s in isa.shapes(instruction, t) if s[2] == k]
                raise ValueError(f"{instruction} with {t} operands at k = {k} "
                                 f"({', '.join(shapes)}) needs {_need(sm, needs_a)}; "
                                 f"arch={target.name!r}")
        rs = [r for r in isa.rows(instruction, t) if k is None or k in r.ks]
        if rs and all(target.sm in r.not_on for r in rs if has(target, r.min_sm,
                                                                 r.arch_specific)):
            have = sorted({f"sm_{r.min_sm}" + "a" * r.arch_specific for r in rs})
            raise ValueError(f"{instruction} with {t} operands needs {' or '.join(have)}; "
                             f"sm_{target.sm} does not issue it; arch={target.name!r}")


def resolve_instruction_k(instruction: str, a_format: str, k: int, requested: int | None) -> int:
    """The k of one instruction: ``requested`` if given (checked), else the largest
    shape of the family that divides the k axis. Raises ValueError naming the shapes."""
    auto, extra = isa.instruction_ks(instruction, a_format)
    allowed = auto + extra
    if requested is not None:
        if requested not in allowed:
            raise ValueError(f"instruction_k={requested!r} is not a k of {instruction} with "
                             f"{a_format} operands; allowed: {allowed}")
        if k % requested:
            raise ValueError(f"k = {k} is not a multiple of instruction_k={requested} "
                             f"({instruction} {a_format}): k must be a chain of whole "
                             f"instructions")
        return requested
    for ik in auto:
        if k % ik == 0:
            return ik
    raise ValueError(f"k = {k} is not a multiple of the k of any {instruction} shape with "
                     f"{a_format} operands {auto}; pad k or pass instruction_k")


# --------------------------------------------------------------------------------------
# Datapath models (arithmetic).

_CHOICES = {
    "c_mode": ("fused", "end", "ffma"),
    "align": ("nominal", "normalised"),
    "sub_exp": ("emin", "lead"),
    "c_sub_exp": ("lead", "emin", "emin_c"),
    "trunc": ("rz", "floor"),
    "block_round": ("rz", "rn"),
    "f16_out": ("direct", "via_f32"),
    "f16_round": ("rn", "rz"),
    "f16_zero": ("plus", "keep"),
    "f32_zero": ("plus", "keep"),
    "zero": ("plus", "ieee"),
    "k_split": ("contig", "mod4"),
    "operand_via": ("", "f16"),
    "block_out": ("f32", "d"),
}


@dataclasses.dataclass(frozen=True)
class Datapath:
    """Arithmetic of one tensor-core instruction family and operand type.

    One output element ``d = sum_k a_k b_k + c`` of one instruction:

    Attributes:
      block_k: products fused per block (cut in k order, after ``k_split``).
      F: alignment bits: every term is truncated to a multiple of ``2**(E - F)``, E the
        block's largest alignment exponent.
      c_mode: ``"fused"``: C is a term of the first block, each later block takes the
        previous block's fp32 result as its accumulator term (HMMA, wgmma);
        ``"end"``: the blocks chain from +0 in d's type and C is added last by an
        IEEE addition rounded to nearest (mma.sync fp8 on sm_90: HMMAs + FADD/HADD2);
        ``"ffma"``: a chain of IEEE fp32 FFMAs (mma.sync m8n8k4 f16 on sm_90).
      align: a product's alignment exponent is the sum of the operands' exponents
        (``"nominal"``) or the exact product's leading-bit exponent (``"normalised"``).
      sub_exp: a subnormal operand counts with the format's minimum normal exponent
        (``"emin"``, as an adder of biased exponent fields sees it) or with its own
        leading bit (``"lead"``).
      c_sub_exp: ``"emin"``: the accumulator counts with at least the minimum normal
        exponent of the format the block sums into (D or fp32), ``"emin_c"``: of its
        own format (an f16 subnormal C of an fp32 D at 2**-14), ``"lead"``: with its
        own leading bit.
      e_floor: ``None``, or E is at least that format's minimum normal exponent less
        ``e_floor`` (also with a zero accumulator: sm_90 cuts terms at
        ``2**(emin - 7 - F)`` at the finest, ``2**-46`` with an f16 C and D, ``2**-158`` with
        an fp32 one).
      trunc: aligned terms are truncated toward zero (``"rz"``) or toward minus
        infinity (``"floor"``).
      block_round: rounding of a block sum to fp32 (``"rz"`` / ``"rn"``).
      sum_mbits: fraction bits kept when a block sum becomes fp32 (23: all).
      f16_out: with an f16 C, an f16 D is rounded from the block sum ``"direct"``-ly
        or ``"via_f32"`` (an fp32 C always goes through fp32).
      f16_round: rounding to f16 (``"rn"`` / ``"rz"``).
      f16_zero: an f16 D of -0 from a direct rounding becomes +0 (``"plus"``) or stays
        (``"keep"``).
      f32_zero: an fp32 D (or block result) of -0 becomes +0 (``"plus"``: a negative
        sum below fp32's range truncates to +0 on sm_90) or stays (``"keep"``).
      zero: an exact zero block sum is +0 (``"plus"``), or -0 when every term is a
        zero of negative sign (``"ieee"``).
      k_split: order of k before blocks are cut: ``"contig"`` or ``"mod4"`` (k % 4 in
        {0, 1} first, then the rest: how sm_90 feeds fp8 k to two f16 HMMAs).
      operand_via: ``"f16"``: fp8 operands are first converted (exactly) to f16.
      block_out: a block's result that is the next block's accumulator (``block_k``
        below the instruction's k) is fp32 (``"f32"``) or rounded to D's type, as D
        itself (``"d"``: an f16 D rounds every block to f16).
      nan_f32, nan_f16: bits of a NaN result.

    Example:
        >>> h100 = jaxwarp.datapath_for("sm_90", "wmma", "f16", 16)
        >>> h100.block_k, h100.F, h100.e_floor
        (16, 25, 7)
        >>> z = jnp.zeros((16, 16), jnp.float16)
        >>> a = z.at[0, :2].set(jnp.array([1.0, -2.0**-13], jnp.float16))
        >>> b = z.at[:2, 0].set(jnp.array([1.0, 2.0**-13], jnp.float16))
        >>> c = jnp.zeros((16, 16), jnp.float32)
        >>> kw = dict(a_format="f16", c_format="f32", d_format="f32")
        >>> float(jaxwarp.mma(a, b, c, **kw)[0, 0])  # the term -2**-26 is cut at 2**-25
        1.0
        >>> float(jaxwarp.mma(a, b, c, **kw, datapath=h100.replace(F=26))[0, 0])
        0.9999999403953552
    """

    block_k: int = 16
    F: int = 25
    c_mode: str = "fused"
    align: str = "nominal"
    sub_exp: str = "emin"
    c_sub_exp: str = "lead"
    e_floor: int | None = None
    trunc: str = "rz"
    block_round: str = "rz"
    sum_mbits: int = 23
    f16_out: str = "direct"
    f16_round: str = "rn"
    f16_zero: str = "plus"
    f32_zero: str = "plus"
    zero: str = "plus"
    k_split: str = "contig"
    operand_via: str = ""
    block_out: str = "f32"
    nan_f32: int = 0x7FFFFFFF
    nan_f16: int = 0x7FFF

    def __post_init__(self):
        for name, allowed in _CHOICES.items():
            v = getattr(self, name)
            if v not in allowed:
                raise ValueError(f"Datapath.{name} must be one of {allowed}, got {v!r}")
        if self.e_floor is not None and (not isinstance(self.e_floor, int)
                                         or not 0 <= self.e_floor <= 64):
            raise ValueError(f"Datapath.e_floor must be None or an int in [0, 64], got "
                             f"{self.e_floor!r}")
        for name, lo, hi in (("block_k", 1, 64), ("F", 3, 28), ("sum_mbits", 1, 23)):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
                raise ValueError(f"Datapath.{name} must be an int in [{lo}, {hi}], got {v!r}")
        for name, ebits, mbits in (("nan_f32", 8, 23), ("nan_f16", 5, 10)):
            v = getattr(self, name)
            exp = (v >> mbits) & ((1 << ebits) - 1) if isinstance(v, int) else 0
            if (not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < 1 << (1 + ebits
                    + mbits) or exp != (1 << ebits) - 1 or not v & ((1 << mbits) - 1)):
                raise ValueError(f"Datapath.{name} must be the bits of a NaN of its format "
                                 f"(all exponent bits set, a nonzero fraction), got {v!r}")

    def replace(self, **kw) -> Datapath:
        """A copy with some fields changed."""
        return dataclasses.replace(self, **kw)


#: Float datapath families (which one an instruction uses is its catalogue row's
#: ``datapath``: :func:`family`).
FAMILIES = isa.float_datapaths()


def family(instruction: str, a_format: str, ik: int, b_format: str | None = None) -> str:
    """The datapath family of one instruction (WMMA tf32 m16n16k8 is two k4 ones; A
    e4m3 with B e2m1 is ``kind::f8f6f4``)."""
    return isa.datapath_family(instruction, a_format, ik, b_format)


#: What an :class:`ArchModel` was checked against: captures of the GPU, the published
#: reference model MMA-Sim (Xie et al. 2025, validated on the GPUs by its authors), or
#: nothing (parameters by analogy or from the PTX ISA).
VERIFICATIONS = ("hardware", "MMA-Sim 2.1.1", "unverified")


@dataclasses.dataclass(frozen=True)
class ArchModel:
    """The datapaths of one architecture's tensor cores.

    Attributes:
      name: the target it models (``"sm_90"``).
      datapaths: ``((family, Datapath), ...)``; a family missing here has no model
        (an error says so, with ``missing_note``).
      verified: what the datapaths were checked against bit for bit, one of
        ``"hardware"`` (captures of the GPU), ``"MMA-Sim
        2.1.1"`` (the published reference model, validated on the GPUs by its
        authors, on every ``mma.sync`` configuration it models) or ``"unverified"``.
      unverified: families modelled without such a check (by analogy or from the
        PTX ISA), whatever ``verified`` says of the others.
      note: where the parameters come from.
      missing_note: why a family has no model.

    Example:
        >>> h100 = jaxwarp.ARCHS["sm_90"]
        >>> h100.name, h100.verified
        ('sm_90', 'hardware')
        >>> jaxwarp.ARCHS["sm_80"].verification("hmma")
        'MMA-Sim 2.1.1'
        >>> jaxwarp.ARCHS["sm_80"].verification("mma_sync_m8n8k4_f16")
        'unverified'
        >>> h100.datapath("hmma") == jaxwarp.datapath_for(h100, "wmma", "f16", 16)
        True
    """

    name: str
    datapaths: tuple[tuple[str, Datapath], ...]
    verified: str = "unverified"
    unverified: tuple[str, ...] = ()
    note: str = ""
    missing_note: str = ""

    def __post_init__(self):
        parse_target(self.name, "ArchModel.name")
        for entry in self.datapaths:
            if (not isinstance(entry, tuple) or len(entry) != 2
                    or not isinstance(entry[1], Datapath)):
                raise ValueError(f"ArchModel.datapaths must hold (family, Datapath) pairs, "
                                 f"got {entry!r}")
            if entry[0] not in FAMILIES:
                raise ValueError(f"ArchModel.datapaths: family {entry[0]!r} is unknown; "
                                 f"allowed: {FAMILIES}")
        fams = [f for f, _ in self.datapaths]
        if len(set(fams)) != len(fams):
            raise ValueError(f"ArchModel.datapaths names a family twice: {fams}")
        if not isinstance(self.verified, str) or self.verified not in VERIFICATIONS:
            raise ValueError(f"ArchModel.verified must be one of {VERIFICATIONS}, got "
                             f"{self.verified!r}")
        if (not isinstance(self.unverified, tuple)
                or not set(self.unverified) <= set(fams)):
            raise ValueError(f"ArchModel.unverified must be a tuple of families of its "
                             f"datapaths {fams}, got {self.unverified!r}")

    def verification(self, fam: str) -> str:
        """How family ``fam``'s datapath was checked: ``"hardware"``, ``"MMA-Sim 2.1.1"``
        or ``"unverified"``."""
        self.datapath(fam)
        return "unverified" if fam in self.unverified else self.verified

    def datapath(self, fam: str) -> Datapath:
        d = dict(self.datapaths)
        if fam not in d:
            raise ValueError(f"arch={self.name!r} has no datapath model for {fam!r}"
                             + (f": {self.missing_note}" if self.missing_note else "")
                             + f"; it models {sorted(d)}")
        return d[fam]


def _pick(families: tuple[tuple[str, Datapath], ...], *names: str
          ) -> tuple[tuple[str, Datapath], ...]:
    """The (family, Datapath) entries of ``families`` named ``names``, in that order."""
    d = dict(families)
    return tuple((n, d[n]) for n in names)


_H100 = Datapath(block_k=16, F=25, sub_exp="emin", c_sub_exp="emin", e_floor=7)
_SM90_FAMILIES = (
    ("hmma", _H100),
    ("hmma_tf32_k4", _H100.replace(block_k=4)),
    ("hmma_tf32_k8", _H100.replace(block_k=8)),
    ("mma_sync_fp8_k32", _H100.replace(c_mode="end", k_split="mod4", operand_via="f16")),
    ("mma_sync_fp8_k16", _H100.replace(block_k=8, c_mode="end", k_split="mod4",
                                       operand_via="f16")),
    ("wgmma_fp8", _H100.replace(block_k=32, F=13, sum_mbits=13)),
    ("mma_sync_m8n8k4_f16", _H100.replace(c_mode="ffma")),
)
SM90 = ArchModel("sm_90", _SM90_FAMILIES, verified="hardware",
                 note="H100 (sm_90, CUDA 13.0): every float trial of the WMMA, mma.sync "
                      "and wgmma captures")

# The older and newer generations: MMA-Sim's model of mma.sync (Xie et al. 2025), a
# truncated fused dot product over chunks of L products along k: every term aligned to
# 2**(E - F) toward zero, E at least emin(D) - e_floor (a zero term's exponent), each
# chunk's result rounded as D (f32 toward zero, f16 to nearest even) and the C of the
# next chunk. Parameters per generation (F, L bytes, e_floor): Volta 23, 8, 5;
# Turing / Ampere / Ada 24, 16, 6; Hopper / Blackwell 25, 32, 7 (L / element bytes
# products per chunk); Ada fp8: F = 13, the f32 result cut to 13 fraction bits.


def _tfdpa(block_k: int, F: int, e_floor: int, **kw) -> Datapath:
    return Datapath(block_k=block_k, F=F, sub_exp="emin", c_sub_exp="emin_c",
                    e_floor=e_floor, block_out="d", **kw)


_VOLTA = _tfdpa(4, 23, 5)
_TURING = _tfdpa(8, 24, 6)
SM70 = ArchModel("sm_70", (("hmma", _VOLTA), ("mma_sync_m8n8k4_f16", _VOLTA)),
                 verified="MMA-Sim 2.1.1", unverified=("hmma",),
                 note="V100: MMA-Sim's Volta parameters (F = 23, f16 chunks of 4); WMMA "
                      "(hmma) by analogy",
                 missing_note="sm_70 has only f16 floating-point tensor cores")
SM75 = ArchModel("sm_75", (("hmma", _TURING), ("mma_sync_m8n8k4_f16", _VOLTA)),
                 verified="MMA-Sim 2.1.1",
                 note="Turing: MMA-Sim's parameters (F = 24, f16 chunks of 8); m8n8k4 "
                      "runs Volta's arithmetic",
                 missing_note="sm_75 has only f16 floating-point tensor cores")
_AMPERE_FAMILIES = (
    ("hmma", _TURING),
    ("hmma_tf32_k4", _TURING.replace(block_k=4)),
    ("hmma_tf32_k8", _TURING.replace(block_k=4)),
    ("mma_sync_m8n8k4_f16", _TURING),
)
SM80 = ArchModel("sm_80", _AMPERE_FAMILIES, verified="MMA-Sim 2.1.1",
                 unverified=("mma_sync_m8n8k4_f16",),
                 note="A100: MMA-Sim's Ampere parameters (F = 24, chunks of 16 bytes); "
                      "m8n8k4 f16 (not in MMA-Sim) given Ampere's f16 datapath",
                 missing_note="sm_80 / sm_86 / sm_87 have no fp8 tensor cores")
_ADA_FP8 = _tfdpa(16, 13, 6, sum_mbits=13)
SM89 = ArchModel("sm_89", _AMPERE_FAMILIES + (
    ("mma_sync_fp8_k16", _ADA_FP8), ("mma_sync_fp8_k32", _ADA_FP8)),
    verified="MMA-Sim 2.1.1", unverified=("mma_sync_m8n8k4_f16",),
    note="Ada: Ampere's parameters; fp8 F = 13, chunks of 16, an f32 result cut to 13 "
         "fraction bits (MMA-Sim)")
# Blackwell's mma.sync f16 / bf16 / tf32 parameters are Hopper's (MMA-Sim): the same
# presets. Where MMA-Sim has no model (fp8 mma.sync, m8n8k4 f16 on sm_100), sm_90's
# hardware-verified lowering is assumed: unverified.
_HMMA_FAMILIES = ("hmma", "hmma_tf32_k4", "hmma_tf32_k8")
SM100 = ArchModel("sm_100", _pick(_SM90_FAMILIES, *_HMMA_FAMILIES, "mma_sync_fp8_k32",
                                  "mma_sync_fp8_k16", "mma_sync_m8n8k4_f16"),
                  verified="MMA-Sim 2.1.1",
                  unverified=("mma_sync_fp8_k32", "mma_sync_fp8_k16", "mma_sync_m8n8k4_f16"),
                  note="B200: MMA-Sim's Blackwell parameters (Hopper's: F = 25, chunks of "
                       "32 bytes); fp8 mma.sync and m8n8k4 f16 as sm_90 lowers them "
                       "(unverified)",
                  missing_note="wgmma is sm_90a only")
_RTX_FP8 = _H100.replace(block_k=32)
SM120 = ArchModel("sm_120", _pick(_SM90_FAMILIES, *_HMMA_FAMILIES) + (
    ("mma_sync_fp8_k32", _RTX_FP8), ("mma_sync_fp8_k16", _RTX_FP8),
    ("mma_sync_f8f6f4", _RTX_FP8)) + _pick(_SM90_FAMILIES, "mma_sync_m8n8k4_f16"),
    verified="MMA-Sim 2.1.1", unverified=("mma_sync_m8n8k4_f16",),
    note="RTX Blackwell: MMA-Sim's parameters (F = 25; fp8, fp6, fp4 in chunks of 32); "
         "m8n8k4 f16 as sm_90 lowers it (unverified)",
    missing_note="wgmma is sm_90a only")


def _like(model: ArchModel, name: str, note: str = "") -> ArchModel:
    return dataclasses.replace(model, name=name, note=note or model.note)


# --- tcgen05 (Blackwell sm_100a / sm_103a) presets: kept together (helper "tcgen05") --
# MMA-Sim 2.1.1's Blackwell tcgen05.mma model (arithmetic/fdpa.py, nv_ptx/sim.py): one
# truncated fused dot-product-add per instruction (K = 32 bytes: L = 16 f16 / bf16, 8
# tf32, 32 fp8 products), F = 25, zero terms at e_zero = emin(D) - 7 (-21 f16 D, -133
# f32 D: ``e_floor=7``), subnormal operands and a subnormal C at their format's minimum
# normal exponent, RZ to fp32 or RNE to f16 straight from the exact sum, NaN canonical.
# That is the sm_90 HMMA datapath, with fp8 in blocks of 32 at the full F = 25 (sm_90's
# wgmma fp8 keeps F = 13 and a 13-bit sum). Checked against MMA-Sim, not hardware.
_B200 = _H100  # the same fields: the sm_90 HMMA datapath
TCGEN05_DATAPATHS = (
    ("tcgen05_f16", _B200),
    ("tcgen05_tf32", _B200.replace(block_k=8)),
    ("tcgen05_f8f6f4", _B200.replace(block_k=32)),
)
_TCGEN05_NOTE = ("tcgen05.mma dense kinds f16 / tf32 / f8f6f4 from MMA-Sim 2.1.1's Blackwell "
                 "model (bit for bit against it; no hardware capture); kind::i8 is exact")


def _with_tcgen05(model: ArchModel) -> ArchModel:
    """``model`` plus the tcgen05 datapaths (an ``a`` target of sm_100 / sm_103)."""
    return dataclasses.replace(model, datapaths=model.datapaths + TCGEN05_DATAPATHS,
                               note=f"{model.note}; {_TCGEN05_NOTE}")


# --- end of the tcgen05 presets ------------------------------------------------------

#: Every known target -> its datapath model.
ARCHS: Mapping[str, ArchModel] = MappingProxyType({
    "sm_70": SM70,
    "sm_75": SM75,
    "sm_80": SM80,
    "sm_86": _like(SM80, "sm_86", "the sm_80 model (Ampere, as MMA-Sim models it)"),
    "sm_87": _like(SM80, "sm_87", "the sm_80 model (Ampere, as MMA-Sim models it)"),
    "sm_89": SM89,
    "sm_90": SM90,
    "sm_90a": _like(SM90, "sm_90a"),
    "sm_100": SM100,
    "sm_100a": _with_tcgen05(_like(SM100, "sm_100a")),
    "sm_103": _like(dataclasses.replace(SM100, verified="unverified"), "sm_103",
                    "the sm_100 model (B300; MMA-Sim has no model of its own; unverified)"),
    "sm_103a": _with_tcgen05(_like(dataclasses.replace(SM100, verified="unverified"),
                                   "sm_103a", "the sm_100 model (B300; MMA-Sim has no model "
                                   "of its own; unverified)")),
    "sm_120": SM120,
    "sm_120a": _like(SM120, "sm_120a"),
    "sm_121": _like(dataclasses.replace(SM120, verified="unverified"), "sm_121",
                    "the sm_120 model (DGX Spark; MMA-Sim has no model of its own; "
                    "unverified)"),
    "sm_121a": _like(dataclasses.replace(SM120, verified="unverified"), "sm_121a",
                     "the sm_120 model (DGX Spark; MMA-Sim has no model of its own; "
                     "unverified)"),
})
#: Every target with a datapath model (the keys of :data:`ARCHS`), oldest first.
TARGETS: tuple[str, ...] = tuple(ARCHS)
#: Blackwell targets with a tcgen05 model (the presets that have the tcgen05 datapaths).
TCGEN05_TARGETS: tuple[str, ...] = tuple(
    t for t, m in ARCHS.items() if set(TCGEN05_DATAPATHS) <= set(m.datapaths))


def datapath_for(arch: str | ArchModel, instruction: str, a_format: str, ik: int,
                 b_format: str | None = None) -> Datapath:
    """The :class:`Datapath` that ``arch``'s model uses for one instruction (B type
    ``b_format``, default ``a_format``).

    Raises:
      ValueError: an unknown ``instruction``, an ``a_format`` it does not take, or an
        ``ik`` that is not the k of one of its shapes (each named, with what is allowed).

    Example:
        >>> jaxwarp.datapath_for("sm_80", "wmma", "f16", 16).block_k
        8
        >>> jaxwarp.datapath_for("sm_90", "wmma", "f16", 16).block_k
        16
    """
    model = arch if isinstance(arch, ArchModel) else ARCHS[supported_target(arch).name]
    static_choice(instruction, "instruction", isa.INSTRUCTIONS)
    a_format = format_name(a_format, "a_format", isa.a_formats(instruction), ALIASES,
                         need_x64=False)
    ks = tuple(dict.fromkeys(k for r in isa.rows(instruction, a_format) for k in r.ks))
    if isinstance(ik, bool) or ik not in ks:
        raise ValueError(f"ik={ik!r} is not the k of a {instruction} shape with {a_format} "
                         f"operands; allowed: {ks}")
    if b_format is not None:
        b_format = format_name(b_format, "b_format", isa.b_formats(instruction, a_format),
                             ALIASES, need_x64=False)
    return model.datapath(family(instruction, a_format, ik, b_format))
