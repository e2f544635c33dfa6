"""Compile time of ``jaxwarp.emulate``: a training step's trace, lower and XLA compile seconds.

For each model and mode, one jitted step (``jax.value_and_grad`` of the loss and an SGD
update) is built with ``jax.jit(step).trace(...)``, ``.lower()`` and ``.compile()``, each
timed on its own, in a fresh process (so no cache of an earlier measurement helps; the
persistent compilation cache is off unless ``--cache-dir`` is given):

* ``plain``: the step as written (fp32 products, ``precision=HIGHEST``);
* ``exact``: the loss under ``jaxwarp.emulate(..., operand_format=F)``;
* ``fast``: the same with ``mode="fast"``.

Models: ``study`` (the transformer of ``experiments/emulated_training.py``: 1 layer,
width 32, modular addition p = 13), ``vit`` (a Flax linen ViT: a Conv patch embedding,
2 blocks of ``MultiHeadDotProductAttention``, LayerNorm and a gelu MLP; the same layers
in plain JAX where Flax is missing), each with 4x the layers (``study_x4``, ``vit_x4``),
and the study transformer with its layers as one ``lax.scan`` over stacked parameters
(``study_scan``, ``study_scan_x4``: ``emulated_training.stack_blocks``; emulate rebuilds
the scan, so a layer's products compile once).
``--large``: GPU sizes
(the study transformer of ``emulate_step.py --large``: width 512, 4 layers, batch 64 x
seq 128; a ViT of width 256 on 64 images of 64 x 64).

Prints JSON: per model and mode ``trace_s``, ``lower_s``, ``compile_s``, ``total_s``, the
HLO instruction count of the compiled module and the number of emulated products of the
step (forward and backward, from the report of a forward pass: 3 per forward product),
``total_s`` per emulated product, the ratios ``exact_over_fast`` and
``x4_over_x1`` (the targets: at most 2 and 1.5; ``x4_over_x1_first_step`` of the times to
the first step), device and versions.
``--cache`` adds a cold and a warm run of the exact step with JAX's persistent
compilation cache in a temporary directory.

On the CPU an exact product's k loop runs through one shared executable per instruction
(the shared executables), compiled during the first run: ``to_first_step_s`` counts it, and the
ratios ``exact_over_fast_first_step`` compare the times to the first step.
``--inline``: the k loops compiled inside the step instead (``jaxwarp.config``'s
``gemm_shared="off"``, the code before the shared executables and the path on accelerators).
``--parts SIZE``: one exact SIZE^3 product and its gradient taken apart instead (HLO
instructions and seconds of the operand conversion, the k loop, the forward product, the
gradient, fast mode; the gradient's instructions by source). ``--budget`` / ``--out`` for
runs with a time limit (the GPU's).

``--kernel-unroll U``: on a GPU, the fused kernel's step loop for small products
(``gemm_kernel_unroll_small``; 16: no loop). ``--any-range-below N``: on a GPU, the
products that run one kernel for operands of any value with no range check and cond
(``gemm_kernel_any_range_below``; 0: every product checks its operands' range first).

Usage: python benchmarks/compile_time.py [--large] [--format bf16] [--models study,vit]
       [--modes plain,fast,exact] [--cache] [--inline] [--kernel-unroll U]
       [--any-range-below N] [--parts 64] [--budget S] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from _common import best_time  # noqa: E402

MODES = ("plain", "fast", "exact")
MODELS = ("study", "study_x4", "study_scan", "study_scan_x4", "vit", "vit_x4")


# --- the models (built inside the child process) ---------------------------------------

def _study(large: bool, mult: int, scan: bool = False):
    import jax
    import jax.numpy as jnp
    import numpy as np

    sys.path.insert(0, str(ROOT / "experiments"))
    import emulated_training as et

    if large:
        p, width, layers, heads, seq, batch = 59, 512, 4, 8, 128, 64
        rng = np.random.default_rng(0)
        tokens = jnp.asarray(rng.integers(0, p + 1, (batch, seq), dtype=np.int32))
        labels = jnp.asarray(rng.integers(0, p, (batch,), dtype=np.int32))
    else:
        p, width, layers, heads = 13, 32, 1, 4
        tokens, labels = et.dataset(p)
    params = et.init_params(jax.random.key(0), p, width, layers * mult, heads)
    if large:
        params["pos"] = 0.1 * jax.random.normal(jax.random.key(1), (seq, width), jnp.float32)
    if not scan:
        return (lambda prm, x, y: et.loss_fn(prm, x, y, heads)), params, (tokens, labels)
    # The same layers as one lax.scan over stacked parameters (as flax's nn.scan does):
    # emulate rebuilds the scan, so a layer's products are compiled once.
    return ((lambda prm, x, y: et.loss_fn(prm, x, y, heads)), et.stack_blocks(params),
            (tokens, labels))


def _vit_sizes(large: bool):
    """width, heads, patch, image size, batch, blocks."""
    return (256, 8, 8, 64, 64, 2) if large else (64, 4, 4, 32, 8, 2)


def _vit_jax(large: bool, mult: int):
    """The same ViT in plain JAX (where Flax is not installed): the same products."""
    import math

    import jax
    import jax.numpy as jnp

    width, heads, patch, size, batch, blocks = _vit_sizes(large)
    hi = jax.lax.Precision.HIGHEST
    ks = iter(jax.random.split(jax.random.key(0), 4 + 7 * blocks * mult))
    dense = lambda i, o: jax.random.normal(next(ks), (i, o)) / math.sqrt(i)  # noqa: E731
    ln = lambda: {"g": jnp.ones(width), "b": jnp.zeros(width)}  # noqa: E731
    params = {"patch": jax.random.normal(next(ks), (patch, patch, 3, width)) / patch,
              "pos": 0.02 * jax.random.normal(next(ks), ((size // patch) ** 2, width)),
              "ln": ln(), "head": dense(width, 10),
              "blocks": [{"ln1": ln(), "ln2": ln(), "q": dense(width, width),
                          "k": dense(width, width), "v": dense(width, width),
                          "o": dense(width, width), "w1": dense(width, 4 * width),
                          "w2": dense(4 * width, width)} for _ in range(blocks * mult)]}

    def norm(x, p):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) * jax.lax.rsqrt(var + 1e-6) * p["g"] + p["b"]

    def forward(prm, img):
        x = jax.lax.conv_general_dilated(img, prm["patch"], (patch, patch), "VALID",
                                         dimension_numbers=("NHWC", "HWIO", "NHWC"),
                                         precision=hi)
        x = x.reshape(x.shape[0], -1, width) + prm["pos"]
        B, S, _ = x.shape
        for blk in prm["blocks"]:
            h = norm(x, blk["ln1"])
            q, k, v = (jnp.matmul(h, blk[n], precision=hi).reshape(B, S, heads, -1)
                       for n in "qkv")
            s = jnp.einsum("bqhd,bkhd->bhqk", q, k, precision=hi) / math.sqrt(width // heads)
            a = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, -1), v, precision=hi)
            x = x + jnp.matmul(a.reshape(B, S, width), blk["o"], precision=hi)
            h = jax.nn.gelu(jnp.matmul(norm(x, blk["ln2"]), blk["w1"], precision=hi))
            x = x + jnp.matmul(h, blk["w2"], precision=hi)
        return jnp.matmul(norm(x, prm["ln"]).mean(1), prm["head"], precision=hi)

    img = jax.random.normal(jax.random.key(1), (batch, size, size, 3), jnp.float32)
    labels = jax.random.randint(jax.random.key(2), (batch,), 0, 10)

    def loss(prm, x, y):
        logp = jax.nn.log_softmax(forward(prm, x))
        return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=1))

    return loss, params, (img, labels)


def _vit(large: bool, mult: int):
    try:
        import flax.linen as nn
    except ImportError:
        return _vit_jax(large, mult)
    import jax
    import jax.numpy as jnp

    width, heads, patch, size, batch, blocks = _vit_sizes(large)
    hi = jax.lax.Precision.HIGHEST

    class Block(nn.Module):
        @nn.compact
        def __call__(self, x):
            h = nn.LayerNorm()(x)
            x = x + nn.MultiHeadDotProductAttention(num_heads=heads, precision=hi)(h, h)
            h = nn.gelu(nn.Dense(4 * width, precision=hi)(nn.LayerNorm()(x)))
            return x + nn.Dense(width, precision=hi)(h)

    class ViT(nn.Module):
        @nn.compact
        def __call__(self, img):
            x = nn.Conv(width, (patch, patch), strides=(patch, patch), precision=hi)(img)
            x = x.reshape(x.shape[0], -1, width)
            x = x + self.param("pos", nn.initializers.normal(0.02), x.shape[1:])
            for _ in range(blocks * mult):
                x = Block()(x)
            return nn.Dense(10, precision=hi)(nn.LayerNorm()(x).mean(axis=1))

    model = ViT()
    img = jax.random.normal(jax.random.key(1), (batch, size, size, 3), jnp.float32)
    labels = jax.random.randint(jax.random.key(2), (batch,), 0, 10)
    params = model.init(jax.random.key(0), img)

    def loss(prm, x, y):
        logp = jax.nn.log_softmax(model.apply(prm, x))
        return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=1))

    return loss, params, (img, labels)


def _measure(model: str, mode: str, fmt: str, large: bool, cache_dir: str | None,
             block_form: str | None, inline: bool = False,
             fused_min_macs: int | None = None, kernel_unroll: int | None = None,
             any_range_below: int | None = None) -> dict:
    """One (model, mode) measurement; runs in its own process."""
    import jax

    sys.path.insert(0, str(ROOT))  # this checkout's jaxwarp

    if cache_dir:
        jax.config.update("jax_compilation_cache_dir", cache_dir)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    import jaxwarp
    import jaxwarp.backends

    if block_form:
        jaxwarp.config.update("arith_block_form", block_form)
    if inline:
        jaxwarp.config.update("gemm_shared", "off")
    if fused_min_macs is not None:
        jaxwarp.config.update("gemm_fused_min_macs", fused_min_macs)
    if kernel_unroll is not None:
        jaxwarp.config.update("gemm_kernel_unroll_small", kernel_unroll)
    if any_range_below is not None:
        jaxwarp.config.update("gemm_kernel_any_range_below", any_range_below)
    mult = 4 if model.endswith("_x4") else 1
    if model.startswith("study"):
        loss, params, data = _study(large, mult, scan="_scan" in model)
    else:
        loss, params, data = _vit(large, mult)
    settings = {"plain": None, "exact": dict(operand_format=fmt),
                "fast": dict(operand_format=fmt, mode="fast")}[mode]
    fn = loss if settings is None else jaxwarp.emulate(loss, **settings)

    def step(prm, *data):
        value, grads = jax.value_and_grad(fn)(prm, *data)
        return jax.tree_util.tree_map(lambda p, g: p - 1e-3 * g, prm, grads), value

    c0, t0 = time.process_time(), time.perf_counter()
    traced = jax.jit(step).trace(params, *data)
    c1, t1 = time.process_time(), time.perf_counter()
    lowered = traced.lower()
    c2, t2 = time.process_time(), time.perf_counter()
    compiled = lowered.compile()
    c3, t3 = time.process_time(), time.perf_counter()
    jax.block_until_ready(compiled(params, *data))
    t4 = time.perf_counter()
    # The next steps, while the CPU's shared executables promote the repeated products
    # to whole loops compiled in the background (jaxwarp.config.gemm_promote_after), and
    # the wait for the rest of those compiles; step_s below is then the steady step.
    early = []
    for _ in range(4):
        t = time.perf_counter()
        jax.block_until_ready(compiled(params, *data))
        early.append(time.perf_counter() - t)
    t5 = time.perf_counter()
    failed = jaxwarp.backends.wait_for_promotions()
    promotions_s = time.perf_counter() - t5
    out = {"trace_s": t1 - t0, "lower_s": t2 - t1, "compile_s": t3 - t2,
           "total_s": t3 - t0, "first_run_s": t4 - t3, "to_first_step_s": t4 - t0,
           "next_steps_s": early, "promotions_wait_s": promotions_s,
           "promotions_failed": [repr(e) for e in failed],
           "to_fifth_step_s": t4 - t0 + sum(early),
           # CPU seconds of this process (all its threads): steadier than wall seconds
           # on a shared host
           "trace_cpu_s": c1 - c0, "lower_cpu_s": c2 - c1, "compile_cpu_s": c3 - c2,
           "total_cpu_s": c3 - c0,
           "step_s": best_time(lambda: jax.block_until_ready(compiled(params, *data)), 3,
                               0.1)}
    try:
        text = compiled.as_text()
        out["hlo_instructions"] = sum(1 for ln in text.splitlines() if " = " in ln)
    except Exception:  # noqa: BLE001 - not every backend returns the text
        pass
    if settings is not None:
        _, rep = jaxwarp.emulate(loss, **settings, report=True)(params, *data)
        out["forward_products"] = rep.count
        out["distinct_forward_products"] = len({
            (e.product.batch, e.product.m, e.product.n, e.product.k) for e in rep.entries})
        out["step_products"] = 3 * rep.count  # each forward product has two backward ones
        out["total_s_per_product"] = out["total_s"] / out["step_products"]
    return out


def _parts(fmt: str, size: int, block_form: str | None = None) -> dict:
    """One exact product (size^3, ``fmt``) and its gradient taken apart: HLO instructions
    of the compiled module (all computations, fusion bodies included), lower and compile
    seconds per part, and the step's instructions by where they come from (the source
    function in each instruction's op_name)."""
    import collections
    import re

    import jax
    import jax.numpy as jnp

    sys.path.insert(0, str(ROOT))
    import jaxwarp
    from jaxwarp import backends

    if block_form:
        jaxwarp.config.update("arith_block_form", block_form)
    a = jax.random.normal(jax.random.key(0), (size, size), jnp.float32)
    b = jax.random.normal(jax.random.key(1), (size, size), jnp.float32)
    cfg = backends.chain_config(a, b, fmt)
    qa, qb = jaxwarp.to_operand(a, fmt), jaxwarp.to_operand(b, fmt)

    def grad(mode):
        return jax.value_and_grad(lambda a, b: jaxwarp.matmul(
            a, b, operand_format=fmt, mode=mode).sum(), (0, 1))

    cases = {
        "operand conversion (one operand)": (lambda x: jaxwarp.to_operand(x, fmt), (a,)),
        "k loop on converted operands (matmul.tiled)": (
            lambda x, y: backends.exact_chain(x, y, jnp.zeros((size, size)), cfg), (qa, qb)),
        "forward product (matmul)": (lambda x, y: jaxwarp.matmul(x, y, operand_format=fmt),
                                     (a, b)),
        "forward + 2 backward products (value_and_grad)": (grad("exact"), (a, b)),
        "fast mode: forward + 2 backward": (grad("fast"), (a, b)),
    }
    out: dict = {"operand_format": fmt, "size": size, "tile": list(cfg.tile),
                 "block_form": jaxwarp.config.arith_block_form,
                 "instruction": cfg.instruction, "parts": {}}
    for name, (fn, args) in cases.items():
        c0, t0 = time.process_time(), time.perf_counter()
        lowered = jax.jit(fn).lower(*args)
        c1, t1 = time.process_time(), time.perf_counter()
        text = lowered.compile().as_text()
        c2, t2 = time.process_time(), time.perf_counter()
        lines = [ln for ln in text.splitlines() if " = " in ln]
        out["parts"][name] = {"hlo_instructions": len(lines), "lower_s": t1 - t0,
                              "compile_s": t2 - t1, "lower_cpu_s": c1 - c0,
                              "compile_cpu_s": c2 - c1}
    by_source: collections.Counter = collections.Counter()
    text = jax.jit(grad("exact")).lower(a, b).compile().as_text()
    for ln in text.splitlines():
        if " = " not in ln:
            continue
        m = re.search(r'op_name="([^"]*)"', ln)
        name = m.group(1) if m else ""
        where = "backward product" if "_bwd_product" in name else (
            "forward product" if "_forward" in name else "the step around them")
        if "_mma_float_exact" in name:
            part = "the instruction model (datapath: operand decoding, block FMAs)"
        elif "while/" in name or "/while" in name:
            part = "the k loop's own (slices, counter)"
        elif "_bits_to_" in name or "to_operand" in name:
            part = "operand conversion"
        else:
            part = "other (parameters, tuples, conversion to the accumulator)"
        by_source[f"{where}: {part}"] += 1
    out["value_and_grad_by_source"] = dict(by_source.most_common())
    return out


CHILD_TIMEOUT = [None]  # seconds per measurement (--child-timeout)


def _child(args, knobs: list[str]) -> dict:
    """One measurement in a fresh process; ``knobs``: the options passed on to it."""
    cmd = [sys.executable, __file__, "--child", args[0], args[1], "--format", args[2],
           *knobs]
    if args[3]:
        cmd.append("--large")
    if args[4]:
        cmd += ["--cache-dir", args[4]]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT,
                             timeout=CHILD_TIMEOUT[0])
    except subprocess.TimeoutExpired:
        return {"error": f"over --child-timeout {CHILD_TIMEOUT[0]} s"}
    if res.returncode:
        return {"error": res.stderr.strip().splitlines()[-1:] or ["failed"]}
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--large", action="store_true", help="GPU sizes")
    ap.add_argument("--format", default="bf16")
    ap.add_argument("--models", default=",".join(MODELS), help=f"subset of {MODELS}")
    ap.add_argument("--modes", default=",".join(MODES), help=f"subset of {MODES}")
    ap.add_argument("--cache", action="store_true",
                    help="also time the exact step cold and warm with the persistent cache")
    ap.add_argument("--block-form", default=None, choices=("reduce", "unrolled", "rolled"),
                    help="the exact datapath's block form (jaxwarp.config arith_block_form; "
                         "default: the package's)")
    ap.add_argument("--inline", action="store_true",
                    help="exact k loops compiled inside the step (jaxwarp.config gemm_shared = "
                         "'off'), not through the CPU's shared executables")
    ap.add_argument("--fused-min-macs", type=int, default=None, metavar="N",
                    help="on a GPU: the fused kernel's size rule (gemm_fused_min_macs; "
                         "0: every f16 / bf16 product through the kernel)")
    ap.add_argument("--kernel-unroll", type=int, default=None, choices=(1, 2, 4, 8, 16),
                    help="on a GPU: products written out per iteration of the fused "
                         "kernel's loop over a step, for small products "
                         "(gemm_kernel_unroll_small; 16: no loop)")
    ap.add_argument("--any-range-below", type=int, default=None, metavar="N",
                    help="on a GPU: products of fewer multiply-adds run one kernel for "
                         "any operand value, no range check or cond "
                         "(gemm_kernel_any_range_below; 0: none)")
    ap.add_argument("--child-timeout", type=float, default=None,
                    help="seconds allowed to one (model, mode) measurement")
    ap.add_argument("--budget", type=float, default=None,
                    help="seconds: start no further measurement after this many (the "
                         "rest are recorded as skipped)")
    ap.add_argument("--out", default=None,
                    help="also write the JSON here, rewritten after every measurement "
                         "(a run cut short keeps what it measured)")
    ap.add_argument("--parts", type=int, default=None, metavar="SIZE",
                    help="instead: one exact SIZE^3 product and its gradient taken apart "
                         "(HLO instructions and seconds per part)")
    ap.add_argument("--cache-dir", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--child", nargs=2, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(_measure(*args.child, args.format, args.large, args.cache_dir,
                                  args.block_form, args.inline, args.fused_min_macs,
                                  args.kernel_unroll, args.any_range_below)))
        return
    from _common import device_info, emit, host_info, versions

    if args.parts:
        emit({"benchmark": "compile_time --parts",
              **_parts(args.format, args.parts, args.block_form),
              **device_info(), "versions": versions(), **host_info()})
        return

    CHILD_TIMEOUT[0] = args.child_timeout
    knobs = [*(["--block-form", args.block_form] if args.block_form else []),
             *(["--inline"] if args.inline else []),
             *(["--fused-min-macs", str(args.fused_min_macs)]
               if args.fused_min_macs is not None else []),
             *(["--kernel-unroll", str(args.kernel_unroll)]
               if args.kernel_unroll is not None else []),
             *(["--any-range-below", str(args.any_range_below)]
               if args.any_range_below is not None else [])]

    t_start = time.perf_counter()
    models = [m for m in args.models.split(",") if m]
    modes = [m for m in args.modes.split(",") if m]
    if any(m not in MODELS for m in models) or any(m not in MODES for m in modes):
        raise SystemExit(f"--models from {MODELS}, --modes from {MODES}")
    try:
        import flax  # noqa: F401
        vit = "Flax linen"
    except ImportError:
        vit = "plain JAX (Flax is not installed)"
    results: dict = {}

    def record(final: bool = False) -> dict:
        rec = {
            "benchmark": "compile_time",
            "operand_format": args.format,
            "large": args.large,
            "block_form": args.block_form or "package default",
            "inline": args.inline,
            "fused_min_macs": args.fused_min_macs,
            "kernel_unroll": args.kernel_unroll,
            "any_range_below": args.any_range_below,
            "vit": vit,
            "models": results,
            "targets": {"exact_over_fast": 2.0, "x4_over_x1": 1.5},
            **device_info(),
            "versions": versions(),
            **host_info(),
            "wall_seconds": time.perf_counter() - t_start,
            "complete": final,
            "note": "seconds of jax.jit(step).trace / .lower / .compile, each (model, mode) "
                    "in a fresh process; step = value_and_grad of the loss and an SGD update",
        }
        if args.out:
            pathlib.Path(args.out).write_text(json.dumps(rec, indent=1))
        return rec

    for model in models:
        results[model] = {}
        for mode in modes:
            if args.budget is not None and time.perf_counter() - t_start > args.budget:
                results[model][mode] = {"error": f"skipped: over --budget {args.budget} s"}
            else:
                results[model][mode] = _child((model, mode, args.format, args.large, None),
                                              knobs)
            print(model, mode, json.dumps(results[model][mode]), file=sys.stderr, flush=True)
            record()
        r = results[model]
        if "exact" in r and "fast" in r and "total_s" in r["exact"] and "total_s" in r["fast"]:
            r["exact_over_fast"] = r["exact"]["total_s"] / r["fast"]["total_s"]
            r["exact_over_fast_cpu"] = r["exact"]["total_cpu_s"] / r["fast"]["total_cpu_s"]
            r["exact_over_fast_first_step"] = (r["exact"]["to_first_step_s"]
                                               / r["fast"]["to_first_step_s"])
    for model in models:
        base = model.removesuffix("_x4")
        if model.endswith("_x4") and base in results:
            for key, field in (("x4_over_x1", "total_s"),
                               ("x4_over_x1_first_step", "to_first_step_s")):
                results[model][key] = {
                    m: results[model][m][field] / results[base][m][field]
                    for m in modes if field in results[model][m]
                    and field in results[base][m]}
    cache = None
    if args.cache and models:
        with tempfile.TemporaryDirectory() as d:
            cold = _child((models[0], "exact", args.format, args.large, d), knobs)
            warm = _child((models[0], "exact", args.format, args.large, d), knobs)
        cache = {"model": models[0], "cold": cold, "warm": warm}
    rec = record(final=True)
    rec["persistent_cache"] = cache
    if args.out:
        pathlib.Path(args.out).write_text(json.dumps(rec, indent=1))
    emit(rec)


if __name__ == "__main__":
    main()
