"""The native GEMM kernel on Pallas' Mosaic GPU backend: exact mode's chain of ``wgmma``
instructions issued by ``plgpu.wgmma``.

The same chain as ``native_kernels`` (the Triton backend's kernel), written for the
backend that JAX keeps: every output element is the sequence of ``wgmma.mma_async``
k-steps of exact mode's chain -- the format's instruction k (16 for f16 / bf16, 8 for tf32,
32 for e4m3 / e5m2), ascending k, C first, the accumulator kept in registers from one
instruction to the next; with promotion every P k-elements each interval's chain starts
from +0 and is added to a separate fp32 register accumulator with an fp32
round-to-nearest addition::

    chain = C (no promotion) or +0;  total = C (promotion)
    for each k block of bk (ascending):
        chain = wgmma chain of the block from chain          # plgpu.wgmma, one run_state
        at the end of each promotion interval:
            total = total + chain;  chain = +0                # fp32 RN add, in registers
    D = chain (no promotion) or total

The kernel (:func:`gemm`): ``plgpu.kernel`` over a grid of (128, bn) output tiles, three
warpgroups a tile (``plgpu.emit_pipeline_warp_specialized``): one issues TMA copies of
A's (128, bk) and B's (bk, bn) blocks into a multi-stage ring of swizzled shared memory,
two compute warpgroups each own a (128, bn / 2) half of the tile, as two 64-row chains
held in registers. Each k block is one ``pl.run_state`` of the two chains as ``plgpu.ACC``
accumulators, so the chain's value enters each block's wgmmas as their C and leaves them
(after ``wgmma_wait``) as the next block's; the promotion adds are register additions,
selected at each interval's last block. C comes in through a shared-memory staging buffer
(TMA copy, then a load in the wgmma register layout), D goes out through the same buffer.

K is never padded (an extra instruction of zero products is not the identity: wgmma fp8
cuts C to 13 fraction bits, -0 + 0 is +0): the k block ``bk`` is the largest power of two
multiple of the instruction's k, at most 128 bytes a row of A, that divides K (and P), so
every block is a whole number of instructions and every interval a whole number of blocks
(:func:`block_k`). A K with a small power of two in it takes small blocks (slower, same
bits). M and N are padded to the tile (an output element depends only on its row, column
and C element). fp8 and tf32 ``wgmma`` read both operands K-major: the kernel takes B as
(N, K) and gives ``plgpu.wgmma`` its blocks through ``plgpu.transpose_ref``. tf32
operands are fp32 words already rounded by ``__float_to_tf32`` (``matmul``'s conversion),
so the tensor core's dropping of the low 13 bits changes nothing.

Off the GPU the kernel runs unchanged under ``jaxwarp.emulate(fn, arch="sm_90a")``
(JAX's GPU interpret mode, each ``plgpu.wgmma`` the exact model's wgmma chain from the
accumulator's value), which checks its structure (blocks, promotion, k order, C, padding)
against ``matmul(mode="exact")`` on a CPU; only the GPU run is the tensor core.

JAX API used (public ``jax.experimental.pallas.mosaic_gpu``, the same in JAX 0.10.2 and
0.11): ``kernel`` (``out_type``, ``grid``, ``grid_names``, ``num_threads``,
``thread_name``), ``emit_pipeline_warp_specialized`` (``compute_context`` carries,
``get_allocations``, ``allocations=``), ``BlockSpec`` with ``transforms``,
``TilingTransform``, ``SwizzleTransform``, ``find_swizzle``, ``SMEM``, ``Barrier``,
``ACC.init`` inside ``pl.run_state``, ``wgmma``, ``transpose_ref``, ``copy_gmem_to_smem``,
``barrier_wait``, ``commit_smem``, ``copy_smem_to_gmem``, ``wait_smem_to_gmem``,
``layout_cast`` to ``Layout.WGMMA`` (the patterns of JAX's own ``attention_mgpu``).
:func:`api_error` says which is missing on another JAX.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax import lax

from jaxwarp._src.config import config
from jaxwarp._src.gemm.matmul_tiles import TILES
from jaxwarp._src.warp.mgpu.kernel import triton_missing as triton_missing

#: Operand formats the kernel issues, with their storage dtype and the wgmma k.
DTYPES = {"f16": jnp.float16, "bf16": jnp.bfloat16, "tf32": jnp.float32,
          "e4m3": jnp.float8_e4m3fn, "e5m2": jnp.float8_e5m2}
INSTRUCTION_K = {f: TILES["wgmma"][f][0][2] for f in DTYPES}  # the catalogue's wgmma k
#: Accumulator formats and their dtypes (wgmma's D has C's type).
ACC_DTYPES = {"f32": jnp.float32, "f16": jnp.float16}
#: Whether B's blocks are read K-major (B given as (N, K)): wgmma reads 8- and 32-bit
#: operands only K-major; f16 / bf16 take B as (K, N) (a transposed descriptor).
B_KMAJOR = {"f16": False, "bf16": False, "tf32": True, "e4m3": True, "e5m2": True}
#: Rows of the output tile (two m64 wgmma row blocks) and of one chain.
BM, CHAIN_M = 128, 64
#: ``plgpu.planar_snake``'s minor dimension (0: M) and band width, in tiles. In a sweep of
#: widths 1-16 along M and N at 4096^3 (one H100 run, JAX 0.11.2, the kernel called
#: directly) bands of 8 along M were within 1.3% of the best for f16 and the best for bf16
#: (1.01x of the grid's order for both).
SNAKE = (0, 8)
#: Bytes of one row of an A block at most (the 128-byte swizzle).
ROW_BYTES = 128
#: What the kernel needs from ``jax.experimental.pallas.mosaic_gpu``.
API = ("kernel", "emit_pipeline_warp_specialized", "BlockSpec", "TilingTransform",
       "SwizzleTransform", "find_swizzle", "SMEM", "Barrier", "ACC", "wgmma",
       "transpose_ref", "copy_gmem_to_smem", "barrier_wait", "commit_smem",
       "copy_smem_to_gmem", "wait_smem_to_gmem", "layout_cast", "Layout")


def api_error() -> str | None:
    """Why the installed JAX cannot build the kernel, or None if it can.

    Example:
        >>> api_error() is None or "Mosaic GPU" in api_error()
        True
    """
    return api_gaps("the native kernel", API, {"pl.run_state": has_run_state})


def has_run_state() -> bool:
    """Whether the installed JAX's Pallas has ``pl.run_state`` (the kernels' wgmma
    accumulators live in one)."""
    from jax.experimental import pallas as pl  # noqa: PLC0415

    return hasattr(pl, "run_state")


def api_gaps(kernel: str, names, more=None) -> str | None:
    """Why the installed JAX cannot build ``kernel`` (its name in the message), a Mosaic
    GPU kernel that uses ``plgpu``'s ``names`` and the objects ``more`` names (label ->
    a function telling whether it is there), or None if it can."""
    try:
        from jax.experimental.pallas import mosaic_gpu as plgpu  # noqa: PLC0415
    except Exception as e:  # noqa: BLE001 (an ImportError, or a jaxlib without Mosaic)
        return (f"{kernel} on Mosaic GPU needs jax.experimental.pallas.mosaic_gpu "
                f"(JAX >= 0.10.2); importing it failed with JAX {jax.__version__}: {e}")
    missing = [f"plgpu.{n}" for n in names if not hasattr(plgpu, n)]
    missing += [label for label, present in (more or {}).items() if not present()]
    if missing:
        return (f"{kernel} on Mosaic GPU needs {', '.join(missing)}, which JAX "
                f"{jax.__version__} lacks (written against JAX 0.10.2 and 0.11)")
    return None


def unsupported(a_format: str, b_format: str, accumulator: str) -> str | None:
    """Why the kernel cannot run a chain of these formats on the installed JAX, or None.

    Example:
        >>> unsupported("e5m2", "e4m3", "f32")
        "operands of two formats (a 'e5m2', b 'e4m3'): plgpu.wgmma takes one dtype"
    """
    return format_error(a_format, b_format, accumulator) or api_error()


def format_error(a_format: str, b_format: str, accumulator: str) -> str | None:
    """Why one ``plgpu.wgmma`` chain cannot take operands and an accumulator of these
    formats, or None where it can.

    Example:
        >>> format_error("bf16", "bf16", "f16")
        "accumulator 'f16' for bf16: allowed 'f32' (and 'f16' for f16, e4m3 and e5m2)"
    """
    if a_format != b_format:
        return (f"operands of two formats (a {a_format!r}, b {b_format!r}): plgpu.wgmma "
                f"takes one dtype")
    if a_format not in DTYPES:
        return f"operand format {a_format!r}: the kernel issues {tuple(DTYPES)}"
    if accumulator not in ACC_DTYPES or (accumulator == "f16" and a_format in ("bf16",
                                                                               "tf32")):
        return (f"accumulator {accumulator!r} for {a_format}: allowed 'f32' (and 'f16' for "
                f"f16, e4m3 and e5m2)")
    return None


def auto_fits(a_format: str, K: int | None, promote_every: int | None,
              M: int | None = None, N: int | None = None) -> bool:
    """Whether ``native_backend="auto"`` takes this kernel: where it was measured on an
    H100 (JAX 0.11.2, ``benchmarks/native_mgpu.py``, calls back to back, the backends in
    turn) to compile, to give exact mode's bits and to run at least as fast as the Triton
    kernel: f16, bf16 and e4m3 operands, with or without promotion (timed with e4m3), M
    and N multiples of 128 (the shapes timed); or wherever it can run the chain when the
    installed JAX has no Pallas Triton backend (:func:`triton_missing`).

    At 4096^3 (record ``benchmarks/results/h100_native_mgpu.json``, 2026-12-06) it ran at
    1.27x (f16), 1.26x (bf16), 1.37x (e4m3) and 1.74x (e4m3, ``promote_every=128``) of the
    Triton kernel, and at 1.00, 0.97 and 1.75 of ``jnp.matmul``. e5m2 and tf32 compiled and were
    bit-exact in its checks but were not timed; they stay on Triton.

    Example:
        >>> auto_fits("bf16", 4096, None), auto_fits("e4m3", 4096, 128)
        (True, True)
        >>> auto_fits("tf32", 4096, None) == triton_missing()
        True
    """
    if triton_missing():
        return True
    if a_format not in ("f16", "bf16", "e4m3"):
        return False
    return not any(x is not None and x % 128 for x in (M, N))


@functools.cache
def block_k(a_format: str, K: int, promote_every: int | None = None) -> int:
    """The kernel's k block: the largest power of two multiple of the instruction's k, at
    most 128 bytes of A's row, that divides K and the promotion interval.

    Example:
        >>> block_k("f16", 4096), block_k("f16", 4096 + 48), block_k("e4m3", 256, 64)
        (64, 16, 64)
    """
    k = INSTRUCTION_K[a_format]
    size = jnp.dtype(DTYPES[a_format]).itemsize
    b = ROW_BYTES // size
    while b > k and (K % b or (promote_every is not None and promote_every % b)):
        b //= 2
    if K % b or (promote_every is not None and promote_every % b):
        raise ValueError(f"native kernel: K={K} and promote_every={promote_every} must be "
                         f"multiples of the {a_format} instruction's k={k}")
    return b


@dataclasses.dataclass(frozen=True)
class Plan:
    """Static shape of one native Mosaic GPU kernel: (M, K) @ (K, N) + C, with M a multiple
    of 128 and N of ``2 * wn``."""

    a_format: str
    accumulator: str
    K: int
    wn: int  # columns of each compute warpgroup's half of the tile
    bk: int
    promote_every: int | None
    stages: int
    #: Tile order (the option ``native_mgpu_order``): "snake" (one CTA a tile, in
    #: ``plgpu.planar_snake`` order, :data:`SNAKE`), "grid" (one CTA a tile, the grid's own
    #: order) or "persistent" (one CTA an SM, looping over the tiles in snake order: a
    #: tile's loads overlap the previous tile's stores).
    order: str

    @property
    def bn(self) -> int:
        return 2 * self.wn

    @property
    def steps(self) -> int:
        return self.K // self.bk


def plan(a_format: str, accumulator: str, M: int, K: int, N: int,
         promote_every: int | None, tile: str = "auto", order: str = "snake") -> Plan:
    """The kernel for an (M, K) @ (K, N) product. ``tile`` (the option
    ``native_mgpu_tile``): "auto" is (128, 256) tiles (each compute warpgroup a (128, 128)
    half: 128 accumulator registers a thread), (128, 128) with promotion (the fp32 total
    doubles the registers); "128x256" or "128x128" asks for one. Narrower for small N.
    As many stages (up to 4) of (128 + bn) x bk operand blocks as shared memory holds
    beside the C / D staging buffer (64 x bn / 2 accumulators a warpgroup). ``order``
    (the option ``native_mgpu_order``): the order the CTAs take the tiles in.

    Example:
        >>> p = plan("f16", "f32", 4096, 4096, 4096, None)
        >>> (p.bn, p.bk, p.stages)
        (256, 64, 3)
    """
    del M
    why = unsupported(a_format, a_format, accumulator)
    if why is not None:
        raise ValueError(f"native Mosaic GPU kernel: {why}")
    bk = block_k(a_format, K, promote_every)
    if tile == "auto":
        wn = 64 if promote_every is not None else 128
    else:
        wn = {"128x256": 128, "128x128": 64}[tile]
    while wn > 16 and wn >= N:  # no wider than N needs
        wn //= 2
    size = jnp.dtype(DTYPES[a_format]).itemsize
    stage = (BM + 2 * wn) * bk * size
    staging = 2 * CHAIN_M * wn * jnp.dtype(ACC_DTYPES[accumulator]).itemsize
    budget = 220 * 1024 - staging
    stages = max(2, min(4, budget // stage, K // bk))
    return Plan(a_format, accumulator, K, wn, bk, promote_every, int(stages), order)


def _swizzle_transforms(plgpu, minor: int, dtype) -> tuple:
    """Tiling and swizzle of a shared-memory block whose rows have ``minor`` elements."""
    size = jnp.dtype(dtype).itemsize
    swizzle = plgpu.find_swizzle(minor * size * 8)
    return (plgpu.TilingTransform((8, swizzle // size)), plgpu.SwizzleTransform(swizzle))


def _kernel(*refs, p: Plan, has_c: bool, tiles: tuple[int, int]):
    from jax.experimental import pallas as pl  # noqa: PLC0415
    from jax.experimental.pallas import mosaic_gpu as plgpu  # noqa: PLC0415

    a_gmem, b_gmem, c_gmem, o_gmem = refs if has_c else (refs[0], refs[1], None, refs[2])
    bk, wn, bn = p.bk, p.wn, p.bn
    kmajor = B_KMAJOR[p.a_format]
    op_dtype, acc_dtype = DTYPES[p.a_format], ACC_DTYPES[p.accumulator]
    op_tf = _swizzle_transforms(plgpu, bk, op_dtype)
    # B (K, N): tiles no wider than a warpgroup's columns, so that its half is whole tiles,
    # and swizzled as A is (wgmma takes one swizzle for both: a k block of 16 f16 is a
    # 32-byte row of A)
    b_tf = op_tf if kmajor else _swizzle_transforms(plgpu, min(wn, bk), op_dtype)
    acc_tf = _swizzle_transforms(plgpu, wn, acc_dtype)
    a_spec = plgpu.BlockSpec((BM, bk), lambda k: (0, k), transforms=op_tf)
    if kmajor:  # B as (N, K): its (bn, bk) blocks, K-major
        b_spec = plgpu.BlockSpec((bn, bk), lambda k: (0, k), transforms=b_tf)
    else:
        b_spec = plgpu.BlockSpec((bk, bn), lambda k: (k, 0), transforms=b_tf)
    interval = None if p.promote_every is None else p.promote_every // bk

    def zero(like=None):  # +0 in wgmma's register layout (what plgpu.ACC.init takes)
        shape, dtype = ((CHAIN_M, wn), acc_dtype) if like is None else (like.shape, like.dtype)
        return plgpu.layout_cast(jnp.full(shape, 0, dtype), plgpu.Layout.WGMMA)

    def body(idxs, a_smem, b_smem, carry):
        (k_idx,) = idxs
        chains, totals = carry
        wg = lax.axis_index("wg")
        if kmajor:
            b_blk = plgpu.transpose_ref(b_smem.at[pl.ds(wg * wn, wn), :], (1, 0))
        else:
            b_blk = b_smem.at[:, pl.ds(wg * wn, wn)]

        def issue(accs):  # one wgmma chain per 64-row half, from the chain's value
            for h, acc in enumerate(accs):
                plgpu.wgmma(acc, a_smem.at[pl.ds(h * CHAIN_M, CHAIN_M), :], b_blk)

        chains = pl.run_state(issue)(tuple(plgpu.ACC.init(c) for c in chains))
        if interval is not None:  # promotion: at an interval's last block
            last = jnp.logical_or(lax.rem(k_idx + 1, interval) == 0, k_idx + 1 == p.steps)
            # a branch, not a select: Mosaic GPU's warpgroup lowering has no select of
            # arrays on a scalar predicate (JAX 0.11.2: "implicit broadcast")
            totals, chains = lax.cond(
                last,
                lambda: (tuple(t + c for t, c in zip(totals, chains, strict=True)),
                         tuple(zero(c) for c in chains)),
                lambda: (totals, chains))
        return chains, totals

    def pipeline(compute_context):
        return plgpu.emit_pipeline_warp_specialized(
            body, grid=(p.steps,), memory_registers=40, in_specs=[a_spec, b_spec],
            wg_axis="wg", num_compute_wgs=2, max_concurrent_steps=p.stages,
            compute_context=compute_context)

    def tile_refs(mi, ni):
        return (a_gmem.at[pl.ds(mi * BM, BM), :],
                b_gmem.at[pl.ds(ni * bn, bn), :] if kmajor else b_gmem.at[:, pl.ds(ni * bn, bn)])

    @functools.partial(
        pl.run_scoped,
        allocs=pipeline(lambda _: None).get_allocations(*tile_refs(0, 0)),
        stage=plgpu.SMEM((2, CHAIN_M, wn), acc_dtype, transforms=acc_tf),
        barrier=plgpu.Barrier(num_barriers=2),
        collective_axes="wg",
    )
    def _scope(allocs, stage, barrier):
        def one_tile(mi, ni):
            def rows(h):
                return pl.ds(mi * BM + h * CHAIN_M, CHAIN_M)

            def compute_context(eval_pipeline):
                wg = lax.axis_index("wg")
                cols = pl.ds(ni * bn + wg * wn, wn)
                buf, bar = stage.at[wg], barrier.at[wg]
                c_vals = []
                for h in range(2):  # C's two 64-row halves, through the staging buffer
                    if not has_c:  # C = +0 (matmul without c): nothing to read
                        c_vals.append(zero())
                        continue
                    plgpu.wait_smem_to_gmem(0, wait_read_only=True)  # the last tile's D
                    plgpu.copy_gmem_to_smem(c_gmem.at[rows(h), cols], buf, bar)
                    plgpu.barrier_wait(bar)
                    c_vals.append(buf[...])
                    plgpu.commit_smem()  # every thread has read it before the next copy
                c_vals = tuple(c_vals)
                if interval is None:
                    carry = (c_vals, ())
                else:
                    carry = (tuple(zero(c) for c in c_vals), c_vals)
                chains, totals = eval_pipeline(carry)
                outs = chains if interval is None else totals
                for h in range(2):
                    plgpu.wait_smem_to_gmem(0, wait_read_only=True)
                    buf[...] = outs[h]
                    plgpu.commit_smem()
                    plgpu.copy_smem_to_gmem(buf, o_gmem.at[rows(h), cols])

            pipeline(compute_context)(*tile_refs(mi, ni), allocations=allocs)

        if p.order == "grid":
            one_tile(lax.axis_index("m"), lax.axis_index("n"))
        elif p.order == "snake":
            one_tile(*plgpu.planar_snake(lax.axis_index("t"), tiles, *SNAKE))
        else:
            @plgpu.nd_loop((tiles[0] * tiles[1],), collective_axes="t")
            def _tiles(info):
                (lin,) = info.index if hasattr(info, "index") else info
                one_tile(*plgpu.planar_snake(lin, tiles, *SNAKE))
        plgpu.wait_smem_to_gmem(0, wait_read_only=True)


def sm_count() -> int:
    """Streaming multiprocessors of the default device (132, an H100 SXM's, off a GPU)."""
    return getattr(jax.devices()[0], "core_count", None) or 132


def gemm(a, b, c, p: Plan, *, interpret=None):
    """``D = A @ B + C`` through the Mosaic GPU kernel: (M, K) @ (K, N) + (M, N), M a
    multiple of 128, N of ``p.bn``, K ``p.K``; B given as (N, K) where the format reads it
    K-major (:data:`B_KMAJOR`). ``c=None``: C = +0, not read (a zero C costs the kernel
    a read of M x N accumulators and XLA a write of them). ``interpret``: passed to
    ``plgpu.kernel`` (JAX's GPU interpret mode; ``jaxwarp.emulate`` sets its own)."""
    from jax.experimental.pallas import mosaic_gpu as plgpu  # noqa: PLC0415

    err = api_error()
    if err is not None:
        raise RuntimeError(err)
    kmajor = B_KMAJOR[p.a_format]
    (M, K), N = a.shape, b.shape[0 if kmajor else 1]
    c_shape = None if c is None else c.shape
    if K != p.K or M % BM or N % p.bn or c_shape not in (None, (M, N)):
        raise ValueError(f"native Mosaic GPU gemm: {a.shape} @ {b.shape} + {c_shape} does "
                         f"not fit the plan {p}")
    kwargs = {} if interpret is None else {"interpret": interpret}
    tiles = (M // BM, N // p.bn)
    if p.order == "grid":
        grid, names = tiles, ("m", "n")
    else:  # one CTA a tile, or (persistent) one an SM
        n = tiles[0] * tiles[1]
        grid, names = (n if p.order == "snake" else min(n, sm_count()),), ("t",)
    f = plgpu.kernel(
        functools.partial(_kernel, p=p, has_c=c is not None, tiles=tiles),
        out_type=jax.ShapeDtypeStruct((M, N), ACC_DTYPES[p.accumulator]),
        grid=grid, grid_names=names,
        num_threads=3, thread_name="wg", **kwargs)
    return f(a, b) if c is None else f(a, b, c)


def chain(a_op, b_op, c_acc, a_format: str, accumulator: str,
          promote_every: int | None) -> jax.Array:
    """``matmul``'s k loop in native mode on Mosaic GPU: (M, K) @ (K, N) + C on converted
    operands (tf32: fp32 words already rounded to tf32), rows and columns padded to the
    tile, K never padded; ``c_acc=None`` is C = +0, not read.

    Example:
        >>> a = jnp.ones((8, 32), jnp.bfloat16); b = jnp.ones((32, 8), jnp.bfloat16)
        >>> c = jnp.zeros((8, 8), jnp.float32)
        >>> jax.eval_shape(lambda: chain(a, b, c, "bf16", "f32", None))
        ShapeDtypeStruct(shape=(8, 8), dtype=float32)
    """
    (M, K), N = a_op.shape, b_op.shape[1]
    p = plan(a_format, accumulator, M, K, N, promote_every, config.native_mgpu_tile,
             config.native_mgpu_order)
    Mp, Np = -(-M // BM) * BM, -(-N // p.bn) * p.bn
    if Mp != M:
        a_op = jnp.pad(a_op, ((0, Mp - M), (0, 0)))
    if Np != N:
        b_op = jnp.pad(b_op, ((0, 0), (0, Np - N)))
    if (Mp, Np) != (M, N) and c_acc is not None:
        c_acc = jnp.pad(c_acc, ((0, Mp - M), (0, Np - N)))
    if B_KMAJOR[a_format]:
        b_op = b_op.T
    return gemm(a_op, b_op, c_acc, p)[:M, :N]
