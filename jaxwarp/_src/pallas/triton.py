"""Triton-style Pallas kernels on sm_90a: which instruction chain each kernel product is.

Pallas lowers a ``pl.pallas_call`` with Triton compiler params to Triton: each
``dot_general`` of the kernel body becomes ``tt.dot(a, b, acc=0)`` with an accumulator of
the output's dtype when it is f16 (f32 otherwise), cast to the output dtype after, and its
``input_precision`` from the dot's precision: TF32 for f32 operands at ``DEFAULT`` or
``HIGH`` precision (also ``jnp.dot``'s default), IEEE at ``HIGHEST``
(``jax/_src/pallas/triton/lowering.py``, ``_dot_general_lowering``, JAX 0.10 and 0.11).
Triton then folds ``acc + dot(a, b, 0)`` into ``dot(a, b, acc)`` (its combine patterns;
``rewrite.py`` does the same) and picks the instruction: wgmma (MMAv3) where the kernel has
a multiple of 4 warps and the product's M is a multiple of 64 and N of 8 (Triton's
``supportMMA``), mma.sync (MMAv2) otherwise.

:data:`SM90A` is the one table of what each operand dtype runs as, with its evidence;
:func:`plan` reads it for one product, :func:`compute` runs the plan through
``jaxwarp.matmul`` (or the fp32 FMA chain), :func:`run_kernel` rewrites a whole kernel.
"""

from __future__ import annotations

import dataclasses
import functools

import jax.numpy as jnp
from jax import lax

from jaxwarp._src import checks
from jaxwarp._src.gemm import matmul_tiles
from jaxwarp._src.numerics import convert
from jaxwarp._src.numerics.bitops import tf32_keep
from jaxwarp._src.pallas import rewrite
from jaxwarp._src.pallas.model import (
    KernelModel,
    KernelProduct,
    KernelProductError,
    dtype_format,
    kernel_matmul,
)


@dataclasses.dataclass(frozen=True)
class Path:
    """How Triton runs a product of one operand dtype on sm_90a.

    Attributes:
        operand_format: the format the chain multiplies in.
        instruction: ``"hmma"`` (wgmma where Triton's MMAv3 applies, else mma.sync),
            ``"mma_sync"`` or ``"fma"`` (one fp32 FMA per k, in k order, C fused).
        k_window: None, or W: the k order inside each window of W k of the product is
            k % 4 in {0, 1} first, then k % 4 in {2, 3} (a product whose K is below W
            is one window).
        raw_tf32: the fp32 words go to the tensor core as they are (low 13 bits ignored);
            False: a tf32 operand is rounded first (``matmul``'s ``float_to_tf32``).
        evidence: what the model rests on.
    """

    operand_format: str
    instruction: str
    k_window: int | None = None
    raw_tf32: bool = False
    evidence: str = ""


_FP8_NOTE = (
    "fp8 converted to f16 (exact) and f16 m16n8k16 mma.sync with C fused, the k order in "
    "each window of 32 k permuted (k % 4 in {0, 1} first, then {2, 3}: the 8-bit operand "
    "layout, 4 consecutive k per thread, upcast and split over two k16 instructions); "
    "Triton issues neither fp8 wgmma nor fp8 mma.sync here")

#: Triton's product per operand dtype (f32 per input precision) on sm_90a.
SM90A = {
    "float16": Path("f16", "hmma", evidence=(
        "H100 capture (JAX 0.11.2): 59 kernels, 11 blocks 16..128 a side x 1, 2, 4, 8 "
        "warps and the forms with C, every element equal to the f16 wgmma / mma.sync chain "
        "(block of 16 k, C fused; identical bits on sm_90); the H200 sample too")),
    "bfloat16": Path("bf16", "hmma", evidence=(
        "H100 capture (JAX 0.11.2): 59 kernels (blocks, warps and forms as f16), every "
        "element equal to the bf16 chain; the H200 sample too")),
    "float8_e4m3fn": Path("f16", "mma_sync", 32, evidence=(
        _FP8_NOTE + "; H100 capture (JAX 0.11.2): 75 kernels, 14 blocks x 1, 2, 4, 8 warps "
        "and the forms with C, 100% of 1,589,248 elements; H200 sample 128x1024 @ "
        "1024x128: plain k order 95.3%, fp8 wgmma 0%, fp8 mma.sync 30%")),
    "float8_e5m2": Path("f16", "mma_sync", 32, evidence=(
        "H100 capture (JAX 0.11.2): 75 kernels, 100% of 1,589,248 elements, the path "
        "measured for e4m3: " + _FP8_NOTE)),
    "float32/tf32": Path("tf32", "hmma", raw_tf32=False, evidence=(
        "H100 capture (JAX 0.11.2): 41 kernels at the default precision, 100% of 737,280 "
        "elements with each fp32 operand rounded to tf32 to nearest, ties away "
        "(cvt.rna.tf32.f32, as Triton converts before a tf32 dot), then the tf32 chain; "
        "the raw words (low 13 bits ignored) matched 0.3%")),
    "float32/ieee": Path("f32", "fma", evidence=(
        "unverified on hardware: Triton's FMA dot (input_precision IEEE), per element an "
        "fp32 fma chain in k order starting from C")),
}

#: The targets whose Triton instruction selection is modelled.
ARCHS = ("sm_90a", "sm_90")
#: An instruction's (m, n, k) multiples for a Triton product, per (instruction, format):
#: the catalogue's tiles on sm_90a (mma.sync m16n8k16 / k8 tf32, wgmma m64n8k16 / k8).
_STEPS = {i: {f: matmul_tiles.default_tile(i, f, "sm_90a") for f in ("f16", "bf16", "tf32")}
          for i in ("mma_sync", "wgmma")}


@dataclasses.dataclass(frozen=True)
class Plan:
    """One product's chain: operands (M, K) @ (K, N) after ``transpose_lhs/rhs``."""

    path: Path
    instruction: str
    accumulator: str
    out_dtype: str
    m: int
    n: int
    k: int
    transpose_lhs: bool
    transpose_rhs: bool
    note: str


def num_warps(compiler_params) -> int:
    """The kernel's warps: Triton's CompilerParams (or the older ``{"triton": {...}}``)."""
    if isinstance(compiler_params, dict):
        compiler_params = compiler_params.get("triton", {})
        n = compiler_params.get("num_warps")
    else:
        n = getattr(compiler_params, "num_warps", None)
    return 4 if n is None else int(n)  # Pallas's Triton default


def is_triton_style(eqn) -> bool:
    """A pallas_call that Pallas lowers through Triton (its compiler params are Triton's
    or absent)."""
    cp = eqn.params.get("compiler_params")
    if cp is None or (isinstance(cp, dict) and (not cp or "triton" in cp)):
        return True
    return "triton" in type(cp).__module__


def _precision_key(dtype, precision) -> str:
    name = jnp.dtype(dtype).name
    if name != "float32":
        return name
    P = lax.Precision
    if precision is None:
        precision = (P.DEFAULT, P.DEFAULT)
    preset = getattr(lax, "DotAlgorithmPreset", None)
    if preset is not None and isinstance(precision, preset):
        if precision == preset.DEFAULT:
            return "float32/tf32"
        if precision == preset.TF32_TF32_F32:
            return "float32/tf32"
        if precision == preset.F32_F32_F32:
            return "float32/ieee"
        raise KernelProductError(
            f"a kernel product of f32 operands with precision={precision}: modelled are "
            f"the default precision, HIGH (tf32), HIGHEST and DotAlgorithmPreset "
            f"TF32_TF32_F32 / F32_F32_F32 (IEEE)")
    if isinstance(precision, (tuple, list)):
        tf32 = any(p in (P.DEFAULT, P.HIGH, None) for p in precision)
        return "float32/tf32" if tf32 else "float32/ieee"
    return "float32/tf32" if precision in (P.DEFAULT, P.HIGH) else "float32/ieee"


def _fail(lhs, rhs, what: str):
    raise KernelProductError(
        f"a Triton-style kernel product {jnp.dtype(lhs.dtype).name}{list(lhs.shape)} x "
        f"{jnp.dtype(rhs.dtype).name}{list(rhs.shape)}: {what}")


def plan(eqn, warps: int, model: KernelModel) -> Plan:
    """The chain Triton issues for the ``dot_general`` equation ``eqn`` on sm_90a."""
    lhs, rhs = (v.aval for v in eqn.invars)
    out = eqn.outvars[0].aval
    if model.arch not in ARCHS:
        raise KernelProductError(
            f"Triton-style Pallas kernels on arch={model.arch!r} are not modelled (Triton's "
            f"instruction selection is modelled for {ARCHS}; on sm_100a Triton issues "
            f"tcgen05 chains that this model does not cover)")
    (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
    if lb or rb or lhs.ndim != 2 or rhs.ndim != 2 or len(lc) != 1 or len(rc) != 1:
        _fail(lhs, rhs, "Pallas's Triton lowering takes 2-D operands with one contracting "
                        "dimension and no batch dimension")
    if lhs.dtype != rhs.dtype:
        _fail(lhs, rhs, "Triton's dot takes operands of one dtype")
    key = _precision_key(lhs.dtype, eqn.params.get("precision"))
    if key not in SM90A:
        _fail(lhs, rhs, f"no modelled Triton dot for {key} operands; modelled: "
                        f"{tuple(SM90A)}")
    path = SM90A[key]
    tl, tr = lc[0] == 0, rc[0] == 1
    M, K = (lhs.shape[1], lhs.shape[0]) if tl else lhs.shape
    N = rhs.shape[0] if tr else rhs.shape[1]
    out_name = jnp.dtype(out.dtype).name
    acc = "f16" if out_name == "float16" else "f32"
    if out_name not in ("float32", "float16", "bfloat16"):
        _fail(lhs, rhs, f"output dtype {out_name}: modelled are float32, float16 and "
                        f"bfloat16 outputs")
    given = model.operand_format
    own = None if key.startswith("float32/") else dtype_format(key)  # f32: no own format
    if given is not None and own is not None and given != own:
        _fail(lhs, rhs, f"operand_format={given!r} differs from the kernel product's "
                        f"dtype {key} ({own!r}); pass operand_format={own!r} or None")
    note = path.evidence
    instruction = path.instruction
    if model.instruction is not None:  # the caller's instruction, on the dtype's own format
        instruction, path = model.instruction, dataclasses.replace(
            path, operand_format=given or own or "tf32", k_window=None, raw_tf32=False)
        note = f"instruction={model.instruction!r} given (overrides Triton's choice)"
    elif key.startswith("float32") and given is not None and given != "f32":
        path = dataclasses.replace(path, operand_format=given, instruction="hmma",
                                   raw_tf32=False)
        instruction = "hmma"
        note = f"f32 operands converted to operand_format={given!r} as matmul converts them"
    if instruction == "hmma":
        v3 = warps % 4 == 0 and M % 64 == 0 and N % 8 == 0
        instruction = "wgmma" if v3 else "mma_sync"
        note = (f"{note}; {instruction}: {warps} warps, M={M}, N={N} (wgmma needs a "
                f"multiple of 4 warps, M % 64 == 0, N % 8 == 0)")
    if acc == "f16" and path.k_window is not None:
        _fail(lhs, rhs, "an f16 output of fp8 operands is not modelled (Triton accumulates "
                        "it in f16, where its MMAv3 rule allows fp8 wgmma: unmeasured); "
                        "use preferred_element_type=jnp.float32")
    if acc == "f16" and (instruction == "fma" or path.operand_format not in ("f16",)):
        _fail(lhs, rhs, f"an f16 output (Triton accumulates it in f16) of "
                        f"{path.operand_format} operands: modelled for f16 operands only")
    step = _STEPS.get(instruction, {}).get(path.operand_format)
    if path.k_window is not None:
        step = _STEPS["mma_sync"]["f16"]
        if K != 16 and K % path.k_window:
            _fail(lhs, rhs, f"K={K}: the fp8 path needs K = 16 or a multiple of "
                            f"{path.k_window}")
    if step is not None:
        bad = [f"{d}={s} (a multiple of {t})" for d, s, t in zip("MNK", (M, N, K), step,
                                                                 strict=True) if s % t]
        if bad:
            _fail(lhs, rhs, f"{instruction} {path.operand_format} needs {', '.join(bad)}; "
                            f"Triton issues no instruction for this block shape here")
    return Plan(path, instruction, acc, out_name, M, N, K, tl, tr, note)


def accumulates(eqn, warps: int, model: KernelModel) -> bool:
    """Whether the product's result is its accumulator (an add may be folded into it)."""
    try:
        p = plan(eqn, warps, model)
    except KernelProductError:
        return False
    return p.out_dtype == {"f16": "float16", "f32": "float32"}[p.accumulator]


def permute_k(x, window: int, axis: int):
    """x with each window of ``window`` k along ``axis`` reordered: k % 4 in {0, 1}
    first, then k % 4 in {2, 3} (one window when K < window), by reshapes only."""
    K = x.shape[axis]
    w = min(window, K)
    xm = jnp.moveaxis(x, axis, -1)
    lead = xm.shape[:-1]
    q = xm.reshape(*lead, K // w, w // 4, 4)
    lo = q[..., :2].reshape(*lead, K // w, w // 2)
    hi = q[..., 2:].reshape(*lead, K // w, w // 2)
    return jnp.moveaxis(jnp.concatenate([lo, hi], axis=-1).reshape(*lead, K), -1, axis)


def _two_sum(x, y):
    s = x + y
    yy = s - x
    return s, (x - (s - yy)) + (y - yy)


def _f32_bits_of(v):
    """float64 values that are float32 numbers, as float32 (on the bits: no flushing)."""
    u = lax.bitcast_convert_type(v, jnp.uint64)
    sign = (u >> 63).astype(jnp.uint32) << 31
    e = ((u >> 52) & 0x7FF).astype(jnp.int32)
    frac = u & jnp.uint64((1 << 52) - 1)
    normal = (((e - 1023 + 127).astype(jnp.uint32) << 23)
              | (frac >> 29).astype(jnp.uint32))
    sub_shift = jnp.clip(29 + (-126 - (e - 1023)), 0, 63).astype(jnp.uint64)
    sub = ((frac | jnp.uint64(1 << 52)) >> sub_shift).astype(jnp.uint32)
    special = jnp.uint32(0xFF << 23) | (frac >> 29).astype(jnp.uint32)
    mag = jnp.where(e == 0x7FF, special, jnp.where(e == 0, jnp.uint32(0),
                                                   jnp.where(e - 1023 >= -126, normal, sub)))
    return lax.bitcast_convert_type(sign | mag, jnp.float32)


def fma_chain(x, y, c):
    """``D = C + sum_k x[:, k] * y[k, :]`` as one fp32 ``fma`` per k, in k order.

    Each fma is exact: the product of two fp32 numbers is exact in float64 (48 significant
    bits), the sum with the accumulator is rounded to odd in float64 (TwoSum, then the
    last bit set where inexact) and that is rounded once to fp32 to nearest even on the
    bits; rounding to odd with 29 more bits then to nearest is the correctly rounded fma
    (Boldo and Melquiond, IEEE Trans. Computers 57(4), 2008). Needs ``jax_enable_x64``."""
    if not checks.x64_enabled():
        raise KernelProductError(
            "an f32 kernel product at precision HIGHEST (Triton's FMA dot) is modelled "
            "with float64 arithmetic: enable jax_enable_x64 (jax.config.update("
            "'jax_enable_x64', True))")
    f64 = jnp.float64

    def step(acc, xy):
        xk, yk = xy
        p = xk.astype(f64)[:, None] * yk.astype(f64)[None, :]  # exact
        s, e = _two_sum(p, acc)
        bits = lax.bitcast_convert_type(s, jnp.int64)
        away = jnp.where((e > 0) == (s > 0), jnp.int64(1), jnp.int64(-1))
        odd = jnp.isfinite(s) & ((bits & 1) == 0) & (e != 0)
        s = lax.bitcast_convert_type(jnp.where(odd, bits + away, bits), f64)
        return convert.round_to(s, "f32"), None

    acc, _ = lax.scan(step, c.astype(f64), (x.T, y))
    return _f32_bits_of(acc)


def compute(p: Plan, model: KernelModel, x, y, c):
    """The product of plan ``p`` on the kernel's operand values, C = ``c`` or zero."""
    x = x.T if p.transpose_lhs else x
    y = y.T if p.transpose_rhs else y
    acc_dtype = jnp.float16 if p.accumulator == "f16" else jnp.float32
    c = jnp.zeros((p.m, p.n), acc_dtype) if c is None else c.astype(acc_dtype)
    path = p.path
    if p.instruction == "fma":
        d = fma_chain(x.astype(jnp.float32), y.astype(jnp.float32), c)
    else:
        if path.k_window is not None:
            x, y = permute_k(x, path.k_window, 1), permute_k(y, path.k_window, 0)
        if path.raw_tf32:
            x, y = tf32_keep(x.astype(jnp.float32)), tf32_keep(y.astype(jnp.float32))
        d = kernel_matmul(x, y, c, operand_format=path.operand_format, accumulator=p.accumulator,
                   instruction=p.instruction, arch="sm_90a", mode=model.mode,
                   promote_every=model.promote_every)
    if p.out_dtype == "bfloat16":
        return convert.narrow_to(d, "bf16")
    return d


def run_kernel(eqn, invals, model: KernelModel):
    """A Triton-style ``pallas_call`` equation run with its products modelled.

    Returns ``(outputs, products)``: the kernel's outputs (JAX's Pallas interpreter runs
    the rewritten body over the grid) and a :class:`KernelProduct` per product equation.
    """
    params = eqn.params
    warps = num_warps(params.get("compiler_params"))
    kernel = params.get("name") or getattr(
        getattr(params["jaxpr"], "debug_info", None), "func_name", "") or ""
    products: list[KernelProduct] = []

    def product(deqn, lhs, rhs, c):
        p = plan(deqn, warps, model)
        la, ra = (v.aval for v in deqn.invars)
        out = deqn.outvars[0].aval
        products.append(KernelProduct(
            tuple(la.shape), tuple(ra.shape), jnp.dtype(la.dtype).name,
            jnp.dtype(ra.dtype).name, tuple(out.shape), jnp.dtype(out.dtype).name, p.m, p.n,
            p.k, p.path.operand_format, p.instruction, p.accumulator,
            "" if c is None else "add", p.note, str(kernel)))
        return compute(p, model, lhs, rhs, c)

    rw = rewrite.Rewriter(product, functools.partial(accumulates, warps=warps, model=model))
    body = rw.open(params["jaxpr"])
    new = dict(params, jaxpr=body, interpret=True)
    # Triton's programs are independent: evaluated side by side where that provably
    # gives the sequential interpreter's values (rewrite.parallel_grid says when).
    outs = rewrite.parallel_grid(new, invals)
    if outs is None:
        outs = rewrite.bind(eqn.replace(params=new), invals)
    return outs, tuple(products)
