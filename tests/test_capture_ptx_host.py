"""Host-side tests of tools/capture/capture_ptx.py (no GPU, no nvcc): layouts, packing, names."""

import pathlib
import sys

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tools" / "capture"))
import capture_ptx as cp  # noqa: E402

CFGS = cp.candidate_configs()


@pytest.mark.parametrize("cfg", CFGS, ids=[c.name for c in CFGS])
def test_layout_covers_each_element_once(cfg):
    for use in "abcd":
        q, row, col = cp.frag_coords(cfg, use)
        rows, cols = cfg.dims(use)
        cover = np.zeros((cfg.per_warp, rows, cols), int)
        np.add.at(cover, (q, row, col), 1)
        np.testing.assert_array_equal(cover, 1)


@pytest.mark.parametrize("cfg", CFGS, ids=[c.name for c in CFGS])
def test_pack_unpack_round_trip(cfg):
    rng = np.random.default_rng(1)
    A, B, C, kinds = cp.make_trials(rng, cfg, 2 * cfg.per_warp)
    for use, X in (("a", A), ("b", B), ("c", C)):
        w = cp.pack(X, cfg, use)
        assert w.shape == (X.shape[0] // cfg.per_warp, 32, cfg.nregs(use))
        np.testing.assert_array_equal(cp.unpack(w, cfg, use), X)
        assert cp.unpack(w, cfg, use).dtype == X.dtype


def test_known_layout_points():
    """Spot checks against the PTX ISA formulas (9.7.14.5)."""
    f16 = next(c for c in CFGS if c.name == "f16.f16.f32f32.m16n8k16")
    q, r, c = cp.frag_coords(f16, "a")
    # lane 5: groupID 1, threadID_in_group 1; a2,a3 (register 1) sit in row 9, cols 2, 3
    assert (r[5, 2], c[5, 2], r[5, 3], c[5, 3]) == (9, 2, 9, 3)
    # a4 (register 2) in row 1, col 10
    assert (r[5, 4], c[5, 4]) == (1, 10)
    q, r, c = cp.frag_coords(f16, "b")
    assert (r[5, 2], c[5, 2]) == (10, 1)
    s8 = next(c for c in CFGS if c.name == "s8.s8.s32s32.m16n8k32")
    q, r, c = cp.frag_coords(s8, "a")
    assert (r[6, 15], c[6, 15]) == (9, 16 + 2 * 4 + 3)
    q884 = next(c for c in CFGS if c.name == "f16.f16.f32f32.m8n8k4")
    q, r, c = cp.frag_coords(q884, "c")
    # lane 17 (quadpair 0, high group), c5: row (1&1)+(5&2)+4 = 5, col 4+0+1 = 5
    assert (q[17, 5], r[17, 5], c[17, 5]) == (0, 5, 5)


def test_register_words_bits():
    cfg = next(c for c in CFGS if c.name == "s4.s4.s32s32.m8n8k32")
    A = np.zeros((1, 8, 32), np.int8)
    A[0, 0, 0], A[0, 0, 1] = -1, 3  # lane 0 holds row 0, cols 0..7: nibbles 0xF, 0x3
    w = cp.pack(A, cfg, "a")
    assert w[0, 0, 0] == 0x3F


def test_names():
    names = [c.name for c in CFGS]
    assert len(names) == len(set(names))
    assert "e4m3.e5m2.f32f32.m16n8k32" in names
    assert "s8.s8.s32s32.m16n8k32.satfinite" in names
    assert "b1.b1.s32s32.m16n8k256.xor" in names
    assert "f16.f16.f16f32.m8n8k4.cr" in names
    cfg = next(c for c in CFGS if c.name == "u8.s8.s32s32.m8n8k16.satfinite")
    assert cfg.ptx() == "mma.sync.aligned.m8n8k16.row.col.satfinite.s32.u8.s8.s32"


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_fp8_encode_decode(fmt):
    codes = np.arange(256, dtype=np.uint8)
    vals = cp.decode(codes, fmt)
    fin = np.isfinite(vals)
    np.testing.assert_array_equal(cp.encode(vals[fin], fmt), codes[fin])


def test_selftest_passes():
    assert cp.selftest(0) == 0
