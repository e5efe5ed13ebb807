#!/usr/bin/env bash
# Builds pprun's NCCL/CUDA path into BUILD_DIR (default build/cuda): the CUDA program
# BUILD_DIR/exec-cuda/pprun (GPUs through NCCL, CPUs through Gloo), beside the CPU-only
# BUILD_DIR/exec/pprun, from one compile of the sources they share. No GPU is needed to build.
# The LibTorch is the one the CPU build links (scripts/fetch-libtorch.sh: PyPI's torch wheel has
# libtorch_cuda too; TORCH_VERSION=X.Y.Z fetches another into build/libtorch-X.Y.Z); the CUDA
# toolkit and NCCL are found by scripts/cuda-cmake-args.sh (CUDA_HOME, NCCL_HOME).
#
#   scripts/build-cuda.sh                 # JOBS=N BUILD_DIR=DIR are honoured
#
# Linking: libtorch_cuda.so from the wheel was linked against the CUDA 13.x libraries pip
# installs beside it (nvidia-cuda-runtime, nvidia-nccl, nvidia-cusparselt, nvidia-cufile,
# nvidia-nvshmem ...). The toolkit in CUDA_HOME resolves those it ships; the others, which pprun
# itself never calls, stay for the dynamic loader of the GPU machine, where the runtime matches
# the wheel (exec/CMakeLists.txt). `ldd BUILD_DIR/exec-cuda/pprun` shows what this machine lacks.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${BUILD_DIR:-${repo}/build/cuda}"
jobs="${JOBS:-$(nproc)}"

mapfile -t cuda_args < <(bash "${repo}/scripts/cuda-cmake-args.sh")
started=$(date +%s)
cmake -S "${repo}" -B "${build_dir}" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPIPESCOPE_WITH_GUI=OFF \
  -DPIPESCOPE_WITH_TESTS=OFF -DPIPESCOPE_WITH_BENCH=OFF "${cuda_args[@]}"
cmake --build "${build_dir}" -j"${jobs}" --target pprun_cuda
echo "build-cuda: built ${build_dir}/exec-cuda/pprun in $(( $(date +%s) - started )) s" >&2
