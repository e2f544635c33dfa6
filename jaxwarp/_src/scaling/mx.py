"""Block-scaled formats: OCP Microscaling (MX) and NVFP4 quantizers, bit-exact.

The public functions (:func:`quantize`, :func:`dequantize`, :func:`fake_quantize`) and
the quantized tensor (:class:`MXTensor`), with their argument checks. The formats, the
scale rules and their sources are ``mx_formats.py``; the kernels ``mx_kernels.py``;
``docs/microscaling.md`` says what each rule is and where it comes from.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp

from jaxwarp._src import checks
from jaxwarp._src.numerics.formats import Format
from jaxwarp._src.scaling.mx_formats import MODES, MX_FORMATS, SCALE_RULES, MXFormat, mx_format
from jaxwarp._src.scaling.mx_kernels import (
    _dequantize_kernel,
    _quantize_mx,
    _quantize_nvfp4,
)

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
        fp6 / fp4 formats (their low 6 / 4 bits), int8 for MXINT8 (value ``code * 2**-6``),
        the codes (uint8; uint16 above 8 bits) of a user-defined element format.
      scales: one uint8 code per block: ue8m0 (``2**(code - 127)``, 0xFF is NaN) or ue4m3
        (NVFP4). 1D blocks: the input's shape with ``axis`` divided by the block size;
        2D blocks: the last two axes divided by the block's sizes.
      tensor_scale: NVFP4's float32 per-tensor scale (shape ``()``, per example under
        ``vmap``); None for the MX formats.
      fmt: the format's name: a key of :data:`MX_FORMATS`, or the name of the
        user-defined element format (``jaxwarp.define_format``).
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
    if isinstance(fmt, jax.core.Tracer):
        checks.static_choice(fmt, "fmt", tuple(MX_FORMATS))
    if not isinstance(fmt, (str, Format)):
        raise ValueError(f"fmt={fmt!r} is not supported; allowed: {tuple(MX_FORMATS)} "
                         f"or a format made by jaxwarp.define_format")
    return mx_format(fmt, "fmt")


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


@functools.lru_cache(maxsize=256)
def _element_dtype(fmt: str, block: int | tuple[int, int]) -> Any:
    """The elements' dtype :func:`quantize` writes for ``fmt`` (one block, traced only)."""
    shape = block if isinstance(block, tuple) else (block,)
    return jax.eval_shape(lambda x: quantize(x, fmt, block), jax.ShapeDtypeStruct(
        shape, jnp.float32)).elements.dtype


def check_tensor(t: Any, name: str = "t") -> MXTensor:
    """Checks that the fields of an :class:`MXTensor` ``t`` agree, as :func:`quantize`
    makes them (a hand-built one may not): the format, block and axis; the elements'
    dtype for the format; the scales' dtype and shape for the elements' shape, block
    and axis; the per-tensor scale (NVFP4: a float32 scalar; the MX formats: None).

    Raises:
      TypeError / ValueError: naming the field (``t.scales``, ...), what it is and what
        the other fields allow.
    """
    if not isinstance(t, MXTensor):
        raise TypeError(f"{name} must be an MXTensor (from jaxwarp.mx.quantize), got "
                        f"{type(t).__name__}")
    if not isinstance(t.fmt, (str, Format)):
        raise ValueError(f"{name}.fmt={t.fmt!r} is not supported; allowed: "
                         f"{tuple(MX_FORMATS)} or a format made by jaxwarp.define_format")
    f = mx_format(t.fmt, f"{name}.fmt")
    elements = checks.array_arg(t.elements, f"{name}.elements")
    blk = _block_arg(t.block, f)
    ax = _axis_arg(t.axis, elements.ndim, blk)
    where = f"{name}.elements of shape {tuple(elements.shape)}"
    if isinstance(blk, tuple):
        for i, b in zip((-2, -1), blk, strict=True):
            if elements.shape[i] % b:
                raise ValueError(f"{where}: axis {i} is not a multiple of {name}.block={blk}")
    elif elements.shape[ax] % blk:
        raise ValueError(f"{where}: axis {ax} is not a multiple of {name}.block={blk}")
    want = _element_dtype(f.name, blk)
    if elements.dtype != want:
        raise TypeError(f"{where} has dtype {elements.dtype}; {name}.fmt={f.name!r} stores "
                        f"its elements as {want} (what jaxwarp.mx.quantize writes)")
    scales = checks.array_arg(t.scales, f"{name}.scales")
    shape = list(elements.shape)
    for i, b in ((-2, blk[0]), (-1, blk[1])) if isinstance(blk, tuple) else ((ax, blk),):
        shape[i] //= b
    if scales.dtype != jnp.uint8 or tuple(scales.shape) != tuple(shape):
        raise ValueError(f"{name}.scales has dtype {scales.dtype} and shape "
                         f"{tuple(scales.shape)}; {where} with block={blk}, axis={ax} needs "
                         f"uint8 scales of shape {tuple(shape)} (one per block)")
    if f.tensor_scale:
        if t.tensor_scale is None:
            raise ValueError(f"{name}.tensor_scale is None; {name}.fmt={f.name!r} needs its "
                             f"float32 per-tensor scale (shape ()), as quantize returns it")
        ts = checks.array_arg(t.tensor_scale, f"{name}.tensor_scale")
        if ts.dtype != jnp.float32 or ts.shape != ():
            raise ValueError(f"{name}.tensor_scale must be a float32 scalar (shape ()), got "
                             f"{ts.dtype} of shape {tuple(ts.shape)}")
    elif t.tensor_scale is not None:
        raise ValueError(f"{name}.tensor_scale must be None for {name}.fmt={f.name!r} (only "
                         f"NVFP4 has a per-tensor scale)")
    return t


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
    lay = f.user_layout
    if saturate is None:  # the spec's clamp; a user-defined format's own overflow rule
        saturate = lay is None or lay.saturate or (lay.inf_code is None
                                                   and lay.nan_code is None)
    else:
        saturate = checks.static_choice(saturate, "saturate", (True, False))
    if not saturate and (f.tensor_scale or f.int_lsb is not None
                         or not (f.element_format.has_inf or f.element_format.has_nan)):
        raise ValueError(f"saturate=False with fmt={f.name!r}: its elements have no "
                         f"infinity or NaN to overflow to; allowed: saturate=True "
                         f"(saturate=False is for mxfp8_e4m3, mxfp8_e5m2 and user-defined "
                         f"formats with an infinity or a NaN)")
    _check_divisible(arr.shape, ax, blk)
    return f, arr, blk, ax, rule, mode, _key_data(key, mode), saturate


def quantize(x: Any, fmt: str | Format = "mxfp8_e4m3",
             block: int | tuple[int, int] | None = None, axis: int = -1,
             scale_rule: str | None = None, mode: str = "rn", key: Any = None,
             saturate: bool | None = None) -> MXTensor:
    """Quantizes ``x`` to a block-scaled format (OCP MX or NVFP4).

    MX formats: each block of ``block`` elements gets the shared exponent ``e`` of
    ``scale_rule`` (clamped to ``[-127, 127]``; the rules' formulas and sources:
    docs/microscaling.md, "Scale rules") stored as a ue8m0 code, and each element is
    ``x / 2**e`` rounded once onto the element format (OCP MX v1.0 section 6.3),
    saturating: a result beyond the element's largest magnitude becomes ±max
    (``saturate=True``, the specification's clamping of normal numbers;
    ``saturate=False``, for e4m3 / e5m2 and user-defined formats, gives NaN / ±inf
    instead, as a conversion without ``.satfinite`` does). MXINT8 elements are
    ``round(x / 2**e * 64)`` clamped to ``[-127, 127]`` (no -0).

    User-defined element formats (``fmt`` a format made by ``jaxwarp.define_format``, or
    its name; it must be signed): ue8m0 scales by the same rules, ``emax`` and ``max``
    those of the format, each element ``x / 2**e`` rounded once onto the format's grid
    by ``jaxwarp.to_format``'s rounder (``"rn"``: ties to
    even; ``"rs"`` as below), subnormals included. A result beyond the format's largest
    value becomes ±max with ``saturate`` (default: the format's own ``saturate`` flag),
    else the format's overflow value (±inf, else its NaN). A format without -0 (P3109,
    FNUZ) writes +0 for a negative value that rounds to zero. The elements are the codes.

    NVFP4 (TransformerEngine's two-level recipe, in torchao's float32 order of operations,
    each step rounded to nearest even on the bits): per-tensor scale ``s_t = amax(x) /
    2688`` (``448 * 6``; 1 for an all-zero tensor); block scale ``s_b = ue4m3(clamp((amax_block
    / 6) / s_t, 2**-6, 448))`` (to nearest even); element ``e2m1(x * ((1 / s_t) / s_b))``
    (saturating at ±6).

    NaN or ±inf in a block: the block's ue8m0 scale is NaN (0xFF) and its elements are
    the element format's NaN where it has one (else 0); NVFP4: the per-tensor scale is NaN.
    Such blocks dequantize to NaN. Zeros keep their sign. Subnormal inputs are exact
    inputs like any other (float32 bits, no flush).

    Rounding (``mode``): ``"rn"`` to nearest, ties to even;
    ``"rs"`` stochastic, with 32 random bits per element from
    ``jax.random.bits(key, ...)``: they are added to the bits the rounding drops, aligned
    with the first dropped bit, and the sum is truncated (so a value ``d / 2**s`` of the
    way from one grid point to the next rounds up with probability ``d / 2**s`` when at
    most 32 bits are dropped). The same key gives the same bits.

    Args:
      x: float32 array (float16 / bfloat16 are widened exactly).
      fmt: static, a key of :data:`MX_FORMATS`, or a signed user-defined format (the
        :class:`jaxwarp.Format` ``jaxwarp.define_format``
        returned, or its name).
      block: static block size: an int (1D blocks along ``axis``) or a pair ``(rows,
        cols)`` (2D blocks over the last two axes, e.g. ``(16, 16)`` for weights);
        default the format's (32, NVFP4 16). The blocked axes' lengths must be multiples.
      axis: static, the axis 1D blocks run along (the contraction axis); for 2D blocks
        ``-1``.
      scale_rule: static, one of the format's ``scale_rules`` (MX and user-defined
        formats: ``"ocp"``, ``"floor"``, ``"ceil"``, ``"even"``, ``"rceil"``; NVFP4:
        ``"nvfp4"``); default the first (``"ocp"``, ``"nvfp4"``).
      mode: static, ``"rn"`` or ``"rs"``.
      key: a PRNG key for ``mode="rs"`` (``jax.random.key(0)`` or a raw uint32 (2,) key);
        None for ``"rn"``.
      saturate: static bool, or None (default): True for the OCP and NVFP4 formats, a
        user-defined element format's own ``saturate`` flag; see above.

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
      TypeError, ValueError: ``t`` is not an :class:`MXTensor`, or its fields disagree
        (:func:`check_tensor`).

    Example:
      >>> import jax.numpy as jnp
      >>> x = jnp.linspace(-1.0, 1.0, 32, dtype=jnp.float32)
      >>> bool((dequantize(quantize(x, "mxfp8_e4m3")) == fake_quantize(x)).all())
      True
    """
    return _dequantize_kernel(check_tensor(t))


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


def fake_quantize(x: Any, fmt: str | Format = "mxfp8_e4m3",
                  block: int | tuple[int, int] | None = None, axis: int = -1,
                  scale_rule: str | None = None, mode: str = "rn", key: Any = None,
                  saturate: bool | None = None) -> jax.Array:
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

