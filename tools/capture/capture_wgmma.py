"""Records what Hopper's `wgmma.mma_async.sync.aligned` returns (sm_90a, CUDA 13).

One command builds wgmma.cu for sm_90a and writes two npz files (schema: FORMAT_WGMMA.md):

    python tools/capture/capture_wgmma.py --out DIR [--quick] [--seed N] [--scale X]
                                          [--only plain,variants,chain] [--nvcc NVCC]
    python tools/capture/capture_wgmma.py --selftest      # no GPU: layouts, maps, the table
    python tools/capture/capture_wgmma.py --probe-ptxas   # which kernel variants ptxas accepts

wgmma.cu holds the kernel; its instruction table (wgmma_ops.inc) is generated from the
configuration tables below at build time, as capture_ptx.py / capture_sp.py do.

Every trial is one CTA of one warpgroup (128 threads). Shared-memory images, matrix
descriptors and register words are built here on the host (PTX ISA 9.7.15.5: matrix
descriptor, canonical layouts and swizzling; 9.7.15.4: register fragments); the kernel
only copies words and issues the instruction. Configurations run in a worker process,
so a configuration that faults is logged and skipped and the rest go on.
Needs nvcc and numpy only.
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import pathlib
import shutil
import subprocess
import sys
import time

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
SRC = HERE / "wgmma.cu"
sys.path.insert(0, str(HERE))
import driver  # noqa: E402  (nvcc, ptxas probes, the library's device)
from driver import BUILD, log  # noqa: E402

#: nvcc flags besides driver.LIB_FLAGS (wgmma needs the arch-specific sm_90a target).
ARCH = ["-gencode=arch=compute_90a,code=sm_90a", "-lineinfo"]
MAX_NPZ = 12 * 2**20
M = 64


# ----------------------------------------------------------------------------------------
# Element types.

# name: (bits in memory, numpy dtype of the logical arrays, K per instruction)
ATYPES = {
    "f16": (16, np.uint16, 16), "bf16": (16, np.uint16, 16), "tf32": (32, np.uint32, 8),
    "e4m3": (8, np.uint8, 32), "e5m2": (8, np.uint8, 32),
    "s8": (8, np.int8, 32), "u8": (8, np.uint8, 32), "b1": (1, np.uint8, 256),
}
CTYPES = {"f32": np.uint32, "f16": np.uint16, "s32": np.int32}
# (exponent bits, fraction bits, has inf) of the float formats
FLOATS = {"f16": (5, 10, True), "bf16": (8, 7, True), "tf32": (8, 10, True),
          "f32": (8, 23, True), "e4m3": (4, 3, False), "e5m2": (5, 2, True)}
FP_KINDS = ("normal", "wide", "tiny", "probe", "cancel", "special", "random_bits",
            "zero_sign", "block")
INT_KINDS = ("int", "int_big_c", "int_extreme")
CHAIN_KINDS = ("normal", "positive", "wide")


def _float_table(t):
    """All codes of an 8-bit float format -> float64 values (NaN where NaN)."""
    e, f, has_inf = FLOATS[t]
    c = np.arange(256)
    s, ex, fr = c >> 7, (c >> f) & ((1 << e) - 1), c & ((1 << f) - 1)
    bias = (1 << (e - 1)) - 1
    v = np.where(ex == 0, fr * 2.0 ** (1 - bias - f), (1 + fr / 2**f) * 2.0 ** (ex - bias))
    v = np.where(s == 1, -v, v)
    if has_inf:
        top = ex == (1 << e) - 1
        v = np.where(top & (fr == 0), np.where(s == 1, -np.inf, np.inf), v)
        v = np.where(top & (fr != 0), np.nan, v)
    else:  # e4m3 (float8_e4m3fn): only S.1111.111 is NaN
        v = np.where((c & 0x7F) == 0x7F, np.nan, v)
    return v


F8TAB = {t: _float_table(t) for t in ("e4m3", "e5m2")}


def to_f64(bits, t):
    """Raw bits of type `t` -> float64 (ints as float)."""
    b = np.asarray(bits)
    if t == "f16":
        return b.astype(np.uint16).view(np.float16).astype(np.float64)
    if t == "bf16":
        return (b.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    if t in ("f32", "tf32"):
        return b.astype(np.uint32).view(np.float32).astype(np.float64)
    if t in F8TAB:
        return F8TAB[t][b.astype(np.uint8)]
    return b.astype(np.float64)


def from_f64(x, t, rng=None):
    """float64 -> raw bits of `t`, round to nearest (fp8: nearest finite, saturating).

    tf32 words get random low 13 bits when `rng` is given (the hardware reads the top 19).
    """
    x = np.asarray(x, np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        if t == "f16":
            return x.astype(np.float16).view(np.uint16)
        if t in ("f32", "tf32"):
            u = x.astype(np.float32).view(np.uint32)
            if t == "tf32":
                u = u & np.uint32(0xFFFFE000)  # to tf32 by truncation (keeps max finite)
                if rng is not None:
                    low = rng.integers(0, 1 << 13, x.shape).astype(np.uint32)
                    u = np.where(np.isfinite(x), u | low, u)
            return u.astype(np.uint32)
        if t == "bf16":
            u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
            r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF
            r = np.where(np.isnan(x), 0x7FC0 | ((u >> 16) & 0x8000), r)
            return r.astype(np.uint16)
        if t in F8TAB:
            tab = F8TAB[t]
            pos = np.arange(128)[np.isfinite(tab[:128])]  # codes of +0 .. +max, ascending
            vals = tab[pos]
            xs = x.reshape(-1)
            ax = np.minimum(np.abs(xs), vals[-1])
            hi = np.clip(np.searchsorted(vals, ax), 1, len(vals) - 1)
            lo = hi - 1
            dl, dh = ax - vals[lo], vals[hi] - ax
            pick = np.where((dh < dl) | ((dh == dl) & (pos[hi] % 2 == 0)), hi, lo)
            code = pos[pick].astype(np.uint8) | np.where(np.signbit(xs), 0x80, 0).astype(np.uint8)
            code = np.where(np.isnan(xs), 0x7F, code)
            if FLOATS[t][2]:
                code = np.where(np.isinf(xs), np.where(xs > 0, 0x7C, 0xFC), code)
            return code.astype(np.uint8).reshape(x.shape)
    raise ValueError(f"from_f64: unknown type {t!r}")


def special_values(t):
    e, f, has_inf = FLOATS["f32" if t == "tf32" else t]
    bias = (1 << (e - 1)) - 1
    if t == "e4m3":
        mx = 448.0
    else:
        mx = (2 - 2.0**-f) * 2.0**bias
    v = [mx, -mx, 0.0, -0.0, 2.0 ** (1 - bias - f), np.nan]
    if has_inf:
        v += [np.inf, -np.inf]
    return np.array(v)


def random_bits(rng, t, shape):
    bits, dt = {"f16": (16, np.uint16), "bf16": (16, np.uint16), "tf32": (32, np.uint32),
                "f32": (32, np.uint32), "e4m3": (8, np.uint8), "e5m2": (8, np.uint8)}[t]
    return rng.integers(0, 1 << bits, shape, dtype=np.uint64).astype(dt)


# ----------------------------------------------------------------------------------------
# Configurations. A configuration is a dict; its `op` names the compiled kernel variant.


def op_key(at, bt, ct, n, areg=False, ta=0, tb=0, sa=1, sb=1, sat=False):
    return (at, bt, ct, n, areg, ta, tb, sa, sb, sat)


def op_name(key):
    at, bt, ct, n, areg, ta, tb, sa, sb, sat = key
    k = ATYPES[at][2]
    s = f"{at}.{bt}.{ct}{ct}.m64n{n}k{k}" + (".satfinite" if sat else "")
    s += ".areg" * areg + ".ta" * ta + ".tb" * tb + ".negA" * (sa < 0) + ".negB" * (sb < 0)
    return s


def plain_configs():
    """(name, op key) of the plain captures: A, B in smem, K-major, no swizzle."""
    out = []
    full_n = (8, 16, 64, 128, 256)
    for at, bt, ct, ns in [
        ("f16", "f16", "f32", full_n), ("f16", "f16", "f16", (8, 256)),
        ("bf16", "bf16", "f32", full_n), ("tf32", "tf32", "f32", (8, 256)),
    ]:
        out += [op_key(at, bt, ct, n) for n in ns]
    for a in ("e4m3", "e5m2"):
        for b in ("e4m3", "e5m2"):
            for ct in ("f32", "f16"):
                ns = full_n if (a, b, ct) == ("e4m3", "e4m3", "f32") else (8, 256)
                out += [op_key(a, b, ct, n) for n in ns]
    for a in ("s8", "u8"):
        for b in ("s8", "u8"):
            for sat in (False, True):
                ns = (8, 16, 256) if a == b else (8, 16)
                out += [op_key(a, b, "s32", n, sat=sat) for n in ns]
    out += [op_key("b1", "b1", "s32", n) for n in (8, 16, 256)]
    return out


SWZ = {"": 0, "sw128": 1, "sw64": 2, "sw32": 3}
SWZ_BYTES = {0: 0, 1: 128, 2: 64, 3: 32}


def variant_configs():
    """(suffix, op key, layout of A, layout of B, scale_d) of the data-movement variants."""
    out = []
    for at, n in [("f16", 8), ("f16", 64), ("e4m3", 8), ("e4m3", 64)]:
        base = dict(at=at, bt=at, ct="f32", n=n)
        for sw in ("sw32", "sw64", "sw128"):
            out.append((f".{sw}", op_key(**base), ("K", SWZ[sw]), ("K", SWZ[sw]), 1))
        out.append((".areg", op_key(**base, areg=True), None, ("K", 0), 1))
        out.append((".areg.sw128", op_key(**base, areg=True), None, ("K", 1), 1))
        out.append((".scaled0", op_key(**base), ("K", 0), ("K", 0), 0))
        out.append((".negA", op_key(**base, sa=-1), ("K", 0), ("K", 0), 1))
        out.append((".negB", op_key(**base, sb=-1), ("K", 0), ("K", 0), 1))
        if at == "f16":
            for sw in ("", "sw32", "sw64", "sw128"):
                sfx = f".{sw}" if sw else ""
                out.append((".ta" + sfx, op_key(**base, ta=1), ("MN", SWZ[sw]), ("K", SWZ[sw]), 1))
                out.append((".tb" + sfx, op_key(**base, tb=1), ("K", SWZ[sw]), ("MN", SWZ[sw]), 1))
                out.append((".ta.tb" + sfx, op_key(**base, ta=1, tb=1), ("MN", SWZ[sw]),
                            ("MN", SWZ[sw]), 1))
            out.append((".areg.tb", op_key(**base, areg=True, tb=1), None, ("MN", 0), 1))
    bb = dict(at="bf16", bt="bf16", ct="f32", n=8)
    out.append((".ta.tb", op_key(**bb, ta=1, tb=1), ("MN", 0), ("MN", 0), 1))
    out.append((".ta.tb.sw128", op_key(**bb, ta=1, tb=1), ("MN", 1), ("MN", 1), 1))
    return out


CHAINS = [  # (a, b, c, steps, trials per kind)
    ("e4m3", "e4m3", "f32", 128, 16), ("e5m2", "e5m2", "f32", 128, 16),
    ("e4m3", "e5m2", "f32", 128, 16), ("bf16", "bf16", "f32", 256, 16),
    ("f16", "f16", "f32", 256, 16),
    ("f16", "f16", "f32", 4, 8), ("f16", "f16", "f16", 4, 8), ("bf16", "bf16", "f32", 4, 8),
    ("tf32", "tf32", "f32", 4, 8), ("e4m3", "e4m3", "f32", 4, 8), ("e5m2", "e5m2", "f32", 4, 8),
    ("e4m3", "e5m2", "f32", 4, 8), ("e5m2", "e4m3", "f32", 4, 8), ("e4m3", "e4m3", "f16", 4, 8),
    ("e5m2", "e5m2", "f16", 4, 8),
]


def all_ops():
    """Every compiled kernel variant, in a fixed order (that of wgmma_ops.inc)."""
    keys = list(plain_configs()) + [v[1] for v in variant_configs()]
    keys += [op_key(a, b, c, 8) for a, b, c, _, _ in CHAINS]
    seen, out = set(), []
    for k in keys:
        if k not in seen:
            seen.add(k)
            out.append(k)
    return out


# ----------------------------------------------------------------------------------------
# Matrix descriptors and shared-memory images (PTX ISA 9.7.15.5.1 and the canonical layouts).


def encode_desc(start, lbo, sbo, swizzle, base_offset=0):
    """64-bit wgmma matrix descriptor (PTX ISA 9.7.15.5.1).

    bits 0-13 start address >> 4, 16-29 leading-dimension byte offset >> 4, 32-45
    stride-dimension byte offset >> 4, 49-51 base offset, 62-63 swizzle mode
    (0 none, 1 128B, 2 64B, 3 32B).

    Example:
        >>> hex(encode_desc(0, 128, 256, 0))
        '0x1000080000'
    """
    for nm, v in (("start", start), ("lbo", lbo), ("sbo", sbo)):
        if v % 16 or not 0 <= v >> 4 < 1 << 14:
            raise ValueError(f"encode_desc: {nm}={v} must be a multiple of 16 below 2**18")
    if swizzle not in (0, 1, 2, 3) or base_offset not in range(8):
        raise ValueError(f"encode_desc: swizzle={swizzle} (0..3), base_offset={base_offset} (0..7)")
    return ((start >> 4) | (lbo >> 4) << 16 | (sbo >> 4) << 32 | base_offset << 49
            | swizzle << 62)


def decode_desc(d):
    d = int(d)
    return dict(start=(d & 0x3FFF) << 4, lbo=((d >> 16) & 0x3FFF) << 4,
                sbo=((d >> 32) & 0x3FFF) << 4, base_offset=(d >> 49) & 7, swizzle=(d >> 62) & 3)


def swizzle_addr(addr, swizzle):
    """Byte address -> swizzled byte address: 16-byte chunk bits 4.. XOR row bits 7..

    128B: bits 4-6 ^= bits 7-9 (pattern repeats every 1024 B); 64B: bits 4-5 ^= bits 7-8
    (512 B); 32B: bit 4 ^= bit 7 (256 B).
    """
    w = SWZ_BYTES[swizzle]
    if w == 0:
        return addr
    mask = w // 16 - 1
    return addr ^ (((addr >> 7) & mask) << 4)


def operand_layout(mn, kbytes, major, swizzle, elem_bytes):
    """Descriptor strides for an operand with `mn` rows (M or N) and `kbytes` of K.

    Returns (lbo, sbo, size_in_bytes). Canonical layouts (units of bytes):
      K-major, none : off = (r%8)*16 + (r//8)*SBO + (kb%16) + (kb//16)*LBO
      K-major, W-byte swizzle: off = (r%8)*W + (r//8)*SBO + kb      (LBO unused, set 16)
      MN-major, none: off = (mb%16) + (k%8)*16 + (mb//16)*SBO + (k//8)*LBO
      MN-major, W   : off = (mb%W) + (mb//W)*LBO + (k%8)*W + (k//8)*SBO
    (r = M/N index, kb = K byte, mb = M/N byte, k = K index.)
    """
    groups = -(-mn // 8)
    if major == "K":
        if swizzle == 0:
            lbo, sbo = 128, 256  # two 16-byte K chunks of one 8-row group side by side
            return lbo, sbo, groups * sbo
        w = SWZ_BYTES[swizzle]
        return 16, 8 * w, groups * 8 * w
    kdepth = kbytes // elem_bytes
    kgroups = kdepth // 8
    mnb = mn * elem_bytes
    if swizzle == 0:
        chunks = -(-mnb // 16)
        sbo, lbo = 128, 128 * chunks
        return lbo, sbo, lbo * kgroups
    w = SWZ_BYTES[swizzle]
    atoms = -(-mnb // w)
    lbo, sbo = 8 * w, 8 * w * atoms
    return lbo, sbo, sbo * kgroups


def element_offsets(mn, kdepth, bits, major, swizzle, lbo, sbo):
    """Byte offset (pre-swizzle, from the operand start) and bit of element (r, k)."""
    r = np.arange(mn).reshape(-1, 1)
    k = np.arange(kdepth).reshape(1, -1)
    if major == "K":
        kb, bit = (k * bits) // 8, (k * bits) % 8
        if swizzle == 0:
            off = (r % 8) * 16 + (r // 8) * sbo + kb % 16 + (kb // 16) * lbo
        else:
            off = (r % 8) * SWZ_BYTES[swizzle] + (r // 8) * sbo + kb
    else:
        if bits != 16:
            raise ValueError("MN-major (transposed) layouts exist for 16-bit types only")
        mb, bit = r * 2, 0 * k
        if swizzle == 0:
            off = mb % 16 + (k % 8) * 16 + (mb // 16) * sbo + (k // 8) * lbo
        else:
            w = SWZ_BYTES[swizzle]
            off = mb % w + (mb // w) * lbo + (k % 8) * w + (k // 8) * sbo
    return np.broadcast_to(off, (mn, kdepth)), np.broadcast_to(bit, (mn, kdepth))


def elem_bytes_of(t):
    return max(1, ATYPES[t][0] // 8)


def scatter(img, start, mat_rk, t, major, swizzle, lbo, sbo):
    """Writes logical (T, mn, k) elements into images img (T, bytes) at `start`."""
    bits = ATYPES[t][0]
    T, mn, kd = mat_rk.shape
    off, bit = element_offsets(mn, kd, bits, major, swizzle, lbo, sbo)
    addr = swizzle_addr(start + off, swizzle)
    if bits == 1:
        v = (mat_rk.astype(np.uint8) & 1) << bit.astype(np.uint8)
        img[:, addr] = 0
        np.bitwise_or.at(img, (np.arange(T)[:, None, None], addr[None]), v)
        return
    eb = bits // 8
    raw = np.ascontiguousarray(mat_rk).view(np.uint8).reshape(T, mn, kd, eb)
    for j in range(eb):
        img[:, addr + j] = raw[..., j]


def gather(img, start, mn, kd, t, major, swizzle, lbo, sbo):
    """Inverse of scatter: images (T, bytes) -> logical (T, mn, kd) in the type's dtype."""
    bits, dt, _ = ATYPES[t]
    off, bit = element_offsets(mn, kd, bits, major, swizzle, lbo, sbo)
    addr = swizzle_addr(start + off, swizzle)
    if bits == 1:
        return ((img[:, addr] >> bit.astype(np.uint8)) & 1).astype(dt)
    eb = bits // 8
    raw = np.stack([img[:, addr + j] for j in range(eb)], axis=-1)
    return np.ascontiguousarray(raw).view(dt).reshape(img.shape[0], mn, kd)


FILL = 0x7F  # bytes of the image that no element occupies (NaN for fp8/f16)


def build_images(A, B, at, bt, la, lb):
    """Logical A (T,64,K), B (T,K,N) -> images (T, bytes) uint8, desc_a, desc_b, and offsets.

    la / lb: (major, swizzle) or None for A from registers. A at offset 0, B at the next
    1024-byte boundary (so every swizzle pattern starts at its repeat boundary and the
    base-offset field is 0). Start-address fields are relative to the 1024-byte aligned
    image start; the kernel adds that start >> 4.
    """
    T, K, N = B.shape
    size_a, da, a_lay = 0, 0, None
    kbytes = K * ATYPES[at][0] // 8
    if la is not None:
        lbo, sbo, size_a = operand_layout(M, kbytes, la[0], la[1], elem_bytes_of(at))
        a_lay = (0, la[0], la[1], lbo, sbo)
        da = encode_desc(0, lbo, sbo, la[1])
    start_b = -(-size_a // 1024) * 1024
    lbo, sbo, size_b = operand_layout(N, kbytes, lb[0], lb[1], elem_bytes_of(bt))
    db = encode_desc(start_b, lbo, sbo, lb[1])
    total = -(-(start_b + size_b) // 1024) * 1024
    img = np.full((T, total), FILL, np.uint8)
    if a_lay is not None:
        scatter(img, 0, A, at, la[0], la[1], a_lay[3], a_lay[4])
    scatter(img, start_b, np.swapaxes(B, 1, 2), bt, lb[0], lb[1], lbo, sbo)
    return img, da, db


# ----------------------------------------------------------------------------------------
# Register fragments (PTX ISA 9.7.15.4: "Register Fragments"; one warpgroup, 128 threads).


def d_map(n, ct):
    """(128, words, halves) -> (row, col) of accumulator D (and C); halves = 2 for f16.

    f32/s32: word i of thread t: warp w = t//32, g = (t%32)//4, q = t%4, c = i//4,
      row = 16w + g + 8*((i%4)//2), col = 8c + 2q + (i%2).
    f16: word i holds two halves h: row = 16w + g + 8*(i%2), col = 8*(i//2) + 2q + h.
    """
    t = np.arange(128).reshape(-1, 1, 1)
    w, g, q = t // 32, (t % 32) // 4, t % 4
    if ct == "f16":
        i = np.arange(n // 4).reshape(1, -1, 1)
        h = np.arange(2).reshape(1, 1, -1)
        row = 16 * w + g + 8 * (i % 2)
        col = 8 * (i // 2) + 2 * q + h
    else:
        i = np.arange(n // 2).reshape(1, -1, 1)
        row = 16 * w + g + 8 * ((i % 4) // 2)
        col = 8 * (i // 4) + 2 * q + (i % 2)
    shape = (128, i.shape[1], 2 if ct == "f16" else 1)
    return np.broadcast_to(row, shape), np.broadcast_to(col, shape)


def a_map(at):
    """(128, 4, per-word elements) -> (row, col) of A held in registers.

    16-bit: word r, half h: row = 16w + g + 8*(r%2), col = 2q + h + 8*(r//2)
    tf32:   word r:         row = 16w + g + 8*(r%2), col = q + 4*(r//2)
    8-bit:  word r, byte j: row = 16w + g + 8*(r%2), col = 4q + j + 16*(r//2)
    """
    t = np.arange(128).reshape(-1, 1, 1)
    w, g, q = t // 32, (t % 32) // 4, t % 4
    r = np.arange(4).reshape(1, -1, 1)
    bits = ATYPES[at][0]
    per = 32 // bits
    j = np.arange(per).reshape(1, 1, -1)
    row = 16 * w + g + 8 * (r % 2)
    if bits == 16:
        col = 2 * q + j + 8 * (r // 2)
    elif bits == 32:
        col = q + 4 * (r // 2) + 0 * j
    elif bits == 8:
        col = 4 * q + j + 16 * (r // 2)
    else:
        raise ValueError(f"a_map: A from registers is not captured for {at}")
    shape = (128, 4, per)
    return np.broadcast_to(row, shape), np.broadcast_to(col, shape)


def pack_c(C, ct):
    """Logical C (T,64,N) -> register words (T,128,NR) uint32."""
    T, _, n = C.shape
    row, col = d_map(n, ct)
    if ct == "f16":
        v = C[:, row, col].astype(np.uint32)
        return (v[..., 0] | (v[..., 1] << 16)).astype(np.uint32)
    return C[:, row[..., 0], col[..., 0]].astype(np.int64).astype(np.uint32)


def unpack_d(words, n, ct):
    """Register words (T,128,NR) -> logical D (T,64,N)."""
    T = words.shape[0]
    row, col = d_map(n, ct)
    out = np.zeros((T, M, n), CTYPES[ct])
    if ct == "f16":
        out[:, row[..., 0], col[..., 0]] = (words & 0xFFFF).astype(np.uint16)
        out[:, row[..., 1], col[..., 1]] = (words >> 16).astype(np.uint16)
    else:
        out[:, row[..., 0], col[..., 0]] = words.view(CTYPES[ct])
    return out


def pack_a(A, at):
    """Logical A (T,64,K) -> register words (T,128,4) uint32."""
    row, col = a_map(at)
    bits = ATYPES[at][0]
    v = A[:, row, col]
    u = np.ascontiguousarray(v).view({16: np.uint16, 32: np.uint32, 8: np.uint8}[bits])
    u = u.astype(np.uint32)
    word = np.zeros(u.shape[:3], np.uint32)
    for j in range(u.shape[3]):
        word |= u[..., j] << np.uint32(j * bits)
    return word


# ----------------------------------------------------------------------------------------
# Input generators. All return logical A (m,k), B (k,n), C (m,n) raw bits.


def gen_fp(rng, kind, at, bt, ct, n, k, trial=0):
    Nrm = rng.standard_normal
    ea = {"f16": 10, "bf16": 40, "tf32": 40, "e4m3": 5, "e5m2": 10}
    emin = {t: 1 - ((1 << (FLOATS[t][0] - 1)) - 1) for t in FLOATS}
    if kind == "normal":
        a, b, c = Nrm((M, k)), Nrm((k, n)), Nrm((M, n))
    elif kind == "wide":
        sg = lambda s: rng.choice([-1.0, 1.0], s) * (1 + rng.random(s))
        a = sg((M, k)) * 2.0 ** rng.integers(-ea[at], ea[at] + 1, (M, k))
        b = sg((k, n)) * 2.0 ** rng.integers(-ea[bt], ea[bt] + 1, (k, n))
        E = min(ea[at] + ea[bt], 14 if ct == "f16" else 100)
        c = sg((M, n)) * 2.0 ** rng.integers(-E, E + 1, (M, n))
    elif kind == "tiny":
        fa, fb = FLOATS[at][1], FLOATS[bt][1]
        sub = lambda s, f, e: rng.choice([-1.0, 1.0], s) * rng.integers(1, 1 << f, s) * 2.0 ** (e - f)
        a = np.where(rng.random((M, k)) < 0.5, sub((M, k), fa, emin[at]),
                     Nrm((M, k)) * 2.0 ** (emin[at] + 2))
        b = np.where(rng.random((k, n)) < 0.3, sub((k, n), fb, emin[bt]), Nrm((k, n)))
        c = np.where(rng.random((M, n)) < 0.5, 0.0, Nrm((M, n)) * 2.0 ** (emin[at] + emin[bt]))
    elif kind == "probe":
        s = rng.integers(1, 30, M).astype(float)
        k0, k1 = rng.integers(0, k, 2)
        k1 = (k0 + 1 + k1 % (k - 1)) % k
        a = Nrm((M, k)) * 2.0**-6
        a[:, k0] = rng.choice([-1.0, 1.0], M) * (1 + rng.random(M))
        a[:, k1] = rng.choice([-1.0, 1.0], M) * (1 + rng.random(M)) * 2.0 ** -np.minimum(s, 6)
        b = Nrm((k, n)) * 2.0**-6
        b[k0, :] = 1 + rng.random(n)
        b[k1, :] = rng.choice([-1.0, 1.0], n) * (1 + rng.random(n)) * 2.0 ** -np.maximum(s.mean() - 6, 0)
        c = rng.choice([-1.0, 1.0], (M, n)) * (1 + rng.random((M, n))) * 2.0 ** rng.integers(-24, 4, (M, n))
    elif kind == "cancel":
        a, b = to_f64(from_f64(Nrm((M, k)), at), at), to_f64(from_f64(Nrm((k, n)), bt), bt)
        c = -(a @ b)
    elif kind == "special":
        a, b, c = Nrm((M, k)), Nrm((k, n)), Nrm((M, n))
        for arr, t in ((a, at), (b, bt), (c, ct)):
            sel = rng.random(arr.shape) < 0.06
            arr[sel] = rng.choice(special_values(t), sel.sum())
    elif kind == "random_bits":
        return random_bits(rng, at, (M, k)), random_bits(rng, bt, (k, n)), random_bits(rng, ct, (M, n))
    elif kind == "zero_sign":
        a = rng.choice([-0.0, 0.0], (M, k))
        b = Nrm((k, n))
        if trial % 2:  # exact x, -x pairs
            a = to_f64(from_f64(Nrm((M, k)), at), at)
            a[:, 1::2] = -a[:, 0::2]
            b = np.repeat(to_f64(from_f64(Nrm((k // 2, n)), bt), bt), 2, axis=0)
        c = rng.choice([-0.0, 0.0], (M, n))
    elif kind == "block":
        j = trial % k
        a = Nrm((M, k)) * 2.0 ** -(ea[at] // 2)
        b = Nrm((k, n)) * 2.0 ** -(ea[bt] // 2)
        a[:, j] = rng.choice([-1.0, 1.0], M) * (1 + rng.random(M)) * 2.0 ** (ea[at] // 2)
        b[j, :] = rng.choice([-1.0, 1.0], n) * (1 + rng.random(n)) * 2.0 ** (ea[bt] // 2)
        c = np.where(rng.random((M, n)) < 0.5, 0.0, Nrm((M, n)))
    else:
        raise ValueError(f"gen_fp: unknown kind {kind!r}")
    return from_f64(a, at, rng), from_f64(b, bt, rng), from_f64(c, ct, rng)


def gen_int(rng, kind, at, bt, n, k):
    rngs = {"s8": (-128, 128), "u8": (0, 256), "b1": (0, 2)}
    A = rng.integers(*rngs[at], (M, k))
    B = rng.integers(*rngs[bt], (k, n))
    if kind == "int":
        C = rng.integers(-1000, 1001, (M, n))
    elif kind == "int_big_c":
        C = rng.integers(-(1 << 31), 1 << 31, (M, n), dtype=np.int64)
    elif kind == "int_extreme":
        lo, hi = rngs[at][0], rngs[at][1] - 1
        A = rng.choice([lo, hi, hi - 1, lo + 1, 0, -1 if lo < 0 else 1], (M, k))
        lo, hi = rngs[bt][0], rngs[bt][1] - 1
        B = rng.choice([lo, hi, hi - 1, lo + 1], (k, n))
        C = rng.choice([-(1 << 31), (1 << 31) - 1, (1 << 31) - 5000, -(1 << 31) + 5000, 0], (M, n))
    else:
        raise ValueError(f"gen_int: unknown kind {kind!r}")
    return (A.astype(ATYPES[at][1]), B.astype(ATYPES[bt][1]),
            np.asarray(C, np.int64).astype(np.int32))


def gen_chain(rng, kind, at, bt, ct, n, K):
    if kind == "normal":
        a, b, c = rng.standard_normal((M, K)), rng.standard_normal((K, n)), rng.standard_normal((M, n))
    elif kind == "positive":
        a, b, c = rng.uniform(0, 4, (M, K)), rng.uniform(0, 4, (K, n)), rng.uniform(0, 4, (M, n))
    elif kind == "wide":
        return gen_fp(rng, "wide", at, bt, ct, n, K)
    else:
        raise ValueError(f"gen_chain: unknown kind {kind!r}")
    return from_f64(a, at, rng), from_f64(b, bt, rng), from_f64(c, ct, rng)


def layout_planes(at, bt, ct, n, k):
    """Bit-plane trials: D[i,j] = bit p of i (row planes), then of j (column planes)."""
    one = {"f16": 0x3C00, "bf16": 0x3F80, "tf32": 0x3F800000, "e4m3": 0x38, "e5m2": 0x3C,
           "s8": 1, "u8": 1, "b1": 1}
    P_r, P_c = 6, max(1, int(np.log2(n)))
    As, Bs = [], []
    for p in range(P_r + P_c):
        A = np.zeros((M, k), np.int64)
        B = np.zeros((k, n), np.int64)
        if p < P_r:
            A[:, 0] = np.where((np.arange(M) >> p) & 1, one[at], 0)
            B[0, :] = one[bt]
        else:
            A[:, 0] = one[at]
            B[0, :] = np.where((np.arange(n) >> (p - P_r)) & 1, one[bt], 0)
        As.append(A.astype(np.uint64).astype(ATYPES[at][1]) if at != "s8" else A.astype(np.int8))
        Bs.append(B.astype(np.uint64).astype(ATYPES[bt][1]) if bt != "s8" else B.astype(np.int8))
    C = np.zeros((len(As), M, n), CTYPES[ct])
    return np.stack(As), np.stack(Bs), C


# ----------------------------------------------------------------------------------------
# float64 reference, only to flag a wrong layout in the log (the model lives elsewhere).


def reference_error(cfg, A, B, C, D, sa=1, sb=1, scale_d=1):
    at, bt, ct = cfg["at"], cfg["bt"], cfg["ct"]
    if ct == "s32":
        a, b = A.astype(np.int64), B.astype(np.int64)  # b1: popc(a & b) = sum of a*b
        prod = np.einsum("tmk,tkn->tmn", a, b)
        want = prod + C.astype(np.int64) * scale_d
        if cfg["sat"]:
            want = np.clip(want, -(1 << 31), (1 << 31) - 1)
        want = ((want + (1 << 31)) % (1 << 32) - (1 << 31)).astype(np.int32)
        return float(np.mean(want != D))
    a, b = to_f64(A, at) * sa, to_f64(B, bt) * sb
    c = to_f64(C, ct) * scale_d
    d = to_f64(D, ct)
    want = np.einsum("tmk,tkn->tmn", a, b) + c
    mag = np.einsum("tmk,tkn->tmn", np.abs(a), np.abs(b)) + np.abs(c)
    with np.errstate(invalid="ignore"):
        err = np.abs(d - want) / np.maximum(mag, 1e-30)
    ok = np.isfinite(err)
    return float(np.max(err[ok])) if ok.any() else 0.0


# ----------------------------------------------------------------------------------------
# CUDA source: wgmma.cu (the kernel, hand-written) includes wgmma_ops.inc, generated from
# all_ops() at build time (never committed; capture_wgsp.py generates its own).


def _imm(key):
    at, bt, ct, n, areg, ta, tb, sa, sb, sat = key
    if at in ("f16", "bf16"):
        return [sa, sb, tb] if areg else [sa, sb, ta, tb]
    if at in ("tf32", "e4m3", "e5m2"):
        return [sa, sb]
    return []


def _instr(key):
    at, bt, ct, n, areg, ta, tb, sa, sb, sat = key
    k = ATYPES[at][2]
    if at == "b1":
        return f"wgmma.mma_async.sync.aligned.m64n{n}k{k}.s32.b1.b1.and.popc"
    if ct == "s32":
        return f"wgmma.mma_async.sync.aligned.m64n{n}k{k}{'.satfinite' if sat else ''}.s32.{at}.{bt}"
    return f"wgmma.mma_async.sync.aligned.m64n{n}k{k}.{ct}.{at}.{bt}"


def op_struct(i, name, instr, ct, n, areg, imm, sel=None):
    """``struct Op<i>`` of wgmma_ops.inc (its interface: wgmma.cu's header): one asm block
    running ``instr`` on the accumulators (``ct``, N = ``n``), A from registers (``areg``)
    or a descriptor, the B descriptor, then, for a sparse instruction (``sel`` not None),
    the metadata register and the sparsity selector, then scale-d and the immediates
    ``imm``."""
    nr = n // 4 if ct == "f16" else n // 2
    T = "float" if ct == "f32" else "uint32_t"
    con = "+f" if ct == "f32" else "+r"
    dl = ",".join(f"%{j}" for j in range(nr))
    if areg:
        ain = "{" + ",".join(f"%{nr + j}" for j in range(4)) + "}"
        ins = [f'"r"(a[{j}])' for j in range(4)]
    else:
        ain = f"%{nr}"
        ins = ['"l"(da)']
    operands = [f"{{{dl}}}", ain, f"%{nr + len(ins)}"]
    ins.append('"l"(db)')
    if sel is not None:
        operands += [f"%{nr + len(ins)}", str(sel)]
        ins.append('"r"(e)')
    psd = f"%{nr + len(ins)}"
    ins.append('"r"(sd)')
    args = ", ".join(operands + ["p"] + [str(v) for v in imm])
    outs = ", ".join(f'"{con}"(d[{j}])' for j in range(nr))
    return (
        f"// {name}\n"
        f"struct Op{i} {{\n  using T = {T};\n  static constexpr int NR = {nr};\n"
        f"  static constexpr bool AREG = {'true' if areg else 'false'};\n"
        f"  static constexpr bool SP = {'false' if sel is None else 'true'};\n"
        f"  __device__ __forceinline__ static void run(T* d, const uint32_t* a, "
        f"unsigned long long da, unsigned long long db, uint32_t e, int sd) {{\n"
        f"    (void)a; (void)da; (void)e;\n#ifdef WG_SM90A\n"
        f'    asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, {psd}, 0;\\n"\n'
        f'        "wgmma.fence.sync.aligned;\\n"\n'
        f'        "{instr} {args};\\n"\n'
        f'        "wgmma.commit_group.sync.aligned;\\n"\n'
        f'        "wgmma.wait_group.sync.aligned 0;\\n}}\\n"\n'
        f"        : {outs}\n        : {', '.join(ins)}\n        : \"memory\");\n"
        f"#else\n    (void)d; (void)db; (void)sd;\n#endif\n  }}\n}};\n"
    )


def ops_inc(tool, names, structs):
    """wgmma_ops.inc: the Op structs and the table WGMMA_TABLE(X) naming them in order."""
    table = " \\\n".join(f'  X("{nm}", Op{i})' for i, nm in enumerate(names))
    return f"// generated by {tool}: do not edit\n{''.join(structs)}\n#define WGMMA_TABLE(X) \\\n{table}\n"


class WgOp:
    """A compiled kernel variant (an op key) as driver.py's table builds see it."""

    def __init__(self, key):
        self.key, self.name = key, op_name(key)

    def ptx(self):
        return _instr(self.key)


def gen_inc(ops):
    """wgmma_ops.inc of the kernel variants ``ops`` (WgOp)."""
    structs = [op_struct(i, o.name, _instr(o.key), o.key[2], o.key[3], o.key[4], _imm(o.key))
               for i, o in enumerate(ops)]
    return ops_inc("capture_wgmma.py", [o.name for o in ops], structs)


def compile_inc(inc, out, nvcc="nvcc", cubin=False):
    """Compiles wgmma.cu with the generated table ``inc`` (or, with ``cubin``, only
    assembles its device code); returns (exit status, compiler messages)."""
    return driver.nvcc_table(SRC, "wgmma_ops.inc", inc, out, ARCH, nvcc, cubin)


def build_table(what, stem, cfgs, gen, nvcc="nvcc"):
    """driver.build_table of wgmma.cu with the table ``gen(cfgs)``: (library, configurations
    in it, {name: why ptxas refused})."""
    BUILD.mkdir(exist_ok=True)
    lib = BUILD / f"lib{stem}_sm90a_{driver.source_key(SRC.read_bytes(), gen(cfgs), ' '.join(ARCH))}.so"
    cfgs, bad = driver.build_table(what, lib, cfgs,
                                   lambda cs, out, cubin: compile_inc(gen(cs), out, nvcc, cubin),
                                   nvcc, f"{stem}_")
    return lib, cfgs, bad


def build(nvcc="nvcc"):
    """The library of every kernel variant (all_ops()) for sm_90a, built unless up to date;
    a variant that ptxas refuses is left out (logged; its jobs fail)."""
    return build_table("wgmma.cu for sm_90a", "wgmma", [WgOp(k) for k in all_ops()], gen_inc,
                       nvcc)[0]


def probe_ptxas(nvcc="nvcc", jobs=8):
    """{name: first error line} of the kernel variants that ptxas refuses, each alone."""
    return driver.probe_ptxas([WgOp(k) for k in all_ops()],
                              lambda c, out: compile_inc(gen_inc([c]), out, nvcc, cubin=True),
                              "wgmma_", jobs)


class Lib:
    def __init__(self, path):
        L, device = driver.load(path, "wg")
        self.L, self.check = L, driver.checker(L, "wg")
        L.wg_op_name.restype = ctypes.c_char_p
        self.device, self.cc = str(device), device.cc
        self.versions = (device.runtime, device.driver)
        self.index = {L.wg_op_name(i).decode(): i for i in range(L.wg_count())}

    def run(self, key, img, desc, areg, cwords, steps, scale_d):
        """img (T*steps, bytes) uint8; desc (T*steps, 2) uint64; cwords (T,128,NR)."""
        name = op_name(key)
        if name not in self.index:
            raise KeyError(f"{name}: not in the library (ptxas refused it; see the build log)")
        T = cwords.shape[0]
        img = np.ascontiguousarray(img, np.uint8)
        desc = np.ascontiguousarray(desc, np.uint64)
        areg = np.ascontiguousarray(areg if areg is not None else np.zeros(4, np.uint32), np.uint32)
        cwords = np.ascontiguousarray(cwords, np.uint32)
        d = np.zeros_like(cwords)
        p = lambda a: a.ctypes.data_as(ctypes.c_void_p)
        self.check(self.L.wg_run(self.index[name], T, steps, p(img), ctypes.c_longlong(img.shape[1]),
                                 p(areg), p(desc), None, scale_d, p(cwords), p(d)))
        return d


# ----------------------------------------------------------------------------------------
# Jobs: every configuration is a job with deterministic inputs (seeded by its name).


def cfg_of(key):
    at, bt, ct, n, areg, ta, tb, sa, sb, sat = key
    return dict(at=at, bt=bt, ct=ct, n=n, k=ATYPES[at][2], sat=sat, sa=sa, sb=sb)


# Raw-byte budgets per configuration (before compression), chosen so that each npz stays
# under 12 MiB with the default --scale 1 (random bits compress to about 70-85%).
BUDGET = {"n8": 330_000, "n8fp8": 500_000, "n16": 160_000, "big": 120_000, "variant": 60_000}
CHAIN_PER_KIND = {128: 3, 256: 1, 4: 4}  # trials per kind for chains of that many steps


def trial_bytes(key, steps=1):
    at, bt, ct, n = key[:4]
    k = ATYPES[at][2] * steps
    store = lambda t: np.dtype(ATYPES[t][1]).itemsize
    return M * k * store(at) + k * n * store(bt) + 2 * M * n * np.dtype(CTYPES[ct]).itemsize


def plan_kinds(kinds, T):
    """T trials, kinds round robin (a prefix of the list keeps the kinds balanced)."""
    T = max(1, T)
    if T >= len(kinds):
        T -= T % len(kinds)
    return [kinds[i % len(kinds)] for i in range(T)]


def trial_plan(key, scale, quick, variant):
    at, n = key[0], key[3]
    kinds = INT_KINDS if key[2] == "s32" else FP_KINDS
    if variant:
        b = BUDGET["variant"]
    elif n == 8:
        b = BUDGET["n8fp8" if at in ("e4m3", "e5m2") and key[2] == "f32" else "n8"]
    elif n == 16:
        b = BUDGET["n16"]
    else:
        b = BUDGET["big"]
    T = int(b * scale * (0.25 if quick else 1.0) // trial_bytes(key))
    cap = 32 * len(kinds) * (2 if at in ("e4m3", "e5m2") and n == 8 else 1)
    return plan_kinds(kinds, min(T, cap))


def jobs(only, scale, quick):
    js = []
    if "plain" in only:
        for key in plain_configs():
            js.append(dict(group="full", name=f"wgmma/{op_name(key)}", key=key, la=("K", 0),
                           lb=("K", 0), scale_d=1, steps=1,
                           kinds=trial_plan(key, scale, quick, False), layout=True))
    if "variants" in only:
        for sfx, key, la, lb, sd in variant_configs():
            base = op_name(op_key(*key[:4], sat=key[9]))
            js.append(dict(group="full", name=f"wgmma/{base}{sfx}", key=key, la=la, lb=lb,
                           scale_d=sd, steps=1, kinds=trial_plan(key, scale, quick, True),
                           layout=False))
    if "chain" in only:
        for a, b, c, steps, tpk in CHAINS:
            key = op_key(a, b, c, 8)
            per = CHAIN_PER_KIND[steps] * scale * (0.5 if quick else 1.0)
            per = max(1, min(tpk, int(round(per))))
            js.append(dict(group="chain", name=f"chain/wgmma/{op_name(key)}x{steps}", key=key,
                           la=("K", 0), lb=("K", 0), scale_d=1, steps=steps,
                           kinds=plan_kinds(CHAIN_KINDS, 3 * per), layout=False))
    return js


def make_inputs(job, seed):
    key = job["key"]
    cfg = cfg_of(key)
    h = int.from_bytes(hashlib.sha256(f"{seed}/{job['name']}".encode()).digest()[:8], "little")
    rng = np.random.default_rng(h)
    at, bt, ct, n, k = cfg["at"], cfg["bt"], cfg["ct"], cfg["n"], cfg["k"]
    trials = []
    for i, kd in enumerate(job["kinds"]):
        if job["steps"] > 1:
            trials.append(gen_chain(rng, kd, at, bt, ct, n, k * job["steps"]))
        elif ct == "s32":
            trials.append(gen_int(rng, kd, at, bt, n, k))
        else:
            trials.append(gen_fp(rng, kd, at, bt, ct, n, k, trial=i // len(FP_KINDS)))
    return [np.stack([t[j] for t in trials]) for j in range(3)]


def execute(lib, job, A, B, C):
    """Runs one job's trials; returns D words (T,128,NR) and (desc_a, desc_b)."""
    key, steps = job["key"], job["steps"]
    cfg = cfg_of(key)
    k, T = cfg["k"], A.shape[0]
    imgs, aregs = [], []
    for s in range(steps):
        As, Bs = A[:, :, s * k:(s + 1) * k], B[:, s * k:(s + 1) * k, :]
        img, da, db = build_images(As, Bs, cfg["at"], cfg["bt"], job["la"], job["lb"])
        imgs.append(img)
        if job["la"] is None:
            aregs.append(pack_a(As, cfg["at"]))
    img = np.stack(imgs, 1).reshape(T * steps, -1)
    desc = np.tile(np.array([da, db], np.uint64), (T * steps, 1))
    areg = np.stack(aregs, 1).reshape(T * steps, 128, 4) if aregs else None
    words = lib.run(key, img, desc, areg, pack_c(C, cfg["ct"]), steps, job["scale_d"])
    return words, (da, db)


def worker(args):
    """Runs jobs start.. of the list; each finished job is saved to parts/{index}.npz."""
    lib = Lib(build(args.nvcc))
    parts = pathlib.Path(args.parts)
    js = jobs(args.only.split(","), args.scale, args.quick)
    for i in range(args.start, len(js)):
        job = js[i]
        t0 = time.time()
        out = {}
        try:
            A, B, C = make_inputs(job, args.seed)
            words, (da, db) = execute(lib, job, A, B, C)
            cfg = cfg_of(job["key"])
            D = unpack_d(words, cfg["n"], cfg["ct"])
            nm = job["name"]
            out = {f"{nm}/A": A, f"{nm}/B": B, f"{nm}/C": C, f"{nm}/D": D,
                   f"{nm}/kind": np.array(job["kinds"]),
                   f"{nm}/desc_a": np.array(da, np.uint64), f"{nm}/desc_b": np.array(db, np.uint64)}
            if job["layout"]:
                LA, LB, LC = layout_planes(cfg["at"], cfg["bt"], cfg["ct"], cfg["n"], cfg["k"])
                lw, _ = execute(lib, dict(job, steps=1, scale_d=1), LA, LB, LC)
                out[f"{nm}/layout_D"] = lw
            sel = np.array([kd in ("normal", "positive", "int") for kd in job["kinds"]])
            err = reference_error(cfg, A[sel], B[sel], C[sel], D[sel], cfg["sa"], cfg["sb"],
                                  job["scale_d"]) if sel.any() else 0.0
            flag = ""
            if (cfg["ct"] == "s32" and err > 0) or (cfg["ct"] != "s32" and err > 1e-2):
                flag = "  SUSPECT: far from the float64 reference (layout or descriptor wrong?)"
            msg = f"ok   {nm}: T={A.shape[0]} ref-err={err:.2e} {time.time() - t0:.1f}s{flag}"
        except RuntimeError as e:  # a CUDA error: the context may be dead, start afresh
            msg = f"FAIL {job['name']}: CUDA: {e}"
            log(msg)
            np.savez(parts / f"{i}.npz", __fail__=np.array(msg))
            sys.exit(3)
        except Exception as e:  # noqa: BLE001 - logged, the job is skipped
            msg = f"FAIL {job['name']}: {type(e).__name__}: {e}"
            out = {}
        np.savez(parts / f"{i}.npz", __fail__=np.array(msg), **out)
        log(msg)


def file_size(d):
    import io
    bio = io.BytesIO()
    np.savez_compressed(bio, **d)
    return bio.tell()


def trim_to_fit(d, limit):
    """Drops trials from the end of every configuration (keeping kinds balanced) to fit."""
    size = file_size(d)
    frac = 1.0
    while size > limit and frac > 0.05:
        frac *= 0.85 * limit / size
        names = {k.rsplit("/", 1)[0] for k in d if k.endswith("/kind")}
        for nm in names:
            T = len(d[f"{nm}/kind"])
            keep = max(min(T, 3), int(T * frac))
            for p in ("A", "B", "C", "D", "kind"):
                d[f"{nm}/{p}"] = d[f"{nm}/{p}"][:keep]
        size = file_size(d)
        log(f"  trimmed to {frac:.2f} of the trials: {size / 2**20:.1f} MiB")
    return size


def selftest():
    """Host-only checks: descriptor encoding, swizzle round trips, register maps."""
    rng = np.random.default_rng(0)
    d = encode_desc(1024, 128, 256, 1, 3)
    assert decode_desc(d) == dict(start=1024, lbo=128, sbo=256, base_offset=3, swizzle=1), d
    n_ok = 0
    for at in ATYPES:
        kd = ATYPES[at][2]
        for major in ("K", "MN") if ATYPES[at][0] == 16 else ("K",):
            for sw in (0, 1, 2, 3):
                for mn in (8, 16, 64, 256):
                    A = rng.integers(0, 2 if at == "b1" else 250, (2, mn, kd)).astype(ATYPES[at][1])
                    lbo, sbo, size = operand_layout(mn, kd * ATYPES[at][0] // 8, major, sw,
                                                    elem_bytes_of(at))
                    img = np.full((2, size + 1024), FILL, np.uint8)
                    scatter(img, 1024, A, at, major, sw, lbo, sbo)
                    back = gather(img, 1024, mn, kd, at, major, sw, lbo, sbo)
                    assert np.array_equal(back, A), (at, major, sw, mn)
                    off, bit = element_offsets(mn, kd, ATYPES[at][0], major, sw, lbo, sbo)
                    pos = swizzle_addr(1024 + off, sw) * 8 + bit
                    assert len(np.unique(pos)) == pos.size, ("overlap", at, major, sw, mn)
                    assert off.max() < size
                    n_ok += 1
    for n in (8, 16, 64, 256):
        for ct in ("f32", "f16", "s32"):
            r, c = d_map(n, ct)
            assert len(np.unique(r * n + c)) == M * n
            C = rng.integers(0, 1 << 15, (2, M, n)).astype(CTYPES[ct])
            assert np.array_equal(unpack_d(pack_c(C, ct), n, ct), C)
    for at in ("f16", "tf32", "e4m3", "s8"):
        r, c = a_map(at)
        assert len(np.unique(r * ATYPES[at][2] + c)) == M * ATYPES[at][2]
    ops = [WgOp(k) for k in all_ops()]
    assert len({o.name for o in ops}) == len(ops), "two kernel variants share a name"
    inc = gen_inc(ops)
    for i, o in enumerate(ops):
        assert inc.count(f'X("{o.name}", Op{i})') == 1 and f"{o.ptx()} {{" in inc, o.name
    log(f"selftest ok: {n_ok} layout round trips, descriptors, register maps, "
        f"{len(ops)} kernel variants in the table")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    driver.add_common_args(ap, out_help="output folder",
                           scale_help="multiplies the trial counts (files are trimmed to 12 MiB anyway)")
    ap.add_argument("--quick", action="store_true", help="a quarter of the trials")
    ap.add_argument("--only", default="plain,variants,chain")
    ap.add_argument("--selftest", action="store_true")
    ap.add_argument("--probe-ptxas", action="store_true",
                    help="assemble every kernel variant alone and say which ptxas refuses")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--start", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--parts", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    bad = set(args.only.split(",")) - {"plain", "variants", "chain"}
    if bad:
        ap.error(f"--only: unknown {sorted(bad)}; allowed: plain, variants, chain")
    if args.probe_ptxas:
        driver.require_nvcc(args.nvcc)
        return driver.print_probe([WgOp(k) for k in all_ops()], probe_ptxas(args.nvcc))
    if args.selftest:
        selftest()
        return
    if args.worker:
        worker(args)
        return
    if not args.out:
        ap.error("--out DIR is required")
    t0 = time.time()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    lib = Lib(build(args.nvcc))
    log(f"GPU: {lib.device} (runtime {lib.versions[0]}, driver {lib.versions[1]})")
    if lib.cc != 90:
        log(f"WARNING: wgmma needs sm_90a (compute capability 9.0); this GPU is sm_{lib.cc}")
    del lib
    parts = out / ".wgmma_parts"
    shutil.rmtree(parts, ignore_errors=True)
    parts.mkdir()
    js = jobs(args.only.split(","), args.scale, args.quick)
    log(f"{len(js)} configurations, {sum(len(j['kinds']) for j in js)} trials")
    start = 0
    base = [sys.executable, __file__, "--worker", "--parts", str(parts), "--seed", str(args.seed),
            "--scale", str(args.scale), "--only", args.only, "--nvcc", args.nvcc]
    if args.quick:
        base.append("--quick")
    while start < len(js):
        try:
            rc = subprocess.run(base + ["--start", str(start)], timeout=150).returncode
        except subprocess.TimeoutExpired:
            rc = None
            log(f"worker timed out (started at job {start})")
        nxt = next((i for i in range(start, len(js)) if not (parts / f"{i}.npz").exists()), None)
        if nxt is None:
            break
        if rc != 3:  # the worker died inside job nxt without recording it
            msg = f"FAIL {js[nxt]['name']}: worker died (exit {rc}; see the messages above)"
            np.savez(parts / f"{nxt}.npz", __fail__=np.array(msg))
            log(msg)
            nxt += 1
        start = nxt  # rc 3: the worker recorded its failed job and exited; go on after it
    results = {"full": {}, "chain": {}}
    fails = []
    for i, job in enumerate(js):
        p = parts / f"{i}.npz"
        if not p.exists():
            continue
        z = np.load(p)
        if str(z["__fail__"]).startswith("FAIL"):
            fails.append(str(z["__fail__"]))
        for kk in z.files:
            if kk != "__fail__":
                results[job["group"]][kk] = z[kk]
    shutil.rmtree(parts, ignore_errors=True)
    dev = Lib(build(args.nvcc)).device
    for grp, fn in (("full", "wgmma_full.npz"), ("chain", "wgmma_chain.npz")):
        if not results[grp]:
            continue
        d = dict(results[grp], device=np.array(dev))
        size = trim_to_fit(d, MAX_NPZ - 256 * 1024)
        np.savez_compressed(out / fn, **d)
        log(f"wrote {out / fn}: {size / 2**20:.2f} MiB, "
            f"{sum(k.endswith('/kind') for k in d)} configurations")
    log(f"{len(fails)} configurations failed" + "".join("\n  " + f for f in fails))
    log(f"total {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
