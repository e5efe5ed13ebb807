#!/usr/bin/env bash
# The main job on its built-in default configuration, the quick start's last step (README, "Set
# up", shows what it prints; scripts/readme-examples.py checks that it still does):
#   1. a 1F1B schedule for 4 ranks and 8 micro-batches, validated, as the step x rank grid;
#   2. the planner's built-in example (gpt-7b on 64 x H100, 8 per node);
#   3. a real 2-process pipelined training run (pprun, Gloo over loopback) with its trace: a
#      small GPT (tiny-gpt, byte tokens) learning a frozen copy of the project's own docs
#      (exec/corpus/), the default corpus; its loss falls within the run (README, "Run it for real").
#
#   scripts/main-job.sh [BUILD_DIR]     # default: build/release (or PIPESCOPE_BUILD_DIR)
#
# Outputs go to out/ in the current folder (ignored by git in a checkout).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${1:-${PIPESCOPE_BUILD_DIR:-${repo}/build/release}}"
if [ ! -x "$bin/sim/ppsim" ]; then
  echo "main-job: error: no ppsim in $bin/sim (run scripts/quickstart.sh, or give the build folder)" >&2
  exit 2
fi
mkdir -p out

echo "== ppsim schedule 1f1b --stages 4 --micro-batches 8"
"$bin/sim/ppsim" schedule 1f1b --stages 4 --micro-batches 8

echo
echo "== ppsim plan   (built-in example; ppsim plan --help for your model and cluster)"
"$bin/sim/ppsim" plan --quiet

if [ -x "$bin/exec/pprun" ]; then
  # 40 steps at lr 0.01: enough for the loss to fall well below ln 256 = 5.55 (a uniform guess
  # over bytes) in under a minute on 2 cores; the held-out loss every 10 steps shows it is
  # learnt, not memorised.
  args=(--nproc-per-node 2 --schedule 1f1b --micro-batches 4 --steps 40 --lr 0.01 --eval-every 10)
  echo
  echo "== pprun ${args[*]} --trace out/measured.json"
  "$bin/exec/pprun" "${args[@]}" --quiet --trace out/measured.json --metrics out/metrics.jsonl
  # One line per step: step, training loss, and the held-out loss where it was measured.
  jq -r '"step \(.step)  loss \(.loss * 1000 | round / 1000)" + (if .eval_loss then "  eval_loss \(.eval_loss * 1000 | round / 1000)" else "" end)' \
    out/metrics.jsonl
else
  echo
  echo "== pprun: not built (LibTorch missing: scripts/install-deps.sh fetches it)"
fi

echo
echo "Open the example prediction and measurement side by side:"
echo "  ppview traces/examples/predicted.json traces/examples/measured.json"
