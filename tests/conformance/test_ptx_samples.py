"""PTX-level H100 samples: every family must be bit-exact.

The samples (tests/data/h100_{ptx,chain,movcvt}_sample.npz, built by make_samples.py
from the captures of tools/capture/FORMAT_{PTX,WGMMA,MOVCVT}.md, whole trials, the
``device`` key kept) are run once per file; each family is its own test (by default on a
spread of the larger files' configurations, ``SPREAD``). A family that
waits on the datapath (``datapath_lacks`` names what) is a strict xfail: it turns into
a failure as soon as the datapath can run it, so the mark has to go then.
"""

import functools
import pathlib
import tempfile

import numpy as np
import pytest
from conftest import DATA

from jaxwarp import conformance
from jaxwarp._src.conformance import keys

SAMPLES = ("h100_ptx_sample.npz", "h100_chain_sample.npz", "h100_movcvt_sample.npz")


def _family(key: str) -> str:
    parts = key.split("/")
    return "/".join(parts[:2]) if parts[0] == "chain" else parts[0]


def _pending(name: str, family: str) -> str:
    """What the datapath lacks for some configuration of the family ('' if nothing)."""
    d = np.load(DATA / name)
    lacks = set()
    for k in d.files:
        sk = keys.split_key(k)
        if sk and sk[0] == family and sk[2] == "D":
            cfg = keys.parse_mma_name(family.split("/")[-1], sk[1], family.startswith("chain"))
            lacks.add(conformance.datapath_lacks(cfg))
    return "; ".join(sorted(x for x in lacks if x))


def _cases():
    for name in SAMPLES:
        d = np.load(DATA / name)
        for fam in sorted({_family(k) for k in d.files if k != "device"}):
            why = _pending(name, fam)
            marks = [pytest.mark.xfail(strict=True, reason=f"datapath lacks {why}")] if why else []
            yield pytest.param(name, fam, marks=marks, id=f"{name.split('.')[0]}-{fam}")


# By default these files are checked on a spread of each family's configurations (every
# n-th group of keys, and the groups test_not_recorded_forms_are_listed_not_passed needs),
# the whole file with -m slow.
SPREAD = {"h100_ptx_sample.npz": 2, "h100_movcvt_sample.npz": 2}
_ALWAYS = {"cvt/cvt.rn.e4m3x2.f32", "cvt/cvt.rn.bf16x2.e4m3x2", "ldmatrix/x4.misaligned2"}


@functools.cache
def _run(name: str, every: int | None = None):
    """The conformance check of a sample: ``every`` as in SPREAD (None: the default's)."""
    every = SPREAD.get(name, 1) if every is None else every
    if every == 1:
        return conformance.check_file(str(DATA / name))
    d = np.load(DATA / name)
    groups = sorted({k.rsplit("/", 1)[0] for k in d.files if "/" in k})
    kept = set(_ALWAYS)
    for fam in {_family(g) for g in groups}:
        kept.update([g for g in groups if _family(g) == fam][::every])
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / name
        np.savez(path, **{k: d[k] for k in d.files
                          if "/" not in k or k.rsplit("/", 1)[0] in kept})
        return conformance.check_file(str(path))


def _family_params():
    for p in _cases():
        name = p.values[0]
        yield pytest.param(*p.values, None, marks=p.marks, id=p.id)
        if name in SPREAD:
            yield pytest.param(*p.values, 1, marks=[*p.marks, pytest.mark.slow],
                               id=f"{p.id}-whole")


@pytest.mark.parametrize(("name", "family", "every"), list(_family_params()))
def test_family_is_bit_exact(name, family, every):
    results, device = _run(name, every)
    assert "H100" in device
    mine = [r for r in results if r.family == family]
    assert mine, f"no group of family {family} was checked"
    bad = [r for r in mine if not r.ok]
    assert not bad, "\n".join(
        f"{r.group}: {r.matched}/{r.total} {r.error or r.note}" for r in bad)
    assert sum(r.total for r in mine if not r.skipped) > 0


# Slow: by default each family's test fails on a group it cannot run (this test, in
# another worker, would run every sample again).
@pytest.mark.slow
def test_every_sample_key_is_understood():
    for name in SAMPLES:
        results, _ = _run(name)
        assert not [r.group for r in results if r.error], name


def test_samples_are_small():
    for name in SAMPLES:
        assert (DATA / name).stat().st_size < 1_500_000, name


def test_chain_sample_has_a_k4096_fp8_chain():
    d = np.load(DATA / "h100_chain_sample.npz")
    for fam in ("ptx", "wgmma"):
        a = [k for k in d.files if k.startswith(f"chain/{fam}/e4m3.") and "x128/A" in k]
        assert a and d[a[0]].shape[-1] == 4096, fam


# By default on the groups the rule names (and each family's first group); on the
# default's spread of the file with -m slow.
@pytest.mark.parametrize("every", [pytest.param(10**9, id="named"),
                                   pytest.param(None, marks=pytest.mark.slow, id="spread")])
def test_not_recorded_forms_are_listed_not_passed(every):
    results, _ = _run("h100_movcvt_sample.npz", every)
    skipped = [r for r in results if r.skipped]
    assert {r.group for r in skipped} >= {"cvt/cvt.rn.e4m3x2.f32", "cvt/cvt.rn.bf16x2.e4m3x2",
                                          "ldmatrix/x4.misaligned2"}
    assert all(r.total == 0 and "not recorded" in r.note for r in skipped)
