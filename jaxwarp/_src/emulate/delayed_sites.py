"""Delayed scaling in ``emulate``: TransformerEngine's ``DelayedScaling`` for every product.

``emulate(fn, operand_format="e4m3", scaling=jaxwarp.fp8.DelayedScaling(...))`` runs each
emulated product as :func:`jaxwarp.fp8.delayed_matmul` does, with its own amax history
and scales: a *site*. The sites are the emulated products in the order the interpreter
meets them in the program's jaxpr (the equation order, jit bodies inlined), which is the
same on every call with the same argument shapes; site ``i`` reads and writes entry ``i``
of the state. JAX is pure, so the state is threaded through the call:

    f = emulate(fn, operand_format="e4m3", scaling=recipe)
    out, state = f(*args)                        # TE's initial buffers (unit scales)
    out, state = f(*args, scaling_state=state)   # the next step

``state`` is a tuple of :class:`~jaxwarp._src.recipes.delayed.DelayedScalingState`, one
per site (2 scales: the left and the right operand's). A batched product (``vmap`` or a
batch dimension of ``dot_general``) and a grouped convolution are one site: one amax
over the whole operand, as one TE fp8 tensor. Gradients flow through ``out`` as
``delayed_matmul``'s do (straight through the casts, backward products those of
``jaxwarp.matmul``); the state has none.

A product inside ``scan``, ``while_loop``, ``cond``, ``custom_jvp`` / ``custom_vjp`` or
``shard_map`` would need its state carried through that construct: such products are
unsupported (``UnsupportedProductError``, or run unemulated with
``on_unsupported="skip"``). ``jit`` and ``checkpoint`` bodies are evaluated inline (the
values are the same; ``checkpoint``'s rematerialization is not kept).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax.extend import core as jcore

from jaxwarp._src.emulate.interpreter import Interpreter, contains_product, join_names
from jaxwarp._src.emulate.settings import MARKER, Settings, check_format
from jaxwarp._src.recipes.delayed import (
    DelayedScaling,
    DelayedScalingState,
    scaled_product,
    tensor_amax,
)

#: Equations whose bodies a delayed-scaling run evaluates inline.
_INLINE = ("jit", "pjit", "checkpoint", "remat2")


def check_scaling(scaling: DelayedScaling, operand_format: Any, accumulator: str,
                  backward_format: Any, recipe: Any) -> str:
    """emulate's settings with ``scaling=DelayedScaling(...)``: the operand format (the
    recipe's ``fp8_format``), or raises naming the argument."""
    fmt = scaling.fp8_format
    if recipe is not None:
        raise ValueError(f"scaling=DelayedScaling(...) with recipe={recipe!r}: give one; "
                         f"allowed: recipe=None")
    if operand_format is not None:
        if check_format(operand_format, "operand_format") != fmt:
            raise ValueError(f"operand_format={operand_format!r} with scaling="
                             f"DelayedScaling(fp8_format={fmt!r}): the recipe's format is "
                             f"the operand format; allowed: operand_format={fmt!r} or None")
    if accumulator != "f32":
        raise ValueError(f"accumulator={accumulator!r} with scaling=DelayedScaling(...): "
                         f"delayed scaling accumulates in fp32; allowed: 'f32'")
    if backward_format is not None:
        raise ValueError(f"backward_format={backward_format!r} with scaling="
                         f"DelayedScaling(...): the backward products are jaxwarp.matmul's "
                         f"own; allowed: backward_format=None")
    return fmt


def check_state(state: Any, recipe: DelayedScaling) -> tuple | None:
    """The ``scaling_state`` argument: None, or a tuple of DelayedScalingState."""
    if state is None:
        return None
    if not isinstance(state, (tuple, list)) or not all(
            isinstance(s, DelayedScalingState) for s in state):
        raise TypeError(f"scaling_state must be None or the tuple of "
                        f"jaxwarp.fp8.DelayedScalingState the emulated function returned, "
                        f"got {type(state).__name__}")
    want = ((recipe.amax_history_len, 2), (2,))
    for i, s in enumerate(state):
        got = (tuple(jnp.shape(s.amax_history)), tuple(jnp.shape(s.scale)))
        if got != want:
            raise ValueError(f"scaling_state[{i}] holds an amax_history of shape {got[0]} "
                             f"and scales of shape {got[1]}; the recipe's are {want[0]} and "
                             f"{want[1]} (amax_history_len={recipe.amax_history_len})")
    return tuple(state)


class DelayedInterpreter(Interpreter):
    """The interpreter with each emulated product a delayed-scaling site."""

    def __init__(self, cfg: Settings, recipe: DelayedScaling, state: tuple | None):
        super().__init__(cfg)
        self.recipe, self.state = recipe, state
        self.new_state: list[DelayedScalingState] = []

    def gemm(self, x, y, batched: bool):
        i = len(self.new_state)
        if self.state is None:
            st = self.recipe.init(2)
        elif i < len(self.state):
            st = self.state[i]
        else:
            raise ValueError(f"scaling_state has {len(self.state)} entries, but the "
                             f"function has more emulated products; pass the state this "
                             f"function returned (or None for the initial one)")
        M, K = x.shape[-2:]
        N = y.shape[-1]
        p = self.cfg.pad_multiple
        Mp, Np, Kp = (-(-d // p) * p for d in (M, N, K))
        lead = [(0, 0)] * (x.ndim - 2)
        xp = jnp.pad(x, lead + [(0, Mp - M), (0, Kp - K)])
        yp = jnp.pad(y, lead + [(0, Kp - K), (0, Np - N)])
        c = self.cfg
        kw = (("operand_format", self.recipe.fp8_format), ("instruction", c.instruction),
              ("arch", c.arch), ("promote_every", c.promote_every), ("mode", c.mode),
              ("tile", c.tile))
        scale = jnp.asarray(st.scale, jnp.float32)
        with jax.named_scope(MARKER):
            if batched:
                out = jax.vmap(lambda a, b: scaled_product(a, b, scale, kw))(xp, yp)
            else:
                out = scaled_product(xp, yp, scale, kw)
        amax = jnp.stack([tensor_amax(x), tensor_amax(y)])
        self.new_state.append(self.recipe.update(st, amax))
        return out[..., :M, :N]

    def result_state(self) -> tuple:
        if self.state is not None and len(self.new_state) != len(self.state):
            raise ValueError(f"scaling_state has {len(self.state)} entries, but the "
                             f"function has {len(self.new_state)} emulated products; pass "
                             f"the state this function returned (or None)")
        return tuple(self.new_state)

    def eqn(self, eqn, invals, where):
        name = eqn.primitive.name
        subs = list(jcore.jaxprs_in_params(eqn.params))
        if not subs or not any(contains_product(s) for s in subs):
            return super().eqn(eqn, invals, where)
        if name in _INLINE:
            inner = eqn.params["jaxpr"]
            child = (join_names(where[0], f"{name}({eqn.params.get('name', '')})"), where[1])
            wmask = self.weight_mask(invals)
            if isinstance(inner, jcore.ClosedJaxpr):
                return self.eval(inner.jaxpr, inner.consts, invals, child, weights=wmask)
            return self.eval(inner, (), invals, child, weights=wmask)
        if name in ("closed_call", "core_call"):
            return super().eqn(eqn, invals, where)
        info = self._info(eqn, name, invals, 1, 0, 0, 0, where)
        return self.unsupported(
            eqn, invals, info,
            f"with delayed scaling each product has its own amax history, which a "
            f"product inside {name} would need carried through it (supported: products "
            f"outside loops, conditionals and custom derivative rules; jit and checkpoint "
            f"bodies are inlined)")
