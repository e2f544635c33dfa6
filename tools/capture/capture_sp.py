"""Records what the sparse tensor-core instructions return on the local GPU: PTX
`mma.sp::ordered_metadata.sync.aligned` and the legacy `mma.sp.sync.aligned` for every shape,
type, sparsity selector and `.satfinite` that ptxas accepts for sm_90a, with metadata the ISA
calls undefined, plus GEMM-style chains.

    python tools/capture/capture_sp.py --out DIR [--quick] [--seed N] [--scale X]
                                       [--arch 90a] [--only sp,chain,wgsp] [--time-limit S]
    python tools/capture/capture_sp.py --selftest        # no GPU, no nvcc: layouts, metadata
    python tools/capture/capture_sp.py --probe-ptxas     # which configurations ptxas accepts

Writes DIR/sp_mma*.npz, DIR/sp_chain*.npz and (capture_wgsp.py) DIR/wgsp*.npz; schema in
FORMAT_SP.md. The logical -> register mapping (PTX ISA 9.7.14.6: sparse matrix fragments and
metadata) is numpy here; sp.cu only moves register words. Every configuration runs in a worker
process with a time limit, so one that hangs or faults is logged and skipped. Needs nvcc and
numpy.
"""

from __future__ import annotations

import argparse
import ctypes
import dataclasses
import pathlib
import sys
import time

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
SRC = HERE / "sp.cu"
sys.path.insert(0, str(HERE))
import capture_ptx as cp  # noqa: E402  (formats, dense fragment layouts, input generators)
import driver  # noqa: E402  (nvcc, ptxas probes, the library's device, worker processes)
from driver import Runner, log  # noqa: E402
from sp_common import (  # noqa: E402  (configuration, metadata, inputs: shared with capture_wgsp)
    INT4,
    SpCfg,
    gen_kind,
    kinds_of,
    meta_slots,
    meta_words,
    nibbles_of_words,
    sanity,
)

# ----------------------------------------------------------------------------------------
# The configuration table (SpCfg is in sp_common.py).


def candidate_configs() -> list[SpCfg]:
    """Every combination tried with ptxas, ordered_metadata and legacy, every selector."""
    base = []
    for cd in (("f16", "f16"), ("f32", "f32")):
        for k in (16, 32):
            base.append(("f16", "f16", *cd, k, False))
    for k in (16, 32):
        base.append(("bf16", "bf16", "f32", "f32", k, False))
    for k in (8, 16):
        base.append(("tf32", "tf32", "f32", "f32", k, False))
    for a in ("e4m3", "e5m2"):
        for b in ("e4m3", "e5m2"):
            for cd in (("f32", "f32"), ("f16", "f16")):
                base.append((a, b, *cd, 64, False))
    for fam, ks in ((("s8", "u8"), (32, 64)), (INT4, (64, 128))):
        for a in fam:
            for b in fam:
                for k in ks:
                    for sat in (False, True):
                        base.append((a, b, "s32", "s32", k, sat))
    out = []
    for ordered in (True, False):
        for a, b, c, d, k, sat in base:
            proto = SpCfg(a, b, c, d, k, sat, ordered, 0)
            for sel in range(proto.nsel):
                out.append(dataclasses.replace(proto, sel=sel))
    return out


# Filled in from `--probe-ptxas` with nvcc 13.0 for sm_90a (FORMAT_SP.md): 152 accepted.
F8_F16 = "Instruction 'mma with with F16 accumulator and F8 floating point type' not supported on .target 'sm_90a'"
REJECTED: dict[str, str] = {
    "e4m3.e4m3.f16f16.m16n8k64.ordered": F8_F16,
    "e4m3.e5m2.f16f16.m16n8k64.ordered": F8_F16,
    "e5m2.e4m3.f16f16.m16n8k64.ordered": F8_F16,
    "e5m2.e5m2.f16f16.m16n8k64.ordered": F8_F16,
    "e4m3.e4m3.f16f16.m16n8k64": F8_F16,
    "e4m3.e5m2.f16f16.m16n8k64": F8_F16,
    "e5m2.e4m3.f16f16.m16n8k64": F8_F16,
    "e5m2.e5m2.f16f16.m16n8k64": F8_F16,
}


# ----------------------------------------------------------------------------------------
# Inputs (the generators are in sp_common.py).


def trials_per_kind(cfg: SpCfg, scale: float, quick: bool) -> int:
    base = 4 if quick else 24 if cfg.is_int else 16
    return max(1, int(round(base * scale)))


def make_trials(rng, cfg: SpCfg, per_kind: int):
    parts = [gen_kind(rng, cfg, kind, per_kind) for kind in kinds_of(cfg)]
    A, E, nib, B, C = (np.concatenate([p[i] for p in parts]) for i in range(5))
    kinds = np.repeat(np.array(kinds_of(cfg)), per_kind)
    return A, E, nib, B, C, kinds


# ----------------------------------------------------------------------------------------
# Code generation and build.


def gen_op(i: int, cfg: SpCfg) -> str:
    na, nb, nc, nd = (cfg.nregs(u) for u in "abcd")
    cd = "f" if cfg.dtype == "f32" else "r"
    cc = "f" if cfg.ctype == "f32" else "r"
    idx = iter(range(200))
    grp = lambda n: "{" + ", ".join(f"%{next(idx)}" for _ in range(n)) + "}"
    text = f"{cfg.ptx()} {grp(nd)}, {grp(na)}, {grp(nb)}, {grp(nc)}, %{next(idx)}, {cfg.sel or 0};"
    inp = lambda arr, c, n: [f'"f"(__uint_as_float({arr}[{j}]))' if c == "f" else f'"r"({arr}[{j}])' for j in range(n)]
    tmp = {"f": "float", "r": "uint32_t"}[cd]
    outs = ", ".join(f'"={cd}"(o{j})' for j in range(nd))
    ins = ", ".join(inp("a", "r", na) + inp("b", "r", nb) + inp("c", cc, nc) + ['"r"(e)'])
    conv = {"f": "__float_as_uint(o{j})", "r": "o{j}"}[cd]
    stores = " ".join(f"d[{j}] = {conv.format(j=j)};" for j in range(nd))
    decl = ", ".join(f"o{j}" for j in range(nd))
    return (
        f"struct Op{i} {{ // {cfg.name}\n  using R = uint32_t;\n"
        f"  static constexpr int NA = {na}, NB = {nb}, NC = {nc}, ND = {nd};\n"
        f"  static __device__ __forceinline__ void run(const R* a, const R* b, const R* c, R* d, R e) {{\n"
        f"    {tmp} {decl};\n"
        f'    asm volatile("{text}" : {outs} : {ins});\n'
        f"    {stores}\n  }}\n}};\n"
    )


def gen_inc(cfgs) -> str:
    body = "".join(gen_op(i, c) for i, c in enumerate(cfgs))
    table = " \\\n".join(f'  X("{c.name}", Op{i})' for i, c in enumerate(cfgs))
    return f"// generated by capture_sp.py: do not edit\n{body}\n#define SPMMA_TABLE(X) \\\n{table}\n"


def _compile(cfgs, arch, out: pathlib.Path, nvcc="nvcc", cubin=False):
    return driver.nvcc_table(SRC, "sp_ops.inc", gen_inc(cfgs), out, [f"-arch={arch}"], nvcc,
                             cubin)


def probe_ptxas(cfgs, arch, nvcc="nvcc", jobs=8):
    """{name: error message} for the configurations that do not compile alone."""
    return driver.probe_ptxas(cfgs, lambda c, out: _compile([c], arch, out, nvcc, cubin=True),
                              "sp_", jobs)


def build(arch: str, nvcc="nvcc"):
    """Builds libsp for `arch`; returns (path, configs in the library, rejected)."""
    cfgs = [c for c in candidate_configs() if c.name not in REJECTED]
    driver.BUILD.mkdir(exist_ok=True)
    lib = driver.BUILD / f"libsp_{arch}_{driver.source_key(SRC.read_bytes(), gen_inc(cfgs), arch)}.so"
    cfgs, bad = driver.build_table(f"sp.cu for {arch}", lib, cfgs,
                                   lambda cs, out, cubin: _compile(cs, arch, out, nvcc, cubin),
                                   nvcc, "sp_")
    return lib, cfgs, {**REJECTED, **bad}


class SpLib:
    def __init__(self, path, cfgs):
        L, device = driver.load(path, "sp")
        self.L = L
        self.check = driver.checker(L, "sp")
        L.sp_info.restype = ctypes.c_char_p
        self.device = str(device)
        self.index, self.nd = {}, {}
        info = (ctypes.c_int * 5)()
        by_name = {c.name: c for c in cfgs}
        for i in range(L.sp_count()):
            nm = L.sp_info(i, info).decode()
            c = by_name[nm]
            want = [c.nregs(u) for u in "abcd"] + [4]
            if list(info) != want:
                raise RuntimeError(f"{nm}: library says {list(info)}, table says {want}")
            self.index[nm], self.nd[nm] = i, info[3]

    def run(self, name, A, B, E, C, steps=1):
        """A (W, steps, 32, NA), B (W, steps, 32, NB), E (W, steps, 32), C (W, 32, NC) words
        -> D (W, 32, ND)."""
        A, B, E, C = (np.ascontiguousarray(v, np.uint32) for v in (A, B, E, C))
        W = C.shape[0]
        D = np.zeros((W, 32, self.nd[name]), np.uint32)
        p = lambda a: a.ctypes.data_as(ctypes.c_void_p)
        self.check(self.L.sp_run(self.index[name], ctypes.c_longlong(W), steps, p(A), p(B), p(E),
                                 p(C), p(D)))
        return D


class DryRunner:
    """--dry-run: no GPU; D words are zeros (checks the host side and its time)."""

    device = "dry run (no GPU)"

    def __init__(self, cfgs):
        self.nd = {c.name: c.nregs("d") for c in cfgs}

    def run(self, name, A, B, E, C, steps=1):
        return np.zeros((C.shape[0], 32, self.nd[name]), np.uint32)

    def close(self):
        pass


# ----------------------------------------------------------------------------------------
# Captures.


def pack_sp(cfg: SpCfg, A, E_unused, nib, B, C, rng, steps=1):
    """Logical trials -> register words (A, B, E per step; C)."""
    kh = cfg.k // 2
    Aw = np.stack([cp.pack(np.ascontiguousarray(A[:, :, s * kh:(s + 1) * kh]), cfg.dense("a"), "a")
                   for s in range(steps)], 1)
    Bw = np.stack([cp.pack(np.ascontiguousarray(B[:, s * cfg.k:(s + 1) * cfg.k, :]), cfg.dense("b"), "b")
                   for s in range(steps)], 1)
    ch = cfg.chunks
    meta = np.stack([meta_words(cfg, nib[:, :, s * ch:(s + 1) * ch], rng) for s in range(steps)], 1)
    return Aw, Bw, meta, cp.pack(C, cfg.dense("c"), "c")




def capture_sp(runner, cfgs, rng, scale, quick, deadline):
    out = {"device": np.array(runner.device or "")}
    for cfg in cfgs:
        if time.time() > deadline:
            log(f"  SKIPPED {cfg.name}: time limit of the run reached")
            continue
        t = time.time()
        try:
            per = trials_per_kind(cfg, scale, quick)
            A, E, nib, B, C, kinds = make_trials(rng, cfg, per)
            Aw, Bw, meta, Cw = pack_sp(cfg, A, E, nib, B, C, rng)
            Dw = runner.run(cfg.name, Aw, Bw, meta, Cw)
            D = cp.unpack(Dw, cfg.dense("d"), "d")
        except Exception as e:  # noqa: BLE001  (one configuration never stops the run)
            log(f"  FAILED {cfg.name}: {type(e).__name__}: {e}")
            continue
        out["device"] = np.array(runner.device)
        key = f"sp/{cfg.name}"
        for part, v in (("A", A), ("E", E), ("meta", meta[:, 0]), ("B", B), ("C", C), ("D", D), ("kind", kinds)):
            out[f"{key}/{part}"] = v
        log(f"  {key}: {len(kinds)} trials ({time.time() - t:.1f} s); {sanity(cfg, A, E, B, C, D, kinds)}")
    return out


CHAINS = [  # (configuration name, steps)
    ("f16.f16.f32f32.m16n8k32.ordered.sel0", 64),
    ("bf16.bf16.f32f32.m16n8k32.ordered.sel0", 64),
    ("f16.f16.f16f16.m16n8k32.ordered.sel0", 16),
    ("tf32.tf32.f32f32.m16n8k16.ordered.sel0", 64),
    ("e4m3.e4m3.f32f32.m16n8k64.ordered", 32),
    ("e5m2.e5m2.f32f32.m16n8k64.ordered", 32),
    ("e4m3.e5m2.f32f32.m16n8k64.ordered", 32),
    ("s8.s8.s32s32.m16n8k64.ordered", 32),
    ("f16.f16.f32f32.m16n8k32.sel1", 16),
]
CHAIN_KINDS = ("normal", "positive", "wide")


def capture_chain(runner, cfgs, rng, scale, quick, deadline):
    out = {"device": np.array(runner.device or "")}
    by = {c.name: c for c in cfgs}
    for name, steps in CHAINS:
        if name not in by:
            log(f"  chain {name}: configuration not built")
            continue
        if time.time() > deadline:
            log(f"  SKIPPED chain {name}: time limit of the run reached")
            continue
        cfg = by[name]
        t = time.time()
        per = max(1, int(round((2 if quick else 8) * scale)))
        try:
            kinds = ("int", "int_extreme") if cfg.is_int else CHAIN_KINDS
            parts = [gen_kind(rng, cfg, kd, per, k_total=cfg.k * steps) for kd in kinds]
            A, E, nib, B, C = (np.concatenate([p[i] for p in parts]) for i in range(5))
            kind = np.repeat(np.array(kinds), per)
            Aw, Bw, meta, Cw = pack_sp(cfg, A, E, nib, B, C, rng, steps)
            D = cp.unpack(runner.run(name, Aw, Bw, meta, Cw, steps), cfg.dense("d"), "d")
        except Exception as e:  # noqa: BLE001
            log(f"  FAILED chain {name}: {type(e).__name__}: {e}")
            continue
        out["device"] = np.array(runner.device)
        key = f"chain/sp/{name}x{steps}"
        for part, v in (("A", A), ("E", E), ("meta", meta), ("B", B), ("C", C), ("D", D), ("kind", kind)):
            out[f"{key}/{part}"] = v
        log(f"  {key}: {len(kind)} trials ({time.time() - t:.1f} s)")
    return out


# ----------------------------------------------------------------------------------------


def selftest(seed=0) -> int:
    rng = np.random.default_rng(seed)
    bad = 0
    names = set()
    for cfg in candidate_configs():
        if cfg.name in names:
            log(f"duplicate name {cfg.name}")
            bad += 1
        names.add(cfg.name)
        lane, shift = meta_slots(cfg)
        slots = set(zip(lane.ravel().tolist(), shift.ravel().tolist(), strict=True))
        if len(slots) != lane.size or lane.max() > 31:
            log(f"{cfg.name}: metadata slots overlap or leave the warp")
            bad += 1
        A, E, nib, B, C, kinds = make_trials(rng, cfg, 2)
        Aw, Bw, meta, Cw = pack_sp(cfg, A, E, nib, B, C, rng)
        if not np.array_equal(nibbles_of_words(cfg, meta[:, 0]), nib):
            log(f"{cfg.name}: metadata round trip differs")
            bad += 1
        ok = ~np.isin(kinds, ["undefined_meta", "unordered_meta"])
        Ed = E[ok].astype(int)
        per = Ed.shape[2] // cfg.chunks
        if per > 1 and not (np.diff(Ed.reshape(*Ed.shape[:2], cfg.chunks, per), axis=-1) > 0).all():
            log(f"{cfg.name}: valid indices are not increasing")
            bad += 1
        for use, X in (("a", A), ("b", B), ("c", C)):
            if not np.array_equal(cp.unpack(cp.pack(X, cfg.dense(use), use), cfg.dense(use), use), X):
                log(f"{cfg.name} {use}: pack/unpack round trip differs")
                bad += 1
        assert gen_op(0, cfg)
    log(f"selftest: {len(names)} configurations, {bad} problems")
    return 1 if bad else 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    driver.add_common_args(ap, arch="90a", arch_help="nvcc -arch (default 90a -> sm_90a)")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", default="sp,chain,wgsp")
    ap.add_argument("--time-limit", type=float, default=300.0, help="seconds for the whole run")
    ap.add_argument("--config-limit", type=float, default=60.0, help="seconds per configuration")
    ap.add_argument("--selftest", action="store_true")
    ap.add_argument("--probe-ptxas", action="store_true")
    ap.add_argument("--dry-run", action="store_true", help="no GPU, no nvcc: D = 0 (host side only)")
    args = ap.parse_args(argv)
    if args.selftest:
        return selftest(args.seed)
    arch = driver.gpu_arch(args.arch)
    if args.probe_ptxas:
        return driver.print_probe(candidate_configs(),
                                  probe_ptxas(candidate_configs(), arch, args.nvcc))
    if not args.out:
        ap.error("give --out DIR (or --selftest / --probe-ptxas)")
    only = set(args.only.split(","))
    unknown = only - {"sp", "chain", "wgsp"}
    if unknown:
        ap.error(f"--only: unknown {sorted(unknown)}; allowed: sp, chain, wgsp")
    t0 = time.time()
    deadline = t0 + args.time_limit
    rng = np.random.default_rng(args.seed)
    if only & {"sp", "chain"}:
        if args.dry_run:
            cfgs = [c for c in candidate_configs() if c.name not in REJECTED]
            runner = DryRunner(cfgs)
        else:
            path, cfgs, rejected = build(arch, args.nvcc)
            for n, e in rejected.items():
                log(f"  not built (ptxas rejects): {n}: {e}")
            runner = Runner(SpLib, (path, cfgs), args.config_limit)
        log(f"{len(cfgs)} mma.sp configurations")
        if "sp" in only:
            cp.save_split(args.out, "sp_mma", capture_sp(runner, cfgs, rng, args.scale, args.quick, deadline))
        if "chain" in only:
            cp.save_split(args.out, "sp_chain", capture_chain(runner, cfgs, rng, args.scale, args.quick, deadline))
        runner.close()
    if "wgsp" in only:
        try:
            import capture_wgsp

            capture_wgsp.main_capture(args.out, args.seed, args.scale, args.quick, arch, args.nvcc,
                                      deadline, args.config_limit, dry_run=args.dry_run)
        except Exception as e:  # noqa: BLE001
            log(f"FAILED wgsp: {type(e).__name__}: {e}")
    log(f"done in {time.time() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
