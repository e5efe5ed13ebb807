#!/usr/bin/env bash
# Installs every build and test dependency of pipescope from Debian's packages.
# Idempotent and non-interactive: packages already present are skipped, so running it
# again costs one dpkg query. Uses sudo when not run as root.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  libboost-graph-dev libboost-program-options-dev
  nlohmann-json3-dev libsimdjson-dev libfmt-dev catch2 libbenchmark-dev zlib1g-dev
  clang libclang-rt-14-dev
  libtorch-dev libgloo-dev
  # Debian's LibTorch calls the system BLAS; the reference one is ~25x slower on the executor's
  # matrix products. OpenBLAS's pthreads build takes over libblas.so.3; every rank sets it to
  # its own thread count (exec/threads.hpp), one by default: pipelined losses still match one
  # process bit for bit. Not the serial build: threads of one process that call it at once
  # (in-process test ranks, LibTorch's intra-op threads) corrupt each other's products on CPUs
  # without AVX-512, as it hands out its packing buffers without a lock.
  libopenblas0-pthread
  qt6-base-dev libgl-dev fonts-dejavu-core
  qt6-svg-dev  # ppview exports the view as SVG (QSvgGenerator)
  jq  # bench/accuracy/run.sh reads ppsim compare --json
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages already installed"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" </dev/null
