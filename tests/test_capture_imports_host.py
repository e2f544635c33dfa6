"""tools/capture and tools/crosscheck on the host: the scripts import one another without a
cycle (what two scripts share lives in a third, as sp_common.py for mma.sp and wgmma.sp), and
no tool reaches into jaxwarp's private modules."""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
CAPTURE = ROOT / "tools" / "capture"


def _imports(path: pathlib.Path) -> set[str]:
    """Top-level module names a script imports (function-level imports included)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


def test_capture_scripts_import_without_a_cycle():
    scripts = {p.stem: p for p in CAPTURE.glob("*.py")}
    graph = {s: _imports(p) & set(scripts) for s, p in scripts.items()}
    assert graph["capture_wgsp"] >= {"sp_common"} and "capture_sp" not in graph["capture_wgsp"]

    def visit(node, stack):
        if node in stack:
            pytest.fail(f"import cycle: {' -> '.join(stack[stack.index(node):] + [node])}")
        for nxt in sorted(graph[node]):
            visit(nxt, stack + [node])

    for s in sorted(graph):
        visit(s, [])


@pytest.mark.parametrize("path", sorted((ROOT / "tools").rglob("*.py")),
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_tools_use_only_public_names(path):
    text = path.read_text()
    assert "jaxwarp._src" not in text, f"{path.relative_to(ROOT)} imports jaxwarp._src"
