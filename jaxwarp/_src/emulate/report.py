"""What emulate's filter sees (``Product``) and what its report lists."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax


@dataclasses.dataclass(frozen=True)
class Product:
    """One matrix product of the program, as the filter and the report see it.

    Attributes:
        primitive: ``"dot_general"``, ``"conv_general_dilated"`` or the name of an
            unsupported product primitive.
        lhs_shape, rhs_shape, out_shape: operand and result shapes.
        lhs_dtype, rhs_dtype, out_dtype: dtype names (``"float32"``, ...).
        batch, m, n, k: the GEMM it becomes (``batch`` independent ``m x k @ k x n``
            products; for a convolution ``batch`` is the feature-group count).
        name_stack: the equation's name stack joined with its enclosing calls
            (``jax.named_scope`` names, Flax module paths where Flax sets them,
            ``jit(f)`` names, ``transpose(jvp(...))`` for derivative products).
        context: enclosing primitives, outermost first (``("jit", "scan")``).
        weight: the operand a recipe treats as the weight: ``"lhs"`` or ``"rhs"``, the one
            derived from the parameters under ``scope="linear"``, always ``"rhs"`` under
            ``scope="all"``; None where no operand is a weight (outside ``"linear"``).

    Example:
        >>> a = jnp.ones((16, 32), jnp.float32)
        >>> _, rep = jaxwarp.emulate(lambda x: x @ x.T, operand_format="bf16", report=True)(a)
        >>> p = rep.entries[0].product
        >>> p.primitive, (p.batch, p.m, p.n, p.k), p.lhs_dtype
        ('dot_general', (1, 16, 16, 32), 'float32')
    """

    primitive: str
    lhs_shape: tuple[int, ...]
    rhs_shape: tuple[int, ...]
    lhs_dtype: str
    rhs_dtype: str
    out_shape: tuple[int, ...]
    out_dtype: str
    batch: int
    m: int
    n: int
    k: int
    name_stack: str = ""
    context: tuple[str, ...] = ()
    weight: str | None = None

    @property
    def flops(self) -> int:
        """Multiply-adds times two: ``2 * batch * m * n * k``."""
        return 2 * self.batch * self.m * self.n * self.k


class ProductFilter:
    """A predicate on :class:`Product`: True means emulate this product.

    Filters combine with ``&``, ``|`` and ``~``; any plain callable
    ``Product -> bool`` works as ``filter=`` too.

    Example:
        >>> f = ProductFilter.min_size(k=64) & ~ProductFilter.name_contains("logits")
        >>> f(Product("dot_general", (8, 64), (64, 8), "float32", "float32", (8, 8),
        ...           "float32", 1, 8, 8, 64, "block/logits"))
        False
    """

    def __init__(self, predicate: Callable[[Product], bool], description: str = "filter"):
        self.predicate = predicate
        self.description = description

    def __call__(self, product: Product) -> bool:
        return bool(self.predicate(product))

    def __and__(self, other):
        other = _as_filter(other)
        return ProductFilter(lambda p: self(p) and other(p),
                             f"({self.description} & {other.description})")

    def __or__(self, other):
        other = _as_filter(other)
        return ProductFilter(lambda p: self(p) or other(p),
                             f"({self.description} | {other.description})")

    def __invert__(self):
        return ProductFilter(lambda p: not self(p), f"~{self.description}")

    def __repr__(self):
        return f"ProductFilter({self.description})"

    @classmethod
    def min_size(cls, m: int = 1, n: int = 1, k: int = 1, flops: int = 0) -> ProductFilter:
        """Products with at least these GEMM sizes (small products stay in fp32)."""
        return cls(lambda p: p.m >= m and p.n >= n and p.k >= k and p.flops >= flops,
                   f"min_size(m={m}, n={n}, k={k}, flops={flops})")

    @classmethod
    def name_contains(cls, *substrings: str) -> ProductFilter:
        """Products whose name stack contains any of ``substrings``."""
        return cls(lambda p: any(s in p.name_stack for s in substrings),
                   f"name_contains{substrings!r}")

    @classmethod
    def primitive(cls, *names: str) -> ProductFilter:
        """Products of these primitives (``"dot_general"``, ``"conv_general_dilated"``)."""
        return cls(lambda p: p.primitive in names, f"primitive{names!r}")


def _as_filter(f) -> ProductFilter:
    return f if isinstance(f, ProductFilter) else ProductFilter(f, getattr(f, "__name__", "fn"))


@dataclasses.dataclass(frozen=True)
class ReportEntry:
    """One product of the program and what emulate did with it.

    Attributes:
        product: the :class:`Product`.
        emulated: True if it ran through ``jaxwarp.matmul``.
        operand_format: the format it ran in (None when not emulated).
        reason: why it was not emulated (``"filtered out"``, ``"integer product"``,
            an unsupported dtype or primitive), or ``""``.
        instruction: for a product in a Pallas kernel, the instruction its chain is
            (``"wgmma"``, ``"mma_sync"``, ``"fma"``); None otherwise.
        note: for a product in a Pallas kernel, how its model was derived and its evidence.

    Example:
        >>> a = jnp.ones((16, 32), jnp.float32)
        >>> _, rep = jaxwarp.emulate(lambda x: x @ x.T, operand_format="bf16", report=True)(a)
        >>> e = rep.entries[0]
        >>> e.emulated, e.operand_format, e.reason
        (True, 'bf16', '')
    """

    product: Product
    emulated: bool
    operand_format: str | None
    reason: str = ""
    instruction: str | None = None
    note: str = ""


@dataclasses.dataclass(frozen=True, eq=False)
class EmulationReport:
    """What ``emulate`` did to each product of the program, in program order.

    One entry per product *equation*: a product in a ``scan`` body of length 10
    is listed once (its ``context`` says it is in a scan). Products inside
    ``jaxwarp.matmul``'s own backward rule are not equations of the program;
    ``backward`` says how they run. The report is a pytree with no leaves, so
    ``emulate(..., report=True)`` returns ``(out, report)`` through ``jax.jit``,
    ``jax.vmap`` and ``jax.grad(..., has_aux=True)``.

    Attributes:
        entries: a tuple of :class:`ReportEntry`.
        config: the emulation settings, as a dict.
        backward: how the backward products of emulated products run.

    Example:
        >>> a = jnp.ones((16, 32), jnp.float32); b = jnp.ones((32, 8), jnp.float32)
        >>> def f(x, y):
        ...     return x @ y, x.astype(jnp.int32) @ y.astype(jnp.int32)
        >>> _, rep = jaxwarp.emulate(f, operand_format="bf16", report=True)(a, b)
        >>> len(rep.entries), len(rep.emulated), len(rep.skipped)
        (2, 1, 1)
    """

    entries: tuple[ReportEntry, ...]
    config: tuple[tuple[str, Any], ...]
    backward: str

    @property
    def emulated(self) -> tuple[ReportEntry, ...]:
        return tuple(e for e in self.entries if e.emulated)

    @property
    def skipped(self) -> tuple[ReportEntry, ...]:
        return tuple(e for e in self.entries if not e.emulated)

    @property
    def count(self) -> int:
        """Number of emulated product equations."""
        return len(self.emulated)

    def __str__(self) -> str:
        lines = [f"jaxwarp.emulate: {self.count} of {len(self.entries)} products emulated "
                 f"({', '.join(_settings_text(self.config))})"]
        for e in self.entries:
            p = e.product
            what = f"{e.operand_format}" if e.emulated else f"skipped: {e.reason}"
            if e.emulated and p.weight == "lhs":
                what += " (weight: lhs)"
            if e.instruction is not None:
                what += f" ({e.instruction})"
            lines.append(
                f"  {p.primitive} {p.lhs_dtype}{list(p.lhs_shape)} x {p.rhs_dtype}"
                f"{list(p.rhs_shape)} -> {p.out_dtype}{list(p.out_shape)} "
                f"[{p.batch}x {p.m}x{p.n}x{p.k}] {p.name_stack or '-'}: {what}")
        lines.append(f"  backward: {self.backward}")
        return "\n".join(lines)


def _settings_text(items) -> list[str]:
    """The header's ``name=value`` list: a recipe by its name, in place of the operand
    format and GEMM plan it implies (those are the recipe's fields, not settings)."""
    recipe = dict(items).get("recipe")
    out = []
    for k, v in items:
        if v is None or (recipe is not None and k in ("operand_format", "plan")):
            continue
        out.append(f"recipe={v.name}" if k == "recipe" else f"{k}={v}")
    return out


# A pytree with no leaves: returned through jax.jit, jax.vmap and grad(has_aux=True).
jax.tree_util.register_pytree_node(EmulationReport, lambda r: ((), r), lambda r, _: r)


class UnsupportedProductError(NotImplementedError):
    """A product emulate cannot run through the tensor core (see ``on_unsupported``).

    Example:
        >>> f = jaxwarp.emulate(lambda x: x @ x, operand_format="bf16")
        >>> try:
        ...     f(jnp.ones((4, 4), jnp.complex64))
        ... except jaxwarp.UnsupportedProductError as e:
        ...     print(e)
        jaxwarp.emulate cannot run dot_general with operands complex64[4, 4] ... complex operands
        (no complex tensor-core product). Pass on_unsupported='skip' ...
    """

