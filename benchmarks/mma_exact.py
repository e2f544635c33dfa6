"""Exact-mode ``mma`` over many independent tiles (m16n16k16 f16 / bf16, m16n16k8 tf32,
m16n16k32 fp8).

Prints JSON: tiles/s of ``jaxwarp.mma(..., mode="exact")`` on a batch of tiles, and,
measured in the same run on the same tiles, tiles/s of XLA's own batched product
``jnp.einsum('tmk,tkn->tmn', a, b, preferred_element_type=f32) + c`` (fp8 tiles: the
same values as f16, XLA having no fp8 product on every backend; tf32 tiles: the fp32
words at XLA's default precision), their ratio
``exact_over_einsum``, and the memory exact mode needs: the compiled temp buffer against
the bytes of its arguments and output, and on an accelerator the device's peak bytes in
use.

On a GPU exact ``mma`` runs its tiles through the fused Pallas kernel where that kernel
models the datapath (``jaxwarp.config.gemm_fused_kernel``; f16 / bf16 / tf32 / fp8
operands with an fp32 C and D, ``fused_kernel.models``): ``exact_path`` says which ran
(``"kernel"`` or ``"xla"``, read from the traced program). ``--xla`` times the model's XLA ops too
(``gemm_fused_kernel="off"``), in the same run; where the kernel ran, the first
``--check`` tiles' bits are compared with theirs (``bits_equal_xla``). With
``--tensor-cores auto`` on a Hopper GPU the chains that are ``wgmma``'s run on its tensor
cores, several tiles to one instruction (``exact_path`` ``"tensor_cores"``, or
``"tensor_cores_mosaic_gpu"`` with ``--tiles-backend mosaic_gpu``; the bits checked
against the XLA ops the same way); ``--tc-groups`` times the Triton kernel's variants.
``--groups`` / ``--warps`` / ``--conds`` time the fused kernel's variants
(``jaxwarp.backends.fused_tiles_chain``: tiles per kernel instance, warps, a cond on the
operands between two kernels), one record each.

Usage: python benchmarks/mma_exact.py [--tiles N] [--a-type f16|bf16|tf32|e4m3|e5m2]
       [--b-type T] [--c-type f32|f16] [--arch sm_90|sm_80|...] [--instruction I] [--k K]
       [--fused auto|on|off] [--xla] [--check N] [--groups 2,4,8] [--warps 4,8]
       [--conds rule,on,off] [--tensor-cores auto|off] [--tc-groups 1,2,4]
       [--tiles-backend auto|triton|mosaic_gpu]
       (``--arch``: the architecture's datapath: sm_70 / sm_75 / sm_80 / sm_89 cut k = 16
       into 4 or 2 blocks, sm_90 / sm_100 / sm_120 take it in one; the kernel models
       each. fp8 defaults: ``wgmma``, sm_90a, k 32; tf32: k 8.)
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np
from _common import best_time, bit_view, compiled_memory, device_info, emit, exact_path

import jaxwarp
from jaxwarp import backends

_FP8 = ("e4m3", "e5m2")


def _memory(fn, *args) -> dict:
    """Compiled memory analysis of ``fn`` (temp vs argument + output bytes)."""
    m = compiled_memory(fn, *args)
    if "temp_bytes" in m:
        m["temp_over_io"] = m["temp_bytes"] / m["arg_plus_out_bytes"]
    return m


def _peak_bytes() -> int | None:
    stats = jax.devices()[0].memory_stats()
    return None if not stats else stats.get("peak_bytes_in_use")


def _ints(text: str | None) -> list[int]:
    return [int(v) for v in text.split(",")] if text else []


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--tiles",
        type=int,
        default=None,
        help="number of tiles (default 2^16 on CPU, 2^20 otherwise)",
    )
    p.add_argument("--a-type", dest="a_format", default="f16",
                   choices=["f16", "bf16", "tf32", *_FP8])
    p.add_argument("--b-type", dest="b_format", default=None, choices=[None, *_FP8],
                   help="B's fp8 format (default: A's)")
    p.add_argument("--c-type", dest="c_format", default="f32", choices=["f32", "f16"])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--arch", default=None,
                   help="target of the datapath model (default sm_90; fp8 sm_90a)")
    p.add_argument("--instruction", default=None,
                   help="wmma, mma_sync, wgmma, tcgen05 (default wmma; fp8 wgmma)")
    p.add_argument("--k", type=int, default=None, help="tile k (default 16; fp8 32)")
    p.add_argument("--xla", action="store_true",
                   help="also time the model's XLA ops (gemm_fused_kernel='off')")
    p.add_argument("--check", type=int, default=1 << 14,
                   help="tiles whose bits are compared with the XLA ops' (0: none)")
    p.add_argument("--fused", default=None, choices=["auto", "on", "off"],
                   help="jaxwarp.config.gemm_fused_kernel for the run (default: as set)")
    p.add_argument("--tensor-cores", dest="tensor_cores", default=None,
                   choices=["auto", "off"],
                   help="jaxwarp.config.gemm_exact_tensor_cores for the run (default: as "
                        "set): 'auto' runs wgmma's chains on a Hopper GPU's tensor cores")
    p.add_argument("--tiles-backend", dest="tiles_backend", default=None,
                   choices=["auto", "triton", "mosaic_gpu"],
                   help="jaxwarp.config.gemm_tiles_backend for the run (default: as set): "
                        "the Pallas backend of the tensor cores' tiles kernel")
    p.add_argument("--tc-groups", dest="tc_groups", default=None,
                   help="tensor-core kernel variants: groups of 64 rows an instance")
    p.add_argument("--groups", default=None, help="kernel variants: tiles an instance")
    p.add_argument("--warps", default=None, help="kernel variants: warps an instance")
    p.add_argument("--conds", default=None,
                   help="kernel variants: 'rule', 'on', 'off' (a cond on the operands, "
                        "finite f16 / fp8 or bf16 in range, between two kernels)")
    args = p.parse_args()
    if args.fused is not None:
        jaxwarp.config.update("gemm_fused_kernel", args.fused)
    if args.tensor_cores is not None:
        jaxwarp.config.update("gemm_exact_tensor_cores", args.tensor_cores)
    if args.tiles_backend is not None:
        jaxwarp.config.update("gemm_tiles_backend", args.tiles_backend)
    on_cpu = jax.default_backend() == "cpu"
    tiles = args.tiles if args.tiles is not None else (1 << 16 if on_cpu else 1 << 20)
    fa = args.a_format
    fb = args.b_format or fa
    if (fb != fa) and fa not in _FP8:
        p.error(f"--b-type {fb}: mixed formats are fp8 pairs; --a-type is {fa}")
    fp8 = fa in _FP8
    instruction = args.instruction or ("wgmma" if fp8 else "wmma")
    arch = args.arch or ("sm_90a" if instruction == "wgmma" else "sm_90")
    k = args.k or (32 if fp8 else 8 if fa == "tf32" else 16)
    c_dt = {"f32": np.float32, "f16": np.float16}[args.c_format]
    d_format = args.c_format
    rng = np.random.default_rng(0)

    def operand(shape, fmt):
        x = rng.standard_normal(shape, np.float32)
        return jax.device_put(jnp.asarray(x).astype(jaxwarp.get_format(fmt).storage_dtype))

    a, b = operand((tiles, 16, k), fa), operand((tiles, k, 16), fb)
    c = jax.device_put(rng.standard_normal((tiles, 16, 16), np.float32).astype(c_dt))
    kw = dict(a_format=fa, b_format=fb, c_format=args.c_format, d_format=d_format,
              arch=arch, instruction=instruction, instruction_k=None)

    def exact(a, b, c):
        return jaxwarp.mma(a, b, c, **kw)

    def einsum(a, b, c):
        d = jnp.einsum("tmk,tkn->tmn", a, b, preferred_element_type=jnp.float32)
        return (d + c.astype(jnp.float32)).astype(c.dtype)

    io_bytes = a.nbytes + b.nbytes + c.nbytes + c.nbytes  # output has c's shape and dtype
    f_exact = jax.jit(exact)
    path = exact_path(str(jax.make_jaxpr(exact)(a, b, c)))
    # Exact mode first, so that the device's peak counter sees nothing else.
    base = _peak_bytes()
    d = f_exact(a, b, c).block_until_ready()
    peak = _peak_bytes()
    t_exact = best_time(lambda: f_exact(a, b, c).block_until_ready(), args.repeats)
    # fp8: XLA's product of the same values as f16 (converted before the timing)
    ax, bx = (a.astype(jnp.float16), b.astype(jnp.float16)) if fp8 else (a, b)
    f_einsum = jax.jit(einsum)
    ref = f_einsum(ax, bx, c).block_until_ready()
    t_einsum = best_time(lambda: f_einsum(ax, bx, c).block_until_ready(), args.repeats)
    close = bool(
        jnp.allclose(
            d.astype(jnp.float32),
            ref.astype(jnp.float32),
            rtol=1e-2 if args.c_format == "f16" or fa == "tf32" else 1e-3 if fp8 else 1e-5,
            atol=1e-3,
        )
    )
    name = f"mma_exact_m16n16k{k}_{fa}{'' if fb == fa else fb}_{args.c_format}{d_format}"
    result = {
        "benchmark": name,
        "arch": arch,
        "instruction": instruction,
        **device_info(),
        "tiles": tiles,
        "exact_path": path,
        "exact_close_to_einsum": close,
        "einsum_operand_dtype": jnp.dtype(ax.dtype).name,
        "exact_tiles_per_s": tiles / t_exact,
        "einsum_tiles_per_s": tiles / t_einsum,
        "exact_over_einsum": t_einsum / t_exact,
        "io_bytes": io_bytes,
        **{f"exact_{key}": v for key, v in _memory(exact, a, b, c).items()},
    }
    if peak is not None:
        result["device_peak_bytes_before"] = base
        result["device_peak_bytes_exact"] = peak
        result["device_peak_over_io"] = peak / io_bytes
    if args.xla or (path != "xla" and args.check):
        with jaxwarp.config.override(gemm_fused_kernel="off", gemm_exact_tensor_cores="off"):
            f_xla = jax.jit(lambda a, b, c: jaxwarp.mma(a, b, c, **kw))  # traced here
            n = min(args.check, tiles)
            if path != "xla" and n:
                want = f_xla(a[:n], b[:n], c[:n])
                result["bits_checked_tiles"] = n
                result["bits_equal_xla"] = bool(np.array_equal(
                    np.asarray(want).view(np.uint32 if d_format == "f32" else np.uint16),
                    np.asarray(d[:n]).view(np.uint32 if d_format == "f32" else np.uint16)))
            if args.xla:
                f_xla(a, b, c).block_until_ready()
                t_xla = best_time(lambda: f_xla(a, b, c).block_until_ready(), args.repeats)
                result["xla_tiles_per_s"] = tiles / t_xla
                result["xla_over_einsum"] = t_einsum / t_xla
                result["exact_over_xla"] = t_xla / t_exact
    emit(result)
    variants(args, a, b, c, d, fa, fb, instruction, arch, k, t_einsum, name)
    tc_variants(args, a, b, c, d, fa, fb, instruction, k, t_einsum, name)


def variants(args, a, b, c, d, fa, fb, instruction, arch, k, t_einsum, name) -> None:
    """The kernel's variants (``--groups``, ``--warps``, ``--conds``), one record each,
    with whether their bits equal exact ``mma``'s (``d``)."""
    groups, warps = _ints(args.groups) or [None], _ints(args.warps) or [None]
    conds = [{"rule": None, "on": True, "off": False}[v]
             for v in (args.conds or "rule").split(",")]
    if args.groups is None and args.warps is None and args.conds is None:
        return
    if d.dtype != jnp.float32:
        raise SystemExit("--groups / --warps / --conds: the kernel's D is fp32 (--c-type f32)")
    dp = jaxwarp.datapath_for(arch, instruction, fa, k, fb)
    tiles, interpret = a.shape[0], jax.default_backend() != "gpu"
    for g, w, cond in ((g, w, cond) for g in groups for w in warps for cond in conds):
        f = jax.jit(lambda a, b, c, g=g, w=w, cond=cond: backends.fused_tiles_chain(
            a, b, c.astype(jnp.float32), dp, fa, b_fmt=fb, group=g, num_warps=w,
            cond=cond, interpret=interpret))
        same = bool(jnp.array_equal(jax.lax.bitcast_convert_type(f(a, b, c), jnp.int32),
                                    jax.lax.bitcast_convert_type(d, jnp.int32)))
        t = best_time(lambda f=f: f(a, b, c).block_until_ready(), args.repeats)
        emit({"benchmark": f"{name}/kernel_variant", "arch": arch, **device_info(),
              "tiles": tiles, "group": g, "num_warps": w, "cond": cond,
              "bits_equal_mma": same, "tiles_per_s": tiles / t,
              "over_einsum": t_einsum / t})


def tc_variants(args, a, b, c, d, fa, fb, instruction, k, t_einsum, name) -> None:
    """The tensor-core tiles kernel's variants (``--tc-groups``: groups of 64 rows a
    kernel instance takes), one record each, with whether their bits equal exact
    ``mma``'s (``d``). A Hopper GPU runs the kernel, elsewhere Pallas' interpreter the
    exact model's chain of the same layout."""
    if not args.tc_groups:
        return
    if (fb != fa or k % backends.NATIVE_K[fa] or (fa in _FP8 and instruction != "wgmma")
            or (fa == "tf32" and instruction == "wmma")):
        raise SystemExit("--tc-groups times the kernel's wgmma form: one operand format, "
                         "the format's wgmma k; fp8 through --instruction wgmma, tf32 not "
                         "through wmma (two k4 blocks)")
    spec = backends.NativeDotSpec(fa, fb, args.c_format, backends.NATIVE_K[fa],
                                  fa in _FP8)
    interpret = backends.native_device_error() is not None
    tiles = a.shape[0]
    for g in _ints(args.tc_groups):
        f = jax.jit(lambda a, b, c, g=g: backends.native_tiles_chain(
            a, b, c, spec, groups=g, interpret=interpret))
        same = bool(np.array_equal(bit_view(f(a, b, c)), bit_view(d)))
        t = best_time(lambda f=f: f(a, b, c).block_until_ready(), args.repeats)
        emit({"benchmark": f"{name}/tensor_core_variant", **device_info(), "tiles": tiles,
              "groups": g, "k": k, "bits_equal_mma": same, "tiles_per_s": tiles / t,
              "over_einsum": t_einsum / t})


if __name__ == "__main__":
    main()
