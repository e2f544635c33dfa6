"""Argument checks of ``datapath.mma`` and ``bmma``, and the configuration of a chain.

The valid operand and accumulator types are views of the instruction catalogue
(``isa.ROWS``); ``check_static`` checks the static arguments of ``mma`` and resolves its
``arch`` to a target and a datapath model (``arch.py``); ``ChainCfg`` is the static
configuration of one exact float mma: ``check_mma`` checks a whole call and returns it
with the operands, ``plan_chain`` resolves it from the static arguments alone (for
front-ends that check their operands once, the GEMM layer's k loop).
"""

from __future__ import annotations

import functools
from types import MappingProxyType
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxwarp._src import checks
from jaxwarp._src.catalogue import isa
from jaxwarp._src.catalogue.arch import (
    ARCHS,
    TARGETS,
    ArchModel,
    Datapath,
    Target,
    check_target,
    datapath_for,
    parse_target,
    resolve_instruction_k,
    supported_target,
)
from jaxwarp._src.numerics.formats import ALIASES, FORMATS
from jaxwarp._src.warp import checked

# --------------------------------------------------------------------------------------
# Types and valid combinations: views of the instruction catalogue (``isa.ROWS``; b1
# goes through ``bmma``).

_MMA_ROWS = tuple(r for r in isa.ROWS if r.datapath != "bmma")
A_TYPES = tuple(dict.fromkeys(t for r in _MMA_ROWS for t in r.a_formats))
ACC_TYPES = tuple(dict.fromkeys(t for r in _MMA_ROWS for p in r.cd for t in p))
#: Type name -> dtype of a logical matrix entry (from the format registry).
STORAGE_DTYPE = MappingProxyType({t: isa.storage_dtype(t) for t in A_TYPES + ACC_TYPES})

#: Valid WMMA (a_format, c_format, d_format) combinations.
COMBOS = tuple(dict.fromkeys((t, c, d) for r in _MMA_ROWS if r.instruction == "wmma"
                             for t in r.a_formats for c, d in r.cd))
#: (instruction, a_format) -> valid (c_format, d_format) of ``mma.sync`` (at any shape) and
#: ``wgmma``.
PTX_CD = MappingProxyType({(r.instruction, t): isa.cd_pairs(r.instruction, t)
                           for r in _MMA_ROWS if r.instruction != "wmma" for t in r.a_formats})
# Operand types that may be paired (a_format, b_format) with a different one.
_MIXABLE = isa.mixed_pairs()
INT_TYPES = tuple(dict.fromkeys(t for r in _MMA_ROWS if r.datapath == "int"
                                 for t in r.a_formats))

MODES = ("exact", "fast")
BMMA_OPS = isa.B1_OPS


# --------------------------------------------------------------------------------------
# Argument checks.


class ChainCfg(NamedTuple):
    """Static configuration of one exact float mma (hashable: a jit static arg)."""

    a_format: str
    b_format: str
    c_format: str
    d_format: str
    dp: Datapath
    ik: int
    c_shift: int = 0  # tcgen05 scale-input-d: the first C enters as C * 2**-c_shift


def _resolve_arch(arch) -> tuple[Target | None, ArchModel]:
    if isinstance(arch, ArchModel):
        target = parse_target(arch.name) if arch.name in TARGETS else None
        return target, arch
    target = supported_target(arch)
    return target, ARCHS[target.name]


def check_static(a_format, b_format, c_format, d_format, arch, mode, satf, instruction,
                  datapath):
    checks.static_choice(instruction, "instruction", isa.INSTRUCTIONS)
    checks.static_choice(a_format, "a_format", A_TYPES)
    checks.static_choice(b_format, "b_format", A_TYPES)
    checks.static_choice(c_format, "c_format", ACC_TYPES)
    checks.static_choice(d_format, "d_format", ACC_TYPES)
    checks.static_choice(mode, "mode", MODES)
    if not isinstance(satf, bool):
        raise TypeError(f"satf must be a Python bool, got {type(satf).__name__} {satf!r}")
    if datapath is not None and not isinstance(datapath, Datapath):
        raise TypeError(f"datapath must be a Datapath or None, got {type(datapath).__name__}")
    target, model = _resolve_arch(arch)
    if b_format != a_format and not any({a_format, b_format} <= s for s in _MIXABLE):
        raise ValueError(f"a_format={a_format!r} and b_format={b_format!r} cannot be mixed; mixed "
                         f"pairs exist only within {[sorted(s) for s in _MIXABLE]}")
    if instruction == "wmma":
        if b_format != a_format:
            raise ValueError(f"wmma needs b_format == a_format, got {a_format!r}, {b_format!r}")
        if (a_format, c_format, d_format) not in COMBOS:
            raise ValueError(
                f"Unsupported wmma types {(a_format, c_format, d_format)=}; valid "
                f"(a_format, c_format, "
                f"d_format) combinations: {COMBOS}")
    else:
        valid = PTX_CD.get((instruction, a_format))
        if valid is None or (c_format, d_format) not in valid:
            raise ValueError(
                f"Unsupported {instruction} types {(a_format, c_format, d_format)=}; valid "
                f"(c_format, d_format) for a_format={a_format!r}: {valid}")
    if target is not None:
        check_target(target, instruction, a_format, b_format)
    return target, model


def check_array(x, name: str, want: jnp.dtype) -> jax.Array:
    x = jnp.asarray(x)
    if x.dtype != want:
        raise TypeError(f"{name} must have dtype {want} for this type, got {x.dtype}")
    if x.ndim < 2:
        raise ValueError(f"{name} must be at least 2-D (..., rows, cols), got shape {x.shape}")
    return x


def check_shapes(a, b, c):
    m, k = a.shape[-2:]
    k2, n = b.shape[-2:]
    if k2 != k:
        raise ValueError(f"a is (..., m, k) = {a.shape} but b is (..., k, n) = {b.shape}: "
                         f"k differs")
    if c.shape[-2:] != (m, n):
        raise ValueError(f"c must be (..., m, n) = (..., {m}, {n}), got {c.shape}")
    try:
        batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2], c.shape[:-2])
    except ValueError as e:
        raise ValueError(f"batch dims of a {a.shape}, b {b.shape}, c {c.shape} do not "
                         f"broadcast") from e
    return batch, m, n, k


#: Operand types whose tcgen05 kind (f16, tf32) takes scale-input-d.
SCALE_INPUT_D_TYPES = ("f16", "bf16", "tf32")


def check_scale_input_d(value, instruction: str, a_format: str) -> int:
    v = checks.static_int(value, "scale_input_d")
    if v == 0:
        return 0
    if instruction != "tcgen05" or a_format not in SCALE_INPUT_D_TYPES:
        raise ValueError(f"scale_input_d={v} exists only for tcgen05 kind::f16 and "
                         f"kind::tf32 (a_format in {SCALE_INPUT_D_TYPES}); got "
                         f"instruction={instruction!r}, a_format={a_format!r}")
    if not 0 <= v <= 15:
        raise ValueError(f"scale_input_d={v} must be in 0..15")
    return v


# --------------------------------------------------------------------------------------
# The checks of one call and the chain's configuration.


def matmul_datapath(arch, instruction: str, a_format: str, b_format: str,
                    acc_format: str, ik: int) -> Datapath | None:
    """The :class:`Datapath` of ``matmul``'s exact instructions (k ``ik``, C and D in
    ``acc_format``) on ``arch``, or None where the call is not valid (``mma``'s own checks
    then name what is wrong)."""
    try:
        _, model = check_static(a_format, b_format, acc_format, acc_format, arch, "exact",
                                 False, instruction, None)
        return datapath_for(model, instruction, a_format, ik, b_format)
    except (ValueError, TypeError):
        return None


@functools.cache
def plan_chain(a_format: str, b_format: str, c_format: str, d_format: str, arch: str,
               instruction: str, ik: int) -> ChainCfg:
    """The :class:`ChainCfg` that :func:`check_mma` resolves for a chain of
    ``instruction`` (k ``ik`` each) on ``arch``, from the static arguments alone: for a
    front-end that checks its operands once and then runs many chains through
    ``datapath.run_chain`` (the GEMM layer's k steps). Raises as ``datapath.mma`` does."""
    target, model = check_static(a_format, b_format, c_format, d_format, arch, "exact",
                                 False, instruction, None)
    ik = resolve_instruction_k(instruction, a_format, ik, ik)
    dp = instruction_datapath(target, model, instruction, a_format, b_format, ik, None)
    return ChainCfg(a_format, b_format, c_format, d_format, dp, ik, 0)


class Checked(NamedTuple):
    """What :func:`check_mma` returns: the operands as arrays of their types, the
    chain's :class:`ChainCfg` (``dp`` None for integer and f64 types), or ``d``, the
    result, where no instruction runs (k = 0)."""

    a: Any
    b: Any
    c: Any
    cfg: ChainCfg | None
    d: Any = None


def check_mma(a, b, c, *, a_format: str, c_format: str, d_format: str, arch="sm_90",
              mode="exact", satf=False, b_format: str | None = None,
              instruction: str = "wmma", instruction_k: int | None = None,
              datapath: Datapath | None = None, scale_input_d: int = 0) -> Checked:
    """``datapath.mma``'s checks of its arguments (the same arguments; ``mode`` one of
    :data:`MODES`): raises as ``mma`` does, else the operands and the chain's
    configuration. For front-ends that run the chain another way (the GEMM layer's
    native mode)."""
    checks.static_choice(instruction, "instruction", isa.INSTRUCTIONS)
    checks.static_choice(mode, "mode", MODES)
    b_format = a_format if b_format is None else b_format
    a_format, b_format, c_format, d_format = (  # format names, aliases or dtypes -> names
        checks.format_name(v, name, allowed, ALIASES, need_x64=False)
        for v, name, allowed in ((a_format, "a_format", A_TYPES), (b_format, "b_format", A_TYPES),
                                 (c_format, "c_format", ACC_TYPES), (d_format, "d_format",
                                                                     ACC_TYPES)))
    target, model = check_static(a_format, b_format, c_format, d_format, arch,
                                  mode, satf, instruction, datapath)
    c_shift = check_scale_input_d(scale_input_d, instruction, a_format)
    if a_format == "f64":
        checks.require_x64("mma with a_format='f64'")
    a, b, c = checks.array_args(a=a, b=b, c=c)
    a = check_array(a, "a", STORAGE_DTYPE[a_format])
    b = check_array(b, "b", STORAGE_DTYPE[b_format])
    c = check_array(c, "c", STORAGE_DTYPE[c_format])
    batch, _, _, k = check_shapes(a, b, c)
    if k == 0:  # no instruction runs: D is C converted to d_format (round to nearest)
        if c_shift:
            raise ValueError("scale_input_d needs at least one instruction (k > 0)")
        return Checked(a, b, c, None,
                       jnp.broadcast_to(c, batch + c.shape[-2:]).astype(STORAGE_DTYPE[d_format]))
    if instruction_k is not None:
        instruction_k = checks.static_int(instruction_k, "instruction_k")
    ik = resolve_instruction_k(instruction, a_format, k, instruction_k)
    if k > ik and c_format != d_format:
        raise ValueError(f"k = {k} is a chain of {k // ik} instructions (k {ik}) whose D "
                         f"is the next C: c_format ({c_format}) must equal d_format ({d_format})")
    dp = instruction_datapath(target, model, instruction, a_format, b_format, ik, datapath)
    return Checked(a, b, c, ChainCfg(a_format, b_format, c_format, d_format, dp, ik, c_shift))


def instruction_datapath(target, model, instruction: str, a_format: str, b_format: str,
                          ik: int, datapath: Datapath | None) -> Datapath | None:
    """Checks that ``target`` issues the instruction of k ``ik``; its ``Datapath`` (the
    one given, else the model's; None for f64 and integer types)."""
    if target is not None:
        check_target(target, instruction, a_format, b_format, ik)
    if datapath is None and a_format not in ("f64", *INT_TYPES):
        return datapath_for(model, instruction, a_format, ik, b_format)
    return datapath


#: Where each entry point takes an fp6 / fp4 code in its byte: ``"low"`` (bits
#: ``code_bits - 1 .. 0``: ``mma_sync_ptx_logical``, ``mma_block_scale_logical``) or
#: ``"smem"`` (from the format's ``unpacked_lsb``, as shared memory and registers hold it:
#: e2m1 in bits 5:2; ``tcgen05_mma_logical``).
CODE_PACKINGS = ("low", "smem")
_TAKES = {"low": "mma_sync_ptx_logical and mma_block_scale_logical take it in bits 3:0",
          "smem": "tcgen05_mma_logical takes it in bits 5:2, as shared memory holds it"}


def check_code_bits(x: Any, name: str, fmt: str, packing: str, where: str) -> None:
    """Refuses fp6 / fp4 codes (one per uint8 byte) with bits set outside the code's
    field for ``packing`` (`CODE_PACKINGS`): concrete values raise ``ValueError`` naming
    the packing ``where`` expects; traced ones are reported by ``jaxwarp.checked``
    (outside it the other bits are ignored). Other formats and dtypes: nothing."""
    f = FORMATS.get(fmt)
    if f is None or not f.code_storage or f.code_bits >= 8 or x.dtype != np.uint8:
        return
    lsb = f.unpacked_lsb if packing == "smem" else 0
    field = ((1 << f.code_bits) - 1) << lsb
    other = f"; {_TAKES[next(p for p in CODE_PACKINGS if p != packing)]}" \
        if f.unpacked_lsb else ""
    checked.refuse_values(
        x, lambda v: (v & (0xFF ^ field)) != 0, name,
        f"{fmt} codes in bits {lsb + f.code_bits - 1}:{lsb} of each byte and the other bits "
        f"0 ({where} takes {fmt} there{other})")
