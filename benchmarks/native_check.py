"""``mode="native"`` on an H100: its bits against exact mode and the captures, and its speed.

Parts (each runs in its own process with its own time limit, so that a crash or a hang in
one does not hide the others; each variant inside a part is in its own try/except that
prints the traceback):

* ``stepbits``: the study's training step (``experiments/emulated_training.py``, small
  task, bf16) in native and exact mode, loss and gradients bit for bit per parameter,
  with XLA's deterministic ops; exact against itself run twice, against trivially
  different exact programs (one extra output; a zero probe added to the final
  LayerNorm's output), the cotangent flowing into ``ln_f`` (the probe's gradient) in
  both modes, and which summation order of that cotangent each program's ``ln_f.b``
  gradient is;
* ``stepprod``: every emulated product of that step, forward and backward, recorded in
  both modes (a host callback on matmul's chain), matched by the bits of its inputs,
  outputs compared;
* ``caps``: every capture configuration of ``tests/data`` (``chain/...`` keys and single
  instructions: :data:`CAPTURE_FILES`) whose chain the native kernel issues, all its
  cases in one kernel call: native D against the hardware's D and against exact mode;
  the others listed with the reason (``jaxwarp.backends.native_check_chain``'s message);
* ``mma``: ``jaxwarp.mma(mode="native")`` against exact mode (batch dims, tf32 words
  with their low 13 bits set, mixed fp8, f16 accumulators);
* ``random``: random GEMMs, ``matmul(mode="native")`` against ``matmul(mode="exact")``:
  f16 / bf16 / tf32 / e4m3 / e5m2 and mixed fp8, f32 and f16 accumulators, fp8 with and
  without promotion, K not a multiple of the kernel's block, WMMA / mma.sync / wgmma
  tiles, M and N from 16 to 4096; counts equal / total per configuration;
* ``timing``: 4096^3 for f16, bf16, e4m3: native and ``jnp.matmul`` (XLA), TFLOP/s and
  native / XLA (target: >= 0.5); ``NATIVE_CHECK_TIMING_EXACT=1`` adds exact mode;
* ``step``: the emulate training step (``benchmarks/emulate_step.py``'s model, ``--large``
  size) plain vs ``mode="native"`` (and ``"fast"``) (target: native >= 0.5 of plain);
* ``ptx``: the kernels of two native matmuls in XLA's dump: wgmma instructions, fp32 adds;
* ``tune``: other kernel blocks (bm, bn, bk, warps, stages) at 4096^3, TFLOP/s.

Writes ``OUT/native_<part>.json`` and prints each part's output. ``NATIVE_CHECK_DRY=1``
runs the script's machinery on a CPU (see :data:`DRY`).

Usage: python benchmarks/native_check.py [--out DIR] [--parts stepbits,caps,random,...]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import pathlib
import subprocess
import sys
import time
import traceback

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "experiments"))

PARTS = {"stepbits": 60, "stepct": 70, "stepprod": 80, "stepextra": 35, "caps": 45,
         "mma": 25, "random": 55, "timing": 35, "step": 55, "ptx": 20, "tune": 45}
#: ``NATIVE_CHECK_DRY=1``: a CPU dry run of the script's own machinery -- the kernel in
#: Pallas' interpreter (caps) and ``mode="fast"`` standing for ``"native"`` (random, the
#: steps), so that the comparisons must report differences; it says nothing of the GPU.
DRY = os.environ.get("NATIVE_CHECK_DRY") == "1"
OUT_DIR: list = [pathlib.Path(".")]  # set by run_part
NATIVE = "fast" if DRY else "native"


def _bits(x):
    import numpy as np

    x = np.asarray(x)
    return x.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[x.dtype.itemsize])


def _compare(got, want) -> dict:
    import numpy as np

    g, w = np.asarray(got), np.asarray(want)
    same = _bits(g) == _bits(w)
    nan = np.isnan(g.astype(np.float32)) & np.isnan(w.astype(np.float32))
    out = {"equal": int(same.sum()), "total": int(same.size),
           "equal_or_both_nan": int((same | nan).sum())}
    bad = np.argwhere(~(same | nan))
    if len(bad):
        out["first_differences"] = [
            {"at": [int(i) for i in ix], "got": float(g[tuple(ix)]),
             "want": float(w[tuple(ix)]), "got_bits": hex(int(_bits(g)[tuple(ix)])),
             "want_bits": hex(int(_bits(w)[tuple(ix)]))} for ix in bad[:4]]
    return out


def _line(name, r):
    if "error" in r:
        return f"{name}: ERROR {r['error']}"
    return (f"{name}: {r['equal']}/{r['total']} equal bits "
            f"({r['equal_or_both_nan']} counting NaN = NaN)")


# --------------------------------------------------------------------------------------
#: The capture files whose chains (``chain/...``) and single instructions the native
#: kernel is run on (every ``tests/data`` file with ``ptx`` / ``wgmma`` / chain keys).
CAPTURE_FILES = tuple(os.environ.get("NATIVE_CHECK_CAPS", "").split(",") if
                      os.environ.get("NATIVE_CHECK_CAPS") else
                      ("h100_chain_sample", "h100_tc_edges", "h100_sparse", "h100_wgmma",
                       "h100_ptx_float"))  # NATIVE_CHECK_CAPS=a,b: these files only


def _capture_groups(z):
    """(group, op, name, chain) for every ptx / wgmma / sparse configuration of ``z``."""
    for g in sorted({k.rsplit("/", 1)[0] for k in z.files if "/" in k}):
        parts = g.split("/")
        if parts[0] == "chain" and len(parts) == 3:
            yield g, parts[1], parts[2], True
        elif parts[0] in ("ptx", "wgmma", "sp", "wgsp") and len(parts) == 2:
            yield g, parts[0], parts[1], False


def _block_diagonal(A, B, C):
    """Cases (n, M, K) @ (n, K, N) + (n, M, N) as one (n M, K) @ (K, n N) + (n M, n N)
    product whose diagonal (M, N) blocks are the cases' D (each output element depends
    only on its row of A, its column of B and its C element)."""
    import numpy as np

    n, M, K = A.shape
    N = B.shape[2]
    a = A.reshape(n * M, K)
    b = np.concatenate(list(B), axis=1)
    c = np.zeros((n * M, n * N), C.dtype)
    for i in range(n):
        c[i * M:(i + 1) * M, i * N:(i + 1) * N] = C[i]
    return a, b, c


def _diagonal(D, n, M, N):
    import numpy as np

    D = np.asarray(D)
    return np.stack([D[i * M:(i + 1) * M, i * N:(i + 1) * N] for i in range(n)])


def part_caps() -> dict:
    """Every capture configuration of :data:`CAPTURE_FILES` whose chain the native kernel
    issues: all its cases in one kernel call (block diagonal), native D against the
    hardware's D and against exact mode's; the others listed with the reason."""
    import functools

    import jax
    import numpy as np

    from jaxwarp import backends, isa
    from jaxwarp.backends import ChainConfig as Cfg
    from jaxwarp.backends import exact_chain as tiled
    from jaxwarp.backends import parse_mma_name

    out = {}
    summary = {"native_configs": 0, "native_elements": 0, "equal_hardware": 0,
               "equal_exact": 0, "not_native": 0}
    for f in CAPTURE_FILES:
        path = ROOT / "tests" / "data" / f"{f}.npz"
        if not path.exists():
            out[f] = {"skipped": "no such file"}
            continue
        z = np.load(path)
        for g, op, name, chain in _capture_groups(z):
            key = f"{f}:{g}"
            if op in ("sp", "wgsp"):
                out[key] = {"not_native": "a sparse instruction (mma.sp / wgmma.sp): "
                                          "matmul's sparsity runs mode='exact' only"}
                summary["not_native"] += 1
                continue
            try:
                n = parse_mma_name(op, name, chain=chain)
            except Exception as e:  # noqa: BLE001
                out[key] = {"not_native": f"name: {e}"}
                summary["not_native"] += 1
                continue
            why = None
            if n.a_format not in backends.NATIVE_K:
                why = (f"operand format {n.a_format} (wgmma float formats: "
                       f"{tuple(backends.NATIVE_K)})")
            elif n.c_format != n.d_format:
                why = f"C {n.c_format} / D {n.d_format}: matmul's accumulator is one format"
            elif n.neg_a or n.neg_b or n.scale_d0 or n.satf:
                why = "negated / scale-d / satfinite form: not matmul's"
            tile = (n.m, n.n, n.k)
            cfg = Cfg(n.a_format, n.b_format, n.c_format, tile, n.instruction, "sm_90",
                      "native", None, False)
            if why is None:
                try:
                    backends.native_check_chain(cfg)
                except ValueError as e:
                    why = str(e)
            if why is not None:
                out[key] = {"not_native": why}
                summary["not_native"] += 1
                print(f"{key}: not native: {why}"[:300], flush=True)
                continue
            try:
                adt, bdt = isa.storage_dtype(n.a_format), isa.storage_dtype(n.b_format)
                cdt = isa.storage_dtype(n.c_format)
                A, B, C, D = (z[f"{g}/{x}"] for x in "ABCD")
                if n.a_format == "tf32":  # the tensor core reads the top 19 bits
                    A, B = A & np.uint32(0xFFFFE000), B & np.uint32(0xFFFFE000)
                cases, M, K = A.shape
                N = B.shape[2]
                a, b, c = _block_diagonal(A.view(adt), B.view(bdt), C.view(cdt))
                ecfg = Cfg(n.a_format, n.b_format, n.c_format, tile, n.instruction,
                           "sm_90", "exact", None, False)
                got = _diagonal(jax.jit(functools.partial(backends.native_chain, cfg=cfg,
                                                          interpret=DRY))(a, b, c),
                                cases, M, N)
                ex = _diagonal(jax.jit(functools.partial(tiled, cfg=ecfg))(a, b, c),
                               cases, M, N)
                hw = D.view(cdt)
                out[key] = {"cases": cases, "mnk_steps": [M, N, K, n.steps],
                            "vs_hardware": _compare(got, hw), "vs_exact": _compare(got, ex),
                            "exact_vs_hardware": _compare(ex, hw)["equal"]}
                summary["native_configs"] += 1
                summary["native_elements"] += got.size
                summary["equal_hardware"] += out[key]["vs_hardware"]["equal"]
                summary["equal_exact"] += out[key]["vs_exact"]["equal"]
                print(_line(key + " native vs hardware", out[key]["vs_hardware"]))
                print(_line(key + " native vs exact", out[key]["vs_exact"]), flush=True)
            except Exception as e:  # noqa: BLE001
                traceback.print_exc()
                out[key] = {"error": repr(e)[:500]}
                print(f"{key}: ERROR {e!r}"[:400], flush=True)
    out["summary"] = summary
    print("caps summary", json.dumps(summary), flush=True)
    return out


# --------------------------------------------------------------------------------------
def _random(rng, shape, spread):
    import numpy as np

    x = rng.standard_normal(shape).astype(np.float32)
    if spread:
        x *= np.exp2(rng.integers(-spread, spread + 1, shape)).astype(np.float32)
    return x


RANDOM_CONFIGS = [
    # (operand_format, accumulator, instruction, tile, promote_every, (M, K, N), spread)
    # Run 2 (H100, 2026-11-26) had every bit equal on 22 configurations (f16 / bf16 / tf32
    # / e4m3 / e5m2 f32, promotion of f16 / bf16 / tf32 / e4m3, f16 accumulators, 4096^3
    # f16); these are the ones it did not reach and new ones.
    # fp8 with and without promotion, K not a multiple of the kernel's block (128)
    ("e5m2", "f32", None, None, 128, (96, 2080, 40), 4),
    ("e5m2", "f32", None, None, 64, (80, 1120, 24), 4),
    ("e5m2", "f16", None, None, None, (64, 544, 64), 1),
    (("e5m2", "e4m3"), "f32", None, None, None, (128, 1056, 128), 2),
    (("e5m2", "e4m3"), "f32", None, None, 128, (128, 1056, 128), 2),
    (("e4m3", "e5m2"), "f16", None, None, None, (64, 160, 72), 1),
    ("e4m3", "f32", None, None, 256, (64, 1184, 64), 2),
    ("e4m3", "f32", None, None, None, (200, 4128, 136), 2),
    # tf32 (k = 8; a 32-wide block), K not a multiple of the block
    ("tf32", "f32", "wgmma", None, None, (64, 1000, 64), 8),
    ("tf32", "f32", "wgmma", None, 64, (72, 1000, 40), 8),
    # f16 / bf16 (k = 16; a 64-wide block): tails, f16 accumulator, promotion, tiles
    ("f16", "f16", "mma_sync", (16, 8, 16), None, (48, 1072, 40), 2),
    ("f16", "f32", None, None, None, (64, 112, 64), 4),  # WMMA m16n16k16
    ("bf16", "f32", "wgmma", None, 128, (64, 4160, 64), 8),
    ("bf16", "f32", "mma_sync", (16, 8, 16), 32, (32, 1008, 24), 8),
    # one large GEMM per family (4096^3 f16 was 16777216/16777216 in run 2)
    ("e4m3", "f32", None, None, 128, (4096, 4096, 4096), 2),
    ("bf16", "f32", None, None, None, (2048, 4096, 2048), 8),
]


def part_random() -> dict:
    import functools

    import jax
    import jax.numpy as jnp
    import numpy as np

    import jaxwarp

    out = {}
    t0 = time.perf_counter()
    for fmt, acc, instruction, tile, promote, (M, K, N), spread in RANDOM_CONFIGS:
        name = (f"{fmt if isinstance(fmt, str) else 'x'.join(fmt)} acc={acc} "
                f"instr={instruction} tile={tile} promote={promote} M,K,N={M},{K},{N}")
        if time.perf_counter() - t0 > PARTS["random"] - 15:
            out[name] = {"skipped": "time"}
            print(f"{name}: skipped (time)")
            continue
        try:
            rng = np.random.default_rng(M * 7 + K * 3 + N)
            a = jnp.asarray(_random(rng, (M, K), spread))
            b = jnp.asarray(_random(rng, (K, N), spread))
            c = jnp.asarray(_random(rng, (M, N), spread)).astype(
                jnp.float32 if acc == "f32" else jnp.float16)
            kw = dict(operand_format=fmt, accumulator=acc, instruction=instruction,
                      tile=tile, promote_every=promote)
            nat = jax.jit(functools.partial(jaxwarp.matmul, mode=NATIVE, **kw))
            ex = jax.jit(functools.partial(jaxwarp.matmul, mode="exact", **kw))
            got, want = np.asarray(nat(a, b, c)), np.asarray(ex(a, b, c))
            out[name] = _compare(got, want)
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            out[name] = {"error": repr(e)[:500]}
        print(_line(name, out[name]), flush=True)
    return out


# --------------------------------------------------------------------------------------
def part_timing() -> dict:
    import functools

    import jax
    import jax.numpy as jnp
    import numpy as np
    from _common import best_time

    import jaxwarp
    from jaxwarp import to_operand

    n = 4096
    flops = 2 * n**3
    out = {"size": [n, n, n], "target": {"native_over_xla": 0.5}}
    rng = np.random.default_rng(0)
    a32 = jnp.asarray(rng.standard_normal((n, n), np.float32))
    b32 = jnp.asarray(rng.standard_normal((n, n), np.float32))
    for fmt, promote in (("f16", None), ("bf16", None), ("e4m3", None), ("e4m3", 128)):
        name = fmt + ("" if promote is None else f" promote_every={promote}")
        r = out[name] = {}
        try:
            a, b = to_operand(a32, fmt), to_operand(b32, fmt)
            kw = dict(operand_format=fmt, promote_every=promote)
            fns = {
                "native": jax.jit(functools.partial(jaxwarp.matmul, mode="native", **kw)),
                "xla": jax.jit(functools.partial(jnp.matmul, preferred_element_type=jnp.float32)),
            }
            if os.environ.get("NATIVE_CHECK_TIMING_EXACT") == "1":  # 2.1 TFLOP/s f16 (run 2)
                fns["exact"] = jax.jit(functools.partial(jaxwarp.matmul, mode="exact", **kw))
            for what, fn in fns.items():
                if what == "xla" and promote is not None:
                    continue
                try:
                    t = best_time(lambda fn=fn, a=a, b=b: jax.block_until_ready(fn(a, b)), 3,
                                  0.3)
                    r[what] = {"seconds": t, "tflops": flops / t / 1e12}
                except Exception as e:  # noqa: BLE001
                    traceback.print_exc()
                    r[what] = {"error": repr(e)[:500]}
            if "tflops" in r.get("native", {}) and "tflops" in r.get("xla", {}):
                r["native_over_xla"] = r["native"]["tflops"] / r["xla"]["tflops"]
                r["meets_target"] = r["native_over_xla"] >= 0.5
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            r["error"] = repr(e)[:500]
        print(name, json.dumps(r), flush=True)
    if "tflops" in out.get("e4m3", {}).get("native", {}) and \
            "tflops" in out.get("f16", {}).get("xla", {}):
        out["e4m3"]["native_over_xla_f16"] = (out["e4m3"]["native"]["tflops"]
                                              / out["f16"]["xla"]["tflops"])
    return out


# --------------------------------------------------------------------------------------
def part_step() -> dict:
    import emulated_training as et
    import jax
    import jax.numpy as jnp
    import numpy as np
    from _common import best_time

    from jaxwarp import emulate

    out = {"target": {"native_over_plain": 0.5}}
    fmt = "bf16"

    def make(settings, tokens, labels, heads):
        init, update = et.adam(1e-3)
        loss = lambda prm, t, y: et.loss_fn(prm, t, y, heads)  # noqa: E731
        if settings is not None:
            loss = emulate(loss, **settings)

        @jax.jit
        def step(params, opt):
            value, grads = jax.value_and_grad(loss)(params, tokens, labels)
            return update(params, grads, opt) + (value,)

        return step, init

    # (1) Speed: emulate_step.py --large (width 512, 8 heads, 4 layers, batch 64 x 128).
    try:
        p, width, layers, heads, seq, batch = 59, 512, 4, 8, 128, 64
        params = et.init_params(jax.random.key(0), p, width, layers, heads)
        rng = np.random.default_rng(0)
        tokens = jnp.asarray(rng.integers(0, p + 1, (batch, seq), dtype=np.int32))
        labels = jnp.asarray(rng.integers(0, p, (batch,), dtype=np.int32))
        params["pos"] = 0.1 * jax.random.normal(jax.random.key(1), (seq, width), jnp.float32)
        times = {}
        for name, settings in (("plain", None), ("native", dict(operand_format=fmt, mode="native")),
                               ("fast", dict(operand_format=fmt, mode="fast"))):
            try:
                step, init = make(settings, tokens, labels, heads)
                opt = init(params)
                times[name] = best_time(lambda step=step, opt=opt: jax.block_until_ready(
                    step(params, opt)), 3, 0.3)
            except Exception as e:  # noqa: BLE001
                traceback.print_exc()
                times[name] = repr(e)[:500]
        out["large"] = {"model": dict(p=p, width=width, layers=layers, heads=heads, seq=seq,
                                      batch=batch), "operand_format": fmt,
                        "seconds_per_step": times}
        for m in ("native", "fast"):
            if isinstance(times.get(m), float) and isinstance(times.get("plain"), float):
                out["large"][f"{m}_over_plain"] = times["plain"] / times[m]
        if "native_over_plain" in out["large"]:
            out["large"]["meets_target"] = out["large"]["native_over_plain"] >= 0.5
        print("step large", json.dumps(out["large"]), flush=True)
    except Exception as e:  # noqa: BLE001
        traceback.print_exc()
        out["large"] = {"error": repr(e)[:500]}

    return out


# --------------------------------------------------------------------------------------
# The study step (experiments/emulated_training.py, the small task) whose gradients are
# compared bit for bit: p=13, width 32, one layer, 4 heads.
STEP_MODEL = dict(p=13, width=32, layers=1, heads=4)
_PROBE: list = []  # (stepbits) a zero added to the final LayerNorm's output, when set


def _study_loss(mode: str, probe: bool = False):
    """The study's loss, emulated in ``mode``; with ``probe`` it takes a second argument
    ``z`` (zeros of the final LayerNorm's output shape) added to that output, so that
    its gradient is the cotangent flowing into ``ln_f`` (``ln_f.b``'s gradient is its
    sum over the batch)."""
    import emulated_training as et

    from jaxwarp import emulate

    tokens, labels = et.dataset(STEP_MODEL["p"])
    heads = STEP_MODEL["heads"]
    if not probe:
        return emulate(lambda prm: et.loss_fn(prm, tokens, labels, heads),
                       operand_format="bf16", mode=mode)
    layer_norm = et.layer_norm

    def probed(x, ln):  # ln_f is the one LayerNorm of a 2-D input (the last position)
        y = layer_norm(x, ln)
        return y + _PROBE[0] if x.ndim == 2 and _PROBE else y

    def loss(prm, z):
        _PROBE[:] = [z]
        et.layer_norm = probed
        try:
            return et.loss_fn(prm, tokens, labels, heads)
        finally:
            et.layer_norm = layer_norm
            _PROBE.clear()

    return emulate(loss, operand_format="bf16", mode=mode)


def _leaf_counts(gx, gy) -> dict:
    import jax
    import numpy as np

    per = {}
    for (path, u), v in zip(jax.tree_util.tree_leaves_with_path(gx), jax.tree.leaves(gy),
                            strict=True):
        eq = int((_bits(u) == _bits(v)).sum())
        per[jax.tree_util.keystr(path)] = f"{eq}/{np.asarray(u).size}"
    return per


def _reductions(ct) -> dict:
    """Sums over axis 0 of the (B, d) float32 array ``ct`` in several orders, as bits:
    which order a program's ``ln_f.b`` gradient is."""
    import numpy as np

    ct = np.asarray(ct, np.float32)
    seq = np.zeros(ct.shape[1], np.float32)
    for row in ct:  # left to right, rounding each addition
        seq = (seq + row).astype(np.float32)
    rev = np.zeros(ct.shape[1], np.float32)
    for row in ct[::-1]:
        rev = (rev + row).astype(np.float32)
    return {"sequential": seq, "reversed": rev, "numpy_pairwise": ct.sum(0, dtype=np.float32),
            "float64_rounded": ct.astype(np.float64).sum(0).astype(np.float32)}


#: The step's programs (each one compile, ~15 s on an H100), per part, in order: each part
#: runs in its own process and adds its results to ``OUT/stepbits_results.npz``, so that
#: one that runs out of time keeps the others'.
STEP_PARTS = {
    "stepbits": ("native", "exact", "exact_again"),
    "stepct": ("native_probe", "exact_probe"),
    "stepextra": ("exact_extra_output",),
}
STEP_VARIANTS = {  # name: (mode, program)
    "native": (NATIVE, "step"), "exact": ("exact", "step"),
    "exact_again": ("exact", "step"),  # the same compiled program, run again
    "exact_extra_output": ("exact", "extra"),  # the step and loss * 2 as a third output
    "native_probe": (NATIVE, "probe"), "exact_probe": ("exact", "probe"),
}
STEP_PAIRS = (("native", "exact"), ("exact_again", "exact"), ("exact_extra_output", "exact"),
              ("exact_probe", "exact"), ("native_probe", "exact_probe"),
              ("native_probe", "native"))
LN_F_B = "['ln_f']['b']"


def _flat(tree) -> dict:
    import jax
    import numpy as np

    return {jax.tree_util.keystr(p): np.asarray(x)
            for p, x in jax.tree_util.tree_leaves_with_path(tree)}


def _step_results(path) -> dict:
    """run -> {"loss": ..., "<leaf path>": grad, ("ct": cotangent)} saved by earlier parts."""
    import numpy as np

    res: dict = {}
    if path.exists():
        with np.load(path) as z:
            for k in z.files:
                run, leaf = k.split("|", 1)
                res.setdefault(run, {})[leaf] = z[k]
    return res


def part_stepbits(part: str = "stepbits") -> dict:
    """The study's step in the programs of ``STEP_PARTS[part]``, compared bit for bit with
    every program run so far (``STEP_PAIRS``): (1) the native step's loss and gradients
    against exact mode's, and exact's against itself; (2) the cotangent flowing into
    ``ln_f`` (a zero probe's gradient) in both modes; (3) exact programs that differ
    trivially (one extra output; the probe) against the exact step, ``ln_f.b`` in
    particular; (4) which summation order of the cotangent each program's ``ln_f.b`` is,
    and the same sum in XLA programs that differ around it (no jaxwarp)."""
    import emulated_training as et
    import jax
    import jax.numpy as jnp
    import numpy as np

    m = STEP_MODEL
    params = et.init_params(jax.random.key(0), m["p"], m["width"], m["layers"], m["heads"])
    B = et.dataset(m["p"])[0].shape[0]
    z = jnp.zeros((B, m["width"]), jnp.float32)
    out = {"xla_flags": os.environ.get("XLA_FLAGS", ""), "model": m}
    store = OUT_DIR[0] / "stepbits_results.npz"
    res = _step_results(store)
    print(f"{part}: earlier results: {sorted(res)}", flush=True)
    done: set = set()

    def compare_all():
        for x, y in STEP_PAIRS:
            if x not in res or y not in res or (x, y) in done or not ({x, y} & new):
                continue
            done.add((x, y))
            rx, ry = res[x], res[y]
            grads = {k: f"{int((_bits(v) == _bits(ry[k])).sum())}/{v.size}"
                     for k, v in rx.items() if k not in ("loss", "ct")}
            r = {"loss_equal": bool(_bits(rx["loss"]) == _bits(ry["loss"])),
                 "ln_f.b": grads[LN_F_B], "grads": grads}
            out[f"{x}_vs_{y}"] = r
            print(f"{part} {x} vs {y}", json.dumps(r), flush=True)

    new: set = set()
    fns = {}
    for run in STEP_PARTS[part]:
        mode, prog = STEP_VARIANTS[run]
        try:
            t = time.perf_counter()
            if (mode, prog) not in fns:
                if prog == "probe":
                    g = jax.value_and_grad(_study_loss(mode, probe=True), argnums=(0, 1))
                    fns[mode, prog] = jax.jit(lambda prm, g=g: g(prm, z))
                else:
                    loss = _study_loss(mode)
                    fns[mode, prog] = jax.jit({
                        "step": jax.value_and_grad(loss),
                        "extra": lambda prm, loss=loss: (
                            lambda vg: (vg[0], vg[1], vg[0] * 2))(jax.value_and_grad(loss)(prm)),
                    }[prog])
            r = jax.block_until_ready(fns[mode, prog](params))
            if prog == "probe":
                lv, (gp, gz) = r
                res[run] = {"loss": np.asarray(lv), **_flat(gp), "ct": np.asarray(gz)}
            else:
                res[run] = {"loss": np.asarray(r[0]), **_flat(r[1])}
            new.add(run)
            print(f"{part}: {run} ran in {time.perf_counter() - t:.1f} s", flush=True)
            np.savez(store, **{f"{k}|{leaf}": v for k, d in res.items() for leaf, v in d.items()})
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            out[run] = {"error": repr(e)[:500]}
            print(f"{part} {run}: ERROR {e!r}"[:400], flush=True)
        compare_all()
    if "ct" in res.get("native_probe", {}) and "ct" in res.get("exact_probe", {}) and \
            ({"native_probe", "exact_probe"} & new):
        ctn, cte = res["native_probe"]["ct"], res["exact_probe"]["ct"]
        out["ct_into_ln_f"] = _compare(ctn, cte)
        print(_line(f"{part} cotangent into ln_f, native vs exact", out["ct_into_ln_f"]),
              flush=True)
        orders = _reductions(cte)
        orders["xla_standalone_jit"] = np.asarray(jax.jit(lambda c: c.sum(0))(cte))
        which = {}
        for run, d in res.items():
            b = _bits(d[LN_F_B])
            which[run] = {k: f"{int((b == _bits(v)).sum())}/{b.size}" for k, v in orders.items()}
        out["ln_f.b_equals_sum_of_ct_in_order"] = which
        print(f"{part} ln_f.b against sums of the exact cotangent in fixed orders",
              json.dumps(which), flush=True)
        try:  # the same sum in XLA programs that differ around it (no jaxwarp at all)
            xhat = jnp.asarray(np.random.default_rng(0).standard_normal(cte.shape, np.float32))
            progs = {
                "sum": lambda c, x: c.sum(0),
                "sum_and_sum_cx": lambda c, x: (c.sum(0), (c * x).sum(0)),  # as ln's b and g
                "sum_of_c_plus_0": lambda c, x: (c + 0 * x).sum(0),
                "sum_of_padded_slice": lambda c, x: jnp.pad(c, ((0, 7), (0, 0)))[:-7].sum(0),
            }
            base = None
            xla = {}
            for k, f in progs.items():
                r = jax.jit(f)(cte, xhat)
                r = np.asarray(r[0] if isinstance(r, tuple) else r)
                base = r if base is None else base
                xla[k] = {o: f"{int((_bits(r) == _bits(v)).sum())}/{r.size}"
                          for o, v in (("xla_sum", base), *orders.items())}
            out["xla_programs_summing_ct"] = xla
            print(f"{part} one cotangent summed over axis 0 by XLA programs that differ "
                  "around the sum", json.dumps(xla), flush=True)
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            out["xla_programs_summing_ct"] = {"error": repr(e)[:500]}
    return out


# --------------------------------------------------------------------------------------
def part_stepprod() -> dict:
    """Every emulated product of the study step (forward and backward) recorded with its
    inputs in both modes (a host callback on ``matmul``'s chain), matched by their
    operands' bits, and the outputs compared: a native product that is not exact
    mode's bit for bit shows here."""
    import hashlib

    import emulated_training as et
    import jax
    import numpy as np

    from jaxwarp import backends

    rec: dict[str, dict] = {NATIVE: {}, "exact": {}}
    current = ["exact"]

    def record(a, b, c, d):
        a, b, c, d = (np.asarray(x) for x in (a, b, c, d))
        h = hashlib.sha1()
        for x in (a, b, c):
            h.update(str((x.shape, x.dtype)).encode())
            h.update(np.ascontiguousarray(x).tobytes())
        rec[current[0]][h.hexdigest()] = (a.shape, b.shape, d.copy())

    m = STEP_MODEL
    params = et.init_params(jax.random.key(0), m["p"], m["width"], m["layers"], m["heads"])
    out = {}
    grads = {}
    with backends.record_products(record):
        for mode in (NATIVE, "exact"):
            try:
                t = time.perf_counter()
                current[0] = mode
                fn = jax.jit(jax.value_and_grad(_study_loss(mode)))
                grads[mode] = jax.block_until_ready(fn(params))
                jax.effects_barrier()
                print(f"stepprod {mode}: {len(rec[mode])} products recorded in "
                      f"{time.perf_counter() - t:.1f} s", flush=True)
            except Exception as e:  # noqa: BLE001
                traceback.print_exc()
                out[mode] = {"error": repr(e)[:500]}
    n, e = rec[NATIVE], rec["exact"]
    both = sorted(set(n) & set(e))
    per = []
    for k in both:
        (sa, sb, dn), (_, _, de) = n[k], e[k]
        per.append({"a": list(sa), "b": list(sb), **_compare(dn, de)})
    out["products"] = {"native": len(n), "exact": len(e), "same_inputs": len(both),
                       "inputs_only_native": len(set(n) - set(e)),
                       "inputs_only_exact": len(set(e) - set(n)),
                       "outputs_bit_equal": sum(p["equal"] == p["total"] for p in per),
                       "elements_equal": sum(p["equal"] for p in per),
                       "elements": sum(p["total"] for p in per)}
    out["per_product"] = per
    print("stepprod", json.dumps(out["products"]), flush=True)
    shapes: dict[str, list[int]] = {}
    for p in per:
        s = shapes.setdefault(f"{p['a']} @ {p['b']}", [0, 0])
        s[0] += p["equal"] == p["total"]
        s[1] += 1
        if p["equal"] != p["total"]:
            print(f"stepprod {p['a']} @ {p['b']}: {p['equal']}/{p['total']} equal", flush=True)
    out["products_by_shape_equal_of_total"] = shapes
    print("stepprod products bit-equal / recorded, per shape", json.dumps(shapes), flush=True)
    if len(grads) == 2:
        out["grads_native_vs_exact"] = _leaf_counts(grads[NATIVE][1], grads["exact"][1])
        print("stepprod grads (instrumented programs) native vs exact",
              json.dumps(out["grads_native_vs_exact"]), flush=True)
    return out


# --------------------------------------------------------------------------------------
MMA_CONFIGS = [  # (a_format, b_format, c/d format, instruction, arch, (batch, M, K, N))
    ("f16", "f16", "f32", "wmma", "sm_90", ((), 16, 64, 16)),
    ("f16", "f16", "f16", "mma_sync", "sm_90", ((3,), 16, 48, 8)),
    ("bf16", "bf16", "f32", "mma_sync", "sm_90", ((2, 2), 16, 16, 8)),
    ("bf16", "bf16", "f32", "wgmma", "sm_90a", ((), 64, 256, 8)),
    ("tf32", "tf32", "f32", "wgmma", "sm_90a", ((2,), 64, 40, 16)),  # low 13 bits set
    ("tf32", "tf32", "f32", "mma_sync", "sm_90", ((), 16, 64, 8)),
    ("e4m3", "e4m3", "f32", "wgmma", "sm_90a", ((), 64, 4096, 8)),
    ("e5m2", "e4m3", "f16", "wgmma", "sm_90a", ((2,), 64, 96, 24)),
]


def part_mma() -> dict:
    """``jaxwarp.mma(mode="native")`` against ``mode="exact"``: one instruction chain on
    logical matrices, batch dims, tf32 operands with their low 13 bits set."""
    import functools

    import jax
    import jax.numpy as jnp
    import numpy as np

    import jaxwarp
    from jaxwarp import isa

    out = {}
    for fa, fb, acc, instruction, arch, (batch, M, K, N) in MMA_CONFIGS:
        name = f"mma {fa}.{fb}.{acc} {instruction} batch={batch} M,K,N={M},{K},{N}"
        try:
            rng = np.random.default_rng(K + M)

            def draw(shape, fmt, rng=rng):
                x = _random(rng, shape, 3)
                if fmt == "tf32":  # fp32 words; the tensor core reads the top 19 bits
                    return jnp.asarray(x)
                return jnp.asarray(x).astype(isa.storage_dtype(fmt))

            a, b = draw(batch + (M, K), fa), draw((K, N), fb)
            c = draw((M, N), "f32").astype(jnp.float32 if acc == "f32" else jnp.float16)
            kw = dict(a_format=fa, b_format=fb, c_format=acc, d_format=acc,
                      instruction=instruction, arch=arch)
            got = jax.jit(functools.partial(jaxwarp.mma, mode=NATIVE, **kw))(a, b, c)
            want = jax.jit(functools.partial(jaxwarp.mma, mode="exact", **kw))(a, b, c)
            out[name] = _compare(got, want)
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            out[name] = {"error": repr(e)[:500]}
        print(_line(name, out[name]), flush=True)
    return out


# --------------------------------------------------------------------------------------
def part_ptx(dump: pathlib.Path) -> dict:
    import re

    import jax
    import jax.numpy as jnp

    import jaxwarp
    out = {}
    for fmt, promote in (("f16", None), ("e4m3", 128)):
        try:
            a = jnp.ones((256, 512), jnp.float32)
            jax.block_until_ready(jaxwarp.matmul(a, a.T[:512, :256], operand_format=fmt,
                                                 mode="native", promote_every=promote))
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            out[fmt] = {"error": repr(e)[:500]}
    for f in sorted(dump.rglob("*")):
        if not f.is_file():
            continue
        text = f.read_text(errors="replace")
        if "wgmma" not in text and "mma.sync" not in text:
            continue
        ops = re.findall(r"(wgmma\.mma_async[\w.]*|mma\.sync[\w.]*|add\.(?:rn\.)?f32|"
                         r"cvt\.rna\.tf32\.f32)", text)
        counts: dict[str, int] = {}
        for o in ops:
            counts[o] = counts.get(o, 0) + 1
        out[f.name] = counts
        print(f.name, counts, flush=True)
    return out


# --------------------------------------------------------------------------------------
TUNE = {  # (bm, bn, bk, warps, stages, B K-major) tried at 4096^3 beside native mode's plan's
    "f16": [(128, 256, 64, 8, 4, False), (128, 128, 64, 4, 4, False),
            (128, 256, 64, 8, 3, True), (256, 128, 64, 8, 3, False)],
    "e4m3": [(128, 256, 128, 8, 3, True), (128, 256, 128, 8, 4, True),
             (128, 128, 128, 4, 4, True), (128, 256, 128, 8, 3, False),
             (256, 128, 128, 8, 3, True)],
}


def part_tune() -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np
    from _common import best_time

    from jaxwarp import backends, to_operand

    n = 4096
    out = {}
    rng = np.random.default_rng(0)
    a32 = jnp.asarray(rng.standard_normal((n, n), np.float32))
    for fmt, configs in TUNE.items():
        a = to_operand(a32, fmt)
        c = jnp.zeros((n, n), jnp.float32)
        for bm, bn, bk, warps, stages, kmajor in configs:
            name = f"{fmt} {bm}x{bn}x{bk} w{warps} s{stages}" + (" B K-major" if kmajor else "")
            try:
                spec = backends.NativeDotSpec(fmt, fmt, "f32", backends.NATIVE_K[fmt], kmajor)
                plan = backends.NativePlan(spec, n, (bm, bn, bk), None, warps, stages)
                fn = jax.jit(lambda a, b, c, plan=plan: backends.native_gemm(a, b, c, plan))
                t = best_time(lambda fn=fn, a=a, c=c: jax.block_until_ready(fn(a, a, c)), 2,
                              0.2)
                out[name] = 2 * n**3 / t / 1e12
                print(f"{name}: {out[name]:.1f} TFLOP/s", flush=True)
            except Exception as e:  # noqa: BLE001
                traceback.print_exc()
                out[name] = repr(e)[:300]
    return out


# --------------------------------------------------------------------------------------
def run_part(part: str, out_dir: pathlib.Path) -> dict:
    import jax

    from jaxwarp import backends

    head = {"part": part, "jax": jax.__version__, "devices": [str(d) for d in jax.devices()],
            "device_error": backends.native_device_error()}
    try:
        import jaxlib

        head["jaxlib"] = jaxlib.__version__
    except ImportError:
        pass
    print(json.dumps(head), flush=True)
    t = time.perf_counter()
    OUT_DIR[0] = out_dir
    fn = {"caps": part_caps, "random": part_random, "timing": part_timing,
          "step": part_step, "stepprod": part_stepprod, "mma": part_mma,
          "tune": part_tune, **{p: functools.partial(part_stepbits, p) for p in STEP_PARTS}
          }.get(part)
    result = fn() if fn else part_ptx(out_dir / "xla_dump")
    result = {**head, "seconds": time.perf_counter() - t, "result": result}
    (out_dir / f"native_{part}.json").write_text(json.dumps(result, indent=1))
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "native_out"))
    ap.add_argument("--parts", default=",".join(PARTS))
    ap.add_argument("--part", default=None, help="(internal) run one part in this process")
    args = ap.parse_args()
    out_dir = pathlib.Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    if args.part:
        run_part(args.part, out_dir)
        return
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    for part in args.parts.split(","):
        penv = dict(env)
        if part == "ptx":
            penv["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") +
                                 f" --xla_dump_to={out_dir / 'xla_dump'}").strip()
        if part in ("stepprod", *STEP_PARTS):
            penv["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") +
                                 " --xla_gpu_deterministic_ops=true").strip()
        t = time.perf_counter()
        print(f"===== part {part} (limit {PARTS[part]} s)", flush=True)
        try:
            p = subprocess.run([sys.executable, __file__, "--part", part, "--out", str(out_dir)],
                               env=penv, timeout=PARTS[part], capture_output=True, text=True)
            sys.stdout.write(p.stdout)
            sys.stdout.write(p.stderr[-6000:])
            print(f"===== part {part}: exit {p.returncode}, {time.perf_counter() - t:.0f} s",
                  flush=True)
        except subprocess.TimeoutExpired as e:
            sys.stdout.write((e.stdout or b"").decode(errors="replace")
                             if isinstance(e.stdout, bytes) else (e.stdout or ""))
            sys.stdout.write(((e.stderr or b"").decode(errors="replace")
                              if isinstance(e.stderr, bytes) else (e.stderr or ""))[-6000:])
            print(f"===== part {part}: TIMEOUT after {PARTS[part]} s", flush=True)
    if (out_dir / "xla_dump").exists():  # keep the kernels' PTX only
        for f in (out_dir / "xla_dump").rglob("*"):
            if f.is_file() and not ("wgmma" in f.read_text(errors="replace")
                                    and f.stat().st_size < 4_000_000):
                f.unlink()


if __name__ == "__main__":
    main()
