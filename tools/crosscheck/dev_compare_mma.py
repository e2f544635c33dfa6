"""Cross-check of jaxwarp's mma.sync models against MMA-Sim 2.1.1 (a development tool).

Two steps, in two Python environments (MMA-Sim needs torch; jaxwarp never imports it):

  python dev_compare_mma.py draw OUT.npz ELEMS [ARCH] [QUALIFIER_PART] [CHAIN_ELEMS]
      (in MMA-Sim's environment) draws inputs for every ``mma.sync`` configuration
      MMA-Sim 2.1.1 models for ARCH (its name, spaces as ``_``; default: all): at least
      ELEMS output elements of single instructions (``golden/mma/...``) and CHAIN_ELEMS
      (default ELEMS / 4) of chains of 3 instructions along k (``golden/mma_chain/...``,
      each instruction's D the next one's C, computed instruction by instruction),
      in equal shares of the kinds of the reference files: ``normal``, ``wide``
      (exponents over +-12), ``random_bits`` (any finite code), ``cancel`` (B repeats
      A's first row with random signs), ``tiny`` (near the subnormal range, C as small
      as the products) and ``specials`` (any code, 10% NaN / inf); 8% zeros. Writes the
      ``golden/{family}/{arch}/{qualifier}/{A,B,C,D,kind}`` layout of the reference
      files (fp6 / fp4 in bytes as kind::f8f6f4 holds them).
  python dev_compare_mma.py compare FILE.npz [ARCH|-] [QUALIFIER_PART|-] [--targets]
      (in jaxwarp's environment) runs ``jaxwarp.mma(..., instruction="mma_sync")`` on
      every ``golden/mma`` and ``golden/mma_chain`` group (A and B longer than one
      instruction are a chain) on the target of each architecture (``--targets``: every
      target of that generation) and prints matched / total elements per configuration.

Not a test: the tests compare against the small files of ``tests/data``.
"""

from __future__ import annotations

import collections
import sys

import numpy as np

try:  # MMA-Sim's environment (draw)
    import torch
    from mmasim.nv_ptx import isa_mma, sim
except ImportError:
    torch = isa_mma = sim = None
try:  # jaxwarp's environment (compare)
    import jaxwarp
    FORMATS = jaxwarp.FORMATS
except ImportError:
    jaxwarp = FORMATS = None

# --------------------------------------------------------------------------------------
# draw (MMA-Sim's environment)

ARCHS = ["Volta", "Turing", "Ampere", "Ada Lovelace", "Hopper", "Blackwell", "RTX Blackwell"]
KINDS = ["normal", "wide", "random_bits", "cancel", "tiny", "specials"]

# type -> (bits, ebits, mbits, bias, storage torch dtype of the bits, value dtype)
FMT = {
    "f16": (16, 5, 10, 15), "bf16": (16, 8, 7, 127), "f32": (32, 8, 23, 127),
    "tf32": (32, 8, 23, 127), "e4m3": (8, 4, 3, 7), "e5m2": (8, 5, 2, 15),
    "e3m2": (6, 3, 2, 3), "e2m3": (6, 2, 3, 1), "e2m1": (4, 2, 1, 1),
}
UINT = {8: np.uint8, 16: np.uint16, 32: np.uint32, 6: np.uint8, 4: np.uint8}
if torch is not None:
    TORCH = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32,
             "tf32": torch.float32, "e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
    VIEW = {16: torch.int16, 32: torch.int32, 8: torch.uint8}


def finite(codes, t):
    bits, e, m, _ = FMT[t]
    c = codes.astype(np.int64)
    if t == "e4m3":
        return (c & 0x7F) != 0x7F
    if t in ("e3m2", "e2m3", "e2m1"):
        return np.ones(c.shape, bool)
    return ((c >> m) & ((1 << e) - 1)) != (1 << e) - 1


def is_nonfinite(codes, t):
    return ~finite(codes, t)


def encode(vals, t):
    """float64 values -> codes of t (round to nearest, saturating for small formats)."""
    vals = np.asarray(vals, np.float64)
    if t in TORCH:
        x = torch.from_numpy(vals).to(torch.float32)
        if t in ("e4m3", "e5m2"):
            lim = 448.0 if t == "e4m3" else 57344.0
            x = x.clamp(-lim, lim)
        if t in ("f32", "tf32"):
            x = torch.from_numpy(vals.astype(np.float32))
            return x.view(torch.int32).numpy().view(np.uint32)
        y = x.to(TORCH[t])
        bits = FMT[t][0]
        return y.view(VIEW[bits]).numpy().view(UINT[bits])
    # fp6 / fp4: nearest code by table
    table = decode_small_table(t)
    idx = np.abs(vals[..., None] - table[None, :]).argmin(-1)
    return idx.astype(np.uint8)


def decode_small_table(t):
    bits, e, m, bias = FMT[t]
    out = []
    for c in range(1 << bits):
        s = c >> (e + m)
        ex = (c >> m) & ((1 << e) - 1)
        fr = c & ((1 << m) - 1)
        frac = fr / (1 << m)
        v = frac * 2.0 ** (1 - bias) if ex == 0 else (1 + frac) * 2.0 ** (ex - bias)
        out.append(-v if s else v)
    return np.array(out)


def container(codes, t):
    """fp6/fp4 code -> 8-bit container (e2m3/e3m2 bits 5:0, e2m1 bits 5:2)."""
    if t == "e2m1":
        return (codes.astype(np.uint8) << 2)
    return codes.astype(np.uint8)


def draw(rng, t, shape, kind, emin_scale=0):
    bits, e, m, bias = FMT[t]
    emin = 1 - bias
    n = int(np.prod(shape))
    if kind == "random_bits":
        c = rng.integers(0, 1 << bits, n, dtype=np.uint64)
        bad = ~finite(c, t)
        while bad.any():
            c[bad] = rng.integers(0, 1 << bits, bad.sum(), dtype=np.uint64)
            bad = ~finite(c, t)
        codes = c.astype(UINT[bits])
    elif kind == "specials":
        c = rng.integers(0, 1 << bits, n, dtype=np.uint64)
        codes = c.astype(UINT[bits])
        # more specials: 10% are NaN / inf codes where the format has them
        sp = rng.random(n) < 0.1
        if t not in ("e3m2", "e2m3", "e2m1"):
            emax_code = ((1 << e) - 1) << m
            sign = rng.integers(0, 2, n, dtype=np.uint64) << (bits - 1)
            if t == "e4m3":
                spc = np.full(n, 0x7F, np.uint64)
            else:
                frac = np.where(rng.random(n) < 0.5, 0, rng.integers(1, 1 << m, n))
                spc = emax_code + frac.astype(np.uint64)
            codes = np.where(sp, (spc | sign).astype(UINT[bits]), codes)
    else:
        if kind == "normal":
            v = rng.standard_normal(n)
        elif kind in ("wide", "cancel"):
            lo, hi = (-12, 12) if kind == "wide" else (-3, 3)
            v = rng.choice([-1, 1], n) * 2.0 ** rng.integers(lo, hi + 1, n) * (1 + rng.random(n))
        elif kind == "tiny":
            v = rng.choice([-1, 1], n) * 2.0 ** (emin + emin_scale + rng.integers(-m - 1, 4, n)) \
                * (1 + rng.random(n))
        codes = encode(v, t)
        # clamp huge values of small formats
    codes = codes.reshape(shape)
    zeros = rng.random(shape) < 0.08
    codes = np.where(zeros, 0, codes).astype(UINT[bits])
    return codes


def to_torch(codes, t):
    bits = FMT[t][0]
    if t in ("e3m2", "e2m3", "e2m1"):
        return torch.from_numpy(container(codes, t))
    arr = codes.view({8: np.uint8, 16: np.int16, 32: np.int32}[bits]) if bits != 8 else codes
    x = torch.from_numpy(np.ascontiguousarray(arr))
    return x.view(TORCH[t])


def from_torch(x, t):
    bits = FMT[t][0]
    return x.view(VIEW[bits]).numpy().view(UINT[bits])


def decode_vals(codes, t):
    """codes -> float64 values (finite only; for cancel / tiny C)."""
    x = to_torch(codes, t)
    if t in ("e3m2", "e2m3", "e2m1"):
        return decode_small_table(t)[codes.astype(np.int64)]
    return x.double().numpy()


def parse_q(q):
    parts = q.split(".")
    kind = None
    if len(parts) == 6:
        shape, kind, d, a, b, c = parts
    else:
        shape, d, a, b, c = parts
    m = int(shape[1:shape.index("n")])
    n = int(shape[shape.index("n") + 1:shape.index("k")])
    k = int(shape[shape.index("k") + 1:])
    return (m, n, k), kind, d, a, b, c


def run(op, A, B, C):
    """MMA-Sim on batches: A (T, m, K), B (T, K, n), C (T, m, n) torch."""
    a = A[:, :, None, :].expand(-1, -1, B.shape[2], -1)
    b = B.transpose(1, 2)[:, None, :, :].expand(-1, A.shape[1], -1, -1)
    return op.dpa(a, b, C)


def gen(arch, q, elems, rng, chain):
    (m, n, k), kind_q, d, at, bt, ct = parse_q(q)
    if at == "f64":
        return None
    op = sim.MMA(arch, q)
    T = -(-elems // (m * n))
    T = -(-T // len(KINDS)) * len(KINDS)
    kinds = np.array([KINDS[i % len(KINDS)] for i in range(T)])
    nins = np.full(T, 3) if chain else np.ones(T, int)
    Kmax = k * int(nins.max())
    As = np.zeros((T, m, Kmax), UINT[FMT[at][0]])
    Bs = np.zeros((T, Kmax, n), UINT[FMT[bt][0]])
    Cs = np.zeros((T, m, n), UINT[FMT[ct][0]])
    for kd in KINDS:  # every trial of one kind at once
        sel = np.nonzero(kinds == kd)[0]
        if not len(sel):
            continue
        Tk = len(sel)
        a = draw(rng, at, (Tk, m, Kmax), kd)
        if kd == "cancel" and at == bt:
            b = np.repeat(a[:, 0, :, None], n, 2)
            flip = rng.random((Tk, Kmax, n)) < 0.5
            sbit = np.array(1 << (FMT[bt][0] - 1), UINT[FMT[bt][0]])
            b = np.where(flip, b ^ sbit, b).astype(UINT[FMT[bt][0]])
        else:
            b = draw(rng, bt, (Tk, Kmax, n), kd)
        if kd == "tiny":
            emin_a = 1 - FMT[at][3]
            emin_b = 1 - FMT[bt][3]
            v = rng.choice([-1, 1], (Tk, m, n)) * 2.0 ** (
                emin_a + emin_b + rng.integers(-4, 6, (Tk, m, n))) * (1 + rng.random((Tk, m, n)))
            c = encode(v, ct)
            c = np.where(rng.random((Tk, m, n)) < 0.3, 0, c).astype(UINT[FMT[ct][0]])
        elif kd == "cancel":
            c = draw(rng, ct, (Tk, m, n), "wide")
        else:
            c = draw(rng, ct, (Tk, m, n), kd)
        As[sel], Bs[sel], Cs[sel] = a, b, c
    D = np.zeros((T, m, n), UINT[FMT[d][0]])
    # group by number of instructions
    for ni in np.unique(nins):
        sel = np.nonzero(nins == ni)[0]
        cur = to_torch(Cs[sel], ct)
        for j in range(int(ni)):
            A = to_torch(np.ascontiguousarray(As[sel][:, :, j * k:(j + 1) * k]), at)
            B = to_torch(np.ascontiguousarray(Bs[sel][:, j * k:(j + 1) * k, :]), bt)
            cur = run(op, A, B, cur)
        D[sel] = from_torch(cur, d)
    if at in ("e3m2", "e2m3", "e2m1"):
        As = container(As, at)
    if bt in ("e3m2", "e2m3", "e2m1"):
        Bs = container(Bs, bt)
    out = {"A": As, "B": Bs, "C": Cs, "D": D, "kind": kinds}
    if chain:
        out["ninstr"] = nins
    return out


def draw_and_run(argv):
    out, elems = argv[0], int(argv[1])
    af = argv[2] if len(argv) > 2 else ""
    qf = argv[3] if len(argv) > 3 else ""
    chain_elems = int(argv[4]) if len(argv) > 4 else elems // 4
    rng = np.random.default_rng(int.from_bytes((out + af + qf).encode(), "little") % 2**32)
    res = {"device": np.array("MMA-Sim 2.1.1 (reference model, not hardware)")}
    for arch in ARCHS:
        if af and af != arch.replace(" ", "_"):
            continue
        for q in isa_mma.mma_shape_and_type[arch]:
            if qf and qf not in q:
                continue
            for chain in (False, True):
                (m, n, k), kq, d, at, bt, ct = parse_q(q)
                if chain and (ct != d or chain_elems == 0):
                    continue
                r = gen(arch, q, chain_elems if chain else elems, rng, chain)
                if r is None:
                    continue
                fam = "mma_chain" if chain else "mma"
                for f, v in r.items():
                    res[f"golden/{fam}/{arch.replace(' ', '_')}/{q}/{f}"] = v
                print(arch, q, fam, r["D"].shape, flush=True)
    np.savez_compressed(out, **res)



# --------------------------------------------------------------------------------------
# compare (jaxwarp's environment)

TARGETS = {"Volta": ["sm_70"], "Turing": ["sm_75"], "Ampere": ["sm_80", "sm_86", "sm_87"],
           "Ada_Lovelace": ["sm_89"], "Hopper": ["sm_90"],
           "Blackwell": ["sm_100a", "sm_103a"], "RTX_Blackwell": ["sm_120a", "sm_121a"]}
SMALL = ("e3m2", "e2m3", "e2m1")


def logical(codes, t):
    fmt = FORMATS[t]
    dt = np.dtype(fmt.storage_dtype)
    if t in SMALL:
        return ((codes >> fmt.unpacked_lsb) & ((1 << fmt.bits) - 1)).astype(np.uint8)
    return codes.view(dt)


def compare(argv):
    z = np.load(argv[0])
    af = argv[1] if len(argv) > 1 and argv[1] != "-" else ""
    qf = argv[2] if len(argv) > 2 and argv[2] != "-" else ""
    all_targets = "--targets" in argv
    groups = collections.OrderedDict()
    for key in z.files:
        p = key.split("/")
        if p[0] != "golden" or p[1] not in ("mma", "mma_chain") or p[-1] != "D":
            continue
        groups[(p[1], p[2], p[3])] = "/".join(p[:4])
    rows = []
    for (fam, arch, q), pre in groups.items():
        if (af and af != arch) or (qf and qf not in q):
            continue
        (_, _, k), _, d, at, bt, ct = parse_q(q)
        A, B, C, D = (z[f"{pre}/{f}"] for f in "ABCD")
        kinds = z[f"{pre}/kind"]
        nins = z[f"{pre}/ninstr"] if fam == "mma_chain" else np.ones(len(A), int)
        for target in (TARGETS[arch] if all_targets else TARGETS[arch][:1]):
            try:
                got = np.zeros_like(D)
                for ni in np.unique(nins):
                    sel = np.nonzero(nins == ni)[0]
                    K = k * int(ni) if fam == "mma_chain" else A.shape[-1]
                    a = logical(A[sel][:, :, :K], at)
                    b = logical(B[sel][:, :K, :], bt)
                    c = logical(C[sel], ct)
                    out = jaxwarp.mma(a, b, c, a_format=at, b_format=bt, c_format=ct, d_format=d,
                                      arch=target, instruction="mma_sync", instruction_k=k)
                    got[sel] = np.asarray(out).view(D.dtype)
                ok = got == D
                bad_kinds = collections.Counter(kinds[np.nonzero(~ok.all(axis=(1, 2)))[0]])
                rows.append((fam, arch, target, q, int(ok.sum()), ok.size, dict(bad_kinds)))
            except Exception as e:  # noqa: BLE001
                rows.append((fam, arch, target, q, 0, D.size, f"ERROR {type(e).__name__}: "
                             f"{str(e)[:150]}"))
            r = rows[-1]
            print(f"{r[0]:9s} {r[2]:8s} {r[3]:45s} {r[4]:7d}/{r[5]:7d} "
                  f"{100 * r[4] / r[5]:8.3f}% {r[6] if r[4] != r[5] else ''}", flush=True)
    tot = sum(r[4] for r in rows), sum(r[5] for r in rows)
    print(f"TOTAL {tot[0]}/{tot[1]} configs {len(rows)} all-match "
          f"{sum(r[4] == r[5] for r in rows)}")



if __name__ == "__main__":
    {"draw": draw_and_run, "compare": compare}[sys.argv[1]](sys.argv[2:])
