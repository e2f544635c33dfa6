"""Study 3: warp programs at scale, each checked against NumPy, with warps per second.

The seed documents' programs (the CUDA guide's four shuffle examples, broadcast
from lane 0, the inclusive scan over 8-lane sub-partitions, the butterfly
reduction), ``__reduce_add_sync``, and two classic warp algorithms:

* a bitonic sort of 32 keys (one per lane) with ``__shfl_xor_sync``;
* a Hillis-Steele inclusive scan over the 32 lanes with ``__shfl_up_sync``.

Every program is one warp's code on a (32,) lane axis, written with jaxwarp's
intrinsics; ``jaxwarp`` ``sharded_vmap`` runs it on many warps of random int32
data (full 32-bit range: sums wrap modulo 2**32 like the GPU's), the warp axis
sharded over ``--devices`` devices (default 1; ``all``: every device, the same
numbers on any count). Results are compared with a NumPy reference for all
warps; the time is the best of ``--repeat`` runs after compilation, data already
on the devices.

Writes ``warp_programs.csv`` to ``--out`` (default ``experiments/out/``).

Usage:
    python experiments/warp_programs.py             # 2**18 warps (CPU default)
    python experiments/warp_programs.py --large     # 2**22 warps (>= 10**6; GPU)
    python experiments/warp_programs.py --large --devices all   # over every GPU
    python experiments/warp_programs.py --programs bitonic_sort inclusive_scan
"""

from __future__ import annotations

import argparse
import sys

import _study_utils as su
import jax
import jax.numpy as jnp
import numpy as np
import seed_warp_programs as seed
from tqdm import tqdm

import jaxwarp

FULL = jaxwarp.FULL_MASK
COLUMNS = ("program", "warps", "devices", "seconds", "warps_per_s", "compile_s", "check")
DEFAULT_WARPS = 2**18
LARGE_WARPS = 2**22


# --- One warp's programs (lane axis first). ----------------------------------------


def bcast(x: jax.Array) -> jax.Array:
    """Guide 2.3.1 ``bcast``: every lane gets lane 0's value (``__shfl_sync(mask, v, 0)``)."""
    return jaxwarp.shfl_sync(FULL, x, 0)


# The guide's programs on random data instead of the guide's 31 - laneId.
scan4 = seed.scan4
warp_reduce = seed.warp_reduce


def reduce_add(x: jax.Array) -> jax.Array:
    """``__reduce_add_sync(FULL, x)`` (sm_80+), on the same data as ``warp_reduce``."""
    return jaxwarp.reduce_add_sync(FULL, x.astype(jnp.uint32)).astype(jnp.int32)


def bitonic_sort(x: jax.Array) -> jax.Array:
    """Sorts the warp's 32 keys ascending by lane, one compare-exchange per shuffle.

    Stage k (2, 4, ..., 32) builds bitonic runs of length k; step j (k/2, ..., 1)
    exchanges with lane ``lane ^ j``. A lane keeps the smaller of the pair when it
    is the lower lane of an ascending run or the upper lane of a descending one::

        for (int k = 2; k <= 32; k <<= 1)
          for (int j = k >> 1; j > 0; j >>= 1) {
            int y = __shfl_xor_sync(0xffffffff, x, j);
            bool keep_min = ((lane & j) == 0) == ((lane & k) == 0);
            x = keep_min ? min(x, y) : max(x, y);
          }
    """
    lane = jaxwarp.lane_id()
    k = 2
    while k <= 32:
        j = k // 2
        while j >= 1:
            y = jaxwarp.shfl_xor_sync(FULL, x, j)
            keep_min = ((lane & j) == 0) == ((lane & k) == 0)
            x = jnp.where(keep_min, jnp.minimum(x, y), jnp.maximum(x, y))
            j //= 2
        k *= 2
    return x


def inclusive_scan(x: jax.Array) -> jax.Array:
    """Hillis-Steele inclusive plus-scan over the whole warp (5 ``__shfl_up_sync`` steps)."""
    lane = jaxwarp.lane_id()
    d = 1
    while d < 32:
        n = jaxwarp.shfl_up_sync(FULL, x, d)
        x = jnp.where(lane >= d, x + n, x)
        d *= 2
    return x


# --- NumPy references on (warps, 32) int32 arrays. --------------------------------

_LANE = np.arange(32)


def _np_shfl(x, src):
    return x[:, src]


def _np_seg_cumsum(x, width):
    w = x.shape[0]
    return np.cumsum(x.reshape(w, 32 // width, width), axis=2, dtype=np.int32).reshape(w, 32)


def _np_sum(x):
    return np.repeat(np.sum(x, axis=1, dtype=np.int32)[:, None], 32, axis=1)


# CUDA's definitions for power-of-two widths (the guide's wording, not the PTX formula
# that jaxwarp implements): an independent check.
_GUIDE_SHUFFLES = {
    "shfl_sync(mask, x, 2, 16)": lambda x: _np_shfl(x, (_LANE // 16) * 16 + 2),
    "shfl_up_sync(mask, x, 2, 16)": lambda x: _np_shfl(x, np.where(_LANE % 16 >= 2,
                                                                   _LANE - 2, _LANE)),
    "shfl_down_sync(mask, x, 3, 8)": lambda x: _np_shfl(x, np.where(_LANE % 8 + 3 < 8,
                                                                    _LANE + 3, _LANE)),
    "shfl_xor_sync(mask, x, 3, 32)": lambda x: _np_shfl(x, _LANE ^ 3),
}

#: The guide's shuffle examples by their command-line names (the arguments are the guide's).
_SHUFFLE_NAMES = {"shfl_sync(mask, x, 2, 16)": "shfl_sync",
                  "shfl_up_sync(mask, x, 2, 16)": "shfl_up_sync",
                  "shfl_down_sync(mask, x, 3, 8)": "shfl_down_sync",
                  "shfl_xor_sync(mask, x, 3, 32)": "shfl_xor_sync"}

#: name -> (one warp's program, NumPy reference over all warps). Names are plain tokens,
#: so ``--programs bcast scan4`` needs no quoting.
PROGRAMS = {
    **{_SHUFFLE_NAMES[call]: (fn, _GUIDE_SHUFFLES[call]) for call, fn, _ in seed.SHUFFLES},
    "bcast": (bcast, lambda x: _np_shfl(x, np.zeros(32, int))),
    "scan4": (scan4, lambda x: _np_seg_cumsum(x, 8)),
    "warpReduce": (warp_reduce, _np_sum),
    "reduce_add_sync": (reduce_add, _np_sum),
    "bitonic_sort": (bitonic_sort, lambda x: np.sort(x, axis=1)),
    "inclusive_scan": (inclusive_scan, lambda x: np.cumsum(x, axis=1, dtype=np.int32)),
}

#: What each program is, for the printed table and ``--help``.
DESCRIPTIONS = {
    **{name: f"__{call}" for call, name in _SHUFFLE_NAMES.items()},
    "bcast": "guide: broadcast from lane 0",
    "scan4": "guide: inclusive scan over 8-lane parts",
    "warpReduce": "guide: butterfly sum",
    "reduce_add_sync": "__reduce_add_sync",
    "bitonic_sort": "bitonic sort of 32 keys",
    "inclusive_scan": "Hillis-Steele scan of 32 lanes",
}


def random_warps(n: int, seed: int = 0) -> np.ndarray:
    """(n, 32) int32 over the full 32-bit range."""
    rng = np.random.default_rng(seed)
    return rng.integers(-(2**31), 2**31, size=(n, 32), dtype=np.int64).astype(np.int32)


def run_program(name: str, data: np.ndarray, *, repeat: int = 3, sharded=None,
                devices=None) -> dict:
    """Runs one program on every warp of ``data``, checks it, times it.

    Returns:
        A CSV row: program, warps, devices, seconds (best run), warps_per_s,
        compile_s (first call), check ("ok" or the number of wrong warps).
    """
    fn, ref = PROGRAMS[name]
    mesh = jaxwarp.batch_mesh(devices)
    f = jaxwarp.sharded_vmap(fn, devices=devices)
    x, n = jaxwarp.shard_batch(data, mesh) if sharded is None else (sharded, len(data))
    with su.Timer() as t0:
        out = su.block(f(x))
    times = []
    for _ in range(repeat):
        with su.Timer() as t:
            su.block(f(x))
        times.append(t.seconds)
    got = np.asarray(out)[:n]
    want = ref(data)
    bad = int(np.sum(np.any(got != want, axis=1)))
    best = min(times) if times else t0.seconds
    return dict(program=name, warps=n, devices=mesh.size, seconds=f"{best:.4g}",
                warps_per_s=f"{n / best:.4g}", compile_s=f"{t0.seconds:.3g}",
                check="ok" if bad == 0 else f"{bad} warps differ")


def run(n: int, *, programs=tuple(PROGRAMS), seed: int = 0, repeat: int = 3,
        progress: bool = True, devices=None) -> list[dict]:
    """Every program of ``programs`` on ``n`` random warps, sharded over ``devices``
    (default: every device)."""
    data = random_warps(n, seed)
    sharded, _ = jaxwarp.shard_batch(data, jaxwarp.batch_mesh(devices))
    rows = []
    for name in tqdm(programs, desc="warp programs", unit="prog", disable=not progress,
                     file=sys.stderr):
        rows.append(run_program(name, data, repeat=repeat, sharded=sharded, devices=devices))
    return rows


def main(argv=None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n".join(__doc__.splitlines()[2:]) + "\nprograms:\n"
                                + "\n".join(f"  {n:<16} {d}" for n, d in DESCRIPTIONS.items()))
    p.add_argument("--large", action="store_true",
                   help=f"{LARGE_WARPS} warps, the GPU size (default {DEFAULT_WARPS}); "
                        "--warps overrides it")
    p.add_argument("--warps", type=su.int_at_least(1), metavar="N",
                   help=f"number of warps, >= 1 (default {DEFAULT_WARPS}, --large {LARGE_WARPS})")
    p.add_argument("--programs", nargs="+", choices=list(PROGRAMS), default=list(PROGRAMS),
                   metavar="PROGRAM",
                   help="programs to run, one or more of the names listed below "
                        "(default: all)")
    p.add_argument("--repeat", type=su.int_at_least(0), default=3, metavar="N",
                   help="timed runs per program after the first (compiling) one, the best "
                        "kept; >= 0, 0 times the first run (default 3)")
    su.add_common_options(p)
    su.add_devices_option(p)
    args = p.parse_args(argv)
    n = args.warps or (LARGE_WARPS if args.large else DEFAULT_WARPS)
    devices = su.pick_devices(args.devices)
    out = su.out_dir(args.out)
    print(su.run_header(argv, devices))
    print(f"{n} warps of random int32 per program, seed {args.seed}\n", flush=True)
    rows = run(n, programs=args.programs, seed=args.seed, repeat=args.repeat,
               progress=not args.no_progress, devices=devices)
    print(su.markdown_table(
        ["program", "what", "warps", "devices", "best s", "warps/s", "compile s", "vs NumPy"],
        [[r["program"], DESCRIPTIONS[r["program"]], *(r[c] for c in COLUMNS[1:])]
         for r in rows]))
    su.write_csv(out / "warp_programs.csv", rows, COLUMNS)
    print(f"\nwrote {out / 'warp_programs.csv'}")
    if any(r["check"] != "ok" for r in rows):
        raise SystemExit("some programs disagree with NumPy")
    return rows


if __name__ == "__main__":
    main()
