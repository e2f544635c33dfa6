"""Divergence: branch and lane_while run each path with the lanes that took it.

Each test states the rule from first principles (a lane-by-lane reading of the CUDA
program) and compares bits; the captured H100 programs are in
test_divergence_capture.py.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

import jaxwarp

FULL = 0xFFFFFFFF
LANE = np.arange(32)
RNG = np.random.default_rng(28)
X = jnp.asarray(RNG.integers(0, 2**32, 32, dtype=np.uint32))


def _mask(lanes) -> int:
    return int(sum(1 << int(l) for l in np.flatnonzero(np.asarray(lanes))))


def _inside(pred, fn, *args):
    """Runs ``fn`` in the then-path of ``branch(pred)``; the other lanes give 0s."""
    return jaxwarp.branch(pred, fn, lambda *a: jax.tree.map(jnp.zeros_like, fn(*a)), *args)


def test_activemask_is_the_lanes_of_the_path_nested():
    lane = jaxwarp.lane_id()

    def program(x):
        def outer_then(x):
            inner = jaxwarp.branch(x % 3 == 0, lambda: jaxwarp.activemask(),
                                   lambda: jaxwarp.activemask())
            return jnp.stack([jnp.broadcast_to(jaxwarp.activemask(), (32,)), inner], 1)

        return jaxwarp.branch(lane < 20, outer_then,
                              lambda x: jnp.stack([jnp.broadcast_to(jaxwarp.activemask(),
                                                                    (32,))] * 2, 1), x)

    x = jnp.asarray(RNG.integers(0, 100, 32, dtype=np.int32))
    got = np.asarray(jax.jit(program)(x))
    xs = np.asarray(x)
    lo, div = LANE < 20, xs % 3 == 0
    want0 = np.where(lo, _mask(lo), _mask(~lo))
    want1 = np.where(lo & div, _mask(lo & div), np.where(lo, _mask(lo & ~div), _mask(~lo)))
    np.testing.assert_array_equal(got[:, 0], want0.astype(np.uint32))
    np.testing.assert_array_equal(got[:, 1], want1.astype(np.uint32))


def test_intrinsics_with_activemask_equal_the_explicit_mask():
    """Inside a path, f(activemask(), ...) is f(mask of the path's lanes, ...) there."""
    pred = (np.asarray(X) >> 3) & 1 == 1
    m = _mask(pred)

    def probes(mask, x):
        i = x.astype(jnp.int32)
        return (jaxwarp.shfl_sync(mask, x, 7), jaxwarp.shfl_down_sync(mask, x, 1),
                jaxwarp.ballot_sync(mask, x & 1), jaxwarp.all_sync(mask, x & 1),
                jaxwarp.match_any_sync(mask, x & 3), jaxwarp.reduce_add_sync(mask, x),
                jaxwarp.reduce_min_sync(mask, i), jaxwarp.reduce_xor_sync(mask, x),
                jaxwarp.elect_sync(mask)[0])

    got, want = jax.jit(lambda x: (
        _inside(pred, lambda x: probes(jaxwarp.activemask(), x), x), probes(m, x)))(X)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(np.asarray(g)[pred], np.asarray(w)[pred])


def test_inactive_lane_does_not_take_part():
    """FULL mask inside a path: the other path's lanes do not call and read as 0."""
    pred = LANE % 4 != 0

    def then(x):
        return (jaxwarp.shfl_sync(FULL, x, 0), jaxwarp.reduce_add_sync(FULL, x),
                jaxwarp.ballot_sync(FULL, jnp.ones(32, bool)))

    sh, red, bal = jax.jit(lambda x: _inside(pred, then, x))(X)
    xs = np.asarray(X)
    np.testing.assert_array_equal(np.asarray(sh)[pred], 0)  # lane 0 is not executing
    np.testing.assert_array_equal(np.asarray(red)[pred],
                                  np.sum(xs[pred], dtype=np.uint32))
    np.testing.assert_array_equal(np.asarray(bal)[pred], _mask(pred))


def test_lane_while_per_lane_trip_counts():
    """Collatz steps per lane; activemask in each trip counts the lanes still looping."""
    x = jnp.asarray(RNG.integers(1, 60, 32, dtype=np.int32))

    def body(s):
        v, steps, alive = s
        v = jnp.where(v % 2 == 0, v // 2, 3 * v + 1)
        return v, steps + 1, alive + jax.lax.population_count(jaxwarp.activemask()).astype(
            jnp.int32)

    v, steps, alive = jax.jit(lambda x: jaxwarp.lane_while(
        lambda s: s[0] != 1, body, (x, jnp.int32(0), jnp.int32(0))))(x)
    trips = []
    for v0 in np.asarray(x):
        n = 0
        while v0 != 1:
            v0 = v0 // 2 if v0 % 2 == 0 else 3 * v0 + 1
            n += 1
        trips.append(n)
    trips = np.array(trips)
    np.testing.assert_array_equal(np.asarray(steps), trips)
    np.testing.assert_array_equal(np.asarray(v), 1)
    want_alive = [sum(int(np.sum(trips > t)) for t in range(n)) for n in trips]
    np.testing.assert_array_equal(np.asarray(alive), want_alive)


def test_vmap_many_warps_each_with_its_own_lanes():
    xs = jnp.asarray(RNG.integers(0, 2**32, (5, 32), dtype=np.uint32))

    def program(x):
        return _inside(x & 1 == 1, lambda x: jnp.broadcast_to(jaxwarp.activemask(), (32,)), x)

    got = np.asarray(jax.jit(jax.vmap(program))(xs))
    for w in range(5):
        odd = np.asarray(xs[w]) & 1 == 1
        np.testing.assert_array_equal(got[w], np.where(odd, _mask(odd), 0).astype(np.uint32))


@pytest.mark.slow
def test_grad_through_branch_and_bounded_loop():
    x = jnp.linspace(-2.0, 2.0, 32, dtype=jnp.float32)
    lane = jaxwarp.lane_id()

    def f(x):
        y = jaxwarp.branch(lane % 2 == 0, jnp.sin,
                           lambda v: v * jaxwarp.shfl_xor_sync(jaxwarp.activemask(), v, 2), x)
        y, _ = jaxwarp.lane_while(lambda s: s[1] < lane % 4,
                                  lambda s: (s[0] * jnp.cos(s[0]), s[1] + 1), (y, lane),
                                  max_trips=4)
        return jnp.sum(y)

    check_grads(f, (x,), order=1, modes=("fwd", "rev"), atol=1e-2, rtol=1e-2)


def test_then_path_is_traced_first():
    order = []
    jax.make_jaxpr(lambda: jaxwarp.branch(LANE < 3, lambda: order.append("then") or 0,
                                          lambda: order.append("else") or 0))()
    assert order == ["then", "else"]


@pytest.mark.slow  # the default run: the capture's elect.sync words and the doctest
def test_elect_sync_is_lowest_executing_lane_of_mask():
    d, p = jax.jit(lambda: _inside(LANE >= 5, lambda: jaxwarp.elect_sync(0xFFFFFFF0)))()
    d, p = np.asarray(d), np.asarray(p)
    assert (d[5:] == 5).all() and p[5] and p.sum() == 1


def _redux_ref(op, absolute, nan, x):
    b = x.view(np.uint32) & (0x7FFFFFFF if absolute else 0xFFFFFFFF)
    v = b.view(np.float32)
    isnan = np.isnan(v)
    if isnan.all() or (nan and isnan.any()):
        return 0x7FFFFFFF
    keys = [(float(f), int(u) >> 31 == 0) for f, u in zip(v[~isnan], b[~isnan], strict=True)]
    pick = min(keys) if op == "min" else max(keys)  # (value, +0 above -0)
    return int(b[~isnan][keys.index(pick)])


SLOW = pytest.mark.slow


@pytest.mark.parametrize("instr", ["min.f32", pytest.param("max.f32", marks=SLOW),
                                   pytest.param("min.abs.f32", marks=SLOW),
                                   pytest.param("max.NaN.f32", marks=SLOW), "min.abs.NaN.f32"])
def test_redux_f32_follows_the_ptx_isa(instr):
    op, absolute, nan = instr.split(".")[0], "abs" in instr, "NaN" in instr
    rows = []
    for case in range(4):
        x = RNG.standard_normal(32).astype(np.float32) * 10.0 ** RNG.integers(-40, 38, 32)
        x[RNG.integers(0, 32, 3)] = [0.0, -0.0, np.float32(-0.0)]
        if case >= 2:
            x[RNG.integers(0, 32, 2)] = np.float32(np.nan)
        if case == 3:
            x[:] = np.nan
        rows.append(x.astype(np.float32))
    xs = np.stack(rows)
    mask = 0x0F0FF0F3
    got = np.asarray(jax.jit(jax.vmap(lambda v: jaxwarp.redux_sync(instr, mask, v)))(xs))
    got = got.view(np.uint32)
    m = ((mask >> LANE) & 1) == 1
    for r, x in enumerate(xs):
        np.testing.assert_array_equal(got[r][m], _redux_ref(op, absolute, nan, x[m]))
        np.testing.assert_array_equal(got[r][~m], x[~m].view(np.uint32))


def _error(fn, *args):
    err, _ = jax.jit(jaxwarp.checked(fn))(*args)
    return err.get()


_LANE = jaxwarp.lane_id()


@pytest.mark.parametrize("program,want", [
    (lambda x: _inside(_LANE >= 4, lambda x: jaxwarp.shfl_xor_sync(FULL, x, 1), x),
     "lane 4 calls __shfl_xor_sync with mask 4294967295, which names lane 0, which is not "
     "executing"),
    pytest.param(lambda x: _inside(_LANE < 8, lambda x: jaxwarp.ballot_sync(0x1FF, x & 1), x),
                 "__ballot_sync with mask 511, which names lane 8", marks=SLOW),
    pytest.param(lambda x: _inside(_LANE < 8, lambda x: jaxwarp.syncwarp(0xF0F) or x, x),
                 "__syncwarp with mask 3855, which names lane 8", marks=SLOW),
    pytest.param(lambda x: _inside(
        _LANE < 8, lambda x: jaxwarp.reduce_add_sync(jaxwarp.activemask(), x), x), None,
        marks=SLOW),  # the path's own mask is fine
], ids=["shfl", "ballot", "syncwarp", "activemask-clean"])
def test_checked_reports_mask_naming_inactive_lanes(program, want):
    msg = _error(program, X)
    assert msg is None if want is None else want in msg


def test_checked_reports_lane_while_past_max_trips():
    msg = _error(lambda x: jaxwarp.lane_while(lambda v: v < 10, lambda v: v + 1, x,
                                              max_trips=3), jnp.arange(32, dtype=jnp.int32))
    assert "lane_while(max_trips=3)" in msg and "still loop" in msg


@pytest.mark.parametrize("call,exc,regex", [
    (lambda: jaxwarp.branch(LANE[:8] < 3, lambda: 0, lambda: 0), ValueError, "pred"),
    (lambda: jaxwarp.branch(LANE < 3, lambda: jnp.int32(0), lambda: jnp.float32(0)),
     TypeError, "branch: results int32"),
    (lambda: jaxwarp.branch(LANE < 3, 1, lambda: 0), TypeError, "then_fn must be callable"),
    (lambda: jaxwarp.branch(LANE < 3, lambda: jnp.zeros(8), lambda: jnp.zeros(8)),
     ValueError, "then_fn's result must be per-lane"),
    (lambda: jaxwarp.lane_while(lambda v: v < 1, lambda v: v, LANE, max_trips=-1),
     ValueError, "max_trips=-1"),
    (lambda: jaxwarp.lane_while(lambda v: v < 1, lambda v: v.astype(jnp.float32),
                                 jnp.zeros(32, jnp.int32)),
     TypeError, "lane_while body_fn"),
    (lambda: jaxwarp.redux_sync("add.f32", FULL, jnp.zeros(32)), ValueError,
     "redux.sync.add.f32 is not a PTX redux.sync form"),
    (lambda: jaxwarp.redux_sync("min.abs.s32", FULL, jnp.zeros(32, jnp.int32)), ValueError,
     "allowed: add.u32"),
    (lambda: jaxwarp.redux_sync("min.f32", FULL, jnp.zeros(32, jnp.int32)), TypeError,
     "allowed: float32"),
], ids=["pred-shape", "path-dtypes", "not-callable", "result-not-per-lane",
        "max-trips-negative", "body-dtype", "redux-op", "redux-qualifier", "redux-dtype"])
def test_bad_inputs(call, exc, regex):
    with pytest.raises(exc, match=regex):
        call()


@pytest.mark.slow
def test_example_programs_equal_numpy(capsys):
    import pathlib
    import sys

    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "experiments"))
    import warp_divergence

    warp_divergence.main(["--seed", "3"])
    out = capsys.readouterr().out
    assert out.count(": True") == 3 and ": False" not in out
    x = RNG.integers(0, 2**32, (4, 32), dtype=np.uint32)
    np.testing.assert_array_equal(np.asarray(jax.vmap(warp_divergence.radix_sort)(x)),
                                  np.sort(x, axis=1))
