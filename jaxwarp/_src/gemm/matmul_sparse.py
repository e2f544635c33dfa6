"""``matmul(..., sparsity="2:4")``: a GEMM of sparse tensor-core instructions.

A (M, K) is pruned to 2:4 by magnitude (1:2 for tf32) in its operand format, compressed,
and every row runs a chain of ``mma.sp`` (``instruction="mma_sync"``) or
``wgmma.mma_async.sp`` (``"wgmma"``) instructions along K: the dense datapath at k = K/2
of the instruction over the stored products, each multiplying the B row its index names
(``mma_sp.compute``; H100 captures). Rows go through in blocks of 16 (``lax.map``) so the
gathered B (16 x K/2 x N per block) stays small.
"""

from __future__ import annotations

import functools

import jax.numpy as jnp
from jax import lax

from jaxwarp._src.arithmetic import datapath
from jaxwarp._src.catalogue import isa
from jaxwarp._src.config import keyed_jit
from jaxwarp._src.instructions import sparse

__all__ = ["SPARSITIES", "matmul_2_4", "sparse_row", "kept_2_4", "k_step"]

SPARSITIES = ("2:4",)
_ROWS_PER_STEP = 16
#: The sparse instruction family of each matmul instruction.
FAMILY = {"mma_sync": "mma_sp", "wgmma": "wgmma_sp"}


def sparse_row(instruction: str, a_format: str, b_format: str, accumulator: str, k: int
               ) -> isa.SparseRow:
    """The sparse row a GEMM of K = ``k`` uses: the largest instruction K dividing k.

    Raises:
      ValueError: no sparse instruction takes these types, or none divides k.
    """
    fam = FAMILY.get(instruction)
    if fam is None:
        raise ValueError(f"sparsity='2:4' runs instruction='mma_sync' or 'wgmma'; got "
                         f"instruction={instruction!r}")
    rows = [r for r in isa.sparse_rows(fam, a_format) if b_format in r.b_formats(a_format)
            and (accumulator, accumulator) in r.cd]
    if not rows:
        have = sorted({t for r in isa.sparse_rows(fam) for t in r.a_formats})
        raise ValueError(f"sparsity='2:4' with {instruction}: no sparse instruction takes "
                         f"{a_format} x {b_format} with a {accumulator} accumulator; A types "
                         f"{have} (isa.SPARSE_ROWS)")
    fit = [r for r in rows if k % r.k == 0]
    if not fit:
        raise ValueError(f"sparsity='2:4': K = {k} is not a multiple of the K of a sparse "
                         f"{instruction} with {a_format} operands {sorted(r.k for r in rows)}")
    return max(fit, key=lambda r: r.k)


def k_step(instruction: str, a_format: str, accumulator: str) -> int:
    """The smallest K of the sparse instructions a GEMM of ``a_format`` operands can use
    (K must be a multiple of it); raises as :func:`sparse_row` where there is none."""
    sparse_row(instruction, a_format, a_format, accumulator, 0)
    return min(r.k for r in isa.sparse_rows(FAMILY[instruction], a_format)
               if (accumulator, accumulator) in r.cd)


@functools.partial(keyed_jit, static_argnames=("a_format", "b_format", "accumulator",
                                                "instruction", "arch"))
def matmul_2_4(a, b, c, *, a_format: str, b_format: str, accumulator: str,
               instruction: str, arch):
    """``D = prune_2_4(A) @ B + C`` through sparse instructions; a, b in their operand
    formats' storage dtypes, c in the accumulator's."""
    m, k = a.shape
    row = sparse_row(instruction, a_format, b_format, accumulator, k)
    geo = sparse.Geometry(a_format, k, row.unit_bits)
    vals, idx = sparse.compress_groups(sparse.prune_groups(a, geo.group), geo.group)
    nib = sparse.nibbles_from_indices(geo, idx)
    pad = -m % _ROWS_PER_STEP
    blocks = [jnp.pad(x, ((0, pad), (0, 0))).reshape(-1, _ROWS_PER_STEP, x.shape[1])
              for x in (vals, nib, c)]

    def step(args):
        v, n_, c_ = args
        bg = sparse.gather_b(geo, b, n_)  # (16, K/2, N)
        d = datapath.mma(v[:, None, :], bg, c_[:, None, :], a_format=a_format,
                         b_format=b_format, c_format=accumulator, d_format=accumulator,
                         instruction=instruction, instruction_k=row.k // 2, arch=arch)
        return d[:, 0, :]

    out = lax.map(step, tuple(blocks))
    return out.reshape(-1, out.shape[-1])[:m]


def kept_2_4(a, *, a_format: str, b_format: str, accumulator: str, instruction: str):
    """True where :func:`matmul_2_4` keeps an element of ``a`` (its operand-format A):
    the 2:4 mask (1:2 for tf32) the forward pruned with, for the gradient."""
    row = sparse_row(instruction, a_format, b_format, accumulator, a.shape[1])
    return sparse.kept(a, sparse.Geometry(a_format, a.shape[1], row.unit_bits).group)
