"""``mode="native"`` on an H100: its bits against exact mode and the captures, and its speed.

Parts (each runs in its own process with its own time limit, so that a crash or a hang in
one does not hide the others; each variant inside a part is in its own try/except that
prints the traceback):

* ``caps``: every chain and single-instruction capture of ``tests/data`` whose datapath
  the native kernel issues (``h100_chain_sample.npz``, ``h100_wgmma.npz``,
  ``h100_ptx_float.npz``): native D against the hardware's D and against exact mode;
  the others are listed with the reason (``native.check_chain``'s message);
* ``random``: random GEMMs, ``matmul(mode="native")`` against ``matmul(mode="exact")``,
  many shapes (M, N small to 4096, K not a multiple of the kernel's block), f16 / bf16 /
  tf32 / e4m3 / e5m2 (and e5m2 x e4m3), f32 and f16 accumulators, fp8 with and without
  promotion, WMMA / mma.sync / wgmma tiles; counts equal / total per configuration;
* ``timing``: 4096^3 for f16, bf16, e4m3: native, ``jnp.matmul`` (XLA) and exact, TFLOP/s
  and native / XLA (target: >= 0.5);
* ``step``: the emulate training step (``benchmarks/emulate_step.py``'s model, ``--large``
  size) plain vs ``mode="native"`` (and ``"fast"``) (target: native >= 0.5 of plain);
* ``stepbits``: on the small task the native step's loss and gradients against exact
  mode's, bit for bit, per parameter, with XLA's deterministic ops (the embeddings'
  gradients are scatter-adds, atomic and unordered on a GPU without them), and exact
  mode's against itself run twice;
* ``ptx``: the kernels of two native matmuls in XLA's dump: wgmma instructions, fp32 adds;
* ``tune``: other kernel blocks (bm, bn, bk, warps, stages) at 4096^3, TFLOP/s.

Writes ``OUT/native_<part>.json`` and prints each part's output.

Usage: python benchmarks/native_check.py [--out DIR] [--parts caps,random,timing,step,ptx,tune]
"""

from __future__ import annotations

import argparse
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

PARTS = {"caps": 65, "random": 80, "timing": 45, "step": 55, "stepbits": 50, "ptx": 20,
         "tune": 45}


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
def part_caps() -> dict:
    import numpy as np

    from jaxwarp._src.conformance.keys import parse_mma_name
    from jaxwarp._src.tensorcore import isa, native
    from jaxwarp._src.tensorcore.matmul_chain import Cfg, tiled

    out = {}
    files = ("h100_chain_sample", "h100_wgmma", "h100_ptx_float")
    for f in files:
        z = np.load(ROOT / "tests" / "data" / f"{f}.npz")
        groups = sorted({k.rsplit("/", 1)[0] for k in z.files if "/" in k})
        for g in groups:
            parts = g.split("/")
            chain = parts[0] == "chain"
            op, name = (parts[1], parts[2]) if chain else (parts[0], parts[1])
            key = f"{f}:{g}"
            try:
                n = parse_mma_name(op, name, chain=chain)
            except Exception as e:  # noqa: BLE001
                out[key] = {"skipped": f"name: {e}"}
                continue
            if n.a_format not in native.NATIVE_K or n.c_format != n.d_format:
                continue
            if n.neg_a or n.neg_b or n.scale_d0 or n.satf:
                out[key] = {"skipped": "negated / scale-d / satfinite form: not matmul's"}
                continue
            A, B, C, D = (z[f"{g}/{x}"] for x in "ABCD")
            tile = (n.m, n.n, n.k)
            cfg = Cfg(n.a_format, n.b_format, n.c_format, tile, n.instruction, "sm_90",
                      "native", None, False)
            try:
                native.check_chain(cfg)
            except ValueError as e:
                out[key] = {"not_native": str(e)}
                continue
            try:
                adt, bdt = isa.storage_dtype(n.a_format), isa.storage_dtype(n.b_format)
                cdt = isa.storage_dtype(n.c_format)
                if n.a_format == "tf32":  # the tensor core reads the top 19 bits
                    A, B = A & np.uint32(0xFFFFE000), B & np.uint32(0xFFFFE000)
                got, ex = [], []
                ecfg = Cfg(n.a_format, n.b_format, n.c_format, tile, n.instruction,
                           "sm_90", "exact", None, False)
                for i in range(A.shape[0]):
                    a, b = A[i].view(adt), B[i].view(bdt)
                    c = C[i].view(cdt)
                    got.append(np.asarray(native.chain(a, b, c, cfg)))
                    ex.append(np.asarray(tiled(a, b, c, ecfg)))
                got, ex = np.stack(got), np.stack(ex)
                out[key] = {"vs_hardware": _compare(got, D.view(cdt)),
                            "vs_exact": _compare(got, ex),
                            "exact_vs_hardware": _compare(ex, D.view(cdt))["equal"]}
                print(_line(key + " native vs hardware", out[key]["vs_hardware"]))
                print(_line(key + " native vs exact", out[key]["vs_exact"]))
            except Exception as e:  # noqa: BLE001
                traceback.print_exc()
                out[key] = {"error": repr(e)[:500]}
                print(f"{key}: ERROR {e!r}"[:400])
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
    ("f16", "f32", None, None, None, (64, 64, 64), 4),
    ("f16", "f32", "wgmma", None, None, (16, 48, 8), 8),
    ("f16", "f32", "wgmma", None, None, (100, 4144, 72), 4),
    ("f16", "f32", "mma_sync", (16, 8, 16), None, (256, 1008, 200), 4),
    ("f16", "f16", "wgmma", None, None, (128, 528, 136), 2),
    ("f16", "f32", "wgmma", None, 64, (192, 1040, 96), 4),
    ("f16", "f32", None, None, None, (4096, 4096, 4096), 4),
    ("bf16", "f32", None, None, None, (64, 96, 64), 8),
    ("bf16", "f32", "wgmma", None, None, (300, 2064, 260), 8),
    ("bf16", "f32", "wgmma", None, 128, (64, 4096, 64), 8),
    ("tf32", "f32", "wgmma", None, None, (64, 64, 64), 8),
    ("tf32", "f32", "mma_sync", (16, 8, 8), None, (144, 1040, 72), 8),
    ("tf32", "f32", "wgmma", None, 32, (64, 528, 64), 4),
    ("tf32", "f32", "wgmma", None, None, (64, 8, 64), 8),
    ("tf32", "f32", "mma_sync", (16, 8, 8), 24, (64, 520, 64), 4),
    ("e4m3", "f32", None, None, None, (64, 64, 64), 2),
    ("e4m3", "f32", None, None, None, (16, 96, 8), 2),
    ("e4m3", "f32", None, None, None, (200, 4128, 136), 2),
    ("e4m3", "f32", None, None, 128, (200, 4128, 136), 2),
    ("e4m3", "f32", None, None, 64, (64, 544, 64), 2),
    ("e4m3", "f16", None, None, None, (128, 1056, 64), 1),
    ("e5m2", "f32", None, None, None, (96, 2080, 40), 4),
    ("e5m2", "f32", None, None, 128, (96, 2080, 40), 4),
    ("e5m2", "f16", None, None, None, (64, 512, 64), 1),
    (("e5m2", "e4m3"), "f32", None, None, None, (128, 1024, 128), 2),
    (("e5m2", "e4m3"), "f32", None, None, 128, (128, 1024, 128), 2),
    ("e4m3", "f32", None, None, None, (4096, 4096, 4096), 2),
    ("e4m3", "f32", None, None, 128, (4096, 4096, 4096), 2),
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
        if time.perf_counter() - t0 > PARTS["random"] - 25:
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
            nat = jax.jit(functools.partial(jaxwarp.matmul, mode="native", **kw))
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
    from jaxwarp._src.tensorcore.matmul import to_operand

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
                "exact": jax.jit(functools.partial(jaxwarp.matmul, mode="exact", **kw)),
            }
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
def part_stepbits() -> dict:
    import emulated_training as et
    import jax
    import numpy as np

    from jaxwarp import emulate

    p, width, layers, heads = 13, 32, 1, 4
    params = et.init_params(jax.random.key(0), p, width, layers, heads)
    tokens, labels = et.dataset(p)
    out = {"xla_flags": os.environ.get("XLA_FLAGS", "")}
    res, fns = {}, {}
    for run, mode in (("native", "native"), ("exact", "exact"), ("exact_again", "exact")):
        try:  # exact_again: the same compiled step run a second time
            if mode not in fns:
                loss = emulate(lambda prm: et.loss_fn(prm, tokens, labels, heads),
                               operand_format="bf16", mode=mode)
                fns[mode] = jax.jit(jax.value_and_grad(loss))
            res[run] = jax.block_until_ready(fns[mode](params))
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            out[run] = {"error": repr(e)[:500]}
    for x, y in (("native", "exact"), ("exact_again", "exact")):
        if x not in res or y not in res:
            continue
        (lx, gx), (ly, gy) = res[x], res[y]
        per = {}
        for (path, u), v in zip(jax.tree_util.tree_leaves_with_path(gx), jax.tree.leaves(gy),
                                strict=True):
            eq = int((_bits(u) == _bits(v)).sum())
            per[jax.tree_util.keystr(path)] = f"{eq}/{np.asarray(u).size}"
        out[f"{x}_vs_{y}"] = {"loss_equal": bool(_bits(lx) == _bits(ly)), "grads": per}
        print(f"stepbits {x} vs {y}", json.dumps(out[f"{x}_vs_{y}"]), flush=True)
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
TUNE = {  # (bm, bn, bk, warps, stages, B K-major) tried at 4096^3 beside native.plan's
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

    from jaxwarp._src.tensorcore import native, native_kernels
    from jaxwarp._src.tensorcore.matmul import to_operand

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
                spec = native_kernels.DotSpec(fmt, fmt, "f32", native.NATIVE_K[fmt], kmajor)
                plan = native_kernels.Plan(spec, n, (bm, bn, bk), None, warps, stages)
                fn = jax.jit(lambda a, b, c, plan=plan: native_kernels.gemm(a, b, c, plan))
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

    from jaxwarp._src.tensorcore import native

    head = {"part": part, "jax": jax.__version__, "devices": [str(d) for d in jax.devices()],
            "device_error": native.device_error()}
    try:
        import jaxlib

        head["jaxlib"] = jaxlib.__version__
    except ImportError:
        pass
    print(json.dumps(head), flush=True)
    t = time.perf_counter()
    fn = {"caps": part_caps, "random": part_random, "timing": part_timing,
          "step": part_step, "stepbits": part_stepbits, "tune": part_tune}.get(part)
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
        if part == "stepbits":
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
