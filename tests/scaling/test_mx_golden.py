"""jaxwarp.mx against torchao's and microxcaling's quantizers, bit for bit.

``tests/data/quantizers/mx_golden.npz`` (made by ``tools/crosscheck/mx_golden.py`` in a
separate venv) holds, per quantizer, a seed for ``mx_golden_inputs`` (2**20 inputs), one
SHA-256 digest of the reference's outputs per chunk of 4,096 inputs, the outputs of the
first chunks in full, and the blocks where the reference departs from the rule it
implements (``dev_blocks``, with the reference's outputs there). The default run compares
one chunk of three quantizers with its digest; ``-m slow`` the sample value by value and
every chunk of every quantizer with its digest. Jaxwarp's outputs on a listed
block are replaced by the reference's before digesting; jaxwarp's own outputs there
must equal the rule from its definition (``rule_model``), and the reference's must be
explained by a cause stated in ``_explain`` (checked on the inputs, without the
reference): torchao 0.18's RCEIL and microxcaling take ``log2`` of a float32 in float32,
which rounds a value within a few ulps of a power of two onto it; microxcaling rounds
``floor(|v| + 0.5)`` in float32, which rounds ``|v| + 0.5`` up to an integer for some
``v`` just below a tie in the element's subnormal range.
"""

from __future__ import annotations

import collections
import functools
import hashlib
import pathlib

import jax
import ml_dtypes
import mx_golden_inputs as gi
import numpy as np
import pytest

from jaxwarp import mx

GOLDEN = (pathlib.Path(__file__).resolve().parents[1] / "data" / "quantizers"
          / "mx_golden.npz")
FMT = {"e4m3": "mxfp8_e4m3", "e5m2": "mxfp8_e5m2", "e2m3": "mxfp6_e2m3",
       "e3m2": "mxfp6_e3m2", "e2m1": "mxfp4_e2m1", "s8": "mxint8"}
MXC = {"fp8_e4m3": "e4m3", "fp8_e5m2": "e5m2", "fp6_e2m3": "e2m3", "fp6_e3m2": "e3m2",
       "fp4_e2m1": "e2m1", "int8": "s8"}
BS = 32


@functools.cache
def golden() -> dict:
    with np.load(GOLDEN) as g:
        return {k: g[k] for k in g.files}


def _names() -> list[str]:
    return [str(n) for n in golden()["names"]]


def _names_or_empty() -> list[str]:
    """The quantizers, read at collection without loading the rest of the file."""
    if not GOLDEN.exists():
        return []
    with np.load(GOLDEN) as g:
        return [str(n) for n in g["names"]]


def _elem(name: str) -> str:
    e = name.split("/")[1]
    return MXC.get(e, e)


def _inputs(name: str, n: int) -> np.ndarray:
    seed = int(golden()[f"{name}/seed"])
    if name == "torchao/nvfp4":
        return gi.nvfp4_inputs(seed, n)
    return gi.mx_inputs(seed, n, _elem(name), infinities=not name.startswith("torchao"))


def canonical(v: np.ndarray) -> np.ndarray:
    """float32 values -> bits, every NaN as 0x7FC00000 and -0 as +0 (microxcaling's
    zero signs follow torch.sign(+-0) == +0, and MXINT8 has no -0)."""
    v = np.asarray(v, np.float32)
    b = v.view(np.uint32).copy()
    b[np.isnan(v)] = 0x7FC00000
    b[v == 0] = 0
    return b


def _codes(t) -> np.ndarray:
    el = np.asarray(t.elements)
    return el if el.dtype == np.uint8 else el.view(np.uint8)


def ours(name: str, x: np.ndarray, rule: str | None = None) -> dict[str, np.ndarray]:
    """jaxwarp's outputs, in the golden file's fields, for inputs ``x`` (bits)."""
    f = x.view(np.float32)
    src, _, how = name.split("/") if name.count("/") == 2 else (*name.split("/"), None)
    if name == "torchao/nvfp4":
        t = jax.vmap(lambda v: mx.quantize(v, "nvfp4"))(f)
        return {"tensor_scale": np.asarray(t.tensor_scale).view(np.uint32).reshape(-1),
                "scales": np.asarray(t.scales).reshape(-1),
                "codes": _codes(t).reshape(-1)}
    if src == "torchao":
        t = mx.quantize(f, FMT[_elem(name)], scale_rule=rule or how)
        scales = np.asarray(t.scales).reshape(-1)
        codes = _codes(t).reshape(-1, BS).copy()
        # torchao 0.18 divides 2**-127 blocks by 2**-126; a NaN block's codes are
        # unspecified: neither is compared (the generator zeroes them too).
        codes[(scales == 0) | (scales == 0xFF)] = 0
        return {"scales": scales, "codes": codes.reshape(-1)}
    y = mx.dequantize(mx.quantize(f, FMT[_elem(name)], scale_rule=rule or "ocp"))
    return {"values": canonical(np.asarray(y)).reshape(-1)}


def _blocks(a: np.ndarray, nb: int) -> np.ndarray:
    return a.reshape(nb, -1)


def _near_pow2(v: np.ndarray, above: bool) -> np.ndarray:
    """|v| within 2**-16 (relative) below (or above) a power of two, not on it."""
    with np.errstate(invalid="ignore"):
        m, _ = np.frexp(np.abs(v.astype(np.float64)))
    return (m > 0.5) & (m - 0.5 <= 2.0 ** -17) if above else (m < 1) & (1 - m <= 2.0 ** -17)


ELEM_DTYPE = {"e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2,
              "e2m3": ml_dtypes.float6_e2m3fn, "e3m2": ml_dtypes.float6_e3m2fn,
              "e2m1": ml_dtypes.float4_e2m1fn}


def rule_model(name: str, x: np.ndarray) -> dict[str, np.ndarray]:
    """The rule the reference implements, in float64 from its definition (independent of
    jaxwarp), for finite blocks x (bits, (nb, 32)): torchao RCEIL's exact ceiling of
    ``log2(amax / max)``, or OCP's ``floor(log2(amax)) - emax`` with elements rounded to
    nearest even (microxcaling "even"); elements saturate at the largest value."""
    elem = _elem(name)
    top = gi.grid(elem)[-1]
    v = x.view(np.float32).astype(np.float64)
    amax = np.abs(v).max(-1, keepdims=True)
    if name.startswith("torchao/"):
        m, ex = np.frexp(amax / top)
        e = np.where(m == 0.5, ex - 1, ex)
    else:
        e = np.frexp(amax)[1] - 1 - int(np.floor(np.log2(top)))
    e = np.clip(np.where(amax > 0, e, -127), -127, 127)
    y = np.clip(v / np.exp2(e), -top, top)
    if elem == "s8":
        q = np.rint(y * 64) / 64
    else:
        q = y.astype(ELEM_DTYPE[elem])
    if name.startswith("torchao/"):
        codes = q.view(np.uint8).copy()
        codes[(e == -127)[:, 0]] = 0
        return {"scales": (e + 127).astype(np.uint8).reshape(-1), "codes": codes.reshape(-1)}
    return {"values": canonical((q.astype(np.float64) * np.exp2(e)).astype(np.float32))
            .reshape(-1)}


ALT_RULE = "ceil"  # microxcaling's blocks off the rule: floor(log2) rounded up
ALT_RULE_RCEIL = "floor"  # torchao's RCEIL blocks off the rule: ceiling missed


def _explain(name: str, x: np.ndarray, ref: dict, got: dict,
             alt: dict) -> collections.Counter:
    """The cause of each listed block's difference (x: (nb, 32) bits of those blocks;
    ref, got, alt: the reference's, jaxwarp's, and jaxwarp's outputs under the rule the
    cause predicts, of those blocks); AssertionError if one is not explained."""
    causes: collections.Counter = collections.Counter()
    if not len(x):
        return causes
    nb = len(x)
    f = x.view(np.float32)
    amax = np.abs(f).max(-1)
    fields = list(ref)

    def same(a, b):
        out = np.ones(nb, bool)
        for k in fields:
            out &= (_blocks(a[k], nb) == _blocks(b[k], nb)).all(-1)
        return out

    eq = same(ref, got)
    causes["listed, equal"] += int(eq.sum())
    if name.startswith("torchao/"):
        # torchao 0.18 RCEIL (eager): ceil(torch.log2(amax / max)) in float32 misses the
        # ceiling when the quotient is just above a power of two; the block then has the
        # floor rule's scale and codes.
        descale = amax / np.float32(gi.grid(_elem(name))[-1])
        ok = same(ref, alt) & _near_pow2(descale, above=True) & ~eq
        causes["blocks: float32 log2 of amax/max"] += int(ok.sum())
        bad = ~(ok | eq)
        assert not bad.any(), f"{name}: unexplained blocks {np.flatnonzero(bad)[:8]}"
        return causes
    # microxcaling: floor(torch.log2(amax)) in float32, rounded up onto a power of two:
    # the block has the ceil rule's scale.
    r = ref["values"].reshape(nb, -1)
    g = got["values"].reshape(nb, -1)
    log2 = _near_pow2(amax, above=False) & same(ref, alt) & ~eq
    causes["blocks: float32 log2 of amax"] += int(log2.sum())
    # Elementwise: a near-tie rounded away by floor(|v| + 0.5) in float32 (or, rounding
    # "nearest", an exact tie rounded away from zero).
    rv = r.view(np.float32).astype(np.float64)
    gv = g.view(np.float32).astype(np.float64)
    with np.errstate(invalid="ignore"):
        xv = f.astype(np.float64)
    diff = (r != g) & ~(eq | log2)[:, None]
    lo, hi = np.minimum(rv, gv), np.maximum(rv, gv)
    mid = (lo + hi) / 2
    away = (lo <= xv) & (xv <= hi) & (np.abs(rv) > np.abs(gv))
    tie = away & (xv == mid)
    near = away & (np.abs(xv - mid) <= (hi - lo) * 2.0 ** -20) & ~tie
    causes["values: float32 floor(|v| + 0.5)"] += int((diff & near).sum())
    causes["values: tie away from zero"] += int((diff & tie).sum())
    bad = diff & ~(tie | near)
    assert not bad.any(), (
        f"{name}: unexplained values x={f[bad][:4]} ref={rv[bad][:4]} ours={gv[bad][:4]}")
    return causes


def _check(name: str, x: np.ndarray, first_block: int):
    """jaxwarp's outputs of blocks x (bits, (nb, 32); the file's blocks from
    ``first_block``) with the listed blocks replaced by the reference's, and the causes
    found on the listed blocks."""
    g = golden()
    nb = len(x)
    got = ours(name, x)
    dev = g[f"{name}/dev_blocks"]
    sel = (dev >= first_block) & (dev < first_block + nb)
    local = dev[sel] - first_block
    plain = {k: _blocks(v, nb)[local].reshape(-1) for k, v in got.items()}
    causes: collections.Counter = collections.Counter()
    if local.size:
        listed = {k: g[f"{name}/dev/{k}"].reshape(dev.size, -1)[sel].reshape(-1)
                  for k in got}
        for k in got:
            b = _blocks(got[k], nb).copy()
            b[local] = _blocks(listed[k], local.size)
            got[k] = b.reshape(-1)
        causes["outputs differing"] = int(sum((listed[k] != plain[k]).sum() for k in got))
        # jaxwarp's own outputs there: the rule, from its definition (finite blocks)
        fin = np.isfinite(x[local].view(np.float32)).all(-1)
        want = rule_model(name, x[local][fin])
        for k in got:
            np.testing.assert_array_equal(_blocks(plain[k], local.size)[fin].reshape(-1),
                                          want[k], err_msg=f"{name}: jaxwarp's {k} on a "
                                          "block off the reference's rule")
        rule = ALT_RULE_RCEIL if name.startswith("torchao/") else ALT_RULE
        alt = {k: _blocks(v, nb)[local].reshape(-1)
               for k, v in ours(name, x, rule=rule).items()}
        causes += _explain(name, x[local], listed, plain, alt)
    return got, causes


def _chunk_inputs(name: str, cs) -> np.ndarray:
    seed = int(golden()[f"{name}/seed"])
    if name == "torchao/nvfp4":
        x = np.concatenate([gi.mx_chunk(seed, c, "e2m1", 16, nonfinite=False) for c in cs])
        return x.reshape(-1, 16, 64)
    return np.concatenate([gi.mx_chunk(seed, c, _elem(name),
                                       infinities=not name.startswith("torchao"))
                           for c in cs])


def _digest(parts: list[np.ndarray]) -> bytes:
    return hashlib.sha256(b"".join(p.tobytes() for p in parts)).digest()


def _compare_chunks(name: str, cs: range) -> tuple[list[int], collections.Counter]:
    """Chunks ``cs`` (consecutive) against their digests: the chunks that differ, and the
    causes found on the listed blocks."""
    g = golden()
    fields = [str(f) for f in g[f"{name}/fields"]]
    x = _chunk_inputs(name, cs)
    causes: collections.Counter = collections.Counter()
    if name == "torchao/nvfp4":
        got = ours(name, x)
    else:
        got, causes = _check(name, x, cs[0] * gi.CHUNK // BS)
    bad = [c for i, c in enumerate(cs)
           if _digest([got[k].reshape(len(cs), -1)[i] for k in fields])
           != g[f"{name}/digests"][c].tobytes()]
    if bad and bad[0] < int(g["sample_chunks"]):  # readable: the first differing values
        i = bad[0] - cs[0]
        for k in fields:
            ref = g[f"{name}/sample/{k}"].reshape(int(g["sample_chunks"]), -1)[bad[0]]
            mine = got[k].reshape(len(cs), -1)[i]
            d = np.flatnonzero(ref != mine)[:8]
            print(f"{name} chunk {bad[0]} {k}: at {d} reference {ref[d]} jaxwarp {mine[d]}")
    return bad, causes


def _busiest_chunk(name: str) -> int:
    """The chunk holding the most blocks off the reference's rule (0 if none)."""
    dev = golden()[f"{name}/dev_blocks"] // (gi.CHUNK // BS)
    return int(np.bincount(dev).argmax()) if dev.size else 0


def _nearest(name: str, n_chunks: int) -> collections.Counter:
    """microxcaling's default rounding, "nearest" (floor(|v| + 0.5): ties away from
    zero), on its sample: every difference from jaxwarp is a tie or a cause above."""
    g = golden()
    n = n_chunks * gi.CHUNK
    x = _inputs(name, n)
    near = g[name.replace("/even", "/nearest") + "/sample/values"][:n]
    c = _explain(name, x, {"values": near}, ours(name, x), ours(name, x, rule=ALT_RULE))
    assert c["values: tie away from zero"] > 0
    return c


# The default run: one chunk of the quantizers whose reference departs from its rule
# (the chunk with the most such blocks; one compilation each); the rest under -m slow.
DEFAULT = ("torchao/e4m3/rceil", "microxcaling/fp8_e4m3/even", "microxcaling/fp4_e2m1/even")


@pytest.mark.parametrize("name", DEFAULT)
def test_golden_chunk(name):
    """One chunk of 4,096 inputs (every kind: ties, subnormals, saturation, zero blocks,
    NaN): equal to the reference's digest, its blocks off the rule explained."""
    c = _busiest_chunk(name)
    bad, causes = _compare_chunks(name, range(c, c + 1))
    assert not bad, f"{name}: chunk {c} differs from the reference"
    assert causes, f"{name}: chunk {c} has no block off the rule"
    if name.startswith("microxcaling/"):
        _nearest(name, 1)


@pytest.mark.slow
@pytest.mark.parametrize("name", _names_or_empty())
def test_golden_sample(name):
    """The file's sample of the quantizer (8 chunks) value by value, and microxcaling's
    "nearest" rounding on it."""
    g = golden()
    n_chunks = int(g["sample_chunks"])
    x = _inputs(name, n_chunks * gi.CHUNK)
    fields = [str(f) for f in g[f"{name}/fields"]]
    got = ours(name, x) if name == "torchao/nvfp4" else _check(name, x, 0)[0]
    for k in fields:
        np.testing.assert_array_equal(got[k], g[f"{name}/sample/{k}"], err_msg=f"{name} {k}")
    if name.startswith("microxcaling/"):
        _nearest(name, n_chunks)


@pytest.mark.slow
@pytest.mark.parametrize("name", _names_or_empty())
def test_golden_full(name, capsys):
    """All 2**20 inputs of the quantizer against the reference's per-chunk digests."""
    g = golden()
    n_chunks = int(g["n"]) // gi.CHUNK
    fields = [str(f) for f in g[f"{name}/fields"]]
    step = 32  # chunks per jaxwarp call
    bad_chunks: list[int] = []
    causes: collections.Counter = collections.Counter()
    for c0 in range(0, n_chunks, step):
        bad, c = _compare_chunks(name, range(c0, min(c0 + step, n_chunks)))
        bad_chunks += bad
        causes += c
    per_chunk = sum(g[f"{name}/sample/{k}"].size for k in fields) // int(g["sample_chunks"])
    total = per_chunk * n_chunks
    diff = causes.pop("outputs differing", 0)
    listed = int(g[f"{name}/dev_blocks"].size)
    with capsys.disabled():
        print(f"\n{name}: {n_chunks * gi.CHUNK} inputs, {total} outputs "
              f"({'+'.join(fields)}), equal {total - diff}; chunks equal "
              f"{n_chunks - len(bad_chunks)}/{n_chunks}; {listed} blocks off the rule: "
              f"{dict(causes)}")
    assert not bad_chunks, (
        f"{name}: chunks {bad_chunks[:10]} differ from the reference (chunk c's inputs: "
        f"mx_golden_inputs.mx_chunk(seed={int(g[f'{name}/seed'])}, chunk=c, ...))")
