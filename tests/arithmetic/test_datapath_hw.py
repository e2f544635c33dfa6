"""``datapath.mma`` bit for bit against a small subset of the H100 captures.

``tests/data/h100_tc_edges.npz`` holds trials picked from the fresh captures
(``ptx_mma_full*``, ``wmma_edges``, ``wgmma_full``, ``ptx_chain``, ``wgmma_chain``; keys
as in those files: ``{name}/{A,B,C,D,kind}``) so that every rule of the sm_90 datapath
model shows: f16 subnormals mixed with normals (``sub_probe``), zero signs, tf32 low
bits, fp8 subnormals / wide / tiny / specials in ``mma.sync`` (two f16 HMMAs + FADD) and
``wgmma`` (F = 13, 13-bit sums), the m8n8k4 FFMA routine, integer saturation and chains
of instructions (D of one is C of the next, up to K = 4096).
"""

from __future__ import annotations

import pathlib
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxwarp._src.arithmetic import datapath as M
from jaxwarp._src.catalogue.arch import ARCHS, family

DATA = np.load(pathlib.Path(__file__).resolve().parents[1] / "data" / "h100_tc_edges.npz")
CONFIGS = sorted({k.rsplit("/", 1)[0] for k in DATA.files if k.endswith("/D")})

_STORAGE = {"f16": np.float16, "bf16": jnp.bfloat16, "tf32": np.float32, "f32": np.float32,
            "f64": np.float64, "e4m3": jnp.float8_e4m3fn, "e5m2": jnp.float8_e5m2}


def _float_to_tf32(bits):
    """``__float_to_tf32``: round to nearest, ties away from zero (NaN/inf truncated)."""
    x = bits.astype(np.uint64)
    special = ((x >> 23) & 0xFF) == 0xFF
    return np.where(special, x & 0xFFFFE000, (x + 0x1000) & 0xFFFFE000).astype(np.uint32)


def _parse(key: str) -> dict:
    """Capture key -> mma keyword arguments (see tools/capture/FORMAT_PTX.md)."""
    parts = key.split("/")
    if parts[0] == "chain":
        parts = parts[1:]
    if parts[0] in ("ptx", "wgmma"):
        instruction = "mma_sync" if parts[0] == "ptx" else "wgmma"
        name = re.sub(r"x\d+$", "", parts[1])
        a, b, cd, shape, *flags = name.split(".")
        ik = int(shape.split("k")[1])
    else:
        instruction, ik = "wmma", None
        a, cd, shape, *flags = parts[0].split(".")
        b = a
    return dict(a_format=a, b_format=b, c_format=cd[:3], d_format=cd[3:], instruction=instruction,
                instruction_k=ik, satf="satfinite" in flags,
                arch="sm_90a" if instruction == "wgmma" else "sm_90")


@pytest.mark.parametrize("key", CONFIGS)
def test_bit_exact_on_h100_edges(key):
    kw = _parse(key)
    A, B, C, D = (DATA[f"{key}/{x}"] for x in "ABCD")
    if kw["a_format"] == "tf32cvt":
        A, B = _float_to_tf32(A), _float_to_tf32(B)
        kw.update(a_format="tf32", b_format="tf32")
    if kw["a_format"] in ("s8", "u8"):
        out = np.asarray(M.mma(A, B, C, **kw))
    else:
        with jax.enable_x64(kw["a_format"] == "f64"):
            out = M.mma(A.view(_STORAGE[kw["a_format"]]), B.view(_STORAGE[kw["b_format"]]),
                        C.view(_STORAGE[kw["c_format"]]), **kw)
            out = np.asarray(out).view(D.dtype)
    bad = np.argwhere(out != D)
    assert bad.size == 0, (f"{len(bad)}/{D.size} elements differ, first (trial, i, j) "
                           f"{bad[:3].tolist()} kinds {DATA[key + '/kind'][bad[:3, 0]]}")


def test_edges_cover_the_rules():
    kinds = {str(k) for key in CONFIGS for k in DATA[f"{key}/kind"]}
    assert {"sub_probe", "zero_sign_mixed", "tf32_lowbits_tiny", "tiny", "special",
            "wide", "zero_sign"} <= kinds
    names = " ".join(CONFIGS)
    for want in ("m8n8k4", "chain/wgmma", "chain/ptx", "e4m3.e5m2", "wgmma/e5m2",
                 "m64n8k32x128", "satfinite"):
        assert want in names


# --------------------------------------------------------------------------------------
# f16 / tf32 results in and near the subnormal range (``capture.py --extra --subnormal``;
# tools/capture/FORMAT_EXTRA.md): a subnormal accumulator aligns at the format's minimum
# normal exponent (``c_sub_exp="emin"``) and E never falls below emin(D) - 7
# (``e_floor=7``), also with C = 0.

SUB = np.load(pathlib.Path(__file__).resolve().parents[1] / "data"
              / "capture_extra_subnormal.npz")
SUB_CONFIGS = sorted({k.rsplit("/", 1)[0] for k in SUB.files if k.endswith("/D")})


def _run_sub(key: str, **change) -> tuple[np.ndarray, np.ndarray]:
    """(model bits, captured bits) of one WMMA configuration of the subnormal sample;
    ``change``: Datapath fields to change from the sm_90 model."""
    a_format, cd, shape, _ = key.split(".")
    A, B, C, D = (SUB[f"{key}/{x}"] for x in "ABCD")
    if a_format == "tf32cvt":
        A, B, a_format = _float_to_tf32(A), _float_to_tf32(B), "tf32"
    k = int(shape.split("k")[1])
    dp = ARCHS["sm_90"].datapath(family("wmma", a_format, k)).replace(**change)
    out = M.mma(A.view(_STORAGE[a_format]), B.view(_STORAGE[a_format]),
                C.view(_STORAGE[cd[:3]]), a_format=a_format, c_format=cd[:3], d_format=cd[3:],
                datapath=dp if change else None)
    return np.asarray(out).view(D.dtype), D


@pytest.mark.parametrize("key", SUB_CONFIGS)
def test_bit_exact_on_h100_subnormal_probes(key):
    out, want = _run_sub(key)
    bad = np.argwhere(out != want)
    assert bad.size == 0, (f"{len(bad)}/{want.size} elements differ, first (trial, i, j) "
                           f"{bad[:3].tolist()} kinds {SUB[key + '/kind'][bad[:3, 0]]}")


@pytest.mark.parametrize("change", [{"e_floor": None}, {"e_floor": 6}, {"e_floor": 8},
                                    {"c_sub_exp": "lead"}], ids=str)
def test_subnormal_rule_is_read_from_the_datapath(change):
    """Each field of the rule changes bits on the sample (so the sample pins it)."""
    keys = [k for k in SUB_CONFIGS if k.startswith("f16")]
    if change in ({"e_floor": None}, {"c_sub_exp": "lead"}):
        keys += [k for k in SUB_CONFIGS if k.startswith("tf32")]
    for key in keys:
        out, want = _run_sub(key, **change)
        if (out != want).any():
            return
    pytest.fail(f"Datapath change {change} leaves every element of {keys} as captured")


def test_e_floor_is_checked():
    with pytest.raises(ValueError, match="e_floor"):
        M.Datapath(e_floor=-1)
    with pytest.raises(ValueError, match="e_floor"):
        M.Datapath(e_floor=1.5)
