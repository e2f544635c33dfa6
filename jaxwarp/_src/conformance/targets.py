"""Whether the GPU named in a capture's ``device`` key has an instruction.

A capture recorded on a GPU that cannot issue the instruction (fp8 ``mma.sync`` on an
sm_80 GPU, ``wgmma`` before sm_90) is a broken or mislabelled file: its groups are
errors, with the requirement taken from ``jaxwarp._src.catalogue.arch``
(`arch.parse_target`, `arch.check_target`), the one table of what each target issues.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from jaxwarp._src.catalogue import arch

_SM = re.compile(r"\bsm_(\d+)[af]?\b")


def device_target(device: str) -> arch.Target | None:
    """The target a GPU named ``device`` runs, or None when the string names no ``sm_XY``.

    A GPU runs the code built for its own arch-specific target (an sm_90 GPU runs the
    sm_90a ``wgmma``), so the target is ``sm_XYa`` where that exists, else ``sm_XY``.

    Raises:
      ValueError: the device names an ``sm_XY`` outside ``arch.TARGETS``.

    Example:
      >>> device_target("NVIDIA H100 80GB HBM3 sm_90").name
      'sm_90a'
      >>> device_target("NVIDIA A100-SXM4-80GB sm_80").name
      'sm_80'
    """
    found = _SM.findall(device)
    if not found:
        return None
    sm = found[-1]
    for name in (f"sm_{sm}a", f"sm_{sm}"):
        if name in arch.TARGETS:
            return arch.parse_target(name)
    raise ValueError(f"the device names sm_{sm}, an architecture jaxwarp does not know "
                     f"(known: {arch.TARGETS})")


def refusal(cap: Any, instruction: str, a_format: str, b_format: str | None = None) -> str:
    """Why the capture's GPU cannot have run ``instruction`` on these operand types.

    Args:
      cap: the capture (its ``device`` key, if any, names the GPU).
      instruction: ``"wmma"``, ``"mma_sync"`` or ``"wgmma"`` (``arch.INSTRUCTIONS``).
      a_format, b_format: operand types (``b_format`` defaults to ``a_format``).

    Returns:
      ``""`` when the GPU has the instruction, or when ``device`` is absent or names no
      ``sm_XY`` (nothing to check against); else a message naming the instruction, the
      operand types, the architecture they need and the device.

    Example:
      >>> print(refusal({"device": "A100 sm_80"}, "mma_sync", "e4m3", "e5m2"))
      captured on 'A100 sm_80', a GPU that lacks the instruction: mma_sync with e4m3
      operands needs sm_89 or newer; arch='sm_80'
    """
    if "device" not in cap:
        return ""
    device = str(np.asarray(cap["device"]))
    try:
        target = device_target(device)
    except ValueError as e:
        return (f"captured on {device!r}: whether it has {instruction} cannot be checked: "
                f"{e}")
    if target is None:
        return ""
    try:
        arch.check_target(target, instruction, a_format, b_format or a_format)
    except ValueError as e:
        return f"captured on {device!r}, a GPU that lacks the instruction: {e}"
    return ""
