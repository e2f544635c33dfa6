"""Conformance handler for the Pallas kernel captures (``tools/capture/FORMAT_PALLAS.md``).

``pallas/{name}/t{i}/{a,b,c,out,meta}``: a Triton-style matmul kernel (``pl.pallas_call``
lowered by Triton) that the capture ran on the GPU. The kernel is rebuilt from ``meta``
with the example kernel ``jaxwarp.kernels.triton_matmul`` (its ``form``, block
``(bm, bn, bk)`` and ``num_warps``), run in Pallas' interpret mode under
``emulate(kernel, operand_format=<meta dtype>, arch="sm_90a")`` on the decoded inputs
(f32: ``operand_format=None``, see `Case.operand_format`), and every element of ``out`` is
compared bit for bit.

``pallas_mgpu/{name}[/t{i}]/{a,b,c,out,meta}``: one of JAX's own Mosaic GPU kernels
(``jax.experimental.pallas.ops.gpu``), called unchanged under ``emulate`` with the tile
configuration of ``meta``, traced for a GPU of `NUM_SMS` SMs. ``meta["kernel"]`` names
it: ``hopper_matmul`` (the default, ``hopper_matmul_mgpu.matmul``; a capture cut to fewer
rows or columns than whole CTA tiles is padded with zeros and cut back),
``hopper_mixed_type_matmul``, ``ragged_dot``, ``attention_mgpu``; ``pallas/`` entries may
name ``attention`` (the Triton-style ``attention.mha``) instead of the default
``triton_matmul``.

A group whose kernel this version of jaxwarp cannot enter (no Pallas layer, a product
``emulate`` does not support) is reported as not modelled, never as a pass.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import json
from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxwarp._src.conformance.registry import CaptureError, GroupResult
from jaxwarp._src.numerics.formats import FORMATS

#: The two families and their key prefixes.
TRITON, MGPU = "pallas", "pallas_mgpu"
PREFIXES = (f"{TRITON}/", f"{MGPU}/")

#: Operand element types of the kernels' inputs (meta ``dtype``).
OPERAND_TYPES = ("f16", "bf16", "e4m3", "e5m2", "f32")
#: SM count the Mosaic GPU kernels are traced with (their grid; no element depends on it).
NUM_SMS = 2
#: Output element types, by jaxwarp's name and by NumPy's (meta ``out_dtype`` may use either).
_OUT_NAMES = {"f32": "f32", "float32": "f32", "f16": "f16", "float16": "f16",
              "bf16": "bf16", "bfloat16": "bf16"}

#: Sub-keys of a group: inputs per kernel, and the outputs / metadata every group has.
_INPUTS = {
    "triton_matmul": ("a", "b"), "hopper_matmul": ("a", "b"),
    "hopper_mixed_type_matmul": ("a", "b"), "ragged_dot": ("a", "b", "group_sizes"),
    "attention_mgpu": ("q", "k", "v"), "attention": ("q", "k", "v"),
}
_KERNELS = {TRITON: ("triton_matmul", "attention"),
            MGPU: ("hopper_matmul", "hopper_mixed_type_matmul", "ragged_dot", "attention_mgpu")}
_OPTIONAL = ("c", "kind")

#: Meta keys every group of a kernel needs (all ints but ``dtype``, ``form``, ``kind``).
_NEED = {
    "triton_matmul": ("dtype", "M", "N", "K", "bm", "bn", "bk", "form", "num_warps"),
    "hopper_matmul": ("dtype", "M", "N", "K", "tile_m", "tile_n", "tile_k",
                      "max_concurrent_steps"),
    "hopper_mixed_type_matmul": ("dtype", "a_dtype", "M", "N", "K", "tile_m", "tile_n",
                                 "tile_k", "max_concurrent_steps", "out_dtype"),
    "ragged_dot": ("dtype", "M", "N", "K", "G", "tile_m", "tile_n", "tile_k",
                   "max_concurrent_steps", "grid_block_n"),
    "attention_mgpu": ("dtype", "B", "T", "S", "H", "Hkv", "D", "block_q", "block_kv",
                       "max_concurrent_steps"),
    "attention": ("dtype", "B", "T", "S", "H", "D", "block_q", "block_k", "num_warps"),
}
_STR_META = ("dtype", "a_dtype", "form", "kind", "out_dtype", "kernel", "jax", "device",
             "precision")
#: ``meta["precision"]`` of a triton_matmul entry: its dots' precision (default: "default").
_PRECISIONS = {"default": None, "highest": jax.lax.Precision.HIGHEST}


def is_pallas_key(key: str) -> bool:
    """``pallas/{name}/t{i}/{sub}`` and ``pallas_mgpu/{name}[/t{i}]/{sub}`` keys.

    Example:
      >>> is_pallas_key("pallas/bf16_16x16x32_w1/t0/out"), is_pallas_key("pallas/x/out")
      (True, False)
      >>> is_pallas_key("pallas_mgpu/f16_128x128x64/meta")
      True
    """
    parts = key.split("/")
    if parts[0] == TRITON:
        return len(parts) == 4 and _is_trial(parts[2])
    if parts[0] == MGPU:
        return len(parts) == 3 or (len(parts) == 4 and _is_trial(parts[2]))
    return False


def _is_trial(part: str) -> bool:
    return part.startswith("t") and part[1:].isascii() and part[1:].isdigit()


@dataclasses.dataclass(frozen=True)
class Case:
    """One group's kernel, read from its ``meta``.

    Attributes:
      family: ``"pallas"`` or ``"pallas_mgpu"``.
      kernel: which kernel ran (``triton_matmul``, ``hopper_matmul``, ...).
      dtype: the operand type (``OPERAND_TYPES``).
      out: the output type (``"f32"``, ``"f16"``, ``"bf16"``).
      meta: the whole meta dict (tile sizes and the rest).
    """

    family: str
    kernel: str
    dtype: str
    out: str
    meta: dict

    def __getitem__(self, name: str) -> Any:
        return self.meta[name]

    @property
    def operand_format(self) -> str | None:
        """``emulate``'s ``operand_format`` for this kernel: the meta ``dtype``, but None
        (the kernel's own product) for f32: Triton's tf32 ``dot`` hands the raw fp32 words
        to the tensor core, which reads their top 19 bits, where ``"tf32"`` would round
        them first, as ``jaxwarp.matmul`` does."""
        return None if self.dtype == "f32" else self.dtype


def parse_meta(text: Any, family: str, where: str) -> Case:
    """A group's ``meta`` JSON string -> `Case`, checked against the schema.

    Raises:
      CaptureError: not a JSON object, a key missing, a value of the wrong type.

    Example:
      >>> c = parse_meta('{"dtype": "bf16", "M": 64, "N": 64, "K": 512, "bm": 16, '
      ...                '"bn": 16, "bk": 32, "form": "tiled", "num_warps": 1, '
      ...                '"kind": "positive"}', "pallas", "pallas/x/t0")
      >>> c.kernel, c.dtype, c.out, c["bk"], c.operand_format
      ('triton_matmul', 'bf16', 'f32', 32, 'bf16')
    """
    try:
        meta = json.loads(str(np.asarray(text)))
    except ValueError as e:
        raise CaptureError(f"{where}/meta is not JSON ({e})") from None
    if not isinstance(meta, dict):
        raise CaptureError(f"{where}/meta must be a JSON object; got {type(meta).__name__}")
    kernel = meta.get("kernel", _KERNELS[family][0])
    if kernel not in _KERNELS[family]:
        raise CaptureError(f"{where}/meta: kernel {kernel!r} unknown for {family}/ keys; "
                           f"valid: {_KERNELS[family]}")
    missing = [k for k in _NEED[kernel] if k not in meta]
    if missing:
        raise CaptureError(f"{where}/meta lacks {missing} (a {kernel} entry needs "
                           f"{list(_NEED[kernel])}; FORMAT_PALLAS.md)")
    for k, v in meta.items():
        if k in _STR_META or k in _TUNING_DIMS:
            ok = isinstance(v, str) or (v is None and k in _TUNING_DIMS)
        elif k in _NEED[kernel]:
            ok = type(v) is int and v > 0
        else:  # seed, causal, sm_scale, epi_tile_m, ...: plain JSON numbers or booleans
            ok = isinstance(v, (int, float)) or v is None
        if not ok:
            raise CaptureError(f"{where}/meta[{k!r}] = {v!r}: want "
                               f"{'a string' if k in _STR_META else 'a positive int'}")
    dtype = meta["dtype"]
    if dtype not in OPERAND_TYPES:
        raise CaptureError(f"{where}/meta: dtype {dtype!r} unknown; valid: {OPERAND_TYPES}")
    default_out = "f32" if kernel == "triton_matmul" else dtype
    out = _OUT_NAMES.get(meta.get("out_dtype", default_out))
    if out is None:
        raise CaptureError(f"{where}/meta: out_dtype {meta['out_dtype']!r} unknown; valid: "
                           f"{sorted(_OUT_NAMES)}")
    return Case(family, kernel, dtype, out, meta)


def _shapes(case: Case) -> dict[str, tuple[tuple[int, ...], str]]:
    """Each sub-key's (shape, element type) for the case."""
    m = case.meta
    if case.kernel in ("attention", "attention_mgpu"):
        hkv = m.get("Hkv", m["H"])
        q, kv = (m["B"], m["T"], m["H"], m["D"]), (m["B"], m["S"], hkv, m["D"])
        return {"q": (q, case.dtype), "k": (kv, case.dtype), "v": (kv, case.dtype),
                "out": (q, case.out)}
    mm, n, k = m["M"], m["N"], m["K"]
    shapes = {"a": ((mm, k), m.get("a_dtype", case.dtype)), "b": ((k, n), case.dtype),
              "c": ((mm, n), case.out), "out": ((mm, n), case.out)}
    if case.kernel == "ragged_dot":
        shapes["b"] = ((m["G"], n, k) if m.get("transpose_rhs") else (m["G"], k, n),
                       case.dtype)
        shapes["group_sizes"] = ((m["G"],), "s32")
    return shapes


def _raw_dtype(t: str) -> np.dtype:
    f = FORMATS[t]
    return np.dtype(f.uint_dtype if f.is_float else f.storage_dtype)


def decode(cap: Any, group: str, subs: set[str], case: Case) -> dict[str, np.ndarray]:
    """The group's arrays, checked against ``meta``: inputs as values of their types
    (``a``, ``b``, ``c``, ...), ``out`` as raw bits.

    Raises:
      CaptureError: a sub-key missing or unknown, a shape or dtype that disagrees with
        ``meta``.
    """
    need = set(_INPUTS[case.kernel]) | {"out", "meta"}
    known = need | set(_OPTIONAL)
    if not need <= subs:
        raise CaptureError(f"{group} needs {sorted(need)}; has {sorted(subs)}")
    if subs - known:
        raise CaptureError(f"{group}: keys {sorted(subs - known)} are not in the schema; "
                           f"known for {case.kernel}: {sorted(known)}")
    shapes = _shapes(case)
    got: dict[str, np.ndarray] = {}
    for sub in sorted(subs - {"meta", "kind"}):
        shape, t = shapes[sub]
        raw = np.asarray(cap[f"{group}/{sub}"])
        want = _raw_dtype(t)
        if raw.dtype != want or raw.shape != shape:
            raise CaptureError(f"{group}/{sub}: meta says {t} {shape}, stored as "
                               f"{want.name} {shape}; got {raw.dtype} {raw.shape}")
        dt = FORMATS[t].storage_dtype
        got[sub] = raw if sub == "out" or dt == want else raw.view(dt)
    return got


def _jnp_dtype(t: str) -> np.dtype:
    return np.dtype(FORMATS[t].storage_dtype)


# ---------------------------------------------------------------------------------------
# The kernels, each a function of the decoded inputs (c last, when the group has one).


def _triton_matmul(case: Case) -> Callable:
    # The capture ran the example kernel jaxwarp.kernels.triton_matmul.
    from jaxwarp._src.pallas.examples import triton_matmul  # noqa: PLC0415 (pallas: lazy)
    block = (case["bm"], case["bn"], case["bk"])
    out_dtype = _jnp_dtype(case.out)
    precision = case.meta.get("precision", "default")
    if precision not in _PRECISIONS:
        raise CaptureError(f"meta: precision {precision!r} unknown; valid: "
                           f"{sorted(_PRECISIONS)}")
    precision = _PRECISIONS[precision]

    def kernel(a, b, c=None):
        return triton_matmul(a, b, c, block=block, num_warps=case["num_warps"],
                             form=case["form"], interpret=True, out_dtype=out_dtype,
                             precision=precision)
    return kernel


def _triton_attention(case: Case) -> Callable:
    from jax.experimental.pallas.ops.gpu import attention

    sizes = attention.BlockSizes(block_q=case["block_q"], block_k=case["block_k"])
    kw = dict(sm_scale=float(case.meta.get("sm_scale", 1.0)),
              causal=bool(case.meta.get("causal", False)), block_sizes=sizes,
              num_warps=case["num_warps"], num_stages=case.meta.get("num_stages", 2),
              interpret=True)
    return lambda q, k, v: attention.mha(q, k, v, None, **kw)


def _mgpu_matmul(case: Case) -> Callable:
    from jax.experimental.pallas.ops.gpu import hopper_matmul_mgpu as hm

    config = hm.TuningConfig(**_tuning(case, hm.MatmulDimension))
    # The kernel wants M and N in whole CTA tiles (two warpgroups side by side along
    # wg_dimension); a capture cut to fewer rows / columns (tests/data's sample) is padded
    # with zeros and cut back: each output element depends on its own row of A and column
    # of B only. At least two tiles: with one, XLA's CPU compiler (JAX 0.10.2) folds the
    # kernel's tile order to a remainder by zero (SIGFPE).
    dims = (config.wg_dimension, config.cluster_dimension)
    tm = config.tile_m * 2 ** dims.count(hm.MatmulDimension.M)
    tn = config.tile_n * 2 ** dims.count(hm.MatmulDimension.N)

    def kernel(a, b, c=None):
        m, n = a.shape[0], b.shape[1]
        pm, pn = -m % tm, -n % tn
        if (m + pm) // tm * ((n + pn) // tn) == 1:
            pm += tm
        a = jnp.pad(a, ((0, pm), (0, 0)))
        b = jnp.pad(b, ((0, 0), (0, pn)))
        c = None if c is None else jnp.pad(c, ((0, pm), (0, pn)))
        return hm.matmul(a, b, c, config)[:m, :n]
    return kernel


def _mgpu_mixed(case: Case) -> Callable:
    from jax.experimental.pallas.ops.gpu import hopper_mixed_type_matmul_mgpu as hx

    config = hx.TuningConfig(**_tuning(case, hx.MatmulDimension))
    out_dtype = _jnp_dtype(case.out)
    return lambda a, b: hx.mixed_matmul_kernel(a, b, out_dtype=out_dtype, config=config)


def _mgpu_ragged(case: Case) -> Callable:
    from jax.experimental.pallas.ops.gpu import ragged_dot_mgpu as rd

    kw = dict(block_m=case["tile_m"], block_n=case["tile_n"], block_k=case["tile_k"],
              max_concurrent_steps=case["max_concurrent_steps"],
              grid_block_n=case["grid_block_n"],
              transpose_rhs=bool(case.meta.get("transpose_rhs", False)))
    return lambda a, b, group_sizes: rd.ragged_dot(a, b, group_sizes=group_sizes, **kw)


def _mgpu_attention(case: Case) -> Callable:
    from jax.experimental.pallas.ops.gpu import attention_mgpu as am

    config = am.TuningConfig(block_q=case["block_q"], block_kv=case["block_kv"],
                             max_concurrent_steps=case["max_concurrent_steps"],
                             causal=bool(case.meta.get("causal", False)))
    return lambda q, k, v: am.attention(q, k, v, config)


_TUNING_INTS = ("tile_m", "tile_n", "tile_k", "max_concurrent_steps", "epi_tile_m",
                "epi_tile_n", "grid_tile_width")
_TUNING_DIMS = ("grid_minor_dim", "wg_dimension", "cluster_dimension")


def _tuning(case: Case, dims: Any) -> dict:
    """``TuningConfig`` arguments of the Hopper matmuls from meta (dimensions by name)."""
    kw = {k: case.meta[k] for k in _TUNING_INTS if k in case.meta}
    for k in _TUNING_DIMS:
        if k in case.meta:
            v = case.meta[k]
            kw[k] = None if v is None else dims[v]
    return kw


BUILD: dict[str, Callable[[Case], Callable]] = {
    "triton_matmul": _triton_matmul, "attention": _triton_attention,
    "hopper_matmul": _mgpu_matmul, "hopper_mixed_type_matmul": _mgpu_mixed,
    "ragged_dot": _mgpu_ragged, "attention_mgpu": _mgpu_attention,
}


#: Meta keys that differ between the trials of one configuration (not the kernel's).
_PER_TRIAL = ("kind", "seed", "jax", "device")


@functools.lru_cache(maxsize=64)
def _emulated(family: str, meta_items: tuple) -> Callable:
    """The configuration's kernel under ``emulate``, built once for all its trials (their
    inputs then share one compilation)."""
    from jaxwarp._src.emulate.api import emulate

    case = parse_meta(json.dumps(dict(meta_items)), family, "cached configuration")
    return emulate(BUILD[case.kernel](case), operand_format=case.operand_format,
                   arch="sm_90a")


def run_case(case: Case, inputs: dict[str, np.ndarray]) -> np.ndarray:
    """Runs the case's kernel under ``emulate`` on its inputs. Returns ``out``'s raw bits.

    Raises:
      ImportError: this jaxwarp has no Pallas layer, or this JAX lacks the kernel.
      NotImplementedError: ``emulate`` cannot run a product of the kernel.
    """
    args = [jnp.asarray(inputs[k]) for k in _INPUTS[case.kernel]]
    if "c" in inputs:
        args.append(jnp.asarray(inputs["c"]))
    key = tuple(sorted((k, v) for k, v in case.meta.items() if k not in _PER_TRIAL))
    fn = _emulated(case.family, key)
    # The kernels run as a user runs them, in 32-bit mode (the conformance check turns
    # 64-bit mode on; under it Mosaic GPU's loop counters mix i32 and i64 and fail to
    # lower); the Hopper kernels size their grid by the device's SM count. An f32 dot at
    # HIGHEST (Triton's FMA dot) is modelled in float64, so its kernels run in 64-bit mode.
    with jax.enable_x64(case.meta.get("precision") == "highest"):
        if case.family == MGPU:
            from jaxwarp._src.pallas import mosaic_gpu

            with mosaic_gpu.target_sm_count(NUM_SMS):
                got = np.asarray(fn(*args))
        else:
            got = np.asarray(fn(*args))
    want = _jnp_dtype(case.out)
    if got.dtype != want:
        raise CaptureError(f"the {case.kernel} kernel returned {got.dtype}; the capture's "
                           f"out is {case.out}")
    return got.view(_raw_dtype(case.out))


def groups(keys: set) -> dict[str, set[str]]:
    """Keys -> {group: its sub-keys}; a group is a key without its last ``/`` part.

    Example:
      >>> g = groups({"pallas/x/t0/a", "pallas/x/t0/out", "pallas_mgpu/y/meta"})
      >>> {k: sorted(v) for k, v in g.items()}
      {'pallas/x/t0': ['a', 'out'], 'pallas_mgpu/y': ['meta']}
    """
    out: dict[str, set[str]] = collections.defaultdict(set)
    for key in sorted(keys):
        base, sub = key.rsplit("/", 1)
        out[base].add(sub)
    return dict(out)


def configs(cap: Any, keys: set) -> Iterator[GroupResult]:
    """Every ``pallas/`` and ``pallas_mgpu/`` group of the file through ``emulate``."""
    for group, subs in groups(keys).items():
        family = group.split("/", 1)[0]
        try:
            if "meta" not in subs:
                raise CaptureError(f"{group} has no meta (FORMAT_PALLAS.md); has "
                                   f"{sorted(subs)}")
            case = parse_meta(cap[f"{group}/meta"], family, group)
            inputs = decode(cap, group, subs, case)
        except CaptureError as e:
            yield GroupResult(group, 0, 0, error=str(e))
            continue
        want = inputs.pop("out")
        if want.size == 0:
            yield GroupResult(group, 0, 0, error=f"{group}/out is empty: nothing to compare")
            continue
        try:
            got = run_case(case, inputs)
        except ImportError as e:
            yield GroupResult(group, 0, int(want.size), not_modelled=True,
                              note=f"the {case.kernel} kernel cannot be entered here: {e}")
            continue
        except NotImplementedError as e:
            yield GroupResult(group, 0, int(want.size), not_modelled=True,
                              note=f"emulate cannot run it: {type(e).__name__}: {e}")
            continue
        except (TypeError, ValueError, AttributeError, RuntimeError, CaptureError) as e:
            yield GroupResult(group, 0, int(want.size),
                              error=f"the model refused it: {type(e).__name__}: {e}")
            continue
        ok = got == want
        yield GroupResult(group, int(ok.sum()), int(ok.size), _note(case, ok))


def _note(case: Case, ok: np.ndarray) -> str:
    """Where a group's mismatches lie: the input kind and how many rows of ``out`` differ."""
    if ok.all():
        return ""
    rows = ok.reshape(-1, ok.shape[-1]).all(axis=1)
    return (f"kind {case.meta.get('kind', '?')}: {int((~rows).sum())} of {rows.size} rows "
            f"of out differ")
