"""Conformance handlers for the fp8 conversion and warp matrix-move captures.

* ``cvt/...`` (``cvt_fp8.npz``): every fp8 conversion form (PTX ``cvt`` forms and the
  ``cuda_fp8.h`` intrinsics) through ``jaxwarp._src.numerics.fp8`` and ``fp8_intrinsics``;
* ``ldmatrix/...``, ``stmatrix/...``, ``movmatrix/...`` (``ldmatrix.npz``): through
  ``jaxwarp._src.layouts.ldmatrix``.

Schema: ``tools/capture/FORMAT_MOVCVT.md``. A form the capture could not record (the
file keeps the toolchain's error) is listed as not compared, never as a pass.
"""

from __future__ import annotations

import collections
import functools
from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxwarp._src.conformance.registry import CaptureError, GroupResult, count
from jaxwarp._src.layouts import ldmatrix
from jaxwarp._src.numerics import fp8, fp8_intrinsics

# ---------------------------------------------------------------------------------------
# fp8 conversions (cvt_fp8.npz).


def _split_halves(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, np.uint32)
    return np.stack([x & 0xFFFF, x >> 16], -1).astype(np.uint16)


def _join_halves(h: jax.Array) -> np.ndarray:
    u = np.asarray(h).view(np.uint16).astype(np.uint32)
    return u[..., 0] | (u[..., 1] << 16)


_NV_FORMS: dict[str, tuple[str, Callable[..., Any]]] = {
    # name -> (input kind, fn(x, fmt, sat) -> raw result)
    "nv_cvt_float_to_fp8": ("f32", lambda x, f, s: fp8_intrinsics.float_to_fp8(x, f, s)),
    "nv_cvt_float2_to_fp8x2": (
        "f32pair", lambda x, f, s: fp8_intrinsics.float2_to_fp8x2(x, f, s)),
    "nv_cvt_halfraw_to_fp8": ("f16", lambda x, f, s: fp8_intrinsics.halfraw_to_fp8(x, f, s)),
    "nv_cvt_halfraw2_to_fp8x2": (
        "f16x2", lambda x, f, s: fp8_intrinsics.halfraw2_to_fp8x2(_split_halves(x), f, s)),
    "nv_cvt_bfloat16raw_to_fp8": (
        "bf16", lambda x, f, s: fp8_intrinsics.bfloat16raw_to_fp8(x, f, s)),
    "nv_cvt_bfloat16raw2_to_fp8x2": (
        "bf16x2", lambda x, f, s: fp8_intrinsics.bfloat16raw2_to_fp8x2(_split_halves(x), f, s)),
    "nv_cvt_fp8_to_halfraw": ("fp8", lambda x, f, s: fp8_intrinsics.fp8_to_halfraw(x, f)),
    "nv_cvt_fp8x2_to_halfraw2": (
        "fp8x2", lambda x, f, s: _join_halves(fp8_intrinsics.fp8x2_to_halfraw2(x, f))),
}


def cvt_model(name: str, kind: str, x: np.ndarray) -> np.ndarray:
    """The model's result of one recorded conversion form, as raw bits.

    Raises:
      NotImplementedError: no model for the form.
      CaptureError: the input kind does not fit the form.
    """
    if name in fp8.PTX_FORMS:
        fn = fp8.PTX_FORMS[name]
        want_kind = "f32pair" if name.endswith(".f32") else (
            "f16x2" if name.endswith(".f16x2") else "fp8x2")
        if kind != want_kind:
            raise CaptureError(f"cvt/{name}: input kind {kind!r}; the form takes {want_kind!r}")
        x = np.asarray(x)
        out = fn(x[:, 0], x[:, 1]) if kind == "f32pair" else fn(x)
        return np.asarray(out)
    parts = name.split(".")
    if parts[0] in _NV_FORMS:
        want_kind, fn = _NV_FORMS[parts[0]]
        widen = parts[0].startswith("nv_cvt_fp8")  # fp8 -> half: no saturation flag
        if (len(parts) != (2 if widen else 3) or parts[1] not in fp8.FP8_FORMATS
                or (not widen and parts[2] not in ("satfinite", "nosat"))):
            raise NotImplementedError(
                f"cvt form {name!r}: expected '{parts[0]}.{{e4m3,e5m2}}"
                f"{'' if widen else '.{satfinite,nosat}'}'")
        if kind != want_kind:
            raise CaptureError(f"cvt/{name}: input kind {kind!r}; the form takes {want_kind!r}")
        out = fn(np.asarray(x), parts[1], not widen and parts[2] == "satfinite")
        return np.asarray(out)
    raise NotImplementedError(f"no model for the conversion form {name!r} (known: PTX forms "
                              f"{sorted(fp8.PTX_FORMS)[:2]}..., and {sorted(_NV_FORMS)})")


def is_cvt_key(key: str) -> bool:
    """``cvt/inputs/{kind}`` and ``cvt/{form}/{kind,y,error}`` keys."""
    return key.startswith("cvt/")


def conversions(cap: Any, keys: set) -> Iterator[GroupResult]:
    """Every recorded fp8 conversion form against the model."""
    forms: dict[str, set[str]] = collections.defaultdict(set)
    inputs = {}
    for key in keys:
        parts = key.split("/")
        if len(parts) == 3 and parts[1] == "inputs":
            inputs[parts[2]] = key
        elif len(parts) >= 3:
            forms["/".join(parts[1:-1])].add(parts[-1])
        else:
            yield GroupResult(key, 0, 0, error=f"key {key!r} is not in the cvt_fp8 schema "
                              "(cvt/inputs/KIND, cvt/NAME/{kind,y,error})")
    for name, subs in sorted(forms.items()):
        group = f"cvt/{name}"
        unknown = subs - {"kind", "y", "error"}
        if unknown:
            yield GroupResult(group, 0, 0, error=f"keys {sorted(unknown)} of {group} are not "
                              "in the schema (kind, y, error)")
            continue
        if "error" in subs and "y" not in subs:
            msg = str(np.asarray(cap[f"{group}/error"])).strip().splitlines()
            yield GroupResult(group, 0, 0, skipped=True,
                              note="not recorded on the GPU: " + (msg[0] if msg else "?"))
            continue
        if not {"kind", "y"} <= subs:
            yield GroupResult(group, 0, 0, error=f"{group} needs 'kind' and 'y'; has "
                              f"{sorted(subs)}")
            continue
        kind = str(np.asarray(cap[f"{group}/kind"]))
        want = np.asarray(cap[f"{group}/y"])
        if kind not in inputs:
            yield GroupResult(group, 0, int(want.size),
                              error=f"input kind {kind!r} has no cvt/inputs/{kind}")
            continue
        try:
            got = cvt_model(name, kind, cap[inputs[kind]])
        except (NotImplementedError, CaptureError) as e:
            yield GroupResult(group, 0, int(want.size), error=str(e))
            continue
        got = got.view(_uint(got.dtype.itemsize)).reshape(want.shape)
        yield GroupResult(group, *count(got.astype(want.dtype), want))


def _uint(nbytes: int) -> type:
    return {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[nbytes]


# ---------------------------------------------------------------------------------------
# ldmatrix / stmatrix / movmatrix (ldmatrix.npz).

_LDM_PROBES = ("unused_junk", "misaligned2", "misaligned8")
_FILL = 0xDEAD  # what the stmatrix capture filled shared memory with


def _variant(v: str) -> tuple[int, bool]:
    parts = v.split(".")
    if parts[0] not in ("x1", "x2", "x4") or any(
            p not in ("trans", *_LDM_PROBES) for p in parts[1:]):
        raise CaptureError(f"variant {v!r} unknown: want x1, x2, x4 with optional .trans or a "
                           f"probe suffix {_LDM_PROBES}")
    return int(parts[0][1]), "trans" in parts[1:]


@functools.cache
def _ldm_fn(op: str, num: int, trans: bool) -> Callable:
    if op == "ldmatrix":
        return jax.jit(jax.vmap(lambda s, a: ldmatrix.ldmatrix(s, a, num=num, trans=trans)))
    if op == "stmatrix":
        return jax.jit(jax.vmap(
            lambda s, r, a: ldmatrix.stmatrix(s, r, a, num=num, trans=trans)))
    return jax.jit(jax.vmap(ldmatrix.movmatrix))


_LDM_SUBKEYS = {"ldmatrix": {"smem", "addr", "kind", "regs"},
                "stmatrix": {"regs", "addr", "kind", "smem_out"},
                "movmatrix": {"regs_in", "regs_out"}}


def is_matrix_move_key(key: str) -> bool:
    """``ldmatrix/...``, ``stmatrix/...`` and ``movmatrix/...`` keys."""
    return key.split("/")[0] in _LDM_SUBKEYS


def matrix_moves(cap: Any, keys: set) -> Iterator[GroupResult]:
    """Every ldmatrix / stmatrix / movmatrix variant, one group per trial kind."""
    groups: dict[str, set[str]] = collections.defaultdict(set)
    for key in keys:
        parts = key.split("/")
        if len(parts) != 3:
            yield GroupResult(key, 0, 0, error=f"key {key!r} is not OP/VARIANT/FIELD")
            continue
        groups[f"{parts[0]}/{parts[1]}"].add(parts[2])
    for base, subs in sorted(groups.items()):
        op, v = base.split("/")
        if "error" in subs and len(subs) == 1:
            msg = str(np.asarray(cap[f"{base}/error"])).strip().splitlines()
            yield GroupResult(base, 0, 0, skipped=True,
                              note="not recorded on the GPU: " + (msg[0] if msg else "?"))
            continue
        need = _LDM_SUBKEYS[op]
        if subs != need:
            yield GroupResult(base, 0, 0, error=f"{base} has {sorted(subs)}; the schema has "
                              f"{sorted(need)}")
            continue
        try:
            num, trans = _variant(v) if op != "movmatrix" else (1, True)
            if op == "movmatrix" and v != "trans":
                raise CaptureError(f"movmatrix variant {v!r} unknown (only 'trans')")
        except CaptureError as e:
            yield GroupResult(base, 0, 0, error=str(e))
            continue
        if op == "movmatrix":
            got = np.asarray(_ldm_fn(op, 1, True)(jnp.asarray(cap[f"{base}/regs_in"])))
            yield GroupResult(base, *count(got, np.asarray(cap[f"{base}/regs_out"])))
            continue
        addr = jnp.asarray(np.asarray(cap[f"{base}/addr"]).astype(np.int32))
        kinds = np.asarray(cap[f"{base}/kind"]).astype(str)
        if op == "ldmatrix":
            want = np.asarray(cap[f"{base}/regs"])
            got = np.asarray(_ldm_fn(op, num, trans)(jnp.asarray(cap[f"{base}/smem"]), addr))
            got = got.reshape(want.shape)
            where = np.ones(want.shape, bool)
        else:
            want = np.asarray(cap[f"{base}/smem_out"])
            fill = jnp.full(want.shape, _FILL, jnp.uint16)
            got = np.asarray(_ldm_fn(op, num, trans)(fill, jnp.asarray(cap[f"{base}/regs"]),
                                                      addr))
            # The words either side wrote: the untouched fill would only pad the count.
            where = (want != _FILL) | (got != _FILL)
        for kind in sorted(set(kinds)):
            sel = kinds == kind
            m, t = count(got[sel], want[sel], where[sel])
            note = ("stored words (written by the GPU or the model)" if op == "stmatrix"
                    else "")
            if kind == "dup":
                note = (note + "; " if note else "") + ("rows named twice: unspecified in the ISA; "
                                                        "modelled as the H100 does it")
            yield GroupResult(f"{base}[{kind}]", m, t, note)
