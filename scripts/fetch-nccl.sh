#!/usr/bin/env bash
# Fetches NCCL (nccl.h and libnccl.so.2) for pprun's NCCL/CUDA path when the CUDA toolkit in
# use does not ship it: the CUDA toolkit installers leave NCCL out, and PyTorch's CUDA wheel
# links the NCCL of NVIDIA's nvidia-nccl-cu* wheel. This script takes that same wheel, at the
# exact version the fetched torch wheel requires (its Requires-Dist line), so the headers
# pipescope compiles against match the library LibTorch was built with.
#
#   scripts/fetch-nccl.sh TORCH_METADATA       # the torch wheel, or the wheel-METADATA that
#                                              # fetch-libtorch.sh keeps; downloads and unpacks
#   NCCL_WHEEL=/path/to/nvidia_nccl_*.whl ...  # unpack a wheel you already have
#
# Environment: PIPESCOPE_WHEEL_CACHE (default ~/.cache/pipescope/wheels), PIPESCOPE_NCCL
# (default <repo>/build/nccl). Prints the NCCL root (holding include/ and lib/) as its last
# line. Running it again with the same wheel does nothing.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${PIPESCOPE_WHEEL_CACHE:-${HOME}/.cache/pipescope/wheels}"
dest="${PIPESCOPE_NCCL:-${repo}/build/nccl}"
torch_metadata="${1:-}"
# shellcheck source=lib/cached-wheel.sh
source "${repo}/scripts/lib/cached-wheel.sh"

wheel="${NCCL_WHEEL:-}"
if [[ -z "${wheel}" ]]; then
  if [[ ! -f "${torch_metadata}" ]]; then
    echo "fetch-nccl: error: '${torch_metadata}' not found (give the torch wheel or its METADATA)" >&2
    exit 1
  fi
  # "Requires-Dist: nvidia-nccl-cu13==2.30.7; platform_system == "Linux"" -> nvidia-nccl-cu13==2.30.7
  requirement="$(python3 - "${torch_metadata}" <<'PY'
import re, sys, zipfile
source = sys.argv[1]
if zipfile.is_zipfile(source):
    with zipfile.ZipFile(source) as z:
        text = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode()
else:
    text = open(source, encoding="utf-8").read()
for line in text.splitlines():
    match = re.match(r"Requires-Dist:\s*(nvidia-nccl-cu\d+==[\w.]+)", line)
    if match:
        print(match.group(1))
        break
PY
)"
  if [[ -z "${requirement}" ]]; then
    echo "fetch-nccl: error: ${torch_metadata} names no nvidia-nccl requirement" >&2
    exit 1
  fi
  package="${requirement%%==*}"
  version="${requirement##*==}"
  wheel_prefix="${package//-/_}-${version}-"    # nvidia_nccl_cu13-2.30.7-
  # Already unpacked from a wheel of this version: nothing to fetch.
  if [[ -f "${dest}/.unpacked-from" && "$(cat "${dest}/.unpacked-from")" == "${wheel_prefix}"* && -f "${dest}/include/nccl.h" ]]; then
    echo "fetch-nccl: ${dest} already holds $(cat "${dest}/.unpacked-from")" >&2
    echo "${dest}"
    exit 0
  fi
  wheel="$(cached_wheel fetch-nccl "${cache}" "${requirement}" "${wheel_prefix}" "about 220 MB")"
fi
if [[ ! -f "${wheel}" ]]; then
  echo "fetch-nccl: error: wheel '${wheel}' not found" >&2
  exit 1
fi

if [[ -f "${dest}/.unpacked-from" && "$(cat "${dest}/.unpacked-from")" == "$(basename "${wheel}")" && -f "${dest}/include/nccl.h" ]]; then
  echo "fetch-nccl: ${dest} already holds $(basename "${wheel}")" >&2
else
  mkdir -p "${dest%/*}"
  tmp="$(mktemp -d "${dest%/*}/.nccl.XXXXXX")"
  trap 'rm -rf "${tmp}"' EXIT
  echo "fetch-nccl: unpacking $(basename "${wheel}") into ${dest}" >&2
  python3 - "${wheel}" "${tmp}" <<'PY'
import sys, zipfile
wheel, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    for info in z.infolist():
        if info.filename.startswith(("nvidia/nccl/include/", "nvidia/nccl/lib/")) and not info.is_dir():
            z.extract(info, out)
PY
  # The linker looks for libnccl.so; the wheel ships only the versioned name.
  ln -s libnccl.so.2 "${tmp}/nvidia/nccl/lib/libnccl.so"
  basename "${wheel}" > "${tmp}/nvidia/nccl/.unpacked-from"
  rm -rf "${dest}"
  mv "${tmp}/nvidia/nccl" "${dest}"
fi
echo "${dest}"
