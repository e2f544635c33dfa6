"""Run a whole JAX program's matrix products through an emulated tensor core.

``emulate(fn, operand_format=...)`` traces ``fn`` to a jaxpr (``jax.make_jaxpr``)
and evaluates it equation by equation, as ``jax.experimental.checkify`` and
``jax.experimental.jet`` do. Every floating-point ``dot_general`` and
``conv_general_dilated`` is replaced by :func:`jaxwarp.matmul` on the same
numbers; every other equation is bound unchanged. Control flow and wrappers are
entered and rebuilt with their public constructors (``jax.jit``, ``lax.scan``,
``lax.while_loop``, ``lax.switch``, ``jax.checkpoint``, ``jax.shard_map``), so
the emulated program keeps its structure, and ``custom_jvp`` / ``custom_vjp``
calls keep their derivative rules (with the products inside them emulated too).

How a ``dot_general`` becomes a GEMM (the k order is part of the contract)::

    lhs  -> transpose to (batch..., lhs free..., contracting...) -> (B, M, K)
    rhs  -> transpose to (batch..., contracting..., rhs free...) -> (B, K, N)
    D[b] = jaxwarp.matmul(lhs[b], rhs[b])          # vmapped over B when there are batch dims
    D    -> (batch..., lhs free..., rhs free...)   # dot_general's own output order

K is row-major over the contracting dimensions *in the order the dimension
numbers list them* (lhs's contracting dim ``lc[0]`` is the slowest), so the
tensor core's k loop walks that order. M, N and K are zero-padded up to a
multiple of the instruction tile (``lcm`` of its m, n, k) as a predicated tile
load does (CUTLASS fills out-of-bounds elements with zero); zero products and
all-zero k steps leave the fp32 accumulator unchanged, so padding changes no
bit (tested), and the padding also keeps ``matmul``'s backward products on
tile-sized shapes.

``conv_general_dilated`` is the implicit GEMM it is on a GPU: im2col gathers each
output pixel's receptive field into one row, with K ordered
``(kernel spatial..., input channel)`` row-major, i.e. ``(kh, kw, cin)`` for a 2-D
convolution, as CUTLASS's NHWC implicit GEMM iterates it; then
``matmul(patches, filter)`` with batch dimension = feature groups.

Gradients: ``jax.grad`` of an emulated function differentiates the emulated
program; each product is ``matmul``, whose ``custom_vjp`` runs the backward
products ``dA = dD @ B^T`` and ``dB = A^T @ dD`` on the same emulated tensor core
(operands converted again to the operand format). With ``scaling`` or
``backward_format`` set, emulate's own ``custom_vjp`` does the same with the
recipe's scales and gradient format. The im2col gather of a convolution is
differentiated by JAX (its transpose, a scatter-add, runs in fp32 outside the
tensor core: a real dgrad kernel accumulates those sums inside the GEMM).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import itertools
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jax import lax
from jax.extend import core as jcore
from jax.extend import linear_util as lu

from jaxwarp._src.tensorcore import matmul as _matmul_mod

try:  # name stacks on re-bound equations (as jax.core.eval_jaxpr keeps them); optional
    from jax._src import source_info_util as _siu
except ImportError:  # pragma: no cover
    _siu = None

matmul = _matmul_mod.matmul

# ---------------------------------------------------------------------------
# Static configuration
# ---------------------------------------------------------------------------

INSTRUCTIONS = _matmul_mod.INSTRUCTIONS
FP8_FORMATS = _matmul_mod.FP8_FORMATS
_FP8_DTYPE = {"e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}
SCALINGS = (None, "tensor")
ON_UNSUPPORTED = ("error", "skip")
# Products that emulate refuses (they are products, but not dot_general's semantics).
_OTHER_PRODUCTS = ("ragged_dot", "ragged_dot_general", "ragged_all_to_all", "bcoo_dot_general",
                   "bcoo_dot_general_sampled", "bcsr_dot_general", "bcoo_spdot_general")
_PRODUCTS = ("dot_general", "conv_general_dilated")
# Products emitted by emulate itself carry this name scope; an outer emulate leaves them alone.
MARKER = "jaxwarp_emulated"


def _matmul_formats() -> tuple[str, ...]:
    return tuple(_matmul_mod.DEFAULT_TILE)


def _matmul_params() -> frozenset:
    return frozenset(inspect.signature(matmul).parameters)


def _fmt_max(fmt: str) -> float:
    """Largest finite value of an operand format (ml_dtypes' finfo, the one registry)."""
    dtype = _FP8_DTYPE.get(fmt) or {"f16": jnp.float16, "bf16": jnp.bfloat16,
                                    "tf32": jnp.float32, "f64": jnp.float64}[fmt]
    return float(ml_dtypes.finfo(dtype).max)


@dataclasses.dataclass(frozen=True)
class _Config:
    operand_format: str
    accumulator: str
    instruction: str
    arch: str
    mode: str
    tile: tuple[int, int, int] | None
    scaling: str | None
    backward_format: str | None
    promote_every: int | None
    filter: Callable[[Product], bool] | None
    on_unsupported: str

    @property
    def pad_multiple(self) -> int:
        tile = self.tile or _matmul_mod.DEFAULT_TILE.get(self.operand_format)
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
    now = _matmul_formats()
    allowed = now + tuple(f for f in FP8_FORMATS if f not in now)
    if isinstance(fmt, jax.core.Tracer) or not isinstance(fmt, str) or fmt not in allowed:
        raise ValueError(f"{name}={fmt!r} is not supported; allowed: {allowed}")
    if fmt not in now:
        raise NotImplementedError(
            f"{name}={fmt!r} needs fp8 support in jaxwarp.matmul (issue 10); "
            f"formats jaxwarp.matmul supports now: {now}"
        )
    return fmt


def _make_config(operand_format, accumulator, instruction, arch, mode, tile, filter,
                 on_unsupported, scaling, backward_format, promote_every) -> _Config:
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
    cfg = _Config(operand_format, accumulator, instruction, arch, mode, tile, scaling,
                  backward_format, promote_every, filter, on_unsupported)
    # matmul checks the rest (accumulator, arch, mode, tile) with its own table and messages.
    p = cfg.pad_multiple
    dtype = jnp.float64 if operand_format == "f64" else jnp.float32
    for fmt in dict.fromkeys((operand_format, backward_format or operand_format)):
        jax.eval_shape(functools.partial(matmul, **cfg.matmul_kwargs(fmt)),
                       jax.ShapeDtypeStruct((p, p), dtype), jax.ShapeDtypeStruct((p, p), dtype))
    return cfg


# ---------------------------------------------------------------------------
# What the filter sees and what the report lists
# ---------------------------------------------------------------------------


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
    """

    product: Product
    emulated: bool
    operand_format: str | None
    reason: str = ""


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
                 f"({', '.join(f'{k}={v}' for k, v in self.config if v is not None)})"]
        for e in self.entries:
            p = e.product
            what = f"{e.operand_format}" if e.emulated else f"skipped: {e.reason}"
            lines.append(
                f"  {p.primitive} {p.lhs_dtype}{list(p.lhs_shape)} x {p.rhs_dtype}"
                f"{list(p.rhs_shape)} -> {p.out_dtype}{list(p.out_shape)} "
                f"[{p.batch}x {p.m}x{p.n}x{p.k}] {p.name_stack or '-'}: {what}")
        lines.append(f"  backward: {self.backward}")
        return "\n".join(lines)


jax.tree_util.register_pytree_node(EmulationReport, lambda r: ((), r),
                                   lambda r, _: r)


class _Static:
    """Leafless pytree carrying trace-time Python data out of a jitted call."""

    def __init__(self, value):
        self.value = value


jax.tree_util.register_pytree_node(_Static, lambda s: ((), s), lambda s, _: s)


class UnsupportedProductError(NotImplementedError):
    """A product emulate cannot run through the tensor core (see ``on_unsupported``)."""


# ---------------------------------------------------------------------------
# The products
# ---------------------------------------------------------------------------


def _pair(fa: str, fb: str):
    # Mixed fp8 pairs (e5m2 gradient x e4m3 weight) as an (a, b) tuple: the form
    # assumed for issue 10's matmul, which models mma.sync's four fp8 pairings.
    # (Other formats are never mixed: _recipe_bwd converts both to the gradient's.)
    return fa if fa == fb else (fa, fb)


def _tensor_scale(x: jax.Array, fmt: str) -> jax.Array:
    """Current per-tensor scale ``fmt_max / amax(x)`` in fp32 (1 where amax is 0 or not finite).

    Scales are constants to the derivative (``stop_gradient``), as in fp8 training
    recipes: they choose the representation, not the value.
    """
    amax = jnp.max(jnp.abs(x.astype(jnp.float32)))
    scale = jnp.float32(_fmt_max(fmt)) / amax
    scale = jnp.where(jnp.isfinite(scale) & (amax > 0), scale, jnp.float32(1))
    return lax.stop_gradient(scale)


def _raw_product(x, y, fx, fy, cfg: _Config, batched: bool):
    """x @ y (x: (B,)M,K, y: (B,)K,N) through matmul, with the recipe's per-tensor scales."""
    kw = cfg.matmul_kwargs(_pair(fx, fy))
    if cfg.scaling == "tensor":
        sx, sy = _tensor_scale(x, fx), _tensor_scale(y, fy)
        x = x.astype(jnp.float32) * sx
        y = y.astype(jnp.float32) * sy
    mm = functools.partial(matmul, **kw)
    out = jax.vmap(mm)(x, y) if batched else mm(x, y)
    if cfg.scaling == "tensor":
        out = out / (sx * sy).astype(out.dtype)
    return out


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3))
def _recipe_product(x, y, cfg, batched):
    return _raw_product(x, y, cfg.operand_format, cfg.operand_format, cfg, batched)


def _recipe_fwd(x, y, cfg, batched):
    return _recipe_product(x, y, cfg, batched), (x, y)


def _recipe_bwd(cfg, batched, res, g):
    # The recipe's backward: the gradient in backward_format (e5m2 in the hybrid fp8
    # recipe) with its own per-tensor scale, the saved operand in operand_format.
    x, y = res
    f, gf = cfg.operand_format, cfg.backward_format or cfg.operand_format
    if not (f in FP8_FORMATS and gf in FP8_FORMATS):
        f = gf  # no tensor core mixes other formats: both operands in the gradient's format
    g = g.astype(jnp.float32 if g.dtype != jnp.float64 else g.dtype)
    t = (lambda a: jnp.swapaxes(a, -1, -2))
    dx = _raw_product(g, t(y), gf, f, cfg, batched)
    dy = _raw_product(t(x), g, f, gf, cfg, batched)
    return dx.astype(x.dtype), dy.astype(y.dtype)


_recipe_product.defvjp(_recipe_fwd, _recipe_bwd)


def _gemm(x, y, cfg: _Config, batched: bool):
    """(B,)M,K @ (B,)K,N -> (B,)M,N in the accumulator's dtype, zero-padded to the tile."""
    M, K = x.shape[-2:]
    N = y.shape[-1]
    p = cfg.pad_multiple
    Mp, Np, Kp = (-(-d // p) * p for d in (M, N, K))
    lead = [(0, 0)] * (x.ndim - 2)
    if (Mp, Kp) != (M, K):
        x = jnp.pad(x, lead + [(0, Mp - M), (0, Kp - K)])
    if (Kp, Np) != (K, N):
        y = jnp.pad(y, lead + [(0, Kp - K), (0, Np - N)])
    with jax.named_scope(MARKER):
        if cfg.custom_recipe:
            out = _recipe_product(x, y, cfg, batched)
        else:
            mm = functools.partial(matmul, **cfg.matmul_kwargs(cfg.operand_format))
            out = jax.vmap(mm)(x, y) if batched else mm(x, y)
    return out[..., :M, :N]


def _as_float_operand(x):
    # Integer operands of a mixed product are converted to f32 (exact below 2**24),
    # then to the operand format by matmul, as a kernel that widens int8 would.
    return x if jnp.issubdtype(x.dtype, jnp.floating) else x.astype(jnp.float32)


# ---------------------------------------------------------------------------
# The interpreter
# ---------------------------------------------------------------------------


def _aval_struct(aval):
    return jax.ShapeDtypeStruct(aval.shape, aval.dtype, weak_type=aval.weak_type)


def _contains_product(jaxpr) -> bool:
    for eqn in jaxpr.eqns:
        if eqn.primitive.name in _PRODUCTS + _OTHER_PRODUCTS:
            return True
        for sub in jcore.jaxprs_in_params(eqn.params):
            if _contains_product(sub):
                return True
    return False


def _join(*parts: str) -> str:
    return "/".join(p for p in parts if p)


def _is_dynamic(x) -> bool:
    return isinstance(x, (jax.Array, np.ndarray, np.generic))


class _Interpreter:
    def __init__(self, cfg: _Config):
        self.cfg = cfg
        self.entries: list[ReportEntry] = []

    # -- whole functions -------------------------------------------------------------

    def call(self, fn, args, kwargs, where=("", ())):
        """Traces fn(*args, **kwargs) and evaluates it emulated; non-array leaves are static."""
        leaves, treedef = jax.tree_util.tree_flatten((args, kwargs))
        mask = [_is_dynamic(x) for x in leaves]
        dyn = [x for x, m in zip(leaves, mask) if m]
        out_info = {}

        def flat(*dyn_leaves):
            it = iter(dyn_leaves)
            full = [next(it) if m else x for x, m in zip(leaves, mask)]
            a, kw = jax.tree_util.tree_unflatten(treedef, full)
            out = fn(*a, **kw)
            out_leaves, out_tree = jax.tree_util.tree_flatten(out)
            omask = [_is_dynamic(x) or isinstance(x, (bool, int, float, complex))
                     for x in out_leaves]
            out_info["tree"], out_info["mask"] = out_tree, omask
            out_info["static"] = [None if m else x for x, m in zip(out_leaves, omask)]
            return [x for x, m in zip(out_leaves, omask) if m]

        closed = jax.make_jaxpr(flat)(*dyn)
        outs = self.eval(closed.jaxpr, closed.consts, dyn, where)
        it = iter(outs)
        full = [next(it) if m else s for s, m in zip(out_info["static"], out_info["mask"])]
        return jax.tree_util.tree_unflatten(out_info["tree"], full)

    def trace(self, closed: jcore.ClosedJaxpr, where, n_linear: int = 0) -> jcore.ClosedJaxpr:
        """The emulated version of a closed jaxpr (last ``n_linear`` inputs are tangents)."""
        lin = closed.jaxpr.invars[len(closed.jaxpr.invars) - n_linear:] if n_linear else ()
        return jax.make_jaxpr(
            lambda *xs: self.eval(closed.jaxpr, closed.consts, xs, where, lin))(
            *[_aval_struct(a) for a in closed.in_avals])

    def eval(self, jaxpr, consts, args, where, linear_invars=()) -> list:
        """Evaluates a jaxpr emulated; equations that depend on ``linear_invars`` (the
        tangent inputs of a custom_jvp rule) run as written, so the result stays
        transposable (``matmul`` is a custom_vjp, which JAX cannot transpose)."""
        env: dict = {}
        linear = set(linear_invars)

        def read(v):
            return v.val if isinstance(v, jcore.Literal) else env[v]

        def write(v, x):
            if not isinstance(v, jcore.DropVar):
                env[v] = x

        for v, x in zip(jaxpr.constvars, consts):
            write(v, x)
        for v, x in zip(jaxpr.invars, args, strict=True):
            write(v, x)
        prefix, context = where
        for eqn in jaxpr.eqns:
            invals = [read(v) for v in eqn.invars]
            ns = _join(prefix, str(eqn.source_info.name_stack))
            if _siu is not None:
                ctx = _siu.user_context(
                    eqn.source_info.traceback,
                    name_stack=_siu.current_name_stack() + eqn.source_info.name_stack)
            else:  # pragma: no cover
                ctx = jax.named_scope(str(eqn.source_info.name_stack) or "eqn")
            tangent = linear and any(not isinstance(v, jcore.Literal) and v in linear
                                     for v in eqn.invars)
            with ctx:
                if tangent:
                    linear.update(eqn.outvars)
                    self._note_tangent_products(eqn, invals, (ns, context))
                    outs = self.bind(eqn, invals)
                else:
                    outs = self.eqn(eqn, invals, (ns, context))
            if not eqn.primitive.multiple_results:
                outs = [outs]
            for v, x in zip(eqn.outvars, outs, strict=True):
                write(v, x)
        return [read(v) for v in jaxpr.outvars]

    # -- one equation ----------------------------------------------------------------

    def bind(self, eqn, invals):
        params = eqn.primitive.get_bind_params(eqn.params)
        if isinstance(params, tuple):  # older jax: (subfuns, params)
            subfuns, params = params
            return eqn.primitive.bind(*subfuns, *invals, **params)
        return eqn.primitive.bind(*invals, **params)

    def eqn(self, eqn, invals, where):
        name = eqn.primitive.name
        handler = _HANDLERS.get(name)
        if handler is not None:
            return handler(self, eqn, invals, where)
        if name in _OTHER_PRODUCTS:
            info = self._info(eqn, name, invals, 1, 0, 0, 0, where)
            return self.unsupported(eqn, invals, info, f"{name} has no tensor-core emulation")
        subs = list(jcore.jaxprs_in_params(eqn.params))
        if subs and any(_contains_product(s) for s in subs):
            info = self._info(eqn, name, invals, 1, 0, 0, 0, where)
            return self.unsupported(
                eqn, invals, info,
                f"emulate does not enter {name} equations, and this one contains products")
        return self.bind(eqn, invals)

    def _note_tangent_products(self, eqn, invals, where):
        if eqn.primitive.name in _PRODUCTS or any(
                _contains_product(j) for j in jcore.jaxprs_in_params(eqn.params)):
            info = self._info(eqn, eqn.primitive.name, invals, 1, 0, 0, 0, where)
            self.entries.append(ReportEntry(
                info, False, None, "product on tangents in a custom_jvp rule (run as written)"))

    def unsupported(self, eqn, invals, info: Product, reason: str):
        if self.cfg.on_unsupported == "error":
            raise UnsupportedProductError(
                f"jaxwarp.emulate cannot run {info.primitive} with operands "
                f"{info.lhs_dtype}{list(info.lhs_shape)} and {info.rhs_dtype}"
                f"{list(info.rhs_shape)} (name stack {info.name_stack!r}) on the tensor core: "
                f"{reason}. Pass on_unsupported='skip' to run it unemulated and list it in "
                f"the report.")
        self.entries.append(ReportEntry(info, False, None, reason))
        return self.bind(eqn, invals)

    def _info(self, eqn, prim, invals, batch, m, n, k, where) -> Product:
        shp = [tuple(getattr(x, "shape", ())) for x in invals[:2]] + [(), ()]
        dts = [str(getattr(x, "dtype", type(x).__name__)) for x in invals[:2]] + ["", ""]
        out = eqn.outvars[0].aval
        return Product(prim, shp[0], shp[1], dts[0], dts[1], tuple(out.shape), str(out.dtype),
                       int(batch), int(m), int(n), int(k), where[0], where[1])

    def _decide(self, eqn, invals, info: Product) -> str | None:
        """None to emulate, else the reason to leave the product alone (or raise)."""
        ld, rd = (jnp.dtype(x.dtype) for x in invals[:2])
        if MARKER in info.name_stack:
            return "skip:already emulated (a product jaxwarp.emulate itself emits)"
        if any(jnp.issubdtype(d, jnp.complexfloating) for d in (ld, rd)):
            return "unsupported:complex operands (no complex tensor-core product)"
        if not any(jnp.issubdtype(d, jnp.floating) for d in (ld, rd)):
            return ("skip:integer product (left alone: no integer operand format in "
                    f"jaxwarp.matmul; formats: {_matmul_formats()})")
        if jnp.float64 in (ld, rd) and self.cfg.operand_format != "f64":
            return (f"unsupported:f64 operands with operand_format="
                    f"{self.cfg.operand_format!r} (converting f64 through f32 rounds twice; "
                    f"use operand_format='f64')")
        if self.cfg.filter is not None and not self.cfg.filter(info):
            return "skip:filtered out"
        return None

    def _product(self, eqn, invals, info, compute):
        verdict = self._decide(eqn, invals, info)
        if verdict is None:
            self.entries.append(ReportEntry(info, True, self.cfg.operand_format))
            return compute()
        kind, reason = verdict.split(":", 1)
        if kind == "unsupported":
            return self.unsupported(eqn, invals, info, reason)
        self.entries.append(ReportEntry(info, False, None, reason))
        return self.bind(eqn, invals)

    def dot_general(self, eqn, invals, where):
        lhs, rhs = invals
        (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
        lc, rc, lb, rb = map(tuple, (lc, rc, lb, rb))
        lfree = [d for d in range(lhs.ndim) if d not in lc + lb]
        rfree = [d for d in range(rhs.ndim) if d not in rc + rb]
        bshape = tuple(lhs.shape[d] for d in lb)
        B = math.prod(bshape)
        M = math.prod(lhs.shape[d] for d in lfree)
        N = math.prod(rhs.shape[d] for d in rfree)
        K = math.prod(lhs.shape[d] for d in lc)
        info = self._info(eqn, "dot_general", invals, B, M, N, K, where)
        out_aval = eqn.outvars[0].aval

        def compute():
            if 0 in (B, M, N, K):  # an empty sum is +0; empty outputs are empty
                return jnp.zeros(out_aval.shape, out_aval.dtype)
            x = jnp.transpose(_as_float_operand(lhs), lb + tuple(lfree) + lc)
            y = jnp.transpose(_as_float_operand(rhs), rb + rc + tuple(rfree))
            batched = bool(lb)
            x = x.reshape((B, M, K) if batched else (M, K))
            y = y.reshape((B, K, N) if batched else (K, N))
            d = _gemm(x, y, self.cfg, batched)
            shape = bshape + tuple(lhs.shape[i] for i in lfree) + tuple(
                rhs.shape[i] for i in rfree)
            return d.reshape(shape).astype(out_aval.dtype)

        return self._product(eqn, invals, info, compute)

    def conv(self, eqn, invals, where):
        lhs, rhs = invals
        p = eqn.params
        dn = p["dimension_numbers"]
        lhs_spec, rhs_spec, out_spec = dn.lhs_spec, dn.rhs_spec, dn.out_spec
        G = p["feature_group_count"]
        out_aval = eqn.outvars[0].aval
        nsp = len(lhs_spec) - 2
        Nb, C = lhs.shape[lhs_spec[0]], lhs.shape[lhs_spec[1]]
        O, Cg = rhs.shape[rhs_spec[0]], rhs.shape[rhs_spec[1]]
        R = tuple(rhs.shape[d] for d in rhs_spec[2:])
        S_out = tuple(out_aval.shape[d] for d in out_spec[2:])
        Rt = math.prod(R)
        info = self._info(eqn, "conv_general_dilated", invals, G, Nb * math.prod(S_out),
                          O // G, Rt * Cg, where)
        if p["batch_group_count"] != 1:
            return self.unsupported(eqn, invals, info,
                                    "batch_group_count > 1 has no implicit-GEMM form here")

        def compute():
            if 0 in (Nb, C, O, Rt) + S_out:
                return jnp.zeros(out_aval.shape, out_aval.dtype)
            x = jnp.transpose(_as_float_operand(lhs), lhs_spec)  # (N, C, *S)
            w = jnp.transpose(_as_float_operand(rhs), rhs_spec)  # (O, Cg, *R)
            zero = jnp.zeros((), x.dtype)
            pads = [(0, 0, 0), (0, 0, 0)] + [
                (lo, hi, ld - 1) for (lo, hi), ld in zip(p["padding"], p["lhs_dilation"])]
            x = lax.pad(x, zero, pads)
            strides, rd = p["window_strides"], p["rhs_dilation"]
            cols = []
            for r in itertools.product(*(range(n) for n in R)):  # (kh, kw, ...) row-major
                start = [0, 0] + [ri * di for ri, di in zip(r, rd)]
                limit = [Nb, C] + [s + (so - 1) * st + 1
                                   for s, so, st in zip(start[2:], S_out, strides)]
                cols.append(lax.slice(x, start, limit, [1, 1] + list(strides)))
            pt = jnp.stack(cols, axis=2)  # (N, C, Rt, *S_out)
            Mrows = Nb * math.prod(S_out)
            pt = jnp.moveaxis(pt, (0, 1, 2), (0, nsp + 2, nsp + 1))  # (N, *S_out, Rt, C)
            pt = pt.reshape(Mrows, Rt, G, Cg).transpose(2, 0, 1, 3).reshape(G, Mrows, Rt * Cg)
            wt = w.reshape(G, O // G, Cg, Rt).transpose(0, 3, 2, 1).reshape(G, Rt * Cg, O // G)
            if G == 1:
                d = _gemm(pt[0], wt[0], self.cfg, False)[None]
            else:
                d = _gemm(pt, wt, self.cfg, True)
            d = d.transpose(1, 0, 2).reshape((Nb, *S_out, O))  # features group-major
            canon = jnp.moveaxis(d, nsp + 1, 1)  # (N, O, *S_out)
            return jnp.transpose(canon, np.argsort(out_spec)).astype(out_aval.dtype)

        return self._product(eqn, invals, info, compute)

    # -- control flow and wrappers ---------------------------------------------------

    def jit(self, eqn, invals, where):
        p = eqn.params
        inner = p["jaxpr"]
        ns, context = where
        child = (_join(ns, f"jit({p['name']})"), context + ("jit",))
        sharded = jax.sharding.Sharding

        def body(*xs):
            xs = [lax.with_sharding_constraint(x, s) if isinstance(s, sharded) else x
                  for x, s in zip(xs, p["in_shardings"])]
            outs = self.eval(inner.jaxpr, inner.consts, xs, child)
            return [lax.with_sharding_constraint(x, s) if isinstance(s, sharded) else x
                    for x, s in zip(outs, p["out_shardings"])]

        body.__name__ = body.__qualname__ = p["name"]
        kw = dict(inline=p.get("inline", False), keep_unused=p.get("keep_unused", False))
        if p.get("compiler_options_kvs"):
            kw["compiler_options"] = dict(p["compiler_options_kvs"])
        return jax.jit(body, **kw)(*invals)

    def scan(self, eqn, invals, where):
        p = eqn.params
        if "num_consts" not in p or "num_carry" not in p:
            # Newer JAX versions name scan's parameters differently: re-bind the same
            # primitive with its body emulated (the body's signature is unchanged).
            q = dict(p)
            q["jaxpr"] = self.trace(p["jaxpr"], (where[0], where[1] + ("scan",)))
            return self.bind(eqn.replace(params=q), invals)
        nc, ncar = p["num_consts"], p["num_carry"]
        consts, init, xs = invals[:nc], invals[nc:nc + ncar], invals[nc + ncar:]
        inner = p["jaxpr"]
        child = (where[0], where[1] + ("scan",))

        def body(carry, x):
            outs = self.eval(inner.jaxpr, inner.consts, [*consts, *carry, *x], child)
            return outs[:ncar], outs[ncar:]

        carry, ys = lax.scan(body, list(init), list(xs), length=p["length"],
                             reverse=p["reverse"], unroll=p["unroll"])
        return [*carry, *ys]

    def while_loop(self, eqn, invals, where):
        p = eqn.params
        cn, bn = p["cond_nconsts"], p["body_nconsts"]
        cconsts, bconsts, init = invals[:cn], invals[cn:cn + bn], invals[cn + bn:]
        cj, bj = p["cond_jaxpr"], p["body_jaxpr"]
        child = (where[0], where[1] + ("while",))

        def cond_fun(c):
            return self.eval(cj.jaxpr, cj.consts, [*cconsts, *c], child)[0]

        def body_fun(c):
            return self.eval(bj.jaxpr, bj.consts, [*bconsts, *c], child)

        return lax.while_loop(cond_fun, body_fun, list(init))

    def cond(self, eqn, invals, where):
        index, *ops = invals
        child = (where[0], where[1] + ("cond",))

        def branch(br):
            return lambda *xs: self.eval(br.jaxpr, br.consts, xs, child)

        return lax.switch(index, [branch(br) for br in eqn.params["branches"]], *ops)

    def remat(self, eqn, invals, where):
        p = eqn.params
        inner = p["jaxpr"]
        child = (where[0], where[1] + ("checkpoint",))
        fn = jax.checkpoint(lambda *xs: self.eval(inner, (), xs, child),
                            prevent_cse=p["prevent_cse"], policy=p["policy"])
        return fn(*invals)

    def closed_call(self, eqn, invals, where):
        inner = eqn.params["call_jaxpr"]
        if isinstance(inner, jcore.ClosedJaxpr):
            return self.eval(inner.jaxpr, inner.consts, invals, where)
        return self.eval(inner, (), invals, where)

    def custom_jvp(self, eqn, invals, where):
        # The primal runs emulated, and so do the products of the user's jvp rule that
        # compute primal values (under differentiation JAX evaluates the rule, which
        # computes the primal output itself). Products on tangents run as written: they
        # must stay linear and transposable, which matmul's custom_vjp is not.
        p = dict(eqn.params)
        child = (where[0], where[1] + ("custom_jvp",))
        p["call_jaxpr"] = self.trace(p["call_jaxpr"], child)
        orig = p["jvp_jaxpr_fun"]

        def jvp_jaxpr_fun(*zeros):
            jaxpr, consts, out_zeros = orig.call_wrapped(*zeros)
            n_tangents = sum(not z for z in zeros)
            new = self.trace(jcore.ClosedJaxpr(jaxpr, consts), child, n_tangents)
            return new.jaxpr, new.consts, out_zeros

        p["jvp_jaxpr_fun"] = lu.wrap_init(jvp_jaxpr_fun, debug_info=orig.debug_info)
        new_eqn = eqn.replace(params=p)
        return self.bind(new_eqn, invals)

    def custom_vjp(self, eqn, invals, where):
        # The primal, the user's fwd and the user's bwd all run emulated: the backward
        # products of a custom_vjp are tensor-core products on a GPU as well.
        p = dict(eqn.params)
        child = (where[0], where[1] + ("custom_vjp",))
        p["call_jaxpr"] = self.trace(p["call_jaxpr"], child)
        fwd, bwd = p["fwd_jaxpr_thunk"], p["bwd"]

        def fwd_jaxpr_thunk(*nonzeros):
            jaxpr, consts = fwd.call_wrapped(*nonzeros)
            new = self.trace(jcore.ClosedJaxpr(jaxpr, consts), child)
            return new.jaxpr, new.consts

        def bwd_fn(*args):
            return self.call(lambda *a: bwd.call_wrapped(*a), args, {},
                             (_join(where[0], "bwd"), child[1]))

        p["fwd_jaxpr_thunk"] = lu.wrap_init(fwd_jaxpr_thunk, debug_info=fwd.debug_info)
        p["bwd"] = lu.wrap_init(bwd_fn, debug_info=bwd.debug_info)
        return self.bind(eqn.replace(params=p), invals)

    def shard_map(self, eqn, invals, where):
        p = eqn.params
        inner = p["jaxpr"]
        child = (where[0], where[1] + ("shard_map",))

        def body(*xs):
            return tuple(self.eval(inner, (), xs, child))

        fn = jax.shard_map(body, mesh=p["mesh"], in_specs=tuple(p["in_specs"]),
                           out_specs=tuple(p["out_specs"]),
                           axis_names=p.get("newly_manual_axes", frozenset()),
                           # matmul's zero accumulators are not marked varying over the
                           # mesh axes, so the rebuilt body is not vma-checked (values
                           # are unaffected).
                           check_vma=False)
        return list(fn(*invals))


_HANDLERS = {
    "dot_general": _Interpreter.dot_general,
    "conv_general_dilated": _Interpreter.conv,
    "jit": _Interpreter.jit,
    "pjit": _Interpreter.jit,
    "scan": _Interpreter.scan,
    "while": _Interpreter.while_loop,
    "cond": _Interpreter.cond,
    "remat2": _Interpreter.remat,
    "checkpoint": _Interpreter.remat,
    "closed_call": _Interpreter.closed_call,
    "core_call": _Interpreter.closed_call,
    "custom_jvp_call": _Interpreter.custom_jvp,
    "custom_vjp_call": _Interpreter.custom_vjp,
    "shard_map": _Interpreter.shard_map,
}


# ---------------------------------------------------------------------------
# The public function
# ---------------------------------------------------------------------------


class _Key:
    """Hashable static part of a call: argument structure, non-array leaves."""

    def __init__(self, treedef, static):
        self.treedef, self.static = treedef, static

    def __hash__(self):
        return hash((self.treedef, self.static))

    def __eq__(self, other):
        return (isinstance(other, _Key) and self.treedef == other.treedef
                and len(self.static) == len(other.static)
                and all(a is b or (type(a) is type(b) and a == b)
                        for a, b in zip(self.static, other.static)))


def emulate(
    fn: Callable,
    *,
    operand_format: str,
    accumulator: str = "f32",
    instruction: str = "wmma",
    arch: str = "sm_90",
    mode: str = "exact",
    tile: tuple[int, int, int] | None = None,
    filter: Callable[[Product], bool] | None = None,
    on_unsupported: str = "error",
    report: bool = False,
    scaling: str | None = None,
    backward_format: str | None = None,
    promote_every: int | None = None,
) -> Callable:
    """Returns ``fn`` with every matrix product run as the emulated tensor core runs it.

    Each floating-point ``dot_general`` (``@``, ``jnp.matmul``, ``jnp.einsum``,
    ``jnp.dot``, Flax/Equinox layers, attention) and ``conv_general_dilated``
    becomes :func:`jaxwarp.matmul` with these settings: operands converted to
    ``operand_format`` (round to nearest for f16/bf16, ``__float_to_tf32`` for
    tf32), tiles of the instruction's shape, K chained in order through the
    accumulator, the result converted to the product's own output dtype (round to
    nearest). ``emulate(lambda a, b: a @ b, operand_format=f)(A, B)`` equals
    ``jaxwarp.matmul(A, B, operand_format=f)`` bit for bit, and so do its
    gradients. See the module docstring for the k order of several contracting
    dimensions and of convolutions, and for zero padding to the tile.

    What is entered: ``jit``, ``scan``, ``while_loop``, ``cond``/``switch``,
    ``checkpoint``, ``custom_jvp`` (primal and jvp rule emulated), ``custom_vjp``
    (primal, fwd and the user's bwd emulated), ``shard_map``. Products inside
    any other primitive with a sub-program (e.g. ``pallas_call``) are unsupported.

    Integer and boolean products are left alone (``jaxwarp.matmul`` has no integer
    operand format). Unsupported products (complex, f64 operands with a non-f64
    format, ``ragged_dot``, conv with ``batch_group_count > 1``) raise
    :class:`UnsupportedProductError` naming the primitive and shapes, or, with
    ``on_unsupported="skip"``, run unemulated and are listed in the report.

    fp8 recipes (``operand_format="e4m3"``, issue 10's matmul): ``scaling="tensor"``
    multiplies each operand by ``fmt_max / amax`` (current scaling, per operand
    tensor, a constant to the derivative) before it is rounded to the operand
    format, and divides the fp32 result by both scales; ``backward_format="e5m2"``
    converts gradients to e5m2 in the backward products (the hybrid recipe;
    with ``scaling`` the gradient gets its own amax scale); ``promote_every=128``
    is passed to ``matmul`` (promotion of partial sums to fp32, DeepSeek-V3).

    Args:
        fn: the function. Array leaves of its arguments (``jax.Array``,
            ``np.ndarray``, NumPy scalars) are traced; every other leaf (Python
            numbers, strings, functions in an Equinox module) is static, as in
            ``equinox.filter_jit``. Non-array output leaves are returned as they are.
        operand_format: ``"f16"``, ``"bf16"``, ``"tf32"``, ``"f64"`` (needs x64);
            ``"e4m3"``/``"e5m2"`` once ``jaxwarp.matmul`` has them.
        accumulator: ``"f32"``, ``"f16"`` (f16 operands) or ``"f64"`` (f64).
        instruction: ``"wmma"``; ``"mma_sync"``/``"wgmma"`` once ``matmul`` has them.
        arch: ``matmul``'s architecture preset (``"sm_90"`` is the H100's).
        mode: ``"exact"`` (bit for bit) or ``"fast"`` (see ``matmul``).
        tile: ``matmul``'s WMMA tile; None for its default.
        filter: None (emulate every product) or a callable ``Product -> bool``;
            see :class:`ProductFilter` for ready-made ones. False leaves the product
            unemulated (``dot_general`` as written).
        on_unsupported: ``"error"`` or ``"skip"``.
        report: if True, the function returns ``(out, EmulationReport)``.
        scaling: None or ``"tensor"`` (per-tensor current scaling from the amax).
        backward_format: None (gradients in ``operand_format``, as ``matmul``'s
            own vjp) or the operand format of the gradient in backward products.
        promote_every: None or N, passed to ``matmul`` (needs issue 10).

    Returns:
        A function with ``fn``'s signature (returning ``(out, report)`` when
        ``report=True``). It is jitted inside (retraced only for new shapes,
        dtypes or static arguments) and composes with ``jax.jit``, ``jax.vmap``,
        ``jax.grad`` and ``jax.sharding`` in any order.

    Raises:
        ValueError: a format, instruction, scaling, accumulator, arch, mode or
            tile that is not allowed (the message lists what is).
        NotImplementedError: an fp8 format, instruction or ``promote_every`` that
            ``jaxwarp.matmul`` does not support yet.
        UnsupportedProductError: (when called) a product emulate cannot run.

    Example:
        >>> a = jnp.ones((16, 32), jnp.float32); b = jnp.full((32, 16), 1 / 3, jnp.float32)
        >>> f = jaxwarp.emulate(lambda x, y: jnp.tanh(x @ y), operand_format="bf16")
        >>> bool((f(a, b) == jnp.tanh(jaxwarp.matmul(a, b, operand_format="bf16"))).all())
        True
        >>> out, rep = jaxwarp.emulate(lambda x, y: x @ y, operand_format="tf32",
        ...                            report=True)(a, b)
        >>> rep.count, rep.entries[0].product.k
        (1, 32)
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {fn!r}")
    cfg = _make_config(operand_format, accumulator, instruction, arch, mode, tile, filter,
                       on_unsupported, scaling, backward_format, promote_every)
    config_items = tuple((f.name, getattr(cfg, f.name)) for f in dataclasses.fields(cfg)
                         if f.name != "filter") + (("filter", filter),)
    backward = ("matmul's custom_vjp: dA = dD @ B^T and dB = A^T @ dD on the same emulated "
                "tensor core" if not cfg.custom_recipe else
                f"emulate's recipe vjp: gradients in {cfg.backward_format or operand_format}"
                f"{', per-tensor scaled' if cfg.scaling else ''}, saved operands in "
                f"{operand_format}")

    def run(key: _Key, *dyn):
        interp = _Interpreter(cfg)
        it = iter(dyn)
        leaves = [next(it) if s is _DYNAMIC else s for s in key.static]
        args, kwargs = jax.tree_util.tree_unflatten(key.treedef, leaves)
        out = interp.call(fn, args, kwargs)
        out_leaves, out_tree = jax.tree_util.tree_flatten(out)
        mask = [_is_dynamic(x) for x in out_leaves]
        rep = EmulationReport(tuple(interp.entries), config_items, backward)
        return ([x for x, m in zip(out_leaves, mask) if m],
                _Static((out_tree, [None if m else x for x, m in zip(out_leaves, mask)], rep)))

    jitted = jax.jit(run, static_argnums=0)

    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        leaves, treedef = jax.tree_util.tree_flatten((args, kwargs))
        static = tuple(_DYNAMIC if _is_dynamic(x) else x for x in leaves)
        dyn = [x for x in leaves if _is_dynamic(x)]
        key = _Key(treedef, static)
        try:
            hash(key)
        except TypeError:  # an unhashable static leaf: run without the outer jit
            outs, aux = run(key, *dyn)
        else:
            outs, aux = jitted(key, *dyn)
        out_tree, static_out, rep = aux.value
        it = iter(outs)
        # None is never a pytree leaf, so None marks the dynamic outputs.
        out = jax.tree_util.tree_unflatten(
            out_tree, [next(it) if s is None else s for s in static_out])
        return (out, rep) if report else out

    wrapped.config = dict(config_items)
    return wrapped


class _DynamicMarker:
    def __repr__(self):
        return "<dynamic>"


_DYNAMIC = _DynamicMarker()
