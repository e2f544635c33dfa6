"""Loops with per-lane trip counts as nvcc shaped them on an H100 (tests/data/h100_loopmask.npz,
recorded by tools/capture/probe_loopmask.py: loopmask.cu built with each unroll pragma and
optimisation flag set, sm_90a, CUDA 13.0).

Which lanes read ``__activemask()`` together inside such a loop is the compiler's loop
shape. Measured: with no pragma nvcc unrolls the counted loop by 4 behind a remainder loop
that follows it, whatever the host ``-O`` level and ``-Xptxas -O`` (the unrolling is done
before ptxas); ``#pragma unroll U`` gives U (``unroll 1``: the loop as written); ``-G``
keeps the loop as written. ``NVCC_SHAPES`` states that finding; each build's every word
is compared with ``jaxwarp.lane_for`` in that shape.
"""

import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxwarp

DATA = pathlib.Path(__file__).resolve().parents[1] / "data" / "h100_loopmask.npz"
#: build (pragma_flags) -> the unroll factor that build has (remainder loop after).
NVCC_SHAPES = {"none_O2": 4, "none_O3": 4, "none_O0": 4, "none_O2_ptxasO0": 4, "none_G": 1,
               "u1_O2": 1, "u2_O2": 2, "u4_O2": 4, "u8_O2": 8, "u8_G": 1}


def _mix(w):
    w = w ^ (w >> 16)
    w = w * jnp.uint32(0x7FEB352D)
    return w ^ (w >> 15)


def _last_trip(program, unroll):
    """loopmask.cu's programs 0, 2, 3: (m read on the last trip, w) per lane."""

    def warp(n):
        def body(i, s):
            w, m = s
            # program 2 counts down (w = mix(w + n_left), n_left = n - i); 0 and 3 count up
            w = _mix(w + ((n - i) if program == "countdown" else i).astype(jnp.uint32))

            def read(m):
                a = jaxwarp.activemask()
                if program == "last_trip_ballot":
                    return jaxwarp.ballot_sync(a, jnp.ones(32, jnp.int32)) + 0 * m
                return a + 0 * m

            return w, jaxwarp.branch(i == n - 1, read, lambda m: m, m)

        init = (jnp.arange(32, dtype=jnp.uint32), jnp.zeros(32, jnp.uint32))
        w, m = jaxwarp.lane_for(n, body, init, unroll=unroll)
        return jnp.stack([m, w], axis=1)

    return jax.jit(jax.vmap(warp))


def _every_trip(unroll):
    def warp(n):
        def body(i, s):
            w, rec = s
            w = _mix(w + i.astype(jnp.uint32))
            slot = jnp.minimum(i, 31)
            onehot = jnp.arange(32)[None, :] == slot[:, None]
            rec = jnp.where(onehot, jaxwarp.activemask(), rec)
            return w, rec

        init = (jnp.arange(32, dtype=jnp.uint32), jnp.full((32, 32), 0xDEADBEEF, jnp.uint32))
        w, rec = jaxwarp.lane_for(n, body, init, unroll=unroll)
        return jnp.concatenate([rec, w[:, None]], axis=1)

    return jax.jit(jax.vmap(warp))


def _cases():
    """Every (build, program); by default the last-trip program of every build and the
    every-trip program of one, the rest with -m slow."""
    z = np.load(DATA)
    for build, program in sorted({tuple(k.split("/")[1:3]) for k in z.files
                                  if k.startswith("loop/")}):
        default = program == "last_trip" or (build, program) == ("none_O2", "every_trip")
        yield pytest.param(build, program, id=f"{build}-{program}",
                           marks=() if default else pytest.mark.slow)


@pytest.mark.parametrize("build,program", list(_cases()))
def test_every_word_in_nvccs_shape(build, program):
    z = np.load(DATA)
    trips = z[f"loop/{build}/{program}/trips"]
    want = z[f"loop/{build}/{program}/out"]
    unroll = NVCC_SHAPES[build]
    run = _every_trip(unroll) if program == "every_trip" else _last_trip(program, unroll)
    got = np.asarray(run(jnp.asarray(trips)))
    np.testing.assert_array_equal(got, want)


def test_the_shape_matters():
    """The loop as written does not give the -O2 build's masks (so the test above can fail)."""
    z = np.load(DATA)
    trips, want = (z[f"loop/none_O2/last_trip/{k}"] for k in ("trips", "out"))
    got = np.asarray(_last_trip("last_trip", 1)(jnp.asarray(trips)))
    assert (got[..., 0] != want[..., 0]).any()
    np.testing.assert_array_equal(got[..., 1], want[..., 1])  # the values do not depend on it
