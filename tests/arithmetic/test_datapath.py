"""Tests of the tensor-core arithmetic models against the H100 captures."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import load_capture
from jax.test_util import check_grads

from jaxwarp._src.arithmetic import datapath as M
from jaxwarp._src.arithmetic import datapath_f64
from jaxwarp._src.catalogue.arch import ARCHS
from jaxwarp._src.numerics import fma

FP = load_capture("mma_fp")
INT = load_capture("mma_int")


def _configs(data):
    return sorted({k.rsplit("/", 1)[0] for k in data.files if "/" in k})


_STORAGE = {"f16": np.float16, "bf16": jnp.bfloat16, "tf32": np.float32, "f32": np.float32,
            "f64": np.float64}


def _float_to_tf32(bits):
    """``__float_to_tf32``: round to nearest, ties away from zero (NaN/inf truncated)."""
    x = bits.astype(np.uint64)
    special = ((x >> 23) & 0xFF) == 0xFF
    return np.where(special, x & 0xFFFFE000, (x + 0x1000) & 0xFFFFE000).astype(np.uint32)


@pytest.mark.parametrize("cfg", _configs(FP))
def test_float_bit_exact(cfg):
    A, B, C, D = (FP[f"{cfg}/{x}"] for x in "ABCD")
    a_format, acc = cfg.split(".")[:2]
    c_format, d_format = acc[:3], acc[3:]
    if a_format == "tf32cvt":
        A, B, a_format = _float_to_tf32(A), _float_to_tf32(B), "tf32"
    with jax.enable_x64(a_format == "f64"):
        out = M.mma(A.view(_STORAGE[a_format]), B.view(_STORAGE[a_format]),
                    C.view(_STORAGE[c_format]), a_format=a_format, c_format=c_format,
                    d_format=d_format)
        np.testing.assert_array_equal(np.asarray(out).view(D.dtype), D)


@pytest.mark.parametrize("cfg", _configs(INT))
def test_int_bit_exact(cfg):
    A, B, C, D = (INT[f"{cfg}/{x}"] for x in "ABCD")
    a_format = cfg.split(".")[0]
    if a_format.startswith("b1"):
        out = M.bmma(A, B, C, op=a_format[2:])
    else:
        out = M.mma(A, B, C, a_format=a_format[:2], c_format="s32", d_format="s32",
                    satf=a_format.endswith("sat"))
    np.testing.assert_array_equal(np.asarray(out), D)


def _f16_inputs(seed=0, batch=(3,)):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((*batch, 16, 16)).astype(np.float16)
    b = rng.standard_normal((*batch, 16, 16)).astype(np.float16)
    c = rng.standard_normal((*batch, 16, 16)).astype(np.float32)
    return a, b, c


def test_fast_mode_close_to_exact():
    a, b, c = _f16_inputs()
    kw = dict(a_format="f16", c_format="f32", d_format="f32")
    exact = np.asarray(M.mma(a, b, c, **kw))
    fast = np.asarray(M.mma(a, b, c, mode="fast", **kw))
    want = a.astype(np.float64) @ b.astype(np.float64) + c
    np.testing.assert_allclose(fast, want, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(exact, fast, rtol=1e-6, atol=1e-6)
    # exact mode truncates: never farther from zero than the exact sum by more than an ulp
    assert fast.dtype == exact.dtype == np.float32


def test_exact_rounds_toward_zero_not_nearest():
    # 1 + 2**-24 * (sum of 16 tiny terms) is below fp32 precision: rz drops it.
    a = np.zeros((16, 16), np.float16)
    b = np.zeros((16, 16), np.float16)
    a[:, 0] = 1
    b[0, :] = 1
    a[:, 1] = np.float16(2.0**-12)
    b[1, :] = np.float16(2.0**-12 * 1.5)  # product 1.5 * 2**-24: rn would round up
    c = np.zeros((16, 16), np.float32)
    d = M.mma(a, b, c, a_format="f16", c_format="f32", d_format="f32")
    np.testing.assert_array_equal(np.asarray(d).view(np.uint32), np.float32(1).view(np.uint32))


@pytest.mark.parametrize("sign", [1, -1], ids=["pos", "neg"])
def test_exact_sum_past_int32(sign):
    # 16 products of (2 - 2**-10)**2 and C just below 2: the aligned sum of terms on the
    # 2**-25 grid is 2212495868 units, past 2**31 (the model must not wrap in int32).
    s = np.float16(2 - 2.0**-10)
    a = np.full((16, 16), s * sign, np.float16)
    b = np.full((16, 16), s, np.float16)
    c = np.full((16, 16), np.float32(2 - 2.0**-23) * sign, np.float32)
    units = 16 * ((2047 * 2047) << 5) + ((1 << 24) - 1) * 4
    assert units > 2**31
    want = np.float32(sign * ((units >> 8) << 8) * 2.0**-25)  # fp32, toward zero
    for c_format, cc in (("f32", c), ("f16", c.astype(np.float16))):
        d = M.mma(a, b, cc, a_format="f16", c_format=c_format, d_format="f32")
        if c_format == "f32":
            np.testing.assert_array_equal(np.asarray(d).view(np.uint32), want.view(np.uint32))
        else:  # C rounds to 2 in fp16: units 16 * (2047**2 << 5) + 2 * 2**25
            u16 = 16 * ((2047 * 2047) << 5) + (2 << 25)
            w16 = np.float32(sign * ((u16 >> 8) << 8) * 2.0**-25)
            np.testing.assert_array_equal(np.asarray(d).view(np.uint32), w16.view(np.uint32))


def test_batch_broadcast_jit_vmap():
    a, b, c = _f16_inputs(batch=(4,))
    kw = dict(a_format="f16", c_format="f32", d_format="f32")
    ref = np.stack([np.asarray(M.mma(a[i], b[i], c[i], **kw)) for i in range(4)])
    out = jax.jit(lambda a, b, c: M.mma(a, b, c, **kw))(a, b, c)
    np.testing.assert_array_equal(np.asarray(out), ref)
    out = jax.vmap(lambda a, b, c: M.mma(a, b, c, **kw))(a, b, c)
    np.testing.assert_array_equal(np.asarray(out), ref)
    # a shared B broadcasts against batched A and C
    out = M.mma(a, b[0], c, **kw)
    ref0 = np.stack([np.asarray(M.mma(a[i], b[0], c[i], **kw)) for i in range(4)])
    np.testing.assert_array_equal(np.asarray(out), ref0)


def test_grad_fast_mode_check_grads():
    rng = np.random.default_rng(1)
    with jax.enable_x64(True):
        a = jnp.asarray(rng.standard_normal((2, 8, 4)))
        b = jnp.asarray(rng.standard_normal((2, 4, 8)))
        c = jnp.asarray(rng.standard_normal((2, 8, 8)))
        f = lambda a, b, c: M.mma(a, b, c, a_format="f64", c_format="f64",  # noqa: E731
                                  d_format="f64", mode="fast")
        check_grads(f, (a, b, c), order=1, modes=("rev",))  # custom_vjp: reverse only


def test_grad_exact_is_straight_through():
    a, b, c = _f16_inputs(batch=(2,))
    g = np.random.default_rng(2).standard_normal((2, 16, 16)).astype(np.float32)
    f = lambda a, b, c: M.mma(a, b, c, a_format="f16", c_format="f32", d_format="f32")  # noqa: E731
    _, vjp = jax.vjp(f, a, b, c)
    da, db, dc = vjp(jnp.asarray(g))
    bt = np.swapaxes(b.astype(np.float32), -1, -2)
    at = np.swapaxes(a.astype(np.float32), -1, -2)
    np.testing.assert_allclose(np.asarray(da, np.float32), (g @ bt).astype(np.float16), rtol=1e-3)
    np.testing.assert_allclose(np.asarray(db, np.float32), (at @ g).astype(np.float16), rtol=1e-3)
    np.testing.assert_array_equal(np.asarray(dc), g)
    assert da.dtype == jnp.float16 and dc.dtype == jnp.float32


def test_int_satf_clamps():
    a = np.full((16, 16), 127, np.int8)
    b = np.full((16, 16), 127, np.int8)
    c = np.full((16, 16), 2**31 - 100, np.int32)
    kw = dict(a_format="s8", c_format="s32", d_format="s32")
    np.testing.assert_array_equal(np.asarray(M.mma(a, b, c, satf=True, **kw)), 2**31 - 1)
    wrap = (2**31 - 100 + 16 * 127 * 127) - 2**32
    np.testing.assert_array_equal(np.asarray(M.mma(a, b, c, **kw)), wrap)


def test_float_satf_rule():
    a = np.zeros((16, 16), np.float16)
    b = np.zeros((16, 16), np.float16)
    c = np.zeros((16, 16), np.float32)
    c[0, 0], c[0, 1], c[0, 2] = np.inf, -np.inf, np.nan
    d = np.asarray(M.mma(a, b, c, a_format="f16", c_format="f32", d_format="f32", satf=True))
    big = np.finfo(np.float32).max
    assert d[0, 0] == big and d[0, 1] == -big and d[0, 2] == 0


def test_f64_needs_x64():
    x = np.zeros((8, 4), np.float32)
    with pytest.raises(RuntimeError, match="64-bit"):
        M.mma(x, x.T, np.zeros((8, 8), np.float32), a_format="f64", c_format="f64", d_format="f64")


def test_arch_table():
    assert ARCHS["sm_90"].verified == ARCHS["sm_90a"].verified == "hardware"
    assert all(ARCHS[t].verified == "MMA-Sim 2.1.1"
               for t in ("sm_70", "sm_75", "sm_80", "sm_86", "sm_89", "sm_100", "sm_120"))
    a, b, c = _f16_inputs(batch=())
    for arch in ARCHS:
        d = M.mma(a, b, c, a_format="f16", c_format="f32", d_format="f32", arch=arch)
        np.testing.assert_allclose(np.asarray(d), a.astype(np.float32) @ b.astype(np.float32)
                                   + c, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kwargs, exc, match", [
    (dict(a_format="f8", c_format="f32", d_format="f32"), ValueError, "a_format"),
    (dict(a_format="f16", c_format="f8", d_format="f32"), ValueError, "c_format"),
    (dict(a_format="f16", c_format="f32", d_format="bf16"), ValueError, "d_format"),
    (dict(a_format="f16", c_format="s32", d_format="s32"), ValueError, "valid"),
    (dict(a_format="f16", c_format="f32", d_format="f32", mode="slow"), ValueError, "mode"),
    (dict(a_format="f16", c_format="f32", d_format="f32", arch="sm_72"), ValueError, "arch"),
    (dict(a_format="f16", c_format="f32", d_format="f32", satf=1), TypeError, "satf"),
    (dict(a_format="bf16", c_format="f32", d_format="f32"), TypeError, "a must have dtype"),
])
def test_bad_static_args(kwargs, exc, match):
    a, b, c = _f16_inputs(batch=())
    with pytest.raises(exc, match=match):
        M.mma(a, b, c, **kwargs)


def test_bad_shapes_and_op():
    a, b, c = _f16_inputs(batch=())
    with pytest.raises(ValueError, match="k differs"):
        M.mma(a[:, :8], b, c, a_format="f16", c_format="f32", d_format="f32")
    with pytest.raises(ValueError, match="c must be"):
        M.mma(a, b, c[:8], a_format="f16", c_format="f32", d_format="f32")
    bits = np.zeros((8, 128), np.uint8)
    with pytest.raises(ValueError, match="op"):
        M.bmma(bits, bits.T, np.zeros((8, 8), np.int32), op="or")


# --------------------------------------------------------------------------------------
# Architecture as data: targets, instruction k, and every Datapath field.

SM90 = ARCHS["sm_90"]
HMMA = SM90.datapath("hmma")


def _bits(x):
    x = np.asarray(x)
    return x.view({2: np.uint16, 4: np.uint32}[x.dtype.itemsize])


def _run(a, b, c, dp, **kw):
    kw = {"a_format": "f16", "c_format": "f32", "d_format": "f32", **kw}
    return _bits(M.mma(a, b, c, datapath=dp, **kw))


def _tile(a_col, b_row, dtype=np.float16, k=16, m=1, n=1):
    a = np.zeros((m, k), dtype)
    b = np.zeros((k, n), dtype)
    a[0, :len(a_col)] = a_col
    b[:len(b_row), 0] = b_row
    return a, b


def _random_f16(seed=3):
    rng = np.random.default_rng(seed)
    a = (rng.standard_normal((16, 16)) * 2.0 ** rng.integers(-6, 6, (16, 16))).astype(np.float16)
    b = rng.standard_normal((16, 16)).astype(np.float16)
    return a, b, rng.standard_normal((16, 16)).astype(np.float32)


def _e4m3(x):
    return np.asarray(x, np.float32).astype(jnp.float8_e4m3fn)


def _other(value, choices):
    """The choice of ``choices`` that is not ``value``."""
    return next(c for c in choices if c != value)


def _case(field):
    """(inputs, mma kwargs, base datapath, flipped value) showing ``field`` matters."""
    a, b, c = _random_f16()
    z32 = np.zeros((1, 1), np.float32)
    rnd = ((a, b, c), {})
    if field in ("block_k", "F", "block_round", "sum_mbits", "c_mode"):
        new = {"block_k": 8, "F": 20, "block_round": "rn", "sum_mbits": 13, "c_mode": "end"}
        return (*rnd, HMMA, new[field])
    if field == "f16_round":
        return (a, b, c.astype(np.float16)), {"c_format": "f16", "d_format": "f16"}, HMMA, "rz"
    if field == "align":  # 1.5 * 1.5 has nominal exponent 0 but lies in [2, 4)
        a1, b1 = _tile([1.5, -1.5, 2**-12], [1.5, 1.5, 2**-13])
        return (a1, b1, z32), {}, HMMA, "normalised"
    if field == "sub_exp":  # a subnormal times 2**15 is the largest product
        a1, b1 = _tile([3 * 2**-24, 1.5 * 2**-10], [2**15, 2**-14])
        return (a1, b1, z32), {}, HMMA, "lead"
    if field == "c_sub_exp":  # a subnormal fp32 C is the largest term (bf16 products)
        a1, b1 = _tile([(1 + 2**-7) * 2**-75], [-(2**-74)], jnp.bfloat16)
        c1 = np.array([[3 * 2**-149]], np.float32)
        return (a1, b1, c1), {"a_format": "bf16"}, HMMA, _other(HMMA.c_sub_exp, ("emin", "lead"))
    if field == "e_floor":  # all terms below 2**-133: -2**-159 counts only without a floor
        a1, b1 = _tile([2**-67, -(2**-80)], [2**-67, 2**-79], jnp.bfloat16)
        return (a1, b1, z32), {"a_format": "bf16"}, HMMA, None if HMMA.e_floor else 7
    if field == "trunc":  # a negative product loses bits below 2**-25
        a1, b1 = _tile([1, -(1 + 2**-10) * 2**-10], [1, 2**-10])
        return (a1, b1, z32), {}, HMMA, "floor"
    if field == "f16_out":  # 1 + 2**-11 + 2**-24: a tie only after fp32 truncation
        a1, b1 = _tile([1, 2**-11, 2**-12], [1, 1, 2**-12])
        return ((a1, b1, np.zeros((1, 1), np.float16)), {"c_format": "f16", "d_format": "f16"},
                HMMA, "via_f32")
    if field == "f16_zero":  # -2**-28 rounds to -0 in f16
        a1, b1 = _tile([-(2**-14)], [2**-14])
        return ((a1, b1, np.zeros((1, 1), np.float16)), {"c_format": "f16", "d_format": "f16"},
                HMMA, "keep")
    if field == "f32_zero":  # -2**-150 (on the term grid) truncates to -0 in fp32
        a1, b1 = _tile([-(2**-75)], [2**-75], jnp.bfloat16)
        return (a1, b1, z32), {"a_format": "bf16"}, HMMA, "keep"
    if field == "zero":  # every term a zero of negative sign
        a1, b1 = _tile([-0.0] * 16, [1.0] * 16)
        return (a1, b1, -z32), {}, HMMA.replace(f32_zero="keep"), "ieee"
    if field == "k_split":  # k % 4 order decides which products share a block
        rng = np.random.default_rng(5)
        a8 = _e4m3(rng.standard_normal((16, 32)) * 2.0 ** rng.integers(-8, 8, (16, 32)))
        b8 = _e4m3(rng.standard_normal((32, 8)))
        return ((a8, b8, np.zeros((16, 8), np.float32)),
                {"a_format": "e4m3", "instruction": "mma_sync", "arch": "sm_90"},
                SM90.datapath("mma_sync_fp8_k32"), "contig")
    if field == "operand_via":  # an e4m3 subnormal aligns as 2**-6, or as f16 2**-9
        a8, b8 = _tile([2**-9, 2**-6], [1.0, 2**-15], np.float32, k=32)
        return ((_e4m3(a8), b8.astype(jnp.float8_e5m2), z32),
                {"a_format": "e4m3", "b_format": "e5m2", "instruction": "wgmma", "arch": "sm_90a"},
                SM90.datapath("wgmma_fp8"), "f16")
    if field == "block_out":  # 1 + 2**-11 is a tie in f16 (to 1), exact in fp32
        a1, b1 = _tile([1, 2**-11] + [0] * 6 + [2**-11], [1, 1] + [0] * 6 + [1])
        return ((a1, b1, np.zeros((1, 1), np.float16)),
                {"c_format": "f16", "d_format": "f16", "instruction": "mma_sync"},
                ARCHS["sm_80"].datapath("hmma"), "f32")
    if field in ("nan_f32", "nan_f16"):
        a1, b1 = _tile([np.nan], [1.0])
        kw = {} if field == "nan_f32" else {"c_format": "f16", "d_format": "f16"}
        c1 = z32 if field == "nan_f32" else np.zeros((1, 1), np.float16)
        return (a1, b1, c1), kw, HMMA, 0x7FC00000 if field == "nan_f32" else 0x7E00
    raise AssertionError(field)


@pytest.mark.parametrize("field", [f.name for f in dataclasses.fields(M.Datapath)])
def test_every_datapath_field_changes_bits(field):
    (a, b, c), kw, base, new = _case(field)
    assert getattr(base, field) != new
    d0 = _run(a, b, c, base, **kw)
    d1 = _run(a, b, c, base.replace(**{field: new}), **kw)
    assert (d0 != d1).any(), f"flipping {field} to {new!r} changed no bit"


def test_c_sub_exp_emin_c():
    """An f16 subnormal C of an fp32 D aligns at 2**-14 ("emin_c", MMA-Sim's Volta) or at
    its own leading bit ("emin" of fp32 leaves it): the product's bit 2**-40 is cut on
    the grid of 2**(-14 - 23) only."""
    a1, b1 = _tile([(1 + 2**-10) * 2**-10], [(1 + 2**-10) * 2**-10], k=4)
    c1 = np.array([[2**-20]], np.float16)
    kw = dict(c_format="f16", d_format="f32", instruction="mma_sync", instruction_k=4)
    base = ARCHS["sm_70"].datapath("mma_sync_m8n8k4_f16")
    assert base.c_sub_exp == "emin_c"
    d0 = _run(a1, b1, c1, base, **kw)
    d1 = _run(a1, b1, c1, base.replace(c_sub_exp="emin"), **kw)
    assert d0[0, 0] != d1[0, 0]
    assert d1[0, 0] == np.float32(2**-20 + (1 + 2**-10) ** 2 * 2**-20).view(np.uint32)


# Slow: c_mode changing bits is checked by default by test_every_datapath_field_changes_bits.
@pytest.mark.slow
def test_c_mode_ffma_differs():
    a, b, c = _random_f16()
    d0 = _run(a, b, c, HMMA)
    d1 = _run(a, b, c, HMMA.replace(c_mode="ffma"))
    assert (d0 != d1).any()


def test_datapath_validates_fields():
    with pytest.raises(ValueError, match="c_mode"):
        M.Datapath(c_mode="late")
    with pytest.raises(ValueError, match="block_k"):
        M.Datapath(block_k=0)


@pytest.mark.parametrize("kw, match", [
    (dict(instruction="wgmma"), "sm_90a"),
    (dict(a_format="bf16", arch="sm_75"), "sm_80"),
    (dict(a_format="e4m3", instruction="mma_sync", arch="sm_80"), "sm_89"),
    (dict(a_format="e2m1", instruction="mma_sync", arch="sm_120"), "sm_120a"),
    (dict(a_format="e4m3"), "wmma"),
    (dict(instruction="dmma"), "instruction"),
    (dict(arch="sm_72"), "arch"),
    (dict(instruction="mma_sync", instruction_k=32), "instruction_k"),
    (dict(a_format="e4m3", b_format="f16", instruction="mma_sync"), "mixed"),
])
def test_target_and_instruction_errors(kw, match):
    a_format = kw.get("a_format", "f16")
    b_format = kw.get("b_format", a_format)
    a = np.zeros((16, 32), M.STORAGE_DTYPE[a_format])
    b = np.zeros((32, 8), M.STORAGE_DTYPE[b_format])
    kw = {"a_format": "f16", "c_format": "f32", "d_format": "f32", **kw}
    with pytest.raises(ValueError, match=match):
        M.mma(a, b, np.zeros((16, 8), np.float32), **kw)


def test_k_must_be_whole_instructions():
    x = np.zeros((16, 24), np.float16)
    with pytest.raises(ValueError, match="multiple"):
        M.mma(x, x.T, np.zeros((16, 16), np.float32), a_format="f16", c_format="f32",
              d_format="f32")
    x = np.zeros((8, 8), np.float16)
    with pytest.raises(ValueError, match="c_format"):
        M.mma(x, x.T, np.zeros((8, 8), np.float16), a_format="f16", c_format="f16",
              d_format="f32", instruction="mma_sync", instruction_k=4)


def test_chain_is_instruction_after_instruction():
    a, b, c = _random_f16()
    a2 = np.concatenate([a, a[:, ::-1]], axis=1)
    b2 = np.concatenate([b, b[::-1]], axis=0)
    for c_format in ("f32", "f16"):
        cc = c.astype(M.STORAGE_DTYPE[c_format])
        kw = dict(a_format="f16", c_format=c_format, d_format=c_format, instruction="mma_sync")
        d1 = M.mma(a, b, cc, **kw)
        d2 = M.mma(a[:, ::-1], b[::-1], d1, **kw)
        np.testing.assert_array_equal(_bits(M.mma(a2, b2, cc, **kw)), _bits(d2))


def test_tf32_instruction_k_selects_the_datapath():
    rng = np.random.default_rng(7)
    a = (rng.standard_normal((16, 8)) * 2.0 ** rng.integers(-12, 12, (16, 8))).astype(np.float32)
    b = rng.standard_normal((8, 8)).astype(np.float32)
    c = np.zeros((16, 8), np.float32)
    kw = dict(a_format="tf32", c_format="f32", d_format="f32", instruction="mma_sync")
    k4 = _bits(M.mma(a, b, c, instruction_k=4, **kw))
    k8 = _bits(M.mma(a, b, c, instruction_k=8, **kw))
    assert (k4 != k8).any()
    np.testing.assert_array_equal(k4, _bits(M.mma(a, b, c, a_format="tf32", c_format="f32",
                                                  d_format="f32")))  # WMMA k8 = two k4


def test_fp8_fast_mode_and_mixed_types():
    rng = np.random.default_rng(0)
    a = _e4m3(rng.standard_normal((16, 32)))
    b = rng.standard_normal((32, 8)).astype(np.float32).astype(jnp.float8_e5m2)
    c = np.zeros((16, 8), np.float32)
    kw = dict(a_format="e4m3", b_format="e5m2", c_format="f32", d_format="f32",
              instruction="mma_sync")
    exact = np.asarray(M.mma(a, b, c, **kw))
    fast = np.asarray(M.mma(a, b, c, mode="fast", **kw))
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(fast, want, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(exact, want, rtol=1e-5, atol=1e-5)


# Slow: by default test_float_bit_exact checks the integer emulation against the H100 (the
# captures mix specials in), test_f64_native_chain_against_hardware the native chain.
@pytest.mark.slow
@pytest.mark.parametrize("special", [None, np.nan, np.inf, 1e-310, 1e300])
def test_f64_native_chain_equals_integer_chain(special):
    # The f64 chain runs on native float64 operations when every element is in their exact
    # range and on the integer emulation otherwise (one special element sends the whole
    # call there); both give the same bits, eagerly, jitted and under vmap.
    rng = np.random.default_rng(5)
    a = rng.standard_normal((6, 8, 4)) * 2.0 ** rng.integers(-40, 40, (6, 8, 4))
    b = rng.standard_normal((6, 4, 8)) * 2.0 ** rng.integers(-40, 40, (6, 4, 8))
    c = -np.einsum("bmk,bkn->bmn", a, b) * (1 + 2.0 ** -rng.integers(1, 50, (6, 8, 8)))
    if special is not None:
        a[4, 3, 2] = special
    with jax.enable_x64(True):
        want = np.asarray(datapath_f64._f64_chain_soft(jnp.asarray(a), jnp.asarray(b),
                                                       jnp.asarray(c)))
        kw = dict(a_format="f64", c_format="f64", d_format="f64")
        for got in (M.mma(a, b, c, **kw),
                    jax.jit(lambda a, b, c: M.mma(a, b, c, **kw))(a, b, c),
                    jax.vmap(lambda a, b, c: M.mma(a, b, c, **kw))(a, b, c)):
            np.testing.assert_array_equal(np.asarray(got).view(np.uint64),
                                          want.view(np.uint64))


def _native_range_tiles(A, B, C):
    """Indices of the tiles whose operands are all in fma64_native's range."""
    with jax.enable_x64(True):
        ok = [np.asarray(f(jnp.asarray(x.view(np.float64)))).reshape(len(x), -1).all(1)
              for f, x in ((fma.native_operand_ok, A), (fma.native_operand_ok, B),
                           (fma.native_acc_ok, C))]
    return np.nonzero(ok[0] & ok[1] & ok[2])[0]


@pytest.mark.parametrize("cfg", [c for c in _configs(FP) if c.startswith("f64")])
def test_f64_native_chain_against_hardware(cfg):
    # The captures mix specials into most batches (which take the integer emulation);
    # here the tiles in the native range alone, through the native chain, against the H100.
    A, B, C, D = (FP[f"{cfg}/{x}"] for x in "ABCD")
    idx = _native_range_tiles(A, B, C)
    assert idx.size >= 5
    with jax.enable_x64(True):
        acc, ok = jax.jit(datapath_f64._f64_chain_native)(
            *(jnp.asarray(x[idx].view(np.float64)) for x in (A, B, C)))
        assert bool(ok)
        np.testing.assert_array_equal(np.asarray(acc).view(np.uint64), D[idx].view(np.uint64))


# Slow: the bits under vmap are checked by default by test_f64_native_chain_equals_integer_chain.
@pytest.mark.slow
def test_f64_vmap_keeps_one_branch():
    # Under vmap the whole-call choice between the native chain and the integer emulation
    # stays a conditional (a batched predicate would make XLA compute both), with the
    # bits of the unbatched calls, for any in_axes and nested vmaps.
    rng = np.random.default_rng(8)
    a = rng.standard_normal((3, 2, 8, 4))
    b = rng.standard_normal((2, 4, 8))
    c = rng.standard_normal((3, 2, 8, 8))
    a[2, 1, 0, 0] = np.inf  # one call of the batch takes the integer emulation
    kw = dict(a_format="f64", c_format="f64", d_format="f64")
    with jax.enable_x64(True):
        f = jax.vmap(lambda a, c: M.mma(a, b, c, **kw))
        want = np.stack([np.asarray(M.mma(a[i], b, c[i], **kw)) for i in range(3)])
        np.testing.assert_array_equal(np.asarray(f(a, c)).view(np.uint64), want.view(np.uint64))
        g = jax.vmap(jax.vmap(lambda a, b, c: M.mma(a, b, c, **kw), in_axes=(0, 0, 0)),
                     in_axes=(0, None, 0))
        np.testing.assert_array_equal(np.asarray(g(a, b, c)).view(np.uint64),
                                      want.view(np.uint64))
        assert "conditional" in jax.jit(f).lower(a, c).compile().as_text()



def test_e8_operand_decoding_equals_softfloat_decode():
    # decode_operand's short decoding of bf16 / tf32 (_decode_e8) against softfloat.decode's
    # fields: every bf16 pattern; tf32 words with every sign / exponent / 7 high fraction
    # bits, both values of the 3 low kept ones, and noise in the 13 ignored bits.
    from jaxwarp._src.arithmetic import datapath as B
    from jaxwarp._src.numerics import softfloat

    hi = np.arange(1 << 16, dtype=np.uint32)
    tf32 = (hi << 16) | (hi * 2654435761 & 0x1FFF)
    for fmt, bits in (("bf16", hi), ("tf32", np.concatenate([tf32, tf32 ^ 0xE000]))):
        @jax.jit
        def both(bits, fmt=fmt):
            neg, lsb, sig, lead, inf, nan = softfloat.decode(bits, fmt, True)
            want = (neg, jnp.where(nan, jnp.float32(jnp.nan), jnp.where(
                inf, jnp.float32(jnp.inf), sig.astype(jnp.float32))),
                jnp.where(sig != 0, lead, -1000))
            return B._decode_e8(bits, fmt), want

        got, want = both(jnp.asarray(bits))
        for g, w in zip(got, want, strict=True):
            g, w = np.asarray(g), np.asarray(w)
            np.testing.assert_array_equal(g.view(f"u{g.itemsize}"), w.view(f"u{w.itemsize}"))


def test_general_path_same_bits_with_x64():
    # The decoded operands' int32 arithmetic must not pick up int64 under x64 (the
    # conformance runner turns it on).
    rng = np.random.default_rng(3)
    a = jnp.asarray(rng.standard_normal((16, 16)).astype(np.float32)).astype(jnp.bfloat16)
    c = jnp.asarray(rng.standard_normal((16, 16)).astype(np.float32))
    kw = dict(a_format="bf16", c_format="f32", d_format="f32")
    want = np.asarray(M.mma(a, a, c, **kw)).view(np.uint32)
    with jax.enable_x64(True):
        got = np.asarray(M.mma(a, a, c, **kw)).view(np.uint32)
    np.testing.assert_array_equal(got, want)
