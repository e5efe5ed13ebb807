#!/usr/bin/env bash
# Fetches Intel oneMKL from PyPI (the `mkl` wheel, the BLAS inside PyPI's PyTorch) and lays it out
# as a drop-in libblas.so.3 for Debian's LibTorch, which calls BLAS through that name: with the
# folder this prints first on LD_LIBRARY_PATH, pprun's matrix products run in MKL instead of the
# system BLAS (OpenBLAS). scripts/with-mkl.sh does that for one command.
#
#   scripts/fetch-mkl.sh                   # MKL_VERSION (default 2026.2.0), PIPESCOPE_MKL (default build/mkl)
#
# Only the sequential (one thread) layer and the CPU kernels are unpacked. Prints the library
# folder as its last line; running it again does nothing.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
version="${MKL_VERSION:-2026.2.0}"
cache="${PIPESCOPE_WHEEL_CACHE:-${HOME}/.cache/pipescope/wheels}"
dest="${PIPESCOPE_MKL:-${repo}/build/mkl}"
# shellcheck source=lib/cached-wheel.sh
source "${repo}/scripts/lib/cached-wheel.sh"

if [[ -f "${dest}/.unpacked-from" && "$(cat "${dest}/.unpacked-from")" == mkl-"${version}"-* && -e "${dest}/libblas.so.3" ]]; then
  echo "fetch-mkl: ${dest} already holds $(cat "${dest}/.unpacked-from")" >&2
  echo "${dest}"
  exit 0
fi
wheel="$(cached_wheel fetch-mkl "${cache}" "mkl==${version}" "mkl-${version}-" "about 220 MB")"

mkdir -p "${dest%/*}"
tmp="$(mktemp -d "${dest%/*}/.mkl.XXXXXX")"
trap 'rm -rf "${tmp}"' EXIT
echo "fetch-mkl: unpacking $(basename "${wheel}") into ${dest}" >&2
python3 - "${wheel}" "${tmp}" <<'PY'
import os, re, sys, zipfile
wheel, out = sys.argv[1], sys.argv[2]
# The runtime dispatcher, the LP64 interface, the sequential threading layer, and the kernels it
# picks by CPU (def, mc3, avx2, avx512, avx10) with their vector-math counterparts.
wanted = re.compile(r"libmkl_(rt|core|intel_lp64|sequential|def|mc3|avx2|avx512|avx10|vml_\w+)\.so\.\d+$")
with zipfile.ZipFile(wheel) as z:
    for info in z.infolist():
        name = os.path.basename(info.filename)
        if "/lib/" in info.filename and wanted.match(name):
            with open(os.path.join(out, name), "wb") as f:
                f.write(z.read(info))
PY
rt="$(cd "${tmp}" && ls libmkl_rt.so.* | head -n 1)"
ln -s "${rt}" "${tmp}/libblas.so.3"
basename "${wheel}" > "${tmp}/.unpacked-from"
rm -rf "${dest}"
mv "${tmp}" "${dest}"
trap - EXIT
echo "${dest}"
