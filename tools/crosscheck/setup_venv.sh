#!/usr/bin/env bash
# Creates the crosscheck's own virtual environment with MMA-Sim (never jaxwarp's).
#
#   tools/crosscheck/setup_venv.sh [VENV_DIR]      (default: .crosscheck-venv in the repo)
#   tools/crosscheck/setup_venv.sh --mx [VENV_DIR] (default: .mxref-venv in the repo)
#
# --mx makes the quantizer references' venv instead (tools/crosscheck/mx_golden.py):
# torch 2.13.0, torchao 0.18.0 (--no-deps) and packaging, and clones microxcaling at the
# pinned commit into VENV_DIR/microxcaling (it is not on PyPI; needs git and network).
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
python="${PYTHON:-python3}"
if [[ "${1:-}" == "--mx" ]]; then
  venv="${2:-$repo/.mxref-venv}"
  microxcaling_commit=7bc41952de394f5cc5e782baf132e7c7542eb4e4
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install --upgrade pip
  if [[ -n "${CROSSCHECK_TORCH_INDEX:-}" ]]; then
    "$venv/bin/python" -m pip install "torch==2.13.0" --index-url "$CROSSCHECK_TORCH_INDEX"
  fi
  "$venv/bin/python" -m pip install "torch==2.13.0" numpy packaging
  "$venv/bin/python" -m pip install --no-deps "torchao==0.18.0"
  if [[ ! -d "$venv/microxcaling" ]]; then
    git clone https://github.com/microsoft/microxcaling "$venv/microxcaling"
  fi
  git -C "$venv/microxcaling" checkout --quiet "$microxcaling_commit"
  echo "ready: $venv/bin/python tools/crosscheck/mx_golden.py --microxcaling $venv/microxcaling"
  exit 0
fi
venv="${1:-$repo/.crosscheck-venv}"

"$python" -m venv "$venv"
"$venv/bin/python" -m pip install --upgrade pip
if [[ -n "${CROSSCHECK_TORCH_INDEX:-}" ]]; then
  "$venv/bin/python" -m pip install "torch==2.13.0" --index-url "$CROSSCHECK_TORCH_INDEX"
fi
"$venv/bin/python" -m pip install "torch==2.13.0" "mmasim==2.1.1" numpy ninja
"$venv/bin/python" "$here/oracle.py" --list > /dev/null
echo "MMA-Sim ready: $venv/bin/python (make_golden.py uses it by default)"
