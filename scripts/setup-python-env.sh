#!/usr/bin/env bash
# The environment the Python package is built in (build/venv-python): Debian's python3 with its
# packages (python3-dev, pybind11-dev, python3-pytest, python3-pathspec, python3-venv:
# scripts/install-deps.sh installs them) and what Debian 12 lacks, pinned, from PyPI: the build
# backend scikit-build-core, and a packaging newer than Debian's 23.0 (scikit-build-core's
# metadata validation needs packaging.utils.InvalidName). Builds then run offline:
# pip install --no-build-isolation.
# Idempotent: does nothing when the environment has it. Prints the environment's python last.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${PYTHON_BUILD_VENV:-${repo}/build/venv-python}"
requirements=("scikit-build-core==0.11.6" "packaging==24.2")
if ! "${venv}/bin/python" -c "import scikit_build_core, pytest, packaging.utils as u; u.InvalidName" 2>/dev/null; then
  echo "setup-python-env: making ${venv} with ${requirements[*]}" >&2
  /usr/bin/python3 -m venv --system-site-packages "${venv}"
  "${venv}/bin/python" -m pip install --quiet --no-deps "${requirements[@]}" >&2
fi
echo "${venv}/bin/python"
