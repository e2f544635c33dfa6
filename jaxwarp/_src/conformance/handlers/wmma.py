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

from jaxwarp._src.catalogue import isa
from jaxwarp._src.catalogue import wmma_table as table
from jaxwarp._src.conformance import targets
from jaxwarp._src.conformance.registry import CaptureError, GroupResult
from jaxwarp._src.instructions import wmma
from jaxwarp._src.layouts.fragment_storage import unpack_values
from jaxwarp._src.layouts.fragment_types import fragment
from jaxwarp._src.numerics import convert


def is_layout_key(key: str) -> bool:
    """``a.f16.m16n16k16.r``-style keys of ``layout.npz``."""
    parts = key.split(".")
    return "/" not in key and len(parts) in (3, 4) and parts[0] in ("a", "b", "c")


def fragment_refusal(d, spec) -> str:
    """Why the capture's GPU cannot have used WMMA fragment ``spec`` (``""``: it can).

    An accumulator fragment goes with every operand type whose C/D types include its
    type (``wmma_table``): it is refused only when the GPU has none of them.
    """
    if spec.use != "accumulator":
        return targets.refusal(d, "wmma", spec.type)
    why = [targets.refusal(d, "wmma", e.operand_format) for e in table.TABLE
           if spec.type in e.accumulator_types]
    return "" if not why or not all(why) else why[0]


def layouts(d, keys) -> Iterator[GroupResult]:
    """Fragment layouts: which lane holds which element, per layout key."""
    for key in sorted(keys):
        why = fragment_refusal(d, wmma.parse_layout_key(key))
        if why:
            yield GroupResult(f"layout/{key}", 0, int(np.asarray(d[key]).size), error=why)
            continue
        m, t = wmma.layout_conformance(key, d[key])
        yield GroupResult(f"layout/{key}", m, t)


_LAYOUTS = {"r": "row_major", "c": "col_major"}


@dataclasses.dataclass(frozen=True)
class MmaConfig:
    """A parsed capture configuration name such as ``f16.f32f32.m16n16k16.rc``."""

    name: str
    a_format: str
    c_format: str
    d_format: str
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
            c_format, d_format = cd[:3], cd[3:]
            if len(cd) != 6 or lay[0] not in _LAYOUTS or lay[1] not in _LAYOUTS or len(lay) != 2:
                raise ValueError
        except ValueError:
            raise CaptureError(f"{name!r} is not a WMMA configuration name like "
                               f"'f16.f32f32.m16n16k16.rc'") from None
        kw: dict[str, Any] = {}
        a_format = prefix
        if prefix.startswith("b1") and prefix[2:] in isa.B1_OPS:
            a_format, kw["bmma_op"] = "b1", prefix[2:]
        elif prefix.endswith("sat"):
            a_format, kw["satf"] = prefix[:-3], True
        elif prefix == "tf32cvt":
            a_format, kw["tf32_cvt"] = "tf32", True
        elif prefix == "f64chain":  # chained steps: each trial records its own C
            a_format = "f64"

        valid = tuple(e.operand_format for e in table.TABLE)
        if a_format not in valid:
            raise CaptureError(f"{name!r}: A/B type {a_format!r} is not a WMMA type; valid: "
                               f"{valid} (prefixes: sat, tf32cvt, f64chain, b1xor, b1and)")
        for what, t in (("C", c_format), ("D", d_format)):
            if t not in table.ACCUMULATOR_TYPES:
                raise CaptureError(f"{name!r}: {what} type {t!r} is not a WMMA accumulator "
                                   f"type; valid: {table.ACCUMULATOR_TYPES}")
        return cls(name, a_format, c_format, d_format, (int(m), int(n), int(k)),
                   (_LAYOUTS[lay[0]], _LAYOUTS[lay[1]]), **kw)


def run_mma_config(cap: Any, name: str) -> tuple[np.ndarray, np.ndarray]:
    """Runs one capture configuration through jaxwarp's WMMA API.

    Returns:
        (got, want): the stored D of every trial as raw bits, (T, m * n) each.

    Raises:
        CaptureError: a name or shapes that do not follow the schema, or zero trials.
    """
    cfg = MmaConfig.parse(name)
    et, ct, dt = (table.ELEMENT_TYPES[t] for t in (cfg.a_format, cfg.c_format, cfg.d_format))

    def values(key: str, t) -> np.ndarray:
        v = np.asarray(cap[f"{name}/{key}"])
        return v if v.dtype == t.value_dtype else v.view(t.value_dtype)

    A, B, C = values("A", et), values("B", et), values("C", ct)
    trials = len(A)
    if trials == 0:
        raise CaptureError(f"{name} has zero trials (A is empty): nothing to compare")
    if not (len(B) == len(C) == trials):
        raise CaptureError(f"{name}: A, B and C have different numbers of trials")
    m, n, k = cfg.shape
    if A.shape[1:] != (m, k) or B.shape[1:] != (k, n) or C.shape[1:] != (m, n):
        raise CaptureError(f"{name}: A/B/C shapes {A.shape[1:]}, {B.shape[1:]}, "
                           f"{C.shape[1:]} do not fit {cfg.shape}")
    a_spec = fragment("matrix_a", m, n, k, cfg.a_format, cfg.layouts[0])
    b_spec = fragment("matrix_b", m, n, k, cfg.a_format, cfg.layouts[1])
    c_spec = fragment("accumulator", m, n, k, cfg.c_format)
    a_mems = [wmma.matrix_to_memory(a, cfg.a_format, cfg.layouts[0]) for a in A]
    b_mems = [wmma.matrix_to_memory(b, cfg.a_format, cfg.layouts[1]) for b in B]
    lda, ldb = a_mems[0][1], b_mems[0][1]
    c_mem, ldc = wmma.matrix_to_memory(C.reshape(trials * m, n), cfg.c_format, "mem_row_major")
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
            d = wmma.mma_sync(a, b, c, satf=cfg.satf, d_format=cfg.d_format)
        return wmma.store_matrix_sync(jnp.zeros(m * ldc, dt.memory_dtype), d, ldc,
                                      "mem_row_major")

    out = jax.jit(jax.vmap(warp))(np.stack([a for a, _ in a_mems]),
                                  np.stack([b for b, _ in b_mems]), c_mem)
    got = np.asarray(out).reshape(trials, m, ldc)[:, :, :n].reshape(trials, m * n)
    want = np.asarray(cap[f"{name}/D"]).reshape(trials, m * n)
    return got.view(dt.bits_dtype), want.view(dt.bits_dtype)


def mma_configs(d, keys) -> Iterator[GroupResult]:
    """Every WMMA configuration of the file through the whole warp program."""
    for name in sorted({k.split("/")[0] for k in keys}):
        cfg = MmaConfig.parse(name)
        n_out = int(np.asarray(d[f"{name}/D"]).size)
        if n_out == 0:
            yield GroupResult(f"mma/{name}", 0, 0, error=f"{name} has zero trials (D is "
                              f"empty): nothing to compare")
            continue
        why = targets.refusal(d, "wmma", cfg.a_format)
        if why:
            yield GroupResult(f"mma/{name}", 0, n_out, error=why)
            continue
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


# The memory a load or store case may span, in elements. The load check builds one image
# of the span per address bit, the store check one buffer; the captures span fewer than
# 2**13 elements, and a bound here keeps a corrupt ldm from allocating without limit.
MAX_SPAN = 1 << 20


def _leading(spec, mem_layout) -> tuple[int, int]:
    """(inner, outer): the extent along ``ldm``'s rows (or columns) and their count."""
    col = (mem_layout or spec.layout) in ("col_major", "mem_col_major")
    return (spec.rows, spec.cols) if col else (spec.cols, spec.rows)


def case_problem(base: str, spec, mem_layout, what: str, i: int, ldm: int, off: int) -> str:
    """Why case ``i`` (``ldm``, ``off``) of key ``base`` cannot be run (``""``: it can).

    Checked before any memory is allocated: ``what`` (``load_matrix_sync`` or
    ``store_matrix_sync``) needs ``ldm`` a positive multiple of 16 bytes and at least
    the tile's leading extent, and ``off`` a non-negative multiple of 32 bytes (from the
    WMMA element table); the span of the case is at most `MAX_SPAN` elements.

    Example:
      >>> spec = wmma.parse_layout_key("a.f16.m16n16k16.r")
      >>> print(case_problem("ld/K", spec, None, "load_matrix_sync", 0, 12, 0))
      ld/K/ldm[0] = 12: load_matrix_sync needs a positive multiple of 8 elements (16 bytes)
      for f16
      >>> print(case_problem("ld/K", spec, None, "load_matrix_sync", 3, 2**30, 0))
      ld/K: case 3 (ldm=1073741824, off=0) spans 16106127376 elements (off + (16 - 1) *
      ldm + 16); at most 1048576 are allowed (the check builds memory images of the span)
    """
    et = spec.element_type
    inner, outer = _leading(spec, mem_layout)
    if ldm <= 0 or ldm % et.ldm_multiple:
        return (f"{base}/ldm[{i}] = {ldm}: {what} needs a positive multiple of "
                f"{et.ldm_multiple} elements (16 bytes) for {spec.type}")
    if ldm < inner:
        return f"{base}/ldm[{i}] = {ldm} is smaller than the tile's leading extent {inner}"
    if off < 0 or off % et.align_elements:
        return (f"{base}/off[{i}] = {off}: {what} needs a non-negative multiple of "
                f"{et.align_elements} elements (a 32-byte aligned pointer) for {spec.type}")
    span = off + (outer - 1) * ldm + inner
    if span > MAX_SPAN:
        return (f"{base}: case {i} (ldm={ldm}, off={off}) spans {span} elements "
                f"(off + ({outer} - 1) * ldm + {inner}); at most {MAX_SPAN} are allowed (the "
                f"check builds memory images of the span)")
    return ""


def _cases(d, base: str, spec, mem_layout, what: str
           ) -> tuple[list[tuple[int, int]], str]:
    """The (ldm, off) pairs of key ``base`` as ints, and why they cannot be run (or "")."""
    ldms, offs = np.asarray(d[f"{base}/ldm"]), np.asarray(d[f"{base}/off"])
    if ldms.ndim != 1 or ldms.shape != offs.shape:
        raise CaptureError(f"{base}/ldm and {base}/off must be (L,) arrays of the same "
                           f"length; got shapes {ldms.shape} and {offs.shape}")
    cases = [(int(ldm), int(off)) for ldm, off in zip(ldms.tolist(), offs.tolist(), strict=True)]
    if not cases:
        return cases, f"{base} has zero cases: nothing to compare"
    why = fragment_refusal(d, spec)
    for i, (ldm, off) in enumerate(cases):
        why = why or case_problem(base, spec, mem_layout, what, i, ldm, off)
    return cases, why


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
        want = d[f"{base}/src"]
        cases, why = _cases(d, base, spec, mem_layout, "load_matrix_sync")
        if why:
            yield GroupResult(f"load/{base[3:]}", 0, int(want.size), error=why)
            continue
        x64 = spec.type == "f64"
        with jax.enable_x64(x64):
            got = np.stack([_load_sources(spec, mem_layout, l, o) for l, o in cases])
        yield GroupResult(f"load/{base[3:]}", int((got == want).sum()), int(want.size))


def stores(d, keys) -> Iterator[GroupResult]:
    """``st/{accumulator}.{r,c}/{ldm,off,dst,nwritten}``: where each stored element landed."""
    for base in sorted({k.rsplit("/", 1)[0] for k in keys}):
        spec, mem_layout = _fragment_of(base[3:])
        want, nwritten = d[f"{base}/dst"], d[f"{base}/nwritten"]
        cases, why = _cases(d, base, spec, mem_layout, "store_matrix_sync")
        if why:
            yield GroupResult(f"store/{base[3:]}", 0, int(want.size) + len(nwritten),
                              error=why)
            continue
        et = spec.element_type
        matched = total = 0
        with jax.enable_x64(spec.type == "f64"):
            ids = np.arange(1, 32 * spec.num_storage_elements + 1).reshape(32, -1)
            frag = spec.replace(x=jnp.asarray(ids.astype(et.storage_dtype)))
            for i, (l, o) in enumerate(cases):
                outer = spec.cols if mem_layout == "mem_col_major" else spec.rows
                size = o + l * outer
                mem = np.asarray(wmma.store_matrix_sync(
                    jnp.zeros(size, et.memory_dtype), frag, l, mem_layout, offset=o))
                where = np.zeros(ids.size + 1, np.int64) - 1
                hit = np.flatnonzero(mem != 0)
                where[mem[hit].astype(np.int64)] = hit
                got = where[ids]
                matched += int((got == want[i]).sum()) + int(len(hit) == int(nwritten[i]))
                total += int(want[i].size) + 1
        yield GroupResult(f"store/{base[3:]}", matched, total)
