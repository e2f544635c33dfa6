"""Exact mode of every tensor-core instruction family against XLA's own batched product.

For each instruction (WMMA, PTX ``mma.sync``, ``wgmma``) and operand type, times
``jaxwarp.mma(..., mode="exact")`` on a batch of independent tiles of the instruction's
shape, and in the same run XLA's native batched product on the same tiles
(``einsum('tmk,tkn->tmn')`` with an fp32 accumulator; fp8 tiles are compared with f16 tiles
of the same shape, since XLA has no fp8 product on every backend). Prints one JSON record
per configuration: multiply-adds per second of both, their ratio, and the exact path's
throughput per multiply-add relative to exact WMMA f16 (the issue's "within 2x").

The exact outputs of the first two tiles are checked bit for bit against the plain-integer
reference model (``tests/reference_tc.py``); a mismatch is reported as ``"checked": false``.

On a GPU exact ``mma`` runs the tiles of the chains that the fused Pallas kernel models
through it (``jaxwarp.config.gemm_fused_kernel``: f16 / bf16 and fp8 ``wgmma`` with an fp32
accumulator; tf32, integers, f64 and sm_90's fp8 ``mma.sync`` keep the model's XLA ops):
``exact_path`` says which ran (``"kernel"`` or ``"xla"``); ``--fused off`` times the XLA
ops everywhere. ``--tensor-cores auto`` (``jaxwarp.config.gemm_exact_tensor_cores``) runs
the chains whose arithmetic a Hopper GPU's ``wgmma`` has on its tensor cores (``exact_path``
``"tensor_cores"``).

Usage: python benchmarks/instructions_exact.py [--macs N] [--only NAME,...] [--repeats R]
       [--fused auto|on|off] [--tensor-cores auto|off] [--tiles-backend auto|triton|mosaic_gpu]
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from _common import best_time, device_info, emit, exact_path

import jaxwarp

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests"))
import reference_tc  # noqa: E402  (the plain-int oracle, for the output check)

# name: (instruction, a_format, b_format, c_format, (m, n, k))
CONFIGS = {
    "wmma_f16_m16n16k16": ("wmma", "f16", "f16", "f32", (16, 16, 16)),
    "wmma_bf16_m16n16k16": ("wmma", "bf16", "bf16", "f32", (16, 16, 16)),
    "mma_sync_f16_m16n8k16": ("mma_sync", "f16", "f16", "f32", (16, 8, 16)),
    "mma_sync_bf16_m16n8k16": ("mma_sync", "bf16", "bf16", "f32", (16, 8, 16)),
    "mma_sync_tf32_m16n8k8": ("mma_sync", "tf32", "tf32", "f32", (16, 8, 8)),
    "mma_sync_e4m3_m16n8k32": ("mma_sync", "e4m3", "e4m3", "f32", (16, 8, 32)),
    "mma_sync_e5m2e4m3_m16n8k32": ("mma_sync", "e5m2", "e4m3", "f32", (16, 8, 32)),
    "wgmma_f16_m64n64k16": ("wgmma", "f16", "f16", "f32", (64, 64, 16)),
    "wgmma_bf16_m64n64k16": ("wgmma", "bf16", "bf16", "f32", (64, 64, 16)),
    "wgmma_tf32_m64n64k8": ("wgmma", "tf32", "tf32", "f32", (64, 64, 8)),
    "wgmma_e4m3_m64n64k32": ("wgmma", "e4m3", "e4m3", "f32", (64, 64, 32)),
    "mma_sync_s8_m16n8k32": ("mma_sync", "s8", "s8", "s32", (16, 8, 32)),
    "wgmma_u8s8_m64n64k32": ("wgmma", "u8", "s8", "s32", (64, 64, 32)),
    "wmma_s8_m16n16k16": ("wmma", "s8", "s8", "s32", (16, 16, 16)),
    # f64 last: it switches on jax_enable_x64 for the rest of the process.
    "mma_sync_f64_m8n8k4": ("mma_sync", "f64", "f64", "f64", (8, 8, 4)),
}
_DTYPE = {"s8": np.int8, "u8": np.uint8, "f64": np.float64, "s32": np.int32,
          "f16": np.float16, "bf16": ml_dtypes.bfloat16, "tf32": np.float32,
          "e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}
_BITS = {"f16": np.uint16, "bf16": np.uint16, "tf32": np.uint32, "e4m3": np.uint8,
         "e5m2": np.uint8, "f32": np.uint32, "f64": np.uint64, "s32": np.uint32,
         "s8": np.uint8, "u8": np.uint8}


def _operand(rng, shape, t):
    if t in ("s8", "u8", "s32"):
        info = np.iinfo(_DTYPE[t])
        return rng.integers(info.min, info.max, shape, endpoint=True).astype(_DTYPE[t])
    if t == "f64":
        return rng.standard_normal(shape)
    x = rng.standard_normal(shape, np.float32)
    return x.astype(_DTYPE[t])


def _check(a, b, c, d, instr, at, bt, ct, shape) -> bool:
    m, n, k = shape
    name = f"m{m}n{n}k{k}"
    for t in range(2):
        if at == "f64" or ct == "s32":
            A, B, C = (np.asarray(x[t]).tolist() for x in (a, b, c))
            want = (reference_tc.f64_tile(*(_f64_bits(x) for x in (a[t], b[t], c[t])))
                    if at == "f64" else reference_tc.int_tile(A, B, C, False))
            got = (_f64_bits(d[t]) if at == "f64" else np.asarray(d[t]).tolist())
            if got != want:
                return False
            continue
        params = reference_tc.preset_for(instr, at, name)
        A = np.asarray(a[t]).view(_BITS[at]).astype(int).tolist()
        B = np.asarray(b[t]).view(_BITS[bt]).astype(int).tolist()
        C = np.asarray(c[t]).view(_BITS[ct]).astype(int).tolist()
        want = reference_tc.mma_tile(A, B, C, at, bt, ct, ct, params)
        got = np.asarray(d[t]).view(_BITS[ct]).astype(int).tolist()
        if got != want:
            return False
    return True


def _f64_bits(x):
    return [[int(v) for v in row] for row in np.asarray(x).view(np.uint64)]


def run(name, macs, repeats, f16_rate=None):
    instr, at, bt, ct, (m, n, k) = CONFIGS[name]
    if at == "f64":
        jax.config.update("jax_enable_x64", True)
    tiles = max(2, macs // (m * n * k))
    rng = np.random.default_rng(0)
    a = jax.device_put(_operand(rng, (tiles, m, k), at))
    b = jax.device_put(_operand(rng, (tiles, k, n), bt))
    c = jax.device_put(_operand(rng, (tiles, m, n), ct) if ct in ("s32", "f64")
                       else rng.standard_normal((tiles, m, n), np.float32))
    arch = "sm_90a" if instr == "wgmma" else "sm_90"

    @jax.jit
    def exact(a, b, c):
        return jaxwarp.mma(a, b, c, a_format=at, b_format=bt, c_format=ct, d_format=ct,
                            instruction=instr, instruction_k=k, arch=arch)

    # XLA's product on tiles of the same shape (f16 stands in for fp8 and tf32 operands).
    xt = jnp.float16 if at in ("e4m3", "e5m2", "f16") else (
        jnp.bfloat16 if at == "bf16" else jnp.float32 if at == "tf32" else None)
    ax, bx = (a, b) if xt is None else (a.astype(xt), b.astype(xt))
    acc = {"s32": jnp.int32, "f64": jnp.float64}.get(ct, jnp.float32)

    @jax.jit
    def native(a, b, c):
        return jnp.einsum("tmk,tkn->tmn", a, b, preferred_element_type=acc) + c

    path = exact_path(str(jax.make_jaxpr(exact)(a, b, c)))
    d = exact(a, b, c).block_until_ready()
    checked = _check(a, b, c, d, instr, at, bt, ct, (m, n, k))
    t_exact = best_time(lambda: exact(a, b, c).block_until_ready(), repeats)
    t_native = best_time(lambda: native(ax, bx, c).block_until_ready(), repeats)
    total = tiles * m * n * k
    rec = {
        "benchmark": f"instructions_exact/{name}",
        **device_info(),
        "instruction": instr, "a_format": at, "b_format": bt, "shape": [m, n, k],
        "tiles": tiles, "exact_path": path, "checked_against_reference": checked,
        "exact_macs_per_s": total / t_exact,
        "native_macs_per_s": total / t_native,
        "native_operand_dtype": jnp.dtype(xt).name,
        "exact_over_native": t_native / t_exact,
    }
    if f16_rate is not None:
        rec["exact_over_wmma_f16_exact_per_mac"] = (total / t_exact) / f16_rate
    emit(rec)
    return total / t_exact


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--macs", type=int, default=None,
                   help="multiply-adds per batch (default 2^22 on CPU, 2^30 otherwise)")
    p.add_argument("--only", default=None,
                   help=f"comma-separated subset of: {', '.join(CONFIGS)}")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--fused", default=None, choices=["auto", "on", "off"],
                   help="jaxwarp.config.gemm_fused_kernel for the run (default: as set)")
    p.add_argument("--tensor-cores", dest="tensor_cores", default=None,
                   choices=["auto", "off"],
                   help="jaxwarp.config.gemm_exact_tensor_cores for the run (default: as set)")
    p.add_argument("--tiles-backend", dest="tiles_backend", default=None,
                   choices=["auto", "triton", "mosaic_gpu"],
                   help="jaxwarp.config.gemm_tiles_backend for the run (default: as set): "
                        "the Pallas backend of the tensor cores' tiles kernel")
    args = p.parse_args()
    if args.fused is not None:
        jaxwarp.config.update("gemm_fused_kernel", args.fused)
    if args.tensor_cores is not None:
        jaxwarp.config.update("gemm_exact_tensor_cores", args.tensor_cores)
    if args.tiles_backend is not None:
        jaxwarp.config.update("gemm_tiles_backend", args.tiles_backend)
    macs = args.macs or (1 << 22 if jax.default_backend() == "cpu" else 1 << 30)
    names = list(CONFIGS) if args.only is None else args.only.split(",")
    for nm in names:
        if nm not in CONFIGS:
            p.error(f"--only: unknown {nm!r}; allowed: {', '.join(CONFIGS)}")
    f16 = run("wmma_f16_m16n16k16", macs, args.repeats)
    for nm in names:
        if nm != "wmma_f16_m16n16k16":
            run(nm, macs, args.repeats, f16)


if __name__ == "__main__":
    main()
