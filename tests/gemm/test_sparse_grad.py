"""Gradients of the sparse tensor-core products.

``matmul(..., sparsity="2:4")``: A is 2:4 by contract, so its gradient is the dense
matmul's gradient of ``where(mask, a, 0)`` (the mask the forward pruned with) at the kept
positions and zero elsewhere; B's and C's are the dense ones: bit for bit, since the
backward products are the dense matmul's (same instruction, default tile, fp8 scaling).
``mma_sp_logical`` with a dense 2:4 A: the dense ``mma.sync``'s straight-through gradient
at the stored positions, bit for bit (the same fp32 einsums).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxwarp
from jaxwarp._src.gemm.matmul import to_operand
from jaxwarp._src.instructions import sparse


def _bits(x):
    x = np.asarray(x)
    return x.view({2: np.uint16, 4: np.uint32}[x.dtype.itemsize])


# Slow: each compiles the exact datapath for the sparse forward, the two backward
# products and the dense reference (about 10 s of CPU); the default run checks the
# gradient rule of the 2:4 marker (test_sparse_emulate.py).
@pytest.mark.slow
@pytest.mark.parametrize("fmt, instruction", [("f16", "mma_sync"), ("tf32", "wgmma"),
                                              ("e4m3", "mma_sync")])
def test_matmul_grad_is_the_masked_dense_grad(fmt, instruction):
    rng = np.random.default_rng(4)
    k = 64 if fmt == "e4m3" else 32
    a, b, c, w = (jnp.asarray(rng.standard_normal(s), jnp.float32)
                  for s in ((16, k), (k, 8), (16, 8), (16, 8)))
    kw = dict(operand_format=fmt, instruction=instruction)

    def loss(f, mask=None):
        def run(a, b, c):
            return jnp.sum(f(a if mask is None else jnp.where(mask, a, 0), b, c) * w)
        return jax.jit(jax.grad(run, argnums=(0, 1, 2)))

    got = loss(lambda a, b, c: jaxwarp.matmul(a, b, c, sparsity="2:4", **kw))(a, b, c)
    mask = sparse.kept(to_operand(a, fmt), 2 if fmt == "tf32" else 4)
    want = loss(lambda a, b, c: jaxwarp.matmul(a, b, c, **kw), mask)(a, b, c)
    assert not np.asarray(got[0])[~np.asarray(mask)].any()
    assert np.count_nonzero(np.asarray(got[0])) == np.asarray(mask).sum()
    for g, r in zip(got, want, strict=True):
        np.testing.assert_array_equal(_bits(g), _bits(r))


@pytest.mark.slow
@pytest.mark.parametrize("q", ["m16n8k16.row.col.f32.f16.f16.f32"])
def test_mma_sp_logical_grad_is_the_dense_grad(q):
    rng = np.random.default_rng(5)
    tf32 = "tf32" in q
    k = 8 if tf32 else 16
    dt = jnp.float32 if tf32 else jnp.float16
    a = jaxwarp.sparse.prune_2_4(jnp.asarray(rng.standard_normal((16, k)), dt),
                                 group=2 if tf32 else 4)
    b = jnp.asarray(rng.standard_normal((k, 8)), dt)
    c, w = (jnp.asarray(rng.standard_normal((16, 8)), jnp.float32) for _ in range(2))

    def grad(f):
        return jax.grad(lambda a, b, c: jnp.sum(f(q, a, b, c) * w), argnums=(0, 1, 2))(a, b, c)

    got = grad(jaxwarp.mma_sp_logical)
    want = grad(jaxwarp.mma_sync_ptx_logical)  # the dense instruction of the same k
    np.testing.assert_array_equal(_bits(got[0]), _bits(jnp.where(a != 0, want[0], 0)))
    for g, r in zip(got[1:], want[1:], strict=True):
        np.testing.assert_array_equal(_bits(g), _bits(r))
