"""Writes tests/data/quantizers/torchao_mx_golden.npz: torchao's MX and NVFP4 quantizer
outputs.

Run with a Python that has torch (CPU) and torchao (not a dependency of jaxwarp):
``python tools/mx_torchao_golden.py``. The file holds float32 input patterns and, per
element format and torchao ``ScaleCalculationMode``, the ue8m0 scale codes and element
codes (fp8 bits, fp6 / fp4 codes unpacked one per byte); for NVFP4 (two-level scaling with
``per_tensor_amax_to_scale``) the per-tensor scale's bits, the e4m3 block scales' bits and
the e2m1 codes. ``tests/scaling/test_mx.py`` compares jaxwarp.mx with it bit for bit.
The venv used: torch 2.13.0+cpu and ``pip install --no-deps torchao`` (0.18.0).
"""

import pathlib

import numpy as np
import torch
import torchao
from torchao.prototype.mx_formats import constants
from torchao.prototype.mx_formats.config import ScaleCalculationMode
from torchao.prototype.mx_formats.kernels import unpack_uint4
from torchao.prototype.mx_formats.mx_tensor import to_mx
from torchao.prototype.mx_formats.nvfp4_tensor import nvfp4_quantize, per_tensor_amax_to_scale

OUT = (pathlib.Path(__file__).resolve().parents[1] / "tests" / "data" / "quantizers"
       / "torchao_mx_golden.npz")
ELEMS = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2,
         "e2m3": constants.DTYPE_FP6_E2M3, "e3m2": constants.DTYPE_FP6_E3M2,
         "e2m1": torch.float4_e2m1fn_x2}
MODES = {"floor": ScaleCalculationMode.FLOOR, "ceil": ScaleCalculationMode.CEIL,
         "even": ScaleCalculationMode.EVEN, "rceil": ScaleCalculationMode.RCEIL}


def inputs(rng, n, bs):
    """float32 patterns, n blocks of bs: random bits within a few binades of a random
    base, float32 subnormals, zero blocks, huge and tiny magnitudes, near-ties."""
    out = np.zeros((n, bs), np.uint32)
    for i in range(n):
        kind = i % 6
        sign = rng.integers(0, 2, bs).astype(np.uint32) << 31
        frac = rng.integers(0, 1 << 23, bs).astype(np.uint32)
        if kind in (0, 1):
            base = int(rng.integers(1, 250))
            e = np.clip(base + rng.integers(-12, 3, bs), 0, 254).astype(np.uint32)
            out[i] = sign | (e << 23) | frac
        elif kind == 2:
            out[i] = sign | frac  # subnormals
        elif kind == 3:
            out[i] = sign  # signed zeros
        elif kind == 4:
            e = rng.choice([1, 2, 3, 252, 253, 254], bs).astype(np.uint32)
            out[i] = sign | (e << 23) | frac
        else:  # few significant bits: many exact ties after scaling
            base = int(rng.integers(100, 150))
            e = (base + rng.integers(-6, 1, bs)).astype(np.uint32)
            out[i] = sign | (e << 23) | (frac & np.uint32(0x7F0000))
    return out


def main():
    rng = np.random.default_rng(20261126)
    data = {"torchao_version": np.array(torchao.__version__),
            "torch_version": np.array(torch.__version__)}
    x = inputs(rng, 768, 32)
    data["mx_x"] = x
    xt = torch.from_numpy(x.view(np.float32).copy())
    for elem, dtype in ELEMS.items():
        for mode, sm in MODES.items():
            scale, lp = to_mx(xt, dtype, 32, sm)
            scale = scale.view(torch.uint8).numpy().reshape(-1)
            if elem == "e2m1":
                codes = unpack_uint4(lp.view(torch.uint8)).numpy()
            else:
                codes = lp.view(torch.uint8).numpy()
            data[f"mx/{elem}/{mode}/scales"] = scale
            data[f"mx/{elem}/{mode}/codes"] = codes.reshape(x.shape).astype(np.uint8)
    for t in range(8):  # NVFP4: tensors of 32 x 64, each with its own amax
        xn = inputs(rng, 128, 16).reshape(32, 64)
        tn = torch.from_numpy(xn.view(np.float32).copy())
        s_t = per_tensor_amax_to_scale(tn.abs().amax())
        sb, lp = nvfp4_quantize(tn, 16, per_tensor_scale=s_t)
        data[f"nvfp4/{t}/x"] = xn
        data[f"nvfp4/{t}/tensor_scale"] = np.array(s_t.numpy(), np.float32).view(np.uint32)
        data[f"nvfp4/{t}/scales"] = sb.view(torch.uint8).numpy().reshape(32, 4)
        data[f"nvfp4/{t}/codes"] = unpack_uint4(lp.view(torch.uint8)).numpy().reshape(32, 64)
    np.savez_compressed(OUT, **data)
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
