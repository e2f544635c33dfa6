"""Deterministic float32 inputs of the quantizer cross-checks (NumPy only).

``tools/crosscheck/mx_golden.py`` (run with torchao / microxcaling in a separate venv)
and ``tests/scaling/test_mx_golden.py`` (jaxwarp) both call :func:`mx_inputs` /
:func:`nvfp4_inputs`, so the golden file stores a seed and the reference's outputs
(per-chunk SHA-256 digests and a readable sample), not the inputs. Every draw is a
``numpy.random.Generator(PCG64)`` integer draw with an explicit dtype, and every value
is built from integer bit fields or exact float64 products, so the same seed gives the
same bits on every platform and NumPy version that keeps PCG64's stream.

Blocks cycle through kinds (``KINDS``), one kind per block:

* ``binades``: random bits within a few binades of a random base exponent (any scale);
* ``binades0``: the same around 1 (the element grid's own magnitudes);
* ``ties``: a block whose largest element fixes the scale at ``2**s`` and whose other
  elements are exact midpoints of the element grid times ``2**s`` (ties, the tie above
  the largest value included), grid points, and midpoints one float32 ulp off;
* ``subnormal``: float32 subnormals (and some zeros);
* ``elem_subnormal``: values that land in the element format's subnormal range after
  scaling (the block's amax fixes the scale, the rest are tiny);
* ``zeros``: signed zeros, or zeros and one nonzero value;
* ``saturate``: amax between the element's largest value and the next power of two,
  times a power of two (rounds above the largest value: saturation);
* ``pow2``: amax at, just below and just above a power of two and near ``max * 2**k``
  (the scale rules' boundaries);
* ``extreme``: float32's largest and smallest binades (huge and tiny scales);
* ``nonfinite``: a ``binades`` block holding a NaN or an infinity (only where a caller
  asks for it).
"""

from __future__ import annotations

import numpy as np

KINDS = ("binades", "binades0", "ties", "subnormal", "elem_subnormal", "zeros",
         "saturate", "pow2", "extreme", "nonfinite")
CHUNK = 4096  # values per digest

# Element formats: (fraction bits, exponent bias, exponent field width, largest value);
# "s8" is MXINT8's int8 x 2**-6 (its grid is k / 64, k = 0..127).
ELEMENTS = {"e4m3": (3, 7, 4, 448.0), "e5m2": (2, 15, 5, 57344.0),
            "e2m3": (3, 1, 2, 7.5), "e3m2": (2, 3, 3, 28.0), "e2m1": (1, 1, 2, 6.0),
            "s8": None}


def grid(elem: str) -> np.ndarray:
    """The element format's nonnegative values, ascending (float64, exact)."""
    if ELEMENTS[elem] is None:
        return np.arange(128, dtype=np.float64) / 64.0
    m, bias, ew, top = ELEMENTS[elem]
    vals = []
    for e in range(1 << ew):
        for f in range(1 << m):
            v = (f / (1 << m)) * 2.0 ** (1 - bias) if e == 0 else \
                (1 + f / (1 << m)) * 2.0 ** (e - bias)
            if v <= top:
                vals.append(v)
    return np.unique(np.array(vals, np.float64))


def _emax(elem: str) -> int:
    return int(np.floor(np.log2(grid(elem)[-1])))


def _from_bits(sign, exp, frac) -> np.ndarray:
    return ((sign.astype(np.uint32) << np.uint32(31)) | (exp.astype(np.uint32) << np.uint32(23))
            | frac.astype(np.uint32))


def _bits_of(v: np.ndarray) -> np.ndarray:
    """float64 values that are exact float32 numbers -> their float32 bits."""
    f = v.astype(np.float32)
    assert np.array_equal(f.astype(np.float64), v, equal_nan=True), "inexact input"
    return f.view(np.uint32)


def _blocks(rng: np.random.Generator, kind: str, nb: int, bs: int, elem: str,
            infinities: bool = True) -> np.ndarray:
    """``nb`` blocks of ``bs`` inputs of one kind, uint32 bits, shape (nb, bs)."""
    g = grid(elem)
    emax = _emax(elem)
    top = g[-1]
    shape = (nb, bs)
    sign = rng.integers(0, 2, shape, dtype=np.uint32)
    frac = rng.integers(0, 1 << 23, shape, dtype=np.uint32)
    sgn = np.where(sign == 1, -1.0, 1.0)
    col = np.arange(bs)[None, :]

    def per_block(lo, hi):  # one integer per block, as a column
        return rng.integers(lo, hi, (nb, 1), dtype=np.int64)

    if kind in ("binades", "nonfinite"):
        e = np.clip(per_block(1, 255) + rng.integers(-12, 3, shape, dtype=np.int64), 0, 254)
        out = _from_bits(sign, e, frac)
        if kind == "nonfinite":
            specials = np.array([0x7FC00000, 0x7F800000, 0xFF800000, 0x7FA00001]
                                if infinities else
                                [0x7FC00000, 0xFFC00000, 0xFFFFFFFF, 0x7FA00001], np.uint32)
            out = np.where(col == per_block(0, bs), specials[per_block(0, 4)], out)
        return out
    if kind == "binades0":
        return _from_bits(sign, 127 + rng.integers(-10, 4, shape, dtype=np.int64), frac)
    if kind == "ties":
        s = per_block(-125, 126 - emax)
        mids = np.concatenate([(g[:-1] + g[1:]) / 2, [top + (top - g[-2]) / 2]])
        pick = rng.integers(0, 3, shape, dtype=np.int64)
        v = np.where(pick == 0, g[rng.integers(0, g.size, shape, dtype=np.int64)],
                     mids[rng.integers(0, mids.size, shape, dtype=np.int64)])
        v = np.where(col == 0, top, v)
        bits = _bits_of(sgn * v * np.exp2(s.astype(np.float64)))
        nudge = (pick == 2) & (col != 0) & (v != 0)  # one float32 ulp off the tie
        step = np.where(rng.integers(0, 2, shape, dtype=np.int64) == 1, 1, -1)
        return np.where(nudge, (bits.astype(np.int64) + step).astype(np.uint32), bits)
    if kind == "subnormal":
        frac = np.where(rng.integers(0, 8, shape, dtype=np.int64) == 0, np.uint32(0), frac)
        frac = frac >> rng.integers(0, 23, shape, dtype=np.uint32)
        return _from_bits(sign, np.zeros(shape, np.int64), frac)
    if kind == "elem_subnormal":
        s = per_block(-120, 120 - emax)
        lo = int(np.floor(np.log2(g[1])))  # the smallest subnormal's exponent
        e = np.clip(lo + s + 127 + rng.integers(-3, 3, shape, dtype=np.int64), 1, 254)
        head = _bits_of(sgn * top * np.exp2(s.astype(np.float64)))
        return np.where(col == 0, head, _from_bits(sign, e, frac))
    if kind == "zeros":
        one = _from_bits(sign, rng.integers(0, 255, shape, dtype=np.int64), frac)
        where = (col == per_block(0, bs)) & (per_block(0, 2) == 1)
        return np.where(where, one, sign << np.uint32(31))
    if kind == "saturate":
        # float32 values in [top, 2**(emax+1)) * 2**s: bits between the two ends
        s = per_block(-126, 126 - emax).astype(np.float64)
        a = _bits_of(top * np.exp2(s)).astype(np.int64)
        b = _bits_of(np.exp2(s + emax + 1)).astype(np.int64)
        hi = (a + (rng.integers(0, 1 << 40, shape, dtype=np.int64) % (b - a))).astype(np.uint32)
        hi = hi | (sign << np.uint32(31))
        e = np.clip(127 + s.astype(np.int64) + emax - rng.integers(0, 6, shape, dtype=np.int64),
                    0, 254)
        keep = (rng.integers(0, 2, shape, dtype=np.int64) == 1) | (col == 0)
        return np.where(keep, hi, _from_bits(sign, e, frac))
    if kind == "pow2":
        k = per_block(-130, 128 - emax)
        t = np.where(per_block(0, 2) == 1, np.exp2((k + emax).astype(np.float64)),
                     top * np.exp2(k.astype(np.float64)))
        c = _bits_of(t).astype(np.int64) + per_block(-40, 41)
        c = np.clip(c, 1, 0x7F7FFFFF).astype(np.uint32) | (sign << np.uint32(31))
        e = np.clip(127 + k + emax - rng.integers(0, 8, shape, dtype=np.int64), 0, 254)
        return np.where(col == 0, c, _from_bits(sign, e, frac))
    if kind == "extreme":
        e = np.array([0, 1, 2, 3, 252, 253, 254], np.int64)[
            rng.integers(0, 7, shape, dtype=np.int64)]
        e = np.where(per_block(0, 2) == 1, e, np.minimum(e, 3))
        return _from_bits(sign, e, frac)
    raise ValueError(f"unknown kind {kind!r}")


def kinds_of(n_blocks: int, nonfinite: bool) -> list[str]:
    """The kind of each block of a chunk: the kinds in turn (``nonfinite`` only if
    asked)."""
    ks = [k for k in KINDS if nonfinite or k != "nonfinite"]
    return [ks[i % len(ks)] for i in range(n_blocks)]


def mx_chunk(seed: int, chunk: int, elem: str, block: int = 32,
             nonfinite: bool = True, infinities: bool = True) -> np.ndarray:
    """Chunk ``chunk`` (``CHUNK`` values) of the inputs, uint32 bits, shape
    (CHUNK // block, block): one block of 1D-blocked quantization per row. Each chunk
    has its own generator (``PCG64([seed, chunk])``), so any chunk is made alone.
    ``infinities=False`` puts NaNs where the ``nonfinite`` blocks hold infinities."""
    rng = np.random.Generator(np.random.PCG64([seed, chunk]))
    nb = CHUNK // block
    kinds = np.array(kinds_of(nb, nonfinite))
    out = np.zeros((nb, block), np.uint32)
    for kind in dict.fromkeys(kinds):
        rows = np.flatnonzero(kinds == kind)
        out[rows] = _blocks(rng, kind, rows.size, block, elem, infinities)
    return out


def mx_inputs(seed: int, n: int, elem: str, block: int = 32,
              nonfinite: bool = True, infinities: bool = True) -> np.ndarray:
    """The first ``n`` inputs (a multiple of ``CHUNK``), shape (n // block, block)."""
    assert n % CHUNK == 0 and CHUNK % block == 0
    return np.concatenate([mx_chunk(seed, c, elem, block, nonfinite, infinities)
                           for c in range(n // CHUNK)])


def nvfp4_inputs(seed: int, n: int, shape: tuple[int, int] = (16, 64)) -> np.ndarray:
    """The first ``n`` NVFP4 inputs as uint32 bits, shape (tensors, rows, cols): tensors of
    ``shape`` (each with its own per-tensor scale), blocks of 16 along the rows, each row
    of 16 a block of the kinds in turn (no NaN or infinity: one makes the whole tensor
    NaN)."""
    rows, cols = shape
    assert CHUNK % (rows * cols) == 0
    x = mx_inputs(seed, n, "e2m1", block=16, nonfinite=False)
    return x.reshape(-1, rows, cols)
