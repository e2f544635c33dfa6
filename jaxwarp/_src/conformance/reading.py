"""Opening capture files: refuse what is not a readable ``.npz`` before reading it."""

from __future__ import annotations

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
        d = np.load(path, allow_pickle=False)
        return d, set(d.files)
    except FileNotFoundError as e:
        raise CaptureError(f"{path}: no such capture file") from e
    except READ_ERRORS as e:
        raise CaptureError(f"{path}: not a readable .npz capture file ({e})") from e


def read_device(path: str, d: Any, files: set[str]) -> str:
    """The capture's ``device`` string (``"unknown device"`` when the key is absent)."""
    try:
        return str(d["device"]) if "device" in files else "unknown device"
    except (*READ_ERRORS, ValueError) as e:  # e.g. an object array (pickles are refused)
        raise CaptureError(f"{path}: key 'device' cannot be read ({e})") from e


def element_count(path: str, d: Any, key: str) -> int:
    """How many elements key ``key`` holds (it must read as a plain array)."""
    try:
        return int(np.asarray(d[key]).size)
    except (*READ_ERRORS, ValueError) as e:
        raise CaptureError(f"{path}: key {key!r} cannot be read as a plain array ({e})") from e
