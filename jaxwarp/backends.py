"""The GEMM backends' own entry points, for measuring and checking them.

``jaxwarp.matmul`` chooses how an exact product runs (XLA's k loop, shared executables on
the CPU, the fused Pallas kernel on a GPU, native mode's wgmma kernel); the options that
steer that choice are in ``jaxwarp.config``. This module names the few pieces below that
choice that the benchmarks call directly: a backend's chain on converted operands, its
kernel plan, its kernel's name in a profile. They are for measuring backends (the
benchmarks under ``benchmarks/``), not for computing with: their signatures follow the
backends and may change between releases without a deprecation period. Every one computes
the same bits as ``jaxwarp.matmul`` where it applies (the probe
fused_conversions_as_bitcasts excepted).

Fused kernel (exact f16 / bf16 sm_90 chains, one Pallas kernel per output tile):
    FUSED_KERNEL_NAME: the kernel's name (find it in a profile or in XLA's dumps).
    fused_chain: ``(a, b, c, datapath, fmt, **plan options)``: the kernel on stored
        operands.
    FusedPlan, fused_gemm: one kernel's plan and the kernel on it (``fused_gemm(a, b, c,
        plan)``).
    fused_conversions_as_bitcasts: a context manager, a probe: traced inside it, the
        kernel's fp32 truncations are bitcasts (wrong numbers; their cost measured).
    fused_mgpu_chain: ``(a, b, c, datapath, fmt, finite=, **settings)``: the same kernel
        on Pallas' Mosaic GPU backend (f16; bf16 in fp32's range); fused_mgpu_plan: its
        plan for a K and settings (tile, compute warpgroups, k block, stages, registers).
    FUSED_TILES_NAME, fused_tiles_chain: the name and the call of the same kernel on
        tiles, ``(a, b, c, datapath, fmt, **variants)`` on (T, m, k) @ (T, k, n) +
        (T, m, n), as exact ``jaxwarp.mma`` runs them on a GPU.

Native mode (wgmma through Triton, sm_90):
    NATIVE_K: the instruction k per operand format.
    native_device_error: why the default device cannot run it, or None.
    native_check_chain: raises ValueError unless a chain is one the kernel issues.
    native_chain: native mode's k loop on converted operands.
    NativeDotSpec, NativePlan, native_gemm: one kernel's dot, its plan, the kernel.
    NATIVE_TILES_NAME, native_tiles_chain: the name and the call of the kernel that
        runs many small tiles several to one wgmma, ``(a, b, c, spec, groups=,
        hmma_pair=, nan=, interpret=)`` on (T, m, k) @ (T, k, n) + (T, m, n), as exact
        ``jaxwarp.mma`` runs them with ``jaxwarp.config.gemm_exact_tensor_cores="auto"``
        on a Hopper GPU.
    NATIVE_TILES_MGPU_NAME, native_tiles_mgpu_chain: the same tiles through Pallas'
        Mosaic GPU backend (a group's A's stacked, one wgmma chain a tile), ``(a, b, c,
        a_format, accumulator, ctas=, stages=, stage_groups=)``; off the GPU, under
        ``jaxwarp.emulate(..., arch="sm_90a")`` (``jaxwarp.config.gemm_tiles_backend``
        picks between the two).

Exact mode's chain:
    ChainConfig: the static configuration of one product (formats, tile, instruction,
        arch, mode, ...).
    chain_config: the configuration ``jaxwarp.matmul`` would use for its arguments.
    exact_chain: ``(a_op, b_op, c_acc, cfg)``: matmul's k loop on converted operands.
    record_products: a context manager: every product ``jaxwarp.matmul`` traces inside it
        also calls ``callback(a_op, b_op, c_acc, d)`` on its converted operands and result.
    wait_for_promotions: waits for the CPU's background compiles of repeated products
        (``jaxwarp.config.gemm_promote_after``); returns their errors.

Captures:
    parse_mma_name: a ``ptx`` / ``wgmma`` capture configuration name, parsed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.numpy as jnp

from jaxwarp._src.conformance.keys import parse_mma_name as parse_mma_name
from jaxwarp._src.gemm import k_loop
from jaxwarp._src.gemm import matmul as _matmul
from jaxwarp._src.gemm.kernels import fused_kernel as _fused_kernel
from jaxwarp._src.gemm.kernels.fused_kernel import KERNEL_NAME as FUSED_KERNEL_NAME
from jaxwarp._src.gemm.kernels.fused_kernel import Plan as FusedPlan
from jaxwarp._src.gemm.kernels.fused_kernel import chain as fused_chain
from jaxwarp._src.gemm.kernels.fused_kernel import gemm as fused_gemm
from jaxwarp._src.gemm.kernels.fused_mgpu import chain as fused_mgpu_chain
from jaxwarp._src.gemm.kernels.fused_mgpu import plan as fused_mgpu_plan
from jaxwarp._src.gemm.kernels.fused_tiles import KERNEL_NAME as FUSED_TILES_NAME
from jaxwarp._src.gemm.kernels.fused_tiles import chain as fused_tiles_chain
from jaxwarp._src.gemm.kernels.native_kernels import DotSpec as NativeDotSpec
from jaxwarp._src.gemm.kernels.native_kernels import Plan as NativePlan
from jaxwarp._src.gemm.kernels.native_kernels import gemm as native_gemm
from jaxwarp._src.gemm.kernels.native_tiles import KERNEL_NAME as NATIVE_TILES_NAME
from jaxwarp._src.gemm.kernels.native_tiles import chain as native_tiles_chain
from jaxwarp._src.gemm.kernels.native_tiles_mgpu import KERNEL_NAME as NATIVE_TILES_MGPU_NAME
from jaxwarp._src.gemm.kernels.native_tiles_mgpu import chain as native_tiles_mgpu_chain
from jaxwarp._src.gemm.matmul import tiled as exact_chain
from jaxwarp._src.gemm.matmul_tiles import Cfg as ChainConfig
from jaxwarp._src.gemm.native import NATIVE_K as NATIVE_K
from jaxwarp._src.gemm.native import chain as native_chain
from jaxwarp._src.gemm.native import check_chain as native_check_chain
from jaxwarp._src.gemm.native import device_error as native_device_error
from jaxwarp._src.recipes import shared

__all__ = [
    "FUSED_KERNEL_NAME", "FusedPlan", "fused_chain", "fused_gemm",
    "fused_conversions_as_bitcasts", "fused_mgpu_chain", "fused_mgpu_plan",
    "FUSED_TILES_NAME", "fused_tiles_chain",
    "NATIVE_K", "native_device_error", "native_check_chain", "native_chain",
    "NativeDotSpec", "NativePlan", "native_gemm", "NATIVE_TILES_NAME", "native_tiles_chain",
    "NATIVE_TILES_MGPU_NAME", "native_tiles_mgpu_chain",
    "ChainConfig", "chain_config", "exact_chain", "record_products", "wait_for_promotions",
    "parse_mma_name",
]


def chain_config(a, b, operand_format: str, accumulator: str = "f32",
                 arch: str = "sm_90", mode: str = "exact") -> ChainConfig:
    """The :class:`ChainConfig` of ``jaxwarp.matmul(a, b, operand_format=...,
    accumulator=..., arch=..., mode=...)`` (the default tile and instruction)."""
    return _matmul.check_args(a, b, None, operand_format, accumulator, None, arch, mode, None,
                          None, None, None)[-1]


@contextlib.contextmanager
def record_products(callback: Callable[[Any, Any, Any, Any], None]) -> Iterator[None]:
    """Inside: every product ``jaxwarp.matmul`` traces also calls ``callback(a_op, b_op,
    c_acc, d)`` (a ``jax.debug.callback``) with its converted operands, accumulator and
    result. Clears JAX's caches on entry and exit, so that the products are traced again."""
    chain = _matmul.tiled

    def recorded(a_op, b_op, c_acc, cfg, scales=None):
        d = chain(a_op, b_op, c_acc, cfg, scales)
        jax.debug.callback(callback, a_op, b_op, c_acc, d)
        return d

    _matmul.tiled = recorded
    jax.clear_caches()
    try:
        yield
    finally:
        _matmul.tiled = chain
        jax.clear_caches()


@contextlib.contextmanager
def fused_conversions_as_bitcasts() -> Iterator[None]:
    """A probe: fused kernels traced inside run their fp32 truncations as bitcasts (the
    numbers are wrong; what the conversions cost is the difference in time)."""
    keep = _fused_kernel.trunc_f32
    _fused_kernel.trunc_f32 = lambda x: jax.lax.bitcast_convert_type(x, jnp.int32)
    try:
        yield
    finally:
        _fused_kernel.trunc_f32 = keep


def wait_for_promotions(timeout: float | None = None) -> list[BaseException]:
    """Waits for the CPU's background compiles of repeated products (exact products'
    k loops and a recipe's products, ``jaxwarp.config.gemm_promote_after``); returns
    their errors (those products keep the shared executables)."""
    return k_loop.wait_for_promotions(timeout) + shared.wait_for_promotions(timeout)
