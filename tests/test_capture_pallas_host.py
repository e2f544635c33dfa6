"""tools/capture/capture_pallas.py on the host (no GPU): the input generators give finite
values of their format from a seed, the entries' names and meta follow the recorded
sample's, the plans have no duplicate, the PTX probe reads instructions off an XLA dump,
and --trim-sample leaves an already trimmed sample as it is."""

import json
import pathlib
import sys

import numpy as np
import pytest
from conftest import DATA

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tools" / "capture"))
import capture_pallas as cp  # noqa: E402

SAMPLE = DATA / "pallas_sample.npz"


def test_selftest_runs(capsys):
    cp.selftest()
    assert "selftest ok" in capsys.readouterr().out


@pytest.mark.parametrize("t", sorted({cp.OPERAND.get(t, t) for t in cp.DTYPES}))
@pytest.mark.parametrize("kind", cp.KINDS)
def test_inputs_are_seeded_finite_values_of_their_format(t, kind):
    a = cp.draw(np.random.default_rng([3, 1]), t, (32, 48), kind)
    b = cp.draw(np.random.default_rng([3, 1]), t, (32, 48), kind)
    np.testing.assert_array_equal(a, b)
    assert a.dtype == cp.RAW[t]
    v = cp.from_bits(a, t)
    assert np.isfinite(v).all() and np.abs(v).max() <= cp.FLOATS[t][2]
    np.testing.assert_array_equal(cp.to_bits(v, t), a)
    if kind == "wide":
        lo, hi = cp.WIDE_EXP[t]
        e = np.floor(np.log2(np.abs(v[v != 0])))
        assert e.min() >= lo - 1 and e.max() <= hi  # subnormal rounding may reach lo - 1
        assert (v < 0).any() and e.max() - e.min() > (hi - lo) // 2


def test_names_and_meta_are_the_samples():
    d = np.load(SAMPLE)
    for key in [k for k in d.files if k.startswith("pallas/") and k.endswith("/meta")]:
        want = json.loads(str(d[key]))
        cfg = cp.TritonCfg(want["dtype"], want["bm"], want["bn"], want["bk"],
                           want["num_warps"], want["form"])
        assert key == f"pallas/{cfg.name}/t0/meta"
        got = json.loads(cfg.meta(want["kind"], 0, "0.11.2"))
        assert list(got)[:len(want)] == list(want)
        assert {k: got[k] for k in ("dtype", "bm", "bn", "bk", "form", "num_warps")} == {
            k: want[k] for k in ("dtype", "bm", "bn", "bk", "form", "num_warps")}
    want = json.loads(str(d["pallas_mgpu/f16_128x128x64/meta"]))
    cfg = cp.MgpuCfg("hopper_matmul", "f16", (512, 512, 1024, 128, 128, 64, 2))
    got = cp.mgpu_meta(cfg, "positive", 0, "0.11.2")
    assert list(got)[:len(want)] == list(want)
    assert {**got, "M": 128, "N": 128, "seed": None} == {**want, "seed": None}
    assert cfg.name.startswith("f16_128x128x64")


def test_plans_have_distinct_names_and_mgpu_inputs_follow_meta():
    for plan in (cp.triton_plan(), cp.triton_plan(small=True), cp.probe_plan()):
        names = [(c.name, c.form) for c in plan]
        assert len(set(names)) == len(names)
    for cfg in cp.mgpu_plan():
        meta = cp.mgpu_meta(cfg, "wide", 0, "x")
        x = cp.mgpu_inputs(cfg, meta, "wide", np.random.default_rng(0))
        if "group_sizes" in x:
            assert x["group_sizes"].sum() == meta["M"] and (x["group_sizes"] > 0).all()
        if cfg.kernel == "hopper_matmul":
            assert x["a"].shape == (meta["M"], meta["K"]) and ("c" in x) == cfg.with_c


def test_probe_reads_the_instructions_of_its_module(tmp_path):
    ptx = "  wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {...};\n" * 3
    (tmp_path / "module_0003.jit_probe_1.ptx").write_text(ptx + "ldmatrix.sync.aligned.x4;")
    (tmp_path / "module_0004.jit_probe_12.ptx").write_text(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {...};")
    counts, files = cp.read_dump(tmp_path, 1)
    assert files == ["module_0003.jit_probe_1.ptx"]
    assert counts == {"wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16": 3,
                      "ldmatrix.sync.aligned.x4": 1}
    assert cp.summarize(counts) == "wgmma"
    counts, _ = cp.read_dump(tmp_path, 12)
    assert cp.summarize(counts) == "mma.sync"
    assert cp.read_dump(tmp_path, 2) == ({}, [])


def test_trim_sample_keeps_a_trimmed_sample_as_it_is(tmp_path):
    out = tmp_path / "again.npz"
    cp.trim_sample(str(SAMPLE), str(out))
    a, b = np.load(SAMPLE), np.load(out)
    assert sorted(a.files) == sorted(b.files)
    for k in a.files:
        assert a[k].dtype == b[k].dtype
        np.testing.assert_array_equal(a[k], b[k])


def _entry_keys(cfg, meta_text, x, out):
    return {**x, "out": out, "meta": np.asarray(meta_text)}


def test_every_planned_entry_is_read_by_the_conformance_handler():
    # What the tool writes, the handler reads: meta, inputs and out of every configuration
    # of the plans (out as zeros of the entry's type and shape).
    from jaxwarp._src.conformance.handlers import pallas as handler

    rng = np.random.default_rng(0)
    for cfg in cp.triton_plan(small=True) + [c for c in cp.triton_plan() if c.bm == 128]:
        m, n, k = cfg.shape
        for kind in cp.KINDS:
            x = {"a": cp.draw(rng, cfg.operand, (m, k), kind),
                 "b": cp.draw(rng, cfg.operand, (k, n), kind)}
            if cfg.form in cp.FORMS_WITH_C:
                x["c"] = cp.draw(rng, "f32", (m, n), kind)
            group = f"pallas/{cfg.name}/t0"
            case = handler.parse_meta(cfg.meta(kind, 0, "0.11.2"), "pallas", group)
            d = {f"{group}/{s}": v for s, v in _entry_keys(
                cfg, cfg.meta(kind, 0, "0.11.2"), x, np.zeros((m, n), np.uint32)).items()}
            got = handler.decode(d, group, {"a", "b", "out", "meta", *x}, case)
            assert set(got) == {"a", "b", "out", *x} and case.kernel == "triton_matmul"
            assert case.meta.get("precision", "default") == (
                "highest" if cfg.dtype == "f32_highest" else "default")
    for cfg in cp.mgpu_plan() + cp.mgpu_plan(small=True):
        meta = cp.mgpu_meta(cfg, "wide", 0, "0.11.2")
        x = cp.mgpu_inputs(cfg, meta, "wide", rng)
        shape = x["q"].shape if "q" in x else (meta["M"], meta["N"])
        group = f"{cfg.family}/{cfg.name}" + ("/t1" if cfg.family == "pallas" else "_wide")
        assert handler.is_pallas_key(f"{group}/out")
        case = handler.parse_meta(json.dumps(meta), cfg.family, group)
        out = np.zeros(shape, cp.RAW[cfg.dtype])
        d = {f"{group}/{s}": v for s, v in _entry_keys(cfg, json.dumps(meta), x, out).items()}
        got = handler.decode(d, group, {"out", "meta", *x}, case)
        assert case.kernel == cfg.kernel and set(got) == {"out", *x}, cfg.name


def test_probe_pivot_reads_the_choice_at_a_glance():
    rows = [{"dtype": "bf16", "bm": bm, "bn": 64, "bk": 32, "num_warps": w,
             "uses": "wgmma" if bm == 64 and w == 4 else "mma.sync"}
            for bm in (16, 64) for w in (1, 4)]
    rows.append({"dtype": "bf16", "bm": 16, "bn": 16, "bk": 32, "num_warps": 8,
                 "uses": "rejected"})
    lines = cp.pivot(rows)
    i = lines.index("bf16, bk=32, by num_warps:")
    assert lines[i + 1:] == ["                1 4 8",
                             "  bm=16  bn=16      x",
                             "  bm=16  bn=64  m m  ",
                             "  bm=64  bn=64  m W  "]
