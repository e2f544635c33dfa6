"""matmul's exact k loop: the chain of tensor-core instructions over converted operands,
in the calling program (XLA's ``lax.scan``) or through a few shared executables.

Every output tile starts from its C tile (or zero, ``fill_fragment(acc, 0)``) and a loop
over k chains the accumulator through one tensor-core instruction per step, one (m, n, k)
tile at a time (the CUDA guide's WMMA kernel)::

    for kIter in range(0, K, WMMA_K):
        load_matrix_sync(aFrag, A + aRow * lda + kIter, lda)
        load_matrix_sync(bFrag, B + kIter * ldb + bCol, ldb)
        mma_sync(accFrag, aFrag, bFrag, accFrag)

The fragments' lane layout does not change the arithmetic, so the loop runs on
logical tiles (``tests/gemm/test_matmul.py`` checks it against the fragment path);
all output tiles of a step go through the model at once, and ``jax.lax.scan``
runs the k loop.

Promotion (``promote_every=N``, DeepSeek-V3 section 3.3.2): the k loop is cut
into intervals of N k-elements (a multiple of the instruction's k; the last
interval is shorter when N does not divide K). Each interval's tensor-core chain
starts from a zero accumulator, and its fp32 result ``P_i`` is added to an fp32
accumulator in ordinary fp32 arithmetic (round to nearest even)::

    acc = C (or 0 when scaled);  acc = fl32(acc + P_1);  acc = fl32(acc + P_2) ...

Promotion needs ``accumulator="f32"``.

With block scales each promotion applies its block's scales (``matmul_scales.promote``).

The loop in the program: :func:`k_step` is one instruction on every output tile at once
(the k-th k-slice of the operands), :func:`xla_loop` the chain of them over k, with
promotion and block scales, as one ``lax.scan``. ``matmul.tiled`` chooses between it, the
shared executables below, the fused kernel and native mode.

The shared executables (the CPU's default, :func:`chain`):
XLA compiles every call of a product in a program on its own: it inlines calls before it
optimizes, and clones the ones it may not inline (``docs/compile_time.md``). An exact
product's k loop is a few hundred instructions of the tensor core's model, so a model's
exact step compiled that model once per product call. Here the k loop leaves the calling
program: the program holds a host callback (a ``buffer_callback`` on the CPU, which reads
and writes the program's own buffers) in its place, and the callback runs the chain
through one executable per instruction configuration and group size, compiled once per
process (and kept by JAX's persistent cache), whatever the product's shape:

* the output is cut into blocks of ``BLOCK`` x ``BLOCK`` elements. An instruction's
  output element depends only on its row of A, its column of B and its C element, so the
  cut changes no bit (the argument of :func:`k_step`'s one call per k step);
* a call of an executable runs the chain of up to ``STEPS`` k steps (a loop of one
  instruction a step, in order) on up to ``GROUPS[i]`` blocks; its shapes depend on the
  instruction's k alone, so every product shape uses the same few executables (a call
  with fewer blocks computes zero blocks in the rest, and reads only the steps it is
  given);
* the host walks the groups of blocks, one call per group (a chain of more than
  ``STEPS`` steps: several, each call's accumulator feeding the next): the chain of
  instructions of the inline loop, the same bits;
* the host checks the product's operands against ``in_fp32_range`` (:func:`_known`) and
  takes the executables of the in-range arithmetic or of the general one, as the inline
  loop's ``lax.cond`` would (the same bits; each compiles when first needed);
* the executables run on a CPU client of their own (:func:`host_device`), never on the
  calling program's, so that a callback never waits for a resource its caller holds;
  they read the host's numpy arrays in place (64-byte aligned: no copy).

The price is a callback per product call and the host's copies of the blocks (on a CPU
the operands are already in host memory). Products with promotion or block scales, and
products on accelerators (a callback would copy the operands to the host), keep the
inline loop.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxwarp._src.arithmetic import datapath
from jaxwarp._src.arithmetic.datapath_blocks import RANGE_HI, RANGE_LO, in_fp32_range
from jaxwarp._src.config import config, keyed_jit
from jaxwarp._src.gemm.matmul_scales import promote
from jaxwarp._src.gemm.matmul_tiles import Cfg, issue_arch
from jaxwarp._src.numerics.bitops import TF32_MASK
from jaxwarp._src.warp import checked

# --- The loop in the calling program.


def _mma(at, bt, acc, cfg: Cfg):
    """One instruction per output tile (k = the tile's k), exact mode: the product was
    checked once by ``matmul``, so the arithmetic runs without checking each step again."""
    chain = datapath.plan_chain(cfg.a_format, cfg.b_format, cfg.accumulator, cfg.accumulator,
                                issue_arch(cfg.instruction, cfg.arch), cfg.instruction,
                                cfg.tile[2])
    return datapath.run_chain(at, bt, acc, chain)


def k_step(a_op, b_op, acc, kk, cfg: Cfg):
    """The kk-th k step of every output tile as a single (..., M, k) x (..., k, N)
    instruction call: an instruction's output element depends only on its row of A, its
    column of B and its C element, so the M / N tiling changes no bit, and the operands and
    the accumulator are read and written in their own layouts (no tile transposes, which
    XLA had made into a copy of B before the loop)."""
    k = cfg.tile[2]
    at = lax.dynamic_slice_in_dim(a_op, kk * k, k, axis=a_op.ndim - 1)  # (..., M, k)
    bt = lax.dynamic_slice_in_dim(b_op, kk * k, k, axis=b_op.ndim - 2)  # (..., k, N)
    if k < 8 and at.dtype == bt.dtype == jnp.float16 and jax.default_backend() == "cpu":
        at, bt = datapath.stored_f16(at), datapath.stored_f16(bt)
    return _mma(at, bt, acc, cfg)


def in_range_cond(cfg: Cfg, macs: int) -> bool:
    """Whether :func:`xla_loop` of ``macs`` multiply-adds is traced twice, in range and
    not, under one ``lax.cond`` (``datapath.in_range_matmul``: the option
    ``arith_in_range_path``)."""
    return datapath.in_range_matmul(issue_arch(cfg.instruction, cfg.arch), cfg.instruction,
                                    cfg.a_format, cfg.b_format, cfg.accumulator, cfg.tile[2],
                                    macs)


def xla_loop(a_op, b_op, acc, cfg: Cfg, scales=None, *, known: str | None = None,
             cond: bool = False):
    """The chain over the k tiles of padded operands (M, N, K multiples of the tile),
    with promotion; ``scales``: ``tiled``'s block scales, padded. ``known``: trace the
    instructions as operands known in range or not (``datapath.known_range``: "in_range"
    or "general"); ``cond``: both, under one ``lax.cond`` on the operands' range
    (:func:`in_range_cond` says when)."""
    if cond:
        vals = datapath.range_values(a_op, b_op, cfg.a_format, cfg.b_format)
        return lax.cond(in_fp32_range(*vals),
                        lambda acc: xla_loop(a_op, b_op, acc, cfg, scales, known="in_range"),
                        lambda acc: xla_loop(a_op, b_op, acc, cfg, scales, known="general"),
                        acc)
    if known is not None:
        with datapath.known_range(known):
            return xla_loop(a_op, b_op, acc, cfg, scales)
    k = cfg.tile[2]
    kt = a_op.shape[-1] // k

    def step(carry, _):
        acc, kk = carry
        return (k_step(a_op, b_op, acc, kk, cfg), kk + 1), None

    def chain(acc, k0, length):  # k tiles k0 .. k0 + length - 1, in order
        return lax.scan(step, (acc, jnp.asarray(k0, jnp.int32)), None, length=length)[0][0]

    if cfg.promote_every is None:
        return chain(acc, 0, kt)
    # Promotion: each interval's chain starts from +0; its fp32 result is added to the
    # fp32 accumulator with an ordinary (round-to-nearest) fp32 addition.
    s = cfg.promote_every // k
    full, rem = divmod(kt, s)
    zero = jnp.zeros_like(acc)

    def interval(carry, _):
        acc, k0 = carry
        return (promote(acc, chain(zero, k0, s), k0 // s, scales), k0 + s), None

    if full:
        acc = lax.scan(interval, (acc, jnp.int32(0)), None, length=full)[0][0]
    if rem:
        acc = promote(acc, chain(zero, full * s, rem), full, scales)
    return acc


# --- The shared executables.


#: Rows and columns of one output block (the smallest m and n of the float tiles, so that a
#: product's blocks cover no more than its tiles).
BLOCK = 16
#: Blocks per executable call: one executable per size; a product's blocks are cut into
#: the largest groups they fill, the last few into the smallest. A call costs its dispatch and its
#: vector operations' length, whatever the blocks in use: on the 2-core CPU a k step of 16
#: blocks took 0.13 ms, of 256 blocks 0.4 ms.
GROUPS = (16, 64, 256)
#: k steps of one executable call at most: a call runs a group's chain over up to this many
#: k steps (a loop in the executable; a product with more calls it again with the
#: accumulator). Its operands are a slab of this many steps, of which the call reads the
#: first ``n`` only; the slabs are handed over without a copy, so the steps not in use
#: cost neither a copy nor a computation.
STEPS = 64


# The option gemm_shared chooses whether exact products run here ("auto") or inline
# ("off"); gemm_promote_after, after how many seconds in the blocks a product's whole k
# loop is compiled (a product then never spends more than about twice the better of the
# two; the blocks start a model in seconds, a training run's hot products then run at
# the inline loop's speed). Both are read at trace time.


def _make_state():
    """A JAX config state in the jit cache key (so that a product traced inside
    :func:`inline` is traced again, not taken from the cache), or None where this JAX has
    no such API (then a context variable, which only a fresh trace reads)."""
    try:
        from jax._src import config as _jax_config

        return _jax_config.bool_state(
            "jaxwarp_inline_products", False,
            help="jaxwarp: exact products inline (set by k_loop.inline; not for "
                 "direct use)", include_in_jit_key=True, include_in_trace_context=True)
    except Exception:  # pragma: no cover - other JAX versions
        return None


_INLINE_STATE = _make_state()
_INLINE: contextvars.ContextVar[bool] = contextvars.ContextVar("jaxwarp_inline",
                                                               default=False)


def inlined() -> bool:
    """Whether products traced now are inside :func:`inline` (then no callback)."""
    if _INLINE_STATE is not None:
        return bool(_INLINE_STATE.value)
    return _INLINE.get()


@contextlib.contextmanager
def inline():
    """Trace the exact products inside with the inline k loop (every call compiled in the
    calling program), whatever the option ``gemm_shared`` says: for programs whose bits
    must not depend on anything outside them, such as ``grouped_value_and_grad``'s, which
    give the same bits on any number of devices (a callback changes how XLA fuses the
    operations around it, and so the order of their own float sums)."""
    if _INLINE_STATE is not None:
        with _INLINE_STATE(True):
            yield
        return
    token = _INLINE.set(True)
    try:
        yield
    finally:
        _INLINE.reset(token)


def _eligible(cfg: Cfg, scales) -> bool:
    # Not in checked mode, whose checks cannot cross a callback, and not where the program
    # may be partitioned over several devices (a callback would gather its operands to
    # one device: XLA's SPMD partitioner makes it a replicated, maximal-sharded op).
    return (config.gemm_shared == "auto" and scales is None and cfg.promote_every is None
            and not checked.enabled() and not inlined() and jax.device_count() == 1)


def applies(cfg: Cfg, scales) -> bool:
    """Whether this exact product's k loop runs through the shared executables (on the
    CPU backend)."""
    return _eligible(cfg, scales) and jax.default_backend() == "cpu"


def general_on_host(cfg: Cfg, scales) -> bool:
    """Whether, on an accelerator, the general branch of a bf16 product that the fused
    kernel runs in fp32's range (``matmul.tiled``'s cond) runs through the shared
    executables on the host: operands out of that range (inf, NaN, subnormals, products
    beyond fp32's exponents) are rare, and the branch then costs no compile of its own in
    the calling program. (The same bits: the model gives them on every backend.)"""
    return _eligible(cfg, scales) and jax.default_backend() != "cpu"


_HOST: list = []  # the host device of the shared executables, once made
_HOST_LOCK = threading.Lock()


def host_device():
    """The CPU device that runs the shared executables: the one device of a PJRT CPU client
    of their own (synchronous: each call runs on the calling thread), not JAX's.

    The shared executables run from inside a host callback of the calling program. On
    JAX's CPU client every dispatch takes a unit of the device's in-flight semaphore (32
    computations with asynchronous dispatch) until its computation finishes, including
    a dispatch from inside a callback. A program that waits in its callback therefore
    holds a unit while the callback waits for one: once the caller has dispatched enough
    programs after it (a loop of jitted products that does not wait for them), every
    unit is held by the program in its callback or by those queued behind it, and the
    callback's dispatch waits forever. This client's units, queue and thread pool are the
    shared executables' alone, so a callback's dispatch never waits for the caller's.

    Example:
        >>> host_device().platform
        'cpu'
    """
    with _HOST_LOCK:
        if not _HOST:
            from jaxlib import xla_client

            client = xla_client.make_cpu_client(asynchronous=False, num_devices=1)
            _HOST.append(client.local_devices()[0])
        return _HOST[0]


class _Product:
    """One product signature's calls and, once compiled, its whole k loop."""

    def __init__(self):
        self.calls = 0
        self.seconds = 0.0  # spent in the blocks, after the first call (which may compile
        # the block executables)
        self.thread: threading.Thread | None = None
        self.whole = None  # the compiled whole loop
        self.error: BaseException | None = None


_PRODUCTS: dict = {}
_PRODUCTS_LOCK = threading.Lock()


def clear_products() -> None:
    """Forget every product's calls and promoted loop (waiting for the promotions under
    way first): for tests that count this process's products from zero."""
    wait_for_promotions()
    with _PRODUCTS_LOCK:
        _PRODUCTS.clear()


def products() -> list[_Product]:
    """The products seen so far (their calls, seconds and promoted loops): for tests."""
    with _PRODUCTS_LOCK:
        return list(_PRODUCTS.values())


def _compile_whole(prod: _Product, specs, cfg: Cfg, known: str | None = None) -> None:
    """Compile the inline k loop (:func:`xla_loop`) of one product signature for operands
    of the range ``known`` (:func:`_known`; None: with ``matmul.tiled``'s in-range cond
    where it takes one), in a thread of its own."""
    try:
        def loop(a, b, acc):
            if known is not None:
                return xla_loop(a, b, acc, cfg, known=known)
            macs = a.shape[-2] * a.shape[-1] * b.shape[-1]
            return xla_loop(a, b, acc, cfg, cond=in_range_cond(cfg, macs))

        def whole(a, b, acc):
            fn = loop
            for _ in range(acc.ndim - 2):  # the lead (vmapped) dimensions
                fn = jax.vmap(fn)
            return fn(a, b, acc)

        sharding = jax.sharding.SingleDeviceSharding(host_device())
        specs = [jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding) for x in specs]
        prod.whole = jax.jit(whole).lower(*specs).compile()
    except Exception as e:  # noqa: BLE001 - the blocks stay; wait_for_promotions says it
        prod.error = e


def wait_for_promotions(timeout: float | None = None) -> list[BaseException]:
    """Wait until every promotion started so far is compiled; returns the errors of those
    that failed (their products keep the blocks). For benchmarks and tests."""
    with _PRODUCTS_LOCK:
        prods = list(_PRODUCTS.values())
    for prod in prods:
        if prod.thread is not None:
            prod.thread.join(timeout)
    return [p.error for p in prods if p.error is not None]


def _product(a, b, acc, cfg: Cfg, options, known: str | None) -> _Product:
    # (the options too, config.snapshot(): the promoted loop is compiled with them; and the
    # operands' range: each range's loop is promoted on its own)
    key = (a.shape, a.dtype, b.shape, b.dtype, acc.shape, acc.dtype, cfg, options, known)
    with _PRODUCTS_LOCK:
        return _PRODUCTS.setdefault(key, _Product())


def _spent(prod: _Product, seconds: float, a, b, acc, cfg: Cfg, known: str | None) -> None:
    """Add a call's seconds in the blocks; start the whole loop's compile past the option
    ``gemm_promote_after``."""
    after = config.gemm_promote_after
    with _PRODUCTS_LOCK:
        prod.seconds += seconds if prod.calls else 0.0
        prod.calls += 1
        if (after is None or prod.thread is not None or prod.seconds < after
                or a.dtype.itemsize == 8):
            # (64-bit operands stay: the compile runs in its own thread, which would not
            # see a thread's jax_enable_x64)
            return
        specs = [jax.ShapeDtypeStruct(x.shape, x.dtype) for x in (a, b, acc)]
        # (in this context: the thread sees the options of an override around the call)
        ctx = contextvars.copy_context()
        # (not a daemon: the interpreter's exit waits for the compile, where a daemon
        # thread stopped inside XLA's compiler aborted the process, 1 exit in 5)
        prod.thread = threading.Thread(target=ctx.run,
                                       args=(_compile_whole, prod, specs, cfg, known),
                                       name="jaxwarp-promote", daemon=False)
        prod.thread.start()


def _executable_cfg(cfg: Cfg) -> Cfg:
    """The configuration the executable is compiled for: what the instruction's arithmetic
    reads (formats, accumulator, instruction, target, k), so that a forward product and
    its backward ones, scaled or not, share it."""
    return dataclasses.replace(cfg, tile=(BLOCK, BLOCK, cfg.tile[2]), mode="exact",
                               promote_every=None, scaled=False, blockwise=False)


@functools.partial(keyed_jit, static_argnums=(4, 5, 6, 7))
def _run(a, b, acc, n, a_dtype, b_dtype, cfg: Cfg, known: str | None):
    """The first ``n`` k steps of a chain on every block: a (S, G, BLOCK, k), b (S, G, k,
    BLOCK) as unsigned integers of the operands' width (``a_dtype``, ``b_dtype``: their
    type), acc (G, BLOCK, BLOCK); step s reads a[s] and b[s]; ``known``: the operands'
    range, as checked on the host (:func:`_known`). One instruction a step, in order, in
    a loop of the executable (a call per chain, not per k step: a call's dispatch cost
    about what a step of 16 blocks computes). Each step takes its slice of the integers
    before reading it as floats, so that XLA cannot hoist the conversion of the whole
    slab out of the loop (it did, converting all S steps on every call)."""
    def step(s, acc):
        at = lax.bitcast_convert_type(lax.dynamic_index_in_dim(a, s, keepdims=False), a_dtype)
        bt = lax.bitcast_convert_type(lax.dynamic_index_in_dim(b, s, keepdims=False), b_dtype)
        return k_step(at, bt, acc, 0, cfg)

    with datapath.known_range(known) if known else contextlib.nullcontext():
        return lax.fori_loop(0, n, step, acc)


def _known(a, b, cfg: Cfg, in_range_path: str | None = None) -> str | None:
    """The range of a product's numpy operands as ``datapath.known_range`` reads it:
    "in_range" where ``in_fp32_range`` holds (every product a normal fp32 number, no inf,
    NaN or subnormal operand: the in-range arithmetic gives the general path's bits at
    about 0.6x its cost), else "general"; None where the in-range arithmetic does not
    model these operands or the option ``arith_in_range_path`` is "off". The inline loop
    decides this with a ``lax.cond``, which compiles both paths; here the host checks
    the operands (numpy, on the bits, as ``in_fp32_range``), and each path's
    executables compile when an operand first needs them. (``in_range_path``: the
    option's value, where not the one in force.)"""
    path = config.arith_in_range_path if in_range_path is None else in_range_path
    if path == "off" or not _range_eligible(cfg):
        return None
    (amax, amin), (bmax, bmin) = _exponents(a, cfg.a_format), _exponents(b, cfg.b_format)
    ok = (amax < 255 and bmax < 255 and amin > 0 and bmin > 0
          and amax + bmax - 254 <= RANGE_HI and amin + bmin - 254 >= RANGE_LO)
    return "in_range" if ok else "general"


@functools.cache
def _range_eligible(cfg: Cfg) -> bool:
    dp = datapath.matmul_datapath(issue_arch(cfg.instruction, cfg.arch), cfg.instruction,
                                  cfg.a_format, cfg.b_format, cfg.accumulator, cfg.tile[2])
    return dp is not None and datapath.in_range_eligible(dp, cfg.a_format, cfg.b_format)


def _exponents(x, fmt: str) -> tuple[int, int]:
    """(largest biased exponent, smallest biased exponent of a non-zero element) of a
    bf16 or tf32 (float32) operand, 255 where it holds no non-zero element: as
    ``datapath_blocks`` computes them, on the bits (tf32: its low 13 bits cleared)."""
    if x.dtype.itemsize == 2:  # bf16: the high half of its float32
        u = x.view(np.uint16) & np.uint16(0x7FFF)
        e = u >> np.uint16(7)
    else:
        mask = 0x7FFFFFFF & (TF32_MASK if fmt == "tf32" else 0xFFFFFFFF)
        u = x.view(np.uint32) & np.uint32(mask)
        e = u >> np.uint32(23)
    if not u.size:
        return 0, 255
    nonzero = e[u != 0]
    return int(e.max()), int(nonzero.min()) if nonzero.size else 255


def _slab(shape, dtype):
    """An uninitialized array of ``shape``, 64-byte aligned: the CPU client reads such an
    array in place (no copy on ``device_put``), and a call reads only the steps it is
    given, so a slab's steps not in use cost nothing (zeros would: numpy's zeros of a few
    MB took 0.2-0.5 ms)."""
    dtype = np.dtype(dtype)
    size = int(np.prod(shape)) * dtype.itemsize
    raw = np.empty(size + 64, np.uint8)
    start = -raw.ctypes.data % 64
    return raw[start:start + size].view(dtype).reshape(shape)


def _gather(panels, index, shape):
    """A slab of ``shape`` (:func:`_slab`) whose first ``len(panels)`` steps hold
    ``panels[:, index]`` (zeros beyond ``len(index)`` blocks): ``np.take`` into the slab
    where the blocks fill it (a third of the time of an indexed copy, which makes a
    temporary)."""
    n, ng = panels.shape[0], index.shape[0]
    slab = _slab(shape, panels.dtype)
    if ng == shape[1]:
        np.take(panels, index, axis=1, out=slab[:n], mode="clip")
    else:
        slab[:n, :ng] = panels[:, index]
        slab[:n, ng:] = 0
    return slab


_COUNTS: dict = {}  # a step count on host_device, by value


def _count(n: int):
    """``n`` as an int32 on :func:`host_device` (kept: a ``device_put`` takes longer than a
    small call)."""
    x = _COUNTS.get(n)
    if x is None:
        x = _COUNTS.setdefault(n, jax.device_put(np.int32(n), host_device()))
    return x


def _as_uint(x):
    return x.view(np.dtype(f"u{x.dtype.itemsize}"))


def _host(a, b, acc, *, cfg: Cfg, options):
    """The chain over numpy operands: a (..., M, K), b (..., K, N), acc (..., M, N), M, N
    and K already padded to the instruction's tile; ``options``: the options when the
    calling program was traced (``config.snapshot``), read here."""
    a, b, acc = (np.asarray(x) for x in (a, b, acc))  # (pure_callback's: JAX arrays)
    if jax.default_backend() != "cpu":  # an accelerator's program: the blocks alone
        with config.override(**dict(options)):
            return _blocks(a, b, acc, cfg, _known(a, b, cfg))
    known = _known(a, b, cfg, dict(options)["arith_in_range_path"])
    prod = _product(a, b, acc, cfg, options, known)
    if prod.whole is not None:
        # (numpy operands: the executable reads them in place on its own device, where a
        # device_put of each took 0.03-0.1 ms)
        return np.asarray(prod.whole(a, b, acc))
    with config.override(**dict(options)):
        start = time.perf_counter()
        out = _blocks(a, b, acc, cfg, known)
        _spent(prod, time.perf_counter() - start, a, b, acc, cfg, known)
    return out


def _blocks(a, b, acc, cfg: Cfg, known: str | None = None):
    """The chain through the shared executables (``known``: :func:`_known` of a and b)."""
    lead = acc.shape[:-2]
    (M, K), N = a.shape[-2:], b.shape[-1]
    # The operands' blocks are moved as unsigned integers of their width (numpy copies
    # extension dtypes such as bfloat16 element by element) and read back in their type.
    a, b, acc = (np.asarray(x) for x in (a, b, acc))
    a_dt, b_dt = a.dtype, b.dtype
    a, b, acc = (x.reshape((-1, *x.shape[-2:])) for x in (_as_uint(a), _as_uint(b), acc))
    nb, T, k = acc.shape[0], BLOCK, cfg.tile[2]
    mb, kb, steps = -(-M // T), -(-N // T), K // k
    # Row blocks ra[s, p * mb + i]: rows i*T.. of product p, k step s; column blocks
    # cb[s, p * kb + j]: columns j*T.. of product p; c[g]: output block g = (p, i, j).
    ra = np.zeros((nb, mb * T, K), a.dtype)
    ra[:, :M] = a
    ra = np.ascontiguousarray(ra.reshape(nb * mb, T, steps, k).transpose(2, 0, 1, 3))
    cb = np.zeros((nb, K, kb * T), b.dtype)
    cb[:, :, :N] = b
    cb = cb.reshape(nb, steps, k, kb, T).transpose(1, 0, 3, 2, 4).reshape(steps, nb * kb,
                                                                             k, T)
    c = np.zeros((nb, mb * T, kb * T), acc.dtype)
    c[:, :M, :N] = acc
    c = c.reshape(nb, mb, T, kb, T).transpose(0, 1, 3, 2, 4).reshape(-1, T, T)
    blocks = c.shape[0]
    g_all = np.arange(blocks)
    p_of = g_all // (mb * kb)
    rows, cols = p_of * mb + (g_all // kb) % mb, p_of * kb + g_all % kb
    ecfg = _executable_cfg(cfg)
    g0 = 0
    while g0 < blocks:
        # the largest group the remaining blocks fill (the smallest for the last few)
        size = max((g for g in GROUPS if g <= blocks - g0), default=GROUPS[0])
        sel = slice(g0, min(g0 + size, blocks))
        ng = sel.stop - sel.start
        # The executables read numpy arrays in place (64-byte aligned ones, _slab) on the
        # device of the one committed argument, the step count (_count): the shared
        # executables' own, host_device, never JAX's CPU client. (jax.device_put took
        # 0.05-0.1 ms an array.) Zeros beyond the blocks in use: computed, never read.
        out = _slab((size, T, T), acc.dtype)
        out[:ng] = c[sel]
        out[ng:] = 0
        for s0 in range(0, steps, STEPS):
            n = min(STEPS, steps - s0)
            # The group's operands for steps s0 .. s0 + n - 1, contiguous, in slabs of
            # STEPS steps (the rest not read).
            ag = _gather(ra[s0:s0 + n], rows[sel], (STEPS, size, T, k))
            bg = _gather(cb[s0:s0 + n], cols[sel], (STEPS, size, k, T))
            out = _run(ag, bg, out, _count(n), a_dt, b_dt, ecfg, known)
        c[sel] = np.asarray(out)[:ng]
        g0 = sel.stop
    d = c.reshape(nb, mb, kb, T, T).transpose(0, 1, 3, 2, 4).reshape(nb, mb * T, kb * T)
    return np.ascontiguousarray(d[:, :M, :N]).reshape((*lead, M, N))


def _fill(ctx, out, a, b, acc, *, cfg: Cfg, options):
    """:func:`_host` as a buffer callback: reads the calling program's buffers in place
    and writes the result into its output buffer."""
    del ctx
    np.asarray(out)[...] = _host(np.asarray(a), np.asarray(b), np.asarray(acc), cfg=cfg,
                                 options=options)


def _buffer_callback():
    """JAX's ``buffer_callback`` where this JAX has it, else None."""
    try:
        from jax.experimental.buffer_callback import buffer_callback
    except ImportError:  # pragma: no cover - older JAX
        return None
    return buffer_callback


def chain(a_op, b_op, acc, cfg: Cfg):
    """``matmul.tiled``'s k loop through the shared executables (:func:`_host`), on
    operands padded to the tile: one host callback per product call.

    On the CPU the callback is a ``buffer_callback`` (numpy views of the calling program's
    own buffers, the result written into its output buffer): ``jax.pure_callback`` put
    its operands on JAX's CPU device and copied its result back, about 0.13 ms a call
    against 0.015 ms on the 2-core CPU. On an accelerator (bf16's out-of-range branch) a
    ``pure_callback``, which copies the operands to the host."""
    options = config.snapshot()
    out = jax.ShapeDtypeStruct(acc.shape, acc.dtype)
    buffer_callback = _buffer_callback()
    if buffer_callback is not None and jax.default_backend() == "cpu":
        fill = functools.partial(_fill, cfg=cfg, options=options)
        return buffer_callback(fill, out, vmap_method="broadcast_all")(a_op, b_op, acc)
    host = functools.partial(_host, cfg=cfg, options=options)
    return jax.pure_callback(host, out, a_op, b_op, acc, vmap_method="broadcast_all")
