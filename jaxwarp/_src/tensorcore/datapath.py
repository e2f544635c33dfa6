"""Tensor-core arithmetic: what one ``mma_sync`` computes, bit for bit.

``mma(a, b, c)`` returns ``D = A @ B + C`` for logical (unfragmented) matrices in the
arithmetic of the tensor core, as measured on an H100 (sm_90) with the captures in
``tests/data/h100_mma_*.npz``. Fragments, loads and stores live elsewhere; this module
only knows numbers.

The floating-point model (f16, bf16, tf32 inputs) is a chain of *block fused
multiply-adds*. The k axis is cut into blocks of ``ArchParams.block_k[a_type]``
products. For each block and each output element:

1. every product ``a_i * b_i`` is formed exactly;
2. the block exponent ``E`` is the largest *nominal* exponent among the non-zero
   terms: for a product, the sum of the two operands' leading-bit exponents (so a
   product whose significands multiply to [2, 4) is not renormalised first); for the
   accumulator, its own leading-bit exponent;
3. every term (the products and the accumulator) is truncated toward zero to a
   multiple of ``2**(E - F)`` with ``F = ArchParams.extra_bits`` (25 on sm_90);
4. the truncated terms are added exactly;
5. the sum is rounded: to fp32 toward zero, or to fp16 to nearest-even (directly from
   the exact truncated sum, not through fp32). A result beyond the output format's
   range becomes inf (round-toward-zero does *not* give MAX here).

For k larger than a block, the fp32 (round-toward-zero) result of a block is the
accumulator of the next block. On sm_90 f16 and bf16 use one block of 16, tf32 uses
two blocks of 4 for m16n16k8, and tf32 operands are the fp32 words with their low 13
bits ignored (truncated, not rounded; round them yourself as ``__float_to_tf32`` does
if you want rounding).

Special values: a NaN operand, ``0 * inf``, or infinities of both signs in one block
give NaN; otherwise an infinite input (or accumulator) gives that infinity even if the
finite terms would overflow the other way. NaN results are the canonical
``0x7FFFFFFF`` (fp32) / ``0x7FFF`` (fp16). Subnormal inputs and outputs are kept, not
flushed.

f64 (m8n8k4) is a chain of IEEE fused multiply-adds in k order,
``d = fma(a3, b3, fma(a2, b2, fma(a1, b1, fma(a0, b0, c))))``, rounded to nearest
even. A NaN operand propagates (quieted); a NaN created by ``inf - inf`` or
``0 * inf`` is ``0xFFF8000000000000``.

Integer mma (s8, u8, s4, u4) adds exact products to C modulo 2**32, or with ``satf``
clamps the exact ``A @ B + C`` to the int32 range. ``bmma`` (b1) adds
``popc(a_row op b_col)`` to C modulo 2**32.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from types import MappingProxyType
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxwarp._src import checks
from jaxwarp._src.tensorcore import wmma_table

# --------------------------------------------------------------------------------------
# Types and the table of valid combinations.

_FLOAT_DTYPES = {
    "f16": jnp.dtype(jnp.float16),
    "bf16": jnp.dtype(jnp.bfloat16),
    "tf32": jnp.dtype(jnp.float32),
    "f32": jnp.dtype(jnp.float32),
    "f64": jnp.dtype(jnp.float64),
}
_INT_DTYPES = {
    "s8": jnp.dtype(jnp.int8),
    "u8": jnp.dtype(jnp.uint8),
    "s4": jnp.dtype(jnp.int8),
    "u4": jnp.dtype(jnp.uint8),
    "s32": jnp.dtype(jnp.int32),
}
STORAGE_DTYPE = MappingProxyType({**_FLOAT_DTYPES, **_INT_DTYPES})

# The valid combinations come from the WMMA table (b1 goes through ``bmma``).
_MMA_ENTRIES = tuple(e for e in wmma_table.TABLE if not e.bmma_ops)
A_TYPES = tuple(e.ab_type for e in _MMA_ENTRIES)
ACC_TYPES = tuple(dict.fromkeys(t for e in _MMA_ENTRIES for t in e.accumulator_types))

#: Valid (a_type, c_type, d_type) combinations, read from ``wmma_table.TABLE``.
COMBOS = tuple((e.ab_type, c, d) for e in _MMA_ENTRIES for c, d in e.cd_types)

MODES = ("exact", "fast")
BMMA_OPS = ("xor", "and")


# (exponent bits, explicit fraction bits) of the operand formats as the tensor core
# reads them (tf32 is read from an fp32 word, low 13 bits ignored).
_FORMAT = {"f16": (5, 10), "bf16": (8, 7), "tf32": (8, 10), "f32": (8, 23)}


@dataclasses.dataclass(frozen=True)
class ArchParams:
    """Numerical parameters of one architecture's tensor cores.

    Attributes:
      name: ``"sm_90"`` etc.
      block_k: products fused per block, per a_type (``((a_type, n), ...)``).
      extra_bits: F, the fraction bits kept below the block's largest nominal exponent
        when terms are aligned (each term truncated toward zero to that grid).
      nominal_exponent: the block exponent of a product is the sum of the operands'
        leading-bit exponents (True), or the product's own leading bit (False).
      f32_rounding: rounding of an fp32 result from the block sum (``"rz"``).
      f16_rounding: rounding of an fp16 result from the block sum (``"rn"``).
      f16_via_f32_for_f32_acc: with an fp32 C and fp16 D, the block sum is first
        rounded to fp32 (toward zero) and that is rounded to fp16; with an fp16 C it
        is rounded to fp16 directly.
      f16_zero_is_positive_for_f16_acc: with fp16 C and D, a non-zero sum that rounds
        to zero gives +0 whatever its sign.
      overflow_to_inf: a result beyond the format's range is inf (even under rz).
      nan_f32, nan_f16: bits of a NaN result.
      verified: the parameters were checked bit for bit against hardware captures.
    """

    name: str
    block_k: tuple[tuple[str, int], ...]
    extra_bits: int
    nominal_exponent: bool = True
    f32_rounding: str = "rz"
    f16_rounding: str = "rn"
    f16_via_f32_for_f32_acc: bool = True
    f16_zero_is_positive_for_f16_acc: bool = True
    overflow_to_inf: bool = True
    nan_f32: int = 0x7FFFFFFF
    nan_f16: int = 0x7FFF
    verified: bool = False

    def block(self, a_type: str) -> int:
        return dict(self.block_k)[a_type]


ARCHS: Mapping[str, ArchParams] = MappingProxyType({
    # Verified against every trial of the H100 captures (see tests/test_mma_arith.py).
    "sm_90": ArchParams("sm_90", (("f16", 16), ("bf16", 16), ("tf32", 4)), 25,
                        verified=True),
    # Published parameters (Fasi et al. 2021; Khattak & Mikaitis 2025): A100 fuses 8
    # fp16/bf16 products and 4 tf32 products per block, with one fewer alignment bit
    # than H100. Not checked against captures.
    "sm_80": ArchParams("sm_80", (("f16", 8), ("bf16", 8), ("tf32", 4)), 24),
    # V100: blocks of 4 fp16 products, aligned significands truncated at fp32 width.
    "sm_70": ArchParams("sm_70", (("f16", 4),), 23),
})


# --------------------------------------------------------------------------------------
# Argument checks.


def _check_static(a_type, c_type, d_type, arch, mode, satf) -> ArchParams:
    checks.static_choice(a_type, "a_type", A_TYPES)
    checks.static_choice(c_type, "c_type", ACC_TYPES)
    checks.static_choice(d_type, "d_type", ACC_TYPES)
    checks.static_choice(mode, "mode", MODES)
    if not isinstance(satf, bool):
        raise TypeError(f"satf must be a Python bool, got {type(satf).__name__} {satf!r}")
    if isinstance(arch, ArchParams):
        params = arch
    else:
        checks.static_choice(arch, "arch", tuple(ARCHS))
        params = ARCHS[arch]
    if (a_type, c_type, d_type) not in COMBOS:
        raise ValueError(
            f"Unsupported mma types {(a_type, c_type, d_type)=}; valid (a_type, c_type, "
            f"d_type) combinations: {COMBOS}")
    if a_type in dict(_FORMAT) and a_type not in dict(params.block_k):
        raise ValueError(f"arch={params.name!r} has no tensor-core support for "
                         f"a_type={a_type!r}; it supports {[t for t, _ in params.block_k]}")
    return params


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
# Bit-level helpers (all int32 / uint32).

_NEG_BIG = -(1 << 20)  # "exponent" of a zero term: below any real one

# Operand formats whose products are exact, finite and normal in fp32 (2**-48 to 2**32
# for f16), so that the fp32 product of the operands' values is the exact product.
_VALUE_PATH = ("f16",)


def _i32(x):
    return jnp.asarray(x, jnp.int32)


def _bitlen(x):
    """Bit length of a non-negative int32/uint32 array."""
    return (32 - lax.clz(x.astype(jnp.uint32))).astype(jnp.int32)


def _decode(bits, fmt):
    """Bits (uint32) of a float format -> (neg, lsb_exp, sig, lead, inf, nan).

    value = (-1)**neg * sig * 2**lsb_exp; ``lead`` is the exponent of sig's top bit
    (``_NEG_BIG`` for zero, inf and NaN).
    """
    eb, mb = _FORMAT[fmt]
    width = {"f16": 16, "bf16": 16}.get(fmt, 32)
    rawmb = 23 if fmt == "tf32" else mb
    bias = (1 << (eb - 1)) - 1
    emax = (1 << eb) - 1
    neg = (bits >> (width - 1)) & 1
    e = _i32((bits >> rawmb) & emax)
    f = _i32(bits & ((1 << rawmb) - 1))
    if fmt == "tf32":
        f = f >> 13
    special = e == emax
    inf = special & (f == 0)
    nan = special & (f != 0)
    sig = jnp.where(special, 0, jnp.where(e == 0, f, f | (1 << mb)))
    lsb = jnp.where(e == 0, 1 - bias - mb, e - bias - mb)
    lead = jnp.where(sig == 0, _NEG_BIG, lsb + _bitlen(sig) - 1)
    return neg.astype(jnp.bool_), lsb, sig, lead, inf, nan


def _shift(x, s):
    """x * 2**s on non-negative int32 x, truncating; s may be any int32."""
    left = x << jnp.clip(s, 0, 31)
    right = jnp.where(s <= -32, 0, x >> jnp.clip(-s, 0, 31))
    return jnp.where(s >= 0, left, right)


def _round_f32_rz(neg, mag, g):
    """(-1)**neg * mag * 2**g (mag uint32) -> fp32 bits, toward zero; overflow -> inf."""
    n = _bitlen(mag)
    lead = g + n - 1
    lsb = jnp.maximum(lead - 23, -149)  # exponent of the result's last bit
    sh = lsb - g
    q = jnp.where(sh >= 32, jnp.uint32(0),
                  jnp.where(sh >= 0, mag >> jnp.clip(sh, 0, 31).astype(jnp.uint32),
                            mag << jnp.clip(-sh, 0, 31).astype(jnp.uint32)))
    normal = q >= (1 << 23)
    ebits = jnp.where(normal, lsb + 23 + 127, 0)
    out = jnp.where(normal, (ebits.astype(jnp.uint32) << 23) | (q & 0x7FFFFF), q)
    out = jnp.where(ebits >= 255, jnp.uint32(0x7F800000), out)
    out = jnp.where(mag == 0, jnp.uint32(0), out)
    return out | (neg.astype(jnp.uint32) << 31)


def _round_f16_rn(neg, mag, g):
    """(-1)**neg * mag * 2**g (mag uint32) -> fp16 bits, to nearest even."""
    n = _bitlen(mag)
    lead = g + n - 1
    lsb = jnp.maximum(lead - 10, -24)
    sh = lsb - g
    shc = jnp.clip(sh, 0, 31).astype(jnp.uint32)
    q = jnp.where(sh >= 32, jnp.uint32(0),
                  jnp.where(sh >= 0, mag >> shc,
                            mag << jnp.clip(-sh, 0, 31).astype(jnp.uint32)))
    rem = jnp.where(sh >= 32, mag, jnp.where(sh > 0, mag & ((jnp.uint32(1) << shc) - 1), 0))
    half = jnp.where(sh > 32, jnp.uint32(0xFFFFFFFF),  # anything below 2**32 < half
                     jnp.where(sh > 0, jnp.uint32(1) << jnp.clip(sh - 1, 0, 31)
                               .astype(jnp.uint32), 0))
    up = (sh > 0) & ((rem > half) | ((rem == half) & ((q & 1) == 1)))
    q = q + up.astype(jnp.uint32)
    # q may carry into a new binade: the bits still form the right fp16 encoding when
    # built as (exponent << 10) + q with q's implicit bit counted in the exponent.
    ebase = jnp.where(q >= (1 << 10), lsb + 10 + 15 - 1, 0).astype(jnp.uint32)
    out = jnp.where(q >= (1 << 10), (ebase << 10) + q, q)
    out = jnp.minimum(out, jnp.uint32(0x7C00))  # overflow -> inf
    out = jnp.where(mag == 0, jnp.uint32(0), out)
    return (out | (neg.astype(jnp.uint32) << 15)).astype(jnp.uint16)


def _acc_terms(c_bits, c_fmt):
    neg, lsb, sig, lead, inf, nan = _decode(c_bits, c_fmt)
    return neg, lsb, sig, lead, nan, inf & ~neg, inf & neg


def _pow2(e):
    """2.0**(e - 127) as float32 from an int32 biased exponent e in [1, 254]."""
    return lax.bitcast_convert_type(e << 23, jnp.float32)


def _col(x, i):  # operand i of the a side, (..., m, 1)
    return x[..., :, i:i + 1]


def _row(x, i):  # operand i of the b side, (..., 1, n)
    return x[..., i:i + 1, :]


# Products per int32 partial sum: every aligned term is below 2**(F + 2) <= 2**27.
_GROUP = 8


def _sum_terms(terms, acc, E, F):
    """Exact sum of the truncated product terms (int32, in units of 2**(E - F)) and the
    accumulator (truncated here) -> (neg, mag (uint32), g): value (-1)**neg * mag * 2**g.
    """
    cn, cl, csg = acc[:3]
    g = E - F
    groups = [sum(terms[i:i + _GROUP]) for i in range(0, len(terms), _GROUP)]
    cv = _shift(csg, cl - g)
    groups.append(jnp.where(cn, -cv, cv))
    # sum = 2 * hi + lo exactly in int32 (|sum| may pass 2**31 but stays below 2**32).
    hi = sum(x >> 1 for x in groups)
    lo = sum(x & 1 for x in groups)
    neg = hi + (lo >> 1) < 0
    u = (hi.astype(jnp.uint32) << 1) + lo.astype(jnp.uint32)
    return neg, jnp.where(neg, jnp.uint32(0) - u, u), g


def _acc_special(acc):
    """The accumulator's stand-in in the IEEE special sum: NaN, +-inf or 0."""
    cnan, cpinf, cninf = acc[4:]
    return jnp.where(cnan, jnp.float32(jnp.nan),
                     jnp.where(cpinf, jnp.float32(jnp.inf),
                               jnp.where(cninf, jnp.float32(-jnp.inf), jnp.float32(0))))


def _specials(sp):
    nan = jnp.isnan(sp)
    return nan, sp == jnp.inf, sp == -jnp.inf


# How XLA sees a block: the k loop is unrolled into element-wise operations on
# (..., m, n) arrays, so the whole block fuses into one loop over the outputs and no
# (..., m, n, k) tensor is ever stored. Per product everything is int32 or float32:
# pass 1 takes the block exponent E as a max of exponent sums, pass 2 forms each
# product exactly in fp32, scales it by a power of two onto the grid of 2**(E - F),
# truncates it toward zero with the fp32 -> int32 conversion and adds it in int32.
# inf and NaN follow from the IEEE fp32 sum of the products (or of +-1 stand-ins),
# which is NaN / +-inf exactly when the block result is.


def _block_values(a, b, acc, F, nominal, *, emin):
    """One block FMA for operands whose products are exact, finite and normal in fp32
    (f16): a (..., m, kb) and b (..., kb, n) are the operands themselves, converted to
    fp32 slice by slice here (so that XLA fuses the conversion instead of storing fp32
    copies); acc = (neg, lsb, sig, lead, nan, pinf, ninf) of shape (..., m, n).

    Returns (neg, mag (uint32), g, nan, pinf, ninf): value = (-1)**neg * mag * 2**g.
    """
    kb = a.shape[-1]

    def ebits(x):  # biased fp32 exponent: 0 for zero, 255 for inf and NaN
        return (lax.bitcast_convert_type(x, jnp.int32) >> 23) & 0xFF

    av = [_col(a, i).astype(jnp.float32) for i in range(kb)]
    bv = [_row(b, i).astype(jnp.float32) for i in range(kb)]
    prods = [x * y for x, y in zip(av, bv, strict=True)]  # exact
    if nominal:  # sum of the operands' exponents
        pe = [ebits(x) + ebits(y) for x, y in zip(av, bv, strict=True)]
    else:  # the product's own leading bit
        pe = [ebits(p) + 127 for p in prods]
    # E + 254. A product with a zero operand has at most 142 (0 + f16's largest 15 + 127)
    # here, every other one at least emin + 254 = 206.
    Eb = functools.reduce(jnp.maximum, pe)
    E = jnp.maximum(jnp.where(Eb >= emin + 254, Eb - 254, _NEG_BIG), acc[3])
    scale = _pow2(F - jnp.maximum(E, emin) + 127)  # garbage only when E is inf/NaN's
    terms = [(p * scale).astype(jnp.int32) for p in prods]  # truncation toward zero
    neg, mag, g = _sum_terms(terms, acc, E, F)
    return neg, mag, g, *_specials(functools.reduce(jnp.add, prods, _acc_special(acc)))


class _Operand(NamedTuple):
    """Operands of the general path, decoded once per element into 4 bytes.

    sig: float16 signed significand (an integer below 2**11, exact in fp16), +-inf or
      NaN for inf and NaN operands: the fp32 sum of the products ``sig_a * sig_b``
      (below 2**26 when finite) is then NaN / +-inf exactly when the block result is.
    exp: int16 ``16 * lsb + (lead - lsb)``: the exponents of sig's last and leading
      bits (lsb -1000 for zero, inf and NaN, so that their products get no exponent
      and scale to nothing).
    """

    sig: jax.Array
    exp: jax.Array


def _operand(bits, fmt) -> _Operand:
    neg, lsb, sig, lead, inf, nan = _decode(bits, fmt)  # sig is 0 for inf and NaN
    sign = jnp.where(neg, jnp.float32(-1), jnp.float32(1))
    s = jnp.where(nan, jnp.float32(jnp.nan),
                  sign * jnp.where(inf, jnp.float32(jnp.inf), sig.astype(jnp.float32)))
    exp = jnp.where(sig != 0, 16 * lsb + (lead - lsb), -16000)
    return _Operand(s.astype(jnp.float16), exp.astype(jnp.int16))


def _ebits(x):
    """Biased exponent of fp32 x: 0 for zero, 255 for inf and NaN."""
    return (lax.bitcast_convert_type(x, jnp.int32) >> 23) & 0xFF


def _block_general(a: _Operand, b: _Operand, acc, F, nominal, *, emin):
    """One block FMA for any operand format (bf16, tf32: products may leave fp32's
    range): like ``_block_values`` on decoded operands (``_operand``), each product of
    significands scaled by its own power of two. Same arguments and result."""
    kb = a.sig.shape[-1]

    def unpack(s, e):  # -> (fp32 significand, int32 lsb, int32 leading-bit exponent)
        e = e.astype(jnp.int32)
        lsb = e >> 4
        return s.astype(jnp.float32), lsb, lsb + (e & 15)

    ops_a = [unpack(_col(a.sig, i), _col(a.exp, i)) for i in range(kb)]
    ops_b = [unpack(_row(b.sig, i), _row(b.exp, i)) for i in range(kb)]
    prods = [x[0] * y[0] for x, y in zip(ops_a, ops_b, strict=True)]  # exact: < 2**22
    if nominal:
        pe = [x[2] + y[2] for x, y in zip(ops_a, ops_b, strict=True)]
    else:  # the product's own leading bit
        pe = [x[1] + y[1] + _ebits(p) - 127 for x, y, p in zip(ops_a, ops_b, prods,
                                                               strict=True)]
    # Zero, inf and NaN operands give exponents far below any real one (lsb -1000); if
    # neither a product nor C is non-zero, E does not matter.
    E = functools.reduce(jnp.maximum, pe, acc[3])
    # Products only need a valid scale when one is non-zero (then E >= emin).
    fe = F - jnp.maximum(E, emin) + 127
    terms = []
    for x, y, p in zip(ops_a, ops_b, prods, strict=True):
        scale = _pow2(jnp.maximum(x[1] + y[1] + fe, 1))
        terms.append((p * scale).astype(jnp.int32))  # truncation toward zero
    neg, mag, g = _sum_terms(terms, acc, E, F)
    return neg, mag, g, *_specials(functools.reduce(jnp.add, prods, _acc_special(acc)))


def _to_bits(x, fmt):
    dt = {"f16": jnp.uint16, "bf16": jnp.uint16}.get(fmt, jnp.uint32)
    return lax.bitcast_convert_type(x, dt).astype(jnp.uint32)


# The exact models are many small element-wise operations: jitted here, so that an
# eager call compiles them once per shape instead of dispatching each operation.
@functools.partial(jax.jit, static_argnums=(3, 4, 5, 6))
def _mma_float_exact(a, b, c, a_type, c_type, d_type, params: ArchParams):
    F = params.extra_bits
    eb, mb = _FORMAT[a_type]
    emin = 2 * (2 - (1 << (eb - 1)) - mb)  # lowest exponent of a non-zero product
    if a_type in _VALUE_PATH:
        block = functools.partial(_block_values, emin=emin)
    else:
        a, b = _operand(_to_bits(a, a_type), a_type), _operand(_to_bits(b, a_type), a_type)
        block = functools.partial(_block_general, emin=emin)
    acc = _acc_terms(_to_bits(c, c_type), c_type)
    return _blocks(a, b, acc, block, F, params.nominal_exponent, params.block(a_type),
                   c_type, d_type, params)


def _blocks(a, b, acc, block, F, nominal, bk, c_type, d_type, params):
    """The chain of block FMAs over k and the rounding of the result."""
    k = jax.tree.leaves(a)[0].shape[-1]
    for k0 in range(0, k, bk):
        a_blk = jax.tree.map(lambda x, k0=k0: x[..., k0:k0 + bk], a)
        b_blk = jax.tree.map(lambda x, k0=k0: x[..., k0:k0 + bk, :], b)
        neg, mag, g, nan, pinf, ninf = block(a_blk, b_blk, acc, F, nominal)
        if k0 + bk < k:  # the fp32 (rz) block result is the next block's accumulator
            bits = _round_f32_rz(neg, mag, g)
            ovf = (bits & 0x7FFFFFFF) == 0x7F800000
            special = nan | pinf | ninf
            cneg, clsb, csig, clead, _, _ = _decode(bits, "f32")
            csig = jnp.where(special | ovf, 0, csig)
            clead = jnp.where(special | ovf, _NEG_BIG, clead)
            acc = (cneg, clsb, csig, clead, nan, pinf | (ovf & ~neg & ~special),
                   ninf | (ovf & neg & ~special))
    if d_type == "f32":
        out = _round_f32_rz(neg, mag, g)
        out = jnp.where(nan, jnp.uint32(params.nan_f32), out)
        out = jnp.where(pinf, jnp.uint32(0x7F800000), out)
        out = jnp.where(ninf, jnp.uint32(0xFF800000), out)
        return lax.bitcast_convert_type(out, jnp.float32)
    if c_type == "f32" and params.f16_via_f32_for_f32_acc:
        b32 = _round_f32_rz(neg, mag, g)
        n32, lsb32, sig32, _, inf32, _ = _decode(b32, "f32")
        out = _round_f16_rn(n32, sig32.astype(jnp.uint32), lsb32)
        out = jnp.where(inf32, jnp.uint16(0x7C00) | (out & 0x8000), out)
    else:
        out = _round_f16_rn(neg, mag, g)
        if params.f16_zero_is_positive_for_f16_acc:
            out = jnp.where(out == 0x8000, jnp.uint16(0), out)
    out = jnp.where(nan, jnp.uint16(params.nan_f16), out)
    out = jnp.where(pinf, jnp.uint16(0x7C00), out)
    out = jnp.where(ninf, jnp.uint16(0xFC00), out)
    return lax.bitcast_convert_type(out, jnp.float16)


# --------------------------------------------------------------------------------------
# fp64: IEEE fma chain, emulated with 128-bit integer arithmetic on (hi, lo) uint64.

_U64 = jnp.uint64


def _sl(x, s):
    return jnp.where((s >= 64) | (s < 0), _U64(0), x << jnp.clip(s, 0, 63).astype(_U64))


def _sr(x, s):
    return jnp.where((s >= 64) | (s < 0), _U64(0), x >> jnp.clip(s, 0, 63).astype(_U64))


def _shl128(hi, lo, s):
    return _sl(hi, s) | _sr(lo, 64 - s) | _sl(lo, s - 64), _sl(lo, s)


def _shr128(hi, lo, s):
    return _sr(hi, s), _sr(lo, s) | _sl(hi, 64 - s) | _sr(hi, s - 64)


def _bitlen64(x):
    return (64 - lax.clz(x)).astype(jnp.int32)


def _bitlen128(hi, lo):
    return jnp.where(hi != 0, 64 + _bitlen64(hi), _bitlen64(lo))


def _low_nonzero128(hi, lo, s):
    """Whether any of the bits below position s (0 <= s) is set."""
    lo_m = jnp.where(s >= 64, ~_U64(0), _sl(_U64(1), s) - 1)
    hi_m = jnp.where(s >= 128, ~_U64(0), jnp.where(s > 64, _sl(_U64(1), s - 64) - 1, _U64(0)))
    return ((lo & lo_m) | (hi & hi_m)) != 0


def _align128(hi, lo, s):
    """(hi, lo) * 2**s: left shift for s >= 0, right shift with a sticky bit otherwise."""
    lh, ll = _shl128(hi, lo, jnp.maximum(s, 0))
    rh, rl = _shr128(hi, lo, jnp.maximum(-s, 0))
    sticky = _low_nonzero128(hi, lo, jnp.maximum(-s, 0)).astype(_U64)
    return jnp.where(s >= 0, lh, rh), jnp.where(s >= 0, ll, rl | sticky)


def _decode64(bits):
    neg = (bits >> 63) != 0
    e = ((bits >> 52) & 0x7FF).astype(jnp.int32)
    f = bits & _U64((1 << 52) - 1)
    sig = jnp.where(e == 0, f, f | _U64(1 << 52))
    lsb = jnp.where(e == 0, 1, e) - 1075
    return neg, e, f, sig, lsb


def _fma64(a, b, c):
    """IEEE binary64 fma(a, b, c), round to nearest even, on uint64 bit patterns."""
    an, ae, af, asig, alsb = _decode64(a)
    bn, be, bf, bsig, blsb = _decode64(b)
    cn, ce, cf, csig, clsb = _decode64(c)
    pn = an ^ bn
    # 106-bit product in (hi, lo).
    m32 = _U64(0xFFFFFFFF)
    a0, a1, b0, b1 = asig & m32, asig >> 32, bsig & m32, bsig >> 32
    ll = a0 * b0
    mid = a0 * b1 + a1 * b0
    lo = ll + (mid << 32)
    hi = a1 * b1 + (mid >> 32) + (lo < ll).astype(_U64)
    plsb = alsb + blsb
    pz = (hi == 0) & (lo == 0)
    cz = csig == 0
    plead = jnp.where(pz, -(1 << 20), plsb + _bitlen128(hi, lo) - 1)
    clead = jnp.where(cz, -(1 << 20), clsb + _bitlen64(csig) - 1)
    w = jnp.maximum(plead, clead) + 1 - 126  # exponent of the window's bit 0
    ph, pl = _align128(hi, lo, plsb - w)
    ch, cl = _align128(jnp.zeros_like(csig), csig, clsb - w)
    ph = jnp.where(pz, _U64(0), ph)
    pl = jnp.where(pz, _U64(0), pl)
    # Signed add of magnitudes.
    s_lo = pl + cl
    s_hi = ph + ch + (s_lo < pl).astype(_U64)
    p_ge = (ph > ch) | ((ph == ch) & (pl >= cl))
    xh, xl = jnp.where(p_ge, ph, ch), jnp.where(p_ge, pl, cl)
    yh, yl = jnp.where(p_ge, ch, ph), jnp.where(p_ge, cl, pl)
    d_lo = xl - yl
    d_hi = xh - yh - (xl < yl).astype(_U64)
    same = pn == cn
    mh, ml = jnp.where(same, s_hi, d_hi), jnp.where(same, s_lo, d_lo)
    rneg = jnp.where(same, pn, jnp.where(p_ge, pn, cn))
    # Round (mh, ml) * 2**w to binary64.
    L = _bitlen128(mh, ml)
    r = jnp.maximum(w + L - 1 - 52, -1074)
    sh = r - w
    qh, ql = _shr128(mh, ml, jnp.maximum(sh, 0))
    q = jnp.where(sh >= 0, ql, _sl(ml, -sh))
    rbit = jnp.where(sh >= 1, _shr128(mh, ml, sh - 1)[1] & 1, _U64(0))
    sticky = jnp.where(sh >= 2, _low_nonzero128(mh, ml, sh - 1), False)
    up = (rbit == 1) & (sticky | ((q & 1) == 1))
    q = q + up.astype(_U64)
    carry = q >= _U64(1 << 53)
    q = jnp.where(carry, q >> 1, q)
    r = r + carry.astype(jnp.int32)
    normal = q >= _U64(1 << 52)
    biased = jnp.where(normal, r + 1075, 0)
    mag_bits = jnp.where(normal, (biased.astype(_U64) << 52) | (q & _U64((1 << 52) - 1)), q)
    mag_bits = jnp.where(biased >= 2047, _U64(0x7FF0000000000000), mag_bits)
    zero = (mh == 0) & (ml == 0)
    sign = jnp.where(zero, pz & cz & pn & cn, rneg)  # exact zero: +0 unless -0 + -0
    out = mag_bits | (sign.astype(_U64) << 63)
    # Special operands.
    inf_bits = _U64(0x7FF0000000000000)
    a_inf, a_nan = (ae == 2047) & (af == 0), (ae == 2047) & (af != 0)
    b_inf, b_nan = (be == 2047) & (bf == 0), (be == 2047) & (bf != 0)
    c_inf, c_nan = (ce == 2047) & (cf == 0), (ce == 2047) & (cf != 0)
    a_zero, b_zero = (ae == 0) & (af == 0), (be == 0) & (bf == 0)
    p_inf = (a_inf | b_inf) & ~a_nan & ~b_nan
    invalid = (a_inf & b_zero) | (b_inf & a_zero) | (p_inf & c_inf & (pn != cn))
    out = jnp.where(c_inf, c, out)
    out = jnp.where(p_inf, inf_bits | (pn.astype(_U64) << 63), out)
    out = jnp.where(invalid, _U64(0xFFF8000000000000), out)
    quiet = _U64(1 << 51)
    # NaN operands propagate quieted. Which one: the H100 returned B's NaN over A's
    # (capture_extra_mma, kind nan_payload); C's rank relative to A is not separated by
    # the captures (its payload always equalled B's there), so it is put last.
    out = jnp.where(c_nan, c | quiet, out)
    out = jnp.where(a_nan, a | quiet, out)
    out = jnp.where(b_nan, b | quiet, out)
    return out


@jax.jit
def _mma_f64_exact(a, b, c):
    ab = lax.bitcast_convert_type(a, _U64)
    bb = lax.bitcast_convert_type(b, _U64)
    acc = lax.bitcast_convert_type(c, _U64)
    for kk in range(a.shape[-1]):
        acc = _fma64(ab[..., :, kk:kk + 1], bb[..., kk:kk + 1, :], acc)
    return lax.bitcast_convert_type(acc, jnp.float64)


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


def _round_operand(x, a_type):
    if a_type == "tf32":  # the tensor core ignores the low 13 bits
        bits = lax.bitcast_convert_type(x, jnp.uint32) & jnp.uint32(0xFFFFE000)
        return lax.bitcast_convert_type(bits, jnp.float32)
    return x


def _mma_fast(a, b, c, a_type, d_type):
    acc_dt = jnp.float64 if a_type == "f64" else jnp.float32
    a = _round_operand(a, a_type)
    b = _round_operand(b, a_type)
    prod = jnp.einsum("...mk,...kn->...mn", a, b, preferred_element_type=acc_dt,
                      precision=lax.Precision.HIGHEST)
    return (prod + c.astype(acc_dt)).astype(STORAGE_DTYPE[d_type])


def _float_satf(d, d_type):
    """Documented rule for float satf (no capture: CUDA 13 rejects it)."""
    big = jnp.asarray(jnp.finfo(STORAGE_DTYPE[d_type]).max, d.dtype)
    d = jnp.where(jnp.isnan(d), jnp.zeros_like(d), d)
    return jnp.clip(d, -big, big)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4, 5, 6, 7, 8))
def _mma_float(a, b, c, a_type, c_type, d_type, params, mode, satf):
    if mode == "fast":
        d = _mma_fast(a, b, c, a_type, d_type)
    elif a_type == "f64":
        d = _mma_f64_exact(a, b, c)
    else:
        d = _mma_float_exact(a, b, c, a_type, c_type, d_type, params)
    return _float_satf(d, d_type) if satf else d


def _mma_float_fwd(a, b, c, a_type, c_type, d_type, params, mode, satf):
    return _mma_float(a, b, c, a_type, c_type, d_type, params, mode, satf), (a, b, c)


def _mma_float_bwd(a_type, c_type, d_type, params, mode, satf, res, g):
    # Straight-through estimator: the tensor core's truncations and roundings are
    # treated as the identity, so D = A @ B + C differentiates as the exact product:
    # dA = dD @ B^T, dB = A^T @ dD, dC = dD, computed in fp32 (fp64 for f64), summed
    # over broadcast batch dims, and cast back to each operand's dtype.
    a, b, c = res
    acc = jnp.float64 if a_type == "f64" else jnp.float32
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


def mma(a, b, c, *, a_type: str, c_type: str, d_type: str, arch="sm_90", mode="exact",
        satf=False) -> jax.Array:
    """``D = A @ B + C`` in tensor-core arithmetic (one ``mma_sync`` per tile).

    Args:
      a: (..., m, k) in a_type's storage dtype: float16 (f16), bfloat16 (bf16), float32
        (tf32: the whole fp32 word; the tensor core ignores its low 13 bits), float64,
        int8 (s8; s4 values in [-8, 7]) or uint8 (u8; u4 values in [0, 15]; for
        s4/u4 only the low 4 bits count, as in a fragment).
      b: (..., k, n), same dtype as a.
      c: (..., m, n) in c_type's dtype (float16, float32, float64 or int32). Leading
        batch dims of a, b and c broadcast: many tiles at once without vmap.
      a_type, c_type, d_type: static type names; see ``COMBOS`` for valid triples.
      arch: a key of ``ARCHS`` or an ``ArchParams``. Only sm_90 is verified.
      mode: ``"exact"`` reproduces the hardware bits (see the module docstring for
        the model). ``"fast"`` uses ``lax.dot_general`` with fp32 (fp64 for f64)
        accumulation of the operands (tf32 low bits dropped), then one conversion to
        d_type: it rounds to nearest instead of truncating each aligned term and the
        fp32 result, and so differs from hardware in the last bits (about 40% of
        fp32 results), and a product overflowing fp32 gives inf/NaN where the
        hardware keeps a finite block sum.
      satf: integer types: clamp the exact ``A @ B + C`` to the int32 range instead of
        wrapping modulo 2**32 (verified). Float types: CUDA 13 rejects satf so it is
        unverified; we apply the documented PTX rule to the result: +inf -> +MAX_NORM,
        -inf -> -MAX_NORM, NaN -> +0.

    Returns:
      (..., m, n) array of d_type's dtype.

    Raises:
      ValueError/TypeError: a static argument or dtype not allowed (the message names it).
      RuntimeError: a_type 'f64' with ``jax_enable_x64`` off.

    Gradients: straight-through (see ``_mma_float_bwd``); integer types have none.

    Example:
      >>> import jax.numpy as jnp
      >>> a = jnp.ones((16, 16), jnp.float16); b = jnp.ones((16, 16), jnp.float16)
      >>> c = jnp.zeros((16, 16), jnp.float32)
      >>> float(mma(a, b, c, a_type="f16", c_type="f32", d_type="f32")[0, 0])
      16.0
    """
    params = _check_static(a_type, c_type, d_type, arch, mode, satf)
    if a_type == "f64":
        checks.require_x64("mma with a_type='f64'")
    a = _check_array(a, "a", STORAGE_DTYPE[a_type])
    b = _check_array(b, "b", STORAGE_DTYPE[a_type])
    c = _check_array(c, "c", STORAGE_DTYPE[c_type])
    _check_shapes(a, b, c)
    if a_type in ("s4", "u4"):
        # 4-bit elements: only the low 4 bits exist (the fragment path packs them so),
        # s4 sign-extended from bit 3, as the tensor core reads them.
        a, b = (_low_nibble(x, a_type == "s4") for x in (a, b))
    if a_type in _INT_DTYPES:
        return _mma_int(a, b, c, satf)
    return _mma_float(a, b, c, a_type, c_type, d_type, params, mode, satf)


def _low_nibble(x: jax.Array, signed: bool) -> jax.Array:
    v = x.astype(jnp.int32) & 0xF
    return ((v ^ 8) - 8).astype(x.dtype) if signed else v.astype(x.dtype)


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
