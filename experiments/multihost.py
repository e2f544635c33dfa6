"""Several machines (or processes): jaxwarp's sharded workloads over every device of every host.

JAX's own multi-controller model: the same script runs once per host (process);
``jax.distributed.initialize`` connects the processes, after which
``jax.devices()`` lists the devices of *every* process and a mesh over them spans
the hosts. ``jaxwarp.sharded_vmap``, ``jaxwarp.grouped_value_and_grad`` and
products sharded along M under ``jaxwarp.emulate`` then run unchanged: each process
computes on its own devices, collectives go over NCCL between GPUs (or gloo
between CPU processes), and the results are the same bits as on one device.

This script runs three small workloads over the global mesh and prints, from
process 0, one SHA-256 per workload of the gathered result's bytes, so that runs
on different numbers of processes and devices can be compared:

* ``warp``: the butterfly warp reduction on 4096 warps (``sharded_vmap``);
* ``dp``: a data-parallel step (``grouped_value_and_grad``, 8 groups) of a small
  MLP whose products run on the emulated tensor core (bf16, exact);
* ``tp``: one exact emulated bf16 product with its rows sharded over the devices.

Usage (one command per host; here two processes on one machine's CPU)::

    python experiments/multihost.py --coordinator 10.0.0.1:1234 --num-processes 2 \\
        --process-id 0        # on host 0
    python experiments/multihost.py --coordinator 10.0.0.1:1234 --num-processes 2 \\
        --process-id 1        # on host 1
    python experiments/multihost.py                      # one process, for comparison

On GPU clusters managed by SLURM or Open MPI, ``jax.distributed.initialize()``
without arguments finds the coordinator and the process ids itself
(``--auto``). On the CPU the processes exchange data through gloo
(``jax_cpu_collectives_implementation``), which this script selects.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import jaxwarp  # noqa: E402

WARPS = 4096
GROUPS = 8


def _digest(tree) -> str:
    """SHA-256 of the bytes of every leaf, gathered from every process."""
    h = hashlib.sha256()
    for x in jax.tree_util.tree_leaves(tree):
        if isinstance(x, jax.Array) and not x.is_fully_addressable:
            x = multihost_utils.process_allgather(x, tiled=True)
        h.update(np.asarray(x).tobytes())
    return h.hexdigest()


def _warp_reduce(x):
    """The CUDA guide's butterfly reduction: every lane ends with the warp's sum."""
    for offset in (16, 8, 4, 2, 1):
        x = x + jaxwarp.shfl_xor_sync(jaxwarp.FULL_MASK, x, offset)
    return x


def _mlp_loss(params, x, y):
    h = jax.nn.relu(x @ params["w1"] + params["b1"])
    return jnp.mean((h @ params["w2"] - y) ** 2)


def workloads(mesh) -> dict[str, str]:
    """The three workloads on ``mesh``; ``{name: sha256}``."""
    rng = np.random.default_rng(0)
    out = {}
    warps = rng.integers(-(2**31), 2**31, (WARPS, 32), dtype=np.int64).astype(np.int32)
    f = jaxwarp.sharded_vmap(_warp_reduce, devices=list(mesh.devices.flat))
    out["warp"] = _digest(f(warps))

    params = {"w1": rng.standard_normal((16, 32), np.float32),
              "b1": np.zeros(32, np.float32),
              "w2": rng.standard_normal((32, 16), np.float32)}
    x = rng.standard_normal((64, 16), np.float32)
    y = rng.standard_normal((64, 16), np.float32)
    loss = jaxwarp.emulate(_mlp_loss, operand_format="bf16")
    step = jax.jit(jaxwarp.grouped_value_and_grad(loss, GROUPS, mesh=mesh))
    rep, batch = NamedSharding(mesh, P()), NamedSharding(mesh, P(mesh.axis_names[0]))
    out["dp"] = _digest(step(jax.device_put(params, rep), jax.device_put(x, batch),
                             jax.device_put(y, batch)))

    a = rng.standard_normal((64, 48), np.float32)
    b = rng.standard_normal((48, 32), np.float32)
    prod = jax.jit(jaxwarp.emulate(lambda a, b: a @ b, operand_format="bf16"))
    out["tp"] = _digest(prod(jax.device_put(a, NamedSharding(mesh, P(mesh.axis_names[0], None))),
                             jax.device_put(b, rep)))
    return out


def main(argv=None) -> dict[str, str]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.splitlines()[2:]))
    ap.add_argument("--coordinator", metavar="HOST:PORT",
                    help="address of process 0 (with --num-processes and --process-id)")
    ap.add_argument("--num-processes", type=int, metavar="N")
    ap.add_argument("--process-id", type=int, metavar="I")
    ap.add_argument("--auto", action="store_true",
                    help="jax.distributed.initialize() without arguments (SLURM, Open MPI)")
    ap.add_argument("--devices", type=int, default=None, metavar="N",
                    help="use the first N global devices (default: all)")
    args = ap.parse_args(argv)
    manual = (args.coordinator, args.num_processes, args.process_id)
    if any(v is not None for v in manual) and not all(v is not None for v in manual):
        ap.error("--coordinator, --num-processes and --process-id go together")
    # Before anything starts a backend: CPU processes exchange data through gloo (GPUs
    # through NCCL whatever this says).
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    if args.auto:
        jax.distributed.initialize()
    elif args.coordinator is not None:
        jax.distributed.initialize(args.coordinator, args.num_processes, args.process_id)
    devices = jax.devices()[:args.devices] if args.devices else jax.devices()
    mesh = jaxwarp.batch_mesh(devices)
    digests = workloads(mesh)
    if jax.process_index() == 0:
        print(json.dumps({"processes": jax.process_count(), "devices": len(devices),
                          "local_devices": jax.local_device_count(),
                          "backend": jax.default_backend(), **digests}), flush=True)
    return digests


if __name__ == "__main__":
    main()
