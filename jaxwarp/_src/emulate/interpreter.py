"""The jaxpr interpreter: every product through ``gemm``, control flow and wrappers
entered and rebuilt with their public constructors, everything else bound unchanged."""

from __future__ import annotations

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend import core as jcore
from jax.extend import linear_util as lu

from jaxwarp._src import pallas
from jaxwarp._src.emulate.products import as_float_operand, gemm, sparse_gemm
from jaxwarp._src.emulate.report import Product, ReportEntry, UnsupportedProductError
from jaxwarp._src.emulate.settings import (
    BLOCK_SCALINGS,
    MARKER,
    NO_FORMAT,
    OPERAND_FORMATS,
    OTHER_PRODUCTS,
    PRODUCTS,
    Settings,
)

try:  # name stacks on re-bound equations (as jax.core.eval_jaxpr keeps them); optional
    from jax._src import source_info_util as _siu
except ImportError:  # pragma: no cover
    _siu = None


def _aval_struct(aval):
    return jax.ShapeDtypeStruct(aval.shape, aval.dtype, weak_type=aval.weak_type)


def contains_product(jaxpr) -> bool:
    for eqn in jaxpr.eqns:
        if eqn.primitive.name in PRODUCTS + OTHER_PRODUCTS:
            return True
        for sub in jcore.jaxprs_in_params(eqn.params):
            if contains_product(sub):
                return True
    return False


def join_names(*parts: str) -> str:
    return "/".join(p for p in parts if p)


def is_dynamic(x) -> bool:
    return isinstance(x, (jax.Array, np.ndarray, np.generic))


class Interpreter:
    def __init__(self, cfg: Settings):
        self.cfg = cfg
        self.entries: list[ReportEntry] = []
        self.marked: dict = {}  # outputs of jaxwarp.sparse.as_2_4 -> their axis
        # scope "linear": the values derived from the parameters alone (weights), by id
        # (the value is kept so that its id is not reused)
        self.track = cfg.scope == "linear"
        self.weights: dict[int, object] = {}

    # -- weights (scope "linear") ----------------------------------------------------

    def is_weight(self, x) -> bool:
        return self.weights.get(id(x)) is x

    def mark(self, xs, mask) -> None:
        """Marks the values ``xs`` where ``mask`` (None: none) is True as weights."""
        if self.track and mask is not None:
            for x, m in zip(xs, mask, strict=True):
                if m:
                    self.weights[id(x)] = x

    def weight_mask(self, xs) -> list[bool] | None:
        return [self.is_weight(x) for x in xs] if self.track else None

    def _derived(self, eqn, invals, consts) -> bool:
        """Whether an equation's outputs are weights: its inputs are weights, literals or
        constants of the program, and at least one is a weight (a transpose, reshape,
        conversion, slice of a weight, a product of two weights, a scan over stacked ones)."""
        seen = False
        for v, x in zip(eqn.invars, invals, strict=True):
            if isinstance(v, jcore.Literal) or v in consts:
                continue
            if not self.is_weight(x):
                return False
            seen = True
        return seen

    # -- whole functions -------------------------------------------------------------

    def call(self, fn, args, kwargs, where=("", ()), params_argnums=None):
        """Traces fn(*args, **kwargs) and evaluates it emulated; non-array leaves are static.
        The array leaves of the positional arguments ``params_argnums`` are weights."""
        leaves, treedef = jax.tree_util.tree_flatten((args, kwargs))
        mask = [is_dynamic(x) for x in leaves]
        dyn = [x for x, m in zip(leaves, mask, strict=True) if m]
        weights = None
        if params_argnums is not None:
            owner = [i for i, a in enumerate(args) for _ in jax.tree_util.tree_leaves(a)]
            owner += [-1] * (len(leaves) - len(owner))
            weights = [o in params_argnums for o, m in zip(owner, mask, strict=True) if m]
        out_info = {}

        def flat(*dyn_leaves):
            it = iter(dyn_leaves)
            full = [next(it) if m else x for x, m in zip(leaves, mask, strict=True)]
            a, kw = jax.tree_util.tree_unflatten(treedef, full)
            out = fn(*a, **kw)
            out_leaves, out_tree = jax.tree_util.tree_flatten(out)
            omask = [is_dynamic(x) or isinstance(x, (bool, int, float, complex))
                     for x in out_leaves]
            out_info["tree"], out_info["mask"] = out_tree, omask
            out_info["static"] = [None if m else x for x, m in zip(out_leaves, omask, strict=True)]
            return [x for x, m in zip(out_leaves, omask, strict=True) if m]

        closed = jax.make_jaxpr(flat)(*dyn)
        outs = self.eval(closed.jaxpr, closed.consts, dyn, where, weights=weights)
        it = iter(outs)
        full = [next(it) if m else s
                for s, m in zip(out_info["static"], out_info["mask"], strict=True)]
        return jax.tree_util.tree_unflatten(out_info["tree"], full)

    def trace(self, closed: jcore.ClosedJaxpr, where, n_linear: int = 0,
              weights=None) -> jcore.ClosedJaxpr:
        """The emulated version of a closed jaxpr (last ``n_linear`` inputs are tangents;
        ``weights``: which inputs are weights, None for none)."""
        lin = closed.jaxpr.invars[len(closed.jaxpr.invars) - n_linear:] if n_linear else ()
        if weights is not None and len(weights) != len(closed.in_avals):
            weights = None
        return jax.make_jaxpr(
            lambda *xs: self.eval(closed.jaxpr, closed.consts, xs, where, lin, weights))(
            *[_aval_struct(a) for a in closed.in_avals])

    def eval(self, jaxpr, consts, args, where, linear_invars=(), weights=None) -> list:
        """Evaluates a jaxpr emulated; equations that depend on ``linear_invars`` (the
        tangent inputs of a custom_jvp rule) run as written, so the result stays
        transposable (``matmul`` is a custom_vjp, which JAX cannot transpose).
        ``weights``: which of ``args`` are weights (scope "linear"), None for none."""
        env: dict = {}
        linear = set(linear_invars)
        constvars = set(jaxpr.constvars)
        self.mark(args, weights)

        def read(v):
            return v.val if isinstance(v, jcore.Literal) else env[v]

        def write(v, x):
            if not isinstance(v, jcore.DropVar):
                env[v] = x

        for v, x in zip(jaxpr.constvars, consts, strict=True):
            write(v, x)
        for v, x in zip(jaxpr.invars, args, strict=True):
            write(v, x)
        prefix, context = where
        for eqn in jaxpr.eqns:
            invals = [read(v) for v in eqn.invars]
            ns = join_names(prefix, str(eqn.source_info.name_stack))
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
            if self.track and not tangent and self._derived(eqn, invals, constvars):
                self.mark(outs, [True] * len(outs))
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
        return self.generic(eqn, invals, where)

    def generic(self, eqn, invals, where):
        """An equation with no handler: bound as written (refused if it holds products)."""
        name = eqn.primitive.name
        if name in OTHER_PRODUCTS:
            info = self._info(eqn, name, invals, 1, 0, 0, 0, where)
            return self.unsupported(eqn, invals, info, f"{name} has no tensor-core emulation")
        subs = list(jcore.jaxprs_in_params(eqn.params))
        if subs and any(contains_product(s) for s in subs):
            info = self._info(eqn, name, invals, 1, 0, 0, 0, where)
            return self.unsupported(
                eqn, invals, info,
                f"emulate does not enter {name} equations, and this one contains products")
        return self.bind(eqn, invals)

    def _note_tangent_products(self, eqn, invals, where):
        if eqn.primitive.name in PRODUCTS or any(
                contains_product(j) for j in jcore.jaxprs_in_params(eqn.params)):
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

    def gemm(self, x, y, batched: bool):
        """One emulated product, (B,)M,K @ (B,)K,N (emulate/delayed.py replaces it)."""
        return gemm(x, y, self.cfg, batched)

    def _info(self, eqn, prim, invals, batch, m, n, k, where, weight=None) -> Product:
        shp = [tuple(getattr(x, "shape", ())) for x in invals[:2]] + [(), ()]
        dts = [str(getattr(x, "dtype", type(x).__name__)) for x in invals[:2]] + ["", ""]
        out = eqn.outvars[0].aval
        return Product(prim, shp[0], shp[1], dts[0], dts[1], tuple(out.shape), str(out.dtype),
                       int(batch), int(m), int(n), int(k), where[0], where[1], weight)

    def _weight(self, invals, sides=("lhs", "rhs")) -> str | None:
        """The operand a recipe treats as the weight: under scope "linear" the one derived
        from the parameters (the right-hand one if both are), else the right-hand one."""
        if not self.track:
            return "rhs"
        found = [s for s, x in zip(("lhs", "rhs"), invals[:2], strict=True)
                 if s in sides and self.is_weight(x)]
        return found[-1] if found else None

    def _decide(self, eqn, invals, info: Product) -> str | None:
        """None to emulate, else the reason to leave the product alone (or raise)."""
        ld, rd = (jnp.dtype(x.dtype) for x in invals[:2])
        if MARKER in info.name_stack:
            return "skip:already emulated (a product jaxwarp.emulate itself emits)"
        if any(jnp.issubdtype(d, jnp.complexfloating) for d in (ld, rd)):
            return "unsupported:complex operands (no complex tensor-core product)"
        if not any(jnp.issubdtype(d, jnp.floating) for d in (ld, rd)):
            return ("skip:integer product (left alone: no integer operand format in "
                    f"jaxwarp.matmul; formats: {OPERAND_FORMATS})")
        if jnp.float64 in (ld, rd) and self.cfg.operand_format != "f64":
            return (f"unsupported:f64 operands with operand_format="
                    f"{self.cfg.operand_format!r} (converting f64 through f32 rounds twice; "
                    f"use operand_format='f64')")
        if info.weight is None and self.track:
            return ("skip:outside scope='linear' (no operand is a weight, i.e. derived from "
                    "the parameters alone: attention's batched products, products of "
                    "activations; run as written, in the program's dtypes)")
        if self.cfg.filter is not None and not self.cfg.filter(info):
            return "skip:filtered out"
        if self.cfg.operand_format is None and self.cfg.recipe is None:
            raise ValueError(NO_FORMAT)
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
        info = self._info(eqn, "dot_general", invals, B, M, N, K, where, self._weight(invals))
        out_aval = eqn.outvars[0].aval
        # contracted along as_2_4's axis
        sparse = [isinstance(v, jcore.Var) and c == (self.marked.get(v),)
                  for v, c in zip(eqn.invars, (lc, rc), strict=True)]

        def compute():
            if 0 in (B, M, N, K):  # an empty sum is +0; empty outputs are empty
                return jnp.zeros(out_aval.shape, out_aval.dtype)
            x = jnp.transpose(as_float_operand(lhs), lb + tuple(lfree) + lc)
            y = jnp.transpose(as_float_operand(rhs), rb + rc + tuple(rfree))
            batched = bool(lb)
            x = x.reshape((B, M, K) if batched else (M, K))
            y = y.reshape((B, K, N) if batched else (K, N))
            cfg = self.cfg
            if any(sparse):
                d = sparse_gemm(x, y, cfg, batched, sparse)
            elif info.weight == "lhs" and (cfg.recipe is not None
                                           or cfg.scaling in BLOCK_SCALINGS):
                # The weight is the left operand (W @ x): the recipe's roles need it on
                # the right, so D^T = x^T @ W^T (each element the same sum over K).
                d = jnp.swapaxes(self.gemm(jnp.swapaxes(y, -1, -2), jnp.swapaxes(x, -1, -2),
                                           batched), -1, -2)
            else:
                d = self.gemm(x, y, batched)
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
                          O // G, Rt * Cg, where, self._weight(invals, ("rhs",)))
        if p["batch_group_count"] != 1:
            return self.unsupported(eqn, invals, info,
                                    "batch_group_count > 1 has no implicit-GEMM form here")

        def compute():
            if 0 in (Nb, C, O, Rt) + S_out:
                return jnp.zeros(out_aval.shape, out_aval.dtype)
            x = jnp.transpose(as_float_operand(lhs), lhs_spec)  # (N, C, *S)
            w = jnp.transpose(as_float_operand(rhs), rhs_spec)  # (O, Cg, *R)
            zero = jnp.zeros((), x.dtype)
            pads = [(0, 0, 0), (0, 0, 0)] + [
                (lo, hi, ld - 1)
                for (lo, hi), ld in zip(p["padding"], p["lhs_dilation"], strict=True)]
            x = lax.pad(x, zero, pads)
            strides, rd = p["window_strides"], p["rhs_dilation"]
            cols = []
            for r in itertools.product(*(range(n) for n in R)):  # (kh, kw, ...) row-major
                start = [0, 0] + [ri * di for ri, di in zip(r, rd, strict=True)]
                limit = [Nb, C] + [s + (so - 1) * st + 1
                                   for s, so, st in zip(start[2:], S_out, strides, strict=True)]
                cols.append(lax.slice(x, start, limit, [1, 1] + list(strides)))
            pt = jnp.stack(cols, axis=2)  # (N, C, Rt, *S_out)
            Mrows = Nb * math.prod(S_out)
            pt = jnp.moveaxis(pt, (0, 1, 2), (0, nsp + 2, nsp + 1))  # (N, *S_out, Rt, C)
            pt = pt.reshape(Mrows, Rt, G, Cg).transpose(2, 0, 1, 3).reshape(G, Mrows, Rt * Cg)
            wt = w.reshape(G, O // G, Cg, Rt).transpose(0, 3, 2, 1).reshape(G, Rt * Cg, O // G)
            if G == 1:
                d = self.gemm(pt[0], wt[0], False)[None]
            else:
                d = self.gemm(pt, wt, True)
            d = d.transpose(1, 0, 2).reshape((Nb, *S_out, O))  # features group-major
            canon = jnp.moveaxis(d, nsp + 1, 1)  # (N, O, *S_out)
            return jnp.transpose(canon, np.argsort(out_spec)).astype(out_aval.dtype)

        return self._product(eqn, invals, info, compute)

    def mosaic_gpu_kernel(self, eqn, invals, where):
        """``plgpu.kernel``'s equations (a ``custom_vmap_call`` around an ``mpmd_map``):
        a Mosaic GPU kernel runs as a Pallas kernel; any other such equation as written."""
        if pallas.is_mosaic_gpu(eqn):
            return self.pallas_call(eqn, invals, where)
        return self.generic(eqn, invals, where)

    def as_2_4(self, eqn, invals, where):
        self.marked[eqn.outvars[0]] = eqn.params["axis"]
        return self.bind(eqn, invals)

    def pallas_call(self, eqn, invals, where):
        """A Pallas kernel: its products through the instruction its compiler issues
        (``jaxwarp._src.pallas``), the rest of the kernel run by JAX's interpreter."""
        name = eqn.params.get("name") or "kernel"
        ns, context = join_names(where[0], f"pallas_call({name})"), where[1] + ("pallas_call",)
        info = self._info(eqn, "pallas_call", invals, 1, 0, 0, 0, (ns, context))
        cfg = self.cfg
        extra = {k: v for k, v in (("tile", cfg.tile), ("scaling", cfg.scaling),
                                   ("backward_format", cfg.backward_format),
                                   ("recipe", cfg.recipe)) if v is not None}
        try:
            if cfg.instruction == "mfma":
                raise pallas.KernelProductError(
                    f"Pallas kernels are modelled on the NVIDIA targets only (the "
                    f"instructions their compilers issue); arch={cfg.arch!r} is an AMD "
                    f"target")
            if extra or cfg.accumulator != "f32":
                raise pallas.KernelProductError(
                    "a Pallas kernel's products run as its compiler issues them: "
                    + ", ".join(f"{k}={v!r}" for k, v in extra.items())
                    + (f", accumulator={cfg.accumulator!r}" if cfg.accumulator != "f32"
                       else "") + " is not for kernels (allowed: operand_format, "
                    "instruction, arch, mode, promote_every)")
            model = pallas.KernelModel(cfg.operand_format, cfg.instruction,
                                       cfg.kernel_arch, cfg.mode, cfg.promote_every)
            outs, products = pallas.run_pallas_call(eqn, invals, model)
        except pallas.KernelProductError as e:
            if cfg.on_unsupported == "error":
                raise UnsupportedProductError(
                    f"jaxwarp.emulate cannot run the Pallas kernel {name!r} (name stack "
                    f"{ns!r}) on the tensor core: {e}. Pass on_unsupported='skip' to run "
                    f"it unemulated and list it in the report.") from e
            self.entries.append(ReportEntry(info, False, None, f"Pallas kernel: {e}"))
            if pallas.is_mosaic_gpu(eqn):  # as written: it runs on a GPU (JAX refuses a CPU)
                return self.bind(eqn, invals)
            return self.bind(eqn.replace(params=dict(eqn.params, interpret=(
                eqn.params["interpret"] or True))), invals)
        for p in products:
            prod = Product("dot_general", p.lhs_shape, p.rhs_shape, p.lhs_dtype, p.rhs_dtype,
                           p.out_shape, p.out_dtype, 1, p.m, p.n, p.k, ns, context)
            fold = "; C: the kernel's add folded into the accumulator" if p.c_from else ""
            self.entries.append(ReportEntry(prod, True, p.operand_format, "", p.instruction,
                                            p.note + fold))
        return outs

    # -- control flow and wrappers ---------------------------------------------------

    def _loop_mask(self, invals, n_consts: int, n_carry: int):
        """A loop body's weights: its constants and scanned inputs as outside, never its
        carry (a carry is whatever the previous iteration made of it)."""
        mask = self.weight_mask(invals)
        if mask is not None:
            mask[n_consts:n_consts + n_carry] = [False] * n_carry
        return mask

    def jit(self, eqn, invals, where):
        p = eqn.params
        inner = p["jaxpr"]
        ns, context = where
        child = (join_names(ns, f"jit({p['name']})"), context + ("jit",))
        sharded = jax.sharding.Sharding

        def body(*xs):
            xs = [lax.with_sharding_constraint(x, s) if isinstance(s, sharded) else x
                  for x, s in zip(xs, p["in_shardings"], strict=True)]
            outs = self.eval(inner.jaxpr, inner.consts, xs, child, weights=wmask)
            return [lax.with_sharding_constraint(x, s) if isinstance(s, sharded) else x
                    for x, s in zip(outs, p["out_shardings"], strict=True)]

        body.__name__ = body.__qualname__ = p["name"]
        wmask = self.weight_mask(invals)
        kw = dict(inline=p.get("inline", False), keep_unused=p.get("keep_unused", False))
        if p.get("compiler_options_kvs"):
            kw["compiler_options"] = dict(p["compiler_options_kvs"])
        return jax.jit(body, **kw)(*invals)

    @staticmethod
    def _scan_counts(p, invals):
        """(number of consts, number of carries) of a scan equation: JAX 0.10 names them
        ``num_consts`` / ``num_carry``; JAX 0.11 packs consts, carries and xs in the flat
        tree ``ft_in``. None where neither is there."""
        if "num_consts" in p and "num_carry" in p:
            return p["num_consts"], p["num_carry"]
        ft_in = p.get("ft_in")
        try:
            consts, carry, _ = ft_in.update(list(invals)).unpack()
            return len(list(consts)), len(list(carry))
        except (AttributeError, TypeError, ValueError):
            return None

    def scan(self, eqn, invals, where):
        p = eqn.params
        counts = self._scan_counts(p, invals)
        if counts is None:
            # Newer JAX versions name scan's parameters differently: re-bind the same
            # primitive with its body emulated (the body's signature is unchanged).
            q = dict(p)
            # Which inputs are carries is not known here: no weights inside.
            q["jaxpr"] = self.trace(p["jaxpr"], (where[0], where[1] + ("scan",)))
            return self.bind(eqn.replace(params=q), invals)
        nc, ncar = counts
        consts, init, xs = invals[:nc], invals[nc:nc + ncar], invals[nc + ncar:]
        inner = p["jaxpr"]
        child = (where[0], where[1] + ("scan",))
        wmask = self._loop_mask(invals, nc, ncar)

        def body(carry, x):
            outs = self.eval(inner.jaxpr, inner.consts, [*consts, *carry, *x], child,
                             weights=wmask)
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
        cmask = self._loop_mask([*cconsts, *init], cn, len(init))
        bmask = self._loop_mask([*bconsts, *init], bn, len(init))

        def cond_fun(c):
            return self.eval(cj.jaxpr, cj.consts, [*cconsts, *c], child, weights=cmask)[0]

        def body_fun(c):
            return self.eval(bj.jaxpr, bj.consts, [*bconsts, *c], child, weights=bmask)

        return lax.while_loop(cond_fun, body_fun, list(init))

    def cond(self, eqn, invals, where):
        index, *ops = invals
        child = (where[0], where[1] + ("cond",))
        wmask = self.weight_mask(ops)

        def branch(br):
            return lambda *xs: self.eval(br.jaxpr, br.consts, xs, child, weights=wmask)

        return lax.switch(index, [branch(br) for br in eqn.params["branches"]], *ops)

    def remat(self, eqn, invals, where):
        p = eqn.params
        inner = p["jaxpr"]
        child = (where[0], where[1] + ("checkpoint",))
        wmask = self.weight_mask(invals)
        fn = jax.checkpoint(lambda *xs: self.eval(inner, (), xs, child, weights=wmask),
                            prevent_cse=p["prevent_cse"], policy=p["policy"])
        return fn(*invals)

    def closed_call(self, eqn, invals, where):
        inner = eqn.params["call_jaxpr"]
        wmask = self.weight_mask(invals)
        if isinstance(inner, jcore.ClosedJaxpr):
            return self.eval(inner.jaxpr, inner.consts, invals, where, weights=wmask)
        return self.eval(inner, (), invals, where, weights=wmask)

    def custom_jvp(self, eqn, invals, where):
        # The primal runs emulated, and so do the products of the user's jvp rule that
        # compute primal values (under differentiation JAX evaluates the rule, which
        # computes the primal output itself). Products on tangents run as written: they
        # must stay linear and transposable, which matmul's custom_vjp is not.
        p = dict(eqn.params)
        child = (where[0], where[1] + ("custom_jvp",))
        wmask = self.weight_mask(invals)
        p["call_jaxpr"] = self.trace(p["call_jaxpr"], child, weights=wmask)
        orig = p["jvp_jaxpr_fun"]

        def jvp_jaxpr_fun(*zeros):
            jaxpr, consts, out_zeros = orig.call_wrapped(*zeros)
            n_tangents = sum(not z for z in zeros)
            new = self.trace(jcore.ClosedJaxpr(jaxpr, consts), child, n_tangents,
                             None if wmask is None else wmask + [False] * n_tangents)
            return new.jaxpr, new.consts, out_zeros

        p["jvp_jaxpr_fun"] = lu.wrap_init(jvp_jaxpr_fun, debug_info=orig.debug_info)
        new_eqn = eqn.replace(params=p)
        return self.bind(new_eqn, invals)

    def custom_vjp(self, eqn, invals, where):
        # The primal, the user's fwd and the user's bwd all run emulated: the backward
        # products of a custom_vjp are tensor-core products on a GPU as well.
        p = dict(eqn.params)
        child = (where[0], where[1] + ("custom_vjp",))
        wmask = self.weight_mask(invals)
        p["call_jaxpr"] = self.trace(p["call_jaxpr"], child, weights=wmask)
        fwd, bwd = p["fwd_jaxpr_thunk"], p["bwd"]

        def fwd_jaxpr_thunk(*nonzeros):
            jaxpr, consts = fwd.call_wrapped(*nonzeros)
            new = self.trace(jcore.ClosedJaxpr(jaxpr, consts), child, weights=wmask)
            return new.jaxpr, new.consts

        def bwd_fn(*args):
            return self.call(lambda *a: bwd.call_wrapped(*a), args, {},
                             (join_names(where[0], "bwd"), child[1]))

        p["fwd_jaxpr_thunk"] = lu.wrap_init(fwd_jaxpr_thunk, debug_info=fwd.debug_info)
        p["bwd"] = lu.wrap_init(bwd_fn, debug_info=bwd.debug_info)
        return self.bind(eqn.replace(params=p), invals)

    def shard_map(self, eqn, invals, where):
        p = eqn.params
        inner = p["jaxpr"]
        child = (where[0], where[1] + ("shard_map",))

        wmask = self.weight_mask(invals)

        def body(*xs):
            return tuple(self.eval(inner, (), xs, child, weights=wmask))

        fn = jax.shard_map(body, mesh=p["mesh"], in_specs=tuple(p["in_specs"]),
                           out_specs=tuple(p["out_specs"]),
                           axis_names=p.get("newly_manual_axes", frozenset()),
                           # matmul's zero accumulators are not marked varying over the
                           # mesh axes, so the rebuilt body is not vma-checked (values
                           # are unaffected).
                           check_vma=False)
        return list(fn(*invals))


_HANDLERS = {
    "dot_general": Interpreter.dot_general,
    "conv_general_dilated": Interpreter.conv,
    "jit": Interpreter.jit,
    "pjit": Interpreter.jit,
    "scan": Interpreter.scan,
    "while": Interpreter.while_loop,
    "cond": Interpreter.cond,
    "remat2": Interpreter.remat,
    "checkpoint": Interpreter.remat,
    "closed_call": Interpreter.closed_call,
    "core_call": Interpreter.closed_call,
    "custom_jvp_call": Interpreter.custom_jvp,
    "custom_vjp_call": Interpreter.custom_vjp,
    "shard_map": Interpreter.shard_map,
    "jaxwarp_as_2_4": Interpreter.as_2_4,
    "pallas_call": Interpreter.pallas_call,
    "custom_vmap_call": Interpreter.mosaic_gpu_kernel,
    "mpmd_map": Interpreter.mosaic_gpu_kernel,
}

