"""The command line: ``python -m jaxwarp.conformance FILE.npz [...]``.

`main` reads each capture file with `check_file`, prints its table (``report.py``) and
the summary line, and exits 0 (everything matched), 1 (a mismatch) or 2 (an error).
Docs: ``docs/conformance.md``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from collections.abc import Iterable
from typing import Any

import jax

from jaxwarp._src.conformance.check import check_file
from jaxwarp._src.conformance.registry import HARDWARE, CaptureError, GroupResult, floor_percent
from jaxwarp._src.conformance.report import Progress, by_source, format_file, matches, tally


def main(argv: Iterable[str] | None = None) -> int:
    """The command line. Exit status: 0 every element of every file was compared and
    matched; 1 some element mismatched; 2 an error (unreadable file, nothing to compare,
    an unknown key, a configuration the model cannot run) or a configuration that is not
    modelled in this version (nothing compared). Errors win over mismatches."""
    p = argparse.ArgumentParser(
        prog="python -m jaxwarp.conformance",
        description="Compare jaxwarp bit for bit with GPU captures (docs/conformance.md).",
    )
    p.add_argument("files", nargs="+", metavar="FILE.npz", help="capture files")
    p.add_argument("--json", metavar="PATH", help="also write every count as JSON")
    p.add_argument("--backend", choices=("cpu", "gpu"),
                   help="the JAX backend that runs the model (default: JAX's default)")
    p.add_argument("--progress", choices=("auto", "on", "off"), default="auto",
                   help="progress bar on stderr (auto: when stderr is a terminal)")
    args = p.parse_args(list(argv) if argv is not None else None)
    if args.json:  # checked before the (long) run, not after it
        if os.path.isdir(args.json):
            print(f"error: --json {args.json} is a folder; give the path of the JSON file "
                  f"to write, e.g. --json {os.path.join(args.json, 'conformance.json')}",
                  file=sys.stderr)
            return 2
        parent = os.path.dirname(os.path.abspath(args.json))
        if not os.path.isdir(parent) or not os.access(parent, os.W_OK):
            print(f"error: --json {args.json}: folder {parent} does not exist or is not "
                  f"writable", file=sys.stderr)
            return 2
    if args.backend:
        try:
            device = jax.devices(args.backend)[0]
        except RuntimeError as e:
            print(f"error: --backend {args.backend}: no such JAX backend here ({e})",
                  file=sys.stderr)
            return 2
    else:
        device = jax.devices()[0]
    show = args.progress == "on" or (args.progress == "auto" and sys.stderr.isatty())
    report: dict[str, Any] = {"backend": device.platform, "files": []}
    all_results: list[GroupResult] = []
    file_errors: list[str] = []
    with jax.default_device(device):
        for path in args.files:
            bar = Progress(os.path.basename(path), show)
            try:
                results, dev = check_file(path, bar)
            except CaptureError as e:
                bar.close()
                print(f"error: {e}", file=sys.stderr)
                file_errors.append(str(e))
                report["files"].append({"path": path, "error": str(e)})
                continue
            bar.close()
            print("\n".join(format_file(path, dev, results)))
            for r in results:
                if r.error:
                    print(f"error: {path}: {r.group}: {r.error}", file=sys.stderr)
            all_results.extend(results)
            t = tally(results)
            report["files"].append({
                "path": path, "device": dev, **t,
                "sources": sorted({r.source for r in results}),
                "percent": floor_percent(t["matched"], t["total"]) if t["total"] else None,
                "groups_detail": [dataclasses.asdict(r) for r in results]})
    t = tally(all_results)
    pct = floor_percent(t["matched"], t["total"]) if t["total"] else None
    report.update(t, percent=pct, file_errors=len(file_errors))
    sources = by_source(all_results)
    report["by_source"] = {s: {**ts, "percent": floor_percent(ts["matched"], ts["total"])
                                   if ts["total"] else None, "label": matches(s)}
                           for s, ts in sources.items()}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    line = (f"conformance: {t['matched']}/{t['total']} bit-exact ({pct}%)" if t["total"]
            else "conformance: nothing was compared")
    if any(s != HARDWARE for s in sources):  # reference-model results: say what matched what
        line += " [" + "; ".join(
            f"{matches(s)}: {ts['matched']}/{ts['total']} ("
            + (f"{floor_percent(ts['matched'], ts['total'])}%" if ts["total"] else "-") + ")"
            for s, ts in sources.items()) + "]"
    extra = []
    if t["mismatched_groups"]:
        extra.append(f"{t['mismatched_groups']} group(s) MISMATCH")
    if t["error_groups"]:
        extra.append(f"{t['error_groups']} group(s) with {t['unchecked_elements']} elements "
                     f"NOT CHECKED (errors)")
    if t["not_modelled_groups"]:
        extra.append(f"{t['not_modelled_groups']} group(s) with {t['not_modelled_elements']} "
                     f"elements NOT MODELLED in this version (not compared)")
    if file_errors:
        extra.append(f"{len(file_errors)} file(s) unreadable or empty (errors)")
    if t["skipped_groups"]:
        extra.append(f"{t['skipped_groups']} form(s) not recorded on the GPU")
    print(line + ("; " + "; ".join(extra) if extra else ""))
    if file_errors or t["error_groups"] or t["not_modelled_groups"] or not t["total"]:
        return 2
    return 0 if t["matched"] == t["total"] else 1
