"""Every public name of 0.1.0 still resolves: directly, or (a name renamed since) with a
DeprecationWarning that names its replacement.

The names are copied here as data from 0.1.0's ``jaxwarp/__init__.py`` and its public
submodules (``jaxwarp.dpx``, ``jaxwarp.conformance``, ``jaxwarp.wmma_table``).
"""

import importlib
import warnings

import pytest

import jaxwarp

NAMES_010 = {
    "jaxwarp": (
    "FULL_MASK", "WARP_SIZE", "activemask", "lane_id", "nanosleep", "shfl_sync",
    "shfl_up_sync", "shfl_down_sync", "shfl_xor_sync", "reduce_sync", "reduce_add_sync",
    "reduce_min_sync", "reduce_max_sync", "reduce_and_sync", "reduce_or_sync",
    "reduce_xor_sync", "ballot_sync", "any_sync", "all_sync", "match_any_sync",
    "match_all_sync", "Format", "FORMATS", "get_format", "round_to", "float2half_rn",
    "float2half_rz", "float2bfloat16_rn", "float2bfloat16_rz", "float_to_tf32",
    "half2float", "bfloat162float", "bits", "from_bits", "Fragment", "fragment",
    "fill_fragment", "load_matrix_sync", "store_matrix_sync", "mma_sync", "bmma_sync",
    "matrix_to_memory", "fragment_from_matrix", "matrix_from_fragment", "lane_map",
    "lane_map_text", "wmma_table", "ARCHS", "ArchParams", "mma", "bmma", "matmul",
    "to_operand", "batch_mesh", "shard_batch", "sharded_vmap", "dpx", "checked"
    ),
    "jaxwarp.dpx": (
    "DPX_FUNCTIONS", "DPX_PRED_FUNCTIONS", "viaddmax_s16x2", "viaddmax_s16x2_relu",
    "viaddmax_s32", "viaddmax_s32_relu", "viaddmax_u16x2", "viaddmax_u32",
    "viaddmin_s16x2", "viaddmin_s16x2_relu", "viaddmin_s32", "viaddmin_s32_relu",
    "viaddmin_u16x2", "viaddmin_u32", "vibmax_s16x2", "vibmax_s32", "vibmax_u16x2",
    "vibmax_u32", "vibmin_s16x2", "vibmin_s32", "vibmin_u16x2", "vibmin_u32",
    "vimax3_s16x2", "vimax3_s16x2_relu", "vimax3_s32", "vimax3_s32_relu", "vimax3_u16x2",
    "vimax3_u32", "vimax_s16x2_relu", "vimax_s32_relu", "vimin3_s16x2",
    "vimin3_s16x2_relu", "vimin3_s32", "vimin3_s32_relu", "vimin3_u16x2", "vimin3_u32",
    "vimin_s16x2_relu", "vimin_s32_relu"
    ),
    "jaxwarp.conformance": (
    "CaptureError", "GroupResult", "check_file", "main"
    ),
    "jaxwarp.wmma_table": (
    "USES", "LAYOUTS", "MEM_LAYOUTS", "BMMA_OPS", "Shape", "ElementType", "ELEMENT_TYPES",
    "MULTIPLICAND_TYPES", "ACCUMULATOR_TYPES", "WmmaEntry", "TABLE", "shape_name",
    "describe", "all_shapes", "parse_arch", "entry", "check_fragment", "check_mma"
    ),
}
#: Renamed since 0.1.0: old name -> what the warning must name.
RENAMED = {
    ("jaxwarp", "bits"): "jaxwarp.to_bits",
    ("jaxwarp", "ArchParams"): "jaxwarp.ArchModel",
    ("jaxwarp.wmma_table", "parse_arch"): "jaxwarp.parse_target(arch).sm",
}


def _module(path):
    return jaxwarp.wmma_table if path == "jaxwarp.wmma_table" else importlib.import_module(path)


@pytest.mark.parametrize("path, name", [(p, n) for p, names in NAMES_010.items()
                                        for n in names])
def test_name_of_010_resolves(path, name):
    module = _module(path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = getattr(module, name)
    assert value is not None
    deprecations = [w for w in caught if issubclass(w.category, DeprecationWarning)]
    if (path, name) in RENAMED:
        assert deprecations, f"{path}.{name} resolves without a DeprecationWarning"
        assert RENAMED[(path, name)] in str(deprecations[0].message)
    else:
        assert not deprecations, [str(w.message) for w in deprecations]


def test_renamed_names_are_the_replacements():
    with pytest.warns(DeprecationWarning, match="use jaxwarp.to_bits"):
        assert jaxwarp.bits is jaxwarp.to_bits
    with pytest.warns(DeprecationWarning, match="use jaxwarp.ArchModel"):
        assert jaxwarp.ArchParams is jaxwarp.ArchModel
    with pytest.warns(DeprecationWarning, match="parse_target"):
        assert jaxwarp.wmma_table.parse_arch("sm_90a") == 90
    assert "bits" not in jaxwarp.__all__  # not listed as a current name
    with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
        jaxwarp.no_such_name  # noqa: B018
