#!/usr/bin/env bash
# Runs one command with Intel oneMKL as the BLAS of Debian's LibTorch (scripts/fetch-mkl.sh
# fetches it once): the library that PyPI's PyTorch uses, so that a comparison with PyTorch
# compares the runtimes and not the BLAS libraries. On this machine MKL does the matrix products
# of a 32 x 1024 by 1024 x 1024 Linear layer about 1.45x faster than OpenBLAS
# (docs/BENCHMARKS.md).
#
#   scripts/with-mkl.sh build/release/exec/pprun --nproc-per-node 2 ...
#
# One thread per call (MKL's sequential layer); LP64 is MKL's Fortran interface that LibTorch's
# BLAS calls expect. MKL's results are not bitwise equal to OpenBLAS's (other summation order),
# and may vary with memory alignment unless MKL_CBWR is set: the bitwise tests use the system BLAS.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ $# -eq 0 ]]; then
  echo "with-mkl: error: no command given (usage: scripts/with-mkl.sh COMMAND [ARGS...])" >&2
  exit 2
fi
lib="$(bash "${repo}/scripts/fetch-mkl.sh" | tail -n 1)"
export LD_LIBRARY_PATH="${lib}${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}"
export MKL_THREADING_LAYER=SEQUENTIAL MKL_INTERFACE_LAYER=LP64
exec "$@"
