"""``mode="native"`` on Pallas' Mosaic GPU backend against its Triton backend and XLA (H100).

Default (timing): for f16, bf16 and e4m3 at ``--size``^3 (4096 on a GPU), the seconds of
``jaxwarp.matmul(mode="native")`` with ``native_backend="mosaic_gpu"`` and ``"triton"``
and of ``jnp.matmul`` (XLA, fp32 output), their ratios (target: Mosaic GPU / XLA >= 0.9),
and whether each backend's bits equal ``mode="exact"``'s (and each other's); e4m3 with
``promote_every=128`` too (no XLA counterpart). ``matmul`` without ``c``: the kernel
starts from +0 and reads no C. ``--tiles`` and ``--orders`` time the kernel's other
output tiles and tile orders (the options ``native_mgpu_tile``, ``native_mgpu_order``).

``--check``: random GEMMs through the Mosaic GPU backend against exact mode, bit for bit:
4096^3 for f16, bf16 and e4m3, K that the kernel's block does not divide, promotion, C
given, f16 accumulators, tf32, e5m2, M and N that the tile does not divide; counts equal /
total per case and the first differing element.

Every case runs in its own try/except: an error is reported in the case's JSON record
(type, message, the traceback's tail), never ends the run. The JSON is printed at the end
(and as each case finishes, one line each) and written to ``--out`` if given.

Usage (from the repository root, on an H100 / H200)::

    python benchmarks/native_mgpu.py                  # timing, 4096^3
    python benchmarks/native_mgpu.py --check          # bits, Mosaic GPU vs exact
    python benchmarks/native_mgpu.py --check --timing --tiles --orders --out native_mgpu.json
"""

from __future__ import annotations

import argparse
import functools
import json
import pathlib
import sys
import time
import warnings

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from _common import compare_bits, error_record, write_record  # noqa: E402

#: ``--check`` cases: (format, accumulator, promote_every, M, K, N, C given).
CHECK_CASES = (
    ("f16", "f32", None, 4096, 4096, 4096, True),
    ("bf16", "f32", None, 4096, 4096, 4096, True),
    ("e4m3", "f32", None, 4096, 4096, 4096, True),
    ("e4m3", "f32", 128, 4096, 4096, 4096, True),
    ("f16", "f32", None, 256, 4144, 512, True),  # K = 4096 + 48: blocks of 16
    ("bf16", "f32", None, 200, 1040, 136, False),  # K = 1040: blocks of 16; M, N padded
    ("bf16", "f32", 64, 512, 2112, 512, True),  # promotion, K = 2112: blocks of 64
    ("e4m3", "f32", None, 200, 4128, 136, True),  # K = 4096 + 32: blocks of 32
    ("e4m3", "f32", 128, 256, 4224, 256, True),  # promotion, a shorter last interval
    ("e5m2", "f16", None, 128, 512, 256, True),  # f16 accumulator
    ("f16", "f16", None, 256, 1024, 256, True),
    ("tf32", "f32", None, 256, 1032, 256, True),  # K = 1032: blocks of 8
    ("tf32", "f32", 32, 128, 528, 128, True),
    ("e5m2", "f32", 64, 64, 960, 40, True),
)




def _operands(fmt, acc, M, K, N, seed, c_given=True):
    import jax.numpy as jnp
    import numpy as np

    from jaxwarp import to_operand

    rng = np.random.default_rng(seed)

    def draw(shape):
        x = rng.standard_normal(shape).astype(np.float32)
        return x * np.exp2(rng.integers(-4, 5, shape)).astype(np.float32)

    a = to_operand(jnp.asarray(draw((M, K))), fmt)
    b = to_operand(jnp.asarray(draw((K, N))), fmt)
    c = jnp.asarray(draw((M, N))).astype(jnp.float32 if acc == "f32" else jnp.float16)
    return a, b, (c if c_given else jnp.zeros_like(c))


def _native(backend: str, kw: dict, tile: str = "auto", order: str = "snake"):
    """A jitted ``matmul(mode="native")`` traced (at its first call) under ``backend``
    (and, for Mosaic GPU, the options ``native_mgpu_tile`` and ``native_mgpu_order``)."""
    import jax

    import jaxwarp

    fn = jax.jit(functools.partial(jaxwarp.matmul, mode="native", **kw))

    def call(*args, block=True):
        with jaxwarp.config.override(native_backend=backend, native_mgpu_tile=tile,
                                     native_mgpu_order=order):
            out = fn(*args)
        return jax.block_until_ready(out) if block else out

    return call


def _device_seconds(fns: dict, args, rounds: int, calls: int) -> dict:
    """Seconds a call of each function, from ``calls`` calls dispatched back to back and
    waited for once (the GPU's time, not Python's per-call dispatch), the best of
    ``rounds`` rounds, the functions taken in turn within each round (a change of the
    GPU's clocks during the run falls on every function alike)."""
    import jax

    best = {k: float("inf") for k in fns}
    for _ in range(rounds):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            out = [fn(*args, block=False) for _ in range(calls)]
            jax.block_until_ready(out)
            best[k] = min(best[k], (time.perf_counter() - t0) / calls)
    return best


def _exact(kw: dict):
    import jax

    import jaxwarp

    fn = jax.jit(functools.partial(jaxwarp.matmul, mode="exact", **kw))
    return lambda *args: jax.block_until_ready(fn(*args))


def run_check() -> list:
    out = []
    for i, (fmt, acc, promote, M, K, N, c_given) in enumerate(CHECK_CASES):
        r = {"format": fmt, "accumulator": acc, "promote_every": promote, "shape": [M, K, N],
             "c_given": c_given}
        t0 = time.perf_counter()
        try:
            a, b, c = _operands(fmt, acc, M, K, N, seed=i, c_given=c_given)
            kw = dict(operand_format=fmt, accumulator=acc, instruction="wgmma",
                      promote_every=promote)
            try:
                got = _native("mosaic_gpu", kw)(a, b, c)
            except Exception as e:  # noqa: BLE001
                r["mosaic_gpu"] = error_record(e)
            else:  # exact mode only where there is something to compare
                r["mosaic_gpu"] = compare_bits(got, _exact(kw)(a, b, c))
        except Exception as e:  # noqa: BLE001
            r.update(error_record(e))
        r["seconds"] = round(time.perf_counter() - t0, 2)
        print("check", json.dumps(r), flush=True)
        out.append(r)
    return out


def run_timing(n: int, tiles: bool, orders: bool = False, rounds: int = 7,
               calls: int = 50) -> dict:
    import jax
    import jax.numpy as jnp

    flops = 2 * n**3
    out = {"size": [n, n, n], "target": {"mosaic_gpu_over_xla": 0.9}}
    for fmt, promote in (("f16", None), ("bf16", None), ("e4m3", None), ("e4m3", 128)):
        name = fmt + ("" if promote is None else f" promote_every={promote}")
        r = out[name] = {}
        try:
            a, b, _ = _operands(fmt, "f32", n, n, n, seed=0)
            kw = dict(operand_format=fmt, promote_every=promote, instruction="wgmma")
            fns = {"mosaic_gpu": _native("mosaic_gpu", kw), "triton": _native("triton", kw)}
            if tiles:  # the other tiles of the Mosaic GPU kernel (native_mgpu_tile)
                for tile in ("128x256", "128x128"):
                    fns[f"mosaic_gpu_{tile}"] = _native("mosaic_gpu", kw, tile)
            if orders:  # the other tile orders (native_mgpu_order)
                for order in ("grid", "persistent"):
                    fns[f"mosaic_gpu_{order}"] = _native("mosaic_gpu", kw, order=order)
            if promote is None:
                xla = jax.jit(functools.partial(jnp.matmul, preferred_element_type=jnp.float32))

                def call_xla(a, b, block=True, xla=xla):
                    return jax.block_until_ready(xla(a, b)) if block else xla(a, b)

                fns["xla"] = call_xla
            results = {}
            for what, fn in list(fns.items()):
                try:
                    results[what] = fn(a, b)  # compile, warm up
                except Exception as e:  # noqa: BLE001
                    r[what] = error_record(e)
                    del fns[what]
            for what, t in _device_seconds(fns, (a, b), rounds, calls).items():
                r[what] = {"seconds": t, "tflops": flops / t / 1e12}
            r["timing"] = {"rounds": rounds, "calls_per_round": calls}
            pairs = [(x, "xla") for x in fns if x != "xla"] + [("mosaic_gpu", "triton")]
            for x, y in pairs:
                if "tflops" in r.get(x, {}) and "tflops" in r.get(y, {}):
                    r[f"{x}_over_{y}"] = r[x]["tflops"] / r[y]["tflops"]
            if "mosaic_gpu_over_xla" in r:
                r["meets_target"] = r["mosaic_gpu_over_xla"] >= 0.9
            try:
                want = _exact(kw)(a, b)
                for what in results:
                    if what != "xla":
                        r[f"{what}_bits_equal_exact"] = compare_bits(results[what], want)
                if "mosaic_gpu" in results and "triton" in results:
                    r["mosaic_gpu_bits_equal_triton"] = compare_bits(results["mosaic_gpu"],
                                                                 results["triton"])["bits_equal"]
            except Exception as e:  # noqa: BLE001
                r["exact"] = error_record(e)
        except Exception as e:  # noqa: BLE001
            r.update(error_record(e))
        print(name, json.dumps(r), flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="bits against exact mode")
    ap.add_argument("--timing", action="store_true",
                    help="timing as well as --check (the default without --check)")
    ap.add_argument("--size", type=int, default=None, help="M = N = K of the timing")
    ap.add_argument("--tiles", action="store_true",
                    help="time each native_mgpu_tile as well (128x256, 128x128)")
    ap.add_argument("--orders", action="store_true",
                    help="time each native_mgpu_order as well (grid, persistent)")
    ap.add_argument("--rounds", type=int, default=7, help="timing rounds (the best is kept)")
    ap.add_argument("--calls", type=int, default=50, help="calls dispatched per round")
    ap.add_argument("--out", type=pathlib.Path, default=None, help="JSON file to write")
    args = ap.parse_args()

    import jax
    from _common import device_info

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        record: dict = {"benchmark": "native_mgpu", **device_info()}
        try:
            import jaxwarp

            record["native_backend_auto"] = jaxwarp.config.native_backend
        except Exception as e:  # noqa: BLE001
            record["import"] = error_record(e)
        if args.check:
            record["check"] = run_check()
            n_ok = sum(r.get("mosaic_gpu", {}).get("bits_equal", False)
                       for r in record["check"])
            record["check_summary"] = f"{n_ok} of {len(record['check'])} cases bit-equal"
        if args.timing or not args.check:
            gpu = jax.default_backend() == "gpu"
            record["timing"] = run_timing(args.size or (4096 if gpu else 256), args.tiles,
                                          args.orders, args.rounds, args.calls)
    write_record(record, caught, args.out)


if __name__ == "__main__":
    main()
