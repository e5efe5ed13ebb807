#!/usr/bin/env bash
# Fetches a CUDA-enabled LibTorch for pprun's NCCL/CUDA path: PyTorch's wheel from PyPI (torch
# 2.15.0, built for CUDA 13.x with the C++11 ABI) carries the same headers, shared libraries and
# CMake package as a LibTorch archive. The wheel is downloaded once into a cache directory and
# its torch/include, torch/lib and torch/share are unpacked into build/cuda-libtorch.
#
#   scripts/fetch-cuda-libtorch.sh            # download (pip download --no-deps) and unpack
#   WHEEL=/path/to/torch-*.whl scripts/...    # unpack a wheel you already have
#
# Environment: TORCH_VERSION (default 2.15.0), PIPESCOPE_WHEEL_CACHE (default ~/.cache/pipescope/wheels),
# PIPESCOPE_CUDA_LIBTORCH (default <repo>/build/cuda-libtorch).
# Prints the Torch_DIR (the folder holding TorchConfig.cmake) as its last line. Running it again
# with the same wheel does nothing. The wheel's METADATA is kept as wheel-METADATA: it names the
# NCCL version LibTorch was built with (scripts/fetch-nccl.sh reads it).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
version="${TORCH_VERSION:-2.15.0}"
cache="${PIPESCOPE_WHEEL_CACHE:-${HOME}/.cache/pipescope/wheels}"
dest="${PIPESCOPE_CUDA_LIBTORCH:-${repo}/build/cuda-libtorch}"
# shellcheck source=lib/cached-wheel.sh
source "${repo}/scripts/lib/cached-wheel.sh"

stamp="${dest}/.unpacked-from"
config="${dest}/share/cmake/Torch/TorchConfig.cmake"
metadata="${dest}/wheel-METADATA"
# Already unpacked from a wheel of this version (and no other wheel asked for): nothing to fetch.
if [[ -z "${WHEEL:-}" && -f "${stamp}" && -f "${config}" && -f "${metadata}" && "$(cat "${stamp}")" == torch-"${version}"-* ]]; then
  echo "fetch-cuda-libtorch: ${dest} already holds $(cat "${stamp}")" >&2
  echo "${dest}/share/cmake/Torch"
  exit 0
fi

wheel="${WHEEL:-}"
if [[ -z "${wheel}" ]]; then
  wheel="$(cached_wheel fetch-cuda-libtorch "${cache}" "torch==${version}" "torch-${version}-" "about 1 GB")"
fi
if [[ ! -f "${wheel}" ]]; then
  echo "fetch-cuda-libtorch: error: wheel '${wheel}' not found" >&2
  exit 1
fi

# The stamp names the wheel that was unpacked: a different wheel replaces the folder.
if [[ -f "${stamp}" && "$(cat "${stamp}")" == "$(basename "${wheel}")" && -f "${config}" && -f "${metadata}" ]]; then
  echo "fetch-cuda-libtorch: ${dest} already holds $(basename "${wheel}")" >&2
else
  tmp="$(mktemp -d "${dest%/*}/.cuda-libtorch.XXXXXX" 2>/dev/null || { mkdir -p "${dest%/*}"; mktemp -d "${dest%/*}/.cuda-libtorch.XXXXXX"; })"
  trap 'rm -rf "${tmp}"' EXIT
  echo "fetch-cuda-libtorch: unpacking $(basename "${wheel}") into ${dest}" >&2
  python3 - "${wheel}" "${tmp}" <<'PY'
import sys, zipfile
wheel, out = sys.argv[1], sys.argv[2]
wanted = ("torch/include/", "torch/lib/", "torch/share/")
with zipfile.ZipFile(wheel) as z:
    for info in z.infolist():
        if info.filename.startswith(wanted) and not info.is_dir():
            z.extract(info, out)
        elif info.filename.endswith(".dist-info/METADATA"):
            with open(f"{out}/torch/wheel-METADATA", "wb") as metadata:
                metadata.write(z.read(info))
PY
  basename "${wheel}" > "${tmp}/torch/.unpacked-from"
  rm -rf "${dest}"
  mv "${tmp}/torch" "${dest}"
fi
echo "${dest}/share/cmake/Torch"
