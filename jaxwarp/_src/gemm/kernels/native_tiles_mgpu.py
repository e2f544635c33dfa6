"""Many small tiles on a Hopper GPU's tensor cores through Pallas' Mosaic GPU backend:
exact ``jaxwarp.mma`` chains whose datapath is ``wgmma``'s, the backend JAX keeps.

The same tiles as ``native_tiles`` (the Triton backend's kernel), another layout.
``wgmma``'s smallest product has 64 rows, a tile m (16 for WMMA's and ``mma.sync``'s
shapes). A group of g = 64 / m tiles shares one A: their A's stacked as the product's 64
rows (a free reshape of the batch), their C's stacked the same way. Tile i of the group
gets one ``wgmma`` chain of its own, ``C_stack + A_stack @ B_i`` (64 x n): every element
of a ``wgmma`` D depends only on its row of A, its column of B and its element of C, so
rows m·i .. m·i + m of it are tile i's chain (the same instructions, k ``NATIVE_K``
each, C first, ascending k), and the other rows (other tiles' A against B_i) are
computed and dropped. The group's D is tile i's rows of chain i, for each i: a select
on the row, which moves bits and rounds nothing. No gather, no sum over blocks: the
group's A, B, C and D are each one contiguous box, copied by TMA.

The kernel (:func:`chain`): ``plgpu.kernel`` over a grid of CTAs, one warpgroup each,
each taking a run of groups in turn through a ring of shared-memory stages: TMA copies
of the next groups' A, B and C are in flight while the current group's g chains run,
and its D goes back by TMA from a stage of its own. A 16-bit B goes in as it is, (T, K, n)
n-major, where A's swizzle divides its rows (:func:`b_by_rows`: ``wgmma``'s descriptor
transposes it); any other B is read K-major (B_i transposed, (n, K): ``wgmma`` takes 8-
and 32-bit operands only so, and a tile of 8 f16 columns is narrower than a swizzle), so
it is given to the kernel as (T, n, K), one XLA transpose. K is never padded
(an extra instruction of zero products is not the identity); one ``plgpu.wgmma`` issues
the chain over the whole K, in swizzle-wide k groups ascending. tf32 operands are fp32
words: the tensor core reads their top 19 bits, as the model does (``bitops.tf32_keep``).

Off the GPU the kernel runs unchanged under ``jaxwarp.emulate(fn, arch="sm_90a")`` (JAX's
GPU interpret mode, each ``plgpu.wgmma`` the exact model's chain from the accumulator's
value), which checks the layout (the stacking, the selection, the batch padding) against
``jaxwarp.mma(mode="exact")`` on a CPU; only the GPU run is the tensor core.

Not here (they keep the Triton kernel or the model's arithmetic): sm_90's fp8
``mma.sync`` (two f16 HMMAs and an FADD) and operands of two formats (one
``plgpu.wgmma`` takes one dtype).

JAX API used (public ``jax.experimental.pallas.mosaic_gpu``, in JAX 0.10.2 and 0.11):
``kernel``, ``SMEM`` with ``TilingTransform`` and ``SwizzleTransform`` (``find_swizzle``),
``Barrier``, ``copy_gmem_to_smem``, ``barrier_wait``, ``commit_smem``,
``copy_smem_to_gmem``, ``wait_smem_to_gmem``, ``ACC.init`` inside ``pl.run_state``,
``wgmma``, ``transpose_ref``, ``layout_cast`` to ``Layout.WGMMA``, ``CompilerParams``
with ``LoweringSemantics.Lane``; :func:`api_error` says which is missing on another JAX.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax import lax

from jaxwarp._src.gemm.kernels import native_mgpu

#: Rows of one ``wgmma`` product (a warpgroup's m): a group's tiles stacked.
ROWS = native_mgpu.CHAIN_M
#: The widest tile (``wgmma``'s largest n).
MAX_COLUMNS = 256
#: The kernel's name (in jaxprs, profiles and traces).
KERNEL_NAME = "jaxwarp_native_tiles_mgpu"
#: Groups one stage holds at most: one TMA copy of each operand and of D moves them all.
#: Not tuned: the one sweep on an H100 (1 to 16 groups a stage, 1 or 4 CTAs an SM and
#: the default, 2 or 3 stages: within 3% of each other) ran while XLA's padding passes
#: bounded the kernel (record h100_mma_exact.txt, section tensor_cores_mosaic_gpu_padded).
STAGE_GROUPS = 8
#: Pipeline stages (each STAGE_GROUPS groups whose copies are in flight) of one CTA.
STAGES = 2
#: Shared memory of an SM that the CTAs' stages may take (bytes): the grid has as many
#: CTAs an SM as fit it (at most :data:`MAX_CTAS_PER_SM`).
SM_SHARED = 200 * 1024
MAX_CTAS_PER_SM = 8
#: Shared memory one CTA's stages may take on sm_90 (bytes): its 227 KiB less 1 KiB for
#: the barriers and what Mosaic GPU keeps.
SHARED_FOR_STAGES = 226 * 1024
#: The most rows one TMA copy of an untiled block moves (a box is at most 256 a side).
MAX_BOX = 256
#: What the kernel needs from ``jax.experimental.pallas.mosaic_gpu``.
API = ("kernel", "SMEM", "TilingTransform", "SwizzleTransform", "find_swizzle", "Barrier",
       "copy_gmem_to_smem", "barrier_wait", "commit_smem", "copy_smem_to_gmem",
       "wait_smem_to_gmem", "ACC", "wgmma", "transpose_ref", "layout_cast", "Layout",
       "CompilerParams", "LoweringSemantics")


def api_error() -> str | None:
    """Why the installed JAX cannot build the kernel, or None if it can.

    Example:
        >>> api_error() is None or "Mosaic GPU" in api_error()
        True
    """
    return native_mgpu.api_gaps("the tiles kernel", API,
                                {"pl.run_state": native_mgpu.has_run_state})


def unsupported(a_format: str, b_format: str, accumulator: str, m: int, n: int,
                K: int) -> str | None:
    """Why the kernel cannot run (m, K) @ (K, n) tiles of these formats on the installed
    JAX, or None where it can.

    Example:
        >>> unsupported("bf16", "bf16", "f32", 16, 8, 16) is None or api_error() is not None
        True
        >>> unsupported("bf16", "bf16", "f32", 24, 8, 16)
        'm = 24 does not divide 64'
    """
    if m < 1 or ROWS % m:
        return f"m = {m} does not divide {ROWS}"
    if n < 8 or n % 8 or n > MAX_COLUMNS:
        return f"n = {n} is not a multiple of 8 from 8 to {MAX_COLUMNS} (wgmma's N)"
    if ROWS // m * n > MAX_COLUMNS:  # the g chains' accumulators in registers at once
        return (f"{ROWS // m} tiles of n = {n} make {ROWS // m * n} columns of "
                f"accumulators, more than {MAX_COLUMNS}")
    why = native_mgpu.format_error(a_format, b_format, accumulator)
    if why is not None:
        return why
    ik = native_mgpu.INSTRUCTION_K[a_format]
    if K < ik or K % ik:
        return f"k = {K} is not a multiple of the instruction's k = {ik}"
    need = _stage_bytes(a_format, accumulator, ROWS // m, n, K)
    if need > SHARED_FOR_STAGES:
        return (f"a group's A, B, C and D take {need} bytes of shared memory, more than a "
                f"CTA's stages may ({SHARED_FOR_STAGES})")
    return api_error()


@dataclasses.dataclass(frozen=True)
class TilePlan:
    """Static shape of one tiles kernel (hashable)."""

    a_format: str
    accumulator: str
    m: int  # a tile's rows (divides ROWS)
    n: int  # a tile's columns
    K: int  # a tile's k
    stage_groups: int  # groups a stage holds (one copy of each operand)
    units: int  # stages of work in all
    per_cta: int  # stages one CTA takes in turn (the last CTA the rest)
    ctas: int
    stages: int  # stages in flight

    @property
    def group(self) -> int:
        return ROWS // self.m

    @property
    def tiles(self) -> int:
        """Tiles the kernel runs (T padded to whole groups)."""
        return self.units * self.stage_groups * self.group

    @property
    def by_rows(self) -> bool:
        """B as it is, (K, n) a tile (:func:`b_by_rows`), else transposed, (n, K)."""
        return b_by_rows(self.a_format, self.n, self.K)

    @property
    def b_rows(self) -> int:
        """Rows of a group's B's, stacked: g tiles of K rows (as it is) or n (transposed)."""
        return _b_rows(self.a_format, self.group, self.n, self.K)


def _stage_bytes(a_format: str, accumulator: str, g: int, n: int, K: int) -> int:
    """Shared memory of one group: its A, B, C and D."""
    op = jnp.dtype(native_mgpu.DTYPES[a_format]).itemsize
    acc = jnp.dtype(native_mgpu.ACC_DTYPES[accumulator]).itemsize
    return (ROWS + g * n) * K * op + 2 * ROWS * n * acc


def plan(a_format: str, accumulator: str, m: int, n: int, K: int, T: int,
         ctas: int | None = None, stages: int | None = None,
         stage_groups: int | None = None, *,
         where: str = "native tiles (Mosaic GPU)") -> TilePlan:
    """The kernel for T tiles of (m, K) @ (K, n): stages of ``stage_groups`` groups
    (default :data:`STAGE_GROUPS`, fewer where a stage would pass a quarter of
    :data:`SM_SHARED`; then the largest that divides the groups, so that no operand is
    padded: a pass over it in XLA, which cost an H100 two thirds of the kernel's speed),
    ``stages`` of them in flight (default :data:`STAGES`), ``ctas`` CTAs (default: as
    many an SM as :data:`SM_SHARED` holds, at most :data:`MAX_CTAS_PER_SM`, fewer where T
    is small), each taking a run of ``per_cta`` stages, the last CTA the rest. A ValueError
    (its message beginning with ``where``) names what :func:`unsupported` refuses or an
    argument that is not a positive int.

    Example:
        >>> p = plan("bf16", "f32", 16, 8, 16, 1 << 20, ctas=1024)
        >>> (p.group, p.stage_groups, p.per_cta, p.stages, p.ctas)
        (4, 4, 64, 2, 1024)
    """
    why = unsupported(a_format, a_format, accumulator, m, n, K)
    if why is not None:
        raise ValueError(f"{where}: {why}")
    for name, v in (("T", T), ("ctas", ctas), ("stages", stages),
                    ("stage_groups", stage_groups)):
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
            raise ValueError(f"{where}: {name} must be a positive int (or None: the "
                             f"default), got {v!r}")
    g = ROWS // m
    groups = -(-T // g)
    one = _stage_bytes(a_format, accumulator, g, n, K)
    if stage_groups is None:  # a power of two
        stage_groups = 1 << max(0, min(STAGE_GROUPS, SM_SHARED // 4 // one).bit_length() - 1)
    if _untiled(n, native_mgpu.ACC_DTYPES[accumulator]):
        stage_groups = min(stage_groups, MAX_BOX // ROWS)  # C and D untiled: one box
    # a box is at most MAX_BOX tiles of 8 rows a side (B's block: G·g·K rows where B goes
    # as it is, else G·g·n), and one stage fits the shared memory
    stage_groups = min(stage_groups, 8 * MAX_BOX // _b_rows(a_format, g, n, K),
                       8 * MAX_BOX // ROWS, SHARED_FOR_STAGES // one)
    if stage_groups >= groups:
        stage_groups = groups
    else:  # stages of whole groups: the batch is not padded (a pass over every operand)
        while groups % stage_groups:
            stage_groups -= 1
    units = groups // stage_groups
    stages = min(stages or STAGES, max(1, SHARED_FOR_STAGES // (stage_groups * one)))
    if ctas is None:
        fit = SM_SHARED // (stages * stage_groups * one)
        ctas = max(1, min(MAX_CTAS_PER_SM, fit)) * native_mgpu.sm_count()
    per_cta = -(-units // min(units, ctas))
    ctas = -(-units // per_cta)  # no CTA without work; the last takes the rest
    return TilePlan(a_format, accumulator, m, n, K, stage_groups, units, per_cta, ctas,
                    min(stages, per_cta))


def _untiled(minor: int, dtype) -> bool:
    """Whether a block whose rows have ``minor`` elements stays as it is in shared memory:
    rows that no swizzle of 32 bytes or more divides (an f16 C of 8 or 24 columns)."""
    return (minor * jnp.dtype(dtype).itemsize) % 32 != 0


def _swizzle(minor: int, dtype) -> int:
    """The widest swizzle (bytes: 32, 64 or 128) that divides rows of ``minor`` elements
    (``plgpu.find_swizzle``'s choice, without the import)."""
    row = minor * jnp.dtype(dtype).itemsize
    return next(s for s in (128, 64, 32) if row % s == 0)


def b_by_rows(a_format: str, n: int, K: int) -> bool:
    """Whether B goes to the kernel as it is, (K, n) a tile, n-major ("MN-major"), rather
    than transposed: ``wgmma`` reads a 16-bit B either way (the descriptor's transpose
    bit), and one swizzle serves A and B (Mosaic GPU's ``wgmma`` takes one), so B's rows
    of n elements take A's swizzle (that of rows of K elements) when it divides them. Then
    no XLA pass transposes B (on an H100 that pass alone took 0.35 to 0.47 of the batched
    einsum's time). 8- and 32-bit operands (fp8, tf32) are K-major only.

    Example:
        >>> b_by_rows("bf16", 16, 16), b_by_rows("bf16", 8, 16), b_by_rows("e4m3", 16, 32)
        (True, False, False)
    """
    dtype = native_mgpu.DTYPES[a_format]
    if jnp.dtype(dtype).itemsize != 2 or _untiled(K, dtype):
        return False
    return (n * 2) % _swizzle(K, dtype) == 0


def _b_rows(a_format: str, g: int, n: int, K: int) -> int:
    """Rows of g tiles' B's stacked: K each as it is, n each transposed."""
    return g * (K if b_by_rows(a_format, n, K) else n)


def _transforms(plgpu, minor: int, dtype, swizzle: int | None = None) -> tuple:
    """Tiling and swizzle of a shared-memory block whose rows have ``minor`` elements (the
    widest swizzle that divides them, or ``swizzle``)."""
    if _untiled(minor, dtype):
        return ()
    size = jnp.dtype(dtype).itemsize
    swizzle = swizzle or _swizzle(minor, dtype)
    return (plgpu.TilingTransform((8, swizzle // size)), plgpu.SwizzleTransform(swizzle))


def _kernel(a_gmem, b_gmem, c_gmem, o_gmem, *, p: TilePlan):
    from jax.experimental import pallas as pl  # noqa: PLC0415
    from jax.experimental.pallas import mosaic_gpu as plgpu  # noqa: PLC0415

    g, m, n, K, S, G = p.group, p.m, p.n, p.K, p.stages, p.stage_groups
    op_dtype = native_mgpu.DTYPES[p.a_format]
    acc_dtype = native_mgpu.ACC_DTYPES[p.accumulator]
    by_rows, gb = p.by_rows, p.b_rows  # B (K, n) a tile, else (n, K); a group's B rows
    op_tf, acc_tf = _transforms(plgpu, K, op_dtype), _transforms(plgpu, n, acc_dtype)
    b_tf = _transforms(plgpu, n, op_dtype, _swizzle(K, op_dtype)) if by_rows else op_tf
    first = lax.axis_index("cta") * p.per_cta  # this CTA's run of stages
    count = jnp.minimum(p.per_cta, p.units - first)  # the last CTA's is shorter

    def rows(u, size):  # stage u's block of an operand stacked by groups
        return pl.ds((first + u) * (G * size), G * size)

    def one_group(a_smem, b_smem, c_smem, o_smem):
        # the group's C's stacked, in wgmma's register layout
        c = plgpu.layout_cast(c_smem[...], plgpu.Layout.WGMMA)

        def issue(accs):  # tile i's B against every row: one wgmma chain each
            for i, acc in enumerate(accs):
                if by_rows:
                    b_i = b_smem.at[pl.ds(i * K, K), :]
                else:
                    b_i = plgpu.transpose_ref(b_smem.at[pl.ds(i * n, n), :], (1, 0))
                plgpu.wgmma(acc, a_smem, b_i)

        chains = pl.run_state(issue)(tuple(plgpu.ACC.init(c) for _ in range(g)))
        d = chains[0]
        if g > 1:  # each row from its own tile's chain
            row = plgpu.layout_cast(lax.broadcasted_iota(jnp.int32, (ROWS, n), 0),
                                    plgpu.Layout.WGMMA)
            tile = row // m
            for i in range(1, g):
                d = jnp.where(tile == i, chains[i], d)
        o_smem[...] = d

    @functools.partial(
        pl.run_scoped,
        a_smem=plgpu.SMEM((S, G * ROWS, K), op_dtype, transforms=op_tf),
        b_smem=plgpu.SMEM((S, G * gb, n if by_rows else K), op_dtype, transforms=b_tf),
        c_smem=plgpu.SMEM((S, G * ROWS, n), acc_dtype, transforms=acc_tf),
        o_smem=plgpu.SMEM((S, G * ROWS, n), acc_dtype, transforms=acc_tf),
        barrier=plgpu.Barrier(num_arrivals=3, num_barriers=S),  # A, B and C
    )
    def _scope(a_smem, b_smem, c_smem, o_smem, barrier):
        def fetch(u, slot):  # stage u's A, B and C into a slot, on its barrier
            bar = barrier.at[slot]
            plgpu.copy_gmem_to_smem(a_gmem.at[rows(u, ROWS), :], a_smem.at[slot], bar)
            plgpu.copy_gmem_to_smem(b_gmem.at[rows(u, gb), :], b_smem.at[slot], bar)
            plgpu.copy_gmem_to_smem(c_gmem.at[rows(u, ROWS), :], c_smem.at[slot], bar)

        for u in range(S):  # the first stages' copies
            pl.when(u < count)(functools.partial(fetch, u, u))

        def step(u, carry):
            slot = lax.rem(u, S)
            plgpu.barrier_wait(barrier.at[slot])
            plgpu.wait_smem_to_gmem(S - 1, wait_read_only=True)  # this slot's last D
            for q in range(G):  # the stage's groups in turn
                def part(ref, size, q=q):
                    return ref.at[slot, pl.ds(q * size, size)]
                one_group(part(a_smem, ROWS), part(b_smem, gb), part(c_smem, ROWS),
                          part(o_smem, ROWS))
            plgpu.commit_smem()  # every thread's D written, every read of the slot done
            plgpu.copy_smem_to_gmem(o_smem.at[slot], o_gmem.at[rows(u, ROWS), :])

            @pl.when(u + S < count)
            def _next():
                fetch(u + S, slot)

            return carry

        lax.fori_loop(0, count, step, 0)
        plgpu.wait_smem_to_gmem(0, wait_read_only=True)


def chain(a, b, c, a_format: str, accumulator: str, *, ctas: int | None = None,
          stages: int | None = None, stage_groups: int | None = None) -> jax.Array:
    """``D = A @ B + C`` for T independent tiles: (T, m, K) @ (T, K, n) + (T, m, n) ->
    (T, m, n) in C's dtype, each tile's chain that of ``wgmma`` with ``a_format``
    operands (both of that format) and an ``accumulator`` C and D, on the tensor cores
    (under ``jaxwarp.emulate(..., arch="sm_90a")``: the exact model's). T is padded to
    whole groups with zero tiles (dropped from D) where m·T is not a multiple of 64.
    ``ctas``, ``stages``, ``stage_groups``: as :func:`plan`'s.

    Example:
        >>> a = jnp.ones((8, 16, 16), jnp.bfloat16); b = jnp.ones((8, 16, 8), jnp.bfloat16)
        >>> c = jnp.zeros((8, 16, 8), jnp.float32)
        >>> jax.eval_shape(lambda: chain(a, b, c, "bf16", "f32"))
        ShapeDtypeStruct(shape=(8, 16, 8), dtype=float32)
    """
    from jax.experimental.pallas import mosaic_gpu as plgpu  # noqa: PLC0415

    where = f"native tiles (Mosaic GPU): a {a.shape} @ b {b.shape} + c {c.shape}"
    if not a.ndim == b.ndim == c.ndim == 3:
        raise ValueError(f"{where}: a, b and c must be 3-D (T tiles)")
    T, m, K = a.shape
    n = b.shape[-1]
    if b.shape != (T, K, n) or c.shape != (T, m, n):
        raise ValueError(f"{where}: for a of shape (T, m, K), b must be (T, K, n) = "
                         f"({T}, {K}, n) and c (T, m, n) = ({T}, {m}, {n})")
    p = plan(a_format, accumulator, m, n, K, T, ctas, stages, stage_groups, where=where)
    want = {"a": native_mgpu.DTYPES[a_format], "b": native_mgpu.DTYPES[a_format],
            "c": native_mgpu.ACC_DTYPES[accumulator]}
    for name, x in (("a", a), ("b", b), ("c", c)):
        if jnp.dtype(x.dtype) != jnp.dtype(want[name]):
            raise ValueError(f"{where}: {name} must be {jnp.dtype(want[name]).name} for "
                             f"a_format={a_format!r}, accumulator={accumulator!r}; got "
                             f"{jnp.dtype(x.dtype).name}")
    Tp = p.tiles
    if Tp != T:
        a, b, c = (jnp.pad(x, ((0, Tp - T), (0, 0), (0, 0))) for x in (a, b, c))
    if p.by_rows:  # (T * K, n): a free reshape
        b2 = b.reshape(Tp * K, n)
    else:  # (T * n, K): K-major, one XLA transpose
        b2 = jnp.swapaxes(b, 1, 2).reshape(Tp * n, K)
    body = functools.partial(_kernel, p=p)
    body.__name__ = KERNEL_NAME  # plgpu.kernel names the kernel after its body
    f = plgpu.kernel(
        body,
        out_type=jax.ShapeDtypeStruct((Tp * m, n), c.dtype),
        grid=(p.ctas,), grid_names=("cta",),
        # Lane semantics, named: JAX 0.10's default (where the kernel's layouts were
        # built), not JAX 0.11's (Warpgroup)
        compiler_params=plgpu.CompilerParams(lowering_semantics=plgpu.LoweringSemantics.Lane))
    d = f(a.reshape(Tp * m, K), b2, c.reshape(Tp * m, n))
    return d.reshape(Tp, m, n)[:T]
