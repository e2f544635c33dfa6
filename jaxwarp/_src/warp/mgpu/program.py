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
lanes, steps of ``shfl.sync.up``. A sum (or ``or``, ``xor``) over the lanes of
``where(pred, 1 << lane, 0)`` -- the form ``ballot_sync`` and ``activemask`` take -- is
``vote.sync.ballot`` of ``pred``: one instruction where the butterfly takes ten.

Arithmetic has XLA's bits: integer shifts by the width or more, division by zero and
``MIN / -1`` take XLA's values by selection (no undefined case reaches the instruction);
float32 is added and subtracted only (a product could be contracted into an FMA).
Anything else raises :class:`Unsupported`, with the reason ``warp_kernel.explain`` shows.

Two emitters run the same walk: ``threads.NumpyThreads`` computes every thread of a CTA in
NumPy (``shfl.sync`` by the PTX ISA's definition), which tests the walk on a CPU against
``vmap``; ``kernel.MlirThreads`` writes MLIR for the GPU.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from jaxwarp._src.warp.mgpu.pieces import Pieces
from jaxwarp._src.warp.mgpu.values import (
    DTYPES,
    STRIDE,
    TRACE_WARPS,
    WARP,
    Moved,
    Regs,
    Unsupported,
    as_block,
    bit_width,
    is_int,
    join,
    kind_of,
    of_block,
    ptx_source,
    shuffle_for,
    uint_of,
)

__all__ = ["DTYPES", "TRACE_WARPS", "WARP", "Moved", "Regs", "Unsupported", "Walk",
           "bit_width", "ptx_source", "shuffle_for", "trace", "uint_of"]

_CALLS = frozenset({"pjit", "jit", "custom_jvp_call", "custom_vjp_call", "closed_call",
                    "remat", "checkpoint"})
_MOVES = frozenset({"reshape", "rev", "slice", "concatenate", "transpose", "squeeze",
                    "expand_dims", "broadcast_in_dim", "gather", "copy", "copy_p"})
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


class Walk(Pieces):
    """One walk of a program: the emitter ``ops`` and the ``R`` warps of a thread."""

    def __init__(self, ops, r: int):
        self.ops, self.r = ops, r
        # id(value) -> (value, pred, negated): values that are where(pred, 1 << lane, 0)
        self._lane_bits: dict[int, tuple[Regs, Regs, bool]] = {}

    # ---- constants ---------------------------------------------------------------------
    def constant(self, value) -> Regs:
        """A constant as registers: a scalar, or a table of lanes (the same in every
        warp; a constant that differs between warps has no place in a warp program)."""
        a = np.asarray(value)
        if str(a.dtype) not in DTYPES:
            raise Unsupported(f"a constant of dtype {a.dtype}")
        kind = kind_of(a.shape)
        if kind is None:
            raise Unsupported(f"a constant of shape {a.shape}")
        blk = np.ascontiguousarray(as_block(a, kind))
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
        if np.array_equal(words, np.arange(WARP)) and np.dtype(dtype).kind in "iu":
            return ops.convert(lane, np.uint32, dtype)
        if np.array_equal(words, _LANE_BITS) and np.dtype(dtype).kind in "iu":
            return ops.bitcast(ops.binary("shl", ops.const(np.uint32(1), np.uint32), lane,
                                          np.uint32), np.uint32, dtype)
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
            return x.codes + off * STRIDE
        k = len(bases)
        bases.append(x)
        codes = np.arange(STRIDE).reshape(TRACE_WARPS, WARP)
        if x.kind in ("warp", "scalar"):
            codes = codes - codes % WARP  # the lane does not matter
        if x.kind in ("lane", "scalar"):
            codes = codes % WARP + np.zeros_like(codes)
        if kind_of(aval.shape) is None:
            raise Unsupported(f"a move of a value of shape {tuple(aval.shape)}")
        return of_block(codes, tuple(aval.shape)) + k * STRIDE

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
        kind = kind_of(x.codes.shape)
        if kind is None:
            raise Unsupported(f"an operation on an intermediate of shape {x.codes.shape}")
        codes = as_block(x.codes, kind)
        base, rest = np.divmod(codes, STRIDE)
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
                return np.asarray(v.val, v.aval.dtype)
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
            elif name in ("scan", "while"):
                outs = self._loop(eqn, vals)
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
                    raise Unsupported(f"{name} (no thread form in the Mosaic GPU walk: "
                                      f"the Triton backend or vmap runs it)")
                settled = [self.settle(x) for x in vals]
                outs = self.apply(eqn, settled)
                if name == "select_n":
                    self._note_lane_bits(vals, settled[0], outs[0])
            for v, o in zip(eqn.outvars, outs, strict=True):
                env[v] = o
        return [read(v) for v in jaxpr.outvars]

    def _loop(self, eqn, vals):
        """A ``fori_loop`` (``scan`` without scanned values) as a counted loop; a
        ``while`` as a loop each thread runs while its predicate holds: an unbatched one,
        or, batched (one a warp, as ``vmap`` makes it), while any of the thread's own
        warps runs, a warp that is done keeping its values (a CUDA warp's threads share
        their warps, so they leave the loop together)."""
        p = eqn.params
        if eqn.primitive.name == "scan":
            nc, ncar = _scan_counts(eqn)
            if p["reverse"] or len(vals) != nc + ncar or len(eqn.outvars) != ncar:
                raise Unsupported("scan other than a fori_loop (a forward loop without "
                                  "scanned inputs or outputs)")
            body, consts, init = p["jaxpr"], vals[:nc], vals[nc:]
            avals = [v.aval for v in eqn.invars[nc:]]
            out = self.ops.for_loop(int(p["length"]), self._flat(init), lambda flat: self._flat(
                self.run(body.jaxpr, body.consts, [*consts, *self._unflat(flat, avals)])))
            return self._unflat(out, avals)
        cn, bn = p["cond_nconsts"], p["body_nconsts"]
        cond, body = p["cond_jaxpr"], p["body_jaxpr"]
        cconsts, bconsts, init = vals[:cn], vals[cn:cn + bn], vals[cn + bn:]
        avals = [v.aval for v in eqn.invars[cn + bn:]]
        ops = self.ops

        def predicate(flat) -> Regs:
            (pred,) = self.run(cond.jaxpr, cond.consts, [*cconsts, *self._unflat(flat, avals)])
            pred = self.settle(pred)
            if pred.kind not in ("scalar", "warp"):
                raise Unsupported("a while loop whose predicate differs between lanes")
            return pred

        def going(flat):
            pred = predicate(flat)
            v = pred.regs[0]
            for r in pred.regs[1:] if pred.kind == "warp" else ():
                v = ops.binary("or", v, r, np.bool_)
            return v

        def step(flat):
            new = self._flat(self.run(body.jaxpr, body.consts,
                                      [*bconsts, *self._unflat(flat, avals)]))
            pred = predicate(flat)
            if pred.kind == "scalar":
                return new
            # A batched predicate: a warp that is done keeps its values.
            return [ops.select(pred.regs[k % self.r], n, o)
                    for k, (n, o) in enumerate(zip(new, flat, strict=True))]

        return self._unflat(ops.while_loop(self._flat(init), going, step), avals)

    def _note_lane_bits(self, vals, pred: Regs, out: Regs) -> None:
        """Notes ``out`` when it is ``where(pred, 1 << lane, 0)`` (either order of the
        cases; ``vals`` the select's operands as read, ``pred`` its first settled): a
        reduction of it over the lanes is a ballot of ``pred``."""
        if len(vals) != 3 or not all(isinstance(c, np.ndarray) for c in vals[1:]):
            return
        if pred.dtype != np.bool_:
            return
        zero, bits = [_is_zero(c) for c in vals[1:]], [_is_lane_bits(c) for c in vals[1:]]
        if zero[0] and bits[1]:
            self._lane_bits[id(out)] = (out, pred, False)
        elif bits[0] and zero[1]:
            self._lane_bits[id(out)] = (out, pred, True)

    def _flat(self, values) -> list:
        """Loop carries as a flat list of registers (each value settled)."""
        return [r for v in values for r in self.settle(v).regs]

    def _unflat(self, flat, avals) -> list:
        """The carries again, each of the kind its shape allows (the loop may change it)."""
        out = []
        for i, a in enumerate(avals):
            kind = kind_of(a.shape)
            if kind is None:
                raise Unsupported(f"a loop carry of shape {tuple(a.shape)}")
            out.append(Regs(flat[i * self.r:(i + 1) * self.r], a.dtype, kind))
        return out

    def _move_or_keep(self, eqn, vals):
        """A reshape or broadcast that keeps every lane where it is changes nothing in
        the registers; any other move is followed by codes."""
        x, name = vals[0], eqn.primitive.name
        if len(vals) == 1 and isinstance(x, np.ndarray):
            x = self.constant(x)
        out_kind = kind_of(eqn.outvars[0].aval.shape)
        if len(vals) == 1 and isinstance(x, Regs) and out_kind is not None:
            in_shape = tuple(eqn.invars[0].aval.shape)
            if name == "broadcast_in_dim" and kind_of(in_shape) is not None:
                return x  # dims keep their order: a warp axis stays one, a lane axis too
            if name in ("reshape", "squeeze", "expand_dims", "copy", "copy_p") and \
                    eqn.params.get("dimensions") is None and \
                    kind_of(in_shape) == out_kind:
                return x  # only size-1 axes come or go
        return self.move(eqn, [x, *vals[1:]])

    def apply(self, eqn, vals: list[Regs]) -> list[Regs]:
        name, ops, p = eqn.primitive.name, self.ops, eqn.params
        out_dtype = np.dtype(eqn.outvars[0].aval.dtype)
        in_dtype = np.dtype(eqn.invars[0].aval.dtype) if eqn.invars else out_dtype
        kind = join([x.kind for x in vals]) if vals else "scalar"

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
            if p["dimension"] != len(p["shape"]) - 1 or kind_of(p["shape"]) not in (
                    "lane", "full"):
                raise Unsupported("an iota over the warps")
            v = ops.convert(ops.lane(), np.uint32, out_dtype)
            return [Regs([v] * self.r, out_dtype, kind_of(p["shape"]))]
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
_LANE_BITS = (1 << np.arange(WARP, dtype=np.uint64)).astype(np.uint32)


def _is_zero(a: np.ndarray) -> bool:
    return kind_of(a.shape) is not None and not np.any(a)


def _is_lane_bits(a: np.ndarray) -> bool:
    """Whether ``a`` is ``1 << lane`` in every warp, as 32-bit integers."""
    kind = kind_of(a.shape)
    if kind not in ("full", "lane") or a.dtype.kind not in "iu" or a.dtype.itemsize != 4:
        return False
    return bool(np.all(as_block(a, kind).view(np.uint32) == _LANE_BITS))


def _scan_counts(eqn) -> tuple[int, int]:
    """A scan's (consts, carries): ``num_consts`` / ``num_carry`` (JAX 0.10); on JAX 0.11,
    whose scan has neither, a fori_loop's: its carries are the scan's outputs, each the
    type of its input (checked; a scan with scanned values fails the check or ``_loop``'s)."""
    p = eqn.params
    if "num_consts" in p:
        return int(p["num_consts"]), int(p["num_carry"])
    ncar = len(eqn.outvars)
    nc = len(eqn.invars) - ncar
    body = p["jaxpr"].jaxpr
    ins = [v.aval for v in body.invars[nc:]]
    outs = [v.aval for v in body.outvars]
    if nc < 0 or len(ins) != len(outs) or any(
            (a.shape, a.dtype) != (o.shape, o.dtype) for a, o in zip(ins, outs, strict=True)):
        raise Unsupported("scan other than a fori_loop (a forward loop without scanned "
                          "inputs or outputs)")
    return nc, ncar


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
