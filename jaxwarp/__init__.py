"""jaxwarp: NVIDIA warp-level programming modelled bit for bit in JAX.

The lane axis is the leading axis of size 32; many warps are a ``jax.vmap`` away.
Everything public is listed here; ``jaxwarp._src`` is private (its layers:
docs/architecture.md). How an exact product runs, never what it gives, is chosen by the
switchboard ``jaxwarp.config`` (docs/config.md).
"""

# The switchboard: named options (backends, forms) read at trace time, as jax.config.
from jaxwarp._src.config import config as config

# Lanes and shuffles.
from jaxwarp._src.warp.lanes import FULL_MASK as FULL_MASK
from jaxwarp._src.warp.lanes import WARP_SIZE as WARP_SIZE
from jaxwarp._src.warp.lanes import activemask as activemask
from jaxwarp._src.warp.lanes import lane_id as lane_id
from jaxwarp._src.warp.lanes import nanosleep as nanosleep
from jaxwarp._src.warp.lanes import syncwarp as syncwarp
from jaxwarp._src.warp.lanes import shfl_sync as shfl_sync
from jaxwarp._src.warp.lanes import shfl_up_sync as shfl_up_sync
from jaxwarp._src.warp.lanes import shfl_down_sync as shfl_down_sync
from jaxwarp._src.warp.lanes import shfl_xor_sync as shfl_xor_sync
from jaxwarp._src.warp.kernel import warp_kernel as warp_kernel

# Reductions.
from jaxwarp._src.warp.reduce import reduce_sync as reduce_sync
from jaxwarp._src.warp.reduce import reduce_add_sync as reduce_add_sync
from jaxwarp._src.warp.reduce import reduce_min_sync as reduce_min_sync
from jaxwarp._src.warp.reduce import reduce_max_sync as reduce_max_sync
from jaxwarp._src.warp.reduce import reduce_and_sync as reduce_and_sync
from jaxwarp._src.warp.reduce import reduce_or_sync as reduce_or_sync
from jaxwarp._src.warp.reduce import reduce_xor_sync as reduce_xor_sync
from jaxwarp._src.warp.reduce import redux_sync as redux_sync

# Votes and matches.
from jaxwarp._src.warp.vote import ballot_sync as ballot_sync
from jaxwarp._src.warp.vote import any_sync as any_sync
from jaxwarp._src.warp.vote import all_sync as all_sync
from jaxwarp._src.warp.vote import match_any_sync as match_any_sync
from jaxwarp._src.warp.vote import match_all_sync as match_all_sync
from jaxwarp._src.warp.vote import elect_sync as elect_sync

# Divergence: branches and per-lane loops, each path run by the lanes that took it.
from jaxwarp._src.warp.divergence import branch as branch
from jaxwarp._src.warp.divergence import lane_for as lane_for
from jaxwarp._src.warp.divergence import lane_while as lane_while

# Number formats and the CUDA conversions.
from jaxwarp._src.numerics.formats import Format as Format
from jaxwarp._src.numerics.formats import FORMATS as FORMATS
from jaxwarp._src.numerics.formats import get_format as get_format
from jaxwarp._src.numerics.formats import to_bits as to_bits
from jaxwarp._src.numerics.formats import from_bits as from_bits
from jaxwarp._src.numerics.convert import round_to as round_to
from jaxwarp._src.numerics.convert import float2half_rn as float2half_rn
from jaxwarp._src.numerics.convert import float2half_rz as float2half_rz
from jaxwarp._src.numerics.convert import float2bfloat16_rn as float2bfloat16_rn
from jaxwarp._src.numerics.convert import float2bfloat16_rz as float2bfloat16_rz
from jaxwarp._src.numerics.convert import float_to_tf32 as float_to_tf32
from jaxwarp._src.numerics.convert import half2float as half2float
from jaxwarp._src.numerics.convert import bfloat162float as bfloat162float

# Formats beyond the hardware's (IEEE P3109 ...), and values to and from any format.
from jaxwarp._src.numerics.user_formats import define_format as define_format
from jaxwarp._src.numerics.user_formats import to_format as to_format
from jaxwarp._src.numerics.user_formats import from_format as from_format
from jaxwarp._src.numerics.user_formats import to_fnuz as to_fnuz

# WMMA: fragments, the warp matrix functions, the shape/type table.
from jaxwarp._src.layouts.fragment_types import Fragment as Fragment
from jaxwarp._src.layouts.fragment_types import fragment as fragment
from jaxwarp._src.layouts.fragment_types import FragmentType as FragmentType
from jaxwarp._src.layouts.fragment_types import fragment_type as fragment_type
from jaxwarp._src.layouts.fragments import fill_fragment as fill_fragment
from jaxwarp._src.instructions.wmma import load_matrix_sync as load_matrix_sync
from jaxwarp._src.instructions.wmma import store_matrix_sync as store_matrix_sync
from jaxwarp._src.instructions.wmma import mma_sync as mma_sync
from jaxwarp._src.instructions.wmma import bmma_sync as bmma_sync
from jaxwarp._src.instructions.wmma import matrix_to_memory as matrix_to_memory
from jaxwarp._src.layouts.fragments import fragment_from_matrix as fragment_from_matrix
from jaxwarp._src.layouts.fragments import matrix_from_fragment as matrix_from_fragment
from jaxwarp._src.layouts.fragments import lane_map as lane_map
from jaxwarp._src.layouts.fragments import lane_map_text as lane_map_text
from jaxwarp._src.catalogue import wmma_table as wmma_table  # TABLE: what WMMA supports
from jaxwarp._src.catalogue import isa as isa  # ROWS: what every instruction accepts

# Tensor-core arithmetic models (on logical matrices) and a tiled GEMM built on them.
from jaxwarp._src.catalogue.arch import ARCHS as ARCHS
from jaxwarp._src.catalogue.arch import Datapath as Datapath
from jaxwarp._src.catalogue.arch import ArchModel as ArchModel
from jaxwarp._src.catalogue.arch import Target as Target
from jaxwarp._src.catalogue.arch import parse_target as parse_target
from jaxwarp._src.catalogue.arch import datapath_for as datapath_for
from jaxwarp._src.gemm.matmul import mma as mma
from jaxwarp._src.arithmetic.datapath_int import bmma as bmma
from jaxwarp._src.gemm.matmul import matmul as matmul
from jaxwarp._src.gemm.matmul import to_operand as to_operand

# An emulated fused dot-product-add over any formats, its parameters as data.
from jaxwarp._src.arithmetic.fused_dot import FusedDot as FusedDot
from jaxwarp._src.arithmetic.fused_dot import fused_dot as fused_dot

# Data movement between shared memory and mma.sync fragments (PTX ldmatrix family).
from jaxwarp._src.layouts.ldmatrix import ldmatrix as ldmatrix
from jaxwarp._src.layouts.ldmatrix import stmatrix as stmatrix
from jaxwarp._src.layouts.ldmatrix import movmatrix as movmatrix

# PTX mma.sync.aligned, named by its qualifier string: registers or logical matrices.
from jaxwarp._src.catalogue.mma_sync_parse import parse_mma as parse_mma
from jaxwarp._src.catalogue.mma_sync_parse import mma_instructions as mma_instructions
# (to_registers / from_registers take mma.sp opcodes too: they live with parse_mma_sp)
from jaxwarp._src.instructions.mma_sp import to_registers as to_registers
from jaxwarp._src.instructions.mma_sp import from_registers as from_registers
from jaxwarp._src.instructions.mma_sync import mma_sync_ptx as mma_sync_ptx
from jaxwarp._src.instructions.mma_sync import mma_sync_ptx_logical as mma_sync_ptx_logical

# Sparse MMA (2:4 structured sparsity): mma.sp / mma.sp::ordered_metadata on registers or
# logical matrices, wgmma.mma_async.sp on registers or logical matrices; helpers in
# jaxwarp.sparse (as_2_4 marks a weight for emulate).
from jaxwarp._src.instructions.mma_sp import parse_mma_sp as parse_mma_sp
from jaxwarp._src.instructions.mma_sp import mma_sp_instructions as mma_sp_instructions
from jaxwarp._src.instructions.mma_sp import mma_sp as mma_sp
from jaxwarp._src.instructions.mma_sp import mma_sp_logical as mma_sp_logical
from jaxwarp._src.instructions.wgmma_sp import parse_wgmma_sp as parse_wgmma_sp
from jaxwarp._src.instructions.wgmma_sp import wgmma_sp as wgmma_sp
from jaxwarp._src.instructions.wgmma_sp import wgmma_sp_logical as wgmma_sp_logical
from jaxwarp import sparse as sparse
from jaxwarp import kernels as kernels  # Triton-style Pallas kernels (triton_matmul)

# PTX wgmma.mma_async on a warpgroup (128 lanes): descriptors, shared memory, registers.
from jaxwarp._src.catalogue.wgmma_parse import parse_wgmma as parse_wgmma
from jaxwarp._src.instructions.wgmma import make_descriptor as make_descriptor
from jaxwarp._src.instructions.wgmma import decode_descriptor as decode_descriptor
from jaxwarp._src.instructions.wgmma import wgmma as wgmma
from jaxwarp._src.instructions.wgmma import wgmma_logical as wgmma_logical

# PTX tcgen05.mma (Blackwell): instruction and shared memory descriptors, D in tensor memory.
from jaxwarp._src.instructions.tcgen05_parse import parse_tcgen05 as parse_tcgen05
from jaxwarp._src.instructions.tcgen05_parse import make_instr_descriptor as make_instr_descriptor
from jaxwarp._src.instructions.tcgen05_parse import (
    decode_instr_descriptor as decode_instr_descriptor,
)
from jaxwarp._src.layouts.smem import make_smem_descriptor as make_smem_descriptor
from jaxwarp._src.layouts.smem import decode_smem_descriptor as decode_smem_descriptor
from jaxwarp._src.instructions.tcgen05 import tcgen05_mma as tcgen05_mma
from jaxwarp._src.instructions.tcgen05 import tcgen05_mma_logical as tcgen05_mma_logical

# AMD Instinct matrix cores (CDNA1-3): v_mfma_* on logical matrices (docs/amd.md).
from jaxwarp._src.instructions.amd.mfma import mfma_logical as mfma_logical
from jaxwarp._src.layouts.mfma_registers import mfma_lane_map as mfma_lane_map

# Block-scaled MMA (microscaling: mma.sync / tcgen05.mma .block_scale): logical matrices,
# mma.sync's registers with their scale selectors, tcgen05.mma through descriptors.
from jaxwarp._src.arithmetic.block_scale import BlockScaleDatapath as BlockScaleDatapath
from jaxwarp._src.arithmetic.block_scale import mma_block_scale_logical as mma_block_scale_logical
from jaxwarp._src.instructions.mma_sync_block_scale import mma_block_scale as mma_block_scale
from jaxwarp._src.instructions.tcgen05_block_scale import (
    make_block_scale_instr_descriptor as make_block_scale_instr_descriptor,
    tcgen05_mma_block_scale as tcgen05_mma_block_scale,
)

# Run any JAX function with its matrix products through an emulated tensor core.
from jaxwarp._src.emulate import emulate as emulate
from jaxwarp._src.emulate import EmulationReport as EmulationReport
from jaxwarp._src.emulate import ReportEntry as ReportEntry
from jaxwarp._src.emulate import Product as Product
from jaxwarp._src.emulate import ProductFilter as ProductFilter
from jaxwarp._src.emulate import UnsupportedProductError as UnsupportedProductError

# Many warps over many devices: vmap with the batch axis sharded over a device mesh.
from jaxwarp._src.sharding import DETERMINISTIC_XLA_FLAGS as DETERMINISTIC_XLA_FLAGS
from jaxwarp._src.sharding import batch_mesh as batch_mesh
from jaxwarp._src.sharding import deterministic_xla as deterministic_xla
from jaxwarp._src.sharding import grouped_value_and_grad as grouped_value_and_grad
from jaxwarp._src.sharding import shard_batch as shard_batch
from jaxwarp._src.sharding import sharded_vmap as sharded_vmap

# DPX integer functions, in their own namespace: jaxwarp.dpx.vimax3_s32, ...
from jaxwarp import dpx as dpx

# Cooperative groups over a warp (tiles, coalesced groups, reduce/scan): jaxwarp.cg.reduce, ...
from jaxwarp import cg as cg

# fp8, fp6 and fp4 conversions, in their own namespaces (cuda_fp8.h, cuda_fp6.h,
# cuda_fp4.h): jaxwarp.fp8.cvt_f32_to_e4m3x2, jaxwarp.fp6.cvt_f32_to_e2m3x2, ...
from jaxwarp import fp8 as fp8
from jaxwarp import fp6 as fp6
from jaxwarp import fp4 as fp4

# Block-scaled formats (OCP MX, NVFP4), in their own namespace: jaxwarp.mx.quantize, ...
from jaxwarp import mx as mx

# Checked mode: report undefined behaviour instead of modelling it.
from jaxwarp._src.warp.checked import checked as checked

__version__ = "0.2.0"

# The public names: what ``help()``, ``pydoc`` and ``from ... import *`` list (the
# re-exports above; a test checks the two agree).
__all__ = sorted(_n for _n in dir() if not _n.startswith("_"))

# Do not import from jaxwarp._src: it is private and changes without notice.

# Names of 0.1.0 that were renamed resolve for one more release, with a DeprecationWarning
# naming the replacement (tests/test_names_010.py lists every public name of 0.1.0).
_RENAMED = {"bits": "to_bits", "ArchParams": "ArchModel"}


def __getattr__(name: str):
    if name in _RENAMED:
        import warnings

        warnings.warn(f"jaxwarp.{name} is deprecated and will be removed in the next release; "
                      f"use jaxwarp.{_RENAMED[name]}", DeprecationWarning, stacklevel=2)
        return globals()[_RENAMED[name]]
    raise AttributeError(f"module 'jaxwarp' has no attribute {name!r}")
