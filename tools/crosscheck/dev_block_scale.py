"""Cross-check of the block-scaled MMA model against MMA-Sim, in two steps.

1. ``gen`` (run with a Python that has MMA-Sim 2.1.1 and torch): draws inputs of every
   block-scaled configuration the six ways of the reference files (``normal``, ``wide``,
   ``random_bits``, ``cancel``, ``tiny``, ``specials``; scales drawn the same ways, NaN
   scales among the specials), runs MMA-Sim on them and writes a file of ``golden/...``
   keys (the reference-file format: raw bits, A / B packed as the files pack them)::

       python tools/crosscheck/dev_block_scale.py gen OUT.npz --outputs 100000

2. ``check`` (run with jaxwarp's Python): compares the model's D bits with the file's,
   per configuration and per kind of input::

       python tools/crosscheck/dev_block_scale.py check OUT.npz

``--small`` writes the small sample kept in ``tests/data`` (a few trials of a subset of
the configurations). MMA-Sim is run through its operation's ``dpa`` on the expanded row
and column vectors of many trials at once, which is what its ``__call__`` does for one
trial (checked on the first trial of each configuration).
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

F8F6F4 = ("e5m2", "e4m3", "e3m2", "e2m3", "e2m1")
KINDS = ("normal", "wide", "random_bits", "cancel", "tiny", "specials")
FACTS = {"e4m3": (4, 3), "e5m2": (5, 2), "e3m2": (3, 2), "e2m3": (2, 3), "e2m1": (2, 1)}


def configs(small: bool):
    """(family, arch, qualifier) of every block-scaled configuration (``small``: a subset)."""
    out = []
    ab = [(a, b) for a in F8F6F4 for b in F8F6F4]
    if small:
        ab = [("e4m3", "e4m3"), ("e5m2", "e2m1"), ("e3m2", "e2m3"), ("e2m1", "e4m3")]
    fp4 = [("mxf4", 32, "ue8m0"), ("mxf4nvf4", 32, "ue8m0"), ("mxf4nvf4", 16, "ue8m0"),
           ("mxf4nvf4", 16, "ue4m3")]
    for a, b in ab:
        out.append(("mma_block_scale", "RTX_Blackwell",
                    f"m16n8k32.kind::mxf8f6f4.block32.f32.{a}.{b}.f32.ue8m0"))
    for kind, blk, s in fp4:
        out.append(("mma_block_scale", "RTX_Blackwell",
                    f"m16n8k64.kind::{kind}.block{blk}.f32.e2m1.e2m1.f32.{s}"))
    ns = [8, 64, 136, 256, 24, 200]
    for i, (a, b) in enumerate(ab):
        n = 8 if small else ns[i % len(ns)]
        out.append(("tcgen05_block_scale", "Blackwell",
                    f"m128n{n}k32.kind::mxf8f6f4.block32.f32.{a}.{b}.ue8m0"))
    for i, (kind, blk, s) in enumerate(fp4):
        n = 8 if small else ns[i % len(ns)]
        out.append(("tcgen05_block_scale", "Blackwell",
                    f"m128n{n}k64.kind::{kind}.block{blk}.f32.e2m1.e2m1.{s}"))
    return out


def parse(family: str, q: str):
    parts = q.split(".")
    m, rest = parts[0][1:].split("n")
    n, k = rest.split("k")
    kind = parts[1].removeprefix("kind::")
    return dict(m=int(m), n=int(n), k=int(k), kind=kind, block=int(parts[2][5:]),
                a=parts[4], b=parts[5], s=parts[-1], packed=kind != "mxf8f6f4")


# --------------------------------------------------------------------------------------
# Drawing inputs (NumPy only).


def values(fmt: str) -> np.ndarray:
    """Value of every code of an element format (NaN for NaN codes, +-inf for inf)."""
    eb, mb = FACTS[fmt]
    bias = (1 << (eb - 1)) - 1
    codes = np.arange(1 << (1 + eb + mb))
    e, m = (codes >> mb) & ((1 << eb) - 1), codes & ((1 << mb) - 1)
    mag = np.where(e == 0, m * 2.0 ** (1 - bias - mb), (m + (1 << mb)) * 2.0 ** (e - bias - mb))
    if fmt == "e4m3":
        mag = np.where((e == 15) & (m == 7), np.nan, mag)
    if fmt == "e5m2":
        mag = np.where(e == 31, np.where(m == 0, np.inf, np.nan), mag)
    return np.where(codes >> (eb + mb), -mag, mag)


def nearest_codes(fmt: str, x: np.ndarray) -> np.ndarray:
    """Codes of the finite values nearest to x (saturating)."""
    v = values(fmt)
    finite = np.flatnonzero(np.isfinite(v))
    order = finite[np.argsort(v[finite], kind="stable")]
    sv = v[order]
    i = np.clip(np.searchsorted(sv, x), 1, len(sv) - 1)
    pick = np.where(np.abs(sv[i - 1] - x) <= np.abs(sv[i] - x), i - 1, i)
    return order[pick].astype(np.uint8)


def draw_elems(rng, fmt: str, kind: str, shape) -> np.ndarray:
    """Codes (one per entry, low bits) of an element operand."""
    v = values(fmt)
    eb, mb = FACTS[fmt]
    if kind == "random_bits":
        return rng.choice(np.flatnonzero(np.isfinite(v)), shape).astype(np.uint8)
    if kind == "specials":
        return rng.integers(0, 1 << (1 + eb + mb), shape).astype(np.uint8)
    if kind == "tiny":  # the smallest binades: subnormals and the first normals
        small = np.flatnonzero(np.isfinite(v) & (np.abs(v) <= 4 * 2.0 ** (2 - (1 << (eb - 1)))))
        return rng.choice(small, shape).astype(np.uint8)
    x = rng.standard_normal(shape)
    if kind == "wide":
        x = x * 2.0 ** rng.integers(-12, 13, shape)
    return nearest_codes(fmt, x)


def draw_scales(rng, s: str, kind: str, shape) -> np.ndarray:
    if s == "ue8m0":
        lo, hi = {"normal": (122, 133), "wide": (87, 168), "random_bits": (0, 255),
                  "cancel": (122, 133), "tiny": (0, 24), "specials": (0, 256)}[kind]
        x = rng.integers(lo, hi, shape)
        if kind == "specials":
            x = np.where(rng.random(shape) < 0.05, 0xFF, x)
        return x.astype(np.uint8)
    # ue4m3: e4m3 codes (the sign bit set at random in specials: ignored)
    lo, hi = {"normal": (0x30, 0x48), "wide": (0x08, 0x78), "random_bits": (0, 0x7F),
              "cancel": (0x30, 0x48), "tiny": (0, 0x10), "specials": (0, 0x100)}[kind]
    x = rng.integers(lo, hi, shape)
    if kind == "specials":
        x = np.where(rng.random(shape) < 0.05, 0x7F | (rng.integers(0, 2, shape) << 7), x)
    return x.astype(np.uint8)


def draw_c(rng, kind: str, shape) -> np.ndarray:
    if kind == "random_bits":
        x = rng.integers(0, 2**32, shape, dtype=np.uint64).astype(np.uint32)
        return np.where((x & 0x7F800000) == 0x7F800000, x ^ 0x40000000, x).astype(np.uint32)
    if kind == "specials":
        x = rng.integers(0, 2**32, shape, dtype=np.uint64).astype(np.uint32)
        sp = np.array([0x7F800000, 0xFF800000, 0x7FC00000, 0x80000000, 0, 1, 0x80000001,
                       0x7F7FFFFF], np.uint32)
        return np.where(rng.random(shape) < 0.3, rng.choice(sp, shape), x).astype(np.uint32)
    if kind == "tiny":
        x = rng.standard_normal(shape) * 2.0 ** rng.integers(-150, -118, shape)
        return x.astype(np.float32).view(np.uint32)
    x = rng.standard_normal(shape) * (2.0 ** rng.integers(-12, 13, shape) if kind == "wide"
                                      else 1.0)
    return x.astype(np.float32).view(np.uint32)


def to_file(codes: np.ndarray, fmt: str, packed: bool, axis: int) -> np.ndarray:
    """Codes (one per entry) -> the file's bytes."""
    if packed:
        x = np.moveaxis(codes, axis, -1)
        x = (x[..., 0::2] << 4) | x[..., 1::2]
        return np.moveaxis(x, -1, axis).astype(np.uint8)
    return (codes << (2 if fmt == "e2m1" else 0)).astype(np.uint8)


def draw(rng, cfg, t: int):
    """One configuration's trials: file-format arrays and the kind of each trial."""
    m, n, k, blk = cfg["m"], cfg["n"], cfg["k"], cfg["block"]
    kinds = np.array([KINDS[i % len(KINDS)] for i in range(t)])
    A = np.zeros((t, m, k), np.uint8)
    B = np.zeros((t, k, n), np.uint8)
    C = np.zeros((t, m, n), np.uint32)
    SA = np.zeros((t, m, k // blk), np.uint8)
    SB = np.zeros((t, k // blk, n), np.uint8)
    for i, kind in enumerate(kinds):
        A[i] = draw_elems(rng, cfg["a"], kind, (m, k))
        B[i] = draw_elems(rng, cfg["b"], kind, (k, n))
        if kind == "cancel":  # B's columns repeat A's first row, some negated
            va = values(cfg["a"])[A[i, 0]]
            sign = np.where(rng.random((k, n)) < 0.5, -1.0, 1.0)
            B[i] = nearest_codes(cfg["b"], va[:, None] * sign)
        C[i] = draw_c(rng, kind, (m, n))
        SA[i] = draw_scales(rng, cfg["s"], kind, (m, k // blk))
        SB[i] = draw_scales(rng, cfg["s"], kind, (k // blk, n))
    A = to_file(A, cfg["a"], cfg["packed"], -1)
    B = to_file(B, cfg["b"], cfg["packed"], -2)
    return A, B, C, SA, SB, kinds


# --------------------------------------------------------------------------------------
# MMA-Sim (gen) and the model (check).


def run_mmasim(family, arch, q, A, B, C, SA, SB):
    import torch
    from mmasim import nv_ptx

    cls = nv_ptx.MMABlockScale if family == "mma_block_scale" else nv_ptx.TCGen05MMABlockScale
    op = cls(arch.replace("_", " "), q)
    cfg = parse(family, q)
    sdt = torch.float8_e8m0fnu if cfg["s"] == "ue8m0" else torch.float8_e4m3fn
    fp8 = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}

    def ab(x, fmt):
        x = torch.from_numpy(np.ascontiguousarray(x))
        return x.view(fp8[fmt]) if fmt in fp8 and not cfg["packed"] else x

    def one(t):
        d = op(ab(A[t], cfg["a"]), ab(B[t], cfg["b"]), torch.from_numpy(C[t].copy()).view(
            torch.float32), torch.from_numpy(SA[t].copy()).view(sdt),
            torch.from_numpy(SB[t].copy()).view(sdt))
        return d.view(torch.int32).numpy().view(np.uint32)

    out = np.zeros(C.shape, np.uint32)
    m, n = C.shape[1:]
    step = max(1, 2**18 // (m * n))
    for t0 in range(0, A.shape[0], step):
        sl = slice(t0, t0 + step)
        a = ab(A[sl], cfg["a"])[:, :, None, :].expand(-1, -1, n, -1)
        b = ab(B[sl], cfg["b"]).transpose(1, 2)[:, None, :, :].expand(-1, m, -1, -1)
        sa = torch.from_numpy(SA[sl].copy()).view(sdt)[:, :, None, :].expand(-1, -1, n, -1)
        sb = torch.from_numpy(SB[sl].copy()).view(sdt).transpose(1, 2)[:, None].expand(
            -1, m, -1, -1)
        c = torch.from_numpy(C[sl].copy()).view(torch.float32)
        d = op.dpa(a, b, c, sa, sb)
        out[sl] = d.contiguous().view(torch.int32).numpy().view(np.uint32)
    if not np.array_equal(out[0], one(0)):
        raise AssertionError(f"{q}: batched dpa differs from MMA-Sim's __call__")
    return out


def gen(path: str, outputs: int, small: bool, seed: int) -> None:
    import mmasim

    rng = np.random.default_rng(seed)
    arrays = {}
    for family, arch, q in configs(small):
        cfg = parse(family, q)
        per = cfg["m"] * cfg["n"]
        t = 6 if small else -(-outputs // per // 6) * 6
        A, B, C, SA, SB, kinds = draw(rng, cfg, t)
        D = run_mmasim(family, arch, q, A, B, C, SA, SB)
        key = f"golden/{family}/{arch}/{q}"
        for name, x in dict(A=A, B=B, C=C, D=D, SA=SA, SB=SB, kind=kinds).items():
            arrays[f"{key}/{name}"] = x
        print(q, t, "trials", D.size, "outputs", flush=True)
    arrays["device"] = np.array(f"MMA-Sim {getattr(mmasim, '__version__', '2.1.1')} "
                                f"(dev_block_scale.py, seed {seed})")
    np.savez_compressed(path, **arrays)


def check(path: str) -> int:
    """Runs jaxwarp's block-scaled model on every group of the file (``jaxwarp.conformance``,
    the ``mma_block_scale`` / ``tcgen05_block_scale`` handlers) and prints the matches."""
    from jaxwarp import conformance

    results, _ = conformance.check_file(path)
    total = bad = 0
    for r in results:
        total += r.total
        bad += r.total - r.matched
        why = r.error or (r.note if r.not_modelled else "")
        print(f"{r.group}: {why or f'{r.matched}/{r.total} match'}", r.note if not why else "",
              flush=True)
    print(f"total: {total - bad}/{total} outputs match")
    return 1 if bad else 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("step", choices=("gen", "check"))
    p.add_argument("path")
    p.add_argument("--outputs", type=int, default=100_000, help="outputs per configuration")
    p.add_argument("--small", action="store_true", help="the small tests/data sample")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.step == "gen":
        gen(args.path, args.outputs, args.small, args.seed)
        return 0
    return check(args.path)


if __name__ == "__main__":
    sys.exit(main())
