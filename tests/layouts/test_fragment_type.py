"""FragmentType: the static, hashable fragment type apart from the fragment value.

Checks that the type is hashable, comparable, a static jit argument and a dict key;
that every descriptive property agrees with what the 0.1 ``Fragment`` reported (a
table frozen from it) for every fragment type of the WMMA table; that a type works
wherever only a description is needed (lane maps, load_matrix_sync, fill_fragment,
fragment_from_matrix) with results equal, bit for bit, to those of a zero
fragment; and that bad declarations raise the table's own errors, eagerly.
"""

import dataclasses
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxwarp
from jaxwarp._src.catalogue import wmma_table as table
from jaxwarp._src.instructions import wmma
from jaxwarp._src.layouts import fragments as F
from jaxwarp._src.layouts.fragment_types import Fragment, FragmentType, fragment, fragment_type

# What the 0.1 Fragment (value and type in one class) reported for every fragment type
# of the WMMA table, frozen from that code before the split:
# "use m n k type layout: rows cols element_type dtype num_elements num_storage_elements".
OLD_FRAGMENT_PROPERTIES = """
accumulator 16 16 16 f16 None: 16 16 f16 float16 8 8
accumulator 16 16 16 f32 None: 16 16 f32 float32 8 8
accumulator 16 16 16 s32 None: 16 16 s32 int32 8 8
accumulator 16 16 8 f32 None: 16 16 f32 float32 8 8
accumulator 32 8 16 f16 None: 32 8 f16 float16 8 8
accumulator 32 8 16 f32 None: 32 8 f32 float32 8 8
accumulator 32 8 16 s32 None: 32 8 s32 int32 8 8
accumulator 8 32 16 f16 None: 8 32 f16 float16 8 8
accumulator 8 32 16 f32 None: 8 32 f32 float32 8 8
accumulator 8 32 16 s32 None: 8 32 s32 int32 8 8
accumulator 8 8 128 s32 None: 8 8 s32 int32 2 2
accumulator 8 8 32 s32 None: 8 8 s32 int32 2 2
accumulator 8 8 4 f64 None: 8 8 f64 float64 2 2
matrix_a 16 16 16 bf16 col_major: 16 16 bf16 bfloat16 8 8
matrix_a 16 16 16 bf16 row_major: 16 16 bf16 bfloat16 8 8
matrix_a 16 16 16 f16 col_major: 16 16 f16 float16 16 16
matrix_a 16 16 16 f16 row_major: 16 16 f16 float16 16 16
matrix_a 16 16 16 s8 col_major: 16 16 s8 int8 8 8
matrix_a 16 16 16 s8 row_major: 16 16 s8 int8 8 8
matrix_a 16 16 16 u8 col_major: 16 16 u8 uint8 8 8
matrix_a 16 16 16 u8 row_major: 16 16 u8 uint8 8 8
matrix_a 16 16 8 tf32 col_major: 16 8 tf32 float32 4 4
matrix_a 16 16 8 tf32 row_major: 16 8 tf32 float32 4 4
matrix_a 32 8 16 bf16 col_major: 32 16 bf16 bfloat16 16 16
matrix_a 32 8 16 bf16 row_major: 32 16 bf16 bfloat16 16 16
matrix_a 32 8 16 f16 col_major: 32 16 f16 float16 16 16
matrix_a 32 8 16 f16 row_major: 32 16 f16 float16 16 16
matrix_a 32 8 16 s8 col_major: 32 16 s8 int8 16 16
matrix_a 32 8 16 s8 row_major: 32 16 s8 int8 16 16
matrix_a 32 8 16 u8 col_major: 32 16 u8 uint8 16 16
matrix_a 32 8 16 u8 row_major: 32 16 u8 uint8 16 16
matrix_a 8 32 16 bf16 col_major: 8 16 bf16 bfloat16 4 4
matrix_a 8 32 16 bf16 row_major: 8 16 bf16 bfloat16 4 4
matrix_a 8 32 16 f16 col_major: 8 16 f16 float16 16 16
matrix_a 8 32 16 f16 row_major: 8 16 f16 float16 16 16
matrix_a 8 32 16 s8 col_major: 8 16 s8 int8 4 4
matrix_a 8 32 16 s8 row_major: 8 16 s8 int8 4 4
matrix_a 8 32 16 u8 col_major: 8 16 u8 uint8 4 4
matrix_a 8 32 16 u8 row_major: 8 16 u8 uint8 4 4
matrix_a 8 8 128 b1 row_major: 8 128 b1 uint32 32 1
matrix_a 8 8 32 s4 row_major: 8 32 s4 int32 8 1
matrix_a 8 8 32 u4 row_major: 8 32 u4 uint32 8 1
matrix_a 8 8 4 f64 col_major: 8 4 f64 float64 1 1
matrix_a 8 8 4 f64 row_major: 8 4 f64 float64 1 1
matrix_b 16 16 16 bf16 col_major: 16 16 bf16 bfloat16 8 8
matrix_b 16 16 16 bf16 row_major: 16 16 bf16 bfloat16 8 8
matrix_b 16 16 16 f16 col_major: 16 16 f16 float16 16 16
matrix_b 16 16 16 f16 row_major: 16 16 f16 float16 16 16
matrix_b 16 16 16 s8 col_major: 16 16 s8 int8 8 8
matrix_b 16 16 16 s8 row_major: 16 16 s8 int8 8 8
matrix_b 16 16 16 u8 col_major: 16 16 u8 uint8 8 8
matrix_b 16 16 16 u8 row_major: 16 16 u8 uint8 8 8
matrix_b 16 16 8 tf32 col_major: 8 16 tf32 float32 4 4
matrix_b 16 16 8 tf32 row_major: 8 16 tf32 float32 4 4
matrix_b 32 8 16 bf16 col_major: 16 8 bf16 bfloat16 4 4
matrix_b 32 8 16 bf16 row_major: 16 8 bf16 bfloat16 4 4
matrix_b 32 8 16 f16 col_major: 16 8 f16 float16 16 16
matrix_b 32 8 16 f16 row_major: 16 8 f16 float16 16 16
matrix_b 32 8 16 s8 col_major: 16 8 s8 int8 4 4
matrix_b 32 8 16 s8 row_major: 16 8 s8 int8 4 4
matrix_b 32 8 16 u8 col_major: 16 8 u8 uint8 4 4
matrix_b 32 8 16 u8 row_major: 16 8 u8 uint8 4 4
matrix_b 8 32 16 bf16 col_major: 16 32 bf16 bfloat16 16 16
matrix_b 8 32 16 bf16 row_major: 16 32 bf16 bfloat16 16 16
matrix_b 8 32 16 f16 col_major: 16 32 f16 float16 16 16
matrix_b 8 32 16 f16 row_major: 16 32 f16 float16 16 16
matrix_b 8 32 16 s8 col_major: 16 32 s8 int8 16 16
matrix_b 8 32 16 s8 row_major: 16 32 s8 int8 16 16
matrix_b 8 32 16 u8 col_major: 16 32 u8 uint8 16 16
matrix_b 8 32 16 u8 row_major: 16 32 u8 uint8 16 16
matrix_b 8 8 128 b1 col_major: 128 8 b1 uint32 32 1
matrix_b 8 8 32 s4 col_major: 32 8 s4 int32 8 1
matrix_b 8 8 32 u4 col_major: 32 8 u4 uint32 8 1
matrix_b 8 8 4 f64 col_major: 4 8 f64 float64 1 1
matrix_b 8 8 4 f64 row_major: 4 8 f64 float64 1 1
"""


def _parse_old():
    out = {}
    for line in OLD_FRAGMENT_PROPERTIES.strip().splitlines():
        decl, props = line.split(": ")
        use, m, n, k, t, layout = decl.split()
        spec = (use, int(m), int(n), int(k), t, None if layout == "None" else layout)
        rows, cols, et, dtype, ne, nse = props.split()
        out[spec] = (int(rows), int(cols), et, dtype, int(ne), int(nse))
    return out


OLD = _parse_old()
SPECS = sorted(OLD, key=str)


def table_specs():
    """Every fragment declaration the WMMA table allows."""
    out = set()
    for e in table.TABLE:
        for shape in e.shapes:
            for use in ("matrix_a", "matrix_b"):
                for layout in e.layouts(use):
                    out.add((use, *shape, e.operand_format, layout))
            for acc in e.accumulator_types:
                out.add(("accumulator", *shape, acc, None))
    return out


def spec_id(spec):
    return ".".join(map(str, spec))


def test_frozen_table_covers_the_wmma_table():
    assert set(OLD) == table_specs() and len(OLD) == 75


# ---------------------------------------------------------------------------------------
# Properties: the type agrees with the 0.1 Fragment for every configuration.


@pytest.mark.parametrize("spec", SPECS, ids=spec_id)
def test_properties_agree_with_old_fragment(spec):
    rows, cols, et, dtype, ne, nse = OLD[spec]
    use, m, n, k, t, layout = spec
    ft = fragment_type(*spec)
    assert ft == FragmentType(*spec)
    assert (ft.use, ft.m, ft.n, ft.k, ft.type, ft.layout) == spec
    assert ft.shape == (m, n, k)
    assert (ft.rows, ft.cols) == ft.matrix_shape == (rows, cols)
    assert ft.element_type is table.ELEMENT_TYPES[t] and ft.element_type.name == et
    assert ft.dtype == np.dtype(jnp.dtype(dtype))
    assert (ft.num_elements, ft.num_storage_elements) == (ne, nse)
    assert ft.storage_shape == (32, nse)
    with jax.enable_x64(t == "f64"):
        frag = fragment(*spec)  # the value: the same description, delegated to its ftype
        assert frag.ftype == ft
        for name in ("shape", "rows", "cols", "matrix_shape", "element_type", "dtype",
                     "num_elements", "num_storage_elements", "storage_shape"):
            assert getattr(frag, name) == getattr(ft, name), name
        assert frag.x.shape == ft.storage_shape and frag.x.dtype == ft.dtype
        assert not np.asarray(frag.x).any()
        zero = ft.zeros()
        assert zero.ftype is ft and zero.x.shape == frag.x.shape and zero.x.dtype == frag.x.dtype


@pytest.mark.parametrize("spec", SPECS, ids=spec_id)
def test_lane_maps_from_type_fragment_or_names(spec):
    use, m, n, k, t, _ = spec
    ft = fragment_type(*spec)
    by_names = F.lane_map(use, m, n, k, t)
    for got in (F.lane_map(ft), ft.lane_map()):
        for a, b in zip(got, by_names, strict=True):
            np.testing.assert_array_equal(a, b)
            assert not a.flags.writeable
    assert F.layout_bases(ft) == ft.layout_bases() == F.layout_bases(use, m, n, k, t)
    assert F.lane_map_text(ft) == ft.lane_map_text() == F.lane_map_text(use, m, n, k, t)
    for a, b in zip(F._gather_maps(ft), F._gather_maps(use, m, n, k, t), strict=True):
        np.testing.assert_array_equal(a, b)
    assert by_names[0].shape == (32, ft.num_elements)


def test_lane_map_of_a_fragment_value():
    a = fragment("matrix_a", 16, 16, 16, "f16", "row_major")
    np.testing.assert_array_equal(F.lane_map(a)[1], F.lane_map(a.ftype)[1])
    assert F.lane_map_text(a) == F.lane_map_text("matrix_a", 16, 16, 16, "f16")


def test_lane_map_argument_errors():
    ft = fragment_type("accumulator", 16, 16, 16, "f32")
    with pytest.raises(TypeError, match=r"lane_map: give a FragmentType .* alone .*got a "
                                        r"FragmentType and m, type"):
        F.lane_map(ft, 16, type="f32")
    with pytest.raises(TypeError, match=r"lane_map_text\(use, m, n, k, type\): missing k, type"):
        F.lane_map_text("accumulator", 16, 16)
    with pytest.raises(ValueError, match=r"valid WMMA A/B types"):
        F.layout_bases("matrix_a", 16, 16, 16, "e4m3")
    with pytest.raises(ValueError, match=r"use='matrix_c' is not a fragment use"):
        F.lane_map("matrix_c", 16, 16, 16, "f16")
    with pytest.raises(TypeError, match="m must be a Python int"):
        F.lane_map("accumulator", 16.0, 16, 16, "f32")


# ---------------------------------------------------------------------------------------
# Hashable, comparable, static.


def test_hash_and_equality():
    t = fragment_type("matrix_a", 16, 16, 16, "f16", "row_major")
    same = FragmentType("matrix_a", np.int64(16), 16, np.int32(16), "f16", "row_major")
    assert t == same and hash(t) == hash(same) and t is not same
    assert type(same.m) is int and type(same.k) is int  # NumPy ints become Python ints
    others = [
        fragment_type("matrix_b", 16, 16, 16, "f16", "row_major"),
        fragment_type("matrix_a", 32, 8, 16, "f16", "row_major"),
        fragment_type("matrix_a", 16, 16, 16, "bf16", "row_major"),
        fragment_type("matrix_a", 16, 16, 16, "f16", "col_major"),
    ]
    assert all(o != t for o in others)
    assert len({t, same, *others}) == 5
    assert t != fragment("matrix_a", 16, 16, 16, "f16", "row_major")  # a type is not a value
    assert eval(repr(t), {"FragmentType": FragmentType}) == t
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.m = 32


def test_dict_key_and_set_member():
    types = [fragment_type(*s) for s in SPECS]
    assert len(set(types)) == len(SPECS)
    by_type = {ft: i for i, ft in enumerate(types)}
    for i, spec in enumerate(SPECS):
        assert by_type[FragmentType(*spec)] == i
    # A value's type finds the same entry.
    assert by_type[fragment("accumulator", 16, 16, 16, "f32").ftype] == \
        SPECS.index(("accumulator", 16, 16, 16, "f32", None))


def test_static_jit_argument():
    traces = []

    def fill(ft, v):
        traces.append(ft)
        return wmma.fill_fragment(ft, v).x

    jfill = jax.jit(fill, static_argnums=0)
    c32 = fragment_type("accumulator", 16, 16, 16, "f32")
    for v in (1.0, 2.0):
        out = jfill(FragmentType("accumulator", 16, 16, 16, "f32"), jnp.float32(v))  # equal type
        np.testing.assert_array_equal(out, np.full((32, 8), v, np.float32))
    assert traces == [c32]  # one trace: equal types hit the cache
    out = jfill(fragment_type("accumulator", 16, 16, 16, "f16"), jnp.float32(3.0))
    assert out.dtype == jnp.float16 and len(traces) == 2


def test_pytree_without_leaves():
    t = fragment_type("matrix_b", 32, 8, 16, "s8", "col_major")
    leaves, treedef = jax.tree.flatten(t)
    assert leaves == [] and jax.tree.unflatten(treedef, []) is t
    # So it passes through jit and vmap as an ordinary (non-static) argument.
    mem = jnp.arange(4 * 128, dtype=jnp.int8).reshape(4, 128)
    load = jax.jit(jax.vmap(lambda ft, m: wmma.load_matrix_sync(ft, m, 16), in_axes=(None, 0)))
    frags = load(t, mem)
    assert isinstance(frags, Fragment) and frags.ftype == t and frags.x.shape == (4, 32, 4)
    for w in range(4):
        np.testing.assert_array_equal(F.matrix_from_fragment(
            jax.tree.map(lambda x, w=w: x[w], frags)), np.asarray(mem[w]).reshape(8, 16).T)


# ---------------------------------------------------------------------------------------
# A type wherever only a description is read: the same bits as a zero fragment.


def memory_for(ft, seed):
    """Random bits in a buffer that holds the matrix row- (or column-) major at ldm."""
    et = ft.element_type
    col = ft.layout == "col_major"
    inner = ft.rows if col else ft.cols
    outer = ft.cols if col else ft.rows
    ldm = -(-inner // et.ldm_multiple) * et.ldm_multiple
    n = outer * ldm // (8 // et.bits if et.packed else 1)
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, n * et.memory_dtype.itemsize, dtype=np.uint8)
    return jnp.asarray(raw.view(et.memory_dtype)), ldm


@pytest.mark.parametrize("spec", SPECS, ids=spec_id)
def test_load_via_type_equals_load_via_zero_fragment(spec):
    with jax.enable_x64(spec[4] == "f64"):
        ft = fragment_type(*spec)
        zero = fragment(*spec)
        mem, ldm = memory_for(ft, hash(spec) % 2**32)
        layout = "mem_row_major" if ft.use == "accumulator" else None
        via_type = wmma.load_matrix_sync(ft, mem, ldm, layout)
        via_value = wmma.load_matrix_sync(zero, mem, ldm, layout)
        assert isinstance(via_type, Fragment) and via_type.ftype == ft == via_value.ftype
        bits = ft.element_type.bits_dtype
        np.testing.assert_array_equal(np.asarray(via_type.x).view(bits),
                                      np.asarray(via_value.x).view(bits))
        # The same for fragment_from_matrix and its method, on the loaded matrix.
        mat = F.matrix_from_fragment(via_value)
        for got in (F.fragment_from_matrix(ft, mat), ft.from_matrix(mat)):
            np.testing.assert_array_equal(np.asarray(got.x).view(bits),
                                          np.asarray(F.fragment_from_matrix(zero, mat).x)
                                          .view(bits))


@pytest.mark.parametrize("spec,v", [
    (("accumulator", 16, 16, 16, "f16"), 0.1),
    (("matrix_a", 16, 16, 16, "bf16", "row_major"), -2.5),
    (("matrix_b", 8, 8, 32, "u4", "col_major"), 3),
    (("matrix_a", 8, 8, 128, "b1", "row_major"), 1),
    (("accumulator", 8, 8, 32, "s32"), -7),
])
def test_fill_via_type_equals_fill_via_zero_fragment(spec, v):
    ft = fragment_type(*spec)
    want = wmma.fill_fragment(fragment(*spec), v)
    for got in (wmma.fill_fragment(ft, v), ft.fill(v)):
        assert got.ftype == ft
        np.testing.assert_array_equal(np.asarray(got.x).view(np.uint8),
                                      np.asarray(want.x).view(np.uint8))


def test_guide_example_with_types():
    """The guide's kernel with types as load targets, under jit (stand-in for mma)."""
    A = fragment_type("matrix_a", 16, 16, 16, "f16", "col_major")
    B = fragment_type("matrix_b", 16, 16, 16, "f16", "row_major")
    C = fragment_type("accumulator", 16, 16, 16, "f32")
    rng = np.random.default_rng(0)
    a_mat = rng.integers(-3, 4, (16, 16)).astype(np.float16)
    b_mat = rng.integers(-3, 4, (16, 16)).astype(np.float16)

    @jax.jit
    def kernel(a_mem, b_mem):
        a = wmma.load_matrix_sync(A, a_mem, 16)
        b = wmma.load_matrix_sync(B, b_mem, 16)
        c = C.fill(0.5)
        return F.matrix_from_fragment(a), F.matrix_from_fragment(b), c

    a, b, c = kernel(jnp.asarray(a_mat.T.reshape(-1)), jnp.asarray(b_mat.reshape(-1)))
    np.testing.assert_array_equal(a, a_mat)
    np.testing.assert_array_equal(b, b_mat)
    assert c.ftype == C and (np.asarray(c.x) == 0.5).all()


def test_from_storage():
    t = fragment_type("matrix_a", 8, 8, 32, "s4", "row_major")
    x = jnp.full((32, 1), 0x12345678, jnp.int32)
    f = t.from_storage(x)
    assert f.ftype is t and f.x is x
    np.testing.assert_array_equal(F.matrix_from_fragment(f)[0, :8], [-8, 7, 6, 5, 4, 3, 2, 1])
    with pytest.raises(ValueError, match=r"must have shape \(\.\.\., 32, 1\), got \(32, 2\)"):
        t.from_storage(jnp.zeros((32, 2), jnp.int32))
    with pytest.raises(TypeError, match="dtype int32, got uint32"):
        t.from_storage(jnp.zeros((32, 1), jnp.uint32))
    batched = jax.vmap(lambda x: t.from_storage(x))(jnp.zeros((3, 32, 1), jnp.int32))
    assert batched.x.shape == (3, 32, 1) and batched.ftype == t


def test_f64_type_without_x64():
    t = fragment_type("accumulator", 8, 8, 4, "f64")  # a description needs no x64
    assert t.dtype == np.float64 and t.storage_shape == (32, 2)
    with pytest.raises(RuntimeError, match="jax_enable_x64"):
        t.zeros()
    with pytest.raises(RuntimeError, match="jax_enable_x64"):
        t.fill(1.0)
    with jax.enable_x64(True):
        assert t.zeros().x.dtype == np.float64 and float(t.fill(1.5).x[0, 0]) == 1.5


def test_values_needed_where_values_are_read():
    A = fragment_type("matrix_a", 16, 16, 16, "f16", "row_major")
    B = fragment_type("matrix_b", 16, 16, 16, "f16", "row_major")
    C = fragment_type("accumulator", 16, 16, 16, "f32")
    msg = r"must be a Fragment \(a value, with registers x\), got the FragmentType"
    with pytest.raises(TypeError, match="frag " + msg):
        F.matrix_from_fragment(C)
    with pytest.raises(TypeError, match="a " + msg):
        wmma.mma_sync(A, B.zeros(), C.zeros())
    with pytest.raises(TypeError, match="c " + msg):
        wmma.mma_sync(A.zeros(), B.zeros(), C)
    with pytest.raises(TypeError, match="frag " + msg):
        wmma.store_matrix_sync(jnp.zeros(256, jnp.float32), C, 16, "mem_row_major")
    with pytest.raises(TypeError, match=r"v must be a scalar number"):
        wmma.fill_fragment(C, C)
    with pytest.raises(TypeError, match=r"frag must be a Fragment \(see jaxwarp.fragment\), "
                                        r"got str; or its FragmentType"):
        wmma.load_matrix_sync("matrix_a", jnp.zeros(256, jnp.float16), 16)


# ---------------------------------------------------------------------------------------
# Bad declarations: the table's own errors, raised eagerly by every constructor.


def table_error(args):
    """The ValueError message check_fragment gives for these arguments."""
    with pytest.raises(ValueError) as e:
        table.check_fragment(*args)
    return str(e.value)


BAD = [
    ("wrong-use", ("matrix_c", 16, 16, 16, "f16", "row_major")),
    ("wrong-shape", ("matrix_a", 16, 16, 32, "f16", "row_major")),
    ("shape-not-for-type", ("matrix_a", 16, 16, 8, "f16", "row_major")),
    ("wrong-type", ("matrix_a", 16, 16, 16, "e4m3", "row_major")),
    ("accumulator-type", ("accumulator", 16, 16, 16, "bf16", None)),
    ("wrong-layout", ("matrix_a", 16, 16, 16, "f16", "mem_row_major")),
    ("layout-not-for-type", ("matrix_a", 8, 8, 32, "s4", "col_major")),
    ("b1-b-row-major", ("matrix_b", 8, 8, 128, "b1", "row_major")),
    ("missing-layout", ("matrix_b", 16, 16, 16, "f16", None)),
    ("accumulator-with-layout", ("accumulator", 16, 16, 16, "f32", "row_major")),
]


@pytest.mark.parametrize("name,args", BAD, ids=[b[0] for b in BAD])
def test_bad_declarations_raise_the_table_errors(name, args):
    want = table_error(args)
    for make in (FragmentType, fragment_type, fragment, jaxwarp.fragment_type):
        with pytest.raises(ValueError) as e:
            make(*args)
        assert str(e.value) == want, make


def test_bad_shape_arguments():
    for bad, exc, msg in ((16.5, TypeError, "m must be a Python int, got float 16.5"),
                          ("16", TypeError, "m must be a Python int, got str"),
                          (True, TypeError, "m must be a Python int, got bool")):
        for make in (FragmentType, fragment_type, fragment):
            with pytest.raises(exc, match=re.escape(msg)):
                make("matrix_a", bad, 16, 16, "f16", "row_major")
    with pytest.raises(ValueError, match=r"type=\['f16'\] is not a name; allowed: \('f16'"):
        fragment_type("matrix_a", 16, 16, 16, ["f16"], "row_major")
    with pytest.raises(ValueError, match=r"layout=\['row_major'\] is not a name"):
        fragment_type("matrix_a", 16, 16, 16, "f16", ["row_major"])


def test_traced_shape_is_named_under_jit():
    with pytest.raises(jax.errors.ConcretizationTypeError, match="k is a static argument"):
        jax.jit(lambda k: fragment_type("matrix_a", 16, 16, k, "f16", "row_major"))(16)


def test_replace_keeps_its_checks():
    c = fragment("accumulator", 16, 16, 16, "f32")
    c2 = c.replace(x=c.x + jnp.float32(1))
    assert c2.ftype == c.ftype
    d = c.replace(type="f16", x=jnp.zeros((32, 8), jnp.float16))
    assert d.ftype == fragment_type("accumulator", 16, 16, 16, "f16") and d.type == "f16"
    with pytest.raises(ValueError, match="changing type needs a new x"):
        c.replace(type="f16")
    with pytest.raises(ValueError, match=re.escape(table_error(
            ("accumulator", 16, 16, 16, "bf16", None)))):
        c.replace(type="bf16", x=jnp.zeros((32, 8), jnp.bfloat16))
    with pytest.raises(TypeError, match="dtype float16, got float32"):
        c.replace(type="f16", x=c.x)
    with pytest.raises(ValueError, match=r"unknown field\(s\) \['ftype'\]"):
        c.replace(ftype=c.ftype)


def test_hand_made_fragment_is_checked_when_described():
    f = Fragment(jnp.zeros((32, 8), jnp.float32), "accumulator", 16, 16, 16, "bf16")
    with pytest.raises(ValueError, match="unsupported accumulator type='bf16'"):
        f.ftype  # noqa: B018
    with pytest.raises(ValueError, match="unsupported accumulator type='bf16'"):
        F.matrix_from_fragment(f)


def test_layout_keys():
    t = wmma.layout_key_type("b.f64.m8n8k4.c")  # no x64 needed for a type
    assert t == fragment_type("matrix_b", 8, 8, 4, "f64", "col_major")
    f = wmma.parse_layout_key("c.s32.m8n8k32")  # a zero value, as in 0.1
    assert isinstance(f, Fragment) and f.ftype == fragment_type("accumulator", 8, 8, 32, "s32")
    with pytest.raises(RuntimeError, match="jax_enable_x64"):
        wmma.parse_layout_key("b.f64.m8n8k4.c")
    with pytest.raises(ValueError, match="not a layout.npz key"):
        wmma.layout_key_type("x.f32.m16n16k16")


def test_public_names():
    assert jaxwarp.FragmentType is FragmentType and jaxwarp.fragment_type is fragment_type
