"""A/B, in one process: exact tiles with the decoded operands stored first (an XLA
``optimization_barrier`` between decoding and the block, so that XLA stores the decoded
operands once instead of decoding them again for every output that reads them) and
without. Per configuration of ``instructions_exact.py``: exact multiply-adds per second
both ways, XLA's own product on the same tiles, and the ratios; interleaved repeats.

Usage: python benchmarks/barrier_ab.py [--macs N] [--only NAME,...] [--rounds R]
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np
from _common import best_time, device_info, emit
from instructions_exact import CONFIGS, _operand

from jaxwarp._src.tensorcore import datapath


def _set(flag: bool) -> None:
    datapath.STORE_DECODED = "on" if flag else "off"
    jax.clear_caches()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--macs", type=int, default=None)
    p.add_argument("--only", default=None)
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args()
    macs = args.macs or (1 << 22 if jax.default_backend() == "cpu" else 1 << 30)
    names = list(CONFIGS) if args.only is None else args.only.split(",")
    for name in names:
        instr, at, bt, ct, (m, n, k) = CONFIGS[name]
        tiles = max(2, macs // (m * n * k))
        rng = np.random.default_rng(0)
        a = jax.device_put(_operand(rng, (tiles, m, k), at))
        b = jax.device_put(_operand(rng, (tiles, k, n), bt))
        c = jax.device_put(rng.standard_normal((tiles, m, n), np.float32))
        arch = "sm_90a" if instr == "wgmma" else "sm_90"
        xt = jnp.float16 if at in ("e4m3", "e5m2", "f16") else (
            jnp.bfloat16 if at == "bf16" else jnp.float32)
        ax, bx = a.astype(xt), b.astype(xt)
        native = jax.jit(lambda a, b, c: jnp.einsum(
            "tmk,tkn->tmn", a, b, preferred_element_type=jnp.float32) + c)
        times: dict[str, list[float]] = {"off": [], "on": [], "native": []}
        outs = {}
        for _ in range(args.rounds):
            for v in ("off", "on"):
                _set(v == "on")
                f = jax.jit(lambda a, b, c: datapath.mma(
                    a, b, c, a_type=at, b_type=bt, c_type=ct, d_type=ct, instruction=instr,
                    instruction_k=k, arch=arch))
                outs[v] = np.asarray(f(a, b, c)).view(np.uint32)
                times[v].append(best_time(lambda f=f: f(a, b, c).block_until_ready(), 3))
            times["native"].append(best_time(lambda: native(ax, bx, c).block_until_ready(), 3))
        t = {kk: min(v) for kk, v in times.items()}
        total = tiles * m * n * k
        emit({"benchmark": f"barrier_ab/{name}", **device_info(), "tiles": tiles,
              "same_bits": bool(np.array_equal(outs["off"], outs["on"])),
              "exact_over_native_off": t["native"] / t["off"],
              "exact_over_native_on": t["native"] / t["on"],
              "on_over_off_speed": t["off"] / t["on"],
              "exact_macs_per_s_off": total / t["off"], "exact_macs_per_s_on": total / t["on"]})


if __name__ == "__main__":
    main()
