#!/usr/bin/env bash
# Record every Hopper capture jaxwarp's tests and conformance use, on an sm_90 GPU.
#   bash tools/capture/capture_all.sh OUTDIR [SCALE] [SEED]
# Runs the PTX mma.sync, wgmma and cvt/ldmatrix captures side by side (each in its
# own process, each with its own time limit).
# Logs go to OUTDIR/*.log. SEED (default 0) draws other trials: captures with two
# seeds are independent checks of the model.
set -u
out=${1:?usage: capture_all.sh OUTDIR [SCALE]}
scale=${2:-1.0}
seed=${3:-0}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
export PYTHONUNBUFFERED=1
(nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv; nvcc --version) >"$out/device.log" 2>&1
timeout 520 python "$here/capture_ptx.py" --out "$out/ptx" --arch 90a --scale "$scale" --seed "$seed" >"$out/ptx.log" 2>&1 &
timeout 520 python "$here/capture_wgmma.py" --out "$out/wgmma" --scale "$scale" --seed "$seed" >"$out/wgmma.log" 2>&1 &
timeout 520 python "$here/capture_movcvt.py" --out "$out/movcvt" --seed "$seed" --selftest >"$out/movcvt.log" 2>&1 &
wait
du -ah "$out"
