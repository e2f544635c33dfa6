"""Checked mode: report programs that lean on behaviour CUDA leaves undefined.

Without it the model does what an H100 does (a source lane outside ``mask``
reads 0, any ``width`` follows the PTX formula, ...). Inside `checked`, every
intrinsic also states the CUDA rule it relies on with
``jax.experimental.checkify``, so the first broken rule is reported with the lane
and the argument, eagerly, under ``jax.jit`` and under ``jax.vmap``::

    err, out = jaxwarp.checked(program)(x)
    err.throw()          # raises JaxRuntimeError naming the lane and the rule

What is reported:

* a shuffle ``width`` that is not a power of two in [1, 32];
* a lane reading a source lane that is outside its ``mask`` (or does not call);
* a calling lane (non-zero per-lane mask) missing from its own ``mask``;
* calling lanes of one intrinsic passing different masks;
* ``nanosleep`` with a traced ``ns`` above 1,000,000;
* with ``nan_inf=True``, NaN or inf among the operands of ``mma_sync``;
* sub-byte values (s4, u4, b1) out of range in ``fragment_from_matrix`` and
  ``fill_fragment``, and non-finite or out-of-range floats filled into integer
  fragments, when they are traced (concrete ones raise at once);
* 2:4 sparse indices outside their group (``sparse.decompress_2_4``,
  ``sparse.metadata_words``, ``mma_sp_logical``, ``wgmma_sp_logical``) when traced.

Checked mode is part of JAX's jit cache key (a JAX config state), so a function
jitted before (``checked(jax.jit(f))``) or called inside (``checked(lambda x:
jf(x))``) is traced again with the checks, and the plain jitted function keeps
its own check-free trace.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import checkify

_STATE = threading.local()
_MODES = ("off", "rules", "nan_inf")


def _make_state():
    """A JAX config state in the jit cache key, or None where this JAX has no such API."""
    try:
        from jax._src import config as _jax_config

        return _jax_config.enum_state(
            "jaxwarp_checked_mode", list(_MODES), "off",
            help="jaxwarp checked mode (set by jaxwarp.checked; not for direct use)",
            include_in_jit_key=True, include_in_trace_context=True)
    except Exception:  # pragma: no cover - other JAX versions: thread-local fallback
        return None


_MODE_STATE = _make_state()


def _mode() -> str:
    if _MODE_STATE is not None:
        return _MODE_STATE.value or "off"
    return getattr(_STATE, "mode", "off")


def enabled(what: str = "rules") -> bool:
    """True while tracing inside `checked` (``what="nan_inf"``: and NaN/inf checks asked for)."""
    mode = _mode()
    return mode != "off" and (what == "rules" or mode == what)


@contextlib.contextmanager
def _enable(nan_inf: bool):
    mode = "nan_inf" if nan_inf else "rules"
    if _MODE_STATE is not None:
        with _MODE_STATE(mode):
            yield
        return
    old = getattr(_STATE, "mode", "off")
    _STATE.mode = mode
    try:
        yield
    finally:
        _STATE.mode = old


def check(pred: Any, msg: str, **fmt: Any) -> None:
    """``checkify.check(pred, msg, **fmt)`` when checked mode is on; nothing otherwise."""
    if enabled():
        checkify.check(jnp.asarray(pred), msg, **fmt)


def refuse_values(values: Any, bad: Callable[[Any], Any], name: str, allowed: str) -> None:
    """Checks data ``values`` with the predicate ``bad`` (True where a value is not
    allowed; written with operators so that it takes NumPy and JAX arrays alike).

    Concrete values: ``ValueError`` naming ``name``, the first bad value, its index and
    ``allowed``. Traced values: reported by `checked` (the first bad value and its flat
    index); outside it nothing is checked, and the caller documents what happens.
    """
    if isinstance(values, jax.core.Tracer):
        if enabled():
            v = values.astype(jnp.int32) if jnp.issubdtype(values.dtype, jnp.integer) \
                else values
            flags = jnp.asarray(bad(v)).reshape(-1)
            flat = jnp.argmax(flags)
            check(~jnp.any(flags), f"{name} has value {{value}} at flat index {{index}}; "
                  f"allowed: {allowed}", value=v.reshape(-1)[flat], index=flat)
        return
    v = np.asarray(values)
    flags = np.asarray(bad(v.astype(np.int64) if v.dtype.kind in "iu" else v))
    if flags.any():
        idx = tuple(int(i) for i in np.argwhere(flags)[0])
        raise ValueError(f"{name} holds {v[idx].item()!r} at index {idx}; allowed: {allowed}")


def first_lane(bad: jax.Array) -> jax.Array:
    """Index of the first True lane of ``bad`` (0 if none): for error messages."""
    return jnp.argmax(bad).astype(jnp.int32)


def checked(fn: Callable[..., Any], *, nan_inf: bool = False) -> Callable[..., tuple[Any, Any]]:
    """Wraps ``fn`` so that jaxwarp reports undefined behaviour instead of modelling it.

    Args:
        fn: a function using jaxwarp intrinsics.
        nan_inf: also report NaN or inf operands of ``mma_sync``.

    Returns:
        A function returning ``(error, out)`` like ``checkify.checkify``: call
        ``error.throw()`` to raise, or ``error.get()`` for the message (None if clean).
        It can be jitted and vmapped.

    Example:
        >>> err, y = jaxwarp.checked(lambda x: jaxwarp.shfl_sync(0xFFFF, x, 20))(jnp.arange(32))
        >>> "lane 0 reads source lane 20" in err.get()  # the message names lane and source
        True
    """

    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__} {fn!r}")
    if _MODE_STATE is None:
        # No jit-key state: trace the undecorated function so that a cached
        # check-free trace of jax.jit(f) is not reused (and not polluted).
        fn = getattr(fn, "__wrapped__", fn) if hasattr(fn, "lower") else fn

    @functools.wraps(fn)
    def inner(*args, **kwargs):
        with _enable(nan_inf):
            return fn(*args, **kwargs)

    return checkify.checkify(inner, errors=checkify.user_checks)
