"""Records what the GPU returns for the fp8 conversions and for ldmatrix/stmatrix/movmatrix.

One command builds movcvt.cu for sm_90a (two libraries, one per part) and writes two npz
files (schema: FORMAT_MOVCVT.md):

    python tools/capture/capture_movcvt.py --out DIR [--quick] [--seed N] [--selftest]
    python tools/capture/capture_movcvt.py --selftest            # host-only checks, no GPU
    python tools/capture/capture_movcvt.py --check DIR           # captures vs the ISA reference

Part `cvt` (DIR/cvt_fp8.npz): every PTX `cvt` form with an fp8 (e4m3/e5m2) operand that
ptxas accepts for the target (the others are recorded with ptxas's message), and the
cuda_fp8.h intrinsics, on every f16, bf16 and fp8 bit pattern and a few hundred thousand
f32 patterns (every exponent with the mantissa bits that decide fp8 rounding, ties and
near-ties, random bits, specials).
Part `ldm` (DIR/ldmatrix.npz): `ldmatrix` / `stmatrix` .x1/.x2/.x4 with and without
.trans, and `movmatrix`, with unique 16-bit ids in shared memory or registers and per-lane
row addresses drawn from random permutations of 16-byte rows; then a few probes of
addresses the ISA leaves undefined (these may fault; they run last).

Every job runs in a worker process: a job that faults is logged and recorded as an error
key, and the rest go on. A part whose library does not build is skipped the same way.
Needs nvcc (or a cached build in tools/capture/build/) and numpy only.
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
SRC = HERE / "movcvt.cu"
sys.path.insert(0, str(HERE))
import driver  # noqa: E402  (the build cache's key, the library's device)
from driver import log  # noqa: E402

BUILD = HERE / "build"
ARCH = "sm_90a"
FLAGS = ["-O2", "-std=c++17", "-shared", "-Xcompiler", "-fPIC",
         "-gencode=arch=compute_90a,code=sm_90a", "-lineinfo"]
PTX_VERSION = "9.0"  # CUDA 13.0
MAX_NPZ = 8 * 2**20
FILES = {"cvt": "cvt_fp8.npz", "ldm": "ldmatrix.npz"}
FILL = 0xDEAD  # stmatrix: shared memory is filled with this before the store
NELEM = 2048  # ldmatrix/stmatrix shared image: 2048 uint16 = 256 rows of 16 bytes


# ----------------------------------------------------------------------------------------
# The conversion forms. Index = op number in movcvt.cu (checked against mc_cvt_name).
# kind: how the inputs are given (see INPUT_KINDS); out: bits of the result.

CVT_OPS = [
    ("cvt.rn.satfinite.e4m3x2.f32", "f32pair", 16),
    ("cvt.rn.satfinite.e5m2x2.f32", "f32pair", 16),
    ("cvt.rn.satfinite.relu.e4m3x2.f32", "f32pair", 16),
    ("cvt.rn.satfinite.relu.e5m2x2.f32", "f32pair", 16),
    ("cvt.rn.e4m3x2.f32", "f32pair", 16),
    ("cvt.rn.e5m2x2.f32", "f32pair", 16),
    ("cvt.rn.satfinite.e4m3x2.f16x2", "f16x2", 16),
    ("cvt.rn.satfinite.e5m2x2.f16x2", "f16x2", 16),
    ("cvt.rn.satfinite.relu.e4m3x2.f16x2", "f16x2", 16),
    ("cvt.rn.satfinite.relu.e5m2x2.f16x2", "f16x2", 16),
    ("cvt.rn.e4m3x2.f16x2", "f16x2", 16),
    ("cvt.rn.e5m2x2.f16x2", "f16x2", 16),
    ("cvt.rn.satfinite.e4m3x2.bf16x2", "bf16x2", 16),
    ("cvt.rn.satfinite.e5m2x2.bf16x2", "bf16x2", 16),
    ("cvt.rn.f16x2.e4m3x2", "fp8x2", 32),
    ("cvt.rn.f16x2.e5m2x2", "fp8x2", 32),
    ("cvt.rn.relu.f16x2.e4m3x2", "fp8x2", 32),
    ("cvt.rn.relu.f16x2.e5m2x2", "fp8x2", 32),
    ("cvt.rn.bf16x2.e4m3x2", "fp8x2", 32),
    ("cvt.rn.bf16x2.e5m2x2", "fp8x2", 32),
]
N_PTX = len(CVT_OPS)
for _fn, _kind, _out in (
    ("nv_cvt_float_to_fp8", "f32", 8),
    ("nv_cvt_float2_to_fp8x2", "f32pair", 16),
    ("nv_cvt_halfraw_to_fp8", "f16", 8),
    ("nv_cvt_halfraw2_to_fp8x2", "f16x2", 16),
    ("nv_cvt_bfloat16raw_to_fp8", "bf16", 8),
    ("nv_cvt_bfloat16raw2_to_fp8x2", "bf16x2", 16),
):
    for _fmt in ("e4m3", "e5m2"):
        for _sat in ("satfinite", "nosat"):
            CVT_OPS.append((f"{_fn}.{_fmt}.{_sat}", _kind, _out))
for _fn, _kind, _out in (("nv_cvt_fp8_to_halfraw", "fp8", 16),
                         ("nv_cvt_fp8x2_to_halfraw2", "fp8x2", 32)):
    for _fmt in ("e4m3", "e5m2"):
        CVT_OPS.append((f"{_fn}.{_fmt}", _kind, _out))

# kind: (numpy dtype of x, shape suffix)
INPUT_KINDS = {
    "f32": (np.uint32, ()), "f32pair": (np.uint32, (2,)), "f16": (np.uint16, ()),
    "bf16": (np.uint16, ()), "f16x2": (np.uint32, ()), "bf16x2": (np.uint32, ()),
    "fp8": (np.uint8, ()), "fp8x2": (np.uint16, ()),
}
OUT_DTYPE = {8: np.uint8, 16: np.uint16, 32: np.uint32}

LDM_VARIANTS = [(num, trans) for num in (1, 2, 4) for trans in (False, True)]


def variant_name(num, trans):
    return f"x{num}" + (".trans" if trans else "")


# ----------------------------------------------------------------------------------------
# ptxas probes and the build.


def probe_ptx(name: str, kind: str) -> str:
    """A minimal PTX module that uses the cvt form `name` (operands by input kind)."""
    if kind == "f32pair":
        ins = f"{name} %h2, %f1, %f2;"
    elif kind == "fp8x2":
        ins = f"{name} %r2, %h1;"
    else:
        ins = f"{name} %h2, %r1;"
    return (
        f".version {PTX_VERSION}\n.target {ARCH}\n.address_size 64\n"
        ".visible .entry k(.param .u64 p){\n"
        ".reg .b32 %r<4>; .reg .b16 %h<4>; .reg .f32 %f<4>; .reg .b64 %rd<2>;\n"
        "ld.param.u64 %rd1, [p];\n"
        "ld.global.f32 %f1, [%rd1]; ld.global.f32 %f2, [%rd1+4];\n"
        "ld.global.b32 %r1, [%rd1+8]; ld.global.b16 %h1, [%rd1+12];\n"
        f"{ins}\n"
        "st.global.b32 [%rd1+16], %r2; st.global.b16 [%rd1+20], %h2;\nret;}\n"
    )


def probe_all(ptxas: str = "ptxas") -> dict[int, str]:
    """{op: ''} for PTX forms ptxas accepts for ARCH, {op: message} for the others."""
    res = {}
    if shutil.which(ptxas) is None:
        raise RuntimeError(f"ptxas not found (looked for {ptxas!r})")
    with tempfile.TemporaryDirectory() as td:
        for i in range(N_PTX):
            name, kind, _ = CVT_OPS[i]
            p = pathlib.Path(td) / f"p{i}.ptx"
            p.write_text(probe_ptx(name, kind))
            r = subprocess.run([ptxas, f"-arch={ARCH}", str(p), "-o", str(p.with_suffix(".cubin"))],
                               capture_output=True, text=True)
            msg = (r.stdout + r.stderr).strip().replace(str(p), "probe.ptx")
            res[i] = "" if r.returncode == 0 else (msg or f"ptxas exit {r.returncode}")
    return res


def _key(part: str) -> str:
    return driver.source_key(SRC.read_bytes(), " ".join(FLAGS), part)


def build(part: str, nvcc: str = "nvcc") -> tuple[pathlib.Path, dict[int, str]]:
    """Builds (or reuses) the library of one part; returns it and the ptxas probe messages.

    The library and the probe results are cached in tools/capture/build/ under a hash of the
    source and flags, so a machine without the CUDA toolkit can use a build made elsewhere.
    """
    key = _key(part)
    BUILD.mkdir(exist_ok=True)
    lib = BUILD / f"libmovcvt_{part}_{ARCH}_{key}.so"
    probe_file = BUILD / f"movcvt_probe_{ARCH}_{key}.txt"
    if part == "cvt" and lib.exists() and probe_file.exists():
        probes = {}
        for line in probe_file.read_text().splitlines():
            i, _, msg = line.partition("\t")
            probes[int(i)] = msg.replace("\\n", "\n")
        return lib, probes
    if part == "ldm" and lib.exists():
        return lib, {}
    if shutil.which(nvcc) is None:
        raise RuntimeError(f"nvcc not found (looked for {nvcc!r}) and no cached build {lib.name}")
    defines = [f"-DMC_PART_{part.upper()}"]
    probes = {}
    if part == "cvt":
        probes = probe_all(str(pathlib.Path(shutil.which(nvcc)).with_name("ptxas")))
        defines += [f"-DMC_OK_{i}" for i, m in probes.items() if not m]
    cmd = [nvcc, *FLAGS, *defines, "-o", str(lib), str(SRC)]
    log("building:", " ".join(cmd))
    t = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"nvcc failed for part {part}:\n{r.stdout}{r.stderr}")
    log(f"built {lib.name} in {time.time() - t:.1f} s")
    if part == "cvt":
        lines = [f"{i}\t" + m.replace("\n", "\\n") + "\n" for i, m in sorted(probes.items())]
        probe_file.write_text("".join(lines))
    return lib, probes


class Lib:
    """ctypes front of one part's library. Calls raise RuntimeError on a CUDA error."""

    def __init__(self, path: pathlib.Path, part: str):
        L, device = driver.load(path, "mc")
        self.L = L
        self.cc, self.device = device.cc, str(device)
        self.versions = (device.runtime, device.driver)
        arch = ctypes.c_int()
        self._check(L.mc_compiled_arch(ctypes.byref(arch)))
        self.compiled_arch = arch.value
        if part == "cvt":
            L.mc_cvt_name.restype = ctypes.c_char_p
            got = [L.mc_cvt_name(i).decode() for i in range(L.mc_cvt_count())]
            want = [op[0] for op in CVT_OPS]
            if got != want:
                raise RuntimeError(f"movcvt.cu's op table differs from CVT_OPS: {got} != {want}")

    def _check(self, rc):
        if rc != 0:
            raise RuntimeError(self.L.mc_last_error().decode())

    @staticmethod
    def _p(a: np.ndarray):
        assert a.flags.c_contiguous
        return a.ctypes.data_as(ctypes.c_void_p)

    def compiled(self, op: int) -> bool:
        return bool(self.L.mc_cvt_compiled(op))

    def cvt(self, op: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        a = np.ascontiguousarray(a, np.uint32)
        b = np.ascontiguousarray(b, np.uint32)
        y = np.zeros_like(a)
        self._check(self.L.mc_cvt(op, len(a), self._p(a), self._p(b), self._p(y)))
        return y

    def ldmatrix(self, num, trans, smem, addr):
        T, nelem = smem.shape
        smem = np.ascontiguousarray(smem, np.uint16)
        addr = np.ascontiguousarray(addr, np.int32)
        regs = np.zeros((T, 32, num), np.uint32)
        self._check(self.L.mc_ldmatrix(num, int(trans), T, nelem, self._p(smem), self._p(addr),
                                       self._p(regs)))
        return regs

    def stmatrix(self, num, trans, regs, addr, nelem):
        T = regs.shape[0]
        regs = np.ascontiguousarray(regs, np.uint32)
        addr = np.ascontiguousarray(addr, np.int32)
        out = np.zeros((T, nelem), np.uint16)
        self._check(self.L.mc_stmatrix(num, int(trans), T, nelem, FILL, self._p(regs),
                                       self._p(addr), self._p(out)))
        return out

    def movmatrix(self, regs):
        regs = np.ascontiguousarray(regs, np.uint32)
        out = np.zeros_like(regs)
        self._check(self.L.mc_movmatrix(regs.shape[0], self._p(regs), self._p(out)))
        return out


class FakeLib:
    """Stands in for the GPU when MOVCVT_FAKE_GPU=1 (host tests of the whole command): the ISA
    references compute the outputs, and misaligned ldmatrix addresses raise as a fault would."""

    device = "fake (ISA reference) sm_90"
    cc, compiled_arch, versions = 90, 900, (13000, 13000)

    def __init__(self, part, probes):
        self.probes = probes

    def compiled(self, op):
        return op >= N_PTX or not self.probes.get(op)

    def cvt(self, op, a, b):
        name, kind, _ = CVT_OPS[op]
        x = np.stack([a, b], 1) if kind == "f32pair" else a.astype(INPUT_KINDS[kind][0])
        return ref_cvt(name, kind, x).astype(np.uint32)

    def ldmatrix(self, num, trans, smem, addr):
        if np.any(addr[:, :8 * num] % 16):
            raise RuntimeError("fake: misaligned address")
        return ref_ldmatrix(smem, addr, num, trans)

    def stmatrix(self, num, trans, regs, addr, nelem):
        return ref_stmatrix(regs, addr, num, trans, nelem)

    def movmatrix(self, regs):
        return ref_movmatrix(regs)


def open_lib(part: str):
    """(library front, ptxas probe messages) of one part: the GPU, or FakeLib for tests."""
    if os.environ.get("MOVCVT_FAKE_GPU") == "1":
        probes = {i: ("" if i in (0, 1, 2, 3, 6, 7, 8, 9, 14, 15, 16, 17) else "fake: rejected")
                  for i in range(N_PTX)}
        return FakeLib(part, probes), probes
    path, probes = build(part)
    return Lib(path, part), probes


# ----------------------------------------------------------------------------------------
# Conversion inputs.

FP8 = {"e4m3": dict(ebits=4, mbits=3, bias=7, maxnorm=0x7E, inf=None),
       "e5m2": dict(ebits=5, mbits=2, bias=15, maxnorm=0x7B, inf=0x7C)}


def fp8_to_f64(bits, fmt):
    """Values of fp8 bit patterns (NaN for NaN patterns)."""
    f = FP8[fmt]
    b = np.asarray(bits).astype(np.int64)
    s = np.where(b & 0x80, -1.0, 1.0)
    e = (b >> f["mbits"]) & ((1 << f["ebits"]) - 1)
    m = b & ((1 << f["mbits"]) - 1)
    v = np.where(e == 0, m * 2.0 ** (1 - f["bias"] - f["mbits"]),
                 (m + (1 << f["mbits"])) * 2.0 ** (e.astype(float) - f["bias"] - f["mbits"]))
    if fmt == "e4m3":
        v = np.where((b & 0x7F) == 0x7F, np.nan, v)
    else:
        v = np.where(e == 31, np.where(m == 0, np.inf, np.nan), v)
    return s * v


def f32_patterns(rng, n_random: int) -> np.ndarray:
    """Sorted unique f32 bit patterns covering everything that decides fp8 rounding.

    Every sign and exponent, with the top 5 fraction bits in all 32 combinations (so the kept
    bits, the rounding bit and one more for both fp8 formats, normal and subnormal) and eight
    choices of the 18 bits below (0, 1, all ones, only the highest, ...: exact ties and both
    near-ties); every fp8 value, the midpoints between neighbours and their f32 neighbours;
    the saturation and overflow boundaries; zeros, infinities, NaN payloads; random bits.
    """
    s = np.arange(2, dtype=np.uint32)[:, None, None, None] << 31
    e = np.arange(256, dtype=np.uint32)[None, :, None, None] << 23
    top = np.arange(32, dtype=np.uint32)[None, None, :, None] << 18
    low = np.array([0, 1, 0x20000, 0x3FFFF, 0x1FFFF, 0x10000, 0x200,
                    int(rng.integers(1, 1 << 18))], np.uint32)[None, None, None, :]
    grid = (s | e | top | low).ravel()
    extra = []
    for fmt in FP8:
        v = fp8_to_f64(np.arange(256), fmt)
        v = np.unique(v[np.isfinite(v)])
        mids = (v[1:] + v[:-1]) / 2
        top_v = v.max()
        ulp = top_v - v[v < top_v].max()
        edges = np.array([top_v + ulp / 2, top_v + ulp, 2 * top_v, top_v + ulp / 4])
        for arr in (v, mids, edges, -edges):
            b = arr.astype(np.float32).view(np.uint32)
            extra += [b, b + 1, b - 1, b + 2, b - 2]
    specials = np.array([
        0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7FFFFFFF,
        0xFFFFFFFF, 0x7F800001, 0xFF800001, 0x7FA00000, 0x7FBFFFFF, 0x7FC00001, 0x7F7FFFFF,
        0xFF7FFFFF, 0x00800000, 0x80800000, 0x00000001, 0x80000001, 0x007FFFFF, 0x807FFFFF,
        0x3F800000, 0xBF800000], np.uint32)
    rnd = rng.integers(0, 1 << 32, n_random, dtype=np.uint64).astype(np.uint32)
    allb = np.concatenate([grid, specials, rnd] + [np.asarray(x, np.int64).astype(np.uint32)
                                                   for x in extra])
    return np.unique(allb)


def cvt_inputs(kind: str, f32: np.ndarray) -> np.ndarray:
    """The x array recorded for an input kind (see FORMAT_MOVCVT.md)."""
    a16 = np.arange(1 << 16, dtype=np.uint32)
    swapped = ((a16 << 8) | (a16 >> 8)) & 0xFFFF
    if kind == "f32":
        return f32
    if kind == "f32pair":
        # column 0: the first operand (a of `cvt d, a, b`, .x of a float2), column 1 the second.
        # The first column takes the even entries, the second the odd ones in reverse order,
        # so the two values of a pair are unrelated and every pattern is used once.
        n = len(f32) // 2
        return np.stack([f32[0:2 * n:2], f32[1:2 * n:2][::-1]], axis=1)
    if kind in ("f16", "bf16"):
        return a16.astype(np.uint16)
    if kind in ("f16x2", "bf16x2"):
        # low half: every pattern in order; high half: the byte-swapped pattern (also all).
        return (swapped << 16) | a16
    if kind == "fp8":
        return np.arange(256, dtype=np.uint8)
    if kind == "fp8x2":
        return a16.astype(np.uint16)
    raise ValueError(f"unknown input kind {kind!r}")


def run_cvt(lib: Lib, op: int, x: np.ndarray) -> np.ndarray:
    name, kind, out = CVT_OPS[op]
    if kind == "f32pair":
        a, b = x[:, 0], x[:, 1]
    else:
        a = x.astype(np.uint32)
        b = np.zeros_like(a)
    y = lib.cvt(op, a, b)
    if out < 32 and np.any(y >> np.uint32(out)):
        raise RuntimeError(f"{name}: result words have bits above bit {out - 1} set")
    return y.astype(OUT_DTYPE[out])


# ----------------------------------------------------------------------------------------
# ldmatrix / stmatrix / movmatrix trials.


def ldm_addresses(rng, T: int, num: int, dup_every: int = 4):
    """(T, 32) byte offsets of 16-byte rows and (T,) kinds.

    Every trial takes 32 distinct rows from a random permutation of the NELEM // 8 rows; lanes
    whose address the instruction does not use (8*num and up) get rows of their own too.
    Every `dup_every`-th trial (kind 'dup') makes one to three used lanes repeat the row of
    another used lane.
    """
    rows = NELEM // 8
    addr = np.stack([rng.permutation(rows)[:32] for _ in range(T)]).astype(np.int32) * 16
    kinds = np.array(["perm"] * T, dtype="<U4")
    used = 8 * num
    for t in range(dup_every - 1, T, dup_every):
        kinds[t] = "dup"
        for _ in range(int(rng.integers(1, 4))):
            i, j = rng.choice(used, 2, replace=False)
            addr[t, i] = addr[t, j]
    return addr, kinds


def ldm_smem(rng, T: int) -> np.ndarray:
    """(T, NELEM) uint16 images of unique ids (i * odd + c) mod 2**16; odd, c fresh per trial."""
    i = np.arange(NELEM, dtype=np.uint64)
    mult = rng.integers(0, 1 << 15, T, dtype=np.uint64) * 2 + 1
    off = rng.integers(0, 1 << 16, T, dtype=np.uint64)
    return ((i[None, :] * mult[:, None] + off[:, None]) & 0xFFFF).astype(np.uint16)


def unique_regs(rng, T: int, nregs: int) -> np.ndarray:
    """(T, 32, nregs) uint32: 64 * nregs distinct 16-bit ids per trial, none equal to FILL."""
    pool = np.arange(FILL, dtype=np.uint32)  # ids 0 .. 0xDEAC
    ids = np.stack([rng.choice(pool, 64 * nregs, replace=False) for _ in range(T)])
    ids = ids.reshape(T, 32, nregs, 2)
    return ids[..., 0] | (ids[..., 1] << np.uint32(16))


# ----------------------------------------------------------------------------------------
# Jobs.


def jobs(quick: bool) -> list[dict]:
    js = []
    for op, (name, _kind, _) in enumerate(CVT_OPS):
        js.append(dict(part="cvt", name=f"cvt/{name}", op=op))
    T = 8 if quick else 64
    for num, trans in LDM_VARIANTS:
        js.append(dict(part="ldm", name=f"ldmatrix/{variant_name(num, trans)}", what="ld", num=num,
                       trans=trans, T=T))
    for num, trans in LDM_VARIANTS:
        js.append(dict(part="ldm", name=f"stmatrix/{variant_name(num, trans)}", what="st", num=num,
                       trans=trans, T=T))
    js.append(dict(part="ldm", name="movmatrix/trans", what="mov", T=T))
    # Probes of what the ISA leaves undefined; they may fault, so they run last.
    for num in (1, 2):
        js.append(dict(part="ldm", name=f"ldmatrix/x{num}.unused_junk", what="ld", num=num,
                       trans=False, T=4, probe="unused_junk"))
    for mis in (2, 8):
        js.append(dict(part="ldm", name=f"ldmatrix/x4.misaligned{mis}", what="ld", num=4,
                       trans=False, T=4, probe=f"misaligned{mis}"))
    return js


def job_rng(seed: int, name: str):
    return np.random.default_rng([seed, int(hashlib.sha256(name.encode()).hexdigest()[:8], 16)])


def run_job(lib: Lib | None, job: dict, seed: int, quick: bool, probes: dict[int, str]) -> dict:
    """Runs one job; returns its npz entries. lib=None only makes the inputs (host tests)."""
    rng = job_rng(seed, job["name"])
    nm = job["name"]
    if job["part"] == "cvt":
        op = job["op"]
        name, kind, out = CVT_OPS[op]
        if op < N_PTX and probes.get(op):
            return {f"{nm}/error": np.array("ptxas: " + probes[op])}
        f32 = f32_patterns(job_rng(seed, "f32"), 16384 if quick else 65536)
        x = cvt_inputs(kind, f32)
        # The inputs are stored once per kind (cvt/inputs/{kind}); a copy per form would not
        # fit the file (zlib does not compress bit-pattern lists much).
        d = {f"cvt/inputs/{kind}": x, f"{nm}/kind": np.array(kind)}
        if lib is None:
            return d
        if not lib.compiled(op):
            return {f"{nm}/error": np.array("not compiled into the library")}
        d[f"{nm}/y"] = run_cvt(lib, op, x)
        return d
    T = job["T"]
    if job["what"] == "mov":
        regs = unique_regs(rng, T, 1)[..., 0]
        d = {f"{nm}/regs_in": regs}
        if lib is not None:
            d[f"{nm}/regs_out"] = lib.movmatrix(regs)
        return d
    num, trans = job["num"], job["trans"]
    addr, kinds = ldm_addresses(rng, T, num)
    probe = job.get("probe")
    if probe == "unused_junk":
        addr[:, 8 * num:] = np.int32(-15)  # 0xFFFFFFF1 as a byte offset: misaligned, far away
        kinds[:] = probe[:4]
    elif probe and probe.startswith("misaligned"):
        addr[:, :] += int(probe[len("misaligned"):])
        kinds[:] = "mis"
    if job["what"] == "ld":
        smem = ldm_smem(rng, T)
        d = {f"{nm}/smem": smem, f"{nm}/addr": addr, f"{nm}/kind": kinds}
        if lib is not None:
            d[f"{nm}/regs"] = lib.ldmatrix(num, trans, smem, addr)
        return d
    regs = unique_regs(rng, T, num)
    d = {f"{nm}/regs": regs, f"{nm}/addr": addr, f"{nm}/kind": kinds}
    if lib is not None:
        d[f"{nm}/smem_out"] = lib.stmatrix(num, trans, regs, addr, NELEM)
    return d


def worker(args):
    """Runs the jobs of one part from --start on; each is saved to parts/{index}.npz."""
    parts = pathlib.Path(args.parts)
    js = jobs(args.quick)
    lib, probes = open_lib(args.part)
    for i in range(args.start, len(js)):
        job = js[i]
        if job["part"] != args.part:
            continue
        t0 = time.time()
        try:
            out = run_job(lib, job, args.seed, args.quick, probes)
            err = next((str(v) for k, v in out.items() if k.endswith("/error")), None)
            msg = (f"skip {job['name']}: {err.splitlines()[0]}" if err else
                   f"ok   {job['name']} ({time.time() - t0:.2f} s)")
        except RuntimeError as e:  # a CUDA error: the context may be dead, start afresh
            msg = f"FAIL {job['name']}: {e}"
            np.savez(parts / f"{i}.npz", __msg__=np.array(msg),
                     **{f"{job['name']}/error": np.array(str(e))})
            log(msg)
            sys.exit(3)
        except Exception as e:  # noqa: BLE001 - logged, the job is skipped
            msg = f"FAIL {job['name']}: {type(e).__name__}: {e}"
            out = {f"{job['name']}/error": np.array(msg)}
        np.savez(parts / f"{i}.npz", __msg__=np.array(msg), **out)
        log(msg)


def capture(out: pathlib.Path, quick: bool, seed: int) -> list[pathlib.Path]:
    out.mkdir(parents=True, exist_ok=True)
    js = jobs(quick)
    written = []
    for part in ("cvt", "ldm"):
        t0 = time.time()
        idx = [i for i, j in enumerate(js) if j["part"] == part]
        results = {}
        device = "unknown"
        try:
            lib, _ = open_lib(part)
            device = lib.device
            log(f"part {part}: GPU {lib.device}, CUDA runtime {lib.versions[0]}, driver "
                f"{lib.versions[1]}, kernels built for sm_{lib.compiled_arch // 10}")
            if lib.cc != 90:
                log(f"WARNING: built for sm_90a; this GPU is sm_{lib.cc}")
            del lib
        except Exception as e:  # noqa: BLE001 - the part is skipped, the other goes on
            log(f"FAIL part {part}: {type(e).__name__}: {e}")
            results[f"{part}/error"] = np.array(f"{type(e).__name__}: {e}")
            idx = []
        parts = out / f".movcvt_parts_{part}"
        shutil.rmtree(parts, ignore_errors=True)
        parts.mkdir()
        start = idx[0] if idx else len(js)
        base = [sys.executable, str(pathlib.Path(__file__).resolve()), "--worker", "--part", part,
                "--parts", str(parts), "--seed", str(seed)] + (["--quick"] if quick else [])
        while idx and start <= idx[-1]:
            try:
                rc = subprocess.run(base + ["--start", str(start)], timeout=120).returncode
            except subprocess.TimeoutExpired:
                rc = None
                log(f"worker timed out (started at job {start})")
            nxt = next((i for i in idx if i >= start and not (parts / f"{i}.npz").exists()), None)
            if nxt is None:
                break
            if rc != 3:  # died inside job nxt without recording it
                msg = f"FAIL {js[nxt]['name']}: worker died (exit {rc})"
                np.savez(parts / f"{nxt}.npz", __msg__=np.array(msg),
                         **{f"{js[nxt]['name']}/error": np.array(msg)})
                log(msg)
                nxt += 1
            start = nxt  # rc 3: the worker recorded its failed job; go on after it
        for i in idx:
            p = parts / f"{i}.npz"
            if p.exists():
                z = np.load(p)
                results.update({k: z[k] for k in z.files if k != "__msg__"})
        shutil.rmtree(parts, ignore_errors=True)
        results["device"] = np.array(device)
        fn = out / FILES[part]
        np.savez_compressed(fn, **results)
        size = fn.stat().st_size
        log(f"wrote {fn}: {size / 2**20:.2f} MiB, {len(results)} keys, {time.time() - t0:.1f} s"
            + ("  WARNING: over 8 MiB" if size > MAX_NPZ else ""))
        written.append(fn)
    return written


# ----------------------------------------------------------------------------------------
# First-principles references (PTX ISA: cvt, ldmatrix, stmatrix, movmatrix), for --check
# and the host tests. Integer arithmetic only.

SRC_FMT = {"f32": (8, 23), "f16": (5, 10), "bf16": (8, 7)}


def decode(bits, fmt):
    """(sign, significand, exponent, is_nan, is_inf): value = significand * 2**exponent."""
    eb, mb = SRC_FMT[fmt]
    b = np.asarray(bits).astype(np.int64)
    sign = (b >> (eb + mb)) & 1
    e = (b >> mb) & ((1 << eb) - 1)
    f = b & ((1 << mb) - 1)
    bias = (1 << (eb - 1)) - 1
    emax = (1 << eb) - 1
    sig = np.where(e == 0, f, f | (1 << mb))
    exp = np.where(e == 0, 1 - bias - mb, e - bias - mb)
    return sign, sig, exp, (e == emax) & (f != 0), (e == emax) & (f == 0)


def ref_to_fp8(bits, src: str, fmt: str, satfinite: bool, relu: bool = False) -> np.ndarray:
    """Round-to-nearest-even of f32/f16/bf16 bits to fp8 bits, as the PTX ISA describes.

    NaN -> 0x7F (sign dropped), overflow and infinity -> +-MAX_NORM with satfinite, else NaN
    (e4m3) or +-inf (e5m2); zeros and underflow keep the sign; relu turns a negative result
    into +0.
    """
    F = FP8[fmt]
    mb, bias = F["mbits"], F["bias"]
    sign, m, e, nan, inf = decode(bits, src)
    emin_q = 1 - bias - mb  # exponent of the fp8 quantum in the subnormal range
    blen = np.zeros_like(m)
    for k in range(1, 25):
        blen = np.where(m >= (1 << (k - 1)), k, blen)
    p = blen - 1 + e  # exponent of the leading bit
    q = np.maximum(p - mb, emin_q)
    s = q - e
    sp = np.clip(s, 1, 40)  # m < 2**24, so a shift of 40 already leaves 0 with rem < half
    r_sh = m >> sp
    rem = m & ((np.int64(1) << sp) - 1)
    half = np.int64(1) << (sp - 1)
    r_sh = r_sh + ((rem > half) | ((rem == half) & (r_sh & 1 == 1)))
    r = np.where(s <= 0, m << np.clip(-s, 0, 40), r_sh)
    carry = r >= (1 << (mb + 1))
    r = np.where(carry, r >> 1, r)
    q = np.where(carry, q + 1, q)
    code = np.where(r < (1 << mb), r, ((q + mb + bias) << mb) | (r - (1 << mb)))
    over = (code > F["maxnorm"]) if fmt == "e4m3" else (code >= 0x7C)
    over = over | inf
    code = np.where(over, F["maxnorm"] if satfinite else (0x7F if fmt == "e4m3" else 0x7C), code)
    code = np.where(m == 0, 0, code) | (sign << 7)
    code = np.where(inf, (F["maxnorm"] if satfinite else (0x7F if fmt == "e4m3" else 0x7C))
                    | (sign << 7), code)
    code = np.where(nan, 0x7F, code)
    if relu:
        code = np.where((code & 0x80) != 0, 0, code)
    return code.astype(np.uint8)


def ref_fp8_to_f16(bits, fmt: str, relu: bool = False) -> np.ndarray:
    """Exact widening of fp8 bits to f16 bits; NaN -> 0x7FFF; relu: negative -> +0."""
    v = fp8_to_f64(np.asarray(bits), fmt)
    h = v.astype(np.float16).view(np.uint16).astype(np.uint32)
    h = np.where(np.isnan(v), 0x7FFF, h)
    if relu:
        h = np.where(((h & 0x8000) != 0) & ~np.isnan(v), 0, h)
    return h.astype(np.uint16)


def ref_ldmatrix(smem, addr, num, trans):
    """(T, 32, num) registers per the ISA: lanes 8i..8i+7 give the rows of matrix i; lane l
    gets row l//4, columns 2(l%4), 2(l%4)+1 (low half first); .trans gives the transpose."""
    T = smem.shape[0]
    lane = np.arange(32)
    out = np.zeros((T, 32, num), np.uint32)
    for t in range(T):
        for i in range(num):
            rows = addr[t, 8 * i:8 * i + 8] // 2
            M = smem[t][rows[:, None] + np.arange(8)[None, :]].astype(np.uint32)
            if trans:
                M = M.T
            lo = M[lane // 4, 2 * (lane % 4)]
            hi = M[lane // 4, 2 * (lane % 4) + 1]
            out[t, :, i] = lo | (hi << 16)
    return out


def ref_stmatrix(regs, addr, num, trans, nelem=NELEM):
    """(T, nelem) shared image per the ISA (FILL where nothing is stored); the inverse of
    ref_ldmatrix. With a row address given twice the later lane wins here (unspecified)."""
    T = regs.shape[0]
    lane = np.arange(32)
    out = np.full((T, nelem), FILL, np.uint16)
    for t in range(T):
        for i in range(num):
            M = np.zeros((8, 8), np.uint16)
            M[lane // 4, 2 * (lane % 4)] = regs[t, :, i] & 0xFFFF
            M[lane // 4, 2 * (lane % 4) + 1] = regs[t, :, i] >> 16
            if trans:
                M = M.T
            for r in range(8):
                a = addr[t, 8 * i + r] // 2
                out[t, a:a + 8] = M[r]
    return out


def ref_movmatrix(regs):
    """(T, 32): the fragment of the transposed 8x8 matrix."""
    lane = np.arange(32)
    lo = (regs & 0xFFFF).astype(np.uint32)
    hi = (regs >> 16).astype(np.uint32)
    M = np.zeros((regs.shape[0], 8, 8), np.uint32)
    M[:, lane // 4, 2 * (lane % 4)] = lo
    M[:, lane // 4, 2 * (lane % 4) + 1] = hi
    Mt = np.swapaxes(M, 1, 2)
    return Mt[:, lane // 4, 2 * (lane % 4)] | (Mt[:, lane // 4, 2 * (lane % 4) + 1] << 16)


def ref_cvt(name: str, kind: str, x: np.ndarray) -> np.ndarray:
    """The ISA reference of one recorded conversion form (None if there is none)."""
    relu = ".relu" in name
    fmt = "e4m3" if "e4m3" in name else "e5m2"
    sat = "nosat" not in name and (name.startswith("nv_") or ".satfinite" in name)
    if kind in ("fp8", "fp8x2"):
        if ".bf16x2." in name:
            return None
        if kind == "fp8":
            return ref_fp8_to_f16(x, fmt, relu)
        lo = ref_fp8_to_f16(x & 0xFF, fmt, relu).astype(np.uint32)
        hi = ref_fp8_to_f16(x >> 8, fmt, relu).astype(np.uint32)
        return lo | (hi << 16)
    if kind == "f32":
        return ref_to_fp8(x, "f32", fmt, sat, relu)
    if kind in ("f16", "bf16"):
        return ref_to_fp8(x, kind, fmt, sat, relu)
    if kind == "f32pair":
        c0 = ref_to_fp8(x[:, 0], "f32", fmt, sat, relu).astype(np.uint16)
        c1 = ref_to_fp8(x[:, 1], "f32", fmt, sat, relu).astype(np.uint16)
        # PTX: the first source goes to the upper byte; float2: .x (column 0) to the lower.
        return (c0 << 8) | c1 if name.startswith("cvt.") else (c1 << 8) | c0
    src = kind[:-2]
    lo = ref_to_fp8(x & 0xFFFF, src, fmt, sat, relu).astype(np.uint16)
    hi = ref_to_fp8(x >> 16, src, fmt, sat, relu).astype(np.uint16)
    return lo | (hi << 8)


def check(folder: pathlib.Path, limit: int = 5) -> int:
    """Compares the captures in `folder` with the ISA references; prints one line per key."""
    bad = 0
    f = folder / FILES["cvt"]
    if f.exists():
        d = np.load(f)
        log(f"{f} (captured on {d['device']})")
        for name, kind, _ in CVT_OPS:
            k = f"cvt/{name}"
            if f"{k}/error" in d.files:
                log(f"  {name}: not recorded: {str(d[k + '/error']).splitlines()[0]}")
                continue
            if f"{k}/y" not in d.files:
                continue
            x, y = d[f"cvt/inputs/{d[k + '/kind']}"], d[f"{k}/y"]
            want = ref_cvt(name, kind, x)
            if want is None:
                log(f"  {name}: no reference")
                continue
            diff = np.flatnonzero(want.ravel() != y.ravel())
            bad += len(diff) > 0
            w, g = want.ravel(), y.ravel()
            ex = ", ".join(f"x={x[i].tolist()} want={int(w[i]):#x} got={int(g[i]):#x}"
                           for i in diff[:limit])
            log(f"  {name}: {len(y) - len(diff)}/{len(y)} equal the ISA reference" +
                (f"; e.g. {ex}" if len(diff) else ""))
    f = folder / FILES["ldm"]
    if f.exists():
        d = np.load(f)
        log(f"{f} (captured on {d['device']})")
        for k in sorted({k.rsplit("/", 1)[0] for k in d.files if "/" in k}):
            if f"{k}/error" in d.files:
                log(f"  {k}: error: {str(d[k + '/error']).splitlines()[0]}")
                continue
            op, var = k.split("/")
            if op == "movmatrix":
                want, got, sel = ref_movmatrix(d[f"{k}/regs_in"]), d[f"{k}/regs_out"], None
            else:
                num = int(var[1])
                trans = ".trans" in var
                kind = d[f"{k}/kind"]
                note = ""
                addr = d[f"{k}/addr"]
                if (kind == "mis").any():  # undefined in the ISA: try "low 4 bits ignored"
                    addr = addr & ~15
                    note = " (reference with the low 4 address bits cleared)"
                if op == "ldmatrix":
                    want = ref_ldmatrix(d[f"{k}/smem"], addr, num, trans)
                    got = d[f"{k}/regs"]
                else:
                    want = ref_stmatrix(d[f"{k}/regs"], addr, num, trans)
                    got = d[f"{k}/smem_out"]
                sel = kind != "dup"
            if sel is None:
                n_ok = int(np.sum(np.all((want == got).reshape(len(got), -1), axis=1)))
                log(f"  {k}: {n_ok}/{len(got)} trials equal the ISA reference")
                bad += n_ok != len(got)
            else:
                same = np.all((want == got).reshape(len(got), -1), axis=1)
                log(f"  {k}: {int(same[sel].sum())}/{int(sel.sum())} trials with distinct rows "
                    f"and {int(same[~sel].sum())}/{int((~sel).sum())} 'dup' trials equal the ISA "
                    f"reference{note}")
                bad += not same[sel].all()
    return bad


# ----------------------------------------------------------------------------------------
# Host-only self test (no GPU): inputs, references, file size with simulated outputs.


def selftest(quick: bool = False, seed: int = 0) -> None:
    # The fp8 reference against ml_dtypes where that is exact (f32 -> fp8 RNE, satfinite off).
    try:
        import ml_dtypes
    except ImportError:
        ml_dtypes = None
    f32 = f32_patterns(np.random.default_rng(seed), 4096)
    assert len(np.unique(f32)) == len(f32)
    if ml_dtypes is not None:
        for fmt, dt in (("e4m3", ml_dtypes.float8_e4m3fn), ("e5m2", ml_dtypes.float8_e5m2)):
            v = f32.view(np.float32)
            finite = np.isfinite(v) & (np.abs(v) <= float(ml_dtypes.finfo(dt).max))
            want = v[finite].astype(dt).view(np.uint8)
            got = ref_to_fp8(f32[finite], "f32", fmt, satfinite=False)
            n = int(np.sum(want != got))
            assert n == 0, f"{fmt}: reference differs from ml_dtypes on {n} in-range values"
    # ldmatrix / stmatrix references are inverse to each other on 'perm' trials.
    rng = np.random.default_rng(seed)
    for num, trans in LDM_VARIANTS:
        addr, kinds = ldm_addresses(rng, 8, num, dup_every=100)
        regs = unique_regs(rng, 8, num)
        img = ref_stmatrix(regs, addr, num, trans)
        assert np.array_equal(ref_ldmatrix(img, addr, num, trans), regs)
    # Simulated outputs: size of the files.
    with tempfile.TemporaryDirectory() as td:
        for part in ("cvt", "ldm"):
            d = {"device": np.array("simulated")}
            for job in jobs(quick):
                if job["part"] != part or job.get("probe"):
                    continue
                out = run_job(None, job, seed, quick, {4: "x", 5: "x", 10: "x", 11: "x", 12: "x",
                                                      13: "x", 18: "x", 19: "x"})
                d.update(out)
                nm = job["name"]
                if part == "cvt" and f"{nm}/kind" in out:
                    name, kind, bits = CVT_OPS[job["op"]]
                    w = ref_cvt(name, kind, out[f"cvt/inputs/{kind}"])
                    d[f"{nm}/y"] = w.astype(OUT_DTYPE[bits])
                elif f"{nm}/smem" in out:
                    d[f"{nm}/regs"] = ref_ldmatrix(out[f"{nm}/smem"], out[f"{nm}/addr"],
                                                   job["num"], job["trans"])
                elif f"{nm}/regs_in" in out:
                    d[f"{nm}/regs_out"] = ref_movmatrix(out[f"{nm}/regs_in"])
                elif f"{nm}/regs" in out:
                    d[f"{nm}/smem_out"] = ref_stmatrix(out[f"{nm}/regs"], out[f"{nm}/addr"],
                                                       job["num"], job["trans"])
            p = pathlib.Path(td) / FILES[part]
            np.savez_compressed(p, **d)
            size = p.stat().st_size
            log(f"selftest: simulated {FILES[part]}: {size / 2**20:.2f} MiB, {len(d)} keys")
            assert size < MAX_NPZ, f"{FILES[part]} would be {size} bytes, over {MAX_NPZ}"
            bad = check(pathlib.Path(td))
            assert bad == 0
    log("selftest: OK")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=pathlib.Path, help="output folder")
    ap.add_argument("--quick", action="store_true", help="fewer f32 patterns and 8 trials")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--selftest", action="store_true",
                    help="host-only checks; with --out, also compare the new captures with the "
                         "ISA references")
    ap.add_argument("--check", type=pathlib.Path, help="compare captures in DIR with the ISA")
    ap.add_argument("--build-only", action="store_true", help="build both libraries and stop")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--part", help=argparse.SUPPRESS)
    ap.add_argument("--parts", help=argparse.SUPPRESS)
    ap.add_argument("--start", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker(args)
        return 0
    if args.build_only:
        for part in ("cvt", "ldm"):
            path, probes = build(part)
            log(f"{part}: {path}")
            for i, m in sorted(probes.items()):
                verdict = "accepted" if not m else "rejected: " + m.splitlines()[0]
                log(f"  {CVT_OPS[i][0]}: {verdict}")
        return 0
    if not (args.out or args.selftest or args.check):
        ap.error("give --out DIR, --selftest or --check DIR")
    t0 = time.time()
    if args.selftest:
        selftest(args.quick, args.seed)
    bad = 0
    if args.out:
        capture(args.out, args.quick, args.seed)
        if args.selftest:
            bad = check(args.out)
    if args.check:
        bad = check(args.check)
    log(f"done in {time.time() - t0:.1f} s")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
