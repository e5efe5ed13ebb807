#!/usr/bin/env bash
# Prediction accuracy on this machine: runs pprun for a calibration configuration,
# calibrates a profile from its traces (ppsim calibrate), then predicts (ppsim simulate
# --profile) and measures (pprun) other schedules and micro-batch counts of the same model on
# the same 2 ranks, compares each pair (ppsim compare --json) and prints the error table and
# what each modelled effect contributes to the predictions.
#
#   bench/accuracy/run.sh                   # binaries from $PIPESCOPE_BUILD_DIR or build/release
#   PIPESCOPE_BUILD_DIR=build-x ACCURACY_OUT=/tmp/acc bench/accuracy/run.sh
#
# Environment: PIPESCOPE_BUILD_DIR (build folder holding sim/ppsim and exec/pprun; built there
# when missing), ACCURACY_OUT (where traces, profile and comparisons go; default a new
# temporary folder), STEPS (optimizer steps per pprun run, the trace is of the last; default
# 10), WARMUP (first steps of a run left out of the measured median; default 3), ROUNDS (every
# configuration runs once per round, rounds one after the other; default 3), MODEL_ARGS (pprun
# model options), STATISTIC (what a duration becomes in the profile, ppsim calibrate
# --statistic: mean, the default, or median; the table shows the median profile's error too).
#
# The calibration configuration runs once more per round, apart from its measured row, with
# every step after WARMUP traced (pprun --trace-steps); all those traces calibrate the profile
# together, so that it learns from the same population of steps the measured medians come from. The measured iteration time of a
# configuration is the median over the steps after WARMUP of all its runs (pprun --metrics,
# rank 0's wall time of a step): rounds spread every configuration over the same stretch of
# time, so a burst of other work on the machine does not fall on one configuration alone. The
# last round's trace gives the per-operation comparison and the memory. Timing needs a quiet
# machine: the script prints the load average before and after.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${PIPESCOPE_BUILD_DIR:-$root/build/release}
[[ $build = /* ]] || build=$root/$build
out=${ACCURACY_OUT:-$(mktemp -d /tmp/pipescope-accuracy.XXXXXX)}
steps=${STEPS:-10}
warmup=${WARMUP:-3}
rounds=${ROUNDS:-3}
statistic=${STATISTIC:-mean}
read -r -a model_args <<< "${MODEL_ARGS:---model mlp --layers 8 --hidden 512 --micro-batch-size 32}"
(( steps > warmup )) || { echo "accuracy: error: STEPS ($steps) must exceed WARMUP ($warmup)" >&2; exit 2; }
ranks=2

ppsim=$build/sim/ppsim
pprun=$build/exec/pprun
if [[ ! -x $ppsim || ! -x $pprun ]]; then
  echo "accuracy: building ppsim and pprun in $build" >&2
  cmake --build "$build" -j2 --target ppsim pprun >&2
fi
command -v jq > /dev/null || { echo "accuracy: error: jq is needed (scripts/install-deps.sh installs it)" >&2; exit 1; }
mkdir -p "$out"

# name schedule micro-batches chunks; the first line is the calibration configuration.
configs=(
  "calib-1f1b-m4 1f1b 4 1"
  "1f1b-m8 1f1b 8 1"
  "gpipe-m4 gpipe 4 1"
  "zb-h1-m4 zb-h1 4 1"
  "zb-h1-m8 zb-h1 8 1"
  "interleaved-v2-m4 interleaved-1f1b 4 2"
  "interleaved-v2-m8 interleaved-1f1b 8 2"
  "zbv-m4 zbv 4 2"
)

measure() {  # name schedule m chunks trace-file [traced-steps]: appends the run's steps to NAME.metrics.jsonl
  "$pprun" --nproc-per-node "$ranks" --schedule "$2" --micro-batches "$3" --chunks "$4" "${model_args[@]}" \
    --threads-per-rank 1 --steps "$steps" --trace "$5" --trace-steps "${6:-1}" --metrics "$out/run.metrics.jsonl" --quiet
  cat "$out/run.metrics.jsonl" >> "$out/$1.metrics.jsonl"
}

# Median and fastest iteration time (seconds) of the steps after the warm-up.
median_step_s() {
  jq -s --argjson warmup "$warmup" '[.[] | select(.step >= $warmup) | .iteration_time_s] | sort |
    if length % 2 == 1 then .[length / 2 | floor] else (.[length / 2 - 1] + .[length / 2]) / 2 end' "$1"
}
fastest_step_s() {
  jq -s --argjson warmup "$warmup" '[.[] | select(.step >= $warmup) | .iteration_time_s] | min' "$1"
}

read -r calib_name calib_schedule calib_m calib_chunks <<< "${configs[0]}"
echo "accuracy: ${model_args[*]}, $ranks ranks, $rounds round(s) of $steps steps per run ($warmup warm-up);" \
  "calibration: $calib_schedule m=$calib_m; load average before: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
calibration_inputs=()
rm -f "$out"/*.metrics.jsonl
for (( round = 1; round <= rounds; ++round )); do
  echo "accuracy: round $round: measuring $calib_name for the calibration" >&2
  measure "$calib_name.calibration" "$calib_schedule" "$calib_m" "$calib_chunks" "$out/$calib_name.calibration$round.json" \
    "$((steps - warmup))"
  for (( step = warmup; step < steps - 1; ++step )); do
    calibration_inputs+=("$out/$calib_name.calibration$round.step$step.json")
  done
  calibration_inputs+=("$out/$calib_name.calibration$round.json")
  for config in "${configs[@]}"; do
    read -r name schedule m chunks <<< "$config"
    echo "accuracy: round $round: measuring $name" >&2
    measure "$name" "$schedule" "$m" "$chunks" "$out/$name.measured.json"
  done
done

calibrate() {  # calibrates profile.json (the chosen statistic) and profile.median.json
  "$ppsim" calibrate "${calibration_inputs[@]}" -o "$out/profile.json" --statistic "$statistic" \
    --report "$out/calibration.txt" --quiet
  "$ppsim" calibrate "${calibration_inputs[@]}" -o "$out/profile.median.json" --statistic median --quiet
}
calibrate
if [[ $(jq -r .backward_split "$out/profile.json") == unmeasured ]]; then
  # The calibration trace did not time the backward's two halves apart: take the split from
  # the measured split-backward run (which then is no longer an independent check).
  echo "accuracy: the calibration trace has no backward split; adding zb-h1-m4's trace to the calibration" >&2
  calibration_inputs+=("$out/zb-h1-m4.measured.json")
  calibrate
fi

rows=()
for config in "${configs[@]}"; do
  read -r name schedule m chunks <<< "$config"
  "$ppsim" simulate --schedule "$schedule" --stages "$ranks" --micro-batches "$m" --chunks "$chunks" \
    --profile "$out/profile.json" --trace "$out/$name.predicted.json" --json > "$out/$name.simulate.json"
  "$ppsim" compare "$out/$name.predicted.json" "$out/$name.measured.json" --json > "$out/$name.compare.json"
  "$ppsim" simulate --schedule "$schedule" --stages "$ranks" --micro-batches "$m" --chunks "$chunks" \
    --profile "$out/profile.median.json" --json > "$out/$name.simulate.median.json"
  rows+=("$name")
done

echo "calibrated from: ${#calibration_inputs[@]} traces of $calib_name (steps $warmup..$((steps - 1)) of $rounds run(s))"
echo "measured: median of steps $warmup..$((steps - 1)) of $rounds run(s) each (fastest: their minimum); traced: the last step of the last run"
echo "predicted: durations calibrated as the $statistic of their samples; median profile: as their median"
printf '%-20s %10s %10s %8s %10s %10s %8s %9s %14s %s\n' "configuration" "predicted" "measured" "error" "fastest" \
  "traced" "error" "op MAPE" "median profile" "peak memory error per rank"
for name in "${rows[@]}"; do
  measured_s=$(median_step_s "$out/$name.metrics.jsonl")
  fastest_s=$(fastest_step_s "$out/$name.metrics.jsonl")
  median_profile_s=$(jq .iteration_time_s "$out/$name.simulate.median.json")
  jq -r --arg name "$name" --argjson measured "$measured_s" --argjson fastest "$fastest_s" \
      --argjson median_profile "$median_profile_s" '
      def ms: (. * 100000 | round) / 100 | tostring + " ms";
      def pct: (. * 1000 | round) / 10 | tostring + "%";
      [$name, (.iteration_time_predicted_s | ms), ($measured | ms),
       ((.iteration_time_predicted_s - $measured) / $measured | pct), ($fastest | ms),
       (.iteration_time_measured_s | ms), (.iteration_time_error | pct), (.op_duration_mape | pct),
       (($median_profile - $measured) / $measured | pct),
       ([.peak_memory_error[] | if . == null then "n/a" else pct end] | join(" "))]
    | @tsv' "$out/$name.compare.json" |
    awk -F'\t' '{ printf "%-20s %10s %10s %8s %10s %10s %8s %9s %14s %s\n", $1, $2, $3, $4, $5, $6, $7, $8, $9, $10 }'
done
# What each modelled effect contributes: the prediction again from the profile with that effect
# taken out (deterministic: no measurement involved).
declare -A without=(
  [overhead]='.instruction_overhead_s = 0'
  [send-recv]='.stages[] |= (.send_s = 0 | .recv_s = 0)'
  [latency]='.transfer.latency_s = 0'
  [optimizer]='.stages[] |= (.optimizer_s = 0 | .reduce_grads_s = 0 | .reduce_tied_s = 0)'
  [load]='.stages[] |= (.load_s = 0)'
)
effects=(overhead send-recv latency optimizer load)
for effect in "${effects[@]}"; do
  jq "${without[$effect]}" "$out/profile.json" > "$out/profile.without-$effect.json"
done
echo
echo "predicted iteration time less the prediction without each effect (ms):"
printf '%-20s %10s' "configuration" "predicted"
printf ' %10s' "${effects[@]}"
printf '\n'
for config in "${configs[@]}"; do
  read -r name schedule m chunks <<< "$config"
  predict() {
    "$ppsim" simulate --schedule "$schedule" --stages "$ranks" --micro-batches "$m" --chunks "$chunks" --profile "$1" --json |
      jq .iteration_time_s
  }
  full_s=$(predict "$out/profile.json")
  printf '%-20s %10.2f' "$name" "$(jq -n "$full_s * 1000")"
  for effect in "${effects[@]}"; do
    printf ' %10.2f' "$(jq -n "($full_s - $(predict "$out/profile.without-$effect.json")) * 1000")"
  done
  printf '\n'
done
echo "accuracy: load average after: $(cut -d' ' -f1-3 /proc/loadavg); traces, profile and comparisons in $out" >&2
