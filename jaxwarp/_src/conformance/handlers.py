"""Conformance handlers for the PTX-level captures.

* ``ptx/{name}/...`` (``mma.sync``), ``wgmma/{name}/...`` and the chains
  ``chain/{ptx,wgmma}/{name}x{steps}/...``: the arithmetic of every configuration goes
  through ``jaxwarp._src.tensorcore.datapath`` on the logical A, B, C (schemas:
  ``tools/capture/FORMAT_PTX.md``, ``FORMAT_WGMMA.md``). Register layouts, descriptors
  and swizzles do not change the numbers; ``.negA``/``.negB`` negate A/B, ``.scaled0``
  drops C (it becomes -0, the additive identity under every rounding mode the datapath
  uses). A chain feeds D of step s as C of step s + 1, step s using A columns / B rows
  ``s*k ... s*k + k - 1``.
* ``cvt/...`` (``cvt_fp8.npz``): every fp8 conversion form through
  ``jaxwarp._src.numerics.fp8``.
* ``ldmatrix/...``, ``stmatrix/...``, ``movmatrix/...`` (``ldmatrix.npz``): through
  ``jaxwarp._src.tensorcore.ldmatrix``.

(Schema: ``tools/capture/FORMAT_MOVCVT.md``.) A configuration the model cannot run yet
is an error result naming what is missing, never a pass and never silently skipped.
"""

from __future__ import annotations

import collections
import functools
import importlib
import inspect
from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jax import lax

from jaxwarp._src.conformance import keys as K
from jaxwarp._src.conformance.registry import (
    CaptureError,
    GroupResult,
    count,
    prefix_handler,
)
from jaxwarp._src.numerics import fp8
from jaxwarp._src.tensorcore import datapath, ldmatrix

# ---------------------------------------------------------------------------------------
# Element types: raw capture bits -> the datapath's storage dtypes.

_RAW = {  # bits dtype of each type in the capture files
    "f16": np.uint16, "bf16": np.uint16, "tf32": np.uint32, "f32": np.uint32,
    "f64": np.uint64, "e4m3": np.uint8, "e5m2": np.uint8, "s8": np.int8, "u8": np.uint8,
    "s4": np.int8, "u4": np.uint8, "b1": np.uint8, "s32": np.int32,
}
_VALUE = {  # our default storage dtype when the datapath does not name one
    "f16": np.float16, "bf16": ml_dtypes.bfloat16, "tf32": np.float32, "f32": np.float32,
    "f64": np.float64, "e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2,
    "s8": np.int8, "u8": np.uint8, "s4": np.int8, "u4": np.uint8, "b1": np.uint8,
    "s32": np.int32,
}
_SIGN = {"f16": 1 << 15, "bf16": 1 << 15, "tf32": 1 << 31, "f32": 1 << 31, "f64": 1 << 63,
         "e4m3": 1 << 7, "e5m2": 1 << 7}

_NEW_ARGS = ("b_type", "instruction", "instruction_k")
_CHUNK_ELEMS = 1 << 22  # products per datapath call (m * n * k * trials)


def _storage(t: str) -> np.dtype:
    table = getattr(datapath, "STORAGE_DTYPE", {})
    return np.dtype(table[t]) if t in table else np.dtype(_VALUE[t])


def _as_values(raw: np.ndarray, t: str, what: str) -> np.ndarray:
    raw = np.asarray(raw)
    want = np.dtype(_RAW[t])
    if raw.dtype != want:
        raise CaptureError(f"{what}: type {t} is stored as {want.name}; got {raw.dtype}")
    dt = _storage(t)
    return raw if dt == want else raw.view(dt)


def _bits(x: np.ndarray, t: str) -> np.ndarray:
    x = np.asarray(x)
    return x.view(_RAW[t]) if x.dtype.itemsize == np.dtype(_RAW[t]).itemsize else x


def _datapath_params() -> set[str]:
    return set(inspect.signature(datapath.mma).parameters)


def datapath_lacks(cfg: K.MmaName) -> str:
    """What ``datapath.mma`` lacks to run ``cfg`` (``""``: nothing).

    Example:
      >>> cfg = K.parse_mma_name("ptx", "s8.s8.s32s32.m16n8k32")
      >>> datapath_lacks(cfg)
      ''
    """
    if cfg.a_type == "b1":
        return ""
    missing: list[str] = []
    params = _datapath_params()
    has_new = all(p in params for p in _NEW_ARGS)
    types = set(getattr(datapath, "A_TYPES", ())) | set(getattr(datapath, "B_TYPES", ()))
    for t in dict.fromkeys((cfg.a_type, cfg.b_type)):
        if t not in types:
            missing.append(f"operand type {t!r}")
    if not has_new:
        if cfg.a_type != cfg.b_type:
            missing.append("b_type= (mixed A/B types)")
        if cfg.a_type not in K.INT_TYPES:  # integer sums are exact whatever the instruction
            missing.append(f"instruction={cfg.instruction!r}, instruction_k= (float "
                           f"arithmetic depends on the instruction)")
    return ", ".join(missing)


@functools.lru_cache(maxsize=None)
def _step_fn(cfg_key: tuple) -> Callable[..., jax.Array]:
    """One instruction, jitted: (a, b, c) -> d, batched over leading dims."""
    op, a_type, b_type, c_type, d_type, k, satf, bmma_op = cfg_key
    if a_type == "b1":
        return jax.jit(functools.partial(datapath.bmma, op=bmma_op))
    kw: dict[str, Any] = dict(a_type=a_type, c_type=c_type, d_type=d_type, satf=satf)
    if all(p in _datapath_params() for p in _NEW_ARGS):
        # wgmma exists only on sm_90a; the captures were built for sm_90a (same GPU).
        kw.update(b_type=b_type, instruction="wgmma" if op == "wgmma" else "mma_sync",
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
    A = _as_values(cap[f"{base}/A"], cfg.a_type, f"{base}/A")
    B = _as_values(cap[f"{base}/B"], cfg.b_type, f"{base}/B")
    C = _as_values(cap[f"{base}/C"], cfg.c_type, f"{base}/C")
    want = np.asarray(cap[f"{base}/D"])
    if want.dtype != np.dtype(_RAW[cfg.d_type]):
        raise CaptureError(f"{base}/D: type {cfg.d_type} is stored as "
                           f"{np.dtype(_RAW[cfg.d_type]).name}; got {want.dtype}")
    t = len(A)
    kk = cfg.k * cfg.steps
    shapes = {"A": (A.shape, (t, cfg.m, kk)), "B": (B.shape, (t, kk, cfg.n)),
              "C": (C.shape, (t, cfg.m, cfg.n)), "D": (want.shape, (t, cfg.m, cfg.n))}
    for what, (got_s, want_s) in shapes.items():
        if tuple(got_s) != want_s:
            raise CaptureError(f"{base}/{what} has shape {tuple(got_s)}; the name says {want_s}")
    for what, flag, t_ in (("A", cfg.neg_a, cfg.a_type), ("B", cfg.neg_b, cfg.b_type)):
        if flag and t_ not in _SIGN:
            raise CaptureError(f"{base}: .neg{what} with the non-float type {t_}")
    key = (cfg.op, cfg.a_type, cfg.b_type, cfg.c_type, cfg.d_type, cfg.k, cfg.satf,
           cfg.bmma_op)
    if cfg.neg_a:
        A = (_bits(A, cfg.a_type) ^ _RAW[cfg.a_type](_SIGN[cfg.a_type])).view(A.dtype)
    if cfg.neg_b:
        B = (_bits(B, cfg.b_type) ^ _RAW[cfg.b_type](_SIGN[cfg.b_type])).view(B.dtype)
    if cfg.scale_d0:
        # C ignored: -0 is the additive identity (x + -0 == x for every x, +0 included,
        # under round-to-nearest and round-toward-zero); integer C becomes 0.
        C = np.full(C.shape, _SIGN.get(cfg.c_type, 0), _RAW[cfg.c_type]).view(C.dtype)
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
    return _bits(got, cfg.d_type), want


def wgmma_qualifier(cfg: K.MmaName) -> str:
    """The PTX qualifier of a wgmma configuration, e.g. ``m64n8k32.f32.e4m3.e5m2``.

    Example:
      >>> wgmma_qualifier(K.parse_mma_name("wgmma", "s8.u8.s32s32.m64n16k32.satfinite"))
      'm64n16k32.satfinite.s32.s8.u8'
    """
    q = f"m64n{cfg.n}k{cfg.k}" + (".satfinite" if cfg.satf else "")
    q += f".{cfg.d_type}.{cfg.a_type}.{cfg.b_type}"
    return q + (f".{cfg.bmma_op}.popc" if cfg.bmma_op else "")


def _kind_note(kinds: np.ndarray | None, ok: np.ndarray) -> str:
    if kinds is None or ok.all():
        return ""
    bad = collections.Counter(str(x) for x in kinds[~ok.reshape(len(ok), -1).all(axis=1)])
    return "mismatching trials by kind: " + ", ".join(f"{k} {v}" for k, v in sorted(bad.items()))


# ``trial``: (T,) index of each trial in the capture a sample was cut from (metadata).
_MMA_SUBKEYS = {"A", "B", "C", "D", "kind", "trial"}
_WGMMA_META = {"desc_a", "desc_b"}  # inputs of the shared-memory front-end, not outputs


def _wgmma_frontend():
    try:
        return importlib.import_module("jaxwarp._src.tensorcore.wgmma")
    except ImportError:
        return None


def _layout_d(cap: Any, base: str, cfg: K.MmaName) -> GroupResult:
    """The accumulator-register probe ``wgmma/{name}/layout_D`` through the front-end's
    ``d_layout``: one element per accumulator value (its decoded row and column)."""
    group = f"{base}/layout_D"
    raw = np.asarray(cap[f"{base}/layout_D"])
    mod = _wgmma_frontend()
    fn = getattr(mod, "d_layout", None) if mod is not None else None
    if fn is None:
        why = ("the wgmma front-end (jaxwarp/_src/tensorcore/wgmma.py) is not there"
               if mod is None else "jaxwarp._src.tensorcore.wgmma has no d_layout()")
        return GroupResult(group, 0, int(raw.size), error=f"accumulator layout probe: {why}")
    row, col = (np.asarray(x) for x in fn(wgmma_qualifier(cfg)))
    planes = 6 + int(cfg.n).bit_length() - 1
    if raw.ndim != 3 or raw.shape[0] != planes or raw.shape[1:] != row.shape[:2]:
        raise CaptureError(f"{group} has shape {raw.shape}; want ({planes}, "
                           f"{row.shape[0]}, {row.shape[1]})")
    halves = (np.stack([raw & 0xFFFF, raw >> 16], -1) if cfg.d_type == "f16"
              else raw[..., None])
    nz = (halves != 0).astype(np.int64)
    got_row = sum(nz[p] << p for p in range(6))
    got_col = sum(nz[p] << (p - 6) for p in range(6, planes))
    ok = (got_row == row) & (got_col == col)
    return GroupResult(group, int(ok.sum()), int(ok.size),
                       note="(row, col) of every accumulator element in the registers")


def _is_mma_key(key: str) -> bool:
    return K.split_key(key) is not None


@prefix_handler(_is_mma_key)
def _mma(cap: Any, keys: set) -> Iterator[GroupResult]:
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
            yield GroupResult(base, int(ok.sum()), int(ok.size), _kind_note(kinds, ok))
        if "layout_D" in subs:
            yield _layout_d(cap, base, cfg)


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
    "nv_cvt_float_to_fp8": ("f32", lambda x, f, s: fp8.float_to_fp8(x, f, s)),
    "nv_cvt_float2_to_fp8x2": ("f32pair", lambda x, f, s: fp8.float2_to_fp8x2(x, f, s)),
    "nv_cvt_halfraw_to_fp8": ("f16", lambda x, f, s: fp8.halfraw_to_fp8(x, f, s)),
    "nv_cvt_halfraw2_to_fp8x2": ("f16x2",
                                 lambda x, f, s: fp8.halfraw2_to_fp8x2(_split_halves(x), f, s)),
    "nv_cvt_bfloat16raw_to_fp8": ("bf16", lambda x, f, s: fp8.bfloat16raw_to_fp8(x, f, s)),
    "nv_cvt_bfloat16raw2_to_fp8x2": (
        "bf16x2", lambda x, f, s: fp8.bfloat16raw2_to_fp8x2(_split_halves(x), f, s)),
    "nv_cvt_fp8_to_halfraw": ("fp8", lambda x, f, s: fp8.fp8_to_halfraw(x, f)),
    "nv_cvt_fp8x2_to_halfraw2": ("fp8x2",
                                 lambda x, f, s: _join_halves(fp8.fp8x2_to_halfraw2(x, f))),
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


@prefix_handler(lambda key: key.startswith("cvt/"))
def _cvt_fp8(cap: Any, keys: set) -> Iterator[GroupResult]:
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


@functools.lru_cache(maxsize=None)
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


@prefix_handler(lambda key: key.split("/")[0] in _LDM_SUBKEYS)
def _ldmatrix(cap: Any, keys: set) -> Iterator[GroupResult]:
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
