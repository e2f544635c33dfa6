"""A sparse product is not, bit for bit, the dense product of the same pruned matrix: a
block of the sparse datapath sums the products of 16 *stored* elements, which span 32 k of
the dense matrix, where the dense instruction chains two blocks of 16 k (docs/sparse.md)."""

import jax.numpy as jnp
import numpy as np

import jaxwarp


def _operands():
    # Row 0 of A keeps two of each four k (2:4). Products: 1 at k = 0, then 2**-24 and
    # 2**-25 in each half of K = 32.
    a = np.zeros((16, 32), np.float32)
    b = np.zeros((32, 8), np.float32)
    a[0, [0, 1, 4, 16, 20]] = [1.0, 2.0**-12, 2.0**-12, 2.0**-12, 2.0**-12]
    b[[0, 1, 4, 16, 20], 0] = [1.0, 2.0**-12, 2.0**-13, 2.0**-12, 2.0**-13]
    return jnp.asarray(a), jnp.asarray(b)


def test_sparse_blocks_span_twice_the_dense_k():
    a, b = _operands()
    assert np.array_equal(jaxwarp.sparse.prune_2_4(a), a)  # already 2:4
    kw = dict(operand_format="f16", instruction="mma_sync")
    dense = float(jaxwarp.matmul(a, b, **kw)[0, 0])
    sparse = float(jaxwarp.matmul(a, b, sparsity="2:4", **kw)[0, 0])
    # Dense: each k16 block sums 1 + 2**-24 + 2**-25, which fp32 truncates to 1, twice.
    assert dense == 1.0
    # Sparse: one block of the 16 stored products sums 1 + 2**-23 + 2**-24 -> 1 + 2**-23.
    assert sparse == 1.0 + 2.0**-23
    # The exact sum, for reference: neither instruction gives it.
    assert float(np.float64(np.asarray(a, np.float64) @ np.asarray(b, np.float64))[0, 0]) \
        == 1.0 + 2.0**-23 + 2.0**-24
