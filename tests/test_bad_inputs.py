"""No silent wrong answers: one catalogue of bad inputs to the warp, number
format, DPX, WMMA, mma and matmul layers, and of bad capture files.

``CATALOGUE`` is one table of (class, id, callable, args, exception type, what the
message must say, modes). Every bad call must raise the given exception type with a
message that names the argument (and, where there is a rule, says what is allowed).
What the message must say is given as ``regex`` (``re.search``, dot matches newline),
as ``must`` (substrings that must all occur), or both.

Modes:

* ``eager``: ``fn(*args)``;
* ``jit``: ``jax.jit(fn)(*args)``, every argument traced. Every case whose arguments
  can be traced runs eagerly and under jit; cases whose bad value is only caught when
  concrete (a traced value is reported by ``jaxwarp.checked`` instead) or whose
  argument is not an array run eagerly only. A case that runs only under ``jit``
  passes a static argument as an array: only tracing makes it bad;
* ``jit_const``: ``jax.jit(lambda: fn(*args))()``, the arguments closed over. Used
  for 64-bit inputs: with x64 off JAX itself narrows a 64-bit *argument* of a jitted
  function before jaxwarp sees it, so only constants can be caught there.

Every case runs with ``jax_enable_x64`` off (the default) unless its mode ends in
``_x64``. Classes (the issue's): 1 64-bit inputs with x64 off, 2 masks outside 32
bits, 3 values that do not fit their destination, 4 overflow of addresses and sizes,
5 checked mode, 6 errors that name the argument and say what is allowed (most of the
0.1.0 catalogue, by API area), 7 bool/empty arrays and lane axes in the wrong place.
Cases that currently fail may be marked ``xfail`` (strict) with the reason: they are
library bugs, reported rather than fixed here.

Tests after the table check the positive side of each policy (64-bit values handled
exactly with x64 on, int32 masks read as bits, checked mode under jit caches, traced
out-of-range values reported by ``jaxwarp.checked``). The capture-file cases run the
conformance command (its ``main``, in this process) and expect one ``error:`` line on
stderr with exit status 2, never a traceback.

The default run takes every case eagerly and a spread of the cases under jit
(``TRACED_EVERY``); ``-m slow`` runs the rest under jit.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import io
import pathlib
import re
import subprocess
import traceback
import zipfile
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxwarp
from jaxwarp import conformance, dpx, fragment
from jaxwarp._src.gemm.native import device_error as native_device_error

ROOT = pathlib.Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
FULL = 0xFFFFFFFF
EAGER = ("eager",)
JIT = ("jit",)  # a static argument passed as an array: only tracing makes it bad
BOTH = ("eager", "jit")
CONST = ("eager", "jit_const")


@dataclasses.dataclass(frozen=True)
class Case:
    """One bad call: ``fn(*args)`` must raise ``exc`` with a message that matches
    ``regex`` (if given) and contains every string of ``must``."""

    id: str
    cls: int  # the issue's class (1..7)
    fn: Callable[..., Any]
    args: tuple
    exc: type[BaseException] | tuple[type[BaseException], ...]
    regex: str | None
    must: tuple[str, ...]
    modes: tuple[str, ...]
    xfail: str | None = None


CATALOGUE: list[Case] = []


def case(cls, id, fn, *args, exc, regex=None, must=(), modes=BOTH, xfail=None):
    assert regex or must, f"{id}: say what the message must contain"
    CATALOGUE.append(Case(id, cls, fn, args, exc, regex, tuple(must), modes, xfail))


u32 = np.arange(32, dtype=np.uint32)
i32 = np.arange(32, dtype=np.int32)
f64 = np.linspace(0.1, 3.3, 32)  # float64
i64 = np.arange(32, dtype=np.int64) + 2**32  # high bits set: narrowing would lose them
u64 = np.arange(32, dtype=np.uint64) + np.uint64(2**40)
zu32 = np.zeros(32, np.uint32)
zi32 = np.zeros(32, np.int32)
zf32 = np.zeros(32, np.float32)
H16 = np.zeros((16, 16), np.float16)
X64 = r"64-bit dtype .*enable x64 \(jax\.config\.update\('jax_enable_x64', True\)\) or cast"

FA = fragment("matrix_a", 16, 16, 16, "f16", "row_major")
FC = fragment("accumulator", 16, 16, 16, "f32")
FS32 = fragment("accumulator", 16, 16, 16, "s32")
FU8 = fragment("matrix_a", 16, 16, 16, "u8", "row_major")
FS4 = fragment("matrix_a", 8, 8, 32, "s4", "row_major")
FU4 = fragment("matrix_a", 8, 8, 32, "u4", "row_major")
FB1 = fragment("matrix_a", 8, 8, 128, "b1", "row_major")


def _load(frag, ldm, layout=None, offset=0):
    return lambda mem: jaxwarp.load_matrix_sync(frag, mem, ldm, layout, offset=offset)


def _store(frag, ldm, layout="mem_row_major", offset=0):
    return lambda mem: jaxwarp.store_matrix_sync(mem, frag, ldm, layout, offset=offset)


# --------------------------------------------------------------------------------------
# Class 1: 64-bit inputs with x64 off are rejected, naming the argument.

case(1, "shfl-var-float64", lambda v: jaxwarp.shfl_sync(FULL, v, 1), f64,
     exc=TypeError, regex="var has " + X64, modes=CONST)
case(1, "shfl_up-var-int64", lambda v: jaxwarp.shfl_up_sync(FULL, v, 1), i64,
     exc=TypeError, regex="var has " + X64, modes=CONST)
case(1, "shfl_xor-var-uint64", lambda v: jaxwarp.shfl_xor_sync(FULL, v, 1), u64,
     exc=TypeError, regex="var has " + X64, modes=CONST)
case(1, "shfl-src_lane-int64", lambda b: jaxwarp.shfl_sync(FULL, u32, b), i64,
     exc=TypeError, regex="src_lane has " + X64, modes=CONST)
case(1, "shfl_down-delta-int64", lambda b: jaxwarp.shfl_down_sync(FULL, u32, b), i64,
     exc=TypeError, regex="delta has " + X64, modes=CONST)
case(1, "shfl-mask-int64-array", lambda m: jaxwarp.shfl_sync(m, u32, 0),
     np.full(32, FULL, np.int64), exc=TypeError, regex="mask has " + X64, modes=CONST)
case(1, "ballot-pred-int64", lambda p: jaxwarp.ballot_sync(FULL, p), i64,
     exc=TypeError, regex="pred has " + X64, modes=CONST)
case(1, "all-pred-float64", lambda p: jaxwarp.all_sync(FULL, p), f64,
     exc=TypeError, regex="pred has " + X64, modes=CONST)
case(1, "match_any-value-int64", lambda v: jaxwarp.match_any_sync(FULL, v), i64,
     exc=TypeError, regex="value has " + X64, modes=CONST)
case(1, "match_all-value-float64", lambda v: jaxwarp.match_all_sync(FULL, v), f64,
     exc=TypeError, regex="value has " + X64, modes=CONST)
case(1, "reduce-value-int64", lambda v: jaxwarp.reduce_add_sync(FULL, v), i64,
     exc=TypeError, regex="value has " + X64, modes=CONST)
case(1, "dpx-a-int64", lambda a: dpx.vimax3_s32(a, 0, 0), i64,
     exc=TypeError, regex="a has " + X64, modes=CONST)
case(1, "dpx-c-uint64", lambda c: dpx.viaddmax_u32(0, 0, c), u64,
     exc=TypeError, regex="c has " + X64, modes=CONST)
case(1, "float2half_rn-float64", jaxwarp.float2half_rn, f64,
     exc=TypeError, regex="x has " + X64, modes=CONST)
case(1, "float2bfloat16_rz-float64", jaxwarp.float2bfloat16_rz, f64,
     exc=TypeError, regex="x has " + X64, modes=CONST)
case(1, "float_to_tf32-float64", jaxwarp.float_to_tf32, f64,
     exc=TypeError, regex="x has " + X64, modes=CONST)
case(1, "round_to-float64", lambda x: jaxwarp.round_to(x, "f16"), f64,
     exc=TypeError, regex="x has " + X64, modes=CONST)
case(1, "to_bits-float64", jaxwarp.to_bits, f64, exc=TypeError, regex="x has " + X64, modes=CONST)
case(1, "from_bits-uint64", lambda u: jaxwarp.from_bits(u, "f32"), u64,
     exc=TypeError, regex="u has " + X64, modes=CONST)
case(1, "fill-float64-scalar", lambda v: jaxwarp.fill_fragment(FA, v), np.float64(0.1),
     exc=TypeError, regex="v has " + X64, modes=CONST)
case(1, "fill-int64-0d", lambda v: jaxwarp.fill_fragment(FS32, v), np.array(2**33 + 1),
     exc=TypeError, regex="v has " + X64, modes=CONST)
case(1, "fragment_from_matrix-float64", lambda x: jaxwarp.fragment_from_matrix(FC, x),
     np.zeros((16, 16)), exc=TypeError, regex="matrix has " + X64, modes=CONST)
case(1, "load-memory-float64", _load(FC, 16, "mem_row_major"), np.zeros(256),
     exc=TypeError, regex="memory has " + X64, modes=CONST)
case(1, "store-memory-float64", _store(FC, 16), np.zeros(256),
     exc=TypeError, regex="memory has " + X64, modes=CONST)
case(1, "float2half_rn-float64-x64", jaxwarp.float2half_rn, f64,
     exc=TypeError, regex=r"x must be a float32 array, got dtype float64 .*round_to",
     modes=("eager_x64", "jit_x64"))
case(1, "mma-f64-without-x64",
     lambda a: jaxwarp.mma(a, a, a, a_format="f64", c_format="f64", d_format="f64"),
     np.zeros((8, 8), np.float32), exc=RuntimeError, must=("f64", "jax_enable_x64"))

# --------------------------------------------------------------------------------------
# Class 2: masks outside [0, 2**32), on every path (the full-mask fast paths too).

for _fn_id, _fn in (
        ("shfl", lambda m: jaxwarp.shfl_sync(m, u32, 0)),
        ("reduce", lambda m: jaxwarp.reduce_add_sync(m, u32)),
        ("ballot", lambda m: jaxwarp.ballot_sync(m, u32 % 2 == 0)),
        ("elect", jaxwarp.elect_sync), ("syncwarp", jaxwarp.syncwarp)):
    case(2, f"{_fn_id}-mask-2**33-1", lambda f=_fn: f(2**33 - 1), exc=ValueError,
         regex=r"mask=0x1ffffffff does not fit in 32 bits.*0 \.\. 0xFFFFFFFF", modes=BOTH)
    case(2, f"{_fn_id}-mask-uint64-max", lambda f=_fn: f(np.uint64(2**64 - 1)),
         exc=ValueError, regex=r"mask=0xffffffffffffffff does not fit in 32 bits", modes=BOTH)
    case(2, f"{_fn_id}-mask-below-int32", lambda f=_fn: f(-(2**31) - 1), exc=ValueError,
         regex=r"mask=-0x80000001 does not fit in 32 bits.*two's complement", modes=BOTH)
case(2, "shfl-mask-2**32", lambda: jaxwarp.shfl_xor_sync(2**32, u32, 1), exc=ValueError,
     regex=r"mask=0x100000000 does not fit in 32 bits")
case(2, "shfl-mask-int64-negative", lambda: jaxwarp.shfl_down_sync(np.int64(-2**40), u32, 1),
     exc=ValueError, regex=r"mask=-0x10000000000 does not fit")
case(2, "shfl-mask-bool", lambda: jaxwarp.shfl_sync(True, u32, 0), exc=TypeError,
     regex=r"mask must be a 32-bit integer lane mask, got bool")
case(2, "match-mask-too-wide", lambda: jaxwarp.match_any_sync(2**40, u32), exc=ValueError,
     regex=r"mask=0x10000000000 does not fit in 32 bits")
case(2, "reduce-mask-uint64-array", lambda m: jaxwarp.reduce_max_sync(m, u32),
     np.full(32, 2**40, np.uint64), exc=TypeError, regex="mask has " + X64, modes=CONST)
case(2, "shfl-mask-too-wide", lambda v: jaxwarp.shfl_sync(2**32, v, 0), zu32,
     exc=ValueError, must=("mask", "0 .. 0xFFFFFFFF"))
case(2, "shfl-mask-np-int64-too-wide",
     lambda v: jaxwarp.shfl_sync(np.int64(2**40 + 1), v, 0), zu32,
     exc=ValueError, must=("mask", "0 .. 0xFFFFFFFF"))

# --------------------------------------------------------------------------------------
# Class 3: values that do not fit their destination.

case(3, "fill-complex-numpy", lambda v: jaxwarp.fill_fragment(FC, v), np.complex64(1 + 2j),
     exc=TypeError, regex=r"v must be real, got complex dtype complex64")
case(3, "fill-complex-python", lambda: jaxwarp.fill_fragment(FC, 1 + 2j), exc=TypeError,
     regex=r"v must be a real scalar, got complex", modes=EAGER)
case(3, "fill-s32-nan", lambda v: jaxwarp.fill_fragment(FS32, v), np.float32(np.nan),
     exc=ValueError, regex=r"v=nan does not fit a s32 fragment", modes=EAGER)
case(3, "fill-s32-python-nan", lambda: jaxwarp.fill_fragment(FS32, float("nan")),
     exc=ValueError, regex=r"v=nan does not fit a s32 fragment", modes=BOTH)
case(3, "fill-s32-inf", lambda: jaxwarp.fill_fragment(FS32, float("inf")), exc=ValueError,
     regex=r"v=inf does not fit a s32 fragment")
case(3, "fill-s32-float-too-big", lambda: jaxwarp.fill_fragment(FS32, 3e9), exc=ValueError,
     regex=r"v=3000000000.0 does not fit a s32 fragment.*-2147483648 \.\. 2147483647")
case(3, "fill-u8-negative-float", lambda: jaxwarp.fill_fragment(FU8, -1.5), exc=ValueError,
     regex=r"v=-1.5 does not fit a u8 fragment \(allowed: 0 \.\. 255")
case(3, "fill-s4-8", lambda v: jaxwarp.fill_fragment(FS4, v), np.int32(8), exc=ValueError,
     regex=r"v=8 does not fit a s4 fragment \(allowed: -8 \.\. 7\)", modes=EAGER)
case(3, "fill-s4-python-8", lambda: jaxwarp.fill_fragment(FS4, 8), exc=ValueError,
     regex=r"v=8 does not fit a s4 fragment")
case(3, "fill-u4-negative", lambda: jaxwarp.fill_fragment(FU4, -1), exc=ValueError,
     regex=r"v=-1 does not fit a u4 fragment \(allowed: 0 \.\. 15\)")
case(3, "fill-b1-2", lambda: jaxwarp.fill_fragment(FB1, 2), exc=ValueError,
     regex=r"v=2 does not fit a b1 fragment \(allowed: 0 \.\. 1\)")
case(3, "fragment_from_matrix-s4-9", lambda x: jaxwarp.fragment_from_matrix(FS4, x),
     np.full((8, 32), 9, np.int8), exc=ValueError,
     regex=r"matrix holds 9 at index \(0, 0\), outside the s4 range -8 \.\. 7", modes=EAGER)
case(3, "fragment_from_matrix-u4-16", lambda x: jaxwarp.fragment_from_matrix(FU4, x),
     np.full((8, 32), 16, np.uint8), exc=ValueError, regex=r"matrix holds 16 .*u4 range 0 \.\. 15",
     modes=EAGER)
case(3, "fragment_from_matrix-b1-2", lambda x: jaxwarp.fragment_from_matrix(FB1, x),
     np.full((8, 128), 2, np.uint8), exc=ValueError, regex=r"matrix holds 2 .*b1 range 0 \.\. 1",
     modes=EAGER)
case(3, "matrix_to_memory-s4-9",
     lambda: jaxwarp.matrix_to_memory(np.full((8, 32), 9, np.int8), "s4", "row_major"),
     exc=ValueError, regex=r"matrix holds 9 .*s4 range -8 \.\. 7", modes=EAGER)
case(3, "matrix_to_memory-s8-300",
     lambda: jaxwarp.matrix_to_memory(np.full((16, 16), 300, np.int32), "s8", "row_major"),
     exc=ValueError, regex=r"matrix holds values outside s8's range -128 \.\. 127", modes=EAGER)
case(3, "matrix_to_memory-float-for-s8",
     lambda: jaxwarp.matrix_to_memory(np.full((16, 16), 1.5, np.float32), "s8", "row_major"),
     exc=TypeError, regex=r"matrix of dtype float32 does not convert to s8's int8", modes=EAGER)
case(3, "replace-type-without-x", lambda: FC.replace(type="s32"), exc=ValueError,
     regex=r"changing type needs a new x", modes=EAGER)
case(3, "replace-use-without-x",
     lambda: FA.replace(use="matrix_b", layout="col_major"), exc=ValueError,
     regex=r"changing layout, use needs a new x", modes=EAGER)
case(3, "replace-type-wrong-x", lambda: FC.replace(type="s32", x=FC.x), exc=TypeError,
     regex=r"x of a s32 fragment must have dtype int32, got float32", modes=EAGER)
case(3, "replace-unknown-field", lambda: FC.replace(dtype="f16"), exc=ValueError,
     regex=r"unknown field\(s\) \['dtype'\]", modes=EAGER)
case(3, "dpx-complex", lambda a: dpx.vimin3_u32(a, 0, 0), np.ones(3, np.complex64),
     exc=TypeError, regex=r"a must be a 32-bit integer .*complex64")
case(3, "match-complex", lambda v: jaxwarp.match_any_sync(FULL, v), np.ones(32, np.complex64),
     exc=TypeError, regex=r"value must be real, got complex dtype complex64")

# --------------------------------------------------------------------------------------
# Class 4: integer overflow of addresses and sizes (checked before anything is allocated).


def _shape_only(fn, shape, dtype):
    """Runs ``fn`` on an abstract array: the trace-time checks, no memory allocated."""
    return lambda: jax.eval_shape(fn, jax.ShapeDtypeStruct(shape, dtype))


FS8 = fragment("matrix_a", 16, 16, 16, "s8", "row_major")
FS32C = fragment("accumulator", 16, 16, 16, "s32")
case(4, "load-offset-2**31", _shape_only(_load(FS8, 16, offset=2**31), (2**31 + 512,), np.int8),
     exc=ValueError, regex=r"offset=2147483648, ldm=16 reaches memory index .*2\*\*31 - 1",
     modes=EAGER)
case(4, "store-offset-2**31",
     _shape_only(_store(FS32C, 16, offset=2**31), (2**31 + 512,), np.int32),
     exc=ValueError, regex=r"store_matrix_sync with offset=2147483648.*enable x64", modes=EAGER)
case(4, "load-huge-ldm", _shape_only(_load(FS8, 2**40), (512,), np.int8), exc=ValueError,
     regex=r"memory holds 512 elements .*ldm=1099511627776", modes=EAGER)
case(4, "matrix_to_memory-huge-pad",
     lambda: jaxwarp.matrix_to_memory(np.zeros((16, 16), np.float16), "f16", "row_major",
                                      pad=2**40),
     exc=ValueError, regex=r"pad=1099511627776 make a buffer of .* at most", modes=EAGER)
case(4, "matrix_to_memory-huge-offset",
     lambda: jaxwarp.matrix_to_memory(np.zeros((16, 16), np.float16), "f16", "row_major",
                                      offset=2**40),
     exc=ValueError, regex=r"offset=1099511627776, pad=0 make a buffer", modes=EAGER)
case(4, "dpx-python-int-2**32", lambda: dpx.vimax3_u32(2**32, 0, 0), exc=ValueError,
     regex=r"a=4294967296 does not fit in 32 bits")
case(4, "dpx-numpy-int64-scalar-2**40", lambda: dpx.vimax3_u32(0, np.int64(2**40), 0),
     exc=ValueError, regex=r"b=1099511627776 does not fit in 32 bits")
case(4, "shfl-src_lane-2**40", lambda: jaxwarp.shfl_sync(FULL, u32, 2**40), exc=ValueError,
     regex=r"src_lane=1099511627776 does not fit in 32 bits")
case(4, "shfl-delta-numpy-2**40", lambda: jaxwarp.shfl_up_sync(FULL, u32, np.int64(2**40)),
     exc=ValueError, regex=r"delta=1099511627776 does not fit in 32 bits")
case(4, "shfl-width-2**40", lambda: jaxwarp.shfl_sync(FULL, u32, 0, 2**40), exc=ValueError,
     regex=r"width=1099511627776 does not fit in CUDA's int")
case(4, "nanosleep-int64-0d-2**32+5", lambda: jaxwarp.nanosleep(np.array(2**32 + 5)),
     exc=ValueError, regex=r"ns=4294967301 is outside", modes=EAGER)

# --------------------------------------------------------------------------------------
# Class 5: checked mode (the jit-cache cases are tests below).

case(5, "checked-not-callable", lambda: jaxwarp.checked(3), exc=TypeError,
     regex=r"fn must be callable, got int", modes=EAGER)

# --------------------------------------------------------------------------------------
# Class 6: errors that name the argument and say what is allowed.

for _bad_id, _bad in (("None", None), ("str", "all"), ("float", 1.0)):
    case(6, f"shfl-mask-{_bad_id}", lambda b=_bad: jaxwarp.shfl_sync(b, u32, 0), exc=TypeError,
         regex=r"mask must be a 32-bit integer lane mask .*Python int", modes=EAGER)
    case(6, f"shfl-src_lane-{_bad_id}", lambda b=_bad: jaxwarp.shfl_sync(FULL, u32, b),
         exc=TypeError, regex=r"src_lane must be (an integer|a numeric array)", modes=EAGER)
    case(6, f"ballot-pred-{_bad_id}", lambda b=_bad: jaxwarp.ballot_sync(FULL, b),
         exc=(TypeError, ValueError), regex=r"pred must", modes=EAGER)
    case(6, f"dpx-b-{_bad_id}", lambda b=_bad: dpx.vibmax_s32(1, b), exc=TypeError,
         regex=r"b must be a 32-bit integer", modes=EAGER)
    case(6, f"nanosleep-{_bad_id}", lambda b=_bad: jaxwarp.nanosleep(b), exc=TypeError,
         regex=r"ns must be", modes=EAGER)
    case(6, f"fill-v-{_bad_id}" if _bad_id != "float" else "fill-v-list",
         lambda b=_bad if _bad_id != "float" else [1.0]: jaxwarp.fill_fragment(FC, b),
         exc=(TypeError, ValueError), regex=r"v must be a scalar", modes=EAGER)
case(6, "shfl-var-None", lambda: jaxwarp.shfl_sync(FULL, None, 0), exc=TypeError,
     regex=r"var must be a numeric array, got NoneType", modes=EAGER)
case(6, "shfl-var-strings", lambda: jaxwarp.shfl_sync(FULL, ["a"] * 32, 0), exc=TypeError,
     regex=r"var must be a numeric array, got a list of <U1", modes=EAGER)
case(6, "shfl-var-ragged", lambda: jaxwarp.shfl_sync(FULL, [[1], [1, 2]] * 16, 0),
     exc=TypeError, regex=r"var must be a numeric array; the list given does not convert",
     modes=EAGER)
case(6, "shfl-mask-list-of-3", lambda: jaxwarp.shfl_sync([1, 2, 3], u32, 0), exc=ValueError,
     regex=r"mask must be a scalar or one mask per lane with shape \(32,\), got shape \(3,\)",
     modes=EAGER)
case(6, "shfl-mask-lane-axis-last", lambda m: jaxwarp.shfl_sync(m, u32, 0),
     np.full((1, 32), FULL, np.uint32), exc=ValueError,
     regex=r"mask must be a scalar or one mask per lane .*\(1, 32\)")
case(6, "shfl-src_lane-list-of-3", lambda: jaxwarp.shfl_sync(FULL, u32, [1, 2, 3]),
     exc=ValueError, regex=r"src_lane must be a scalar or one value per lane .*\(3,\)",
     modes=EAGER)
case(6, "shfl_xor-lane_mask-python-float", lambda: jaxwarp.shfl_xor_sync(FULL, u32, 1.0),
     exc=TypeError, regex=r"lane_mask must be an integer or a \(32,\) integer array, got float",
     modes=EAGER)
case(6, "reduce-value-None", lambda: jaxwarp.reduce_add_sync(FULL, None), exc=TypeError,
     regex=r"value must be a numeric array, got NoneType", modes=EAGER)
case(6, "dpx-shapes-do-not-broadcast", lambda a, b: dpx.vimax3_s32(a, b, 0),
     np.zeros(3, np.int32), np.zeros(4, np.int32), exc=ValueError,
     regex=r"vimax3_s32: operand shapes do not broadcast: a \(3,\), b \(4,\)")
case(6, "dpx-missing-argument", lambda: dpx.vimax3_s32(1, 2), exc=TypeError,
     regex=r"vimax3_s32\(a, b, c\): missing a required argument: 'c'", modes=EAGER)
case(6, "float2half_rn-None", lambda: jaxwarp.float2half_rn(None), exc=TypeError,
     regex=r"x must be a numeric array, got NoneType", modes=EAGER)
case(6, "to_bits-str", lambda: jaxwarp.to_bits("abc"), exc=TypeError,
     regex=r"x must be a numeric array, got str", modes=EAGER)
case(6, "from_bits-None", lambda: jaxwarp.from_bits(None, "f16"), exc=TypeError,
     regex=r"u must be a numeric array, got NoneType", modes=EAGER)
case(6, "round_to-list-of-str", lambda: jaxwarp.round_to(["x"], "f16"), exc=TypeError,
     regex=r"x must be a numeric array, got a list", modes=EAGER)
case(6, "fill-frag-None", lambda: jaxwarp.fill_fragment(None, 1.0), exc=TypeError,
     regex=r"frag must be a Fragment \(see jaxwarp.fragment\), got NoneType", modes=EAGER)
case(6, "fill-frag-str", lambda: jaxwarp.fill_fragment("matrix_a", 1.0), exc=TypeError,
     regex=r"frag must be a Fragment .*got str", modes=EAGER)
case(6, "load-frag-str", lambda m: jaxwarp.load_matrix_sync("accumulator", m, 16),
     np.zeros(256, np.float32), exc=TypeError, regex=r"frag must be a Fragment .*got str")
case(6, "load-memory-None", lambda: jaxwarp.load_matrix_sync(FA, None, 16), exc=TypeError,
     regex=r"memory must be a numeric array, got NoneType", modes=EAGER)
case(6, "store-memory-list-of-str", lambda: jaxwarp.store_matrix_sync(["a"], FC, 16,
                                                                      "mem_row_major"),
     exc=TypeError, regex=r"memory must be a numeric array", modes=EAGER)
case(6, "fragment_from_matrix-spec-None", lambda: jaxwarp.fragment_from_matrix(None, H16),
     exc=TypeError, regex=r"frag_spec must be a Fragment", modes=EAGER)
case(6, "fragment_from_matrix-matrix-None", lambda: jaxwarp.fragment_from_matrix(FA, None),
     exc=TypeError, regex=r"matrix must be a numeric array, got NoneType", modes=EAGER)
case(6, "fragment_from_matrix-1d", lambda x: jaxwarp.fragment_from_matrix(FA, x),
     np.zeros(256, np.float16), exc=ValueError,
     regex=r"matrix for a matrix_a m16n16k16 fragment must have shape \(\.\.\., 16, 16\), "
           r"got \(256,\)")
case(6, "matrix_from_fragment-array", lambda x: jaxwarp.matrix_from_fragment(x), H16,
     exc=TypeError, regex=r"frag must be a Fragment .*got ndarray", modes=EAGER)
case(6, "fragment-m-str", lambda: fragment("matrix_a", "16", 16, 16, "f16", "row_major"),
     exc=TypeError, regex=r"m must be a Python int, got str", modes=EAGER)
case(6, "matrix_to_memory-1d",
     lambda: jaxwarp.matrix_to_memory(np.zeros(256, np.float16), "f16", "row_major"),
     exc=ValueError, regex=r"matrix must be a non-empty 2-D \(rows, cols\) array, got shape "
                           r"\(256,\)", modes=EAGER)
case(6, "matrix_to_memory-k0",
     lambda: jaxwarp.matrix_to_memory(np.zeros((16, 0), np.float16), "f16", "row_major"),
     exc=ValueError, regex=r"matrix must be a non-empty 2-D .*\(16, 0\)", modes=EAGER)
case(6, "matrix_to_memory-negative-offset",
     lambda: jaxwarp.matrix_to_memory(H16, "f16", "row_major", offset=-16), exc=ValueError,
     regex=r"offset=-16 must be a non-negative number of elements", modes=EAGER)
case(6, "matrix_to_memory-negative-pad",
     lambda: jaxwarp.matrix_to_memory(H16, "f16", "row_major", pad=-8), exc=ValueError,
     regex=r"pad=-8 must be a non-negative", modes=EAGER)
case(6, "matrix_to_memory-float-offset",
     lambda: jaxwarp.matrix_to_memory(H16, "f16", "row_major", offset=1.5), exc=TypeError,
     regex=r"offset must be a Python int, got float", modes=EAGER)
case(6, "matrix_to_memory-None",
     lambda: jaxwarp.matrix_to_memory(None, "f16", "row_major"), exc=TypeError,
     regex=r"matrix must be a 2-D numeric array \(rows, cols\), got NoneType", modes=EAGER)
case(6, "sharded_vmap-unknown-keyword",
     lambda: jaxwarp.sharded_vmap(lambda x: x)(np.zeros((2, 3)), y=np.zeros((2, 3))),
     exc=TypeError, regex=r"sharded_vmap: cannot bind keyword arguments \['y'\]", modes=EAGER)
case(6, "sharded_vmap-keyword-only",
     lambda: jaxwarp.sharded_vmap(lambda x, *, s: x * s)(np.ones((2, 3)), s=2.0),
     exc=TypeError, regex=r"keyword-only arguments \['s'\] are not supported.*functools.partial",
     modes=EAGER)
case(6, "sharded_vmap-fn-not-callable", lambda: jaxwarp.sharded_vmap(None), exc=TypeError,
     regex=r"fn must be callable, got NoneType", modes=EAGER)
case(6, "sharded_vmap-in_axes-True",
     lambda: jaxwarp.sharded_vmap(lambda x: x, in_axes=True)(np.ones((2, 3))), exc=ValueError,
     regex=r"in_axes entries must be 0 or None, got True", modes=EAGER)

# --------------------------------------------------------------------------------------
# Class 6, continued (the 0.1.0 catalogue, by API area): lanes and shuffles.

case(6, "shfl-width-traced", lambda v, w: jaxwarp.shfl_sync(FULL, v, 0, w), zu32, 8,
     exc=jax.errors.ConcretizationTypeError, must=("width", "static", "static_argnums"),
     modes=JIT)
case(6, "shfl-width-float", lambda v: jaxwarp.shfl_sync(FULL, v, 0, 8.0), zu32,
     exc=TypeError, must=("width must be a Python int", "float"))
case(6, "shfl-width-bool", lambda v: jaxwarp.shfl_xor_sync(FULL, v, 1, True), zu32,
     exc=TypeError, must=("width must be a Python int", "bool"))
case(6, "shfl-mask-float32-scalar", lambda m, v: jaxwarp.shfl_sync(m, v, 0), np.float32(1), zu32,
     exc=TypeError, must=("mask must be a 32-bit integer lane mask", "uint32 or int32",
                                 "float32"))
case(6, "shfl-src_lane-float32-array", lambda v, b: jaxwarp.shfl_sync(FULL, v, b), zu32, zf32,
     exc=TypeError, must=("src_lane must be an integer", "float32"))
case(6, "shfl_up-delta-float", lambda v, b: jaxwarp.shfl_up_sync(FULL, v, b), zu32, zf32,
     exc=TypeError, must=("delta must be an integer", "float32"))
case(6, "shfl_xor-lane_mask-float", lambda v, b: jaxwarp.shfl_xor_sync(FULL, v, b), zu32, zf32,
     exc=TypeError, must=("lane_mask must be an integer", "float32"))
case(6, "nanosleep-negative", lambda: jaxwarp.nanosleep(-1), exc=ValueError,
     must=("ns=-1", "0 .. 1000000"), modes=EAGER)
case(6, "nanosleep-above-cap", lambda: jaxwarp.nanosleep(1_000_001), exc=ValueError,
     must=("ns=1000001", "0 .. 1000000"), modes=EAGER)
case(6, "nanosleep-float32-scalar", lambda ns: jaxwarp.nanosleep(ns), np.float32(1.5),
     exc=TypeError, must=("ns must be an integer", "float32"))
case(6, "nanosleep-concrete-array-above-cap", lambda: jaxwarp.nanosleep(np.array(2_000_000)),
     exc=ValueError, must=("ns=2000000", "0 .. 1000000"), modes=EAGER)
case(6, "nanosleep-bool", lambda: jaxwarp.nanosleep(True), exc=TypeError,
     must=("ns must be an unsigned integer", "bool"), modes=EAGER)

# --------------------------------------------------------------------------------------
# Class 6, continued: warp_kernel (a warp program over many warps).


def _warp_sum(v):
    return v + jaxwarp.shfl_xor_sync(FULL, v, 1)


case(6, "warp_kernel-arg-not-warps-by-32", lambda x: jaxwarp.warp_kernel(_warp_sum)(x),
     np.zeros((4, 16), np.float32), exc=ValueError,
     regex=r"argument 0 has shape \(4, 16\); allowed: \(warps, 32\)")
case(6, "warp_kernel-arg-one-warp", lambda x: jaxwarp.warp_kernel(_warp_sum)(x), zf32,
     exc=ValueError, regex=r"argument 0 has shape \(32,\); allowed: \(warps, 32\)")
case(6, "warp_kernel-warps_per_block-3", lambda: jaxwarp.warp_kernel(
    _warp_sum, warps_per_block=3), exc=ValueError, must=("warps_per_block=3", "power of two"))
case(6, "warp_kernel-num_warps-6", lambda: jaxwarp.warp_kernel(_warp_sum, num_warps=6),
     exc=ValueError, must=("num_warps=6", "power of two"))
case(6, "warp_kernel-force-unknown", lambda: jaxwarp.warp_kernel(_warp_sum, force="cuda"),
     exc=ValueError, must=("force='cuda'", "'pallas', 'vmap'"))
case(6, "warp_kernel-warps-differ", lambda x, y: jaxwarp.warp_kernel(
    lambda v, w: v + w)(x, y), np.zeros((2, 32), np.float32), np.zeros((3, 32), np.float32),
     exc=ValueError, must=("[2, 3] warps", "the same number of warps"))
case(6, "warp_kernel-no-arguments", lambda: jaxwarp.warp_kernel(lambda: 0)(),
     exc=ValueError, must=("no arguments", "(warps, 32) arrays"))
case(6, "warp_kernel-fn-not-callable", lambda: jaxwarp.warp_kernel(7), exc=TypeError,
     must=("fn=7 is not callable",))
case(1, "warp_kernel-arg-int64", lambda x: jaxwarp.warp_kernel(_warp_sum)(x),
     np.zeros((2, 32), np.int64), exc=TypeError, regex="argument 0 has " + X64, modes=CONST)
case(6, "warp_kernel-force-pallas-float-mul", lambda x: jaxwarp.warp_kernel(
    lambda v: v * 2.0, force="pallas", interpret=True)(x), np.zeros((2, 32), np.float32),
     exc=NotImplementedError, must=("warp_kernel", "mul on float32"))


# Class 6, continued: reductions and votes.

case(6, "reduce_add-float", lambda v: jaxwarp.reduce_add_sync(FULL, v), zf32, exc=TypeError,
     must=("value has dtype float32", "allowed: ('int32', 'uint32')"))
case(6, "reduce_min-int16", lambda v: jaxwarp.reduce_min_sync(FULL, v), np.zeros(32, np.int16),
     exc=TypeError, must=("value has dtype int16", "allowed: ('int32', 'uint32')"))
for _op in ("and", "or", "xor"):
    case(6, f"reduce_{_op}-signed",
         lambda v, op=_op: getattr(jaxwarp, f"reduce_{op}_sync")(FULL, v), zi32,
         exc=TypeError, must=("value has dtype int32", "allowed: ('uint32',)", "unsigned only"))
case(6, "reduce-unknown-op", lambda v: jaxwarp.reduce_sync("mul", FULL, v), zu32, exc=ValueError,
     must=("op='mul'", "allowed", "'add'", "'xor'"))
case(6, "ballot-pred-float32-array", lambda p: jaxwarp.ballot_sync(FULL, p), zf32, exc=TypeError,
     must=("pred must be bool or an integer", "float32"))
case(6, "match_any-int16", lambda v: jaxwarp.match_any_sync(FULL, v), np.zeros(32, np.int16),
     exc=TypeError, must=("value must be a 32- or 64-bit int or float", "int16"))
case(6, "redux-f32-int-value", lambda v: jaxwarp.redux_sync("min.NaN.f32", FULL, v), zu32,
     exc=TypeError, must=("value has dtype uint32", "allowed: float32"))
case(6, "redux-add-f32", lambda v: jaxwarp.redux_sync("add.f32", FULL, v), zf32,
     exc=ValueError, must=("redux.sync.add.f32 is not a PTX redux.sync form", "allowed",
                           "{min,max}{.abs}{.NaN}.f32"))
case(6, "redux-instr-not-str", lambda v: jaxwarp.redux_sync(3, FULL, v), zf32, exc=TypeError,
     must=("instr must be a str",), modes=EAGER)

# Class 6, continued: divergence.

case(6, "branch-pred-float", lambda p: jaxwarp.branch(p, lambda: 0, lambda: 0), zf32,
     exc=TypeError, must=("pred must be bool or an integer", "float32"))
case(6, "branch-pred-lanes-16", lambda p: jaxwarp.branch(p, lambda: 0, lambda: 0),
     np.zeros(16, bool), exc=ValueError, must=("pred", "32"))
case(6, "branch-paths-differ", lambda v: jaxwarp.branch(v > 3, lambda: v, lambda: (v, v)), zu32,
     exc=TypeError, must=("branch", "different structures"))
case(6, "branch-operand-not-per-lane",
     lambda v: jaxwarp.branch(u32 > 3, lambda x: x, lambda x: x, v), np.zeros(8, np.uint32),
     exc=ValueError, must=("operands must be per-lane", "(8,)"))
case(6, "lane_while-init-not-per-lane", lambda v: jaxwarp.lane_while(
    lambda x: x < 3, lambda x: x + 1, v), np.zeros((4, 32), np.int32), exc=ValueError,
     must=("init must be per-lane", "(4, 32)"))
case(6, "lane_while-max_trips-float", lambda v: jaxwarp.lane_while(
    lambda x: x < 3, lambda x: x + 1, v, max_trips=2.5), zi32, exc=TypeError,
     must=("max_trips",))
case(6, "lane_for-trips-float", lambda v: jaxwarp.lane_for(
    v, lambda i, x: x + 1, zi32), zf32, exc=TypeError, must=("trips must be integer", "float32"))
case(6, "lane_for-trips-lanes-16", lambda v: jaxwarp.lane_for(
    v, lambda i, x: x + 1, zi32), np.zeros(16, np.int32), exc=ValueError,
     must=("trips must be per-lane", "(16,)"))
case(6, "lane_for-unroll-0", lambda v: jaxwarp.lane_for(
    v, lambda i, x: x + 1, zi32, unroll=0), zi32, exc=ValueError, must=("unroll=0", "allowed"))
case(6, "lane_for-unroll-float", lambda v: jaxwarp.lane_for(
    v, lambda i, x: x + 1, zi32, unroll=4.0), zi32, exc=TypeError, must=("unroll",))
case(6, "lane_for-remainder-unknown", lambda v: jaxwarp.lane_for(
    v, lambda i, x: x + 1, zi32, unroll=4, remainder="epilogue"), zi32, exc=ValueError,
     must=("remainder='epilogue'", "after", "before"))
case(6, "lane_for-body-not-callable", lambda v: jaxwarp.lane_for(v, 3, zi32), zi32,
     exc=TypeError, must=("body_fn must be callable",))
case(6, "lane_for-body-changes-dtype", lambda v: jaxwarp.lane_for(
    v, lambda i, x: x.astype(np.float32), zi32), zi32 + 1, exc=TypeError,
     must=("lane_for body_fn",))
# --------------------------------------------------------------------------------------
# Class 6, continued: number formats and DPX.

case(6, "round_to-unknown-format", lambda x: jaxwarp.round_to(x, "fp13"), zf32, exc=ValueError,
     must=("fmt='fp13'", "allowed", "'fp16'", "'bf16'"))
case(6, "round_to-unknown-mode", lambda x: jaxwarp.round_to(x, "fp16", "up"), zf32,
     exc=ValueError, must=("mode='up'", "allowed", "'rn'", "'rz'"))
case(6, "float2half_rn-int", lambda x: jaxwarp.float2half_rn(x), zi32, exc=TypeError,
     must=("x must be a float32 array", "int32"))
case(6, "from_bits-wrong-width", lambda u: jaxwarp.from_bits(u, "fp16"), np.zeros(3, np.uint8),
     exc=TypeError, must=("u must be an integer array of 16 bits", "fmt='fp16'", "uint8"))
case(6, "to_bits-complex", lambda x: jaxwarp.to_bits(x), np.zeros(3, np.complex64), exc=TypeError,
     must=("x must", "complex64"))
case(6, "dpx-float-operand", lambda a, b, c: jaxwarp.dpx.vimax3_s32(a, b, c), zf32, zi32, zi32,
     exc=TypeError, must=("a must be a 32-bit integer", "float32"))

# User-defined formats (define_format), to_format / from_format, fused_dot and FusedDot.
P4 = jaxwarp.define_format("binary8p4", exponent_bits=4, mantissa_bits=3, specials="p3109")
U8X4 = np.zeros((2, 4), np.uint8)
U8X2 = np.zeros((4, 2), np.uint8)
F32C = np.zeros((2, 2), np.float32)
FDP = jaxwarp.FusedDot(block=2)


def _define(name="t_bad", **kw):
    return lambda: jaxwarp.define_format(name, **{"exponent_bits": 4, "mantissa_bits": 3,
                                                  **kw})


case(6, "define_format-builtin-name", _define("e4m3"), exc=ValueError,
     must=("name='e4m3'", "built-in format"))
case(6, "define_format-alias-name", _define("fp16"), exc=ValueError,
     must=("name='fp16'", "built-in format"))
case(6, "define_format-redefined", _define("binary8p4", specials="fnuz"), exc=ValueError,
     must=("name='binary8p4'", "already defined with other fields"))
case(6, "define_format-too-wide", _define(exponent_bits=8, mantissa_bits=10), exc=ValueError,
     must=("at most 16 bits", "exponent_bits 8", "mantissa_bits 10"))
case(6, "define_format-unknown-specials", _define(specials="ieee754"), exc=ValueError,
     must=("specials='ieee754'", "allowed", "'fnuz'", "'p3109'"))
case(6, "define_format-fnuz-unsigned", _define(specials="fnuz", signed=False), exc=ValueError,
     must=("specials='fnuz' needs a sign bit",))
case(6, "define_format-beyond-float32", _define(exponent_bits=9, mantissa_bits=2),
     exc=ValueError, must=("float32 value", "bias (255)"))
case(6, "define_format-bool-width", _define(mantissa_bits=True), exc=TypeError,
     must=("mantissa_bits must be a Python int", "bool"))
case(6, "define_format-ieee-no-fraction", _define(mantissa_bits=0), exc=ValueError,
     must=("specials='ieee' needs", "mantissa_bits >= 1"))
case(6, "to_format-int", lambda x: jaxwarp.to_format(x, "e4m3"), zi32, exc=TypeError,
     must=("x must be a float32 array", "int32"))
case(6, "to_format-unknown-format", lambda x: jaxwarp.to_format(x, "tf32"), zf32,
     exc=ValueError, must=("fmt='tf32'", "allowed", "'e4m3'", "'binary8p4'"))
case(6, "to_format-unknown-mode", lambda x: jaxwarp.to_format(x, P4, "up"), zf32,
     exc=ValueError, must=("mode='up'", "allowed", "'rna'"))
case(6, "from_format-wrong-dtype", lambda v: jaxwarp.from_format(v, P4),
     np.zeros(3, np.uint16), exc=TypeError,
     must=("v must be an array of binary8p4's storage dtype uint8", "uint16"))
case(6, "fused_dot-a-dtype", lambda a: jaxwarp.fused_dot(a, U8X2, F32C, a_format=P4,
                                                         datapath=FDP),
     np.zeros((2, 4), np.float32), exc=TypeError,
     must=("a must be an array of binary8p4's storage dtype uint8", "float32"))
case(6, "fused_dot-c-dtype", lambda c: jaxwarp.fused_dot(U8X4, U8X2, c, a_format=P4,
                                                         datapath=FDP),
     np.zeros((2, 2), np.float16), exc=TypeError,
     must=("c must be an array of f32's storage dtype float32", "float16"))
case(6, "fused_dot-shapes", lambda a: jaxwarp.fused_dot(a, U8X2, F32C, a_format=P4,
                                                        datapath=FDP),
     np.zeros((2, 3), np.uint8), exc=ValueError, must=("shapes do not chain", "(2, 3)"))
case(6, "fused_dot-unknown-format", lambda a: jaxwarp.fused_dot(a, U8X2, F32C, a_format="s8",
                                                                datapath=FDP),
     U8X4, exc=ValueError, must=("a_format='s8'", "allowed", "'e4m3'"))
case(6, "fused_dot-datapath", lambda a: jaxwarp.fused_dot(a, U8X2, F32C, a_format=P4,
                                                          datapath="sm_90"),
     U8X4, exc=TypeError, must=("datapath must be a jaxwarp.FusedDot", "str"))
case(6, "FusedDot-alignment_bits", lambda: jaxwarp.FusedDot(alignment_bits=40),
     exc=ValueError, must=("FusedDot.alignment_bits must be an int in [3, 28]", "40"))
case(6, "FusedDot-rounding", lambda: jaxwarp.FusedDot(rounding="rna"), exc=ValueError,
     must=("FusedDot.rounding must be one of", "'rz'", "'rna'"))
case(6, "FusedDot-accumulator-unknown", lambda: jaxwarp.FusedDot(accumulator="f64"),
     exc=ValueError, must=("FusedDot.accumulator='f64'", "allowed", "'f32'"))
case(6, "FusedDot-accumulator-without-nan", lambda: jaxwarp.FusedDot(accumulator="e2m1"),
     exc=ValueError, must=("FusedDot.accumulator='e2m1' has no NaN",))
case(6, "FusedDot-sum_mantissa_bits", lambda: jaxwarp.FusedDot(accumulator="f16",
                                                               sum_mantissa_bits=13),
     exc=ValueError, must=("FusedDot.sum_mantissa_bits", "[0, 10]", "13"))

# --------------------------------------------------------------------------------------
# Class 6, continued: wMMA fragments: declarations the table does not allow.

case(6, "fragment-operand-without-layout",
     lambda: fragment("matrix_a", 16, 16, 16, "f16"), exc=ValueError,
     must=("layout is required", "('row_major', 'col_major')"), modes=EAGER)
case(6, "fragment-accumulator-with-layout",
     lambda: fragment("accumulator", 16, 16, 16, "f32", "row_major"), exc=ValueError,
     must=("layout='row_major'", "no layout", "mem_row_major"), modes=EAGER)
case(6, "fragment-s4-a-col_major",
     lambda: fragment("matrix_a", 8, 8, 32, "s4", "col_major"), exc=ValueError,
     must=("layout='col_major'", "s4", "allowed: ('row_major',)"), modes=EAGER)
case(6, "fragment-b1-b-row_major",
     lambda: fragment("matrix_b", 8, 8, 128, "b1", "row_major"), exc=ValueError,
     must=("layout='row_major'", "b1", "allowed: ('col_major',)"), modes=EAGER)
case(6, "fragment-f16-m16n16k8",
     lambda: fragment("matrix_a", 16, 16, 8, "f16", "row_major"), exc=ValueError,
     must=("a_format='f16'", "valid for f16: m16n16k16, m32n8k16, m8n32k16", "tf32"),
     modes=EAGER)
case(6, "fragment-unknown-shape",
     lambda: fragment("matrix_a", 16, 16, 32, "f16", "row_major"), exc=ValueError,
     must=("m16n16k32", "valid shapes", "m16n16k16", "m8n8k128"), modes=EAGER)
case(6, "fragment-accumulator-bf16",
     lambda: fragment("accumulator", 16, 16, 16, "bf16"), exc=ValueError,
     must=("type='bf16'", "valid", "'f32'", "'s32'"), modes=EAGER)
case(6, "fragment-unknown-use",
     lambda: fragment("matrix_c", 16, 16, 16, "f16", "row_major"), exc=ValueError,
     must=("use='matrix_c'", "allowed", "matrix_a", "accumulator"), modes=EAGER)
case(6, "fragment-unknown-type",
     lambda: fragment("matrix_a", 16, 16, 16, "e4m3", "row_major"), exc=ValueError,
     must=("type='e4m3'", "valid WMMA A/B types", "f16", "b1"), modes=EAGER)
case(6, "fragment-m-traced",
     lambda m: fragment("matrix_a", m, 16, 16, "f16", "row_major"), 16,
     exc=jax.errors.ConcretizationTypeError, must=("m is a static argument",), modes=JIT)

FB = fragment("matrix_b", 16, 16, 16, "f16", "col_major")
FC16 = fragment("accumulator", 16, 16, 16, "f16")
F16MEM = np.zeros(512, np.float16)
F32MEM = np.zeros(512, np.float32)


# ldm must be a multiple of 16 bytes: one case per element size.
case(6, "load-ldm-16bit", _load(FA, 20), F16MEM, exc=ValueError,
     must=("ldm=20", "multiple of 8 elements", "16 bytes", "f16"))
case(6, "load-ldm-32bit", _load(FC, 18, "mem_row_major"), F32MEM, exc=ValueError,
     must=("ldm=18", "multiple of 4 elements", "f32"))
case(6, "load-ldm-tf32", _load(fragment("matrix_b", 16, 16, 8, "tf32", "row_major"), 18),
     F32MEM, exc=ValueError, must=("ldm=18", "multiple of 4 elements", "tf32"))
case(6, "load-ldm-8bit", _load(fragment("matrix_a", 16, 16, 16, "s8", "row_major"), 24),
     np.zeros(512, np.int8), exc=ValueError, must=("ldm=24", "multiple of 16 elements", "s8"))
case(6, "load-ldm-4bit", _load(fragment("matrix_a", 8, 8, 32, "u4", "row_major"), 48),
     np.zeros(256, np.uint8), exc=ValueError, must=("ldm=48", "multiple of 32 elements", "u4"))
case(6, "load-ldm-1bit", _load(fragment("matrix_b", 8, 8, 128, "b1", "col_major"), 192),
     np.zeros(256, np.uint8), exc=ValueError, must=("ldm=192", "multiple of 128 elements", "b1"))
case(6, "load-ldm-zero", _load(FA, 0), F16MEM, exc=ValueError,
     must=("ldm=0", "positive multiple of 8"))


def _load_f64_ldm9(mem):
    frag = fragment("accumulator", 8, 8, 4, "f64")
    return jaxwarp.load_matrix_sync(frag, mem.astype(jnp.float64), 9, "mem_row_major")


case(6, "load-ldm-64bit", _load_f64_ldm9, F32MEM, exc=ValueError,
     must=("ldm=9", "multiple of 2 elements", "f64"), modes=("eager_x64", "jit_x64"))

# The pointer must be 256-bit aligned.
case(6, "load-offset-16bit", _load(FA, 16, offset=8), F16MEM, exc=ValueError,
     must=("offset=8", "multiple of 16 elements", "256-bit"))
case(6, "load-offset-32bit", _load(FC, 16, "mem_col_major", offset=4), F32MEM, exc=ValueError,
     must=("offset=4", "multiple of 8 elements", "32-byte"))
case(6, "load-offset-4bit", _load(fragment("matrix_a", 8, 8, 32, "s4", "row_major"), 32,
                               offset=32), np.zeros(256, np.uint8), exc=ValueError,
     must=("offset=32", "multiple of 64 elements", "s4"))
case(6, "load-offset-negative", _load(FA, 16, offset=-16), F16MEM, exc=ValueError,
     must=("offset=-16", "non-negative multiple of 16"))
case(6, "load-ldm-below-row", _load(FA, 8), F16MEM, exc=ValueError,
     must=("ldm=8", "smaller than the row length 16"))
case(6, "load-ldm-below-column",
     _load(fragment("matrix_b", 32, 8, 16, "f16", "col_major"), 8), F16MEM, exc=ValueError,
     must=("ldm=8", "smaller than the column length 16"))
case(6, "load-memory-too-small", _load(FA, 16), np.zeros(200, np.float16), exc=ValueError,
     must=("memory holds 200 elements", "ldm=16", "reaches element 255"))
case(6, "load-memory-too-small-with-offset", _load(FA, 32, offset=32), F16MEM, exc=ValueError,
     must=("memory holds 512 elements", "offset=32", "ldm=32"))
case(6, "load-accumulator-without-layout", _load(FC, 16), F32MEM, exc=ValueError,
     must=("accumulator needs layout", "mem_row_major", "mem_col_major"))
case(6, "load-accumulator-operand-layout", _load(FC, 16, "row_major"), F32MEM, exc=ValueError,
     must=("layout='row_major'", "allowed", "mem_row_major"))
case(6, "load-operand-with-layout", _load(FA, 16, "mem_row_major"), F16MEM, exc=ValueError,
     must=("layout='mem_row_major'", "must not be given", "only for accumulators"))
case(6, "load-memory-dtype", _load(FA, 16), F32MEM, exc=TypeError,
     must=("memory for a f16 fragment must have dtype float16", "float32"))
case(6, "load-subbyte-memory-dtype", _load(fragment("matrix_a", 8, 8, 32, "s4", "row_major"), 32),
     np.zeros(256, np.int8), exc=TypeError,
     must=("memory for a s4 fragment must have dtype uint8", "packed", "int8"))
case(6, "load-memory-2d", _load(FA, 16), np.zeros((2, 256), np.float16), exc=ValueError,
     must=("memory must be a flat 1-D buffer", "(2, 256)"))
case(6, "load-ldm-traced", lambda mem, ldm: jaxwarp.load_matrix_sync(FA, mem, ldm), F16MEM, 16,
     exc=jax.errors.ConcretizationTypeError, must=("ldm is a static argument",), modes=JIT)
case(6, "load-offset-traced",
     lambda mem, off: jaxwarp.load_matrix_sync(FA, mem, 16, offset=off), F16MEM, 0,
     exc=jax.errors.ConcretizationTypeError, must=("offset is a static argument",), modes=JIT)
case(6, "store-operand-fragment",
     lambda mem: jaxwarp.store_matrix_sync(mem, FA, 16, "mem_row_major"), F16MEM,
     exc=ValueError, must=("accumulator fragments only", "matrix_a"))
case(6, "store-without-layout", lambda mem: jaxwarp.store_matrix_sync(mem, FC, 16, None), F32MEM,
     exc=ValueError, must=("needs layout", "mem_row_major", "mem_col_major"))
case(6, "store-ldm-32bit", lambda mem: jaxwarp.store_matrix_sync(mem, FC, 18, "mem_row_major"),
     F32MEM, exc=ValueError, must=("ldm=18", "multiple of 4 elements"))
case(6, "store-memory-dtype",
     lambda mem: jaxwarp.store_matrix_sync(mem, FC16, 16, "mem_row_major"), F32MEM,
     exc=TypeError, must=("memory for a f16 fragment must have dtype float16", "float32"))
case(6, "fill-non-scalar", lambda v: jaxwarp.fill_fragment(FC, v), zf32, exc=ValueError,
     must=("v must be a scalar", "(32,)"))
case(6, "fill-string", lambda: jaxwarp.fill_fragment(FC, "one"), exc=TypeError,
     must=("v must be a scalar",), modes=EAGER)
case(6, "matrix_to_memory-unknown-type",
     lambda: jaxwarp.matrix_to_memory(np.zeros((16, 16), np.float16), "f17", "row_major"),
     exc=ValueError, must=("type='f17'", "f16"), modes=EAGER)
case(6, "matrix_to_memory-unknown-layout",
     lambda: jaxwarp.matrix_to_memory(np.zeros((16, 16), np.float16), "f16", "diag"),
     exc=ValueError, must=("layout='diag'", "row_major", "col_major"), modes=EAGER)
case(6, "fragment_from_matrix-shape", lambda x: jaxwarp.fragment_from_matrix(FA, x),
     np.zeros((16, 8), np.float16), exc=ValueError,
     must=("matrix for a matrix_a m16n16k16 fragment must have shape", "(..., 16, 16)",
           "(16, 8)"))
case(6, "fragment_from_matrix-dtype", lambda x: jaxwarp.fragment_from_matrix(FA, x),
     np.zeros((16, 16), np.float32), exc=TypeError,
     must=("matrix for a f16 fragment must have dtype float16", "float32"))

# --------------------------------------------------------------------------------------
# Class 6, continued: mma_sync / bmma_sync: roles, shapes and the table.


def _mma_sync(a, b, c, **kw):
    return lambda: jaxwarp.mma_sync(a, b, c, **kw)


case(6, "mma_sync-a-b-swapped", _mma_sync(FB, FA, FC), exc=ValueError,
     must=("a must be a matrix_a fragment", "matrix_b", "swapped"), modes=EAGER)
case(6, "mma_sync-accumulator-as-a", _mma_sync(FC, FB, FC), exc=ValueError,
     must=("a must be a matrix_a fragment", "accumulator"), modes=EAGER)
case(6, "mma_sync-shape-mismatch",
     _mma_sync(FA, fragment("matrix_b", 32, 8, 16, "f16", "col_major"), FC), exc=ValueError,
     must=("fragment shapes differ", "m16n16k16", "m32n8k16", "same (m, n, k)"), modes=EAGER)
case(6, "mma_sync-type-mismatch",
     _mma_sync(FA, fragment("matrix_b", 16, 16, 16, "bf16", "col_major"), FC), exc=ValueError,
     must=("same element type", "'f16'", "'bf16'"), modes=EAGER)
case(6, "mma_sync-bf16-f16-accumulator",
     _mma_sync(fragment("matrix_a", 16, 16, 16, "bf16", "row_major"),
               fragment("matrix_b", 16, 16, 16, "bf16", "col_major"), FC16), exc=ValueError,
     must=("c_format='f16'", "valid for bf16: (c_format='f32', d_format='f32')"), modes=EAGER)
case(6, "mma_sync-f16-d_format-s32", _mma_sync(FA, FB, FC, d_format="s32"), exc=ValueError,
     must=("d_format='s32'", "valid for f16", "(c_format='f32', d_format='f16')"), modes=EAGER)
case(6, "mma_sync-tf32-on-sm_75",
     _mma_sync(fragment("matrix_a", 16, 16, 8, "tf32", "row_major"),
               fragment("matrix_b", 16, 16, 8, "tf32", "col_major"),
               fragment("accumulator", 16, 16, 8, "f32"), arch="sm_75"), exc=ValueError,
     must=("tf32", "needs sm_80", "arch='sm_75'"), modes=EAGER)
case(6, "mma_sync-bad-arch-name", _mma_sync(FA, FB, FC, arch="gfx90a"), exc=ValueError,
     must=("arch='gfx90a'", "not an architecture name", "'sm_90'"), modes=EAGER)
_B1 = (fragment("matrix_a", 8, 8, 128, "b1", "row_major"),
       fragment("matrix_b", 8, 8, 128, "b1", "col_major"),
       fragment("accumulator", 8, 8, 128, "s32"))
case(6, "mma_sync-b1", _mma_sync(*_B1), exc=ValueError, must=("b1", "bmma_sync", "not mma_sync"),
     modes=EAGER)
case(6, "bmma_sync-unknown-op", lambda: jaxwarp.bmma_sync(*_B1, "or"), exc=ValueError,
     must=("op='or'", "allowed", "'xor'", "'and'"), modes=EAGER)
case(6, "bmma_sync-and-on-sm_75", lambda: jaxwarp.bmma_sync(*_B1, "and", arch="sm_75"),
     exc=ValueError, must=("op='and'", "needs sm_80", "arch='sm_75'"), modes=EAGER)
case(6, "bmma_sync-f16-fragments", lambda: jaxwarp.bmma_sync(FA, FB, FC, "xor"), exc=ValueError,
     must=("bmma_sync takes b1", "a_format='f16'"), modes=EAGER)
case(6, "mma_sync-satf-traced", lambda s: jaxwarp.mma_sync(FA, FB, FC, satf=s), True,
     exc=TypeError, must=("satf is a static argument", "bool"), modes=JIT)
case(6, "mma_sync-satf-int", _mma_sync(FA, FB, FC, satf=1), exc=TypeError,
     must=("satf must be a Python bool", "int"), modes=EAGER)
case(6, "mma_sync-not-a-fragment", lambda x: jaxwarp.mma_sync(x, FB, FC),
     np.zeros((16, 16), np.float16), exc=TypeError, must=("a must be a Fragment", "ndarray"),
     modes=EAGER)

# --------------------------------------------------------------------------------------
# Class 6, continued: mma / bmma on logical matrices.

S32 = np.zeros((16, 16), np.float32)
KW = dict(a_format="f16", c_format="f32", d_format="f32")


def _mma(**kw):
    return lambda a, b, c: jaxwarp.mma(a, b, c, **{**KW, **kw})


case(6, "mma-unknown-a_format", _mma(a_format="f8"), H16, H16, S32, exc=ValueError,
     must=("a_format='f8'", "allowed", "'f16'", "'u4'", "'e4m3'"))
case(6, "mma-unsupported-combination", _mma(a_format="bf16", c_format="f16", d_format="f16"),
     H16, H16, S32, exc=ValueError,
     must=("('bf16', 'f16', 'f16')", "valid (a_format, c_format, d_format) combinations",
           "('bf16', 'f32', 'f32')"))
case(6, "mma-a-dtype", _mma(), S32, H16, S32, exc=TypeError,
     must=("a must have dtype float16", "float32"))
case(6, "mma-c-dtype", _mma(), H16, H16, H16, exc=TypeError,
     must=("c must have dtype float32", "float16"))
case(6, "mma-k-mismatch", _mma(), np.zeros((16, 8), np.float16), H16, S32, exc=ValueError,
     must=("k differs", "(16, 8)", "(16, 16)"))
case(6, "mma-batch-not-broadcast", _mma(), np.zeros((2, 16, 16), np.float16),
     np.zeros((3, 16, 16), np.float16), S32, exc=ValueError,
     must=("batch dims", "(2, 16, 16)", "(3, 16, 16)", "do not broadcast"))
case(6, "mma-a-1d", _mma(), np.zeros(16, np.float16), H16, S32, exc=ValueError,
     must=("a must be at least 2-D", "(16,)"))
case(6, "mma-c-shape", _mma(), H16, H16, np.zeros((16, 8), np.float32), exc=ValueError,
     must=("c must be (..., m, n) = (..., 16, 16)", "(16, 8)"))
case(6, "mma-unknown-mode", _mma(mode="approx"), H16, H16, S32, exc=ValueError,
     must=("mode='approx'", "allowed", "'exact'", "'fast'"))
case(6, "mma-satf-not-bool", _mma(satf=1), H16, H16, S32, exc=TypeError,
     must=("satf must be a Python bool", "int"))
case(6, "mma-unknown-arch", _mma(arch="sm_110"), H16, H16, S32, exc=ValueError,
     must=("arch='sm_110'", "allowed", "'sm_90'"))
case(6, "bmma-unknown-op",
     lambda a, b, c: jaxwarp.bmma(a, b, c, op="or"), np.zeros((8, 128), np.uint8),
     np.zeros((128, 8), np.uint8), np.zeros((8, 8), np.int32), exc=ValueError,
     must=("op='or'", "allowed", "'xor'", "'and'"))

# --------------------------------------------------------------------------------------
# Class 6, continued: block-scaled mma (mma_block_scale_logical).

BS_A = np.zeros((16, 32), np.uint8)
BS_B = np.zeros((32, 8), np.uint8)
BS_C = np.zeros((16, 8), np.float32)
BS_SA = np.full((16, 1), 127, np.uint8)
BS_SB = np.full((1, 8), 127, np.uint8)
BS_ARGS = (BS_A, BS_B, BS_C, BS_SA, BS_SB)
BS4_ARGS = (np.zeros((16, 64), np.uint8), np.zeros((64, 8), np.uint8), BS_C,
            np.full((16, 4), 127, np.uint8), np.full((4, 8), 127, np.uint8))


def _bs(**kw):
    return lambda *args: jaxwarp.mma_block_scale_logical(*args, **{"a_format": "e4m3", **kw})


case(6, "block-scale-unknown-kind", _bs(kind="mxf6"), *BS_ARGS, exc=ValueError,
     must=("kind='mxf6'", "allowed", "'mxf8f6f4'", "'mxf4'", "'mxf4nvf4'"))
case(6, "block-scale-unknown-instruction", _bs(instruction="wgmma"), *BS_ARGS,
     exc=ValueError, must=("instruction='wgmma'", "allowed", "'mma_sync'", "'tcgen05'"))
case(6, "block-scale-a_format-not-of-kind", _bs(kind="mxf4"), *BS4_ARGS, exc=ValueError,
     must=("a_format='e4m3'", "allowed", "('e2m1',)"))
case(6, "block-scale-unknown-b_format", _bs(b_format="f16"), *BS_ARGS, exc=ValueError,
     must=("b_format='f16'", "allowed", "'e5m2'", "'e2m1'"))
case(6, "block-scale-unknown-scale_format", _bs(scale_format="e4m3"), *BS_ARGS, exc=ValueError,
     must=("scale_format='e4m3'", "allowed", "'ue8m0'", "'ue4m3'"))
case(6, "block-scale-block-scale_format", _bs(a_format="e2m1", kind="mxf4nvf4",
                                           scale_format="ue4m3"), *BS4_ARGS, exc=ValueError,
     must=("block=32", "scale_format='ue4m3'", "allowed (block, scale_format)", "(16, 'ue4m3')"))
case(6, "block-scale-block", _bs(block=16), *BS_ARGS, exc=ValueError,
     must=("block=16", "allowed (block, scale_format)", "((32, 'ue8m0'),)"))
case(6, "block-scale-arch", _bs(arch="sm_90a"), *BS_ARGS, exc=ValueError,
     must=("arch='sm_90a'", "sm_120a"))
case(6, "block-scale-tcgen05-arch", _bs(instruction="tcgen05", arch="sm_120a"),
     np.zeros((128, 32), np.uint8), BS_B, np.zeros((128, 8), np.float32),
     np.full((128, 1), 127, np.uint8), BS_SB, exc=ValueError,
     must=("arch='sm_120a'", "sm_100a"))
case(6, "block-scale-a-dtype", _bs(), BS_A.astype(np.int8), *BS_ARGS[1:], exc=TypeError,
     must=("a must hold e4m3 codes", "uint8", "float8_e4m3fn", "int8"))
case(6, "block-scale-m", _bs(), np.zeros((32, 32), np.uint8), *BS_ARGS[1:], exc=ValueError,
     must=("(M, N)", "M = 16, N = 8"))
case(6, "block-scale-k", _bs(), np.zeros((16, 16), np.uint8), np.zeros((16, 8), np.uint8),
     BS_C, BS_SA, BS_SB, exc=ValueError, must=("multiple of the instruction's k 32",))
case(6, "block-scale-scale-shape", _bs(), *BS_ARGS[:3], np.full((16, 2), 127, np.uint8),
     BS_SB, exc=ValueError, must=("scale_a must have shape (..., 16, 1)", "(16, 2)"))
case(6, "block-scale-scale-dtype", _bs(), *BS_ARGS[:4], BS_SB.astype(np.int32),
     exc=TypeError, must=("scale_b must hold ue8m0 codes as uint8", "int32"))
case(6, "block-scale-c-dtype", _bs(), BS_A, BS_B, BS_C.astype(np.float16), BS_SA, BS_SB,
     exc=TypeError, must=("c must have dtype float32", "float16"))
case(6, "block-scale-datapath-type", _bs(datapath=jaxwarp.datapath_for("sm_90", "wmma",
                                                                       "f16", 16)),
     *BS_ARGS, exc=TypeError, must=("datapath must be a BlockScaleDatapath", "Datapath"))
case(6, "block-scale-datapath-product-ue4m3",
     _bs(a_format="e2m1", kind="mxf4nvf4", scale_format="ue4m3", block=16,
         datapath=jaxwarp.BlockScaleDatapath("product", F=25, group=1, chunk=16,
                                             e_zero=-133)),
     *BS4_ARGS[:3], np.full((16, 4), 0x38, np.uint8), np.full((4, 8), 0x38, np.uint8),
     exc=ValueError, must=("terms='product'", "ue8m0", "scale_format='ue4m3'"))
case(6, "block-scale-datapath-terms", lambda: jaxwarp.BlockScaleDatapath(
     "sum", F=25, group=1, chunk=32, e_zero=-133), exc=ValueError,
     must=("BlockScaleDatapath.terms='sum'", "allowed", "'product'", "'group'"), modes=EAGER)

# The register form (mma_block_scale): selectors outside the PTX ISA's valid values.
BSR_ARGS = (np.zeros((32, 4), np.uint32), np.zeros((32, 2), np.uint32),
            np.zeros((32, 4), np.uint32), np.zeros((32, 1), np.uint32),
            np.zeros((32, 1), np.uint32))


def _bsr(q="m16n8k32.row.col.kind::mxf8f6f4.block_scale.f32.e4m3.e4m3.f32.ue8m0", **kw):
    return lambda *args: jaxwarp.mma_block_scale(q, *args, **kw)


case(6, "block-scale-regs-byte_id_a-2X", _bsr("m16n8k64.row.col.kind::mxf4.block_scale.f32"
                                              ".e2m1.e2m1.f32.ue8m0", byte_id_a=1),
     *BSR_ARGS, exc=ValueError, must=("byte_id_a=1", "scale_vec::2X", "allowed: (0, 2)"))
case(6, "block-scale-regs-thread_id_a", _bsr(thread_id_a=2), *BSR_ARGS, exc=ValueError,
     must=("thread_id_a=2", "allowed: (0, 1)"))
case(6, "block-scale-regs-thread_id_b", _bsr(thread_id_b=4), *BSR_ARGS, exc=ValueError,
     must=("thread_id_b=4", "allowed: (0, 1, 2, 3)"))
case(6, "block-scale-regs-scale-shape", _bsr(), *BSR_ARGS[:3], np.zeros((32, 2), np.uint32),
     BSR_ARGS[4], exc=TypeError, must=("scale_a_data", "(..., 32, 1) uint32", "(32, 2)"))

# --------------------------------------------------------------------------------------
# Class 6, continued: matmul: shapes the tile does not divide, formats, static tile.

M32 = np.ones((32, 32), np.float32)


def _matmul(**kw):
    return lambda a, b: jaxwarp.matmul(a, b, **kw)


case(6, "matmul-K-not-multiple", _matmul(), np.ones((16, 20), np.float32),
     np.ones((20, 16), np.float32), exc=ValueError,
     must=("K=20", "not a multiple of the tile's 16", "(16, 16, 16)", "(32, 8, 16)"))
case(6, "matmul-M-not-multiple-tf32", _matmul(operand_format="tf32"),
     np.ones((24, 8), np.float32), np.ones((8, 16), np.float32), exc=ValueError,
     must=("M=24", "not a multiple of the tile's 16", "(16, 16, 8)"))
case(6, "matmul-N-not-multiple-custom-tile", _matmul(tile=(8, 32, 16)), M32,
     np.ones((32, 48), np.float32), exc=ValueError, must=("N=48", "tile's 32"))
case(6, "matmul-tile-traced", lambda a, b, m: jaxwarp.matmul(a, b, tile=(m, 16, 16)), M32, M32, 16,
     exc=jax.errors.ConcretizationTypeError, must=("tile is a static argument",), modes=JIT)
case(6, "matmul-tile-not-a-shape", _matmul(tile=(16, 16, 8)), M32, M32, exc=ValueError,
     must=("tile=(16, 16, 8)", "operand_format='f16'", "allowed", "(16, 16, 16)"))
case(6, "matmul-tile-not-a-tuple", _matmul(tile=16), M32, M32, exc=TypeError,
     must=("tile must be a static (m, n, k) tuple", "16"))
case(6, "matmul-unknown-format", _matmul(operand_format="fp8"), M32, M32, exc=ValueError,
     must=("operand_format='fp8'", "allowed", "'f16'", "'tf32'"))
case(6, "matmul-accumulator-for-bf16", _matmul(operand_format="bf16", accumulator="f16"), M32,
     M32, exc=ValueError, must=("accumulator='f16'", "allowed: ('f32',)"))
case(6, "matmul-3d-operand", _matmul(), np.ones((2, 32, 32), np.float32), M32, exc=ValueError,
     must=("a must be a 2-D float matrix", "[2, 32, 32]"))
case(6, "matmul-int-operand", _matmul(), M32, np.ones((32, 32), np.int32), exc=ValueError,
     must=("b must be a 2-D float matrix", "int32"))
case(6, "matmul-inner-mismatch", _matmul(), M32, np.ones((16, 32), np.float32), exc=ValueError,
     must=("inner dimensions differ", "32x32", "16x32"))
case(6, "matmul-native-chain", _matmul(mode="native", instruction="mma_sync", tile=(16, 8, 8)),
     M32, M32, exc=ValueError, must=("mode='native'", "wgmma m64nNk16", "tile=(16, 8, 8)"))
if native_device_error() is not None:  # off an H100 / H200 native mode is an error
    case(6, "matmul-native-device", _matmul(operand_format="bf16", mode="native"), M32, M32,
         exc=ValueError, must=("mode='native'", "Hopper GPU", "compute capability 9.0"))
    case(6, "mma-native-device", _mma(mode="native"), H16, H16, S32, exc=ValueError,
         must=("mode='native'", "Hopper GPU", "compute capability 9.0"))
case(6, "mma-native-c-d", _mma(mode="native", c_format="f16"), H16, H16, H16, exc=ValueError,
     must=("mode='native'", "c_format='f16'", "d_format='f32'"))

# fp8 recipes: DeepSeek-V3's block scales, delayed scaling.
A8, B8 = np.ones((8, 256), np.float32), np.ones((256, 8), np.float32)
case(6, "matmul-block-scale-shape",
     lambda a, b, s: jaxwarp.matmul(a, b, operand_format="e4m3", a_scale=s), A8, B8,
     np.ones((8, 3), np.float32), exc=ValueError,
     must=("a_scale must be a scalar (one per-tensor scale) or block scales", "(8, 2) or (1, 2)",
           "[8, 3]"))
case(6, "matmul-block-scale-promote_every",
     lambda a, b, s: jaxwarp.matmul(a, b, operand_format="e4m3", b_scale=s, promote_every=64),
     A8, B8, np.ones((2, 1), np.float32), exc=ValueError,
     must=("block scales", "promote_every=64", "None or 128"))
case(6, "quantize_blockwise-block", lambda x: jaxwarp.fp8.quantize_blockwise(x, block=(64, 64)),
     A8, exc=ValueError, must=("block=(64, 64)", "allowed", "(1, 128)", "(128, 128)"))
case(6, "quantize_blockwise-format",
     lambda x: jaxwarp.fp8.quantize_blockwise(x, operand_format="bf16"), A8, exc=ValueError,
     must=("operand_format", "bf16", "e4m3"))
case(6, "delayed-amax_compute_algo",
     lambda: jaxwarp.fp8.DelayedScaling(amax_compute_algo="mean"), exc=ValueError,
     must=("amax_compute_algo", "mean", "'max'", "'most_recent'"), modes=EAGER)
case(6, "delayed-history-len", lambda: jaxwarp.fp8.DelayedScaling(amax_history_len=0),
     exc=ValueError, must=("amax_history_len must be a positive int", "0"), modes=EAGER)
case(6, "delayed_matmul-state-shape",
     lambda a, b: jaxwarp.fp8.delayed_matmul(
         a, b, jaxwarp.fp8.DelayedScaling(amax_history_len=4).init(3),
         jaxwarp.fp8.DelayedScaling(amax_history_len=4)), A8, B8, exc=ValueError,
     must=("state must hold an amax_history of shape (4, 2) and 2 scales", "(4, 3)",
           "recipe.init()"))


# --------------------------------------------------------------------------------------
# Class 7: other classes: bool/empty arrays, lane axis in the wrong place.

case(7, "dpx-bool-array", lambda a: dpx.vimax3_u32(a, 0, 0), np.ones(4, bool), exc=TypeError,
     regex=r"a must be a 32-bit integer .*got dtype bool")
case(7, "float2half_rn-bool", jaxwarp.float2half_rn, np.ones(4, bool), exc=TypeError,
     regex=r"x must be a float32 array, got dtype bool")
case(7, "reduce-value-bool", lambda v: jaxwarp.reduce_or_sync(FULL, v), np.ones(32, bool),
     exc=TypeError, regex=r"value has dtype bool; allowed: \('uint32',\)")
case(7, "shfl-var-empty", lambda v: jaxwarp.shfl_sync(FULL, v, 0), np.zeros(0, np.uint32),
     exc=ValueError, regex=r"var must have a leading lane axis of size 32 .*\(0,\)")
case(7, "ballot-pred-empty", lambda p: jaxwarp.ballot_sync(FULL, p), np.zeros(0, bool),
     exc=ValueError, regex=r"pred must have a leading lane axis of size 32")
case(7, "ballot-pred-lane-axis-second", lambda p: jaxwarp.ballot_sync(FULL, p),
     np.zeros((1, 32), bool), exc=ValueError, regex=r"pred must have a leading lane axis .*"
                                                    r"\(1, 32\)")
case(7, "match-value-32x1", lambda v: jaxwarp.match_any_sync(FULL, v), np.zeros((32, 1),
                                                                               np.int32),
     exc=ValueError, regex=r"value must have shape \(32,\) \(one key per lane\)")
case(7, "shfl-src_lane-32x1", lambda b: jaxwarp.shfl_sync(FULL, u32, b),
     np.zeros((32, 1), np.int32), exc=ValueError,
     regex=r"src_lane must be a scalar or one value per lane .*\(32, 1\)")
case(7, "reduce-mask-per-lane-shape", lambda m: jaxwarp.reduce_add_sync(m, u32),
     np.full((2, 32), FULL, np.uint32), exc=ValueError,
     regex=r"mask must be a scalar or one mask per lane .*\(2, 32\)")
case(7, "load-memory-empty", _load(FA, 16), np.zeros(0, np.float16), exc=ValueError,
     regex=r"memory holds 0 elements but load_matrix_sync")
case(7, "nanosleep-float-array", lambda ns: jaxwarp.nanosleep(ns), np.float32(3.0),
     exc=TypeError, regex=r"ns must be an integer scalar")
case(7, "shfl-var-no-lane-axis", lambda v: jaxwarp.shfl_sync(FULL, v, 0), np.zeros(16, np.uint32),
     exc=ValueError, must=("var must have a leading lane axis of size 32", "(16,)"))
case(7, "shfl-var-lane-axis-last", lambda v: jaxwarp.shfl_sync(FULL, v, 0),
     np.zeros((4, 32), np.uint32), exc=ValueError,
     must=("var must have a leading lane axis", "(4, 32)", "vmap"))
case(7, "shfl-var-scalar", lambda v: jaxwarp.shfl_down_sync(FULL, v, 1), np.uint32(3),
     exc=ValueError, must=("var must have a leading lane axis of size 32",))
case(7, "shfl-mask-wrong-shape", lambda m, v: jaxwarp.shfl_sync(m, v, 0),
     np.full(16, FULL, np.uint32), zu32, exc=ValueError,
     must=("mask must be a scalar or one mask per lane", "(32,)", "(16,)"))
case(7, "reduce-no-lane-axis", lambda v: jaxwarp.reduce_max_sync(FULL, v),
     np.zeros(31, np.uint32), exc=ValueError,
     must=("value must have a leading lane axis of size 32",))
case(7, "all-pred-2d", lambda p: jaxwarp.all_sync(FULL, p), np.zeros((32, 2), bool),
     exc=ValueError, must=("pred must have shape (32,)", "(32, 2)"))
case(7, "match_all-bool", lambda v: jaxwarp.match_all_sync(FULL, v), np.zeros(32, bool),
     exc=TypeError, must=("value must be a 32- or 64-bit int or float", "bool"))


# --------------------------------------------------------------------------------------
# emulate: 64-bit arguments (class 1) and settings (class 6).

F32_16 = np.ones((16, 16), np.float32)


def _emulate(**kw):
    return lambda a, b: jaxwarp.emulate(lambda x, y: x @ y, **kw)(a, b)


case(1, "emulate-f64-argument", _emulate(operand_format="bf16"), np.ones((16, 16)), F32_16,
     exc=TypeError, regex=X64, must=("emulate's argument args[0]", "float64"), modes=CONST)
case(1, "emulate-i64-argument", _emulate(operand_format="bf16"), F32_16,
     np.ones((16, 16), np.int64), exc=TypeError, regex=X64,
     must=("emulate's argument args[1]", "int64"), modes=CONST)
case(6, "emulate-scaling-bf16", _emulate(operand_format="bf16", scaling="tensor"), F32_16,
     F32_16, exc=ValueError,
     must=("scaling='tensor'", "('f16', 'e4m3', 'e5m2')", "operand_format='bf16'"))
case(6, "emulate-scaling-tf32-gradients",
     _emulate(operand_format="f16", scaling="tensor", backward_format="tf32"), F32_16, F32_16,
     exc=ValueError, must=("scaling='tensor'", "('f16', 'e4m3', 'e5m2')",
                           "backward_format='tf32'"))
case(6, "emulate-recipe-unknown", _emulate(recipe="fp4"), F32_16, F32_16, exc=ValueError,
     must=("recipe='fp4' is not supported", "('mxfp8', 'nvfp4')", "jaxwarp.mx.Recipe"))
case(6, "emulate-recipe-and-format", _emulate(recipe="mxfp8", operand_format="bf16"),
     F32_16, F32_16, exc=ValueError, must=("operand_format='bf16' with recipe='mxfp8'",
                                           "give one of them"))
case(6, "emulate-no-format-no-recipe", _emulate(), F32_16, F32_16, exc=ValueError,
     must=("emulate needs operand_format=", "recipe="))
case(6, "emulate-recipe-with-scaling", _emulate(recipe="mxfp8", scaling="tensor"), F32_16,
     F32_16, exc=ValueError, must=("scaling='tensor' with recipe='mxfp8'", "scaling=None"))
case(6, "emulate-recipe-arch", _emulate(recipe="nvfp4", arch="sm_90"), F32_16, F32_16,
     exc=ValueError, must=("arch='sm_90'", "sm_100a"))
case(6, "emulate-recipe-needs-key", _emulate(recipe="nvfp4", mode="fast"), F32_16, F32_16,
     exc=ValueError, must=("recipe 'nvfp4'", "rng_key=jax.random.key"))
case(6, "emulate-recipe-bad-field",
     lambda a, b: jaxwarp.mx.Recipe("x", "mxint8", "mxfp8_e4m3", "mxfp8_e4m3"), F32_16, F32_16,
     exc=ValueError, must=("Recipe.activation='mxint8' is not supported", "mxfp8_e4m3"))
case(6, "emulate-scope-unknown", _emulate(recipe="mxfp8", scope="te"), F32_16, F32_16,
     exc=ValueError, must=("scope='te' is not supported", "('linear', 'all')"))
case(6, "emulate-params-argnums-negative", _emulate(recipe="mxfp8", params_argnums=-1),
     F32_16, F32_16, exc=ValueError, must=("params_argnums must be", "got -1"))
case(6, "emulate-params-argnums-beyond-the-call", _emulate(recipe="mxfp8", params_argnums=2),
     F32_16, F32_16, exc=ValueError,
     must=("scope='linear'", "positional argument(s) (2,)", "the call has 2", "scope='all'"))
case(6, "emulate-params-argument-without-arrays",
     lambda a, b: jaxwarp.emulate(lambda s, x, y: x @ y, recipe="mxfp8")("cfg", a, b),
     F32_16, F32_16, exc=ValueError,
     must=("positional argument 0", "no array leaves", "got str", "params_argnums"))
case(6, "emulate-f64-format-x64-off", _emulate(operand_format="f64"), F32_16, F32_16,
     exc=RuntimeError, must=("operand_format='f64'", "jax_enable_x64"))
case(6, "emulate-unknown-format", _emulate(operand_format="fp12"), F32_16, F32_16,
     exc=ValueError, must=("operand_format='fp12'", "allowed", "'bf16'", "dtypes"))
case(6, "emulate-format-dtype-f32", _emulate(operand_format=jnp.float32), F32_16, F32_16,
     exc=ValueError, must=("operand_format='f32'", "allowed", "'tf32'"))
case(6, "emulate-unknown-instruction", _emulate(operand_format="bf16", instruction="hmma"),
     F32_16, F32_16, exc=ValueError, must=("instruction='hmma'", "'wmma'", "'wgmma'"))
case(6, "emulate-blockwise-f16", _emulate(operand_format="f16", scaling="blockwise"), F32_16,
     F32_16, exc=ValueError, must=("scaling='blockwise'", "fp8 formats", "operand_format='f16'"))
case(6, "emulate-blockwise-promote_every",
     _emulate(operand_format="e4m3", scaling="blockwise_pow2", promote_every=64), F32_16, F32_16,
     exc=ValueError, must=("scaling='blockwise_pow2'", "every 128", "promote_every=64"))


# --------------------------------------------------------------------------------------
# Class 6, continued: grouped_value_and_grad (its arguments when made; the batch when
# called, eagerly and traced).

_MESH1 = jaxwarp.batch_mesh(jax.devices()[:1])


def _mse(w, x):
    return jnp.mean((x @ w) ** 2)


def _grouped(groups, loss=_mse, mesh=_MESH1):
    return lambda: jaxwarp.grouped_value_and_grad(loss, groups, mesh=mesh)


# A wrong type is a TypeError, as every static int argument's (checks.static_int).
case(6, "grouped_value_and_grad-groups-float", _grouped(2.0), exc=TypeError,
     regex=r"groups must be a Python int, got float 2\.0", modes=EAGER)
case(6, "grouped_value_and_grad-groups-bool", _grouped(True), exc=TypeError,
     regex=r"groups must be a Python int, got bool True", modes=EAGER)
case(6, "grouped_value_and_grad-groups-numpy-bool", _grouped(np.True_), exc=TypeError,
     regex=r"groups must be a Python int, got bool", modes=EAGER)
case(6, "grouped_value_and_grad-groups-zero", _grouped(0), exc=ValueError,
     regex=r"groups must be an int >= 1, got 0", modes=EAGER)
case(6, "grouped_value_and_grad-groups-not-multiple-of-mesh",
     _grouped(3, mesh=jax.sharding.AbstractMesh((2,), ("batch",))), exc=ValueError,
     regex=r"groups must be a multiple of the mesh size 2 .*got groups=3", modes=EAGER)
case(6, "grouped_value_and_grad-loss-not-callable", _grouped(2, loss=None), exc=TypeError,
     regex=r"loss must be callable, got NoneType None", modes=EAGER)
case(6, "grouped_value_and_grad-no-batch",
     lambda w: jaxwarp.grouped_value_and_grad(_mse, 2, mesh=_MESH1)(w),
     np.ones(3, np.float32), exc=ValueError,
     regex=r"grouped_value_and_grad: no batch argument after params")
case(6, "grouped_value_and_grad-batch-not-multiple",
     lambda w, x: jaxwarp.grouped_value_and_grad(_mse, 2, mesh=_MESH1)(w, x),
     np.ones(3, np.float32), np.ones((5, 3), np.float32), exc=ValueError,
     regex=r"batch\[0\] has leading \(batch\) size 5; it must be a multiple of groups=2")
# A scalar in the batch: the message says what was passed (its value eagerly, its type
# traced).
case(6, "grouped_value_and_grad-batch-scalar",
     lambda w, x: jaxwarp.grouped_value_and_grad(_mse, 2, mesh=_MESH1)(w, x),
     np.ones(3, np.float32), np.float32(1), exc=ValueError,
     regex=r"batch\[0\] is a scalar \((float32 .*1\.0.*|float32\[\])\) with no leading "
           r"\(batch\) axis; every batch leaf needs one whose size is a multiple of groups=2")

case(6, "grouped_value_and_grad-dispatch",
     lambda: jaxwarp.grouped_value_and_grad(_mse, 2, mesh=_MESH1, dispatch="pmap"),
     exc=ValueError, regex=r"dispatch must be 'spmd' or 'per_device', got 'pmap'", modes=EAGER)
# dispatch="per_device" runs compiled programs from Python: eagerly the batch is checked,
# traced (jit) it refuses with a TypeError naming the way out.
case(6, "grouped_value_and_grad-per-device-batch-not-multiple",
     lambda w, x: jaxwarp.grouped_value_and_grad(_mse, 2, mesh=_MESH1,
                                                 dispatch="per_device")(w, x),
     np.ones(3, np.float32), np.ones((5, 3), np.float32), exc=ValueError,
     regex=r"batch\[0\] has leading \(batch\) size 5; it must be a multiple of groups=2",
     modes=EAGER)
case(6, "grouped_value_and_grad-per-device-batch-scalar",
     lambda w, x: jaxwarp.grouped_value_and_grad(_mse, 2, mesh=_MESH1,
                                                 dispatch="per_device")(w, x),
     np.ones(3, np.float32), 1.0, exc=ValueError,
     regex=r"batch\[0\] is a scalar \(float 1\.0\) with no leading \(batch\) axis",
     modes=EAGER)
case(6, "grouped_value_and_grad-per-device-traced",
     lambda w, x: jaxwarp.grouped_value_and_grad(_mse, 2, mesh=_MESH1,
                                                 dispatch="per_device")(w, x),
     np.ones(3, np.float32), np.ones((4, 3), np.float32), exc=TypeError,
     regex=r"dispatch='per_device'\) runs compiled programs from Python and cannot be "
           r"traced", modes=JIT)


# --------------------------------------------------------------------------------------
# The catalogue test.


# The default run takes every case eagerly, and the traced modes of every TRACED_EVERY-th
# case of the table (and of every case that runs only traced); ``-m slow`` runs the
# traced modes of the others.
TRACED_EVERY = 8


def _params():
    for i, c in enumerate(CATALOGUE):
        eager = any(m.startswith("eager") for m in c.modes)
        for mode in c.modes:
            marks = [pytest.mark.xfail(strict=True, reason=c.xfail)] if c.xfail else []
            if mode.startswith("jit") and eager and i % TRACED_EVERY:
                marks.append(pytest.mark.slow)
            yield pytest.param(c, mode, id=f"c{c.cls}-{c.id}[{mode}]", marks=marks)


@pytest.mark.parametrize("c, mode", list(_params()))
def test_bad_input(c: Case, mode: str):
    if mode.startswith("jit_const"):
        fn = jax.jit(lambda: c.fn(*c.args))
        args = ()
    elif mode.startswith("jit"):
        fn, args = jax.jit(c.fn), c.args
    else:
        fn, args = c.fn, c.args
    with jax.enable_x64(mode.endswith("x64")):
        with pytest.raises(c.exc) as info:
            jax.block_until_ready(fn(*args))
    msg = str(info.value)
    if c.regex is not None:
        assert re.search(c.regex, msg, re.S), f"{c.regex!r} not in:\n{msg}"
    missing = [s for s in c.must if s not in msg]
    assert not missing, f"message lacks {missing}:\n{msg}"


def test_catalogue_covers_every_class():
    ids = [c.id for c in CATALOGUE]
    assert len(ids) == len(set(ids))
    assert len(ids) >= 255  # 137 (the first catalogue) + 118 (the 0.1.0 catalogue): none lost
    counts = {k: sum(c.cls == k for c in CATALOGUE) for k in range(1, 8)}
    assert all(counts.values()), counts
    modes = {"eager", "jit", "jit_const", "eager_x64", "jit_x64"}
    assert all(c.modes and set(c.modes) <= modes for c in CATALOGUE)


# --------------------------------------------------------------------------------------
# The positive side of each policy.


def test_x64_on_64bit_values_are_exact():
    with jax.enable_x64(True):
        x = np.arange(32, dtype=np.float64) * (1 + 2**-40)
        np.testing.assert_array_equal(jaxwarp.shfl_sync(FULL, x, 3), np.full(32, x[3]))
        k = np.where(np.arange(32) < 16, 2**32, 2**33).astype(np.int64)  # equal low halves
        assert int(jaxwarp.match_any_sync(FULL, k)[0]) == 0x0000FFFF
        p = np.full(32, 2**32, np.int64)  # non-zero only in the high half
        assert int(jaxwarp.ballot_sync(FULL, p)[0]) == FULL


def test_python_numbers_are_weak_and_fine():
    assert int(dpx.vimax3_u32(-1, 2, 3)) == FULL  # a Python int read as unsigned
    assert int(dpx.vimax3_s32(np.int64(-5), 2, 1)) == 2  # NumPy int scalars: exact values
    np.testing.assert_array_equal(jaxwarp.shfl_sync(np.int64(FULL), u32, 2), np.full(32, 2))
    assert jaxwarp.float2half_rn(0.5).dtype == jnp.float16
    c = jaxwarp.fill_fragment(FC, 0.1)  # a Python float: one rounding
    assert c.x[0, 0] == np.float32(0.1)


@pytest.mark.parametrize("mask", [np.int32(-1), np.full(32, -1, np.int32), jnp.int32(-1), -1,
                                  np.int64(-1)])
def test_int32_masks_are_bits(mask):
    np.testing.assert_array_equal(jaxwarp.shfl_sync(mask, u32, 5), np.full(32, 5))
    np.testing.assert_array_equal(jaxwarp.reduce_add_sync(mask, u32), np.full(32, 496))


def test_checked_of_jitted_function_reports_and_jit_still_works():
    f = jax.jit(lambda x: jaxwarp.shfl_sync(0xFFFF, x, 20))
    x = jnp.arange(32)
    np.testing.assert_array_equal(f(x), jnp.where(x < 16, 0, x))  # plain trace first
    err, _ = jaxwarp.checked(f)(x)
    assert "lane 0 reads source lane 20" in err.get()
    np.testing.assert_array_equal(f(x), jnp.where(x < 16, 0, x))  # cache not polluted
    g = jax.jit(lambda x: jaxwarp.shfl_sync(0xFFFF, x, 21))
    err, _ = jaxwarp.checked(lambda x: g(x) + 1)(x)  # a jitted function called inside
    assert "source lane 21" in err.get()
    np.testing.assert_array_equal(g(x), jnp.where(x < 16, 0, x))
    err, _ = jax.jit(jaxwarp.checked(g))(x)
    assert "source lane 21" in err.get()


def test_traced_out_of_range_values_are_reported_in_checked_mode():
    fill = jax.jit(lambda v: jaxwarp.fill_fragment(FS32, v).x)
    with pytest.raises(TypeError, match="v is a traced float for a s32 fragment"):
        fill(jnp.float32(jnp.nan))  # outside checked mode: refused, never converted
    err, _ = jaxwarp.checked(fill)(jnp.float32(jnp.nan))
    assert "fill_fragment: v=nan does not fit a s32 fragment" in err.get()
    err, _ = jaxwarp.checked(fill)(jnp.float32(5.0))
    assert err.get() is None
    err, _ = jaxwarp.checked(jax.jit(lambda v: jaxwarp.fill_fragment(FS4, v).x))(jnp.int32(9))
    assert "v=9 does not fit a s4 fragment" in err.get()
    frag = jax.jit(lambda m: jaxwarp.fragment_from_matrix(FS4, m).x)
    m = np.zeros((8, 32), np.int8)
    m[2, 5] = -9
    err, _ = jaxwarp.checked(frag)(m)
    assert "matrix has value -9 at flat index 69, outside the s4 range -8 .. 7" in err.get()
    err, _ = jaxwarp.checked(frag)(np.zeros((8, 32), np.int8))
    assert err.get() is None


def test_replace_with_new_x_revalidates():
    c = FC.replace(type="s32", x=jnp.zeros((32, 8), jnp.int32))
    assert c.type == "s32" and c.x.dtype == jnp.int32
    a = FA.replace(layout="row_major")  # no change: allowed without x
    assert a.layout == "row_major"


def test_sharded_vmap_keyword_arguments():
    f = jaxwarp.sharded_vmap(lambda x, y: x + y, in_axes=(0, None))
    np.testing.assert_array_equal(f(np.ones((3, 4), np.float32), y=np.float32(2)),
                                  np.full((3, 4), 3, np.float32))


def test_matrix_to_memory_roundtrip_still_exact():
    mat = np.arange(-8, 8, dtype=np.int8)[np.arange(8 * 32) % 16].reshape(8, 32)
    mem, ldm = jaxwarp.matrix_to_memory(mat, "s4", "row_major")
    frag = jaxwarp.load_matrix_sync(FS4, jnp.asarray(mem), ldm)
    np.testing.assert_array_equal(jaxwarp.matrix_from_fragment(frag), mat)


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
    # The capture tool's meta JSON is a file-wide key, read once: it must be a JSON
    # object, and it is not a group of outputs.
    FileCase("meta-not-json", _npz(device=np.array("X"), meta=np.array("{tool: cg"),
                                   foo=np.zeros(3)), 2,
             ("key 'meta' is not the capture tool's JSON",)),
    FileCase("meta-not-an-object", _npz(device=np.array("X"), meta=np.array("[1, 2]"),
                                        foo=np.zeros(3)), 2,
             ("key 'meta' must be a JSON object, got list",)),
    FileCase("meta-only", _npz(device=np.array("X"), meta=np.array('{"tool": "cg"}')), 2,
             ("nothing to compare",), must_not=("unhandled/meta",)),
]


# The cases call the command's ``main`` in this process (the same code, without a fresh
# interpreter and JAX per file; tests/conformance/test_conformance.py runs it as
# ``python -m``), an exception escaping ``main`` standing for a traceback of the command.
def _run_in_process(path: pathlib.Path) -> subprocess.CompletedProcess:
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = conformance.main([str(path)])
    except Exception:  # the command would print a traceback and exit 1
        err.write("Traceback (most recent call last):\n" + traceback.format_exc())
        status = 1
    return subprocess.CompletedProcess([str(path)], status, out.getvalue(), err.getvalue())


@pytest.fixture(scope="module")
def conformance_runs(tmp_path_factory):
    """Runs the conformance command on every file case."""
    tmp = tmp_path_factory.mktemp("captures")

    def run(fc: FileCase):
        path = tmp / f"{fc.id}.npz"
        if fc.content is not None:
            path.write_bytes(fc.content)
        return fc.id, _run_in_process(path)

    return dict(map(run, FILE_CASES))


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


# --------------------------------------------------------------------------------------
# The later entry points (PTX mma.sync, wgmma, fp8, matmul, mma, ldmatrix, sharding):
# the same 64-bit policy, format arguments, and what to pass instead. These cases run
# in their own test below (the catalogue test's parameters are fixed above).

_ENTRY_N0 = len(CATALOGUE)
_QF16 = "m16n8k16.row.col.f32.f16.f16.f32"
_QS8 = "m8n8k16.row.col.satfinite.s32.s8.u8.s32"
_QW = "m64n8k16.f32.f16.f16"
_QWS8 = "m64n8k32.s32.s8.s8"
_DA = jaxwarp.make_descriptor(0, 128, 256)
_DB = jaxwarp.make_descriptor(2048, 128, 256)
_A8, _B8, _C8 = (np.full((8, 16), 3, np.int8), np.full((16, 8), 200, np.uint8),
                 np.zeros((8, 8), np.int32))
_F16x16 = np.ones((16, 16), np.float16)
_F32x16 = np.ones((16, 16), np.float32)
_ACC = 2**40 + 5  # an int64 accumulator that narrowing would turn into 5


def _wide(shape, dtype, value=1):
    return np.full(shape, value, dtype)


for _arg, _val in (("a", _wide((8, 16), np.int64)), ("b", _wide((16, 8), np.uint64)),
                   ("c", _wide((8, 8), np.int64, _ACC))):
    case(1, f"mma_sync_ptx_logical-{_arg}-{_val.dtype}",
         lambda x, _arg=_arg: jaxwarp.mma_sync_ptx_logical(_QS8, **{"a": _A8, "b": _B8, "c": _C8,
                                                                    _arg: x}),
         _val, exc=TypeError, regex=f"{_arg} has " + X64, modes=CONST)
case(1, "mma_sync_ptx_logical-f16-a-float64", lambda x: jaxwarp.mma_sync_ptx_logical(
    _QF16, x, np.ones((16, 8), np.float16), np.zeros((16, 8), np.float32)),
    np.ones((16, 16)), exc=TypeError, regex="a has " + X64, modes=CONST)
for _arg, _shape in (("a_regs", (32, 4)), ("b_regs", (32, 2)), ("c_regs", (32, 4))):
    case(1, f"mma_sync_ptx-{_arg}-uint64", lambda x, _arg=_arg: jaxwarp.mma_sync_ptx(
        _QF16, **{"a_regs": np.ones((32, 4), np.uint32), "b_regs": np.ones((32, 2), np.uint32),
                  "c_regs": np.zeros((32, 4), np.uint32), _arg: x}),
        _wide(_shape, np.uint64, 2**32 + 1), exc=TypeError, regex=f"{_arg} has " + X64,
        modes=CONST)
case(1, "to_registers-x-float64", lambda x: jaxwarp.to_registers(_QF16, "a", x),
     np.ones((16, 16)), exc=TypeError, regex="x has " + X64, modes=CONST)
case(1, "to_registers-x-int64", lambda x: jaxwarp.to_registers(_QS8, "c", x),
     _wide((8, 8), np.int64, _ACC), exc=TypeError, regex="x has " + X64, modes=CONST)
case(1, "from_registers-regs-uint64", lambda r: jaxwarp.from_registers(_QF16, "a", r),
     _wide((32, 4), np.uint64, 2**40), exc=TypeError, regex="regs has " + X64, modes=CONST)
case(1, "wgmma-smem-uint64", lambda s: jaxwarp.wgmma(
    _QWS8, _DA, _DB, s, np.zeros((128, 4), np.int32)), _wide(4096, np.uint64, 0),
    exc=TypeError, regex="smem has " + X64, modes=CONST)
case(1, "wgmma-d_regs-int64", lambda d: jaxwarp.wgmma(
    _QWS8, _DA, _DB, np.zeros(4096, np.uint8), d), _wide((128, 4), np.int64, _ACC),
    exc=TypeError, regex="d_regs has " + X64, modes=CONST)
case(1, "wgmma-a-registers-float64", lambda a: jaxwarp.wgmma(
    _QW, a, _DB, np.zeros(4096, np.uint8), np.zeros((128, 4), np.float32)),
    np.ones((128, 4)), exc=TypeError, regex="a has " + X64, modes=CONST)
for _arg, _val in (("a", np.ones((64, 16))), ("b", np.ones((16, 8)) * 3),
                   ("c", np.zeros((64, 8)))):
    case(1, f"wgmma_logical-{_arg}-float64", lambda x, _arg=_arg: jaxwarp.wgmma_logical(
        _QW, **{"a": np.ones((64, 16), np.float16), "b": np.ones((16, 8), np.float16),
                "c": np.zeros((64, 8), np.float32), _arg: x}),
        _val, exc=TypeError, regex=f"{_arg} has " + X64, modes=CONST)
case(1, "wgmma_logical-s8-c-int64", lambda c: jaxwarp.wgmma_logical(
    _QWS8, np.ones((64, 32), np.int8), np.ones((32, 8), np.int8), c),
    _wide((64, 8), np.int64, _ACC), exc=TypeError, regex="c has " + X64, modes=CONST)
for _id, _fn, _val in (
        ("cvt_f32_to_fp8x2-a", lambda x: jaxwarp.fp8.cvt_f32_to_fp8x2(x, zf32, "e4m3"), f64),
        ("cvt_f32_to_fp8x2-b", lambda x: jaxwarp.fp8.cvt_f32_to_fp8x2(zf32, x, "e5m2"), f64),
        ("cvt_f32_to_e4m3x2-a", lambda x: jaxwarp.fp8.cvt_f32_to_e4m3x2(x, zf32), f64),
        ("cvt_f32_to_e5m2x2-b", lambda x: jaxwarp.fp8.cvt_f32_to_e5m2x2(zf32, x), f64),
        ("cvt_f16x2_to_fp8x2-x", lambda x: jaxwarp.fp8.cvt_f16x2_to_fp8x2(x, "e4m3"), u64),
        ("cvt_fp8x2_to_f16x2-x", lambda x: jaxwarp.fp8.cvt_fp8x2_to_f16x2(x, "e4m3"), u64),
        ("float_to_fp8-x", lambda x: jaxwarp.fp8.float_to_fp8(x, "e4m3", True), f64),
        ("float2_to_fp8x2-x",
         lambda x: jaxwarp.fp8.float2_to_fp8x2(x, "e5m2", True), f64.reshape(16, 2)),
        ("halfraw_to_fp8-x", lambda x: jaxwarp.fp8.halfraw_to_fp8(x, "e4m3", False), u64),
        ("halfraw2_to_fp8x2-x",
         lambda x: jaxwarp.fp8.halfraw2_to_fp8x2(x, "e4m3", False), f64.reshape(16, 2)),
        ("bfloat16raw_to_fp8-x",
         lambda x: jaxwarp.fp8.bfloat16raw_to_fp8(x, "e5m2", True), i64),
        ("bfloat16raw2_to_fp8x2-x",
         lambda x: jaxwarp.fp8.bfloat16raw2_to_fp8x2(x, "e5m2", True), f64.reshape(16, 2)),
        ("fp8_to_halfraw-x", lambda x: jaxwarp.fp8.fp8_to_halfraw(x, "e4m3"), u64),
        ("fp8x2_to_halfraw2-x", lambda x: jaxwarp.fp8.fp8x2_to_halfraw2(x, "e5m2"), i64)):
    case(1, f"fp8.{_id}-{_val.dtype}", _fn, _val, exc=TypeError,
         regex=_id.rsplit("-", 1)[1] + " has " + X64, modes=CONST)
case(1, "half2float-float64", jaxwarp.half2float, f64, exc=TypeError,
     regex="x has " + X64, modes=CONST)
case(1, "bfloat162float-uint64", jaxwarp.bfloat162float, u64, exc=TypeError,
     regex="x has " + X64, modes=CONST)
for _fmt in ("f16", "bf16", "e4m3"):
    case(1, f"to_operand-{_fmt}-float64", lambda x, f=_fmt: jaxwarp.to_operand(x, f), f64,
         exc=TypeError, regex="x has " + X64, modes=CONST)
case(1, "to_operand-scale-float64", lambda s: jaxwarp.to_operand(zf32, "e4m3", s),
     np.float64(2.0), exc=TypeError, regex="scale has " + X64, modes=CONST)
for _arg in ("a", "b", "c"):
    case(1, f"matmul-{_arg}-float64", lambda x, _arg=_arg: jaxwarp.matmul(
        **{"a": _F32x16, "b": _F32x16, "c": _F32x16, _arg: x}),
        np.ones((16, 16)), exc=TypeError, regex=f"{_arg} has " + X64, modes=CONST)
case(1, "matmul-a_scale-float64", lambda s: jaxwarp.matmul(
    _F32x16, _F32x16, operand_format="e4m3", instruction="mma_sync", a_scale=s),
    np.float64(0.5), exc=TypeError, regex="a_scale has " + X64, modes=CONST)
for _arg, _val in (("a", np.ones((16, 16))), ("b", np.ones((16, 16))),
                   ("c", np.zeros((16, 16)))):
    case(1, f"mma-{_arg}-float64", lambda x, _arg=_arg: jaxwarp.mma(
        **{"a": _F16x16, "b": _F16x16, "c": _F32x16, _arg: x},
        a_format="f16", c_format="f32", d_format="f32"),
        _val, exc=TypeError, regex=f"{_arg} has " + X64, modes=CONST)
case(1, "mma-s8-c-int64", lambda c: jaxwarp.mma(
    np.ones((16, 16), np.int8), np.ones((16, 16), np.int8), c,
    a_format="s8", c_format="s32", d_format="s32"), _wide((16, 16), np.int64, _ACC),
    exc=TypeError, regex="c has " + X64, modes=CONST)
for _arg, _val in (("a", _wide((8, 128), np.uint64)), ("b", _wide((128, 8), np.int64)),
                   ("c", _wide((8, 8), np.int64, _ACC))):
    case(1, f"bmma-{_arg}-{_val.dtype}", lambda x, _arg=_arg: jaxwarp.bmma(
        **{"a": np.ones((8, 128), np.uint8), "b": np.ones((128, 8), np.uint8),
           "c": np.zeros((8, 8), np.int32), _arg: x}, op="xor"),
        _val, exc=TypeError, regex=f"{_arg} has " + X64, modes=CONST)
_LDA = (np.arange(32, dtype=np.int32) % 8) * 16
case(1, "ldmatrix-smem-uint64", lambda s: jaxwarp.ldmatrix(s, _LDA, num=1),
     _wide(64, np.uint64, 2**40), exc=TypeError, regex="smem has " + X64, modes=CONST)
case(1, "ldmatrix-addr-int64", lambda a: jaxwarp.ldmatrix(np.zeros(64, np.uint16), a, num=1),
     _LDA.astype(np.int64), exc=TypeError, regex="addr has " + X64, modes=CONST)
case(1, "stmatrix-smem-float64", lambda s: jaxwarp.stmatrix(
    s, np.ones((32, 1), np.uint32), _LDA, num=1), np.zeros(64), exc=TypeError,
    regex="smem has " + X64, modes=CONST)
case(1, "stmatrix-regs-uint64", lambda r: jaxwarp.stmatrix(
    np.zeros(64, np.uint16), r, _LDA, num=1), _wide((32, 1), np.uint64, 2**40),
    exc=TypeError, regex="regs has " + X64, modes=CONST)
case(1, "movmatrix-regs-uint64", jaxwarp.movmatrix, _wide(32, np.uint64, 2**40),
     exc=TypeError, regex="regs has " + X64, modes=CONST)
_VSUM = jaxwarp.sharded_vmap(lambda value: jaxwarp.reduce_add_sync(FULL, value))
case(1, "sharded_vmap-mapped-int64", _VSUM, _wide((3, 32), np.int64, 2**33),
     exc=TypeError, regex="value has " + X64, modes=CONST)
case(1, "sharded_vmap-replicated-float64", lambda y: jaxwarp.sharded_vmap(
    lambda x, scale: x * scale, in_axes=(0, None))(np.ones((3, 32), np.float32), y),
    np.float64(0.1), exc=TypeError, regex="scale has " + X64, modes=CONST)
case(1, "sharded_vmap-tree-leaf-uint64", lambda t: jaxwarp.sharded_vmap(
    lambda d: d["w"] + 1)(t), {"w": _wide((3, 32), np.uint64, 2**40)},
    exc=TypeError, regex=r"d\['w'\] has " + X64, modes=CONST)
case(1, "shard_batch-leaf-float64", lambda t: jaxwarp.shard_batch(
    t, jaxwarp.batch_mesh(jax.devices()[:1])), {"x": np.zeros((3, 2))},
    exc=TypeError, regex=r"tree\['x'\] has " + X64, modes=CONST)
case(1, "shard_batch-list-leaf-int64", lambda t: jaxwarp.shard_batch(
    t, jaxwarp.batch_mesh(jax.devices()[:1])), [np.zeros((3, 2), np.float32),
                                                _wide((3,), np.int64, _ACC)],
    exc=TypeError, regex=r"tree\[1\] has " + X64, modes=CONST)
case(1, "warp_kernel-argument-int64", jaxwarp.warp_kernel(
    lambda v: jaxwarp.reduce_add_sync(FULL, v)), _wide((2, 32), np.int64, 2**33),
    exc=TypeError, regex="argument 0 has " + X64, modes=CONST)

# Format arguments: names, registry aliases and dtypes; anything else names the argument.
case(6, "matmul-operand_format-unknown", lambda a: jaxwarp.matmul(a, a, operand_format="e3m2"),
     _F32x16, exc=ValueError, must=("operand_format='e3m2'", "allowed", "'bf16'", "dtypes"))
case(6, "matmul-operand_format-float32-dtype", lambda a: jaxwarp.matmul(
    a, a, operand_format=np.float32), _F32x16, exc=ValueError,
    must=("operand_format=", "float32", "allowed", "'tf32'"))
case(6, "matmul-operand_format-None", lambda a: jaxwarp.matmul(a, a, operand_format=None),
     _F32x16, exc=ValueError, must=("operand_format=None", "allowed"))
case(6, "matmul-operand_format-int", lambda a: jaxwarp.matmul(a, a, operand_format=16),
     _F32x16, exc=ValueError, must=("operand_format=16", "allowed"))
case(6, "matmul-operand_format-pair-bad", lambda a: jaxwarp.matmul(
    a, a, operand_format=("e4m3", "e2m1")), _F32x16, exc=ValueError,
    must=("operand_format='e2m1'", "allowed"))
case(6, "matmul-operand_format-float64-no-x64", lambda a: jaxwarp.matmul(
    a, a, operand_format=np.float64, accumulator=np.float64), _F32x16, exc=RuntimeError,
    must=("f64", "jax_enable_x64"))
case(6, "matmul-operand_format-f64-no-x64", lambda a: jaxwarp.matmul(
    a, a, operand_format="f64", accumulator="f64"), _F32x16, exc=RuntimeError,
    must=("f64", "jax_enable_x64"))
case(6, "matmul-accumulator-dtype-not-allowed", lambda a: jaxwarp.matmul(
    a, a, accumulator=np.int8), _F32x16, exc=ValueError, must=("accumulator", "allowed"))
case(6, "matmul-accumulator-garbage", lambda a: jaxwarp.matmul(a, a, accumulator="fp33"),
     _F32x16, exc=ValueError, must=("accumulator", "allowed"))
case(6, "to_operand-format-unknown", lambda x: jaxwarp.to_operand(x, "fp4"), zf32,
     exc=ValueError, must=("operand_format='fp4'", "allowed", "'e4m3'"))
case(6, "to_operand-format-int32-dtype", lambda x: jaxwarp.to_operand(x, np.int32), zf32,
     exc=ValueError, must=("operand_format=", "int32", "allowed"))
case(6, "to_operand-format-float64-no-x64", lambda x: jaxwarp.to_operand(x, "double"), zf32,
     exc=RuntimeError, must=("operand_format='double'", "jax_enable_x64"))
case(6, "warp_kernel-force-pallas-on-cpu", jaxwarp.warp_kernel(
    lambda v: v + 1, force="pallas"), np.ones((2, 32), np.float32), exc=ValueError,
    must=("force='pallas'", "force=None", "force='vmap'", "interpret=True", "GPU"),
    xfail=None if jax.default_backend() != "gpu" else "a GPU runs the kernel")
case(6, "sharded_vmap-var-keyword-argument", lambda x: jaxwarp.sharded_vmap(
    lambda v, **kw: v * kw["s"])(x, s=2.0), np.ones((3, 4), np.float32), exc=TypeError,
    must=("sharded_vmap", "['s']", "functools.partial"), modes=EAGER)


# Qualifier strings that ptxas rejects: an empty part, a duplicated qualifier, a partial
# opcode prefix. Every entry point that takes a qualifier parses it the same way.
_BAD_MMA_Q = (
    ("empty-part", "m16n8k16..row.col.f32.f16.f16.f32", ("empty qualifier", "part 2")),
    ("trailing-dot", _QF16 + ".", ("empty qualifier",)),
    ("row-row-row", "m16n8k16.row.col.row.f32.f16.f16.f32", (".row", "duplicated")),
    ("satfinite-twice", "m8n8k16.row.col.satfinite.satfinite.s32.s8.u8.s32",
     (".satfinite", "duplicated")),
    ("popc-twice", "m16n8k256.row.col.s32.b1.b1.s32.and.popc.popc", (".popc", "duplicated")),
    ("prefix-syn", "mma.syn.aligned." + _QF16, ("opcode", "mma.sync.aligned")),
    ("prefix-no-aligned", "mma.sync." + _QF16, ("opcode", "mma.sync.aligned")),
)
for _qid, _q, _must in _BAD_MMA_Q:
    case(6, f"parse_mma-{_qid}", lambda _q=_q: jaxwarp.parse_mma(_q), exc=ValueError,
         must=_must, modes=EAGER)
    case(6, f"mma_sync_ptx_logical-qualifier-{_qid}", lambda a, _q=_q: jaxwarp.mma_sync_ptx_logical(
        _q, a, np.ones((16, 8), np.float16), np.zeros((16, 8), np.float32)),
        _F16x16, exc=ValueError, must=_must)
    case(6, f"to_registers-qualifier-{_qid}", lambda x, _q=_q: jaxwarp.to_registers(
        _q, "a", x), _F16x16, exc=ValueError, must=_must)
    case(6, f"mma_sync_ptx-qualifier-{_qid}", lambda a, _q=_q: jaxwarp.mma_sync_ptx(
        _q, a, np.ones((32, 2), np.uint32), np.zeros((32, 4), np.uint32)),
        np.ones((32, 4), np.uint32), exc=ValueError, must=_must)
_BAD_WG_Q = (
    ("empty-part", "m64n8k16..f32.f16.f16", ("empty qualifier", "part 2")),
    ("trailing-dot", _QW + ".", ("empty qualifier",)),
    ("prefix-partial", "wgmma.mma_async.aligned." + _QW, ("opcode", "in full")),
    ("prefix-tail-only", "sync.aligned." + _QW, ("opcode", "in full")),
    ("satfinite-twice", "m64n8k32.satfinite.s32.s8.s8.satfinite",
     (".satfinite", "duplicated")),
    ("satfinite-middle", "m64n8k32.s32.satfinite.s8.s8", (".satfinite", "follow the shape")),
    ("popc-twice", "m64n256k256.s32.b1.b1.and.popc.popc", (".popc", "duplicated")),
)
for _qid, _q, _must in _BAD_WG_Q:
    case(6, f"parse_wgmma-{_qid}", lambda _q=_q: jaxwarp.parse_wgmma(_q), exc=ValueError,
         must=_must, modes=EAGER)
    case(6, f"wgmma_logical-qualifier-{_qid}", lambda a, _q=_q: jaxwarp.wgmma_logical(
        _q, a, np.ones((16, 8), np.float16), np.zeros((64, 8), np.float32)),
        np.ones((64, 16), np.float16), exc=ValueError, must=_must)
    case(6, f"wgmma-qualifier-{_qid}", lambda s, _q=_q: jaxwarp.wgmma(
        _q, _DA, _DB, s, np.zeros((128, 4), np.float32)), np.zeros(4096, np.uint8),
        exc=ValueError, must=_must)


# Names and model fields that make no sense: datapath_for's instruction, type and k;
# Datapath and ArchModel fields, checked at construction and named.
for _id, _args, _must in (
        ("instruction-unknown", ("sm_90", "hmma", "f16", 16), ("instruction='hmma'",
                                                                "'mma_sync'")),
        ("a_format-unknown", ("sm_90", "wmma", "f17", 16), ("a_format='f17'", "allowed")),
        ("a_format-not-of-wgmma", ("sm_90", "wgmma", "f64", 4), ("a_format='f64'", "allowed")),
        ("ik-not-a-k", ("sm_90", "wmma", "f16", 7), ("ik=7", "allowed: (16,)")),
        ("ik-bool", ("sm_90", "mma_sync", "f16", True), ("ik=True", "allowed"))):
    case(6, f"datapath_for-{_id}", lambda _a=_args: jaxwarp.datapath_for(*_a),
         exc=ValueError, must=_must, modes=EAGER)
for _id, _kw, _must in (
        ("nan_f32-infinity", {"nan_f32": 0x7F800000}, ("Datapath.nan_f32", "NaN")),
        ("nan_f32-float", {"nan_f32": float("nan")}, ("Datapath.nan_f32", "NaN")),
        ("nan_f16-too-wide", {"nan_f16": 0x7FFFF}, ("Datapath.nan_f16", "NaN")),
        ("nan_f16-finite", {"nan_f16": 0x3C00}, ("Datapath.nan_f16", "NaN")),
        ("block_k-negative", {"block_k": -16}, ("Datapath.block_k", "[1, 64]")),
        ("F-bool", {"F": True}, ("Datapath.F", "int")),
        ("sum_mbits-zero", {"sum_mbits": 0}, ("Datapath.sum_mbits", "[1, 23]")),
        ("e_floor-negative", {"e_floor": -1}, ("Datapath.e_floor",)),
        ("c_mode-unknown", {"c_mode": "fma"}, ("Datapath.c_mode", "'fused'")),
        ("trunc-unknown", {"trunc": "rn"}, ("Datapath.trunc", "'rz'"))):
    case(6, f"Datapath-{_id}", lambda _kw=_kw: jaxwarp.Datapath(**_kw), exc=ValueError,
         must=_must, modes=EAGER)
for _id, _kw, _must in (
        ("name-not-a-target", {"name": "hopper", "datapaths": ()}, ("ArchModel.name",)),
        ("family-unknown", {"name": "sm_90", "datapaths": (("hmmx", jaxwarp.Datapath()),)},
         ("ArchModel.datapaths", "'hmmx'", "'hmma'")),
        ("entry-not-a-datapath", {"name": "sm_90", "datapaths": (("hmma", 16),)},
         ("ArchModel.datapaths", "(family, Datapath)")),
        ("family-twice", {"name": "sm_90", "datapaths": (("hmma", jaxwarp.Datapath()),
                                                          ("hmma", jaxwarp.Datapath()))},
         ("ArchModel.datapaths", "twice")),
        ("verified-unknown", {"name": "sm_90", "datapaths": (), "verified": "yes"},
         ("ArchModel.verified", "'hardware'")),
        ("unverified-not-a-family", {"name": "sm_90", "datapaths": (),
                                     "unverified": ("hmma",)},
         ("ArchModel.unverified", "'hmma'"))):
    case(6, f"ArchModel-{_id}", lambda _kw=_kw: jaxwarp.ArchModel(**_kw), exc=ValueError,
         must=_must, modes=EAGER)


# Format arguments take format names, their aliases and the dtypes that name them, and
# say so when refused (one check, checks.format_name / formats.get_format).
_A16, _C32 = np.ones((16, 16), np.float16), np.zeros((16, 16), np.float32)
for _arg, _val in (("a_format", np.int32), ("a_format", "half-ish"), ("b_format", jnp.float32),
                   ("c_format", "e4m3"), ("c_format", np.uint8), ("d_format", jnp.bfloat16),
                   ("d_format", 3)):
    _kw = {"a_format": "f16", "c_format": "f32", "d_format": "f32", _arg: _val}
    case(6, f"mma-{_arg}-{getattr(_val, '__name__', _val)}", lambda a, c, _kw=_kw:
         jaxwarp.mma(a, a, c, **_kw), _A16, _C32, exc=ValueError,
         must=(f"{_arg}=", "allowed", "dtypes"))
for _id, _fn in (
        ("round_to-fmt-int32", lambda x: jaxwarp.round_to(x, np.int32)),
        ("round_to-fmt-unknown", lambda x: jaxwarp.round_to(x, "f12")),
        ("from_bits-fmt-float8_e4m3b11fnuz", lambda x: jaxwarp.from_bits(
            x.view(np.uint32), "f7")),
        ("from_bits-fmt-int16", lambda x: jaxwarp.from_bits(x.view(np.uint32), np.int16))):
    case(6, _id, _fn, zf32, exc=ValueError, must=("fmt=", "allowed"))
for _id, _fn in (
        ("float_to_fp8-fmt-float16", lambda x: jaxwarp.fp8.float_to_fp8(x, jnp.float16, True)),
        ("float_to_fp8-fmt-e3m4", lambda x: jaxwarp.fp8.float_to_fp8(x, "e3m4", True)),
        ("cvt_f32_to_fp8x2-fmt-bf16", lambda x: jaxwarp.fp8.cvt_f32_to_fp8x2(x, x, "bf16")),
        ("fp8_to_halfraw-fmt-int8", lambda x: jaxwarp.fp8.fp8_to_halfraw(
            x.view(np.uint32), np.int8))):
    case(6, f"fp8.{_id}", _fn, zf32, exc=ValueError,
         must=("fmt=", "allowed", "'e4m3'", "dtypes"))
for _id, _fn in (
        ("fragment-type-f32-as-a", lambda: fragment("matrix_a", 16, 16, 16, jnp.float32,
                                                     "row_major")),
        ("fragment-type-int16", lambda: fragment("matrix_a", 16, 16, 16, np.int16,
                                                  "row_major")),
        ("fragment_type-type-unknown", lambda: jaxwarp.fragment_type(
            "accumulator", 16, 16, 16, "f17")),
        ("matrix_to_memory-type-unknown", lambda: jaxwarp.matrix_to_memory(
            _A16, "f17", "row_major")),
        ("matrix_to_memory-type-int16", lambda: jaxwarp.matrix_to_memory(
            _A16, np.int16, "row_major"))):
    case(6, _id, _fn, exc=ValueError, must=("type", "f16"), modes=EAGER)


# Values that would be converted silently: complex c, a traced float for an integer
# fragment, Python ints wider than a register, non-descriptor scalars where a wgmma
# descriptor belongs, a scale_d that is not a predicate, fp8 pairs that do not pair.
for _id, _c in (("complex64", np.ones((16, 16), np.complex64)),
                ("python-complex", 1 + 2j)):
    case(3, f"matmul-c-{_id}", lambda a, c=_c: jaxwarp.matmul(a, a, c), _F32x16,
         exc=TypeError, must=("c must be real", "imaginary"), modes=EAGER)
case(3, "matmul-c-complex-traced", lambda a, c: jaxwarp.matmul(a, a, c), _F32x16,
     np.ones((16, 16), np.complex64), exc=TypeError, must=("c must be real",), modes=JIT)
for _ft in ("s32", "u8", "s8"):
    _frag = fragment("accumulator", 16, 16, 16, "s32") if _ft == "s32" else fragment(
        "matrix_a", 16, 16, 16, _ft, "row_major")
    case(3, f"fill_fragment-{_ft}-traced-nan", lambda v, _f=_frag: jaxwarp.fill_fragment(
        _f, v), np.float32(np.nan), exc=TypeError,
        must=("v is a traced float", f"{_ft} fragment", "integer value"), modes=JIT)
for _id, _fn in (
        ("to_registers-x-python-int-wide", lambda: jaxwarp.to_registers(
            _QS8, "c", [[2**40] * 8] * 8)),
        ("from_registers-regs-python-int-wide", lambda: jaxwarp.from_registers(
            _QF16, "a", [[2**33] * 4] * 32)),
        ("mma_sync_ptx-a_regs-python-int-wide", lambda: jaxwarp.mma_sync_ptx(
            _QF16, [[2**33] * 4] * 32, np.ones((32, 2), np.uint32),
            np.zeros((32, 4), np.uint32))),
        ("mma_sync_ptx-c_regs-python-int-wide", lambda: jaxwarp.mma_sync_ptx(
            _QF16, np.ones((32, 4), np.uint32), np.ones((32, 2), np.uint32),
            [[2**32] * 4] * 32)),
        ("wgmma-a-registers-python-int-wide", lambda: jaxwarp.wgmma(
            _QW, [[2**33] * 4] * 128, _DB, np.zeros(4096, np.uint8),
            np.zeros((128, 4), np.float32))),
        ("wgmma-d_regs-python-int-wide", lambda: jaxwarp.wgmma(
            _QWS8, _DA, _DB, np.zeros(4096, np.uint8), [[2**33] * 4] * 128))):
    _arg = _id.split("-")[1]
    case(3, _id, _fn, exc=ValueError, must=(f"{_arg} does not fit in 32 bits",),
         modes=EAGER)
_SM, _D32 = np.zeros(4096, np.uint8), np.zeros((128, 4), np.float32)
for _id, _fn, _val, _name, _modes in (
        ("desc_a-float", lambda x: jaxwarp.wgmma(_QW, x, _DB, _SM, _D32), float(_DA),
         "desc_a", EAGER),
        ("desc_a-float32", lambda x: jaxwarp.wgmma(_QW, x, _DB, _SM, _D32),
         np.float32(_DA), "desc_a", EAGER),
        ("desc_a-traced", lambda x: jaxwarp.wgmma(_QW, x, _DB, _SM, _D32),
         np.uint32(_DA & 0xFFFFFFFF), "desc_a", JIT),
        ("desc_b-float", lambda x: jaxwarp.wgmma(_QW, _DA, x, _SM, _D32), float(_DB),
         "desc_b", EAGER),
        ("desc_b-float64-array", lambda x: jaxwarp.wgmma(_QW, _DA, x, _SM, _D32),
         np.array(1.0), "desc_b", EAGER),
        ("desc_b-traced", lambda x: jaxwarp.wgmma(_QW, _DA, x, _SM, _D32),
         np.uint32(_DB & 0xFFFFFFFF), "desc_b", JIT),
        ("desc_b-list", lambda x: jaxwarp.wgmma(_QW, _DA, x, _SM, _D32), [1, 2],
         "desc_b", EAGER)):
    case(6, f"wgmma-{_id}", _fn, _val, exc=TypeError,
         must=(_name, "descriptor", "uint64", "make_descriptor"), modes=_modes)
for _id, _fn, _name in (
        ("desc_a-too-wide", lambda: jaxwarp.wgmma(_QW, 2**64, _DB, _SM, _D32), "desc_a"),
        ("desc_b-negative", lambda: jaxwarp.wgmma(_QW, _DA, -1, _SM, _D32), "desc_b")):
    case(3, f"wgmma-{_id}", _fn, exc=ValueError, must=(_name, "64 bits"), modes=EAGER)
_WL = (np.ones((64, 16), np.float16), np.ones((16, 8), np.float16),
       np.zeros((64, 8), np.float32))
for _id, _sd, _exc, _modes in (("2", 2, ValueError, EAGER), ("minus-1", -1, ValueError, EAGER),
                               ("int32-array-2", np.array([1, 2], np.int32), ValueError,
                                EAGER),
                               ("str", "1", TypeError, EAGER),
                               ("none", None, TypeError, EAGER),
                               ("float", np.float32(1.0), TypeError, BOTH)):
    case(6, f"wgmma-scale_d-{_id}", lambda s, _sd=_sd: jaxwarp.wgmma(
        _QW, _DA, _DB, s, _D32, scale_d=_sd), _SM, exc=_exc, must=("scale_d",),
        modes=_modes)
    case(6, f"wgmma_logical-scale_d-{_id}", lambda a, _sd=_sd: jaxwarp.wgmma_logical(
        _QW, a, _WL[1], _WL[2], scale_d=_sd), _WL[0], exc=_exc, must=("scale_d",),
        modes=_modes)
for _id, _fn in (
        ("cvt_f32_to_fp8x2", lambda a, b: jaxwarp.fp8.cvt_f32_to_fp8x2(a, b, "e4m3")),
        ("cvt_f32_to_e4m3x2", jaxwarp.fp8.cvt_f32_to_e4m3x2),
        ("cvt_f32_to_e5m2x2", jaxwarp.fp8.cvt_f32_to_e5m2x2)):
    case(6, f"fp8.{_id}-shapes-differ", _fn, np.zeros(4, np.float32),
         np.zeros(3, np.float32), exc=ValueError,
         must=("a and b", "a shape (4,)", "b shape (3,)"))


def _entry_params():
    new = {id(c) for c in CATALOGUE[_ENTRY_N0:]}
    return [p for p in _params() if id(p.values[0]) in new]


@pytest.mark.parametrize("c, mode", _entry_params())
def test_bad_input_entry_points(c: Case, mode: str):
    test_bad_input(c, mode)


# Capture files whose sizes, trial counts or device would make the check misbehave: sizes
# from the file are checked before allocating, zero trials and a device that lacks the
# instruction are errors. Added to FILE_CASES, which the module fixture runs.
def _npy_claiming(shape) -> bytes:
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<u4", "fortran_order": False, "shape": shape})
    return header.getvalue() + bytes(64)


def _zeros_mma(family: str, name: str, device: str, shapes) -> bytes:
    a, b, cd, raw = shapes
    return _npz(device=np.array(device), **{
        f"{family}/{name}/A": np.zeros(a, raw), f"{family}/{name}/B": np.zeros(b, raw),
        f"{family}/{name}/C": np.zeros(cd, np.uint32),
        f"{family}/{name}/D": np.zeros(cd, np.uint32)})


_LD = "ld/a.f16.m16n16k16.r"
_FP8 = ((1, 16, 32), (1, 32, 8), (1, 16, 8), np.uint8)
_WG = ((1, 64, 16), (1, 16, 8), (1, 64, 8), np.uint16)
SIZE_TRIAL_DEVICE_CASES = [
    FileCase("ldst-huge-ldm", _npz(**{
        f"{_LD}/ldm": np.array([2**30], np.int32), f"{_LD}/off": np.array([0], np.int32),
        f"{_LD}/src": np.zeros((1, 32, 16), np.int32)}), 2,
        (_LD, "ldm=1073741824", "at most 1048576")),
    FileCase("npy-header-claims-too-much", _zip(**{"reduce_x.npy": _npy_claiming((2**34,))}),
             2, ("reduce_x", "truncated or corrupt")),
    FileCase("mma-zero-trials", _mma_cfg(_S8, _I8[:0], _I8[:0], _I32[:0], _I32[:0]), 2,
             (_S8, "zero trials"), must_not=("IndexError",)),
    FileCase("ptx-fp8-captured-on-sm80",
             _zeros_mma("ptx", "e4m3.e4m3.f32f32.m16n8k32", "NVIDIA A100 sm_80", _FP8), 2,
             ("mma_sync with e4m3 operands needs sm_89 or newer", "sm_80")),
    FileCase("wgmma-captured-on-sm80",
             _zeros_mma("wgmma", "f16.f16.f32f32.m64n8k16", "NVIDIA A100 sm_80", _WG), 2,
             ("wgmma with f16 operands needs sm_90a", "sm_80")),
]
FILE_CASES.extend(SIZE_TRIAL_DEVICE_CASES)


@pytest.mark.parametrize("fc", [pytest.param(fc, id=fc.id) for fc in SIZE_TRIAL_DEVICE_CASES])
def test_conformance_bad_file_sizes_trials_devices(fc: FileCase, conformance_runs):
    test_conformance_bad_file(fc, conformance_runs)


def test_format_arguments_accept_dtypes_and_aliases():
    a, c = np.ones((16, 16), np.float16), np.zeros((16, 16), np.float32)
    by_name = jaxwarp.mma(a, a, c, a_format="f16", c_format="f32", d_format="f32")
    by_dtype = jaxwarp.mma(a, a, c, a_format=np.float16, c_format=jnp.float32, d_format="float32")
    np.testing.assert_array_equal(np.asarray(by_name).view(np.uint32),
                                  np.asarray(by_dtype).view(np.uint32))
    x = np.float32(1 + 2**-9)
    assert jaxwarp.round_to(x, jnp.bfloat16) == jaxwarp.round_to(x, "bf16")
    assert jaxwarp.fp8.float_to_fp8(x, jnp.float8_e4m3fn, True) == \
        jaxwarp.fp8.float_to_fp8(x, "e4m3", True)
    assert fragment("matrix_a", 16, 16, 16, jnp.float16, "row_major").type == "f16"
    assert jaxwarp.fragment_type("accumulator", 16, 16, 16, "float32").type == "f32"
    mem, ldm = jaxwarp.matrix_to_memory(a, np.float16, "row_major")
    mem2, ldm2 = jaxwarp.matrix_to_memory(a, "f16", "row_major")
    assert ldm == ldm2 and np.array_equal(mem, mem2)


@pytest.mark.parametrize("mode", ["rn", "rz", "rna"])
def test_round_to_inf_as_documented(mode):
    inf = np.array([np.inf, -np.inf], np.float32)
    assert np.isnan(np.asarray(jaxwarp.round_to(inf, "e4m3", mode))).all()  # no infinity
    for fmt in ("f16", "bf16", "e5m2"):
        np.testing.assert_array_equal(np.asarray(jaxwarp.round_to(inf, fmt, mode),
                                                 np.float32), inf)


# --------------------------------------------------------------------------------------
# The sm_100a / sm_120a conversions: jaxwarp.fp6, jaxwarp.fp4 and the ue8m0 part of
# jaxwarp.fp8. The same rules: 64-bit data refused, formats / roundings / satfinite named
# with what is allowed, wrong dtypes and shapes named. Own test below.

_NARROW_N0 = len(CATALOGUE)
_f2 = zf32.reshape(16, 2)
for _id, _fn, _val in (
        ("fp6.cvt_f32_to_fp6x2-a", lambda x: jaxwarp.fp6.cvt_f32_to_fp6x2(x, zf32, "e2m3"), f64),
        ("fp6.cvt_f32_to_e3m2x2-b", lambda x: jaxwarp.fp6.cvt_f32_to_e3m2x2(zf32, x), f64),
        ("fp6.cvt_fp6x2_to_f16x2-x", lambda x: jaxwarp.fp6.cvt_fp6x2_to_f16x2(x, "e2m3"), u64),
        ("fp6.float_to_fp6-x", lambda x: jaxwarp.fp6.float_to_fp6(x, "e3m2", "rn"), f64),
        ("fp6.float2_to_fp6x2-x",
         lambda x: jaxwarp.fp6.float2_to_fp6x2(x, "e3m2", "rz"), f64.reshape(16, 2)),
        ("fp6.halfraw_to_fp6-x", lambda x: jaxwarp.fp6.halfraw_to_fp6(x, "e2m3", "rz"), u64),
        ("fp6.bfloat16raw2_to_fp6x2-x", lambda x: jaxwarp.fp6.bfloat16raw2_to_fp6x2(
            x, "e2m3", "rz"), i64.reshape(16, 2)),
        ("fp6.fp6_to_halfraw-x", lambda x: jaxwarp.fp6.fp6_to_halfraw(x, "e2m3"), u64),
        ("fp4.cvt_f32_to_e2m1x2-a", lambda x: jaxwarp.fp4.cvt_f32_to_e2m1x2(x, zf32), f64),
        ("fp4.cvt_e2m1x2_to_f16x2-x", jaxwarp.fp4.cvt_e2m1x2_to_f16x2, u64),
        ("fp4.float_to_fp4-x", lambda x: jaxwarp.fp4.float_to_fp4(x, "e2m1", "rn"), f64),
        ("fp4.halfraw2_to_fp4x2-x", lambda x: jaxwarp.fp4.halfraw2_to_fp4x2(
            x, "e2m1", "rn"), f64.reshape(16, 2)),
        ("fp4.fp4x2_to_halfraw2-x", lambda x: jaxwarp.fp4.fp4x2_to_halfraw2(x, "e2m1"), i64),
        ("fp8.cvt_f32_to_ue8m0x2-b", lambda x: jaxwarp.fp8.cvt_f32_to_ue8m0x2(zf32, x, "rz"),
         f64),
        ("fp8.cvt_bf16x2_to_ue8m0x2-x", lambda x: jaxwarp.fp8.cvt_bf16x2_to_ue8m0x2(x, "rp"),
         u64),
        ("fp8.cvt_ue8m0x2_to_bf16x2-x", jaxwarp.fp8.cvt_ue8m0x2_to_bf16x2, i64),
        ("fp8.float_to_e8m0-x", lambda x: jaxwarp.fp8.float_to_e8m0(x, True, "rp"), f64),
        ("fp8.e8m0_to_bf16raw-x", jaxwarp.fp8.e8m0_to_bf16raw, u64)):
    case(1, f"{_id}-{_val.dtype}", _fn, _val, exc=TypeError,
         regex=_id.rsplit("-", 1)[1] + " has " + X64, modes=CONST)
for _id, _fn, _must in (
        ("fp6.float_to_fp6-fmt-e2m1", lambda x: jaxwarp.fp6.float_to_fp6(x, "e2m1", "rn"),
         ("fmt='e2m1'", "allowed", "'e2m3'", "'e3m2'")),
        ("fp6.cvt_f32_to_fp6x2-fmt-float16", lambda x: jaxwarp.fp6.cvt_f32_to_fp6x2(
            x, x, np.float16), ("fmt=", "allowed", "'e2m3'")),
        ("fp4.float_to_fp4-fmt-e3m2", lambda x: jaxwarp.fp4.float_to_fp4(x, "e3m2", "rn"),
         ("fmt='e3m2'", "allowed", "'e2m1'")),
        ("fp6.float_to_fp6-rounding-rna", lambda x: jaxwarp.fp6.float_to_fp6(x, "e2m3", "rna"),
         ("rounding='rna'", "allowed", "('rn', 'rz')")),
        ("fp4.float2_to_fp4x2-rounding-rp", lambda x: jaxwarp.fp4.float2_to_fp4x2(
            x.reshape(16, 2), "e2m1", "rp"), ("rounding='rp'", "allowed", "('rn', 'rz')")),
        ("fp8.float_to_e8m0-rounding-rn", lambda x: jaxwarp.fp8.float_to_e8m0(x, True, "rn"),
         ("rounding='rn'", "allowed", "'rz', 'rp'")),
        ("fp8.cvt_f32_to_ue8m0x2-rounding-rm", lambda x: jaxwarp.fp8.cvt_f32_to_ue8m0x2(
            x, x, "rm"), ("rounding='rm'", "allowed", "'rz', 'rp'")),
        ("fp8.float_to_e8m0-saturate-1", lambda x: jaxwarp.fp8.float_to_e8m0(x, 1.5, "rz"),
         ("saturate=1.5", "allowed", "True, False")),
        ("fp6.cvt_f32_to_e2m3x2-satfinite-False", lambda x: jaxwarp.fp6.cvt_f32_to_e2m3x2(
            x, x, satfinite=False), ("satfinite=False", ".satfinite", "allowed: True")),
        ("fp4.cvt_f32_to_e2m1x2-satfinite-False", lambda x: jaxwarp.fp4.cvt_f32_to_e2m1x2(
            x, x, satfinite=False), ("satfinite=False", ".satfinite", "allowed: True")),
        ("fp4.cvt_f32_to_e2m1x2-relu-None", lambda x: jaxwarp.fp4.cvt_f32_to_e2m1x2(
            x, x, relu=None), ("relu=None", "allowed")),
        ("fp6.float2_to_fp6x2-x-trailing-32", lambda x: jaxwarp.fp6.float2_to_fp6x2(
            x, "e2m3", "rn"), ("x must have a trailing axis of size 2", "(32,)")),
        ("fp8.bfloat162raw_to_e8m0x2-x-trailing-32", lambda x: jaxwarp.fp8.bfloat162raw_to_e8m0x2(
            x.astype(jnp.bfloat16), True, "rz"), ("x must have a trailing axis of size 2",))):
    case(6, _id, _fn, zf32, exc=ValueError, must=_must)
for _id, _fn, _val, _must in (
        ("fp6.cvt_f32_to_fp6x2-a-float16", lambda x: jaxwarp.fp6.cvt_f32_to_fp6x2(
            x, zf32, "e3m2"), zf32.astype(np.float16), ("a must be a float32", "float16")),
        ("fp4.cvt_e2m1x2_to_f16x2-x-uint32", jaxwarp.fp4.cvt_e2m1x2_to_f16x2, zu32,
         ("x must be a uint8", "uint32")),
        ("fp6.cvt_fp6x2_to_f16x2-x-uint8", lambda x: jaxwarp.fp6.cvt_fp6x2_to_f16x2(
            x, "e2m3"), zu32.astype(np.uint8), ("x must be a uint16", "uint8")),
        ("fp6.fp6_to_halfraw-x-float32", lambda x: jaxwarp.fp6.fp6_to_halfraw(x, "e3m2"), zf32,
         ("x must be a uint8", "float32")),
        ("fp4.halfraw_to_fp4-x-float32", lambda x: jaxwarp.fp4.halfraw_to_fp4(
            x, "e2m1", "rn"), zf32, ("x must be a float16", "uint16", "float32")),
        ("fp8.cvt_bf16x2_to_ue8m0x2-x-float32", lambda x: jaxwarp.fp8.cvt_bf16x2_to_ue8m0x2(
            x, "rz"), zf32, ("x must be a uint32", "float32")),
        ("fp8.e8m0_to_bf16raw-x-int32", jaxwarp.fp8.e8m0_to_bf16raw, zi32,
         ("x must be a uint8", "int32")),
        ("fp8.float_to_e8m0-x-int32", lambda x: jaxwarp.fp8.float_to_e8m0(x, False, "rp"), zi32,
         ("x must be a float32", "uint32", "int32"))):
    case(6, _id, _fn, _val, exc=TypeError, must=_must)
case(6, "fp4.cvt_f32_to_e2m1x2-shapes-differ", jaxwarp.fp4.cvt_f32_to_e2m1x2,
     np.zeros(4, np.float32), np.zeros(3, np.float32), exc=ValueError,
     must=("a and b", "a shape (4,)", "b shape (3,)"))
case(6, "fp8.cvt_f32_to_ue8m0x2-shapes-differ", lambda a, b: jaxwarp.fp8.cvt_f32_to_ue8m0x2(
    a, b, "rp"), np.zeros(4, np.float32), np.zeros(3, np.float32), exc=ValueError,
     must=("a and b", "a shape (4,)", "b shape (3,)"))
for _id, _fn in (
        ("fp6.float_to_fp6-rounding-traced",
         lambda x, r: jaxwarp.fp6.float_to_fp6(x, "e2m3", r)),
        ("fp8.float_to_e8m0-saturate-traced", lambda x, r: jaxwarp.fp8.float_to_e8m0(
            x, r, "rz"))):
    case(6, _id, _fn, zf32, np.int32(0), exc=TypeError, must=("static argument",), modes=JIT)


def _narrow_params():
    new = {id(c) for c in CATALOGUE[_NARROW_N0:]}
    return [p for p in _params() if id(p.values[0]) in new]


@pytest.mark.parametrize("c, mode", _narrow_params())
def test_bad_input_narrow_conversions(c: Case, mode: str):
    test_bad_input(c, mode)


# tcgen05.mma (Blackwell): logical and descriptor entry points, the shared memory and
# instruction descriptors. These cases run in their own test below.

_TC0 = len(CATALOGUE)
_QT = "m64n8k16.kind::f16.f32.f16.f16"
_QTI = "m64n8k32.kind::i8.s32.s8.s8"
_TL = (np.ones((64, 16), np.float16), np.ones((16, 8), np.float16),
       np.zeros((64, 8), np.float32))
_TDA = jaxwarp.make_smem_descriptor(0, 128, 256)
_TDB = jaxwarp.make_smem_descriptor(2048, 128, 256)
_TID = jaxwarp.make_instr_descriptor(_QTI)
_TI8 = np.zeros((64, 8), np.int32)
_TSM = np.zeros(4096, np.uint8)
for _i, _arg in enumerate(("a", "b", "d")):
    case(1, f"tcgen05_mma_logical-{_arg}-float64", lambda x, _i=_i: jaxwarp.tcgen05_mma_logical(
        _QT, *(x if j == _i else v for j, v in enumerate(_TL))),
        _TL[_i].astype(np.float64), exc=TypeError, regex=f"{_arg} has " + X64, modes=CONST)
case(1, "tcgen05_mma-d-int64", lambda d: jaxwarp.tcgen05_mma(
    "kind::i8", d, _TDA, _TDB, _TID, _TSM), _wide((64, 8), np.int64, _ACC), exc=TypeError,
    regex="d has " + X64, modes=CONST)
case(1, "tcgen05_mma-smem-uint64", lambda s: jaxwarp.tcgen05_mma(
    "kind::i8", _TI8, _TDA, _TDB, _TID, s), _wide(4096, np.uint64, 0), exc=TypeError,
    regex="smem has " + X64, modes=CONST)
for _qid, _q, _exc, _must in (
        ("kind-unknown", "m64n8k16.kind::f17.f32.f16.f16", ValueError,
         ("kind::f17", "allowed", "kind::tf32")),
        ("m-32", "m32n8k16.kind::f16.f32.f16.f16", ValueError, ("M must be one of (64, 128)",)),
        ("n-12", "m64n12k16.kind::f16.f32.f16.f16", ValueError, ("N=12", "allowed N")),
        ("k-wrong", "m64n8k8.kind::f16.f32.f16.f16", ValueError, ("K must be 16",)),
        ("dtype-f16-bf16", "m64n8k16.kind::f16.f16.bf16.bf16", ValueError,
         ("dtype 'f16'", "allowed dtype: ('f32',)")),
        ("i8-n-40", "m64n40k32.kind::i8.s32.s8.s8", ValueError, ("N=40",)),
        ("empty-part", "m64n8k16..kind::f16.f32.f16.f16", ValueError, ("empty part",)),
        ("cta_group-2", "tcgen05.mma.cta_group::2.m128n16k16.kind::f16.f32.f16.f16",
         NotImplementedError, ("cta_group::2", "not modelled")),
        ("ws", "tcgen05.mma.ws.cta_group::1.m64n64k16.kind::f16.f32.f16.f16",
         NotImplementedError, (".ws", "not modelled"))):
    case(6, f"parse_tcgen05-{_qid}", lambda _q=_q: jaxwarp.parse_tcgen05(_q), exc=_exc,
         must=_must, modes=EAGER)
    case(6, f"tcgen05_mma_logical-qualifier-{_qid}", lambda a, _q=_q:
         jaxwarp.tcgen05_mma_logical(_q, a, _TL[1], _TL[2]), _TL[0], exc=_exc, must=_must)
for _id, _kw, _exc, _must, _modes in (
        ("scale_input_d-16", dict(scale_input_d=16), ValueError,
         ("scale_input_d=16", "0..15"), BOTH),
        ("scale_input_d-float", dict(scale_input_d=1.5), TypeError, ("scale_input_d",), BOTH),
        ("enable_input_d-2", dict(enable_input_d=2), ValueError, ("enable_input_d", "0 or 1"),
         BOTH),
        ("enable_input_d-str", dict(enable_input_d="yes"), TypeError, ("enable_input_d",),
         BOTH),
        ("saturate-f16", dict(saturate=True), ValueError, ("saturate", "kind::i8 only"), BOTH),
        ("neg_a-not-bool", dict(neg_a="yes"), TypeError, ("neg_a", "bool"), BOTH),
        ("arch-sm_90a", dict(arch="sm_90a"), ValueError, ("tcgen05", "needs sm_100a"), BOTH),
        ("arch-unknown", dict(arch="sm_101a"), ValueError, ("arch='sm_101a'", "sm_100a"),
         BOTH)):
    case(6, f"tcgen05_mma_logical-{_id}", lambda a, _kw=_kw: jaxwarp.tcgen05_mma_logical(
        _QT, a, _TL[1], _TL[2], **_kw), _TL[0], exc=_exc, must=_must, modes=_modes)
case(6, "tcgen05_mma_logical-scale_input_d-fp8", lambda a: jaxwarp.tcgen05_mma_logical(
    "m64n8k32.kind::f8f6f4.f32.e4m3.e4m3", a, np.ones((32, 8), np.uint8), _TL[2],
    scale_input_d=1), np.ones((64, 32), np.uint8), exc=ValueError,
    must=("scale_input_d=1", "kind::f16 and kind::tf32 only"))
case(6, "tcgen05_mma_logical-scale_input_d-traced", lambda a, s:
     jaxwarp.tcgen05_mma_logical(_QT, a, _TL[1], _TL[2], scale_input_d=s), _TL[0],
     np.int32(2), exc=TypeError, must=("scale_input_d",), modes=JIT)
case(6, "tcgen05_mma_logical-neg-i8", lambda a: jaxwarp.tcgen05_mma_logical(
    _QTI, a, np.ones((32, 8), np.int8), _TI8, neg_b=True), np.ones((64, 32), np.int8),
    exc=ValueError, must=("negate", "kind::i8"))
case(6, "tcgen05_mma_logical-a-dtype", lambda a: jaxwarp.tcgen05_mma_logical(
    _QT, a, _TL[1], _TL[2]), np.ones((64, 16), np.int16), exc=TypeError,
    must=("a for type 'f16'", "uint16", "float16"))
case(6, "tcgen05_mma_logical-b-shape", lambda b: jaxwarp.tcgen05_mma_logical(
    _QT, _TL[0], b, _TL[2]), np.ones((8, 16), np.float16), exc=ValueError,
    must=("b must have shape (..., 16, 8)",))
case(6, "tcgen05_mma_logical-d-dtype", lambda d: jaxwarp.tcgen05_mma_logical(
    _QT, _TL[0], _TL[1], d), np.zeros((64, 8), np.float16), exc=TypeError,
    must=("d must have dtype float32", "'f32'"))
case(6, "tcgen05_mma_logical-d-shape", lambda d: jaxwarp.tcgen05_mma_logical(
    _QT, _TL[0], _TL[1], d), np.zeros((128, 8), np.float32), exc=ValueError,
    must=("d must have shape (..., 64, 8)", "tensor memory"))
for _id, _fn, _exc, _must in (
        ("opcode-kind-unknown", lambda d: jaxwarp.tcgen05_mma(
            "tcgen05.mma.cta_group::1.kind::f17", d, _TDA, _TDB, _TID, _TSM), ValueError,
         ("kind::f17", "allowed")),
        ("opcode-cta_group-2", lambda d: jaxwarp.tcgen05_mma(
            "tcgen05.mma.cta_group::2.kind::i8", d, _TDA, _TDB, _TID, _TSM),
         NotImplementedError, ("cta_group::2", "not modelled")),
        ("desc_b-wgmma-descriptor", lambda d: jaxwarp.tcgen05_mma(
            "kind::i8", d, _TDA, jaxwarp.make_descriptor(2048, 128, 256), _TID, _TSM),
         ValueError, ("desc_b", "bits 46-48 must be 0b001")),
        ("desc_b-float", lambda d: jaxwarp.tcgen05_mma(
            "kind::i8", d, _TDA, 2048.0, _TID, _TSM), TypeError,
         ("desc_b must be a descriptor", "make_smem_descriptor")),
        ("idesc-sparse", lambda d: jaxwarp.tcgen05_mma(
            "kind::i8", d, _TDA, _TDB, int(_TID) | 4, _TSM), NotImplementedError,
         ("sparsity", "not modelled")),
        ("idesc-reserved-bit", lambda d: jaxwarp.tcgen05_mma(
            "kind::i8", d, _TDA, _TDB, int(_TID) | 1 << 23, _TSM), ValueError,
         ("reserved bit 23",)),
        ("idesc-atype-code", lambda d: jaxwarp.tcgen05_mma(
            "kind::i8", d, _TDA, _TDB, int(_TID) | 2 << 7, _TSM), ValueError,
         ("atype code 3", "kind::i8")),
        ("idesc-shape-vs-d", lambda d: jaxwarp.tcgen05_mma(
            "kind::i8", d, _TDA, _TDB, jaxwarp.make_instr_descriptor(
                "m128n8k32.kind::i8.s32.s8.s8"), _TSM), ValueError,
         ("d must have shape (..., 128, 8)",)),
        ("smem-too-small", lambda d: jaxwarp.tcgen05_mma(
            "kind::i8", d, _TDA, _TDB, _TID, np.zeros(2048, np.uint8)), ValueError,
         ("operand b", "beyond smem of 2048 bytes")),
        ("swizzle-base-offset", lambda d: jaxwarp.tcgen05_mma(
            "kind::i8", d, jaxwarp.make_smem_descriptor(0, 16, 256, swizzle=32,
                                                        base_offset=1), _TDB, _TID, _TSM),
         NotImplementedError, ("desc_a", "base_offset=1"))):
    case(6, f"tcgen05_mma-{_id}", _fn, _TI8, exc=_exc, must=_must)
for _id, _fn, _exc, _must in (
        ("swizzle-16", lambda: jaxwarp.make_smem_descriptor(0, 16, 256, swizzle=16),
         ValueError, ("swizzle=16", "allowed")),
        ("start-unaligned", lambda: jaxwarp.make_smem_descriptor(8, 16, 256), ValueError,
         ("start_address=8", "multiple of 16")),
        ("lbo_mode-2", lambda: jaxwarp.make_smem_descriptor(0, 16, 256, lbo_mode=2),
         ValueError, ("lbo_mode=2", "allowed")),
        ("decode-swizzle-mode-5", lambda: jaxwarp.decode_smem_descriptor(
            int(_TDA) | 5 << 61), ValueError, ("swizzle mode 5", "invalid")),
        ("instr-neg-str", lambda: jaxwarp.make_instr_descriptor(_QT, neg_a="x"), TypeError,
         ("neg_a", "bool")),
        ("instr-saturate-f16", lambda: jaxwarp.make_instr_descriptor(_QT, saturate=True),
         ValueError, ("saturate", "kind::i8 only")),
        ("instr-decode-kind", lambda: jaxwarp.decode_instr_descriptor(_TID, "f17"),
         ValueError, ("kind::f17", "allowed")),
        ("instr-decode-too-wide", lambda: jaxwarp.decode_instr_descriptor(1 << 33, "i8"),
         ValueError, ("idesc=", "32 bits"))):
    case(6, f"tcgen05-descriptor-{_id}", _fn, exc=_exc, must=_must, modes=EAGER)


def _tcgen05_params():
    new = {id(c) for c in CATALOGUE[_TC0:]}
    return [p for p in _params() if id(p.values[0]) in new]


@pytest.mark.parametrize("c, mode", _tcgen05_params())
def test_bad_input_tcgen05(c: Case, mode: str):
    test_bad_input(c, mode)


# jaxwarp.mx: block-scaled quantizers (OCP MX, NVFP4). Every argument is checked eagerly
# and under jit, with a message naming it and what is allowed. These cases run in their
# own test below (the catalogue test's parameters are fixed above).

_MX_N0 = len(CATALOGUE)
_MX = np.linspace(-3, 3, 64, dtype=np.float32).reshape(2, 32)


def _mxq(**kw):
    return lambda x: jaxwarp.mx.quantize(x, **kw)


case(6, "mx-fmt-unknown", _mxq(fmt="mxfp9"), _MX, exc=ValueError,
     must=("fmt='mxfp9' is not supported", "allowed", "mxfp8_e4m3", "nvfp4"))
case(6, "mx-fmt-not-a-name", _mxq(fmt=8), _MX, exc=ValueError,
     must=("fmt=8 is not supported", "mxint8"))
case(6, "mx-fmt-traced", lambda x, f: jaxwarp.mx.quantize(x, f), _MX, np.int32(0),
     exc=TypeError, must=("fmt is a static argument",), modes=JIT)
case(6, "mx-block-zero", _mxq(block=0), _MX, exc=ValueError,
     must=("block=0 is not supported", "a positive int"))
case(6, "mx-block-not-dividing", _mxq(block=24), _MX, exc=ValueError,
     must=("block=24", "length 32, not a multiple of 24", "pad x"))
case(6, "mx-block-2d-not-dividing", _mxq(block=(16, 16)), _MX, exc=ValueError,
     must=("block=(16, 16)", "length 2, not a multiple of 16"))
case(6, "mx-block-triple", _mxq(block=(2, 2, 2)), _MX, exc=ValueError,
     must=("block=(2, 2, 2)", "a pair"))
case(6, "mx-block-float", _mxq(block=32.0), _MX, exc=TypeError,
     must=("block must be a Python int",))
case(6, "mx-axis-out-of-range", _mxq(axis=2), _MX, exc=ValueError,
     must=("axis=2 is out of range", "-2 .. 1"))
case(6, "mx-axis-with-2d-block", _mxq(block=(2, 16), axis=0), _MX, exc=ValueError,
     must=("axis=0 with 2D block=(2, 16)", "allowed: axis=-1"))
case(6, "mx-scale-rule-unknown", _mxq(scale_rule="nearest"), _MX, exc=ValueError,
     must=("scale_rule='nearest' is not supported", "'ocp'", "'rceil'"))
case(6, "mx-scale-rule-not-for-nvfp4", _mxq(fmt="nvfp4", scale_rule="ocp"), _MX,
     exc=ValueError, must=("scale_rule='ocp' is not supported", "('nvfp4',)"))
case(6, "mx-mode-unknown", _mxq(mode="rz"), _MX, exc=ValueError,
     must=("mode='rz' is not supported", "('rn', 'rs')"))
case(6, "mx-rs-without-key", _mxq(mode="rs"), _MX, exc=ValueError,
     must=("mode='rs'", "needs a PRNG key"))
case(6, "mx-key-with-rn", _mxq(key=jax.random.key(0)), _MX, exc=ValueError,
     must=("key is only used with mode='rs'",))
case(6, "mx-key-not-a-key", lambda x, k: jaxwarp.mx.quantize(x, mode="rs", key=k), _MX,
     np.zeros(3, np.float32), exc=TypeError, must=("key must be a PRNG key", "shape (3,)"))
case(6, "mx-saturate-false-int8", _mxq(fmt="mxint8", saturate=False), _MX, exc=ValueError,
     must=("saturate=False with fmt='mxint8'", "allowed: saturate=True"))
case(6, "mx-saturate-not-bool", _mxq(saturate="yes"), _MX, exc=ValueError,
     must=("saturate='yes' is not supported", "(True, False)"))
case(6, "mx-x-int32", _mxq(), np.ones((2, 32), np.int32), exc=TypeError,
     must=("x must be a float32", "int32"))
case(1, "mx-x-float64", _mxq(), np.ones((2, 32)), exc=TypeError, regex="x has " + X64,
     modes=CONST)
case(6, "mx-dequantize-array", jaxwarp.mx.dequantize, _MX, exc=TypeError,
     must=("t must be an MXTensor", "jaxwarp.mx.quantize"))
case(6, "mx-fake-quantize-fmt", lambda x: jaxwarp.mx.fake_quantize(x, "e4m3"), _MX,
     exc=ValueError, must=("fmt='e4m3' is not supported", "mxfp8_e4m3"))
case(1, "mx-fake-quantize-x-float64", lambda x: jaxwarp.mx.fake_quantize(x), np.ones(32),
     exc=TypeError, regex="x has " + X64, modes=CONST)


# jaxwarp.mx.matmul: the block-scaled GEMM.
_MA, _MB = np.ones((16, 64), np.float32), np.ones((64, 8), np.float32)


def _mxm(**kw):
    return lambda a, b: jaxwarp.mx.matmul(a, b, **kw)


case(6, "mx-matmul-fmt-unknown", _mxm(operand_format="e4m3"), _MA, _MB, exc=ValueError,
     must=("operand_format='e4m3' is not supported", "mxfp8_e4m3", "nvfp4"))
case(6, "mx-matmul-fmt-mxint8", _mxm(operand_format="mxint8"), _MA, _MB, exc=ValueError,
     must=("operand_format='mxint8' is not supported", "mxfp8_e4m3"))
case(6, "mx-matmul-fmt-both-names", _mxm(operand_format="nvfp4", fmt="nvfp4"), _MA, _MB,
     exc=TypeError, must=("got both operand_format= and its old name fmt=",))
case(6, "mx-matmul-fmt-nvfp4-with-mx", _mxm(operand_format=("nvfp4", "mxfp8_e4m3")), _MA, _MB,
     exc=ValueError, must=("NVFP4 multiplies only NVFP4",))
case(6, "mx-matmul-instruction", _mxm(instruction="wgmma"), _MA, _MB, exc=ValueError,
     must=("instruction='wgmma' is not supported", "('mma_sync', 'tcgen05')"))
case(6, "mx-matmul-arch", _mxm(arch="sm_90"), _MA, _MB, exc=ValueError,
     must=("arch='sm_90'", "sm_100a"))
case(6, "mx-matmul-mode", _mxm(mode="fastest"), _MA, _MB, exc=ValueError,
     must=("mode='fastest' is not supported", "('exact', 'fast')"))
case(6, "mx-matmul-scale-rule-nvfp4", _mxm(operand_format="nvfp4", scale_rule="ocp"), _MA, _MB,
     exc=ValueError, must=("scale_rule='ocp' is not supported", "('nvfp4',)"))
case(6, "mx-matmul-a-int32", _mxm(), _MA.astype(np.int32), _MB, exc=TypeError,
     must=("a must be a float32", "MXTensor", "int32"))
case(6, "mx-matmul-b-1d", _mxm(), _MA, np.ones(64, np.float32), exc=ValueError,
     must=("b must be at least 2-D", "(64,)"))
case(6, "mx-matmul-k-differs", _mxm(), _MA, _MB[:32], exc=ValueError,
     must=("their K differ", "(16, 64)", "(32, 8)"))
case(6, "mx-matmul-k-not-multiple", _mxm(), _MA[:, :40], _MB[:40], exc=ValueError,
     must=("(16, 40)", "multiple of the instruction's k 32", "pad K", "with zeros"))
case(6, "mx-matmul-k-not-multiple-fp4", _mxm(operand_format="nvfp4"), np.ones((16, 96),
     np.float32), np.ones((96, 8), np.float32), exc=ValueError,
     must=("(16, 96)", "multiple of the instruction's k 64", "kind::mxf4nvf4", "pad K"))
case(6, "mx-matmul-mxtensor-wrong-axis",
     lambda a, b: jaxwarp.mx.matmul(a, jaxwarp.mx.quantize(b, axis=-1)), _MA,
     np.ones((64, 32), np.float32), exc=ValueError,
     must=("b must be quantized along K (axis=-2)", "got axis=-1"))
case(1, "mx-matmul-a-float64", _mxm(), np.ones((16, 64)), _MB, exc=TypeError,
     regex="a has " + X64, modes=CONST)

# User-defined element formats (jaxwarp.define_format) in the MX quantizers.
_P3 = jaxwarp.define_format("bad_binary8p3", exponent_bits=5, mantissa_bits=2,
                            specials="p3109")
_U44 = jaxwarp.define_format("bad_ue4m4", exponent_bits=4, mantissa_bits=4, specials="fn",
                             signed=False)
_E3M2N = jaxwarp.define_format("bad_e3m2_none", exponent_bits=3, mantissa_bits=2,
                               specials="none")
case(6, "mx-user-fmt-unsigned", _mxq(fmt=_U44), _MX, exc=ValueError,
     must=("fmt='bad_ue4m4'", "no sign bit", "allowed: a signed format"))
case(6, "mx-user-scale-rule-nvfp4", _mxq(fmt=_P3, scale_rule="nvfp4"), _MX, exc=ValueError,
     must=("scale_rule='nvfp4' is not supported", "'ocp'", "'rceil'"))
case(6, "mx-user-saturate-false-no-specials", _mxq(fmt=_E3M2N, saturate=False), _MX,
     exc=ValueError, must=("saturate=False with fmt='bad_e3m2_none'", "allowed: saturate=True"))
case(6, "mx-user-fmt-name-unknown", _mxq(fmt="binary8p9"), _MX, exc=ValueError,
     must=("fmt='binary8p9' is not supported", "mxfp8_e4m3", "jaxwarp.define_format"))
case(6, "mx-matmul-user-format",
     lambda a, b: jaxwarp.mx.matmul(jaxwarp.mx.quantize(a, _P3), b), _MA, _MB,
     exc=ValueError, must=("a is an MXTensor of the user-defined format 'bad_binary8p3'",
                           "allowed", "mxfp8_e4m3", "jaxwarp.fused_dot"))


def _mx_params():
    new = {id(c) for c in CATALOGUE[_MX_N0:]}
    return [p for p in _params() if id(p.values[0]) in new]


@pytest.mark.parametrize("c, mode", _mx_params())
def test_bad_input_mx(c: Case, mode: str):
    test_bad_input(c, mode)


# emulate with delayed scaling (scaling=jaxwarp.fp8.DelayedScaling): settings and the
# scaling_state argument.
_DS_N0 = len(CATALOGUE)
_DS = jaxwarp.fp8.DelayedScaling(amax_history_len=2)
_F32_32 = np.ones((32, 32), np.float32)


def _ds_emulate(state=None, **kw):
    return lambda a, b: jaxwarp.emulate(lambda x, y: x @ y, mode="fast", **kw)(
        a, b, scaling_state=state)


case(6, "emulate-delayed-format", _ds_emulate(scaling=_DS, operand_format="e5m2"), _F32_32,
     _F32_32, exc=ValueError, must=("operand_format='e5m2'", "fp8_format='e4m3'",
                                    "allowed: operand_format='e4m3' or None"))
case(6, "emulate-delayed-accumulator", _ds_emulate(scaling=_DS, accumulator="f16"), _F32_32,
     _F32_32, exc=ValueError, must=("accumulator='f16'", "allowed: 'f32'"))
case(6, "emulate-delayed-backward-format", _ds_emulate(scaling=_DS, backward_format="e5m2"),
     _F32_32, _F32_32, exc=ValueError, must=("backward_format='e5m2'",
                                              "allowed: backward_format=None"))
case(6, "emulate-delayed-recipe", _ds_emulate(scaling=_DS, recipe="mxfp8"), _F32_32, _F32_32,
     exc=ValueError, must=("recipe='mxfp8'", "allowed: recipe=None"))
case(6, "emulate-delayed-state-not-states", _ds_emulate(state=(1.0, 2.0), scaling=_DS),
     _F32_32, _F32_32, exc=TypeError, must=("scaling_state must be None or the tuple",
                                             "DelayedScalingState"))
case(6, "emulate-delayed-state-history", _ds_emulate(
    state=(jaxwarp.fp8.DelayedScaling(amax_history_len=3).init(),), scaling=_DS), _F32_32,
     _F32_32, exc=ValueError, must=("scaling_state[0] holds an amax_history of shape (3, 2)",
                                    "amax_history_len=2"))
case(6, "emulate-delayed-state-too-long", _ds_emulate(state=(_DS.init(),) * 2, scaling=_DS),
     _F32_32, _F32_32, exc=ValueError, must=("scaling_state has 2 entries",
                                             "1 emulated products"))


@pytest.mark.parametrize("c, mode", [p for p in _params()
                                     if id(p.values[0]) in {id(c) for c in
                                                            CATALOGUE[_DS_N0:]}])
def test_bad_input_emulate_delayed(c: Case, mode: str):
    test_bad_input(c, mode)


# Sparse MMA (mma.sp, wgmma.mma_async.sp) and jaxwarp.sparse: every argument checked with a
# message naming it and what is allowed; their own test below.

_SP0 = len(CATALOGUE)
_QSP = "m16n8k16.row.col.f32.f16.f16.f32"
_SPB, _SPC = np.ones((16, 8), np.float16), np.zeros((16, 8), np.float32)
_SPV, _SPI = np.ones((16, 8), np.float16), np.tile(np.array([0, 2], np.int32), (16, 4))
_SPR = (np.ones((32, 2), np.uint32), np.ones((32, 2), np.uint32), np.zeros((32, 4), np.uint32))
_SPE = np.full(32, 0x44444444, np.uint32)


def _spl(q=_QSP, **kw):
    return lambda a, b, c: jaxwarp.mma_sp_logical(q, a, b, c, **kw)


case(6, "mma_sp-qualifier", _spl("m16n8k16.row.col.f32.e4m3.e4m3.f32"), _SPV, _SPB, _SPC,
     exc=ValueError, must=("qualifier=", "not an mma.sp instruction", "m16n8k64 e4m3/e5m2"),
     modes=EAGER)
case(6, "mma_sp-a-dtype", _spl(indices=_SPI), _SPV.astype(np.float32), _SPB, _SPC,
     exc=TypeError, must=("a of mma.sp", "float16", "float32"))
case(6, "mma_sp-a-shape", _spl(indices=_SPI), np.ones((16, 12), np.float16), _SPB, _SPC,
     exc=ValueError, must=("a of mma.sp", "(..., 16, 8) or (..., 16, 16)"))
case(6, "mma_sp-indices-missing", _spl(), _SPV, _SPB, _SPC, exc=ValueError,
     must=("indices are needed", "compress_2_4"))
case(6, "mma_sp-indices-range", _spl(indices=_SPI + 3), _SPV, _SPB, _SPC, exc=ValueError,
     must=("indices must be in [0, 4)",), modes=EAGER)
case(6, "mma_sp-indices-with-dense-a", _spl(indices=_SPI), np.zeros((16, 16), np.float16),
     _SPB, _SPC, exc=ValueError, must=("indices must be None when a is dense",))
case(5, "mma_sp-dense-a-not-2-4", _spl(), np.ones((16, 16), np.float16), _SPB, _SPC,
     exc=ValueError, must=("x is not 2:4 sparse", "at most 2", "prune_2_4"), modes=EAGER)
case(6, "mma_sp-arch", _spl("m16n8k64.row.col.f32.e4m3.e4m3.f32", arch="sm_80"),
     np.ones((16, 32), jnp.float8_e4m3fn), np.ones((64, 8), jnp.float8_e4m3fn), _SPC,
     exc=ValueError, must=("sm_89", "arch='sm_80'"), modes=EAGER)
case(6, "mma_sp-selector", lambda a, b, c, e: jaxwarp.mma_sp(
    "m16n8k32.row.col.f32.f16.f16.f32", a, b, c, e, selector=2),
    np.ones((32, 4), np.uint32), np.ones((32, 4), np.uint32), np.zeros((32, 4), np.uint32),
    _SPE, exc=ValueError, must=("selector=2", "allowed: (0, 1)"), modes=EAGER)
case(6, "mma_sp-e-shape", lambda a, b, c, e: jaxwarp.mma_sp(_QSP, a, b, c, e), *_SPR,
     np.zeros(16, np.uint32), exc=ValueError, must=("e must be uint32 of shape (..., 32)",))
case(6, "mma_sp-a_regs-shape", lambda a, b, c, e: jaxwarp.mma_sp(_QSP, a, b, c, e),
     np.ones((32, 4), np.uint32), *_SPR[1:], _SPE, exc=TypeError,
     must=("a_regs of mma.sp::ordered_metadata", "(..., 32, 2) uint32"))
case(1, "mma_sp-e-uint64", lambda a, b, c, e: jaxwarp.mma_sp(_QSP, a, b, c, e), *_SPR,
     _SPE.astype(np.uint64), exc=TypeError, regex="e has " + X64, modes=CONST)
case(6, "wgmma_sp-qualifier", lambda a, b, c: jaxwarp.wgmma_sp_logical(
    "m64n8k16.f32.f16.f16", a, b, c), np.ones((64, 8), np.float16),
    np.ones((16, 8), np.float16), np.zeros((64, 8), np.float32), exc=ValueError,
    must=("qualifier=", "not a wgmma.mma_async.sp", "f16 k32"), modes=EAGER)
case(6, "wgmma_sp-e-and-indices", lambda a, b, c: jaxwarp.wgmma_sp_logical(
    "m64n8k32.f32.f16.f16", a, b, c, indices=np.zeros((64, 16), np.int32),
    e=np.zeros(128, np.uint32)), np.ones((64, 16), np.float16),
    np.ones((32, 8), np.float16), np.zeros((64, 8), np.float32), exc=ValueError,
    must=("give indices or e, not both",), modes=EAGER)
case(6, "sparse-prune-group", lambda x: jaxwarp.sparse.prune_2_4(x, group=3),
     np.ones((4, 12), np.float32), exc=ValueError, must=("group=3", "(2, 4, 8)"), modes=EAGER)
case(6, "sparse-prune-shape", lambda x: jaxwarp.sparse.prune_2_4(x),
     np.ones((4, 6), np.float32), exc=ValueError, must=("multiple of group=4", "(4, 6)"))
case(6, "sparse-metadata-k", lambda i: jaxwarp.sparse.metadata_words(i, a_format="f16", k=64),
     np.zeros((16, 32), np.int32), exc=ValueError, must=("k=64", "(16, 32)"), modes=EAGER)
case(6, "sparse-metadata-selector", lambda i: jaxwarp.sparse.metadata_words(
    i, a_format="s8", k=64, selector=1), np.zeros((16, 32), np.int32), exc=ValueError,
    must=("selector=1", "(0,)"), modes=EAGER)
case(6, "sparse-metadata-shape", lambda i: jaxwarp.sparse.metadata_words(
    i, a_format="f16", k=32), np.zeros((16, 8), np.int32), exc=ValueError,
    must=("indices must have shape (..., 16, 16)",))
case(6, "sparse-metadata-float", lambda i: jaxwarp.sparse.metadata_words(
    i, a_format="f16", k=16), np.zeros((16, 8), np.float32), exc=TypeError,
    must=("indices must be integers",))


# to_registers / from_registers with mma.sp opcodes (the sparse register layouts).
_QSPK32 = "mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.f16.f16.f32"
case(6, "to_registers-sparse-unprefixed", lambda x: jaxwarp.to_registers(
    "m16n8k32.row.col.f32.f16.f16.f32", "b", x), np.ones((32, 8), np.float16),
    exc=ValueError, must=("shape m16n8k32 with a type f16 is not allowed", "is an mma.sp shape",
                          f"qualifier={_QSPK32!r}"))
case(6, "to_registers-sparse-opcode", lambda x: jaxwarp.to_registers(
    "mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32", "b", x),
    np.ones((32, 8), np.float16), exc=ValueError,
    must=("not an mma.sp instruction", "m16n8k64 e4m3/e5m2"))
case(6, "to_registers-sparse-b-shape", lambda x: jaxwarp.to_registers(_QSPK32, "b", x),
     np.ones((16, 8), np.float16), exc=ValueError,
     must=(f"b: the logical operand of {_QSPK32}", "dense m16n8k32", "(..., 32, 8)",
           "got (16, 8)"))
case(6, "to_registers-sparse-a-dense", lambda x: jaxwarp.to_registers(_QSPK32, "a", x),
     np.ones((16, 32), np.float16), exc=ValueError,
     must=("stored A", "(..., 16, 16)", "got (16, 32)"))
case(6, "to_registers-sparse-dtype", lambda x: jaxwarp.to_registers(_QSPK32, "c", x),
     np.ones((16, 8), np.float16), exc=TypeError,
     must=(f"c: the logical f32 operand of {_QSPK32}", "float32", "got float16"))
case(6, "to_registers-sparse-use", lambda x: jaxwarp.to_registers(_QSPK32, "e", x),
     np.ones((16, 8), np.float16), exc=ValueError, must=("use", "'e'"))
case(6, "from_registers-sparse-regs", lambda r: jaxwarp.from_registers(_QSPK32, "a", r),
     np.ones((32, 2), np.uint32), exc=TypeError,
     must=(f"a registers of {_QSPK32}", "(..., 32, 4) uint32", "shape (32, 2)"))
case(6, "to_registers-wgmma_sp-record", lambda x: jaxwarp.to_registers(
    jaxwarp.parse_wgmma_sp("m64n8k32.f32.f16.f16"), "a", x), np.ones((64, 16), np.float16),
    exc=TypeError, must=("wgmma.mma_async.sp", "not a warp-level instruction"))
case(6, "to_registers-qualifier-type", lambda x: jaxwarp.to_registers(3, "a", x),
     np.ones((16, 16), np.float16), exc=TypeError, must=("qualifier must be a str", "int"))


def _sparse_params():
    new = {id(c) for c in CATALOGUE[_SP0:]}
    return [p for p in _params() if id(p.values[0]) in new]


@pytest.mark.parametrize("c, mode", _sparse_params())
def test_bad_input_sparse(c: Case, mode: str):
    test_bad_input(c, mode)


_SP1 = len(CATALOGUE)
case(6, "matmul-sparsity", lambda a, b: jaxwarp.matmul(a, b, sparsity="1:2"),
     np.ones((16, 32), np.float32), np.ones((32, 8), np.float32), exc=ValueError,
     must=("sparsity='1:2'", "('2:4',)"), modes=EAGER)
case(6, "matmul-sparsity-k", lambda a, b: jaxwarp.matmul(a, b, sparsity="2:4"),
     np.ones((16, 40), np.float32), np.ones((40, 8), np.float32), exc=ValueError,
     must=("K = 40", "[16, 32]"), modes=EAGER)
case(6, "matmul-sparsity-tile", lambda a, b: jaxwarp.matmul(a, b, sparsity="2:4",
                                                            tile=(16, 8, 16)),
     np.ones((16, 32), np.float32), np.ones((32, 8), np.float32), exc=ValueError,
     must=("sparsity='2:4' takes no tile",), modes=EAGER)
_QWSP, _WSPB = "m64n8k32.f32.f16.f16", jaxwarp.make_descriptor(2048, 128, 512)
_WSP = (np.full((128, 4), 0x3C003C00, np.uint32), np.zeros(4096, np.uint8),
        np.zeros((128, 4), np.float32), np.full(128, 0x44444444, np.uint32))


def _wsp(q=_QWSP, desc_b=_WSPB, **kw):
    return lambda a, smem, d, e: jaxwarp.wgmma_sp(q, a, desc_b, smem, d, e, **kw)


case(6, "wgmma_sp-e-shape", _wsp(), *_WSP[:3], _WSP[3][:64], exc=ValueError,
     must=("e must be uint32 of shape (..., 128)", "(64,)"))
case(6, "wgmma_sp-selector", _wsp("m64n8k64.f32.e4m3.e4m3", selector=1), *_WSP,
     exc=ValueError, must=("selector=1", "allowed: (0,)"), modes=EAGER)
case(6, "wgmma_sp-desc-b-range", _wsp(), _WSP[0], np.zeros(1024, np.uint8), *_WSP[2:],
     exc=ValueError, must=("operand b", "beyond smem of 1024 bytes"))
case(6, "wgmma_sp-a-shape", _wsp(), _WSP[0][:, :2], *_WSP[1:], exc=ValueError,
     must=("a_regs must have shape (..., 128, 4)",))
_W24 = np.tile(np.array([[1], [0], [0], [2]], np.float32), (2, 4))
case(6, "as_2_4-not-2-4", lambda w: jaxwarp.sparse.as_2_4(w), np.ones((8, 4), np.float32),
     exc=ValueError, must=("w is not 2:4 sparse along axis 0", "prune_2_4"), modes=EAGER)
case(6, "as_2_4-axis", lambda w: jaxwarp.sparse.as_2_4(w, axis=2), _W24, exc=ValueError,
     must=("axis=2 is not an axis of w", "(8, 4)"), modes=EAGER)
case(6, "as_2_4-length", lambda w: jaxwarp.sparse.as_2_4(w), _W24[:6], exc=ValueError,
     must=("axis 0 (length 6)", "multiple of 4"))
case(6, "as_2_4-int", lambda w: jaxwarp.sparse.as_2_4(w), _W24.astype(np.int32),
     exc=TypeError, must=("w must be a float array", "int32"))
case(6, "emulate-sparse-both", lambda x, w: jaxwarp.emulate(
    lambda x, w: jaxwarp.sparse.as_2_4(x, axis=1) @ jaxwarp.sparse.as_2_4(w),
    operand_format="f16", instruction="mma_sync")(x, w), _W24.T, _W24, exc=ValueError,
    must=("marks both operands", "mark one"), modes=EAGER)
case(6, "emulate-sparse-tile", lambda x, w: jaxwarp.emulate(
    lambda x, w: x @ jaxwarp.sparse.as_2_4(w), operand_format="f16", instruction="mma_sync",
    tile=(16, 8, 16))(x, w), _W24.T, _W24, exc=ValueError,
    must=("sparsity='2:4'", "tile=(16, 8, 16)"), modes=EAGER)


def _sparse_matmul_params():
    new = {id(c) for c in CATALOGUE[_SP1:]}
    return [p for p in _params() if id(p.values[0]) in new]


@pytest.mark.parametrize("c, mode", _sparse_matmul_params())
def test_bad_input_sparse_matmul(c: Case, mode: str):
    test_bad_input(c, mode)


# jaxwarp.cg: cooperative groups over one warp. Static sizes are checked at trace time,
# groups and ops are checked by type, values by the reduce/scan dtype rule.

_CG_N0 = len(CATALOGUE)


def _cg_tile4():
    return jaxwarp.cg.thread_block_tile(4)


for _n in (0, 3, 64):
    case(6, f"cg-tile-size-{_n}", lambda n=_n: jaxwarp.cg.thread_block_tile(n), exc=ValueError,
         must=(f"tile size {_n} is not supported", "allowed: (1, 2, 4, 8, 16, 32)"), modes=EAGER)
case(6, "cg-tile-size-traced", lambda n: jaxwarp.cg.thread_block_tile(n), np.int32(4),
     exc=TypeError, must=("size is a static argument",), modes=JIT)
case(6, "cg-subtile-not-smaller",
     lambda: jaxwarp.cg.tiled_partition(jaxwarp.cg.thread_block_tile(8), 8), exc=ValueError,
     must=("tile size 8 must be smaller", "parent tile's 8"), modes=EAGER)
case(6, "cg-tiled-partition-parent", lambda: jaxwarp.cg.tiled_partition("block", 4),
     exc=TypeError, must=("parent must be a jaxwarp.cg group", "str"), modes=EAGER)
case(6, "cg-block-threads-48", lambda: jaxwarp.cg.this_thread_block(48), exc=ValueError,
     must=("threads=48", "multiples of 32 in 32 .. 1024"), modes=EAGER)
case(6, "cg-block-warp-2-of-2", lambda: jaxwarp.cg.this_thread_block(64, warp=2),
     exc=ValueError, must=("warp=2", "allowed: 0 .. 1"), modes=EAGER)
case(6, "cg-reduce-op-unknown", lambda v: jaxwarp.cg.reduce(_cg_tile4(), v, "mul"), i32,
     exc=ValueError, must=("op='mul' is not supported", "'plus'", "'bit_xor'"))
case(6, "cg-reduce-op-object", lambda v: jaxwarp.cg.reduce(_cg_tile4(), v, 3), i32,
     exc=TypeError, must=("op must be one of", "int"))
case(6, "cg-reduce-bitop-float", lambda v: jaxwarp.cg.reduce(_cg_tile4(), v, "bit_and"), zf32,
     exc=TypeError, must=("op='bit_and' needs an integer value", "float32"))
case(6, "cg-scan-dtype-int8", lambda v: jaxwarp.cg.inclusive_scan(_cg_tile4(), v),
     i32.astype(np.int8), exc=TypeError, must=("value has dtype int8", "allowed", "float16"))
case(6, "cg-reduce-not-a-group", lambda v: jaxwarp.cg.reduce("tile", v, "plus"), i32,
     exc=TypeError, must=("reduce: group must be a jaxwarp.cg group", "str"))
case(7, "cg-reduce-lane-axis", lambda v: jaxwarp.cg.exclusive_scan(_cg_tile4(), v),
     np.zeros(16, np.int32), exc=ValueError, must=("value must have a leading lane axis",))
case(1, "cg-reduce-int64", lambda v: jaxwarp.cg.reduce(_cg_tile4(), v, "plus"), i64,
     exc=TypeError, regex="value has " + X64, modes=CONST)
case(6, "cg-labeled-float-label", lambda lab: jaxwarp.cg.labeled_partition(_cg_tile4(), lab),
     zf32, exc=TypeError, must=("label must be a (32,) integer array", "float32"))
case(6, "cg-binary-pred-float", lambda p: jaxwarp.cg.binary_partition(_cg_tile4(), p), zf32,
     exc=TypeError, must=("pred must be a (32,) bool or integer array", "float32"))
case(6, "cg-shfl-xor-coalesced", lambda v: jaxwarp.cg.coalesced_threads().shfl_xor(v, 1), i32,
     exc=TypeError, must=("shfl_xor is a method of thread_block_tile only",))


def _cg_params():
    new = {id(c) for c in CATALOGUE[_CG_N0:]}
    return [p for p in _params() if id(p.values[0]) in new]


@pytest.mark.parametrize("c, mode", _cg_params())
def test_bad_input_cg(c: Case, mode: str):
    test_bad_input(c, mode)


# --------------------------------------------------------------------------------------
# No silent wrong answer (microscaling, sparse and descriptor APIs): capture files whose
# labels or keys the command used to accept or blame on the wrong key.

def _relabel(src: str, old: str, new: str, *, keep: str) -> bytes:
    with np.load(DATA / src) as z:
        return _npz(**{k.replace(old, new): z[k] for k in z.files if k.startswith(keep)})


def _sparse_group(base: str, new_base: str | None = None, **replace) -> bytes:
    with np.load(DATA / "h100_sparse.npz") as z:
        out = {k.replace(base, new_base or base): z[k] for k in z.files if k.startswith(base)}
    for field, fn in replace.items():
        key = f"{new_base or base}/{field}"
        out[key] = fn(out[key])
    return _npz(**out)


_SPG = "sp/bf16.bf16.f32f32.m16n8k16.ordered.sel0"
_UNDEF = {"undef/cfg": np.zeros((1, 3), np.int32), "undef/x": np.zeros((1, 32), np.uint32),
          "undef/out": np.zeros((1, 32, 4), np.uint32)}
TRUST_FILE_CASES = [
    FileCase("golden-mma-block-scale-on-blackwell", _relabel(
        "mmasim_block_scale_sample.npz", "/RTX_Blackwell/", "/Blackwell/",
        keep="golden/mma_block_scale/"), 2,
        ("Blackwell (sm_100a) cannot issue block-scaled mma_sync", "sm_120a",
         "(RTX_Blackwell)")),
    FileCase("golden-tcgen05-block-scale-on-rtx-blackwell", _relabel(
        "mmasim_block_scale_sample.npz", "/Blackwell/", "/RTX_Blackwell/",
        keep="golden/tcgen05_block_scale/"), 2,
        ("RTX_Blackwell (sm_120a) cannot issue block-scaled tcgen05", "sm_100a",
         "(Blackwell)")),
    FileCase("sparse-a-trials-differ", _sparse_group(_SPG, A=lambda a: a[:5]), 2,
             ("A, B, C and D must hold the same number of trials",
              "'A': 5, 'B': 12"), must_not=("/meta must be",)),
    FileCase("sparse-chain-x0", _sparse_group(_SPG, f"chain/{_SPG}x0"), 2,
             ("a chain key needs x{steps} with steps >= 2", "got x0")),
    FileCase("sparse-steps-outside-chain", _sparse_group(_SPG, f"{_SPG}x3"), 2,
             ("x3: x{steps} belongs to chain keys (chain/sp/...) only",)),
    FileCase("undef-without-status", _npz(**_UNDEF), 2,
             ("need keys", "missing ['undef/status']"), must_not=("no handler understands",)),
]
FILE_CASES.extend(TRUST_FILE_CASES)


@pytest.mark.parametrize("fc", [pytest.param(fc, id=fc.id) for fc in TRUST_FILE_CASES])
def test_conformance_bad_file_trust(fc: FileCase, conformance_runs):
    test_conformance_bad_file(fc, conformance_runs)


def test_conformance_json_into_a_folder_is_an_error(tmp_path, capsys):
    status = conformance.main([str(DATA / "h100_cg.npz"), "--json", str(tmp_path)])
    err = capsys.readouterr().err
    assert status == 2
    assert f"--json {tmp_path} is a folder" in err and "conformance.json" in err


# Bad inputs that used to give a silent wrong answer or an unclear error (microscaling,
# sparse, descriptors, recipes, cooperative groups); their own test at the end.
_TR0 = len(CATALOGUE)
_BSQ = "m128n8k32.kind::mxf8f6f4.{}.f32.e4m3.e4m3.{}"
for _blk, _sc in (("block32", "ue4m3"), ("block24", "ue8m0"), ("block16", "ue8m0"),
                  ("block7", "ue8m0"), ("blockx", "ue8m0")):
    case(3, f"block-scale-descriptor-{_blk}-{_sc}",
         functools.partial(jaxwarp.make_block_scale_instr_descriptor, _BSQ.format(_blk, _sc)),
         exc=ValueError, must=(f"no {_blk} with {_sc} scales",
                               "allowed (block, scale type): block32.ue8m0"), modes=EAGER)
case(6, "block-scale-descriptor-mxf4-e4m3", lambda: jaxwarp.make_block_scale_instr_descriptor(
    "m128n8k64.kind::mxf4.block32.f32.e4m3.e4m3.ue8m0"), exc=ValueError,
     must=("A type 'e4m3' is not a type of tcgen05 kind::mxf4", "allowed: ('e2m1',)"),
     modes=EAGER)
case(3, "block-scale-descriptor-nvf4-block16-ue4m3-ok-block8", lambda: (
    jaxwarp.make_block_scale_instr_descriptor(
        "m128n8k64.kind::mxf4nvf4.block8.f32.e2m1.e2m1.ue4m3")), exc=ValueError,
     must=("no block8 with ue4m3", "block16.ue4m3"), modes=EAGER)
_DEC = (np.float32([[3, 4]]),)
for _bad in (4, -1):
    case(3, f"decompress-index-{_bad}", jaxwarp.sparse.decompress_2_4, *_DEC,
         np.int32([[1, _bad]]), exc=ValueError,
         must=(f"indices holds {_bad} at index (0, 1)", "allowed: 0 .. 3"), modes=EAGER)
case(3, "decompress-index-float", jaxwarp.sparse.decompress_2_4, *_DEC,
     np.float32([[1.5, 2.7]]), exc=TypeError, must=("indices must be integers", "float32"))
case(3, "metadata-f16-index-5", lambda i: jaxwarp.sparse.metadata_words(
    i, a_format="f16", k=32), np.full((16, 16), 5, np.int32), exc=ValueError,
     must=("indices holds 5 at index (0, 0)", "allowed: 0 .. 3"), modes=EAGER)
case(3, "metadata-tf32-index-2", lambda i: jaxwarp.sparse.metadata_words(
    i, a_format="tf32", k=16), np.full((16, 8), 2, np.int32), exc=ValueError,
     must=("indices holds 2 at index (0, 0)", "allowed: 0 .. 1", "tf32"), modes=EAGER)
_MXT = jaxwarp.mx.MXTensor
_E8 = np.zeros((2, 32), jnp.float8_e4m3fn)


def _mx_hand(el, sc, ts=None, fmt="mxfp8_e4m3", block=32, axis=-1):
    return lambda e, s: jaxwarp.mx.dequantize(_MXT(e, s, ts, fmt, block, axis))


case(3, "mx-hand-scales-per-16", _mx_hand(None, None), _E8, np.zeros((2, 2), np.uint8),
     exc=ValueError, must=("t.scales has dtype uint8 and shape (2, 2)",
                           "needs uint8 scales of shape (2, 1)"))
case(3, "mx-hand-f32-elements", _mx_hand(None, None), np.zeros((2, 32), np.float32),
     np.zeros((2, 1), np.uint8), exc=TypeError,
     must=("t.elements of shape (2, 32) has dtype float32", "t.fmt='mxfp8_e4m3'",
           "float8_e4m3fn"))
case(3, "mx-hand-block16-one-scale", _mx_hand(None, None, block=16), _E8,
     np.zeros((2, 1), np.uint8), exc=ValueError,
     must=("block=16", "needs uint8 scales of shape (2, 2)"))
case(6, "mx-hand-nvfp4-no-tensor-scale", _mx_hand(None, None, fmt="nvfp4", block=16),
     np.zeros((2, 32), np.uint8), np.zeros((2, 2), np.uint8), exc=ValueError,
     must=("t.tensor_scale is None", "t.fmt='nvfp4' needs its float32 per-tensor scale"))
case(6, "mx-hand-mx-with-tensor-scale", _mx_hand(None, None, ts=np.float32(1)), _E8,
     np.zeros((2, 1), np.uint8), exc=ValueError,
     must=("t.tensor_scale must be None for t.fmt='mxfp8_e4m3'",))
case(6, "mx-matmul-hand-mxtensor", lambda e, s: jaxwarp.mx.matmul(
    _MXT(e, s, None, "mxfp8_e4m3", 32, -1), np.ones((64, 8), np.float32)),
     np.zeros((16, 64), jnp.float8_e4m3fn), np.zeros((16, 1), np.uint8), exc=ValueError,
     must=("a.scales", "needs uint8 scales of shape (16, 2)"))
_NV = ("x", "nvfp4", "nvfp4", "nvfp4")
case(6, "recipe-weight-block-1-tuple", lambda: jaxwarp.mx.Recipe(*_NV, weight_block=(16,)),
     exc=ValueError, must=("Recipe.weight_block=(16,) is not supported",
                           "a pair of positive ints (rows, columns)"), modes=EAGER)
for _f in ("stochastic_gradients", "rht_wgrad"):
    case(6, f"recipe-{_f}-str", functools.partial(jaxwarp.mx.Recipe, *_NV, **{_f: "yes"}),
         exc=ValueError, must=(f"Recipe.{_f}='yes' is not supported", "(True, False)"),
         modes=EAGER)
case(6, "cg-invoke-one-broadcast-fn-not-callable",
     lambda v: jaxwarp.cg.invoke_one_broadcast(jaxwarp.cg.thread_block_tile(4), 3, v), i32,
     exc=TypeError, must=("invoke_one_broadcast: fn must be callable", "got int 3"))
case(6, "lane_while-grad-without-max-trips", jax.grad(lambda x: jaxwarp.lane_while(
    lambda s: s < 3.0, lambda s: s * 1.5, x).sum()), np.ones(32, np.float32),
     exc=ValueError, must=("max_trips=None is a lax.while_loop", "pass max_trips=N"),
     modes=EAGER)
case(6, "grouped_value_and_grad-mesh-str", _grouped(2, mesh="cpu"), exc=TypeError,
     must=("mesh must be None or a jax.sharding.Mesh", "jaxwarp.batch_mesh", "str 'cpu'"),
     modes=EAGER)
for _dispatch in ("spmd", "per_device"):
    case(6, f"grouped_value_and_grad-batch-keywords-{_dispatch}",
         lambda w, x, d=_dispatch: jaxwarp.grouped_value_and_grad(
             _mse, 2, mesh=_MESH1, dispatch=d)(w, x=x),
         np.ones(3, np.float32), np.ones((4, 3), np.float32), exc=TypeError,
         must=("takes the batch as positional arguments after params", "['x']"),
         modes=EAGER)
_FP4_WRONG_LOW = np.full((16, 32), 0x3C, np.uint8)  # e2m1 in bits 5:2: not bits 3:0
case(3, "mma_sync_ptx-e2m1-bits-5-2", lambda a: jaxwarp.mma_sync_ptx_logical(
    "m16n8k32.row.col.kind::f8f6f4.f32.e2m1.e2m1.f32", a, np.full((32, 8), 2, np.uint8),
    np.zeros((16, 8), np.float32), arch="sm_120a"), _FP4_WRONG_LOW, exc=ValueError,
     must=("a holds 60 at index (0, 0)", "e2m1 codes in bits 3:0",
           "tcgen05_mma_logical takes it in bits 5:2"), modes=EAGER)
case(3, "tcgen05-e2m1-bits-3-0", lambda a: jaxwarp.tcgen05_mma_logical(
    "m64n8k32.kind::f8f6f4.f32.e2m1.e2m1", a, np.full((32, 8), 8, np.uint8),
    np.zeros((64, 8), np.float32)), np.full((64, 32), 0x2, np.uint8), exc=ValueError,
     must=("a holds 2 at index (0, 0)", "e2m1 codes in bits 5:2",
           "mma_sync_ptx_logical and mma_block_scale_logical take it in bits 3:0"),
     modes=EAGER)
case(3, "block-scale-e2m1-bits-5-2", lambda a: jaxwarp.mma_block_scale_logical(
    a, np.full((64, 8), 2, np.uint8), np.zeros((16, 8), np.float32),
    np.full((16, 2), 127, np.uint8), np.full((2, 8), 127, np.uint8), a_format="e2m1",
    kind="mxf4"), np.full((16, 64), 0x3C, np.uint8), exc=ValueError,
     must=("e2m1 codes in bits 3:0", "mma_block_scale_logical takes e2m1 there"), modes=EAGER)
case(3, "mma_sync_ptx-e3m2-bit-7", lambda b: jaxwarp.mma_sync_ptx_logical(
    "m16n8k32.row.col.kind::f8f6f4.f32.e3m2.e3m2.f32", np.ones((16, 32), np.uint8), b,
    np.zeros((16, 8), np.float32), arch="sm_120a"), np.full((32, 8), 0x81, np.uint8),
     exc=ValueError, must=("b holds 129", "e3m2 codes in bits 5:0"), modes=EAGER)
# (the cases above run in test_bad_input_trust)


def _trust_params():
    new = {id(c) for c in CATALOGUE[_TR0:]}
    return [p for p in _params() if id(p.values[0]) in new]


@pytest.mark.parametrize("c, mode", _trust_params())
def test_bad_input_trust(c: Case, mode: str):
    test_bad_input(c, mode)


def test_traced_sparse_indices_are_reported_never_a_number():
    """Out-of-range indices that are traced: jaxwarp.checked reports them; outside it
    decompress_2_4 drops the element, metadata_words keeps a field's bits, and
    mma_sp_logical / wgmma_sp_logical give NaN rows, never a plausible D."""
    dec = jax.jit(jaxwarp.sparse.decompress_2_4)
    v, bad = np.float32([[3, 4]]), np.int32([[1, 4]])
    err, _ = jaxwarp.checked(dec)(v, bad)
    assert "indices has value 4 at flat index 1; allowed: 0 .. 3" in err.get()
    np.testing.assert_array_equal(dec(v, bad), [[0, 3, 0, 0]])
    np.testing.assert_array_equal(dec(v, np.int32([[1, -1]])), [[0, 3, 0, 0]])  # no wrap
    meta = jax.jit(lambda i: jaxwarp.sparse.metadata_words(i, a_format="f16", k=32))
    err, _ = jaxwarp.checked(meta)(np.full((16, 16), 5, np.int32))
    assert "indices has value 5" in err.get()
    assert int(meta(np.full((16, 16), 5, np.int32))[0]) == 0x55555555  # no spill
    q = "m16n8k16.row.col.f32.f16.f16.f32"
    f = jax.jit(lambda a, b, c, i: jaxwarp.mma_sp_logical(q, a, b, c, indices=i))
    idx = np.tile(np.array([0, 2], np.int32), (16, 4))
    idx[3, 1] = 7
    args = (np.ones((16, 8), np.float16), np.ones((16, 8), np.float16),
            np.zeros((16, 8), np.float32), idx)
    err, _ = jaxwarp.checked(f)(*args)
    assert "indices has value 7 at flat index 25; allowed: 0 .. 3" in err.get()
    d = np.asarray(f(*args))
    assert np.isnan(d[3]).all() and not np.isnan(np.delete(d, 3, axis=0)).any()
    wq = "m64n8k32.f32.f16.f16"
    g = jax.jit(lambda a, b, c, i: jaxwarp.wgmma_sp_logical(wq, a, b, c, indices=i))
    widx = np.tile(np.array([0, 2], np.int32), (64, 8))
    widx[10, 0] = -1
    d = np.asarray(g(np.ones((64, 16), np.float16), np.ones((32, 8), np.float16),
                     np.zeros((64, 8), np.float32), widx))
    assert np.isnan(d[10]).all() and not np.isnan(np.delete(d, 10, axis=0)).any()


@pytest.mark.parametrize("fmt", ["mxfp8_e4m3", "mxint8", "nvfp4"])
def test_mx_empty_batches_give_empty_results(fmt):
    for shape, kw in (((0, 32), {}), ((3, 0), {}), ((0, 32), {"block": (16, 16)})):
        x = np.zeros(shape, np.float32)
        t = jaxwarp.mx.quantize(x, fmt, **kw)
        assert t.elements.shape == shape and jaxwarp.mx.dequantize(t).shape == shape
        assert jax.jit(lambda v, kw=kw: jaxwarp.mx.fake_quantize(v, fmt, **kw))(x).shape == shape


def test_traced_codes_outside_their_bits_are_reported_in_checked_mode():
    q = "m16n8k32.row.col.kind::f8f6f4.f32.e2m1.e2m1.f32"
    f = jax.jit(lambda a: jaxwarp.mma_sync_ptx_logical(
        q, a, np.full((32, 8), 2, np.uint8), np.zeros((16, 8), np.float32), arch="sm_120a"))
    err, _ = jaxwarp.checked(f)(np.full((16, 32), 0x3C, np.uint8))
    assert "a has value 60 at flat index 0" in err.get() and "bits 3:0" in err.get()
    err, d = jaxwarp.checked(f)(np.full((16, 32), 0xC, np.uint8))
    assert err.get() is None and float(d[0, 0]) == -64.0  # the valid result, unchanged


def test_lane_while_without_max_trips_still_differentiates_where_it_can():
    def f(x, **kw):
        s = (jnp.zeros(32), jnp.argmax(x) * jnp.ones(32, jnp.int32))  # no float gradient
        return jaxwarp.lane_while(lambda s: s[1] < 3, lambda s: (s[0] * 1.5, s[1] + 1), s,
                                  **kw)[0].sum() + x.sum()

    np.testing.assert_array_equal(jax.grad(f)(jnp.ones(32)), np.ones(32, np.float32))
    g = jax.jvp(lambda x: jaxwarp.lane_while(lambda s: s < 3.0, lambda s: s * 1.5, x),
                (jnp.ones(32),), (jnp.ones(32),))[1]  # forward mode needs no max_trips
    np.testing.assert_array_equal(g, np.full(32, 3.375, np.float32))


# --------------------------------------------------------------------------------------
# Pallas kernels: the example kernel and the SM count of jaxwarp.kernels, and a kernel's
# products under emulate that the target's compiler cannot issue or the model lacks.
_PK0 = len(CATALOGUE)
_BF64 = np.ones((64, 64), jnp.bfloat16)


def _kernel(**kw):
    return lambda a, b: jaxwarp.kernels.triton_matmul(a, b, interpret=True, **kw)


case(6, "kernels-triton-form", _kernel(form="tile"), _BF64, _BF64, exc=ValueError,
     must=("form='tile' is not supported", "allowed", "'tiled'"))
case(6, "kernels-triton-block", _kernel(block=(48, 16, 32)), _BF64, _BF64, exc=ValueError,
     must=("M=64 is not a multiple of its block 48",))
case(6, "kernels-triton-dtype", _kernel(), np.ones((64, 64), np.int8),
     np.ones((64, 64), np.int8), exc=TypeError, must=("a has dtype int8", "allowed"))
case(6, "kernels-triton-mixed", _kernel(), _BF64, np.ones((64, 64), np.float16),
     exc=TypeError, must=("one dtype", "bfloat16", "float16"))
case(6, "kernels-triton-precision", _kernel(precision="fastest"), _BF64, _BF64,
     exc=ValueError, must=("precision='fastest' is not supported", "HIGHEST"))
case(6, "kernels-sm-count", lambda n: jaxwarp.kernels.target_sm_count(n).__enter__(), 0,
     exc=ValueError, must=("num_sms must be a positive int",))
case(6, "emulate-kernel-format", lambda a, b: jaxwarp.emulate(
    _kernel(block=(64, 64, 32)), operand_format="f16", arch="sm_90a")(a, b), _BF64, _BF64,
     exc=jaxwarp.UnsupportedProductError, must=("operand_format='f16'", "bfloat16"))
case(6, "emulate-kernel-arch", lambda a, b: jaxwarp.emulate(
    _kernel(block=(64, 64, 32)), arch="sm_100a")(a, b), _BF64, _BF64,
     exc=jaxwarp.UnsupportedProductError, must=("sm_100a",))
# (the cases above run in test_bad_input_pallas)


def _pallas_params():
    new = {id(c) for c in CATALOGUE[_PK0:]}
    return [p for p in _params() if id(p.values[0]) in new]


@pytest.mark.parametrize("c, mode", _pallas_params())
def test_bad_input_pallas(c: Case, mode: str):
    test_bad_input(c, mode)


# AMD matrix cores: jaxwarp.mfma_logical. Architecture, instruction and operand types are
# checked eagerly and under jit, each message listing what is allowed.

_MF0 = len(CATALOGUE)
_MF = (np.ones((16, 16), np.float16), np.ones((16, 16), np.float16),
       np.zeros((16, 16), np.float32))


def _mfma(suffix="f32_16x16x16_f16", **kw):
    return lambda a, b, c: jaxwarp.mfma_logical(suffix, a, b, c, **kw)


case(6, "mfma-arch-unknown", _mfma(arch="gfx1100"), *_MF, exc=ValueError,
     must=("arch='gfx1100'", "allowed", "gfx942", "CDNA3", "MI300"))
case(6, "mfma-arch-nvidia", _mfma(arch="sm_90a"), *_MF, exc=ValueError,
     must=("arch='sm_90a'", "allowed", "gfx908"))
case(6, "mfma-suffix-unknown", _mfma("f32_16x16x17_f16"), *_MF, exc=ValueError,
     must=("suffix='f32_16x16x17_f16'", "allowed", "v_mfma_f32_16x16x16_f16"))
case(6, "mfma-suffix-other-generation", _mfma("f32_16x16x32_fp8_fp8", arch="gfx90a"), *_MF,
     exc=ValueError, must=("not an MFMA of CDNA2", "it is on ['CDNA3']", "allowed",
                           "v_mfma_f32_16x16x16bf16_1k"))
case(6, "mfma-suffix-1k-on-cdna1", _mfma("f32_32x32x8bf16_1k", arch="CDNA1"), *_MF,
     exc=ValueError, must=("not an MFMA of CDNA1", "CDNA2", "allowed"))
case(6, "mfma-a-format", _mfma(), np.ones((16, 16), np.float32), *_MF[1:], exc=TypeError,
     must=("a of v_mfma_f32_16x16x16_f16", "f16", "float16", "uint16", "float32"))
case(6, "mfma-fp8-format", _mfma("f32_16x16x32_fp8_bf8"), np.ones((16, 32), np.float16),
     np.ones((32, 16), np.uint8), _MF[2], exc=TypeError,
     must=("a of v_mfma_f32_16x16x32_fp8_bf8", "e4m3fnuz", "float8_e4m3fnuz", "uint8"))
case(6, "mfma-c-format", _mfma(), *_MF[:2], np.zeros((16, 16), np.float16), exc=TypeError,
     must=("c of v_mfma_f32_16x16x16_f16", "f32", "float32"))
case(6, "mfma-b-shape", _mfma(), _MF[0], np.ones((8, 16), np.float16), _MF[2],
     exc=ValueError, must=("b of v_mfma_f32_16x16x16_f16", "(..., 16, 16)", "(8, 16)"))
case(6, "mfma-batch", _mfma(), np.ones((2, 16, 16), np.float16),
     np.ones((3, 16, 16), np.float16), _MF[2], exc=ValueError,
     must=("batch dims", "do not broadcast"))
case(6, "mfma-f64-no-x64", _mfma("f64_4x4x4_4b_f64"), np.ones((4, 4), np.float32),
     np.ones((4, 4), np.float32), np.ones((4, 4), np.float32), exc=RuntimeError,
     must=("v_mfma_f64_4x4x4_4b_f64", "jax_enable_x64"))
case(6, "mfma-suffix-traced", lambda a, b, c, s: jaxwarp.mfma_logical(s, a, b, c), *_MF,
     np.int32(0), exc=TypeError, must=("suffix is a static argument",), modes=JIT)
case(6, "mfma-arch-traced", lambda a, b, c, s: jaxwarp.mfma_logical(
    "f32_16x16x16_f16", a, b, c, arch=s), *_MF, np.int32(0), exc=TypeError,
     must=("arch is a static argument",), modes=JIT)
for _i, _arg in enumerate(("a", "b", "c")):
    case(1, f"mfma-{_arg}-float64", lambda x, _i=_i: jaxwarp.mfma_logical(
        "f32_16x16x16_f16", *(x if j == _i else v for j, v in enumerate(_MF))),
        _MF[_i].astype(np.float64), exc=TypeError, regex=f"{_arg} has " + X64, modes=CONST)


def _mfma_params():
    new = {id(c) for c in CATALOGUE[_MF0:]}
    return [p for p in _params() if id(p.values[0]) in new]


@pytest.mark.parametrize("c, mode", _mfma_params())
def test_bad_input_mfma(c: Case, mode: str):
    test_bad_input(c, mode)


_FZ0 = len(CATALOGUE)
case(6, "to_fnuz-fmt", lambda x: jaxwarp.to_fnuz(x, "e5m2"), np.ones(4, np.float32),
     exc=ValueError, must=("fmt='e5m2'", "allowed", "e5m2fnuz"))
case(6, "to_fnuz-saturate", lambda x: jaxwarp.to_fnuz(x, saturate=1), np.ones(4, np.float32),
     exc=TypeError, must=("saturate must be a bool",))
case(6, "to_fnuz-int", lambda x: jaxwarp.to_fnuz(x), np.ones(4, np.int32), exc=TypeError,
     must=("x must be a float32 array",))


@pytest.mark.parametrize("c, mode", [p for p in _params()
                                     if id(p.values[0]) in {id(c) for c in CATALOGUE[_FZ0:]}])
def test_bad_input_to_fnuz(c: Case, mode: str):
    test_bad_input(c, mode)


# --------------------------------------------------------------------------------------
# Class 6, continued: emulate and matmul on the AMD targets (arch="gfx942", ...: every
# product matmul(..., instruction="mfma")): settings the MFMA GEMM does not take.

_EA0 = len(CATALOGUE)
case(6, "emulate-amd-format", _emulate(operand_format="e4m3", arch="gfx942"), F32_16, F32_16,
     exc=ValueError, must=("operand_format='e4m3'", "instruction='mfma'", "allowed",
                           "'e4m3fnuz'", "'bf16'"))
case(6, "emulate-amd-tf32-on-cdna2", _emulate(operand_format="tf32", arch="gfx90a"), F32_16,
     F32_16, exc=ValueError, must=("operand_format='tf32'", "CDNA2", "allowed", "'f16'"))
case(6, "emulate-amd-backward-format", _emulate(operand_format="f16", arch="gfx908",
                                                backward_format="tf32"), F32_16, F32_16,
     exc=ValueError, must=("backward_format='tf32'", "CDNA1", "allowed", "'bf16'"))
case(6, "emulate-amd-fast", _emulate(operand_format="f16", arch="gfx942", mode="fast"),
     F32_16, F32_16, exc=ValueError, must=("mode='fast'", "instruction='mfma'", "('exact',)"))
case(6, "emulate-amd-instruction", _emulate(operand_format="f16", arch="gfx90a",
                                            instruction="wgmma"), F32_16, F32_16,
     exc=ValueError, must=("instruction='wgmma'", "arch='gfx90a'", "'mfma' or None"))
case(6, "emulate-amd-recipe", _emulate(recipe="nvfp4", arch="gfx942"), F32_16, F32_16,
     exc=ValueError, must=("recipe='nvfp4'", "no block-scaled", "recipe=None", "'e4m3fnuz'"))
case(6, "emulate-amd-scaling", _emulate(operand_format="f16", arch="CDNA3", scaling="tensor"),
     F32_16, F32_16, exc=ValueError, must=("scaling='tensor'", "arch='CDNA3'",
                                           "allowed: scaling=None"))
case(6, "emulate-amd-delayed-scaling", _emulate(scaling=jaxwarp.fp8.DelayedScaling(),
                                                arch="MI300"), F32_16, F32_16,
     exc=ValueError, must=("scaling=DelayedScaling(", "arch='MI300'", "allowed: scaling=None"))
case(6, "emulate-amd-tile", _emulate(operand_format="f16", arch="gfx942", tile=(32, 32, 8)),
     F32_16, F32_16, exc=ValueError, must=("tile=(32, 32, 8)", "allowed: tile=None"))
case(6, "emulate-amd-promote_every", _emulate(operand_format="f16", arch="gfx942",
                                              promote_every=128), F32_16, F32_16,
     exc=ValueError, must=("promote_every=128", "allowed: promote_every=None"))
case(6, "emulate-amd-accumulator", _emulate(operand_format="f16", arch="gfx942",
                                            accumulator="f16"), F32_16, F32_16,
     exc=ValueError, must=("accumulator='f16'", "instruction='mfma'", "allowed", "'f32'"))
case(6, "emulate-amd-no-format", _emulate(arch="gfx908"), F32_16, F32_16, exc=ValueError,
     must=("operand_format=None", "Pallas kernels", "allowed", "'f16'"))
case(6, "emulate-mfma-nvidia-arch", _emulate(operand_format="f16", instruction="mfma",
                                             arch="sm_90"), F32_16, F32_16, exc=ValueError,
     must=("arch='sm_90'", "not an AMD", "allowed", "'gfx942'", "'CDNA3'"))
case(6, "matmul-mfma-fast", lambda a, b: jaxwarp.matmul(a, b, instruction="mfma", mode="fast"),
     F32_16, F32_16, exc=ValueError, must=("mode='fast'", "instruction='mfma'", "('exact',)"))
case(6, "matmul-mfma-fnuz-grad", lambda a, b: jax.grad(lambda x: jaxwarp.matmul(
    x, b, operand_format="e4m3fnuz", instruction="mfma").sum())(a), F32_16, F32_16,
     exc=NotImplementedError, must=("instruction='mfma'", "no gradient rule", "e4m3fnuz",
                                    "backward_format"))


@pytest.mark.parametrize("c, mode", [p for p in _params()
                                     if id(p.values[0]) in {id(c) for c in CATALOGUE[_EA0:]}])
def test_bad_input_emulate_amd(c: Case, mode: str):
    test_bad_input(c, mode)


# jaxwarp.backends.native_tiles_chain: the tensor-core tiles kernel's call (here in Pallas'
# interpreter); shapes and its spec are static, so jit raises the same errors at trace.

_NT0 = len(CATALOGUE)
_F16_T = np.ones((2, 16, 32), np.float16)


def _tiles_chain(**kw):
    from jaxwarp import backends
    spec = backends.NativeDotSpec(*kw.pop("spec", ("f16", "f16", "f32", 16)))
    return lambda a, b, c: backends.native_tiles_chain(a, b, c, spec, interpret=True, **kw)


case(6, "native-tiles-m", _tiles_chain(), np.ones((2, 24, 32), np.float16),
     np.ones((2, 32, 16), np.float16), np.zeros((2, 24, 16), np.float32), exc=ValueError,
     must=("a (2, 24, 32)", "m = 24 does not divide 64"))
case(6, "native-tiles-columns", _tiles_chain(), _F16_T, np.ones((2, 32, 12), np.float16),
     np.zeros((2, 16, 12), np.float32), exc=ValueError,
     must=("n = 12", "48 columns", "power of two from 16 to 256"))
case(6, "native-tiles-k", _tiles_chain(), np.ones((2, 16, 24), np.float16),
     np.ones((2, 24, 16), np.float16), np.zeros((2, 16, 16), np.float32), exc=ValueError,
     must=("k = 24", "multiple of the instruction's k = 16"))
case(6, "native-tiles-b-shape", _tiles_chain(), _F16_T, np.ones((3, 32, 16), np.float16),
     np.zeros((2, 16, 16), np.float32), exc=ValueError,
     must=("b (3, 32, 16)", "b must be (T, K, n) = (2, 32, n)"))
case(6, "native-tiles-c-shape", _tiles_chain(), _F16_T, np.ones((2, 32, 16), np.float16),
     np.zeros((2, 16, 8), np.float32), exc=ValueError,
     must=("c (2, 16, 8)", "c (T, m, n) = (2, 16, 16)"))
case(6, "native-tiles-ndim", _tiles_chain(), np.ones((16, 32), np.float16),
     np.ones((32, 16), np.float16), np.zeros((16, 16), np.float32), exc=ValueError,
     must=("a, b and c must be 3-D",))
case(6, "native-tiles-hmma-spec", _tiles_chain(hmma_pair=True, spec=("e4m3", "e4m3", "f32",
                                                                      32, True)),
     np.ones((2, 16, 32), np.float32).astype(jnp.float8_e4m3fn),
     np.ones((2, 32, 8), np.float32).astype(jnp.float8_e4m3fn),
     np.zeros((2, 16, 8), np.float32), exc=ValueError,
     must=("hmma_pair runs f16 wgmma k16", "spec="))



# jaxwarp.backends.native_tiles_mgpu_chain: the same tiles on Mosaic GPU; its checks run
# before the kernel is built, eagerly and at trace.
def _tiles_mgpu(a_format="bf16", accumulator="f32", **kw):
    from jaxwarp import backends
    return lambda a, b, c: backends.native_tiles_mgpu_chain(a, b, c, a_format, accumulator,
                                                            **kw)


_BF16_T = np.ones((2, 16, 32), jnp.bfloat16)
case(6, "native-tiles-mgpu-m", _tiles_mgpu(), np.ones((2, 24, 32), jnp.bfloat16),
     np.ones((2, 32, 8), jnp.bfloat16), np.zeros((2, 24, 8), np.float32), exc=ValueError,
     must=("a (2, 24, 32)", "m = 24 does not divide 64"))
case(6, "native-tiles-mgpu-n", _tiles_mgpu(), _BF16_T, np.ones((2, 32, 12), jnp.bfloat16),
     np.zeros((2, 16, 12), np.float32), exc=ValueError,
     must=("b (2, 32, 12)", "n = 12 is not a multiple of 8 from 8 to 256"))
case(6, "native-tiles-mgpu-k", _tiles_mgpu(), np.ones((2, 16, 24), jnp.bfloat16),
     np.ones((2, 24, 8), jnp.bfloat16), np.zeros((2, 16, 8), np.float32), exc=ValueError,
     must=("k = 24", "multiple of the instruction's k = 16"))
case(6, "native-tiles-mgpu-b-shape", _tiles_mgpu(), _BF16_T, np.ones((3, 32, 8), jnp.bfloat16),
     np.zeros((2, 16, 8), np.float32), exc=ValueError,
     must=("b (3, 32, 8)", "b must be (T, K, n) = (2, 32, n)"))
case(6, "native-tiles-mgpu-ndim", _tiles_mgpu(), np.ones((16, 32), jnp.bfloat16),
     np.ones((32, 8), jnp.bfloat16), np.zeros((16, 8), np.float32), exc=ValueError,
     must=("a, b and c must be 3-D",))
case(6, "native-tiles-mgpu-dtype", _tiles_mgpu(), np.ones((2, 16, 32), np.float16),
     np.ones((2, 32, 8), jnp.bfloat16), np.zeros((2, 16, 8), np.float32), exc=ValueError,
     must=("a must be bfloat16", "a_format='bf16'", "got float16"))
case(6, "native-tiles-mgpu-accumulator", _tiles_mgpu(accumulator="f16"), _BF16_T,
     np.ones((2, 32, 8), jnp.bfloat16), np.zeros((2, 16, 8), np.float16), exc=ValueError,
     must=("accumulator 'f16' for bf16", "allowed 'f32'"))
case(6, "native-tiles-mgpu-empty", _tiles_mgpu(), np.ones((0, 16, 32), jnp.bfloat16),
     np.ones((0, 32, 8), jnp.bfloat16), np.zeros((0, 16, 8), np.float32), exc=ValueError,
     must=("T must be a positive int", "got 0"))
case(6, "native-tiles-mgpu-ctas", _tiles_mgpu(ctas=-2), _BF16_T,
     np.ones((2, 32, 8), jnp.bfloat16), np.zeros((2, 16, 8), np.float32), exc=ValueError,
     must=("ctas must be a positive int", "got -2"))
case(6, "native-tiles-mgpu-format", _tiles_mgpu(a_format="int8"),
     np.ones((2, 16, 32), np.int8), np.ones((2, 32, 8), np.int8),
     np.zeros((2, 16, 8), np.int32), exc=ValueError,
     must=("operand format 'int8'", "the kernel issues"))


# jaxwarp.backends.fused_mgpu_chain: the exact kernel on Mosaic GPU; its settings are
# checked before the kernel is built.
def _fused_mgpu(**kw):
    from jaxwarp import backends
    dp = jaxwarp.datapath_for("sm_90", "wgmma", "bf16", 16)
    return lambda a, b, c: backends.fused_mgpu_chain(a, b, c, dp, "bf16", finite=True, **kw)


_BF16_AB = (np.ones((64, 32), jnp.bfloat16), np.ones((32, 32), jnp.bfloat16),
            np.zeros((64, 32), np.float32))
case(6, "fused-mgpu-pipeline", _fused_mgpu(pipeline="fast"), *_BF16_AB, exc=ValueError,
     must=("pipeline='fast'", "allowed", "'plain'"))
case(6, "fused-mgpu-plain-wgs", _fused_mgpu(pipeline="plain", wgs=2), *_BF16_AB,
     exc=ValueError, must=("pipeline='plain' takes wgs=1", "got wgs=2"))

@pytest.mark.parametrize("c, mode", [p for p in _params()
                                     if id(p.values[0]) in {id(c) for c in CATALOGUE[_NT0:]}])
def test_bad_input_native_tiles(c: Case, mode: str):
    test_bad_input(c, mode)
