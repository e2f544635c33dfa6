"""WMMA fragment types and fragment values.

A ``FragmentType`` is CUDA's type ``nvcuda::wmma::fragment<Use, m, n, k, T, Layout>``
(frozen, hashable, no registers); a ``Fragment`` is a value of it: each of the 32 lanes
of a warp holds ``num_storage_elements`` values ``x[i]``. Here ``x`` is one array of
shape ``(32, num_storage_elements)`` (lane axis first); many warps are a ``jax.vmap``
away.

Where the elements sit in the registers is ``fragment_layouts``; the storage words
(sub-byte packing, ``fill``'s conversion) are ``fragment_storage``; the functions of
the WMMA API that take a type or a value (``fragment_from_matrix``,
``matrix_from_fragment``, ``fill_fragment``, the lane maps) are ``fragments``.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxwarp._src import checks
from jaxwarp._src.catalogue import wmma_table as table
from jaxwarp._src.layouts import fragment_layouts, fragment_storage, layouts
from jaxwarp._src.numerics import bitops
from jaxwarp._src.numerics.formats import ALIASES

WARP_SIZE = checks.WARP_SIZE


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
        return fragment_layouts.num_elements(self.use, self.m, self.n, self.k, self.type)

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
        return fragment_layouts.layout_bases_of(*self._key)

    def register_layout(self) -> layouts.Layout:
        """The layout of this type's registers as a named linear layout over GF(2)
        (docs/lane_maps.md, "mma.sync and wgmma register layouts"); ``text()`` draws it."""
        return fragment_layouts.register_layout_of(*self._key)

    def lane_map(self) -> tuple[np.ndarray, np.ndarray]:
        """``(rows, cols)`` of the element held by each (lane, i) (see ``lane_map``)."""
        return fragment_layouts.lane_map_of(*self._key)

    def lane_map_text(self) -> str:
        """This type's layout as an ASCII grid (see ``lane_map_text``)."""
        return fragment_layouts.register_layout_of(*self._key).text()

    @property
    def _key(self) -> tuple[str, int, int, int, str]:
        """``(use, m, n, k, type)``: what the registers' layout depends on."""
        return (self.use, self.m, self.n, self.k, self.type)

    # -- values --------------------------------------------------------------------------

    def zeros(self) -> Fragment:
        """A value of this type with ``x`` all zeros (what ``fragment(...)`` returns).

        Raises:
            RuntimeError: ``f64`` without ``jax_enable_x64``.
        """
        self._require_x64()
        return unchecked_value(self, jnp.zeros(self.storage_shape, self.dtype))

    def fill(self, v: Any) -> Fragment:
        """A value of this type with every element ``v``: ``fill_fragment(self, v)``."""
        return self.from_storage(
            fragment_storage.fill_storage(self, v, refuse=(Fragment, FragmentType)))

    def from_matrix(self, matrix: Any) -> Fragment:
        """The logical matrix over the lanes: ``fragment_from_matrix(self, matrix)``."""
        et = self.element_type
        matrix = checks.array_arg(matrix, "matrix")
        want = (self.rows, self.cols)
        if tuple(matrix.shape[-2:]) != want:
            raise ValueError(f"matrix for a {self.use} m{self.m}n{self.n}k{self.k} fragment "
                             f"must have shape (..., {want[0]}, {want[1]}), got "
                             f"{tuple(matrix.shape)}")
        if matrix.dtype != et.value_dtype:
            raise TypeError(f"matrix for a {self.type} fragment must have dtype "
                            f"{et.value_dtype}, got {matrix.dtype}")
        if et.packed:
            fragment_storage.check_packed_range(et, matrix, "matrix")
        return distribute(self, matrix)

    def from_storage(self, x: Any) -> Fragment:
        """A value of this type holding the per-lane storage ``x`` (not copied).

        Args:
            x: ``(..., 32, num_storage_elements)`` array of the storage dtype (leading
                axes are batches of warps); may be traced.

        Raises:
            ValueError: ``x`` of the wrong shape.
            TypeError: ``x`` of the wrong dtype.
        """
        check_storage(self, x)
        return unchecked_value(self, x)

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
            new = unchecked_value(FragmentType(d["use"], d["m"], d["n"], d["k"], d["type"],
                                     d["layout"]), changes["x"])
        else:
            new = dataclasses.replace(self, **changes)
            if "ftype" in self.__dict__:  # the same description: keep its checked type
                new.__dict__["ftype"] = self.__dict__["ftype"]
        if "x" in changes:
            check_storage(new, new.x)
        return new

    def __repr__(self) -> str:
        layout = f", {self.layout}" if self.layout else ""
        x = getattr(self.x, "shape", None)
        return (f"Fragment({self.use}, m{self.m}n{self.n}k{self.k}, {self.type}{layout}, "
                f"x={x})")


jax.tree_util.register_dataclass(
    Fragment, data_fields=["x"], meta_fields=["use", "m", "n", "k", "type", "layout"])


def unchecked_value(ft: FragmentType, x: Any) -> Fragment:
    """A ``Fragment`` of type ``ft`` holding ``x`` (unchecked), its ``ftype`` preset."""
    frag = Fragment(x, ft.use, ft.m, ft.n, ft.k, ft.type, ft.layout)
    frag.__dict__["ftype"] = ft  # the cached_property's slot; ft is already checked
    return frag


def check_storage(frag: Fragment | FragmentType, x: Any) -> None:
    """``x`` must be the storage of ``frag``'s type: (..., 32, num_storage_elements), its dtype."""
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


def distribute(spec: FragmentType | Fragment, matrix: jax.Array) -> Fragment:
    """fragment_from_matrix without the argument checks (for values known to fit)."""
    ft = spec if isinstance(spec, FragmentType) else spec.ftype
    lin, _ = fragment_layouts.gather_maps_of(*ft._key)
    flat = matrix.reshape(*matrix.shape[:-2], -1)
    vals = bitops.take_bits(flat, lin)  # (..., 32, num_elements)
    return unchecked_value(ft, fragment_storage.pack_values(ft.element_type, vals))
