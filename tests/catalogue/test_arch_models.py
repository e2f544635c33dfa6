"""Architecture models other than sm_90: targets, presets, what each can issue, and bits.

The bits are compared with reference-model files (``tests/data/mmasim_golden_mma.npz``:
outputs of MMA-Sim 2.1.1, the published model of NVIDIA's tensor cores that its authors
validated on the GPUs; ``golden/mma/{arch}/{qualifier}/{A,B,C,D,kind}``, A and B holding
a chain of instructions along k where K is a multiple of the instruction's k). The full
sweep over every configuration is the conformance reader's (tests/conformance); here a
few configurations per generation, one per arithmetic rule.
"""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

import jaxwarp
from jaxwarp._src.arithmetic import datapath as M
from jaxwarp._src.catalogue import arch, isa, mma_sync_parse
from jaxwarp._src.instructions import mma_sync as mp
from jaxwarp._src.layouts import mma_sync_registers
from jaxwarp._src.numerics.formats import FORMATS

GOLDEN = pathlib.Path(__file__).parent.parent / "data" / "mmasim_golden_mma.npz"
#: MMA-Sim's architecture names -> the targets whose models they check.
TARGET = {"Volta": "sm_70", "Turing": "sm_75", "Ampere": "sm_80", "Ada_Lovelace": "sm_89",
          "Hopper": "sm_90", "Blackwell": "sm_100a", "RTX_Blackwell": "sm_120a"}


@pytest.fixture(scope="module")
def golden():
    with np.load(GOLDEN) as z:
        return {k: z[k] for k in z.files}


def _parse(q: str):
    """MMA-Sim's ``m16n8k32[.kind::f8f6f4].D.A.B.C`` -> (shape, kind, d, a, b, c)."""
    parts = q.split(".")
    kind = parts.pop(1)[len("kind::"):] if parts[1].startswith("kind::") else ""
    return isa.parse_shape(parts[0]), kind, *parts[1:]


def _logical(bits: np.ndarray, t: str) -> np.ndarray:
    """A file's raw bits -> jaxwarp's logical operand (fp6 / fp4: the code, taken from
    its byte as kind::f8f6f4 holds it)."""
    fmt = FORMATS[t]
    if fmt.code_storage:
        return ((bits >> fmt.unpacked_lsb) & ((1 << fmt.bits) - 1)).astype(np.uint8)
    return bits.view(np.dtype(fmt.storage_dtype))


def _operands(golden, arch_name: str, q: str):
    pre = f"golden/mma/{arch_name}/{q}"
    (m, n, k), kind, d, a, b, c = _parse(q)
    A, B, C = (_logical(golden[f"{pre}/{f}"], t) for f, t in (("A", a), ("B", b), ("C", c)))
    return (A, B, C), dict(a_format=a, b_format=b, c_format=c, d_format=d, instruction_k=k,
                           instruction="mma_sync"), golden[f"{pre}/D"], kind


# One configuration per arithmetic rule of each generation (the full sweep is the
# conformance reader's).
_SLOW = pytest.mark.slow
CASES = [
    ("Volta", "m8n8k4.f32.f16.f16.f16"),        # F = 23, chunks of 4, f16 C of an f32 D
    pytest.param("Volta", "m8n8k4.f16.f16.f16.f16", marks=_SLOW),
    pytest.param("Turing", "m16n8k8.f32.f16.f16.f32", marks=_SLOW),  # F = 24, chunks of 8
    ("Ampere", "m16n8k16.f16.f16.f16.f16"),     # each chunk of 8 rounded to f16
    pytest.param("Ampere", "m16n8k8.f32.tf32.tf32.f32", marks=_SLOW),  # tf32 chunks of 4
    ("Ada_Lovelace", "m16n8k32.f32.e4m3.e4m3.f32"),  # fp8: F = 13, an E8M13 result
    pytest.param("Ada_Lovelace", "m16n8k32.f16.e5m2.e4m3.f16", marks=_SLOW),
    pytest.param("Blackwell", "m16n8k16.f32.bf16.bf16.f32", marks=_SLOW),
    pytest.param("RTX_Blackwell", "m16n8k32.f32.e4m3.e5m2.f32", marks=_SLOW),  # chunks of 32
    ("RTX_Blackwell", "m16n8k32.kind::f8f6f4.f32.e2m1.e3m2.f32"),
    pytest.param("RTX_Blackwell", "m16n8k32.kind::f8f6f4.f16.e2m3.e5m2.f16", marks=_SLOW),
]
_IDS = [f"{c[0]}-{c[1]}" if isinstance(c, tuple) else f"{c.values[0]}-{c.values[1]}"
        for c in CASES]


@pytest.mark.parametrize("arch_name, q", CASES, ids=_IDS)
def test_mma_matches_the_reference_model(golden, arch_name, q):
    (a, b, c), kw, want, _ = _operands(golden, arch_name, q)
    d = np.asarray(jaxwarp.mma(a, b, c, arch=TARGET[arch_name], **kw))
    np.testing.assert_array_equal(d.view(want.dtype), want)


def test_kind_f8f6f4_registers_match_the_reference_model(golden):
    """Through mma_sync_ptx: fp4 / fp6 codes in bytes (e2m1 in bits 5:2), as PTX holds
    them, give the reference bits."""
    q = "m16n8k32.kind::f8f6f4.f32.e2m1.e3m2.f32"
    (a, b, c), kw, want, _ = _operands(golden, "RTX_Blackwell", q)
    k = kw["instruction_k"]
    instr = mma_sync_parse.parse_mma("m16n8k32.row.col.kind::f8f6f4.f32.e2m1.e3m2.f32")
    regs = [mma_sync_registers.to_registers(instr, u, x) for u, x in
            (("a", a[..., :k]), ("b", b[..., :k, :]), ("c", c))]
    d = mma_sync_registers.from_registers(instr, "d", mp.mma_sync_ptx(instr, *regs, arch="sm_120a"))
    ref = jaxwarp.mma(a[..., :k], b[..., :k, :], c, arch="sm_120a", **kw)
    np.testing.assert_array_equal(np.asarray(d), np.asarray(ref))
    if a.shape[-1] == k:  # the file's trials are single instructions
        np.testing.assert_array_equal(np.asarray(d).view(want.dtype), want)


def test_kind_f8f6f4_register_encoding():
    instr = mma_sync_parse.parse_mma("m16n8k32.row.col.kind::f8f6f4.f32.e2m1.e2m3.f32")
    assert instr.qualifier == "m16n8k32.row.col.kind::f8f6f4.f32.e2m1.e2m3.f32"
    assert (instr.nregs("a"), instr.nregs("b"), instr.min_target) == (4, 2, "sm_120a")
    a = (np.arange(16 * 32) % 16).astype(np.uint8).reshape(16, 32)
    r = np.asarray(mma_sync_registers.to_registers(instr, "a", a))
    assert hex(int(r[0, 0])) == "0xc080400"  # codes 0..3 of row 0 at bits 5:2 of bytes
    np.testing.assert_array_equal(np.asarray(mma_sync_registers.from_registers(instr, "a", r)), a)
    b = (np.arange(32 * 8) % 64).astype(np.uint8).reshape(32, 8)  # e2m3: bits 5:0
    rb = np.asarray(mma_sync_registers.to_registers(instr, "b", b))
    assert int(rb[0, 0]) == int.from_bytes(bytes(b[:4, 0]), "little")
    # Bits outside the code are ignored when registers are read.
    np.testing.assert_array_equal(
        np.asarray(mma_sync_registers.from_registers(instr, "a", r | np.uint32(0xC3C3C3C3))), a)


# --------------------------------------------------------------------------------------
# Targets and presets.


def test_targets_and_how_each_is_verified():
    want = {"sm_90": "hardware", "sm_90a": "hardware", "sm_103": "unverified",
            "sm_103a": "unverified", "sm_121": "unverified", "sm_121a": "unverified"}
    for t in arch.TARGETS:
        model = arch.ARCHS[t]
        assert model.name == t and arch.parse_target(t).name == t
        assert model.verified == want.get(t, "MMA-Sim 2.1.1"), t
        for fam, _ in model.datapaths:
            assert model.verification(fam) in arch.VERIFICATIONS
    assert arch.ARCHS["sm_80"].verification("mma_sync_m8n8k4_f16") == "unverified"
    assert arch.ARCHS["sm_100"].verification("mma_sync_fp8_k32") == "unverified"
    assert arch.ARCHS["sm_100"].verification("hmma") == "MMA-Sim 2.1.1"


@pytest.mark.parametrize("alias, base", [("sm_86", "sm_80"), ("sm_87", "sm_80"),
                                         ("sm_100a", "sm_100"), ("sm_103", "sm_100"),
                                         ("sm_120a", "sm_120"), ("sm_121a", "sm_120"),
                                         ("sm_90a", "sm_90")])
def test_same_generation_same_datapaths(alias, base):
    # An ``a`` target of sm_100 / sm_103 adds the tcgen05 datapaths, nothing else.
    extra = (arch.TCGEN05_DATAPATHS if alias in arch.TCGEN05_TARGETS
             and base not in arch.TCGEN05_TARGETS else ())
    assert arch.ARCHS[alias].datapaths == arch.ARCHS[base].datapaths + extra


def test_targets_come_from_one_list():
    """isa.TARGETS names every target; the presets, the tcgen05 targets and the targets of
    the block-scaled rows are read from it or from the presets, in its order."""
    assert arch.TARGETS == tuple(arch.ARCHS)
    assert arch.TARGETS == tuple(t for t in isa.TARGETS if t in arch.ARCHS)
    assert arch.TCGEN05_TARGETS == tuple(
        t for t in arch.TARGETS if dict(arch.ARCHS[t].datapaths).keys()
        >= dict(arch.TCGEN05_DATAPATHS).keys())
    for r in isa.BLOCK_SCALE_ROWS:
        sm = arch.parse_target(r.targets[0]).sm
        assert r.targets == tuple(t for t in isa.TARGETS
                                  if arch.has(arch.parse_target(t), sm, True)), r


def test_presets_pick_their_families_by_name():
    """sm_100 and sm_120 take sm_90's families by name, not by position."""
    sm90 = dict(arch.ARCHS["sm_90"].datapaths)
    sm100 = dict(arch.ARCHS["sm_100"].datapaths)
    assert "wgmma_fp8" not in sm100
    assert sm100 == {f: d for f, d in sm90.items() if f != "wgmma_fp8"}
    sm120 = dict(arch.ARCHS["sm_120"].datapaths)
    for f in ("hmma", "hmma_tf32_k4", "hmma_tf32_k8", "mma_sync_m8n8k4_f16"):
        assert sm120[f] == sm90[f], f
    assert sm120["mma_sync_fp8_k32"] == sm90["hmma"].replace(block_k=32)


def test_sm_90_presets_are_unchanged():
    """The hardware-verified model: MMA-Sim's other generations must not move it."""
    h = arch.ARCHS["sm_90"]
    assert h.datapath("hmma") == M.Datapath(block_k=16, F=25, c_sub_exp="emin", e_floor=7)
    assert h.datapath("mma_sync_fp8_k16") == h.datapath("hmma").replace(
        block_k=8, c_mode="end", k_split="mod4", operand_via="f16")
    assert h.datapath("wgmma_fp8").sum_mbits == 13
    assert all(dp.block_out == "f32" for _, dp in h.datapaths)


@pytest.mark.parametrize("name, F, e_floor, f16_block", [
    ("sm_70", 23, 5, 4), ("sm_75", 24, 6, 8), ("sm_80", 24, 6, 8), ("sm_89", 24, 6, 8),
    ("sm_100", 25, 7, 16), ("sm_120", 25, 7, 16)])
def test_generation_parameters(name, F, e_floor, f16_block):
    """MMA-Sim's F, e_zero = emin(D) - e_floor and products per chunk (16 or 32 bytes)."""
    dp = arch.ARCHS[name].datapath("hmma")
    assert (dp.F, dp.e_floor, dp.block_k) == (F, e_floor, f16_block)


def test_a_targets_are_kept_within_a_generation():
    has = arch.has
    t = arch.parse_target
    assert has(t("sm_121a"), 120, True) and not has(t("sm_120"), 120, True)
    assert not has(t("sm_100a"), 90, True) and has(t("sm_100a"), 90)
    assert not has(t("sm_120a"), 100, True)


# --------------------------------------------------------------------------------------
# What a target can issue: errors name the architectures that have it.


def _zeros(t, shape):
    return np.zeros(shape, M.STORAGE_DTYPE[t])


@pytest.mark.parametrize("a_format, b_format, target, match", [
    ("e4m3", "e4m3", "sm_80", "mma_sync with e4m3 operands needs sm_89 or newer"),
    ("e2m1", "e2m1", "sm_120", "mma_sync with e2m1 operands needs sm_120a"),
    ("e2m1", "e2m1", "sm_100a", "needs sm_120a"),
    ("e4m3", "e3m2", "sm_89", "mma_sync with e3m2 operands needs sm_120a"),
    ("bf16", "bf16", "sm_75", "needs sm_80 or newer"),
])
def test_unsupported_combinations_name_the_target(a_format, b_format, target, match):
    c = np.zeros((16, 8), np.float32)
    with pytest.raises(ValueError, match=match):
        jaxwarp.mma(_zeros(a_format, (16, 32)), _zeros(b_format, (32, 8)), c, a_format=a_format,
                    b_format=b_format, c_format="f32", d_format="f32", instruction="mma_sync",
                    arch=target)


def test_ptx_entry_points_check_the_a_target():
    q = "m16n8k32.row.col.kind::f8f6f4.f32.e2m1.e2m1.f32"
    a, b, c = _zeros("e2m1", (16, 32)), _zeros("e2m1", (32, 8)), np.zeros((16, 8), np.float32)
    for target in ("sm_89", "sm_120", "sm_100a"):
        with pytest.raises(ValueError, match="needs sm_120a"):
            mp.mma_sync_ptx_logical(q, a, b, c, arch=target)
    assert np.asarray(mp.mma_sync_ptx_logical(q, a, b, c, arch="sm_121a")).shape == (16, 8)
    with pytest.raises(ValueError, match="needs .kind::f8f6f4"):
        mma_sync_parse.parse_mma("m16n8k32.row.col.f32.e2m1.e2m1.f32")
    with pytest.raises(ValueError, match="wgmma.* needs sm_90a"):
        jaxwarp.wgmma_logical("m64n8k16.f32.f16.f16", np.zeros((64, 16), np.float16),
                              np.zeros((16, 8), np.float16), np.zeros((64, 8), np.float32),
                              arch="sm_100a")


def test_m8n8k4_on_volta_and_turing_is_volta_arithmetic():
    """Turing runs m8n8k4 f16 with Volta's datapath (MMA-Sim), and jaxwarp.mma reaches it
    with instruction_k=4."""
    assert arch.datapath_for("sm_75", "mma_sync", "f16", 4) == \
        arch.datapath_for("sm_70", "mma_sync", "f16", 4)
    a = np.full((8, 4), 1.0, np.float16)
    d = jaxwarp.mma(a, a.T, np.zeros((8, 8), np.float16), a_format="f16", c_format="f16",
                    d_format="f16", instruction="mma_sync", instruction_k=4, arch="sm_70")
    assert float(d[0, 0]) == 4.0


def test_fp6_fp4_values_through_mma():
    """e2m1 code 0xF is -6, e3m2 code 0x1F is 28 (the largest), e2m3 code 1 is 1/8."""
    a = np.zeros((16, 32), np.uint8)
    b = np.zeros((32, 8), np.uint8)
    a[0, :2] = (0xF, 0x1)  # -6, 0.5
    b[:2, 0] = (0x1F, 0x01)  # e3m2: 28, 2**-4
    d = jaxwarp.mma(a, b, np.zeros((16, 8), np.float32), a_format="e2m1", b_format="e3m2",
                    c_format="f32", d_format="f32", instruction="mma_sync", arch="sm_120a")
    assert float(d[0, 0]) == -6 * 28 + 0.5 * 2**-4
    d16 = jaxwarp.mma(a, b, np.zeros((16, 8), np.float32), a_format="e2m1", b_format="e3m2",
                      c_format="f32", d_format="f32", instruction="mma_sync", arch="sm_120a",
                      mode="fast")
    assert float(d16[0, 0]) == float(d[0, 0])
