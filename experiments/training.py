"""Study 2: training small models with every matmul on the emulated tensor core.

Two students learn a random teacher of their own shape from generated data (mean
squared error, Adam, cosine-decayed learning rate, mini-batches):

* ``mlp``: ``x -> tanh(x W1 + b1) W2 + b2``;
* ``linear``: linear regression ``x -> x W`` (noise-free, so the loss can fall
  until the arithmetic stops it: there the matmul precision shows).
 Every matrix product of the forward *and* backward pass goes
through ``matmul`` (its custom VJP sends ``dA = dD B^T`` and ``dB = A^T dD``
through the tensor core too), in

* ``fp32``: ``jnp.matmul`` in float32 with ``precision=HIGHEST``;
* ``bf16 exact`` / ``tf32 exact``: bf16 or tf32 operands, fp32 accumulation, the
  H100's tensor-core arithmetic bit for bit (truncating block sums);
* ``bf16 fast`` / ``tf32 fast``: the same operand rounding, round-to-nearest
  fp32 accumulation.

(On the command line the names have a hyphen: ``--configs fp32 bf16-exact``.)

``--arch gfx942`` (or ``gfx90a``, ``gfx908``) runs the exact configurations on an AMD
matrix core instead of the H100: ``matmul(..., instruction="mfma")``, forward and backward
products chains of ``v_mfma_*`` (MMA-Sim's model, docs/amd.md). Fast mode is not MFMA
arithmetic, and tf32 (xf32) is CDNA3's only: those configurations are skipped with the
reason. The files get the target in their names (``training_gfx942.csv``).

Biases, tanh, the loss and the optimizer stay in fp32. Several independent runs
(student initialisation and mini-batch order) are vmapped and sharded over every
device; the curves show their mean and min-max band. The final test loss is
evaluated in plain fp32 on held-out data for every configuration.

Writes ``training.csv`` (final losses) and ``training.png`` (loss curves) to
``--out`` (default ``experiments/out/``).

Usage:
    python experiments/training.py            # CPU default: 8 runs x 800 steps
    python experiments/training.py --large    # GPU: 32 runs x 3000 steps, wider
    python experiments/training.py --models linear --configs fp32 bf16-exact
    python experiments/training.py --arch gfx942 --configs fp32 bf16-exact tf32-exact
"""

from __future__ import annotations

import argparse
import functools
import sys

import _study_utils as su
import jax
import jax.numpy as jnp
import numpy as np
from tqdm import tqdm

import jaxwarp

#: label -> (operand format, mode); "fp32" is the plain float32 product.
CONFIGS = {
    "fp32": ("fp32", "plain"),
    "bf16 exact": ("bf16", "exact"),
    "bf16 fast": ("bf16", "fast"),
    "tf32 exact": ("tf32", "exact"),
    "tf32 fast": ("tf32", "fast"),
}
COLUMNS = ("model", "config", "format", "mode", "runs", "steps", "train_loss_mean",
           "train_loss_min", "train_loss_max", "test_loss_mean", "test_loss_vs_fp32")

DEFAULT = dict(runs=8, steps=800, din=32, hidden=64, dout=16, batch=64, train=4096)
LARGE = dict(runs=32, steps=3000, din=64, hidden=128, dout=32, batch=128, train=65536)
LR = 1e-2
#: ``--arch``: the H100 (default) or an AMD matrix core (CDNA1, CDNA2, CDNA3).
ARCHS = ("sm_90", "gfx908", "gfx90a", "gfx942")


def mm(fmt: str, mode: str, arch: str = "sm_90"):
    """The matrix product of one configuration (``arch``: the target of exact mode)."""
    if fmt == "fp32":
        return functools.partial(jnp.matmul, precision=jax.lax.Precision.HIGHEST)
    if arch != "sm_90":
        return functools.partial(jaxwarp.matmul, operand_format=fmt, accumulator="f32",
                                 mode=mode, instruction="mfma", arch=arch)
    return functools.partial(jaxwarp.matmul, operand_format=fmt, accumulator="f32", mode=mode)


def skip_reason(label: str, arch: str) -> str | None:
    """Why configuration ``label`` cannot run on ``arch`` (None: it can)."""
    fmt, mode = CONFIGS[label]
    if arch == "sm_90" or fmt == "fp32":
        return None
    if mode != "exact":
        return f"{mode} mode is not MFMA arithmetic (instruction='mfma' runs exact mode only)"
    try:
        one = jax.ShapeDtypeStruct((1, 1), jnp.float32)
        jax.eval_shape(mm(fmt, mode, arch), one, one)  # checks the settings (no compile)
    except ValueError as e:
        return str(e)
    return None


def init_mlp(key, din: int, hidden: int, dout: int) -> dict:
    k1, k2, k3, k4 = jax.random.split(key, 4)
    return {
        "w1": jax.random.normal(k1, (din, hidden), jnp.float32) / np.sqrt(din),
        "b1": 0.1 * jax.random.normal(k2, (hidden,), jnp.float32),
        "w2": jax.random.normal(k3, (hidden, dout), jnp.float32) / np.sqrt(hidden),
        "b2": 0.1 * jax.random.normal(k4, (dout,), jnp.float32),
    }


def forward_mlp(params: dict, x: jax.Array, product) -> jax.Array:
    h = jnp.tanh(product(x, params["w1"]) + params["b1"])
    return product(h, params["w2"]) + params["b2"]


def init_linear(key, din: int, hidden: int, dout: int) -> dict:
    del hidden
    return {"w": jax.random.normal(key, (din, dout), jnp.float32) / np.sqrt(din)}


def forward_linear(params: dict, x: jax.Array, product) -> jax.Array:
    return product(x, params["w"])


#: model -> (init, forward)
MODELS = {"mlp": (init_mlp, forward_mlp), "linear": (init_linear, forward_linear)}


def forward(params: dict, x: jax.Array, product) -> jax.Array:
    return (forward_mlp if "w1" in params else forward_linear)(params, x, product)


def mse(params, x, y, product) -> jax.Array:
    return jnp.mean((forward(params, x, product) - y) ** 2)


def make_problem(seed: int, model: str, cfg: dict):
    """Teacher-generated train and test sets (shared by every run and configuration).

    The teacher is a random model of the student's shape, so the loss can go to 0:
    what is left at the end is optimisation and arithmetic.
    """
    kt, kx, kz = jax.random.split(jax.random.PRNGKey(seed), 3)
    teacher = MODELS[model][0](kt, cfg["din"], cfg["hidden"], cfg["dout"])
    plain = mm("fp32", "plain")
    x = jax.random.normal(kx, (cfg["train"], cfg["din"]), jnp.float32)
    xt = jax.random.normal(kz, (cfg["train"] // 4, cfg["din"]), jnp.float32)
    return x, forward(teacher, x, plain), xt, forward(teacher, xt, plain)


def train_one(key, x, y, xt, yt, *, model: str, fmt: str, mode: str, steps: int, batch: int,
              cfg: dict, arch: str = "sm_90"):
    """One training run; returns (loss per step, final fp32 test loss)."""
    product = mm(fmt, mode, arch)
    kinit, kbatch = jax.random.split(key)
    params = MODELS[model][0](kinit, cfg["din"], cfg["hidden"], cfg["dout"])
    zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
    b1, b2, eps = 0.9, 0.999, 1e-8
    grad = jax.value_and_grad(mse)

    def step(state, i):
        params, m, v = state
        idx = jax.random.randint(jax.random.fold_in(kbatch, i), (batch,), 0, x.shape[0])
        loss, g = grad(params, x[idx], y[idx], product)
        t = (i + 1).astype(jnp.float32)
        lr = LR * 0.5 * (1 + jnp.cos(jnp.pi * (t - 1) / steps))
        m = jax.tree_util.tree_map(lambda m, g: b1 * m + (1 - b1) * g, m, g)
        v = jax.tree_util.tree_map(lambda v, g: b2 * v + (1 - b2) * g * g, v, g)
        params = jax.tree_util.tree_map(
            lambda p, m, v: p - lr * (m / (1 - b1**t)) / (jnp.sqrt(v / (1 - b2**t)) + eps),
            params, m, v)
        return (params, m, v), loss

    (params, _, _), losses = jax.lax.scan(step, (params, zeros, zeros),
                                          jnp.arange(steps, dtype=jnp.int32))
    return losses, mse(params, xt, yt, mm("fp32", "plain"))


def run(cfg: dict, *, models=tuple(MODELS), configs=tuple(CONFIGS), seed: int = 0,
        progress: bool = True, arch: str = "sm_90") -> dict:
    """Trains ``cfg["runs"]`` students per model and configuration (on ``arch``; those it
    cannot run are skipped, with the reason printed).

    Returns:
        ``{model: {label: (losses float32[runs, steps], test_loss float32[runs])}}``.
    """
    keys = jax.random.split(jax.random.fold_in(jax.random.PRNGKey(seed), 1), cfg["runs"])
    skipped = {c: skip_reason(c, arch) for c in configs}
    for c, why in skipped.items():
        if why:
            print(f"{c}: skipped on {arch} ({why})", file=sys.stderr)
    configs = tuple(c for c in configs if not skipped[c])
    results = {}
    with tqdm(total=len(models) * len(configs), desc="training", unit="config",
              disable=not progress, file=sys.stderr) as bar:
        for model in models:
            x, y, xt, yt = make_problem(seed, model, cfg)
            results[model] = {}
            for label in configs:
                bar.set_postfix(model=model, config=label)
                fmt, mode = CONFIGS[label]
                fn = functools.partial(train_one, model=model, fmt=fmt, mode=mode,
                                       steps=cfg["steps"], batch=cfg["batch"], cfg=cfg,
                                       arch=arch)
                losses, test = jaxwarp.sharded_vmap(fn, in_axes=(0, None, None, None, None))(
                    keys, x, y, xt, yt)
                results[model][label] = (np.asarray(losses), np.asarray(test))
                bar.update(1)
    return results


def rows(results: dict, steps: int) -> list[dict]:
    """Final-loss rows: train loss = mean over the last 5% of steps, per run."""
    tail = max(1, steps // 20)
    out = []
    for model, per in results.items():
        base = float(np.mean(per["fp32"][1])) if "fp32" in per else float("nan")
        for label, (losses, test) in per.items():
            final = losses[:, -tail:].mean(axis=1)
            fmt, mode = CONFIGS[label]
            out.append(dict(model=model, config=label, format=fmt, mode=mode, runs=len(final),
                            steps=steps,
                            train_loss_mean=f"{final.mean():.4e}",
                            train_loss_min=f"{final.min():.4e}",
                            train_loss_max=f"{final.max():.4e}",
                            test_loss_mean=f"{test.mean():.4e}",
                            test_loss_vs_fp32=f"{test.mean() / base:.3g}"))
    return out


_STYLE = {"fp32": ("k", "-"), "bf16 exact": ("C1", "-"), "bf16 fast": ("C1", "--"),
          "tf32 exact": ("C2", "-"), "tf32 fast": ("C2", "--")}


def plot(results: dict, path, title: str) -> None:
    """Training loss vs step, log scale, one panel per model: mean over runs, min-max band."""
    plt = su.pyplot()
    fig, axes = plt.subplots(1, len(results), figsize=(6 * len(results), 4.6), squeeze=False)
    for ax, (model, per) in zip(axes[0], results.items(), strict=True):
        _plot_model(ax, per)
        ax.set_title(model, fontsize=10)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    su.save_png(fig, path, dpi=90)
    plt.close(fig)


def _plot_model(ax, per: dict) -> None:
    for label, (losses, _) in per.items():
        color, ls = _STYLE.get(label, (None, "-"))
        # Smooth the mini-batch noise with a running mean over 1% of the steps.
        w = max(1, losses.shape[1] // 100)
        kernel = np.ones(w) / w
        sm = np.stack([np.convolve(r, kernel, mode="valid") for r in losses])
        steps = np.arange(sm.shape[1]) + w
        ax.plot(steps, sm.mean(axis=0), ls, color=color, lw=1.3, label=label)
        ax.fill_between(steps, sm.min(axis=0), sm.max(axis=0), color=color, alpha=0.12, lw=0)
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (MSE, running mean)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=9)


def config_token(label: str) -> str:
    """The command-line name of a configuration: ``"bf16 exact"`` -> ``"bf16-exact"``."""
    return label.replace(" ", "-")


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n".join(__doc__.splitlines()[2:]))
    p.add_argument("--large", action="store_true",
                   help=f"the GPU size: {_sizes(LARGE)} (default: {_sizes(DEFAULT)}); "
                        "--runs and --steps override single values")
    p.add_argument("--runs", type=su.int_at_least(1), metavar="N",
                   help=f"independent runs per configuration (vmapped, sharded over devices), "
                        f">= 1 (default {DEFAULT['runs']}, --large {LARGE['runs']})")
    p.add_argument("--steps", type=su.int_at_least(1), metavar="N",
                   help=f"Adam steps per run, >= 1 (default {DEFAULT['steps']}, "
                        f"--large {LARGE['steps']})")
    p.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS),
                   metavar="MODEL",
                   help=f"models to train, one or more of: {' '.join(MODELS)} (default: all)")
    tokens = [config_token(c) for c in CONFIGS]
    p.add_argument("--configs", nargs="+", choices=tokens, default=tokens, metavar="CONFIG",
                   help=f"matmul arithmetics, one or more of: {' '.join(tokens)} (default: "
                        "all; fp32 is the baseline the test loss is compared with)")
    p.add_argument("--arch", choices=ARCHS, default="sm_90",
                   help="the target of the exact products: sm_90 (the H100, default) or an "
                        "AMD matrix core, gfx908 (CDNA1), gfx90a (CDNA2), gfx942 (CDNA3, "
                        "MI300)")
    su.add_common_options(p)
    args = p.parse_args(argv)
    configs = [c.replace("-", " ") for c in args.configs]
    cfg = dict(LARGE if args.large else DEFAULT)
    for name in ("runs", "steps"):
        if getattr(args, name) is not None:
            cfg[name] = getattr(args, name)
    out = su.out_dir(args.out)
    print(su.run_header(argv))
    print(f"models {args.models}: MLP {cfg['din']}-{cfg['hidden']}-{cfg['dout']} (tanh), "
          f"linear {cfg['din']}-{cfg['dout']}; batch {cfg['batch']}, "
          f"{cfg['train']} training points, {cfg['runs']} runs x {cfg['steps']} Adam steps, "
          f"lr {LR} cosine, seed {args.seed}, exact products on {args.arch}\n", flush=True)
    with su.Timer() as t:
        results = run(cfg, models=args.models, configs=configs, seed=args.seed,
                      progress=not args.no_progress, arch=args.arch)
    table = rows(results, cfg["steps"])
    print(su.markdown_table(
        ["model", "config", "runs", "steps", "final train loss (mean)", "min", "max",
         "test loss (fp32 eval)", "test / fp32"],
        [[r[c] for c in COLUMNS if c not in ("format", "mode")] for r in table]))
    stem = "training" + ("" if args.arch == "sm_90" else f"_{args.arch}")
    su.write_csv(out / f"{stem}.csv", table, COLUMNS)
    plot(results, out / f"{stem}.png",
         f"MLP {cfg['din']}-{cfg['hidden']}-{cfg['dout']} / linear {cfg['din']}-{cfg['dout']}, "
         f"every matmul (fwd+bwd) on the "
         f"emulated tensor core ({'H100' if args.arch == 'sm_90' else args.arch}); mean and "
         f"min-max of {cfg['runs']} runs [{su.device_summary()}]")
    print(f"\nwrote {out / f'{stem}.csv'} and {out / f'{stem}.png'}; {t.seconds:.0f} s")
    return results


def _sizes(cfg: dict) -> str:
    return (f"{cfg['runs']} runs x {cfg['steps']} steps, MLP {cfg['din']}-{cfg['hidden']}-"
            f"{cfg['dout']}, batch {cfg['batch']}, {cfg['train']} training points")


if __name__ == "__main__":
    main()
