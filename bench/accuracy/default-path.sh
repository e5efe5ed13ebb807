#!/usr/bin/env bash
# The default path (docs/ACCURACY.md, "The default path is the protocol"), as a new user takes
# it: one `pprun --trace FILE` of 1F1B m=4 with no option about tracing, cores or statistics,
# `ppsim calibrate FILE -o PROFILE` with no option, and `ppsim simulate --profile PROFILE` of other
# configurations, each compared with its real run (pprun --metrics: the mean step after WARMUP).
# Every round calibrates afresh: the spread of the errors over the rounds is how far one user's
# single try can be off, which the benchmark's pooled protocol (run.sh) does not show. Each
# prediction's interval (iteration_time_interval_s) is recorded beside it, and the table says in
# how many tries the measured time fell inside it (the coverage, docs/ACCURACY.md).
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
configs=("interleaved-v2-m8 interleaved-1f1b 8 2" "1f1b-m8 1f1b 8 1" "gpipe-m4 gpipe 4 1" "zb-h1-m8 zb-h1 8 1")

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
    "$ppsim" simulate --schedule "$schedule" --stages 2 --micro-batches "$m" --chunks "$chunks" \
      --profile "$dir/profile.json" --json > "$dir/$name.predicted.json"
    jq -c --arg name "$name" --argjson round "$round" --argjson measured "$(mean_step "$dir/$name.metrics.jsonl")" \
      '{name: $name, round: $round, predicted_s: .iteration_time_s, measured_s: $measured,
        error: ((.iteration_time_s - $measured) / $measured),
        interval_s: .iteration_time_interval_s,
        inside: (if .iteration_time_interval_s then (.iteration_time_interval_s[0] <= $measured and $measured <= .iteration_time_interval_s[1]) else null end)}' \
      "$dir/$name.predicted.json" >> "$out/errors.jsonl"
  done
done
echo "default-path: load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

# One row per configuration: the error of each round's try, and their mean and largest.
jq -s -r '
  def half: if .interval_s then ((.interval_s[1] - .interval_s[0]) / 2 / .predicted_s * 1000 | round / 10 | "±" + tostring + "%") else "none" end;
  "| configuration | error per round (each a fresh trace and calibration) | interval per round | inside | mean |error| | max |error| |",
  "|---|---|---|---|---|---|",
  (group_by(.name)[] |
    "| \(.[0].name) | \(map(.error * 1000 | round / 10 | tostring + "%") | join(", ")) | \(map(half) | join(", ")) | \(map(select(.inside == true)) | length) of \(length) | \(map(.error | fabs) | add / length * 1000 | round / 10)% | \(map(.error | fabs) | max * 1000 | round / 10)% |"),
  "",
  "all: \(length) tries, mean |error| \(map(.error | fabs) | add / length * 1000 | round / 10)%, \(map(select((.error | fabs) <= 0.05)) | length) within 5%, measured inside the interval in \(map(select(.inside == true)) | length) of \(length)"
' "$out/errors.jsonl"
