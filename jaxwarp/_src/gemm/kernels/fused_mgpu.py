"""The exact datapath as one GPU kernel per output tile on Pallas' Mosaic GPU backend.

The same chain of sm_90 f16 / bf16 instructions (k = 16 each, fp32 C and D) as
``fused_kernel`` (Pallas' Triton backend, which JAX 0.11 deprecates), with the same bits
for the operands that kernel's in-range form takes (f16 of any value; bf16 whose every
product is a normal fp32 number), in its ``finite`` and non-finite variants: the exact
fp32 products, the block exponent E from a maximum of products of the operands' powers of
two, the terms and C truncated toward zero on the grid of ``2**(E - F)`` and summed in
int32, the sum cut to 24 bits toward zero and scaled back (``fused_kernel``'s module
docstring has the arithmetic; the kernel calls its :func:`fused_kernel.finish` and
:func:`fused_kernel.pow_of`).

Structure (:func:`gemm`): ``plgpu.kernel`` over a grid of (bm, bn) output tiles, in one of
two pipelines (:attr:`Plan.pipeline`). "plain" (the default): one warpgroup a CTA
(``plgpu.emit_pipeline`` with the accumulator as its carry) issues TMA copies of A's and
B's (bk, bm) / (bk, bn) blocks into a ring of ``stages`` shared-memory buffers (A passed
transposed, (K, M), so that a column of A is a contiguous row of the block) and computes
its (wm, bn) tile; ptxas chooses its registers, and several CTAs share an SM, every warp
of them computing. "specialized": ``wgs + 1`` warpgroups a tile
(``plgpu.emit_pipeline_warp_specialized``), one issuing the copies and ``wgs`` compute
warpgroups each holding a (wm, bn) slice of the tile, rows ``wg * wm ..``; the register
budget is split between them (``memory_registers`` for the TMA warpgroup, the rest of the
64K among the compute warpgroups: 232 a thread for 2, 152 for 3, 112 for 4), which on an
H100 left one CTA an SM with 8 computing warps (the plain pipeline ran 2.3x faster:
``benchmarks/fused_mgpu.py --variants``). A warpgroup's tile is an fp32 accumulator in
registers (``Layout.WGMMA``: a (64, 8) tile is 2 x 2 values a thread, ``wm * bn / 128``
values a thread). Per instruction (``bk / 16`` of them a k block) the 16 outer-product
steps are register-array arithmetic: A's column i is read from shared memory as a (wm,)
vector in ``Layout.WGMMA.reduce(1)`` (each thread loads the 2 rows it owns), B's row i as a
(bn,) vector in ``Layout.WGMMA.reduce(0)`` (each thread its ``bn / 4`` columns), and
``lax.broadcast_in_dim`` makes them (wm, bn) arrays in ``Layout.WGMMA`` without moving
data: the broadcast is the same registers. The operands' powers of two (``pow_of``) are
formed on the vectors (``2 + bn / 4`` a thread, not ``wm * bn / 128``), then broadcast and
multiplied. C comes in as its fp32 bits through a shared-memory staging buffer (TMA, then
a load in ``Layout.WGMMA``), D's bits go out through the same buffer, NaNs with the
datapath's NaN bits. Settings for speed, all of the same bits (:func:`plan`): the
pipeline, the tile (``wm``, ``bn``, ``wgs``), the k block and stages, the registers, fp32
operands in shared memory, and ``int_terms``: the terms of some of an instruction's
products truncated by integer operations (:func:`trunc_by_bits`) so that the integer pipe
shares the conversion pipe's work (the Triton kernel's bound).

Exact ``matmul`` reaches this kernel through :func:`by_option` (the option
``gemm_kernel_backend``), which is ``fused_kernel.chain`` unless the option says
"mosaic_gpu".

Lowering (JAX 0.10.2 and 0.11, ``lowering.py`` of ``jax._src.pallas.mosaic_gpu``): the
kernel asks for Lane semantics (JAX 0.10's default; 0.11's is Warpgroup), where all it needs
lowers: bitcasts, and / or / xor, shifts (logical right ``arith.shrui``), ``lax.clz``
(``math.ctlz``), comparisons, ``select_n`` with scalar cases (splat), integer and float
maximum, ``broadcast_in_dim`` from a reduced ``TiledLayout``, and fp32 -> int32 as
``fptosi`` alone (no clamp, unlike the Warpgroup semantics' rule). ``fused_kernel``'s
one-conversion primitive ``trunc_i32_p`` gets a Lane rule here (:func:`register_mosaic_rule`).
The vectors are read with ``ref[...]`` followed by ``plgpu.layout_cast`` (the lowering
takes the cast as the load's layout) rather than ``plgpu.load(..., layout=)``: JAX 0.10.2's
GPU interpret mode has no rule for ``plgpu.load`` (its abstract evaluation fails on a
value), and ``ref[...]`` lowers to the same load. One thing lowers but computes another
value than on the CPU: a bitcast from int32 to uint32 leaves the array signed
(``FragmentedArray.bitcast`` returns it unchanged for the same MLIR type), so its
conversion to fp32 is ``arith.sitofp`` -- the Triton kernel's ``rounding="float"``, which
converts the 24 kept bits from uint32, would be wrong for sums of 2**31 and more; this
kernel takes ``rounding="int"`` (:class:`Plan`).

Off the GPU the kernel runs unchanged under ``jaxwarp.emulate(fn, arch="sm_90a")`` (JAX's
GPU interpret mode, ``layout_cast`` the identity), which checks its bits against
``matmul(mode="exact")`` on a CPU. Outside ``emulate`` a CPU cannot run it (JAX: "Only
interpret mode is supported on CPU backend"). On an H100 (4096^3) it runs at 0.88 (bf16)
and 0.69 (f16) of the Triton kernel's speed, so the option ``gemm_kernel_backend`` keeps
the Triton kernel on "auto" where JAX has it.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax import lax

from jaxwarp._src.config import config
from jaxwarp._src.gemm.kernels import fused_kernel, native_mgpu

#: The operand formats the kernel takes (both operands the same): the Triton kernel's f16
#: and bf16 (its fp8 and tf32 forms are not written here).
FORMATS = ("bf16", "f16")
#: The instruction k.
IK = fused_kernel.IK
#: Rows of one ``Layout.WGMMA`` row block.
WG_ROWS = 64
#: Elements of a TMA copy along each dimension at most (Mosaic GPU's async copies).
TMA_BOX = 256
#: Shared memory a block may use (H100: 227 KiB), less room for the pipeline's barriers.
SMEM_BYTES = 224 * 1024
#: What the kernel needs from ``jax.experimental.pallas.mosaic_gpu``.
API = ("kernel", "emit_pipeline", "emit_pipeline_warp_specialized", "BlockSpec",
       "TilingTransform", "SwizzleTransform", "find_swizzle", "SMEM", "Barrier",
       "copy_gmem_to_smem", "barrier_wait", "commit_smem", "copy_smem_to_gmem", "wait_smem_to_gmem",
       "layout_cast", "Layout")


def api_error() -> str | None:
    """Why the installed JAX cannot build the kernel, or None if it can.

    Example:
        >>> api_error() is None or "Mosaic GPU" in api_error()
        True
    """
    def has_reduce():
        from jax.experimental.pallas import mosaic_gpu as plgpu  # noqa: PLC0415

        return not hasattr(plgpu, "Layout") or hasattr(plgpu.Layout.WGMMA, "reduce")

    def has_semantics():
        from jax.experimental.mosaic import gpu as mgpu  # noqa: PLC0415

        return hasattr(mgpu, "LoweringSemantics")

    return native_mgpu.api_gaps("the exact kernel", API, {
        "plgpu.Layout.WGMMA.reduce": has_reduce, "mosaic.gpu.LoweringSemantics": has_semantics})


@functools.cache
def register_mosaic_rule() -> None:
    """Adds ``fused_kernel.trunc_i32_p`` (fp32 -> int32 toward zero, one conversion) to
    Mosaic GPU's Lane-semantics lowering rules (once): ``FragmentedArray.astype`` to a
    signed int32 is ``arith.fptosi`` alone."""
    from jax._src.lib.mlir import ir  # noqa: PLC0415 (GPU lowering only)
    from jax._src.pallas.mosaic_gpu import lowering  # noqa: PLC0415
    from jax.experimental.mosaic import gpu as mgpu  # noqa: PLC0415

    def rule(ctx, x):
        del ctx
        return x.astype(ir.IntegerType.get_signless(32), is_signed=True)

    lowering.register_lowering_rule(fused_kernel.trunc_i32_p,
                                    mgpu.LoweringSemantics.Lane)(rule)


#: :attr:`Plan.pipeline`'s values.
PIPELINES = ("specialized", "plain")

#: Defaults of :func:`plan` and :class:`Plan`: the tile and pipeline, the fastest of the
#: settings ``benchmarks/fused_mgpu.py --variants`` timed on an H100 (one warpgroup a CTA,
#: a (64, 16) tile, k blocks of 32 through 4 stages); ``WGS`` is the warp-specialized
#: pipeline's compute warpgroups (the plain one has one).
WM, BN, WGS, BK, STAGES, MEMORY_REGISTERS, PIPELINE = 64, 16, 2, 32, 4, 40, "plain"


@dataclasses.dataclass(frozen=True)
class Plan:
    """Static shape of one kernel: operand format, K, the datapath's F and NaN bits,
    ``finite`` (every operand known finite: no IEEE sum of the products), and the
    Mosaic GPU settings (:func:`plan` has the defaults)."""

    fmt: str
    K: int
    F: int
    nan_bits: int
    finite: bool
    #: Rows of each compute warpgroup's slice (a multiple of 64).
    wm: int = WM
    #: Columns of the tile (a multiple of 8).
    bn: int = BN
    #: Compute warpgroups a tile (the tile is (wgs * wm, bn)): 1 in the plain pipeline.
    wgs: int = 1
    #: k of one pipeline step (a multiple of 16 dividing K).
    bk: int = BK
    #: Shared-memory buffers of the operand ring.
    stages: int = STAGES
    #: Registers a thread of the TMA warpgroup (the compute warpgroups share the rest).
    memory_registers: int = MEMORY_REGISTERS
    #: ``fused_kernel.Plan.rounding``: "int" alone (the rounded sum by integer operations
    #: on its bits). "float" converts the kept 24 bits to fp32 from uint32, which Mosaic
    #: GPU lowers as a signed conversion (JAX 0.10.2 and 0.11: ``FragmentedArray.bitcast``
    #: from int32 to uint32 returns the array unchanged, signed, so ``astype(float32)``
    #: is ``arith.sitofp``): a wrong value for a magnitude of 2**31 or more.
    rounding: str = "int"
    #: The operands passed (and held in shared memory) as fp32: twice the bytes, no
    #: conversion of the loaded vectors (the Triton kernel's ``f32_operands``).
    f32_operands: bool = False
    #: Products of an instruction (the last ones) whose term is truncated by integer
    #: operations (:func:`trunc_by_bits`, about 11 on the integer pipe) instead of one
    #: fp32 -> int32 conversion: the conversion pipe bounds the Triton kernel, and the
    #: two pipes run side by side (the same bits either way).
    int_terms: int = 0
    #: "specialized": ``wgs`` compute warpgroups and one that issues the TMA copies, the
    #: registers split between them (``emit_pipeline_warp_specialized``); "plain": one
    #: warpgroup a CTA (``wgs`` 1) that issues its copies and computes
    #: (``plgpu.emit_pipeline``), its registers ptxas's choice, so that several CTAs share
    #: an SM and every warp on it computes.
    pipeline: str = PIPELINE

    def __post_init__(self):
        if not 0 <= self.int_terms <= IK:
            raise ValueError(f"fused Mosaic GPU kernel: int_terms={self.int_terms}; allowed "
                             f"0 to {IK}")
        if self.pipeline not in PIPELINES:
            raise ValueError(f"fused Mosaic GPU kernel: pipeline={self.pipeline!r}; allowed: "
                             f"{PIPELINES}")
        if self.plain and self.wgs != 1:
            raise ValueError(f"fused Mosaic GPU kernel: pipeline='plain' takes wgs=1 (one "
                             f"warpgroup a CTA), got wgs={self.wgs}")
        if self.rounding != "int":
            raise ValueError(f"fused Mosaic GPU kernel: rounding={self.rounding!r}; allowed: "
                             f"'int' (see Plan.rounding)")

    @property
    def bm(self) -> int:
        return self.wgs * self.wm

    @property
    def plain(self) -> bool:
        """The plain pipeline (one warpgroup a CTA), not the warp-specialized one."""
        return self.pipeline == "plain"

    def arithmetic(self) -> fused_kernel.Plan:
        """The Triton kernel's plan whose fields :func:`fused_kernel.finish` reads."""
        return fused_kernel.Plan(self.fmt, self.K, self.F, self.nan_bits, self.finite,
                                 rounding=self.rounding)


def plan(fmt: str, K: int, F: int, nan_bits: int, finite: bool, *, wm: int | None = None,
         bn: int | None = None, wgs: int | None = None, bk: int | None = None,
         stages: int | None = None, memory_registers: int | None = None,
         rounding: str = "int", f32_operands: bool = False, int_terms: int = 0,
         pipeline: str = PIPELINE, N: int | None = None) -> Plan:
    """The kernel for a product of K (a multiple of 16): the k block the largest of
    ``bk``, 32, 16 that divides K; the tile no wider than N needs.

    Example:
        >>> p = plan("bf16", 4096, 25, 0x7FFFFFFF, True)
        >>> (p.pipeline, p.bm, p.bn, p.bk, p.stages)
        ('plain', 64, 16, 32, 4)
        >>> plan("f16", 48, 25, 0x7FFFFFFF, False, N=8).bk
        16
    """
    if fmt not in FORMATS:
        raise ValueError(f"fused Mosaic GPU kernel: fmt={fmt!r}; allowed: {FORMATS}")
    if K % IK or K <= 0:
        raise ValueError(f"fused Mosaic GPU kernel: K={K} must be a positive multiple of {IK}")
    wm, bn = wm or WM, bn or BN
    wgs = wgs or (1 if pipeline == "plain" else WGS)
    bk = bk or BK
    if wm % WG_ROWS or bn % 8 or bk % IK or wgs < 1:
        raise ValueError(f"fused Mosaic GPU kernel: wm={wm} (a multiple of {WG_ROWS}), "
                         f"bn={bn} (of 8), bk={bk} (of {IK}), wgs={wgs} (>= 1)")
    if wgs * wm > TMA_BOX or bn > TMA_BOX or wgs + 1 > 8:
        raise ValueError(f"fused Mosaic GPU kernel: a tile of wgs * wm = {wgs * wm} rows and "
                         f"bn = {bn} columns (at most {TMA_BOX} each: one TMA copy a block), "
                         f"wgs={wgs} (at most 7 compute warpgroups)")
    while K % bk:
        bk //= 2
    bk = max(bk, IK) if K % max(bk, IK) == 0 else IK
    while N is not None and bn > 8 and bn // 2 >= N:
        bn //= 2
    stages = max(1, min(stages or STAGES, K // bk))
    smem = stages * bk * (wgs * wm + bn) * (4 if f32_operands else 2) + wgs * wm * bn * 4
    if smem > SMEM_BYTES:
        raise ValueError(f"fused Mosaic GPU kernel: {stages} stages of ({bk}, {wgs * wm} + "
                         f"{bn}) operands and the C / D staging take {smem} bytes of shared "
                         f"memory (at most {SMEM_BYTES})")
    return Plan(fmt, K, F, nan_bits, finite, wm, bn, wgs, bk, stages,
                memory_registers or MEMORY_REGISTERS, rounding, f32_operands, int_terms,
                pipeline)


def trunc_by_bits(x):
    """fp32 x (|x| < 2**27) -> int32 toward zero by integer operations on its bits (no
    conversion: the integer pipe, beside the conversion pipe's ``trunc_f32``): the
    significand with its leading 1 at bit 30, shifted right by ``157 - exponent field``
    (31 at most: below 1, a zero), negated for a negative x. (About 11 integer operations
    where ``trunc_f32`` is one conversion.)

    Example:
        >>> trunc_by_bits(jnp.array([-3.5, 2.0 ** 26 + 8, 0.75, -0.0, 1e-40], jnp.float32))
        Array([       -3, 67108872,        0,        0,        0], dtype=int32)
    """
    xb = lax.bitcast_convert_type(x, jnp.int32)
    m = ((xb << 7) & 0x3FFFFF80) | 0x40000000
    # (the shift kept in 0 .. 31 for an inf or NaN x too: its term is discarded, but an
    # LLVM shift past the width is poison)
    mag = lax.shift_right_logical(m, jnp.clip(157 - ((xb >> 23) & 0xFF), 0, 31))
    s = xb >> 31
    return (mag ^ s) - s


def _step(col, row, c, p: Plan, arith: fused_kernel.Plan):
    """One instruction: ``col(i)`` A's column i as a (wm,) fp32 vector, ``row(i)`` B's
    row i as a (bn,) vector, ``bcast(v, dim)`` (below) -> D from the accumulator c
    (wm, bn); ``fused_kernel._step``'s passes and order: the maximum of the products of
    the powers of two and (not ``finite``) the IEEE sum from C, then the terms
    ``int32((a * b) * 2**(F - E))`` summed in order from the first."""
    from jax.experimental.pallas import mosaic_gpu as plgpu  # noqa: PLC0415

    shape = c.shape

    def bcast(v, dim):  # (wm,) / (bn,) -> (wm, bn): the registers the thread holds already
        return plgpu.layout_cast(lax.broadcast_in_dim(v, shape, (dim,)), plgpu.Layout.WGMMA)

    def product(i):
        return bcast(col(i), 0) * bcast(row(i), 1)

    wmax, sp = None, c
    for i in range(IK):
        w = bcast(fused_kernel.pow_of(col(i), p.fmt), 0) * bcast(
            fused_kernel.pow_of(row(i), p.fmt), 1)  # 2**(ea + eb), exact
        wmax = w if wmax is None else jnp.maximum(wmax, w)
        if not p.finite:
            sp = sp + product(i)  # NaN / +-inf exactly when the block result is

    def terms(scale):
        s = None
        for i in range(IK):
            x = product(i) * scale
            t = (fused_kernel.trunc_f32(x) if i < IK - p.int_terms else trunc_by_bits(x))
            s = t if s is None else s + t
        return s

    return fused_kernel.finish(c, wmax, terms, sp, arith)


def _kernel(at_gmem, b_gmem, c_gmem, o_gmem, *, p: Plan):
    from jax.experimental import pallas as pl  # noqa: PLC0415
    from jax.experimental.pallas import mosaic_gpu as plgpu  # noqa: PLC0415

    bm, bn, bk, wm = p.bm, p.bn, p.bk, p.wm
    mi, ni = lax.axis_index("m"), lax.axis_index("n")
    arith = p.arithmetic()
    swizzle = plgpu.find_swizzle(bn * 32)  # C / D staging rows: bn 32-bit words
    stage_tf = (plgpu.TilingTransform((8, swizzle // 4)), plgpu.SwizzleTransform(swizzle))
    at_spec = plgpu.BlockSpec((bk, bm), lambda k: (k, 0))
    b_spec = plgpu.BlockSpec((bk, bn), lambda k: (k, 0))
    row_layout, col_layout = plgpu.Layout.WGMMA.reduce(1), plgpu.Layout.WGMMA.reduce(0)

    plain = p.plain

    def body(idxs, at_smem, b_smem, c):
        del idxs
        rows = pl.ds(0 if plain else lax.axis_index("wg") * wm, wm)
        for j in range(bk // IK):  # the block's instructions, ascending k
            def col(i, j=j):  # A's column: a row of A's transposed block (ref[...] + cast)
                return plgpu.layout_cast(at_smem[j * IK + i, rows],
                                         row_layout).astype(jnp.float32)

            def row(i, j=j):
                return plgpu.layout_cast(b_smem[j * IK + i, :], col_layout).astype(jnp.float32)

            c = _step(col, row, c, p, arith)
        return c

    def pipeline(compute_context):
        return plgpu.emit_pipeline_warp_specialized(
            body, grid=(p.K // bk,), memory_registers=p.memory_registers,
            in_specs=[at_spec, b_spec], wg_axis="wg", num_compute_wgs=p.wgs,
            max_concurrent_steps=p.stages, compute_context=compute_context)

    at_tile = at_gmem.at[:, pl.ds(mi * bm, bm)]
    b_tile = b_gmem.at[:, pl.ds(ni * bn, bn)]
    nan = p.nan_bits - (1 << 32) if p.nan_bits >= 1 << 31 else p.nan_bits

    def through(buf, bar, tile, run):
        """C's bits in through ``buf``, ``run(c)``, D's out the same way (NaN bits)."""
        plgpu.copy_gmem_to_smem(c_gmem.at[tile], buf, bar)
        plgpu.barrier_wait(bar)
        c = lax.bitcast_convert_type(buf[...], jnp.float32)
        plgpu.commit_smem()  # every thread has read C before D is written over it
        bits = lax.bitcast_convert_type(run(c), jnp.int32)
        buf[...] = jnp.where((bits & 0x7FFFFFFF) > 0x7F800000, jnp.int32(nan), bits)
        plgpu.commit_smem()
        plgpu.copy_smem_to_gmem(buf, o_gmem.at[tile])
        plgpu.wait_smem_to_gmem(0, wait_read_only=True)

    if plain:
        @functools.partial(pl.run_scoped,
                           stage=plgpu.SMEM((wm, bn), jnp.int32, transforms=stage_tf),
                           barrier=plgpu.Barrier(num_barriers=1))
        def _plain(stage, barrier):
            def run(c):
                return plgpu.emit_pipeline(
                    body, grid=(p.K // bk,), in_specs=[at_spec, b_spec],
                    max_concurrent_steps=p.stages, init_carry=c)(at_tile, b_tile)

            through(stage, barrier.at[0], (pl.ds(mi * bm, bm), pl.ds(ni * bn, bn)), run)
        return

    @functools.partial(
        pl.run_scoped,
        allocs=pipeline(lambda _: None).get_allocations(at_tile, b_tile),
        stage=plgpu.SMEM((p.wgs, wm, bn), jnp.int32, transforms=stage_tf),
        barrier=plgpu.Barrier(num_barriers=p.wgs),
        collective_axes="wg",
    )
    def _scope(allocs, stage, barrier):
        def compute_context(eval_pipeline):
            wg = lax.axis_index("wg")
            tile = (pl.ds(mi * bm + wg * wm, wm), pl.ds(ni * bn, bn))
            through(stage.at[wg], barrier.at[wg], tile, eval_pipeline)

        pipeline(compute_context)(at_tile, b_tile, allocations=allocs)


def gemm(a, b, c, p: Plan):
    """``D = A @ B + C`` as the chain of exact instructions on Mosaic GPU: (M, K) @ (K, N) +
    (M, N) fp32, M a multiple of ``p.bm``, N of ``p.bn``, K ``p.K`` -> fp32 D.

    Example:
        >>> a = jnp.ones((128, 16), jnp.bfloat16)
        >>> p = plan("bf16", 16, 25, 0x7FFFFFFF, True)
        >>> jax.eval_shape(lambda: gemm(a, a.T[:, :32], jnp.zeros((128, 32)), p))
        ShapeDtypeStruct(shape=(128, 32), dtype=float32)
    """
    from jax.experimental.pallas import mosaic_gpu as plgpu  # noqa: PLC0415

    err = api_error()
    if err is not None:
        raise RuntimeError(err)
    (M, K), N = a.shape, b.shape[1]
    if K != p.K or b.shape[0] != K or M % p.bm or N % p.bn or c.shape != (M, N):
        raise ValueError(f"fused Mosaic GPU gemm: {a.shape} @ {b.shape} + {c.shape} does not "
                         f"fit the plan {p}")
    register_mosaic_rule()
    dt = jnp.float32 if p.f32_operands else jnp.float16 if p.fmt == "f16" else jnp.bfloat16
    threads = {} if p.plain else dict(num_threads=p.wgs + 1, thread_name="wg")
    f = plgpu.kernel(
        functools.partial(_kernel, p=p),
        out_type=jax.ShapeDtypeStruct((M, N), jnp.int32),
        grid=(M // p.bm, N // p.bn), grid_names=("m", "n"), **threads,
        # Lane semantics, named: JAX 0.10's default, not JAX 0.11's (Warpgroup, where
        # trunc_i32_p has no rule: "Unimplemented primitive", on an H100 with 0.11.2)
        compiler_params=plgpu.CompilerParams(lowering_semantics=plgpu.LoweringSemantics.Lane))
    d = f(a.astype(dt).T, b.astype(dt),
          lax.bitcast_convert_type(c.astype(jnp.float32), jnp.int32))
    return lax.bitcast_convert_type(d, jnp.float32)


_gemm = jax.jit(gemm, static_argnames=("p",))


def chain(a, b, c, dp, fmt: str, *, finite: bool | None = None, **settings):
    """``fused_kernel.chain``'s in-range kernel on Mosaic GPU: (M, K) @ (K, N) + C (M, N)
    fp32, any M, N, K a multiple of 16 (M and N padded with zeros to the tile); ``dp`` the
    datapath (its F and NaN bits). ``finite``: the operands are known finite (True),
    known not to be (False), or None: a ``lax.cond`` on whether they are. bf16 operands
    must be in fp32's range (the caller's cond). ``settings``: :func:`plan`'s.

    Example:
        >>> dp = jaxwarp.datapath_for("sm_90", "wgmma", "f16", 16)
        >>> a = jnp.full((8, 16), 3.0, jnp.float16)
        >>> jax.eval_shape(lambda: chain(a, a.T, jnp.ones((8, 8)), dp, "f16"))
        ShapeDtypeStruct(shape=(8, 8), dtype=float32)
    """
    (M, K), N = a.shape, b.shape[1]
    why = unmodelled(dp, fmt)
    if why is not None:
        raise ValueError(f"fused Mosaic GPU kernel: {why}")
    p0 = plan(fmt, K, dp.F, dp.nan_f32, True, N=N, **settings)
    Mp, Np = -(-M // p0.bm) * p0.bm, -(-N // p0.bn) * p0.bn
    pad = fused_kernel.pad_to
    a, b, c = pad(a, (Mp, K)), pad(b, (K, Np)), pad(c, (Mp, Np))

    def run(fin):
        return lambda a, b, c: _gemm(a, b, c, dataclasses.replace(p0, finite=fin))

    if finite is None:
        d = lax.cond(fused_kernel.all_finite(a) & fused_kernel.all_finite(b), run(True),
                     run(False), a, b, c)
    else:
        d = run(finite)(a, b, c)
    return d[:M, :N]



def unmodelled(dp, fmt: str, b_fmt: str | None = None) -> str | None:
    """Why this kernel does not compute the chain of ``dp`` on these operand formats, or
    None where it does: f16 or bf16 (both the same), sm_90's blocks of 16 products fused
    with C, 24 bits kept (the Triton kernel models more: ``fused_kernel.models``).

    Example:
        >>> unmodelled(jaxwarp.datapath_for("sm_90", "wgmma", "bf16", 16), "bf16") is None
        True
        >>> unmodelled(jaxwarp.datapath_for("sm_80", "wmma", "bf16", 16), "bf16")
        "a datapath of blocks of 8 products keeping 24 bits (this kernel models sm_90's: ...)"
    """
    if fmt not in FORMATS or b_fmt not in (None, fmt):
        return (f"operand formats {fmt!r} x {b_fmt or fmt!r} (allowed: the same format, "
                f"one of {FORMATS})")
    if dp.block_k != IK or dp.sum_mbits != 23 or not fused_kernel.models(dp, fmt, fmt, "f32",
                                                                         IK):
        return (f"a datapath of blocks of {dp.block_k} products keeping {dp.sum_mbits + 1} "
                f"bits (this kernel models sm_90's: blocks of {IK}, 24 bits kept)")
    return None


def backend() -> str:
    """The Pallas backend of the fused exact kernel that the option ``gemm_kernel_backend``
    gives on the installed JAX: "triton" or "mosaic_gpu" as named; "auto", Triton (the
    faster on an H100) where JAX has its backend, else Mosaic GPU.

    Example:
        >>> with jaxwarp.config.override(gemm_kernel_backend="mosaic_gpu"):
        ...     backend()
        'mosaic_gpu'
    """
    choice = config.gemm_kernel_backend
    if choice == "auto":
        return "mosaic_gpu" if native_mgpu.triton_missing() else "triton"
    return choice


def option_runs(dp, fmt: str, b_fmt: str | None = None, promoted: bool = False) -> bool:
    """Whether the kernel that :func:`backend` gives runs a product whose chain (``dp``)
    the Triton kernel models: the Triton kernel, where the installed JAX has it; under
    "auto" on a JAX without it, this kernel where it models the chain (no promotion) and
    the Mosaic GPU API is there; "mosaic_gpu", always (:func:`by_option`'s error names
    the option where it cannot).

    Example:
        >>> dp = jaxwarp.datapath_for("sm_80", "mma_sync", "bf16", 16)
        >>> with jaxwarp.config.override(gemm_kernel_backend="mosaic_gpu"):
        ...     option_runs(dp, "bf16")
        True
    """
    if backend() == "triton":
        return not native_mgpu.triton_missing()
    if config.gemm_kernel_backend == "mosaic_gpu":
        return True
    return not promoted and why_not(dp, fmt, b_fmt) is None


def why_not(dp, fmt: str, b_fmt: str | None = None, form: str | None = None) -> str | None:
    """Why this kernel cannot run the chain of ``dp`` on these operands (``form``: the
    Triton kernel's form that was asked for) on the installed JAX, or None where it can.

    Example:
        >>> dp = jaxwarp.datapath_for("sm_90", "wgmma", "bf16", 16)
        >>> why_not(dp, "bf16", form="split")
        "form='split' is a Triton kernel setting"
    """
    why = api_error()
    if form == "general":
        return ("bf16 operands of any value (form='general') are the Triton kernel's alone; "
                "the Mosaic GPU kernel takes f16, and bf16 in fp32's range (exact matmul "
                "puts bf16 products under a range check and a cond for it)")
    if why is None and form is not None:
        return f"form={form!r} is a Triton kernel setting"
    return why if why is not None else unmodelled(dp, fmt, b_fmt)


def by_option(a, b, c, dp, fmt: str, *, finite: bool | None = None, form: str | None = None,
              b_fmt: str | None = None, interpret: bool = False):
    """The fused exact kernel of the Pallas backend that the option
    ``gemm_kernel_backend`` gives (:func:`backend`), with ``fused_kernel.chain``'s
    arguments (what exact ``matmul`` calls): Triton, ``fused_kernel.chain``; Mosaic GPU,
    this kernel, or a ValueError naming the option where it cannot run the product (bf16
    operands of any value, ``form="general"``; a JAX without the API). ``interpret``
    (off the GPU): the Triton kernel in Pallas' interpreter; this kernel has no such
    switch (it runs off the GPU under ``jaxwarp.emulate`` alone).

    Example:
        >>> dp = jaxwarp.datapath_for("sm_90", "wgmma", "bf16", 16)
        >>> a = jnp.ones((64, 32), jnp.bfloat16)
        >>> with jaxwarp.config.override(gemm_kernel_backend="mosaic_gpu"):
        ...     by_option(a, a.T, jnp.zeros((64, 64)), dp, "bf16", form="general")
        Traceback (most recent call last):
        ValueError: gemm_kernel_backend='mosaic_gpu' (the Mosaic GPU kernel) cannot run ...
    """
    if backend() == "triton":
        return fused_kernel.chain(a, b, c, dp, fmt, finite=finite, form=form, b_fmt=b_fmt,
                                  interpret=interpret)
    why = why_not(dp, fmt, b_fmt, form)
    if why is not None:
        raise ValueError(f"gemm_kernel_backend={config.gemm_kernel_backend!r} (the Mosaic GPU "
                         f"kernel) cannot run this product: {why}")
    return chain(a, b, c, dp, fmt, finite=finite)
