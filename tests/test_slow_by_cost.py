"""tools/slow_by_cost.py: the cost list is made from measured durations, and conftest uses it."""

import pathlib
import sys

import conftest
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tools"))
import slow_by_cost  # noqa: E402

DURATIONS = """\
============================= slowest durations ==============================
2.50s call     tests/a.py::test_big[x]
0.90s call     tests/a.py::test_mid
0.80s call     tests/a.py::test_edge
0.10s setup    tests/a.py::test_setup_only
0.05s call     tests/a.py::test_small
9.00s call     tests/test_docs.py::test_docs_build_strict
"""


def test_only_calls_over_the_threshold_are_listed(tmp_path):
    src = tmp_path / "d.txt"
    src.write_text(DURATIONS)
    out = tmp_path / "slow.txt"
    assert slow_by_cost.main([str(src), "--threshold", "0.8", "--out", str(out)]) == 0
    ids = [line for line in out.read_text().splitlines() if not line.startswith("#")]
    # Strictly over the threshold, calls only, and the docs build stays default (CI needs it).
    assert ids == ["tests/a.py::test_big[x]", "tests/a.py::test_mid"]


def test_a_file_without_durations_is_refused(tmp_path):
    src = tmp_path / "d.txt"
    src.write_text("no durations here\n")
    with pytest.raises(SystemExit, match="durations"):
        slow_by_cost.main([str(src), "--out", str(tmp_path / "x.txt")])


def test_the_committed_list_is_read_and_keeps_the_docs_build():
    assert conftest.SLOW_BY_COST, "tests/slow_by_cost.txt lists no test"
    assert not set(slow_by_cost.KEEP) & conftest.SLOW_BY_COST
    assert all(n.startswith("tests/") and "::" in n for n in conftest.SLOW_BY_COST)


class _Module:
    t = u = None


class _Item:
    module = _Module

    def __init__(self, nodeid):
        self.nodeid, self.marks = nodeid, []

    def add_marker(self, mark):
        self.marks.append(mark.name)


def test_listed_tests_are_marked_slow_and_stale_ids_refused(monkeypatch):
    monkeypatch.setattr(conftest, "SLOW_BY_COST", frozenset({"tests/a.py::t[1]"}))
    items = [_Item("tests/a.py::t[1]"), _Item("tests/a.py::t[2]"), _Item("tests/a.py::u")]
    conftest._mark_costly(items)
    assert [i.marks for i in items] == [["slow"], [], []]
    monkeypatch.setattr(conftest, "SLOW_BY_COST", frozenset({"tests/a.py::gone[1]"}))
    with pytest.raises(pytest.UsageError, match="gone"):
        conftest._mark_costly(items)
