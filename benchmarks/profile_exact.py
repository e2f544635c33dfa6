"""Where an exact GEMM's time goes: a device profile of ``jaxwarp.matmul(mode="exact")``.

Runs ``jaxwarp.matmul(a, b, operand_format=F, mode="exact")`` on M = N = K = size (and
XLA's ``jnp.matmul`` of the same operands, timed by ``_common.best_time``), traces a few calls
with ``jax.profiler`` (a Perfetto trace, no extra packages) and sums the trace's kernel
events by name: per kernel (an XLA fusion) its seconds per call, share of the call,
launches, and, from the compiled HLO, the element-wise operations of its fused
computation by kind. From those an estimate of the operations it issued per second:
(instructions of the fused computation) x (elements of its output) x launches / seconds
-- an estimate, since a fusion may compute some values once per row rather than per
element.

On a GPU the events are the device's kernels (``/device:GPU:0``); on a CPU they are
XLA's thunks on the host threads, when the trace has them.

Prints progress to stderr and one JSON record (also ``<out>/profile_exact.json`` with
``--out``).

``--tiles`` profiles ``jaxwarp.mma`` on a batch of independent tiles instead (names of
``TILES``, or ``all``), against XLA's batched product of the same tiles (``einsum``; f16
tiles stand in for fp8, as in ``instructions_exact.py``).

Usage:
    python benchmarks/profile_exact.py [--size N] [--formats bf16,f16,e4m3] [--calls C]
        [--top T] [--tiles NAME,...|all] [--tile-macs N] [--out DIR] [--hlo-dir DIR]

Defaults: size 4096 on a GPU, 512 on a CPU; 3 traced calls; the top 8 kernels; tiles of
2**28 multiply-adds on a GPU, 2**22 on a CPU.
"""

from __future__ import annotations

import argparse
import collections
import glob
import gzip
import json
import math
import pathlib
import re
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # this checkout's jaxwarp, before any installed one
from _common import best_time, versions  # noqa: E402


def _log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


#: HLO opcodes that move or view data rather than compute (not counted as operations).
_FREE = {"parameter", "constant", "broadcast", "reshape", "bitcast", "slice", "tuple",
         "get-tuple-element", "transpose", "copy", "iota", "dynamic-slice", "concatenate",
         "pad", "bitcast-convert"}


def _fused_ops(hlo: str) -> dict[str, collections.Counter]:
    """Per fused computation of the compiled HLO text: its instructions by opcode."""
    comps: dict[str, collections.Counter] = {}
    name = None
    for line in hlo.splitlines():
        m = re.match(r"^\s*(?:ENTRY\s+)?%?([\w.\-]+)\s*\(.*\)\s*->.*\{\s*$", line)
        if m:
            name = m.group(1)
            comps[name] = collections.Counter()
            continue
        if line.strip() == "}":
            name = None
            continue
        if name is not None:
            m = re.search(r"=\s*[\w\[\]{},:\s/()]*?\s([a-z][\w\-]*)\(", line)
            if m:
                comps[name][m.group(1)] += 1
    return comps


_FUSION = re.compile(
    r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(.+?)\s+fusion\(.*calls=%?([\w.\-]+)")


def _fusion_calls(hlo: str) -> dict[str, tuple[str, int]]:
    """Fusion instruction name (with "_" for ".", as a GPU trace names its kernel) ->
    (its fused computation, elements of its output)."""
    out = {}
    for line in hlo.splitlines():
        m = _FUSION.match(line)
        if not m:
            continue
        shapes = re.findall(r"\[([\d,]*)\]", m.group(2))
        elems = max((math.prod(int(d) for d in s.split(",") if d) for s in shapes),
                    default=1)
        out[m.group(1).replace(".", "_")] = (m.group(3), elems)  # as the trace names it
    return out


#: Host trace events that contain others (a CPU trace nests thunks in these).
_CONTAINER = re.compile(r"^(ThunkExecutor|PjitFunction|cond|while|call|conditional)\b")


def _trace_events(fn, args, calls: int):
    import jax

    d = tempfile.mkdtemp()
    with jax.profiler.trace(d, create_perfetto_trace=True):
        for _ in range(calls):
            jax.block_until_ready(fn(*args))
    path = glob.glob(d + "/**/perfetto_trace.json.gz", recursive=True)[0]
    trace = json.load(gzip.open(path))
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    procs = {e["pid"]: e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "process_name"}
    return events, procs


def _kernel_events(fn, args, calls: int):
    """{kernel name: [seconds, launches]} over ``calls`` traced calls (the device's
    kernels on a GPU, XLA's thunks on a CPU), and the trace's process names."""
    events, procs = _trace_events(fn, args, calls)
    dev = [p for p, n in procs.items() if "device" in n.lower() and "gpu" in n.lower()]
    pick = set(dev) if dev else set(procs)
    per = collections.defaultdict(lambda: [0.0, 0])
    for e in events:
        if (e.get("ph") == "X" and e["pid"] in pick and not e["name"].startswith("$")
                and not _CONTAINER.match(e["name"])):
            per[e["name"]][0] += e.get("dur", 0.0) * 1e-6
            per[e["name"]][1] += 1
    return per, procs


def device_kernel_seconds(fn, args, calls: int) -> dict[str, float]:
    """Seconds per call of each kernel of ``fn(*args)`` (a trace of ``calls`` calls)."""
    per, _ = _kernel_events(fn, args, calls)
    return {name: sec / calls for name, (sec, _n) in per.items()}


#: Tile configurations of ``--tiles`` (``instructions_exact.py``'s names):
#: instruction, a and b format, (m, n, k).
TILES = {
    "wmma_bf16_m16n16k16": ("wmma", "bf16", (16, 16, 16)),
    "mma_sync_bf16_m16n8k16": ("mma_sync", "bf16", (16, 8, 16)),
    "mma_sync_f16_m16n8k16": ("mma_sync", "f16", (16, 8, 16)),
    "mma_sync_tf32_m16n8k8": ("mma_sync", "tf32", (16, 8, 8)),
    "mma_sync_e4m3_m16n8k32": ("mma_sync", "e4m3", (16, 8, 32)),
    "wgmma_e4m3_m64n64k32": ("wgmma", "e4m3", (64, 64, 32)),
}


def _gemm(fmt: str, size: int):
    import jax.numpy as jnp
    import numpy as np

    import jaxwarp

    rng = np.random.default_rng(0)
    a = jnp.asarray(rng.standard_normal((size, size), np.float32))
    b = jnp.asarray(rng.standard_normal((size, size), np.float32))
    return (lambda a, b: jaxwarp.matmul(a, b, operand_format=fmt, mode="exact"),
            lambda a, b: jnp.matmul(a, b), (a, b), (a, b), size ** 3)


def _tiles(name: str, macs: int):
    import jax.numpy as jnp
    import numpy as np

    import jaxwarp

    instr, fmt, (m, n, k) = TILES[name]
    dt = jaxwarp.get_format(fmt).storage_dtype
    t = max(2, macs // (m * n * k))
    rng = np.random.default_rng(0)
    a = jnp.asarray(rng.standard_normal((t, m, k), np.float32).astype(dt))
    b = jnp.asarray(rng.standard_normal((t, k, n), np.float32).astype(dt))
    c = jnp.asarray(rng.standard_normal((t, m, n), np.float32))
    arch = "sm_90a" if instr == "wgmma" else "sm_90"
    xt = {"bf16": jnp.bfloat16, "tf32": jnp.float32}.get(fmt, jnp.float16)

    def exact(a, b, c):
        return jaxwarp.mma(a, b, c, a_format=fmt, b_format=fmt, c_format="f32",
                           d_format="f32", instruction=instr, instruction_k=k, arch=arch)

    def plain(a, b, c):  # XLA's batched product of the same tiles (f16 for fp8)
        return jnp.einsum("tmk,tkn->tmn", a, b, preferred_element_type=jnp.float32) + c

    return exact, plain, (a, b, c), (a.astype(xt), b.astype(xt), c), t * m * n * k


def profile(label: str, case, calls: int, top: int, hlo_dir: str | None = None) -> dict:
    import jax

    exact_fn, plain_fn, args, plain_args, macs = case
    exact, plain = jax.jit(exact_fn), jax.jit(plain_fn)
    hlo = exact.lower(*args).compile().as_text()
    if hlo_dir:
        path = pathlib.Path(hlo_dir) / (re.sub(r"[^\w.]+", "_", label) + ".hlo.txt")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(hlo)
    wall, wall_plain = (best_time(lambda fn=fn, xs=xs: jax.block_until_ready(fn(*xs)), 3)
                        for fn, xs in ((exact, args), (plain, plain_args)))
    _log(f"{label}: exact {wall:.4f} s, XLA {wall_plain:.5f} s (_common.best_time)")
    per, procs = _kernel_events(exact, args, calls)
    comps, fusions = _fused_ops(hlo), _fusion_calls(hlo)
    total = sum(v[0] for v in per.values()) / calls
    kernels = []
    for name, (sec, n) in sorted(per.items(), key=lambda kv: -kv[1][0])[:top]:
        base = name.split(":")[0].strip().replace(".", "_")
        rec = {"kernel": name, "seconds_per_call": sec / calls, "share": sec / calls / total
               if total else None, "launches_per_call": n / calls}
        if base in fusions:
            comp, elems = fusions[base]
            ops = {k: v for k, v in comps.get(comp, {}).items() if k not in _FREE}
            count = sum(ops.values())
            rec.update(fused_computation=comp, output_elements=elems, operations=count,
                       operations_by_kind=dict(collections.Counter(ops).most_common()),
                       est_operations_per_s=count * elems * n / sec if sec else None)
        kernels.append(rec)
    return {"case": label, "multiply_adds": macs, "wall_s": wall, "wall_s_xla": wall_plain,
            "tflops": 2.0 * macs / wall / 1e12, "ratio_to_xla": wall_plain / wall,
            "traced_calls": calls, "device_event_s_per_call": total,
            "trace_processes": sorted(set(procs.values())), "kernels": kernels,
            "hlo_instructions": sum(sum(c.values()) for c in comps.values())}


def main() -> None:
    import jax

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=None)
    p.add_argument("--formats", default="bf16,f16,e4m3")
    p.add_argument("--tiles", default="", help="comma-separated names of TILES (or 'all')")
    p.add_argument("--tile-macs", type=int, default=None)
    p.add_argument("--calls", type=int, default=3)
    p.add_argument("--top", type=int, default=8)
    p.add_argument("--out", default=None)
    p.add_argument("--hlo-dir", default=None, help="write each case's compiled HLO here")
    args = p.parse_args()
    gpu = jax.default_backend() != "cpu"
    size = args.size or (4096 if gpu else 512)
    rec = {"benchmark": "profile_exact", "backend": jax.default_backend(),
           "device": jax.devices()[0].device_kind, "versions": versions(),
           "results": []}
    for fmt in [f for f in args.formats.split(",") if f]:
        _log(f"profiling {fmt} at {size}^3")
        rec["results"].append(profile(f"matmul {fmt} {size}^3", _gemm(fmt, size), args.calls,
                                      args.top, args.hlo_dir))
    names = list(TILES) if args.tiles == "all" else [t for t in args.tiles.split(",") if t]
    macs = args.tile_macs or (1 << 28 if gpu else 1 << 22)
    for name in names:
        _log(f"profiling {name} tiles ({macs} multiply-adds)")
        rec["results"].append(profile(name, _tiles(name, macs), args.calls, args.top,
                                      args.hlo_dir))
    text = json.dumps(rec, indent=1)
    print(text)
    if args.out:
        out = pathlib.Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "profile_exact.json").write_text(text + "\n")


if __name__ == "__main__":
    main()
