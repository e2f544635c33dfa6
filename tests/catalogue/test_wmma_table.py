"""The WMMA support table: contents, lookups and error messages."""

import itertools
import re

import pytest

from jaxwarp._src.catalogue import wmma_table as table
from jaxwarp._src.catalogue.arch import parse_target
from jaxwarp._src.catalogue.wmma_table import TABLE

USE_LETTER = {"matrix_a": "a", "matrix_b": "b", "accumulator": "c"}


def fragment_keys():
    """layout.npz-style keys of every fragment type the table allows."""
    keys = set()
    for e in TABLE:
        for shape in e.shapes:
            name = table.shape_name(shape)
            for use in ("matrix_a", "matrix_b"):
                for layout in e.layouts(use):
                    keys.add(f"{USE_LETTER[use]}.{e.operand_format}.{name}.{layout[0]}")
            for acc in e.accumulator_types:
                keys.add(f"c.{acc}.{name}")
    return keys


def test_table_covers_every_captured_fragment(layout_capture):
    captured = {k for k in layout_capture.files if k != "device"}
    allowed = fragment_keys()
    assert captured <= allowed
    # The capture holds u8 only for m16n16k16; everything else in the table is captured.
    assert {k for k in allowed - captured if ".u8." not in k} == set()


def test_f16_has_all_four_accumulator_pairings():
    e = table.entry("f16")
    assert set(e.cd_types) == set(itertools.product(("f16", "f32"), repeat=2))
    for c, d in e.cd_types:
        for shape in e.shapes:
            table.check_mma("f16", c, d, shape, "sm_70")


@pytest.mark.parametrize(
    "operand_format,shapes,cd,min_sm",
    [
        ("bf16", ((16, 16, 16), (32, 8, 16), (8, 32, 16)), ("f32", "f32"), 80),
        ("tf32", ((16, 16, 8),), ("f32", "f32"), 80),
        ("f64", ((8, 8, 4),), ("f64", "f64"), 80),
        ("s8", ((16, 16, 16), (32, 8, 16), (8, 32, 16)), ("s32", "s32"), 72),
        ("u8", ((16, 16, 16), (32, 8, 16), (8, 32, 16)), ("s32", "s32"), 72),
        ("s4", ((8, 8, 32),), ("s32", "s32"), 75),
        ("u4", ((8, 8, 32),), ("s32", "s32"), 75),
    ],
)
def test_entries(operand_format, shapes, cd, min_sm):
    e = table.entry(operand_format)
    assert e.shapes == shapes and e.cd_types == (cd,) and e.min_sm == min_sm
    table.check_mma(operand_format, *cd, shapes[0], f"sm_{min_sm}")
    with pytest.raises(ValueError, match=f"needs sm_{min_sm}"):
        table.check_mma(operand_format, *cd, shapes[0], f"sm_{min_sm - 1}")


@pytest.mark.parametrize("t", ["s4", "u4", "b1"])
def test_sub_byte_layouts(t):
    e = table.entry(t)
    assert e.experimental and e.a_layouts == ("row_major",) and e.b_layouts == ("col_major",)
    shape = e.shapes[0]
    with pytest.raises(ValueError, match=r"layout='col_major'.*allowed: \('row_major',\)"):
        table.check_fragment("matrix_a", *shape, t, "col_major")
    with pytest.raises(ValueError, match=r"layout='row_major'.*allowed: \('col_major',\)"):
        table.check_fragment("matrix_b", *shape, t, "row_major")


def test_error_lists_valid_shapes():
    msg = ("unsupported WMMA combination (a_format='f16', shape=(16, 16, 8)); valid for f16: "
           "m16n16k16, m32n8k16, m8n32k16")
    with pytest.raises(ValueError, match=re.escape(msg)):
        table.entry("f16", (16, 16, 8))
    with pytest.raises(ValueError, match=re.escape(msg)):
        table.check_fragment("matrix_a", 16, 16, 8, "f16", "row_major")
    with pytest.raises(ValueError, match="valid for bf16: .*c_format='f32', d_format='f32'"):
        table.check_mma("bf16", "f16", "f16", (16, 16, 16))
    with pytest.raises(ValueError, match="valid shapes: m16n16k16"):
        table.check_fragment("accumulator", 16, 16, 32, "f32", None)
    with pytest.raises(ValueError, match="valid WMMA A/B types: f16, bf16"):
        table.check_fragment("matrix_a", 16, 16, 16, "e4m3", "row_major")


def test_accumulator_types_per_shape():
    table.check_fragment("accumulator", 16, 16, 16, "s32", None)
    table.check_fragment("accumulator", 16, 16, 8, "f32", None)
    with pytest.raises(ValueError, match=r"valid: \('f32',\)"):
        table.check_fragment("accumulator", 16, 16, 8, "f16", None)
    with pytest.raises(ValueError, match="accumulator fragments have no layout"):
        table.check_fragment("accumulator", 16, 16, 16, "f32", "row_major")
    with pytest.raises(ValueError, match="layout is required"):
        table.check_fragment("matrix_b", 16, 16, 16, "f16", None)
    with pytest.raises(ValueError, match="use='matrix_c'"):
        table.check_fragment("matrix_c", 16, 16, 16, "f16", None)


def test_bmma_ops():
    table.check_mma("b1", "s32", "s32", (8, 8, 128), "sm_75", bmma_op="xor")
    table.check_mma("b1", "s32", "s32", (8, 8, 128), "sm_80", bmma_op="and")
    with pytest.raises(ValueError, match="needs sm_80"):
        table.check_mma("b1", "s32", "s32", (8, 8, 128), "sm_75", bmma_op="and")
    with pytest.raises(ValueError, match="bmma_sync"):
        table.check_mma("b1", "s32", "s32", (8, 8, 128), "sm_90")
    with pytest.raises(ValueError, match="bmma_sync takes b1"):
        table.check_mma("s4", "s32", "s32", (8, 8, 32), "sm_90", bmma_op="xor")


def test_parse_arch():
    assert parse_target("sm_90").sm == 90
    assert parse_target("sm_90a").sm == 90
    assert parse_target("sm80").sm == 80
    with pytest.raises(ValueError, match="arch='hopper'"):
        parse_target("hopper")


@pytest.mark.parametrize("name", sorted(table.ELEMENT_TYPES))
def test_element_type_rules(name):
    et = table.ELEMENT_TYPES[name]
    assert et.ldm_multiple * et.bits == 128  # 16 bytes
    assert et.align_elements * et.bits == 256  # 32 bytes
    assert et.per_storage * et.bits == (32 if et.packed else et.bits)
    assert et.bits_dtype.itemsize == et.storage_dtype.itemsize


def test_describe_mentions_every_type():
    text = table.describe()
    for e in TABLE:
        assert f"  {e.operand_format}: " in text
