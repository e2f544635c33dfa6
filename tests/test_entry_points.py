"""Every public entry point that takes array data applies the 64-bit policy.

``ENTRY_POINTS`` is one table of every public callable of ``jaxwarp``, ``jaxwarp.dpx``,
``jaxwarp.fp8``, ``jaxwarp.fp6`` and ``jaxwarp.fp4`` that takes array data, each with a
small valid call: the data arguments (by parameter name, in order) and the static ones.
For every entry the valid call works eagerly and under ``jax.jit``, and each data argument
replaced by a float64, int64 or uint64 NumPy array (x64 off) raises ``TypeError`` naming
the argument, eagerly and under ``jax.jit`` with the argument closed over (a 64-bit
*argument* of a jitted function is narrowed by JAX itself before any library code sees
it). ``NO_ARRAY_DATA`` lists the public callables that take no array data; a test checks
that every public callable is in one of the two, so a new entry point cannot be forgotten.

The default run makes every valid call under ``jax.jit`` (the small ones of a namespace
traced one by one and compiled as one program: ``test_valid_calls_under_jit``) and a spread
of them eagerly (``EAGER_EVERY``), and one 64-bit refusal per argument; ``-m slow`` runs
the rest.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import re
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxwarp
from jaxwarp import dpx, fp4, fp6, fp8

FULL = 0xFFFFFFFF
U32 = np.arange(32, dtype=np.uint32)
I32 = np.arange(32, dtype=np.int32)
F32 = np.linspace(0.5, 2.0, 32, dtype=np.float32)


@dataclasses.dataclass(frozen=True)
class Entry:
    """``fn(*data.values(), *static_args, **static)`` is a valid call; ``wide`` names the
    data arguments whose 64-bit replacement must be refused (default: all of them)."""

    fn: Callable[..., Any]
    data: dict[str, Any]
    static: dict[str, Any] = dataclasses.field(default_factory=dict)
    static_args: tuple = ()
    wide: tuple[str, ...] | None = None
    jit: bool = True  # the valid call also works with its data traced
    keywords: tuple[str, ...] = ()  # data passed by keyword (keyword-only parameters)
    wide_dtypes: tuple[str, ...] = ("float64", "int64", "uint64")
    x64: bool = False  # the valid call needs jax_enable_x64 (its data is float64)

    def call(self, data: dict[str, Any]):
        pos = [v for k, v in data.items() if k not in self.keywords]
        kw = {k: v for k, v in data.items() if k in self.keywords}
        return self.fn(*pos, *self.static_args, **kw, **self.static)

    def wide_names(self) -> tuple[str, ...]:
        return tuple(self.data) if self.wide is None else self.wide


def _q(s: str) -> str:
    return s


QF16 = "m16n8k16.row.col.f32.f16.f16.f32"
QS8 = "m8n8k16.row.col.satfinite.s32.s8.u8.s32"
QW = "m64n8k16.f32.f16.f16"
QWS8 = "m64n8k32.s32.s8.s8"
DESC_A = jaxwarp.make_descriptor(0, 128, 256)
DESC_B = jaxwarp.make_descriptor(2048, 128, 256)
QT = "m64n8k32.kind::i8.s32.s8.s8"
TDESC_A = jaxwarp.make_smem_descriptor(0, 128, 256)
TDESC_B = jaxwarp.make_smem_descriptor(2048, 128, 256)
IDESC = jaxwarp.make_instr_descriptor(QT)
FA = jaxwarp.fragment("matrix_a", 16, 16, 16, "f16", "row_major")
FB = jaxwarp.fragment("matrix_b", 16, 16, 16, "f16", "col_major")
FC = jaxwarp.fragment("accumulator", 16, 16, 16, "f32")
FB1A = jaxwarp.fragment("matrix_a", 8, 8, 128, "b1", "row_major")
FB1B = jaxwarp.fragment("matrix_b", 8, 8, 128, "b1", "col_major")
FS32 = jaxwarp.fragment("accumulator", 8, 8, 128, "s32")
LDM_ADDR = (np.arange(32, dtype=np.int32) % 8) * 16
P4 = jaxwarp.define_format("binary8p4", exponent_bits=4, mantissa_bits=3, specials="p3109")


def _sharded_sum(x):
    return jaxwarp.sharded_vmap(lambda x: jaxwarp.reduce_add_sync(FULL, x))(x)


def _shard_batch(tree):
    return jaxwarp.shard_batch(tree, jaxwarp.batch_mesh(jax.devices()[:1]))[0]


def _grouped(w, x):
    return jaxwarp.grouped_value_and_grad(lambda w, x: jnp.mean(x * w), 2,
                                          mesh=jaxwarp.batch_mesh(jax.devices()[:1]))(w, x)


def _warp_kernel(v):
    return jaxwarp.warp_kernel(lambda x: jaxwarp.reduce_add_sync(FULL, x))(v)


def _branch(pred, operands):
    return jaxwarp.branch(pred, lambda v: v, lambda v: v + 1, operands)


def _lane_while(init):
    return jaxwarp.lane_while(lambda v: v < 3, lambda v: v + 1, init)


def _lane_for(trips, init):
    return jaxwarp.lane_for(trips, lambda i, v: v + i, init, unroll=2)


def _redux_f32(mask, value):
    return jaxwarp.redux_sync("max.abs.NaN.f32", mask, value)


def _lanes(dtype=np.uint32):
    return np.arange(32).astype(dtype)


ENTRY_POINTS: dict[str, Entry] = {
    # Lanes, shuffles, reductions, votes.
    "shfl_sync": Entry(jaxwarp.shfl_sync, {"mask": FULL, "var": U32, "src_lane": I32}),
    "shfl_up_sync": Entry(jaxwarp.shfl_up_sync, {"mask": FULL, "var": U32, "delta": 1}),
    "shfl_down_sync": Entry(jaxwarp.shfl_down_sync, {"mask": FULL, "var": F32, "delta": 1}),
    "shfl_xor_sync": Entry(jaxwarp.shfl_xor_sync, {"mask": FULL, "var": U32, "lane_mask": 1}),
    # A NumPy integer (0-d or scalar) for ns counts as a Python int: exact, range-checked.
    "nanosleep": Entry(jaxwarp.nanosleep, {"ns": 100}, jit=False, wide_dtypes=("float64",)),
    "reduce_sync": Entry(jaxwarp.reduce_sync, {"mask": FULL, "value": U32},
                         static_args=(), keywords=()),
    "reduce_add_sync": Entry(jaxwarp.reduce_add_sync, {"mask": FULL, "value": U32}),
    "reduce_min_sync": Entry(jaxwarp.reduce_min_sync, {"mask": FULL, "value": I32}),
    "reduce_max_sync": Entry(jaxwarp.reduce_max_sync, {"mask": FULL, "value": I32}),
    "reduce_and_sync": Entry(jaxwarp.reduce_and_sync, {"mask": FULL, "value": U32}),
    "reduce_or_sync": Entry(jaxwarp.reduce_or_sync, {"mask": FULL, "value": U32}),
    "reduce_xor_sync": Entry(jaxwarp.reduce_xor_sync, {"mask": FULL, "value": U32}),
    "ballot_sync": Entry(jaxwarp.ballot_sync, {"mask": FULL, "pred": I32 % 2}),
    "any_sync": Entry(jaxwarp.any_sync, {"mask": FULL, "pred": I32 % 2}),
    "all_sync": Entry(jaxwarp.all_sync, {"mask": FULL, "pred": I32 % 2}),
    "match_any_sync": Entry(jaxwarp.match_any_sync, {"mask": FULL, "value": U32 % 3}),
    "match_all_sync": Entry(jaxwarp.match_all_sync, {"mask": FULL, "value": U32 % 3}),
    "redux_sync": Entry(_redux_f32, {"mask": FULL, "value": F32}),
    "elect_sync": Entry(jaxwarp.elect_sync, {"mask": FULL}),
    "syncwarp": Entry(jaxwarp.syncwarp, {"mask": FULL}),
    "branch": Entry(_branch, {"pred": I32 % 2, "operands": U32}),
    "lane_while": Entry(_lane_while, {"init": I32}),
    "lane_for": Entry(_lane_for, {"trips": I32 % 5, "init": I32}),
    "warp_kernel": Entry(_warp_kernel, {"v": np.ones((2, 32), np.uint32)},
                         wide=()),  # named "argument 0": see test_warp_kernel_64bit
    # Number formats.
    "round_to": Entry(jaxwarp.round_to, {"x": F32}, static_args=("f16",)),
    "float2half_rn": Entry(jaxwarp.float2half_rn, {"x": F32}),
    "float2half_rz": Entry(jaxwarp.float2half_rz, {"x": F32}),
    "float2bfloat16_rn": Entry(jaxwarp.float2bfloat16_rn, {"x": F32}),
    "float2bfloat16_rz": Entry(jaxwarp.float2bfloat16_rz, {"x": F32}),
    "float_to_tf32": Entry(jaxwarp.float_to_tf32, {"x": F32}),
    "half2float": Entry(jaxwarp.half2float, {"x": F32.astype(np.float16)}),
    "bfloat162float": Entry(jaxwarp.bfloat162float, {"x": F32.astype(jnp.bfloat16)}),
    "to_bits": Entry(jaxwarp.to_bits, {"x": F32}),
    "from_bits": Entry(jaxwarp.from_bits, {"u": U32}, static_args=("f32",)),
    "to_format": Entry(jaxwarp.to_format, {"x": F32}, static_args=("e4m3",)),
    "from_format": Entry(jaxwarp.from_format, {"v": U32.astype(np.uint8)}, static_args=(P4,)),
    "fused_dot": Entry(jaxwarp.fused_dot, {"a": np.zeros((2, 4), np.uint8),
                                           "b": np.zeros((4, 2), np.uint8),
                                           "c": np.zeros((2, 2), np.float32)},
                       static={"a_format": P4, "datapath": jaxwarp.FusedDot(block=2)}),
    # WMMA.
    "fill_fragment": Entry(jaxwarp.fill_fragment, {"frag": FC, "v": np.float32(1)},
                           wide=("v",)),
    "load_matrix_sync": Entry(jaxwarp.load_matrix_sync,
                              {"frag": FC, "memory": np.zeros(256, np.float32), "ldm": 16},
                              static_args=("mem_row_major",), wide=("memory",)),
    "store_matrix_sync": Entry(jaxwarp.store_matrix_sync,
                               {"memory": np.zeros(256, np.float32), "frag": FC, "ldm": 16},
                               static_args=("mem_row_major",), wide=("memory",)),
    "mma_sync": Entry(jaxwarp.mma_sync, {"a": FA, "b": FB, "c": FC}, wide=()),
    "bmma_sync": Entry(jaxwarp.bmma_sync, {"a": FB1A, "b": FB1B, "c": FS32}, wide=()),
    "fragment_from_matrix": Entry(jaxwarp.fragment_from_matrix,
                                  {"frag_spec": FC, "matrix": np.zeros((16, 16), np.float32)},
                                  wide=("matrix",)),
    "matrix_from_fragment": Entry(jaxwarp.matrix_from_fragment, {"frag": FC}, wide=()),
    # Host side (NumPy in, NumPy out): converts to the storage of its type argument.
    "matrix_to_memory": Entry(jaxwarp.matrix_to_memory,
                              {"matrix": np.zeros((16, 16), np.float32)},
                              static_args=("f32", "mem_row_major"), jit=False, wide=()),
    # Tensor-core arithmetic and the GEMM.
    "mma": Entry(jaxwarp.mma, {"a": np.ones((16, 16), np.float16),
                               "b": np.ones((16, 16), np.float16),
                               "c": np.zeros((16, 16), np.float32)},
                 static={"a_format": "f16", "c_format": "f32", "d_format": "f32"}),
    "bmma": Entry(jaxwarp.bmma, {"a": np.ones((8, 128), np.uint8),
                                 "b": np.ones((128, 8), np.uint8),
                                 "c": np.zeros((8, 8), np.int32)}, static={"op": "xor"}),
    "matmul": Entry(jaxwarp.matmul, {"a": np.ones((16, 16), np.float32),
                                     "b": np.ones((16, 16), np.float32),
                                     "c": np.zeros((16, 16), np.float32)}),
    "to_operand": Entry(jaxwarp.to_operand, {"x": F32}, static_args=("f16",)),
    # ldmatrix family.
    "ldmatrix": Entry(jaxwarp.ldmatrix, {"smem": np.arange(64, dtype=np.uint16),
                                         "addr": LDM_ADDR}, static={"num": 1}),
    "stmatrix": Entry(jaxwarp.stmatrix, {"smem": np.zeros(64, np.uint16),
                                         "regs": np.ones((32, 1), np.uint32),
                                         "addr": LDM_ADDR}, static={"num": 1}),
    "movmatrix": Entry(jaxwarp.movmatrix, {"regs": np.ones(32, np.uint32)}),
    # PTX mma.sync.
    "to_registers": Entry(jaxwarp.to_registers, {"x": np.ones((16, 16), np.float16)},
                          static_args=(), static={}),
    "from_registers": Entry(jaxwarp.from_registers, {"regs": np.ones((32, 4), np.uint32)}),
    "mma_sync_ptx_logical": Entry(jaxwarp.mma_sync_ptx_logical, {"a": np.full((8, 16), 3, np.int8),
                                       "b": np.full((16, 8), 200, np.uint8),
                                       "c": np.full((8, 8), 7, np.int32)}),
    "mma_sync_ptx": Entry(jaxwarp.mma_sync_ptx, {"a_regs": np.ones((32, 4), np.uint32),
                                                 "b_regs": np.ones((32, 2), np.uint32),
                                                 "c_regs": np.zeros((32, 4), np.uint32)}),
    # wgmma.
    "decode_descriptor": Entry(jaxwarp.decode_descriptor, {"desc": DESC_A}, wide=(),
                               jit=False),
    "wgmma": Entry(jaxwarp.wgmma, {"a": DESC_A, "desc_b": DESC_B,
                                   "smem": np.zeros(4096, np.uint8),
                                   "d_regs": np.zeros((128, 4), np.int32)},
                   wide=("smem", "d_regs"), jit=False),
    "wgmma_logical": Entry(jaxwarp.wgmma_logical, {"a": np.ones((64, 16), np.float16),
                                                   "b": np.ones((16, 8), np.float16),
                                                   "c": np.zeros((64, 8), np.float32)}),
    # Sparse MMA and jaxwarp.sparse.
    "mma_sp_logical": Entry(jaxwarp.mma_sp_logical, {"a": np.tile(np.array([1, 0, 0, 2],
                                                                          np.float16), (16, 4)),
                                                     "b": np.ones((16, 8), np.float16),
                                                     "c": np.zeros((16, 8), np.float32)}),
    "mma_sp": Entry(jaxwarp.mma_sp, {"a_regs": np.ones((32, 2), np.uint32),
                                     "b_regs": np.ones((32, 2), np.uint32),
                                     "c_regs": np.zeros((32, 4), np.uint32),
                                     "e": np.full(32, 0x44444444, np.uint32)}),
    "wgmma_sp_logical": Entry(jaxwarp.wgmma_sp_logical,
                              {"a": np.tile(np.array([1, 0, 0, 2], np.float16), (64, 8)),
                               "b": np.ones((32, 8), np.float16),
                               "c": np.zeros((64, 8), np.float32)}),
    "wgmma_sp": Entry(jaxwarp.wgmma_sp, {"a": np.full((128, 4), 0x01010101, np.uint32),
                                         "desc_b": jaxwarp.make_descriptor(2048, 128, 512),
                                         "smem": np.zeros(4096, np.uint8),
                                         "d_regs": np.zeros((128, 4), np.int32),
                                         "e": np.full(128, 0x44444444, np.uint32)},
                      wide=("a", "smem", "d_regs", "e"), jit=False),
    "sparse.as_2_4": Entry(jaxwarp.sparse.as_2_4,
                           {"w": np.tile(np.array([[1], [0], [0], [2]], np.float32), (2, 4))}),
    "sparse.prune_2_4": Entry(jaxwarp.sparse.prune_2_4, {"x": F32.reshape(4, 8)}),
    "sparse.compress_2_4": Entry(jaxwarp.sparse.compress_2_4,
                                 {"x": np.tile(np.array([1, 0, 0, 2], np.float32), (4, 2))}),
    "sparse.decompress_2_4": Entry(jaxwarp.sparse.decompress_2_4,
                                   {"values": F32.reshape(4, 8),
                                    "indices": np.tile(np.array([0, 3], np.int32), (4, 4))}),
    "sparse.metadata_words": Entry(jaxwarp.sparse.metadata_words,
                                   {"indices": np.tile(np.array([0, 3], np.int32), (16, 4))},
                                   static={"a_format": "f16", "k": 16}),
    # tcgen05.
    "decode_smem_descriptor": Entry(jaxwarp.decode_smem_descriptor, {"desc": TDESC_A},
                                    wide=(), jit=False),
    "decode_instr_descriptor": Entry(jaxwarp.decode_instr_descriptor, {"idesc": IDESC},
                                     static_args=("i8",), wide=(), jit=False),
    "tcgen05_mma": Entry(jaxwarp.tcgen05_mma, {"d": np.zeros((64, 8), np.int32),
                                               "a": TDESC_A, "desc_b": TDESC_B,
                                               "idesc": IDESC,
                                               "smem": np.zeros(4096, np.uint8)},
                         wide=("d", "smem"), jit=False),
    "tcgen05_mma_logical": Entry(jaxwarp.tcgen05_mma_logical,
                                 {"a": np.ones((64, 32), np.int8),
                                  "b": np.ones((32, 8), np.int8),
                                  "d": np.zeros((64, 8), np.int32)}),
    "to_fnuz": Entry(jaxwarp.to_fnuz, {"x": F32}),
    "mfma_logical": Entry(jaxwarp.mfma_logical,
                          {"a": np.ones((16, 16), np.float16), "b": np.ones((16, 16), np.float16),
                           "c": np.zeros((16, 16), np.float32)},
                          static={"arch": "gfx942"}),
    "mma_block_scale_logical": Entry(
        jaxwarp.mma_block_scale_logical,
        {"a": np.full((16, 32), 0x38, np.uint8), "b": np.full((32, 8), 0x38, np.uint8),
         "c": np.zeros((16, 8), np.float32), "scale_a": np.full((16, 1), 127, np.uint8),
         "scale_b": np.full((1, 8), 127, np.uint8)}, static={"a_format": "e4m3"}),
    "mma_block_scale": Entry(
        jaxwarp.mma_block_scale,
        {"a_regs": np.full((32, 4), 0x38383838, np.uint32),
         "b_regs": np.full((32, 2), 0x38383838, np.uint32),
         "c_regs": np.zeros((32, 4), np.uint32), "scale_a_data": np.full((32, 1), 127, np.uint32),
         "scale_b_data": np.full((32, 1), 127, np.uint32)}),
    "tcgen05_mma_block_scale": Entry(
        jaxwarp.tcgen05_mma_block_scale,
        {"d": np.zeros((128, 8), np.float32), "a": TDESC_A, "desc_b": TDESC_B,
         "idesc": 0x8821400, "scale_a": np.full((128, 1), 127, np.uint8),
         "scale_b": np.full((8, 1), 127, np.uint8), "smem": np.zeros(8192, np.uint8)},
        static_args=(), wide=("d", "scale_a", "scale_b", "smem"), jit=False),
    # Many devices.
    "sharded_vmap": Entry(_sharded_sum, {"x": np.ones((3, 32), np.uint32)}, jit=False),
    "shard_batch": Entry(_shard_batch, {"tree": np.ones((3, 32), np.uint32)}, jit=False),
    "grouped_value_and_grad": Entry(_grouped, {"w": np.ones(3, np.float32),
                                               "x": np.ones((4, 3), np.float32)}, wide=()),
    # fp8.
    "fp8.cvt_f32_to_fp8x2": Entry(fp8.cvt_f32_to_fp8x2, {"a": F32, "b": F32},
                                  static_args=("e4m3",)),
    "fp8.cvt_f32_to_e4m3x2": Entry(fp8.cvt_f32_to_e4m3x2, {"a": F32, "b": F32}),
    "fp8.cvt_f32_to_e5m2x2": Entry(fp8.cvt_f32_to_e5m2x2, {"a": F32, "b": F32}),
    "fp8.cvt_f16x2_to_fp8x2": Entry(fp8.cvt_f16x2_to_fp8x2, {"x": U32},
                                    static_args=("e5m2",)),
    "fp8.cvt_fp8x2_to_f16x2": Entry(fp8.cvt_fp8x2_to_f16x2, {"x": U32.astype(np.uint16)},
                                    static_args=("e4m3",)),
    "fp8.float_to_fp8": Entry(fp8.float_to_fp8, {"x": F32}, static_args=("e4m3", True)),
    "fp8.float2_to_fp8x2": Entry(fp8.float2_to_fp8x2, {"x": F32.reshape(16, 2)},
                                 static_args=("e4m3", True)),
    "fp8.halfraw_to_fp8": Entry(fp8.halfraw_to_fp8, {"x": F32.astype(np.float16)},
                                static_args=("e5m2", False)),
    "fp8.halfraw2_to_fp8x2": Entry(fp8.halfraw2_to_fp8x2,
                                   {"x": F32.astype(np.float16).reshape(16, 2)},
                                   static_args=("e5m2", False)),
    "fp8.bfloat16raw_to_fp8": Entry(fp8.bfloat16raw_to_fp8, {"x": F32.astype(jnp.bfloat16)},
                                    static_args=("e4m3", True)),
    "fp8.bfloat16raw2_to_fp8x2": Entry(fp8.bfloat16raw2_to_fp8x2,
                                       {"x": F32.astype(jnp.bfloat16).reshape(16, 2)},
                                       static_args=("e4m3", True)),
    "fp8.double_to_fp8": Entry(fp8.double_to_fp8, {"x": F32.astype(np.float64)},
                               static_args=("e4m3", True), x64=True),
    "fp8.fp8_to_halfraw": Entry(fp8.fp8_to_halfraw, {"x": U32.astype(np.uint8)},
                                static_args=("e4m3",)),
    "fp8.fp8x2_to_halfraw2": Entry(fp8.fp8x2_to_halfraw2, {"x": U32.astype(np.uint16)},
                                   static_args=("e5m2",)),
    # ue8m0 (fp8 namespace), fp6, fp4: sm_100a / sm_120a conversions.
    "fp8.cvt_f32_to_ue8m0x2": Entry(fp8.cvt_f32_to_ue8m0x2, {"a": F32, "b": F32},
                                    static_args=("rz",)),
    "fp8.cvt_bf16x2_to_ue8m0x2": Entry(fp8.cvt_bf16x2_to_ue8m0x2, {"x": U32},
                                       static_args=("rp",), static={"satfinite": True}),
    "fp8.cvt_ue8m0x2_to_bf16x2": Entry(fp8.cvt_ue8m0x2_to_bf16x2, {"x": U32.astype(np.uint16)}),
    "fp8.float_to_e8m0": Entry(fp8.float_to_e8m0, {"x": F32}, static_args=(True, "rp")),
    "fp8.float2_to_e8m0x2": Entry(fp8.float2_to_e8m0x2, {"x": F32.reshape(16, 2)},
                                  static_args=(False, "rz")),
    "fp8.double_to_e8m0": Entry(fp8.double_to_e8m0, {"x": F32.astype(np.float64)},
                                static_args=(True, "rz"), x64=True),
    "fp8.bfloat16raw_to_e8m0": Entry(fp8.bfloat16raw_to_e8m0, {"x": F32.astype(jnp.bfloat16)},
                                     static_args=(True, "rp")),
    "fp8.bfloat162raw_to_e8m0x2": Entry(fp8.bfloat162raw_to_e8m0x2,
                                        {"x": F32.astype(jnp.bfloat16).reshape(16, 2)},
                                        static_args=(False, "rp")),
    "fp8.e8m0_to_bf16raw": Entry(fp8.e8m0_to_bf16raw, {"x": U32.astype(np.uint8)}),
    "fp8.e8m0x2_to_bf162raw": Entry(fp8.e8m0x2_to_bf162raw, {"x": U32.astype(np.uint16)}),
    # fp8 recipes (docs/fp8_recipes.md).
    "fp8.quantize_blockwise": Entry(fp8.quantize_blockwise, {"x": F32.reshape(2, 16)},
                                    static={"block": (1, 128)}),
    "fp8.delayed_matmul": Entry(fp8.delayed_matmul, {"a": F32.reshape(1, 32),
                                                     "b": F32[:8].reshape(1, 8) * F32[:32, None]},
                                static_args=(fp8.DelayedScaling(amax_history_len=2).init(),
                                             fp8.DelayedScaling(amax_history_len=2))),
    "fp6.cvt_f32_to_fp6x2": Entry(fp6.cvt_f32_to_fp6x2, {"a": F32, "b": F32},
                                  static_args=("e2m3",)),
    "fp6.cvt_f32_to_e2m3x2": Entry(fp6.cvt_f32_to_e2m3x2, {"a": F32, "b": F32}),
    "fp6.cvt_f32_to_e3m2x2": Entry(fp6.cvt_f32_to_e3m2x2, {"a": F32, "b": F32},
                                   static={"relu": True}),
    "fp6.cvt_fp6x2_to_f16x2": Entry(fp6.cvt_fp6x2_to_f16x2, {"x": U32.astype(np.uint16)},
                                    static_args=("e3m2",)),
    "fp6.float_to_fp6": Entry(fp6.float_to_fp6, {"x": F32}, static_args=("e2m3", "rn")),
    "fp6.float2_to_fp6x2": Entry(fp6.float2_to_fp6x2, {"x": F32.reshape(16, 2)},
                                 static_args=("e3m2", "rz")),
    "fp6.double_to_fp6": Entry(fp6.double_to_fp6, {"x": F32.astype(np.float64)},
                               static_args=("e2m3", "rz"), x64=True),
    "fp6.halfraw_to_fp6": Entry(fp6.halfraw_to_fp6, {"x": F32.astype(np.float16)},
                                static_args=("e3m2", "rz")),
    "fp6.halfraw2_to_fp6x2": Entry(fp6.halfraw2_to_fp6x2,
                                   {"x": F32.astype(np.float16).reshape(16, 2)},
                                   static_args=("e2m3", "rn")),
    "fp6.bfloat16raw_to_fp6": Entry(fp6.bfloat16raw_to_fp6, {"x": F32.astype(jnp.bfloat16)},
                                    static_args=("e2m3", "rn")),
    "fp6.bfloat16raw2_to_fp6x2": Entry(fp6.bfloat16raw2_to_fp6x2,
                                       {"x": F32.astype(jnp.bfloat16).reshape(16, 2)},
                                       static_args=("e3m2", "rn")),
    "fp6.fp6_to_halfraw": Entry(fp6.fp6_to_halfraw, {"x": U32.astype(np.uint8)},
                                static_args=("e2m3",)),
    "fp6.fp6x2_to_halfraw2": Entry(fp6.fp6x2_to_halfraw2, {"x": U32.astype(np.uint16)},
                                   static_args=("e3m2",)),
    "fp4.cvt_f32_to_e2m1x2": Entry(fp4.cvt_f32_to_e2m1x2, {"a": F32, "b": F32}),
    "fp4.cvt_e2m1x2_to_f16x2": Entry(fp4.cvt_e2m1x2_to_f16x2, {"x": U32.astype(np.uint8)},
                                     static={"relu": True}),
    "fp4.float_to_fp4": Entry(fp4.float_to_fp4, {"x": F32}, static_args=("e2m1", "rn")),
    "fp4.float2_to_fp4x2": Entry(fp4.float2_to_fp4x2, {"x": F32.reshape(16, 2)},
                                 static_args=("e2m1", "rz")),
    "fp4.double_to_fp4": Entry(fp4.double_to_fp4, {"x": F32.astype(np.float64)},
                               static_args=("e2m1", "rz"), x64=True),
    "fp4.halfraw_to_fp4": Entry(fp4.halfraw_to_fp4, {"x": F32.astype(np.float16)},
                                static_args=("e2m1", "rz")),
    "fp4.halfraw2_to_fp4x2": Entry(fp4.halfraw2_to_fp4x2,
                                   {"x": F32.astype(np.float16).reshape(16, 2)},
                                   static_args=("e2m1", "rn")),
    "fp4.bfloat16raw_to_fp4": Entry(fp4.bfloat16raw_to_fp4, {"x": F32.astype(jnp.bfloat16)},
                                    static_args=("e2m1", "rn")),
    "fp4.bfloat16raw2_to_fp4x2": Entry(fp4.bfloat16raw2_to_fp4x2,
                                       {"x": F32.astype(jnp.bfloat16).reshape(16, 2)},
                                       static_args=("e2m1", "rn")),
    "fp4.fp4_to_halfraw": Entry(fp4.fp4_to_halfraw, {"x": U32.astype(np.uint8)},
                                static_args=("e2m1",)),
    "fp4.fp4x2_to_halfraw2": Entry(fp4.fp4x2_to_halfraw2, {"x": U32.astype(np.uint8)},
                                   static_args=("e2m1",)),
}

# The qualifier (or use) is the first positional argument of the PTX front-ends.
for _name, _lead in (("to_registers", (QF16, "a")), ("from_registers", (QF16, "a")),
                     ("mma_sync_ptx_logical", (QS8,)), ("mma_sync_ptx", (QF16,)), ("wgmma",
                                                                                   (QWS8,)),
                     ("wgmma_logical", (QW,)), ("reduce_sync", ("add",)),
                     ("mma_sp_logical", ("m16n8k16.row.col.f32.f16.f16.f32",)),
                     ("mma_sp", ("m16n8k16.row.col.f32.f16.f16.f32",)),
                     ("wgmma_sp_logical", ("m64n8k32.f32.f16.f16",)),
                     ("wgmma_sp", ("m64n8k64.s32.s8.s8",)),
                     ("tcgen05_mma", ("kind::i8",)), ("tcgen05_mma_logical", (QT,)),
                     ("mfma_logical", ("v_mfma_f32_16x16x16_f16",)),
                     ("mma_block_scale", ("m16n8k32.row.col.kind::mxf8f6f4.block_scale.f32.e4m3"
                                          ".e4m3.f32.ue8m0",)),
                     ("tcgen05_mma_block_scale", ("kind::mxf8f6f4.block_scale",))):
    _e = ENTRY_POINTS[_name]
    ENTRY_POINTS[_name] = dataclasses.replace(
        _e, fn=(lambda f, lead: lambda *a, **k: f(*lead, *a, **k))(_e.fn, _lead))

# Every DPX function: its three (or two) operands are data.
for _name in sorted(n for n in dir(dpx) if n.startswith("vi")):
    _f = getattr(dpx, _name)
    _params = [p for p in inspect.signature(_f).parameters]
    ENTRY_POINTS[f"dpx.{_name}"] = Entry(_f, {p: I32 for p in _params})

# Public callables that take no array data (types, parsers, factories, decorators).
NO_ARRAY_DATA = frozenset({
    "ArchModel", "BlockScaleDatapath", "Datapath", "EmulationReport", "Format", "FragmentType",
    "Product", "ProductFilter", "ReportEntry", "Target", "UnsupportedProductError",
    # A pytree container: the functions that read a Fragment check its x.
    "Fragment",
    "activemask", "lane_id", "batch_mesh", "checked", "deterministic_xla", "datapath_for",
    "fragment",
    "fragment_type", "get_format", "lane_map", "lane_map_text", "make_descriptor",
    "mma_instructions", "parse_mma", "parse_target", "parse_wgmma",
    "mma_sp_instructions", "parse_mma_sp", "parse_wgmma_sp",
    "make_smem_descriptor", "make_instr_descriptor", "parse_tcgen05",
    "make_block_scale_instr_descriptor",
    # AMD's wave64 register layouts (a table from names).
    "mfma_lane_map",
    # Takes a function; the wrapper's arguments are that function's own.
    "emulate",
    # A format, and a datapath's parameters.
    "define_format", "FusedDot",
    # fp8 recipe settings and its state (a pytree container of the scales).
    "fp8.DelayedScaling", "fp8.DelayedScalingState",
})

WIDE = {"float64": np.float64, "int64": np.int64, "uint64": np.uint64}


def _public_callables() -> set[str]:
    names = set()
    for prefix, mod in (("", jaxwarp), ("dpx.", dpx), ("fp8.", fp8), ("fp6.", fp6),
                        ("fp4.", fp4), ("sparse.", jaxwarp.sparse)):
        for n in dir(mod):
            obj = getattr(mod, n)
            if n.startswith("_") or inspect.ismodule(obj) or not callable(obj):
                continue
            names.add(prefix + n)
    return names


def test_table_is_complete():
    public = _public_callables()
    missing = public - set(ENTRY_POINTS) - NO_ARRAY_DATA
    assert not missing, f"public callables in neither ENTRY_POINTS nor NO_ARRAY_DATA: {missing}"
    stale = (set(ENTRY_POINTS) | NO_ARRAY_DATA) - public
    assert not stale, f"listed but not public: {stale}"
    assert not set(ENTRY_POINTS) & NO_ARRAY_DATA


def _widened(value: Any, dtype) -> np.ndarray:
    shape = np.shape(value)
    return np.ones(shape, dtype)


# The default run makes every entry point's valid call under jax.jit (eagerly where its
# data cannot be traced), and eagerly that of every EAGER_EVERY-th entry (by name) not
# COMPILED_ALONE; -m slow makes the other eager calls (an eager call compiles each
# operation on its own: slow).
EAGER_EVERY = 20

# The entries whose program is a tensor-core datapath (large: XLA's compile time grows
# faster than the program) are compiled one by one, test_valid_call[NAME-jit]; the other
# entries of a namespace are traced one by one and compiled as one program,
# test_valid_calls_under_jit[NAMESPACE] (one compile instead of dozens).
COMPILED_ALONE = frozenset({
    "fused_dot", "matmul", "mma", "mma_sync", "mma_sync_ptx", "mma_sp", "mma_sp_logical",
    "wgmma_logical", "wgmma_sp_logical", "mma_block_scale", "mma_block_scale_logical",
    "tcgen05_mma_logical", "mfma_logical", "fp8.quantize_blockwise", "fp8.delayed_matmul"})

# XLA's LLVM optimizations off: these tests check that a call traces, lowers, compiles and
# runs, not how fast it runs (the optimizations take half of the compile time).
_QUICK_COMPILE = {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True}


def _valid_params():
    # The eager spread leaves out the datapath entries: their own tests call them eagerly.
    eager = set(sorted(set(ENTRY_POINTS) - COMPILED_ALONE)[::EAGER_EVERY])
    for name in sorted(ENTRY_POINTS):
        traced = ENTRY_POINTS[name].jit
        yield pytest.param(name, "eager", id=name,
                           marks=(pytest.mark.slow,) if traced and name not in eager else ())
        if traced and name in COMPILED_ALONE:
            yield pytest.param(name, "jit", id=f"{name}-jit")


@pytest.mark.parametrize("name,mode", list(_valid_params()))
def test_valid_call(name, mode):
    e = ENTRY_POINTS[name]
    with jax.enable_x64(e.x64):
        _valid_call(e, mode)


def _jit_groups() -> dict[str, list[str]]:
    """The entries under jit not COMPILED_ALONE, by namespace ("jaxwarp" for the top level);
    those whose data is 64-bit (x64 on) make a group of their own."""
    groups: dict[str, list[str]] = {}
    for name, e in sorted(ENTRY_POINTS.items()):
        if e.jit and name not in COMPILED_ALONE:
            key = "x64" if e.x64 else (name.split(".")[0] if "." in name else "jaxwarp")
            groups.setdefault(key, []).append(name)
    return groups


@pytest.mark.parametrize("group", sorted(_jit_groups()))
def test_valid_calls_under_jit(group):
    names = _jit_groups()[group]
    with jax.enable_x64(group == "x64"):
        _valid_calls_under_jit({name: ENTRY_POINTS[name] for name in names})


def test_valid_calls_under_jit_names_the_entry_that_fails():
    def concrete(x):
        return jnp.asarray(float(x[0]))  # needs a concrete value: fails when traced

    entries = {"ok": Entry(jnp.negative, {"x": F32}), "bad": Entry(concrete, {"x": F32})}
    with pytest.raises(AssertionError, match=r"(?s)fail under jax\.jit.*\n  bad: .*Concret"):
        _valid_calls_under_jit(entries)
    _valid_calls_under_jit({"ok": entries["ok"]})


def _traced_call(e: Entry):
    """The entry's valid call as a function of its array data, and that data."""
    arrays = {k: v for k, v in e.data.items() if isinstance(v, np.ndarray)}

    def traced(*xs):
        return e.call({**e.data, **dict(zip(arrays, xs, strict=True))})

    return traced, tuple(arrays.values())


def _valid_calls_under_jit(entries: dict[str, Entry]) -> None:
    """Traces the valid call of every entry with its array data traced, in one program
    (an entry whose trace fails is named, and the others still run), then compiles and runs
    that program; if that fails, each entry alone names the one that does."""
    calls = {name: _traced_call(e) for name, e in entries.items()}
    failed: dict[str, Exception] = {}

    def program(args):
        out = {}
        for name, (f, _) in calls.items():
            try:
                out[name] = f(*args[name])
            except Exception as err:  # reported below, by entry
                failed[name] = err
        return out

    args = {name: xs for name, (_, xs) in calls.items()}
    try:
        jax.block_until_ready(jax.jit(program).lower(args).compile(_QUICK_COMPILE)(args))
    except Exception as err:
        if len(calls) == 1 and not failed:
            failed.update(dict.fromkeys(calls, err))
        elif not failed:  # each entry alone: the first that fails is named
            for name in calls:
                _valid_calls_under_jit({name: entries[name]})
            raise
    if failed:
        lines = "".join(f"\n  {name}: {type(err).__name__}: {err}"
                        for name, err in failed.items())
        raise AssertionError(f"valid calls that fail under jax.jit:{lines}") \
            from next(iter(failed.values()))


def _valid_call(e: Entry, mode: str = "both"):
    if mode != "jit":
        e.call(dict(e.data))
    if e.jit and mode != "eager":
        _valid_calls_under_jit({"the entry": e})


_WIDE_CASES = [(name, arg, dt) for name, e in sorted(ENTRY_POINTS.items())
               for arg in e.wide_names() for dt in e.wide_dtypes]


def _wide_params():
    """Every (entry point, argument, 64-bit dtype, mode); by default one per argument (its
    first dtype, eagerly), the rest with -m slow: the sweep compiles about 1,000 calls."""
    seen = set()
    for name, arg, dt in _WIDE_CASES:
        for mode in ("eager", "jit_const"):
            first = (name, arg) not in seen and mode == "eager"
            seen.add((name, arg))
            marks = () if first else (pytest.mark.slow,)
            yield pytest.param(name, arg, dt, mode, marks=marks,
                               id=f"{mode}-{name}-{arg}-{dt}")


@pytest.mark.parametrize("name,arg,dt,mode", list(_wide_params()))
def test_64bit_refused(name, arg, dt, mode):
    assert not jax.config.jax_enable_x64
    e = ENTRY_POINTS[name]
    data = {**e.data, arg: _widened(e.data[arg], WIDE[dt])}
    call = (lambda: e.call(data)) if mode == "eager" else jax.jit(lambda: e.call(data))
    with pytest.raises(TypeError, match=rf"\b{re.escape(arg)} has 64-bit dtype {dt}"):
        call()


@pytest.mark.parametrize("mode", ["eager", "jit_const"])
def test_warp_kernel_64bit(mode):
    f = jaxwarp.warp_kernel(lambda x: jaxwarp.reduce_add_sync(FULL, x))
    x = np.ones((2, 32), np.int64)
    call = (lambda: f(x)) if mode == "eager" else jax.jit(lambda: f(x))
    with pytest.raises(TypeError, match=r"argument 0 has 64-bit dtype int64"):
        call()


# --------------------------------------------------------------------------------------
# Valid empty inputs: K = 0 gives C (converted to the result type); M or N = 0 is empty.

_C16 = np.arange(256, dtype=np.float32).reshape(16, 16) - 100.5


@pytest.mark.parametrize("instruction,fmt", [("wmma", "f16"), ("wmma", "bf16"),
                                             ("wmma", "tf32"), ("mma_sync", "f16"),
                                             ("mma_sync", "e4m3"), ("wgmma", "bf16"),
                                             ("wgmma", "e5m2")])
@pytest.mark.parametrize("mode", ["eager", "jit"])
def test_matmul_k0_returns_c(instruction, fmt, mode):
    a, b = np.zeros((16, 0), np.float32), np.zeros((0, 16), np.float32)
    f = functools.partial(jaxwarp.matmul, operand_format=fmt, instruction=instruction,
                          arch="sm_90a" if instruction == "wgmma" else "sm_90")
    f = jax.jit(f) if mode == "jit" else f
    np.testing.assert_array_equal(np.asarray(f(a, b, _C16)).view(np.uint32),
                                  _C16.view(np.uint32))
    np.testing.assert_array_equal(np.asarray(f(a, b)), np.zeros((16, 16), np.float32))


# Slow: K = 0 with fp8 operands is checked by default by test_matmul_k0_returns_c.
@pytest.mark.slow
def test_matmul_k0_fp8_scaled_returns_c():
    a, b = np.zeros((16, 0), np.float32), np.zeros((0, 16), np.float32)
    d = jaxwarp.matmul(a, b, _C16, operand_format="e4m3", instruction="mma_sync",
                       a_scale=np.float32(2), b_scale=np.float32(3))
    np.testing.assert_array_equal(np.asarray(d), _C16)


@pytest.mark.parametrize("m,n", [(0, 16), (16, 0), (0, 0)])
@pytest.mark.parametrize("instruction", ["wmma", "mma_sync", "wgmma"])
def test_matmul_empty_m_or_n(m, n, instruction):
    d = jaxwarp.matmul(np.zeros((m, 16), np.float32), np.zeros((16, n), np.float32),
                       instruction=instruction, arch="sm_90a")
    assert d.shape == (m, n) and d.dtype == np.float32


@pytest.mark.parametrize("mode", ["eager", "jit"])
@pytest.mark.parametrize("a_format,c_format,d_format,instruction", [
    ("f16", "f32", "f32", "wmma"), ("f16", "f16", "f16", "mma_sync"),
    ("bf16", "f32", "f32", "wgmma"), ("tf32", "f32", "f32", "mma_sync"),
    ("e4m3", "f32", "f32", "wgmma"), ("s8", "s32", "s32", "wmma"), ("u4", "s32", "s32", "wmma")])
def test_mma_k0_returns_c(a_format, c_format, d_format, instruction, mode):
    from jaxwarp._src.arithmetic.datapath import STORAGE_DTYPE
    m, n = 16, 8
    a = np.zeros((2, m, 0), STORAGE_DTYPE[a_format])  # a batch axis broadcasts onto C
    b = np.zeros((0, n), STORAGE_DTYPE[a_format])
    c = (np.arange(m * n).reshape(m, n) - 60).astype(STORAGE_DTYPE[c_format])
    f = functools.partial(jaxwarp.mma, a_format=a_format, c_format=c_format, d_format=d_format,
                          instruction=instruction, arch="sm_90a")
    f = jax.jit(f) if mode == "jit" else f
    d = f(a, b, c)
    assert d.shape == (2, m, n) and d.dtype == STORAGE_DTYPE[d_format]
    np.testing.assert_array_equal(np.asarray(d[1]), c)


def test_mma_k0_f32_to_f16_rounds_to_nearest():
    c = np.array([[1 + 2**-11, 1 + 3 * 2**-11, 70000.0, -0.0]], np.float32).repeat(16, 0)
    c = np.tile(c, (1, 2))
    d = jaxwarp.mma(np.zeros((16, 0), np.float16), np.zeros((0, 8), np.float16), c,
                    a_format="f16", c_format="f32", d_format="f16", instruction="wmma")
    with np.errstate(over="ignore"):  # 70000 rounds to inf in fp16
        want = c.astype(np.float16)
    np.testing.assert_array_equal(np.asarray(d).view(np.uint16), want.view(np.uint16))


@pytest.mark.parametrize("m,n", [(0, 16), (16, 0)])
def test_mma_empty_m_or_n(m, n):
    d = jaxwarp.mma(np.zeros((m, 16), np.float16), np.zeros((16, n), np.float16),
                    np.zeros((m, n), np.float32), a_format="f16", c_format="f32", d_format="f32")
    assert d.shape == (m, n)


# --------------------------------------------------------------------------------------
# Format arguments: a name, a registry alias or a dtype that names the format.

@pytest.mark.parametrize("fmt,want", [
    ("bf16", "bf16"), ("bfloat16", "bf16"), (jnp.bfloat16, "bf16"),
    (np.dtype(jnp.bfloat16), "bf16"), (np.float16, "f16"), ("half", "f16"),
    (np.dtype("float16"), "f16"), (jnp.float8_e4m3fn, "e4m3"), ("fp8_e5m2", "e5m2"),
    (jnp.float8_e5m2, "e5m2"), ("tf32", "tf32")])
def test_format_argument_accepts_names_aliases_and_dtypes(fmt, want):
    x = F32.reshape(4, 8)
    np.testing.assert_array_equal(
        np.asarray(jaxwarp.to_operand(x, fmt)).view(np.uint8),
        np.asarray(jaxwarp.to_operand(x, want)).view(np.uint8))


# Slow: format dtypes are checked by test_format_argument_accepts_names_aliases_and_dtypes.
@pytest.mark.slow
def test_matmul_operand_format_dtype_pair():
    a = np.ones((16, 32), np.float32)
    b = np.ones((32, 8), np.float32)
    want = jaxwarp.matmul(a, b, operand_format=("e5m2", "e4m3"), instruction="mma_sync")
    got = jaxwarp.matmul(a, b, operand_format=(jnp.float8_e5m2, jnp.float8_e4m3fn),
                         instruction="mma_sync", accumulator=np.float32)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_format_name_f64_with_x64():
    from jaxwarp._src import checks
    with jax.enable_x64(True):
        assert checks.format_name(np.float64, "fmt", ("f64",), {"float64": "f64"}) == "f64"
    with pytest.raises(RuntimeError, match="jax_enable_x64"):
        checks.format_name(np.float64, "fmt", ("f64",), {"float64": "f64"})
    with pytest.raises(TypeError, match="fmt is a static argument"):
        jax.jit(lambda f: checks.format_name(f, "fmt", ("f16",)))(1.0)


# --------------------------------------------------------------------------------------
# jaxwarp.mx (block-scaled formats): the same table, policy and completeness check.

X32 = np.linspace(-3.0, 3.0, 64, dtype=np.float32).reshape(2, 32)
MX_ENTRY_POINTS: dict[str, Entry] = {
    "mx.quantize": Entry(jaxwarp.mx.quantize, {"x": X32}, static_args=("mxfp8_e4m3",)),
    "mx.fake_quantize": Entry(jaxwarp.mx.fake_quantize, {"x": X32},
                              static={"fmt": "mxint8", "scale_rule": "rceil"}),
    # Its data is an MXTensor pytree, whose leaves quantize made.
    "mx.dequantize": Entry(jaxwarp.mx.dequantize,
                           {"t": jaxwarp.mx.quantize(X32, "mxfp8_e5m2")}, wide=()),
    # Fast mode: the check is the argument policy, not the (slow to compile) datapath.
    "mx.matmul": Entry(jaxwarp.mx.matmul, {"a": X32, "b": X32.T}, static={"mode": "fast"}),
}
# Types: a format's description, the quantized tensor (a pytree container), a recipe.
MX_NO_ARRAY_DATA = frozenset({"mx.MXFormat", "mx.MXTensor", "mx.Recipe"})


def test_mx_table_is_complete():
    public = {"mx." + n for n in dir(jaxwarp.mx) if not n.startswith("_")
              and callable(getattr(jaxwarp.mx, n))
              and not inspect.ismodule(getattr(jaxwarp.mx, n))}
    assert public == set(MX_ENTRY_POINTS) | MX_NO_ARRAY_DATA


# Keywords renamed to the library's vocabulary (jaxwarp.matmul's operand_format): the old
# name works for a release, with a DeprecationWarning naming the new one.
RENAMED_KEYWORDS = {"matmul": {"fmt": "operand_format"}}  # jaxwarp.mx.<name>


def test_renamed_keywords_are_listed_in_the_signatures():
    for name, renames in RENAMED_KEYWORDS.items():
        params = inspect.signature(getattr(jaxwarp.mx, name)).parameters
        for old, new in renames.items():
            assert params[old].kind is inspect.Parameter.KEYWORD_ONLY, (name, old)
            assert params[old].default is None and new in params, (name, old)


@pytest.mark.parametrize("mode", ["fast", "exact"])
@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_mx_matmul_old_fmt_keyword_warns_and_gives_the_same_bits(mode, jit):
    a = jnp.asarray(np.linspace(-5.0, 7.0, 8 * 64, dtype=np.float32).reshape(8, 64))
    b = jnp.asarray(np.linspace(3.0, -2.0, 64 * 3, dtype=np.float32).reshape(64, 3) ** 3)
    fmt = ("mxfp8_e5m2", "mxfp6_e2m3")
    new = functools.partial(jaxwarp.mx.matmul, operand_format=fmt, mode=mode)
    old = functools.partial(jaxwarp.mx.matmul, fmt=fmt, mode=mode)
    if jit:
        new, old = jax.jit(new), jax.jit(old)
    want = np.asarray(new(a, b))
    with pytest.warns(DeprecationWarning, match=r"jaxwarp\.mx\.matmul: fmt= is deprecated; "
                                                r"use operand_format="):
        got = np.asarray(old(a, b))
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    positional = np.asarray(jaxwarp.mx.matmul(a, b, fmt, mode=mode))
    np.testing.assert_array_equal(positional.view(np.uint32), want.view(np.uint32))


def test_mx_matmul_old_and_new_keyword_together_is_an_error():
    a, b = jnp.asarray(X32), jnp.asarray(X32.T)
    for kw in (dict(operand_format="nvfp4", fmt="nvfp4"),
               dict(operand_format="mxfp8_e4m3", fmt="nvfp4")):
        with pytest.raises(TypeError, match="got both operand_format= and its old name fmt="):
            jaxwarp.mx.matmul(a, b, **kw)
        with pytest.raises(TypeError, match="got both operand_format= and its old name fmt="):
            jax.jit(lambda x, y, kw=kw: jaxwarp.mx.matmul(x, y, **kw))(a, b)
    with pytest.raises(TypeError, match="got both operand_format= and its old name fmt="):
        jaxwarp.mx.matmul(a, b, "nvfp4", fmt="nvfp4")


def test_old_keyword_is_a_static_argname_under_jit():
    a = jnp.asarray(X32.reshape(1, 64))  # K = 64: kind::mxf4nvf4's k
    b = jnp.asarray(X32.reshape(64, 1))
    f = jax.jit(jaxwarp.mx.matmul, static_argnames=("fmt", "mode"))
    with pytest.warns(DeprecationWarning, match="use operand_format="):
        got = np.asarray(f(a, b, fmt="nvfp4", mode="fast"))
    want = np.asarray(jaxwarp.mx.matmul(a, b, operand_format="nvfp4", mode="fast"))
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("name", sorted(MX_ENTRY_POINTS))
def test_mx_valid_call(name):
    _valid_call(MX_ENTRY_POINTS[name])


@pytest.mark.parametrize("name,arg,dt,mode", [
    (n, a, dt, m) for n, e in sorted(MX_ENTRY_POINTS.items()) for a in e.wide_names()
    for dt in e.wide_dtypes for m in ("eager", "jit_const")])
def test_mx_64bit_refused(name, arg, dt, mode):
    e = MX_ENTRY_POINTS[name]
    data = {**e.data, arg: _widened(e.data[arg], WIDE[dt])}
    call = (lambda: e.call(data)) if mode == "eager" else jax.jit(lambda: e.call(data))
    with pytest.raises(TypeError, match=rf"\b{re.escape(arg)} has 64-bit dtype {dt}"):
        call()


# --------------------------------------------------------------------------------------
# jaxwarp.cg (cooperative groups): the same table, policy and completeness check. A group
# is a pytree of per-lane masks (it traces under jit like any data); the 64-bit refusal is
# that of the values, labels and predicates.

_TILE = jaxwarp.cg.thread_block_tile(8)
CG_ENTRY_POINTS: dict[str, Entry] = {
    **{f"cg.{n}": Entry(getattr(jaxwarp.cg, n), {"group": _TILE, "value": F32},
                        static_args=("plus",), wide=("value",))
       for n in ("reduce", "inclusive_scan", "exclusive_scan")},
    "cg.labeled_partition": Entry(jaxwarp.cg.labeled_partition,
                                  {"group": _TILE, "label": I32 % 3}, wide=("label",),
                                  wide_dtypes=("int64", "uint64")),
    "cg.binary_partition": Entry(jaxwarp.cg.binary_partition, {"group": _TILE, "pred": I32 % 2},
                                 wide=("pred",), wide_dtypes=("int64", "uint64")),
    "cg.elected": Entry(jaxwarp.cg.elected, {"group": _TILE}, wide=()),
    # It takes a function: the call here passes one; the data are that function's own.
    "cg.invoke_one_broadcast": Entry(
        lambda group, x: jaxwarp.cg.invoke_one_broadcast(group, lambda v: v + 1, x),
        {"group": _TILE, "x": I32}, wide=()),
}
# Groups are made from static sizes (tiles), the executing lanes (coalesced_threads), a
# block's shape; the operators and the group types are values, not calls on data.
CG_NO_ARRAY_DATA = frozenset({
    "cg.thread_block_tile", "cg.tiled_partition", "cg.this_thread_block",
    "cg.coalesced_threads", "cg.Group", "cg.ThreadBlock", "cg.Op", "cg.plus", "cg.less",
    "cg.greater", "cg.bit_and", "cg.bit_or", "cg.bit_xor",
})


def test_cg_table_is_complete():
    public = {"cg." + n for n in dir(jaxwarp.cg) if not n.startswith("_")
              and callable(getattr(jaxwarp.cg, n))
              and not inspect.ismodule(getattr(jaxwarp.cg, n))}
    assert public == set(CG_ENTRY_POINTS) | CG_NO_ARRAY_DATA


def _cg_valid_params():
    """Every cg entry point eagerly: by default only cg.elected (the eager calls of the
    others, which compile each operation on its own, go to -m slow)."""
    for name in sorted(CG_ENTRY_POINTS):
        yield pytest.param(name, "eager", id=name,
                           marks=() if name == "cg.elected" else (pytest.mark.slow,))


@pytest.mark.parametrize("name,mode", list(_cg_valid_params()))
def test_cg_valid_call(name, mode):
    _valid_call(CG_ENTRY_POINTS[name], mode)


def test_cg_valid_calls_under_jit():
    """Every cg entry point under jax.jit: traced one by one, compiled as one program."""
    _valid_calls_under_jit(CG_ENTRY_POINTS)


@pytest.mark.parametrize("name, arg, dt", [
    (name, arg, e.wide_dtypes[0]) for name, e in sorted(CG_ENTRY_POINTS.items())
    for arg in e.wide_names()])
def test_cg_64bit_refused(name, arg, dt):
    e = CG_ENTRY_POINTS[name]
    data = {**e.data, arg: _widened(e.data[arg], WIDE[dt])}
    with pytest.raises(TypeError, match=rf"\b{re.escape(arg)} has 64-bit dtype {dt}"):
        e.call(data)
