"""Study: a small transformer trained with every product on an emulated tensor core.

The task is generated, so nothing is downloaded: modular addition ``a + b mod p``
as a three-token sequence ``a b =``; the transformer reads it with causal
self-attention and predicts the sum at the last position (cross-entropy over p
classes). Every pair ``(a, b)`` is a training example (full batch): the question
is how the tensor core's arithmetic changes the optimisation, not generalisation.

The model (pre-LayerNorm, ``--layers`` blocks of multi-head attention and a 4x
MLP, width ``--width``) is plain JAX; the same loss function is run

* ``fp32``: as written, float32 products with ``precision=HIGHEST`` (no emulation);
* ``bf16`` / ``tf32``: ``jaxwarp.emulate(loss, operand_format=...)``, i.e. every
  product of the forward pass (embeddings are gathers, not products) and, through
  ``jaxwarp.matmul``'s custom VJP, of the backward pass, on the H100's tensor-core
  arithmetic bit for bit, fp32 accumulation;
* ``fp8`` / ``fp8-promote128``: the hybrid fp8 recipe (e4m3 forward, e5m2
  gradients, per-tensor current scaling), without and with promotion of the
  partial sums to fp32 every 128 k-elements (``wgmma`` tiles).

LayerNorm, softmax, the loss and the optimiser (a hand-written Adam) stay in fp32.

Data parallel: ``--devices N|all`` (default 1) shards the batch over N devices with
``jaxwarp.grouped_value_and_grad``: the examples (padded with examples of weight 0
to a multiple of ``--groups``) are cut into ``--groups`` groups (default 8, or the
device count if 8 is not a multiple of it), each group's loss and gradient computed
on one device and the groups added in order, so the numbers are the same on any
device count dividing ``--groups``. ``--groups`` alone runs that step on one device;
without both, the step is the plain full-batch one.
Writes ``emulated_training.csv`` (loss and accuracy every ``--log-every`` steps,
per configuration and seed) and ``emulated_training.png`` (loss curves; final
accuracy) to ``--out`` (default ``experiments/out/``).

``--arch gfx942`` (or ``gfx90a``, ``gfx908``) runs the emulated configurations on an AMD
matrix core's arithmetic instead of the H100's: every product, forward and backward, a
chain of ``v_mfma_*`` instructions (``jaxwarp.emulate(..., arch="gfx942")``, MMA-Sim's
model, docs/amd.md). A configuration the target has no MFMA for (tf32 before gfx942) or
that needs the fp8 scaling recipes (modelled on the NVIDIA targets only) is skipped
with the reason; the files get the target in their names
(``emulated_training_gfx942.csv``). ``--arch sm_90`` is the default, the H100.

Usage:
    python experiments/emulated_training.py            # CPU default (a few minutes)
    python experiments/emulated_training.py --arch gfx942 --configs fp32 bf16 tf32
    python experiments/emulated_training.py --large    # GPU: p=59, 2 layers, width 64
    python experiments/emulated_training.py --configs fp32 bf16 --steps 100
    python experiments/emulated_training.py --large --devices all   # data parallel
"""

from __future__ import annotations

import argparse
import csv
import math
import pathlib
import sys
import time

import _study_utils as su
import jax
import jax.numpy as jnp
import numpy as np
from tqdm import tqdm

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

import jaxwarp  # noqa: E402
from jaxwarp import emulate  # noqa: E402

#: label -> emulate settings (None: no emulation).
CONFIGS = {
    "fp32": None,
    "bf16": dict(operand_format="bf16"),
    "tf32": dict(operand_format="tf32"),
    "fp8": dict(operand_format="e4m3", backward_format="e5m2", scaling="tensor"),
    "fp8-promote128": dict(operand_format="e4m3", backward_format="e5m2", scaling="tensor",
                           promote_every=128),
}
HIGHEST = jax.lax.Precision.HIGHEST
#: ``--arch``: the H100 (default) or an AMD matrix core (CDNA1, CDNA2, CDNA3).
ARCHS = ("sm_90", "gfx908", "gfx90a", "gfx942")


def settings_for(name: str, arch: str = "sm_90") -> dict | None:
    """The emulate settings of configuration ``name`` on ``arch``; NotImplementedError
    (the reason) for one the target cannot run."""
    settings = CONFIGS[name]
    if settings is None or arch == "sm_90":
        return settings
    if settings.get("scaling") is not None:
        raise NotImplementedError(f"the fp8 scaling recipes are modelled on the NVIDIA "
                                  f"targets only, not on {arch}")
    try:
        emulate(lambda x: x, **settings, arch=arch)  # checks the settings only
    except ValueError as e:
        raise NotImplementedError(str(e)) from None
    return {**settings, "arch": arch}


def init_params(key, p: int, width: int, layers: int, heads: int):
    del heads
    ks = iter(jax.random.split(key, 4 + 6 * layers))
    dense = lambda k, i, o: jax.random.normal(k, (i, o), jnp.float32) / math.sqrt(i)  # noqa: E731
    def ln():
        return {"g": jnp.ones((width,), jnp.float32), "b": jnp.zeros((width,), jnp.float32)}

    params = {
        "embed": jax.random.normal(next(ks), (p + 1, width), jnp.float32),
        "pos": 0.1 * jax.random.normal(next(ks), (3, width), jnp.float32),
        "ln_f": ln(),
        "out": dense(next(ks), width, p),
        "blocks": [],
    }
    for _ in range(layers):
        params["blocks"].append({
            "ln1": ln(), "ln2": ln(),
            "qkv": dense(next(ks), width, 3 * width),
            "o": dense(next(ks), width, width),
            "w1": dense(next(ks), width, 4 * width), "b1": jnp.zeros((4 * width,), jnp.float32),
            "w2": dense(next(ks), 4 * width, width), "b2": jnp.zeros((width,), jnp.float32),
        })
    return params


def layer_norm(x, ln):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) * jax.lax.rsqrt(var + 1e-5) * ln["g"] + ln["b"]


def block(x, blk, heads: int):
    """One pre-LayerNorm block (attention and MLP) on x (B, S, d)."""
    B, S, d = x.shape
    mask = jnp.tril(jnp.ones((S, S), bool))
    h = layer_norm(x, blk["ln1"])
    q, k, v = jnp.split(jnp.matmul(h, blk["qkv"], precision=HIGHEST), 3, axis=-1)
    split = lambda t: t.reshape(B, S, heads, d // heads)  # noqa: E731
    s = jnp.einsum("bqhd,bkhd->bhqk", split(q), split(k), precision=HIGHEST)
    s = jnp.where(mask, s / math.sqrt(d // heads), -1e9)
    a = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, axis=-1), split(v),
                   precision=HIGHEST).reshape(B, S, d)
    x = x + jnp.matmul(a, blk["o"], precision=HIGHEST)
    h = jax.nn.gelu(jnp.matmul(layer_norm(x, blk["ln2"]), blk["w1"], precision=HIGHEST)
                    + blk["b1"])
    return x + jnp.matmul(h, blk["w2"], precision=HIGHEST) + blk["b2"]


def stack_blocks(params):
    """The same parameters with the blocks stacked along a leading layer axis: ``forward``
    then runs them as one ``lax.scan`` (as flax's ``nn.scan`` does), whose body
    ``jaxwarp.emulate`` compiles once however many layers there are."""
    return {**params, "blocks": jax.tree_util.tree_map(lambda *xs: jnp.stack(xs),
                                                       *params["blocks"])}


def forward(params, tokens, heads: int):
    """Logits at the last position. Products: qkv, scores, weights@v, o, w1, w2, out.
    ``params["blocks"]``: a list of blocks, or one stacked block (``stack_blocks``: a
    ``lax.scan`` over the layers)."""
    x = params["embed"][tokens] + params["pos"]  # (B, 3, d): gathers, not products
    if isinstance(params["blocks"], dict):
        x, _ = jax.lax.scan(lambda x, blk: (block(x, blk, heads), None), x,
                            params["blocks"])
    else:
        for blk in params["blocks"]:
            x = block(x, blk, heads)
    return jnp.matmul(layer_norm(x[:, -1], params["ln_f"]), params["out"], precision=HIGHEST)


def loss_fn(params, tokens, labels, heads):
    logits = forward(params, tokens, heads)
    logp = jax.nn.log_softmax(logits)
    return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=1))


def adam(lr, b1=0.9, b2=0.98, eps=1e-8, wd=1e-4):
    """A tiny Adam(W): (init, update) on pytrees."""

    def init(params):
        z = jax.tree_util.tree_map(jnp.zeros_like, params)
        return {"m": z, "v": z, "t": jnp.zeros((), jnp.int32)}

    def update(params, grads, state):
        t = state["t"] + 1
        m = jax.tree_util.tree_map(lambda m, g: b1 * m + (1 - b1) * g, state["m"], grads)
        v = jax.tree_util.tree_map(lambda v, g: b2 * v + (1 - b2) * g * g, state["v"], grads)
        tf = t.astype(jnp.float32)
        c1, c2 = 1 - b1 ** tf, 1 - b2 ** tf
        new = jax.tree_util.tree_map(
            lambda p, m, v: p - lr * (m / c1 / (jnp.sqrt(v / c2) + eps) + wd * p),
            params, m, v)
        return new, {"m": m, "v": v, "t": t}

    return init, update


def dataset(p: int):
    a, b = np.meshgrid(np.arange(p), np.arange(p), indexing="ij")
    a, b = a.reshape(-1), b.reshape(-1)
    tokens = np.stack([a, b, np.full_like(a, p)], axis=1).astype(np.int32)
    return jnp.asarray(tokens), jnp.asarray(((a + b) % p).astype(np.int32))


def make_grouped_step(settings, heads, lr, groups: int, mesh, n_real: int,
                      dispatch: str = "per_device"):
    """The data-parallel step: ``(init, step, accuracy)`` as ``make_step``'s, on a batch
    padded to a multiple of ``groups`` whose examples carry ``weights`` (1 real, 0
    padding). Each group's loss is ``groups * sum(w * nll) / n_real``, so the mean over
    the groups (``jaxwarp.grouped_value_and_grad``) is the mean over the real examples.
    ``dispatch="per_device"`` runs one single-device program per group (the same bits on
    any device count, GPUs included; parameters on the mesh's first device);
    ``"spmd"`` one jitted program over the mesh."""

    def group_loss(prm, t, y, w):
        logp = jax.nn.log_softmax(forward(prm, t, heads))
        nll = -jnp.take_along_axis(logp, y[:, None], axis=1)[:, 0]
        return groups * jnp.sum(w * nll) / n_real

    loss = group_loss if settings is None else emulate(group_loss, **settings)
    value_and_grad = jaxwarp.grouped_value_and_grad(loss, groups, mesh=mesh, dispatch=dispatch)
    init, update = adam(lr)

    if dispatch == "per_device":
        update_jit = jax.jit(update)

        def step(params, opt, tokens, labels, weights):
            value, grads = value_and_grad(params, tokens, labels, weights)
            params, opt = update_jit(params, grads, opt)
            return params, opt, value
    else:
        @jax.jit
        def step(params, opt, tokens, labels, weights):
            value, grads = value_and_grad(params, tokens, labels, weights)
            params, opt = update(params, grads, opt)
            return params, opt, value

    @jax.jit
    def accuracy(params, tokens, labels, weights):
        logits = (emulate(forward, **settings) if settings else forward)(params, tokens, heads)
        return jnp.sum(weights * (jnp.argmax(logits, -1) == labels)) / n_real

    return init, step, accuracy


def shard_dataset(tokens, labels, groups: int, mesh, dispatch: str = "spmd"):
    """``(tokens, labels, weights)`` padded to a multiple of ``groups`` (the last example
    repeated, weight 0) and sharded over ``mesh``'s batch axis (``dispatch="spmd"``) or
    left on the host (``"per_device"``: each group is sent to its device)."""
    n = len(labels)
    pad = -n % groups
    weights = np.concatenate([np.ones(n, np.float32), np.zeros(pad, np.float32)])
    tokens = np.concatenate([np.asarray(tokens), np.repeat(np.asarray(tokens)[-1:], pad, 0)])
    labels = np.concatenate([np.asarray(labels), np.repeat(np.asarray(labels)[-1:], pad, 0)])
    if dispatch == "per_device":
        return tokens, labels, weights
    batch = NamedSharding(mesh, P(mesh.axis_names[0]))
    return tuple(jax.device_put(x, batch) for x in (tokens, labels, weights))


def make_step(settings, heads, lr):
    loss = lambda prm, t, y: loss_fn(prm, t, y, heads)  # noqa: E731
    if settings is not None:
        loss = emulate(loss, **settings)
    init, update = adam(lr)

    @jax.jit
    def step(params, opt, tokens, labels):
        value, grads = jax.value_and_grad(loss)(params, tokens, labels)
        params, opt = update(params, grads, opt)
        return params, opt, value

    @jax.jit
    def accuracy(params, tokens, labels):  # evaluated with the same arithmetic
        logits = (emulate(forward, **settings) if settings else forward)(params, tokens, heads)
        return jnp.mean(jnp.argmax(logits, -1) == labels)

    return init, step, accuracy


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--large", action="store_true", help="GPU size: p=59, 2 layers, width 64")
    ap.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    ap.add_argument("--p", type=int, default=None)
    ap.add_argument("--width", type=int, default=None)
    ap.add_argument("--layers", type=int, default=None)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--seeds", type=int, default=None)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--log-every", type=int, default=25)
    ap.add_argument("--out", default=str(pathlib.Path(__file__).parent / "out"))
    ap.add_argument("--arch", choices=ARCHS, default="sm_90",
                    help="the target of the emulated products: sm_90 (the H100, default) or "
                         "an AMD matrix core, gfx908 (CDNA1), gfx90a (CDNA2), gfx942 "
                         "(CDNA3, MI300)")
    su.add_devices_option(ap)
    ap.add_argument("--groups", type=su.int_at_least(1), default=None, metavar="G",
                    help="data-parallel groups (a multiple of the device count; default 8, "
                         "or the device count if 8 is not a multiple of it, when --devices "
                         "is more than 1; unset with one device: the plain full-batch step)")
    ap.add_argument("--dispatch", choices=("per_device", "spmd"), default="per_device",
                    help="with --groups: 'per_device' (default) runs one single-device "
                         "program per group, the same bits on any device count, GPUs "
                         "included; 'spmd' one program over all devices "
                         "(jaxwarp.grouped_value_and_grad's dispatch)")
    ap.add_argument("--products", choices=("auto", "inline", "shared"), default="auto",
                    help="how exact products compile (docs/compile_time.md): 'shared' "
                         "(jaxwarp's default: one program per instruction, the step "
                         "compiles in seconds, each product call is a host callback on "
                         "the CPU), 'inline' (every call compiled in the step: a slower "
                         "compile, faster CPU steps), 'auto' (default): inline on the "
                         "CPU, whose long runs of this small model it makes shorter, "
                         "else shared")
    args = ap.parse_args(argv)
    if args.products == "inline" or (args.products == "auto"
                                     and jax.default_backend() == "cpu"):
        jaxwarp.config.update("gemm_shared", "off")
    devices = su.pick_devices(args.devices)
    groups = args.groups
    if groups is None and len(devices) > 1:
        groups = 8 if 8 % len(devices) == 0 else len(devices)
    if groups is not None and groups % len(devices):
        ap.error(f"--groups {groups} must be a multiple of the device count {len(devices)}")
    mesh = jaxwarp.batch_mesh(devices)
    big = args.large
    p = args.p or (59 if big else 13)
    width = args.width or (64 if big else 32)
    layers = args.layers or (2 if big else 1)
    steps = args.steps or (3000 if big else 1000)
    seeds = args.seeds or (3 if big else 1)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tokens, labels = dataset(p)
    print(f"modular addition p={p}: {len(labels)} examples, width {width}, {layers} layer(s), "
          f"{args.heads} heads, {steps} steps, {seeds} seed(s), device "
          f"{su.device_summary(devices)}, products on {args.arch}"
          + (f", data parallel over {groups} groups" if groups else ""))
    n_real = len(labels)
    if groups:
        batch = shard_dataset(tokens, labels, groups, mesh, args.dispatch)
    else:
        batch = (tokens, labels)

    rows, finals = [], {}
    for name in args.configs:
        try:
            settings = settings_for(name, args.arch)
            init, step, accuracy = (
                make_grouped_step(settings, args.heads, args.lr, groups, mesh, n_real,
                                  args.dispatch)
                if groups else make_step(settings, args.heads, args.lr))
        except NotImplementedError as e:
            print(f"{name}: skipped ({e})")
            continue
        for seed in range(seeds):
            params = init_params(jax.random.key(seed), p, width, layers, args.heads)
            opt = init(params)
            if groups and args.dispatch == "spmd":  # replicated on every device of the mesh
                params, opt = jax.device_put((params, opt), NamedSharding(mesh, P()))
            elif groups:  # per_device: kept on the mesh's first device
                params, opt = jax.device_put((params, opt), devices[0])
            t0 = time.perf_counter()
            for i in tqdm(range(1, steps + 1), desc=f"{name} seed {seed}", leave=False):
                params, opt, loss = step(params, opt, *batch)
                if i % args.log_every == 0 or i == steps:
                    acc = float(accuracy(params, *batch))
                    rows.append((name, seed, i, float(loss), acc))
            dt = time.perf_counter() - t0
            finals.setdefault(name, []).append((float(loss), acc, dt))
            print(f"{name} seed {seed}: loss {float(loss):.4g}, accuracy {acc:.3f}, "
                  f"{dt / steps * 1e3:.1f} ms/step")

    stem = "emulated_training" + ("" if args.arch == "sm_90" else f"_{args.arch}")
    csv_path = out / f"{stem}.csv"
    with open(csv_path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["config", "seed", "step", "train_loss", "accuracy"])
        w.writerows(rows)
    print(f"wrote {csv_path}")
    for name, fs in finals.items():
        fs = np.asarray(fs)
        print(f"  {name:>15}: final loss {fs[:, 0].mean():.4g}, accuracy {fs[:, 1].mean():.3f}, "
              f"{fs[:, 2].mean() / steps * 1e3:.1f} ms/step")
    plot(rows, finals, out / f"{stem}.png",
         f"p={p}, width {width}, {layers} layer(s), {args.arch}")


def plot(rows, finals, path, title):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no figure")
        return
    fig, (ax1, ax3, ax2) = plt.subplots(1, 3, figsize=(16, 4))
    color = {n: f"C{i}" for i, n in enumerate(CONFIGS)}  # one colour per config, every panel
    mean = {}
    for name in finals:
        r = np.asarray([(s, st, lo) for n, s, st, lo, _ in rows if n == name])
        steps = np.unique(r[:, 1])
        curves = np.stack([r[r[:, 0] == s][:, 2] for s in np.unique(r[:, 0])])
        mean[name] = curves.mean(0)
        ax1.plot(steps, curves.mean(0), label=name, color=color[name])
        if len(curves) > 1:
            ax1.fill_between(steps, curves.min(0), curves.max(0), alpha=0.2,
                             color=color[name])
    # Where a format departs from fp32: the ratio of the mean loss curves.
    for name in finals:
        if name != "fp32" and "fp32" in mean:
            ax3.plot(steps, mean[name] / mean["fp32"], label=name, color=color[name])
    ax3.axhline(1.0, color="k", lw=0.5)
    ax3.set_xlabel("step")
    ax3.set_ylabel("loss / fp32 loss")
    ax3.set_title("departure from fp32")
    if len(mean) > 1:
        ax3.legend()
    ax1.set_yscale("log")
    ax1.set_xlabel("step")
    ax1.set_ylabel("training loss (cross-entropy)")
    ax1.set_title(f"modular addition, {title}")
    ax1.legend()
    names = list(finals)
    ax2.bar(names, [np.mean([a for _, a, _ in finals[n]]) for n in names],
            color=[color[n] for n in names])
    ax2.set_ylim(0, 1)
    ax2.set_ylabel("final accuracy (all pairs)")
    ax2.set_title("final accuracy per format")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
