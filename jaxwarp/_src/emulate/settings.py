"""emulate's static settings: the allowed values, their checks and the ``Settings`` record
(emulate's arguments, checked; the switchboard of backends is ``jaxwarp.config``)."""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxwarp._src import checks
from jaxwarp._src.catalogue import mfma_table
from jaxwarp._src.catalogue.isa import FP8_TYPES
from jaxwarp._src.gemm import matmul_tiles, mfma_gemm
from jaxwarp._src.gemm.matmul import MODES
from jaxwarp._src.numerics import formats
from jaxwarp._src.pallas.model import kernel_matmul
from jaxwarp._src.recipes import recipe as recipes

INSTRUCTIONS = matmul_tiles.INSTRUCTIONS
OPERAND_FORMATS = matmul_tiles.OPERAND_FORMATS
SCALINGS = (None, "tensor", "blockwise", "blockwise_pow2")
#: DeepSeek-V3's fine-grained scaling (fp32 scales; TransformerEngine's power-of-two ones).
BLOCK_SCALINGS = ("blockwise", "blockwise_pow2")
#: Operand formats per-tensor scaling is for: scaled to the format's largest value, two
#: operands' products and their K-long sums stay finite in the fp32 accumulator.
SCALED_FORMATS = ("f16", *FP8_TYPES)
ON_UNSUPPORTED = ("error", "skip")
#: Which products a recipe covers: ``"linear"`` (TransformerEngine's: a product one of
#: whose operands is a weight, i.e. derived from the parameters alone) or ``"all"``.
SCOPES = ("linear", "all")
# Products that emulate refuses (they are products, but not dot_general's semantics).
OTHER_PRODUCTS = ("ragged_dot", "ragged_dot_general", "ragged_all_to_all", "bcoo_dot_general",
                  "bcoo_dot_general_sampled", "bcsr_dot_general", "bcoo_spdot_general")
PRODUCTS = ("dot_general", "conv_general_dilated")
#: The error of a product outside a Pallas kernel when emulate has no operand format.
NO_FORMAT = ("emulate needs operand_format= (e.g. 'bf16', 'e4m3') or recipe= for products "
             "outside Pallas kernels (operand_format=None means each Pallas kernel "
             "product's own dtype)")
# Products emitted by emulate itself carry this name scope; an outer emulate leaves them alone.
MARKER = "jaxwarp_emulated"


@dataclasses.dataclass(frozen=True)
class Settings:
    operand_format: str
    accumulator: str
    instruction: str | None
    arch: str
    mode: str
    tile: tuple[int, int, int] | None
    scaling: str | None
    backward_format: str | None
    promote_every: int | None
    filter: Callable[..., bool] | None
    on_unsupported: str
    recipe: Any = None  # a block-scaled recipe (recipes.Recipe) and its GEMM plan
    plan: Any = None
    scope: str = "all"  # SCOPES
    params_argnums: tuple[int, ...] | None = None  # scope "linear": the parameter arguments

    @property
    def kernel_arch(self) -> str:
        """The target of a Pallas kernel's products (``sm_90`` is the H100's ``sm_90a``)."""
        return "sm_90a" if self.arch == "sm_90" else self.arch

    @property
    def pad_multiple(self) -> int:
        if self.instruction == "mfma":  # the MFMA GEMM pads to its blocks itself
            return 1
        return math.lcm(*(self.tile or matmul_tiles.DEFAULT_TILE[self.operand_format]))

    @property
    def custom_recipe(self) -> bool:
        """True when emulate's own vjp runs the backward (scales or a gradient format)."""
        return self.scaling is not None or self.backward_format is not None

    def matmul_kwargs(self, fmt) -> dict:
        return dict(operand_format=fmt, accumulator=self.accumulator, tile=self.tile,
                    arch=self.arch, mode=self.mode, instruction=self.instruction,
                    promote_every=self.promote_every)


def check_format(fmt: Any, name: str) -> str:
    """The operand format ``fmt`` as matmul's name: a name, an alias (``"fp16"``) or a
    dtype (``jnp.bfloat16``, ``np.float16``, ``ml_dtypes.float8_e4m3fn``)."""
    if not isinstance(fmt, (str, jax.core.Tracer)):
        try:
            fmt = np.dtype(fmt).name  # a dtype: its name is one of formats.ALIASES
        except TypeError:
            pass
    if isinstance(fmt, str):
        fmt = formats.ALIASES.get(fmt, fmt)
    if isinstance(fmt, jax.core.Tracer) or not isinstance(fmt, str) \
            or fmt not in OPERAND_FORMATS:
        raise ValueError(f"{name}={fmt!r} is not supported; allowed: {OPERAND_FORMATS} "
                         f"(or their dtypes, e.g. jnp.bfloat16)")
    if fmt == "f64":
        checks.require_x64(f"emulate with {name}='f64'")
    return fmt


def check_scope(scope: Any, params_argnums: Any, recipe: Any) -> dict:
    """``scope`` (None: ``"linear"`` with a recipe, else ``"all"``) and, for ``"linear"``,
    ``params_argnums`` as a tuple (Settings fields)."""
    if scope is None:
        scope = "linear" if recipe is not None else "all"
    if not isinstance(scope, str) or scope not in SCOPES:
        raise ValueError(f"scope={scope!r} is not supported; allowed: {SCOPES}, or None "
                         f"('linear' with a recipe, else 'all')")
    nums = params_argnums if isinstance(params_argnums, tuple) else (params_argnums,)
    if not nums or any(isinstance(i, bool) or not isinstance(i, int) or i < 0 for i in nums):
        raise ValueError(f"params_argnums must be a non-negative int or a non-empty tuple of "
                         f"them (the positional arguments holding the parameters), got "
                         f"{params_argnums!r}")
    return dict(scope=scope, params_argnums=tuple(sorted(set(nums))) if scope == "linear"
                else None)


def _recipe_config(recipe, accumulator, instruction, arch, mode, tile, filter,
                   on_unsupported, scaling, backward_format, promote_every,
                   scope: dict) -> Settings:
    """A block-scaled recipe: the recipe sets formats and blocks; ``instruction`` and
    ``arch``, when given, replace the recipe's."""
    for name, v in (("scaling", scaling), ("backward_format", backward_format),
                    ("promote_every", promote_every), ("tile", tile)):
        if v is not None:
            raise ValueError(f"{name}={v!r} with recipe={recipe!r}: the recipe sets the "
                             f"formats, blocks and scales; allowed: {name}=None")
    if accumulator != "f32":
        raise ValueError(f"accumulator={accumulator!r} with a block-scaled recipe: its "
                         f"tensor cores accumulate in fp32; allowed: 'f32'")
    checks.static_choice(mode, "mode", recipes.bsg.MODES)
    r, _ = recipes.check_recipe(recipe, mode)
    if instruction is not None:
        r = r.replace(instruction=checks.static_choice(instruction, "instruction",
                                                       recipes.bsg.INSTRUCTIONS))
    if arch is not None:
        r = r.replace(arch=arch)
    r, plan = recipes.check_recipe(r, mode)
    _check_handling(on_unsupported, filter)
    return Settings(r.name, "f32", r.instruction, r.arch, mode, None, None, None, None, filter,
                    on_unsupported, r, plan, **scope)


def is_mfma(instruction: Any, arch: Any) -> bool:
    """Whether emulate's products are AMD MFMA chains: an AMD target (``gfx908``,
    ``gfx90a``, ``gfx942`` or a CDNA / MI name) or ``instruction="mfma"``."""
    return mfma_gemm.is_amd(arch) or (isinstance(instruction, str) and instruction == "mfma")


def check_mfma_scaling(scaling: Any, instruction: Any, arch: Any) -> None:
    """The scaling recipes (per-tensor, blockwise, delayed) are NVIDIA fp8 recipes: on an
    AMD target, an error naming what is allowed."""
    if scaling is not None and is_mfma(instruction, arch):
        raise ValueError(f"scaling={scaling!r} with arch={arch!r} (instruction='mfma'): the "
                         f"fp8 scaling recipes are modelled on the NVIDIA targets only; "
                         f"allowed: scaling=None")


def _mfma_settings(operand_format, accumulator, instruction, arch, mode, tile, scaling,
                   backward_format, promote_every, recipe) -> tuple:
    """emulate on an AMD matrix core: every product ``matmul(..., instruction="mfma")``
    (``mfma_gemm.check`` checks the format, accumulator, target and mode). Returns the
    normalized (operand_format, accumulator, instruction, arch, backward_format)."""
    gen = mfma_table.generation(mfma_gemm.DEFAULT_ARCH if arch is None else arch)
    arch = mfma_gemm.DEFAULT_ARCH if arch is None else arch
    allowed = tuple(mfma_gemm.GEMM_INSTRUCTIONS[gen])
    if not (instruction is None or (isinstance(instruction, str) and instruction == "mfma")):
        raise ValueError(f"instruction={instruction!r} with arch={arch!r}: an AMD matrix core "
                         f"({gen}) issues MFMA; allowed: 'mfma' or None")
    if recipe is not None:
        raise ValueError(f"recipe={recipe!r} with arch={arch!r}: the {gen} matrix cores "
                         f"(MFMA) have no block-scaled instructions; allowed: recipe=None "
                         f"and operand_format= one of {allowed}")
    check_mfma_scaling(scaling, "mfma", arch)
    for name, v in (("tile", tile), ("promote_every", promote_every)):
        if v is not None:
            raise ValueError(f"{name}={v!r} with arch={arch!r}: an MFMA GEMM chains "
                             f"{gen}'s 32x32 blocks (16x16 for f64) over all of K; allowed: "
                             f"{name}=None")
    if operand_format is None:
        raise ValueError(f"operand_format=None with arch={arch!r}: Pallas kernels are "
                         f"modelled on the NVIDIA targets only, so every product needs a "
                         f"format; allowed: {allowed}")
    mfma_gemm.check(operand_format, accumulator, arch, mode)
    fmt = mfma_gemm.format_name(operand_format)
    acc = mfma_gemm.format_name(accumulator)
    if backward_format is not None:
        try:
            mfma_gemm.check(backward_format, accumulator, arch, mode)
        except ValueError as e:
            raise ValueError(str(e).replace("operand_format=", "backward_format=", 1)) from None
        backward_format = mfma_gemm.format_name(backward_format)
    if acc == "f64":
        checks.require_x64("emulate with operand_format='f64'")
    return fmt, acc, "mfma", arch, backward_format


def _check_handling(on_unsupported, filter) -> None:
    if on_unsupported not in ON_UNSUPPORTED:
        raise ValueError(
            f"on_unsupported={on_unsupported!r} is not supported; allowed: {ON_UNSUPPORTED}")
    if filter is not None and not callable(filter):
        raise TypeError(f"filter must be None or a callable Product -> bool, got {filter!r}")


def make_config(operand_format, accumulator, instruction, arch, mode, tile, filter,
                on_unsupported, scaling, backward_format, promote_every,
                recipe=None, scope=None, params_argnums=0) -> Settings:
    """Checks emulate's settings; matmul checks the rest with its own tables and messages."""
    scope = check_scope(scope, params_argnums, recipe)
    if is_mfma(instruction, arch):  # an AMD target: no recipe, scaling, tile or promotion
        operand_format, accumulator, instruction, arch, backward_format = _mfma_settings(
            operand_format, accumulator, instruction, arch, mode, tile, scaling,
            backward_format, promote_every, recipe)
        _check_handling(on_unsupported, filter)  # (mfma_gemm.check checked the GEMM's)
        return Settings(operand_format, accumulator, instruction, arch, mode, tile, scaling,
                        backward_format, promote_every, filter, on_unsupported, **scope)
    if recipe is not None:
        if operand_format is not None:
            raise ValueError(f"operand_format={operand_format!r} with recipe={recipe!r}: "
                             f"give one of them (the recipe sets every format)")
        return _recipe_config(recipe, accumulator, instruction, arch, mode, tile, filter,
                              on_unsupported, scaling, backward_format, promote_every, scope)
    arch = matmul_tiles.default_arch(instruction) if arch is None else arch
    if operand_format is not None:  # None: each Pallas kernel product's dtype
        operand_format = check_format(operand_format, "operand_format")
    if backward_format is not None:
        backward_format = check_format(backward_format, "backward_format")
    if instruction is not None and instruction not in INSTRUCTIONS:
        raise ValueError(f"instruction={instruction!r} is not supported; allowed: "
                         f"{INSTRUCTIONS + ('mfma',)}, or None for matmul's default for the "
                         f"format")
    if scaling not in SCALINGS:
        raise ValueError(f"scaling={scaling!r} is not supported; allowed: {SCALINGS}")
    if scaling in BLOCK_SCALINGS:
        for name, fmt in (("operand_format", operand_format),
                          ("backward_format", backward_format)):
            if fmt is not None and fmt not in FP8_TYPES:
                raise ValueError(f"scaling={scaling!r} is for the fp8 formats {FP8_TYPES}; "
                                 f"got {name}={fmt!r}")
        if promote_every not in (None, 128):
            raise ValueError(f"scaling={scaling!r} promotes (and scales) every 128 "
                             f"k-elements; got promote_every={promote_every!r} (use None)")
    elif scaling is not None:
        for name, fmt in (("operand_format", operand_format),
                          ("backward_format", backward_format)):
            if fmt is not None and fmt not in SCALED_FORMATS:
                raise ValueError(
                    f"scaling={scaling!r} is for the operand formats {SCALED_FORMATS}; got "
                    f"{name}={fmt!r} (its range is fp32's: scaling to its largest value "
                    f"would overflow the fp32 accumulator); use scaling=None")
    if promote_every is not None:
        if isinstance(promote_every, bool) or not isinstance(promote_every, int) \
                or promote_every <= 0:
            raise ValueError(f"promote_every must be None or a positive int, got "
                             f"{promote_every!r}")
    _check_handling(on_unsupported, filter)
    if tile is not None:
        if not (isinstance(tile, tuple) and len(tile) == 3
                and all(isinstance(t, int) and t > 0 for t in tile)):
            raise TypeError(f"tile must be None or a static (m, n, k) tuple, got {tile!r}")
    cfg = Settings(operand_format, accumulator, instruction, arch, mode, tile, scaling,
                   backward_format, promote_every, filter, on_unsupported, **scope)
    if operand_format is None:  # matmul checks each kernel product's settings
        checks.static_choice(mode, "mode", MODES)
        return cfg
    p = cfg.pad_multiple
    dtype = jnp.float64 if operand_format == "f64" else jnp.float32
    # A check of the arguments only, on matmul's inline path (kernel_matmul: no GPU kernel
    # is traced, which inside a caller's 64-bit context would not trace; seen under
    # Pallas on a GPU)
    for fmt in dict.fromkeys((operand_format, backward_format or operand_format)):
        jax.eval_shape(functools.partial(kernel_matmul, **cfg.matmul_kwargs(fmt)),
                       jax.ShapeDtypeStruct((p, p), dtype), jax.ShapeDtypeStruct((p, p), dtype))
    return cfg
