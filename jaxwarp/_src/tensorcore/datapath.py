"""Tensor-core arithmetic: what one chain of MMA instructions computes, bit for bit.

``mma(a, b, c)`` returns ``D = A @ B + C`` for logical (unfragmented) matrices in the
arithmetic of the tensor core. The instruction family (``instruction``: ``"wmma"``,
``"mma_sync"``, ``"wgmma"``) and its k (``instruction_k``) fix what one instruction
sums; a k axis longer than one instruction is a chain of instructions in k order, the D
of one being the C of the next, as in a GEMM main loop. What the target can issue
(:class:`~jaxwarp._src.tensorcore.arch.Target`) and how its tensor cores add
(:class:`~jaxwarp._src.tensorcore.arch.Datapath`, per instruction family and operand
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
   least D's minimum normal exponent (``c_sub_exp="emin"``: a subnormal C of D's
   format counts at emin, an f16 subnormal C of an fp32 D with its own leading bit);
3. ``E`` is the largest alignment exponent of the non-zero terms, but never below
   ``emin(D) - 7`` (``e_floor=7``; -21 with an f16 D, -133 with an fp32 D or block
   result, also when C is zero); every term is truncated toward zero (``trunc="rz"``)
   to a multiple of ``2**(E - F)``;
4. the truncated terms are added exactly;
5. the sum becomes fp32 toward zero (``block_round``; cut to ``sum_mbits`` fraction
   bits first: 13 for fp8 ``wgmma``) or, with an f16 C, f16 to nearest even directly
   (``f16_out="direct"``, a -0 result becomes +0: ``f16_zero="plus"``). Beyond the
   format's range the result is inf (also toward zero).

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
"""

from __future__ import annotations

import functools
from types import MappingProxyType
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxwarp._src import checks
from jaxwarp._src.numerics import bitops, fma, softfloat
from jaxwarp._src.numerics.formats import ALIASES as FORMAT_ALIASES
from jaxwarp._src.numerics.formats import FORMATS
from jaxwarp._src.tensorcore import arch as _arch
from jaxwarp._src.tensorcore import isa
from jaxwarp._src.tensorcore.arch import ARCHS, ArchModel, Datapath, Target

# --------------------------------------------------------------------------------------
# Types and valid combinations: views of the instruction catalogue (``isa.ROWS``; b1
# goes through ``bmma``).

_MMA_ROWS = tuple(r for r in isa.ROWS if r.datapath != "bmma")
A_TYPES = tuple(dict.fromkeys(t for r in _MMA_ROWS for t in r.a_formats))
ACC_TYPES = tuple(dict.fromkeys(t for r in _MMA_ROWS for p in r.cd for t in p))
#: Type name -> dtype of a logical matrix entry (from the format registry).
STORAGE_DTYPE = MappingProxyType({t: isa.storage_dtype(t) for t in A_TYPES + ACC_TYPES})

#: Valid WMMA (a_format, c_format, d_format) combinations.
COMBOS = tuple(dict.fromkeys((t, c, d) for r in _MMA_ROWS if r.instruction == "wmma"
                             for t in r.a_formats for c, d in r.cd))
#: (instruction, a_format) -> valid (c_format, d_format) of ``mma.sync`` (at any shape) and
#: ``wgmma``.
PTX_CD = MappingProxyType({(r.instruction, t): isa.cd_pairs(r.instruction, t)
                           for r in _MMA_ROWS if r.instruction != "wmma" for t in r.a_formats})
# Operand types that may be paired (a_format, b_format) with a different one.
_MIXABLE = isa.mixed_pairs()
_INT_TYPES = tuple(dict.fromkeys(t for r in _MMA_ROWS if r.datapath == "int"
                                 for t in r.a_formats))

MODES = ("exact", "fast")
BMMA_OPS = ("xor", "and")


# --------------------------------------------------------------------------------------
# Argument checks.


class _Cfg(NamedTuple):
    """Static configuration of one exact float mma (hashable: a jit static arg)."""

    a_format: str
    b_format: str
    c_format: str
    d_format: str
    dp: Datapath
    ik: int
    c_shift: int = 0  # tcgen05 scale-input-d: the first C enters as C * 2**-c_shift


def _resolve_arch(arch) -> tuple[Target | None, ArchModel]:
    if isinstance(arch, ArchModel):
        target = _arch.parse_target(arch.name) if arch.name in _arch.TARGETS else None
        return target, arch
    target = _arch.supported_target(arch)
    return target, ARCHS[target.name]


def _check_static(a_format, b_format, c_format, d_format, arch, mode, satf, instruction,
                  datapath):
    checks.static_choice(instruction, "instruction", isa.INSTRUCTIONS)
    checks.static_choice(a_format, "a_format", A_TYPES)
    checks.static_choice(b_format, "b_format", A_TYPES)
    checks.static_choice(c_format, "c_format", ACC_TYPES)
    checks.static_choice(d_format, "d_format", ACC_TYPES)
    checks.static_choice(mode, "mode", MODES)
    if not isinstance(satf, bool):
        raise TypeError(f"satf must be a Python bool, got {type(satf).__name__} {satf!r}")
    if datapath is not None and not isinstance(datapath, Datapath):
        raise TypeError(f"datapath must be a Datapath or None, got {type(datapath).__name__}")
    target, model = _resolve_arch(arch)
    if b_format != a_format and not any({a_format, b_format} <= s for s in _MIXABLE):
        raise ValueError(f"a_format={a_format!r} and b_format={b_format!r} cannot be mixed; mixed "
                         f"pairs exist only within {[sorted(s) for s in _MIXABLE]}")
    if instruction == "wmma":
        if b_format != a_format:
            raise ValueError(f"wmma needs b_format == a_format, got {a_format!r}, {b_format!r}")
        if (a_format, c_format, d_format) not in COMBOS:
            raise ValueError(
                f"Unsupported wmma types {(a_format, c_format, d_format)=}; valid "
                f"(a_format, c_format, "
                f"d_format) combinations: {COMBOS}")
    else:
        valid = PTX_CD.get((instruction, a_format))
        if valid is None or (c_format, d_format) not in valid:
            raise ValueError(
                f"Unsupported {instruction} types {(a_format, c_format, d_format)=}; valid "
                f"(c_format, d_format) for a_format={a_format!r}: {valid}")
    if target is not None:
        _arch.check_target(target, instruction, a_format, b_format)
    return target, model


def _check_array(x, name: str, want: jnp.dtype) -> jax.Array:
    x = jnp.asarray(x)
    if x.dtype != want:
        raise TypeError(f"{name} must have dtype {want} for this type, got {x.dtype}")
    if x.ndim < 2:
        raise ValueError(f"{name} must be at least 2-D (..., rows, cols), got shape {x.shape}")
    return x


def _check_shapes(a, b, c):
    m, k = a.shape[-2:]
    k2, n = b.shape[-2:]
    if k2 != k:
        raise ValueError(f"a is (..., m, k) = {a.shape} but b is (..., k, n) = {b.shape}: "
                         f"k differs")
    if c.shape[-2:] != (m, n):
        raise ValueError(f"c must be (..., m, n) = (..., {m}, {n}), got {c.shape}")
    try:
        batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2], c.shape[:-2])
    except ValueError as e:
        raise ValueError(f"batch dims of a {a.shape}, b {b.shape}, c {c.shape} do not "
                         f"broadcast") from e
    return batch, m, n, k


# --------------------------------------------------------------------------------------
# Decoded terms (the soft-float helpers live in ``numerics/softfloat.py``).

_NEG_BIG = softfloat.NEG_BIG  # "exponent" of a zero term: below any real one
_Acc = softfloat.Term  # a decoded accumulator term


def _acc(bits, fmt: str, dp: Datapath, out: str | None = None, shift: int = 0) -> _Acc:
    """An accumulator term of ``fmt`` bits, as the block that sums into ``out`` (default
    ``fmt``) sees it: with ``c_sub_exp="emin"`` its alignment exponent (``lead``) is at
    least ``emin(out)`` (an f16 subnormal C of an fp32 D keeps its own), with
    ``e_floor`` at least ``emin(out) - e_floor`` also for a zero, which then bounds E.
    ``shift``: the term is C * 2**-shift exactly (tcgen05 scale-input-d: its exponents
    lowered after the subnormal rule, before the floor)."""
    t = softfloat.term(bits, fmt)
    lo = softfloat.emin(out or fmt)
    if dp.c_sub_exp != "lead":
        sub = lo if dp.c_sub_exp == "emin" else softfloat.emin(fmt)
        t = t._replace(lead=jnp.where(t.sig != 0, jnp.maximum(t.lead, sub), t.lead))
    if shift:
        t = t._replace(lead=jnp.where(t.sig != 0, t.lead - shift, t.lead), lsb=t.lsb - shift)
    if dp.e_floor is not None:
        t = t._replace(lead=jnp.maximum(t.lead, lo - dp.e_floor))
    return t


# "No accumulator" (the +0 that ``c_mode="end"`` starts from; no term, no sign).
_NO_ACC = _Acc(np.bool_(False), np.int32(0), np.int32(0), np.int32(_NEG_BIG),
               np.bool_(False), np.bool_(False), np.bool_(False), np.bool_(True))


def _pow2(e):
    """2.0**(e - 127) as float32 from an int32 biased exponent e in [1, 254]."""
    return lax.bitcast_convert_type(e << 23, jnp.float32)


def _col(x, i):  # operand i of the a side, (..., m, 1)
    return x[..., :, i:i + 1]


def _row(x, i):  # operand i of the b side, (..., 1, n)
    return x[..., i:i + 1, :]


# Products per int32 partial sum: every aligned term is below 2**(F + 2) <= 2**30.
_GROUP = 8


def _sum_terms(terms, acc: _Acc, E, F, trunc):
    """Exact sum of the truncated product terms (int32, in units of 2**(E - F)) and the
    accumulator (truncated here) -> (neg, mag (uint32), g): value (-1)**neg * mag * 2**g."""
    g = E - F
    sh = acc.lsb - g
    cv = softfloat.shift(acc.sig, sh)
    cv = jnp.where(acc.neg, -cv, cv)
    if trunc == "floor":  # toward minus infinity: a negative C with lost bits goes down
        lost = jnp.where(sh >= 0, False, jnp.where(
            sh <= -31, acc.sig != 0, (acc.sig & ((1 << jnp.clip(-sh, 0, 30)) - 1)) != 0))
        cv = cv - (lost & acc.neg).astype(jnp.int32)
    groups = [sum(terms[i:i + _GROUP]) for i in range(0, len(terms), _GROUP)]
    groups.append(cv)
    hi = sum(x >> 1 for x in groups)
    lo = sum(x & 1 for x in groups)
    # sum = 2 * hi + lo exactly in int32 (|sum| may pass 2**31 but stays below 2**32).
    neg = hi + (lo >> 1) < 0
    u = (hi.astype(jnp.uint32) << 1) + lo.astype(jnp.uint32)
    return neg, jnp.where(neg, jnp.uint32(0) - u, u), g


def _acc_special(acc: _Acc):
    """The accumulator's stand-in in the IEEE special sum: NaN, +-inf, -0 (a zero of
    negative sign, or no accumulator) or +0."""
    return jnp.where(acc.nan, jnp.float32(jnp.nan),
                     jnp.where(acc.pinf, jnp.float32(jnp.inf),
                               jnp.where(acc.ninf, jnp.float32(-jnp.inf),
                                         jnp.where(acc.negzero, jnp.float32(-0.0),
                                                   jnp.float32(0)))))


def _specials(prods, acc: _Acc, dp: Datapath):
    """(nan, +inf, -inf, negzero) of a block from the IEEE fp32 sum of its exact
    products (or of stand-ins with their signs and specials) and the accumulator's
    stand-in: that sum is NaN / +-inf exactly when the block result is, and -0 exactly
    when every term is a zero of negative sign (a sum rounded to nearest is -0 only
    then; the products here are never fp32 subnormals, so no flush can fake one)."""
    sp = functools.reduce(jnp.add, prods, _acc_special(acc))
    nan = jnp.isnan(sp)
    negzero = (sp == 0) & jnp.signbit(sp) if dp.zero == "ieee" else jnp.bool_(False)
    return nan, sp == jnp.inf, sp == -jnp.inf, negzero


def _trunc(v, p, trunc: str):
    """Aligned fp32 term v (of the product p) -> int32, toward zero or minus infinity."""
    t = v.astype(jnp.int32)
    if trunc == "floor":
        inexact = (t.astype(jnp.float32) != v) | ((v == 0) & (p != 0))
        t = t - (inexact & (p < 0)).astype(jnp.int32)
    return t


class _Block(NamedTuple):
    """A block's exact truncated sum (-1)**neg * mag * 2**g and its specials."""

    neg: jax.Array
    mag: jax.Array
    g: jax.Array
    nan: jax.Array
    pinf: jax.Array
    ninf: jax.Array
    negzero: jax.Array


# How XLA sees a block: the k loop is unrolled into element-wise operations on
# (..., m, n) arrays, so the whole block fuses into one loop over the outputs and no
# (..., m, n, k) tensor is ever stored. The fast path (f16 and fp8 operands, whose
# values and products fp32 holds exactly as normal numbers) is then fp32 arithmetic: the
# product itself, the sum of the operands' alignment exponents whose maximum gives the
# block exponent E, the product scaled onto the grid of 2**(E - F), one conversion to
# int32 (the truncation) and one int32 addition. inf and NaN follow from the IEEE fp32
# sum of the products, which is NaN / +-inf exactly when the block result is. bf16 and
# tf32 take the general path (``_Operand``): their products may leave fp32's range.
# (On the H100, jax 0.11, a 2**18-tile batch: XLA stores each k slice of the operands
# once and fuses the rest; folding the slices into k reductions, or a cond choosing
# this path for bf16 in range, measured slower.)
# (XLA on CPU flushes fp32 subnormals: every fp32 value formed here is normal, zero,
# or only ever truncated to zero.)


def _ebits(x):
    """Biased exponent of fp32 x: 0 for zero, 255 for inf and NaN."""
    return (lax.bitcast_convert_type(x, jnp.int32) >> 23) & 0xFF


#: Operand formats of the fast path: f16 holds every value, fp32 every product of two
#: values exactly as a normal number (bf16 and tf32 products may leave fp32's range).
_FAST_FORMATS = frozenset({"f16", "e4m3", "e5m2", "e3m2", "e2m3", "e2m1"})


def _as_f16(x, fmt: str):
    """Operand values of ``fmt`` as float16 (exact): fp8 by a conversion, the fp6 / fp4
    codes (uint8, ``Format.code_storage``) from their decoded significand and exponent."""
    if not FORMATS[fmt].code_storage:
        return x.astype(jnp.float16)
    neg, lsb, sig, _, _, _ = softfloat.decode(x.astype(jnp.uint32), fmt)
    v = sig.astype(jnp.float32) * _pow2(lsb + 127)  # lsb >= -4: a normal fp32 scale
    return jnp.where(neg, -v, v).astype(jnp.float16)


def _fast_align(x, fmt: str, dp: Datapath):
    """Alignment exponent + 127 of the fp32 operand x (an ``fmt`` value): its biased
    exponent, a subnormal's raised to the format's smallest normal one
    (``sub_exp="emin"``); -1000 for zero (its products count for nothing)."""
    e = _ebits(x)
    if dp.sub_exp == "emin":
        e = jnp.maximum(e, softfloat.emin(fmt) + 127)
    return jnp.where(x == 0, -1000, e)


def _block_fast(a, b, ks, acc: _Acc, dp: Datapath, *, fmts: tuple[str, str],
                emin: int) -> _Block:
    """One block FMA over the k indices ``ks`` for f16 / fp8 operands (a (..., m, k),
    b (..., k, n) as f16: fp8 is converted exactly), converted to fp32 slice by slice here
    (so that XLA fuses the conversions instead of storing fp32 copies). ``emin``: the
    lowest alignment exponent of a non-zero product."""
    a, a_al = a if isinstance(a, tuple) else (a, None)  # (values, alignments) or values
    b, b_al = b if isinstance(b, tuple) else (b, None)
    av = [_col(a, i).astype(jnp.float32) for i in ks]
    bv = [_row(b, i).astype(jnp.float32) for i in ks]
    prods = [x * y for x, y in zip(av, bv, strict=True)]  # exact, normal or zero
    if dp.align == "nominal":  # the sum of the operands' alignment exponents
        if a_al is None:
            ea = [_fast_align(x, fmts[0], dp) for x in av]
            eb = [_fast_align(y, fmts[1], dp) for y in bv]
        else:  # computed beforehand (``_store_decoded``)
            ea = [_col(a_al, i).astype(jnp.int32) for i in ks]
            eb = [_row(b_al, i).astype(jnp.int32) for i in ks]
        top = functools.reduce(jnp.maximum, [x + y for x, y in zip(ea, eb, strict=True)])
        top = top - 127  # biased once, as _ebits; <= 0 when every product is zero
    else:  # the product's own leading bit
        top = _ebits(functools.reduce(jnp.maximum, [jnp.abs(p) for p in prods]))
    # top: 255 or more only with an inf / NaN operand (the result is then special).
    E = jnp.maximum(jnp.where(top > 0, top - 127, _NEG_BIG), acc.lead)
    # A non-zero product has E >= emin; otherwise the scale is never used.
    scale = _pow2(dp.F - jnp.clip(E, emin, 127) + 127)
    terms = [_trunc(p * scale, p, dp.trunc) for p in prods]
    neg, mag, g = _sum_terms(terms, acc, E, dp.F, dp.trunc)
    return _Block(neg, mag, g, *_specials(prods, acc, dp))


class _Operand(NamedTuple):
    """Operands of the general path, decoded once per element into 4 bytes.

    sig: float16 signed significand (an integer below 2**11, exact in fp16), +-inf or
      NaN for inf and NaN operands: the fp32 sum of the products ``sig_a * sig_b``
      (below 2**26 when finite) is then NaN / +-inf exactly when the block result is.
    exp: int16 ``16 * lsb + (align - lsb)``: the exponents of sig's last bit and the
      operand's alignment exponent (lsb -1000 for zero, inf and NaN, so that their
      products get no exponent and scale to nothing).

    On the CPU both are float32 (``_operand(..., stored=True)``), the same values.
    """

    sig: jax.Array
    exp: jax.Array


def _lead_only(dp: Datapath) -> bool:
    """Whether the alignment exponent alone gives the lsb: with nominal alignment and a
    subnormal at the minimum normal exponent, lsb = align - mbits for every non-zero
    finite operand (a normal's exponent, a subnormal's emin, less the fraction bits)."""
    return dp.align == "nominal" and dp.sub_exp == "emin"


def _operand(bits, fmt, dp: Datapath, stored: bool = False) -> _Operand:
    """Decoded operands; ``stored``: as float32 divisions that XLA's CPU backend stores.

    XLA's CPU fusion copies a cheap producer into every consumer that reads it through
    at most 15 indexings (``kAllowedCodeDuplication``), and the loop over a block's
    outputs then recomputes it for each output element: with fewer than 16 k elements
    per instruction (tf32 k4 / k8, bf16 k8) it decoded every operand element, and read
    ``matmul``'s dynamic slice of the k step, once per output (exact tf32 ``matmul`` ran
    about 15x slower than bf16). A division counts as expensive there and is not copied
    into a consumer that reuses its elements, so ``stored`` divides both arrays, by the
    sign (+-1, exact; a NaN's sign is never read) and by ``sign * sign`` (1, which XLA
    cannot fold away as it would a constant). The bits of every result are the same.
    """
    neg, lsb, sig, lead, inf, nan = softfloat.decode(bits, fmt, dp.sub_exp == "emin")
    sign = jnp.where(neg, jnp.float32(-1), jnp.float32(1))
    mag = jnp.where(inf, jnp.float32(jnp.inf), sig.astype(jnp.float32))
    if _lead_only(dp):
        exp = jnp.where(sig != 0, lead, -1000)
    else:
        exp = jnp.where(sig != 0, 16 * lsb + (lead - lsb), -16000)
    if stored:
        s = jnp.where(nan, jnp.float32(jnp.nan), mag) / sign
        return _Operand(s, exp.astype(jnp.float32) / (sign * sign))
    s = jnp.where(nan, jnp.float32(jnp.nan), sign * mag)
    return _Operand(s.astype(jnp.float16), exp.astype(jnp.int16))


def _block_general(a: _Operand, b: _Operand, ks, acc: _Acc, dp: Datapath, *,
                   emin: int, mbits: int) -> _Block:
    """One block FMA for any operand formats (bf16, tf32, fp8: products may leave
    fp32's range): like ``_block_fast`` on decoded operands (``_operand``), each
    product of significands scaled by its own power of two. ``mbits``: the fraction
    bits of a's format plus b's."""
    lead_only = _lead_only(dp)  # exp is the alignment exponent; lsb_a + lsb_b = pe - mbits

    def unpack(s, e):  # -> (fp32 significand, int32 lsb, int32 alignment exponent)
        e = e.astype(jnp.int32)
        if lead_only:
            return s.astype(jnp.float32), None, e
        lsb = e >> 4
        return s.astype(jnp.float32), lsb, lsb + (e & 15)

    ops_a = [unpack(_col(a.sig, i), _col(a.exp, i)) for i in ks]
    ops_b = [unpack(_row(b.sig, i), _row(b.exp, i)) for i in ks]
    prods = [x[0] * y[0] for x, y in zip(ops_a, ops_b, strict=True)]  # exact: < 2**22
    if dp.align == "nominal":
        pe = [x[2] + y[2] for x, y in zip(ops_a, ops_b, strict=True)]
    else:  # the product's own leading bit
        pe = [x[1] + y[1] + _ebits(p) - 127 for x, y, p in zip(ops_a, ops_b, prods,
                                                               strict=True)]
    # Zero, inf and NaN operands give exponents far below any real one (lsb -1000); if
    # neither a product nor C is non-zero, E does not matter.
    E = functools.reduce(jnp.maximum, pe, acc.lead)
    # Products only need a valid scale when one is non-zero (then E >= emin).
    fe = dp.F - jnp.maximum(E, emin) + 127
    if lead_only:
        lsbs, fe = pe, fe - mbits
    else:
        lsbs = [x[1] + y[1] for x, y in zip(ops_a, ops_b, strict=True)]
    terms = [_trunc(p * _pow2(jnp.maximum(lsb + fe, 1)), p, dp.trunc)
             for p, lsb in zip(prods, lsbs, strict=True)]
    neg, mag, g = _sum_terms(terms, acc, E, dp.F, dp.trunc)
    return _Block(neg, mag, g, *_specials(prods, acc, dp))


# --------------------------------------------------------------------------------------
# Rounding a block, IEEE additions.


def _specials_to(bits, r, nan_bits: int, inf_bits: int, sign: int):
    bits = jnp.where(r.nan, jnp.uint32(nan_bits), bits)
    bits = jnp.where(r.pinf & ~r.nan, jnp.uint32(inf_bits), bits)
    return jnp.where(r.ninf & ~r.nan, jnp.uint32(inf_bits | sign), bits)


def _zero_rule(bits, r: _Block, dp: Datapath, sign: int):
    if dp.zero == "ieee":
        bits = jnp.where(r.mag == 0, jnp.where(r.negzero, jnp.uint32(sign), 0), bits)
    return bits


def _f32_bits(r: _Block, dp: Datapath):
    """A block sum -> fp32 bits (``block_round``, ``sum_mbits``)."""
    q, lsb = softfloat.round_sig(r.mag, r.g, -126, dp.sum_mbits, dp.block_round)
    bits = _zero_rule(softfloat.encode(r.neg, q, lsb, "f32"), r, dp, 1 << 31)
    if dp.f32_zero == "plus":
        bits = jnp.where(bits == jnp.uint32(0x80000000), jnp.uint32(0), bits)
    return _specials_to(bits, r, dp.nan_f32, 0x7F800000, 1 << 31)


def _f16_bits(r: _Block, dp: Datapath):
    """A block sum -> fp16 bits directly (``f16_round``, ``f16_zero``)."""
    q, lsb = softfloat.round_sig(r.mag, r.g, -14, 10, dp.f16_round)
    bits = _zero_rule(softfloat.encode(r.neg, q, lsb, "f16"), r, dp, 0x8000)
    if dp.f16_zero == "plus":
        bits = jnp.where(bits == 0x8000, jnp.uint32(0), bits)
    return _specials_to(bits, r, dp.nan_f16, 0x7C00, 0x8000)


def _f32_to_f16(bits, dp: Datapath):
    """fp32 bits -> fp16 bits (``f16_round``; NaN -> ``nan_f16``)."""
    neg, lsb, sig, _, inf, nan = softfloat.decode(bits, "f32")
    q, l16 = softfloat.round_sig(sig.astype(jnp.uint32), lsb, -14, 10, dp.f16_round)
    out = softfloat.encode(neg, q, l16, "f16")
    out = jnp.where(inf, jnp.uint32(0x7C00) | (out & 0x8000), out)
    return jnp.where(nan, jnp.uint32(dp.nan_f16), out)


def _add_rn(x: _Acc, y: _Acc, out: str, dp: Datapath):
    """IEEE ``x + y`` to nearest even into ``out`` ("f32"/"f16") bits; NaN -> dp's."""
    return softfloat.add_rn(x, y, out, dp.nan_f32 if out == "f32" else dp.nan_f16)


def _f32_acc(x) -> _Acc:
    """An fp32 value (normal, zero, inf or NaN) as an accumulator term."""
    return softfloat.term(bitops.to_u32(x), "f32")


# --------------------------------------------------------------------------------------
# Instructions.


def _order(ks: list[int], dp: Datapath) -> list[int]:
    if dp.k_split == "mod4":  # k % 4 in {0, 1} first (the low halves of fp8 registers)
        return [k for j, k in enumerate(ks) if j % 4 < 2] + [k for j, k in enumerate(ks)
                                                             if j % 4 >= 2]
    return ks


def _instr_fused(a, b, ks, acc, block, cfg: _Cfg, c_format: str):
    dp = cfg.dp
    blocks = [ks[j:j + dp.block_k] for j in range(0, len(ks), dp.block_k)]
    for j, kb in enumerate(blocks):
        r = block(a, b, kb, acc, dp)
        if j + 1 < len(blocks):  # the block result is the next block's accumulator
            if dp.block_out == "d" and cfg.d_format == "f16":  # rounded as D
                acc = _acc(_f16_bits(r, dp), "f16", dp)
            else:
                acc = _acc(_f32_bits(r, dp), "f32", dp)
    if cfg.d_format == "f32":
        return _f32_bits(r, dp)
    if c_format == "f16" and dp.f16_out == "direct":
        return _f16_bits(r, dp)
    return _f32_to_f16(_f32_bits(r, dp), dp)


def _instr_end(a, b, ks, acc_c, block, cfg: _Cfg, c_format: str):
    dp = cfg.dp
    acc = _NO_ACC
    for j in range(0, len(ks), dp.block_k):
        r = block(a, b, ks[j:j + dp.block_k], acc, dp)
        if cfg.d_format == "f32":
            acc = _acc(_f32_bits(r, dp), "f32", dp)
        else:
            acc = _acc(_f16_bits(r, dp), "f16", dp)
    return _add_rn(acc_c, acc, cfg.d_format, dp)


def _instr_ffma(a, b, ks, acc_c, block, cfg: _Cfg, c_format: str):
    del block, c_format
    dp = cfg.dp
    prods = [_f32_acc(_col(a, i).astype(jnp.float32) * _row(b, i).astype(jnp.float32))
             for i in ks]
    if cfg.d_format == "f32":
        acc = _NO_ACC._replace(negzero=np.bool_(False))  # fma(a0, b0, +0)
        for p in prods:
            acc = _acc(_add_rn(p, acc, "f32", dp), "f32", dp)
        return _add_rn(acc_c, acc, "f32", dp)
    if len(ks) != 4:
        raise ValueError("the FFMA routine with an f16 D is modelled for k = 4 only")
    p01 = _acc(_add_rn(prods[1], prods[0], "f32", dp), "f32", dp)
    p23 = _acc(_add_rn(prods[3], prods[2], "f32", dp), "f32", dp)
    s1 = _acc(_add_rn(acc_c, p01, "f32", dp), "f32", dp)
    return _f32_to_f16(_add_rn(s1, p23, "f32", dp), dp)


_INSTR = {"fused": _instr_fused, "end": _instr_end, "ffma": _instr_ffma}


def _chain(a, b, c, cfg: _Cfg, block):
    """The instructions of one exact float mma over k, on prepared operands (pytrees
    whose leaves are (..., m, k) / (..., k, n)): the first from C, the rest scanned."""
    dp = cfg.dp
    k = jax.tree.leaves(a)[0].shape[-1]
    instr = _INSTR[dp.c_mode]
    ks = _order(list(range(cfg.ik)), dp)
    acc = _acc(bitops.to_u32(c), cfg.c_format, dp, cfg.d_format, cfg.c_shift)
    first = jax.tree.map(lambda x: x[..., :cfg.ik], a), jax.tree.map(
        lambda x: x[..., :cfg.ik, :], b)
    bits = instr(*first, ks, acc, block, cfg, cfg.c_format)
    n = k // cfg.ik
    if n > 1:  # a chain: D of one instruction is C of the next (scanned, not unrolled)
        a_s = jax.tree.map(lambda x: jnp.moveaxis(
            x[..., cfg.ik:].reshape(*x.shape[:-1], n - 1, cfg.ik), -2, 0), a)
        b_s = jax.tree.map(lambda x: jnp.moveaxis(
            x[..., cfg.ik:, :].reshape(*x.shape[:-2], n - 1, cfg.ik, x.shape[-1]), -3, 0), b)

        def step(d_bits, ab):
            acc = _acc(d_bits, cfg.d_format, dp)
            return instr(*ab, ks, acc, block, cfg, cfg.d_format), None

        bits, _ = lax.scan(step, bits, (a_s, b_s))
    return bits


#: Whether the decoded operands are stored before the blocks read them: "auto" (the
#: rule in ``_store_decoded``), "on" or "off" (for measuring; the bits are the same).
STORE_DECODED = "auto"
#: Uses per operand element (the outputs each one feeds) from which the fast path stores
#: its decoded operands, and up to which (exclusive) the general path does.
_FAST_STORE_REUSE = 64
_GENERAL_STORE_REUSE_MAX = 1024


def _store_decoded(a, b, c, general: bool, f16: bool = False,
                   backend: str | None = None) -> bool:
    """Whether to decode the operands once into stored arrays (an XLA optimization
    barrier between decoding and the blocks) rather than let XLA fuse the decoding into
    the blocks, which decodes an operand element again for every output that reads it.
    The bits are the same either way; the rule follows what was faster on the H100
    (jax 0.11.2, 2026-11-24; the A/B records ``store_decoded_ab`` for tiles and
    ``gemm_store_decoded_ab`` for GEMMs in ``benchmarks/results``), keyed on the uses
    of an operand element (the outputs it feeds: n for a batch of m x n tiles, N for a
    GEMM's k step):

    * general path (bf16 / tf32, whose decoding is longer): stored below 1024 uses: tiles
      (16 or 8 uses: WMMA / ``mma.sync`` bf16 1.35x, 1.47x faster, ``mma.sync`` tf32
      1.33x; 64: ``wgmma`` bf16 1.09x, tf32 0.90x), not for a GEMM (4096 uses: bf16
      4096^3 0.81x stored);
    * fast path (f16, fp8 as f16): always for f16 x f16 operands (``f16``; session 19's
      interleaved A/B: WMMA f16 1.19x at 2^18 tiles, 1.35x at 2^20, ``mma.sync`` f16
      1.11x, ``wgmma`` f16 1.12x; an earlier session measured WMMA / ``mma.sync`` f16 at
      1.0x: the H100's timings of one code moved by 10-20% between sessions), and for
      fp8 from 64 uses (``wgmma`` e4m3 1.23x-1.37x, 4096^3 GEMM e4m3 1.35x; ``mma.sync``
      fp8, 8 uses, 0.72x-0.82x).

    On the CPU (2 cores, jax 0.10.2) storing left bf16 / tf32 as fast as before
    (0.99x-1.02x) and slowed the fast path (``wgmma`` f16 / e4m3 0.90x): there the fast
    path never stores. (XLA's CPU pipeline removes optimization barriers before fusion;
    the general path's operands are stored there by ``_operand(..., stored=True)``.)
    ``backend``: the backend the rule is for (default: JAX's default).
    """
    if STORE_DECODED != "auto":
        return STORE_DECODED == "on"
    if not general and (backend or jax.default_backend()) == "cpu":
        return False
    if a.size == 0 or b.size == 0:  # nothing to decode (an empty M, N or K)
        return False
    out = np.broadcast_shapes(a.shape[:-2], b.shape[:-2], c.shape[:-2])
    outputs = int(np.prod(out, dtype=np.int64)) * c.shape[-2] * c.shape[-1]
    uses = outputs * a.shape[-1]  # multiplications, each reading one a and one b
    reuse = min(uses // a.size, uses // b.size)
    if general:
        return reuse < _GENERAL_STORE_REUSE_MAX
    return f16 or reuse >= _FAST_STORE_REUSE


# The exact models are many small element-wise operations: jitted here, so that an
# eager call compiles them once per shape instead of dispatching each operation.
@functools.partial(jax.jit, static_argnums=(3,))
def _mma_float_exact(a, b, c, cfg: _Cfg):
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
    elif {a_format, b_format} <= _FAST_FORMATS:  # fp8 as f16: exact
        lowest = (softfloat.emin if dp.align == "nominal" and dp.sub_exp == "emin"
                  else softfloat.lsb_min)
        block = functools.partial(_block_fast, fmts=(a_format, b_format),
                                  emin=lowest(a_format) + lowest(b_format))
        a16, b16 = _as_f16(a, a_format), _as_f16(b, b_format)
        f16 = cfg.a_format == cfg.b_format == "f16"
        if dp.align == "nominal" and _store_decoded(a, b, c, general=False, f16=f16):
            ops = ((a16, _fast_align(a16.astype(jnp.float32), a_format, dp).astype(jnp.int16)),
                   (b16, _fast_align(b16.astype(jnp.float32), b_format, dp).astype(jnp.int16)))
            bits = _chain(*lax.optimization_barrier(ops), c, cfg, block)
        else:
            bits = _chain(a16, b16, c, cfg, block)
    else:
        mbits = sum(softfloat.emin(t) - softfloat.lsb_min(t) for t in (a_format, b_format))
        block = functools.partial(_block_general, mbits=mbits,
                                  emin=softfloat.lsb_min(a_format) + softfloat.lsb_min(b_format))
        stored = jax.default_backend() == "cpu"  # see _operand
        ops = (_operand(bitops.to_u32(a), a_format, dp, stored),
               _operand(bitops.to_u32(b), b_format, dp, stored))
        if _store_decoded(a, b, c, general=True):
            ops = lax.optimization_barrier(ops)
        bits = _chain(*ops, c, cfg, block)
    return bitops.from_u32(bits, jnp.float32 if cfg.d_format == "f32" else jnp.float16)


# --------------------------------------------------------------------------------------
# fp64: IEEE fma chain. Native float64 operations (fma.fma64_native) where they are
# exact for every element of the call, else the 128-bit integer emulation (fma.fma64).

_U64 = jnp.uint64


def _f64_chain_soft(a, b, c):
    ab = lax.bitcast_convert_type(a, _U64)
    bb = lax.bitcast_convert_type(b, _U64)
    acc = lax.bitcast_convert_type(c, _U64)
    for kk in range(a.shape[-1]):
        acc = fma.fma64(ab[..., :, kk:kk + 1], bb[..., kk:kk + 1, :], acc)
    return lax.bitcast_convert_type(acc, jnp.float64)


def _f64_chain_native(a, b, c):
    """The chain in native float64 operations, and whether every element was in the range
    where they are exact (fma.native_*_ok): a result leaving it becomes NaN."""
    ok = (jnp.all(fma.native_operand_ok(a)) & jnp.all(fma.native_operand_ok(b))
          & jnp.all(fma.native_acc_ok(c)))
    acc = c
    for kk in range(a.shape[-1]):
        d = fma.fma64_native(a[..., :, kk:kk + 1], b[..., kk:kk + 1, :], acc)
        acc = jnp.where(fma.native_result_ok(d), d, jnp.nan)
    # Stored once, so that the check reads it instead of recomputing the chain.
    acc = lax.optimization_barrier(acc)
    return acc, ok & ~jnp.any(jnp.isnan(acc))


def _vmap_as_batch(fn):
    """``fn`` over (..., rows, cols) operands whose leading dims broadcast, with a vmap
    rule that makes the mapped axis one more leading batch dim of the same call: a
    whole-call ``lax.cond`` inside stays one branch instead of becoming a select that
    computes both branches."""
    f = jax.custom_batching.custom_vmap(fn)

    @f.def_vmap
    def rule(axis_size, in_batched, *args):
        del axis_size
        nd = max(x.ndim - 2 - int(bt) for x, bt in zip(args, in_batched, strict=True))
        lifted = []
        for x, bt in zip(args, in_batched, strict=True):
            lead, rest = (x.shape[:1], x.shape[1:]) if bt else ((1,), x.shape)
            lifted.append(x.reshape(*lead, *(1,) * (nd - (len(rest) - 2)), *rest))
        return f(*lifted), True

    return f


@_vmap_as_batch
@jax.jit
def _mma_f64_exact(a, b, c):
    # One branch for the whole call (and, through _vmap_as_batch, for a vmapped call):
    # where any element leaves the native range, every element takes the integer
    # emulation.
    acc, ok = _f64_chain_native(a, b, c)
    return lax.cond(ok, lambda: acc, lambda: _f64_chain_soft(a, b, c))


# --------------------------------------------------------------------------------------
# Integer mma and bmma.


def _sat_add_i32(x, y):
    """Saturating int32 x + y without 64-bit types."""
    s = (x.astype(jnp.uint32) + y.astype(jnp.uint32)).astype(jnp.int32)
    ovf = ((x >= 0) == (y >= 0)) & ((s >= 0) != (x >= 0))
    return jnp.where(ovf, jnp.where(x >= 0, jnp.int32(2**31 - 1), jnp.int32(-(2**31))), s)


def _mma_int(a, b, c, satf):
    # |sum of k products| <= k * 255 * 255 fits int32 for every WMMA shape (k <= 32).
    prod = lax.dot_general(a.astype(jnp.int32), b.astype(jnp.int32),
                           (((a.ndim - 1,), (b.ndim - 2,)), ((), ())),
                           preferred_element_type=jnp.int32) if a.ndim == 2 else \
        jnp.einsum("...mk,...kn->...mn", a.astype(jnp.int32), b.astype(jnp.int32),
                   preferred_element_type=jnp.int32)
    if satf:
        return _sat_add_i32(prod, c)
    return (prod.astype(jnp.uint32) + c.astype(jnp.uint32)).astype(jnp.int32)


# --------------------------------------------------------------------------------------
# Fast mode and the public functions.


def _round_operand(x, a_format):
    if a_format == "tf32":  # the tensor core ignores the low 13 bits
        return bitops.tf32_keep(x)
    if a_format != "f16" and a_format in _FAST_FORMATS:  # fp8, fp6 / fp4 codes: values
        return _as_f16(x, a_format).astype(jnp.float32)
    return x  # f16 / bf16 stay: the backend's own f16 / bf16 dot (tensor cores on a GPU)


def _mma_fast(a, b, c, a_format, b_format, d_format, c_shift=0):
    acc_dt = jnp.float64 if a_format == "f64" else jnp.float32
    a = _round_operand(a, a_format)
    b = _round_operand(b, b_format)
    prod = jnp.einsum("...mk,...kn->...mn", a, b, preferred_element_type=acc_dt,
                      precision=lax.Precision.HIGHEST)
    c = c.astype(acc_dt) * acc_dt(2.0 ** -c_shift) if c_shift else c.astype(acc_dt)
    return (prod + c).astype(STORAGE_DTYPE[d_format])


def _float_satf(d, d_format):
    """Documented rule for float satf (no capture: CUDA 13 rejects it)."""
    big = jnp.asarray(jnp.finfo(STORAGE_DTYPE[d_format]).max, d.dtype)
    d = jnp.where(jnp.isnan(d), jnp.zeros_like(d), d)
    return jnp.clip(d, -big, big)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4, 5))
def _mma_float(a, b, c, cfg: _Cfg, mode, satf):
    if mode == "fast":
        d = _mma_fast(a, b, c, cfg.a_format, cfg.b_format, cfg.d_format, cfg.c_shift)
    elif cfg.a_format == "f64":
        d = _mma_f64_exact(a, b, c)
    else:
        d = _mma_float_exact(a, b, c, cfg)
    return _float_satf(d, cfg.d_format) if satf else d


def _mma_float_fwd(a, b, c, cfg, mode, satf):
    return _mma_float(a, b, c, cfg, mode, satf), (a, b, c)


def _mma_float_bwd(cfg, mode, satf, res, g):
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
      a_format, c_format, d_format: static type names. WMMA: see ``COMBOS``; ``mma_sync`` and
        ``wgmma``: see ``PTX_CD`` (fp8: f32/f32 or f16/f16).
      arch: a target name (``arch.TARGETS``: ``"sm_70"``, ``"sm_75"``, ``"sm_80"``,
        ``"sm_86"``, ``"sm_87"``, ``"sm_89"``, ``"sm_90"``, ``"sm_90a"``,
        ``"sm_100(a)"``, ``"sm_103(a)"``, ``"sm_120(a)"``, ``"sm_121(a)"``) or an
        ``ArchModel``. The target must be able to issue the instruction (``wgmma``
        needs ``"sm_90a"``, fp8 ``mma_sync`` sm_89 or newer, fp6 / fp4 ``"sm_120a"``);
        its datapath model gives the arithmetic (sm_90 verified on hardware, the others
        against MMA-Sim or not at all: ``ArchModel.verified``, ``arch.py``).
      mode: ``"exact"`` reproduces the hardware bits (see the module docstring for
        the model). ``"fast"`` uses ``lax.dot_general`` with fp32 (fp64 for f64)
        accumulation of the operands (tf32 low bits dropped), then one conversion to
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
    checks.static_choice(instruction, "instruction", isa.INSTRUCTIONS)
    b_format = a_format if b_format is None else b_format
    a_format, b_format, c_format, d_format = (  # format names, aliases or dtypes -> names
        checks.format_name(v, name, allowed, FORMAT_ALIASES, need_x64=False)
        for v, name, allowed in ((a_format, "a_format", A_TYPES), (b_format, "b_format", A_TYPES),
                                 (c_format, "c_format", ACC_TYPES), (d_format, "d_format",
                                                                     ACC_TYPES)))
    target, model = _check_static(a_format, b_format, c_format, d_format, arch, mode, satf,
                                  instruction, datapath)
    c_shift = _scale_input_d(scale_input_d, instruction, a_format)
    if a_format == "f64":
        checks.require_x64("mma with a_format='f64'")
    a, b, c = checks.array_args(a=a, b=b, c=c)
    a = _check_array(a, "a", STORAGE_DTYPE[a_format])
    b = _check_array(b, "b", STORAGE_DTYPE[b_format])
    c = _check_array(c, "c", STORAGE_DTYPE[c_format])
    batch, _, _, k = _check_shapes(a, b, c)
    if k == 0:  # no instruction runs: D is C converted to d_format (round to nearest)
        if c_shift:
            raise ValueError("scale_input_d needs at least one instruction (k > 0)")
        return jnp.broadcast_to(c, batch + c.shape[-2:]).astype(STORAGE_DTYPE[d_format])
    if instruction_k is not None:
        instruction_k = checks.static_int(instruction_k, "instruction_k")
    ik = _arch.instruction_k(instruction, a_format, k, instruction_k)
    if target is not None:
        _arch.check_target(target, instruction, a_format, b_format, ik)
    if k > ik and c_format != d_format:
        raise ValueError(f"k = {k} is a chain of {k // ik} instructions (k {ik}) whose D "
                         f"is the next C: c_format ({c_format}) must equal d_format ({d_format})")
    if a_format in ("s4", "u4"):
        # 4-bit elements: only the low 4 bits exist (the fragment path packs them so),
        # s4 sign-extended from bit 3, as the tensor core reads them.
        a = _low_nibble(a, a_format == "s4")
    if b_format in ("s4", "u4"):
        b = _low_nibble(b, b_format == "s4")
    if a_format in _INT_TYPES:
        if not satf or k == ik:  # wrapping modulo 2**32 is associative
            return _mma_int(a, b, c, satf)
        d = c
        for i0 in range(0, k, ik):  # each instruction saturates
            d = _mma_int(a[..., i0:i0 + ik], b[..., i0:i0 + ik, :], d, satf)
        return d
    dp = datapath
    if dp is None and a_format != "f64":
        dp = _arch.datapath_for(model, instruction, a_format, ik, b_format)
    cfg = _Cfg(a_format, b_format, c_format, d_format, dp, ik, c_shift)
    return _mma_float(a, b, c, cfg, mode, satf)


#: Operand types whose tcgen05 kind (f16, tf32) takes scale-input-d.
SCALE_INPUT_D_TYPES = ("f16", "bf16", "tf32")


def _scale_input_d(value, instruction: str, a_format: str) -> int:
    v = checks.static_int(value, "scale_input_d")
    if v == 0:
        return 0
    if instruction != "tcgen05" or a_format not in SCALE_INPUT_D_TYPES:
        raise ValueError(f"scale_input_d={v} exists only for tcgen05 kind::f16 and "
                         f"kind::tf32 (a_format in {SCALE_INPUT_D_TYPES}); got "
                         f"instruction={instruction!r}, a_format={a_format!r}")
    if not 0 <= v <= 15:
        raise ValueError(f"scale_input_d={v} must be in 0..15")
    return v


def _low_nibble(x: jax.Array, signed: bool) -> jax.Array:
    v = bitops.sext(x, 4) if signed else x.astype(jnp.int32) & 0xF
    return v.astype(x.dtype)


def bmma(a, b, c, *, op: str) -> jax.Array:
    """Single-bit ``bmma_sync`` with POPC accumulation: ``d = c + popc(a_row op b_col)``.

    Args:
      a: (..., m, k) uint8 of 0/1 bits. b: (..., k, n) uint8 0/1. c: (..., m, n) int32.
      op: ``"xor"`` (bmmaBitOpXOR) or ``"and"`` (bmmaBitOpAND).

    Returns:
      (..., m, n) int32, wrapping modulo 2**32.

    Example:
      >>> import jax.numpy as jnp
      >>> a = jnp.ones((8, 128), jnp.uint8); b = jnp.zeros((128, 8), jnp.uint8)
      >>> int(bmma(a, b, jnp.zeros((8, 8), jnp.int32), op="xor")[0, 0])
      128
    """
    a, b, c = checks.array_args(a=a, b=b, c=c)
    checks.static_choice(op, "op", BMMA_OPS)
    a = _check_array(a, "a", jnp.dtype(jnp.uint8))
    b = _check_array(b, "b", jnp.dtype(jnp.uint8))
    c = _check_array(c, "c", jnp.dtype(jnp.int32))
    _check_shapes(a, b, c)
    ai = (a & 1).astype(jnp.int32)
    bi = (b & 1).astype(jnp.int32)
    dot = functools.partial(jnp.einsum, "...mk,...kn->...mn", preferred_element_type=jnp.int32)
    if op == "and":
        cnt = dot(ai, bi)
    else:  # a xor b = a + b - 2ab
        cnt = (ai.sum(-1, dtype=jnp.int32)[..., :, None]
               + bi.sum(-2, dtype=jnp.int32)[..., None, :] - 2 * dot(ai, bi))
    return (cnt.astype(jnp.uint32) + c.astype(jnp.uint32)).astype(jnp.int32)
