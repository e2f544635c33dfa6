"""Exact products on the CPU's shared executables (``k_loop``) never hang, however the
caller dispatches them.

The shared executables run from inside a host callback of the calling program. When
they ran on JAX's own CPU client, a Python loop that dispatched jitted exact products
back to back without waiting hung forever (the callback's dispatch waited for a unit of
the in-flight semaphore held by the programs queued behind it); they now run on a client
of their own (``k_loop.host_device``). Each case runs in a fresh process with a timeout,
so that a hang fails the test instead of blocking the run.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

# The loop of the report: u += f(a[:, i:i+32], b[i:i+32]), eight products a round, none
# waited for; then the bits against the same products run one at a time, each waited for.
_LOOP = """
import sys
import jax
import jax.numpy as jnp
import numpy as np
import jaxwarp
from jaxwarp._src.gemm import k_loop

K, ROUNDS = 256, 12
rng = np.random.default_rng(0)
a = jnp.asarray(rng.standard_normal((32, K)), jnp.float32)
b = jnp.asarray(rng.standard_normal((K, 32)), jnp.float32)
mm = lambda a, b: jaxwarp.matmul(a, b, operand_format="bf16", instruction="mma_sync")
f = mm if sys.argv[1] == "eager" else jax.jit(mm)
u = jnp.zeros((32, 32), jnp.float32)
for _ in range(ROUNDS):
    for i in range(0, K, 32):
        u = u + f(a[:, i:i+32], b[i:i+32])
u = np.asarray(u)
assert k_loop.products(), "the products did not take the shared executables"
v = jnp.zeros((32, 32), jnp.float32)
for _ in range(ROUNDS):
    for i in range(0, K, 32):
        v = (v + f(a[:, i:i+32], b[i:i+32])).block_until_ready()
np.testing.assert_array_equal(u.view(np.uint32), np.asarray(v).view(np.uint32))
print("ok")
"""


@pytest.mark.parametrize("how", ["jit", "eager"])
def test_loop_of_products_does_not_hang(how):
    # (one CPU device and async dispatch, whatever the calling environment sets)
    env = {k: v for k, v in os.environ.items()
           if k not in ("XLA_FLAGS", "JAX_CPU_ENABLE_ASYNC_DISPATCH")}
    env.update(JAX_PLATFORMS="cpu", JAXWARP_GEMM_SHARED="auto",
               PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]))
    try:
        res = subprocess.run([sys.executable, "-c", _LOOP, how], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail(f"a loop of {how} exact products on the CPU hung (no result in 120 s)")
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.strip().endswith("ok")
