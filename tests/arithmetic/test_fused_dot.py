"""``jaxwarp.fused_dot``: the emulated fused dot-product-add whose parameters are data.

Two anchors: with the GPUs' parameters for e4m3 it reproduces ``jaxwarp.mma`` bit for bit
(which ties the data to the hardware models), and on user-defined formats it equals a
reference written here from the model's definition with Python fractions. Every
``FusedDot`` field changes results.
"""

from __future__ import annotations

import math
from fractions import Fraction

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import jaxwarp

P4 = dict(exponent_bits=4, mantissa_bits=3, specials="p3109")  # binary8p4, bias 8
E5M10 = dict(exponent_bits=5, mantissa_bits=10, specials="ieee", saturate=True)


def _p4():
    return jaxwarp.define_format("binary8p4", **P4)


def _e5m10():
    return jaxwarp.define_format("t_e5m10_sat", **E5M10)


# --- The GPUs' parameters reproduce jaxwarp.mma. -----------------------------------------

# (arch, instruction, m, n, accumulator, FusedDot fields): MMA-Sim's e4m3 parameters.
GPU_CASES = {
    "sm_90a-wgmma-f32": ("sm_90a", "wgmma", 64, 8, "f32", dict(
        alignment_bits=13, block=32, rounding="rz", e_floor=7, sum_mantissa_bits=13)),
    "sm_90a-wgmma-f16": ("sm_90a", "wgmma", 64, 8, "f16", dict(
        alignment_bits=13, block=32, rounding="rn", e_floor=7)),
    "sm_100a-tcgen05-f32": ("sm_100a", "tcgen05", 64, 8, "f32", dict(
        alignment_bits=25, block=32, rounding="rz", e_floor=7)),
    "sm_100a-tcgen05-f16": ("sm_100a", "tcgen05", 64, 8, "f16", dict(
        alignment_bits=25, block=32, rounding="rn", e_floor=7)),
    "sm_120-mma_sync-f32": ("sm_120", "mma_sync", 16, 8, "f32", dict(
        alignment_bits=25, block=32, rounding="rz", e_floor=7)),
    "sm_89-mma_sync-f32": ("sm_89", "mma_sync", 16, 8, "f32", dict(
        alignment_bits=13, block=16, rounding="rz", e_floor=6, sum_mantissa_bits=13)),
    "sm_89-mma_sync-f16": ("sm_89", "mma_sync", 16, 8, "f16", dict(
        alignment_bits=13, block=16, rounding="rn", e_floor=6)),
}
_DEFAULT_GPU = ("sm_90a-wgmma-f32",)


def _e4m3(rng, shape, spread=6):
    x = (rng.standard_normal(shape) * np.exp2(rng.integers(-spread, spread, shape)))
    x = x.astype(np.float32).astype(ml_dtypes.float8_e4m3fn)
    x[np.isnan(x.astype(np.float32))] = 0  # random e4m3 NaNs would make whole rows NaN
    return jnp.asarray(x)


@pytest.mark.parametrize("case", [c if c in _DEFAULT_GPU else pytest.param(
    c, marks=pytest.mark.slow) for c in GPU_CASES])
def test_reproduces_mma_e4m3(case):
    arch, instruction, m, n, acc, fields = GPU_CASES[case]
    rng = np.random.default_rng(0)
    tiles, k = 4, 64  # two instructions of k 32 (sm_89: blocks of 16)
    a, b = _e4m3(rng, (tiles, m, k)), _e4m3(rng, (tiles, k, n))
    dt = np.float32 if acc == "f32" else np.float16
    c = jnp.asarray((rng.standard_normal((tiles, m, n))
                     * np.exp2(rng.integers(-8, 8, (tiles, m, n)))).astype(dt))
    want = jaxwarp.mma(a, b, c, a_format="e4m3", c_format=acc, d_format=acc, arch=arch,
                       instruction=instruction)
    dp = jaxwarp.FusedDot(accumulator=acc, **fields)
    got = jaxwarp.fused_dot(a, b, c, a_format="e4m3", datapath=dp)
    u = np.uint32 if acc == "f32" else np.uint16
    np.testing.assert_array_equal(np.asarray(got).view(u), np.asarray(want).view(u))


# --- A reference from the definition, with fractions. -----------------------------------


def _fields(fmt):
    """(eb, mb, bias, specials, signed) of a format."""
    lay = jaxwarp.get_format(fmt, user=True)
    specials = lay.specials or ("ieee" if lay.has_inf else "fn" if lay.has_nan else "none")
    return lay.exponent_bits, lay.mantissa_bits, lay.bias, specials, lay.signed


def _code_value(code: int, fmt):
    """(value Fraction, exponent of its exponent field) of a finite code."""
    eb, mb, bias, _, signed = _fields(fmt)
    sign = (code >> (eb + mb)) & 1 if signed else 0
    mag = code & ((1 << (eb + mb)) - 1)
    e, f = mag >> mb, mag & ((1 << mb) - 1)
    v = (Fraction(f, 1 << mb) + (e > 0)) * Fraction(2) ** (max(e, 1) - bias)
    return (-v if sign else v), max(e, 1) - bias


def _round(v: Fraction, fmt, mbits: int, mode: str) -> Fraction:
    """v rounded onto fmt's grid with mbits fraction bits (exponent unbounded above)."""
    _, _, bias, _, _ = _fields(fmt)
    if v == 0:
        return Fraction(0)
    e = max(math.floor(math.log2(abs(v))), 1 - bias)
    while Fraction(2) ** e > abs(v):  # log2 of a Fraction may be off by one
        e -= 1
    while Fraction(2) ** (e + 1) <= abs(v):
        e += 1
    e = max(e, 1 - bias)
    ulp = Fraction(2) ** (e - mbits)
    q = abs(v) / ulp
    n = math.floor(q)
    if mode == "rn" and (q - n > Fraction(1, 2) or (q - n == Fraction(1, 2) and n % 2)):
        n += 1
    return (-1 if v < 0 else 1) * n * ulp


def _ref_fused_dot(a, b, c, a_fmt, b_fmt, dp):
    """D codes from A, B, C codes (2-D numpy), finite, no overflow: the model's steps."""
    acc = dp.accumulator
    _, amb, abias, _, _ = _fields(acc)
    emin = 1 - abias
    fmt = jaxwarp.get_format(acc, user=True)
    m, k = a.shape
    n = b.shape[1]
    out = np.zeros((m, n), np.int64)
    for i in range(m):
        for j in range(n):
            cv, ce = _code_value(int(c[i, j]), acc)
            for k0 in range(0, k, dp.block):
                terms = []
                for kk in range(k0, min(k0 + dp.block, k)):
                    av, ae = _code_value(int(a[i, kk]), a_fmt)
                    bv, be = _code_value(int(b[kk, j]), b_fmt)
                    terms.append((av * bv, ae + be))
                exps = [e for t, e in terms if t != 0] + ([ce] if cv != 0 else [])
                E = max(exps + [emin - dp.e_floor])
                unit = Fraction(2) ** (E - dp.alignment_bits)
                s = sum(math.trunc(t / unit) * unit for t, _ in terms + [(cv, ce)])
                smb = amb if dp.sum_mantissa_bits is None else dp.sum_mantissa_bits
                cv = _round(Fraction(s), acc, smb, dp.rounding)
                assert abs(cv) <= fmt.max_value  # no overflow in these tests
                cv, ce = _code_value(_encode(cv, acc), acc)  # the next block's C
            out[i, j] = _encode(cv, acc)
    return out


def _encode(v: Fraction, fmt) -> int:
    """The code of a finite value of fmt (+0 for zero)."""
    f = jaxwarp.get_format(fmt, user=True)
    if f.name == "f32":
        return int(np.float32(float(v)).view(np.uint32))
    x = np.float32(float(v))
    assert Fraction(float(x)) == v
    return int(np.asarray(jaxwarp.to_format(jnp.float32(x), f)).astype(np.int64))


def _random_codes(rng, shape, fmt, spread=4):
    """Finite codes: normal-distributed values scaled by 2**[-spread, spread), clipped to
    half the format's largest value."""
    top = jaxwarp.get_format(fmt, user=True).max_value / 2
    x = (rng.standard_normal(shape) * np.exp2(rng.integers(-spread, spread, shape)))
    return jaxwarp.to_format(jnp.asarray(np.clip(x, -top, top).astype(np.float32)), fmt)


@pytest.mark.parametrize("acc", [pytest.param("f32", marks=pytest.mark.slow), "t_e5m10_sat"])
def test_user_formats_match_fraction_reference(acc):
    p4, e5m10 = _p4(), _e5m10()
    rng = np.random.default_rng(1)
    a = _random_codes(rng, (3, 40), p4)
    b = _random_codes(rng, (40, 4), e5m10)
    c = _random_codes(rng, (3, 4), acc)
    dp = jaxwarp.FusedDot(alignment_bits=12, block=16, rounding="rn", accumulator=acc,
                          e_floor=5)
    got = np.asarray(jaxwarp.fused_dot(a, b, c, a_format=p4, b_format=e5m10, datapath=dp))
    want = _ref_fused_dot(np.asarray(a), np.asarray(b), np.asarray(c).view(
        np.uint32 if acc == "f32" else np.uint16), p4, e5m10, dp)
    np.testing.assert_array_equal(got.view(np.uint32 if acc == "f32" else np.uint16), want)


# Every field changes results on the same data, and each result is the reference's.
_BASE = dict(alignment_bits=12, block=8, rounding="rz", accumulator="t_e5m10_sat",
             e_floor=5, sum_mantissa_bits=None)
_CHANGED = {"alignment_bits": 6, "block": 5, "rounding": "rn", "accumulator": "f32",
            "e_floor": 30, "sum_mantissa_bits": 4}


@pytest.mark.parametrize("field", [f if f in ("alignment_bits", "block", "e_floor") else
                                   pytest.param(f, marks=pytest.mark.slow) for f in _CHANGED])
def test_each_field_changes_results(field):
    p4, _ = _p4(), _e5m10()
    rng = np.random.default_rng(2)
    a = _random_codes(rng, (4, 24), p4, spread=8)
    b = _random_codes(rng, (24, 4), p4, spread=8)
    c16 = _random_codes(rng, (4, 4), "t_e5m10_sat", spread=2)
    dps = [jaxwarp.FusedDot(**_BASE), jaxwarp.FusedDot(**{**_BASE, field: _CHANGED[field]})]
    fmt = p4
    if field == "e_floor":  # the floor matters where every term is below it: tiny
        # products (binary8p3 reaches 2**-17), a zero C and few alignment bits
        fmt = jaxwarp.define_format("binary8p3", exponent_bits=5, mantissa_bits=2,
                                    specials="p3109")
        a = jaxwarp.to_format(jnp.full((4, 24), 1.25 * 2.0**-11, jnp.float32), fmt)
        b = jaxwarp.to_format(jnp.full((24, 4), 2.0**-10, jnp.float32), fmt)
        c16 = jnp.zeros((4, 4), jnp.uint16)
        dps = [dp.replace(alignment_bits=3) for dp in dps]
    outs = []
    for dp in dps:
        c = c16 if dp.accumulator != "f32" else jnp.asarray(
            jaxwarp.from_format(c16, "t_e5m10_sat"))
        got = np.asarray(jaxwarp.fused_dot(a, b, c, a_format=fmt, datapath=dp))
        bits = got.view(np.uint32) if got.dtype == np.float32 else got
        want = _ref_fused_dot(np.asarray(a), np.asarray(b), np.asarray(c).view(
            bits.dtype), fmt, fmt, dp)
        np.testing.assert_array_equal(bits, want)
        outs.append(np.asarray(jaxwarp.from_format(got, dp.accumulator)))
    assert not np.array_equal(outs[0], outs[1]), field


def test_specials():
    p4 = _p4()
    one, inf, ninf, nan, zero = 0x40, 0x7F, 0xFF, 0x80, 0x00
    a = jnp.uint8([[one, one], [inf, one], [inf, zero], [inf, ninf], [nan, one],
                   [zero, inf], [0xC0, one]])
    b = jnp.uint8([[one, one], [one, zero]])
    c = jnp.zeros((7, 2), jnp.float32)
    d = np.asarray(jaxwarp.fused_dot(a, b, c, a_format=p4, datapath=jaxwarp.FusedDot()))
    two, f_one, f_inf, f_nan, f_m1 = 0x40000000, 0x3F800000, 0x7F800000, 0x7FFFFFFF, 0xBF800000
    np.testing.assert_array_equal(d.view(np.uint32), np.uint32(  # inf - inf, 0 * inf: NaN
        [[two, f_one], [f_inf, f_inf], [f_inf, f_inf], [f_nan, f_nan], [f_nan, f_nan],
         [f_inf, f_nan], [0, f_m1]]))  # -1 + 1: +0
    # A p3109 accumulator: its inf 0x7F, its NaN 0x80; an exact zero is +0.
    dp = jaxwarp.FusedDot(accumulator=p4, rounding="rn")
    d = np.asarray(jaxwarp.fused_dot(a, b, jnp.zeros((7, 2), jnp.uint8), a_format=p4,
                                     datapath=dp))
    np.testing.assert_array_equal(d, np.uint8(
        [[0x48, one], [inf, inf], [inf, inf], [nan, nan], [nan, nan], [inf, nan],
         [0, 0xC0]]))


def test_jit_vmap_batch():
    p4 = _p4()
    rng = np.random.default_rng(3)
    a, b = _random_codes(rng, (3, 2, 8), p4), _random_codes(rng, (8, 2), p4)
    c = jnp.zeros((2, 2), jnp.float32)
    dp = jaxwarp.FusedDot(block=8)
    eager = jaxwarp.fused_dot(a, b, c, a_format=p4, datapath=dp)  # batch dims broadcast
    jitted = jax.jit(lambda x: jaxwarp.fused_dot(x, b, c, a_format=p4, datapath=dp))(a)
    mapped = jax.vmap(lambda x: jaxwarp.fused_dot(x, b, c, a_format=p4, datapath=dp))(a)
    np.testing.assert_array_equal(np.asarray(jitted), np.asarray(eager))
    np.testing.assert_array_equal(np.asarray(mapped), np.asarray(eager))
    assert eager.shape == (3, 2, 2)
