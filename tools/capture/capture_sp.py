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

M, N = 16, 8


# ----------------------------------------------------------------------------------------
# The configuration table.

INT4 = ("s4", "u4")
HALF_ROW_TYPES = ("f16", "bf16", "tf32")  # metadata word = 4 nibbles of row g + 4 of row g+8


@dataclasses.dataclass(frozen=True)
class SpCfg:
    atype: str
    btype: str
    ctype: str
    dtype: str
    k: int  # the logical (dense) K
    satfinite: bool = False
    ordered: bool = True
    sel: int | None = 0  # sparsity selector; None in the name where only 0 is allowed

    @property
    def name(self) -> str:
        s = f"{self.atype}.{self.btype}.{self.ctype}{self.dtype}.m{M}n{N}k{self.k}"
        s += ".satfinite" if self.satfinite else ""
        s += ".ordered" if self.ordered else ""
        return s + (f".sel{self.sel}" if self.nsel > 1 else "")

    @property
    def is_int(self):
        return not cp.FMTS[self.atype].is_float

    @property
    def group(self) -> int:
        """Dense columns per metadata nibble: 4 (2:4), tf32 2 (1:2), s4/u4 8 (pairs, 4:8)."""
        return 2 if self.atype == "tf32" else 8 if self.atype in INT4 else 4

    @property
    def chunks(self) -> int:
        """Metadata nibbles per row of A."""
        return self.k // self.group

    @property
    def nsel(self) -> int:
        """How many sparsity selectors the shape allows (PTX ISA 9.7.14.6)."""
        per_word = 4 if self.atype in HALF_ROW_TYPES else 8
        lanes = 4 if self.atype in HALF_ROW_TYPES else 2
        return lanes // (self.chunks // per_word)

    def dense(self, use: str) -> cp.PtxCfg:
        """The dense mma.sync shape whose fragment layout the operand has: compressed A is laid
        out as A of m16n8k(K/2); B, C, D as those of m16n8kK."""
        k = self.k // 2 if use == "a" else self.k
        return cp.PtxCfg(self.atype, self.btype, self.ctype, self.dtype, M, N, k)

    def nregs(self, use: str) -> int:
        return self.dense(use).nregs(use)

    def ptx(self) -> str:
        op = "mma.sp::ordered_metadata" if self.ordered else "mma.sp"
        sat = ".satfinite" if self.satfinite else ""
        return (f"{op}.sync.aligned.m{M}n{N}k{self.k}.row.col{sat}."
                f"{self.dtype}.{self.atype}.{self.btype}.{self.ctype}")


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
# Metadata (PTX ISA 9.7.14.6.1 "Sparse matrix storage", as the H100 sample confirms).


def meta_slots(cfg: SpCfg):
    """(lane, shift) int arrays of shape (M, chunks): the nibble of row m, chunk c sits in
    bits shift..shift+3 of the metadata register of `lane` (for the configuration's selector).

    f16/bf16/tf32: a word holds 4 nibbles of row g (bits 0-15) and 4 of row g+8 (bits 16-31),
      lane = 4g + F*W + c//4 with W = chunks/4 words per row.
    8-bit and 4-bit: a word holds 8 nibbles of one row, lane = 4g + 2(F*W + c//8) + (m >= 8),
      W = chunks/8.
    """
    m = np.arange(M)[:, None]
    c = np.arange(cfg.chunks)[None, :]
    g, hi = m % 8, (m >= 8).astype(int)
    F = cfg.sel or 0
    if cfg.atype in HALF_ROW_TYPES:
        W = cfg.chunks // 4
        lane = 4 * g + F * W + c // 4
        shift = 16 * hi + 4 * (c % 4)
    else:
        W = cfg.chunks // 8
        lane = 4 * g + 2 * (F * W + c // 8) + hi
        shift = 4 * (c % 8)
    return lane + 0 * c, shift + 0 * m


def nibble_of_idx(cfg: SpCfg, idx):
    """Per-chunk indices (..., chunks, 2) -> nibbles; tf32 idx (..., chunks, 1)."""
    if cfg.atype == "tf32":
        return np.where(idx[..., 0] == 0, 0b0100, 0b1110)
    return idx[..., 0] | (idx[..., 1] << 2)


def e_of_nibble(cfg: SpCfg, nib):
    """Nibbles (T, M, chunks) -> E (T, M, K/2): column of each stored element in its group."""
    if cfg.atype == "tf32":
        return ((nib & 3) >> 1).astype(np.uint8)
    i0, i1 = nib & 3, nib >> 2
    if cfg.atype in INT4:  # pairs: stored 4c+j at 2*i + (j & 1)
        e = np.stack([2 * i0, 2 * i0 + 1, 2 * i1, 2 * i1 + 1], -1)
    else:
        e = np.stack([i0, i1], -1)
    return e.reshape(*nib.shape[:-1], -1).astype(np.uint8)


def meta_words(cfg: SpCfg, nib, rng):
    """Nibbles (T, M, chunks) -> metadata registers (T, 32) uint32. Lanes the selector does
    not name get other valid (random) words, so a model reading the wrong lanes fails. For a
    warpgroup, nib (T, 64, chunks) -> (T, 128): warp w holds rows 16w..16w+15."""
    if nib.shape[1] > M:
        return np.concatenate([meta_words(cfg, nib[:, w * M:(w + 1) * M], rng)
                               for w in range(nib.shape[1] // M)], axis=1)
    T = nib.shape[0]
    lane, shift = meta_slots(cfg)
    valid = np.array([0b0100, 0b1110] if cfg.atype == "tf32" else [4, 8, 12, 9, 13, 14], np.uint64)
    words = np.zeros((T, 32), np.uint64)
    for s in range(0, 32, 4):
        words |= rng.choice(valid, (T, 32)) << np.uint64(s)
    named = np.zeros(32, bool)
    named[lane.ravel()] = True
    words[:, named] = 0
    for mm in range(M):
        for c in range(cfg.chunks):
            words[:, lane[mm, c]] |= nib[:, mm, c].astype(np.uint64) << np.uint64(shift[mm, c])
    return words.astype(np.uint32)


def nibbles_of_words(cfg: SpCfg, words):
    lane, shift = meta_slots(cfg)
    return ((words.astype(np.uint64)[:, lane] >> shift.astype(np.uint64)) & np.uint64(15)).astype(np.int64)


# ----------------------------------------------------------------------------------------
# Inputs: dense trials from capture_ptx's generators, pruned to the chosen indices.

FLOAT_KINDS = ("normal", "wide", "tiny", "probe", "cancel", "special", "random_bits", "zero_sign",
               "block", "int", "undefined_meta", "unordered_meta")
INT_KINDS = ("int", "int_big_c", "int_extreme", "undefined_meta", "unordered_meta")
MAGNITUDE_KINDS = ("probe", "block", "zero_sign")
PAIRS = np.array([(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)])


def choose_idx(cfg: SpCfg, rng, shape, mag=None):
    """Valid ordered indices per chunk: (T, M, chunks, 2) (tf32: (..., 1)); shape = (T, M).
    With `mag` (T, M, K) the two largest magnitudes of each group are kept (ties at random)."""
    T, M = shape
    if cfg.atype == "tf32":
        if mag is None:
            return rng.integers(0, 2, (T, M, cfg.chunks, 1))
        m2 = mag.reshape(T, M, cfg.chunks, 2) + rng.random((T, M, cfg.chunks, 2)) * 1e-300
        return np.argmax(m2, -1)[..., None]
    if mag is None or cfg.atype in INT4:
        return PAIRS[rng.integers(0, 6, (T, M, cfg.chunks))]
    m4 = mag.reshape(T, M, cfg.chunks, 4) + rng.random((T, M, cfg.chunks, 4)) * 1e-300
    return np.sort(np.argsort(-m4, -1)[..., :2], -1)


def compress(cfg: SpCfg, A_full, E):
    """A (T, M, K) and E (T, M, K/2) -> stored elements (T, M, K/2)."""
    G = cfg.group
    per = E.shape[2] // cfg.chunks
    col = (np.arange(E.shape[2]) // per * G)[None, None, :] + E.astype(np.int64)
    return np.take_along_axis(A_full, col, axis=2), col


def expand(cfg: SpCfg, A, E, dtype):
    """Stored A + E (valid indices) -> dense A (T, M, K) with zeros elsewhere (float64/int64)."""
    T, m, kh = A.shape
    per = kh // cfg.chunks
    col = (np.arange(kh) // per * cfg.group)[None, None, :] + E.astype(np.int64)
    out = np.zeros((T, m, cfg.k), dtype)
    np.put_along_axis(out, col, A.astype(dtype), axis=2)
    return out


def _small_int_float(rng, cfg, T):
    A = rng.integers(-8, 9, (T, cfg.m, cfg.k)).astype(float)
    B = rng.integers(-8, 9, (T, cfg.k, cfg.n)).astype(float)
    C = rng.integers(-64, 65, (T, cfg.m, cfg.n)).astype(float)
    return cp.encode(A, cfg.atype), cp.encode(B, cfg.btype), cp.encode(C, cfg.ctype)


def gen_kind(rng, cfg: SpCfg, kind: str, T: int, k_total=None, m=M, n=N):
    """T trials: stored A (T, m, K/2), E, nibbles (T, m, chunks), B (T, K, n), C (T, m, n)."""
    dcfg = dataclasses.replace(cfg.dense("b"), k=k_total or cfg.k, m=m, n=n)
    K = dcfg.k
    ccfg = dataclasses.replace(cfg, k=K)
    base = "normal" if kind in ("undefined_meta", "unordered_meta") and not cfg.is_int else kind
    if cfg.is_int:
        ikind = "int" if kind in ("undefined_meta", "unordered_meta") else kind
        Af, B, C = cp.gen_int(rng, ikind, dcfg, T)
    elif base == "int":
        Af, B, C = _small_int_float(rng, dcfg, T)
    else:
        Af, B, C = cp.gen_float(rng, base, dcfg, T)
    mag = None
    if kind in MAGNITUDE_KINDS:
        mag = np.abs(np.nan_to_num(cp.decode(Af, cfg.atype)))
    idx = choose_idx(ccfg, rng, (T, m), mag)
    nib = nibble_of_idx(ccfg, idx)
    A, _ = compress(ccfg, Af, e_of_nibble(ccfg, nib))
    if kind == "cancel":
        ad = expand(ccfg, cp.decode(A, cfg.atype), e_of_nibble(ccfg, nib), np.float64)
        C = cp.encode(cp.exact_neg_sum(ad, cp.decode(B, cfg.btype)), cfg.ctype)
    if kind == "undefined_meta":  # some chunks get a repeated-index nibble
        bad = np.array([0b0000, 0b0101, 0b1010, 0b1111])
        pick = rng.random(nib.shape) < 0.35
        nib = np.where(pick, bad[rng.integers(0, 4, nib.shape)], nib)
    elif kind == "unordered_meta" and cfg.atype != "tf32":  # decreasing order: i0 > i1
        swap = rng.random(nib.shape) < 0.5
        nib = np.where(swap, (nib >> 2) | ((nib & 3) << 2), nib)
    return A, e_of_nibble(ccfg, nib), nib, B, C


def kinds_of(cfg: SpCfg):
    ks = INT_KINDS if cfg.is_int else FLOAT_KINDS
    return tuple(k for k in ks if not (k == "unordered_meta" and cfg.atype == "tf32"))


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


def sanity(cfg: SpCfg, A, E, B, C, D, kinds):
    sel = np.isin(kinds, ["normal", "int"])
    if not sel.any():
        return ""
    if cfg.is_int:
        ad = expand(cfg, A[sel], E[sel], np.int64)
        want = ad @ B[sel].astype(np.int64) + C[sel].astype(np.int64)
        if cfg.satfinite:
            want = np.clip(want, -(1 << 31), (1 << 31) - 1)
        want = ((want + (1 << 31)) % (1 << 32) - (1 << 31)).astype(np.int32)
        return f"exact int check: {int(np.sum(want != D[sel]))} of {want.size} differ"
    ad = expand(cfg, cp.decode(A[sel], cfg.atype), E[sel], np.float64)
    b = cp.decode(B[sel], cfg.btype)
    c = cp.decode(C[sel], cfg.ctype)
    ref = ad @ b + c
    scale = np.abs(ad) @ np.abs(b) + np.abs(c)
    err = np.abs(cp.decode(D[sel], cfg.dtype) - ref) / np.maximum(scale, 1e-300)
    return f"normal/int: max |D - A@B - C| / (|A|@|B| + |C|) = {np.nanmax(err):.2e}"


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
