"""`check_file`: every handler family on one capture file."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax

from jaxwarp._src.conformance.families import HANDLERS
from jaxwarp._src.conformance.reading import element_count, open_capture, read_device, read_meta
from jaxwarp._src.conformance.registry import FILE_KEYS, READ_ERRORS, CaptureError, GroupResult


def _nothing_compared(r: GroupResult) -> GroupResult:
    """A group that compared no element is an error, as an empty file is."""
    if r.total or r.error or r.skipped or r.not_modelled:
        return r
    return dataclasses.replace(r, error=f"{r.group} has zero trials: nothing to compare")


def check_file(path: str, progress: Callable[[GroupResult], None] | None = None
               ) -> tuple[list[GroupResult], str]:
    """Runs the model on one capture file. Returns (results, device name).

    Every key must be understood by a handler: a key none understands becomes an error
    result (``GroupResult.error``), as do a configuration the model cannot run yet, a
    group with nothing to compare (zero trials) and a configuration the capture's
    ``device`` cannot have run (an instruction its architecture lacks). The file-wide
    keys (``device``, the capture tool's ``meta`` JSON) are read here.

    Args:
      path: the ``.npz`` capture file.
      progress: called with each result as soon as it is known.

    Raises:
      CaptureError: the file is missing, not an npz, breaks the schema (``meta`` that is
        not a JSON object included), or has nothing to compare (no key besides
        ``device`` and ``meta``).
    """
    d, files = open_capture(path)
    device = read_device(path, d, files)
    read_meta(path, d, files)  # the file-wide keys are read here, once
    if not files - FILE_KEYS:
        raise CaptureError(f"{path}: nothing to compare (keys: {sorted(files)}); a capture "
                           f"needs at least one group of outputs")
    results: list[GroupResult] = []
    used = set(FILE_KEYS)

    def emit(r: GroupResult) -> None:
        results.append(r)
        if progress is not None:
            progress(r)

    with jax.enable_x64(True):
        for handler in HANDLERS:
            keys = handler.match(files)
            if not keys:
                continue
            try:
                before = len(results)
                for r in handler.run(d, keys):
                    emit(_nothing_compared(r))
                if len(results) == before:  # keys but no group (ldmatrix with zero trials)
                    emit(GroupResult(sorted(keys)[0], 0, 0, error=(
                        f"keys {sorted(keys)[:4]} hold no group to compare (zero trials)")))
            except CaptureError as e:
                raise CaptureError(f"{path}: {e}") from e
            except READ_ERRORS as e:
                raise CaptureError(f"{path}: not a readable .npz capture file: keys "
                                   f"{sorted(keys)[:4]} cannot be read ({e})") from e
            except (KeyError, IndexError, ValueError, TypeError) as e:
                raise CaptureError(
                    f"{path}: keys {sorted(keys)[:4]} do not follow the capture schema "
                    f"(docs/capture_format.md): {type(e).__name__}: {e}"
                ) from e
            used |= keys
    for k in sorted(files - used):
        emit(GroupResult(f"unhandled/{k}", 0, element_count(path, d, k),
                         error=f"{path}: no handler understands key {k!r}"))
    if not any(r.total or r.skipped or r.error for r in results):
        raise CaptureError(f"{path}: nothing to compare: no key held any output element")
    return results, device
