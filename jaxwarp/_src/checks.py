"""Argument checking shared by every module.

Static arguments (widths, formats, shapes, layouts, ops) must be concrete Python
values at trace time; data arguments (values, lanes, masks) are arrays and may be
traced. Every failure names the argument, what was given and what is allowed.

64-bit policy (one rule for every public entry point). JAX narrows 64-bit inputs
to 32 bits when ``jax_enable_x64`` is off, before any check could see them, which
would silently lose precision or high bits. So every data argument is inspected
*before* ``jnp.asarray`` (`array_arg`):

* a NumPy (or JAX) array or NumPy scalar of a 64-bit type (int64, uint64, float64,
  complex128) raises ``TypeError`` naming the argument while x64 is off; with x64
  on it is used exactly (or rejected by the argument's own dtype rule);
* Python ints, floats and lists of them are weakly typed: they are fine when they
  fit (a Python int that does not fit in 32 bits raises ``ValueError``);
* NumPy *integer scalars* given for an integer-scalar argument (a mask, a lane
  index, ``ns``, a DPX operand) count as Python ints: exact, value-checked.

Under ``jax.jit`` JAX narrows a 64-bit *argument of the jitted function* itself,
before jaxwarp sees it; only 64-bit values closed over (constants) can be caught
there. Enable x64 or cast to 32 bits before calling a jitted function.

Masks: Python ints (and NumPy integer scalars) must fit in 32 bits, signed or
unsigned: -2**31 .. 2**32 - 1. A negative value is read as its 32-bit two's complement,
as CUDA converts an ``int`` argument to the ``unsigned`` mask (``-1`` is the full mask,
as in ``__shfl_sync(-1, ...)``); anything wider (``2**32``, ``2**33 - 1``,
``np.uint64(2**64 - 1)``) is an error, never truncated. int32 arrays are read as their
bits likewise.
"""

from __future__ import annotations

import functools
import inspect
import operator
import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

try:  # jax >= 0.4.36 moved it; the old name warns and will go away.
    from jax.extend.core import concrete_or_error as _concrete_or_error
except ImportError:  # pragma: no cover
    from jax.core import concrete_or_error as _concrete_or_error

WARP_SIZE = 32


def static_int(value: Any, name: str) -> int:
    """Returns ``value`` as a Python int, or raises naming ``name`` if it is traced."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be a Python int, got bool {value!r}")
    try:
        return _concrete_or_error(
            operator.index,
            value,
            f"{name} is a static argument and must be a concrete Python int, not a traced "
            f"value (mark it static in jax.jit via static_argnums/static_argnames)",
        )
    except TypeError as e:
        if isinstance(e, jax.errors.ConcretizationTypeError):
            raise
        raise TypeError(f"{name} must be a Python int, got {type(value).__name__} {value!r}") from e


def renamed_keywords(public_name: str, **renames: str) -> Callable[[Callable], Callable]:
    """Decorator: keyword ``old`` of ``fn`` is now ``new`` (``renames``: ``old="new"``).

    The old keyword keeps working for a release: it is passed on as the new one, with a
    ``DeprecationWarning`` naming the new one; giving both is a ``TypeError``. The
    function's signature lists the old keywords as keyword-only (default None), so
    ``jax.jit(fn, static_argnames="old")`` keeps working too.

    Example:
        >>> @renamed_keywords("f", fmt="operand_format")
        ... def f(x, operand_format="e4m3"):
        ...     return operand_format
        >>> import warnings
        >>> with warnings.catch_warnings(record=True) as w:
        ...     warnings.simplefilter("always")
        ...     print(f(1, fmt="e5m2"), str(w[0].message))
        e5m2 f: fmt= is deprecated; use operand_format= (fmt= will be removed)
    """

    def decorate(fn: Callable) -> Callable:
        sig = inspect.signature(fn)
        for old, new in renames.items():
            if new not in sig.parameters or old in sig.parameters:
                raise ValueError(f"renamed_keywords({public_name!r}, {old}={new!r}): "
                                 f"{new!r} must be a parameter and {old!r} must not")

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            for old, new in renames.items():
                if old in kwargs:
                    value = kwargs.pop(old)
                    if new in sig.bind_partial(*args, **kwargs).arguments:
                        raise TypeError(f"{public_name}() got both {new}= and its old name "
                                        f"{old}=; pass only {new}=")
                    warnings.warn(f"{public_name}: {old}= is deprecated; use {new}= ({old}= "
                                  f"will be removed)", DeprecationWarning, stacklevel=2)
                    kwargs[new] = value
            return fn(*args, **kwargs)

        params = list(sig.parameters.values())
        tail = [p for p in params if p.kind is inspect.Parameter.VAR_KEYWORD]
        head = [p for p in params if p.kind is not inspect.Parameter.VAR_KEYWORD]
        head += [inspect.Parameter(old, inspect.Parameter.KEYWORD_ONLY, default=None)
                 for old in renames]
        wrapper.__signature__ = sig.replace(parameters=head + tail)
        return wrapper

    return decorate


def static_choice(value: Any, name: str, allowed: Iterable[Any]) -> Any:
    """Checks that a static ``value`` is one of ``allowed``."""
    allowed = tuple(allowed)
    if isinstance(value, jax.core.Tracer):
        raise TypeError(
            f"{name} is a static argument and must be a concrete Python value, "
            f"not a traced value; allowed: {allowed}"
        )
    if value not in allowed:
        raise ValueError(f"{name}={value!r} is not supported; allowed: {allowed}")
    return value


_X64_HINT = ("enable x64 (jax.config.update('jax_enable_x64', True)) or cast to 32 bits "
             "(x64 is off, so JAX would silently narrow it to 32 bits)")


def format_name(value: Any, name: str, allowed: Iterable[str] | None = None,
                aliases: Mapping[str, str] | None = None, *, need_x64: bool = True) -> Any:
    """The canonical format name of a static format argument, or raises naming ``name``.

    Accepts a format name (``"f16"``, ``"e4m3"``, ...), one of ``aliases`` (the format
    registry's, e.g. ``"float16"``, ``"fp8_e4m3"``), or a dtype that names a format
    (``jnp.bfloat16``, ``np.float16``, ``jnp.float8_e4m3fn``, ``np.dtype("int8")``: its
    name is looked up in ``aliases``). A tuple or list is checked item by item and
    returned as a tuple (an (a, b) pair of formats). ``allowed`` None accepts any name
    (the caller checks it). An allowed ``"f64"`` with x64 off raises ``RuntimeError``
    telling the user to enable ``jax_enable_x64`` (unless ``need_x64`` is False: the
    caller checks it later, after the checks that come first for it).
    """
    if isinstance(value, (tuple, list)):
        return tuple(format_name(v, name, allowed, aliases, need_x64=need_x64) for v in value)
    allowed = None if allowed is None else tuple(allowed)
    aliases = aliases or {}
    if isinstance(value, jax.core.Tracer):
        raise TypeError(f"{name} is a static argument and must be a format name, not a "
                        f"traced value; allowed: {allowed}")
    if isinstance(value, str):
        canonical = aliases.get(value, value)
    elif value is None or isinstance(value, (bool, int, float, complex)):
        canonical = None
    else:
        try:
            dtype = np.dtype(value)
        except TypeError:
            canonical = None
        else:
            canonical = aliases.get(dtype.name, dtype.name)
    if canonical is None or allowed is not None and canonical not in allowed:
        raise ValueError(f"{name}={value!r} is not supported; allowed: {allowed} (format "
                         f"names, their aliases, or the dtypes that name them)")
    if canonical == "f64" and allowed is not None and need_x64:
        require_x64(f"{name}={value!r}")
    return canonical


def x64_enabled() -> bool:
    """True when ``jax_enable_x64`` is on (64-bit types are kept)."""
    return bool(jax.config.jax_enable_x64)


def _is_weak(x: Any) -> bool:
    """Python numbers (not NumPy scalars) and lists/tuples: weakly typed inputs."""
    if isinstance(x, np.generic):
        return False
    return isinstance(x, (bool, int, float, complex, list, tuple))


def check_64bit(x: Any, name: str) -> None:
    """Raises ``TypeError`` if ``x`` has a 64-bit dtype that JAX would narrow (x64 off).

    Python numbers and lists are weakly typed and pass; use before ``jnp.asarray``.
    """
    if _is_weak(x) or x64_enabled():
        return
    dtype = getattr(x, "dtype", None)
    if dtype is None:
        return
    try:
        dtype = np.dtype(dtype)
    except TypeError:
        return
    if dtype.kind in "iuf" and dtype.itemsize >= 8 or dtype.kind == "c" and dtype.itemsize >= 16:
        raise TypeError(f"{name} has 64-bit dtype {dtype}: {_X64_HINT}")


def array_arg(x: Any, name: str, *, complex_ok: bool = False) -> jax.Array:
    """Returns a data argument as a JAX array, or raises naming ``name``.

    Applies the 64-bit policy (`check_64bit`), rejects ``None``, strings, objects,
    ragged lists and (unless ``complex_ok``) complex values, whose imaginary part
    would be dropped, and turns out-of-range Python ints into ``ValueError``.
    """
    if x is None or isinstance(x, (str, bytes)):
        raise TypeError(f"{name} must be a numeric array, got {type(x).__name__} {x!r}")
    check_64bit(x, name)
    if isinstance(x, (list, tuple)):
        try:
            kind = np.asarray(x).dtype.kind
        except (ValueError, TypeError) as e:
            raise TypeError(f"{name} must be a numeric array; the {type(x).__name__} given "
                            f"does not convert to one ({e})") from None
        if kind not in "biufc":
            raise TypeError(f"{name} must be a numeric array, got a {type(x).__name__} of "
                            f"{np.asarray(x).dtype} values")
    try:
        arr = x if isinstance(x, jax.Array) else jnp.asarray(x)
    except OverflowError as e:
        raise ValueError(f"{name} does not fit in 32 bits ({e}); {_X64_HINT}") from None
    except (TypeError, ValueError) as e:
        raise TypeError(f"{name} must be a numeric array, got {type(x).__name__} "
                        f"({e})") from None
    if not complex_ok and jnp.issubdtype(arr.dtype, jnp.complexfloating):
        raise TypeError(f"{name} must be real, got complex dtype {arr.dtype} (its imaginary "
                        f"part would be dropped)")
    return arr


def array_args(**named: Any) -> tuple[jax.Array, ...]:
    """`array_arg` on each keyword argument, in order: ``a, b = array_args(a=a, b=b)``.

    The first line of an entry point that takes several data arguments, so that each is
    checked (and named) before anything converts it.
    """
    return tuple(array_arg(x, name) for name, x in named.items())


def check_64bit_args(**named: Any) -> None:
    """`check_64bit` on each keyword argument, for entry points that convert their data
    themselves (a Python scalar that must take the argument's own dtype)."""
    for name, x in named.items():
        check_64bit(x, name)


def lane_array(var: Any, name: str = "var", *, complex_ok: bool = False) -> jax.Array:
    """Checks that ``var`` has a leading lane axis of size 32 and returns it as an array."""
    arr = array_arg(var, name, complex_ok=complex_ok)
    if arr.ndim == 0 or arr.shape[0] != WARP_SIZE:
        raise ValueError(
            f"{name} must have a leading lane axis of size {WARP_SIZE} (one entry per lane); "
            f"got shape {tuple(arr.shape)}. Use jax.vmap for many warps."
        )
    return arr


def mask_value(mask: Any, name: str = "mask") -> int | None:
    """The concrete 32-bit value of a scalar mask given as a Python/NumPy int, else None.

    Python ints and NumPy integer scalars must be in -2**31 .. 2**32 - 1; negative values
    are read as their 32 bits (``-1`` is ``0xFFFFFFFF``, as CUDA converts an ``int``).
    Raises naming ``name``.
    """
    if isinstance(mask, (bool, np.bool_)):
        raise TypeError(f"{name} must be a 32-bit integer lane mask, got bool {mask!r}")
    if isinstance(mask, np.int32):
        return int(mask) & 0xFFFFFFFF
    if isinstance(mask, (int, np.integer)):
        if not -(2**31) <= int(mask) < 2**32:
            raise ValueError(
                f"{name}={int(mask):#x} does not fit in 32 bits (a lane mask); allowed: "
                f"0 .. 0xFFFFFFFF, or -2**31 .. -1 read as 32-bit two's complement")
        return int(mask) & 0xFFFFFFFF
    return None


def mask_array(mask: Any, name: str = "mask") -> jax.Array:
    """Returns a 32-bit lane mask as a uint32 scalar or (32,) array (each lane passes its own).

    Python ints (and NumPy integer scalars) must be in -2**31 .. 2**32 - 1; arrays must have
    dtype uint32 or int32 (int32 bits are reinterpreted, as CUDA converts ``int``).
    """
    value = mask_value(mask, name)
    if value is not None:
        return jnp.uint32(value)
    allowed = "uint32 or int32 scalar or (32,) array, or a Python int in -2**31 .. 0xFFFFFFFF"
    if mask is None or isinstance(mask, (str, bytes, float, complex)):
        raise TypeError(f"{name} must be a 32-bit integer lane mask ({allowed}), got "
                        f"{type(mask).__name__} {mask!r}")
    arr = array_arg(mask, name, complex_ok=True)
    if arr.dtype not in (jnp.dtype(jnp.uint32), jnp.dtype(jnp.int32)):
        raise TypeError(
            f"{name} must be a 32-bit integer lane mask (uint32 or int32, or a Python int), "
            f"got dtype {arr.dtype}"
        )
    if arr.shape not in ((), (WARP_SIZE,)):
        raise ValueError(
            f"{name} must be a scalar or one mask per lane with shape ({WARP_SIZE},), "
            f"got shape {tuple(arr.shape)}"
        )
    return arr.astype(jnp.uint32) if arr.dtype != jnp.uint32 else arr


def int_value(value: Any, name: str) -> int | None:
    """A Python int or NumPy integer scalar as a 32-bit-checked Python int, else None.

    Allowed: -2**31 .. 2**32 - 1 (signed or unsigned 32-bit). bool raises.
    """
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be an integer or a (32,) integer array, got bool")
    if isinstance(value, (int, np.integer)):
        if not -(2**31) <= int(value) < 2**32:
            raise ValueError(f"{name}={int(value)} does not fit in 32 bits; allowed: "
                             f"-2**31 .. 2**32 - 1")
        return int(value)
    return None


def per_lane_int(value: Any, name: str) -> jax.Array:
    """Returns an int32 per-lane argument (Python int, scalar or (32,) integer array) as (32,)."""
    v = int_value(value, name)
    if v is not None:
        return jnp.full((WARP_SIZE,), np.int64(v).astype(np.uint32).view(np.int32), jnp.int32)
    if isinstance(value, (float, complex)) and not isinstance(value, np.generic):
        raise TypeError(f"{name} must be an integer or a (32,) integer array, got "
                        f"{type(value).__name__} {value!r}")
    arr = array_arg(value, name, complex_ok=True)
    if not jnp.issubdtype(arr.dtype, jnp.integer):
        raise TypeError(
            f"{name} must be an integer or a (32,) integer array, got dtype {arr.dtype}"
        )
    if arr.shape not in ((), (WARP_SIZE,)):
        raise ValueError(
            f"{name} must be a scalar or one value per lane with shape ({WARP_SIZE},), "
            f"got shape {tuple(arr.shape)}"
        )
    return jnp.broadcast_to(arr.astype(jnp.int32), (WARP_SIZE,))


def require_x64(what: str) -> None:
    """Raises a clear error if 64-bit types are needed but ``jax_enable_x64`` is off."""
    if not jax.config.jax_enable_x64:
        raise RuntimeError(
            f"{what} needs 64-bit types: call jax.config.update('jax_enable_x64', True) "
            f"(or set JAX_ENABLE_X64=1) before using it"
        )
