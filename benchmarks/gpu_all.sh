#!/usr/bin/env bash
# On an sm_90 GPU machine: everything the project measures there, in two phases that
# each fit in a 10-minute call. Writes OUT/*.json and OUT/*.txt.
#   bash benchmarks/gpu_all.sh OUT check [SEED]  # fresh captures with a new seed (not the
#        ones the model was fitted on), conformance on JAX's GPU and CPU backends over
#        them and over tests/data, and the tests that touch newer-JAX code paths
#   bash benchmarks/gpu_all.sh OUT bench         # the speed benchmarks (tiles, instructions,
#        butterfly, fast and exact matmul)
#   bash benchmarks/gpu_all.sh OUT bench2        # emulate (GEMM, training step), exact GEMM
#        scaling, the fp8-with-promotion training run
set -uo pipefail
out=${1:?usage: gpu_all.sh OUT check|bench|bench2 [SEED]}; phase=${2:?check, bench or bench2}; seed=${3:-7}
mkdir -p "$out"; export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD MPLBACKEND=Agg
python3 -c "import jax; print('jax', jax.__version__, jax.devices())" | tee -a "$out/env.txt"
if [ "$phase" = check ]; then
  bash tools/capture/capture_all.sh /tmp/cap_gpu 0.5 "$seed" > "$out/capture.txt" 2>&1
  cp /tmp/cap_gpu/*.log "$out/" 2>/dev/null
  caps=$(ls /tmp/cap_gpu/*/*.npz)
  timeout 200 python3 -m jaxwarp.conformance $caps tests/data/*.npz --progress off \
    --json "$out/conformance_gpu.json" > "$out/conformance_gpu.txt" 2>&1
  echo "gpu conformance exit $?" | tee -a "$out/env.txt"
  JAX_PLATFORMS=cpu timeout 240 python3 -m jaxwarp.conformance $caps tests/data/*.npz \
    --progress off --json "$out/conformance_cpu.json" > "$out/conformance_cpu.txt" 2>&1
  echo "cpu conformance exit $?" | tee -a "$out/env.txt"
  timeout 100 python3 -m pytest -q -x -p no:cacheprovider tests/test_emulate.py \
    tests/tensorcore/test_ldmatrix.py tests/test_cutlass_mainloop.py > "$out/pytest_newjax.txt" 2>&1
  echo "pytest (jax on GPU) exit $?" | tee -a "$out/env.txt"
elif [ "$phase" = bench ]; then
  cd benchmarks
  { timeout 100 python3 mma_exact.py --a-type f16; timeout 100 python3 mma_exact.py --a-type bf16
    timeout 150 python3 instructions_exact.py; timeout 90 python3 f64_native.py
    timeout 90 python3 warp_reduce.py
    timeout 60 python3 shuffle_lowering.py; timeout 60 python3 matmul_fast.py
    timeout 200 python3 matmul_exact.py; } > "$out/benchmarks.json" 2> "$out/benchmarks_err.txt"
  cd ..
  echo "bench phase done" | tee -a "$out/env.txt"
else  # bench2: emulate, GEMM scaling, the fp8-with-promotion training run
  cd benchmarks
  { timeout 150 python3 emulate_gemm.py; timeout 150 python3 emulate_step.py --large --modes plain,fast
    timeout 80 python3 emulate_step.py; } > "$out/benchmarks2.json" 2> "$out/benchmarks2_err.txt"
  timeout 150 python3 matmul_exact.py --scaling --out "$out" > "$out/matmul_scaling.json" 2>> "$out/benchmarks2_err.txt"
  cd ..
  timeout 180 python3 experiments/emulated_training.py --out "$out" \
    --configs fp8-promote128 > "$out/emulated_training.txt" 2>&1
  echo "bench2 phase done" | tee -a "$out/env.txt"
fi
