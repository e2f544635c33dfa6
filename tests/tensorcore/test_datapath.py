"""Tests of the tensor-core arithmetic models against the H100 captures."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import load_capture
from jax.test_util import check_grads

from jaxwarp._src.tensorcore import datapath as M

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
    a_type, acc = cfg.split(".")[:2]
    c_type, d_type = acc[:3], acc[3:]
    if a_type == "tf32cvt":
        A, B, a_type = _float_to_tf32(A), _float_to_tf32(B), "tf32"
    with jax.enable_x64(a_type == "f64"):
        out = M.mma(A.view(_STORAGE[a_type]), B.view(_STORAGE[a_type]),
                    C.view(_STORAGE[c_type]), a_type=a_type, c_type=c_type, d_type=d_type)
        np.testing.assert_array_equal(np.asarray(out).view(D.dtype), D)


@pytest.mark.parametrize("cfg", _configs(INT))
def test_int_bit_exact(cfg):
    A, B, C, D = (INT[f"{cfg}/{x}"] for x in "ABCD")
    a_type = cfg.split(".")[0]
    if a_type.startswith("b1"):
        out = M.bmma(A, B, C, op=a_type[2:])
    else:
        out = M.mma(A, B, C, a_type=a_type[:2], c_type="s32", d_type="s32",
                    satf=a_type.endswith("sat"))
    np.testing.assert_array_equal(np.asarray(out), D)


def _f16_inputs(seed=0, batch=(3,)):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((*batch, 16, 16)).astype(np.float16)
    b = rng.standard_normal((*batch, 16, 16)).astype(np.float16)
    c = rng.standard_normal((*batch, 16, 16)).astype(np.float32)
    return a, b, c


def test_fast_mode_close_to_exact():
    a, b, c = _f16_inputs()
    kw = dict(a_type="f16", c_type="f32", d_type="f32")
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
    d = M.mma(a, b, c, a_type="f16", c_type="f32", d_type="f32")
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
    for c_type, cc in (("f32", c), ("f16", c.astype(np.float16))):
        d = M.mma(a, b, cc, a_type="f16", c_type=c_type, d_type="f32")
        if c_type == "f32":
            np.testing.assert_array_equal(np.asarray(d).view(np.uint32), want.view(np.uint32))
        else:  # C rounds to 2 in fp16: units 16 * (2047**2 << 5) + 2 * 2**25
            u16 = 16 * ((2047 * 2047) << 5) + (2 << 25)
            w16 = np.float32(sign * ((u16 >> 8) << 8) * 2.0**-25)
            np.testing.assert_array_equal(np.asarray(d).view(np.uint32), w16.view(np.uint32))


def test_batch_broadcast_jit_vmap():
    a, b, c = _f16_inputs(batch=(4,))
    kw = dict(a_type="f16", c_type="f32", d_type="f32")
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
        f = lambda a, b, c: M.mma(a, b, c, a_type="f64", c_type="f64",  # noqa: E731
                                  d_type="f64", mode="fast")
        check_grads(f, (a, b, c), order=1, modes=("rev",))  # custom_vjp: reverse only


def test_grad_exact_is_straight_through():
    a, b, c = _f16_inputs(batch=(2,))
    g = np.random.default_rng(2).standard_normal((2, 16, 16)).astype(np.float32)
    f = lambda a, b, c: M.mma(a, b, c, a_type="f16", c_type="f32", d_type="f32")  # noqa: E731
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
    kw = dict(a_type="s8", c_type="s32", d_type="s32")
    np.testing.assert_array_equal(np.asarray(M.mma(a, b, c, satf=True, **kw)), 2**31 - 1)
    wrap = (2**31 - 100 + 16 * 127 * 127) - 2**32
    np.testing.assert_array_equal(np.asarray(M.mma(a, b, c, **kw)), wrap)


def test_float_satf_rule():
    a = np.zeros((16, 16), np.float16)
    b = np.zeros((16, 16), np.float16)
    c = np.zeros((16, 16), np.float32)
    c[0, 0], c[0, 1], c[0, 2] = np.inf, -np.inf, np.nan
    d = np.asarray(M.mma(a, b, c, a_type="f16", c_type="f32", d_type="f32", satf=True))
    big = np.finfo(np.float32).max
    assert d[0, 0] == big and d[0, 1] == -big and d[0, 2] == 0


def test_f64_needs_x64():
    x = np.zeros((8, 4), np.float32)
    with pytest.raises(RuntimeError, match="64-bit"):
        M.mma(x, x.T, np.zeros((8, 8), np.float32), a_type="f64", c_type="f64", d_type="f64")


def test_arch_table():
    assert M.ARCHS["sm_90"].verified
    assert not M.ARCHS["sm_80"].verified and not M.ARCHS["sm_70"].verified
    a, b, c = _f16_inputs(batch=())
    for arch in M.ARCHS:
        d = M.mma(a, b, c, a_type="f16", c_type="f32", d_type="f32", arch=arch)
        np.testing.assert_allclose(np.asarray(d), a.astype(np.float32) @ b.astype(np.float32)
                                   + c, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kwargs, exc, match", [
    (dict(a_type="f8", c_type="f32", d_type="f32"), ValueError, "a_type"),
    (dict(a_type="f16", c_type="f8", d_type="f32"), ValueError, "c_type"),
    (dict(a_type="f16", c_type="f32", d_type="bf16"), ValueError, "d_type"),
    (dict(a_type="f16", c_type="s32", d_type="s32"), ValueError, "valid"),
    (dict(a_type="f16", c_type="f32", d_type="f32", mode="slow"), ValueError, "mode"),
    (dict(a_type="f16", c_type="f32", d_type="f32", arch="sm_100"), ValueError, "arch"),
    (dict(a_type="f16", c_type="f32", d_type="f32", satf=1), TypeError, "satf"),
    (dict(a_type="bf16", c_type="f32", d_type="f32"), TypeError, "a must have dtype"),
])
def test_bad_static_args(kwargs, exc, match):
    a, b, c = _f16_inputs(batch=())
    with pytest.raises(exc, match=match):
        M.mma(a, b, c, **kwargs)


def test_bad_shapes_and_op():
    a, b, c = _f16_inputs(batch=())
    with pytest.raises(ValueError, match="k differs"):
        M.mma(a[:, :8], b, c, a_type="f16", c_type="f32", d_type="f32")
    with pytest.raises(ValueError, match="c must be"):
        M.mma(a, b, c[:8], a_type="f16", c_type="f32", d_type="f32")
    bits = np.zeros((8, 128), np.uint8)
    with pytest.raises(ValueError, match="op"):
        M.bmma(bits, bits.T, np.zeros((8, 8), np.int32), op="or")
