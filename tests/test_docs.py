"""The documentation runs: docstring examples (doctest), the README as written in a fresh
clone, the documentation site's build, and the version in one place."""

import ast
import contextlib
import doctest
import fnmatch
import importlib
import importlib.util
import io
import os
import pathlib
import pkgutil
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxwarp

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()

# --- Every docstring example of the package is a test. ----------------------------------


# The default run takes every third example (in the order found) but the longest ones
# (over a second each); -m slow runs the others.
_LONG_EXAMPLES = {
    "jaxwarp._src.emulate.api.emulate", "jaxwarp._src.arithmetic.datapath.mma",
    "jaxwarp._src.numerics.fp8_intrinsics.double_to_fp8", "jaxwarp._src.numerics.fma.fma64",
    "jaxwarp._src.gemm.matmul.matmul", "jaxwarp._src.instructions.wgmma.wgmma",
    "jaxwarp._src.numerics.fp8_intrinsics.bfloat16raw2_to_fp8x2",
    "jaxwarp._src.gemm.matmul.to_operand", "jaxwarp._src.numerics.fp8.cvt_f32_to_e5m2x2",
    "jaxwarp._src.scaling.mx.quantize", "jaxwarp._src.arithmetic.block_scale.from_golden",
    "jaxwarp._src.layouts.ldmatrix.ldmatrix",
    "jaxwarp._src.recipes.delayed.delayed_matmul",
    "jaxwarp._src.gemm.block_scale_gemm.matmul",
    # Over a second each (CPU time, one process, 2026-11-26).
    "jaxwarp._src.instructions.wgmma_sp.wgmma_sp", "jaxwarp._src.layouts.ldmatrix.stmatrix",
    "jaxwarp._src.instructions.sparse_marker.as_2_4",
    "jaxwarp._src.instructions.tcgen05.tcgen05_mma",
    "jaxwarp._src.instructions.mma_sp.mma_sp_logical",
    "jaxwarp._src.layouts.wgmma_registers.a_matrix", "jaxwarp._src.instructions.wmma.mma_sync",
    "jaxwarp._src.warp.lanes.syncwarp", "jaxwarp._src.warp.cg.thread_block_tile",
    "jaxwarp._src.instructions.wgmma.write_operand"}


def _docstring_examples():
    """(test id, DocTest) for every docstring with examples in every jaxwarp module."""
    finder = doctest.DocTestFinder(exclude_empty=True)
    found = []
    for info in pkgutil.walk_packages(jaxwarp.__path__, "jaxwarp."):
        if info.name.rsplit(".", 1)[-1] == "__main__":
            continue
        module = importlib.import_module(info.name)
        for test in finder.find(module, info.name):
            if test.examples:
                slow = len(found) % 3 or test.name in _LONG_EXAMPLES
                found.append(pytest.param(test, id=test.name,
                                          marks=pytest.mark.slow if slow else ()))
    return found


DOCTESTS = _docstring_examples()


def test_there_are_docstring_examples():
    assert len(DOCTESTS) >= 40, [p.id for p in DOCTESTS]


@pytest.mark.parametrize("test", DOCTESTS)
def test_docstring_example(test):
    # The names the docstrings use without importing them, as in a user's session.
    test.globs.update(jax=jax, jnp=jnp, np=np, jaxwarp=jaxwarp)
    runner = doctest.DocTestRunner(
        optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False)
    out = io.StringIO()
    result = runner.run(test, out=out.write)
    assert result.failed == 0, f"{test.name} ({test.filename}:{test.lineno}):\n{out.getvalue()}"


# --- The README, as a newcomer reads it. ------------------------------------------------


def test_readme_example_prints_what_the_readme_shows():
    code = re.search(r"## Example\s+```python\n(.*?)```", README, re.S).group(1)
    shown = re.search(r"## Example\s+```python\n.*?```\s+prints\s+```text\n(.*?)```", README,
                      re.S).group(1)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {})
    assert out.getvalue() == shown
    # Each print's trailing comment agrees with what it printed.
    comments = [c.strip() for c in re.findall(r"^print\(.*?\)\s*#\s*(.*)$", code, re.M)]
    printed = out.getvalue().splitlines()
    assert printed[0] == comments[0] and printed[1] == comments[1]


def _commands(text=README):
    """Every command line of a page's shell blocks, comments stripped."""
    lines = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.splitlines():
            line = line.split("  #")[0].strip()
            if line and not line.startswith("#"):
                lines.append(line)
    return lines


DOCS_PAGES = sorted((ROOT / "docs").rglob("*.md"))


def test_readme_commands_work_in_a_fresh_clone():
    """Files and folders a command of the README or of a docs page names exist in the
    repository (nothing from outside the clone, such as ../shared); modules it runs can be
    imported."""
    commands = _commands()
    assert "python experiments/matmul_error.py" in commands
    assert "python -m pytest -n auto" in commands
    assert "python -m pytest -n auto -m slow" in commands
    for page in DOCS_PAGES:
        commands += _commands(page.read_text())
    assert "mkdocs build --strict" in commands  # the docs pages' commands are read too
    for cmd in commands:
        words = cmd.split()
        assert not any(w.startswith("..") for w in words), cmd
        if words[:2] == ["python", "-m"] and words[2] not in ("pip", "venv"):
            assert importlib.util.find_spec(words[2]) is not None, cmd
        for w in words:
            w = w.strip("\"'")
            if w.startswith((".venv", "-", ".[", "$")) or "DIR" in w or "=" in w:
                continue
            if any(ch in w for ch in "*?["):
                assert list(ROOT.glob(w)), (cmd, w)
            elif w.endswith((".py", ".npz", ".md", ".yml")):
                assert (ROOT / w).is_file(), (cmd, w)


# --- Code blocks of the docs pages. -------------------------------------------------------

# Every Python block of a docs page runs as written. A block whose first line imports is a
# whole program; any other block continues the page's story: it runs after the blocks
# before it, back to the last whole program. A block preceded by a line
# ``<!-- runs on an H100 or H200 only: why -->`` runs only where JAX has a GPU.
_BLOCK = re.compile(r"(?:<!-- runs on an H100 or H200 only: (.*?) -->\n)?```python\n(.*?)```",
                    re.S)


def _page_blocks(page):
    """(i, code to run, GPU-only reason or None) for every Python block of a page."""
    out, story = [], []
    for i, m in enumerate(_BLOCK.finditer(page.read_text())):
        gpu, code = m.group(1), m.group(2)
        if code.lstrip().startswith(("import ", "from ")):
            story = []
        story.append(code)
        out.append((i, "\n".join(story), gpu))
    return out


_BLOCKS = [(page, i, code, gpu) for page in DOCS_PAGES for i, code, gpu in _page_blocks(page)]
_PROGRAMS = [(page, i, code) for page, i, code, _ in _BLOCKS]


def test_docs_pages_have_whole_programs():
    pages = {page.name for page, _, _ in _PROGRAMS}
    assert {"config.md", "divergence.md", "sparse.md", "microscaling.md",
            "cooperative_groups.md", "scale_out.md"} <= pages, pages


def test_a_story_block_runs_after_its_page_program(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("```python\nimport math\nx = 1\n```\ntext\n```python\nprint(x)\n```\n"
                    "<!-- runs on an H100 or H200 only: native -->\n```python\nimport os\n```\n")
    assert _page_blocks(page) == [(0, "import math\nx = 1\n", None),
                                  (1, "import math\nx = 1\n\nprint(x)\n", None),
                                  (2, "import os\n", "native")]


def _has_gpu():
    import jax  # noqa: PLC0415
    return any(d.platform == "gpu" for d in jax.devices())


@pytest.mark.parametrize("page, i, code, gpu", [
    pytest.param(page, i, code, gpu, id=f"{page.name}:{i}",
                 marks=() if page.name == "config.md" else pytest.mark.slow)
    for page, i, code, gpu in _BLOCKS])
def test_docs_program_runs(page, i, code, gpu, tmp_path):
    if gpu and not _has_gpu():
        pytest.skip(f"{page.name}, Python block {i} runs on an H100 or H200 only ({gpu})")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    if not gpu:
        env["JAX_PLATFORMS"] = "cpu"
    res = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, timeout=600, env=env)
    assert res.returncode == 0, f"{page.name}, Python block {i}:\n{res.stderr[-3000:]}"
    # Each print's trailing comment, where it has one, is what it printed.
    shown = [c.strip() for c in re.findall(r"^print\(.*\)\s*#\s*(.*)$", code, re.M)]
    if shown and len(shown) == len(res.stdout.splitlines()):
        assert res.stdout.splitlines() == shown


# --- The switchboard's page lists every option as the code has it. -------------------------


def test_config_page_is_the_options():
    text = (ROOT / "docs" / "config.md").read_text()
    table = text.split("| option | default | allowed | layer | what it chooses |", 1)[1]
    rows = [[c.strip() for c in line.strip().strip("|").split("|")]
            for line in table.strip().splitlines()[1:] if line.startswith("|")]
    code = [[c.strip() for c in line.strip().strip("|").split("|")]
            for line in jaxwarp.config.describe().splitlines()[2:]]
    # The page's table is the code's, help texts included (one home: the Options in
    # jaxwarp/_src/config.py; jaxwarp.config.describe() prints the table to paste).
    assert rows == code, "paste jaxwarp.config.describe() into docs/config.md"
    assert all(r[4] for r in rows)


def test_readme_example_says_the_lane_axis_leads():
    code = re.search(r"## Example\s+```python\n(.*?)```", README, re.S).group(1)
    assert "lanes last" not in code and "leading" in code


# --- Capture format: in the repository, and nothing points outside it. -------------------


def test_capture_format_is_in_the_repository():
    text = (ROOT / "docs" / "capture_format.md").read_text()
    for key in ("shfl_cfg", "reduce_cfg", "vote_out", "dpx_out", "cvt_out", "K/kind",
                "layout.npz", "wgmma", "FORMAT_EXTRA.md"):
        assert key in text, key


def test_no_message_points_at_the_shared_format_file():
    """Help texts, errors and docs point at docs/capture_format.md, which a clone has."""
    offenders = []
    for folder in ("jaxwarp", "tools", "tests", "experiments", "docs", "benchmarks"):
        for path in (ROOT / folder).rglob("*"):
            if path.suffix in (".py", ".md", ".cu", ".sh") and path != pathlib.Path(__file__):
                for i, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                    if "shared/hw/FORMAT.md" in line:
                        offenders.append(f"{path.relative_to(ROOT)}:{i}")
    for name in ("README.md", "CHANGELOG.md"):
        if "shared/hw/FORMAT.md" in (ROOT / name).read_text():
            offenders.append(name)
    assert not offenders, offenders


# --- Every repository path that the docs and docstrings name exists. ---------------------

# A path starts with a top-level folder of the repository, not preceded by anything that makes
# it part of a longer path or a URL (`../shared/...`, `https://.../docs/...`). It may hold
# glob characters (`*`, `?`, `[23]`) and brace forms: `{a,b}` lists alternatives, `{name}`
# stands for any text (a format placeholder).
_PATH = re.compile(r"(?<![\w./~$:@-])((?:jaxwarp|tools|benchmarks|experiments|tests|docs|\.ci)"
                   r"/(?:[\w.*?{},/-]|\[[\w-]+\])*(?:[\w*}]|\[[\w-]+\]))")


def _docstrings(path):
    """The module's, classes' and functions' docstrings of a Python file."""
    tree = ast.parse(path.read_text())
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    return [d for node in ast.walk(tree) if isinstance(node, kinds)
            if (d := ast.get_docstring(node, clean=False))]


def _named_paths():
    """{path as written: [where it is named]} over the Markdown files (README.md, docs/, the
    READMEs and format files of the other folders; not CHANGELOG.md or the dated records,
    which are history) and
    the docstrings of jaxwarp/, tools/, benchmarks/ and experiments/."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    for folder in ("tools", "benchmarks", "experiments"):
        # Not the dated records of benchmarks/results/ (history, like CHANGELOG.md).
        pages += sorted(p for p in (ROOT / folder).rglob("*.md") if "out" not in p.parts
                        and not re.search(r"_\d{4}-\d\d-\d\d", p.name))
    texts = [(p.relative_to(ROOT).as_posix(), p.read_text()) for p in pages]
    for folder in ("jaxwarp", "tools", "benchmarks", "experiments"):
        for p in sorted((ROOT / folder).rglob("*.py")):
            texts += [(p.relative_to(ROOT).as_posix(), d) for d in _docstrings(p)]
    named = {}
    for where, text in texts:
        for m in _PATH.finditer(text):
            named.setdefault(m.group(1), []).append(where)
    return named


def _expand_braces(pattern):
    """`a{b,c}d` -> [abd, acd]; `a{name}d` -> [a*d]."""
    m = re.search(r"\{([^{}]*)\}", pattern)
    if not m:
        return [pattern]
    options = m.group(1).split(",") if "," in m.group(1) else ["*"]
    return [q for o in options
            for q in _expand_braces(pattern[:m.start()] + o + pattern[m.end():])]


def _generated(path):
    """Paths that programs write (the anchored entries of .gitignore): not in a clone."""
    for line in (ROOT / ".gitignore").read_text().splitlines():
        if "/" in line.strip().rstrip("/"):  # anchored: a path, not a name anywhere
            entry = line.strip().strip("/")
            if fnmatch.fnmatch(path, entry) or fnmatch.fnmatch(path, entry + "/*"):
                return True
    return False


def test_path_pattern_finds_what_it_should():
    text = ("see `tests/data/h100_{ptx,chain}_sample.npz` and benchmarks/x.py, docs/y.md. "
            "../shared/hw/h100/a.npz https://github.com/o/r/tree/main/docs/z.md "
            "benchmarks/results/h100_2026-11-2[23].json tools/capture/FORMAT_*.md.")
    assert _PATH.findall(text) == ["tests/data/h100_{ptx,chain}_sample.npz", "benchmarks/x.py",
                                   "docs/y.md", "benchmarks/results/h100_2026-11-2[23].json",
                                   "tools/capture/FORMAT_*.md"]
    assert _expand_braces("a/{b,c}_{name}.npz") == ["a/b_*.npz", "a/c_*.npz"]
    assert _generated("experiments/out/matmul_error.csv") and not _generated("experiments/x.py")


def test_every_named_repository_path_exists():
    named = _named_paths()
    assert len(named) > 40, named  # the pattern still finds the references
    missing = []
    for path, where in sorted(named.items()):
        if _generated(path):
            continue
        for alternative in _expand_braces(path):
            if not (list(ROOT.glob(alternative)) if re.search(r"[*?\[]", alternative)
                    else (ROOT / alternative).exists()):
                missing.append(f"{alternative} (named in {', '.join(sorted(set(where)))})")
    assert not missing, "\n".join(missing)


# --- The documentation site. ------------------------------------------------------------


def _api_pages():
    return "\n".join(p.read_text() for p in sorted((ROOT / "docs" / "api").glob("*.md")))


def test_every_public_name_has_an_api_entry():
    pages = _api_pages()
    documented = set(re.findall(r"^::: jaxwarp\.(\w+)", pages, re.M))
    documented |= set(re.findall(r"`jaxwarp\.(\w+)\s*=", pages))  # constants, in prose
    public = {n for n in dir(jaxwarp) if not n.startswith("_")}
    assert public - documented == set(), "add them to docs/api/*.md"
    assert documented - public == set(), "docs/api names that jaxwarp does not export"


def test_api_pages_use_public_names_only():
    assert "_src" not in _api_pages()


def test_every_docs_page_is_in_the_navigation():
    nav = (ROOT / "mkdocs.yml").read_text()
    for page in (ROOT / "docs").rglob("*.md"):
        rel = page.relative_to(ROOT / "docs").as_posix()
        if rel != "architecture.md":  # the lead's page; mkdocs warns until it is listed
            assert rel in nav, rel


# The build runs `python -m mkdocs` with the theme and plugins of the `docs` extra.
_DOCS_MISSING = [m for m in ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers")
                 if importlib.util.find_spec(m) is None]


@pytest.mark.skipif(bool(_DOCS_MISSING),
                    reason=f"documentation build not run: {', '.join(_DOCS_MISSING)} not "
                           "installed; to run it: python -m pip install -e '.[docs]'")
def test_docs_build_strict(tmp_path):
    site = tmp_path / "site"
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    res = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q",
                          "-d", str(site)], cwd=ROOT, capture_output=True, text=True,
                         timeout=600, env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    warp = (site / "api" / "warp" / "index.html").read_text()
    assert "jaxwarp.shfl_sync" in warp and "for one warp" in warp  # built docstrings too
    assert "0:0" in (site / "lane_maps" / "index.html").read_text()
    assert "block fused" in (site / "arithmetic" / "index.html").read_text()
    assert (site / "results" / "matmul_error.png").is_file()
    assert "shfl_cfg" in (site / "capture_format" / "index.html").read_text()
    support = (site / "support" / "index.html").read_text()
    assert "m16n16k16" in support and "Known differences from hardware" in support
    assert "gemm_fused_kernel" in (site / "config" / "index.html").read_text()


# --- Packaging. -------------------------------------------------------------------------


def test_version_has_one_source():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["hatch"]["version"]["path"] == "jaxwarp/__init__.py"
    assert re.fullmatch(r"\d+\.\d+\.\d+([a-z]+\d+)?", jaxwarp.__version__)
    assert f"## {jaxwarp.__version__}" in (ROOT / "CHANGELOG.md").read_text()


def test_changelog_has_unreleased_then_the_release_summary():
    text = (ROOT / "CHANGELOG.md").read_text()
    releases = re.findall(r"^## (.+)$", text, re.M)
    assert releases[0] == "Unreleased" and releases[1].startswith(jaxwarp.__version__ + " ")
    section = text.split(f"## {releases[1]}", 1)[1].split(f"## {releases[2]}", 1)[0]
    areas = re.findall(r"^### (.+)$", section, re.M)
    assert areas[-1] == "Details" and len(areas) >= 6, areas


def test_package_is_typed():
    assert (ROOT / "jaxwarp" / "py.typed").is_file()


def test_benchmark_records_one_per_benchmark_and_device():
    # benchmarks/results/INDEX.md's scheme: {device}_{benchmark}.{ext}, one record per
    # benchmark and device (a plot beside it), each listed in the index.
    import re

    root = pathlib.Path(__file__).resolve().parents[1] / "benchmarks"
    index = (root / "results" / "INDEX.md").read_text()
    tools = {"conformance", "pytest_gpu", "ncu", "mmasim", "capture_tools",
             "emulated_training"}
    scripts = {p.stem for p in root.glob("*.py") if not p.stem.startswith("_")}
    seen = {}
    for f in sorted((root / "results").iterdir()):
        if f.name == "INDEX.md":
            continue
        m = re.fullmatch(r"(cpu|h100|h100x4|h200)_([a-z0-9_]+)\.(json|txt|md|csv|png)", f.name)
        assert m, f"{f.name}: not {{device}}_{{benchmark}}.{{ext}}"
        assert m[2] in scripts | tools, f"{f.name}: {m[2]!r} is no benchmark or tool"
        if m[3] != "png":
            assert (m[1], m[2]) not in seen, f"{f.name} and {seen[(m[1], m[2])]}"
            seen[(m[1], m[2])] = f.name
        assert f"[{f.name}]" in index, f"{f.name} is not in INDEX.md"
