"""An emulated fused dot-product-add whose parameters are data, over any formats.

:func:`fused_dot` computes ``D = A @ B + C`` as a chain of truncated fused
dot-product-adds (the "T-FDPA" model of the tensor cores in Xie et al. 2025, MMA-Sim),
with its parameters in a :class:`FusedDot`: how many products one fused sum takes
(``block``), how many bits below the largest term's exponent are kept
(``alignment_bits``), how the sum is rounded (``rounding``) and into which format
(``accumulator``). The operands and the accumulator may be any float format whose code
layout is known (``user_formats.LAYOUT_FORMATS`` and every format made by
``jaxwarp.define_format``), so proposed formats can be studied in a hardware-like
datapath. With the parameters of a GPU it is that GPU's model (the tests reproduce
``jaxwarp.mma`` bit for bit for e4m3 on sm_89, sm_90a ``wgmma``, sm_100a ``tcgen05``
and sm_120).

The model's five steps and its special values are stated once, in :func:`fused_dot`'s
docstring (public as ``jaxwarp.fused_dot``).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from jaxwarp._src import checks
from jaxwarp._src.numerics import bitops, softfloat
from jaxwarp._src.numerics.formats import Format, get_format
from jaxwarp._src.numerics.user_formats import (
    LAYOUT_FORMATS,
    Layout,
    decode_codes,
    encode_rounded,
    layout,
)

__all__ = ["FUSED_ROUNDINGS", "FusedDot", "fused_dot"]

#: Roundings of a block sum: toward zero, to nearest even.
FUSED_ROUNDINGS = ("rz", "rn")


def _format(fmt: Any, argname: str) -> Format:
    return get_format(fmt, argname, LAYOUT_FORMATS, user=True)


@dataclasses.dataclass(frozen=True)
class FusedDot:
    """The parameters of :func:`fused_dot`'s datapath.

    Attributes:
      alignment_bits: F: every term is truncated to a multiple of ``2**(E - F)``, E the
        block's largest term exponent; 3 .. 28.
      block: products fused in one sum, 1 .. 64; k is cut into blocks in order, and
        each block's result is the next block's C.
      rounding: ``"rz"`` (toward zero) or ``"rn"`` (to nearest even) into the
        accumulator.
      accumulator: the format of C, D and every block's result: a name (or Format) of
        ``"f32"``, ``"f16"``, ``"bf16"``, another built-in float of at most 16 bits, or
        a user-defined format; it must have a NaN.
      e_floor: E is at least ``emin(accumulator) - e_floor``, 0 .. 64.
      sum_mantissa_bits: None, or a block sum keeps only this many fraction bits
        (rounded by ``rounding``) before it takes the accumulator's format: 13 is
        MMA-Sim's "RZ-E8M13" of Ada and Hopper fp8.

    The GPUs' parameters for e4m3 operands, from MMA-Sim's models (``jaxwarp.ARCHS``):

    =====================  =========  =====  ========  =======  ======================
    instruction            F          block  rounding  e_floor  sum_mantissa_bits
    =====================  =========  =====  ========  =======  ======================
    sm_89 ``mma.sync``     13         16     rz (f32)  6        13 (f32 D)
    sm_90a ``wgmma``       13         32     rz (f32)  7        13 (f32 D)
    sm_100a ``tcgen05``    25         32     rz (f32)  7        None
    sm_120 ``mma.sync``    25         32     rz (f32)  7        None
    =====================  =========  =====  ========  =======  ======================

    (with an f16 accumulator: ``"rn"``, no ``sum_mantissa_bits``).

    Example:
        >>> hopper = jaxwarp.FusedDot(alignment_bits=13, block=32, rounding="rz",
        ...                           accumulator="f32", sum_mantissa_bits=13)
        >>> hopper.accumulator, hopper.e_floor
        ('f32', 7)
    """

    alignment_bits: int = 25
    block: int = 32
    rounding: str = "rz"
    accumulator: str = "f32"
    e_floor: int = 7
    sum_mantissa_bits: int | None = None

    def __post_init__(self):
        for name, lo, hi in (("alignment_bits", 3, 28), ("block", 1, 64), ("e_floor", 0, 64)):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
                raise ValueError(f"FusedDot.{name} must be an int in [{lo}, {hi}], got {v!r}")
        if self.rounding not in FUSED_ROUNDINGS:
            raise ValueError(f"FusedDot.rounding must be one of {FUSED_ROUNDINGS}, got "
                             f"{self.rounding!r}")
        acc = _format(self.accumulator, "FusedDot.accumulator")
        if not acc.has_nan:
            raise ValueError(f"FusedDot.accumulator={acc.name!r} has no NaN to write for an "
                             f"invalid sum; choose a format with one")
        object.__setattr__(self, "accumulator", acc.name)
        smb = self.sum_mantissa_bits
        if smb is not None and (not isinstance(smb, int) or isinstance(smb, bool)
                                or not 0 <= smb <= acc.mantissa_bits):
            raise ValueError(f"FusedDot.sum_mantissa_bits must be None or an int in [0, "
                             f"{acc.mantissa_bits}] ({acc.name}'s fraction bits), got {smb!r}")

    def replace(self, **kw) -> FusedDot:
        """A copy with some fields changed."""
        return dataclasses.replace(self, **kw)


# --------------------------------------------------------------------------------------
# One block.


def _shift_u32(x: jax.Array, s: jax.Array) -> jax.Array:
    """``x * 2**s`` on uint32, truncating; ``s`` any int32 (the result must fit)."""
    left = x << jnp.clip(s, 0, 31).astype(jnp.uint32)
    right = jnp.where(s <= -32, jnp.uint32(0), x >> jnp.clip(-s, 0, 31).astype(jnp.uint32))
    return jnp.where(s >= 0, left, right)


def _signed(neg, mag):
    t = mag.astype(jnp.int32)
    return jnp.where(neg, -t, t)


def _exact_sum(terms: jax.Array, c_term: jax.Array, g: jax.Array):
    """Sum of int32 terms (last axis, each below 2**30 in magnitude) and ``c_term``
    -> ``(neg, mag, g)``: value ``(-1)**neg * mag * 2**g``, mag uint32 below 2**31 with
    a sticky last bit where bits were dropped (enough for any rounding to 24 bits)."""
    hi = jnp.sum(terms >> 16, axis=-1) + (c_term >> 16)
    lo = jnp.sum(terms & 0xFFFF, axis=-1) + (c_term & 0xFFFF)
    hi, lo = hi + (lo >> 16), lo & 0xFFFF  # value = hi * 2**16 + lo, 0 <= lo < 2**16
    neg = hi < 0
    mh = jnp.where(neg, jnp.where(lo > 0, -hi - 1, -hi), hi)
    ml = jnp.where(neg & (lo > 0), 0x10000 - lo, lo)
    # mh < 2**21: keep 31 bits, the dropped ones as a sticky bit.
    s = jnp.maximum(softfloat.bitlen(mh.astype(jnp.uint32)) - 15, 0)
    mh, ml = mh.astype(jnp.uint32), ml.astype(jnp.uint32)
    su = s.astype(jnp.uint32)
    mag = (mh << (16 - su)) | (ml >> su)
    sticky = (ml & ((jnp.uint32(1) << su) - 1)) != 0
    return neg, mag | sticky.astype(jnp.uint32), g + s


def _block(a, b, c, dp: FusedDot, acc: Layout):
    """One fused block: decoded operands ``a`` (..., m, 1, L) and ``b`` (..., 1, n, L),
    accumulator codes ``c`` (..., m, n) -> result codes (uint32)."""
    na, sa, la, ea, ia, nan_a = a
    nb, sb, lb, eb, ib, nan_b = b
    cn, cs, cl, ce, ci, cnan = decode_codes(c, acc)
    zero_a, zero_b = (sa == 0) & ~ia & ~nan_a, (sb == 0) & ~ib & ~nan_b
    pneg = na ^ nb
    psig = sa.astype(jnp.uint32) * sb.astype(jnp.uint32)  # exact: below 2**32
    pinf = (ia | ib) & ~nan_a & ~nan_b & ~zero_a & ~zero_b
    nan = (jnp.any(nan_a | nan_b | (ia & zero_b) | (ib & zero_a), axis=-1) | cnan)
    plus = jnp.any(pinf & ~pneg, axis=-1) | (ci & ~cn)
    minus = jnp.any(pinf & pneg, axis=-1) | (ci & cn)
    nan = nan | (plus & minus)
    # Exponents: of the non-zero finite terms, and the floor.
    floor = acc.emin - dp.e_floor
    pe = jnp.where(psig != 0, ea + eb, floor)
    E = jnp.maximum(jnp.max(pe, axis=-1), jnp.where(cs != 0, ce, floor))
    E = jnp.maximum(E, floor)
    g = E - dp.alignment_bits
    terms = _signed(pneg, _shift_u32(psig, la + lb - g[..., None]))
    c_term = _signed(cn, _shift_u32(cs.astype(jnp.uint32), cl - g))
    neg, mag, g = _exact_sum(terms, c_term, g)
    smb = acc.mb if dp.sum_mantissa_bits is None else dp.sum_mantissa_bits
    q, lsb = softfloat.round_sig(mag, g, acc.emin, smb, dp.rounding)
    if smb != acc.mb:  # onto the accumulator's own grid: exact
        q, lsb = softfloat.round_sig(q, lsb, acc.emin, acc.mb, dp.rounding)
    code = encode_rounded(neg & (q != 0), q, lsb, acc, dp.rounding, inf_on_overflow=True)
    sign = acc.sign_bit
    if acc.inf_code is not None:
        inf_p, inf_m = acc.inf_code, acc.inf_code | sign
    elif acc.saturate:
        inf_p, inf_m = acc.max_code, acc.max_code | sign
    else:
        inf_p = inf_m = acc.nan_code
    code = jnp.where(plus, jnp.uint32(inf_p), jnp.where(minus, jnp.uint32(inf_m), code))
    return jnp.where(nan, jnp.uint32(acc.nan_code), code)


def _blocks(x: jax.Array, block: int, axis_of_k: int) -> jax.Array:
    """Codes with k at ``axis_of_k`` -> (blocks, ..., block): k cut into blocks, the last
    one padded with code 0 (+0 in every layout: a zero product changes nothing)."""
    x = jnp.moveaxis(x, axis_of_k, -1)
    k = x.shape[-1]
    nb = -(-k // block)
    x = jnp.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, nb * block - k)])
    return jnp.moveaxis(x.reshape(x.shape[:-1] + (nb, block)), -2, 0)


@functools.partial(jax.jit, static_argnums=(3, 4, 5))
def _fused_dot(a, b, c, a_fmt: Format, b_fmt: Format, dp: FusedDot):
    acc_fmt = get_format(dp.accumulator, "accumulator", LAYOUT_FORMATS, user=True)
    acc = layout(acc_fmt)
    ca = _blocks(bitops.uint_view(a).astype(jnp.uint32), dp.block, -1)  # (nb, ..., m, L)
    cb = _blocks(bitops.uint_view(b).astype(jnp.uint32), dp.block, -2)  # (nb, ..., n, L)
    batch = jnp.broadcast_shapes(a.shape[:-2], b.shape[:-2], c.shape[:-2])
    d = jnp.broadcast_to(bitops.uint_view(c).astype(jnp.uint32), batch + c.shape[-2:])

    def step(d, blk):  # one block: its result is the next block's accumulator
        xa, xb = blk
        da = [x[..., :, None, :] for x in decode_codes(xa, layout(a_fmt))]
        db = [x[..., None, :, :] for x in decode_codes(xb, layout(b_fmt))]
        return _block(da, db, d, dp, acc), None

    d, _ = lax.scan(step, d, (ca, cb))
    if acc_fmt.code_storage:
        return d.astype(acc_fmt.storage_dtype)
    return lax.bitcast_convert_type(d.astype(acc_fmt.uint_dtype), acc_fmt.storage_dtype)


def _operand_arg(x: Any, name: str, fmt: Format) -> jax.Array:
    arr = checks.array_arg(x, name)
    if arr.dtype != fmt.storage_dtype:
        raise TypeError(f"{name} must be an array of {fmt.name}'s storage dtype "
                        f"{fmt.storage_dtype.name}, got dtype {arr.dtype}")
    if arr.ndim < 2:
        raise ValueError(f"{name} must be a matrix (..., rows, cols), got shape {arr.shape}")
    return arr


def fused_dot(a: Any, b: Any, c: Any, *, a_format: str | Format,
              b_format: str | Format | None = None,
              datapath: FusedDot) -> jax.Array:
    """``D = A @ B + C`` through an emulated fused dot-product-add (see :class:`FusedDot`).

    k is cut into blocks of ``datapath.block`` products (the last one may be shorter);
    each block is one truncated fused sum of its products and the accumulator, rounded
    once into ``datapath.accumulator``, and the next block's accumulator. One block, for
    each output element:

    1. every operand is split into a significand and the exponent of its exponent field
       (a subnormal counts at the format's minimum normal exponent); a product's
       exponent is the sum of its operands' and its value is exact;
    2. C (the accumulator: D of the previous block, or the C given) is one more term,
       its exponent taken likewise;
    3. ``E`` is the largest exponent of the non-zero terms, but at least
       ``emin(accumulator) - e_floor`` (MMA-Sim's exponent of a zero term);
    4. every term is truncated toward zero to a multiple of ``2**(E - alignment_bits)``;
       the truncated terms are summed exactly;
    5. the sum is rounded once into the accumulator format (``"rz"`` or ``"rn"``; cut to
       ``sum_mantissa_bits`` fraction bits first, if given), -0 becoming +0; beyond the
       format's range it is ±inf (also under ``"rz"``, as on the GPUs), or for a format
       without infinities its overflow rule.

    Special values: a NaN operand, ``0 * inf`` or infinities of both signs in one block
    give the accumulator's NaN (the all-ones NaN 0x7FFFFFFF for f32, as the tensor cores
    write it); otherwise an infinity gives that infinity.

    Args:
      a: (..., m, k) array of ``a_format``'s storage (``jaxwarp.to_format`` makes it):
        float16 for f16, float8_e4m3fn for e4m3, uint8 / uint16 codes for a
        code-stored or user-defined format.
      b: (..., k, n) array of ``b_format``'s storage.
      c: (..., m, n) array of the accumulator's storage. Leading batch dims broadcast.
      a_format: static format of A: a user-defined one, or one of ``"f32"``,
        ``"bf16"``, ``"f16"``, ``"e4m3"``, ``"e5m2"``, ``"e3m2"``, ``"e2m3"``,
        ``"e2m1"``, ``"ue4m3"``.
      b_format: static format of B (default: ``a_format``).
      datapath: static, a :class:`FusedDot` (``jaxwarp.FusedDot()``: F = 25, blocks
        of 32, toward zero into f32, as sm_100a ``tcgen05`` and sm_120 fp8).

    Returns:
      (..., m, n) array of the accumulator's storage dtype.

    Raises:
      TypeError: an array of the wrong dtype, a traced static argument.
      ValueError: an unknown format, shapes that do not chain (the message names them).

    Example:
        >>> p4 = jaxwarp.define_format("binary8p4", exponent_bits=4, mantissa_bits=3,
        ...                            specials="p3109")
        >>> a = jaxwarp.to_format(jnp.full((2, 4), 1.5, jnp.float32), p4)
        >>> b = jaxwarp.to_format(jnp.full((4, 3), 2.0**-9, jnp.float32), p4)
        >>> c = jnp.ones((2, 3), jnp.float32)
        >>> dp = jaxwarp.FusedDot(alignment_bits=8, block=4, accumulator="f32")
        >>> float(jaxwarp.fused_dot(a, b, c, a_format=p4, datapath=dp)[0, 0])  # all cut
        1.0
        >>> float(jaxwarp.fused_dot(a, b, c, a_format=p4,
        ...                         datapath=dp.replace(alignment_bits=10))[0, 0])
        1.01171875
    """
    a_fmt = _format(a_format, "a_format")
    b_fmt = a_fmt if b_format is None else _format(b_format, "b_format")
    if not isinstance(datapath, FusedDot):
        raise TypeError(f"datapath must be a jaxwarp.FusedDot, got {type(datapath).__name__}")
    acc = _format(datapath.accumulator, "datapath.accumulator")
    a = _operand_arg(a, "a", a_fmt)
    b = _operand_arg(b, "b", b_fmt)
    c = _operand_arg(c, "c", acc)
    if a.shape[-1] != b.shape[-2] or c.shape[-2:] != (a.shape[-2], b.shape[-1]):
        raise ValueError(f"shapes do not chain: a {a.shape} (..., m, k), b {b.shape} "
                         f"(..., k, n), c {c.shape} (..., m, n)")
    try:
        jnp.broadcast_shapes(a.shape[:-2], b.shape[:-2], c.shape[:-2])
    except ValueError as e:
        raise ValueError(f"batch dims of a {a.shape}, b {b.shape} and c {c.shape} do not "
                         f"broadcast") from e
    return _fused_dot(a, b, c, a_fmt, b_fmt, datapath)
