"""Cost of ``jaxwarp.emulate`` on a small transformer's training step, against plain JAX.

One jitted step (loss, ``jax.value_and_grad``, an Adam update) of the study's
transformer (``experiments/emulated_training.py``: modular addition, causal
attention, 4x MLP), timed in one run as

* ``plain``: the step as written, fp32 products (``precision=HIGHEST``);
* ``exact``: the loss under ``jaxwarp.emulate(..., operand_format=F)``, every
  forward and backward product on the tensor core's arithmetic bit for bit;
* ``fast``: the same with ``mode="fast"`` (operands rounded, one ``dot_general``);
* ``native`` (asked for with ``--modes``): ``mode="native"``, exact mode's bits from the
  Hopper GPU's own tensor cores (sm_90a only);
* ``exact_tc`` (asked for with ``--modes``): ``exact`` with the option
  ``gemm_exact_tensor_cores="auto"``: every product whose chain has the Hopper GPU's
  wgmma datapath (sm_90, sm_100a and sm_120a f16 / bf16, by the catalogue) on its tensor
  cores, the rest on the model's kernel; the same bits as ``exact``.

``--arch`` emulates another GPU's tensor core (``emulate(..., arch=A)``: sm_80's
``mma.sync`` chains blocks of 8 products, sm_100a's ``tcgen05`` as sm_90a's wgmma); the
issue's targets on a Hopper GPU: exact at least 0.15 of plain for sm_80 and sm_100a,
native at least 1.0 for sm_90a (``targets`` in the JSON, each with whether it is met).

Prints JSON: seconds per step; ``fast_over_plain`` and ``exact_over_plain``, *speed*
ratios ``t_plain / t_fast`` and ``t_plain / t_exact`` (1.0 = as fast as the plain step,
0.5 = half as fast), with ``target`` (fast mode at least 0.8 of the plain
step's speed on an H100) and ``meets_target``; the product count and FLOPs of one
forward pass, device and versions. (Records before 2026-11-24 used time ratios,
``t_fast / t_plain``, under the same names.)

Sizes: the default is the study's task (p = 13: 169 three-token examples, width 32,
1 layer), about 30 s on a 2-core CPU. ``--large`` is a step that keeps a GPU busy:
width 512, 8 heads, 4 layers, batch 64 of 128 random tokens (vocabulary 59), so every
layer's products are (8192 x 512) by (512 x 1536 / 512 / 2048) and attention is
64 x 8 heads of 128 x 128. ``--seq`` and ``--batch`` pick such random-token batches at
any size; ``--modes`` times a subset (e.g. ``plain,fast``). ``--profile`` also traces a
few steps of each mode but plain with ``jax.profiler`` and adds where the device time
goes (``profile``: the top kernels by seconds per step, and the share of the fused exact
kernel, ``jaxwarp_fused_exact_gemm``; ``profile_exact.py``'s trace reading).

Usage: python benchmarks/emulate_step.py [--format bf16] [--arch sm_80] [--p 13]
       [--width 32] [--layers 1] [--heads 4] [--seq S --batch B] [--large]
       [--modes plain,exact,fast,native] [--profile]
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from _common import best_time, device_info, emit, host_info, timed_first_call, versions

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "experiments"))
sys.path.insert(0, str(ROOT))
import emulated_training as et  # noqa: E402

import jaxwarp  # noqa: E402
from jaxwarp import emulate  # noqa: E402

TARGET_FAST = 0.8  # fast mode >= 80% of the plain step's speed on an H100
#: exact mode's and native mode's speed over plain, on a Hopper GPU at --large
TARGET_EXACT, TARGET_NATIVE = 0.15, 1.0
MODES = ("plain", "exact", "fast", "native", "exact_tc")
DEFAULT_MODES = ("plain", "exact", "fast")


def kernel_profile(step, args, calls: int = 3, top: int = 12) -> dict:
    """Device seconds per step by kernel name (a ``jax.profiler`` trace of ``calls``
    steps): the top kernels, their share of the traced device time, and the fused
    exact kernel's share."""
    from profile_exact import device_kernel_seconds

    from jaxwarp.backends import FUSED_KERNEL_NAME as KERNEL_NAME

    per = device_kernel_seconds(step, args, calls)
    total = sum(per.values())
    fused = sum(s for n, s in per.items() if KERNEL_NAME in n)
    rows = [{"kernel": n[:120], "seconds_per_step": s, "share": s / total if total else None}
            for n, s in sorted(per.items(), key=lambda kv: -kv[1])[:top]]
    return {"device_seconds_per_step": total, "kernels": len(per),
            "fused_kernel_share": fused / total if total else None, "top": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--format", default="bf16")
    ap.add_argument("--arch", default=None,
                    help="the GPU whose tensor core is emulated (default: emulate's, sm_90a)")
    ap.add_argument("--large", action="store_true",
                    help="GPU size: width 512, 8 heads, 4 layers, batch 64 x seq 128, p=59")
    ap.add_argument("--p", type=int, default=None, help="vocabulary / modulus")
    ap.add_argument("--width", type=int, default=None)
    ap.add_argument("--layers", type=int, default=None)
    ap.add_argument("--heads", type=int, default=None)
    ap.add_argument("--seq", type=int, default=None,
                    help="random-token sequences of this length (default: the task's 3)")
    ap.add_argument("--batch", type=int, default=None,
                    help="number of random sequences (needs --seq; default 64)")
    ap.add_argument("--modes", default=",".join(DEFAULT_MODES),
                    help=f"'plain' and any of {MODES[1:]}")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--profile", action="store_true",
                    help="trace the emulated steps: the top kernels by device time")
    args = ap.parse_args()
    t_start = time.perf_counter()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not modes or any(m not in MODES for m in modes) or "plain" not in modes:
        raise SystemExit(f"--modes must list 'plain' and any of {MODES}; got {args.modes!r}")
    if args.batch is not None and args.seq is None and not args.large:
        raise SystemExit("--batch needs --seq (the default task has all p^2 examples)")
    p = args.p or (59 if args.large else 13)
    width = args.width or (512 if args.large else 32)
    layers = args.layers or (4 if args.large else 1)
    heads = args.heads or (8 if args.large else 4)
    seq = args.seq or (128 if args.large else None)
    batch = args.batch or (64 if args.large else None)
    params = et.init_params(jax.random.key(0), p, width, layers, heads)
    if seq is None:
        tokens, labels = et.dataset(p)
        task = f"modular addition p={p}"
    else:
        # Random tokens at any length: the same model, its position table resized.
        rng = np.random.default_rng(0)
        batch = batch or 64
        tokens = jnp.asarray(rng.integers(0, p + 1, (batch, seq), dtype=np.int32))
        labels = jnp.asarray(rng.integers(0, p, (batch,), dtype=np.int32))
        params["pos"] = 0.1 * jax.random.normal(jax.random.key(1), (seq, width), jnp.float32)
        task = f"random tokens, vocabulary {p + 1}, batch {batch} x seq {seq}"
    init, update = et.adam(1e-3)
    opt = init(params)

    def make(settings):
        loss = lambda prm, t, y: et.loss_fn(prm, t, y, heads)  # noqa: E731
        if settings is not None:
            loss = emulate(loss, **settings)

        @jax.jit
        def step(params, opt):
            value, grads = jax.value_and_grad(loss)(params, tokens, labels)
            return update(params, grads, opt) + (value,)

        return step

    common = dict(operand_format=args.format, arch=args.arch)
    settings = {"plain": None, "exact": dict(common), "fast": dict(common, mode="fast"),
                "native": dict(common, mode="native"), "exact_tc": dict(common)}
    times, first_calls, profiles = {}, {}, {}
    for name in modes:
        step = make(settings[name])
        opts = {"gemm_exact_tensor_cores": "auto"} if name == "exact_tc" else {}

        def run(step=step, opts=opts):  # the option is read when the step is traced
            with jaxwarp.config.override(**opts):
                return jax.block_until_ready(step(params, opt))

        first_calls[name] = timed_first_call(run)
        times[name] = best_time(run, args.repeats)
        if args.profile and name != "plain":
            profiles[name] = kernel_profile(step, (params, opt))
    # The product list of one forward pass (fast mode: the same products, cheap to compile).
    _, rep = emulate(lambda prm: et.loss_fn(prm, tokens, labels, heads),
                     operand_format=args.format, mode="fast", report=True)(params)
    flops = sum(e.product.flops for e in rep.entries)
    speed = {m: times["plain"] / times[m] for m in modes if m != "plain"}
    result = {
        "benchmark": "emulate_step",
        "model": {"task": task, "examples": int(len(labels)), "seq": int(tokens.shape[1]),
                  "width": width, "layers": layers, "heads": heads},
        "operand_format": args.format,
        "arch": args.arch,
        "forward_products": rep.count,
        "forward_flops": flops,
        "seconds_per_step": times,
        "compile_plus_first_step_seconds": first_calls,
    }
    if profiles:
        result["profile"] = profiles
    if "fast" in speed:
        result["fast_over_plain"] = speed["fast"]
    for m in ("exact", "native", "exact_tc"):
        if m in speed:
            result[f"{m}_over_plain"] = speed[m]
    goals = {"fast": TARGET_FAST, "exact": TARGET_EXACT, "native": TARGET_NATIVE,
             "exact_tc": TARGET_EXACT}
    result.update({
        "target": {"fast_over_plain": TARGET_FAST,
                   "applies": "on an H100, at a size that keeps the GPU busy (--large)"},
        "meets_target": speed["fast"] >= TARGET_FAST if "fast" in speed else None,
        "targets": {f"{m}_over_plain": {"target": goals[m], "met": speed[m] >= goals[m]}
                    for m in goals if m in speed},
        **device_info(),
        "versions": versions(),
        **host_info(),
        "wall_seconds": time.perf_counter() - t_start,
        "note": "X_over_plain = t_plain / t_X: speed ratio of the emulated step to the "
                "plain step, same run (1.0 = no cost; higher is faster)",
    })
    emit(result)


if __name__ == "__main__":
    main()
