"""The README is a front door: its commands exist, its example runs, it stays short, and
every docs page it links to exists and covers the area it names."""

import contextlib
import io
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


# Slow: tests/test_docs.py runs the same example by default and checks all it prints.
@pytest.mark.slow
def test_example_runs_and_prints_what_the_comments_say():
    code = re.search(r"## Example\s+```python\n(.*?)```", README, re.S).group(1)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {})
    assert out.getvalue().split("\n")[:2] == ["[ 496 1520 2544 3568]", "64.0"]


def test_the_two_commands_point_at_real_files():
    block = re.search(r"## The two commands\s+```bash\n(.*?)```", README, re.S).group(1)
    main_job, tests = [line.split("#")[0].split() for line in block.strip().splitlines()]
    assert main_job == ["python", "experiments/matmul_error.py"]
    assert (ROOT / main_job[1]).is_file()
    assert tests == ["python", "-m", "pytest", "-n", "auto"]
    assert "python -m pytest -n auto -m slow" in README


def test_readme_is_a_front_door():
    """Short, in the order a newcomer reads it; long tables live in docs pages."""
    assert len(README.splitlines()) <= 160
    headings = re.findall(r"^## (.+)$", README, re.M)
    assert headings == ["Install", "The two commands", "Example", "What is modelled",
                        "Known differences from hardware", "More"]
    for line in README.splitlines():
        assert len(line) <= 400 or line.startswith("| "), line[:80]
    tables = re.findall(r"(?:^\|.*\n)+", README, re.M)
    assert len(tables) == 1 and len(tables[0].splitlines()) <= 16  # the feature table only


# One row per area, each linking to the docs page that covers it.
AREAS = ("warp primitives", "number formats", "WMMA", "`mma.sync`", "`wgmma`", "sparse",
         "`tcgen05`", "microscaling", "emulate", "conformance", "native mode", "switchboard")


def _feature_rows():
    table = re.search(r"## What is modelled\s+((?:\|.*\n)+)", README).group(1)
    return [[c.strip() for c in line.strip().strip("|").split("|")]
            for line in table.splitlines()[2:]]


def test_feature_table_has_one_row_per_area_with_links_that_exist():
    rows = _feature_rows()
    for area in AREAS:
        assert sum(area in row[0] for row in rows) == 1, area
    for area, _, docs in rows:
        links = re.findall(r"\]\(([^)]+)\)", docs)
        assert links, area
        for link in links:
            path, _, anchor = link.partition("#")
            page = ROOT / path
            assert page.is_file(), (area, link)
            if anchor:  # the page has a heading that makes this anchor
                slugs = {re.sub(r"[^\w\- ]", "", h).strip().lower().replace(" ", "-")
                         for h in re.findall(r"^#+ (.+)$", page.read_text(), re.M)}
                assert anchor in slugs, (area, link)


def test_readme_links_to_architecture_and_changelog():
    assert "(docs/architecture.md)" in README and "(CHANGELOG.md)" in README
    assert "(docs/support.md#known-differences-from-hardware)" in README
