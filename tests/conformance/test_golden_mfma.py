"""AMD reference-model files (``golden/mfma/...``, MMA-Sim 2.1.1's ``mmasim.amd.MFMA``).

``tests/data/mmasim_golden_mfma.npz`` is a trimmed copy of a sample written by the
cross-check tool: every configuration of the three generations, trials of every input kind
for the 4x4 and 16x16 blocks, ``specials`` for the 32x32 ones. The default run compares
one configuration of each datapath of each generation; ``-m slow`` compares them all. A
match is "matches MMA-Sim (reference model)", never hardware.
"""

import collections

import numpy as np
import pytest
from conftest import DATA

from jaxwarp import conformance
from jaxwarp._src.catalogue import mfma_table
from jaxwarp._src.conformance import golden_keys as G

FILE = DATA / "mmasim_golden_mfma.npz"


def _groups(d) -> dict[str, list[str]]:
    out = collections.defaultdict(list)
    for k in d.files:
        if k.startswith("golden/"):
            out[k.rsplit("/", 1)[0]].append(k)
    return out


def _subset(tmp_path, groups, edit=None):
    d = np.load(FILE)
    keep = {"device": d["device"]}
    for g in groups:
        keep.update({k: d[k] for k in _groups(d)[g]})
    if edit is not None:
        edit(keep)
    path = tmp_path / "mfma_subset.npz"
    np.savez(path, **keep)
    return str(path)


def _check(path):
    results, _ = conformance.check_file(path)
    return {r.group: r for r in results}


def test_file_holds_every_configuration():
    d = np.load(FILE)
    assert str(d["device"]).startswith("MMA-Sim 2.1.1")
    groups = set(_groups(d))
    want = {f"golden/mfma/{g}/{s}" for g, s in mfma_table.ROWS}
    assert groups == want
    assert len(want) == 64
    for group, keys in _groups(d).items():
        G.parse_golden_name(*group.split("/")[1:])
        assert {k.rsplit("/", 1)[1] for k in keys} == {"A", "B", "C", "D", "kind"}
    assert FILE.stat().st_size < 700 * 2**10


def _one_per_datapath() -> list[str]:
    """The smallest configuration of each (generation, datapath, A and B formats)."""
    best = {}
    for (g, s), row in mfma_table.ROWS.items():
        key = (g, row.datapath, row.a_format, row.b_format)
        if key not in best or row.m * row.n * row.k < best[key][0]:
            best[key] = (row.m * row.n * row.k, f"golden/mfma/{g}/{s}")
    picked = sorted(v for _, v in best.values())
    # fp8 and bf8: one mixed pair stands for the four.
    return [p for p in picked if not p.endswith(("bf8_bf8", "fp8_fp8", "bf8_fp8"))]


def test_one_configuration_per_datapath_matches_mma_sim(tmp_path):
    groups = _one_per_datapath()
    assert len(groups) == 14
    res = _check(_subset(tmp_path, groups))
    assert set(res) == set(groups)
    for g, r in res.items():
        assert not r.error and not r.not_modelled, (g, r)
        assert r.matched == r.total > 0, (g, r.matched, r.total, r.note)
        assert "counted as NaN" not in r.note, (g, r.note)  # NaN payloads too, bit for bit
        assert r.source == "MMA-Sim 2.1.1 (reference model)"


@pytest.mark.slow
def test_every_configuration_matches_mma_sim():
    res = _check(str(FILE))
    assert len(res) == 64
    bad = {g: (r.matched, r.total, r.error, r.note) for g, r in res.items()
           if r.error or r.matched != r.total or "counted as NaN" in r.note}
    assert not bad, bad


def test_nan_bits_count_only_where_mma_sim_defines_them(tmp_path):
    """CDNA3's truncated sums write MMA-Sim's NaN 0x7FFFFFFF: other NaN bits there are a
    mismatch. The fma chain's NaN carries the host's payload: any NaN matches (a note)."""
    trunc, fma = "golden/mfma/CDNA3/f32_4x4x4_16b_f16", "golden/mfma/CDNA1/f32_4x4x1f32"

    def edit(keep):
        for g in (trunc, fma):
            dd = keep[f"{g}/D"].copy()
            i = np.argwhere(np.isnan(dd.view(np.float32)))[0]
            assert dd[tuple(i)] != 0x7FC00001
            dd[tuple(i)] = 0x7FC00001  # another NaN
            keep[f"{g}/D"] = dd

    res = _check(_subset(tmp_path, [trunc, fma], edit))
    assert res[trunc].matched == res[trunc].total - 1
    assert res[fma].matched == res[fma].total
    assert "counted as NaN" in res[fma].note


def test_a_wrong_bit_is_a_mismatch(tmp_path):
    g = "golden/mfma/CDNA1/f32_4x4x4f16"

    def edit(keep):
        dd = keep[f"{g}/D"].copy()
        i = np.argwhere(~np.isnan(dd.view(np.float32)))[0]
        dd[tuple(i)] ^= 1
        keep[f"{g}/D"] = dd

    r = _check(_subset(tmp_path, [g], edit))[g]
    assert r.matched == r.total - 1


def test_unknown_suffix_and_arch_are_capture_errors(tmp_path):
    g = "golden/mfma/CDNA1/f32_4x4x4f16"

    def edit(keep):
        for f in ("A", "B", "C", "D", "kind"):
            keep[f"golden/mfma/CDNA2/f32_16x16x32_fp8_fp8/{f}"] = keep[f"{g}/{f}"]
            keep[f"golden/mfma/CDNA4/f32_4x4x4f16/{f}"] = keep[f"{g}/{f}"]

    res = _check(_subset(tmp_path, [g], edit))
    assert "not an MFMA of CDNA2" in res["golden/mfma/CDNA2/f32_16x16x32_fp8_fp8"].error
    assert "CDNA4" in res["golden/mfma/CDNA4/f32_4x4x4f16"].error
