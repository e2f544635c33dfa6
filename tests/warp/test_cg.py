"""jaxwarp.cg against the H100 capture (tests/data/h100_cg.npz, tools/capture/FORMAT_CG.md).

By default: float32 cg::reduce / scans over a tile of 32 and over coalesced groups (the
butterfly and the rank scan, on NaN, signed zeros, ties and wide values), and the tile
shuffles of one size; the whole file with -m slow (conformance). The guide's examples
(experiments/cg_examples.py) against the H100's printed text: slow.
"""

from __future__ import annotations

import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxwarp
import jaxwarp.cg as cg
from jaxwarp import conformance

DATA = pathlib.Path(__file__).resolve().parents[1] / "data"
CAPTURE = DATA / "h100_cg.npz"


def _lanes(mask) -> np.ndarray:
    return ((np.uint32(mask) >> np.arange(32, dtype=np.uint32)) & 1) == 1


def test_float32_tile_sum_matches_h100():
    d = np.load(CAPTURE)
    cfg, x, want = d["red/float32/cfg"], d["red/float32/x"], d["red/float32/out"]
    rows = np.flatnonzero(cfg[:, 0] == 32)
    run = jax.jit(jax.vmap(lambda v: cg.reduce(cg.thread_block_tile(32), v, "plus")))
    got = np.asarray(run(jnp.asarray(x[rows].view(np.float32)))).view(np.uint32)
    np.testing.assert_array_equal(got, want[rows, :, 0])


@pytest.mark.slow
def test_float32_reduce_and_scans_match_h100():
    d = np.load(CAPTURE)
    cfg, x, want = d["red/float32/cfg"], d["red/float32/x"], d["red/float32/out"]
    rows = np.flatnonzero((cfg[:, 0] == 32) | (cfg[:, 0] == 0))[::3]

    @jax.jit
    @jax.vmap
    def run(v, active):
        tile = cg.thread_block_tile(32)
        from jaxwarp._src.warp.active import running
        with running(active):
            g = cg.coalesced_threads()
        out = []
        for op in ("plus", "less", "greater"):
            for grp in (tile, g):
                out.append([cg.reduce(grp, v, op), cg.inclusive_scan(grp, v, op),
                            cg.exclusive_scan(grp, v, op)])
        return jax.lax.bitcast_convert_type(jnp.asarray(out), jnp.uint32)

    act = np.stack([_lanes(cfg[r, 1]) for r in rows])
    got = np.asarray(run(jnp.asarray(x[rows].view(np.float32)), jnp.asarray(act)))
    for i, r in enumerate(rows):
        which = 0 if cfg[r, 0] == 32 else 1
        for k in range(3):
            for j in range(3):
                g = got[i, 2 * k + which, j]
                w = want[r, :, 3 * k + j]
                np.testing.assert_array_equal(g[act[i]], w[act[i]], err_msg=f"trial {r} op {k}")


@pytest.mark.slow
def test_float64_nan_pick_of_the_butterfly_and_the_scan():
    """Two quiet NaNs meet: the tile butterfly returns the partner's partial (the H100 in
    both captured seeds), the inclusive scan the lane's own."""
    with jax.enable_x64(True):
        bits = np.zeros(32, np.uint64)
        bits[0::2], bits[1::2] = 0xFFF8000000000000, 0x7FF8000000000001
        x = jnp.asarray(bits.view(np.float64))
        tile = cg.thread_block_tile(2)
        red = np.asarray(cg.reduce(tile, x, "plus")).view(np.uint64)
        scan = np.asarray(cg.inclusive_scan(tile, x, "plus")).view(np.uint64)
    np.testing.assert_array_equal(red, bits.reshape(16, 2)[:, ::-1].reshape(32))
    np.testing.assert_array_equal(scan, bits)


def test_tile_shuffles_match_h100():
    d = np.load(CAPTURE)
    offs = [int(v) for v in d["tile/offs"]]
    xi = d["tile4/xi"][:1].reshape(2, 32)
    want = d["tile4/shfl_i32"][:1].reshape(2, 32, 4, len(offs))

    @jax.jit
    def run(v):
        tile = cg.thread_block_tile(4)
        return jnp.stack([jnp.stack([f(v, b) for b in offs], -1) for f in
                          (tile.shfl, tile.shfl_up, tile.shfl_down, tile.shfl_xor)], -2)

    np.testing.assert_array_equal(np.asarray(jax.vmap(run)(jnp.asarray(xi))), want)


@pytest.mark.slow
def test_reduce_grad_and_vmap():
    x = jnp.linspace(-1.0, 1.0, 64, dtype=jnp.float32).reshape(2, 32)
    g = jax.grad(lambda v: cg.reduce(cg.thread_block_tile(8), v, "plus")[0])(x[0])
    np.testing.assert_array_equal(np.asarray(g), np.r_[np.ones(8), np.zeros(24)])
    r = jax.vmap(lambda v: cg.reduce(cg.thread_block_tile(32), v, cg.greater))(x)
    np.testing.assert_array_equal(np.asarray(r[:, 0]), np.asarray(x.max(axis=1)))


@pytest.mark.slow
def test_whole_capture():
    results, _ = conformance.check_file(str(CAPTURE))
    bad = [r.group for r in results if not r.ok]
    assert not bad, bad


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(jaxwarp, "branch"), reason="needs jaxwarp.branch (divergence)")
def test_guide_examples_print_what_the_h100_printed(capsys):
    import importlib.util
    path = pathlib.Path(__file__).resolve().parents[2] / "experiments" / "cg_examples.py"
    spec = importlib.util.spec_from_file_location("cg_examples", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main([]) == (DATA / "h100_cg_examples.txt").read_text()


@pytest.mark.slow
def test_checked_mode_gives_the_same_bits_over_partitions():
    # Checked mode runs the coalesced trees unrolled through jaxwarp.shfl_sync (for its
    # reports); the default runs them in a loop with one gather a step: the same bits.
    # (Its report on the partitions, lanes of two partitions calling with different
    # masks, is not asserted: the masks are disjoint, which CUDA allows.)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((8, 32)).astype(np.float32) * np.float32(1e4)
    x[:, ::5] = np.float32(-0.0)
    x[0, 3] = np.float32("nan")
    label = rng.integers(0, 3, (8, 32)).astype(np.int32)
    k = np.array([32, 1, 5, 17, 31, 32, 9, 24], np.int32)

    def program(v, lab, kk):
        def body(u):
            part = cg.labeled_partition(cg.coalesced_threads(), lab)
            whole = cg.coalesced_threads()
            return jnp.stack([cg.reduce(part, u, "plus"), cg.inclusive_scan(part, u, "plus"),
                              cg.reduce(whole, u, "plus"), cg.exclusive_scan(whole, u, "less")], 1)
        return jaxwarp.branch(jaxwarp.lane_id() < kk, body, lambda u: jnp.stack([u] * 4, 1), v)

    args = (jnp.asarray(x), jnp.asarray(label), jnp.asarray(k))
    plain = jax.jit(jax.vmap(program))(*args)
    _, checked = jax.jit(jax.vmap(jaxwarp.checked(program)))(*args)
    np.testing.assert_array_equal(np.asarray(checked).view(np.uint32),
                                  np.asarray(plain).view(np.uint32))
