"""emulate's static settings: the allowed values, their checks and the ``Config`` record."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes

from jaxwarp._src.tensorcore import matmul as matmul_mod

INSTRUCTIONS = ("wmma", "mma_sync", "wgmma")
FP8_FORMATS = ("e4m3", "e5m2")  # designed here; need fp8 in jaxwarp.matmul (issue 10)
_FP8_DTYPE = {"e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}
SCALINGS = (None, "tensor")
ON_UNSUPPORTED = ("error", "skip")
# Products that emulate refuses (they are products, but not dot_general's semantics).
OTHER_PRODUCTS = ("ragged_dot", "ragged_dot_general", "ragged_all_to_all", "bcoo_dot_general",
                  "bcoo_dot_general_sampled", "bcsr_dot_general", "bcoo_spdot_general")
PRODUCTS = ("dot_general", "conv_general_dilated")
# Products emitted by emulate itself carry this name scope; an outer emulate leaves them alone.
MARKER = "jaxwarp_emulated"


def matmul_formats() -> tuple[str, ...]:
    return tuple(matmul_mod.DEFAULT_TILE)


def _matmul_params() -> frozenset:
    return frozenset(inspect.signature(matmul_mod.matmul).parameters)


def fmt_max(fmt: str) -> float:
    """Largest finite value of an operand format (ml_dtypes' finfo, the one registry)."""
    dtype = _FP8_DTYPE.get(fmt) or {"f16": jnp.float16, "bf16": jnp.bfloat16,
                                    "tf32": jnp.float32, "f64": jnp.float64}[fmt]
    return float(ml_dtypes.finfo(dtype).max)


@dataclasses.dataclass(frozen=True)
class Config:
    operand_format: str
    accumulator: str
    instruction: str
    arch: str
    mode: str
    tile: tuple[int, int, int] | None
    scaling: str | None
    backward_format: str | None
    promote_every: int | None
    filter: Callable[..., bool] | None
    on_unsupported: str

    @property
    def pad_multiple(self) -> int:
        tile = self.tile or matmul_mod.DEFAULT_TILE.get(self.operand_format)
        return math.lcm(*tile) if tile else 64  # fp8 tiles: k = 32, wgmma m = 64

    @property
    def custom_recipe(self) -> bool:
        """True when emulate's own vjp runs the backward (scales or a gradient format)."""
        return self.scaling is not None or self.backward_format is not None

    def matmul_kwargs(self, fmt) -> dict:
        kw = dict(operand_format=fmt, accumulator=self.accumulator, tile=self.tile,
                  arch=self.arch, mode=self.mode)
        if self.instruction != "wmma":
            kw["instruction"] = self.instruction
        if self.promote_every is not None:
            kw["promote_every"] = self.promote_every
        return kw


def _check_format(fmt: Any, name: str) -> str:
    now = matmul_formats()
    allowed = now + tuple(f for f in FP8_FORMATS if f not in now)
    if isinstance(fmt, jax.core.Tracer) or not isinstance(fmt, str) or fmt not in allowed:
        raise ValueError(f"{name}={fmt!r} is not supported; allowed: {allowed}")
    if fmt not in now:
        raise NotImplementedError(
            f"{name}={fmt!r} needs fp8 support in jaxwarp.matmul (issue 10); "
            f"formats jaxwarp.matmul supports now: {now}"
        )
    return fmt


def make_config(operand_format, accumulator, instruction, arch, mode, tile, filter,
                on_unsupported, scaling, backward_format, promote_every) -> Config:
    operand_format = _check_format(operand_format, "operand_format")
    if backward_format is not None:
        backward_format = _check_format(backward_format, "backward_format")
    if instruction not in INSTRUCTIONS:
        raise ValueError(f"instruction={instruction!r} is not supported; allowed: {INSTRUCTIONS}")
    params = _matmul_params()
    if instruction != "wmma" and "instruction" not in params:
        raise NotImplementedError(
            f"instruction={instruction!r} needs jaxwarp.matmul's instruction argument "
            f"(issue 10); available now: ('wmma',)"
        )
    if scaling not in SCALINGS:
        raise ValueError(f"scaling={scaling!r} is not supported; allowed: {SCALINGS}")
    if promote_every is not None:
        if isinstance(promote_every, bool) or not isinstance(promote_every, int) \
                or promote_every <= 0:
            raise ValueError(f"promote_every must be None or a positive int, got "
                             f"{promote_every!r}")
        if "promote_every" not in params:
            raise NotImplementedError(
                "promote_every needs jaxwarp.matmul's promote_every argument (issue 10)")
    if on_unsupported not in ON_UNSUPPORTED:
        raise ValueError(
            f"on_unsupported={on_unsupported!r} is not supported; allowed: {ON_UNSUPPORTED}")
    if filter is not None and not callable(filter):
        raise TypeError(f"filter must be None or a callable Product -> bool, got {filter!r}")
    if tile is not None:
        if not (isinstance(tile, tuple) and len(tile) == 3
                and all(isinstance(t, int) and t > 0 for t in tile)):
            raise TypeError(f"tile must be None or a static (m, n, k) tuple, got {tile!r}")
    cfg = Config(operand_format, accumulator, instruction, arch, mode, tile, scaling,
                  backward_format, promote_every, filter, on_unsupported)
    # matmul checks the rest (accumulator, arch, mode, tile) with its own table and messages.
    p = cfg.pad_multiple
    dtype = jnp.float64 if operand_format == "f64" else jnp.float32
    for fmt in dict.fromkeys((operand_format, backward_format or operand_format)):
        jax.eval_shape(functools.partial(matmul_mod.matmul, **cfg.matmul_kwargs(fmt)),
                       jax.ShapeDtypeStruct((p, p), dtype), jax.ShapeDtypeStruct((p, p), dtype))
    return cfg
