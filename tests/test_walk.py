"""The walk of ``matmul(a, b, operand_format="bf16", mode="exact")`` through the layers
(tools/walk.py measures it; docs/architecture.md shows it): the operands go down the
layer order and never back up, no GEMM module is entered twice on one call, and the
default path's operands pass at most 8 modules."""

from __future__ import annotations

import pathlib
import sys

import pytest

import jaxwarp

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tools"))
import walk  # noqa: E402
from layers import LAYERS  # noqa: E402


def _layer(module: str) -> int:
    top = module.split("/")[0].removesuffix(".py")
    return next(i for i, names in enumerate(LAYERS) if top in names)


def _operand_entries(**options):
    with jaxwarp.config.override(**options):
        _, entries = walk.call_matmul()
    return [e for e in entries if e[3]]


@pytest.fixture(scope="module")
def inline_walk():
    # The k loop in the calling program: the whole walk on this thread.
    return _operand_entries(gemm_shared="off")


def test_operands_never_go_up_a_layer(inline_walk):
    # An entry from a lower layer into a higher one would be a callback up the order;
    # config.keyed_jit (the switchboard's jit wrapper) calls back the function it wraps.
    up = [(c, m, f) for c, m, f, _ in inline_walk
          if c is not None and c != "config.py" and _layer(m) > _layer(c)]
    assert not up, up
    assert any(m.startswith("arithmetic/") for _, m, _, _ in inline_walk)  # it got there


def test_each_gemm_module_is_entered_once(inline_walk):
    gemm = [m for c, m, _, _ in inline_walk if m.startswith("gemm/") and c != "config.py"]
    assert len(gemm) == len(set(gemm)), gemm
    assert {"gemm/matmul.py", "gemm/k_loop.py"} <= set(gemm)


def test_default_walk_passes_at_most_8_modules():
    s = walk.summary([(c, m, f, True) for c, m, f, _ in _operand_entries()])
    assert s["operands"]["modules"] <= 8, s["operands"]["entries"]


def test_walk_counts_entries():
    # The tool itself: a function calling into another module twice is two entries.
    s = walk.summary([(None, "a.py", "f", True), ("a.py", "b.py", "g", True),
                      ("a.py", "b.py", "g", False), ("b.py", "a.py", "h", True)])
    assert s["operands"] == {"modules": 2, "entries": {"a.py": 2, "b.py": 1},
                             "each_once": False}
    assert s["all"]["entries"] == {"a.py": 2, "b.py": 2}
