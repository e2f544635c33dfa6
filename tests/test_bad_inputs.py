"""Issue 13, no silent wrong answers: a catalogue of bad inputs to the warp and WMMA layers.

``CATALOGUE`` is one table of (id, callable, args, exception type, regex naming the
argument, modes). Modes:

* ``eager``: ``fn(*args)``;
* ``jit``: ``jax.jit(fn)(*args)``, every argument traced;
* ``jit_const``: ``jax.jit(lambda: fn(*args))()``, the arguments closed over. Used
  for 64-bit inputs: with x64 off JAX itself narrows a 64-bit *argument* of a jitted
  function before jaxwarp sees it, so only constants can be caught there.

Every case runs with ``jax_enable_x64`` off (the default) unless its mode ends in
``_x64``. Tests after the table check the positive side of each policy (64-bit
values handled exactly with x64 on, int32 masks read as bits, checked mode under
jit caches, traced out-of-range values reported by ``jaxwarp.checked``).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxwarp
from jaxwarp import dpx, fragment

FULL = 0xFFFFFFFF
EAGER = ("eager",)
BOTH = ("eager", "jit")
CONST = ("eager", "jit_const")


@dataclasses.dataclass(frozen=True)
class Case:
    id: str
    cls: int  # the class (1..7)
    fn: Callable[..., Any]
    args: tuple
    exc: type[BaseException]
    regex: str
    modes: tuple[str, ...]


CATALOGUE: list[Case] = []


def case(cls, id, fn, *args, exc, regex, modes=BOTH):
    CATALOGUE.append(Case(id, cls, fn, args, exc, regex, modes))


u32 = np.arange(32, dtype=np.uint32)
i32 = np.arange(32, dtype=np.int32)
f64 = np.linspace(0.1, 3.3, 32)  # float64
i64 = np.arange(32, dtype=np.int64) + 2**32  # high bits set: narrowing would lose them
u64 = np.arange(32, dtype=np.uint64) + np.uint64(2**40)
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
case(1, "bits-float64", jaxwarp.bits, f64, exc=TypeError, regex="x has " + X64, modes=CONST)
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

# --------------------------------------------------------------------------------------
# Class 2: masks outside [0, 2**32), on every path (the full-mask fast paths too).

for _fn_id, _fn in (
        ("shfl", lambda m: jaxwarp.shfl_sync(m, u32, 0)),
        ("reduce", lambda m: jaxwarp.reduce_add_sync(m, u32)),
        ("ballot", lambda m: jaxwarp.ballot_sync(m, u32 % 2 == 0))):
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
case(6, "bits-str", lambda: jaxwarp.bits("abc"), exc=TypeError,
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
     exc=TypeError, regex=r"frag_spec must be a Fragment", modes=EAGER) if (
    H16 := np.zeros((16, 16), np.float16)) is not None else None
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


# --------------------------------------------------------------------------------------
# The catalogue test.


def _params():
    for c in CATALOGUE:
        for mode in c.modes:
            yield pytest.param(c, mode, id=f"c{c.cls}-{c.id}[{mode}]")


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
    assert re.search(c.regex, str(info.value), re.S), f"{c.regex!r} not in:\n{info.value}"


def test_catalogue_covers_every_class():
    ids = [c.id for c in CATALOGUE]
    assert len(ids) == len(set(ids))
    counts = {k: sum(c.cls == k for c in CATALOGUE) for k in range(1, 8)}
    assert all(counts.values()), counts


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
    fill(jnp.float32(jnp.nan))  # documented: XLA's conversion, no error
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
