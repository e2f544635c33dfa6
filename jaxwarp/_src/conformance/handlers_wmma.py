"""Conformance handlers for the WMMA captures (CUDA ``nvcuda::wmma``).

* ``a.*``, ``b.*``, ``c.*`` (``layout.npz``): fragment layouts;
* ``{config}/{A,B,C,D[,kind]}`` (``mma_fp.npz``, ``mma_int.npz``, ...): every
  configuration goes through the whole warp program, as the capture did:
  ``load_matrix_sync`` (with the capture's layouts) -> ``mma_sync``/``bmma_sync`` ->
  ``store_matrix_sync``;
* ``ld/...``, ``st/...`` (``capture_extra_ldst.npz``): where ``load_matrix_sync`` reads
  and ``store_matrix_sync`` writes for a given ``ldm`` and offset.

Schema: ``docs/capture_format.md`` and ``tools/capture/FORMAT_EXTRA.md``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxwarp._src.conformance.registry import CaptureError, GroupResult
from jaxwarp._src.numerics import formats
from jaxwarp._src.tensorcore import wmma
from jaxwarp._src.tensorcore import wmma_table as table
from jaxwarp._src.tensorcore.fragments import fragment, unpack_values


def is_layout_key(key: str) -> bool:
    """``a.f16.m16n16k16.r``-style keys of ``layout.npz``."""
    parts = key.split(".")
    return "/" not in key and len(parts) in (3, 4) and parts[0] in ("a", "b", "c")


def layouts(d, keys) -> Iterator[GroupResult]:
    """Fragment layouts: which lane holds which element, per layout key."""
    for key in sorted(keys):
        m, t = wmma.layout_conformance(key, d[key])
        yield GroupResult(f"layout/{key}", m, t)


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
            a = a.replace(x=formats.float_to_tf32(a.x))
            b = b.replace(x=formats.float_to_tf32(b.x))
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


# Key families with a '/' that other handlers own.
_OTHER_FAMILIES = ("ld/", "st/", "ptx/", "wgmma/", "chain/", "cvt/", "ldmatrix/",
                   "stmatrix/", "movmatrix/")


def is_mma_key(key: str) -> bool:
    """``{config}/{A,B,C,D,kind}`` keys (a ``/`` and no other family's prefix)."""
    return "/" in key and not key.startswith(_OTHER_FAMILIES)


def mma_configs(d, keys) -> Iterator[GroupResult]:
    """Every WMMA configuration of the file through the whole warp program."""
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


def loads(d, keys) -> Iterator[GroupResult]:
    """``ld/{fragment}/{ldm,off,src}``: the memory element each loaded element came from."""
    for base in sorted({k.rsplit("/", 1)[0] for k in keys}):
        spec, mem_layout = _fragment_of(base[3:])
        ldms, offs, want = d[f"{base}/ldm"], d[f"{base}/off"], d[f"{base}/src"]
        x64 = spec.type == "f64"
        with jax.enable_x64(x64):
            got = np.stack([_load_sources(spec, mem_layout, int(l), int(o))
                            for l, o in zip(ldms, offs, strict=True)])
        yield GroupResult(f"load/{base[3:]}", int((got == want).sum()), int(want.size))


def stores(d, keys) -> Iterator[GroupResult]:
    """``st/{accumulator}.{r,c}/{ldm,off,dst,nwritten}``: where each stored element landed."""
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
