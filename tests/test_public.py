"""The public surface as ``help()`` and ``pydoc`` show it: every public module states its
names in ``__all__`` (re-exported functions are otherwise hidden by pydoc, which lists only
what a module defines itself), and the docstrings a user reaches through those names point
only at public code and pages."""

import ast
import importlib
import inspect
import pathlib
import pydoc
import re
import types

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


# --- Public docstrings name no private code. ----------------------------------------------
# A user reads these docstrings through help() and the docs site, where neither the private
# modules (jaxwarp._src...) nor their module docstrings appear: a docstring states what it
# needs itself, or names a public function or a docs page.

_PRIVATE_REFERENCE = re.compile(
    r"jaxwarp\._src\b|\bmodule(?:'s)? docstring|\bthis module's\b", re.IGNORECASE)


def _documented(name: str, obj) -> list[tuple[str, object]]:
    """``obj`` and, for a class (or an instance of a jaxwarp class), its public methods and
    properties, its jaxwarp base classes' included."""
    if not inspect.isclass(obj) and not callable(obj):
        obj = type(obj)
        if not obj.__module__.startswith("jaxwarp"):
            return []
    found = [(name, obj)]
    if inspect.isclass(obj):
        for cls in obj.__mro__:
            if not cls.__module__.startswith("jaxwarp"):
                continue
            for k, v in vars(cls).items():
                if isinstance(v, (staticmethod, classmethod)):
                    v = v.__func__
                if not k.startswith("_") and (callable(v) or isinstance(v, property)):
                    found.append((f"{name}.{k}", v))
    return found


def _public_docstrings(modules) -> dict[str, str]:
    """Qualified name -> docstring, whitespace folded to single spaces (so a phrase broken
    over two lines is one), of every function, class, method and property that a name in
    the modules' ``__all__`` reaches."""
    out, seen = {}, set()
    for module in modules:
        for n in module.__all__:
            obj = getattr(module, n)
            if inspect.ismodule(obj) or id(obj) in seen:
                continue
            seen.add(id(obj))
            for name, x in _documented(f"{module.__name__}.{n}", obj):
                out.setdefault(name, " ".join((x.__doc__ or "").split()))
    return out


def _private_references(docs: dict[str, str]) -> list[str]:
    return [f"{name}: ...{doc[max(0, m.start() - 50):m.end() + 30]}..."
            for name, doc in docs.items() for m in _PRIVATE_REFERENCE.finditer(doc)]


PUBLIC_MODULES = [jaxwarp, *(importlib.import_module(f"jaxwarp.{n}") for n in PUBLIC)]


def test_public_docstrings_name_no_private_code():
    docs = _public_docstrings(PUBLIC_MODULES)
    # The scan reaches functions, jitted and wrapped ones, classes, methods and properties.
    for name in ["jaxwarp.emulate", "jaxwarp.mma", "jaxwarp.fused_dot", "jaxwarp.shfl_sync",
                 "jaxwarp.mx.MXFormat.element_format", "jaxwarp.fp8.DelayedScaling.update",
                 "jaxwarp.backends.native_chain", "jaxwarp.cg.reduce"]:
        assert name in docs, name
    bad = _private_references(docs)
    assert not bad, ("public docstrings that send the reader to private code (state the "
                     "fact, or name a public function or a docs/*.md page):\n"
                     + "\n".join(bad))


def test_the_scan_finds_private_references():
    # The check above can fail: each kind of reference, planted in a public-looking module.
    class Thing:
        """A thing."""

        def method(self):
            """Rounds as ``jaxwarp._src.numerics.convert.round_to`` does."""

        @property
        def prop(self):
            """The :class:`~jaxwarp._src.numerics.formats.Format`."""

    def doctest_import():
        """Example:
        >>> from jaxwarp._src.layouts.smem import make_smem_descriptor
        """

    def wrapped_phrase():
        """The k order (see the module
        docstring)."""

    def clean():
        """Names :func:`jaxwarp.round_to` and docs/arithmetic.md only."""

    Thing.__module__ = "jaxwarp.planted"
    fake = types.ModuleType("jaxwarp.planted")
    fake.__all__ = ["Thing", "doctest_import", "wrapped_phrase", "clean"]
    fake.Thing, fake.doctest_import, fake.wrapped_phrase, fake.clean = (
        Thing, doctest_import, wrapped_phrase, clean)
    bad = _private_references(_public_docstrings([fake]))
    assert [b.split(":")[0] for b in bad] == [
        "jaxwarp.planted.Thing.method", "jaxwarp.planted.Thing.prop",
        "jaxwarp.planted.doctest_import", "jaxwarp.planted.wrapped_phrase"], bad
