"""``warp_kernel`` on the Mosaic GPU backend: a warp program as the threads of a CTA.

On a CPU the kernel's thread walk runs in NumPy (``interpret=True``: every thread, each
``shfl.sync`` by the PTX ISA) against ``jax.vmap(fn)``; on a GPU the same cases run the
compiled kernel against ``vmap`` on the GPU (XLA). A lowering test builds the kernel's
MLIR for CUDA on any machine.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import export, lax

import jaxwarp
from jaxwarp._src.warp.mgpu import kernel as mgpu_kernel
from jaxwarp._src.warp.mgpu import program, threads

F = 0xFFFFFFFF
ON_GPU = jax.default_backend() == "gpu"
pytestmark = pytest.mark.skipif(mgpu_kernel.api_error() is not None,
                                reason="no Mosaic GPU backend in this JAX")


def butterfly(v):
    for m in (16, 8, 4, 2, 1):
        v = v + jaxwarp.shfl_xor_sync(F, v, m)
    return v


def up_down(v):
    return jaxwarp.shfl_up_sync(F, v, 3) - jaxwarp.shfl_down_sync(F, v, 5, width=8)


def idx_traced(v, s):
    return jaxwarp.shfl_sync(F, v, s)


def idx_static(v):
    return jaxwarp.shfl_sync(F, v, 7, width=16) + jaxwarp.shfl_xor_sync(F, v, 3, width=4)


def partial_mask(v):
    return jaxwarp.shfl_xor_sync(0x0000FFFF, v, 1)


def int_ops(x, y):
    return ((x // y) ^ (x % y)) + (x << (y & 40)) - (x >> y) + jnp.maximum(x, y) * 3 \
        + lax.shift_right_logical(x, y & 35) + jnp.sign(x) + jnp.clip(y, -5, 7)


def uint_ops(x, y):
    x, y = x.astype(jnp.uint32), y.astype(jnp.uint32)
    out = (x // y) + (x % y) + (x >> (y & 63)) + jnp.minimum(x, y)
    out = out + lax.shift_right_arithmetic(x, y & 7) + lax.population_count(x) + lax.clz(y)
    return out.astype(jnp.int32)


def narrow(x):
    b = x.astype(jnp.int8)
    h = x.astype(jnp.uint16)
    return (jaxwarp.shfl_xor_sync(F, b, 1) + b).astype(jnp.int32) \
        + (jaxwarp.shfl_down_sync(F, h, 2) * h).astype(jnp.int32)


def reductions(x):
    return x + jnp.sum(x) - jnp.max(x) + jnp.min(x) + jnp.cumsum(x) \
        + jnp.cumsum(x[::-1])[::-1]


def lane_tables(x):
    lane = jaxwarp.lane_id()
    return x + lane.astype(x.dtype) * 7 + jnp.where(lane < 5, x, -x) + jnp.roll(x, 3) \
        + x[::-1]


def float_tables(x):
    # Tables of lanes in float32: subnormal bit patterns 0..31 (not the numbers 0..31),
    # and a NaN with a payload, added and selected.
    tiny = jnp.asarray(np.arange(32, dtype=np.uint32).view(np.float32))
    nan = jnp.asarray(np.full(32, 0x7FA00001, np.uint32).view(np.float32))
    return jnp.where(jaxwarp.lane_id() < 3, nan, x + tiny)


def votes(x):
    b = jaxwarp.ballot_sync(F, x > 0)
    return b.astype(jnp.int32) + jaxwarp.all_sync(F, x > -5).astype(jnp.int32) \
        + jaxwarp.any_sync(F, x == 3).astype(jnp.int32)


def ballots(x):
    # The forms a ballot takes: ballot_sync, activemask in a branch, a sum, or and xor of
    # where(pred, 1 << lane, 0) written out (either order of the cases, int32 too), a
    # predicate of the lane only and of the warp only; and a look-alike that is not one.
    lane = jaxwarp.lane_id()
    bits = jnp.uint32(1) << lane.astype(jnp.uint32)
    pos = x > 0
    mask = jaxwarp.branch(x % 3 == 0, lambda v: jaxwarp.activemask(),
                          lambda v: ~jaxwarp.activemask(), x)
    neg = jnp.sum(jnp.where(pos, jnp.int32(0), bits.astype(jnp.int32)))
    ors = jnp.bitwise_or.reduce(jnp.where(lane < 7, bits, jnp.uint32(0)))
    xors = jnp.bitwise_xor.reduce(jnp.where(jnp.broadcast_to(x[3] > 0, (32,)), bits, 0))
    other = jnp.sum(jnp.where(pos, bits | 1, jnp.uint32(0)))
    return (jaxwarp.ballot_sync(F, pos) ^ mask ^ ors ^ xors ^ other).astype(jnp.int32) + neg


def gathers(x, i):
    table = jnp.asarray(np.arange(32, dtype=np.int32) * 3 - 40)
    return jnp.take(x, i, mode="fill", fill_value=-7) + x[i & 31] + table[i & 31] \
        + jnp.take(x, i, mode="clip")


def switch(x, i):
    return lax.select_n(jnp.clip(i, 0, 2), x, x * 2, -x) + jnp.where(x > i, 1, 0)


def compact(x):
    # The kept lanes (x % 3 != 0) store x at their rank among the kept; the others aim
    # past the row (dropped). Slots are distinct, as a store's are.
    keep = x % 3 != 0
    lane = jaxwarp.lane_id().astype(jnp.uint32)
    below = jaxwarp.ballot_sync(F, keep) & ((jnp.uint32(1) << lane) - 1)
    slot = jnp.where(keep, lax.population_count(below).astype(jnp.int32),
                     32 + jaxwarp.lane_id().astype(jnp.int32))
    return jnp.full((32,), -1, x.dtype).at[slot].set(x, mode="drop", unique_indices=True)


def permute(x, k):
    # A scatter whose value is read again: a permutation of the lanes, then a shuffle.
    dest = (jaxwarp.lane_id().astype(jnp.int32) * 5 + (k[0] & 31)) & 31
    y = jnp.zeros_like(x).at[dest].set(x, unique_indices=True)
    return y + jaxwarp.shfl_xor_sync(F, y, 3)


def reverse_store(x):
    return jnp.zeros_like(x).at[31 - jaxwarp.lane_id()].set(x, unique_indices=True)


def fori(x):
    return lax.fori_loop(0, 5, lambda i, a: a + jaxwarp.shfl_xor_sync(F, a, 1) + i, x)


def warp_while(x):
    # A loop each warp runs as often as its lane 0 says (vmap: a batched predicate).
    def body(c):
        return c[0] + jaxwarp.shfl_down_sync(F, c[0], 1), c[1] - 1
    return lax.while_loop(lambda c: jnp.any(c[1] > 0), body, (x, (x[0] & 7) + 0 * x))[0]


def lane_while(x):
    # Divergent: each lane loops x & 7 times.
    return jaxwarp.lane_while(lambda c: c[1] > 0, lambda c: (c[0] * 3 + 1, c[1] - 1),
                              (x, x & 7))[0]


def radix_sort(keys):
    def step(bit, k):
        b = (k >> bit.astype(k.dtype)) & 1
        zeros = lax.population_count(jaxwarp.ballot_sync(F, b == 0)).astype(jnp.int32)
        lane = jaxwarp.lane_id().astype(jnp.uint32)
        below = (jnp.uint32(1) << lane) - 1
        rank0 = lax.population_count(jaxwarp.ballot_sync(F, b == 0) & below)
        rank1 = lax.population_count(jaxwarp.ballot_sync(F, b == 1) & below)
        dest = jnp.where(b == 0, rank0.astype(jnp.int32), zeros + rank1.astype(jnp.int32))
        return jnp.zeros_like(k).at[dest].set(k, unique_indices=True)
    return lax.fori_loop(0, 32, step, keys)


def _ints(rng, n, lo=-(2**31), hi=2**31):
    return rng.integers(lo, hi, (n, 32)).astype(np.int32)


def _float_bits(rng, n):
    return rng.integers(0, 2**32, (n, 32), dtype=np.uint32).view(np.float32)


def _edge_ints(rng, n):
    x = _ints(rng, n)
    x.flat[::7] = np.iinfo(np.int32).min
    x.flat[1::11] = -1
    x.flat[2::13] = 0
    return x


CASES = {
    "butterfly_f32": (butterfly, lambda r: [_float_bits(r, 12)]),
    "butterfly_i32": (butterfly, lambda r: [_ints(r, 12)]),
    "up_down": (up_down, lambda r: [_float_bits(r, 8)]),
    "idx_traced": (idx_traced, lambda r: [_float_bits(r, 8), _ints(r, 8, -40, 40)]),
    "idx_static": (idx_static, lambda r: [_ints(r, 8)]),
    "partial_mask": (partial_mask, lambda r: [_float_bits(r, 8)]),
    "int_ops": (int_ops, lambda r: [_edge_ints(r, 8), _edge_ints(r, 8)]),
    "uint_ops": (uint_ops, lambda r: [_edge_ints(r, 8), _edge_ints(r, 8)]),
    "narrow": (narrow, lambda r: [_ints(r, 8)]),
    "reductions": (reductions, lambda r: [_ints(r, 8)]),
    "lane_tables": (lane_tables, lambda r: [_ints(r, 8)]),
    "float_tables": (float_tables, lambda r: [_float_bits(r, 8)]),
    "votes": (votes, lambda r: [_ints(r, 8, -8, 8)]),
    "ballots": (ballots, lambda r: [_ints(r, 12, -8, 8)]),
    "gathers": (gathers, lambda r: [_ints(r, 8), _ints(r, 8, -40, 40)]),
    "switch": (switch, lambda r: [_ints(r, 8, -9, 9), _ints(r, 8, -3, 5)]),
    "compact": (compact, lambda r: [_ints(r, 12)]),
    "permute": (permute, lambda r: [_float_bits(r, 12), _ints(r, 12)]),
    "reverse_store": (reverse_store, lambda r: [_float_bits(r, 8)]),
    "fori": (fori, lambda r: [_ints(r, 8)]),
    "warp_while": (warp_while, lambda r: [_ints(r, 12)]),
    "lane_while": (lane_while, lambda r: [_ints(r, 12)]),
    "radix_sort": (radix_sort, lambda r: [_ints(r, 8, 0, 2**31)]),
}


def _bits(x):
    x = np.asarray(x)
    return x.view({1: np.uint8, 2: np.uint16, 4: np.uint32}[x.dtype.itemsize])


@pytest.mark.parametrize("name", sorted(CASES))
def test_kernel_gives_vmaps_bits(name):
    fn, make = CASES[name]
    args = [jnp.asarray(a) for a in make(np.random.default_rng(len(name)))]
    with jaxwarp.config.override(warp_kernel_backend="mosaic_gpu"):
        kern = jaxwarp.warp_kernel(fn, force="pallas", interpret=not ON_GPU)
        assert kern.explain(*args) is None
        got = jax.jit(kern)(*args)
    want = jax.jit(jax.vmap(fn))(*args)
    np.testing.assert_array_equal(_bits(got), _bits(want))


class _Counting(threads.NumpyThreads):
    def __init__(self, t):
        super().__init__(t)
        self.calls = {"shfl": 0, "ballot": 0}

    def shfl(self, *a):
        self.calls["shfl"] += 1
        return super().shfl(*a)

    def ballot(self, *a):
        self.calls["ballot"] += 1
        return super().ballot(*a)


@pytest.mark.parametrize("fn, ballots, shuffles", [
    (lambda x: jaxwarp.ballot_sync(F, x > 0), 1, 0),
    (lambda x: jaxwarp.branch(x > 0, lambda v: jaxwarp.activemask(),
                              lambda v: jnp.uint32(0), x), 1, 0),
    # (1 << lane) | 1 is not a lane's own bit: the butterfly (5 shuffles)
    (lambda x: jnp.sum(jnp.where(x > 0, (jnp.uint32(1) << jaxwarp.lane_id().astype(
        jnp.uint32)) | 1, jnp.uint32(0))), 0, 5),
])
def test_a_reduction_of_lane_bits_is_one_ballot(fn, ballots, shuffles):
    # vote.sync.ballot for a reduction of where(pred, 1 << lane, 0): one instruction where
    # the butterfly issues five shuffles and five adds (the bits: test_kernel_gives_vmaps_bits).
    closed = program.trace(fn, [np.uint32])
    ops = _Counting(128)
    x = np.random.default_rng(0).integers(0, 2**32, 128, dtype=np.uint32)
    program.Walk(ops, 1).run(closed.jaxpr, closed.consts, [program.Regs([x], np.uint32,
                                                                         "full")])
    assert ops.calls == {"shfl": shuffles, "ballot": ballots}


@pytest.mark.parametrize("block", [4, 8, 32])
def test_blocks_and_ragged_warps(block):
    x = jnp.asarray(_float_bits(np.random.default_rng(1), 37))
    with jaxwarp.config.override(warp_kernel_backend="mosaic_gpu"):
        kern = jaxwarp.warp_kernel(butterfly, warps_per_block=block, force="pallas",
                                   interpret=not ON_GPU)
        got = kern(x)
    np.testing.assert_array_equal(_bits(got), _bits(jax.vmap(butterfly)(x)))


def test_shuffle_search_matches_ptx():
    # Every static shuffle jaxwarp can issue is found as one shfl.sync with its own lanes.
    lane = np.arange(32)
    for w in (1, 2, 4, 8, 16, 32):
        for mode in ("idx", "up", "down", "bfly"):
            for b in range(32):
                src = np.asarray(jaxwarp._src.warp.lanes.source_lanes(mode, b, w))
                if mode != "idx":
                    seg = lane - lane % w
                    ok = (src >= seg) & (src < seg + w)
                    src = np.where(ok, src, lane)
                found = program.shuffle_for(tuple(int(s) for s in src), (True,) * 32)
                assert found is not None, (mode, b, w)
                j, ok = program.ptx_source(*found)
                np.testing.assert_array_equal(np.where(ok, j, lane), src)


def test_a_general_table_shuffles_by_index():
    ops = threads.NumpyThreads(64)
    walk = program.Walk(ops, 1)
    x = np.arange(64, dtype=np.int32) * 10
    table = tuple(int(v) for v in np.random.default_rng(0).permutation(32))
    assert program.shuffle_for(table, (True,) * 32) is None
    got = walk.shuffle_static([x], table, (True,) * 32, np.int32)[0]
    want = np.concatenate([x[:32][list(table)], x[32:][list(table)]])
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("fn, why", [
    (lambda v: v * v, "mul on float32"),
    (lambda v: jnp.zeros_like(v).at[31 - jaxwarp.lane_id()].set(v), "not declared unique"),
    (lambda v: v.at[jaxwarp.lane_id() & 7].add(v), "scatter-add"),
    (lambda v: lax.scan(lambda c, x: (c + x, c), v, v[:4])[0], "scan other than"),
    (lambda v: v.astype(jnp.float32), "convert_element_type"),
])
def test_explain_names_what_the_kernel_does_not_run(fn, why):
    x = jnp.ones((4, 32), jnp.int32 if why == "convert_element_type" else jnp.float32)
    with jaxwarp.config.override(warp_kernel_backend="mosaic_gpu"):
        kern = jaxwarp.warp_kernel(fn)
        reason = kern.explain(x)
        assert reason is not None and why in reason, reason
        with pytest.raises(NotImplementedError, match="warp_kernel"):
            jaxwarp.warp_kernel(fn, force="pallas", interpret=True)(x)
        # force=None runs vmap with the same bits
        np.testing.assert_array_equal(_bits(kern(x)), _bits(jax.vmap(fn)(x)))


def test_bool_io_is_refused_with_a_reason():
    x = jnp.ones((4, 32), bool)
    with jaxwarp.config.override(warp_kernel_backend="mosaic_gpu"):
        reason = jaxwarp.warp_kernel(lambda v: ~v).explain(x)
    assert "bool" in reason


def test_bad_settings_name_the_argument():
    x = jnp.ones((4, 32), jnp.float32)
    with jaxwarp.config.override(warp_kernel_backend="mosaic_gpu"):
        with pytest.raises(ValueError, match="num_warps=8"):
            jaxwarp.warp_kernel(butterfly, num_warps=8, interpret=True)(x)
        with pytest.raises(ValueError, match="warps_per_block=2"):
            jaxwarp.warp_kernel(butterfly, warps_per_block=2, interpret=True)(x)


def test_backend_follows_the_option():
    k = jaxwarp.warp_kernel(butterfly)
    with jaxwarp.config.override(warp_kernel_backend="mosaic_gpu"):
        assert k.backend() == "mosaic_gpu"
    with jaxwarp.config.override(warp_kernel_backend="triton"):
        assert k.backend() == "triton"
    x = jnp.ones((4, 32), jnp.float32)
    with jaxwarp.config.override(warp_kernel_backend="auto"):
        # The Mosaic GPU kernel where its walk runs the program, else Triton while JAX
        # ships it; Triton's settings (num_warps 8) ask for Triton.
        assert k.backend() == "mosaic_gpu" and k.backend(x) == "mosaic_gpu"
        product = jaxwarp.warp_kernel(lambda v: v * v)
        assert product.backend(x) == ("mosaic_gpu" if mgpu_kernel.triton_missing()
                                      else "triton")
        wide = jaxwarp.warp_kernel(butterfly, num_warps=8)
        assert wide.backend(x) == ("mosaic_gpu" if mgpu_kernel.triton_missing() else "triton")
        if not mgpu_kernel.triton_missing():
            # Neither kernel multiplies floats: the reason names both.
            assert "Mosaic GPU kernel: mul on float32" in product.explain(x)


def test_derivative_is_vmaps():
    x = jnp.asarray(np.random.default_rng(2).standard_normal((8, 32)).astype(np.float32))
    with jaxwarp.config.override(warp_kernel_backend="mosaic_gpu"):
        kern = jaxwarp.warp_kernel(butterfly, force="pallas", interpret=not ON_GPU)
        g = jax.grad(lambda v: kern(v).sum())(x)
    np.testing.assert_array_equal(g, jax.grad(lambda v: jax.vmap(butterfly)(v).sum())(x))


_LOWERED_BY_DEFAULT = ("butterfly_f32", "int_ops", "narrow", "gathers", "reductions",
                       "permute", "warp_while", "radix_sort", "ballots")


@pytest.mark.parametrize("name", [n if n in _LOWERED_BY_DEFAULT else
                                  pytest.param(n, marks=pytest.mark.slow)
                                  for n in sorted(CASES)])
def test_kernel_lowers_for_cuda(name):
    # The MLIR the kernel writes (shfl.sync, arith, math) is built and exported for CUDA,
    # on any machine.
    fn, make = CASES[name]
    args = make(np.random.default_rng(0))
    closed = program.trace(fn, [a.dtype for a in args])
    outs = [v.aval.dtype for v in closed.jaxpr.outvars]

    def run(*xs):
        return mgpu_kernel.call(closed, list(xs), outs, 2)

    shapes = [jax.ShapeDtypeStruct((64, 32), a.dtype) for a in args]
    text = export.export(jax.jit(run), platforms=["cuda"])(*shapes).mlir_module()
    assert "mosaic_gpu" in text
