"""Writes tests/data/quantizers/mx_golden.npz: torchao's and microxcaling's MX / NVFP4
quantizer outputs on >= 10**6 inputs per quantizer, as per-chunk SHA-256 digests.

Run in the reference venv (torch CPU, torchao, microxcaling's sources; not jaxwarp's):

    python tools/crosscheck/mx_golden.py --microxcaling DIR [--n 1048576] [--out FILE]

``DIR`` holds microxcaling's ``mx`` package (README.md here says how to get it). The
inputs are not stored: ``tests/mx_golden_inputs.py`` makes them from a seed, one NumPy
generator per chunk of 4,096 values. For each quantizer the file holds one SHA-256
digest of the reference's outputs per chunk, and the outputs of the first chunks in full
(readable diagnostics); ``tests/scaling/test_mx_golden.py`` computes jaxwarp's outputs
of the same inputs and compares.

Quantizers (``names`` in the file), and the outputs digested per chunk, in this order:

* ``torchao/{elem}/{mode}``, elem e4m3 e5m2 e2m3 e3m2 e2m1, mode floor ceil even rceil
  (``to_mx``, block 32): ``scales`` (ue8m0 codes) then ``codes`` (element codes, one
  per byte), the codes of blocks whose scale code is 0 (``2**-127``) or 0xFF (NaN) set
  to 0: torchao 0.18 divides the former by ``2**-126`` (it clamps its float32 scale to
  the smallest normal), a difference its source states, and the latter read as NaN
  (torchao's inputs hold NaNs but no infinities, which it calls "N/A");
* ``torchao/nvfp4`` (``nvfp4_quantize`` with ``per_tensor_amax_to_scale``, tensors of
  16 x 64, blocks of 16): ``tensor_scale`` (float32 bits), ``scales`` (e4m3 bits),
  ``codes``;
* ``microxcaling/{elem}/even``, elem fp8_e4m3 fp8_e5m2 fp6_e2m3 fp6_e3m2 fp4_e2m1 int8
  (``_quantize_mx`` with 8 scale bits, block 32 along the last axis,
  ``shared_exp_method="max"``, no fp32 subnormal flush, its PyTorch code, rounding
  "even"): ``values``, the dequantized float32 bits, every NaN as 0x7FC00000 and -0 as
  +0; ``microxcaling/{elem}/nearest/sample/values``: its default rounding ("nearest",
  ties away from zero) on the sample only (jaxwarp has no such mode).

``{name}/dev_blocks`` lists the blocks where the reference departs from the rule it
implements, with the reference's outputs there (``{name}/dev/{field}``): for torchao's
RCEIL the blocks whose float32 ``ceil(log2(amax / max))`` is not the exact ceiling; for
microxcaling the blocks whose output is not OCP's Algorithm 1 with nearest-even
elements, computed here in float64 (``ocp_model``).
"""

from __future__ import annotations

import argparse
import hashlib
import pathlib
import sys

import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))
import mx_golden_inputs as gi  # noqa: E402

N = 1 << 20
MICROXCALING_COMMIT = "7bc41952de394f5cc5e782baf132e7c7542eb4e4"  # its main, 2024-08-19
SAMPLE_CHUNKS = 8
SEEDS = {"e4m3": 1, "e5m2": 2, "e2m3": 3, "e3m2": 4, "e2m1": 5, "s8": 6, "nvfp4": 7}
MODES = ("floor", "ceil", "even", "rceil")
MXC = {"fp8_e4m3": "e4m3", "fp8_e5m2": "e5m2", "fp6_e2m3": "e2m3", "fp6_e3m2": "e3m2",
       "fp4_e2m1": "e2m1", "int8": "s8"}


def chunk_digests(fields: list[np.ndarray], n_chunks: int) -> np.ndarray:
    """(n_chunks, 32) uint8: SHA-256 of chunk c of every field, in order (each field's
    leading axis is split into n_chunks equal parts)."""
    parts = [np.ascontiguousarray(f).reshape(n_chunks, -1) for f in fields]
    return np.stack([np.frombuffer(hashlib.sha256(b"".join(p[c].tobytes() for p in parts))
                                   .digest(), np.uint8) for c in range(n_chunks)])


def canonical(v: np.ndarray) -> np.ndarray:
    """float32 values -> bits, every NaN as 0x7FC00000 and -0 as +0."""
    v = np.asarray(v, np.float32)
    b = v.view(np.uint32).copy()
    b[np.isnan(v)] = 0x7FC00000
    b[v == 0] = 0
    return b


def grid_max(elem):
    return gi.grid(elem)[-1]


def ocp_model(x, elem):
    """OCP MX v1.0 Algorithm 1 in float64 (exact here), elements rounded to nearest
    even: used only to find the blocks where the reference departs from the rule."""
    with np.errstate(invalid="ignore"):  # NaN payloads
        v = x.view(np.float32).astype(np.float64)
    amax = np.abs(v).max(-1, keepdims=True)
    g = gi.grid(elem)
    top = g[-1]
    emax = int(np.floor(np.log2(top)))
    e = np.where(amax > 0, np.frexp(np.where(np.isfinite(amax), amax, 1))[1] - 1 - emax, -127)
    e = np.clip(e, -127, 127).astype(np.float64)
    y = v / np.exp2(e)
    if gi.ELEMENTS[elem] is None:
        q = np.rint(y * 64) / 64
    else:
        m, bias = gi.ELEMENTS[elem][:2]
        pe = np.maximum(np.frexp(np.where(np.isfinite(y), y, 1))[1] - 1, 1 - bias)
        q = np.rint(y / np.exp2(pe - m)) * np.exp2(pe - m)
    q = np.clip(q, -top, top) * np.exp2(e)
    q = np.where(np.isfinite(amax), q, np.nan)
    return canonical(q.astype(np.float32).reshape(-1))


def torchao_mx(x, elem, mode):
    import torch
    from torchao.prototype.mx_formats import constants
    from torchao.prototype.mx_formats.config import ScaleCalculationMode
    from torchao.prototype.mx_formats.kernels import unpack_uint4
    from torchao.prototype.mx_formats.mx_tensor import to_mx
    dtype = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2,
             "e2m3": constants.DTYPE_FP6_E2M3, "e3m2": constants.DTYPE_FP6_E3M2,
             "e2m1": torch.float4_e2m1fn_x2}[elem]
    scale, lp = to_mx(torch.from_numpy(x.view(np.float32).copy()), dtype, 32,
                      getattr(ScaleCalculationMode, mode.upper()))
    scales = scale.view(torch.uint8).numpy().reshape(-1).copy()
    if elem == "e2m1":
        codes = unpack_uint4(lp.view(torch.uint8)).numpy()
    else:
        codes = lp.view(torch.uint8).numpy()
    codes = codes.reshape(x.shape).astype(np.uint8)
    codes[(scales == 0) | (scales == 0xFF)] = 0
    dev = np.zeros(scales.shape, bool)
    if mode == "rceil":  # where its float32 log2 of amax / max misses the exact ceiling
        amax = torch.from_numpy(x.view(np.float32).copy()).abs().amax(-1)
        descale = amax / float(grid_max(elem))
        got = torch.ceil(torch.log2(descale)).numpy()
        frac, ex = np.frexp(descale.numpy().astype(np.float64))
        exact = np.where(frac == 0.5, ex - 1, ex)
        dev = np.isfinite(got) & (descale.numpy() > 0) & (got != exact)
    return {"scales": scales, "codes": codes.reshape(-1)}, np.flatnonzero(dev)


def torchao_nvfp4(x):
    import torch
    from torchao.prototype.mx_formats.kernels import unpack_uint4
    from torchao.prototype.mx_formats.nvfp4_tensor import nvfp4_quantize, per_tensor_amax_to_scale
    ts, sc, cd = [], [], []
    for t in x:
        tn = torch.from_numpy(t.view(np.float32).copy())
        s_t = per_tensor_amax_to_scale(tn.abs().amax())
        sb, lp = nvfp4_quantize(tn, 16, per_tensor_scale=s_t)
        ts.append(np.array(s_t.numpy(), np.float32).reshape(1).view(np.uint32))
        sc.append(sb.view(torch.uint8).numpy().reshape(-1))
        cd.append(unpack_uint4(lp.view(torch.uint8)).numpy().reshape(-1))
    return {"tensor_scale": np.concatenate(ts), "scales": np.concatenate(sc),
            "codes": np.concatenate(cd).astype(np.uint8)}, np.zeros(0, np.int64)


def microxcaling(x, elem, rnd):
    import torch
    from mx.mx_ops import _quantize_mx
    y = _quantize_mx(torch.from_numpy(x.view(np.float32).copy()), 8, elem,
                     shared_exp_method="max", axes=[-1], block_size=32, round=rnd,
                     flush_fp32_subnorms=False, custom_cuda=False)
    out = canonical(y.numpy().reshape(-1))
    dev = (out != ocp_model(x, MXC[elem])).reshape(x.shape[0], -1).any(-1)
    return {"values": out}, np.flatnonzero(dev)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--microxcaling", required=True, type=pathlib.Path,
                    help="folder holding microxcaling's mx package")
    ap.add_argument("--microxcaling-commit", default=MICROXCALING_COMMIT,
                    help="the commit DIR was taken from (recorded in the file)")
    ap.add_argument("--n", type=int, default=N, help="inputs per quantizer")
    ap.add_argument("--out", type=pathlib.Path,
                    default=REPO / "tests" / "data" / "quantizers" / "mx_golden.npz")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(args.microxcaling))
    import torch
    import torchao
    n_chunks = args.n // gi.CHUNK
    data = {"n": np.array(args.n), "chunk": np.array(gi.CHUNK),
            "sample_chunks": np.array(SAMPLE_CHUNKS),
            "torch_version": np.array(torch.__version__),
            "torchao_version": np.array(torchao.__version__),
            "microxcaling_commit": np.array(args.microxcaling_commit)}
    names = []

    def record(name, seed, result, digests=True):
        out, dev = result
        fields = list(out)
        data[f"{name}/seed"] = np.array(seed)
        data[f"{name}/fields"] = np.array(fields)
        if digests:
            data[f"{name}/digests"] = chunk_digests([out[f] for f in fields], n_chunks)
        nb = n_chunks * (gi.CHUNK // 32)
        data[f"{name}/dev_blocks"] = dev.astype(np.int64)
        for f in fields:
            per = out[f].size // n_chunks
            data[f"{name}/sample/{f}"] = out[f][:per * SAMPLE_CHUNKS]
            if name != "torchao/nvfp4":
                data[f"{name}/dev/{f}"] = out[f].reshape(nb, -1)[dev].reshape(-1)
        names.append(name)
        print(name, f"{dev.size} blocks off the rule", flush=True)

    for elem in ("e4m3", "e5m2", "e2m3", "e3m2", "e2m1"):
        x = gi.mx_inputs(SEEDS[elem], args.n, elem, infinities=False)
        for mode in MODES:
            record(f"torchao/{elem}/{mode}", SEEDS[elem], torchao_mx(x, elem, mode))
    x = gi.nvfp4_inputs(SEEDS["nvfp4"], args.n)
    record("torchao/nvfp4", SEEDS["nvfp4"], torchao_nvfp4(x))
    for elem, ours in MXC.items():
        x = gi.mx_inputs(SEEDS[ours], args.n, ours)
        record(f"microxcaling/{elem}/even", SEEDS[ours], microxcaling(x, elem, "even"))
        xs = x[:SAMPLE_CHUNKS * gi.CHUNK // 32]  # ties away from zero: the sample only
        out, dev = microxcaling(xs, elem, "nearest")
        data[f"microxcaling/{elem}/nearest/sample/values"] = out["values"]
    data["names"] = np.array(names)
    np.savez_compressed(args.out, **data)
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
