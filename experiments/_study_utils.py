"""Helpers shared by the studies: devices, tables, CSV files, plots, timing, options.

A module for the scripts beside it (``matmul_error.py``, ``training.py``,
``warp_programs.py``), not a script: the leading underscore says so.
"""

from __future__ import annotations

import argparse
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


def run_header(argv: Sequence[str] | None = None,
               devices: Sequence[jax.Device] | None = None) -> str:
    """The command, device and date lines printed at the top of every study."""
    script = os.path.relpath(sys.argv[0], ROOT) if argv is None else "<in-process>"
    cmd = " ".join(["python", script, *(sys.argv[1:] if argv is None else argv)])
    now = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    return (f"command: {cmd}\ndevice:  {device_summary(devices)}\nhost:    {platform.node() or '?'}"
            f" ({os.cpu_count()} CPU cores)\ndate:    {now}")


def out_dir(path: str | os.PathLike | None) -> pathlib.Path:
    """``path`` (default ``experiments/out``), created if missing."""
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


def save_png(fig, path, dpi: int = 90) -> None:
    """Saves a figure as a small PNG: rendered at ``dpi``, then reduced to a 256-colour
    palette (line plots lose nothing visible; the files stay well under 150 KB)."""
    import io

    from PIL import Image

    buf = io.BytesIO()
    fig.savefig(buf, dpi=dpi, format="png")
    buf.seek(0)
    with Image.open(buf) as im:
        im.convert("RGB").quantize(256, method=Image.Quantize.MEDIANCUT).save(
            path, format="PNG", optimize=True)


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


def int_at_least(lo: int, multiple_of: int = 1):
    """An argparse ``type``: an int >= ``lo`` (and a multiple of ``multiple_of``), with an
    error message that says what is allowed."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < lo or value % multiple_of:
            what = f"an integer >= {lo}" + (f" and a multiple of {multiple_of}"
                                            if multiple_of > 1 else "")
            raise argparse.ArgumentTypeError(f"expected {what}, got {value}")
        return value

    parse.__name__ = "int"  # argparse names the type in its messages
    return parse


def devices_count(text: str) -> int | str:
    """An argparse ``type`` for ``--devices``: ``"all"`` or an int >= 1."""
    if text.strip().lower() == "all":
        return "all"
    try:
        return int_at_least(1)(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected 'all' or an integer >= 1, got {text!r}") \
            from None


devices_count.__name__ = "device count"  # argparse names the type in its messages


def add_devices_option(p: argparse.ArgumentParser) -> None:
    """``--devices N|all``: how many devices of the default backend the study shards over."""
    p.add_argument("--devices", type=devices_count, default=1, metavar="N|all",
                   help="shard the work over the first N devices of the default backend, or "
                        "over all of them (default 1); every device count gives the same "
                        "numbers")


def pick_devices(count: int | str) -> list[jax.Device]:
    """The first ``count`` devices of the default backend (``"all"``: every one).

    On a GPU, XLA's deterministic settings (``jaxwarp.deterministic_xla``) are
    switched on first, when no backend has started yet, so that every device count
    and every rerun give the same numbers.

    Raises:
        SystemExit: more devices asked for than there are.
    """
    from jax._src import xla_bridge

    import jaxwarp

    if not xla_bridge.backends_are_initialized():
        jaxwarp.deterministic_xla()
    devs = jax.devices()
    if count == "all":
        return devs
    if count > len(devs):
        raise SystemExit(f"--devices {count}: this machine has {len(devs)} "
                         f"{jax.default_backend()} device(s) ({devs[0].device_kind}); "
                         f"use a number up to {len(devs)} or 'all'")
    return devs[:count]


def device_summary(devices: Sequence[jax.Device] | None = None) -> str:
    """``"4 x cpu (...)"`` or ``"1 x NVIDIA H100 80GB HBM3"``: what the work is sharded over."""
    devs = jax.devices() if devices is None else list(devices)
    kinds = sorted({d.device_kind for d in devs})
    return f"{len(devs)} x {', '.join(kinds)} ({jax.default_backend()}, jax {jax.__version__})"


def add_common_options(p: argparse.ArgumentParser) -> None:
    """``--seed``, ``--out``, ``--no-progress``: the same in every study."""
    p.add_argument("--seed", type=int_at_least(0), default=0,
                   help="random seed, an integer >= 0 (default 0); the same seed gives the "
                        "same numbers on any number of devices")
    p.add_argument("--out", metavar="DIR",
                   help="folder for the output files (CSV, PNG), created if missing "
                        "(default experiments/out)")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress bar on stderr (default: show it)")


def parse_ks(parser, text: str, multiple: int) -> tuple[int, ...]:
    """``--ks``: comma-separated K values, each a positive multiple of ``multiple``
    (the parser's error otherwise)."""
    try:
        ks = tuple(int(k) for k in text.split(","))
    except ValueError:
        parser.error(f"--ks: expected comma-separated integers, got {text!r}")
    if any(k < multiple or k % multiple for k in ks):
        parser.error(f"--ks: every K must be a multiple of {multiple}, got {text!r}")
    return ks


def pick_series(parser, text: str | None, series: tuple) -> tuple:
    """``--series``: the named entries of ``series`` (tuples whose first item is the
    name), all of them when ``text`` is empty (the parser's error for an unknown name)."""
    if not text:
        return series
    names = [s.strip() for s in text.split(",")]
    known = [s[0] for s in series]
    bad = [n for n in names if n not in known]
    if bad:
        parser.error(f"--series: unknown {bad}; allowed: {known}")
    return tuple(s for s in series if s[0] in names)
