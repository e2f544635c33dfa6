"""Helpers shared by the studies: devices, tables, CSV files, plots, timing."""

from __future__ import annotations

import csv
import datetime
import os
import pathlib
import platform
import sys
import time
from collections.abc import Iterable, Sequence

import jax

ROOT = pathlib.Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "experiments" / "out"


def device_summary() -> str:
    """``"4 x cpu (...)"`` or ``"1 x NVIDIA H100 80GB HBM3"``: what the batch is sharded over."""
    devs = jax.devices()
    kinds = sorted({d.device_kind for d in devs})
    return f"{len(devs)} x {', '.join(kinds)} ({jax.default_backend()}, jax {jax.__version__})"


def run_header(argv: Sequence[str] | None = None) -> str:
    """The command, device and date lines printed at the top of every study."""
    script = os.path.relpath(sys.argv[0], ROOT) if argv is None else "<in-process>"
    cmd = " ".join(["python", script, *(sys.argv[1:] if argv is None else argv)])
    now = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    return (f"command: {cmd}\ndevice:  {device_summary()}\nhost:    {platform.node() or '?'}"
            f" ({os.cpu_count()} CPU cores)\ndate:    {now}")


def out_dir(path: str | os.PathLike | None) -> pathlib.Path:
    d = DEFAULT_OUT if path is None else pathlib.Path(path)
    d.mkdir(parents=True, exist_ok=True)
    return d


def write_csv(path: pathlib.Path, rows: Sequence[dict], columns: Sequence[str]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(columns), extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A GitHub Markdown table (so stdout can be pasted into RESULTS.md as is)."""
    rows = [[str(c) for c in r] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(headers)]

    def line(cells):
        return "| " + " | ".join(c.rjust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    sep = "|" + "|".join("-" * (w + 1) + ":" for w in widths) + "|"
    return "\n".join([line(headers), sep, *(line(r) for r in rows)])


def pyplot():
    """matplotlib.pyplot with the Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def block(tree):
    """Waits for every array of ``tree`` (for timing)."""
    return jax.block_until_ready(tree)


class Timer:
    """``with Timer() as t: ...; t.seconds``."""

    def __enter__(self):
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.seconds = time.perf_counter() - self.start
        return False
