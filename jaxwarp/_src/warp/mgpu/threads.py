"""The Mosaic GPU kernel's threads computed in NumPy: a CPU check of the thread walk.

:class:`NumpyThreads` is ``program.Walk``'s emitter for a whole CTA: a register is an array
over the threads (lane = thread % 32) and ``shfl.sync`` follows the PTX ISA's definition
(``program.ptx_source``). :func:`simulate` runs a program over many warps as the kernel's
CTAs would; ``warp_kernel(fn, interpret=True)`` on the Mosaic GPU backend calls it, and
:func:`why_not` is a dry walk that finds what the kernel does not run.
"""

from __future__ import annotations

import numpy as np

from jaxwarp._src.warp.mgpu.program import Walk
from jaxwarp._src.warp.mgpu.values import (
    WARP,
    Regs,
    Unsupported,
    bit_width,
    ptx_source,
    uint_of,
)


class NumpyThreads:
    """The emitter that computes a CTA's threads in NumPy: a register is an array over the
    threads (lane = thread % 32), ``shfl.sync`` follows the PTX ISA."""

    def __init__(self, threads: int = WARP):
        self.t = threads

    def const(self, value, dtype):
        return np.full(self.t, np.asarray(value).astype(dtype))

    def lane(self):
        return (np.arange(self.t) % WARP).astype(np.uint32)

    def binary(self, op, a, b, dtype):
        dtype = np.dtype(dtype)
        with np.errstate(all="ignore"):
            if op in ("addf", "subf"):
                return (a + b if op == "addf" else a - b).astype(np.float32)
            if op in ("shl", "shr_l", "shr_a"):
                bits = bit_width(dtype)
                s = b.astype(np.int64)
                assert np.all((s >= 0) & (s < bits)), "shift amount out of range"
                u = a.view(uint_of(dtype)) if dtype != np.bool_ else a
                if op == "shl":
                    return (u.astype(np.uint64) << s.astype(np.uint64)).astype(
                        uint_of(dtype)).view(dtype)
                if op == "shr_l":
                    return (u.astype(np.uint64) >> s.astype(np.uint64)).astype(
                        uint_of(dtype)).view(dtype)
                signed = a.view(np.dtype(f"i{dtype.itemsize}")).astype(np.int64)
                return (signed >> s).astype(np.dtype(f"i{dtype.itemsize}")).view(dtype)
            if op in ("div", "rem"):
                assert np.all(b != 0), "division by zero reached the instruction"
                q = _trunc_div(a, b)
                return (q if op == "div" else a - q * b).astype(dtype)
            f = {"add": np.add, "sub": np.subtract, "mul": np.multiply,
                 "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor,
                 "max": np.maximum, "min": np.minimum}[op]
            if dtype == np.bool_ and op in ("add", "sub", "mul"):
                raise Unsupported(f"{op} on booleans")
            return f(a, b).astype(dtype)

    def compare(self, op, a, b, dtype):
        return {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
                "gt": np.greater, "ge": np.greater_equal}[op](a, b)

    def select(self, c, a, b):
        return np.where(c, a, b)

    def convert(self, a, src, dst):
        if np.dtype(dst) == np.bool_:
            return a != 0
        return a.astype(dst)

    def bitcast(self, a, src, dst):
        return a.astype(src).view(dst)

    def unary(self, op, a, dtype):
        bits = bit_width(dtype)
        u = a.view(uint_of(dtype)).astype(np.uint64)
        if op == "popc":
            out = np.array([bin(int(v)).count("1") for v in u], np.uint64)
        else:
            out = np.array([bits - int(v).bit_length() for v in u], np.uint64)
        return out.astype(dtype)

    def ballot(self, pred):
        """``vote.sync.ballot.b32`` over each CUDA warp: bit ``l`` set where lane ``l``'s
        ``pred`` holds, the same word in every lane of the warp."""
        bits = np.asarray(pred, bool).astype(np.uint64) << (np.arange(self.t) % WARP).astype(
            np.uint64)
        words = bits.reshape(-1, WARP).sum(axis=1).astype(np.uint32)
        return np.repeat(words, WARP)

    def for_loop(self, n, init, body):
        vals = list(init)
        for _ in range(n):
            vals = body(vals)
        return vals

    def while_loop(self, init, cond, body):
        """Each thread loops while its predicate holds (a thread that stops keeps its
        values; a CUDA warp's threads stop together in the kernel)."""
        vals = [np.array(v) for v in init]
        while True:
            pred = np.broadcast_to(cond(vals), (self.t,))
            if not pred.any():
                return vals
            new = body(vals)
            vals = [np.where(pred, n, v) for n, v in zip(new, vals, strict=True)]

    def exchange(self, regs, slots, dtype, keep):
        """Each lane's value to the lane its slot names, in its own warp (slot 32: none);
        a lane no slot names keeps its word of ``keep``."""
        t = np.arange(self.t)
        out = []
        for v, s, k in zip(regs, slots, keep, strict=True):
            o = np.array(k, copy=True)
            store = s < WARP
            o[(t - t % WARP + s)[store]] = v[store]
            out.append(o)
        return out

    def shfl(self, x, mode, b, c, dtype):
        """``shfl.sync`` of 32-bit words (narrower values travel in the low bits)."""
        t = np.arange(self.t)
        b = np.broadcast_to(np.asarray(b, np.int64), (self.t,))
        j, ok = ptx_source(mode, b, c, t % WARP)
        src = np.where(ok, t - t % WARP + np.clip(j, 0, WARP - 1), t)
        return x[src]


def _trunc_div(a, b):
    a64, b64 = a.astype(np.int64), b.astype(np.int64)
    q = np.abs(a64) // np.abs(b64)
    return np.where((a64 < 0) != (b64 < 0), -q, q)


def why_not(closed) -> str | None:
    """None when :func:`run` walks the program; else why not (a dry walk in NumPy)."""
    try:
        simulate(closed, [np.zeros((4, WARP), v.aval.dtype) for v in closed.jaxpr.invars])
    except Unsupported as e:
        return str(e)
    return None


def simulate(closed, args: list[np.ndarray], warps_per_thread: int = 1) -> list:
    """The program on ``args`` ((warps, 32) arrays) as the kernel's threads compute it, in
    NumPy: CTAs of ``warps_per_thread`` warps a thread."""
    n = args[0].shape[0]
    r = warps_per_thread
    cta_warps = 4 * r
    threads = 4 * WARP
    outs = None
    for start in range(0, n, cta_warps):
        block = [np.zeros((cta_warps, WARP), a.dtype) for a in args]
        for blk, a in zip(block, args, strict=True):
            part = a[start:start + cta_warps]
            blk[:len(part)] = part
        walk = Walk(NumpyThreads(threads), r)
        tid = np.arange(threads)
        ins = [Regs([blk[tid // WARP + 4 * i, tid % WARP] for i in range(r)], blk.dtype,
                    "full") for blk in block]
        res = walk.run(closed.jaxpr, closed.consts, ins)
        res = [walk.settle(x) for x in res]
        if outs is None:
            outs = [np.zeros((n, WARP), x.dtype) for x in res]
        for o, x in zip(outs, res, strict=True):
            blk = np.zeros((cta_warps, WARP), x.dtype)
            for i in range(r):
                blk[tid // WARP + 4 * i, tid % WARP] = x.regs[i]
            o[start:start + cta_warps] = blk[:n - start]
    return outs
