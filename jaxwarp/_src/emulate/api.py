"""``emulate``: the public function, its static-argument cache key and its jitted runner."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp  # noqa: F401  (the docstring example's namespace)

from jaxwarp._src import checks
from jaxwarp._src.emulate import delayed_sites as delayed
from jaxwarp._src.emulate import progress
from jaxwarp._src.emulate.interpreter import Interpreter, is_dynamic
from jaxwarp._src.emulate.report import EmulationReport, Product
from jaxwarp._src.emulate.settings import check_mfma_scaling, make_config
from jaxwarp._src.recipes import recipe as recipes
from jaxwarp._src.recipes.delayed import DelayedScaling
from jaxwarp._src.recipes.recipe import Recipe


class _Static:
    """Leafless pytree carrying trace-time Python data out of a jitted call."""

    def __init__(self, value):
        self.value = value


jax.tree_util.register_pytree_node(_Static, lambda s: ((), s), lambda s, _: s)


class _DynamicMarker:
    def __repr__(self):
        return "<dynamic>"


_DYNAMIC = _DynamicMarker()  # marks the array leaves in a _Key's static tuple


class _Key:
    """Hashable static part of a call: argument structure, non-array leaves."""

    def __init__(self, treedef, static):
        self.treedef, self.static = treedef, static

    def __hash__(self):
        return hash((self.treedef, self.static))

    def __eq__(self, other):
        return (isinstance(other, _Key) and self.treedef == other.treedef
                and len(self.static) == len(other.static)
                and all(a is b or (type(a) is type(b) and a == b)
                        for a, b in zip(self.static, other.static, strict=True)))


_SCALING_TEXT = {None: "", "tensor": ", per-tensor scaled by powers of two",
                 "blockwise": ", block-scaled (1x128 tiles, 128x128 weight blocks, fp32 scales)",
                 "blockwise_pow2": ", block-scaled (1x128 tiles, 128x128 weight blocks, "
                                   "power-of-two scales)"}


def _check_64bit(leaves, args, kwargs) -> None:
    """The shared 64-bit policy (``checks.check_64bit``) on every array argument: with x64
    off, JAX would narrow a float64 / int64 array to 32 bits silently."""
    if checks.x64_enabled():
        return
    for i, x in enumerate(leaves):
        if is_dynamic(x):
            try:
                checks.check_64bit(x, "")
            except TypeError:
                path = jax.tree_util.tree_flatten_with_path((args, kwargs))[0][i][0]
                where = ("args" if path[0].idx == 0 else "kwargs") + jax.tree_util.keystr(
                    path[1:])
                checks.check_64bit(x, f"emulate's argument {where}")


def _check_params(args, argnums) -> None:
    """scope="linear": the parameter arguments exist and hold arrays (else no product
    would be in scope, silently)."""
    for i in argnums:
        if i >= len(args):
            raise ValueError(
                f"scope='linear' takes the array leaves of positional argument(s) "
                f"{argnums} as the parameters (params_argnums), but the call has "
                f"{len(args)} positional argument(s): pass the parameters positionally, "
                f"set params_argnums, or use scope='all'")
        if not any(is_dynamic(x) for x in jax.tree_util.tree_leaves(args[i])):
            raise ValueError(
                f"scope='linear' takes the array leaves of positional argument {i} as the "
                f"parameters (params_argnums={argnums}), but it has no array leaves "
                f"(got {type(args[i]).__name__}): set params_argnums to the argument "
                f"holding the parameters, or use scope='all'")


def emulate(
    fn: Callable,
    *,
    operand_format: str | None = None,
    accumulator: str = "f32",
    instruction: str | None = None,
    arch: str | None = None,
    mode: str = "exact",
    tile: tuple[int, int, int] | None = None,
    filter: Callable[[Product], bool] | None = None,
    on_unsupported: str = "error",
    report: bool = False,
    scaling: str | DelayedScaling | None = None,
    backward_format: str | None = None,
    promote_every: int | None = None,
    recipe: str | Recipe | None = None,
    scope: str | None = None,
    params_argnums: int | tuple[int, ...] = 0,
) -> Callable:
    """Returns ``fn`` with every matrix product run as the emulated tensor core runs it.

    Each floating-point ``dot_general`` (``@``, ``jnp.matmul``, ``jnp.einsum``,
    ``jnp.dot``, Flax/Equinox layers, attention) and ``conv_general_dilated``
    becomes :func:`jaxwarp.matmul` with these settings: operands converted to
    ``operand_format`` (round to nearest for f16/bf16, ``__float_to_tf32`` for
    tf32), tiles of the instruction's shape, K chained in order through the
    accumulator, the result converted to the product's own output dtype (round to
    nearest). ``emulate(lambda a, b: a @ b, operand_format=f)(A, B)`` equals
    ``jaxwarp.matmul(A, B, operand_format=f)`` bit for bit, and so do its
    gradients. K runs row-major over the contracting dimensions in the order the
    dimension numbers list them (the first is the slowest); a convolution is the
    implicit (im2col) GEMM, K ordered ``(kernel spatial..., input channel)``, e.g.
    ``(kh, kw, cin)``; M, N and K are zero-padded to the instruction tile (no bit
    changes).

    What is entered: ``jit``, ``scan``, ``while_loop``, ``cond``/``switch``,
    ``checkpoint``, ``custom_jvp`` (primal and jvp rule emulated), ``custom_vjp``
    (primal, fwd and the user's bwd emulated), ``shard_map``, and Pallas kernels
    (``pallas_call``, with or without ``interpret=True``: emulate interprets the kernel
    itself): every product of a kernel body is the chain of the instruction the kernel's
    compiler issues on the target, with an add of a product folded into its accumulator
    as the compiler folds it (docs/kernels.md lists each operand dtype's instruction on
    sm_90a and its evidence). The report lists each kernel product with its
    ``instruction``. Products inside any other
    primitive with a sub-program are unsupported.

    Integer and boolean products are left alone (``jaxwarp.matmul`` has no integer
    operand format). Unsupported products (complex, f64 operands with a non-f64
    format, ``ragged_dot``, conv with ``batch_group_count > 1``) raise
    :class:`UnsupportedProductError` naming the primitive and shapes, or, with
    ``on_unsupported="skip"``, run unemulated and are listed in the report.

    fp8 recipes (``operand_format="e4m3"``): ``scaling="tensor"`` (for f16, e4m3
    and e5m2 operands) multiplies each operand by its current per-tensor scale
    ``2**k``, the largest power of two with ``amax * 2**k <= max_value`` of the
    format (a constant to the derivative; ``k`` within +-126, 0 where the amax is 0
    or not finite), before it is rounded to the operand format, and multiplies the
    result by ``2**-(kx + ky)``, rounded once into the accumulator's format. Every
    scaling step is computed on the bits with integer operations (exact in fp32's
    normal range, else rounded once), so the recipe gives the same bits on every
    backend (a scale ``max_value / amax`` would need a division, which XLA's GPU
    backend does not round correctly; XLA's CPU flushes subnormal float results and
    its GPU does not). ``backward_format="e5m2"`` converts gradients to e5m2 in the
    backward products (the hybrid recipe; with ``scaling`` the gradient gets its own
    amax scale); ``promote_every=128`` is passed to ``matmul`` (promotion of partial
    sums to fp32, DeepSeek-V3).

    Block-scaled recipes (``recipe="mxfp8"``, ``"nvfp4"`` or a
    :class:`jaxwarp.mx.Recipe`, instead of ``operand_format``): every product ``x @ w``
    of a weight ``w`` (see ``scope``) is ``jaxwarp.mx.matmul``'s block-scaled GEMM on the
    recipe's tensor core (``tcgen05`` on sm_100a by default; ``instruction="mma_sync"``
    for sm_120a), with
    its backward products block-scaled too, each tensor in the recipe's format, block
    and rounding (TransformerEngine's MXFP8BlockScaling and NVFP4BlockScaling; see
    :class:`jaxwarp.mx.Recipe`); ``mode="fast"`` dequantizes and multiplies in
    fp32 instead. A recipe with stochastic rounding or the random Hadamard transform
    (``"nvfp4"``) needs a key when the function is called: ``f(x, w,
    rng_key=jax.random.key(0))``. Every emulated function accepts ``rng_key`` (checked:
    one PRNG key) and ignores it where nothing draws random bits, so a training loop
    generic over recipes passes one to each.

    Args:
        fn: the function. Array leaves of its arguments (``jax.Array``,
            ``np.ndarray``, NumPy scalars) are traced; every other leaf (Python
            numbers, strings, functions in an Equinox module) is static, as in
            ``equinox.filter_jit``. Non-array output leaves are returned as they are.
        operand_format: ``"f16"``, ``"bf16"``, ``"tf32"``, ``"f64"`` (needs
            ``jax_enable_x64``), ``"e4m3"`` or ``"e5m2"``; an alias (``"fp16"``) or a
            dtype (``jnp.bfloat16``) works too. Give it or ``recipe``; or None: each
            Pallas kernel product in its own dtype (a kernel product of an f16 / bf16 /
            fp8 dtype other than a given format is an error), and a ValueError for a
            product outside a kernel. On an AMD target (``arch="gfx942"``, ...): the
            formats the generation has an MFMA for (``mfma_gemm.GEMM_INSTRUCTIONS``):
            ``"f16"``, ``"bf16"``, ``"f32"`` on all three, ``"f64"`` on gfx90a and
            gfx942, ``"tf32"`` (xf32), ``"e4m3fnuz"`` and ``"e5m2fnuz"`` on gfx942.
        accumulator: ``"f32"``, ``"f16"`` (f16 operands) or ``"f64"`` (f64).
        instruction: ``"wmma"``, ``"mma_sync"``, ``"wgmma"``, or None for matmul's
            default (``"wmma"`` for f16/bf16/tf32/f64, ``"wgmma"`` for fp8); in a Pallas
            kernel None is the compiler's instruction, and a given one replaces it.
            ``"mfma"`` (or None with an AMD ``arch``): AMD's ``v_mfma_*`` chains.
        arch: ``matmul``'s architecture preset (None: as ``matmul``'s, the
            instruction's target, ``"sm_100a"`` for tcgen05, else ``"sm_90"``, the
            H100's); with a recipe its target (None: the recipe's). An AMD matrix core,
            ``"gfx908"`` / ``"gfx90a"`` / ``"gfx942"`` (or ``"CDNA1"``-``"CDNA3"``,
            ``"MI100"`` / ``"MI200"`` / ``"MI300"``; ``"gfx942"`` with
            ``instruction="mfma"`` and no arch): every product is
            ``jaxwarp.matmul(..., instruction="mfma", arch=arch)``, its gradients the
            same MFMA chains (not for the fnuz fp8 formats), exact mode, no recipe,
            scaling, tile, promotion, Pallas kernel or 2:4 operand (docs/amd.md).
        mode: ``"exact"`` (bit for bit), ``"fast"`` or, on an H100 / H200,
            ``"native"`` (exact mode's bits from the tensor cores themselves; not with a
            recipe) (see ``matmul``). AMD targets: ``"exact"`` only.
        tile: ``matmul``'s WMMA tile; None for its default.
        filter: None (emulate every product) or a callable ``Product -> bool``;
            see :class:`ProductFilter` for ready-made ones. False leaves the product
            unemulated (``dot_general`` as written).
        on_unsupported: ``"error"`` or ``"skip"``.
        report: if True, the function returns ``(out, EmulationReport)``.
        scaling: None, ``"tensor"`` (per-tensor current scaling from the amax, by
            powers of two; f16, e4m3 and e5m2 operand and gradient formats only), or
            ``"blockwise"`` / ``"blockwise_pow2"`` (DeepSeek-V3's fine-grained fp8
            recipe, fp8 formats only: the left operand of each product in 1x128 tiles
            along K, the right one in 128x128 blocks -- the weight of ``x @ W`` --, the
            wgrad product's gradient in 128x1 tiles; each block's scale from its amax,
            fp32 ``amax / max`` or TransformerEngine's power of two, applied by
            ``matmul`` on each promotion every 128 k-elements; see
            ``docs/fp8_recipes.md``), or a :class:`jaxwarp.fp8.DelayedScaling`:
            TransformerEngine's delayed scaling, each product as
            ``jaxwarp.fp8.delayed_matmul`` with its own amax history (``operand_format``
            None or the recipe's ``fp8_format``). The function then takes
            ``scaling_state=`` (None, the default: TransformerEngine's initial buffers)
            and returns ``(out, new_state)``: a tuple of
            :class:`jaxwarp.fp8.DelayedScalingState`, one per emulated product in
            program order (the equation order of ``fn``'s jaxpr, ``jit`` bodies
            inlined; docs/fp8_recipes.md).
        backward_format: None (gradients in ``operand_format``, as ``matmul``'s
            own vjp) or the operand format of the gradient in backward products.
        promote_every: None or N, passed to ``matmul`` (promotion of partial sums
            to fp32 every N k-elements).
        recipe: None, ``"mxfp8"``, ``"nvfp4"`` or a :class:`jaxwarp.mx.Recipe` (a
            block-scaled training recipe; then ``operand_format``, ``scaling``,
            ``backward_format``, ``promote_every`` and ``tile`` stay unset).
        scope: which products are emulated: ``"linear"`` (TransformerEngine's scope:
            only a product one of whose operands is a weight, i.e. computed from the
            parameters alone -- a transpose, reshape, cast or slice of a leaf of the
            ``params_argnums`` arguments --, the weight being that operand; every other
            product, e.g. attention's ``QK^T`` and ``PV``, runs as written, in the
            program's dtypes), ``"all"`` (every product, the right-hand operand as the
            weight) or None: ``"linear"`` with a recipe, ``"all"`` otherwise. ``filter``
            then narrows the products in scope (docs/microscaling.md, "Recipes"). A
            Pallas kernel's products run as its compiler issues them, whatever the scope.
        params_argnums: with ``scope="linear"``, the positional argument(s) holding the
            parameters (jax.grad's default argnums: ``model.apply(params, x)``,
            ``loss(model, x, y)``); their array leaves are the weights.

    Returns:
        A function with ``fn``'s signature (returning ``(out, report)`` when
        ``report=True``). It is jitted inside (retraced only for new shapes,
        dtypes or static arguments) and composes with ``jax.jit``, ``jax.vmap``,
        ``jax.grad`` and ``jax.sharding`` in any order.

    Raises:
        ValueError: a format, instruction, scaling, accumulator, arch, mode,
            promotion or tile that is not allowed (the message lists what is).
        RuntimeError: ``operand_format="f64"`` with ``jax_enable_x64`` off.
        TypeError: (when called) a 64-bit NumPy or JAX array argument with
            ``jax_enable_x64`` off (JAX would narrow it silently).
        UnsupportedProductError: (when called) a product emulate cannot run.
        ValueError: (when called) ``scope="linear"`` and a ``params_argnums`` argument
            that the call does not pass positionally or that holds no arrays.

    Example:
        >>> a = jnp.ones((16, 32), jnp.float32); b = jnp.full((32, 16), 1 / 3, jnp.float32)
        >>> f = jaxwarp.emulate(lambda x, y: jnp.tanh(x @ y), operand_format="bf16")
        >>> bool((f(a, b) == jnp.tanh(jaxwarp.matmul(a, b, operand_format="bf16"))).all())
        True
        >>> out, rep = jaxwarp.emulate(lambda x, y: x @ y, operand_format="tf32",
        ...                            report=True)(a, b)
        >>> rep.count, rep.entries[0].product.k
        (1, 32)
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {fn!r}")
    ds = scaling if isinstance(scaling, DelayedScaling) else None
    if ds is not None:  # delayed scaling: emulate/delayed.py; the config is plain fp8's
        check_mfma_scaling(ds, instruction, arch)
        operand_format = delayed.check_scaling(ds, operand_format, accumulator,
                                               backward_format, recipe)
        scaling = None
    cfg = make_config(operand_format, accumulator, instruction, arch, mode, tile, filter,
                      on_unsupported, scaling, backward_format, promote_every, recipe, scope,
                      params_argnums)
    needs_key = cfg.plan is not None and cfg.plan.needs_key
    config_items = tuple((f.name, getattr(cfg, f.name)) for f in dataclasses.fields(cfg)
                         if f.name != "filter") + (("filter", filter),) + (
                             (("delayed_scaling", ds),) if ds is not None else ())
    backward = ("delayed scaling: straight through the casts, the backward products "
                "jaxwarp.matmul's own (no delayed scales)" if ds is not None else
                f"block-scaled recipe {cfg.recipe.name!r}: dgrad and wgrad as block-scaled "
                f"GEMMs, each operand quantized along its contraction axis"
                if cfg.recipe is not None else
                "matmul's custom_vjp: dA = dD @ B^T and dB = A^T @ dD on the same emulated "
                "tensor core" if not cfg.custom_recipe else
                f"emulate's recipe vjp: gradients in {cfg.backward_format or operand_format}"
                f"{_SCALING_TEXT[cfg.scaling]}, saved "
                f"operands in {operand_format}")

    name = getattr(fn, "__qualname__", None) or repr(fn)
    what = (f"recipe {cfg.recipe.name!r}" if cfg.recipe is not None else
            f"{cfg.operand_format}") + f", {cfg.mode} mode"

    def run(key: _Key, rng, state, *dyn):
        interp = Interpreter(cfg) if ds is None else delayed.DelayedInterpreter(cfg, ds, state)
        it = iter(dyn)
        leaves = [next(it) if s is _DYNAMIC else s for s in key.static]
        args, kwargs = jax.tree_util.tree_unflatten(key.treedef, leaves)
        start = progress.trace_started(what)
        with recipes.call_key(rng):
            out = interp.call(fn, args, kwargs, params_argnums=cfg.params_argnums)
        progress.trace_done(start, name, len(interp.entries), what)
        if ds is not None:
            out = (out, interp.result_state())
        out_leaves, out_tree = jax.tree_util.tree_flatten(out)
        mask = [is_dynamic(x) for x in out_leaves]
        rep = EmulationReport(tuple(interp.entries), config_items, backward)
        return ([x for x, m in zip(out_leaves, mask, strict=True) if m],
                _Static((out_tree,
                         [None if m else x for x, m in zip(out_leaves, mask, strict=True)],
                         rep)))

    jitted = jax.jit(run, static_argnums=0)

    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        rng = kwargs.pop("rng_key", None)
        state = None if ds is None else delayed.check_state(kwargs.pop("scaling_state", None),
                                                            ds)
        if needs_key and rng is None:
            raise ValueError(f"recipe {cfg.recipe.name!r} rounds stochastically or applies "
                             f"the random Hadamard transform, so it needs a PRNG key: call "
                             f"the emulated function with rng_key=..., e.g. "
                             f"f(x, w, rng_key=jax.random.key(0)) (a new key each step)")
        if rng is not None:
            # Checked always; used only where the recipe draws random bits, so a training
            # loop generic over recipes (and over no recipe) passes a key to every one.
            rng = recipes.key_arg(rng)
            if not needs_key:
                rng = None
        if cfg.params_argnums is not None:
            _check_params(args, cfg.params_argnums)
        leaves, treedef = jax.tree_util.tree_flatten((args, kwargs))
        _check_64bit(leaves, args, kwargs)
        static = tuple(_DYNAMIC if is_dynamic(x) else x for x in leaves)
        dyn = [x for x in leaves if is_dynamic(x)]
        key = _Key(treedef, static)
        try:
            hash(key)
        except TypeError:  # an unhashable static leaf: run without the outer jit
            outs, aux = run(key, rng, state, *dyn)
        else:
            outs, aux = jitted(key, rng, state, *dyn)
        out_tree, static_out, rep = aux.value
        it = iter(outs)
        # None is never a pytree leaf, so None marks the dynamic outputs.
        out = jax.tree_util.tree_unflatten(
            out_tree, [next(it) if s is None else s for s in static_out])
        return (out, rep) if report else out

    wrapped.config = dict(config_items)
    return wrapped
