#!/usr/bin/env bash
# Installs every build and test dependency of pipescope: Debian's packages, then the LibTorch that
# pprun links (PyPI's torch wheel, scripts/fetch-libtorch.sh: downloaded once into
# ~/.cache/pipescope/wheels, about 550 MB, and unpacked into build/libtorch).
# Idempotent and non-interactive: packages already present are skipped, so running it
# again costs one dpkg query and one look at build/libtorch. Uses sudo when not run as root.
#
#   scripts/install-deps.sh           # everything: build, tests, benchmarks, fuzzers (.ci/run)
#   scripts/install-deps.sh --tools   # what configuring and building ppsim, pprun and ppview
#                                     # needs (the quick start): no clang, Google Benchmark or
#                                     # pytest, about 100 MB less to fetch on a fresh machine
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tools_only=0
case "${1:-}" in
  "") ;;
  --tools) tools_only=1 ;;
  *) echo "install-deps: error: unknown option ${1} (usage: install-deps.sh [--tools])" >&2; exit 2 ;;
esac

packages=(
  build-essential cmake ninja-build pkg-config git
  libboost-graph-dev libboost-program-options-dev
  nlohmann-json3-dev libsimdjson-dev libfmt-dev zlib1g-dev
  catch2  # configuring with the tests on (every preset) needs it, building the tools does not
  # Gloo's headers, which LibTorch's ProcessGroupGloo.hpp includes and PyPI's wheel leaves out
  # (Gloo itself is built into the wheel's libtorch_cpu.so; exec/CMakeLists.txt says why these fit).
  libgloo-dev
  python3-pip  # scripts/fetch-libtorch.sh downloads the wheels with pip download
  qt6-base-dev libgl-dev fonts-dejavu-core
  qt6-svg-dev  # ppview exports the view as SVG (QSvgGenerator)
  jq  # scripts/main-job.sh reads pprun's metrics, bench/accuracy/run.sh ppsim compare --json
  # The Python package (python/): its module is built against Debian's Python and pybind11.
  python3-dev pybind11-dev
)
if [ $tools_only = 0 ]; then
  packages+=(
    libbenchmark-dev  # bench/
    clang libclang-rt-14-dev  # the libFuzzer targets (scripts/run-fuzzers.sh)
    clang-format-14 clang-tidy-14  # scripts/lint-changed.sh, on the C++ files a change touches
    # ctest runs python/tests with Debian's pytest; python3-venv and python3-pathspec are for
    # the wheel that scripts/test-python.sh builds.
    python3-pytest python3-venv python3-pathspec
  )
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages already installed"
else
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  echo "install-deps: installing ${missing[*]}"
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" </dev/null
fi

# LibTorch for the CPU and the CUDA builds alike (PIPESCOPE_TORCH_DIR in CMake; the default).
echo "install-deps: LibTorch in $(bash "${repo}/scripts/fetch-libtorch.sh" | tail -n 1)"

# The Python package's build backend (scikit-build-core, pinned, from PyPI into build/venv-python):
# the wheel that CI builds and installs into a fresh environment (scripts/test-python.sh) is then
# made offline. Not for --tools: building the tools needs no wheel.
if [ $tools_only = 0 ]; then
  echo "install-deps: the Python package is built with $(bash "${repo}/scripts/setup-python-env.sh" | tail -n 1)"
fi
