#!/usr/bin/env bash
# Runs a command with the shared libraries of the PyTorch that python3 imports on the loader's
# path: LibTorch from torch/lib and the CUDA libraries pip installed beside it (nvidia-*
# packages: CUDA runtime, NCCL, cuBLAS, cuDNN ...). A pprun built by scripts/build-cuda.sh
# against a wheel of the same torch version (TORCH_VERSION or WHEEL) then runs on a GPU machine
# that has that PyTorch installed but neither the build folder nor a CUDA toolkit.
#
#   scripts/with-python-torch.sh build/cuda/exec-cuda/pprun --device cuda --nproc-per-node 8 ...
#
# Environment: PYTHON (default python3). A LibTorch of another version than the one pprun was
# built with fails at load time (undefined symbols): the script prints which one it found.
set -euo pipefail

python=${PYTHON:-python3}
(( $# > 0 )) || { echo "usage: with-python-torch.sh COMMAND [ARGS...]" >&2; exit 2; }
read -r torch_version torch_lib < <("$python" -c '
import os, torch
print(torch.__version__, os.path.join(os.path.dirname(torch.__file__), "lib"))') ||
  { echo "with-python-torch: error: $python cannot import torch" >&2; exit 1; }
site=$(dirname "$(dirname "$torch_lib")")
# Every folder of pip's CUDA packages that holds a shared library.
nvidia_libs=$(find "$site/nvidia" -name '*.so*' -printf '%h\n' 2>/dev/null | sort -u | paste -sd: || true)
echo "with-python-torch: torch $torch_version from $torch_lib" >&2
export LD_LIBRARY_PATH="$torch_lib${nvidia_libs:+:$nvidia_libs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
exec "$@"
