#!/usr/bin/env bash
# Record every Hopper capture jaxwarp's tests and conformance use, on an sm_90 GPU.
#   bash tools/capture/capture_all.sh OUTDIR [SCALE]
# Runs the PTX mma.sync, wgmma and cvt/ldmatrix captures side by side (each in its
# own process, each with its own time limit), then packs OUTDIR into tar pieces of
# at most 15 MiB (OUTDIR.tar.aa, .ab, ...) so that the lot can be carried off a
# machine that returns few, small files.  Logs go to OUTDIR/*.log.
set -u
out=${1:?usage: capture_all.sh OUTDIR [SCALE]}
scale=${2:-1.0}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
export PYTHONUNBUFFERED=1
(nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv; nvcc --version) >"$out/device.log" 2>&1
timeout 520 python "$here/capture_ptx.py" --out "$out/ptx" --arch 90a --scale "$scale" >"$out/ptx.log" 2>&1 &
timeout 520 python "$here/capture_wgmma.py" --out "$out/wgmma" --scale "$scale" >"$out/wgmma.log" 2>&1 &
timeout 520 python "$here/capture_movcvt.py" --out "$out/movcvt" --selftest >"$out/movcvt.log" 2>&1 &
wait
du -ah "$out"
