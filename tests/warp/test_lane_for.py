"""lane_for: a loop with per-lane trip counts in the loop shape the compiler gives it.

The rule of each shape is written here lane by lane, in NumPy, from its description (a
main loop whose iteration t runs U copies of the body with the lanes that have
n // U > t, and a remainder loop whose trip e runs the lanes with n % U > e), and the
model's bits are compared with it. What nvcc chose on an H100 is in
test_divergence_capture.py.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxwarp

RNG = np.random.default_rng(5)


def _last_trip_masks(n, unroll=1, remainder="after", predicated=False):
    """NumPy: for each lane, the mask ``__activemask()`` gives on its last trip, read inside
    ``if (i == n - 1)`` (``predicated``: read by every lane running that copy)."""
    n = np.maximum(np.asarray(n), 0)
    out = np.zeros(32, np.uint64)
    schedule = []  # (lanes running, i per lane) in execution order
    main, rest = n // unroll, n % unroll
    if unroll == 1:
        schedule = [(n > t, np.full(32, t)) for t in range(int(n.max(initial=0)))]
    else:
        rem = [(rest > e, (n - rest if remainder == "after" else 0) + e)
               for e in range(unroll - 1)]
        off = rest if remainder == "before" else 0
        body = [(main > t, off + t * unroll + j) for t in range(int(main.max(initial=0)))
                for j in range(unroll)]
        schedule = body + rem if remainder == "after" else rem + body
    for lanes, i in schedule:
        reading = lanes & (i == n - 1)
        group = lanes if predicated else reading
        mask = sum(1 << int(l) for l in np.flatnonzero(group))
        out[reading] = mask
    return out.astype(np.uint32)


def _program(predicated):
    def run(n, **kw):
        def body(i, m):
            last = i == n - 1
            if predicated:
                return jnp.where(last, jaxwarp.activemask(), m)
            return jaxwarp.branch(last, lambda m: jaxwarp.activemask() + 0 * m,
                                  lambda m: m, m)

        return jaxwarp.lane_for(n, body, jnp.zeros(32, jnp.uint32), **kw)

    return run


@pytest.mark.parametrize("predicated", [False, True])
@pytest.mark.parametrize("unroll,remainder", [(1, "after"), (2, "after"), (4, "after"),
                                              (4, "before"), (3, "after"), (8, "before")])
def test_last_trip_masks_follow_the_shape(unroll, remainder, predicated):
    run = jax.jit(jax.vmap(lambda n: _program(predicated)(n, unroll=unroll,
                                                         remainder=remainder)))
    trips = RNG.integers(-1, 19, (24, 32)).astype(np.int32)
    trips[0] = 7  # every lane the same: one group
    got = np.asarray(run(trips))
    want = np.stack([_last_trip_masks(t, unroll, remainder, predicated) for t in trips])
    np.testing.assert_array_equal(got, want)


def test_unroll_1_is_lane_while():
    trips = jnp.asarray(RNG.integers(0, 12, 32), jnp.int32)

    def body(i, s):
        w, m = s
        return (w * 3 + i.astype(jnp.uint32),
                m + jaxwarp.reduce_add_sync(jaxwarp.activemask(), w))

    init = (jnp.arange(32, dtype=jnp.uint32), jnp.zeros(32, jnp.uint32))
    got = jaxwarp.lane_for(trips, body, init)

    def wbody(s):
        i, w, m = s
        w2, m2 = body(i, (w, m))
        return i + 1, w2, m2

    want = jaxwarp.lane_while(lambda s: s[0] < trips, wbody, (jnp.zeros(32, jnp.int32),) + init)
    for g, w in zip(got, want[1:], strict=True):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


@pytest.mark.parametrize("unroll,remainder", [(2, "after"), (4, "after"), (4, "before")])
def test_a_body_without_intrinsics_gives_the_same_values_in_every_shape(unroll, remainder):
    trips = jnp.asarray(RNG.integers(0, 20, 32), jnp.int32)

    def body(i, w):  # w = mix(w + i), order-sensitive
        w = w + i.astype(jnp.uint32)
        w = w ^ (w >> 16)
        w = w * jnp.uint32(0x7FEB352D)
        return w ^ (w >> 15)

    init = jnp.arange(32, dtype=jnp.uint32)
    want = np.asarray(jaxwarp.lane_for(trips, body, init))
    got = np.asarray(jaxwarp.lane_for(trips, body, init, unroll=unroll, remainder=remainder))
    np.testing.assert_array_equal(got, want)


def test_unroll_changes_the_masks():
    """The test above would pass for any shape if the shapes were not different."""
    n = jnp.array([1, 5, 2, 4, 8] + [0] * 27, jnp.int32)
    plain = np.asarray(_program(False)(n))[:5]
    unrolled = np.asarray(_program(False)(n, unroll=4))[:5]
    assert [hex(v) for v in plain] == ["0x1", "0x2", "0x4", "0x8", "0x10"]
    assert [hex(v) for v in unrolled] == ["0x3", "0x3", "0x4", "0x8", "0x10"]


def test_inside_a_branch_only_the_paths_lanes_loop():
    lane = jaxwarp.lane_id()
    n = jnp.full(32, 3, jnp.int32)

    def count(i, c):
        return c + jax.lax.population_count(jaxwarp.activemask()).astype(jnp.int32)

    got = jaxwarp.branch(lane < 10, lambda: jaxwarp.lane_for(n, count, jnp.zeros(32, jnp.int32),
                                                             unroll=2),
                         lambda: jnp.zeros(32, jnp.int32))
    np.testing.assert_array_equal(np.asarray(got), np.where(np.arange(32) < 10, 30, 0))


def test_grad_with_max_trips_and_its_check():
    n = jnp.array([1, 5, 2, 4, 8] + [0] * 27, jnp.int32)

    def f(x, m):
        return jaxwarp.lane_for(n, lambda i, s: s * x, jnp.ones(32), unroll=4, max_trips=m).sum()

    assert float(jax.grad(f)(2.0, 8)) == 1 + 5 * 16 + 2 * 2 + 4 * 8 + 8 * 128
    err, _ = jaxwarp.checked(lambda x: f(x, 6))(2.0)
    assert "lane_for(max_trips=6)" in str(err.get())
    err, _ = jaxwarp.checked(lambda x: f(x, 8))(2.0)
    assert err.get() is None


def test_checked_flags_activemask_in_a_diverged_loop_only():
    def prog(n):
        return _program(False)(n, unroll=4)

    err, _ = jaxwarp.checked(prog)(jnp.array([1, 5, 2, 4, 8] + [0] * 27, jnp.int32))
    msg = str(err.get())
    assert "activemask() inside a loop whose lanes diverged" in msg and "lane_for" in msg
    same = jnp.full(32, 6, jnp.int32)  # every lane makes 6 trips: no divergence in the loop
    err, _ = jaxwarp.checked(lambda n: jaxwarp.lane_for(
        n, lambda i, m: jaxwarp.activemask() + 0 * m, jnp.zeros(32, jnp.uint32), unroll=4))(same)
    assert err.get() is None
    err, _ = jaxwarp.checked(lambda n: jaxwarp.lane_while(
        lambda s: s[0] < n, lambda s: (s[0] + 1, jaxwarp.activemask() + 0 * s[1]),
        (jnp.zeros(32, jnp.int32), jnp.zeros(32, jnp.uint32))))(
        jnp.arange(32, dtype=jnp.int32) % 3)
    assert "activemask() inside a loop whose lanes diverged" in str(err.get())
