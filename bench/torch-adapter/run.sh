#!/usr/bin/env bash
# The torch adapter (pipescope.torch) driving torch.distributed.pipelining's runtime: a small
# model trained over 2 ranks (Gloo, CPU) with each schedule family, its losses and gradients
# checked against the same model without pipelining (train_with_adapter.py). Needs PyPI's torch
# (scripts/setup-torch-venv.sh makes the environment) and installs pipescope into it from this
# checkout (pip install --no-build-isolation: the build backend and pybind11 come from the
# environment scripts/setup-python-env.sh prepares, nothing else is downloaded for the build).
#
#   bench/torch-adapter/run.sh          # VENV (default build/venv-torch), STEPS (3), MICRO_BATCHES (8)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
python=$(VENV=${VENV:-$root/build/venv-torch} bash "$root/scripts/setup-torch-venv.sh" | tail -n 1)
if ! "$python" -c "import pipescope" 2>/dev/null || [[ ${REINSTALL:-0} == 1 ]]; then
  builder=$(bash "$root/scripts/setup-python-env.sh" | tail -n 1)
  # The wheel is built by the build environment's backend, then installed into torch's.
  wheels=$(mktemp -d)
  "$builder" -m pip wheel --quiet --no-build-isolation --no-deps -w "$wheels" "$root" >&2
  "$python" -m pip install --quiet --force-reinstall --no-deps "$wheels"/pipescope-*.whl >&2
  rm -rf "$wheels"
fi
export OMP_NUM_THREADS=1
exec "$(dirname "$python")/torchrun" --nproc-per-node 2 --master-port "${MASTER_PORT:-29633}" \
  "$root/bench/torch-adapter/train_with_adapter.py" --steps "${STEPS:-3}" --micro-batches "${MICRO_BATCHES:-8}"
