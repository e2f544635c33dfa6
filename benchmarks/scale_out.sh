#!/usr/bin/env bash
# Scale-out on every GPU of one machine (issue 26), one command, < 8 minutes:
#   OUT=/some/dir bash benchmarks/scale_out.sh
# 1. benchmarks/scale_out.py --large on 1, 2, 4 GPUs (fewer if fewer GPUs), one
#    workload per process (exact, then dp and tp in fast mode): times, efficiency
#    t1 / (d * td), bits against 1 GPU;
# 2. its small instances on the CPU backend against all GPUs (bits);
# 3. the sharded studies, briefly, on 1 GPU and on all GPUs, their CSVs compared byte
#    for byte (the warp study also checks every warp against NumPy).
# Every step has its own timeout; outputs (JSON, logs, CSVs, summary.txt) under $OUT.
# BENCH_SIZE and WARP_SIZE (default --large) set the sizes of steps 1 and 3's warp study.
set -u
OUT=${OUT:-out_scale}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0  # NVLink multicast off on these machines
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 MPLBACKEND=Agg
PY=${PYTHON:-python3}
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
say() { echo "$*" | tee -a "$SUMMARY"; }

INFO=$($PY -c "import jax; print(jax.device_count(), jax.devices()[0].device_kind, 'jax', jax.__version__)" 2>&1 | tail -1)
NGPU=${INFO%% *}
case $NGPU in ''|*[!0-9]*) NGPU=1 ;; esac
COUNTS=1
for d in 2 4 8; do [ "$d" -le "$NGPU" ] && COUNTS="$COUNTS,$d"; done
say "devices: $INFO; counts $COUNTS"
nvidia-smi -L > "$OUT/nvidia_smi.txt" 2>&1
nvidia-smi topo -m >> "$OUT/nvidia_smi.txt" 2>&1

# 1. The benchmark, one workload per process (each compiles its programs once per count).
for w in warp:35 mma:40 dp:130 tp:40 dp_fast:35 tp_fast:20; do
  name=${w%%:*}; limit=${w##*:}
  timeout "$limit" $PY benchmarks/scale_out.py ${BENCH_SIZE:---large} --devices "$COUNTS" \
    --workloads "$name" --no-cpu-check > "$OUT/bench_$name.json" 2> "$OUT/bench_$name.log"
  say "bench $name: rc $? $(grep '^\[scale_out\] '"$name"':' "$OUT/bench_$name.log" | tail -1)"
done

# 2. Small instances: all GPUs against the CPU backend (jaxwarp's exact arithmetic; the
#    training step's softmax and GELU are XLA's exp and tanh, which differ by backend).
timeout 45 $PY benchmarks/scale_out.py --devices "$NGPU" --workloads warp,mma,tp --cpu-check-only \
  > "$OUT/cpu_check.json" 2> "$OUT/cpu_check.log"
say "cpu check: rc $? $(tr -d ' \n' < "$OUT/cpu_check.json" | grep -o '"workload":"[a-z]*","cpu_identical":[a-z]*' | tr '\n' ' ')"

# 3. The studies on 1 GPU and on all GPUs, all at once (no preallocation: the processes
#    share the GPUs; nothing here is timed), their CSVs compared byte for byte.
export XLA_PYTHON_CLIENT_PREALLOCATE=false
mkdir -p "$OUT/exp"
study() {  # name csv args...
  local name=$1 csv=$2; shift 2
  for d in 1 all; do
    timeout 110 $PY "experiments/$name.py" "$@" --devices "$d" --out "$OUT/exp/${name}_$d" \
      > "$OUT/exp_${name}_$d.txt" 2> "$OUT/exp_${name}_$d.log" &
  done
}
study warp_programs - ${WARP_SIZE:---large} --programs warpReduce bitonic_sort --repeat 2 \
  --no-progress
study matmul_error matmul_error.csv --batch 512 --mn 32 --kmin 256 --kmax 1024 --kfactor 4 \
  --dists uniform --no-progress
study fp8_study fp8_study.csv --ks 1024,4096 --trials 8 --no-progress
study emulated_training emulated_training.csv --configs bf16 --steps 20 --log-every 5 \
  --groups 8
wait
# The warp CSV holds times: its check column says whether every warp equals NumPy's.
for d in 1 all; do
  say "study warp_programs $d: $(cut -d, -f1,2,3,7 "$OUT/exp/warp_programs_$d/warp_programs.csv" 2>/dev/null | tr '\n' ' ')"
done
for x in matmul_error fp8_study emulated_training; do
  a="$OUT/exp/${x}_1/$x.csv"; b="$OUT/exp/${x}_all/$x.csv"
  if [ -s "$a" ] && cmp -s "$a" "$b"; then same=same; else same=DIFFER; fi
  say "study $x: 1 GPU vs all: $same ($(grep -c . "$b" 2>/dev/null) lines)"
done
cp "$SUMMARY" "$OUT/summary_final.txt"
