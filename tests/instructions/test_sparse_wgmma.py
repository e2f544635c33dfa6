"""``wgmma.mma_async.sp`` at the register and descriptor level (``wgmma_sp``).

A sample of the wgsp/ configurations of tests/data/h100_sparse.npz (A from shared memory) go
through ``wgmma_sp``: the capture's logical A and B are stored in shared memory where the
capture's descriptors point, C in the accumulator registers, the metadata registers as the
threads passed them; the result registers must hold the hardware's bits. With
JAXWARP_SPARSE_CAPTURES set, the ``.areg`` configurations there (A from registers) too.
"""

from __future__ import annotations

import os
import pathlib

import jax.numpy as jnp
import numpy as np
import pytest
from conftest import load_capture

import jaxwarp
from jaxwarp._src.catalogue import isa
from jaxwarp._src.catalogue.wgmma_parse import BITS_DTYPE, MATRIX_DTYPE
from jaxwarp._src.conformance.handlers import sparse as handlers_sparse
from jaxwarp._src.instructions import wgmma_sp
from jaxwarp._src.layouts.smem import operand_addresses, scatter
from jaxwarp._src.layouts.wgmma_registers import (
    a_registers,
    accumulator_matrix,
    accumulator_registers,
)

CAP = load_capture("sparse")
# One configuration per A-type family (not bf16); all 24 of the file go through the
# same arithmetic on logical matrices in ``python -m jaxwarp.conformance``.
SAMPLE = ("wgsp/f16.f16.f16f16.m64n8k32.sel1", "wgsp/tf32.tf32.f32f32.m64n8k16.sel1",
          "wgsp/e4m3.e5m2.f16f16.m64n8k64", "wgsp/u8.s8.s32s32.m64n8k64.satfinite")


def _bits(x, fmt):
    want = np.dtype(BITS_DTYPE[fmt])
    x = np.asarray(x)
    return jnp.asarray(x.view(want) if x.dtype.itemsize == want.itemsize else x.astype(want))


def _through_registers(cap, base):
    """(got, want) of one wgsp configuration run through ``wgmma_sp``."""
    instr, sel, _ = handlers_sparse.parse_name(*base.split("/"))
    dense = instr.dense("a")
    areg = ".areg" in base
    a, b = _bits(cap[f"{base}/A"], instr.a_format), _bits(cap[f"{base}/B"], instr.b_format)
    desc_a, desc_b = int(cap[f"{base}/desc_a"]), int(cap[f"{base}/desc_b"])
    bits_a, bits_b = isa.element_bits(instr.a_format), isa.element_bits(instr.b_format)
    addr_b, bit_b = operand_addresses(desc_b, instr.n, instr.k, bits_b)
    addr_a, bit_a = operand_addresses(desc_a, 64, instr.k // 2, bits_a)
    size = int(max(addr_a.max(), addr_b.max())) + 1

    def image(a1, b1):
        s = scatter(jnp.zeros(size, jnp.uint8), addr_b, bit_b, bits_b, b1.T)
        return s if areg else scatter(s, addr_a, bit_a, bits_a, a1)

    smem = jnp.stack([image(a[t], b[t]) for t in range(a.shape[0])])
    c = np.asarray(cap[f"{base}/C"])
    c = jnp.asarray(c.view(MATRIX_DTYPE[instr.d_format]))
    d = wgmma_sp.wgmma_sp(instr, a_registers(a, dense) if areg else desc_a, desc_b, smem,
                          accumulator_registers(c, dense), jnp.asarray(cap[f"{base}/meta"]),
                          selector=sel)
    want = np.asarray(cap[f"{base}/D"])
    return np.asarray(accumulator_matrix(d, dense)).view(want.dtype), want


@pytest.mark.slow
@pytest.mark.parametrize("base", SAMPLE)
def test_wgmma_sp_registers_bit_exact(base):
    got, want = _through_registers(CAP, base)
    np.testing.assert_array_equal(got, want)


@pytest.mark.slow
def test_wgmma_sp_a_from_registers_held_out():
    """The ``.areg`` wgsp configurations of $JAXWARP_SPARSE_CAPTURES (A from registers)."""
    folder = os.environ.get("JAXWARP_SPARSE_CAPTURES")
    if not folder:
        pytest.skip("JAXWARP_SPARSE_CAPTURES is not set")
    seen = 0
    for f in sorted(pathlib.Path(folder).glob("*.npz")):
        z = np.load(f)
        for base in sorted({k.rsplit("/", 1)[0] for k in z.files
                            if k.startswith("wgsp/") and ".areg" in k}):
            got, want = _through_registers(z, base)
            np.testing.assert_array_equal(got, want, err_msg=f"{f.name}: {base}")
            seen += 1
    assert seen, f"no .areg wgsp configurations in {folder}"


@pytest.mark.slow
def test_wgmma_sp_scale_d_and_logical_agree():
    """scale_d=0 ignores the accumulator; the register form = the logical form."""
    q = "m64n8k64.s32.s8.s8"
    instr = jaxwarp.parse_wgmma_sp(q)
    rng = np.random.default_rng(6)
    vals = jnp.asarray(rng.integers(-9, 9, (64, 32)), jnp.int8)
    idx = jnp.tile(jnp.array([1, 3], jnp.int32), (64, 16))
    b = jnp.asarray(rng.integers(-9, 9, (64, 8)), jnp.int8)
    desc_b = jaxwarp.make_descriptor(0, 128, 512)
    addr, bit = operand_addresses(desc_b, 8, 64, 8)
    smem = scatter(jnp.zeros(int(addr.max()) + 1, jnp.uint8), addr, bit, 8, b.T)
    e = jaxwarp.sparse.metadata_words(idx, a_format="s8", k=64, instruction="wgmma_sp")
    dense = instr.dense("a")
    junk = jnp.full((128, 4), 12345, jnp.int32)
    d = wgmma_sp.wgmma_sp(q, a_registers(vals, dense), desc_b, smem, junk, e, scale_d=0)
    want = jaxwarp.wgmma_sp_logical(q, vals, b, jnp.zeros((64, 8), jnp.int32), indices=idx)
    np.testing.assert_array_equal(np.asarray(accumulator_matrix(d, dense)), np.asarray(want))
