"""The in-range fast path of exact bf16 / tf32 arithmetic: bits and speed.

``jaxwarp.config.arith_in_range_path`` lets exact bf16 / tf32 products whose every product
is a normal fp32 number run the fast path's arithmetic, chosen by one ``lax.cond`` around
``matmul``'s whole k loop ("auto": from 2**22 multiply-adds on a CPU, 2**30 on an
accelerator; "on": always). For each format this times
``jaxwarp.matmul(a, b, operand_format=F, mode="exact")`` on M = N = K = size with the
switch "off" (the decoded general path) and "on" (the cond), and the arithmetic of the
in-range path alone without the cond ("nocond": valid here only because the inputs are in
range, which the record checks), interleaved, and XLA's ``jnp.matmul`` in the same run.
Every variant's result must equal "off" bit for bit on the whole output (and on a second,
out-of-range input: 2**70-scaled rows, which the cond sends to the general path).

Seconds are wall clock on an accelerator and process CPU seconds on a CPU. Prints
progress to stderr and one JSON record (also ``<out>/fused_check.json`` with
``--out``): device, versions, per format the seconds, TFLOP/s, ratios to XLA and
"on" / "off", and the bit checks.

Usage:
    python benchmarks/fused_check.py [--size N] [--formats bf16,tf32,f16] [--repeats R]
        [--out DIR]

Defaults: size 4096 on a GPU, 512 on a CPU.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # this checkout's jaxwarp, before any installed one


def _log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _inputs(fmt: str, n: int, seed: int = 0):
    import jax
    import jax.numpy as jnp
    import numpy as np

    dt = {"f16": np.float16, "bf16": jnp.bfloat16, "tf32": np.float32}[fmt]
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((n, n), np.float32).astype(dt)
    b = rng.standard_normal((n, n), np.float32).astype(dt)
    return jax.device_put(a), jax.device_put(b)


def _tf32(x):
    """The tf32 value of fp32 words: the top 19 bits (what the tensor core reads)."""
    import numpy as np

    return (np.asarray(x).view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)


def _in_fp32_range(a, b) -> bool:
    """The in-range path's condition on the bits: every element finite and not
    subnormal, and every product's exponent within [-100, 126] (so exact as a normal fp32
    number), from the largest and smallest nonzero biased exponents of a and b."""
    import numpy as np

    def exp_range(x):
        u = np.asarray(x).astype(np.float32).view(np.int32) & 0x7FFFFFFF
        e = u >> 23
        return int(e.max(initial=0)), int(np.where(u == 0, 255, e).min(initial=255))

    (amax, amin), (bmax, bmin) = exp_range(a), exp_range(b)
    return (amax < 255 and bmax < 255 and amin > 0 and bmin > 0
            and amax + bmax - 254 <= 126 and amin + bmin - 254 >= -100)


def _best(fn, repeats: int) -> float:
    """Best seconds of one call: wall clock on an accelerator, process CPU seconds on a
    CPU (the 2-core VM is shared: its wall clock measures the other jobs)."""
    import jax

    clock = time.perf_counter if jax.default_backend() != "cpu" else time.process_time
    fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = clock()
        fn()
        best = min(best, clock() - t0)
    return best


def main(argv=None) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np

    import jaxwarp
    from benchmarks._common import device_info, versions

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=None)
    p.add_argument("--formats", default="bf16,tf32,f16")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    gpu = jax.default_backend() != "cpu"
    n = args.size or (4096 if gpu else 512)
    plain = jax.jit(lambda x, y: jnp.matmul(x, y, preferred_element_type=jnp.float32))
    real_cond = jax.lax.cond

    def nocond(pred, yes, no, *ops, **kw):  # the in-range branch alone
        return yes(*ops)

    def variant(name: str):
        # jaxwarp's arithmetic calls jax.lax.cond by that name at trace time: "nocond"
        # traces the in-range branch alone (this process traces nothing else meanwhile)
        jaxwarp.config.update("arith_in_range_path", "off" if name == "off" else "on")
        jax.lax.cond = nocond if name == "nocond" else real_cond
        jax.clear_caches()

    record = {"benchmark": "fused_check", "size": n, **device_info(), "versions": versions(),
              "formats": {}}
    for fmt in args.formats.split(","):
        a, b = _inputs(fmt, n)
        av, bv = (a, b) if fmt != "tf32" else (_tf32(a), _tf32(b))
        rec = {"in_range": _in_fp32_range(av, bv)}
        big = a.at[: n // 8].multiply(2.0 ** 70) if fmt != "f16" else a  # out of range
        rec["xla_seconds"] = _best(lambda a=a, b=b: plain(a, b).block_until_ready(),
                                   args.repeats)
        outs, secs = {}, {}
        names = ("off",) if fmt == "f16" else ("off", "on", "nocond")
        for rnd in range(2):  # interleaved: each variant twice, best of each
            for name in names:
                variant(name)
                f = jax.jit(lambda x, y, fmt=fmt: jaxwarp.matmul(x, y, operand_format=fmt,
                                                                 mode="exact"))
                t0 = time.perf_counter()
                out = f(a, b).block_until_ready()
                if rnd == 0:
                    rec[f"{name}_first_call_seconds"] = round(time.perf_counter() - t0, 2)
                    outs[name] = np.asarray(out).view(np.uint32)
                    if name != "nocond":
                        outs[name + "_big"] = np.asarray(f(big, b)).view(np.uint32)
                t = _best(lambda f=f, a=a, b=b: f(a, b).block_until_ready(), args.repeats)
                secs[name] = min(secs.get(name, float("inf")), t)
                _log(f"{fmt} {name} round {rnd}: {t:.4f} s")
        variant("off")
        for name in names:
            rec[f"{name}_seconds"] = secs[name]
            rec[f"{name}_tflops"] = 2 * n**3 / secs[name] / 1e12
            rec[f"{name}_over_xla"] = rec["xla_seconds"] / secs[name]
            if name != "off":
                rec[f"{name}_speedup_over_off"] = secs["off"] / secs[name]
                rec[f"{name}_bits_equal_off"] = bool((outs[name] == outs["off"]).all())
                rec[f"{name}_bits_differ"] = int((outs[name] != outs["off"]).sum())
        if "on" in names:
            rec["on_bits_equal_off_out_of_range"] = bool(
                (outs["on_big"] == outs["off_big"]).all())
        record["formats"][fmt] = rec
        _log(f"{fmt}: {json.dumps(rec)}")
    print(json.dumps(record, indent=1))
    if args.out:
        pathlib.Path(args.out).mkdir(parents=True, exist_ok=True)
        (pathlib.Path(args.out) / "fused_check.json").write_text(json.dumps(record, indent=1))
    return record


if __name__ == "__main__":
    main()
