"""Reading and writing the refs of a Mosaic GPU kernel jaxpr the way JAX's GPU interpreter
can, tracing replacement equations into it, and ``pl.run_state`` as plain equations (used
by ``mosaic_gpu``; see its docstring for the JAX internals and versions)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax
from jax.extend import core as jcore

#: The JAX version this module was written against (its GPU interpret mode).
TESTED_JAX = "0.10.2"


# --- JAX internals, imported where used so that importing jaxwarp needs none of them.


def jax_internals():
    """(partial_eval, InterpretGPUParams, state primitives, state types) from JAX's
    internals, or an ImportError naming the JAX version needed."""
    try:
        from jax._src.interpreters import partial_eval as pe
        from jax._src.pallas.mosaic_gpu.interpret.params import InterpretGPUParams
        from jax._src.state import primitives as state_primitives
        from jax._src.state import types as state_types
    except ImportError as e:  # pragma: no cover
        raise ImportError(
            "jaxwarp's Mosaic GPU emulation needs JAX's Mosaic GPU interpret mode "
            f"(jax._src.pallas.mosaic_gpu.interpret, JAX >= {TESTED_JAX}); this is JAX "
            f"{jax.__version__}: {e}") from e
    return pe, InterpretGPUParams, state_primitives, state_types


# --- Reading and writing the refs of a wgmma the way the interpreter can.


def split_transforms(transforms, state_types):
    """(before the first transpose, the rest): JAX's GPU interpreter reads only indexers
    (after the layout-only unswizzle / untiling), so transposes are applied to values."""
    for i, t in enumerate(transforms):
        if isinstance(t, state_types.TransposeTransform):
            return tuple(transforms[:i]), tuple(transforms[i:])
    return tuple(transforms), ()


def index_value(val, indexer):
    """``val[indexer]`` for an NDIndexer of slices and scalar indices."""
    axis = 0
    for idx in indexer.indices:
        if hasattr(idx, "size") and hasattr(idx, "start"):
            val = lax.dynamic_slice_in_dim(val, idx.start, idx.size * idx.stride, axis)
            if idx.stride > 1:
                val = lax.slice_in_dim(val, 0, None, idx.stride, axis)
            axis += 1
        elif jnp.ndim(idx) == 0:
            val = lax.dynamic_index_in_dim(val, idx, axis, keepdims=False)
        else:
            raise NotImplementedError(f"wgmma operand indexed by an array: {indexer}")
    return val


def read_ref(ref, transforms, internals):
    _, _, state_primitives, state_types = internals
    before, after = split_transforms(transforms, state_types)
    flat, tree = jax.tree.flatten(before)
    val = state_primitives.get_p.bind(ref, *flat, tree=tree)
    for t in after:
        if isinstance(t, state_types.TransposeTransform):
            val = jnp.transpose(val, t.permutation)
        elif hasattr(t, "indices"):
            val = index_value(val, t)
        else:
            raise NotImplementedError(f"wgmma operand transform {t} after a transpose")
    return val


def write_ref(ref, transforms, val, internals):
    _, _, state_primitives, state_types = internals
    if any(isinstance(t, state_types.TransposeTransform) for t in transforms):
        raise ValueError(f"a transposed wgmma accumulator: {transforms}")
    flat, tree = jax.tree.flatten(tuple(transforms))
    state_primitives.swap_p.bind(ref, val, *flat, tree=tree)


def rename_var(v, rename):
    """v renamed by the dict rename (literals and other variables unchanged)."""
    return rename.get(v, v) if isinstance(v, jcore.Var) else v


def rename_effects(effects, rename):
    """Effects with their input variables renamed (an equation's Ref effects name the
    variables it reads and writes)."""
    out = set()
    for eff in effects:
        inp = getattr(eff, "input", None)
        out.add(eff.replace(rename[inp]) if isinstance(inp, jcore.Var) and inp in rename
                else eff)
    return out


def traced_eqns(fn, in_vars, source_info, internals):
    """fn traced on in_vars' avals: its equations, reading in_vars, and its outvars."""
    pe = internals[0]
    from jax._src import api_util
    from jax.extend import linear_util as lu

    avals = [v.aval for v in in_vars]
    info = api_util.debug_info("jaxwarp mosaic_gpu", fn, avals, {})
    jaxpr, _, consts = pe.trace_to_jaxpr_dynamic(lu.wrap_init(fn, debug_info=info), avals)
    if consts or jaxpr.constvars:  # pragma: no cover
        raise AssertionError("a replacement equation closed over constants")
    rename = dict(zip(jaxpr.invars, in_vars, strict=True))
    eqns = [e.replace(invars=[rename_var(v, rename) for v in e.invars],
                      effects=rename_effects(e.effects, rename), source_info=source_info)
            for e in jaxpr.eqns]
    return eqns, [rename_var(v, rename) for v in jaxpr.outvars]


def memory_space_name(aval) -> str:
    return str(getattr(aval, "memory_space", "") or "").upper()


def is_ref(aval) -> bool:
    return hasattr(aval, "inner_aval")


def run_state_eqns(eqn, internals, rename):
    """``pl.run_state`` (which JAX's GPU interpreter cannot run) as plain equations: its
    Ref arguments are passed through, its read-only value arguments substituted for their
    reads, and its REGS (wgmma accumulator) arguments allocated by a ``run_scoped`` that
    stores the initial value first and reads the final one last. Fills ``rename`` with
    the outputs that are inputs."""
    _, _, state_primitives, _ = internals
    inner = eqn.params["jaxpr"]
    if not all(eqn.params.get("is_initialized", ())) or inner.constvars:
        raise NotImplementedError("run_state with uninitialized refs in a Mosaic GPU kernel")
    sub, regs = {}, []
    for x, r, out in zip(eqn.invars, inner.invars, eqn.outvars, strict=True):
        if is_ref(x.aval):
            sub[r] = x
            rename[out] = x
        elif "REGS" in memory_space_name(r.aval):
            regs.append((x, r, out))
        else:
            rename[out] = x
    body = []
    for e in inner.eqns:
        invars = [rename_var(v, sub) for v in e.invars]
        read_only = [v for v in e.invars if isinstance(v, jcore.Var) and v in inner.invars
                     and v not in sub and all(v is not r for _, r, _ in regs)]
        if read_only:
            tree = e.params.get("tree")
            if e.primitive is not state_primitives.get_p or tree is None or tree.num_leaves:
                raise NotImplementedError(
                    f"run_state in a Mosaic GPU kernel whose value argument is used by "
                    f"{e.primitive.name} (only whole reads are supported)")
            sub[e.outvars[0]] = eqn.invars[inner.invars.index(read_only[0])]
            continue
        body.append(e.replace(invars=invars, effects=rename_effects(e.effects, sub)))
    if not regs:
        return body
    empty = jax.tree.structure(())

    def store(ref, val):
        state_primitives.swap_p.bind(ref, val, tree=empty)
        return []

    def load(ref):
        return [state_primitives.get_p.bind(ref, tree=empty)]

    init, final, outvars = [], [], []
    for x, r, _ in regs:
        init += traced_eqns(store, [r, x], eqn.source_info, internals)[0]
        eqns, outs = traced_eqns(load, [r], eqn.source_info, internals)
        final += eqns
        outvars += outs
    eqns_in = init + body + final
    defined = {v for e in eqns_in for v in e.outvars} | {r for _, r, _ in regs}
    free = list(dict.fromkeys(v for e in eqns_in for v in e.invars
                              if isinstance(v, jcore.Var) and v not in defined))
    scope = inner.replace(constvars=free, invars=[r for _, r, _ in regs], outvars=outvars,
                          eqns=eqns_in)
    run_scoped_p = run_scoped_primitive()
    return [jcore.new_jaxpr_eqn(
        free, [out for _, _, out in regs], run_scoped_p,
        dict(jaxpr=scope, collective_axes=(), ref_transforms=((),) * len(regs)),
        inner.effects, eqn.source_info)]


def run_scoped_primitive():
    from jax._src.pallas import primitives as pallas_primitives

    return pallas_primitives.run_scoped_p
