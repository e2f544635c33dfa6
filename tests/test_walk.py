"""The walk of ``matmul(a, b, operand_format="bf16", mode="exact")`` through the layers
(tools/walk.py measures it; docs/architecture.md shows it): the operands go down the
layer order and never back up, every module above the number layer is entered once
(the conversion once per operand), and the default path's operands pass at most 8
modules."""

from __future__ import annotations

import pathlib
import sys

import jax
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
    # An entry from a lower layer into a higher one would be a callback up the order.
    up = [(c, m, f) for c, m, f, _ in inline_walk if c is not None and _layer(m) > _layer(c)]
    assert not up, up
    assert any(m.startswith("arithmetic/") for _, m, _, _ in inline_walk)  # it got there


@pytest.fixture(scope="module")
def default_walk():
    return _operand_entries()


@pytest.fixture(scope="module")
def kernel_walk():
    # The fused kernel's route (a GPU's default; here in Pallas' interpreter).
    return _operand_entries(gemm_fused_kernel="on")


def test_kernel_walk_enters_each_module_above_the_numbers_once(kernel_walk):
    above = [m for _, m, _, _ in kernel_walk if not m.startswith("numerics/")]
    assert len(above) == len(set(above)), above
    assert "gemm/kernels/fused_kernel.py" in above
    assert walk.summary(kernel_walk)["operands"]["modules"] <= 8, kernel_walk


@pytest.mark.parametrize("which", ["inline", "default"])
def test_each_module_above_the_numbers_is_entered_once(which, inline_walk, default_walk):
    # One entry per module: the operands go down matmul -> k_loop -> datapath ->
    # datapath_blocks and do not come back to enter one again (checks: once, at
    # matmul's front door; the chain calls one function of datapath_blocks per
    # instruction, and this k step is one instruction).
    entries = inline_walk if which == "inline" else default_walk
    above = [m for _, m, _, _ in entries if not m.startswith("numerics/")]
    assert len(above) == len(set(above)), above
    # (where XLA runs the shared executables' host callback on a thread of its own, the
    # hook does not follow it: the default walk then ends at k_loop)
    seen = {"gemm/matmul.py", "checks.py"}
    if which == "inline":
        seen |= {"gemm/k_loop.py", "arithmetic/datapath.py", "arithmetic/datapath_blocks.py"}
    else:  # the default backend: XLA's k loop on a CPU, the fused kernel on a GPU
        gpu = jax.default_backend() == "gpu"
        seen.add("gemm/kernels/fused_kernel.py" if gpu else "gemm/k_loop.py")
    assert seen <= set(above), above


def test_number_layer_is_reached_from_the_conversion_and_the_arithmetic(default_walk):
    # The conversion is entered once per operand, from matmul; its helpers and the
    # arithmetic's (bit views, soft-float steps) from those two only: XLA's arithmetic,
    # or on a GPU the fused kernel's (its rounding is softfloat's).
    into = [(c, m) for c, m, _, _ in default_walk if m.startswith("numerics/")]
    assert [c for c, m in into if m == "numerics/convert.py"] == ["gemm/matmul.py"] * 2
    callers = {c for c, m in into if m != "numerics/convert.py"}
    assert callers <= {"numerics/convert.py", "arithmetic/datapath.py",
                       "arithmetic/datapath_blocks.py", "gemm/kernels/fused_kernel.py"}, callers


def test_default_walk_passes_at_most_8_modules(default_walk):
    s = walk.summary(default_walk)
    assert s["operands"]["modules"] <= 8, s["operands"]["entries"]


def test_walk_counts_entries():
    # The tool itself: a function calling into another module twice is two entries.
    s = walk.summary([(None, "a.py", "f", True), ("a.py", "b.py", "g", True),
                      ("a.py", "b.py", "g", False), ("b.py", "a.py", "h", True)])
    assert s["operands"] == {"modules": 2, "entries": {"a.py": 2, "b.py": 1},
                             "each_once": False}
    assert s["all"]["entries"] == {"a.py": 2, "b.py": 2}

