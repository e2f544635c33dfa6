"""Block-scaled GEMM: ``D = A @ B`` with A and B in a microscaling format, through the
block-scaled tensor core (``jaxwarp.mx.matmul``).

A (..., M, K) and B (..., K, N) are quantized along K (or given as
:class:`~jaxwarp._src.scaling.mx.MXTensor` operands quantized along K), and the product
runs as a block-scaled tensor-core GEMM does:

* ``mode="exact"``: K is walked in steps of the instruction's k (32 for
  ``kind::mxf8f6f4``, 64 for ``kind::mxf4`` / ``kind::mxf4nvf4``), every output element
  of every (M, N) tile at once, the fp32 accumulator chained from step to step through
  the block-scaled datapath of :mod:`~jaxwarp._src.arithmetic.block_scale` (MMA-Sim
  2.1.1's model of sm_100a / sm_120a): the same bits as chaining
  ``jaxwarp.mma_block_scale_logical`` over the (M, N) tiles of the instruction, D of one
  step the C of the next, starting from C = +0.
* ``mode="fast"``: ``dequantize(A) @ dequantize(B)`` as one float32 ``dot_general`` at
  ``Precision.HIGHEST`` (the backend's own summation order and rounding: close to, not
  bit-exact with, the tensor core).

The kind follows the formats (:func:`kind_for`): NVFP4 x NVFP4 is ``kind::mxf4nvf4``
(block 16, ue4m3 scales); MXFP4 x MXFP4 ``kind::mxf4`` (block 32, ue8m0); any other
pair of MXFP8 / MXFP6 / MXFP4 operands ``kind::mxf8f6f4`` (block 32, ue8m0). MXINT8 has
no block-scaled tensor-core instruction.

NVFP4's per-tensor fp32 scales are applied in the epilogue, as cuBLAS applies a GEMM's
``alpha``: ``alpha = s_A * s_B`` (an fp32 product, rounded to nearest even), then ``D =
alpha * acc``, one fp32 multiplication of the block-scaled accumulator, rounded once to
nearest even (both on the bits, :func:`~jaxwarp._src.scaling.tensor_scale.multiply_rn`, the
same on every backend).

Gradients (float operands only): a ``custom_vjp`` whose backward products are
block-scaled GEMMs too, every operand quantized along *its* contraction axis of that
product, as TransformerEngine's MXFP8 recipe documents (each tensor has a row-wise and a
column-wise quantized copy): dgrad ``dA = dD @ B^T`` quantizes dD and B along N; wgrad
``dB = A^T @ dD`` quantizes A and dD along M. :class:`Plan` says how each of the six
quantizations is done (format, block, rounding, random Hadamard transform); the recipes
of ``jaxwarp.emulate`` (``emulate/recipes.py``) are plans.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxwarp._src import checks
from jaxwarp._src.arithmetic import block_scale
from jaxwarp._src.catalogue import isa
from jaxwarp._src.catalogue.arch import parse_target
from jaxwarp._src.numerics import softfloat
from jaxwarp._src.scaling.mx import MXTensor, check_tensor, dequantize, quantize
from jaxwarp._src.scaling.mx_formats import MX_FORMATS
from jaxwarp._src.scaling.tensor_scale import multiply_rn, times_pow2

INSTRUCTIONS = isa.BLOCK_SCALE_INSTRUCTIONS
MODES = ("exact", "fast")
#: Points of the random Hadamard transform (TransformerEngine's NVFP4 recipe: 16).
RHT_SIZE = 16


# --------------------------------------------------------------------------------------
# Plans: how each operand of the three products is quantized.


@dataclasses.dataclass(frozen=True)
class Quantizer:
    """How one operand of one product is quantized (along that product's contraction
    axis).

    Attributes:
      fmt: a key of ``jaxwarp.mx.MX_FORMATS``.
      block: the block: an int (1D along the contraction axis), a pair (2D blocks over
        the operand's last two axes, e.g. ``(16, 16)`` for NVFP4 weights: the same
        quantized tensor serves a product and its transpose), or None for the format's.
      scale_rule: the scale rule (``jaxwarp.mx.SCALE_RULES``), None for the format's
        default.
      stochastic: round the elements stochastically (``mode="rs"`` of ``quantize``, with
        bits drawn from the GEMM's PRNG key) instead of to nearest even.
      rht: apply the 16-point random Hadamard transform along the contraction axis
        before quantizing (:func:`random_hadamard`; both operands of a product must
        have it, with the same signs, so that the product is unchanged in exact
        arithmetic).

    Example:
      >>> Quantizer("nvfp4", block=(16, 16)).block
      (16, 16)
    """

    fmt: str
    block: int | tuple[int, int] | None = None
    scale_rule: str | None = None
    stochastic: bool = False
    rht: bool = False

    def __post_init__(self):
        checks.static_choice(self.fmt, "Quantizer.fmt", tuple(MX_FORMATS))
        checks.static_choice(self.stochastic, "Quantizer.stochastic", (False, True))
        checks.static_choice(self.rht, "Quantizer.rht", (False, True))
        if self.block is not None and not isinstance(self.block, (int, tuple)):
            raise TypeError(f"Quantizer.block must be None, an int or a pair, got "
                            f"{self.block!r}")


@dataclasses.dataclass(frozen=True)
class Plan:
    """The quantizations and the tensor core of a block-scaled GEMM and its gradients.

    ``fprop = (A, B)`` of ``D = A @ B`` (along K); ``dgrad = (dD, B^T)`` of ``dA = dD @
    B^T`` (along N); ``wgrad = (A^T, dD)`` of ``dB = A^T @ dD`` (along M).

    Example:
      >>> q = Quantizer("mxfp8_e4m3")
      >>> Plan((q, q), (q, q), (q, q)).instruction
      'tcgen05'
    """

    fprop: tuple[Quantizer, Quantizer]
    dgrad: tuple[Quantizer, Quantizer]
    wgrad: tuple[Quantizer, Quantizer]
    instruction: str = "tcgen05"
    arch: str | None = None
    mode: str = "exact"

    @property
    def needs_key(self) -> bool:
        """Whether a PRNG key is needed (stochastic rounding or a random Hadamard
        transform somewhere)."""
        return any(q.stochastic or q.rht for q in self.fprop + self.dgrad + self.wgrad)

    def check(self) -> Plan:
        """Checks the instruction, target, mode and every product's pair of formats
        (eagerly; raises ValueError naming what is wrong)."""
        checks.static_choice(self.instruction, "instruction", INSTRUCTIONS)
        checks.static_choice(self.mode, "mode", MODES)
        for name, (qa, qb) in (("fprop", self.fprop), ("dgrad", self.dgrad),
                               ("wgrad", self.wgrad)):
            kind, _, _ = kind_for(qa.fmt, qb.fmt)
            _row_target(self.instruction, kind, self.arch)
            if qa.rht != qb.rht:
                raise ValueError(f"{name}: rht must be the same for both operands of a "
                                 f"product (the transform cancels only in pairs)")
        return self


def kind_for(a_fmt: str, b_fmt: str) -> tuple[str, int, str]:
    """``(kind, block, scale_format)`` of the instruction that multiplies two formats.

    Example:
      >>> kind_for("nvfp4", "nvfp4"), kind_for("mxfp8_e4m3", "mxfp4_e2m1")
      (('mxf4nvf4', 16, 'ue4m3'), ('mxf8f6f4', 32, 'ue8m0'))
    """
    fa, fb = MX_FORMATS[a_fmt], MX_FORMATS[b_fmt]
    if fa.int_lsb is not None or fb.int_lsb is not None:
        raise ValueError(f"fmt {(a_fmt, b_fmt)}: MXINT8 has no block-scaled tensor-core "
                         f"instruction; allowed: {GEMM_FORMATS}")
    if fa.tensor_scale or fb.tensor_scale:
        if not (fa.tensor_scale and fb.tensor_scale):
            raise ValueError(f"fmt {(a_fmt, b_fmt)}: NVFP4 multiplies only NVFP4 "
                             f"(kind::mxf4nvf4); MX formats pair with MX formats")
        return "mxf4nvf4", fa.block, fa.scale
    if fa.element == fb.element == "e2m1":
        return "mxf4", 32, "ue8m0"
    return "mxf8f6f4", 32, "ue8m0"


GEMM_FORMATS = tuple(n for n, f in MX_FORMATS.items() if f.int_lsb is None)


def _row_target(instruction: str, kind: str, arch: Any) -> tuple[isa.BlockScaleRow, str]:
    row = block_scale.block_scale_row(instruction, kind)
    name = row.targets[0] if arch is None else parse_target(arch).name
    if name not in row.targets:
        raise ValueError(f"arch={arch!r}: block-scaled {instruction} is on {row.targets}")
    return row, name


# --------------------------------------------------------------------------------------
# The random Hadamard transform.


def hadamard_signs(key_data: jax.Array) -> jax.Array:
    """16 random signs (bool: negate) from a raw key."""
    return jax.random.bits(jax.random.wrap_key_data(key_data), (RHT_SIZE,), jnp.uint8) >= 128


def hadamard_runs(xr: jax.Array, neg: jax.Array) -> jax.Array:
    """:func:`random_hadamard` on runs of 16 (``xr``: float32 ``(..., 16)``) with the signs
    ``neg`` (:func:`hadamard_signs`); each run on its own."""
    xb = lax.bitcast_convert_type(xr, jnp.uint32)
    xb = xb ^ (neg.astype(jnp.uint32) << 31)
    lane = jnp.arange(RHT_SIZE, dtype=jnp.int32)

    def butterfly(r, xb):  # (u, v) -> (u + v, u - v) on the pairs h = 2**r apart
        h = jnp.left_shift(jnp.int32(1), r)
        u = jnp.take(xb, lane & ~h, axis=-1)  # lane i: the pair's first entry ...
        v = jnp.take(xb, lane | h, axis=-1)  # ... and its second; the second of a pair
        tu, tv = softfloat.term(u, "f32"), softfloat.term(v, "f32")  # takes u - v
        tv = tv._replace(neg=tv.neg ^ ((lane & h) != 0))
        return softfloat.add_rn(tu, tv, "f32", 0x7FC00000)

    # One loop over the log2(16) = 4 rounds: the program holds one fp32 adder, not
    # eight (the same additions, element by element).
    xb = lax.fori_loop(0, RHT_SIZE.bit_length() - 1, butterfly, xb)
    return times_pow2(lax.bitcast_convert_type(xb, jnp.float32), jnp.int32(-2), "f32")


@functools.partial(jax.jit, static_argnums=1)
def random_hadamard(x: jax.Array, axis: int, key_data: jax.Array) -> jax.Array:
    """``x`` times ``diag(s) H16 / 4`` on every run of 16 entries along ``axis``.

    ``H16`` is the Sylvester Hadamard matrix of order 16, ``s`` 16 random signs from
    ``key_data`` (the same for every run); ``diag(s) H16 / 4`` is orthogonal, so
    applying it to both operands of a product along their contraction axis leaves the
    product unchanged in exact arithmetic (the random Hadamard transform of
    TransformerEngine's NVFP4 recipe, arXiv 2509.25149, on the wgrad operands). Each
    output is computed by the fast Walsh-Hadamard butterfly: four rounds of fp32
    additions (IEEE, rounded to nearest even on the bits, subnormals kept:
    :func:`~jaxwarp._src.numerics.softfloat.add_rn`), then an exact multiplication by
    ``2**-2`` (:func:`~jaxwarp._src.scaling.tensor_scale.times_pow2`): the same bits on
    every backend.

    Example:
      >>> x = jnp.zeros((16, 2), jnp.float32).at[0].set(4.0)
      >>> y = random_hadamard(x, 0, jnp.zeros((2,), jnp.uint32))
      >>> sorted(set(np.abs(np.asarray(y[:, 0])).tolist()))  # 4 * (+-1) / 4
      [1.0]
    """
    x = jnp.moveaxis(x, axis, -1)
    shape = x.shape
    out = hadamard_runs(x.reshape(*shape[:-1], -1, RHT_SIZE), hadamard_signs(key_data))
    return jnp.moveaxis(out.reshape(shape), -1, axis)


# --------------------------------------------------------------------------------------
# One product of quantized operands.


def _codes(t: MXTensor) -> jax.Array:
    e = t.elements
    return e if e.dtype == jnp.uint8 else lax.bitcast_convert_type(e, jnp.uint8)


def _k_scales(t: MXTensor, side: str, kblock: int, name: str) -> jax.Array:
    """The block scales of an operand quantized along K, one per (row, K block) of A
    (``side="a"``: (..., M, K / kblock)) or (K block, column) of B ((..., K / kblock,
    N)); a 2D block is repeated along the other axis."""
    axis = -1 if side == "a" else -2
    if isinstance(t.block, tuple):
        kb = t.block[1] if side == "a" else t.block[0]
        other = t.block[0] if side == "a" else t.block[1]
        if kb != kblock:
            raise ValueError(f"{name}: its 2D block {t.block} has {kb} along K; the "
                             f"instruction needs {kblock}")
        return jnp.repeat(t.scales, other, axis=-2 if side == "a" else -1)
    if t.axis != axis or t.block != kblock:
        raise ValueError(f"{name} must be quantized along K (axis={axis}) in blocks of "
                         f"{kblock}; got axis={t.axis}, block={t.block}")
    return t.scales


def product(ta: MXTensor, tb: MXTensor, instruction: str, arch: Any, mode: str,
             names=("a", "b")) -> jax.Array:
    """``D = A @ B`` of two operands quantized along K (float32, (..., M, N))."""
    kind, kblock, scale_format = kind_for(ta.fmt, tb.fmt)
    row, _ = _row_target(instruction, kind, arch)
    fa = MX_FORMATS[ta.fmt]
    sa = _k_scales(ta, "a", kblock, names[0])  # checks both modes' operands
    sb = _k_scales(tb, "b", kblock, names[1])
    if mode == "fast":
        return jnp.matmul(dequantize(ta), dequantize(tb), precision=lax.Precision.HIGHEST,
                          preferred_element_type=jnp.float32)
    cfg = exact_cfg(ta.fmt, tb.fmt, instruction, arch, ta.shape[-1])
    acc = _chain(_codes(ta), _codes(tb), sa, sb, cfg, _rows(ta.shape, tb.shape))
    if fa.tensor_scale:  # the epilogue: alpha = s_A * s_B, D = alpha * acc (rounded once)
        acc = epilogue(acc, ta.tensor_scale, tb.tensor_scale)
    return acc


def exact_cfg(a_fmt: str, b_fmt: str, instruction: str, arch: Any, k: int
              ) -> block_scale.BlockScaleCfg:
    """The instruction of an exact product of ``a_fmt`` x ``b_fmt`` operands with
    contraction length ``k`` (checked: its block and scale format, ``k`` a multiple of
    the instruction's)."""
    kind, kblock, scale_format = kind_for(a_fmt, b_fmt)
    row, _ = _row_target(instruction, kind, arch)
    if (kblock, scale_format) not in row.scales:
        raise ValueError(f"kind::{kind} has no block {kblock} with {scale_format} scales; "
                         f"allowed: {row.scales}")
    if k % row.k:
        raise ValueError(f"K = {k} must be a multiple of the instruction's k {row.k} "
                         f"(kind::{kind}); pad the operands with zeros")
    fa, fb = MX_FORMATS[a_fmt], MX_FORMATS[b_fmt]
    return block_scale.BlockScaleCfg(fa.element, fb.element, scale_format, kblock, row.k,
                                     block_scale.DATAPATHS[kind])


def chain_step(a, b, sa, sb, bits, cfg: block_scale.BlockScaleCfg):
    """One instruction (k = ``cfg.ik``) on every output from the accumulator ``bits``
    (uint32 (..., M, N)): codes ``a`` (..., M, ik), ``b`` (..., ik, N), scale codes
    ``sa`` (..., M, ik / block), ``sb`` (..., ik / block, N). An output depends only on
    its row of A, its column of B and its own accumulator."""
    ops = (block_scale.decode_operands(a, cfg.a_format, cfg.dp),
           block_scale.decode_operands(b, cfg.b_format, cfg.dp))
    return block_scale.issue_instruction(*ops, sa, sb, bits, cfg)


def epilogue(acc: jax.Array, s_a: jax.Array, s_b: jax.Array) -> jax.Array:
    """NVFP4's epilogue: ``alpha = s_A * s_B`` (fp32, rounded to nearest even), then
    ``D = alpha * acc``, rounded once."""
    return multiply_rn(acc, multiply_rn(s_a, s_b))


#: Outputs per block of rows that the exact GEMM computes at once (a bound on the
#: size of one k step's temporaries).
CHUNK_OUTPUTS = 1 << 20


def _rows(a_shape, b_shape) -> int:
    """Rows of A per block: the largest power of two with ``rows * N <= CHUNK_OUTPUTS``
    that divides M (2-D operands; M otherwise)."""
    m, n = a_shape[-2], b_shape[-1]
    if len(a_shape) != 2 or len(b_shape) != 2:
        return m
    rows = 1 << max(0, (CHUNK_OUTPUTS // max(n, 1)).bit_length() - 1)
    while rows > 1 and m % rows:
        rows //= 2
    return m if rows >= m or rows < 16 else rows


@functools.partial(jax.jit, static_argnums=(4, 5))
def _chain(a, b, sa, sb, cfg, rows: int):
    """The instructions of the GEMM, K step by K step (``lax.scan``), each on every
    output of a block of ``rows`` rows (``lax.map`` over the blocks): the uint8 codes
    are sliced and decoded inside the step, so that no decoded or transposed copy of
    the operands is stored (memory: the operands, the fp32 result and one step's
    temporaries for ``rows`` x N outputs). The blocks change no bit: each output is its
    own chain, from C = +0."""
    ik, nb = cfg.ik, cfg.ik // cfg.block
    n = a.shape[-1] // ik
    if n == 0:  # K = 0 (a backward product of an empty operand): no instruction, D = +0
        batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        return jnp.zeros((*batch, a.shape[-2], b.shape[-1]), jnp.float32)

    def block(a, sa):
        batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        c = jnp.zeros((*batch, a.shape[-2], b.shape[-1]), jnp.uint32)

        def step(bits, i):
            ai = lax.dynamic_slice_in_dim(a, i * ik, ik, axis=-1)
            bi = lax.dynamic_slice_in_dim(b, i * ik, ik, axis=-2)
            sai = lax.dynamic_slice_in_dim(sa, i * nb, nb, axis=-1)
            sbi = lax.dynamic_slice_in_dim(sb, i * nb, nb, axis=-2)
            return chain_step(ai, bi, sai, sbi, bits, cfg), None

        bits, _ = lax.scan(step, c, jnp.arange(n))
        return lax.bitcast_convert_type(bits, jnp.float32)

    m = a.shape[-2]
    if rows >= m:
        return block(a, sa)
    nblk = m // rows
    out = lax.map(lambda x: block(*x), (a.reshape(nblk, rows, a.shape[-1]),
                                         sa.reshape(nblk, rows, sa.shape[-1])))
    return out.reshape(m, b.shape[-1])


# --------------------------------------------------------------------------------------
# The differentiable GEMM of float operands.


#: A product's contraction axis is zero-padded to a multiple of this (every block size and
#: instruction k divides it), as a kernel's out-of-bounds tile loads fill zeros: a zero
#: element adds nothing to a block's amax, an NVFP4 tensor's amax or a product. The public
#: ``matmul`` takes only a K that needs none (or one all-zero k step at most, which leaves
#: the bits as they are); the backward products' M or N and emulate's recipe products may.
K_PAD = 64


def _pad_axis(x: jax.Array, axis: int, multiple: int) -> jax.Array:
    n = x.shape[axis]
    extra = -n % multiple
    if not extra:
        return x
    widths = [(0, 0)] * x.ndim
    widths[axis] = (0, extra)
    return jnp.pad(x, widths)


def quantizer_block(q: Quantizer) -> int | tuple[int, int]:
    """The block ``q`` quantizes in (its own, else its format's)."""
    return MX_FORMATS[q.fmt].block if q.block is None else q.block


def pad_operand(x: jax.Array, q: Quantizer, axis: int) -> jax.Array:
    """``x`` zero-padded for ``q`` along ``axis`` (-1 for A, -2 for B): the contraction
    axis to a multiple of :data:`K_PAD`, the other axis of a 2D block to its block."""
    block = quantizer_block(q)
    x = _pad_axis(x, axis, K_PAD)
    if isinstance(block, tuple):  # the other axis too, to its block
        x = _pad_axis(x, -2 if axis == -1 else -1, block[0] if axis == -1 else block[1])
    return x


def quantize_along(x: jax.Array, q: Quantizer, axis: int, key_data: jax.Array,
                    salt: int) -> MXTensor:
    """``x`` (zero-padded) quantized by ``q`` along ``axis`` (-1 for A, -2 for B; a 2D
    block tiles the last two axes)."""
    block = quantizer_block(q)
    x = pad_operand(x, q, axis)
    base = jax.random.wrap_key_data(key_data)
    if q.rht:  # the same signs for every operand of every product
        x = random_hadamard(x, axis, jax.random.key_data(jax.random.fold_in(base, 0)))
    kwargs = {}
    if q.stochastic:
        kwargs = dict(mode="rs", key=jax.random.key_data(jax.random.fold_in(base, salt)))
    return quantize(x, q.fmt, block=block, axis=-1 if isinstance(block, tuple) else axis,
                    scale_rule=q.scale_rule, **kwargs)


def _qproduct(x, y, qs: tuple[Quantizer, Quantizer], plan: Plan, key_data, salt: int):
    """``x @ y`` (float32 (..., M, K), (..., K, N)), each quantized along K by ``qs``."""
    tx = quantize_along(x, qs[0], -1, key_data, salt)
    ty = quantize_along(y, qs[1], -2, key_data, salt + 1)
    d = product(tx, ty, plan.instruction, plan.arch, plan.mode)
    return d[..., :x.shape[-2], :y.shape[-1]]


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def gemm(x: jax.Array, w: jax.Array, key_data: jax.Array, plan: Plan) -> jax.Array:
    """``x @ w`` (float32 (..., M, K) and (..., K, N)) as a block-scaled GEMM of
    ``plan``, with the backward products of ``plan`` (see the module docstring).
    ``key_data``: a raw uint32 (2,) key (any, e.g. zeros, when the plan needs none)."""
    return _qproduct(x, w, plan.fprop, plan, key_data, 1)


def _gemm_fwd(x, w, key_data, plan):
    return _qproduct(x, w, plan.fprop, plan, key_data, 1), (x, w, key_data)


def _gemm_bwd(plan: Plan, res, g):
    x, w, key_data = res
    g = g.astype(jnp.float32)
    dx = _qproduct(g, jnp.swapaxes(w, -1, -2), plan.dgrad, plan, key_data, 3)
    dw = _qproduct(jnp.swapaxes(x, -1, -2), g, plan.wgrad, plan, key_data, 5)
    return unbroadcast(dx, x), unbroadcast(dw, w), None


def unbroadcast(d: jax.Array, x: jax.Array) -> jax.Array:
    """``d`` summed over the batch axes that ``x`` was broadcast along."""
    lead = d.ndim - x.ndim
    axes = tuple(range(lead)) + tuple(lead + i for i, n in enumerate(x.shape[:-2])
                                      if n == 1 and d.shape[lead + i] != 1)
    return jnp.sum(d, axis=axes).reshape(x.shape).astype(x.dtype) if axes else d.astype(
        x.dtype)


gemm.defvjp(_gemm_fwd, _gemm_bwd)
_gemm_jit = jax.jit(gemm, static_argnums=3)


# --------------------------------------------------------------------------------------
# The public function.


def _format_pair(operand_format: Any) -> tuple[str, str]:
    fmt = operand_format
    if isinstance(fmt, (tuple, list)):
        if len(fmt) != 2:
            raise ValueError(f"operand_format={fmt!r}: a pair is (A's format, B's format)")
        pair = tuple(fmt)
    else:
        pair = (fmt, fmt)
    for f in pair:
        if not isinstance(f, str) or f not in GEMM_FORMATS:
            raise ValueError(f"operand_format={fmt!r} is not supported; allowed: "
                             f"{GEMM_FORMATS} or a pair of them (A's, B's)")
    return pair


def _operand_arg(x: Any, name: str) -> jax.Array | MXTensor:
    if isinstance(x, MXTensor):
        check_tensor(x, name)  # its fields agree, as quantize makes them
        if x.fmt not in MX_FORMATS:  # a user-defined element format (define_format)
            raise ValueError(f"{name} is an MXTensor of the user-defined format {x.fmt!r}, "
                             f"which no tensor core multiplies; allowed: {GEMM_FORMATS} "
                             f"(multiply its elements with jaxwarp.fused_dot)")
        if MX_FORMATS[x.fmt].int_lsb is not None:
            raise ValueError(f"{name} is an MXINT8 tensor: MXINT8 has no block-scaled "
                             f"tensor-core instruction; allowed: {GEMM_FORMATS}")
        return x
    arr = checks.array_arg(x, name)
    if arr.dtype in (jnp.dtype(jnp.float16), jnp.dtype(jnp.bfloat16)):
        arr = arr.astype(jnp.float32)  # exact
    if arr.dtype != jnp.float32:
        raise TypeError(f"{name} must be a float32 (or float16 / bfloat16) array or an "
                        f"MXTensor, got dtype {arr.dtype}")
    if arr.ndim < 2:
        raise ValueError(f"{name} must be at least 2-D, got shape {arr.shape}")
    return arr


@checks.renamed_keywords("jaxwarp.mx.matmul", fmt="operand_format")
def matmul(a: Any, b: Any, operand_format: str | tuple[str, str] = "mxfp8_e4m3", *,
           instruction: str = "tcgen05", arch: str | None = None, mode: str = "exact",
           scale_rule: str | None = None) -> jax.Array:
    """``A @ B`` as a block-scaled tensor-core GEMM (MXFP8, MXFP6, MXFP4 or NVFP4).

    Float operands are quantized along K with :func:`jaxwarp.mx.quantize` (rounded to
    nearest even; ``scale_rule`` or the format's default rule, ``"rceil"`` for the MX
    formats; NVFP4 with its 1x16 blocks and per-tensor scale);
    :class:`~jaxwarp.mx.MXTensor` operands are used as they are (A quantized along its
    last axis, B along its second to last, in the instruction's block, or 2D blocks
    with that extent along K). Then:

    * ``mode="exact"``: the tensor core's arithmetic, bit for bit as MMA-Sim 2.1.1
      models it: K in steps of the instruction's k (``kind::mxf8f6f4`` 32,
      ``kind::mxf4`` / ``mxf4nvf4`` 64), every output at once, the fp32 accumulator
      chained from step to step from C = +0 (the same bits as chaining
      ``jaxwarp.mma_block_scale_logical``). NVFP4: ``D = (s_A * s_B) * acc``, one fp32
      multiplication in the epilogue, rounded once to nearest even (``s_A * s_B`` is
      itself an fp32 product, as a GEMM's ``alpha``).
    * ``mode="fast"``: ``dequantize(A) @ dequantize(B)`` in float32 at
      ``Precision.HIGHEST``: the same quantized values, the backend's own summation
      (not bit-exact to the tensor core).

    The kind: NVFP4 x NVFP4 ``kind::mxf4nvf4``, MXFP4 x MXFP4 ``kind::mxf4``, any other
    MX pair ``kind::mxf8f6f4``. The arithmetic of a kind is the same on sm_100a
    (tcgen05) and sm_120a (mma.sync) in MMA-Sim 2.1.1; ``instruction`` and ``arch``
    choose the target that is checked.

    Gradients (float operands): the backward products are block-scaled GEMMs of the
    same formats (``dA = dD @ B^T`` with dD and B quantized along N, ``dB = A^T @ dD``
    with A and dD along M), A's format for dD; MXTensor operands have no gradient.

    Args:
      a: (..., M, K) float32 (float16 / bfloat16 widened exactly) or an MXTensor.
      b: (..., K, N) float32 or an MXTensor. Batch axes broadcast. K must be a
        multiple of the instruction's k (32; 64 for ``kind::mxf4`` / ``mxf4nvf4``), as
        ``jaxwarp.matmul``'s K of its tile's k: pad K with zeros before the call. K = 0
        gives +0 (no instruction runs), as there.
      operand_format: static format of float operands (a key of
        ``jaxwarp.mx.MX_FORMATS`` but ``"mxint8"``), or a pair (A's, B's); as
        ``jaxwarp.matmul``'s. Its old name ``fmt=`` still works, with a
        ``DeprecationWarning``.
      instruction: ``"tcgen05"`` (sm_100a) or ``"mma_sync"`` (sm_120a).
      arch: the target (default the instruction's first: ``"sm_100a"``, ``"sm_120a"``).
      mode: ``"exact"`` or ``"fast"``.
      scale_rule: the MX scale rule of float operands (``jaxwarp.mx.SCALE_RULES``),
        None for the format's default (``jaxwarp.mx.DEFAULT_SCALE_RULE``, ``"rceil"``,
        for MX; ``"nvfp4"`` for NVFP4).

    Returns:
      (..., M, N) float32.

    Raises:
      ValueError / TypeError: a format, instruction, target, mode, scale rule, dtype,
        shape, block or quantization axis that is not allowed (the message names the
        argument and what is allowed), eagerly and under ``jax.jit``.

    Example:
      >>> a = jnp.full((128, 64), 1.5, jnp.float32); b = jnp.full((64, 8), -2.0, jnp.float32)
      >>> d = jaxwarp.mx.matmul(a, b, "mxfp8_e4m3")
      >>> float(d[0, 0])  # 64 * 1.5 * -2
      -192.0
      >>> # NVFP4: 1.5 and -2 are e2m1 values times fp32 scales that are no powers of two
      >>> float(jaxwarp.mx.matmul(a, b, "nvfp4", instruction="mma_sync")[0, 0])
      -192.0000152...
    """
    pair = _format_pair(operand_format)
    checks.static_choice(instruction, "instruction", INSTRUCTIONS)
    checks.static_choice(mode, "mode", MODES)
    a = _operand_arg(a, "a")
    b = _operand_arg(b, "b")
    fa = a.fmt if isinstance(a, MXTensor) else pair[0]
    fb = b.fmt if isinstance(b, MXTensor) else pair[1]
    if scale_rule is not None:
        for x, f in ((a, fa), (b, fb)):
            if not isinstance(x, MXTensor):
                checks.static_choice(scale_rule, "scale_rule", MX_FORMATS[f].scale_rules)
    kind, kblock, _ = kind_for(fa, fb)
    _row_target(instruction, kind, arch)
    k, k2 = a.shape[-1], b.shape[-2]
    if k != k2:
        raise ValueError(f"a is (..., M, K) = {a.shape} and b (..., K, N) = {b.shape}: "
                         f"their K differ")
    row = block_scale.block_scale_row(instruction, kind)
    if k % row.k:  # as jaxwarp.matmul: the caller pads K, as a kernel's would
        raise ValueError(f"a (..., M, K) = {a.shape}: K must be a multiple of the "
                         f"instruction's k {row.k} (kind::{kind}); pad K (A's columns, B's "
                         f"rows) with zeros to a multiple of {row.k}, before quantizing")
    try:
        batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except ValueError as e:
        raise ValueError(f"batch axes of a {a.shape} and b {b.shape} do not broadcast") \
            from e
    if k == 0:  # as jaxwarp.matmul: no instruction runs, D is C = +0
        return jnp.zeros((*batch, a.shape[-2], b.shape[-1]), jnp.float32)
    if not isinstance(a, MXTensor) and not isinstance(b, MXTensor):
        qa, qb = Quantizer(fa, scale_rule=scale_rule), Quantizer(fb, scale_rule=scale_rule)
        plan = Plan((qa, qb), (qa, qb), (qa, qa), instruction, arch, mode).check()
        return _gemm_jit(a, b, jnp.zeros((2,), jnp.uint32), plan)
    rule = {} if scale_rule is None else dict(scale_rule=scale_rule)
    ta = a if isinstance(a, MXTensor) else quantize(a, fa, axis=-1, **rule)
    tb = b if isinstance(b, MXTensor) else quantize(b, fb, axis=-2, **rule)
    return product(ta, tb, instruction, arch, mode)
