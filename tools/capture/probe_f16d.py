"""Dense probe of WMMA with f16 operands, an fp32 C and an f16 D (``f16.f32f16``).

Sums are drawn to land on and next to the f16 rounding points of D: tiny f16 operands
(subnormal and near), fp32 C values chosen so that the exact ``A @ B + C`` lies within a
few fp32 ulps of a midpoint between two f16 values, and products that make the sum an
exact midpoint plus one much smaller term. Every input set runs through ``f16.f32f16``
and ``f16.f32f32`` (the same C), so the f16 D can be compared with the fp32 D of the
same sum (is D the fp32 result rounded again, or rounded once?). Shapes m16n16k16,
m32n8k16 and m8n32k16, layouts ``rc`` (``--layouts`` for more).

On the GPU it records; then it runs jaxwarp's model (``jaxwarp.mma``, WMMA, sm_90) on
the same inputs and writes only what is needed to study the difference: every trial
where the model and the GPU differ in some configuration, and the first ``--keep``
trials of every kind. ``python -m jaxwarp.conformance FILE`` reads the file (keys of
``mma_fp.npz``: ``{config}/{A,B,C,D,kind}``).

    python tools/capture/probe_f16d.py --out DIR [--trials 4096] [--seed 0]
    python tools/capture/probe_f16d.py --selftest      # generators only, no GPU
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import capture as cap  # noqa: E402

SHAPES = {"m16n16k16": (16, 16, 16), "m32n8k16": (32, 8, 16), "m8n32k16": (8, 32, 16)}
KINDS = ("tiny_all", "tiny_mix", "near_tie", "tie_plus_small", "tiny_c")
U = 2.0 ** -48  # products of f16 values are integer multiples of 2**-48


def _f16(rng, shape, lo, hi, p_zero=0.0, p_normal=0.0):
    """Random-sign f16 values 2**e * [1, 2), e uniform in [lo, hi] (rounded to f16, so
    e < -14 gives subnormals); a share of zeros and of ordinary values in [-2, 2]."""
    e = rng.integers(lo, hi + 1, size=shape)
    x = np.ldexp(rng.uniform(1.0, 2.0, shape), e) * rng.choice([-1.0, 1.0], shape)
    x = np.where(rng.random(shape) < p_normal, rng.uniform(-2.0, 2.0, shape), x)
    x = np.where(rng.random(shape) < p_zero, 0.0, x)
    return x.astype(np.float16)


def _exact_sum_units(a16, b16):
    """A @ B exactly, in units of 2**-48 (int64; operands |x| <= 2 keep it in range)."""
    ai = np.round(a16.astype(np.float64) / 2.0 ** -24).astype(np.int64)
    bi = np.round(b16.astype(np.float64) / 2.0 ** -24).astype(np.int64)
    return ai @ bi


def _f16_ulp_units(p_units):
    """ulp of f16 at |p| (subnormal spacing 2**-24 below 2**-14), in units of 2**-48."""
    mag = np.abs(p_units).astype(np.float64) * U
    e = np.floor(np.log2(np.maximum(mag, 2.0 ** -14)))
    return np.ldexp(1.0, (e - 10 + 48).astype(np.int64)).astype(np.int64)


def _near_tie_c(rng, p_units, m, n):
    """fp32 C putting ``P + C`` next to a midpoint between f16 values: C = mid - P + delta,
    delta a random small multiple (or fraction) of the f16 ulp, then rounded to fp32."""
    shift = rng.integers(-3, 4, size=(m, n))  # which midpoint: near P, a few ulps away
    ulp = _f16_ulp_units(p_units)
    mid = (np.floor_divide(p_units, ulp) + shift) * ulp + ulp // 2
    rel = rng.choice([0.0, 1.0, -1.0], (m, n)) * np.ldexp(1.0, -rng.integers(8, 40, (m, n)))
    c = (mid - p_units).astype(np.float64) * U + rel * ulp.astype(np.float64) * U
    return c.astype(np.float32)


def gen_trial(rng, kind, m, n, k):
    """(A f16 (m, k), B f16 (k, n), C f32 (m, n)) of one trial."""
    if kind == "tiny_all":  # every operand at most 2**-10: subnormals and just above
        a = _f16(rng, (m, k), -24, -10, p_zero=0.1)
        b = _f16(rng, (k, n), -24, -10, p_zero=0.1)
        c = np.where(rng.random((m, n)) < 0.5, 0.0,
                     _f16(rng, (m, n), -30, -12).astype(np.float64)).astype(np.float32)
    elif kind == "tiny_mix":  # tiny mixed with ordinary values; C tiny fp32 or zero
        a = _f16(rng, (m, k), -24, -4, p_zero=0.1, p_normal=0.2)
        b = _f16(rng, (k, n), -24, -4, p_zero=0.1, p_normal=0.2)
        e = rng.integers(-60, -8, (m, n))
        c = (np.ldexp(rng.uniform(1, 2, (m, n)), e) * rng.choice([-1.0, 1.0], (m, n)))
        c = np.where(rng.random((m, n)) < 0.3, 0.0, c).astype(np.float32)
    elif kind == "near_tie":  # A @ B + C within a few fp32 ulps of an f16 midpoint
        lo = int(rng.choice([-24, -20, -16, -12]))
        a = _f16(rng, (m, k), lo, -2, p_zero=0.3, p_normal=0.1)
        b = _f16(rng, (k, n), lo, -2, p_zero=0.3, p_normal=0.1)
        c = _near_tie_c(rng, _exact_sum_units(a, b), m, n)
    elif kind == "tie_plus_small":  # two products on a midpoint, one far smaller, C tiny
        a = np.zeros((m, k), np.float16)
        b = np.zeros((k, n), np.float16)
        k0, k1, k2 = rng.choice(k, 3, replace=False)
        e0 = rng.integers(-13, 0, m)  # p0 = odd * 2**(e0 + eb - 10): an 11-bit odd number
        sign = rng.choice([-1.0, 1.0], m)
        odd = (rng.integers(1024, 2048, m) | 1).astype(np.float64)
        a[:, k0] = (np.ldexp(odd, e0 - 10) * sign).astype(np.float16)
        a[:, k1] = (np.ldexp(1.0, e0 - 11) * sign * rng.choice([-1.0, 1.0], m)).astype(
            np.float16)  # p1 = half p0's ulp: p0 + p1 a midpoint
        b[k0, :] = b[k1, :] = np.ldexp(1.0, rng.integers(-12, 0, n)).astype(np.float16)
        a[:, k2] = _f16(rng, (m,), -24, -12)
        b[k2, :] = _f16(rng, (n,), -24, -8)
        e = rng.integers(-149, -20, (m, n))
        c = np.ldexp(1.0, e) * rng.choice([-1.0, 1.0], (m, n))
        c = np.where(rng.random((m, n)) < 0.4, rng.choice([0.0, -0.0], (m, n)), c)
        c = c.astype(np.float32)
    elif kind == "tiny_c":  # products of ordinary size, C tiny fp32 (subnormal included)
        a = _f16(rng, (m, k), -14, 0, p_zero=0.3)
        b = _f16(rng, (k, n), -14, 0, p_zero=0.3)
        e = rng.integers(-149, -14, (m, n))
        c = (np.ldexp(rng.uniform(1, 2, (m, n)), e)
             * rng.choice([-1.0, 1.0], (m, n))).astype(np.float32)
    else:
        raise ValueError(kind)
    return a.view(np.uint16), b.view(np.uint16), c.view(np.uint32)


def gen_set(seed, shape, trials):
    m, n, k = SHAPES[shape]
    rng = np.random.default_rng([seed, list(SHAPES).index(shape)])
    kinds = [KINDS[i % len(KINDS)] for i in range(trials * len(KINDS))]
    ts = [gen_trial(rng, kd, m, n, k) for kd in kinds]
    return (np.array(kinds), np.stack([t[0] for t in ts]), np.stack([t[1] for t in ts]),
            np.stack([t[2] for t in ts]))


def model_d(A, B, C, d_format):
    """jaxwarp's WMMA (sm_90) on the logical tiles, as raw bits of d_format."""
    import jax.numpy as jnp

    import jaxwarp
    out = []
    for i in range(0, len(A), 4096):
        d = jaxwarp.mma(jnp.asarray(A[i:i + 4096].view(np.float16)),
                        jnp.asarray(B[i:i + 4096].view(np.float16)),
                        jnp.asarray(C[i:i + 4096].view(np.float32)),
                        a_format="f16", c_format="f32", d_format=d_format, arch="sm_90")
        out.append(np.asarray(d))
    d = np.concatenate(out)
    return d.view(np.uint16 if d_format == "f16" else np.uint32)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=pathlib.Path)
    ap.add_argument("--trials", type=int, default=4096, help="trials per kind and shape")
    ap.add_argument("--keep", type=int, default=64, help="trials kept per kind regardless")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--layouts", default="rc")
    ap.add_argument("--selftest", action="store_true")
    args = ap.parse_args(argv)
    if args.selftest:
        for shape in SHAPES:
            kinds, A, B, C = gen_set(args.seed, shape, 8)
            assert np.isfinite(A.view(np.float16)).all() and np.isfinite(C.view(np.float32)).all()
        print("selftest ok")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    lib = cap.Lib(cap.build(cap.driver.gpu_arch(None)))
    out = {"device": np.array(lib.device)}
    summary = {}
    t0 = time.time()
    for shape in SHAPES:
        kinds, A, B, C = gen_set(args.seed, shape, args.trials)
        keep = np.zeros(len(kinds), bool)
        for kd in KINDS:
            keep[np.flatnonzero(kinds == kd)[:args.keep]] = True
        got = {}
        for lay in args.layouts.split(","):
            for dt in ("f16", "f32"):
                name = f"f16.f32{dt}.{shape}.{lay}"
                got[name] = cap.run_mma(lib, lib.mma[name], A, B, C)
        for name, D in got.items():
            dt = name.split(".")[1][3:]
            bad = (model_d(A, B, C, dt) != D).reshape(len(A), -1)
            keep |= bad.any(axis=1)
            summary[name] = {kd: [int(bad[kinds == kd].sum()), int(bad[kinds == kd].size)]
                             for kd in KINDS}
            print(name, json.dumps(summary[name]), flush=True)
        for name, D in got.items():
            for part, v in (("A", A), ("B", B), ("C", C), ("D", D), ("kind", kinds)):
                out[f"{name}/{part}"] = v[keep]
    np.savez_compressed(args.out / "probe_f16d.npz", **out)
    (args.out / "probe_f16d.json").write_text(json.dumps(
        {"device": lib.device, "seed": args.seed, "trials": args.trials,
         "seconds": round(time.time() - t0, 1), "mismatches": summary}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
