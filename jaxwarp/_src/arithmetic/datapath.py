"""Tensor-core arithmetic: what one chain of MMA instructions computes, bit for bit.

``mma(a, b, c)`` returns ``D = A @ B + C`` for logical (unfragmented) matrices in the
arithmetic of the tensor core. The instruction family (``instruction``: ``"wmma"``,
``"mma_sync"``, ``"wgmma"``) and its k (``instruction_k``) fix what one instruction
sums; a k axis longer than one instruction is a chain of instructions in k order, the D
of one being the C of the next, as in a GEMM main loop. What the target can issue
(:class:`~jaxwarp._src.catalogue.arch.Target`) and how its tensor cores add
(:class:`~jaxwarp._src.catalogue.arch.Datapath`, per instruction family and operand
type) are data, in ``arch.py``. The sm_90 / sm_90a model is verified on every float trial
of the H100 captures (WMMA, ``mma.sync``, ``wgmma``, chains to K = 4096); the models of
sm_70 ... sm_120 against the reference model MMA-Sim 2.1.1 on every ``mma.sync``
configuration it has (``ArchModel.verified`` says which).

One instruction computes each output element as a chain of *block fused multiply-adds*
(``Datapath.c_mode == "fused"``, every f16 / bf16 / tf32 instruction and fp8 ``wgmma``):

0. fp8 operands of ``mma.sync`` are first converted exactly to f16
   (``operand_via="f16"``) and k is reordered ``k % 4 in {0, 1}`` first
   (``k_split="mod4"``): sm_90 has no fp8 ``mma.sync`` unit and runs it as two f16
   HMMAs.
1. k is cut into blocks of ``block_k`` products;
2. every product ``a_i * b_i`` is exact; its *alignment exponent* is the sum of the
   operands' exponents (``align="nominal"``), a subnormal operand counting with the
   format's minimum normal exponent (``sub_exp="emin"``: what an adder of biased
   exponent fields sees); the accumulator counts with its leading-bit exponent, but at
   least the minimum normal exponent of the format the block sums into
   (``c_sub_exp="emin"``): fp32 when C is fp32 (also with an f16 D), else D's format (a
   subnormal C of D's format counts at emin, an f16 subnormal C of an fp32 D with its
   own leading bit);
3. ``E`` is the largest alignment exponent of the non-zero terms, but never below
   ``emin - 7`` of that format (``e_floor=7``; -21 with an f16 C and D, -133 with an
   fp32 C or D or a block result, also when C is zero); every term is truncated toward
   zero (``trunc="rz"``)
   to a multiple of ``2**(E - F)``;
4. the truncated terms are added exactly;
5. the sum becomes fp32 toward zero (``block_round``; cut to ``sum_mbits`` fraction
   bits first: 13 for fp8 ``wgmma``) or, with an f16 C, f16 to nearest even directly
   (``f16_out="direct"``, a -0 result becomes +0: ``f16_zero="plus"``); with an fp32 C
   and an f16 D, D is the fp32 result rounded to f16 (nearest even), exactly as the
   fp32-D instruction's result would be (H100: 100% of a dense probe of sums next to
   f16 rounding points, ``tools/capture/probe_f16d.py``). Beyond the format's range
   the result is inf (also toward zero).

Each block after the first takes the previous block's fp32 result as its accumulator
(``block_out="f32"``), or its result rounded as D (``block_out="d"``: the older
generations as MMA-Sim models them, where an f16 D rounds every block of 8 or 4 to f16;
their parameters: ``arch.py``).
``c_mode="end"`` (fp8 ``mma.sync``): the blocks chain from +0 in d's type and C is
added last by an IEEE addition rounded to nearest (FADD / HADD2). ``c_mode="ffma"``
(``mma.sync`` m8n8k4 f16 on sm_90, a software routine): fp32 FFMAs,
``d = c + fma(a3, b3, fma(a2, b2, fma(a1, b1, fma(a0, b0, +0))))``; with an f16 D
``d = f16((c + fma(a1, b1, a0 b0)) + fma(a3, b3, a2 b2))``.

Special values: a NaN operand, ``0 * inf`` or infinities of both signs in one block give
NaN (``nan_f32`` / ``nan_f16``, canonical); otherwise an infinity gives that infinity. An
exact zero sum is +0 (``zero="plus"``). tf32 operands are fp32 words whose low 13 bits
are ignored. Subnormals are kept, not flushed.

f64 (m8n8k4 etc.) is a chain of IEEE fused multiply-adds in k order,
``d = fma(a3, b3, fma(a2, b2, fma(a1, b1, fma(a0, b0, c))))``, rounded to nearest
even. A NaN operand propagates (quieted); a NaN created by ``inf - inf`` or
``0 * inf`` is ``0xFFF8000000000000``.

Integer mma (s8, u8, s4, u4, mixed signedness for ``mma_sync`` / ``wgmma``) adds exact
products to C modulo 2**32, or with ``satf`` clamps each instruction's exact
``A @ B + C`` to the int32 range. ``bmma`` (b1) adds ``popc(a_row op b_col)`` to C
modulo 2**32.

This module has ``mma``, the chain of instructions over k: the operands decoded once
(``decode_operand``) and the rule for storing them, and the instructions in k order, each
one call of ``datapath_blocks.instruction`` (C's bits in, D's bits out: its block FMAs,
rounding, ``c_mode``). The argument checks, valid types and the chain's configuration
(``check_mma``, ``plan_chain``) are ``datapath_checks.py``;
the f64 chain ``datapath_f64.py``; integer mma and ``bmma`` ``datapath_int.py``
(``bmma`` and ``MODES`` are imported here, where the front-ends and ``matmul`` take them).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxwarp._src.arithmetic.datapath_blocks import (
    FAST_FORMATS,
    RANGE_LO,
    Operand,
    as_f16,
    block_fast,
    block_general,
    fast_align,
    in_fp32_range,
    instruction,
    k_order,
    lead_only,
)
from jaxwarp._src.arithmetic.datapath_checks import A_TYPES as A_TYPES
from jaxwarp._src.arithmetic.datapath_checks import ACC_TYPES as ACC_TYPES
from jaxwarp._src.arithmetic.datapath_checks import (
    INT_TYPES,
    STORAGE_DTYPE,
    ChainCfg,
)
from jaxwarp._src.arithmetic.datapath_checks import MODES as MODES
from jaxwarp._src.arithmetic.datapath_checks import Checked as Checked
from jaxwarp._src.arithmetic.datapath_checks import check_mma as check_mma
from jaxwarp._src.arithmetic.datapath_checks import matmul_datapath as matmul_datapath
from jaxwarp._src.arithmetic.datapath_checks import plan_chain as plan_chain
from jaxwarp._src.arithmetic.datapath_f64 import mma_f64_exact
from jaxwarp._src.arithmetic.datapath_int import bmma as bmma
from jaxwarp._src.arithmetic.datapath_int import mma_int_chain
from jaxwarp._src.catalogue import isa
from jaxwarp._src.catalogue.arch import Datapath
from jaxwarp._src.config import config, keyed_jit
from jaxwarp._src.numerics import bitops, softfloat
from jaxwarp._src.numerics.formats import FORMATS

# --------------------------------------------------------------------------------------
# The chain of instructions over k.


def stored_f16(x):
    """``x`` itself (float16), as an array that XLA's CPU backend stores.

    With an instruction k below 8, XLA's CPU fusion put the k slices of the f16 operands
    inside the instruction's loop over the outputs (a slice is copied into every consumer
    that reads it through few indexings, ``decode_operand`` says more), which then sliced and
    converted them again for every output: ``mma`` of 128 x 512 @ 512 x 128 as a chain of
    sm_70 m8n8k4 instructions ran at 111 M MAC/s, exact sm_70 ``matmul`` at 89 against
    sm_75's 893 (CPU seconds). A division is not copied into its consumers, so dividing by
    ``s * s`` (``s`` = +-1 from the sign bit: 1, which XLA cannot fold away) makes each
    slice an array of its own: 679 and 475 M MAC/s (record
    ``benchmarks/results/cpu_matmul_exact.txt``, section ``k4_gemm_ab``), the same bits (an
    f16 value, subnormals included, is a normal fp32 one, which XLA's CPU division does not
    flush; a NaN stays a NaN, and a NaN operand gives the canonical NaN whatever its
    payload). Used by ``_chain`` and by ``matmul``'s k loop."""
    s = jnp.where(jnp.signbit(x), jnp.float16(-1), jnp.float16(1))
    return x / (s * s)


def _chain(a, b, c, cfg: ChainCfg, block):
    """The instructions of one exact float mma over k, on prepared operands (pytrees
    whose leaves are (..., m, k) / (..., k, n)): the first from C, the rest scanned."""
    dp = cfg.dp
    k = jax.tree.leaves(a)[0].shape[-1]
    ks = k_order(list(range(cfg.ik)), dp)
    n = k // cfg.ik
    # Slices of a chain with k < 8 stored (see stored_f16): f16 leaves on the CPU only.
    store = (n > 1 and cfg.ik < 8 and jax.default_backend() == "cpu"
             and all(x.dtype == jnp.float16 for x in jax.tree.leaves((a, b))))
    keep = (lambda t: jax.tree.map(stored_f16, t)) if store else (lambda t: t)
    c_bits = bitops.to_u32(c)
    first = keep(jax.tree.map(lambda x: x[..., :cfg.ik], a)), keep(jax.tree.map(
        lambda x: x[..., :cfg.ik, :], b))
    bits = instruction(*first, ks, c_bits, cfg.c_format, block, cfg, cfg.c_shift)
    if n > 1:  # a chain: D of one instruction is C of the next (scanned, not unrolled)
        a_s = jax.tree.map(lambda x: jnp.moveaxis(
            x[..., cfg.ik:].reshape(*x.shape[:-1], n - 1, cfg.ik), -2, 0), a)
        b_s = jax.tree.map(lambda x: jnp.moveaxis(
            x[..., cfg.ik:, :].reshape(*x.shape[:-2], n - 1, cfg.ik, x.shape[-1]), -3, 0), b)

        def step(d_bits, ab):
            return instruction(*keep(ab), ks, d_bits, cfg.d_format, block, cfg), None

        bits, _ = lax.scan(step, bits, (a_s, b_s))
    return bits


def _store_decoded(a, b, c, general: bool, f16: bool = False,
                   backend: str | None = None) -> bool:
    """Whether to decode the operands once into stored arrays (an XLA optimization
    barrier between decoding and the blocks) rather than let XLA fuse the decoding into
    the blocks, which decodes an operand element again for every output that reads it.
    The bits are the same either way; the rule follows what was faster on the H100
    (jax 0.11.2, 2026-11-24; the A/B records in ``benchmarks/results``: section
    ``store_decoded_ab`` of ``h100_mma_exact.txt`` for tiles, of ``h100_matmul_exact.txt``
    for GEMMs), keyed on the uses of an operand element (the outputs it feeds: n for a
    batch of m x n tiles, N for a GEMM's k step):

    * general path (bf16 / tf32, whose decoding is longer): stored below 1024 uses: tiles
      (16 or 8 uses: WMMA / ``mma.sync`` bf16 1.35x, 1.47x faster, ``mma.sync`` tf32
      1.33x; 64: ``wgmma`` bf16 1.09x, tf32 0.90x), not for a GEMM (4096 uses: bf16
      4096^3 0.81x stored);
    * fast path (f16, fp8 as f16): always for f16 x f16 operands (``f16``; session 19's
      interleaved A/B, run 6 of section ``align_form_ab`` of ``h100_mma_exact.txt``:
      WMMA f16 1.19x at 2^18 tiles, 1.35x at 2^20, ``mma.sync`` f16 1.11x, ``wgmma`` f16
      1.12x; an earlier session measured WMMA / ``mma.sync`` f16 at
      1.0x: the H100's timings of one code moved by 10-20% between sessions), and for
      fp8 from 64 uses (``wgmma`` e4m3 1.23x-1.37x, 4096^3 GEMM e4m3 1.35x; ``mma.sync``
      fp8, 8 uses, 0.72x-0.82x).

    On the CPU (2 cores, jax 0.10.2) storing left bf16 / tf32 as fast as before
    (0.99x-1.02x) and slowed the fast path (``wgmma`` f16 / e4m3 0.90x): there the fast
    path never stores (``cpu_mma_exact.json``, section ``store_decoded_ab``). (XLA's CPU
    pipeline removes optimization barriers before fusion; the general path's operands are
    stored there by ``decode_operand(..., stored=True)``.)
    ``backend``: the backend the rule is for (default: JAX's default).
    """
    mode = config.arith_store_decoded
    if mode != "auto":
        return mode == "on"
    if not general and (backend or jax.default_backend()) == "cpu":
        return False
    if a.size == 0 or b.size == 0:  # nothing to decode (an empty M, N or K)
        return False
    out = np.broadcast_shapes(a.shape[:-2], b.shape[:-2], c.shape[:-2])
    outputs = int(np.prod(out, dtype=np.int64)) * c.shape[-2] * c.shape[-1]
    uses = outputs * a.shape[-1]  # multiplications, each reading one a and one b
    reuse = min(uses // a.size, uses // b.size)
    if general:
        return reuse < config.arith_general_store_reuse_max
    return f16 or reuse >= config.arith_fast_store_reuse


# The exact models are many small element-wise operations: jitted here, so that an
# eager call compiles them once per shape instead of dispatching each operation (keyed
# on the options too: the store rule and the block form are read in the trace).
@functools.partial(keyed_jit, static_argnums=(3, 4))
def _mma_float_exact(a, b, c, cfg: ChainCfg, path: str = "general"):
    dp = cfg.dp
    a_format, b_format = cfg.a_format, cfg.b_format
    if dp.operand_via == "f16":  # exact: every fp8 value is an f16 value
        if a_format in isa.FP8_TYPES:
            a, a_format = a.astype(jnp.float16), "f16"
        if b_format in isa.FP8_TYPES:
            b, b_format = b.astype(jnp.float16), "f16"
    if dp.c_mode == "ffma":
        if not a_format == b_format == "f16":
            raise ValueError("c_mode='ffma' is modelled for f16 operands only")
        bits = _chain(a, b, c, cfg, None)
    elif {a_format, b_format} <= FAST_FORMATS:  # fp8 as f16: exact
        lowest = (softfloat.emin if dp.align == "nominal" and dp.sub_exp == "emin"
                  else softfloat.lsb_min)
        block = functools.partial(block_fast, fmts=(a_format, b_format),
                                  emin=lowest(a_format) + lowest(b_format))
        a16, b16 = as_f16(a, a_format), as_f16(b, b_format)
        f16 = cfg.a_format == cfg.b_format == "f16"
        if dp.align == "nominal" and _store_decoded(a, b, c, general=False, f16=f16):
            ops = ((a16, fast_align(a16.astype(jnp.float32), a_format, dp).astype(jnp.int16)),
                   (b16, fast_align(b16.astype(jnp.float32), b_format, dp).astype(jnp.int16)))
            bits = _chain(*lax.optimization_barrier(ops), c, cfg, block)
        else:
            bits = _chain(a16, b16, c, cfg, block)
    elif path == "in_range":  # known in range (a cond around the whole k loop)
        bits = _chain(*_range_values(a, b, cfg), c, cfg, _range_block(cfg))
    elif path == "cond":  # bf16 / tf32, big calls on the CPU: see _in_range_path
        bits = lax.cond(in_fp32_range(*_range_values(a, b, cfg)),
                        lambda a, b, c: _chain(*_range_values(a, b, cfg), c, cfg,
                                               _range_block(cfg)),
                        lambda a, b, c: _general_chain(a, b, c, cfg), a, b, c)
    else:
        bits = _general_chain(a, b, c, cfg)
    return bitops.from_u32(bits, jnp.float32 if cfg.d_format == "f32" else jnp.float16)


#: Set while a caller traces code that it runs only on operands in range ("in_range")
#: or only on operands out of range ("general"): ``matmul``'s k loop, under one cond
#: for the whole product (``in_range_matmul``).
_KNOWN_RANGE: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "jaxwarp_known_range", default=None)


@contextlib.contextmanager
def known_range(path: str):
    """Trace the exact bf16 / tf32 calls inside as ``path`` ("in_range" or "general")."""
    token = _KNOWN_RANGE.set(path)
    try:
        yield
    finally:
        _KNOWN_RANGE.reset(token)


def in_range_eligible(dp: Datapath, a_format: str, b_format: str) -> bool:
    """Whether the in-range arithmetic models this datapath and these operand types."""
    return ({a_format, b_format} <= {"bf16", "tf32"} and dp.c_mode == "fused"
            and dp.zero == "plus" and dp.sub_exp == "emin")


def in_range_matmul(arch, instruction: str, a_format: str, b_format: str, acc_format: str,
                    ik: int, macs: int) -> bool:
    """Whether ``matmul``'s exact k loop of ``macs`` multiply-adds (instructions of k
    ``ik``) is traced twice, in range and not, under one ``lax.cond`` on
    ``in_fp32_range`` of the whole operands.
    "auto": from 2**22 multiply-adds on the CPU and 2**30 on an accelerator (where one
    cond per product costs one read of its predicate; on the H100 the in-range branch
    ran an exact bf16 4096^3 ``matmul`` 1.27x faster, the cond in every k step 0.43x)."""
    if not {a_format, b_format} <= {"bf16", "tf32"} or _KNOWN_RANGE.get() is not None:
        return False
    dp = matmul_datapath(arch, instruction, a_format, b_format, acc_format, ik)
    if dp is None or not in_range_eligible(dp, a_format, b_format):
        return False
    mode = config.arith_in_range_path
    if mode != "auto":
        return mode == "on"
    if jax.default_backend() == "cpu":
        return macs >= config.arith_in_range_min_macs
    return macs >= config.arith_in_range_min_macs_accelerator


def range_values(a, b, a_format: str, b_format: str):
    """bf16 / tf32 operands as the values the tensor core reads (tf32: low bits cleared)."""
    def val(x, fmt):
        return bitops.tf32_keep(x) if fmt == "tf32" else x
    return val(a, a_format), val(b, b_format)


def _float_path(cfg: ChainCfg, a, b, c) -> str:
    """How ``_mma_float_exact`` computes this call: "in_range", "cond" or "general"."""
    known = _KNOWN_RANGE.get()
    if known is not None and in_range_eligible(cfg.dp, cfg.a_format, cfg.b_format):
        return known
    return "cond" if _in_range_path(cfg, a, b, c) else "general"


def _in_range_path(cfg: ChainCfg, a, b, c) -> bool:
    """Whether this call has a ``lax.cond`` between the in-range arithmetic and the general
    path. On the CPU (2 cores, jax 0.10.2, 2026-11-26) the in-range branch ran an exact
    bf16 512^3 ``matmul`` 1.5x faster (the cond itself cost about 15% of it), but the
    cond compiles both branches: 1.1 s -> 2.3 s of XLA compile for one such ``matmul``.
    "auto" takes it on the CPU for calls of at least ``arith_in_range_min_macs`` products
    (a 1024^2 output with k 16 is 2**24; the test suite's and the study model's products
    stay below), where the run time outweighs the compile time; not on a GPU, where a
    cond in the k loop measured slower."""
    if not in_range_eligible(cfg.dp, cfg.a_format, cfg.b_format):
        return False
    mode = config.arith_in_range_path
    if mode != "auto":
        return mode == "on"
    out = np.broadcast_shapes(a.shape[:-2], b.shape[:-2], c.shape[:-2])
    macs = int(np.prod(out, dtype=np.int64)) * c.shape[-2] * c.shape[-1] * a.shape[-1]
    return jax.default_backend() == "cpu" and macs >= config.arith_in_range_min_macs


def _range_values(a, b, cfg: ChainCfg):
    return range_values(a, b, cfg.a_format, cfg.b_format)


def _range_block(cfg: ChainCfg):
    return functools.partial(block_fast, fmts=(cfg.a_format, cfg.b_format),
                             emin=RANGE_LO, finite=True)


def decode_operand(bits, fmt, dp: Datapath, stored: bool = False) -> Operand:
    """Decoded operands; ``stored``: as divisions that XLA's CPU backend stores.

    XLA's CPU fusion copies a cheap producer into every consumer that reads it through
    at most 15 indexings (``kAllowedCodeDuplication``), and the loop over a block's
    outputs then recomputes it for each output element: with fewer than 16 k elements
    per instruction (tf32 k4 / k8, bf16 k8) it decoded every operand element, and read
    ``matmul``'s dynamic slice of the k step, once per output (exact tf32 ``matmul`` ran
    about 15x slower than bf16). A division counts as expensive there and is not copied
    into a consumer that reuses its elements, so ``stored`` divides both arrays, by the
    sign (+-1, exact; a NaN's sign is never read) and by ``sign * sign`` (1, which XLA
    cannot fold away as it would a constant; an int32 division for exp, so that the
    blocks read it without a conversion per k index). The bits of every result are the
    same.
    """
    if lead_only(dp) and _e8_format(fmt):
        neg, mag, exp = _decode_e8(bits, fmt)
    else:
        neg, lsb, sig, lead, inf, nan = softfloat.decode(bits, fmt, dp.sub_exp == "emin")
        mag = jnp.where(nan, jnp.float32(jnp.nan),
                        jnp.where(inf, jnp.float32(jnp.inf), sig.astype(jnp.float32)))
        if lead_only(dp):
            exp = jnp.where(sig != 0, lead, -1000)
        else:
            exp = jnp.where(sig != 0, 16 * lsb + (lead - lsb), -16000)
    sign = jnp.where(neg, jnp.float32(-1), jnp.float32(1))
    if stored:
        one = jnp.where(neg, jnp.int32(-1), jnp.int32(1))
        return Operand(mag / sign, lax.div(exp.astype(jnp.int32), one * one))
    return Operand((sign * mag).astype(jnp.float16), exp.astype(jnp.int16))


def _e8_format(fmt: str) -> bool:
    """Whether ``_decode_e8`` decodes ``fmt``: a format with fp32's 8 exponent bits held
    in fp32's layout (bf16: the high half of an fp32 word, tf32: an fp32 word whose low
    bits are ignored), from the format registry's fields."""
    f, f32 = FORMATS.get(fmt), FORMATS["f32"]
    return (f is not None and fmt != "f32" and f.exponent_bits == f32.exponent_bits
            and f.mantissa_bits < f32.mantissa_bits and not f.code_storage)


def _decode_e8(bits, fmt: str):
    """``decode_operand``'s decoding of bf16 / tf32 bits (uint32 as ``bitops.to_u32`` gives
    them) for an alignment exponent alone (``datapath_blocks.lead_only``), on the fields of the fp32
    word: (neg, magnitude (fp32: the significand, an integer below 2**11; inf; NaN),
    alignment exponent: the biased exponent field, at least 1, less 127, or -1000 for
    zero, inf and NaN). The same values as ``softfloat.decode`` with ``sub_emin``
    (``tests/arithmetic/test_datapath.py`` compares every bf16 bit pattern), in fewer
    operations: compile time grows with them."""
    f32, fm = FORMATS["f32"], FORMATS[fmt]
    mbits = fm.mantissa_bits  # the fraction bits the format keeps
    u = bits << (f32.bits - fm.bits) if fm.bits == 16 else bits  # bf16: the high half
    e = ((u >> 23) & 0xFF).astype(jnp.int32)
    f = ((u & 0x7FFFFF) >> (f32.mantissa_bits - mbits)).astype(jnp.int32)
    sig = jnp.where(e == 0, f, f | (1 << mbits)).astype(jnp.float32)
    mag = jnp.where(e == 0xFF, jnp.where(f == 0, jnp.float32(jnp.inf), jnp.float32(jnp.nan)),
                    sig)
    exp = jnp.where((e == 0xFF) | ((e == 0) & (f == 0)), -1000, jnp.maximum(e, 1) - 127)
    return (u >> 31) != 0, mag, exp


def _general_chain(a, b, c, cfg: ChainCfg):
    """The chain on decoded operands (``decode_operand``, ``block_general``): any formats."""
    dp, a_format, b_format = cfg.dp, cfg.a_format, cfg.b_format
    mbits = sum(softfloat.emin(t) - softfloat.lsb_min(t) for t in (a_format, b_format))
    block = functools.partial(block_general, mbits=mbits,
                              emin=softfloat.lsb_min(a_format) + softfloat.lsb_min(b_format))
    stored = jax.default_backend() == "cpu"  # see decode_operand
    ops = (decode_operand(bitops.to_u32(a), a_format, dp, stored),
           decode_operand(bitops.to_u32(b), b_format, dp, stored))
    if _store_decoded(a, b, c, general=True):
        ops = lax.optimization_barrier(ops)
    return _chain(*ops, c, cfg, block)


# --------------------------------------------------------------------------------------
# Fast mode and the public functions.


def _round_operand(x, a_format):
    if a_format == "tf32":  # the tensor core ignores the low 13 bits
        return bitops.tf32_keep(x)
    if a_format != "f16" and a_format in FAST_FORMATS:  # fp8, fp6 / fp4 codes: values
        return as_f16(x, a_format).astype(jnp.float32)
    return x  # f16 / bf16 stay: the backend's own f16 / bf16 dot (tensor cores on a GPU)


def as_f32(x):
    """x as float32 values. bfloat16 is widened on the bits (its 16 bits above 16 zero
    bits): XLA's CPU backend folds a ``convert`` of bfloat16 operands and a transpose
    into its dot and then has no kernel for that bf16 x bf16 -> f32 dot (``UNIMPLEMENTED:
    Unsupported element type for DotThunk::Execute``, jax 0.10.2, the backward products
    of a bf16 product whose operand conversion is a few integer operations)."""
    if x.dtype == jnp.bfloat16:
        wide = lax.bitcast_convert_type(x, jnp.uint16).astype(jnp.uint32) << 16
        return lax.bitcast_convert_type(wide, jnp.float32)
    return x.astype(jnp.float32)


def _mma_fast(a, b, c, a_format, b_format, d_format, c_shift=0):
    acc_dt = jnp.float64 if a_format == "f64" else jnp.float32
    a = _round_operand(a, a_format)
    b = _round_operand(b, b_format)
    if a.dtype == jnp.bfloat16 and jax.default_backend() == "cpu":  # see as_f32
        a, b = as_f32(a), as_f32(b)
    prod = jnp.einsum("...mk,...kn->...mn", a, b, preferred_element_type=acc_dt,
                      precision=lax.Precision.HIGHEST)
    c = c.astype(acc_dt) * acc_dt(2.0 ** -c_shift) if c_shift else c.astype(acc_dt)
    return (prod + c).astype(STORAGE_DTYPE[d_format])


def _float_satf(d, d_format):
    """Documented rule for float satf (no capture: CUDA 13 rejects it)."""
    big = jnp.asarray(jnp.finfo(STORAGE_DTYPE[d_format]).max, d.dtype)
    d = jnp.where(jnp.isnan(d), jnp.zeros_like(d), d)
    return jnp.clip(d, -big, big)


# ``path``: ``_float_path`` of the call, and ``options``: ``config.snapshot()``, so that
# JAX's cache of the traced custom_vjp (keyed on the function and these arguments) is
# keyed on what the exact model reads: a call traced under ``known_range("in_range")``
# must not be reused for one under ``known_range("general")``.
@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4, 5, 6, 7))
def _mma_float(a, b, c, cfg: ChainCfg, mode, satf, path, options):
    if mode == "fast":
        d = _mma_fast(a, b, c, cfg.a_format, cfg.b_format, cfg.d_format, cfg.c_shift)
    elif cfg.a_format == "f64":
        d = mma_f64_exact(a, b, c)
    else:
        d = _mma_float_exact(a, b, c, cfg, path)
    return _float_satf(d, cfg.d_format) if satf else d


def _mma_float_fwd(a, b, c, cfg, mode, satf, path, options):
    return _mma_float(a, b, c, cfg, mode, satf, path, options), (a, b, c)


def _mma_float_bwd(cfg, mode, satf, path, options, res, g):
    # Straight-through estimator: the tensor core's truncations and roundings are
    # treated as the identity, so D = A @ B + C differentiates as the exact product:
    # dA = dD @ B^T, dB = A^T @ dD, dC = dD, computed in fp32 (fp64 for f64), summed
    # over broadcast batch dims, and cast back to each operand's dtype.
    a, b, c = res
    acc = jnp.float64 if cfg.a_format == "f64" else jnp.float32
    g = g.astype(acc)
    da = jnp.einsum("...mn,...kn->...mk", g, b.astype(acc), precision=lax.Precision.HIGHEST)
    db = jnp.einsum("...mn,...mk->...kn", g, a.astype(acc), precision=lax.Precision.HIGHEST)
    dc = g

    def unbroadcast(x, like):
        extra = x.ndim - like.ndim
        x = x.sum(axis=tuple(range(extra))) if extra else x
        axes = tuple(i for i, (s, t) in enumerate(zip(like.shape, x.shape, strict=True))
                     if s == 1 and t != 1)
        x = x.sum(axis=axes, keepdims=True) if axes else x
        return x.astype(like.dtype)

    return unbroadcast(da, a), unbroadcast(db, b), unbroadcast(dc, c)


_mma_float.defvjp(_mma_float_fwd, _mma_float_bwd)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 4))
def straight_through(run, a, b, c, cfg: ChainCfg):
    """``run(a, b, c, cfg)``, a chain of float instructions computed elsewhere (the GEMM
    layer's native mode), with ``mma``'s straight-through gradient (``_mma_float_bwd``).
    ``cfg``: the :class:`ChainCfg` of :func:`check_mma`."""
    return run(a, b, c, cfg)


def _straight_through_fwd(run, a, b, c, cfg):
    return run(a, b, c, cfg), (a, b, c)


def _straight_through_bwd(run, cfg, res, g):
    return _mma_float_bwd(cfg, None, None, None, None, res, g)


straight_through.defvjp(_straight_through_fwd, _straight_through_bwd)


def mma(a, b, c, *, a_format: str, c_format: str, d_format: str, arch="sm_90", mode="exact",
        satf=False, b_format: str | None = None, instruction: str = "wmma",
        instruction_k: int | None = None, datapath: Datapath | None = None,
        scale_input_d: int = 0) -> jax.Array:
    """``D = A @ B + C`` in tensor-core arithmetic: a chain of MMA instructions over k.

    Args:
      a: (..., m, k) in a_format's storage dtype: float16 (f16), bfloat16 (bf16), float32
        (tf32: the whole fp32 word; the tensor core ignores its low 13 bits), float64,
        float8_e4m3fn (e4m3), float8_e5m2 (e5m2), int8 (s8; s4 values in [-8, 7]) or
        uint8 (u8; u4 values in [0, 15]; for s4/u4 only the low 4 bits count, as in a
        fragment; e3m2, e2m3, e2m1: the format's code in the low 6 / 6 / 4 bits,
        ``mma_sync`` ``kind::f8f6f4`` on sm_120a).
      b: (..., k, n) in b_format's storage dtype.
      c: (..., m, n) in c_format's dtype (float16, float32, float64 or int32). Leading
        batch dims of a, b and c broadcast: many tiles at once without vmap.
      a_format, c_format, d_format: static type names. WMMA: see
        ``datapath_checks.COMBOS``; ``mma_sync`` and ``wgmma``: see ``PTX_CD`` there (fp8:
        f32/f32 or f16/f16).
      arch: a target name (``arch.TARGETS``: ``"sm_70"``, ``"sm_75"``, ``"sm_80"``,
        ``"sm_86"``, ``"sm_87"``, ``"sm_89"``, ``"sm_90"``, ``"sm_90a"``,
        ``"sm_100(a)"``, ``"sm_103(a)"``, ``"sm_120(a)"``, ``"sm_121(a)"``) or an
        ``ArchModel``. The target must be able to issue the instruction (``wgmma``
        needs ``"sm_90a"``, fp8 ``mma_sync`` sm_89 or newer, fp6 / fp4 ``"sm_120a"``);
        its datapath model gives the arithmetic (sm_90 verified on hardware, the others
        against MMA-Sim or not at all: ``ArchModel.verified``, ``arch.py``).
      mode: ``"exact"`` reproduces the hardware bits (docs/arithmetic.md describes
        the model). ``"fast"`` uses ``lax.dot_general`` with fp32 (fp64 for f64) accumulation of
        the operands (tf32 low bits dropped), then one conversion to
        d_format: it rounds to nearest instead of truncating each aligned term and the
        fp32 result, and so differs from hardware in the last bits (about 40% of
        fp32 results), and a product overflowing fp32 gives inf/NaN where the
        hardware keeps a finite block sum.
      satf: integer types: clamp each instruction's exact ``A @ B + C`` to the int32
        range instead of wrapping modulo 2**32 (verified). Float types: CUDA 13 rejects
        satf so it is unverified; we apply the documented PTX rule to the result: +inf
        -> +MAX_NORM, -inf -> -MAX_NORM, NaN -> +0.
      b_format: B's type (default: a_format); e4m3/e5m2, s8/u8 and s4/u4 may be mixed
        (``mma_sync``, ``wgmma``), and any two of e5m2, e4m3, e3m2, e2m3, e2m1
        (``mma_sync`` ``kind::f8f6f4``, sm_120a).
      instruction: ``"wmma"``, ``"mma_sync"`` or ``"wgmma"``.
      instruction_k: the k of one instruction (e.g. ``mma_sync`` tf32 4 or 8; f16 4 is
        the m8n8k4 shape). Default: the largest k of the family dividing a's k. k must
        be a multiple of it; a longer k is a chain (D of one instruction is C of the
        next, so c_format must equal d_format then).
      datapath: a ``Datapath`` to use instead of ``arch``'s (to explore models).
      scale_input_d: ``tcgen05`` kinds f16 / tf32 only: 0..15, the first instruction
        computes ``A @ B + C * 2**-scale_input_d`` (C enters the fused sum with its
        exponent lowered, exactly; later instructions of a chain add their C unscaled).

    Returns:
      (..., m, n) array of d_format's dtype.

    Raises:
      ValueError/TypeError: a static argument, dtype, k or target not allowed (the
        message names it).
      RuntimeError: a_format 'f64' with ``jax_enable_x64`` off.

    Gradients: straight-through (see ``_mma_float_bwd``); integer types have none.

    Example:
      >>> import jax.numpy as jnp
      >>> a = jnp.ones((16, 16), jnp.float16); b = jnp.ones((16, 16), jnp.float16)
      >>> c = jnp.zeros((16, 16), jnp.float32)
      >>> float(mma(a, b, c, a_format="f16", c_format="f32", d_format="f32")[0, 0])
      16.0
      >>> a8 = jnp.ones((64, 64), jnp.float8_e4m3fn); b8 = jnp.ones((64, 8), jnp.float8_e5m2)
      >>> d = mma(a8, b8, jnp.zeros((64, 8), jnp.float32), a_format="e4m3", b_format="e5m2",
      ...         c_format="f32", d_format="f32", instruction="wgmma", arch="sm_90a")
      >>> float(d[0, 0])  # two chained m64n8k32 instructions
      64.0
    """
    checked = check_mma(a, b, c, a_format=a_format, c_format=c_format, d_format=d_format,
                        arch=arch, mode=mode, satf=satf, b_format=b_format,
                        instruction=instruction, instruction_k=instruction_k,
                        datapath=datapath, scale_input_d=scale_input_d)
    if checked.d is not None:
        return checked.d
    return run_chain(checked.a, checked.b, checked.c, checked.cfg, mode, satf)


def run_chain(a, b, c, cfg: ChainCfg, mode: str = "exact", satf: bool = False):
    """:func:`mma`'s chain on arguments it has checked (or :func:`plan_chain`'s caller
    has): a, b, c arrays of their formats' storage dtypes, (..., m, k) x (..., k, n) and
    (..., m, n), k a positive multiple of ``cfg.ik``. No check is repeated here."""
    if cfg.a_format in INT_TYPES:
        return mma_int_chain(a, b, c, cfg.a_format, cfg.b_format, cfg.ik, satf)
    exact = mode == "exact" and cfg.a_format != "f64"
    path = _float_path(cfg, a, b, c) if exact else None
    return _mma_float(a, b, c, cfg, mode, satf, path, config.snapshot())
