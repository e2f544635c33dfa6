"""Tests of the ``wgmma.mma_async`` front-end (jaxwarp/_src/instructions/wgmma.py).

Hardware data: tests/data/h100_wgmma.npz, a subset of the H100 capture
``wgmma_full.npz`` (tools/capture/FORMAT_WGMMA.md; CUDA 13.0, sm_90a): every type family
(f16->f32/f16, bf16, tf32, e4m3/e5m2, s8/u8 with and without .satfinite, b1) and every
data-movement variant (32/64/128-byte swizzles, M/N-major A and B, A from registers,
scale-d = 0, imm-scale-a/b = -1), 1-2 trials each (the most varied kinds: special /
random_bits, int / int_extreme, normal / probe), plus the bit-plane layout probes of 8
plain configurations. Shared-memory images are rebuilt with the capture harness's own
packing (tools/capture/capture_wgmma.py), whose descriptors must equal the captured ones.
"""

from __future__ import annotations

import importlib.util
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxwarp._src.catalogue import wgmma_parse
from jaxwarp._src.instructions import wgmma as W
from jaxwarp._src.layouts import wgmma_registers

ROOT = pathlib.Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location(
    "capture_wgmma_for_tests", ROOT / "tools" / "capture" / "capture_wgmma.py")
cw = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cw)

CAP = np.load(ROOT / "tests" / "data" / "h100_wgmma.npz")
CONFIGS = sorted({k.rsplit("/", 1)[0] for k in CAP.files if k != "device"})
LAYOUT_CONFIGS = [c for c in CONFIGS if f"{c}/layout_D" in CAP.files]


def parse_name(name: str):
    """Capture name -> (qualifier, variant flags, a_format, b_format, c_format)."""
    parts = name.split("/", 1)[1].split(".")
    at, bt, cd, shape = parts[:4]
    ct = cd[:3]
    rest = parts[4:]
    q = f"{shape}.{ct}.{at}.{bt}" + (".satfinite" if "satfinite" in rest else "")
    q += ".and.popc" if at == "b1" else ""
    sw = next((int(r[2:]) for r in rest if r.startswith("sw")), 0)
    flags = dict(areg="areg" in rest, ta=int("ta" in rest), tb=int("tb" in rest),
                 sa=-1 if "negA" in rest else 1, sb=-1 if "negB" in rest else 1,
                 sd=0 if "scaled0" in rest else 1, sw=sw)
    return q, flags, at, bt, ct


def c_matrix(C, ct):
    return C.view(np.float32) if ct == "f32" else C.view(np.float16) if ct == "f16" else C


def harness_image(name):
    """The shared-memory images the capture kernel used (harness packing), checked
    against the captured descriptors."""
    q, f, at, bt, _ = parse_name(name)
    swz = cw.SWZ[f"sw{f['sw']}" if f["sw"] else ""]
    la = None if f["areg"] else ("MN" if f["ta"] else "K", swz)
    lb = ("MN" if f["tb"] else "K", swz)
    img, da, db = cw.build_images(CAP[f"{name}/A"], CAP[f"{name}/B"], at, bt, la, lb)
    assert da == int(CAP[f"{name}/desc_a"]) and db == int(CAP[f"{name}/desc_b"])
    return img


# --------------------------------------------------------------------------------------
# Qualifier parser.


@pytest.mark.parametrize("q,want", [
    ("m64n128k16.f32.f16.f16", ("f32", "f16", "f16", 128, 16, False, None)),
    ("m64n8k16.f16.f16.f16", ("f16", "f16", "f16", 8, 16, False, None)),
    ("m64n256k16.f32.bf16.bf16", ("f32", "bf16", "bf16", 256, 16, False, None)),
    ("m64n24k8.f32.tf32.tf32", ("f32", "tf32", "tf32", 24, 8, False, None)),
    ("m64n64k32.f32.e4m3.e5m2", ("f32", "e4m3", "e5m2", 64, 32, False, None)),
    ("m64n200k32.f16.e5m2.e5m2", ("f16", "e5m2", "e5m2", 200, 32, False, None)),
    ("m64n8k32.s32.s8.u8.satfinite", ("s32", "s8", "u8", 8, 32, True, None)),
    ("m64n48k32.satfinite.s32.u8.u8", ("s32", "u8", "u8", 48, 32, True, None)),
    ("m64n256k256.s32.b1.b1.and.popc", ("s32", "b1", "b1", 256, 256, False, "and")),
    ("wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16",
     ("f32", "f16", "f16", 16, 16, False, None)),
], ids=lambda x: x if isinstance(x, str) else "")
def test_parse_valid(q, want):
    i = wgmma_parse.parse_wgmma(q)
    assert (i.d_format, i.a_format, i.b_format, i.n, i.k, i.satfinite, i.bop) == want
    assert wgmma_parse.parse_wgmma(i.qualifier) == i
    assert i.m == 64 and hash(i) == hash(wgmma_parse.parse_wgmma(q))


@pytest.mark.parametrize("q,msg", [
    ("m64n8k16.f32.f16", "expected shape.dtype.atype.btype"),
    ("m64xn8k16.f32.f16.f16", "not of the form m64nNkK"),
    ("m32n8k16.f32.f16.f16", "M must be 64"),
    ("m64n8k32.f32.f16.f16", "K must be 16"),
    ("m64n12k16.f32.f16.f16", "N=12 is not allowed.*256"),
    ("m64n40k32.s32.s8.s8", r"N=40 is not allowed.*\(8, 16, 24, 32, 48"),
    ("m64n8k16.f32.f8.f8", "atype 'f8' is not supported"),
    ("m64n8k16.f32.f16.bf16", "btype 'bf16' cannot go with atype 'f16'.*allowed btype"),
    ("m64n8k32.f32.e4m3.s8", "btype 's8'.*\\('e4m3', 'e5m2'\\)"),
    ("m64n8k16.f16.bf16.bf16", "dtype 'f16' is not allowed.*\\('f32',\\)"),
    ("m64n8k8.f16.tf32.tf32", "dtype 'f16' is not allowed"),
    ("m64n8k32.f32.s8.s8", "dtype 'f32' is not allowed.*s32"),
    ("m64n8k16.f32.f16.f16.satfinite", ".satfinite exists only for the integer"),
    ("m64n8k256.s32.b1.b1", "needs the bit operation '.and.popc'"),
    ("m64n8k256.s32.b1.b1.xor.popc", "needs the bit operation '.and.popc'"),
    ("m64n8k32.s32.s8.s8.and.popc", "exists only for b1"),
    ("", "empty"),
])
def test_parse_errors(q, msg):
    with pytest.raises(ValueError, match=msg):
        wgmma_parse.parse_wgmma(q)


def test_parse_type_error():
    with pytest.raises(TypeError, match="qualifier must be a str"):
        wgmma_parse.parse_wgmma(64)


def test_every_n_of_the_table_parses():
    for fam in wgmma_parse.FAMILIES.values():
        for t in fam.a_formats:
            q0 = f"{fam.d_formats[0]}.{t}.{t}" + (f".{fam.bop}.popc" if fam.bop else "")
            for n in fam.n_values:
                instr = wgmma_parse.parse_wgmma(f"m64n{n}k{fam.k}.{q0}")
                assert instr.num_d_registers in (n // 2, n // 4)
    assert len(wgmma_parse.FAMILIES["f16"].n_values) == 32
    assert len(wgmma_parse.FAMILIES["int"].n_values) == 18


# --------------------------------------------------------------------------------------
# Descriptors.


def test_descriptor_fields_and_harness_encoding():
    rng = np.random.default_rng(0)
    for _ in range(200):
        start, lbo, sbo = (int(x) * 16 for x in rng.integers(0, 1 << 14, 3))
        sw = int(rng.choice([0, 32, 64, 128]))
        bo = int(rng.integers(0, 8))
        d = W.make_descriptor(start, lbo, sbo, sw, bo)
        assert isinstance(d, np.uint64)
        assert int(d) == cw.encode_desc(start, lbo, sbo, cw.SWZ[f"sw{sw}" if sw else ""], bo)
        assert W.decode_descriptor(d) == (start, lbo, sbo, bo, sw)
    assert int(W.make_descriptor(0, 128, 256)) == 0x0000001000080000
    assert int(W.make_descriptor(2048, 128, 256)) == 0x0000001000080080
    assert int(W.make_descriptor(0, 16, 1024, 128)) == 0x4000004000010000


def test_decode_ignores_unused_bits_and_takes_int64():
    d = int(W.make_descriptor(0x3FFF0, 0x100, 0x400, 64, 5))
    noise = (0b11 << 14) | (0b11 << 30) | (0b111 << 46) | (0x3FF << 52)
    assert W.decode_descriptor(d | noise) == W.decode_descriptor(d)
    assert W.decode_descriptor(np.int64(np.uint64(d | 1 << 62).view(np.int64))).swizzle == 32
    assert W.decode_descriptor(np.asarray(np.uint64(d))).start_address == 0x3FFF0


@pytest.mark.parametrize("args,exc,msg", [
    ((8, 16, 16), ValueError, "start_address=8 must be a multiple of 16"),
    ((0, 24, 16), ValueError, "leading_byte_offset=24 must be a multiple of 16"),
    ((0, 16, 1 << 18), ValueError, "stride_byte_offset=262144 does not fit"),
    ((-16, 16, 16), ValueError, "start_address=-16 must be >= 0"),
    ((0, 16, 16, 3), ValueError, r"swizzle=3 is not supported; allowed: \(0, 32, 64, 128\)"),
    ((0, 16, 16, 0, 8), ValueError, "base_offset=8 is not supported"),
    ((0.0, 16, 16), TypeError, "start_address must be a Python int"),
])
def test_make_descriptor_errors(args, exc, msg):
    with pytest.raises(exc, match=msg):
        W.make_descriptor(*args)


def test_descriptor_static_only():
    with pytest.raises(TypeError, match="static"):
        jax.jit(lambda d: W.decode_descriptor(d))(jnp.uint32(5))
    with pytest.raises(jax.errors.ConcretizationTypeError, match="start_address"):
        jax.jit(lambda s: W.make_descriptor(s, 16, 16))(16)
    with pytest.raises(ValueError, match="64 bits"):
        W.decode_descriptor(1 << 64)
    with pytest.raises(TypeError, match="descriptor must be"):
        W.decode_descriptor(1.0)


# --------------------------------------------------------------------------------------
# Shared-memory layouts vs the capture harness's packing.

LAYOUTS = [("K", 0), ("K", 32), ("K", 64), ("K", 128),
           ("MN", 0), ("MN", 32), ("MN", 64), ("MN", 128)]


def _layout_cases(types):
    """(type, major, swizzle) with M/N-major only for the 16-bit types."""
    return [pytest.param(t, m, s, id=f"{t}-{m}-sw{s}") for t in types for m, s in LAYOUTS
            if m == "K" or cw.ATYPES[t][0] == 16]


@pytest.mark.parametrize("t,major,sw", _layout_cases(["f16", "tf32", "e4m3", "s8", "b1"]))
@pytest.mark.parametrize("mn", [8, 64, 24])
def test_addresses_match_harness(t, major, sw, mn):
    bits = cw.ATYPES[t][0]
    k = cw.ATYPES[t][2]
    mode = cw.SWZ[f"sw{sw}" if sw else ""]
    lbo, sbo, _ = cw.operand_layout(mn, k * bits // 8, major, mode, cw.elem_bytes_of(t))
    start = 1024 * 3 + (0 if sw else 16 * 5)
    desc = W.make_descriptor(start, lbo, sbo, sw)
    addr, bit = W.operand_addresses(desc, mn, k, bits, transpose=int(major == "MN"))
    off, hbit = cw.element_offsets(mn, k, bits, major, mode, lbo, sbo)
    np.testing.assert_array_equal(addr[..., 0], cw.swizzle_addr(start + off, mode))
    np.testing.assert_array_equal(bit[..., 0], hbit)
    bits = {int(a) * 8 + int(b) for a, b in zip(addr.ravel(), bit.ravel(), strict=True)}
    assert len(bits) == addr.size


@pytest.mark.parametrize("t,major,sw", _layout_cases(["f16", "e5m2", "b1"]))
def test_read_write_vs_harness_images(t, major, sw):
    bits = cw.ATYPES[t][0]
    k, dt = cw.ATYPES[t][2], cw.ATYPES[t][1]
    q = wgmma_parse.parse_wgmma({"f16": "m64n16k16.f32.f16.f16", "tf32": "m64n16k8.f32.tf32.tf32",
                       "e5m2": "m64n16k32.f32.e5m2.e5m2", "u8": "m64n16k32.s32.u8.u8",
                       "b1": "m64n16k256.s32.b1.b1.and.popc"}[t])
    rng = np.random.default_rng(1)
    hi = 2 if t == "b1" else 1 << min(bits, 16)
    A = rng.integers(0, hi, (1, 64, k)).astype(dt)
    B = rng.integers(0, hi, (1, k, 16)).astype(dt)
    mode = cw.SWZ[f"sw{sw}" if sw else ""]
    img, da, db = cw.build_images(A, B, t, t, (major, mode), (major, mode))
    tr = int(major == "MN")
    smem = jnp.asarray(img[0])
    np.testing.assert_array_equal(W.read_operand(smem, da, q, "a", transpose=tr), A[0])
    np.testing.assert_array_equal(W.read_operand(smem, db, q, "b", transpose=tr), B[0])
    mine = jnp.full(img.shape[1], cw.FILL, jnp.uint8)
    mine = W.write_operand(mine, da, q, "a", A[0], transpose=tr)
    mine = W.write_operand(mine, db, q, "b", B[0], transpose=tr)
    np.testing.assert_array_equal(mine, img[0])


def test_descriptor_mistakes_read_what_they_point_to():
    q = "m64n8k16.f32.f16.f16"
    smem = jnp.arange(8192, dtype=jnp.uint32).astype(jnp.uint8)
    right = W.make_descriptor(0, 128, 256)
    wrong_sbo = W.make_descriptor(0, 128, 512)  # every second 8-row group is skipped
    a_right = W.read_operand(smem, right, q, "a")
    a_wrong = W.read_operand(smem, wrong_sbo, q, "a")
    np.testing.assert_array_equal(a_wrong[8:16], a_right[16:24])
    # A 128B-swizzle descriptor over a non-swizzled image permutes the 16-byte chunks.
    sw = W.make_descriptor(0, 16, 1024, 128)
    addr, _ = W.operand_addresses(sw, 64, 16, 16)
    np.testing.assert_array_equal(addr[1, 0], [128 + 16, 128 + 17])
    # A start address off the 1024-byte boundary shifts the XOR pattern with it.
    off = W.make_descriptor(128, 16, 1024, 128)
    addr2, _ = W.operand_addresses(off, 64, 16, 16)
    np.testing.assert_array_equal(addr2[0, 0], [128 + 16, 128 + 17])


def test_read_errors():
    q = "m64n8k16.f32.f16.f16"
    smem = jnp.zeros(2048, jnp.uint8)
    with pytest.raises(ValueError, match=r"reads shared-memory byte 2063, beyond smem of 2048"):
        W.read_operand(smem, W.make_descriptor(16, 128, 256), q, "a")
    with pytest.raises(ValueError, match="exists for f16 and bf16 only"):
        W.read_operand(smem, W.make_descriptor(0, 128, 256), "m64n8k32.f32.e4m3.e4m3", "a",
                       transpose=1)
    with pytest.raises(NotImplementedError, match="base_offset=1"):
        W.read_operand(smem, W.make_descriptor(0, 16, 1024, 128, 1), q, "a")
    with pytest.raises(TypeError, match="uint8 byte array"):
        W.read_operand(jnp.zeros(2048, jnp.uint16), W.make_descriptor(0, 128, 256), q, "a")
    with pytest.raises(ValueError, match="operand='c' is not supported"):
        W.read_operand(smem, W.make_descriptor(0, 128, 256), q, "c")


# --------------------------------------------------------------------------------------
# Register fragments.


@pytest.mark.parametrize("name", LAYOUT_CONFIGS, ids=lambda n: n.split("/", 1)[1])
def test_d_layout_matches_hardware_probe(name):
    """The bit-plane probe measures which (row, col) each register holds on the GPU."""
    q, _, _, _, ct = parse_name(name)
    L = CAP[f"{name}/layout_D"]
    row, col = wgmma_registers.d_layout(q)
    nz = np.stack([(L & 0xFFFF) != 0, (L >> 16) != 0], -1) if ct == "f16" else (L != 0)[..., None]
    r = sum(nz[p].astype(int) << p for p in range(6))
    c = sum(nz[p].astype(int) << (p - 6) for p in range(6, L.shape[0]))
    np.testing.assert_array_equal(r, row)
    np.testing.assert_array_equal(c, col)


@pytest.mark.parametrize("q", ["m64n24k16.f32.f16.f16", "m64n16k16.f16.f16.f16",
                               "m64n48k32.s32.s8.s8"])
def test_accumulator_round_trip_and_harness(q):
    i = wgmma_parse.parse_wgmma(q)
    rng = np.random.default_rng(2)
    bits = rng.integers(0, 1 << 16, (2, 64, i.n))
    ct = i.d_format
    C = {"f32": bits.astype(np.uint32) * 65537, "f16": bits.astype(np.uint16),
         "s32": (bits * 40503).astype(np.int32)}[ct]
    regs = wgmma_registers.accumulator_registers(jnp.asarray(c_matrix(C, ct)), i)
    assert regs.shape == (2, 128, i.num_d_registers)
    assert regs.dtype == wgmma_parse.REGISTER_DTYPE[ct]
    np.testing.assert_array_equal(np.asarray(regs).view(np.uint32), cw.pack_c(C, ct))
    back = wgmma_registers.accumulator_matrix(regs, i)
    np.testing.assert_array_equal(np.asarray(back).view(C.dtype), C)


@pytest.mark.parametrize("q", ["m64n8k16.f32.bf16.bf16", "m64n8k8.f32.tf32.tf32",
                               "m64n8k32.f32.e4m3.e5m2", "m64n8k32.s32.s8.u8"])
def test_a_registers_match_harness(q):
    i = wgmma_parse.parse_wgmma(q)
    dt = wgmma_parse.BITS_DTYPE[i.a_format]
    A = np.random.default_rng(3).integers(0, 1 << 16, (3, 64, i.k)).astype(dt)
    regs = wgmma_registers.a_registers(jnp.asarray(A), i)
    if i.a_format != "tf32":  # the harness has no tf32 A-register map check beyond a_map
        np.testing.assert_array_equal(regs, cw.pack_a(A, i.a_format))
    np.testing.assert_array_equal(wgmma_registers.a_matrix(regs, i), A)
    row, col = wgmma_registers.a_layout(i)
    hrow, hcol = cw.a_map(i.a_format)
    np.testing.assert_array_equal(row, hrow)
    np.testing.assert_array_equal(col, hcol)


def test_register_errors():
    with pytest.raises(ValueError, match=r"\(\.\.\., 128, 4\)"):
        wgmma_registers.accumulator_matrix(jnp.zeros((128, 8), jnp.float32), "m64n8k16.f32.f16.f16")
    with pytest.raises(TypeError, match="dtype uint32"):
        wgmma_registers.accumulator_matrix(jnp.zeros((128, 2), jnp.float32), "m64n8k16.f16.f16.f16")
    with pytest.raises(ValueError, match="not supported for atype 'b1'"):
        wgmma_registers.a_layout("m64n8k256.s32.b1.b1.and.popc")
    with pytest.raises(TypeError, match="16-bit integers"):
        wgmma_registers.a_registers(jnp.zeros((64, 16), jnp.float16), "m64n8k16.f32.f16.f16")


# --------------------------------------------------------------------------------------
# Bit-exact against the H100: both entry points.


def _run_both(name):
    q, f, at, bt, ct = parse_name(name)
    A, B, C, D = (CAP[f"{name}/{x}"] for x in "ABCD")
    Cm = jnp.asarray(c_matrix(C, ct))
    d_log = W.wgmma_logical(q, A, B, Cm, scale_d=bool(f["sd"]), neg_a=f["sa"] < 0,
                            neg_b=f["sb"] < 0)
    smem = jnp.asarray(harness_image(name))
    a = wgmma_registers.a_registers(jnp.asarray(A), q) if f["areg"] else CAP[f"{name}/desc_a"]
    regs = W.wgmma(q, a, CAP[f"{name}/desc_b"], smem, wgmma_registers.accumulator_registers(Cm, q),
                   scale_d=f["sd"], imm_scale_a=f["sa"], imm_scale_b=f["sb"],
                   tnsp_a=f["ta"], tnsp_b=f["tb"])
    via_regs = np.asarray(wgmma_registers.accumulator_matrix(regs, q)).view(D.dtype)
    return D, np.asarray(d_log).view(D.dtype), via_regs


@pytest.mark.parametrize("name", CONFIGS, ids=lambda n: n.split("/", 1)[1])
def test_h100_bit_exact(name):
    D, via_logical, via_descriptors = _run_both(name)
    np.testing.assert_array_equal(via_logical, D)
    np.testing.assert_array_equal(via_descriptors, D)


def test_capture_subset_covers_every_family_and_variant():
    fams = {wgmma_parse.FAMILY_OF[parse_name(n)[2]] for n in CONFIGS}
    assert fams == set(wgmma_parse.FAMILIES)
    flags = [parse_name(n)[1] for n in CONFIGS]
    for key, val in [("areg", True), ("ta", 1), ("tb", 1), ("sa", -1), ("sb", -1), ("sd", 0)]:
        assert any(f[key] == val for f in flags), key
    assert {f["sw"] for f in flags} == {0, 32, 64, 128}


# --------------------------------------------------------------------------------------
# Modifiers, transformations, errors.


def test_modifier_errors():
    s8 = "m64n8k32.s32.s8.s8"
    smem = jnp.zeros(4096, jnp.uint8)
    da, db = W.make_descriptor(0, 128, 256), W.make_descriptor(2048, 128, 256)
    d0 = jnp.zeros((128, 4), jnp.int32)
    with pytest.raises(ValueError, match="imm-scale-a/b .* floating-point types only"):
        W.wgmma(s8, da, db, smem, d0, imm_scale_a=-1)
    with pytest.raises(ValueError, match="imm-trans-a/b .* f16 and bf16 only"):
        W.wgmma(s8, da, db, smem, d0, tnsp_b=1)
    with pytest.raises(ValueError, match=r"imm_scale_b=2 is not supported; allowed: \(1, -1\)"):
        W.wgmma(s8, da, db, smem, d0, imm_scale_b=2)
    with pytest.raises(ValueError, match="tnsp_a applies to A in shared memory only"):
        W.wgmma("m64n8k16.f32.f16.f16", jnp.zeros((128, 4), jnp.uint32), db, smem,
                jnp.zeros((128, 4), jnp.float32), tnsp_a=1)
    with pytest.raises(ValueError, match="A from registers is not supported for atype 'b1'"):
        W.wgmma("m64n8k256.s32.b1.b1.and.popc", jnp.zeros((128, 4), jnp.uint32), db, smem, d0)
    with pytest.raises(ValueError, match="arch='sm_90' is not supported"):
        W.wgmma(s8, da, db, smem, d0, arch="sm_90")
    with pytest.raises(TypeError, match="must have dtype int32"):
        W.wgmma(s8, da, db, smem, jnp.zeros((128, 4), jnp.float32))
    with pytest.raises(ValueError, match="negation.*floating-point"):
        W.wgmma_logical(s8, jnp.zeros((64, 32), jnp.int8), jnp.zeros((32, 8), jnp.int8),
                        jnp.zeros((64, 8), jnp.int32), neg_a=True)
    with pytest.raises(TypeError,
                       match=r"type 'e4m3' must have dtype in \['uint8', 'float8_e4m3fn'\]"):
        W.wgmma_logical("m64n8k32.f32.e4m3.e4m3", jnp.zeros((64, 32), jnp.int8),
                        jnp.zeros((32, 8), jnp.uint8), jnp.zeros((64, 8), jnp.float32))


def _int_setup():
    q = "m64n8k32.s32.u8.s8"
    rng = np.random.default_rng(4)
    A = rng.integers(0, 256, (64, 32)).astype(np.uint8)
    B = rng.integers(-128, 128, (32, 8)).astype(np.int8)
    da, db = W.make_descriptor(0, 128, 256), W.make_descriptor(2048, 128, 256)
    smem = W.write_operand(jnp.zeros(4096, jnp.uint8), da, q, "a", A)
    smem = W.write_operand(smem, db, q, "b", B)
    want = A.astype(np.int64) @ B.astype(np.int64)
    return q, A, B, da, db, smem, want


def test_scale_d_is_a_runtime_predicate_and_batches_broadcast():
    q, A, B, da, db, smem, want = _int_setup()
    c = jnp.asarray(np.arange(64 * 8, dtype=np.int32).reshape(64, 8))
    regs = wgmma_registers.accumulator_registers(jnp.stack([c, c]), q)  # batch of 2, one smem
    f = jax.jit(lambda sd, r: W.wgmma(q, da, db, smem, r, scale_d=sd))
    out = wgmma_registers.accumulator_matrix(f(jnp.array([1, 0]), regs), q)
    np.testing.assert_array_equal(out[0], want + np.asarray(c))
    np.testing.assert_array_equal(out[1], want)
    # vmap over warpgroups (shared memory per warpgroup).
    many = jax.vmap(lambda s, r: W.wgmma(q, da, db, s, r))(jnp.stack([smem, smem]), regs)
    np.testing.assert_array_equal(wgmma_registers.accumulator_matrix(many, q)[1],
                                  want + np.asarray(c))


def test_negation_and_scale_d_zero_on_floats():
    q = "m64n8k16.f32.f16.f16"
    a = jnp.full((64, 16), 1.5, jnp.float16)
    b = jnp.full((16, 8), 2.0, jnp.float16)
    c = jnp.full((64, 8), jnp.nan, jnp.float32)
    d = W.wgmma_logical(q, a, b, c, scale_d=False, neg_a=True)
    np.testing.assert_array_equal(d, np.full((64, 8), -48.0, np.float32))
    d = W.wgmma_logical(q, a, b, jnp.zeros((64, 8), jnp.float32), neg_a=True, neg_b=True)
    np.testing.assert_array_equal(d, np.full((64, 8), 48.0, np.float32))
