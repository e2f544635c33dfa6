"""The exact datapath as one GPU kernel per output tile (Pallas, Triton backend).

XLA runs exact ``matmul``'s k loop (``matmul.tiled``) as one fused loop over the
outputs per instruction, reading and writing the fp32 accumulator at every k step. This
kernel runs the same chain of instructions with the accumulator in registers: a grid of
(bm, bn) output tiles, each walking k in steps of the datapath's block (sm_90 16, fp8
32; sm_70 to sm_89 4 or 8, two or four to an instruction), and per step the whole
datapath of one block of ``block_k`` f16 / bf16 / tf32 / fp8 products with an fp32 C and D
(``datapath_blocks``' fast path):

* the exact fp32 products ``p = a * b`` (f16 and fp8 values, and bf16 / tf32 values in fp32's
  range, ``datapath_blocks.in_fp32_range``, multiply exactly into normal fp32 numbers);
* the block's alignment exponent E: the largest sum of the operands' exponents
  (``align="nominal"``; an f16 or fp8 subnormal at its format's smallest normal
  exponent), or C's own exponent if larger. The kernel forms it as a float maximum of
  the products of the operands' powers of two (``2**ea * 2**eb``, one multiply and one
  maximum per product) and reads E from the bits of the maximum. With ``form="split"``
  the powers come as bf16 arrays (a power of two in fp32's range is a bf16 number),
  multiplied and compared in bf16, which sm_90 does two at a time (``HMUL2.BF16``,
  ``VHMNMX``);
* the terms truncated toward zero on the grid of ``2**(E - F)``: ``int32(p * 2**(F - E))``
  (a power-of-two scale is exact; the conversion truncates), summed in int32 (k terms
  below ``2**(F + 2)`` each stay below ``2**31``: F <= 25 for 16), C truncated likewise
  and added with its carry out of int32 found from the signs;
* the sum rounded toward zero to ``sum_mbits + 1`` significant bits (24; fp8 14: the
  bits below the leading ones cleared) and scaled by ``2**(E - F)``, an exact fp32
  multiply (an overflow is an infinity, as the model's rounding gives it);
* the result is the next instruction's C, kept as an fp32 value in registers: a D of one
  instruction is read back as the next one's C by value, so no decoded term needs to
  survive the step.

Where every product is zero the result is C itself (a -0 as +0): C's bits lie on the
grid of its own E (fp8: C cut to its leading 14 bits, F + 1 and the rounding's, a
subnormal C on the grid of ``2**-139``, on the integers). With an E of at least -100
(the lowest product exponent that ``in_fp32_range`` admits; fp8 -28) no other result is
an fp32 subnormal, so the kernel never forms one (XLA on the CPU flushes them; the
interpreter gives the GPU's bits). Inf and NaN: a C that is inf or NaN stays so (the
``finite`` kernel, operands known finite); with ``finite`` off the IEEE fp32 sum of C
and the products tells NaN and infinities, as ``datapath_blocks._specials`` does. A NaN
result has the bits ``Datapath.nan_f32``.

On an H100 (jax 0.11.2) a 4096^3 GEMM with C ran at 4.95 TFLOP/s in bf16 and 4.96 in
f16, 2.17x and 2.36x XLA's exact path, with the same bits (variants tried and what
bounds them: ``benchmarks/README.md``, "What bounds the exact datapath").

fp8 (sm_90 ``wgmma`` e4m3 / e5m2, either on either side: one datapath, block_k 32,
F 13, 14 bits kept) takes f16's route: every product of two fp8 values (``2**-32`` to
``57344**2``) is a normal fp32 number, so no range check; e4m3 NaN and e5m2 inf / NaN
go through the IEEE sum (or, from ``gemm_kernel_any_range_below``, a cond on finite
operands). ``matmul`` sends it its exact fp8 products with an fp32 accumulator, also
those with per-tensor scales and their backward products (the scales stay outside the
k loop), and with promotion or block scales one call per interval (``fused_fp8``).

Operands of any value (``form="general"``, bf16 or tf32, whose exponents are fp32's; a tf32
operand is an fp32 word the kernel reads with its low 13 bits cleared, as the tensor core
reads it): the kernel above needs every product
in fp32's range (a caller's range check and ``lax.cond``: most of what exact mode added
to a program's compile on the GPU). The general form needs neither: each operand is
decoded in the kernel into an fp32 significand ``m``
(1.f, or a subnormal's 0.f) and an int32 alignment exponent ``e``; a product's exponent
``ea + eb``, E and the terms' scales ``2**(ea + eb - E + F)`` are integer sums and maxima
(products from ``2**-266`` to ``2**256``, E down to the datapath's floor
``-126 - e_floor``), ``ma * mb`` is exact below 4, C's term and the rounding to fp32 are
integer operations on the bits (a subnormal result keeps the bits above ``2**-149``, as
the model's rounding does), and the IEEE sum of C's stand-in and the products ``ma * mb``
tells NaN and infinities. No float operation reads a subnormal, so a GPU that flushes
them gives the same bits. It runs at about a quarter of the in-range kernel's speed on
large products (4096^3 on an H100: 1.31 against 4.78 TFLOP/s) and as fast on small ones
(512 x 128 x 512: 0.58 against 0.59 ms), so :func:`chain`'s callers take it below
``gemm_kernel_any_range_below`` multiply-adds (:func:`any_range`), where a call's time
is mostly launches and its compile is what a user waits for.

Compile time: :func:`chain` runs one kernel per product shape, traced and lowered once
per shape in a program (``gemm`` is jitted per plan). A product of fewer than
``gemm_kernel_rolled_below`` multiply-adds takes a kernel whose step loops over its
products, ``gemm_kernel_unroll_small`` written out per iteration (H100, 4 an iteration:
first call 0.47 s against 1.39 s, 0.68 of the speed at 4096^3, 0.88 at 512 x 128 x 512,
``fused_kernel_check.py --variants``; whole programs in ``docs/compile_time.md``).
:func:`models` says which datapaths the kernel is (the preset fields it reads);
:func:`gemm` runs it. Off the GPU (``interpret=True``) Pallas interprets the same kernel
body with XLA on the CPU: its bits checked anywhere.
"""

from __future__ import annotations

import dataclasses
import functools
import operator

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.extend import core as jex_core
from jax.interpreters import mlir

from jaxwarp._src.catalogue import isa
from jaxwarp._src.catalogue.arch import Datapath
from jaxwarp._src.config import config
from jaxwarp._src.numerics import bitops, softfloat

#: The operand formats the kernel takes (both operands the same, or two fp8 formats).
FORMATS = ("bf16", "f16", "tf32", "e4m3", "e5m2")
#: The formats whose products may leave fp32's range (fp32's exponents): a range check and
#: a cond between the in-range kernel and another path, or the general form on their bits
#: (bf16 as int16, tf32 as int32 patterns).
GENERAL = {"bf16": jnp.int16, "tf32": jnp.int32}
#: The formats whose every value is a normal fp32 number and every product of two one in
#: fp32's range (no range check): their subnormals sit at the format's smallest normal
#: exponent in E (``sub_exp="emin"``), their inf and NaN go through the IEEE sum.
FAST = ("f16", "e4m3", "e5m2")
_FP8 = ("e4m3", "e5m2")
#: The largest block of f16 / bf16 products the kernel steps by (sm_90's k; sm_70 to
#: sm_89: 4 or 8; fp8: the datapath's block_k, 16 or 32).
IK = 16
#: The kernel's name (in profiles and traces, with a suffix per compiled instance).
KERNEL_NAME = "jaxwarp_fused_exact_gemm"
_EXP = 0x7F800000  # fp32 exponent field


def takes(a_format: str, b_format: str) -> bool:
    """Whether the kernel takes these operand formats: f16 x f16, bf16 x bf16, tf32 x tf32,
    or two fp8 formats (e4m3, e5m2, mixed or not).

    Example:
        >>> takes("bf16", "bf16"), takes("e4m3", "e5m2"), takes("f16", "bf16")
        (True, True, False)
    """
    return (a_format == b_format and a_format in FORMATS) or (a_format in _FP8
                                                              and b_format in _FP8)


def models(dp: Datapath, a_format: str, b_format: str, c_format: str, ik: int) -> bool:
    """Whether the kernel computes this instruction chain's bits: f16 x f16, bf16 x bf16,
    tf32 x tf32 or fp8 operands (``takes``), fp32 C and D, blocks of ``block_k`` products fused with
    C, nominal alignment, terms and block sums truncated toward zero (at most 24 bits
    kept), zeros +0, every block's int32 sum in range. An instruction of several blocks
    (sm_70 to sm_89: blocks of 4 or 8 in a k16 instruction) is the chain of its blocks,
    each taking the previous one's fp32 result as its C (``c_mode="fused"``), so the
    kernel steps by ``block_k`` alike.

    Example:
        >>> models(jaxwarp.datapath_for("sm_90", "wgmma", "bf16", 16), "bf16", "bf16",
        ...        "f32", 16)
        True
        >>> models(jaxwarp.datapath_for("sm_80", "wmma", "f16", 16), "f16", "f16",
        ...        "f32", 16)
        True
        >>> models(jaxwarp.datapath_for("sm_90", "wmma", "f16", 16), "f16", "f16",
        ...        "f32", 8)
        False
        >>> models(jaxwarp.datapath_for("sm_90", "wgmma", "e4m3", 32), "e4m3", "e5m2",
        ...        "f32", 32)
        True
    """
    # block_k terms below 2**(F + 2) each: their int32 sum below 2**31 (16: F <= 25)
    bk = dp.block_k
    return (takes(a_format, b_format) and c_format == "f32"
            and ik % bk == 0 and bk & (bk - 1) == 0 and (bk <= IK or a_format in _FP8)
            and bk << (dp.F + 2) <= 1 << 31 and dp.c_mode == "fused"
            and dp.align == "nominal" and dp.sub_exp == "emin" and dp.c_sub_exp != "lead"
            and (dp.e_floor is None or dp.e_floor >= 0) and dp.trunc == "rz"
            and dp.block_round == "rz" and dp.sum_mbits <= 23 and dp.f32_zero == "plus"
            and dp.zero == "plus" and dp.k_split == "contig" and not dp.operand_via)


@dataclasses.dataclass(frozen=True)
class Plan:
    """Static shape of one kernel: operand format, K, output tile, Triton settings;
    ``finite``: every operand is known finite (no IEEE sum of the products); ``ik``,
    ``kept``, ``b_fmt``: the instruction's k (the datapath's block_k), the significant
    bits its block sum keeps (``sum_mbits + 1``) and B's format (None: ``fmt``)."""

    fmt: str
    K: int
    F: int
    nan_bits: int
    finite: bool
    block: tuple[int, int] = (32, 32)
    num_warps: int = 4
    num_stages: int = 1
    #: "unrolled": the 16 products of a step as (bm, bn) arrays from columns of A and rows
    #: of B; "split": the same, the operands' powers of two read from bf16 arrays of
    #: their own; "reduce": one (bm, bn, 16) array (B passed transposed), k reductions;
    #: "general": bf16 / tf32 operands of any value (``_step_general``: integer exponents, no
    #: range to check first), read as their 16-bit patterns.
    form: str = "unrolled"
    #: "float": C's term and the rounded sum by fp32 multiplies and conversions; "int":
    #: by integer operations on their bits (no conversion: fewer on the GPU's slow
    #: conversion pipe, more integer operations).
    rounding: str = "float"
    #: The operands passed as fp32 arrays: twice the bytes read, no conversion per
    #: operand element in the kernel.
    f32_operands: bool = False
    #: Products of a step written out per iteration of a loop over its ``ik`` (a divisor
    #: of ik; forms "unrolled" and "split"): ik, no loop; fewer, a smaller kernel body,
    #: which Pallas lowers and Triton compiles in less time, with fewer loads in flight
    #: (the bits are the same: the same operations in the same order).
    unroll: int = 16
    #: ``Datapath.e_floor`` (form "general": E is at least -126 - e_floor; None, no floor).
    e_floor: int | None = None
    ik: int = IK
    kept: int = 24
    b_fmt: str | None = None

    @property
    def fmts(self) -> tuple[str, str]:
        return self.fmt, self.b_fmt or self.fmt


#: fp32 -> int32 toward zero, for values known to fit (|x| < 2**31): one conversion
#: instruction. (Pallas' Triton lowering of ``astype`` clamps to int32's range first:
#: two float minima / maxima more per conversion, with NaN checks on sm_90.)
trunc_i32_p = jex_core.Primitive("jaxwarp_trunc_i32")
trunc_i32_p.def_abstract_eval(lambda x: x.update(dtype=jnp.dtype(jnp.int32)))
_trunc_model = operator.methodcaller("astype", jnp.int32)
trunc_i32_p.def_impl(_trunc_model)
mlir.register_lowering(trunc_i32_p, mlir.lower_fun(_trunc_model, multiple_results=False))


def _trunc_triton(ctx, x):
    from jax._src.lib.mlir import ir  # noqa: PLC0415 (GPU lowering only)
    from jax._src.lib.mlir.dialects import arith  # noqa: PLC0415

    del ctx
    i32 = ir.IntegerType.get_signless(32)
    t = ir.RankedTensorType.get(ir.RankedTensorType(x.type).shape, i32) if isinstance(
        x.type, ir.RankedTensorType) else i32
    return arith.fptosi(t, x)


@functools.cache
def register_triton_rule() -> None:
    """Adds :data:`trunc_i32_p` to Pallas' Triton lowering rules (once)."""
    from jax._src.pallas.triton import lowering  # noqa: PLC0415 (GPU only)

    lowering.triton_lowering_rules[trunc_i32_p] = _trunc_triton


def trunc_f32(x):
    return trunc_i32_p.bind(x)


def _bits(x):
    return lax.bitcast_convert_type(x, jnp.int32)


def _float(x):
    return lax.bitcast_convert_type(x, jnp.float32)


def pow_of(x, fmt: str):
    """2**(alignment exponent) of fp32 operand values x (0 for zero, inf for inf and NaN):
    the exponent field alone; an f16 / fp8 subnormal at its format's smallest normal
    exponent (``sub_exp="emin"``)."""
    p = _float(_bits(x) & _EXP)
    if fmt in FAST:  # f16 / fp8 values are normal fp32 numbers: 0 only for zero
        p = jnp.where(p == 0, jnp.float32(0),
                      jnp.maximum(p, jnp.float32(2.0 ** softfloat.emin(fmt))))
    return p


def _add_terms(ts, s):
    """The int32 sum of the terms ts: written out (s None), every term, then their sum; in
    a loop, each added to s as it comes (ran 1.3x faster)."""
    if s is None:
        return functools.reduce(jnp.add, list(ts))
    for t in ts:
        s = s + t
    return s


def _passes(u: int, ik: int, products, terms, w0, sp0):
    """A step's two passes over its ik products, ``u`` written out per iteration of a loop
    (ik: no loop): ``products(j, wmax, sp)`` the first (the maximum and the IEEE sum, from
    ``w0()`` in a loop and ``sp0``), ``terms(j, s, x)`` the second -> (wmax, sp,
    ``sums``), ``sums(x)`` the int32 sum of every term with x (from 0 in a loop: the sum
    wraps, its order changes no bit)."""
    if u == ik:
        wmax, sp = products(0, None, sp0)
        return wmax, sp, functools.partial(terms, 0, None)
    wmax, sp = lax.fori_loop(0, ik // u, lambda j, ws: products(j, *ws), (w0(), sp0))
    return wmax, sp, lambda x: lax.fori_loop(0, ik // u, lambda j, s: terms(j, s, x),
                                             jnp.zeros(sp0.shape, jnp.int32))


def _step(col, row, c, plan: Plan, pcol=None, prow=None):
    """One instruction on fp32 operand columns ``col(i)`` (bm, 1) and rows ``row(i)``
    (1, bn), i < ``plan.ik``, from the fp32 accumulator c (bm, bn) -> D (bm, bn) fp32 values (NaN
    with any payload). ``pcol``, ``prow``: the operands' powers of two (``pow_of``) read
    from bf16 arrays of their own (``form="split"``), so that the first pass (E) holds no
    operand value in registers through the second (the terms); their products and
    maximum are bf16 (exact: powers of two in fp32's range).

    Both passes write out ``plan.unroll`` products per iteration of a loop over the ik
    (``_passes``). In a loop the maximum starts from +0, below or equal to every power of
    two."""
    u, (fa, fb) = plan.unroll, plan.fmts

    def products(j, wmax, sp):  # the first pass over products j * u .. j * u + u - 1
        for i in (j * u + t for t in range(u)):
            if pcol is None:
                a, b = col(i), row(i)
                w = pow_of(a, fa) * pow_of(b, fb)  # 2**(ea + eb), exact
            else:
                a, b = (col(i), row(i)) if not plan.finite else (None, None)
                w = pcol(i) * prow(i)
            wmax = w if wmax is None else jnp.maximum(wmax, w)
            if not plan.finite:
                sp = sp + a * b  # NaN / +-inf exactly when the block result is
        return wmax, sp

    def terms(j, s, scale):  # the exact products' terms (exact scaling), summed
        return _add_terms((trunc_f32(col(i) * row(i) * scale)
                           for i in (j * u + t for t in range(u))), s)

    wmax, sp, sums = _passes(u, plan.ik, products, terms, lambda: jnp.zeros(
        c.shape, jnp.float32 if pcol is None else jnp.bfloat16), c)
    return finish(c, wmax.astype(jnp.float32), sums, sp, plan)


def _step_k(at, bt, c, plan: Plan):
    """``_step`` on an operand block at (bm, ik) and B's block transposed bt (bn, ik): the
    products as one (bm, bn, ik) array, the maximum and the sums reductions over k."""
    w = pow_of(at, plan.fmts[0])[:, None, :] * pow_of(bt, plan.fmts[1])[None, :, :]
    sp = c if plan.finite else c + (at[:, None, :] * bt[None, :, :]).sum(-1)  # any order
    return finish(c, w.max(-1), lambda scale: trunc_f32(
        at[:, None, :] * bt[None, :, :] * scale[:, :, None]).sum(-1), sp, plan)


def finish(c, wmax, terms, sp, plan: Plan):
    """The block's exponent, its exact truncated sum (``terms(scale)``: the int32 sum of
    the scaled products) with C, and the rounding to fp32 (``_step``): ``plan.kept``
    significant bits. Where every product is zero the result is C cut to the bits that
    both its term (F below E) and the rounding keep (all of them for f16 / bf16)."""
    F = plan.F
    cb = _bits(c)
    cpow = _float(cb & _EXP)  # 2**exp(C) (0 for a zero or subnormal C, inf for inf/NaN)
    eb = _bits(jnp.maximum(wmax, cpow)) >> 23  # E + 127 (>= 27 when a product is non-zero)
    scale = _float((F + 254 - eb) << 23)  # 2**(F - E)
    s = terms(scale)
    if plan.rounding == "int":
        cv = softfloat.f32_term_rz(cb, eb - 127, F)
    else:
        cv = trunc_f32(c * scale)  # C truncated toward zero on the same grid
    neg, mag = _signed_sum(s, cv)
    if plan.rounding == "int":
        v = _float(softfloat.rz_f32_bits(mag, neg, eb - F - 127, softfloat.kept_mask(plan.kept)))
    else:
        drop = jnp.maximum(32 - plan.kept - lax.clz(mag), 0)  # bit length - kept
        q = lax.shift_right_logical(mag, drop) << drop  # kept bits, toward zero
        q = lax.bitcast_convert_type(q, jnp.uint32)
        v = q.astype(jnp.float32) * _float((eb - F) << 23)  # * 2**(E - F): exact or inf
        v = jnp.where(neg & (q != 0), -v, v)
    d = jnp.where(wmax == 0, _c_only(cb, softfloat.kept_mask(min(F + 1, plan.kept))), v)
    if plan.finite:
        return jnp.where((cb & _EXP) == _EXP, c, d)
    return jnp.where((_bits(sp) & _EXP) == _EXP, sp, d)


def _c_only(cb, low: int):
    """The block's result where every product is zero: C (bits cb) with the fraction bits
    ``low`` cleared, on the integers (C may be subnormal); a zero +0."""
    # -0's bits alone: XLA's CPU made a magnitude test a float compare (a subnormal C: 0)
    cm = cb & ~low
    return _float(jnp.where(cm == jnp.int32(-(1 << 31)), 0, cm))


def _signed_sum(s, cv):
    """The int32 sum of the terms s and C's term cv, which may pass 2**31 (its carry
    found from the signs) -> (neg, its magnitude as uint32 bits in int32)."""
    t = s + cv
    carry = ((s ^ t) & (cv ^ t)) < 0
    neg = (t < 0) != carry
    return neg, jnp.where(neg, -t, t)


#: The alignment exponent of a zero, inf or NaN operand (form "general"): the sum of two
#: is below any real product's (>= -252) and any floor, and scales its term to nothing.
_NO_EXP = -1000


def _decode(bits):
    """fp32 bits (int32) of bf16 values -> (m, e): the value is ``m * 2**e`` with the
    alignment exponent e (int32: the exponent field, at least 1, less 127: a subnormal at
    -126) and m a normal fp32 number in [1, 2) or, for a subnormal, the fraction in
    (0, 1) (1.f - 1, exact); a zero m = 0 and an inf or NaN m = the value itself, both
    with e = ``_NO_EXP``. No float operation reads a subnormal (a GPU may flush them).
    The fields are ``datapath._decode_e8``'s; its significand is an integer, which
    takes an int32 -> fp32 conversion per element, and the kernel's bound is the
    conversion pipe: here the fraction is set into the bits of 1.0 instead."""
    field = (bits >> 23) & 0xFF
    mag = bits & 0x7FFFFFFF
    normal = _float((bits & -0x7F800001) | 0x3F800000)  # sign, 1.fraction
    sub = _float(mag | 0x3F800000) - jnp.float32(1)  # the fraction f * 2**-23
    m = jnp.where(field == 0, jnp.where(bits < 0, -sub, sub), normal)
    m = jnp.where(field == 0xFF, _float(bits), m)
    e = jnp.where((field == 0xFF) | (mag == 0), _NO_EXP, jnp.maximum(field, 1) - 127)
    return m, e


def _step_general(col, row, cb, plan: Plan):
    """``_step`` for bf16 / tf32 operands of any value (inf, NaN, subnormals, products beyond
    fp32's exponents), on fp32 bits: ``col(i)`` (bm, 1) and ``row(i)`` (1, bn) give
    ``_decode``'s (m, e) of operand i, cb the accumulator's bits (bm, bn) -> D's bits.

    A product is ``ma * mb * 2**(ea + eb)``: ``ma * mb`` exact in fp32 (below 4), its
    alignment exponent ``ea + eb`` an int32 sum (``align="nominal"``). E is their maximum,
    C's exponent (a subnormal C at -126, ``c_sub_exp``) and the floor
    ``-126 - e_floor``, all in int32. A term is ``int32(ma * mb * 2**(ea + eb - E + F))``:
    the scale is a power of two at most ``2**F``, built from its exponent bits (+0 where
    that is below fp32's normals: the term is then below 1 and truncates to 0). C's term
    and the rounding to fp32 are integer operations on the bits (``_finish_general``).
    The IEEE sum of C's stand-in (C if inf or NaN, else 0) and the products ``ma * mb``
    (finite ones below 4) is NaN / +-inf exactly when the block result is."""
    u, F = plan.unroll, plan.F
    cf = (cb >> 23) & 0xFF
    sp0 = jnp.where(cf == 0xFF, _float(cb), jnp.float32(0))
    lo = -126 - plan.e_floor if plan.e_floor is not None else 2 * _NO_EXP
    clead = jnp.where(cf == 0, jnp.where((cb & 0x7FFFFFFF) == 0, lo, -126), cf - 127)

    def products(j, wmax, sp):
        for i in (j * u + t for t in range(u)):
            (ma, ea), (mb, eb) = col(i), row(i)
            w = ea + eb
            wmax = w if wmax is None else jnp.maximum(wmax, w)
            sp = sp + ma * mb
        return wmax, sp

    def terms(j, s, G):
        ts = []
        for i in (j * u + t for t in range(u)):
            (ma, ea), (mb, eb) = col(i), row(i)
            scale = _float(jnp.maximum(ea + eb + G, 0) << 23)  # 2**(ea + eb - E + F)
            ts.append(trunc_f32(ma * mb * scale))
        return _add_terms(ts, s)

    wmax, sp, sums = _passes(u, plan.ik, products, terms,
                             lambda: jnp.full(cb.shape, 2 * _NO_EXP, jnp.int32), sp0)
    E = jnp.maximum(jnp.maximum(wmax, clead), lo)
    return _finish_general(cb, E, sums(F + 127 - E), sp, plan)


def _finish_general(cb, E, s, sp, plan: Plan):
    """The sum of the terms s (int32) and C's term on the grid of ``2**(E - F)``, rounded
    toward zero to fp32 bits (``softfloat.rz_f32_bits``), or the special value of sp."""
    neg, mag = _signed_sum(s, softfloat.f32_term_rz(cb, E, plan.F))
    bits = softfloat.rz_f32_bits(mag, neg, E - plan.F, softfloat.kept_mask(plan.kept))
    spb = _bits(sp)
    return jnp.where((spb & _EXP) == _EXP, spb, bits)


def kernel(a_ref, b_ref, c_ref, *refs, plan: Plan):
    """The kernel body on blocks A (..., bm, K), B (..., K, bn), C and D (..., bm, bn): any
    leading axes (``fused_tiles``' groups of tiles; form "reduce" 2-D only)."""
    *pow_refs, o_ref = refs
    ik = plan.ik

    def dec(x):  # bit patterns (bf16 int16, tf32 int32) -> _decode of their fp32 bits
        return _decode(x.astype(jnp.int32) << 16 if plan.fmt == "bf16" else x)

    def step_general(j, cb):  # a_ref, b_ref: int16 bit patterns; the carry fp32 bits
        s = pl.multiple_of(j * ik, ik)
        return _step_general(lambda i: dec(a_ref[..., pl.ds(s + i, 1)]),
                             lambda i: dec(b_ref[..., pl.ds(s + i, 1), :]), cb, plan)

    def step(j, c):
        s = pl.multiple_of(j * ik, ik)
        if plan.form == "reduce":  # b_ref holds B transposed
            return _step_k(a_ref[:, pl.ds(s, ik)].astype(jnp.float32),
                           b_ref[:, pl.ds(s, ik)].astype(jnp.float32), c, plan)
        split = {}
        if pow_refs:  # form="split"
            pa_ref, pb_ref = pow_refs
            split = dict(pcol=lambda i: pa_ref[..., pl.ds(s + i, 1)],
                         prow=lambda i: pb_ref[..., pl.ds(s + i, 1), :])
        return _step(lambda i: a_ref[..., pl.ds(s + i, 1)].astype(jnp.float32),
                     lambda i: b_ref[..., pl.ds(s + i, 1), :].astype(jnp.float32), c, plan,
                     **split)

    if plan.form == "general":
        bits = lax.fori_loop(0, plan.K // ik, step_general, _bits(c_ref[...]))
    else:
        bits = _bits(lax.fori_loop(0, plan.K // ik, step, c_ref[...]))
    o_ref[...] = jnp.where((bits & 0x7FFFFFFF) > _EXP, jnp.int32(plan.nan_bits - (1 << 32)
                           if plan.nan_bits >= 1 << 31 else plan.nan_bits), bits)


def gemm(a, b, c, plan: Plan, *, interpret: bool = False):
    """``D = A @ B + C`` as the chain of exact instructions: (M, K) @ (K, N) + (M, N) fp32,
    M and N multiples of the plan's tile, K the plan's K (a multiple of its ik) -> fp32 D;
    A and B of the plan's formats (their storage dtypes, or fp32 values).

    Example:
        >>> a = jnp.ones((64, 16), jnp.bfloat16)
        >>> p = Plan("bf16", K=16, F=25, nan_bits=0x7FFFFFFF, finite=True)
        >>> jax.eval_shape(lambda: gemm(a, a.T, jnp.zeros((64, 64)), p, interpret=True))
        ShapeDtypeStruct(shape=(64, 64), dtype=float32)
    """
    from jax.experimental.pallas import triton as pltriton  # noqa: PLC0415

    (M, K), N = a.shape, b.shape[1]
    bm, bn = plan.block
    if plan.form == "reduce":
        b = b.T
    if K != plan.K or K % plan.ik or M % bm or N % bn:
        raise ValueError(f"gemm: {a.shape} @ {b.shape} does not fit the plan {plan}")
    if plan.form == "general" and (plan.fmt not in GENERAL or plan.f32_operands):
        raise ValueError(f"gemm: form 'general' takes bf16 / tf32 operands as they are "
                         f"(fmt 'bf16' or 'tf32', f32_operands False), got the plan {plan}")
    if not interpret:
        register_triton_rule()
    a_spec = pl.BlockSpec((bm, K), lambda i, j: (i, 0))
    b_spec = (pl.BlockSpec((bn, K), lambda i, j: (j, 0)) if plan.form == "reduce" else
              pl.BlockSpec((K, bn), lambda i, j: (0, j)))
    in_specs = [a_spec, b_spec, pl.BlockSpec((bm, bn), lambda i, j: (i, j))]
    pow_dt = jnp.bfloat16
    args = [a, b, c.astype(jnp.float32)]
    if plan.form == "split":  # the powers of two as bf16 (exact: fp32's exponent range)
        args += [pow_of(x.astype(jnp.float32), f).astype(pow_dt)
                 for x, f in zip((a, b), plan.fmts, strict=True)]
        in_specs += [a_spec, b_spec]
    if plan.f32_operands:
        args[:2] = [x.astype(jnp.float32) for x in args[:2]]
    if plan.form == "general":  # the bit patterns: the kernel decodes them
        args[:2] = [operand_bits(x, plan.fmt) for x in args[:2]]
    d = pl.pallas_call(
        functools.partial(kernel, plan=plan),
        grid=(M // bm, N // bn),
        in_specs=in_specs,
        out_specs=pl.BlockSpec((bm, bn), lambda i, j: (i, j)),
        out_shape=jax.ShapeDtypeStruct((M, N), jnp.int32),
        compiler_params=pltriton.CompilerParams(num_warps=plan.num_warps,
                                                num_stages=plan.num_stages),
        interpret=interpret,
        name=KERNEL_NAME,
    )(*args)
    return lax.bitcast_convert_type(d, jnp.float32)


#: The kernel ``chain`` runs: output tile, warps, form, rounding, fp32 operands (the
#: fewest SASS instructions per multiply-add at 80 registers, ptxas 13 for sm_90: 7.45,
#: ``benchmarks/fused_kernel_sass.py``; H100 timings in ``benchmarks/README.md``).
#: Constants of the kernel, not switches: variants are ``chain``'s arguments.
BLOCK, NUM_WARPS = (32, 32), 4
FORM, ROUNDING, F32_OPERANDS = "split", "float", True
# The size rules are options (gemm_kernel_rolled_below, gemm_kernel_unroll_small,
# gemm_kernel_any_range_below; config.py says why), read at trace time by ``unroll_for``
# and ``any_range`` (the plans built carry the choice).

#: ``gemm`` jitted per plan: a product shape used again in a program (the same layer
#: twice, a forward and a backward product alike) is traced and lowered once.
_gemm = jax.jit(gemm, static_argnames=("plan", "interpret"))


def all_finite(x):
    return jnp.all((_bits(x.astype(jnp.float32)) & _EXP) != _EXP)


def any_range(M: int, N: int, K: int, block: tuple[int, int] | None = None) -> bool:
    """Whether :func:`chain` runs an (M, K) @ (K, N) product with one kernel for operands
    of any value, without a cond (the option ``gemm_kernel_any_range_below``): for bf16
    the caller then passes ``form="general"`` and no range check.

    Example:
        >>> any_range(64, 64, 64), any_range(4096, 4096, 4096)
        (True, False)
    """
    bm, bn = block or BLOCK
    return -(-M // bm) * bm * -(-N // bn) * bn * K < config.gemm_kernel_any_range_below


def operand_formats(fmt: str, b_fmt: str | None = None) -> tuple[str, str]:
    """(A's format, B's: None is ``fmt``), a pair the kernel ``takes``, else a ValueError."""
    fmts = (fmt, b_fmt or fmt)
    if not takes(*fmts):
        raise ValueError(f"chain: fmt={fmt!r}, b_fmt={b_fmt!r}: allowed {FORMATS}, both "
                         f"the same or both fp8")
    return fmts


def unroll_for(unroll: int | None, macs: int, ik: int) -> int:
    """``Plan.unroll``: ``unroll``, or for None ``gemm_kernel_unroll_small`` below
    ``gemm_kernel_rolled_below`` multiply-adds, else ``ik``; a divisor of ``ik``."""
    if unroll is None:
        small = macs < config.gemm_kernel_rolled_below
        unroll = min(config.gemm_kernel_unroll_small, ik) if small else ik
    if ik % unroll:
        raise ValueError(f"chain: unroll={unroll}: allowed "
                         f"{', '.join(str(u) for u in range(1, ik + 1) if ik % u == 0)} "
                         f"(a divisor of the instruction's k={ik})")
    return unroll


def plan_for(dp: Datapath, fmts: tuple[str, str], K: int, finite: bool,
             block: tuple[int, int], num_warps: int | None, **fields) -> Plan:
    """The :class:`Plan` of the datapath ``dp`` and formats ``fmts`` (``operand_formats``)."""
    return Plan(fmts[0], K, dp.F, dp.nan_f32, finite, block, num_warps or NUM_WARPS,
                e_floor=dp.e_floor, ik=dp.block_k, kept=dp.sum_mbits + 1,
                b_fmt=None if fmts[1] == fmts[0] else fmts[1], **fields)


def stored(x, fmt: str):
    """An operand of ``fmt`` as the kernel reads it: its storage dtype; tf32 with the low
    13 bits cleared (``bitops.tf32_keep``: the value the tensor core reads)."""
    x = x.astype(isa.storage_dtype(fmt))
    return bitops.tf32_keep(x) if fmt == "tf32" else x


def operand_bits(x, fmt: str):
    """The bit patterns that form "general" reads (``GENERAL``: bf16 int16, tf32 int32)."""
    return lax.bitcast_convert_type(stored(x, fmt), GENERAL[fmt])


def pad_to(x, shape):
    """x padded with zeros at the end of each axis to ``shape``."""
    pads = [(0, s - d) for s, d in zip(shape, x.shape, strict=True)]
    return x if not any(p for _, p in pads) else jnp.pad(x, pads)


def chain(a, b, c, dp: Datapath, fmt: str, *, finite: bool | None = None,
          interpret: bool = False, block: tuple[int, int] | None = None,
          num_warps: int | None = None, form: str | None = None,
          rounding: str | None = None, f32_operands: bool | None = None,
          unroll: int | None = None, b_fmt: str | None = None):
    """``matmul``'s exact k loop through the kernel: (M, K) @ (K, N) + C (M, N) fp32, any
    M, N, K a multiple of the instruction's k (``dp.block_k``: 16, fp8 32; M and N padded
    with zeros to the tile); A of ``fmt``, B of ``b_fmt`` (None: ``fmt``; two fp8 formats
    may differ). ``finite``: the operands are known finite (True), known not to be
    (False), or None: for f16 and fp8 below ``gemm_kernel_any_range_below`` multiply-adds
    (``any_range``) the kernel with the IEEE sum of the products alone, from it a
    ``lax.cond`` on whether they are finite (the kernel without that sum where they are).
    bf16 / tf32 operands: ``form="general"`` takes any value; the other forms need them in fp32's
    range (``in_fp32_range``: the caller's cond). ``unroll``: ``Plan.unroll`` (None: the
    option ``gemm_kernel_unroll_small`` below ``gemm_kernel_rolled_below`` multiply-adds,
    else the instruction's k).

    Example:
        >>> dp = jaxwarp.datapath_for("sm_90", "wgmma", "f16", 16)
        >>> a = jnp.full((8, 16), 3.0, jnp.float16)
        >>> jax.eval_shape(lambda: chain(a, a.T, jnp.ones((8, 8)), dp, "f16",
        ...                              interpret=True))
        ShapeDtypeStruct(shape=(8, 8), dtype=float32)
        >>> dp8 = jaxwarp.datapath_for("sm_90", "wgmma", "e4m3", 32)
        >>> a8 = jnp.ones((8, 64), jnp.float8_e4m3fn)
        >>> chain(a8, a8.T.astype(jnp.float8_e5m2), jnp.zeros((8, 8)), dp8, "e4m3",
        ...       b_fmt="e5m2", interpret=True)[0, :2]
        Array([64., 64.], dtype=float32)
    """
    (M, K), N = a.shape, b.shape[1]
    bm, bn = block or BLOCK
    Mp, Np = -(-M // bm) * bm, -(-N // bn) * bn
    ik, fmts = dp.block_k, operand_formats(fmt, b_fmt)
    if K % ik:
        raise ValueError(f"chain: K={K} is not a multiple of the instruction's k={ik}")
    general = form == "general"
    if general and (fmt not in GENERAL or f32_operands):
        raise ValueError(f"chain: form='general' takes bf16 / tf32 operands as their bits, "
                         f"got fmt={fmt!r}, f32_operands={f32_operands!r} (allowed: 'bf16', "
                         f"'tf32'; None or False)")
    a, b, c = pad_to(a, (Mp, K)), pad_to(b, (K, Np)), pad_to(c, (Mp, Np))
    a, b = (stored(x, f) for x, f in zip((a, b), fmts, strict=True))
    unroll = unroll_for(unroll, Mp * Np * K, ik)

    def run(fin):
        plan = plan_for(dp, fmts, K, fin, (bm, bn), num_warps,
                        form=form or FORM, rounding=rounding or ROUNDING,
                        f32_operands=not general and (F32_OPERANDS if f32_operands is None
                                                      else f32_operands),  # general: bits
                        unroll=unroll)
        return lambda a, b, c: _gemm(a, b, c, plan, interpret=interpret)

    if general or (finite is None and any_range(M, N, K, block)):  # no cond
        d = run(False)(a, b, c)
    elif finite is None:
        d = lax.cond(all_finite(a) & all_finite(b), run(True), run(False), a, b, c)
    else:
        d = run(finite)(a, b, c)
    return d[:M, :N]
