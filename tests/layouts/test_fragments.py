"""Fragments: per-lane layouts against the H100 capture, conversions, pytree behaviour."""

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from conftest import load_capture
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxwarp._src.catalogue import wmma_table as table
from jaxwarp._src.instructions import wmma
from jaxwarp._src.layouts import fragment_layouts, fragment_storage, fragment_types
from jaxwarp._src.layouts import fragments as F

LAYOUT_KEYS = sorted(k for k in load_capture("layout").files if k != "device")
USE = {"a": "matrix_a", "b": "matrix_b", "c": "accumulator"}


def spec_args(key):
    """'a.f16.m16n16k16.r' -> (use, m, n, k, type, layout)."""
    f = wmma.parse_layout_key(key) if ".f64." not in key else None
    if f is None:
        with jax.enable_x64(True):
            f = wmma.parse_layout_key(key)
    return f.use, f.m, f.n, f.k, f.type, f.layout


def decode_capture(key, planes):
    """Linear index of the element in each (lane, element), from the bit planes."""
    t = key.split(".")[1]
    et = table.ELEMENT_TYPES[t]
    planes = planes.astype(np.uint64)
    per, bits = et.per_storage, (et.bits if et.packed else 0)
    npl, lanes, ne = planes.shape
    out = np.zeros((lanes, ne * per), np.int64)
    for j in range(per):
        sub = planes >> np.uint64(bits * j) if per > 1 else planes
        if per > 1:
            sub = sub & np.uint64((1 << bits) - 1)
        out[:, j::per] = sum((sub[p] != 0).astype(np.int64) << p for p in range(npl))
    return out


# ---------------------------------------------------------------------------------------
# Layouts: every key of the capture, twice: through load_matrix_sync (the conformance
# path) and by decoding the planes directly against the lane map.


@pytest.mark.parametrize("key", LAYOUT_KEYS)
def test_layout_conformance(key, layout_capture):
    matched, total = wmma.layout_conformance(key, layout_capture[key])
    assert matched == total == layout_capture[key].size


@pytest.mark.parametrize("key", LAYOUT_KEYS)
def test_lane_map_matches_capture(key, layout_capture):
    use, m, n, k, t, _ = spec_args(key)
    rows, cols = F.lane_map(use, m, n, k, t)
    ncols = k if use == "matrix_a" else n
    np.testing.assert_array_equal(rows * ncols + cols, decode_capture(key, layout_capture[key]))


def test_layout_conformance_counts_mismatches(layout_capture):
    key = "c.f32.m16n16k16"
    planes = layout_capture[key].copy()
    planes[0, 3, 2] ^= 1
    assert wmma.layout_conformance(key, planes) == (planes.size - 1, planes.size)
    with pytest.raises(ValueError, match="not a layout.npz key"):
        wmma.layout_conformance("x.f32.m16n16k16", planes)
    with pytest.raises(ValueError, match="must have shape"):
        wmma.layout_conformance(key, planes[:, :, :4])


def test_docstring_lane_maps_are_current():
    for args in (("matrix_a", 16, 16, 16, "f16"), ("accumulator", 16, 16, 16, "f32")):
        text = F.lane_map_text(*args)
        drawn = "\n".join("    " + line for line in text.splitlines())
        assert drawn in fragment_layouts.__doc__


def test_layouts_independent_of_memory_layout():
    for use in ("matrix_a", "matrix_b"):
        assert F.lane_map(use, 16, 16, 16, "f16")[0].shape == (32, 16)
    # row 0 of the f16 A atom: lane l holds (l >> 2, 2 * (l & 3) + {0, 1})
    rows, cols = F.lane_map("matrix_a", 16, 16, 16, "f16")
    lanes = np.arange(32)
    np.testing.assert_array_equal(rows[:, 0], lanes >> 2)
    np.testing.assert_array_equal(cols[:, :2], 2 * (lanes[:, None] & 3) + [0, 1])


# ---------------------------------------------------------------------------------------
# Fragment objects.


@pytest.mark.parametrize(
    "args,ne,nse",
    [
        (("matrix_a", 16, 16, 16, "f16", "row_major"), 16, 16),
        (("matrix_b", 32, 8, 16, "f16", "col_major"), 16, 16),
        (("accumulator", 16, 16, 16, "f16"), 8, 8),
        (("matrix_a", 16, 16, 16, "bf16", "row_major"), 8, 8),
        (("matrix_a", 32, 8, 16, "bf16", "row_major"), 16, 16),
        (("matrix_b", 32, 8, 16, "s8", "row_major"), 4, 4),
        (("matrix_a", 16, 16, 8, "tf32", "col_major"), 4, 4),
        (("matrix_a", 8, 8, 32, "s4", "row_major"), 8, 1),
        (("matrix_b", 8, 8, 128, "b1", "col_major"), 32, 1),
        (("accumulator", 8, 8, 32, "s32"), 2, 2),
    ],
    ids=lambda v: "_".join(map(str, v)) if isinstance(v, tuple) else str(v),
)
def test_num_elements_match_cuda_header(args, ne, nse):
    f = fragment_types.fragment(*args)
    assert f.num_elements == ne and f.num_storage_elements == nse
    assert f.x.shape == (32, nse) and f.x.dtype == f.dtype


def test_storage_dtypes():
    want = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "tf32": np.float32, "s8": np.int8,
            "u8": np.uint8, "s4": np.int32, "u4": np.uint32, "b1": np.uint32}
    for t, dt in want.items():
        e = table.entry(t)
        f = fragment_types.fragment("matrix_a", *e.shapes[0], t, e.a_layouts[0])
        assert f.x.dtype == np.dtype(dt), t
    for t, dt in {"f16": np.float16, "f32": np.float32, "s32": np.int32}.items():
        assert fragment_types.fragment("accumulator", 16, 16, 16, t).x.dtype == np.dtype(dt)


def test_f64_needs_x64():
    with pytest.raises(RuntimeError, match="jax_enable_x64"):
        fragment_types.fragment("accumulator", 8, 8, 4, "f64")
    with jax.enable_x64(True):
        assert fragment_types.fragment("accumulator", 8, 8, 4, "f64").x.dtype == np.float64


def test_fragment_errors():
    with pytest.raises(ValueError, match=r"valid for f16: m16n16k16, m32n8k16, m8n32k16"):
        fragment_types.fragment("matrix_a", 16, 16, 8, "f16", "row_major")
    with pytest.raises(ValueError, match="layout is required"):
        fragment_types.fragment("matrix_a", 16, 16, 16, "f16")
    with pytest.raises(TypeError, match="m must be a Python int"):
        fragment_types.fragment("matrix_a", 16.5, 16, 16, "f16", "row_major")


def test_elementwise_and_replace():
    c = fragment_types.fragment("accumulator", 16, 16, 16, "f32")
    c = c.replace(x=c.x + jnp.float32(1.5))
    c = c.replace(x=c.x * 2)
    np.testing.assert_array_equal(c.x, np.full((32, 8), 3.0, np.float32))
    with pytest.raises(ValueError, match=r"shape \(\.\.\., 32, 8\)"):
        c.replace(x=jnp.zeros((32, 4), jnp.float32))
    with pytest.raises(TypeError, match="dtype float32"):
        c.replace(x=jnp.zeros((32, 8), jnp.float16))
    assert "accumulator" in repr(c)


def test_pytree_jit_vmap():
    c = fragment_types.fragment("accumulator", 16, 16, 16, "f32")
    leaves, treedef = jax.tree.flatten(c)
    assert len(leaves) == 1
    assert jax.tree.unflatten(treedef, leaves).shape == (16, 16, 16)
    traces = []

    @jax.jit
    def double(f):
        traces.append(1)
        return f.replace(x=f.x * 2)

    for v in (1.0, 2.0):
        out = double(c.replace(x=jnp.full((32, 8), v, jnp.float32)))
        assert isinstance(out, fragment_types.Fragment) and float(out.x[0, 0]) == 2 * v
    assert len(traces) == 1
    mats = jnp.arange(4 * 256, dtype=jnp.float32).reshape(4, 16, 16)
    batched = jax.vmap(lambda m: F.fragment_from_matrix(c, m))(mats)
    assert batched.x.shape == (4, 32, 8)
    back = jax.vmap(F.matrix_from_fragment)(batched)
    np.testing.assert_array_equal(back, mats)
    # Leading batch axes also work without vmap.
    np.testing.assert_array_equal(F.matrix_from_fragment(F.fragment_from_matrix(c, mats)), mats)


# ---------------------------------------------------------------------------------------
# Conversions.


def all_specs():
    out = []
    for e in table.TABLE:
        for shape in e.shapes:
            for use in ("matrix_a", "matrix_b"):
                for layout in e.layouts(use):
                    out.append((use, *shape, e.operand_format, layout))
            for acc in e.accumulator_types:
                out.append(("accumulator", *shape, acc, None))
    return sorted(set(out), key=str)


def random_matrix(et, shape, rng):
    if et.name == "s4":
        return rng.integers(-8, 8, shape).astype(np.int8)
    if et.name == "u4":
        return rng.integers(0, 16, shape).astype(np.uint8)
    if et.name == "b1":
        return rng.integers(0, 2, shape).astype(np.uint8)
    bits = rng.integers(0, 2**63, shape, dtype=np.uint64).astype(et.bits_dtype)
    return bits.view(et.value_dtype)


def _there_and_back(spec, mat):
    f = F.fragment_from_matrix(spec, mat)
    return f, F.matrix_from_fragment(f)


@pytest.mark.parametrize("spec", all_specs(), ids=lambda s: ".".join(map(str, s)))
def test_round_trip_every_fragment_type(spec):
    with jax.enable_x64(True):
        frag = fragment_types.fragment(*spec)
        et = frag.element_type
        mat = random_matrix(et, (frag.rows, frag.cols), np.random.default_rng(0))
        f, back = jax.jit(_there_and_back)(frag, mat)
        back = np.asarray(back)
        np.testing.assert_array_equal(back.view(np.uint8), mat.view(np.uint8))
        if et.name == "f16" and frag.use != "accumulator":  # duplicated registers
            x = np.asarray(f.x).view(np.uint16)
            distinct = frag.rows * frag.cols // 32
            for rep in range(16 // distinct):
                np.testing.assert_array_equal(x[:, rep * distinct:(rep + 1) * distinct],
                                              x[:, :distinct])


def test_conversion_errors():
    a = fragment_types.fragment("matrix_a", 16, 16, 16, "f16", "row_major")
    with pytest.raises(ValueError, match=r"shape \(\.\.\., 16, 16\)"):
        F.fragment_from_matrix(a, jnp.zeros((16, 8), jnp.float16))
    with pytest.raises(TypeError, match="dtype float16"):
        F.fragment_from_matrix(a, jnp.zeros((16, 16), jnp.float32))
    with pytest.raises(TypeError, match="frag_spec must be a Fragment"):
        F.fragment_from_matrix("matrix_a", jnp.zeros((16, 16), jnp.float16))


_pack = jax.jit(fragment_storage.pack_values, static_argnums=0)
_unpack = jax.jit(fragment_storage.unpack_values, static_argnums=0)


@settings(max_examples=50, derandomize=True, deadline=None)
@given(st.sampled_from(["s4", "u4", "b1"]), st.integers(0, 2**32 - 1))
def test_packed_word_bits(t, word):
    """A storage word unpacks to its nibbles/bits in order and packs back unchanged."""
    et = table.ELEMENT_TYPES[t]
    w = np.array([word], np.uint32)
    if et.storage_dtype == np.int32:
        w = w.view(np.int32)
    vals = np.asarray(_unpack(et, jnp.asarray(w)))
    fields = [(word >> (et.bits * j)) & ((1 << et.bits) - 1) for j in range(et.per_storage)]
    if t == "s4":
        fields = [f - 16 if f >= 8 else f for f in fields]
    np.testing.assert_array_equal(vals, fields)
    np.testing.assert_array_equal(np.asarray(_pack(et, jnp.asarray(vals))), w)


def test_layout_bases_are_linear():
    lane_b, elem_b = F.layout_bases("matrix_a", 16, 16, 16, "f16")
    assert lane_b == [(0, 2), (0, 4), (1, 0), (2, 0), (4, 0)]
    assert elem_b == [(0, 1), (8, 0), (0, 8), (0, 0)]
    lane_b, elem_b = F.layout_bases("accumulator", 8, 32, 16, "f32")
    assert lane_b == [(2, 0), (4, 0), (0, 1), (0, 2), (0, 4)]
    assert elem_b == [(1, 0), (0, 8), (0, 16)]
