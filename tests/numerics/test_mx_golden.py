"""jaxwarp.mx against torchao's and microxcaling's quantizers, bit for bit.

``tests/data/quantizers/mx_golden.npz`` (made by ``tools/crosscheck/mx_golden.py`` in a
separate venv) holds, per quantizer, a seed for ``mx_golden_inputs`` (2**20 inputs), one
SHA-256 digest of the reference's outputs per chunk of 4,096 inputs, the outputs of the
first chunks in full, and the blocks where the reference departs from the rule it
implements (``dev_blocks``, with the reference's outputs there). The default run compares
the sample; ``-m slow`` every chunk against its digest. Jaxwarp's outputs on a listed
block are replaced by the reference's before digesting, and each such block must be
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
    return _names() if GOLDEN.exists() else []


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
        rule = ALT_RULE_RCEIL if name.startswith("torchao/") else ALT_RULE
        alt = {k: _blocks(v, nb)[local].reshape(-1)
               for k, v in ours(name, x, rule=rule).items()}
        causes += _explain(name, x[local], listed, plain, alt)
    return got, causes


def _compare_sample(name: str, n_chunks: int) -> collections.Counter:
    g = golden()
    n = n_chunks * gi.CHUNK
    x = _inputs(name, n)
    fields = [str(f) for f in g[f"{name}/fields"]]
    ref = {k: g[f"{name}/sample/{k}"][:g[f"{name}/sample/{k}"].size * n_chunks
                                      // int(g["sample_chunks"])] for k in fields}
    if name == "torchao/nvfp4":
        got = ours(name, x)
        for k in fields:
            np.testing.assert_array_equal(got[k], ref[k], err_msg=f"{name} {k}")
        return collections.Counter()
    got, causes = _check(name, x, 0)
    for k in fields:
        np.testing.assert_array_equal(got[k], ref[k], err_msg=f"{name} {k}")
    if name.startswith("microxcaling/"):
        # its default rounding, "nearest" (floor(|v| + 0.5): ties away from zero), on the
        # same inputs: every difference is a tie or a cause above.
        near = g[name.replace("/even", "/nearest") + "/sample/values"][:n]
        plain = ours(name, x)
        alt = ours(name, x, rule=ALT_RULE)
        c = _explain(name, x, {"values": near}, plain, alt)
        assert c["values: tie away from zero"] > 0
        causes += collections.Counter({"nearest " + k: v for k, v in c.items()})
    return causes


# The default run: a chunk of the quantizers whose reference departs from its rule (one
# compilation each); the rest of the sample and every chunk run with -m slow.
DEFAULT = ("torchao/e4m3/rceil", "microxcaling/fp8_e4m3/even", "microxcaling/fp4_e2m1/even",
           "microxcaling/int8/even")


@pytest.mark.parametrize("name", DEFAULT)
def test_golden_first_chunk(name):
    """The quantizer's first 4,096 inputs (every kind: ties, subnormals, saturation, zero
    blocks, NaN): equal to the reference, or a listed block explained."""
    _compare_sample(name, 1)


@pytest.mark.slow
@pytest.mark.parametrize("name", _names_or_empty())
def test_golden_sample(name):
    """The file's whole sample of the quantizer (8 chunks)."""
    _compare_sample(name, int(golden()["sample_chunks"]))


def _digest(parts: list[np.ndarray]) -> bytes:
    return hashlib.sha256(b"".join(p.tobytes() for p in parts)).digest()


@pytest.mark.slow
@pytest.mark.parametrize("name", _names_or_empty())
def test_golden_full(name, capsys):
    """All 2**20 inputs of the quantizer against the reference's per-chunk digests."""
    g = golden()
    n = int(g["n"])
    digests = g[f"{name}/digests"]
    fields = [str(f) for f in g[f"{name}/fields"]]
    seed = int(g[f"{name}/seed"])
    step = 32  # chunks per jaxwarp call
    bad_chunks = []
    causes: collections.Counter = collections.Counter()
    for c0 in range(0, n // gi.CHUNK, step):
        cs = range(c0, min(c0 + step, n // gi.CHUNK))
        if name == "torchao/nvfp4":
            x = np.concatenate([gi.mx_chunk(seed, c, "e2m1", 16, nonfinite=False) for c in cs])
            got = ours(name, x.reshape(-1, 16, 64))
        else:
            x = np.concatenate([gi.mx_chunk(seed, c, _elem(name),
                                            infinities=not name.startswith("torchao"))
                                for c in cs])
            got, c = _check(name, x, c0 * gi.CHUNK // BS)
            causes += c
        for i, c in enumerate(cs):
            if _digest([got[k].reshape(len(cs), -1)[i] for k in fields]) != digests[c].tobytes():
                bad_chunks.append(c)
    listed = int(g[f"{name}/dev_blocks"].size)
    total = sum(int(np.prod(got[k].shape)) // step * (n // gi.CHUNK) for k in fields)
    diff = causes.pop("outputs differing", 0)
    with capsys.disabled():
        print(f"\n{name}: {n} inputs, {total} outputs ({'+'.join(fields)}), "
              f"equal {total - diff}; chunks equal {n // gi.CHUNK - len(bad_chunks)}"
              f"/{n // gi.CHUNK}; {listed} blocks off the rule: {dict(causes)}")
    assert not bad_chunks, (
        f"{name}: chunks {bad_chunks[:10]} differ from the reference (chunk c is "
        f"mx_golden_inputs.mx_chunk(seed={seed}, chunk=c, ...))")
