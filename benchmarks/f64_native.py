"""The f64 mma (m8n8k4, a chain of IEEE fmas) on native float64 operations against the
128-bit integer emulation it replaces where it can, and against XLA's own f64 product.

Times, on one batch of tiles with operands in the native range (standard normal values):

* ``native``: ``jaxwarp.mma(..., a_format="f64")`` as it runs (native float64 operations
  with their range checks, one ``lax.cond`` per call);
* ``integer``: the same call on the same batch with one accumulator element made
  subnormal, so that the whole call takes the 128-bit integer chain (what every call ran
  before, and what a call with a NaN, infinity or subnormal still runs); its time includes
  the native attempt and the range check that precede the fallback;
* ``vmapped``: ``jax.vmap`` of the mma over 4 parts of the same batch (the ``custom_vmap``
  rule keeps one conditional);
* ``xla``: ``einsum('tmk,tkn->tmn') + c`` in f64 (XLA's product, not the same bits).

The native and integer results are compared bit for bit (all elements but those of
the tile holding the subnormal). What was learnt on
the H100 (jax 0.11.2): a first design that returned the range check as a second output
made XLA compute the whole chain twice (once for the check's reduction) and ran slower
than the integer chain; storing the chain once (an optimization barrier) and reducing over
it fixed that.

Usage: python benchmarks/f64_native.py [--tiles-log2 N] [--repeats R]
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np
from _common import best_time, device_info, emit

import jaxwarp


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tiles-log2", type=int, default=None,
                   help="log2 of the number of m8n8k4 tiles (default 22 on a GPU, 16 on a CPU)")
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    jax.config.update("jax_enable_x64", True)
    n = args.tiles_log2 or (16 if jax.default_backend() == "cpu" else 22)
    tiles = 1 << n
    rng = np.random.default_rng(0)
    a = jnp.asarray(rng.standard_normal((tiles, 8, 4)))
    b = jnp.asarray(rng.standard_normal((tiles, 4, 8)))
    c = jnp.asarray(rng.standard_normal((tiles, 8, 8)))

    def mma(a, b, c):
        return jaxwarp.mma(a, b, c, a_format="f64", c_format="f64", d_format="f64")

    def vmapped(a, b, c):
        parts = [x.reshape(4, -1, *x.shape[1:]) for x in (a, b, c)]
        return jax.vmap(mma)(*parts).reshape(c.shape)

    # One subnormal accumulator element (tile 0) sends the whole call to the integer chain.
    c_sub = c.at[0, 0, 0].set(np.float64(5e-324))
    fns = {"native": jax.jit(mma), "integer": jax.jit(mma),
           "vmapped": jax.jit(vmapped),
           "xla": jax.jit(lambda a, b, c: jnp.einsum("tmk,tkn->tmn", a, b,
                                                     precision="highest") + c)}
    operands = {k: (a, b, c_sub if k == "integer" else c) for k in fns}
    seconds = {k: best_time(lambda f=f, k=k: jax.block_until_ready(f(*operands[k])),
                            args.repeats)
               for k, f in fns.items()}
    native = np.asarray(fns["native"](a, b, c)).view(np.uint64)[1:]
    integer = np.asarray(fns["integer"](a, b, c_sub)).view(np.uint64)[1:]
    vm = np.asarray(fns["vmapped"](a, b, c)).view(np.uint64)[1:]
    macs = tiles * 8 * 8 * 4
    emit({"benchmark": "f64_native", **device_info(), "tiles": tiles,
          "seconds": seconds,
          "macs_per_s": {k: macs / v for k, v in seconds.items()},
          "native_over_integer": seconds["integer"] / seconds["native"],
          "native_over_xla": seconds["xla"] / seconds["native"],
          "bit_equal_native_integer": bool((native == integer).all()),
          "bit_equal_vmapped_integer": bool((vm == integer).all()),
          "elements_compared": int(native.size)})


if __name__ == "__main__":
    main()
