#!/usr/bin/env bash
# Prints, one per line, the CMake arguments that switch on pprun's NCCL/CUDA path
# (PIPESCOPE_WITH_CUDA=ON) on this machine: the CUDA toolkit in CUDA_HOME (default
# /usr/local/cuda: nvcc, cudart) and NCCL. NCCL comes from the toolkit when it has nccl.h and
# libnccl; otherwise (CUDA's own installers leave it out) scripts/fetch-nccl.sh fetches the
# version the fetched LibTorch was built with; NCCL_HOME names another NCCL (include/, lib/).
# scripts/build-cuda.sh and .ci/run use it. Exits 1, saying why, without a CUDA toolkit.
#
#   cmake --preset ci $(bash scripts/cuda-cmake-args.sh)
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cuda_home="${CUDA_HOME:-/usr/local/cuda}"

if [[ ! -x "${cuda_home}/bin/nvcc" ]]; then
  echo "cuda-cmake-args: no CUDA toolkit at ${cuda_home} (set CUDA_HOME)" >&2
  exit 1
fi
torch_prefix="${PIPESCOPE_TORCH_DIR:-$(bash "${repo}/scripts/fetch-libtorch.sh" | tail -n 1)}"
if [[ -n "${NCCL_HOME:-}" ]]; then
  nccl_root="${NCCL_HOME}"
elif [[ -f "${cuda_home}/include/nccl.h" ]] && compgen -G "${cuda_home}/lib64/libnccl.so*" >/dev/null; then
  nccl_root="${cuda_home}"
else
  nccl_root="$(bash "${repo}/scripts/fetch-nccl.sh" "${torch_prefix}/wheel-METADATA" | tail -n 1)"
fi
echo "cuda-cmake-args: CUDA toolkit ${cuda_home}, NCCL ${nccl_root}" >&2
echo "-DPIPESCOPE_WITH_CUDA=ON"
echo "-DPIPESCOPE_TORCH_DIR=${torch_prefix}"
echo "-DCUDAToolkit_ROOT=${cuda_home}"
echo "-DPIPESCOPE_NCCL_ROOT=${nccl_root}"
