"""Conformance handler for the sparse tensor-core captures (``tools/capture/FORMAT_SP.md``).

``sp/{name}/{A,E,meta,B,C,D,kind}`` (``mma.sp`` / ``mma.sp::ordered_metadata``),
``chain/sp/{name}x{steps}/...`` (D of step s is C of step s + 1; step s uses stored
columns s*K/2.. with metadata ``meta[:, s]`` and B rows s*K..) and
``wgsp/{name}/...`` (``wgmma.mma_async.sp``). The model reads the metadata registers the
lanes passed (``meta``) with the configuration's selector, as the hardware does; ``E``
(the decoded indices) is not used. The stored A, B and C go through
``mma_sp.compute`` on logical matrices.
"""

from __future__ import annotations

import collections
import functools
import re
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxwarp._src.conformance.handlers.ptx import as_values, kind_note, value_bits
from jaxwarp._src.conformance.registry import CaptureError, GroupResult
from jaxwarp._src.instructions import mma_sp, sparse, wgmma_sp

_NAME = re.compile(r"(\w+)\.(\w+)\.([a-z0-9]{3})([a-z0-9]{3})\.m(\d+)n(\d+)k(\d+)"
                   r"(\.satfinite)?(\.ordered)?(\.areg)?(?:\.sel(\d))?(?:x(\d+))?")
_SUBKEYS = {"A", "E", "meta", "B", "C", "D", "kind", "trial", "desc_a", "desc_b"}


def is_sparse_key(key: str) -> bool:
    """``sp/...``, ``wgsp/...`` and ``chain/sp/...`` keys."""
    parts = key.split("/")
    return (len(parts) == 3 and parts[0] in ("sp", "wgsp")) or (
        len(parts) == 4 and parts[:2] == ["chain", "sp"])


def parse_name(family: str, name: str):
    """A key's configuration name -> (instruction, selector, steps).

    Example:
      >>> i, sel, steps = parse_name("sp", "f16.f16.f32f32.m16n8k32.ordered.sel1")
      >>> i.ptx, sel, steps
      ('mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.f16.f16.f32', 1, 1)
    """
    m = _NAME.fullmatch(name)
    if m is None:
        raise CaptureError(f"{family}/{name}: not a sparse configuration name "
                           f"(FORMAT_SP.md: atype.btype.ctypedtype.mMnNkK[.satfinite]"
                           f"[.ordered][.areg][.selF][xSTEPS])")
    a, b, c, d, mm, n, k, sat, ordered, _areg, sel, steps_text = m.groups()
    sel, steps = int(sel or 0), int(steps_text or 1)
    if family.startswith("chain/") and steps < 2:
        got = f"x{steps_text}" if steps_text else "no x{steps}"
        raise CaptureError(f"{family}/{name}: a chain key needs x{{steps}} with steps >= 2 "
                           f"(the number of chained instructions); got {got}")
    if not family.startswith("chain/") and steps_text is not None:
        raise CaptureError(f"{family}/{name}: x{steps_text}: x{{steps}} belongs to chain "
                           f"keys (chain/sp/...) only")
    try:
        if family == "wgsp":
            instr = wgmma_sp.parse_wgmma_sp(f"m{mm}n{n}k{k}{sat or ''}.{d}.{a}.{b}")
        else:
            q = f"m{mm}n{n}k{k}.row.col{sat or ''}.{d}.{a}.{b}.{c}"
            prefix = sparse.MMA_SP_ORDERED if ordered else sparse.MMA_SP_LEGACY
            instr = mma_sp.parse_mma_sp(prefix + q)
    except ValueError as e:
        raise CaptureError(f"{family}/{name}: {e}") from None
    if sel >= instr.row.selectors:
        raise CaptureError(f"{family}/{name}: selector {sel} is not allowed (0.."
                           f"{instr.row.selectors - 1})")
    return instr, sel, steps


@functools.partial(jax.jit, static_argnums=(0, 1, 2))
def _run(instr, sel, steps, a, meta, b, c):
    def step(acc, xs):  # D of step s is C of step s + 1
        a_s, m_s, b_s = xs
        nib = sparse.nibbles_from_words(instr.geometry, m_s, sel)
        return mma_sp.compute(instr, a_s, nib, b_s, acc, "sm_90a"), None

    if steps == 1:
        return step(c, (a, meta, b))[0]
    t, m, _ = a.shape
    a_steps = jnp.moveaxis(a.reshape(t, m, steps, instr.k // 2), 2, 0)
    b_steps = jnp.moveaxis(b.reshape(t, steps, instr.k, b.shape[-1]), 1, 0)
    return jax.lax.scan(step, c, (a_steps, jnp.moveaxis(meta, 1, 0), b_steps))[0]


def configs(cap: Any, keys: set) -> Iterator[GroupResult]:
    """Every sparse configuration of the file through the model."""
    groups: dict[str, set[str]] = collections.defaultdict(set)
    for key in keys:
        base, sub = key.rsplit("/", 1)
        groups[base].add(sub)
    for base, subs in sorted(groups.items()):
        family, name = base.rsplit("/", 1)
        try:
            instr, sel, steps = parse_name(family, name)
            unknown = sorted(subs - _SUBKEYS)
            if unknown:
                raise CaptureError(f"keys {[f'{base}/{u}' for u in unknown]} are not in the "
                                   f"schema; known: {sorted(_SUBKEYS)}")
            if not {"A", "meta", "B", "C", "D"} <= subs:
                raise CaptureError(f"needs {base}/{{A,meta,B,C,D}}; has {sorted(subs)}")
            trials = {f: (np.shape(cap[f"{base}/{f}"]) or (None,))[0]
                      for f in ("A", "B", "C", "D")}
            if len(set(trials.values())) > 1:
                raise CaptureError(f"A, B, C and D must hold the same number of "
                                   f"trials (leading axis); got {trials}")
            a = as_values(cap[f"{base}/A"], instr.a_format, f"{base}/A")
            b = as_values(cap[f"{base}/B"], instr.b_format, f"{base}/B")
            c = as_values(cap[f"{base}/C"], instr.c_format, f"{base}/C")
            want = np.asarray(cap[f"{base}/D"])
            meta = np.asarray(cap[f"{base}/meta"])
            lanes = 128 if family == "wgsp" else 32
            mshape = (a.shape[0],) + ((steps,) if steps > 1 else ()) + (lanes,)
            if meta.dtype != np.uint32 or meta.shape != mshape:
                raise CaptureError(f"{base}/meta must be uint32 {mshape}; got {meta.dtype} "
                                   f"{meta.shape}")
            if want.size == 0:
                raise CaptureError(f"{base} has zero trials (D is empty): nothing to compare")
        except CaptureError as e:
            yield GroupResult(base, 0, 0, error=str(e))
            continue
        try:
            got = _run(instr, sel, steps, jnp.asarray(a), jnp.asarray(meta),
                       jnp.asarray(b), jnp.asarray(c))
            got = value_bits(np.asarray(got), instr.d_format)
        except (TypeError, ValueError) as e:
            yield GroupResult(base, 0, int(want.size),
                              error=f"model refused it: {type(e).__name__}: {e}")
            continue
        ok = got == want
        kinds = np.asarray(cap[f"{base}/kind"]) if "kind" in subs else None
        yield GroupResult(base, int(ok.sum()), int(ok.size), kind_note(kinds, ok))
