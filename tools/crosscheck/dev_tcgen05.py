"""Cross-check of jaxwarp's tcgen05.mma against MMA-Sim 2.1.1 (``mmasim.nv_ptx.TCGen05MMA``).

MMA-Sim (torch) and jaxwarp (jax) live in different environments, so the check is three
steps over .npz files of raw bits (the layout of the reference-model files: A (M, K),
B (K, N), C and D (M, N), one trial per key ``{qualifier}/{i}/{field}``):

    python tools/crosscheck/dev_tcgen05.py gen in.npz [f16 tf32 f8f6f4 fp6fp4] [--small]
    MMASIM_PYTHON tools/crosscheck/dev_tcgen05.py ref in.npz ref.npz
    python tools/crosscheck/dev_tcgen05.py compare in.npz ref.npz [logical|desc|mma]
    python tools/crosscheck/dev_tcgen05.py testdata in.npz ref.npz   (writes tests/data)

``gen`` draws at least 120,000 outputs per kind group (``--small``: six m64n8 trials
per qualifier, one per input kind) with the input kinds of the reference-model files:
normal, wide (exponents over about +-12), random_bits (any finite code), cancel (B's
columns repeat A's first row, half of it negated), tiny (near the subnormal range),
specials (any code, NaN and inf included). fp6 / fp4 elements are one per byte, e2m3 /
e3m2 in bits 5:0 and e2m1 in bits 5:2. ``compare`` runs ``tcgen05_mma_logical``
(default), ``tcgen05_mma`` through shared memory in a random canonical layout (``desc``),
or ``jaxwarp.mma(instruction="tcgen05")`` (``mma``), and prints equal counts per kind
group and input kind.
"""

import collections
import pathlib
import sys

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # this checkout's jaxwarp, not an installed one

KINDS = ("normal", "wide", "random_bits", "cancel", "tiny", "specials")
FP8 = ("e4m3", "e5m2")
FP64 = ("e3m2", "e2m3", "e2m1")
SUB = {"e3m2": 0, "e2m3": 0, "e2m1": 2}  # fp6 in bits 5:0, fp4 in bits 5:2 of a byte
WIDTH = {"e3m2": 6, "e2m3": 6, "e2m1": 4}


# --------------------------------------------------------------------------------------
# gen (jaxwarp's environment: ml_dtypes)


def _formats():
    import ml_dtypes
    return {  # name: (dtype, bits dtype, emin, fraction bits)
        "f16": (np.float16, np.uint16, -14, 10),
        "bf16": (ml_dtypes.bfloat16, np.uint16, -126, 7),
        "f32": (np.float32, np.uint32, -126, 23),
        "tf32": (np.float32, np.uint32, -126, 23),
        "e4m3": (ml_dtypes.float8_e4m3fn, np.uint8, -6, 3),
        "e5m2": (ml_dtypes.float8_e5m2, np.uint8, -14, 2),
        "e3m2": (ml_dtypes.float6_e3m2fn, np.uint8, -2, 2),
        "e2m3": (ml_dtypes.float6_e2m3fn, np.uint8, 0, 3),
        "e2m1": (ml_dtypes.float4_e2m1fn, np.uint8, 0, 1),
    }


FMT: dict = {}


def _to_bits(v, t):
    dt, bdt, _, _ = FMT[t]
    x = np.asarray(v, np.float32).astype(dt)
    if t in WIDTH:
        return (x.view(np.uint8) << SUB[t]).astype(np.uint8)
    return x.view(bdt)


def _finite(bits, t):
    if t in WIDTH:
        return np.ones(bits.shape, bool)
    return np.isfinite(bits.view(FMT[t][0]).astype(np.float32))


def _codes(rng, shape, t, specials=False):
    dt, bdt, _, _ = FMT[t]
    if t in WIDTH:
        return (rng.integers(0, 1 << WIDTH[t], shape).astype(np.uint8) << SUB[t]).astype(
            np.uint8)
    nb = np.dtype(bdt).itemsize * 8
    b = rng.integers(0, 1 << nb, shape, dtype=np.uint64).astype(bdt)
    while not specials and (~_finite(b, t)).any():
        bad = ~_finite(b, t)
        b[bad] = rng.integers(0, 1 << nb, int(bad.sum()), dtype=np.uint64).astype(bdt)
    return b


def _draw(rng, shape, t, kind):
    _, bdt, emin, mbits = FMT[t]
    if kind == "normal":
        return _to_bits(rng.standard_normal(shape), t)
    if kind == "wide":
        e = rng.integers(max(emin, -12), 13, shape)
        return _to_bits(rng.standard_normal(shape) * np.exp2(e), t)
    if kind == "random_bits":
        return _codes(rng, shape, t)
    if kind == "tiny":
        e = rng.uniform(emin - mbits, emin + 2, shape)
        return _to_bits(rng.choice([-1.0, 1.0], shape) * np.exp2(e), t)
    if kind == "specials":
        b = _codes(rng, shape, t, specials=True)
        if t not in WIDTH:
            sp = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0], np.float32).astype(
                FMT[t][0]).view(bdt)
            pick = rng.random(shape) < 0.05
            b[pick] = rng.choice(sp, int(pick.sum()))
        return b
    raise ValueError(kind)


def _sign_bit(t, itemsize):
    if t in WIDTH:
        return 1 << (WIDTH[t] - 1 + SUB[t])
    return 1 << (8 * itemsize - 1)


def _trial(rng, m, n, k, a_t, b_t, d_t, kind):
    if kind != "cancel":
        return (_draw(rng, (m, k), a_t, kind), _draw(rng, (k, n), b_t, kind),
                _draw(rng, (m, n), d_t, kind))
    a = _draw(rng, (m, k), a_t, "normal")
    b = _draw(rng, (k, n), b_t, "normal")
    h = k // 2
    if a_t == b_t:  # B's columns repeat A's first row, its second half negated
        col = a[0].copy()
        col[h:] ^= np.asarray(_sign_bit(a_t, a.dtype.itemsize), col.dtype)
        b[:, : n // 2] = col[:, None]
    a[1:, h:] = a[1:, :h]
    return a, b, _draw(rng, (m, n), d_t, "normal")


def _qualifiers(group):
    if group == "f16":
        return [(16, "f32", "f16", "f16", "f16"), (16, "f32", "bf16", "bf16", "f16"),
                (16, "f16", "f16", "f16", "f16")]
    if group == "tf32":
        return [(8, "f32", "tf32", "tf32", "tf32")]
    if group == "f8f6f4":
        return [(32, d, a, b, "f8f6f4") for d in ("f32", "f16") for a in FP8 for b in FP8]
    if group == "fp6fp4":
        ts = FP8 + FP64
        return [(32, d, a, b, "f8f6f4") for d in ("f32", "f16") for a in ts for b in ts
                if a in FP64 or b in FP64]
    raise ValueError(group)


def gen(out, groups, small):
    FMT.update(_formats())
    rng = np.random.default_rng(20261126)
    data = {}
    for g in groups:
        qs = _qualifiers(g)
        per_q = -(-120_000 // len(qs))
        ns = [8, 16, 24, 64, 136, 256] if len(qs) < 20 else [8, 16, 24, 40]
        for qi, (k, d, a_t, b_t, kind_name) in enumerate(qs):
            n_out, i = 0, 0
            while i < len(KINDS) or (not small and n_out < per_q):
                m = 64 if small else (64, 128)[(i + qi) % 2]
                n = 8 if small else int(rng.choice(ns))
                kind = KINDS[i % len(KINDS)]
                q = f"m{m}n{n}k{k}.kind::{kind_name}.{d}.{a_t}.{b_t}"
                a, b, c = _trial(rng, m, n, k, a_t, b_t, d, kind)
                key = f"{q}/{i}"
                data.update({key + "/A": a, key + "/B": b, key + "/C": c,
                             key + "/kind": np.array(kind)})
                n_out += m * n
                i += 1
    np.savez_compressed(out, **data)
    print(sum(k.endswith("/A") for k in data), "trials")


# --------------------------------------------------------------------------------------
# ref (MMA-Sim's environment: torch)


def ref(inp, out):
    import torch
    from mmasim.nv_ptx import TCGen05MMA

    tdt = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32,
           "tf32": torch.float32, "e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2,
           "e3m2": torch.uint8, "e2m3": torch.uint8, "e2m1": torch.uint8}
    views = {1: np.uint8, 2: np.int16, 4: np.int32}
    ints = {2: torch.int16, 4: torch.int32}

    def as_torch(bits, t):
        return torch.from_numpy(bits.view(views[bits.dtype.itemsize]).copy()).view(tdt[t])

    z = np.load(inp)
    res, sims = {}, {}
    for key in sorted({k.rsplit("/", 1)[0] for k in z.files}):
        q = key.rsplit("/", 1)[0]
        _, _, d, a_t, b_t = q.split(".")
        sim = sims.setdefault(q, TCGen05MMA("Blackwell", q))
        dd = sim(as_torch(z[key + "/A"], a_t), as_torch(z[key + "/B"], b_t),
                 as_torch(z[key + "/C"], d))
        n = dd.element_size()
        res[key + "/D"] = dd.view(ints[n]).numpy().view({2: np.uint16, 4: np.uint32}[n])
    np.savez_compressed(out, **res)
    print(len(res), "trials")


# --------------------------------------------------------------------------------------
# compare / testdata (jaxwarp's environment)


def _layout(rows, k, ebytes, mn_major, sw, base):
    """(descriptor, bytes, (lbo, sbo)) of a non-overlapping canonical layout at ``base``."""
    import jaxwarp
    if not mn_major:
        lbo, sbo = (128, 256) if sw == 0 else (16, 8 * sw)
        size = sbo * (rows // 8)
    elif sw == 0:
        sbo, lbo = 128, 128 * -(-rows * ebytes // 16)
        size = lbo * -(-k // 8)
    else:
        lbo = 8 * sw
        sbo = lbo * -(-rows * ebytes // sw)
        size = sbo * -(-k // 8)
    return jaxwarp.make_smem_descriptor(base, lbo, sbo, swizzle=sw), size, (lbo, sbo)


def store(smem, x, base, lbo, sbo, sw, mn_major):
    """Writes ``x`` (rows = M or N, K) of raw bits into ``smem`` (uint8, in place) in the
    PTX ISA's canonical layout: core matrices of 8 rows x 16 bytes, K-major or M/N-major,
    then the ``sw``-byte swizzle of the address (bits 4.. XOR bits 7..). Written here from
    the ISA's text, apart from jaxwarp's own reading of it, which ``tcgen05_mma`` checks."""
    rows, k = x.shape
    nb = x.dtype.itemsize
    r = np.arange(rows)[:, None, None]
    kk = np.arange(k)[None, :, None]
    j = np.arange(nb)[None, None, :]
    if mn_major:
        mb = nb * r + j
        off = (mb % 16 + mb // 16 * sbo + kk % 8 * 16 + kk // 8 * lbo if sw == 0 else
               mb % sw + mb // sw * lbo + kk % 8 * sw + kk // 8 * sbo)
    else:
        kb = kk * nb + j
        off = (r % 8 * 16 + r // 8 * sbo + kb % 16 + kb // 16 * lbo if sw == 0 else
               r % 8 * sw + r // 8 * sbo + kb)
    addr = base + off
    if sw:
        addr = addr ^ (((addr >> 7) & (sw // 16 - 1)) << 4)
    smem[addr] = np.ascontiguousarray(x).astype(x.dtype.newbyteorder("<")).view(
        np.uint8).reshape(rows, k, nb)
    return smem


def run_desc(q, a, b, c, rng):
    """tcgen05_mma on A and B stored in random canonical layouts."""
    import jaxwarp
    instr = jaxwarp.parse_tcgen05(q)
    ta, tb = (bool(rng.integers(2)) for _ in range(2))
    swa, swb = (int(rng.choice([0, 32, 64, 128])) for _ in range(2))
    da, size_a, (lbo_a, sbo_a) = _layout(instr.m, instr.k, a.dtype.itemsize, ta, swa, 0)
    base_b = -(-size_a // 1024) * 1024
    db, size_b, (lbo_b, sbo_b) = _layout(instr.n, instr.k, b.dtype.itemsize, tb, swb, base_b)
    smem = np.zeros(base_b + size_b + 1024, np.uint8)
    store(smem, np.asarray(a), 0, lbo_a, sbo_a, swa, ta)
    store(smem, np.asarray(b).T, base_b, lbo_b, sbo_b, swb, tb)
    idesc = jaxwarp.make_instr_descriptor(instr, transpose_a=ta, transpose_b=tb)
    return jaxwarp.tcgen05_mma(instr.opcode, c, da, db, idesc, smem)


def _run(via, q, a, b, cbits, rng):
    import jaxwarp
    c = cbits.view(np.float32 if cbits.dtype == np.uint32 else np.float16)
    if via == "logical":
        d = jaxwarp.tcgen05_mma_logical(q, a, b, c)
    elif via == "desc":
        d = run_desc(q, a, b, c, rng)
    else:
        _, _, dt, a_t, b_t = q.split(".")
        st = {t: jaxwarp.FORMATS[t].storage_dtype for t in (a_t, b_t)}
        d = jaxwarp.mma(a.view(st[a_t]), b.view(st[b_t]), c, a_format=a_t, b_format=b_t,
                        c_format=dt, d_format=dt, instruction="tcgen05", arch="sm_100a")
    d = np.asarray(d)
    return d.view(np.uint32 if d.dtype.itemsize == 4 else np.uint16)


def compare(inp, refp, via):
    import jax
    jax.config.update("jax_platforms", "cpu")
    z, r = np.load(inp), np.load(refp)
    rng = np.random.default_rng(7)
    tot, bad = collections.Counter(), collections.Counter()
    for key in sorted({k.rsplit("/", 1)[0] for k in z.files}):
        q = key.rsplit("/", 1)[0]
        group, kind = q.split(".")[1], str(z[key + "/kind"])
        got = _run(via, q, z[key + "/A"], z[key + "/B"], z[key + "/C"], rng)
        want = r[key + "/D"]
        miss = int((got != want).sum())
        for g in (group, (group, kind)):
            tot[g] += want.size
            bad[g] += miss
        if miss:
            i = tuple(np.argwhere(got != want)[0])
            print("MISS", key, kind, miss, i, hex(got[i]), hex(want[i]))
    for g in sorted(k for k in tot if isinstance(k, str)):
        print(f"{g}: {tot[g] - bad[g]}/{tot[g]} equal")
        for k in sorted(k for k in tot if isinstance(k, tuple) and k[0] == g):
            print(f"   {k[1]}: {tot[k] - bad[k]}/{tot[k]}")


def testdata(inp, refp):
    """tests/data/fixtures/mmasim_tcgen05.npz: per qualifier the stacked trials (T, ...)."""
    z, r = np.load(inp), np.load(refp)
    by_q = collections.defaultdict(list)
    for key in sorted({k.rsplit("/", 1)[0] for k in z.files}):
        by_q[key.rsplit("/", 1)[0]].append(key)
    out = {"device": np.array("MMA-Sim 2.1.1 (mmasim.nv_ptx.TCGen05MMA, Blackwell)")}
    for q, keys in by_q.items():
        for f in ("A", "B", "C", "kind"):
            out[f"{q}/{f}"] = np.stack([z[f"{k}/{f}"] for k in keys])
        out[f"{q}/D"] = np.stack([r[f"{k}/D"] for k in keys])
    dst = ROOT / "tests" / "data" / "fixtures" / "mmasim_tcgen05.npz"
    np.savez_compressed(dst, **out)
    print(dst, len(by_q), "qualifiers")


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "gen":
        small = "--small" in args
        args = [a for a in args if a != "--small"]
        gen(args[0], args[1:] or ["f16", "tf32", "f8f6f4"], small)
    elif cmd == "ref":
        ref(*args)
    elif cmd == "compare":
        compare(args[0], args[1], args[2] if len(args) > 2 else "logical")
    elif cmd == "testdata":
        testdata(*args)
    else:
        raise SystemExit(__doc__)
