#!/usr/bin/env bash
# Step time with and without pprun --bind-cores: the accuracy benchmark's model on 2 ranks,
# 1F1B, GPipe and interleaved 1F1B (2 chunks) with 4 micro-batches, alternating the two
# policies run by run so that the machine's other work falls on both alike. Prints every
# run's mean step (steps after the warm-up) and, per schedule, the mean over the runs and the
# ratio shared / bound.
#
#   bench/binding/run.sh                  # pprun from $PIPESCOPE_BUILD_DIR or build/release
#   REPS=10 PIPESCOPE_BUILD_DIR=build/ci bench/binding/run.sh
#
# Environment: PIPESCOPE_BUILD_DIR (build folder holding exec/pprun), REPS (runs per schedule
# and policy; default 5), STEPS (steps per run; default 12), WARMUP (steps left out; default 3).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${PIPESCOPE_BUILD_DIR:-$root/build/release}
[[ $build = /* ]] || build=$root/$build
pprun=$build/exec/pprun
reps=${REPS:-5}
steps=${STEPS:-12}
warmup=${WARMUP:-3}
[[ -x $pprun ]] || { echo "binding: error: no $pprun (build the pprun target)" >&2; exit 1; }
command -v jq > /dev/null || { echo "binding: error: jq is needed (scripts/install-deps.sh installs it)" >&2; exit 1; }
(( steps > warmup )) || { echo "binding: error: STEPS ($steps) must exceed WARMUP ($warmup)" >&2; exit 2; }
work=$(mktemp -d /tmp/pipescope-binding.XXXXXX)
trap 'rm -rf "$work"' EXIT

echo "binding: load average before: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
declare -A sum
for (( rep = 1; rep <= reps; ++rep )); do
  for config in "1f1b 1" "gpipe 1" "interleaved-1f1b 2"; do
    read -r schedule chunks <<< "$config"
    line="run $rep $schedule:"
    for policy in bound shared; do
      bind=(--no-bind-cores)
      [[ $policy == bound ]] && bind=(--bind-cores)
      "$pprun" --nproc-per-node 2 "${bind[@]}" --schedule "$schedule" --chunks "$chunks" --micro-batches 4 \
        --model mlp --layers 8 --hidden 512 --micro-batch-size 32 --threads-per-rank 1 --steps "$steps" \
        --metrics "$work/m.jsonl" --quiet
      ms=$(jq -s --argjson warmup "$warmup" '[.[] | select(.step >= $warmup) | .iteration_time_s] | add / length * 1000' "$work/m.jsonl")
      sum[$schedule $policy]=$(jq -n "${sum[$schedule $policy]:-0} + $ms")
      line+=$(printf ' %s %.1f ms' "$policy" "$ms")
    done
    echo "$line"
  done
done
echo "mean step over $reps run(s):"
for schedule in 1f1b gpipe interleaved-1f1b; do
  bound=$(jq -n "${sum[$schedule bound]} / $reps")
  shared=$(jq -n "${sum[$schedule shared]} / $reps")
  printf '%-18s bound %6.1f ms  shared %6.1f ms  shared/bound %.2f\n' "$schedule" "$bound" "$shared" "$(jq -n "$shared / $bound")"
done
echo "binding: load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
