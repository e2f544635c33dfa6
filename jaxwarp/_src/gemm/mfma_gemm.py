"""``matmul(..., instruction="mfma")``: a GEMM as a chain of AMD ``v_mfma_*`` instructions.

The product is cut into 32 x 32 output blocks (16 x 16 for f64) and k steps of the
instruction's K; each output block chains its k steps through one MFMA (the previous D
is the next C), as a CDNA kernel's inner loop does. The instruction per (generation,
operand format) is :data:`GEMM_INSTRUCTIONS`; the arithmetic is
``arithmetic/mfma.py``'s (docs/amd.md). Operands are converted first: f16 / bf16 to
nearest even, e4m3fnuz / e5m2fnuz to nearest even (overflow to their NaN), f32 and tf32
(xf32: the instruction reads the f32 word and ignores its low 13 bits) and f64 as given.
Exact mode only. Gradients (``jax.grad``) are straight through the operand conversions,
with the backward products ``dA = dD @ B^T`` and ``dB = A^T @ dD`` chained through the
same instruction (``dD`` converted to the operand format), as ``matmul``'s own rule does
on the NVIDIA targets; fp8 (fnuz) products have no gradient rule.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxwarp._src import checks
from jaxwarp._src.arithmetic.mfma import mfma_bits
from jaxwarp._src.catalogue import mfma_table
from jaxwarp._src.numerics import bitops, softfloat, user_formats
from jaxwarp._src.numerics.formats import FNUZ_FORMATS

__all__ = ["DEFAULT_ARCH", "GEMM_INSTRUCTIONS", "check", "format_name", "is_amd", "matmul"]

#: The target of ``instruction="mfma"`` when ``arch`` is None (MI300's).
DEFAULT_ARCH = "gfx942"

#: The instruction a GEMM issues, per generation and operand format (the largest-K
#: single-block form).
GEMM_INSTRUCTIONS = {
    "CDNA1": {"f16": "f32_32x32x8f16", "bf16": "f32_32x32x4bf16", "f32": "f32_32x32x2f32"},
    "CDNA2": {"f16": "f32_32x32x8f16", "bf16": "f32_32x32x8bf16_1k", "f32": "f32_32x32x2f32",
              "f64": "f64_16x16x4f64"},
    "CDNA3": {"f16": "f32_32x32x8_f16", "bf16": "f32_32x32x8_bf16", "f32": "f32_32x32x2_f32",
              "tf32": "f32_32x32x4_xf32", "f64": "f64_16x16x4_f64",
              "e4m3fnuz": "f32_32x32x16_fp8_fp8", "e5m2fnuz": "f32_32x32x16_bf8_bf8"},
}
_NAMES = {"float16": "f16", "fp16": "f16", "bfloat16": "bf16", "float32": "f32",
          "fp32": "f32", "float64": "f64", "fp64": "f64", "xf32": "tf32",
          "float8_e4m3fnuz": "e4m3fnuz", "float8_e5m2fnuz": "e5m2fnuz"}


def is_amd(arch: Any) -> bool:
    """Whether ``arch`` names an AMD matrix-core target (``gfx942``, ``CDNA3``, ``MI300``,
    ...: ``mfma_table.ARCH_NAMES``), whose products are ``instruction="mfma"`` chains.

    Example:
        >>> is_amd("gfx90a"), is_amd("CDNA3"), is_amd("sm_90"), is_amd(None)
        (True, True, False, False)
    """
    return isinstance(arch, str) and arch in mfma_table.ARCH_NAMES


def format_name(fmt: Any) -> Any:
    """An operand format as :data:`GEMM_INSTRUCTIONS` names it: aliases (``"fp16"``,
    ``"xf32"``, ``"float8_e4m3fnuz"``) and dtypes (``jnp.bfloat16``,
    ``ml_dtypes.float8_e4m3fnuz``) map to their names; anything else is returned as given
    (:func:`check` names it).

    Example:
        >>> format_name("xf32"), format_name(jnp.bfloat16), format_name("f16")
        ('tf32', 'bf16', 'f16')
    """
    if not isinstance(fmt, (str, jax.core.Tracer, tuple)):
        try:
            fmt = np.dtype(fmt).name
        except TypeError:
            return fmt
    return _NAMES.get(fmt, fmt) if isinstance(fmt, str) else fmt


def check(operand_format: Any, accumulator: Any = "f32", arch: Any = None,
          mode: Any = "exact") -> mfma_table.MfmaRow:
    """The instruction row a GEMM of these settings chains (:data:`GEMM_INSTRUCTIONS`),
    after checking them: ``arch`` an AMD target (None: :data:`DEFAULT_ARCH`), ``mode``
    ``"exact"``, the operand format one the generation has an MFMA for, the accumulator
    its C type.

    Raises:
        ValueError: a setting that is not allowed (the message lists what is).

    Example:
        >>> check("bf16", arch="gfx90a").name
        'v_mfma_f32_32x32x8bf16_1k'
    """
    gen = mfma_table.generation(DEFAULT_ARCH if arch is None else arch)
    if isinstance(mode, jax.core.Tracer) or mode != "exact":
        raise ValueError(f"mode={mode!r} is not supported with instruction='mfma' (arch="
                         f"{arch!r}): the MFMA chain model is exact mode only (a fast mode "
                         f"would be the NVIDIA targets' fp32 dot, not MFMA arithmetic); "
                         f"allowed: ('exact',)")
    fmt = format_name(operand_format)
    table = GEMM_INSTRUCTIONS[gen]
    if not isinstance(fmt, str) or fmt not in table:
        raise ValueError(f"operand_format={operand_format!r} is not supported with "
                         f"instruction='mfma' on {gen} (arch={arch!r}); allowed: "
                         f"{tuple(table)}")
    row = mfma_table.mfma_row(table[fmt], gen)
    want = row.c_format
    acc = format_name(accumulator)
    if acc != want:
        raise ValueError(f"accumulator={accumulator!r} is not supported with "
                         f"instruction='mfma' and operand_format={fmt!r}; allowed: "
                         f"({want!r},)")
    return row


def _operand_bits(x: jax.Array, fmt: str) -> jax.Array:
    if fmt == "f64":
        return lax.bitcast_convert_type(x.astype(jnp.float64), jnp.uint64)
    u = bitops.to_u32(x.astype(jnp.float32))
    if fmt in ("f32", "tf32"):
        return u
    if fmt in ("f16", "bf16"):
        inf = 0x7C00 if fmt == "f16" else 0x7F80
        return softfloat.f32_to_rn_bits(u, fmt, inf, 0x7FFF if fmt == "f16" else 0x7FFF)
    v = user_formats.to_format(x.astype(jnp.float32), FNUZ_FORMATS[fmt])
    return bitops.uint_view(v).astype(jnp.uint32)


@functools.partial(jax.jit, static_argnums=(3, 4))
def _gemm(a, b, c, row: mfma_table.MfmaRow, shape: tuple[int, int, int]):
    M, N, K = shape
    bm, bn, bk = row.m, row.n, row.k
    mp, np_, kp = -(-M // bm) * bm, -(-N // bn) * bn, max(-(-K // bk), 1) * bk
    a = jnp.pad(a, ((0, mp - M), (0, kp - K)))
    b = jnp.pad(b, ((0, kp - K), (0, np_ - N)))
    c = jnp.pad(c, ((0, mp - M), (0, np_ - N)))
    # (k steps, M blocks, 1, bm, bk) and (k steps, 1, N blocks, bk, bn).
    at = a.reshape(mp // bm, bm, kp // bk, bk).transpose(2, 0, 1, 3)[:, :, None]
    bt = b.reshape(kp // bk, bk, np_ // bn, bn).transpose(0, 2, 1, 3)[:, None]
    d = c.reshape(mp // bm, bm, np_ // bn, bn).transpose(0, 2, 1, 3)

    def step(d, ab):
        return mfma_bits(*ab, d, row.a_format, row.b_format, row.datapath), None

    d, _ = lax.scan(step, d, (at, bt))
    return d.transpose(0, 2, 1, 3).reshape(mp, np_)[:M, :N]


def matmul(a: Any, b: Any, c: Any = None, *, operand_format: str = "f16",
           accumulator: str = "f32", arch: str | None = None, mode: str = "exact",
           **unsupported: Any) -> jax.Array:
    """``jaxwarp.matmul(a, b, c, instruction="mfma", arch="gfx942", ...)``: see the
    module docstring. ``arch``: ``gfx908`` / ``gfx90a`` / ``gfx942`` (or ``CDNA1-3``,
    ``MI100`` / ``MI200`` / ``MI300``; default ``gfx942``).

    Example:
        >>> a = jnp.ones((40, 24), jnp.float32); b = jnp.ones((24, 8), jnp.float32)
        >>> float(jaxwarp.matmul(a, b, operand_format="bf16", instruction="mfma")[0, 0])
        24.0
    """
    for name, value in unsupported.items():
        if value is not None:
            raise ValueError(f"{name}={value!r} is not supported with instruction='mfma' "
                             f"(allowed: None)")
    row = check(operand_format, accumulator, arch, mode)
    want = row.c_format
    if want == "f64":
        checks.require_x64("operand_format='f64'")
    a, b = checks.array_args(a=a, b=b)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"a (M, K) and b (K, N) must chain; got a {a.shape}, b {b.shape}")
    M, N = a.shape[0], b.shape[1]
    dt = jnp.float64 if want == "f64" else jnp.float32
    c = jnp.zeros((M, N), dt) if c is None else checks.array_arg(c, "c").astype(dt)
    if c.shape != (M, N):
        raise ValueError(f"c must have shape {(M, N)}, got {c.shape}")
    return _product(a, b, c, row)


def _forward(a, b, c, row: mfma_table.MfmaRow):
    dt = c.dtype
    cu = lax.bitcast_convert_type(c, jnp.uint64 if dt == jnp.float64 else jnp.uint32)
    d = _gemm(_operand_bits(a, row.a_format), _operand_bits(b, row.b_format), cu, row,
              (a.shape[0], b.shape[1], a.shape[1]))
    return lax.bitcast_convert_type(d, dt)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def _product(a, b, c, row: mfma_table.MfmaRow):
    return _forward(a, b, c, row)


def _product_fwd(a, b, c, row):
    return _forward(a, b, c, row), (a, b)


def _product_bwd(row, res, g):
    # Straight through the operand conversions; dA = dD @ B^T and dB = A^T @ dD chained
    # through the same MFMA, dD converted to the operand format (matmul's rule on the
    # NVIDIA targets). fp8 there scales each backward operand per tensor; the fnuz
    # formats have no such rule here, so their products have no gradient.
    a, b = res
    if row.a_format in FNUZ_FORMATS:
        raise NotImplementedError(
            f"jaxwarp.matmul(..., instruction='mfma') has no gradient rule for "
            f"{row.a_format} operands (the backward products of an fp8 GEMM need per-tensor "
            f"scaling, not modelled for the fnuz formats); differentiate an f16, bf16, f32, "
            f"tf32 or f64 product, or give emulate backward_format='bf16'")
    g = g.astype(jnp.float64 if row.c_format == "f64" else jnp.float32)
    da = _forward(g, b.T, jnp.zeros(a.shape, g.dtype), row)
    db = _forward(a.T, g, jnp.zeros(b.shape, g.dtype), row)
    return da.astype(a.dtype), db.astype(b.dtype), g


_product.defvjp(_product_fwd, _product_bwd)
