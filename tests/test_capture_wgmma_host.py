"""Host-only tests of tools/capture/capture_wgmma.py (no GPU needed).

They check the generators, the descriptor encoding, the swizzled shared-memory images
(round trip image <-> logical matrix) and the register maps, and run the whole host
pipeline against a stand-in for the GPU that reads operands back *through the
descriptors* (decode start/LBO/SBO/swizzle, gather) and multiplies in float64.
"""

from __future__ import annotations

import importlib.util
import pathlib

import numpy as np
import pytest

PATH = pathlib.Path(__file__).resolve().parents[1] / "tools" / "capture" / "capture_wgmma.py"
spec = importlib.util.spec_from_file_location("capture_wgmma", PATH)
cw = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cw)


class FakeLib:
    """Stands in for the GPU: D = A @ B + C in float64, operands read via descriptors."""

    def __init__(self):
        self.calls = 0

    def run(self, key, img, desc, areg, cwords, steps, scale_d):
        self.calls += 1
        cfg = cw.cfg_of(key)
        at, bt, ct, n, k = cfg["at"], cfg["bt"], cfg["ct"], cfg["n"], cfg["k"]
        _, _, _, _, is_areg, ta, tb, sa, sb, sat = key
        T = cwords.shape[0]
        C = cw.unpack_d(cwords, n, ct)
        acc = C.astype(np.int64) if ct == "s32" else cw.to_f64(C, ct)
        acc = acc * scale_d
        img = img.reshape(T, steps, -1)
        for s in range(steps):
            im = img[:, s]
            db = cw.decode_desc(desc[s, 1])
            B = cw.gather(im, db["start"], n, k, bt, "MN" if tb else "K", db["swizzle"],
                          db["lbo"], db["sbo"])
            if is_areg:
                row, col = cw.a_map(at)
                words = areg.reshape(T, steps, 128, 4)[:, s]
                bits = cw.ATYPES[at][0]
                A = np.zeros((T, 64, k), cw.ATYPES[at][1])
                for j in range(row.shape[2]):
                    v = (words >> np.uint32(j * bits)) & np.uint32((1 << bits) - 1)
                    A[:, row[..., j], col[..., j]] = v.astype({8: np.uint8, 16: np.uint16,
                                                               32: np.uint32}[bits]).view(A.dtype)
            else:
                da = cw.decode_desc(desc[s, 0])
                A = cw.gather(im, da["start"], 64, k, at, "MN" if ta else "K", da["swizzle"],
                              da["lbo"], da["sbo"])
            Bt = np.swapaxes(B, 1, 2)
            if ct == "s32":
                acc = acc + np.einsum("tmk,tkn->tmn", A.astype(np.int64), Bt.astype(np.int64))
                if sat:
                    acc = np.clip(acc, -(1 << 31), (1 << 31) - 1)
                acc = (acc + (1 << 31)) % (1 << 32) - (1 << 31)
            else:
                acc = acc + sa * sb * np.einsum("tmk,tkn->tmn", cw.to_f64(A, at), cw.to_f64(Bt, bt))
        D = acc.astype(np.int32) if ct == "s32" else cw.from_f64(acc, ct)
        return cw.pack_c(D, ct)


def test_descriptor_encoding_fields():
    d = cw.encode_desc(0x3FFF0, 0x100, 0x400, 2, 5)
    assert d == (0x3FFF | 0x10 << 16 | 0x40 << 32 | 5 << 49 | 2 << 62)
    assert cw.decode_desc(d) == dict(start=0x3FFF0, lbo=0x100, sbo=0x400, base_offset=5, swizzle=2)
    with pytest.raises(ValueError, match="start"):
        cw.encode_desc(8, 16, 16, 0)


@pytest.mark.parametrize("sw,period", [(1, 1024), (2, 512), (3, 256)])
def test_swizzle_is_a_permutation_of_16_byte_chunks(sw, period):
    a = np.arange(4 * period)
    s = cw.swizzle_addr(a, sw)
    assert sorted(s) == list(a)
    assert np.array_equal(s % 16, a % 16)
    assert np.array_equal(s // period, a // period)  # stays inside its repeat block
    assert np.array_equal(s[:128], a[:128])  # address bits 7.. are 0: the first 128 B stay


def test_128b_swizzle_pattern():
    # row r (128 bytes) of an 8-row atom: 16-byte chunk c lands at chunk c ^ r
    for r in range(8):
        for c in range(8):
            assert cw.swizzle_addr(128 * r + 16 * c, 1) == 128 * r + 16 * (c ^ r)


@pytest.mark.parametrize("at", list(cw.ATYPES))
@pytest.mark.parametrize("major", ["K", "MN"])
@pytest.mark.parametrize("sw", [0, 1, 2, 3])
def test_image_round_trip(at, major, sw):
    if major == "MN" and cw.ATYPES[at][0] != 16:
        pytest.skip("MN-major only for 16-bit types")
    rng = np.random.default_rng(1)
    kd = cw.ATYPES[at][2]
    for mn in (8, 64, 256):
        A = rng.integers(0, 2 if at == "b1" else 120, (3, mn, kd)).astype(cw.ATYPES[at][1])
        lbo, sbo, size = cw.operand_layout(mn, kd * cw.ATYPES[at][0] // 8, major, sw,
                                           cw.elem_bytes_of(at))
        img = np.full((3, 1024 + size), cw.FILL, np.uint8)
        cw.scatter(img, 1024, A, at, major, sw, lbo, sbo)
        np.testing.assert_array_equal(cw.gather(img, 1024, mn, kd, at, major, sw, lbo, sbo), A)


def test_k_major_no_swizzle_core_matrix():
    # element (r, k) of an f16 K-major operand: core matrix = 8 rows x 16 contiguous bytes
    off, _ = cw.element_offsets(16, 16, 16, "K", 0, 128, 256)
    assert off[0, 0] == 0 and off[0, 7] == 14 and off[1, 0] == 16 and off[7, 7] == 126
    assert off[0, 8] == 128 and off[8, 0] == 256


@pytest.mark.parametrize("ct", ["f32", "f16", "s32"])
@pytest.mark.parametrize("n", [8, 16, 128, 256])
def test_d_register_map(ct, n):
    r, c = cw.d_map(n, ct)
    assert len(np.unique(r * n + c)) == 64 * n
    # thread 0 word 0 holds D[0, 0]; thread 5 (g=1, q=1) holds row 1, cols 2,3
    assert r[0, 0, 0] == 0 and c[0, 0, 0] == 0
    assert r[5, 0, 0] == 1 and c[5, 0, 0] == 2
    assert r[32, 0, 0] == 16  # warp 1 starts at row 16


def test_generators_give_valid_shapes_and_kinds():
    rng = np.random.default_rng(0)
    for kind in cw.FP_KINDS:
        for at, ct in (("f16", "f32"), ("e4m3", "f16"), ("tf32", "f32"), ("bf16", "f32")):
            k = cw.ATYPES[at][2]
            A, B, C = cw.gen_fp(rng, kind, at, at, ct, 8, k, trial=3)
            assert A.shape == (64, k) and B.shape == (k, 8) and C.shape == (64, 8)
            assert A.dtype == cw.ATYPES[at][1] and C.dtype == cw.CTYPES[ct]
    for kind in cw.INT_KINDS:
        A, B, C = cw.gen_int(rng, kind, "s8", "u8", 16, 32)
        assert A.dtype == np.int8 and B.dtype == np.uint8 and C.dtype == np.int32


def test_fp8_encoder_round_trips_every_finite_code():
    for t in ("e4m3", "e5m2"):
        tab = cw.F8TAB[t]
        codes = np.array([c for c in range(256) if np.isfinite(tab[c]) and c != 0x80], np.uint8)
        np.testing.assert_array_equal(cw.from_f64(tab[codes], t), codes)


@pytest.mark.parametrize("group", ["plain", "variants", "chain"])
def test_pipeline_through_descriptors(group):
    """Every job: images + descriptors + registers read back give D = A @ B + C."""
    fake = FakeLib()
    js = cw.jobs([group], 1.0, quick=True)
    if group == "chain":
        js = [j for j in js if j["steps"] <= 4]
    for job in js:
        A, B, C = cw.make_inputs(job, 0)
        sel = [i for i, kd in enumerate(job["kinds"]) if kd in ("normal", "int", "positive")][:2]
        A, B, C = A[sel], B[sel], C[sel]
        cfg = cw.cfg_of(job["key"])
        words, _ = cw.execute(fake, job, A, B, C)
        D = cw.unpack_d(words, cfg["n"], cfg["ct"])
        err = cw.reference_error(cfg, A, B, C, D, cfg["sa"], cfg["sb"], job["scale_d"])
        assert err < (1e-2 if cfg["ct"] != "s32" else 1e-12), (job["name"], err)
    assert fake.calls == len(js)


def test_generated_table_names_every_kernel_variant_once():
    ops = [cw.WgOp(k) for k in cw.all_ops()]
    inc = cw.gen_inc(ops)
    assert len({o.name for o in ops}) == len(ops)
    assert inc.count("\nstruct Op") == len(ops)
    for i, o in enumerate(ops):
        assert inc.count(f'X("{o.name}", Op{i})') == 1
        assert f"{o.ptx()} {{%0" in inc  # the instruction with its accumulator operands


def test_main_orchestration_skips_failing_configurations(tmp_path, monkeypatch):
    """The driver loop: workers in-process, one config raising a CUDA error is skipped."""

    class Fake(FakeLib):
        device, cc, versions = "FakeGPU sm_90", 90, (13000, 13000)

        def __init__(self, path=None):
            super().__init__()

        def run(self, key, *a):
            if cw.op_name(key) == "f16.f16.f32f32.m64n8k16.negA":
                raise RuntimeError("an illegal instruction was encountered")
            return super().run(key, *a)

    class Done:
        def __init__(self, rc):
            self.returncode = rc

    def fake_run(cmd, timeout=None):
        try:
            cw.main(cmd[2:])
        except SystemExit as e:
            return Done(e.code)
        return Done(0)

    monkeypatch.setattr(cw, "Lib", Fake)
    monkeypatch.setattr(cw, "build", lambda nvcc="nvcc": None)
    monkeypatch.setattr(cw.subprocess, "run", fake_run)
    cw.main(["--out", str(tmp_path), "--quick", "--only", "variants,chain", "--scale", "0.3"])
    z = np.load(tmp_path / "wgmma_full.npz")
    names = {k.rsplit("/", 1)[0] for k in z.files if k.endswith("/kind")}
    assert "wgmma/f16.f16.f32f32.m64n8k16.negA" not in names
    assert "wgmma/f16.f16.f32f32.m64n8k16.negB" in names
    assert len(names) == len(cw.variant_configs()) - 1
    assert str(z["device"]) == "FakeGPU sm_90"
    assert z["wgmma/e4m3.e4m3.f32f32.m64n8k32.sw128/desc_b"].dtype == np.uint64
    c = np.load(tmp_path / "wgmma_chain.npz")
    assert c["chain/wgmma/e4m3.e4m3.f32f32.m64n8k32x128/A"].shape[1:] == (64, 4096)
