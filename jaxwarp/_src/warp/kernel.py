"""``warp_kernel``: a one-warp program run over many warps as one GPU kernel.

``jax.vmap(fn)`` over a batch of warps is what every jaxwarp function is built for,
and on a CPU it is what ``warp_kernel`` does. On a GPU, XLA compiles a vmapped warp
program into loop fusions that compute one output element each; a shuffle makes
every element of the result depend on two of its input, so a chain of k shuffles
reads 2**k inputs per output and XLA cuts it into several kernels, each going
through device memory (``benchmarks/warp_reduce.py`` shows where and why). In a
Pallas kernel (Triton), a block of warps sits in registers and a shuffle with a
static offset is a handful of register moves (reshape, transpose, split into halves,
join), so a whole warp program is one pass over memory.

Bits: the kernel runs only programs whose every operation gives the same bits in
Triton as in XLA: data movement (reshapes, transposes, splits, joins, broadcasts,
selects, bit casts), integer arithmetic, comparisons and reductions (sums, minima,
maxima, ``cumsum``, ``popc``: exact in any order), float32 addition and subtraction
(IEEE, to nearest even, in both), and, in the forms of ``kernel_ops`` (a jaxpr
interpreter that evaluates the traced program inside the kernel): integer division and
remainder guarded so that no case LLVM leaves undefined reaches the instruction, gathers
and scatters of single elements (any shuffle, a store to computed slots) as one-hot
selections, ``fori_loop`` / ``while_loop`` / ``cond``. A scatter that sets an output of
the program (indices declared unique, the value read by nothing else: a warp's store to
computed slots) is written as a GPU program writes it, with masked stores to those slots
(``jaxwarp.config.warp_kernel_output_scatter``). Anything else (a float product,
which Triton may contract with an addition into an FMA; a float division, which Triton
computes approximately; a scatter that sets elements without ``unique_indices=True``,
where XLA leaves which of two updates wins unspecified; a shape that is not a power of
two) makes ``warp_kernel`` run ``jax.vmap(fn)`` instead, with the same bits, and
``warp_kernel(fn).explain(*args)`` says why.

On Pallas' Mosaic GPU backend (``jaxwarp.config.warp_kernel_backend``; "auto" takes it
wherever its walk runs the program, Triton where it does not) a warp runs as a warp:
each lane a thread, each shuffle a ``shfl.sync``, each ballot a ``vote.sync.ballot``, a
scatter through the warp's row of shared memory (``jaxwarp._src.warp.mgpu``); float
products and conversions run ``vmap`` there.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxwarp._src import checks
from jaxwarp._src.config import config
from jaxwarp._src.warp import kernel_ops, lanes
from jaxwarp._src.warp.mgpu import kernel as mgpu_kernel
from jaxwarp._src.warp.mgpu import program as mgpu_program

WARP_SIZE = lanes.WARP_SIZE
# Warps per kernel program when warps_per_block is None: 128, or 8 for a program with
# one-hot gathers / scatters ((warps, 32, 32) intermediates held in registers; a scatter
# into an output is stored instead, ``_stored``).
_DEFAULT_BLOCK = 128
_ONEHOT_BLOCK = 8
# Warps per CTA of the Mosaic GPU kernel when warps_per_block is None (one warpgroup, each
# thread a lane of 8 warps): on an H100 (JAX 0.11.2, 2026-12-06) the best or within 0.01 of
# it for the butterfly and the divergent programs; 16 gave 0.62-0.68 of a copy on those
# (benchmarks/results/h100_warp_divergence.json).
_MGPU_BLOCK = 32

# Primitives whose Triton lowering gives XLA's bits for every input of these dtypes.
_MOVES = frozenset({
    "reshape", "transpose", "split", "concatenate", "squeeze", "broadcast_in_dim",
    "iota", "bitcast_convert_type", "select_n", "expand_dims", "stop_gradient",
})
_INT_OPS = frozenset({
    "add", "sub", "mul", "neg", "and", "or", "xor", "not", "shift_left",
    "shift_right_logical", "shift_right_arithmetic", "max", "min", "eq", "ne", "lt", "le",
    "gt", "ge", "convert_element_type", "sign",
})
_F32_OPS = frozenset({"add", "sub"})
_DTYPES = frozenset({"float32", "int32", "uint32", "int16", "uint16", "int8", "uint8",
                     "bool"})


def _why_not(jaxpr) -> str | None:
    """The first operation of ``jaxpr`` that the kernel does not run bit-exactly, or
    None when every one is allowed (as it is, or in ``kernel_ops``' form)."""
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        sub = kernel_ops.call_jaxpr(eqn)
        if sub is not None:
            why = _why_not(getattr(sub, "jaxpr", sub))
            if why:
                return why
            continue
        dtypes = {str(v.aval.dtype) for v in (*eqn.invars, *eqn.outvars)
                  if hasattr(v.aval, "dtype")}
        if not dtypes <= _DTYPES:
            return f"{name} on {sorted(dtypes - _DTYPES)}"
        for v in (*eqn.invars, *eqn.outvars):
            shape = getattr(v.aval, "shape", ())
            if any(n & (n - 1) for n in shape):
                return (f"{name} on shape {tuple(shape)} (a Triton block's sizes are "
                        f"powers of two)")
        if name in _MOVES:
            continue
        if name in kernel_ops.REWRITES or name in kernel_ops.INT_REDUCTIONS:
            why = kernel_ops.why_not(eqn)
            for sub in kernel_ops.sub_jaxprs(eqn):
                why = why or _why_not(sub)
            if why:
                return why
            continue
        if name in _F32_OPS and dtypes == {"float32"}:
            continue
        if name in _INT_OPS:
            if "float32" not in dtypes:
                continue
            return f"{name} on float32 (Triton may give other bits than XLA)"
        return f"{name} (no bit-exact Triton lowering here)"
    return None


def _on_gpu(x: jax.Array) -> bool:
    try:
        devices = x.devices()
    except jax.errors.ConcretizationTypeError:  # a tracer: the default backend runs it
        return jax.default_backend() == "gpu"
    return all(d.platform == "gpu" for d in devices)


class WarpKernel:
    """``fn`` (one warp: (32,) arrays -> (32,) array or tuple of them) over warps."""

    def __init__(self, fn: Callable, warps_per_block: int | None, num_warps: int | None,
                 force: str | None, interpret: bool):
        self.fn = fn
        self.interpret = interpret
        self.warps_per_block = warps_per_block
        self.num_warps = num_warps
        self.force = force
        functools.update_wrapper(self, fn)

    def _trace(self, args: list[jax.Array]):
        """Traces ``fn`` on one block of warps, as the kernel would run it: (why it cannot
        run as a kernel or None, the block's output shapes, the traced program)."""
        b = self.warps_per_block or _DEFAULT_BLOCK
        while True:
            block = [jax.ShapeDtypeStruct((b, WARP_SIZE), a.dtype) for a in args]
            try:
                with lanes.kernel_lowering():
                    jx, out_block = jax.make_jaxpr(jax.vmap(self.fn),
                                                   return_shape=True)(*block)
            except NotImplementedError as e:
                return str(e), None, None
            if (self.warps_per_block or b == _ONEHOT_BLOCK
                    or not _has_onehot(jx.jaxpr, _stored(jx.jaxpr))):
                break
            b = _ONEHOT_BLOCK  # (b, 32, 32) one-hot forms: a smaller block of warps
        for o in jax.tree.leaves(out_block):
            if o.shape != (b, WARP_SIZE):
                return (f"an output of shape {o.shape[1:]} per warp (the kernel writes "
                        f"({WARP_SIZE},) per warp)"), None, None
        for c in kernel_ops.constants(jx.jaxpr, jx.consts):
            shape, dtype = np.shape(c), str(np.asarray(c).dtype)
            if any(n & (n - 1) for n in shape) or dtype not in _DTYPES:
                return f"a constant {dtype}{list(shape)} in the program", None, None
        return _why_not(jx.jaxpr), out_block, jx

    def backend(self, *args) -> str:
        """The Pallas backend a call on ``args`` takes: ``jaxwarp.config.warp_kernel_backend``.
        "auto" is Mosaic GPU where its kernel runs the program (on ``args``; without them,
        wherever it may), else Triton while the installed JAX ships it: Triton where the
        Mosaic GPU walk does not run the program, where the installed JAX has no Mosaic
        GPU backend for Pallas, or where ``num_warps`` asks for more than the one warpgroup
        a Mosaic GPU CTA runs."""
        return self._route(_check_all(args))[0] if args else self._order()[0]

    def _order(self) -> tuple[str, ...]:
        """The backends a call tries, in turn."""
        choice = config.warp_kernel_backend
        if choice != "auto":
            return (choice,)
        if mgpu_kernel.triton_missing():
            return ("mosaic_gpu",)
        if mgpu_kernel.api_error() is not None or self.num_warps not in (None, 4) or (
                self.warps_per_block is not None and self.warps_per_block < 4):
            return ("triton",)
        return ("mosaic_gpu", "triton")

    def _route(self, args):
        """(the backend, why its kernel does not run ``fn`` on ``args`` or None, what the
        kernel needs: the Mosaic GPU program, or Triton's (program, output block)): the
        first of :meth:`_order` that runs the program, else the last, with every reason."""
        reasons = []
        for backend in self._order():
            if backend == "mosaic_gpu":
                why, made = self._trace_mgpu(args)
            else:
                why, out_block, program = self._trace(args)
                made = (program, out_block)
            if why is None:
                return backend, None, made
            reasons.append(why)
        why = reasons[-1] + "".join(f" (and the Mosaic GPU kernel: {r})" for r in reasons[:-1])
        return backend, why, made

    def _trace_mgpu(self, args):
        """(why the Mosaic GPU kernel cannot run ``fn`` or None, the traced program)."""
        try:
            closed = mgpu_program.trace(self.fn, [a.dtype for a in args])
        except NotImplementedError as e:
            return str(e), None
        outs = [v.aval for v in closed.jaxpr.outvars]
        for o in outs:
            if tuple(o.shape) != (mgpu_program.TRACE_WARPS, WARP_SIZE):
                return (f"an output of shape {o.shape[1:]} per warp (the kernel writes "
                        f"({WARP_SIZE},) per warp)"), None
        return mgpu_kernel.why_not(closed, [a.dtype for a in args],
                                   [o.dtype for o in outs]), closed

    def explain(self, *args) -> str | None:
        """None when ``fn`` runs as a Pallas kernel on these arguments (on a GPU, with
        the backend of :meth:`backend`); otherwise why it runs as ``jax.vmap(fn)``."""
        return self._route(_check_all(args))[1]

    def __call__(self, *args):
        args = _check_all(args)
        use = self.force or ("pallas" if self.interpret or all(_on_gpu(a) for a in args)
                             else "vmap")
        if (self.force == "pallas" and not self.interpret and args[0].shape[0]
                and not all(_on_gpu(a) for a in args)):
            where = sorted({d.platform for a in args if not isinstance(a, jax.core.Tracer)
                            for d in a.devices()} or {jax.default_backend()})
            raise ValueError(
                f"warp_kernel(force='pallas') compiles a Pallas GPU kernel, but the "
                f"arguments are on {', '.join(where)}; pass force=None (choose) or "
                f"force='vmap' to run jax.vmap(fn) here, interpret=True to run the kernel "
                f"in Pallas' interpreter, or run on a GPU")
        if use == "pallas" and args[0].shape[0]:  # (no warps: nothing to launch)
            backend, why, made = self._route(args)
            if why is None and backend == "mosaic_gpu":
                return self._differentiable(functools.partial(self._mosaic, made), *args)
            if why is None:
                program, out_block = made
                return self._differentiable(
                    lambda *xs: self._pallas(program, list(xs), out_block), *args)
            if self.force == "pallas":
                raise NotImplementedError(f"warp_kernel: {why}")
        return jax.vmap(self.fn)(*args)

    def _differentiable(self, kernel, *args):
        # A Pallas kernel has no derivative rule of its own; the kernel computes vmap(fn)'s
        # values bit for bit, so its derivative is vmap(fn)'s.
        @jax.custom_jvp
        def run(*xs):
            return kernel(*xs)

        @run.defjvp
        def run_jvp(primals, tangents):
            return run(*primals), jax.jvp(jax.vmap(self.fn), primals, tangents)[1]

        return run(*args)

    def _mosaic(self, closed, *args):
        if self.num_warps not in (None, 4):
            raise ValueError(f"num_warps={self.num_warps}: the Mosaic GPU kernel runs one "
                             f"warpgroup (4 CUDA warps) a CTA; allowed: None or 4")
        b = self.warps_per_block or _MGPU_BLOCK
        if b < 4:
            raise ValueError(f"warps_per_block={b}: the Mosaic GPU kernel runs at least 4 "
                             f"warps a CTA (one a CUDA warp); allowed: None or a power of "
                             f"two >= 4")
        res = mgpu_kernel.call(closed, list(args),
                               [v.aval.dtype for v in closed.jaxpr.outvars], b // 4,
                               self.interpret)
        return res if len(res) > 1 else res[0]

    def _pallas(self, program, args, out_block):
        from jax.experimental import pallas as pl
        from jax.experimental.pallas import triton as pltriton

        b = program.in_avals[0].shape[0]
        n_warps = args[0].shape[0]
        pad = -n_warps % b
        if pad:
            # Whole blocks only: the Triton kernel computed wrong lanes in a block that
            # reaches past the last warp (H100, jax 0.11.2); the padding warps are dropped.
            args = [jnp.pad(a, ((0, pad), (0, 0))) for a in args]
        multi = isinstance(out_block, (tuple, list))
        outs = tuple(jax.ShapeDtypeStruct((n_warps + pad, *o.shape[1:]), o.dtype)
                     for o in (out_block if multi else (out_block,)))
        spec = pl.BlockSpec((b, WARP_SIZE), lambda i: (i, 0))
        n_in = len(args)
        # Arrays the program closes over (tables of lanes): whole-array kernel inputs, as a
        # Pallas kernel may not capture arrays.
        consts = kernel_ops.constants(program.jaxpr, program.consts)
        const_specs = [pl.BlockSpec(np.shape(c), functools.partial(_origin, np.ndim(c)))
                       for c in consts]

        store = _stored(program.jaxpr)

        def body(*refs):
            vals = [r[...] for r in refs[:n_in + len(consts)]]
            const_values = {id(c): v for c, v in zip(consts, vals[n_in:], strict=True)}
            res = kernel_ops.run(program.jaxpr, program.consts, vals[:n_in], const_values,
                                 store)
            for r, v in zip(refs[n_in + len(consts):], res, strict=True):
                if isinstance(v, kernel_ops.Stored):
                    _store(r, v)
                else:
                    r[...] = v

        call = pl.pallas_call(
            body,
            out_shape=outs,
            grid=((n_warps + pad) // b,),
            in_specs=[spec] * n_in + const_specs,
            out_specs=tuple(spec for _ in outs),
            interpret=self.interpret,
            # Triton, named (JAX 0.10 lowers a pallas_call without parameters to Mosaic GPU).
            compiler_params=pltriton.CompilerParams(num_warps=self.num_warps),
        )
        res = tuple(r[:n_warps] for r in call(*args, *(jnp.asarray(c) for c in consts)))
        return res if multi else res[0]


def _store(ref, s):
    """Writes a scatter's result (``kernel_ops.Stored``) to the output block ref (b, n):
    the operand where no update reaches, then each update to its slot, two masked stores
    to disjoint places (an update's lane outside the block points past the row, where
    the masked store writes nothing; Pallas' interpreter drops it)."""
    from jax.experimental.pallas import triton as pltriton

    n = ref.shape[-1]
    pltriton.store(ref, s.op, mask=~s.hit)
    rows = jax.lax.broadcasted_iota(jnp.int32, s.idx.shape, 0)
    pltriton.store(ref.at[rows, jnp.where(s.inside, s.idx, n)], s.upd, mask=s.inside)


def _origin(ndim: int, i):
    del i
    return (0,) * ndim


def _stored(jaxpr) -> frozenset:
    """The outputs of ``jaxpr`` that the kernel stores as a scatter (``kernel_ops.Stored``;
    none with ``jaxwarp.config.warp_kernel_output_scatter="onehot"``)."""
    if config.warp_kernel_output_scatter == "store":
        return kernel_ops.stored_outputs(jaxpr)
    return frozenset()


def _has_onehot(jaxpr, stored=frozenset()) -> bool:
    """Whether ``jaxpr`` (or a jaxpr inside it) gathers or scatters, other than the
    scatters of ``stored`` outputs: ``kernel_ops`` makes those (warps, 32, 32) one-hot
    forms."""
    for eqn in jaxpr.eqns:
        if ((eqn.primitive.name == "gather" or eqn.primitive.name.startswith("scatter"))
                and eqn.outvars[0] not in stored):
            return True
        if any(_has_onehot(sub) for sub, _ in kernel_ops.param_jaxprs(eqn)):
            return True
    return False


def _check_all(args: tuple) -> list[jax.Array]:
    if not args:
        raise ValueError("warp_kernel: no arguments; allowed: one or more (warps, 32) arrays")
    arrays = [_check(a, i) for i, a in enumerate(args)]
    warps = [a.shape[0] for a in arrays]
    if len(set(warps)) > 1:
        raise ValueError(f"warp_kernel: the arguments have {warps} warps; allowed: the same "
                         f"number of warps in every argument")
    return arrays


def _check(a: Any, i: int) -> jax.Array:
    a = checks.array_arg(a, f"warp_kernel: argument {i}")
    if a.ndim != 2 or a.shape[1] != WARP_SIZE:
        raise ValueError(f"warp_kernel: argument {i} has shape {a.shape}; allowed: "
                         f"(warps, {WARP_SIZE})")
    return a


def warp_kernel(fn: Callable | None = None, *, warps_per_block: int | None = None,
                num_warps: int | None = None, force: str | None = None,
                interpret: bool = False):
    """Runs the one-warp program ``fn`` over many warps, on a GPU as one kernel.

    ``warp_kernel(fn)(x, y, ...)`` equals ``jax.vmap(fn)(x, y, ...)`` bit for bit,
    where every argument is a (warps, 32) array and ``fn`` maps one warp's (32,)
    lanes to a (32,) array or a tuple of them. On a GPU, when every operation of
    ``fn`` gives the same bits in Triton as in XLA, it runs as a Pallas kernel over
    blocks of ``warps_per_block`` warps, which keeps a chain of shuffles in registers
    instead of device memory; otherwise, and on other backends, it runs
    ``jax.vmap(fn)``. Derivatives (``jax.grad``, ``jax.jvp``) are ``jax.vmap(fn)``'s
    in either case.

    The kernel runs data movement, integer arithmetic, comparisons and reductions,
    integer division (XLA's results for division by zero and MIN / -1), float32
    addition and subtraction, gathers and scatters of single elements (shuffles with
    any offset, stores to computed slots: a scatter that sets elements needs
    ``unique_indices=True``, as XLA leaves duplicates unspecified) and loops; anything
    else (a float product, which Triton may contract into an FMA; a float division,
    which Triton computes approximately; a size that is not a power of two) makes it
    run ``jax.vmap(fn)``, with the same bits. ``warp_kernel(fn).explain(*args)`` is
    None where the kernel runs, else it says why not.

    Args:
      fn: the warp program.
      warps_per_block: warps per kernel program (a power of two); None: 128, or 8 for a
        program that gathers or scatters other than into its outputs (its one-hot
        selections hold (warps, 32, 32) values in registers). On Mosaic GPU: warps per
        CTA, at least 4; None: 32.
      num_warps: CUDA warps per program (Triton's ``num_warps``); None: Pallas's
        default. The Mosaic GPU kernel runs one warpgroup (4 CUDA warps): None or 4.
      force: None (choose), "pallas" (raise if ``fn`` cannot run as a kernel) or
        "vmap".
      interpret: run the Pallas kernel in Pallas's interpreter (any backend; slow):
        the kernel's own code path, for testing it where there is no GPU. With the
        Mosaic GPU backend: the kernel's threads in NumPy (each ``shfl.sync`` by the PTX
        ISA), through a host callback.

    Example:
      >>> import jax.numpy as jnp, jaxwarp
      >>> @jaxwarp.warp_kernel
      ... def warp_sum(v):
      ...     for m in (16, 8, 4, 2, 1):
      ...         v = v + jaxwarp.shfl_xor_sync(0xFFFFFFFF, v, m)
      ...     return v
      >>> warp_sum(jnp.ones((4, 32), jnp.float32))[:, 0]
      Array([32., 32., 32., 32.], dtype=float32)
      >>> warp_sum.explain(jnp.ones((4, 32), jnp.float32)) is None
      True
      >>> @jaxwarp.warp_kernel
      ... def reverse(v):  # a store to computed slots: distinct ones
      ...     return jnp.zeros_like(v).at[31 - jaxwarp.lane_id()].set(v, unique_indices=True)
      >>> reverse.explain(jnp.ones((4, 32), jnp.int32)) is None
      True
    """
    checks.static_choice(force, "force", (None, "pallas", "vmap"))
    if warps_per_block is not None and not (
            isinstance(warps_per_block, int) and warps_per_block >= 1
            and warps_per_block & (warps_per_block - 1) == 0):
        raise ValueError(f"warps_per_block={warps_per_block!r}; allowed: None or a power "
                         f"of two")
    if num_warps is not None and not (isinstance(num_warps, int) and num_warps >= 1
                                      and num_warps & (num_warps - 1) == 0):
        raise ValueError(f"num_warps={num_warps!r}; allowed: None or a power of two")
    if fn is None:
        return functools.partial(warp_kernel, warps_per_block=warps_per_block,
                                 num_warps=num_warps, force=force, interpret=interpret)
    if not callable(fn):
        raise TypeError(f"fn={fn!r} is not callable; allowed: a function of (32,) arrays")
    return WarpKernel(fn, warps_per_block, num_warps, force, bool(interpret))
