"""Many small tiles on a Hopper GPU's tensor cores: exact ``jaxwarp.mma`` chains whose
datapath is ``wgmma``'s, several tiles to one ``wgmma`` product (Pallas, Triton backend).

``wgmma``'s smallest product has 64 rows. A tile of m rows (16 for WMMA's and
``mma.sync``'s shapes) padded to 64 would move four times its A and C through memory
for one instruction that is three quarters idle. Instead g = 64 / m tiles share one
product, laid out block-diagonally:

* their A's stacked as the product's 64 rows (a free reshape of the batch);
* their B's side by side as its g·n columns (tile t's column j is column t·n + j);
* their C's repeated along the columns as the accumulator (tile t's row i holds
  C_t[i, :] in every column block).

Row block t of the product's D, columns t·n .. t·n + n, is then tile t's own chain: every
element of a ``wgmma`` D depends only on its row of A, its column of B and its element of
C (the fact native mode's padding of rows and columns rests on), and the chain runs the
same instructions, k ``NATIVE_K`` each, C first, in ascending k. The other blocks (tile
t's rows against tile s's columns) are computed and never stored: g times the tiles'
tensor-core work, which an H100 has to spare where the tiles' bytes bound the time. K is
never padded (an extra instruction of zero products is not the identity; see
``native_kernels``): a K that the k block does not divide ends with smaller blocks
(``native_kernels.pieces``).

The kernel reads each group's blocks of A (free), B and C (gathered with index arrays:
Pallas' Triton loads take integer indexers) and keeps only the diagonal blocks: each
element's bits where its row's tile owns its column, zero elsewhere, summed over the
column blocks as integers (one nonzero term: the bits exactly).
:data:`native_kernels.chain_dot_p` is its arithmetic, as in native mode's GEMM kernel,
so off the GPU (``interpret=True``) each product is the exact model's chain and the
layout (gathers, the diagonal, the k pieces) is checked on a CPU against
``jaxwarp.mma(mode="exact")``.

:func:`fits` says which tiles the layout takes (m dividing 64, g·n a power of two from
16 to 256); :func:`chain` runs it on (T, m, K) @ (T, K, n) + (T, m, n).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl

from jaxwarp._src.gemm.kernels import native_kernels, native_mgpu
from jaxwarp._src.numerics import bitops

#: Rows of one ``wgmma`` product (a warpgroup's m): the tiles of a group stacked.
ROWS = native_mgpu.CHAIN_M
#: The widest product (``wgmma``'s largest n).
MAX_COLUMNS = 256
#: The kernel's name (in profiles and traces).
KERNEL_NAME = "jaxwarp_native_tiles"
#: The largest k block of one product (elements).
BLOCK_K = 128
#: Groups of tiles one kernel instance takes by default.
GROUPS = 1
#: The integer type of each accumulator dtype's bits.
_INT = {jnp.dtype(jnp.float32): jnp.int32, jnp.dtype(jnp.float16): jnp.int16}


@dataclasses.dataclass(frozen=True)
class TilePlan:
    """Static shape of one tiles kernel (hashable)."""
    spec: native_kernels.DotSpec
    m: int  # a tile's rows (divides ROWS)
    n: int  # a tile's columns
    K: int  # a tile's k
    bk: int  # the k block of one product (a power-of-two multiple of spec.k)
    groups: int  # groups of ROWS // m tiles one kernel instance takes, in turn
    hmma_pair: bool = False  # sm_90's fp8 mma.sync: see chain
    nan: int = 0x7FFFFFFF  # with hmma_pair: the bits of a NaN the FADD of C gives

    @property
    def group(self) -> int:
        return ROWS // self.m


#: The instruction k of the fp8 ``mma.sync`` whose chain ``hmma_pair`` runs.
PAIR_K = 32


def fits(m: int, n: int, K: int, ik: int) -> str | None:
    """Why (m, K) @ (K, n) tiles of instruction k ``ik`` do not fit the block-diagonal
    layout, or None where they do.

    Example:
        >>> fits(16, 16, 32, 32) is None
        True
        >>> fits(24, 16, 32, 32)
        'm = 24 does not divide 64'
    """
    if m < 1 or ROWS % m:
        return f"m = {m} does not divide {ROWS}"
    width = ROWS // m * n
    if n < 1 or width & (width - 1) or not 16 <= width <= MAX_COLUMNS:
        return (f"{ROWS // m} tiles of n = {n} make {width} columns, not a power of two "
                f"from 16 to {MAX_COLUMNS}")
    if K < ik or K % ik:
        return f"k = {K} is not a multiple of the instruction's k = {ik}"
    return None


def plan(spec: native_kernels.DotSpec, m: int, n: int, K: int, T: int,
         hmma_pair: bool = False, groups: int | None = None,
         nan: int = 0x7FFFFFFF) -> TilePlan:
    """The kernel's blocks for T tiles of (m, K) @ (K, n): the k block (the format's GEMM
    block, at most the smallest power of two covering K, or with ``hmma_pair`` one
    instruction's :data:`PAIR_K`) and the groups an instance takes (``groups``, by
    default :data:`GROUPS`, fewer where T is small); ``hmma_pair`` and ``nan`` as
    :func:`chain`'s.

    Example:
        >>> spec = native_kernels.DotSpec("e4m3", "e4m3", "f32", 32, True)
        >>> plan(spec, 16, 16, 32, 1 << 20).bk
        32
    """
    bk = spec.k
    while bk < min(K, PAIR_K if hmma_pair else BLOCK_K):
        bk *= 2
    if groups is None:
        groups = max(1, min(GROUPS, -(-T // (ROWS // m))))
    return TilePlan(spec, m, n, K, bk, groups, hmma_pair, nan)


def mod4_order(ks):
    """The k each position of an fp8 ``mma.sync`` instruction's two HMMAs reads (``ks``:
    positions, an integer array): in each instruction's :data:`PAIR_K`, the 16 k with
    k % 4 in {0, 1} first, then the 16 with k % 4 in {2, 3} (``k_split="mod4"``).

    Example:
        >>> [int(k) for k in mod4_order(jnp.arange(40))[14:20]]
        [28, 29, 2, 3, 6, 7]
    """
    base, p = ks - ks % PAIR_K, ks % PAIR_K
    half, q = p // 16, p % 16
    return base + 4 * (q // 2) + 2 * half + q % 2


def _kernel(a_ref, b_ref, c_ref, z_ref, o_ref, *, plan: TilePlan):
    spec, m, n, g = plan.spec, plan.m, plan.n, plan.group
    col = lax.iota(jnp.int32, g * n)
    tile, j = col // n, col % n  # each product column: its tile, its column in the tile
    row = lax.iota(jnp.int32, ROWS)

    def block(q, acc, s, size):  # one k block of the chain: wgmma instructions in order
        ks = s + lax.iota(jnp.int32, size)
        if plan.hmma_pair:
            ks = mod4_order(ks)
            at = a_ref[q, row[:, None], ks[None, :]]
        else:
            at = a_ref[q, :, pl.ds(s, size)]
        if spec.b_kmajor:  # (g n, size): the kernel's B transposed
            bt = b_ref[q, tile[:, None], ks[None, :], j[:, None]]
        else:
            bt = b_ref[q, tile[None, :], ks[:, None], j[None, :]]
        if plan.hmma_pair:  # fp8 -> f16: exact
            at, bt = at.astype(jnp.float16), bt.astype(jnp.float16)
        if spec.a_format == "tf32":  # the 19 bits the tensor core reads: no rounding left
            at, bt = bitops.tf32_keep(at), bitops.tf32_keep(bt)
        return native_kernels.chain_dot_p.bind(at, bt, acc, spec=spec)

    def run(q, acc, off, length):  # the chain over k = off .. off + length
        for size, count in native_kernels.pieces(length, plan.bk):
            def step(i, acc, off=off, size=size):
                s = off + i * size
                return block(q, acc, s if isinstance(s, int) else pl.multiple_of(s, size),
                             size)
            acc = step(0, acc) if count == 1 else lax.fori_loop(0, count, step, acc)
            off = off + size * count
        return acc

    def one_group(q):
        acc = c_ref[q, row[:, None], j[None, :]]  # C_t[i, j] in every column block
        if not plan.hmma_pair:
            acc = run(q, acc, 0, plan.K)
        else:  # each instruction: its HMMAs' chain from +0, then C + it (fp32, RN)
            zero = jnp.broadcast_to(z_ref[...], acc.shape)  # from memory: not foldable
            acc = lax.fori_loop(0, plan.K // PAIR_K, lambda i, acc: acc + run(
                q, zero, pl.multiple_of(i * PAIR_K, PAIR_K), PAIR_K), acc)
        # Tile t's block of D: its rows' bits in their own column block, zero in the
        # others, summed over the blocks as integers (one term nonzero: exact bits, NaN
        # payloads and the sign of zero included).
        bits = lax.bitcast_convert_type(acc, _INT[acc.dtype]).astype(jnp.int32)
        if plan.hmma_pair:  # the FADDs' NaN: a GPU's is its one NaN, XLA's the operand's
            bits = jnp.where(acc != acc, np.uint32(plan.nan).view(np.int32), bits)
        diagonal = (row // m)[:, None] == tile[None, :]
        bits = jnp.where(diagonal, bits, 0).reshape(ROWS, g, n).sum(axis=1)
        o_ref[q] = lax.bitcast_convert_type(bits.astype(_INT[o_ref.dtype]), o_ref.dtype)

    if plan.groups == 1:
        one_group(0)
    else:
        lax.fori_loop(0, plan.groups, lambda q, carry: (one_group(q), carry)[1], 0)


def chain(a, b, c, spec: native_kernels.DotSpec, *, groups: int | None = None,
          hmma_pair: bool = False, nan: int = 0x7FFFFFFF,
          interpret: bool = False) -> jax.Array:
    """``D = A @ B + C`` for T independent tiles: (T, m, K) @ (T, K, n) + (T, m, n) ->
    (T, m, n) in C's dtype, each tile's chain that of ``wgmma`` (``spec``) on its tensor
    cores (``interpret``: the exact model's, in Pallas' interpreter). The tiles must
    :func:`fits`; T is padded to whole instances with zero tiles (dropped from D).
    ``groups``: groups of tiles an instance takes (default :func:`plan`'s). The kernel
    cuts tf32 operands to their top 19 bits (``bitops.tf32_keep``, in registers: no
    pass over them), as the tensor core reads them: Triton's tf32 dot must not round
    them.

    ``hmma_pair``: the chain of sm_90's fp8 ``mma.sync`` (k :data:`PAIR_K`; its datapath's
    ``operand_via="f16"``, ``k_split="mod4"``, ``c_mode="end"``): fp8 operands (e4m3 /
    e5m2, mixed or not) converted exactly to f16 in the kernel; each instruction's k in
    the order of its two f16 HMMAs (k % 4 in {0, 1}, then {2, 3}); their chain of two
    f16 ``wgmma`` k16 (``spec``: f16, k 16, an fp32 accumulator) from +0; then the fp32
    accumulator plus it, rounded to nearest, a NaN sum given the bits ``nan`` (the
    datapath's ``nan_f32``). The f16 ``wgmma``'s datapath is the f16 HMMA's, so this is
    that instruction's chain.

    Example:
        >>> spec = native_kernels.DotSpec("f16", "f16", "f32", 16)
        >>> a = jnp.ones((8, 16, 32), jnp.float16); b = jnp.ones((8, 32, 16), jnp.float16)
        >>> c = jnp.zeros((8, 16, 16), jnp.float32)
        >>> chain(a, b, c, spec, interpret=True)[0, 0, 0]
        Array(32., dtype=float32)
    """
    from jax.experimental.pallas import triton as pltriton  # noqa: PLC0415

    if not a.ndim == b.ndim == c.ndim == 3:
        raise ValueError(f"native tiles: a, b and c must be 3-D (T tiles), got a {a.shape}, "
                         f"b {b.shape}, c {c.shape}")
    T, m, K = a.shape
    n = b.shape[-1]
    why = fits(m, n, K, PAIR_K if hmma_pair else spec.k)
    if why is None and hmma_pair and (spec.a_format, spec.b_format, spec.accumulator,
                                      spec.k, spec.b_kmajor) != ("f16", "f16", "f32", 16,
                                                                 False):
        why = f"hmma_pair runs f16 wgmma k16 with an fp32 accumulator, not spec={spec}"
    if why is None and (b.shape != (T, K, n) or c.shape != (T, m, n)):
        why = (f"for a of shape (T, m, K) = {a.shape}, b must be (T, K, n) = "
               f"({T}, {K}, n) and c (T, m, n) = ({T}, {m}, {n})")
    if why is not None:
        raise ValueError(f"native tiles: a {a.shape} @ b {b.shape} + c {c.shape}: {why}")
    p = plan(spec, m, n, K, T, hmma_pair, groups, nan)
    g = p.group
    per = g * p.groups  # tiles an instance
    Tp = -(-T // per) * per
    if Tp != T:
        a, b, c = (jnp.pad(x, ((0, Tp - T), (0, 0), (0, 0))) for x in (a, b, c))
    if not interpret:
        native_kernels.register_triton_rule()
    q = p.groups
    d = pl.pallas_call(
        functools.partial(_kernel, plan=p),
        grid=(Tp // per,),
        in_specs=[pl.BlockSpec((q, ROWS, K), lambda i: (i, 0, 0)),
                  pl.BlockSpec((q, g, K, n), lambda i: (i, 0, 0, 0)),
                  pl.BlockSpec((q, ROWS, n), lambda i: (i, 0, 0)),
                  pl.BlockSpec((1, g * n), lambda i: (0, 0))],
        out_specs=pl.BlockSpec((q, ROWS, n), lambda i: (i, 0, 0)),
        out_shape=jax.ShapeDtypeStruct((Tp // g, ROWS, n), c.dtype),
        compiler_params=pltriton.CompilerParams(num_warps=4, num_stages=3),
        interpret=interpret,
        name=KERNEL_NAME,
    )(a.reshape(Tp // g, ROWS, K), b.reshape(Tp // g, g, K, n), c.reshape(Tp // g, ROWS, n),
      jnp.zeros((1, g * n), c.dtype))
    return d.reshape(Tp, m, n)[:T]
