"""Blackwell's tensor memory in a Mosaic GPU kernel jaxpr: ``tcgen05_mma`` through jaxwarp's
tcgen05 model, and TMEM held in shared memory where JAX's GPU interpreter has no TMEM.

``tcgen05_mma(acc, a, b, barrier, accumulate=...)`` becomes: read acc (TMEM), a (SMEM or
TMEM) and b (SMEM); ``acc <- tcgen05_chain(acc, a, b, accumulate)``, the chain over k of
tcgen05.mma instructions (k 16 for f16 / bf16, 8 for tf32, 32 for fp8) that
``jaxwarp.matmul(a, b, c, instruction="tcgen05", arch=...)`` models (MMA-Sim's Blackwell
arithmetic, the same as ``tcgen05_mma_logical``), starting from acc where ``accumulate``
holds and from zero where it does not (the instruction's enable-input-d); then an arrive
on the barrier, the MMA having completed. ``tcgen05_commit_arrive`` is an arrive,
``async_load`` / ``async_store_tmem`` of TMEM are reads / writes, ``wait_load_tmem`` and
``commit_tmem`` nothing (the emulated MMA is synchronous). Before JAX 0.11.0 the
interpreter allocates no TMEM, so TMEM refs are retyped as SMEM refs of the same shape
(TMEM's layout is not modelled: a read returns the logical matrix). Block-scaled, sparse
and collective (2-CTA) MMAs raise.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax
from jax.extend import core as jcore
from jax.interpreters import mlir

from jaxwarp._src.gemm import matmul_tiles
from jaxwarp._src.numerics import bitops, formats
from jaxwarp._src.pallas.model import (
    KernelProduct,
    dtype_format,
    kernel_matmul,
)
from jaxwarp._src.pallas.mosaic_gpu_refs import (
    barrier_arrive_primitive,
    memory_space_name,
    read_ref,
    rename_effects,
    traced_eqns,
    write_ref,
)

TCGEN05_K = {f: matmul_tiles.default_tile("tcgen05", f, "sm_100a")[2]
             for f in matmul_tiles.ACCUMULATORS["tcgen05"]}
#: The TMEM primitives of a kernel this module replaces.
TMEM_PRIMITIVES = ("tcgen05_mma", "tcgen05_commit_arrive", "async_load", "async_store_tmem",
                   "wait_load_tmem", "commit_tmem")


def tcgen05_chain(acc, a, b, accumulate, *, operand_format: str, accumulator: str,
                  arch: str):
    """``acc + a @ b`` (``a @ b`` where accumulate is false) as one ``plgpu.tcgen05_mma``
    computes it: the chain over k of tcgen05.mma instructions.

    Example:
      >>> a = jnp.ones((128, 32), jnp.float16); b = jnp.ones((32, 16), jnp.float16)
      >>> float(tcgen05_chain(jnp.ones((128, 16)), a, b, False, operand_format="f16",
      ...                     accumulator="f32", arch="sm_100a")[0, 0])
      32.0
    """
    if operand_format == "tf32":
        a = bitops.tf32_keep(a) if a.dtype == jnp.float32 else a
        b = bitops.tf32_keep(b) if b.dtype == jnp.float32 else b
    c = lax.select(jnp.broadcast_to(jnp.asarray(accumulate, bool), acc.shape), acc,
                   jnp.zeros_like(acc))
    return kernel_matmul(a, b, c, operand_format=operand_format, accumulator=accumulator,
                  instruction="tcgen05", arch=arch)


tcgen05_chain_p = jcore.Primitive("jaxwarp_tcgen05_chain")
tcgen05_chain_p.def_impl(tcgen05_chain)
tcgen05_chain_p.def_abstract_eval(
    lambda acc, a, b, accumulate, **_: jax.core.ShapedArray(acc.shape, acc.dtype))
mlir.register_lowering(tcgen05_chain_p, mlir.lower_fun(tcgen05_chain, multiple_results=False))


def _formats(acc, a, b, operand_format):
    dt = str(a.dtype)
    if str(b.dtype) != dt or dtype_format(dt) not in TCGEN05_K:
        raise NotImplementedError(
            f"tcgen05_mma with a {a.dtype}, b {b.dtype} is not modelled; operand formats "
            f"allowed (one for both): {tuple(TCGEN05_K)} (float32 as tf32)")
    fmt = operand_format or dtype_format(dt)
    if fmt not in TCGEN05_K:
        raise ValueError(f"operand_format={fmt!r} is not a tcgen05 format here; allowed: "
                         f"{tuple(TCGEN05_K)}")
    accumulator = formats.ALIASES.get(str(acc.dtype))
    if accumulator not in matmul_tiles.ACCUMULATORS["tcgen05"][fmt]:
        raise ValueError(f"tcgen05_mma with {fmt} operands cannot accumulate in {acc.dtype}")
    (m, n), (m2, k), (k2, n2) = acc.shape, a.shape, b.shape
    kk = TCGEN05_K[fmt]
    if (m, n, k) != (m2, n2, k2) or m not in (64, 128) or n % 8 or n > 256 or k % kk:
        raise ValueError(
            f"tcgen05.mma cta_group::1 ({fmt}) cannot issue acc {acc.shape} += a {a.shape} @ "
            f"b {b.shape}: M must be 64 or 128, N a multiple of 8 up to 256, K a multiple "
            f"of {kk}")
    return fmt, accumulator


def _split(leaves, trees):
    out = []
    for t in trees:
        n = 0 if t is None else t.num_leaves
        out.append(() if t is None else tuple(t.unflatten(leaves[:n])))
        leaves = leaves[n:]
    return out


def tcgen05_eqns(eqn, target, internals) -> list:
    """The equations that replace one ``tcgen05_mma`` equation."""
    p = eqn.params
    if p.get("scaled") or p.get("sparse") or p.get("collective_axis") is not None:
        what = [w for w in ("scaled", "sparse") if p.get(w)] + (
            ["collective"] if p.get("collective_axis") is not None else [])
        raise NotImplementedError(f"a {' '.join(what)} tcgen05_mma is not modelled; "
                                  "dense cta_group::1 MMAs are")
    arrive = bool(p.get("arrive"))
    names = ("acc", "a", "b") + (("barrier",) if arrive else ())
    trees = [p.get(f"{n}_transforms_tree") for n in names]

    def body(acc_ref, a_ref, b_ref, accumulate, *rest):
        barrier = rest[0] if arrive else None
        transforms = _split(rest[1:] if arrive else rest, trees)
        acc = read_ref(acc_ref, transforms[0], internals)
        a = read_ref(a_ref, transforms[1], internals)
        b = read_ref(b_ref, transforms[2], internals)
        fmt, accumulator = _formats(acc, a, b, target.operand_format)
        (m, k), n = a.shape, b.shape[1]
        target.sites.append(KernelProduct(
            tuple(a.shape), tuple(b.shape), str(a.dtype), str(b.dtype), tuple(acc.shape),
            str(acc.dtype), m, n, k, fmt, "tcgen05", accumulator,
            note=f"Mosaic GPU tcgen05_mma: a chain of m{m}n{n}k{TCGEN05_K[fmt]} "
                 f"(MMA-Sim's {target.arch} model)", kernel=target.kernel))
        d = tcgen05_chain_p.bind(acc, a, b, accumulate, operand_format=fmt,
                                 accumulator=accumulator, arch=target.arch)
        write_ref(acc_ref, transforms[0], d, internals)
        if arrive:
            flat, tree = jax.tree.flatten(transforms[3])
            barrier_arrive_primitive().bind(barrier, *flat, transforms_treedef=tree)
        return []

    return traced_eqns(body, eqn.invars, eqn.source_info, internals)[0]


def tmem_access_eqns(eqn, target, internals) -> list:
    """The equations that replace a TMEM primitive other than ``tcgen05_mma``."""
    name = eqn.primitive.name
    state_primitives = internals[2]
    if name in ("wait_load_tmem", "commit_tmem"):
        return []
    if name == "tcgen05_commit_arrive":
        if eqn.params.get("collective_axis") is not None:
            raise NotImplementedError("a collective tcgen05_commit_arrive is not modelled")
        return [eqn.replace(primitive=barrier_arrive_primitive(), params=dict(
            transforms_treedef=eqn.params["barrier_transforms_tree"]))]
    if name == "async_load":
        return [eqn.replace(primitive=state_primitives.get_p,
                            params=dict(tree=eqn.params["tree"]))]
    tree = eqn.params.get("tree")
    if name == "async_store_tmem" and tree is not None:
        return [eqn.replace(primitive=state_primitives.swap_p, params=dict(tree=tree),
                            outvars=[jcore.Var(eqn.invars[1].aval)])]
    raise NotImplementedError(f"{name} with params {sorted(eqn.params)} is not modelled")


def retype_tmem(jaxpr, mapping: dict):
    """The jaxpr with every TMEM ref variable (nested jaxprs included) replaced by an SMEM
    ref variable of the same shape (``mapping``: old -> new variables, filled)."""
    from jax._src.pallas.mosaic_gpu import core as gpu_core
    from jax._src.state import types as state_types

    def var(v):
        if not isinstance(v, jcore.Var):
            return v
        if v not in mapping and "TMEM" in memory_space_name(v.aval):
            mapping[v] = jcore.Var(state_types.AbstractRef(
                v.aval.inner_aval, gpu_core.MemorySpace.SMEM))
        return mapping.get(v, v)

    def param(x):
        if isinstance(x, jcore.Jaxpr):
            return retype_tmem(x, mapping)
        if isinstance(x, jcore.ClosedJaxpr):
            return jcore.ClosedJaxpr(retype_tmem(x.jaxpr, mapping), x.consts)
        if isinstance(x, (tuple, list)) and any(
                isinstance(y, (jcore.Jaxpr, jcore.ClosedJaxpr)) for y in x):
            return type(x)(param(y) for y in x)
        return x

    eqns = [e.replace(invars=[var(v) for v in e.invars], outvars=[var(v) for v in e.outvars],
                      params={k: param(x) for k, x in e.params.items()},
                      effects=rename_effects(e.effects, mapping))
            for e in jaxpr.eqns]
    return jaxpr.replace(constvars=[var(v) for v in jaxpr.constvars],
                         invars=[var(v) for v in jaxpr.invars],
                         outvars=[var(v) for v in jaxpr.outvars], eqns=eqns,
                         effects=rename_effects(jaxpr.effects, mapping))
