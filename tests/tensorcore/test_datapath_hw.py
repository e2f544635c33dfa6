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

from jaxwarp._src.tensorcore import datapath as M

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
    return dict(a_type=a, b_type=b, c_type=cd[:3], d_type=cd[3:], instruction=instruction,
                instruction_k=ik, satf="satfinite" in flags,
                arch="sm_90a" if instruction == "wgmma" else "sm_90")


@pytest.mark.parametrize("key", CONFIGS)
def test_bit_exact_on_h100_edges(key):
    kw = _parse(key)
    A, B, C, D = (DATA[f"{key}/{x}"] for x in "ABCD")
    if kw["a_type"] == "tf32cvt":
        A, B = _float_to_tf32(A), _float_to_tf32(B)
        kw.update(a_type="tf32", b_type="tf32")
    if kw["a_type"] in ("s8", "u8"):
        out = np.asarray(M.mma(A, B, C, **kw))
    else:
        with jax.enable_x64(kw["a_type"] == "f64"):
            out = M.mma(A.view(_STORAGE[kw["a_type"]]), B.view(_STORAGE[kw["b_type"]]),
                        C.view(_STORAGE[kw["c_type"]]), **kw)
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
