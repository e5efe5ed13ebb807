#!/usr/bin/env bash
# Builds pprun's NCCL/CUDA path: fetches the LibTorch (scripts/fetch-libtorch.sh, the same one
# the CPU build links; TORCH_VERSION=X.Y.Z fetches another into build/libtorch-X.Y.Z),
# configures build/cuda with PIPESCOPE_WITH_CUDA=ON against the CUDA toolkit in
# CUDA_HOME (default /usr/local/cuda: nvcc, cudart) and builds pipescope_exec and pprun. No GPU
# is needed to build. NCCL comes from the toolkit when it has nccl.h and libnccl; otherwise
# (CUDA's own installers leave it out) scripts/fetch-nccl.sh fetches the version the LibTorch
# was built with. NCCL_HOME names another NCCL (a folder with include/ and lib/).
#
#   scripts/build-cuda.sh                 # JOBS=2 BUILD_DIR=build/cuda WHEEL=... are honoured
#
# PIPESCOPE_TORCH_DIR names that LibTorch; with PIPESCOPE_WITH_CUDA=ON, cmake/PipescopeTorch.cmake
# loads its own CMake package (TorchConfig.cmake), which looks for the CUDA toolkit.
#
# TORCH_CUDA_ARCH_LIST (default "8.0;9.0": A100, H100/H200) is set because otherwise Torch's
# CMake package compiles and runs a probe on the local GPU; pipescope compiles no kernels of its
# own, so the list only affects flags handed to CUDA targets.
#
# Linking. libtorch_cuda.so from the wheel was linked against the CUDA 13.x libraries that pip
# installs next to it (nvidia-cuda-runtime, nvidia-nccl, nvidia-cusparselt, nvidia-cufile,
# nvidia-nvshmem ...). The wheel is fetched with --no-deps, so at link time those come from the
# toolkit in CUDA_HOME (-Wl,-rpath-link) where it has them. A library the toolkit does not ship
# (e.g. cuSPARSELt, cuFile, NVSHMEM) or a symbol versioned newer than the toolkit's minor
# version cannot be resolved here; pprun itself calls none of them, so the link uses
# -Wl,--allow-shlib-undefined: such references stay for the dynamic loader to resolve on the
# GPU machine, where the CUDA runtime and driver match the wheel. `ldd build/cuda/exec/pprun`
# shows what is still missing on this machine.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cuda_home="${CUDA_HOME:-/usr/local/cuda}"
build_dir="${BUILD_DIR:-${repo}/build/cuda}"
jobs="${JOBS:-2}"

if [[ ! -x "${cuda_home}/bin/nvcc" ]]; then
  echo "build-cuda: error: no CUDA toolkit at ${cuda_home} (set CUDA_HOME)" >&2
  exit 1
fi
torch_prefix="$("${repo}/scripts/fetch-libtorch.sh" | tail -n 1)"
if [[ -n "${NCCL_HOME:-}" ]]; then
  nccl_root="${NCCL_HOME}"
elif [[ -f "${cuda_home}/include/nccl.h" ]] && compgen -G "${cuda_home}/lib64/libnccl.so*" >/dev/null; then
  nccl_root="${cuda_home}"
else
  nccl_root="$("${repo}/scripts/fetch-nccl.sh" "${torch_prefix}/wheel-METADATA" | tail -n 1)"
fi
echo "build-cuda: NCCL from ${nccl_root}" >&2

started=$(date +%s)
cmake -S "${repo}" -B "${build_dir}" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DPIPESCOPE_WITH_CUDA=ON -DPIPESCOPE_WITH_GUI=OFF -DPIPESCOPE_WITH_TESTS=OFF -DPIPESCOPE_WITH_BENCH=OFF \
  -DPIPESCOPE_TORCH_DIR="${torch_prefix}" \
  -DCUDAToolkit_ROOT="${cuda_home}" -DCMAKE_CUDA_COMPILER="${cuda_home}/bin/nvcc" -DPIPESCOPE_NCCL_ROOT="${nccl_root}" \
  -DTORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-8.0;9.0}" \
  -DCMAKE_EXE_LINKER_FLAGS="-Wl,-rpath-link,${cuda_home}/lib64 -Wl,--allow-shlib-undefined"
cmake --build "${build_dir}" -j"${jobs}" --target pipescope_exec pprun
echo "build-cuda: built ${build_dir}/exec/pprun in $(( $(date +%s) - started )) s" >&2
