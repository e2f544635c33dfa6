"""The warp programs of the CUDA guide's shuffle section, run on jaxwarp.

Prints what the GPU prints for ``__shfl_sync(mask, x, 2, 16)``,
``__shfl_up_sync(mask, x, 2, 16)``, ``__shfl_down_sync(mask, x, 3, 8)`` and
``__shfl_xor_sync(mask, x, 3, 32)`` with ``x = laneId`` (printf format of the
guide's examples), then the three worked examples: broadcast from lane 0, the
inclusive plus-scan over sub-partitions of 8 lanes, and the butterfly reduction.

Usage: python experiments/seed_warp_programs.py
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np

import jaxwarp

FULL = 0xFFFFFFFF

SHUFFLES = (
    ("shfl_sync(mask, x, 2, 16)", lambda x: jaxwarp.shfl_sync(FULL, x, 2, 16), 16),
    ("shfl_up_sync(mask, x, 2, 16)", lambda x: jaxwarp.shfl_up_sync(FULL, x, 2, 16), 16),
    ("shfl_down_sync(mask, x, 3, 8)", lambda x: jaxwarp.shfl_down_sync(FULL, x, 3, 8), 8),
    ("shfl_xor_sync(mask, x, 3, 32)", lambda x: jaxwarp.shfl_xor_sync(FULL, x, 3, 32), 32),
)


def shuffle_lines(fn, width: int) -> list[str]:
    """The printf lines of the guide's test kernel for one shuffle."""
    x = jaxwarp.lane_id()
    y = np.asarray(jax.jit(fn)(x))
    return [
        f"physical lane ID {l} (logical lane ID {l % width}): x={l}, y={y[l]}" for l in range(32)
    ]


def bcast(arg: int) -> jax.Array:
    """Guide 2.3.1: every lane gets lane 0's value (other lanes' value is garbage)."""
    lane = jaxwarp.lane_id()
    value = jnp.where(lane == 0, jnp.int32(arg), jnp.int32(-1))
    return jaxwarp.shfl_sync(FULL, value, 0)


def scan4(value: jax.Array | None = None) -> jax.Array:
    """Guide 2.3.2: inclusive plus-scan within sub-partitions of 8 lanes.

    ``value`` defaults to the guide's seed ``31 - laneId``.
    """
    lane = jaxwarp.lane_id()
    value = 31 - lane if value is None else value
    i = 1
    while i <= 4:
        n = jaxwarp.shfl_up_sync(FULL, value, i, 8)
        value = jnp.where((lane & 7) >= i, value + n, value)
        i *= 2
    return value


def warp_reduce(value: jax.Array | None = None) -> jax.Array:
    """Guide 2.3.3: butterfly reduction; every lane ends with the warp's sum.

    ``value`` defaults to the guide's seed ``31 - laneId``.
    """
    value = 31 - jaxwarp.lane_id() if value is None else value
    i = 16
    while i >= 1:
        value = value + jaxwarp.shfl_xor_sync(FULL, value, i, 32)
        i //= 2
    return value


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0],
                            formatter_class=argparse.RawDescriptionHelpFormatter,
                            epilog="\n".join(__doc__.splitlines()[2:]) + "\n\nNo options: "
                            "the programs and their inputs are the guide's.").parse_args()
    for name, fn, width in SHUFFLES:
        print(f"## {name}")
        print("\n".join(shuffle_lines(fn, width)))
    out = np.asarray(jax.jit(bcast, static_argnums=0)(1234))
    for t in np.flatnonzero(out != 1234):
        print(f"Thread {t} failed.")
    print("## bcast(1234): all lanes got", sorted(set(out.tolist())))
    print("## scan4")
    for t, v in enumerate(np.asarray(jax.jit(scan4)())):
        print(f"Thread {t} final value = {v}")
    print("## warpReduce")
    for t, v in enumerate(np.asarray(jax.jit(warp_reduce)())):
        print(f"Thread {t} final value = {v}")


if __name__ == "__main__":
    main()
