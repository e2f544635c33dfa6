"""WMMA fragments and where each matrix element sits in them (per-lane layouts).

A ``FragmentType`` is CUDA's type ``nvcuda::wmma::fragment<Use, m, n, k, T, Layout>``
(frozen, hashable, no registers); a ``Fragment`` is a value of it: each of the 32 lanes
of a warp holds ``num_storage_elements`` values ``x[i]``. Here ``x`` is one array of
shape ``(32, num_storage_elements)`` (lane axis first); many warps are a ``jax.vmap``
away.

CUDA calls the mapping from (lane, i) to matrix element unspecified. This module
reproduces what an H100 (sm_90) does, element for element, for every fragment type
of the WMMA table (``tests/data/h100_layout.npz`` checks each one). Every layout is
linear over GF(2): the (row, col) of lane ``l``, element ``i`` is the XOR of one
basis vector per set bit of ``l`` and of ``i``. The bases follow from three rules:

* Atom: lane ``l`` holds one 32-bit word (a 64-bit one for f64) of an 8 x 4-word
  block: row ``l >> 2`` and word ``l & 3`` of that row, where a word is ``32 / bits``
  consecutive elements along k (for A and B) or 2 along n (accumulators, whatever
  their type). So lane bits 0, 1 step along k (n), lane bits 2..4 step rows 1, 2, 4.
* Tiles: further element-index bits step the atom over the matrix, for A (and the
  accumulator) first to rows 8..15, then along k (n), then to rows 16..31; for B
  first along k, then along n.
* Transpose: ``m8n32k16`` is done as ``m32n8k16`` on transposed operands, so its A
  has the layout of the transposed ``m32n8k16`` B (and vice versa) and its
  accumulator that of the transposed ``m32n8k16`` accumulator.

The memory layout (row_major / col_major) changes only how ``load_matrix_sync``
reads memory, never what lands in the registers. ``f16`` A and B fragments have
16 elements per lane (CUDA's ``__frag_base<__half, 16>``) but, from sm_80 on, hold
only 8 distinct ones: ``x[8:16]`` repeats ``x[0:8]`` (for ``m32n8k16`` B and
``m8n32k16`` A, four copies of ``x[0:4]``). ``s4``/``u4`` pack 8 elements into one
32-bit word (element ``j`` in bits ``4j..4j+3``), ``b1`` 32 (element ``j`` in bit ``j``).

Lane maps (``lane_map_text``), each cell ``lane:i``. ``f16`` ``matrix_a`` m16n16k16
(row_major and col_major alike; ``x[8:16]`` repeats ``x[0:8]``), rows m, cols k::

            0    1    2    3    4    5    6    7    8    9   10   11   12   13   14   15
       0  0:0  0:1  1:0  1:1  2:0  2:1  3:0  3:1  0:4  0:5  1:4  1:5  2:4  2:5  3:4  3:5
       1  4:0  4:1  5:0  5:1  6:0  6:1  7:0  7:1  4:4  4:5  5:4  5:5  6:4  6:5  7:4  7:5
       2  8:0  8:1  9:0  9:1 10:0 10:1 11:0 11:1  8:4  8:5  9:4  9:5 10:4 10:5 11:4 11:5
       3 12:0 12:1 13:0 13:1 14:0 14:1 15:0 15:1 12:4 12:5 13:4 13:5 14:4 14:5 15:4 15:5
       4 16:0 16:1 17:0 17:1 18:0 18:1 19:0 19:1 16:4 16:5 17:4 17:5 18:4 18:5 19:4 19:5
       5 20:0 20:1 21:0 21:1 22:0 22:1 23:0 23:1 20:4 20:5 21:4 21:5 22:4 22:5 23:4 23:5
       6 24:0 24:1 25:0 25:1 26:0 26:1 27:0 27:1 24:4 24:5 25:4 25:5 26:4 26:5 27:4 27:5
       7 28:0 28:1 29:0 29:1 30:0 30:1 31:0 31:1 28:4 28:5 29:4 29:5 30:4 30:5 31:4 31:5
       8  0:2  0:3  1:2  1:3  2:2  2:3  3:2  3:3  0:6  0:7  1:6  1:7  2:6  2:7  3:6  3:7
       9  4:2  4:3  5:2  5:3  6:2  6:3  7:2  7:3  4:6  4:7  5:6  5:7  6:6  6:7  7:6  7:7
      10  8:2  8:3  9:2  9:3 10:2 10:3 11:2 11:3  8:6  8:7  9:6  9:7 10:6 10:7 11:6 11:7
      11 12:2 12:3 13:2 13:3 14:2 14:3 15:2 15:3 12:6 12:7 13:6 13:7 14:6 14:7 15:6 15:7
      12 16:2 16:3 17:2 17:3 18:2 18:3 19:2 19:3 16:6 16:7 17:6 17:7 18:6 18:7 19:6 19:7
      13 20:2 20:3 21:2 21:3 22:2 22:3 23:2 23:3 20:6 20:7 21:6 21:7 22:6 22:7 23:6 23:7
      14 24:2 24:3 25:2 25:3 26:2 26:3 27:2 27:3 24:6 24:7 25:6 25:7 26:6 26:7 27:6 27:7
      15 28:2 28:3 29:2 29:3 30:2 30:3 31:2 31:3 28:6 28:7 29:6 29:7 30:6 30:7 31:6 31:7

Accumulator m16n16k16 (f16, f32 and s32 alike; also m16n16k8 f32)::

            0    1    2    3    4    5    6    7    8    9   10   11   12   13   14   15
       0  0:0  0:1  1:0  1:1  2:0  2:1  3:0  3:1  0:4  0:5  1:4  1:5  2:4  2:5  3:4  3:5
       1  4:0  4:1  5:0  5:1  6:0  6:1  7:0  7:1  4:4  4:5  5:4  5:5  6:4  6:5  7:4  7:5
       2  8:0  8:1  9:0  9:1 10:0 10:1 11:0 11:1  8:4  8:5  9:4  9:5 10:4 10:5 11:4 11:5
       3 12:0 12:1 13:0 13:1 14:0 14:1 15:0 15:1 12:4 12:5 13:4 13:5 14:4 14:5 15:4 15:5
       4 16:0 16:1 17:0 17:1 18:0 18:1 19:0 19:1 16:4 16:5 17:4 17:5 18:4 18:5 19:4 19:5
       5 20:0 20:1 21:0 21:1 22:0 22:1 23:0 23:1 20:4 20:5 21:4 21:5 22:4 22:5 23:4 23:5
       6 24:0 24:1 25:0 25:1 26:0 26:1 27:0 27:1 24:4 24:5 25:4 25:5 26:4 26:5 27:4 27:5
       7 28:0 28:1 29:0 29:1 30:0 30:1 31:0 31:1 28:4 28:5 29:4 29:5 30:4 30:5 31:4 31:5
       8  0:2  0:3  1:2  1:3  2:2  2:3  3:2  3:3  0:6  0:7  1:6  1:7  2:6  2:7  3:6  3:7
       9  4:2  4:3  5:2  5:3  6:2  6:3  7:2  7:3  4:6  4:7  5:6  5:7  6:6  6:7  7:6  7:7
      10  8:2  8:3  9:2  9:3 10:2 10:3 11:2 11:3  8:6  8:7  9:6  9:7 10:6 10:7 11:6 11:7
      11 12:2 12:3 13:2 13:3 14:2 14:3 15:2 15:3 12:6 12:7 13:6 13:7 14:6 14:7 15:6 15:7
      12 16:2 16:3 17:2 17:3 18:2 18:3 19:2 19:3 16:6 16:7 17:6 17:7 18:6 18:7 19:6 19:7
      13 20:2 20:3 21:2 21:3 22:2 22:3 23:2 23:3 20:6 20:7 21:6 21:7 22:6 22:7 23:6 23:7
      14 24:2 24:3 25:2 25:3 26:2 26:3 27:2 27:3 24:6 24:7 25:6 25:7 26:6 26:7 27:6 27:7
      15 28:2 28:3 29:2 29:3 30:2 30:3 31:2 31:3 28:6 28:7 29:6 29:7 30:6 30:7 31:6 31:7
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxwarp._src import checks
from jaxwarp._src.numerics.bits import from_bits, sext, take_bits, uint_view
from jaxwarp._src.numerics.formats import ALIASES
from jaxwarp._src.tensorcore import layouts
from jaxwarp._src.tensorcore import wmma_table as table
from jaxwarp._src.warp import checked

WARP_SIZE = checks.WARP_SIZE
_LANE_BITS = 5


@dataclasses.dataclass(frozen=True)
class FragmentType:
    """The type ``nvcuda::wmma::fragment<use, m, n, k, type, layout>``, without registers.

    Frozen, hashable and validated when made: a static description that can be a
    ``jax.jit`` static argument, a dict key or a closed-over constant, and that says
    everything about a fragment except its values (``Fragment``, which adds the
    registers ``x``). It is also a pytree without leaves, so it can be passed
    through ``jax.jit`` / ``jax.vmap`` as an ordinary argument.

    Make one with ``fragment_type(...)`` (or this constructor), and a value of it
    with ``zeros()``, ``fill(v)``, ``from_matrix(matrix)``, ``from_storage(x)`` or
    ``load_matrix_sync(ftype, memory, ldm)``.

    Attributes:
        use: ``"matrix_a"``, ``"matrix_b"`` or ``"accumulator"``.
        m, n, k: the WMMA shape (Python ints).
        type: element type name (see ``wmma_table.ELEMENT_TYPES``).
        layout: ``"row_major"`` / ``"col_major"`` for matrix_a/b, ``None`` for
            accumulators.

    Raises:
        ValueError: a combination the WMMA table does not have (the message lists the
            valid ones); the same checks as ``fragment``.
        TypeError: ``m``, ``n`` or ``k`` not a Python int (a traced one raises JAX's
            ``ConcretizationTypeError`` naming it).

    Example:
        >>> t = FragmentType("matrix_a", 16, 16, 16, "f16", "row_major")
        >>> t.num_elements, t.num_storage_elements, t.dtype, t.matrix_shape
        (16, 16, dtype('float16'), (16, 16))
        >>> t == fragment_type("matrix_a", 16, 16, 16, "f16", "row_major")
        True
        >>> {t: "A"}[FragmentType("matrix_a", 16, 16, 16, "f16", "row_major")]
        'A'
        >>> t.zeros().x.shape
        (32, 16)
    """

    use: str
    m: int
    n: int
    k: int
    type: str
    layout: str | None = None

    def __post_init__(self) -> None:
        # The checks (and their order) of fragment(): m, n, k are static ints, then the
        # table; an unhashable value where a name belongs is refused before its lookups.
        for name in ("m", "n", "k"):
            object.__setattr__(self, name, checks.static_int(getattr(self, name), name))
        if not isinstance(self.type, (str, list, tuple)):  # a dtype that names a type
            try:
                object.__setattr__(self, "type", checks.format_name(
                    self.type, "type", tuple(table.ELEMENT_TYPES), ALIASES, need_x64=False))
            except ValueError:
                pass  # the table's check below says what is allowed
        elif isinstance(self.type, str) and ALIASES.get(self.type) in table.ELEMENT_TYPES:
            object.__setattr__(self, "type", ALIASES[self.type])
        for name, allowed in (("use", table.USES), ("type", tuple(table.ELEMENT_TYPES)),
                              ("layout", table.LAYOUTS + (None,))):
            v = getattr(self, name)
            try:
                hash(v)
            except TypeError:
                raise ValueError(f"{name}={v!r} is not a name; allowed: {allowed}") from None
        table.check_fragment(self.use, self.m, self.n, self.k, self.type, self.layout)

    # -- description -------------------------------------------------------------------

    @property
    def shape(self) -> tuple[int, int, int]:
        """``(m, n, k)``."""
        return (self.m, self.n, self.k)

    @property
    def rows(self) -> int:
        """Rows of the logical matrix (m for A and C, k for B)."""
        return self.k if self.use == "matrix_b" else self.m

    @property
    def cols(self) -> int:
        """Columns of the logical matrix (k for A, n for B and C)."""
        return self.k if self.use == "matrix_a" else self.n

    @property
    def matrix_shape(self) -> tuple[int, int]:
        """``(rows, cols)`` of the logical matrix."""
        return (self.rows, self.cols)

    @property
    def element_type(self) -> table.ElementType:
        """How the element type is held (``wmma_table.ElementType``)."""
        return table.ELEMENT_TYPES[self.type]

    @property
    def dtype(self) -> np.dtype:
        """Storage dtype of ``x``."""
        return self.element_type.storage_dtype

    @property
    def num_elements(self) -> int:
        """CUDA's ``frag.num_elements``: elements per lane (packed ones counted singly)."""
        return _num_elements(self.use, self.m, self.n, self.k, self.type)

    @property
    def num_storage_elements(self) -> int:
        """CUDA's ``frag.num_storage_elements``: the length of ``x`` per lane."""
        return self.num_elements // self.element_type.per_storage

    @property
    def storage_shape(self) -> tuple[int, int]:
        """Shape of one warp's ``x``: ``(32, num_storage_elements)``."""
        return (WARP_SIZE, self.num_storage_elements)

    # -- layout --------------------------------------------------------------------------

    def layout_bases(self) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
        """The linear layout of this type's registers (see ``layout_bases``)."""
        return layout_bases(self)

    def register_layout(self) -> layouts.Layout:
        """The layout of this type's registers as a ``layouts.Layout``."""
        return register_layout(self)

    def lane_map(self) -> tuple[np.ndarray, np.ndarray]:
        """``(rows, cols)`` of the element held by each (lane, i) (see ``lane_map``)."""
        return lane_map(self)

    def lane_map_text(self) -> str:
        """This type's layout as an ASCII grid (see ``lane_map_text``)."""
        return lane_map_text(self)

    # -- values --------------------------------------------------------------------------

    def zeros(self) -> Fragment:
        """A value of this type with ``x`` all zeros (what ``fragment(...)`` returns).

        Raises:
            RuntimeError: ``f64`` without ``jax_enable_x64``.
        """
        self._require_x64()
        return _make(self, jnp.zeros(self.storage_shape, self.dtype))

    def fill(self, v: Any) -> Fragment:
        """A value of this type with every element ``v``: ``fill_fragment(self, v)``."""
        return fill_fragment(self, v)

    def from_matrix(self, matrix: Any) -> Fragment:
        """The logical matrix over the lanes: ``fragment_from_matrix(self, matrix)``."""
        return fragment_from_matrix(self, matrix)

    def from_storage(self, x: Any) -> Fragment:
        """A value of this type holding the per-lane storage ``x`` (not copied).

        Args:
            x: ``(..., 32, num_storage_elements)`` array of the storage dtype (leading
                axes are batches of warps); may be traced.

        Raises:
            ValueError: ``x`` of the wrong shape.
            TypeError: ``x`` of the wrong dtype.
        """
        _check_storage(self, x)
        return _make(self, x)

    def _require_x64(self) -> None:
        if self.dtype.itemsize == 8:
            checks.require_x64(f"a {self.type} fragment")


# A pytree without leaves: the type is static, so it passes through jit/vmap as is.
jax.tree_util.register_pytree_node(FragmentType, lambda t: ((), t), lambda t, _: t)


def fragment_type(use: str, m: int, n: int, k: int, type: str,
                  layout: str | None = None) -> FragmentType:
    """The fragment type ``wmma::fragment<use, m, n, k, type, layout>`` (no registers).

    Checks what ``fragment`` checks (the WMMA table) but allocates nothing, so an
    ``f64`` type needs no ``jax_enable_x64`` until a value of it is made.

    Args:
        use: ``"matrix_a"``, ``"matrix_b"`` or ``"accumulator"``.
        m, n, k: a WMMA shape, e.g. 16, 16, 16 (Python ints).
        type: ``"f16"``, ``"bf16"``, ``"tf32"``, ``"f64"``, ``"s8"``, ``"u8"``, ``"s4"``,
            ``"u4"``, ``"b1"`` for matrix_a/b; ``"f16"``, ``"f32"``, ``"s32"``, ``"f64"``
            for accumulators.
        layout: ``"row_major"`` or ``"col_major"``, required for matrix_a/b, not
            allowed for accumulators.

    Returns:
        A frozen, hashable ``FragmentType``.

    Raises:
        ValueError: a combination the WMMA table does not have (the message lists the
            valid ones).
        TypeError: ``m``, ``n``, ``k`` not Python ints.

    Example:
        >>> c = fragment_type("accumulator", 16, 16, 16, "f32")
        >>> c.storage_shape, c.matrix_shape
        ((32, 8), (16, 16))
        >>> fragment_type("matrix_a", 16, 16, 16, "f16")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: layout is required for matrix_a fragments; allowed for f16: ...
    """
    return FragmentType(use, m, n, k, type, layout)


@dataclasses.dataclass(frozen=True)
class Fragment:
    """A value of a fragment type, ``wmma::fragment<...> f``, for one warp, as a pytree.

    ``x`` (the only pytree leaf) has shape ``(32, num_storage_elements)`` and the
    storage dtype of ``type``; every other field is static, and together they make
    ``ftype``, the ``FragmentType`` (whose ``shape``, ``rows``, ``cols``, ``dtype``,
    ``num_elements``, ... a fragment also has). Element-wise work is plain array work
    on ``x``, as in CUDA's ``for (i < num_elements) f.x[i] *= a``::

        frag = frag.replace(x=frag.x * jnp.float16(2))

    A batch of warps is a fragment whose ``x`` has leading axes, made and consumed
    by ``jax.vmap``.

    Attributes:
        x: per-lane storage, ``(32, num_storage_elements)``.
        use: ``"matrix_a"``, ``"matrix_b"`` or ``"accumulator"``.
        m, n, k: the WMMA shape.
        type: element type name (see ``wmma_table.ELEMENT_TYPES``).
        layout: ``"row_major"`` / ``"col_major"`` for matrix_a/b, ``None`` for
            accumulators.

    Example:
        >>> f = fragment("accumulator", 16, 16, 16, "f32")
        >>> f.ftype == fragment_type("accumulator", 16, 16, 16, "f32")
        True
    """

    x: Any
    use: str
    m: int
    n: int
    k: int
    type: str
    layout: str | None = None

    @functools.cached_property
    def ftype(self) -> FragmentType:
        """The ``FragmentType`` of this value (checked on first use)."""
        return FragmentType(self.use, self.m, self.n, self.k, self.type, self.layout)

    @property
    def shape(self) -> tuple[int, int, int]:
        """``(m, n, k)``."""
        return self.ftype.shape

    @property
    def rows(self) -> int:
        """Rows of the logical matrix (m for A and C, k for B)."""
        return self.ftype.rows

    @property
    def cols(self) -> int:
        """Columns of the logical matrix (k for A, n for B and C)."""
        return self.ftype.cols

    @property
    def matrix_shape(self) -> tuple[int, int]:
        """``(rows, cols)`` of the logical matrix."""
        return self.ftype.matrix_shape

    @property
    def element_type(self) -> table.ElementType:
        """How the element type is held (``wmma_table.ElementType``)."""
        return self.ftype.element_type

    @property
    def dtype(self) -> np.dtype:
        """Storage dtype of ``x``."""
        return self.ftype.dtype

    @property
    def num_elements(self) -> int:
        """CUDA's ``frag.num_elements``: elements per lane (packed ones counted singly)."""
        return self.ftype.num_elements

    @property
    def num_storage_elements(self) -> int:
        """CUDA's ``frag.num_storage_elements``: the length of ``x`` per lane."""
        return self.ftype.num_storage_elements

    @property
    def storage_shape(self) -> tuple[int, int]:
        """Shape of one warp's ``x``: ``(32, num_storage_elements)``."""
        return self.ftype.storage_shape

    def replace(self, **changes: Any) -> Fragment:
        """Returns a copy with fields replaced; the result is checked as a whole.

        A new ``x`` is checked for shape and dtype. Changing ``use``, ``m``, ``n``,
        ``k``, ``type`` or ``layout`` needs a new ``x`` in the same call: the old
        storage would otherwise be reinterpreted silently (another type's bits,
        another layout's lanes).

        Raises:
            ValueError: unknown field, an invalid combination, a new description
                without a new ``x``, or an ``x`` of the wrong shape.
            TypeError: an ``x`` of the wrong dtype.
        """
        fields = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(changes) - fields)
        if unknown:
            raise ValueError(f"Fragment.replace: unknown field(s) {unknown}; allowed: "
                             f"{sorted(fields)}")
        meta = sorted(k for k, v in changes.items() if k != "x" and v != getattr(self, k))
        if meta and "x" not in changes:
            raise ValueError(
                f"Fragment.replace: changing {', '.join(meta)} needs a new x in the same "
                f"call (the storage of the new fragment); the old one would be "
                f"reinterpreted. Use fragment(...) / fill_fragment / fragment_from_matrix "
                f"for a new fragment")
        if meta:
            d = {f: changes.get(f, getattr(self, f)) for f in fields - {"x"}}
            new = _make(FragmentType(d["use"], d["m"], d["n"], d["k"], d["type"],
                                     d["layout"]), changes["x"])
        else:
            new = dataclasses.replace(self, **changes)
            if "ftype" in self.__dict__:  # the same description: keep its checked type
                new.__dict__["ftype"] = self.__dict__["ftype"]
        if "x" in changes:
            _check_storage(new, new.x)
        return new

    def __repr__(self) -> str:
        layout = f", {self.layout}" if self.layout else ""
        x = getattr(self.x, "shape", None)
        return (f"Fragment({self.use}, m{self.m}n{self.n}k{self.k}, {self.type}{layout}, "
                f"x={x})")


jax.tree_util.register_dataclass(
    Fragment, data_fields=["x"], meta_fields=["use", "m", "n", "k", "type", "layout"])


def _make(ft: FragmentType, x: Any) -> Fragment:
    """A ``Fragment`` of type ``ft`` holding ``x`` (unchecked), its ``ftype`` preset."""
    frag = Fragment(x, ft.use, ft.m, ft.n, ft.k, ft.type, ft.layout)
    frag.__dict__["ftype"] = ft  # the cached_property's slot; ft is already checked
    return frag


def _check_storage(frag: Fragment | FragmentType, x: Any) -> None:
    want = (WARP_SIZE, frag.num_storage_elements)
    shape = tuple(getattr(x, "shape", ()))
    if shape[-2:] != want:
        raise ValueError(f"x of a {frag.use} {frag.type} m{frag.m}n{frag.n}k{frag.k} fragment "
                         f"must have shape (..., {want[0]}, {want[1]}), got {shape}")
    dtype = getattr(x, "dtype", None)
    if dtype != frag.dtype:
        raise TypeError(f"x of a {frag.type} fragment must have dtype {frag.dtype}, got {dtype}")


def fragment(use: str, m: int, n: int, k: int, type: str, layout: str | None = None) -> Fragment:
    """Declares a fragment, ``wmma::fragment<use, m, n, k, type, layout> f;``.

    CUDA leaves a new fragment uninitialized; here ``x`` is zeros. The same as
    ``fragment_type(use, m, n, k, type, layout).zeros()``; where only the type is
    needed (the target of ``load_matrix_sync`` or ``fill_fragment``,
    ``fragment_from_matrix``, the lane maps) ``fragment_type`` allocates nothing.

    Args:
        use: ``"matrix_a"``, ``"matrix_b"`` or ``"accumulator"``.
        m, n, k: a WMMA shape, e.g. 16, 16, 16.
        type: ``"f16"``, ``"bf16"``, ``"tf32"``, ``"f64"``, ``"s8"``, ``"u8"``, ``"s4"``,
            ``"u4"``, ``"b1"`` for matrix_a/b; ``"f16"``, ``"f32"``, ``"s32"``, ``"f64"``
            for accumulators.
        layout: ``"row_major"`` or ``"col_major"``, required for matrix_a/b, not
            allowed for accumulators.

    Returns:
        A ``Fragment`` with ``x = zeros((32, num_storage_elements), storage dtype)``.

    Raises:
        ValueError: a combination the WMMA table does not have (the message lists the
            valid ones).
        RuntimeError: ``f64`` without ``jax_enable_x64``.

    Example:
        >>> a = fragment("matrix_a", 16, 16, 16, "f16", "row_major")
        >>> a.num_elements, a.x.shape, a.x.dtype
        (16, (32, 16), dtype('float16'))
    """
    return FragmentType(use, m, n, k, type, layout).zeros()


def _num_elements(use: str, m: int, n: int, k: int, type: str) -> int:
    if use != "accumulator" and type == "f16":
        return 16  # __frag_base<__half, 16> for every shape; duplicated from sm_80 on.
    rows, cols = {"matrix_a": (m, k), "matrix_b": (k, n), "accumulator": (m, n)}[use]
    return rows * cols // WARP_SIZE


# ----------------------------------------------------------------------------------------
# Lane maps as linear layouts over GF(2).


def _operand_bases(role: str, r: int, kdim: int, w: int, nbits: int):
    """Bases in (r, k) coordinates of an operand whose words hold ``w`` k-elements."""
    word = [(0, 1 << i) for i in range(w.bit_length() - 1)]
    lane = [(0, w), (0, 2 * w), (1, 0), (2, 0), (4, 0)]
    ktiles = [(0, t) for t in _powers(4 * w, kdim)]
    rtiles = [(t, 0) for t in _powers(8, r)]
    extra = rtiles[:1] + ktiles + rtiles[1:] if role == "a" else ktiles + rtiles
    elem = (word + extra + [(0, 0)] * nbits)[:nbits]
    return lane, elem


def _powers(start: int, end: int):
    t = start
    while t < end:
        yield t
        t *= 2


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
    return _layout_bases(ft.use, ft.m, ft.n, ft.k, ft.type)


def _layout_bases(use: str, m: int, n: int, k: int, type: str):
    nbits = _num_elements(use, m, n, k, type).bit_length() - 1
    bits = table.ELEMENT_TYPES[type].bits
    swap = lambda vs: [(c, r) for r, c in vs]  # noqa: E731
    if use == "accumulator":
        if m >= n:
            return _operand_bases("a", m, n, 2, nbits)
        lane, elem = _operand_bases("a", n, m, 2, nbits)
        return swap(lane), swap(elem)
    w = max(1, 32 // bits)
    # Canonical shapes have m >= n; m8n32k16 runs as m32n8k16 with A and B swapped.
    if use == "matrix_a":
        lane, elem = _operand_bases("a" if m >= n else "b", m, k, w, nbits)
        return lane, elem  # (m, k) is A's (row, col)
    lane, elem = _operand_bases("b" if m >= n else "a", n, k, w, nbits)
    return swap(lane), swap(elem)  # (n, k) -> B's (k, n)


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
    return _lane_map(ft.use, ft.m, ft.n, ft.k, ft.type)


@functools.cache
def _register_layout(use: str, m: int, n: int, k: int, type: str) -> layouts.Layout:
    lane_b, elem_b = _layout_bases(use, m, n, k, type)
    shape = {"matrix_a": (m, k), "matrix_b": (k, n)}.get(use, (m, n))
    return layouts.wmma_layout(f"wmma {use} m{m}n{n}k{k} {type}", shape, lane_b, elem_b,
                               _num_elements(use, m, n, k, type))


def register_layout(use: str | FragmentType | Fragment, m: int | None = None,
                    n: int | None = None, k: int | None = None,
                    type: str | None = None) -> layouts.Layout:
    """The :class:`~jaxwarp._src.tensorcore.layouts.Layout` of a fragment type's registers
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
    return _register_layout(ft.use, ft.m, ft.n, ft.k, ft.type)


@functools.cache
def _lane_map(use: str, m: int, n: int, k: int, type: str) -> tuple[np.ndarray, np.ndarray]:
    rows, cols = (c.astype(np.int32) for c in _register_layout(use, m, n, k, type).coords())
    rows.setflags(write=False)
    cols.setflags(write=False)
    return rows, cols


def _gather_maps(use: str | FragmentType | Fragment, m: int | None = None,
                 n: int | None = None, k: int | None = None, type: str | None = None):
    """(linear index per (lane, element), first flat (lane, element) per linear index)."""
    ft = _type_of(use, m, n, k, type, "_gather_maps")
    return _gather_maps_cached(ft.use, ft.m, ft.n, ft.k, ft.type)


@functools.cache
def _gather_maps_cached(use: str, m: int, n: int, k: int, type: str):
    rows, cols = _lane_map(use, m, n, k, type)
    ncols = k if use == "matrix_a" else n
    nrows = k if use == "matrix_b" else m
    lin = (rows * ncols + cols).astype(np.int32)
    flat = lin.reshape(-1)
    inv = np.full(nrows * ncols, -1, np.int64)
    # First occurrence wins: iterate in reverse so earlier positions overwrite.
    inv[flat[::-1]] = np.arange(flat.size - 1, -1, -1)
    assert (inv >= 0).all(), (use, m, n, k, type)
    lin.setflags(write=False)
    inv = inv.astype(np.int32)
    inv.setflags(write=False)
    return lin, inv


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
    return _register_layout(ft.use, ft.m, ft.n, ft.k, ft.type).text()


# ----------------------------------------------------------------------------------------
# Conversions between logical matrices and per-lane storage.


def type_arg(frag: Any, name: str) -> FragmentType:
    """The FragmentType of an argument that only describes a fragment (its x unused)."""
    if isinstance(frag, FragmentType):
        return frag
    if isinstance(frag, Fragment):
        return frag.ftype
    raise TypeError(f"{name} must be a Fragment (see jaxwarp.fragment), got "
                    f"{frag.__class__.__name__}; or its FragmentType (see "
                    f"jaxwarp.fragment_type)")


def value_arg(frag: Any, name: str) -> Fragment:
    """An argument whose values (registers) are read: a Fragment, not only a type."""
    if isinstance(frag, Fragment):
        return frag
    if isinstance(frag, FragmentType):
        raise TypeError(f"{name} must be a Fragment (a value, with registers x), got the "
                        f"FragmentType {frag!r}, which has no values: make one with "
                        f".zeros(), .fill(v), .from_matrix(m) or load_matrix_sync")
    raise TypeError(f"{name} must be a Fragment (see jaxwarp.fragment), got "
                    f"{frag.__class__.__name__}")


def _shifts(et: table.ElementType) -> jax.Array:
    return jnp.arange(et.per_storage, dtype=jnp.uint32) * jnp.uint32(et.bits)


def pack_values(et: table.ElementType, values: jax.Array) -> jax.Array:
    """Packs sub-byte values (..., N * per_storage) into storage words (..., N)."""
    if not et.packed:
        return values
    mask = jnp.uint32((1 << et.bits) - 1)
    v = values.astype(jnp.int32).astype(jnp.uint32) & mask  # s4 -1 -> 0xF
    v = v.reshape(*v.shape[:-1], -1, et.per_storage) << _shifts(et)
    words = jnp.sum(v, axis=-1, dtype=jnp.uint32)  # disjoint bit fields: sum == or
    if et.storage_dtype == np.dtype(np.int32):
        words = from_bits(words, jnp.int32)
    return words


def unpack_values(et: table.ElementType, words: jax.Array) -> jax.Array:
    """Unpacks storage words (..., N) into values (..., N * per_storage), value dtype."""
    if not et.packed:
        return words
    words = uint_view(words)
    v = (words[..., None] >> _shifts(et)) & jnp.uint32((1 << et.bits) - 1)
    v = v.reshape(*v.shape[:-2], -1)
    if et.value_dtype == np.dtype(np.int8):  # s4: sign-extend the nibble
        return sext(v, et.bits)
    return v.astype(et.value_dtype)


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
    spec = type_arg(frag_spec, "frag_spec")
    et = spec.element_type
    matrix = checks.array_arg(matrix, "matrix")
    want = (spec.rows, spec.cols)
    if tuple(matrix.shape[-2:]) != want:
        raise ValueError(f"matrix for a {spec.use} m{spec.m}n{spec.n}k{spec.k} fragment must "
                         f"have shape (..., {want[0]}, {want[1]}), got {tuple(matrix.shape)}")
    if matrix.dtype != et.value_dtype:
        raise TypeError(f"matrix for a {spec.type} fragment must have dtype {et.value_dtype}, "
                        f"got {matrix.dtype}")
    if et.packed:
        check_packed_range(et, matrix, "matrix")
    return distribute(spec, matrix)


def packed_range(et: table.ElementType) -> tuple[int, int]:
    """The values a sub-byte element type holds: s4 (-8, 7), u4 (0, 15), b1 (0, 1)."""
    if et.value_dtype == np.dtype(np.int8):
        return -(1 << (et.bits - 1)), (1 << (et.bits - 1)) - 1
    return 0, (1 << et.bits) - 1


def check_packed_range(et: table.ElementType, values: Any, name: str) -> None:
    """Checks sub-byte values: concrete ones raise ``ValueError``, traced ones are
    reported by ``jaxwarp.checked`` (outside it only the low bits are kept)."""
    lo, hi = packed_range(et)
    if isinstance(values, jax.core.Tracer):
        if checked.enabled():
            v = values.astype(jnp.int32)
            bad = (v < lo) | (v > hi)
            flat = jnp.argmax(bad.reshape(-1))
            checked.check(~jnp.any(bad), f"{name} has value {{value}} at flat index {{index}}, "
                          f"outside the {et.name} range {lo} .. {hi}",
                          value=v.reshape(-1)[flat], index=flat)
        return
    v = np.asarray(values).astype(np.int64)
    bad = (v < lo) | (v > hi)
    if bad.any():
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(f"{name} holds {int(v[idx])} at index {idx}, outside the {et.name} "
                         f"range {lo} .. {hi} (allowed: {lo} .. {hi})")


def distribute(spec: FragmentType | Fragment, matrix: jax.Array) -> Fragment:
    """fragment_from_matrix without the argument checks (for values known to fit)."""
    ft = spec if isinstance(spec, FragmentType) else spec.ftype
    lin, _ = _gather_maps(ft)
    flat = matrix.reshape(*matrix.shape[:-2], -1)
    vals = take_bits(flat, lin)  # (..., 32, num_elements)
    return _make(ft, pack_values(ft.element_type, vals))


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
    _check_storage(frag, x)
    vals = unpack_values(et, x).astype(et.value_dtype)
    _, inv = _gather_maps(frag.ftype)
    flat = vals.reshape(*vals.shape[:-2], -1)
    out = take_bits(flat, inv)
    return out.reshape(*out.shape[:-1], frag.rows, frag.cols)


# ----------------------------------------------------------------------------------------
# fill_fragment


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
    frag = type_arg(frag, "frag")
    et = frag.element_type
    if isinstance(v, (Fragment, FragmentType)) or v is None or isinstance(v, (str, bytes)):
        raise TypeError(f"v must be a scalar number (int, float or a 0-d numeric array), "
                        f"got {type(v).__name__} {v!r}")
    if np.ndim(v) != 0:
        raise ValueError(f"v must be a scalar (fill_fragment sets every element to one "
                         f"value), got shape {np.shape(v)}")
    if isinstance(v, complex) and not isinstance(v, np.generic):
        raise TypeError(f"v must be a real scalar, got complex {v!r} (its imaginary part "
                        f"would be dropped)")
    weak = isinstance(v, (bool, int, float)) and not isinstance(v, np.generic)
    if weak:
        if isinstance(v, int) and not isinstance(v, bool) and not -(2**63) <= v < 2**64:
            raise ValueError(f"v={v} does not fit in 64 bits")
        value = v
    else:
        dtype = getattr(v, "dtype", None)
        if dtype is None or not (jnp.issubdtype(dtype, jnp.number) or dtype == np.bool_):
            raise TypeError(f"v must be a scalar number (int, float or a 0-d numeric array), "
                            f"got {type(v).__name__} {v!r}")
        value = checks.array_arg(v, "v")  # 64-bit with x64 off, complex: TypeError
    frag._require_x64()  # f64 storage: x64 on, or the fill would be narrowed
    storage = et.storage_dtype
    integer_elems = not jnp.issubdtype(storage, jnp.floating)
    is_float = (isinstance(value, float) if weak else jnp.issubdtype(value.dtype, jnp.floating))
    if et.packed:
        lo, hi = packed_range(et)
    elif integer_elems:
        info = np.iinfo(storage)
        lo, hi = int(info.min), int(info.max)
    if (integer_elems and is_float and isinstance(value, jax.core.Tracer)
            and not checked.enabled()):
        raise TypeError(f"v is a traced float for a {et.name} fragment: a NaN, inf or "
                        f"out-of-range value would be converted silently; pass an integer "
                        f"value (convert it yourself, e.g. jnp.trunc(v).astype(jnp.int32) "
                        f"after handling NaN), or run under jaxwarp.checked to have it "
                        f"checked")
    if integer_elems and (et.packed or is_float):
        _check_fill_range(value, weak, is_float, lo, hi, et.name)
    if et.packed:
        ints = jnp.asarray(value).astype(jnp.int32) if not weak else jnp.int32(
            int(value) if not is_float else int(np.trunc(value)))
        vals = jnp.full((checks.WARP_SIZE, frag.num_elements), ints)
        x = pack_values(et, vals)
    else:
        if weak and integer_elems and not is_float:
            # C++ integer conversion: wrap modulo 2**bits.
            fill = jnp.asarray(np.array(int(value) & ((1 << (8 * storage.itemsize)) - 1),
                                        np.uint64).astype(storage))
        elif weak and integer_elems:
            fill = jnp.asarray(np.array(np.trunc(value)).astype(storage))
        elif weak:
            fill = jnp.asarray(value, storage)  # one rounding, from the Python value
        else:
            fill = value.astype(storage)
        x = jnp.full((checks.WARP_SIZE, frag.num_storage_elements), fill, storage)
    return frag.from_storage(x)


def _check_fill_range(value: Any, weak: bool, is_float: bool, lo: int, hi: int,
                      type_name: str) -> None:
    """``v`` must convert into [lo, hi] (floats: finite, truncated toward zero)."""
    what = f"a {type_name} fragment (allowed: {lo} .. {hi}"
    what += ", finite floats truncated toward zero)" if is_float else ")"
    if isinstance(value, jax.core.Tracer):
        if checked.enabled():
            f = value.astype(jnp.float32) if is_float else value
            t = jnp.trunc(f) if is_float else f
            ok = (t >= lo) & (t <= hi)
            if is_float:
                ok = ok & jnp.isfinite(f)
            checked.check(ok, "fill_fragment: v={v} does not fit " + what, v=value)
        return
    if is_float:
        f = float(np.asarray(value))
        if not np.isfinite(f) or not lo <= np.trunc(f) <= hi:
            raise ValueError(f"v={f!r} does not fit {what}; C++ leaves this conversion "
                             f"undefined")
        return
    i = int(np.asarray(value))
    if not lo <= i <= hi:
        raise ValueError(f"v={i} does not fit {what}")
