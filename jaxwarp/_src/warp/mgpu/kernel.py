"""``warp_kernel`` on Pallas' Mosaic GPU backend: a warp program as the threads of a CTA.

The kernel (:func:`call`) is ``plgpu.kernel`` over a grid of CTAs of one warpgroup (128
threads, 4 CUDA warps); a CTA runs ``4 * R`` of the program's warps, thread ``t`` being
lane ``t % 32`` of warps ``t // 32 + 4 i`` (``i < R``). Its body is one
``plgpu.inline_mgpu`` block that reads each input word with a load from device memory
(a warp's 32 lanes: 128 consecutive bytes), runs the program's thread walk
(``program.Walk``) with :class:`MlirThreads`, which writes MLIR (``arith``, ``math``,
``nvvm.shfl_sync``, ``scf`` loops), and stores each output word. A shuffle is the GPU's
own ``shfl.sync``; only a scatter goes through shared memory (a row of 33 words a warp:
store, ``bar.warp.sync``, load).

Off the GPU, ``warp_kernel(fn, interpret=True)`` with this backend runs the same walk
with ``threads.NumpyThreads`` (every thread in NumPy, ``shfl.sync`` by the PTX ISA) through
``jax.pure_callback``: the kernel's logic, not its compiler.

JAX API used: ``jax.experimental.pallas.mosaic_gpu`` (``kernel``, ``inline_mgpu``,
``RefType``), and MLIR's Python bindings as JAX ships them (``jax._src.lib.mlir``:
``ir``, dialects ``arith``, ``gpu``, ``math``, ``memref``, ``nvvm``), in JAX 0.10.2 and
0.11; :func:`api_error` says what is missing on another JAX. ``nvvm.shfl_sync`` changed
its signature between jaxlib releases; :func:`_shfl_sync` takes either.
"""

from __future__ import annotations

import inspect

import jax
import jax.numpy as jnp
import numpy as np

from jaxwarp._src.warp.mgpu import program, threads

WARP = program.WARP
WARPGROUP = 128
#: I/O dtypes the kernel loads and stores (a bool array's bytes are not i1).
IO_DTYPES = frozenset({"float32", "int32", "uint32", "int16", "uint16", "int8", "uint8"})


def api_error() -> str | None:
    """Why the installed JAX cannot build the kernel, or None if it can.

    Example:
        >>> api_error() is None or "Mosaic GPU" in api_error()
        True
    """
    try:
        from jax._src.lib.mlir import ir  # noqa: F401, PLC0415
        from jax._src.lib.mlir.dialects import arith, gpu, math, memref, nvvm  # noqa: F401, PLC0415
        from jax.experimental.pallas import mosaic_gpu as plgpu  # noqa: PLC0415
    except Exception as e:  # noqa: BLE001 (ImportError, or a jaxlib without them)
        return f"the installed JAX has no Mosaic GPU backend for Pallas ({e})"
    missing = [n for n in ("kernel", "inline_mgpu", "RefType") if not hasattr(plgpu, n)]
    if missing:
        return (f"the installed JAX's Mosaic GPU backend lacks {', '.join(missing)} "
                f"(jax {jax.__version__})")
    return None


def triton_missing() -> bool:
    """Whether the installed JAX lacks Pallas' Triton backend (which JAX 0.11 deprecates):
    then "auto" takes the Mosaic GPU kernels wherever they run.

    Example:
        >>> triton_missing() in (True, False)
        True
    """
    try:
        from jax.experimental.pallas import triton  # noqa: F401, PLC0415
    except Exception:  # noqa: BLE001 (ImportError, or a jaxlib without it)
        return True
    return False


def _ir_type(dtype):
    from jax._src.lib.mlir import ir  # noqa: PLC0415

    dtype = np.dtype(dtype)
    if dtype == np.float32:
        return ir.F32Type.get()
    return ir.IntegerType.get_signless(program.bit_width(dtype))


def _signed(dtype) -> bool:
    return np.dtype(dtype).kind == "i"


def _shfl_sync(ty, mask, val, offset, clamp, kind):
    """``nvvm.shfl_sync`` under either signature (result type first, or ``results=``)."""
    from jax._src.lib.mlir.dialects import nvvm  # noqa: PLC0415

    first = next(iter(inspect.signature(nvvm.shfl_sync).parameters))
    if first == "thread_mask":
        return nvvm.shfl_sync(mask, val, offset, clamp, kind, results=[ty])
    return nvvm.shfl_sync(ty, mask, val, offset, clamp, kind)


class MlirThreads:
    """The emitter that writes one thread's instructions as MLIR (``program.Walk``'s
    operations; a register is an ``ir.Value`` of the dtype's signless type)."""

    def __init__(self, lane, lane_index=None, rows=(), scratch=None):
        self._lane = lane
        self._lane_index, self._rows, self._scratch = lane_index, list(rows), scratch

    def const(self, value, dtype):
        from jax._src.lib.mlir import ir  # noqa: PLC0415
        from jax._src.lib.mlir.dialects import arith  # noqa: PLC0415

        dtype = np.dtype(dtype)
        a = np.asarray(value).astype(dtype).reshape(())
        if dtype == np.float32:  # through the bits: a NaN keeps its payload
            word = int(a.view(np.int32))
            i32 = ir.IntegerType.get_signless(32)
            return arith.bitcast(ir.F32Type.get(),
                                 arith.constant(i32, ir.IntegerAttr.get(i32, word)))
        bits = program.bit_width(dtype)
        v = int(a)
        if v >= 1 << (bits - 1) and bits > 1:
            v -= 1 << bits
        if bits == 1:
            v = -1 if v else 0
        ty = _ir_type(dtype)
        return arith.constant(ty, ir.IntegerAttr.get(ty, v))

    def lane(self):
        return self._lane

    def binary(self, op, a, b, dtype):
        from jax._src.lib.mlir.dialects import arith  # noqa: PLC0415

        s = _signed(dtype)
        f = {"addf": arith.addf, "subf": arith.subf, "add": arith.addi, "sub": arith.subi,
             "mul": arith.muli, "and": arith.andi, "or": arith.ori, "xor": arith.xori,
             "max": arith.maxsi if s else arith.maxui,
             "min": arith.minsi if s else arith.minui, "shl": arith.shli,
             "shr_l": arith.shrui, "shr_a": arith.shrsi,
             "div": arith.divsi if s else arith.divui,
             "rem": arith.remsi if s else arith.remui}[op]
        return f(a, b)

    def compare(self, op, a, b, dtype):
        from jax._src.lib.mlir.dialects import arith  # noqa: PLC0415

        p = arith.CmpIPredicate
        s = _signed(dtype)
        pred = {"eq": p.eq, "ne": p.ne, "lt": p.slt if s else p.ult,
                "le": p.sle if s else p.ule, "gt": p.sgt if s else p.ugt,
                "ge": p.sge if s else p.uge}[op]
        return arith.cmpi(pred, a, b)

    def select(self, c, a, b):
        from jax._src.lib.mlir.dialects import arith  # noqa: PLC0415

        return arith.select(c, a, b)

    def convert(self, a, src, dst):
        from jax._src.lib.mlir.dialects import arith  # noqa: PLC0415

        src, dst = np.dtype(src), np.dtype(dst)
        if dst == np.bool_ and src != np.bool_:
            return arith.cmpi(arith.CmpIPredicate.ne, a, self.const(0, src))
        sb, db = program.bit_width(src), program.bit_width(dst)
        if src == np.float32 or dst == np.float32:
            if src != dst:
                raise program.Unsupported(f"convert {src} -> {dst}")
            return a
        if sb == db:
            return a
        if db > sb:
            return (arith.extsi if _signed(src) else arith.extui)(_ir_type(dst), a)
        return arith.trunci(_ir_type(dst), a)

    def bitcast(self, a, src, dst):
        from jax._src.lib.mlir.dialects import arith  # noqa: PLC0415

        if _ir_type(src) == _ir_type(dst):
            return a
        return arith.bitcast(_ir_type(dst), a)

    def unary(self, op, a, dtype):
        from jax._src.lib.mlir.dialects import math  # noqa: PLC0415

        return (math.ctpop if op == "popc" else math.ctlz)(a)

    def ballot(self, pred):
        """``vote.sync.ballot.b32`` of an ``i1`` over the warp (every lane runs it)."""
        from jax._src.lib.mlir import ir  # noqa: PLC0415
        from jax._src.lib.mlir.dialects import arith, llvm  # noqa: PLC0415

        i32 = ir.IntegerType.get_signless(32)
        return llvm.inline_asm(
            i32, [arith.extui(i32, pred)],
            "{ .reg .pred p; setp.ne.b32 p, $1, 0; vote.sync.ballot.b32 $0, p, 0xffffffff; }",
            "=r,r", has_side_effects=True)

    def _word(self, x, dtype):
        from jax._src.lib.mlir import ir  # noqa: PLC0415
        from jax._src.lib.mlir.dialects import arith  # noqa: PLC0415

        i32 = ir.IntegerType.get_signless(32)
        if np.dtype(dtype) == np.float32:
            return arith.bitcast(i32, x)
        if program.bit_width(dtype) < 32:
            return arith.extui(i32, x)
        return x

    def _unword(self, w, dtype):
        from jax._src.lib.mlir import ir  # noqa: PLC0415
        from jax._src.lib.mlir.dialects import arith  # noqa: PLC0415

        if np.dtype(dtype) == np.float32:
            return arith.bitcast(ir.F32Type.get(), w)
        if program.bit_width(dtype) < 32:
            return arith.trunci(_ir_type(dtype), w)
        return w

    def for_loop(self, n, init, body):
        """``scf.for`` from 0 to ``n`` carrying ``init``."""
        from jax._src.lib.mlir import ir  # noqa: PLC0415
        from jax._src.lib.mlir.dialects import arith, scf  # noqa: PLC0415

        index = ir.IndexType.get()

        def c(v):
            return arith.constant(index, ir.IntegerAttr.get(index, v))

        loop = scf.ForOp(c(0), c(n), c(1), list(init))
        with ir.InsertionPoint(loop.body):
            scf.yield_(list(body(list(loop.inner_iter_args))))
        return list(loop.results)

    def while_loop(self, init, cond, body):
        """``scf.while``: each thread loops while ``cond`` holds for it."""
        from jax._src.lib.mlir import ir  # noqa: PLC0415
        from jax._src.lib.mlir.dialects import scf  # noqa: PLC0415

        types = [v.type for v in init]
        loop = scf.WhileOp(types, list(init))
        before = loop.before.blocks.append(*types)
        with ir.InsertionPoint(before):
            scf.condition(cond(list(before.arguments)), list(before.arguments))
        after = loop.after.blocks.append(*types)
        with ir.InsertionPoint(after):
            scf.yield_(list(body(list(after.arguments))))
        return list(loop.results)

    def exchange(self, regs, slots, dtype, keep):
        """Each lane's value to the lane its slot names (32: the row's spare word), in
        its warp's row of shared memory, over ``keep`` (each lane's own word first): stores,
        ``bar.warp.sync``, stores, ``bar.warp.sync``, loads, and a third ``bar.warp.sync``
        before the row is written again (the barrier orders the warp's shared-memory
        accesses)."""
        from jax._src.lib.mlir import ir  # noqa: PLC0415
        from jax._src.lib.mlir.dialects import arith, memref, nvvm  # noqa: PLC0415

        index = ir.IndexType.get()
        for k, row in zip(keep, self._rows, strict=True):
            memref.store(self._word(k, dtype), self._scratch, [row, self._lane_index])
        nvvm.bar_warp_sync(self.const(-1, np.int32))
        for v, s, row in zip(regs, slots, self._rows, strict=True):
            memref.store(self._word(v, dtype), self._scratch,
                         [row, arith.index_cast(index, s)])
        nvvm.bar_warp_sync(self.const(-1, np.int32))
        out = [self._unword(memref.load(self._scratch, [row, self._lane_index]), dtype)
               for row in self._rows]
        nvvm.bar_warp_sync(self.const(-1, np.int32))
        return out

    def shfl(self, x, mode, b, c, dtype):
        from jax._src.lib.mlir import ir  # noqa: PLC0415
        from jax._src.lib.mlir.dialects import nvvm  # noqa: PLC0415

        i32 = ir.IntegerType.get_signless(32)
        kind = {"bfly": nvvm.ShflKind.bfly, "up": nvvm.ShflKind.up,
                "down": nvvm.ShflKind.down, "idx": nvvm.ShflKind.idx}[mode]
        out = _shfl_sync(i32, self.const(-1, np.int32), self._word(x, dtype), b,
                         self.const(c, np.int32), kind)
        return self._unword(out, dtype)


def why_not(closed, in_dtypes, out_dtypes) -> str | None:
    """None when the Mosaic GPU kernel runs the traced program; else why not."""
    err = api_error()
    if err:
        return err
    for d in (*in_dtypes, *out_dtypes):
        if str(np.dtype(d)) not in IO_DTYPES:
            return f"an argument or result of dtype {np.dtype(d)} (the kernel loads and " \
                f"stores {', '.join(sorted(IO_DTYPES))})"
    return threads.why_not(closed)


def call(closed, args, out_dtypes, warps_per_thread: int, interpret: bool = False):
    """The program ``closed`` (``program.trace``) over the warps of ``args`` as one
    Mosaic GPU kernel (``interpret``: the same walk in NumPy through a callback)."""
    n = args[0].shape[0]
    r = warps_per_thread
    cta = 4 * r
    pad = -n % cta
    if pad:
        args = [jnp.pad(a, ((0, pad), (0, 0))) for a in args]
    outs = tuple(jax.ShapeDtypeStruct((n + pad, WARP), d) for d in out_dtypes)
    if interpret:
        res = jax.pure_callback(
            lambda *xs: tuple(np.asarray(o) for o in threads.simulate(
                closed, [np.asarray(x) for x in xs], r)),
            outs, *args)
    else:
        res = _mosaic(closed, args, outs, r)
    return tuple(o[:n] for o in res)


def _scatters(jaxpr) -> bool:
    """Whether the program (or a jaxpr it calls) scatters: the kernel then has a row of
    shared memory a warp."""
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "scatter":
            return True
        for v in eqn.params.values():
            sub = getattr(v, "jaxpr", v)
            if hasattr(sub, "eqns") and _scatters(sub):
                return True
    return False


def _mosaic(closed, args, outs, r: int):
    from jax._src.lib.mlir import ir  # noqa: PLC0415
    from jax._src.lib.mlir.dialects import arith, gpu, memref  # noqa: PLC0415
    from jax.experimental.pallas import mosaic_gpu as plgpu  # noqa: PLC0415

    n_in, n_out = len(args), len(outs)
    cta = 4 * r
    in_dtypes = [np.dtype(a.dtype) for a in args]
    scratch = _scatters(closed.jaxpr)

    def body(*refs):
        @plgpu.inline_mgpu(arg_types=tuple(plgpu.RefType() for _ in refs))
        def emit(_ctx, *mrefs):
            index = ir.IndexType.get()

            def c(v):
                return arith.constant(index, ir.IntegerAttr.get(index, v))

            tid = gpu.thread_id(gpu.Dimension.x)
            lane = arith.remui(tid, c(WARP))
            warp = arith.divui(tid, c(WARP))
            first = arith.muli(gpu.block_id(gpu.Dimension.x), c(cta))
            local = [arith.addi(warp, c(4 * i)) for i in range(r)]
            rows = [arith.addi(first, w) for w in local]
            walk = program.Walk(MlirThreads(
                arith.index_cast(ir.IntegerType.get_signless(32), lane), lane, local,
                mrefs[n_in + n_out] if scratch else None), r)
            ins = [program.Regs([memref.load(m, [row, lane]) for row in rows], d, "full")
                   for m, d in zip(mrefs[:n_in], in_dtypes, strict=True)]
            res = [walk.settle(x) for x in walk.run(closed.jaxpr, closed.consts, ins)]
            for m, x in zip(mrefs[n_in:n_in + n_out], res, strict=True):
                for row, v in zip(rows, x.regs, strict=True):
                    memref.store(v, m, [row, lane])

        emit(*refs)

    extra = {}
    if scratch:  # a row of 33 words a warp: 32 slots and a spare for lanes storing none
        key = "scratch_types" if "scratch_types" in inspect.signature(
            plgpu.kernel).parameters else "scratch_shapes"
        extra[key] = [plgpu.SMEM((cta, WARP + 1), jnp.int32)]
    run = plgpu.kernel(body, out_type=outs, grid=((outs[0].shape[0]) // cta,),
                       grid_names=("ctas",), **extra)
    res = run(*args)
    return res if isinstance(res, (tuple, list)) else (res,)
