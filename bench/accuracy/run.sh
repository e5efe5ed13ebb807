#!/usr/bin/env bash
# Prediction accuracy on this machine: runs pprun once for a calibration configuration,
# calibrates a profile from its trace (ppsim calibrate), then predicts (ppsim simulate
# --profile) and measures (pprun) other schedules and micro-batch counts of the same model on
# the same 2 ranks, compares each pair (ppsim compare --json) and prints the error table.
#
#   bench/accuracy/run.sh                   # binaries from $PIPESCOPE_BUILD_DIR or build/release
#   PIPESCOPE_BUILD_DIR=build-x ACCURACY_OUT=/tmp/acc bench/accuracy/run.sh
#
# Environment: PIPESCOPE_BUILD_DIR (build folder holding sim/ppsim and exec/pprun; built there
# when missing), ACCURACY_OUT (where traces, profile and comparisons go; default a new
# temporary folder), STEPS (optimizer steps per pprun run, the trace is of the last; default 6),
# MODEL_ARGS (pprun model options).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${PIPESCOPE_BUILD_DIR:-$root/build/release}
[[ $build = /* ]] || build=$root/$build
out=${ACCURACY_OUT:-$(mktemp -d /tmp/pipescope-accuracy.XXXXXX)}
steps=${STEPS:-6}
read -r -a model_args <<< "${MODEL_ARGS:---model mlp --layers 8 --hidden 256 --micro-batch-size 8}"
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
  "zbv-m4 zbv 4 2"
)

measure() {  # name schedule m chunks
  "$pprun" --nproc-per-node "$ranks" --schedule "$2" --micro-batches "$3" --chunks "$4" "${model_args[@]}" \
    --threads-per-rank 1 --steps "$steps" --trace "$out/$1.measured.json" --quiet
}

read -r calib_name calib_schedule calib_m calib_chunks <<< "${configs[0]}"
echo "accuracy: ${model_args[*]}, $ranks ranks, $steps steps per run; calibration: $calib_schedule m=$calib_m" >&2
for config in "${configs[@]}"; do
  read -r name schedule m chunks <<< "$config"
  echo "accuracy: measuring $name" >&2
  measure "$name" "$schedule" "$m" "$chunks"
done

calibration_inputs=("$out/$calib_name.measured.json")
"$ppsim" calibrate "${calibration_inputs[@]}" -o "$out/profile.json" --report "$out/calibration.txt" --quiet
if [[ $(jq -r .backward_split "$out/profile.json") == unmeasured ]]; then
  # The calibration trace did not time the backward's two halves apart: take the split from
  # the measured split-backward run (which then is no longer an independent check).
  echo "accuracy: the calibration trace has no backward split; adding zb-h1-m4's trace to the calibration" >&2
  calibration_inputs+=("$out/zb-h1-m4.measured.json")
  "$ppsim" calibrate "${calibration_inputs[@]}" -o "$out/profile.json" --report "$out/calibration.txt" --quiet
fi

rows=()
for config in "${configs[@]}"; do
  read -r name schedule m chunks <<< "$config"
  "$ppsim" simulate --schedule "$schedule" --stages "$ranks" --micro-batches "$m" --chunks "$chunks" \
    --profile "$out/profile.json" --trace "$out/$name.predicted.json" --json > "$out/$name.simulate.json"
  "$ppsim" compare "$out/$name.predicted.json" "$out/$name.measured.json" --json > "$out/$name.compare.json"
  rows+=("$name")
done

echo "calibrated from: ${calibration_inputs[*]##*/}"
printf '%-20s %12s %12s %8s %9s %s\n' "configuration" "predicted" "measured" "error" "op MAPE" "peak memory error per rank"
for name in "${rows[@]}"; do
  jq -r --arg name "$name" '[$name,
      (.iteration_time_predicted_s * 1000 | tostring | .[0:7]) + " ms",
      (.iteration_time_measured_s * 1000 | tostring | .[0:7]) + " ms",
      ((.iteration_time_error * 1000 | round) / 10 | tostring) + "%",
      ((.op_duration_mape * 1000 | round) / 10 | tostring) + "%",
      ([.peak_memory_error[] | if . == null then "n/a" else ((. * 1000 | round) / 10 | tostring) + "%" end] | join(" "))]
    | @tsv' "$out/$name.compare.json" |
    awk -F'\t' '{ printf "%-20s %12s %12s %8s %9s %s\n", $1, $2, $3, $4, $5, $6 }'
done
echo "accuracy: traces, profile and comparisons in $out" >&2
