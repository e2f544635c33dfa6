"""``wgmma.mma_async.sp.sync.aligned``: Hopper's sparse warpgroup MMA, on logical matrices.

``D = A @ B + D`` for a warpgroup (128 threads) with A (64 x K) 2:4 sparse: f16 / bf16
m64nNk32, tf32 m64nNk16, e4m3 / e5m2 and s8 / u8 m64nNk64 (``isa.SPARSE_ROWS``). The
stored A (64 x K/2) comes from shared memory (a matrix descriptor) or registers (the dense
wgmma A fragment of K/2); B (K x N) from shared memory; every thread passes a metadata
register and the instruction a sparsity selector. Warp w of the warpgroup holds the
metadata of rows 16w .. 16w + 15 in the layout of ``mma.sp`` m16n8kK
(``jaxwarp._src.tensorcore.sparse``).

Arithmetic: the dense ``wgmma`` datapath at k = K/2 over the stored products (each
multiplying the B row its metadata index names), as ``mma.sp`` runs the dense
``mma.sync`` one: the model the ``mma.sp`` captures confirm; the ``wgsp/`` captures check
it for wgmma.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from typing import Any

import jax
import jax.numpy as jnp

from jaxwarp._src import checks
from jaxwarp._src.tensorcore import isa, sparse
from jaxwarp._src.tensorcore.arch import check_target, parse_target, supported_target
from jaxwarp._src.tensorcore.mma_sp import compute, logical_operands

__all__ = ["WgSpInstruction", "parse_wgmma_sp", "wgmma_sp_logical"]

PREFIX = "wgmma.mma_async.sp.sync.aligned."
_QUAL = re.compile(r"m64n(\d+)k(\d+)(\.satfinite)?\.(\w+)\.(\w+)\.(\w+)")


@dataclasses.dataclass(frozen=True)
class WgSpInstruction:
    """One ``wgmma.mma_async.sp`` configuration (frozen: a static argument)."""

    m: int
    n: int
    k: int
    a_format: str
    b_format: str
    c_format: str
    d_format: str
    satfinite: bool = False
    ordered: bool = False  # no ::ordered_metadata form; repeated indices stay undefined

    @property
    def ptx(self) -> str:
        sat = ".satfinite" if self.satfinite else ""
        return (f"{PREFIX}m64n{self.n}k{self.k}{sat}.{self.d_format}.{self.a_format}."
                f"{self.b_format}")

    @property
    def row(self) -> isa.SparseRow:
        return isa.sparse_row_of("wgmma_sp", self.a_format, (self.m, self.n, self.k))


def parse_wgmma_sp(qualifier: str | WgSpInstruction) -> WgSpInstruction:
    """``"m64n64k32.f32.f16.f16"`` (D, A, B types; the text after
    ``wgmma.mma_async.sp.sync.aligned.``, or the whole opcode) -> :class:`WgSpInstruction`.

    Example:
      >>> parse_wgmma_sp("m64n8k64.satfinite.s32.s8.u8").b_format
      'u8'
    """
    if isinstance(qualifier, WgSpInstruction):
        return qualifier
    if not isinstance(qualifier, str):
        raise TypeError(f"qualifier must be a str, got {type(qualifier).__name__}")
    q = qualifier.strip()
    q = q[len(PREFIX):] if q.startswith(PREFIX) else q
    m = _QUAL.fullmatch(q)
    instr = None
    if m:
        n, k, sat, d, a, b = int(m[1]), int(m[2]), bool(m[3]), m[4], m[5], m[6]
        row = isa.sparse_row_of("wgmma_sp", a, (64, n, k))
        if (row is not None and b in row.b_formats(a) and (d, d) in row.cd
                and (not sat or row.satfinite)):
            instr = WgSpInstruction(64, n, k, a, b, d, d, sat)
    if instr is None:
        rows = "; ".join(f"{'/'.join(r.a_formats)} k{r.k}" for r in isa.sparse_rows("wgmma_sp"))
        raise ValueError(f"qualifier={qualifier!r} is not a wgmma.mma_async.sp instruction; "
                         f"expected 'm64n{{N}}k{{K}}[.satfinite].{{dtype}}.{{atype}}.{{btype}}' "
                         f"with one of: {rows} (N a multiple of 8; integers 8, 16, 24 or a "
                         f"multiple of 16); dtype f32 or f16 (f16, fp8), f32 (bf16, tf32), "
                         f"s32 (s8/u8)")
    return instr


def wgmma_sp_logical(qualifier: str | WgSpInstruction, a: Any, b: Any, c: Any, *,
                     indices: Any = None, e: Any = None, selector: int = 0,
                     arch: Any = "sm_90a") -> jax.Array:
    """``D = A @ B + C`` of one ``wgmma.mma_async.sp`` (scale-d 1, no negation, K-major).

    Args:
      qualifier: static, e.g. ``"m64n64k32.f32.f16.f16"`` (:func:`parse_wgmma_sp`).
      a: the stored A (..., 64, K/2) with ``indices`` or ``e``, or the dense A (..., 64,
        K), checked to be 2:4 and compressed.
      b: (..., K, N); c: (..., 64, N) (logical dtypes as ``wgmma_logical``).
      indices: (..., 64, K/2) ints: each stored element's column in its group.
      e: instead of indices, every thread's metadata register (..., 128) uint32, read
        with ``selector`` (``sparse.metadata_words(..., instruction="wgmma_sp")``).
      selector: the sparsity selector, static (f16 / bf16 / tf32 0..1, 8-bit 0).
      arch: ``"sm_90a"``.

    Returns:
      (..., 64, N) in D's logical dtype.

    Example:
      >>> import jax.numpy as jnp
      >>> a = jnp.zeros((64, 32), jnp.float16).at[:, 0].set(1.0).at[:, 2].set(3.0)
      >>> b = jnp.ones((32, 8), jnp.float16); c = jnp.zeros((64, 8), jnp.float32)
      >>> float(wgmma_sp_logical("m64n8k32.f32.f16.f16", a, b, c)[5, 0])
      4.0
    """
    instr = parse_wgmma_sp(qualifier)
    if isinstance(arch, str):
        target = parse_target(arch)
        supported_target(arch)
        check_target(target, "wgmma", instr.a_format, instr.b_format, instr.k // 2)
    selector = checks.static_int(selector, "selector")
    if selector not in range(instr.row.selectors):
        raise ValueError(f"selector={selector} is not a sparsity selector of {instr.ptx}; "
                         f"allowed: {tuple(range(instr.row.selectors))}")
    a, b, c = checks.array_args(a=a, b=b, c=c)
    geo = sparse.geometry("wgmma_sp", instr.a_format, instr.k)
    if e is not None:
        if indices is not None:
            raise ValueError("give indices or e, not both")
        e = checks.array_arg(e, "e")
        if e.dtype != jnp.uint32 or e.ndim < 1 or e.shape[-1] != 128:
            raise ValueError(f"e must be uint32 of shape (..., 128) (one metadata register "
                             f"per thread), got {e.dtype} {tuple(e.shape)}")
        indices = sparse.indices_from_nibbles(geo, sparse.nibbles_from_words(geo, e, selector))
        a, nib, b, c = logical_operands(instr, a, b, c, indices, 64)
        nib = sparse.nibbles_from_words(geo, e, selector)  # the words, not their decoding
    else:
        a, nib, b, c = logical_operands(instr, a, b, c, indices, 64)
    return _jit(instr, arch, a, nib, b, c)


@functools.partial(jax.jit, static_argnums=(0, 1))
def _jit(instr, arch, a, nib, b, c):
    return compute(instr, a, nib, b, c, arch, instruction="wgmma")
