"""``mode="native"``: the exact model's instruction chain, run on a Hopper GPU's tensor cores.

On an H100 / H200 the instruction that ``matmul`` models exists, so instead of emulating
it the GEMM can issue it: a Pallas kernel whose every output element goes through the same
sequence of ``wgmma.mma_async`` k-steps as exact mode's chain -- same instruction k, same
ascending k order, C first, the accumulator kept in registers between instructions,
promotion (``promote_every``) as an fp32 round-to-nearest addition of each interval's
chain from zero -- so its bits equal ``mode="exact"``'s by construction (and
``benchmarks/native_check.py`` and ``benchmarks/native_mgpu.py --check`` check them on the
GPU). Two kernels issue it, chosen by the option ``native_backend`` (:func:`backend`):
``native_mgpu`` on Pallas' Mosaic GPU backend (``plgpu.wgmma``, TMA pipeline; "auto"
where it was measured to run and to be the faster: ``native_mgpu.auto_fits``) and
``native_kernels`` on the Triton backend (which JAX 0.11 deprecates).

Which exact chains a wgmma chain *is* (:func:`check`): the kernel issues ``wgmma`` m64nNkK
with the format's k (:data:`NATIVE_K`: 16 for f16 / bf16, 8 for tf32, 32 for e4m3 / e5m2);
an instruction and tile of ``matmul`` run natively when their datapath family and k are
wgmma's (``isa.datapath_family``): on sm_90 f16 / bf16 WMMA and ``mma.sync`` at k = 16
are the same 16-product blocks, so they run natively too; ``mma.sync`` m16n8k8, WMMA tf32
m16n16k8 (two k4 blocks) and fp8 ``mma.sync`` (two f16 HMMAs and an FADD) are other
arithmetic and raise. Operand conversion, per-tensor fp8 scales and the gradients are
``matmul``'s own (only the chain runs natively); block scales are not supported.
``jaxwarp.mma(mode="native")`` (``matmul.mma``, the GEMM layer's front-end to
``datapath.mma``) runs one chain on logical matrices through :func:`check_mma` and
:func:`run_mma`.

What it guarantees: every product that ``matmul`` / ``mma`` / ``emulate`` sends to the tensor
core (forward and backward) has exact mode's bits. Nothing else in a program changes: the
operations that are XLA's own (elementwise ops, normalizations, the sums that make a bias's
gradient) are compiled by XLA as parts of the whole program, and a float reduction's order
is XLA's choice, which can differ between the native program (products as Pallas custom
calls) and the exact one (products as XLA loops). On an H100 the study's training step
(``benchmarks/native_check.py``, part ``stepbits``) matched exact mode in the loss and every
parameter's gradient but a bias's (``ln_f.b``: a sum over the batch of a cotangent that is a
product's output); ``docs/native.md`` has the measurements.

Needs: an NVIDIA GPU of compute capability 9.0 as JAX's default device and JAX's Pallas
Triton backend (``jax[cuda]``); anywhere else ``matmul(mode="native")`` raises a
ValueError that says so, eagerly and under ``jax.jit``.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp

from jaxwarp._src.arithmetic import datapath_checks
from jaxwarp._src.catalogue import isa
from jaxwarp._src.config import config
from jaxwarp._src.gemm.kernels import native_kernels, native_mgpu, native_tiles, native_tiles_mgpu
from jaxwarp._src.gemm.matmul_tiles import ACCUMULATORS, TILES, Cfg, issue_arch
from jaxwarp._src.numerics import bitops

#: The targets whose model the native kernel reproduces (an H100 is sm_90a).
NATIVE_ARCHS = ("sm_90", "sm_90a")
#: The k of the wgmma instruction the native kernel issues, per operand format.
NATIVE_K = {f: shapes[0][2] for f, shapes in TILES["wgmma"].items()}
#: The kernel's k block per operand format (bytes: 128 per row of A), a power of two.
BLOCK_K = {"f16": 64, "bf16": 64, "tf32": 32, "e4m3": 128, "e5m2": 128}
#: Whether the kernel takes B transposed (K-major), per operand format: fp8 wgmma reads
#: both operands K-major (an fp8 kernel with (K, N) blocks of B ran at 0.24 of XLA's GEMM
#: at 4096^3 on an H100).
B_KMAJOR = {"f16": False, "bf16": False, "tf32": False, "e4m3": True, "e5m2": True}


def device_error() -> str | None:
    """Why JAX's default device cannot run the native kernel, or None if it can.

    Example:
        >>> err = device_error()
        >>> err is None or "needs an NVIDIA Hopper GPU (compute capability 9.0" in err
        True
    """
    dev = jax.devices()[0]
    cc = str(getattr(dev, "compute_capability", "") or "")
    if dev.platform == "gpu" and "nvidia" in dev.device_kind.lower() and cc == "9.0":
        return None
    what = f"{dev.platform} device {dev.device_kind!r}" + (
        f" (compute capability {cc})" if cc else "")
    return (f"mode='native' issues the tensor-core instructions themselves and needs an "
            f"NVIDIA Hopper GPU (compute capability 9.0: H100, H200) as JAX's default "
            f"device, with jax[cuda]; this is a {what}. mode='exact' gives the same bits "
            f"on any device")


def _family(instruction: str, a_format: str, k: int, b_format: str) -> str:
    return isa.datapath_family(instruction, a_format, k, b_format)


def check(cfg: Any) -> None:
    """Raises ValueError unless ``matmul``'s configuration ``cfg`` (a ``matmul_tiles.Cfg``)
    is a chain the native kernel issues (:func:`check_chain`),
    on a device that has it (:func:`device_error`).

    Example:
        >>> from jaxwarp._src.gemm.matmul_tiles import Cfg
        >>> cfg = Cfg("f16", "f16", "f32", (16, 8, 8), "mma_sync", "sm_90", "native",
        ...           None, False)
        >>> check(cfg)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ValueError: mode='native' issues wgmma m64nNk16 ... tile=(16, 8, 8) ...
    """
    check_chain(cfg)
    err = device_error()
    if err is not None:
        raise ValueError(err)


def check_chain(cfg: Any) -> None:
    """Raises ValueError unless ``cfg``'s chain is one the native kernel issues: arch
    sm_90, the instruction and tile k of wgmma's datapath, no block scales.

    Example:
        >>> from jaxwarp.backends import ChainConfig
        >>> check_chain(ChainConfig("f16", "f16", "f32", (16, 16, 16), "wmma", "sm_90",
        ...                         "native", None, False))  # WMMA f16 k16: wgmma's blocks
    """
    fa, fb = cfg.a_format, cfg.b_format
    if not isinstance(cfg.arch, str) or cfg.arch not in NATIVE_ARCHS:
        raise ValueError(f"mode='native' runs an H100's own instructions, whose model is "
                         f"arch='sm_90'; got arch={cfg.arch!r} (allowed: {NATIVE_ARCHS})")
    if fa not in NATIVE_K:
        raise ValueError(f"mode='native' has no operand_format={fa!r}; it issues wgmma, "
                         f"whose operand formats are {tuple(NATIVE_K)}")
    k = NATIVE_K[fa]
    ik = cfg.tile[2]
    want = _family("wgmma", fa, k, fb)
    try:
        have = _family(cfg.instruction, fa, ik, fb)
    except KeyError:
        have = None
    if ik != k or have != want:
        raise ValueError(
            f"mode='native' issues wgmma m64nNk{k} for {fa} operands (datapath {want!r}); "
            f"instruction={cfg.instruction!r} with tile={cfg.tile} is a chain of k={ik} "
            f"instructions (datapath {have!r}), other arithmetic that the GPU kernel cannot "
            f"issue. Use instruction='wgmma', or a tile with k={k} of the same datapath")
    if cfg.accumulator not in ACCUMULATORS["wgmma"][fa]:
        raise ValueError(f"mode='native' has no accumulator={cfg.accumulator!r} for {fa}; "
                         f"wgmma's: {ACCUMULATORS['wgmma'][fa]}")
    if cfg.blockwise:
        raise ValueError("mode='native' does not take block scales (2-D a_scale / b_scale); "
                         "use per-tensor scales or mode='exact'")
    backend(cfg)


def exact_on_tensor_cores(cfg: Any, dp: Any = None) -> Any:
    """The native chain that gives exact mode's bits for ``cfg`` on this GPU's tensor
    cores, or None: where the option ``gemm_exact_tensor_cores`` is "auto", JAX's
    default device is a Hopper GPU (:func:`device_error`), and ``cfg``'s chain is one
    the GPU's ``wgmma`` issues with the same arithmetic -- its instructions' datapath
    (``dp``, by default the catalogue's) equal to sm_90a ``wgmma``'s for the formats, the same
    instruction k (so the same blocks of products, C first, ascending k), one operand
    format, an accumulator ``wgmma`` has, no scales and no promotion. sm_90's WMMA,
    ``mma.sync`` k16 and ``wgmma`` f16 / bf16 chains are such chains, and so are sm_100a's
    ``tcgen05`` ones, whose datapath the catalogue gives as Hopper's; sm_80's (blocks of 8,
    F = 24) are not. sm_90's fp8 ``mma.sync`` (:func:`_hmma_pair`: two f16 HMMAs from +0
    and an FADD of C) is one too, as f16 ``wgmma`` chains with promotion every instruction
    (its native form's formats f16; :func:`run_exact` converts the operands).

    Example:
        >>> from jaxwarp._src.gemm.matmul_tiles import Cfg
        >>> cfg = Cfg("bf16", "bf16", "f32", (128, 8, 16), "tcgen05", "sm_100a", "exact",
        ...           None, False)
        >>> exact_on_tensor_cores(cfg) is None  # the option is "off" by default
        True
    """
    fa, ik = cfg.a_format, cfg.tile[2]
    if (cfg.mode != "exact" or cfg.scaled or cfg.blockwise or cfg.promote_every is not None
            or config.gemm_exact_tensor_cores == "off" or fa not in NATIVE_K
            or cfg.b_format not in NATIVE_K):
        return None
    if dp is None:
        dp = datapath_checks.matmul_datapath(issue_arch(cfg.instruction, cfg.arch),
                                             cfg.instruction, fa, cfg.b_format,
                                             cfg.accumulator, ik)
    if _same_as_wgmma(fa, cfg.b_format, cfg.accumulator, ik, dp):
        native = dict(tile=(64, 8, NATIVE_K[fa]))
    elif _hmma_pair(fa, cfg.b_format, cfg.accumulator, ik, dp):  # as f16 chains
        native = dict(a_format="f16", b_format="f16", tile=(64, 8, NATIVE_K["f16"]),
                      promote_every=ik)
    else:
        return None
    if device_error() is not None:
        return None
    return dataclasses.replace(cfg, instruction="wgmma", arch="sm_90", mode="native",
                               **native)


def run_exact(a_op, b_op, c_acc, cfg: Any, native: Any = None) -> jax.Array:
    """Exact mode's chain of ``cfg`` on the tensor cores, for a ``cfg`` that
    :func:`exact_on_tensor_cores` routes there: :func:`chain` of its native form
    (``native``: that function's result, where the caller has it), on operands whose K is
    already padded as exact mode pads it. sm_90's fp8 ``mma.sync``
    (:func:`_hmma_pair`) takes f16 operands (exact) in its HMMAs' k order
    (``native_tiles.mod4_order``): each instruction's two HMMAs chain from +0 and C is added
    last, native mode's promotion every instruction.

    Example:
        >>> from jaxwarp._src.gemm.matmul_tiles import Cfg
        >>> cfg = Cfg("bf16", "bf16", "f32", (16, 8, 16), "mma_sync", "sm_90", "exact",
        ...           None, False)
        >>> run_exact(jnp.ones((64, 32), jnp.bfloat16), jnp.ones((32, 64), jnp.bfloat16),
        ...           None, cfg)  # "off" by default (and a Hopper GPU is needed)
        Traceback (most recent call last):
        ValueError: run_exact: the chain is not one exact_on_tensor_cores routes ...
    """
    native = exact_on_tensor_cores(cfg) if native is None else native
    if native is None:
        raise ValueError("run_exact: the chain is not one exact_on_tensor_cores routes to "
                         "the tensor cores (the option gemm_exact_tensor_cores, a Hopper GPU, "
                         "wgmma's datapath)")
    if native.a_format != cfg.a_format:  # fp8 -> f16, each instruction's k as its HMMAs read
        order = native_tiles.mod4_order(jnp.arange(a_op.shape[1]))
        a_op, b_op = a_op[:, order].astype(jnp.float16), b_op[order, :].astype(jnp.float16)
    return chain(a_op, b_op, c_acc, native)


def _same_as_wgmma(a_format: str, b_format: str, accumulator: str, ik: int,
                   dp: Any) -> bool:
    """Whether a chain of these static arguments and datapath ``dp`` is one the GPU's
    ``wgmma`` issues with the same arithmetic: one operand format of wgmma's, its k, an
    accumulator it has, and the datapath equal to sm_90a ``wgmma``'s."""
    if (a_format != b_format or a_format not in NATIVE_K or ik != NATIVE_K[a_format]
            or accumulator not in ACCUMULATORS["wgmma"][a_format]):
        return False
    return dp == datapath_checks.matmul_datapath("sm_90a", "wgmma", a_format, a_format,
                                                 accumulator, ik)


def _hmma_pair(a_format: str, b_format: str, accumulator: str, ik: int, dp: Any) -> bool:
    """Whether the chain is sm_90's fp8 ``mma.sync``: fp8 operands (one format or two)
    converted to f16 (``dp.operand_via``), each instruction's k taken by two f16 HMMAs of
    16 products (``k_split="mod4"``, ``block_k``) chained from +0, C added last
    (``c_mode="end"``), an fp32 C and D, and the HMMAs' datapath otherwise equal to f16
    ``wgmma``'s -- so the tensor cores run it as f16 ``wgmma`` chains and an fp32 addition
    (``native_tiles.chain(..., hmma_pair=True)``, :func:`run_exact`)."""
    if (dp is None or ik != native_tiles.PAIR_K or dp.block_k != ik // 2
            or accumulator != "f32"
            or not {a_format, b_format} <= set(isa.FP8_TYPES)
            or (dp.operand_via, dp.k_split, dp.c_mode) != ("f16", "mod4", "end")):
        return False
    return dataclasses.replace(dp, operand_via="", k_split="contig", c_mode="fused") == (
        datapath_checks.matmul_datapath("sm_90a", "wgmma", "f16", "f16", "f32",
                                        NATIVE_K["f16"]))


def tiles_on_tensor_cores(checked: Any, satf: bool) -> bool:
    """Whether exact ``jaxwarp.mma`` (``checked``: ``datapath.check_mma``'s result) runs its
    tiles on this GPU's tensor cores (:func:`run_tiles`): the option
    ``gemm_exact_tensor_cores`` is "auto", the device a Hopper GPU, the chain's datapath
    sm_90a ``wgmma``'s (as :func:`exact_on_tensor_cores` asks of a GEMM) or that of sm_90's
    fp8 ``mma.sync`` (two f16 HMMAs, whose datapath is f16 ``wgmma``'s, and an FADD),
    C and D of one format, no satf and no ``scale_input_d``, and a tiles kernel that
    takes them on the installed JAX (:func:`tiles_backend`; elsewhere the tiles keep the
    model's arithmetic).

    Example:
        >>> from jaxwarp._src.arithmetic import datapath
        >>> a = jnp.ones((4, 16, 32), jnp.float16); b = jnp.ones((32, 16), jnp.float16)
        >>> checked = datapath.check_mma(a, b, jnp.zeros((16, 16)), a_format="f16",
        ...                              c_format="f32", d_format="f32")
        >>> tiles_on_tensor_cores(checked, False)  # the option is "off" by default
        False
    """
    cfg = checked.cfg
    formats = None if cfg is None else (cfg.a_format, cfg.b_format, cfg.c_format, cfg.ik)
    if (cfg is None or satf or cfg.c_shift or cfg.c_format != cfg.d_format
            or config.gemm_exact_tensor_cores == "off"
            or min(checked.a.size, checked.b.size, checked.c.size) == 0):
        return False
    wgmma = _same_as_wgmma(*formats, cfg.dp)
    pair = not wgmma and _hmma_pair(*formats, cfg.dp)
    if not (wgmma or pair):
        return False
    m, K = checked.a.shape[-2:]
    return (tiles_backend(cfg, m, checked.b.shape[-1], K, pair) is not None
            and device_error() is None)


def tiles_backend(cfg: Any, m: int, n: int, K: int, pair: bool | None = None) -> str | None:
    """Which Pallas backend runs (m, K) @ (K, n) tiles of a wgmma chain (``cfg``: its
    ``ChainCfg``) on the tensor cores, by the option ``gemm_tiles_backend``, or None where
    the one it names cannot: "triton" (``native_tiles``: m dividing 64 and g·n a power of
    two from 16 to 256, where JAX has Pallas' Triton backend), "mosaic_gpu"
    (``native_tiles_mgpu``: m dividing 64, n a multiple of 8 up to 256, one operand
    format, not sm_90's fp8 ``mma.sync``); "auto" is Triton where it takes the tiles, else
    Mosaic GPU. ``pair``: whether the chain is sm_90's fp8 ``mma.sync``, where the caller
    has found it (:func:`_hmma_pair`).

    Example:
        >>> from jaxwarp._src.arithmetic import datapath
        >>> from jaxwarp._src.catalogue.arch import datapath_for
        >>> cfg = datapath.ChainCfg("f16", "f16", "f32", "f32",
        ...                         datapath_for("sm_90a", "wgmma", "f16", 16), 16)
        >>> with config.override(gemm_tiles_backend="mosaic_gpu"):
        ...     tiles_backend(cfg, 16, 8, 32) in ("mosaic_gpu", None)
        True
    """
    if pair is None:
        pair = _hmma_pair(cfg.a_format, cfg.b_format, cfg.c_format, cfg.ik, cfg.dp)
    choice = config.gemm_tiles_backend
    if choice in ("auto", "triton") and not native_mgpu.triton_missing() and (
            native_tiles.fits(m, n, K, cfg.ik) is None):
        return "triton"
    if choice in ("auto", "mosaic_gpu") and not pair and native_tiles_mgpu.unsupported(
            cfg.a_format, cfg.b_format, cfg.c_format, m, n, K) is None:
        return "mosaic_gpu"
    return None


def run_tiles(a, b, c, cfg: Any, *, interpret: bool = False) -> jax.Array:
    """Exact ``mma``'s tiles on the tensor cores, for a chain that
    :func:`tiles_on_tensor_cores` accepted (``cfg``: its ``ChainCfg``; another chain's
    raises ValueError), through the kernel :func:`tiles_backend` picks: ``native_tiles``
    (Triton: g = 64 / m tiles to one ``wgmma``, block-diagonally) or
    ``native_tiles_mgpu`` (Mosaic GPU: g tiles' A's stacked, one ``wgmma`` chain a tile).
    Leading batch dims broadcast as in ``mma``. ``interpret``: the Triton kernel in
    Pallas' interpreter, each product the exact model's (checking the layout on a CPU;
    the Mosaic GPU kernel's interpreter is ``jaxwarp.emulate(..., arch="sm_90a")``).

    Example:
        >>> from jaxwarp._src.arithmetic import datapath
        >>> a = jnp.ones((2, 16, 32), jnp.float16); b = jnp.ones((32, 16), jnp.float16)
        >>> from jaxwarp._src.catalogue.arch import datapath_for
        >>> dp = datapath_for("sm_90a", "wgmma", "f16", 16)
        >>> cfg = datapath.ChainCfg("f16", "f16", "f32", "f32", dp, 16)
        >>> run_tiles(a, b, jnp.zeros((16, 16)), cfg, interpret=True)[1, 0, 0]
        Array(32., dtype=float32)
    """
    formats = (cfg.a_format, cfg.b_format, cfg.c_format, cfg.ik)
    pair = _hmma_pair(*formats, cfg.dp)
    if not pair and not _same_as_wgmma(*formats, cfg.dp):
        raise ValueError("run_tiles: the chain's datapath is neither sm_90a wgmma's nor "
                         "sm_90's fp8 mma.sync's (tiles_on_tensor_cores decides)")
    (m, K), n = a.shape[-2:], b.shape[-1]
    which = tiles_backend(cfg, m, n, K, pair)
    if which is None:
        raise ValueError(f"run_tiles: no tiles kernel takes ({m}, {K}) @ ({K}, {n}) tiles "
                         f"with gemm_tiles_backend={config.gemm_tiles_backend!r} on JAX "
                         f"{jax.__version__} (tiles_on_tensor_cores decides)")
    batch, (a, b, c) = _flat_batch(a, b, c)
    if which == "mosaic_gpu":
        d = native_tiles_mgpu.chain(a, b, c, cfg.a_format, cfg.c_format)
    else:
        spec = (native_kernels.DotSpec("f16", "f16", "f32", NATIVE_K["f16"]) if pair else
                native_kernels.DotSpec(cfg.a_format, cfg.b_format, cfg.c_format, cfg.ik,
                                       B_KMAJOR[cfg.a_format]))
        d = native_tiles.chain(a, b, c, spec, hmma_pair=pair, nan=cfg.dp.nan_f32,
                               interpret=interpret)
    return d.reshape(batch + d.shape[-2:])


def backend(cfg: Any, K: int | None = None, M: int | None = None,
            N: int | None = None) -> str:
    """Which Pallas backend runs ``cfg``'s chain (over ``K``, when known): the option
    ``native_backend``; "auto" is Mosaic GPU where its kernel (``native_mgpu``) can run
    the chain on the installed JAX and was measured to compile and to be at least as fast
    (``native_mgpu.auto_fits``), Triton otherwise.

    Raises:
        ValueError: ``native_backend="mosaic_gpu"`` for a chain that kernel cannot run.

    Example:
        >>> from jaxwarp.backends import ChainConfig
        >>> cfg = ChainConfig("e5m2", "e4m3", "f32", (64, 8, 32), "wgmma", "sm_90",
        ...                   "native", None, False)
        >>> backend(cfg)  # mixed fp8 operands: one dtype a plgpu.wgmma
        'triton'
    """
    choice = config.native_backend
    if choice == "triton":
        return choice
    why = native_mgpu.unsupported(cfg.a_format, cfg.b_format, cfg.accumulator)
    if why is None and (choice == "mosaic_gpu"
                        or native_mgpu.auto_fits(cfg.a_format, K, cfg.promote_every, M, N)):
        return "mosaic_gpu"
    if why is not None and choice == "mosaic_gpu":
        raise ValueError(f"mode='native' with native_backend='mosaic_gpu' cannot run this "
                         f"chain: {why}; use native_backend='triton' or 'auto'")
    return "triton"


def _pow2_at_least(n: int, lo: int) -> int:
    p = lo
    while p < n:
        p *= 2
    return p


def plan(cfg: Any, M: int, K: int, N: int) -> native_kernels.Plan:
    """The kernel's blocks for an (M, K) @ (K, N) product: (bm, bn, bk), warps, stages.

    Example:
        >>> from jaxwarp._src.gemm.matmul_tiles import Cfg
        >>> cfg = Cfg("f16", "f16", "f32", (64, 8, 16), "wgmma", "sm_90", "native",
        ...           None, False)
        >>> plan(cfg, 4096, 4096, 4096).block
        (128, 256, 64)
    """
    spec = native_kernels.DotSpec(cfg.a_format, cfg.b_format, cfg.accumulator,
                                  NATIVE_K[cfg.a_format], B_KMAJOR[cfg.a_format])
    bm = 128 if M > 64 else 64
    bn = min(128 if cfg.promote_every else 256, _pow2_at_least(N, 16))
    warps = 8 if bm * bn >= 128 * 128 else 4
    return native_kernels.Plan(spec, K, (bm, bn, BLOCK_K[cfg.a_format]), cfg.promote_every,
                               warps, 3)


def chain(a_op, b_op, c_acc, cfg: Any, *, interpret: bool = False) -> jax.Array:
    """``matmul``'s k loop in native mode: (M, K) @ (K, N) + C on converted operands.

    Rows and columns are padded to the kernel's blocks (each output element depends only
    on its row of A and column of B); K is never padded.

    Args:
        a_op, b_op: operands in their formats' storage dtypes (tf32: rounded fp32).
        c_acc: (M, N) accumulator input in the accumulator's dtype, or None: C = +0 (the
            Mosaic GPU kernel then reads no C).
        cfg: a ``jaxwarp.backends.ChainConfig`` (``jaxwarp.backends.chain_config``
            gives ``jaxwarp.matmul``'s), with ``mode="native"``.
        interpret: run the Triton kernel in Pallas' interpreter with the exact model as
            each block's arithmetic (for checking the kernel's structure on a CPU); the
            Mosaic GPU kernel is checked on a CPU under ``jaxwarp.emulate`` instead.

    Returns:
        (M, N) in the accumulator's dtype.

    Example:
        >>> from jaxwarp.backends import ChainConfig
        >>> cfg = ChainConfig("bf16", "bf16", "f32", (64, 8, 16), "wgmma", "sm_90",
        ...                   "native", None, False)
        >>> a = jnp.ones((8, 32), jnp.bfloat16); b = jnp.ones((32, 8), jnp.bfloat16)
        >>> jax.eval_shape(lambda: chain(a, b, jnp.zeros((8, 8), jnp.float32), cfg,
        ...                              interpret=True))
        ShapeDtypeStruct(shape=(8, 8), dtype=float32)
    """
    (M, K), N = a_op.shape, b_op.shape[1]
    check_chain(cfg)
    if not interpret and backend(cfg, K, M, N) == "mosaic_gpu":
        return native_mgpu.chain(a_op, b_op, c_acc, cfg.a_format, cfg.accumulator,
                                 cfg.promote_every)
    if c_acc is None:
        c_acc = jnp.zeros((M, N), native_mgpu.ACC_DTYPES[cfg.accumulator])
    p = plan(cfg, M, K, N)
    bm, bn, _ = p.block
    Mp, Np = -(-M // bm) * bm, -(-N // bn) * bn
    if Mp != M:
        a_op = jnp.pad(a_op, ((0, Mp - M), (0, 0)))
    if Np != N:
        b_op = jnp.pad(b_op, ((0, 0), (0, Np - N)))
    if p.spec.b_kmajor:
        b_op = b_op.T
    if (Mp, Np) != (M, N):
        c_acc = jnp.pad(c_acc, ((0, Mp - M), (0, Np - N)))
    d = native_kernels.gemm(a_op, b_op, c_acc, p, interpret=interpret)
    return d[:M, :N]


# --------------------------------------------------------------------------------------
# jaxwarp.mma(mode="native"): one chain of instructions, (..., m, k) @ (..., k, n) + C.


def check_mma(a_format: str, b_format: str, c_format: str, d_format: str, instruction: str,
              ik: int, arch: Any, satf: bool, dp: Any, c_shift: int) -> None:
    """Raises ValueError unless ``jaxwarp.mma(..., mode="native")`` with these (checked)
    static arguments is a chain the native kernel issues, on a device that has it.

    The kernel's accumulator is both C and D (``wgmma``'s D has C's type), it has no
    satf, and it runs the GPU's own datapath, not a ``datapath=`` model.

    Example:
        >>> check_mma("f16", "f16", "f16", "f32", "wmma", 16, "sm_90", False, None, 0)
        Traceback (most recent call last):
        ValueError: mode='native' runs one accumulator as C and D ...
    """
    if c_format != d_format:
        raise ValueError(f"mode='native' runs one accumulator as C and D (wgmma's D has C's "
                         f"type); got c_format={c_format!r}, d_format={d_format!r}")
    if satf:
        raise ValueError("mode='native' has no satf (the kernel issues wgmma, which has no "
                         ".satfinite for float types); use mode='exact'")
    if dp is not None:
        raise ValueError("mode='native' runs the GPU's own datapath; datapath= (a model "
                         "to explore) needs mode='exact'")
    if c_shift:
        raise ValueError("mode='native' has no scale_input_d (a tcgen05 operand)")
    check_chain(Cfg(a_format, b_format, c_format, (64, 8, ik), instruction, arch, "native",
                    None, False))
    err = device_error()
    if err is not None:
        raise ValueError(err)


def run_mma(a, b, c, cfg: Any, *, interpret: bool = False) -> jax.Array:
    """``mma``'s chain on the tensor cores: ``cfg`` is ``datapath``'s ``ChainCfg`` of a chain
    that :func:`check_mma` accepted, so it is ``wgmma`` of the same k and datapath.

    Leading batch dims broadcast as in ``mma`` (flattened into one, through one
    ``jax.vmap``). tf32 operands are cut to their top 19 bits first, as the tensor core
    reads them (``bitops.tf32_keep``): the kernel must not round them. ``interpret``:
    as :func:`chain`'s.

    Example:
        >>> from jaxwarp._src.arithmetic import datapath
        >>> a = jnp.ones((2, 16, 32), jnp.float16); b = jnp.ones((32, 8), jnp.float16)
        >>> cfg = datapath.ChainCfg("f16", "f16", "f32", "f32", None, 16)
        >>> c = jnp.zeros((16, 8), jnp.float32)
        >>> jax.eval_shape(lambda: run_mma(a, b, c, cfg, interpret=True))
        ShapeDtypeStruct(shape=(2, 16, 8), dtype=float32)
    """
    if cfg.a_format == "tf32":
        a, b = bitops.tf32_keep(a), bitops.tf32_keep(b)
    chain_cfg = Cfg(cfg.a_format, cfg.b_format, cfg.c_format, (64, 8, cfg.ik), "wgmma",
                    "sm_90a", "native", None, False)
    fn = functools.partial(chain, cfg=chain_cfg, interpret=interpret)
    if not jnp.broadcast_shapes(a.shape[:-2], b.shape[:-2], c.shape[:-2]):
        return fn(a, b, c)
    # One batch dim (one vmap: a Mosaic GPU kernel's grid gains one dim a vmap).
    batch, (a, b, c) = _flat_batch(a, b, c)
    d = jax.vmap(fn)(a, b, c)
    return d.reshape(batch + d.shape[-2:])


def _flat_batch(a, b, c):
    """``mma``'s leading batch dims, broadcast: (their shape, the three flattened to one
    batch dim)."""
    batch = jnp.broadcast_shapes(a.shape[:-2], b.shape[:-2], c.shape[:-2])
    return batch, tuple(jnp.broadcast_to(x, batch + x.shape[-2:]).reshape(
        (-1, *x.shape[-2:])) for x in (a, b, c))

