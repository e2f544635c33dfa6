"""``v_mfma_*`` on logical matrices: AMD Instinct matrix cores (CDNA1 / MI100 / gfx908,
CDNA2 / MI200 / gfx90a, CDNA3 / MI300 / gfx942).

:func:`mfma_logical` runs one instruction (one block; a multi-block ``_Nb`` form's blocks
are a leading batch axis) on the logical matrices ``A`` (M, K), ``B`` (K, N) and ``C``
(M, N), with the arithmetic of the catalogue's row (``catalogue/mfma_table.py``) as
``arithmetic/mfma.py`` computes it. The wave64 register layouts are not modelled here.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxwarp._src import checks
from jaxwarp._src.arithmetic.mfma import mfma_bits
from jaxwarp._src.catalogue import mfma_table
from jaxwarp._src.numerics.formats import FNUZ_FORMATS, FORMATS

__all__ = ["mfma_logical", "mfma_row"]

mfma_row = mfma_table.mfma_row


def _format(name: str):
    return FNUZ_FORMATS[name] if name in FNUZ_FORMATS else FORMATS[name]


def _operand(x: Any, name: str, fmt: str, shape: tuple[int, int], inst: str) -> jax.Array:
    """A checked operand as its unsigned bits: an array of the format's storage dtype
    (f32's float32 for tf32 / xf32), or its raw bits (an unsigned integer as wide)."""
    arr = checks.array_arg(x, name)
    f = _format(fmt)
    value_dt, bits_dt = np.dtype(f.storage_dtype), np.dtype(f.uint_dtype)
    if arr.dtype == value_dt:
        arr = lax.bitcast_convert_type(arr, bits_dt) if value_dt != bits_dt else arr
    elif arr.dtype != bits_dt:
        raise TypeError(f"{name} of {inst} must hold {fmt} values: dtype {value_dt.name} "
                        f"(or its raw bits as {bits_dt.name}), got dtype {arr.dtype}")
    if arr.ndim < 2 or tuple(arr.shape[-2:]) != shape:
        raise ValueError(f"{name} of {inst} must have shape (..., {shape[0]}, {shape[1]}), "
                         f"got {tuple(arr.shape)}")
    return arr


def mfma_logical(suffix: str, a: Any, b: Any, c: Any, *, arch: str = "gfx942") -> jax.Array:
    """``D = A @ B + C`` through one ``v_mfma_*`` instruction of an AMD Instinct GPU.

    The arithmetic is the instruction's datapath as the reference model MMA-Sim 2.1.1
    defines it (``docs/amd.md``): an IEEE fma chain (f32, f64), CDNA1's exact sums of 4
    (f16) / 2 (bf16) products, CDNA2's flush-to-zero multiply-add chain, CDNA3's truncated
    fused sums of 8 (f16, bf16), 4 (xf32) and 16 (fp8 / bf8, even and odd products apart).

    Args:
      suffix: static, the instruction: AMD's name with or without ``v_mfma_``, in the
        spelling of either generation (``"f32_32x32x8f16"``, ``"v_mfma_f32_32x32x8_f16"``,
        ``"f32_16x16x32_fp8_bf8"``, ``"f32_16x16x4_4b_f16"``); the architecture must have
        it (``mfma_table.suffixes(arch)`` lists them).
      a: (..., M, K) A of the instruction's A type: float64, float32 (f32 and xf32: the
        whole word, whose low 13 bits xf32 ignores), float16, bfloat16,
        ``float8_e4m3fnuz`` (``fp8``) or ``float8_e5m2fnuz`` (``bf8``); or the raw bits as
        the unsigned integer of that width.
      b: (..., K, N) B, likewise of B's type.
      c: (..., M, N) C: float32 (float64 for the f64 instructions) or its raw bits.
        Leading dims of a, b and c broadcast (a multi-block ``_Nb`` form: its blocks).
      arch: static, ``"gfx908"`` / ``"CDNA1"`` / ``"MI100"``, ``"gfx90a"`` /
        ``"CDNA2"`` / ``"MI200"`` or ``"gfx942"`` / ``"CDNA3"`` / ``"MI300"``.

    Returns:
      D (..., M, N): float32 (float64 for f64).

    Raises:
      ValueError: an unknown architecture or instruction (the message lists what is
        allowed), shapes that are not the instruction's.
      TypeError: an operand of the wrong dtype, a traced static argument.
      RuntimeError: an f64 instruction with ``jax_enable_x64`` off.

    Example:
      >>> a = jnp.full((16, 16), 1.0, jnp.float16)
      >>> b = jnp.full((16, 16), 2.0**-24, jnp.float16)  # f16's smallest subnormal
      >>> c = jnp.zeros((16, 16), jnp.float32)
      >>> float(jaxwarp.mfma_logical("f32_16x16x16f16", a, b, c, arch="gfx942")[0, 0])
      9.5367431640625e-07
      >>> float(jaxwarp.mfma_logical("f32_16x16x16f16", a, b, c, arch="gfx90a")[0, 0])
      0.0
    """
    for v, nm in ((suffix, "suffix"), (arch, "arch")):
        if isinstance(v, jax.core.Tracer):
            raise TypeError(f"{nm} is a static argument and must be a concrete Python str, "
                            f"not a traced value")
    row = mfma_table.mfma_row(suffix, arch)
    inst = f"{row.name} ({row.arch})"
    if row.c_format == "f64":
        checks.require_x64(inst)
    a = _operand(a, "a", row.a_format, (row.m, row.k), inst)
    b = _operand(b, "b", row.b_format, (row.k, row.n), inst)
    c = _operand(c, "c", row.c_format, (row.m, row.n), inst)
    try:
        batch = jnp.broadcast_shapes(a.shape[:-2], b.shape[:-2], c.shape[:-2])
    except ValueError as e:
        raise ValueError(f"batch dims of a {a.shape}, b {b.shape} and c {c.shape} do not "
                         f"broadcast") from e
    a = jnp.broadcast_to(a, batch + a.shape[-2:])
    b = jnp.broadcast_to(b, batch + b.shape[-2:])
    c = jnp.broadcast_to(c, batch + c.shape[-2:])
    d = mfma_bits(a, b, c, row.a_format, row.b_format, row.datapath)
    out = jnp.float64 if row.c_format == "f64" else jnp.float32
    return lax.bitcast_convert_type(d, out)
