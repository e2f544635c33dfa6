"""Conformance handler for the divergent one-warp programs (``div/*``, ``undef/*``).

Each captured CUDA program (``tools/capture/cg.cu``, schema in
``tools/capture/FORMAT_CG.md``) is written here again with ``jaxwarp.branch`` and
``jaxwarp.lane_while``, and every probe with the intrinsics it calls, so the capture
checks the divergence model: the active lanes of every path, the intrinsics inside it
and the order in which the paths run (the shared counter of probe word 19).

A probe's shared per-warp counter is not a lane value: it lives in ``_Warp.counter``
while a program is traced, read and bumped in the order the paths run, and carried
through loops as the largest lane copy. The order is the H100's (``_if``): the side of a
branch with fewer executing lanes runs first; on a tie, the side the compiled branch
falls through to (the code right after its ``@P BRA``; the lanes that jump wait).
``FALLS_THROUGH`` says which side that is at each two-sided branch of ``cg.cu``, read from
the SASS that nvcc 13.0 makes of it for sm_90a (the capture tool's build); it is not
fitted to the captures: every tie they hold (programs 0, 3, 4 and 8, both seeds) agrees
with it, and program 1's entry is not exercised by them (no tie).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxwarp._src.conformance.registry import CaptureError, GroupResult, count
from jaxwarp._src.warp import divergence, lanes, reduce, vote
from jaxwarp._src.warp.active import active_lanes

FILLER = 0xDEADBEEF
NPROBE, NSLOT = 24, 16
COUNTER_WORD, CG_REDUCE_WORD = 19, 20
PROGRAMS = ("lane_branch", "data_branch", "one_sided", "nested", "three_way", "for_loop",
            "while_break", "early_exit", "loop_branch", "straight")
UNDEF_PROGRAMS = ("shfl_one_side", "shfl_both_sides", "ballot_one_side",
                  "ballot_both_sides", "syncwarp_one_side", "syncwarp_both_sides",
                  "reduce_one_side", "shfl_exited")
_U32 = jnp.uint32
_LANE = np.arange(32, dtype=np.uint32)


class _Warp:
    """The per-warp shared counter while one program is traced."""

    def __init__(self):
        self.counter = _U32(0)


def _lowest_lane(m: jax.Array) -> jax.Array:
    return lax.population_count((m & (~m + _U32(1))) - _U32(1))


def _words(v: jax.Array, a: jax.Array, warp: _Warp) -> jax.Array:
    """The 24 words of a probe (cg.cu ``probe``) for the executing lanes: (32, 24)."""
    m = lanes.activemask()
    i = lax.bitcast_convert_type(v, jnp.int32)
    lane = jnp.asarray(_LANE)
    below = jnp.where(lane == 0, _U32(0), m & ((_U32(1) << lane) - _U32(1)))
    leader, is_leader = vote.elect_sync(m)
    seq = warp.counter
    executing = active_lanes()
    warp.counter = seq + jnp.any(executing if executing is not None else True).astype(_U32)
    def as_u(x):
        return lax.bitcast_convert_type(x, _U32)

    words = [
        jnp.broadcast_to(m, (32,)),
        jnp.broadcast_to(lax.population_count(m), (32,)),
        lax.population_count(below),
        lanes.shfl_sync(m, v, (a & 31).astype(jnp.int32)),
        lanes.shfl_down_sync(m, v, 1),
        lanes.shfl_xor_sync(m, v, 1),
        vote.ballot_sync(m, v & 1),
        vote.any_sync(m, v & 1).astype(_U32),
        vote.all_sync(m, v & 1).astype(_U32),
        vote.match_any_sync(m, v & 3),
        reduce.reduce_add_sync(m, v),
        as_u(reduce.reduce_min_sync(m, i)),
        reduce.reduce_max_sync(m, v),
        reduce.reduce_and_sync(m, v),
        reduce.reduce_or_sync(m, v),
        reduce.reduce_xor_sync(m, v),
        leader.astype(_U32),
        is_leader.astype(_U32),
        lanes.shfl_sync(m, v, _lowest_lane(m).astype(jnp.int32)),
        jnp.broadcast_to(seq, (32,)),
        jnp.zeros((32,), _U32),  # cg::reduce of floats: not compared here (see below)
        reduce.reduce_min_sync(m, v),
        as_u(reduce.reduce_max_sync(m, i)),
        as_u(reduce.reduce_add_sync(m, i)),
    ]
    return jnp.stack(words, axis=1)


def _probe(out: jax.Array, slot: Any, v: jax.Array, a: jax.Array, warp: _Warp) -> jax.Array:
    """``probe(slot, v)``: the executing lanes write their words to ``out[:, slot]``."""
    words = _words(v, a, warp)
    executing = active_lanes()
    slot = jnp.broadcast_to(jnp.asarray(slot, jnp.int32), (32,))
    old = out[_LANE, slot]
    new = words if executing is None else jnp.where(executing[:, None], words, old)
    return out.at[_LANE, slot].set(new)


def _mix(w: jax.Array) -> jax.Array:
    w = w ^ (w >> 16)
    w = w * _U32(0x7FEB352D)
    return w ^ (w >> 15)


#: Per two-sided branch of cg.cu's k_div, (program, branch): the side the compiled code
#: falls through to, "then" or "else" (nvdisasm of cg.cu built by nvcc 13.0 for sm_90a:
#: ``@!P0 BRA`` jumps to the other side). Program 3: 0 = ``lane < b``, 1 = ``v & 1``;
#: program 4: 0 = ``r == 0``, 1 = ``r == 1``.
FALLS_THROUGH = {(0, 0): "else", (1, 0): "then", (3, 0): "else", (3, 1): "then",
                 (4, 0): "else", (4, 1): "else", (8, 0): "then"}


def _if(pred, then_fn, else_fn, out, warp: _Warp, site: tuple[int, int] | None = None):
    """``if (pred) then_fn else else_fn`` with the paths' side effects (the shared counter)
    in the H100's order: the side with fewer executing lanes first; on a tie the side the
    branch falls through to (``FALLS_THROUGH[site]``). A one-sided branch (``site`` None)
    has no order to model: its other side does nothing."""
    executing = active_lanes()
    taking = pred if executing is None else executing & pred
    others = ~pred if executing is None else executing & ~pred
    n_then, n_else = jnp.sum(taking), jnp.sum(others)
    tie_then = site is not None and FALLS_THROUGH[site] == "then"
    then_first = (n_then < n_else) | ((n_then == n_else) & tie_then)

    def in_order(first, o, counter):
        outer, warp.counter = warp.counter, counter
        if first:
            o = divergence.branch(pred, then_fn, else_fn, o)
        else:  # the same branch with the else side traced (and so run) first
            o = divergence.branch(~pred, else_fn, then_fn, o)
        counter, warp.counter = warp.counter, outer
        return o, counter

    out, warp.counter = lax.cond(then_first, lambda o, c: in_order(True, o, c),
                                 lambda o, c: in_order(False, o, c), out, warp.counter)
    return out


def _nothing(out):
    return out


def _loop(cond_fn, body_fn, state, warp: _Warp):
    """``lane_while`` with the shared counter carried (as lane copies) through the loop."""

    def body(s):
        inner, ctr = s
        outer = warp.counter
        warp.counter = jnp.max(ctr)
        inner = body_fn(inner)
        ctr, warp.counter = jnp.broadcast_to(warp.counter, (32,)), outer
        return inner, ctr

    state, ctr = divergence.lane_while(lambda s: cond_fn(s[0]), body,
                                       (state, jnp.broadcast_to(warp.counter, (32,))))
    warp.counter = jnp.max(ctr)
    return state


def program(prog: int, x: jax.Array, a: jax.Array, b: jax.Array, c: jax.Array) -> jax.Array:
    """The divergent program ``prog`` (FORMAT_CG.md) on one warp: out (32, 16, 24) uint32.

    ``x`` (32,) uint32; ``a``, ``b``, ``c`` int32 scalars (may be traced).
    """
    warp = _Warp()
    lane = jnp.asarray(_LANE).astype(jnp.int32)
    out = jnp.full((32, NSLOT, NPROBE), FILLER, _U32)
    ub, uc = b.astype(_U32), c.astype(_U32)

    def probe(slot, v=x):
        return lambda o: _probe(o, slot, v, a, warp)

    if prog == 0:
        out = _if(lane < b, probe(0), probe(1), out, warp, (0, 0))
        return probe(2)(out)
    if prog == 1:
        out = _if(lax.shift_right_logical(x, ub) & 1 == 1, probe(0), probe(1), out, warp, (1, 0))
        return probe(2)(out)
    if prog == 2:
        out = _if((ub >> _LANE) & 1 == 1, probe(0), _nothing, out, warp)
        return probe(2)(out)
    if prog == 3:
        every = jnp.where(c > 0, uc, _U32(3))

        def low(o):
            o = probe(0)(o)
            o = _if(x & 1 == 1, probe(1), probe(2), o, warp, (3, 1))
            return probe(3)(o)

        def high(o):
            o = _if(jnp.asarray(_LANE) % every == 0, probe(4), _nothing, o, warp)
            return probe(5)(o)

        out = _if(lane < b, low, high, out, warp, (3, 0))
        return probe(6)(out)
    if prog == 4:
        r = x % _U32(3)
        out = _if(r == 0, probe(0), lambda o: _if(r == 1, probe(1), probe(2), o, warp, (4, 1)),
                  out, warp, (4, 0))
        return probe(3)(out)
    if prog in (5, 8):
        trips = x % jnp.where(b > 0, ub, _U32(1))

        def cond(s):
            go = s[1] < trips
            return go if prog == 5 else go & (2 * s[1] + 1 < NSLOT - 1)

        def body(s):
            w, i, o = s
            if prog == 5:
                o = _probe(o, jnp.minimum(i, NSLOT - 2).astype(jnp.int32), w, a, warp)
            else:
                slot = (2 * i).astype(jnp.int32)
                o = _if((w ^ i) & 1 == 1, lambda o: _probe(o, slot, w, a, warp),
                        lambda o: _probe(o, slot + 1, w, a, warp), o, warp, (8, 0))
            return _mix(w + i), i + 1, o

        w, _, out = _loop(cond, body, (x, jnp.zeros(32, _U32), out), warp)
        return _probe(out, NSLOT - 1, w, a, warp)
    if prog == 6:
        modulus = jnp.where(b > 1, ub, _U32(2))

        def body(s):
            w, i, o, _ = s
            o = _probe(o, jnp.minimum(i, NSLOT - 2).astype(jnp.int32), w, a, warp)
            i = i + 1
            w = _mix(w)
            return w, i, o, (w % modulus == 0) | (i >= uc)

        w, _, out, _ = _loop(lambda s: ~s[3], body,
                             (x, jnp.zeros(32, _U32), out, jnp.zeros(32, bool)), warp)
        return _probe(out, NSLOT - 1, w, a, warp)
    if prog == 7:
        return _if((ub >> _LANE) & 1 == 1, _nothing, probe(0), out, warp)
    return probe(0)(out)


def _by_program(cfg: np.ndarray, names: tuple[str, ...], key: str) -> dict[int, np.ndarray]:
    progs = np.asarray(cfg)[:, 0]
    bad = sorted({int(p) for p in progs if not 0 <= p < len(names)})
    if bad:
        raise CaptureError(f"{key} has program code(s) {bad}; known: 0..{len(names) - 1}")
    return {int(p): np.flatnonzero(progs == p) for p in np.unique(progs)}


def divergent_programs(d, keys) -> Iterator[GroupResult]:
    """``div/cfg``, ``div/x``, ``div/out``: one group per program. Word 20, a
    ``cg::reduce`` of floats over ``coalesced_threads()``, is the cooperative-groups
    model's (its reduction order is checked on the ``red/*`` captures); it is not
    compared here."""
    cfg, x, want = np.asarray(d["div/cfg"]), np.asarray(d["div/x"]), d["div/out"]
    if want.shape[1:] != (32, NSLOT, NPROBE):
        raise CaptureError(f"div/out has shape {want.shape}; the schema has (T, 32, {NSLOT}, "
                           f"{NPROBE})")
    words = np.arange(NPROBE) != CG_REDUCE_WORD
    for prog, sel in _by_program(cfg, PROGRAMS, "div/cfg").items():
        fn = jax.jit(jax.vmap(lambda x, a, b, c, p=prog: program(p, x, a, b, c)))
        got = np.asarray(fn(x[sel].astype(np.uint32), *(cfg[sel, k].astype(np.int32)
                                                         for k in (1, 2, 3))))
        m, t = count(got, want[sel], words)
        yield GroupResult(f"div/{PROGRAMS[prog]}", m, t,
                          note="word 20 (cg::reduce of floats) not compared here")


# undef/out words the model claims, per program. After a call whose mask names lanes of
# the other side (CUDA: undefined) the H100 did two things jaxwarp does not model:
# * one side only (0, 2, 4, 6, 7): the calling lanes exchange among themselves, as in
#   jaxwarp, but the warp did not reconverge after the branch: __activemask() there
#   (word 2) was each side's own lanes; jaxwarp reconverges at the end of every branch;
# * both sides (1, 3): the two sides' calls joined into one exchange (each lane read the
#   other side's operand); jaxwarp runs each side's call with its own lanes.
_UNDEF_WORDS = {0: (0, 1, 3), 1: (2, 3), 2: (0, 1, 3), 3: (2, 3), 4: (0, 1, 3),
                5: (0, 1, 2, 3), 6: (0, 1, 3), 7: (0, 1, 2, 3)}
_UNDEF_NOTES = {0: "word 2 not compared: the H100 did not reconverge",
                1: "r1, r2 not compared: the H100 joined both sides' shuffles",
                3: "r1, r2 not compared: the H100 joined both sides' ballots"}
for _p in (2, 4, 6):
    _UNDEF_NOTES[_p] = _UNDEF_NOTES[0]


#: The keys of the ``undef`` family (tools/capture/capture_cg.py).
UNDEF_KEYS = ("undef/cfg", "undef/x", "undef/out", "undef/status")


def undefined_uses(d, keys) -> Iterator[GroupResult]:
    """``undef/*``: calls whose mask names lanes of the other path (CUDA: undefined),
    compared where the program returned (``undef/status`` 0), on the words the model
    claims (``_UNDEF_WORDS``; the notes say what the H100 did otherwise). The family
    claims every ``undef/`` key and needs all four of ``UNDEF_KEYS``."""
    missing = [k for k in UNDEF_KEYS if k not in keys]
    unknown = sorted(set(keys) - set(UNDEF_KEYS))
    if missing or unknown:
        yield GroupResult("undef", 0, 0, error=(
            f"the undefined-use programs need keys {list(UNDEF_KEYS)}"
            + (f"; missing {missing}" if missing else "")
            + (f"; keys {unknown} are not in the schema" if unknown else "")))
        return
    cfg, x, want = np.asarray(d["undef/cfg"]), np.asarray(d["undef/x"]), d["undef/out"]
    status = np.asarray(d["undef/status"])
    for prog, sel in _by_program(cfg, UNDEF_PROGRAMS, "undef/cfg").items():
        name = f"undef/{UNDEF_PROGRAMS[prog]}"
        if status[prog] != 0:
            yield GroupResult(name, 0, 0, skipped=True,
                              note="the warp hung on the GPU" if status[prog] == 1
                              else "CUDA error on the GPU")
            continue
        fn = jax.jit(jax.vmap(lambda x, a, b, p=prog: undefined_program(p, x, a, b)))
        got = np.asarray(fn(x[sel].astype(np.uint32), cfg[sel, 1].astype(np.int32),
                            cfg[sel, 2].astype(np.int32)))
        words = np.isin(np.arange(4), _UNDEF_WORDS[prog])
        m, t = count(got, want[sel], words)
        yield GroupResult(name, m, t, note=_UNDEF_NOTES.get(prog, ""))


def undefined_program(prog: int, x: jax.Array, a: jax.Array, b: jax.Array) -> jax.Array:
    """The ``undef`` program ``prog`` on one warp: (32, 4) uint32 (r1, r2, activemask, end)."""
    full = 0xFFFFFFFF
    take = jnp.asarray(_LANE).astype(jnp.int32) < b
    filler = jnp.full((32,), FILLER, _U32)

    def sync_then_mask():
        lanes.syncwarp(full)
        return jnp.broadcast_to(lanes.activemask(), (32,))

    then = {0: lambda: lanes.shfl_sync(full, x, a), 2: lambda: vote.ballot_sync(full, x & 1),
            4: sync_then_mask, 6: lambda: reduce.reduce_add_sync(full, x)}
    then.update({1: then[0], 3: then[2], 5: then[4], 7: then[0]})
    other = {1: lambda: lanes.shfl_sync(full, x + _U32(1000), a),
             3: lambda: vote.ballot_sync(full, ~x & 1), 5: sync_then_mask}
    end = jnp.ones((32,), _U32)
    if prog == 7:  # the lanes that do not take the branch have returned
        return divergence.branch(
            take, lambda: jnp.stack([then[7](), filler, sync_then_mask(), end], axis=1),
            lambda: jnp.stack([filler, filler, filler, end + 1], axis=1))
    r1, r2 = divergence.branch(take, lambda: (then[prog](), filler),
                               lambda: (filler, other[prog]() if prog in other else filler))
    return jnp.stack([r1, r2, jnp.broadcast_to(lanes.activemask(), (32,)), end], axis=1)
