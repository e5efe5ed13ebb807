#!/usr/bin/env bash
# Regenerates docs/images/screenshot-moe-all-to-all.png: a measured mixture-of-experts run of
# pprun (tiny-moe, 2 pipeline stages x expert parallelism 2 = 4 processes over loopback Gloo, 1F1B)
# (its first data-parallel replica) beside ppsim's prediction of it, in ppview. The prediction comes from a profile that
# `ppsim calibrate` learned from an earlier run of the same layout with half the micro-batches,
# as the README's dense example is made (scripts/make-examples.sh). Each measured rank shows its
# dispatch and combine on the all-to-all lane, with bytes and peers in the details.
#
#   scripts/make-moe-screenshot.sh [BUILD_DIR]     # default: $PIPESCOPE_BUILD_DIR or build/release
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-${PIPESCOPE_BUILD_DIR:-$root/build/release}}
[[ $build = /* ]] || build=$root/$build
ppsim=$build/sim/ppsim
pprun=$build/exec/pprun
ppview=$build/gui/ppview
for tool in "$ppsim" "$pprun" "$ppview"; do
  [[ -x $tool ]] || { echo "make-moe-screenshot: error: $tool is missing (build ppsim, pprun and ppview first)" >&2; exit 1; }
done
out=$root/docs/images/screenshot-moe-all-to-all.png
# The sizes of tests/exec/test_pprun_moe.cpp, a little larger so that the all-to-all is seen.
moe=(--model tiny-moe --layers 4 --hidden 64 --seq-len 32 --micro-batch-size 4 --experts 4 --top-k 2
  --moe-ffn-hidden 64 --threads-per-rank 1 --quiet --timeout 60)
layout=(--nproc-per-node 4 --dp 2 --expert-parallel 2 --schedule 1f1b)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$pprun" "${layout[@]}" --micro-batches 4 --steps 8 --trace-steps 4 "${moe[@]}" --trace "$work/calibration.json"
"$ppsim" calibrate "$work"/calibration*.json -o "$work/profile.json" --quiet
"$pprun" "${layout[@]}" --micro-batches 8 --steps 4 "${moe[@]}" --trace "$work/measured.json"
"$ppsim" simulate --schedule 1f1b --stages 2 --micro-batches 8 --profile "$work/profile.json" \
  --trace "$work/predicted.json" > /dev/null
# The prediction is one pipeline (2 ranks); the run is two data-parallel replicas of it (world
# ranks 0-1 and 2-3, rank r's expert-parallel peer r + 2). The viewer compares pipelines of one
# size: the first replica is kept, and its all-to-all events still name their peers in the others.
jq '.traceEvents |= map(select((.pid // 0) < 2))
    | .otherData.num_ranks = 2
    | reduce ("stolen_time_s", "transport_cpu_s", "cores_per_rank", "transport_cores_per_rank") as $k
        (.; if (.otherData[$k] | type) == "array" then .otherData[$k] |= .[0:2] else . end)' \
  "$work/measured.json" > "$work/measured-replica0.json"
mkdir -p "$(dirname "$out")"
# The first 80 ms (about two micro-batches' forwards and backwards), each exchange wide enough
# to see; kind colours rather than the difference view, whose grey would mark every measured
# all-to-all as unmatched (a measured exchange names no stage or micro-batch, a predicted one does).
QT_QPA_PLATFORM=offscreen "$ppview" "$work/predicted.json" "$work/measured-replica0.json" --no-difference \
  --zoom 0,80000 --screenshot "$out" --size 1200x800
echo "make-moe-screenshot: wrote $out ($(du -k "$out" | cut -f1) KiB)" >&2
