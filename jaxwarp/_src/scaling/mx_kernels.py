"""Block-scaled quantization kernels: blocks of a tensor, element rounding (to nearest
even or stochastic), the MX and NVFP4 quantizers and the dequantizer, all jitted on the
bits (the formats and scale rules are ``mx_formats.py``; the public functions and their
checks ``mx.py``)."""

from __future__ import annotations

import functools
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxwarp._src.numerics import softfloat
from jaxwarp._src.numerics.formats import FORMATS, Format
from jaxwarp._src.numerics.user_formats import decode_codes, encode_rounded
from jaxwarp._src.scaling.mx_formats import (
    _E8M0_BIAS,
    _E8M0_NAN,
    _F32_INF,
    _F32_QNAN,
    MXFormat,
    _e8m0_codes,
    mx_format,
)
from jaxwarp._src.scaling.tensor_scale import divide_rn, multiply_rn

# --------------------------------------------------------------------------------------
# Blocks: x -> (..., nblocks, block) views and back.


def _to_blocks(x: jax.Array, axis: int, block: int | tuple[int, int]) -> jax.Array:
    """``x`` as ``(*scale_shape, n)``: the elements of each block on the last axis."""
    if isinstance(block, tuple):
        br, bc = block
        *lead, r, c = x.shape
        y = x.reshape(*lead, r // br, br, c // bc, bc)
        y = jnp.swapaxes(y, -3, -2)  # (..., R, C, br, bc)
        return y.reshape(*lead, r // br, c // bc, br * bc)
    y = jnp.moveaxis(x, axis, -1)
    return y.reshape(*y.shape[:-1], y.shape[-1] // block, block)


def _from_blocks(y: jax.Array, shape: tuple[int, ...], axis: int,
                 block: int | tuple[int, int]) -> jax.Array:
    if isinstance(block, tuple):
        br, bc = block
        *lead, rr, cc, _ = y.shape
        y = y.reshape(*lead, rr, cc, br, bc)
        return jnp.swapaxes(y, -3, -2).reshape(shape)
    y = y.reshape(*y.shape[:-2], y.shape[-2] * y.shape[-1])  # no -1: empty batches
    return jnp.moveaxis(y, -1, axis)


def _scales_layout(s: jax.Array, axis: int, block: int | tuple[int, int]) -> jax.Array:
    """Block scales from ``(*blocks)`` (blocked axis last) to the tensor's axis order."""
    return s if isinstance(block, tuple) else jnp.moveaxis(s, -1, axis)


def _scales_blocks(s: jax.Array, axis: int, block: int | tuple[int, int]) -> jax.Array:
    return s if isinstance(block, tuple) else jnp.moveaxis(s, axis, -1)


# --------------------------------------------------------------------------------------
# Elements: (neg, sig, g) -> element codes, rounded once.


def _round_element(neg, sig, g, f: MXFormat, mode: str, rbits, saturate: bool):
    """``(-1)**neg * sig * 2**g`` (uint32 ``sig``) rounded onto the element grid: codes
    (uint32 for floats, int32 for MXINT8)."""
    lay = f.user_layout
    if lay is not None:  # a user-defined format: user_formats' grid and overflow rule
        q, lsb = softfloat.round_sig(sig, g, lay.emin, lay.mb, "rn" if mode == "rn" else "rz")
        if mode == "rs":
            q, lsb = _stochastic_carry(q, lsb, sig, g, lay.mb, rbits)
        # "rn" names the overflow rule only: ±max if saturate, else the format's inf / NaN
        return encode_rounded(neg, q, lsb, lay._replace(saturate=saturate), "rn")
    if f.int_lsb is not None:  # a fixed-point grid: every value sits on 2**int_lsb
        emin, mbits = f.int_lsb + 24, 24  # values below 2**18 sit on 2**int_lsb
    else:
        ef = f.element_format
        emin, mbits = ef.min_exponent, ef.mantissa_bits
    q, lsb = softfloat.round_sig(sig, g, emin, mbits, "rn" if mode == "rn" else "rz")
    if mode == "rs":
        q, lsb = _stochastic_carry(q, lsb, sig, g, mbits, rbits)
    if f.int_lsb is not None:
        mag = q.astype(jnp.int32) << jnp.clip(lsb - f.int_lsb, 0, 7)
        mag = jnp.where(lsb - f.int_lsb > 7, 128, mag)
        mag = jnp.minimum(mag, 127)  # symmetric: -128 is never produced
        return jnp.where(neg, -mag, mag)
    ef = f.element_format
    over = _above_max(q, lsb, ef)
    code = softfloat.encode_rounded(neg, jnp.where(over, 0, q).astype(jnp.uint32),
                                    lsb, ef.name)
    sign = neg.astype(jnp.uint32) << (ef.exponent_bits + ef.mantissa_bits)
    if saturate:
        big = _max_code(ef)
    else:
        big = _max_code(ef) + 1 if ef.has_inf else _nan_code(ef)
    return jnp.where(over, jnp.uint32(big) | sign, code)


def _stochastic_carry(q, lsb, sig, g, mbits: int, rbits):
    """Stochastic rounding of ``sig * 2**g`` from its truncation ``q * 2**lsb``.

    The ``s = lsb - g`` dropped bits ``d`` of ``sig`` and the 32 random bits ``r`` are
    added with ``r``'s top bit under the first dropped bit, and the sum is truncated: the
    magnitude rounds up when ``d + floor(r * 2**(s - 32)) >= 2**s``. With ``s <= 32``
    that is ``(r >> (32 - s)) > 2**s - 1 - d``, probability ``d / 2**s``: unbiased.
    """
    s = lsb - g
    sc = jnp.clip(s, 1, 32)
    mask = jnp.uint32(0xFFFFFFFF) >> (32 - sc).astype(jnp.uint32)  # 2**s - 1
    d = jnp.where(s >= 32, sig, sig & mask)
    up_low = (rbits >> (32 - sc).astype(jnp.uint32)) > (mask - d)
    t = jnp.where(s - 32 >= 32, jnp.uint32(0),
                  sig >> jnp.clip(s - 32, 0, 31).astype(jnp.uint32))  # floor(d / 2**(s-32))
    up_high = rbits > (jnp.uint32(0xFFFFFFFF) - t)
    up = jnp.where(s <= 0, False, jnp.where(s <= 32, up_low, up_high))
    q = q + up.astype(q.dtype)
    carry = q >= (1 << (mbits + 1))
    return jnp.where(carry, q >> 1, q), lsb + carry.astype(jnp.int32)


def _top(ef: Format) -> tuple[int, int]:
    """``(lsb, q)`` of the format's largest value ``q * 2**lsb`` (q of mbits + 1 bits)."""
    top_lsb = ef.max_exponent - ef.mantissa_bits
    return top_lsb, int(Fraction(ef.max_value) / Fraction(2) ** top_lsb)


def _above_max(q, lsb, ef: Format):
    top_lsb, top_q = _top(ef)
    return (lsb > top_lsb) | ((lsb == top_lsb) & (q > top_q))


def _max_code(ef: Format) -> int:
    mb = ef.mantissa_bits
    top_lsb, top_q = _top(ef)
    return ((top_lsb - (ef.min_exponent - mb)) << mb) + top_q


def _nan_code(ef: Format) -> int:
    return (1 << (ef.exponent_bits + ef.mantissa_bits)) - 1


def _store_elements(codes: jax.Array, f: MXFormat) -> jax.Array:
    if f.int_lsb is not None:
        return codes.astype(jnp.int8)
    ef = f.element_format
    if f.user_layout is not None:  # codes: uint8, uint16 above 8 bits
        return codes.astype(ef.storage_dtype)
    u8 = codes.astype(jnp.uint8)
    if ef.storage_dtype == np.dtype(np.uint8):  # a code-stored format (fp6, fp4)
        return u8
    return lax.bitcast_convert_type(u8, ef.storage_dtype)


def _element_terms(elements: jax.Array, f: MXFormat):
    """Stored elements -> ``(neg, lsb, sig, inf, nan)`` of their values."""
    if f.int_lsb is not None:
        v = elements.astype(jnp.int32)
        return (v < 0, jnp.full(v.shape, f.int_lsb, jnp.int32), jnp.abs(v).astype(jnp.uint32),
                jnp.zeros(v.shape, bool), jnp.zeros(v.shape, bool))
    lay = f.user_layout
    if lay is not None:
        neg, sig, lsb, _, inf, nan = decode_codes(elements.astype(jnp.uint32), lay)
        return neg, lsb, sig.astype(jnp.uint32), inf, nan
    ef = f.element_format
    u = elements if elements.dtype == jnp.uint8 else lax.bitcast_convert_type(
        elements, jnp.uint8)
    neg, lsb, sig, _, inf, nan = softfloat.decode(u.astype(jnp.uint32), ef.name)
    return neg, lsb, sig.astype(jnp.uint32), inf, nan


def _f32_bits(neg, q, lsb) -> jax.Array:
    """``(-1)**neg * q * 2**lsb`` rounded once to float32 bits (overflow: inf)."""
    q, lsb = softfloat.round_sig(q, lsb, softfloat.emin("f32"), 23, "rn")
    return softfloat.encode_rounded(neg, q, lsb, "f32")


# --------------------------------------------------------------------------------------
# The kernels.


def _amax_bits(xb: jax.Array) -> jax.Array:
    """Largest magnitude bits over the last axis (NaN bits above inf's: non-finite)."""
    return jnp.max(lax.bitcast_convert_type(xb, jnp.uint32) & jnp.uint32(0x7FFFFFFF), axis=-1)


def random_bits(key_data: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    """The 32 random bits per element of stochastic rounding: ``jax.random.bits`` of a
    raw key, for the blocks' shape (``blocks_shape``)."""
    return jax.random.bits(jax.random.wrap_key_data(key_data), shape, jnp.uint32)


def blocks_shape(shape: tuple[int, ...], axis: int, block: int | tuple[int, int]
                 ) -> tuple[int, ...]:
    """The shape of ``to_blocks(x, axis, block)`` for ``x`` of ``shape``: the random
    bits of a quantizer are drawn in it.

    Example:
      >>> blocks_shape((4, 64), -1, 32), blocks_shape((32, 64), -1, (16, 16))
      ((4, 2, 32), (2, 4, 256))
    """
    if isinstance(block, tuple):
        *lead, r, c = shape
        return (*lead, r // block[0], c // block[1], block[0] * block[1])
    s = list(shape)
    n = s.pop(axis)
    return (*s, n // block, block)


def mx_blocks(xb, rbits, *, f: MXFormat, rule, mode, saturate, amax_bits=None):
    """The MX quantizer on blocks ``xb`` (``(..., n)`` float32, one block on the last
    axis; ``rbits`` their random bits for ``mode="rs"``, else None): the elements
    (stored, ``(..., n)``) and the ue8m0 scale codes (uint32, ``(...)``). Each block is
    quantized on its own. ``amax_bits``: the blocks' largest magnitudes (uint32 bits,
    ``(...)``), None to take them from ``xb``: a block given as several rows of ``xb``
    with its amax repeated quantizes as one block (a 2D block as rows of 1D ones)."""
    amax = _amax_bits(xb) if amax_bits is None else amax_bits
    codes = _e8m0_codes(amax, f, rule)
    e = codes.astype(jnp.int32) - _E8M0_BIAS
    u = lax.bitcast_convert_type(xb, jnp.uint32)
    neg, lsb, sig, _, _, _ = softfloat.decode(u, "f32")
    el = _round_element(neg, sig.astype(jnp.uint32), lsb - e[..., None], f, mode, rbits,
                        saturate)
    nan_block = (codes == _E8M0_NAN)[..., None]
    if f.int_lsb is not None:
        el = jnp.where(nan_block, 0, el)
    elif f.user_layout is not None:
        el = jnp.where(nan_block, jnp.uint32(f.user_layout.nan_code or 0), el)
    else:
        ef = f.element_format
        el = jnp.where(nan_block, jnp.uint32(_nan_code(ef) if ef.has_nan else 0), el)
    return _store_elements(el, f), codes


@functools.partial(jax.jit, static_argnames=("f", "block", "axis", "rule", "mode",
                                             "saturate"))
def _quantize_mx(x, key_data, *, f: MXFormat, block, axis, rule, mode, saturate):
    xb = _to_blocks(x, axis, block)
    rbits = random_bits(key_data, xb.shape) if mode == "rs" else None
    el, codes = mx_blocks(xb, rbits, f=f, rule=rule, mode=mode, saturate=saturate)
    elements = _from_blocks(el, x.shape, axis, block)
    scales = _scales_layout(codes.astype(jnp.uint8), axis, block)
    return elements, scales


def tensor_amax(x: jax.Array) -> jax.Array:
    """NVFP4's per-tensor amax: the largest magnitude of ``x`` (float32; NaN bits above
    inf's; +0 for an empty or all-zero tensor)."""
    return lax.bitcast_convert_type(jnp.max(lax.bitcast_convert_type(x, jnp.uint32)
                                            & jnp.uint32(0x7FFFFFFF), initial=0),
                                    jnp.float32)


def nvfp4_blocks(xb, tmax, rbits, *, f: MXFormat, mode, amax_bits=None):
    """The NVFP4 quantizer on blocks ``xb`` (``(..., n)`` float32) of a tensor whose
    amax is ``tmax`` (:func:`tensor_amax`; ``rbits`` as :func:`mx_blocks`'s): the
    elements (stored, ``(..., n)``), the ue4m3 scale codes (uint32, ``(...)``) and the
    per-tensor scale. Given ``tmax``, each block is quantized on its own (every step
    elementwise); ``amax_bits`` as :func:`mx_blocks`'s."""
    f32 = jnp.float32
    e4m3, e2m1 = FORMATS[f.scale], f.element_format
    denom = f32(float(Fraction(e4m3.max_value) * Fraction(e2m1.max_value)))  # 2688, exact
    amax = lax.bitcast_convert_type(_amax_bits(xb) if amax_bits is None else amax_bits, f32)
    # The divisions that do not wait for each other run as one divide_rn (elementwise: the
    # same bits), so that the program holds three dividers instead of five, each a loop
    # (they divide one value per block):
    # s_t = tmax / 2688 beside amax / 6, then (amax / 6) / s_t beside 1 / s_t (below).
    first = divide_rn(jnp.concatenate([tmax[None], amax.reshape(-1)]),
                      jnp.concatenate([denom[None],
                                       jnp.full((amax.size,), e2m1.max_value, f32)]),
                      rolled=True)
    s_t, per_block = first[0], first[1:]
    s_t = jnp.where(tmax == 0, f32(1), s_t)  # an all-zero tensor: 1 (TransformerEngine)
    s_t = jnp.where(jnp.isfinite(tmax), s_t, f32(jnp.nan))  # NaN or inf anywhere: NaN
    second = divide_rn(jnp.concatenate([per_block, f32(1)[None]]), s_t, rolled=True)
    q, inv_t = second[:-1].reshape(amax.shape), second[-1]
    # Clamped to [e4m3's smallest normal, 448] (so no block scale is 0), then rounded to
    # ue4m3, to nearest even; NaN stays NaN.
    qb = lax.bitcast_convert_type(q, jnp.uint32)
    lo, hi = (int(np.array(v, np.float32).view(np.uint32))
              for v in (e4m3.min_normal, e4m3.max_value))
    qb = jnp.where(qb > jnp.uint32(_F32_INF), qb, jnp.clip(qb, jnp.uint32(lo), jnp.uint32(hi)))
    _, lsb, sig, _, _, nan = softfloat.decode(qb, "f32")
    qs, qlsb = softfloat.round_sig(sig.astype(jnp.uint32), lsb, e4m3.min_exponent,
                                   e4m3.mantissa_bits, "rn")
    sc = softfloat.encode_rounded(jnp.zeros_like(nan), qs, qlsb, f.scale)  # <= 448
    sc = jnp.where(nan, jnp.uint32(_nan_code(e4m3)), sc)
    # x times (1 / s_t) / s_b, each a float32 operation (torchao's order).
    sbn, sbl, sbs, _, _, _ = softfloat.decode(sc, f.scale)
    sb32 = lax.bitcast_convert_type(_f32_bits(sbn, sbs.astype(jnp.uint32), sbl), f32)
    factor = divide_rn(inv_t, sb32, rolled=True)
    y = multiply_rn(xb, factor[..., None])
    yneg, ylsb, ysig, _, _, _ = softfloat.decode(lax.bitcast_convert_type(y, jnp.uint32),
                                                 "f32")
    el = _round_element(yneg, ysig.astype(jnp.uint32), ylsb, f, mode, rbits, True)
    return _store_elements(el, f), sc, s_t


@functools.partial(jax.jit, static_argnames=("f", "block", "axis", "mode"))
def _quantize_nvfp4(x, key_data, *, f: MXFormat, block, axis, mode):
    tmax = tensor_amax(x)
    xb = _to_blocks(x, axis, block)
    rbits = random_bits(key_data, xb.shape) if mode == "rs" else None
    el, sc, s_t = nvfp4_blocks(xb, tmax, rbits, f=f, mode=mode)
    elements = _from_blocks(el, x.shape, axis, block)
    scales = _scales_layout(sc.astype(jnp.uint8), axis, block)
    return elements, scales, s_t


def dequantize_blocks(eb, sb, tensor_scale, f: MXFormat) -> jax.Array:
    """float32 values of blocks: elements ``eb`` (``(..., n)``, stored or uint8 codes),
    their scale codes ``sb`` (uint32, ``(...)``) and NVFP4's per-tensor scale (else
    None); each block on its own (see ``mx.dequantize``)."""
    neg, lsb, sig, inf, nan = _element_terms(eb, f)
    if f.tensor_scale:
        sn, sl, ss, _, _, snan = softfloat.decode(sb, f.scale)
        # element * block scale is exact in float32 (2 + 4 significant bits).
        prod = _f32_bits(neg, sig * ss[..., None].astype(jnp.uint32), lsb + sl[..., None])
        out = multiply_rn(lax.bitcast_convert_type(prod, jnp.float32), tensor_scale)
        out = lax.bitcast_convert_type(out, jnp.uint32)
        out = jnp.where(snan[..., None], jnp.uint32(_F32_QNAN), out)
    else:
        e = sb.astype(jnp.int32) - _E8M0_BIAS
        out = _f32_bits(neg, sig, lsb + e[..., None])
        sign = neg.astype(jnp.uint32) << 31
        out = jnp.where(inf, sign | jnp.uint32(_F32_INF), out)
        out = jnp.where(nan | (sb == _E8M0_NAN)[..., None], jnp.uint32(_F32_QNAN), out)
    return lax.bitcast_convert_type(out, jnp.float32)


@jax.jit
def _dequantize_kernel(t) -> jax.Array:
    """float32 values of an ``MXTensor`` ``t`` (see ``mx.dequantize``)."""
    f = mx_format(t.fmt)
    eb = _to_blocks(t.elements, t.axis, t.block)
    sb = _scales_blocks(t.scales, t.axis, t.block).astype(jnp.uint32)
    out = dequantize_blocks(eb, sb, t.tensor_scale, f)
    return _from_blocks(out, t.elements.shape, t.axis, t.block)
