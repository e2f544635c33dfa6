"""A tiled matrix product through the emulated tensor core.

`matmul` is a GEMM kernel: every output tile starts from its C tile (or zero) and a loop
over k chains the accumulator through one tensor-core instruction per step, one (m, n, k)
tile at a time (the CUDA guide's WMMA kernel; ``tiled`` runs the loop, with
DeepSeek-V3's promotion). This module holds the argument checks, the operand conversion,
the gradients and the public ``matmul``; the instruction tables and the tile chosen per
target are ``matmul_tiles``'s, the fp8 scales (per tensor and per block) ``matmul_scales``'s.

Instructions (``instruction=``): ``"wmma"`` (``nvcuda::wmma::mma_sync``; f16,
bf16, tf32, f64), ``"mma_sync"`` (PTX ``mma.sync.aligned.m16n8kK``; f16, bf16,
tf32, e4m3, e5m2) and ``"wgmma"`` (PTX ``wgmma.mma_async`` m64nNkK; f16, bf16,
tf32, e4m3, e5m2). They differ in their arithmetic on an H100 (sm_90): fp8
``wgmma`` fuses the 32 products of an instruction and the accumulator with only 13
alignment bits and keeps a 14-bit significand; fp8 ``mma.sync`` runs as two f16
HMMAs from zero followed by an fp32 ``FADD`` of C (see ``datapath.py``).

Operands are first converted to the operand format the way a CUDA program
does: ``__float2half_rn`` for f16, ``__float2bfloat16_rn`` for bf16,
``__float_to_tf32`` (nearest, ties away) for tf32, and for e4m3 / e5m2
``cvt.rn.satfinite`` (``__nv_cvt_float_to_fp8(x, __NV_SATFINITE, ...)``: round to
nearest even, beyond the largest finite value -- 448 for e4m3, 57344 for e5m2,
infinities included -- becomes that value, NaN stays NaN), after dividing by the
per-tensor scale when one is given (``matmul_scales`` says how the scales are applied).

Gradients: the conversions are treated as the identity (straight-through
estimator) and the backward products ``dA = dD @ B^T`` and ``dB = A^T @ dD`` go
through the same emulated tensor core (operands converted again, as a
mixed-precision backward pass on a GPU would), ``dC = dD``. With fp8 operands each
backward operand X gets a current per-tensor power-of-two scale ``2**-k``, ``k`` the
largest integer with ``amax(|X|) * 2**k <= max_finite`` (clamped to +-126; 0 where the
amax is 0 or not finite)::

    qX = fp8_satfinite_rn(rn32(X * 2**kX))        # same for Y with kY
    dX = rn(T * 2**-(kX + kY))                    # T the chain of qX @ qY from zero;
                                                  # rounded once to the accumulator

Both scalings are computed on the bits (``numerics.scaling.times_pow2``), so the
gradients' bits are the same on every backend (no float division, no flushed
subnormal). The backward products keep the forward's (a, b) format pairing, and the
scales ``a_scale``, ``b_scale`` get zero gradients (they choose the representation, not
the value).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from jaxwarp._src import checks
from jaxwarp._src.arithmetic import datapath
from jaxwarp._src.arithmetic.datapath_blocks import in_fp32_range
from jaxwarp._src.catalogue import wmma_table
from jaxwarp._src.catalogue.arch import check_target, parse_target
from jaxwarp._src.catalogue.isa import FP8_TYPES
from jaxwarp._src.config import config, keyed_jit
from jaxwarp._src.gemm import k_loop, matmul_sparse, mfma_gemm, native
from jaxwarp._src.gemm.kernels import fused_fp8, fused_kernel, fused_mgpu, fused_tiles
from jaxwarp._src.gemm.matmul_scales import check_scales, epilogue, promote
from jaxwarp._src.gemm.matmul_tiles import (
    ACC_DTYPE,
    ACCUMULATORS,
    DEFAULT_INSTRUCTION,
    INSTRUCTIONS,
    OPERAND_FORMATS,
    PADDED,
    TILES,
    Cfg,
    default_arch,
    default_tile,
    issue_arch,
    tiles_text,
)
from jaxwarp._src.numerics import convert, formats, fp8_intrinsics
from jaxwarp._src.scaling import blockwise
from jaxwarp._src.scaling.tensor_scale import (
    divide_rn,
    multiply_rn,
    tensor_scale_exponent,
    times_pow2,
)

# --- The k loop over the whole output, and the choice of its backend.


def _fused_datapath(cfg: Cfg, k: int, scales, macs: int):
    """The datapath of this product's instructions if the fused kernel runs it, else None
    (the options ``gemm_fused_kernel`` and ``gemm_fused_min_macs``: with bf16's general
    branch on the host, ``k_loop.general_on_host``, every size takes the kernel; fp8 with
    promotion or block scales from ``gemm_fused_min_macs``, through ``fused_fp8``)."""
    switch = config.gemm_fused_kernel
    fp8_promoted = cfg.promote_every is not None and cfg.a_format in FP8_TYPES
    if (switch == "off" or ((scales is not None or cfg.promote_every is not None)
                            and not fp8_promoted)
            or not fused_kernel.takes(cfg.a_format, cfg.b_format)
            or (switch == "auto" and (jax.default_backend() != "gpu" or (
                macs < config.gemm_fused_min_macs
                and not k_loop.general_on_host(cfg, scales))))):
        return None
    dp = datapath.matmul_datapath(issue_arch(cfg.instruction, cfg.arch), cfg.instruction,
                                  cfg.a_format, cfg.b_format, cfg.accumulator, k)
    ok = dp is not None and fused_kernel.models(dp, cfg.a_format, cfg.b_format,
                                                cfg.accumulator, k)
    return dp if ok and fused_mgpu.option_runs(dp, cfg.a_format, cfg.b_format,
                                               cfg.promote_every is not None) else None


def _pad_to(x, rows, cols):
    r, c = x.shape
    if (r, c) == (rows, cols):
        return x
    return jnp.pad(x, ((0, rows - r), (0, cols - c)))


def _fast(a_op, b_op, c_acc, cfg: Cfg):
    if cfg.legacy:
        return datapath.mma(a_op, b_op, c_acc, a_format=cfg.a_format, c_format=cfg.accumulator,
                            d_format=cfg.accumulator, arch=cfg.arch, mode="fast")
    prod = jnp.matmul(datapath.as_f32(a_op), datapath.as_f32(b_op),
                      precision=lax.Precision.HIGHEST)
    return (prod + c_acc.astype(jnp.float32)).astype(ACC_DTYPE[cfg.accumulator])


def tiled(a_op, b_op, c_acc, cfg: Cfg, scales=None):
    """The k loop over the whole (M, N) output, on converted operands.

    M, N and K are padded with zeros to the tile (only where matmul's checks allow it, or
    in the backward products, where a zero k-slice leaves the sum as it is). ``scales``:
    the block scales ``(sa (M, Kb), sb (Kb, N))`` applied on each promotion
    (``matmul_scales.promote``)."""
    if cfg.mode == "fast":
        # Fast mode: one dot_general over the whole K (the backend's own accumulation);
        # tiling (and promotion) change nothing there but speed.
        return _fast(a_op, b_op, c_acc, cfg)
    if cfg.mode == "native":  # the same chain, issued on the GPU's tensor cores
        return native.chain(a_op, b_op, c_acc, cfg)
    (M, K), N = a_op.shape, b_op.shape[1]
    m, n, k = cfg.tile
    Mp, Np, Kp = (-(-d // t) * t for d, t in ((M, m), (N, n), (K, k)))
    on_tc = None if scales is not None else native.exact_on_tensor_cores(cfg)
    if on_tc is not None:  # the GPU's own wgmma has this chain's arithmetic (K as padded)
        return native.run_exact(_pad_to(a_op, M, Kp), _pad_to(b_op, Kp, N), c_acc, cfg, on_tc)
    a_op, b_op, acc = _pad_to(a_op, Mp, Kp), _pad_to(b_op, Kp, Np), _pad_to(c_acc, Mp, Np)
    if scales is not None:
        scales = (_pad_to(scales[0], Mp, scales[0].shape[1]),
                  _pad_to(scales[1], scales[1].shape[0], Np))
    fused_dp = _fused_datapath(cfg, k, scales, Mp * Np * Kp)
    if fused_dp is None and k_loop.applies(cfg, scales):
        # One executable per instruction for every product shape (the CPU's default).
        return k_loop.chain(a_op, b_op, acc, cfg)[:M, :N]
    if fused_dp is None:
        # XLA's k loop; bf16 / tf32 operands whose every product is a normal fp32 number
        # may take the fast path's arithmetic under one cond (arith_in_range_path).
        return k_loop.xla_loop(a_op, b_op, acc, cfg, scales,
                        cond=k_loop.in_range_cond(cfg, Mp * Np * Kp))[:M, :N]
    interpret = jax.default_backend() != "gpu"
    if cfg.promote_every is not None:  # fp8: each interval's chain through the kernel
        return fused_fp8.promoted_chain(
            a_op, b_op, acc, fused_dp, cfg.a_format, cfg.promote_every,
            lambda acc, p, kb: promote(acc, p, kb, scales), b_fmt=cfg.b_format,
            interpret=interpret)[:M, :N]
    fast = cfg.a_format in fused_kernel.FAST
    if fast or (fused_kernel.any_range(Mp, Np, Kp) and fused_mgpu.backend() == "triton"):
        # The kernel alone: every f16 / fp8 product is a normal fp32 number; a small bf16
        # product, the Triton kernel's form for any value (Mosaic GPU: the cond below).
        return fused_mgpu.by_option(a_op, b_op, acc, fused_dp, cfg.a_format,
                                    form=None if fast else "general", b_fmt=cfg.b_format,
                                    interpret=interpret)[:M, :N]

    def in_range(acc):  # bf16 in fp32's range through the kernel
        return fused_mgpu.by_option(a_op, b_op, acc, fused_dp, cfg.a_format, finite=True,
                                    interpret=interpret)

    # One cond for the whole product; the rest through XLA's general loop, or beside the
    # kernel on an accelerator, through the shared executables on the host.
    if k_loop.general_on_host(cfg, scales):
        def general(acc):
            return k_loop.chain(a_op, b_op, acc, cfg)
    else:
        def general(acc):
            return k_loop.xla_loop(a_op, b_op, acc, cfg, scales, known="general")
    vals = datapath.range_values(a_op, b_op, cfg.a_format, cfg.b_format)
    return lax.cond(in_fp32_range(*vals), in_range, general, acc)[:M, :N]


#: matmul's and mma's modes: the model's (exact, fast) and the GPU's own instructions
#: (``native``).
MODES = (*datapath.MODES, "native")


def mma(a, b, c, *, a_format: str, c_format: str, d_format: str, arch="sm_90", mode="exact",
        satf=False, b_format: str | None = None, instruction: str = "wmma",
        instruction_k: int | None = None, datapath: Any = None,
        scale_input_d: int = 0) -> jax.Array:
    """``D = A @ B + C``, a chain of MMA instructions over k (``jaxwarp.mma``).

    ``datapath.mma``'s arguments, results and errors (its docstring, which this function's
    ``__doc__`` becomes, has them), with the mode ``"native"``: ``native.check_mma`` /
    ``run_mma``. The route of each mode: :func:`_mma`.

    Example:
        >>> import jax.numpy as jnp
        >>> a = jnp.ones((16, 16), jnp.float16); c = jnp.zeros((16, 16), jnp.float32)
        >>> float(mma(a, a, c, a_format="f16", c_format="f32", d_format="f32")[0, 0])
        16.0
    """
    return _mma(a, b, c, mode, dict(
        a_format=a_format, c_format=c_format, d_format=d_format, arch=arch, satf=satf,
        b_format=b_format, instruction=instruction, instruction_k=instruction_k,
        datapath=datapath, scale_input_d=scale_input_d))


def _public_mma_doc() -> str:
    """``datapath.mma``'s docstring (one home for the arguments), with native mode."""
    doc = datapath.mma.__doc__
    key = '      mode: ``"exact"`` reproduces'
    native_note = ('      mode: ``"native"`` (an H100 / H200 only) runs the chain on the GPU\'s '
                   "tensor\n        cores (``wgmma`` of the same datapath): exact mode's bits "
                   "for the chains\n        that ``wgmma`` is, a ValueError elsewhere; its "
                   "gradient is exact mode's.\n        ")
    assert key in doc, "datapath.mma's docstring no longer documents mode"
    return doc.replace(key, native_note + '``"exact"`` reproduces', 1)


mma.__doc__ = _public_mma_doc()
mma.__wrapped__ = datapath.mma  # the arithmetic this front-end adds native mode to

def _mma(a, b, c, mode, kw: dict):
    """:func:`mma`: fast mode is ``datapath.mma``; exact mode ``datapath.mma``'s checks, then
    the tensor cores (``native.tiles_on_tensor_cores``), the fused kernel where it models
    the chain (``fused_tiles.runs``) or the model's XLA ops, with ``mma``'s gradient each
    way; native mode the GPU's chain (``native.run_mma``)."""
    if checks.static_choice(mode, "mode", MODES) == "fast":
        return datapath.mma(a, b, c, mode=mode, **kw)
    checked = datapath.check_mma(a, b, c, mode="exact", **kw)
    if checked.d is not None:  # k = 0: no instruction runs
        return checked.d
    cfg, (a, b, c) = checked.cfg, checked[:3]
    if mode == "native":
        native.check_mma(cfg.a_format, cfg.b_format, cfg.c_format, cfg.d_format,
                         kw["instruction"], cfg.ik, kw["arch"], kw["satf"], kw["datapath"],
                         cfg.c_shift)
        run = native.run_mma
    elif native.tiles_on_tensor_cores(checked, kw["satf"]):
        run = native.run_tiles
    elif min(c.size, a.size, b.size) and fused_tiles.runs(cfg, kw["satf"],
                                                          c.size * a.shape[-1]):
        run = fused_tiles.mma_chain
    else:
        return datapath.run_chain(a, b, c, cfg, mode, kw["satf"])
    return datapath.straight_through(run, a, b, c, cfg)


def to_operand(x: jax.Array, operand_format: str, scale: Any = None) -> jax.Array:
    """Converts floats to the operand format's storage dtype, as a CUDA program would.

    Args:
        x: float array.
        operand_format: ``"f16"``, ``"bf16"``, ``"tf32"``, ``"f64"``, ``"e4m3"`` or
            ``"e5m2"``.
        scale: fp8 only: x is divided by this fp32 scale before the conversion, an IEEE
            fp32 division rounded to nearest even (on the bits, subnormals kept: the
            same on every backend).

    Returns:
        float16 / bfloat16 (round to nearest even), float32 with tf32 precision
        (``__float_to_tf32``), float64, or ``float8_e4m3fn`` / ``float8_e5m2``
        (``cvt.rn.satfinite``: nearest even, saturating to the largest finite value;
        non-f32 inputs are first converted to f32). An array that already has the
        format's dtype (and no scale) is returned as it is, like f16 / bf16 arrays:
        an e5m2 infinity stays infinite (the conversion would saturate it).

    Example:
        >>> to_operand(jnp.float32(500.0), "e4m3")
        Array(448, dtype=float8_e4m3fn)
    """
    operand_format = checks.format_name(operand_format, "operand_format", OPERAND_FORMATS,
                                        formats.ALIASES)
    x = checks.array_arg(x, "x")
    scale = None if scale is None else checks.array_arg(scale, "scale")
    return _to_operand(x, operand_format, scale)


def _to_operand(x: jax.Array, operand_format: str, scale: Any = None) -> jax.Array:
    """:func:`to_operand` on arguments ``matmul`` has checked (JAX arrays, a format name):
    its operands are checked once, at its front door, and converted here."""
    if operand_format in FP8_TYPES:
        x = jnp.asarray(x)
        if scale is None and x.dtype == formats.FORMATS[operand_format].storage_dtype:
            return x  # already fp8 data: a CUDA program feeds it to the tensor core as is
        if scale is None and x.dtype == jnp.float64:  # rounded once, not via float32
            return fp8_intrinsics.double_to_fp8(x, operand_format, saturate=True)
        x32 = x.astype(jnp.float32)
        if scale is not None:  # IEEE division on the bits: XLA's GPU one is not rn
            x32 = divide_rn(x32, scale)
        return fp8_intrinsics.float_to_fp8(x32, operand_format, saturate=True)
    if scale is not None:
        raise ValueError(f"scale is only for the fp8 formats {FP8_TYPES}; "
                         f"got operand_format={operand_format!r}")
    if (operand_format, x.dtype) in (("f16", jnp.float16), ("bf16", jnp.bfloat16)):
        return x  # already in the format: nothing to round
    if operand_format in ("f16", "bf16", "tf32"):  # a float64 is rounded once, not via f32
        return convert.narrow(x if x.dtype == jnp.float64 else x.astype(jnp.float32),
                              operand_format)
    return x.astype(jnp.float64)


def _one_format(f: Any) -> str:
    if isinstance(f, str) and formats.ALIASES.get(f) in OPERAND_FORMATS:
        f = formats.ALIASES[f]  # "fp16", "bfloat16", "float8_e4m3fn", ... keep working
    return checks.static_choice(f, "operand_format", OPERAND_FORMATS)


def _parse_formats(operand_format: Any) -> tuple[str, str]:
    if isinstance(operand_format, (tuple, list)):
        if len(operand_format) != 2:
            raise ValueError(f"operand_format as a tuple must be (a_format, b_format), got "
                             f"{operand_format!r}")
        fa, fb = (_one_format(f) for f in operand_format)
        if fa != fb and not (fa in FP8_TYPES and fb in FP8_TYPES):
            raise ValueError(
                f"operand_format={tuple(operand_format)!r} mixes formats; only the fp8 "
                f"formats {FP8_TYPES} can be mixed (e.g. ('e5m2', 'e4m3'))")
        return fa, fb
    f = _one_format(operand_format)
    return f, f


def check_args(a, b, c, operand_format, accumulator, tile, arch, mode, instruction,
           promote_every, a_scale, b_scale):
    fa, fb = _parse_formats(operand_format)
    if instruction is None:
        instruction = DEFAULT_INSTRUCTION[fa]
    instruction = checks.static_choice(instruction, "instruction", INSTRUCTIONS)
    if fa not in TILES[instruction]:
        hint = " (fp8 runs on instruction='mma_sync' or 'wgmma')" if fa in FP8_TYPES else ""
        raise ValueError(
            f"instruction={instruction!r} has no operand_format={fa!r}; {instruction} "
            f"operand formats: {tuple(TILES[instruction])}{hint}")
    accumulator = checks.static_choice(accumulator, "accumulator",
                                       ACCUMULATORS[instruction][fa])
    checks.static_choice(mode, "mode", MODES)
    if fa == "f64" or accumulator == "f64":
        checks.require_x64("matmul with f64 operands")
    if tile is None:
        tile = default_tile(instruction, fa, arch)
    if not (isinstance(tile, tuple) and len(tile) == 3):
        raise TypeError(f"tile must be a static (m, n, k) tuple, got {tile!r}")
    tile = tuple(checks.static_int(t, "tile") for t in tile)
    valid = list(TILES[instruction][fa])
    target = None
    if instruction == "wmma":
        wmma_table.check_mma(fa, accumulator, accumulator, valid[0], arch)
    elif isinstance(arch, str):
        target = parse_target(issue_arch(instruction, arch))
        check_target(target, instruction, fa, fb)
    if tile not in valid:
        what = "WMMA" if instruction == "wmma" else instruction
        raise ValueError(
            f"tile={tile} is not a {what} shape for operand_format={fa!r}; "
            f"allowed: {tiles_text(instruction, fa) if instruction in PADDED else valid}"
        )
    a, b = jnp.asarray(a), jnp.asarray(b)
    for name, x in (("a", a), ("b", b)):
        if x.ndim != 2 or not jnp.issubdtype(x.dtype, jnp.floating):
            raise ValueError(f"{name} must be a 2-D float matrix, got {x.dtype}{list(x.shape)}")
    (M, K), (K2, N) = a.shape, b.shape
    if K != K2:
        raise ValueError(f"a is {M}x{K} and b is {K2}x{N}: inner dimensions differ")
    m, n, k = tile
    if target is not None:
        check_target(target, instruction, fa, fb, k)
    # wgmma's m = 64 is larger than many matrices: rows / columns beyond M / N are a
    # kernel's zero padding (they do not change the other rows and columns).
    padded = ("M", "N") if instruction in PADDED else ()
    for dim, size, t in (("M", M, m), ("N", N, n), ("K", K, k)):
        if size % t and dim not in padded:
            raise ValueError(
                f"{dim}={size} is not a multiple of the tile's {t} (tile={tile}); "
                f"pad the matrices or pick another tile from "
                f"{tiles_text(instruction, fa) if instruction in PADDED else valid}"
            )
    if promote_every is not None:
        promote_every = checks.static_int(promote_every, "promote_every")
        if promote_every <= 0 or promote_every % k:
            raise ValueError(
                f"promote_every={promote_every} must be a positive multiple of the "
                f"instruction's k={k} (tile={tile}, instruction={instruction!r}); "
                f"e.g. {4 * k}, or None for no promotion")
        if accumulator != "f32":
            raise ValueError(f"promote_every promotes partial sums into fp32 and needs "
                             f"accumulator='f32'; got accumulator={accumulator!r}")
    a_scale, b_scale, promote_every, scaled, block = check_scales(
        a_scale, b_scale, (M, K, N), fa, operand_format, accumulator, tile, promote_every)
    if c is not None:
        c = jnp.asarray(c)
        if c.shape != (M, N):
            raise ValueError(f"c must have shape {(M, N)}, got {tuple(c.shape)}")
    cfg = Cfg(fa, fb, accumulator, tile, instruction, arch, mode, promote_every,
              scaled and not block, block)
    if mode == "native":  # the chain must be one the GPU issues, on a GPU that has it
        native.check(cfg)
    return a, b, c, a_scale, b_scale, cfg


def _block_forward(a, b, c, sa, sb, cfg: Cfg):
    """Block-scaled fp8 (DeepSeek-V3): operands divided by their block's scale and
    converted; every 128 k-elements the chain's partial P is promoted with the scales."""
    (M, K), N = a.shape, b.shape[1]
    bm = (1 if sa.shape[0] == M else blockwise.BLOCK, blockwise.BLOCK)
    bn = (blockwise.BLOCK, 1 if sb.shape[1] == N else blockwise.BLOCK)
    qa = _to_operand(a, cfg.a_format, blockwise.expand_scales(sa, (M, K), bm))
    qb = _to_operand(b, cfg.b_format, blockwise.expand_scales(sb, (K, N), bn))
    sa_rows = jnp.repeat(sa, bm[0], axis=0)[:M]  # (M, Kb)
    sb_cols = jnp.repeat(sb, bn[1], axis=1)[:, :N]  # (Kb, N)
    acc = c.astype(jnp.float32)
    if cfg.mode == "fast":  # native float operations, blocks summed in order
        kb = sa.shape[1]
        pad = kb * blockwise.BLOCK - K
        qa3 = jnp.pad(qa.astype(jnp.float32), ((0, 0), (0, pad))).reshape(M, kb, -1)
        qb3 = jnp.pad(qb.astype(jnp.float32), ((0, pad), (0, 0))).reshape(kb, -1, N)
        p = jnp.einsum("mkc,kcn->kmn", qa3, qb3, precision=lax.Precision.HIGHEST)
        return acc + jnp.sum(sa_rows.T[:, :, None] * sb_cols[:, None, :] * p, axis=0)
    return tiled(qa, qb, acc, cfg, (sa_rows, sb_cols))


def _forward(a, b, c, sa, sb, cfg: Cfg):
    acc_dt = ACC_DTYPE[cfg.accumulator]
    if cfg.blockwise:
        return _block_forward(a, b, c, sa, sb, cfg)
    if not cfg.scaled:  # (c None: native mode's C = +0, which its kernel does not read)
        return tiled(_to_operand(a, cfg.a_format), _to_operand(b, cfg.b_format),
                     None if c is None else c.astype(acc_dt), cfg)
    t = tiled(_to_operand(a, cfg.a_format, sa), _to_operand(b, cfg.b_format, sb),
              jnp.zeros(c.shape, acc_dt), cfg)
    return epilogue(t, multiply_rn(sa, sb), c).astype(acc_dt)


# One jitted function per product signature (shapes, dtypes and the static Cfg): JAX
# traces a product's k loop once per signature and lowers it to one shared function,
# however often a model calls it (XLA inlines the calls: its own compile sees each one,
# which is why the CPU's exact k loop runs through ``k_loop``'s executables;
# benchmarks/compile_time.py and docs/compile_time.md measure it).
_forward_once = keyed_jit(_forward, static_argnums=5)


# ``options``: ``config.snapshot()`` of the call (JAX's cache of the traced custom_vjp is
# keyed on it; the backward products read the forward's options).
@functools.partial(jax.custom_vjp, nondiff_argnums=(5, 6))
def _matmul(a, b, c, sa, sb, cfg, options):
    return _forward_once(a, b, c, sa, sb, cfg)


def _fwd(a, b, c, sa, sb, cfg, options):
    return _matmul(a, b, c, sa, sb, cfg, options), (a, b, c, sa, sb)


@functools.partial(keyed_jit, static_argnums=2)
def _bwd_product(x, y, cfg: Cfg):
    """x @ y through the tensor core, a backward product of a forward with ``cfg`` (jitted
    per signature, as ``_forward_once``)."""
    acc_dt = ACC_DTYPE[cfg.accumulator]
    bcfg = dataclasses.replace(cfg, scaled=False, blockwise=False)
    M, K = x.shape
    N = y.shape[1]
    if cfg.fp8:
        # Current per-tensor power-of-two scaling of both operands, the forward's
        # format pairing: x * 2**kx rounded once to fp32, then to fp8; the product
        # times 2**-(kx + ky) rounded once to the accumulator. Integer operations on
        # the bits (times_pow2): the same bits on every backend.
        kx = tensor_scale_exponent(x, cfg.a_format)
        ky = tensor_scale_exponent(y, cfg.b_format)
        t = tiled(_to_operand(times_pow2(x, kx, "f32"), cfg.a_format),
                  _to_operand(times_pow2(y, ky, "f32"), cfg.b_format),
                  jnp.zeros((M, N), acc_dt), bcfg)
        return times_pow2(t, -(kx + ky), cfg.accumulator)
    if not cfg.legacy:
        return tiled(_to_operand(x, cfg.a_format), _to_operand(y, cfg.b_format),
                     jnp.zeros((M, N), acc_dt), bcfg)
    # WMMA: the tile permuted to fit, as before.
    m, n, k = cfg.tile
    shapes = TILES["wmma"][cfg.a_format]
    for t in ((m, n, k), (m, k, n), (k, n, m), (n, m, k), (n, k, m), (k, m, n)):
        if t in shapes and M % t[0] == 0 and N % t[1] == 0 and K % t[2] == 0:
            promote = cfg.promote_every if cfg.promote_every and \
                cfg.promote_every % t[2] == 0 else None
            tcfg = dataclasses.replace(bcfg, tile=t, promote_every=promote)
            return tiled(_to_operand(x, cfg.a_format), _to_operand(y, cfg.b_format),
                         jnp.zeros((M, N), acc_dt), tcfg)
    raise ValueError(
        f"the backward product {M}x{K} @ {K}x{N} fits no {cfg.a_format} WMMA tile; "
        f"make M, N and K multiples of every dimension of tile={cfg.tile}"
    )


def _bwd(cfg: Cfg, options, res, g):
    # Straight-through estimator: the operand conversions pass gradients unchanged.
    # The backward products run on the emulated tensor core, like a GPU's backward.
    a, b, c, sa, sb = res
    g = g.astype(ACC_DTYPE[cfg.accumulator])
    with config.override(**dict(options)):
        da = _bwd_product(g, b.T, cfg).astype(a.dtype)
        db = _bwd_product(a.T, g, cfg).astype(b.dtype)
    dc = None if c is None else g.astype(c.dtype)  # None: matmul's C = +0, not an input
    return da, db, dc, jnp.zeros_like(sa), jnp.zeros_like(sb)


_matmul.defvjp(_fwd, _bwd)


def matmul(
    a: Any,
    b: Any,
    c: Any = None,
    *,
    operand_format: str | tuple[str, str] = "f16",
    accumulator: str = "f32",
    tile: tuple[int, int, int] | None = None,
    arch: str | None = None,
    mode: str = "exact",
    instruction: str | None = None,
    promote_every: int | None = None,
    a_scale: Any = None,
    b_scale: Any = None,
    sparsity: str | None = None,
) -> jax.Array:
    """``D = A @ B + C`` the way a tensor-core GEMM kernel computes it.

    Args:
        a: (M, K) floats; converted to ``operand_format`` first (round to nearest
            for f16/bf16, ``__float_to_tf32`` for tf32, ``cvt.rn.satfinite`` for fp8).
        b: (K, N) floats, converted likewise.
        c: optional (M, N) accumulator input (zero if omitted), converted to
            ``accumulator``.
        operand_format: ``"f16"``, ``"bf16"``, ``"tf32"``, ``"f64"`` (needs
            ``jax_enable_x64``), ``"e4m3"`` or ``"e5m2"``, or an (a, b) pair of fp8
            formats such as ``("e5m2", "e4m3")``. Aliases (``"fp16"``, ...) work.
        accumulator: ``"f32"``, or ``"f16"`` for f16 and fp8 operands (``"f64"`` for
            f64).
        tile: the instruction's (m, n, k); defaults to the first of
            :data:`TILES` ``[instruction][format]`` that ``arch`` issues
            (:func:`default_tile`): WMMA (16, 16, 16), (16, 16, 8) for tf32, (8, 8, 4)
            for f64; mma.sync (16, 8, 16) (f16: (16, 8, 8) on sm_75, (8, 8, 4) on
            sm_70), (16, 8, 8) tf32, (16, 8, 32) fp8; wgmma (64, 8, 16), (64, 8, 8) tf32,
            (64, 8, 32) fp8;
            tcgen05 the same with m 64 or 128. K must be a multiple of k; M and N
            multiples of m and n, except for wgmma and tcgen05, whose rows and
            columns beyond M and N are zero padding.
        arch: architecture preset of the arithmetic model (``"sm_90"`` is
            verified against an H100; with ``instruction="wgmma"`` it stands for
            ``"sm_90a"``, the only target that has wgmma). None (default): the
            instruction's target, ``"sm_100a"`` for tcgen05, else ``"sm_90"``
            (:func:`default_arch`), as ``jaxwarp.mx.matmul`` takes its instruction's.
        mode: ``"exact"`` (the tensor core's own arithmetic, bit for bit),
            ``"fast"`` (operands rounded, one ``dot_general`` over all of K with fp32
            accumulation: round-to-nearest on a CPU; promotion changes nothing there) or
            ``"native"`` (on an H100 / H200 only: exact mode's chain of instructions run
            on the tensor cores by a GPU kernel, the same bits at GPU speed; for the
            chains wgmma issues: f16 / bf16 at k = 16, tf32 at k = 8, fp8 wgmma; see
            docs/native.md).
        instruction: ``"wmma"``, ``"mma_sync"``, ``"wgmma"`` or ``"tcgen05"`` (with
            ``arch="sm_100a"`` or ``"sm_103a"``); None: ``"wmma"`` for f16/bf16/tf32/f64,
            ``"wgmma"`` for fp8 (:data:`DEFAULT_INSTRUCTION`). ``"mfma"``: AMD's
            ``v_mfma_*`` with ``arch="gfx908"``, ``"gfx90a"`` or ``"gfx942"`` (default),
            exact mode, ``mfma_gemm`` (docs/amd.md).
        promote_every: None, or N (a multiple of the tile's k): the k loop restarts
            from zero every N k-elements and each partial result is added to an fp32
            accumulator with fp32 round-to-nearest (DeepSeek-V3's promotion; see the
            docstring of ``k_loop``). Needs ``accumulator="f32"``.
        a_scale, b_scale: fp8 only: per-tensor fp32 scale factors (scalars, may be
            traced): the operands are ``a / a_scale``, ``b / b_scale`` in fp8
            (saturating) and the tensor core's result is multiplied by
            ``a_scale * b_scale`` in fp32 before C is added (``matmul_scales``). Or block
            scales (2-D, may be traced; ``jaxwarp.fp8.quantize_blockwise`` makes them):
            ``a_scale`` (M, ceil(K/128)) or (ceil(M/128), ceil(K/128)), ``b_scale``
            (ceil(K/128), ceil(N/128)) or (ceil(K/128), N), applied on each promotion
            every 128 k-elements (DeepSeek-V3; ``matmul_scales``); a missing one is 1.
            Needs ``accumulator="f32"`` and ``promote_every`` None or 128.
        sparsity: None, or ``"2:4"``: A is pruned to 2:4 by magnitude (1:2 for tf32) in
            its operand format and every row runs a chain of sparse instructions
            (``mma.sp`` for ``instruction="mma_sync"``, the default then;
            ``wgmma.mma_async.sp`` for ``"wgmma"``) of the largest K dividing K
            (``matmul_sparse``; docs/sparse.md). Exact mode, no scales, promotion or tile.

    Returns:
        (M, N) array in the accumulator's dtype.

    Raises:
        ValueError: a dimension is not a multiple of the tile, shapes disagree, or the
            instruction/format/accumulator/tile/promotion combination is not allowed
            (the message names the argument and lists what is).

    Example:
        >>> a = jnp.ones((32, 64), jnp.float32); b = jnp.ones((64, 16), jnp.float32)
        >>> jaxwarp.matmul(a, b, operand_format="bf16")[0, 0]
        Array(64., dtype=float32)
    """
    if isinstance(instruction, str) and instruction == "mfma":
        return mfma_gemm.matmul(a, b, c, operand_format=operand_format, arch=arch, mode=mode,
                                accumulator=accumulator, tile=tile, sparsity=sparsity,
                                promote_every=promote_every, a_scale=a_scale, b_scale=b_scale)
    operand_format = checks.format_name(operand_format, "operand_format", OPERAND_FORMATS,
                                        formats.ALIASES, need_x64=False)  # check_args does it
    accumulator = checks.format_name(accumulator, "accumulator", None, formats.ALIASES)
    # The data arguments, checked once here (the conversions and the k loop below take
    # them as they are).
    given = {name: x for name, x in (("a", a), ("b", b), ("c", c), ("a_scale", a_scale),
                                     ("b_scale", b_scale))
             if x is not None or name in ("a", "b")}
    given = dict(zip(given, checks.array_args(**given), strict=True))
    a, b, c, a_scale, b_scale = (given.get(name) for name in ("a", "b", "c", "a_scale",
                                                               "b_scale"))
    arch = default_arch(instruction) if arch is None else arch
    if sparsity is not None:
        return _matmul_sparse(a, b, c, operand_format, accumulator, tile, arch, mode,
                              instruction, promote_every, a_scale, b_scale, sparsity)
    a, b, c, a_scale, b_scale, cfg = check_args(
        a, b, c, operand_format, accumulator, tile, arch, mode, instruction, promote_every,
        a_scale, b_scale)
    zero_c, c = c is None, (jnp.zeros((a.shape[0], b.shape[1]), ACC_DTYPE[cfg.accumulator])
                            if c is None else c)
    one = jnp.float32(1)
    if a.shape[1] == 0:  # K = 0: no instruction runs, D is C (through the fp8 epilogue)
        acc_dt = ACC_DTYPE[cfg.accumulator]
        if not cfg.scaled:  # (block scales too: no block is promoted)
            return c.astype(acc_dt)
        s = multiply_rn(one if a_scale is None else a_scale,
                        one if b_scale is None else b_scale)
        return epilogue(jnp.zeros(c.shape, acc_dt), s, c).astype(acc_dt)
    if zero_c and cfg.mode == "native" and not (cfg.scaled or cfg.blockwise):
        c = None  # C = +0, the native kernel's own start: no M x N zeros written, read
    return _matmul(a, b, c, one if a_scale is None else a_scale,
                   one if b_scale is None else b_scale, cfg, config.snapshot())


def _matmul_sparse(a, b, c, operand_format, accumulator, tile, arch, mode, instruction,
                   promote_every, a_scale, b_scale, sparsity):
    """``matmul(..., sparsity="2:4")``: checks, operand conversion, ``matmul_2_4``."""
    checks.static_choice(sparsity, "sparsity", matmul_sparse.SPARSITIES)
    for name, v in (("tile", tile), ("promote_every", promote_every), ("a_scale", a_scale),
                    ("b_scale", b_scale)):
        if v is not None:
            raise ValueError(f"sparsity='2:4' takes no {name} (got {name}={v!r}); the "
                             f"instruction's K is chosen from K")
    if mode != "exact":
        raise ValueError(f"sparsity='2:4' runs mode='exact' only; got mode={mode!r}")
    instruction = "mma_sync" if instruction is None else instruction
    fa, fb = (operand_format if isinstance(operand_format, tuple)
              else (operand_format, operand_format))
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"a (M, K) and b (K, N) must be 2-D with one K; got a "
                         f"{tuple(a.shape)}, b {tuple(b.shape)}")
    matmul_sparse.sparse_row(instruction, fa, fb, accumulator, a.shape[1])
    acc_dt = ACC_DTYPE[accumulator]
    c = jnp.zeros((a.shape[0], b.shape[1]), acc_dt) if c is None else c
    if c.shape != (a.shape[0], b.shape[1]):
        raise ValueError(f"c must have shape {(a.shape[0], b.shape[1])}, got {tuple(c.shape)}")
    # The dense product of the same instruction runs the backward (``_bwd_2_4``).
    cfg = Cfg(fa, fb, accumulator, default_tile(instruction, fa, arch), instruction, arch,
              "exact", None, False)
    return _matmul_2_4(a, b, c, cfg, config.snapshot())


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4))
def _matmul_2_4(a, b, c, cfg: Cfg, options):
    return matmul_sparse.matmul_2_4(
        _to_operand(a, cfg.a_format), _to_operand(b, cfg.b_format),
        c.astype(ACC_DTYPE[cfg.accumulator]), a_format=cfg.a_format, b_format=cfg.b_format,
        accumulator=cfg.accumulator, instruction=cfg.instruction,
        arch=issue_arch(cfg.instruction, cfg.arch))


def _fwd_2_4(a, b, c, cfg, options):
    return _matmul_2_4(a, b, c, cfg, options), (a, b, c)


def _bwd_2_4(cfg: Cfg, options, res, g):
    # A is 2:4 by contract: its pruned elements are zeros, not variables, so dA is zero
    # there (the mask the forward pruned with). Otherwise the dense matmul's backward:
    # straight-through conversions, dA = dD @ B^T and dB = A^T @ dD (the pruned A) as
    # dense products of the same instruction on the emulated tensor core (neither is
    # 2:4), dC = dD. Bit for bit the gradient of matmul(where(mask, a, 0), b).
    a, b, c = res
    keep = matmul_sparse.kept_2_4(_to_operand(a, cfg.a_format), a_format=cfg.a_format,
                                  b_format=cfg.b_format, accumulator=cfg.accumulator,
                                  instruction=cfg.instruction)
    g = g.astype(ACC_DTYPE[cfg.accumulator])
    a_kept = jnp.where(keep, a, jnp.zeros_like(a))
    with config.override(**dict(options)):
        da = jnp.where(keep, _bwd_product(g, b.T, cfg).astype(a.dtype), jnp.zeros_like(a))
        db = _bwd_product(a_kept.T, g, cfg).astype(b.dtype)
    return da, db, g.astype(c.dtype)


_matmul_2_4.defvjp(_fwd_2_4, _bwd_2_4)
