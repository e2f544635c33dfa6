"""Draws tensor-core inputs, runs MMA-Sim on them and writes ``golden/...`` .npz files.

    python tools/crosscheck/make_golden.py --family mma --arch Hopper --trials 12 \\
        --seed 0 --out hopper.npz

Inputs are drawn here with NumPy only (seeded, as raw bit patterns); MMA-Sim runs in a
separate virtual environment (``setup_venv.sh`` makes ``.crosscheck-venv/``) through
``oracle.py``, as a subprocess. The file format, the trial kinds and chains are
described in ``README.md`` next to this file. Nothing here imports jaxwarp.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile

import numpy as np

try:  # optional: a plain counter stands in for it
    from tqdm import tqdm
except ImportError:
    tqdm = None

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]
DEFAULT_PYTHON = REPO / ".crosscheck-venv" / "bin" / "python"
FAMILIES = ("mma", "tcgen05", "mma_block_scale", "tcgen05_block_scale")
KINDS = ("normal", "wide", "random_bits", "cancel", "tiny", "specials")

# --------------------------------------------------------------------------------------
# Element formats: (exponent bits, fraction bits, special-value rule, bit shift in storage).
# ``ieee``: all-ones exponent is inf/NaN; ``fn``: only S.1111.111 is NaN (e4m3);
# ``finite``: every code is a number (fp6/fp4); ``ue8m0``: unsigned exponent, 0xFF NaN.
# fp6 sits in bits 5:0 of its byte, fp4 (one per byte) in bits 5:2.

FORMATS = {
    "f64": (11, 52, "ieee", 0), "f32": (8, 23, "ieee", 0), "tf32": (8, 23, "ieee", 0),
    "f16": (5, 10, "ieee", 0), "bf16": (8, 7, "ieee", 0),
    "e4m3": (4, 3, "fn", 0), "e5m2": (5, 2, "ieee", 0),
    "e3m2": (3, 2, "finite", 0), "e2m3": (2, 3, "finite", 0), "e2m1": (2, 1, "finite", 2),
    "ue8m0": (8, 0, "ue8m0", 0), "ue4m3": (4, 3, "fn", 0),
}
_STORAGE = {64: np.uint64, 32: np.uint32, 16: np.uint16, 8: np.uint8}


def storage_dtype(t: str) -> np.dtype:
    """The unsigned dtype that holds one element of ``t`` (tf32: the fp32 word)."""
    e, m, rule, _ = FORMATS[t]
    width = 8 if rule == "ue8m0" else 1 + e + m  # ue8m0 has no sign bit
    return np.dtype(_STORAGE[max(8, 1 << (width - 1).bit_length())])


def _facts(t: str) -> tuple[int, int, int, int, int, int]:
    """(ebits, mbits, bias, emin, emax, largest fraction field at emax)."""
    e, m, rule, _ = FORMATS[t]
    bias = (1 << (e - 1)) - 1 if rule != "ue8m0" else 127
    top = (1 << e) - 1
    if rule == "ieee":
        return e, m, bias, 1 - bias, top - 1 - bias, (1 << m) - 1
    if rule == "fn":
        return e, m, bias, 1 - bias, top - bias, (1 << m) - 2
    if rule == "ue8m0":
        return e, m, bias, -bias, top - 1 - bias, 0
    return e, m, bias, 1 - bias, top - bias, (1 << m) - 1


def is_finite(code: np.ndarray, t: str) -> np.ndarray:
    e, m, rule, _ = FORMATS[t]
    field = (code >> m) & ((1 << e) - 1)
    if rule == "ieee":
        return field != (1 << e) - 1
    if rule == "fn":
        return (code & ((1 << (e + m)) - 1)) != (1 << (e + m)) - 1
    if rule == "ue8m0":
        return code != 0xFF
    return np.ones(code.shape, bool)


def _sign_shift(t: str) -> int:
    e, m, rule, _ = FORMATS[t]
    return 64 if rule == "ue8m0" else e + m  # ue8m0 has no sign bit


def _assemble(t: str, sign, field, frac) -> np.ndarray:
    e, m, _, shift = FORMATS[t]
    code = (field.astype(np.uint64) << np.uint64(m)) | frac.astype(np.uint64)
    if _sign_shift(t) < 64:
        code |= sign.astype(np.uint64) << np.uint64(_sign_shift(t))
    return code << np.uint64(shift)


def decode(bits: np.ndarray, t: str) -> np.ndarray:
    """Raw bits -> float64 values (NaN/inf as such); only for drawing, never compared."""
    e, m, rule, shift = FORMATS[t]
    code = bits.astype(np.uint64) >> np.uint64(shift)
    _, _, bias, emin, _, _ = _facts(t)
    field = ((code >> np.uint64(m)) & np.uint64((1 << e) - 1)).astype(np.int64)
    frac = (code & np.uint64((1 << m) - 1)).astype(np.float64)
    if t == "tf32":
        frac = np.floor(frac / 8192) * 8192
    sign = np.where(((code >> np.uint64(_sign_shift(t) % 64)) & np.uint64(1)) == 1, -1.0,
                    1.0) if _sign_shift(t) < 64 else 1.0
    normal = field > 0 if rule != "ue8m0" else np.ones(field.shape, bool)
    with np.errstate(over="ignore"):  # the all-ones exponent of f64: replaced below
        mag = np.where(normal, (1 + frac / 2.0**m) * np.exp2((field - bias).astype(np.float64)),
                       frac / 2.0**m * 2.0**emin)
    val = sign * mag
    fin = is_finite(code, t)
    if rule == "ieee":
        val = np.where(~fin & (frac == 0), sign * np.inf, val)
    return np.where(~fin & ~((rule == "ieee") & (frac == 0)), np.nan, val)


def encode(values: np.ndarray, t: str) -> np.ndarray:
    """float64 -> raw bits, rounded to nearest even, saturating at the largest finite."""
    e, m, bias, emin, emax, top_frac = _facts(t)
    v = np.asarray(values, np.float64)
    sign = np.signbit(v).astype(np.uint64)
    a = np.abs(np.nan_to_num(v, nan=0.0, posinf=np.finfo(np.float64).max))
    with np.errstate(divide="ignore"):
        ex = np.floor(np.log2(np.where(a > 0, a, 1.0))).astype(np.int64)
    ex = np.maximum(ex, emin)
    q = np.rint(a / np.exp2((ex - m).astype(np.float64))).astype(np.int64)
    carry = q >= (1 << (m + 1))
    ex, q = np.where(carry, ex + 1, ex), np.where(carry, q >> 1, q)
    over = (ex > emax) | ((ex == emax) & (q - (1 << m) > top_frac))
    ex = np.where(over, emax, ex)
    q = np.where(over, (1 << m) + top_frac, q)
    normal = q >= (1 << m)
    field = np.where(normal, ex + bias, 0)
    frac = np.where(normal, q - (1 << m), q)
    return _assemble(t, sign, field, frac).astype(storage_dtype(t))


def draw(t: str, kind: str, shape: tuple, rng: np.random.Generator) -> np.ndarray:
    """Raw bits of type ``t`` drawn the way ``kind`` says (never ``cancel``: see below)."""
    e, m, rule, _ = FORMATS[t]
    _, _, bias, emin, emax, top_frac = _facts(t)
    width = 1 + e + m if rule != "ue8m0" else 8
    if kind in ("random_bits", "specials"):
        code = rng.integers(0, 1 << width, size=shape, dtype=np.uint64)
        if kind == "random_bits":
            while not (ok := is_finite(code, t)).all():
                code = np.where(ok, code, rng.integers(0, 1 << width, size=shape,
                                                       dtype=np.uint64))
        else:
            specials = _special_codes(t)
            pick = rng.random(shape) < 0.25
            code = np.where(pick, rng.choice(specials, size=shape), code)
        return (code << np.uint64(FORMATS[t][3])).astype(storage_dtype(t))
    sign = rng.integers(0, 2, size=shape) if rule != "ue8m0" else np.zeros(shape, np.int64)
    if t in ("ue4m3", "ue8m0"):
        sign = np.zeros(shape, np.int64)  # scales: positive
        ex = np.clip(np.rint(rng.normal(0, 2 if kind != "wide" else 6, shape)), emin, emax)
    elif kind == "normal":
        ex = np.clip(np.rint(rng.normal(0.0, 1.5, shape)), emin, emax)
    elif kind == "wide":
        ex = np.clip(rng.integers(-12, 13, size=shape), emin, emax)
    elif kind == "tiny":  # subnormals and the smallest normals, some zeros
        ex = emin - (rng.random(shape) < 0.5) + rng.integers(0, 2, size=shape)
    else:
        raise ValueError(f"kind {kind!r} is not drawn element-wise")
    ex = ex.astype(np.int64)
    frac = rng.integers(0, 1 << m, size=shape, dtype=np.uint64) if m else np.zeros(
        shape, np.uint64)
    sub = ex < emin
    field = np.where(sub, 0, ex + bias)
    at_top = (ex == emax) & (frac.astype(np.int64) > top_frac)
    frac = np.where(at_top, np.uint64(top_frac), frac)
    if kind == "tiny":
        zero = rng.random(shape) < 0.1
        field, frac = np.where(zero, 0, field), np.where(zero, np.uint64(0), frac)
    return _assemble(t, sign, field, frac).astype(storage_dtype(t))


def _special_codes(t: str) -> np.ndarray:
    """Zeros, infinities, NaNs, the largest and smallest numbers of ``t`` (both signs)."""
    e, m, rule, _ = FORMATS[t]
    _, _, bias, emin, emax, top_frac = _facts(t)
    one = lambda s, f, fr: int(_assemble(t, np.array(s), np.array(f), np.array(fr)) >> (  # noqa: E731
        np.uint64(FORMATS[t][3])))
    out = set()
    signs = (0,) if rule == "ue8m0" or t == "ue4m3" else (0, 1)
    for s in signs:
        if rule != "ue8m0":
            out |= {one(s, 0, 0), one(s, 0, 1), one(s, 1, 0)}
        out.add(one(s, emax + bias, top_frac))
        if rule == "ieee":
            out |= {one(s, (1 << e) - 1, 0), one(s, (1 << e) - 1, 1 << (m - 1))}
        if rule == "fn":
            out.add(one(s, (1 << e) - 1, (1 << m) - 1))
    if rule == "ue8m0":
        out |= {0, 0xFF, 127}
    return np.array(sorted(out), np.uint64)


# --------------------------------------------------------------------------------------
# Qualifiers: MMA-Sim's shape-and-type strings (README.md, "What it writes").

_SHAPE = re.compile(r"m(\d+)n(\d+)k(\d+)")


def parse(family: str, qualifier: str) -> dict:
    """Shape, types, packing and scale block of one qualifier."""
    parts = qualifier.split(".")
    m, n, k = map(int, _SHAPE.fullmatch(parts[0]).groups())
    kind = parts[1][6:] if parts[1].startswith("kind::") else ""
    block = int(parts[2][5:]) if family.endswith("block_scale") else 0
    types = {"mma": ("D", "A", "B", "C"), "tcgen05": ("D", "A", "B"),
             "mma_block_scale": ("D", "A", "B", "C", "S"),
             "tcgen05_block_scale": ("D", "A", "B", "S")}[family]
    ty = dict(zip(types, parts[-len(types):], strict=True))
    ty.setdefault("C", ty["D"])
    return {"m": m, "n": n, "k": k, "kind": kind, "block": block, "types": ty,
            "packed": kind in ("mxf4", "mxf4nvf4")}


def field_shapes(cfg: dict, trials: int) -> dict:
    m, n, k = cfg["m"], cfg["n"], cfg["k"]
    ka = k // 2 if cfg["packed"] else k
    out = {"A": (trials, m, ka), "B": (trials, ka, n), "C": (trials, m, n)}
    if cfg["block"]:
        out |= {"SA": (trials, m, k // cfg["block"]), "SB": (trials, k // cfg["block"], n)}
    return out


def _values(bits: np.ndarray, t: str, packed: bool) -> np.ndarray:
    if packed:  # two e2m1 per byte along k: even k in the high nibble
        hi, lo = decode((bits >> 4 & 0xF) << 2, t), decode((bits & 0xF) << 2, t)
        return np.stack([hi, lo], -1).reshape(*bits.shape[:-1], -1)
    return decode(bits, t)


def draw_trial(cfg: dict, kind: str, rng: np.random.Generator) -> dict:
    """One trial's inputs (A, B, C and scales) as raw bits."""
    ty, shapes = cfg["types"], field_shapes(cfg, 1)
    ab_kind = "normal" if kind == "cancel" else kind
    out = {}
    for f in ("A", "B"):
        t = ty[f]
        if cfg["packed"]:
            hi, lo = (draw(t, ab_kind, shapes[f][1:], rng) >> 2 for _ in range(2))
            out[f] = ((hi << 4) | lo).astype(np.uint8)
        else:
            out[f] = draw(t, ab_kind, shapes[f][1:], rng)
    for f in ("SA", "SB"):
        if f in shapes:
            out[f] = draw(ty["S"], "specials" if kind == "specials" else (
                "wide" if kind == "wide" else "normal"), shapes[f][1:], rng)
    out["C"] = draw(ty["C"], ab_kind, shapes["C"][1:], rng)
    if kind == "cancel":  # B's columns repeat A's first row; C cancels row 0's sum
        if cfg["packed"] or ty["A"] == ty["B"]:
            out["B"][:] = out["A"][0][:, None]
        else:
            out["B"][:] = encode(decode(out["A"][0], ty["A"]), ty["B"])[:, None]
        a = _values(out["A"][0], ty["A"], cfg["packed"])
        b = _values(out["B"].T, ty["B"], cfg["packed"]).T
        if cfg["block"]:
            blk = cfg["block"]
            a = a * np.repeat(decode(out["SA"][0], ty["S"]), blk)
            b = b * np.repeat(decode(out["SB"], ty["S"]), blk, axis=0)
        with np.errstate(all="ignore"):
            out["C"][0] = encode(-(a @ b), ty["C"])
    return out


# --------------------------------------------------------------------------------------
# Running MMA-Sim.


def oracle(python: str, *args: str, progress=None) -> subprocess.CompletedProcess | None:
    cmd = [python, str(HERE / "oracle.py"), *args]
    if progress is None:
        return subprocess.run(cmd, capture_output=True, text=True, check=True)
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) as p:
        for line in p.stdout:
            if line.startswith("done "):
                progress(line[5:].strip())
    if p.returncode:
        raise SystemExit(f"oracle.py failed with status {p.returncode} (see above)")
    return None


def catalogue(python: str) -> dict:
    if not os.path.exists(python):
        raise SystemExit(f"{python}: no such interpreter; run tools/crosscheck/setup_venv.sh "
                         f"or pass --python")
    return json.loads(oracle(python, "--list").stdout)


def select(cat: dict, families, archs, patterns) -> list[tuple[str, str, str]]:
    chosen = []
    for fam in families:
        for arch, quals in cat[fam].items():
            if archs and arch not in archs:
                continue
            chosen += [(fam, arch, q) for q in quals
                       if any(fnmatch.fnmatchcase(q, p) for p in patterns)]
    return chosen


def make(configs, trials: int, steps: int, seed: int, python: str, out: str,
         version: str, batch: int = 64, show: bool = True) -> int:
    """Draws, runs and writes every configuration. Returns the number of keys written."""
    rng = np.random.default_rng(seed)
    data: dict[str, np.ndarray] = {"device": np.array(
        f"MMA-Sim {version} (reference model, not hardware)")}
    bar = tqdm(total=len(configs), unit="config", desc="MMA-Sim", file=sys.stderr) if (
        show and tqdm is not None) else None
    done = [0]

    def progress(key: str) -> None:
        done[0] += 1
        if bar is not None:
            bar.set_postfix_str(key[-40:], refresh=False)
            bar.update(1)
        elif show:
            print(f"\rMMA-Sim: {done[0]}/{len(configs)} configurations", end="",
                  file=sys.stderr, flush=True)

    with tempfile.TemporaryDirectory() as tmp:
        for start in range(0, len(configs), batch):
            jobs, inputs = [], {}
            for fam, arch, q in configs[start:start + batch]:
                cfg = parse(fam, q)
                key = f"golden/{fam}/{arch}/{q}"
                # a chain feeds D back as C: only where C has D's type
                chain = steps if cfg["types"]["C"] == cfg["types"]["D"] else 1
                kinds = [KINDS[(t // chain) % len(KINDS)] for t in range(trials)]
                per = [draw_trial(cfg, kinds[t], rng) for t in range(trials)]
                for f in per[0]:
                    inputs[f"{key}/{f}"] = np.stack([p[f] for p in per])
                data[f"{key}/kind"] = np.array(kinds)
                jobs.append({"key": key, "family": fam, "arch": arch, "qualifier": q,
                             "steps": chain})
            jpath, ipath, opath = (os.path.join(tmp, n) for n in
                                   ("jobs.json", "in.npz", "out.npz"))
            with open(jpath, "w") as f:
                json.dump(jobs, f)
            np.savez(ipath, **inputs)
            oracle(python, jpath, ipath, opath, progress=progress)
            results = np.load(opath)
            for job in jobs:
                key = job["key"]
                for f in ("A", "B", "SA", "SB"):
                    if f"{key}/{f}" in inputs:
                        data[f"{key}/{f}"] = inputs[f"{key}/{f}"]
                data[f"{key}/C"] = results[f"{key}/C"]
                data[f"{key}/D"] = results[f"{key}/D"]
    if bar is not None:
        bar.close()
    elif show:
        print(file=sys.stderr)
    np.savez_compressed(out, **data)
    return len(data)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--family", action="append", choices=FAMILIES,
                   help="instruction family (repeat; default: mma and tcgen05)")
    p.add_argument("--arch", action="append",
                   help="MMA-Sim architecture, spaces as _ (repeat; default: every one "
                        "that has the family): Volta Turing Ampere Ada_Lovelace Hopper "
                        "Blackwell RTX_Blackwell")
    p.add_argument("--qualifier", action="append", metavar="PATTERN",
                   help="shell pattern over MMA-Sim's qualifiers, e.g. 'm16n8k16.*' or "
                        "'m64n8k*' (repeat; default: every one)")
    p.add_argument("--trials", type=int, default=12, help="trials per configuration (12)")
    p.add_argument("--chain-steps", type=int, default=1, metavar="S",
                   help="cut the trials into chains of S consecutive trials: C of each "
                        "later step is D of the step before (default 1: no chains)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", help="the .npz file to write (needed unless --list)")
    p.add_argument("--python", default=str(DEFAULT_PYTHON),
                   help="the interpreter that has mmasim (default: .crosscheck-venv)")
    p.add_argument("--list", action="store_true", help="list the selected configurations")
    p.add_argument("--progress", choices=("auto", "on", "off"), default="auto")
    args = p.parse_args(argv)
    if not args.list and not args.out:
        p.error("--out is needed (or --list)")
    if args.trials < 1 or args.chain_steps < 1 or args.trials % args.chain_steps:
        p.error("--trials must be a positive multiple of --chain-steps")
    info = catalogue(args.python)
    cat = info["catalogue"]
    archs = set(args.arch or ())
    known = {a for by in cat.values() for a in by}
    if archs - known:
        p.error(f"--arch {sorted(archs - known)} unknown; MMA-Sim has {sorted(known)}")
    configs = select(cat, args.family or ("mma", "tcgen05"), archs, args.qualifier or ["*"])
    if not configs:
        p.error("no configuration of MMA-Sim matches --family/--arch/--qualifier")
    if args.list:
        print("\n".join(f"golden/{f}/{a}/{q}" for f, a, q in configs))
        return 0
    show = args.progress == "on" or (args.progress == "auto" and sys.stderr.isatty())
    n = make(configs, args.trials, args.chain_steps, args.seed, args.python, args.out,
             info["version"], show=show)
    size = os.path.getsize(args.out)
    print(f"{args.out}: {len(configs)} configurations, {args.trials} trials each, {n} keys, "
          f"{size / 2**20:.2f} MiB (MMA-Sim {info['version']}, torch {info['torch']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
