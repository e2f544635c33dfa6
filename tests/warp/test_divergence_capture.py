"""The divergent programs recorded on an H100 (tests/data/h100_diverge.npz), bit for bit.

Each CUDA program of ``tools/capture/cg.cu`` (``div/*``) is written again with
``jaxwarp.branch`` / ``jaxwarp.lane_while`` in ``handlers_diverge.program``; every word of
every probe a lane reached is compared (word 20, a cooperative-groups float reduction,
is the cg model's). The default run checks one program; ``-m slow`` all of them and the
undefined uses (``undef/*``).
"""

import numpy as np
import pytest
from conftest import DATA

from jaxwarp import conformance
from jaxwarp._src.conformance import handlers_diverge as hd

FILE = DATA / "h100_diverge.npz"
SLOW = pytest.mark.slow


def _subset(d, programs):
    keep = np.isin(d["div/cfg"][:, 0], programs)
    return {k: d[k][keep] for k in ("div/cfg", "div/x", "div/out")}


def _program_results(programs):
    d = np.load(FILE)
    return {r.group: r for r in hd.divergent_programs(_subset(d, programs), set())}


@pytest.mark.parametrize("name", [
    pytest.param(n, marks=() if n == "early_exit" else SLOW) for n in hd.PROGRAMS])
def test_divergent_program_is_bit_exact(name):
    results = _program_results([hd.PROGRAMS.index(name)])
    r = results[f"div/{name}"]
    assert r.total > 0 and r.matched == r.total, r


@SLOW
def test_whole_file_through_the_conformance_command():
    results, device = conformance.check_file(str(FILE))
    assert "H100" in device
    for r in results:
        if r.group == "div/cg_reduce_f32":
            assert r.not_modelled
        else:
            assert r.ok, r


def test_paths_ran_then_first_on_the_h100():
    """Word 19 counts the probes before each: in program 0 the lanes below b (then) probe
    before the others whenever both sides have lanes."""
    d = np.load(FILE)
    cfg, out = d["div/cfg"], d["div/out"]
    sel = np.flatnonzero((cfg[:, 0] == 0) & (cfg[:, 2] > 0) & (cfg[:, 2] < 32))
    assert len(sel)
    for t in sel:
        assert out[t, 0, 0, hd.COUNTER_WORD] == 0  # lane 0 < b: the then path, first
        assert out[t, 31, 1, hd.COUNTER_WORD] == 1  # lane 31 >= b: the else path, second


def test_elect_sync_picks_the_lowest_active_lane():
    d = np.load(FILE)
    out = d["div/out"]
    reached = out[..., 0] != hd.FILLER
    m = out[..., 0].astype(np.uint64)
    lowest = np.where(m == 0, 32, np.log2((m & (~m + 1)) & 0xFFFFFFFF).astype(np.int64))
    np.testing.assert_array_equal(out[..., 16][reached], lowest[reached])
