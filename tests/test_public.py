"""The public surface as ``help()`` and ``pydoc`` show it: every public module states its
names in ``__all__`` (re-exported functions are otherwise hidden by pydoc, which lists only
what a module defines itself)."""

import ast
import importlib
import pathlib
import pydoc

import pytest

import jaxwarp

ROOT = pathlib.Path(jaxwarp.__file__).parent
PUBLIC = sorted(p.stem for p in ROOT.glob("*.py") if not p.stem.startswith("_"))


def _reexports(path: pathlib.Path) -> set[str]:
    """The names a public module binds at its top level (``import x as x``, assignments)."""
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update(a.asname or a.name.split(".")[0] for a in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return {n for n in names if not n.startswith("_") and n != "annotations"}


@pytest.mark.parametrize("name", ["__init__", *PUBLIC])
def test_all_lists_every_public_name(name):
    module = jaxwarp if name == "__init__" else importlib.import_module(f"jaxwarp.{name}")
    assert hasattr(module, "__all__"), f"jaxwarp.{name} has no __all__"
    source = ROOT / f"{name}.py"
    if "__all__ = [" not in source.read_text():  # the re-export modules: all their names
        assert set(module.__all__) == _reexports(source) - {"__all__"}
    for n in module.__all__:
        assert hasattr(module, n), n


@pytest.mark.parametrize("name,functions", [
    ("jaxwarp", ["emulate", "matmul", "mma", "shfl_sync", "wgmma"]),
    ("jaxwarp.mx", ["quantize", "dequantize", "matmul"]),
    ("jaxwarp.cg", ["reduce", "inclusive_scan", "coalesced_threads"]),
    ("jaxwarp.sparse", ["prune_2_4", "compress_2_4", "as_2_4"]),
])
def test_help_lists_the_functions(name, functions):
    text = pydoc.render_doc(importlib.import_module(name), renderer=pydoc.plaintext)
    for f in functions:
        assert f"\n    {f}(" in text, f"help({name}) does not list {f}"


def test_help_would_fail_without_all(monkeypatch):
    # The check above can fail: pydoc hides re-exported functions of a module without
    # __all__ (the state before it was added).
    monkeypatch.delattr(jaxwarp.sparse, "__all__")
    text = pydoc.render_doc(jaxwarp.sparse, renderer=pydoc.plaintext)
    assert "\n    prune_2_4(" not in text
