"""Tests of jaxwarp._src.layouts.ldmatrix: ldmatrix, stmatrix, movmatrix.

First principles: the fragment layout written out element by element from the PTX ISA's
figure, ldmatrix/stmatrix inverse to each other, .trans equal to loading the transposed
tiles, movmatrix equal to ldmatrix.trans and its own inverse. When an H100 capture
(tools/capture/capture_movcvt.py, ldmatrix.npz) is present, also bit for bit against it.
"""

from __future__ import annotations

import doctest
import glob
import os
import pathlib

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax.experimental import checkify

import jaxwarp
from jaxwarp._src.layouts import ldmatrix as ldm_mod
from jaxwarp._src.layouts.ldmatrix import ldmatrix, movmatrix, stmatrix

VARIANTS = [(n, t) for n in (1, 2, 4) for t in (False, True)]
IDS = [f"x{n}{'.trans' if t else ''}" for n, t in VARIANTS]
NWORDS = 1024  # 128 rows of 16 bytes


def image(seed):
    """Unique 16-bit ids in NWORDS words."""
    return np.random.default_rng(seed).permutation(1 << 16)[:NWORDS].astype(np.uint16)


def row_addrs(seed, distinct=32):
    rng = np.random.default_rng(seed)
    return (rng.permutation(NWORDS // 8)[:distinct] * 16).astype(np.int32)


def tile(smem, addr, i):
    """Matrix i as the ISA defines it: row r at the address of lane 8i + r."""
    return np.stack([smem[addr[8 * i + r] // 2: addr[8 * i + r] // 2 + 8] for r in range(8)])


@pytest.mark.parametrize("num,trans", VARIANTS, ids=IDS)
def test_fragment_layout_element_by_element(num, trans):
    smem, addr = image(num), row_addrs(num)
    regs = np.asarray(ldmatrix(smem, addr, num=num, trans=trans))
    assert regs.shape == (32, num) and regs.dtype == np.uint32
    for i in range(num):
        m = tile(smem, addr, i)
        if trans:
            m = m.T
        for lane in range(32):
            r, c = lane // 4, 2 * (lane % 4)
            assert regs[lane, i] & 0xFFFF == m[r, c]
            assert regs[lane, i] >> 16 == m[r, c + 1]


@pytest.mark.parametrize("num,trans", VARIANTS, ids=IDS)
def test_stmatrix_inverts_ldmatrix(num, trans):
    smem, addr = image(10 + num), row_addrs(10 + num)
    regs = ldmatrix(smem, addr, num=num, trans=trans)
    out = np.asarray(stmatrix(np.zeros(NWORDS, np.uint16), regs, addr, num=num, trans=trans))
    for i in range(num):  # the addressed rows come back; nothing else is written
        np.testing.assert_array_equal(tile(out, addr, i), tile(smem, addr, i))
    assert np.count_nonzero(out) == 64 * num - np.count_nonzero(
        np.concatenate([tile(smem, addr, i).ravel() for i in range(num)]) == 0)
    back = ldmatrix(out, addr, num=num, trans=trans)
    np.testing.assert_array_equal(np.asarray(back), np.asarray(regs))


@pytest.mark.parametrize("num", [1, 2, 4])
def test_trans_loads_the_transposed_tiles(num):
    smem, addr = image(20 + num), row_addrs(20 + num)
    tt = smem.copy()
    for i in range(num):
        rows = addr[8 * i: 8 * i + 8] // 2
        tt[rows[:, None] + np.arange(8)] = tile(smem, addr, i).T
    np.testing.assert_array_equal(np.asarray(ldmatrix(smem, addr, num=num, trans=True)),
                                  np.asarray(ldmatrix(tt, addr, num=num)))


def test_movmatrix_is_ldmatrix_trans_and_an_involution():
    smem, addr = image(30), row_addrs(30)
    plain = ldmatrix(smem, addr, num=1)[:, 0]
    np.testing.assert_array_equal(np.asarray(movmatrix(plain)),
                                  np.asarray(ldmatrix(smem, addr, num=1, trans=True)[:, 0]))
    np.testing.assert_array_equal(np.asarray(movmatrix(movmatrix(plain))), np.asarray(plain))


def test_unused_lanes_addresses_are_ignored():
    smem, addr = image(40), row_addrs(40)
    junk = addr.copy()
    junk[8:] = 3  # misaligned: would be an error if used
    np.testing.assert_array_equal(np.asarray(ldmatrix(smem, junk, num=1)),
                                  np.asarray(ldmatrix(smem, addr, num=1)))
    junk = addr.copy()
    junk[16:] = -1
    np.testing.assert_array_equal(
        np.asarray(stmatrix(smem, ldmatrix(smem, junk, num=2), junk, num=2)), smem)


def test_byte_and_float_views_of_shared_memory():
    smem, addr = image(50), row_addrs(50)
    want = np.asarray(ldmatrix(smem, addr, num=4))
    np.testing.assert_array_equal(np.asarray(ldmatrix(smem.view(np.uint8), addr, num=4)), want)
    np.testing.assert_array_equal(np.asarray(ldmatrix(smem.view(np.float16), addr, num=4)), want)
    out8 = stmatrix(np.zeros(2 * NWORDS, np.uint8), want, addr, num=4)
    assert out8.dtype == jnp.uint8
    outb = stmatrix(np.zeros(NWORDS, ml_dtypes.bfloat16), want, addr, num=4)
    assert outb.dtype == jnp.dtype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(np.asarray(out8).view(np.uint16),
                                  np.asarray(outb).view(np.uint16))


def test_stmatrix_same_row_twice_keeps_the_h100s_choice():
    # Measured on the H100 (every duplicate-row word of the stmatrix captures): within a
    # matrix the lower row remains; across matrices, the later matrix's row.
    regs = jnp.arange(32, dtype=jnp.uint32) * 0x20002 + 0x10000  # element k = k
    addr = row_addrs(60)
    addr[5] = addr[2]  # rows 2 and 5 of matrix 0
    out = np.asarray(stmatrix(np.zeros(NWORDS, np.uint16), regs, addr, num=1))
    np.testing.assert_array_equal(out[addr[2] // 2: addr[2] // 2 + 8], np.arange(16, 24))
    regs4 = jnp.stack([regs + 0x1000 * (0x10001 * i) for i in range(4)], axis=1)
    addr = row_addrs(61)
    addr[8 + 6] = addr[3]  # row 3 of matrix 0 and row 6 of matrix 1
    out = np.asarray(stmatrix(np.zeros(NWORDS, np.uint16), regs4, addr, num=4))
    np.testing.assert_array_equal(out[addr[3] // 2: addr[3] // 2 + 8],
                                  np.arange(48, 56) + 0x1000)


def test_bad_arguments_raise_clear_errors():
    smem, addr = image(70), row_addrs(70)
    bad = addr.copy()
    bad[3] += 2
    with pytest.raises(ValueError, match=r"lane 3 .* not 16-byte aligned"):
        ldmatrix(smem, bad, num=1)
    bad = addr.copy()
    bad[9] = 2 * NWORDS  # aligned, one row past the end
    with pytest.raises(ValueError, match=r"lane 9 .* outside shared memory of 2048 bytes"):
        ldmatrix(smem, bad, num=2)
    with pytest.raises(ValueError, match=r"num=3 .*allowed: \(1, 2, 4\)"):
        ldmatrix(smem, addr, num=3)
    with pytest.raises(ValueError, match="leading lane axis of size 32"):
        ldmatrix(smem, addr[:16], num=1)
    with pytest.raises(TypeError, match="smem must be uint8 bytes or 16-bit words"):
        ldmatrix(smem.astype(np.int32), addr, num=1)
    with pytest.raises(ValueError, match="flat"):
        ldmatrix(smem.reshape(2, -1), addr, num=1)
    with pytest.raises(TypeError, match=r"regs must be a \(32, 2\) uint32"):
        stmatrix(smem, np.zeros((32, 4), np.uint32), addr, num=2)
    with pytest.raises(TypeError, match=r"movmatrix: regs must be a \(32,\) uint32"):
        movmatrix(np.zeros(32, np.int32))


def test_jit_unchecked_and_checked():
    smem, addr = image(80), row_addrs(80)
    f = jax.jit(ldmatrix, static_argnames=("num", "trans"))
    np.testing.assert_array_equal(np.asarray(f(smem, addr, num=4)),
                                  np.asarray(ldmatrix(smem, addr, num=4)))
    mis = addr + 4  # traced: unchecked, the low 4 address bits are ignored
    np.testing.assert_array_equal(np.asarray(f(smem, mis, num=4)), np.asarray(f(smem, addr, num=4)))
    err, _ = jax.jit(jaxwarp.checked(lambda s, a: ldmatrix(s, a, num=4)))(smem, mis)
    assert "not 16-byte aligned" in err.get() and "lane 0" in err.get()
    err, _ = jaxwarp.checked(lambda s, a: ldmatrix(s, a, num=4))(smem, addr)
    assert err.get() is None
    dup = addr.copy()
    dup[7] = dup[1]
    regs = ldmatrix(smem, addr, num=1)
    err, _ = jaxwarp.checked(lambda s, r, a: stmatrix(s, r, a, num=1))(smem, regs, dup)
    assert "stores to a row another lane also stores to" in err.get()
    oob = addr.copy()
    oob[0] = 1 << 20
    err, _ = jaxwarp.checked(lambda s, a: ldmatrix(s, a, num=1))(smem, oob)
    assert "outside shared memory" in err.get()
    assert isinstance(err, checkify.Error)


def test_vmap_over_warps():
    smem = np.stack([image(90 + w) for w in range(3)])
    addr = np.stack([row_addrs(90 + w) for w in range(3)])
    got = jax.vmap(lambda s, a: ldmatrix(s, a, num=2, trans=True))(smem, addr)
    for w in range(3):
        np.testing.assert_array_equal(np.asarray(got[w]),
                                      np.asarray(ldmatrix(smem[w], addr[w], num=2, trans=True)))


# Slow: the same examples run by default in tests/test_docs.py::test_docstring_example.
@pytest.mark.slow
def test_docstring_examples():
    result = doctest.testmod(ldm_mod, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted >= 8 and result.failed == 0


# ----------------------------------------------------------------------------------------
# Conformance with an H100 capture, when one is present.


def _capture_file(name):
    here = pathlib.Path(__file__).resolve().parents[1] / "data"
    cands = [here / f"h100_{name}", here / name]
    for root in filter(None, (os.environ.get("JAXWARP_CAPTURES"),)):
        cands += sorted(pathlib.Path(p) for p in glob.glob(f"{root}/**/{name}", recursive=True))
    return next((p for p in cands if p.exists()), None)


LDM_CAPTURE = _capture_file("ldmatrix.npz")


@pytest.mark.skipif(LDM_CAPTURE is None, reason="no ldmatrix.npz capture in tests/data; set "
                    "JAXWARP_CAPTURES to a folder of captures")
def test_matches_the_h100_capture_bit_for_bit():
    d = np.load(LDM_CAPTURE)
    keys = sorted({k.rsplit("/", 1)[0] for k in d.files if "/" in k})
    bad, checked_keys = {}, 0
    for k in keys:
        if f"{k}/error" in d.files:
            continue
        op, var = k.split("/")
        if op == "movmatrix":
            got = jax.vmap(movmatrix)(d[f"{k}/regs_in"])
            want = d[f"{k}/regs_out"]
        else:
            num, trans = int(var[1]), ".trans" in var
            addr = d[f"{k}/addr"]
            if op == "ldmatrix":
                got = jax.vmap(lambda s, a, n=num, t=trans: ldmatrix(s, a, num=n, trans=t))(
                    d[f"{k}/smem"], addr)
                want = d[f"{k}/regs"]
            else:
                fill = np.full(d[f"{k}/smem_out"].shape, 0xDEAD, np.uint16)
                got = jax.vmap(lambda s, r, a, n=num, t=trans: stmatrix(s, r, a, num=n, trans=t))(
                    fill, d[f"{k}/regs"], addr)
                want = d[f"{k}/smem_out"]
        checked_keys += 1
        same = np.all((np.asarray(got) == want).reshape(len(want), -1), axis=1)
        if not same.all():
            bad[k] = f"{int((~same).sum())}/{len(same)} trials differ"
    assert checked_keys, "capture has no recorded variants"
    assert not bad, f"{LDM_CAPTURE} ({d['device']}): {bad}"
