"""The switchboard (``jaxwarp.config``): options validate, overrides nest and restore,
environment variables parse, an option changes which path runs but not the bits, and
the layers read it instead of module globals."""

from __future__ import annotations

import ast
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxwarp
from jaxwarp._src import config as config_module
from jaxwarp._src.arithmetic import datapath
from jaxwarp._src.config import OPTIONS, Config, config, keyed_jit

SRC = pathlib.Path(jaxwarp.__file__).parent / "_src"


def test_public_is_the_one_instance():
    assert jaxwarp.config is config
    assert set(config.values()) == {o.name for o in OPTIONS}


@pytest.mark.parametrize(("name", "value", "allowed"), [
    ("gemm_fused_kernel", "sometimes", "'auto', 'on', 'off'"),
    ("gemm_shared", "on", "'auto', 'off'"),
    ("arith_block_form", "looped", "'unrolled', 'rolled', 'reduce'"),
    ("warp_kernel_output_scatter", "scatter", "'store', 'onehot'"),
    ("warp_kernel_backend", "pallas", "'auto', 'triton', 'mosaic_gpu'"),
    ("native_mgpu_order", "hilbert", "'snake', 'grid', 'persistent'"),
    ("gemm_exact_tensor_cores", "on", "'off', 'auto'"),
    ("gemm_kernel_unroll_small", 3, "1, 2, 4, 8, 16"),
    ("gemm_kernel_unroll_small", "4", "1, 2, 4, 8, 16"),  # a string is not the int
    ("gemm_fused_min_macs", -1, "an integer >= 0"),
    ("gemm_fused_min_macs", 1.5, "an integer >= 0"),
    ("gemm_fused_min_macs", True, "an integer >= 0"),
    ("gemm_promote_after", -0.5, "seconds >= 0, or None"),
])
def test_bad_value_names_the_option_and_the_allowed(name, value, allowed):
    before = config.values()
    for set_it in (lambda: config.update(name, value),
                   lambda: config.override(**{name: value}).__enter__()):
        with pytest.raises(ValueError) as e:
            set_it()
        assert f"{name}={value!r}" in str(e.value) and allowed in str(e.value)
    assert config.values() == before


def test_unknown_name_lists_the_options():
    for get in (lambda: config.no_such_option, lambda: config.update("no_such_option", 1),
                lambda: config.override(no_such_option=1).__enter__()):
        with pytest.raises(AttributeError) as e:
            get()
        assert "no_such_option" in str(e.value)
        assert all(o.name in str(e.value) for o in OPTIONS)
    with pytest.raises(AttributeError, match="update"):
        config.gemm_shared = "off"  # not by assignment


def test_override_nests_and_restores():
    assert config.gemm_shared == "auto" and config.arith_block_form == "unrolled"
    with config.override(gemm_shared="off"):
        assert config.gemm_shared == "off"
        with config.override(arith_block_form="rolled", gemm_shared="auto"):
            assert (config.gemm_shared, config.arith_block_form) == ("auto", "rolled")
        assert (config.gemm_shared, config.arith_block_form) == ("off", "unrolled")
        with pytest.raises(RuntimeError), config.override(arith_block_form="reduce"):
            raise RuntimeError  # restored after an exception too
        assert config.arith_block_form == "unrolled"
    assert config.gemm_shared == "auto"


def test_update_and_override():
    try:
        config.update("gemm_fused_min_macs", 5)
        assert config.gemm_fused_min_macs == 5
        with config.override(gemm_fused_min_macs=7):
            assert config.read("gemm_fused_min_macs") == 7
        assert config.gemm_fused_min_macs == 5
    finally:
        config.update("gemm_fused_min_macs", 1 << 24)


def test_environment_variables(monkeypatch):
    monkeypatch.setenv("JAXWARP_GEMM_SHARED", "off")
    monkeypatch.setenv("JAXWARP_GEMM_KERNEL_UNROLL_SMALL", "4")
    monkeypatch.setenv("JAXWARP_GEMM_FUSED_MIN_MACS", "0x100")
    monkeypatch.setenv("JAXWARP_GEMM_PROMOTE_AFTER", "None")
    c = Config(OPTIONS)
    assert (c.gemm_shared, c.gemm_kernel_unroll_small, c.gemm_fused_min_macs,
            c.gemm_promote_after) == ("off", 4, 256, None)
    assert c.arith_block_form == "unrolled"  # the rest: their defaults
    monkeypatch.setenv("JAXWARP_GEMM_PROMOTE_AFTER", "1.5")
    assert Config(OPTIONS).gemm_promote_after == 1.5
    for env, value, allowed in (("JAXWARP_GEMM_KERNEL_UNROLL_SMALL", "3", "1, 2, 4"),
                                ("JAXWARP_GEMM_KERNEL_UNROLL_SMALL", "x", "1, 2, 4"),
                                ("JAXWARP_ARITH_FAST_STORE_REUSE", "many", ">= 0")):
        monkeypatch.setenv(env, value)
        with pytest.raises(ValueError, match=allowed):
            Config(OPTIONS)
        monkeypatch.delenv(env)


def test_describe_lists_every_option():
    table = config.describe()
    assert all(f"`{o.name}`" in table for o in OPTIONS)


def test_keyed_jit_traces_again_when_an_option_changes():
    traces = []

    @keyed_jit
    def f(x):
        traces.append(config.arith_block_form)
        return x + 1

    f(1), f(2)
    with config.override(arith_block_form="rolled"):
        f(3)
    f(4)
    assert traces == ["unrolled", "rolled"]


def _bits(x):
    return np.asarray(x).view(np.uint32)


def _jaxpr(f, *args) -> str:
    # a new function each time: make_jaxpr, like a user's jax.jit, caches by function
    return str(jax.make_jaxpr(lambda *x: f(*x))(*args))


def _bf16(rng, shape):
    return jnp.asarray(rng.standard_normal(shape), jnp.float32).astype(jnp.bfloat16)


def test_block_form_changes_the_program_not_the_bits():
    rng = np.random.default_rng(1)
    a, b = _bf16(rng, (16, 32)), _bf16(rng, (32, 16))
    c = jnp.asarray(rng.standard_normal((16, 16)), jnp.float32)

    def f(a, b, c):
        return datapath.mma(a, b, c, a_format="bf16", c_format="f32", d_format="f32")

    out, loops = {}, {}
    for form in ("unrolled", "rolled"):
        with config.override(arith_block_form=form):
            loops[form] = _jaxpr(f, a, b, c).count("scan[")
            out[form] = _bits(f(a, b, c))
    assert loops["rolled"] > loops["unrolled"]  # the terms summed by loops
    np.testing.assert_array_equal(out["rolled"], out["unrolled"])


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="the CPU's shared executables")
def test_shared_changes_where_the_loop_runs_not_the_bits():
    rng = np.random.default_rng(2)
    a = jnp.asarray(rng.standard_normal((32, 48)), jnp.float32)
    b = jnp.asarray(rng.standard_normal((48, 16)), jnp.float32)

    def f(a, b):
        return jaxwarp.matmul(a, b, operand_format="bf16")

    out, callbacks = {}, {}
    for mode in ("auto", "off"):
        with config.override(gemm_shared=mode):
            text = _jaxpr(f, a, b)  # (the CPU's callback is a buffer_callback)
            callbacks[mode] = text.count("pure_callback") + text.count("buffer_callback")
            out[mode] = _bits(f(a, b))  # matmul's own jit is keyed on the options
    assert callbacks["auto"] >= 1 and callbacks["off"] == 0
    np.testing.assert_array_equal(out["auto"], out["off"])


def test_in_range_path_changes_the_program_not_the_bits():
    rng = np.random.default_rng(3)
    a, b = _bf16(rng, (2, 16, 32)), _bf16(rng, (2, 32, 16))
    a = a.at[1, 0, 0].set(jnp.bfloat16(2.0 ** 100))  # one product out of fp32's range
    c = jnp.zeros((2, 16, 16), jnp.float32)

    def f(a, b, c):
        return datapath.mma(a, b, c, a_format="bf16", c_format="f32", d_format="f32")

    out, conds = {}, {}
    for mode in ("off", "on"):
        with config.override(arith_in_range_path=mode):
            conds[mode] = _jaxpr(f, a, b, c).count("cond[")
            out[mode] = _bits(f(a, b, c))
    assert conds["on"] > conds["off"]
    np.testing.assert_array_equal(out["on"], out["off"])


# The module globals that the options replaced: no module of the GEMM or arithmetic layer
# assigns them (nor datapath's NATIVE, the registry native mode went through).
OLD_SWITCHES = {"SHARED", "PROMOTE_AFTER", "FUSED_KERNEL", "_FUSED_MIN_MACS", "ROLLED_BELOW",
                "UNROLL_SMALL", "ANY_RANGE_BELOW", "STORE_DECODED", "_FAST_STORE_REUSE",
                "_GENERAL_STORE_REUSE_MAX", "IN_RANGE_PATH", "_IN_RANGE_MIN_MACS",
                "_IN_RANGE_MIN_MACS_ACCELERATOR", "BLOCK_FORM", "NATIVE"}


def _module_assignments(path: pathlib.Path) -> set[str]:
    names = set()
    for node in ast.parse(path.read_text()).body:
        targets = (node.targets if isinstance(node, ast.Assign)
                   else [node.target] if isinstance(node, ast.AnnAssign) else [])
        for t in targets:
            for n in ast.walk(t):
                if isinstance(n, ast.Name):
                    names.add(n.id)
    return names


def _layer_modules():
    return sorted([*(SRC / "gemm").glob("*.py"), *(SRC / "arithmetic").glob("*.py")])


def test_no_module_global_switches():
    found = {f"{p.parent.name}/{p.name}: {n}" for p in _layer_modules()
             for n in _module_assignments(p) & OLD_SWITCHES}
    assert not found, f"switches as module globals (read jaxwarp.config instead): {found}"
    assert "keyed_jit" in config_module.__all__


# Modules that still import a sibling's private name (not yet moved to the public ones).
PRIVATE_IMPORTS_LEFT: set[str] = set()


def test_no_private_names_imported_across_modules():
    found = []
    for p in _layer_modules():
        if p.name in PRIVATE_IMPORTS_LEFT:
            continue
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("jaxwarp"):
                found += [f"{p.name}: {node.module}.{a.name}" for a in node.names
                          if a.name.startswith("_") and a.name != "__future__"]
            if isinstance(node, ast.ImportFrom) and node.module == "jaxwarp._src.arithmetic":
                found += [f"{p.name}: import {a.name} as {a.asname}" for a in node.names
                          if a.asname and a.asname != a.name]
    assert not found, f"private names imported across modules: {found}"


ROOT = pathlib.Path(__file__).resolve().parents[1]
SCRIPT_FOLDERS = ("benchmarks", "experiments", "tools")


def _python_files(*folders: str) -> list[pathlib.Path]:
    return sorted(p for f in folders for p in (ROOT / f).rglob("*.py"))


def test_scripts_use_only_public_names():
    # Benchmarks, experiments and tools import jaxwarp's public surface, never jaxwarp._src.
    found = []
    for p in _python_files(*SCRIPT_FOLDERS):
        for node in ast.walk(ast.parse(p.read_text())):
            names = ([node.module or ""] if isinstance(node, ast.ImportFrom)
                     else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            found += [f"{p.relative_to(ROOT)}:{node.lineno}" for n in names
                      if n.startswith("jaxwarp._src")]
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                    "jaxwarp._src" in node.value:
                found.append(f"{p.relative_to(ROOT)}:{node.lineno} (in a string)")
    assert not found, f"jaxwarp._src used outside the package: {found}"


def _module_attribute_assignments(path: pathlib.Path) -> list[str]:
    """``module.NAME = value`` statements whose target is an upper-case attribute: the
    form of a switch flipped from outside its module."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and \
                        t.value.id not in ("self", "cls") and \
                        t.attr.lstrip("_")[:1].isupper() and t.attr.lstrip("_").isupper():
                    out.append(f"{path.name}:{node.lineno} {t.value.id}.{t.attr}")
    return out


def test_no_switch_is_assigned_from_outside():
    # Nothing outside the switchboard assigns a module's upper-case global (the old
    # switches): tests, benchmarks, experiments and tools set jaxwarp.config instead.
    found = [a for p in _python_files("jaxwarp", "tests", *SCRIPT_FOLDERS)
             for a in _module_attribute_assignments(p)]
    assert not found, found


def test_switch_scan_sees_an_assignment(tmp_path):
    # The scan itself on a known bad line.
    bad = tmp_path / "probe.py"
    bad.write_text("import m\nm.SHARED = 'off'\nm.lower = 1\nself.X = 2\n")
    assert _module_attribute_assignments(bad) == ["probe.py:2 m.SHARED"]


def _private_attribute_uses(path: pathlib.Path) -> list[str]:
    """``module._name`` where ``module`` was imported from jaxwarp: a private name reached
    across modules."""
    tree = ast.parse(path.read_text())
    mods = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("jaxwarp"):
            mods |= {a.asname or a.name for a in n.names}
        elif isinstance(n, ast.Import):
            mods |= {(a.asname or a.name).split(".")[0] for a in n.names
                     if a.name.startswith("jaxwarp")}
    return [f"{path.name}:{n.lineno} {n.value.id}.{n.attr}" for n in ast.walk(tree)
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
            and n.value.id in mods and n.attr.startswith("_") and not n.attr.startswith("__")]


def test_no_private_names_reached_across_modules():
    # Neither ``from m import _x`` (above) nor ``m._x``, anywhere in the package.
    found = [u for p in sorted((ROOT / "jaxwarp").rglob("*.py"))
             for u in _private_attribute_uses(p)]
    assert not found, found


def test_private_attribute_scan_sees_a_use(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("from jaxwarp._src.gemm import matmul\nmatmul._x(1)\nmatmul.y\n")
    assert _private_attribute_uses(probe) == ["probe.py:2 matmul._x"]
