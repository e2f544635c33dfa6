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


def barrier_arrive_primitive():
    """Mosaic GPU's ``barrier_arrive`` primitive (params ``transforms_treedef``)."""
    from jax._src.pallas.mosaic_gpu import primitives as gpu_primitives

    return gpu_primitives.barrier_arrive_p


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
    return _scoped_accumulators(inner, body, regs, eqn.source_info, internals)


def _scoped_accumulators(inner, body, regs, source_info, internals) -> list:
    """The equations of ``body`` run with the REGS refs of ``regs`` ((initial value,
    inner ref, output) triples) allocated by a ``pl.run_scoped`` of ``plgpu.ACC``s: the
    initial values stored first, the final ones read last. The scope is traced through
    ``pl.run_scoped`` itself, so that it has the form the installed JAX gives it (JAX
    0.11 attaches the closed-over values to the scope's jaxpr, JAX 0.10 lists them as
    constvars)."""
    import jax.experimental.pallas as pl
    import jax.experimental.pallas.mosaic_gpu as plgpu

    _, _, state_primitives, _ = internals
    empty = jax.tree.structure(())
    refs = [r for _, r, _ in regs]
    defined = {v for e in body for v in e.outvars} | set(refs)
    free = list(dict.fromkeys(v for e in body for v in e.invars
                              if isinstance(v, jcore.Var) and v not in defined))
    types = [plgpu.ACC(r.aval.inner_aval.shape, r.aval.inner_aval.dtype) for r in refs]

    def scope(*vals):
        free_vals, inits = vals[:len(free)], vals[len(free):]

        def scoped(*acc_refs):
            env = dict(zip(free, free_vals, strict=True))
            env.update(zip(refs, acc_refs, strict=True))
            for ref, x in zip(acc_refs, inits, strict=True):
                state_primitives.swap_p.bind(ref, x, tree=empty)
            for e in body:
                args = [v.val if isinstance(v, jcore.Literal) else env[v] for v in e.invars]
                outs = e.primitive.bind(*args, **e.params)
                env.update(zip(e.outvars, outs if e.primitive.multiple_results else [outs],
                               strict=True))
            return [state_primitives.get_p.bind(ref, tree=empty) for ref in acc_refs]

        return pl.run_scoped(scoped, *types)

    eqns, outs = traced_eqns(scope, free + [x for x, _, _ in regs], source_info, internals)
    rename = dict(zip(outs, [out for _, _, out in regs], strict=True))
    return [e.replace(outvars=[rename.get(v, v) for v in e.outvars]) for e in eqns]
