"""Opening capture files: refuse what is not a readable ``.npz`` before reading it.

Every member's ``.npy`` header is read first and the size it claims compared with the
bytes the member holds, so that a corrupt header cannot make NumPy allocate an array
of any size before it finds the data missing.
"""

from __future__ import annotations

import json
import os
import stat
import zipfile
from typing import Any

import numpy as np

from jaxwarp._src.conformance.registry import READ_ERRORS, CaptureError


def open_capture(path: str) -> tuple[Any, set[str]]:
    """Opens a capture file. Returns (the lazily read ``NpzFile``, its keys).

    Raises:
      CaptureError: the path does not exist, is not a regular file (a FIFO or device
        would block or stream), or is not a zip archive of ``.npy`` arrays.
    """
    try:
        if not os.path.exists(path):
            raise FileNotFoundError(path)
        if not stat.S_ISREG(os.stat(path).st_mode):  # a FIFO or device would block or stream
            raise CaptureError(f"{path}: not a regular file (a capture is an .npz file; "
                               f"pipes, devices and folders are refused)")
        if not zipfile.is_zipfile(path):
            raise CaptureError(f"{path}: not a readable .npz capture file (not a zip archive "
                               f"of .npy arrays)")
        with zipfile.ZipFile(path) as z:
            for info in z.infolist():
                _check_member(path, z, info)
        d = np.load(path, allow_pickle=False)
        return d, set(d.files)
    except FileNotFoundError as e:
        raise CaptureError(f"{path}: no such capture file") from e
    except READ_ERRORS as e:
        raise CaptureError(f"{path}: not a readable .npz capture file ({e})") from e


_HEADER_READERS = {(1, 0): np.lib.format.read_array_header_1_0,
                   (2, 0): np.lib.format.read_array_header_2_0}


def _check_member(path: str, z: zipfile.ZipFile, info: zipfile.ZipInfo) -> None:
    """Refuses a ``.npy`` member whose header claims more data than the member holds."""
    if not info.filename.endswith(".npy"):
        return
    key = info.filename[:-4]
    with z.open(info) as f:
        try:
            version = np.lib.format.read_magic(f)
            reader = _HEADER_READERS.get(version)
            if reader is None:  # a later header version: np.load checks it
                return
            shape, _, dtype = reader(f)
        except ValueError as e:
            raise CaptureError(f"{path}: key {key!r} is not a .npy array ({e})") from e
        header = f.tell()
    if dtype.hasobject:  # np.load refuses it (no pickles) with its own message
        return
    need = int(np.prod(shape, dtype=object)) * dtype.itemsize
    have = info.file_size - header
    if need > have:
        raise CaptureError(f"{path}: key {key!r} claims shape {shape} of {dtype} ({need} "
                           f"bytes) but holds {have} bytes: truncated or corrupt")


def read_device(path: str, d: Any, files: set[str]) -> str:
    """The capture's ``device`` string (``"unknown device"`` when the key is absent)."""
    try:
        return str(d["device"]) if "device" in files else "unknown device"
    except (*READ_ERRORS, ValueError) as e:  # e.g. an object array (pickles are refused)
        raise CaptureError(f"{path}: key 'device' cannot be read ({e})") from e


def read_meta(path: str, d: Any, files: set[str]) -> dict | None:
    """The capture tool's ``meta`` JSON as a dict (None when the key is absent).

    Raises:
      CaptureError: ``meta`` is not a JSON object (``tools/capture/capture_cg.py``
        writes one: the tool, the GPU, the options it ran with).
    """
    if "meta" not in files:
        return None
    try:
        meta = json.loads(str(d["meta"]))
    except (*READ_ERRORS, ValueError) as e:
        raise CaptureError(f"{path}: key 'meta' is not the capture tool's JSON ({e})") from e
    if not isinstance(meta, dict):
        raise CaptureError(f"{path}: key 'meta' must be a JSON object, got "
                           f"{type(meta).__name__}")
    return meta


def element_count(path: str, d: Any, key: str) -> int:
    """How many elements key ``key`` holds (it must read as a plain array)."""
    try:
        return int(np.asarray(d[key]).size)
    except (*READ_ERRORS, ValueError) as e:
        raise CaptureError(f"{path}: key {key!r} cannot be read as a plain array ({e})") from e
