"""The WMMA API's functions on fragment types and values: lane maps, matrix <-> fragment,
``fill_fragment``.

Each takes a ``FragmentType`` or a ``Fragment`` (``fragment_types``); the lane-map
functions also take ``(use, m, n, k, type)``. The layouts themselves, with the rules that
give them and drawings, are in ``fragment_layouts``.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxwarp._src.catalogue import wmma_table as table
from jaxwarp._src.layouts import fragment_layouts, layouts
from jaxwarp._src.layouts.fragment_storage import unpack_values
from jaxwarp._src.layouts.fragment_types import (
    Fragment,
    FragmentType,
    check_storage,
    fragment,  # noqa: F401  (a name the doctests use)
    fragment_type,  # noqa: F401  (a name the doctests use)
    type_arg,
    value_arg,
)
from jaxwarp._src.numerics import bitops

# ----------------------------------------------------------------------------------------
# Lane maps of a type given as a FragmentType (or Fragment) or as (use, m, n, k, type).


def _type_of(use: Any, m: Any, n: Any, k: Any, type: Any, fname: str) -> FragmentType:
    """The checked FragmentType of ``(use, m, n, k, type)`` or of a FragmentType/Fragment
    given alone as ``use`` (layouts do not change where elements sit in registers)."""
    if isinstance(use, (FragmentType, Fragment)):
        extra = [name for name, v in (("m", m), ("n", n), ("k", k), ("type", type))
                 if v is not None]
        if extra:
            raise TypeError(f"{fname}: give a FragmentType (or Fragment) alone or "
                            f"(use, m, n, k, type); got a {use.__class__.__name__} and "
                            f"{', '.join(extra)}")
        return use if isinstance(use, FragmentType) else use.ftype
    missing = [name for name, v in (("m", m), ("n", n), ("k", k), ("type", type)) if v is None]
    if missing:
        raise TypeError(f"{fname}(use, m, n, k, type): missing {', '.join(missing)} (or pass "
                        f"one FragmentType, see fragment_type)")
    layout = None
    if use != "accumulator":  # any allowed layout: the registers do not depend on it
        layout = (table.entry(type).layouts(use)[0] if type in table.MULTIPLICAND_TYPES
                  else table.LAYOUTS[0])
    return FragmentType(use, m, n, k, type, layout)


def layout_bases(use: str | FragmentType | Fragment, m: int | None = None,
                 n: int | None = None, k: int | None = None, type: str | None = None
                 ) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """The linear layout of a fragment: (lane bases, element bases) as (row, col) pairs.

    Lane ``l``, element ``i`` holds logical element ``(row, col)`` = XOR of
    ``lane_bases[b]`` over the set bits ``b`` of ``l`` and of ``elem_bases[b]`` over the
    set bits of ``i``. A zero basis vector means repetition (f16 A/B).

    Args:
        use: ``"matrix_a"``, ``"matrix_b"`` or ``"accumulator"``; or a ``FragmentType``
            (or ``Fragment``), and then ``m``, ``n``, ``k``, ``type`` are omitted.
        m, n, k, type: the WMMA shape and element type (with a use name).

    Raises:
        ValueError: a fragment type the WMMA table does not have.
        TypeError: both a FragmentType and ``m``/``n``/``k``/``type``, or some missing.

    Example:
        >>> layout_bases(fragment_type("accumulator", 16, 16, 16, "f32"))[1]
        [(0, 1), (8, 0), (0, 8)]
    """
    ft = _type_of(use, m, n, k, type, "layout_bases")
    return fragment_layouts.layout_bases_of(ft.use, ft.m, ft.n, ft.k, ft.type)


def lane_map(use: str | FragmentType | Fragment, m: int | None = None, n: int | None = None,
             k: int | None = None, type: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Where each register element of a fragment type sits in its logical matrix.

    Args:
        use: ``"matrix_a"``, ``"matrix_b"`` or ``"accumulator"``; or a ``FragmentType``
            (or ``Fragment``), and then ``m``, ``n``, ``k``, ``type`` are omitted.
        m, n, k, type: the WMMA shape and element type (with a use name).

    Returns:
        ``(rows, cols)``, read-only int32 arrays ``(32, num_elements)``: the logical
        element held by lane ``l`` as element ``i`` (sub-byte elements counted singly).

    Raises:
        ValueError: a fragment type the WMMA table does not have.
        TypeError: both a FragmentType and ``m``/``n``/``k``/``type``, or some missing.

    Example:
        >>> rows, cols = lane_map("accumulator", 16, 16, 16, "f32")
        >>> int(rows[5, 0]), int(cols[5, 0])
        (1, 2)
        >>> t = fragment_type("accumulator", 16, 16, 16, "f32")
        >>> all((a == b).all() for a, b in zip(lane_map(t), (rows, cols)))
        True
    """
    ft = _type_of(use, m, n, k, type, "lane_map")
    return fragment_layouts.lane_map_of(ft.use, ft.m, ft.n, ft.k, ft.type)


def register_layout(use: str | FragmentType | Fragment, m: int | None = None,
                    n: int | None = None, k: int | None = None,
                    type: str | None = None) -> layouts.Layout:
    """The :class:`~jaxwarp._src.layouts.layouts.Layout` of a fragment type's registers
    (what :func:`layout_bases` lists, as one hashable object).

    Args:
        use: ``"matrix_a"``, ``"matrix_b"`` or ``"accumulator"``; or a ``FragmentType``
            (or ``Fragment``), and then ``m``, ``n``, ``k``, ``type`` are omitted.
        m, n, k, type: the WMMA shape and element type (with a use name).

    Example:
        >>> lay = register_layout(fragment_type("accumulator", 16, 16, 16, "f32"))
        >>> lay.shape, lay.num_elements, lay.elem_bases
        ((16, 16), 8, ((0, 1), (8, 0), (0, 8)))
    """
    ft = _type_of(use, m, n, k, type, "register_layout")
    return fragment_layouts.register_layout_of(ft.use, ft.m, ft.n, ft.k, ft.type)


def _gather_maps(use: str | FragmentType | Fragment, m: int | None = None,
                 n: int | None = None, k: int | None = None, type: str | None = None):
    """(linear index per (lane, element), first flat (lane, element) per linear index)."""
    ft = _type_of(use, m, n, k, type, "_gather_maps")
    return fragment_layouts.gather_maps_of(ft.use, ft.m, ft.n, ft.k, ft.type)


def lane_map_text(use: str | FragmentType | Fragment, m: int | None = None,
                  n: int | None = None, k: int | None = None, type: str | None = None) -> str:
    """Draws a fragment layout as an ASCII grid: cell (row, col) = ``lane:i``.

    Where an element is held more than once (f16 A/B), the first (lane, i) is shown.

    Args:
        use: ``"matrix_a"``, ``"matrix_b"`` or ``"accumulator"``; or a ``FragmentType``
            (or ``Fragment``), and then ``m``, ``n``, ``k``, ``type`` are omitted.
        m, n, k, type: the WMMA shape and element type (with a use name).

    Raises:
        ValueError: a fragment type the WMMA table does not have.
        TypeError: both a FragmentType and ``m``/``n``/``k``/``type``, or some missing.

    Example:
        >>> print(lane_map_text(fragment_type("accumulator", 8, 8, 4, "f64")))
                0    1    2    3    4    5    6    7
           0  0:0  0:1  1:0  1:1  2:0  2:1  3:0  3:1
           1  4:0  4:1  5:0  5:1  6:0  6:1  7:0  7:1
           2  8:0  8:1  9:0  9:1 10:0 10:1 11:0 11:1
           3 12:0 12:1 13:0 13:1 14:0 14:1 15:0 15:1
           4 16:0 16:1 17:0 17:1 18:0 18:1 19:0 19:1
           5 20:0 20:1 21:0 21:1 22:0 22:1 23:0 23:1
           6 24:0 24:1 25:0 25:1 26:0 26:1 27:0 27:1
           7 28:0 28:1 29:0 29:1 30:0 30:1 31:0 31:1
    """
    ft = _type_of(use, m, n, k, type, "lane_map_text")
    return fragment_layouts.register_layout_of(ft.use, ft.m, ft.n, ft.k, ft.type).text()


# ----------------------------------------------------------------------------------------
# Conversions between logical matrices and per-lane storage, fill_fragment.


def fragment_from_matrix(frag_spec: FragmentType | Fragment, matrix: Any) -> Fragment:
    """Distributes a logical matrix over the lanes, as ``load_matrix_sync`` would.

    A pure gather (``jnp.take`` with a constant index array); vmappable, and leading
    batch axes of ``matrix`` carry over to ``x``.

    Args:
        frag_spec: the ``FragmentType`` to make, or a ``Fragment`` of it (its ``x``
            is ignored).
        matrix: ``(..., rows, cols)`` logical matrix (m x k for A, k x n for B,
            m x n for accumulators) in the type's value dtype: float16, bfloat16,
            float32 (tf32, f32), float64, int8 (s8; s4 in [-8, 7]), uint8 (u8; u4
            in [0, 15]; b1 0/1), int32 (s32). Concrete s4/u4/b1 values out of range
            raise; traced ones are reported by ``jaxwarp.checked`` (outside it only
            the low bits are kept).

    Returns:
        A ``Fragment`` of that type with ``x`` = the per-lane storage.

    Raises:
        ValueError: wrong matrix shape; a concrete s4/u4/b1 value out of range.
        TypeError: wrong matrix dtype (a 64-bit one with x64 off, complex, ...).

    Example:
        >>> t = jaxwarp.fragment_type("matrix_a", 16, 16, 16, "f16", "row_major")
        >>> m = jnp.arange(256, dtype=jnp.float16).reshape(16, 16)
        >>> a = jaxwarp.fragment_from_matrix(t, m)
        >>> a.ftype == t, a.x.shape
        (True, (32, 16))
        >>> bool((jaxwarp.matrix_from_fragment(a) == m).all())
        True
    """
    return type_arg(frag_spec, "frag_spec").from_matrix(matrix)


def matrix_from_fragment(frag: Fragment) -> jax.Array:
    """Gathers a fragment back into its logical ``(rows, cols)`` matrix.

    Where the hardware holds an element more than once (f16 A/B), the first copy
    (lowest lane, then lowest ``i``) is read. Vmappable; leading batch axes of ``x``
    carry over.

    Returns:
        ``(..., rows, cols)`` in the value dtype of ``frag.type`` (see
        ``fragment_from_matrix``; s4 as int8, u4 and b1 as uint8).

    Example:
        >>> c = jaxwarp.fill_fragment(jaxwarp.fragment("accumulator", 16, 16, 16, "f32"), 2.0)
        >>> m = jaxwarp.matrix_from_fragment(c)
        >>> m.shape, m.dtype, float(m.sum())
        ((16, 16), dtype('float32'), 512.0)
    """
    frag = value_arg(frag, "frag")
    et = frag.element_type
    x = jnp.asarray(frag.x)
    check_storage(frag, x)
    vals = unpack_values(et, x).astype(et.value_dtype)
    _, inv = fragment_layouts.gather_maps_of(*frag.ftype._key)
    flat = vals.reshape(*vals.shape[:-2], -1)
    out = bitops.take_bits(flat, inv)
    return out.reshape(*out.shape[:-1], frag.rows, frag.cols)


def fill_fragment(frag: Fragment | FragmentType, v: Any) -> Fragment:
    """``wmma::fill_fragment(frag, v)``: every element of the fragment becomes ``v``.

    ``v`` is converted to the element type as C++ would at the call: floats round to
    nearest even (float16, bfloat16; a Python float is rounded once, from its double
    value), integers wrap (s8, u8, s32); tf32 fragments keep the float32 ``v``
    unchanged (as CUDA's fill does). A float ``v`` for an integer fragment is
    truncated toward zero; C++ leaves NaN, inf and values out of the element's range
    undefined, so a concrete one raises ``ValueError``; a traced float raises
    ``TypeError`` (pass an integer value) except under ``jaxwarp.checked``, which
    reports a traced NaN, inf or out-of-range value.
    For s4/u4/b1 ``v`` must lie in the element's range (-8 .. 7, 0 .. 15, 0 .. 1):
    concrete values outside raise, traced ones are reported by ``jaxwarp.checked``
    (outside it only the low bits are kept), replicated into every packed element.

    Args:
        frag: the fragment, or its ``FragmentType`` (only its use/shape/type/layout
            are read; an old ``x`` is discarded).
        v: a real scalar (Python number or 0-d array; may be traced). Complex values
            and, with x64 off, 64-bit NumPy values raise ``TypeError``.

    Returns:
        The filled fragment.

    Raises:
        TypeError: ``v`` is not a real scalar number, is 64-bit with x64 off, or is a
            traced float for an integer fragment outside ``jaxwarp.checked``.
        ValueError: ``v`` is not a scalar, or (concrete) does not fit the element type.

    Example:
        >>> c = fill_fragment(fragment("accumulator", 16, 16, 16, "f32"), 0.0)
        >>> c2 = fill_fragment(fragment_type("accumulator", 16, 16, 16, "f32"), 0.0)
        >>> bool((c.x == c2.x).all()), c2.x.shape
        (True, (32, 8))
    """
    return type_arg(frag, "frag").fill(v)
