"""Reference-model files (``golden/...``, MMA-Sim outputs) in the conformance command.

The committed files ``tests/data/mmasim_golden_{mma,tcgen05}.npz`` were written by
``tools/crosscheck/make_golden.py``. Fast tests read Hopper groups (jaxwarp's sm_90
model is the hardware-verified one) and synthetic files; the slow test compares every
group of both files and requires every *modelled* configuration to match bit for bit,
"modelled" read from jaxwarp's catalogue (``handlers_golden.model_status``), never
from a list of names.
"""

import collections
import json
import re

import numpy as np
import pytest
from conftest import DATA

from jaxwarp import conformance
from jaxwarp._src.catalogue import arch, isa
from jaxwarp._src.conformance import golden_keys as G
from jaxwarp._src.conformance.handlers import golden as handlers_golden

FILES = ("mmasim_golden_mma.npz", "mmasim_golden_tcgen05.npz")
HOPPER = ("golden/mma/Hopper/m16n8k16.f32.f16.f16.f32",)


def _groups(d) -> dict[str, list[str]]:
    out = collections.defaultdict(list)
    for k in d.files:
        if k.startswith("golden/"):
            out[k.rsplit("/", 1)[0]].append(k)
    return out


def _subset(tmp_path, name, groups, edit=None):
    """A file with ``groups`` of the committed data (and its device), edited by ``edit``."""
    d = np.load(DATA / "mmasim_golden_mma.npz")
    keep = {"device": d["device"]}
    for g in groups:
        keep.update({k: d[k] for k in _groups(d)[g]})
    if edit is not None:
        edit(keep)
    path = tmp_path / name
    np.savez(path, **keep)
    return str(path)


def _results(path):
    results, device = conformance.check_file(path)
    return {r.group: r for r in results}, device


def test_committed_files_are_small_and_name_mma_sim():
    total = 0
    for name in FILES:
        d = np.load(DATA / name)
        assert str(d["device"]).startswith("MMA-Sim 2.1.1")
        total += (DATA / name).stat().st_size
        for group, keys in _groups(d).items():
            G.parse_golden_name(*group.split("/")[1:])
            assert {k.rsplit("/", 1)[1] for k in keys} == {"A", "B", "C", "D", "kind"}
    assert total < 4.5 * 2**20


def test_chains_feed_d_back_as_c():
    """Consecutive trials t, t + 1 of a chain: C of t + 1 is D of t (README's rule)."""
    d = np.load(DATA / "mmasim_golden_mma.npz")
    chained = 0
    for group in _groups(d):
        name = G.parse_golden_name(*group.split("/")[1:])
        if name.c_format != name.d_format:
            continue
        c, dd = d[f"{group}/C"], d[f"{group}/D"]
        np.testing.assert_array_equal(c[1::2], dd[0::2], err_msg=group)
        chained += 1
    assert chained > 100


def test_hopper_matches_mma_sim_and_is_labelled_reference_model(tmp_path, capsys):
    """jaxwarp's sm_90 model (verified on an H100) agrees with MMA-Sim's Hopper here."""
    path = _subset(tmp_path, "hopper.npz", HOPPER)
    out = tmp_path / "r.json"
    assert conformance.main([path, "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    (group,) = report["files"][0]["groups_detail"]
    assert group["group"] == HOPPER[0] and group["source"] == "MMA-Sim 2.1.1 (reference model)"
    n = group["total"]
    assert n == 12 * 16 * 8 and group["matched"] == n
    assert report["files"][0]["device"].startswith("MMA-Sim 2.1.1")
    assert list(report["by_source"]) == ["MMA-Sim 2.1.1 (reference model)"]
    assert report["files"][0]["sources"] == ["MMA-Sim 2.1.1 (reference model)"]
    text = capsys.readouterr().out
    assert text.startswith(f"# {path} (outputs of MMA-Sim 2.1.1 (reference model, not "
                           f"hardware); ")
    assert f"= golden/mma: {n}/{n} bit-exact (100.000%), matches MMA-Sim 2.1.1 " \
           f"(reference model)" in text
    assert text.strip().splitlines()[-1] == (
        f"conformance: {n}/{n} bit-exact (100.000%) [matches MMA-Sim 2.1.1 (reference "
        f"model): {n}/{n} (100.000%)]")


def test_a_flipped_bit_is_a_mismatch_kept_apart_from_hardware(tmp_path, capsys):
    def flip(keep):
        dkey = f"{HOPPER[0]}/D"
        keep[dkey] = keep[dkey].copy()
        keep[dkey][3, 2, 1] ^= 1

    path = _subset(tmp_path, "flipped.npz", HOPPER[:1], flip)
    hw = np.load(DATA / "h100_warp.npz")
    hw_path = tmp_path / "hw.npz"
    np.savez(hw_path, **{k: hw[k] for k in ("device", "cvt_x", "cvt_out")})
    assert conformance.main([path, str(hw_path)]) == 1
    lines = capsys.readouterr().out.strip().splitlines()
    row = next(x for x in lines if x.startswith(f"  {HOPPER[0]} "))
    assert "MISMATCH" in row and "mismatching trials by kind: " in row
    n = int(row.split()[1])
    assert row.split()[2] == str(n - 1)
    m = re.search(r"\[matches hardware: (\d+)/(\d+) \(100\.000%\); matches MMA-Sim 2\.1\.1 "
                  r"\(reference model\): (\d+)/(\d+) \(", lines[-1])
    assert m and m[1] == m[2] and (int(m[3]), int(m[4])) == (n - 1, n)


def test_not_modelled_is_counted_never_passed(tmp_path, capsys, monkeypatch):
    """A configuration without a model here (Hopper with sm_90 taken out of ARCHS) is
    counted, listed and exits 2; it is never passed."""
    monkeypatch.setattr(arch, "ARCHS", {k: v for k, v in arch.ARCHS.items()
                                        if not k.startswith("sm_90")})
    z = np.zeros
    q = "golden/mma/Hopper/m16n8k16.f32.f16.f16.f32"
    keep = {"device": np.str_("MMA-Sim 2.1.1 (reference model, not hardware)"),
            f"{q}/A": z((2, 16, 16), np.uint16), f"{q}/B": z((2, 16, 8), np.uint16),
            f"{q}/C": z((2, 16, 8), np.uint32), f"{q}/D": z((2, 16, 8), np.uint32)}
    path = tmp_path / "bs.npz"
    np.savez(path, **keep)
    by, _ = _results(str(path))
    r = by[q]
    assert r.not_modelled and not r.ok and not r.error and r.total == 256 and r.matched == 0
    assert conformance.main([str(path)]) == 2
    out = capsys.readouterr().out
    assert re.search(re.escape(q) + r"\s+256\s+-\s+-\s+NOT MODELLED", out)
    assert out.strip().splitlines()[-1] == (
        "conformance: nothing was compared [matches MMA-Sim 2.1.1 (reference model): 0/0 "
        "(-)]; 1 group(s) with 256 elements NOT MODELLED in this version (not compared)")


def _bad(tmp_path, edit):
    path = _subset(tmp_path, "bad.npz", HOPPER[:1], edit)
    results, _ = conformance.check_file(path)
    errors = [r for r in results if r.error]
    assert len(errors) == 1, results
    return errors[0].error


def _rename(old, new):
    def edit(keep):
        for k in [k for k in keep if k.startswith(old + "/")]:
            keep[new + k[len(old):]] = keep.pop(k)
    return edit


def _short_key_only(keep):
    for k in [k for k in keep if k.startswith(HOPPER[0] + "/")]:
        del keep[k]
    keep["golden/mma/Hopper/D"] = np.zeros(3)


def _fp8_as_ampere(keep):
    """Ada's fp8 group relabelled as Ampere's (which has no fp8 tensor cores)."""
    ada = "golden/mma/Ada_Lovelace/m16n8k32.f32.e4m3.e4m3.f32"
    d = np.load(DATA / "mmasim_golden_mma.npz")
    for k in [k for k in keep if k.startswith(HOPPER[0] + "/")]:
        del keep[k]
    keep.update({"golden/mma/Ampere" + k[len("golden/mma/Ada_Lovelace"):]: d[k]
                 for k in _groups(d)[ada]})


@pytest.mark.parametrize(("edit", "says"), [
    (_rename(HOPPER[0], "golden/mma/Hopper/m16n8k16.f32.xx.bf16.f32"),
     r"golden/mma/Hopper/m16n8k16\.f32\.xx\.bf16\.f32: A type 'xx' unknown"),
    (_rename(HOPPER[0], "golden/mma/Hopper/16x8x16.f32.bf16.bf16.f32"),
     r"does not start with a shape"),
    (_rename(HOPPER[0], "golden/mma/Pascal/m16n8k16.f32.bf16.bf16.f32"),
     r"architecture 'Pascal' unknown"),
    (_rename(HOPPER[0], "golden/wmma/Hopper/m16n8k16.f32.bf16.bf16.f32"),
     r"family 'wmma' unknown"),
    (lambda keep: keep.pop(f"{HOPPER[0]}/C"),
     re.escape(f"missing field(s) ['{HOPPER[0]}/C']")),
    (lambda keep: keep.update({f"{HOPPER[0]}/A": keep[f"{HOPPER[0]}/A"][:, :, :8]}),
     re.escape(f"{HOPPER[0]}/A has shape (12, 16, 8); the qualifier says (T, 16, 16)")),
    (lambda keep: keep.update({f"{HOPPER[0]}/D": keep[f"{HOPPER[0]}/D"][:5]}),
     re.escape(f"{HOPPER[0]}/D has 5 trials; {HOPPER[0]}/A has 12")),
    (lambda keep: keep.update({f"{HOPPER[0]}/C": keep[f"{HOPPER[0]}/C"].view(np.float32)}),
     re.escape(f"{HOPPER[0]}/C: f32 is stored as uint32; got float32")),
    (lambda keep: keep.update({f"{HOPPER[0]}/extra": np.zeros(3)}),
     re.escape(f"field(s) ['{HOPPER[0]}/extra'] are not in the schema")),
    (_short_key_only,
     r"key 'golden/mma/Hopper/D' is not golden/\{family\}"),
    (_fp8_as_ampere, r"Ampere cannot issue it: mma_sync with e4m3 operands needs sm_89"),
], ids=["type", "shape", "arch", "family", "missing", "shape_mismatch", "trials", "dtype",
        "unknown_field", "short_key", "arch_cannot_issue"])
def test_malformed_groups_are_errors_naming_the_key(tmp_path, edit, says):
    assert re.search(says, _bad(tmp_path, edit))


def test_model_status_reads_the_catalogue():
    status = handlers_golden.model_status
    assert status(G.parse_golden_name("mma", "Hopper", "m16n8k8.f32.tf32.tf32.f32")) == ""
    assert status(G.parse_golden_name(
        "mma", "RTX_Blackwell", "m16n8k32.kind::f8f6f4.f32.e2m1.e3m2.f32")) == ""
    assert status(G.parse_golden_name(
        "mma_block_scale", "RTX_Blackwell",
        "m16n8k64.kind::mxf4.block32.f32.e2m1.e2m1.f32.ue8m0")) == ""
    tc = G.parse_golden_name("tcgen05", "Blackwell", "m64n8k16.kind::f16.f32.bf16.bf16")
    assert (status(tc) == "") == ("bf16" in isa.a_formats("tcgen05"))
    blackwell = G.parse_golden_name("mma", "Blackwell", "m16n8k16.f32.bf16.bf16.f32")
    assert (status(blackwell) == "") == ("sm_100a" in arch.ARCHS)


# --------------------------------------------------------------------------------------
# Every group of the committed files (slow: about two minutes of compilation).


def _cases():
    for name in FILES:
        d = np.load(DATA / name)
        for group in sorted(_groups(d)):
            yield pytest.param(name, group, marks=pytest.mark.slow,
                               id=f"{name.split('_')[-1][:-4]}-{group[7:]}")


@pytest.fixture(scope="module")
def checked():
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = _results(str(DATA / name))[0]
        return cache[name]

    return get


@pytest.mark.parametrize(("name", "group"), list(_cases()))
def test_every_modelled_configuration_matches_mma_sim(checked, name, group):
    """Strict for every configuration jaxwarp models (catalogue row + ArchModel); the
    others must be reported NOT MODELLED with their element count, never passed."""
    r = checked(name)[group]
    why = handlers_golden.model_status(G.parse_golden_name(*group.split("/")[1:]))
    assert not r.error, r.error
    if why:
        assert r.not_modelled and r.total > 0 and not r.ok and r.note == why
    else:
        assert r.ok and r.total > 0, f"{r.matched}/{r.total} ({r.note})"
