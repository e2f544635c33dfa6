"""Power-of-two per-tensor scales, computed and applied with integer operations.

fp8 (and f16) scaling recipes divide a tensor by a per-tensor scale before the conversion
and multiply the product by the scales afterwards. Here a scale is a power of two
``2**k`` chosen from the tensor's amax (:func:`tensor_scale_exponent`), and every scaling
step is :func:`times_pow2`: ``x * 2**k`` rounded once, on the bits. No float operation is
involved, so the results are the same on every backend (XLA's GPU division is
``div.full.f32``, not correctly rounded; its CPU backend flushes subnormal results of
float operations to zero, the GPU does not). Used by ``gemm.matmul`` (its own fp8
backward pass) and by ``emulate``'s ``scaling="tensor"`` recipe. A scale that is not a
power of two (``matmul``'s ``a_scale``, ``b_scale``) is applied by :func:`divide_rn` and
:func:`multiply_rn`, fp32 division and multiplication rounded once on the bits, and block
scales on each promotion by :func:`fma_rn`, an fp32 fused multiply-add rounded once.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxwarp._src.numerics import bitops, formats, softfloat
from jaxwarp._src.numerics.formats import FORMATS

__all__ = ["SCALE_EXP_MAX", "divide_rn", "fma_rn", "multiply_rn", "tensor_scale_exponent",
           "times_pow2"]

#: Per-tensor scale exponents are clamped to [-SCALE_EXP_MAX, SCALE_EXP_MAX].
SCALE_EXP_MAX = 126
_F32_INF = 0x7F800000
#: Canonical quiet NaN and infinity bits of the formats a rescaled product has.
_SPECIAL_BITS = {"f32": (0x7FC00000, _F32_INF), "f16": (0x7E00, 0x7C00)}
def times_pow2(x: jax.Array, k: jax.Array, out_fmt: str) -> jax.Array:
    """``x * 2**k`` rounded once (to nearest, ties to even) into ``out_fmt`` (``"f32"`` or
    ``"f16"``), computed on the bits with integer operations.

    No floating-point operation is involved, so the result is the same on every backend:
    XLA's CPU backend flushes subnormal operands and results of float operations to zero
    and its GPU backend does not, and an integer result cannot be contracted into a fused
    multiply-add with whatever the program adds to it. Subnormal inputs and results are
    exact or rounded once; beyond the largest finite value the result is infinite; NaN
    stays NaN and infinities keep their sign.

    Args:
      x: float array of a ``softfloat.DECODE_FORMATS`` dtype (float32, float16,
        bfloat16, fp8); other floats are converted to float32 first.
      k: int32 exponent (broadcasts against ``x``).
      out_fmt: static, ``"f32"`` or ``"f16"``.
    """
    fmt = formats.ALIASES.get(x.dtype.name, x.dtype.name)
    if fmt not in softfloat.DECODE_FORMATS or fmt == "tf32":
        x, fmt = x.astype(jnp.float32), "f32"
    bits = bitops.to_u32(x)
    neg, lsb, sig, _, inf, nan = softfloat.decode(bits, fmt)
    q, e = softfloat.round_sig(sig.astype(jnp.uint32), lsb + k, softfloat.emin(out_fmt),
                               FORMATS[out_fmt].mantissa_bits, "rn")
    code = softfloat.encode_rounded(neg, q, e, out_fmt)
    nan_bits, inf_bits = _SPECIAL_BITS[out_fmt]
    sign = neg.astype(jnp.uint32) << (FORMATS[out_fmt].bits - 1)
    code = jnp.where(nan, jnp.uint32(nan_bits), jnp.where(inf, sign | inf_bits, code))
    return bitops.from_u32(code, FORMATS[out_fmt].storage_dtype)


def tensor_scale_exponent(x: jax.Array, fmt: str) -> jax.Array:
    """Current per-tensor scale exponent: the largest int32 ``k`` with
    ``amax(|x|) * 2**k <= max_value(fmt)``, clamped to ``[-SCALE_EXP_MAX, SCALE_EXP_MAX]``;
    0 where the amax is 0 or not finite.

    The scale is a power of two, so scaling and unscaling are exact (:func:`times_pow2`,
    in fp32's normal range) and the recipe's bits are the same on every backend: no
    division (XLA's GPU division is ``div.full.f32``, not correctly rounded), no float
    operation at all. The amax and ``k`` come from the operand's fp32 bits (an integer
    maximum of the magnitudes). Scales are constants to the derivative (``stop_gradient``),
    as in fp8 training recipes: they choose the representation, not the value.
    """
    f32 = times_pow2(x, jnp.int32(0), "f32")
    bits = jnp.max(lax.bitcast_convert_type(f32, jnp.int32) & 0x7FFFFFFF)
    top = int(np.array(FORMATS[fmt].max_value, np.float32).view(np.int32))
    # amax = 1.f * 2**e and max = 1.F * 2**E (biased e, E): amax * 2**k <= max for
    # k <= E - e when f <= F, else k <= E - e - 1. A subnormal amax (e = 0) gives a k
    # above the clamp.
    k = (top >> 23) - (bits >> 23) - ((bits & 0x7FFFFF) > (top & 0x7FFFFF)).astype(jnp.int32)
    k = jnp.clip(k, -SCALE_EXP_MAX, SCALE_EXP_MAX)
    k = jnp.where((bits > 0) & (bits < _F32_INF), k, 0)  # not 0, inf or NaN
    return lax.stop_gradient(k)



def _normalized(sig, lsb):
    # A nonzero significand shifted up to 24 bits (its value kept by lowering lsb).
    up = jnp.maximum(24 - softfloat.bitlen(sig), 0)
    return (sig.astype(jnp.uint32) << up.astype(jnp.uint32)), lsb - up


def _fp32_operands(x, y):
    """Both operands of a binary fp32 operation, broadcast and decoded: for each, (sign,
    normalized significand, its exponent, inf, NaN, zero); a zero's significand reads 1."""
    x, y = jnp.broadcast_arrays(jnp.asarray(x, jnp.float32), jnp.asarray(y, jnp.float32))
    out = []
    for v in (x, y):
        n, lead, sig, _, inf, nan = softfloat.decode(bitops.to_u32(v), "f32")
        m, lead = _normalized(jnp.where(sig == 0, 1, sig), lead)
        out.append((n, m, lead, inf, nan, (sig == 0) & ~inf & ~nan))
    return out


def divide_rn(x: jax.Array, y: jax.Array, *, rolled: bool = False) -> jax.Array:
    """IEEE fp32 ``x / y`` rounded to nearest even, computed on the bits with integer
    operations (a restoring long division of the significands and one :func:`round_sig
    <jaxwarp._src.numerics.softfloat.round_sig>`).

    XLA's GPU backend divides with ``div.full.f32``, which is not correctly rounded, and
    its CPU backend flushes subnormal operands and results; this division gives the
    correctly rounded IEEE result, subnormals included, on every backend. NaN operands,
    ``0 / 0`` and ``inf / inf`` give NaN; ``x / 0`` (x nonzero) and ``inf / y`` infinity,
    ``x / inf`` and ``0 / y`` zero, with the sign the exclusive or of the operands'.

    Args:
      x, y: float32 arrays (other floats are converted to float32 first); they broadcast.
      rolled: static; run the division's 27 steps as one ``lax.fori_loop`` instead of
        writing them out (the same bits; a smaller program, about 40% fewer lines, for
        divisions of a few values such as per-block scales; slower on large arrays).
    """
    (nx, mx, lx, ix, qx, zx), (ny, my, ly, iy, qy, zy) = _fp32_operands(x, y)

    # q = floor(mx * 2**26 / my) (26 or 27 bits, as mx / my is in (1/2, 2)); r the rest.
    def step(_, rq):
        r, q = rq
        bit = r >= my
        r = jnp.where(bit, r - my, r)
        return r << 1, (q << 1) | bit.astype(jnp.uint32)

    rq = (mx, jnp.zeros_like(mx))
    if rolled:
        rq = lax.fori_loop(0, 27, step, (*jnp.broadcast_arrays(*rq),))
    else:
        for i in range(27):
            rq = step(i, rq)
    r, q = rq
    mag = (q << 1) | (r != 0).astype(jnp.uint32)  # a sticky bit below the quotient's
    q, e = softfloat.round_sig(mag, lx - ly - 27, softfloat.emin("f32"),
                               FORMATS["f32"].mantissa_bits, "rn")
    neg = nx ^ ny
    code = softfloat.encode_rounded(neg, q, e, "f32")
    sign = neg.astype(jnp.uint32) << 31
    nan = qx | qy | (zx & zy) | (ix & iy)
    inf = ix | zy
    zero = zx | iy
    code = jnp.where(zero, sign, jnp.where(inf, sign | _F32_INF, code))
    code = jnp.where(nan, jnp.uint32(0x7FC00000), code)
    return bitops.from_u32(code, jnp.float32)


def multiply_rn(x: jax.Array, y: jax.Array) -> jax.Array:
    """IEEE fp32 ``x * y`` rounded to nearest even, computed on the bits with integer
    operations (the 48-bit product of the significands from 12-bit halves, then one
    :func:`round_sig <jaxwarp._src.numerics.softfloat.round_sig>`).

    XLA's CPU backend flushes subnormal operands and results of float multiplication and
    the GPU does not; this product keeps them on every backend. NaN operands and
    ``0 * inf`` give NaN; the sign is the exclusive or of the operands'.

    Args:
      x, y: float32 arrays (other floats are converted to float32 first); they broadcast.
    """
    (nx, mx, lx, ix, qx, zx), (ny, my, ly, iy, qy, zy) = _fp32_operands(x, y)
    xh, xl, yh, yl = mx >> 12, mx & 0xFFF, my >> 12, my & 0xFFF
    mid = xh * yl + xl * yh  # < 2**25
    lo = xl * yl + ((mid & 0xFFF) << 12)  # < 2**25
    hi = xh * yh + (mid >> 12) + (lo >> 24)  # the product is hi * 2**24 + lo, hi >= 2**22
    lo = lo & 0xFFFFFF
    mag = (hi << 7) | (lo >> 17) | ((lo & 0x1FFFF) != 0).astype(jnp.uint32)  # sticky bit
    q, e = softfloat.round_sig(mag, lx + ly + 17, softfloat.emin("f32"),
                               FORMATS["f32"].mantissa_bits, "rn")
    neg = nx ^ ny
    code = softfloat.encode_rounded(neg, q, e, "f32")
    sign = neg.astype(jnp.uint32) << 31
    code = jnp.where(zx | zy, sign, jnp.where(ix | iy, sign | _F32_INF, code))
    code = jnp.where(qx | qy | (zx & iy) | (ix & zy), jnp.uint32(0x7FC00000), code)
    return bitops.from_u32(code, jnp.float32)


_M26 = (1 << 26) - 1


def _limbs_shift(hi, lo, s):
    """``floor((hi * 2**26 + lo) * 2**s)`` as (hi, lo) base-2**26 limbs (uint32, results
    below 2**52), and whether bits were shifted out. ``s`` may be any int32."""
    u = jnp.uint32
    # Left (s >= 0; only s <= 31 occurs, and then the value stays below 2**52).
    sl = jnp.clip(s, 0, 31).astype(u)
    lo_l = (lo << sl) & _M26  # wraps mod 2**32: the low 26 bits stay right
    hi_l = (hi << sl) | jnp.where(s <= 26, lo >> jnp.clip(26 - s, 0, 31).astype(u),
                                  lo << jnp.clip(s - 26, 0, 31).astype(u))
    # Right (s < 0) by r, with a sticky bit.
    r = jnp.clip(-s, 0, 60)
    r1 = jnp.clip(r, 0, 26).astype(u)  # r < 26
    r2 = jnp.clip(r - 26, 0, 31).astype(u)  # 26 <= r < 52
    lo_r1 = (lo >> r1) | ((hi & ((u(1) << r1) - 1)) << (26 - r1))
    lost1 = (lo & ((u(1) << r1) - 1)) != 0
    lo_r2 = hi >> r2
    lost2 = (lo != 0) | ((hi & ((u(1) << r2) - 1)) != 0)
    near = r < 26
    lo_r = jnp.where(near, lo_r1, jnp.where(r < 52, lo_r2, 0))
    hi_r = jnp.where(near, hi >> r1, 0)
    lost_r = jnp.where(near, lost1, jnp.where(r < 52, lost2, (hi | lo) != 0))
    left = s >= 0
    return (jnp.where(left, hi_l, hi_r), jnp.where(left, lo_l, lo_r),
            ~left & lost_r)


def fma_rn(x: jax.Array, y: jax.Array, z: jax.Array) -> jax.Array:
    """IEEE fp32 fused multiply-add ``x * y + z`` rounded once to nearest even (CUDA's
    ``__fmaf_rn``, the ``FFMA`` instruction that ``nvcc`` contracts ``acc += s * p`` into
    by default), computed on the bits with integer operations.

    The exact product (48 bits) and ``z`` are aligned in a 52-bit window below the larger
    one's leading bit, held as two base-2**26 limbs; at most one of them loses bits there
    (then as a sticky bit, so the sum is rounded to odd), and the sum is rounded once to
    24 bits (subnormals kept, beyond the largest finite value infinity). NaN operands,
    ``0 * inf`` and ``inf - inf`` give NaN; an exact zero sum is +0 unless both the product
    and ``z`` are negative (or -0).

    Args:
      x, y, z: float32 arrays (other floats are converted to float32 first); they
        broadcast.

    Example:
      >>> x = jnp.float32(1 + 2**-12)
      >>> fma_rn(x, x, jnp.float32(-1)) == jnp.float32(2**-11 + 2**-24)  # no product rounding
      Array(True, dtype=bool)
    """
    u = jnp.uint32
    x, y, z = jnp.broadcast_arrays(*(jnp.asarray(v, jnp.float32) for v in (x, y, z)))
    (nx, mx, lx, ix, qx, zx), (ny, my, ly, iy, qy, zy) = _fp32_operands(x, y)
    (nz, mz, lz, iz, qz, zz), _ = _fp32_operands(z, z)
    # The exact product mx * my (in [2**46, 2**48)) as base-2**26 limbs.
    xh, xl, yh, yl = mx >> 12, mx & 0xFFF, my >> 12, my & 0xFFF
    mid = xh * yl + xl * yh
    lo = xl * yl + ((mid & 0xFFF) << 12)
    hi = xh * yh + (mid >> 12) + (lo >> 24)  # product = hi * 2**24 + lo
    lo = lo & 0xFFFFFF
    p_hi, p_lo = hi >> 2, ((hi & 3) << 24) | lo
    pzero = zx | zy
    p_hi, p_lo = jnp.where(pzero, u(0), p_hi), jnp.where(pzero, u(0), p_lo)
    lp = lx + ly
    lead_p = jnp.where(pzero, softfloat.NEG_BIG, lp + 24 + softfloat.bitlen(hi) - 1)
    mz = jnp.where(zz, u(0), mz)
    lead_z = jnp.where(zz, softfloat.NEG_BIG, lz + 23)
    g = jnp.maximum(lead_p, lead_z) - 50  # the window's last bit
    ph, pl, p_lost = _limbs_shift(p_hi, p_lo, lp - g)
    zh, zl, z_lost = _limbs_shift(jnp.zeros_like(mz), mz, lz - g)
    neg_p = nx ^ ny
    # |p| and |z| both below 2**52; at most one lost bits, and then it is the smaller.
    same = neg_p == nz
    s_lo = pl + zl
    s_hi = ph + zh + (s_lo >> 26)
    s_lo = s_lo & _M26
    p_big = (ph > zh) | ((ph == zh) & (pl >= zl))
    bh, bl, sh_, sl_ = (jnp.where(p_big, ph, zh), jnp.where(p_big, pl, zl),
                        jnp.where(p_big, zh, ph), jnp.where(p_big, zl, pl))
    lost = p_lost | z_lost
    # big - small - (1 if small lost bits: its floor was taken), with a borrow.
    d_lo = bl.astype(jnp.int32) - sl_.astype(jnp.int32) - lost.astype(jnp.int32)
    borrow = (d_lo < 0).astype(u)
    d_lo = (d_lo + jnp.where(d_lo < 0, 1 << 26, 0)).astype(u)
    d_hi = bh - sh_ - borrow
    r_hi, r_lo = jnp.where(same, s_hi, d_hi), jnp.where(same, s_lo, d_lo)
    neg = jnp.where(same, neg_p, jnp.where(p_big, neg_p, nz))
    # Down to at most 30 bits, rounded to odd (a sticky last bit), then rounded once.
    n = jnp.where(r_hi > 0, 26 + softfloat.bitlen(r_hi), softfloat.bitlen(r_lo))
    t = jnp.clip(n - 30, 0, 26)
    tu = t.astype(u)
    mag = (r_hi << (26 - tu)) | (r_lo >> tu)
    lost = lost | ((r_lo & ((u(1) << tu) - 1)) != 0)
    mag = mag | lost.astype(u)
    q, e = softfloat.round_sig(mag, g + t, softfloat.emin("f32"),
                               FORMATS["f32"].mantissa_bits, "rn")
    code = softfloat.encode_rounded(neg, q, e, "f32")
    exact_zero = (r_hi == 0) & (r_lo == 0) & ~lost
    code = jnp.where(exact_zero, (neg_p & nz).astype(u) << 31, code)
    # Specials: a NaN operand, 0 * inf, inf - inf give NaN; otherwise an infinity wins.
    pinf = (ix | iy) & ~pzero
    nan = qx | qy | qz | ((ix | iy) & pzero) | (pinf & iz & (neg_p != nz))
    code = jnp.where(iz, (nz.astype(u) << 31) | _F32_INF, code)
    code = jnp.where(pinf, (neg_p.astype(u) << 31) | _F32_INF, code)
    code = jnp.where(nan, u(0x7FC00000), code)
    return bitops.from_u32(code, jnp.float32)
