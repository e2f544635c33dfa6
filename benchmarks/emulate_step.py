"""Cost of ``jaxwarp.emulate`` on a small transformer's training step, against plain JAX.

One jitted step (loss, ``jax.value_and_grad``, an Adam update) of the study's
transformer (``experiments/emulated_training.py``: modular addition, causal
attention, 4x MLP), timed in one run as

* ``plain``: the step as written, fp32 products (``precision=HIGHEST``);
* ``exact``: the loss under ``jaxwarp.emulate(..., operand_format=F)``, every
  forward and backward product on the tensor core's arithmetic bit for bit;
* ``fast``: the same with ``mode="fast"`` (operands rounded, one ``dot_general``).

Prints JSON: seconds per step, ``exact_over_plain`` and ``fast_over_plain`` (time
ratios: 1.0 = no cost), the product count of one step, device and versions.

Usage: python benchmarks/emulate_step.py [--format bf16] [--p 13] [--width 32]
       [--layers 1] [--large]
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import jax
import numpy as np
from _common import best_time, device_info, emit

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "experiments"))
sys.path.insert(0, str(ROOT))
import emulated_training as et  # noqa: E402

import jaxwarp  # noqa: E402
from jaxwarp._src.emulate import emulate  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--format", default="bf16")
    ap.add_argument("--large", action="store_true", help="p=59, width 64, 2 layers")
    ap.add_argument("--p", type=int, default=None)
    ap.add_argument("--width", type=int, default=None)
    ap.add_argument("--layers", type=int, default=None)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    p = args.p or (59 if args.large else 13)
    width = args.width or (64 if args.large else 32)
    layers = args.layers or (2 if args.large else 1)
    tokens, labels = et.dataset(p)
    params = et.init_params(jax.random.key(0), p, width, layers, args.heads)
    init, update = et.adam(1e-3)
    opt = init(params)

    def make(settings):
        loss = lambda prm, t, y: et.loss_fn(prm, t, y, args.heads)  # noqa: E731
        if settings is not None:
            loss = emulate(loss, **settings)

        @jax.jit
        def step(params, opt):
            value, grads = jax.value_and_grad(loss)(params, tokens, labels)
            return update(params, grads, opt) + (value,)

        return step

    times = {}
    for name, settings in (("plain", None),
                           ("exact", dict(operand_format=args.format)),
                           ("fast", dict(operand_format=args.format, mode="fast"))):
        step = make(settings)
        times[name] = best_time(
            lambda step=step: jax.block_until_ready(step(params, opt)), args.repeats)
    _, rep = emulate(lambda prm: et.loss_fn(prm, tokens, labels, args.heads),
                     operand_format=args.format, report=True)(params)
    flops = sum(e.product.flops for e in rep.entries)
    emit({
        "benchmark": "emulate_step",
        "model": {"task": f"modular addition p={p}", "examples": int(len(labels)),
                  "width": width, "layers": layers, "heads": args.heads},
        "operand_format": args.format,
        "forward_products": rep.count,
        "forward_flops": flops,
        "seconds_per_step": times,
        "exact_over_plain": times["exact"] / times["plain"],
        "fast_over_plain": times["fast"] / times["plain"],
        "plain_over_fast": times["plain"] / times["fast"],
        **device_info(),
        "versions": {"jaxwarp": jaxwarp.__version__, "jax": jax.__version__,
                     "numpy": np.__version__, "python": sys.version.split()[0]},
        "note": "ratios are time(emulated step) / time(plain step), same run",
    })


if __name__ == "__main__":
    main()
