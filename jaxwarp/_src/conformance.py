"""Conformance against hardware captures (the schema of ``shared/hw/FORMAT.md``).

`check_file` runs the model on the inputs recorded in a capture file and compares
the bits of every output with what the GPU returned. Results come per group
(``shfl``, ``reduce``, ``vote``, ``dpx/<fn>``, ``cvt/<fn>``, ``layout/<key>``,
``mma/<config>``); keys that no handler understands are reported as
``unhandled/<key>`` and count as mismatches.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import zipfile
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxwarp._src import lanes, reduce, vote

DEADBEEF = 0xDEADBEEF


class CaptureError(ValueError):
    """A capture file that cannot be read or does not follow the schema."""


@dataclasses.dataclass(frozen=True)
class GroupResult:
    """Bit-exact count for one group of a capture file."""

    group: str
    matched: int
    total: int
    note: str = ""

    @property
    def ok(self) -> bool:
        return self.matched == self.total


# A handler is (match, run): match(file keys) -> the keys it will consume (empty: not
# for this file); run(capture, keys) -> results.
Handler = tuple[Callable[[set], set], Callable[[Any, set], Iterator[GroupResult]]]
_HANDLERS: list[Handler] = []


def handler(*keys: str):
    """Registers a handler that needs every one of ``keys`` (all present, or it is skipped)."""

    def wrap(fn):
        _HANDLERS.append(
            (lambda files: set(keys) if set(keys) <= files else set(), lambda d, _keys: fn(d))
        )
        return fn

    return wrap


def prefix_handler(match: Callable[[str], bool]):
    """Registers a handler for every key for which ``match(key)`` holds."""

    def wrap(fn):
        _HANDLERS.append((lambda files: {k for k in files if match(k)}, fn))
        return fn

    return wrap


def _mask_bits(mask: np.ndarray) -> np.ndarray:
    """(W,) masks -> bool (W, 32): lane l is in the mask."""
    m = np.asarray(mask).astype(np.int64) & 0xFFFFFFFF
    return ((m[:, None] >> np.arange(32)) & 1).astype(bool)


def _count(got: np.ndarray, want: np.ndarray, where: np.ndarray) -> tuple[int, int]:
    where = np.broadcast_to(where, want.shape)
    return int(((got == want) & where).sum()), int(where.sum())


@handler("shfl_cfg", "shfl_x", "shfl_out")
def _shfl(d) -> Iterator[GroupResult]:
    cfg, x, want = d["shfl_cfg"], d["shfl_x"], d["shfl_out"]
    fns = (lanes.shfl_sync, lanes.shfl_up_sync, lanes.shfl_down_sync, lanes.shfl_xor_sync)
    got = np.zeros_like(want)
    for mode, width in sorted({(int(r[0]), int(r[2])) for r in cfg}):
        sel = np.flatnonzero((cfg[:, 0] == mode) & (cfg[:, 2] == width))
        fn = jax.jit(jax.vmap(lambda m, v, b, f=fns[mode], w=width: f(m, v, b, w)))
        got[sel] = np.asarray(fn(cfg[sel, 3].astype(np.uint32), x[sel], cfg[sel, 1]))
    m, t = _count(got, want, _mask_bits(cfg[:, 3]))
    yield GroupResult("shfl", m, t)


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


@handler("reduce_cfg", "reduce_x", "reduce_out")
def _reduce(d) -> Iterator[GroupResult]:
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
    m, t = _count(got, want, _mask_bits(cfg[:, 1]))
    yield GroupResult("reduce", m, t)


@handler("vote_mask", "vote_x", "vote_out")
def _vote(d) -> Iterator[GroupResult]:
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
    m, t = _count(got, want, _mask_bits(mask)[:, :, None])
    yield GroupResult("vote", m, t)


@handler("dpx_a", "dpx_b", "dpx_c", "dpx_out")
def _dpx(d) -> Iterator[GroupResult]:
    from jaxwarp._src import dpx

    a, b, c = (np.asarray(d[k]).astype(np.uint32) for k in ("dpx_a", "dpx_b", "dpx_c"))
    want = d["dpx_out"]
    if want.shape[0] != len(dpx.DPX_FUNCTIONS):
        raise CaptureError(f"dpx_out has {want.shape[0]} rows; the schema has "
                           f"{len(dpx.DPX_FUNCTIONS)}")
    for row, (name, fn, arity) in enumerate(dpx.DPX_FUNCTIONS):
        got = np.asarray(jax.jit(fn)(*(a, b, c)[:arity]))
        yield GroupResult(f"dpx/{name}", int((got == want[row]).sum()), int(want[row].size))


@handler("dpx_a", "dpx_b", "dpx_pred")
def _dpx_pred(d) -> Iterator[GroupResult]:
    from jaxwarp._src import dpx

    a, b = (np.asarray(d[k]).astype(np.uint32) for k in ("dpx_a", "dpx_b"))
    want = d["dpx_pred"]
    if want.shape[0] != len(dpx.DPX_PRED_FUNCTIONS):
        raise CaptureError(f"dpx_pred has {want.shape[0]} rows; the schema has "
                           f"{len(dpx.DPX_PRED_FUNCTIONS)}")
    for row, (name, fn) in enumerate(dpx.DPX_PRED_FUNCTIONS):
        got = np.asarray(jax.jit(fn)(a, b))
        yield GroupResult(f"dpx/{name}", int((got == want[row]).sum()), int(want[row].size))


@handler("cvt_x", "cvt_out")
def _cvt(d) -> Iterator[GroupResult]:
    from jaxwarp._src import formats

    x, want = np.asarray(d["cvt_x"]).astype(np.uint32), d["cvt_out"]
    if want.shape[0] != len(formats.CVT_FUNCTIONS):
        raise CaptureError(f"cvt_out has {want.shape[0]} rows; the schema has "
                           f"{len(formats.CVT_FUNCTIONS)}")
    for row, (name, fn) in enumerate(formats.CVT_FUNCTIONS):
        got = np.asarray(jax.jit(fn)(x)).astype(np.uint32)
        yield GroupResult(f"cvt/{name}", int((got == want[row]).sum()), int(want[row].size))


def _is_layout_key(key: str) -> bool:
    parts = key.split(".")
    return "/" not in key and len(parts) in (3, 4) and parts[0] in ("a", "b", "c")


@prefix_handler(_is_layout_key)
def _layout(d, keys) -> Iterator[GroupResult]:
    from jaxwarp._src import wmma

    for key in sorted(keys):
        m, t = wmma.layout_conformance(key, d[key])
        yield GroupResult(f"layout/{key}", m, t)


def check_file(path: str) -> tuple[list[GroupResult], str]:
    """Runs the model on one capture file. Returns (results, device name).

    Raises:
        CaptureError: the file is missing, not an npz, or breaks the schema.
    """
    try:
        d = np.load(path, allow_pickle=False)
        files = set(d.files)
    except FileNotFoundError as e:
        raise CaptureError(f"{path}: no such capture file") from e
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as e:
        raise CaptureError(f"{path}: not a readable .npz capture file ({e})") from e
    device = str(d["device"]) if "device" in files else "unknown device"
    results: list[GroupResult] = []
    used = {"device"}
    with jax.enable_x64(True):
        for match, run in _HANDLERS:
            keys = match(files)
            if not keys:
                continue
            try:
                results.extend(run(d, keys))
            except CaptureError as e:
                raise CaptureError(f"{path}: {e}") from e
            except (KeyError, IndexError, ValueError, TypeError) as e:
                raise CaptureError(
                    f"{path}: keys {sorted(keys)[:4]} do not follow the capture schema "
                    f"(shared/hw/FORMAT.md): {type(e).__name__}: {e}"
                ) from e
            used |= keys
    for k in sorted(files - used):
        results.append(
            GroupResult(
                f"unhandled/{k}", 0, int(np.asarray(d[k]).size), "no model for this key yet"
            )
        )
    return results, device


def _fmt(r: GroupResult) -> str:
    pct = 100.0 * r.matched / r.total if r.total else 100.0
    flag = "" if r.ok else "   MISMATCH"
    note = f"  ({r.note})" if r.note else ""
    return f"{r.group:<44} {r.matched:>10}/{r.total:<10} {pct:6.1f}%{flag}{note}"


def main(argv: Iterable[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(
        prog="python -m jaxwarp.conformance",
        description="Compare jaxwarp bit for bit with GPU captures (shared/hw/FORMAT.md schema).",
    )
    p.add_argument("files", nargs="+", metavar="FILE.npz", help="capture files")
    p.add_argument("--json", metavar="PATH", help="also write the numbers as JSON")
    args = p.parse_args(list(argv) if argv is not None else None)
    matched = total = 0
    report: dict[str, Any] = {"backend": jax.default_backend(), "files": []}
    for path in args.files:
        try:
            results, device = check_file(path)
        except CaptureError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        print(f"# {path} (captured on {device}; model on {jax.default_backend()})")
        for r in results:
            print(_fmt(r))
            matched += r.matched
            total += r.total
        report["files"].append(
            {"path": path, "device": device, "groups": [dataclasses.asdict(r) for r in results]}
        )
    pct = 100.0 * matched / total if total else 100.0
    report.update(matched=matched, total=total, percent=round(pct, 1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    print(f"conformance: {matched}/{total} bit-exact ({pct:.1f}%)")
    return 0 if matched == total else 1
