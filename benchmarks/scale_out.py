"""Scale-out: the same work on 1 and on N devices, timed in one run, bits compared.

Four workloads, each run on meshes of the first d devices for every d of
``--devices`` (inputs placed on the mesh before the clock starts; compilation
timed apart):

* ``warp``: the warp study's butterfly reduction (``experiments/warp_programs.py``
  ``warpReduce``) on ``--warps`` warps of random int32 (``jaxwarp.sharded_vmap``);
* ``mma``: exact ``jaxwarp.mma`` on ``--tiles`` independent bf16 m16n16k16 tiles
  with an fp32 accumulator (``sharded_vmap``);
* ``dp``: a data-parallel training step of the study's transformer
  (``experiments/emulated_training.py``, random tokens) under
  ``jaxwarp.emulate(..., mode="exact")``:
  ``jaxwarp.grouped_value_and_grad(..., dispatch="per_device")`` over ``--groups``
  groups (the same bits on any device count dividing it) and an Adam update;
* ``tp``: one exact emulated product ``a @ b`` (bf16 operands, fp32 result) with
  ``a`` sharded along M (tensor parallel; ``emulate`` keeps the sharding);
* ``dp_fast``, ``tp_fast``: the same in ``mode="fast"`` (operands rounded, one
  ``dot_general``), not part of the default list;
* ``dp_spmd``: ``dp`` with ``dispatch="spmd"`` (one program over the mesh, inside
  ``jit``) instead of ``"per_device"`` (one single-device program per group,
  dispatched from Python: the same program on every device count); on 2 H100s the
  SPMD step's bits differed from one GPU's even with ``deterministic_xla``.

Prints JSON: devices, jax version, and per workload and device count the best
seconds of one call, the first call's seconds (compile + run), the efficiency
``t1 / (d * td)`` (1.0 = perfect scaling) and ``bit_identical`` (the result's
bytes equal the 1-device result's). Per workload, ``cpu_identical``: the same
program on a small instance run on the CPU backend and on all d devices of the
default backend gives the same bytes (``null`` where the default backend is the
CPU); the warp workload is also checked against NumPy (``numpy_ok``).

Usage:
    python benchmarks/scale_out.py                          # CPU-sized, all devices
    python benchmarks/scale_out.py --devices 1,2,4 --large  # the GPU sizes
    XLA_FLAGS=--xla_force_host_platform_device_count=4 JAX_PLATFORMS=cpu \\
        python benchmarks/scale_out.py --devices 1,2,4     # 4 CPU devices
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import pathlib
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from _common import best_time, device_info, emit, host_info, versions
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "experiments"))
sys.path.insert(0, str(ROOT))
import emulated_training as et  # noqa: E402
import warp_programs as wp  # noqa: E402

import jaxwarp  # noqa: E402

WORKLOADS = ("warp", "mma", "dp", "tp")
EXTRA = ("dp_fast", "tp_fast", "dp_spmd")
TARGET = 0.8  # at least 0.8 on 2 GPUs for the warp study and the dp exact step
#: Sizes: the CPU default (seconds on a laptop) and --large (keeps an H100 busy).
DEFAULT = dict(warps=2**16, tiles=2**12, dp_batch=64, dp_seq=8, dp_width=32, dp_layers=1,
               groups=8, tp_m=256, tp_n=128, tp_k=256)
LARGE = dict(warps=2**23, tiles=2**19, dp_batch=1024, dp_seq=32, dp_width=128, dp_layers=1,
             groups=8, tp_m=8192, tp_n=4096, tp_k=4096)
#: The small instance run on the CPU backend and on the default backend's devices.
CPU_CHECK = dict(warps=4096, tiles=1024, dp_batch=32, dp_seq=8, dp_width=32, dp_layers=1,
                 groups=8, tp_m=256, tp_n=128, tp_k=256)
HEADS, VOCAB = 4, 59


def _bytes(tree) -> bytes:
    return b"".join(np.asarray(x).tobytes() for x in jax.tree_util.tree_leaves(tree))


# --- Workloads: each returns (make, data): make(mesh) -> (fn, args placed on the mesh),
# data the warp study's input (None for the others). -----------------------------------


def warp_workload(cfg):
    data = wp.random_warps(cfg["warps"], seed=0)

    def make(mesh):
        f = jaxwarp.sharded_vmap(wp.warp_reduce, devices=list(mesh.devices.flat))
        x, _ = jaxwarp.shard_batch(data, mesh)
        return f, (x,)

    return make, data


def mma_workload(cfg):
    rng = np.random.default_rng(1)
    a, b = (rng.standard_normal((cfg["tiles"], 16, 16), np.float32).astype(jnp.bfloat16)
            for _ in range(2))
    c = rng.standard_normal((cfg["tiles"], 16, 16), np.float32)

    def tile(a, b, c):
        return jaxwarp.mma(a, b, c, a_format="bf16", c_format="f32", d_format="f32")

    def make(mesh):
        f = jaxwarp.sharded_vmap(tile, devices=list(mesh.devices.flat))
        args, _ = jaxwarp.shard_batch((a, b, c), mesh)
        return f, tuple(args)

    return make, None


def _model(cfg):
    key = jax.random.key(0)
    params = et.init_params(key, VOCAB, cfg["dp_width"], cfg["dp_layers"], HEADS)
    params["pos"] = 0.1 * jax.random.normal(jax.random.key(1), (cfg["dp_seq"], cfg["dp_width"]),
                                            jnp.float32)
    rng = np.random.default_rng(2)
    tokens = rng.integers(0, VOCAB + 1, (cfg["dp_batch"], cfg["dp_seq"]), dtype=np.int32)
    labels = rng.integers(0, VOCAB, (cfg["dp_batch"],), dtype=np.int32)
    return jax.tree_util.tree_map(np.asarray, params), tokens, labels


def dp_workload(cfg, mode="exact", dispatch="per_device"):
    params, tokens, labels = _model(cfg)
    loss = jaxwarp.emulate(lambda prm, t, y: et.loss_fn(prm, t, y, HEADS),
                           operand_format="bf16", mode=mode)
    init, update = et.adam(1e-3)

    def make(mesh):
        vg = jaxwarp.grouped_value_and_grad(loss, cfg["groups"], mesh=mesh, dispatch=dispatch)
        if dispatch == "per_device":
            # One single-device program per group, run on device i mod d; parameters and
            # the update on the first device; the batch starts on the host.
            first = mesh.devices.flat[0]
            update_jit = jax.jit(update)

            def step(params, opt, tokens, labels):
                value, grads = vg(params, tokens, labels)
                return update_jit(params, grads, opt) + (value,)

            p = jax.device_put(params, first)
            o = jax.device_put(init(params), first)
            return step, (p, o, tokens, labels)

        @jax.jit
        def step(params, opt, tokens, labels):
            value, grads = vg(params, tokens, labels)
            return update(params, grads, opt) + (value,)

        rep = NamedSharding(mesh, P())
        batch = NamedSharding(mesh, P(mesh.axis_names[0]))
        p = jax.device_put(params, rep)
        o = jax.device_put(init(params), rep)
        t, y = jax.device_put(tokens, batch), jax.device_put(labels, batch)
        return step, (p, o, t, y)

    return make, None


def tp_workload(cfg, mode="exact"):
    rng = np.random.default_rng(3)
    a = rng.standard_normal((cfg["tp_m"], cfg["tp_k"]), np.float32)
    b = rng.standard_normal((cfg["tp_k"], cfg["tp_n"]), np.float32)
    f = jax.jit(jaxwarp.emulate(lambda a, b: a @ b, operand_format="bf16", mode=mode))

    def make(mesh):
        aa = jax.device_put(a, NamedSharding(mesh, P(mesh.axis_names[0], None)))
        bb = jax.device_put(b, NamedSharding(mesh, P()))
        return f, (aa, bb)

    return make, None


BUILD = {"warp": warp_workload, "mma": mma_workload, "dp": dp_workload, "tp": tp_workload,
         "dp_fast": lambda cfg: dp_workload(cfg, "fast"),
         "dp_spmd": lambda cfg: dp_workload(cfg, "exact", "spmd"),
         "tp_fast": lambda cfg: tp_workload(cfg, "fast")}


def cpu_identical(name: str, n_dev: int) -> bool | None:
    """The workload's small instance: all ``n_dev`` default-backend devices vs the CPU."""
    if jax.default_backend() == "cpu":
        return None
    make, _ = BUILD[name](CPU_CHECK)
    fn, args = make(jaxwarp.batch_mesh(jax.devices()[:n_dev]))
    here = _bytes(jax.block_until_ready(fn(*args)))
    fn, args = make(jaxwarp.batch_mesh(jax.devices("cpu")[:1]))
    return here == _bytes(jax.block_until_ready(fn(*args)))


def _first_calls(made: list[tuple]) -> list[tuple]:
    """``(callable, first-call seconds)`` per ``(fn, args)``. Jitted functions are traced
    and lowered one after the other, then compiled in parallel threads (XLA compiles
    outside the GIL), so the training step's long compile is paid about once, not once
    per device count; the first-call time is then the lowering, the (concurrent)
    compilation and one run."""
    out: list[tuple] = [None] * len(made)
    lowered = {}
    for i, (fn, args) in enumerate(made):
        if hasattr(fn, "lower"):
            t0 = time.perf_counter()
            lowered[i] = (fn.lower(*args), time.perf_counter() - t0)

    def compile_one(i):
        t0 = time.perf_counter()
        return i, lowered[i][0].compile(), time.perf_counter() - t0

    with concurrent.futures.ThreadPoolExecutor(max(1, len(lowered))) as ex:
        compiled = {i: (c, dt + lowered[i][1]) for i, c, dt in ex.map(compile_one, lowered)}
    for i, (fn, args) in enumerate(made):
        f = compiled[i][0] if i in compiled else fn
        t0 = time.perf_counter()
        jax.block_until_ready(f(*args))
        out[i] = (lambda f=f, args=args: f(*args),
                  time.perf_counter() - t0 + (compiled[i][1] if i in compiled else 0.0))
    return out


def measure(name: str, cfg: dict, counts: list[int], repeats: int) -> dict:
    make, data = BUILD[name](cfg)
    rows, first = [], None
    calls = _first_calls([make(jaxwarp.batch_mesh(jax.devices()[:d])) for d in counts])
    for d, (call, first_s) in zip(counts, calls, strict=True):
        out = jax.block_until_ready(call())
        seconds = best_time(lambda call=call: jax.block_until_ready(call()), repeats)
        got = _bytes(out)
        row = dict(devices=d, seconds=seconds, first_call_seconds=first_s,
                   out_sharded_over=len(jax.tree_util.tree_leaves(out)[0].sharding.device_set))
        if first is None:
            first = (seconds, got)
            if data is not None:  # the warp study: NumPy's answer for every warp
                ref = wp._np_sum(data)
                row["numpy_ok"] = bool(np.array_equal(np.asarray(out)[:len(data)], ref))
        row["efficiency"] = first[0] / (d * seconds)
        row["bit_identical"] = got == first[1]
        rows.append(row)
        print(f"[scale_out] {name} {row}", file=sys.stderr, flush=True)  # kept on a timeout
        del out
    return dict(workload=name, runs=rows)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.splitlines()[2:]))
    ap.add_argument("--devices", default=None, metavar="D,D,...",
                    help="device counts to run, e.g. 1,2,4 (default: 1 and all); the first "
                         "is the baseline of the efficiency and the bit comparison")
    ap.add_argument("--workloads", default=",".join(WORKLOADS),
                    help=f"comma-separated subset of {','.join(WORKLOADS + EXTRA)} "
                         f"(default: {','.join(WORKLOADS)})")
    ap.add_argument("--large", action="store_true", help=f"the GPU sizes {LARGE}")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-cpu-check", action="store_true",
                    help="skip the comparison with the CPU backend")
    ap.add_argument("--cpu-check-only", action="store_true",
                    help="only the comparison with the CPU backend (on the largest count of "
                         "--devices), no timing")
    ap.add_argument("--nondeterministic", action="store_true",
                    help="leave XLA's GPU settings as they are (default: "
                         "jaxwarp.deterministic_xla(), so that reruns and device counts agree)")
    args = ap.parse_args(argv)
    if not args.nondeterministic:
        jaxwarp.deterministic_xla()
    t_start = time.perf_counter()
    n_all = jax.device_count()
    counts = ([1, n_all] if n_all > 1 else [1]) if args.devices is None else \
        [int(d) for d in args.devices.split(",")]
    if any(d < 1 or d > n_all for d in counts):
        raise SystemExit(f"--devices: counts between 1 and {n_all}, got {args.devices!r}")
    names = [w.strip() for w in args.workloads.split(",") if w.strip()]
    if any(w not in BUILD for w in names):
        raise SystemExit(f"--workloads: any of {tuple(BUILD)}, got {args.workloads!r}")
    cfg = LARGE if args.large else DEFAULT
    results = []
    for name in names:
        if args.cpu_check_only:
            results.append(dict(workload=name, cpu_identical=cpu_identical(name, max(counts))))
            continue
        print(f"[scale_out] {name} on {counts} devices", file=sys.stderr, flush=True)
        r = measure(name, cfg, counts, args.repeats)
        if not args.no_cpu_check:
            r["cpu_identical"] = cpu_identical(name, max(counts))
        results.append(r)
        print(f"[scale_out] {name}: " + ", ".join(
            f"{x['devices']} dev {x['seconds']:.4g} s eff {x['efficiency']:.2f} "
            f"bits {'same' if x['bit_identical'] else 'DIFFER'}" for x in r["runs"]),
            file=sys.stderr, flush=True)
    emit({
        "benchmark": "scale_out",
        **device_info(),
        "devices": [d.device_kind for d in jax.devices()],
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "versions": versions(),
        **host_info(),
        "sizes": {k: cfg[k] for k in cfg},
        "target": {"efficiency": TARGET, "applies": "2 GPUs, workloads warp and dp"},
        "results": results,
        "wall_seconds": time.perf_counter() - t_start,
        "note": "efficiency = t1 / (d * td), t the best seconds of one call with the inputs "
                "already on the devices; bit_identical: the bytes of the result equal the "
                "1-device result's; cpu_identical: a small instance on the CPU backend "
                "against all devices of the default backend",
    })


if __name__ == "__main__":
    main()
