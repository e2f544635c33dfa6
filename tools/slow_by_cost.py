"""Writes ``tests/slow_by_cost.txt``: the default tests whose call took longer than a
threshold in a measured run, which ``tests/conftest.py`` then leaves to ``-m slow``.

The default test run (``python -m pytest -n auto``) must finish in minutes on a 2-core
machine; a test's cost is mostly XLA compiling its programs. This tool keeps that budget
from a measurement, not from guesses: run the default selection with durations, then
give the output to this tool::

    python -m pytest -n 14 -q -p no:cacheprovider --durations=0 > durations.txt
    python tools/slow_by_cost.py durations.txt --threshold 0.8

Tests named in ``KEEP`` stay in the default run whatever they cost (CI requires them
there). The file lists node ids, one per line, with a header saying how it was made.
"""

from __future__ import annotations

import argparse
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "slow_by_cost.txt"
#: Default tests that stay default whatever they cost: .ci/run checks that the
#: documentation build ran in the README's test command.
KEEP = ("tests/test_docs.py::test_docs_build_strict",)
_LINE = re.compile(r"\s*([0-9.]+)s call\s+(\S+)")


def costly(lines, threshold: float) -> list[tuple[float, str]]:
    """(seconds, node id) of every ``call`` line over ``threshold`` seconds, not in KEEP.

    Example:
      >>> lines = ["1.20s call     tests/test_docs.py::t[x]",
      ...          "0.10s call     tests/test_docs.py::u"]
      >>> costly(lines, 0.8)
      [(1.2, 'tests/test_docs.py::t[x]')]
    """
    out = []
    for line in lines:
        m = _LINE.match(line)
        if m and float(m.group(1)) > threshold and m.group(2) not in KEEP:
            out.append((float(m.group(1)), m.group(2)))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("durations", help="pytest output of a default run with --durations=0")
    ap.add_argument("--threshold", type=float, default=0.8, help="seconds (default 0.8)")
    ap.add_argument("--note", default="", help="where and how the durations were measured")
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--add", action="store_true",
                    help="keep the tests already listed in --out and add these (its header "
                         "lines stay, one more says what was added)")
    args = ap.parse_args(argv)
    text = pathlib.Path(args.durations).read_text().splitlines()
    if not any(_LINE.match(line) for line in text):
        sys.exit(f"error: durations: no '<seconds>s call <node id>' lines in {args.durations}")
    rows = costly(text, args.threshold)
    head = [f"# Default tests whose call took over {args.threshold} s in a measured run: "
            "tests/conftest.py leaves them to -m slow.",
            "# Made by tools/slow_by_cost.py" + (f" from {args.note}" if args.note else "") + ".",
            f"# {len(rows)} tests, {sum(t for t, _ in rows):.1f} s of calls in that run."]
    body = sorted(node for _, node in rows)
    out = pathlib.Path(args.out)
    if args.add and out.exists():
        lines = out.read_text().splitlines()
        old_head = [line for line in lines if line.startswith("#")]
        old_body = {line.strip() for line in lines if line.strip() and not line.startswith("#")}
        new = sorted(set(body) - old_body)
        head = old_head + [
            f"# Added by tools/slow_by_cost.py --add: {len(new)} tests over {args.threshold} s"
            + (f" from {args.note}" if args.note else "") + "."]
        body = sorted(old_body | set(body))
    out.write_text("\n".join(head + body) + "\n")
    print(f"{len(body)} tests written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
