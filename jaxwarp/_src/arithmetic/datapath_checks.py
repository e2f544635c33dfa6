"""Argument checks of ``datapath.mma`` and ``bmma``.

The valid operand and accumulator types are views of the instruction catalogue
(``isa.ROWS``); ``check_static`` checks the static arguments of ``mma`` and resolves its
``arch`` to a target and a datapath model (``arch.py``); ``ChainCfg`` is the static
configuration of one exact float mma.
"""

from __future__ import annotations

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
    parse_target,
    supported_target,
)
from jaxwarp._src.numerics.formats import FORMATS
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
