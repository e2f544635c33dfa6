"""The exact datapath's block forms (the option ``arith_block_form``) give the same bits."""

import jax.numpy as jnp
import numpy as np
import pytest

import jaxwarp
from jaxwarp._src.arithmetic import datapath

# (instruction, arch, a_format, b_format, c/d format, m, n, k): the general path (bf16,
# tf32), the fast path (f16, fp8 as f16 with k reordered), sm_80's model.
CASES = [
    ("wmma", "sm_90", "bf16", "bf16", "f32", 16, 16, 32),
    ("wmma", "sm_90", "tf32", "tf32", "f32", 16, 16, 16),
    ("mma_sync", "sm_90", "f16", "f16", "f16", 16, 8, 32),
    ("mma_sync", "sm_90", "e4m3", "e5m2", "f32", 16, 8, 64),
    ("wgmma", "sm_90a", "e4m3", "e4m3", "f32", 64, 8, 64),
    ("mma_sync", "sm_80", "bf16", "bf16", "f32", 16, 8, 32),
]


def _operands(fa, fb, cd, m, n, k, seed):
    rng = np.random.default_rng(seed)
    dt = {f: datapath.STORAGE_DTYPE[f] for f in (fa, fb, cd)}

    def draw(shape, fmt):
        x = rng.standard_normal(shape) * 2.0 ** rng.integers(-20, 20, shape)
        x[rng.random(shape) < 0.05] = 0.0
        x[rng.random(shape) < 0.01] = np.inf
        return jnp.asarray(x.astype(np.float32)).astype(dt[fmt])

    return draw((m, k), fa), draw((k, n), fb), draw((m, n), cd)


@pytest.mark.slow  # six exact models traced and compiled three times
@pytest.mark.parametrize("case", CASES, ids=lambda c: "_".join(map(str, c[:5])))
def test_block_forms_same_bits(case):
    instruction, arch, fa, fb, cd, m, n, k = case
    a, b, c = _operands(fa, fb, cd, m, n, k, seed=len(fa) + k)
    out = {}
    for form in ("unrolled", "reduce", "rolled"):
        with jaxwarp.config.override(arith_block_form=form):  # the exact model: traced again
            d = datapath.mma(a, b, c, a_format=fa, b_format=fb, c_format=cd, d_format=cd,
                             arch=arch, instruction=instruction)
        out[form] = np.asarray(d).view(np.uint16 if cd == "f16" else np.uint32)
    np.testing.assert_array_equal(out["reduce"], out["unrolled"])
    np.testing.assert_array_equal(out["rolled"], out["unrolled"])


@pytest.mark.slow  # two exact models traced and compiled three times
@pytest.mark.parametrize("fmt", ["bf16", "f16"])
def test_block_forms_same_bits_short_last_group(fmt):
    # block_k 12: a block of 12 products (a group of 8 and a short one of 4) and one of 4,
    # which the rolled form sums by a loop of its own.
    from jaxwarp._src.catalogue import arch

    dp = arch.datapath_for("sm_90", "wmma", fmt, 16).replace(block_k=12)
    a, b, c = _operands(fmt, fmt, "f32", 16, 16, 32, seed=12)
    out = {}
    for form in ("unrolled", "reduce", "rolled"):
        with jaxwarp.config.override(arith_block_form=form):
            d = datapath.mma(a, b, c, a_format=fmt, c_format="f32", d_format="f32",
                             datapath=dp)
        out[form] = np.asarray(d).view(np.uint32)
    np.testing.assert_array_equal(out["reduce"], out["unrolled"])
    np.testing.assert_array_equal(out["rolled"], out["unrolled"])
