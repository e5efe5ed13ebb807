#!/usr/bin/env bash
# Prediction accuracy on torch.distributed.pipelining's own runs: a small transformer trained by
# PyPI's torch over Gloo on this machine's CPU, 2 ranks (tests/golden/torch/profile_torch_run.py).
# Profiled runs per stage layout (m = CALIB_M, with torch.profiler: ScheduleLoopedBFS with one
# stage per rank, the layout of ScheduleGPipe, and with two; ScheduleInterleavedZeroBubble with
# two, whose split backward (I and W) the zero-bubble classes need) are calibrated (`ppsim
# calibrate` on the ranks' profiler traces); then every configuration below
# runs for real (no profiler) and is predicted (`ppsim simulate --schedule file:` on the CSV torch
# itself dumped for that run, with the profile of its layout), and the two are compared.
#
#   bench/torch-accuracy/run.sh          # ppsim from $PIPESCOPE_BUILD_DIR or build/release
#   ROUNDS=5 STEPS=12 OUT=/tmp/ta bench/torch-accuracy/run.sh
#
# Environment: PIPESCOPE_BUILD_DIR, OUT (default a new temporary folder), ROUNDS (runs of each
# configuration, one after the other round by round; default 3), STEPS (steps per run after
# WARMUP; default 8), WARMUP (steps run first and left out; default 2), CALIB_M (micro-batches of
# the calibration runs; default 4), MODEL_ARGS (profile_torch_run.py model options), VENV (the
# PyTorch virtual environment; scripts/setup-torch-venv.sh makes it when missing).
# MEASURE_ONLY=1 runs and records without analysing; REUSE=1 analyses the runs already in OUT
# (no new runs).
# The measured time of a configuration is the mean over its runs of each run's mean
# `schedule.step()` (the slowest rank's wall time from a barrier to the end of its step(): what
# the CSV describes and pipescope predicts; the optimizer step the loop runs after it is shown
# beside); its 95% interval comes from the spread of the runs' means. The profile of each
# calibration run is scaled to the same run's steps without the profiler (`ppsim calibrate
# --unprofiled-step-time`): torch.profiler's own cost per recorded operator is inside the traced
# durations. Timing needs a quiet machine: the load average is printed before and after.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${PIPESCOPE_BUILD_DIR:-$root/build/release}
[[ $build = /* ]] || build=$root/$build
out=${OUT:-$(mktemp -d /tmp/pipescope-torch-accuracy.XXXXXX)}
rounds=${ROUNDS:-3} steps=${STEPS:-8} warmup=${WARMUP:-2} calib_m=${CALIB_M:-4}
read -r -a model_args <<< "${MODEL_ARGS:---layers 8 --hidden 256 --heads 4 --seq 64 --micro-batch-size 4 --vocab 256}"
ppsim=$build/sim/ppsim
[[ -x $ppsim ]] || { echo "torch-accuracy: building ppsim in $build" >&2; cmake --build "$build" -j2 --target ppsim >&2; }
python=$(VENV=${VENV:-$root/build/venv-torch} bash "$root/scripts/setup-torch-venv.sh" | tail -n 1)
torchrun="$(dirname "$python")/torchrun"
script=$root/tests/golden/torch/profile_torch_run.py
mkdir -p "$out"
export OMP_NUM_THREADS=1

# torch_run NAME CLASS STAGES_PER_RANK M [profile]: one 2-rank run into $out/NAME (its steps as
# JSON lines in $out/NAME/steps.jsonl, its CSV, and with `profile` its profiler traces).
torch_run() {
  local dir=$out/$1 profile_args=(--no-profile)
  # Calibration profiles without shapes and memory events: with them torch.profiler made this
  # model's steps about 30% slower, and the profile learnt that slowness.
  [[ ${5:-} == profile ]] && profile_args=(--timing-only)
  mkdir -p "$dir"
  "$torchrun" --nproc-per-node 2 --master-port "${MASTER_PORT_BASE:-29611}" "$script" --schedule "$2" \
    --stages-per-rank "$3" --micro-batches "$4" "${model_args[@]}" --warmup "$warmup" --steps "$steps" \
    "${profile_args[@]}" --out "$dir" 2> "$dir/torchrun.err" | grep '^{' >> "$dir/steps.jsonl" \
    || { echo "torch-accuracy: error: $1 failed (torchrun's output in $dir/torchrun.err)" >&2; tail -3 "$dir/torchrun.err" >&2; exit 1; }
}

# The mean step time of a profiled run's steps without the profiler (those it ran after).
unprofiled_step() {
  "$python" -c 'import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{\"step")]
print(statistics.mean(r["iteration_time_s"] for r in rows if r.get("profiled") is False and r["step"] >= int(sys.argv[2])))' \
    "$1/steps.jsonl" "$(( warmup + steps ))"
}

echo "torch-accuracy: load average before: $(cut -d' ' -f1-3 /proc/loadavg); output in $out"
# The calibration runs, per stage layout the configurations use: ScheduleLoopedBFS (full
# backwards); with two stages per rank also ScheduleInterleavedZeroBubble, whose split backward
# (I and W) the zero-bubble classes need. torch's I + W costs more than its full backward B
# (the weight half walks part of the graph again), so a profile needs both.
for layout in 1 2; do
  runs=("calib-v$layout ScheduleLoopedBFS")
  (( layout == 2 )) && runs+=("calib-v$layout-split ScheduleInterleavedZeroBubble")
  folders=() times=()
  for run in "${runs[@]}"; do
    read -r name class <<< "$run"
    if [[ ${REUSE:-0} != 1 ]]; then
      rm -rf "${out:?}/$name"
      torch_run "$name" "$class" "$layout" "$calib_m" profile
    fi
    folders+=("$out/$name")
    [[ ${MEASURE_ONLY:-0} == 1 ]] || times+=("$(unprofiled_step "$out/$name")")
  done
  [[ ${MEASURE_ONLY:-0} == 1 ]] && continue
  "$ppsim" calibrate "${folders[@]}" -o "$out/profile-v$layout.json" --report "$out/calib-v$layout/report.txt" \
    --unprofiled-step-time "$(IFS=,; echo "${times[*]}")" --quiet
done

# name class stages-per-rank micro-batches
configs=()
for m in 4 8; do
  configs+=("gpipe-m$m ScheduleGPipe 1 $m" "interleaved-1f1b-m$m ScheduleInterleaved1F1B 2 $m"
            "interleaved-zb-m$m ScheduleInterleavedZeroBubble 2 $m" "zbv-m$m ScheduleZBVZeroBubble 2 $m"
            "dualpipev-m$m ScheduleDualPipeV 2 $m")
done
if [[ ${REUSE:-0} != 1 ]]; then
  for config in "${configs[@]}"; do read -r name _ <<< "$config"; rm -rf "${out:?}/$name"; done
  for (( round = 1; round <= rounds; ++round )); do
    for config in "${configs[@]}"; do
      read -r name class per_rank m <<< "$config"
      torch_run "$name" "$class" "$per_rank" "$m"
      echo "{\"round_end\": $round}" >> "$out/$name/steps.jsonl"
    done
  done
fi
[[ ${MEASURE_ONLY:-0} == 1 ]] && { echo "torch-accuracy: measured only; analyse with REUSE=1 OUT=$out"; exit 0; }

for config in "${configs[@]}"; do
  read -r name class per_rank m <<< "$config"
  "$ppsim" simulate --schedule "file:$out/$name/schedule.csv" --profile "$out/profile-v$per_rank.json" --json \
    > "$out/$name/predicted.json"
done
echo "torch-accuracy: load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

"$python" - "$out" "$warmup" "${configs[@]}" <<'PY'
import json, math, statistics, sys
out, warmup, configs = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
T95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26}
print(f"| configuration | torch class | measured step() (ms) | predicted (ms) | error | 95% interval | optimizer step after it (ms) |")
print(f"|---|---|---|---|---|---|---|")
errors = []
for config in configs:
    name, cls, _, m = config.split()
    means, optimizer, steps = [], [], []
    for line in open(f"{out}/{name}/steps.jsonl"):
        row = json.loads(line)
        if "round_end" in row:
            kept = [s for s in steps if s["step"] >= warmup]
            if kept:
                means.append(statistics.mean(s["schedule_time_s"] for s in kept))
                optimizer.append(statistics.mean(s["iteration_time_s"] - s["schedule_time_s"] for s in kept))
            steps = []
        else:
            steps.append(row)
    measured = statistics.mean(means)
    predicted = json.load(open(f"{out}/{name}/predicted.json"))["iteration_time_s"]
    error = (predicted - measured) / measured
    errors.append(error)
    half = T95.get(len(means) - 1, 2.0) * statistics.stdev(means) / math.sqrt(len(means)) / measured if len(means) > 1 else float("nan")
    print(f"| {name} | {cls} | {measured * 1e3:.1f} | {predicted * 1e3:.1f} | {error * 100:+.1f}% | ±{half * 100:.1f}% | "
          f"{statistics.mean(optimizer) * 1e3:.1f} |")
print(f"\nmean |error| {statistics.mean(abs(e) for e in errors) * 100:.1f}%, max |error| {max(abs(e) for e in errors) * 100:.1f}%, "
      f"{sum(abs(e) <= 0.05 for e in errors)} of {len(errors)} within 5%")
PY
