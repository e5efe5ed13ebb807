#!/usr/bin/env bash
# Fetches the one LibTorch that every pipescope build links, CPU and CUDA alike: PyTorch's wheel
# from PyPI (torch 2.15.0, built for CUDA 13.x with the C++11 ABI) carries the same headers,
# shared libraries and CMake package as a LibTorch archive. Its torch/include, torch/lib and
# torch/share are unpacked into build/libtorch.
#
# libtorch_cpu.so itself needs two CUDA libraries (libcudart.so.13, libcupti.so.13) even on a
# machine without a GPU: they load, find no driver, and stay idle. They come from NVIDIA's small
# nvidia-cuda-runtime and nvidia-cuda-cupti wheels (about 14 MB together), at the version the
# torch wheel pins through its cuda-toolkit requirement, and go into build/libtorch/lib: the
# RPATH of libtorch_cpu.so holds $ORIGIN, so the loader takes them from there before
# LD_LIBRARY_PATH or any CUDA toolkit, and no toolkit is needed to build or run on the CPU.
#
#   scripts/fetch-libtorch.sh               # download once (pip download --no-deps) and unpack
#   WHEEL=/path/to/torch-*.whl scripts/...  # unpack a torch wheel you already have
#
# Environment: TORCH_VERSION (default 2.15.0), PIPESCOPE_WHEEL_CACHE (default
# ~/.cache/pipescope/wheels), PIPESCOPE_LIBTORCH (default <repo>/build/libtorch, or
# build/libtorch-VERSION for another version; the older name PIPESCOPE_CUDA_LIBTORCH is honoured). Prints the LibTorch folder (CMake's PIPESCOPE_TORCH_DIR)
# as its last line. Running it again with the same wheel does nothing. The wheel's METADATA is
# kept as wheel-METADATA: it names the NCCL version LibTorch was built with (fetch-nccl.sh).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
version="${TORCH_VERSION:-2.15.0}"
cache="${PIPESCOPE_WHEEL_CACHE:-${HOME}/.cache/pipescope/wheels}"
# Another version goes beside the default one, so that building against it (build-cuda.sh with
# TORCH_VERSION) leaves the LibTorch of the other builds in place.
default_dest="${repo}/build/libtorch"
[[ "${version}" == 2.15.0 ]] || default_dest="${repo}/build/libtorch-${version}"
dest="${PIPESCOPE_LIBTORCH:-${PIPESCOPE_CUDA_LIBTORCH:-${default_dest}}}"
# shellcheck source=lib/cached-wheel.sh
source "${repo}/scripts/lib/cached-wheel.sh"

stamp="${dest}/.unpacked-from"
metadata="${dest}/wheel-METADATA"
complete() {  # the unpacked folder has everything a build needs
  [[ -f "${stamp}" && -f "${metadata}" && -f "${dest}/share/cmake/Torch/TorchConfig.cmake" && -f "${dest}/.cuda-runtime-from" ]]
}
# Already unpacked from a wheel of this version (and no other wheel asked for): nothing to fetch.
if [[ -z "${WHEEL:-}" ]] && complete && [[ "$(cat "${stamp}")" == torch-"${version}"-* ]]; then
  echo "fetch-libtorch: ${dest} already holds $(cat "${stamp}")" >&2
  echo "${dest}"
  exit 0
fi

wheel="${WHEEL:-}"
if [[ -z "${wheel}" ]]; then
  wheel="$(cached_wheel fetch-libtorch "${cache}" "torch==${version}" "torch-${version}-" "about 540 MB")"
fi
if [[ ! -f "${wheel}" ]]; then
  echo "fetch-libtorch: error: wheel '${wheel}' not found" >&2
  exit 1
fi

# The stamp names the wheel that was unpacked: a different wheel replaces the folder.
if complete && [[ "$(cat "${stamp}")" == "$(basename "${wheel}")" ]]; then
  echo "fetch-libtorch: ${dest} already holds $(basename "${wheel}")" >&2
  echo "${dest}"
  exit 0
fi

mkdir -p "${dest%/*}"
tmp="$(mktemp -d "${dest%/*}/.libtorch.XXXXXX")"
trap 'rm -rf "${tmp}"' EXIT
echo "fetch-libtorch: unpacking $(basename "${wheel}") into ${dest}" >&2
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

# "Requires-Dist: cuda-toolkit[cublas,cudart,...]==13.2.2; ..." -> 13.2.2 (none: a CPU-only wheel).
toolkit="$(sed -n 's/^Requires-Dist: cuda-toolkit\[[^]]*\]==\([0-9.]*\).*/\1/p' "${tmp}/torch/wheel-METADATA" | head -n 1)"
if [[ -n "${toolkit}" ]]; then
  # cuda-toolkit is a metapackage (3 KB): its METADATA pins the runtime and CUPTI wheels.
  meta_wheel="$(cached_wheel fetch-libtorch "${cache}" "cuda-toolkit==${toolkit}" "cuda_toolkit-${toolkit}-" "3 KB")"
  runtime_wheels=()
  for package in nvidia-cuda-runtime nvidia-cuda-cupti; do
    pin="$(python3 - "${meta_wheel}" "${package}" <<'PY'
import re, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    text = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode()
match = re.search(r"^Requires-Dist: " + re.escape(sys.argv[2]) + r"==([\d.]+?)(\.\*)?;", text, re.M)
print(match.group(1) if match else "")
PY
)"
    if [[ -z "${pin}" ]]; then
      echo "fetch-libtorch: error: cuda-toolkit ${toolkit} pins no ${package} version" >&2
      exit 1
    fi
    runtime_wheels+=("$(cached_wheel fetch-libtorch "${cache}" "${package}==${pin}.*" "${package//-/_}-${pin}" "a few MB")")
  done
  python3 - "${tmp}/torch/lib" "${runtime_wheels[@]}" <<'PY'
import os, re, sys, zipfile
out, wheels = sys.argv[1], sys.argv[2:]
wanted = re.compile(r"lib(cudart|cupti)\.so\.\d+$")
for wheel in wheels:
    with zipfile.ZipFile(wheel) as z:
        for info in z.infolist():
            name = os.path.basename(info.filename)
            if "/lib/" in info.filename and wanted.match(name):
                with open(os.path.join(out, name), "wb") as f:
                    f.write(z.read(info))
PY
  for w in "${runtime_wheels[@]}"; do basename "${w}"; done > "${tmp}/torch/.cuda-runtime-from"
else
  echo "none (CPU-only wheel)" > "${tmp}/torch/.cuda-runtime-from"
fi

basename "${wheel}" > "${tmp}/torch/.unpacked-from"
rm -rf "${dest}"
mv "${tmp}/torch" "${dest}"
echo "${dest}"
