"""Timing helpers shared by the benchmarks (wall clock, best of several runs)."""

from __future__ import annotations

import json
import platform
import time
from collections.abc import Callable
from typing import Any

import jax


def device_info() -> dict[str, Any]:
    d = jax.devices()[0]
    return {
        "backend": jax.default_backend(),
        "device": getattr(d, "device_kind", str(d)),
        "device_count": jax.device_count(),
        "jax": jax.__version__,
        "cpu": platform.processor() or platform.machine(),
    }


def best_time(fn: Callable[[], Any], repeats: int = 5, min_time: float = 0.2) -> float:
    """Best wall-clock seconds of one call of ``fn`` (which must block until done)."""
    fn()  # compile and warm up
    best = float("inf")
    for _ in range(repeats):
        n, t0 = 0, time.perf_counter()
        while True:
            fn()
            n += 1
            dt = time.perf_counter() - t0
            if dt >= min_time:
                break
        best = min(best, dt / n)
    return best


def emit(result: dict[str, Any]) -> None:
    print(json.dumps(result, indent=1, sort_keys=False))
