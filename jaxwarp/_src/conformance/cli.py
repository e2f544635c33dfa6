"""Conformance against hardware captures: ``python -m jaxwarp.conformance``.

`check_file` runs the model on the inputs recorded in a capture file and compares
the bits of every output with what the GPU returned. Results come per group
(``shfl``, ``reduce``, ``vote``, ``dpx/<fn>``, ``cvt/<fn>``, ``layout/<key>``,
``mma/<config>`` here; ``ptx/``, ``wgmma/``, ``chain/...``, fp8 ``cvt/`` forms and
``ldmatrix``/``stmatrix``/``movmatrix`` in ``handlers.py``). A key no handler
understands, an unknown mode code, a file with nothing to compare or a configuration
the model cannot run is an error, never a pass (``docs/conformance.md``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import stat
import sys
import zipfile
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxwarp._src.conformance.registry import HANDLERS as _HANDLERS
from jaxwarp._src.conformance.registry import READ_ERRORS as _READ_ERRORS
from jaxwarp._src.conformance.registry import CaptureError as CaptureError
from jaxwarp._src.conformance.registry import GroupResult as GroupResult
from jaxwarp._src.conformance.registry import count as _count
from jaxwarp._src.conformance.registry import floor_percent as floor_percent
from jaxwarp._src.conformance.registry import handler, prefix_handler
from jaxwarp._src.numerics import convert
from jaxwarp._src.tensorcore import wmma
from jaxwarp._src.tensorcore import wmma_table as table
from jaxwarp._src.tensorcore.fragments import fragment, unpack_values
from jaxwarp._src.warp import dpx, lanes, reduce, vote

DEADBEEF = 0xDEADBEEF


def _mask_bits(mask: np.ndarray) -> np.ndarray:
    """(W,) masks -> bool (W, 32): lane l is in the mask."""
    m = np.asarray(mask).astype(np.int64) & 0xFFFFFFFF
    return ((m[:, None] >> np.arange(32)) & 1).astype(bool)


# Shuffle key prefixes -> how the captured words are viewed before shuffling: the model
# then moves values of that dtype (pairs of halves for __half2, 64-bit words, ...).
_SHFL_VIEWS = {
    "shfl": (np.uint32, None),
    "shfl64": (np.uint64, None),
    "shflh2": (np.float16, 2),  # __half2: two halves per 32-bit word
    "shflbf2": ("bfloat16", 2),  # __nv_bfloat162
    "shflh": (np.float16, None),  # __half
    "shflbf": ("bfloat16", None),  # __nv_bfloat16
}


_CHUNK = 64  # warps per eager batch


def _shfl_handler(prefix: str, view: Any, per_word: int | None) -> None:
    @handler(f"{prefix}_cfg", f"{prefix}_x", f"{prefix}_out")
    def _shfl(d) -> Iterator[GroupResult]:
        import ml_dtypes

        cfg, x, want = d[f"{prefix}_cfg"], d[f"{prefix}_x"], d[f"{prefix}_out"]
        dt = np.dtype(ml_dtypes.bfloat16 if view == "bfloat16" else view)
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
        m, t = _count(got, want, _mask_bits(cfg[:, 3]))
        yield GroupResult(prefix, m, t)


for _prefix, (_view, _per_word) in _SHFL_VIEWS.items():
    _shfl_handler(_prefix, _view, _per_word)


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
    x, want = np.asarray(d["cvt_x"]).astype(np.uint32), d["cvt_out"]
    if want.shape[0] != len(convert.CVT_FUNCTIONS):
        raise CaptureError(f"cvt_out has {want.shape[0]} rows; the schema has "
                           f"{len(convert.CVT_FUNCTIONS)}")
    for row, (name, fn) in enumerate(convert.CVT_FUNCTIONS):
        got = np.asarray(jax.jit(fn)(x)).astype(np.uint32)
        yield GroupResult(f"cvt/{name}", int((got == want[row]).sum()), int(want[row].size))


def _is_layout_key(key: str) -> bool:
    parts = key.split(".")
    return "/" not in key and len(parts) in (3, 4) and parts[0] in ("a", "b", "c")


@prefix_handler(_is_layout_key)
def _layout(d, keys) -> Iterator[GroupResult]:
    for key in sorted(keys):
        m, t = wmma.layout_conformance(key, d[key])
        yield GroupResult(f"layout/{key}", m, t)


# ---------------------------------------------------------------------------------------
# WMMA: every configuration goes through the whole warp program, as the capture did:
# load_matrix_sync (with the capture's layouts) -> mma_sync/bmma_sync -> store_matrix_sync.

_LAYOUTS = {"r": "row_major", "c": "col_major"}


@dataclasses.dataclass(frozen=True)
class MmaConfig:
    """A parsed capture configuration name such as ``f16.f32f32.m16n16k16.rc``."""

    name: str
    a_type: str
    c_type: str
    d_type: str
    shape: tuple[int, int, int]
    layouts: tuple[str, str]
    satf: bool = False
    tf32_cvt: bool = False
    bmma_op: str | None = None

    @classmethod
    def parse(cls, name: str) -> MmaConfig:
        try:
            prefix, cd, shape, lay = name.split(".")
            m, rest = shape[1:].split("n")
            n, k = rest.split("k")
            c_type, d_type = cd[:3], cd[3:]
            if len(cd) != 6 or lay[0] not in _LAYOUTS or lay[1] not in _LAYOUTS or len(lay) != 2:
                raise ValueError
        except ValueError:
            raise CaptureError(f"{name!r} is not a WMMA configuration name like "
                               f"'f16.f32f32.m16n16k16.rc'") from None
        kw: dict[str, Any] = {}
        a_type = prefix
        if prefix.startswith("b1") and prefix[2:] in ("xor", "and"):
            a_type, kw["bmma_op"] = "b1", prefix[2:]
        elif prefix.endswith("sat"):
            a_type, kw["satf"] = prefix[:-3], True
        elif prefix == "tf32cvt":
            a_type, kw["tf32_cvt"] = "tf32", True
        elif prefix == "f64chain":  # chained steps: each trial records its own C
            a_type = "f64"

        valid = tuple(e.ab_type for e in table.TABLE)
        if a_type not in valid:
            raise CaptureError(f"{name!r}: A/B type {a_type!r} is not a WMMA type; valid: "
                               f"{valid} (prefixes: sat, tf32cvt, f64chain, b1xor, b1and)")
        for what, t in (("C", c_type), ("D", d_type)):
            if t not in table.ACCUMULATOR_TYPES:
                raise CaptureError(f"{name!r}: {what} type {t!r} is not a WMMA accumulator "
                                   f"type; valid: {table.ACCUMULATOR_TYPES}")
        return cls(name, a_type, c_type, d_type, (int(m), int(n), int(k)),
                   (_LAYOUTS[lay[0]], _LAYOUTS[lay[1]]), **kw)


def run_mma_config(cap: Any, name: str) -> tuple[np.ndarray, np.ndarray]:
    """Runs one capture configuration through jaxwarp's WMMA API.

    Returns:
        (got, want): the stored D of every trial as raw bits, (T, m * n) each.
    """
    cfg = MmaConfig.parse(name)
    et, ct, dt = (table.ELEMENT_TYPES[t] for t in (cfg.a_type, cfg.c_type, cfg.d_type))

    def values(key: str, t) -> np.ndarray:
        v = np.asarray(cap[f"{name}/{key}"])
        return v if v.dtype == t.value_dtype else v.view(t.value_dtype)

    A, B, C = values("A", et), values("B", et), values("C", ct)
    trials = len(A)
    if not (len(B) == len(C) == trials):
        raise CaptureError(f"{name}: A, B and C have different numbers of trials")
    m, n, k = cfg.shape
    if A.shape[1:] != (m, k) or B.shape[1:] != (k, n) or C.shape[1:] != (m, n):
        raise CaptureError(f"{name}: A/B/C shapes {A.shape[1:]}, {B.shape[1:]}, "
                           f"{C.shape[1:]} do not fit {cfg.shape}")
    a_spec = fragment("matrix_a", m, n, k, cfg.a_type, cfg.layouts[0])
    b_spec = fragment("matrix_b", m, n, k, cfg.a_type, cfg.layouts[1])
    c_spec = fragment("accumulator", m, n, k, cfg.c_type)
    a_mems = [wmma.matrix_to_memory(a, cfg.a_type, cfg.layouts[0]) for a in A]
    b_mems = [wmma.matrix_to_memory(b, cfg.a_type, cfg.layouts[1]) for b in B]
    lda, ldb = a_mems[0][1], b_mems[0][1]
    c_mem, ldc = wmma.matrix_to_memory(C.reshape(trials * m, n), cfg.c_type, "mem_row_major")
    c_mem = c_mem.reshape(trials, m * ldc)

    def warp(a_mem, b_mem, c_mem):
        a = wmma.load_matrix_sync(a_spec, a_mem, lda)
        b = wmma.load_matrix_sync(b_spec, b_mem, ldb)
        if cfg.tf32_cvt:  # the kernel ran __float_to_tf32 on every element after loading
            a = a.replace(x=convert.float_to_tf32(a.x))
            b = b.replace(x=convert.float_to_tf32(b.x))
        c = wmma.load_matrix_sync(c_spec, c_mem, ldc, "mem_row_major")
        if cfg.bmma_op:
            d = wmma.bmma_sync(a, b, c, cfg.bmma_op)
        else:
            d = wmma.mma_sync(a, b, c, satf=cfg.satf, d_type=cfg.d_type)
        return wmma.store_matrix_sync(jnp.zeros(m * ldc, dt.memory_dtype), d, ldc,
                                      "mem_row_major")

    out = jax.jit(jax.vmap(warp))(np.stack([a for a, _ in a_mems]),
                                  np.stack([b for b, _ in b_mems]), c_mem)
    got = np.asarray(out).reshape(trials, m, ldc)[:, :, :n].reshape(trials, m * n)
    want = np.asarray(cap[f"{name}/D"]).reshape(trials, m * n)
    return got.view(dt.bits_dtype), want.view(dt.bits_dtype)


_OTHER_FAMILIES = ("ld/", "st/", "ptx/", "wgmma/", "chain/", "cvt/", "ldmatrix/",
                   "stmatrix/", "movmatrix/")


@prefix_handler(lambda key: "/" in key and not key.startswith(_OTHER_FAMILIES))
def _mma(d, keys) -> Iterator[GroupResult]:
    for name in sorted({k.split("/")[0] for k in keys}):
        got, want = run_mma_config(d, name)
        kinds = np.asarray(d[f"{name}/kind"]) if f"{name}/kind" in keys else None
        ok = got == want
        note = ""
        if kinds is not None and not ok.all():
            bad = sorted({str(kd) for kd in kinds[~ok.all(axis=1)]})
            note = "mismatching kinds: " + ", ".join(bad)
        yield GroupResult(f"mma/{name}", int(ok.sum()), int(ok.size), note)


# ---------------------------------------------------------------------------------------
# Where load_matrix_sync reads and store_matrix_sync writes (capture_extra_ldst keys).


def _fragment_of(key: str):
    """``a.f16.m16n16k16.r`` or ``c.f32.m16n16k16.c`` -> (fragment, memory layout)."""
    if key.startswith("c."):
        base, mem = key.rsplit(".", 1)
        return wmma.parse_layout_key(base), {"r": "mem_row_major", "c": "mem_col_major"}[mem]
    spec = wmma.parse_layout_key(key)
    return spec, None


def _load_sources(spec, mem_layout, ldm: int, off: int) -> np.ndarray:
    """Memory index of every element of the fragment loaded at (ldm, off): (32, NE * S)."""
    et = spec.element_type
    lead = spec.rows if (mem_layout or spec.layout) in ("col_major", "mem_col_major") \
        else spec.cols
    outer = spec.cols if lead == spec.rows else spec.rows
    size = off + ldm * outer
    size += -size % 8
    idx = np.arange(size)
    planes = [wmma.matrix_to_memory(((idx >> p) & 1)[None, :].astype(et.value_dtype), spec.type,
                                    "row_major")[0]
              for p in range(max(1, int(size - 1).bit_length()))]
    load = jax.jit(jax.vmap(lambda mem: unpack_values(
        et, wmma.load_matrix_sync(spec, mem, ldm, mem_layout, offset=off).x)))
    vals = np.asarray(load(np.stack(planes))).reshape(len(planes), 32, -1)
    return sum((vals[p] != 0).astype(np.int64) << p for p in range(len(planes)))


@prefix_handler(lambda key: key.startswith("ld/"))
def _ld(d, keys) -> Iterator[GroupResult]:
    for base in sorted({k.rsplit("/", 1)[0] for k in keys}):
        spec, mem_layout = _fragment_of(base[3:])
        ldms, offs, want = d[f"{base}/ldm"], d[f"{base}/off"], d[f"{base}/src"]
        x64 = spec.type == "f64"
        with jax.enable_x64(x64):
            got = np.stack([_load_sources(spec, mem_layout, int(l), int(o))
                            for l, o in zip(ldms, offs, strict=True)])
        yield GroupResult(f"load/{base[3:]}", int((got == want).sum()), int(want.size))


@prefix_handler(lambda key: key.startswith("st/"))
def _st(d, keys) -> Iterator[GroupResult]:
    for base in sorted({k.rsplit("/", 1)[0] for k in keys}):
        spec, mem_layout = _fragment_of(base[3:])
        ldms, offs = d[f"{base}/ldm"], d[f"{base}/off"]
        want, nwritten = d[f"{base}/dst"], d[f"{base}/nwritten"]
        et = spec.element_type
        matched = total = 0
        with jax.enable_x64(spec.type == "f64"):
            ids = np.arange(1, 32 * spec.num_storage_elements + 1).reshape(32, -1)
            frag = spec.replace(x=jnp.asarray(ids.astype(et.storage_dtype)))
            for i, (l, o) in enumerate(zip(ldms, offs, strict=True)):
                outer = spec.cols if mem_layout == "mem_col_major" else spec.rows
                size = int(o) + int(l) * outer
                mem = np.asarray(wmma.store_matrix_sync(
                    jnp.zeros(size, et.memory_dtype), frag, int(l), mem_layout, offset=int(o)))
                where = np.zeros(ids.size + 1, np.int64) - 1
                hit = np.flatnonzero(mem != 0)
                where[mem[hit].astype(np.int64)] = hit
                got = where[ids]
                matched += int((got == want[i]).sum()) + int(len(hit) == int(nwritten[i]))
                total += int(want[i].size) + 1
        yield GroupResult(f"store/{base[3:]}", matched, total)


# The PTX-level families (ptx, wgmma, chains, fp8 cvt, ldmatrix) register themselves here.
from jaxwarp._src.conformance import handlers as _handlers  # noqa: E402,F401


def _open(path: str):
    try:
        if not os.path.exists(path):
            raise FileNotFoundError(path)
        if not stat.S_ISREG(os.stat(path).st_mode):  # a FIFO or device would block or stream
            raise CaptureError(f"{path}: not a regular file (a capture is an .npz file; "
                               f"pipes, devices and folders are refused)")
        if not zipfile.is_zipfile(path):
            raise CaptureError(f"{path}: not a readable .npz capture file (not a zip archive "
                               f"of .npy arrays)")
        d = np.load(path, allow_pickle=False)
        return d, set(d.files)
    except FileNotFoundError as e:
        raise CaptureError(f"{path}: no such capture file") from e
    except _READ_ERRORS as e:
        raise CaptureError(f"{path}: not a readable .npz capture file ({e})") from e


def check_file(path: str, progress: Callable[[GroupResult], None] | None = None
               ) -> tuple[list[GroupResult], str]:
    """Runs the model on one capture file. Returns (results, device name).

    Every key must be understood by a handler: a key none understands becomes an error
    result (``GroupResult.error``), as does a configuration the model cannot run yet.

    Args:
      path: the ``.npz`` capture file.
      progress: called with each result as soon as it is known.

    Raises:
      CaptureError: the file is missing, not an npz, breaks the schema, or has nothing
        to compare (no key besides ``device``).
    """
    d, files = _open(path)
    try:
        device = str(d["device"]) if "device" in files else "unknown device"
    except (*_READ_ERRORS, ValueError) as e:  # e.g. an object array (pickles are refused)
        raise CaptureError(f"{path}: key 'device' cannot be read ({e})") from e
    if not files - {"device"}:
        raise CaptureError(f"{path}: nothing to compare (keys: {sorted(files)}); a capture "
                           f"needs at least one group of outputs")
    results: list[GroupResult] = []
    used = {"device"}
    with jax.enable_x64(True):
        for match, run in _HANDLERS:
            keys = match(files)
            if not keys:
                continue
            try:
                for r in run(d, keys):
                    results.append(r)
                    if progress is not None:
                        progress(r)
            except CaptureError as e:
                raise CaptureError(f"{path}: {e}") from e
            except _READ_ERRORS as e:
                raise CaptureError(f"{path}: not a readable .npz capture file: keys "
                                   f"{sorted(keys)[:4]} cannot be read ({e})") from e
            except (KeyError, IndexError, ValueError, TypeError) as e:
                raise CaptureError(
                    f"{path}: keys {sorted(keys)[:4]} do not follow the capture schema "
                    f"(docs/capture_format.md): {type(e).__name__}: {e}"
                ) from e
            used |= keys
    for k in sorted(files - used):
        try:
            size = int(np.asarray(d[k]).size)
        except (*_READ_ERRORS, ValueError) as e:
            raise CaptureError(f"{path}: key {k!r} cannot be read as a plain array ({e})") from e
        r = GroupResult(f"unhandled/{k}", 0, size,
                        error=f"{path}: no handler understands key {k!r}")
        results.append(r)
        if progress is not None:
            progress(r)
    if not any(r.total or r.skipped or r.error for r in results):
        raise CaptureError(f"{path}: nothing to compare: no key held any output element")
    return results, device


def _pct(matched: int, total: int) -> str:
    return f"{floor_percent(matched, total)}%" if total else "-"


def _row(name: str, total: int, matched: int, flag: str = "", note: str = "") -> str:
    return (f"  {name:<52} {total:>10} {matched:>10} {_pct(matched, total):>9}"
            + (f"  {flag}" if flag else "") + (f"  ({note})" if note else ""))


def _tally(results: Iterable[GroupResult]) -> dict[str, int]:
    t = {"matched": 0, "total": 0, "groups": 0, "mismatched_groups": 0, "error_groups": 0,
         "unchecked_elements": 0, "skipped_groups": 0}
    for r in results:
        t["groups"] += 1
        if r.error:
            t["error_groups"] += 1
            t["unchecked_elements"] += r.total
        elif r.skipped:
            t["skipped_groups"] += 1
        else:
            t["matched"] += r.matched
            t["total"] += r.total
            t["mismatched_groups"] += r.matched != r.total
    return t


def format_file(path: str, device: str, results: list[GroupResult]) -> list[str]:
    """The table of one file: a row per group, a subtotal per family, errors listed."""
    lines = [f"# {path} (captured on {device}; model on {jax.default_backend()})",
             f"  {'config':<52} {'elements':>10} {'exact':>10} {'%':>9}"]
    families: dict[str, list[GroupResult]] = {}
    for r in results:
        families.setdefault(r.family, []).append(r)
    for fam, rs in families.items():
        for r in rs:
            if r.error:
                lines.append(f"  {r.group:<52} {r.total or '-':>10} {'-':>10} {'-':>9}  "
                             f"ERROR  ({r.error})")
            elif r.skipped:
                lines.append(f"  {r.group:<52} {'-':>10} {'-':>10} {'-':>9}  not compared"
                             f"  ({r.note})")
            else:
                lines.append(_row(r.group, r.total, r.matched,
                                  "" if r.ok else "MISMATCH", r.note))
        t = _tally(rs)
        extra = []
        if t["error_groups"]:
            extra.append(f"{t['error_groups']} group(s) NOT CHECKED (errors)")
        if t["skipped_groups"]:
            extra.append(f"{t['skipped_groups']} not recorded")
        lines.append(f"  = {fam}: {t['matched']}/{t['total']} bit-exact "
                     f"({_pct(t['matched'], t['total'])})"
                     + (f"; {'; '.join(extra)}" if extra else ""))
    return lines


class _Progress:
    """A progress bar on stderr: tqdm when installed, else a plain counter line."""

    def __init__(self, desc: str, enabled: bool):
        self.bar = None
        self.n = 0
        self.desc = desc
        self.enabled = enabled
        if enabled:
            try:
                from tqdm import tqdm
                self.bar = tqdm(desc=desc, unit="group", file=sys.stderr, leave=False)
            except ImportError:
                self.bar = None

    def __call__(self, r: GroupResult) -> None:
        self.n += 1
        if self.bar is not None:
            self.bar.set_postfix_str(r.group[-40:], refresh=False)
            self.bar.update(1)
        elif self.enabled:
            print(f"\r{self.desc}: {self.n} groups ({r.group[-40:]})", end="", file=sys.stderr,
                  flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        elif self.enabled and self.n:
            print(file=sys.stderr)


def main(argv: Iterable[str] | None = None) -> int:
    """The command line. Exit status: 0 every element of every file matched; 1 some element
    mismatched; 2 an error (unreadable file, nothing to compare, an unknown key, a
    configuration the model cannot run). Errors win over mismatches."""
    import argparse

    p = argparse.ArgumentParser(
        prog="python -m jaxwarp.conformance",
        description="Compare jaxwarp bit for bit with GPU captures (docs/conformance.md).",
    )
    p.add_argument("files", nargs="+", metavar="FILE.npz", help="capture files")
    p.add_argument("--json", metavar="PATH", help="also write every count as JSON")
    p.add_argument("--backend", choices=("cpu", "gpu"),
                   help="the JAX backend that runs the model (default: JAX's default)")
    p.add_argument("--progress", choices=("auto", "on", "off"), default="auto",
                   help="progress bar on stderr (auto: when stderr is a terminal)")
    args = p.parse_args(list(argv) if argv is not None else None)
    if args.json:  # checked before the (long) run, not after it
        parent = os.path.dirname(os.path.abspath(args.json))
        if not os.path.isdir(parent) or not os.access(parent, os.W_OK):
            print(f"error: --json {args.json}: folder {parent} does not exist or is not "
                  f"writable", file=sys.stderr)
            return 2
    if args.backend:
        try:
            device = jax.devices(args.backend)[0]
        except RuntimeError as e:
            print(f"error: --backend {args.backend}: no such JAX backend here ({e})",
                  file=sys.stderr)
            return 2
    else:
        device = jax.devices()[0]
    show = args.progress == "on" or (args.progress == "auto" and sys.stderr.isatty())
    report: dict[str, Any] = {"backend": device.platform, "files": []}
    all_results: list[GroupResult] = []
    file_errors: list[str] = []
    with jax.default_device(device):
        for path in args.files:
            bar = _Progress(os.path.basename(path), show)
            try:
                results, dev = check_file(path, bar)
            except CaptureError as e:
                bar.close()
                print(f"error: {e}", file=sys.stderr)
                file_errors.append(str(e))
                report["files"].append({"path": path, "error": str(e)})
                continue
            bar.close()
            print("\n".join(format_file(path, dev, results)))
            for r in results:
                if r.error:
                    print(f"error: {path}: {r.group}: {r.error}", file=sys.stderr)
            all_results.extend(results)
            t = _tally(results)
            report["files"].append({
                "path": path, "device": dev, **t,
                "percent": floor_percent(t["matched"], t["total"]) if t["total"] else None,
                "groups_detail": [dataclasses.asdict(r) for r in results]})
    t = _tally(all_results)
    pct = floor_percent(t["matched"], t["total"]) if t["total"] else None
    report.update(t, percent=pct, file_errors=len(file_errors))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    line = (f"conformance: {t['matched']}/{t['total']} bit-exact ({pct}%)" if t["total"]
            else "conformance: nothing was compared")
    extra = []
    if t["mismatched_groups"]:
        extra.append(f"{t['mismatched_groups']} group(s) MISMATCH")
    if t["error_groups"]:
        extra.append(f"{t['error_groups']} group(s) with {t['unchecked_elements']} elements "
                     f"NOT CHECKED (errors)")
    if file_errors:
        extra.append(f"{len(file_errors)} file(s) unreadable or empty (errors)")
    if t["skipped_groups"]:
        extra.append(f"{t['skipped_groups']} form(s) not recorded on the GPU")
    print(line + ("; " + "; ".join(extra) if extra else ""))
    if file_errors or t["error_groups"] or not t["total"]:
        return 2
    return 0 if t["matched"] == t["total"] else 1
