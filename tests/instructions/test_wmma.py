"""The WMMA API: load/store/fill, mma_sync/bmma_sync wrappers, errors, jit/vmap, captures."""

import importlib
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxwarp._src.catalogue import wmma_table as table
from jaxwarp._src.instructions import wmma
from jaxwarp._src.layouts.fragments import fragment, fragment_from_matrix, matrix_from_fragment


def to_memory(mat, et, col_major, offset=0, pad=0):
    """Lays a logical matrix into flat memory as CUDA would; returns (memory, ldm)."""
    mem, ldm = wmma.matrix_to_memory(mat, et.name, "col_major" if col_major else "row_major",
                                     offset=offset, pad=pad)
    return jnp.asarray(mem), ldm


def rand(et, shape, seed=0):
    rng = np.random.default_rng(seed)
    lo, hi = {"s4": (-8, 8), "u4": (0, 16), "b1": (0, 2), "u8": (0, 50)}.get(et.name, (-50, 50))
    return rng.integers(lo, hi, shape).astype(et.value_dtype)


# ---------------------------------------------------------------------------------------
# load / store / fill

LOAD = jax.jit(wmma.load_matrix_sync, static_argnums=(2, 3), static_argnames=("offset",))
STORE = jax.jit(wmma.store_matrix_sync, static_argnums=(2, 3), static_argnames=("offset",))


@pytest.mark.parametrize(
    "use,shape,t,layout",
    [
        ("matrix_a", (16, 16, 16), "f16", "row_major"),
        ("matrix_a", (16, 16, 16), "f16", "col_major"),
        ("matrix_b", (8, 32, 16), "bf16", "row_major"),
        ("matrix_b", (32, 8, 16), "s8", "col_major"),
        ("matrix_a", (16, 16, 8), "tf32", "col_major"),
        ("matrix_a", (8, 8, 32), "s4", "row_major"),
        ("matrix_b", (8, 8, 32), "u4", "col_major"),
        ("matrix_a", (8, 8, 128), "b1", "row_major"),
    ],
)
@pytest.mark.parametrize("offset_units,pad_units", [(0, 0), (1, 1), (3, 2)])
def test_load_operand(use, shape, t, layout, offset_units, pad_units):
    frag = fragment(use, *shape, t, layout)
    et = frag.element_type
    mat = rand(et, (frag.rows, frag.cols))
    mem, ldm = to_memory(mat, et, layout == "col_major", offset_units * et.align_elements,
                         pad_units * et.ldm_multiple)
    f = LOAD(frag, mem, ldm, offset=offset_units * et.align_elements)
    np.testing.assert_array_equal(jax.jit(matrix_from_fragment)(f), mat)


@pytest.mark.parametrize("t", ["f16", "f32", "s32"])
@pytest.mark.parametrize("shape", [(16, 16, 16), (32, 8, 16), (8, 32, 16)])
def test_accumulator_load_store_round_trip(t, shape):
    frag = fragment("accumulator", *shape, t)
    et = frag.element_type
    mat = rand(et, (frag.rows, frag.cols))
    mem, ldm = to_memory(mat, et, False, et.align_elements, et.ldm_multiple)
    c = LOAD(frag, mem, ldm, "mem_row_major", offset=et.align_elements)
    np.testing.assert_array_equal(jax.jit(matrix_from_fragment)(c), mat)
    # Store column-major into a larger buffer: the gaps keep their old contents.
    out = jnp.full(2 * shape[0] * shape[1] + 64, 7, et.memory_dtype)
    ld = frag.rows + et.ldm_multiple
    out = STORE(out, c, ld, "mem_col_major", offset=2 * et.align_elements)
    o = np.asarray(out)
    start = 2 * et.align_elements
    block = o[start:start + frag.cols * ld].reshape(frag.cols, ld)
    np.testing.assert_array_equal(block[:, :frag.rows], mat.T)
    assert (block[:, frag.rows:] == 7).all() and (o[:start] == 7).all()
    assert (o[start + frag.cols * ld:] == 7).all()


def test_store_keeps_nan_payloads():
    frag = fragment("accumulator", 16, 16, 16, "f32")
    bits = np.arange(256, dtype=np.uint32) | np.uint32(0x7FC00000)
    bits[::3] ^= np.uint32(0x00400001)  # signalling NaNs with payloads
    mem = jnp.asarray(bits.view(np.float32))
    c = wmma.load_matrix_sync(frag, mem, 16, "mem_row_major")
    out = wmma.store_matrix_sync(jnp.zeros(256, jnp.float32), c, 16, "mem_row_major")
    np.testing.assert_array_equal(np.asarray(out).view(np.uint32), bits)


def test_fill_fragment():
    c = wmma.fill_fragment(fragment("accumulator", 16, 16, 16, "f16"), 0.1)
    assert (np.asarray(c.x).view(np.uint16) == np.float16(0.1).view(np.uint16)).all()
    a = wmma.fill_fragment(fragment("matrix_a", 8, 8, 32, "s4", "row_major"), -1)
    assert a.x.dtype == jnp.int32 and (np.asarray(a.x) == -1).all()
    b = wmma.fill_fragment(fragment("matrix_b", 8, 8, 32, "u4", "col_major"), 0x3)
    assert (np.asarray(b.x) == 0x33333333).all()
    with pytest.raises(ValueError, match=r"v=19 does not fit a u4 fragment"):
        wmma.fill_fragment(fragment("matrix_b", 8, 8, 32, "u4", "col_major"), 0x13)
    for v, want in ((1, 0xFFFFFFFF), (0, 0)):
        f = wmma.fill_fragment(fragment("matrix_a", 8, 8, 128, "b1", "row_major"), v)
        assert (np.asarray(f.x) == want).all()
    for v in (2, 3, -1):  # out of range: an error, not the low bit
        with pytest.raises(ValueError, match=f"v={v} does not fit a b1 fragment"):
            wmma.fill_fragment(fragment("matrix_a", 8, 8, 128, "b1", "row_major"), v)
    # A traced value, under jit.
    f = jax.jit(wmma.fill_fragment)(fragment("matrix_a", 16, 16, 16, "bf16", "row_major"),
                                     jnp.float32(1.00390625))  # ties to even -> 1.0
    assert (np.asarray(f.x).view(np.uint16) == 0x3F80).all()
    with pytest.raises(ValueError, match="v must be a scalar"):
        wmma.fill_fragment(c, jnp.zeros(3, jnp.float16))


def bad(fn, exc, match):
    with pytest.raises(exc, match=match):
        fn()


def test_memory_argument_errors():
    a = fragment("matrix_a", 16, 16, 16, "f16", "row_major")
    c = fragment("accumulator", 16, 16, 16, "f32")
    mem = jnp.zeros(512, jnp.float16)
    bad(lambda: wmma.load_matrix_sync(a, mem, 12), ValueError, r"ldm=12 .*multiple of 8")
    bad(lambda: wmma.load_matrix_sync(a, mem, 8), ValueError, r"ldm=8 is smaller than the row")
    bad(lambda: wmma.load_matrix_sync(a, mem, 16, offset=8), ValueError,
        r"offset=8 .*multiple of 16 .*256-bit \(32-byte\) aligned")
    bad(lambda: wmma.load_matrix_sync(a, mem, 40), ValueError,
        r"memory holds 512 elements .*reaches element 615")
    bad(lambda: wmma.load_matrix_sync(a, mem[:200], 16), ValueError, "memory holds 200")
    bad(lambda: wmma.load_matrix_sync(a, mem.astype(jnp.float32), 16), TypeError,
        "memory for a f16 fragment must have dtype float16, got float32")
    bad(lambda: wmma.load_matrix_sync(a, mem.reshape(2, 256), 16), ValueError, "flat 1-D")
    bad(lambda: wmma.load_matrix_sync(a, mem, 16, "mem_row_major"), ValueError,
        "layout='mem_row_major' must not be given for a matrix_a")
    cmem = jnp.zeros(256, jnp.float32)
    bad(lambda: wmma.load_matrix_sync(c, cmem, 16), ValueError, "accumulator needs layout")
    bad(lambda: wmma.load_matrix_sync(c, cmem, 16, "row_major"), ValueError,
        "layout='row_major' is not supported")
    bad(lambda: wmma.load_matrix_sync(c, cmem, 6, "mem_row_major"), ValueError,
        "multiple of 4 elements")
    bad(lambda: wmma.store_matrix_sync(mem, a, 16, "mem_row_major"), ValueError,
        "accumulator fragments only")
    bad(lambda: wmma.store_matrix_sync(cmem, c, 16, "mem_col_major", offset=4), ValueError,
        "offset=4")
    bad(lambda: wmma.load_matrix_sync("a", mem, 16), TypeError, "frag must be a Fragment")
    s4 = fragment("matrix_a", 8, 8, 32, "s4", "row_major")
    bad(lambda: wmma.load_matrix_sync(s4, jnp.zeros(128, jnp.int8), 32), TypeError,
        r"dtype uint8 \(sub-byte")
    bad(lambda: wmma.load_matrix_sync(s4, jnp.zeros(128, jnp.uint8), 16), ValueError,
        "multiple of 32 elements")
    with jax.enable_x64(True):
        d = fragment("accumulator", 8, 8, 4, "f64")
        bad(lambda: wmma.load_matrix_sync(d, jnp.zeros(64, jnp.float64), 3, "mem_row_major"),
            ValueError, "multiple of 2 elements")


def test_traced_ldm_and_offset_are_named():
    a = fragment("matrix_a", 16, 16, 16, "f16", "row_major")
    mem = jnp.zeros(512, jnp.float16)
    with pytest.raises(jax.errors.ConcretizationTypeError, match="ldm is a static argument"):
        jax.jit(lambda ld: wmma.load_matrix_sync(a, mem, ld))(16)
    with pytest.raises(jax.errors.ConcretizationTypeError, match="offset is a static"):
        jax.jit(lambda off: wmma.load_matrix_sync(a, mem, 16, offset=off))(0)


# ---------------------------------------------------------------------------------------
# mma_sync / bmma_sync with a stand-in arithmetic (exact for small integers).


def _stub_mma(a, b, c, *, a_format, c_format, d_format, arch="sm_90", mode="exact", satf=False):
    acc = jnp.float64 if c.dtype == jnp.float64 else jnp.float32
    if jnp.issubdtype(c.dtype, jnp.integer):
        acc = jnp.int32
    d = jnp.matmul(a.astype(acc), b.astype(acc)) + c.astype(acc)
    return d.astype(table.ELEMENT_TYPES[d_format].value_dtype)


def _stub_bmma(a, b, c, *, op):
    bits = (a[:, :, None] ^ b[None, :, :]) if op == "xor" else (a[:, :, None] & b[None, :, :])
    return c + jnp.sum(bits.astype(jnp.int32), axis=1)


@pytest.fixture
def stub_arith(monkeypatch):
    stub = types.SimpleNamespace(mma=_stub_mma, bmma=_stub_bmma)
    monkeypatch.setattr(wmma, "datapath", stub)


def small_ints(shape, dtype, seed):
    return np.random.default_rng(seed).integers(-3, 4, shape).astype(dtype)


def test_guide_example_structure(stub_arith):
    """The CUDA guide's 16x16x16 example: col-major A, row-major B, f32 accumulator."""
    a_mat = small_ints((16, 16), np.float16, 1)
    b_mat = small_ints((16, 16), np.float16, 2)
    a_mem = jnp.asarray(a_mat.T.reshape(-1))  # column-major A
    b_mem = jnp.asarray(b_mat.reshape(-1))  # row-major B

    @jax.jit
    def kernel(a_mem, b_mem):
        a = fragment("matrix_a", 16, 16, 16, "f16", "col_major")
        b = fragment("matrix_b", 16, 16, 16, "f16", "row_major")
        c = wmma.fill_fragment(fragment("accumulator", 16, 16, 16, "f32"), 0.0)
        a = wmma.load_matrix_sync(a, a_mem, 16)
        b = wmma.load_matrix_sync(b, b_mem, 16)
        c = wmma.mma_sync(a, b, c)
        return wmma.store_matrix_sync(jnp.zeros(256, jnp.float32), c, 16, "mem_row_major")

    out = kernel(a_mem, b_mem)
    want = a_mat.astype(np.float32) @ b_mat.astype(np.float32)
    np.testing.assert_array_equal(np.asarray(out).reshape(16, 16), want)


@pytest.mark.parametrize("t,shape", [("s8", (32, 8, 16)), ("u8", (8, 32, 16)),
                                     ("s4", (8, 8, 32)), ("u4", (8, 8, 32))])
def test_integer_mma_sync(stub_arith, t, shape):
    e = table.entry(t)
    et = table.ELEMENT_TYPES[t]
    m, n, k = shape
    a_mat, b_mat = rand(et, (m, k), 1), rand(et, (k, n), 2)
    c_mat = np.random.default_rng(3).integers(-1000, 1000, (m, n)).astype(np.int32)
    a = fragment_from_matrix(fragment("matrix_a", *shape, t, e.a_layouts[0]), a_mat)
    b = fragment_from_matrix(fragment("matrix_b", *shape, t, e.b_layouts[-1]), b_mat)
    c = fragment_from_matrix(fragment("accumulator", *shape, "s32"), c_mat)
    d = wmma.mma_sync(a, b, c)
    assert d.use == "accumulator" and d.type == "s32"
    want = a_mat.astype(np.int32) @ b_mat.astype(np.int32) + c_mat
    np.testing.assert_array_equal(matrix_from_fragment(d), want)


def test_d_type_differs_from_c_type(stub_arith):
    a = wmma.fill_fragment(fragment("matrix_a", 16, 16, 16, "f16", "row_major"), 1.0)
    b = wmma.fill_fragment(fragment("matrix_b", 16, 16, 16, "f16", "col_major"), 2.0)
    c = wmma.fill_fragment(fragment("accumulator", 16, 16, 16, "f32"), 0.5)
    d = wmma.mma_sync(a, b, c, d_format="f16")
    assert d.type == "f16" and d.x.dtype == jnp.float16
    assert (np.asarray(d.x) == 32.5).all()


def test_bmma_sync(stub_arith):
    rng = np.random.default_rng(0)
    a_mat = rng.integers(0, 2, (8, 128)).astype(np.uint8)
    b_mat = rng.integers(0, 2, (128, 8)).astype(np.uint8)
    a = fragment_from_matrix(fragment("matrix_a", 8, 8, 128, "b1", "row_major"), a_mat)
    b = fragment_from_matrix(fragment("matrix_b", 8, 8, 128, "b1", "col_major"), b_mat)
    c = wmma.fill_fragment(fragment("accumulator", 8, 8, 128, "s32"), 5)
    for op, fn in (("xor", np.bitwise_xor), ("and", np.bitwise_and)):
        d = wmma.bmma_sync(a, b, c, op)
        want = 5 + fn(a_mat[:, :, None], b_mat[None]).sum(axis=1)
        np.testing.assert_array_equal(matrix_from_fragment(d), want)
    bad(lambda: wmma.bmma_sync(a, b, c, "or"), ValueError, "op='or'")
    bad(lambda: wmma.bmma_sync(a, b, c, "and", arch="sm_75"), ValueError, "needs sm_80")
    bad(lambda: wmma.mma_sync(a, b, c), ValueError, "bmma_sync")


def test_mma_sync_errors(stub_arith):
    a = fragment("matrix_a", 16, 16, 16, "f16", "row_major")
    b = fragment("matrix_b", 16, 16, 16, "f16", "row_major")
    c = fragment("accumulator", 16, 16, 16, "f32")
    bad(lambda: wmma.mma_sync(b, a, c), ValueError,
        "a must be a matrix_a fragment, got a matrix_b .*swapped")
    bad(lambda: wmma.mma_sync(a, b, b), ValueError, "c must be a accumulator fragment")
    b32 = fragment("matrix_b", 32, 8, 16, "f16", "row_major")
    bad(lambda: wmma.mma_sync(a, b32, c), ValueError, "fragment shapes differ")
    bbf = fragment("matrix_b", 16, 16, 16, "bf16", "row_major")
    bad(lambda: wmma.mma_sync(a, bbf, c), ValueError, "same element type")
    abf = fragment("matrix_a", 16, 16, 16, "bf16", "row_major")
    c16 = fragment("accumulator", 16, 16, 16, "f16")
    bad(lambda: wmma.mma_sync(abf, bbf, c16), ValueError,
        r"unsupported WMMA combination \(a_format='bf16', c_format='f16', d_format='f16'\); "
        r"valid for bf16: \(c_format='f32', d_format='f32'\)")
    bad(lambda: wmma.mma_sync(abf, bbf, c, arch="sm_75"), ValueError, "needs sm_80")
    bad(lambda: wmma.mma_sync(a, b, c, d_format="s32"), ValueError, "valid for f16")
    bad(lambda: wmma.mma_sync(a, b, c, satf=1), TypeError, "satf must be a Python bool")
    bad(lambda: wmma.mma_sync(a, b, "c"), TypeError, "c must be a Fragment")


def test_mma_sync_jit_and_vmap_over_warps(stub_arith):
    warps = 4
    rng = np.random.default_rng(0)
    a_mem = jnp.asarray(rng.integers(-3, 4, (warps, 256)).astype(np.int8))
    b_mem = jnp.asarray(rng.integers(-3, 4, (warps, 256)).astype(np.int8))
    traces = []

    @jax.jit
    @jax.vmap
    def warp(a_mem, b_mem):
        traces.append(1)
        a = wmma.load_matrix_sync(fragment("matrix_a", 16, 16, 16, "s8", "row_major"), a_mem, 16)
        b = wmma.load_matrix_sync(fragment("matrix_b", 16, 16, 16, "s8", "col_major"), b_mem, 16)
        c = wmma.fill_fragment(fragment("accumulator", 16, 16, 16, "s32"), 1)
        d = wmma.mma_sync(a, b, c)
        return d, wmma.store_matrix_sync(jnp.zeros(256, jnp.int32), d, 16, "mem_row_major")

    d, out = warp(a_mem, b_mem)
    warp(a_mem + 1, b_mem)
    assert len(traces) == 1 and d.x.shape == (warps, 32, 8)
    for w in range(warps):
        A = np.asarray(a_mem[w]).reshape(16, 16).astype(np.int32)
        B = np.asarray(b_mem[w]).reshape(16, 16).T.astype(np.int32)
        np.testing.assert_array_equal(np.asarray(out[w]).reshape(16, 16), A @ B + 1)


# ---------------------------------------------------------------------------------------
# mma_sync on the H100 captures, with the real arithmetic models.


def real_arith():
    try:
        mod = importlib.import_module("jaxwarp._src.arithmetic.datapath")
    except ImportError as e:
        pytest.skip(f"jaxwarp._src.arithmetic.datapath is not importable yet ({e})")
    if not hasattr(mod, "mma") or not hasattr(mod, "bmma"):
        pytest.skip("jaxwarp._src.arithmetic.datapath has no mma/bmma yet")
    return mod


CAPTURE_CONFIGS = [
    ("mma_fp", "f16.f32f32.m16n16k16.rc"),
    ("mma_fp", "f16.f16f16.m16n16k16.cr"),
    ("mma_fp", "f16.f32f16.m8n32k16.rc"),
    ("mma_fp", "bf16.f32f32.m16n16k16.cc"),
    ("mma_fp", "tf32.f32f32.m16n16k8.rr"),
    ("mma_fp", "f64.f64f64.m8n8k4.rc"),
    ("mma_int", "s8.s32s32.m8n32k16.rc"),
    ("mma_int", "u8sat.s32s32.m16n16k16.rc"),
    ("mma_int", "s4.s32s32.m8n8k32.rc"),
    ("mma_int", "b1xor.s32s32.m8n8k128.rc"),
]


@pytest.mark.parametrize("capture,cfg", CAPTURE_CONFIGS, ids=[c for _, c in CAPTURE_CONFIGS])
def test_mma_sync_on_captures(capture, cfg, request):
    real_arith()
    cap = request.getfixturevalue(f"{capture}_capture")
    prefix, cd, shape_s, lay = cfg.split(".")
    t = prefix.removesuffix("sat").removeprefix("b1").replace("xor", "").replace("and", "")
    t = "b1" if prefix.startswith("b1") else t
    op = prefix[2:] if t == "b1" else None
    satf = prefix.endswith("sat")
    c_format, d_format = cd[:3], cd[3:]
    shape = tuple(int(v) for v in shape_s[1:].replace("n", " ").replace("k", " ").split())
    layouts = {"r": "row_major", "c": "col_major"}
    with jax.enable_x64(t == "f64"):
        et, ct, dt = (table.ELEMENT_TYPES[x] for x in (t, c_format, d_format))

        def values(key, et):
            v = cap[f"{cfg}/{key}"]
            return v.view(et.value_dtype) if v.dtype != et.value_dtype else v

        A, B = values("A", et), values("B", et)
        C = values("C", ct)
        a_spec = fragment("matrix_a", *shape, t, layouts[lay[0]])
        b_spec = fragment("matrix_b", *shape, t, layouts[lay[1]])
        c_spec = fragment("accumulator", *shape, c_format)
        mems = [to_memory(A[i], et, lay[0] == "c") for i in range(len(A))]
        a_mem, lda = jnp.stack([m for m, _ in mems]), mems[0][1]
        mems = [to_memory(B[i], et, lay[1] == "c") for i in range(len(B))]
        b_mem, ldb = jnp.stack([m for m, _ in mems]), mems[0][1]
        c_mem = jnp.asarray(C.reshape(len(C), -1))
        m, n, _ = shape

        @jax.jit
        @jax.vmap
        def warp(a_mem, b_mem, c_mem):
            a = wmma.load_matrix_sync(a_spec, a_mem, lda)
            b = wmma.load_matrix_sync(b_spec, b_mem, ldb)
            c = wmma.load_matrix_sync(c_spec, c_mem, n, "mem_row_major")
            if op:
                d = wmma.bmma_sync(a, b, c, op)
            else:
                d = wmma.mma_sync(a, b, c, satf=satf, d_format=d_format)
            return wmma.store_matrix_sync(jnp.zeros(m * n, dt.memory_dtype), d, n,
                                          "mem_row_major")

        out = np.asarray(warp(a_mem, b_mem, c_mem))
        want = cap[f"{cfg}/D"].reshape(len(C), -1)
        np.testing.assert_array_equal(out.view(dt.bits_dtype), want.view(dt.bits_dtype))

