"""A tiled matrix product through the emulated tensor core.

`matmul` is a GEMM kernel: every output tile starts from its C tile (or zero,
``fill_fragment(acc, 0)``) and a loop over k chains the accumulator through one
tensor-core instruction per step, one (m, n, k) tile at a time (the CUDA guide's
WMMA kernel)::

    for kIter in range(0, K, WMMA_K):
        load_matrix_sync(aFrag, A + aRow * lda + kIter, lda)
        load_matrix_sync(bFrag, B + kIter * ldb + bCol, ldb)
        mma_sync(accFrag, aFrag, bFrag, accFrag)

The fragments' lane layout does not change the arithmetic, so the loop runs on
logical tiles (``tests/tensorcore/test_matmul.py`` checks it against the fragment path);
all output tiles of a step go through the model at once, and ``jax.lax.scan``
runs the k loop.

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
per-tensor scale when one is given.

fp8 scaling (``a_scale``, ``b_scale``; fp8 formats only), as fp8 GEMM recipes
(cuBLASLt's ``A_SCALE``/``B_SCALE``, Transformer Engine, DeepSeek-V3) do it::

    qa = fp8_satfinite_rn(fl32(a / a_scale))      # same for b with b_scale
    T  = tensor-core chain of qa @ qb, from a zero accumulator
    s  = fl32(a_scale * b_scale)
    D  = fl(fl32(T * s) + C)                      # fp32 rn; rounded (rn) to the
                                                  # accumulator type at the end

where ``fl32`` is an IEEE fp32 operation rounded to nearest even, subnormals kept. All
four are computed on the bits (``numerics.scaling.divide_rn``, ``multiply_rn``,
``softfloat.add_rn``), the same on every backend: XLA's GPU division is not correctly
rounded and its CPU backend flushes subnormal operands and results. A missing scale
counts as 1. Without any scale, C is the chain's initial accumulator, as in the unscaled
kernel (and D is the tensor core's own result).

Block scales (DeepSeek-V3's fine-grained fp8, section 3.3.2; ``a_scale`` of shape
``(M, K/128)`` -- 1x128 tiles -- or ``(M/128, K/128)``, ``b_scale`` of shape ``(K/128,
N/128)`` -- 128x128 blocks -- or ``(K/128, N)``; sizes rounded up): each operand element is
divided by its block's scale (``divide_rn``) and converted as above; the k loop is
promoted every 128 k-elements, and each block's scales are applied on its promotion, as
DeepGEMM's sm_90 kernel does (``acc += (scale_a * scale_b) * accum``, which ``nvcc``
contracts into one ``FFMA``)::

    acc = C (or 0)
    for each 128-k block kb:  P = tensor-core chain of the block from a zero accumulator
                              s = fl32(a_scale[m, kb] * b_scale[kb, n])
                              acc = fma_rn(s, P, acc)     # one rounding (numerics.scaling)

Promotion (``promote_every=N``, DeepSeek-V3 section 3.3.2): the k loop is cut
into intervals of N k-elements (a multiple of the instruction's k; the last
interval is shorter when N does not divide K). Each interval's tensor-core chain
starts from a zero accumulator, and its fp32 result ``P_i`` is added to an fp32
accumulator in ordinary fp32 arithmetic (round to nearest even)::

    acc = C (or 0 when scaled);  acc = fl32(acc + P_1);  acc = fl32(acc + P_2) ...

Promotion needs ``accumulator="f32"``.

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
from jaxwarp._src.numerics import bitops, blockwise, convert, formats, fp8_intrinsics, softfloat
from jaxwarp._src.numerics.scaling import (
    divide_rn,
    fma_rn,
    multiply_rn,
    tensor_scale_exponent,
    times_pow2,
)
from jaxwarp._src.tensorcore import datapath as mma_arith
from jaxwarp._src.tensorcore import isa, wmma_table
from jaxwarp._src.tensorcore.arch import check_target, has, parse_target

# The tables below are views of the instruction catalogue (``isa.ROWS``).
INSTRUCTIONS = isa.INSTRUCTIONS
FP8_FORMATS = isa.FP8_TYPES
# matmul chains the float datapaths (and f64 through WMMA): a row's types are operand
# formats where its datapath is a float family, or f64 on WMMA. (``.kind::`` rows, whose
# fp6 / fp4 operands have no conversion here, are left to ``jaxwarp.mma``.)
# Rows that ``datapath.mma`` takes only on request (``k_auto=False``: the m8n8k4 f16
# quadpair unit, Volta's only ``mma.sync`` shape) are tiles too: matmul names its k.
_TILE_ROWS = tuple(r for r in isa.ROWS if not r.kind and (
    r.datapath not in isa.EXACT_DATAPATHS or (r.instruction, r.datapath) == ("wmma", "f64")))
# (fp6 / fp4, held as codes, have no float dtype to convert a matrix to: not here.)
OPERAND_FORMATS = tuple(dict.fromkeys(t for r in _TILE_ROWS for t in r.a_formats
                                      if not formats.FORMATS[t].code_storage))


def _tiles(instruction: str) -> dict[str, tuple[tuple[int, int, int], ...]]:
    """Per operand format, the instruction's shapes: catalogue order for WMMA (the CUDA
    guide's), largest k first for mma_sync (m16n8k16, m16n8k8, m8n8k4 for f16), every n
    (smallest first) for wgmma."""
    out: dict[str, list] = {}
    for r in _TILE_ROWS:
        if r.instruction == instruction:
            for t in (t for t in r.a_formats if t in OPERAND_FORMATS):
                out.setdefault(t, []).extend(r.shapes)
    if instruction == "mma_sync":
        return {t: tuple(sorted(s, key=lambda s: -s[2])) for t, s in out.items()}
    return {t: tuple(s) for t, s in out.items()}


#: Allowed (m, n, k) per instruction and (a's) operand format; the first is the default.
TILES: dict[str, dict[str, tuple[tuple[int, int, int], ...]]] = {
    i: _tiles(i) for i in INSTRUCTIONS}
_WGMMA_K = {f: shapes[0][2] for f, shapes in TILES["wgmma"].items()}
#: n of the wgmma shapes m64nNkK: multiples of 8 from 8 to 256.
WGMMA_N = tuple(dict.fromkeys(s[1] for shapes in TILES["wgmma"].values() for s in shapes))
#: Default wgmma n: every output element's arithmetic is the same for any n, so the
#: smallest n (the least zero padding of N) is the default.
WGMMA_DEFAULT_N = min(WGMMA_N)
_WMMA_FORMATS = tuple(TILES["wmma"])

#: The instruction used when ``instruction=None``: WMMA for the formats WMMA has, wgmma
#: (the H100's own fp8 unit) for fp8.
DEFAULT_INSTRUCTION = {f: "wmma" if f in TILES["wmma"] else "wgmma" for f in OPERAND_FORMATS}

#: Default tile per operand format (of its default instruction, on sm_90): the WMMA
#: shapes the CUDA guide lists first, and wgmma m64n8k32 for fp8. Other targets:
#: :func:`default_tile`.
DEFAULT_TILE = {f: TILES[DEFAULT_INSTRUCTION[f]][f][0] for f in OPERAND_FORMATS}


def _target_has(instruction: str, fmt: str, k: int, arch: Any) -> bool:
    """Whether ``arch`` (a target name or an ``ArchModel``) issues the instruction's
    shapes of instruction k ``k`` on ``fmt`` operands."""
    name = arch if isinstance(arch, str) else getattr(arch, "name", None)
    try:
        target = parse_target(_issue_arch(instruction, name))
    except (ValueError, TypeError):
        return False  # an unknown target: the checks that follow name it
    return has(target, *isa.min_target(instruction, fmt, k))


def default_tile(instruction: str, fmt: str, arch: Any = "sm_90") -> tuple[int, int, int]:
    """The tile ``matmul`` uses when ``tile=None``: the first of ``TILES[instruction]
    [fmt]`` that the target ``arch`` issues (the largest k it has for ``mma.sync``:
    m8n8k4 on sm_70, m16n8k8 on sm_75, m16n8k16 from sm_80 for f16).

    Where the target has none of them, the first: matmul's target check then names the
    architectures that have it.

    Example:
        >>> default_tile("mma_sync", "f16", "sm_70"), default_tile("mma_sync", "f16", "sm_75")
        ((8, 8, 4), (16, 8, 8))
        >>> default_tile("mma_sync", "f16", "sm_80")
        (16, 8, 16)
    """
    shapes = TILES[instruction][fmt]
    if instruction != "wmma":  # WMMA's shapes share their targets (wmma_table checks)
        for s in shapes:
            if _target_has(instruction, fmt, s[2], arch):
                return s
    return shapes[0]

#: Accumulators a GEMM can chain: C types whose D has the same type, at the tiles.
ACCUMULATORS = {
    i: {f: tuple(dict.fromkeys(c for r in _TILE_ROWS if r.instruction == i and f in r.a_formats
                               for c, d in r.cd if c == d))
        for f in TILES[i]}
    for i in INSTRUCTIONS}
_ACC_DTYPE = {t: isa.storage_dtype(t) for t in ("f16", "f32", "f64")}


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
    if operand_format in FP8_FORMATS:
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
        raise ValueError(f"scale is only for the fp8 formats {FP8_FORMATS}; "
                         f"got operand_format={operand_format!r}")
    if (operand_format, x.dtype) in (("f16", jnp.float16), ("bf16", jnp.bfloat16)):
        return x  # already in the format: nothing to round
    if operand_format in ("f16", "bf16", "tf32"):  # a float64 is rounded once, not via f32
        return convert.narrow_to(x if x.dtype == jnp.float64 else x.astype(jnp.float32),
                                 operand_format)
    return x.astype(jnp.float64)


@dataclasses.dataclass(frozen=True)
class _Cfg:
    """Static configuration of one product (hashable: a custom_vjp nondiff argument)."""

    a_format: str
    b_format: str
    accumulator: str
    tile: tuple[int, int, int]
    instruction: str
    arch: Any
    mode: str
    promote_every: int | None
    scaled: bool
    blockwise: bool = False  # a_scale / b_scale are block scales (DeepSeek-V3's recipe)

    @property
    def fp8(self) -> bool:
        return self.a_format in FP8_FORMATS

    @property
    def legacy(self) -> bool:
        """The WMMA path exactly as before instructions and fp8 existed."""
        return self.instruction == "wmma"


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
        if fa != fb and not (fa in FP8_FORMATS and fb in FP8_FORMATS):
            raise ValueError(
                f"operand_format={tuple(operand_format)!r} mixes formats; only the fp8 "
                f"formats {FP8_FORMATS} can be mixed (e.g. ('e5m2', 'e4m3'))")
        return fa, fb
    f = _one_format(operand_format)
    return f, f


def _tiles_text(instruction: str, fmt: str) -> str:
    if instruction == "wgmma":
        return f"(64, n, {_WGMMA_K[fmt]}) with n a multiple of 8 from 8 to 256"
    if instruction == "tcgen05":
        k = TILES["tcgen05"][fmt][0][2]
        return f"(64 or 128, n, {k}) with n a multiple of 8 from 8 to 256"
    return str(list(TILES[instruction][fmt]))


def _scale_arg(s: Any, name: str, shapes: tuple) -> jax.Array | None:
    """A per-tensor scale (a scalar) or block scales (one of the 2-D ``shapes``)."""
    if s is None:
        return None
    s = jnp.asarray(s)
    if s.shape not in ((), *shapes) or not (jnp.issubdtype(s.dtype, jnp.floating)
                                            or jnp.issubdtype(s.dtype, jnp.integer)):
        raise ValueError(f"{name} must be a scalar (one per-tensor scale) or block scales of "
                         f"shape {' or '.join(str(t) for t in dict.fromkeys(shapes))} (per "
                         f"{blockwise.BLOCK} k-elements), got {s.dtype}{list(s.shape)}")
    return s.astype(jnp.float32)


def _block_shapes(M: int, K: int, N: int) -> tuple[tuple, tuple]:
    """Allowed block-scale shapes of a and b: 1x128 tiles of a's rows ``(M, Kb)`` or 128x128
    blocks ``(Mb, Kb)``; b: ``(Kb, N)`` (128x1 tiles of its columns) or ``(Kb, Nb)``."""
    kb, mb, nb = (-(-d // blockwise.BLOCK) for d in (K, M, N))
    return ((M, kb), (mb, kb)), ((kb, N), (kb, nb))


def _check(a, b, c, operand_format, accumulator, tile, arch, mode, instruction,
           promote_every, a_scale, b_scale):
    fa, fb = _parse_formats(operand_format)
    if instruction is None:
        instruction = DEFAULT_INSTRUCTION[fa]
    instruction = checks.static_choice(instruction, "instruction", INSTRUCTIONS)
    if fa not in TILES[instruction]:
        hint = " (fp8 runs on instruction='mma_sync' or 'wgmma')" if fa in FP8_FORMATS else ""
        raise ValueError(
            f"instruction={instruction!r} has no operand_format={fa!r}; {instruction} "
            f"operand formats: {tuple(TILES[instruction])}{hint}")
    accumulator = checks.static_choice(accumulator, "accumulator",
                                       ACCUMULATORS[instruction][fa])
    checks.static_choice(mode, "mode", mma_arith.MODES)
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
        target = parse_target(_issue_arch(instruction, arch))
        check_target(target, instruction, fa, fb)
    if tile not in valid:
        what = "WMMA" if instruction == "wmma" else instruction
        raise ValueError(
            f"tile={tile} is not a {what} shape for operand_format={fa!r}; "
            f"allowed: {_tiles_text(instruction, fa) if instruction in _PADDED else valid}"
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
    padded = ("M", "N") if instruction in _PADDED else ()
    for dim, size, t in (("M", M, m), ("N", N, n), ("K", K, k)):
        if size % t and dim not in padded:
            raise ValueError(
                f"{dim}={size} is not a multiple of the tile's {t} (tile={tile}); "
                f"pad the matrices or pick another tile from "
                f"{_tiles_text(instruction, fa) if instruction in _PADDED else valid}"
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
    a_shapes, b_shapes = _block_shapes(M, K, N)
    a_scale, b_scale = (_scale_arg(a_scale, "a_scale", a_shapes),
                        _scale_arg(b_scale, "b_scale", b_shapes))
    scaled = a_scale is not None or b_scale is not None
    if scaled and fa not in FP8_FORMATS:
        raise ValueError(f"a_scale / b_scale are per-tensor scales of the fp8 formats "
                         f"{FP8_FORMATS}; got operand_format={operand_format!r}")
    block = any(s is not None and s.ndim == 2 for s in (a_scale, b_scale))
    if block:
        # DeepSeek-V3's fine-grained scaling: the scales are applied on each promotion.
        if promote_every not in (None, blockwise.BLOCK):
            raise ValueError(
                f"block scales (a_scale / b_scale of 2 dimensions) are applied on each "
                f"promotion every {blockwise.BLOCK} k-elements; got promote_every="
                f"{promote_every!r} (use None or {blockwise.BLOCK})")
        if accumulator != "f32" or blockwise.BLOCK % k:
            raise ValueError(f"block scales need accumulator='f32' and an instruction k "
                             f"dividing {blockwise.BLOCK}; got accumulator={accumulator!r}, "
                             f"tile={tile}")
        promote_every = blockwise.BLOCK
        one = jnp.ones((), jnp.float32)
        a_scale = jnp.broadcast_to(one if a_scale is None else a_scale,
                                   a_scale.shape if a_scale is not None and a_scale.ndim
                                   else a_shapes[0])
        b_scale = jnp.broadcast_to(one if b_scale is None else b_scale,
                                   b_scale.shape if b_scale is not None and b_scale.ndim
                                   else b_shapes[0])
    if c is not None:
        c = jnp.asarray(c)
        if c.shape != (M, N):
            raise ValueError(f"c must have shape {(M, N)}, got {tuple(c.shape)}")
    cfg = _Cfg(fa, fb, accumulator, tile, instruction, arch, mode, promote_every,
               scaled and not block, block)
    return a, b, c, a_scale, b_scale, cfg


#: Instructions whose M (64 / 128) and N tiles may run past the matrices (zero padding).
_PADDED = ("wgmma", "tcgen05")


def _issue_arch(instruction: str, arch: Any) -> Any:
    """wgmma is only in the architecture-specific target: sm_90 means sm_90a for it."""
    return "sm_90a" if instruction == "wgmma" and arch == "sm_90" else arch


def _mma(at, bt, acc, cfg: _Cfg):
    """One instruction per output tile (k = the tile's k), exact mode."""
    arch = _issue_arch(cfg.instruction, cfg.arch)
    return mma_arith.mma(at, bt, acc, a_format=cfg.a_format, b_format=cfg.b_format,
                         c_format=cfg.accumulator, d_format=cfg.accumulator, arch=arch,
                         mode="exact", instruction=cfg.instruction,
                         instruction_k=cfg.tile[2])


def _stored(x):
    """``x`` itself, as a k-step slice that XLA's CPU backend stores.

    With an instruction k of 4 (m8n8k4, Volta's only ``mma.sync`` shape) XLA's CPU fusion
    put the k step's dynamic slices of A and B inside the instruction's loop over the
    outputs, which then ran about 10x slower per multiply-add than with k = 8 (exact
    sm_70 ``matmul`` 89 against sm_75's 893 M MAC/s, CPU seconds, 128 x 512 x 128). A
    division is not copied into its consumers, so dividing by ``s * s`` (``s`` = +-1 from
    the sign bit: 1, which XLA cannot fold away; the trick of ``datapath._operand``)
    makes the slice an array of its own: 475 M MAC/s, the same bits (f16 only: an f16
    value, subnormal ones included, is a normal fp32 one, which XLA's CPU division does
    not flush; a NaN stays a NaN, which the datapath reads as any NaN)."""
    s = jnp.where(jnp.signbit(x), jnp.float16(-1), jnp.float16(1))
    return x / (s * s)


def _pad_to(x, rows, cols):
    r, c = x.shape
    if (r, c) == (rows, cols):
        return x
    return jnp.pad(x, ((0, rows - r), (0, cols - c)))


def _fast(a_op, b_op, c_acc, cfg: _Cfg):
    if cfg.legacy:
        return mma_arith.mma(a_op, b_op, c_acc, a_format=cfg.a_format, c_format=cfg.accumulator,
                             d_format=cfg.accumulator, arch=cfg.arch, mode="fast")
    prod = jnp.matmul(a_op.astype(jnp.float32), b_op.astype(jnp.float32),
                      precision=lax.Precision.HIGHEST)
    return (prod + c_acc.astype(jnp.float32)).astype(_ACC_DTYPE[cfg.accumulator])


def _tiled(a_op, b_op, c_acc, cfg: _Cfg, scales=None):
    """The k loop over the whole (M, N) output, on converted operands.

    M, N and K are padded with zeros to the tile (only where ``_check`` allows it, or in
    the backward products, where a zero k-slice leaves the sum as it is). ``scales``: the
    block scales ``(sa (M, Kb), sb (Kb, N))`` applied on each promotion (``_promote``)."""
    if cfg.mode == "fast":
        # Fast mode: one dot_general over the whole K (the backend's own accumulation);
        # tiling (and promotion) change nothing there but speed.
        return _fast(a_op, b_op, c_acc, cfg)
    (M, K), N = a_op.shape, b_op.shape[1]
    m, n, k = cfg.tile
    Mp, Np, Kp = (-(-d // t) * t for d, t in ((M, m), (N, n), (K, k)))
    a_op, b_op, acc = _pad_to(a_op, Mp, Kp), _pad_to(b_op, Kp, Np), _pad_to(c_acc, Mp, Np)
    kt = Kp // k
    if scales is not None:
        scales = (_pad_to(scales[0], Mp, scales[0].shape[1]),
                  _pad_to(scales[1], scales[1].shape[0], Np))

    def step(carry, _):
        # One k step of every output tile as a single (Mp, k) x (k, Np) instruction call:
        # an instruction's output element depends only on its row of A, its column of B
        # and its C element, so the M / N tiling changes no bit, and the operands and the
        # accumulator are read and written in their own layouts (no tile transposes,
        # which XLA had made into a copy of B before the loop).
        acc, kk = carry
        at = lax.dynamic_slice_in_dim(a_op, kk * k, k, axis=1)  # (Mp, k)
        bt = lax.dynamic_slice_in_dim(b_op, kk * k, k, axis=0)  # (k, Np)
        if k < 8 and at.dtype == bt.dtype == jnp.float16 and jax.default_backend() == "cpu":
            at, bt = _stored(at), _stored(bt)
        return (_mma(at, bt, acc, cfg), kk + 1), None

    def chain(acc, k0, length):  # k tiles k0 .. k0 + length - 1, in order
        return lax.scan(step, (acc, jnp.asarray(k0, jnp.int32)), None, length=length)[0][0]

    if cfg.promote_every is None:
        acc = chain(acc, 0, kt)
    else:
        # Promotion: each interval's chain starts from +0; its fp32 result is added to
        # the fp32 accumulator with an ordinary (round-to-nearest) fp32 addition.
        s = cfg.promote_every // k
        full, rem = divmod(kt, s)
        zero = jnp.zeros_like(acc)

        def interval(carry, _):
            acc, k0 = carry
            return (_promote(acc, chain(zero, k0, s), k0 // s, scales), k0 + s), None

        if full:
            acc = lax.scan(interval, (acc, jnp.int32(0)), None, length=full)[0][0]
        if rem:
            acc = _promote(acc, chain(zero, full * s, rem), full, scales)
    return acc[:M, :N]


def _promote(acc, p, kb, scales):
    """One promotion: ``acc + P`` (fp32, rn); with block scales DeepGEMM's
    ``acc += (sa * sb) * P``: ``fma_rn(fl32(sa[m, kb] * sb[kb, n]), P, acc)``."""
    if scales is None:
        return acc + p
    sa = lax.dynamic_index_in_dim(scales[0], kb, axis=1, keepdims=True)  # (Mp, 1)
    sb = lax.dynamic_index_in_dim(scales[1], kb, axis=0, keepdims=True)  # (1, Np)
    return fma_rn(multiply_rn(sa, sb), p, acc)


def _block_forward(a, b, c, sa, sb, cfg: _Cfg):
    """Block-scaled fp8 (DeepSeek-V3): operands divided by their block's scale and
    converted; every 128 k-elements the chain's partial P is promoted with the scales."""
    (M, K), N = a.shape, b.shape[1]
    bm = (1 if sa.shape[0] == M else blockwise.BLOCK, blockwise.BLOCK)
    bn = (blockwise.BLOCK, 1 if sb.shape[1] == N else blockwise.BLOCK)
    qa = to_operand(a, cfg.a_format, blockwise.expand_scales(sa, (M, K), bm))
    qb = to_operand(b, cfg.b_format, blockwise.expand_scales(sb, (K, N), bn))
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
    return _tiled(qa, qb, acc, cfg, (sa_rows, sb_cols))


def _forward(a, b, c, sa, sb, cfg: _Cfg):
    acc_dt = _ACC_DTYPE[cfg.accumulator]
    if cfg.blockwise:
        return _block_forward(a, b, c, sa, sb, cfg)
    if not cfg.scaled:
        return _tiled(to_operand(a, cfg.a_format), to_operand(b, cfg.b_format),
                      c.astype(acc_dt), cfg)
    t = _tiled(to_operand(a, cfg.a_format, sa), to_operand(b, cfg.b_format, sb),
               jnp.zeros(c.shape, acc_dt), cfg)
    return _epilogue(t, multiply_rn(sa, sb), c).astype(acc_dt)


def _epilogue(t, s, c):
    """``fl32(fl32(t * s) + c)``: two roundings, never one fused multiply-add.

    Both are IEEE operations on the bits (``multiply_rn``, ``softfloat.add_rn``): XLA's
    CPU backend flushes subnormal operands and results (the GPU does not) and contracts
    ``t * s + c`` into an FMA inside a fusion; integer operations do neither."""
    f32 = functools.partial(times_pow2, k=jnp.int32(0), out_fmt="f32")  # exact widening
    p = multiply_rn(f32(t), jnp.asarray(s, jnp.float32))
    out = softfloat.add_rn(softfloat.term(bitops.to_u32(p), "f32"),
                           softfloat.term(bitops.to_u32(f32(c)), "f32"), "f32", 0x7FC00000)
    return bitops.from_u32(out, jnp.float32)


@functools.partial(jax.custom_vjp, nondiff_argnums=(5,))
def _matmul(a, b, c, sa, sb, cfg):
    return _forward(a, b, c, sa, sb, cfg)


def _fwd(a, b, c, sa, sb, cfg):
    return _matmul(a, b, c, sa, sb, cfg), (a, b, c, sa, sb)


def _bwd(cfg: _Cfg, res, g):
    # Straight-through estimator: the operand conversions pass gradients unchanged.
    # The backward products run on the emulated tensor core, like a GPU's backward.
    a, b, c, sa, sb = res
    acc_dt = _ACC_DTYPE[cfg.accumulator]
    bcfg = dataclasses.replace(cfg, scaled=False, blockwise=False)

    def product(x, y):  # x @ y through the tensor core
        M, K = x.shape
        N = y.shape[1]
        if cfg.fp8:
            # Current per-tensor power-of-two scaling of both operands, the forward's
            # format pairing: x * 2**kx rounded once to fp32, then to fp8; the product
            # times 2**-(kx + ky) rounded once to the accumulator. Integer operations on
            # the bits (times_pow2): the same bits on every backend.
            kx = tensor_scale_exponent(x, cfg.a_format)
            ky = tensor_scale_exponent(y, cfg.b_format)
            t = _tiled(to_operand(times_pow2(x, kx, "f32"), cfg.a_format),
                       to_operand(times_pow2(y, ky, "f32"), cfg.b_format),
                       jnp.zeros((M, N), acc_dt), bcfg)
            return times_pow2(t, -(kx + ky), cfg.accumulator)
        if not cfg.legacy:
            return _tiled(to_operand(x, cfg.a_format), to_operand(y, cfg.b_format),
                          jnp.zeros((M, N), acc_dt), bcfg)
        # WMMA: the tile permuted to fit, as before.
        m, n, k = cfg.tile
        shapes = TILES["wmma"][cfg.a_format]
        for t in ((m, n, k), (m, k, n), (k, n, m), (n, m, k), (n, k, m), (k, m, n)):
            if t in shapes and M % t[0] == 0 and N % t[1] == 0 and K % t[2] == 0:
                promote = cfg.promote_every if cfg.promote_every and \
                    cfg.promote_every % t[2] == 0 else None
                tcfg = dataclasses.replace(bcfg, tile=t, promote_every=promote)
                return _tiled(to_operand(x, cfg.a_format), to_operand(y, cfg.b_format),
                              jnp.zeros((M, N), acc_dt), tcfg)
        raise ValueError(
            f"the backward product {M}x{K} @ {K}x{N} fits no {cfg.a_format} WMMA tile; "
            f"make M, N and K multiples of every dimension of tile={cfg.tile}"
        )

    g = g.astype(acc_dt)
    da = product(g, b.T).astype(a.dtype)
    db = product(a.T, g).astype(b.dtype)
    return da, db, g.astype(c.dtype), jnp.zeros_like(sa), jnp.zeros_like(sb)


_matmul.defvjp(_fwd, _bwd)


def matmul(
    a: Any,
    b: Any,
    c: Any = None,
    *,
    operand_format: str | tuple[str, str] = "f16",
    accumulator: str = "f32",
    tile: tuple[int, int, int] | None = None,
    arch: str = "sm_90",
    mode: str = "exact",
    instruction: str | None = None,
    promote_every: int | None = None,
    a_scale: Any = None,
    b_scale: Any = None,
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
            ``"sm_90a"``, the only target that has wgmma).
        mode: ``"exact"`` (the tensor core's own arithmetic, bit for bit) or
            ``"fast"`` (operands rounded, one ``dot_general`` over all of K with fp32
            accumulation: round-to-nearest on a CPU; promotion changes nothing there).
        instruction: ``"wmma"``, ``"mma_sync"``, ``"wgmma"`` or ``"tcgen05"`` (with
            ``arch="sm_100a"`` or ``"sm_103a"``); None: ``"wmma"`` for f16/bf16/tf32/f64,
            ``"wgmma"`` for fp8 (:data:`DEFAULT_INSTRUCTION`).
        promote_every: None, or N (a multiple of the tile's k): the k loop restarts
            from zero every N k-elements and each partial result is added to an fp32
            accumulator with fp32 round-to-nearest (DeepSeek-V3's promotion; see the
            module docstring). Needs ``accumulator="f32"``.
        a_scale, b_scale: fp8 only: per-tensor fp32 scale factors (scalars, may be
            traced): the operands are ``a / a_scale``, ``b / b_scale`` in fp8
            (saturating) and the tensor core's result is multiplied by
            ``a_scale * b_scale`` in fp32 before C is added (module docstring). Or block
            scales (2-D, may be traced; ``jaxwarp.fp8.quantize_blockwise`` makes them):
            ``a_scale`` (M, ceil(K/128)) or (ceil(M/128), ceil(K/128)), ``b_scale``
            (ceil(K/128), ceil(N/128)) or (ceil(K/128), N), applied on each promotion
            every 128 k-elements (DeepSeek-V3; module docstring); a missing one is 1.
            Needs ``accumulator="f32"`` and ``promote_every`` None or 128.

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
    operand_format = checks.format_name(operand_format, "operand_format", OPERAND_FORMATS,
                                        formats.ALIASES, need_x64=False)  # _check does it
    accumulator = checks.format_name(accumulator, "accumulator", None, formats.ALIASES)
    a, b = checks.array_args(a=a, b=b)
    c = None if c is None else checks.array_arg(c, "c")
    a_scale = None if a_scale is None else checks.array_arg(a_scale, "a_scale")
    b_scale = None if b_scale is None else checks.array_arg(b_scale, "b_scale")
    a, b, c, a_scale, b_scale, cfg = _check(
        a, b, c, operand_format, accumulator, tile, arch, mode, instruction, promote_every,
        a_scale, b_scale)
    if c is None:
        c = jnp.zeros((a.shape[0], b.shape[1]), _ACC_DTYPE[cfg.accumulator])
    one = jnp.float32(1)
    if a.shape[1] == 0:  # K = 0: no instruction runs, D is C (through the fp8 epilogue)
        acc_dt = _ACC_DTYPE[cfg.accumulator]
        if not cfg.scaled:  # (block scales too: no block is promoted)
            return c.astype(acc_dt)
        s = multiply_rn(one if a_scale is None else a_scale,
                        one if b_scale is None else b_scale)
        return _epilogue(jnp.zeros(c.shape, acc_dt), s, c).astype(acc_dt)
    return _matmul(a, b, c, one if a_scale is None else a_scale,
                   one if b_scale is None else b_scale, cfg)
