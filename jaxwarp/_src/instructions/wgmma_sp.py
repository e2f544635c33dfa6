"""``wgmma.mma_async.sp.sync.aligned``: Hopper's sparse warpgroup MMA.

``D = A @ B + D`` for a warpgroup (128 threads) with A (64 x K) 2:4 sparse: f16 / bf16
m64nNk32, tf32 m64nNk16, e4m3 / e5m2 and s8 / u8 m64nNk64 (``isa.SPARSE_ROWS``). The
stored A (64 x K/2) comes from shared memory (a matrix descriptor) or registers (the dense
wgmma A fragment of K/2); B (K x N) from shared memory; every thread passes a metadata
register and the instruction a sparsity selector. Warp w of the warpgroup holds the
metadata of rows 16w .. 16w + 15 in the layout of ``mma.sp`` m16n8kK
(``jaxwarp._src.instructions.sparse``).

Arithmetic: the dense ``wgmma`` datapath at k = K/2 over the stored products (each
multiplying the B row its metadata index names), as ``mma.sp`` runs the dense
``mma.sync`` one: the model the ``mma.sp`` captures confirm; the ``wgsp/`` captures check
it for wgmma.

Two views, as the dense ``wgmma``: :func:`wgmma_sp` on registers and shared memory (A
from registers in the layout of the dense m64nNk(K/2) A, ``wgmma_registers.a_layout``, or
stored A in shared memory through a descriptor; B (K x N) through its descriptor; the
accumulator registers of ``wgmma_registers.d_layout``; every thread's metadata register)
and :func:`wgmma_sp_logical` on logical matrices.
"""

from __future__ import annotations

import functools
import re
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxwarp._src import checks
from jaxwarp._src.catalogue import isa
from jaxwarp._src.catalogue.mma_sync_parse import LOGICAL_DTYPE
from jaxwarp._src.catalogue.wgmma_parse import BITS_DTYPE, WARPGROUP_SIZE
from jaxwarp._src.instructions import sparse
from jaxwarp._src.instructions.mma_sp import (
    check_arch,
    check_selector,
    compute,
    logical_operands,
    poison_rows,
)
from jaxwarp._src.layouts.smem import (
    as_smem,
    check_range,
    decode_descriptor,
    descriptor_arg,
    gather,
    is_descriptor,
    keep_c,
    operand_addresses,
)
from jaxwarp._src.layouts.wgmma_registers import (
    a_matrix,
    accumulator_matrix,
    accumulator_registers,
)
from jaxwarp._src.numerics import bitops

__all__ = ["parse_wgmma_sp", "wgmma_sp", "wgmma_sp_logical", "read_b"]

_QUAL = re.compile(r"m64n(\d+)k(\d+)(\.satfinite)?\.(\w+)\.(\w+)\.(\w+)")


def parse_wgmma_sp(qualifier: str | sparse.SparseInstruction) -> sparse.SparseInstruction:
    """``"m64n64k32.f32.f16.f16"`` (D, A, B types; the text after
    ``wgmma.mma_async.sp.sync.aligned.``, or the whole opcode) -> a frozen record of
    it: ``family`` (``"wgmma_sp"``), ``m``, ``n``, ``k`` (the dense K), ``a_format``,
    ``b_format``, ``c_format`` (= ``d_format``), ``d_format``, ``satfinite``,
    ``qualifier`` and ``ptx``.

    Example:
      >>> parse_wgmma_sp("m64n8k64.satfinite.s32.s8.u8").b_format
      'u8'
    """
    if isinstance(qualifier, sparse.SparseInstruction) and qualifier.family == "wgmma_sp":
        return qualifier
    if not isinstance(qualifier, str):
        raise TypeError(f"qualifier must be a str, got {type(qualifier).__name__}")
    q = qualifier.strip()
    q = q[len(sparse.WGMMA_SP):] if q.startswith(sparse.WGMMA_SP) else q
    m = _QUAL.fullmatch(q)
    instr = None
    if m:
        n, k, sat, d, a, b = int(m[1]), int(m[2]), bool(m[3]), m[4], m[5], m[6]
        row = isa.sparse_row_of("wgmma_sp", a, (64, n, k))
        if (row is not None and b in row.b_formats(a) and (d, d) in row.cd
                and (not sat or row.satfinite)):
            instr = sparse.SparseInstruction("wgmma_sp", 64, n, k, a, b, d, d, sat, False)
    if instr is None:
        rows = "; ".join(f"{'/'.join(r.a_formats)} k{r.k}" for r in isa.sparse_rows("wgmma_sp"))
        raise ValueError(f"qualifier={qualifier!r} is not a wgmma.mma_async.sp instruction; "
                         f"expected 'm64n{{N}}k{{K}}[.satfinite].{{dtype}}.{{atype}}.{{btype}}' "
                         f"with one of: {rows} (N a multiple of 8; integers 8, 16, 24 or a "
                         f"multiple of 16); dtype f32 or f16 (f16, fp8), f32 (bf16, tf32), "
                         f"s32 (s8/u8)")
    return instr


def _check(qualifier, arch, selector):
    instr = parse_wgmma_sp(qualifier)
    return instr, check_arch(instr, arch), check_selector(instr, selector)


def _metadata(e: Any) -> jax.Array:
    e = checks.array_arg(e, "e")
    if e.dtype != jnp.uint32 or e.ndim < 1 or e.shape[-1] != WARPGROUP_SIZE:
        raise ValueError(f"e must be uint32 of shape (..., 128) (one metadata register per "
                         f"thread), got {e.dtype} {tuple(e.shape)}")
    return e


def wgmma_sp_logical(qualifier: str | sparse.SparseInstruction, a: Any, b: Any, c: Any, *,
                     indices: Any = None, e: Any = None, selector: int = 0,
                     arch: Any = "sm_90a") -> jax.Array:
    """``D = A @ B + C`` of one ``wgmma.mma_async.sp`` (scale-d 1, no negation, K-major).

    Args:
      qualifier: static, e.g. ``"m64n64k32.f32.f16.f16"`` (:func:`parse_wgmma_sp`).
      a: the stored A (..., 64, K/2) with ``indices`` or ``e``, or the dense A (..., 64,
        K), checked to be 2:4 and compressed.
      b: (..., K, N); c: (..., 64, N) (logical dtypes as ``wgmma_logical``).
      indices: (..., 64, K/2) ints: each stored element's column in its group (outside
        ``[0, group)``: as ``mma_sp_logical``).
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
    instr, arch, selector = _check(qualifier, arch, selector)
    a, b, c = checks.array_args(a=a, b=b, c=c)
    geo = instr.geometry
    if e is not None:
        if indices is not None:
            raise ValueError("give indices or e, not both")
        e = _metadata(e)
        indices = sparse.indices_from_nibbles(geo, sparse.nibbles_from_words(geo, e, selector))
        a, nib, b, c = logical_operands(instr, a, b, c, indices)
        nib = sparse.nibbles_from_words(geo, e, selector)  # the words, not their decoding
    else:
        a, nib, b, c = logical_operands(instr, a, b, c, indices)
        return poison_rows(_jit(instr, arch, a, nib, b, c), indices, geo.group)
    return _jit(instr, arch, a, nib, b, c)


@functools.partial(jax.jit, static_argnums=(0, 1))
def _jit(instr, arch, a, nib, b, c):
    return compute(instr, a, nib, b, c, arch)


def read_b(smem: Any, desc_b: Any, qualifier: str | sparse.SparseInstruction) -> jax.Array:
    """B (K x N, the logical K) read from shared memory through its descriptor, as
    ``wgmma.mma_async.sp`` reads it: raw bits (..., K, N) (``BITS_DTYPE``).

    Example:
      >>> import jax.numpy as jnp
      >>> from jaxwarp import make_descriptor
      >>> smem = jnp.arange(4096, dtype=jnp.uint32).astype(jnp.uint8)
      >>> read_b(smem, make_descriptor(2048, 128, 512), "m64n8k64.s32.u8.u8").shape
      (64, 8)
    """
    instr = parse_wgmma_sp(qualifier)
    descriptor_arg(desc_b, "desc_b")
    s = as_smem(smem)
    bits = isa.element_bits(instr.b_format)
    addr, bit = operand_addresses(desc_b, instr.n, instr.k, bits)
    check_range(addr, s.shape[-1], "operand b", desc_b, decode_descriptor(desc_b))
    return jnp.swapaxes(gather(s, addr, bit, bits, BITS_DTYPE[instr.b_format]), -1, -2)


def wgmma_sp(qualifier: str | sparse.SparseInstruction, a: Any, desc_b: Any, smem: Any,
             d_regs: Any, e: Any, *, selector: int = 0, scale_d: Any = 1,
             arch: Any = "sm_90a") -> jax.Array:
    """One ``wgmma.mma_async.sp.sync.aligned`` at the register and descriptor level:
    ``wgmma.mma_async.sp.sync.aligned.<qualifier> d, a-desc|{a0..a3}, b-desc, e, F,
    scale-d, 1, 1[, 0, 0]`` and its ``wait_group 0``; returns the new accumulator
    registers.

    Args:
      qualifier: e.g. ``"m64n64k32.f32.f16.f16"`` (:func:`parse_wgmma_sp`).
      a: the stored A (64 x K/2): registers (..., 128, 4) uint32 in the layout of the
        dense m64nNk(K/2) A (as :func:`jaxwarp.wgmma` takes it), or a descriptor (static
        int) of it in shared memory (K-major, as a dense A of K/2 columns).
      desc_b: B's descriptor (static int): B (K x N, K-major) of the logical K
        (read as :func:`jaxwarp.wgmma` reads B).
      smem: (..., nbytes) uint8 shared memory.
      d_regs: (..., 128, NR) accumulator registers in the layout of the dense wgmma
        (as :func:`jaxwarp.wgmma`'s): float32, int32, or uint32 for f16 (two halves).
      e: (..., 128) uint32: every thread's metadata register; warp w holds rows
        16w .. 16w + 15 as ``mma.sp`` m16n8kK does (``jaxwarp.sparse.metadata_words(...,
        instruction="wgmma_sp")``); only the threads ``selector`` names count.
      selector: the sparsity selector F, static (f16 / bf16 / tf32 0..1, 8-bit 0).
      scale_d: 0 (``D = A @ B``) or 1 (``D = A @ B + D``), as the dense ``wgmma``.
      arch: ``"sm_90a"``.

    Returns:
      The accumulator registers after the instruction (shape and dtype of ``d_regs``).

    Example:
      >>> import jax.numpy as jnp
      >>> from jaxwarp import make_descriptor
      >>> q = "m64n8k32.f32.f16.f16"
      >>> a = jnp.full((128, 4), 0x3C003C00, jnp.uint32)   # every stored f16 is 1.0
      >>> smem = jnp.zeros(4096, jnp.uint8).at[2048:].set(
      ...     jnp.tile(jnp.array([0, 0x40], jnp.uint8), 1024))  # every f16 of B is 2.0
      >>> e = jnp.full((128,), 0x44444444, jnp.uint32)     # indices 0, 1 in every group
      >>> d = wgmma_sp(q, a, make_descriptor(2048, 128, 512), smem,
      ...              jnp.zeros((128, 4), jnp.float32), e)
      >>> float(d[0, 0])                                   # 16 products of 2.0
      32.0
    """
    smem, d_regs = checks.array_args(smem=smem, d_regs=d_regs)
    if np.ndim(a) == 0:  # a scalar can only be A's descriptor
        descriptor_arg(a, "a (desc_a, A's descriptor)")
    a = a if is_descriptor(a) else checks.array_arg(a, "a")
    instr, arch, selector = _check(qualifier, arch, selector)
    e = _metadata(e)
    dense = instr.dense("a")  # the dense m64nNk(K/2): A's and the accumulator's layouts
    s = as_smem(smem)
    if is_descriptor(a):
        addr, bit = operand_addresses(a, 64, instr.k // 2, dense.a_bits)
        check_range(addr, s.shape[-1], "operand a", a, decode_descriptor(a))
        a_bits = gather(s, addr, bit, dense.a_bits, BITS_DTYPE[instr.a_format])
    else:
        a_bits = a_matrix(a, dense)
    b_bits = read_b(s, desc_b, instr)
    c = keep_c(accumulator_matrix(d_regs, dense), scale_d, "scale_d")
    a_log, b_log = (bitops.from_bits(x, LOGICAL_DTYPE[t]) for x, t in
                    ((a_bits, instr.a_format), (b_bits, instr.b_format)))
    try:
        np.broadcast_shapes(a_log.shape[:-2], b_log.shape[:-2], c.shape[:-2], e.shape[:-1])
    except ValueError as err:
        raise ValueError(f"batch axes of a {a_log.shape[:-2]}, smem {s.shape[:-1]}, d_regs "
                         f"{c.shape[:-2]} and e {e.shape[:-1]} do not broadcast") from err
    d = _regs_jit(instr, arch, selector, a_log, e, b_log, c)
    return accumulator_registers(d, dense)


@functools.partial(jax.jit, static_argnums=(0, 1, 2))
def _regs_jit(instr, arch, selector, a, e, b, c):
    return compute(instr, a, sparse.nibbles_from_words(instr.geometry, e, selector), b, c, arch)
