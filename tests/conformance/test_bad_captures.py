"""Capture files whose contents would make the check misbehave are errors, not crashes.

Sizes derived from a file (``ldm``, offsets, ``.npy`` headers) are checked before
anything is allocated; a group with zero trials is an error wherever it appears; a
configuration the capture's GPU cannot issue (by ``arch.check_target``) is an error
naming the instruction and the architecture it needs. Tiny files are built in tmp_path.
"""

import io
import zipfile

import jax
import numpy as np
import pytest
from conftest import DATA

from jaxwarp import conformance
from jaxwarp._src.conformance import targets
from jaxwarp._src.conformance.handlers import wmma as handlers_wmma

H100 = np.str_("NVIDIA H100 80GB HBM3 sm_90")
A100 = np.str_("NVIDIA A100-SXM4-80GB sm_80")


def _errors(path) -> dict[str, str]:
    results, _ = conformance.check_file(str(path))
    return {r.group: r.error for r in results if r.error}


def _cli(path, capsys) -> tuple[int, str]:
    status = conformance.main([str(path), "--progress", "off"])
    out = capsys.readouterr()
    assert "Traceback" not in out.err
    return status, out.err


def _ld_file(path, ldm, off, device=H100, key="ld/a.f16.m16n16k16.r"):
    ldm, off = np.asarray(ldm, np.int32), np.asarray(off, np.int32)
    np.savez(path, device=device, **{f"{key}/ldm": ldm, f"{key}/off": off,
                                     f"{key}/src": np.zeros((len(ldm), 32, 16), np.int32)})
    return path


# --- sizes from the file --------------------------------------------------------------


def test_a_huge_ldm_is_refused_before_allocating(tmp_path, capsys):
    # 2**30 * 16 rows of f16 bit planes would be hundreds of GiB.
    path = _ld_file(tmp_path / "ld.npz", [16, 2**30], [0, 0])
    err = _errors(path)["load/a.f16.m16n16k16.r"]
    assert "ld/a.f16.m16n16k16.r: case 1 (ldm=1073741824, off=0)" in err
    assert f"at most {handlers_wmma.MAX_SPAN}" in err
    status, stderr = _cli(path, capsys)
    assert status == 2 and str(path) in stderr and "ldm=1073741824" in stderr


def test_a_huge_ldm_in_a_store_is_refused(tmp_path):
    key = "st/c.f32.m16n16k16.r"
    path = tmp_path / "st.npz"
    np.savez(path, device=H100, **{f"{key}/ldm": np.array([2**31 - 4], np.int32),
                                   f"{key}/off": np.array([0], np.int32),
                                   f"{key}/dst": np.zeros((1, 32, 8), np.int32),
                                   f"{key}/nwritten": np.array([256], np.int32)})
    err = _errors(path)["store/c.f32.m16n16k16.r"]
    assert "ldm=2147483644" in err and "at most" in err


def test_the_largest_allowed_span_is_accepted():
    spec = handlers_wmma.wmma.parse_layout_key("a.f16.m16n16k16.r")
    ldm = (handlers_wmma.MAX_SPAN - 16) // 15 // 8 * 8  # off + 15 * ldm + 16 <= MAX_SPAN
    ok = handlers_wmma.case_problem("ld/K", spec, None, "load_matrix_sync", 0, ldm, 0)
    too_big = handlers_wmma.case_problem("ld/K", spec, None, "load_matrix_sync", 0, ldm + 8, 0)
    assert ok == "" and "at most" in too_big


@pytest.mark.parametrize(("ldm", "off", "says"), [
    (12, 0, "ldm[0] = 12: load_matrix_sync needs a positive multiple of 8"),
    (0, 0, "ldm[0] = 0: load_matrix_sync needs a positive multiple of 8"),
    (-16, 0, "ldm[0] = -16"),
    (8, 0, "smaller than the tile's leading extent 16"),
    (16, 8, "off[0] = 8: load_matrix_sync needs a non-negative multiple of 16"),
    (16, -16, "off[0] = -16"),
], ids=["not-multiple", "zero", "negative", "below-tile", "misaligned-off", "negative-off"])
def test_ldm_and_offset_follow_the_instruction_rules(tmp_path, ldm, off, says):
    path = _ld_file(tmp_path / "ld.npz", [ldm], [off])
    assert says in _errors(path)["load/a.f16.m16n16k16.r"]


def test_an_npy_header_claiming_more_than_the_member_holds(tmp_path, capsys):
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<u4", "fortran_order": False, "shape": (2**34, 32)})
    path = tmp_path / "header.npz"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("reduce_x.npy", header.getvalue() + bytes(64))
    with pytest.raises(conformance.CaptureError, match=r"key 'reduce_x' claims shape "
                       r"\(17179869184, 32\) of uint32 .* but holds 64 bytes"):
        conformance.check_file(str(path))
    status, stderr = _cli(path, capsys)
    assert status == 2 and "reduce_x" in stderr


# --- zero trials --------------------------------------------------------------------------


def test_a_wmma_configuration_with_zero_trials_is_an_error(tmp_path, capsys):
    name = "s8.s32s32.m16n16k16.rc"
    path = tmp_path / "zero.npz"
    np.savez(path, device=H100, **{
        f"{name}/A": np.zeros((0, 16, 16), np.int8), f"{name}/B": np.zeros((0, 16, 16), np.int8),
        f"{name}/C": np.zeros((0, 16, 16), np.int32),
        f"{name}/D": np.zeros((0, 16, 16), np.int32)})
    assert "zero trials" in _errors(path)[f"mma/{name}"]
    status, stderr = _cli(path, capsys)
    assert status == 2 and "zero trials" in stderr and "IndexError" not in stderr
    d = np.load(path)
    with pytest.raises(conformance.CaptureError, match="zero trials"):
        handlers_wmma.run_mma_config(d, name)


def test_load_cases_zero_is_an_error(tmp_path):
    path = _ld_file(tmp_path / "ld.npz", [], [])
    assert "zero cases" in _errors(path)["load/a.f16.m16n16k16.r"]


def test_a_shuffle_with_zero_warps_is_an_error(tmp_path):
    path = tmp_path / "shfl.npz"
    np.savez(path, device=H100, shfl_cfg=np.zeros((0, 4), np.int32),
             shfl_x=np.zeros((0, 32), np.uint32), shfl_out=np.zeros((0, 32), np.uint32))
    assert "zero trials" in _errors(path)["shfl"]


def test_ldmatrix_with_zero_trials_is_an_error(tmp_path):
    d = np.load(DATA / "h100_movcvt_sample.npz")
    keys = [k for k in d.files if k.startswith("ldmatrix/x1/")]
    path = tmp_path / "ldm.npz"
    np.savez(path, device=H100, **{k: np.asarray(d[k])[:0] for k in keys})
    (err,) = _errors(path).values()
    assert "zero trials" in err


# --- the capture's GPU must have the instruction --------------------------------------


def _ptx_file(path, name, device, op="ptx"):
    m, n, k = (64, 8, 16) if op == "wgmma" else (16, 8, 32)
    raw = np.uint16 if name.startswith("f16") else np.uint8
    np.savez(path, device=device, **{
        f"{op}/{name}/A": np.zeros((1, m, k), raw), f"{op}/{name}/B": np.zeros((1, k, n), raw),
        f"{op}/{name}/C": np.zeros((1, m, n), np.uint32),
        f"{op}/{name}/D": np.zeros((1, m, n), np.uint32)})
    return path


def test_fp8_mma_sync_captured_on_sm80_is_refused(tmp_path, capsys):
    path = _ptx_file(tmp_path / "fp8.npz", "e4m3.e5m2.f32f32.m16n8k32", A100)
    err = _errors(path)["ptx/e4m3.e5m2.f32f32.m16n8k32"]
    assert "mma_sync with e4m3 operands needs sm_89 or newer" in err and "sm_80" in err
    status, stderr = _cli(path, capsys)
    assert status == 2 and str(path) in stderr and "needs sm_89" in stderr


def test_wgmma_captured_on_sm80_is_refused(tmp_path):
    path = _ptx_file(tmp_path / "wgmma.npz", "f16.f16.f32f32.m64n8k16", A100, op="wgmma")
    err = _errors(path)["wgmma/f16.f16.f32f32.m64n8k16"]
    assert "wgmma with f16 operands needs sm_90a" in err and "A100" in err


def test_the_same_configurations_on_the_h100_are_checked(tmp_path):
    # All-zero operands: 0 * 0 + 0 = +0, the D recorded here.
    for op, name in (("ptx", "e4m3.e5m2.f32f32.m16n8k32"), ("wgmma", "f16.f16.f32f32.m64n8k16")):
        path = _ptx_file(tmp_path / f"{op}.npz", name, H100, op=op)
        (r,), _ = conformance.check_file(str(path))
        assert r.ok and r.total > 0, r


def test_wmma_bf16_captured_on_sm75_is_refused(tmp_path):
    name = "bf16.f32f32.m16n16k16.rr"
    path = tmp_path / "bf16.npz"
    np.savez(path, device=np.str_("Tesla T4 sm_75"), **{
        f"{name}/A": np.zeros((1, 16, 16), np.uint16),
        f"{name}/B": np.zeros((1, 16, 16), np.uint16),
        f"{name}/C": np.zeros((1, 16, 16), np.uint32),
        f"{name}/D": np.zeros((1, 16, 16), np.uint32)})
    assert "wmma with bf16 operands needs sm_80 or newer" in _errors(path)[f"mma/{name}"]


def test_fragment_checks_read_the_accumulators_operand_types():
    spec = handlers_wmma.wmma.parse_layout_key
    t4 = {"device": np.str_("Tesla T4 sm_75")}
    assert handlers_wmma.fragment_refusal(t4, spec("c.f32.m16n16k16")) == ""  # f16 operands
    with jax.enable_x64(True):  # an f64 fragment type needs 64-bit types
        assert "f64" in handlers_wmma.fragment_refusal(t4, spec("c.f64.m8n8k4"))
    assert "tf32" in handlers_wmma.fragment_refusal(t4, spec("a.tf32.m16n16k8.r"))


def test_an_architecture_jaxwarp_does_not_know_is_an_error(tmp_path):
    path = _ptx_file(tmp_path / "fp8.npz", "e4m3.e5m2.f32f32.m16n8k32", np.str_("GPU sm_110"))
    err = _errors(path)["ptx/e4m3.e5m2.f32f32.m16n8k32"]
    assert "sm_110" in err and "does not know" in err


def test_device_targets():
    assert targets.device_target("NVIDIA H100 80GB HBM3 sm_90").name == "sm_90a"
    assert targets.device_target("NVIDIA GeForce RTX 4090 sm_89").name == "sm_89"
    assert targets.device_target("X") is None  # nothing to check against
    assert targets.refusal({}, "wgmma", "f16") == ""
    assert targets.refusal({"device": np.str_("X")}, "wgmma", "f16") == ""
