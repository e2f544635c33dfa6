"""The native GEMM kernel: the exact model's chain of ``wgmma`` instructions, run on an
H100's tensor cores through Pallas' Triton backend.

One primitive, :data:`chain_dot_p`, is the kernel's only arithmetic: ``D = A @ B + C``
over one (bm, bk) x (bk, bn) block, C the accumulator carried in registers. On a GPU it
lowers to Triton's ``tt.dot`` with C as its accumulator operand, which Triton issues on
sm_90 as ``wgmma.mma_async`` instructions of the format's k (16 for f16 / bf16, 8 for tf32,
32 for e4m3 / e5m2) in ascending k, each taking the previous one's D as its C. Two Triton
settings make that chain the model's:

* ``max_num_imprecise_acc`` is set above any K. Triton's default for fp8 dots that Pallas
  builds (0) makes Triton add every fp8 instruction's result to a separate fp32
  accumulator (promotion every 32 k-elements); with it large the fp8 chain keeps C in
  the instruction (the model's un-promoted chain), and promotion is written out below.
* each promotion interval's chain starts from a zero that Triton cannot see as a
  constant (read from memory): Triton folds ``acc + dot(a, b, 0)`` into
  ``dot(a, b, acc)`` -- the chain without promotion. ``max_num_imprecise_acc`` nonzero
  stops that fold for f16 / bf16 / fp8 dots, but it was measured on an H100 (jax 0.11.2)
  to happen for tf32 dots; with an opaque zero the fp32 addition (``arith.addf``, round
  to nearest even) stays the model's promotion, and the first instruction adds a +0 C,
  as in the model.

tf32 operands go in as fp32 words already rounded by ``__float_to_tf32`` (``matmul``'s
conversion), so the tensor core's dropping of the low 13 bits changes nothing. fp8
``wgmma`` reads both operands K-major from shared memory: with ``DotSpec.b_kmajor`` the
kernel takes B transposed, (N, K), and transposes each block back in the dot (Triton's
fp8 GEMMs on Hopper do the same), so Triton need not transpose B's tiles itself.

The kernel (:func:`gemm`): a grid of (bm, bn) output tiles; each starts from its C tile and
walks k in blocks of bk (a power of two, a multiple of the instruction's k). K is never
padded (an extra instruction of zero products is not the identity: wgmma fp8 cuts C to
13 fraction bits and -0 + 0 is +0), so a K that bk does not divide ends with smaller
power-of-two blocks (:func:`pieces`). With promotion every P k-elements each interval's
chain starts from zero and is added to the fp32 accumulator::

    acc = C
    for each interval of P k-elements (the last one shorter):
        part = 0
        for each block of the interval: part = dot(a_blk, b_blk, part)   # wgmma chain
        acc = acc + part                                                  # fp32 RN add

Off the GPU (``interpret=True``) :data:`chain_dot_p` is the exact model's chain of the
same instructions, so the kernel's structure (blocks, tails, promotion, k order) can be
checked on a CPU against ``matmul(mode="exact")``; only the GPU run is the tensor core.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.extend import core as jex_core
from jax.interpreters import mlir

from jaxwarp._src.arithmetic import datapath

#: Triton's ``max_num_imprecise_acc`` for every dot: above any K, nonzero (see above).
MAX_IMPRECISE_ACC = 1 << 30


@dataclasses.dataclass(frozen=True)
class DotSpec:
    """Static description of one block product (hashable: a primitive parameter)."""

    a_format: str
    b_format: str
    accumulator: str
    k: int  # the instruction's k
    b_kmajor: bool = False  # B's blocks come as (n, k): the product is a @ b.T


def _abstract_eval(a, b, c, *, spec: DotSpec):
    bk, bn = b.shape[::-1] if spec.b_kmajor else b.shape
    if a.shape[1] != bk or c.shape != (a.shape[0], bn):
        raise ValueError(f"chain_dot: shapes {a.shape} @ {b.shape} + {c.shape} disagree")
    if a.shape[1] % spec.k:
        raise ValueError(f"chain_dot: block k {a.shape[1]} is not a multiple of the "
                         f"instruction's k={spec.k}")
    return c  # D has C's shape and type


def _model(a, b, c, *, spec: DotSpec):
    """The exact model of the same chain (interpret mode, CPU)."""
    if spec.b_kmajor:
        b = b.T
    return datapath.mma(a, b, c, a_format=spec.a_format, b_format=spec.b_format,
                        c_format=spec.accumulator, d_format=spec.accumulator, arch="sm_90a",
                        instruction="wgmma", instruction_k=spec.k)


chain_dot_p = jex_core.Primitive("jaxwarp_chain_dot")
chain_dot_p.def_abstract_eval(_abstract_eval)
chain_dot_p.def_impl(_model)
mlir.register_lowering(chain_dot_p, mlir.lower_fun(_model, multiple_results=False))


def _triton_rule(ctx, a, b, c, *, spec: DotSpec):
    """``tt.dot(a, b, c)``: Triton's wgmma chain with C as the accumulator operand."""
    from jax._src.lib.triton import dialect as tt_dialect  # noqa: PLC0415 (GPU only)

    del ctx
    precision = tt_dialect.InputPrecision.TF32 if spec.a_format == "tf32" else None
    if spec.b_kmajor:
        b = tt_dialect.trans(b, (1, 0))
    return tt_dialect.dot(a, b, c, input_precision=precision,
                          max_num_imprecise_acc=MAX_IMPRECISE_ACC)


@functools.cache
def register_triton_rule() -> None:
    """Adds :data:`chain_dot_p` to Pallas' Triton lowering rules (once).

    Raises:
        RuntimeError: this JAX has no Pallas Triton backend (a jaxlib without GPU support).
    """
    try:
        from jax._src.pallas.triton import lowering  # noqa: PLC0415 (GPU only)
    except ImportError as e:  # pragma: no cover (jaxlib without triton)
        raise RuntimeError(f"mode='native' needs JAX's Pallas Triton backend "
                           f"(jax[cuda]); importing it failed: {e}") from e
    lowering.triton_lowering_rules[chain_dot_p] = _triton_rule


def pieces(length: int, block: int) -> tuple[tuple[int, int], ...]:
    """How the kernel covers ``length`` k-elements: ``(block size, count)`` pairs in k
    order, whole blocks of ``block`` first, then the rest in descending powers of two.

    ``length`` must be a multiple of the instruction's k and ``block`` a power of two
    multiple of it, so every piece is a whole number of instructions.

    Example:
        >>> pieces(4096 + 48, 64)
        ((64, 64), (32, 1), (16, 1))
    """
    q, r = divmod(length, block)
    out = [(block, q)] if q else []
    b = block // 2
    while r:
        if r >= b:
            out.append((b, 1))
            r -= b
        b //= 2
    return tuple(out)


@dataclasses.dataclass(frozen=True)
class Plan:
    """Static shape of one native GEMM kernel."""

    spec: DotSpec
    K: int
    block: tuple[int, int, int]  # (bm, bn, bk)
    promote_every: int | None
    num_warps: int
    num_stages: int


def _kernel(a_ref, b_ref, c_ref, z_ref, o_ref, *, plan: Plan):
    spec, (bm, bn, _) = plan.spec, plan.block

    def chain(acc, k0, length):  # the instruction chain over k0 .. k0 + length, in order
        off = k0
        for size, count in pieces(length, plan.block[2]):
            def step(i, acc, off=off, size=size):
                s = off + i * size
                if not isinstance(s, int):
                    s = pl.multiple_of(s, size)
                at = a_ref[:, pl.ds(s, size)]
                bt = b_ref[:, pl.ds(s, size)] if spec.b_kmajor else b_ref[pl.ds(s, size), :]
                return chain_dot_p.bind(at, bt, acc, spec=spec)

            acc = step(0, acc) if count == 1 else lax.fori_loop(0, count, step, acc)
            off = off + size * count
        return acc

    acc = c_ref[...]
    if plan.promote_every is None:
        acc = chain(acc, 0, plan.K)
    else:
        p = plan.promote_every
        full, rem = divmod(plan.K, p)
        zero = jnp.broadcast_to(z_ref[...], (bm, bn))  # +0 from memory: not foldable
        if full:
            acc = lax.fori_loop(0, full, lambda j, acc: acc + chain(zero, j * p, p), acc)
        if rem:
            acc = acc + chain(zero, full * p, rem)
    o_ref[...] = acc


def gemm(a, b, c, plan: Plan, *, interpret: bool = False):
    """``D = A @ B + C`` through the native kernel: (M, K) @ (K, N) + (M, N), with M and N
    multiples of the plan's bm and bn and K the plan's K; B given as (N, K) where
    ``plan.spec.b_kmajor``."""
    from jax.experimental.pallas import triton as pltriton  # noqa: PLC0415

    (M, K), N = a.shape, b.shape[0 if plan.spec.b_kmajor else 1]
    bm, bn, _ = plan.block
    if K != plan.K or M % bm or N % bn:
        raise ValueError(f"gemm: {a.shape} @ {b.shape} does not fit the plan {plan}")
    if not interpret:
        register_triton_rule()
    return pl.pallas_call(
        functools.partial(_kernel, plan=plan),
        grid=(M // bm, N // bn),
        in_specs=[pl.BlockSpec((bm, K), lambda i, j: (i, 0)),
                  pl.BlockSpec((bn, K), lambda i, j: (j, 0)) if plan.spec.b_kmajor else
                  pl.BlockSpec((K, bn), lambda i, j: (0, j)),
                  pl.BlockSpec((bm, bn), lambda i, j: (i, j)),
                  pl.BlockSpec((1, bn), lambda i, j: (0, 0))],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j: (i, j)),
        out_shape=jax.ShapeDtypeStruct((M, N), c.dtype),
        compiler_params=pltriton.CompilerParams(num_warps=plan.num_warps,
                                                num_stages=plan.num_stages),
        interpret=interpret,
        name="jaxwarp_native_gemm",
    )(a, b, c, jnp.zeros((1, bn), c.dtype))
