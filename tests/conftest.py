"""Test configuration.

Strict dtype promotion is on everywhere, so an implicit promotion in the library
fails loudly. 64-bit mode stays off (a user's default); tests of 64-bit features
turn it on locally with ``jax.enable_x64(True)``.

Long tests (the largest capture file, the studies, models trained through ``emulate``,
long property runs, more parametrizations of a rule the default run covers) carry
``@pytest.mark.slow`` and are left out of a run without ``-m``, unless named by their id
(``path::test``); ``python -m pytest -n auto -m slow`` runs them, and
``-m "slow or not slow"`` runs everything. ``DEFAULT_CASES`` below names the long
parametrizations whose default run is a spread of their cases: the others of each are
marked slow here, at collection. ``slow_by_cost.txt`` lists the default tests that took
longer than a threshold in a measured run (``tools/slow_by_cost.py`` writes it): they
are marked slow too, so that the default run stays within minutes on 2 cores.
"""

import pathlib

import jax
import numpy as np
import pytest

jax.config.update("jax_numpy_dtype_promotion", "strict")

DATA = pathlib.Path(__file__).parent / "data"


# Parametrized tests whose default run is a part of their cases (each a rule that the
# default run still checks; the other cases, more shapes, types or files of the same rule,
# are marked slow). Key: the test's node id without parameters. Value: the number of cases
# kept, spread evenly over the cases in collection order (the first and last included), or
# the ids of the cases kept.
DEFAULT_CASES: dict[str, int | tuple[str, ...]] = {
    # Committed capture samples and new-instruction cross-checks: one or two of each.
    "tests/conformance/test_ptx_samples.py::test_family_is_bit_exact": (
        "h100_ptx_sample-ptx",),
    "tests/conformance/test_conformance.py::test_capture_is_bit_exact": (
        "capture_extra_subnormal.npz-every2", "h100_mma_int.npz-every3"),
    "tests/scaling/test_mx.py::test_nvfp4_matches_reference": ("0-rn",),
    # MX against the reference: every format and every scale rule, not every pair.
    "tests/scaling/test_mx.py::test_mx_matches_reference": 6,
    "tests/scaling/test_mx.py::test_stochastic_rounding_matches_reference": 2,
    "tests/scaling/test_mx.py::test_torchao_mx_golden": 5,
    "tests/instructions/test_tcgen05.py::test_descriptor_path_equals_logical": 1,
    # tcgen05 against MMA-Sim: each kind, both D types, every fp8 / fp6 / fp4 operand type.
    "tests/instructions/test_tcgen05.py::test_logical_matches_mmasim": (
        "m64n8k16.kind::f16.f16.f16.f16", "m64n8k16.kind::f16.f32.bf16.bf16",
        "m64n8k8.kind::tf32.f32.tf32.tf32", "m64n8k32.kind::f8f6f4.f32.e4m3.e5m2",
        "m64n8k32.kind::f8f6f4.f16.e5m2.e4m3", "m64n8k32.kind::f8f6f4.f32.e2m1.e2m1",
        "m64n8k32.kind::f8f6f4.f16.e3m2.e2m3", "m64n8k32.kind::f8f6f4.f32.e4m3.e3m2",
        "m64n8k32.kind::f8f6f4.f16.e2m1.e5m2", "m64n8k32.kind::f8f6f4.f32.e2m3.e2m1"),
    # Bit-exact against the H100 captures: a spread of types, shapes and modifiers.
    "tests/arithmetic/test_datapath.py::test_float_bit_exact": 6,
    "tests/arithmetic/test_datapath.py::test_int_bit_exact": 5,
    "tests/arithmetic/test_datapath.py::test_f64_native_chain_equals_integer_chain": (
        "nan", "1e+300"),
    "tests/arithmetic/test_datapath.py::test_f64_native_chain_against_hardware": 1,
    # Every field of the datapath changes bits (that the values are right, the bit-exact
    # tests check): a spread of the fields.
    "tests/arithmetic/test_datapath.py::test_every_datapath_field_changes_bits": (
        "block_k", "c_mode", "align", "e_floor", "trunc", "sum_mbits", "nan_f16"),
    "tests/arithmetic/test_datapath_hw.py::test_bit_exact_on_h100_edges": (
        "f16.f32f32.m16n16k16.rc", "tf32cvt.f32f32.m16n16k8.rc", "ptx/f16.f16.f32f32.m8n8k4",
        "ptx/e4m3.e5m2.f32f32.m16n8k32", "ptx/u8.s8.s32s32.m16n8k32.satfinite",
        "wgmma/e5m2.e5m2.f16f16.m64n8k32", "chain/ptx/f16.f16.f16f16.m16n8k16x4",
        "chain/wgmma/bf16.bf16.f32f32.m64n8k16x4"),
    "tests/instructions/test_mma_sync_ptx.py::test_float_bit_exact_h100": (
        "f16.f16.f32f32.m8n8k4", "f16.f16.f16f16.m16n8k16", "bf16.bf16.f32f32.m16n8k8",
        "tf32.tf32.f32f32.m16n8k8", "f64.f64.f64f64.m8n8k4", "e4m3.e5m2.f32f32.m16n8k32",
        "e5m2.e5m2.f16f16.m16n8k32"),
    "tests/instructions/test_mma_sync_ptx.py::test_integer_and_b1_bit_exact_h100": 5,
    "tests/instructions/test_mma_sync_ptx.py::test_register_entry_equals_logical_entry": (
        "f16.f16.f32f32.m8n8k4", "u4.s4.s32s32.m16n8k64.satfinite",
        "b1.b1.s32s32.m8n8k128.and"),
    "tests/instructions/test_wgmma.py::test_h100_bit_exact": (
        "f16.f16.f32f32.m64n8k16", "f16.f16.f32f32.m64n8k16.ta.tb.sw128",
        "f16.f16.f32f32.m64n8k16.areg", "f16.f16.f32f32.m64n8k16.negA",
        "f16.f16.f32f32.m64n8k16.scaled0", "f16.f16.f16f16.m64n8k16"),
    "tests/instructions/test_wmma.py::test_mma_sync_on_captures": 5,
    "tests/arithmetic/test_reference.py::test_model_matches_reference": (
        "f16_f16f32_m16n16k16", "bf16_f32f32_m16n16k16", "s8_s32s32_m16n16k16_satf",
        "u4_s32s32_m8n8k32", "b1_s32s32_m8n8k128_xor"),
    "tests/arithmetic/test_reference.py::test_reference_matches_captures": 12,
    "tests/arithmetic/test_store_decoded.py::test_same_bits_on_off_auto": ("wmma-f16xf16",),
    "tests/arithmetic/test_store_decoded.py::test_gemm_same_bits_on_off": ("bf16",),
    "tests/warp/test_dpx.py::test_matches_h100": 6,
    "tests/warp/test_dpx.py::test_public_functions_match_h100": 6,
    "tests/numerics/test_narrow_formats.py::test_round_to_matches_the_reference": 5,
    "tests/warp/test_lanes.py::test_gradients": ("idx", "bfly"),
    "tests/layouts/test_ldmatrix.py::test_fragment_layout_element_by_element": (
        "x1", "x4.trans"),
    "tests/layouts/test_ldmatrix.py::test_stmatrix_inverts_ldmatrix": ("x2.trans", "x4"),
    "tests/numerics/test_fp8.py::test_every_16_bit_pattern_rounds_as_the_reference": 4,
    "tests/numerics/test_formats.py::test_rounding_is_idempotent": 3,
    "tests/numerics/test_formats.py::test_rounding_is_monotonic_and_odd": 3,
    "tests/numerics/test_fp8.py::test_f32_ties_boundaries_and_random_bits": 2,
    "tests/numerics/test_fp8.py::test_every_fp8_pattern_round_trips": 1,
    "tests/numerics/test_fp8.py::test_relu": 1,
    "tests/numerics/test_fp8.py::test_x2_forms_are_two_independent_lanes": 1,
    "tests/numerics/test_fp8.py::test_saturation_overflow_and_zero_boundaries": 6,
    # Layouts, addresses and packing against the capture harnesses' formulas.
    "tests/instructions/test_mma_sync_ptx.py::test_layout_matches_capture_harness": 24,
    "tests/instructions/test_mma_sync_ptx.py::test_pack_matches_harness_and_round_trips": 7,
    "tests/layouts/test_layouts.py::test_mma_layouts_are_the_ptx_formulas": 24,
    "tests/layouts/test_layouts.py::test_wgmma_layouts_are_the_ptx_formulas": 16,
    "tests/instructions/test_wgmma.py::test_addresses_match_harness": 18,
    "tests/instructions/test_wgmma.py::test_read_write_vs_harness_images": 6,
    "tests/instructions/test_wgmma.py::test_accumulator_round_trip_and_harness": 2,
    "tests/instructions/test_wgmma.py::test_a_registers_match_harness": 2,
    "tests/layouts/test_fragments.py::test_round_trip_every_fragment_type": 12,
    "tests/layouts/test_fragments.py::test_layout_conformance": 11,
    "tests/layouts/test_fragments.py::test_lane_map_matches_capture": 22,
    "tests/layouts/test_fragment_type.py::test_properties_agree_with_old_fragment": 25,
    "tests/layouts/test_fragment_type.py::test_load_via_type_equals_load_via_zero_fragment":
        10,
    "tests/layouts/test_fragment_type.py::test_lane_maps_from_type_fragment_or_names": 25,
    "tests/instructions/test_wmma.py::test_load_operand": 8,
    "tests/test_capture_ptx_host.py::test_pack_unpack_round_trip": 24,
    "tests/test_capture_ptx_host.py::test_layout_covers_each_element_once": 24,
    "tests/test_capture_wgmma_host.py::test_image_round_trip": 16,
    # Gradients, scaling and contracts: one or two formats of each rule.
    "tests/gemm/test_matmul.py::test_equals_the_fragment_program": ("bf16",),
    "tests/gemm/test_matmul.py::test_fp8_gradients_use_power_of_two_scales": (
        "e4m3-e5m2-1e+30",),
    "tests/gemm/test_matmul.py::test_fp8_chain_equals_reference": 2,
    "tests/test_emulate.py::test_matmul_contract": ("f16",),
    "tests/test_emulate.py::test_tensor_scale_is_the_largest_power_of_two": ("e4m3",),
    "tests/test_emulate.py::test_rescale_is_rounded_once_on_the_bits": ("f32",),
    "tests/test_emulate.py::test_gradient_program_is_backend_independent": (
        "bf16", "fp8-hybrid-scaled"),
    # Narrow-format conversions: every format, not every (format, mode) pair.
    "tests/numerics/test_cvt_narrow.py::test_intrinsic_encode_f16_and_bf16": (
        "e2m3-rn", "e3m2-rz", "e2m1-rn"),
    "tests/numerics/test_cvt_narrow.py::test_ptx_decode_every_code": (
        "e2m3-", "e3m2-relu", "e2m1-"),
    "tests/numerics/test_cvt_narrow.py::test_ptx_encode_dense_f32": (
        "e2m3-", "e3m2-relu", "e2m1-"),
    # Idempotence on every value: a signed and an unsigned format (the reference test
    # takes every format).
    "tests/numerics/test_narrow_formats.py::test_round_to_is_idempotent_on_every_value": (
        "e2m3", "ue8m0"),
    "tests/numerics/test_formats.py::test_jit_and_vmap_any_shape": 2,
    "tests/numerics/test_formats.py::test_float64_rounds_once": (
        "f16-rn-1.0004882812509095", "bf16-rn-1.0039062500009095",
        "tf32-rna-1.0004882812490905", "e4m3-rn-1.0625000000009095"),
    "tests/numerics/test_narrow_formats.py::test_encode_inverts_decode": 3,
    "tests/instructions/test_wmma.py::test_accumulator_load_store_round_trip": (
        "shape0-f16", "shape1-f32", "shape2-s32"),
    "tests/test_entry_points.py::test_format_argument_accepts_names_aliases_and_dtypes": 6,
    "tests/warp/test_dpx.py::test_predicates_match_h100": 6,
    # A fresh interpreter per script (the options of every script are checked in-process).
    "tests/test_experiments.py::test_help": ("matmul_error.py",),
}


def _keep(n: int, count: int) -> set[int]:
    if count >= n:
        return set(range(n))
    if count == 1:
        return {0}
    return {round(i * (n - 1) / (count - 1)) for i in range(count)}


def _mark_default_cases(items, check: bool = True) -> None:
    """Marks the cases of ``DEFAULT_CASES`` beyond the default's slow; with ``check``, a
    named case that was not collected is an error (not checked when the command line names
    cases by id: then only those are collected)."""
    groups: dict[str, list] = {}
    for item in items:
        key = item.nodeid.split("[", 1)[0]
        if key in DEFAULT_CASES and hasattr(item, "callspec"):
            groups.setdefault(key, []).append(item)
    for key, group in groups.items():
        rule = DEFAULT_CASES[key]
        if isinstance(rule, int):
            kept = _keep(len(group), rule)
        else:
            ids = [item.callspec.id for item in group]
            unknown = set(rule) - set(ids)
            if unknown and check:
                raise pytest.UsageError(f"DEFAULT_CASES[{key!r}] names no such case: {unknown}")
            kept = {i for i, case_id in enumerate(ids) if case_id in rule}
        for i, item in enumerate(group):
            if i not in kept:
                item.add_marker(pytest.mark.slow)


# Single long tests that the default run leaves to -m slow, each with the default test
# that still checks its rule.
SLOW_TESTS: dict[str, str] = {
    "tests/test_capture_movcvt_host.py::test_cuda_source_compiles_for_sm_90a":
        "nvcc compiles the capture source (the host-side tests of the tool stay)",
    "tests/test_capture_movcvt_host.py::test_whole_command_against_a_stand_in_gpu":
        "the capture tool's parts are tested one by one by default",
    "tests/test_capture_wgmma_host.py::test_main_orchestration_skips_failing_configurations":
        "the wgmma capture tool's parts are tested one by one by default",
    "tests/test_emulate_models.py::test_nnx_module_as_argument":
        "emulate on Flax linen and Equinox models stays in the default run",
    "tests/test_cutlass_mainloop.py::test_mainloop_equals_logical_gemm":
        "the fragment-level GEMM: test_matmul.py::test_equals_the_fragment_program",
    "tests/conformance/test_conformance.py::test_cli_runs_as_a_module":
        "the command's main() runs in-process in the default tests",
    "tests/test_experiments.py::test_matmul_sampling_is_deterministic":
        "the study's other default tests run the same sampler",
}


# Node ids of default tests measured over the cost threshold (tools/slow_by_cost.py).
SLOW_BY_COST = frozenset(
    line.strip() for line in (pathlib.Path(__file__).parent / "slow_by_cost.txt").read_text()
    .splitlines() if line.strip() and not line.startswith("#"))


def _mark_costly(items) -> None:
    """Marks the tests of ``SLOW_BY_COST`` slow; an id whose test is gone (its file collected,
    no test of that name in the file's module) is an error, so the list cannot go stale
    silently."""
    names: dict[str, set[str]] = {}
    for item in items:
        if item.nodeid in SLOW_BY_COST:
            item.add_marker(pytest.mark.slow)
        file = item.nodeid.split("::", 1)[0]
        if file not in names:
            module = getattr(item, "module", None)
            names[file] = set(vars(module)) if module is not None else set()
    stale = set()
    for node in SLOW_BY_COST:
        file, _, rest = node.partition("::")
        name = rest.split("[", 1)[0].split("::")[0]
        if names.get(file) and name not in names[file]:
            stale.add(node)
    if stale:
        raise pytest.UsageError(f"tests/slow_by_cost.txt names no such test: {sorted(stale)}")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Marks the cases of ``DEFAULT_CASES`` beyond the default's slow, and leaves the tests
    marked slow out of the default run (see the module doc)."""
    _mark_default_cases(items, check=not any("[" in arg for arg in config.args))
    _mark_costly(items)
    known = set()
    for item in items:
        key = item.nodeid.split("[", 1)[0]
        if key in SLOW_TESTS:
            known.add(key)
            item.add_marker(pytest.mark.slow)
    files = {item.nodeid.split("::", 1)[0] for item in items}
    unknown = {k for k in SLOW_TESTS if k.split("::", 1)[0] in files} - known
    if unknown:  # a key whose file was collected must name a test of it
        raise pytest.UsageError(f"SLOW_TESTS names no such test: {unknown}")
    if config.option.markexpr or any("::" in arg for arg in config.args):
        return
    slow = [item for item in items if item.get_closest_marker("slow") is not None]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if item.get_closest_marker("slow") is None]


def fast_dot_rounding() -> str:
    """How the default backend's f16/bf16 ``dot_general`` with fp32 accumulation (what
    ``matmul(..., mode="fast")`` runs) adds its products, for tests of fast mode.

    Returns:
      ``"nearest"`` on a CPU: XLA's CPU dot accumulates in fp32, rounding to nearest, so
      fast mode is not the tensor core's truncating sum. ``"tensor_core"`` on an NVIDIA
      GPU of compute capability 9.x (H100, H200): XLA runs the dot on the tensor cores,
      whose bits the exact model gives (measured for K up to 256 and these tests' sizes).

    Any other backend (another GPU generation, TPU) is not known: the test is skipped
    with a reason that names the device.
    """
    dev = jax.devices()[0]
    if dev.platform == "cpu":
        return "nearest"
    cc = str(getattr(dev, "compute_capability", ""))
    if dev.platform == "gpu" and "nvidia" in dev.device_kind.lower() and cc.startswith("9."):
        return "tensor_core"
    pytest.skip(f"fast mode's rounding is known only on a CPU and on NVIDIA compute "
                f"capability 9.x; this is {dev.platform} {dev.device_kind!r} "
                f"(compute capability {cc or 'unknown'})")


def load_capture(name: str):
    """Loads tests/data/h100_{name}.npz (a subset of the H100 captures)."""
    return np.load(DATA / f"h100_{name}.npz")


@pytest.fixture(scope="session")
def warp_capture():
    return load_capture("warp")


@pytest.fixture(scope="session")
def layout_capture():
    return load_capture("layout")


@pytest.fixture(scope="session")
def mma_fp_capture():
    return load_capture("mma_fp")


@pytest.fixture(scope="session")
def mma_int_capture():
    return load_capture("mma_int")


@pytest.fixture
def triton_warp_kernel():
    """``warp_kernel`` on its Triton backend, for that kernel's tests ("auto" prefers the
    Mosaic GPU kernel where its walk runs a program: tests/warp/test_kernel_mgpu.py)."""
    import jaxwarp

    with jaxwarp.config.override(warp_kernel_backend="triton"):
        yield
