"""The thread forms of a warp program's operations other than moves and loops:
integer shifts and division with XLA's values, ``select_n``, reductions and ``cumsum`` over
the lanes (``shfl.sync`` butterflies and steps), gathers of one lane per lane
(``shfl.sync.idx``) and scatters of one update per lane (through the warp's row of
shared memory). ``program.Walk`` takes them as methods.
"""

from __future__ import annotations

import numpy as np
from jax import lax

from jaxwarp._src.warp.kernel_ops import default_fill
from jaxwarp._src.warp.mgpu.values import (
    WARP,
    Regs,
    Unsupported,
    bit_width,
    is_int,
    join,
    kind_of,
    scatter_form,
    uint_of,
)


class Pieces:
    """Methods of ``program.Walk`` (``self.ops``: the emitter; ``self.r``: warps a
    thread)."""

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
        out_kind = "warp" if x.kind == "full" else "scalar"
        noted = self._lane_bits.get(id(x))
        if noted is not None and noted[0] is x and op in ("add", "or", "xor") and \
                bit_width(dtype) == 32:  # distinct bits: the sum is the ballot
            _, pred, negated = noted
            flip = ops.const(np.True_, np.bool_)
            regs = [ops.ballot(ops.binary("xor", p, flip, np.bool_) if negated else p)
                    for p in pred.regs]
            return Regs([ops.bitcast(v, np.uint32, dtype) for v in regs], dtype, out_kind)
        regs = x.regs
        for m in (16, 8, 4, 2, 1):
            mv = ops.const(np.int32(m), np.int32)
            regs = [ops.binary(op, v, ops.shfl(v, "bfly", mv, 0x1F, dtype), dtype)
                    for v in regs]
        return Regs(regs, dtype, out_kind)

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
        """``op.at[idx].set(upd)`` with indices declared unique, through the warp's row of
        shared memory (``exchange``): each lane stores its operand in its own word, then
        its update at its slot, then loads its word."""
        p = eqn.params
        if p.get("update_jaxpr") is not None and p.get("update_consts"):
            raise Unsupported("scatter with a combiner")
        if not p["unique_indices"]:
            raise Unsupported("scatter (set) with indices not declared unique: XLA leaves "
                              "which of several updates of one element wins unspecified")
        if not scatter_form(eqn):
            raise Unsupported("a scatter of a form other than one update per lane")
        op, idx, upd = vals
        ops, it = self.ops, idx.dtype
        zero, top = ops.const(it.type(0), it), ops.const(it.type(WARP - 1), it)
        clip = p["mode"] == lax.GatherScatterMode.CLIP
        slots = []
        for i in idx.regs:
            if clip:
                i = ops.binary("min", ops.binary("max", i, zero, it), top, it) \
                    if it.kind == "i" else ops.binary("min", i, top, it)
            inside = ops.compare("le", i, top, it)
            if it.kind == "i":
                inside = ops.binary("and", inside, ops.compare("ge", i, zero, it), np.bool_)
            slots.append(ops.select(inside, ops.convert(i, it, np.int32),
                                    ops.const(np.int32(WARP), np.int32)))
        out = ops.exchange(upd.regs, slots, upd.dtype, op.regs)
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
                or kind_of(ishape[:-1]) not in ("full", "warp", "lane", "scalar"):
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
                fill = default_fill(dtype) if fill is None else fill
                v = ops.select(inside, v, ops.const(np.asarray(fill, dtype), dtype))
            regs.append(v)
        return Regs(regs, dtype, join([op.kind, idx.kind]))
