"""MkDocs hooks: fill in the generated pages of the documentation site.

``mkdocs build --strict`` (see ``mkdocs.yml``) loads this file. Pages under ``docs/``
that contain a marker line ``<!-- generated: NAME -->`` get that marker replaced by
text made at build time from the code or from a file of the repository, so the site
cannot drift from what it describes:

* ``readme``: README.md (the home page), its links to repository files rewritten;
* ``lane_maps``: every WMMA fragment layout drawn by ``jaxwarp.lane_map_text``, for
  every fragment type in ``jaxwarp.wmma_table.TABLE``;
* ``arithmetic``: the module docstring of the tensor-core arithmetic model (found
  through the public ``jaxwarp.mma``, wherever the code behind it lives);
* ``results``: ``experiments/RESULTS.md``, with its plots copied into the site;
* ``capture_extra``: the capture tool's ``tools/capture/FORMAT_*.md``;
* ``instructions``: the instruction catalogue, ``jaxwarp.isa.support_table()``;
* ``changelog``: CHANGELOG.md.

Only public names of ``jaxwarp`` are used here.
"""

from __future__ import annotations

import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
MARKER = re.compile(r"<!-- generated: (\w+) -->")

# Repository files that have a page on the site: links to them become links to it.
SITE_PAGES = {
    "README.md": "index.md",
    "CHANGELOG.md": "changelog.md",
    "experiments/RESULTS.md": "results.md",
    "docs/capture_format.md": "capture_format.md",
    "docs/lane_maps.md": "lane_maps.md",
    "docs/arithmetic.md": "arithmetic.md",
    "docs/extending.md": "extending.md",
}
# Folders of plots that RESULTS.md shows, copied into the site under the same paths.
RESULT_IMAGES = ROOT / "experiments" / "results"


def _rst_to_md(text: str) -> str:
    """The few reStructuredText idioms of our docstrings, as Markdown."""
    text = re.sub(r":(?:data|func|class|mod|attr|meth):`~?([^`]+)`", r"`\1`", text)
    return re.sub(r"``([^`]+)``", r"`\1`", text)


def _relink(md: str, base: str) -> str:
    """Rewrites relative links of a Markdown file that lives at ``base`` (a repository
    folder, "" for the root) so they work on the site: a file with a page links to the
    page; any other repository path becomes plain code text (it is in the repository,
    not on the site). Images and absolute URLs are left alone."""

    def fix(m: re.Match) -> str:
        bang, label, target = m.group(1), m.group(2), m.group(3)
        if bang or re.match(r"[a-z]+:|#", target):
            return m.group(0)
        path, _, anchor = target.partition("#")
        repo_path = str(pathlib.PurePosixPath(base, path)) if base else path
        repo_path = re.sub(r"(^|/)\./", r"\1", repo_path).rstrip("/")
        page = SITE_PAGES.get(repo_path)
        if page is None and repo_path.startswith("docs/") and repo_path.endswith(".md") \
                and (ROOT / repo_path).is_file():
            page = repo_path[len("docs/"):]  # every docs page is a page of the site
        if page is not None:
            return f"[{label}]({page}{'#' + anchor if anchor else ''})"
        label = label if label.startswith("`") else f"`{label}`"
        return f"{label} (in the repository: `{repo_path}`)" if label.strip("`") != repo_path \
            else label

    return re.sub(r"(!?)\[([^\]]*)\]\(([^)\s]+)\)", fix, md)


def _readme() -> str:
    text = (ROOT / "README.md").read_text()
    return _relink(text, "")


def _changelog() -> str:
    return _relink((ROOT / "CHANGELOG.md").read_text(), "")


def _results() -> str:
    text = (ROOT / "experiments" / "RESULTS.md").read_text()
    return _relink(text, "experiments")


def _capture_extra() -> str:
    parts = []
    for path in sorted((ROOT / "tools" / "capture").glob("FORMAT_*.md")):
        text = _relink(path.read_text(), "tools/capture")
        # Their headings move down one level under this page's title.
        text = re.sub(r"^(#+) ", r"#\1 ", text, flags=re.M)
        parts.append(f"Source: `tools/capture/{path.name}`.\n\n{text}")
    return "\n\n".join(parts)


def _arithmetic() -> str:
    import jaxwarp

    doc = sys.modules[jaxwarp.mma.__wrapped__.__module__].__doc__ or ""
    return _rst_to_md(doc.strip())


def _instructions() -> str:
    import jaxwarp

    return jaxwarp.isa.support_table()


def _lane_maps() -> str:
    import jaxwarp

    drawings: dict[str, list[tuple]] = {}
    for entry in jaxwarp.wmma_table.TABLE:
        for m, n, k in entry.shapes:
            acc_types = sorted({t for cd in entry.cd_types for t in cd})
            for use, types in (("matrix_a", [entry.operand_format]), ("matrix_b",
                                                                      [entry.operand_format]),
                               ("accumulator", acc_types)):
                for t in types:
                    text = jaxwarp.lane_map_text(use, m, n, k, t)
                    users = drawings.setdefault(text, [])
                    if (use, m, n, k, t) not in users:
                        users.append((use, m, n, k, t))
    parts = []
    for text, users in drawings.items():
        use, m, n, k, t = users[0]
        rows, cols = (k, n) if use == "matrix_b" else (m, k) if use == "matrix_a" else (m, n)
        title = f"{use}, m{m}n{n}k{k}, {t}"
        same = ", ".join(f"{u} m{mm}n{nn}k{kk} {tt}" for u, mm, nn, kk, tt in users[1:])
        parts.append(
            f"### {title}\n\n"
            + (f"Same map: {same}.\n\n" if same else "")
            + f"`jaxwarp.lane_map_text(\"{use}\", {m}, {n}, {k}, \"{t}\")`: "
            f"{rows} rows x {cols} columns.\n\n```text\n{text}\n```\n")
    return "\n".join(parts)


GENERATORS = {
    "readme": _readme,
    "changelog": _changelog,
    "results": _results,
    "arithmetic": _arithmetic,
    "capture_extra": _capture_extra,
    "lane_maps": _lane_maps,
    "instructions": _instructions,
}


def _in_nav(nav, page: str) -> bool:
    if isinstance(nav, str):
        return nav == page
    if isinstance(nav, dict):
        return any(_in_nav(v, page) for v in nav.values())
    if isinstance(nav, list):
        return any(_in_nav(v, page) for v in nav)
    return False


def on_config(config, **kwargs):
    """``docs/architecture.md`` (the lead's page, written separately) goes after the home
    page when it exists and ``mkdocs.yml`` does not list it yet."""
    page = "architecture.md"
    if (pathlib.Path(config["docs_dir"]) / page).is_file() and config["nav"] is not None \
            and not _in_nav(config["nav"], page):
        config["nav"].insert(1, {"Architecture": page})
    return config


def on_page_markdown(markdown, page, config, files, **kwargs):
    def fill(m: re.Match) -> str:
        name = m.group(1)
        if name not in GENERATORS:
            raise ValueError(f"{page.file.src_uri}: unknown generated block {name!r}; "
                             f"allowed: {sorted(GENERATORS)}")
        return GENERATORS[name]()

    return MARKER.sub(fill, markdown)


_SPHINX_ROLE = re.compile(r":(?:class|data|func|mod|attr|meth|obj):(?=<code>)")


def on_page_content(html, page, config, files, **kwargs):
    """Sphinx roles in docstrings (``:class:`Format```) render as their code alone."""
    return _SPHINX_ROLE.sub("", html)


def on_files(files, config, **kwargs):
    """Adds the plots that RESULTS.md shows (``results/...png``) to the site."""
    from mkdocs.structure.files import File

    for png in sorted(RESULT_IMAGES.rglob("*.png")):
        uri = "results/" + png.relative_to(RESULT_IMAGES).as_posix()
        if files.get_file_from_path(uri) is None:
            files.append(File.generated(config, uri, abs_src_path=str(png)))
    return files


# --- Griffe extensions (mkdocs.yml loads them as ``tools/docs_hooks.py:PlainValues`` and
# ``tools/docs_hooks.py:ExampleSections``). ---
try:
    import griffe
except ImportError:  # the hooks above do not need it
    griffe = None

if griffe is not None:

    class PlainValues(griffe.Extension):
        """Inspected constants (``FORMATS``, dataclass defaults) would show the docstring
        of their type (``int([x]) -> integer``...): drop it, keep the value."""

        def on_attribute_instance(self, *, node, attr, agent, **kwargs):
            obj = getattr(node, "obj", None)
            own = getattr(type(obj), "__doc__", None)
            if attr.docstring is not None and obj is not None and isinstance(own, str) \
                    and attr.docstring.value.strip() == own.strip():
                attr.docstring = None

    _EXAMPLE_TITLE = re.compile(r"^(\s*)Example:[ \t]*$", re.M)

    class ExampleSections(griffe.Extension):
        """Google-style docstrings here title a single example ``Example:``, which griffe's
        parser does not know (only ``Examples:``): it would render the section as an
        admonition with the ``>>>`` lines mangled into nested quotes. The title is read
        as ``Examples:`` (the docstring's text is otherwise unchanged), so each ``>>>``
        example shows as a code block with its output."""

        def on_object(self, *, obj, **kwargs):
            doc = obj.docstring
            if doc is not None and "Example:" in doc.value:
                doc.value = _EXAMPLE_TITLE.sub(r"\1Examples:", doc.value)
