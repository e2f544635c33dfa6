"""Exact ``jaxwarp.mma`` on a batch of tiles as one GPU kernel (Pallas, Triton backend).

``jaxwarp.mma(..., mode="exact")`` computes a chain of instructions for every tile of a
batch, ``(..., m, k) @ (..., k, n) + (..., m, n)``. XLA runs the model's arithmetic
(``datapath.mma``) as a few fusions over the whole batch, storing what passes between
them. This module runs the chain with ``fused_kernel``'s kernel body instead, the
accumulator in registers along k, for the datapaths that kernel models
(``fused_kernel.models``: f16 x f16, bf16 x bf16, tf32 x tf32 and fp8 operands with an
fp32 C and D,
blocks of ``block_k`` products fused with C: sm_90's WMMA, ``mma.sync`` and ``wgmma``,
sm_100 / sm_120's f16 / bf16 ``mma.sync`` and ``tcgen05``, sm_70 to sm_89's f16 / bf16
(blocks of 4 or 8 an instruction) and sm_89's fp8 ``mma.sync``): the same step and
rounding code, on 3-D blocks.

The tiles are flattened to one axis of T (the batch shapes broadcast first), then padded:
m, n and k to powers of two (Triton's arrays have power-of-two sizes; the padding's rows
and columns of D are dropped, and the kernel's k loop stops at the tile's k, so padded k
columns are never read as products), T to a whole number of groups. A kernel instance
takes G tiles' blocks of ``bm`` rows and ``bn`` columns (a tile larger than
:data:`MAX_BLOCK` -- ``wgmma`` m64nN -- is cut into blocks of its independent rows and
columns): A (G, bm, k), B (G, k, bn), C and D (G, bm, bn), G a power of two giving
:data:`OUTPUTS` outputs an instance (the fused GEMM kernel's 32 x 32 with 4 warps), fewer
where the batch is smaller. The operands enter the kernel as they are stored (fp8 one
byte an element: the kernel converts them exactly to fp32), and D leaves it as fp32: no
pass of XLA's before or after it (bf16 / tf32's range check and tf32's low bits cleared
apart) where no shape is padded.

Operand values: f16 and fp8 take the kernel with the IEEE sum of the products (inf and
NaN), one fused multiply-add a product, with no pass over the operands to find out
whether they are finite: ``fused_kernel.chain`` takes one from
``gemm_kernel_any_range_below`` multiply-adds, where a GEMM reads an operand element
many times, but a tile's are read once, so the pass would add about a third to the bytes
read, and the GEMM kernel was bound by its conversions, not by that add (an estimate for
tiles, not yet measured: :func:`chain`'s ``cond=True`` is the other choice). bf16 and
tf32 (fp32's exponents: products may leave its range) take
the general form (any value, no range check) below ``gemm_kernel_any_range_below``
multiply-adds, from there a ``lax.cond`` on ``in_fp32_range`` of the whole batch: the
in-range kernel (the general form ran at a quarter of its speed in the GEMM), else the
general form's -- every branch a Pallas kernel with the model's bits. Small calls
(below ``gemm_kernel_rolled_below`` multiply-adds) loop over a step's products
(``gemm_kernel_unroll_small`` an iteration), as the GEMM does.

What stays on ``datapath.mma``'s XLA ops (``runs`` says no): f64 operands, f16
accumulators (C or D), integer types, satf, ``scale_input_d``, and the datapaths the
kernel does not model -- fp8 ``mma.sync`` on sm_90 / sm_100 (two f16 HMMAs, C added last:
``operand_via``, ``c_mode="end"``), fp8 with F = 25 over 32 terms (sm_100 ``tcgen05``,
sm_120: the int32 sum of a block could overflow), ``c_sub_exp="lead"``, and datapaths
given by ``datapath=`` that differ in the fields ``models`` reads.

:func:`runs` says whether ``jaxwarp.mma`` takes this route (the option
``gemm_fused_kernel``: "auto" on a GPU, "on" also in Pallas' interpreter elsewhere, for
the tests); :func:`mma_chain` is the route; :func:`chain` the kernel on (T, m, k) tiles
with its variants, for measuring.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl

from jaxwarp._src.arithmetic.datapath_blocks import in_fp32_range
from jaxwarp._src.arithmetic.datapath_checks import ChainCfg
from jaxwarp._src.catalogue.arch import Datapath
from jaxwarp._src.config import config
from jaxwarp._src.gemm.kernels import fused_kernel

#: Outputs one kernel instance computes (G tiles' (bm, bn) blocks).
OUTPUTS = 1024
#: The largest block of a tile's rows or columns in one kernel instance.
MAX_BLOCK = 32
#: The kernel's name (in profiles and traces).
KERNEL_NAME = "jaxwarp_fused_exact_tiles"


def runs(cfg: ChainCfg, satf: bool = False, macs: int | None = None) -> bool:
    """Whether exact ``jaxwarp.mma`` runs this chain through the kernel: the option
    ``gemm_fused_kernel`` ("auto": on a GPU, for calls of at least ``gemm_fused_min_macs``
    multiply-adds, ``macs``; "on": every size, also elsewhere, interpreted), an fp32 C and
    D, no satf or ``scale_input_d``, and a datapath that ``fused_kernel.models``. (A small
    call compiles a Triton kernel of its own shape in seconds, where XLA's form of the
    chain compiles in less: the many small calls of a test or a conformance run keep it.)

    Example:
        >>> from jaxwarp._src.arithmetic.datapath_checks import plan_chain
        >>> cfg = plan_chain("f16", "f16", "f32", "f32", "sm_90", "wmma", 16)
        >>> with jaxwarp.config.override(gemm_fused_kernel="on"):
        ...     runs(cfg), runs(plan_chain("f16", "f16", "f16", "f16", "sm_90", "wmma", 16))
        (True, False)
    """
    switch = config.gemm_fused_kernel
    if switch == "off" or (switch == "auto" and (
            jax.default_backend() != "gpu"
            or (macs is not None and macs < config.gemm_fused_min_macs))):
        return False
    return (cfg.dp is not None and not satf and cfg.c_shift == 0 and cfg.d_format == "f32"
            and fused_kernel.models(cfg.dp, cfg.a_format, cfg.b_format, cfg.c_format,
                                    cfg.ik))


def _pow2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def layout(T: int, m: int, n: int, k: int, group: int | None = None,
           block: tuple[int, int] | None = None) -> tuple[int, tuple[int, int], tuple]:
    """The kernel's grouping of T tiles of (m, n, k): (G, (bm, bn), (Tp, mp, np, kp)), the
    padded sizes (m, n, k to powers of two, T to a multiple of G). ``group`` / ``block``:
    G / (bm, bn) (None: :data:`OUTPUTS` outputs an instance, blocks of at most
    :data:`MAX_BLOCK`).

    Example:
        >>> layout(1000, 16, 16, 16)
        (4, (16, 16), (1000, 16, 16, 16))
        >>> layout(5, 64, 24, 48)
        (1, (32, 32), (5, 64, 32, 64))
    """
    mp, np_, kp = _pow2(m), _pow2(n), _pow2(k)
    bm, bn = block or (min(mp, MAX_BLOCK), min(np_, MAX_BLOCK))
    if mp % bm or np_ % bn or bm & (bm - 1) or bn & (bn - 1):
        raise ValueError(f"block={block}: powers of two dividing the padded tile "
                         f"({mp}, {np_})")
    G = group or min(max(OUTPUTS // (bm * bn), 1), _pow2(T))
    if G & (G - 1):
        raise ValueError(f"group={group}: a power of two")
    return G, (bm, bn), (-(-T // G) * G, mp, np_, kp)


def call(a, b, c, plan: fused_kernel.Plan, group: int, block: tuple[int, int], *,
         interpret: bool = False):
    """The kernel on padded tiles: a (T, mp, kp), b (T, kp, np), c (T, mp, np) fp32, T a
    multiple of ``group``, mp / np multiples of ``block``, the tiles' k ``plan.K`` (at most
    kp) -> D (T, mp, np) fp32."""
    from jax.experimental.pallas import triton as pltriton  # noqa: PLC0415

    (T, mp, kp), np_ = a.shape, b.shape[2]
    (bm, bn), G = block, group
    if not interpret:
        fused_kernel.register_triton_rule()
    spec = pl.BlockSpec((G, bm, bn), lambda g, i, j: (g, i, j))
    d = pl.pallas_call(
        functools.partial(fused_kernel.kernel, plan=plan),
        grid=(T // G, mp // bm, np_ // bn),
        in_specs=[pl.BlockSpec((G, bm, kp), lambda g, i, j: (g, i, 0)),
                  pl.BlockSpec((G, kp, bn), lambda g, i, j: (g, 0, j)), spec],
        out_specs=spec,
        out_shape=jax.ShapeDtypeStruct((T, mp, np_), jnp.int32),
        compiler_params=pltriton.CompilerParams(num_warps=plan.num_warps, num_stages=1),
        interpret=interpret,
        name=KERNEL_NAME,
    )(a, b, c)
    return lax.bitcast_convert_type(d, jnp.float32)


_call = jax.jit(call, static_argnames=("plan", "group", "block", "interpret"))


def chain(a, b, c, dp: Datapath, fmt: str, *, b_fmt: str | None = None,
          interpret: bool = False, group: int | None = None,
          block: tuple[int, int] | None = None, num_warps: int | None = None,
          form: str | None = None, finite: bool | None = None, cond: bool | None = None,
          f32_operands: bool = False, unroll: int | None = None):
    """The chain of exact instructions on every tile: a (T, m, k) of ``fmt``, b (T, k, n)
    of ``b_fmt`` (None: ``fmt``), c (T, m, n) fp32 -> D (T, m, n) fp32, k a multiple of
    ``dp.block_k``; ``dp`` one that ``fused_kernel.models``.

    The kernel's variants (the same bits): ``group`` and ``block`` (G tiles' blocks of
    (bm, bn) outputs a kernel instance, powers of two; None: 1024 outputs, blocks of at
    most 32 x 32), ``num_warps`` (None: ``fused_kernel.NUM_WARPS``), ``f32_operands``
    (converted to fp32 before the kernel), ``unroll`` (products written out per iteration
    of a step's loop; None: a loop below ``gemm_kernel_rolled_below`` multiply-adds).
    ``form``: "unrolled" (bf16 / tf32 operands in fp32's range) or, for those, "general"
    (any value; None: "general" for them); ``finite``: f16 / fp8 operands known finite (no
    IEEE sum of the products).
    ``cond`` (with ``form`` None): a ``lax.cond`` on the operands (a pass over them)
    between the faster kernel where they allow it (bf16 / tf32 in fp32's range, f16 / fp8
    finite) and the one for any value; None: for bf16 / tf32 from ``gemm_kernel_any_range_below``
    multiply-adds, for f16 / fp8 never.

    Example:
        >>> dp = jaxwarp.datapath_for("sm_90", "wgmma", "e4m3", 32)
        >>> a = jnp.ones((3, 16, 32), jnp.float8_e4m3fn)
        >>> b = jnp.ones((3, 32, 8), jnp.float8_e5m2)
        >>> chain(a, b, jnp.ones((3, 16, 8)), dp, "e4m3", b_fmt="e5m2", interpret=True)[2, 0, :2]
        Array([33., 33.], dtype=float32)
    """
    (T, m, k), n = a.shape, b.shape[2]
    fmts, ik = fused_kernel.operand_formats(fmt, b_fmt), dp.block_k
    if k % ik or b.shape != (T, k, n) or c.shape != (T, m, n):
        raise ValueError(f"chain: a (T, m, k) {a.shape}, b (T, k, n) {b.shape}, c (T, m, n) "
                         f"{c.shape}, k a multiple of the instruction's k={ik}")
    wide = fmt in fused_kernel.GENERAL  # bf16, tf32: products may leave fp32's range
    if form not in (None, "unrolled", "general") or (form == "general" and not wide):
        raise ValueError(f"chain: form={form!r}: allowed None, 'unrolled', and 'general' "
                         f"for bf16 or tf32 (fmt={fmt!r})")
    if cond and form is not None:
        raise ValueError(f"chain: cond=True chooses the form; got form={form!r}")
    G, (bm, bn), (Tp, mp, np_, kp) = layout(T, m, n, k, group, block)
    macs = Tp * mp * np_ * k
    unroll = fused_kernel.unroll_for(unroll, macs, ik)
    a, b = (fused_kernel.stored(x, f) for x, f in zip((a, b), fmts, strict=True))
    pad = fused_kernel.pad_to
    a, b, c = pad(a, (Tp, mp, kp)), pad(b, (Tp, kp, np_)), pad(c.astype(jnp.float32),
                                                               (Tp, mp, np_))

    def run(form, finite):
        plan = fused_kernel.plan_for(
            dp, fmts, k, finite, (bm, bn), num_warps, form=form,
            f32_operands=f32_operands and form != "general", unroll=unroll)

        def go(a, b, c):
            if form == "general":  # the bit patterns: the kernel decodes them
                a, b = (fused_kernel.operand_bits(x, fmt) for x in (a, b))
            elif plan.f32_operands:
                a, b = a.astype(jnp.float32), b.astype(jnp.float32)
            return _call(a, b, c, plan, G, (bm, bn), interpret=interpret)
        return go

    if cond is None:
        cond = form is None and wide and macs >= config.gemm_kernel_any_range_below
    if cond:  # the faster kernel where the operands allow it, else one for any value
        all_finite = fused_kernel.all_finite
        fast = in_fp32_range(a, b) if wide else all_finite(a) & all_finite(b)
        d = lax.cond(fast, run("unrolled", True), run("general" if wide else "unrolled",
                                                       False), a, b, c)
    else:
        form = form or ("general" if wide else "unrolled")
        d = run(form, form == "unrolled" and (wide or bool(finite)))(a, b, c)
    return d[:T, :m, :n]


def mma_chain(a, b, c, cfg: ChainCfg):
    """``jaxwarp.mma``'s exact chain through :func:`chain` (``runs(cfg)`` true; the
    arguments as ``datapath.check_mma`` returns them): the batch dims broadcast and
    flattened, D (batch..., m, n) fp32. On a GPU the kernel, elsewhere Pallas' interpreter.

    Example:
        >>> from jaxwarp._src.arithmetic.datapath_checks import plan_chain
        >>> cfg = plan_chain("bf16", "bf16", "f32", "f32", "sm_90", "wmma", 16)
        >>> a = jnp.ones((2, 16, 32), jnp.bfloat16)
        >>> mma_chain(a, jnp.ones((32, 16), jnp.bfloat16), jnp.zeros((16, 16)), cfg).shape
        (2, 16, 16)
    """
    (m, k), n = a.shape[-2:], b.shape[-1]
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2], c.shape[:-2])
    T = math.prod(batch)

    def flat(x, rows, cols):
        return jnp.broadcast_to(x, (*batch, rows, cols)).reshape(T, rows, cols)

    d = chain(flat(a, m, k), flat(b, k, n), flat(c, m, n), cfg.dp, cfg.a_format,
              b_fmt=cfg.b_format, interpret=jax.default_backend() != "gpu")
    return d.reshape(*batch, m, n)
