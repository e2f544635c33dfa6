"""Conformance handlers for the PTX ``mma.sync`` and ``wgmma`` captures.

``ptx/{name}/...`` (``mma.sync``), ``wgmma/{name}/...`` and the chains
``chain/{ptx,wgmma}/{name}x{steps}/...``: the arithmetic of every configuration goes
through ``jaxwarp._src.arithmetic.datapath`` on the logical A, B, C (schemas:
``tools/capture/FORMAT_PTX.md``, ``FORMAT_WGMMA.md``). Register layouts, descriptors
and swizzles do not change the numbers; ``.negA``/``.negB`` negate A/B, ``.scaled0``
drops C (it becomes -0, the additive identity under every rounding mode the datapath
uses). A chain feeds D of step s as C of step s + 1, step s using A columns / B rows
``s*k ... s*k + k - 1``. A configuration the model cannot run yet is an error result
naming what is missing, never a pass and never silently skipped.
"""

from __future__ import annotations

import collections
import functools
import inspect
from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxwarp._src.arithmetic import datapath
from jaxwarp._src.conformance import keys as K
from jaxwarp._src.conformance import targets
from jaxwarp._src.conformance.registry import CaptureError, GroupResult
from jaxwarp._src.layouts import wgmma_registers
from jaxwarp._src.numerics.formats import FORMATS

# ---------------------------------------------------------------------------------------
# Element types: raw capture bits -> storage dtypes, both read from the one format
# registry (formats.FORMATS).

_NEW_ARGS = ("b_format", "instruction", "instruction_k")
_CHUNK_ELEMS = 1 << 22  # products per datapath call (m * n * k * trials)


def _raw_dtype(t: str) -> np.dtype:
    """How the capture files store type ``t``: a float as its bits (the unsigned integer
    as wide as its storage dtype), an integer as its value (its storage dtype)."""
    f = FORMATS[t]
    return np.dtype(f.uint_dtype if f.is_float else f.storage_dtype)


def _sign_bit(t: str) -> int:
    """The sign bit of float type ``t`` in its raw bits; 0 for integer types."""
    f = FORMATS[t]
    return 1 << (8 * f.storage_dtype.itemsize - 1) if f.is_float else 0


def as_values(raw: np.ndarray, t: str, what: str) -> np.ndarray:
    raw = np.asarray(raw)
    want = _raw_dtype(t)
    if raw.dtype != want:
        raise CaptureError(f"{what}: type {t} is stored as {want.name}; got {raw.dtype}")
    dt = FORMATS[t].storage_dtype
    return raw if dt == want else raw.view(dt)


def value_bits(x: np.ndarray, t: str) -> np.ndarray:
    x = np.asarray(x)
    raw = _raw_dtype(t)
    return x.view(raw) if x.dtype.itemsize == raw.itemsize else x


def _datapath_params() -> set[str]:
    return set(inspect.signature(datapath.mma).parameters)


def datapath_lacks(cfg: K.MmaName) -> str:
    """What :func:`jaxwarp.mma` lacks to run ``cfg`` (``""``: nothing).

    Example:
      >>> cfg = K.parse_mma_name("ptx", "s8.s8.s32s32.m16n8k32")
      >>> datapath_lacks(cfg)
      ''
    """
    if cfg.a_format == "b1":
        return ""
    missing: list[str] = []
    params = _datapath_params()
    has_new = all(p in params for p in _NEW_ARGS)
    types = set(getattr(datapath, "A_TYPES", ())) | set(getattr(datapath, "B_TYPES", ()))
    for t in dict.fromkeys((cfg.a_format, cfg.b_format)):
        if t not in types:
            missing.append(f"operand type {t!r}")
    if not has_new:
        if cfg.a_format != cfg.b_format:
            missing.append("b_format= (mixed A/B types)")
        if cfg.a_format not in K.INT_TYPES:  # integer sums are exact whatever the instruction
            missing.append(f"instruction={cfg.instruction!r}, instruction_k= (float "
                           f"arithmetic depends on the instruction)")
    return ", ".join(missing)


@functools.cache
def _step_fn(cfg_key: tuple) -> Callable[..., jax.Array]:
    """One instruction, jitted: (a, b, c) -> d, batched over leading dims."""
    op, a_format, b_format, c_format, d_format, k, satf, bmma_op = cfg_key
    if a_format == "b1":
        return jax.jit(functools.partial(datapath.bmma, op=bmma_op))
    kw: dict[str, Any] = dict(a_format=a_format, c_format=c_format, d_format=d_format, satf=satf)
    if all(p in _datapath_params() for p in _NEW_ARGS):
        # wgmma exists only on sm_90a; the captures were built for sm_90a (same GPU).
        kw.update(b_format=b_format, instruction="wgmma" if op == "wgmma" else "mma_sync",
                  instruction_k=k, arch="sm_90a" if op == "wgmma" else "sm_90")
    return jax.jit(functools.partial(datapath.mma, **kw))


def _chain_fn(step: Callable, steps: int, k: int) -> Callable:
    def run(a, b, c):
        t, m = a.shape[:2]
        n = b.shape[-1]
        xa = jnp.moveaxis(a.reshape(t, m, steps, k), 2, 0)
        xb = jnp.moveaxis(b.reshape(t, steps, k, n), 1, 0)

        def body(acc, ab):
            return step(ab[0], ab[1], acc), None

        d, _ = lax.scan(body, c, (xa, xb))
        return d

    return jax.jit(run)


def run_mma(cap: Any, family: str, cfg: K.MmaName) -> tuple[np.ndarray, np.ndarray]:
    """Runs one ``ptx``/``wgmma``/chain configuration through the datapath.

    Returns:
      (got, want): D as raw bits, (T, M, N) each.

    Raises:
      CaptureError: shapes or dtypes that do not follow the schema.
      NotImplementedError: the datapath lacks something the configuration needs.
    """
    base = f"{family}/{cfg.name}"
    lacks = datapath_lacks(cfg)
    if lacks:
        raise NotImplementedError(f"datapath lacks {lacks}")
    A = as_values(cap[f"{base}/A"], cfg.a_format, f"{base}/A")
    B = as_values(cap[f"{base}/B"], cfg.b_format, f"{base}/B")
    C = as_values(cap[f"{base}/C"], cfg.c_format, f"{base}/C")
    want = np.asarray(cap[f"{base}/D"])
    if want.dtype != _raw_dtype(cfg.d_format):
        raise CaptureError(f"{base}/D: type {cfg.d_format} is stored as "
                           f"{_raw_dtype(cfg.d_format).name}; got {want.dtype}")
    t = len(A)
    kk = cfg.k * cfg.steps
    shapes = {"A": (A.shape, (t, cfg.m, kk)), "B": (B.shape, (t, kk, cfg.n)),
              "C": (C.shape, (t, cfg.m, cfg.n)), "D": (want.shape, (t, cfg.m, cfg.n))}
    for what, (got_s, want_s) in shapes.items():
        if tuple(got_s) != want_s:
            raise CaptureError(f"{base}/{what} has shape {tuple(got_s)}; the name says {want_s}")
    for what, flag, t_ in (("A", cfg.neg_a, cfg.a_format), ("B", cfg.neg_b, cfg.b_format)):
        if flag and not FORMATS[t_].is_float:
            raise CaptureError(f"{base}: .neg{what} with the non-float type {t_}")
    key = (cfg.op, cfg.a_format, cfg.b_format, cfg.c_format, cfg.d_format, cfg.k, cfg.satf,
           cfg.bmma_op)
    if cfg.neg_a:
        A = (value_bits(A, cfg.a_format) ^ _raw_dtype(cfg.a_format).type(_sign_bit(cfg.a_format))
             ).view(A.dtype)
    if cfg.neg_b:
        B = (value_bits(B, cfg.b_format) ^ _raw_dtype(cfg.b_format).type(_sign_bit(cfg.b_format))
             ).view(B.dtype)
    if cfg.scale_d0:
        # C ignored: -0 is the additive identity (x + -0 == x for every x, +0 included,
        # under round-to-nearest and round-toward-zero); integer C becomes 0.
        C = np.full(C.shape, _sign_bit(cfg.c_format), _raw_dtype(cfg.c_format)).view(C.dtype)
    step = _step_fn(key)
    fn = step if cfg.steps == 1 else _chain_fn(step, cfg.steps, cfg.k)
    per = max(1, _CHUNK_ELEMS // (cfg.m * cfg.n * cfg.k))
    per = 1 << (per.bit_length() - 1)  # a power of two: few distinct compiled shapes
    outs = []
    for s in range(0, t, per):
        e = min(t, s + per)
        pad = per if t > per else e - s  # pad the last chunk so the compiled shape repeats
        idx = np.resize(np.arange(s, e), pad)
        d = fn(jnp.asarray(A[idx]), jnp.asarray(B[idx]), jnp.asarray(C[idx]))
        outs.append(np.asarray(d)[: e - s])
    got = np.concatenate(outs)
    return value_bits(got, cfg.d_format), want


def wgmma_qualifier(cfg: K.MmaName) -> str:
    """The PTX qualifier of a wgmma configuration, e.g. ``m64n8k32.f32.e4m3.e5m2``.

    Example:
      >>> wgmma_qualifier(K.parse_mma_name("wgmma", "s8.u8.s32s32.m64n16k32.satfinite"))
      'm64n16k32.satfinite.s32.s8.u8'
    """
    q = f"m64n{cfg.n}k{cfg.k}" + (".satfinite" if cfg.satf else "")
    q += f".{cfg.d_format}.{cfg.a_format}.{cfg.b_format}"
    return q + (f".{cfg.bmma_op}.popc" if cfg.bmma_op else "")


def kind_note(kinds: np.ndarray | None, ok: np.ndarray) -> str:
    if kinds is None or ok.all():
        return ""
    bad = collections.Counter(str(x) for x in kinds[~ok.reshape(len(ok), -1).all(axis=1)])
    return "mismatching trials by kind: " + ", ".join(f"{k} {v}" for k, v in sorted(bad.items()))


# ``trial``: (T,) index of each trial in the capture a sample was cut from (metadata).
_MMA_SUBKEYS = {"A", "B", "C", "D", "kind", "trial"}
_WGMMA_META = {"desc_a", "desc_b"}  # inputs of the shared-memory front-end, not outputs


def _layout_d(cap: Any, base: str, cfg: K.MmaName) -> GroupResult:
    """The accumulator-register probe ``wgmma/{name}/layout_D`` through the front-end's
    ``d_layout``: one element per accumulator value (its decoded row and column)."""
    group = f"{base}/layout_D"
    raw = np.asarray(cap[f"{base}/layout_D"])
    row, col = (np.asarray(x) for x in wgmma_registers.d_layout(wgmma_qualifier(cfg)))
    planes = 6 + int(cfg.n).bit_length() - 1
    if raw.ndim != 3 or raw.shape[0] != planes or raw.shape[1:] != row.shape[:2]:
        raise CaptureError(f"{group} has shape {raw.shape}; want ({planes}, "
                           f"{row.shape[0]}, {row.shape[1]})")
    halves = (np.stack([raw & 0xFFFF, raw >> 16], -1) if cfg.d_format == "f16"
              else raw[..., None])
    nz = (halves != 0).astype(np.int64)
    got_row = sum(nz[p] << p for p in range(6))
    got_col = sum(nz[p] << (p - 6) for p in range(6, planes))
    ok = (got_row == row) & (got_col == col)
    return GroupResult(group, int(ok.sum()), int(ok.size),
                       note="(row, col) of every accumulator element in the registers")


def is_mma_key(key: str) -> bool:
    """``ptx/...``, ``wgmma/...`` and ``chain/{ptx,wgmma}/...`` keys."""
    return K.split_key(key) is not None


def mma_configs(cap: Any, keys: set) -> Iterator[GroupResult]:
    """Every ``ptx``/``wgmma``/chain configuration of the file through the datapath."""
    configs: dict[tuple[str, str], set[str]] = collections.defaultdict(set)
    for key in keys:
        family, name, sub = K.split_key(key)
        configs[(family, name)].add(sub)
    for (family, name), subs in sorted(configs.items()):
        base = f"{family}/{name}"
        op = family.split("/")[-1]
        try:
            cfg = K.parse_mma_name(op, name, chain=family.startswith("chain/"))
        except CaptureError as e:
            yield GroupResult(base, 0, 0, error=str(e))
            continue
        allowed = _MMA_SUBKEYS | (_WGMMA_META | {"layout_D"} if op == "wgmma" else set())
        unknown = sorted(subs - allowed)
        if unknown:
            yield GroupResult(base, 0, 0, error=f"keys {[f'{base}/{u}' for u in unknown]} are "
                              f"not in the schema; known: {sorted(allowed)}")
        if not {"A", "B", "C", "D"} <= subs:
            yield GroupResult(base, 0, 0, error=f"needs {base}/{{A,B,C,D}}; has {sorted(subs)}")
            continue
        n_out = int(np.asarray(cap[f"{base}/D"]).size)
        if n_out == 0:
            yield GroupResult(base, 0, 0, error=f"{base} has zero trials (D is empty): "
                              f"nothing to compare")
            continue
        why = targets.refusal(cap, cfg.instruction, cfg.a_format, cfg.b_format)
        if why:
            yield GroupResult(base, 0, n_out, error=why)
            if "layout_D" in subs:
                n_layout = int(np.asarray(cap[f"{base}/layout_D"]).size)
                yield GroupResult(f"{base}/layout_D", 0, n_layout, error=why)
            continue
        try:
            got, want = run_mma(cap, family, cfg)
        except NotImplementedError as e:
            yield GroupResult(base, 0, n_out, error=str(e))
        except CaptureError as e:
            yield GroupResult(base, 0, n_out, error=str(e))
        except (TypeError, ValueError) as e:  # the datapath refused the combination
            yield GroupResult(base, 0, n_out,
                              error=f"datapath refused it: {type(e).__name__}: {e}")
        else:
            ok = got == want
            kinds = np.asarray(cap[f"{base}/kind"]) if "kind" in subs else None
            yield GroupResult(base, int(ok.sum()), int(ok.size), kind_note(kinds, ok))
        if "layout_D" in subs:
            yield _layout_d(cap, base, cfg)
