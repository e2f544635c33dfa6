"""A catalogue of bad inputs: each must fail with the right exception type and a
message that names the argument and says what is allowed.

Every case runs eagerly and, where tracing changes anything (array arguments become
tracers; static arguments given as arrays are traced), under ``jax.jit`` as well.
The capture-file cases run ``python -m jaxwarp.conformance`` in a subprocess and
expect one ``error:`` line on stderr with exit status 2 (1 with ``unhandled/<key>``
lines for a readable file whose keys no handler knows), never a traceback.

Cases that currently fail are marked ``xfail(strict=True)`` with the reason: they are
library bugs, reported rather than fixed here.
"""

from __future__ import annotations

import dataclasses
import io
import pathlib
import subprocess
import sys
import zipfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxwarp
from jaxwarp import fragment

ROOT = pathlib.Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
FULL = 0xFFFFFFFF


@dataclasses.dataclass(frozen=True)
class Case:
    """One bad call: ``fn(*args)`` must raise ``exc`` whose message contains ``must``."""

    id: str
    fn: Callable[..., Any]
    args: tuple
    exc: type[BaseException]
    must: tuple[str, ...]
    modes: tuple[str, ...] = ("eager", "jit")
    xfail: str | None = None


CASES: list[Case] = []


def case(id, fn, *args, exc, must, modes=("eager", "jit"), xfail=None):
    CASES.append(Case(id, fn, args, exc, tuple(must), modes, xfail))


EAGER = ("eager",)
JIT = ("jit",)  # a static argument passed as an array: only tracing makes it bad

u32 = np.zeros(32, np.uint32)
i32 = np.zeros(32, np.int32)
f32 = np.zeros(32, np.float32)

# --------------------------------------------------------------------------------------
# Lanes and shuffles.

case("shfl-var-no-lane-axis", lambda v: jaxwarp.shfl_sync(FULL, v, 0), np.zeros(16, np.uint32),
     exc=ValueError, must=("var must have a leading lane axis of size 32", "(16,)"))
case("shfl-var-lane-axis-last", lambda v: jaxwarp.shfl_sync(FULL, v, 0),
     np.zeros((4, 32), np.uint32), exc=ValueError,
     must=("var must have a leading lane axis", "(4, 32)", "vmap"))
case("shfl-var-scalar", lambda v: jaxwarp.shfl_down_sync(FULL, v, 1), np.uint32(3),
     exc=ValueError, must=("var must have a leading lane axis of size 32",))
case("shfl-width-traced", lambda v, w: jaxwarp.shfl_sync(FULL, v, 0, w), u32, 8,
     exc=jax.errors.ConcretizationTypeError, must=("width", "static", "static_argnums"),
     modes=JIT)
case("shfl-width-float", lambda v: jaxwarp.shfl_sync(FULL, v, 0, 8.0), u32,
     exc=TypeError, must=("width must be a Python int", "float"))
case("shfl-width-bool", lambda v: jaxwarp.shfl_xor_sync(FULL, v, 1, True), u32,
     exc=TypeError, must=("width must be a Python int", "bool"))
case("shfl-mask-float", lambda m, v: jaxwarp.shfl_sync(m, v, 0), np.float32(1), u32,
     exc=TypeError, must=("mask must be a 32-bit integer lane mask", "uint32 or int32",
                                 "float32"))
case("shfl-mask-too-wide", lambda v: jaxwarp.shfl_sync(2**32, v, 0), u32,
     exc=ValueError, must=("mask", "0 .. 0xFFFFFFFF"))
case("shfl-mask-np-int64-too-wide", lambda v: jaxwarp.shfl_sync(np.int64(2**40 + 1), v, 0), u32,
     exc=ValueError, must=("mask", "0 .. 0xFFFFFFFF"))
case("shfl-mask-wrong-shape", lambda m, v: jaxwarp.shfl_sync(m, v, 0),
     np.full(16, FULL, np.uint32), u32, exc=ValueError,
     must=("mask must be a scalar or one mask per lane", "(32,)", "(16,)"))
case("shfl-src_lane-float", lambda v, b: jaxwarp.shfl_sync(FULL, v, b), u32, f32,
     exc=TypeError, must=("src_lane must be an integer", "float32"))
case("shfl_up-delta-float", lambda v, b: jaxwarp.shfl_up_sync(FULL, v, b), u32, f32,
     exc=TypeError, must=("delta must be an integer", "float32"))
case("shfl_xor-lane_mask-float", lambda v, b: jaxwarp.shfl_xor_sync(FULL, v, b), u32, f32,
     exc=TypeError, must=("lane_mask must be an integer", "float32"))
case("nanosleep-negative", lambda: jaxwarp.nanosleep(-1), exc=ValueError,
     must=("ns=-1", "0 .. 1000000"), modes=EAGER)
case("nanosleep-above-cap", lambda: jaxwarp.nanosleep(1_000_001), exc=ValueError,
     must=("ns=1000001", "0 .. 1000000"), modes=EAGER)
case("nanosleep-float", lambda ns: jaxwarp.nanosleep(ns), np.float32(1.5), exc=TypeError,
     must=("ns must be an integer", "float32"))
case("nanosleep-concrete-array-above-cap", lambda: jaxwarp.nanosleep(np.array(2_000_000)),
     exc=ValueError, must=("ns=2000000", "0 .. 1000000"), modes=EAGER)
case("nanosleep-bool", lambda: jaxwarp.nanosleep(True), exc=TypeError,
     must=("ns must be an unsigned integer", "bool"), modes=EAGER)

# --------------------------------------------------------------------------------------
# Reductions and votes.

case("reduce_add-float", lambda v: jaxwarp.reduce_add_sync(FULL, v), f32, exc=TypeError,
     must=("value has dtype float32", "allowed: ('int32', 'uint32')"))
case("reduce_min-int16", lambda v: jaxwarp.reduce_min_sync(FULL, v), np.zeros(32, np.int16),
     exc=TypeError, must=("value has dtype int16", "allowed: ('int32', 'uint32')"))
for _op in ("and", "or", "xor"):
    case(f"reduce_{_op}-signed",
         lambda v, op=_op: getattr(jaxwarp, f"reduce_{op}_sync")(FULL, v), i32,
         exc=TypeError, must=("value has dtype int32", "allowed: ('uint32',)", "unsigned only"))
case("reduce-unknown-op", lambda v: jaxwarp.reduce_sync("mul", FULL, v), u32, exc=ValueError,
     must=("op='mul'", "allowed", "'add'", "'xor'"))
case("reduce-no-lane-axis", lambda v: jaxwarp.reduce_max_sync(FULL, v),
     np.zeros(31, np.uint32), exc=ValueError,
     must=("value must have a leading lane axis of size 32",))
case("ballot-pred-float", lambda p: jaxwarp.ballot_sync(FULL, p), f32, exc=TypeError,
     must=("pred must be bool or an integer", "float32"))
case("all-pred-2d", lambda p: jaxwarp.all_sync(FULL, p), np.zeros((32, 2), bool),
     exc=ValueError, must=("pred must have shape (32,)", "(32, 2)"))
case("match_any-int16", lambda v: jaxwarp.match_any_sync(FULL, v), np.zeros(32, np.int16),
     exc=TypeError, must=("value must be a 32- or 64-bit int or float", "int16"))
case("match_all-bool", lambda v: jaxwarp.match_all_sync(FULL, v), np.zeros(32, bool),
     exc=TypeError, must=("value must be a 32- or 64-bit int or float", "bool"))

# --------------------------------------------------------------------------------------
# Number formats and DPX.

case("round_to-unknown-format", lambda x: jaxwarp.round_to(x, "fp13"), f32, exc=ValueError,
     must=("fmt='fp13'", "allowed", "'fp16'", "'bf16'"))
case("round_to-unknown-mode", lambda x: jaxwarp.round_to(x, "fp16", "up"), f32,
     exc=ValueError, must=("mode='up'", "allowed", "'rn'", "'rz'"))
case("float2half_rn-int", lambda x: jaxwarp.float2half_rn(x), i32, exc=TypeError,
     must=("x must be a float32 array", "int32"))
case("from_bits-wrong-width", lambda u: jaxwarp.from_bits(u, "fp16"), np.zeros(3, np.uint8),
     exc=TypeError, must=("u must be an integer array of 16 bits", "fmt='fp16'", "uint8"))
case("bits-complex", lambda x: jaxwarp.bits(x), np.zeros(3, np.complex64), exc=TypeError,
     must=("x must", "complex64"))
case("dpx-float-operand", lambda a, b, c: jaxwarp.dpx.vimax3_s32(a, b, c), f32, i32, i32,
     exc=TypeError, must=("a must be a 32-bit integer", "float32"))

# --------------------------------------------------------------------------------------
# WMMA fragments: declarations the table does not allow.

case("fragment-operand-without-layout",
     lambda: fragment("matrix_a", 16, 16, 16, "f16"), exc=ValueError,
     must=("layout is required", "('row_major', 'col_major')"), modes=EAGER)
case("fragment-accumulator-with-layout",
     lambda: fragment("accumulator", 16, 16, 16, "f32", "row_major"), exc=ValueError,
     must=("layout='row_major'", "no layout", "mem_row_major"), modes=EAGER)
case("fragment-s4-a-col_major",
     lambda: fragment("matrix_a", 8, 8, 32, "s4", "col_major"), exc=ValueError,
     must=("layout='col_major'", "s4", "allowed: ('row_major',)"), modes=EAGER)
case("fragment-b1-b-row_major",
     lambda: fragment("matrix_b", 8, 8, 128, "b1", "row_major"), exc=ValueError,
     must=("layout='row_major'", "b1", "allowed: ('col_major',)"), modes=EAGER)
case("fragment-f16-m16n16k8",
     lambda: fragment("matrix_a", 16, 16, 8, "f16", "row_major"), exc=ValueError,
     must=("a_type='f16'", "valid for f16: m16n16k16, m32n8k16, m8n32k16", "tf32"),
     modes=EAGER)
case("fragment-unknown-shape",
     lambda: fragment("matrix_a", 16, 16, 32, "f16", "row_major"), exc=ValueError,
     must=("m16n16k32", "valid shapes", "m16n16k16", "m8n8k128"), modes=EAGER)
case("fragment-accumulator-bf16",
     lambda: fragment("accumulator", 16, 16, 16, "bf16"), exc=ValueError,
     must=("type='bf16'", "valid", "'f32'", "'s32'"), modes=EAGER)
case("fragment-unknown-use",
     lambda: fragment("matrix_c", 16, 16, 16, "f16", "row_major"), exc=ValueError,
     must=("use='matrix_c'", "allowed", "matrix_a", "accumulator"), modes=EAGER)
case("fragment-unknown-type",
     lambda: fragment("matrix_a", 16, 16, 16, "e4m3", "row_major"), exc=ValueError,
     must=("type='e4m3'", "valid WMMA A/B types", "f16", "b1"), modes=EAGER)
case("fragment-m-traced",
     lambda m: fragment("matrix_a", m, 16, 16, "f16", "row_major"), 16,
     exc=jax.errors.ConcretizationTypeError, must=("m is a static argument",), modes=JIT)

FA = fragment("matrix_a", 16, 16, 16, "f16", "row_major")
FB = fragment("matrix_b", 16, 16, 16, "f16", "col_major")
FC = fragment("accumulator", 16, 16, 16, "f32")
FC16 = fragment("accumulator", 16, 16, 16, "f16")
F16MEM = np.zeros(512, np.float16)
F32MEM = np.zeros(512, np.float32)


def _load(frag, ldm, layout=None, offset=0):
    return lambda mem: jaxwarp.load_matrix_sync(frag, mem, ldm, layout, offset=offset)


# ldm must be a multiple of 16 bytes: one case per element size.
case("load-ldm-16bit", _load(FA, 20), F16MEM, exc=ValueError,
     must=("ldm=20", "multiple of 8 elements", "16 bytes", "f16"))
case("load-ldm-32bit", _load(FC, 18, "mem_row_major"), F32MEM, exc=ValueError,
     must=("ldm=18", "multiple of 4 elements", "f32"))
case("load-ldm-tf32", _load(fragment("matrix_b", 16, 16, 8, "tf32", "row_major"), 18),
     F32MEM, exc=ValueError, must=("ldm=18", "multiple of 4 elements", "tf32"))
case("load-ldm-8bit", _load(fragment("matrix_a", 16, 16, 16, "s8", "row_major"), 24),
     np.zeros(512, np.int8), exc=ValueError, must=("ldm=24", "multiple of 16 elements", "s8"))
case("load-ldm-4bit", _load(fragment("matrix_a", 8, 8, 32, "u4", "row_major"), 48),
     np.zeros(256, np.uint8), exc=ValueError, must=("ldm=48", "multiple of 32 elements", "u4"))
case("load-ldm-1bit", _load(fragment("matrix_b", 8, 8, 128, "b1", "col_major"), 192),
     np.zeros(256, np.uint8), exc=ValueError, must=("ldm=192", "multiple of 128 elements", "b1"))
case("load-ldm-zero", _load(FA, 0), F16MEM, exc=ValueError,
     must=("ldm=0", "positive multiple of 8"))


def _load_f64_ldm9(mem):
    frag = fragment("accumulator", 8, 8, 4, "f64")
    return jaxwarp.load_matrix_sync(frag, mem.astype(jnp.float64), 9, "mem_row_major")


case("load-ldm-64bit", _load_f64_ldm9, F32MEM, exc=ValueError,
     must=("ldm=9", "multiple of 2 elements", "f64"), modes=("eager_x64", "jit_x64"))

# The pointer must be 256-bit aligned.
case("load-offset-16bit", _load(FA, 16, offset=8), F16MEM, exc=ValueError,
     must=("offset=8", "multiple of 16 elements", "256-bit"))
case("load-offset-32bit", _load(FC, 16, "mem_col_major", offset=4), F32MEM, exc=ValueError,
     must=("offset=4", "multiple of 8 elements", "32-byte"))
case("load-offset-4bit", _load(fragment("matrix_a", 8, 8, 32, "s4", "row_major"), 32,
                               offset=32), np.zeros(256, np.uint8), exc=ValueError,
     must=("offset=32", "multiple of 64 elements", "s4"))
case("load-offset-negative", _load(FA, 16, offset=-16), F16MEM, exc=ValueError,
     must=("offset=-16", "non-negative multiple of 16"))
case("load-ldm-below-row", _load(FA, 8), F16MEM, exc=ValueError,
     must=("ldm=8", "smaller than the row length 16"))
case("load-ldm-below-column",
     _load(fragment("matrix_b", 32, 8, 16, "f16", "col_major"), 8), F16MEM, exc=ValueError,
     must=("ldm=8", "smaller than the column length 16"))
case("load-memory-too-small", _load(FA, 16), np.zeros(200, np.float16), exc=ValueError,
     must=("memory holds 200 elements", "ldm=16", "reaches element 255"))
case("load-memory-too-small-with-offset", _load(FA, 32, offset=32), F16MEM, exc=ValueError,
     must=("memory holds 512 elements", "offset=32", "ldm=32"))
case("load-accumulator-without-layout", _load(FC, 16), F32MEM, exc=ValueError,
     must=("accumulator needs layout", "mem_row_major", "mem_col_major"))
case("load-accumulator-operand-layout", _load(FC, 16, "row_major"), F32MEM, exc=ValueError,
     must=("layout='row_major'", "allowed", "mem_row_major"))
case("load-operand-with-layout", _load(FA, 16, "mem_row_major"), F16MEM, exc=ValueError,
     must=("layout='mem_row_major'", "must not be given", "only for accumulators"))
case("load-memory-dtype", _load(FA, 16), F32MEM, exc=TypeError,
     must=("memory for a f16 fragment must have dtype float16", "float32"))
case("load-subbyte-memory-dtype", _load(fragment("matrix_a", 8, 8, 32, "s4", "row_major"), 32),
     np.zeros(256, np.int8), exc=TypeError,
     must=("memory for a s4 fragment must have dtype uint8", "packed", "int8"))
case("load-memory-2d", _load(FA, 16), np.zeros((2, 256), np.float16), exc=ValueError,
     must=("memory must be a flat 1-D buffer", "(2, 256)"))
case("load-ldm-traced", lambda mem, ldm: jaxwarp.load_matrix_sync(FA, mem, ldm), F16MEM, 16,
     exc=jax.errors.ConcretizationTypeError, must=("ldm is a static argument",), modes=JIT)
case("load-offset-traced",
     lambda mem, off: jaxwarp.load_matrix_sync(FA, mem, 16, offset=off), F16MEM, 0,
     exc=jax.errors.ConcretizationTypeError, must=("offset is a static argument",), modes=JIT)
case("store-operand-fragment",
     lambda mem: jaxwarp.store_matrix_sync(mem, FA, 16, "mem_row_major"), F16MEM,
     exc=ValueError, must=("accumulator fragments only", "matrix_a"))
case("store-without-layout", lambda mem: jaxwarp.store_matrix_sync(mem, FC, 16, None), F32MEM,
     exc=ValueError, must=("needs layout", "mem_row_major", "mem_col_major"))
case("store-ldm-32bit", lambda mem: jaxwarp.store_matrix_sync(mem, FC, 18, "mem_row_major"),
     F32MEM, exc=ValueError, must=("ldm=18", "multiple of 4 elements"))
case("store-memory-dtype",
     lambda mem: jaxwarp.store_matrix_sync(mem, FC16, 16, "mem_row_major"), F32MEM,
     exc=TypeError, must=("memory for a f16 fragment must have dtype float16", "float32"))
case("fill-non-scalar", lambda v: jaxwarp.fill_fragment(FC, v), f32, exc=ValueError,
     must=("v must be a scalar", "(32,)"))
case("fill-string", lambda: jaxwarp.fill_fragment(FC, "one"), exc=TypeError,
     must=("v must be a scalar",), modes=EAGER)
case("matrix_to_memory-unknown-type",
     lambda: jaxwarp.matrix_to_memory(np.zeros((16, 16), np.float16), "f17", "row_major"),
     exc=ValueError, must=("type='f17'", "f16"), modes=EAGER)
case("matrix_to_memory-unknown-layout",
     lambda: jaxwarp.matrix_to_memory(np.zeros((16, 16), np.float16), "f16", "diag"),
     exc=ValueError, must=("layout='diag'", "row_major", "col_major"), modes=EAGER)
case("fragment_from_matrix-shape", lambda x: jaxwarp.fragment_from_matrix(FA, x),
     np.zeros((16, 8), np.float16), exc=ValueError,
     must=("matrix for a matrix_a m16n16k16 fragment must have shape", "(..., 16, 16)",
           "(16, 8)"))
case("fragment_from_matrix-dtype", lambda x: jaxwarp.fragment_from_matrix(FA, x),
     np.zeros((16, 16), np.float32), exc=TypeError,
     must=("matrix for a f16 fragment must have dtype float16", "float32"))

# --------------------------------------------------------------------------------------
# mma_sync / bmma_sync: roles, shapes and the table.


def _mma_sync(a, b, c, **kw):
    return lambda: jaxwarp.mma_sync(a, b, c, **kw)


case("mma_sync-a-b-swapped", _mma_sync(FB, FA, FC), exc=ValueError,
     must=("a must be a matrix_a fragment", "matrix_b", "swapped"), modes=EAGER)
case("mma_sync-accumulator-as-a", _mma_sync(FC, FB, FC), exc=ValueError,
     must=("a must be a matrix_a fragment", "accumulator"), modes=EAGER)
case("mma_sync-shape-mismatch",
     _mma_sync(FA, fragment("matrix_b", 32, 8, 16, "f16", "col_major"), FC), exc=ValueError,
     must=("fragment shapes differ", "m16n16k16", "m32n8k16", "same (m, n, k)"), modes=EAGER)
case("mma_sync-type-mismatch",
     _mma_sync(FA, fragment("matrix_b", 16, 16, 16, "bf16", "col_major"), FC), exc=ValueError,
     must=("same element type", "'f16'", "'bf16'"), modes=EAGER)
case("mma_sync-bf16-f16-accumulator",
     _mma_sync(fragment("matrix_a", 16, 16, 16, "bf16", "row_major"),
               fragment("matrix_b", 16, 16, 16, "bf16", "col_major"), FC16), exc=ValueError,
     must=("c_type='f16'", "valid for bf16: (c_type='f32', d_type='f32')"), modes=EAGER)
case("mma_sync-f16-d_type-s32", _mma_sync(FA, FB, FC, d_type="s32"), exc=ValueError,
     must=("d_type='s32'", "valid for f16", "(c_type='f32', d_type='f16')"), modes=EAGER)
case("mma_sync-tf32-on-sm_75",
     _mma_sync(fragment("matrix_a", 16, 16, 8, "tf32", "row_major"),
               fragment("matrix_b", 16, 16, 8, "tf32", "col_major"),
               fragment("accumulator", 16, 16, 8, "f32"), arch="sm_75"), exc=ValueError,
     must=("tf32", "needs sm_80", "arch='sm_75'"), modes=EAGER)
case("mma_sync-bad-arch-name", _mma_sync(FA, FB, FC, arch="gfx90a"), exc=ValueError,
     must=("arch='gfx90a'", "not an architecture name", "'sm_90'"), modes=EAGER)
_B1 = (fragment("matrix_a", 8, 8, 128, "b1", "row_major"),
       fragment("matrix_b", 8, 8, 128, "b1", "col_major"),
       fragment("accumulator", 8, 8, 128, "s32"))
case("mma_sync-b1", _mma_sync(*_B1), exc=ValueError, must=("b1", "bmma_sync", "not mma_sync"),
     modes=EAGER)
case("bmma_sync-unknown-op", lambda: jaxwarp.bmma_sync(*_B1, "or"), exc=ValueError,
     must=("op='or'", "allowed", "'xor'", "'and'"), modes=EAGER)
case("bmma_sync-and-on-sm_75", lambda: jaxwarp.bmma_sync(*_B1, "and", arch="sm_75"),
     exc=ValueError, must=("op='and'", "needs sm_80", "arch='sm_75'"), modes=EAGER)
case("bmma_sync-f16-fragments", lambda: jaxwarp.bmma_sync(FA, FB, FC, "xor"), exc=ValueError,
     must=("bmma_sync takes b1", "a_type='f16'"), modes=EAGER)
case("mma_sync-satf-traced", lambda s: jaxwarp.mma_sync(FA, FB, FC, satf=s), True,
     exc=TypeError, must=("satf is a static argument", "bool"), modes=JIT)
case("mma_sync-satf-int", _mma_sync(FA, FB, FC, satf=1), exc=TypeError,
     must=("satf must be a Python bool", "int"), modes=EAGER)
case("mma_sync-not-a-fragment", lambda x: jaxwarp.mma_sync(x, FB, FC),
     np.zeros((16, 16), np.float16), exc=TypeError, must=("a must be a Fragment", "ndarray"),
     modes=EAGER)

# --------------------------------------------------------------------------------------
# mma / bmma on logical matrices.

H16 = np.zeros((16, 16), np.float16)
S32 = np.zeros((16, 16), np.float32)
KW = dict(a_type="f16", c_type="f32", d_type="f32")


def _mma(**kw):
    return lambda a, b, c: jaxwarp.mma(a, b, c, **{**KW, **kw})


case("mma-unknown-a_type", _mma(a_type="f8"), H16, H16, S32, exc=ValueError,
     must=("a_type='f8'", "allowed", "'f16'", "'u4'", "'e4m3'"))
case("mma-unsupported-combination", _mma(a_type="bf16", c_type="f16", d_type="f16"),
     H16, H16, S32, exc=ValueError,
     must=("('bf16', 'f16', 'f16')", "valid (a_type, c_type, d_type) combinations",
           "('bf16', 'f32', 'f32')"))
case("mma-a-dtype", _mma(), S32, H16, S32, exc=TypeError,
     must=("a must have dtype float16", "float32"))
case("mma-c-dtype", _mma(), H16, H16, H16, exc=TypeError,
     must=("c must have dtype float32", "float16"))
case("mma-k-mismatch", _mma(), np.zeros((16, 8), np.float16), H16, S32, exc=ValueError,
     must=("k differs", "(16, 8)", "(16, 16)"))
case("mma-batch-not-broadcast", _mma(), np.zeros((2, 16, 16), np.float16),
     np.zeros((3, 16, 16), np.float16), S32, exc=ValueError,
     must=("batch dims", "(2, 16, 16)", "(3, 16, 16)", "do not broadcast"))
case("mma-a-1d", _mma(), np.zeros(16, np.float16), H16, S32, exc=ValueError,
     must=("a must be at least 2-D", "(16,)"))
case("mma-c-shape", _mma(), H16, H16, np.zeros((16, 8), np.float32), exc=ValueError,
     must=("c must be (..., m, n) = (..., 16, 16)", "(16, 8)"))
case("mma-f64-without-x64",
     lambda a: jaxwarp.mma(a, a, a, a_type="f64", c_type="f64", d_type="f64"),
     np.zeros((8, 8), np.float32), exc=RuntimeError, must=("f64", "jax_enable_x64"))
case("mma-unknown-mode", _mma(mode="approx"), H16, H16, S32, exc=ValueError,
     must=("mode='approx'", "allowed", "'exact'", "'fast'"))
case("mma-satf-not-bool", _mma(satf=1), H16, H16, S32, exc=TypeError,
     must=("satf must be a Python bool", "int"))
case("mma-unknown-arch", _mma(arch="sm_100"), H16, H16, S32, exc=ValueError,
     must=("arch='sm_100'", "allowed", "'sm_90'"))
case("bmma-unknown-op",
     lambda a, b, c: jaxwarp.bmma(a, b, c, op="or"), np.zeros((8, 128), np.uint8),
     np.zeros((128, 8), np.uint8), np.zeros((8, 8), np.int32), exc=ValueError,
     must=("op='or'", "allowed", "'xor'", "'and'"))

# --------------------------------------------------------------------------------------
# matmul: shapes the tile does not divide, formats, static tile.

M32 = np.ones((32, 32), np.float32)


def _matmul(**kw):
    return lambda a, b: jaxwarp.matmul(a, b, **kw)


case("matmul-K-not-multiple", _matmul(), np.ones((16, 20), np.float32),
     np.ones((20, 16), np.float32), exc=ValueError,
     must=("K=20", "not a multiple of the tile's 16", "(16, 16, 16)", "(32, 8, 16)"))
case("matmul-M-not-multiple-tf32", _matmul(operand_format="tf32"),
     np.ones((24, 8), np.float32), np.ones((8, 16), np.float32), exc=ValueError,
     must=("M=24", "not a multiple of the tile's 16", "(16, 16, 8)"))
case("matmul-N-not-multiple-custom-tile", _matmul(tile=(8, 32, 16)), M32,
     np.ones((32, 48), np.float32), exc=ValueError, must=("N=48", "tile's 32"))
case("matmul-tile-traced", lambda a, b, m: jaxwarp.matmul(a, b, tile=(m, 16, 16)), M32, M32, 16,
     exc=jax.errors.ConcretizationTypeError, must=("tile is a static argument",), modes=JIT)
case("matmul-tile-not-a-shape", _matmul(tile=(16, 16, 8)), M32, M32, exc=ValueError,
     must=("tile=(16, 16, 8)", "operand_format='f16'", "allowed", "(16, 16, 16)"))
case("matmul-tile-not-a-tuple", _matmul(tile=16), M32, M32, exc=TypeError,
     must=("tile must be a static (m, n, k) tuple", "16"))
case("matmul-unknown-format", _matmul(operand_format="fp8"), M32, M32, exc=ValueError,
     must=("operand_format='fp8'", "allowed", "'f16'", "'tf32'"))
case("matmul-accumulator-for-bf16", _matmul(operand_format="bf16", accumulator="f16"), M32,
     M32, exc=ValueError, must=("accumulator='f16'", "allowed: ('f32',)"))
case("matmul-3d-operand", _matmul(), np.ones((2, 32, 32), np.float32), M32, exc=ValueError,
     must=("a must be a 2-D float matrix", "[2, 32, 32]"))
case("matmul-int-operand", _matmul(), M32, np.ones((32, 32), np.int32), exc=ValueError,
     must=("b must be a 2-D float matrix", "int32"))
case("matmul-inner-mismatch", _matmul(), M32, np.ones((16, 32), np.float32), exc=ValueError,
     must=("inner dimensions differ", "32x32", "16x32"))


# --------------------------------------------------------------------------------------
# The test.


def _params():
    for c in CASES:
        for mode in c.modes:
            marks = [pytest.mark.xfail(strict=True, reason=c.xfail)] if c.xfail else []
            yield pytest.param(c, mode, id=f"{c.id}[{mode}]", marks=marks)


@pytest.mark.parametrize("c, mode", list(_params()))
def test_bad_input(c: Case, mode: str):
    fn = jax.jit(c.fn) if mode.startswith("jit") else c.fn
    with jax.enable_x64(mode.endswith("x64")):
        with pytest.raises(c.exc) as info:
            jax.block_until_ready(fn(*c.args))
    msg = str(info.value)
    missing = [s for s in c.must if s not in msg]
    assert not missing, f"message lacks {missing}:\n{msg}"


def test_catalogue_size():
    assert len(CASES) >= 40
    assert len({c.id for c in CASES}) == len(CASES)


# --------------------------------------------------------------------------------------
# Corrupt or foreign capture files given to ``python -m jaxwarp.conformance``.


def _npz(**arrays) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def _zip(**members: bytes) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    return buf.getvalue()


def _npy(x) -> bytes:
    buf = io.BytesIO()
    np.save(buf, x)
    return buf.getvalue()


def _mma_cfg(name, A, B, C, D=None):
    keys = {f"{name}/A": A, f"{name}/B": B, f"{name}/C": C}
    if D is not None:
        keys[f"{name}/D"] = D
    return _npz(**keys)


def _corrupt_compressed() -> bytes:
    # A real capture (compressed npz) whose deflate stream is damaged mid-file: the
    # zip directory is intact, one member's data is not.
    raw = bytearray((DATA / "h100_mma_int.npz").read_bytes())
    mid = len(raw) // 2
    raw[mid:mid + 64] = b"\xff" * 64
    return bytes(raw)


_S8 = "s8.s32s32.m16n16k16.rc"
_I8 = np.zeros((2, 16, 16), np.int8)
_I32 = np.zeros((2, 16, 16), np.int32)


@dataclasses.dataclass(frozen=True)
class FileCase:
    """A capture file and what the conformance command must do with it."""

    id: str
    content: bytes | None  # None: the file does not exist
    status: int
    must: tuple[str, ...]  # substrings of the error line (status 2) or of stdout (1)
    xfail: str | None = None
    must_not: tuple[str, ...] = ()


FILE_CASES = [
    FileCase("missing-file", None, 2, ("no such capture file",)),
    FileCase("empty-file", b"", 2, ("not a readable .npz",)),
    FileCase("not-a-zip", b"hello, this is not a capture\n" * 20, 2, ("not a readable .npz",)),
    FileCase(
        "not-a-zip-text-file", b"hello, this is not a capture\n" * 20, 2,
        ("not a readable .npz",), must_not=("pickle",)),
    FileCase("truncated", (DATA / "h100_mma_int.npz").read_bytes()[:100_000], 2,
             ("not a readable .npz", "not a zip archive")),
    FileCase("wrong-shapes", _npz(shfl_cfg=np.zeros((3, 2), np.int32),
                                  shfl_x=np.zeros((3, 32), np.uint32),
                                  shfl_out=np.zeros((3, 32), np.uint32)), 2,
             ("shfl_cfg", "do not follow the capture schema")),
    FileCase("mma-wrong-shapes", _mma_cfg(_S8, np.zeros((2, 16, 8), np.int8), _I8, _I32, _I32),
             2, (_S8, "do not fit (16, 16, 16)")),
    FileCase("mma-missing-D", _mma_cfg(_S8, _I8, _I8, _I32), 2,
             (f"{_S8}/D", "do not follow the capture schema")),
    FileCase("mma-bad-config-name", _npz(**{"zz/A": np.zeros(3)}), 2,
             ("'zz' is not a WMMA configuration name", "f16.f32f32.m16n16k16.rc")),
    FileCase(
        "mma-unknown-type", _mma_cfg("x9.s32s32.m16n16k16.rc", _I8, _I8, _I32, _I32), 2,
        ("x9", "f16")),
    FileCase("bad-reduce-op", _npz(reduce_cfg=np.array([[42, -1]], np.int32),
                                   reduce_x=np.zeros((1, 32), np.uint32),
                                   reduce_out=np.zeros((1, 32), np.uint32)), 2,
             ("op code 42", "0..8")),
    FileCase("unknown-keys-only", _npz(device=np.array("X"), foo=np.zeros(3),
                                       bar_baz=np.ones((2, 2))), 2,
             ("unhandled/foo", "unhandled/bar_baz", "nothing was compared",
              "NOT CHECKED")),
    FileCase(
        "object-array-member", _npz(device=np.array("X"), obj=np.array([{"a": 1}], object)), 2,
        ("obj",)),
    FileCase(
        "truncated-member", _zip(**{"reduce_x.npy": _npy(np.zeros((4, 32), np.uint32))[:-40]}),
        2, ("reduce_x",)),
    FileCase(
        "corrupt-compressed-member", _corrupt_compressed(), 2, ("not a readable",)),
]


@pytest.fixture(scope="module")
def conformance_runs(tmp_path_factory):
    """Runs the conformance command on every file case, two at a time."""
    tmp = tmp_path_factory.mktemp("captures")

    def run(fc: FileCase):
        path = tmp / f"{fc.id}.npz"
        if fc.content is not None:
            path.write_bytes(fc.content)
        proc = subprocess.run([sys.executable, "-m", "jaxwarp.conformance", str(path)],
                              capture_output=True, text=True, cwd=ROOT, timeout=300)
        return fc.id, proc

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(run, FILE_CASES))


@pytest.mark.parametrize(
    "fc", [pytest.param(fc, id=fc.id, marks=[pytest.mark.xfail(strict=True, reason=fc.xfail)]
                        if fc.xfail else []) for fc in FILE_CASES])
def test_conformance_bad_file(fc: FileCase, conformance_runs):
    proc = conformance_runs[fc.id]
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == fc.status, (proc.returncode, proc.stdout, proc.stderr)
    if fc.status == 2:
        # One "error: " line per thing that could not be checked, no traceback.
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        assert lines and all(ln.startswith("error: ") for ln in lines), proc.stderr
        text = "\n".join(lines) + "\n" + proc.stdout
    else:
        text = proc.stdout
    missing = [s for s in fc.must if s not in text]
    assert not missing, f"lacks {missing}: {text}"
    present = [s for s in fc.must_not if s in text]
    assert not present, f"should not say {present}: {text}"
