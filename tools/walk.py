"""The walk of one call through jaxwarp's modules: which modules it visits, in what order.

A profile hook (``sys.setprofile``, and ``threading.setprofile`` for the threads a call
starts) sees every Python function call. A call *enters* a module when the function
called is in a jaxwarp module and the module that called it is another one (or there is
none: the user's call). The module that called it is that of the nearest jaxwarp frame
below it, with two functions that JAX calls back attributed to the module that handed
them to JAX, whichever frame JAX happens to run them from:

- a function jitted by ``jaxwarp.config.keyed_jit`` (``jax.jit`` keyed on the options):
  the wrapper's own frames (in ``config.py``) are skipped, as JAX's frames are, so the
  trace of the jitted function continues the visit of the module that called it, as it
  does under ``jax.jit``;
- a host callback (``jax.pure_callback``, or on the CPU
  ``jax.experimental.buffer_callback``): the module that staged it, which XLA calls
  back when the program runs, from the frame that runs the program (where XLA runs the
  callback on a thread of its own, the hook does not see it, and the walk ends at the
  module that staged it).

Two walks are reported:

- the operands' walk: entries whose call carries an array (a NumPy array, a JAX array or
  a tracer) among its arguments -- the path the data takes down the layers;
- every entry, static look-ups included (argument checks, catalogue rows).

docs/architecture.md shows the walks of ``matmul(a, b, operand_format="bf16",
mode="exact")`` and of ``emulate(fn, recipe="nvfp4")``; ``tests/test_walk.py`` holds the
first to its bound. Uses only public names.

Usage:
    python tools/walk.py                 # both calls, a table each
    python tools/walk.py --call matmul   # one of: matmul, emulate
    python tools/walk.py --json          # machine-readable
"""

from __future__ import annotations

import argparse
import collections
import json
import pathlib
import sys
import threading

import numpy as np

import jaxwarp

PACKAGE_DIR = pathlib.Path(jaxwarp.__file__).resolve().parent


#: The JAX functions that stage a host callback (its Python function: ``callback``).
_CALLBACKS = ("pure_callback", "buffer_callback")


def _module_of(filename: str) -> str | None:
    """``gemm/matmul.py`` style name of a jaxwarp source file, or None outside it."""
    try:
        rel = pathlib.Path(filename).resolve().relative_to(PACKAGE_DIR)
    except ValueError:
        return None
    parts = rel.parts[1:] if rel.parts[0] == "_src" else ("(public)",) + rel.parts
    return "/".join(parts)


#: The frames of ``jaxwarp.config.keyed_jit``'s wrapper (``config.py``): the call and the
#: traced function around the one it jits.
_JIT_WRAPPER = {("config.py", "call"), ("config.py", "traced")}


def _carries_array(frame) -> bool:
    import jax

    def is_array(x):
        return isinstance(x, (np.ndarray, jax.Array, jax.core.Tracer))

    code = frame.f_code
    n_args = code.co_argcount + code.co_kwonlyargcount
    flags = code.co_flags
    values = [frame.f_locals.get(n) for n in code.co_varnames[:n_args]]
    if flags & 0x04:  # *args
        values += list(frame.f_locals.get(code.co_varnames[n_args], ()))
        n_args += 1
    if flags & 0x08:  # **kwargs
        values += list(frame.f_locals.get(code.co_varnames[n_args], {}).values())
    for v in values:
        if is_array(v):
            return True
        if isinstance(v, (tuple, list)) and any(is_array(x) for x in v[:4]):
            return True
    return False


def _callback_code(fn):
    """The code object a function handed to JAX runs (through ``functools.partial``)."""
    while hasattr(fn, "func"):
        fn = fn.func
    return getattr(fn, "__code__", None)


def record(fn, *args, **kwargs):
    """Run ``fn(*args, **kwargs)`` under the hook; return (result, entries), each entry a
    ``(caller module or None, module entered, function, carries_array)`` tuple in order."""
    import jax

    entries: list[tuple[str | None, str, str, bool]] = []
    cache: dict[str, str | None] = {}
    staged: dict = {}  # host callbacks' code -> the module that staged them

    def mod(filename):
        if filename not in cache:
            cache[filename] = _module_of(filename)
        return cache[filename]

    def jaxwarp_caller(frame):
        """The module of the nearest jaxwarp frame below ``frame`` (keyed_jit's wrapper
        skipped), or None."""
        caller = frame.f_back
        while caller is not None:
            cm = mod(caller.f_code.co_filename)
            if (cm is not None and not cm.startswith("(public)")
                    and (cm, caller.f_code.co_name) not in _JIT_WRAPPER):
                return cm
            caller = caller.f_back
        return None

    def hook(frame, event, arg):
        if event != "call":
            return
        code = frame.f_code
        m = mod(code.co_filename)
        if m is None:
            if code.co_name in _CALLBACKS and "callback" in frame.f_locals:
                cb = _callback_code(frame.f_locals["callback"])
                if cb is not None:
                    staged[cb] = jaxwarp_caller(frame)
            return
        if m.startswith("(public)") or (m, code.co_name) in _JIT_WRAPPER:
            return
        back = frame.f_back
        if code in staged and (back is None or mod(back.f_code.co_filename) is None):
            cm = staged[code]  # a host callback, called back by XLA
        else:
            cm = jaxwarp_caller(frame)
        if cm != m:
            entries.append((cm, m, frame.f_code.co_name, _carries_array(frame)))

    # A fresh trace: a jitted step compiled by an earlier call (a test run before this
    # one, in the same process) would run without entering the modules it is made of.
    jax.clear_caches()
    sys.setprofile(hook)
    threading.setprofile(hook)
    try:
        out = jax.block_until_ready(fn(*args, **kwargs))
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    return out, entries


def summary(entries) -> dict:
    """Modules in first-visit order with their entry counts, for both walks."""
    def walk(rows):
        counts = collections.Counter(m for _, m, _, _ in rows)
        order = list(dict.fromkeys(m for _, m, _, _ in rows))
        return {"modules": len(order), "entries": {m: counts[m] for m in order},
                "each_once": all(c == 1 for c in counts.values())}
    return {"operands": walk([e for e in entries if e[3]]), "all": walk(entries)}


def call_matmul():
    import jax.numpy as jnp

    rng = np.random.default_rng(0)
    a = jnp.asarray(rng.standard_normal((64, 64)), jnp.float32)
    b = jnp.asarray(rng.standard_normal((64, 64)), jnp.float32)
    return record(jaxwarp.matmul, a, b, operand_format="bf16", mode="exact")


def call_emulate():
    import jax
    import jax.numpy as jnp

    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((32, 64)), jnp.float32)
    w = jnp.asarray(rng.standard_normal((64, 32)), jnp.float32)
    f = jaxwarp.emulate(lambda x, w: jnp.tanh(x @ w), recipe="nvfp4", params_argnums=1)
    return record(f, x, w, rng_key=jax.random.key(0))


CALLS = {"matmul": call_matmul, "emulate": call_emulate}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--call", choices=sorted(CALLS), action="append",
                   help="which call to walk (default: all)")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    args = p.parse_args(argv)
    out = {}
    for name in args.call or list(CALLS):
        _, entries = CALLS[name]()
        out[name] = summary(entries)
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    for name, s in out.items():
        for kind in ("operands", "all"):
            w = s[kind]
            print(f"{name}: {kind} walk, {w['modules']} modules, "
                  f"{'each entered once' if w['each_once'] else 'some entered again'}")
            for m, c in w["entries"].items():
                print(f"  {c:4d}  {m}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
