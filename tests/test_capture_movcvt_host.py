"""Host-only tests of tools/capture/capture_movcvt.py (no GPU needed).

They check the op table against movcvt.cu, the input generators, the first-principles
references the capture is compared with (against ml_dtypes where that is exact, and against
hand-worked boundary cases), and run the whole command against a stand-in GPU
(MOVCVT_FAKE_GPU=1) that computes the references, including a job that "faults".
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import re
import shutil
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

PATH = pathlib.Path(__file__).resolve().parents[1] / "tools" / "capture" / "capture_movcvt.py"
spec = importlib.util.spec_from_file_location("capture_movcvt", PATH)
cm = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cm)


def f32bits(*vals):
    return np.array(vals, np.float32).view(np.uint32)


def test_op_table_matches_the_cuda_source():
    src = cm.SRC.read_text()
    block = src[src.index("kCvtNames[MC_NCVT] = {"):src.index("};", src.index("kCvtNames"))]
    names = re.findall(r'"([^"]+)"', block)
    assert names == [op[0] for op in cm.CVT_OPS]
    assert f"#define MC_NCVT {len(cm.CVT_OPS)}" in src
    for i in range(cm.N_PTX):  # every PTX form is compiled only when ptxas accepted it
        assert f"#ifdef MC_OK_{i}\n    case {i}: " in src


@pytest.mark.parametrize("fmt,dt", [("e4m3", ml_dtypes.float8_e4m3fn),
                                    ("e5m2", ml_dtypes.float8_e5m2)], ids=["e4m3", "e5m2"])
@pytest.mark.parametrize("src", ["f32", "f16", "bf16"])
def test_reference_rounding_equals_ml_dtypes_in_range(fmt, dt, src):
    if src == "f32":
        bits = cm.f32_patterns(np.random.default_rng(1), 4096)
        v = bits.view(np.float32)
    else:
        bits = np.arange(1 << 16, dtype=np.uint16)
        v = bits.view(np.float16 if src == "f16" else ml_dtypes.bfloat16).astype(np.float32)
    # f16 and bf16 widen to f32 exactly, so ml_dtypes' single rounding from f32 is exact.
    ok = np.isfinite(v) & (np.abs(v) <= float(ml_dtypes.finfo(dt).max))
    want = v[ok].astype(dt).view(np.uint8)
    got = cm.ref_to_fp8(bits[ok], src, fmt, satfinite=False)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("val,fmt,sat,want", [
    (448.0, "e4m3", True, 0x7E),
    (464.0, "e4m3", True, 0x7E),          # MAX_NORM + ulp/2: tie to even = MAX_NORM
    (464.0, "e4m3", False, 0x7E),
    (464.00003, "e4m3", False, 0x7F),     # just above: overflow, e4m3 has no inf -> NaN
    (464.00003, "e4m3", True, 0x7E),
    (-1e30, "e4m3", True, 0xFE),
    (float("inf"), "e4m3", True, 0x7E),
    (float("-inf"), "e4m3", False, 0xFF),
    (61440.0, "e5m2", False, 0x7C),       # tie between 57344 and 65536 -> even = inf
    (61440.0, "e5m2", True, 0x7B),
    (61439.996, "e5m2", False, 0x7B),
    (float("-inf"), "e5m2", False, 0xFC),
    (float("-inf"), "e5m2", True, 0xFB),
    (2.0 ** -10, "e4m3", True, 0x00),     # half the smallest subnormal: tie -> 0
    (-(2.0 ** -10), "e4m3", True, 0x80),  # sign of zero kept
    (1.5 * 2.0 ** -9, "e4m3", True, 0x02),  # tie between 1 and 2 quanta -> 2
    (2.0 ** -17, "e5m2", True, 0x00),
    (1.0000001 * 2.0 ** -17, "e5m2", True, 0x01),
    (float("nan"), "e5m2", True, 0x7F),
])
def test_reference_boundaries(val, fmt, sat, want):
    assert int(cm.ref_to_fp8(f32bits(val), "f32", fmt, sat)[0]) == want


def test_reference_relu_and_nan():
    x = f32bits(-1.0, 1.0, -0.0, float("nan"), -float("nan"))
    assert cm.ref_to_fp8(x, "f32", "e4m3", True, relu=True).tolist() == [0, 0x38, 0, 0x7F, 0x7F]
    h = cm.ref_fp8_to_f16(np.array([0x7F, 0xFF, 0xB8, 0x38], np.uint8), "e4m3", relu=True)
    assert h.tolist() == [0x7FFF, 0x7FFF, 0, 0x3C00]


def test_fp8_to_f16_reference_is_exact_for_every_pattern():
    for fmt, dt in (("e4m3", ml_dtypes.float8_e4m3fn), ("e5m2", ml_dtypes.float8_e5m2)):
        b = np.arange(256, dtype=np.uint8)
        v = b.view(dt).astype(np.float32)
        got = cm.ref_fp8_to_f16(b, fmt)
        fin = ~np.isnan(v)
        np.testing.assert_array_equal(got[fin], v[fin].astype(np.float16).view(np.uint16))
        assert set(got[~fin].tolist()) == {0x7FFF}


def test_f32_patterns_hold_every_tie_and_boundary():
    x = set(cm.f32_patterns(np.random.default_rng(0), 16).tolist())
    for fmt in ("e4m3", "e5m2"):
        v = cm.fp8_to_f64(np.arange(256), fmt)
        v = np.unique(v[np.isfinite(v)])
        mids = ((v[1:] + v[:-1]) / 2).astype(np.float32).view(np.uint32)
        for m in mids.tolist():
            assert {m, m + 1, m - 1} <= x or m == 0
    for val in (464.0, 61440.0, float("inf"), 0.0):
        b = int(f32bits(val)[0])
        assert {b, b + 1, (b - 1) % 2**32, b | 0x80000000} <= x
    assert {0x7FC00000, 0x7F800001, 0xFFFFFFFF, 1} <= x


def test_input_kinds_cover_every_pattern():
    f32 = cm.f32_patterns(np.random.default_rng(0), 64)
    pair = cm.cvt_inputs("f32pair", f32)
    assert sorted(pair.ravel().tolist()) == sorted(f32[: 2 * len(pair)].tolist())
    w = cm.cvt_inputs("f16x2", f32)
    assert len(np.unique(w & 0xFFFF)) == 65536 and len(np.unique(w >> 16)) == 65536
    assert len(np.unique(cm.cvt_inputs("fp8x2", f32))) == 65536


def test_x2_packing_of_the_reference():
    x = np.array([[f32bits(1.0)[0], f32bits(-2.0)[0]]], np.uint32)
    # PTX: first source in the upper byte; float2: .x in the lower byte.
    assert int(cm.ref_cvt("cvt.rn.satfinite.e4m3x2.f32", "f32pair", x)[0]) == 0x38C0
    assert int(cm.ref_cvt("nv_cvt_float2_to_fp8x2.e4m3.satfinite", "f32pair", x)[0]) == 0xC038
    w = np.array([0xC000_3C00], np.uint32)  # hi = -2.0, lo = 1.0 (f16)
    assert int(cm.ref_cvt("cvt.rn.satfinite.e4m3x2.f16x2", "f16x2", w)[0]) == 0xC038


@pytest.mark.parametrize("num,trans", cm.LDM_VARIANTS, ids=lambda v: str(v))
def test_ldmatrix_stmatrix_references(num, trans):
    rng = np.random.default_rng(num + 10 * trans)
    addr, kinds = cm.ldm_addresses(rng, 16, num)
    assert np.all(addr % 16 == 0) and np.all((addr >= 0) & (addr < 2 * cm.NELEM))
    perm = kinds == "perm"
    assert all(len(set(a.tolist())) == 32 for a in addr[perm])
    assert not perm.all()
    regs = cm.unique_regs(rng, 16, num)
    halves = np.concatenate([regs & 0xFFFF, regs >> 16], -1).reshape(16, -1)
    assert all(len(set(h.tolist())) == 64 * num for h in halves)
    assert not np.any(halves == cm.FILL)
    img = cm.ref_stmatrix(regs[perm], addr[perm], num, trans)
    np.testing.assert_array_equal(cm.ref_ldmatrix(img, addr[perm], num, trans), regs[perm])
    # .trans loads the transposed tile: ldmatrix.trans of an image equals plain ldmatrix of
    # the image with every 8x8 tile transposed in place.
    smem = cm.ldm_smem(rng, 1)
    a = addr[perm][:1]
    tiled = smem.copy()
    for i in range(num):
        rows = a[0, 8 * i:8 * i + 8] // 2
        tile = smem[0][rows[:, None] + np.arange(8)]
        tiled[0][rows[:, None] + np.arange(8)] = tile.T
    np.testing.assert_array_equal(cm.ref_ldmatrix(smem, a, num, True),
                                  cm.ref_ldmatrix(tiled, a, num, False))


def test_movmatrix_reference_is_an_involution():
    regs = cm.unique_regs(np.random.default_rng(3), 4, 1)[..., 0]
    once = cm.ref_movmatrix(regs)
    assert not np.array_equal(once, regs)
    np.testing.assert_array_equal(cm.ref_movmatrix(once), regs)
    # lane 1 holds row 0 columns 2, 3; after the transpose it holds column 0 rows 2, 3
    lo0 = lambda lane: regs[0, lane] & 0xFFFF  # noqa: E731
    hi0 = lambda lane: regs[0, lane] >> 16  # noqa: E731
    assert once[0, 1] == lo0(8) | (lo0(12) << 16)
    assert once[0, 0] == lo0(0) | (lo0(4) << 16)
    assert once[0, 4] == hi0(0) | (hi0(4) << 16)


def test_whole_command_against_a_stand_in_gpu(tmp_path):
    env = dict(os.environ, MOVCVT_FAKE_GPU="1")
    r = subprocess.run([sys.executable, str(PATH), "--out", str(tmp_path), "--quick"],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "FAIL ldmatrix/x4.misaligned2" in r.stdout  # the stand-in "faults" there ...
    for fn in ("cvt_fp8.npz", "ldmatrix.npz"):
        p = tmp_path / fn
        assert p.stat().st_size < cm.MAX_NPZ
        assert "fake" in str(np.load(p)["device"])
    d = np.load(tmp_path / "ldmatrix.npz")
    assert "ldmatrix/x4.misaligned8/error" in d.files  # ... and the next job still ran
    assert d["stmatrix/x4.trans/smem_out"].shape == (8, cm.NELEM)
    c = np.load(tmp_path / "cvt_fp8.npz")
    assert "ptxas" in str(c["cvt/cvt.rn.e4m3x2.f32/error"])
    assert c["cvt/cvt.rn.satfinite.e4m3x2.f32/y"].dtype == np.uint16
    assert c["cvt/inputs/f32pair"].shape[1] == 2
    assert cm.check(tmp_path) == 0


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_cuda_source_compiles_for_sm_90a():
    for part in ("cvt", "ldm"):
        path, probes = cm.build(part)
        assert path.exists()
    assert probes == {} or all(not probes[i] for i in (0, 1, 6, 7, 14, 15))
