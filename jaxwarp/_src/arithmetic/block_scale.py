"""Block-scaled tensor-core arithmetic (microscaling), on logical matrices.

``mma.sync.aligned ... .block_scale`` (sm_120a) and ``tcgen05.mma ... .block_scale``
(sm_100a) compute ``D = (A * SA) @ (B * SB) + C`` in fp32, where every run of ``block``
elements of A's row i along k shares one scale ``SA[i, k // block]`` and likewise for B's
columns. The kinds (``isa.BLOCK_SCALE_ROWS``): ``kind::mxf8f6f4`` (k 32, A and B each
e4m3, e5m2, e3m2, e2m3 or e2m1, block 32, ue8m0 scales), ``kind::mxf4`` (k 64, e2m1,
block 32, ue8m0) and ``kind::mxf4nvf4`` (k 64, e2m1, block 32 ue8m0, block 16 ue8m0 or
ue4m3). C and D are f32.

The arithmetic is MMA-Sim 2.1.1's (Xie et al., arXiv 2511.10909), a published model of
the Blackwell tensor cores validated by its authors on the GPUs; it is not checked
against hardware here. One :class:`BlockScaleDatapath` describes it, in two forms:

* ``terms="product"`` (kind::mxf8f6f4, :data:`PRODUCT_TERMS`: F = 25, chunks of 32,
  e_zero = -133): every product ``a_k * b_k * sa * sb`` is one term, exact, with the
  alignment exponent ``e_a + e_b + e_sa + e_sb`` (a subnormal operand counts with its
  format's minimum normal exponent); C is one more term at its exponent, at least
  -126; a zero term has exponent ``e_zero``. E is the largest exponent; every term is
  truncated toward zero to a multiple of ``2**(E - F)`` and the terms are added exactly.
* ``terms="group"`` (kind::mxf4 / mxf4nvf4, :data:`GROUP_TERMS`: F = 35, groups of 16,
  chunks of 64, e_zero = -139): the products of each run of ``group`` k are first added
  exactly; the group sum times its block's two scales is one term whose exponent is
  the scales' ``e_sa + e_sb`` alone (the group sum's own size is not looked at), or
  ``e_zero`` when every product of the group is zero or a scale is zero; C and the
  truncation as above.

The exact sum is truncated to fp32 (toward zero, subnormals down to 2**-149, inf above
its range); -0 becomes +0. A k longer than one chunk (``chunk``) or one instruction is
a chain: the fp32 result of one chunk is the C of the next. Scales: ue8m0 is
``2**(code - 127)``, code 0xFF NaN; ue4m3 is an e4m3 whose sign bit is ignored (0x7F
NaN, 0 zero). Special values: a NaN scale, a NaN operand, ``0 * inf`` or infinities of
both signs give NaN (``nan_f32``, 0x7FFFFFFF); otherwise an infinite operand or C gives
that infinity.

This is the logical form. The register form of mma.sync (``scale-a-data`` /
``scale-b-data`` registers with their ``byte-id`` / ``thread-id`` selectors) is
:mod:`jaxwarp._src.instructions.mma_sync_block_scale`, tcgen05's descriptor form
:mod:`jaxwarp._src.instructions.tcgen05_block_scale`; both reduce to it.

Example:
    >>> a = jnp.full((16, 32), 0x38, jnp.uint8)  # e4m3 1.0
    >>> b = jnp.full((32, 8), 0x38, jnp.uint8)
    >>> sa = jnp.full((16, 1), 127 + 3, jnp.uint8)  # 2**3
    >>> sb = jnp.full((1, 8), 127 - 1, jnp.uint8)  # 2**-1
    >>> d = jaxwarp.mma_block_scale_logical(a, b, jnp.zeros((16, 8), jnp.float32), sa, sb,
    ...                                     a_format="e4m3")
    >>> float(d[0, 0])  # 32 products of 1 * 1 * 8 * 0.5
    128.0
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxwarp._src import checks
from jaxwarp._src.arithmetic.datapath_blocks import (
    Block,
    block_fast,
    f32_bits,
)
from jaxwarp._src.arithmetic.datapath_checks import check_code_bits
from jaxwarp._src.catalogue import isa
from jaxwarp._src.catalogue.arch import Datapath, parse_target
from jaxwarp._src.numerics import bitops, softfloat
from jaxwarp._src.numerics.formats import ALIASES, FORMATS

INSTRUCTIONS = isa.BLOCK_SCALE_INSTRUCTIONS
KINDS = tuple(dict.fromkeys(r.kind for r in isa.BLOCK_SCALE_ROWS))
SCALE_TYPES = isa.BLOCK_SCALE_TYPES
TERMS = ("product", "group")


# --------------------------------------------------------------------------------------
# The datapath as data.


@dataclasses.dataclass(frozen=True)
class BlockScaleDatapath:
    """Arithmetic of one block-scaled MMA kind, its parameters as data.

    ``D = (A * SA) @ (B * SB) + C`` in fp32, as MMA-Sim 2.1.1 models it: the terms of one
    fused sum (below), and C as one more term at its exponent (at least -126), are each
    truncated toward zero to a multiple of ``2**(E - F)``, E the largest term exponent,
    then added exactly; the sum is truncated to fp32 (-0 becomes +0). A k longer than
    ``chunk`` is a chain: one chunk's fp32 result is the next one's C. The kinds' own:
    kind::mxf8f6f4 ``BlockScaleDatapath("product", F=25, group=1, chunk=32,
    e_zero=-133)``, kind::mxf4 and mxf4nvf4 ``BlockScaleDatapath("group", F=35,
    group=16, chunk=64, e_zero=-139)``; :func:`jaxwarp.mma_block_scale_logical` takes
    another as ``datapath=``. The API reference's "Block-scaled MMA (microscaling)"
    section (docs/api/tensorcore.md) states the whole arithmetic.

    Attributes:
      terms: ``"product"``: every scaled product is a term at its own exponent plus the
        scales' (needs a chunk inside one scale block); ``"group"``: products summed
        exactly in groups of ``group`` k, each group a term at its scales' exponent
        (e2m1 operands).
      F: alignment bits: terms are truncated to multiples of ``2**(E - F)``.
      group: products per group (``terms="group"``; 1 with ``"product"``).
      chunk: products per fused sum; a longer instruction k is a chain of chunks.
      e_zero: the exponent of a zero term (a zero product or group, a zero C).
      nan_f32: bits of a NaN result.

    Example:
        >>> mxf4 = jaxwarp.BlockScaleDatapath("group", F=35, group=16, chunk=64,
        ...                                   e_zero=-139)
        >>> mxf4.replace(group=8).group, mxf4.nan_f32 == 0x7FFFFFFF
        (8, True)
    """

    terms: str
    F: int
    group: int
    chunk: int
    e_zero: int
    nan_f32: int = 0x7FFFFFFF

    def __post_init__(self):
        checks.static_choice(self.terms, "BlockScaleDatapath.terms", TERMS)
        for name in ("F", "group", "chunk", "e_zero", "nan_f32"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool):
                raise TypeError(f"BlockScaleDatapath.{name} must be an int, got {v!r}")
        hi_f = 28 if self.terms == "product" else 40
        if not 3 <= self.F <= hi_f:
            raise ValueError(f"BlockScaleDatapath.F must be in [3, {hi_f}] with "
                             f"terms={self.terms!r}, got {self.F}")
        if self.terms == "product" and (self.group != 1
                                        or self.chunk << (self.F + 2) > 1 << 32):
            raise ValueError(f"BlockScaleDatapath with terms='product' needs group == 1 and "
                             f"chunk * 2**(F + 2) <= 2**32 (the exact sum in 32 bits), got "
                             f"group={self.group}, chunk={self.chunk}, F={self.F}")
        if not 1 <= self.group <= 64 or not 1 <= self.chunk <= 256 or self.chunk % self.group:
            raise ValueError(f"BlockScaleDatapath.chunk must be a multiple of group, group in "
                             f"[1, 64], chunk in [1, 256]; got group={self.group}, "
                             f"chunk={self.chunk}")
        if not -1000 <= self.e_zero <= 1000:
            raise ValueError(f"BlockScaleDatapath.e_zero must be in [-1000, 1000], got "
                             f"{self.e_zero}")
        if ((self.nan_f32 >> 23) & 0xFF) != 0xFF or not self.nan_f32 & 0x7FFFFF or not (
                0 <= self.nan_f32 < 1 << 32):
            raise ValueError(f"BlockScaleDatapath.nan_f32 must be the bits of an fp32 NaN, "
                             f"got {self.nan_f32!r}")

    def replace(self, **kw) -> BlockScaleDatapath:
        """A copy with some fields changed."""
        return dataclasses.replace(self, **kw)


#: MMA-Sim's ST-FDPA (kind::mxf8f6f4 of mma.sync on sm_120a and tcgen05 on sm_100a).
PRODUCT_TERMS = BlockScaleDatapath("product", F=25, group=1, chunk=32, e_zero=-133)
#: MMA-Sim's GST-FDPA (kind::mxf4 and kind::mxf4nvf4).
GROUP_TERMS = BlockScaleDatapath("group", F=35, group=16, chunk=64, e_zero=-139)
#: kind -> its datapath (the same on sm_120a and sm_100a in MMA-Sim 2.1.1).
DATAPATHS = {"mxf8f6f4": PRODUCT_TERMS, "mxf4": GROUP_TERMS, "mxf4nvf4": GROUP_TERMS}


# --------------------------------------------------------------------------------------
# Element and scale formats.

def _code_bits(fmt: str) -> int:
    return FORMATS[fmt].code_bits


@functools.cache
def _tables(fmt: str) -> tuple[np.ndarray, np.ndarray]:
    """code -> (float16 value, alignment exponent + 127) of an element format: the
    exponent of a normal value, the minimum normal one of a subnormal, -1000 for zero
    (its products count for nothing), 255 for inf and NaN (e4m3 / e5m2)."""
    f = FORMATS[fmt]
    codes = np.arange(1 << f.code_bits).astype(np.uint8)
    vals = codes.view(f.numpy_dtype).astype(np.float16)  # exact (ml_dtypes' decoding)
    with np.errstate(invalid="ignore"):
        finite = np.isfinite(vals)
        ex = np.frexp(np.where(finite, vals, 1).astype(np.float64))[1] - 1
    align = np.where(finite, np.maximum(ex, softfloat.emin(fmt)) + 127, 255)
    align = np.where(vals == 0, -1000, align)
    return vals, align.astype(np.int16)


class _Scale(NamedTuple):
    """Decoded scales: value ``sig * 2**lsb``, alignment exponent ``exp``, NaN."""

    sig: jax.Array
    lsb: jax.Array
    exp: jax.Array
    nan: jax.Array


def _decode_scale(codes: jax.Array, scale_format: str) -> _Scale:
    """ue8m0 (``2**(code - 127)``, 0xFF NaN) or ue4m3 (e4m3 without its sign bit: bit 7
    is ignored, 0x7F NaN) codes; a subnormal ue4m3 aligns at e4m3's minimum normal
    exponent -6 (``softfloat.decode`` with ``sub_emin``)."""
    _, lsb, sig, lead, _, nan = softfloat.decode(codes.astype(jnp.uint32), scale_format, True)
    return _Scale(sig.astype(jnp.int32), lsb, lead, nan)


# --------------------------------------------------------------------------------------
# One chunk of products.

_F32_EMIN = softfloat.emin("f32")
_W = 24  # bits of the low limb of a two-limb exact sum
_MASK = (1 << _W) - 1


def _c_exp(t: softfloat.Term, e_zero: int) -> jax.Array:
    """C's alignment exponent: its leading bit's, at least fp32's -126; e_zero if 0."""
    return jnp.where(t.sig != 0, jnp.maximum(t.lead, _F32_EMIN), e_zero)


def _product_chunk(a, b, ks, c_bits, sa: _Scale, sb: _Scale, bs: BlockScaleDatapath,
                   emin: int):
    """``terms="product"``: one chunk whose k share one scale of A's row and of B's column.

    The scales' exponents ``s = e_sa + e_sb`` are common to every product, so the chunk
    is the unscaled block FMA of ``datapath`` (``block_fast``) with C and e_zero moved
    by ``2**-s``, and its exact sum moved back by ``2**s`` before the rounding to fp32.
    """
    (av, aal), (bv, bal) = a, b
    sigma = sa.exp + sb.exp
    t = softfloat.term(c_bits, "f32")
    lead = _c_exp(t, bs.e_zero)
    nz = jnp.matmul((av[..., ks[0]:ks[-1] + 1] != 0).astype(jnp.int32),
                    (bv[..., ks[0]:ks[-1] + 1, :] != 0).astype(jnp.int32),
                    preferred_element_type=jnp.int32)
    lead = jnp.where(nz < len(ks), jnp.maximum(lead, bs.e_zero), lead)  # a zero product
    acc = t._replace(lsb=t.lsb - sigma, lead=lead - sigma)
    dp = Datapath(F=bs.F, sub_exp="emin", nan_f32=bs.nan_f32)
    r = block_fast((av, aal), (bv, bal), ks, acc, dp, fmts=("", ""), emin=emin)
    return f32_bits(r._replace(g=r.g + sigma, nan=r.nan | sa.nan | sb.nan), dp)


def _limbs(neg, mag, s):
    """``(-1)**neg * floor(mag * 2**s)`` (int32 ``mag`` below 2**25, ``s`` at most 33) as
    ``hi * 2**_W + lo`` with ``0 <= lo < 2**_W``."""
    hi = softfloat.shift(mag, s - _W)
    lo = jnp.where(s >= _W, 0, softfloat.shift(mag, s) & _MASK)
    return (jnp.where(neg, -hi - (lo != 0).astype(jnp.int32), hi),
            jnp.where(neg, (-lo) & _MASK, lo))


def _group_chunk(ai, bi, k0: int, k1: int, c_bits, sa: _Scale, sb: _Scale,
                 bs: BlockScaleDatapath, block: int, lsb_ab: int):
    """``terms="group"``: the chunk k0 <= k < k1 of integer operands (values times
    ``2**-lsb_min``), each group's exact sum times its block's scales one term."""
    t = softfloat.term(c_bits, "f32")
    exps, terms = [_c_exp(t, bs.e_zero)], []
    nan = t.nan
    for g0 in range(k0, k1, bs.group):
        xa, xb = ai[..., g0:g0 + bs.group], bi[..., g0:g0 + bs.group, :]
        p = jnp.matmul(xa, xb, preferred_element_type=jnp.int32)
        nz = jnp.matmul((xa != 0).astype(jnp.int32), (xb != 0).astype(jnp.int32),
                        preferred_element_type=jnp.int32)
        j = g0 // block
        s_a = _Scale(*(x[..., :, j:j + 1] for x in sa))
        s_b = _Scale(*(x[..., j:j + 1, :] for x in sb))
        n = p * s_a.sig * s_b.sig  # |n| < 2**19: 16 products of at most 36, scales < 16
        zero = (nz == 0) | (s_a.sig == 0) | (s_b.sig == 0)
        exps.append(jnp.where(zero, bs.e_zero, s_a.exp + s_b.exp))
        terms.append((n, lsb_ab + s_a.lsb + s_b.lsb))
        nan = nan | s_a.nan | s_b.nan
    E = functools.reduce(jnp.maximum, exps)
    g = E - bs.F
    parts = [_limbs(n < 0, jnp.abs(n), lsb - g) for n, lsb in terms]
    parts.append(_limbs(t.neg, t.sig, t.lsb - g))
    lo = sum(x[1] for x in parts)
    hi = sum(x[0] for x in parts) + (lo >> _W)
    lo = lo & _MASK
    neg = hi < 0
    mh = jnp.where(neg, -hi - (lo != 0).astype(jnp.int32), hi)
    ml = jnp.where(neg, (-lo) & _MASK, lo)
    # The top 32 bits of the magnitude: truncating below them changes no fp32 bit of a
    # result truncated toward zero.
    drop = jnp.maximum(softfloat.bitlen(mh) + _W - 32, 0)
    mag = (mh.astype(jnp.uint32) << (_W - drop).astype(jnp.uint32)) | (
        ml.astype(jnp.uint32) >> drop.astype(jnp.uint32))
    r = Block(neg, mag, g + drop, nan, t.pinf, t.ninf, jnp.bool_(False))
    return f32_bits(r, Datapath(nan_f32=bs.nan_f32))


# --------------------------------------------------------------------------------------
# Instructions and chains.


class BlockScaleCfg(NamedTuple):
    """Static configuration (hashable: a jit static argument)."""

    a_format: str
    b_format: str
    scale_format: str
    block: int
    ik: int
    dp: BlockScaleDatapath


def issue_instruction(a, b, sa, sb, c_bits, cfg: BlockScaleCfg):
    """One instruction (k = cfg.ik) from C bits: its chunks chained."""
    dp = cfg.dp
    L = min(dp.chunk, cfg.ik)
    sa, sb = _decode_scale(sa, cfg.scale_format), _decode_scale(sb, cfg.scale_format)
    for k0 in range(0, cfg.ik, L):
        if dp.terms == "product":
            j = k0 // cfg.block
            s_a = _Scale(*(x[..., :, j:j + 1] for x in sa))
            s_b = _Scale(*(x[..., j:j + 1, :] for x in sb))
            c_bits = _product_chunk(a, b, list(range(k0, k0 + L)), c_bits, s_a, s_b, dp,
                                    softfloat.emin(cfg.a_format) + softfloat.emin(cfg.b_format))
        else:
            c_bits = _group_chunk(a, b, k0, k0 + L, c_bits, sa, sb, dp, cfg.block,
                                  softfloat.lsb_min(cfg.a_format) + softfloat.lsb_min(cfg.b_format))
    return c_bits


def decode_operands(codes: jax.Array, fmt: str, dp: BlockScaleDatapath):
    """Codes -> what the chunks read: (float16 values, alignments) for product terms,
    int32 ``value * 2**-lsb_min`` for group terms."""
    vals, align = _tables(fmt)
    idx = codes.astype(jnp.int32) & ((1 << _code_bits(fmt)) - 1)
    if dp.terms == "group":
        ints = (vals.astype(np.float64) * 2.0 ** -softfloat.lsb_min(fmt)).astype(np.int32)
        return jnp.asarray(ints)[idx]
    return jnp.asarray(vals)[idx], jnp.asarray(align)[idx]


@functools.partial(jax.jit, static_argnums=(5,))
def _compute(a, b, c, scale_a, scale_b, cfg: BlockScaleCfg):
    a = decode_operands(a, cfg.a_format, cfg.dp)
    b = decode_operands(b, cfg.b_format, cfg.dp)
    ik, nb = cfg.ik, cfg.ik // cfg.block
    k = scale_a.shape[-1] * cfg.block

    def part(i):  # operands of instruction i
        return (jax.tree.map(lambda x: x[..., i * ik:(i + 1) * ik], a),
                jax.tree.map(lambda x: x[..., i * ik:(i + 1) * ik, :], b),
                scale_a[..., i * nb:(i + 1) * nb], scale_b[..., i * nb:(i + 1) * nb, :])

    bits = issue_instruction(*part(0), bitops.to_u32(c), cfg)
    n = k // ik
    if n > 1:  # a chain: D of one instruction is C of the next (scanned, not unrolled)
        def rows(x, w):  # (..., r, K) -> (n - 1, ..., r, w), instructions 1 .. n-1
            x = x[..., w:]
            return jnp.moveaxis(x.reshape(*x.shape[:-1], n - 1, w), -2, 0)

        def cols(x, w):  # (..., K, c) -> (n - 1, ..., w, c)
            x = x[..., w:, :]
            return jnp.moveaxis(x.reshape(*x.shape[:-2], n - 1, w, x.shape[-1]), -3, 0)

        xs = (jax.tree.map(lambda x: rows(x, ik), a), jax.tree.map(lambda x: cols(x, ik), b),
              rows(scale_a, nb), cols(scale_b, nb))
        bits, _ = lax.scan(lambda d, x: (issue_instruction(*x, d, cfg), None), bits, xs)
    return lax.bitcast_convert_type(bits, jnp.float32)


# --------------------------------------------------------------------------------------
# Public entry points.


def block_scale_row(instruction: str, kind: str) -> isa.BlockScaleRow:
    checks.static_choice(instruction, "instruction", INSTRUCTIONS)
    rows = isa.block_scale_rows(instruction)
    checks.static_choice(kind, "kind", tuple(r.kind for r in rows))
    return next(r for r in rows if r.kind == kind)


def _code_array(x: jax.Array, name: str, fmt: str) -> jax.Array:
    """uint8 codes of ``fmt``, or (e4m3 / e5m2) its float8 dtype, as uint8 codes."""
    allowed = [np.dtype(np.uint8)]
    if fmt in isa.FP8_TYPES:
        allowed.append(np.dtype(FORMATS[fmt].storage_dtype))
    if x.dtype not in allowed:
        raise TypeError(f"{name} must hold {fmt} codes: dtype "
                        f"{' or '.join(str(d) for d in allowed)}, got {x.dtype}")
    if x.dtype != np.uint8:
        x = lax.bitcast_convert_type(x, jnp.uint8)
    if x.ndim < 2:
        raise ValueError(f"{name} must be at least 2-D (..., rows, cols), got shape {x.shape}")
    return x


def mma_block_scale_logical(a: Any, b: Any, c: Any, scale_a: Any, scale_b: Any, *,
                            a_format: Any, b_format: Any = None, kind: str = "mxf8f6f4",
                            scale_format: Any = "ue8m0", block: int = 32,
                            instruction: str = "mma_sync", arch: Any = None,
                            datapath: BlockScaleDatapath | None = None) -> jax.Array:
    """``D = (A * SA) @ (B * SB) + C`` of block-scaled MMA instructions, on logical matrices.

    PTX ``mma.sync.aligned.m16n8k{32,64}.row.col.kind::{kind}.block_scale.scale_vec::{n}X
    .f32.{a}.{b}.f32.{scale}`` (sm_120a) or ``tcgen05.mma.cta_group::1.kind::{kind}
    .block_scale`` (sm_100a), computed as MMA-Sim 2.1.1 models them (the summary:
    :class:`jaxwarp.BlockScaleDatapath`; in full: docs/api/tensorcore.md, "Block-scaled
    MMA (microscaling)"). The register form of mma.sync, with its
    scale selectors (``byte-id``, ``thread-id``), is ``jaxwarp.mma_block_scale``.

    Args:
      a: (..., M, K) uint8 codes of ``a_format``, one element per entry in its low bits
        (e2m1 in bits 3:0, e2m3 / e3m2 in bits 5:0; higher bits set: ``ValueError``,
        reported by ``jaxwarp.checked`` when traced, else ignored), or for
        e4m3 / e5m2 also ``float8_e4m3fn`` / ``float8_e5m2`` values. M is 16 (mma.sync)
        or 128 (tcgen05); K a multiple of the instruction's k (32 for mxf8f6f4, 64 for
        mxf4 / mxf4nvf4): a longer K is a chain of instructions, the D of one the C of
        the next.
      b: (..., K, N) likewise; N is 8 (mma.sync) or 8..256 in steps of 8 (tcgen05).
      c: (..., M, N) float32.
      scale_a: (..., M, K / block) uint8 scale codes: ``scale_a[i, j]`` scales A's row i
        at ``j * block <= k < (j + 1) * block``.
      scale_b: (..., K / block, N) uint8 scale codes, for B's columns likewise.
        Leading batch axes of a, b, c and the scales broadcast.
      a_format, b_format: static element formats (b_format defaults to a_format):
        mxf8f6f4: any of e4m3, e5m2, e3m2, e2m3, e2m1 (A and B may differ);
        mxf4 / mxf4nvf4: e2m1.
      kind: ``"mxf8f6f4"``, ``"mxf4"`` or ``"mxf4nvf4"``.
      scale_format: ``"ue8m0"`` (``2**(code - 127)``, 0xFF NaN) or ``"ue4m3"`` (an e4m3
        whose sign bit is ignored; mxf4nvf4 with block 16 only).
      block: scale block size along k: 32, or 16 (mxf4nvf4).
      instruction: ``"mma_sync"`` or ``"tcgen05"``.
      arch: the target: ``"sm_120a"`` / ``"sm_121a"`` for mma_sync, ``"sm_100a"`` /
        ``"sm_101a"`` / ``"sm_103a"`` for tcgen05 (default: the first).
      datapath: a :class:`BlockScaleDatapath` instead of the kind's (to explore models).

    Returns:
      (..., M, N) float32 D (NaN as 0x7FFFFFFF).

    Raises:
      ValueError / TypeError: a bad kind, format, block, scale type, combination of
        them, target, dtype or shape (the message names the argument and lists what is
        allowed), eagerly and under ``jax.jit``.

    Example:
      >>> a = jnp.full((16, 64), 0x2, jnp.uint8)  # e2m1 1.0
      >>> b = jnp.full((64, 8), 0x1, jnp.uint8)  # e2m1 0.5
      >>> sa = jnp.full((16, 4), 0x38, jnp.uint8)  # ue4m3 1.0
      >>> sb = jnp.array([[0x40], [0x38], [0x38], [0x30]], jnp.uint8) * jnp.ones(
      ...     (4, 8), jnp.uint8)  # 2.0, 1.0, 1.0, 0.5
      >>> d = jaxwarp.mma_block_scale_logical(
      ...     a, b, jnp.ones((16, 8), jnp.float32), sa, sb, a_format="e2m1",
      ...     kind="mxf4nvf4", scale_format="ue4m3", block=16)
      >>> float(d[0, 0])  # 1 + 16 * 0.5 * (2 + 1 + 1 + 0.5)
      37.0
    """
    a, b, c, scale_a, scale_b = checks.array_args(a=a, b=b, c=c, scale_a=scale_a,
                                                  scale_b=scale_b)
    row = block_scale_row(instruction, kind)
    b_format = a_format if b_format is None else b_format
    a_format = checks.format_name(a_format, "a_format", row.a_formats, ALIASES)
    b_format = checks.format_name(b_format, "b_format", row.a_formats, ALIASES)
    scale_format = checks.format_name(scale_format, "scale_format", SCALE_TYPES, ALIASES)
    block = checks.static_int(block, "block")
    if (block, scale_format) not in row.scales:
        raise ValueError(f"kind::{kind} of {instruction} has no block={block} with "
                         f"scale_format={scale_format!r}; allowed (block, scale_format): "
                         f"{row.scales}")
    if arch is None:
        arch = row.targets[0]
    target = parse_target(arch)
    if target.name not in row.targets:
        raise ValueError(f"arch={arch!r}: block-scaled {instruction} is on {row.targets}")
    if datapath is None:
        datapath = DATAPATHS[kind]
    elif not isinstance(datapath, BlockScaleDatapath):
        raise TypeError(f"datapath must be a BlockScaleDatapath or None, got "
                        f"{type(datapath).__name__}")
    _check_datapath(datapath, a_format, b_format, scale_format, block, row.k)
    a = _code_array(a, "a", a_format)
    b = _code_array(b, "b", b_format)
    check_code_bits(a, "a", a_format, "low", "mma_block_scale_logical")
    check_code_bits(b, "b", b_format, "low", "mma_block_scale_logical")
    m, k = a.shape[-2:]
    k2, n = b.shape[-2:]
    shapes = {s[:2] for s in row.shapes}
    if (m, n) not in shapes:
        raise ValueError(f"a (..., M, K) = {a.shape} and b (..., K, N) = {b.shape}: "
                         f"{instruction} kind::{kind} has (M, N) in "
                         f"{_shapes_text(row)}")
    if k2 != k or k == 0 or k % row.k:
        raise ValueError(f"a is (..., M, K) = {a.shape} and b (..., K, N) = {b.shape}: K "
                         f"must be the same positive multiple of the instruction's k "
                         f"{row.k}")
    if c.dtype != jnp.float32:
        raise TypeError(f"c must have dtype float32 (f32), got {c.dtype}")
    if c.ndim < 2 or c.shape[-2:] != (m, n):
        raise ValueError(f"c must have shape (..., {m}, {n}), got {c.shape}")
    for name, x, want in (("scale_a", scale_a, (m, k // block)),
                          ("scale_b", scale_b, (k // block, n))):
        if x.dtype != jnp.uint8:
            raise TypeError(f"{name} must hold {scale_format} codes as uint8, got {x.dtype}")
        if x.ndim < 2 or x.shape[-2:] != want:
            raise ValueError(f"{name} must have shape (..., {want[0]}, {want[1]}) (K / block "
                             f"= {k} / {block}), got {x.shape}")
    try:
        np.broadcast_shapes(*(x.shape[:-2] for x in (a, b, c, scale_a, scale_b)))
    except ValueError as e:
        raise ValueError(f"batch axes of a {a.shape}, b {b.shape}, c {c.shape}, scale_a "
                         f"{scale_a.shape}, scale_b {scale_b.shape} do not broadcast") from e
    cfg = BlockScaleCfg(a_format, b_format, scale_format, block, row.k, datapath)
    return _compute(a, b, c, scale_a, scale_b, cfg)


def _shapes_text(row: isa.BlockScaleRow) -> str:
    ms = sorted({s[0] for s in row.shapes})
    ns = sorted({s[1] for s in row.shapes})
    n_text = f"{ns[0]}" if len(ns) == 1 else f"{ns[0]}..{ns[-1]} step {ns[1] - ns[0]}"
    return f"M = {ms[0]}, N = {n_text}"


def _check_datapath(dp: BlockScaleDatapath, a_format: str, b_format: str, scale_format: str,
                    block: int, ik: int) -> None:
    L = min(dp.chunk, ik)
    if dp.terms == "product" and scale_format != "ue8m0":
        raise ValueError(f"datapath with terms='product' is modelled for power-of-two "
                         f"(ue8m0) scales, got scale_format={scale_format!r}")
    if ik % L:
        raise ValueError(f"datapath.chunk={dp.chunk} does not divide the instruction's k "
                         f"{ik}")
    if dp.terms == "product" and block % L:
        raise ValueError(f"datapath with terms='product' needs each chunk inside one scale "
                         f"block: chunk {L} does not divide block={block}")
    if dp.terms == "group":
        if a_format != "e2m1" or b_format != "e2m1":
            raise ValueError(f"datapath with terms='group' is modelled for e2m1 operands "
                             f"(exact group sums in fp32), got {a_format}, {b_format}")
        if block % dp.group:
            raise ValueError(f"datapath.group={dp.group} does not divide block={block}")


# --------------------------------------------------------------------------------------
# Reference-model files.


def parse_qualifier(family: str, qualifier: str) -> dict[str, Any]:
    """MMA-Sim's qualifier of a block-scaled configuration -> the keyword arguments of
    :func:`mma_block_scale_logical` and the shape.

    ``family``: ``"mma_block_scale"`` (``m16n8k32.kind::mxf8f6f4.block32.f32.e4m3.e4m3
    .f32.ue8m0``: D, A, B, C, scale types) or ``"tcgen05_block_scale"``
    (``m128n8k64.kind::mxf4nvf4.block16.f32.e2m1.e2m1.ue4m3``: D, A, B, scale types).

    Example:
        >>> q = parse_qualifier("tcgen05_block_scale",
        ...                     "m128n16k64.kind::mxf4nvf4.block16.f32.e2m1.e2m1.ue4m3")
        >>> q["instruction"], q["kind"], q["block"], q["scale_format"], q["shape"]
        ('tcgen05', 'mxf4nvf4', 16, 'ue4m3', (128, 16, 64))
    """
    families = {"mma_block_scale": ("mma_sync", 8), "tcgen05_block_scale": ("tcgen05", 7)}
    checks.static_choice(family, "family", tuple(families))
    instruction, nparts = families[family]
    parts = qualifier.split(".") if isinstance(qualifier, str) else []
    shape = isa.parse_shape(parts[0]) if parts else None
    if (len(parts) != nparts or shape is None or not parts[1].startswith("kind::")
            or not parts[2].startswith("block") or parts[3] != "f32"
            or (nparts == 8 and parts[6] != "f32")):
        raise ValueError(f"qualifier={qualifier!r} is not a {family} qualifier such as "
                         f"'m16n8k32.kind::mxf8f6f4.block32.f32.e4m3.e4m3.f32.ue8m0' "
                         f"(mma_block_scale) or 'm128n8k64.kind::mxf4.block32.f32.e2m1.e2m1"
                         f".ue8m0' (tcgen05_block_scale)")
    kind = parts[1].removeprefix("kind::")
    row = block_scale_row(instruction, kind)
    if shape not in row.shapes:
        raise ValueError(f"qualifier={qualifier!r}: {instruction} kind::{kind} has no shape "
                         f"{isa.shape_name(shape)}")
    for what, fmt in (("A", parts[4]), ("B", parts[5])):
        if fmt not in row.a_formats:
            raise ValueError(f"qualifier={qualifier!r}: {what} type {fmt!r} is not a type of "
                             f"{instruction} kind::{kind}; allowed: {row.a_formats}")
    block, scale = parts[2][5:], parts[-1]
    pairs = ", ".join(f"block{b}.{s}" for b, s in row.scales)
    if not block.isdigit() or (int(block), scale) not in row.scales:
        raise ValueError(f"qualifier={qualifier!r}: {instruction} kind::{kind} has no "
                         f"{parts[2]} with {scale} scales; allowed (block, scale type): "
                         f"{pairs}")
    return dict(instruction=instruction, kind=kind, block=int(block),
                a_format=parts[4], b_format=parts[5], scale_format=scale, shape=shape)


def _unpack(x: jax.Array, fmt: str, packed: bool, axis: int) -> jax.Array:
    """Operand bytes of a reference file -> one code per entry: two e2m1 per byte along
    k (``packed``, the even k in the high nibble), or one element per byte (e2m1 in
    bits 5:2, e2m3 / e3m2 in bits 5:0, fp8 the whole byte)."""
    if packed:
        x = jnp.stack([x >> 4, x & 0xF], axis=axis)  # (..., K/2, 2, ...) along k
        shape = list(x.shape)
        ax = axis % x.ndim
        return x.reshape(shape[:ax - 1] + [shape[ax - 1] * 2] + shape[ax + 1:])
    return FORMATS[fmt].code_in_byte(x)


def from_golden(family: str, qualifier: str, A: Any, B: Any, C: Any, SA: Any,
                SB: Any) -> jax.Array:
    """The model's D bits for one configuration of a reference-model file (raw bit
    arrays as the files hold them, leading trial axis T).

    Args:
      family: ``"mma_block_scale"`` or ``"tcgen05_block_scale"``.
      qualifier: MMA-Sim's qualifier (see :func:`parse_qualifier`).
      A: (T, M, K) uint8, or (T, M, K/2) for the packed kinds (two e2m1 per byte along
        k, the even k in the high nibble); fp6 / fp4 of ``kind::mxf8f6f4`` one per byte
        (e2m3 / e3m2 in bits 5:0, e2m1 in bits 5:2).
      B: (T, K, N) uint8, or (T, K/2, N) packed likewise.
      C: (T, M, N) uint32 fp32 bits.
      SA: (T, M, K/block) uint8 scale codes. SB: (T, K/block, N) uint8.

    Returns:
      (T, M, N) uint32 bits of D.

    Example:
        >>> A = np.full((1, 16, 32), 0x22, np.uint8)  # e2m1 -> 1.0 at k even and odd
        >>> B = np.full((1, 32, 8), 0x22, np.uint8)
        >>> C = np.zeros((1, 16, 8), np.uint32)
        >>> SA = np.full((1, 16, 2), 127, np.uint8); SB = np.full((1, 2, 8), 127, np.uint8)
        >>> d = from_golden("mma_block_scale",
        ...                 "m16n8k64.kind::mxf4.block32.f32.e2m1.e2m1.f32.ue8m0",
        ...                 A, B, C, SA, SB)
        >>> hex(int(d[0, 0, 0]))  # 64.0
        '0x42800000'
    """
    q = parse_qualifier(family, qualifier)
    packed = block_scale_row(q["instruction"], q["kind"]).packed
    A, B, C, SA, SB = (jnp.asarray(x) for x in (A, B, C, SA, SB))
    a = _unpack(A.astype(jnp.uint8), q["a_format"], packed, -1)
    b = _unpack(B.astype(jnp.uint8), q["b_format"], packed, -2)
    c = lax.bitcast_convert_type(C.astype(jnp.uint32), jnp.float32)
    d = mma_block_scale_logical(a, b, c, SA.astype(jnp.uint8), SB.astype(jnp.uint8),
                                a_format=q["a_format"], b_format=q["b_format"], kind=q["kind"],
                                scale_format=q["scale_format"], block=q["block"],
                                instruction=q["instruction"])
    return lax.bitcast_convert_type(d, jnp.uint32)
