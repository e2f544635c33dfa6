"""The warp program inside ``warp_kernel``'s Pallas kernel: a jaxpr interpreter that
replaces the operations Triton would compute with other bits than XLA (or not at all) by
forms that give XLA's bits for every input.

``warp_kernel`` traces ``jax.vmap(fn)`` on one block of warps; ``run`` evaluates that
jaxpr inside the kernel body, binding every primitive as it is except those of
``REWRITES``:

* shifts by a traced amount: XLA shifts by the width or more to 0 (or the sign), LLVM's
  shift is poison there; the amount is kept below the width and the result selected.
* integer ``div`` / ``rem``: XLA defines every input (x / 0 = -1, all ones when unsigned;
  x % 0 = x; MIN / -1 = MIN; MIN % -1 = 0), LLVM and PTX leave division by zero and the
  signed overflow undefined. So the divisor is replaced by 1 where XLA's result does not
  come from a division, and the result selected: no undefined case reaches the
  instruction.
* ``gather`` and ``scatter`` / ``scatter-add`` / ``scatter-min`` / ``scatter-max`` of
  single elements along one axis (what ``v[j]`` and ``v.at[j].set(u)`` become under
  ``vmap``): a one-hot comparison of every index with every position, then a selection
  and a reduction over the raw bits (a gathered word is the only non-zero one, so the
  maximum is its bits; a scatter that sets adds the one difference u - op that reaches
  a position, wrapping). Out-of-bounds indices follow the op's mode (dropped, filled or
  clamped, as XLA). A ``scatter`` that sets values where several indices are equal has no
  defined result in XLA (which update wins is not specified), so it is rewritten only
  where its indices are declared unique (``.at[j].set(u, unique_indices=True)``);
  adding, taking the minimum or the maximum of integers gives the same bits in any
  order, so those scatters are rewritten with duplicates too.
* ``select_n`` with an integer case index (``lax.switch`` under ``vmap``): XLA's tree of
  two-way selects; integer ``clamp``: a maximum, then a minimum.
* ``reduce_or`` / ``reduce_and`` on booleans: the maximum / minimum of 0/1 words
  (Triton has no such reduction).
* ``scan`` (a ``fori_loop``), ``while`` and ``cond``: the same control flow, with their
  bodies evaluated by ``run`` too.

``why_not(eqn)`` says which forms of these primitives ``run`` does not rewrite.
"""

from __future__ import annotations

import collections
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

_UINT = {1: jnp.uint8, 2: jnp.uint16, 4: jnp.uint32}
#: Call primitives whose jaxpr the kernel evaluates in place.
CALLS = frozenset({"pjit", "jit", "custom_jvp_call", "closed_call"})
_MODES = lax.GatherScatterMode


def _is_int(dtype) -> bool:
    return jnp.issubdtype(dtype, jnp.integer)


def call_jaxpr(eqn):
    """The jaxpr a call equation (``CALLS``) runs, or None."""
    if eqn.primitive.name not in CALLS:
        return None
    return eqn.params.get("jaxpr", eqn.params.get("call_jaxpr"))


def _closed(sub) -> tuple[Any, list]:
    if hasattr(sub, "consts"):
        return sub.jaxpr, list(sub.consts)
    return sub, []


def param_jaxprs(eqn):
    """The jaxprs in ``eqn``'s parameters (a call's, a loop's bodies, a cond's branches),
    each as (jaxpr, its consts)."""
    for v in eqn.params.values():
        for s in (v if isinstance(v, (tuple, list)) else (v,)):
            if hasattr(s, "eqns"):
                yield s, []
            elif hasattr(s, "jaxpr") and hasattr(s.jaxpr, "eqns"):
                yield s.jaxpr, list(s.consts)


def constants(jaxpr, consts) -> list[np.ndarray]:
    """The arrays (ndim >= 1) that ``jaxpr`` and its sub-jaxprs close over, once each:
    a Pallas kernel may not capture arrays, so ``warp_kernel`` passes them as inputs."""
    found: dict[int, np.ndarray] = {}

    def visit(jx, cs):
        for c in cs:
            if np.ndim(c) and id(c) not in found:
                found[id(c)] = c
        for eqn in jx.eqns:
            for v in eqn.invars:  # array literals (JAX's simplified constants)
                if isinstance(v, jax.extend.core.Literal) and np.ndim(v.val):
                    found.setdefault(id(v.val), v.val)
            for sub, sub_consts in param_jaxprs(eqn):
                visit(sub, sub_consts)

    visit(jaxpr, consts)
    return list(found.values())


def run(jaxpr, consts, args, const_values: dict[int, Any], store=frozenset()):
    """Evaluates ``jaxpr`` on ``args`` with the kernel's forms of ``REWRITES``; an array
    constant ``c`` reads ``const_values[id(c)]`` (a kernel input). The scatters whose
    outputs are in ``store`` (:func:`stored_outputs`) give a :class:`Stored` for the
    kernel to write instead of their value."""
    env: dict[Any, Any] = {}
    known: dict[Any, np.ndarray] = {}  # the values of constants, known when tracing

    def read(v):
        if isinstance(v, jax.extend.core.Literal):
            return const_values[id(v.val)] if np.ndim(v.val) else v.val
        return env[v]

    for v, c in zip(jaxpr.constvars, consts, strict=True):
        env[v] = const_values[id(c)] if np.ndim(c) else lax.full((), c, np.asarray(c).dtype)
        known[v] = np.asarray(c)
    for v, a in zip(jaxpr.invars, args, strict=True):
        env[v] = a
    for eqn in jaxpr.eqns:
        vals = [read(v) for v in eqn.invars]
        name = eqn.primitive.name
        if call_jaxpr(eqn) is not None:
            outs = run(*_closed(call_jaxpr(eqn)), vals, const_values)
        elif eqn.outvars[0] in store:
            outs = [_stored(eqn, vals)]
        elif name in _SHIFTS:
            outs = [_shift(eqn, vals, known)]
        elif name in REWRITES:
            outs = REWRITES[name](eqn, vals, const_values)
        else:
            outs = eqn.primitive.bind(*vals, **eqn.params)
            outs = outs if eqn.primitive.multiple_results else [outs]
        for v, o in zip(eqn.outvars, outs, strict=True):
            env[v] = o
    return [read(v) for v in jaxpr.outvars]


# ---- integer division ------------------------------------------------------------------

def _safe_divisor(x, y):
    """(y with 1 where XLA's result is not a quotient, y == 0)."""
    zero = y == 0
    bad = zero
    if jnp.issubdtype(x.dtype, jnp.signedinteger):
        lo = jnp.iinfo(x.dtype).min
        bad = bad | ((x == lo) & (y == -1))
    return jnp.where(bad, jnp.ones((), y.dtype), y), zero


def _division(op, by_zero):
    """The rule of ``op`` (``lax.div`` or ``lax.rem``) on integers: the divisor 1 where
    XLA's result is no quotient (x / 1 = x gives MIN / -1 = MIN, x % 1 = 0 gives
    MIN % -1 = 0), ``by_zero(x)`` where it is 0 (x / 0 = -1, all ones; x % 0 = x)."""
    def rule(eqn, vals, _):
        x, y = (jnp.asarray(v, eqn.outvars[0].aval.dtype) for v in vals)
        if not _is_int(x.dtype):
            return [op(x, y)]
        x, y = jnp.broadcast_arrays(x, y)
        safe, zero = _safe_divisor(x, y)
        return [jnp.where(zero, by_zero(x), op(x, safe))]
    return rule


_div = _division(lax.div, lambda x: jnp.full((), -1).astype(x.dtype))
_rem = _division(lax.rem, lambda x: x)


# ---- shifts ---------------------------------------------------------------------------

_SHIFTS = frozenset({"shift_left", "shift_right_logical", "shift_right_arithmetic"})


def _shift(eqn, vals, known):
    """A shift by an amount that may reach the width: XLA gives 0 (a left or logical
    shift) or the sign (an arithmetic one), LLVM's shift is poison there; so a traced
    amount is kept below the width and the result selected. A known amount below the
    width shifts as it is."""
    dtype = eqn.outvars[0].aval.dtype
    x, s = (jnp.asarray(v, dtype) for v in vals)
    width = np.iinfo(dtype).bits
    amount = eqn.invars[1]
    value = amount.val if isinstance(amount, jax.extend.core.Literal) else known.get(amount)
    name = eqn.primitive.name
    op = {"shift_left": lax.shift_left, "shift_right_logical": lax.shift_right_logical,
          "shift_right_arithmetic": lax.shift_right_arithmetic}[name]
    if value is not None and np.all((np.asarray(value) >= 0) & (np.asarray(value) < width)):
        return op(x, s)
    x, s = jnp.broadcast_arrays(x, s)
    unsigned = lax.bitcast_convert_type(s, _UINT[s.dtype.itemsize]) if \
        jnp.issubdtype(s.dtype, jnp.signedinteger) else s
    past = unsigned >= width  # a negative amount is a large unsigned one, as in XLA
    if name == "shift_right_arithmetic":  # the sign: a shift by width - 1
        return op(x, jnp.where(past, jnp.asarray(width - 1, dtype), s))
    return jnp.where(past, jnp.zeros((), dtype), op(x, jnp.where(past, jnp.zeros((), dtype), s)))


# ---- select_n --------------------------------------------------------------------------

def _select_n(eqn, vals, _):
    """``select_n`` with an integer case index or more than two cases (Triton's rule
    takes a boolean and two): XLA's tree of selects on ``which < offset + mid``, so an
    index outside the cases picks what XLA's picks."""
    which, *cases = vals
    if len(cases) == 1:
        return [cases[0]]
    if eqn.invars[0].aval.dtype == jnp.bool_:
        return [lax.select_n(which, *cases)]
    which = jnp.asarray(which)

    def tree(offset, part):
        if len(part) == 1:
            return part[0]
        mid = len(part) // 2
        below = which < jnp.asarray(offset + mid, which.dtype)
        return jnp.where(below, tree(offset, part[:mid]), tree(offset + mid, part[mid:]))

    return [tree(0, cases)]


def _clamp(eqn, vals, _):
    lo, x, hi = vals
    return [jnp.minimum(jnp.maximum(x, lo), hi)]  # XLA's clamp, on integers


# ---- reductions ------------------------------------------------------------------------

def _bool_reduce(reduce):
    def rule(eqn, vals, _):
        (x,) = vals
        r = reduce(x.astype(jnp.int32), axes=tuple(eqn.params["axes"]))
        return [r != 0]
    return rule


def _popcount(eqn, vals, _):
    """``population_count`` by shifts, masks, adds and one multiply on 32-bit words (the
    bit-sliced count): Triton does not legalize ``math.ctpop`` (an H100, JAX 0.11.2:
    "failed to legalize operation 'math.ctpop'"). Narrower words are zero-extended."""
    (x,) = vals
    dtype = eqn.outvars[0].aval.dtype
    u = _bits(jnp.asarray(x, dtype)).astype(jnp.uint32)
    u = u - ((u >> 1) & jnp.uint32(0x55555555))
    u = (u & jnp.uint32(0x33333333)) + ((u >> 2) & jnp.uint32(0x33333333))
    u = (u + (u >> 4)) & jnp.uint32(0x0F0F0F0F)
    n = (u * jnp.uint32(0x01010101)) >> 24
    return [lax.bitcast_convert_type(n.astype(_UINT[jnp.dtype(dtype).itemsize]), dtype)]


def _cumsum(eqn, vals, _):
    """An integer ``cumsum`` as a masked sum over a (n, n) triangle (words wrap,
    so any order of the additions gives XLA's bits): only primitives whose Triton
    compilation the kernels already use, no ``tt.scan``."""
    (x,) = vals
    axis = eqn.params["axis"]
    x = jnp.moveaxis(jnp.asarray(x), axis, -1)
    n = x.shape[-1]
    i = lax.broadcasted_iota(jnp.int32, (n, n), 0)  # output position
    j = lax.broadcasted_iota(jnp.int32, (n, n), 1)  # input position
    lower = (j >= i) if eqn.params.get("reverse") else (j <= i)
    terms = jnp.where(lower, x[..., None, :], jnp.zeros((), x.dtype))
    return [jnp.moveaxis(terms.sum(-1, dtype=x.dtype), -1, axis)]


# ---- one-hot gather and scatter --------------------------------------------------------

def _bits(x):
    """x as unsigned words of its width (bool as uint8 0/1)."""
    if x.dtype == jnp.bool_:
        return x.astype(jnp.uint8)
    return lax.bitcast_convert_type(x, _UINT[x.dtype.itemsize])


def _from_bits(u, dtype):
    if dtype == jnp.bool_:
        return u != 0
    return lax.bitcast_convert_type(u, dtype)


def _gather_form(eqn) -> str | None:
    """Which one-element-per-index gather ``eqn`` is: "batched" (operand (b, n),
    indices (b, m, 1)), "table" (operand (n,), indices (..., 1)), "rows" (operand
    (b, n), indices (m, 1)); None for any other gather."""
    d, p = eqn.params["dimension_numbers"], eqn.params
    op, idx = (v.aval for v in eqn.invars)
    if idx.ndim < 1 or idx.shape[-1] != 1:
        return None
    coll, sim = tuple(int(a) for a in d.collapsed_slice_dims), tuple(
        int(a) for a in d.start_index_map)
    obd, sibd = tuple(int(a) for a in d.operand_batching_dims), tuple(
        int(a) for a in d.start_indices_batching_dims)
    offs = tuple(int(a) for a in d.offset_dims)
    sizes = tuple(int(s) for s in p["slice_sizes"])
    if (op.ndim == 2 and idx.ndim == 3 and coll == (1,) and sim == (1,) and obd == (0,)
            and sibd == (0,) and offs == () and sizes == (1, 1)):
        return "batched"
    if op.ndim == 1 and coll == (0,) and sim == (0,) and not obd and offs == () \
            and sizes == (1,):
        return "table"
    if (op.ndim == 2 and idx.ndim == 2 and coll == (1,) and sim == (1,) and not obd
            and offs == (0,) and sizes == (op.shape[0], 1)):
        return "rows"
    return None


def _onehot(idx, n: int):
    """idx (..., m) int -> bool (..., m, n): idx == position (an out-of-range index hits
    nothing)."""
    idx = idx.astype(jnp.int32)
    pos = lax.broadcasted_iota(jnp.int32, (*idx.shape, n), idx.ndim)
    return lax.expand_dims(idx, (idx.ndim,)) == pos


def _gather(eqn, vals, _):
    op, idx = vals
    form = _gather_form(eqn)
    n = op.shape[-1]
    idx = idx[..., 0].astype(jnp.int32) if idx.ndim else idx
    mode = eqn.params["mode"]
    inside = (idx >= 0) & (idx < n)
    if mode != _MODES.FILL_OR_DROP:  # XLA's gather clamps the start index
        idx = jnp.clip(idx, 0, n - 1)
    hit = _onehot(idx, n)  # (..., m, n)
    u = _bits(op)
    if form == "rows":  # op (b, n), idx (m,) -> (b, m)
        words = jnp.where(lax.expand_dims(hit, (0,)), lax.expand_dims(u, (1,)),
                          jnp.zeros((), u.dtype))
    else:  # "batched": op (b, n), idx (b, m); "table": op (n,), idx (..., m)
        src = lax.expand_dims(u, (u.ndim - 1,))
        words = jnp.where(hit, src, jnp.zeros((), u.dtype))
    out = _from_bits(jnp.max(words, axis=-1), op.dtype)
    if mode == _MODES.FILL_OR_DROP:
        fill = eqn.params["fill_value"]
        if fill is None:
            fill = default_fill(op.dtype)
        out = jnp.where(inside, out, jnp.asarray(fill, op.dtype))
    return [out]


def default_fill(dtype):
    """JAX's gather fill value for ``dtype``: NaN, the most negative signed / largest
    unsigned value, True."""
    if jnp.issubdtype(dtype, jnp.inexact):
        return np.nan
    if dtype == jnp.bool_:
        return True
    info = jnp.iinfo(dtype)
    return info.min if jnp.issubdtype(dtype, jnp.signedinteger) else info.max


def _scatter_form_ok(eqn) -> bool:
    """Whether ``eqn`` scatters one element per index along the last axis of a (b, n)
    operand: indices (b, m, 1) with updates (b, m), or indices (m, 1) shared by the b
    rows of the updates (b, m)."""
    d = eqn.params["dimension_numbers"]
    op, idx, upd = (v.aval for v in eqn.invars)
    if not (op.ndim == 2 and idx.shape[-1:] == (1,) and upd.ndim == 2
            and tuple(int(a) for a in d.inserted_window_dims) == (1,)
            and tuple(int(a) for a in d.scatter_dims_to_operand_dims) == (1,)):
        return False
    batched = (idx.ndim == 3 and tuple(int(a) for a in d.update_window_dims) == ()
               and tuple(int(a) for a in d.operand_batching_dims) == (0,)
               and tuple(int(a) for a in d.scatter_indices_batching_dims) == (0,))
    rows = (idx.ndim == 2 and tuple(int(a) for a in d.update_window_dims) == (0,)
            and not d.operand_batching_dims and upd.shape[0] == op.shape[0])
    return batched or rows


def _scatter_slots(eqn, op, idx, upd):
    """A scatter's indices as (b, m) int32, one per update (clipped in mode CLIP), and
    which of them lie in the operand's n positions."""
    n = op.shape[-1]
    idx = jnp.broadcast_to(idx[..., 0], upd.shape)
    if eqn.params["mode"] == _MODES.CLIP:
        idx = jnp.clip(idx, 0, n - 1)  # in the indices' own type (unsigned ones too)
    idx = idx.astype(jnp.int32)
    return idx, (idx >= 0) & (idx < n)


def _slot_onehot(idx, n: int):
    """(b, n, m) bool: position p, update l (built in that order: no transpose of it)."""
    pos = lax.broadcasted_iota(jnp.int32, (1, n, 1), 1)
    return lax.expand_dims(idx, (1,)) == pos


def _hit_positions(idx, inside, n: int, hit=None):
    """(b, n) bool: which positions the indices idx (b, m) reach, for indices declared
    unique (``inside``: those in range). Up to 32 positions, from one word per row: the
    sum of ``1 << idx`` over the indices in range (distinct bits, so the sum is their
    union), then each position's bit (O(m + n) operations, where ``hit.any(-1)`` takes
    one a pair); more positions, from the one-hot ``hit`` (b, n, m) (made here if None)."""
    if n > 32:
        hit = _slot_onehot(idx, n) if hit is None else hit
        return jnp.sum(hit.astype(jnp.int32), axis=-1) > 0
    # (no shift by 32 or more: LLVM leaves it undefined)
    one = jnp.where(inside, jnp.uint32(1) << jnp.where(inside, idx, 0).astype(jnp.uint32),
                    jnp.uint32(0))
    word = jnp.sum(one, axis=-1, dtype=jnp.uint32)
    pos = lax.broadcasted_iota(jnp.uint32, (1, n), 1)
    return ((lax.expand_dims(word, (1,)) >> pos) & jnp.uint32(1)) != 0


class Stored(NamedTuple):
    """A scatter that sets an output of the program, written by the kernel's stores
    (``warp.kernel``) as a GPU program stores to computed slots: the operand ``op`` (b, n)
    at the positions no update reaches (``hit`` False), update ``upd[l]`` at ``idx[l]``
    where ``inside[l]``. Two stores to disjoint places, O(n + m) operations a warp where
    the one-hot form takes O(n * m)."""

    op: Any
    idx: Any
    upd: Any
    inside: Any
    hit: Any


def stored_outputs(jaxpr) -> frozenset:
    """The outputs of ``jaxpr`` that a scatter (set, indices declared unique) makes and
    nothing else reads: the kernel stores those (:class:`Stored`)."""
    outs = collections.Counter(v for v in jaxpr.outvars if not isinstance(
        v, jax.extend.core.Literal))
    read = {v for e in jaxpr.eqns for v in e.invars
            if not isinstance(v, jax.extend.core.Literal)}
    return frozenset(e.outvars[0] for e in jaxpr.eqns
                     if e.primitive.name == "scatter" and why_not(e) is None
                     and outs[e.outvars[0]] == 1 and e.outvars[0] not in read)


def _stored(eqn, vals) -> Stored:
    op, idx, upd = vals
    idx, inside = _scatter_slots(eqn, op, idx, upd)
    return Stored(op, idx, upd, inside, _hit_positions(idx, inside, op.shape[-1]))


def _scatter(kind: str):
    def rule(eqn, vals, _):
        op, idx, upd = vals
        n = op.shape[-1]
        idx, inside = _scatter_slots(eqn, op, idx, upd)
        hit = _slot_onehot(idx, n)  # (b, n, m)
        wide = lax.expand_dims(upd, (1,))  # (b, 1, m)
        if kind == "set":
            # Indices declared unique: at most one update l reaches position p, so the
            # sum over l of (hit ? u[l] : 0) in the raw bits is u[l] where p is hit. Three
            # operations a pair (compare, select, add); which positions are hit comes
            # from the indices alone (_hit_positions), not from a second reduction.
            u = _bits(wide)
            got = jnp.sum(jnp.where(hit, u, jnp.zeros((), u.dtype)), axis=-1, dtype=u.dtype)
            return [jnp.where(_hit_positions(idx, inside, n, hit), _from_bits(got, op.dtype),
                              op)]
        if kind == "add":
            return [op + jnp.sum(jnp.where(hit, wide, jnp.zeros((), op.dtype)), axis=-1)]
        info = jnp.iinfo(op.dtype)
        if kind == "max":
            return [jnp.maximum(op, jnp.max(jnp.where(hit, wide, info.min), axis=-1))]
        return [jnp.minimum(op, jnp.min(jnp.where(hit, wide, info.max), axis=-1))]
    return rule


# ---- control flow ----------------------------------------------------------------------

def _loop_counts(eqn):
    """(constants, carries) of a scan that is a fori_loop (no scanned inputs or outputs),
    else None. JAX 0.10 names both counts in the parameters, JAX 0.11.2 has no
    ``num_carry``: a fori_loop's carries are its body's outputs, each of the same type
    into and out of the loop (a scanned output would be stacked)."""
    p = eqn.params
    body = p["jaxpr"].jaxpr
    ncarry = p.get("num_carry", len(body.outvars))
    nc = p.get("num_consts", len(eqn.invars) - ncarry)

    def types(vs):
        return [(v.aval.shape, v.aval.dtype) for v in vs]

    if (nc < 0 or len(eqn.invars) != nc + ncarry or len(body.outvars) != ncarry
            or types(eqn.outvars) != types(body.outvars)):
        return None
    return nc, ncarry


def _scan(eqn, vals, consts):
    p = eqn.params
    jx, jconsts = _closed(p["jaxpr"])
    nc, ncarry = _loop_counts(eqn)
    cvals, carry = vals[:nc], vals[nc:nc + ncarry]

    def body(c, _):
        return run(jx, jconsts, [*cvals, *c], consts), None

    out, _ = lax.scan(body, carry, None, length=p["length"])
    return list(out)


def _while(eqn, vals, consts):
    p = eqn.params
    cj, cc = _closed(p["cond_jaxpr"])
    bj, bc = _closed(p["body_jaxpr"])
    ncc, nbc = p["cond_nconsts"], p["body_nconsts"]
    cvals, bvals, init = vals[:ncc], vals[ncc:ncc + nbc], vals[ncc + nbc:]
    return list(lax.while_loop(lambda c: run(cj, cc, [*cvals, *c], consts)[0],
                               lambda c: run(bj, bc, [*bvals, *c], consts), init))


def _cond(eqn, vals, consts):
    index, *ops = vals
    branches = [(lambda *a, b=b: run(*_closed(b), list(a), consts))
                for b in eqn.params["branches"]]
    return list(lax.switch(index, branches, *ops))


REWRITES = {
    "select_n": _select_n,
    "clamp": _clamp,
    "div": _div,
    "rem": _rem,
    "reduce_or": _bool_reduce(lax.reduce_max),
    "reduce_and": _bool_reduce(lax.reduce_min),
    "gather": _gather,
    "scatter": _scatter("set"),
    "scatter-add": _scatter("add"),
    "scatter_add": _scatter("add"),
    "scatter-max": _scatter("max"),
    "scatter_max": _scatter("max"),
    "scatter-min": _scatter("min"),
    "scatter_min": _scatter("min"),
    "population_count": _popcount,
    "cumsum": _cumsum,
    "scan": _scan,
    "while": _while,
    "cond": _cond,
}

#: Integer reductions and scans: exact in any order of the additions (words wrap).
INT_REDUCTIONS = frozenset({"reduce_sum", "reduce_max", "reduce_min", "cumsum",
                            "population_count", "clz"})


def sub_jaxprs(eqn) -> list:
    """The jaxprs that ``run`` evaluates for the control-flow equation ``eqn``."""
    p = eqn.params
    name = eqn.primitive.name
    if name == "scan":
        return [_closed(p["jaxpr"])[0]]
    if name == "while":
        return [_closed(p["cond_jaxpr"])[0], _closed(p["body_jaxpr"])[0]]
    if name == "cond":
        return [_closed(b)[0] for b in p["branches"]]
    return []


def why_not(eqn) -> str | None:
    """None when ``run`` gives XLA's bits for ``eqn`` (a primitive of ``REWRITES`` or
    ``INT_REDUCTIONS``) in a Triton kernel; else why not."""
    name = eqn.primitive.name
    p = eqn.params
    dtypes = [v.aval.dtype for v in (*eqn.invars, *eqn.outvars) if hasattr(v.aval, "dtype")]
    if name in INT_REDUCTIONS:
        if not all(_is_int(d) for d in dtypes):
            return f"{name} on {sorted({str(d) for d in dtypes})} (exact only on integers)"
        return None
    if name in ("div", "rem", "clamp"):
        if all(_is_int(d) for d in dtypes):
            return None
        return (f"{name} on {', '.join(sorted({str(d) for d in dtypes}))} (Triton may "
                f"give other bits than XLA)")
    if name in ("reduce_or", "reduce_and"):
        return None if all(d == jnp.bool_ for d in dtypes[:1]) else \
            f"{name} on {dtypes[0]} (only on booleans)"
    if name == "gather":
        if _gather_form(eqn) is None:
            return "gather of a form other than one element per index along one axis"
        return None
    if name.startswith("scatter"):
        if not _scatter_form_ok(eqn):
            return f"{name} of a form other than one element per index along the lanes"
        if name == "scatter":
            if p.get("update_jaxpr") is not None and p.get("update_consts"):
                return "scatter with a combiner"
            if not p["unique_indices"]:
                return ("scatter (set) with indices not declared unique: XLA leaves which "
                        "of several updates of one element wins unspecified; pass "
                        "unique_indices=True where the indices are unique")
            return None
        if not all(_is_int(d) for d in dtypes[:1] + dtypes[2:]):
            return f"{name} on {dtypes[0]} (exact in any order only on integers)"
        if name.replace("_", "-") not in ("scatter-add", "scatter-max", "scatter-min"):
            return f"{name}"
        return None
    if name == "scan":
        if p["reverse"] or p["unroll"] not in (1, False) or _loop_counts(eqn) is None:
            return ("scan other than a fori_loop (Triton lowers forward loops without "
                    "scanned inputs or outputs, unroll=1)")
        return None
    if name in ("while", "cond"):
        return None
    return f"{name} (no bit-exact Triton lowering here)"
