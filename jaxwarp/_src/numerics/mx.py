"""Block-scaled formats: OCP Microscaling (MX) and NVFP4 quantizers, bit-exact.

A block-scaled tensor holds narrow *elements* and one *scale* per block of elements;
its value is ``element * scale`` (times a per-tensor scale for NVFP4). The formats, by
the name :func:`quantize` takes (:data:`MX_FORMATS`):

======================  ========  ===========  =====  ===================  ==========
name                    elements  scale        block  per-tensor scale     source
======================  ========  ===========  =====  ===================  ==========
``"mxfp8_e4m3"``        e4m3      ue8m0        32     no                   OCP MX 1.0
``"mxfp8_e5m2"``        e5m2      ue8m0        32     no                   OCP MX 1.0
``"mxfp6_e2m3"``        e2m3      ue8m0        32     no                   OCP MX 1.0
``"mxfp6_e3m2"``        e3m2      ue8m0        32     no                   OCP MX 1.0
``"mxfp4_e2m1"``        e2m1      ue8m0        32     no                   OCP MX 1.0
``"mxint8"``            s8 * 2^-6 ue8m0        32     no                   OCP MX 1.0
``"nvfp4"``             e2m1      ue4m3        16     fp32                 NVIDIA
======================  ========  ===========  =====  ===================  ==========

The element and scale formats are those of the format registry
(:data:`~jaxwarp._src.numerics.formats.FORMATS`); every rounding is one
:func:`~jaxwarp._src.numerics.softfloat.round_sig` on the bits (round to nearest even),
and every fp32 operation of the NVFP4 recipe is a correctly rounded IEEE operation on the
bits (:func:`~jaxwarp._src.numerics.scaling.divide_rn`, ``multiply_rn``), so the results
are the same on every backend. See ``docs/microscaling.md`` for the rules and their
sources.

Scale rules of the MX formats (the shared exponent ``e``, the scale ``X = 2**e``, from
the block's largest magnitude ``amax``; ``emax`` is the exponent of the element format's
largest normal value, ``max`` that value):

* ``"ocp"``: ``floor(log2(amax)) - emax`` (OCP Microscaling Formats (MX) Specification
  v1.0, section 6.3, Algorithm 1).
* ``"floor"``: torchao's ``ScaleCalculationMode.FLOOR``: the float32 amax's exponent
  field less its bias (-127 for a subnormal amax), minus ``emax``; once clamped this
  equals ``"ocp"`` for every float32 input (``tests/numerics/test_mx.py`` checks it).
* ``"ceil"``: torchao's ``CEIL``: ``ceil(log2(amax)) - emax``.
* ``"even"``: torchao's ``EVEN``: amax rounded to the element's fraction bits (to
  nearest, ties away from zero) before ``floor(log2(.)) - emax``.
* ``"rceil"``: cuBLAS / cuDNN (``scale = quantize_round_up(amax / max)``), torchao's
  ``RCEIL``: the smallest power of two at least ``amax * (1/max)``, the reciprocal and
  the product each a float32 rounded to nearest even, as torchao's RCEIL computes it
  before the PTX ``cvt.rp.satfinite.ue8m0x2.f32`` (or its software form).

``e`` is clamped to ue8m0's range ``[-127, 127]`` (an all-zero block gets ``2**-127``). A
block holding a NaN or an infinity gets the NaN scale 0xFF, and dequantizes to NaN.
"""

from __future__ import annotations

import dataclasses
import functools
from fractions import Fraction
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxwarp._src import checks
from jaxwarp._src.numerics import scaling, softfloat
from jaxwarp._src.numerics.formats import FORMATS, Format

__all__ = [
    "MODES",
    "MX_FORMATS",
    "MXFormat",
    "MXTensor",
    "SCALE_RULES",
    "dequantize",
    "fake_quantize",
    "quantize",
]


@dataclasses.dataclass(frozen=True)
class MXFormat:
    """A block-scaled format: element and scale formats (registry names) and defaults.

    Attributes:
      name: the name :func:`quantize` takes (``"mxfp8_e4m3"``, ``"nvfp4"`` ...).
      element: the element format's registry name (``"e4m3"``, ``"e2m1"``, ``"s8"``).
      scale: the block scale's registry name: ``"ue8m0"`` (a power of two) or
        ``"ue4m3"`` (NVFP4).
      block: the default block size (32 for MX, 16 for NVFP4).
      tensor_scale: whether a float32 per-tensor scale sits above the block scales.
      int_lsb: for an integer element, the exponent of its last bit (MXINT8: ``-6``,
        values ``code * 2**-6``); None for float elements.
      scale_rules: the scale rules this format accepts; the first is the default.

    Example:
      >>> f = MX_FORMATS["mxfp4_e2m1"]
      >>> f.element, f.scale, f.block
      ('e2m1', 'ue8m0', 32)
    """

    name: str
    element: str
    scale: str
    block: int
    tensor_scale: bool = False
    int_lsb: int | None = None
    scale_rules: tuple[str, ...] = ("ocp", "floor", "ceil", "even", "rceil")

    @property
    def element_format(self) -> Format:
        """The element's :class:`~jaxwarp._src.numerics.formats.Format`."""
        if self.element not in FORMATS:  # pragma: no cover - registry without fp6/fp4
            raise NotImplementedError(f"fmt={self.name!r} needs element format "
                                      f"{self.element!r}, which the format registry lacks")
        return FORMATS[self.element]

    @property
    def mantissa_bits(self) -> int:
        """Fraction bits of an element (MXINT8: 6)."""
        if self.int_lsb is not None:
            return -self.int_lsb
        return self.element_format.mantissa_bits

    @property
    def emax(self) -> int:
        """OCP's ``emax_elem``: the exponent of the element's largest normal value (e4m3 8,
        e5m2 15, e2m3 2, e3m2 4, e2m1 2, MXINT8 0)."""
        if self.int_lsb is not None:
            return 0
        return self.element_format.max_exponent

    @property
    def max_value(self) -> Fraction:
        """The element's largest magnitude (MXINT8: 127/64, the symmetric range)."""
        if self.int_lsb is not None:
            return Fraction(127) * Fraction(2) ** self.int_lsb
        return Fraction(self.element_format.max_value)


#: The block-scaled formats by name (see the module docstring's table).
MX_FORMATS: dict[str, MXFormat] = {f.name: f for f in (
    MXFormat("mxfp8_e4m3", "e4m3", "ue8m0", 32),
    MXFormat("mxfp8_e5m2", "e5m2", "ue8m0", 32),
    MXFormat("mxfp6_e2m3", "e2m3", "ue8m0", 32),
    MXFormat("mxfp6_e3m2", "e3m2", "ue8m0", 32),
    MXFormat("mxfp4_e2m1", "e2m1", "ue8m0", 32),
    MXFormat("mxint8", "s8", "ue8m0", 32, int_lsb=-6),
    MXFormat("nvfp4", "e2m1", "ue4m3", 16, tensor_scale=True, scale_rules=("nvfp4",)),
)}

#: Every scale rule (see the module docstring; ``"nvfp4"`` is NVFP4's own).
SCALE_RULES = ("ocp", "floor", "ceil", "even", "rceil", "nvfp4")

#: Element rounding modes, named as PTX names them: ``"rn"`` (to nearest, ties to even)
#: and ``"rs"`` (stochastic, ``cvt.rs``; needs a PRNG key).
MODES = ("rn", "rs")

_E8M0_BIAS = 127
_E8M0_NAN = 0xFF
_F32_QNAN = 0x7FC00000
_F32_INF = 0x7F800000
_RBITS = 32  # random bits per element for "rs"


# --------------------------------------------------------------------------------------
# The quantized tensor.


@jax.tree_util.register_pytree_node_class
@dataclasses.dataclass(frozen=True)
class MXTensor:
    """A block-scaled tensor: elements, block scales and (NVFP4) a per-tensor scale.

    A pytree: ``elements``, ``scales`` and ``tensor_scale`` are its leaves (so it passes
    through ``jax.jit``, ``jax.vmap`` and ``jax.lax`` control flow); ``fmt``, ``block``
    and ``axis`` are static.

    Attributes:
      elements: the elements, in the input's shape, in the element format's storage
        (registry ``storage_dtype``): float8 values for e4m3 / e5m2, uint8 *codes* for the
        fp6 / fp4 formats (their low 6 / 4 bits), int8 for MXINT8 (value ``code * 2**-6``).
      scales: one uint8 code per block: ue8m0 (``2**(code - 127)``, 0xFF is NaN) or ue4m3
        (NVFP4). 1D blocks: the input's shape with ``axis`` divided by the block size;
        2D blocks: the last two axes divided by the block's sizes.
      tensor_scale: NVFP4's float32 per-tensor scale (shape ``()``, per example under
        ``vmap``); None for the MX formats.
      fmt: the format's name (a key of :data:`MX_FORMATS`).
      block: the block size: an int (1D blocks along ``axis``) or a pair (2D blocks over
        the last two axes).
      axis: the blocked axis, counted from the end (``-1`` is the last), so that leading
        batch axes added by ``vmap`` do not move it.

    Example:
      >>> import jax.numpy as jnp
      >>> t = quantize(jnp.arange(32, dtype=jnp.float32), "mxfp8_e4m3")
      >>> t.elements.dtype, t.scales.shape, int(t.scales[0]) - 127  # 31 -> 2**(4 - 8)
      (dtype(float8_e4m3fn), (1,), -4)
    """

    elements: jax.Array
    scales: jax.Array
    tensor_scale: jax.Array | None
    fmt: str
    block: int | tuple[int, int]
    axis: int

    def tree_flatten(self):
        return (self.elements, self.scales, self.tensor_scale), (self.fmt, self.block,
                                                                 self.axis)

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(*children, *aux)

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape of the quantized tensor (the elements' shape)."""
        return tuple(self.elements.shape)


# --------------------------------------------------------------------------------------
# Argument checks.


def _fmt_arg(fmt: Any) -> MXFormat:
    if not isinstance(fmt, (str, jax.core.Tracer)):
        raise ValueError(f"fmt={fmt!r} is not supported; allowed: {tuple(MX_FORMATS)}")
    return MX_FORMATS[checks.static_choice(fmt, "fmt", tuple(MX_FORMATS))]


def _block_arg(block: Any, f: MXFormat) -> int | tuple[int, int]:
    if block is None:
        return f.block
    if isinstance(block, (tuple, list)):
        if len(block) != 2:
            raise ValueError(f"block={block!r}: a 2D block is a pair (rows, columns); "
                             f"allowed: an int, or a pair of ints such as (16, 16)")
        out = tuple(checks.static_int(b, "block") for b in block)
        if min(out) < 1:
            raise ValueError(f"block={block!r}: block sizes must be positive")
        return out
    b = checks.static_int(block, "block")
    if b < 1:
        raise ValueError(f"block={b} is not supported; allowed: a positive int (the format's "
                         f"default is {f.block}), or a pair such as (16, 16)")
    return b


def _x_arg(x: Any) -> jax.Array:
    arr = checks.array_arg(x, "x")
    if arr.dtype in (jnp.dtype(jnp.float16), jnp.dtype(jnp.bfloat16)):
        arr = arr.astype(jnp.float32)  # exact
    if arr.dtype != jnp.float32:
        raise TypeError(f"x must be a float32 (or float16 / bfloat16) array, got dtype "
                        f"{arr.dtype}")
    return arr


def _axis_arg(axis: Any, ndim: int, block: int | tuple[int, int]) -> int:
    a = checks.static_int(axis, "axis")
    if isinstance(block, tuple):
        if ndim < 2:
            raise ValueError(f"block={block}: a 2D block needs x with at least 2 axes, got "
                             f"{ndim}")
        if a not in (-1, ndim - 1):
            raise ValueError(f"axis={a} with 2D block={block}: 2D blocks tile the last two "
                             f"axes; allowed: axis=-1 (or {ndim - 1})")
        return -1
    if ndim == 0 or not -ndim <= a < ndim:
        raise ValueError(f"axis={a} is out of range for x with {ndim} axes; allowed: "
                         f"{-max(ndim, 1)} .. {max(ndim, 1) - 1}")
    return a - ndim if a >= 0 else a


def _check_divisible(shape: tuple[int, ...], axis: int, block: int | tuple[int, int]):
    if isinstance(block, tuple):
        for ax, b in zip((-2, -1), block, strict=True):
            if shape[ax] % b:
                raise ValueError(f"block={block}: x's axis {len(shape) + ax} has length "
                                 f"{shape[ax]}, not a multiple of {b} (pad x first)")
    elif shape[axis] % block:
        raise ValueError(f"block={block}: x's axis {len(shape) + axis} (axis={axis}) has "
                         f"length {shape[axis]}, not a multiple of {block} (pad x first)")


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
    y = y.reshape(*y.shape[:-2], -1)
    return jnp.moveaxis(y, -1, axis)


def _scales_layout(s: jax.Array, axis: int, block: int | tuple[int, int]) -> jax.Array:
    """Block scales from ``(*blocks)`` (blocked axis last) to the tensor's axis order."""
    return s if isinstance(block, tuple) else jnp.moveaxis(s, -1, axis)


def _scales_blocks(s: jax.Array, axis: int, block: int | tuple[int, int]) -> jax.Array:
    return s if isinstance(block, tuple) else jnp.moveaxis(s, axis, -1)


# --------------------------------------------------------------------------------------
# Shared exponents (ue8m0 scale rules), on the fp32 bits of the block's amax.


def _floor_log2(m: jax.Array) -> jax.Array:
    """floor(log2(v)) for the positive finite float32 magnitude bits ``m`` (int32)."""
    e = (m >> 23).astype(jnp.int32)
    sub = softfloat.bitlen((m & 0x7FFFFF).astype(jnp.uint32)) - 1 - 149
    return jnp.where(e == 0, sub, e - 127)


def _is_pow2(m: jax.Array) -> jax.Array:
    frac = m & 0x7FFFFF
    return jnp.where((m >> 23) == 0, (frac & (frac - 1)) == 0, frac == 0)


@functools.cache
def _recip_max(f: MXFormat) -> int:
    """Bits of the float32 ``1 / max`` (rounded to nearest even), as libraries hold it."""
    return int(np.array(np.float32(1) / np.float32(float(f.max_value))).view(np.uint32))


def _shared_exponent(amax: jax.Array, f: MXFormat, rule: str) -> jax.Array:
    """The unclamped shared exponent of ``rule`` from the amax magnitude bits (uint32,
    finite and nonzero where it matters)."""
    m = amax
    if rule == "ocp":
        return _floor_log2(m) - f.emax
    if rule == "floor":  # torchao: the biased exponent field less 127 (-127 for subnormals)
        return (m >> 23).astype(jnp.int32) - 127 - f.emax
    if rule == "ceil":
        return _floor_log2(m) + (~_is_pow2(m)).astype(jnp.int32) - f.emax
    if rule == "even":
        # Rounding to mbits fraction bits (ties away) carries into the next binade exactly
        # when the top mbits + 1 bits are all ones and the next bit is one.
        sig = jnp.where((m >> 23) == 0, m & 0x7FFFFF, (m & 0x7FFFFF) | 0x800000)
        n = softfloat.bitlen(sig)
        k = f.mantissa_bits + 2  # the kept bits and the round bit
        top = jnp.where(n >= k, sig >> jnp.clip(n - k, 0, 31).astype(jnp.uint32),
                        sig << jnp.clip(k - n, 0, 31).astype(jnp.uint32))
        carry = top == (1 << k) - 1
        return _floor_log2(m) + carry.astype(jnp.int32) - f.emax
    if rule == "rceil":
        d = scaling.multiply_rn(lax.bitcast_convert_type(m, jnp.float32),
                                lax.bitcast_convert_type(jnp.uint32(_recip_max(f)),
                                                         jnp.float32))
        dm = lax.bitcast_convert_type(d, jnp.uint32)
        e = _floor_log2(dm) + (~_is_pow2(dm)).astype(jnp.int32)
        return jnp.where(dm == 0, -_E8M0_BIAS, e)
    raise AssertionError(rule)


def _e8m0_codes(amax: jax.Array, f: MXFormat, rule: str) -> jax.Array:
    """ue8m0 codes (uint32) of the blocks with magnitude-maximum bits ``amax``."""
    e = _shared_exponent(jnp.where(amax == 0, jnp.uint32(1), amax), f, rule)
    e = jnp.where(amax == 0, -_E8M0_BIAS, e)
    e = jnp.clip(e, -_E8M0_BIAS, _E8M0_BIAS)
    code = (e + _E8M0_BIAS).astype(jnp.uint32)
    return jnp.where(amax >= _F32_INF, jnp.uint32(_E8M0_NAN), code)


# --------------------------------------------------------------------------------------
# Elements: (neg, sig, g) -> element codes, rounded once.


def _round_element(neg, sig, g, f: MXFormat, mode: str, rbits, saturate: bool):
    """``(-1)**neg * sig * 2**g`` (uint32 ``sig``) rounded onto the element grid: codes
    (uint32 for floats, int32 for MXINT8)."""
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


@functools.partial(jax.jit, static_argnames=("f", "block", "axis", "rule", "mode",
                                             "saturate"))
def _quantize_mx(x, key_data, *, f: MXFormat, block, axis, rule, mode, saturate):
    xb = _to_blocks(x, axis, block)
    amax = _amax_bits(xb)
    codes = _e8m0_codes(amax, f, rule)
    e = codes.astype(jnp.int32) - _E8M0_BIAS
    u = lax.bitcast_convert_type(xb, jnp.uint32)
    neg, lsb, sig, _, _, _ = softfloat.decode(u, "f32")
    rbits = (jax.random.bits(jax.random.wrap_key_data(key_data), xb.shape, jnp.uint32)
             if mode == "rs" else None)
    el = _round_element(neg, sig.astype(jnp.uint32), lsb - e[..., None], f, mode, rbits,
                        saturate)
    nan_block = (codes == _E8M0_NAN)[..., None]
    if f.int_lsb is not None:
        el = jnp.where(nan_block, 0, el)
    else:
        ef = f.element_format
        el = jnp.where(nan_block, jnp.uint32(_nan_code(ef) if ef.has_nan else 0), el)
    elements = _from_blocks(_store_elements(el, f), x.shape, axis, block)
    scales = _scales_layout(codes.astype(jnp.uint8), axis, block)
    return elements, scales


@functools.partial(jax.jit, static_argnames=("f", "block", "axis", "mode"))
def _quantize_nvfp4(x, key_data, *, f: MXFormat, block, axis, mode):
    f32 = jnp.float32
    tmax = lax.bitcast_convert_type(jnp.max(lax.bitcast_convert_type(x, jnp.uint32)
                                            & jnp.uint32(0x7FFFFFFF)), f32)
    e4m3, e2m1 = FORMATS[f.scale], f.element_format
    denom = f32(float(Fraction(e4m3.max_value) * Fraction(e2m1.max_value)))  # 2688, exact
    s_t = scaling.divide_rn(tmax, denom)
    s_t = jnp.where(tmax == 0, f32(1), s_t)  # an all-zero tensor: 1 (TransformerEngine)
    s_t = jnp.where(jnp.isfinite(tmax), s_t, f32(jnp.nan))  # NaN or inf anywhere: NaN
    xb = _to_blocks(x, axis, block)
    amax = lax.bitcast_convert_type(_amax_bits(xb), f32)
    q = scaling.divide_rn(scaling.divide_rn(amax, f32(e2m1.max_value)), s_t)
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
    factor = scaling.divide_rn(scaling.divide_rn(f32(1), s_t), sb32)
    y = scaling.multiply_rn(xb, factor[..., None])
    yneg, ylsb, ysig, _, _, _ = softfloat.decode(lax.bitcast_convert_type(y, jnp.uint32),
                                                 "f32")
    rbits = (jax.random.bits(jax.random.wrap_key_data(key_data), xb.shape, jnp.uint32)
             if mode == "rs" else None)
    el = _round_element(yneg, ysig.astype(jnp.uint32), ylsb, f, mode, rbits, True)
    elements = _from_blocks(_store_elements(el, f), x.shape, axis, block)
    scales = _scales_layout(sc.astype(jnp.uint8), axis, block)
    return elements, scales, s_t


@jax.jit
def _dequantize_kernel(t: MXTensor) -> jax.Array:
    f = MX_FORMATS[t.fmt]
    eb = _to_blocks(t.elements, t.axis, t.block)
    sb = _scales_blocks(t.scales, t.axis, t.block).astype(jnp.uint32)
    neg, lsb, sig, inf, nan = _element_terms(eb, f)
    if f.tensor_scale:
        sn, sl, ss, _, _, snan = softfloat.decode(sb, f.scale)
        # element * block scale is exact in float32 (2 + 4 significant bits).
        prod = _f32_bits(neg, sig * ss[..., None].astype(jnp.uint32), lsb + sl[..., None])
        out = scaling.multiply_rn(lax.bitcast_convert_type(prod, jnp.float32),
                                  t.tensor_scale)
        out = lax.bitcast_convert_type(out, jnp.uint32)
        out = jnp.where(snan[..., None], jnp.uint32(_F32_QNAN), out)
    else:
        e = sb.astype(jnp.int32) - _E8M0_BIAS
        out = _f32_bits(neg, sig, lsb + e[..., None])
        sign = neg.astype(jnp.uint32) << 31
        out = jnp.where(inf, sign | jnp.uint32(_F32_INF), out)
        out = jnp.where(nan | (sb == _E8M0_NAN)[..., None], jnp.uint32(_F32_QNAN), out)
    out = _from_blocks(out, t.elements.shape, t.axis, t.block)
    return lax.bitcast_convert_type(out, jnp.float32)


# --------------------------------------------------------------------------------------
# Public functions.


def _key_data(key: Any, mode: str) -> jax.Array:
    if mode == "rn":
        if key is not None:
            raise ValueError("key is only used with mode='rs' (stochastic rounding); "
                             "allowed with mode='rn': key=None")
        return jnp.zeros((2,), jnp.uint32)
    if key is None:
        raise ValueError("mode='rs' (stochastic rounding) needs a PRNG key: "
                         "key=jax.random.key(0) (or jax.random.PRNGKey(0))")
    if isinstance(key, jax.Array) and jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        if key.shape != ():
            raise ValueError(f"key must be a single PRNG key, got shape {key.shape}")
        return jax.random.key_data(key)
    arr = checks.array_arg(key, "key")
    if arr.dtype != jnp.uint32 or arr.shape != (2,):
        raise TypeError(f"key must be a PRNG key (jax.random.key(0)) or a raw uint32 (2,) "
                        f"key (jax.random.PRNGKey(0)); got dtype {arr.dtype}, shape "
                        f"{tuple(arr.shape)}")
    return arr


def _checked(x, fmt, block, axis, scale_rule, mode, key, saturate):
    f = _fmt_arg(fmt)
    arr = _x_arg(x)
    blk = _block_arg(block, f)
    ax = _axis_arg(axis, arr.ndim, blk)
    rule = f.scale_rules[0] if scale_rule is None else checks.static_choice(
        scale_rule, "scale_rule", f.scale_rules)
    mode = checks.static_choice(mode, "mode", MODES)
    saturate = checks.static_choice(saturate, "saturate", (True, False))
    if not saturate and (f.tensor_scale or f.int_lsb is not None
                         or not (f.element_format.has_inf or f.element_format.has_nan)):
        raise ValueError(f"saturate=False with fmt={f.name!r}: its elements have no "
                         f"infinity or NaN to overflow to; allowed: saturate=True "
                         f"(saturate=False is for mxfp8_e4m3 and mxfp8_e5m2)")
    _check_divisible(arr.shape, ax, blk)
    return f, arr, blk, ax, rule, mode, _key_data(key, mode), saturate


def quantize(x: Any, fmt: str = "mxfp8_e4m3", block: int | tuple[int, int] | None = None,
             axis: int = -1, scale_rule: str | None = None, mode: str = "rn",
             key: Any = None, saturate: bool = True) -> MXTensor:
    """Quantizes ``x`` to a block-scaled format (OCP MX or NVFP4).

    MX formats: each block of ``block`` elements gets the shared exponent ``e`` of
    ``scale_rule`` (clamped to ``[-127, 127]``; see the module docstring and
    ``docs/microscaling.md``) stored as a ue8m0 code, and each element is ``x / 2**e``
    rounded once onto the element format (OCP MX v1.0 section 6.3), saturating: a
    result beyond the element's largest magnitude becomes ±max (``saturate=True``, the
    specification's clamping of normal numbers; ``saturate=False``, for e4m3 / e5m2 only,
    gives NaN / ±inf instead, as a conversion without ``.satfinite`` does). MXINT8
    elements are ``round(x / 2**e * 64)`` clamped to ``[-127, 127]`` (no -0).

    NVFP4 (TransformerEngine's two-level recipe, in torchao's float32 order of operations,
    each step rounded to nearest even on the bits): per-tensor scale ``s_t = amax(x) /
    2688`` (``448 * 6``; 1 for an all-zero tensor); block scale ``s_b = ue4m3(clamp((amax_block
    / 6) / s_t, 2**-6, 448))`` (to nearest even); element ``e2m1(x * ((1 / s_t) / s_b))``
    (saturating at ±6).

    NaN or ±inf in a block: the block's ue8m0 scale is NaN (0xFF) and its elements are
    the element format's NaN where it has one (else 0); NVFP4: the per-tensor scale is NaN.
    Such blocks dequantize to NaN. Zeros keep their sign. Subnormal inputs are exact
    inputs like any other (float32 bits, no flush).

    Rounding (``mode``): ``"rn"`` to nearest, ties to even (``softfloat.round_sig``);
    ``"rs"`` stochastic, with 32 random bits per element from
    ``jax.random.bits(key, ...)``: they are added to the bits the rounding drops, aligned
    with the first dropped bit, and the sum is truncated (so a value ``d / 2**s`` of the
    way from one grid point to the next rounds up with probability ``d / 2**s`` when at
    most 32 bits are dropped). The same key gives the same bits.

    Args:
      x: float32 array (float16 / bfloat16 are widened exactly).
      fmt: static, a key of :data:`MX_FORMATS`.
      block: static block size: an int (1D blocks along ``axis``) or a pair ``(rows,
        cols)`` (2D blocks over the last two axes, e.g. ``(16, 16)`` for weights);
        default the format's (32, NVFP4 16). The blocked axes' lengths must be multiples.
      axis: static, the axis 1D blocks run along (the contraction axis); for 2D blocks
        ``-1``.
      scale_rule: static, one of the format's ``scale_rules`` (MX: ``"ocp"``,
        ``"floor"``, ``"ceil"``, ``"even"``, ``"rceil"``; NVFP4: ``"nvfp4"``); default the
        first (``"ocp"``, ``"nvfp4"``).
      mode: static, ``"rn"`` or ``"rs"``.
      key: a PRNG key for ``mode="rs"`` (``jax.random.key(0)`` or a raw uint32 (2,) key);
        None for ``"rn"``.
      saturate: static bool, see above.

    Returns:
      An :class:`MXTensor`.

    Raises:
      TypeError: ``x`` is not a float array, a static argument is traced, ``key`` is not
        a key.
      ValueError: an argument is not one of the allowed values, or the blocked axis is not
        a multiple of the block.

    Example:
      >>> import jax.numpy as jnp
      >>> x = jnp.array([1.0, -2.5, 3.0, 0.1] * 8, jnp.float32)
      >>> t = quantize(x, "mxfp8_e4m3")
      >>> int(t.scales[0]) - 127  # floor(log2(3.0)) - emax(e4m3) = 1 - 8
      -7
      >>> dequantize(t)[:4]  # 0.1 / 2**-7 = 12.8 rounds to the e4m3 value 13
      Array([ 1.       , -2.5      ,  3.       ,  0.1015625], dtype=float32)
      >>> quantize(x, "mxint8", scale_rule="ceil").elements[:4]  # round(x / 2**2 * 64)
      Array([ 16, -40,  48,   2], dtype=int8)
      >>> w = quantize(jnp.ones((16, 32), jnp.float32), "nvfp4", block=(16, 16))
      >>> w.scales, w.elements[0, :3], dequantize(w)[0, 0]  # s_b = 448, e2m1 6 (code 7)
      (Array([[126, 126]], dtype=uint8), Array([7, 7, 7], dtype=uint8), Array(1., dtype=float32))
    """
    f, arr, blk, ax, rule, mode, kd, saturate = _checked(x, fmt, block, axis, scale_rule,
                                                         mode, key, saturate)
    if f.tensor_scale:
        el, sc, st = _quantize_nvfp4(arr, kd, f=f, block=blk, axis=ax, mode=mode)
        return MXTensor(el, sc, st, f.name, blk, ax)
    el, sc = _quantize_mx(arr, kd, f=f, block=blk, axis=ax, rule=rule, mode=mode,
                          saturate=saturate)
    return MXTensor(el, sc, None, f.name, blk, ax)


def dequantize(t: MXTensor) -> jax.Array:
    """The float32 values of a block-scaled tensor.

    MX: ``element * 2**(scale - 127)``, exact (rounded once to float32 where the product
    leaves float32's range: beyond it, ±inf); a NaN scale (0xFF) makes its whole block
    NaN, as do NaN elements; e5m2's ±inf elements stay ±inf. NVFP4: ``element * s_b``
    (exact in float32) times the per-tensor scale, rounded once to nearest even; a NaN
    block scale makes its block NaN.

    Args:
      t: an :class:`MXTensor` (from :func:`quantize`, or built from codes).

    Returns:
      float32 array of ``t.shape``.

    Raises:
      TypeError: ``t`` is not an :class:`MXTensor`.

    Example:
      >>> import jax.numpy as jnp
      >>> x = jnp.linspace(-1.0, 1.0, 32, dtype=jnp.float32)
      >>> bool((dequantize(quantize(x, "mxfp8_e4m3")) == fake_quantize(x)).all())
      True
    """
    if not isinstance(t, MXTensor):
        raise TypeError(f"t must be an MXTensor (from jaxwarp.mx.quantize), got "
                        f"{type(t).__name__}")
    return _dequantize_kernel(t)


# Straight-through estimator, stated once: quantize-dequantize is piecewise constant, so
# its true derivative is zero almost everywhere; the tangent passes through unchanged
# (as round_to's does), scales being treated as constants.
@functools.partial(jax.custom_jvp, nondiff_argnums=(2,))
def _fake(x, key_data, static):
    f, blk, ax, rule, mode, saturate = static
    if f.tensor_scale:
        el, sc, st = _quantize_nvfp4(x, key_data, f=f, block=blk, axis=ax, mode=mode)
    else:
        el, sc = _quantize_mx(x, key_data, f=f, block=blk, axis=ax, rule=rule, mode=mode,
                              saturate=saturate)
        st = None
    return _dequantize_kernel(MXTensor(el, sc, st, f.name, blk, ax))


@_fake.defjvp
def _fake_jvp(static, primals, tangents):
    x, key_data = primals
    dx, _ = tangents
    return _fake(x, key_data, static), dx


def fake_quantize(x: Any, fmt: str = "mxfp8_e4m3", block: int | tuple[int, int] | None = None,
                  axis: int = -1, scale_rule: str | None = None, mode: str = "rn",
                  key: Any = None, saturate: bool = True) -> jax.Array:
    """``dequantize(quantize(x, ...))`` with a straight-through gradient.

    The values are those of :func:`quantize` then :func:`dequantize` (same arguments).
    The derivative is the identity (a straight-through estimator: the rounding's own
    derivative is zero almost everywhere), the same for every element, saturated or not.

    Args:
      x, fmt, block, axis, scale_rule, mode, key, saturate: as :func:`quantize`.

    Returns:
      float32 array of ``x``'s shape.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> x = jnp.linspace(-1.0, 1.0, 32, dtype=jnp.float32)
      >>> jax.grad(lambda v: fake_quantize(v, "mxint8").sum())(x)[:3]
      Array([1., 1., 1.], dtype=float32)
    """
    f, arr, blk, ax, rule, mode, kd, saturate = _checked(x, fmt, block, axis, scale_rule,
                                                         mode, key, saturate)
    return _fake(arr, kd, (f, blk, ax, rule, mode, saturate))

