"""Block-scaled training recipes of ``emulate(fn, recipe=...)``: MXFP8 and NVFP4.

A :class:`Recipe` is data (its docstring has the table of the three products).

The two recipes (:data:`RECIPES`), following TransformerEngine's documentation of its
``MXFP8BlockScaling`` and ``NVFP4BlockScaling`` recipes and the NVFP4 training paper
(arXiv 2509.25149):

* ``"mxfp8"``: every tensor MXFP8 E4M3 (TransformerEngine's default ``fp8_format``),
  1D blocks of 32 along the contraction axis of each product (no 2D blocks), ue8m0
  scales; the scale rule ``"rceil"`` is cuBLAS / cuDNN's ``quantize_round_up(amax /
  max)``; every rounding to nearest even.
* ``"nvfp4"``: every tensor NVFP4 (e2m1, ue4m3 block scales, an fp32 per-tensor scale);
  activations and gradients in 1x16 blocks, weights in 16x16 2D blocks (the same
  quantized weight serves fprop and dgrad); gradients rounded stochastically; the
  16-point random Hadamard transform on both wgrad operands.

Stochastic rounding and the Hadamard signs draw from a PRNG key given when the
emulated function is called (``f(x, w, rng_key=jax.random.key(0))``): product number
``i`` of the program (in trace order) uses ``fold_in(rng_key, i)``; a product inside a
loop body draws the same bits at every iteration.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from jaxwarp._src import checks
from jaxwarp._src.gemm import block_scale_gemm as bsg
from jaxwarp._src.recipes import shared
from jaxwarp._src.scaling.mx_formats import MX_FORMATS


@dataclasses.dataclass(frozen=True)
class Recipe:
    """A block-scaled training recipe: which format, block and rounding each tensor of a
    linear layer's three products gets, and which tensor core runs them.

    ``jaxwarp.emulate(fn, recipe=...)`` runs every product ``x @ w`` of ``fn`` whose
    operand ``w`` is a weight (computed from the parameters alone: emulate's
    ``scope="linear"``, TransformerEngine's; ``scope="all"`` takes every product, its
    right-hand operand the weight) as a block-scaled GEMM (``jaxwarp.mx.matmul``'s
    arithmetic), each operand quantized along its contraction axis:

    ======================  =======================  =================================
    product                 operands (along)         recipe fields
    ======================  =======================  =================================
    fprop  ``y = x @ w``    x (K), w (K)             activation, weight + weight_block
    dgrad  ``dx = dy @ wT`` dy (N), w (N)            gradient (+ stochastic), weight
    wgrad  ``dw = xT @ dy`` x (M), dy (M)            activation, gradient; both + rht
    ======================  =======================  =================================

    The recipes ``"mxfp8"`` and ``"nvfp4"`` are ``jaxwarp.mx.RECIPES``; docs/microscaling.md
    describes them and their sources.

    Attributes:
      name: a label (reports).
      activation, weight, gradient: formats (keys of ``jaxwarp.mx.MX_FORMATS``) of the
        activation ``x``, the weight ``w`` and the output gradient ``dy``.
      weight_block: the weight's block: None (the format's, 1D along each product's
        contraction axis) or a pair (2D blocks, e.g. ``(16, 16)``).
      scale_rule: the MX scale rule of every tensor (``jaxwarp.mx.SCALE_RULES``), None
        for each format's default.
      stochastic_gradients: round ``dy``'s elements stochastically (``cvt.rs``).
      rht_wgrad: apply the 16-point random Hadamard transform to both wgrad operands.
      instruction: ``"tcgen05"`` (sm_100a) or ``"mma_sync"`` (sm_120a).
      arch: the target, None for the instruction's first.

    Example:
      >>> r = RECIPES["nvfp4"]
      >>> r.weight_block, r.stochastic_gradients, r.rht_wgrad
      ((16, 16), True, True)
      >>> r.replace(instruction="mma_sync").plan("exact").fprop[1].block
      (16, 16)
    """

    name: str
    activation: str
    weight: str
    gradient: str
    weight_block: int | tuple[int, int] | None = None
    scale_rule: str | None = None
    stochastic_gradients: bool = False
    rht_wgrad: bool = False
    instruction: str = "tcgen05"
    arch: str | None = None

    def __post_init__(self):
        for f in ("activation", "weight", "gradient"):
            checks.static_choice(getattr(self, f), f"Recipe.{f}", bsg.GEMM_FORMATS)
        wb = self.weight_block
        pair = isinstance(wb, tuple) and len(wb) == 2
        if not (wb is None or pair or isinstance(wb, int)) or isinstance(wb, bool) or any(
                isinstance(b, bool) or not isinstance(b, int) or b < 1
                for b in (wb if pair else () if wb is None else (wb,))):
            raise ValueError(f"Recipe.weight_block={wb!r} is not supported; allowed: None "
                             f"(the format's 1D block), a positive int, or a pair of "
                             f"positive ints (rows, columns) such as (16, 16)")
        for f in ("stochastic_gradients", "rht_wgrad"):
            checks.static_choice(getattr(self, f), f"Recipe.{f}", (True, False))
        if self.scale_rule is not None:
            for f in {self.activation, self.weight, self.gradient}:
                checks.static_choice(self.scale_rule, "Recipe.scale_rule",
                                     MX_FORMATS[f].scale_rules)

    def replace(self, **kw) -> Recipe:
        """A copy with some fields changed."""
        return dataclasses.replace(self, **kw)

    def plan(self, mode: str) -> bsg.Plan:
        """The GEMM plan of this recipe (``mode``: ``"exact"`` or ``"fast"``)."""
        Q = bsg.Quantizer
        rule, sr, rht = self.scale_rule, self.stochastic_gradients, self.rht_wgrad
        x, g = Q(self.activation, None, rule), Q(self.gradient, None, rule, sr)
        w = Q(self.weight, self.weight_block, rule)
        return bsg.Plan(
            fprop=(x, w), dgrad=(g, w),
            wgrad=(dataclasses.replace(x, rht=rht), dataclasses.replace(g, rht=rht)),
            instruction=self.instruction, arch=self.arch, mode=mode).check()


#: The recipes by name (see the module docstring).
RECIPES: dict[str, Recipe] = {r.name: r for r in (
    Recipe("mxfp8", "mxfp8_e4m3", "mxfp8_e4m3", "mxfp8_e4m3", scale_rule="rceil"),
    Recipe("nvfp4", "nvfp4", "nvfp4", "nvfp4", weight_block=(16, 16),
           stochastic_gradients=True, rht_wgrad=True),
)}


def check_recipe(recipe: Any, mode: str) -> tuple[Recipe, bsg.Plan]:
    """``recipe`` (a name of :data:`RECIPES` or a :class:`Recipe`) and its plan."""
    if isinstance(recipe, str) and recipe in RECIPES:
        recipe = RECIPES[recipe]
    if not isinstance(recipe, Recipe):
        raise ValueError(f"recipe={recipe!r} is not supported; allowed: {tuple(RECIPES)} "
                         f"or a jaxwarp.mx.Recipe")
    return recipe, recipe.plan(mode)


# --------------------------------------------------------------------------------------
# The PRNG key of one emulated call (set while emulate traces the program).

_KEY: contextvars.ContextVar = contextvars.ContextVar("jaxwarp_recipe_key", default=None)


@contextlib.contextmanager
def call_key(key_data):
    """Makes ``key_data`` (a raw uint32 (2,) key, or None) the key of the products traced
    inside, each folding in its own number."""
    token = _KEY.set([key_data, 0])
    try:
        yield
    finally:
        _KEY.reset(token)


def key_arg(key: Any) -> jax.Array:
    """A PRNG key (``jax.random.key(0)``) or a raw uint32 (2,) key as raw key data."""
    if isinstance(key, jax.Array) and jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        if key.shape != ():
            raise ValueError(f"rng_key must be a single PRNG key, got shape {key.shape}")
        return jax.random.key_data(key)
    arr = checks.array_arg(key, "rng_key")
    if arr.dtype != jnp.uint32 or arr.shape != (2,):
        raise TypeError(f"rng_key must be a PRNG key (jax.random.key(0)) or a raw uint32 "
                        f"(2,) key; got dtype {arr.dtype}, shape {tuple(arr.shape)}")
    return arr


def gemm(x: jax.Array, y: jax.Array, plan: bsg.Plan) -> jax.Array:
    """``x @ y`` ((B,)M,K @ (B,)K,N) as the recipe's block-scaled GEMM (float32)."""
    state = _KEY.get()
    x, y = x.astype(jnp.float32), y.astype(jnp.float32)
    key, number = jnp.zeros((2,), jnp.uint32), None
    if state is not None and state[0] is not None:
        key, number = state[0], state[1]
        state[1] += 1
    if shared.applies():  # (the shared executables fold the number in themselves)
        return shared.gemm(x, y, key, plan, number)
    if number is not None:
        key = jax.random.key_data(jax.random.fold_in(jax.random.wrap_key_data(key), number))
    return bsg.gemm(x, y, key, plan)
