"""Records what the local NVIDIA GPU returns for cooperative groups and divergent warp code.

    python tools/capture/capture_cg.py --out DIR [--seed S] [--scale K]

writes (keys in tools/capture/FORMAT_CG.md):

* ``DIR/h100_cg.npz``: thread_block_tile of 1..32 lanes (ranks, votes, matches, shuffles of
  int, float and double), cg::reduce / inclusive_scan / exclusive_scan for int32, uint32,
  int64, uint64, float, double, half and bfloat16 over every tile size and coalesced groups,
  coalesced_threads / labeled_partition / binary_partition / tiled_partition(coalesced)
  groups and the programming guide's cooperative-groups examples;
* ``DIR/cg_div.npz``: divergent one-warp programs (branches on lane id and on data, nested
  branches, loops with per-lane trip counts, early exit) with __activemask(), coalesced
  groups, shuffles, votes, __reduce_*_sync and elect.sync inside them, and the undefined
  uses (full masks naming lanes that do not take the branch), each run in a child process
  with a timeout because such a call may hang;
* ``DIR/cg_examples.txt``: the examples' printed output.

Needs nvcc (CUDA 12.x/13.x with cooperative_groups) and numpy; cg.cu holds the kernels,
called through ctypes. sm_90 or newer (elect.sync).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import pathlib
import shutil
import subprocess
import sys
import time

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
SRC = HERE / "cg.cu"
sys.path.insert(0, str(HERE))
import driver  # noqa: E402  (nvcc, the library's device, the common options)
from driver import log  # noqa: E402

TILE_SIZES = (1, 2, 4, 8, 16, 32)
TILE_BLOCK = 64
TILE_INFO = ("thread_rank", "meta_group_rank", "num_threads", "meta_group_size", "any", "all",
             "ballot", "match_any", "match_all", "match_all_pred", "match_any64", "invoke_one",
             "sub_meta_group_rank", "sub_meta_group_size")
TILE_OFFS = (-1, 0, 1, 2, 3, 4, 5, 7, 8, 15, 16, 17, 31, 32, 33, 64)
RED_TYPES = ("int32", "uint32", "int64", "uint64", "float32", "float64", "float16", "bfloat16")
RED_RAW = {"int32": np.uint32, "uint32": np.uint32, "int64": np.uint64, "uint64": np.uint64,
           "float32": np.uint32, "float64": np.uint64, "float16": np.uint16, "bfloat16": np.uint16}
RED_OPS = ("plus", "less", "greater", "bit_and", "bit_or", "bit_xor")
RED_KINDS = ("reduce", "inclusive_scan", "exclusive_scan")
NRED = 18
PART_KINDS = ("coalesced", "labeled", "binary", "labeled_tile32", "binary_tile32", "tiled_coalesced")
PART_FIXED = ("num_threads", "thread_rank", "meta_group_rank", "meta_group_size", "ballot", "any",
              "all", "match_any", "match_all", "match_all_pred", "reduce_plus_i32",
              "inclusive_plus_i32", "exclusive_plus_i32", "reduce_less_i32", "reduce_plus_f32",
              "inclusive_plus_f32", "exclusive_plus_f32", "invoke_one", "activemask")
PART_OFFS = (-1, 0, 1, 2, 3, 5, 31, 32, 33)
PROBE = ("activemask", "ct_size", "ct_rank", "shfl_a", "shfl_down1", "shfl_xor1", "ballot",
         "any", "all", "match_any", "reduce_add_u32", "reduce_min_i32", "reduce_max_u32",
         "reduce_and", "reduce_or", "reduce_xor", "elect_leader", "elect_is_leader", "ct_shfl0",
         "order", "cg_reduce_plus_f32", "reduce_min_u32", "reduce_max_i32", "reduce_add_i32")
NSLOT = 16
PROGRAMS = ("lane_branch", "data_branch", "one_sided", "nested", "three_way", "for_loop",
            "while_break", "early_exit", "loop_branch", "straight")
UNDEF_PROGS = ("shfl_one_side", "shfl_both_sides", "ballot_one_side", "ballot_both_sides",
               "syncwarp_one_side", "syncwarp_both_sides", "reduce_one_side", "shfl_exited")
MASKS = (0xFFFFFFFF, 0x0000FFFF, 0xFFFF0000, 0x00000001, 0x80000001, 0x0F0F0F0F, 0xAAAAAAAA,
         0x7FFFFFFF, 0xFFFFFFFE, 0x00010000, 0x12345678, 0xF000000F)
FILL32 = 0xDEADBEEF


def build(arch: str, nvcc: str = "nvcc") -> pathlib.Path:
    """Compiles cg.cu for `arch` unless an up-to-date build exists (keyed by a hash)."""
    return driver.build_lib(SRC, "cg", arch, nvcc)


def _p(a: np.ndarray):
    assert a.flags.c_contiguous
    return a.ctypes.data_as(ctypes.c_void_p)


class Lib:
    """ctypes front of cg.cu. Every call raises on a CUDA error."""

    def __init__(self, path: pathlib.Path):
        self.L, device = driver.load(path, "cg")
        self._check = driver.checker(self.L, "cg")
        self.device, self.runtime, self.driver = str(device), device.runtime, device.driver

    def tile(self, n, offs, xi, xd, pred):
        t = xi.shape[0]
        offs = np.ascontiguousarray(offs, np.int32)
        k = len(offs)
        xi = np.ascontiguousarray(xi, np.uint32)
        xd = np.ascontiguousarray(xd, np.uint64)
        pred = np.ascontiguousarray(pred, np.int32)
        info = np.zeros((t, TILE_BLOCK, len(TILE_INFO)), np.uint32)
        si = np.zeros((t, TILE_BLOCK, 4, k), np.uint32)
        sf = np.zeros_like(si)
        sd = np.zeros((t, TILE_BLOCK, 4, k), np.uint64)
        self._check(self.L.cg_tile(n, t, k, _p(offs), _p(xi), _p(xd), _p(pred), _p(info),
                                   _p(si), _p(sf), _p(sd)))
        return info, si, sf, sd

    def reduce(self, ty, cfg, x):
        raw = RED_RAW[ty]
        cfg = np.ascontiguousarray(cfg, np.int32)
        x = np.ascontiguousarray(x, raw)
        out = np.full((x.shape[0], 32, NRED), fill_for(raw), raw)
        self._check(self.L.cg_reduce(RED_TYPES.index(ty), len(cfg), _p(cfg), _p(x), _p(out)))
        return out

    def part(self, cfg, offs, x, label, pred):
        cfg = np.ascontiguousarray(cfg, np.int32)
        offs = np.ascontiguousarray(offs, np.int32)
        x = np.ascontiguousarray(x, np.uint32)
        label = np.ascontiguousarray(label, np.int32)
        pred = np.ascontiguousarray(pred, np.int32)
        out = np.full((len(cfg), 32, len(PART_FIXED) + 3 * len(offs)), FILL32, np.uint32)
        self._check(self.L.cg_part(len(cfg), len(offs), _p(cfg), _p(offs), _p(x), _p(label),
                                   _p(pred), _p(out)))
        return out

    def div(self, cfg, x):
        cfg = np.ascontiguousarray(cfg, np.int32)
        x = np.ascontiguousarray(x, np.uint32)
        out = np.full((len(cfg), 32, NSLOT, len(PROBE)), FILL32, np.uint32)
        self._check(self.L.cg_div(len(cfg), _p(cfg), _p(x), _p(out)))
        return out

    def undef(self, cfg, x):
        cfg = np.ascontiguousarray(cfg, np.int32)
        x = np.ascontiguousarray(x, np.uint32)
        out = np.full((len(cfg), 32, 4), FILL32, np.uint32)
        self._check(self.L.cg_undef(len(cfg), _p(cfg), _p(x), _p(out)))
        return out

    def example(self, ex, x, oi, of, ctr):
        x = np.ascontiguousarray(x, np.uint32)
        oi = np.ascontiguousarray(oi, np.int32).copy()
        of = np.ascontiguousarray(of, np.uint32).copy()
        ctr = np.ascontiguousarray(ctr, np.int32).copy()
        self._check(self.L.cg_example(ex, len(x), _p(x), _p(oi), len(oi), _p(of), len(of),
                                      _p(ctr), len(ctr)))
        return oi, of, ctr


def fill_for(raw) -> int:
    return {np.uint16: 0xBEEF, np.uint32: FILL32, np.uint64: 0xDEADBEEFDEADBEEF}[raw]


# ----------------------------------------------------------------------------------------
# Inputs.


def float_bits(rng, kind: str, shape, ty: str) -> np.ndarray:
    """Raw bits of float values of one kind for float16/bfloat16/float32/float64."""
    n = int(np.prod(shape))
    if kind == "wide":  # sign, exponent over a wide range, full fraction
        span = {"float16": 12, "bfloat16": 40, "float32": 40, "float64": 80}[ty]
        v = rng.choice([-1.0, 1.0], n) * (1 + rng.random(n)) * 2.0 ** rng.integers(-span, span, n)
    elif kind == "ties":  # 1 + small multiples of the last place, sums land on ties
        ulp = {"float16": 2.0**-10, "bfloat16": 2.0**-7, "float32": 2.0**-23, "float64": 2.0**-52}[ty]
        v = rng.choice([1.0, 2.0, 0.5], n) * (1 + ulp * rng.integers(0, 4, n) / 2)
        v = np.where(rng.random(n) < 0.3, ulp * rng.integers(1, 4, n) / 2, v)
        v = v * rng.choice([-1.0, 1.0], n, p=[0.2, 0.8])
    elif kind == "cancel":  # big values cancelling and small ones
        big = 2.0 ** rng.integers(5, 12, n) * (1 + rng.integers(0, 8, n) / 8)
        v = np.where(rng.random(n) < 0.5, big, 2.0 ** -rng.integers(0, 12, n))
        v = v * rng.choice([-1.0, 1.0], n)
    elif kind == "equal":  # few distinct values incl. +0 and -0 (ties of less/greater)
        v = rng.choice(np.array([0.0, -0.0, 1.0, -1.0, 2.5]), n)
    else:  # "special": normal values with NaN, inf and signed zeros sprinkled in
        v = (1 + rng.random(n)) * 2.0 ** rng.integers(-8, 8, n) * rng.choice([-1.0, 1.0], n)
    bits = to_bits(v, ty)
    if kind in ("special", "equal"):
        nbits = {"float16": 16, "bfloat16": 16, "float32": 32, "float64": 64}[ty]
        man = {"float16": 10, "bfloat16": 7, "float32": 23, "float64": 52}[ty]
        exp_all = ((1 << (nbits - 1 - man)) - 1) << man
        sign = 1 << (nbits - 1)
        u = rng.random(n)
        pay = rng.integers(1, 1 << min(man, 30), n).astype(np.uint64)
        quiet = np.uint64(1 << (man - 1))
        specials = [
            np.uint64(exp_all) | quiet,  # canonical qNaN
            np.uint64(exp_all | sign) | quiet,
            np.uint64(exp_all),  # +inf
            np.uint64(exp_all | sign),  # -inf
            np.uint64(0),
            np.uint64(sign),
        ]
        pick = rng.integers(0, len(specials) + 1, n)
        sp = np.array([specials[i] if i < len(specials) else 0 for i in pick], np.uint64)
        sp = np.where(pick == len(specials), np.uint64(exp_all) | (pay % np.uint64(1 << man)) | np.uint64(1), sp)
        frac = 0.12 if kind == "special" else 0.0
        bits = np.where(u < frac, sp, bits.astype(np.uint64))
    return bits.astype(RED_RAW[ty]).reshape(shape)


def to_bits(v: np.ndarray, ty: str) -> np.ndarray:
    if ty == "float64":
        return v.astype(np.float64).view(np.uint64)
    if ty == "float32":
        return v.astype(np.float32).view(np.uint32)
    if ty == "float16":
        return v.astype(np.float16).view(np.uint16)
    return (v.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)  # bfloat16, truncated


def int_bits(rng, kind: str, shape, ty: str) -> np.ndarray:
    n = int(np.prod(shape))
    nb = 64 if "64" in ty else 32
    if kind == "random":
        v = rng.integers(0, 1 << 62, n, dtype=np.uint64) * 4 + rng.integers(0, 4, n, dtype=np.uint64)
    elif kind == "small":
        v = rng.integers(-8, 8, n).astype(np.int64).view(np.uint64)
    else:  # "extreme": MIN, MAX, -1, 0, 1
        lo = -(1 << (nb - 1))
        vals = np.array([lo, (1 << (nb - 1)) - 1, -1, 0, 1, lo + 1], np.int64)
        v = rng.choice(vals, n).view(np.uint64)
    if nb == 32:
        v = v & np.uint64(0xFFFFFFFF)
    return v.astype(RED_RAW[ty]).reshape(shape)


def rand_masks(rng, k: int) -> list[int]:
    out = []
    for _ in range(k):
        density = rng.choice([0.2, 0.5, 0.8])
        bits = rng.random(32) < density
        if not bits.any():
            bits[rng.integers(32)] = True
        out.append(int(np.sum(bits.astype(np.uint64) << np.arange(32, dtype=np.uint64))))
    return out


def words32(rng, kind: str, shape) -> np.ndarray:
    """uint32 inputs for the tile/partition/divergence sections."""
    n = int(np.prod(shape))
    if kind == "random":
        v = rng.integers(0, 1 << 32, n, dtype=np.uint64)
    elif kind == "small":
        v = rng.integers(0, 6, n, dtype=np.uint64)
    elif kind == "float":
        v = float_bits(rng, "wide", (n,), "float32").astype(np.uint64)
    else:  # "equal": constant per group of 8 lanes, with some lanes changed
        v = np.repeat(rng.integers(0, 1 << 32, (n + 7) // 8, dtype=np.uint64), 8)[:n]
        flip = rng.random(n) < 0.05
        v = np.where(flip, v ^ np.uint64(1), v)
    return v.astype(np.uint32).reshape(shape)


# ----------------------------------------------------------------------------------------
# Sections.


def cap_tile(lib, rng, scale, res):
    kinds = ("random", "small", "equal", "float")
    for n in TILE_SIZES:
        t = 4 * scale
        xi = np.stack([words32(rng, kinds[i % 4], (TILE_BLOCK,)) for i in range(t)])
        xd = rng.integers(0, 1 << 63, (t, TILE_BLOCK), dtype=np.uint64) * 2
        xd[1::2] = np.repeat(xd[1::2, ::8], 8, axis=1)  # 64-bit matches
        dens = rng.choice([0.0, 0.1, 0.5, 0.9, 1.0], (t, 1))
        pred = (rng.random((t, TILE_BLOCK)) < dens).astype(np.int32) * rng.choice([1, 2, -7], (t, TILE_BLOCK))
        info, si, sf, sd = lib.tile(n, TILE_OFFS, xi, xd, pred)
        k = f"tile{n}"
        res[f"{k}/xi"], res[f"{k}/xd"], res[f"{k}/pred"] = xi, xd, pred.astype(np.int32)
        res[f"{k}/info"], res[f"{k}/shfl_i32"], res[f"{k}/shfl_f32"], res[f"{k}/shfl_f64"] = info, si, sf, sd
    res["tile/offs"] = np.array(TILE_OFFS, np.int32)


def cap_reduce(lib, rng, scale, res):
    for ty in RED_TYPES:
        is_float = ty.startswith(("float", "bfloat"))
        kinds = ("wide", "special", "ties", "cancel", "equal") if is_float else ("random", "small", "extreme")
        cfg, xs = [], []
        groups = [(g, 0xFFFFFFFF) for g in TILE_SIZES] + [(0, m) for m in MASKS]
        groups += [(0, m) for m in rand_masks(rng, 4 * scale)]
        for g, m in groups:
            for kind in kinds:
                cfg.append((g, np.int32(np.uint32(m).view(np.int32))))
                x = float_bits(rng, kind, (32,), ty) if is_float else int_bits(rng, kind, (32,), ty)
                xs.append(x)
        cfg = np.array(cfg, np.int32)
        x = np.stack(xs)
        out = lib.reduce(ty, cfg, x)
        res[f"red/{ty}/cfg"], res[f"red/{ty}/x"], res[f"red/{ty}/out"] = cfg, x, out
        res[f"red/{ty}/kind"] = np.array([kinds.index(k) for _ in groups for k in kinds], np.int32)


def cap_part(lib, rng, scale, res):
    cfg, xs, labels, preds = [], [], [], []
    masks = list(MASKS) + rand_masks(rng, 3 * scale)
    for kind in range(len(PART_KINDS)):
        use = [0xFFFFFFFF] * (2 * scale) if kind in (3, 4) else masks
        for i, m in enumerate(use):
            params = (1, 2, 4, 8, 16, 32) if kind == 5 else (0,)
            for prm in params:
                if kind == 5 and i % 3:
                    continue
                cfg.append((kind, np.uint32(m).view(np.int32), prm, 0))
                xs.append(words32(rng, ("random", "small", "float", "equal")[len(xs) % 4], (32,)))
                nl = rng.choice([1, 2, 3, 4, 8, 32])
                lab = rng.integers(0, nl, 32) * rng.choice([1, 7, -3, 1 << 20])
                labels.append(lab.astype(np.int32))
                preds.append((rng.random(32) < rng.choice([0.0, 0.3, 0.7, 1.0])).astype(np.int32))
    cfg = np.array(cfg, np.int32)
    x, label, pred = np.stack(xs), np.stack(labels), np.stack(preds)
    out = lib.part(cfg, PART_OFFS, x, label, pred)
    res.update({"part/cfg": cfg, "part/x": x, "part/label": label, "part/pred": pred,
                "part/out": out, "part/offs": np.array(PART_OFFS, np.int32)})


def div_cases(rng, scale):
    cfg = []
    for prog in range(len(PROGRAMS)):
        for i in range(3 * scale):
            a = int(rng.integers(0, 40))
            if prog == 0:
                b = (1, 7, 16, 31, 32, 0)[i % 6]
            elif prog == 1:
                b = int(rng.integers(0, 32))
            elif prog in (2, 7):
                b = int(np.uint32(rand_masks(rng, 1)[0]).view(np.int32))
            elif prog == 3:
                b = int(rng.integers(1, 32))
            else:
                b = int(rng.integers(2, 12))
            c = int(rng.integers(2, 12)) if prog in (3, 6) else 0
            cfg.append((prog, a, b, c))
    return np.array(cfg, np.int32)


def cap_div(lib, rng, scale, res):
    cfg = div_cases(rng, scale)
    x = np.stack([words32(rng, ("random", "small", "float")[i % 3], (32,)) for i in range(len(cfg))])
    res.update({"div/cfg": cfg, "div/x": x, "div/out": lib.div(cfg, x)})


def undef_cases(rng, scale):
    cfg = []
    for prog in range(len(UNDEF_PROGS)):
        for b in (1, 8, 16, 31):
            cfg.append((prog, int(rng.integers(0, 32)), b, 0))
    return np.array(cfg, np.int32)


def cap_undef(args, rng, scale, res, lib_path):
    """Runs each undefined program in a child process with a timeout; records what returned."""
    cfg = undef_cases(rng, scale)
    x = rng.integers(0, 1 << 32, (len(cfg), 32), dtype=np.uint64).astype(np.uint32)
    out = np.full((len(cfg), 32, 4), FILL32, np.uint32)
    status = np.zeros(len(UNDEF_PROGS), np.int32)  # 0 ran, 1 timed out (hang), 2 error
    tmp = pathlib.Path(args.out) / "_undef_tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    for prog in range(len(UNDEF_PROGS)):
        sel = cfg[:, 0] == prog
        np.savez(tmp / "in.npz", cfg=cfg[sel], x=x[sel])
        cmd = [sys.executable, __file__, "--undef-child", str(tmp), "--lib", str(lib_path)]
        try:
            r = subprocess.run(cmd, timeout=args.undef_timeout, capture_output=True, text=True)
            if r.returncode == 0:
                out[sel] = np.load(tmp / "out.npy")
            else:
                status[prog] = 2
                log(f"  undef {UNDEF_PROGS[prog]}: error {r.stderr.strip()[-300:]}")
        except subprocess.TimeoutExpired:
            status[prog] = 1
            log(f"  undef {UNDEF_PROGS[prog]}: timed out after {args.undef_timeout} s (hang)")
        (tmp / "out.npy").unlink(missing_ok=True)
        log(f"  undef {UNDEF_PROGS[prog]}: status {status[prog]}")
    shutil.rmtree(tmp, ignore_errors=True)
    res.update({"undef/cfg": cfg, "undef/x": x, "undef/out": out, "undef/status": status})


# ----------------------------------------------------------------------------------------
# The programming guide's examples: fixed inputs (an integer hash of the index), so that
# experiments/cg_examples.py can draw the same ones.


def example_input(n: int, salt: int) -> np.ndarray:
    """uint32 hash of i + salt·2^20 for i < n (murmur3 finaliser)."""
    v = (np.arange(n, dtype=np.uint64) + np.uint64(salt << 20)) & np.uint64(0xFFFFFFFF)
    for shift, mul in ((16, 0x85EBCA6B), (13, 0xC2B2AE35), (16, None)):
        v ^= v >> np.uint64(shift)
        if mul:
            v = (v * np.uint64(mul)) & np.uint64(0xFFFFFFFF)
    return v.astype(np.uint32)


def example_float_bits(v: np.ndarray) -> np.ndarray:
    """Example 0's float inputs: sign and fraction of v, exponent 2^-20 .. 2^19."""
    v = v.astype(np.uint32)
    return (v & np.uint32(0x807FFFFF)) | ((((v >> np.uint32(8)) % np.uint32(40)) + np.uint32(107)) << np.uint32(23))


def example_text(r: dict) -> str:
    """The printed report of the four examples, from their result arrays."""
    lines = ["tiled reduction (thread_block_tile<32>, cg::reduce plus):"]
    for i, (si, sf) in enumerate(zip(r["ex0/oi"], r["ex0/of"], strict=True)):
        f = np.uint32(sf).view(np.float32)
        lines.append(f"  tile {i:2d}: int sum {int(si)}, float sum {float(f)!r} (0x{int(sf):08x})")
    lines.append(f"  total (atomicAdd of the tile sums): {int(r['ex0/ctr'][0])}")
    lines.append("stream compaction (cg::exclusive_scan of the valid flags, x % 3 != 0):")
    for b, cnt in enumerate(r["ex1/ctr"]):
        kept = r["ex1/oi"][32 * b : 32 * b + int(cnt)]
        lines.append(f"  block {b}: kept {int(cnt)}: " + " ".join(str(int(k) % 1000) for k in kept))
    lines.append("labeled_partition aggregation (label x % 4):")
    lines.append("  histogram: " + " ".join(str(int(h)) for h in r["ex2/ctr"]))
    for w in range(len(r["ex2/of"]) // 4):
        sums = r["ex2/of"][4 * w : 4 * w + 4]
        lines.append(f"  warp {w} float sums: " + " ".join(f"0x{int(s):08x}" for s in sums))
    lines.append("coalesced_threads atomic aggregation (atomicAggInc, odd x):")
    for b, cnt in enumerate(r["ex3/ctr"]):
        slots = r["ex3/oi"][32 * b : 32 * b + 32]
        lines.append(f"  block {b}: counter {int(cnt)}, slots " + " ".join(str(int(s)) for s in slots))
    return "\n".join(lines) + "\n"


EXAMPLE_SIZES = {0: 1024, 1: 128, 2: 128, 3: 128}


def cap_examples(lib, res):
    x0 = example_input(EXAMPLE_SIZES[0], 0)
    x0 = example_float_bits(x0)  # the low 16 bits (kept) carry the int; see cg.cu
    oi, of, ctr = lib.example(0, x0, np.zeros(32, np.int32), np.zeros(32, np.uint32), np.zeros(1, np.int32))
    res.update({"ex0/x": x0, "ex0/oi": oi, "ex0/of": of, "ex0/ctr": ctr})
    x1 = example_input(EXAMPLE_SIZES[1], 1)
    oi, of, ctr = lib.example(1, x1, np.full(128, -1, np.int32), np.zeros(1, np.uint32), np.zeros(4, np.int32))
    res.update({"ex1/x": x1, "ex1/oi": oi, "ex1/ctr": ctr})
    x2 = example_input(EXAMPLE_SIZES[2], 2)
    oi, of, ctr = lib.example(2, x2, np.zeros(1, np.int32), np.full(16, 0xFFFFFFFF, np.uint32), np.zeros(4, np.int32))
    res.update({"ex2/x": x2, "ex2/of": of, "ex2/ctr": ctr})
    x3 = example_input(EXAMPLE_SIZES[3], 3)
    oi, of, ctr = lib.example(3, x3, np.full(128, -1, np.int32), np.zeros(1, np.uint32), np.zeros(4, np.int32))
    res.update({"ex3/x": x3, "ex3/oi": oi, "ex3/ctr": ctr})
    text = example_text(res)
    res["ex/text"] = np.array(text)
    return text


# ----------------------------------------------------------------------------------------


def undef_child(tmp: str, lib_path: str) -> None:
    lib = Lib(pathlib.Path(lib_path))
    d = np.load(pathlib.Path(tmp) / "in.npz")
    np.save(pathlib.Path(tmp) / "out.npy", lib.undef(d["cfg"], d["x"]))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    driver.add_common_args(ap, out_default="out/cg", out_type=str, scale_type=int, scale_default=1,
                           scale_help="multiplies the number of trials", arch=None,
                           arch_help="e.g. 90a; default: the GPU's")
    ap.add_argument("--only", default="tile,reduce,part,examples,div,undef")
    ap.add_argument("--undef-timeout", type=float, default=10.0)
    ap.add_argument("--undef-child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--lib", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.undef_child:
        undef_child(args.undef_child, args.lib)
        return
    t0 = time.time()
    lib_path = build(driver.gpu_arch(args.arch, arch_specific=True), args.nvcc)
    lib = Lib(lib_path)
    log(f"device: {lib.device}, runtime {lib.runtime}, driver {lib.driver}")
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    only = set(args.only.split(","))
    meta = {"device": lib.device, "runtime": lib.runtime, "driver": lib.driver, "seed": args.seed,
            "scale": args.scale, "tool": "tools/capture/capture_cg.py"}
    main_res: dict = {}
    div_res: dict = {}
    steps = (
        ("tile", lambda r: cap_tile(lib, np.random.default_rng([args.seed, 1]), args.scale, r), main_res),
        ("reduce", lambda r: cap_reduce(lib, np.random.default_rng([args.seed, 2]), args.scale, r), main_res),
        ("part", lambda r: cap_part(lib, np.random.default_rng([args.seed, 3]), args.scale, r), main_res),
        ("examples", lambda r: cap_examples(lib, r), main_res),
        ("div", lambda r: cap_div(lib, np.random.default_rng([args.seed, 4]), args.scale, r), div_res),
    )
    for name, fn, res in steps:
        if name not in only:
            continue
        t = time.time()
        fn(res)
        log(f"{name}: {time.time() - t:.1f} s")
    if "examples" in only:
        (out / "cg_examples.txt").write_text(str(main_res["ex/text"]))
        log(str(main_res["ex/text"]))
    if "undef" in only:
        t = time.time()
        cap_undef(args, np.random.default_rng([args.seed, 5]), args.scale, div_res, lib_path)
        log(f"undef: {time.time() - t:.1f} s")
    for fname, res in (("h100_cg.npz", main_res), ("cg_div.npz", div_res)):
        if res:
            res["meta"] = np.array(json.dumps(meta))
            res["device"] = np.array(lib.device)
            np.savez_compressed(out / fname, **res)
            log(f"wrote {out / fname} ({(out / fname).stat().st_size / 1e6:.2f} MB, {len(res)} keys)")
    log(f"done in {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
