"""Tests of jaxwarp._src.warp.dpx: the DPX min/max functions against the H100 and first
principles."""

import doctest

import hypothesis.extra.numpy as hnp
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings

from jaxwarp._src.warp import dpx
from jaxwarp._src.warp.dpx import DPX_FUNCTIONS, DPX_PRED_FUNCTIONS

NAMES = tuple(name for name, _, _ in DPX_FUNCTIONS)
PRED_NAMES = tuple(name for name, _ in DPX_PRED_FUNCTIONS)
N = 128  # elements per Hypothesis example (fixed shape: one compilation per function)
PROPERTY = settings(derandomize=True, max_examples=20, deadline=None)
WORDS = hnp.arrays(np.uint32, (3, N))


def public(name):
    return getattr(dpx, name)


# --------------------------------------------------------------------------- reference
# A plain-Python model, element by element, written from the CUDA documentation.


def _elements(word, kind):
    if kind in ("s32", "u32"):
        v = int(word)
        return [v - (1 << 32) if kind == "s32" and v >> 31 else v], 32
    halves = [(int(word) >> 16) & 0xFFFF, int(word) & 0xFFFF]
    if kind == "s16x2":
        halves = [h - (1 << 16) if h >> 15 else h for h in halves]
    return halves, 16


def _wrap(v, width, signed):
    v &= (1 << width) - 1
    return v - (1 << width) if signed and v >> (width - 1) else v


def reference(name, a, b, c):
    """Returns (uint32 result word, [predicates]) of DPX function ``name``."""
    op, kind, relu = dpx._parse(name)
    signed = kind[0] == "s"
    (ea, width), (eb, _), (ec, _) = (_elements(w, kind) for w in (a, b, c))
    out, preds = [], []
    for x, y, z in zip(ea, eb, ec, strict=True):
        pick = max if "max" in op else min
        if op.startswith("add"):
            r = pick(_wrap(x + y, width, signed), z)
        elif op.endswith("3"):
            r = pick(x, y, z)
        else:
            r = pick(x, y)
        if relu:
            r = max(r, 0)
        out.append(r & ((1 << width) - 1))
        preds.append(x >= y if op == "bmax" else x <= y)
    word = out[0] if width == 32 else (out[0] << 16) | out[1]
    return word, preds


# --------------------------------------------------------------------------- hardware


def test_table_order_and_size():
    assert len(DPX_FUNCTIONS) == 36 and len(DPX_PRED_FUNCTIONS) == 12
    assert NAMES[:4] == ("vimax3_s32", "vimax3_s16x2", "vimax3_u32", "vimax3_u16x2")
    assert NAMES[16:24] == ("vibmax_s32", "vibmax_u32", "vibmax_s16x2", "vibmax_u16x2",
                            "vibmin_s32", "vibmin_u32", "vibmin_s16x2", "vibmin_u16x2")
    assert NAMES[-1] == "viaddmin_s16x2_relu"
    assert PRED_NAMES[:6] == ("vibmax_s32_pred", "vibmax_u32_pred", "vibmax_s16x2_pred_hi",
                              "vibmax_s16x2_pred_lo", "vibmax_u16x2_pred_hi",
                              "vibmax_u16x2_pred_lo")
    assert PRED_NAMES[6:] == tuple(n.replace("vibmax", "vibmin") for n in PRED_NAMES[:6])
    for name, _, arity in DPX_FUNCTIONS:
        assert callable(public(name))
        three = name.startswith(("vimax3", "vimin3", "viadd"))
        assert arity == (3 if three else 2), name


@pytest.fixture(scope="module")
def operands(warp_capture):
    return tuple(jnp.asarray(warp_capture[k]) for k in ("dpx_a", "dpx_b", "dpx_c"))


@pytest.mark.parametrize("row", range(36), ids=NAMES)
def test_matches_h100(warp_capture, operands, row):
    _, fn, arity = DPX_FUNCTIONS[row]
    out = fn(*operands[:arity])
    assert out.dtype == jnp.uint32
    np.testing.assert_array_equal(np.asarray(out), warp_capture["dpx_out"][row])


@pytest.mark.parametrize("row", range(12), ids=PRED_NAMES)
def test_predicates_match_h100(warp_capture, operands, row):
    out = DPX_PRED_FUNCTIONS[row][1](*operands[:2])
    assert out.dtype == jnp.uint32
    np.testing.assert_array_equal(np.asarray(out), warp_capture["dpx_pred"][row])


@pytest.mark.parametrize("row", range(36), ids=NAMES)
def test_public_functions_match_h100(warp_capture, operands, row):
    """The typed functions, given int32 or uint32 operands, return the captured bits."""
    name, _, arity = DPX_FUNCTIONS[row]
    kind = dpx._parse(name)[1]
    args = operands[:arity]
    if kind == "s32":
        args = tuple(jax.lax.bitcast_convert_type(x, jnp.int32) for x in args)
    out = public(name)(*args)
    value = out[0] if isinstance(out, tuple) else out
    assert value.dtype == (jnp.int32 if kind == "s32" else jnp.uint32)
    np.testing.assert_array_equal(np.asarray(value).view(np.uint32), warp_capture["dpx_out"][row])
    if isinstance(out, tuple):
        first = PRED_NAMES.index(f"{name}_pred" if len(out) == 2 else f"{name}_pred_hi")
        for i, pred in enumerate(out[1:]):
            assert pred.dtype == jnp.bool_
            np.testing.assert_array_equal(np.asarray(pred),
                                          warp_capture["dpx_pred"][first + i].astype(bool))


# --------------------------------------------------------------------------- first principles


@pytest.mark.slow
@given(words=WORDS)
@PROPERTY
def test_agrees_with_python_reference(words):
    a, b, c = words
    # Ties and equal halves are rare in random words: make some on purpose.
    b[: N // 4] = a[: N // 4]
    c[N // 4: N // 2] = (a[N // 4: N // 2] & 0xFFFF0000) | (c[N // 4: N // 2] & 0xFFFF)
    ops = tuple(jnp.asarray(w) for w in (a, b, c))
    refs = {name: [reference(name, *t) for t in zip(a, b, c, strict=True)] for name in NAMES}
    for name, fn, arity in DPX_FUNCTIONS:
        want = np.array([w for w, _ in refs[name]], np.uint32)
        np.testing.assert_array_equal(np.asarray(fn(*ops[:arity])), want, err_msg=name)
    for pred_name, fn in DPX_PRED_FUNCTIONS:
        name, _, label = pred_name.partition("_pred")
        half = 1 if label == "_lo" else 0
        want = np.array([p[half] for _, p in refs[name]], np.uint32)
        np.testing.assert_array_equal(np.asarray(fn(*ops[:2])), want, err_msg=pred_name)


@given(words=WORDS)
@PROPERTY
def test_halves_are_independent(words):
    """Changing the low halves of the operands never changes the high half of an x2 result."""
    a, b, c = (jnp.asarray(w) for w in words)
    flip = jnp.asarray(words[0][::-1] & 0xFFFF)
    for name, fn, arity in DPX_FUNCTIONS:
        if not dpx._parse(name)[1].endswith("x2"):
            continue
        ops = (a, b, c)[:arity]
        moved = tuple(x ^ flip for x in ops)
        np.testing.assert_array_equal(np.asarray(fn(*ops) >> 16), np.asarray(fn(*moved) >> 16),
                                      err_msg=name)


@given(words=WORDS)
@PROPERTY
def test_max_min_invariants(words):
    a, b, c = (jnp.asarray(w) for w in words)
    sa, sb, sc = (jax.lax.bitcast_convert_type(x, jnp.int32) for x in (a, b, c))
    hi = dpx.vimax3_s32(sa, sb, sc)
    lo = dpx.vimin3_s32(sa, sb, sc)
    for x in (sa, sb, sc):
        assert bool(jnp.all(lo <= x)) and bool(jnp.all(x <= hi))
    assert bool(jnp.all((hi == sa) | (hi == sb) | (hi == sc)))
    # Operand order does not matter; relu is max(., 0); vib* value equals the plain max.
    np.testing.assert_array_equal(np.asarray(dpx.vimax3_u32(c, a, b)),
                                  np.asarray(dpx.vimax3_u32(a, b, c)))
    np.testing.assert_array_equal(np.asarray(dpx.vimax3_s32_relu(sa, sb, sc)),
                                  np.asarray(jnp.maximum(hi, 0)))
    value, pred = dpx.vibmin_u32(a, b)
    np.testing.assert_array_equal(np.asarray(value), np.asarray(jnp.minimum(a, b)))
    np.testing.assert_array_equal(np.asarray(pred), np.asarray(a <= b))
    # viaddmax(a, b, c) is the max of the wrapped sum (viaddmin against all-ones) and c.
    wrapped_sum = dpx.viaddmin_u16x2(a, b, jnp.uint32(0xFFFFFFFF))
    np.testing.assert_array_equal(np.asarray(dpx.viaddmax_u16x2(a, b, c)),
                                  np.asarray(dpx.vimax3_u16x2(wrapped_sum, c, c)))


def test_known_values():
    i32, u32 = jnp.int32, jnp.uint32
    assert int(dpx.viaddmax_s32(i32(2**31 - 1), i32(1), i32(0))) == 0  # wraps to -2**31
    assert int(dpx.viaddmin_u32(u32(2**32 - 1), u32(2), u32(5))) == 1
    assert int(dpx.viaddmax_s16x2(u32(0x7FFF0001), u32(0x00010001), u32(0))) == 0x00000002
    assert int(dpx.vimax_s16x2_relu(u32(0x8000FFFF), u32(0xFFFF8000))) == 0
    assert int(dpx.vimin3_s16x2(u32(0x7FFF8000), u32(0x8000_7FFF), u32(0))) == 0x80008000
    v, hi, lo = dpx.vibmax_s16x2(u32(0x00050005), u32(0x00050006))
    assert (int(v), bool(hi), bool(lo)) == (0x00050006, True, False)
    v, p = dpx.vibmin_s32(i32(-4), i32(-4))
    assert (int(v), bool(p)) == (-4, True)


# --------------------------------------------------------------------------- arguments, transforms


def test_accepts_int32_uint32_and_python_ints():
    want = dpx.vimax3_s32(jnp.int32(-1), jnp.int32(2), jnp.int32(-3))
    assert want.dtype == jnp.int32 and int(want) == 2
    assert int(dpx.vimax3_s32(-1, 2, -3)) == 2
    assert int(dpx.vimax3_s32(jnp.uint32(0xFFFFFFFF), 2, jnp.int32(-3))) == 2
    assert int(dpx.vimax3_u32(-1, 2, 3)) == 0xFFFFFFFF  # -1 read as unsigned
    assert int(dpx.vimax3_s32(a=1, b=5, c=3)) == 5


def test_broadcasting_and_shapes():
    a = jnp.arange(-6, 6, dtype=jnp.int32).reshape(3, 4)
    out = dpx.viaddmax_s32_relu(a, jnp.int32(1), jnp.zeros((4,), jnp.int32))
    np.testing.assert_array_equal(np.asarray(out), np.maximum(np.asarray(a) + 1, 0))
    v, p = dpx.vibmax_u32(jnp.arange(5, dtype=jnp.uint32), jnp.uint32(2))
    assert v.shape == p.shape == (5,)


def test_jit_vmap_no_retrace():
    traces = []

    def f(a, b, c):
        traces.append(a)
        return dpx.viaddmin_s16x2_relu(a, b, c), dpx.vibmax_u16x2(a, b)

    rng = np.random.default_rng(0)
    a, b, c = (jnp.asarray(rng.integers(0, 2**32, (8, 32), dtype=np.uint64).astype(np.uint32))
               for _ in range(3))
    jf = jax.jit(f)
    got = jf(a, b, c)
    jf(b, c, a)
    assert len(traces) == 1
    vm = jax.vmap(f)(a, b, c)
    rows = [f(a[i], b[i], c[i]) for i in range(8)]
    for g, v, k in zip(jax.tree.leaves(got), jax.tree.leaves(vm),
                       range(len(jax.tree.leaves(got))), strict=True):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(v))
        np.testing.assert_array_equal(np.asarray(g), np.stack([jax.tree.leaves(r)[k]
                                                               for r in rows]))


@pytest.mark.parametrize(
    "args, bad, exc",
    [
        ((jnp.float32(1), jnp.int32(1), jnp.int32(1)), "a", TypeError),
        ((jnp.int32(1), jnp.int16(1), jnp.int32(1)), "b", TypeError),
        ((jnp.int32(1), jnp.int32(1), jnp.uint8(1)), "c", TypeError),
        ((jnp.int32(1), True, jnp.int32(1)), "b", TypeError),
        ((jnp.int32(1), jnp.int32(1), 2**32), "c", ValueError),
        ((1.5, 1, 1), "a", TypeError),
    ],
    ids=["float32_a", "int16_b", "uint8_c", "bool_b", "too_big_c", "python_float_a"])
def test_bad_operands_are_named(args, bad, exc):
    with pytest.raises(exc, match=rf"^{bad}\b"):
        dpx.viaddmax_s32(*args)


def test_int64_rejected_under_x64():
    with jax.enable_x64(True):
        with pytest.raises(TypeError, match=r"^b must be a 32-bit integer.*int64"):
            dpx.vibmin_u16x2(jnp.uint32(1), jnp.int64(1))


# Slow: the same examples run by default in tests/test_docs.py::test_docstring_example.
@pytest.mark.slow
def test_docstring_examples():
    finder, runner = doctest.DocTestFinder(), doctest.DocTestRunner()
    attempted = 0
    for name in NAMES:
        for test in finder.find(public(name), name, globs={name: public(name)}):
            runner.run(test)
            attempted += test.examples and 1
    assert attempted == 36 and runner.failures == 0
