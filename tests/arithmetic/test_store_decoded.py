"""The option ``arith_store_decoded``: storing the decoded operands (an XLA optimization barrier)
is a speed choice only; every instruction family and operand type gives the same bits
with it on, off and automatic, on operands drawn from every bit pattern."""

from __future__ import annotations

import functools
import zlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxwarp._src.arithmetic import datapath
from jaxwarp._src.gemm.matmul import matmul

CASES = [  # (instruction, a_format, b_format, (m, n, k), arch)
    ("wmma", "f16", "f16", (16, 16, 16), "sm_90"),
    ("wmma", "bf16", "bf16", (16, 16, 16), "sm_90"),
    ("wmma", "tf32", "tf32", (16, 16, 8), "sm_90"),
    ("mma_sync", "e4m3", "e5m2", (16, 8, 32), "sm_90"),
    ("wgmma", "f16", "f16", (64, 64, 16), "sm_90a"),
    ("wgmma", "e4m3", "e4m3", (64, 64, 32), "sm_90a"),
    ("wgmma", "bf16", "bf16", (64, 8, 32), "sm_90a"),  # a chain of two instructions
]


def _random(rng, shape, t):
    dt = datapath.STORAGE_DTYPE[t]
    u = {1: np.uint8, 2: np.uint16, 4: np.uint32}[dt.itemsize]
    bits = rng.integers(0, np.iinfo(u).max, shape, dtype=u, endpoint=True)
    if t in ("f16", "bf16", "tf32"):  # mostly finite values, some specials
        bits[..., ::7] &= u(~(1 << (dt.itemsize * 8 - 2)) & np.iinfo(u).max)
    return jax.lax.bitcast_convert_type(jnp.asarray(bits), dt)


@pytest.fixture
def store_mode(options):
    """Sets the option ``arith_store_decoded`` for the rest of the test (the exact
    model's and matmul's jitted products are keyed on the options: traced again)."""
    return lambda mode: options(arith_store_decoded=mode)


def _barriers(f, *args) -> int:
    """Optimization barriers in f's program (nested programs included)."""
    return str(jax.make_jaxpr(f)(*args)).count("optimization_barrier")


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[1]}x{c[2]}")
def test_same_bits_on_off_auto(case, store_mode):
    instr, at, bt, (m, n, k), arch = case
    rng = np.random.default_rng(zlib.crc32(repr(case).encode()))  # the same every run
    a, b = _random(rng, (6, m, k), at), _random(rng, (6, k, n), bt)
    c = jnp.asarray(rng.standard_normal((6, m, n)), jnp.float32)
    out, barriers = {}, {}
    for mode in ("off", "on", "auto"):
        store_mode(mode)
        f = functools.partial(
            datapath.mma, a_format=at, b_format=bt, c_format="f32", d_format="f32",
            instruction=instr, instruction_k=16 if (instr, at) == ("wgmma", "bf16") else k,
            arch=arch)
        barriers[mode] = _barriers(f, a, b, c)
        out[mode] = np.asarray(f(a, b, c)).view(np.uint32)
    assert barriers["on"] > barriers["off"]  # the setting took effect
    np.testing.assert_array_equal(out["on"], out["off"])
    np.testing.assert_array_equal(out["auto"], out["off"])


@pytest.mark.parametrize("fmt", ["f16", "bf16"])
def test_gemm_same_bits_on_off(fmt, store_mode, options):
    # XLA's k loop in the program, which the setting is about (on a GPU "auto" runs the
    # fused kernel; on the CPU, the shared executables, outside the program).
    options(gemm_fused_kernel="off", gemm_shared="off")
    rng = np.random.default_rng(5)
    a = jnp.asarray(rng.standard_normal((48, 64)), jnp.float32)
    b = jnp.asarray(rng.standard_normal((64, 32)), jnp.float32)
    out, barriers = {}, {}
    for mode in ("off", "on"):
        store_mode(mode)
        f = functools.partial(matmul, operand_format=fmt)
        barriers[mode] = _barriers(f, a, b)
        out[mode] = np.asarray(jax.jit(f)(a, b)).view(np.uint32)
    assert barriers["on"] > barriers["off"]  # the setting took effect
    np.testing.assert_array_equal(out["on"], out["off"])


def _shape(*s):
    return jax.ShapeDtypeStruct(s, jnp.float16)


@pytest.mark.parametrize("a, b, general, f16, want", [
    ((8, 16, 16), (8, 16, 16), True, False, True),      # tiles, bf16 / tf32: 16 uses
    ((8, 64, 16), (8, 16, 64), True, False, True),      # tiles, wgmma bf16: 64 uses
    ((8, 16, 32), (8, 32, 8), False, False, False),     # tiles, mma.sync fp8: 8 uses
    ((8, 16, 16), (8, 16, 8), False, True, True),       # tiles, mma.sync f16
    ((8, 64, 16), (8, 16, 64), False, False, True),     # tiles, wgmma fp8: 64 uses
    ((4096, 16), (16, 4096), False, False, True),       # a GEMM's k step (matmul), fp8
    ((4096, 16), (16, 4096), True, False, False),       # the same, bf16 / tf32
    ((4, 1, 16, 16), (1, 4, 16, 16), True, False, True),  # broadcast tiles: 64 uses
])
def test_rule(a, b, general, f16, want):
    c = _shape(*np.broadcast_shapes(a[:-2], b[:-2]), a[-2], b[-1])
    assert datapath._store_decoded(_shape(*a), _shape(*b), c, general, f16, "gpu") is want
    # On the CPU the fast path never stores; the general path does as on the GPU.
    want_cpu = want and general
    assert datapath._store_decoded(_shape(*a), _shape(*b), c, general, f16, "cpu") is want_cpu


def test_rule_thresholds_are_options(options):
    a, b = _shape(8, 16, 16), _shape(8, 16, 16)
    c = _shape(8, 16, 16)
    assert not datapath._store_decoded(a, b, c, False, False, "gpu")
    assert datapath._store_decoded(a, b, c, True, False, "gpu")
    options(arith_fast_store_reuse=16, arith_general_store_reuse_max=16)
    assert datapath._store_decoded(a, b, c, False, False, "gpu")
    assert not datapath._store_decoded(a, b, c, True, False, "gpu")
