"""What every conformance handler shares: results, errors and the handler registry.

A *handler* claims keys of a capture file and yields one `GroupResult` per group of
outputs it compared. A group it could not check (no model yet, a schema problem in one
configuration) is a `GroupResult` with ``error`` set: it is never a pass.
"""

from __future__ import annotations

import dataclasses
import zipfile
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np


class CaptureError(ValueError):
    """A capture file that cannot be read, breaks the schema, or holds nothing to compare."""


# What a damaged archive raises while its members are read.
READ_ERRORS = (zipfile.BadZipFile, zlib.error, EOFError, OSError)


@dataclasses.dataclass(frozen=True)
class GroupResult:
    """Bit-exact count for one group (configuration, form, variant) of a capture file.

    Attributes:
      group: ``family/config``, e.g. ``ptx/f16.f16.f32f32.m16n8k16``.
      matched: elements whose bits equal the capture's.
      total: elements compared.
      note: extra information (mismatching trial kinds, ...).
      error: why the group could not be checked; such a group is never ``ok`` and its
        elements are not in ``total`` (``total`` then counts the elements left unchecked).
      skipped: the capture itself has no data for this group (the GPU toolchain refused
        the form; the file says why in ``note``). Nothing is compared and nothing passes.
    """

    group: str
    matched: int
    total: int
    note: str = ""
    error: str = ""
    skipped: bool = False

    @property
    def ok(self) -> bool:
        """True when every element was compared and matched (a skipped group is ok)."""
        return not self.error and self.matched == self.total

    @property
    def family(self) -> str:
        """The group's family: ``chain/ptx``, ``ptx``, ``cvt``, ``mma``, ``shfl``, ..."""
        parts = self.group.split("/")
        if parts[0] == "chain" and len(parts) > 2:
            return "/".join(parts[:2])
        return parts[0]


# A handler is (match, run): match(file keys) -> the keys it will consume (empty: not
# for this file); run(capture, keys) -> results.
Handler = tuple[Callable[[set], set], Callable[[Any, set], Iterator[GroupResult]]]
HANDLERS: list[Handler] = []


def handler(*keys: str):
    """Registers a handler that needs every one of ``keys`` (all present, or it is skipped)."""

    def wrap(fn):
        HANDLERS.append(
            (lambda files: set(keys) if set(keys) <= files else set(), lambda d, _keys: fn(d))
        )
        return fn

    return wrap


def prefix_handler(match: Callable[[str], bool]):
    """Registers a handler for every key for which ``match(key)`` holds."""

    def wrap(fn):
        HANDLERS.append((lambda files: {k for k in files if match(k)}, fn))
        return fn

    return wrap


def count(got: np.ndarray, want: np.ndarray, where: Any = True) -> tuple[int, int]:
    """(matched, total) of ``got == want`` over the elements where ``where`` holds."""
    where = np.broadcast_to(where, want.shape)
    return int(((got == want) & where).sum()), int(where.sum())


def floor_percent(matched: int, total: int, digits: int = 3) -> str:
    """``100 * matched / total`` rounded *down* to ``digits`` decimals, as text.

    It reads ``100.000`` only when every element matched, never for a near miss.

    Example:
      >>> floor_percent(1127626, 1130496)
      '99.746'
      >>> floor_percent(999999, 1000000)
      '99.999'
      >>> floor_percent(5, 5)
      '100.000'
    """
    if total <= 0:
        raise ValueError(f"total must be positive to give a percentage; got {total}")
    if not 0 <= matched <= total:
        raise ValueError(f"matched must be in [0, total={total}]; got {matched}")
    scale = 10**digits
    q = matched * 100 * scale // total
    return f"{q // scale}.{q % scale:0{digits}d}" if digits else str(q)
