"""Records what PTX `mma.sync.aligned` returns on the local GPU, for every shape and type
that ptxas accepts for sm_90a, plus GEMM-style chains and WMMA edge probes.

    python tools/capture/capture_ptx.py --out DIR [--quick] [--seed N] [--scale X]
                                        [--arch 90a] [--only ptx,chain,edges]
    python tools/capture/capture_ptx.py --selftest        # no GPU, no nvcc: pack/unpack checks
    python tools/capture/capture_ptx.py --probe-ptxas     # which configurations ptxas accepts

Writes DIR/ptx_mma_full*.npz, DIR/ptx_chain*.npz, DIR/wmma_edges*.npz (schema: FORMAT_PTX.md).
The logical -> register mapping (PTX ISA 9.7.14.5) is done here in numpy (`frag_coords`,
`pack`, `unpack`); ptxmma.cu only moves register words. Needs nvcc and numpy.
"""

from __future__ import annotations

import argparse
import ctypes
import dataclasses
import io
import math
import pathlib
import sys
import time

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
SRC = HERE / "ptxmma.cu"
sys.path.insert(0, str(HERE))
import capture as wc  # noqa: E402  (the WMMA harness: formats, Lib, run_mma)
import driver  # noqa: E402  (nvcc, ptxas probes, the library's device)
from driver import log  # noqa: E402

MAX_FILE_BYTES = 11_500_000


# ----------------------------------------------------------------------------------------
# Element formats: one registry.


@dataclasses.dataclass(frozen=True)
class Fmt:
    name: str
    bits: int  # bits of one element inside a register
    dtype: type  # numpy dtype of the logical arrays in the npz files
    mbits: int = 0  # fraction bits (floats)
    emin: int = 0
    emax: int = 0
    maxval: float = 0.0

    @property
    def is_float(self):
        return self.mbits > 0


FMTS = {
    "f16": Fmt("f16", 16, np.uint16, 10, -14, 15, 65504.0),
    "bf16": Fmt("bf16", 16, np.uint16, 7, -126, 127, 3.3895313892515355e38),
    "tf32": Fmt("tf32", 32, np.uint32, 10, -126, 127, 3.4011621342146535e38),
    "f32": Fmt("f32", 32, np.uint32, 23, -126, 127, 3.4028234663852886e38),
    "f64": Fmt("f64", 64, np.uint64, 52, -1022, 1023, 1.7976931348623157e308),
    "e4m3": Fmt("e4m3", 8, np.uint8, 3, -6, 8, 448.0),
    "e5m2": Fmt("e5m2", 8, np.uint8, 2, -14, 15, 57344.0),
    "s8": Fmt("s8", 8, np.int8),
    "u8": Fmt("u8", 8, np.uint8),
    "s4": Fmt("s4", 4, np.int8),
    "u4": Fmt("u4", 4, np.uint8),
    "b1": Fmt("b1", 1, np.uint8),
    "s32": Fmt("s32", 32, np.int32),
}
INT_RANGE = {"s8": (-128, 127), "u8": (0, 255), "s4": (-8, 7), "u4": (0, 15), "b1": (0, 1)}
WC_TAG = {"f16": wc.F16, "bf16": wc.BF16, "tf32": wc.TF32, "f32": wc.F32, "f64": wc.F64}


def _fp8_table(name):
    """Values of all 256 codes of e4m3 (float8_e4m3fn) or e5m2 (NaN for NaN codes)."""
    c = np.arange(256)
    s = np.where(c & 0x80, -1.0, 1.0)
    if name == "e4m3":
        e, m = (c >> 3) & 0xF, c & 7
        v = np.where(e == 0, m * 2.0**-9, (1 + m / 8) * 2.0 ** (e - 7))
        v = np.where((e == 15) & (m == 7), np.nan, v)
    else:
        e, m = (c >> 2) & 0x1F, c & 3
        v = np.where(e == 0, m * 2.0**-16, (1 + m / 4) * 2.0 ** (e - 15))
        v = np.where(e == 31, np.where(m == 0, np.inf, np.nan), v)
    return s * v


FP8_TABLE = {n: _fp8_table(n) for n in ("e4m3", "e5m2")}


def encode(x, fmt: str) -> np.ndarray:
    """float64 values -> raw bits of `fmt` (round to nearest even; fp8 saturates to +-max)."""
    x = np.asarray(x, np.float64)
    if fmt in WC_TAG:
        return wc.from_f64(x, WC_TAG[fmt])
    tab = FP8_TABLE[fmt]
    pos = np.where(np.isfinite(tab[:128]), tab[:128], np.inf)
    order = np.argsort(pos, kind="stable")
    vals = pos[order]
    fin = np.isfinite(vals)
    vals, order = vals[fin], order[fin]
    a = np.minimum(np.abs(np.nan_to_num(x, nan=0.0)), vals[-1])
    i = np.clip(np.searchsorted(vals, a), 1, len(vals) - 1)
    lo, hi = vals[i - 1], vals[i]
    pick_hi = (a - lo > hi - a) | ((a - lo == hi - a) & (order[i - 1] & 1 == 1))
    code = np.where(pick_hi, order[i], order[i - 1]).astype(np.uint8)
    code |= np.where(np.signbit(x), 0x80, 0).astype(np.uint8)
    code = np.where(np.isnan(x), 0x7F, code)
    return code.astype(np.uint8)


def decode(bits, fmt: str) -> np.ndarray:
    """Raw bits of `fmt` -> float64 (tf32 words read as fp32, low bits included)."""
    if fmt in WC_TAG:
        return wc.to_f64(bits, WC_TAG[fmt])
    return FP8_TABLE[fmt][np.asarray(bits).astype(np.int64)]


# ----------------------------------------------------------------------------------------
# The configuration table (single source of truth for names, PTX text and register counts).


@dataclasses.dataclass(frozen=True)
class PtxCfg:
    atype: str
    btype: str
    ctype: str
    dtype: str
    m: int
    n: int
    k: int
    alayout: str = "row"
    blayout: str = "col"
    variant: str = ""  # "", "satfinite", "xor", "and"

    @property
    def name(self) -> str:
        s = f"{self.atype}.{self.btype}.{self.ctype}{self.dtype}.m{self.m}n{self.n}k{self.k}"
        if (self.alayout, self.blayout) != ("row", "col"):
            s += "." + self.alayout[0] + self.blayout[0]
        return s + ("." + self.variant if self.variant else "")

    @property
    def quadpair(self) -> bool:
        """mma.m8n8k4 with .f16: one warp runs 4 independent MMAs (one per quadpair)."""
        return self.atype == "f16" and (self.m, self.n, self.k) == (8, 8, 4)

    @property
    def per_warp(self) -> int:
        return 4 if self.quadpair else 1

    @property
    def word_bits(self) -> int:
        return 64 if self.atype == "f64" else 32

    def nregs(self, use: str) -> int:
        rows, cols = self.dims(use)
        f = FMTS[self.elem_type(use)]
        return self.per_warp * rows * cols * f.bits // (32 * self.word_bits)

    def dims(self, use):
        return {"a": (self.m, self.k), "b": (self.k, self.n), "c": (self.m, self.n), "d": (self.m, self.n)}[use]

    def elem_type(self, use):
        return {"a": self.atype, "b": self.btype, "c": self.ctype, "d": self.dtype}[use]

    @property
    def is_int(self):
        return not FMTS[self.atype].is_float

    def ptx(self) -> str:
        shp = f"m{self.m}n{self.n}k{self.k}"
        if self.variant in ("xor", "and"):
            return f"mma.sync.aligned.{shp}.row.col.s32.b1.b1.s32.{self.variant}.popc"
        sat = ".satfinite" if self.variant == "satfinite" else ""
        return (
            f"mma.sync.aligned.{shp}.{self.alayout}.{self.blayout}{sat}."
            f"{self.dtype}.{self.atype}.{self.btype}.{self.ctype}"
        )


def candidate_configs() -> list[PtxCfg]:
    """Every combination tried with ptxas (PTX ISA 9.7.14.5 / 9.7.14.5.14 mma)."""
    out = []
    for c, d in (("f16", "f16"), ("f16", "f32"), ("f32", "f16"), ("f32", "f32")):
        for al, bl in (("row", "col"), ("row", "row"), ("col", "row"), ("col", "col")):
            out.append(PtxCfg("f16", "f16", c, d, 8, 8, 4, al, bl))
        for k in (8, 16):
            out.append(PtxCfg("f16", "f16", c, d, 16, 8, k))
    for k in (8, 16):
        out.append(PtxCfg("bf16", "bf16", "f32", "f32", 16, 8, k))
    for k in (4, 8):
        out.append(PtxCfg("tf32", "tf32", "f32", "f32", 16, 8, k))
    for m, k in ((8, 4), (16, 4), (16, 8), (16, 16)):
        out.append(PtxCfg("f64", "f64", "f64", "f64", m, 8, k))
    for a in ("e4m3", "e5m2"):
        for b in ("e4m3", "e5m2"):
            for c, d in (("f32", "f32"), ("f16", "f16"), ("f16", "f32"), ("f32", "f16")):
                for k in (32, 16):
                    out.append(PtxCfg(a, b, c, d, 16, 8, k))
    for fam, shapes in ((("s8", "u8"), ((8, 16), (16, 16), (16, 32))), (("s4", "u4"), ((8, 32), (16, 32), (16, 64)))):
        for a in fam:
            for b in fam:
                for m, k in shapes:
                    for v in ("", "satfinite"):
                        out.append(PtxCfg(a, b, "s32", "s32", m, 8, k, variant=v))
    for m, k in ((8, 128), (16, 128), (16, 256)):
        for v in ("xor", "and"):
            out.append(PtxCfg("b1", "b1", "s32", "s32", m, 8, k, variant=v))
    return out


# Filled in from `--probe-ptxas` with nvcc 13.0 for sm_90a (see FORMAT_PTX.md); at run time a
# failing full build falls back to probing every configuration again.
REJECTED: dict[str, str] = {
    "f16.f16.f16f32.m16n8k8": ".dtype must be '.f16' when .ctype is '.f16' for 'mma' instruction with shape '.m16n8k8'",
    "f16.f16.f16f32.m16n8k16": ".dtype must be '.f16' when .ctype is '.f16' for 'mma' instruction with shape '.m16n8k16'",
    "f16.f16.f32f16.m8n8k4": ".dtype must be '.f32' when .ctype is '.f32' for 'mma' instruction with shape '.m8n8k4'",
    "f16.f16.f32f16.m8n8k4.rr": ".dtype must be '.f32' when .ctype is '.f32' for 'mma' instruction with shape '.m8n8k4'",
    "f16.f16.f32f16.m8n8k4.cr": ".dtype must be '.f32' when .ctype is '.f32' for 'mma' instruction with shape '.m8n8k4'",
    "f16.f16.f32f16.m8n8k4.cc": ".dtype must be '.f32' when .ctype is '.f32' for 'mma' instruction with shape '.m8n8k4'",
    "f16.f16.f32f16.m16n8k8": ".dtype must be '.f32' when .ctype is '.f32' for 'mma' instruction with shape '.m16n8k8'",
    "f16.f16.f32f16.m16n8k16": ".dtype must be '.f32' when .ctype is '.f32' for 'mma' instruction with shape '.m16n8k16'",
    "e4m3.e4m3.f16f32.m16n8k32": "Unexpected instruction types specified for 'mma'",
    "e4m3.e4m3.f16f32.m16n8k16": "Unexpected instruction types specified for 'mma'",
    "e4m3.e4m3.f32f16.m16n8k32": "Unexpected instruction types specified for 'mma'",
    "e4m3.e4m3.f32f16.m16n8k16": "Unexpected instruction types specified for 'mma'",
    "e4m3.e5m2.f16f32.m16n8k32": "Unexpected instruction types specified for 'mma'",
    "e4m3.e5m2.f16f32.m16n8k16": "Unexpected instruction types specified for 'mma'",
    "e4m3.e5m2.f32f16.m16n8k32": "Unexpected instruction types specified for 'mma'",
    "e4m3.e5m2.f32f16.m16n8k16": "Unexpected instruction types specified for 'mma'",
    "e5m2.e4m3.f16f32.m16n8k32": "Unexpected instruction types specified for 'mma'",
    "e5m2.e4m3.f16f32.m16n8k16": "Unexpected instruction types specified for 'mma'",
    "e5m2.e4m3.f32f16.m16n8k32": "Unexpected instruction types specified for 'mma'",
    "e5m2.e4m3.f32f16.m16n8k16": "Unexpected instruction types specified for 'mma'",
    "e5m2.e5m2.f16f32.m16n8k32": "Unexpected instruction types specified for 'mma'",
    "e5m2.e5m2.f16f32.m16n8k16": "Unexpected instruction types specified for 'mma'",
    "e5m2.e5m2.f32f16.m16n8k32": "Unexpected instruction types specified for 'mma'",
    "e5m2.e5m2.f32f16.m16n8k16": "Unexpected instruction types specified for 'mma'",
}
ACCEPTED_NOTE = "probed with nvcc 13.0 (ptxas) for sm_90a"


# ----------------------------------------------------------------------------------------
# Register fragment layouts (PTX ISA 9.7.14.5.1 m8n8k4 .f16, 9.7.14.5.2-14 m16n8k*, m8n8k*).
# All formulas use only integer arithmetic on (lane, element) so that a JAX front-end can
# mirror them with jnp.


def frag_coords(cfg: PtxCfg, use: str):
    """(q, row, col) int arrays of shape (32, E): element e of lane l (elements low to high:
    register e // P, bits (e % P)*bits.. of it, P elements per register) sits at (row, col) of
    the logical operand of MMA q of the warp (q > 0 only for m8n8k4 .f16, one MMA per
    quadpair)."""
    f = FMTS[cfg.elem_type(use)]
    P = cfg.word_bits // f.bits  # elements per register
    R = cfg.nregs(use)
    lane = np.arange(32)[:, None]
    e = np.arange(R * P)[None, :]
    r, j = e // P, e % P
    g, t = lane >> 2, lane & 3  # groupID, threadID_in_group
    zero = np.zeros_like(lane + e)
    if cfg.quadpair:  # 9.7.14.5.1
        q = ((lane >> 2) & 3) + zero
        hi = (lane >= 16).astype(int) * 4
        l4 = lane & 3
        if use == "a":
            row, col = (l4 + hi, e) if cfg.alayout == "row" else ((e % 4) + hi, l4)
        elif use == "b":
            row, col = (l4, e + hi) if cfg.blayout == "row" else (e, l4 + hi)
        elif f.name == "f16":
            row, col = l4 + hi, e
        else:
            row, col = (lane & 1) + (e & 2) + hi, (e & 4) + (lane & 2) + (e & 1)
        return q + zero, row + zero, col + zero
    if use in ("c", "d"):
        if cfg.m == 8:  # m8n8k*: c0, c1
            return zero, g + zero, t * 2 + e
        return zero, g + 8 * (e >> 1), t * 2 + (e & 1)
    if use == "a":
        if cfg.m == 8:
            return zero, g + zero, t * P + e
        return zero, g + 8 * (r & 1), (r >> 1) * 4 * P + t * P + j
    return zero, r * 4 * P + t * P + j, g + zero  # b (both m8 and m16 shapes)


def elem_bits(x: np.ndarray, fmt: str) -> np.ndarray:
    """Logical elements -> their `bits`-wide register patterns as uint64."""
    b = FMTS[fmt].bits
    v = np.asarray(x)
    if v.dtype.kind == "i":
        v = v.astype(np.int64) & ((1 << b) - 1)
    return v.astype(np.uint64) & np.uint64((1 << b) - 1 if b < 64 else 0xFFFFFFFFFFFFFFFF)


def bits_elem(p: np.ndarray, fmt: str) -> np.ndarray:
    """Inverse of elem_bits."""
    f = FMTS[fmt]
    p = p.astype(np.uint64)
    if np.dtype(f.dtype).kind == "i":
        half = np.int64(1 << (f.bits - 1))
        return ((p.astype(np.int64) ^ half) - half).astype(f.dtype)
    return p.astype(f.dtype)


def pack(x: np.ndarray, cfg: PtxCfg, use: str) -> np.ndarray:
    """Logical (T, rows, cols) -> register words (T / per_warp, 32, nregs), uint32 or uint64."""
    T = x.shape[0]
    qn = cfg.per_warp
    if T % qn:
        raise ValueError(f"{cfg.name}: trial count {T} is not a multiple of {qn}")
    q, row, col = frag_coords(cfg, use)
    W = T // qn
    t = np.arange(W)[:, None, None] * qn + q[None]
    el = elem_bits(x[t, row[None], col[None]], cfg.elem_type(use))  # (W, 32, E)
    f = FMTS[cfg.elem_type(use)]
    P = cfg.word_bits // f.bits
    el = el.reshape(W, 32, -1, P) << (np.arange(P, dtype=np.uint64) * np.uint64(f.bits))
    words = np.bitwise_or.reduce(el, axis=-1)
    return words.astype(np.uint64 if cfg.word_bits == 64 else np.uint32)


def unpack(words: np.ndarray, cfg: PtxCfg, use: str) -> np.ndarray:
    """Register words (W, 32, nregs) -> logical (W * per_warp, rows, cols)."""
    W = words.shape[0]
    f = FMTS[cfg.elem_type(use)]
    P = cfg.word_bits // f.bits
    w = words.astype(np.uint64)[..., None] >> (np.arange(P, dtype=np.uint64) * np.uint64(f.bits))
    mask = np.uint64((1 << f.bits) - 1 if f.bits < 64 else 0xFFFFFFFFFFFFFFFF)
    el = bits_elem((w & mask).reshape(W, 32, -1), f.name)
    q, row, col = frag_coords(cfg, use)
    rows, cols = cfg.dims(use)
    out = np.zeros((W * cfg.per_warp, rows, cols), f.dtype)
    t = np.arange(W)[:, None, None] * cfg.per_warp + q[None]
    out[t, row[None], col[None]] = el
    return out


def pack_chain(x: np.ndarray, cfg: PtxCfg, use: str, steps: int) -> np.ndarray:
    """A (T, M, steps*k) or B (T, steps*k, N) -> (W, steps, 32, nregs) words."""
    k = cfg.k
    parts = [x[:, :, s * k:(s + 1) * k] if use == "a" else x[:, s * k:(s + 1) * k, :] for s in range(steps)]
    return np.stack([pack(np.ascontiguousarray(p), cfg, use) for p in parts], axis=1)


# ----------------------------------------------------------------------------------------
# Code generation and build.


def _constraint(cfg, use):
    t = cfg.elem_type(use)
    if t == "f64":
        return "d"
    if t == "f32" and use in ("c", "d"):
        return "f"
    return "r"


def gen_op(i: int, cfg: PtxCfg) -> str:
    na, nb, nc, nd = (cfg.nregs(u) for u in "abcd")
    cd, cc = _constraint(cfg, "d"), _constraint(cfg, "c")
    ca, cb = _constraint(cfg, "a"), _constraint(cfg, "b")
    idx = iter(range(100))
    grp = lambda n: "{" + ", ".join(f"%{next(idx)}" for _ in range(n)) + "}"
    text = f"{cfg.ptx()} {grp(nd)}, {grp(na)}, {grp(nb)}, {grp(nc)};"
    R = "uint64_t" if cfg.word_bits == 64 else "uint32_t"

    def inp(arr, c, n):
        if c == "d":
            return [f'"d"(__longlong_as_double((long long){arr}[{j}]))' for j in range(n)]
        if c == "f":
            return [f'"f"(__uint_as_float({arr}[{j}]))' for j in range(n)]
        return [f'"r"({arr}[{j}])' for j in range(n)]

    tmp = {"d": "double", "f": "float", "r": "uint32_t"}[cd]
    outs = ", ".join(f'"={cd}"(o{j})' for j in range(nd))
    ins = ", ".join(inp("a", ca, na) + inp("b", cb, nb) + inp("c", cc, nc))
    conv = {"d": "(uint64_t)__double_as_longlong(o{j})", "f": "__float_as_uint(o{j})", "r": "o{j}"}[cd]
    stores = " ".join(f"d[{j}] = {conv.format(j=j)};" for j in range(nd))
    decl = ", ".join(f"o{j}" for j in range(nd))
    return (
        f"struct Op{i} {{ // {cfg.name}\n  using R = {R};\n"
        f"  static constexpr int NA = {na}, NB = {nb}, NC = {nc}, ND = {nd};\n"
        f"  static __device__ __forceinline__ void run(const R* a, const R* b, const R* c, R* d) {{\n"
        f"    {tmp} {decl};\n"
        f'    asm volatile("{text}" : {outs} : {ins});\n'
        f"    {stores}\n  }}\n}};\n"
    )


def gen_inc(cfgs: list[PtxCfg]) -> str:
    body = "".join(gen_op(i, c) for i, c in enumerate(cfgs))
    table = " \\\n".join(f'  X("{c.name}", Op{i})' for i, c in enumerate(cfgs))
    return f"// generated by capture_ptx.py: do not edit\n{body}\n#define PTXMMA_TABLE(X) \\\n{table}\n"


def _compile(cfgs, arch, out: pathlib.Path, nvcc="nvcc", cubin=False):
    return driver.nvcc_table(SRC, "ptxmma_ops.inc", gen_inc(cfgs), out, [f"-arch={arch}"], nvcc,
                             cubin)


def probe_ptxas(cfgs, arch, nvcc="nvcc", jobs=8):
    """{name: error message} for the configurations that do not compile alone."""
    return driver.probe_ptxas(cfgs, lambda c, out: _compile([c], arch, out, nvcc, cubin=True),
                              "", jobs)


def build(arch: str, nvcc="nvcc"):
    """Builds libptxmma for `arch`; returns (path, configs in the library, rejected)."""
    cfgs = [c for c in candidate_configs() if c.name not in REJECTED]
    driver.BUILD.mkdir(exist_ok=True)
    key = driver.source_key(SRC.read_bytes(), gen_inc(cfgs), arch)
    lib = driver.BUILD / f"libptxmma_{arch}_{key}.so"
    cfgs, bad = driver.build_table(f"ptxmma.cu for {arch}", lib, cfgs,
                                   lambda cs, out, cubin: _compile(cs, arch, out, nvcc, cubin),
                                   nvcc, "")
    return lib, cfgs, {**REJECTED, **bad}


class PtxLib:
    def __init__(self, path, cfgs):
        L, device = driver.load(path, "pm")
        self.L, self.check = L, driver.checker(L, "pm")
        L.pm_info.restype = ctypes.c_char_p
        self.name, self.cc, self.device = device.name, device.cc, str(device)
        self.index = {}
        info = (ctypes.c_int * 5)()
        by_name = {c.name: c for c in cfgs}
        for i in range(L.pm_count()):
            nm = L.pm_info(i, info).decode()
            c = by_name[nm]
            want = [c.nregs(u) for u in "abcd"] + [c.word_bits // 8]
            if list(info) != want:
                raise RuntimeError(f"{nm}: library says {list(info)}, table says {want}")
            self.index[nm] = i

    def run(self, cfg: PtxCfg, A, B, C, steps=1):
        """A (W, steps, 32, NA), B (W, steps, 32, NB), C (W, 32, NC) words -> D (W, 32, ND)."""
        wd = np.uint64 if cfg.word_bits == 64 else np.uint32
        A, B, C = (np.ascontiguousarray(v, wd) for v in (A, B, C))
        W = C.shape[0]
        D = np.zeros((W, 32, cfg.nregs("d")), wd)
        p = lambda a: a.ctypes.data_as(ctypes.c_void_p)
        self.check(self.L.pm_run(self.index[cfg.name], ctypes.c_longlong(W), steps, p(A), p(B),
                                 p(C), p(D)))
        return D


# ----------------------------------------------------------------------------------------
# Input generators. Each returns float64 values (exact in the format where it matters) or,
# for random_bits, raw bits; `make_trials` encodes them.

FLOAT_KINDS = ("normal", "wide", "tiny", "probe", "cancel", "special", "random_bits", "zero_sign", "block")
INT_KINDS = ("int", "int_big_c", "int_extreme")


def rand_exact(rng, fmt, shape, elo, ehi):
    """Random sign * (1 + f) * 2^e, e uniform in [elo, ehi] clipped to the normal range."""
    f = FMTS[fmt]
    lo, hi = max(elo, f.emin), min(ehi, f.emax)
    hi = max(lo, hi)
    e = rng.integers(lo, hi + 1, shape)
    mb = min(f.mbits, 52)
    frac = rng.integers(0, 1 << mb, shape, dtype=np.int64) / float(1 << mb)
    v = rng.choice([-1.0, 1.0], shape) * (1 + frac) * 2.0**e
    return np.clip(v, -f.maxval, f.maxval)


def rand_sub(rng, fmt, shape):
    """Random subnormals of `fmt`."""
    f = FMTS[fmt]
    mb = min(f.mbits, 52)
    return rng.choice([-1.0, 1.0], shape) * rng.integers(1, 1 << mb, shape) * 2.0 ** (f.emin - mb)


def rand_bits(rng, fmt, shape):
    b = 32 if fmt == "tf32" else FMTS[fmt].bits
    u = rng.integers(0, 1 << 32, shape, dtype=np.uint64) << np.uint64(32)
    u |= rng.integers(0, 1 << 32, shape, dtype=np.uint64)
    if b < 64:
        u &= np.uint64((1 << b) - 1)
    return u.astype(FMTS[fmt].dtype)


def special_bits(fmt):
    return {
        "f16": [0x7C00, 0xFC00, 0x7E00, 0x7BFF, 0xFBFF, 0x0000, 0x8000, 0x0001, 0x7C01],
        "bf16": [0x7F80, 0xFF80, 0x7FC0, 0x7F7F, 0xFF7F, 0x0000, 0x8000, 0x0001, 0xFFC1],
        "tf32": [0x7F800000, 0xFF800000, 0x7FC00000, 0x7F7FE000, 0xFF7FE000, 0, 0x80000000, 0x2000, 0x7F802000],
        "f32": [0x7F800000, 0xFF800000, 0x7FC00000, 0x7F7FFFFF, 0xFF7FFFFF, 0, 0x80000000, 1, 0xFFC00001],
        "f64": [0x7FF0000000000000, 0xFFF0000000000000, 0x7FF8000000000000, 0x7FEFFFFFFFFFFFFF,
                0xFFEFFFFFFFFFFFFF, 0, 0x8000000000000000, 1, 0x7FF0000000000001],
        "e4m3": [0x7F, 0xFF, 0x7E, 0xFE, 0x00, 0x80, 0x01, 0x81],
        "e5m2": [0x7C, 0xFC, 0x7E, 0x7B, 0xFB, 0x00, 0x80, 0x01, 0x7D],
    }[fmt]


def _sprinkle(rng, bits, fmt, p=0.08):
    sel = rng.random(bits.shape) < p
    sp = np.array(special_bits(fmt), np.uint64).astype(bits.dtype)
    bits = bits.copy()
    bits[sel] = rng.choice(sp, int(sel.sum()))
    return bits


def exact_neg_sum(a, b):
    """-(A @ B) per trial, each element the correctly rounded float64 of the exact sum."""
    T, m, k = a.shape
    n = b.shape[2]
    out = np.empty((T, m, n))
    prod = a[:, :, :, None] * b[:, None, :, :]  # (T, m, k, n), exact for products of <= 26 bits
    for t in range(T):
        for i in range(m):
            for j in range(n):
                out[t, i, j] = -math.fsum(prod[t, i, :, j])
    return out


def gen_float(rng, kind, cfg: PtxCfg, T, k_total=None):
    """T trials of `kind` for a float configuration: (A, B, C) raw bits, logical layouts."""
    m, n = cfg.m, cfg.n
    k = k_total or cfg.k
    fa, fb, fc = cfg.atype, cfg.btype, cfg.ctype
    FA, FB, FC = FMTS[fa], FMTS[fb], FMTS[fc]
    N = rng.standard_normal
    sa, sb, sc = (T, m, k), (T, k, n), (T, m, n)
    lowbits = False
    if kind == "normal":
        a, b, c = N(sa), N(sb), N(sc)
        lowbits = True
    elif kind == "positive":
        a, b, c = 4 * rng.random(sa), 4 * rng.random(sb), 4 * rng.random(sc)
    elif kind == "wide":
        lim = 60 if fa == "f64" else 24
        a = rand_exact(rng, fa, sa, -lim, lim)
        b = rand_exact(rng, fb, sb, -lim, lim)
        lo = max(FA.emin, -lim) + max(FB.emin, -lim)
        hi = min(FA.emax, lim) + min(FB.emax, lim)
        c = rand_exact(rng, fc, sc, max(lo, FC.emin), min(hi, FC.emax - 1))
        lowbits = True
    elif kind == "tiny":
        u = rng.random(sa)
        a = np.where(u < 0.4, rand_sub(rng, fa, sa), np.where(u < 0.7, rand_exact(rng, fa, sa, FA.emin, FA.emin + 3), N(sa)))
        u = rng.random(sb)
        b = np.where(u < 0.25, rand_sub(rng, fb, sb), np.where(u < 0.5, rand_exact(rng, fb, sb, FB.emin, FB.emin + 3), rand_exact(rng, fb, sb, -3, 3)))
        u = rng.random(sc)
        c = np.where(u < 0.3, rand_sub(rng, fc, sc), np.where(u < 0.6, rand_exact(rng, fc, sc, FC.emin, FC.emin + 6), np.copysign(0.0, N(sc))))
        lowbits = True
    elif kind == "probe":
        a, b, c = _probe(rng, cfg, T, k)
        lowbits = rng.random() < 0.5
    elif kind == "cancel":
        if fa == "f64":
            a = np.round(N(sa) * 2**25) / 2**25
            b = np.round(N(sb) * 2**25) / 2**25
        else:
            a, b = decode(encode(N(sa), fa), fa), decode(encode(N(sb), fb), fb)
        c = exact_neg_sum(a, b)
    elif kind == "special":
        A = _sprinkle(rng, encode(N(sa), fa), fa)
        B = _sprinkle(rng, encode(N(sb), fb), fb)
        C = _sprinkle(rng, encode(N(sc), fc), fc)
        return A, B, C
    elif kind == "random_bits":
        return rand_bits(rng, fa, sa), rand_bits(rng, fb, sb), rand_bits(rng, fc, sc)
    elif kind == "zero_sign":
        a, b, c = _zero_sign(rng, cfg, T, k)
    elif kind == "block":
        a, b, c = _block(rng, cfg, T, k)
    else:
        raise ValueError(f"kind={kind!r}; allowed: {FLOAT_KINDS + ('positive',)}")
    A, B, C = encode(a, fa), encode(b, fb), encode(c, fc)
    if lowbits and fa == "tf32":  # raw fp32 words: keep (or add) low 13 bits as generated
        A = A | rng.integers(0, 1 << 13, A.shape).astype(np.uint32) * (A & 0x7F800000 != 0x7F800000)
        B = B | rng.integers(0, 1 << 13, B.shape).astype(np.uint32) * (B & 0x7F800000 != 0x7F800000)
    return A, B, C


def _acc_mbits(cfg):
    return min(FMTS[cfg.dtype].mbits, FMTS[cfg.ctype].mbits) if cfg.ctype != cfg.dtype else FMTS[cfg.ctype].mbits


def _probe(rng, cfg, T, k):
    """Per row one dominant product (slot k0), one 2^-s smaller (slot k1, s = row part +
    column part), tiny or zero elsewhere; C = +-(1+f) 2^(e0 + d) exposing alignment,
    truncation and carries."""
    m, n = cfg.m, cfg.n
    FA, FB, FC = FMTS[cfg.atype], FMTS[cfg.btype], FMTS[cfg.ctype]
    a, b, c = np.zeros((T, m, k)), np.zeros((T, k, n)), np.zeros((T, m, n))
    macc = _acc_mbits(cfg)
    ra = min(FA.emax - FA.emin, 40)
    rb = min(FB.emax - FB.emin, 40)
    for t in range(T):
        k0, k1 = rng.choice(k, 2, replace=False)
        ea = min(FA.emax, 4) if FA.emax - FA.emin > 20 else FA.emax - 1
        eb = min(FB.emax, 4) if FB.emax - FB.emin > 20 else FB.emax - 1
        a[t, :, k0] = rand_exact(rng, cfg.atype, m, ea, ea)
        b[t, k0, :] = rand_exact(rng, cfg.btype, n, eb, eb)
        step = max(1, min(ra, macc + 8) // max(1, m - 1))
        sa_ = np.minimum(np.arange(m) * step + int(rng.integers(0, 2)), ra)
        sb_ = np.minimum(np.arange(n) * max(1, min(rb, 8) // max(1, n - 1)), rb)
        a[t, :, k1] = rng.choice([-1.0, 1.0], m) * (1 + rng.integers(0, 1 << min(FA.mbits, 20), m) / 2.0 ** min(FA.mbits, 20)) * 2.0 ** (ea - sa_)
        b[t, k1, :] = rng.choice([-1.0, 1.0], n) * (1 + rng.integers(0, 1 << min(FB.mbits, 20), n) / 2.0 ** min(FB.mbits, 20)) * 2.0 ** (eb - sb_)
        if rng.random() < 0.5:
            rest = [kk for kk in range(k) if kk not in (k0, k1)]
            for kk in rest:
                a[t, :, kk] = rand_exact(rng, cfg.atype, m, ea - ra, ea - ra // 2)
                b[t, kk, :] = rand_exact(rng, cfg.btype, n, eb - rb, eb - rb // 2)
        d = rng.integers(-(macc + 6), 7, (m, n))
        c[t] = rng.choice([-1.0, 1.0], (m, n)) * (
            1 + rng.integers(0, 1 << min(FC.mbits, 30), (m, n)) / 2.0 ** min(FC.mbits, 30)) * 2.0 ** np.clip(ea + eb + d, FC.emin, FC.emax - 1)
    return a, b, c


def _zero_sign(rng, cfg, T, k):
    m, n = cfg.m, cfg.n
    a, b = np.zeros((T, m, k)), np.zeros((T, k, n))
    c = np.copysign(0.0, rng.choice([-1.0, 1.0], (T, m, n)))
    sgn = lambda s: rng.choice([-1.0, 1.0], s)
    tinyA = 2.0 ** (FMTS[cfg.atype].emin - min(FMTS[cfg.atype].mbits, 52))
    tinyB = 2.0 ** (FMTS[cfg.btype].emin - min(FMTS[cfg.btype].mbits, 52))
    for t in range(T):
        v = t % 5
        if v == 0:  # all products +-0
            a[t] = np.copysign(0.0, sgn((m, k)))
            b[t] = rng.standard_normal((k, n))
        elif v == 1 and k >= 2:  # exact x, -x pairs
            x = rng.standard_normal((m, k // 2))
            a[t, :, 0:2 * (k // 2):2], a[t, :, 1:2 * (k // 2):2] = x, x
            w = rng.standard_normal((k // 2, n))
            b[t, 0:2 * (k // 2):2], b[t, 1:2 * (k // 2):2] = w, -w
        elif v == 2:  # tiniest operands, mixed signs: products far below the accumulator range
            a[t] = sgn((m, k)) * tinyA * rng.integers(1, 4, (m, k))
            b[t] = sgn((k, n)) * tinyB * rng.integers(1, 4, (k, n))
        elif v == 3:  # a single tiny product
            kk = int(rng.integers(k))
            a[t] = np.copysign(0.0, sgn((m, k)))
            b[t] = np.copysign(0.0, sgn((k, n)))
            a[t, :, kk] = sgn(m) * tinyA
            b[t, kk, :] = sgn(n) * tinyB
        else:  # all the same sign
            s = float(sgn(1)[0])
            a[t] = s * tinyA * rng.integers(1, 4, (m, k))
            b[t] = tinyB * rng.integers(1, 4, (k, n))
    return a, b, c


def _block(rng, cfg, T, k):
    """A huge product in k-slot j (j = trial % k: every slot in turn), small products 2^-d_i
    below it elsewhere (d_i grows with the row, around the accumulator's fraction width)."""
    m, n = cfg.m, cfg.n
    FA, FB = FMTS[cfg.atype], FMTS[cfg.btype]
    macc = _acc_mbits(cfg)
    a, b, c = np.zeros((T, m, k)), np.zeros((T, k, n)), np.zeros((T, m, n))
    ea = min(FA.emax - 1, 8)
    eb = min(FB.emax - 1, 8)
    for t in range(T):
        j = t % k
        d = np.clip(macc - 8 + np.arange(m) * max(1, 20 // max(1, m - 1)), 1, None)
        a[t] = rng.choice([-1.0, 1.0], (m, k)) * (1 + rng.integers(0, 8, (m, k)) / 8) * 2.0 ** (ea - (d[:, None] + 1) // 2)
        b[t] = rng.choice([-1.0, 1.0], (k, n)) * (1 + rng.integers(0, 4, (k, n)) / 4) * 2.0 ** (eb - d[0] // 2)
        a[t, :, j] = rng.choice([-1.0, 1.0], m) * (1 + rng.integers(0, 8, m) / 8) * 2.0**ea
        b[t, j, :] = rng.choice([-1.0, 1.0], n) * (1 + rng.integers(0, 4, n) / 4) * 2.0**eb
        if t % 2:
            c[t] = rng.choice([-1.0, 1.0], (m, n)) * 2.0 ** (ea + eb - d[:, None] + 0 * np.arange(n))
    return a, b, c


def gen_int(rng, kind, cfg: PtxCfg, T):
    m, n, k = cfg.m, cfg.n, cfg.k
    (alo, ahi), (blo, bhi) = INT_RANGE[cfg.atype], INT_RANGE[cfg.btype]
    A = rng.integers(alo, ahi + 1, (T, m, k))
    B = rng.integers(blo, bhi + 1, (T, k, n))
    if kind == "int":
        C = rng.integers(-1000, 1001, (T, m, n))
    elif kind == "int_big_c":
        C = rng.integers(-(1 << 31), 1 << 31, (T, m, n))
    elif kind == "int_extreme":
        pick = lambda lo, hi, s: np.where(rng.random(s) < 0.8, rng.choice([lo, hi] if lo < 0 else [hi], s), rng.integers(lo, hi + 1, s))
        A, B = pick(alo, ahi, (T, m, k)), pick(blo, bhi, (T, k, n))
        lim = (1 << 31) - 1
        C = rng.choice([lim, -lim - 1, lim - 1000, -lim + 1000, 0, 1 << 30, -(1 << 30)], (T, m, n))
        C = C + rng.integers(-64, 65, (T, m, n))
        C = np.clip(C, -lim - 1, lim)
    else:
        raise ValueError(f"kind={kind!r}; allowed: {INT_KINDS}")
    return A.astype(FMTS[cfg.atype].dtype), B.astype(FMTS[cfg.btype].dtype), C.astype(np.int32)


def trials_per_kind(cfg: PtxCfg, scale: float, quick: bool) -> int:
    if cfg.atype in ("e4m3", "e5m2") and cfg.k == 32:
        base = 256
    elif cfg.atype in ("e4m3", "e5m2", "f16", "bf16", "tf32"):
        base = 64
    else:
        base = 32
    t = max(1, int(round((4 if quick else base) * scale)))
    return -(-t // cfg.per_warp) * cfg.per_warp


def make_trials(rng, cfg: PtxCfg, per_kind: int):
    As, Bs, Cs, kinds = [], [], [], []
    for kind in (INT_KINDS if cfg.is_int else FLOAT_KINDS):
        A, B, C = gen_int(rng, kind, cfg, per_kind) if cfg.is_int else gen_float(rng, kind, cfg, per_kind)
        As.append(A), Bs.append(B), Cs.append(C)
        kinds += [kind] * per_kind
    return np.concatenate(As), np.concatenate(Bs), np.concatenate(Cs), np.array(kinds)


# ----------------------------------------------------------------------------------------
# Sanity report (catches a wrong fragment layout at once in the log).


def sanity(cfg: PtxCfg, A, B, C, D, kinds):
    sel = np.isin(kinds, ["normal", "int", "positive"])
    if not sel.any():
        return ""
    if cfg.is_int:
        a, b = A[sel].astype(np.int64), B[sel].astype(np.int64)
        if cfg.variant == "xor":
            want = np.sum(a[:, :, :, None] ^ b[:, None, :, :], axis=2)
        elif cfg.variant == "and":
            want = np.sum(a[:, :, :, None] & b[:, None, :, :], axis=2)
        else:
            want = a @ b
        want = want + C[sel].astype(np.int64)
        if cfg.variant == "satfinite":
            want = np.clip(want, -(1 << 31), (1 << 31) - 1)
        want = ((want + (1 << 31)) % (1 << 32) - (1 << 31)).astype(np.int32)
        bad = int(np.sum(want != D[sel]))
        return f"exact int check: {bad} of {want.size} differ"
    a = decode(A[sel], cfg.atype)
    b = decode(B[sel], cfg.btype)
    ref = a @ b + decode(C[sel], cfg.ctype)
    scale = np.abs(a) @ np.abs(b) + np.abs(decode(C[sel], cfg.ctype))
    err = np.abs(decode(D[sel], cfg.dtype) - ref) / np.maximum(scale, 1e-300)
    return f"normal: max |D - A@B - C| / (|A|@|B| + |C|) = {np.nanmax(err):.2e}"


# ----------------------------------------------------------------------------------------
# Captures.


def run_cfg(lib: PtxLib, cfg, A, B, C, steps=1):
    """Logical A, B, C -> logical D through the registers."""
    if steps == 1:
        Aw, Bw = pack(A, cfg, "a")[:, None], pack(B, cfg, "b")[:, None]
    else:
        Aw, Bw = pack_chain(A, cfg, "a", steps), pack_chain(B, cfg, "b", steps)
    Dw = lib.run(cfg, Aw, Bw, pack(C, cfg, "c"), steps)
    return unpack(Dw, cfg, "d")


def capture_ptx(lib, cfgs, rng, scale, quick):
    out = {"device": np.array(lib.device)}
    for cfg in cfgs:
        t = time.time()
        try:
            per = trials_per_kind(cfg, scale, quick)
            A, B, C, kinds = make_trials(rng, cfg, per)
            D = run_cfg(lib, cfg, A, B, C)
        except Exception as e:  # one configuration never stops the run
            log(f"  FAILED {cfg.name}: {type(e).__name__}: {e}")
            continue
        key = f"ptx/{cfg.name}"
        for part, v in (("A", A), ("B", B), ("C", C), ("D", D), ("kind", kinds)):
            out[f"{key}/{part}"] = v
        log(f"  {key}: {len(kinds)} trials ({time.time() - t:.1f} s); {sanity(cfg, A, B, C, D, kinds)}")
    return out


CHAIN_LONG = [
    ("e4m3.e4m3.f32f32.m16n8k32", 128),
    ("e5m2.e5m2.f32f32.m16n8k32", 128),
    ("e4m3.e5m2.f32f32.m16n8k32", 128),
    ("f16.f16.f32f32.m16n8k16", 256),
    ("bf16.bf16.f32f32.m16n8k16", 256),
]
CHAIN_KINDS = ("normal", "positive", "wide")


def capture_chain(lib, cfgs, rng, scale, quick):
    out = {"device": np.array(lib.device)}
    by = {c.name: c for c in cfgs}
    plan = [(by[n], s) for n, s in CHAIN_LONG if n in by]
    plan += [(c, 4) for c in cfgs if not c.is_int and c.ctype == c.dtype and (c.alayout, c.blayout) == ("row", "col")]
    for cfg, steps in plan:
        t0 = time.time()
        try:
            T = max(cfg.per_warp, int(round((3 if quick else 16) * scale)))
            T = -(-T // cfg.per_warp) * cfg.per_warp
            kinds = np.array([CHAIN_KINDS[i % 3] for i in range(T)])
            A = np.zeros((T, cfg.m, cfg.k * steps), FMTS[cfg.atype].dtype)
            B = np.zeros((T, cfg.k * steps, cfg.n), FMTS[cfg.btype].dtype)
            C = np.zeros((T, cfg.m, cfg.n), FMTS[cfg.ctype].dtype)
            for kd in CHAIN_KINDS:
                idx = np.flatnonzero(kinds == kd)
                if len(idx):
                    a, b, c = gen_float(rng, kd, cfg, len(idx), k_total=cfg.k * steps)
                    A[idx], B[idx], C[idx] = a, b, c
            D = run_cfg(lib, cfg, A, B, C, steps)
        except Exception as e:
            log(f"  FAILED chain {cfg.name}x{steps}: {type(e).__name__}: {e}")
            continue
        key = f"chain/ptx/{cfg.name}x{steps}"
        for part, v in (("A", A), ("B", B), ("C", C), ("D", D), ("kind", kinds)):
            out[f"{key}/{part}"] = v
        log(f"  {key}: {T} trials ({time.time() - t0:.1f} s); {sanity(cfg, A, B, C, D, kinds)}")
    return out


EDGE_SUB = [f"f16.{cd}.{s}.rc" for cd in ("f32f32", "f16f16", "f16f32", "f32f16") for s in ("m16n16k16", "m32n8k16")]
EDGE_ZERO = ["bf16.f32f32.m16n16k16.rc", "bf16.f32f32.m32n8k16.rc", "tf32.f32f32.m16n16k8.rc",
             "tf32cvt.f32f32.m16n16k8.rc", "f16.f32f32.m16n16k16.rc", "f16.f16f16.m16n16k16.rc"]
EDGE_TF32 = ["tf32.f32f32.m16n16k8.rc", "tf32cvt.f32f32.m16n16k8.rc"]
WC_FMT = {wc.F16: "f16", wc.BF16: "bf16", wc.TF32: "tf32", wc.F32: "f32"}


def edge_sub(rng, m, n, k, cfmt, T):
    """(a) fp16 subnormals mixed with normals; a subnormal*normal product is the largest (or
    next to it) at several scales, the rest placed below it so alignment shows."""
    a, b, c = np.zeros((T, m, k)), np.zeros((T, k, n)), np.zeros((T, m, n))
    for t in range(T):
        k0, k1 = rng.choice(k, 2, replace=False)
        sub = rng.choice([-1.0, 1.0], m) * rng.integers(1, 1024, m) * 2.0**-24
        a[t] = np.where(rng.random((m, k)) < 0.5, rand_sub(rng, "f16", (m, k)), rand_exact(rng, "f16", (m, k), -14, -10))
        a[t, :, k0] = sub
        eb = int(rng.integers(-2, 16))
        b[t] = rand_exact(rng, "f16", (k, n), eb - 12, eb - 2)
        b[t, k0, :] = rand_exact(rng, "f16", n, eb, eb)
        if t % 2:  # a normal*normal product just above the subnormal one
            a[t, :, k1] = rand_exact(rng, "f16", m, -14, -13)
            b[t, k1, :] = rand_exact(rng, "f16", n, eb, eb)
        ec = np.log2(np.maximum(np.abs(sub), 2.0**-24))[:, None] + eb + rng.integers(-14, 4, (m, n))
        cm = {"f16": (-14, 15), "f32": (-126, 127)}[cfmt]
        c[t] = np.where(rng.random((m, n)) < 0.2, 0.0, rng.choice([-1.0, 1.0], (m, n)) * (1 + rng.integers(0, 1024, (m, n)) / 1024) * 2.0 ** np.clip(np.floor(ec), cm[0], cm[1] - 1))
        if cfmt == "f16" and t % 4 == 3:
            c[t] = rand_sub(rng, "f16", (m, n))
    return a, b, c


def edge_zero(rng, at, m, n, k, T):
    """(b) every product far below the fp32 range, C = +-0: mixed signs, single, same sign."""
    fmt = "tf32" if at == wc.TF32 else WC_FMT[at]
    F = FMTS[fmt]
    tiny = 2.0 ** (F.emin - F.mbits)
    a, b = np.zeros((T, m, k)), np.zeros((T, k, n))
    c = np.copysign(0.0, rng.choice([-1.0, 1.0], (T, m, n)))
    kinds = []
    for t in range(T):
        v = t % 3
        mag = lambda s: tiny * rng.integers(1, 8, s) * 2.0 ** rng.integers(0, 6, s)
        if v == 0:
            a[t] = rng.choice([-1.0, 1.0], (m, k)) * mag((m, k))
            b[t] = rng.choice([-1.0, 1.0], (k, n)) * mag((k, n))
            kinds.append("zero_sign_mixed")
        elif v == 1:
            kk = int(rng.integers(k))
            a[t] = np.copysign(0.0, rng.choice([-1.0, 1.0], (m, k)))
            b[t] = np.copysign(0.0, rng.choice([-1.0, 1.0], (k, n)))
            a[t, :, kk] = rng.choice([-1.0, 1.0], m) * mag(m)
            b[t, kk, :] = rng.choice([-1.0, 1.0], n) * mag(n)
            kinds.append("zero_sign_single")
        else:
            s = float(rng.choice([-1.0, 1.0]))
            a[t] = s * mag((m, k))
            b[t] = mag((k, n))
            kinds.append("zero_sign_same")
    return a, b, c, kinds


def edge_tf32(rng, m, n, k, T):
    """(c) fp32 words with low 13 bits set, in the fp32 subnormal and small-normal range."""
    def words(shape):
        u = rng.random(shape)
        e = np.where(u < 0.4, 0, rng.integers(1, 12, shape)).astype(np.uint32)
        f = rng.integers(0, 1 << 23, shape).astype(np.uint32) | rng.integers(1, 1 << 13, shape).astype(np.uint32)
        s = rng.integers(0, 2, shape).astype(np.uint32) << 31
        w = s | (e << 23) | f
        big = rng.random(shape) < 0.3  # some normal-sized operands so products reach fp32 normals
        return np.where(big, encode(rng.standard_normal(shape) * 2.0 ** rng.integers(60, 120, shape), "f32") | np.uint32(0x1FFF) & rng.integers(0, 1 << 13, shape).astype(np.uint32), w)
    A, B = words((T, m, k)), words((T, k, n))
    C = np.where(rng.random((T, m, n)) < 0.5, words((T, m, n)), encode(np.copysign(0.0, rng.standard_normal((T, m, n))), "f32"))
    return A, B, C


def capture_edges(wlib, rng, scale, quick):
    out = {"device": np.array(wlib.device)}
    T = max(4, int(round((8 if quick else 256) * scale)))
    jobs = {}
    for name in EDGE_SUB:
        jobs.setdefault(name, []).append("sub")
    for name in EDGE_ZERO:
        jobs.setdefault(name, []).append("zero")
    for name in EDGE_TF32:
        jobs.setdefault(name, []).append("tf32")
    tf32_inputs = {}
    for name, classes in jobs.items():
        try:
            cfg = wlib.mma[name]
            if wlib.cc < cfg["need"]:
                log(f"  skip {name}: needs sm_{cfg['need']}")
                continue
            m, n, k = cfg["m"], cfg["n"], cfg["k"]
            at, ct = cfg["at"], cfg["ct"]
            afmt = "tf32" if at == wc.TF32 else WC_FMT[at]
            cfmt = WC_FMT[ct]
            As, Bs, Cs, kinds = [], [], [], []
            for cl in classes:
                if cl == "sub":
                    a, b, c = edge_sub(rng, m, n, k, cfmt, T)
                    As.append(encode(a, "f16")), Bs.append(encode(b, "f16")), Cs.append(encode(c, cfmt))
                    kinds += ["sub_probe"] * T
                elif cl == "zero":
                    base = name.replace("tf32cvt.", "tf32.")
                    if base in tf32_inputs and "zero" in tf32_inputs[base]:
                        A, B, C, kk = tf32_inputs[base]["zero"]
                    else:
                        a, b, c, kk = edge_zero(rng, at, m, n, k, T)
                        A, B, C = encode(a, afmt), encode(b, afmt), encode(c, cfmt)
                        tf32_inputs.setdefault(name, {})["zero"] = (A, B, C, kk)
                    As.append(A), Bs.append(B), Cs.append(C), kinds.extend(kk)
                else:
                    base = name.replace("tf32cvt.", "tf32.")
                    if base in tf32_inputs and "tf32" in tf32_inputs[base]:
                        A, B, C = tf32_inputs[base]["tf32"]
                    else:
                        A, B, C = edge_tf32(rng, m, n, k, T)
                        tf32_inputs.setdefault(name, {})["tf32"] = (A, B, C)
                    As.append(A), Bs.append(B), Cs.append(C)
                    kinds += ["tf32_lowbits_tiny"] * T
            A, B, C = np.concatenate(As), np.concatenate(Bs), np.concatenate(Cs)
            D = wc.run_mma(wlib, cfg, A, B, C)
        except Exception as e:
            log(f"  FAILED edges {name}: {type(e).__name__}: {e}")
            continue
        for part, v in (("A", A), ("B", B), ("C", C), ("D", D), ("kind", np.array(kinds))):
            out[f"{name}/{part}"] = v
        log(f"  {name}: {len(kinds)} edge trials ({', '.join(classes)})")
    return out


# ----------------------------------------------------------------------------------------
# Saving: configurations are split across files so that each stays under MAX_FILE_BYTES.


def save_split(out_dir: pathlib.Path, base: str, data: dict, limit=MAX_FILE_BYTES):
    out_dir.mkdir(parents=True, exist_ok=True)
    groups: dict[str, dict] = {}
    for k, v in data.items():
        if k == "device":
            continue
        groups.setdefault(k.rsplit("/", 1)[0], {})[k] = v
    sizes = {}
    for g, arrs in groups.items():
        buf = io.BytesIO()
        np.savez_compressed(buf, **arrs)
        sizes[g] = buf.tell()
    files, cur, cur_size = [], {}, 0
    for g in groups:
        if cur and cur_size + sizes[g] > limit:
            files.append(cur)
            cur, cur_size = {}, 0
        cur.update(groups[g])
        cur_size += sizes[g]
    files.append(cur)
    paths = []
    for i, f in enumerate(files):
        p = out_dir / (f"{base}.npz" if i == 0 else f"{base}_{i + 1}.npz")
        np.savez_compressed(p, device=data["device"], **f)
        log(f"wrote {p} ({p.stat().st_size / 1e6:.2f} MB, {len(f)} keys)")
        paths.append(p)
    return paths


# ----------------------------------------------------------------------------------------
# Self test (no GPU, no nvcc).


def selftest(seed=0) -> int:
    rng = np.random.default_rng(seed)
    bad = 0
    names = set()
    for cfg in candidate_configs():
        if cfg.name in names:
            log(f"duplicate name {cfg.name}")
            bad += 1
        names.add(cfg.name)
        for use in "abcd":
            q, row, col = frag_coords(cfg, use)
            rows, cols = cfg.dims(use)
            cover = np.zeros((cfg.per_warp, rows, cols), int)
            np.add.at(cover, (q, row, col), 1)
            if not (cover == 1).all():
                log(f"{cfg.name} {use}: layout does not cover the matrix exactly once")
                bad += 1
        per = cfg.per_warp * 2
        A, B, C, kinds = make_trials(rng, cfg, per)
        for use, X in (("a", A), ("b", B), ("c", C)):
            if not np.array_equal(unpack(pack(X, cfg, use), cfg, use), X):
                log(f"{cfg.name} {use}: pack/unpack round trip differs")
                bad += 1
        assert len(gen_inc([cfg])) > 0
    log(f"selftest: {len(names)} configurations, {bad} problems")
    return 1 if bad else 0


# ----------------------------------------------------------------------------------------


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    driver.add_common_args(ap, arch="90a", arch_help="nvcc -arch (default 90a -> sm_90a)")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", default="ptx,chain,edges")
    ap.add_argument("--selftest", action="store_true")
    ap.add_argument("--probe-ptxas", action="store_true")
    args = ap.parse_args(argv)
    if args.selftest:
        return selftest(args.seed)
    arch = driver.gpu_arch(args.arch)
    if args.probe_ptxas:
        return driver.print_probe(candidate_configs(),
                                  probe_ptxas(candidate_configs(), arch, args.nvcc), width=40)
    if not args.out:
        ap.error("give --out DIR (or --selftest / --probe-ptxas)")
    only = set(args.only.split(","))
    unknown = only - {"ptx", "chain", "edges"}
    if unknown:
        ap.error(f"--only: unknown {sorted(unknown)}; allowed: ptx, chain, edges")
    t0 = time.time()
    rng = np.random.default_rng(args.seed)
    if only & {"ptx", "chain"}:
        path, cfgs, rejected = build(arch, args.nvcc)
        for n, e in rejected.items():
            log(f"  not built (ptxas rejects): {n}: {e}")
        lib = PtxLib(path, cfgs)
        log(f"GPU: {lib.device}; {len(cfgs)} mma.sync configurations")
        if "ptx" in only:
            save_split(args.out, "ptx_mma_full", capture_ptx(lib, cfgs, rng, args.scale, args.quick))
        if "chain" in only:
            save_split(args.out, "ptx_chain", capture_chain(lib, cfgs, rng, args.scale, args.quick))
    if "edges" in only:
        try:
            wlib = wc.Lib(wc.build(arch, args.nvcc))
            log(f"WMMA library on {wlib.device}")
            save_split(args.out, "wmma_edges", capture_edges(wlib, rng, args.scale, args.quick))
        except Exception as e:
            log(f"FAILED edges: {type(e).__name__}: {e}")
    log(f"done in {time.time() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
