#!/usr/bin/env bash
# The Python package as a user gets it: the wheel built from this checkout (scikit-build-core,
# python/CMakeLists.txt), installed into a fresh virtual environment, and pytest over its API
# (python/tests). Offline once scripts/install-deps.sh has run (scripts/setup-python-env.sh).
# The build tree build/python/ is kept, so a second run rebuilds what changed only.
#
#   scripts/test-python.sh [PYTEST_ARGS...]
#   PIPESCOPE_PREBUILT_DIR=build/ci scripts/test-python.sh   # the module over build/ci's libraries
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
builder="$(bash "${repo}/scripts/setup-python-env.sh" | tail -n 1)"
wheels="$(mktemp -d)"
venv="$(mktemp -d)/venv"
trap 'rm -rf "${wheels}" "$(dirname "${venv}")"' EXIT
# PIPESCOPE_PREBUILT_DIR=BUILD (CI, after building BUILD): the wheel's module links BUILD's
# core, traces and sim instead of compiling them again (python/CMakeLists.txt), in a build folder
# of its own so that a later plain run compiles from the sources again.
wheel_settings=()
if [ -n "${PIPESCOPE_PREBUILT_DIR:-}" ]; then
  prebuilt="$(cd "${PIPESCOPE_PREBUILT_DIR}" && pwd)"
  wheel_settings=(--config-settings=cmake.define.PIPESCOPE_PREBUILT_DIR="${prebuilt}"
                  --config-settings=build-dir="build/python-prebuilt/{wheel_tag}")
fi
"${builder}" -m pip wheel --quiet --no-build-isolation --no-deps "${wheel_settings[@]}" -w "${wheels}" "${repo}"
# A fresh environment that sees Debian's pytest (and nothing of this checkout's sources).
/usr/bin/python3 -m venv --system-site-packages "${venv}"
"${venv}/bin/python" -m pip install --quiet --no-deps --no-index "${wheels}"/pipescope-*.whl
cd "${repo}"
"${venv}/bin/python" -m pytest -q -p no:cacheprovider python/tests "$@"
