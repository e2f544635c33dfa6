"""AMD's wave64 MFMA register layouts (``jaxwarp.mfma_lane_map``) against AMD's Matrix
Instruction Calculator: ``tests/data/mfma_register_layouts.npz`` keeps its
``--matrix-layout`` output for A, B and D of all 64 instructions (C is laid out as D, as
the calculator prints it). A check against AMD's tool, not against hardware."""

import numpy as np
import pytest
from conftest import DATA

import jaxwarp
from jaxwarp._src.catalogue import mfma_table


def _calculator():
    z = np.load(DATA / "mfma_register_layouts.npz")
    offs, ent = z["offsets"], z["entries"]
    return {str(k): ent[offs[i]:offs[i + 1]].reshape(64, -1, 3)
            for i, k in enumerate(z["keys"])}


def test_every_layout_matches_amd_matrix_instruction_calculator():
    calc = _calculator()
    assert len(calc) == 3 * len(mfma_table.ROWS) == 192
    for key, want in calc.items():
        gen, suffix, matrix = key.split("/")
        got = jaxwarp.mfma_lane_map(suffix, matrix, arch=gen)
        np.testing.assert_array_equal(got, want, err_msg=key)
        if matrix == "D":
            np.testing.assert_array_equal(jaxwarp.mfma_lane_map(suffix, "C", arch=gen), want)


@pytest.mark.parametrize("suffix, arch", [("f32_16x16x32_fp8_bf8", "gfx942"),
                                          ("f64_4x4x4f64", "gfx90a"),
                                          ("f32_32x32x1f32", "gfx908")])
def test_each_element_sits_in_one_lane_item(suffix, arch):
    row = mfma_table.mfma_row(suffix, arch)
    for matrix, (r, c) in (("A", (row.m, row.k)), ("B", (row.k, row.n)),
                           ("D", (row.m, row.n))):
        m = jaxwarp.mfma_lane_map(suffix, matrix, arch=arch).reshape(-1, 3)
        flat = (m[:, 0] * r + m[:, 1]) * c + m[:, 2]
        np.testing.assert_array_equal(np.sort(flat), np.arange(row.blocks * r * c))


def test_bad_matrix_lists_the_allowed():
    with pytest.raises(ValueError, match=r"matrix='E'.*allowed.*'A', 'B', 'C', 'D'"):
        jaxwarp.mfma_lane_map("f32_16x16x16_f16", "E")
