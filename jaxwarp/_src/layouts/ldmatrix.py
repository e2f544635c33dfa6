"""Warp matrix moves ``ldmatrix``, ``stmatrix`` and ``movmatrix`` (``m8n8``, ``.b16``).

These move 8x8 matrices of 16-bit elements between shared memory and the registers of a
warp, in the fragment layout the ``mma`` instructions use (PTX ISA, "Warp-level matrix load
instruction: ldmatrix", "stmatrix", "movmatrix")::

    one 8x8 b16 matrix; lane l holds row l // 4, columns 2 (l % 4) and 2 (l % 4) + 1
    (the lower column in bits 15..0 of its 32-bit register):

              cols 0,1   cols 2,3   cols 4,5   cols 6,7
      row 0:    T0         T1         T2         T3
      row 1:    T4         T5         T6         T7
      ...
      row 7:    T28        T29        T30        T31

``.num`` = 1, 2 or 4 matrices: matrix i lives in register i of every lane, and lanes
8i … 8i+7 give the shared-memory addresses of its rows 0 … 7 (16 contiguous bytes each).
The addresses of lanes 8·num … 31 are not used. ``.trans`` moves the transposed matrix:
lane l then holds column l // 4, rows 2 (l % 4), 2 (l % 4) + 1 of the matrix in memory.
``stmatrix`` is the inverse of ``ldmatrix``; ``movmatrix.trans`` gives each lane its
fragment of the transposed matrix, with no memory involved.

Shared memory is a flat array: uint16 words (or float16 / bfloat16, taken as bits) or
uint8 bytes (little-endian); addresses are byte offsets into it, one per lane, a (32,)
integer array. The lane axis is the leading axis; many warps are a ``jax.vmap`` away.

Rules (PTX ISA): every used row address is 16-byte aligned and the 16 bytes lie inside
shared memory. With concrete addresses a broken rule raises ``ValueError`` at once. With
traced addresses (under ``jax.jit``) ``jaxwarp.checked`` reports it; unchecked, the model
ignores the low 4 address bits, reads 0 outside ``smem`` and drops stores outside it.
When two lanes of one ``stmatrix`` name the same row (the ISA leaves the result
unspecified), the model does what the H100 does: the row of the later matrix remains, and
within one matrix the lower row; ``jaxwarp.checked`` reports it.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np

from jaxwarp._src import checks
from jaxwarp._src.numerics import bitops
from jaxwarp._src.warp import checked

__all__ = ["ldmatrix", "movmatrix", "stmatrix"]

WARP_SIZE = checks.WARP_SIZE
NUMS = (1, 2, 4)
ROW_BYTES = 16
_LANE = np.arange(WARP_SIZE, dtype=np.int32)  # int32: jax 0.11 cannot add int64 NumPy indices
_FRAG_ROW = _LANE // 4  # row of the matrix each lane's register holds
_FRAG_COL = 2 * (_LANE % 4)  # its lower column; the upper column is _FRAG_COL + 1
_WORD_DTYPES = (np.dtype(np.uint16), np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))


def _smem_words(smem: Any, op: str) -> tuple[jax.Array, Any]:
    """(uint16 words, the caller's dtype) of a flat shared-memory array."""
    arr = jnp.asarray(smem)
    if arr.ndim != 1:
        raise ValueError(f"{op}: smem must be a flat (1-D) array; got shape {tuple(arr.shape)}")
    if arr.dtype == jnp.uint8:
        if arr.shape[0] % 2:
            raise ValueError(f"{op}: smem of uint8 bytes must have an even length; got "
                             f"{arr.shape[0]}")
        pair = arr.reshape(-1, 2).astype(jnp.uint16)
        return pair[:, 0] | (pair[:, 1] << 8), arr.dtype
    if arr.dtype in _WORD_DTYPES:
        return bitops.uint_view(arr), arr.dtype
    raise TypeError(f"{op}: smem must be uint8 bytes or 16-bit words (uint16, float16, "
                    f"bfloat16); got dtype {arr.dtype}")


def _smem_back(words: jax.Array, dtype: Any) -> jax.Array:
    if dtype == jnp.uint8:
        return jnp.stack([words & 0xFF, words >> 8], -1).reshape(-1).astype(jnp.uint8)
    return bitops.from_bits(words, dtype)


def _addr_arg(addr: Any, op: str) -> jax.Array:
    a = checks.lane_array(addr, "addr")
    if a.ndim != 1 or not jnp.issubdtype(a.dtype, jnp.integer):
        raise TypeError(f"{op}: addr must be a (32,) integer array of byte offsets; got "
                        f"shape {tuple(a.shape)} dtype {a.dtype}")
    return a.astype(jnp.int32)


def _check_rows(addr: jax.Array, num: int, nbytes: int, op: str, store: bool) -> None:
    """Raises (concrete addr) or reports in checked mode (traced) broken address rules."""
    used = addr[: 8 * num]
    mis = used % ROW_BYTES != 0
    out = (used < 0) | (used > nbytes - ROW_BYTES)
    if not isinstance(addr, jax.core.Tracer):
        u = np.asarray(used)
        for bad, what in ((np.asarray(mis), "is not 16-byte aligned"),
                          (np.asarray(out), f"is outside shared memory of {nbytes} bytes "
                                            f"(a row needs {ROW_BYTES} bytes)")):
            if bad.any():
                lanes = np.flatnonzero(bad)
                raise ValueError(
                    f"{op}: the row address of lane {lanes[0]} ({int(u[lanes[0]])}) {what}; "
                    f"lanes {lanes.tolist()} are affected. The PTX ISA requires every row "
                    f"address of lanes 0..{8 * num - 1} to be 16-byte aligned and inside "
                    f"shared memory.")
        return  # a row stored twice is allowed eagerly (the H100's order: see stmatrix)
    checked.check(~jnp.any(mis), f"{op}: the row address of lane {{lane}} is not 16-byte "
                  "aligned (PTX ISA: ldmatrix/stmatrix rows must be 16-byte aligned)",
                  lane=checked.first_lane(mis))
    checked.check(~jnp.any(out), f"{op}: the row address of lane {{lane}} is outside shared "
                  f"memory of {nbytes} bytes", lane=checked.first_lane(out))
    if store:
        dup = jnp.any((used[:, None] == used[None, :]) & ~jnp.eye(8 * num, dtype=bool), axis=1)
        checked.check(~jnp.any(dup), f"{op}: lane {{lane}} stores to a row another lane also "
                      "stores to (unspecified in the PTX ISA; the model keeps the H100's choice)",
                      lane=checked.first_lane(dup))


def _row_words(addr: jax.Array, num: int) -> jax.Array:
    """(8*num, 8) word indices of the rows given by lanes 0 .. 8*num-1 (low 4 bits ignored)."""
    base = (addr[: 8 * num] & ~(ROW_BYTES - 1)) // 2
    return base[:, None] + jnp.arange(8, dtype=jnp.int32)[None, :]


def _to_fragment(m: jax.Array) -> jax.Array:
    """(num, 8, 8) uint16 matrices -> (32, num) uint32 registers."""
    lo = m[:, _FRAG_ROW, _FRAG_COL].astype(jnp.uint32)
    hi = m[:, _FRAG_ROW, _FRAG_COL + 1].astype(jnp.uint32)
    return (lo | (hi << 16)).T


def _from_fragment(regs: jax.Array) -> jax.Array:
    """(32, num) uint32 registers -> (num, 8, 8) uint16 matrices."""
    num = regs.shape[1]
    m = jnp.zeros((num, 8, 8), jnp.uint16)
    m = m.at[:, _FRAG_ROW, _FRAG_COL].set((regs.T & 0xFFFF).astype(jnp.uint16))
    return m.at[:, _FRAG_ROW, _FRAG_COL + 1].set((regs.T >> 16).astype(jnp.uint16))


def _regs_arg(regs: Any, num: int, op: str) -> jax.Array:
    r = checks.lane_array(regs, "regs")
    if num == 1 and r.ndim == 1:
        r = r[:, None]
    if r.shape != (WARP_SIZE, num) or r.dtype != jnp.uint32:
        raise TypeError(f"{op}: regs must be a (32, {num}) uint32 array (one 32-bit register "
                        f"per matrix and lane{'; (32,) is accepted for num=1' if num == 1 else ''}"
                        f"); got shape {tuple(r.shape)} dtype {r.dtype}")
    return r


def ldmatrix(smem: Any, addr: Any, *, num: int, trans: bool = False) -> jax.Array:
    """PTX ``ldmatrix.sync.aligned.m8n8{.x1,.x2,.x4}{.trans}.shared.b16``.

    Args:
      smem: flat shared memory: uint16 words (or float16/bfloat16) or uint8 bytes.
      addr: (32,) integer byte offsets into ``smem``; lanes 8i .. 8i+7 give rows 0 .. 7 of
        matrix i, lanes from 8*num on are ignored.
      num: static, 1, 2 or 4 (``.x1``, ``.x2``, ``.x4``).
      trans: static, ``.trans``.

    Returns:
      (32, num) uint32: register i of lane l holds matrix i's row l // 4, columns
      2 (l % 4) (bits 15..0) and 2 (l % 4) + 1 (bits 31..16); with ``trans`` the same of
      the transposed matrix.

    Raises:
      ValueError: ``num``/``trans`` not allowed, a used address misaligned or outside
        ``smem`` (concrete addresses; traced ones are reported by ``jaxwarp.checked``).
      TypeError: ``smem`` or ``addr`` of the wrong dtype or shape.

    Example:
      >>> import jax.numpy as jnp
      >>> smem = jnp.arange(64, dtype=jnp.uint16)           # one 8x8 matrix, row-major
      >>> addr = (jnp.arange(32, dtype=jnp.int32) % 8) * 16  # lane r -> row r
      >>> regs = ldmatrix(smem, addr, num=1)                  # lanes 0, 1: row 0
      >>> hex(int(regs[0, 0])), hex(int(regs[1, 0]))         # columns (0, 1), (2, 3)
      ('0x10000', '0x30002')
      >>> regs = ldmatrix(smem, addr, num=1, trans=True)      # of the transpose
      >>> hex(int(regs[0, 0])), hex(int(regs[1, 0]))
      ('0x80000', '0x180010')
    """
    smem = checks.array_arg(smem, "smem")
    num = checks.static_choice(num, "num", NUMS)
    trans = checks.static_choice(trans, "trans", (False, True))
    words, _ = _smem_words(smem, "ldmatrix")
    a = _addr_arg(addr, "ldmatrix")
    _check_rows(a, num, 2 * words.shape[0], "ldmatrix", store=False)
    idx = _row_words(a, num)
    m = jnp.take(words, idx, mode="fill", fill_value=0).reshape(num, 8, 8)
    if trans:
        m = jnp.swapaxes(m, 1, 2)
    return _to_fragment(m)


def _store_beats() -> np.ndarray:
    """[j, j2]: row j2 (lane 8 i2 + r2, matrix i2, row r2) overwrites row j when both name
    one address: a later matrix, or in the same matrix a lower row (measured on the H100:
    every duplicate-row word of 64 trials per form, x1/x2/x4 with and without .trans)."""
    i, r = np.divmod(np.arange(32), 8)
    return (i[None, :] > i[:, None]) | ((i[None, :] == i[:, None]) & (r[None, :] < r[:, None]))


_STORE_BEATS = _store_beats()


def stmatrix(smem: Any, regs: Any, addr: Any, *, num: int, trans: bool = False) -> jax.Array:
    """PTX ``stmatrix.sync.aligned.m8n8{.x1,.x2,.x4}{.trans}.shared.b16``.

    Args:
      smem: flat shared memory before the store (uint16/float16/bfloat16 words or uint8).
      regs: (32, num) uint32 registers, in the layout :func:`ldmatrix` returns ((32,) for
        num=1 too).
      addr: (32,) integer byte offsets; lanes 8i .. 8i+7 give rows 0 .. 7 of matrix i.
      num: static, 1, 2 or 4.
      trans: static, ``.trans``: the transposed matrix is stored.

    Returns:
      The new shared memory, ``smem``'s shape and dtype.

    Raises:
      ValueError, TypeError: as :func:`ldmatrix`; ``jaxwarp.checked`` also reports two
        lanes storing to one row.

    Example:
      >>> import jax.numpy as jnp
      >>> smem = jnp.arange(64, dtype=jnp.uint16)
      >>> addr = (jnp.arange(32, dtype=jnp.int32) % 8) * 16
      >>> regs = ldmatrix(smem, addr, num=1)
      >>> bool((stmatrix(jnp.zeros(64, jnp.uint16), regs, addr, num=1) == smem).all())
      True
    """
    smem = checks.array_arg(smem, "smem")
    num = checks.static_choice(num, "num", NUMS)
    trans = checks.static_choice(trans, "trans", (False, True))
    words, dtype = _smem_words(smem, "stmatrix")
    r = _regs_arg(regs, num, "stmatrix")
    a = _addr_arg(addr, "stmatrix")
    n = words.shape[0]
    _check_rows(a, num, 2 * n, "stmatrix", store=True)
    m = _from_fragment(r)
    if trans:
        m = jnp.swapaxes(m, 1, 2)
    idx = _row_words(a, num)
    # Rows named twice (the ISA leaves it unspecified): on the H100 the later matrix
    # wins, and within one matrix the lower row (``_STORE_BEATS``). Losers are dropped.
    first = idx[:, 0]
    lost = ((first[:, None] == first[None, :]) & _STORE_BEATS[: 8 * num, : 8 * num]).any(axis=1)
    idx = jnp.where(lost[:, None], n, idx)  # out of range: dropped
    out = words.at[idx.reshape(-1)].set(m.reshape(-1), mode="drop")
    return _smem_back(out, dtype)


def movmatrix(regs: Any) -> jax.Array:
    """PTX ``movmatrix.sync.aligned.m8n8.trans.b16 d, a``: the fragment of the transpose.

    Args:
      regs: (32,) uint32, one register per lane in the fragment layout (module doc).

    Returns:
      (32,) uint32: lane l gets rows 2 (l % 4), 2 (l % 4) + 1 of column l // 4.

    Raises:
      TypeError: ``regs`` is not a (32,) uint32 array.

    Example:
      >>> import jax.numpy as jnp
      >>> regs = jnp.arange(32, dtype=jnp.uint32) * 0x20002 + 0x10000  # element k = k
      >>> hex(int(movmatrix(regs)[1]))
      '0x180010'
    """
    r = checks.lane_array(regs, "regs")
    if r.shape != (WARP_SIZE,) or r.dtype != jnp.uint32:
        raise TypeError(f"movmatrix: regs must be a (32,) uint32 array; got shape "
                        f"{tuple(r.shape)} dtype {r.dtype}")
    m = _from_fragment(r[:, None])
    return _to_fragment(jnp.swapaxes(m, 1, 2))[:, 0]
