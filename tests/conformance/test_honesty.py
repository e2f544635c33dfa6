"""The conformance summary never claims more than was measured.

Exact counts, percentages rounded down (100% only when everything matched), and every
file, key, mode or configuration that could not be checked is an error, not a pass.
Tiny capture files are built in tmp_path.
"""

import json
import re

import numpy as np
import pytest

from jaxwarp import conformance

DEVICE = np.str_("NVIDIA H100 80GB HBM3 sm_90")


def _fp8_file(path, n_bad=0, n=65536):
    """A cvt capture: every fp8x2 pattern through cvt.rn.f16x2.e4m3x2 (the model is exact)."""
    from jaxwarp._src.numerics import fp8

    x = np.arange(n, dtype=np.uint16)
    y = np.asarray(fp8.PTX_FORMS["cvt.rn.f16x2.e4m3x2"](x)).copy()
    y[:n_bad] ^= 1
    np.savez(path, device=DEVICE, **{"cvt/inputs/fp8x2": x,
                                     "cvt/cvt.rn.f16x2.e4m3x2/kind": np.str_("fp8x2"),
                                     "cvt/cvt.rn.f16x2.e4m3x2/y": y})
    return path


def _last(capsys):
    out = capsys.readouterr()
    return out.out.strip().splitlines()[-1], out.out, out.err


@pytest.mark.parametrize(("matched", "total", "shown"), [
    (1127626, 1130496, "99.746"), (999999, 1000000, "99.999"), (1, 3, "33.333"),
    (0, 7, "0.000"), (12, 12, "100.000"), (2**40 - 1, 2**40, "99.999"),
])
def test_percent_is_rounded_down(matched, total, shown):
    assert conformance.floor_percent(matched, total) == shown


def test_floor_percent_rejects_nonsense():
    with pytest.raises(ValueError, match="total"):
        conformance.floor_percent(0, 0)
    with pytest.raises(ValueError, match="matched"):
        conformance.floor_percent(5, 4)


def test_a_near_miss_is_not_100(tmp_path, capsys):
    path = _fp8_file(tmp_path / "near.npz", n_bad=1)
    assert conformance.main([str(path), "--json", str(tmp_path / "r.json")]) == 1
    last, out, _ = _last(capsys)
    assert last.startswith("conformance: 65535/65536 bit-exact (99.998%)")
    assert "MISMATCH" in last and "100.0" not in out.replace("100.000%", "")
    report = json.loads((tmp_path / "r.json").read_text())
    assert (report["matched"], report["total"], report["percent"]) == (65535, 65536, "99.998")
    assert report["mismatched_groups"] == 1


def test_everything_matching_is_100_and_exits_0(tmp_path, capsys):
    path = _fp8_file(tmp_path / "ok.npz")
    assert conformance.main([str(path)]) == 0
    last, out, _ = _last(capsys)
    assert last == "conformance: 65536/65536 bit-exact (100.000%)"
    assert re.search(r"cvt/cvt\.rn\.f16x2\.e4m3x2\s+65536\s+65536\s+100\.000%", out)
    assert "= cvt: 65536/65536 bit-exact (100.000%)" in out


@pytest.mark.parametrize("keys", [{}, {"device": DEVICE}], ids=["empty", "device_only"])
def test_a_file_with_nothing_to_compare_is_an_error(tmp_path, capsys, keys):
    path = tmp_path / "nothing.npz"
    np.savez(path, **keys)
    assert conformance.main([str(path)]) == 2
    last, _, err = _last(capsys)
    assert "nothing to compare" in err and str(path) in err
    assert "bit-exact" not in last
    with pytest.raises(conformance.CaptureError, match="nothing to compare"):
        conformance.check_file(str(path))


def test_an_unknown_key_is_an_error_naming_file_and_key(tmp_path, capsys):
    good = _fp8_file(tmp_path / "ok.npz")
    d = dict(np.load(good))
    d["mystery"] = np.arange(10)
    path = tmp_path / "other.npz"
    np.savez(path, **d)
    assert conformance.main([str(path)]) == 2
    last, out, err = _last(capsys)
    assert f"{path}" in err and "'mystery'" in err and "no handler" in err
    assert "unhandled/mystery" in out and "ERROR" in out
    assert "1 group(s) with 10 elements NOT CHECKED" in last
    results, _ = conformance.check_file(str(path))
    bad = [r for r in results if r.error]
    assert [r.group for r in bad] == ["unhandled/mystery"] and not bad[0].ok


def test_an_unknown_shuffle_mode_is_an_error(tmp_path, capsys):
    cfg = np.array([[0, 1, 32, -1], [7, 1, 32, -1]], np.int32)  # mode 7 does not exist
    x = np.arange(64, dtype=np.uint32).reshape(2, 32)
    path = tmp_path / "shfl.npz"
    np.savez(path, device=DEVICE, shfl_cfg=cfg, shfl_x=x, shfl_out=x)
    assert conformance.main([str(path)]) == 2
    _, _, err = _last(capsys)
    assert str(path) in err and "shfl_cfg" in err and "[7]" in err


def test_a_negative_shuffle_mode_is_an_error(tmp_path):
    cfg = np.array([[-1, 1, 32, -1]], np.int32)  # would index the xor shuffle from the end
    x = np.arange(32, dtype=np.uint32)[None]
    path = tmp_path / "shfl.npz"
    np.savez(path, device=DEVICE, shfl_cfg=cfg, shfl_x=x, shfl_out=x)
    with pytest.raises(conformance.CaptureError, match=r"mode code\(s\) \[-1\]"):
        conformance.check_file(str(path))


def test_unknown_ptx_names_and_sub_keys_are_errors(tmp_path):
    a = np.zeros((1, 16, 16), np.uint16)
    b = np.zeros((1, 16, 8), np.uint16)
    c = np.zeros((1, 16, 8), np.uint32)
    path = tmp_path / "ptx.npz"
    np.savez(path, device=DEVICE, **{
        "ptx/f17.f16.f32f32.m16n8k16/A": a, "ptx/f17.f16.f32f32.m16n8k16/B": b,
        "ptx/f17.f16.f32f32.m16n8k16/C": c, "ptx/f17.f16.f32f32.m16n8k16/D": c,
        "ptx/f16.f16.f32f32.m16n8k16/A": a, "ptx/f16.f16.f32f32.m16n8k16/B": b,
        "ptx/f16.f16.f32f32.m16n8k16/C": c, "ptx/f16.f16.f32f32.m16n8k16/D": c,
        "ptx/f16.f16.f32f32.m16n8k16/extra": c})
    results, _ = conformance.check_file(str(path))
    errors = {r.group: r.error for r in results if r.error}
    assert "'f17'" in errors["ptx/f17.f16.f32f32.m16n8k16"]
    assert "extra" in errors["ptx/f16.f16.f32f32.m16n8k16"]
    # the well-formed data of the second configuration is still compared: 0 * 0 + 0 = +0
    ok = [r for r in results if not r.error]
    assert [(r.group, r.matched, r.total) for r in ok] == [
        ("ptx/f16.f16.f32f32.m16n8k16", 128, 128)]


def test_a_missing_datapath_feature_is_an_error_not_a_skip(tmp_path, monkeypatch):
    from jaxwarp._src.conformance.handlers import ptx as handlers_ptx

    monkeypatch.setattr(handlers_ptx, "datapath_lacks", lambda cfg: "operand type 'e4m3'")
    a = np.zeros((1, 16, 32), np.uint8)
    b = np.zeros((1, 32, 8), np.uint8)
    c = np.zeros((1, 16, 8), np.uint32)
    path = tmp_path / "fp8.npz"
    np.savez(path, device=DEVICE, **{f"ptx/e4m3.e4m3.f32f32.m16n8k32/{k}": v
                                     for k, v in dict(A=a, B=b, C=c, D=c).items()})
    assert conformance.main([str(path)]) == 2
    (r,), _ = conformance.check_file(str(path))
    assert r.error == "datapath lacks operand type 'e4m3'" and r.total == 128 and not r.ok


def test_errors_and_mismatches_in_several_files(tmp_path, capsys):
    ok = _fp8_file(tmp_path / "ok.npz")
    near = _fp8_file(tmp_path / "near.npz", n_bad=3)
    empty = tmp_path / "empty.npz"
    np.savez(empty, device=DEVICE)
    assert conformance.main([str(ok), str(near)]) == 1
    last, _, _ = _last(capsys)
    assert last.startswith("conformance: 131069/131072 bit-exact (99.997%)")
    # an error wins over a mismatch; the other files are still reported
    assert conformance.main([str(ok), str(empty), str(near)]) == 2
    last, out, err = _last(capsys)
    assert "131069/131072" in last and "1 file(s) unreadable or empty" in last
    assert str(empty) in err and out.count("# ") == 2


def test_backend_option(tmp_path, capsys):
    path = _fp8_file(tmp_path / "ok.npz")
    assert conformance.main([str(path), "--backend", "cpu"]) == 0
    capsys.readouterr()


def test_progress_goes_to_stderr_only(tmp_path, capsys):
    path = _fp8_file(tmp_path / "ok.npz")
    assert conformance.main([str(path), "--progress", "on"]) == 0
    out = capsys.readouterr()
    assert "ok.npz" in out.err  # the bar's label
    assert out.out.strip().splitlines()[-1] == "conformance: 65536/65536 bit-exact (100.000%)"


@pytest.mark.skipif(not hasattr(__import__("os"), "mkfifo"), reason="no named pipes here")
def test_a_named_pipe_is_refused_not_read(tmp_path, capsys):
    import os
    fifo = tmp_path / "capture.npz"
    os.mkfifo(fifo)  # opening it for reading would block forever
    assert conformance.main([str(fifo), "--progress", "off"]) == 2
    assert "not a regular file" in capsys.readouterr().err


def test_json_path_in_a_missing_folder_is_refused_before_the_run(tmp_path, capsys):
    bad = tmp_path / "missing" / "report.json"
    assert conformance.main([str(tmp_path / "never-read.npz"), "--json", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "--json" in err and "does not exist" in err and "never-read" not in err


def test_an_object_array_device_key_is_an_error(tmp_path, capsys):
    path = tmp_path / "obj.npz"
    np.savez(path, device=np.array([{"a": 1}], object), foo=np.zeros(3))
    assert conformance.main([str(path), "--progress", "off"]) == 2
    assert "key 'device' cannot be read" in capsys.readouterr().err


def test_a_configuration_with_zero_trials_is_an_error(tmp_path, capsys):
    base = "ptx/f16.f16.f32f32.m16n8k16"
    path = tmp_path / "zero.npz"
    np.savez(path, device=np.array("X"), **{
        f"{base}/A": np.zeros((0, 16, 16), np.uint16), f"{base}/B": np.zeros((0, 16, 8), np.uint16),
        f"{base}/C": np.zeros((0, 16, 8), np.uint32), f"{base}/D": np.zeros((0, 16, 8), np.uint32)})
    assert conformance.main([str(path), "--progress", "off"]) == 2
    assert "zero trials" in capsys.readouterr().err
