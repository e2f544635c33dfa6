"""A kernel body rewritten: every ``dot_general`` through a product model, an add of a
product folded into its accumulator, every other equation as written.

The kernel's jaxpr (its inputs are Refs) is evaluated equation by equation under JAX's own
tracer (``trace_to_jaxpr_dynamic``, as ``jax.make_jaxpr`` does), so the result is again a
kernel jaxpr with the same inputs and effects, and JAX's Pallas interpreter runs it (loads,
stores, the grid). ``pjit`` / ``closed_call`` / custom-derivative calls are inlined (a
kernel compiler inlines them too); any other equation whose sub-jaxprs hold a product
(``scan``, ``while``, ``cond``, ``run_scoped`` ...) is bound again with each sub-jaxpr
rewritten the same way (same signature), so no control-flow primitive's semantics is
restated here.

Accumulator folding: a kernel compiler fuses ``d + dot(a, b)`` (an add of a product whose
C is zero, the product used once) into the instruction's accumulator,
``dot(a, b, C=d)``. Products are therefore kept pending (:class:`Pending`) until a
consumer needs their value; an ``add`` / ``add_any`` of the product's dtype and shape
whose operand is a pending zero-C product used once becomes that product with C = the
other operand. The right operand is tried first: ``acc + d1 + d2`` parses as
``(acc + d1) + d2`` and folds twice (acc -> d1's chain -> d2's chain), and ``d1 + d2``
becomes ``dot2(C=dot1)`` (Triton's combine patterns ``dot(a, b, 0) + d -> dot(a, b, d)``
list the product-on-the-right form first). A convert of the product, or any other use,
computes it with the C it has.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from jax.extend import core as jcore
from jax.extend import linear_util as lu

try:  # the tracer that jax.make_jaxpr uses, on abstract values that may be Refs
    from jax._src.interpreters import partial_eval as _pe
except ImportError:  # pragma: no cover
    _pe = None

from jaxwarp._src.pallas.model import KernelProductError

#: Wrappers whose body is inlined into the kernel (their semantics is the body's).
INLINED = {"pjit": "jaxpr", "jit": "jaxpr", "closed_call": "call_jaxpr",
           "core_call": "call_jaxpr", "custom_jvp_call": "call_jaxpr",
           "custom_vjp_call": "call_jaxpr", "custom_vjp_call_jaxpr": "fun_jaxpr"}
#: The adds a compiler folds into a product's accumulator.
ADDS = ("add", "add_any")


class Pending:
    """A product not computed yet: its equation, operand values and C (None: zero)."""

    __slots__ = ("eqn", "lhs", "rhs", "c")

    def __init__(self, eqn, lhs, rhs, c=None):
        self.eqn, self.lhs, self.rhs, self.c = eqn, lhs, rhs, c

    @property
    def aval(self):
        return self.eqn.outvars[0].aval

    @property
    def shape(self):
        return self.aval.shape

    @property
    def dtype(self):
        return self.aval.dtype


def contains_dot(jaxpr) -> bool:
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "dot_general":
            return True
        if any(contains_dot(s) for s in jcore.jaxprs_in_params(eqn.params)):
            return True
    return False


def _trace(fn, in_avals, debug_info):
    """fn traced on ``in_avals`` (Refs allowed): (open jaxpr, consts)."""
    if _pe is None or not hasattr(_pe, "trace_to_jaxpr_dynamic"):  # pragma: no cover
        import jax
        raise KernelProductError(
            f"emulate enters Pallas kernels through jax._src.interpreters.partial_eval."
            f"trace_to_jaxpr_dynamic, which this JAX ({jax.__version__}) does not have; "
            f"JAX 0.10 and 0.11 have it")
    out = _pe.trace_to_jaxpr_dynamic(lu.wrap_init(fn, debug_info=debug_info), list(in_avals))
    return out[0], out[2]


class Rewriter:
    """Evaluates kernel jaxprs with products through ``product(eqn, lhs, rhs, c)``.

    ``accumulates(eqn)``: whether the product's result is its accumulator's dtype, so
    that an add can be folded into it."""

    def __init__(self, product: Callable, accumulates: Callable):
        self.product = product
        self.accumulates = accumulates

    # -- values ----------------------------------------------------------------------

    def value(self, x):
        if isinstance(x, Pending):
            return self.product(x.eqn, x.lhs, x.rhs, x.c)
        return x

    def _fold(self, eqn, raw):
        """The folded product of an add, or None."""
        out = eqn.outvars[0].aval
        for i in (1, 0):
            p, other = raw[i], raw[1 - i]
            if (isinstance(p, Pending) and p.c is None and self.accumulates(p.eqn)
                    and p.aval.dtype == out.dtype and p.aval.shape == out.shape
                    and tuple(getattr(other, "shape", ())) == tuple(out.shape)
                    and getattr(other, "dtype", None) == out.dtype):
                return Pending(p.eqn, p.lhs, p.rhs, self.value(other))
        return None

    # -- jaxprs ----------------------------------------------------------------------

    def eval(self, jaxpr, consts, args, *, pending_out: bool = False) -> list:
        """Evaluates ``jaxpr``; products stay pending only where used once (by an add
        that may fold them, or as an output of an inlined call when ``pending_out``)."""
        uses = Counter(v for e in jaxpr.eqns for v in e.invars if isinstance(v, jcore.Var))
        uses.update(v for v in jaxpr.outvars if isinstance(v, jcore.Var))
        env: dict = {}

        def read(v):
            return v.val if isinstance(v, jcore.Literal) else env[v]

        def write(v, x):
            if isinstance(v, jcore.DropVar):
                return
            if isinstance(x, Pending) and uses[v] != 1:
                x = self.value(x)  # used twice (or not at all): computed once, here
            env[v] = x

        for v, x in zip(jaxpr.constvars, consts, strict=True):
            write(v, x)
        for v, x in zip(jaxpr.invars, args, strict=True):
            write(v, x)
        for eqn in jaxpr.eqns:
            raw = [read(v) for v in eqn.invars]
            outs = self.equation(eqn, raw)
            for v, x in zip(eqn.outvars, outs, strict=True):
                write(v, x)
        outs = [read(v) for v in jaxpr.outvars]
        return outs if pending_out else [self.value(x) for x in outs]

    def equation(self, eqn, raw) -> list:
        name = eqn.primitive.name
        if name == "dot_general":
            return [Pending(eqn, self.value(raw[0]), self.value(raw[1]))]
        if name in ADDS:
            folded = self._fold(eqn, raw)
            if folded is not None:
                return [folded]
        if name in INLINED and INLINED[name] in eqn.params:
            inner = eqn.params[INLINED[name]]
            consts = getattr(inner, "consts", ())
            return self.eval(getattr(inner, "jaxpr", inner), consts, raw, pending_out=True)
        vals = [self.value(x) for x in raw]
        if any(contains_dot(s) for s in jcore.jaxprs_in_params(eqn.params)):
            eqn = eqn.replace(params={k: self._param(k, v, name)
                                      for k, v in eqn.params.items()})
        outs = bind(eqn, vals)
        return list(outs) if eqn.primitive.multiple_results else [outs]

    def _param(self, key, v, prim):
        if isinstance(v, jcore.ClosedJaxpr):
            return self.closed(v) if contains_dot(v) else v
        if isinstance(v, jcore.Jaxpr):
            return self.open(v, f"{prim}'s {key}") if contains_dot(v) else v
        if isinstance(v, (tuple, list)) and v and all(
                isinstance(x, (jcore.ClosedJaxpr, jcore.Jaxpr)) for x in v):
            return type(v)(self._param(key, x, prim) for x in v)
        return v

    def closed(self, closed) -> jcore.ClosedJaxpr:
        """A closed jaxpr rewritten (same signature)."""
        jaxpr, consts = _trace(
            lambda *xs: self.eval(closed.jaxpr, closed.consts, xs), closed.in_avals,
            closed.jaxpr.debug_info)
        return jcore.ClosedJaxpr(jaxpr, consts)

    def open(self, jaxpr, what: str = "the kernel"):
        """An open jaxpr (a kernel body, a ``run_scoped`` body) rewritten; it may not
        capture constants."""
        if jaxpr.constvars:
            raise KernelProductError(f"{what} has constants; a kernel body has none")
        new, consts = _trace(lambda *xs: self.eval(jaxpr, (), xs),
                             [v.aval for v in jaxpr.invars], jaxpr.debug_info)
        if consts:
            raise KernelProductError(
                f"rewriting {what} captured {len(consts)} constant(s) "
                f"({[getattr(c, 'shape', c) for c in consts]}), which a kernel body cannot "
                f"hold")
        return new


def bind(eqn, invals):
    params = eqn.primitive.get_bind_params(eqn.params)
    if isinstance(params, tuple):  # older jax: (subfuns, params)
        subfuns, params = params
        return eqn.primitive.bind(*subfuns, *invals, **params)
    return eqn.primitive.bind(*invals, **params)


# -- the grid's programs at once --------------------------------------------------------

try:  # JAX's Pallas interpreter pieces (JAX 0.10 / 0.11); without them the grid runs
    # sequentially in JAX's own interpreter
    from jax._src.pallas import core as _pallas_core
    from jax._src.pallas import hlo_interpreter as _hlo
except ImportError:  # pragma: no cover
    _pallas_core = _hlo = None


def _array_aval(bm):
    return bm.array_aval if hasattr(bm, "array_aval") else bm.array_shape_dtype


def _block_dims(bm):
    """(sizes, squeezed) of a block mapping, or None for block dims other than Blocked /
    Squeezed."""
    sizes, squeezed = [], []
    for bd in bm.block_shape:
        name = type(bd).__name__
        if name == "Blocked":
            sizes.append(int(bd.block_size)), squeezed.append(False)
        elif name == "Squeezed" or bd is None:
            sizes.append(1), squeezed.append(True)
        else:
            return None
    return tuple(sizes), tuple(squeezed)


def parallel_grid(params, invals):
    """:func:`grid_side_by_side` where this JAX's Pallas internals have the names it reads
    (JAX 0.10 / 0.11), else None (JAX's sequential interpreter runs the grid)."""
    if _hlo is None or not hasattr(_hlo, "kernel_to_hlo_jaxpr"):
        return None
    try:
        return grid_side_by_side(params, invals)
    except (AttributeError, TypeError, ImportError) as e:
        if "Tracer" in type(e).__name__:
            raise
        return None


def grid_side_by_side(params, invals):
    """The kernel's outputs with all its grid programs evaluated at once (``jax.vmap`` over
    the programs), or None where that is not provably the sequential interpreter's result.

    JAX's interpreter runs the programs one after another, carrying every block array
    from one program to the next. Evaluating them side by side gives the same values when
    no program can see another's writes: every block is a Blocked (or squeezed) window
    dividing its array (no padding), no scalar prefetch, dynamic grid, scratch buffer or
    input/output alias, the discharged kernel has no effect (no prints), writes none of
    its input blocks, and distinct programs write distinct output blocks (the output
    index maps, evaluated on every grid point, are injective). Then each program reads
    only the inputs (never written) and the initial value of its own output block, and
    the blocks it writes are put in place in any order."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax import lax

    gm = params["grid_mapping"]
    if (gm.num_dynamic_grid_bounds or gm.num_index_operands or gm.num_scratch_operands
            or params["input_output_aliases"] or gm.local_grid_env is not None
            or not gm.grid or not all(isinstance(g, int) for g in gm.grid)):
        return None
    dims = [_block_dims(bm) for bm in gm.block_mappings]
    if any(d is None for d in dims) or any(
            s % b for bm, (bs, _) in zip(gm.block_mappings, dims, strict=True)
            for s, b in zip(_array_aval(bm).shape, bs, strict=True)):
        return None
    n_in = len(invals)
    kernel = params["jaxpr"]
    for eff in kernel.effects:  # reads of any block, writes of output blocks only
        kind, ref = type(eff).__name__, getattr(eff, "input", None)
        pos = ref if isinstance(ref, int) else next(
            (i for i, v in enumerate(kernel.invars) if v is ref), None)
        if kind not in ("ReadEffect", "WriteEffect", "AccumEffect") or pos is None or (
                kind != "ReadEffect" and pos < n_in):
            return None
    jaxpr, consts, _ = _hlo.kernel_to_hlo_jaxpr(kernel, (), gm)
    if jaxpr.effects:
        return None
    grid = tuple(gm.grid)
    loop = np.indices(grid).reshape(len(grid), -1).T.astype(np.int32)  # row-major
    outs_bm = gm.block_mappings[n_in:]
    for bm in outs_bm:  # injective output index maps (concrete, on every program)
        with jax.ensure_compile_time_eval():
            idx = jax.vmap(lambda ids, bm=bm: jnp.stack(
                [jnp.asarray(s, jnp.int32) for s in bm.compute_start_indices_interpret(
                    tuple(ids[d] for d in range(len(grid))))]))(loop)
        if isinstance(idx, jax.core.Tracer) or len(
                {tuple(r) for r in np.asarray(idx).tolist()}) != len(loop):
            return None
    env_dims = [d for d in range(len(grid)) if d not in gm.vmapped_dims]
    init = [_hlo.primitives.uninitialized_value(_array_aval(bm).shape, _array_aval(bm).dtype)
            for bm in outs_bm]
    arrays = [*invals, *init]

    def program(ids):
        loop_idx = tuple(ids[d] for d in range(len(grid)))
        env = tuple(_pallas_core.GridAxis(loop_idx[d], grid[d]) for d in env_dims)
        with _pallas_core.grid_env(env):
            starts = [tuple(jnp.asarray(s, jnp.int32)
                            for s in bm.compute_start_indices_interpret(loop_idx))
                      for bm in gm.block_mappings]
        blocks = []
        for x, st, (sizes, sq) in zip(arrays, starts, dims, strict=True):
            blk = lax.dynamic_slice(x, st, sizes)
            blocks.append(lax.squeeze(blk, [i for i, s in enumerate(sq) if s]))
        with _pallas_core.grid_env(env):
            outs = jcore.jaxpr_as_fun(jcore.ClosedJaxpr(jaxpr, consts))(*blocks)
        return starts[n_in:], outs[n_in:]

    starts, blocks = jax.vmap(program)(loop)
    results = []
    for o, st, blk, (sizes, _) in zip(init, starts, blocks, dims[n_in:], strict=True):
        blk = blk.reshape((len(loop),) + sizes)
        results.append(lax.fori_loop(
            0, len(loop), lambda p, o, st=st, blk=blk: lax.dynamic_update_slice(
                o, blk[p], [s[p] for s in st]), o))
    return results
