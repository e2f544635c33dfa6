"""The divergent programs recorded on an H100 (tests/data/h100_diverge.npz), bit for bit.

Each CUDA program of ``tools/capture/cg.cu`` (``div/*``) is written again with
``jaxwarp.branch`` / ``jaxwarp.lane_while`` in ``handlers_diverge.program``; every word of
every probe a lane reached is compared (word 20, a cooperative-groups float reduction,
is the cg model's). Each program compiles for several seconds, so they run with
``-m slow`` (with the undefined uses, ``undef/*``); the default run checks what the
captured words say about the model's rules (path order, elect.sync's leader, the warp
left split by an undefined call), and test_divergence.py the model itself.
"""

import numpy as np
import pytest
from conftest import DATA

from jaxwarp import conformance
from jaxwarp._src.conformance.handlers import diverge as hd

FILE = DATA / "h100_diverge.npz"
SLOW = pytest.mark.slow


def _subset(d, programs):
    keep = np.isin(d["div/cfg"][:, 0], programs)
    return {k: d[k][keep] for k in ("div/cfg", "div/x", "div/out")}


def _program_results(programs):
    d = np.load(FILE)
    return {r.group: r for r in hd.divergent_programs(_subset(d, programs), set())}


@pytest.mark.parametrize("name", [pytest.param(n, marks=SLOW) for n in hd.PROGRAMS])
def test_divergent_program_is_bit_exact(name):
    results = _program_results([hd.PROGRAMS.index(name)])
    r = results[f"div/{name}"]
    assert r.total > 0 and r.matched == r.total, r


@SLOW
def test_whole_file_through_the_conformance_command():
    results, device = conformance.check_file(str(FILE))
    assert "H100" in device
    assert {r.group.split("/")[0] for r in results} == {"div", "undef"}
    for r in results:
        assert r.ok and r.total > 0, r


def test_the_side_with_fewer_lanes_ran_first_on_the_h100():
    """Word 19 numbers the probes in the order they ran. In program 0 (``lane < b``) the
    side with fewer lanes ran first, the else side (lanes >= b) on a tie (b = 16)."""
    d = np.load(FILE)
    cfg, out = d["div/cfg"], d["div/out"]
    sel = np.flatnonzero((cfg[:, 0] == 0) & (cfg[:, 2] > 0) & (cfg[:, 2] < 32))
    assert {int(cfg[t, 2]) for t in sel} >= {1, 7, 16}
    for t in sel:
        then_first = cfg[t, 2] < 32 - cfg[t, 2]
        assert out[t, 0, 0, hd.COUNTER_WORD] == (0 if then_first else 1)  # lane 0 < b
        assert out[t, 31, 1, hd.COUNTER_WORD] == (1 if then_first else 0)  # lane 31 >= b


# (program, branch) -> (then slots, else slots): the probes each side of the branch writes
# (program 8: per trip i, slots 2i and 2i + 1).
_SITES = {(0, 0): ((0,), (1,)), (1, 0): ((0,), (1,)), (3, 0): ((0,), (5,)),
          (3, 1): ((1,), (2,)), (4, 0): ((0,), (1, 2)), (4, 1): ((1,), (2,)),
          **{(8, 0, i): ((2 * i,), (2 * i + 1,)) for i in range(7)}}


def _ties(path):
    """(site, side that ran first) for every captured branch whose sides had equal lanes."""
    d = np.load(path)
    cfg, out = d["div/cfg"], d["div/out"]
    found = []
    for t in range(len(cfg)):
        for site, (then_slots, else_slots) in _SITES.items():
            if site[0] != cfg[t, 0]:
                continue
            sides = []
            for slots in (then_slots, else_slots):
                reached = out[t, :, list(slots), 0] != hd.FILLER  # (slots, 32)
                seq = out[t, :, list(slots), hd.COUNTER_WORD].T[reached.T]
                sides.append((int(reached.sum()), int(seq.min()) if seq.size else None))
            (n_then, s_then), (n_else, s_else) = sides
            if n_then == n_else > 0:
                found.append((site[:2], "then" if s_then < s_else else "else"))
    return found


def test_a_tie_runs_the_side_the_branch_falls_through_to():
    """On a tie the H100 ran first the side that the compiled branch falls through to;
    ``FALLS_THROUGH`` (read from cg.cu's SASS) names it at every branch with a tie."""
    ties = _ties(FILE)
    assert {site for site, _ in ties} >= {(0, 0), (3, 1), (4, 0), (4, 1), (8, 0)}
    for site, first in ties:
        assert first == hd.FALLS_THROUGH[site], (site, first)


@SLOW
def test_the_fall_through_table_drives_the_model(monkeypatch):
    """Naming the other side at program 0's branch puts its tie (b = 16) in the wrong
    order: exactly the counter word of the two sides' probes (32 lanes) no longer matches
    (``test_divergent_program_is_bit_exact`` runs the right order)."""
    d = np.load(FILE)
    keep = (d["div/cfg"][:, 0] == 0) & (d["div/cfg"][:, 2] == 16)
    sub = {k: d[k][keep] for k in ("div/cfg", "div/x", "div/out")}
    monkeypatch.setitem(hd.FALLS_THROUGH, (0, 0), "then")
    (wrong,) = hd.divergent_programs(sub, set())
    assert keep.sum() == 1 and wrong.total - wrong.matched == 32, wrong


def test_elect_sync_picks_the_lowest_active_lane():
    out = np.load(FILE)["div/out"]
    reached = out[..., 0] != hd.FILLER
    m = out[..., 0].astype(np.int64)
    lowest = np.log2(m & -m, where=m > 0, out=np.full(m.shape, 32.0)).astype(np.int64)
    np.testing.assert_array_equal(out[..., 16][reached], lowest[reached])
    assert reached.sum() > 1000


def test_undefined_one_sided_calls_leave_the_warp_split_on_the_h100():
    """What the undef/* handler leaves out, stated: after a one-sided call whose mask names
    the other side's lanes, __activemask() after the branch was each side's own lanes."""
    d = np.load(FILE)
    cfg, out = d["undef/cfg"], d["undef/out"]
    for t in np.flatnonzero(np.isin(cfg[:, 0], (0, 2, 4, 6))):
        b = int(cfg[t, 2])
        side = np.where(np.arange(32) < b, (1 << b) - 1, 0xFFFFFFFF ^ ((1 << b) - 1))
        np.testing.assert_array_equal(out[t, :, 2], side.astype(np.uint32))


@pytest.mark.parametrize("prog", [pytest.param(p, marks=SLOW) for p in range(8)],
                         ids=hd.UNDEF_PROGRAMS)
def test_undefined_use(prog):
    d = np.load(FILE)
    keep = d["undef/cfg"][:, 0] == prog
    sub = {k: d[k][keep] for k in ("undef/cfg", "undef/x", "undef/out")}
    sub["undef/status"] = d["undef/status"]
    (r,) = hd.undefined_uses(sub, set(sub))
    assert r.ok and r.total > 0, r
