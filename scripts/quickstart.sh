#!/usr/bin/env bash
# The README's first command: installs the dependencies, builds every tool, and runs the main
# job on a built-in default configuration:
#   1. a 1F1B schedule for 4 ranks and 8 micro-batches, validated, as the step x rank grid;
#   2. the planner's built-in example (gpt-7b on 64 x H100, 8 per node);
#   3. a real 2-process pipelined training run (pprun, Gloo over loopback) with its trace.
# Outputs go to out/ (ignored by git). Run it again at any time: every step is idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)"

bin=build/release
mkdir -p out

echo
echo "== ppsim schedule 1f1b --stages 4 --micro-batches 8"
"$bin/sim/ppsim" schedule 1f1b --stages 4 --micro-batches 8

echo
echo "== ppsim plan   (built-in example; ppsim plan --help for your model and cluster)"
"$bin/sim/ppsim" plan --quiet

if [ -x "$bin/exec/pprun" ]; then
  echo
  echo "== pprun --nproc-per-node 2 --schedule 1f1b --micro-batches 4 --steps 5 --trace out/measured.json"
  "$bin/exec/pprun" --nproc-per-node 2 --schedule 1f1b --micro-batches 4 --steps 5 --quiet \
    --trace out/measured.json --metrics out/metrics.jsonl
  cat out/metrics.jsonl
fi

echo
echo "Open the example prediction and measurement side by side:"
echo "  $bin/gui/ppview traces/examples/predicted.json traces/examples/measured.json"
