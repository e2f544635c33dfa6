"""The conformance report: one table per file, family subtotals, a progress bar.

Results against hardware captures and against a reference model (``GroupResult.source``)
are counted apart: a family subtotal says which it matched ("matches hardware" or
"matches MMA-Sim 2.1.1 (reference model)"), and `by_source` splits the totals.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable

import jax

from jaxwarp._src.conformance.registry import HARDWARE, GroupResult, floor_percent

try:  # optional: a plain counter line stands in for it
    from tqdm import tqdm
except ImportError:
    tqdm = None


def _pct(matched: int, total: int) -> str:
    return f"{floor_percent(matched, total)}%" if total else "-"


def _row(name: str, total: int, matched: int, flag: str = "", note: str = "") -> str:
    return (f"  {name:<52} {total:>10} {matched:>10} {_pct(matched, total):>9}"
            + (f"  {flag}" if flag else "") + (f"  ({note})" if note else ""))


def tally(results: Iterable[GroupResult]) -> dict[str, int]:
    """Counts over results: elements matched/compared, groups, mismatches, errors."""
    t = {"matched": 0, "total": 0, "groups": 0, "mismatched_groups": 0, "error_groups": 0,
         "unchecked_elements": 0, "skipped_groups": 0, "not_modelled_groups": 0,
         "not_modelled_elements": 0}
    for r in results:
        t["groups"] += 1
        if r.error:
            t["error_groups"] += 1
            t["unchecked_elements"] += r.total
        elif r.not_modelled:
            t["not_modelled_groups"] += 1
            t["not_modelled_elements"] += r.total
        elif r.skipped:
            t["skipped_groups"] += 1
        else:
            t["matched"] += r.matched
            t["total"] += r.total
            t["mismatched_groups"] += r.matched != r.total
    return t


def matches(source: str) -> str:
    """What a count of ``source`` results means: ``"matches hardware"`` or
    ``"matches MMA-Sim 2.1.1 (reference model)"``.

    Example:
      >>> matches("hardware")
      'matches hardware'
    """
    return f"matches {source}"


def by_source(results: Iterable[GroupResult]) -> dict[str, dict[str, int]]:
    """`tally` per ``GroupResult.source``, hardware first."""
    groups: dict[str, list[GroupResult]] = {}
    for r in results:
        groups.setdefault(r.source, []).append(r)
    order = sorted(groups, key=lambda s: (s != HARDWARE, s))
    return {s: tally(groups[s]) for s in order}


def format_file(path: str, device: str, results: list[GroupResult]) -> list[str]:
    """The table of one file: a row per group, a subtotal per family, errors listed."""
    origin = ("outputs of" if results and all(r.source != HARDWARE for r in results)
              else "captured on")
    lines = [f"# {path} ({origin} {device}; model on {jax.default_backend()})",
             f"  {'config':<52} {'elements':>10} {'exact':>10} {'%':>9}"]
    families: dict[str, list[GroupResult]] = {}
    for r in results:
        families.setdefault(r.family, []).append(r)
    for fam, rs in families.items():
        for r in rs:
            if r.error:
                lines.append(f"  {r.group:<52} {r.total or '-':>10} {'-':>10} {'-':>9}  "
                             f"ERROR  ({r.error})")
            elif r.not_modelled:
                lines.append(f"  {r.group:<52} {r.total:>10} {'-':>10} {'-':>9}  NOT MODELLED"
                             f"  ({r.note})")
            elif r.skipped:
                lines.append(f"  {r.group:<52} {'-':>10} {'-':>10} {'-':>9}  not compared"
                             f"  ({r.note})")
            else:
                lines.append(_row(r.group, r.total, r.matched,
                                  "" if r.ok else "MISMATCH", r.note))
        t = tally(rs)
        extra = []
        if t["error_groups"]:
            extra.append(f"{t['error_groups']} group(s) NOT CHECKED (errors)")
        if t["not_modelled_groups"]:
            extra.append(f"{t['not_modelled_groups']} group(s) with "
                         f"{t['not_modelled_elements']} elements NOT MODELLED (not compared)")
        if t["skipped_groups"]:
            extra.append(f"{t['skipped_groups']} not recorded")
        sources = ", ".join(matches(s) for s in dict.fromkeys(r.source for r in rs))
        lines.append(f"  = {fam}: {t['matched']}/{t['total']} bit-exact "
                     f"({_pct(t['matched'], t['total'])}), {sources}"
                     + (f"; {'; '.join(extra)}" if extra else ""))
    return lines


class Progress:
    """A progress bar on stderr: tqdm when installed, else a plain counter line."""

    def __init__(self, desc: str, enabled: bool):
        self.bar = None
        self.n = 0
        self.desc = desc
        self.enabled = enabled
        if enabled and tqdm is not None:
            self.bar = tqdm(desc=desc, unit="group", file=sys.stderr, leave=False)

    def __call__(self, r: GroupResult) -> None:
        self.n += 1
        if self.bar is not None:
            self.bar.set_postfix_str(r.group[-40:], refresh=False)
            self.bar.update(1)
        elif self.enabled:
            print(f"\r{self.desc}: {self.n} groups ({r.group[-40:]})", end="", file=sys.stderr,
                  flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        elif self.enabled and self.n:
            print(file=sys.stderr)
