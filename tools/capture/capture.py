"""Records what the local NVIDIA GPU returns for warp intrinsics, DPX, conversions and WMMA.

One command builds the CUDA library (nvcc, for the GPU found) and writes npz files in the
schema of docs/capture_format.md:

    python tools/capture/capture.py --out DIR [--quick]      # warp, layout, mma_fp, mma_int
    python tools/capture/capture.py --extra --out DIR         # capture_extra_*.npz (FORMAT_EXTRA.md)
    python tools/capture/capture.py --replay tests/data       # rerun a capture's inputs, diff bits

Needs nvcc and numpy only; the kernels are in warpcap.cu and are called through ctypes.
Configurations the GPU lacks are skipped with a note (bf16, tf32 and f64 WMMA and the
__reduce_*_sync intrinsics need sm_80; CUDA 13 compiles for sm_75 and newer).
"""

from __future__ import annotations

import argparse
import ctypes
import math
import pathlib
import sys
import time

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
SRC = HERE / "warpcap.cu"
sys.path.insert(0, str(HERE))
import driver  # noqa: E402  (nvcc, the library's device)
from driver import gpu_arch, log  # noqa: E402, F401  (gpu_arch: the other tools' too)

# Element tags and ops, as enum Tag / enum Op in warpcap.cu.
F16, BF16, TF32, F64, S8, U8, S4, U4, B1, F32, S32 = range(11)
TAG_NAME = ["f16", "bf16", "tf32", "f64", "s8", "u8", "s4", "u4", "b1", "f32", "s32"]
OP_PLAIN, OP_SAT, OP_CVT, OP_XOR, OP_AND = range(5)

# Logical dtype of each tag in the npz files, and its size in memory in bits.
NP_DTYPE = {
    F16: np.uint16,
    BF16: np.uint16,
    TF32: np.uint32,
    F64: np.uint64,
    S8: np.int8,
    U8: np.uint8,
    S4: np.int8,
    U4: np.uint8,
    B1: np.uint8,
    F32: np.uint32,
    S32: np.int32,
}
MEM_BITS = {
    F16: 16,
    BF16: 16,
    TF32: 32,
    F64: 64,
    S8: 8,
    U8: 8,
    S4: 4,
    U4: 4,
    B1: 1,
    F32: 32,
    S32: 32,
}
ONE = {
    F16: 0x3C00,
    BF16: 0x3F80,
    TF32: 0x3F800000,
    F32: 0x3F800000,
    F64: 0x3FF0000000000000,
    S8: 1,
    U8: 1,
    S4: 1,
    U4: 1,
    B1: 1,
    S32: 1,
}
FP_TAGS = (F16, BF16, TF32, F32, F64)
# (exponent bits, fraction bits) of the float formats.
FMT = {F16: (5, 10), BF16: (8, 7), TF32: (8, 10), F32: (8, 23), F64: (11, 52)}
KINDS = ("normal", "wide", "cancel", "align", "subnormal", "special", "huge", "int")
SHFL_WIDTHS = (0, 1, 2, 3, 4, 5, 8, 12, 16, 24, 31, 32, 33, 64)
SHFL_B = (-33, -1, 0, 1, 2, 3, 5, 7, 15, 16, 17, 31, 32, 33, 64, 100)
FIXED_MASKS = (
    0xFFFFFFFF,
    0x0000FFFF,
    0xFFFF0000,
    0x00000001,
    0x80000001,
    0x0F0F0F0F,
    0xAAAAAAAA,
    0x7FFFFFFF,
    0xFFFFFFFE,
)


def build(arch: str, nvcc: str = "nvcc") -> pathlib.Path:
    """Compiles warpcap.cu for `arch` unless an up-to-date build exists (keyed by a hash)."""
    return driver.build_lib(SRC, "warpcap", arch, nvcc)


class Lib:
    """ctypes front of warpcap.cu. Every call raises on a CUDA error."""

    def __init__(self, path: pathlib.Path):
        L, device = driver.load(path, "wc")
        self.L = L
        L.wc_mma_info.restype = ctypes.c_char_p
        L.wc_layout_info.restype = ctypes.c_char_p
        self.name, self.cc = device.name, device.cc
        self.runtime, self.driver = device.runtime, device.driver
        arch = ctypes.c_int()
        self._check(L.wc_compiled_arch(ctypes.byref(arch)))
        self.compiled_arch = arch.value
        self.device = f"{self.name} sm_{self.cc}"
        self.mma = {}
        info = (ctypes.c_int * 10)()
        for i in range(L.wc_mma_count()):
            nm = L.wc_mma_info(i, info).decode()
            at, ct, dt, m, n, k, la, lb, op, need = list(info)
            self.mma[nm] = dict(
                index=i, at=at, ct=ct, dt=dt, m=m, n=n, k=k, la=la, lb=lb, op=op, need=need
            )
        self.layouts = {}
        for i in range(L.wc_layout_count()):
            nm = L.wc_layout_info(i, info).decode()
            use, tag, m, n, k, lay, ne, el, need = list(info)[:9]
            self.layouts[nm] = dict(
                index=i, use=use, tag=tag, m=m, n=n, k=k, layout=lay, ne=ne, elems=el, need=need
            )

    def _check(self, rc):
        if rc == -2:
            raise Unsupported()
        if rc != 0:
            raise RuntimeError(self.L.wc_last_error().decode())

    @staticmethod
    def _p(a: np.ndarray):
        assert a.flags.c_contiguous
        return a.ctypes.data_as(ctypes.c_void_p)

    def shfl(self, kind, cfg, x, dtype):
        cfg = np.ascontiguousarray(cfg, np.int32)
        x = np.ascontiguousarray(x, dtype)
        out = np.zeros_like(x)
        self._check(self.L.wc_shfl(kind, len(cfg), self._p(cfg), self._p(x), self._p(out)))
        return out

    def reduce(self, cfg, x):
        cfg = np.ascontiguousarray(cfg, np.int32)
        x = np.ascontiguousarray(x, np.uint32)
        out = np.zeros_like(x)
        self._check(self.L.wc_reduce(len(cfg), self._p(cfg), self._p(x), self._p(out)))
        return out

    def vote(self, masks, x):
        masks = np.ascontiguousarray(masks, np.uint32)
        x = np.ascontiguousarray(x, np.uint32)
        out = np.zeros((len(masks), 32, 6), np.uint32)
        self._check(self.L.wc_vote(len(masks), self._p(masks), self._p(x), self._p(out)))
        return out

    def dpx(self, a, b, c):
        a, b, c = (np.ascontiguousarray(v, np.uint32) for v in (a, b, c))
        out = np.zeros((36, len(a)), np.uint32)
        pred = np.zeros((12, len(a)), np.uint32)
        self._check(self.L.wc_dpx(len(a), *(self._p(v) for v in (a, b, c, out, pred))))
        return out, pred

    def cvt(self, x):
        x = np.ascontiguousarray(x, np.uint32)
        out = np.zeros((5, len(x)), np.uint32)
        self._check(self.L.wc_cvt(len(x), self._p(x), self._p(out)))
        return out

    def mma_raw(
        self, idx, T, A, offA, sA, lda, B, offB, sB, ldb, C, offC, sC, ldc, cl, D, offD, sD, ldd, dl
    ):
        ll, u = ctypes.c_longlong, ctypes.c_uint
        self._check(
            self.L.wc_mma(
                idx,
                T,
                self._p(A),
                ll(A.nbytes),
                ll(offA),
                ll(sA),
                u(lda),
                self._p(B),
                ll(B.nbytes),
                ll(offB),
                ll(sB),
                u(ldb),
                self._p(C),
                ll(C.nbytes),
                ll(offC),
                ll(sC),
                u(ldc),
                cl,
                self._p(D),
                ll(D.nbytes),
                ll(offD),
                ll(sD),
                u(ldd),
                dl,
            )
        )

    def layout_raw(self, idx, P, buf, off, stride, ldm, ml, ne):
        out = np.zeros((P, 32, ne), np.uint64)
        ll = ctypes.c_longlong
        self._check(
            self.L.wc_layout(
                idx,
                P,
                self._p(buf),
                ll(buf.nbytes),
                ll(off),
                ll(stride),
                ctypes.c_uint(ldm),
                ml,
                self._p(out),
            )
        )
        return out

    def store_raw(self, idx, P, buf, off, stride, ldm, ml):
        ll = ctypes.c_longlong
        self._check(
            self.L.wc_store(
                idx, P, self._p(buf), ll(buf.nbytes), ll(off), ll(stride), ctypes.c_uint(ldm), ml
            )
        )
        return buf


class Unsupported(Exception):
    """The GPU is too old for this configuration."""


# ----------------------------------------------------------------------------------------
# Number formats (raw bits <-> float64), numpy only.


def bf16_from_f32_bits(u: np.ndarray) -> np.ndarray:
    u = u.astype(np.uint64)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF
    r = np.where(nan, ((u >> 16) | 0x40) & 0xFFFF, r)
    return r.astype(np.uint16)


def from_f64(x, tag) -> np.ndarray:
    """float64 values -> raw bits of `tag` (round to nearest even)."""
    x = np.asarray(x, np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        if tag == F16:
            return x.astype(np.float16).view(np.uint16)
        if tag in (F32, TF32):
            return x.astype(np.float32).view(np.uint32)
        if tag == BF16:
            return bf16_from_f32_bits(x.astype(np.float32).view(np.uint32))
        if tag == F64:
            return x.view(np.uint64).copy()
    raise ValueError(tag)


def to_f64(bits, tag) -> np.ndarray:
    bits = np.asarray(bits)
    if tag == F16:
        return bits.astype(np.uint16).view(np.float16).astype(np.float64)
    if tag in (F32, TF32):
        return bits.astype(np.uint32).view(np.float32).astype(np.float64)
    if tag == BF16:
        return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    if tag == F64:
        return bits.astype(np.uint64).view(np.float64).copy()
    raise ValueError(tag)


def fmt_limits(tag):
    e, f = FMT[tag]
    emax = (1 << (e - 1)) - 1
    return e, f, emax, 1 - emax


def random_bits(rng, tag, shape, finite=True):
    """Uniformly random words of `tag` (tf32: whole fp32 words, low 13 bits included)."""
    e, f, _, _ = fmt_limits(F32 if tag == TF32 else tag)
    nb = 1 + e + f
    u = (rng.integers(0, 1 << 32, size=shape, dtype=np.uint64) << np.uint64(32)) | rng.integers(
        0, 1 << 32, size=shape, dtype=np.uint64
    )
    if nb < 64:
        u &= np.uint64((1 << nb) - 1)
    if finite:
        expo = (u >> np.uint64(f)) & np.uint64((1 << e) - 1)
        u = np.where(expo == (1 << e) - 1, u & ~np.uint64(1 << (e + f - 1)), u)
    if tag == BF16 or tag == F16:
        return u.astype(np.uint16)
    if tag in (F32, TF32):
        return u.astype(np.uint32)
    return u


def special_values(tag):
    e, f, emax, _ = fmt_limits(tag)
    mx = (2.0 - 2.0**-f) * 2.0**emax
    return np.array([np.inf, -np.inf, np.nan, mx, -mx, 0.0, -0.0, 2.0 ** (1 - emax - f)])


# ----------------------------------------------------------------------------------------
# Memory images for WMMA loads.


def to_memory(logical: np.ndarray, tag: int, row_major: bool) -> tuple[np.ndarray, int]:
    """(T, rows, cols) logical -> (T, bytes) uint8 in load order, and ldm in elements."""
    T, rows, cols = logical.shape
    m = logical if row_major else np.swapaxes(logical, 1, 2)
    m = np.ascontiguousarray(m).reshape(T, rows * cols)
    ldm = cols if row_major else rows
    return pack_elems(m, tag), ldm


def pack_elems(m: np.ndarray, tag: int) -> np.ndarray:
    """(T, n) elements in memory order -> (T, bytes) uint8."""
    T = m.shape[0]
    if tag in (S4, U4):
        v = (m.astype(np.int16) & 0xF).astype(np.uint8)
        return (v[:, 0::2] | (v[:, 1::2] << 4)).astype(np.uint8)
    if tag == B1:
        return np.packbits(m.astype(np.uint8) & 1, axis=1, bitorder="little")
    return np.ascontiguousarray(m.astype(NP_DTYPE[tag])).view(np.uint8).reshape(T, -1)


def padded(b: np.ndarray, align=256) -> tuple[np.ndarray, int]:
    """(T, nbytes) -> flat buffer with each trial at a multiple of `align` bytes."""
    T, n = b.shape
    s = max(align, -(-n // align) * align)
    out = np.zeros((T, s), np.uint8)
    out[:, :n] = b
    return out.reshape(-1), s


def run_mma(lib: Lib, cfg: dict, A, B, C):
    """A (T,m,k), B (T,k,n), C (T,m,n) logical arrays -> D (T,m,n) as stored row-major."""
    T = A.shape[0]
    am, lda = to_memory(A, cfg["at"], cfg["la"] == 1)
    bm, ldb = to_memory(B, cfg["at"], cfg["lb"] == 1)
    cm, ldc = to_memory(C, cfg["ct"], True)
    Ab, sA = padded(am)
    Bb, sB = padded(bm)
    Cb, sC = padded(cm)
    dt = NP_DTYPE[cfg["dt"]]
    dbytes = cfg["m"] * cfg["n"] * np.dtype(dt).itemsize
    Db = np.full(T * max(256, -(-dbytes // 256) * 256), 0xFF, np.uint8)
    sD = len(Db) // max(T, 1)
    lib.mma_raw(
        cfg["index"], T, Ab, 0, sA, lda, Bb, 0, sB, ldb, Cb, 0, sC, ldc, 1, Db, 0, sD, cfg["n"], 1
    )
    return Db.reshape(T, sD)[:, :dbytes].copy().view(dt).reshape(T, cfg["m"], cfg["n"])


# ----------------------------------------------------------------------------------------
# Input generators for WMMA trials.


def round_to(x, tag):
    return to_f64(from_f64(x, tag), tag)


def gen_fp_trial(rng, kind, at, ct, m, n, k):
    """One trial's A (m,k), B (k,n) in `at` bits and C (m,n) in `ct` bits."""
    _, fa, emax_a, emin_a = fmt_limits(at)
    _, fc, emax_c, emin_c = fmt_limits(ct)
    N = rng.standard_normal
    if kind == "normal":
        a, b, c = N((m, k)), N((k, n)), N((m, n))
    elif kind == "wide":
        E = min(emax_a // 2 - 2, 200)
        sg = lambda s: rng.choice([-1.0, 1.0], s) * (1 + rng.random(s))
        a = sg((m, k)) * 2.0 ** rng.integers(-E, E + 1, (m, k))
        b = sg((k, n)) * 2.0 ** rng.integers(-E, E + 1, (k, n))
        Ec = min(2 * E, emax_c - 2)
        c = sg((m, n)) * 2.0 ** rng.integers(-Ec, Ec + 1, (m, n))
    elif kind == "cancel":
        a, b = round_to(N((m, k)), at), round_to(N((k, n)), at)
        c = -(a @ b)
    elif kind == "align":
        s = int(rng.integers(4, 8 if at == F16 else 11 if at != F64 else 17))
        a, b = N((m, k)) * 2.0**-s, N((k, n)) * 2.0**-s
        ks = int(rng.integers(k))
        a[:, ks] = N(m) * 2.0**s
        b[ks, :] = N(n) * 2.0**s
        c = N((m, n)) * 2.0 ** rng.integers(-2 * s, 2 * s + 1, (m, n))
    elif kind == "subnormal":
        sub = lambda s, f, emin: (
            rng.choice([-1.0, 1.0], s)
            * rng.integers(1, 1 << min(f, 50), s)
            * 2.0 ** (emin - min(f, 50))
        )
        a = np.where(rng.random((m, k)) < 0.5, sub((m, k), fa, emin_a), N((m, k)) * 2.0**emin_a)
        b = N((k, n)) * 2.0 ** rng.integers(-4, 5, (k, n))
        c = np.where(
            rng.random((m, n)) < 0.5, sub((m, n), fc, emin_c), N((m, n)) * 2.0 ** (emin_c + 2)
        )
    elif kind == "special":
        a, b, c = N((m, k)), N((k, n)), N((m, n))
        for arr, tag in ((a, at), (b, at), (c, ct)):
            sel = rng.random(arr.shape) < 0.08
            arr[sel] = rng.choice(special_values(tag), sel.sum())
    elif kind == "huge":
        return (
            random_bits(rng, at, (m, k)),
            random_bits(rng, at, (k, n)),
            random_bits(rng, ct, (m, n)),
        )
    elif kind == "int":
        a, b = rng.integers(-4, 5, (m, k)).astype(float), rng.integers(-4, 5, (k, n)).astype(float)
        c = rng.integers(-16, 17, (m, n)).astype(float)
    else:
        raise ValueError(kind)
    return from_f64(a, at), from_f64(b, at), from_f64(c, ct)


def gen_int_trial(rng, at, m, n, k):
    lo, hi = {S8: (-128, 128), U8: (0, 256), S4: (-8, 8), U4: (0, 16), B1: (0, 2)}[at]
    a = rng.integers(lo, hi, (m, k)).astype(NP_DTYPE[at])
    b = rng.integers(lo, hi, (k, n)).astype(NP_DTYPE[at])
    if rng.random() < 0.5:
        c = rng.integers(-(1 << 31), 1 << 31, (m, n), dtype=np.int64).astype(np.int32)
    else:
        c = rng.integers(-1000, 1001, (m, n)).astype(np.int32)
    return a, b, c


def capture_mma_family(lib: Lib, rng, family: str, per_kind: int, int_trials: int, only=None):
    out = {"device": np.array(lib.device)}
    for name, cfg in lib.mma.items():
        if only is not None and name not in only:
            continue
        is_int = cfg["at"] in (S8, U8, S4, U4, B1)
        if (family == "int") != is_int:
            continue
        if lib.cc < cfg["need"]:
            log(f"  skip {name}: needs sm_{cfg['need']}, GPU is sm_{lib.cc}")
            continue
        m, n, k = cfg["m"], cfg["n"], cfg["k"]
        if is_int:
            kinds = ["int"] * int_trials
            trials = [gen_int_trial(rng, cfg["at"], m, n, k) for _ in kinds]
        else:
            kinds = [KINDS[i % len(KINDS)] for i in range(per_kind * len(KINDS))]
            trials = [gen_fp_trial(rng, kd, cfg["at"], cfg["ct"], m, n, k) for kd in kinds]
        A = np.stack([t[0] for t in trials])
        B = np.stack([t[1] for t in trials])
        C = np.stack([t[2] for t in trials])
        D = run_mma(lib, cfg, A, B, C)
        for part, v in (("A", A), ("B", B), ("C", C), ("D", D), ("kind", np.array(kinds))):
            out[f"{name}/{part}"] = v
    return out


# ----------------------------------------------------------------------------------------
# Layouts (bit planes).


def layout_dims(info):
    m, n, k, use = info["m"], info["n"], info["k"], info["use"]
    return {0: (m, k), 1: (k, n), 2: (m, n)}[use]


def capture_layout(lib: Lib):
    out = {"device": np.array(lib.device)}
    for name, info in lib.layouts.items():
        if lib.cc < info["need"]:
            log(f"  skip {name}: needs sm_{info['need']}")
            continue
        rows, cols = layout_dims(info)
        P = max(1, math.ceil(math.log2(rows * cols)))
        idx = np.arange(rows * cols).reshape(rows, cols)
        tag = info["tag"]
        planes = np.stack([np.where((idx >> p) & 1, ONE[tag], 0) for p in range(P)])
        planes = planes.astype(NP_DTYPE[tag] if tag not in (S4, B1) else np.int8)
        row_major = info["use"] == 2 or info["layout"] == 1
        mem, ldm = to_memory(planes, tag, row_major)
        buf, stride = padded(mem)
        out[name] = lib.layout_raw(info["index"], P, buf, 0, stride, ldm, 1, info["ne"])
    return out


# ----------------------------------------------------------------------------------------
# Warp-level intrinsics.


def masks_for(rng, count):
    fixed = list(FIXED_MASKS)
    rand = [
        int(v) | 1 << int(rng.integers(32))
        for v in rng.integers(0, 1 << 32, count, dtype=np.uint64)
    ]
    return fixed + rand


def shfl_configs(rng, quick, widths=SHFL_WIDTHS, bs=SHFL_B, frac=None):
    masks = masks_for(rng, 48)
    rows = []
    for mode in range(4):
        for w in widths:
            for b in bs:
                mk = 0xFFFFFFFF if rng.random() < 0.4 else masks[int(rng.integers(len(masks)))]
                rows.append((mode, b, w, mk))
    rows = np.array(rows, np.int64)
    keep = frac if frac is not None else (0.12 if quick else 1.0)
    if keep < 1.0:
        sel = rng.random(len(rows)) < keep
        rows = rows[sel]
    rows[:, 3] = ((rows[:, 3] + (1 << 31)) % (1 << 32)) - (1 << 31)  # mask bits as int32
    return rows.astype(np.int32)


def capture_warp(lib: Lib, rng, quick: bool):
    out = {"device": np.array(lib.device)}
    cfg = shfl_configs(rng, quick)
    x = rng.integers(0, 1 << 32, (len(cfg), 32), dtype=np.uint64).astype(np.uint32)
    out["shfl_cfg"], out["shfl_x"] = cfg, x
    out["shfl_out"] = lib.shfl(0, cfg, x, np.uint32)
    log(f"  shfl: {len(cfg)} warps")

    masks = masks_for(rng, 7)
    reps = 1 if quick else 3
    rc, rx = [], []
    for op in range(9):
        for mk in masks:
            for _ in range(reps):
                rc.append((op, mk))
                style = rng.integers(3)
                if style == 0:
                    v = rng.integers(0, 1 << 32, 32, dtype=np.uint64)
                elif style == 1:
                    v = rng.integers(-8, 9, 32) % (1 << 32)
                else:
                    v = rng.choice([0, 1, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0x80000001, 5], 32)
                rx.append(np.asarray(v, np.uint64).astype(np.uint32))
    rc = np.array(rc, np.int64)
    rc[:, 1] = ((rc[:, 1] + (1 << 31)) % (1 << 32)) - (1 << 31)
    out["reduce_cfg"], out["reduce_x"] = rc.astype(np.int32), np.stack(rx)
    try:
        out["reduce_out"] = lib.reduce(out["reduce_cfg"], out["reduce_x"])
        log(f"  reduce: {len(rc)} warps")
    except Unsupported:
        for kk in ("reduce_cfg", "reduce_x"):
            del out[kk]
        log(f"  skip reduce: __reduce_*_sync needs sm_80, GPU is sm_{lib.cc}")

    V = 32 if quick else 256
    vm = np.array([masks_for(rng, 4)[i % 13] for i in range(V)], np.uint64).astype(np.uint32)
    vx = rng.integers(0, 8, (V, 32)).astype(np.uint32)
    vx[V // 2 :] = rng.integers(0, 1 << 32, (V - V // 2, 32), dtype=np.uint64).astype(
        np.uint32
    ) & np.uint32(0x7)
    vx[1::4] = (vx[1::4] & 1) | np.uint32(6)  # all keys equal
    out["vote_mask"], out["vote_x"] = vm, vx
    out["vote_out"] = lib.vote(vm, vx)
    log(f"  vote: {V} warps")

    n = 4096 if quick else 65536
    edge = np.array(
        [
            0,
            1,
            2,
            0x7FFF,
            0x8000,
            0xFFFF,
            0x10000,
            0x7FFFFFFF,
            0x80000000,
            0xFFFFFFFF,
            0x80008000,
            0x7FFF7FFF,
            0xFFFF0000,
            0x0000FFFF,
            0x80007FFF,
            0x7FFF8000,
            0xFFFE0001,
            0x00010001,
            0xFFFFFFFE,
        ],
        np.uint32,
    )

    def operand():
        v = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
        sel = rng.random(n)
        v = np.where(sel < 0.25, rng.choice(edge, n), v)
        small = (
            (rng.integers(-40, 41, n) & 0xFFFF) | ((rng.integers(-40, 41, n) & 0xFFFF) << 16)
        ).astype(np.uint32)
        return np.where((sel >= 0.25) & (sel < 0.5), small, v)

    a, b, c = operand(), operand(), operand()
    out["dpx_a"], out["dpx_b"], out["dpx_c"] = a, b, c
    out["dpx_out"], out["dpx_pred"] = lib.dpx(a, b, c)
    log(
        f"  dpx: {n} operand triples"
        + ("" if lib.cc >= 90 else " (emulated in software: GPU is below sm_90)")
    )

    out["cvt_x"] = cvt_inputs(rng, 4096 if quick else 65536)
    out["cvt_out"] = lib.cvt(out["cvt_x"])
    log(f"  cvt: {len(out['cvt_x'])} values")
    return out


def cvt_inputs(rng, n_random):
    parts = [rng.integers(0, 1 << 32, n_random, dtype=np.uint64).astype(np.uint32)]
    nt = max(256, n_random // 8)
    # exact ties (and one ulp either side) for tf32 (13 dropped bits), bf16 (16) and fp16
    for drop in (13, 16):
        hi = rng.integers(0, 1 << (32 - drop), nt, dtype=np.uint64).astype(np.uint32) << drop
        half = np.uint32(1 << (drop - 1))
        parts += [hi | half, (hi | half) + 1, (hi | half) - 1]
    # fp16 ties: fp32 values whose 13 low bits are a tie inside the fp16 normal range, and in
    # the fp16 subnormal range (ties at 2^-25 .. 2^-14 granularity)
    e = rng.integers(103, 143, nt).astype(np.uint32)
    f = rng.integers(0, 1 << 10, nt).astype(np.uint32)
    s = rng.integers(0, 2, nt).astype(np.uint32) << 31
    parts.append(s | (e << 23) | (f << 13) | (1 << 12))
    sub = rng.integers(1, 1 << 11, nt).astype(np.float64) * 2.0**-25  # odd multiples = ties
    parts.append(sub.astype(np.float32).view(np.uint32))
    bound = np.array(
        [
            0x477FE000,
            0x477FEFFF,
            0x477FF000,
            0x477FF001,
            0x47800000,  # fp16 max / overflow
            0x7F7FFFFF,
            0x7F7F8000,
            0x7F7F7FFF,
            0x7F7FC000,  # bf16 overflow
            0x38800000,
            0x387FFFFF,
            0x33800000,
            0x33000000,
            0x33000001,
            0x32FFFFFF,  # fp16 min
            0x00000001,
            0x007FFFFF,
            0x00800000,
            0x7F800001,
            0x7FC00000,
            0x7FFFFFFF,
            0xFFC00001,
            0x7F802000,
            0xB3000000,
            0xB3400000,
            0xB8800000,
            0x80800000,
            0x80000001,
            0x80000000,
            0x00000000,
            0xFF800000,
            0x7F800000,
            0xFFC00000,
        ],
        np.uint32,
    )
    parts.append(bound)
    return np.concatenate(parts)


# ----------------------------------------------------------------------------------------
# Extra captures (FORMAT_EXTRA.md).


def capture_extra_warp(lib: Lib, rng):
    out = {"device": np.array(lib.device)}
    widths = (0, 1, 3, 4, 8, 16, 24, 32, 33)
    bs = (-1, 0, 1, 5, 17, 33)
    specs = (
        ("shfl64", 1, np.uint64),
        ("shflh2", 2, np.uint32),
        ("shflbf2", 3, np.uint32),
        ("shflh", 4, np.uint16),
        ("shflbf", 5, np.uint16),
    )
    for key, kind, dt in specs:
        cfg = shfl_configs(rng, False, widths, bs, frac=0.6)
        bits = np.dtype(dt).itemsize * 8
        x = rng.integers(0, 1 << 63, (len(cfg), 32), dtype=np.uint64)
        if bits == 64:
            x = x * np.uint64(2) + rng.integers(0, 2, x.shape, dtype=np.uint64)
        x = (x & np.uint64((1 << bits) - 1) if bits < 64 else x).astype(dt)
        if kind in (2, 4):  # sprinkle fp16 NaN payloads / infs / signed zeros
            sp = np.array([0x7C01, 0x7E00, 0xFE01, 0x7C00, 0x8000, 0xFFFF], np.uint16)
        elif kind in (3, 5):
            sp = np.array([0x7F81, 0x7FC0, 0xFF81, 0x7F80, 0x8000, 0xFFFF], np.uint16)
        else:
            sp = None
        if sp is not None:
            if bits == 16:
                sel = rng.random(x.shape) < 0.1
                x[sel] = rng.choice(sp, sel.sum())
            else:
                lo = np.where(rng.random(x.shape) < 0.1, rng.choice(sp, x.shape), x & 0xFFFF)
                hi = np.where(rng.random(x.shape) < 0.1, rng.choice(sp, x.shape), x >> 16)
                x = (lo.astype(np.uint32) | (hi.astype(np.uint32) << 16)).astype(dt)
        out[f"{key}_cfg"], out[f"{key}_x"] = cfg, x
        out[f"{key}_out"] = lib.shfl(kind, cfg, x, dt)
        log(f"  {key}: {len(cfg)} warps")
    return out


def _fp_val(tag, v):
    return from_f64(np.asarray(v, np.float64), tag)


def gen_probe(rng, kind, at, ct, m, n, k):
    """Adversarial inputs for the block-FMA model (float64 values, exactly representable)."""
    _, fa, emax_a, emin_a = fmt_limits(at)
    sg = lambda s: rng.choice([-1.0, 1.0], s)
    frac = lambda s, bits: 1 + rng.integers(0, 1 << bits, s) / float(1 << bits)
    a, b, c = np.zeros((m, k)), np.zeros((k, n)), np.zeros((m, n))
    fb = min(fa, 10)
    if kind == "probe_align":
        # C = +-2^eC(1+f); one product at k0 (sometimes a second one) with exponent d below.
        lo_a, hi_a = max(emin_a, -14), min(emax_a, 15) + 1
        # m = 32 (m32n8k16) leaves no room above: rows then reach the subnormal range
        a0 = int(rng.integers(min(lo_a + m, hi_a - 1), hi_a))
        a[:, 0] = sg(m) * frac(m, fb) * 2.0 ** (a0 - np.arange(m))
        b[0, :] = sg(n) * frac(n, fb) * 2.0 ** -np.arange(n)
        eC = a0 + int(rng.integers(-4, 24))
        c[:] = sg((m, n)) * frac((m, n), 3) * 2.0**eC
        if rng.random() < 0.5:
            k1 = int(rng.integers(1, k))
            a[:, k1] = sg(m) * frac(m, fb) * 2.0 ** (a0 - 8 - np.arange(m)[::-1])
            b[k1, :] = sg(n) * frac(n, fb)
    elif kind == "probe_carry":
        # every product and C the same sign and binade, full fractions: the sum carries
        # several bits past the leading bit of the largest term.
        e = int(rng.integers(-4, 5))
        s = 1.0 if rng.random() < 0.5 else -1.0
        a[:] = s * frac((m, k), fb) * 2.0**e
        b[:] = frac((k, n), fb) * 2.0**-e
        c[:] = s * frac((m, n), 10) * 2.0 ** int(rng.integers(0, 5))
        if rng.random() < 0.5:  # make one product a different binade to shift the window
            kk = int(rng.integers(k))
            a[:, kk] *= 2.0 ** int(rng.integers(1, 4))
    elif kind == "probe_blocksize":
        # per trial two positions p, q whose products cancel exactly (+X, -X); column j puts a
        # tiny product at r_j; rows scale the tiny one by 2^-i. D shows whether the tiny term
        # survives next to the big pair, depending on where p, q and r_j sit in k.
        p, q = rng.choice(k, 2, replace=False)
        others = [r for r in range(k) if r not in (p, q)]
        X = float(2.0 ** int(rng.integers(4, 9)))
        a[:] = 2.0 ** -np.arange(m)[:, None] * np.ones((1, k))
        a[:, p] = a[:, q] = 1.0
        for j in range(n):
            r = others[j % len(others)]
            b[p, j], b[q, j] = X, -X
            b[r, j] = 2.0 ** -int(rng.integers(8, 14))
        c[:] = 0.0 if rng.random() < 0.5 else 2.0**-20
    elif kind == "probe_monotone":
        a[:] = rng.standard_normal((m, k))
        b[:] = rng.standard_normal((k, n))
        c[:] = rng.standard_normal((m, n))
    elif kind == "zero_sign":
        if rng.random() < 0.5:  # products that are all zero, zeros of both signs, C = +-0
            a[:] = np.copysign(0.0, sg((m, k)))
            b[:] = rng.standard_normal((k, n))
            c[:] = np.copysign(0.0, sg((m, n)))
        else:  # products cancelling exactly (x, -x pairs), C = +-0
            v = rng.standard_normal((m, k // 2))
            a[:, 0::2], a[:, 1::2] = v, v
            w = rng.standard_normal((k // 2, n))
            b[0::2, :], b[1::2, :] = w, -w
            c[:] = np.copysign(0.0, sg((m, n)))
    else:
        raise ValueError(kind)
    return a, b, c


NAN_PAYLOADS = {
    F16: [0x7C01, 0x7E00, 0xFE00, 0x7DFF, 0xFFFF, 0x7E55],
    BF16: [0x7F81, 0x7FC0, 0xFFC0, 0x7FFF, 0xFFFF, 0x7FD5],
    TF32: [0x7F800001, 0x7FC00000, 0xFFC00000, 0x7FFFFFFF, 0x7FA5A5A5, 0xFF802000],
    F32: [0x7F800001, 0x7FC00000, 0xFFC00000, 0x7FFFFFFF, 0x7FA5A5A5, 0xFFC0FFEE],
    F64: [
        0x7FF0000000000001,
        0x7FF8000000000000,
        0xFFF8000000000000,
        0x7FFFFFFFFFFFFFFF,
        0x7FF4DEADBEEF0001,
    ],
}


def probe_trials(rng, at, ct, m, n, k, reps):
    """List of (kind, A bits, B bits, C bits) for the probe set of one configuration."""
    trials = []
    for kind in ("probe_align", "probe_carry", "probe_blocksize"):
        for _ in range(reps):
            a, b, c = gen_probe(rng, kind, at, ct, m, n, k)
            trials.append((kind, from_f64(a, at), from_f64(b, at), from_f64(c, ct)))
    # monotone: C stepped by one ulp at a time (raw bits + s), then A[:, 0] stepped likewise
    a, b, c = gen_probe(rng, "probe_monotone", at, ct, m, n, k)
    A0, B0, C0 = from_f64(a, at), from_f64(b, at), from_f64(c, ct)
    steps = max(2, reps)
    for s in range(steps):
        cs = C0.copy()
        cs += (np.sign(to_f64(C0, ct)) >= 0).astype(C0.dtype) * C0.dtype.type(s)
        trials.append(("probe_monotone", A0, B0, cs))
    for s in range(steps):
        As = A0.copy()
        As[:, 0] += np.where(to_f64(A0[:, 0], at) >= 0, s, 0).astype(A0.dtype)
        trials.append(("probe_monotone", As, B0, C0))
    # permutation: the same products in another k order
    for _ in range(reps):
        _, a, b, c = ("", *gen_fp_trial(rng, "wide", at, ct, m, n, k))
        pi = rng.permutation(k)
        trials.append(("probe_perm", a, b, c))
        trials.append(("probe_perm", a[:, pi].copy(), b[pi, :].copy(), c))
    for _ in range(max(1, reps // 2)):
        a, b, c = gen_probe(rng, "zero_sign", at, ct, m, n, k)
        trials.append(("zero_sign", from_f64(a, at), from_f64(b, at), from_f64(c, ct)))
    for _ in range(max(1, reps // 2)):
        a, b, c = gen_fp_trial(rng, "normal", at, ct, m, n, k)
        for arr, tag in ((a, at), (b, at), (c, ct)):
            sel = rng.random(arr.shape) < 0.04
            arr[sel] = rng.choice(np.array(NAN_PAYLOADS[tag], np.uint64), sel.sum()).astype(
                arr.dtype
            )
        trials.append(("nan_payload", a, b, c))
    if at == TF32:  # low 13 bits: random, cleared, and rounded to tf32
        for _ in range(reps):
            a, b, c = gen_fp_trial(rng, "normal", at, ct, m, n, k)
            a |= rng.integers(0, 1 << 13, a.shape).astype(np.uint32)
            b |= rng.integers(0, 1 << 13, b.shape).astype(np.uint32)
            trials.append(("probe_lowbits", a, b, c))
            trials.append(("probe_lowbits", a & ~np.uint32(0x1FFF), b & ~np.uint32(0x1FFF), c))
            rn = lambda u: (
                (u.astype(np.uint64) + 0xFFF + ((u >> 13) & 1)) & ~np.uint64(0x1FFF)
            ).astype(np.uint32)
            trials.append(("probe_lowbits", rn(a), rn(b), c))
    return trials


def _split_exp(rng, P, lo, hi):
    """Operand exponents (ea, eb), each in [lo, hi], with ea + eb = P (P clipped to fit)."""
    P = np.clip(P, 2 * lo, 2 * hi)
    ea = rng.integers(np.maximum(lo, P - hi), np.minimum(hi, P - lo) + 1)
    return ea, P - ea


def _pair_exps(rng, P, m, k, n, lo, hi, jit=2):
    """Exponents of A (m, k) and B (k, n) whose products a[i, q] * b[q, j] lie near 2**P:
    a split of P per k, jittered by up to ``jit`` per element."""
    ea, eb = _split_exp(rng, np.full(k, P), lo, hi)
    ja = lambda s: rng.integers(-jit, jit + 1, s)
    return (np.clip(ea[None, :] + ja((m, k)), lo, hi),
            np.clip(eb[:, None] + ja((k, n)), lo, hi))


def _f16_values(rng, e, sparse=0.3):
    """Exact f16 values of random sign whose leading bit is 2**e (e in [-24, 15] per element;
    below -14 a subnormal); a share ``sparse`` gets a fraction of 0, one bit, or all ones."""
    e = np.clip(np.asarray(e), -24, 15)
    fb = np.where(e >= -14, 10, e + 24)
    frac = rng.integers(0, 1 << fb)
    pick = rng.random(e.shape)
    one_bit = 1 << rng.integers(0, np.maximum(fb, 1))
    frac = np.where(pick < sparse / 3, 0, frac)
    frac = np.where((pick >= sparse / 3) & (pick < 2 * sparse / 3), one_bit & ((1 << fb) - 1), frac)
    frac = np.where((pick >= 2 * sparse / 3) & (pick < sparse), (1 << fb) - 1, frac)
    sign = rng.choice([-1.0, 1.0], e.shape)
    return sign * ((1 << fb) + frac) * 2.0 ** (e - fb)


def _small_c(rng, shape, P):
    """C for the subnormal probes: 0, -0, subnormal, or near 2**P (P an int or per element)."""
    P = np.broadcast_to(np.asarray(P), shape)
    c = _f16_values(rng, P + rng.integers(-8, 5, shape))
    r = rng.random(shape)
    c = np.where(r < 0.1, 0.0, np.where(r < 0.2, -0.0, c))
    c = np.where((r >= 0.2) & (r < 0.4), _f16_values(rng, rng.integers(-24, -14, shape)), c)
    return c


def gen_subnormal_f16(rng, kind, m, n, k):
    """f16 operands (float64 values, exact) for ``--subnormal``: products, sums and C in and
    near the f16 subnormal range (FORMAT_EXTRA.md)."""
    dens = float(rng.choice([1.0, 0.5, 0.25, 0.125]))
    keep = lambda s: rng.random(s) < dens
    if kind == "sub_dense":  # products around 2**P, P in the subnormal range and above
        P = int(rng.integers(-32, -9))
        ea, eb = _pair_exps(rng, P, m, k, n, -24, 15)
        a = _f16_values(rng, ea) * keep((m, k))
        b = _f16_values(rng, eb) * keep((k, n))
        c = _small_c(rng, (m, n), P)
    elif kind == "sub_cancel":  # pairs of big products cancelling exactly, a small residue
        P = int(rng.integers(-34, -13))
        ea, eb = _pair_exps(rng, P, m, k, n, -24, 15)
        a = _f16_values(rng, ea) * keep((m, k))
        b = _f16_values(rng, eb)
        npairs = int(rng.integers(1, k // 4 + 1))
        pos = rng.permutation(k)[: 2 * npairs]
        for p, q in zip(pos[0::2], pos[1::2], strict=True):
            ea2, eb2 = _pair_exps(rng, int(rng.integers(-14, 9)), m, 1, n, -14, 15, 1)
            a[:, p] = a[:, q] = _f16_values(rng, ea2[:, 0])
            b[p, :] = _f16_values(rng, eb2[0])
            b[q, :] = -b[p, :]
        c = _small_c(rng, (m, n), P)
    elif kind == "sub_tie":  # integer multiples of 2**-(sa + sb): ties at 2**-24 and below
        s = int(rng.choice([25, 26, 27, 30]))
        sa = int(rng.integers(s - 15, 16))
        a = rng.integers(-63, 64, (m, k)) * 2.0**-sa * keep((m, k))
        b = rng.integers(-63, 64, (k, n)) * 2.0 ** -(s - sa)
        c = rng.integers(-64, 65, (m, n)) * 2.0**-24 * (rng.random((m, n)) < 0.5)
    elif kind == "sub_c":  # C subnormal (or just above), products below it or none
        Ec = rng.integers(-24, -11, (m, n))
        c = _f16_values(rng, Ec)
        P = int(rng.integers(-44, -18))
        ea, eb = _pair_exps(rng, P, m, k, n, -24, 15)
        a = _f16_values(rng, ea) * (rng.random((m, k)) < dens / 2)
        b = _f16_values(rng, eb)
    elif kind == "sub_edge":  # products on and next to 2**-14, 2**-24, 2**-25
        fr = np.array([1.0, 1 + 2.0**-10, 2 - 2.0**-10, 1.5, 1 - 2.0**-11])
        P = int(rng.choice([-13, -14, -15, -23, -24, -25, -26]))
        ea, eb = _pair_exps(rng, P, m, k, n, -14, 15, 1)
        a = rng.choice([-1.0, 1.0], (m, k)) * rng.choice(fr, (m, k)) * 2.0**ea
        a *= rng.random((m, k)) < max(dens, 3.0 / k)
        b = rng.choice([-1.0, 1.0], (k, n)) * rng.choice(fr[:3], (k, n)) * 2.0**eb
        c = rng.choice([0.0, -0.0, 2.0**-24, -(2.0**-24), 2.0**-14, -(2.0**-14),
                        2.0**-14 - 2.0**-24, 2.0**-25 * 3, 2.0**-15], (m, n))
    else:
        raise ValueError(kind)
    return a, b, c


SUB_F16_KINDS = ("sub_dense", "sub_cancel", "sub_tie", "sub_c", "sub_edge")
SUB_TF32_KINDS = ("tz_cancel", "tz_tiny", "tz_round", "tz_zero")


def _f32_words(rng, e, low="random"):
    """fp32 words of random sign with leading-bit exponent e (fp32 subnormal below -126),
    random fraction; the low 13 bits random, or chosen from values next to the
    __float_to_tf32 tie (``low="tie"``)."""
    e = np.clip(np.asarray(e), -149, 127)
    biased = np.where(e >= -126, e + 127, 0).astype(np.uint64)
    fb = np.where(e >= -126, 23, e + 149).astype(np.uint64)
    frac = rng.integers(0, 1 << 23, e.shape).astype(np.uint64) & ((np.uint64(1) << fb) - 1)
    frac |= np.where(e >= -126, 0, np.uint64(1) << fb).astype(np.uint64)
    if low == "tie":
        lows = np.array([0x0FFF, 0x1000, 0x1001, 0x1FFF, 0, 0x0001], np.uint64)
        frac = (frac & ~np.uint64(0x1FFF)) | rng.choice(lows, e.shape)
        frac = np.where((rng.random(e.shape) < 0.2) & (e >= -126),
                        frac | np.uint64(0x7FE000), frac)  # the tie carries into the exponent
        frac = np.where(e >= -126, frac & np.uint64(0x7FFFFF), frac)
    sign = (rng.random(e.shape) < 0.5).astype(np.uint64) << np.uint64(31)
    return (sign | (biased << np.uint64(23)) | frac).astype(np.uint32)


def gen_subnormal_tf32(rng, kind, m, n, k):
    """fp32 words (A, B, C) for the tf32 / tf32cvt zero-sign and low-bit probes."""
    pos0 = lambda s: np.where(rng.random(s) < 0.5, np.uint32(0), np.uint32(0x80000000))
    tinyc = lambda s: np.where(rng.random(s) < 0.6, pos0(s), _f32_words(
        rng, rng.integers(-149, -100, s)))
    if kind == "tz_cancel":  # x*y - x'*y' with x, x' equal up to the low 13 bits
        E = int(rng.integers(-20, 21))
        x = _f32_words(rng, E + rng.integers(-3, 4, (m, k // 2)),
                       "tie" if rng.random() < 0.5 else "random")
        y = _f32_words(rng, -E + rng.integers(-3, 4, (k // 2, n)))
        a = np.zeros((m, k), np.uint32)
        b = np.zeros((k, n), np.uint32)
        a[:, 0::2] = x
        a[:, 1::2] = np.where(rng.random(x.shape) < 0.5, x,
                              x ^ rng.integers(0, 1 << 13, x.shape).astype(np.uint32))
        b[0::2] = y
        b[1::2] = y ^ np.uint32(0x80000000)
        c = tinyc((m, n))
    elif kind == "tz_tiny":  # products below fp32's normal range and fp32 subnormal operands
        P = int(rng.integers(-170, -110))
        ea, eb = _pair_exps(rng, P, m, k, n, -149, 127, 3)
        a = _f32_words(rng, ea)
        b = _f32_words(rng, eb)
        c = tinyc((m, n))
    elif kind == "tz_round":  # low bits at the rna tie, carries into the exponent
        a = _f32_words(rng, rng.integers(-6, 7, (m, k)), "tie")
        b = _f32_words(rng, rng.integers(-6, 7, (k, n)), "tie")
        c = np.where(rng.random((m, n)) < 0.5, tinyc((m, n)),
                     _f32_words(rng, rng.integers(-12, 6, (m, n)), "tie"))
    elif kind == "tz_zero":  # words that are zero as tf32 (low bits only) or true zeros
        low = lambda s: (rng.integers(0, 1 << 13, s).astype(np.uint32)
                         * (rng.random(s) < 0.7)).astype(np.uint32)
        a = pos0((m, k)) | low((m, k))
        b = _f32_words(rng, rng.integers(-10, 11, (k, n)))
        if rng.random() < 0.5:  # some true products too, cancelling exactly
            x = _f32_words(rng, rng.integers(-4, 5, m))
            a[:, 0], a[:, 1] = x, x
            b[1] = b[0] ^ np.uint32(0x80000000)
        c = tinyc((m, n))
    else:
        raise ValueError(kind)
    return a, b, c


def subnormal_trials(rng, at, ct, m, n, k, reps):
    """(kind, A bits, B bits, C bits) of the ``--subnormal`` probes of one configuration."""
    out = []
    if at == F16:
        for kind in SUB_F16_KINDS:
            for _ in range(reps):
                a, b, c = gen_subnormal_f16(rng, kind, m, n, k)
                out.append((kind, from_f64(a, F16), from_f64(b, F16), from_f64(c, ct)))
    elif at == TF32:
        for kind in SUB_TF32_KINDS:
            for _ in range(reps):
                a, b, c = gen_subnormal_tf32(rng, kind, m, n, k)
                out.append((kind, a, b, c))
    return out


def f64_order_trials(rng, reps):
    """f64 m8n8k4: products of +-X and +-1 in every arrangement, to tell a chain of fmas in
    some k order from a correctly rounded sum."""
    out = []
    patterns = [(i, j) for i in range(4) for j in range(i + 1, 4)]
    for _ in range(reps):
        X = 2.0 ** int(rng.choice([52, 53, 54, 60]))
        a = np.ones((8, 4))
        for i in range(8):
            p = patterns[i % 6] if i < 6 else patterns[int(rng.integers(6))]
            a[i, list(p)] = X
        b = np.ones((4, 8)) * np.array([rng.choice([-1.0, 1.0], 4) for _ in range(8)]).T
        c = rng.choice([0.0, -0.0, 1.0, -1.0, X, -X, 0.5], (8, 8))
        out.append(("probe_order", from_f64(a, F64), from_f64(b, F64), from_f64(c, F64)))
    return out


def capture_extra_mma(lib: Lib, rng, reps: int, all_shapes: bool = False, sub_reps: int = 0,
                      sub_rng=None):
    """The probes of capture_extra_mma.npz; ``all_shapes``: f16.f16f16 also in m32n8k16 and
    m8n32k16; ``sub_reps``: that many trials per ``--subnormal`` kind (drawn from
    ``sub_rng``, so the other trials are those of a run without them)."""
    out = {"device": np.array(lib.device)}
    f16_shapes = ("m16n16k16", "m32n8k16", "m8n32k16") if all_shapes else ("m16n16k16",)
    targets = [
        "f16.f32f32.m16n16k16.rc",
        *(f"f16.f16f16.{s}.rc" for s in f16_shapes),
        "bf16.f32f32.m16n16k16.rc",
        "tf32.f32f32.m16n16k8.rc",
        "tf32cvt.f32f32.m16n16k8.rc",
    ]
    tf32_inputs = None
    for name in targets:
        cfg = lib.mma[name]
        if lib.cc < cfg["need"]:
            log(f"  skip {name}: needs sm_{cfg['need']}")
            continue
        if name.startswith("tf32cvt") and tf32_inputs is not None:
            trials = tf32_inputs  # the very same words as the tf32 run
        else:
            trials = probe_trials(rng, cfg["at"], cfg["ct"], cfg["m"], cfg["n"], cfg["k"], reps)
            if sub_reps and not name.startswith("bf16"):
                trials += subnormal_trials(sub_rng, cfg["at"], cfg["ct"], cfg["m"], cfg["n"],
                                           cfg["k"], sub_reps)
            if name.startswith("tf32."):
                tf32_inputs = trials
        _store_trials(lib, out, name, cfg, trials)
    name = "f64.f64f64.m8n8k4.rc"
    cfg = lib.mma[name]
    if lib.cc >= cfg["need"]:
        trials = f64_order_trials(rng, 2 * reps)
        for kd in ("zero_sign",):
            a, b, c = gen_probe(rng, kd, F64, F64, 8, 8, 4)
            trials.append((kd, from_f64(a, F64), from_f64(b, F64), from_f64(c, F64)))
        a, b, c = gen_fp_trial(rng, "normal", F64, F64, 8, 8, 4)
        for arr in (a, b, c):
            sel = rng.random(arr.shape) < 0.06
            arr[sel] = rng.choice(np.array(NAN_PAYLOADS[F64], np.uint64), sel.sum())
        trials.append(("nan_payload", a, b, c))
        _store_trials(lib, out, name, cfg, trials)
        # fma chains: L steps, C of step s is D of step s-1 (stores and loads of f64 are exact)
        L, T0 = 8, max(2, reps // 2)
        A = np.stack(
            [
                gen_fp_trial(rng, "wide" if t % 2 else "normal", F64, F64, 8, 8, 4)[0]
                for t in range(T0 * L)
            ]
        ).reshape(T0, L, 8, 4)
        B = np.stack(
            [
                gen_fp_trial(rng, "wide" if t % 2 else "normal", F64, F64, 8, 8, 4)[1]
                for t in range(T0 * L)
            ]
        ).reshape(T0, L, 4, 8)
        C = np.zeros((T0, L, 8, 8), np.uint64)
        D = np.zeros_like(C)
        C[:, 0] = from_f64(rng.standard_normal((T0, 8, 8)), F64)
        for s in range(L):
            if s:
                C[:, s] = D[:, s - 1]
            D[:, s] = run_mma(lib, cfg, A[:, s], B[:, s], C[:, s])
        key = "f64chain.f64f64.m8n8k4.rc"
        for part, v in (("A", A), ("B", B), ("C", C), ("D", D)):
            out[f"{key}/{part}"] = v.reshape(T0 * L, *v.shape[2:])
        out[f"{key}/kind"] = np.array(["chain"] * (T0 * L))
        out[f"{key}/step"] = np.tile(np.arange(L, dtype=np.int32), T0)
        log(f"  {key}: {T0} chains of {L}")
    return out


def _concat_trials(runs: list[dict]) -> dict:
    """The mma captures of several seeds as one: trials of each key one after another."""
    if len(runs) == 1:
        return runs[0]
    return {key: runs[0][key] if key == "device" else np.concatenate([r[key] for r in runs])
            for key in runs[0]}


def _store_trials(lib, out, name, cfg, trials):
    kinds = np.array([t[0] for t in trials])
    A = np.stack([t[1] for t in trials])
    B = np.stack([t[2] for t in trials])
    C = np.stack([t[3] for t in trials])
    D = run_mma(lib, cfg, A, B, C)
    for part, v in (("A", A), ("B", B), ("C", C), ("D", D), ("kind", kinds)):
        out[f"{name}/{part}"] = v
    log(f"  {name}: {len(kinds)} probe trials")


LDST_LOADS = [
    "a.f16.m16n16k16.r",
    "a.f16.m16n16k16.c",
    "b.f16.m16n16k16.r",
    "b.f16.m16n16k16.c",
    "a.f16.m32n8k16.r",
    "a.bf16.m16n16k16.r",
    "a.s8.m16n16k16.r",
    "b.u8.m8n32k16.c",
    "a.tf32.m16n16k8.r",
    "b.tf32.m16n16k8.c",
    "a.f64.m8n8k4.r",
    "b.f64.m8n8k4.c",
    "a.s4.m8n8k32.r",
    "a.b1.m8n8k128.r",
    "c.f32.m16n16k16",
    "c.f16.m16n16k16",
    "c.s32.m8n8k32",
    "c.f64.m8n8k4",
]
LDST_STORES = [
    "c.f32.m16n16k16",
    "c.f16.m16n16k16",
    "c.s32.m32n8k16",
    "c.f32.m8n32k16",
    "c.f64.m8n8k4",
    "c.s32.m8n8k128",
]


def ldst_combos(tag, inner):
    """(ldm, offset) pairs in elements: ldm a multiple of 16 bytes, offset of 32 bytes."""
    u = 128 // MEM_BITS[tag]  # elements per 16 bytes
    o = 256 // MEM_BITS[tag]  # elements per 32 bytes
    return [
        (inner, 0),
        (inner, o),
        (inner + u, 0),
        (inner + u, 3 * o),
        (2 * inner + u, 8 * o),
        (inner + 3 * u, o),
    ]


def capture_extra_ldst(lib: Lib):
    out = {"device": np.array(lib.device)}
    for base in LDST_LOADS:
        info = lib.layouts[base]
        if lib.cc < info["need"]:
            continue
        tag = info["tag"]
        rows, cols = layout_dims(info)
        for ml in (1, 0) if info["use"] == 2 else (info["layout"],):
            outer, inner = (rows, cols) if ml == 1 else (cols, rows)
            combos = ldst_combos(tag, inner)
            ldms = [c[0] for c in combos]
            offs = [c[1] for c in combos]
            srcs = [_ldst_load(lib, info, tag, outer, inner, ldm, off, ml) for ldm, off in combos]
            key = f"ld/{base}" + (("." + "cr"[ml]) if info["use"] == 2 else "")
            out[f"{key}/ldm"] = np.array(ldms, np.int32)
            out[f"{key}/off"] = np.array(offs, np.int32)
            out[f"{key}/src"] = np.stack(srcs).astype(np.int32)
    for base in LDST_STORES:
        info = lib.layouts[base]
        if lib.cc < info["need"]:
            continue
        tag = info["tag"]
        rows, cols = layout_dims(info)
        for ml in (1, 0):
            outer, inner = (rows, cols) if ml == 1 else (cols, rows)
            ldms, offs, dsts, nw = [], [], [], []
            for ldm, off in ldst_combos(tag, inner):
                nel = -(-(off + (outer - 1) * ldm + inner + 64) // 64) * 64
                esz = MEM_BITS[tag] // 8
                buf = np.full(nel * esz, 0xFF, np.uint8)
                lib.store_raw(info["index"], 1, buf, off * esz, 0, ldm, ml)
                vals = buf.view(NP_DTYPE[tag] if tag != F16 else np.float16)
                if tag == F16:
                    written = buf.view(np.uint16) != 0xFFFF
                    num = vals.astype(np.float64)
                elif tag == F32:
                    written = buf.view(np.uint32) != 0xFFFFFFFF
                    num = buf.view(np.float32).astype(np.float64)
                elif tag == F64:
                    written = buf.view(np.uint64) != np.uint64(0xFFFFFFFFFFFFFFFF)
                    num = buf.view(np.float64)
                else:
                    written = buf.view(np.int32) != -1
                    num = buf.view(np.int32).astype(np.float64)
                ne = info["elems"]
                dst = np.full((32, ne), -1, np.int64)
                pos = np.flatnonzero(written)
                v = np.nan_to_num(num[pos], nan=-1, posinf=-1, neginf=-1).astype(np.int64) - 1
                okv = (v >= 0) & (v < 32 * ne)
                dst.reshape(-1)[v[okv]] = pos[okv]
                dsts.append(dst)
                nw.append(len(pos))
                ldms.append(ldm)
                offs.append(off)
            key = f"st/{base}.{'cr'[ml]}"
            out[f"{key}/ldm"] = np.array(ldms, np.int32)
            out[f"{key}/off"] = np.array(offs, np.int32)
            out[f"{key}/dst"] = np.stack(dsts).astype(np.int32)
            out[f"{key}/nwritten"] = np.array(nw, np.int32)
    log(f"  ldst: {sum(1 for k in out if k.endswith('/ldm'))} keys")
    return out


def _ldst_load(lib, info, tag, outer, inner, ldm, off, ml):
    """Memory element index (from the buffer start) behind every x[i] sub-element, for a load
    at element offset `off` with leading dimension `ldm`."""
    nel = -(-(off + (outer - 1) * ldm + inner) // 64) * 64
    P = math.ceil(math.log2(nel))
    q = np.arange(nel)
    planes = np.stack([np.where((q >> p) & 1, ONE[tag], 0) for p in range(P)])
    planes = planes.astype(NP_DTYPE[tag] if tag not in (S4, B1) else np.int8)
    buf, stride = padded(pack_elems(planes, tag))
    off_bytes = off * MEM_BITS[tag] // 8
    raw = lib.layout_raw(info["index"], P, buf, off_bytes, stride, ldm, ml, info["ne"])
    return decode_planes(raw, tag)


def decode_planes(raw: np.ndarray, tag: int) -> np.ndarray:
    """(P, 32, NE) bit planes -> (32, NE*S) indices; S sub-elements per storage word."""
    P = raw.shape[0]
    if tag in (S4, U4):
        bits = np.stack([(raw >> np.uint64(4 * j)) & np.uint64(0xF) for j in range(8)], -1) != 0
    elif tag == B1:
        bits = np.stack([(raw >> np.uint64(j)) & np.uint64(1) for j in range(32)], -1) != 0
    else:
        bits = (raw != 0)[..., None]
    idx = sum(bits[p].astype(np.int64) << p for p in range(P))
    return idx.reshape(32, -1)


# ----------------------------------------------------------------------------------------
# Replay: rerun the inputs of existing capture files and compare the outputs bit for bit.


def replay(lib: Lib, src: pathlib.Path) -> int:
    def find(name):
        for cand in (src / f"{name}.npz", src / f"h100_{name}.npz"):
            if cand.exists():
                return cand
        return None

    bad = 0

    def report(what, got, want):
        nonlocal bad
        n = int(np.sum(np.asarray(got) != np.asarray(want)))
        bad += n != 0
        log(f"  {what}: {'OK' if n == 0 else f'{n} of {np.asarray(want).size} differ'}")

    f = find("warp")
    if f:
        d = np.load(f)
        log(f"replay {f} (captured on {d['device']})")
        report("shfl_out", lib.shfl(0, d["shfl_cfg"], d["shfl_x"], np.uint32), d["shfl_out"])
        if lib.cc >= 80:
            report("reduce_out", lib.reduce(d["reduce_cfg"], d["reduce_x"]), d["reduce_out"])
        report("vote_out", lib.vote(d["vote_mask"], d["vote_x"]), d["vote_out"])
        o, p = lib.dpx(d["dpx_a"], d["dpx_b"], d["dpx_c"])
        report("dpx_out", o, d["dpx_out"])
        report("dpx_pred", p, d["dpx_pred"])
        report("cvt_out", lib.cvt(d["cvt_x"]), d["cvt_out"])
    f = find("layout")
    if f:
        d = np.load(f)
        mine = capture_layout(lib)
        keys = [k for k in d.files if k != "device"]
        same = [
            k
            for k in keys
            if k in mine and mine[k].shape == d[k].shape and np.array_equal(mine[k], d[k])
        ]
        bad += len(same) != len(keys)
        log(
            f"  layout: {len(same)} of {len(keys)} keys equal bit for bit"
            + ("" if len(same) == len(keys) else f"; differ: {sorted(set(keys) - set(same))}")
        )
    for fam in ("mma_fp", "mma_int"):
        f = find(fam)
        if not f:
            continue
        d = np.load(f)
        cfgs = sorted({k.rsplit("/", 1)[0] for k in d.files if "/" in k})
        tot = diff = 0
        worst = []
        for name in cfgs:
            if name not in lib.mma or lib.cc < lib.mma[name]["need"]:
                continue
            D = run_mma(lib, lib.mma[name], d[f"{name}/A"], d[f"{name}/B"], d[f"{name}/C"])
            n = int(np.sum(D != d[f"{name}/D"]))
            tot += D.size
            diff += n
            if n:
                worst.append((name, n))
        bad += diff != 0
        log(
            f"  {fam}: {len(cfgs)} configurations, {diff} of {tot} D elements differ"
            + (f" ({worst[:8]})" if worst else "")
        )
    return bad


# ----------------------------------------------------------------------------------------


def save(path: pathlib.Path, data: dict):
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, **data)
    log(f"wrote {path} ({path.stat().st_size / 1e6:.2f} MB, {len(data)} keys)")


def main(argv=None):
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--out", type=pathlib.Path, help="output folder")
    ap.add_argument("--quick", action="store_true", help="very small trial counts")
    ap.add_argument("--extra", action="store_true", help="write capture_extra_*.npz instead")
    ap.add_argument(
        "--replay", type=pathlib.Path, help="rerun the inputs of the captures in this folder"
    )
    ap.add_argument("--only", default="warp,layout,mma_fp,mma_int", help="which files to write")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--arch", help="nvcc -arch value (default: the GPU's compute capability)")
    ap.add_argument("--nvcc", default="nvcc")
    ap.add_argument(
        "--per-kind", type=int, help="fp WMMA trials per input kind (default 8, quick 2)"
    )
    ap.add_argument(
        "--extra-files", default="warp,mma,ldst", help="with --extra: which files to write"
    )
    ap.add_argument(
        "--probe-shapes",
        choices=("m16n16k16", "all"),
        default="m16n16k16",
        help="with --extra: f16.f16f16 probes in m16n16k16 only, or in all three WMMA shapes",
    )
    ap.add_argument(
        "--subnormal",
        type=int,
        default=0,
        metavar="N",
        help="with --extra: add N trials per kind of the subnormal / zero-sign probes "
        "(FORMAT_EXTRA.md) to the f16 and tf32 configurations",
    )
    ap.add_argument(
        "--seeds",
        type=int,
        default=1,
        metavar="S",
        help="with --extra: draw the mma probes with seeds seed..seed+S-1, one file",
    )
    args = ap.parse_args(argv)
    if not (args.out or args.replay):
        ap.error("give --out DIR and/or --replay DIR")

    lib = Lib(build(gpu_arch(args.arch), args.nvcc))
    log(
        f"GPU: {lib.name}, compute capability {lib.cc // 10}.{lib.cc % 10} (sm_{lib.cc}); "
        f"CUDA runtime {lib.runtime}, driver {lib.driver}; kernels built for sm_{lib.compiled_arch // 10}"
    )
    if lib.cc < 80:
        log(
            "note: bf16/tf32/f64 WMMA, m16n16k8/m8n8k4 shapes and __reduce_*_sync need sm_80: skipped"
        )
    if lib.cc < 90:
        log("note: DPX functions run as software emulation below sm_90 (native on sm_90)")
    rng = np.random.default_rng(args.seed)
    t0 = time.time()
    bad = 0
    if args.replay:
        bad = replay(lib, args.replay)
    if args.out and args.extra:
        reps = 2 if args.quick else 4
        files = set(args.extra_files.split(","))
        mma = []
        for seed in range(args.seed, args.seed + args.seeds):
            rng = np.random.default_rng(seed)
            warp = capture_extra_warp(lib, rng)  # always: the mma probes are drawn after it
            if "warp" in files and seed == args.seed:
                save(args.out / "capture_extra_warp.npz", warp)
            sub_rng = np.random.default_rng([seed, 1])
            mma.append(capture_extra_mma(lib, rng, reps, args.probe_shapes == "all",
                                         args.subnormal, sub_rng))
        if "mma" in files:
            save(args.out / "capture_extra_mma.npz", _concat_trials(mma))
        if "ldst" in files:
            save(args.out / "capture_extra_ldst.npz", capture_extra_ldst(lib))
    elif args.out:
        only = set(args.only.split(","))
        per_kind = args.per_kind or (2 if args.quick else 8)
        if "warp" in only:
            save(args.out / "warp.npz", capture_warp(lib, rng, args.quick))
        if "layout" in only:
            save(args.out / "layout.npz", capture_layout(lib))
        if "mma_fp" in only:
            save(args.out / "mma_fp.npz", capture_mma_family(lib, rng, "fp", per_kind, 0))
        if "mma_int" in only:
            save(args.out / "mma_int.npz", capture_mma_family(lib, rng, "int", 0, 8 * per_kind))
    log(f"done in {time.time() - t0:.1f} s")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
