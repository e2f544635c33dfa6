"""A warp program as one thread's instructions: the jaxpr of ``jax.vmap(fn)`` evaluated
lane by lane, each lane a GPU thread, a shuffle a ``shfl.sync``.

``warp_kernel``'s Mosaic GPU kernel runs a warp as a warp: thread ``t`` of a CTA is lane
``t % 32`` of its warps. :func:`run` walks the program's jaxpr (traced on a block of
``TRACE_WARPS`` warps) and emits, through an emitter, what one thread computes for each
of its ``R`` warps. Values are kept by what they depend on (their shape says it, as the
block has neither 1 nor 32 warps): the warp and the lane ((b, 32)), the warp only ((b,),
(b, 1): the same in every lane), the lane only ((32,), (1, 32): a table of lanes) or
nothing (a scalar). A value is a list of ``R`` registers whatever it depends on.

Data movement (reshapes, reversals, slices, concatenations, transposes, broadcasts, a
gather with constant indices: the forms a shuffle with a static lane takes) is followed
symbolically: the moved value is an array of codes (which value, which warp, which lane),
computed by the primitive itself on the codes, and becomes registers again as shuffles
when an operation reads it: one ``shfl.sync`` per source value, in the mode (``bfly``,
``up``, ``down``, ``idx``) and width whose source lanes are the table's, else ``idx``
with the table as the index, then a selection by lane. A gather of one element per lane
with traced indices is ``shfl.sync.idx`` (indices clamped as XLA clamps them). A
reduction over the lanes is a butterfly of ``shfl.sync.bfly``; a ``cumsum`` over the
lanes, steps of ``shfl.sync.up``.

Arithmetic has XLA's bits: integer shifts by the width or more, division by zero and
``MIN / -1`` take XLA's values by selection (no undefined case reaches the instruction);
float32 is added and subtracted only (a product could be contracted into an FMA).
Anything else raises :class:`Unsupported`, with the reason ``warp_kernel.explain`` shows.

Two emitters run the same walk: ``threads.NumpyThreads`` computes every thread of a CTA in
NumPy (``shfl.sync`` by the PTX ISA's definition), which tests the walk on a CPU against
``vmap``; ``kernel.MlirThreads`` writes MLIR for the GPU.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import numpy as np
from jax import lax

WARP = 32
#: Warps of the block the program is traced on: neither 1 nor 32, so that a value's shape
#: says whether it depends on the warp, the lane, or both.
TRACE_WARPS = 8
_CALLS = frozenset({"pjit", "jit", "custom_jvp_call", "custom_vjp_call", "closed_call",
                    "remat", "checkpoint"})
_MOVES = frozenset({"reshape", "rev", "slice", "concatenate", "transpose", "squeeze",
                    "expand_dims", "broadcast_in_dim", "gather", "copy", "copy_p"})
DTYPES = frozenset({"float32", "int32", "uint32", "int16", "uint16", "int8", "uint8",
                    "bool"})
_INT_BINARY = {"add": "add", "sub": "sub", "mul": "mul", "and": "and", "or": "or",
               "xor": "xor", "max": "max", "min": "min"}
_COMPARE = ("eq", "ne", "lt", "le", "gt", "ge")
#: The primitives :meth:`Walk.apply` computes.
_APPLIES = frozenset({*_INT_BINARY, *_COMPARE, "neg", "not", "sign", "shift_left",
                      "shift_right_logical", "shift_right_arithmetic", "div", "rem",
                      "select_n", "clamp", "convert_element_type", "bitcast_convert_type",
                      "population_count", "clz", "iota", "reduce_sum", "reduce_max",
                      "reduce_min", "reduce_and", "reduce_or", "reduce_xor", "cumsum",
                      "gather", "scatter"})


class Unsupported(Exception):
    """The program has an operation the thread walk does not run with XLA's bits."""


def is_int(dtype) -> bool:
    return np.issubdtype(dtype, np.integer) or np.dtype(dtype) == np.bool_


def bit_width(dtype) -> int:
    return 1 if np.dtype(dtype) == np.bool_ else np.dtype(dtype).itemsize * 8


def ptx_source(mode: str, b: int, c: int) -> tuple[np.ndarray, np.ndarray]:
    """``shfl.sync``'s source lane ``j`` and validity for every lane (PTX ISA, shfl.sync):
    a lane whose source is not valid keeps its own value."""
    lane = np.arange(WARP)
    seg = (c >> 8) & 0x1F
    cval = c & 0x1F
    max_lane = (lane & seg) | (cval & ~seg)
    min_lane = lane & seg
    b &= 0x1F
    if mode == "up":
        j = lane - b
        return j, j >= max_lane
    j = {"down": lane + b, "bfly": lane ^ b, "idx": min_lane | (b & ~seg)}[mode]
    return j, j <= max_lane


@functools.lru_cache(maxsize=1)
def _shuffles() -> tuple:
    """(mode, b, c, effective source table) of every static ``shfl.sync`` of a width."""
    out = []
    for w in (32, 16, 8, 4, 2, 1):
        for mode in ("bfly", "up", "down", "idx"):
            c = ((WARP - w) << 8) | (0 if mode == "up" else 0x1F)
            for b in range(WARP):
                j, ok = ptx_source(mode, b, c)
                out.append((mode, b, c, np.where(ok, j, np.arange(WARP))))
    return tuple(out)


@functools.lru_cache(maxsize=4096)
def shuffle_for(src: tuple, care: tuple) -> tuple[str, int, int] | None:
    """The static ``shfl.sync`` (mode, b, c) whose lane ``l`` reads ``src[l]`` wherever
    ``care[l]``, or None."""
    s, m = np.asarray(src), np.asarray(care, bool)
    for mode, b, c, table in _shuffles():
        if np.array_equal(table[m], s[m]):
            return mode, b, c
    return None


class Regs:
    """A value as registers: ``regs`` (one per warp of the thread), its dtype and kind
    ("full": (b, 32); "warp": the same in every lane; "lane": the same in every warp;
    "scalar")."""

    __slots__ = ("regs", "dtype", "kind")

    def __init__(self, regs, dtype, kind):
        self.regs, self.dtype, self.kind = list(regs), np.dtype(dtype), kind


class Moved:
    """A value under data movement: ``codes`` (its shape, in the traced block) say for each
    element which base (a :class:`Regs`), which warp and which lane it is."""

    __slots__ = ("codes", "bases", "dtype")

    def __init__(self, codes, bases, dtype):
        self.codes, self.bases, self.dtype = codes, bases, np.dtype(dtype)


_STRIDE = TRACE_WARPS * WARP


def _kind(shape) -> str | None:
    """What a value of this shape depends on (its size-1 axes aside), or None for an
    intermediate of a move."""
    sq = tuple(int(n) for n in shape if n != 1)
    return {(): "scalar", (WARP,): "lane", (TRACE_WARPS,): "warp",
            (TRACE_WARPS, WARP): "full"}.get(sq)


_CANONICAL = {"full": (TRACE_WARPS, WARP), "warp": (TRACE_WARPS, 1), "lane": (1, WARP),
              "scalar": (1, 1)}


def _as_block(a: np.ndarray, kind: str) -> np.ndarray:
    """An array of a ``kind`` shape as the (warps, 32) block it stands for."""
    return np.broadcast_to(a.reshape(_CANONICAL[kind]), (TRACE_WARPS, WARP))


def _of_block(block: np.ndarray, shape) -> np.ndarray:
    """The (warps, 32) block as an array of ``shape`` (a kind's shape)."""
    kind = _kind(shape)
    pick = {"full": block, "warp": block[:, :1], "lane": block[:1, :],
            "scalar": block[:1, :1]}[kind]
    return pick.reshape(shape)


_JOIN = {frozenset({"scalar"}): "scalar", frozenset({"lane"}): "lane",
         frozenset({"warp"}): "warp"}


def _join(kinds) -> str:
    k = frozenset(kinds) - {"scalar"} or frozenset({"scalar"})
    return _JOIN.get(k, "full")


class Walk:
    """One walk of a program: the emitter ``ops`` and the ``R`` warps of a thread."""

    def __init__(self, ops, r: int):
        self.ops, self.r = ops, r

    # ---- constants ---------------------------------------------------------------------
    def constant(self, value) -> Regs:
        """A constant as registers: a scalar, or a table of lanes (the same in every
        warp; a constant that differs between warps has no place in a warp program)."""
        a = np.asarray(value)
        if str(a.dtype) not in DTYPES:
            raise Unsupported(f"a constant of dtype {a.dtype}")
        kind = _kind(a.shape)
        if kind is None:
            raise Unsupported(f"a constant of shape {a.shape}")
        blk = np.ascontiguousarray(_as_block(a, kind))
        words = blk.view(np.uint8).reshape(TRACE_WARPS, WARP, -1)  # bits: NaN payloads
        if not np.all(words == words[:1]):
            raise Unsupported(f"a constant of shape {a.shape} that differs between warps")
        row = blk[0]
        if np.all(words[0] == words[0, :1]):
            return Regs([self.ops.const(row[0], a.dtype)] * self.r, a.dtype, "scalar")
        return Regs([self.lane_table(row, a.dtype)] * self.r, a.dtype, "lane")

    def lane_table(self, table, dtype):
        """A register holding ``table[lane]`` (a (32,) constant): its bits, column by
        column of equal bits, from 32-bit masks of the lanes."""
        ops = self.ops
        words = np.asarray(table).astype(dtype).view(
            {1: np.uint8, 2: np.uint16, 4: np.uint32}[np.dtype(dtype).itemsize]
        ).astype(np.uint32) if np.dtype(dtype) != np.bool_ else np.asarray(table, np.uint32)
        if np.all(words == words[0]):
            return ops.const(np.asarray(table).astype(dtype)[0], dtype)
        lane = ops.lane()
        if np.array_equal(words, np.arange(WARP)) and np.dtype(dtype) != np.bool_:
            return ops.convert(lane, np.uint32, dtype)
        acc = ops.const(np.uint32(0), np.uint32)
        for k in range(bit_width(dtype)):
            col = (words >> k) & 1
            if not col.any():
                continue
            if col.all():
                bit = ops.const(np.uint32(1 << k), np.uint32)
            else:
                mask = ops.const(np.uint32(int(np.sum(col.astype(np.uint64) << np.arange(
                    WARP, dtype=np.uint64)))), np.uint32)
                bit = ops.binary("and", ops.binary("shr_l", mask, lane, np.uint32),
                                 ops.const(np.uint32(1), np.uint32), np.uint32)
                if k:
                    bit = ops.binary("shl", bit, ops.const(np.uint32(k), np.uint32),
                                     np.uint32)
            acc = ops.binary("or", acc, bit, np.uint32)
        return ops.convert(acc, np.uint32, dtype) if np.dtype(dtype) == np.bool_ \
            else ops.bitcast(ops.convert(acc, np.uint32, uint_of(dtype)), uint_of(dtype), dtype)

    # ---- data movement -------------------------------------------------------------------
    def codes_of(self, x, aval, bases) -> np.ndarray:
        """``x`` as codes (adding its registers to ``bases`` when it is not moved)."""
        if isinstance(x, np.ndarray):
            x = self.constant(x)
        if isinstance(x, Moved):
            off = len(bases)
            bases.extend(x.bases)
            return x.codes + off * _STRIDE
        k = len(bases)
        bases.append(x)
        codes = np.arange(_STRIDE).reshape(TRACE_WARPS, WARP)
        if x.kind in ("warp", "scalar"):
            codes = codes - codes % WARP  # the lane does not matter
        if x.kind in ("lane", "scalar"):
            codes = codes % WARP + np.zeros_like(codes)
        if _kind(aval.shape) is None:
            raise Unsupported(f"a move of a value of shape {tuple(aval.shape)}")
        return _of_block(codes, tuple(aval.shape)) + k * _STRIDE

    def move(self, eqn, vals) -> Moved:
        bases: list = []
        args = []
        for i, (v, x) in enumerate(zip(eqn.invars, vals, strict=True)):
            if eqn.primitive.name == "gather" and i == 1:
                args.append(x)  # constant indices
            else:
                args.append(self.codes_of(x, v.aval, bases).astype(np.int32))
        return Moved(_evaluate(eqn, args)[0].astype(np.int64), bases,
                     eqn.outvars[0].aval.dtype)

    def settle(self, x) -> Regs:
        """A value as registers: a constant made, a moved value shuffled and selected."""
        if isinstance(x, np.ndarray):
            return self.constant(x)
        if not isinstance(x, Moved):
            return x
        kind = _kind(x.codes.shape)
        if kind is None:
            raise Unsupported(f"an operation on an intermediate of shape {x.codes.shape}")
        codes = _as_block(x.codes, kind)
        base, rest = np.divmod(codes, _STRIDE)
        warp, src = np.divmod(rest, WARP)
        rows = np.broadcast_to(np.arange(TRACE_WARPS)[:, None], codes.shape)
        out = None
        for k in np.unique(base):
            b = x.bases[k]
            here = base == k
            if b.kind in ("full", "warp") and np.any(warp[here] != rows[here]):
                raise Unsupported("a move of values between warps")
            if not np.all(here == here[:1]) or (b.kind in ("full", "lane") and np.any(
                    np.where(here, src, src[:1]) != src[:1])):
                raise Unsupported("a move of lanes that differs between warps")
            care = tuple(bool(v) for v in here[0])
            regs = self._cast(b, x.dtype)
            if b.kind in ("full", "lane"):
                table = tuple(int(s) if c else lane for lane, (s, c) in
                              enumerate(zip(src[0], care, strict=True)))
                regs = self.shuffle_static(regs, table, care, x.dtype)
            if out is None:
                out = regs
            else:
                keep = self.lane_table(np.asarray(care), np.bool_)
                out = [self.ops.select(keep, a, o) for a, o in zip(regs, out, strict=True)]
        return Regs(out, x.dtype, kind)

    def _cast(self, b: Regs, dtype):
        if b.dtype == dtype:
            return b.regs
        if bit_width(b.dtype) != bit_width(dtype) or np.dtype(dtype) == np.bool_:
            raise Unsupported(f"a bit cast of {b.dtype} to {dtype} in a move")
        return [self.ops.bitcast(v, b.dtype, dtype) for v in b.regs]

    def shuffle_static(self, regs, table, care, dtype):
        if all(s == lane for lane, s in enumerate(table)):
            return regs
        found = shuffle_for(table, care)
        if found is not None:
            mode, b, c = found
            bval = self.ops.const(np.int32(b), np.int32)
            return [self.ops.shfl(v, mode, bval, c, dtype) for v in regs]
        idx = self.lane_table(np.asarray(table, np.int32), np.int32)
        return [self.ops.shfl(v, "idx", idx, 0x1F, dtype) for v in regs]

    # ---- the walk ----------------------------------------------------------------------------
    def run(self, jaxpr, consts, args):
        """Walks ``jaxpr``: each value a :class:`Regs`, a :class:`Moved` or, while it
        depends on no input, a NumPy constant (folded by the primitive itself)."""
        env: dict = {}

        def read(v):
            if isinstance(v, jax.extend.core.Literal):
                return np.asarray(v.val)
            return env[v]

        for v, c in zip(jaxpr.constvars, consts, strict=True):
            env[v] = np.asarray(c)
        for v, a in zip(jaxpr.invars, args, strict=True):
            env[v] = a
        for eqn in jaxpr.eqns:
            name = eqn.primitive.name
            for v in (*eqn.invars, *eqn.outvars):
                dt = getattr(v.aval, "dtype", None)
                if dt is not None and str(dt) not in DTYPES:
                    raise Unsupported(f"{name} on {dt}")
            vals = [read(v) for v in eqn.invars]
            sub = _sub_jaxpr(eqn)
            if sub is not None:
                jx, cs = (sub.jaxpr, sub.consts) if hasattr(sub, "consts") else (sub, [])
                outs = self.run(jx, cs, vals)
            elif all(isinstance(x, np.ndarray) for x in vals) and not eqn.effects \
                    and not eqn.params.get("jaxpr"):
                outs = _evaluate(eqn, vals)
            elif name == "gather" and isinstance(vals[1], np.ndarray):
                outs = [self.move(eqn, vals)]
            elif name in _MOVES and name != "gather":
                outs = [self._move_or_keep(eqn, vals)]
            elif name == "bitcast_convert_type" and isinstance(vals[0], Moved):
                x = vals[0]
                if bit_width(x.dtype) != bit_width(eqn.params["new_dtype"]):
                    raise Unsupported("a bit cast between widths")
                outs = [Moved(x.codes, x.bases, eqn.params["new_dtype"])]
            else:
                if name not in _APPLIES:
                    raise Unsupported(f"{name} (no thread form here: loops, conditionals "
                                      f"and scatters run on the Triton backend or vmap)")
                outs = self.apply(eqn, [self.settle(x) for x in vals])
            for v, o in zip(eqn.outvars, outs, strict=True):
                env[v] = o
        return [read(v) for v in jaxpr.outvars]

    def _move_or_keep(self, eqn, vals):
        """A reshape or broadcast that keeps every lane where it is changes nothing in
        the registers; any other move is followed by codes."""
        x, name = vals[0], eqn.primitive.name
        if len(vals) == 1 and isinstance(x, np.ndarray):
            x = self.constant(x)
        out_kind = _kind(eqn.outvars[0].aval.shape)
        if len(vals) == 1 and isinstance(x, Regs) and out_kind is not None:
            in_shape = tuple(eqn.invars[0].aval.shape)
            if name == "broadcast_in_dim" and _kind(in_shape) is not None:
                return x  # dims keep their order: a warp axis stays one, a lane axis too
            if name in ("reshape", "squeeze", "expand_dims", "copy", "copy_p") and \
                    eqn.params.get("dimensions") is None and \
                    _kind(in_shape) == out_kind:
                return x  # only size-1 axes come or go
        return self.move(eqn, [x, *vals[1:]])

    def apply(self, eqn, vals: list[Regs]) -> list[Regs]:
        name, ops, p = eqn.primitive.name, self.ops, eqn.params
        out_dtype = np.dtype(eqn.outvars[0].aval.dtype)
        in_dtype = np.dtype(eqn.invars[0].aval.dtype) if eqn.invars else out_dtype
        kind = _join([x.kind for x in vals]) if vals else "scalar"

        def each(f):
            return Regs([f(*rs) for rs in zip(*[x.regs for x in vals], strict=True)],
                        out_dtype, kind)

        floats = any(not is_int(v.aval.dtype) for v in (*eqn.invars, *eqn.outvars))
        if floats and name not in ("add", "sub", "select_n", "bitcast_convert_type",
                                   "convert_element_type", "gather", "scatter"):
            raise Unsupported(f"{name} on float32 (only addition and subtraction of "
                              f"float32 are exact here)")
        if name in ("add", "sub") and floats:
            return [each(lambda a, b: ops.binary(name + "f", a, b, out_dtype))]
        if name in _INT_BINARY:
            return [each(lambda a, b: ops.binary(_INT_BINARY[name], a, b, in_dtype))]
        if name in _COMPARE:
            return [each(lambda a, b: ops.compare(name, a, b, in_dtype))]
        if name == "neg":
            return [each(lambda a: ops.binary("sub", ops.const(in_dtype.type(0), in_dtype),
                                              a, in_dtype))]
        if name == "not":
            ones = ops.const(np.array(-1).astype(in_dtype) if in_dtype != np.bool_
                             else np.True_, in_dtype)
            return [each(lambda a: ops.binary("xor", a, ones, in_dtype))]
        if name == "sign":
            def sign(a):
                zero, one = ops.const(in_dtype.type(0), in_dtype), ops.const(
                    in_dtype.type(1), in_dtype)
                pos = ops.select(ops.compare("gt", a, zero, in_dtype), one, zero)
                if in_dtype.kind == "u":
                    return pos
                neg = ops.const(in_dtype.type(-1), in_dtype)
                return ops.select(ops.compare("lt", a, zero, in_dtype), neg, pos)
            return [each(sign)]
        if name in ("shift_left", "shift_right_logical", "shift_right_arithmetic"):
            return [each(lambda a, s: self._shift(name, a, s, in_dtype))]
        if name in ("div", "rem"):
            return [each(lambda a, b: self._divide(name, a, b, in_dtype))]
        if name == "select_n":
            return [self._select_n(vals, out_dtype, kind)]
        if name == "clamp":
            lo, x, hi = vals
            mx = [ops.binary("max", a, b, out_dtype)
                  for a, b in zip(x.regs, lo.regs, strict=True)]
            return [Regs([ops.binary("min", a, b, out_dtype)
                          for a, b in zip(mx, hi.regs, strict=True)], out_dtype, kind)]
        if name == "convert_element_type":
            if floats and in_dtype != out_dtype:
                raise Unsupported(f"convert_element_type {in_dtype} -> {out_dtype}")
            return [each(lambda a: ops.convert(a, in_dtype, out_dtype))]
        if name == "bitcast_convert_type":
            if bit_width(in_dtype) != bit_width(out_dtype):
                raise Unsupported("a bit cast between widths")
            return [each(lambda a: ops.bitcast(a, in_dtype, out_dtype))]
        if name == "population_count":
            return [each(lambda a: ops.unary("popc", a, in_dtype))]
        if name == "clz":
            return [each(lambda a: ops.unary("clz", a, in_dtype))]
        if name == "iota":
            if p["dimension"] != len(p["shape"]) - 1 or _kind(p["shape"]) not in (
                    "lane", "full"):
                raise Unsupported("an iota over the warps")
            v = ops.convert(ops.lane(), np.uint32, out_dtype)
            return [Regs([v] * self.r, out_dtype, _kind(p["shape"]))]
        if name in ("reduce_sum", "reduce_max", "reduce_min", "reduce_and", "reduce_or",
                    "reduce_xor"):
            return [self._reduce(eqn, vals[0], out_dtype)]
        if name == "cumsum":
            return [self._cumsum(eqn, vals[0], out_dtype)]
        if name == "gather":
            return [self._gather(eqn, vals)]
        if name == "scatter":
            return [self._scatter(eqn, vals)]
        raise Unsupported(f"{name} (no thread form here)")

    # ---- pieces ------------------------------------------------------------------------------
    def _shift(self, name, a, s, dtype):
        ops = self.ops
        bits = bit_width(dtype)
        u = uint_of(dtype)
        su = ops.bitcast(s, dtype, u) if dtype != u else s
        limit = ops.const(u.type(bits), u)
        inside = ops.compare("lt", su, limit, u)
        safe = ops.select(inside, s, ops.const(dtype.type(0), dtype))
        kind = {"shift_left": "shl", "shift_right_logical": "shr_l",
                "shift_right_arithmetic": "shr_a"}[name]
        res = ops.binary(kind, a, safe, dtype)
        if kind == "shr_a":
            fill = ops.binary("shr_a", a, ops.const(dtype.type(bits - 1), dtype), dtype)
        else:
            fill = ops.const(dtype.type(0), dtype)
        return ops.select(inside, res, fill)

    def _divide(self, name, a, b, dtype):
        ops = self.ops
        zero, one = ops.const(dtype.type(0), dtype), ops.const(dtype.type(1), dtype)
        by_zero = ops.compare("eq", b, zero, dtype)
        bad = by_zero
        overflow = None
        if dtype.kind == "i":
            lo = ops.const(np.iinfo(dtype).min, dtype)
            minus = ops.const(dtype.type(-1), dtype)
            overflow = ops.binary("and", ops.compare("eq", a, lo, dtype),
                                  ops.compare("eq", b, minus, dtype), np.bool_)
            bad = ops.binary("or", by_zero, overflow, np.bool_)
        res = ops.binary(name, a, ops.select(bad, one, b), dtype)
        if name == "div":
            zero_val = ops.const(np.array(-1).astype(dtype), dtype)
            out = res if overflow is None else ops.select(overflow, a, res)
        else:
            zero_val = a
            out = res if overflow is None else ops.select(overflow, zero, res)
        return ops.select(by_zero, zero_val, out)

    def _select_n(self, vals, dtype, kind):
        ops = self.ops
        which, cases = vals[0], vals[1:]
        regs = []
        for i in range(self.r):
            w = which.regs[i]
            if which.dtype == np.bool_:
                regs.append(ops.select(w, cases[1].regs[i], cases[0].regs[i]))
                continue
            out = cases[-1].regs[i]
            for j in range(len(cases) - 2, -1, -1):
                hit = ops.compare("le", w, ops.const(which.dtype.type(j), which.dtype),
                                  which.dtype)
                out = ops.select(hit, cases[j].regs[i], out)
            regs.append(out)
        return Regs(regs, dtype, kind)

    def _reduce(self, eqn, x: Regs, dtype):
        axes = tuple(int(a) for a in eqn.params["axes"])
        shape = eqn.invars[0].aval.shape
        if x.kind not in ("full", "lane") or axes != (len(shape) - 1,) or shape[-1] != WARP:
            raise Unsupported(f"{eqn.primitive.name} over axes {axes} of {tuple(shape)}")
        op = {"reduce_sum": "add", "reduce_max": "max", "reduce_min": "min",
              "reduce_and": "and", "reduce_or": "or", "reduce_xor": "xor"}[
                  eqn.primitive.name]
        if not is_int(dtype):
            raise Unsupported(f"{eqn.primitive.name} on {dtype}")
        ops = self.ops
        regs = x.regs
        for m in (16, 8, 4, 2, 1):
            mv = ops.const(np.int32(m), np.int32)
            regs = [ops.binary(op, v, ops.shfl(v, "bfly", mv, 0x1F, dtype), dtype)
                    for v in regs]
        return Regs(regs, dtype, "warp" if x.kind == "full" else "scalar")

    def _cumsum(self, eqn, x: Regs, dtype):
        shape = eqn.invars[0].aval.shape
        if x.kind not in ("full", "lane") or eqn.params["axis"] != len(shape) - 1:
            raise Unsupported("cumsum over the warps")
        if not is_int(dtype):
            raise Unsupported(f"cumsum on {dtype}")
        ops = self.ops
        rev = bool(eqn.params["reverse"])
        lane = ops.lane()
        zero = ops.const(dtype.type(0), dtype)
        regs = x.regs
        for d in (1, 2, 4, 8, 16):
            dv = ops.const(np.int32(d), np.int32)
            if rev:
                ok = ops.compare("lt", lane, ops.const(np.uint32(WARP - d), np.uint32),
                                 np.uint32)
                moved = [ops.shfl(v, "down", dv, 0x1F, dtype) for v in regs]
            else:
                ok = ops.compare("ge", lane, ops.const(np.uint32(d), np.uint32), np.uint32)
                moved = [ops.shfl(v, "up", dv, 0, dtype) for v in regs]
            regs = [ops.binary("add", v, ops.select(ok, m, zero), dtype)
                    for v, m in zip(regs, moved, strict=True)]
        return Regs(regs, dtype, x.kind)

    def _scatter(self, eqn, vals):
        """``op.at[idx].set(upd)`` with indices declared unique: each lane stores its
        update at its slot (``exchange``: through the warp's row of shared memory), and a
        lane keeps its operand where no update reaches it (the union of ``1 << slot``)."""
        p = eqn.params
        if p.get("update_jaxpr") is not None and p.get("update_consts"):
            raise Unsupported("scatter with a combiner")
        if not p["unique_indices"]:
            raise Unsupported("scatter (set) with indices not declared unique: XLA leaves "
                              "which of several updates of one element wins unspecified")
        if not _scatter_form(eqn):
            raise Unsupported("a scatter of a form other than one update per lane")
        op, idx, upd = vals
        ops, it = self.ops, idx.dtype
        zero, top = ops.const(it.type(0), it), ops.const(it.type(WARP - 1), it)
        clip = p["mode"] == lax.GatherScatterMode.CLIP
        slots, words = [], []
        for i in idx.regs:
            if clip:
                i = ops.binary("min", ops.binary("max", i, zero, it), top, it) \
                    if it.kind == "i" else ops.binary("min", i, top, it)
            inside = ops.compare("le", i, top, it)
            if it.kind == "i":
                inside = ops.binary("and", inside, ops.compare("ge", i, zero, it), np.bool_)
            slot = ops.select(inside, ops.convert(i, it, np.int32),
                              ops.const(np.int32(WARP), np.int32))
            one = ops.binary("shl", ops.const(np.uint32(1), np.uint32),
                             ops.bitcast(ops.select(inside, slot, ops.const(
                                 np.int32(0), np.int32)), np.int32, np.uint32), np.uint32)
            slots.append(slot)
            words.append(ops.select(inside, one, ops.const(np.uint32(0), np.uint32)))
        hit_word = words
        for m in (16, 8, 4, 2, 1):
            mv = ops.const(np.int32(m), np.int32)
            hit_word = [ops.binary("or", w, ops.shfl(w, "bfly", mv, 0x1F, np.uint32),
                                   np.uint32) for w in hit_word]
        lane, one = ops.lane(), ops.const(np.uint32(1), np.uint32)
        got = ops.exchange(upd.regs, slots, upd.dtype)
        out = []
        for w, g, o in zip(hit_word, got, op.regs, strict=True):
            hit = ops.compare("ne", ops.binary("and", ops.binary("shr_l", w, lane, np.uint32),
                                               one, np.uint32),
                              ops.const(np.uint32(0), np.uint32), np.uint32)
            out.append(ops.select(hit, g, o))
        return Regs(out, op.dtype, "full")

    def _gather(self, eqn, vals):
        """``op[w, idx[w, l]]`` (or a lane table's ``op[idx[w, l]]``) as ``shfl.sync.idx``."""
        op, idx = vals
        d = eqn.params["dimension_numbers"]
        ok_batched = (op.kind == "full" and tuple(d.collapsed_slice_dims) == (1,)
                      and tuple(d.operand_batching_dims) == (0,)
                      and tuple(d.start_index_map) == (1,))
        ok_table = (op.kind == "lane" and tuple(d.collapsed_slice_dims) == (0,)
                    and not tuple(d.operand_batching_dims)
                    and tuple(d.start_index_map) == (0,))
        ishape = eqn.invars[1].aval.shape
        if not (ok_batched or ok_table) or tuple(d.offset_dims) or ishape[-1:] != (1,) \
                or _kind(ishape[:-1]) not in ("full", "warp", "lane", "scalar"):
            raise Unsupported("a gather of a form other than one lane per lane")
        ops = self.ops
        dtype = op.dtype
        it = idx.dtype
        zero, top = ops.const(it.type(0), it), ops.const(it.type(WARP - 1), it)
        mode = eqn.params["mode"]
        regs = []
        for o, i in zip(op.regs, idx.regs, strict=True):
            inside = ops.binary("and", ops.compare("ge", i, zero, it),
                                ops.compare("le", i, top, it), np.bool_) \
                if it.kind == "i" else ops.compare("le", i, top, it)
            clamped = ops.binary("min", ops.binary("max", i, zero, it), top, it) \
                if it.kind == "i" else ops.binary("min", i, top, it)
            lane_idx = ops.convert(clamped, it, np.int32)
            v = ops.shfl(o, "idx", lane_idx, 0x1F, dtype)
            if mode == lax.GatherScatterMode.FILL_OR_DROP:
                fill = eqn.params["fill_value"]
                fill = _default_fill(dtype) if fill is None else fill
                v = ops.select(inside, v, ops.const(np.asarray(fill, dtype), dtype))
            regs.append(v)
        return Regs(regs, dtype, _join([op.kind, idx.kind]))


def _scatter_form(eqn) -> bool:
    """A scatter of one update per lane into a warp's 32 lanes: indices (b, 32, 1) with
    updates (b, 32), or indices (32, 1) shared by every warp."""
    d = eqn.params["dimension_numbers"]
    op, idx, upd = (v.aval for v in eqn.invars)
    if _kind(op.shape) != "full" or _kind(upd.shape) != "full" or op.ndim != 2 \
            or idx.shape[-1:] != (1,) or tuple(d.inserted_window_dims) != (1,) \
            or tuple(d.scatter_dims_to_operand_dims) != (1,):
        return False
    if idx.ndim == 3:
        return (tuple(d.update_window_dims) == () and tuple(d.operand_batching_dims) == (0,)
                and tuple(d.scatter_indices_batching_dims) == (0,))
    return idx.ndim == 2 and tuple(d.update_window_dims) == (0,) \
        and not tuple(d.operand_batching_dims)


def _default_fill(dtype):
    if np.dtype(dtype) == np.bool_:
        return True
    if np.issubdtype(dtype, np.floating):
        return np.nan
    return np.iinfo(dtype).min if np.dtype(dtype).kind == "i" else np.iinfo(dtype).max


def uint_of(dtype):
    if np.dtype(dtype) == np.bool_:
        return np.dtype(np.bool_)
    return np.dtype({1: np.uint8, 2: np.uint16, 4: np.uint32}[np.dtype(dtype).itemsize])


def _evaluate(eqn, args) -> list[np.ndarray]:
    """``eqn``'s primitive on NumPy arrays, now (also while an outer jit traces)."""
    with jax.ensure_compile_time_eval():
        res = eqn.primitive.bind(*[jax.numpy.asarray(a) for a in args], **eqn.params)
    return [np.asarray(r) for r in (res if eqn.primitive.multiple_results else [res])]


def _sub_jaxpr(eqn):
    if eqn.primitive.name not in _CALLS:
        return None
    p = eqn.params
    return p.get("jaxpr", p.get("call_jaxpr", p.get("fun_jaxpr")))


def trace(fn, dtypes) -> Any:
    """The jaxpr of ``jax.vmap(fn)`` on a block of ``TRACE_WARPS`` warps."""
    block = [jax.ShapeDtypeStruct((TRACE_WARPS, WARP), d) for d in dtypes]
    return jax.make_jaxpr(jax.vmap(fn))(*block)
