"""PTX ``mma.sp::ordered_metadata.sync.aligned`` and ``mma.sp.sync.aligned``: sparse MMA.

``D = A @ B + C`` where A (16 x K) is 2:4 sparse (tf32 1:2; s4/u4 pairs 2:4): each lane
passes the *stored* half of A, a metadata register ``e`` that says where the stored
elements sit, and a sparsity selector ``F`` that says which lanes' ``e`` count (PTX ISA
9.7.14.6). The qualifier is the text after ``mma.sp::ordered_metadata.sync.aligned.``
(or a whole opcode; ``mma.sp.sync.aligned.`` is the legacy form, whose metadata may list
the two indices of a group in either order).

Register layouts (groupID ``g = lane >> 2``, ``t = lane % 4``): the stored A (16 x K/2)
is laid out as A of the dense ``mma.sync`` m16n8k(K/2); B (K x 8), C and D as those of
the dense m16n8kK (``mma_sync_registers``). E.g. f16 m16n8k32::

    A (16 x 16 stored), 4 registers of 2:   B (32 x 8), 4 registers of 2:
      a0,a1: (g,     2t..2t+1)                b0,b1: (2t..2t+1,      g)
      a2,a3: (g + 8, 2t..2t+1)                b2,b3: (2t+8..2t+9,    g)
      a4,a5: (g,     2t+8..2t+9)              b4,b5: (2t+16..2t+17,  g)
      a6,a7: (g + 8, 2t+8..2t+9)              b6,b7: (2t+24..2t+25,  g)

Metadata (``jaxwarp._src.instructions.sparse``): for f16 m16n8k32 with ``F = 1``, lane
``4g + 2`` holds the nibbles of groups 0-3 of rows g (bits 0-15) and g + 8 (bits 16-31),
lane ``4g + 3`` groups 4-7; the other lanes' ``e`` are ignored.

Arithmetic (H100 captures, every kind including undefined metadata): the dense
datapath of ``mma.sync`` at k = K/2 over the stored products only; each stored element
multiplies the row of B its metadata index names (``sparse.gather_b``). A pruned
element of A is never multiplied (an inf in B there does not make a NaN).
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxwarp._src import checks
from jaxwarp._src.arithmetic import datapath
from jaxwarp._src.catalogue import isa
from jaxwarp._src.catalogue.arch import check_target, parse_target, supported_target
from jaxwarp._src.catalogue.mma_sync_parse import LOGICAL_DTYPE, parse_mma
from jaxwarp._src.instructions import sparse
from jaxwarp._src.layouts import mma_sync_registers
from jaxwarp._src.layouts.mma_sync_registers import pack, regs_arg, unpack
from jaxwarp._src.warp import checked

__all__ = ["parse_mma_sp", "mma_sp_instructions", "mma_sp", "mma_sp_logical", "compute",
           "check_arch", "check_selector", "to_registers", "from_registers",
           "register_qualifier"]

Instr = sparse.SparseInstruction


def _candidates():
    out = []
    for r in isa.sparse_rows("mma_sp"):
        for (m, n, k) in r.shapes:
            for a in r.a_formats:
                for b in r.b_formats(a):
                    for c, d in r.cd:
                        for sat in ((False, True) if r.satfinite else (False,)):
                            for ordered in (True, False) if r.legacy else (True,):
                                out.append(Instr("mma_sp", m, n, k, a, b, c, d, sat, ordered))
    return tuple(out)


ALLOWED = _candidates()
_BY_PTX = {i.ptx: i for i in ALLOWED}


def mma_sp_instructions() -> tuple[str, ...]:
    """Every ``mma.sp`` opcode the model accepts: what ptxas 13.0 accepts for sm_90a (44
    shapes and types, each ordered and legacy; the selector is an operand).

    Example:
      >>> ops = mma_sp_instructions()
      >>> len(ops), ops[0]
      (88, 'mma.sp::ordered_metadata.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16')
    """
    return tuple(_BY_PTX)


def parse_mma_sp(qualifier: str | Instr) -> Instr:
    """The opcode ``mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.f16.f16.f32``
    (or its text after the prefix: ordered; ``mma.sp.sync.aligned.…``: legacy) -> a
    frozen record of it: ``family`` (``"mma_sp"``), ``m``, ``n``, ``k`` (the dense K),
    ``a_format``, ``b_format``, ``c_format``, ``d_format``, ``satfinite``, ``ordered``
    (False: legacy), ``qualifier``, ``ptx`` and ``nregs(use)`` (registers per lane of
    operand ``"a"``, ``"b"``, ``"c"`` or ``"d"``).

    Raises:
      ValueError: not one of :func:`mma_sp_instructions` (the message lists the shapes
        and types of the catalogue).

    Example:
      >>> parse_mma_sp("m16n8k64.row.col.satfinite.s32.s8.u8.s32").satfinite
      True
    """
    if isinstance(qualifier, Instr) and qualifier.family == "mma_sp":
        return qualifier
    if not isinstance(qualifier, str):
        raise TypeError(f"qualifier must be a str, got {type(qualifier).__name__}")
    q = qualifier.strip()
    full = q if q.startswith(("mma.sp::", "mma.sp.")) else sparse.MMA_SP_ORDERED + q
    if full not in _BY_PTX:
        shapes = "; ".join(f"{isa.shape_name(r.shapes[0])} {'/'.join(r.a_formats)}"
                           for r in isa.sparse_rows("mma_sp"))
        raise ValueError(f"qualifier={qualifier!r} is not an mma.sp instruction ptxas accepts "
                         f"for sm_90a; expected e.g. 'm16n8k32.row.col.f32.f16.f16.f32' "
                         f"(.row.col, D A B C types, .satfinite for integers) with one of: "
                         f"{shapes}; C/D f32.f32 or f16.f16 (f16), f32 (bf16, tf32, fp8), "
                         f"s32 (integers)")
    return _BY_PTX[full]


def check_arch(instr: Instr, arch: Any) -> Any:
    """A target name is checked to have the instruction (``isa.SPARSE_ROWS``' min_sm and
    the dense instruction of K/2); an ``ArchModel`` is taken as it is."""
    if isinstance(arch, str):
        target = parse_target(arch)
        supported_target(arch)
        row = instr.row
        if target.sm < row.min_sm:
            raise ValueError(f"{instr.ptx} needs sm_{row.min_sm} or newer; arch={arch!r}")
        check_target(target, instr.instruction, instr.a_format, instr.b_format, instr.k // 2)
    return arch


def check_selector(instr: Instr, selector: Any) -> int:
    selector = checks.static_int(selector, "selector")
    allowed = tuple(range(instr.row.selectors))
    if selector not in allowed:
        raise ValueError(f"selector={selector} is not a sparsity selector of {instr.ptx}; "
                         f"allowed: {allowed}")
    return selector


def compute(instr: Instr, a, nib, b, c, arch):
    """``D = A @ B + C`` from stored A (..., m, K/2), nibbles (..., m, chunks), B, C."""
    geo = instr.geometry
    checked.check(~jnp.any(sparse.undefined_nibbles(geo, nib, instr.ordered)),
                  f"{instr.ptx}: metadata the PTX ISA leaves undefined (a repeated index"
                  + (", indices out of order" if instr.ordered else "")
                  + (", a tf32 nibble other than 0b0100 / 0b1110" if geo.a_format == "tf32"
                     else "") + ")")
    if jnp.issubdtype(a.dtype, jnp.floating):
        return _product(instr, arch, a, nib, b, c)
    return _forward(instr, arch, a, nib, b, c)


def _forward(instr, arch, a, nib, b, c):
    bg = sparse.gather_b(instr.geometry, b, nib)  # (..., m, K/2, n)
    d = datapath.mma(a[..., :, None, :], bg, c[..., :, None, :], a_format=instr.a_format,
                     b_format=instr.b_format, c_format=instr.c_format,
                     d_format=instr.d_format, instruction=instr.instruction,
                     instruction_k=instr.k // 2, arch=arch, satf=instr.satfinite)
    return d[..., 0, :]


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1))
def _product(instr, arch, a, nib, b, c):
    return _forward(instr, arch, a, nib, b, c)


def _product_fwd(instr, arch, a, nib, b, c):
    return _forward(instr, arch, a, nib, b, c), (a, nib, b, c)


def _unbroadcast(x, like):
    x = x.sum(axis=tuple(range(x.ndim - like.ndim))) if x.ndim > like.ndim else x
    axes = tuple(i for i, (s, t) in enumerate(zip(like.shape, x.shape, strict=True))
                 if s == 1 and t != 1)
    return (x.sum(axis=axes, keepdims=True) if axes else x).astype(like.dtype)


def _product_bwd(instr, arch, res, g):
    # The dense datapath's straight-through rule for the dense A the stored elements
    # and their indices stand for (A_dense[m, row] = the stored elements that multiply
    # B's row ``row``): dA_dense = dD @ B^T, dB = A_dense^T @ dD, dC = dD in fp32, the
    # same einsums as ``datapath``'s backward, so a 2:4 A gets the bits the dense
    # instruction's gradient has at its stored positions. Pruned positions get none.
    a, nib, b, c = res
    f32, hi = jnp.float32, jax.lax.Precision.HIGHEST
    rows = sparse.stored_rows(instr.geometry, nib)  # (..., m, K/2): B row of each stored one
    onehot = (rows[..., None] == jnp.arange(instr.k, dtype=rows.dtype)).astype(f32)
    a_dense = jnp.einsum("...mj,...mjk->...mk", a.astype(f32), onehot, precision=hi)
    g = g.astype(f32)
    da_dense = jnp.einsum("...mn,...kn->...mk", g, b.astype(f32), precision=hi)
    da = jnp.take_along_axis(
        jnp.broadcast_to(da_dense, rows.shape[:-2] + da_dense.shape[-2:]), rows, axis=-1)
    db = jnp.einsum("...mn,...mk->...kn", g, a_dense, precision=hi)
    return (_unbroadcast(da, a), None, _unbroadcast(db, b), _unbroadcast(g, c))


_product.defvjp(_product_fwd, _product_bwd)


def _operand(instr, use, x, dims):
    x = jnp.asarray(x)
    ty = {"a": instr.a_format, "b": instr.b_format, "c": instr.c_format}[use]
    if x.dtype != LOGICAL_DTYPE[ty]:
        raise TypeError(f"{use} of {instr.ptx} must have dtype {LOGICAL_DTYPE[ty]} ({ty}), "
                        f"got {x.dtype}")
    if x.ndim < 2 or tuple(x.shape[-2:]) not in dims:
        want = " or ".join(f"(..., {r}, {c})" for r, c in dims)
        raise ValueError(f"{use} of {instr.ptx} must have shape {want}, got {tuple(x.shape)}")
    return x


def logical_operands(instr, a, b, c, indices):
    """Checks the logical operands; a dense A is compressed here. -> (a, nibbles, b, c)."""
    geo, m = instr.geometry, instr.m
    a = _operand(instr, "a", a, ((m, instr.k // 2), (m, instr.k)))
    b = _operand(instr, "b", b, ((instr.k, instr.n),))
    c = _operand(instr, "c", c, ((m, instr.n),))
    if a.shape[-1] == instr.k:  # dense A: 2:4 is checked, then compressed
        if indices is not None:
            raise ValueError(f"indices must be None when a is dense (..., {m}, {instr.k}); "
                             f"give a as (..., {m}, {instr.k // 2}) stored elements with "
                             f"indices, or the dense a alone")
        a, indices = sparse.compress_2_4(a, group=geo.group)
        if geo.group == 8:  # s4 / u4: a stored pair must be a whole pair
            pair_ok = (indices[..., 0::2] % 2 == 0) & (indices[..., 1::2] == indices[..., 0::2] + 1)
            if not isinstance(pair_ok, jax.core.Tracer) and not bool(jnp.all(pair_ok)):
                raise ValueError(f"a of {instr.ptx} is not 2:4 in pairs: each group of 8 "
                                 f"columns may keep 2 of its 4 pairs (2j, 2j+1)")
    else:
        if indices is None:
            raise ValueError(f"indices are needed with stored a (..., {m}, {instr.k // 2}): "
                             f"the column of each stored element in its group of "
                             f"{geo.group} (compress_2_4 gives both)")
        indices = checks.array_arg(indices, "indices")
        if tuple(indices.shape[-2:]) != (m, instr.k // 2) or not jnp.issubdtype(
                indices.dtype, jnp.integer):
            raise ValueError(f"indices must be integers of shape (..., {m}, {instr.k // 2}), "
                             f"got {indices.dtype} {tuple(indices.shape)}")
        if isinstance(indices, jax.core.Tracer):  # reported in checked mode
            checked.refuse_values(indices, lambda i: (i < 0) | (i >= geo.group), "indices",
                                  f"0 .. {geo.group - 1} (columns in a group of {geo.group})")
        else:
            iv = np.asarray(indices)
            if iv.size and (iv.min() < 0 or iv.max() >= geo.group):
                raise ValueError(f"indices must be in [0, {geo.group}) (columns in a group of "
                                 f"{geo.group}), got values in [{iv.min()}, {iv.max()}]")
    try:
        np.broadcast_shapes(a.shape[:-2], b.shape[:-2], c.shape[:-2], indices.shape[:-2])
    except ValueError as e:
        raise ValueError(f"batch axes of a {a.shape}, b {b.shape}, c {c.shape}, indices "
                         f"{indices.shape} do not broadcast") from e
    return a, sparse.nibbles_from_indices(geo, indices), b, c


def poison_rows(d: jax.Array, indices: Any, group: int) -> jax.Array:
    """D with NaN in the rows whose traced ``indices`` leave ``[0, group)`` (a float D;
    checked mode reports them, concrete ones were refused): never a plausible number."""
    if not isinstance(indices, jax.core.Tracer) or not jnp.issubdtype(d.dtype, jnp.floating):
        return d
    bad = jnp.any((indices < 0) | (indices >= group), axis=-1)
    return jnp.where(bad[..., None], jnp.asarray(jnp.nan, d.dtype), d)


def mma_sp_logical(qualifier: str | Instr, a: Any, b: Any, c: Any, *,
                   indices: Any = None, arch: Any = "sm_90") -> jax.Array:
    """``D = A @ B + C`` of one ``mma.sp`` on logical matrices.

    Args:
      qualifier: static, e.g. ``"m16n8k32.row.col.f32.f16.f16.f32"`` (ordered metadata) or
        a whole opcode (``mma.sp.sync.aligned.…`` for the legacy form); see
        :func:`parse_mma_sp`.
      a: either the stored elements (..., 16, K/2) with ``indices``, or the dense A
        (..., 16, K) that must be 2:4 (1:2 for tf32; s4/u4 2:4 in pairs): it is
        checked (concrete values raise; traced ones in checked mode) and compressed.
        Logical dtypes as ``mma_sync_ptx_logical``.
      b: (..., K, 8); c: (..., 16, 8).
      indices: with stored ``a``: (..., 16, K/2) ints, each stored element's column in
        its group (``sparse.compress_2_4``). Repeated or (ordered) decreasing indices are
        what the ISA leaves undefined: the model does what an H100 does, checked mode
        reports them. Indices outside ``[0, group)``: concrete ones raise ``ValueError``;
        traced ones are reported by ``jaxwarp.checked``, and outside it their rows of a
        float D are NaN (an integer D's are not meaningful).
      arch: a target with the instruction (``"sm_90"`` default; fp8 needs sm_89+).

    Returns:
      (..., 16, 8) in the D type's logical dtype.

    Example:
      >>> import jax.numpy as jnp
      >>> a = jnp.zeros((16, 32), jnp.float16).at[:, 1].set(2.0).at[:, 3].set(1.0)
      >>> b = jnp.ones((32, 8), jnp.float16); c = jnp.zeros((16, 8), jnp.float32)
      >>> float(mma_sp_logical("m16n8k32.row.col.f32.f16.f16.f32", a, b, c)[0, 0])
      3.0
    """
    instr = parse_mma_sp(qualifier)
    arch = check_arch(instr, arch)
    a, b, c = checks.array_args(a=a, b=b, c=c)
    a, nib, b, c = logical_operands(instr, a, b, c, indices)
    return poison_rows(_logical_jit(instr, arch, a, nib, b, c), indices, instr.geometry.group)


@functools.partial(jax.jit, static_argnums=(0, 1))
def _logical_jit(instr, arch, a, nib, b, c):
    return compute(instr, a, nib, b, c, arch)


def mma_sp(qualifier: str | Instr, a_regs: Any, b_regs: Any, c_regs: Any, e: Any, *,
           selector: int = 0, arch: Any = "sm_90") -> jax.Array:
    """One warp's ``mma.sp``: ``{d} = mma.sp({a}, {b}, {c}, e, F)`` on registers.

    Args:
      qualifier: as :func:`mma_sp_logical`.
      a_regs: (..., 32, nregs("a")) uint32: the stored A in the layout of the dense
        m16n8k(K/2) A; b_regs, c_regs: of the dense m16n8kK (docs/sparse.md, "Register
        layouts"). :func:`to_registers` with the ``mma.sp`` opcode (or this record)
        builds them, :func:`from_registers` reads d; ``parse_mma_sp(qualifier).nregs(use)``
        gives nregs.
      e: (..., 32) uint32: every lane's metadata register
        (``jaxwarp.sparse.metadata_words``); only the lanes ``selector`` names count.
      selector: the sparsity selector F, static (``jaxwarp.isa.SPARSE_ROWS``: 0..3, 0..1
        or 0).
      arch: as :func:`mma_sp_logical`.

    Returns:
      d registers (..., 32, nregs("d")) uint32.

    Example:
      >>> import jax.numpy as jnp
      >>> q = "m16n8k16.row.col.f32.f16.f16.f32"
      >>> a = jnp.full((32, 2), 0x3C003C00, jnp.uint32)   # every stored f16 is 1.0
      >>> b = jnp.full((32, 2), 0x40004000, jnp.uint32)   # every f16 of B is 2.0
      >>> e = jnp.full((32,), 0x44444444, jnp.uint32)     # indices 0, 1 in every group
      >>> d = mma_sp(q, a, b, jnp.zeros((32, 4), jnp.uint32), e)
      >>> hex(int(d[0, 0]))                                # 8 products of 2.0: 16.0
      '0x41800000'
    """
    instr = parse_mma_sp(qualifier)
    arch = check_arch(instr, arch)
    selector = check_selector(instr, selector)
    a_regs, b_regs, c_regs, e = checks.array_args(a_regs=a_regs, b_regs=b_regs,
                                                  c_regs=c_regs, e=e)
    regs = []
    for u, r in (("a", a_regs), ("b", b_regs), ("c", c_regs)):
        dense = instr.dense(u)
        try:
            regs.append(regs_arg(dense, u, r, f"{u}_regs"))
        except TypeError as err:  # name the sparse instruction, not its dense layout
            raise TypeError(str(err).replace(dense.qualifier, f"{instr.ptx} (the layout of "
                                             f"dense {dense.qualifier})")) from None
    e = jnp.asarray(e)
    if e.dtype != jnp.uint32 or e.ndim < 1 or e.shape[-1] != 32:
        raise ValueError(f"e must be uint32 of shape (..., 32) (one metadata register per "
                         f"lane), got {e.dtype} {tuple(e.shape)}")
    try:
        np.broadcast_shapes(*(r.shape[:-2] for r in regs), e.shape[:-1])
    except ValueError as err:
        raise ValueError(f"batch axes of a_regs, b_regs, c_regs {[r.shape for r in regs]} "
                         f"and e {e.shape} do not broadcast") from err
    return _regs_jit(instr, arch, selector, *regs, e)


@functools.partial(jax.jit, static_argnums=(0, 1, 2))
def _regs_jit(instr, arch, selector, a_regs, b_regs, c_regs, e):
    a = unpack(instr.dense("a"), "a", a_regs)
    b = unpack(instr.dense("b"), "b", b_regs)
    c = unpack(instr.dense("c"), "c", c_regs)
    nib = sparse.nibbles_from_words(instr.geometry, e, selector)
    return pack(instr.dense("d"), "d", compute(instr, a, nib, b, c, arch))


# --------------------------------------------------------------------------------------
# jaxwarp.to_registers / from_registers: mma.sync and mma.sp qualifiers alike (the
# layouts are ``mma_sync_registers``'; the sparse operands' are ``Instr.dense``'s).


def register_qualifier(qualifier: Any) -> Any:
    """The record whose register layouts :func:`to_registers` uses: an ``mma.sp`` opcode
    (``mma.sp::ordered_metadata.…``, ``mma.sp.sync.aligned.…``) -> :func:`parse_mma_sp`'s
    record; an ``mma.sync`` qualifier -> ``parse_mma``'s. A qualifier without prefix
    is ``mma.sync``'s (f16 m16n8k16 is both, with different A layouts); one that only
    ``mma.sp`` has is a ValueError naming the sparse opcode to write."""
    if not isinstance(qualifier, str):
        return qualifier
    q = qualifier.strip()
    if q.startswith("mma.sp"):
        return parse_mma_sp(q)
    try:
        return parse_mma(q)
    except ValueError as err:
        try:
            sparse_instr = parse_mma_sp(q)
        except ValueError:
            raise err from None
        raise ValueError(f"{err}. {q!r} is an mma.sp shape: for its registers name the "
                         f"sparse opcode, qualifier={sparse_instr.ptx!r} (or "
                         f"jaxwarp.parse_mma_sp's record)") from None


def to_registers(qualifier: Any, use: str, x: Any) -> jax.Array:
    """Logical operand -> one warp's registers, for ``mma.sync`` and ``mma.sp``.

    ``mma.sync``: the fragment layouts of the PTX ISA ("Matrix Fragments for
    mma.mMnNkK"), a register holding ``32 // bits`` elements, the lower-numbered element
    in the lower bits (``.kind::f8f6f4``: one element per byte, e2m3 / e3m2 codes in bits
    5:0, e2m1 in bits 5:2). ``mma.sp`` (its whole opcode, or :func:`parse_mma_sp`'s
    record): ``"a"`` is the stored half of A (16 x K/2, ``jaxwarp.sparse.compress_2_4``'s
    values) in the layout of A of the dense m16n8k(K/2); ``"b"`` (K x 8), ``"c"`` and
    ``"d"`` are laid out as those of the dense m16n8kK, which need not exist as a dense
    instruction (f16 m16n8k32). The metadata register: ``jaxwarp.sparse.metadata_words``.

    Args:
      qualifier: static: an ``mma.sync`` qualifier (``"m16n8k16.row.col.f32.f16.f16.f32"``,
        with or without ``mma.sync.aligned.``, or :func:`jaxwarp.parse_mma`'s record), or
        an ``mma.sp`` opcode (``"mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.
        f32.f16.f16.f32"``; ``mma.sp.sync.aligned.…``) or :func:`parse_mma_sp`'s record.
      use: ``"a"``, ``"b"``, ``"c"`` or ``"d"``, static.
      x: (..., rows, cols) in the logical dtype of the operand's type (as
        :func:`jaxwarp.mma_sync_ptx_logical` / :func:`mma_sp_logical` take it;
        ``.kind::f8f6f4``'s elements as uint8 codes); for f16 m8n8k4 (..., 4, rows,
        cols), one matrix per quadpair.

    Returns:
      (..., 32, nregs) uint32 (uint64 for f64).

    Example:
      >>> import jax.numpy as jnp
      >>> a = jnp.arange(256, dtype=jnp.float16).reshape(16, 16)
      >>> r = to_registers("m16n8k16.row.col.f32.f16.f16.f32", "a", a)
      >>> r.shape, hex(int(r[1, 0]))    # lane 1: row 0, cols 2 (low half), 3 (high half)
      ((32, 4), '0x42004000')
      >>> q = "mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.f16.f16.f32"
      >>> b = jnp.arange(256, dtype=jnp.float16).reshape(32, 8)
      >>> r = to_registers(q, "b", b)
      >>> r.shape, hex(int(r[1, 2]))    # lane 1: column 0, rows 18 (low), 19 (high)
      ((32, 4), '0x58c05880')
    """
    return mma_sync_registers.to_registers(register_qualifier(qualifier), use, x)


def from_registers(qualifier: Any, use: str, regs: Any) -> jax.Array:
    """One warp's registers -> the logical operand (inverse of :func:`to_registers`), for
    ``mma.sync`` and ``mma.sp`` qualifiers alike.

    Args:
      qualifier: as :func:`to_registers`, static.
      use: ``"a"``, ``"b"``, ``"c"`` or ``"d"``, static.
      regs: (..., 32, nregs) uint32 (uint64 for f64).

    Returns:
      (..., rows, cols) (f16 m8n8k4: (..., 4, rows, cols)) in the logical dtype;
      ``mma.sp``'s ``"a"``: the stored half (..., 16, K/2).

    Example:
      >>> import jax.numpy as jnp
      >>> regs = jnp.full((32, 1), 0x89ABCDEF, jnp.uint32)
      >>> from_registers("m8n8k32.row.col.s32.s4.s4.s32", "a", regs)[0, :8].tolist()
      [-1, -2, -3, -4, -5, -6, -7, -8]
      >>> q = "mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.f16.f16.f32"
      >>> from_registers(q, "d", jnp.zeros((32, 4), jnp.uint32)).shape
      (16, 8)
    """
    return mma_sync_registers.from_registers(register_qualifier(qualifier), use, regs)
