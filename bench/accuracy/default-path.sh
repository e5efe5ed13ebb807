#!/usr/bin/env bash
# The default path (docs/ACCURACY.md, "The default path is the protocol"), as a new user takes
# it: one `pprun --trace FILE` of 1F1B m=4 with no option about tracing, cores or statistics,
# `ppsim calibrate FILE -o PROFILE` with no option, and `ppsim simulate --profile PROFILE` of other
# configurations, each compared with its real run (pprun --metrics: the mean step after WARMUP).
# Every round calibrates afresh: the spread of the errors over the rounds is how far one user's
# single try can be off, which the benchmark's pooled protocol (run.sh) does not show.
#
#   bench/accuracy/default-path.sh                   # ppsim and pprun from $PIPESCOPE_BUILD_DIR or build/release
#   ROUNDS=6 OUT=/tmp/dp bench/accuracy/default-path.sh
#
# Environment: PIPESCOPE_BUILD_DIR, OUT (default a new temporary folder), ROUNDS (default 4),
# STEPS (steps per run; default 10), WARMUP (first steps of a measured run left out; default 3),
# MODEL_ARGS (pprun's model options; default the issue's tiny-gpt, 8 layers, hidden 256).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${PIPESCOPE_BUILD_DIR:-$root/build/release}
[[ $build = /* ]] || build=$root/$build
out=${OUT:-$(mktemp -d /tmp/pipescope-default-path.XXXXXX)}
rounds=${ROUNDS:-4} steps=${STEPS:-10} warmup=${WARMUP:-3}
read -r -a model_args <<< "${MODEL_ARGS:---model tiny-gpt --layers 8 --hidden 256 --data synthetic}"
ppsim=$build/sim/ppsim pprun=$build/exec/pprun
[[ -x $ppsim && -x $pprun ]] || { echo "default-path: building ppsim and pprun in $build" >&2; cmake --build "$build" -j2 --target ppsim pprun >&2; }
command -v jq > /dev/null || { echo "default-path: error: jq is needed (scripts/install-deps.sh installs it)" >&2; exit 1; }
mkdir -p "$out"

# name schedule micro-batches chunks
configs=("interleaved-v2-m8 interleaved-1f1b 8 2" "1f1b-m8 1f1b 8 1" "gpipe-m4 gpipe 4 1")

mean_step() {  # METRICS-FILE: the mean iteration time (s) of the steps after the warm-up
  jq -s --argjson warmup "$warmup" '[.[] | select(.step >= $warmup) | .iteration_time_s] | add / length' "$1"
}

echo "default-path: ${model_args[*]}, 2 ranks; load average before: $(cut -d' ' -f1-3 /proc/loadavg); output in $out"
for (( round = 1; round <= rounds; ++round )); do
  dir=$out/round$round
  rm -rf "$dir" && mkdir -p "$dir"
  # What the user types: a trace, and a calibration of it.
  "$pprun" --nproc-per-node 2 --schedule 1f1b --micro-batches 4 "${model_args[@]}" --steps "$steps" \
    --trace "$dir/calibration.json" --quiet
  "$ppsim" calibrate "$dir/calibration.json" -o "$dir/profile.json" --quiet
  for config in "${configs[@]}"; do
    read -r name schedule m chunks <<< "$config"
    "$pprun" --nproc-per-node 2 --schedule "$schedule" --micro-batches "$m" --chunks "$chunks" "${model_args[@]}" \
      --steps "$steps" --metrics "$dir/$name.metrics.jsonl" --quiet
    predicted=$("$ppsim" simulate --schedule "$schedule" --stages 2 --micro-batches "$m" --chunks "$chunks" \
      --profile "$dir/profile.json" --json | jq .iteration_time_s)
    jq -n -c --arg name "$name" --argjson round "$round" --argjson predicted "$predicted" \
      --argjson measured "$(mean_step "$dir/$name.metrics.jsonl")" \
      '{name: $name, round: $round, predicted_s: $predicted, measured_s: $measured,
        error: (($predicted - $measured) / $measured)}' >> "$out/errors.jsonl"
  done
done
echo "default-path: load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

# One row per configuration: the error of each round's try, and their mean and largest.
jq -s -r '
  "| configuration | error per round (each a fresh trace and calibration) | mean |error| | max |error| |",
  "|---|---|---|---|",
  (group_by(.name)[] |
    "| \(.[0].name) | \(map(.error * 1000 | round / 10 | tostring + "%") | join(", ")) | \(map(.error | fabs) | add / length * 1000 | round / 10)% | \(map(.error | fabs) | max * 1000 | round / 10)% |"),
  "",
  "all: \(length) tries, mean |error| \(map(.error | fabs) | add / length * 1000 | round / 10)%, \(map(select((.error | fabs) <= 0.05)) | length) within 5%"
' "$out/errors.jsonl"
