"""Conformance handlers for the warp captures (``warp.npz``, ``capture_extra_warp.npz``).

Shuffles (``shfl*``), ``__reduce_*_sync`` (``reduce_*``), votes and matches (``vote_*``),
DPX (``dpx_*``) and the number conversions (``cvt_x``/``cvt_out``), each through the
model in ``jaxwarp._src.warp`` / ``jaxwarp._src.numerics``. Schema:
``docs/capture_format.md`` and ``tools/capture/FORMAT_EXTRA.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np

from jaxwarp._src.conformance.registry import CaptureError, GroupResult, count
from jaxwarp._src.numerics import convert
from jaxwarp._src.warp import dpx, lanes, reduce, vote


def _mask_bits(mask: np.ndarray) -> np.ndarray:
    """(W,) masks -> bool (W, 32): lane l is in the mask."""
    m = np.asarray(mask).astype(np.int64) & 0xFFFFFFFF
    return ((m[:, None] >> np.arange(32)) & 1).astype(bool)


# Shuffle key prefixes -> how the captured words are viewed before shuffling: the model
# then moves values of that dtype (pairs of halves for __half2, 64-bit words, ...).
SHFL_VIEWS: dict[str, tuple[Any, int | None]] = {
    "shfl": (np.uint32, None),
    "shfl64": (np.uint64, None),
    "shflh2": (np.float16, 2),  # __half2: two halves per 32-bit word
    "shflbf2": (ml_dtypes.bfloat16, 2),  # __nv_bfloat162
    "shflh": (np.float16, None),  # __half
    "shflbf": (ml_dtypes.bfloat16, None),  # __nv_bfloat16
}

_CHUNK = 64  # warps per eager batch


def shuffle(prefix: str) -> Callable[[Any, set], Iterator[GroupResult]]:
    """The handler of the ``{prefix}_cfg``, ``{prefix}_x``, ``{prefix}_out`` keys."""
    view, per_word = SHFL_VIEWS[prefix]

    def run(d, keys) -> Iterator[GroupResult]:
        cfg, x, want = d[f"{prefix}_cfg"], d[f"{prefix}_x"], d[f"{prefix}_out"]
        dt = np.dtype(view)
        xv = x.view(dt).reshape(*x.shape, per_word) if per_word else x.view(dt)
        fns = (lanes.shfl_sync, lanes.shfl_up_sync, lanes.shfl_down_sync, lanes.shfl_xor_sync)
        got = np.zeros_like(want)
        modes = sorted({int(v) for v in np.asarray(cfg)[:, 0]})
        bad = [v for v in modes if not 0 <= v < len(fns)]
        if bad:
            raise CaptureError(f"{prefix}_cfg has mode code(s) {bad}; known: 0 shfl, 1 up, "
                               f"2 down, 3 xor")
        for mode, width in sorted({(int(r[0]), int(r[2])) for r in cfg}):
            sel = np.flatnonzero((cfg[:, 0] == mode) & (cfg[:, 2] == width))
            # Eager and padded to a fixed batch: every (mode, width) group then reuses the
            # same compiled primitives instead of compiling a program of its own.
            pad = np.resize(sel, -(-len(sel) // _CHUNK) * _CHUNK)
            fn = jax.vmap(lambda m, v, b, f=fns[mode], w=width: f(m, v, b, w))
            out = np.asarray(fn(cfg[pad, 3].astype(np.uint32), xv[pad], cfg[pad, 1]))[:len(sel)]
            got[sel] = out.reshape(len(sel), 32, -1).view(want.dtype).reshape(len(sel), 32)
        m, t = count(got, want, _mask_bits(cfg[:, 3]))
        yield GroupResult(prefix, m, t)

    return run


# reduce_cfg op codes, in the order of FORMAT.md.
_REDUCE_OPS = (
    ("add", np.uint32),
    ("min", np.uint32),
    ("max", np.uint32),
    ("add", np.int32),
    ("min", np.int32),
    ("max", np.int32),
    ("and", np.uint32),
    ("or", np.uint32),
    ("xor", np.uint32),
)


def reduce_ops(d, keys) -> Iterator[GroupResult]:
    """``reduce_cfg``, ``reduce_x``, ``reduce_out``: ``__reduce_{op}_sync``."""
    cfg, x, want = d["reduce_cfg"], d["reduce_x"], d["reduce_out"]
    got = np.zeros_like(want)
    for code in np.unique(cfg[:, 0]):
        if not 0 <= code < len(_REDUCE_OPS):
            raise CaptureError(f"reduce_cfg has op code {code}; known: 0..{len(_REDUCE_OPS) - 1}")
        op, dt = _REDUCE_OPS[code]
        sel = np.flatnonzero(cfg[:, 0] == code)
        fn = jax.jit(jax.vmap(lambda m, v, op=op: reduce.reduce_sync(op, m, v)))
        r = fn(cfg[sel, 1].astype(np.uint32), x[sel].view(dt))
        got[sel] = np.asarray(r).view(np.uint32)
    m, t = count(got, want, _mask_bits(cfg[:, 1]))
    yield GroupResult("reduce", m, t)


def votes(d, keys) -> Iterator[GroupResult]:
    """``vote_mask``, ``vote_x``, ``vote_out``: ballot, any, all, match_any, match_all."""
    mask, x, want = d["vote_mask"], d["vote_x"], d["vote_out"]

    def one(m, v):
        p = (v & 1) != 0
        key = v >> 1
        mv, mp = vote.match_all_sync(m, key)
        return jnp.stack(
            [
                vote.ballot_sync(m, p),
                vote.any_sync(m, p).astype(jnp.uint32),
                vote.all_sync(m, p).astype(jnp.uint32),
                vote.match_any_sync(m, key),
                mv,
                mp.astype(jnp.uint32),
            ],
            axis=-1,
        )

    got = np.asarray(jax.jit(jax.vmap(one))(mask.astype(np.uint32), x))
    m, t = count(got, want, _mask_bits(mask)[:, :, None])
    yield GroupResult("vote", m, t)


def dpx_functions(d, keys) -> Iterator[GroupResult]:
    """``dpx_a``, ``dpx_b``, ``dpx_c``, ``dpx_out``: one row per DPX function."""
    a, b, c = (np.asarray(d[k]).astype(np.uint32) for k in ("dpx_a", "dpx_b", "dpx_c"))
    want = d["dpx_out"]
    if want.shape[0] != len(dpx.DPX_FUNCTIONS):
        raise CaptureError(f"dpx_out has {want.shape[0]} rows; the schema has "
                           f"{len(dpx.DPX_FUNCTIONS)}")
    for row, (name, fn, arity) in enumerate(dpx.DPX_FUNCTIONS):
        got = np.asarray(jax.jit(fn)(*(a, b, c)[:arity]))
        yield GroupResult(f"dpx/{name}", int((got == want[row]).sum()), int(want[row].size))


def dpx_predicates(d, keys) -> Iterator[GroupResult]:
    """``dpx_a``, ``dpx_b``, ``dpx_pred``: the predicate outputs of the DPX functions."""
    a, b = (np.asarray(d[k]).astype(np.uint32) for k in ("dpx_a", "dpx_b"))
    want = d["dpx_pred"]
    if want.shape[0] != len(dpx.DPX_PRED_FUNCTIONS):
        raise CaptureError(f"dpx_pred has {want.shape[0]} rows; the schema has "
                           f"{len(dpx.DPX_PRED_FUNCTIONS)}")
    for row, (name, fn) in enumerate(dpx.DPX_PRED_FUNCTIONS):
        got = np.asarray(jax.jit(fn)(a, b))
        yield GroupResult(f"dpx/{name}", int((got == want[row]).sum()), int(want[row].size))


def conversions(d, keys) -> Iterator[GroupResult]:
    """``cvt_x``, ``cvt_out``: one row per conversion of ``convert.CVT_FUNCTIONS``."""
    x, want = np.asarray(d["cvt_x"]).astype(np.uint32), d["cvt_out"]
    if want.shape[0] != len(convert.CVT_FUNCTIONS):
        raise CaptureError(f"cvt_out has {want.shape[0]} rows; the schema has "
                           f"{len(convert.CVT_FUNCTIONS)}")
    for row, (name, fn) in enumerate(convert.CVT_FUNCTIONS):
        got = np.asarray(jax.jit(fn)(x)).astype(np.uint32)
        yield GroupResult(f"cvt/{name}", int((got == want[row]).sum()), int(want[row].size))
