"""DPX: the Hopper dynamic-programming min/max instructions, bit-exact.

CUDA 12 exposes them as ``__vimax3_s32``, ``__viaddmin_s16x2_relu``, ``__vibmax_u32``
and so on (sm_90 runs them in hardware, older GPUs emulate them). Each function here
reproduces one of them bit for bit, checked against all 65536 operand triples of the
H100 capture (``warp.npz``: ``dpx_a/b/c``, ``dpx_out``, ``dpx_pred``).

A name reads ``vi{op}_{kind}[_relu]``, as in CUDA without the leading underscores.

``kind`` says how the 32-bit word is read:

* ``s32`` / ``u32``: one signed / unsigned 32-bit integer;
* ``s16x2`` / ``u16x2``: two 16-bit integers, each worked on independently::

      bit  31            16 15             0
          +----------------+----------------+
          |   hi element   |   lo element   |
          +----------------+----------------+

``op`` is one of:

==========  =================================================================
``max3``    ``max(a, b, c)``                       (``min3`` likewise)
``max``     ``max(a, b)``, only with ``_relu``     (``min`` likewise)
``addmax``  ``max(a + b, c)``; the addition wraps modulo 2**32, or 2**16 per
            half, without saturation               (``addmin`` likewise)
``bmax``    ``max(a, b)`` and the predicate ``a >= b``; ``bmin``: ``min(a, b)``
            and ``a <= b``. Both are true on equality (measured on the H100);
            ``x2`` kinds give one predicate per half, hi first.
==========  =================================================================

``_relu`` (signed kinds only) clamps each result element below at 0: ``max(r, 0)``.

Inputs are int32 or uint32 arrays (either is accepted and its bits read with the
function's signedness) or Python ints that fit in 32 bits; operands broadcast against
each other and may have any shape, so ``jax.jit`` and ``jax.vmap`` apply directly.
As in CUDA, ``s32`` functions return int32 and all others uint32 (``s16x2`` results
are packed halves); predicates are bool.
"""

from __future__ import annotations

import inspect
import textwrap
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxwarp._src import checks

__all__ = [
    "DPX_FUNCTIONS",
    "DPX_PRED_FUNCTIONS",
    "vimax3_s32",
    "vimax3_s16x2",
    "vimax3_u32",
    "vimax3_u16x2",
    "vimin3_s32",
    "vimin3_s16x2",
    "vimin3_u32",
    "vimin3_u16x2",
    "vimax_s32_relu",
    "vimax_s16x2_relu",
    "vimin_s32_relu",
    "vimin_s16x2_relu",
    "vimax3_s32_relu",
    "vimax3_s16x2_relu",
    "vimin3_s32_relu",
    "vimin3_s16x2_relu",
    "vibmax_s32",
    "vibmax_u32",
    "vibmax_s16x2",
    "vibmax_u16x2",
    "vibmin_s32",
    "vibmin_u32",
    "vibmin_s16x2",
    "vibmin_u16x2",
    "viaddmax_s32",
    "viaddmax_s16x2",
    "viaddmax_u32",
    "viaddmax_u16x2",
    "viaddmin_s32",
    "viaddmin_s16x2",
    "viaddmin_u32",
    "viaddmin_u16x2",
    "viaddmax_s32_relu",
    "viaddmax_s16x2_relu",
    "viaddmin_s32_relu",
    "viaddmin_s16x2_relu",
]

_ARG_NAMES = ("a", "b", "c")


def _as_u32(value: Any, name: str) -> jax.Array:
    """Returns a 32-bit integer operand as uint32 bits, or raises naming ``name``."""
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a 32-bit integer (int32 or uint32) array, got bool")
    if isinstance(value, (int, np.integer)) and not isinstance(value, (np.int32, np.uint32)):
        # Python ints and NumPy integer scalars: exact values, checked to fit.
        if not -(2**31) <= int(value) < 2**32:
            raise ValueError(f"{name}={int(value)} does not fit in 32 bits; "
                             f"allowed: -2**31 .. 2**32 - 1")
        return jnp.uint32(int(value) & 0xFFFFFFFF)
    if value is None or isinstance(value, (str, bytes, float, complex)):
        raise TypeError(f"{name} must be a 32-bit integer (int32 or uint32) array or a Python "
                        f"int, got {type(value).__name__} {value!r}")
    arr = checks.array_arg(value, name, complex_ok=True)
    if arr.dtype not in (jnp.dtype(jnp.int32), jnp.dtype(jnp.uint32)):
        raise TypeError(f"{name} must be a 32-bit integer (int32 or uint32) array, "
                        f"got dtype {arr.dtype}")
    return _u32(arr) if arr.dtype == jnp.int32 else arr


def _i32(u: jax.Array) -> jax.Array:
    return lax.bitcast_convert_type(u, jnp.int32)


def _u32(i: jax.Array) -> jax.Array:
    return lax.bitcast_convert_type(i, jnp.uint32)


# Element views of a 32-bit word: _split gives the elements (hi first) in 32-bit integers
# that compare them exactly; _pack puts result elements back into uint32 bits.


def _split(u: jax.Array, kind: str) -> list[jax.Array]:
    if kind == "s32":
        return [_i32(u)]
    if kind == "u32":
        return [u]
    if kind == "s16x2":  # sign-extended halves
        return [_i32(u) >> 16, _i32(u << 16) >> 16]
    return [u >> 16, u & jnp.uint32(0xFFFF)]


def _pack(elems: list[jax.Array], kind: str) -> jax.Array:
    if kind == "s32":
        return _u32(elems[0])
    if kind == "u32":
        return elems[0]
    hi, lo = (_u32(e) for e in elems) if kind == "s16x2" else elems
    return (hi << 16) | (lo & jnp.uint32(0xFFFF))


def _wrapping_add(x: jax.Array, y: jax.Array, kind: str) -> jax.Array:
    if kind == "s32":
        return _i32(_u32(x) + _u32(y))
    if kind == "s16x2":  # exact int32 sum of two int16, then sign-extend its low half
        return ((x + y) << 16) >> 16
    if kind == "u16x2":
        return (x + y) & jnp.uint32(0xFFFF)
    return x + y


# op -> (arity, formula, element function of (elements..., kind)).
_OPS: dict[str, tuple[int, str, Callable[..., jax.Array]]] = {
    "max3": (3, "max(a, b, c)", lambda a, b, c, k: jnp.maximum(jnp.maximum(a, b), c)),
    "min3": (3, "min(a, b, c)", lambda a, b, c, k: jnp.minimum(jnp.minimum(a, b), c)),
    "max": (2, "max(a, b)", lambda a, b, k: jnp.maximum(a, b)),
    "min": (2, "min(a, b)", lambda a, b, k: jnp.minimum(a, b)),
    "addmax": (3, "max(a + b, c)", lambda a, b, c, k: jnp.maximum(_wrapping_add(a, b, k), c)),
    "addmin": (3, "min(a + b, c)", lambda a, b, c, k: jnp.minimum(_wrapping_add(a, b, k), c)),
    "bmax": (2, "max(a, b)", lambda a, b, k: jnp.maximum(a, b)),
    "bmin": (2, "min(a, b)", lambda a, b, k: jnp.minimum(a, b)),
}
# Predicates of the vib* functions: (formula, comparison).
_PREDS = {"bmax": ("a >= b", jnp.greater_equal), "bmin": ("a <= b", jnp.less_equal)}

_KIND_TEXT = {
    "s32": "signed 32-bit integers",
    "u32": "unsigned 32-bit integers",
    "s16x2": "each signed 16-bit half (hi, lo) independently",
    "u16x2": "each unsigned 16-bit half (hi, lo) independently",
}

# Docstring examples: operands per kind, and what each function prints for them (the
# doctests in tests/test_dpx.py check these). x2 operands: a = (5, -2), b = (-7, 3),
# c = (2, 1) read as s16x2; (5, 65534), (65529, 3), (2, 1) as u16x2.
_EXAMPLE_ARGS = {
    "s32": ("jnp.int32(-5)", "jnp.int32(3)", "jnp.int32(-7)"),
    "u32": ("jnp.uint32(5)", "jnp.uint32(3)", "jnp.uint32(7)"),
    "s16x2": ("jnp.uint32(0x0005FFFE)", "jnp.uint32(0xFFF90003)", "jnp.uint32(0x00020001)"),
}
_EXAMPLE_ARGS["u16x2"] = _EXAMPLE_ARGS["s16x2"]
_EXAMPLE_OUTPUTS = {
    "vimax3_s32": 'Array(3, dtype=int32)',
    "vimax3_s16x2": "'0x00050003'",
    "vimax3_u32": 'Array(7, dtype=uint32)',
    "vimax3_u16x2": "'0xfff9fffe'",
    "vimin3_s32": 'Array(-7, dtype=int32)',
    "vimin3_s16x2": "'0xfff9fffe'",
    "vimin3_u32": 'Array(3, dtype=uint32)',
    "vimin3_u16x2": "'0x00020001'",
    "vimax_s32_relu": 'Array(3, dtype=int32)',
    "vimax_s16x2_relu": "'0x00050003'",
    "vimin_s32_relu": 'Array(0, dtype=int32)',
    "vimin_s16x2_relu": "'0x00000000'",
    "vimax3_s32_relu": 'Array(3, dtype=int32)',
    "vimax3_s16x2_relu": "'0x00050003'",
    "vimin3_s32_relu": 'Array(0, dtype=int32)',
    "vimin3_s16x2_relu": "'0x00000000'",
    "vibmax_s32": '(Array(3, dtype=int32), Array(False, dtype=bool))',
    "vibmax_u32": '(Array(5, dtype=uint32), Array(True, dtype=bool))',
    "vibmax_s16x2": "('0x00050003', True, False)",
    "vibmax_u16x2": "('0xfff9fffe', False, True)",
    "vibmin_s32": '(Array(-5, dtype=int32), Array(True, dtype=bool))',
    "vibmin_u32": '(Array(3, dtype=uint32), Array(False, dtype=bool))',
    "vibmin_s16x2": "('0xfff9fffe', False, True)",
    "vibmin_u16x2": "('0x00050003', True, False)",
    "viaddmax_s32": 'Array(-2, dtype=int32)',
    "viaddmax_s16x2": "'0x00020001'",
    "viaddmax_u32": 'Array(8, dtype=uint32)',
    "viaddmax_u16x2": "'0xfffe0001'",
    "viaddmin_s32": 'Array(-7, dtype=int32)',
    "viaddmin_s16x2": "'0xfffe0001'",
    "viaddmin_u32": 'Array(7, dtype=uint32)',
    "viaddmin_u16x2": "'0x00020001'",
    "viaddmax_s32_relu": 'Array(0, dtype=int32)',
    "viaddmax_s16x2_relu": "'0x00020001'",
    "viaddmin_s32_relu": 'Array(0, dtype=int32)',
    "viaddmin_s16x2_relu": "'0x00000001'",
}


def _parse(name: str) -> tuple[str, str, bool]:
    """``"viaddmax_s16x2_relu"`` -> ``("addmax", "s16x2", True)``."""
    parts = name.removeprefix("vi").split("_")
    return parts[0], parts[1], parts[-1] == "relu"


def _bits_fn(name: str) -> Callable[..., jax.Array]:
    """The uint32 bits -> uint32 bits kernel of DPX function ``name`` (vib*: the value)."""
    op, kind, relu = _parse(name)
    elem = _OPS[op][2]

    def kernel(*us: jax.Array) -> jax.Array:
        out = []
        for elems in zip(*(_split(u, kind) for u in jnp.broadcast_arrays(*us)), strict=True):
            r = elem(*elems, kind)
            out.append(jnp.maximum(r, jnp.int32(0)) if relu else r)
        return _pack(out, kind)

    kernel.__name__ = f"_{name}_bits"
    return jax.jit(kernel)


def _pred_bits_fn(name: str, half: int) -> Callable[[jax.Array, jax.Array], jax.Array]:
    """The uint32 0/1 predicate of vib* function ``name`` (element ``half``: 0 = hi)."""
    op, kind, _ = _parse(name)
    compare = _PREDS[op][1]

    def kernel(ua: jax.Array, ub: jax.Array) -> jax.Array:
        return compare(_split(ua, kind)[half], _split(ub, kind)[half]).astype(jnp.uint32)

    kernel.__name__ = f"_{name}_pred{half}_bits"
    return jax.jit(kernel)


def _wrap(text: str, indent: str, first: str | None = None) -> str:
    return textwrap.fill(text, 88, initial_indent=indent if first is None else first,
                         subsequent_indent=indent)


def _docstring(name: str) -> str:
    """Google-style docstring of DPX function ``name``, with a doctested example."""
    op, kind, relu = _parse(name)
    arity, formula, _ = _OPS[op]
    out_dtype = "int32" if kind == "s32" else "uint32"
    pair = kind.endswith("x2")
    packed = " (the two 16-bit results packed, hi in bits 31..16)" if pair else ""
    what = f"``{formula}``"
    if op in _PREDS:
        what += f" and the predicate ``{_PREDS[op][0]}`` (true on equality)"
    if relu:
        what += ", clamped below at 0 (ReLU)"
    wraps = "; the addition wraps around, without saturation" if op.startswith("add") else ""
    args = "\n".join(
        _wrap(f"{n}: int32 or uint32 array or Python int, read as {kind}; broadcasts "
              f"against the other operands.", " " * 8, " " * 6) for n in _ARG_NAMES[:arity])
    if op in _PREDS:
        preds = "pred_hi, pred_lo" if pair else "pred"
        pred_text = "the predicates are bool arrays" if pair else "the predicate is a bool array"
        returns = (f"``(value, {preds})``: ``value`` is an {out_dtype} array of the broadcast "
                   f"shape{packed}; {pred_text} of that shape.")
    else:
        returns = f"{out_dtype} array of the broadcast shape{packed}."
    call = f"{name}({', '.join(_EXAMPLE_ARGS[kind][:arity])})"
    if not pair:
        example = f">>> {call}"
    elif op in _PREDS:
        example = f'>>> r, hi, lo = {call}\n      >>> f"{{int(r):#010x}}", bool(hi), bool(lo)'
    else:
        example = f'>>> r = {call}\n      >>> f"{{int(r):#010x}}"'
    body = _wrap(f"Computed on {_KIND_TEXT[kind]}{wraps}. Bit-exact with the H100 on every "
                 f"operand of the capture.", " " * 4)
    return f"""CUDA ``__{name}``: {what}.

{body}

    Args:
{args}

    Returns:
{_wrap(returns, " " * 6)}

    Raises:
      TypeError: an operand is not a 32-bit integer (int32, uint32 or Python int); the
        message names it.

    Example:
      >>> import jax.numpy as jnp
      {example}
      {_EXAMPLE_OUTPUTS[name]}
    """


def _dpx(name: str) -> Callable[..., Any]:
    """Builds the public function ``name``: checks, reinterprets, dispatches to kernels."""
    op, kind, _ = _parse(name)
    value_fn = _bits_fn(name)
    halves = range(2 if kind.endswith("x2") else 1) if op in _PREDS else ()
    pred_fns = [_pred_bits_fn(name, h) for h in halves]
    signature = inspect.Signature(
        [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD)
         for n in _ARG_NAMES[:_OPS[op][0]]])

    def fn(*args: Any, **kwargs: Any) -> Any:
        try:
            bound = signature.bind(*args, **kwargs).arguments
        except TypeError as e:
            raise TypeError(f"{name}{signature}: {e}") from None
        us = [_as_u32(v, n) for n, v in bound.items()]
        try:
            jnp.broadcast_shapes(*(u.shape for u in us))
        except ValueError:
            shapes = ", ".join(f"{n} {tuple(u.shape)}" for n, u in zip(bound, us, strict=True))
            raise ValueError(f"{name}: operand shapes do not broadcast: {shapes}") from None
        value = value_fn(*us)
        value = _i32(value) if kind == "s32" else value
        if op not in _PREDS:
            return value
        ua, ub = jnp.broadcast_arrays(*us)
        return (value, *(p(ua, ub).astype(jnp.bool_) for p in pred_fns))

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = _docstring(name)
    fn.__signature__ = signature
    return fn


vimax3_s32 = _dpx("vimax3_s32")
vimax3_s16x2 = _dpx("vimax3_s16x2")
vimax3_u32 = _dpx("vimax3_u32")
vimax3_u16x2 = _dpx("vimax3_u16x2")
vimin3_s32 = _dpx("vimin3_s32")
vimin3_s16x2 = _dpx("vimin3_s16x2")
vimin3_u32 = _dpx("vimin3_u32")
vimin3_u16x2 = _dpx("vimin3_u16x2")
vimax_s32_relu = _dpx("vimax_s32_relu")
vimax_s16x2_relu = _dpx("vimax_s16x2_relu")
vimin_s32_relu = _dpx("vimin_s32_relu")
vimin_s16x2_relu = _dpx("vimin_s16x2_relu")
vimax3_s32_relu = _dpx("vimax3_s32_relu")
vimax3_s16x2_relu = _dpx("vimax3_s16x2_relu")
vimin3_s32_relu = _dpx("vimin3_s32_relu")
vimin3_s16x2_relu = _dpx("vimin3_s16x2_relu")
vibmax_s32 = _dpx("vibmax_s32")
vibmax_u32 = _dpx("vibmax_u32")
vibmax_s16x2 = _dpx("vibmax_s16x2")
vibmax_u16x2 = _dpx("vibmax_u16x2")
vibmin_s32 = _dpx("vibmin_s32")
vibmin_u32 = _dpx("vibmin_u32")
vibmin_s16x2 = _dpx("vibmin_s16x2")
vibmin_u16x2 = _dpx("vibmin_u16x2")
viaddmax_s32 = _dpx("viaddmax_s32")
viaddmax_s16x2 = _dpx("viaddmax_s16x2")
viaddmax_u32 = _dpx("viaddmax_u32")
viaddmax_u16x2 = _dpx("viaddmax_u16x2")
viaddmin_s32 = _dpx("viaddmin_s32")
viaddmin_s16x2 = _dpx("viaddmin_s16x2")
viaddmin_u32 = _dpx("viaddmin_u32")
viaddmin_u16x2 = _dpx("viaddmin_u16x2")
viaddmax_s32_relu = _dpx("viaddmax_s32_relu")
viaddmax_s16x2_relu = _dpx("viaddmax_s16x2_relu")
viaddmin_s32_relu = _dpx("viaddmin_s32_relu")
viaddmin_s16x2_relu = _dpx("viaddmin_s16x2_relu")

#: The ``dpx_out`` rows of the H100 capture, in order: (name, fn, arity); each fn maps
#: uint32 operand bits to uint32 result bits (the value only, for vib*).
DPX_FUNCTIONS: tuple[tuple[str, Callable[..., jax.Array], int], ...] = tuple(
    (name, _bits_fn(name), _OPS[_parse(name)[0]][0])
    for name in (
        "vimax3_s32", "vimax3_s16x2", "vimax3_u32", "vimax3_u16x2",
        "vimin3_s32", "vimin3_s16x2", "vimin3_u32", "vimin3_u16x2",
        "vimax_s32_relu", "vimax_s16x2_relu", "vimin_s32_relu", "vimin_s16x2_relu",
        "vimax3_s32_relu", "vimax3_s16x2_relu", "vimin3_s32_relu", "vimin3_s16x2_relu",
        "vibmax_s32", "vibmax_u32", "vibmax_s16x2", "vibmax_u16x2",
        "vibmin_s32", "vibmin_u32", "vibmin_s16x2", "vibmin_u16x2",
        "viaddmax_s32", "viaddmax_s16x2", "viaddmax_u32", "viaddmax_u16x2",
        "viaddmin_s32", "viaddmin_s16x2", "viaddmin_u32", "viaddmin_u16x2",
        "viaddmax_s32_relu", "viaddmax_s16x2_relu", "viaddmin_s32_relu", "viaddmin_s16x2_relu",
    )
)

#: The ``dpx_pred`` rows of the H100 capture, in order: (name, fn(a, b) -> uint32 0/1).
DPX_PRED_FUNCTIONS: tuple[tuple[str, Callable[[jax.Array, jax.Array], jax.Array]], ...] = tuple(
    (f"{name}_{label}", _pred_bits_fn(name, half))
    for op in ("bmax", "bmin")
    for name, halves in (
        (f"vi{op}_s32", (("pred", 0),)),
        (f"vi{op}_u32", (("pred", 0),)),
        (f"vi{op}_s16x2", (("pred_hi", 0), ("pred_lo", 1))),
        (f"vi{op}_u16x2", (("pred_hi", 0), ("pred_lo", 1))),
    )
    for label, half in halves
)
