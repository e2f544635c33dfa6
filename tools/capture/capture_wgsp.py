"""Records what Hopper's sparse `wgmma.mma_async.sp.sync.aligned` returns (sm_90a, CUDA 13).

Run through capture_sp.py (`--only wgsp`), or alone:

    python tools/capture/capture_wgsp.py --out DIR [--quick] [--seed N] [--scale X]
    python tools/capture/capture_wgsp.py --selftest       # no GPU: images, metadata round trip
    python tools/capture/capture_wgsp.py --probe-ptxas    # which configurations ptxas accepts

Writes DIR/wgsp*.npz (schema: FORMAT_SP.md). The kernel is wgmma.cu's (one metadata word per
thread); its instruction table is generated here. One CTA of one warpgroup (128 threads) per trial.
The compressed A (64 x K/2) comes from shared memory through a matrix descriptor (K-major, no
swizzle, as capture_wgmma.py lays out dense A of K/2) or, for the `.areg` configurations, from
registers (the dense wgmma A fragment of K/2); dense B (K x N) from shared memory, K-major, no
swizzle, core matrices 128 bytes apart along K (LBO) and 8-row groups K*bytes*8 apart (SBO).
The metadata register of every thread follows the mma.sp layout of m16n8kK per warp: warp w
holds rows 16w..16w+15 (PTX ISA 9.7.15.6 "sparse wgmma": metadata). Needs nvcc and numpy.
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
sys.path.insert(0, str(HERE))
import capture_ptx as cp  # noqa: E402
import capture_wgmma as cw  # noqa: E402
import driver  # noqa: E402  (nvcc, ptxas probes, the library's device, worker processes)
import sp_common as spc  # noqa: E402  (the sparse configuration, metadata and inputs)
from driver import log  # noqa: E402

M = 64
KSP = {"f16": 32, "bf16": 32, "tf32": 16, "e4m3": 64, "e5m2": 64, "s8": 64, "u8": 64}


@dataclasses.dataclass(frozen=True)
class WgCfg:
    atype: str
    btype: str
    ctype: str
    n: int
    satfinite: bool = False
    areg: bool = False
    sel: int = 0

    @property
    def k(self):
        return KSP[self.atype]

    @property
    def sp(self) -> spc.SpCfg:
        """The per-warp mma.sp configuration whose metadata layout a warp uses."""
        return spc.SpCfg(self.atype, self.btype, self.ctype, self.ctype, self.k, self.satfinite, True, self.sel)

    @property
    def name(self):
        s = f"{self.atype}.{self.btype}.{self.ctype}{self.ctype}.m64n{self.n}k{self.k}"
        s += ".satfinite" * self.satfinite + ".areg" * self.areg
        return s + (f".sel{self.sel}" if self.sp.nsel > 1 else "")

    @property
    def is_int(self):
        return self.ctype == "s32"

    @property
    def nr(self):
        return self.n // 4 if self.ctype == "f16" else self.n // 2

    def ptx(self) -> str:
        sat = ".satfinite" if self.satfinite else ""
        return f"wgmma.mma_async.sp.sync.aligned.m64n{self.n}k{self.k}{sat}.{self.ctype}.{self.atype}.{self.btype}"

    def imm(self):
        if self.atype in ("f16", "bf16"):
            return [1, 1, 0] if self.areg else [1, 1, 0, 0]
        if self.atype in ("tf32", "e4m3", "e5m2"):
            return [1, 1]
        return []


def candidate_configs():
    out = []
    for n in (8, 64, 256):
        for at, ct in (("f16", "f32"), ("f16", "f16"), ("bf16", "f32"), ("tf32", "f32")):
            for sel in range(spc.SpCfg(at, at, ct, ct, KSP[at]).nsel):
                out.append(WgCfg(at, at, ct, n, sel=sel))
        for a in ("e4m3", "e5m2"):
            for b in ("e4m3", "e5m2"):
                for ct in ("f32", "f16"):
                    out.append(WgCfg(a, b, ct, n))
        for a in ("s8", "u8"):
            for b in ("s8", "u8"):
                for sat in (False, True):
                    out.append(WgCfg(a, b, "s32", n, sat))
    for at, ct in (("f16", "f32"), ("bf16", "f32"), ("tf32", "f32"), ("e4m3", "f32"), ("s8", "s32")):
        out.append(WgCfg(at, at, ct, 64, areg=True))
    return out


REJECTED: dict[str, str] = {}


def gen_inc(cfgs):
    """wgmma_ops.inc (wgmma.cu's table) of the sparse configurations ``cfgs``."""
    structs = [cw.op_struct(i, c.name, c.ptx(), c.ctype, c.n, c.areg, c.imm(), sel=c.sel)
               for i, c in enumerate(cfgs)]
    return cw.ops_inc("capture_wgsp.py", [c.name for c in cfgs], structs)


def probe_ptxas(cfgs, nvcc="nvcc", jobs=8):
    return driver.probe_ptxas(cfgs, lambda c, out: cw.compile_inc(gen_inc([c]), out, nvcc, cubin=True),
                              "wgsp_", jobs)


def build(nvcc="nvcc"):
    cfgs = [c for c in candidate_configs() if c.name not in REJECTED]
    lib, cfgs, _ = cw.build_table("wgsp (wgmma.cu) for sm_90a", "wgsp", cfgs, gen_inc, nvcc)
    return lib, cfgs


class Lib:
    def __init__(self, path, cfgs):
        L, device = driver.load(path, "wg")
        self.L, self.check, self.device = L, driver.checker(L, "wg"), str(device)
        L.wg_op_name.restype = ctypes.c_char_p
        self.index = {L.wg_op_name(i).decode(): i for i in range(L.wg_count())}

    def run(self, name, img, desc, areg, meta, cwords, steps=1, scale_d=1):
        T = cwords.shape[0]
        img = np.ascontiguousarray(img, np.uint8)
        desc = np.ascontiguousarray(desc, np.uint64)
        areg = np.ascontiguousarray(areg if areg is not None else np.zeros(4, np.uint32), np.uint32)
        meta = np.ascontiguousarray(meta, np.uint32)
        cwords = np.ascontiguousarray(cwords, np.uint32)
        d = np.zeros_like(cwords)
        p = lambda a: a.ctypes.data_as(ctypes.c_void_p)
        self.check(self.L.wg_run(self.index[name], T, steps, p(img), ctypes.c_longlong(img.shape[1]),
                                 p(areg), p(desc), p(meta), scale_d, p(cwords), p(d)))
        return d


# ----------------------------------------------------------------------------------------
# Shared-memory images: A (64 x K/2, compressed) at 0, B (N x K, K-major) at the next 1 KiB.


def b_layout(cfg: WgCfg):
    kbytes = cfg.k * cw.ATYPES[cfg.btype][0] // 8
    lbo, sbo = 128, 128 * (kbytes // 16)
    return lbo, sbo, -(-cfg.n // 8) * sbo


def images(cfg: WgCfg, A, B):
    """Stored A (T, 64, K/2), B (T, K, N) -> images (T, bytes), desc_a, desc_b."""
    T = A.shape[0]
    size_a, da = 0, 0
    if not cfg.areg:
        kb = (cfg.k // 2) * cw.ATYPES[cfg.atype][0] // 8
        alb, asb, size_a = cw.operand_layout(M, kb, "K", 0, cw.elem_bytes_of(cfg.atype))
        da = cw.encode_desc(0, alb, asb, 0)
    start_b = -(-size_a // 1024) * 1024
    lbo, sbo, size_b = b_layout(cfg)
    db = cw.encode_desc(start_b, lbo, sbo, 0)
    img = np.full((T, -(-(start_b + size_b) // 1024) * 1024), cw.FILL, np.uint8)
    if not cfg.areg:
        cw.scatter(img, 0, A, cfg.atype, "K", 0, alb, asb)
    cw.scatter(img, start_b, np.swapaxes(B, 1, 2), cfg.btype, "K", 0, lbo, sbo)
    return img, da, db


BIG_N_KINDS = {False: ("normal", "undefined_meta", "special", "cancel"),
               True: ("int", "int_extreme", "undefined_meta", "unordered_meta")}


def trials(cfg: WgCfg, scale, quick):
    """(trials per kind, kinds): N = 8 4 per kind, N = 64 one, N = 256 one of four kinds
    (the accumulators dominate the file size)."""
    kinds = spc.kinds_of(cfg.sp)
    if cfg.n >= 256:
        kinds = BIG_N_KINDS[cfg.is_int]
    base = 4 if cfg.n <= 8 else 1
    return max(1, int(round((1 if quick else base) * scale))), kinds


def make_trials(rng, cfg: WgCfg, per, kinds=None):
    sp = cfg.sp
    kinds = kinds or spc.kinds_of(sp)
    parts = [spc.gen_kind(rng, sp, kd, per, m=M, n=cfg.n) for kd in kinds]
    A, E, nib, B, C = (np.concatenate([p[i] for p in parts]) for i in range(5))
    return A, E, nib, B, C, np.repeat(np.array(kinds), per)


def run_one(lib, cfg: WgCfg, rng, A, nib, B, C):
    img, da, db = images(cfg, A, B)
    T = A.shape[0]
    meta = spc.meta_words(cfg.sp, nib, rng)  # (T, 128)
    areg = cw.pack_a(A, cfg.atype) if cfg.areg else None
    desc = np.tile(np.array([da, db], np.uint64), (T, 1))
    words = lib.run(cfg.name, img, desc, areg, meta, cw.pack_c(C, cfg.ctype))
    return cw.unpack_d(words, cfg.n, cfg.ctype), meta, (da, db)


def sanity(cfg, A, E, B, C, D, kinds):
    return spc.sanity(dataclasses.replace(cfg.sp), A, E, B, C, D, kinds)


class DryLib:
    device = "dry run (no GPU)"

    def close(self):
        pass

    def run(self, name, img, desc, areg, meta, cwords, steps=1, scale_d=1):
        return np.zeros_like(cwords)


def main_capture(out_dir, seed, scale, quick, arch, nvcc, deadline, limit, dry_run=False):
    if dry_run:
        cfgs, lib = candidate_configs(), DryLib()
    else:
        path, cfgs = build(nvcc)
        lib = driver.Runner(Lib, (path, cfgs), limit)
    log(f"wgsp: {len(cfgs)} configurations")
    rng = np.random.default_rng(seed + 1000)
    out = {"device": np.array("")}
    for cfg in cfgs:
        if time.time() > deadline:
            log(f"  SKIPPED wgsp/{cfg.name}: time limit of the run reached")
            continue
        t = time.time()
        try:
            A, E, nib, B, C, kinds = make_trials(rng, cfg, *trials(cfg, scale, quick))
            D, meta, (da, db) = run_one(lib, cfg, rng, A, nib, B, C)
        except Exception as e:  # noqa: BLE001  (the worker restarts after a CUDA error)
            log(f"  FAILED wgsp/{cfg.name}: {type(e).__name__}: {e}")
            continue
        out["device"] = np.array(lib.device)
        key = f"wgsp/{cfg.name}"
        for part, v in (("A", A), ("E", E), ("meta", meta), ("B", B), ("C", C), ("D", D), ("kind", kinds)):
            out[f"{key}/{part}"] = v
        out[f"{key}/desc_a"] = np.array(da, np.uint64)
        out[f"{key}/desc_b"] = np.array(db, np.uint64)
        log(f"  {key}: {len(kinds)} trials ({time.time() - t:.1f} s); {sanity(cfg, A, E, B, C, D, kinds)}")
    lib.close()
    cp.save_split(pathlib.Path(out_dir), "wgsp", out)


def selftest(seed=0):
    rng = np.random.default_rng(seed)
    bad = 0
    for cfg in candidate_configs():
        A, E, nib, B, C, kinds = make_trials(rng, cfg, 1)
        img, da, db = images(cfg, A, B)
        lbo, sbo, _ = b_layout(cfg)
        start_b = cw.decode_desc(db)["start"]
        Bt = cw.gather(img, start_b, cfg.n, cfg.k, cfg.btype, "K", 0, lbo, sbo)
        if not np.array_equal(np.swapaxes(Bt, 1, 2), B):
            log(f"{cfg.name}: B image round trip differs")
            bad += 1
        meta = spc.meta_words(cfg.sp, nib, rng)
        got = np.concatenate([spc.nibbles_of_words(cfg.sp, meta[:, 32 * w:32 * (w + 1)]) for w in range(4)], 1)
        if not np.array_equal(got, nib):
            log(f"{cfg.name}: metadata round trip differs")
            bad += 1
        assert gen_inc([cfg])
    log(f"selftest: {len(candidate_configs())} configurations, {bad} problems")
    return 1 if bad else 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    driver.add_common_args(ap, scale_help=None)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--time-limit", type=float, default=300.0)
    ap.add_argument("--selftest", action="store_true")
    ap.add_argument("--probe-ptxas", action="store_true")
    ap.add_argument("--dry-run", action="store_true", help="no GPU, no nvcc: D = 0 (host side only)")
    args = ap.parse_args(argv)
    if args.selftest:
        return selftest(args.seed)
    if args.probe_ptxas:
        return driver.print_probe(candidate_configs(), probe_ptxas(candidate_configs(), args.nvcc),
                                  width=44)
    if not args.out:
        ap.error("give --out DIR (or --selftest / --probe-ptxas)")
    t0 = time.time()
    main_capture(args.out, args.seed, args.scale, args.quick, "sm_90a", args.nvcc, t0 + args.time_limit, 60,
                 dry_run=args.dry_run)
    log(f"done in {time.time() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
