"""Example Pallas kernels in Triton's style, to run on a GPU or under ``jaxwarp.emulate``
(public as ``jaxwarp.kernels``; the capture tool and the conformance handler use them).

``triton_matmul`` is the classic blocked matrix product: one program per output block, a
``lax.fori_loop`` over the K blocks accumulating ``jnp.dot(..., preferred_element_type=
jnp.float32)`` in an fp32 accumulator. Under ``jaxwarp.emulate(..., operand_format=None)``
every ``jnp.dot`` of the kernel is the instruction chain Triton issues on sm_90a, with the
accumulator adds folded into the chain as Triton folds them.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pltriton

__all__ = ["FORMS", "triton_matmul"]

#: The kernel's forms: how C enters (see :func:`triton_matmul`).
FORMS = ("tiled", "c_init", "c_epilogue", "two_dots")
#: Operand dtypes Triton's dot takes here.
_DTYPES = ("float16", "bfloat16", "float8_e4m3fn", "float8_e5m2", "float32")
_OUT_DTYPES = ("float32", "float16", "bfloat16")


def _kernel(*refs, bk: int, nk: int, form: str, has_c: bool, precision):
    if has_c:
        a_ref, b_ref, c_ref, o_ref = refs
    else:
        a_ref, b_ref, o_ref = refs
    bm, bn = o_ref.shape

    def dot(a, b):
        return jnp.dot(a, b, preferred_element_type=jnp.float32, precision=precision)

    def body(i, acc):
        if form == "two_dots":
            # the halves are loaded as two blocks (a slice of a loaded value has no
            # Pallas Triton lowering in JAX 0.11)
            h = bk // 2
            lo = dot(a_ref[:, pl.ds(i * bk, h)], b_ref[pl.ds(i * bk, h), :])
            hi = dot(a_ref[:, pl.ds(i * bk + h, h)], b_ref[pl.ds(i * bk + h, h), :])
            return acc + lo + hi
        a = a_ref[:, pl.ds(i * bk, bk)]
        b = b_ref[pl.ds(i * bk, bk), :]
        return acc + dot(a, b)

    init = c_ref[...].astype(jnp.float32) if form == "c_init" else jnp.zeros((bm, bn),
                                                                             jnp.float32)
    acc = lax.fori_loop(0, nk, body, init)
    if form == "c_epilogue":
        acc = acc + c_ref[...].astype(jnp.float32)
    o_ref[...] = acc.astype(o_ref.dtype)


def triton_matmul(a, b, c=None, *, block=(64, 64, 32), num_warps=4, form="tiled",
                  interpret=False, out_dtype=jnp.float32, precision=None):
    """``a @ b`` (+ ``c``) as a Triton-style Pallas kernel.

    The grid is ``(M / bm, N / bn)``; each program loops over the ``K / bk`` blocks of K
    with ``lax.fori_loop``, accumulating ``jnp.dot(a_blk, b_blk,
    preferred_element_type=jnp.float32)`` in an fp32 accumulator, and stores the
    accumulator converted to ``out_dtype``.

    Forms: ``"tiled"`` (the accumulator starts at zero; no ``c``), ``"c_init"`` (it
    starts at the C block), ``"c_epilogue"`` (from zero, C added after the loop),
    ``"two_dots"`` (each K step ``acc = acc + dot(a_lo, b_lo) + dot(a_hi, b_hi)`` over the
    two halves of the K block; no ``c``).

    Args:
        a: (M, K) array (f16, bf16, e4m3, e5m2 or f32).
        b: (K, N) array of ``a``'s dtype.
        c: (M, N) array, for the forms ``"c_init"`` and ``"c_epilogue"`` only.
        block: static ``(bm, bn, bk)``, dividing M, N and K (``bk`` even for
            ``"two_dots"``).
        num_warps: Triton's warps per program (``pltriton.CompilerParams``).
        form: one of :data:`FORMS`.
        interpret: run JAX's Pallas interpreter (``jaxwarp.emulate`` interprets the
            kernel itself either way).
        out_dtype: float32, float16 or bfloat16.
        precision: the dots' ``precision`` (``None``: the default). For f32 operands
            the default and ``HIGH`` give Triton's TF32 dot, ``HIGHEST`` its IEEE
            (FMA) dot; other dtypes ignore it, as Triton does.

    Returns:
        (M, N) array of ``out_dtype``.

    Raises:
        ValueError / TypeError: shapes, dtypes, block, form or warps not allowed (the
            message names the argument and what is allowed).

    Example:
        >>> a = jnp.ones((32, 64), jnp.bfloat16); b = jnp.ones((64, 32), jnp.bfloat16)
        >>> kernel = lambda x, y: jaxwarp.kernels.triton_matmul(x, y, block=(16, 16, 32),
        ...                                                     num_warps=1)
        >>> out, rep = jaxwarp.emulate(kernel, arch="sm_90a", operand_format=None,
        ...                            report=True)(a, b)
        >>> float(out[0, 0]), rep.entries[0].instruction, rep.entries[0].operand_format
        (64.0, 'mma_sync', 'bf16')
    """
    if form not in FORMS:
        raise ValueError(f"form={form!r} is not supported; allowed: {FORMS}")
    if not (isinstance(block, (tuple, list)) and len(block) == 3
            and all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in block)):
        raise TypeError(f"block must be a static (bm, bn, bk) tuple of positive ints, "
                        f"got {block!r}")
    if isinstance(num_warps, bool) or not isinstance(num_warps, int) or num_warps <= 0:
        raise TypeError(f"num_warps must be a positive int, got {num_warps!r}")
    bm, bn, bk = block
    a, b = jnp.asarray(a), jnp.asarray(b)
    for name, x in (("a", a), ("b", b)):
        if x.ndim != 2:
            raise ValueError(f"{name} must be 2-D, got shape {tuple(x.shape)}")
        if jnp.dtype(x.dtype).name not in _DTYPES:
            raise TypeError(f"{name} has dtype {jnp.dtype(x.dtype).name}; allowed: "
                            f"{_DTYPES}")
    if a.dtype != b.dtype:
        raise TypeError(f"a and b must have one dtype (Triton's dot), got "
                        f"{jnp.dtype(a.dtype).name} and {jnp.dtype(b.dtype).name}")
    (M, K), (K2, N) = a.shape, b.shape
    if K != K2:
        raise ValueError(f"a is {M}x{K} and b is {K2}x{N}: inner dimensions differ")
    for dim, size, t in (("M", M, bm), ("N", N, bn), ("K", K, bk)):
        if size % t:
            raise ValueError(f"{dim}={size} is not a multiple of its block {t} "
                             f"(block={tuple(block)})")
    if form == "two_dots" and bk % 2:
        raise ValueError(f"form='two_dots' splits the K block in halves: bk={bk} is odd")
    out_dtype = jnp.dtype(out_dtype)
    if out_dtype.name not in _OUT_DTYPES:
        raise TypeError(f"out_dtype={out_dtype.name}; allowed: {_OUT_DTYPES}")
    has_c = form in ("c_init", "c_epilogue")
    if has_c != (c is not None):
        raise ValueError(f"form={form!r} " + ("needs c (an (M, N) array)" if has_c else
                                              "takes no c (use 'c_init' or 'c_epilogue')"))
    operands = [a, b]
    in_specs = [pl.BlockSpec((bm, K), lambda i, j: (i, 0)),
                pl.BlockSpec((K, bn), lambda i, j: (0, j))]
    if has_c:
        c = jnp.asarray(c)
        if c.shape != (M, N):
            raise ValueError(f"c must have shape {(M, N)}, got {tuple(c.shape)}")
        operands.append(c)
        in_specs.append(pl.BlockSpec((bm, bn), lambda i, j: (i, j)))
    allowed = (None, lax.Precision.DEFAULT, lax.Precision.HIGH, lax.Precision.HIGHEST)
    if precision not in allowed:
        raise ValueError(f"precision={precision!r} is not supported; allowed: None, "
                         f"lax.Precision.DEFAULT, HIGH, HIGHEST")
    kernel = functools.partial(_kernel, bk=bk, nk=K // bk, form=form, has_c=has_c,
                               precision=precision)
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((M, N), out_dtype),
        grid=(M // bm, N // bn),
        in_specs=in_specs,
        out_specs=pl.BlockSpec((bm, bn), lambda i, j: (i, j)),
        compiler_params=pltriton.CompilerParams(num_warps=num_warps),
        interpret=interpret,
        name=f"triton_matmul_{form}",
    )(*operands)
