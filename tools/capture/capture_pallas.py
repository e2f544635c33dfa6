"""Records what Pallas kernels return on a Hopper GPU (H100/H200, JAX 0.11.x with CUDA).

    python tools/capture/capture_pallas.py --out DIR [--small] [--seed N]
        [--only triton,mgpu,probe] [--dtypes f16,bf16,e4m3,e5m2,f32,f32_highest]
        [--forms tiled,c_init,c_epilogue,two_dots] [--budget SECONDS]
    python tools/capture/capture_pallas.py --trim-sample SAMPLE.npz --out FILE.npz
    python tools/capture/capture_pallas.py --selftest        # host only: inputs, plans, names

Writes (schema: FORMAT_PALLAS.md)

* ``DIR/pallas_{dtype}.npz``: Triton-style kernels, ``jaxwarp.kernels.triton_matmul`` over
  forms x blocks x ``num_warps`` x input kinds, compiled by JAX's Pallas Triton lowering
  and run on the GPU (``interpret=False``); keys ``pallas/{name}/t{i}/{a,b,c,out,meta}``.
* ``DIR/pallas_mgpu.npz``: JAX's own Mosaic GPU kernels, called unchanged
  (``hopper_matmul_mgpu``, ``hopper_mixed_type_matmul_mgpu``, ``ragged_dot_mgpu``,
  ``attention_mgpu``) and the Triton-style ``attention.mha``; keys
  ``pallas_mgpu/{name}/{...}`` (the attention of ``attention.py`` under ``pallas/``).
* ``DIR/pallas_probe.json`` and ``pallas_probe.txt``: for each Triton-style configuration,
  the tensor-core instructions in the PTX that XLA built for it (``wgmma.mma_async`` or
  ``mma.sync``, with counts), read from an XLA dump (``--xla_dump_to``) made in a child
  process.
* ``DIR/pallas_capture.log``: every configuration, its reference error and what the
  compiler refused (the error text); the same list of refusals is in the file's ``meta``.

Every file has ``device`` (``"NVIDIA H100 80GB HBM3 sm_90"``) and ``meta`` (a JSON object:
the tool, JAX's version, the options). Inputs are drawn with ``numpy.random.default_rng``
from ``--seed`` and are finite values of their format. ``--small`` writes one few-MB
file, ``DIR/pallas_small.npz``, for tests/data. ``--trim-sample`` makes
tests/data/pallas_sample.npz from a recorded file (numpy only; see FORMAT_PALLAS.md).
Each run stops starting new configurations after ``--budget`` seconds and writes what it
has (the device lends 10 minutes a command).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time
import traceback

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
#: Largest file written (the device returns at most 16 MiB a file).
MAX_BYTES = 15 * 2**20
DTYPES = ("f16", "bf16", "e4m3", "e5m2", "f32", "f32_highest")
#: Operand format of each --dtypes name ("f32_highest": f32 dots at precision HIGHEST,
#: Triton's IEEE dot).
OPERAND = {"f32_highest": "f32"}
FORMS = ("tiled", "c_init", "c_epilogue", "two_dots")
#: Forms whose kernel takes C (an f32 matrix added to the products).
FORMS_WITH_C = ("c_init", "c_epilogue")
KINDS = ("positive", "wide")
WARPS = (1, 2, 4, 8)
#: Blocks (bm, bn, bk) of the full sweep, each dimension 16..128; the first ones are those
#: most worth having when a file fills up.
BLOCKS = ((16, 16, 32), (32, 32, 64), (64, 64, 64), (128, 128, 64), (64, 64, 32),
          (16, 16, 16), (32, 32, 32), (64, 128, 64), (128, 64, 64), (16, 64, 32),
          (64, 16, 32), (128, 128, 32), (32, 128, 64), (128, 32, 64), (64, 64, 128),
          (128, 128, 128))
#: Blocks on which the forms other than "tiled" are recorded (each with every num_warps).
FORM_BLOCKS = ((32, 32, 64), (64, 64, 64), (128, 128, 64))

# (exponent bits, fraction bits, largest finite value) of each operand format
FLOATS = {"f16": (5, 10, 65504.0), "bf16": (8, 7, 3.3895313892515355e38),
          "e4m3": (4, 3, 448.0), "e5m2": (5, 2, 57344.0),
          "f32": (8, 23, 3.4028234663852886e38)}
#: Exponent range (powers of two) of the "wide" kind: wide, and with every sum of
#: products finite in f32 and, for f16 outputs ("wide16"), in f16.
WIDE_EXP = {"f16": (-24, 15), "bf16": (-40, 40), "e4m3": (-9, 8), "e5m2": (-16, 15),
            "f32": (-40, 40), "wide16": (-12, 2), "wide_mixed": (-14, -3)}
RAW = {"f16": np.uint16, "bf16": np.uint16, "e4m3": np.uint8, "e5m2": np.uint8,
       "f32": np.uint32}


def log(*a, file=None):
    text = " ".join(str(x) for x in a)
    print(text, flush=True)
    if file is not None:
        file.write(text + "\n")
        file.flush()


# ----------------------------------------------------------------------------------------
# Numbers: float64 <-> raw bits of each format (ml_dtypes does the rounding).


def _np_dtype(t: str):
    import ml_dtypes

    return {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "e4m3": ml_dtypes.float8_e4m3fn,
            "e5m2": ml_dtypes.float8_e5m2, "f32": np.float32}[t]


def to_bits(x: np.ndarray, t: str) -> np.ndarray:
    """float64 values -> raw bits of format ``t``: rounded to f32, then (narrower
    formats) to ``t``, each to nearest even. The values must lie within the format's
    finite range (the generators make sure of it)."""
    x = np.asarray(x, np.float64)
    if not np.all(np.abs(x) <= FLOATS[t][2]):
        raise ValueError(f"to_bits: values outside the finite range of {t}")
    return x.astype(np.float32).astype(_np_dtype(t)).view(RAW[t])


def from_bits(bits: np.ndarray, t: str) -> np.ndarray:
    """Raw bits of format ``t`` -> float64."""
    return np.asarray(bits).view(_np_dtype(t)).astype(np.float64)


def draw(rng: np.random.Generator, t: str, shape: tuple[int, ...], kind: str,
         wide: str | None = None) -> np.ndarray:
    """Raw bits of format ``t``: finite values of input kind ``kind``.

    ``positive``: uniform in [0, 4) rounded to the format. ``wide``: random sign, a power
    of two uniform over ``WIDE_EXP[wide or t]`` times a uniform significand in [1, 2),
    rounded to the format (subnormals and zeros included where the range reaches them).
    """
    if kind == "positive":
        x = rng.uniform(0.0, 4.0, shape)
    elif kind == "wide":
        lo, hi = WIDE_EXP[wide or t]
        e = rng.integers(lo, hi + 1, shape)
        x = rng.choice([-1.0, 1.0], shape) * np.ldexp(rng.uniform(1.0, 2.0, shape), e)
        x = np.clip(x, -FLOATS[t][2], FLOATS[t][2])
    else:
        raise ValueError(f"draw: kind {kind!r} unknown; valid: {KINDS}")
    return to_bits(x, t)


def ref_error(a, b, c, out, ta: str, tout: str) -> float:
    """max |out - (A@B + C)| / (|A|@|B| + |C| + tiny), float64 reference; tiny is the
    output format's smallest subnormal (an output rounded to it is not suspect)."""
    fa, fb = from_bits(a, ta), from_bits(b, ta)
    ref, mag = fa @ fb, np.abs(fa) @ np.abs(fb)
    if c is not None:
        fc = from_bits(c, tout)
        ref, mag = ref + fc, mag + np.abs(fc)
    got = from_bits(out, tout)
    with np.errstate(invalid="ignore", divide="ignore"):
        tiny = {"f16": 2.0**-24, "bf16": 2.0**-133, "f32": 2.0**-149}[tout]
        err = np.abs(got - ref) / (mag + tiny)
    return float(np.nanmax(err)) if np.isfinite(got).all() else float("inf")


# ----------------------------------------------------------------------------------------
# Plans: which configurations are recorded.


@dataclasses.dataclass(frozen=True)
class TritonCfg:
    dtype: str
    bm: int
    bn: int
    bk: int
    num_warps: int
    form: str

    @property
    def operand(self) -> str:
        """The operands' format (``dtype`` names f32 at HIGHEST ``f32_highest``)."""
        return OPERAND.get(self.dtype, self.dtype)

    @property
    def shape(self) -> tuple[int, int, int]:
        """(M, N, K): two blocks a side up to 64, one of 128; K = 4 blocks, at least 128."""
        m = self.bm if self.bm >= 128 else max(64, 2 * self.bm)
        n = self.bn if self.bn >= 128 else max(64, 2 * self.bn)
        k = max(128 if self.operand not in ("e4m3", "e5m2") else 256, 4 * self.bk)
        return m, n, k

    @property
    def name(self) -> str:
        """``bf16_16x16x32_w1`` (the sample's names), ``_{form}`` after it unless tiled."""
        s = f"{self.dtype}_{self.bm}x{self.bn}x{self.bk}_w{self.num_warps}"
        return s if self.form == "tiled" else f"{s}_{self.form}"

    def meta(self, kind: str, seed: int, jax_version: str) -> str:
        m, n, k = self.shape
        meta = {"dtype": self.operand, "M": m, "N": n, "K": k, "bm": self.bm,
                "bn": self.bn, "bk": self.bk, "form": self.form,
                "num_warps": self.num_warps, "kind": kind, "seed": seed, "jax": jax_version}
        if self.dtype in OPERAND:
            meta["precision"] = "highest"
        return json.dumps(meta)


def triton_plan(dtypes=DTYPES, small: bool = False) -> list[TritonCfg]:
    """The Triton-style configurations, in the order they are recorded."""
    out = []
    for t in dtypes:
        if small:
            out += [TritonCfg(t, 16, 16, 32, 1, "tiled"), TritonCfg(t, 64, 64, 64, 4, "tiled")]
            out += [TritonCfg(t, 64, 64, 32, 4, "c_init")] if t == "bf16" else []
            continue
        tiled = [TritonCfg(t, *blk, w, "tiled") for blk in BLOCKS for w in WARPS]
        forms = [TritonCfg(t, *blk, w, f) for blk in FORM_BLOCKS for w in WARPS
                 for f in FORMS[1:]]
        # interleaved (two tiled, one other form) so that a short budget records some of each
        for j in range(max(len(tiled), 2 * len(forms))):
            out += tiled[2 * j:2 * j + 2] + forms[j:j + 1]
    return out


@dataclasses.dataclass(frozen=True)
class MgpuCfg:
    """One call of a JAX Mosaic GPU kernel (or of the Triton-style attention)."""

    kernel: str      # hopper_matmul, hopper_mixed_type_matmul, ragged_dot, attention_mgpu,
    dtype: str       # attention (Triton-style, under pallas/)
    sizes: tuple     # kernel-specific, see mgpu_meta
    with_c: bool = False

    @property
    def family(self) -> str:
        return "pallas" if self.kernel == "attention" else "pallas_mgpu"

    @property
    def name(self) -> str:
        """``f16_128x128x64_s2`` (the sample's name, then max_concurrent_steps), ``_c``
        with C; the other kernels' names start with theirs."""
        s = self.sizes
        if self.kernel in ("hopper_matmul", "hopper_mixed_type_matmul"):
            head = "" if self.kernel == "hopper_matmul" else "mixed_"
            name = f"{head}{self.dtype}_{s[3]}x{s[4]}x{s[5]}_s{s[6]}_k{s[2]}"
        elif self.kernel == "ragged_dot":
            name = f"ragged_{self.dtype}_g{s[3]}_{s[4]}x{s[5]}x{s[6]}_s{s[7]}_n{s[8]}"
        elif self.kernel == "attention_mgpu":
            name = f"attn_mgpu_{self.dtype}_d{s[5]}_{s[6]}x{s[7]}_s{s[8]}"
        else:
            name = f"attn_{self.dtype}_d{s[4]}_{s[5]}x{s[6]}_w{s[7]}"
        return name + ("_c" if self.with_c else "")


def mgpu_plan(small: bool = False) -> list[MgpuCfg]:
    # hopper_matmul sizes: (M, N, K, tile_m, tile_n, tile_k, max_concurrent_steps)
    if small:
        return [MgpuCfg("hopper_matmul", "f16", (256, 256, 512, 128, 128, 64, 2), c)
                for c in (False, True)]
    mm = [(512, 512, 1024, 128, 128, 64, 2)]
    if not small:
        mm += [(512, 512, 1024, 128, 128, 64, 4), (512, 512, 1024, 128, 64, 64, 2),
               (512, 512, 1024, 64, 128, 64, 3), (512, 512, 512, 128, 256, 64, 2),
               (256, 512, 2048, 128, 128, 128, 2)]
    out = [MgpuCfg("hopper_matmul", t, s, c) for t in ("f16", "bf16") for s in mm
           for c in (False, True)]
    # mixed: (M, N, K, tile_m, tile_n, tile_k, steps); a is s8, b and out of dtype
    out += [MgpuCfg("hopper_mixed_type_matmul", t, (512, 512, 1024, 128, 128, 64, 4))
            for t in ("bf16", "f16")]
    # ragged: (M, N, K, G, block_m, block_n, block_k, steps, grid_block_n)
    out += [MgpuCfg("ragged_dot", "f16", (512, 512, 512, 4, 64, 128, 64, 2, 1)),
            MgpuCfg("ragged_dot", "bf16", (512, 256, 512, 3, 128, 128, 64, 4, 2))]
    # attention_mgpu: (B, T, S, H, Hkv, D, block_q, block_kv, steps)
    out += [MgpuCfg("attention_mgpu", t, (1, 256, 256, 2, 2, d, 64, bkv, 2))
            for t in ("f16", "bf16") for d, bkv in ((64, 64), (128, 128))]
    # Triton-style attention: (B, T, S, H, D, block_q, block_k, num_warps)
    out += [MgpuCfg("attention", "f16", (1, 256, 256, 2, 64, 64, 64, 4)),
            MgpuCfg("attention", "bf16", (1, 256, 256, 2, 128, 64, 32, 8))]
    return out


def mgpu_meta(cfg: MgpuCfg, kind: str, seed: int, jax_version: str) -> dict:
    """The entry's meta; hopper_matmul's keys are exactly the sample's, then seed."""
    s = cfg.sizes
    if cfg.kernel == "hopper_matmul":
        m, n, k, tm, tn, tk, steps = s
        return {"dtype": cfg.dtype, "M": m, "N": n, "K": k, "tile_m": tm, "tile_n": tn,
                "tile_k": tk, "max_concurrent_steps": steps,
                "out_dtype": {"f16": "float16", "bf16": "bfloat16"}[cfg.dtype],
                "kind": kind, "jax": jax_version, "seed": seed}
    if cfg.kernel == "hopper_mixed_type_matmul":
        m, n, k, tm, tn, tk, steps = s
        return {"kernel": cfg.kernel, "dtype": cfg.dtype, "a_dtype": "s8", "M": m, "N": n,
                "K": k, "tile_m": tm, "tile_n": tn, "tile_k": tk,
                "max_concurrent_steps": steps,
                "out_dtype": {"f16": "float16", "bf16": "bfloat16"}[cfg.dtype],
                "kind": kind, "jax": jax_version, "seed": seed}
    if cfg.kernel == "ragged_dot":
        m, n, k, g, bm, bn, bk, steps, gbn = s
        return {"kernel": cfg.kernel, "dtype": cfg.dtype, "M": m, "N": n, "K": k, "G": g,
                "tile_m": bm, "tile_n": bn, "tile_k": bk, "max_concurrent_steps": steps,
                "grid_block_n": gbn, "transpose_rhs": False, "kind": kind,
                "jax": jax_version, "seed": seed}
    if cfg.kernel == "attention_mgpu":
        b, t, sk, h, hkv, d, bq, bkv, steps = s
        return {"kernel": cfg.kernel, "dtype": cfg.dtype, "B": b, "T": t, "S": sk, "H": h,
                "Hkv": hkv, "D": d, "block_q": bq, "block_kv": bkv,
                "max_concurrent_steps": steps, "causal": False, "kind": kind,
                "jax": jax_version, "seed": seed}
    b, t, sk, h, d, bq, bkk, w = s
    return {"kernel": "attention", "dtype": cfg.dtype, "B": b, "T": t, "S": sk, "H": h,
            "D": d, "block_q": bq, "block_k": bkk, "num_warps": w, "num_stages": 2,
            "sm_scale": 0.125, "causal": False, "kind": kind, "jax": jax_version,
            "seed": seed}


def mgpu_inputs(cfg: MgpuCfg, meta: dict, kind: str, rng) -> dict[str, np.ndarray]:
    """The raw inputs of one mgpu entry (a, b[, c] | a, b, group_sizes | q, k, v)."""
    t, m = cfg.dtype, meta
    wide = "wide16" if kind == "wide" else None  # outputs in f16/bf16 stay finite
    if cfg.kernel in ("attention", "attention_mgpu"):
        q = (m["B"], m["T"], m["H"], m["D"])
        kv = (m["B"], m["S"], m.get("Hkv", m["H"]), m["D"])
        return {"q": draw(rng, t, q, kind, wide), "k": draw(rng, t, kv, kind, wide),
                "v": draw(rng, t, kv, kind, wide)}
    if cfg.kernel == "hopper_mixed_type_matmul":
        lo, hi = (0, 8) if kind == "positive" else (-128, 128)
        return {"a": rng.integers(lo, hi, (m["M"], m["K"])).astype(np.int8),
                "b": draw(rng, t, (m["K"], m["N"]), kind, "wide_mixed" if wide else None)}
    if cfg.kernel == "ragged_dot":
        cuts = np.sort(rng.choice(np.arange(1, m["M"]), m["G"] - 1, replace=False))
        sizes = np.diff(np.concatenate([[0], cuts, [m["M"]]])).astype(np.int32)
        return {"a": draw(rng, t, (m["M"], m["K"]), kind, wide),
                "b": draw(rng, t, (m["G"], m["K"], m["N"]), kind, wide),
                "group_sizes": sizes}
    out = {"a": draw(rng, t, (m["M"], m["K"]), kind, wide),
           "b": draw(rng, t, (m["K"], m["N"]), kind, wide)}
    if cfg.with_c:
        out["c"] = draw(rng, t, (m["M"], m["N"]), kind, wide)
    return out


# ----------------------------------------------------------------------------------------
# Running on the GPU (imports JAX and jaxwarp only here).


def _jax():
    sys.path.insert(0, str(ROOT))
    import jax

    return jax


def device_name(interpret: bool = False) -> str:
    """``"NVIDIA H100 80GB HBM3 sm_90"``: the GPU and its sm_XY (conformance reads it).
    ``interpret`` (--interpret, a dry run of this tool without a GPU: Pallas' interpret
    mode): the files say that their values are not hardware."""
    jax = _jax()
    d = jax.devices()[0]
    if interpret:
        return f"interpret mode on {d.platform}, not hardware"
    cc = str(getattr(d, "compute_capability", "")).replace(".", "")
    return f"{d.device_kind} sm_{cc}" if cc else d.device_kind


def check_jax(log_file=None, interpret: bool = False) -> str:
    jax = _jax()
    v = jax.__version__
    if not v.startswith("0.11."):
        log(f"WARNING: this tool was written for JAX 0.11.x; this is {v}", file=log_file)
    if jax.devices()[0].platform != "gpu" and not interpret:
        sys.exit(f"no GPU: JAX's default device is {jax.devices()[0]} (install jax[cuda13])")
    return v


def run_triton(cfg: TritonCfg, inputs: list[dict], interpret: bool = False
               ) -> list[np.ndarray]:
    """Compiles ``triton_matmul`` for ``cfg`` once and runs it on each input set."""
    jax = _jax()
    import jax.numpy as jnp

    from jaxwarp.kernels import triton_matmul

    dt = _np_dtype(cfg.operand)
    block = (cfg.bm, cfg.bn, cfg.bk)
    precision = jax.lax.Precision.HIGHEST if cfg.dtype in OPERAND else None

    def kernel(a, b, c=None):
        return triton_matmul(a, b, c, block=block, num_warps=cfg.num_warps, form=cfg.form,
                             interpret=interpret, out_dtype=jnp.float32,
                             precision=precision)

    fn = jax.jit(kernel)
    outs = []
    for x in inputs:
        args = [jnp.asarray(x["a"].view(dt)), jnp.asarray(x["b"].view(dt))]
        if "c" in x:
            args.append(jnp.asarray(x["c"].view(np.float32)))
        outs.append(np.asarray(fn(*args)).view(np.uint32))
    return outs


def mgpu_fn(cfg: MgpuCfg, meta: dict):
    """JAX's kernel for ``cfg`` as a function of the entry's inputs, in their key order."""
    _jax()
    m = meta
    if cfg.kernel in ("hopper_matmul", "hopper_mixed_type_matmul"):
        if cfg.kernel == "hopper_matmul":
            from jax.experimental.pallas.ops.gpu import hopper_matmul_mgpu as mod
        else:
            from jax.experimental.pallas.ops.gpu import hopper_mixed_type_matmul_mgpu as mod
        config = mod.TuningConfig(tile_m=m["tile_m"], tile_n=m["tile_n"], tile_k=m["tile_k"],
                                  max_concurrent_steps=m["max_concurrent_steps"])
        if cfg.kernel == "hopper_matmul":
            def fn(a, b, c=None):
                return mod.matmul(a, b, c, config)
        else:
            out_dtype = _np_dtype(cfg.dtype)

            def fn(a, b):
                return mod.mixed_matmul_kernel(a, b, out_dtype=out_dtype, config=config)
    elif cfg.kernel == "ragged_dot":
        from jax.experimental.pallas.ops.gpu import ragged_dot_mgpu as mod

        def fn(a, b, group_sizes):
            return mod.ragged_dot(a, b, group_sizes=group_sizes, block_m=m["tile_m"],
                                  block_n=m["tile_n"], block_k=m["tile_k"],
                                  max_concurrent_steps=m["max_concurrent_steps"],
                                  grid_block_n=m["grid_block_n"], transpose_rhs=False)
    elif cfg.kernel == "attention_mgpu":
        from jax.experimental.pallas.ops.gpu import attention_mgpu as mod

        config = mod.TuningConfig(block_q=m["block_q"], block_kv=m["block_kv"],
                                  max_concurrent_steps=m["max_concurrent_steps"],
                                  causal=m["causal"])

        def fn(q, k, v):
            return mod.attention(q, k, v, config)
    else:
        from jax.experimental.pallas.ops.gpu import attention as mod

        sizes = mod.BlockSizes(block_q=m["block_q"], block_k=m["block_k"])

        def fn(q, k, v):
            return mod.mha(q, k, v, None, sm_scale=m["sm_scale"], causal=m["causal"],
                           block_sizes=sizes, num_warps=m["num_warps"],
                           num_stages=m["num_stages"])
    return fn


def run_mgpu(cfg: MgpuCfg, meta: dict, inputs: list[dict]) -> list[np.ndarray]:
    """Calls JAX's kernel (unchanged) once per input set; returns out's raw bits."""
    jax = _jax()
    import jax.numpy as jnp

    fn = jax.jit(mgpu_fn(cfg, meta))
    dt = _np_dtype(cfg.dtype)
    outs = []
    for x in inputs:
        args = []
        for key, v in x.items():
            if key in ("group_sizes",) or v.dtype == np.int8:
                args.append(jnp.asarray(v))
            else:
                args.append(jnp.asarray(v.view(dt)))
        outs.append(np.asarray(fn(*args)).view(RAW[cfg.dtype]))
    return outs


# ----------------------------------------------------------------------------------------
# Writing: one npz, cut at MAX_BYTES (what does not fit is logged, not written).


class Writer:
    def __init__(self, path: pathlib.Path, device: str, meta: dict, log_file):
        self.path, self.arrays, self.bytes = path, {"device": np.asarray(device)}, 0
        self.meta, self.log_file, self.dropped = meta, log_file, 0

    def add(self, prefix: str, arrays: dict[str, np.ndarray], meta: str) -> bool:
        size = sum(a.nbytes for a in arrays.values())
        if self.bytes + size > MAX_BYTES:
            self.dropped += 1
            log(f"  not written (file full at {self.bytes >> 20} MiB): {prefix}",
                file=self.log_file)
            return False
        self.bytes += size
        for k, v in arrays.items():
            self.arrays[f"{prefix}/{k}"] = v
        self.arrays[f"{prefix}/meta"] = np.asarray(meta)
        return True

    def save(self) -> None:
        """Writes the file (again, with what was added since, when called again)."""
        if len(self.arrays) == 1:
            log(f"nothing recorded for {self.path.name}", file=self.log_file)
            return
        self.meta["dropped_for_size"] = self.dropped
        self.arrays["meta"] = np.asarray(json.dumps(self.meta))
        np.savez_compressed(self.path, **self.arrays)
        log(f"wrote {self.path} ({self.path.stat().st_size >> 10} KiB, "
            f"{sum(k.endswith('/out') for k in self.arrays)} entries)", file=self.log_file)


class Files:
    """The npz files of a run: ``pallas_{dtype}.npz`` and ``pallas_mgpu.npz``, or with
    ``--small`` all in one ``pallas_small.npz``."""

    def __init__(self, out: pathlib.Path, device: str, args, jax_version: str, log_file):
        self.out, self.device, self.args, self.log_file = out, device, args, log_file
        self.jax_version, self.writers = jax_version, {}

    def get(self, stem: str) -> Writer:
        stem = "pallas_small" if self.args.small else stem
        if stem not in self.writers:
            meta = {"tool": "tools/capture/capture_pallas.py", "jax": self.jax_version,
                    "seed": self.args.seed, "small": self.args.small, "rejected": [],
                    "not_run": []}
            self.writers[stem] = Writer(self.out / f"{stem}.npz", self.device, meta,
                                        self.log_file)
        return self.writers[stem]


def _error_text(e: BaseException) -> str:
    """The exception's type and message; where the message is empty, where it was raised."""
    text = f"{type(e).__name__}: {e}"
    if not str(e) and e.__traceback__ is not None:
        frame = traceback.extract_tb(e.__traceback__)[-1]
        text += f"(raised at {frame.filename}:{frame.lineno}: {frame.line})"
    return text if len(text) < 4000 else text[:4000] + " [...]"


def _budget_spent(deadline: float, plan, i: int, what: str, file_meta, log_file) -> bool:
    """Past the deadline: logs and records the configurations not run; True to stop."""
    if time.time() <= deadline:
        return False
    log(f"budget spent: {len(plan) - i} {what} configurations not run", file=log_file)
    file_meta["not_run"] += [c.name for c in plan[i:]]
    return True


def _rejected(cfg, e: Exception, file_meta, log_file) -> None:
    """A configuration the compiler refused (or that failed): logged and kept."""
    file_meta["rejected"].append({"name": cfg.name, "error": _error_text(e)})
    log(f"REJECTED {cfg.name}: {_error_text(e)}", file=log_file)


def _ref_line(name: str, errs, seconds: float) -> str:
    flag = "  SUSPECT" if errs and max(errs) > 1e-2 else ""
    return (f"{name}: ref-err {' '.join(f'{e:.1e}' for e in errs) or '-'} "
            f"({seconds:.1f} s){flag}")


def capture_triton(args, files: Files, log_file, deadline: float) -> None:
    jax_version = files.jax_version
    for j, t in enumerate(args.dtypes):
        plan = [c for c in triton_plan((t,), args.small) if c.form in args.forms]
        # each operand type gets an equal share of what is left of the budget
        share = (deadline - time.time()) / (len(args.dtypes) - j)
        t_deadline = min(deadline, time.time() + share)
        w = files.get(f"pallas_{t}")
        file_meta = w.meta
        log(f"== Triton-style {t}: {len(plan)} configurations", file=log_file)
        for i, cfg in enumerate(plan):
            if _budget_spent(t_deadline, plan, i, t, file_meta, log_file):
                break
            m, n, k = cfg.shape
            rng = np.random.default_rng([args.seed, i, DTYPES.index(t)])
            sets = []
            op = OPERAND.get(t, t)
            for kind in KINDS:
                x = {"a": draw(rng, op, (m, k), kind), "b": draw(rng, op, (k, n), kind)}
                if cfg.form in FORMS_WITH_C:
                    x["c"] = draw(rng, "f32", (m, n), kind)
                sets.append(x)
            t0 = time.time()
            try:
                outs = run_triton(cfg, sets, args.interpret)
            except Exception as e:  # noqa: BLE001 - the compiler refused it: logged, kept
                _rejected(cfg, e, file_meta, log_file)
                continue
            errs = []
            for kind, x, o in zip(KINDS, sets, outs, strict=True):
                errs.append(ref_error(x["a"], x["b"], x.get("c"), o, op, "f32"))
                w.add(f"pallas/{cfg.name}/t{KINDS.index(kind)}", {**x, "out": o},
                      cfg.meta(kind, args.seed, jax_version))
            log(_ref_line(f"{cfg.name} {m}x{n}x{k}", errs, time.time() - t0), file=log_file)
        w.save()


def capture_mgpu(args, files: Files, log_file, deadline: float) -> None:
    jax_version = files.jax_version
    plan = mgpu_plan(args.small)
    w = files.get("pallas_mgpu")
    file_meta = w.meta
    log(f"== Mosaic GPU kernels: {len(plan)} configurations", file=log_file)
    for i, cfg in enumerate(plan):
        if _budget_spent(deadline, plan, i, "kernel", file_meta, log_file):
            break
        rng = np.random.default_rng([args.seed, 1000 + i])
        metas = [mgpu_meta(cfg, kind, args.seed, jax_version) for kind in KINDS]
        sets = [mgpu_inputs(cfg, mt, kind, rng) for kind, mt in zip(KINDS, metas, strict=True)]
        t0 = time.time()
        try:
            outs = run_mgpu(cfg, metas[0], sets)
        except Exception as e:  # noqa: BLE001 - the compiler refused it: logged, kept
            _rejected(cfg, e, file_meta, log_file)
            continue
        errs = []
        for j, (mt, x, o) in enumerate(zip(metas, sets, outs, strict=True)):
            if cfg.kernel == "hopper_matmul":
                errs.append(ref_error(x["a"], x["b"], x.get("c"), o, cfg.dtype, cfg.dtype))
            key = (f"{cfg.family}/{cfg.name}/t{j}" if cfg.family == "pallas"
                   else f"{cfg.family}/{cfg.name}_{KINDS[j]}")
            w.add(key, {**x, "out": o}, json.dumps(mt))
        log(_ref_line(f"{cfg.kernel} {cfg.name}", errs, time.time() - t0), file=log_file)
    w.save()


# ----------------------------------------------------------------------------------------
# Probe: which tensor-core instruction XLA's Triton pipeline chose for each configuration.

#: PTX instructions read off the dumps (the tensor-core ones and the data movement beside).
INSTR = re.compile(r"\b(wgmma\.mma_async[\w.:]*|mma\.sync\.aligned[\w.:]*|mma\.sp[\w.:]*|"
                   r"wmma\.mma[\w.:]*|ldmatrix[\w.:]*|stmatrix[\w.:]*|"
                   r"cp\.async\.bulk\.tensor[\w.:]*)")


def probe_plan(dtypes=DTYPES, small: bool = False) -> list[TritonCfg]:
    """Every block (16..128 each side) x num_warps, form "tiled"; --small: a few."""
    sides = (16, 64) if small else (16, 32, 64, 128)
    warps = (1, 4) if small else WARPS
    return [TritonCfg(t, bm, bn, bk, w, "tiled") for t in dtypes for bm in sides
            for bn in sides for bk in sides for w in warps]


def probe_worker(args) -> None:
    """Child process (XLA_FLAGS set by the parent): compiles each configuration of the
    probe plan under the jit name ``probe_{i}``; XLA dumps the PTX of each module."""
    jax = _jax()
    import jax.numpy as jnp

    from jaxwarp.kernels import triton_matmul

    plan = probe_plan(args.dtypes, args.small)
    deadline = time.time() + args.budget
    status = {}
    for i, cfg in enumerate(plan[args.start:], start=args.start):
        if time.time() > deadline:
            break
        m, n, k = cfg.shape
        dt = _np_dtype(cfg.operand)
        block = (cfg.bm, cfg.bn, cfg.bk)
        precision = jax.lax.Precision.HIGHEST if cfg.dtype in OPERAND else None

        def kernel(a, b, block=block, cfg=cfg, precision=precision):
            return triton_matmul(a, b, block=block, num_warps=cfg.num_warps, form=cfg.form,
                                 interpret=args.interpret, out_dtype=jnp.float32,
                                 precision=precision)

        kernel.__name__ = f"probe_{i}"
        try:
            jax.jit(kernel).lower(jax.ShapeDtypeStruct((m, k), dt),
                                  jax.ShapeDtypeStruct((k, n), dt)).compile()
            status[i] = ""
        except Exception as e:
            status[i] = _error_text(e)
    pathlib.Path(args.status).write_text(json.dumps(status))


def read_dump(dump: pathlib.Path, i: int) -> tuple[dict[str, int], list[str]]:
    """Counts of each instruction in the PTX XLA dumped for ``probe_{i}``
    (``module_NNNN.jit_probe_{i}[.N].ptx``), and the files read. Where the module has no
    ``.ptx`` file, every other file dumped for it (LLVM IR with inline PTX) is read."""
    pat = re.compile(rf"jit_probe_{i}(?!\d)")
    mine = [f for f in sorted(dump.iterdir()) if f.is_file() and pat.search(f.name)]
    files = [f for f in mine if f.suffix == ".ptx"] or mine
    counts: dict[str, int] = {}
    for f in files:
        for hit in INSTR.findall(f.read_text(errors="replace")):
            counts[hit] = counts.get(hit, 0) + 1
    return counts, [f.name for f in files]


def summarize(counts: dict[str, int]) -> str:
    """``wgmma``, ``mma.sync``, ``none`` (no tensor-core instruction) from the counts."""
    if any(k.startswith("wgmma") for k in counts):
        return "wgmma"
    if any(k.startswith("mma.sync") for k in counts):
        return "mma.sync"
    return "none"


_SHORT = {"wgmma": "W", "mma.sync": "m", "none": ".", "rejected": "x", "no dump": "?"}


def pivot(rows: list[dict]) -> list[str]:
    """The probe as one grid per (dtype, bk): a row per block (bm, bn), a column per
    num_warps, each cell W (wgmma), m (mma.sync), . (no tensor-core instruction), x (the
    compiler refused it) or ? (no PTX found): the choice read off at a glance."""
    out = ["W wgmma, m mma.sync, . no tensor-core instruction, x refused, ? no PTX found"]
    for t, bk in sorted({(r["dtype"], r["bk"]) for r in rows}, key=lambda x: (
            DTYPES.index(x[0]) if x[0] in DTYPES else 99, x[1])):
        mine = [r for r in rows if (r["dtype"], r["bk"]) == (t, bk)]
        warps = sorted({r["num_warps"] for r in mine})
        cell = {(r["bm"], r["bn"], r["num_warps"]): _SHORT.get(r["uses"], "?") for r in mine}
        out += ["", f"{t}, bk={bk}, by num_warps:", " " * 16 + " ".join(map(str, warps))]
        for bm, bn in sorted({(r["bm"], r["bn"]) for r in mine}):
            cells = " ".join(cell.get((bm, bn, w), " ").rjust(len(str(w))) for w in warps)
            out.append(f"  bm={bm:<4}bn={bn:<4}{cells}")
    return out


def capture_probe(args, files: Files, log_file, deadline: float) -> None:
    out, device, jax_version = files.out, files.device, files.jax_version
    plan = probe_plan(args.dtypes, args.small)
    log(f"== probe: {len(plan)} configurations", file=log_file)
    rows, start = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        dump, status_path = pathlib.Path(tmp) / "dump", pathlib.Path(tmp) / "status.json"
        dump.mkdir()
        env = dict(os.environ)
        env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + f" --xla_dump_to={dump}"
                            " --xla_dump_hlo_module_re=.*probe_.*").strip()
        env["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
        status: dict[str, str] = {}
        while start < len(plan) and time.time() < deadline:
            budget = max(10, int(deadline - time.time()))
            cmd = [sys.executable, __file__, "--probe-worker", "--status", str(status_path),
                   *(["--interpret"] if args.interpret else []),
                   "--start", str(start), "--budget", str(budget),
                   "--dtypes", ",".join(args.dtypes)] + (["--small"] if args.small else [])
            try:
                subprocess.run(cmd, env=env, timeout=budget + 120, check=False)
            except subprocess.TimeoutExpired:
                log(f"probe worker timed out (from configuration {start})", file=log_file)
            got = json.loads(status_path.read_text()) if status_path.exists() else {}
            status.update(got)
            done = [int(i) for i in got]
            if not done:  # the worker died on configuration `start`
                status[str(start)] = "the worker process died compiling it"
                start += 1
            else:
                start = max(done) + 1
        for i, cfg in enumerate(plan):
            if str(i) not in status:
                continue
            counts, files = read_dump(dump, i) if not status[str(i)] else ({}, [])
            m, n, k = cfg.shape
            uses = "rejected" if status[str(i)] else summarize(counts) if files else "no dump"
            rows.append({"dtype": cfg.dtype, "bm": cfg.bm, "bn": cfg.bn, "bk": cfg.bk,
                         "num_warps": cfg.num_warps, "form": cfg.form, "M": m, "N": n, "K": k,
                         "uses": uses, "instructions": counts, "files": files[:8],
                         "error": status[str(i)]})
        if args.keep_dump:
            import shutil

            shutil.copytree(dump, out / "pallas_probe_dump", dirs_exist_ok=True)
    report = {"device": device, "jax": jax_version, "source": "XLA --xla_dump_to PTX",
              "configs": rows}
    (out / "pallas_probe.json").write_text(json.dumps(report, indent=1))
    lines = [f"# {device}, JAX {jax_version}: tensor-core instruction per Triton-style "
             f"configuration (PTX of XLA's dump)",
             f"{'dtype':6} {'bm':>4} {'bn':>4} {'bk':>4} {'warps':>5}  uses      instructions"]
    for r in rows:
        what = ", ".join(f"{k} x{v}" for k, v in sorted(r["instructions"].items())
                         if k.startswith(("wgmma", "mma")))
        lines.append(f"{r['dtype']:6} {r['bm']:4} {r['bn']:4} {r['bk']:4} {r['num_warps']:5}  "
                     f"{r['uses']:9} {what or r['error'][:120]}")
    lines += ["", *pivot(rows)]
    (out / "pallas_probe.txt").write_text("\n".join(lines) + "\n")
    log(f"wrote {out / 'pallas_probe.json'} ({len(rows)} configurations)", file=log_file)


# ----------------------------------------------------------------------------------------
# tests/data/pallas_sample.npz from a recorded file.


def trim_sample(src: str, dst: str, rows: int = 128) -> None:
    """The three Triton-style entries as they are, the mgpu entry cut to ``a[:rows]``,
    ``b[:, :rows]``, ``out[:rows, :rows]`` with meta M = N = ``rows`` (output tiles are
    independent), and ``device``. Nothing else is changed."""
    d = np.load(src)
    out = {"device": d["device"]}
    for k in d.files:
        if k.startswith("pallas/"):
            out[k] = d[k]
    for g in sorted({k.rsplit("/", 1)[0] for k in d.files if k.startswith("pallas_mgpu/")}):
        meta = json.loads(str(d[f"{g}/meta"]))
        if meta["M"] < rows or meta["N"] < rows or rows % meta["tile_m"] or rows % meta["tile_n"]:
            raise ValueError(f"{g}: cannot cut {meta['M']}x{meta['N']} to {rows}x{rows} "
                             f"along whole tiles")
        out[f"{g}/a"] = d[f"{g}/a"][:rows]
        out[f"{g}/b"] = d[f"{g}/b"][:, :rows]
        if f"{g}/c" in d.files:
            out[f"{g}/c"] = d[f"{g}/c"][:rows, :rows]
        out[f"{g}/out"] = d[f"{g}/out"][:rows, :rows]
        meta["M"] = meta["N"] = rows
        out[f"{g}/meta"] = np.asarray(json.dumps(meta))
    np.savez_compressed(dst, **out)
    print(f"wrote {dst} ({os.path.getsize(dst)} bytes, {len(out)} keys)")


# ----------------------------------------------------------------------------------------


def selftest() -> None:
    """Host checks (numpy and ml_dtypes only): the generators give finite values of their
    format, bits round-trip, names and shapes follow the sample's."""
    rng = np.random.default_rng(0)
    for t in sorted({OPERAND.get(t, t) for t in DTYPES}):
        for kind in KINDS:
            bits = draw(rng, t, (64, 64), kind)
            v = from_bits(bits, t)
            assert bits.dtype == RAW[t] and np.isfinite(v).all(), (t, kind)
            assert np.array_equal(to_bits(v, t), bits), (t, kind)
            if kind == "positive":
                assert (v >= 0).all()
            else:
                assert (v < 0).any() and (v > 0).any()
    assert TritonCfg("bf16", 16, 16, 32, 1, "tiled").name == "bf16_16x16x32_w1"
    assert TritonCfg("f16", 32, 32, 64, 2, "tiled").shape[:2] == (64, 64)
    assert len({c.name for c in triton_plan()}) == len(triton_plan())
    hi = TritonCfg("f32_highest", 16, 16, 32, 1, "tiled")
    assert json.loads(hi.meta("wide", 0, "x"))["dtype"] == "f32" and hi.operand == "f32"
    names = [c.name for c in mgpu_plan()]
    assert len(set(names)) == len(names)
    print(f"selftest ok: {len(triton_plan())} Triton-style, {len(mgpu_plan())} kernel and "
          f"{len(probe_plan())} probe configurations")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="output folder (with --trim-sample: the output file)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--small", action="store_true", help="a few configurations (tests/data)")
    ap.add_argument("--only", default="triton,mgpu,probe")
    ap.add_argument("--dtypes", default=",".join(DTYPES))
    ap.add_argument("--forms", default=",".join(FORMS),
                    help="Triton-style forms recorded (default: all)")
    ap.add_argument("--budget", type=float, default=480.0,
                    help="seconds after which no new configuration is started")
    ap.add_argument("--keep-dump", action="store_true",
                    help="keep XLA's probe dump as DIR/pallas_probe_dump (large)")
    ap.add_argument("--interpret", action="store_true",
                    help="dry run without a GPU: Pallas' interpret mode (values not hardware)")
    ap.add_argument("--selftest", action="store_true")
    ap.add_argument("--trim-sample", metavar="SAMPLE.npz")
    ap.add_argument("--probe-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--status", help=argparse.SUPPRESS)
    ap.add_argument("--start", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.dtypes = tuple(args.dtypes.split(","))
    args.forms = tuple(args.forms.split(","))
    if set(args.forms) - set(FORMS):
        ap.error(f"--forms: unknown {sorted(set(args.forms) - set(FORMS))}; allowed: "
                 f"{','.join(FORMS)}")
    bad = set(args.dtypes) - set(DTYPES)
    if bad:
        ap.error(f"--dtypes: unknown {sorted(bad)}; allowed: {','.join(DTYPES)}")
    only = set(args.only.split(","))
    if only - {"triton", "mgpu", "probe"}:
        ap.error(f"--only: unknown {sorted(only - {'triton', 'mgpu', 'probe'})}; allowed: "
                 f"triton, mgpu, probe")
    if args.selftest:
        return selftest()
    if args.trim_sample:
        if not args.out:
            ap.error("--trim-sample needs --out FILE.npz")
        return trim_sample(args.trim_sample, args.out)
    if args.probe_worker:
        return probe_worker(args)
    if not args.out:
        ap.error("--out DIR is required")
    t0 = time.time()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    # JAX takes 75% of the GPU's memory at start by default; the probe's child process
    # needs some too.
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    with open(out / "pallas_capture.log", "a") as log_file:
        jax_version = check_jax(log_file, args.interpret)
        device = device_name(args.interpret)
        log(f"GPU: {device}, JAX {jax_version}, seed {args.seed}, options {sys.argv[1:]}",
            file=log_file)
        files = Files(out, device, args, jax_version, log_file)
        # The budget is shared in order: triton first, then mgpu, then the probe.
        steps = [s for s in ("triton", "mgpu", "probe") if s in only]
        for j, step in enumerate(steps):
            left = args.budget - (time.time() - t0)
            deadline = time.time() + left / (len(steps) - j)
            fn = {"triton": capture_triton, "mgpu": capture_mgpu, "probe": capture_probe}[step]
            try:
                fn(args, files, log_file, deadline)
            except Exception:
                log(f"{step} failed:\n{traceback.format_exc()}", file=log_file)
        log(f"done in {time.time() - t0:.0f} s", file=log_file)


if __name__ == "__main__":
    main()
