#!/usr/bin/env bash
# Creates the crosscheck's own virtual environment with MMA-Sim (never jaxwarp's).
#
#   tools/crosscheck/setup_venv.sh [VENV_DIR]      (default: .crosscheck-venv in the repo)
#
# On a machine without an NVIDIA GPU (or to avoid the large CUDA wheels) install the CPU
# build of torch first, from PyTorch's own index:
#
#   CROSSCHECK_TORCH_INDEX=https://download.pytorch.org/whl/cpu tools/crosscheck/setup_venv.sh
#
# MMA-Sim's f64 model compiles a small C++ file on first use (torch.utils.cpp_extension):
# that needs a C++ compiler and ninja (installed here) on the machine.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
venv="${1:-$repo/.crosscheck-venv}"
python="${PYTHON:-python3}"

"$python" -m venv "$venv"
"$venv/bin/python" -m pip install --upgrade pip
if [[ -n "${CROSSCHECK_TORCH_INDEX:-}" ]]; then
  "$venv/bin/python" -m pip install "torch==2.13.0" --index-url "$CROSSCHECK_TORCH_INDEX"
fi
"$venv/bin/python" -m pip install "torch==2.13.0" "mmasim==2.1.1" numpy ninja
"$venv/bin/python" "$here/oracle.py" --list > /dev/null
echo "MMA-Sim ready: $venv/bin/python (make_golden.py uses it by default)"
