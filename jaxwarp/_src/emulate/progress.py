"""Log lines for the phases of an emulated program's first call (the ``"jaxwarp"`` logger).

An exact emulated step, a block-scaled recipe's above all, spends tens of seconds in
JAX's trace, its lowering and XLA's compile before it runs once. When ``emulate`` traces
a function, this module logs that trace, and then, through JAX's monitoring events
(``jax.monitoring``), the phases of the computation that follow: JAX's trace of the
enclosing jitted function, the lowering (and so the start of XLA's compile) and XLA's
compile, one line each.

Levels: ``INFO`` for every phase (shown when the program asks for it, e.g.
``logging.basicConfig(level=logging.INFO)`` or
``logging.getLogger("jaxwarp").setLevel(logging.INFO)`` with a handler); ``WARNING``
(shown by default) only where a phase is long: a trace or compile of at least
:data:`LONG_PHASE_S` seconds, and the start of XLA's compile when the trace and lowering
before it took that long (a long compile then follows). Short programs print nothing.
"""

from __future__ import annotations

import logging
import threading
import time

import jax

logger = logging.getLogger("jaxwarp")

#: Seconds from which a phase's line is a warning (shown without any logging set up).
LONG_PHASE_S = 10.0
#: JAX traces every jitted function inside too; their lines are kept from this long.
_MIN_TRACE_S = 0.5

_EVENTS = {"/jax/core/compile/jaxpr_trace_duration": "trace",
           "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
           "/jax/core/compile/backend_compile_duration": "compile"}

_LOCK = threading.Lock()
_STATE = {"registered": False, "armed_at": None, "what": ""}


def _level(seconds: float) -> int:
    return logging.WARNING if seconds >= LONG_PHASE_S else logging.INFO


def _listener(event: str, duration: float, **kwargs) -> None:
    phase = _EVENTS.get(event)
    if phase is None or threading.current_thread().name == "jaxwarp-promote":
        return
    with _LOCK:
        armed_at, what = _STATE["armed_at"], _STATE["what"]
        if armed_at is None:
            return
        if phase == "compile":
            _STATE["armed_at"] = None  # the emulated program's compile: done
    name = kwargs.get("fun_name", "?")
    if phase == "trace" and duration >= _MIN_TRACE_S:
        logger.log(_level(duration), "jaxwarp: JAX traced %s in %.1f s (%s)", name,
                   duration, what)
    elif phase == "lower":
        since = time.perf_counter() - armed_at
        logger.log(_level(since), "jaxwarp: lowered %s in %.1f s (%.1f s since emulate's "
                   "trace began); XLA compiles it now (%s; docs/compile_time.md)", name,
                   duration, since, what)
    elif phase == "compile":
        logger.log(_level(duration), "jaxwarp: XLA compiled %s in %.1f s (%s)", name,
                   duration, what)


def _register() -> None:
    try:
        jax.monitoring.register_event_duration_secs_listener(_listener)
    except Exception:  # noqa: BLE001 - a JAX without these events: the trace lines only
        pass


def trace_started(what: str) -> float:
    """Called when ``emulate`` starts tracing its function (``what``: the settings, for
    the log lines); returns the start time for :func:`trace_done`."""
    with _LOCK:
        if not _STATE["registered"]:
            _STATE["registered"] = True
            _register()
        now = time.perf_counter()
        _STATE["armed_at"], _STATE["what"] = now, what
    return now


def trace_done(start: float, name: str, products: int, what: str) -> None:
    """Logs ``emulate``'s trace of ``name``: its forward products and seconds."""
    seconds = time.perf_counter() - start
    logger.log(_level(seconds), "jaxwarp: emulate traced %s in %.1f s: %d forward products "
               "(%s); their backward products are traced with the gradient", name, seconds,
               products, what)
