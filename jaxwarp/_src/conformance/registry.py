"""What every conformance handler shares: results, errors and the `Handler` type.

A *handler* claims keys of a capture file and yields one `GroupResult` per group of
outputs it compared; ``families.HANDLERS`` lists all of them. A group it could not
check (no model yet, a schema problem in one configuration) is a `GroupResult` with
``error`` set: it is never a pass.
"""

from __future__ import annotations

import dataclasses
import zipfile
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

#: ``GroupResult.source`` of outputs recorded on a GPU.
HARDWARE = "hardware"


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
      not_modelled: jaxwarp has no model of this configuration in this version (``note``
        says what is missing). Nothing is compared, it is never a pass, and ``total``
        counts the elements left unchecked.
      source: what the outputs being matched came from: ``"hardware"`` (a GPU capture)
        or a reference model (``"MMA-Sim 2.1.1 (reference model)"``), reported apart.
    """

    group: str
    matched: int
    total: int
    note: str = ""
    error: str = ""
    skipped: bool = False
    not_modelled: bool = False
    source: str = HARDWARE

    @property
    def ok(self) -> bool:
        """True when every element was compared and matched (a skipped group is ok; a
        group that is not modelled is not)."""
        return not self.error and not self.not_modelled and self.matched == self.total

    @property
    def family(self) -> str:
        """The group's family: ``chain/ptx``, ``golden/mma``, ``ptx``, ``cvt``, ``mma``, ..."""
        parts = self.group.split("/")
        if parts[0] in ("chain", "golden") and len(parts) > 2:
            return "/".join(parts[:2])
        return parts[0]


#: Keys of a whole capture file, not of a family: the GPU's name and the capture tool's
#: ``meta`` JSON. ``check.check_file`` reads them once; no handler claims them.
FILE_KEYS = frozenset({"device", "meta"})


@dataclasses.dataclass(frozen=True)
class Handler:
    """One handler family: which keys of a file it claims, and how it checks them.

    Attributes:
      name: the family, for messages (``"shfl"``, ``"ptx/wgmma/chain"``, ...).
      match: file keys -> the keys it will consume (empty: not for this file).
      run: (capture, its keys) -> one result per group it compared.
      prefixes: the key prefixes the family owns (``"ld/"``, ``"chain/"``, ...): a key
        with a ``/`` under none of them is a WMMA configuration (``unowned_paths``).

    Every handler is listed in ``families.HANDLERS``, in the order results are reported.
    """

    name: str
    match: Callable[[set], set]
    run: Callable[[Any, set], Iterator[GroupResult]]
    prefixes: tuple[str, ...] = ()


def under(name: str, prefixes: tuple[str, ...], run: Callable[[Any, set], Iterator[GroupResult]],
          match: Callable[[set], set] | None = None) -> Handler:
    """The `Handler` of a family that owns ``prefixes``; it claims every key under them,
    or those that ``match`` claims where the family's key schema is narrower.

    Example:
      >>> h = under("load", ("ld/",), run=None)
      >>> sorted(h.match({"ld/a", "st/b", "device"})), h.prefixes
      (['ld/a'], ('ld/',))
    """
    if match is None:
        match = keys_where(lambda key: key.startswith(prefixes))
    return Handler(name, match, run, prefixes)


def unowned_paths(files: set, owned: tuple[str, ...]) -> set:
    """The keys with a ``/`` under none of the ``owned`` prefixes.

    Example:
      >>> sorted(unowned_paths({"f16.f32f32.m16n16k16.rc/A", "ld/x", "cvt_x"}, ("ld/",)))
      ['f16.f32f32.m16n16k16.rc/A']
    """
    return {k for k in files if "/" in k and not k.startswith(owned)}


def needs_all(*keys: str) -> Callable[[set], set]:
    """A ``match`` that claims ``keys`` when every one of them is in the file."""
    want = frozenset(keys)
    return lambda files: set(want) if want <= files else set()


def keys_where(pred: Callable[[str], bool]) -> Callable[[set], set]:
    """A ``match`` that claims every key for which ``pred(key)`` holds."""
    return lambda files: {k for k in files if pred(k)}


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
