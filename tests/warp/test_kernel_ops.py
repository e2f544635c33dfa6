"""``warp_kernel``'s forms of integer division, reductions, gathers, scatters and loops
(``kernel_ops``): the interpreted kernel gives ``jax.vmap(fn)``'s bits on edge inputs.

Pallas's interpreter computes with XLA, so it cannot show what Triton does where LLVM and
PTX leave a result undefined (division by zero, MIN / -1); so the forms must keep those
cases from the instruction, which ``test_no_undefined_division_reaches_the_instruction``
checks on the kernel's own traced program. ``test_programs_lower_to_triton`` lowers the
kernels to Triton IR (the CPU can lower for CUDA; compiling to PTX needs the GPU).
"""

from __future__ import annotations

import importlib.util
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import jaxwarp
from jaxwarp._src.warp import kernel_ops

pytestmark = pytest.mark.usefixtures("triton_warp_kernel")  # the Triton kernel's tests


ROOT = pathlib.Path(__file__).resolve().parents[2]
RNG = np.random.default_rng(7)


def _bits(x):
    x = np.asarray(x)
    return x.view(f"u{x.dtype.itemsize}") if x.dtype != np.bool_ else x


def _same(fn, *xs, block=4):
    k = jaxwarp.warp_kernel(fn, warps_per_block=block, force="pallas", interpret=True)
    assert k.explain(*xs) is None, k.explain(*xs)
    got, want = k(*xs), jax.vmap(fn)(*xs)
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(_bits(g), _bits(w))
    return want


def _edge_pairs(dtype):
    """(warps, 32) x and y holding every pair of edge values (and random ones)."""
    info = np.iinfo(dtype)
    edges = [info.min, info.min + 1, 0, 1, 2, 3, info.max, info.max - 1]
    if info.min < 0:
        edges += [-1, -2, -3]
    xs, ys = np.meshgrid(np.array(edges, dtype), np.array(edges, dtype))
    x, y = xs.ravel(), ys.ravel()
    n = -len(x) % 32 + 64
    x = np.concatenate([x, RNG.integers(info.min, info.max, n, dtype, endpoint=True)])
    y = np.concatenate([y, RNG.integers(info.min, info.max, n, dtype, endpoint=True)])
    return jnp.asarray(x.reshape(-1, 32)), jnp.asarray(y.reshape(-1, 32))


@pytest.mark.parametrize("dtype", [np.int32, np.uint32, np.int8, np.uint16])
def test_division_and_remainder_edges(dtype):
    x, y = _edge_pairs(dtype)
    q, r, fq, fr = _same(lambda a, b: (lax.div(a, b), lax.rem(a, b), a // b, a % b), x, y)
    # What XLA defines (and the kernel therefore gives): x / 0 = -1 (all ones), x % 0 = x,
    # MIN / -1 = MIN, MIN % -1 = 0.
    xn, yn, qn, rn = (np.asarray(v) for v in (x, y, q, r))
    np.testing.assert_array_equal(qn[yn == 0], np.array(-1).astype(dtype))
    np.testing.assert_array_equal(rn[yn == 0], xn[yn == 0])
    if np.iinfo(dtype).min < 0:
        over = (xn == np.iinfo(dtype).min) & (yn == -1)
        assert over.any()
        np.testing.assert_array_equal(qn[over], np.iinfo(dtype).min)
        np.testing.assert_array_equal(rn[over], 0)


@pytest.mark.parametrize("dtype", [np.int32, np.uint32, np.int8, np.uint16])
def test_shift_edges(dtype):
    x, y = _edge_pairs(dtype)

    def prog(a, b):
        return (lax.shift_left(a, b), lax.shift_right_logical(a, b),
                lax.shift_right_arithmetic(a, b), a << 3, a >> jnp.asarray(5, dtype))

    _same(prog, x, y)


def test_no_undefined_division_or_shift_reaches_the_instruction():
    # Evaluate the kernel body's own program (kernel_ops.run, traced) and look at the
    # operands of every div / rem / shift it issues: never a zero divisor, never MIN / -1,
    # never a shift by 32 or more (or a negative amount).
    x, y = _edge_pairs(np.int32)
    block = [jax.ShapeDtypeStruct(x.shape, x.dtype)] * 2
    program = jax.make_jaxpr(jax.vmap(lambda a, b: (
        lax.div(a, b), lax.rem(a, b), lax.shift_left(a, b), lax.shift_right_logical(a, b),
        lax.shift_right_arithmetic(a, b))))(*block)
    body = jax.make_jaxpr(lambda a, b: kernel_ops.run(program.jaxpr, [], [a, b], {}))(x, y)
    seen = 0

    def evaluate(jaxpr, args):
        env = dict(zip(jaxpr.invars, args, strict=True))
        env.update(zip(jaxpr.constvars, body.consts, strict=False))
        for eqn in jaxpr.eqns:
            vals = [v.val if isinstance(v, jax.extend.core.Literal) else env[v]
                    for v in eqn.invars]
            sub = eqn.params.get("jaxpr")
            if eqn.primitive.name in ("pjit", "jit") and sub is not None:
                outs = evaluate(sub.jaxpr, vals)
            else:
                if eqn.primitive.name in ("div", "rem"):
                    nonlocal seen
                    seen += 1
                    a, b = np.broadcast_arrays(*(np.asarray(v) for v in vals))
                    assert not np.any(b == 0)
                    assert not np.any((a == np.iinfo(np.int32).min) & (b == -1))
                if eqn.primitive.name.startswith("shift"):
                    seen += 1
                    assert np.all((np.asarray(vals[1]) >= 0) & (np.asarray(vals[1]) < 32))
                outs = eqn.primitive.bind(*vals, **eqn.params)
                outs = outs if eqn.primitive.multiple_results else [outs]
            env.update(zip(eqn.outvars, outs, strict=True))
        return [env[v] for v in jaxpr.outvars]

    evaluate(body.jaxpr, [x, y])
    assert seen == 5


def test_integer_reductions_and_cumsum():
    x = jnp.asarray(RNG.integers(0, 2**32, (8, 32), dtype=np.uint32)).at[0].set(0xFFFFFFFF)
    i = x.view(jnp.int32)

    def prog(u, s):
        red = jnp.sum(u) ^ jnp.max(u) ^ jnp.min(u) ^ jnp.sum(s).astype(jnp.uint32)
        flags = jnp.where(jnp.any(s < 0) & jnp.all(u > 0), 1, 2) + jnp.max(s) - jnp.min(s)
        return (jnp.broadcast_to(red, (32,)), jnp.broadcast_to(flags, (32,)), jnp.cumsum(s),
                lax.population_count(u))

    _same(prog, x, i)
    scalar = jaxwarp.warp_kernel(lambda u: jnp.sum(u))
    assert "an output of shape () per warp" in scalar.explain(x)


@pytest.mark.parametrize("dtype", [np.uint32, np.int32, np.uint16, np.int8])
def test_popcount_and_cumsum_in_forms_triton_compiles(dtype):
    # Triton does not legalize math.ctpop (an H100, JAX 0.11.2): the kernel body counts
    # bits with shifts, masks and a multiply, and sums prefixes over a triangle, so neither
    # primitive reaches the kernel; the bits are XLA's for every width, reverse included.
    info = np.iinfo(dtype)
    x = jnp.asarray(RNG.integers(info.min, info.max, (8, 32), dtype=dtype, endpoint=True))
    x = x.at[0].set(info.max).at[1].set(info.min).at[2].set(0)

    def prog(v):
        return (lax.population_count(v), jnp.cumsum(v, dtype=v.dtype),
                lax.cumsum(v, 0, reverse=True))

    _same(prog, x)
    program = jax.make_jaxpr(jax.vmap(prog))(x)
    body = jax.make_jaxpr(lambda a: kernel_ops.run(program.jaxpr, [], [a], {}))(x)
    names = set()

    def visit(jaxpr):
        for eqn in jaxpr.eqns:
            names.add(eqn.primitive.name)
            for sub, _ in kernel_ops.param_jaxprs(eqn):
                visit(sub)

    visit(body.jaxpr)
    assert not names & {"population_count", "cumsum", "cumlogsumexp", "scan"}, names


@pytest.mark.parametrize("dtype", [np.float32, np.uint32, np.int8, np.bool_])
def test_gathers_with_traced_indices(dtype):
    raw = RNG.integers(0, 2**32, (8, 32), dtype=np.uint32)
    x = jnp.asarray(raw.view(np.float32) if dtype == np.float32 else raw.astype(dtype)
                    if dtype != np.bool_ else raw % 2 == 1)
    j = jnp.asarray(RNG.integers(-40, 40, (8, 32), dtype=np.int32))  # out of range too
    table = jnp.asarray(np.arange(32)[::-1].copy())

    def prog(v, k):
        return (v[k & 31], jnp.take(v, k, mode="fill"), jnp.take(v, k, mode="clip"),
                jnp.take(v, k, mode="fill", fill_value=1), v[table],
                jnp.arange(32, dtype=jnp.int32)[k & 31])

    _same(prog, x, j)


def test_static_down_and_up_shuffles_run_as_gathers():
    x = jnp.asarray(RNG.integers(0, 2**32, (8, 32), dtype=np.uint32).view(np.float32))

    def prog(v):
        return (jaxwarp.shfl_down_sync(0xFFFFFFFF, v, 3), jaxwarp.shfl_up_sync(0xFFFFFFFF, v, 5, 8),
                jaxwarp.shfl_sync(0xFFFFFFFF, v, jnp.int32(7)))

    _same(prog, x)


@pytest.mark.parametrize("form", ["store", "onehot"])
def test_scatters(form):
    u = jnp.asarray(RNG.integers(-2**31, 2**31, (8, 32), dtype=np.int32))
    k = jnp.asarray(RNG.integers(-36, 36, (8, 32), dtype=np.int32))  # duplicates, outside
    perm = jnp.asarray(np.stack([RNG.permutation(32) for _ in range(8)]).astype(np.int32))

    def prog(v, j, p):
        base = jnp.arange(32, dtype=jnp.int32)
        return (base.at[j].add(v), base.at[j].max(v), base.at[j].min(v),
                base.at[j].add(v, mode="clip"),
                base.at[p].set(v, unique_indices=True),
                v.at[31 - jaxwarp.lane_id()].set(v, unique_indices=True),
                base.at[p + 16].set(v, mode="drop", unique_indices=True))

    with jaxwarp.config.override(warp_kernel_output_scatter=form):
        _scatters(prog, u, k, perm)


def _scatters(prog, u, k, perm):
    _same(prog, u, k, perm)
    # 64 positions (more than a word's bits): which are hit comes from the one-hot form
    wide = jnp.asarray(np.stack([RNG.permutation(64)[:32] for _ in range(8)]).astype(np.int32))
    _same(lambda v, p: tuple(jnp.split(jnp.full(64, -7, jnp.int32).at[p].set(
        v, unique_indices=True), 2)), u, wide)
    f = jnp.asarray(RNG.integers(0, 2**32, (8, 32), dtype=np.uint32).view(np.float32))
    _same(lambda v, p: jnp.zeros(32, jnp.float32).at[p].set(v, unique_indices=True), f, perm)


def _kernel_primitives(fn, *xs):
    """The primitives of the Pallas kernel that ``warp_kernel(fn)`` traces on xs."""
    k = jaxwarp.warp_kernel(fn, warps_per_block=4, force="pallas", interpret=True)
    names = []

    def walk(jx):
        for e in jx.eqns:
            names.append(e.primitive.name)
            for v in e.params.values():
                for sub in (v if isinstance(v, (tuple, list)) else (v,)):
                    inner = getattr(sub, "jaxpr", sub)
                    if hasattr(inner, "eqns"):
                        walk(inner)

    walk(jax.make_jaxpr(k)(*xs).jaxpr)
    return names


def test_an_output_set_by_a_scatter_is_stored():
    # The compaction's store: out[slot] = x for the kept lanes, -1 elsewhere. With
    # "store" the kernel writes it with two masked stores (no one-hot selection); with
    # "onehot" it computes the scatter's value and stores it once. The bits are vmap's.
    x = jnp.asarray(RNG.integers(0, 2**32, (8, 32), dtype=np.uint32))

    def compact(v):
        keep = v % 3 != 0
        slot = jnp.where(keep, jnp.cumsum(keep) - 1, 32 + jaxwarp.lane_id())
        return jnp.full(32, -1, jnp.uint32).at[slot].set(v, mode="drop", unique_indices=True)

    want = np.full((8, 32), 2**32 - 1, np.uint32)
    for w, row in enumerate(np.asarray(x)):
        kept = row[row % 3 != 0]
        want[w, :len(kept)] = kept
    for form, stores in (("store", 2), ("onehot", 1)):
        with jaxwarp.config.override(warp_kernel_output_scatter=form):
            np.testing.assert_array_equal(_same(compact, x), want)
            names = _kernel_primitives(compact, x)
            assert sum("swap" in n for n in names) == stores, (form, names)
    assert kernel_ops.stored_outputs(jax.make_jaxpr(jax.vmap(compact))(x).jaxpr)
    # A scatter's output that the program also reads is a value, not a store.
    def twice(v):
        out = compact(v)
        return out, out + 1

    assert len(kernel_ops.stored_outputs(jax.make_jaxpr(jax.vmap(twice))(x).jaxpr)) == 0
    _same(twice, x)


def test_a_set_scatter_without_unique_indices_runs_vmap():
    # Which of several updates of one element wins is not specified by XLA.
    x = jnp.ones((4, 32), jnp.int32)
    fn = jaxwarp.warp_kernel(lambda v: jnp.zeros(32, jnp.int32).at[v].set(v))
    assert "unique_indices=True" in fn.explain(x)
    np.testing.assert_array_equal(fn(x), jax.vmap(fn.fn)(x))
    add_f32 = jaxwarp.warp_kernel(lambda v: jnp.zeros(32).at[v].add(1.0))
    assert "scatter-add on float32" in add_f32.explain(x)


def test_select_n_with_an_integer_index():
    x = jnp.asarray(RNG.integers(0, 2**32, (8, 32), dtype=np.uint32))
    k = jnp.asarray(RNG.integers(-2, 7, (8, 32), dtype=np.int32))  # outside the cases too

    def prog(v, i):
        cases = [v, v + 1, v ^ 5, v >> 3, v * 7]
        return (lax.select_n(i, *cases), lax.select_n(i.astype(jnp.uint32), *cases[:3]),
                lax.select_n(i > 2, v, ~v),
                lax.switch(jnp.max(i) % 3, [lambda: v, lambda: ~v, lambda: v + 2]),
                lax.clamp(jnp.int32(-1), i, jnp.int32(4)))

    _same(prog, x, k)


def test_loops_and_conds():
    x = jnp.asarray(RNG.integers(0, 2**32, (8, 32), dtype=np.uint32))

    def prog(v):
        def body(i, c):
            c = c ^ (c >> jnp.uint32(i % 7))
            return lax.cond(i % 3 == 0, lambda z: z + 1, lambda z: z * 3, c)
        w = lax.fori_loop(0, 9, body, v)
        _, z = lax.while_loop(lambda c: c[0] < 4, lambda c: (c[0] + 1, c[1] // 3 + c[0]),
                              (jnp.uint32(0), w))
        return z

    _same(prog, x)


def _load(name, path, extra_path=None):
    if extra_path:
        sys.path.insert(0, str(extra_path))
    try:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        if extra_path:
            sys.path.remove(str(extra_path))
    return module


def _divergent_programs():
    bench = _load("warp_divergence_bench", ROOT / "benchmarks" / "warp_divergence.py",
                  ROOT / "benchmarks")
    return bench.programs()


@pytest.mark.parametrize("name", ["compact", "compact_ballot", "radix_step", "radix_sort"])
def test_divergent_programs_run_as_one_kernel(name):
    fn, ref = _divergent_programs()[name]
    x = RNG.integers(0, 2**32, (12, 32), dtype=np.uint32)
    x[0] = np.arange(32) * 3  # every lane dropped by the compaction
    x[1] = np.arange(32) * 3 + 1  # none dropped
    x[2] = 7  # equal keys
    got = _same(fn, jnp.asarray(x), block=8)
    np.testing.assert_array_equal(np.asarray(got), ref(x))
    assert jaxwarp.warp_kernel(fn).explain(jnp.asarray(x)) is None  # the default block too


def _lower_to_triton(fn, *dtypes):
    k = jaxwarp.warp_kernel(fn)
    args = [jax.ShapeDtypeStruct((64, 32), d) for d in dtypes]
    why, out_block, program = k._trace(args)
    assert why is None, why
    return jax.export.export(
        jax.jit(lambda *v: k._pallas(program, list(v), out_block)), platforms=["cuda"],
        disabled_checks=[jax.export.DisabledSafetyCheck.custom_call("__gpu$xla.gpu.triton")],
    )(*args).mlir_module()


@pytest.mark.parametrize("name", ["compact_ballot", "radix_step"])
def test_triton_module_has_no_ctpop(name, monkeypatch, capsys):
    # The Triton module itself (Pallas prints it with debug=True): no math.ctpop, which
    # Triton's GPU compile does not legalize (the divergent programs' popc and cumsum).
    import functools
    import re

    from jax.experimental import pallas as pl

    monkeypatch.setattr(pl, "pallas_call", functools.partial(pl.pallas_call, debug=True))
    _lower_to_triton(_divergent_programs()[name][0], jnp.uint32)
    text = capsys.readouterr().out
    assert "tt.func" in text and "tt.store" in text  # the module was printed
    assert not re.findall(r"\bmath\.\w+", text), sorted(set(re.findall(r"\bmath\.\w+", text)))


@pytest.mark.parametrize("name", ["compact", "radix_sort", "forms"])
def test_programs_lower_to_triton(name):
    if name == "forms":
        def fn(v, w):
            return (lax.div(v, w), lax.rem(v, w), v[w & 31], jnp.cumsum(v),
                    jnp.zeros(32, jnp.int32).at[w].add(v), jnp.broadcast_to(jnp.any(v > w), (32,)),
                    jaxwarp.shfl_down_sync(0xFFFFFFFF, v, 1))
        text = _lower_to_triton(fn, jnp.int32, jnp.int32)
    else:
        text = _lower_to_triton(_divergent_programs()[name][0], jnp.uint32)
    assert "__gpu$xla.gpu.triton" in text


@pytest.mark.skipif(jax.default_backend() != "gpu", reason="the Triton kernel needs a GPU")
def test_compiled_kernel_forms_match_vmap_on_gpu():
    # Triton's own code (not the interpreter): the division edges, where LLVM and PTX
    # leave the result undefined, gathers and scatters, and the divergent programs.
    def run(fn, *xs):
        k = jaxwarp.warp_kernel(fn, force="pallas")
        for g, w in zip(jax.tree.leaves(jax.jit(k)(*xs)),
                        jax.tree.leaves(jax.jit(jax.vmap(fn))(*xs)), strict=True):
            np.testing.assert_array_equal(_bits(g), _bits(w))

    for dtype in (np.int32, np.uint32, np.int8):
        run(lambda a, b: (lax.div(a, b), lax.rem(a, b), a // b, a % b), *_edge_pairs(dtype))
    u = jnp.asarray(RNG.integers(0, 2**32, (1000, 32), dtype=np.uint32))
    j = jnp.asarray(RNG.integers(-40, 40, (1000, 32), dtype=np.int32))
    run(lambda v, k: (v[k & 31], jnp.take(v, k, mode="fill"),
                      jnp.zeros(32, jnp.uint32).at[k].add(v), v.at[k].max(v)), u, j)
    for fn, _ in _divergent_programs().values():
        run(fn, u)


def test_loop_counts_without_num_carry():
    # JAX 0.11.2's scan has no num_carry parameter: a fori_loop's counts come from its
    # body, and a scan with a scanned output is no fori_loop, with or without the names.
    from jaxwarp._src.warp import kernel_ops

    def eqn_of(fn, *args):
        return next(e for e in jax.make_jaxpr(fn)(*args).jaxpr.eqns
                    if e.primitive.name == "scan")

    w = jnp.ones(32, jnp.int32)
    loop = eqn_of(lambda v: lax.fori_loop(0, 3, lambda i, c: (c[0] + w, c[1] * 2), (v, v)), w)
    stacked = eqn_of(lambda v: lax.scan(lambda c, _: (c + 1, c), v, None, length=3), w)
    for eqn, want in ((loop, (1, 3)), (stacked, None)):
        bare = {k: v for k, v in eqn.params.items() if k not in ("num_carry", "num_consts")}
        assert kernel_ops._loop_counts(eqn) == want
        assert kernel_ops._loop_counts(eqn.replace(params=bare)) == want
