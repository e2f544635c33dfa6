#!/usr/bin/env bash
# On a GPU machine: the conformance command on JAX's GPU backend over every capture.
# Usage: bash benchmarks/gpu_conformance.sh CAPTURE_DIR OUT_DIR
set -uo pipefail
cap=${1:-../shared/hw/h100}; out=${2:-/tmp}
python3 -c "import jax; print('jax', jax.__version__, jax.devices())"
python3 -m jaxwarp.conformance "$cap"/*.npz tests/data/capture_extra_*.npz --json "$out/conformance_gpu.json" \
  | tee "$out/conformance_gpu.txt" | grep -v " 100.0%"
