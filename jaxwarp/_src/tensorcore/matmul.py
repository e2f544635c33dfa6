"""A tiled matrix product through the emulated tensor core.

`matmul` is the CUDA guide's WMMA GEMM kernel: every output tile starts from
its C tile (or zero, ``fill_fragment(acc, 0)``) and a loop over k chains the
accumulator through ``mma_sync``, one (m, n, k) tile per step::

    for kIter in range(0, K, WMMA_K):
        load_matrix_sync(aFrag, A + aRow * lda + kIter, lda)
        load_matrix_sync(bFrag, B + kIter * ldb + bCol, ldb)
        mma_sync(accFrag, aFrag, bFrag, accFrag)

The fragments' lane layout does not change the arithmetic, so the loop runs on
logical tiles (``tests/test_matmul.py`` checks it against the fragment path);
all output tiles of a step go through the model at once, and ``jax.lax.scan``
runs the k loop.

Operands are first converted to the operand format the way a CUDA program
does: ``__float2half_rn`` for f16, ``__float2bfloat16_rn`` for bf16,
``__float_to_tf32`` (nearest, ties away) for tf32.

Gradients: the conversions are treated as the identity (straight-through
estimator) and the backward products ``dA = dD @ B^T`` and ``dB = A^T @ dD`` go
through the same emulated tensor core (operands converted again, as a
mixed-precision backward pass on a GPU would), ``dC = dD``.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from jaxwarp._src import checks
from jaxwarp._src.numerics import formats
from jaxwarp._src.tensorcore import datapath as mma_arith
from jaxwarp._src.tensorcore import wmma_table

# Default WMMA tile per operand format: the shapes the CUDA guide lists first.
DEFAULT_TILE = {"f16": (16, 16, 16), "bf16": (16, 16, 16), "tf32": (16, 16, 8), "f64": (8, 8, 4)}
# Accumulators a GEMM can chain: the table's C types whose D has the same type.
_ACCUMULATORS = {
    t: tuple(c for c, d in wmma_table.entry(t).cd_types if c == d) for t in DEFAULT_TILE
}
_ACC_DTYPE = {"f16": jnp.float16, "f32": jnp.float32, "f64": jnp.float64}


def to_operand(x: jax.Array, operand_format: str) -> jax.Array:
    """Converts floats to the operand format's storage dtype, as a CUDA program would."""
    if (operand_format, x.dtype) in (("f16", jnp.float16), ("bf16", jnp.bfloat16)):
        return x  # already in the format: nothing to round
    if operand_format == "f16":
        return formats.float2half_rn(x.astype(jnp.float32))
    if operand_format == "bf16":
        return formats.float2bfloat16_rn(x.astype(jnp.float32))
    if operand_format == "tf32":
        return formats.float_to_tf32(x.astype(jnp.float32))
    return x.astype(jnp.float64)


def _check(a, b, c, operand_format, accumulator, tile, arch, mode):
    operand_format = checks.static_choice(operand_format, "operand_format", tuple(DEFAULT_TILE))
    accumulator = checks.static_choice(accumulator, "accumulator", _ACCUMULATORS[operand_format])
    checks.static_choice(mode, "mode", mma_arith.MODES)
    if operand_format == "f64" or accumulator == "f64":
        checks.require_x64("matmul with f64 operands")
    if tile is None:
        tile = DEFAULT_TILE[operand_format]
    if not (isinstance(tile, tuple) and len(tile) == 3):
        raise TypeError(f"tile must be a static (m, n, k) tuple, got {tile!r}")
    tile = tuple(checks.static_int(t, "tile") for t in tile)
    valid = list(wmma_table.entry(operand_format).shapes)
    wmma_table.check_mma(operand_format, accumulator, accumulator, valid[0], arch)
    if tile not in valid:
        raise ValueError(
            f"tile={tile} is not a WMMA shape for operand_format={operand_format!r}; "
            f"allowed: {valid}"
        )
    a, b = jnp.asarray(a), jnp.asarray(b)
    for name, x in (("a", a), ("b", b)):
        if x.ndim != 2 or not jnp.issubdtype(x.dtype, jnp.floating):
            raise ValueError(f"{name} must be a 2-D float matrix, got {x.dtype}{list(x.shape)}")
    (M, K), (K2, N) = a.shape, b.shape
    if K != K2:
        raise ValueError(f"a is {M}x{K} and b is {K2}x{N}: inner dimensions differ")
    m, n, k = tile
    for dim, size, t in (("M", M, m), ("N", N, n), ("K", K, k)):
        if size % t:
            raise ValueError(
                f"{dim}={size} is not a multiple of the tile's {t} (tile={tile}); "
                f"pad the matrices or pick another tile from {valid}"
            )
    if c is not None:
        c = jnp.asarray(c)
        if c.shape != (M, N):
            raise ValueError(f"c must have shape {(M, N)}, got {tuple(c.shape)}")
    return a, b, c, operand_format, accumulator, tile


def _tiled(a_op, b_op, c_acc, operand_format, accumulator, tile, arch, mode):
    """The k loop over (M/m, N/n) output tiles, on converted operands."""
    if mode == "fast":
        # Fast mode: one dot_general over the whole K (the backend's own accumulation);
        # tiling changes nothing there but speed. An f16 accumulator is rounded once.
        return mma_arith.mma(a_op, b_op, c_acc, a_type=operand_format, c_type=accumulator,
                             d_type=accumulator, arch=arch, mode="fast")
    (M, K), N = a_op.shape, b_op.shape[1]
    m, n, k = tile
    mt, nt, kt = M // m, N // n, K // k
    # a_t[kk, i] is A's tile (i, kk); b_t[kk, j] is B's tile (kk, j).
    a_t = a_op.reshape(mt, m, kt, k).transpose(2, 0, 1, 3)
    b_t = b_op.reshape(kt, k, nt, n).transpose(0, 2, 1, 3)
    acc = c_acc.reshape(mt, m, nt, n).transpose(0, 2, 1, 3)

    def step(acc, ab):
        at, bt = ab
        at = jnp.broadcast_to(at[:, None], (mt, nt, m, k))
        bt = jnp.broadcast_to(bt[None, :], (mt, nt, k, n))
        d = mma_arith.mma(at, bt, acc, a_type=operand_format, c_type=accumulator,
                          d_type=accumulator, arch=arch, mode=mode)
        return d, None

    acc, _ = lax.scan(step, acc, (a_t, b_t))
    return acc.transpose(0, 2, 1, 3).reshape(M, N)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4, 5, 6, 7))
def _matmul(a, b, c, operand_format, accumulator, tile, arch, mode):
    return _tiled(to_operand(a, operand_format), to_operand(b, operand_format),
                  c.astype(_ACC_DTYPE[accumulator]), operand_format, accumulator, tile, arch, mode)


def _fwd(a, b, c, *static):
    return _matmul(a, b, c, *static), (a, b, c)


def _bwd(operand_format, accumulator, tile, arch, mode, res, g):
    # Straight-through estimator: the operand conversions pass gradients unchanged.
    # The backward products run on the emulated tensor core, like a GPU's backward.
    a, b, c = res
    m, n, k = tile
    shapes = wmma_table.entry(operand_format).shapes

    def product(x, y):  # x @ y through the tensor core, tile permuted to fit
        M, K = x.shape
        N = y.shape[1]
        for t in ((m, n, k), (m, k, n), (k, n, m), (n, m, k), (n, k, m), (k, m, n)):
            if t in shapes and M % t[0] == 0 and N % t[1] == 0 and K % t[2] == 0:
                return _tiled(to_operand(x, operand_format), to_operand(y, operand_format),
                              jnp.zeros((M, N), _ACC_DTYPE[accumulator]),
                              operand_format, accumulator, t, arch, mode)
        raise ValueError(
            f"the backward product {M}x{K} @ {K}x{N} fits no {operand_format} WMMA tile; "
            f"make M, N and K multiples of every dimension of tile={tile}"
        )

    g = g.astype(_ACC_DTYPE[accumulator])
    da = product(g, b.T).astype(a.dtype)
    db = product(a.T, g).astype(b.dtype)
    return da, db, g.astype(c.dtype)


_matmul.defvjp(_fwd, _bwd)


def matmul(
    a: Any,
    b: Any,
    c: Any = None,
    *,
    operand_format: str = "f16",
    accumulator: str = "f32",
    tile: tuple[int, int, int] | None = None,
    arch: str = "sm_90",
    mode: str = "exact",
) -> jax.Array:
    """``D = A @ B + C`` the way a WMMA kernel computes it on the tensor cores.

    Args:
        a: (M, K) floats; converted to ``operand_format`` first (round to nearest
            for f16/bf16, ``__float_to_tf32`` for tf32).
        b: (K, N) floats, converted likewise.
        c: optional (M, N) accumulator input (zero if omitted), converted to
            ``accumulator``.
        operand_format: ``"f16"``, ``"bf16"``, ``"tf32"`` or ``"f64"`` (f64 needs
            ``jax_enable_x64``).
        accumulator: ``"f32"`` (or ``"f16"`` for f16 operands, ``"f64"`` for f64).
        tile: the WMMA (m, n, k) shape; defaults to (16, 16, 16), (16, 16, 8) for
            tf32, (8, 8, 4) for f64. M, N and K must be multiples of it.
        arch: architecture preset of the arithmetic model (``"sm_90"`` is
            verified against an H100).
        mode: ``"exact"`` (the tensor core's own arithmetic, bit for bit) or
            ``"fast"`` (operands rounded, one ``dot_general`` over all of K with fp32
            accumulation: round-to-nearest on a CPU; on an NVIDIA GPU XLA runs f16/bf16
            dots on the real tensor cores, whose accumulation is the exact model's).

    Returns:
        (M, N) array in the accumulator's dtype.

    Raises:
        ValueError: a dimension is not a multiple of the tile, shapes disagree,
            or the tile/format/accumulator combination is not in the WMMA table.

    Example:
        >>> a = jnp.ones((32, 64), jnp.float32); b = jnp.ones((64, 16), jnp.float32)
        >>> jaxwarp.matmul(a, b, operand_format="bf16")[0, 0]
        Array(64., dtype=float32)
    """
    a, b, c, operand_format, accumulator, tile = _check(
        a, b, c, operand_format, accumulator, tile, arch, mode
    )
    if c is None:
        c = jnp.zeros((a.shape[0], b.shape[1]), _ACC_DTYPE[accumulator])
    return _matmul(a, b, c, operand_format, accumulator, tile, arch, mode)
