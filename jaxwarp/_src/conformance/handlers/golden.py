"""Conformance handlers for reference-model files (``golden/...`` keys, MMA-Sim).

The files come from ``tools/crosscheck`` (outputs of MMA-Sim, Xie et al., arXiv
2511.10909, a published bit-accurate model of NVIDIA tensor cores); key grammar in
``golden_keys``. A match here means "agrees with MMA-Sim", not "agrees with hardware":
every result carries ``source`` naming the reference model, and the report keeps the
two apart.

* ``mma``: ``mma_sync_ptx_logical`` on the logical matrices with the target of the architecture
  (``golden_keys.ARCH_TARGETS``). A configuration is *modelled* when jaxwarp's
  catalogue has its row (``isa.row_of``) and an ``ArchModel`` for the target has the
  row's datapath (:func:`model_status`); the rest are reported as not modelled, with
  their element counts, never as passed.
* ``tcgen05``: ``tcgen05_mma_logical(qualifier, A bits, B bits, C, arch=...)`` with
  MMA-Sim's qualifier, when the catalogue has the operand types
  (``isa.a_formats("tcgen05")``), else not modelled.
* ``mma_block_scale``, ``tcgen05_block_scale``: ``block_scale.from_golden`` (logical form
  of the block-scaled instructions), where ``block_scale.parse_qualifier`` takes the
  qualifier.
* ``mfma`` (AMD: ``golden/mfma/{CDNA1,CDNA2,CDNA3}/{suffix}``): ``mfma_logical(suffix, A
  bits, B bits, C bits, arch=...)``; every suffix of the catalogue
  (``catalogue/mfma_table.py``) is modelled.

Bits are compared exactly (MMA-Sim writes every f32/f16 NaN as 0x7FFFFFFF / 0x7FFF, as
jaxwarp's datapaths do), with one rule of the reference model stated here: MMA-Sim's
f64 is a chain of the host CPU's fp64 fmas and defines no NaN bits, so an f64 output
that is NaN on both sides counts as a match (the note says how many). Likewise MMA-Sim's
AMD datapaths other than CDNA3's truncated fused sums (``mfma.NAN_EXACT_KINDS``: the fma
chains, CDNA1's exact sums, CDNA2's flush-to-zero chain) compute with the host's floats
and pass on an operand's NaN payload as the host's arithmetic does. jaxwarp writes an
x86-64 host's NaN there (bit for bit on MMA-Sim's AMD files), but the bits are the host's,
not the hardware's: a NaN on both sides with other bits counts as a match, with a note.
"""

from __future__ import annotations

import collections
import re
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxwarp._src.arithmetic import block_scale
from jaxwarp._src.arithmetic.mfma import NAN_EXACT_KINDS
from jaxwarp._src.catalogue import arch, isa, mfma_table
from jaxwarp._src.conformance import golden_keys as G
from jaxwarp._src.conformance.registry import CaptureError, GroupResult
from jaxwarp._src.instructions import mma_sync
from jaxwarp._src.instructions.amd.mfma import mfma_logical
from jaxwarp._src.instructions.tcgen05 import tcgen05_mma_logical
from jaxwarp._src.numerics.formats import FORMATS

_MMASIM = re.compile(r"MMA-Sim\s+\S+")


def source_of(cap: Any) -> str:
    """``GroupResult.source`` of a reference-model file: ``"MMA-Sim 2.1.1 (reference
    model)"`` when its ``device`` names MMA-Sim and its version, else ``"reference
    model"``.

    Example:
      >>> source_of({"device": np.array("MMA-Sim 2.1.1 (reference model, not hardware)")})
      'MMA-Sim 2.1.1 (reference model)'
    """
    device = str(np.asarray(cap["device"])) if "device" in cap else ""
    m = _MMASIM.search(device)
    return f"{m.group(0)} (reference model)" if m else "reference model"


def model_status(name: G.GoldenName) -> str:
    """Why jaxwarp cannot run ``name`` in this version (``""``: it is modelled).

    Read from jaxwarp's catalogue (``isa.ROWS``) and datapath presets (``arch.ARCHS``),
    never from a list of names.

    Raises:
      CaptureError: the catalogue says the architecture cannot issue the configuration
        (a mislabelled file).

    Example:
      >>> model_status(G.parse_golden_name("mma", "Hopper", "m16n8k16.f32.bf16.bf16.f32"))
      ''
      >>> model_status(G.parse_golden_name("mma_block_scale", "RTX_Blackwell",
      ...     "m16n8k64.kind::mxf4.block32.f32.e2m1.e2m1.f32.ue8m0"))
      ''
    """
    if name.family == "mfma":
        return ""  # parse_golden_name found the catalogue's row
    if name.family.endswith("block_scale"):
        try:
            q = block_scale.parse_qualifier(name.family, name.qualifier)
        except ValueError as e:
            return f"block-scaled {name.family} {name.qualifier} is not modelled: {e}"
        targets = block_scale.block_scale_row(q["instruction"], q["kind"]).targets
        if name.target not in targets:
            issuers = [a for a, t in G.ARCH_TARGETS.items() if t in targets]
            raise CaptureError(
                f"{name.arch} ({name.target}) cannot issue block-scaled "
                f"{q['instruction']} kind::{q['kind']}: it is on {targets} "
                f"({', '.join(issuers) or 'no architecture of the files'})")
        return ""
    if name.family == "tcgen05":
        missing = [t for t in dict.fromkeys((name.a_format, name.b_format))
                   if t not in isa.a_formats("tcgen05")]
        if missing:
            return f"tcgen05.mma with {missing} operands is not in jaxwarp's catalogue"
        return ""
    if name.kind and name.kind != "f8f6f4":
        return f"mma.sync kind::{name.kind} is not modelled in this version"
    model = arch.ARCHS.get(name.target)
    if model is None:
        return (f"no datapath model for {name.target} ({name.arch}) in this version; "
                f"modelled targets: {tuple(arch.ARCHS)}")
    for t in dict.fromkeys((name.a_format, name.b_format)):
        if t not in isa.a_formats("mma_sync"):
            return f"mma.sync with {t} operands is not in jaxwarp's catalogue"
    row = isa.row_of("mma_sync", name.a_format, (name.m, name.n, name.k), kind=name.kind or None,
                     b_format=name.b_format)
    if (row is None or name.b_format not in row.b_formats(name.a_format)
            or (name.c_format, name.d_format) not in row.cd):
        return (f"mma.sync {name.ptx_qualifier} is not in jaxwarp's catalogue (isa.ROWS)")
    try:
        arch.check_target(arch.parse_target(name.target), "mma_sync", name.a_format,
                          name.b_format, name.k)
    except ValueError as e:
        raise CaptureError(f"{name.group}: {name.arch} cannot issue it: {e}") from e
    if row.datapath in isa.EXACT_DATAPATHS:
        return ""
    try:
        model.datapath(row.datapath)
    except ValueError as e:
        return str(e)
    return ""


def _read(cap: Any, name: G.GoldenName, subs: set[str]) -> tuple[dict[str, np.ndarray], int]:
    """The group's fields, checked against the qualifier: dtypes, shapes, trial counts."""
    need = G.FIELDS + (G.SCALE_FIELDS if name.block else ())
    missing = [f for f in need if f not in subs]
    if missing:
        raise CaptureError(f"{name.group}: missing field(s) "
                           f"{[f'{name.group}/{f}' for f in missing]}; a group needs "
                           f"{list(need)} (optional: {list(G.OPTIONAL_FIELDS)})")
    unknown = sorted(subs - set(need) - set(G.OPTIONAL_FIELDS))
    if unknown:
        raise CaptureError(f"{name.group}: field(s) {[f'{name.group}/{f}' for f in unknown]} "
                           f"are not in the schema; known: {list(need + G.OPTIONAL_FIELDS)}")
    out: dict[str, np.ndarray] = {}
    trials = None
    for f, shape in name.field_shapes().items():
        key = f"{name.group}/{f}"
        x = np.asarray(cap[key])
        t = name.field_type(f)
        want = G.raw_dtype(t)
        if x.dtype != want:
            raise CaptureError(f"{key}: {t} is stored as {want.name}; got {x.dtype}")
        if x.ndim != 1 + len(shape) or tuple(x.shape[1:]) != shape:
            raise CaptureError(f"{key} has shape {x.shape}; the qualifier says "
                               f"(T, {', '.join(map(str, shape))})")
        if trials is None:
            trials = len(x)
        elif len(x) != trials:
            raise CaptureError(f"{key} has {len(x)} trials; {name.group}/A has {trials}")
        out[f] = x
    if "kind" in subs:
        kinds = np.asarray(cap[f"{name.group}/kind"])
        if kinds.shape != (trials,) or kinds.dtype.kind not in "US":
            raise CaptureError(f"{name.group}/kind must be {trials} strings; got "
                               f"{kinds.dtype} of shape {kinds.shape}")
        out["kind"] = kinds
    return out, int(trials)


def _values(x: np.ndarray, t: str) -> jnp.ndarray:
    return jnp.asarray(x.view(FORMATS[t].storage_dtype))


def _codes(x: np.ndarray, t: str) -> jnp.ndarray:
    """An operand as jaxwarp takes it: fp6 / fp4 codes of ``kind::f8f6f4`` moved down
    from their bits in the byte (e2m1 sits in bits 5:2)."""
    return _values(FORMATS[t].code_in_byte(x) if FORMATS[t].unpacked_lsb else x, t)


def _run(name: G.GoldenName, f: dict[str, np.ndarray]) -> np.ndarray:
    """D from jaxwarp, as raw bits (T, M, N)."""
    if name.family == "mfma":
        with jax.enable_x64(name.d_format == "f64"):
            d = mfma_logical(name.qualifier, *(jnp.asarray(f[x]) for x in "ABC"),
                             arch=name.arch)
            return np.asarray(d).view(G.raw_dtype(name.d_format))
    c = _values(f["C"], name.c_format)
    if name.family.endswith("block_scale"):
        d = block_scale.from_golden(name.family, name.qualifier, *(f[x] for x in (
            "A", "B", "C", "SA", "SB")))
    elif name.family == "mma":
        a, b = (_codes(f[x], name.field_type(x)) for x in ("A", "B"))
        d = mma_sync.mma_sync_ptx_logical(name.ptx_qualifier, a, b, c, arch=name.target)
    else:  # tcgen05: MMA-Sim's qualifier, raw bits
        d = tcgen05_mma_logical(name.qualifier, jnp.asarray(f["A"]), jnp.asarray(f["B"]), c,
                                arch=name.target)
    return np.asarray(d).view(G.raw_dtype(name.d_format))


def _compare(name: G.GoldenName, got: np.ndarray, want: np.ndarray) -> tuple[np.ndarray, str]:
    ok = got == want
    if name.family == "mfma" and name.d_format == "f32":
        kind = mfma_table.mfma_row(name.qualifier, name.arch).datapath.kind
        if kind in NAN_EXACT_KINDS:
            return ok, ""
        both_nan = np.isnan(got.view(np.float32)) & np.isnan(want.view(np.float32))
        n = int((both_nan & ~ok).sum())
        note = (f"{n} f32 NaN with other bits than MMA-Sim's (its host's NaN, {kind} "
                f"datapath) counted as NaN") if n else ""
        return ok | both_nan, note
    if name.d_format != "f64":
        return ok, ""
    both_nan = np.isnan(got.view(np.float64)) & np.isnan(want.view(np.float64))
    n = int((both_nan & ~ok).sum())
    note = f"{n} f64 NaN with other bits than MMA-Sim's (host fma) counted as NaN" if n else ""
    return ok | both_nan, note


def _kind_note(kinds: np.ndarray | None, ok: np.ndarray) -> str:
    if kinds is None or ok.all():
        return ""
    bad = collections.Counter(str(x) for x in kinds[~ok.reshape(len(ok), -1).all(axis=1)])
    return "mismatching trials by kind: " + ", ".join(f"{k} {v}" for k, v in sorted(bad.items()))


def configs(cap: Any, keys: set) -> Iterator[GroupResult]:
    """Every ``golden/...`` group of the file: compared, not modelled, or an error."""
    source = source_of(cap)
    groups: dict[str, set[str]] = collections.defaultdict(set)
    for key in keys:
        parts = G.split_golden_key(key)
        if parts is None:
            yield GroupResult(key, 0, 0, error=f"key {key!r} is not golden/{{family}}/{{arch}}"
                              f"/{{qualifier}}/{{field}}", source=source)
            continue
        groups["/".join(parts[:3])].add(parts[3])
    for group, subs in sorted(groups.items()):
        n_out = int(np.asarray(cap[f"golden/{group}/D"]).size) if "D" in subs else 0
        try:
            name = G.parse_golden_name(*group.split("/"))
            fields, trials = _read(cap, name, subs)
            if trials == 0:
                raise CaptureError(f"golden/{group} has zero trials: nothing to compare")
            why = model_status(name)
        except CaptureError as e:
            yield GroupResult(f"golden/{group}", 0, n_out, error=str(e), source=source)
            continue
        if why:
            yield GroupResult(name.group, 0, n_out, note=why, not_modelled=True, source=source)
            continue
        try:
            got = _run(name, fields)
        except (TypeError, ValueError, NotImplementedError) as e:
            yield GroupResult(name.group, 0, n_out, error=f"the model refused it: "
                              f"{type(e).__name__}: {e}", source=source)
            continue
        ok, nan_note = _compare(name, got, fields["D"])
        note = "; ".join(x for x in (_kind_note(fields.get("kind"), ok), nan_note) if x)
        yield GroupResult(name.group, int(ok.sum()), int(ok.size), note, source=source)
