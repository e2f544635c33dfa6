"""The WMMA API (``nvcuda::wmma``) as pure functions on fragments and flat memory.

CUDA's WMMA functions write through references and pointers; here they return a
new fragment (``fill_fragment``, ``load_matrix_sync``, ``mma_sync``, ``bmma_sync``)
or new memory (``store_matrix_sync``). A warp's 16x16x16 product, as in the CUDA
guide's example::

    a = fragment("matrix_a", 16, 16, 16, "f16", "col_major")
    b = fragment("matrix_b", 16, 16, 16, "f16", "row_major")
    c = fragment("accumulator", 16, 16, 16, "f32")
    c = fill_fragment(c, 0.0)
    a = load_matrix_sync(a, a_mem, 16)
    b = load_matrix_sync(b, b_mem, 16)
    c = mma_sync(a, b, c)
    c_mem = store_matrix_sync(c_mem, c, 16, "mem_row_major")

Where a function needs only the fragment's *type* (the target of
``load_matrix_sync`` and ``fill_fragment``), a ``FragmentType`` (``fragment_type(...)``:
static, hashable, no registers) does as well as a ``Fragment``; ``mma_sync``,
``bmma_sync`` and ``store_matrix_sync`` read values and take ``Fragment`` values::

    A = fragment_type("matrix_a", 16, 16, 16, "f16", "col_major")
    a = load_matrix_sync(A, a_mem, 16)

Memory is a flat 1-D array of the fragment's storage dtype (float16, bfloat16,
float32 for tf32 and f32, float64, int8, uint8, int32). Sub-byte matrices (s4, u4,
b1) live in a uint8 byte buffer packed as on the GPU: two 4-bit elements per byte
(the lower-indexed element in the low nibble), eight 1-bit elements per byte (the
lower-indexed element in the lowest bit); ``offset`` and ``ldm`` still count
elements. Element (r, c) of a row-major matrix is at ``offset + r * ldm + c``; of a
column-major one at ``offset + c * ldm + r``.

``ldm`` and ``offset`` are static Python ints (as the argument checks need them at
trace time); the memory, values and fragments may be traced. Each warp of a batch
(``jax.vmap``) reads its own memory at the same offset: slice per-warp memory
before the call, or vmap over memory buffers.

Checked as in the CUDA guide (the GPU gives undefined results where CUDA says
"must"): ``ldm`` a multiple of 16 bytes (8 elements for 16-bit types, 4 for
32-bit, 2 for f64, 16 for 8-bit, 32 for 4-bit, 128 for 1-bit), the start address
aligned to 256 bits (``offset`` a multiple of 32 bytes), ``ldm`` at least the row
(column) length, the matrix inside the memory, the memory dtype.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxwarp._src import checks
from jaxwarp._src.arithmetic import datapath
from jaxwarp._src.catalogue import wmma_table as table
from jaxwarp._src.layouts.fragment_storage import check_packed_range
from jaxwarp._src.layouts.fragment_types import (
    Fragment,
    FragmentType,
    distribute,
    fragment,  # noqa: F401  (the doctests' name, and wmma.fragment for old callers)
    fragment_type,
    type_arg,
    value_arg,
)
from jaxwarp._src.layouts.fragments import (
    fill_fragment as fill_fragment,  # the WMMA API name (wmma.fill_fragment for old callers)
)
from jaxwarp._src.layouts.fragments import fragment_from_matrix, matrix_from_fragment
from jaxwarp._src.numerics import bitops
from jaxwarp._src.numerics.formats import ALIASES
from jaxwarp._src.warp import checked

_USE_LETTER = {"a": "matrix_a", "b": "matrix_b", "c": "accumulator"}
_MAX_HOST_ELEMENTS = 2**31 - 1


def _frag(frag: Any, name: str, uses: tuple[str, ...] | None = None) -> Fragment:
    """A fragment whose values are read (a ``Fragment``; a ``FragmentType`` has none)."""
    frag = value_arg(frag, name)
    if uses is not None and frag.use not in uses:
        raise ValueError(f"{name} must be a {' or '.join(uses)} fragment, got a {frag.use} "
                         f"fragment ({frag!r})")
    return frag


# ----------------------------------------------------------------------------------------
# load_matrix_sync / store_matrix_sync


def _addresses(frag: FragmentType, memory: Any, ldm: Any, offset: Any, col_major: bool,
               what: str) -> tuple[jax.Array, np.ndarray]:
    """Checks memory arguments and returns (memory, element address of each (r, c))."""
    et = frag.element_type
    ldm = checks.static_int(ldm, "ldm")
    offset = checks.static_int(offset, "offset")
    memory = checks.array_arg(memory, "memory")  # 64-bit with x64 off: TypeError
    if memory.dtype != et.memory_dtype:
        kind = " (sub-byte elements packed into bytes)" if et.packed else ""
        raise TypeError(f"memory for a {frag.type} fragment must have dtype "
                        f"{et.memory_dtype}{kind}, got {memory.dtype}")
    if memory.ndim != 1:
        raise ValueError(f"memory must be a flat 1-D buffer, got shape {tuple(memory.shape)}; "
                         f"use jax.vmap for one buffer per warp")
    rows, cols = frag.rows, frag.cols
    inner, outer = (rows, cols) if col_major else (cols, rows)
    order = "column" if col_major else "row"
    if ldm <= 0 or ldm % et.ldm_multiple:
        raise ValueError(f"ldm={ldm} must be a positive multiple of {et.ldm_multiple} elements "
                         f"(16 bytes) for {frag.type}")
    if ldm < inner:
        raise ValueError(f"ldm={ldm} is smaller than the {order} length {inner} of the "
                         f"{order}-major {rows}x{cols} matrix")
    if offset < 0 or offset % et.align_elements:
        raise ValueError(f"offset={offset} must be a non-negative multiple of "
                         f"{et.align_elements} elements for {frag.type}: {what} needs a "
                         f"256-bit (32-byte) aligned pointer")
    need = offset + (outer - 1) * ldm + inner
    per_byte = 8 // et.bits if et.packed else 1
    have = memory.shape[0] * per_byte
    if have < need:
        raise ValueError(f"memory holds {have} elements but {what} of a {order}-major "
                         f"{rows}x{cols} matrix with offset={offset}, ldm={ldm} reaches element "
                         f"{need - 1} (offset + ({outer} - 1) * ldm + {inner} - 1)")
    last = (need - 1) // per_byte  # the highest index into memory
    if last > np.iinfo(np.int32).max and not checks.x64_enabled():
        raise ValueError(f"{what} with offset={offset}, ldm={ldm} reaches memory index {last}, "
                         f"beyond the 2**31 - 1 that 32-bit indices address: enable x64 "
                         f"(jax.config.update('jax_enable_x64', True)) or pass a slice of "
                         f"memory and a smaller offset")
    r = np.arange(rows, dtype=np.int64)[:, None]
    c = np.arange(cols, dtype=np.int64)[None, :]
    addr = offset + (c * ldm + r if col_major else r * ldm + c)
    return memory, addr


def _index_dtype(addr: np.ndarray) -> type:
    """int32 indices where they reach every address (always with x64 off), else int64."""
    return np.int32 if addr.max(initial=0) <= np.iinfo(np.int32).max else np.int64


def _read_elements(et: table.ElementType, memory: jax.Array, addr: np.ndarray) -> jax.Array:
    if not et.packed:
        return bitops.take_bits(memory, addr.astype(_index_dtype(addr)))
    per_byte = 8 // et.bits
    byte = bitops.take_bits(memory, (addr // per_byte).astype(_index_dtype(addr // per_byte)))
    shift = jnp.asarray((addr % per_byte) * et.bits, jnp.uint8)
    v = (byte >> shift) & jnp.uint8((1 << et.bits) - 1)
    if et.value_dtype == np.dtype(np.int8):  # s4: sign-extend
        return ((v.astype(jnp.int8) ^ jnp.int8(8)) - jnp.int8(8)).astype(jnp.int8)
    return v


def load_matrix_sync(frag: Fragment | FragmentType, memory: Any, ldm: Any,
                     layout: str | None = None, offset: Any = 0) -> Fragment:
    """``wmma::load_matrix_sync(frag, memory + offset, ldm[, layout])``.

    Reads the fragment's logical matrix (m x k for matrix_a, k x n for matrix_b,
    m x n for accumulators) from flat memory and distributes it over the lanes
    (:func:`jaxwarp.lane_map` tells where each element lands). Values are copied bit for
    bit (no rounding; tf32 fragments keep all 32 bits of the loaded float). Element
    (r, c) of a row-major matrix is at ``offset + r * ldm + c``, of a column-major one
    at ``offset + c * ldm + r``.

    Args:
        frag: the fragment to fill, or its ``FragmentType`` (only use/shape/type/layout
            are read; an old ``x`` is discarded).
        memory: 1-D buffer of the fragment's storage dtype (float16, bfloat16,
            float32 for tf32 and f32, float64, int8, uint8, int32); s4, u4 and b1 as
            uint8 bytes packed as on the GPU (two 4-bit or eight 1-bit elements a
            byte, the lower-indexed element in the low bits; ``offset`` and ``ldm``
            still count elements).
        ldm: leading dimension in elements (static int): the stride between rows
            (row-major) or columns (column-major).
        layout: for accumulators, ``"mem_row_major"`` or ``"mem_col_major"``
            (required); must be omitted for matrix_a/b, whose memory layout is the
            fragment's ``layout``.
        offset: element index of the matrix's first element (static int).

    Returns:
        The loaded fragment.

    Raises:
        ValueError / TypeError: naming the argument, where CUDA says "must": ``ldm``
            not a multiple of 16 bytes or shorter than a row (column), ``offset`` not
            a multiple of 32 bytes (256-bit alignment), the matrix outside the memory,
            a wrong memory dtype.

    Example:
        >>> t = fragment_type("matrix_a", 16, 16, 16, "f16", "row_major")
        >>> a = load_matrix_sync(t, jnp.arange(256, dtype=jnp.float16), 16)
        >>> a.ftype == t, a.x.shape
        (True, (32, 16))
    """
    frag = type_arg(frag, "frag")
    col_major = _memory_layout(frag, layout, "load_matrix_sync")
    memory, addr = _addresses(frag, memory, ldm, offset, col_major, "load_matrix_sync")
    return distribute(frag, _read_elements(frag.element_type, memory, addr))


def _memory_layout(frag: FragmentType, layout: Any, what: str) -> bool:
    """True for column-major memory."""
    if frag.use == "accumulator":
        if layout is None:
            raise ValueError(f"{what} of an accumulator needs layout, one of "
                             f"{table.MEM_LAYOUTS}")
        checks.static_choice(layout, "layout", table.MEM_LAYOUTS)
        return layout == "mem_col_major"
    if layout is not None:
        raise ValueError(
            f"layout={layout!r} must not be given for a {frag.use} fragment: its memory layout "
            f"is the fragment's own ({frag.layout!r}); layout is only for accumulators")
    return frag.layout == "col_major"


def store_matrix_sync(memory: Any, frag: Fragment, ldm: Any, layout: str,
                      offset: Any = 0) -> jax.Array:
    """``wmma::store_matrix_sync(memory + offset, frag, ldm, layout)``: returns new memory.

    Only accumulator fragments can be stored (as in CUDA). Elements of ``memory``
    outside the stored matrix (the gaps between rows when ``ldm`` exceeds the row
    length) are unchanged.

    Args:
        memory: 1-D buffer of the accumulator's storage dtype (float16, float32, int32,
            float64).
        frag: an accumulator fragment.
        ldm: leading dimension in elements (static int).
        layout: ``"mem_row_major"`` or ``"mem_col_major"``.
        offset: element index of the matrix's first element (static int).

    Returns:
        ``memory`` with the fragment's m x n matrix written in.

    Example:
        >>> c = fill_fragment(fragment("accumulator", 16, 16, 16, "f32"), 1.0)
        >>> mem = store_matrix_sync(jnp.zeros(256, jnp.float32), c, 16, "mem_row_major")
    """
    frag = _frag(frag, "frag")
    if frag.use != "accumulator":
        raise ValueError(f"store_matrix_sync stores accumulator fragments only (as CUDA); "
                         f"frag is a {frag.use} fragment")
    col_major = _memory_layout(frag.ftype, layout, "store_matrix_sync")
    memory, addr = _addresses(frag.ftype, memory, ldm, offset, col_major, "store_matrix_sync")
    # Scatter raw bits: XLA's CPU scatter/gather may canonicalize NaN payloads.
    bits = bitops.as_bits(matrix_from_fragment(frag)).reshape(-1)
    idx = addr.reshape(-1)
    out = bitops.as_bits(memory).at[idx.astype(_index_dtype(idx))].set(bits, mode="clip")
    return bitops.from_bits(out, memory.dtype)


# ----------------------------------------------------------------------------------------
# mma_sync / bmma_sync


def _check_operands(a: Any, b: Any, c: Any) -> tuple[Fragment, Fragment, Fragment]:
    a, b, c = _frag(a, "a"), _frag(b, "b"), _frag(c, "c")
    for name, f, use in (("a", a, "matrix_a"), ("b", b, "matrix_b"), ("c", c, "accumulator")):
        if f.use != use:
            hint = ""
            if {f.use, use} == {"matrix_a", "matrix_b"}:
                hint = " (are a and b swapped?)"
            raise ValueError(f"{name} must be a {use} fragment, got a {f.use} fragment "
                             f"{f!r}{hint}")
    if not a.shape == b.shape == c.shape:
        raise ValueError(f"fragment shapes differ: a m{a.m}n{a.n}k{a.k}, b m{b.m}n{b.n}k{b.k}, "
                         f"c m{c.m}n{c.n}k{c.k}; all three must have the same (m, n, k)")
    if a.type != b.type:
        raise ValueError(f"a and b must have the same element type, got a {a.type!r} and "
                         f"b {b.type!r}")
    return a, b, c


def _static_bool(v: Any, name: str) -> bool:
    if isinstance(v, jax.core.Tracer):
        raise TypeError(f"{name} is a static argument and must be a Python bool, not a traced "
                        f"value")
    if not isinstance(v, (bool, np.bool_)):
        raise TypeError(f"{name} must be a Python bool, got {type(v).__name__} {v!r}")
    return bool(v)


def mma_sync(a: Fragment, b: Fragment, c: Fragment, *, satf: bool = False,
             arch: str = "sm_90", mode: str = "exact", d_format: str | None = None) -> Fragment:
    """``wmma::mma_sync(d, a, b, c, satf)``: returns the accumulator ``d = a @ b + c``.

    The fragments are gathered into logical matrices, multiplied by the arithmetic
    model of ``arch`` (:func:`jaxwarp.mma`), and the result distributed back into an
    accumulator fragment. See :func:`jaxwarp.mma` for the rounding, NaN, inf and
    subnormal behaviour of each type.

    Args:
        a: matrix_a fragment. b: matrix_b fragment (same element type and shape).
        c: accumulator fragment.
        satf: saturate the result (integers: clamp to int32 instead of wrapping).
        arch: target architecture, e.g. ``"sm_80"``, ``"sm_90"`` (static); must have
            the type combination (``wmma_table``).
        mode: arithmetic model selector passed to :func:`jaxwarp.mma` (static).
        d_format: accumulator type of ``d``; defaults to ``c.type``. With f16 A/B, C
            and D may each be f16 or f32.

    Returns:
        The ``d`` accumulator fragment (``d_format``).

    Raises:
        ValueError: fragments in the wrong role, shapes or element types that differ,
            or a combination not in the WMMA table (the message lists the valid ones).

    Example:
        >>> a = jaxwarp.fragment_from_matrix(
        ...     jaxwarp.fragment_type("matrix_a", 16, 16, 16, "f16", "row_major"),
        ...     jnp.ones((16, 16), jnp.float16))
        >>> b = jaxwarp.fragment_from_matrix(
        ...     jaxwarp.fragment_type("matrix_b", 16, 16, 16, "f16", "col_major"),
        ...     jnp.full((16, 16), 0.5, jnp.float16))
        >>> c = jaxwarp.fill_fragment(jaxwarp.fragment("accumulator", 16, 16, 16, "f32"), 1.0)
        >>> d = jaxwarp.mma_sync(a, b, c)
        >>> d.type, d.x.shape, float(jaxwarp.matrix_from_fragment(d)[0, 0])
        ('f32', (32, 8), 9.0)
    """
    a, b, c = _check_operands(a, b, c)
    d_format = c.type if d_format is None else d_format
    table.check_mma(a.type, c.type, d_format, a.shape, arch)
    satf = _static_bool(satf, "satf")
    if not isinstance(mode, str):
        raise TypeError(f"mode must be a string (static), got {type(mode).__name__}")
    d_spec = fragment_type("accumulator", a.m, a.n, a.k, d_format)
    if checked.enabled("nan_inf"):
        for name, f in (("a", a), ("b", b), ("c", c)):
            if jnp.issubdtype(f.x.dtype, jnp.floating):
                v = matrix_from_fragment(f)
                if f.type == "tf32":  # the tensor core ignores the low 13 bits
                    v = bitops.tf32_keep(v)
                bad = ~jnp.isfinite(v.astype(jnp.float32) if v.dtype != jnp.float64 else v)
                flat = jnp.argmax(bad.reshape(-1))
                cols = v.shape[-1]
                checked.check(~jnp.any(bad), "mma_sync: " + name + "[{row}, {col}] is NaN or "
                              "inf (checked mode with nan_inf=True)",
                              row=flat // cols, col=flat % cols)
    d = datapath.mma(
        matrix_from_fragment(a), matrix_from_fragment(b), matrix_from_fragment(c),
        a_format=a.type, c_format=c.type, d_format=d_format, arch=arch, mode=mode, satf=satf)
    return fragment_from_matrix(d_spec, d)


def bmma_sync(a: Fragment, b: Fragment, c: Fragment, op: str = "xor", *,
              arch: str = "sm_90") -> Fragment:
    """``wmma::bmma_sync(d, a, b, c, op, bmmaAccumulateOpPOPC)`` for b1 m8n8k128.

    ``d[i, j] = c[i, j] + popc(op(a[i, :], b[:, j]))`` with op ``"xor"``
    (``bmmaBitOpXOR``, sm_75+) or ``"and"`` (``bmmaBitOpAND``, sm_80+).

    Args:
        a: b1 matrix_a (row_major). b: b1 matrix_b (col_major). c: s32 accumulator.
        op: ``"xor"`` or ``"and"`` (static).
        arch: target architecture (static).

    Returns:
        The s32 ``d`` accumulator fragment.

    Example:
        >>> ta = jaxwarp.fragment_type("matrix_a", 8, 8, 128, "b1", "row_major")
        >>> tb = jaxwarp.fragment_type("matrix_b", 8, 8, 128, "b1", "col_major")
        >>> a = jaxwarp.fragment_from_matrix(ta, jnp.ones((8, 128), jnp.uint8))
        >>> b = jaxwarp.fragment_from_matrix(tb, jnp.zeros((128, 8), jnp.uint8))
        >>> c = jaxwarp.fill_fragment(jaxwarp.fragment("accumulator", 8, 8, 128, "s32"), 0)
        >>> [int(jaxwarp.matrix_from_fragment(jaxwarp.bmma_sync(a, b, c, op))[0, 0])
        ...  for op in ("xor", "and")]
        [128, 0]
    """
    a, b, c = _check_operands(a, b, c)
    checks.static_choice(op, "op", table.BMMA_OPS)
    table.check_mma(a.type, c.type, c.type, a.shape, arch, bmma_op=op)
    d = datapath.bmma(matrix_from_fragment(a), matrix_from_fragment(b),
                      matrix_from_fragment(c), op=op)
    return fragment_from_matrix(fragment_type("accumulator", a.m, a.n, a.k, c.type), d)


def matrix_to_memory(matrix: Any, type: str, layout: str, *, offset: int = 0,
                     pad: int = 0) -> tuple[np.ndarray, int]:
    """Lays a logical matrix out in flat memory as a CUDA program would (host side).

    Args:
        matrix: (rows, cols) logical matrix of ``type``'s value dtype (``s4`` as
            int8 in [-8, 7], ``u4`` as uint8, ``b1`` as uint8 0/1).
        type: element type name (``"f16"``, ``"s4"``, ``"f32"``, ...).
        layout: ``"row_major"``/``"mem_row_major"`` or ``"col_major"``/``"mem_col_major"``.
        offset: elements of zeros before the matrix (non-negative int).
        pad: extra elements of stride beyond the smallest valid ``ldm`` (non-negative
            int).

    Returns:
        ``(memory, ldm)``: a NumPy buffer of the type's memory dtype (sub-byte types
        packed into bytes, lower index in the low bits) and the leading dimension,
        the smallest multiple of 16 bytes that holds a row (column), plus ``pad``.

    Raises:
        ValueError: unknown type or layout; a matrix that is not non-empty 2-D;
            negative ``offset``/``pad``; values outside an integer type's range
            (s4 -8 .. 7, u4 0 .. 15, b1 0 .. 1, s8, u8, s32); a buffer of more than
            2**31 - 1 elements (checked before allocating).
        TypeError: a matrix that is not real numeric or does not convert to the
            type's value dtype (e.g. floats for an integer type).

    Example:
        >>> mem, ldm = jaxwarp.matrix_to_memory(
        ...     np.arange(6, dtype=np.float16).reshape(2, 3), "f16", "row_major")
        >>> ldm, mem.shape, mem[:10].tolist()
        (8, (16,), [0.0, 1.0, 2.0, 0.0, 0.0, 0.0, 0.0, 0.0, 3.0, 4.0])
        >>> mem, ldm = jaxwarp.matrix_to_memory(np.array([[1, -2, 3]], np.int8), "s4", "row_major")
        >>> ldm, mem[:2]
        (32, array([225,   3], dtype=uint8))
    """
    type = checks.format_name(type, "type", tuple(table.ELEMENT_TYPES), ALIASES,
                              need_x64=False)
    allowed = table.LAYOUTS + table.MEM_LAYOUTS
    if layout not in allowed:
        raise ValueError(f"layout={layout!r} is not a matrix layout; allowed: {allowed}")
    et = table.ELEMENT_TYPES[type]
    offset = checks.static_int(offset, "offset")
    pad = checks.static_int(pad, "pad")
    if offset < 0 or pad < 0:
        bad = "offset" if offset < 0 else "pad"
        raise ValueError(f"{bad}={offset if offset < 0 else pad} must be a non-negative number "
                         f"of elements")
    if matrix is None or isinstance(matrix, (str, bytes, Fragment, FragmentType)):
        raise TypeError(f"matrix must be a 2-D numeric array (rows, cols), got "
                        f"{matrix.__class__.__name__}")
    try:
        mat = np.asarray(matrix)
    except (ValueError, TypeError) as e:
        raise TypeError(f"matrix must be a 2-D numeric array (rows, cols): {e}") from None
    if not (mat.dtype == np.bool_ or jnp.issubdtype(mat.dtype, jnp.integer)
            or jnp.issubdtype(mat.dtype, jnp.floating)):
        raise TypeError(f"matrix must be a real numeric array (for {type}: "
                        f"{np.dtype(et.value_dtype).name}), got dtype {mat.dtype}")
    if mat.ndim != 2 or 0 in mat.shape:
        raise ValueError(f"matrix must be a non-empty 2-D (rows, cols) array, got shape "
                         f"{mat.shape}")
    if jnp.issubdtype(mat.dtype, jnp.floating) and not jnp.issubdtype(et.value_dtype,
                                                                       jnp.floating):
        raise TypeError(f"matrix of dtype {mat.dtype} does not convert to {type}'s "
                        f"{np.dtype(et.value_dtype).name}")
    if et.packed:
        check_packed_range(et, mat, "matrix")
    elif mat.dtype.kind in "biu" and np.dtype(et.value_dtype).kind in "iu":
        info = np.iinfo(et.value_dtype)
        if mat.size and (mat.min() < info.min or mat.max() > info.max):
            raise ValueError(f"matrix holds values outside {type}'s range {info.min} .. "
                             f"{info.max}")
    stored = mat.T if layout in ("col_major", "mem_col_major") else mat
    inner = stored.shape[1]
    ldm = -(-inner // et.ldm_multiple) * et.ldm_multiple + pad
    total = offset + stored.shape[0] * ldm
    if total > _MAX_HOST_ELEMENTS:
        raise ValueError(f"offset={offset}, pad={pad} make a buffer of {total} elements "
                         f"(ldm={ldm}); at most {_MAX_HOST_ELEMENTS} (2**31 - 1) allowed")
    stored = stored.astype(et.value_dtype, copy=False)
    body = np.zeros((stored.shape[0], ldm), stored.dtype)
    body[:, :inner] = stored
    flat = np.concatenate([np.zeros(offset, stored.dtype), body.reshape(-1)])
    if et.packed:
        per_byte = 8 // et.bits
        flat = np.concatenate([flat, np.zeros(-len(flat) % per_byte, flat.dtype)])
        groups = (flat.astype(np.int64) & ((1 << et.bits) - 1)).reshape(-1, per_byte)
        return (groups << (np.arange(per_byte) * et.bits)).sum(axis=1).astype(np.uint8), ldm
    return flat.astype(et.memory_dtype, copy=False), ldm


# ----------------------------------------------------------------------------------------
# Conformance against layout captures


def parse_layout_key(key: str) -> Fragment:
    """``"a.f16.m16n16k16.r"`` / ``"c.f32.m16n16k16"`` (layout.npz keys) -> Fragment.

    A zero fragment, as in 0.1 (``f64`` keys need ``jax_enable_x64``); its type alone
    is ``layout_key_type(key)``.
    """
    return layout_key_type(key).zeros()


def layout_key_type(key: str) -> FragmentType:
    """``"a.f16.m16n16k16.r"`` / ``"c.f32.m16n16k16"`` (layout.npz keys) -> FragmentType.

    Example:
        >>> layout_key_type("a.f16.m16n16k16.r")
        FragmentType(use='matrix_a', m=16, n=16, k=16, type='f16', layout='row_major')
    """
    parts = key.split(".")
    try:
        use = _USE_LETTER[parts[0]]
        shape = parts[2]
        m = int(shape[1:shape.index("n")])
        n = int(shape[shape.index("n") + 1:shape.index("k")])
        k = int(shape[shape.index("k") + 1:])
        layout = None
        if use != "accumulator":
            layout = {"r": "row_major", "c": "col_major"}[parts[3]]
        elif len(parts) != 3:
            raise ValueError
    except (KeyError, IndexError, ValueError):
        raise ValueError(f"key={key!r} is not a layout.npz key like 'a.f16.m16n16k16.r' or "
                         f"'c.f32.m16n16k16'") from None
    return fragment_type(use, m, n, k, parts[1], layout)


def _plane_memory(spec: FragmentType, p: int) -> tuple[np.ndarray, int, str | None]:
    """Memory holding plane p (element = bit p of its linear index, as 1 of the type)."""
    bit = (np.arange(spec.rows * spec.cols).reshape(spec.rows, spec.cols) >> p) & 1
    # The capture used ldm = rows (cols); where that is below CUDA's 16-byte minimum
    # (8-bit matrices 8 long) the stride is padded: the registers do not depend on ldm.
    layout = "mem_row_major" if spec.use == "accumulator" else spec.layout
    mem, ldm = matrix_to_memory(bit.astype(spec.element_type.value_dtype), spec.type, layout)
    return mem, ldm, ("mem_row_major" if spec.use == "accumulator" else None)


def layout_conformance(key: str, planes: Any) -> tuple[int, int]:
    """Checks one fragment layout against a layout.npz capture.

    Loads each bit plane's matrix through ``load_matrix_sync`` from memory laid out
    as the capture's was (row-major with ``ldm`` = cols for ``r`` keys and
    accumulators, column-major with ``ldm`` = rows for ``c`` keys) and compares the
    raw bits of every storage element with the capture.

    Args:
        key: a layout.npz key, e.g. ``"a.f16.m16n16k16.r"``.
        planes: the captured ``(P, 32, NE)`` uint64 array of that key.

    Returns:
        ``(matched, total)``: storage elements equal to the capture, out of P * 32 * NE.
    """
    if ".f64." in key:  # f64 fragments need 64-bit types
        with jax.enable_x64(True):
            return _layout_conformance(key, planes)
    return _layout_conformance(key, planes)


def _layout_conformance(key: str, planes: Any) -> tuple[int, int]:
    spec = layout_key_type(key)
    planes = np.asarray(planes)
    want_shape = (32, spec.num_storage_elements)
    if planes.ndim != 3 or planes.shape[1:] != want_shape:
        raise ValueError(f"planes for {key!r} must have shape (P, {want_shape[0]}, "
                         f"{want_shape[1]}), got {planes.shape}")
    et = spec.element_type
    mems = [_plane_memory(spec, p) for p in range(planes.shape[0])]
    _, ldm, layout = mems[0]
    load = jax.jit(jax.vmap(lambda mem: load_matrix_sync(spec, mem, ldm, layout).x))
    x = np.asarray(load(np.stack([mem for mem, _, _ in mems])))
    got = x.view(et.bits_dtype).astype(np.uint64)
    return int(np.sum(got == planes.astype(np.uint64))), int(planes.size)
