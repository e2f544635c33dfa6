"""``jaxwarp.matmul(..., instruction="mfma")``: a GEMM as a chain of ``v_mfma_*`` blocks,
the same bits as ``mfma_logical`` chained over k by hand."""

import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import jaxwarp
from jaxwarp._src.gemm.mfma_gemm import GEMM_INSTRUCTIONS


@pytest.mark.parametrize("arch, fmt, dtype", [("gfx90a", "bf16", ml_dtypes.bfloat16),
                                              ("gfx942", "f16", np.float16)])
def test_gemm_is_the_chain_of_instructions(arch, fmt, dtype):
    rng = np.random.default_rng(1)
    M, K, N = 40, 20, 33  # padded to 64 x 24 x 64 for 32x32x8 blocks
    a = (rng.standard_normal((M, K)) * 2.0 ** rng.integers(-8, 8, (M, K))).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    c = rng.standard_normal((M, N)).astype(np.float32)
    got = np.asarray(jaxwarp.matmul(a, b, c, operand_format=fmt, instruction="mfma",
                                    arch=arch))
    suffix = GEMM_INSTRUCTIONS[{"gfx90a": "CDNA2", "gfx942": "CDNA3"}[arch]][fmt]
    ap = np.zeros((64, 24), dtype)
    bp = np.zeros((24, 64), dtype)
    ap[:M, :K], bp[:K, :N] = a.astype(dtype), b.astype(dtype)
    d = np.zeros((64, 64), np.float32)
    d[:M, :N] = c
    for i in (0, 32):
        for j in (0, 32):
            acc = d[i:i + 32, j:j + 32]
            for k in (0, 8, 16):
                acc = np.asarray(jaxwarp.mfma_logical(suffix, ap[i:i + 32, k:k + 8],
                                                      bp[k:k + 8, j:j + 32], acc, arch=arch))
            d[i:i + 32, j:j + 32] = acc
    np.testing.assert_array_equal(got.view(np.uint32), d[:M, :N].view(np.uint32))


def test_gemm_bad_arguments_list_what_is_allowed():
    a = jnp.ones((32, 8), jnp.float32)
    with pytest.raises(ValueError, match=r"operand_format='e4m3'.*allowed.*'e4m3fnuz'"):
        jaxwarp.matmul(a, a.T, operand_format="e4m3", instruction="mfma")
    with pytest.raises(ValueError, match=r"arch='sm_90'.*allowed.*gfx942"):
        jaxwarp.matmul(a, a.T, instruction="mfma", arch="sm_90")
    with pytest.raises(ValueError, match=r"operand_format='tf32'.*CDNA2.*allowed"):
        jaxwarp.matmul(a, a.T, operand_format="tf32", instruction="mfma", arch="gfx90a")
    with pytest.raises(ValueError, match=r"tile=.*instruction='mfma'"):
        jaxwarp.matmul(a, a.T, instruction="mfma", tile=(16, 16, 16))
