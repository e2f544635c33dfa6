#!/usr/bin/env bash
# On an sm_90 GPU machine, in one go: fresh captures with a new seed (independent of the
# ones the model was fitted on), the conformance command on JAX's GPU and CPU backends
# over them and over tests/data, and every benchmark. Writes OUT/*.json and OUT/*.txt.
#   bash benchmarks/gpu_all.sh OUT [SEED]
set -uo pipefail
out=${1:?usage: gpu_all.sh OUT [SEED]}; seed=${2:-7}
mkdir -p "$out"; export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
python3 -c "import jax; print('jax', jax.__version__, jax.devices())" | tee "$out/env.txt"
bash tools/capture/capture_all.sh /tmp/cap_gpu 0.5 "$seed" > "$out/capture.txt" 2>&1
caps=$(ls /tmp/cap_gpu/*/*.npz)
timeout 240 python3 -m jaxwarp.conformance $caps tests/data/*.npz --json "$out/conformance_gpu.json" \
  > "$out/conformance_gpu.txt" 2>&1; echo "gpu conformance exit $?" | tee -a "$out/env.txt"
JAX_PLATFORMS=cpu timeout 300 python3 -m jaxwarp.conformance $caps tests/data/*.npz \
  --json "$out/conformance_cpu.json" > "$out/conformance_cpu.txt" 2>&1
echo "cpu conformance exit $?" | tee -a "$out/env.txt"
cd benchmarks
{ timeout 120 python3 mma_exact.py --a-type f16; timeout 120 python3 mma_exact.py --a-type bf16
  timeout 200 python3 instructions_exact.py; timeout 60 python3 warp_reduce.py
  timeout 60 python3 matmul_fast.py; } > "$out/benchmarks.json" 2> "$out/benchmarks_err.txt"
