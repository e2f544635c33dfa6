"""The switchboard: every option that chooses how jaxwarp computes, in one place.

In the manner of ``jax.config``: named options with a default, the values allowed and a
help text; read at trace time by the layer that owns the choice; set for the process
with :meth:`Config.update`, for a block of code with :meth:`Config.override` (a context
manager: tests and benchmarks), or before the process starts with an environment
variable ``JAXWARP_<NAME>`` (upper case; read once at import). No option changes a bit
of any result: they choose between forms of the same arithmetic (which GEMM backend runs
an exact product, how the block FMA is written out for XLA), so they exist for measuring
and testing. The GEMM layer chooses exact / kernel / native; the arithmetic below it
reads only the options of its own forms.

Options are read when a function is traced: a value changed after a jitted function was
traced takes effect for new traces (``jax.clear_caches()`` drops the old ones).

Example:
    >>> import jaxwarp
    >>> jaxwarp.config.gemm_fused_kernel
    'auto'
    >>> with jaxwarp.config.override(gemm_fused_kernel="off"):
    ...     jaxwarp.config.gemm_fused_kernel
    'off'
    >>> jaxwarp.config.update("gemm_fused_kernel", "sometimes")
    Traceback (most recent call last):
    ...
    ValueError: gemm_fused_kernel='sometimes' is not allowed: one of 'auto', 'on', 'off'
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import os
import types
from collections.abc import Callable, Iterator
from typing import Any

import jax

__all__ = ["Config", "Option", "config", "keyed_jit"]


@dataclasses.dataclass(frozen=True)
class Option:
    """One named option: its default, what is allowed, and what it chooses.

    Attributes:
        name: the option's name (a Python identifier, lower case).
        default: its value until it is updated.
        help: what it chooses, in a sentence or two.
        allowed: the values allowed, or None where ``check`` decides.
        check: for options without ``allowed``: returns the value (normalized) or raises
            ValueError; also parses the environment variable's string.
        layer: the layer of ``jaxwarp._src`` that reads it (docs only).
    """

    name: str
    default: Any
    help: str
    allowed: tuple | None = None
    check: Callable[[Any], Any] | None = None
    layer: str = "gemm"

    @property
    def env(self) -> str:
        return "JAXWARP_" + self.name.upper()

    def validate(self, value: Any) -> Any:
        if self.allowed is not None:
            if any(type(value) is type(a) and value == a for a in self.allowed):
                return value
            shown = ", ".join(repr(a) for a in self.allowed)
            raise ValueError(f"{self.name}={value!r} is not allowed: one of {shown}")
        assert self.check is not None
        return self.check(self.name, value)


def _int_at_least(lo: int) -> Callable[[str, Any], int]:
    def check(name: str, value: Any) -> int:
        if isinstance(value, str):
            try:
                value = int(value, 0)
            except ValueError:
                raise ValueError(f"{name}={value!r} is not allowed: an integer >= {lo}") \
                    from None
        if isinstance(value, bool) or not isinstance(value, int) or value < lo:
            raise ValueError(f"{name}={value!r} is not allowed: an integer >= {lo}")
        return int(value)
    return check


def _seconds_or_none(name: str, value: Any) -> float | None:
    if isinstance(value, str):
        if value.lower() == "none":
            return None
        try:
            value = float(value)
        except ValueError:
            raise ValueError(f"{name}={value!r} is not allowed: seconds >= 0, or None") \
                from None
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise ValueError(f"{name}={value!r} is not allowed: seconds >= 0, or None")
    return float(value)


_AUTO_ON_OFF = ("auto", "on", "off")

#: Every option, grouped by the layer that reads it. One fact, one home: the defaults and
#: the reasons for them live here, and the code that reads an option says only what it does.
OPTIONS: tuple[Option, ...] = (
    # --- gemm: which backend runs an exact product.
    # Read at trace time; the library's own jitted functions are keyed on every option
    # (keyed_jit), a user's jax.jit is not: jax.clear_caches() after changing one.
    Option("gemm_shared", "auto", allowed=("auto", "off"), help=(
        "Exact products through a few shared executables per instruction, outside the "
        "calling program: 'auto' (on the CPU backend with one device, for products without "
        "promotion or block scales; on a GPU, bf16's out-of-range branch beside the fused "
        "kernel) or 'off' (the k loop inline in every calling program).")),
    Option("gemm_promote_after", 0.5, check=_seconds_or_none, help=(
        "Seconds the calls of one product may spend in the shared blocks before a background "
        "thread compiles that product's whole k loop as its own executable (the rent-or-buy "
        "rule: about what such a compile costs on the CPU); a recipe's product (recipe_shared) "
        "likewise, its quantizers and chain. None: never.")),
    Option("gemm_fused_kernel", "auto", allowed=_AUTO_ON_OFF, help=(
        "Exact f16 / bf16 / tf32 / fp8 chains with an fp32 accumulator as one fused Pallas "
        "kernel per output tile: 'auto' (on a GPU, for the datapaths the kernel models, sm_70 "
        "to sm_120), 'on' (also off the GPU, in Pallas' interpreter: for tests) or 'off'.")),
    Option("gemm_fused_min_macs", 1 << 24, check=_int_at_least(0), help=(
        "Multiply-adds from which 'auto' takes the fused kernel where bf16's general branch "
        "is XLA's loop (gemm_shared='off'), and for exact mma calls (all tiles of a call "
        "together); below, small products keep XLA's k loop alone.")),
    Option("gemm_kernel_rolled_below", 1 << 24, check=_int_at_least(0), help=(
        "Products of fewer multiply-adds take the fused kernel with a loop over a k step's "
        "products (gemm_kernel_unroll_small of them an iteration): there the compile is what "
        "a user waits for, not the run.")),
    # gemm_kernel_unroll_small: one product an iteration: on an H100 the study
    # transformer's exact step reached its first step in 3.7 s against 4.5 s with 2 and
    # 6.1 s with 4, its step 5-6 ms in each (docs/compile_time.md).
    Option("gemm_kernel_unroll_small", 1, allowed=(1, 2, 4, 8, 16), help=(
        "Products written out per iteration of the small products' kernel loop (16: no "
        "loop).")),
    # gemm_kernel_backend: JAX 0.11 deprecates Pallas' Triton backend; on an H100 (JAX
    # 0.11.2) the Mosaic GPU kernel (fused_mgpu) gave the Triton kernel's bits in every
    # check and ran 4096^3 bf16 at 4.4 TFLOP/s, f16 at 3.4, against about 5.0: 'auto'
    # stays on Triton where JAX has it.
    Option("gemm_kernel_backend", "auto", allowed=("auto", "triton", "mosaic_gpu"), help=(
        "Which Pallas backend runs the fused exact kernel (the same bits): 'auto' (Triton, "
        "the faster on an H100; where the installed JAX has no Triton backend, Mosaic GPU "
        "for the products it models and XLA's exact loop for the rest), 'triton' or "
        "'mosaic_gpu' (Mosaic GPU: f16, bf16 in fp32's range under a range check, sm_90's "
        "datapath; an error where it cannot run the product).")),
    # gemm_exact_tensor_cores: off by default, so that exact mode runs the model's own
    # arithmetic on every backend (what the GPU conformance runs check) unless asked.
    Option("gemm_exact_tensor_cores", "off", allowed=("off", "auto"), help=(
        "'auto': an exact product (matmul, and mma's tiles) whose chain has the datapath "
        "of the Hopper GPU's own wgmma (the catalogue's Datapath and instruction k equal, "
        "as for sm_90 and sm_100a f16 / bf16), or is sm_90's fp8 mma.sync (two f16 HMMAs "
        "and an FADD), runs on that GPU's tensor cores: the model's bits, at the tensor "
        "cores' speed. 'off': the model's own arithmetic (the fused kernel or XLA's k "
        "loop).")),
    # gemm_tiles_backend: JAX 0.11 deprecates Pallas' Triton backend; 'auto' keeps the
    # Triton kernel (the faster on an H100: 1.15 against 0.80 of XLA for e4m3 tiles) where
    # it takes the tiles.
    Option("gemm_tiles_backend", "auto", allowed=("auto", "triton", "mosaic_gpu"), help=(
        "Which Pallas backend runs exact mma's tiles on the tensor cores "
        "(gemm_exact_tensor_cores='auto'; the same bits): 'auto' (Triton where the "
        "installed JAX has its backend and its layout takes the tiles; else Mosaic GPU "
        "where its kernel does: shapes such as n = 24, or a JAX without Triton), "
        "'triton' or 'mosaic_gpu' (tiles that backend cannot run keep the model's "
        "arithmetic: the Mosaic GPU kernel takes one operand format and not sm_90's fp8 "
        "mma.sync).")),
    Option("gemm_kernel_any_range_below", 1 << 24, check=_int_at_least(0), help=(
        "Products of fewer multiply-adds run one fused kernel exact for every operand value, "
        "with no range check and no cond in the calling program.")),
    # native_backend: JAX 0.11 deprecates Pallas' Triton backend; 'auto' takes the kernel
    # of the backend JAX keeps where it was measured to run and to be fastest
    # (native_mgpu.auto_fits).
    Option("native_backend", "auto", allowed=("auto", "mosaic_gpu", "triton"), help=(
        "Which Pallas backend runs mode='native' (the same chain, the same bits): 'auto' "
        "(Mosaic GPU where it was measured the faster on an H100: f16, bf16 and e4m3 "
        "operands, M and N multiples of 128; everywhere it runs if JAX has no Triton "
        "backend; else Triton), 'mosaic_gpu' or 'triton' (an error where that backend "
        "cannot run the product).")),
    Option("native_mgpu_tile", "auto", allowed=("auto", "128x256", "128x128"), help=(
        "Output tile of the Mosaic GPU native kernel (the same bits, another speed): 'auto' "
        "(128x256 with 3 stages of 64-element k blocks, 128x128 with promotion), "
        "'128x256' or '128x128' (4 stages).")),
    Option("native_mgpu_order", "snake", allowed=("snake", "grid", "persistent"), help=(
        "Order in which the Mosaic GPU native kernel's CTAs take their output tiles (the "
        "same bits, another speed): 'snake' (one CTA a tile, in plgpu.planar_snake order: "
        "bands of 8 tile rows, for L2 reuse), 'grid' (one CTA a tile, the grid's order) or "
        "'persistent' (one CTA an SM, looping over the tiles in snake order).")),
    # --- recipes: where a block-scaled recipe's products run (the same bits).
    Option("recipe_shared", "auto", allowed=("auto", "off"), layer="recipes", help=(
        "A block-scaled recipe's products (quantizers, Hadamard transform, exact chain) "
        "through a few shared executables outside the calling program, one host callback "
        "per product: 'auto' (on the CPU backend with one device, not in checked mode) or "
        "'off' (inline in every calling program).")),
    # --- arithmetic: how the block FMA is written out for XLA (the same bits).
    Option("arith_in_range_path", "auto", allowed=_AUTO_ON_OFF, layer="arithmetic", help=(
        "Whether bf16 / tf32 operands in fp32's range take the fast path's arithmetic "
        "(chosen by a cond, or on the host for the CPU's shared executables): 'auto' (by "
        "size and backend; the shared executables check every call), 'on' or 'off'.")),
    Option("arith_in_range_min_macs", 1 << 22, check=_int_at_least(0), layer="arithmetic",
           help="Outputs times k of one call from which 'auto' takes the in-range path on "
                "the CPU."),
    Option("arith_in_range_min_macs_accelerator", 1 << 30, check=_int_at_least(0),
           layer="arithmetic",
           help="The same for matmul's one cond per product on an accelerator."),
    Option("arith_store_decoded", "auto", allowed=_AUTO_ON_OFF, layer="arithmetic", help=(
        "Whether decoded operands are stored before the blocks read them: 'auto' (by how "
        "often each element is used), 'on' or 'off'.")),
    Option("arith_fast_store_reuse", 64, check=_int_at_least(0), layer="arithmetic",
           help="Uses per operand element from which the fast path stores its decoded "
                "operands."),
    Option("arith_general_store_reuse_max", 1024, check=_int_at_least(0), layer="arithmetic",
           help="Uses per operand element up to which (exclusive) the general path stores "
                "its decoded operands."),
    # arith_block_form: on the 2-core CPU (jax 0.10.2, 2026-11-26) "reduce" cut the HLO
    # of the study transformer's exact step by 26% but its compile time by under 10%, and
    # ran that step 2.7x slower (a 256^3 bf16 GEMM ran 2x faster); "rolled" cut that HLO
    # by 25%, its trace and lower time by a third, not its compile time, and ran the step
    # 1.7x slower (the loops' bodies are kernels of their own); on the H100 (jax 0.11.2)
    # "rolled" compiled that step in 10.9 s instead of 16.3 s but ran it 12x slower
    # (53 ms, the loops' iterations kernel launches): "unrolled" stays the default
    # (``benchmarks/compile_time.py --block-form`` measures the forms).
    Option("arith_block_form", "unrolled", allowed=("unrolled", "rolled", "reduce"),
           layer="arithmetic", help=(
               "How one block FMA is written for XLA: 'unrolled' (the default: fastest "
               "steps), 'rolled' (loops: smaller programs, slower steps) or 'reduce'.")),
    # --- warp: how warp_kernel writes a warp program in its Pallas kernel.
    # warp_kernel_backend: JAX 0.11 deprecates Pallas' Triton backend; the Mosaic GPU
    # kernel runs a warp as a warp (shfl.sync, vote.sync.ballot).
    Option("warp_kernel_backend", "auto", allowed=("auto", "triton", "mosaic_gpu"),
           layer="warp", help=(
               "Which Pallas backend runs warp_kernel (the same bits): 'auto' (Mosaic GPU "
               "where its walk runs the program, else Triton while the installed JAX ships "
               "it), 'triton' (one-hot and register-move forms) or 'mosaic_gpu' (each lane "
               "a thread: a shuffle is "
               "shfl.sync, a ballot vote.sync.ballot, a scatter a store to shared memory; "
               "float products and conversions run vmap).")),
    Option("warp_kernel_output_scatter", "store", allowed=("store", "onehot"), layer="warp",
           help=(
               "How warp_kernel writes an output that a scatter sets (indices declared "
               "unique): 'store' (two masked stores to computed slots, as a GPU program "
               "stores) or 'onehot' (the scatter's value as a one-hot selection over the "
               "lanes, then a plain store); the same bits.")),
)


def _parse_env(option: Option, raw: str) -> Any:
    """An environment variable's string as the option's type (ints where the allowed
    values are ints; ``check`` parses strings itself)."""
    if option.allowed is not None and all(type(a) is int for a in option.allowed):
        try:
            return int(raw, 0)
        except ValueError:
            return raw  # validate's message names the allowed values
    return raw


class Config:
    """The library's options (:meth:`options` lists them; docs/config.md describes them):
    read as attributes, set with :meth:`update` or :meth:`override`. ``jaxwarp.config`` is
    the one instance."""

    def __init__(self, options: tuple[Option, ...]):
        self._options = {o.name: o for o in options}
        self._values: dict[str, Any] = {}
        for o in options:
            raw = os.environ.get(o.env)
            self._values[o.name] = o.default if raw is None else o.validate(_parse_env(o, raw))
        # Overrides of this context: a mapping never mutated (override sets a new one).
        self._scoped: contextvars.ContextVar[types.MappingProxyType] = contextvars.ContextVar(
            "jaxwarp_config", default=types.MappingProxyType({}))

    def _option(self, name: str) -> Option:
        try:
            return self._options[name]
        except KeyError:
            raise AttributeError(
                f"jaxwarp.config has no option {name!r}; the options are "
                f"{', '.join(sorted(self._options))}") from None

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        self._option(name)
        scoped = self._scoped.get()
        return scoped[name] if name in scoped else self._values[name]

    def __setattr__(self, name: str, value: Any) -> None:
        if name.startswith("_"):
            object.__setattr__(self, name, value)
            return
        raise AttributeError(f"set options with jaxwarp.config.update({name!r}, value) or "
                             f"jaxwarp.config.override({name}=value)")

    def read(self, name: str) -> Any:
        """The value of option ``name`` now (the innermost override, else the global)."""
        return getattr(self, name)

    def update(self, name: str, value: Any) -> None:
        """Set option ``name`` for the process (as ``jax.config.update``).

        Raises:
            AttributeError: no option of that name.
            ValueError: the value is not allowed (the message lists what is).
        """
        self._values[name] = self._option(name).validate(value)

    @contextlib.contextmanager
    def override(self, **values: Any) -> Iterator[None]:
        """Set options inside a ``with`` block (this thread and context only)."""
        checked = {n: self._option(n).validate(v) for n, v in values.items()}
        token = self._scoped.set(types.MappingProxyType({**self._scoped.get(), **checked}))
        try:
            yield
        finally:
            self._scoped.reset(token)

    def snapshot(self) -> tuple[tuple[str, Any], ...]:
        """Every option's value now, as a hashable tuple (a static argument of the
        library's own jitted functions, so that their caches are keyed on the options)."""
        return tuple(self.values().items())

    def options(self) -> tuple[Option, ...]:
        """Every option (its ``name``, ``default``, ``help``, ``allowed`` values, ``env``
        variable), in a fixed order."""
        return tuple(self._options.values())

    def values(self) -> dict[str, Any]:
        """Every option's value now, by name."""
        return {n: getattr(self, n) for n in self._options}

    def describe(self) -> str:
        """A Markdown table of the options: name, default, allowed, what it chooses."""
        rows = ["| option | default | allowed | layer | what it chooses |",
                "|---|---|---|---|---|"]
        for o in self._options.values():
            allowed = (", ".join(f"`{a!r}`" for a in o.allowed) if o.allowed is not None
                       else "see help")
            rows.append(f"| `{o.name}` | `{o.default!r}` | {allowed} | {o.layer} | {o.help} |")
        return "\n".join(rows)

    def __repr__(self) -> str:
        inner = ", ".join(f"{n}={v!r}" for n, v in self.values().items())
        return f"jaxwarp.config({inner})"

    def __dir__(self):
        return [*super().__dir__(), *self._options]


#: The one switchboard (public as ``jaxwarp.config``).
config = Config(OPTIONS)


def keyed_jit(fun: Callable | None = None, **jit_kwargs: Any) -> Callable:
    """``jax.jit(fun, **jit_kwargs)`` whose cache is keyed on the options as well: every
    call passes :meth:`Config.snapshot` as a static argument, and the trace reads the
    options of that snapshot. For the library's internal jitted functions, which a
    changed option must trace again (a user's own ``jax.jit`` around jaxwarp is keyed
    without them: ``jax.clear_caches()`` after changing an option). Usable as a
    decorator, with or without arguments.

    Example:
        >>> f = keyed_jit(lambda x: x + 1 if config.arith_block_form == "unrolled" else x)
        >>> int(f(1)), int(f(1))
        (2, 2)
        >>> with config.override(arith_block_form="rolled"):
        ...     int(f(1))
        1
    """
    if fun is None:
        return functools.partial(keyed_jit, **jit_kwargs)
    names = jit_kwargs.pop("static_argnames", ())
    names = (names,) if isinstance(names, str) else tuple(names)

    def traced(*args, _jaxwarp_options, **kwargs):
        with config.override(**dict(_jaxwarp_options)):
            return fun(*args, **kwargs)

    # (the program's name is fun's: jit_<name> in HLO dumps and profiles)
    traced.__name__ = getattr(fun, "__name__", traced.__name__)
    traced.__qualname__ = getattr(fun, "__qualname__", traced.__qualname__)

    jitted = jax.jit(traced, static_argnames=(*names, "_jaxwarp_options"), **jit_kwargs)

    @functools.wraps(fun)
    def call(*args, **kwargs):
        return jitted(*args, _jaxwarp_options=config.snapshot(), **kwargs)

    call.clear_cache = jitted.clear_cache
    return call
