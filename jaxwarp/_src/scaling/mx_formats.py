"""Block-scaled formats: the table of OCP Microscaling (MX) and NVFP4 formats and the
ue8m0 scale rules (shared exponents). The quantizers are ``mx.py`` (public) over
``mx_kernels.py``.

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
bits (:func:`~jaxwarp._src.scaling.tensor_scale.divide_rn`, ``multiply_rn``), so the results
are the same on every backend. See ``docs/microscaling.md`` for the rules and their
sources.

Scale rules of the MX formats (the shared exponent ``e``, the scale ``X = 2**e``, from
the block's largest magnitude ``amax``; ``emax`` is the exponent of the element format's
largest normal value, ``max`` that value):

* ``"ocp"``: ``floor(log2(amax)) - emax`` (OCP Microscaling Formats (MX) Specification
  v1.0, section 6.3, Algorithm 1).
* ``"floor"``: torchao's ``ScaleCalculationMode.FLOOR``: the float32 amax's exponent
  field less its bias (-127 for a subnormal amax), minus ``emax``; once clamped this
  equals ``"ocp"`` for every float32 input (``tests/scaling/test_mx.py`` checks it).
* ``"ceil"``: torchao's ``CEIL``: ``ceil(log2(amax)) - emax``.
* ``"even"``: torchao's ``EVEN``: amax rounded to the element's fraction bits (to
  nearest, ties away from zero) before ``floor(log2(.)) - emax``.
* ``"rceil"``: cuBLAS / cuDNN (``scale = quantize_round_up(amax / max)``), torchao's
  ``RCEIL``: the smallest power of two at least ``amax / max``, the quotient a float32
  rounded to nearest even, as torchao's RCEIL computes it (``max_abs / max_pos``)
  before the PTX ``cvt.rp.satfinite.ue8m0x2.f32`` (or its software form). For every
  element format that is the exact quotient's ceiling (clamped to ue8m0).

``e`` is clamped to ue8m0's range ``[-127, 127]`` (an all-zero block gets ``2**-127``). A
block holding a NaN or an infinity gets the NaN scale 0xFF, and dequantizes to NaN.

User-defined element formats (``jaxwarp.define_format``): :func:`mx_format` makes an MX
format of one (ue8m0 scales, blocks of 32, the five rules above, ``emax`` and ``max``
read from the format), so that a proposed format such as IEEE P3109's binary8pP is
block-scaled as the OCP formats are; its elements are rounded by
``user_formats.encode_rounded``, the rounder of ``jaxwarp.to_format``.
"""

from __future__ import annotations

import dataclasses
import functools
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxwarp._src.numerics import formats, softfloat, user_formats
from jaxwarp._src.numerics.formats import FORMATS, Format, get_format
from jaxwarp._src.scaling.tensor_scale import divide_rn


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
        """The element's :class:`jaxwarp.Format`."""
        if self.element in formats.user_formats():
            return get_format(self.element, "fmt", (), user=True)
        if self.element not in FORMATS:  # pragma: no cover - registry without fp6/fp4
            raise NotImplementedError(f"fmt={self.name!r} needs element format "
                                      f"{self.element!r}, which the format registry lacks")
        return FORMATS[self.element]

    @property
    def user_layout(self) -> user_formats.Layout | None:
        """The code layout of a user-defined element format (None for the built-in MX
        formats, whose elements the registry's rounder stores)."""
        if self.int_lsb is not None or not self.element_format.user_defined:
            return None
        return user_formats.layout(self.element_format)

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

@functools.cache
def _user_mx_format(fmt: Format) -> MXFormat:
    return MXFormat(fmt.name, fmt.name, "ue8m0", 32)


def mx_format(fmt: str | Format, argname: str = "fmt") -> MXFormat:
    """The :class:`MXFormat` of a name :func:`quantize` takes: a key of
    :data:`MX_FORMATS`, or a user-defined element format (``jaxwarp.define_format``; the
    :class:`~jaxwarp._src.numerics.formats.Format` or its name), which gets ue8m0 scales,
    blocks of 32 and the five MX scale rules, as OCP's MXFP8.

    Raises:
      ValueError: ``fmt`` is neither (the message lists the MX formats), or a user
        format without a sign bit (MX elements are signed).

    Example:
      >>> p3 = jaxwarp.define_format("binary8p3", exponent_bits=5, mantissa_bits=2,
      ...                            specials="p3109")
      >>> f = mx_format(p3)
      >>> f.name, f.scale, f.block, f.emax, f.max_value  # 49152 = 1.5 * 2**15
      ('binary8p3', 'ue8m0', 32, 15, Fraction(49152, 1))
    """
    if isinstance(fmt, str) and fmt in MX_FORMATS:
        return MX_FORMATS[fmt]
    key = fmt.name if isinstance(fmt, Format) else fmt
    if isinstance(key, str) and key in formats.user_formats():
        ef = get_format(fmt, argname, (), user=True)
        if not ef.signed:
            raise ValueError(f"{argname}={ef.name!r}: MX elements are signed and "
                             f"{ef.name!r} has no sign bit; allowed: a signed format "
                             f"(define_format(..., signed=True))")
        return _user_mx_format(ef)
    shown = fmt.name if isinstance(fmt, Format) else fmt
    raise ValueError(f"{argname}={shown!r} is not supported; allowed: {tuple(MX_FORMATS)} "
                     f"or a format made by jaxwarp.define_format")


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
def _max_bits(f: MXFormat) -> int:
    """Bits of the float32 ``max`` (exact for every element format)."""
    return int(np.array(np.float32(float(f.max_value))).view(np.uint32))


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
        d = divide_rn(lax.bitcast_convert_type(m, jnp.float32),
                              lax.bitcast_convert_type(jnp.uint32(_max_bits(f)),
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
