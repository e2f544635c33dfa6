"""What the sparse capture scripts share: the mma.sp configuration, the metadata layout and
the input generators. capture_sp.py (mma.sp) and capture_wgsp.py (wgmma.sp) both import it,
so neither imports the other for these.

The logical -> register mapping of the metadata (PTX ISA 9.7.14.6: sparse matrix fragments
and metadata) is numpy here; schema in FORMAT_SP.md. Needs numpy.
"""

from __future__ import annotations

import dataclasses
import pathlib
import sys

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import capture_ptx as cp  # noqa: E402  (formats, dense fragment layouts, input generators)

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
