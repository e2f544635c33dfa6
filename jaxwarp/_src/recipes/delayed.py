"""Delayed fp8 scaling (TransformerEngine's ``DelayedScaling``), as pure functions.

TransformerEngine keeps, per fp8 tensor, an amax history and a scale in mutable buffers:
each step casts with the scale of the *previous* update (``q = fp8(x * scale)``), records
the tensor's amax in ``amax_history[0]``, and then ``amax_and_scale_update``
(``transformer_engine/common/recipe/delayed_scaling.cu``) reduces the history
(``"max"`` over the window, or ``"most_recent"``), sets
``scale = (fp8_max * 2**-margin) / amax`` (the previous scale where that amax is 0 or not
finite) and rolls the history by one slot, zeroing slot 0.

In JAX the buffers are a pytree, :class:`DelayedScalingState` ``(amax_history, scale)``,
passed to and returned by the step: :func:`delayed_matmul` casts both operands with
``state.scale`` and returns the product with the state updated from the operands' amaxes
(:meth:`DelayedScaling.update`). The arithmetic (``scaling.divide_rn``,
``multiply_rn``) is IEEE fp32, rounded once, on the bits.

Deviation from TransformerEngine: only the forward operands have delayed scales. TE also
records the gradients' amaxes in the backward pass and scales them with their own delayed
scales; here the backward products are ``jaxwarp.matmul``'s own (per-tensor current
power-of-two scales), because a ``custom_vjp`` cannot return a new state from the
backward pass without threading it through the caller's gradient.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from jaxwarp._src import checks
from jaxwarp._src.gemm.matmul import matmul
from jaxwarp._src.numerics.formats import ALIASES, FORMATS
from jaxwarp._src.numerics.fp8 import FP8_FORMATS
from jaxwarp._src.numerics.fp8_intrinsics import float_to_fp8
from jaxwarp._src.scaling.tensor_scale import divide_rn, multiply_rn, times_pow2

__all__ = ["AMAX_COMPUTE_ALGOS", "DelayedScaling", "DelayedScalingState", "delayed_matmul"]

#: TransformerEngine's predefined amax reductions.
AMAX_COMPUTE_ALGOS = ("max", "most_recent")


class DelayedScalingState(NamedTuple):
    """The buffers of delayed scaling, a pytree: ``amax_history`` (history_len,
    num_scales) fp32, slot 0 the current step's; ``scale`` (num_scales,) fp32, the
    quantization scales (``q = fp8(x * scale)``) of the next step.

    Example:
        >>> s = jaxwarp.fp8.DelayedScaling(amax_history_len=4).init()
        >>> s.amax_history.shape, s.scale
        ((4, 2), Array([1., 1.], dtype=float32))
    """

    amax_history: jax.Array
    scale: jax.Array


@dataclasses.dataclass(frozen=True)
class DelayedScaling:
    """TransformerEngine's ``DelayedScaling`` recipe (its defaults but the format): the
    static settings of :func:`delayed_matmul`.

    Args:
        margin: int; the scale is ``fp8_max * 2**-margin / amax``.
        amax_history_len: the window of recorded amaxes (a positive int).
        amax_compute_algo: ``"max"`` (the largest amax in the window) or ``"most_recent"``.
        fp8_format: ``"e4m3"`` or ``"e5m2"``, the format of both forward operands.

    Example:
        >>> r = jaxwarp.fp8.DelayedScaling(amax_history_len=2)
        >>> s = r.update(r.init(1), jnp.array([2.0]))
        >>> s.scale  # 448 / 2
        Array([224.], dtype=float32)
    """

    margin: int = 0
    amax_history_len: int = 1024
    amax_compute_algo: str = "max"
    fp8_format: str = "e4m3"

    def __post_init__(self):
        checks.static_int(self.margin, "margin")
        n = checks.static_int(self.amax_history_len, "amax_history_len")
        if n <= 0:
            raise ValueError(f"amax_history_len must be a positive int, got {n}")
        checks.static_choice(self.amax_compute_algo, "amax_compute_algo", AMAX_COMPUTE_ALGOS)
        fmt = checks.format_name(self.fp8_format, "fp8_format", tuple(FP8_FORMATS),
                                 ALIASES)
        object.__setattr__(self, "fp8_format", fmt)

    @property
    def scaled_max(self) -> float:
        """``fp8_max * 2**-margin`` (exact)."""
        return float(FORMATS[self.fp8_format].max_value) * 2.0 ** -self.margin

    def init(self, num_scales: int = 2) -> DelayedScalingState:
        """A zero history and unit scales (TransformerEngine's initial buffers)."""
        num_scales = checks.static_int(num_scales, "num_scales")
        return DelayedScalingState(jnp.zeros((self.amax_history_len, num_scales), jnp.float32),
                                   jnp.ones((num_scales,), jnp.float32))

    def update(self, state: DelayedScalingState, amax: Any) -> DelayedScalingState:
        """Records ``amax`` (num_scales,) in slot 0 and runs TransformerEngine's
        ``amax_and_scale_update``: reduce the history, ``scale = scaled_max / amax``
        (IEEE fp32 division rounded once; the previous scale where the amax is 0 or not
        finite), roll the history by one (slot 0 zeroed)."""
        hist, scale = (jnp.asarray(v, jnp.float32) for v in state)
        if hist.shape[0] != self.amax_history_len:
            raise ValueError(f"state.amax_history has {hist.shape[0]} slots; the recipe's "
                             f"amax_history_len is {self.amax_history_len}")
        hist = hist.at[0].set(jnp.asarray(amax, jnp.float32))
        red = hist.max(axis=0) if self.amax_compute_algo == "max" else hist[0]
        ok = jnp.isfinite(red) & (red > 0)
        scale = jnp.where(ok, divide_rn(jnp.float32(self.scaled_max), red), scale)
        hist = jnp.roll(hist, -1, axis=0).at[0].set(0)
        return DelayedScalingState(lax.stop_gradient(hist), lax.stop_gradient(scale))


def tensor_amax(x):
    """max(|x|) on the fp32 bits (exact; NaN above inf); no gradient."""
    bits = lax.bitcast_convert_type(times_pow2(x, jnp.int32(0), "f32"), jnp.int32)
    return lax.stop_gradient(
        lax.bitcast_convert_type(jnp.max(bits & 0x7FFFFFFF), jnp.float32))


def _cast(x, scale, fmt):
    """TransformerEngine's cast: ``fp8_satfinite_rn(fl32(x * scale))``."""
    return float_to_fp8(multiply_rn(times_pow2(x, jnp.int32(0), "f32"), scale), fmt,
                                saturate=True)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def scaled_product(a, b, scale, kw):
    """``fl32(T * fl32(fl32(1 / sa) * fl32(1 / sb)))``, T the tensor core's product of
    the casts of a and b with ``scale = (sa, sb)``; ``kw``: matmul's keyword arguments as
    a tuple of pairs (static). Gradients: see :func:`delayed_matmul`."""
    kwd = dict(kw)
    fmt = kwd["operand_format"]
    t = matmul(_cast(a, scale[0], fmt), _cast(b, scale[1], fmt), **kwd)
    inv = divide_rn(jnp.float32(1), scale)  # TransformerEngine's scale_inv = 1 / scale
    return multiply_rn(t, multiply_rn(inv[0], inv[1]))


def _product_fwd(a, b, scale, kw):
    return scaled_product(a, b, scale, kw), (a, b, scale)


def _product_bwd(kw, res, g):
    # Straight-through: matmul's own backward products (current power-of-two scales).
    a, b, scale = res
    _, vjp = jax.vjp(functools.partial(matmul, **dict(kw)), a, b)
    return (*vjp(g), jnp.zeros_like(scale))


scaled_product.defvjp(_product_fwd, _product_bwd)


def delayed_matmul(a: Any, b: Any, state: DelayedScalingState, recipe: DelayedScaling, *,
                   instruction: str | None = None, arch: str = "sm_90",
                   promote_every: int | None = None,
                   mode: str = "exact") -> tuple[jax.Array, DelayedScalingState]:
    """``A @ B`` in fp8 with TransformerEngine's delayed scaling, as a pure function.

    With ``sa, sb = state.scale``: ``qa = cvt.rn.satfinite(fl32(a * sa))`` (likewise b),
    ``T`` the tensor core's product of ``qa @ qb`` (``jaxwarp.matmul`` with the fp8 operands
    as they are; ``promote_every`` as there), and ``D = fl32(T * fl32(fl32(1 / sa) *
    fl32(1 / sb)))``. The new state records ``amax(|a|)`` and ``amax(|b|)`` (of the
    unscaled operands) and is updated by :meth:`DelayedScaling.update`. Every step is IEEE
    fp32, rounded once, on the bits. Gradients: straight through the casts, the backward
    products those of ``jaxwarp.matmul`` (its per-tensor current power-of-two scales);
    the state has none. This deviates from TransformerEngine, which also gives the
    gradients delayed scales from their own amax history: a ``custom_vjp`` cannot return
    a new state from the backward pass without threading it through the caller's
    gradient.

    Args:
        a: (M, K) floats.
        b: (K, N) floats.
        state: a :class:`DelayedScalingState` with 2 scales (a's, b's).
        recipe: the static :class:`DelayedScaling` settings.
        instruction, arch, promote_every, mode: as in ``jaxwarp.matmul`` (fp32
            accumulator).

    Returns:
        ``(D, new_state)``: D (M, N) fp32.

    Raises:
        ValueError: a state of the wrong shape, or what ``jaxwarp.matmul`` refuses.

    Example:
        >>> r = jaxwarp.fp8.DelayedScaling(amax_history_len=4)
        >>> s = r.init()
        >>> a = jnp.full((64, 32), 0.01); b = jnp.full((32, 8), 1000.0)
        >>> d, s = jaxwarp.fp8.delayed_matmul(a, b, s, r)  # unit scales: b saturates at 448
        >>> float(d[0, 0]), s.scale  # the next step's scales: 448 / amax
        (140.0, Array([4.48e+04, 4.48e-01], dtype=float32))
        >>> float(jaxwarp.fp8.delayed_matmul(a, b, s, r)[0][0, 0])  # 32 * 0.01 * 1000
        319.9999694824219
    """
    if not isinstance(recipe, DelayedScaling):
        raise TypeError(f"recipe must be a jaxwarp.fp8.DelayedScaling, got {recipe!r}")
    a, b = checks.array_args(a=a, b=b)
    if not isinstance(state, DelayedScalingState):
        raise TypeError(f"state must be a jaxwarp.fp8.DelayedScalingState, got "
                        f"{type(state).__name__}")
    want = (recipe.amax_history_len, 2)
    if tuple(jnp.shape(state.amax_history)) != want or tuple(jnp.shape(state.scale)) != (2,):
        raise ValueError(f"state must hold an amax_history of shape {want} and 2 scales "
                         f"(a's and b's), got {tuple(jnp.shape(state.amax_history))} and "
                         f"{tuple(jnp.shape(state.scale))}; use recipe.init()")
    kw = (("operand_format", recipe.fp8_format), ("instruction", instruction), ("arch", arch),
          ("promote_every", promote_every), ("mode", mode))
    scale = jnp.asarray(state.scale, jnp.float32)
    d = scaled_product(a, b, scale, kw)
    amax = jnp.stack([tensor_amax(a), tensor_amax(b)])
    return d, recipe.update(state, amax)
