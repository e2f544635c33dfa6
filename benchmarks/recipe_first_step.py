"""First training step of ``jaxwarp.emulate``'s block-scaled recipes against bf16 exact.

For each model and configuration, one jitted training step (``jax.value_and_grad`` of
the loss and an SGD update) is built with JAX's ahead-of-time API, each phase timed on
its own, in a fresh process (so nothing compiled by an earlier cell helps; JAX's
persistent compilation cache is off):

* ``trace_s``: ``jax.jit(step).trace(...)``; ``lower_s``: ``.lower()``; ``compile_s``:
  ``.compile()``; ``first_run_s``: the first call (on the CPU it compiles the shared
  executables of bf16's exact products); ``to_first_step_s``: their sum, and
  ``to_first_step_cpu_s`` the process's CPU seconds (all threads) over the same span
  (steadier than wall seconds on a shared host);
* ``lowered_lines``: lines of the lowered StableHLO text (``lowered.as_text()``), and
  ``hlo_instructions`` of the compiled module;
* ``next_steps_s``: the next few steps, ``--steps`` of them or as many as run in
  ``--warm`` seconds (on the CPU bf16's exact products run through host callbacks until
  they are promoted, ``jaxwarp.config.gemm_promote_after``: ``--warm 10`` lets them get
  there); then, after ``jaxwarp.backends.wait_for_promotions()``, ``step_s``: the best
  steady step;
* ``digest``: a SHA-256 of the first step's loss and gradients (their bits; the emulated
  arithmetic), ``grads_digest`` of the gradients alone (the loss is a sum that XLA
  computes in its own order, which it may choose anew when the program around it
  changes), ``update_digest`` of the updated parameters (``p - 1e-3 * g`` is plain XLA
  arithmetic, which XLA may compile differently, e.g. as one fused multiply-add, when
  the program around it changes).

Configurations (``--configs``): ``bf16:exact`` (``operand_format="bf16"``, the
reference), ``bf16:fast``, ``mxfp8:exact``, ``mxfp8:fast``, ``nvfp4:exact``,
``nvfp4:fast`` (``recipe=...``; NVFP4 gets a PRNG key for its stochastic rounding and
Hadamard signs). Models (``--models``): ``mlp`` (a three-layer Flax MLP, or the same
layers in plain JAX where Flax is missing: ``--mlp-sizes``), ``study`` (the transformer
of ``experiments/emulated_training.py``: p = 13, width 32, 1 layer, 4 heads).

Prints JSON: every cell, and per model ``first_step_over_bf16_exact`` (the target: at
most 3 for every recipe and mode; ``first_step_cpu_over_bf16_exact`` of CPU seconds) and
``bf16_exact_step_over_mxfp8_exact`` of the steady steps (the target: at most 1).

``--set NAME=VALUE`` sets a ``jaxwarp.config`` option in every cell (repeatable);
``--compare NAME=VALUE`` runs every cell again with that option and asserts that the
gradients' digests are equal (the same bits), reporting both timings (``compare``) and
whether the loss's bits were equal too (``compare_bits_equal``). ``--compare
recipe_shared=off`` measures a recipe's products inline in the step against the shared
executables (the default on the CPU).

Usage: python benchmarks/recipe_first_step.py [--models mlp,study]
       [--configs bf16:exact,mxfp8:exact,...] [--steps 4] [--warm S] [--set NAME=VALUE]
       [--compare NAME=VALUE] [--timeout S] [--out FILE]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import pathlib
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from _common import best_time, device_info, host_info, versions  # noqa: E402

CONFIGS = ("bf16:exact", "bf16:fast", "mxfp8:exact", "mxfp8:fast", "nvfp4:exact",
           "nvfp4:fast")
MODELS = ("mlp", "study")
TARGET_FIRST_STEP = 3.0  # a recipe's first step <= 3x bf16 exact's
TARGET_STEP = 1.0  # bf16 exact's steady step <= MXFP8 exact's


# --- the models (built inside the child process) ---------------------------------------

def _mlp(sizes: tuple[int, ...]):
    """A three-layer MLP (Flax linen where installed), softmax cross-entropy; sizes =
    (batch, inputs, hidden, classes)."""
    import jax
    import jax.numpy as jnp

    batch, d_in, hidden, classes = sizes
    x = jax.random.normal(jax.random.key(1), (batch, d_in), jnp.float32)
    y = jax.random.randint(jax.random.key(2), (batch,), 0, classes)
    try:
        import flax.linen as nn

        class MLP(nn.Module):
            @nn.compact
            def __call__(self, x):
                x = nn.relu(nn.Dense(hidden)(x))
                x = nn.relu(nn.Dense(hidden)(x))
                return nn.Dense(classes)(x)

        model = MLP()
        params = model.init(jax.random.key(0), x)
        apply = model.apply
    except ImportError:  # the same products in plain JAX
        ks = jax.random.split(jax.random.key(0), 3)
        dims = [(d_in, hidden), (hidden, hidden), (hidden, classes)]
        params = [{"w": jax.random.normal(k, d) / d[0] ** 0.5, "b": jnp.zeros(d[1])}
                  for k, d in zip(ks, dims, strict=True)]

        def apply(prm, h):
            for i, layer in enumerate(prm):
                h = h @ layer["w"] + layer["b"]
                h = jax.nn.relu(h) if i < 2 else h
            return h

    def loss(prm, x, y):
        logp = jax.nn.log_softmax(apply(prm, x))
        return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=1))

    return loss, params, (x, y)


def _study():
    import jax

    sys.path.insert(0, str(ROOT / "experiments"))
    import emulated_training as et

    p, width, layers, heads = 13, 32, 1, 4
    tokens, labels = et.dataset(p)
    params = et.init_params(jax.random.key(0), p, width, layers, heads)
    return (lambda prm, x, y: et.loss_fn(prm, x, y, heads)), params, (tokens, labels)


def _digest(tree) -> str:
    import jax
    import numpy as np

    h = hashlib.sha256()
    for leaf in jax.tree_util.tree_leaves(tree):
        a = np.asarray(leaf)
        h.update(str((a.dtype, a.shape)).encode())
        h.update(np.ascontiguousarray(a).view(np.uint8).tobytes())
    return h.hexdigest()[:16]


def _measure(model: str, config: str, steps: int, warm_s: float, options: dict,
             mlp_sizes) -> dict:
    """One (model, configuration) cell; runs in its own process."""
    import jax
    import jax.numpy as jnp

    sys.path.insert(0, str(ROOT))  # this checkout's jaxwarp
    import jaxwarp
    import jaxwarp.backends

    for name, value in options.items():
        jaxwarp.config.update(name, value)
    loss, params, data = _mlp(mlp_sizes) if model == "mlp" else _study()
    fmt, mode = config.split(":")
    settings = (dict(operand_format=fmt) if fmt == "bf16" else dict(recipe=fmt))
    fn = jaxwarp.emulate(loss, **settings, mode=mode)
    needs_key = "recipe" in settings and jaxwarp.mx.RECIPES[fmt].plan(mode).needs_key

    def step(prm, key, *data):
        kw = dict(rng_key=key) if needs_key else {}
        value, grads = jax.value_and_grad(lambda q: fn(q, *data, **kw))(prm)
        return jax.tree_util.tree_map(lambda p, g: p - 1e-3 * g, prm, grads), value, grads

    key = jax.random.key(7)
    args = (params, key, *data)
    c0, t0 = time.process_time(), time.perf_counter()
    traced = jax.jit(step).trace(*args)
    t1 = time.perf_counter()
    lowered = traced.lower()
    t2 = time.perf_counter()
    compiled = lowered.compile()
    c3, t3 = time.process_time(), time.perf_counter()
    first = jax.block_until_ready(compiled(*args))
    c4, t4 = time.process_time(), time.perf_counter()
    early = []
    while len(early) < steps or sum(early) < warm_s:
        t = time.perf_counter()
        jax.block_until_ready(compiled(*args))
        early.append(time.perf_counter() - t)
    t5 = time.perf_counter()
    failed = jaxwarp.backends.wait_for_promotions()
    out = {"trace_s": t1 - t0, "lower_s": t2 - t1, "compile_s": t3 - t2,
           "first_run_s": t4 - t3, "to_first_step_s": t4 - t0,
           "trace_lower_compile_cpu_s": c3 - c0, "to_first_step_cpu_s": c4 - c0,
           "next_steps": len(early), "next_steps_s": early[:5], "last_steps_s": early[-5:],
           "next_steps_total_s": sum(early), "promotions_wait_s": time.perf_counter() - t5,
           "promotions_failed": [repr(e) for e in failed],
           "step_s": best_time(lambda: jax.block_until_ready(compiled(*args)), 3, 0.2),
           "lowered_lines": len(lowered.as_text().splitlines()),
           "digest": _digest(first[1:]), "update_digest": _digest(first[0]),
           "grads_digest": _digest(first[2]),
           "loss": float(first[1]),
           "options": options}
    try:
        text = compiled.as_text()
        out["hlo_instructions"] = sum(1 for ln in text.splitlines() if " = " in ln)
    except Exception:  # noqa: BLE001 - not every backend returns the text
        pass
    del jnp
    return out


# --- the parent ------------------------------------------------------------------------

def _option(text: str) -> tuple[str, object]:
    name, _, value = text.partition("=")
    if not name or not _:
        raise SystemExit(f"expected NAME=VALUE, got {text!r}")
    try:
        return name, json.loads(value)
    except json.JSONDecodeError:
        return name, value  # a string value such as off


def _cell(model, config, args, options: dict) -> dict:
    cmd = [sys.executable, __file__, "--child", model, config, "--steps", str(args.steps),
           "--warm", str(args.warm),
           "--mlp-sizes", args.mlp_sizes, "--options", json.dumps(options)]
    print(f"[recipe_first_step] {model} {config} {options or ''} ...", file=sys.stderr,
          flush=True)
    t0 = time.perf_counter()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {args.timeout} s"}
    if r.returncode:
        return {"error": r.stderr.strip().splitlines()[-1:] or ["failed"]}
    res = json.loads(r.stdout.strip().splitlines()[-1])
    print(f"[recipe_first_step]   first step {res['to_first_step_s']:.1f} s, step "
          f"{res['step_s'] * 1e3:.1f} ms ({time.perf_counter() - t0:.0f} s)",
          file=sys.stderr, flush=True)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--steps", type=int, default=4, help="steps timed after the first")
    ap.add_argument("--warm", type=float, default=0.0,
                    help="run steps after the first for at least this many seconds (so that "
                         "the CPU's shared bf16 products get promoted) before the steady step")
    ap.add_argument("--mlp-sizes", default="64,64,256,10",
                    help="the MLP's batch, inputs, hidden width, classes")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE")
    ap.add_argument("--compare", action="append", default=[], metavar="NAME=VALUE")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per cell")
    ap.add_argument("--out", default=None, help="also write the JSON here")
    ap.add_argument("--child", nargs=2, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--options", default="{}", help=argparse.SUPPRESS)
    args = ap.parse_args()
    mlp_sizes = tuple(int(s) for s in args.mlp_sizes.split(","))
    if args.child:
        res = _measure(*args.child, args.steps, args.warm, json.loads(args.options),
                       mlp_sizes)
        print(json.dumps(res))
        return

    base = dict(_option(s) for s in args.set)
    other = dict(_option(s) for s in args.compare)
    configs = [c for c in args.configs.split(",") if c]
    for c in configs:
        if c not in CONFIGS:
            raise SystemExit(f"--configs: {c!r} is not one of {CONFIGS}")
    result: dict = {"benchmark": "recipe_first_step", "mlp_sizes": list(mlp_sizes),
                    "options": base, "compare_options": {**base, **other} if other else None,
                    "device": device_info(), "versions": versions(), "host": host_info(),
                    "models": {}}
    mismatches = []
    for model in args.models.split(","):
        cells = {c: _cell(model, c, args, base) for c in configs}
        if other:
            for c in configs:
                alt = _cell(model, c, args, {**base, **other})
                cells[c]["compare"] = alt
                d0, d1 = cells[c].get("digest"), alt.get("digest")
                cells[c]["compare_bits_equal"] = d0 is not None and d0 == d1
                g0, g1 = cells[c].get("grads_digest"), alt.get("grads_digest")
                cells[c]["compare_grads_equal"] = g0 is not None and g0 == g1
                if not cells[c]["compare_grads_equal"]:
                    mismatches.append((model, c, d0, d1))
        ratios: dict = {}
        ref = cells.get("bf16:exact", {}).get("to_first_step_s")
        if ref:
            ratios["first_step_over_bf16_exact"] = {
                c: cells[c]["to_first_step_s"] / ref for c in configs
                if "to_first_step_s" in cells[c]}
            cref = cells["bf16:exact"].get("to_first_step_cpu_s")
            if cref:  # CPU seconds of the process (all its threads): steadier on a busy host
                ratios["first_step_cpu_over_bf16_exact"] = {
                    c: cells[c]["to_first_step_cpu_s"] / cref for c in configs
                    if "to_first_step_cpu_s" in cells[c]}
            ratios["meets_first_step_target"] = all(
                v <= TARGET_FIRST_STEP for c, v in ratios["first_step_over_bf16_exact"].items()
                if not c.startswith("bf16"))
        mx = cells.get("mxfp8:exact", {}).get("step_s")
        if mx and "step_s" in cells.get("bf16:exact", {}):
            ratios["bf16_exact_step_over_mxfp8_exact"] = cells["bf16:exact"]["step_s"] / mx
            ratios["meets_step_target"] = ratios["bf16_exact_step_over_mxfp8_exact"] <= \
                TARGET_STEP
        result["models"][model] = {"cells": cells, "ratios": ratios}
    result["host_after"] = host_info()
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        pathlib.Path(args.out).write_text(text + "\n")
    if mismatches:
        raise SystemExit(f"bits differ between the two option sets: {mismatches}")


if __name__ == "__main__":
    main()
