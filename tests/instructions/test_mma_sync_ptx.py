"""PTX ``mma.sync.aligned`` front-end: the qualifier table, register layouts, entry points.

Layouts are checked against ``tools/capture/capture_ptx.py`` (whose ``frag_coords`` /
``pack`` produced the H100 captures correctly); results bit for bit against
``tests/data/h100_ptx_int.npz`` (54 integer/b1 configurations) and
``tests/data/h100_ptx_float.npz`` (40 float configurations), cut from the H100 capture
``ptx_mma_full*.npz`` by ``tools/capture/subset_ptx.py``.
"""

import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxwarp._src.catalogue import mma_sync_parse
from jaxwarp._src.catalogue.arch import ARCHS
from jaxwarp._src.instructions import mma_sync as mp
from jaxwarp._src.layouts import mma_sync_registers

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "tools" / "capture"))
import capture_ptx as cp  # noqa: E402

DATA = pathlib.Path(__file__).resolve().parents[1] / "data"
CANDIDATES = cp.candidate_configs()
ACCEPTED = [c for c in CANDIDATES if c.name not in cp.REJECTED]
REJECTED = [c for c in CANDIDATES if c.name in cp.REJECTED]
INT_CFGS = [c for c in ACCEPTED if c.is_int]
FLOAT_CFGS = [c for c in ACCEPTED if not c.is_int]
FP8 = ("e4m3", "e5m2")

_VIEW = {"f16": jnp.float16, "bf16": jnp.bfloat16, "tf32": np.float32, "f32": np.float32,
         "f64": np.float64, "e4m3": jnp.float8_e4m3fn, "e5m2": jnp.float8_e5m2}


def ids(cfgs):
    return [c.name for c in cfgs]


def logical(x, ty):
    """Capture arrays (raw bits for floats) -> the logical dtype of mma_sync_ptx_logical."""
    return np.asarray(x).view(_VIEW[ty]) if ty in _VIEW else np.asarray(x)


def bits(x):
    x = np.asarray(x)
    return x.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[x.dtype.itemsize])


def random_logical(rng, cfg, use, batch):
    """Random finite logical operand in the capture's convention, (batch, rows, cols)."""
    ty = cfg.elem_type(use)
    shape = (batch,) + cfg.dims(use)
    if ty in cp.INT_RANGE:
        lo, hi = cp.INT_RANGE[ty]
        return rng.integers(lo, hi + 1, shape).astype(cp.FMTS[ty].dtype)
    if ty == "s32":
        return rng.integers(-(2**31), 2**31, shape, dtype=np.int64).astype(np.int32)
    return cp.encode(rng.standard_normal(shape) * 4, ty).astype(cp.FMTS[ty].dtype)


def warp_shape(cfg, x):
    """(T, rows, cols) -> (T / per_warp, [4,] rows, cols) as mma_sync_ptx's registers
    expect."""
    if cfg.quadpair:
        return x.reshape((-1, 4) + x.shape[1:])
    return x


@pytest.fixture(scope="module")
def int_capture():
    return np.load(DATA / "h100_ptx_int.npz")


@pytest.fixture(scope="module")
def float_capture():
    return np.load(DATA / "h100_ptx_float.npz")


# --------------------------------------------------------------------------------------
# The qualifier table.


def test_accepts_exactly_the_94():
    assert len(ACCEPTED) == 94 and len(REJECTED) == 24
    # The sm_90a configurations of the captures; the 50 kind::f8f6f4 ones are sm_120a's.
    sm90 = [q for q in mma_sync_parse.mma_instructions() if ".kind::" not in q]
    assert set(sm90) == {c.ptx()[len(mma_sync_parse.PREFIX):] for c in ACCEPTED}
    assert len(sm90) == 94 == len(set(sm90)) == len(mma_sync_parse.mma_instructions()) - 50
    for c in ACCEPTED:
        i = mma_sync_parse.parse_mma(c.ptx())
        assert i == mma_sync_parse.parse_mma(c.ptx()[len(mma_sync_parse.PREFIX):])
        assert i.ptx == c.ptx() and hash(i) == hash(mma_sync_parse.parse_mma(i.qualifier))
        assert (i.a_format, i.b_format, i.c_format, i.d_format) == (c.atype, c.btype, c.ctype,
                                                                    c.dtype)
        assert (i.m, i.n, i.k, i.a_layout, i.b_layout) == (c.m, c.n, c.k, c.alayout, c.blayout)
        assert i.satfinite == (c.variant == "satfinite")
        assert i.b1_op == (c.variant if c.variant in ("xor", "and") else None)
        for use in "abcd":
            assert i.nregs(use) == c.nregs(use)


@pytest.mark.parametrize("cfg", REJECTED, ids=ids(REJECTED))
def test_rejects_what_ptxas_rejects(cfg):
    with pytest.raises(ValueError, match="ptxas"):
        mma_sync_parse.parse_mma(cfg.ptx())


@pytest.mark.parametrize("qual, match", [
    ("m16n8k32.row.col.f32.f16.f16.f32",
     "shape m16n8k32 with a type f16 is not allowed; f16 allows m8n8k4, m16n8k8, m16n8k16"),
    ("m16n8k16.row.row.f32.f16.f16.f32", "layouts .row.row are not allowed"),
    ("m16n8k16.row.col.satfinite.f32.f16.f16.f32", "satfinite is only allowed"),
    ("m16n8k16.row.col.f32.bf16.f16.f32", "b type f16 is not allowed with a type bf16"),
    ("m16n8k16.row.col.f16.bf16.bf16.f16", "c type f16 with d type f16 is not allowed"),
    ("m16n8k16.row.col.f32.f17.f16.f32", "a type 'f17' is not a type"),
    ("m16n8k16.row.cols.f32.f16.f16.f32", "b layout 'cols' is not allowed"),
    ("m16n8x16.row.col.f32.f16.f16.f32", "is not a shape"),
    ("m16n8k256.row.col.s32.b1.b1.s32", "b1 needs the suffix"),
    ("m16n8k32.row.col.s32.s8.s8.s32.xor.popc", "only allowed with b1"),
    ("m16n8k256.row.col.s32.b1.b1.s32.or.popc", "unexpected trailing parts"),
    ("m16n8k16.row.col.f32.f16.f16", "too few parts"),
    ("mma.sync.m16n8k16.row.col.f32.f16.f16.f32", "opcode must be"),
    ("m16n8k16.row.col.s32.s32.s32.s32", "not an mma operand type"),
    ("m8n8k16.row.col.s32.s4.s4.s32", "s4 allows m8n8k32, m16n8k32, m16n8k64"),
    ("m16n8k8.row.col.f32.f64.f64.f64", "c type f64 with d type f32"),
])
def test_parser_errors_name_the_part(qual, match):
    with pytest.raises(ValueError, match=match):
        mma_sync_parse.parse_mma(qual)


def test_parser_type_errors():
    with pytest.raises(TypeError, match="qualifier must be a str"):
        mma_sync_parse.parse_mma(3)
    bad = mma_sync_parse.MmaInstruction(16, 8, 32, "row", "col", "f16", "f16", "f32", "f32")
    with pytest.raises(ValueError, match="not an allowed"):
        mma_sync_parse.parse_mma(bad)


# --------------------------------------------------------------------------------------
# Register layouts.


@pytest.mark.parametrize("cfg", ACCEPTED, ids=ids(ACCEPTED))
def test_layout_matches_capture_harness(cfg):
    instr = mma_sync_parse.parse_mma(cfg.ptx())
    for use in "abcd":
        ours = mma_sync_registers.fragment_coords(instr, use)
        theirs = cp.frag_coords(cfg, use)
        for x, y in zip(ours, theirs, strict=True):
            np.testing.assert_array_equal(x, np.broadcast_to(y, x.shape))


def _pack_classes():
    """One configuration per distinct (use, element type, dims, m8n8k4 layout): what the
    register packing depends on (72 classes over the 94 x 4 operands)."""
    reps = {}
    for c in ACCEPTED:
        for u in "abcd":
            lay = {"a": c.alayout, "b": c.blayout}.get(u, "") if c.quadpair else ""
            reps.setdefault((u, c.elem_type(u), c.dims(u), c.quadpair, lay), c)
    out = {}
    for (u, *_), c in reps.items():
        out.setdefault(c, []).append(u)
    return [pytest.param(c, tuple(us), id=f"{c.name}-{''.join(us)}") for c, us in out.items()]


PACK_CLASSES = _pack_classes()


@pytest.mark.parametrize("cfg, uses", PACK_CLASSES)
def test_pack_matches_harness_and_round_trips(cfg, uses):
    rng = np.random.default_rng(7)
    instr = mma_sync_parse.parse_mma(cfg.ptx())
    with jax.enable_x64(cfg.atype == "f64"):
        xs = {u: random_logical(rng, cfg, u, 2 * cfg.per_warp) for u in uses}
        lxs = {u: warp_shape(cfg, logical(x, cfg.elem_type(u))) for u, x in xs.items()}

        @jax.jit
        def round_trip(lxs):
            regs = {u: mma_sync_registers.to_registers(instr, u, x) for u, x in lxs.items()}
            return regs, {u: mma_sync_registers.from_registers(instr, u, r)
                          for u, r in regs.items()}

        regs, back = round_trip(lxs)
        for use in uses:
            words = cp.pack(xs[use], cfg, use)  # (W, 32, nregs)
            assert regs[use].dtype == instr.reg_dtype() and regs[use].shape == words.shape
            np.testing.assert_array_equal(np.asarray(regs[use]), words)
            assert back[use].dtype == mma_sync_parse.LOGICAL_DTYPE[cfg.elem_type(use)]
            np.testing.assert_array_equal(bits(back[use]), bits(lxs[use]))


# --------------------------------------------------------------------------------------
# Hardware, bit for bit.


# Float configurations whose register entry is also run on the hardware data (one per
# operand type and register shape; the others' register entry is the same code path).
REG_FLOAT = {"f16.f16.f16f32.m8n8k4.cr", "f16.f16.f16f16.m16n8k8", "bf16.bf16.f32f32.m16n8k16",
             "tf32.tf32.f32f32.m16n8k8", "f64.f64.f64f64.m16n8k8", "e4m3.e5m2.f32f32.m16n8k32",
             "e5m2.e4m3.f16f16.m16n8k16"}

# Integer configurations whose register entry is also run on the hardware data.
REG_INT = {"s8.u8.s32s32.m8n8k16.satfinite", "u8.s8.s32s32.m16n8k32", "s4.u4.s32s32.m8n8k32",
           "u4.u4.s32s32.m16n8k64.satfinite", "b1.b1.s32s32.m8n8k128.xor",
           "b1.b1.s32s32.m16n8k256.and"}


def _check_capture(z, cfg, registers):
    instr = mma_sync_parse.parse_mma(cfg.ptx())
    p = f"ptx/{cfg.name}/"
    A, B, C, D = (z[p + k] for k in "ABCD")
    a, b, c = (logical(x, t) for x, t in ((A, cfg.atype), (B, cfg.btype), (C, cfg.ctype)))
    with jax.enable_x64(cfg.atype == "f64"):
        d = mp.mma_sync_ptx_logical(instr, a, b, c)
        np.testing.assert_array_equal(bits(d), bits(logical(D, cfg.dtype)),
                                      err_msg=f"{cfg.name} logical entry")
        if registers:  # the register entry on the same data, in warps
            regs = [mma_sync_registers.to_registers(instr, u, warp_shape(cfg, x))
                    for u, x in zip("abc", (a, b, c), strict=True)]
            dr = mp.mma_sync_ptx(instr, *regs)
            np.testing.assert_array_equal(np.asarray(dr), cp.pack(D, cfg, "d"),
                                          err_msg=f"{cfg.name} register entry")
    return D.size


@pytest.mark.parametrize("cfg", INT_CFGS, ids=ids(INT_CFGS))
def test_integer_and_b1_bit_exact_h100(int_capture, cfg):
    assert _check_capture(int_capture, cfg, registers=cfg.name in REG_INT) > 0


# With -m slow only: the f64 chains longer than k4 and the fp8 k16 shapes (the same
# arithmetic as f64 m8n8k4 / m16n8k4 and the fp8 k32 shapes, which run by default).
_SLOW_FLOAT = {"f64.f64.f64f64.m16n8k8", "f64.f64.f64f64.m16n8k16"}


def _float_param(cfg):
    slow = cfg.name in _SLOW_FLOAT or (cfg.name.startswith(("e4m3", "e5m2"))
                                       and cfg.name.endswith(".m16n8k16"))
    return pytest.param(cfg, id=cfg.name, marks=[pytest.mark.slow] if slow else [])


# Configurations whose subset in h100_ptx_float.npz holds a trial of that NaN case.


@pytest.mark.parametrize("cfg", [_float_param(c) for c in FLOAT_CFGS])
def test_float_bit_exact_h100(float_capture, cfg):
    assert _check_capture(float_capture, cfg, registers=cfg.name in REG_FLOAT) > 0


def test_capture_subsets_cover_every_configuration(int_capture, float_capture):
    names = {k.split("/")[1] for z in (int_capture, float_capture) for k in z.files
             if k.startswith("ptx/")}
    assert names == {c.name for c in ACCEPTED}
    assert "H100" in str(int_capture["device"])


# --------------------------------------------------------------------------------------
# Register entry == logical entry, batching, jit.


EQ_CFGS = [c for c in ACCEPTED if c.name in (
    "f16.f16.f16f32.m8n8k4.cc", "f16.f16.f32f32.m8n8k4", "bf16.bf16.f32f32.m16n8k8",
    "tf32.tf32.f32f32.m16n8k4", "f64.f64.f64f64.m8n8k4", "e4m3.e4m3.f16f16.m16n8k32",
    "u4.s4.s32s32.m16n8k64.satfinite", "b1.b1.s32s32.m8n8k128.and")]


@pytest.mark.parametrize("cfg", EQ_CFGS, ids=ids(EQ_CFGS))
def test_register_entry_equals_logical_entry(cfg):
    rng = np.random.default_rng(3)
    instr = mma_sync_parse.parse_mma(cfg.ptx())
    with jax.enable_x64(cfg.atype == "f64"):
        # Three warps' worth, with a batch axis of 3 on A only (B and C broadcast).
        xs = [warp_shape(cfg, logical(random_logical(rng, cfg, u, n * cfg.per_warp),
                                      cfg.elem_type(u)))
              for u, n in zip("abc", (3, 1, 1), strict=True)]
        d = mp.mma_sync_ptx_logical(instr, *xs)
        regs = [mma_sync_registers.to_registers(instr, u, x)
                for u, x in zip("abc", xs, strict=True)]
        regs[1], regs[2] = regs[1][0], regs[2][0]
        dr = mp.mma_sync_ptx(instr, *regs)
        assert dr.shape == (3, 32, instr.nregs("d"))
        np.testing.assert_array_equal(np.asarray(dr),
                                      np.asarray(mma_sync_registers.to_registers(instr, "d", d)))


def test_batching_vmap_and_jit():
    q = "m16n8k32.row.col.satfinite.s32.u8.s8.s32"
    instr = mma_sync_parse.parse_mma(q)
    rng = np.random.default_rng(0)
    a = jnp.asarray(rng.integers(0, 256, (3, 5, 32, 4)).astype(np.uint32) * 0x01010101)
    b = jnp.asarray(rng.integers(0, 2**32, (5, 32, 2), dtype=np.uint64).astype(np.uint32))
    c = jnp.asarray(rng.integers(0, 2**32, (32, 4), dtype=np.uint64).astype(np.uint32))
    d = mp.mma_sync_ptx(q, a, b, c)  # batch axes broadcast: (3, 5) x (5,) x ()
    assert d.shape == (3, 5, 32, 4)
    f = jax.jit(jax.vmap(jax.vmap(lambda x, y: mp.mma_sync_ptx(instr, x, y, c)),
                         in_axes=(0, None)))
    np.testing.assert_array_equal(np.asarray(f(a, b)), np.asarray(d))
    one = mp.mma_sync_ptx(q, a[1, 2], b[2], c)
    np.testing.assert_array_equal(np.asarray(one), np.asarray(d[1, 2]))


def test_quadpair_runs_four_independent_mmas():
    q = "m8n8k4.col.row.f32.f16.f16.f16"
    instr = mma_sync_parse.parse_mma(q)
    assert instr.quadpair and instr.logical_shape("a") == (4, 8, 4)
    a = jnp.arange(4 * 32, dtype=jnp.float16).reshape(4, 8, 4) / 64
    b = jnp.ones((4, 4, 8), jnp.float16)
    c = jnp.zeros((4, 8, 8), jnp.float16)
    d = mma_sync_registers.from_registers(instr, "d", mp.mma_sync_ptx(
        q, *(mma_sync_registers.to_registers(instr, u, x)
             for u, x in zip("abc", (a, b, c), strict=True))))
    assert d.shape == (4, 8, 8) and d.dtype == jnp.float32
    np.testing.assert_array_equal(np.asarray(d), np.asarray(
        jnp.broadcast_to(a.astype(jnp.float32).sum(-1)[..., None], (4, 8, 8))))


# --------------------------------------------------------------------------------------
# Bad input, eagerly and under jit.

Q = "m16n8k16.row.col.f32.f16.f16.f32"
GOOD = (jnp.zeros((32, 4), jnp.uint32), jnp.zeros((32, 2), jnp.uint32),
        jnp.zeros((32, 4), jnp.uint32))


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("which, bad, match", [
    (0, jnp.zeros((32, 3), jnp.uint32), r"a_regs .* must be a \(\.\.\., 32, 4\) uint32"),
    (1, jnp.zeros((16, 2), jnp.uint32), r"b_regs .* must be a \(\.\.\., 32, 2\) uint32"),
    (2, jnp.zeros((32, 4), jnp.float32), r"c_regs .*got shape \(32, 4\) dtype float32"),
    (2, jnp.zeros((32, 4), jnp.int32), "dtype int32"),
])
def test_register_entry_bad_input(jit, which, bad, match):
    args = list(GOOD)
    args[which] = bad
    f = jax.jit(lambda *x: mp.mma_sync_ptx(Q, *x)) if jit else (lambda *x: mp.mma_sync_ptx(Q, *x))
    with pytest.raises(TypeError, match=match):
        f(*args)


@pytest.mark.parametrize("jit", [False, True])
def test_logical_entry_bad_input(jit):
    a = jnp.zeros((16, 16), jnp.float16)
    b = jnp.zeros((16, 8), jnp.float16)
    c = jnp.zeros((16, 8), jnp.float32)
    wrap = jax.jit if jit else (lambda f: f)
    with pytest.raises(TypeError, match="b of .* must have dtype float16"):
        wrap(lambda a, b, c: mp.mma_sync_ptx_logical(Q, a, b, c))(a, b.astype(jnp.bfloat16), c)
    with pytest.raises(ValueError, match=r"c of .* must have shape \(\.\.\., 16, 8\)"):
        wrap(lambda a, b, c: mp.mma_sync_ptx_logical(Q, a, b, c))(a, b, c[:8])
    with pytest.raises(ValueError, match="do not broadcast"):
        wrap(lambda a, b, c: mp.mma_sync_ptx_logical(Q, a, b, c))(jnp.stack([a] * 2),
                                                                  jnp.stack([b] * 3), c)


@pytest.mark.parametrize("qual, arch, match", [
    ("m16n8k32.row.col.f32.e4m3.e4m3.f32", "sm_80", "needs sm_89 or newer"),
    ("m16n8k16.row.col.f32.bf16.bf16.f32", "sm_70", "needs sm_80 or newer"),
    ("m16n8k8.row.col.f64.f64.f64.f64", "sm_80", "needs sm_90 or newer"),
    ("m8n8k128.row.col.s32.b1.b1.s32.and.popc", "sm_70", "needs sm_80 or newer"),
    ("m16n8k16.row.col.f32.f16.f16.f32", "sm_60", "arch='sm_60' is not supported"),
])
def test_arch_without_the_instruction(qual, arch, match):
    instr = mma_sync_parse.parse_mma(qual)
    with jax.enable_x64(instr.a_format == "f64"):
        regs = [jnp.zeros((32, instr.nregs(u)), instr.reg_dtype()) for u in "abc"]
        with pytest.raises(ValueError, match=match):
            mp.mma_sync_ptx(qual, *regs, arch=arch)
        with pytest.raises(ValueError, match=match):
            jax.jit(lambda *r: mp.mma_sync_ptx(qual, *r, arch=arch))(*regs)


def test_f64_needs_x64():
    with jax.enable_x64(False):
        with pytest.raises(RuntimeError, match="jax_enable_x64"):
            mp.mma_sync_ptx_logical("m8n8k4.row.col.f64.f64.f64.f64", np.zeros((8, 4)),
                                    np.zeros((4, 8)),
                       np.zeros((8, 8)))


def test_arch_params_accepted():
    a = jnp.ones((16, 16), jnp.float16)
    b = jnp.ones((16, 8), jnp.float16)
    c = jnp.zeros((16, 8), jnp.float16)
    d = mp.mma_sync_ptx_logical(Q.replace("f32", "f16"), a, b, c, arch=ARCHS["sm_90"])
    assert d.dtype == jnp.float16 and float(d[0, 0]) == 16.0
