"""A recipe's block-scaled products through shared executables (the CPU's default).

Every product of a recipe quantizes its two operands (the scale rule, NVFP4's tensor
scale, stochastic rounding, the random Hadamard transform) and, in exact mode, runs the
block-scaled chain: thousands of XLA instructions per product *call*, which XLA compiled
again for every call of a training step (the forward product and its two backward ones,
per layer). Here, as ``gemm.k_loop`` does for the plain exact products, that arithmetic
leaves the calling program: the program holds one host callback per product
(``jax.pure_callback``), and the callback runs it through a few small executables shared
by every product of the same formats, whatever its shape, compiled once per process on
the shared executables' own CPU client (``k_loop.host_device``):

* a quantizer runs on groups of :data:`GROUP_ELEMENTS` elements (whole blocks): each
  block is quantized on its own given NVFP4's tensor amax, which the host takes first (a
  maximum of magnitudes: exact); the random Hadamard transform on groups of runs of 16;
  the random bits of stochastic rounding are those the inline quantizer draws for the
  whole tensor, drawn by the callback (the keys, below);
* the exact chain runs on groups of :data:`CHAIN_BLOCKS` output blocks of 16 x 16, one
  instruction (k step) per call, the accumulator of one call the C of the next; NVFP4's
  epilogue on the same groups (every output is its own chain: the cut changes no bit);
* fast mode's product stays in the calling program: the callback returns the dequantized
  operands and the program runs the same ``dot`` on them, B transposed as the inline
  path's dot reads it (XLA's form of a dot decides its summation order);
* the keys: the callback gets the emulated call's key and folds in the product's number
  and each operand's salt itself, and draws the random bits of a run of a tensor's
  elements by their indices (JAX's partitionable threefry), so the calling program
  holds no threefry hash either;
* the program's trace starts the compiles of the executables its products will need, in
  two background threads, so that they run beside XLA's compile of the program;
* a product whose calls have spent ``gemm_promote_after`` seconds in the shared
  executables is promoted: the inline path's arithmetic for its shapes is compiled as
  an executable of its own in the background, and later calls run that.

The bits are those of the inline path (``recipe_shared="off"``): the same functions on
the same values, cut where no value depends on another (``tests/test_recipe_shared.py``).
The option ``recipe_shared`` chooses; the callback is not taken in checked mode, over
several devices, inside ``k_loop.inline()``, where JAX's threefry is not partitionable,
or on an accelerator (whose inline programs stay as they are).
"""

from __future__ import annotations

import concurrent.futures
import functools
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend import random as jex_random

from jaxwarp._src.config import config
from jaxwarp._src.gemm import block_scale_gemm as bsg
from jaxwarp._src.gemm import k_loop
from jaxwarp._src.scaling import mx_kernels
from jaxwarp._src.scaling.mx import dequantize
from jaxwarp._src.scaling.mx_formats import MX_FORMATS
from jaxwarp._src.warp import checked

#: Elements of one quantizer call (whole blocks: 1024 blocks of 16, 512 of 32, 64 2D
#: blocks of 16 x 16); a tensor's last group is filled with zero blocks (computed, never
#: read).
GROUP_ELEMENTS = 1 << 14
#: Output blocks (16 x 16) of one call of the exact chain.
CHAIN_BLOCKS = 64
#: Rows and columns of one output block.
T = 16


def applies() -> bool:
    """Whether a recipe product traced now runs through the shared executables.

    Example:
      >>> with jaxwarp.config.override(recipe_shared="off"):
      ...     applies()
      False
    """
    return (config.recipe_shared == "auto" and jax.default_backend() == "cpu"
            and jax.device_count() == 1 and not checked.enabled() and not k_loop.inlined()
            and _counter_bits())


def _counter_bits() -> bool:
    """Whether ``jax.random.bits`` of a shape is the threefry hash of each element's
    row-major index (JAX's partitionable threefry, its default since 0.5): then the host
    draws any run of a tensor's random bits by its indices, with one executable."""
    return (bool(getattr(jax.config, "jax_threefry_partitionable", False))
            and hasattr(jex_random, "threefry2x32_p"))


# --------------------------------------------------------------------------------------
# The executables: functions of static formats, each compiled once per process for the
# shared executables' own device (``k_loop.host_device``), in a background thread: the
# calling program's trace starts the compiles it will need (:func:`_prefetch`), so that
# they run beside XLA's compile of that program.


def _bits(key_data, start, n: int):
    """``jax.random.bits(key, shape).reshape(-1)[start:start + n]`` (uint32) for a tensor
    of fewer than 2**32 elements (:func:`_counter_bits`): the hash of (0, index)."""
    lo = start + lax.iota(jnp.uint32, n)
    k1, k2 = (jnp.broadcast_to(k, lo.shape) for k in (key_data[0], key_data[1]))
    b1, b2 = jex_random.threefry2x32_p.bind(k1, k2, jnp.zeros_like(lo), lo)
    return b1 ^ b2


def _fold(key_data, data):
    return jax.random.key_data(jax.random.fold_in(jax.random.wrap_key_data(key_data), data))


def _signs(key_data):  # the Hadamard signs: fold_in(key, 0), as the inline path
    return bsg.hadamard_signs(_fold(key_data, jnp.uint32(0)))


def _quantize(xb, amax, key_data, start, tmax, *, fmt: str, rule, mode: str, out: str):
    """A group of rows ``xb`` (G, r) of blocks whose amax bits are ``amax`` (G,)
    quantized: (codes or values (G, r), scale codes (G,), tensor scale). ``mode="rs"``:
    the random bits of elements ``start ..`` of the tensor's blocks, from ``key_data``."""
    f = MX_FORMATS[fmt]
    rbits = _bits(key_data, start, xb.size).reshape(xb.shape) if mode == "rs" else None
    if f.tensor_scale:
        el, sc, st = mx_kernels.nvfp4_blocks(xb, tmax, rbits, f=f, mode=mode, amax_bits=amax)
    else:
        el, sc = mx_kernels.mx_blocks(xb, rbits, f=f, rule=rule, mode=mode, saturate=True,
                                      amax_bits=amax)
        st = jnp.float32(0)
    sc = sc.astype(jnp.uint8)  # (as quantize stores them)
    if out == "values":
        return mx_kernels.dequantize_blocks(el, sc.astype(jnp.uint32),
                                            st if f.tensor_scale else None, f), sc, st
    codes = el if el.dtype == jnp.uint8 else lax.bitcast_convert_type(el, jnp.uint8)
    return codes, sc, st


def _chain(a, b, sa, sb, bits, *, cfg):
    return bsg.chain_step(a, b, sa, sb, bits, cfg)


def _epilogue(bits, s_a, s_b):
    return bsg.epilogue(lax.bitcast_convert_type(bits, jnp.float32), s_a, s_b)


_EXES: dict = {}
_EXES_LOCK = threading.Lock()
_POOL: list = []


def _executable(fn, statics: tuple, specs: tuple) -> concurrent.futures.Future:
    """The compiled ``fn(*specs, **dict(statics))`` (a future: compiled in a thread)."""
    key = (fn, statics, specs)
    with _EXES_LOCK:
        fut = _EXES.get(key)
        if fut is None:
            if not _POOL:  # (not daemon threads: the interpreter's exit waits for them)
                _POOL.append(concurrent.futures.ThreadPoolExecutor(
                    2, thread_name_prefix="jaxwarp-recipe"))
            fut = _EXES[key] = _POOL[0].submit(_compile, fn, statics, specs)
    return fut


def _compile(fn, statics, specs):
    sharding = jax.sharding.SingleDeviceSharding(k_loop.host_device())
    args = [jax.ShapeDtypeStruct(shape, dtype, sharding=sharding) for shape, dtype in specs]
    return jax.jit(functools.partial(fn, **dict(statics))).lower(*args).compile()


def _spec(*xs) -> tuple:
    return tuple((tuple(np.shape(x)), np.dtype(x.dtype)) for x in xs)


def _run(fn, statics: tuple, *args):
    """``fn(*args, **dict(statics))`` through its executable, on the host device."""
    exe = _executable(fn, statics, _spec(*args)).result()
    return exe(*jax.device_put(args, k_loop.host_device()))


def _quantize_statics(q: bsg.Quantizer, out: str) -> tuple[tuple, int, int]:
    """The static arguments of ``q``'s quantizer executable, its rows' length and the
    rows of a call."""
    f = MX_FORMATS[q.fmt]
    block = bsg.quantizer_block(q)
    n = block[0] * block[1] if isinstance(block, tuple) else block
    r = f.block if n % f.block == 0 else n
    rule = f.default_scale_rule if q.scale_rule is None else q.scale_rule
    statics = (("fmt", q.fmt), ("rule", rule), ("mode", "rs" if q.stochastic else "rn"),
               ("out", out))
    return statics, r, max(1, GROUP_ELEMENTS // r)


_U32, _F32, _U8 = np.dtype(np.uint32), np.dtype(np.float32), np.dtype(np.uint8)


def _prefetch(qs, plan: bsg.Plan, k: int) -> None:
    """Start the compiles of the executables a product will run (its calls find them
    compiled, or wait for them)."""
    out = "values" if plan.mode == "fast" else "codes"
    key = (((2,), _U32),)
    _executable(_fold, (), key + (((), _U32),))
    if qs[0].rht or qs[1].rht:
        _executable(_signs, (), key)
        _executable(bsg.hadamard_runs, (), (((GROUP_ELEMENTS // bsg.RHT_SIZE, bsg.RHT_SIZE),
                                             _F32), ((bsg.RHT_SIZE,), np.dtype(bool))))
    for q in qs:
        statics, r, size = _quantize_statics(q, out)
        _executable(_quantize, statics, (((size, r), _F32), ((size,), _U32)) + key
                    + (((), _U32), ((), _F32)))
    if plan.mode == "exact":
        cfg = bsg.exact_cfg(qs[0].fmt, qs[1].fmt, plan.instruction, plan.arch, k)
        G, ns = CHAIN_BLOCKS, cfg.ik // cfg.block
        _executable(_chain, (("cfg", cfg),), (
            ((G, T, cfg.ik), _U8), ((G, cfg.ik, T), _U8), ((G, T, ns), _U8),
            ((G, ns, T), _U8), ((G, T, T), _U32)))
        if MX_FORMATS[qs[0].fmt].tensor_scale:
            _executable(_epilogue, (), (((G, T, T), _U32), ((), _F32), ((), _F32)))


# --------------------------------------------------------------------------------------
# The host: numpy around the executables.


def _np_blocks(x: np.ndarray, axis: int, block) -> np.ndarray:
    """The quantizers' blocks (``mx_kernels``' cut: a 1D block along ``axis`` last, a 2D
    block's elements last) in numpy."""
    if isinstance(block, tuple):
        br, bc = block
        *lead, r, c = x.shape
        y = x.reshape(*lead, r // br, br, c // bc, bc).swapaxes(-3, -2)
        return y.reshape(*lead, r // br, c // bc, br * bc)
    y = np.moveaxis(x, axis, -1)
    return y.reshape(*y.shape[:-1], y.shape[-1] // block, block)


def _np_unblocks(y: np.ndarray, shape, axis: int, block) -> np.ndarray:
    """The inverse of :func:`_np_blocks`."""
    if isinstance(block, tuple):
        br, bc = block
        *lead, rr, cc, _ = y.shape
        return y.reshape(*lead, rr, cc, br, bc).swapaxes(-3, -2).reshape(shape)
    y = y.reshape(*y.shape[:-2], y.shape[-2] * y.shape[-1])
    return np.moveaxis(y, -1, axis)


def _groups(n_items: int, size: int):
    for g0 in range(0, n_items, size):
        yield slice(g0, min(g0 + size, n_items))


def _padded(x: np.ndarray, size: int) -> np.ndarray:
    if x.shape[0] == size:
        return x
    out = np.zeros((size, *x.shape[1:]), x.dtype)
    out[:x.shape[0]] = x
    return out


def _host_rht(x: np.ndarray, axis: int, neg: np.ndarray) -> np.ndarray:
    xm = np.moveaxis(x, axis, -1)
    shape = xm.shape
    runs = np.ascontiguousarray(xm).reshape(-1, bsg.RHT_SIZE)
    size = GROUP_ELEMENTS // bsg.RHT_SIZE
    out = np.empty_like(runs)
    for sel in _groups(runs.shape[0], size):
        r = _run(bsg.hadamard_runs, (), _padded(runs[sel], size), neg)
        out[sel] = np.asarray(r)[:sel.stop - sel.start]
    return np.moveaxis(out.reshape(shape), -1, axis)


def _host_quantize(x: np.ndarray, q: bsg.Quantizer, axis: int, neg, key_data, out: str):
    """``x`` quantized by ``q`` along ``axis``: (codes (uint8) or values (float32) in
    ``x``'s shape, scale codes in the quantized tensor's layout, tensor scale)."""
    f = MX_FORMATS[q.fmt]
    block = bsg.quantizer_block(q)
    ax = -1 if isinstance(block, tuple) else axis
    statics, r, size = _quantize_statics(q, out)
    if q.rht:
        x = _host_rht(x, axis, neg)
    tmax = np.float32(0)
    if f.tensor_scale:  # mx_kernels.tensor_amax: the largest magnitude's bits
        tmax = np.array(np.max(x.view(np.uint32) & np.uint32(0x7FFFFFFF), initial=0),
                        np.uint32).view(np.float32)
    xb = _np_blocks(x, ax, block)
    lead, n = xb.shape[:-1], xb.shape[-1]
    # Rows of r elements (the format's 1D block where it divides the block: one
    # executable for 1D and 2D blocks), each with its block's amax (computed here: a
    # maximum of magnitude bits, exact).
    flat = np.ascontiguousarray(xb).reshape(-1, r)
    amax = np.repeat(np.max(flat.reshape(-1, n).view(np.uint32) & np.uint32(0x7FFFFFFF),
                            axis=-1), n // r)
    if flat.size >= 1 << 32:
        raise ValueError(f"a recipe operand of {flat.size} elements: the shared "
                         f"executables draw random bits for fewer than 2**32 "
                         f"(jaxwarp.config recipe_shared='off')")
    els, scs, st = [], [], np.float32(0)
    kd = np.zeros(2, np.uint32) if key_data is None else key_data
    for sel in _groups(flat.shape[0], size):
        ng = sel.stop - sel.start
        el, sc, st = _run(_quantize, statics, _padded(flat[sel], size),
                          _padded(amax[sel], size), kd, np.uint32(sel.start * r), tmax)
        els.append(np.asarray(el)[:ng])
        scs.append(np.asarray(sc)[:ng])
    if not els:  # an empty tensor
        els = [np.zeros((0, r), np.float32 if out == "values" else np.uint8)]
        scs = [np.zeros((0,), np.uint8)]
        if f.tensor_scale:  # (quantize's per-tensor scale of an all-zero tensor: 1)
            st = np.float32(1)
    el = np.concatenate(els).reshape(*lead, n)
    sc = np.concatenate(scs)[::n // r].reshape(lead)  # (a block's rows: the same scale)
    if not isinstance(block, tuple):
        sc = np.moveaxis(sc, -1, ax)
    return _np_unblocks(el, x.shape, ax, block), sc, np.asarray(st)


def _k_scales(sc: np.ndarray, block, side: str) -> np.ndarray:
    """``block_scale_gemm``'s scales along K, in numpy: a 2D block's repeated along the
    other axis."""
    if not isinstance(block, tuple):
        return sc
    return np.repeat(sc, block[0], axis=-2) if side == "a" else np.repeat(sc, block[1],
                                                                         axis=-1)


def _host_chain(a, b, sa, sb, cfg, tensor_scales):
    """The exact chain of codes ``a`` (..., M, K), ``b`` (..., K, N) and their scales
    along K, through the shared executables, by output blocks (``k_loop``'s cut)."""
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    (M, K), N = a.shape[-2:], b.shape[-1]
    P = int(np.prod(batch, dtype=np.int64))
    a, sa, b, sb = (np.broadcast_to(v, batch + v.shape[-2:]).reshape(P, *v.shape[-2:])
                    for v in (a, sa, b, sb))
    ks = sa.shape[-1]
    mb, nb = -(-M // T), -(-N // T)
    steps, ns = K // cfg.ik, cfg.ik // cfg.block
    a4 = np.zeros((P, mb * T, K), np.uint8)
    a4[:, :M] = a
    sa4 = np.zeros((P, mb * T, ks), np.uint8)
    sa4[:, :M] = sa
    b4 = np.zeros((P, K, nb * T), np.uint8)
    b4[:, :, :N] = b
    sb4 = np.zeros((P, ks, nb * T), np.uint8)
    sb4[:, :, :N] = sb
    a4, sa4 = a4.reshape(P, mb, T, K), sa4.reshape(P, mb, T, ks)
    b4 = b4.reshape(P, K, nb, T).transpose(0, 2, 1, 3)  # (P, nb, K, T)
    sb4 = sb4.reshape(P, ks, nb, T).transpose(0, 2, 1, 3)
    g_all = np.arange(P * mb * nb)
    p_of, i_of, j_of = g_all // (mb * nb), (g_all // nb) % mb, g_all % nb
    size, out = CHAIN_BLOCKS, np.empty((g_all.size, T, T), np.float32)
    for sel in _groups(g_all.size, size):
        ng = sel.stop - sel.start
        p, i, j = p_of[sel], i_of[sel], j_of[sel]
        ag = _padded(a4[p, i], size).reshape(size, T, steps, cfg.ik).transpose(2, 0, 1, 3)
        sag = _padded(sa4[p, i], size).reshape(size, T, steps, ns).transpose(2, 0, 1, 3)
        bg = _padded(b4[p, j], size).reshape(size, steps, cfg.ik, T).transpose(1, 0, 2, 3)
        sbg = _padded(sb4[p, j], size).reshape(size, steps, ns, T).transpose(1, 0, 2, 3)
        bits = np.zeros((size, T, T), np.uint32)
        for kk in range(steps):
            ops = (np.ascontiguousarray(v[kk]) for v in (ag, bg, sag, sbg))
            bits = _run(_chain, (("cfg", cfg),), *ops, bits)
        if tensor_scales is None:
            d = np.asarray(bits).view(np.float32)
        else:
            d = np.asarray(_run(_epilogue, (), bits, *tensor_scales))
        out[sel] = d[:ng]
    d = out.reshape(P, mb, nb, T, T).transpose(0, 1, 3, 2, 4).reshape(P, mb * T, nb * T)
    return np.ascontiguousarray(d[:, :M, :N]).reshape(*batch, M, N)


def _b_values(ey: np.ndarray, q: bsg.Quantizer):
    """Fast mode's B values as the calling program reads them (see :func:`_qproduct`)."""
    if isinstance(bsg.quantizer_block(q), tuple):
        return ey
    return ey.swapaxes(-1, -2)


# --------------------------------------------------------------------------------------
# Promotion: a product whose calls have spent ``gemm_promote_after`` seconds in the
# shared executables gets its whole arithmetic (the inline path's, for its shapes)
# compiled as an executable of its own in a background thread, as ``k_loop`` promotes a
# product's k loop: the first steps start in seconds, a training run's steps then run at
# about the inline path's speed (one callback per product call remains).


class _Product:
    def __init__(self):
        self.calls, self.seconds = 0, 0.0
        self.thread: concurrent.futures.Future | None = None
        self.whole = None
        self.error: BaseException | None = None


_PRODUCTS: dict = {}
_PROMOTER: list = []


def _whole(x, y, key_data, *, qs, plan: bsg.Plan, number, salt):
    """The inline path's product of padded ``x`` and ``y`` (what the host returns)."""
    if number is not None:
        key_data = _fold(key_data, jnp.uint32(number))
    tx = bsg.quantize_along(x, qs[0], -1, key_data, salt)
    ty = bsg.quantize_along(y, qs[1], -2, key_data, salt + 1)
    if plan.mode == "fast":
        dy = dequantize(ty)
        return dequantize(tx), dy if isinstance(ty.block, tuple) else jnp.swapaxes(dy, -1, -2)
    return bsg.product(tx, ty, plan.instruction, plan.arch, "exact")


def _compile_whole(prod: _Product, statics: tuple, specs: tuple) -> None:
    try:
        prod.whole = _compile(_whole, statics, specs)
    except Exception as e:  # noqa: BLE001 - the shared executables stay
        prod.error = e


def wait_for_promotions(timeout: float | None = None) -> list[BaseException]:
    """Wait for the promotions started so far; returns the errors of those that failed
    (their products keep the shared executables)."""
    with _EXES_LOCK:
        prods = list(_PRODUCTS.values())
    for prod in prods:
        if prod.thread is not None:
            concurrent.futures.wait([prod.thread], timeout)
    return [p.error for p in prods if p.error is not None]


def _host_product(x, y, key_data, *, qs, plan: bsg.Plan, number: int | None, salt: int,
                  promote_after: float | None):
    """A product through the shared executables, or its promoted executable."""
    statics = (("qs", qs), ("plan", plan), ("number", number), ("salt", salt))
    specs = _spec(x, y, key_data)
    with _EXES_LOCK:
        prod = _PRODUCTS.setdefault((statics, specs), _Product())
    if prod.whole is not None:
        out = prod.whole(*jax.device_put((x, y, key_data), k_loop.host_device()))
        return tuple(np.asarray(o) for o in out) if plan.mode == "fast" else np.asarray(out)
    start = time.perf_counter()
    out = _host_blocks(x, y, key_data, qs=qs, plan=plan, number=number, salt=salt)
    with _EXES_LOCK:
        prod.seconds += (time.perf_counter() - start) if prod.calls else 0.0
        prod.calls += 1
        if (promote_after is not None and prod.thread is None
                and prod.seconds >= promote_after):
            # One promotion at a time (an NVFP4 product's takes seconds of CPU: several at
            # once starved the steps on a 2-core host); not daemon threads: the
            # interpreter's exit waits for the compile.
            if not _PROMOTER:
                _PROMOTER.append(concurrent.futures.ThreadPoolExecutor(
                    1, thread_name_prefix="jaxwarp-recipe-promote"))
            prod.thread = _PROMOTER[0].submit(_compile_whole, prod, statics, specs)
    return out


def _host_blocks(x, y, key_data, *, qs, plan: bsg.Plan, number: int | None, salt: int):
    """One product's quantizers and (exact mode) chain; fast mode: the dequantized
    operands. The key: ``key_data`` with ``number`` folded in (as ``recipes.gemm``
    does), then each operand's salt (as ``block_scale_gemm``'s quantizers)."""
    out = "values" if plan.mode == "fast" else "codes"
    kd = np.asarray(key_data)
    if number is not None:
        kd = np.asarray(_run(_fold, (), kd, np.uint32(number)))
    neg = np.asarray(_run(_signs, (), kd)) if qs[0].rht or qs[1].rht else None
    kx, ky = ((np.asarray(_run(_fold, (), kd, np.uint32(salt + i))) if q.stochastic
               else None) for i, q in enumerate(qs))
    ex, sx, stx = _host_quantize(np.asarray(x), qs[0], -1, neg, kx, out)
    ey, sy, sty = _host_quantize(np.asarray(y), qs[1], -2, neg, ky, out)
    if plan.mode == "fast":  # B's values with its blocks' axis last: see _qproduct
        return ex, np.ascontiguousarray(_b_values(ey, qs[1]))
    cfg = bsg.exact_cfg(qs[0].fmt, qs[1].fmt, plan.instruction, plan.arch, ex.shape[-1])
    sa = _k_scales(sx, bsg.quantizer_block(qs[0]), "a")
    sb = _k_scales(sy, bsg.quantizer_block(qs[1]), "b")
    scales = (stx, sty) if MX_FORMATS[qs[0].fmt].tensor_scale else None
    return _host_chain(ex, ey, sa, sb, cfg, scales)


# --------------------------------------------------------------------------------------
# The calling program's side.


def _qproduct(x, y, qs: tuple[bsg.Quantizer, bsg.Quantizer], plan: bsg.Plan, key_data,
              number: int | None, salt: int):
    """``block_scale_gemm``'s product of ``x`` and ``y`` quantized by ``qs``: one host
    callback, which also derives the keys and draws the random bits."""
    xp, yp = bsg.pad_operand(x, qs[0], -1), bsg.pad_operand(y, qs[1], -2)
    _prefetch(qs, plan, xp.shape[-1])
    host = functools.partial(_host_product, qs=qs, plan=plan, number=number, salt=salt,
                             promote_after=config.gemm_promote_after)
    f32 = jnp.float32
    if plan.mode == "fast":
        # B quantized in 1D blocks along K comes back as (..., N, K) and is transposed
        # here: the inline path's dequantized B is that layout (its blocks' axis last),
        # and XLA folds the transpose into the dot (contracting B's last axis), whose
        # summation order, and so its bits, depend on that form.
        ty = isinstance(bsg.quantizer_block(qs[1]), tuple)
        y_shape = yp.shape if ty else (*yp.shape[:-2], yp.shape[-1], yp.shape[-2])
        shapes = (jax.ShapeDtypeStruct(xp.shape, f32), jax.ShapeDtypeStruct(y_shape, f32))
        dx, dy = jax.pure_callback(host, shapes, xp, yp, key_data, vmap_method="sequential")
        dy = dy if ty else jnp.swapaxes(dy, -1, -2)
        d = jnp.matmul(dx, dy, precision=lax.Precision.HIGHEST, preferred_element_type=f32)
    else:
        batch = np.broadcast_shapes(xp.shape[:-2], yp.shape[:-2])
        shape = jax.ShapeDtypeStruct((*batch, xp.shape[-2], yp.shape[-1]), f32)
        d = jax.pure_callback(host, shape, xp, yp, key_data, vmap_method="sequential")
    return d[..., :x.shape[-2], :y.shape[-1]]


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4))
def gemm(x: jax.Array, w: jax.Array, key_data: jax.Array, plan: bsg.Plan,
         number: int | None = None) -> jax.Array:
    """``block_scale_gemm.gemm(x, w, k, plan)`` (the same products, salts and bits) with
    every product through the shared executables; ``k`` is ``key_data`` with ``number``
    folded in (``jax.random.fold_in``), or ``key_data`` itself where ``number`` is None.
    """
    return _qproduct(x, w, plan.fprop, plan, key_data, number, 1)


def _gemm_fwd(x, w, key_data, plan, number):
    return _qproduct(x, w, plan.fprop, plan, key_data, number, 1), (x, w, key_data)


def _gemm_bwd(plan: bsg.Plan, number, res, g):
    x, w, key_data = res
    g = g.astype(jnp.float32)
    dx = _qproduct(g, jnp.swapaxes(w, -1, -2), plan.dgrad, plan, key_data, number, 3)
    dw = _qproduct(jnp.swapaxes(x, -1, -2), g, plan.wgrad, plan, key_data, number, 5)
    return bsg.unbroadcast(dx, x), bsg.unbroadcast(dw, w), None


gemm.defvjp(_gemm_fwd, _gemm_bwd)
