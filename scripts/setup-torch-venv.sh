#!/usr/bin/env bash
# A Python virtual environment with PyPI's PyTorch, for the baseline benchmark that runs the same
# model and schedule under torch.distributed.pipelining (bench/pipelining/run.sh). Not needed to
# build or test pipescope. PyPI's Linux wheel is the CUDA build and pulls its CUDA libraries
# (several GB); it runs on the CPU too.
#
#   scripts/setup-torch-venv.sh        # VENV (default build/venv-torch), TORCH_VERSION (2.15.0)
# Prints the venv's python as its last line. Running it again with torch present does nothing.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${VENV:-${repo}/build/venv-torch}"
version="${TORCH_VERSION:-2.15.0}"

if ! "${venv}/bin/python" -c "import torch, torch.distributed.pipelining" 2>/dev/null; then
  echo "setup-torch-venv: installing torch==${version} into ${venv}" >&2
  python3 -m venv "${venv}"
  "${venv}/bin/python" -m pip install --quiet "torch==${version}" numpy >&2
fi
echo "${venv}/bin/python"
