"""The package's import graph has no cycle, function-level imports included.

grimp reads every ``import`` statement of every module (inside functions too) without
running them; a cycle is a strongly connected set of modules. The failure message names
each cycle and the lines that make it, so it says which files to restructure.
"""

from __future__ import annotations

import grimp
import pytest

PACKAGE = "jaxwarp"


@pytest.fixture(scope="module")
def graph():
    return grimp.build_graph(PACKAGE)


def _strongly_connected(graph) -> list[list[str]]:
    """Tarjan's algorithm over the direct imports: the components of two or more
    modules, and single modules that import themselves."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0

    def edges(m: str) -> list[str]:
        return sorted(graph.find_modules_directly_imported_by(m))

    for root in sorted(graph.modules):
        if root in index:
            continue
        # Iterative depth-first search: (module, iterator over its imports).
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        work = [(root, iter(edges(root)))]
        while work:
            node, it = work[-1]
            for nxt in it:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(edges(nxt))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        m = stack.pop()
                        on_stack.discard(m)
                        comp.append(m)
                        if m == node:
                            break
                    if len(comp) > 1 or node in edges(node):
                        out.append(sorted(comp))
    return sorted(out)


def _describe(graph, comp: list[str]) -> str:
    """One cycle through the component's first module, with the lines of each import."""
    start = comp[0]
    members = set(comp)
    cycle = None
    for nxt in sorted(graph.find_modules_directly_imported_by(start) & members):
        chain = graph.find_shortest_chain(importer=nxt, imported=start)
        if chain is not None:
            cycle = (start, *chain)
            break
    lines = [f"  cycle among {len(comp)} module(s): {', '.join(comp)}"]
    for a, b in zip(cycle[:-1], cycle[1:], strict=True):
        details = graph.get_import_details(importer=a, imported=b)
        where = "; ".join(f"line {d['line_number']}: {d['line_contents']}" for d in details)
        lines.append(f"    {a} -> {b} ({where})")
    return "\n".join(lines)


def test_graph_sees_the_package(graph):
    # A sanity check of the tool: the layers are there, and a known import is seen.
    assert {"jaxwarp._src.numerics.formats", "jaxwarp._src.numerics.softfloat",
            "jaxwarp._src.layouts.fragments", "jaxwarp._src.instructions.wmma"} <= graph.modules
    assert graph.direct_import_exists(importer="jaxwarp._src.numerics.softfloat",
                                      imported="jaxwarp._src.numerics.formats")


def test_cycle_finder_finds_a_function_level_cycle():
    # The finder on a small graph with a cycle closed by a function-level import.
    g = grimp.ImportGraph()
    for m in ("p", "p.a", "p.b", "p.c"):
        g.add_module(m)
    g.add_import(importer="p.a", imported="p.b", line_number=1, line_contents="import p.b")
    g.add_import(importer="p.b", imported="p.a", line_number=9,
                 line_contents="from p.a import f  # in a function")
    g.add_import(importer="p.c", imported="p.a", line_number=1, line_contents="import p.a")
    comps = _strongly_connected(g)
    assert comps == [["p.a", "p.b"]]
    assert "line 9: from p.a import f" in _describe(g, comps[0])


def test_no_import_cycles(graph):
    comps = _strongly_connected(graph)
    if comps:
        report = "\n".join(_describe(graph, c) for c in comps)
        pytest.fail(f"{len(comps)} import cycle(s) in {PACKAGE}:\n{report}", pytrace=False)


from layers import LAYERS  # noqa: E402  (tests/ is on the path: pyproject's pythonpath)

SRC = "jaxwarp._src"


def _layer_of(module: str) -> int | None:
    if module == SRC or not module.startswith(SRC + "."):
        return None
    top = module[len(SRC) + 1:].split(".")[0]
    for i, names in enumerate(LAYERS):
        if top in names:
            return i
    raise AssertionError(f"{module} is in no layer of LAYERS: add its folder to the order")


def test_every_private_module_has_a_layer(graph):
    for m in sorted(graph.modules):
        _layer_of(m)  # raises for a module of no layer


def test_layers_import_only_downwards(graph):
    bad = []
    for m in sorted(graph.modules):
        lm = _layer_of(m)
        if lm is None:
            continue
        for imported in sorted(graph.find_modules_directly_imported_by(m)):
            if not imported.startswith(PACKAGE):
                continue
            li = _layer_of(imported)
            if li is None:
                # The public face (jaxwarp, jaxwarp.mx, ...) is above every private layer.
                bad.append(f"{m} -> {imported} (private code imports the public face)")
            elif li > lm:
                bad.append(f"{m} ({LAYERS[lm][0]}) -> {imported} ({LAYERS[li][0]})")
    if bad:
        pytest.fail("imports that go up the layer order:\n" + "\n".join(bad), pytrace=False)


def test_layer_check_sees_an_upward_import():
    # The check itself on a known bad edge: arithmetic importing gemm is refused.
    assert _layer_of("jaxwarp._src.arithmetic.datapath") < _layer_of("jaxwarp._src.gemm.matmul")
    with pytest.raises(AssertionError, match="no layer"):
        _layer_of("jaxwarp._src.nowhere.mod")


def test_folders_are_small(graph):
    # No folder of jaxwarp._src holds more than 12 modules directly (its __init__ included),
    # and no module is over 700 lines: modules a reader can take in one sitting.
    import pathlib

    root = pathlib.Path(__import__(SRC, fromlist=["_"]).__file__).parent
    for folder in [root, *[p for p in root.rglob("*") if p.is_dir() and p.name != "__pycache__"]]:
        mods = sorted(folder.glob("*.py"))
        assert len(mods) <= 12, (str(folder), len(mods))
        for f in mods:
            n = len(f.read_text().splitlines())
            assert n <= 700, (str(f), n)
