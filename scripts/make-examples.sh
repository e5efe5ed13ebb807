#!/usr/bin/env bash
# Regenerates traces/examples/: a real pprun run of 1F1B calibrates a profile; a real pprun run
# of ZB-H1 with twice the micro-batches is the measured trace; ppsim's prediction of that run
# from the profile is the predicted trace; `ppsim compare` writes the comparison as a table and
# as JSON. Open them with: ppview traces/examples/predicted.json traces/examples/measured.json
#
#   scripts/make-examples.sh [BUILD_DIR]     # default: $PIPESCOPE_BUILD_DIR or build/release
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-${PIPESCOPE_BUILD_DIR:-$root/build/release}}
[[ $build = /* ]] || build=$root/$build
ppsim=$build/sim/ppsim
pprun=$build/exec/pprun
for tool in "$ppsim" "$pprun"; do
  [[ -x $tool ]] || { echo "make-examples: error: $tool is missing (build ppsim and pprun first)" >&2; exit 1; }
done
out=$root/traces/examples
model=(--model mlp --layers 8 --hidden 512 --micro-batch-size 32 --threads-per-rank 1 --bind-cores --steps 10 --quiet)  # as bench/accuracy
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# On a virtual machine the host may take the cores away during a run (steal, recorded in the
# traces): calibration leaves such steps out, and a run with none left, or a measured step that
# lost more than 2% of a rank's time, is run again (up to 5 times), so that the examples show
# the model against the run rather than against the host's other work.
attempts=5
# Steps 3..9 traced (the first three warm up); the examples keep the last one's trace.
for (( attempt = 1; ; ++attempt )); do
  "$pprun" --nproc-per-node 2 --schedule 1f1b --micro-batches 4 "${model[@]}" --trace-steps 7 --trace "$work/calibration-1f1b.json"
  "$ppsim" calibrate "$work"/calibration-1f1b*.json --statistic mean -o "$work/profile.json" --report "$work/calibration.txt" \
    --quiet 2> "$work/calibrate.err" && break
  (( attempt < attempts )) || { cat "$work/calibrate.err" >&2; exit 1; }
  echo "make-examples: $(cat "$work/calibrate.err"); measuring again" >&2
done
for (( attempt = 1; ; ++attempt )); do
  "$pprun" --nproc-per-node 2 --schedule zb-h1 --micro-batches 8 "${model[@]}" --trace "$work/measured.json"
  stolen=$(jq '(.otherData.stolen_time_s // [0] | max) / .otherData.step_time_s' "$work/measured.json")
  jq -e -n "$stolen <= 0.02" > /dev/null && break
  (( attempt < attempts )) || { echo "make-examples: error: the host took $stolen of the measured step in $attempts runs: try when the machine is quiet" >&2; exit 1; }
  echo "make-examples: the host took $(jq -n "$stolen * 100 | round")% of a rank's measured step (steal); measuring again" >&2
done
"$ppsim" simulate --schedule zb-h1 --stages 2 --micro-batches 8 --profile "$work/profile.json" \
  --trace "$work/predicted.json" > "$work/simulate.txt"
"$ppsim" compare "$work/predicted.json" "$work/measured.json" > "$work/compare.txt"
"$ppsim" compare "$work/predicted.json" "$work/measured.json" --json > "$work/compare.json"

mkdir -p "$out"
for f in calibration-1f1b.json profile.json calibration.txt measured.json predicted.json simulate.txt compare.txt compare.json; do
  cp "$work/$f" "$out/$f"
done
echo "make-examples: wrote $out" >&2
