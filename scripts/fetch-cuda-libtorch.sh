#!/usr/bin/env bash
# The older name of scripts/fetch-libtorch.sh, kept for scripts that call it: fetches the same
# LibTorch (one for the CPU and the CUDA builds) and prints its Torch_DIR (the folder holding
# TorchConfig.cmake) as its last line, as it always did.
set -euo pipefail
prefix="$(bash "$(dirname "${BASH_SOURCE[0]}")/fetch-libtorch.sh" | tail -n 1)"
echo "${prefix}/share/cmake/Torch"
