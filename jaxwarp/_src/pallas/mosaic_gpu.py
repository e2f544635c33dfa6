"""Mosaic GPU kernels on the emulated tensor core: JAX's GPU interpret mode, with every
``wgmma`` of the kernel replaced by jaxwarp's exact wgmma chain.

A Mosaic GPU kernel (``plgpu.kernel(...)``, or ``pl.pallas_call`` with Mosaic GPU compiler
parameters) cannot be lowered for a CPU ("Only interpret mode is supported on CPU
backend"), and JAX's shipped kernels (``jax.experimental.pallas.ops.gpu``) give no way to
ask for interpret mode. Tracing works on any backend, though, so ``emulate`` finds the
kernel's equation in the traced jaxpr (:func:`is_mosaic_gpu`) and :func:`run_kernel`
re-binds it with ``interpret=InterpretGPUParams()`` after rewriting its kernel jaxpr
(nothing global is patched: JAX's own interpret mode still computes ``acc + np.matmul``).
Each ``wgmma_ref`` equation (``acc[...] += a @ b``) becomes::

    acc_val = get(acc); a_val = get(a) (or a's registers); b_val = get(b)
    acc <- wgmma_chain(acc_val, a_val, b_val)

``wgmma_chain`` (one primitive, lowered through ``jaxwarp.matmul(a, b, acc,
instruction="wgmma", arch="sm_90a")``) is the chain over k (16 per instruction for f16 /
bf16, 8 for tf32, 32 for fp8) of wgmma instructions starting from the accumulator's
current value, which is what one ``plgpu.wgmma`` issues on an H100 (its m64 row blocks
and n columns are independent). A wgmma always accumulates: the zero start is the
accumulator's allocation (``plgpu.ACC``: zero in the interpreter as on the GPU) or
``plgpu.ACC.init``. f32 operands are read as tf32 (their low 13 bits ignored, as the
tensor core does). ``wgmma_wait``, ``wgmma_accumulator_deref``, barriers and copies keep
JAX's semantics. Transposed operands (``plgpu.transpose_ref``), which JAX's interpreter
cannot read, are read untransposed and transposed as values; swizzle and tiling are
layout only (the interpreter keeps buffers in their logical shape). ``pl.run_state``
(which JAX's interpreter has no rule for) becomes a ``run_scoped`` of its accumulators,
and ``plgpu.layout_cast`` the identity. The checked shapes and dtypes are what sm_90a
issues: M a multiple of 64, N of 8, K of the instruction's k; f16 / bf16 / tf32 / e4m3 /
e5m2 operands of one dtype; an f32 accumulator, or f16 for f16 and fp8.

On ``arch="sm_100a"`` / ``"sm_103a"``, ``tcgen05_mma`` goes through jaxwarp's tcgen05
model the same way, with its ``accumulate`` flag and TMEM accumulator
(``mosaic_gpu_tmem``; TMEM is held in shared memory where JAX's interpreter has none, as
in JAX 0.10.2). JAX's own ``blackwell_matmul_mgpu`` still cannot run: it uses a
warp-level ``core_map``, ``dynamic_scheduling_loop`` and ``inline_mgpu``, which JAX
0.10.2's GPU interpret mode has no rule for (a :class:`NotImplementedError` says so).
Any other product in a kernel body (``dot_general``, the functional ``wgmma``, a
block-scaled, sparse or collective ``tcgen05_mma``) is an error, not an ``np.matmul``.

Kernels that ask the device for its SM count (``hopper_matmul_mgpu.get_num_sms``,
``jax.extend.backend.get_default_device().core_count``) are traced under
:func:`target_sm_count`. The result does not depend on the count, only the grid does,
and interpretation time grows with it (``hopper_matmul_mgpu`` at 512 x 1024 x 512 on
this 2-core CPU: about 9 s with 8 SMs, 500 s with 132).

JAX internals used, all present in JAX 0.10.2 (the imports fail with an error naming the
version otherwise; names JAX 0.11 may move are looked up by name):
``jax._src.pallas.mosaic_gpu.interpret.params.InterpretGPUParams``; the equations
``mpmd_map`` (what ``plgpu.kernel`` binds, inside a ``custom_vmap_call``; params
``jaxprs``, ``meshes``, ``compiler_params``, ``interpret``) and ``pallas_call`` (params
``jaxpr``, ``mesh``, ``compiler_params``, ``interpret``); the kernel primitives
``wgmma_ref`` (params ``{acc,a,b}_transforms_tree``), ``run_state`` (``jaxpr``,
``is_initialized``), ``layout_cast``, ``tcgen05_mma`` (params ``*_transforms_tree``,
``arrive``, ``scaled``, ``sparse``, ``collective_axis``),
``tcgen05_commit_arrive``, ``async_load`` / ``async_store_tmem`` / ``wait_load_tmem`` /
``commit_tmem``, ``barrier_arrive`` (``transforms_treedef``), the cluster launch control
primitives ``try_cluster_cancel`` (``{result,barrier}_transforms_tree``) and
``query_cluster_cancel``, ``inline_mgpu_p`` (``mgpu_fn``: a fence is recognised by its
PTX text), the memory spaces of ``jax._src.pallas.mosaic_gpu.core``;
``jax._src.state.primitives.get_p`` / ``swap_p`` (param ``tree``),
``jax._src.state.types.TransposeTransform``; and
``jax._src.interpreters.partial_eval.trace_to_jaxpr_dynamic`` with
``jax._src.api_util.debug_info``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools

import jax
import jax.numpy as jnp
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
    jax_internals,
    read_ref,
    rename_effects,
    rename_var,
    run_state_eqns,
    traced_eqns,
    write_ref,
)
from jaxwarp._src.pallas.mosaic_gpu_tmem import (
    TMEM_PRIMITIVES,
    retype_tmem,
    tcgen05_eqns,
    tmem_access_eqns,
)

#: Kernel equations that hold Mosaic GPU kernels, and the param holding their jaxprs.
_KERNEL_PRIMITIVES = {"mpmd_map": "jaxprs", "pallas_call": "jaxpr"}

#: k of one wgmma per operand format (the catalogue's tiles: 16 f16/bf16, 8 tf32, 32 fp8).
_WGMMA_K = {f: matmul_tiles.default_tile("wgmma", f, "sm_90a")[2]
            for f in matmul_tiles.ACCUMULATORS["wgmma"]}
_WGMMA_ARCHS = ("sm_90a", "sm_90")
_TCGEN05_ARCHS = ("sm_100a", "sm_103a")
#: Mosaic GPU primitives that only choose a register layout (the identity on values), which
#: JAX's GPU interpreter has no CPU rule for.
_LAYOUT_ONLY = ("layout_cast",)
#: Primitives computing products that this module does not model inside a kernel.
_UNMODELLED = ("dot_general", "wgmma", "ragged_dot_general",
               "scaled_matmul", "dot_product_attention")


# --- The SM count a kernel asks for.


class _DeviceWithCores:
    """The default device, answering ``core_count`` with the target's SM count."""

    def __init__(self, device, core_count: int):
        self._device = device
        self.core_count = core_count

    def __getattr__(self, name):
        return getattr(self._device, name)


@contextlib.contextmanager
def target_sm_count(num_sms: int, device_kind: str = "NVIDIA H100 80GB HBM3"):
    """Answers a kernel's question "how many SMs?" with ``num_sms`` while tracing.

    JAX's Hopper kernels size their grid by the device's SM count
    (``hopper_matmul_mgpu.get_num_sms`` reads the abstract mesh's ``abstract_device``,
    then ``jax.extend.backend.get_default_device().core_count``, which a CPU device does
    not have). Inside this context the abstract mesh is an empty
    ``jax.sharding.AbstractMesh`` whose ``abstract_device`` is a GPU with ``num_sms``
    cores, and ``jax.extend.backend.get_default_device`` returns the default device with
    ``core_count = num_sms``; both are restored on exit. An H100 SXM has 132 SMs (the
    H200 too); a kernel's result does not depend on the number (only its grid does), so
    a small one interprets faster.

    Args:
      num_sms: a positive int.
      device_kind: the abstract device's ``device_kind``.

    Example:
      >>> with target_sm_count(132):
      ...     jax.extend.backend.get_default_device().core_count
      132
    """
    if isinstance(num_sms, bool) or not isinstance(num_sms, int) or num_sms < 1:
        raise ValueError(f"num_sms must be a positive int, got {num_sms!r}")
    from jax.extend import backend

    device = jax.sharding.AbstractDevice(device_kind=device_kind, num_cores=num_sms,
                                         platform="gpu")
    mesh = jax.sharding.AbstractMesh((), (), abstract_device=device)
    original = backend.get_default_device
    patched = functools.wraps(original)(lambda: _DeviceWithCores(original(), num_sms))
    backend.get_default_device = patched
    try:
        with jax.sharding.use_abstract_mesh(mesh):
            yield num_sms
    finally:
        backend.get_default_device = original


# --- Which equations are Mosaic GPU kernels.


def _is_gpu_compiler_params(params) -> bool:
    cp = params.get("compiler_params")
    if cp is None:
        return False
    if isinstance(cp, dict):  # older pallas_call: {"mosaic_gpu": {...}}
        return "mosaic_gpu" in cp
    return type(cp).__module__.startswith("jax._src.pallas.mosaic_gpu")


def _is_gpu_mesh(mesh) -> bool:
    return mesh is not None and type(mesh).__module__.startswith("jax._src.pallas.mosaic_gpu")


def _kernel_eqn_is_mgpu(eqn) -> bool:
    name = eqn.primitive.name
    if name not in _KERNEL_PRIMITIVES:
        return False
    meshes = eqn.params.get("meshes", ()) or (eqn.params.get("mesh"),)
    return _is_gpu_compiler_params(eqn.params) or any(_is_gpu_mesh(m) for m in meshes)


def _wrapped_kernel(eqn):
    """For a ``custom_vmap_call`` (``plgpu.kernel`` wraps its ``mpmd_map`` in one): its
    ClosedJaxpr when that holds a Mosaic GPU kernel equation, else None."""
    if eqn.primitive.name != "custom_vmap_call":
        return None
    closed = eqn.params.get("call")
    jaxpr = getattr(closed, "jaxpr", None)
    if jaxpr is None or not any(_kernel_eqn_is_mgpu(e) for e in jaxpr.eqns):
        return None
    return closed


def is_mosaic_gpu(eqn) -> bool:
    """True for an equation that runs a Mosaic GPU kernel: an ``mpmd_map`` (what
    ``plgpu.kernel`` binds) or ``pallas_call`` with Mosaic GPU compiler params or mesh, or
    the ``custom_vmap_call`` that ``plgpu.kernel`` wraps around its ``mpmd_map``."""
    return _kernel_eqn_is_mgpu(eqn) or _wrapped_kernel(eqn) is not None


# --- The wgmma chain: one primitive, so that the interpreter binds it as one arithmetic op.


def wgmma_chain(acc, a, b, *, operand_format: str, accumulator: str):
    """``acc + a @ b`` as one ``plgpu.wgmma`` computes it on an H100: the chain over k of
    wgmma instructions (k 16 for f16 / bf16, 8 for tf32, 32 for fp8) starting from acc.

    Args:
      acc: (M, N) float32 (or float16 for f16 / fp8 operands).
      a: (M, K), b: (K, N): the kernel's operands; float32 ones are read as tf32 (their
        13 low significand bits dropped, as the tensor core reads an f32 word).
      operand_format: jaxwarp's operand format, e.g. ``"f16"``.
      accumulator: ``"f32"`` or ``"f16"``.

    Returns:
      (M, N) in acc's dtype.

    Example:
      >>> a = jnp.ones((64, 32), jnp.float16); b = jnp.ones((32, 8), jnp.float16)
      >>> float(wgmma_chain(jnp.zeros((64, 8)), a, b, operand_format="f16",
      ...                   accumulator="f32")[0, 0])
      32.0
    """
    if operand_format == "tf32":
        a = bitops.tf32_keep(a) if a.dtype == jnp.float32 else a
        b = bitops.tf32_keep(b) if b.dtype == jnp.float32 else b
    return kernel_matmul(a, b, acc, operand_format=operand_format, accumulator=accumulator,
                  instruction="wgmma", arch="sm_90a")


wgmma_chain_p = jcore.Primitive("jaxwarp_wgmma_chain")
wgmma_chain_p.def_impl(wgmma_chain)
wgmma_chain_p.def_abstract_eval(
    lambda acc, a, b, **_: jax.core.ShapedArray(acc.shape, acc.dtype))
mlir.register_lowering(wgmma_chain_p, mlir.lower_fun(wgmma_chain, multiple_results=False))


# --- The rewrite of a kernel jaxpr.


@dataclasses.dataclass(frozen=True)
class _Target:
    arch: str
    operand_format: str | None
    instruction: str | None
    sites: list = dataclasses.field(default_factory=list, compare=False)
    kernel: str = ""


def _check_model(model) -> _Target:
    arch = getattr(model, "arch", None)
    mode = getattr(model, "mode", "exact")
    instruction = getattr(model, "instruction", None)
    if mode != "exact":
        raise ValueError(f"Mosaic GPU kernels run in mode 'exact' only; got mode={mode!r}")
    if arch not in _WGMMA_ARCHS + _TCGEN05_ARCHS:
        raise ValueError(
            f"a Mosaic GPU kernel needs arch in {_WGMMA_ARCHS + _TCGEN05_ARCHS} (wgmma is "
            f"sm_90a's, tcgen05 sm_100a / sm_103a's); got arch={arch!r}")
    allowed = ("wgmma",) if arch in _WGMMA_ARCHS else ("tcgen05",)
    if instruction is not None and instruction not in allowed:
        raise ValueError(
            f"a Mosaic GPU kernel on {arch} issues {allowed[0]}; got "
            f"instruction={instruction!r} (allowed: None, {allowed[0]!r})")
    return _Target(arch, getattr(model, "operand_format", None), instruction)


def _with_kernel(target: _Target, eqn) -> _Target:
    name = eqn.params.get("name") or ""
    if not name and eqn.params.get("metadata"):
        name = str(dict(eqn.params["metadata"]).get("name", ""))
    return dataclasses.replace(target, sites=[], kernel=str(name or eqn.primitive.name))


def _wgmma_formats(acc_aval, a_aval, b_aval, target: _Target):
    """(operand_format, accumulator) of one wgmma, checked against what sm_90a issues."""
    dt, acc_dt = str(a_aval.dtype), str(acc_aval.dtype)
    if str(b_aval.dtype) != dt:
        raise ValueError(f"wgmma operands of different dtypes: a {dt}, b {b_aval.dtype}")
    if dtype_format(dt) not in _WGMMA_K:
        raise NotImplementedError(
            f"wgmma with {dt} operands is not modelled; operand formats allowed: "
            f"{tuple(_WGMMA_K)} (float32 as tf32)")
    fmt = target.operand_format or dtype_format(dt)
    if fmt not in _WGMMA_K:
        raise ValueError(f"operand_format={fmt!r} is not a wgmma format; allowed: "
                         f"{tuple(_WGMMA_K)}")
    accs = matmul_tiles.ACCUMULATORS["wgmma"][fmt]
    acc = formats.ALIASES.get(acc_dt)
    if acc not in accs:
        raise ValueError(
            f"wgmma with {fmt} operands cannot accumulate in {acc_dt}; allowed: "
            + ", ".join(str(matmul_tiles.ACC_DTYPE[a]) for a in accs))
    (m, n), (m2, k), (k2, n2) = acc_aval.shape, a_aval.shape, b_aval.shape
    if (m, n, k) != (m2, n2, k2):
        raise ValueError(f"wgmma shapes disagree: acc {acc_aval.shape}, a {a_aval.shape}, "
                         f"b {b_aval.shape}")
    kk = _WGMMA_K[fmt]
    if m % 64 or n % 8 or k % kk:
        raise ValueError(
            f"wgmma m64nNk{kk} ({fmt}) cannot issue an ({m}, {n}, {k}) product: M must be a "
            f"multiple of 64, N of 8 and K of {kk}")
    return fmt, acc


def _wgmma_eqns(eqn, target: _Target, internals) -> list:
    """The equations that replace one ``wgmma_ref`` equation: get the accumulator and the
    operands, run the chain, put the accumulator back."""
    if target.arch not in _WGMMA_ARCHS:
        raise ValueError(f"the kernel issues wgmma, which {target.arch} does not have "
                         f"(wgmma is sm_90a's); run it with arch='sm_90a'")
    trees = [eqn.params.get(k) for k in ("acc_transforms_tree", "a_transforms_tree",
                                         "b_transforms_tree")]
    counts = [0 if t is None else t.num_leaves for t in trees]
    avals = [v.aval for v in eqn.invars]
    a_is_ref = hasattr(avals[1], "inner_aval")

    def unflatten(tree, leaves):
        return () if tree is None else tuple(tree.unflatten(leaves))

    def body(acc_ref, a, b_ref, *leaves):
        acc_l, rest = leaves[:counts[0]], leaves[counts[0]:]
        a_l, b_l = rest[:counts[1]], rest[counts[1]:]
        acc_t = unflatten(trees[0], acc_l)
        acc_val = read_ref(acc_ref, acc_t, internals)
        a_val = read_ref(a, unflatten(trees[1], a_l), internals) if a_is_ref else a
        b_val = read_ref(b_ref, unflatten(trees[2], b_l), internals)
        fmt, accumulator = _wgmma_formats(acc_val, a_val, b_val, target)
        (m, k), n = a_val.shape, b_val.shape[1]
        target.sites.append(KernelProduct(
            tuple(a_val.shape), tuple(b_val.shape), str(a_val.dtype), str(b_val.dtype),
            tuple(acc_val.shape), str(acc_val.dtype), m, n, k, fmt, "wgmma", accumulator,
            note=f"Mosaic GPU wgmma: a chain of m64n{n}k{_WGMMA_K[fmt]} from the "
                 f"accumulator ({'registers' if not a_is_ref else 'shared memory'} A)",
            kernel=target.kernel))
        d = wgmma_chain_p.bind(acc_val, a_val, b_val, operand_format=fmt,
                               accumulator=accumulator)
        write_ref(acc_ref, acc_t, d, internals)
        return []

    return traced_eqns(body, eqn.invars, eqn.source_info, internals)[0]


def _interpreter_runs(primitive: str) -> bool:
    """Whether JAX's GPU interpreter has a rule for the primitive (tcgen05_mma and TMEM:
    JAX >= 0.11.0)."""
    from jax._src.pallas.mosaic_gpu.interpret import jaxpr_interpret

    return hasattr(jaxpr_interpret.JaxprInterpreter, f"_interpret_{primitive}_p")


#: Kernel primitives that JAX 0.10.2's GPU interpreter has no rule for (its error would be
#: "Higher-order primitive ..." or a missing CPU lowering), with what uses them.
_NOT_INTERPRETED = {
    "core_map": "a warp-level pl.core_map (plgpu.WarpMesh) inside the kernel",
    "mpmd_map": "a nested kernel mesh inside the kernel",
    "inline_mgpu_p": "plgpu.inline_mgpu (hand-written Mosaic GPU code)",
}


#: Cluster launch control (``plgpu.dynamic_scheduling_loop``), which JAX's GPU interpreter
#: has no rule for.
_SCHEDULING = ("try_cluster_cancel", "query_cluster_cancel")


def _scheduling_eqns(eqn, internals) -> tuple[list, list]:
    """Cluster launch control as a GPU on which no other block is pending: a cancel request
    (``try_cluster_cancel``) completes at once, failing: it arrives on its barrier, and
    ``query_cluster_cancel`` answers "not claimed" (grid index 0, success false). So each
    block runs the tile of its own grid index and stops, which is one of the schedules the
    hardware may choose; a kernel whose bits depend on the schedule is racy anyway.
    Returns (the replacing equations, the variables standing for the outputs)."""
    if eqn.primitive.name == "try_cluster_cancel":
        tree = eqn.params.get("result_transforms_tree")
        skip = 0 if tree is None else tree.num_leaves
        return [eqn.replace(primitive=barrier_arrive_primitive(),
                            invars=[eqn.invars[1], *eqn.invars[2 + skip:]],
                            params=dict(transforms_treedef=eqn.params.get(
                                "barrier_transforms_tree")))], []
    n = len(eqn.outvars) - 1

    def answer(*_):
        return (*(jnp.zeros((), jnp.int32) for _ in range(n)), jnp.zeros((), jnp.bool_))

    return traced_eqns(answer, eqn.invars, eqn.source_info, internals)


def _is_fence(eqn) -> bool:
    """An ``inline_mgpu`` of ``plgpu``'s PTX helper issuing a memory fence (what
    ``dynamic_scheduling_loop`` inserts): no operands, no results, a ``fence.`` string."""
    fn = eqn.params.get("mgpu_fn")
    cells = getattr(fn, "__closure__", None) or ()
    texts = [c.cell_contents for c in cells if isinstance(c.cell_contents, str)]
    return (not eqn.invars and not eqn.outvars and len(texts) == 1
            and texts[0].lstrip().startswith("fence."))


def _rewrite_param(value, target, internals):
    if isinstance(value, jcore.Jaxpr):
        return rewrite_kernel_jaxpr(value, target, internals)
    if isinstance(value, jcore.ClosedJaxpr):
        new = rewrite_kernel_jaxpr(value.jaxpr, target, internals)
        return value if new is value.jaxpr else jcore.ClosedJaxpr(new, value.consts)
    if isinstance(value, (tuple, list)) and any(
            isinstance(v, (jcore.Jaxpr, jcore.ClosedJaxpr)) for v in value):
        return type(value)(_rewrite_param(v, target, internals) for v in value)
    return value


def rewrite_kernel_jaxpr(jaxpr, target: _Target, internals=None):
    """A Mosaic GPU kernel jaxpr with every ``wgmma_ref`` replaced by the exact chain
    (nested jaxprs included) and every ``run_state`` by plain equations; any other
    product is an error."""
    internals = internals or jax_internals()
    eqns, changed, rename, todo = [], False, {}, list(jaxpr.eqns)
    while todo:
        eqn = todo.pop(0)
        if rename:
            eqn = eqn.replace(invars=[rename_var(v, rename) for v in eqn.invars],
                              effects=rename_effects(eqn.effects, rename))
        name = eqn.primitive.name
        if name == "run_state":
            todo[:0] = run_state_eqns(eqn, internals, rename)
            changed = True
            continue
        if name in _LAYOUT_ONLY:  # a register layout: no value changes
            rename[eqn.outvars[0]] = eqn.invars[0]
            changed = True
            continue
        if name == "wgmma_ref":
            eqns.extend(_wgmma_eqns(eqn, target, internals))
            changed = True
            continue
        if name in _SCHEDULING and not _interpreter_runs(name):
            new_eqns, new_outs = _scheduling_eqns(eqn, internals)
            rename.update(zip(eqn.outvars, new_outs, strict=True))
            eqns.extend(new_eqns)
            changed = True
            continue
        if name == "inline_mgpu_p" and _is_fence(eqn) and not _interpreter_runs(name):
            changed = True  # a memory fence: the interpreter's memory is already ordered
            continue
        if name in _NOT_INTERPRETED and not _interpreter_runs(name):
            raise NotImplementedError(
                f"the kernel uses {_NOT_INTERPRETED[name]} ({name}), which JAX "
                f"{jax.__version__}'s Mosaic GPU interpret mode cannot run, so neither can "
                f"jaxwarp (blackwell_matmul_mgpu needs the warp-level core_map of "
                f"JAX >= 0.11's interpreter)")
        if name in TMEM_PRIMITIVES:
            if target.arch not in _TCGEN05_ARCHS:
                raise ValueError(f"the kernel issues {name} (tcgen05, Blackwell's), which "
                                 f"{target.arch} does not have; allowed: {_TCGEN05_ARCHS}")
            eqns.extend(tcgen05_eqns(eqn, target, internals) if name == "tcgen05_mma"
                        else tmem_access_eqns(eqn, target, internals))
            changed = True
            continue
        if name in _UNMODELLED:
            raise NotImplementedError(
                f"a {name} inside a Mosaic GPU kernel is not modelled (the kernel products "
                f"jaxwarp runs exactly: wgmma on sm_90a); refusing to compute it with "
                f"numpy's matmul")
        params = {k: _rewrite_param(v, target, internals) for k, v in eqn.params.items()}
        if any(params[k] is not eqn.params[k] for k in params):
            eqn = eqn.replace(params=params)
            changed = True
        eqns.append(eqn)
    if not changed:
        return jaxpr
    return jaxpr.replace(eqns=eqns, outvars=[rename_var(v, rename) for v in jaxpr.outvars])


# --- Running the kernel.


def _run_kernel_eqn(eqn, invals, target: _Target):
    internals = jax_internals()
    interpret_params = internals[1]
    key = _KERNEL_PRIMITIVES[eqn.primitive.name]
    params = dict(eqn.params)
    kernel = params[key]
    if not _interpreter_runs("tcgen05_mma"):  # TMEM held in SMEM (JAX < 0.11.0)
        kernel = (tuple(retype_tmem(j, {}) for j in kernel) if isinstance(kernel, tuple)
                  else retype_tmem(kernel, {}))
    params[key] = _rewrite_param(kernel, target, internals)
    params["interpret"] = interpret_params()
    return eqn.primitive.bind(*invals, **params)


def run_kernel_and_sites(eqn, invals, model) -> tuple[list, tuple[KernelProduct, ...]]:
    """:func:`run_kernel`, and the kernel's wgmma sites (:class:`KernelProduct`, one per
    ``plgpu.wgmma`` in its code) for emulate's report."""
    target = _check_model(model)
    wrapped = _wrapped_kernel(eqn)
    if wrapped is None:
        if not _kernel_eqn_is_mgpu(eqn):
            raise ValueError(f"not a Mosaic GPU kernel equation: {eqn.primitive.name}")
        target = _with_kernel(target, eqn)
        return list(_run_kernel_eqn(eqn, invals, target)), tuple(target.sites)
    env = dict(zip(wrapped.jaxpr.constvars, wrapped.consts, strict=True))
    env.update(zip(wrapped.jaxpr.invars, invals, strict=True))

    def read(v):
        return v.val if isinstance(v, jcore.Literal) else env[v]

    sites = []
    for e in wrapped.jaxpr.eqns:
        args = [read(v) for v in e.invars]
        if _kernel_eqn_is_mgpu(e):
            t = _with_kernel(target, e)
            outs = _run_kernel_eqn(e, args, t)
            sites += t.sites
        else:
            outs = e.primitive.bind(*args, **e.params)
        outs = outs if e.primitive.multiple_results else [outs]
        env.update(zip(e.outvars, outs, strict=True))
    return [read(v) for v in wrapped.jaxpr.outvars], tuple(sites)


def run_kernel(eqn, invals, model) -> list:
    """Runs a Mosaic GPU kernel equation on the emulated tensor core.

    The kernel runs in JAX's Mosaic GPU interpret mode with every ``wgmma`` replaced by
    jaxwarp's exact wgmma chain (see the module docstring).

    Args:
      eqn: an equation :func:`is_mosaic_gpu` accepts.
      invals: its input values.
      model: a record with ``arch`` (``"sm_90a"`` for wgmma kernels, ``"sm_100a"`` /
        ``"sm_103a"`` for tcgen05 ones), ``mode`` (``"exact"``), ``instruction`` (None,
        or the one the arch issues), ``operand_format`` (None: the kernel's dtypes) and
        ``promote_every`` (unused: a kernel's k loop is its own code).

    Returns:
      The list of the equation's outputs.

    Raises:
      ValueError: a model the kernel cannot run on, or a wgmma the target cannot issue.
      NotImplementedError: a product in the kernel that is not modelled (named).
    """
    return run_kernel_and_sites(eqn, invals, model)[0]
