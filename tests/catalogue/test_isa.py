"""The instruction catalogue (isa.ROWS): every other table is a view of it."""

import ast
import dataclasses
import json
import pathlib
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from jaxwarp._src.arithmetic import datapath, datapath_checks
from jaxwarp._src.catalogue import arch, isa, mma_sync_parse, wgmma_parse, wmma_table
from jaxwarp._src.gemm import matmul_tiles
from jaxwarp._src.numerics.formats import FORMATS

ROOT = pathlib.Path(__file__).resolve().parents[2]


# --------------------------------------------------------------------------------------
# The shape and target parsers.


@pytest.mark.parametrize("text, want", [
    ("m16n8k16", (16, 8, 16)), ("m64n256k32", (64, 256, 32)), ("m8n8k128", (8, 8, 128)),
    ("m016n8k16", None), ("m16n08k16", None), ("m16n8k", None), ("mn8k16", None),
    ("m16n8k16 ", None), ("M16N8K16", None), ("m16n8k16x2", None), ("m-16n8k16", None),
    ("m0n8k16", None), ("", None), (16, None),
])
def test_parse_shape_is_strict(text, want):
    assert isa.parse_shape(text) == want
    if want is not None:
        assert isa.shape_name(want) == text


def test_the_shape_parser_is_shared():
    for q in ("m016n8k16.row.col.f32.f16.f16.f32", "m16n8k.row.col.f32.f16.f16.f32"):
        with pytest.raises(ValueError, match="is not a shape like m16n8k16"):
            mma_sync_parse.parse_mma(q)
    with pytest.raises(ValueError, match="is not of the form m64nNkK"):
        wgmma_parse.parse_wgmma("m064n8k16.f32.f16.f16")
    from jaxwarp._src.conformance import keys
    from jaxwarp._src.conformance.registry import CaptureError
    got = keys.parse_mma_name("ptx", "f16.f16.f32f32.m16n8k16")
    assert (got.m, got.n, got.k) == isa.parse_shape("m16n8k16")
    assert keys.parse_mma_name("ptx", "f16.f16.f32f32.m16n8k16x12", chain=True).k == 16
    for bad, chain in (("f16.f16.f32f32.m016n8k16", False),
                       ("f16.f16.f32f32.m16n8k16x2", False),
                       ("f16.f16.f32f32.m16n8k16x", True),
                       ("f16.f16.f32f32.m16n8k16", True)):
        with pytest.raises(CaptureError, match="is not"):
            keys.parse_mma_name("ptx", bad, chain=chain)


@pytest.mark.parametrize("name, want", [
    ("sm_90a", ("sm_90a", 90, True)), ("sm_80", ("sm_80", 80, False)),
    ("sm80", ("sm_80", 80, False)), ("sm_72", ("sm_72", 72, False)),
])
def test_parse_target(name, want):
    assert dataclasses.astuple(arch.parse_target(name)) == want


def test_targets_without_a_model_are_refused_where_a_model_is_needed():
    with pytest.raises(ValueError, match="arch='gfx90a' is not an architecture name"):
        arch.parse_target("gfx90a")
    with pytest.raises(ValueError, match=r"arch='sm_72' is not supported; allowed: \("):
        arch.supported_target("sm_72")
    assert arch.supported_target("sm_90a") == arch.parse_target("sm_90a")


# --------------------------------------------------------------------------------------
# The catalogue is consistent.


def test_rows_are_well_formed():
    fams = set(arch.FAMILIES) | set(isa.EXACT_DATAPATHS)
    for r in isa.ROWS:
        assert r.instruction in isa.INSTRUCTIONS, r
        assert r.pairing in ("same", "mixed") and r.datapath in fams, r
        assert r.shapes and r.cd and r.layouts, r
        for t in r.a_formats + tuple(t for p in r.cd for t in p):
            assert t in FORMATS, t  # every type is a registered format
        for a, b in r.layouts:
            assert a in isa.LAYOUTS and b in isa.LAYOUTS, r


def test_one_datapath_and_target_per_instruction_k():
    """Rows of one (instruction, A type, kind) that share a k agree on the datapath; minimum
    targets do not fall as k grows within a family of one datapath."""
    for ins in isa.INSTRUCTIONS:
        for t in isa.a_formats(ins):
            seen = {}
            for r in isa.rows(ins, t):
                for k in r.ks:
                    assert seen.setdefault((k, r.kind), r.datapath) == r.datapath, (
                        ins, t, k)


def test_every_float_family_is_modelled_where_it_can_be_issued():
    """Every target with a model has a datapath for each float family of every row it
    can issue (sm_90 for all but kind::f8f6f4, which is sm_120a's, and tcgen05, sm_100a's)."""
    for name, model in arch.ARCHS.items():
        target = arch.parse_target(name)
        for r in isa.ROWS:
            if r.datapath in arch.FAMILIES and arch.has(target, r.min_sm, r.arch_specific):
                assert model.datapath(r.datapath) is not None, (name, r)
    assert set(arch.FAMILIES) - {f for f, _ in arch.ARCHS["sm_90"].datapaths} == {
        "mma_sync_f8f6f4", "tcgen05_f16", "tcgen05_tf32", "tcgen05_f8f6f4"}


# --------------------------------------------------------------------------------------
# Every other table is a view of the catalogue.


def test_wmma_table_is_the_wmma_rows():
    assert tuple(e.operand_format for e in wmma_table.TABLE) == isa.a_formats("wmma")
    for e in wmma_table.TABLE:
        (r,) = isa.rows("wmma", e.operand_format)
        assert (e.shapes, e.cd_types, e.min_sm, e.experimental, e.bmma_ops) == (
            r.shapes, r.cd, r.min_sm, r.experimental, r.b1_ops)
        assert {(a[:3], b[:3]) for a in e.a_layouts for b in e.b_layouts} == set(r.layouts)


def test_mma_sync_accepts_exactly_the_rows():
    want = set()
    for r in isa.rows("mma_sync"):
        for t in r.a_formats:
            for (m, n, k), b, (c, d), (al, bl) in (
                    (s, b, cd, lay) for s in r.shapes for b in r.b_formats(t) for cd in r.cd
                    for lay in r.layouts):
                if r.b1_ops:
                    ops = [(False, op) for op, _ in r.b1_ops]
                else:
                    ops = [(False, None)] + ([(True, None)] if r.satfinite else [])
                for sat, op in ops:
                    want.add((m, n, k, al, bl, t, b, c, d, sat, op, r.kind,
                              max([r.min_sm] + [s for o, s in r.b1_ops if o == op])))
    got = {dataclasses.astuple(i) + (i.min_arch,) for i in mma_sync_parse.ALLOWED}
    # 94 that ptxas of CUDA 13.0 accepts for sm_90a, and 50 of kind::f8f6f4 (sm_120a).
    assert got == want and len(mma_sync_parse.mma_instructions()) == len(want) == 94 + 50


def test_wgmma_families_are_the_rows():
    rows = isa.rows("wgmma")
    assert len(wgmma_parse.FAMILIES) == len(rows)
    for r, f in zip(rows, wgmma_parse.FAMILIES.values(), strict=True):
        assert f.a_formats == r.a_formats and f.k == r.ks[0]
        assert {(64, n, f.k) for n in f.n_values} == set(r.shapes)
        assert f.d_formats == tuple(d for c, d in r.cd) and all(c == d for c, d in r.cd)
        assert (f.satfinite, f.float_scale, f.transpose, f.a_in_registers) == (
            r.satfinite, r.scale, r.transpose, r.a_in_registers)
        assert f.bop == (r.b1_ops[0][0] if r.b1_ops else None)


def test_datapath_views():
    for ins in ("mma_sync", "wgmma"):
        for t in isa.a_formats(ins):
            if t in datapath_checks.A_TYPES:
                assert set(datapath_checks.PTX_CD[(ins, t)]) == {p for r in isa.rows(ins, t)
                                                                 for p in r.cd}
    assert set(datapath_checks.COMBOS) == {(t, c, d) for r in isa.rows("wmma")
                                           if r.datapath != "bmma"
                                           for t in r.a_formats for c, d in r.cd}
    for t, dt in datapath_checks.STORAGE_DTYPE.items():
        assert dt == np.dtype(FORMATS[t].storage_dtype)
    for ins in isa.INSTRUCTIONS:
        for t in isa.a_formats(ins):
            for k in {s[2] for s in isa.shapes(ins, t)}:
                assert arch.resolve_instruction_k(ins, t, 4 * k, k) == k
                assert arch.family(ins, t, k) == isa.row_of(
                    ins, t, next(s for s in isa.shapes(ins, t) if s[2] == k)).datapath


def test_element_bits_is_the_register_width():
    # PTX holds an fp6 element in a byte of its own, top two bits zero (.e2m3x2 cvt, every
    # kind::f8f6f4 operand): four to a 32-bit register, never five; e2m1 packs two to a
    # byte (.e2m1x2, kind::mxf4). The width is the format registry's, stated once.
    assert [32 // isa.element_bits(t) for t in ("e2m3", "e3m2", "e2m1", "e4m3")] == [4, 4, 8, 4]
    for ins in isa.INSTRUCTIONS:
        for t in isa.a_formats(ins) + isa.accumulator_types(ins):
            assert isa.element_bits(t) == FORMATS[t].register_bits, (ins, t)


def test_matmul_views():
    for ins, per_format in matmul_tiles.TILES.items():
        for f, tiles in per_format.items():
            assert set(tiles) <= set(isa.shapes(ins, f)), (ins, f)
            assert set(matmul_tiles.ACCUMULATORS[ins][f]) == {
                c for r in isa.rows(ins, f) if set(r.shapes) & set(tiles)
                for c, d in r.cd if c == d}
    assert matmul_tiles.INSTRUCTIONS == isa.INSTRUCTIONS


# Modules outside this test's folders that still name the fp8 tuple FP8_FORMATS (the number
# layer's dict's name); remove each once it reads isa.FP8_TYPES.
_FP8_FORMATS_NOT_YET: set[str] = set()


def test_fp8_formats_have_one_home_and_one_type():
    """numerics.fp8.FP8_FORMATS (a dict, public as jaxwarp.fp8.FP8_FORMATS) is the home;
    isa.FP8_TYPES its names; any other FP8_FORMATS is that very dict."""
    import jaxwarp
    from jaxwarp._src.numerics import fp8

    assert isinstance(fp8.FP8_FORMATS, dict) and jaxwarp.fp8.FP8_FORMATS is fp8.FP8_FORMATS
    assert isa.FP8_TYPES == tuple(fp8.FP8_FORMATS) == ("e4m3", "e5m2")
    for path in sorted((ROOT / "jaxwarp").rglob("*.py")):
        if path.stem in _FP8_FORMATS_NOT_YET:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Assign) and any(
                    getattr(t, "id", None) in ("FP8_FORMATS", "FP8_TYPES")
                    for t in node.targets):
                assert path.stem in ("fp8", "isa"), f"{path.relative_to(ROOT)}:{node.lineno}"


_SRC = ROOT / "jaxwarp" / "_src"


def _module_path(module: str) -> pathlib.Path:
    (path,) = _SRC.rglob(f"{module}.py")
    return path


# Literal (m, n, k) triples that are not instruction facts (lane-layout code of the
# fragment front-ends, bit widths).
_NOT_SHAPES = {("mma_sync_parse", (8, 8, 4)), ("mma_sync_registers", (8, 16, 32)),
               ("datapath", (3, 4, 5)), ("k_loop", (16, 64, 256))}  # k_loop: block groups
_TYPE_NAMES = {"f16", "bf16", "tf32", "f64", "e4m3", "e5m2", "s8", "u8", "s4", "u4", "b1"}


@pytest.mark.parametrize("module", ["arch", "wmma_table", "mma_sync", "mma_sync_parse",
                                    "mma_sync_registers", "wgmma", "wgmma_parse",
                                    "wgmma_registers", "datapath", "datapath_checks",
                                    "datapath_blocks", "datapath_f64", "datapath_int",
                                    "matmul", "matmul_tiles", "matmul_scales", "k_loop"])
def test_no_other_module_has_its_own_table(module):
    """No shape literal, and no dict literal keyed by operand types, outside isa.py."""
    tree = ast.parse(_module_path(module).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Tuple) and len(node.elts) == 3 and all(
                isinstance(e, ast.Constant) and type(e.value) is int for e in node.elts):
            triple = tuple(e.value for e in node.elts)
            assert (module, triple) in _NOT_SHAPES, f"{module}.py:{node.lineno} {triple}"
        if isinstance(node, ast.Dict) and node.keys:
            keys = {k.value for k in node.keys if isinstance(k, ast.Constant)}
            assert len(keys & _TYPE_NAMES) < 2, f"{module}.py:{node.lineno}: {sorted(keys)}"


# Modules outside this test's folders that still state the b1 operations themselves
# (arithmetic/datapath_checks.py: BMMA_OPS); remove each name once it reads isa.B1_OPS.
_B1_OPS_NOT_YET: set[str] = set()


def test_b1_ops_are_stated_once():
    """The b1 operations come from the rows' ``b1_ops``; no module spells the tuple."""
    assert isa.B1_OPS == ("xor", "and")
    assert set(isa.B1_OPS) == {op for r in isa.ROWS for op, _ in r.b1_ops}
    assert wmma_table.BMMA_OPS is isa.B1_OPS
    for path in sorted((ROOT / "jaxwarp").rglob("*.py")):
        if path.stem in _B1_OPS_NOT_YET:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Tuple) and len(node.elts) == 2 and {
                    getattr(e, "value", None) for e in node.elts} == {"xor", "and"}:
                pytest.fail(f"{path.relative_to(ROOT)}:{node.lineno} states the b1 ops; "
                            f"read isa.B1_OPS")


# --------------------------------------------------------------------------------------
# The WMMA table of the docs (docs/support.md; the README links to it).


def _readme_wmma_rows():
    text = (ROOT / "docs" / "support.md").read_text()
    block = text.split("| A/B | C/D | shapes | layouts | arch |", 1)[1].split("\n\n", 1)[0]
    for line in block.strip().splitlines()[1:]:
        yield [c.strip() for c in line.strip("|").split("|")]


def test_readme_wmma_table_is_the_catalogue():
    rows = list(_readme_wmma_rows())
    assert len(rows) == len(isa.rows("wmma"))
    for (ab, cd, shapes, layouts, target), r in zip(rows, isa.rows("wmma"), strict=True):
        assert tuple(ab.split(", ")) == r.a_formats
        assert set(re.findall(r"\b[fs]\d+\b", cd)) == {t for p in r.cd for t in p}
        if r.cd == isa._CD_F16:
            assert "all four" in cd
        assert tuple(isa.parse_shape(s) for s in shapes.split(", ")) == r.shapes
        assert layouts == ("row/col" if len(r.layouts) == 4 else "A row, B col")
        sms = [int(s) for s in re.findall(r"sm_(\d+)", target)]
        assert sms[0] == r.min_sm
        assert sms[1:] == [sm for _, sm in r.b1_ops][1:]
        assert ("experimental" in target) == (r.experimental and not r.b1_ops)


# --------------------------------------------------------------------------------------
# Change a row: errors, docs and the datapath/matmul follow.

_PATCHED = textwrap.dedent('''
    import dataclasses, json
    import jax
    jax.config.update("jax_platforms", "cpu")
    from jaxwarp._src.catalogue import isa
    rows = []
    for r in isa.ROWS:
        if r.instruction == "mma_sync" and r.a_formats == ("bf16",):
            r = dataclasses.replace(r, min_sm=86)              # raise a minimum sm
        if r.instruction == "wmma" and r.a_formats == ("f16",):
            r = dataclasses.replace(r, cd=tuple(p for p in r.cd if p != ("f16", "f32")))
        if r.instruction == "wgmma" and r.a_formats == isa.FP8_TYPES:
            r = dataclasses.replace(r, shapes=tuple((64, n, 64) for _, n, _ in r.shapes))
        rows.append(r)
    isa.ROWS = tuple(rows)
    import importlib
    import jax.numpy as jnp
    from jaxwarp._src.catalogue import arch, mma_sync_parse, wgmma_parse, wmma_table
    from jaxwarp._src.arithmetic import datapath, datapath_checks
    from jaxwarp._src.gemm import matmul, matmul_scales, matmul_tiles
    from jaxwarp._src.instructions import mma_sync, wgmma
    from jaxwarp._src.layouts import mma_sync_registers, wgmma_registers
    for mod in (arch, wmma_table, datapath_checks, datapath, mma_sync_parse,
                mma_sync_registers, mma_sync, wgmma_parse, wgmma_registers, wgmma,
                matmul_tiles, matmul_scales, matmul):
        importlib.reload(mod)  # this interpreter only: rebuild the views of the rows
    out = {"table": isa.support_table(), "errors": {}}
    def err(name, fn):
        try:
            fn()
            out["errors"][name] = None
        except (ValueError, TypeError) as e:
            out["errors"][name] = str(e)
    bf = jnp.ones((16, 16), jnp.bfloat16); h = jnp.ones((16, 16), jnp.float16)
    c32 = jnp.zeros((16, 16), jnp.float32); c16 = jnp.zeros((16, 16), jnp.float16)
    err("ptx_bf16_sm80", lambda: mma_sync.mma_sync_ptx_logical("m16n8k16.row.col.f32.bf16.bf16.f32",
        bf, bf[:, :8], c32[:, :8], arch="sm_80"))
    err("ptx_bf16_sm86", lambda: mma_sync.mma_sync_ptx_logical("m16n8k16.row.col.f32.bf16.bf16.f32",
        bf, bf[:, :8], c32[:, :8], arch="sm_86"))
    err("mma_bf16_sm80", lambda: datapath.mma(bf, bf, c32, a_format="bf16", c_format="f32",
        d_format="f32", instruction="mma_sync", arch="sm_80"))
    err("matmul_bf16_sm80", lambda: matmul.matmul(c32 + 1, c32 + 1, operand_format="bf16",
        instruction="mma_sync", arch="sm_80"))
    err("wmma_f16_f32", lambda: wmma_table.check_mma("f16", "f16", "f32", (16, 16, 16)))
    err("mma_f16_f32", lambda: datapath.mma(h, h, c16, a_format="f16", c_format="f16",
        d_format="f32"))
    err("wgmma_k32", lambda: wgmma_parse.parse_wgmma("m64n8k32.f32.e4m3.e4m3"))
    err("wgmma_k64", lambda: wgmma_parse.parse_wgmma("m64n8k64.f32.e4m3.e4m3"))
    out["combos"] = [list(c) for c in datapath_checks.COMBOS]
    out["tile_e4m3"] = list(matmul_tiles.TILES["wgmma"]["e4m3"][0])
    out["min_arch"] = mma_sync_parse.parse_mma("m16n8k16.row.col.f32.bf16.bf16.f32").min_arch
    out["wmma_cd"] = [list(p) for p in wmma_table.entry("f16").cd_types]
    out["fp8_k"] = wgmma_parse.FAMILIES["fp8"].k
    a8 = jnp.ones((64, 128), jnp.float8_e4m3fn); b8 = jnp.ones((128, 8), jnp.float8_e4m3fn)
    d = datapath.mma(a8, b8, jnp.zeros((64, 8), jnp.float32), a_format="e4m3", c_format="f32",
                     d_format="f32", instruction="wgmma", arch="sm_90a")
    out["wgmma_fp8_k128"] = float(d[0, 0])
    err("wgmma_fp8_k32", lambda: datapath.mma(a8[:, :32], b8[:32], jnp.zeros((64, 8),
        jnp.float32), a_format="e4m3", c_format="f32", d_format="f32", instruction="wgmma",
        arch="sm_90a"))
    print(json.dumps(out))
''')


@pytest.fixture(scope="module")
def patched():
    """Runs the front-ends on a changed catalogue in a fresh interpreter (module-level
    views are built at import: that interpreter rebuilds them after the change)."""
    res = subprocess.run([sys.executable, "-c", _PATCHED], capture_output=True, text=True,
                         cwd=ROOT, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_raised_minimum_sm_is_followed(patched):
    e = patched["errors"]
    assert patched["min_arch"] == 86
    assert "needs sm_86 or newer" in e["ptx_bf16_sm80"] and e["ptx_bf16_sm86"] is None
    assert "needs sm_86" in e["mma_bf16_sm80"]
    assert "needs sm_86" in e["matmul_bf16_sm80"]
    assert "| mma_sync | bf16 | m16n8k8, m16n8k16 | f32/f32 | sm_86 |" in patched["table"]
    assert "| mma_sync | bf16 | m16n8k8, m16n8k16 | f32/f32 | sm_80 |" in isa.support_table()


def test_removed_cd_pair_is_followed(patched):
    e = patched["errors"]
    assert "c_format='f16', d_format='f32'" in e["wmma_f16_f32"]
    assert "valid for f16" in e["wmma_f16_f32"]
    assert "('f16', 'f16', 'f32')" in e["mma_f16_f32"]  # the message names the types
    assert ["f16", "f16", "f32"] not in patched["combos"]
    assert ["f16", "f32"] not in patched["wmma_cd"]
    line = next(s for s in patched["table"].splitlines() if s.startswith("| wmma | f16 |"))
    assert "f16/f32" not in line and "f16/f32" in next(
        s for s in isa.support_table().splitlines() if s.startswith("| wmma | f16 |"))


def test_changed_k_is_followed(patched):
    e = patched["errors"]
    assert patched["fp8_k"] == 64 and patched["tile_e4m3"] == [64, 8, 64]
    assert "K must be 64" in e["wgmma_k32"] and e["wgmma_k64"] is None
    assert patched["wgmma_fp8_k128"] == 128.0  # two chained k64 instructions
    assert "k = 32 is not a multiple" in e["wgmma_fp8_k32"]
    assert "m64nNk64" in patched["table"]


def test_unpatched_catalogue():
    """The same facts on the real catalogue: what the patched run changed."""
    assert mma_sync_parse.parse_mma("m16n8k16.row.col.f32.bf16.bf16.f32").min_arch == 80
    wmma_table.check_mma("f16", "f16", "f32", (16, 16, 16))
    assert ("f16", "f16", "f32") in datapath_checks.COMBOS
    assert wgmma_parse.FAMILIES["fp8"].k == 32
    assert matmul_tiles.TILES["wgmma"]["e4m3"][0] == (64, 8, 32)


# --------------------------------------------------------------------------------------
# Minimum targets per shape (where the old tables disagreed).


@pytest.mark.parametrize("ins, t, k, want", [
    ("mma_sync", "f16", 4, (70, False)), ("mma_sync", "f16", 8, (75, False)),
    ("mma_sync", "f16", 16, (80, False)), ("mma_sync", "f64", 4, (80, False)),
    ("mma_sync", "f64", 16, (90, False)), ("mma_sync", "e4m3", 16, (89, False)),
    ("wgmma", "f16", 16, (90, True)), ("wmma", "s8", 16, (72, False)),
])
def test_min_target_per_shape(ins, t, k, want):
    assert isa.min_target(ins, t, k) == want


def test_datapath_checks_the_target_of_the_instruction_k():
    a = np.ones((16, 16), np.float16)
    c = np.zeros((16, 16), np.float32)
    kw = dict(a_format="f16", c_format="f32", d_format="f32", instruction="mma_sync")
    datapath.mma(a, a, c, arch="sm_75", instruction_k=8, **kw)
    with pytest.raises(ValueError, match=r"at k = 16 \(m16n8k16\) needs sm_80 or newer"):
        datapath.mma(a, a, c, arch="sm_75", **kw)
