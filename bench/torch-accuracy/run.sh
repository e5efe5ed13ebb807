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
# durations. Timing needs a quiet machine: the load average is printed before and after. On a
# virtual machine the host may also take the cores away (steal, from /proc/stat around each
# run): a run that lost more than STEAL_LIMIT (default 0.02) of the machine's time to it, or
# whose mean step() is more than DISTURBED (default 1.3) times the median of its
# configuration's runs, was slowed down by other work and is left out of the mean (the table
# says how many runs were kept); a calibration run that lost more than STEAL_LIMIT is run again
# (up to three times).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${PIPESCOPE_BUILD_DIR:-$root/build/release}
[[ $build = /* ]] || build=$root/$build
out=${OUT:-$(mktemp -d /tmp/pipescope-torch-accuracy.XXXXXX)}
rounds=${ROUNDS:-3} steps=${STEPS:-8} warmup=${WARMUP:-2} calib_m=${CALIB_M:-4}
steal_limit=${STEAL_LIMIT:-0.02} disturbed=${DISTURBED:-1.3}
read -r -a model_args <<< "${MODEL_ARGS:---layers 8 --hidden 256 --heads 4 --seq 64 --micro-batch-size 4 --vocab 256}"
ppsim=$build/sim/ppsim
[[ -x $ppsim ]] || { echo "torch-accuracy: building ppsim in $build" >&2; cmake --build "$build" -j2 --target ppsim >&2; }
python=$(VENV=${VENV:-$root/build/venv-torch} bash "$root/scripts/setup-torch-venv.sh" | tail -n 1)
torchrun="$(dirname "$python")/torchrun"
script=$root/tests/golden/torch/profile_torch_run.py
mkdir -p "$out"
export OMP_NUM_THREADS=1

# The machine's CPU time so far, all cores, as "steal total" (jiffies, from /proc/stat).
cpu_times() { awk '/^cpu / { total = 0; for (i = 2; i <= NF; ++i) total += $i; print $9, total; exit }' /proc/stat; }

# The share of the machine's time the host took between two cpu_times readings.
stolen_share() {  # BEFORE AFTER
  local steal0 total0 steal1 total1
  read -r steal0 total0 <<< "$1"; read -r steal1 total1 <<< "$2"
  awk -v s="$(( steal1 - steal0 ))" -v t="$(( total1 - total0 ))" 'BEGIN { printf "%.4f", (t > 0 ? s / t : 0) }'
}

# torch_run NAME CLASS STAGES_PER_RANK M [profile]: one 2-rank run into $out/NAME (its steps as
# JSON lines in $out/NAME/steps.jsonl, its CSV, and with `profile` its profiler traces); sets
# `stolen` to the share of the machine's time the host took during it.
torch_run() {
  local dir=$out/$1 profile_args=(--no-profile)
  # Calibration profiles without shapes and memory events: with them torch.profiler made this
  # model's steps about 30% slower, and the profile learnt that slowness.
  [[ ${5:-} == profile ]] && profile_args=(--timing-only)
  mkdir -p "$dir"
  local before; before=$(cpu_times)
  "$torchrun" --nproc-per-node 2 --master-port "${MASTER_PORT_BASE:-29611}" "$script" --schedule "$2" \
    --stages-per-rank "$3" --micro-batches "$4" "${model_args[@]}" --warmup "$warmup" --steps "$steps" \
    "${profile_args[@]}" --out "$dir" 2> "$dir/torchrun.err" | grep '^{' >> "$dir/steps.jsonl" \
    || { echo "torch-accuracy: error: $1 failed (torchrun's output in $dir/torchrun.err)" >&2; tail -3 "$dir/torchrun.err" >&2; exit 1; }
  stolen=$(stolen_share "$before" "$(cpu_times)")
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
# (the weight half walks part of the graph again), so a profile needs both. They run in every
# round like the configurations (NAME-rROUND), so that a stretch of time when the machine is
# slower or faster does not fall on the calibration alone.
# name class stages-per-rank
calibrations=("calib-v1 ScheduleLoopedBFS 1" "calib-v2 ScheduleLoopedBFS 2" "calib-v2-split ScheduleInterleavedZeroBubble 2")
# name class stages-per-rank micro-batches
configs=()
for m in 4 8; do
  configs+=("gpipe-m$m ScheduleGPipe 1 $m" "interleaved-1f1b-m$m ScheduleInterleaved1F1B 2 $m"
            "interleaved-zb-m$m ScheduleInterleavedZeroBubble 2 $m" "zbv-m$m ScheduleZBVZeroBubble 2 $m"
            "dualpipev-m$m ScheduleDualPipeV 2 $m")
done
if [[ ${REUSE:-0} != 1 ]]; then
  for config in "${configs[@]}" "${calibrations[@]}"; do read -r name _ <<< "$config"; rm -rf "${out:?}/$name" "${out:?}/$name"-r*; done
  for (( round = 1; round <= rounds; ++round )); do
    for calibration in "${calibrations[@]}"; do
      read -r name class per_rank <<< "$calibration"
      for attempt in 1 2 3; do
        rm -rf "${out:?}/$name-r$round"
        torch_run "$name-r$round" "$class" "$per_rank" "$calib_m" profile
        awk -v s="$stolen" -v l="$steal_limit" 'BEGIN { exit !(s <= l) }' && break
        echo "torch-accuracy: $name-r$round lost $stolen of the machine's time to the host (steal); running it again" >&2
      done
    done
    for config in "${configs[@]}"; do
      read -r name class per_rank m <<< "$config"
      torch_run "$name" "$class" "$per_rank" "$m"
      echo "{\"round_end\": $round, \"stolen_share\": $stolen}" >> "$out/$name/steps.jsonl"
    done
  done
fi
[[ ${MEASURE_ONLY:-0} == 1 ]] && { echo "torch-accuracy: measured only; analyse with REUSE=1 OUT=$out"; exit 0; }

# One profile per stage layout from its calibration runs of every round (an older OUT has one
# run per name, without -rROUND), each scaled to its own steps without the profiler; a run whose
# unprofiled steps took more than DISTURBED times the median of its name's runs is left out.
for layout in 1 2; do
  folders=() times=()
  for calibration in "${calibrations[@]}"; do
    read -r name _ per_rank <<< "$calibration"
    (( per_rank == layout )) || continue
    runs=("$out/$name"-r*)
    [[ -d ${runs[0]} ]] || runs=("$out/$name")
    listing=""
    for run in "${runs[@]}"; do listing+="$run $(unprofiled_step "$run")"$'\n'; done
    while read -r run time; do folders+=("$run"); times+=("$time"); done < <("$python" -c 'import statistics, sys
rows = [line.split() for line in sys.stdin if line.strip()]
typical = statistics.median(float(t) for _, t in rows)
for run, t in rows:
    if float(t) <= float(sys.argv[1]) * typical: print(run, t)
    else: print(f"torch-accuracy: {run} left out: its steps took {float(t) / typical:.2f} times the median", file=sys.stderr)' \
      "$disturbed" <<< "$listing")
  done
  "$ppsim" calibrate "${folders[@]}" -o "$out/profile-v$layout.json" --report "$out/calibration-v$layout.txt" \
    --unprofiled-step-time "$(IFS=,; echo "${times[*]}")" --quiet
done

for config in "${configs[@]}"; do
  read -r name class per_rank m <<< "$config"
  "$ppsim" simulate --schedule "file:$out/$name/schedule.csv" --profile "$out/profile-v$per_rank.json" --json \
    > "$out/$name/predicted.json"
done
echo "torch-accuracy: load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

"$python" - "$out" "$warmup" "$steal_limit" "$disturbed" "${configs[@]}" <<'PY'
import json, math, statistics, sys
out, warmup, steal_limit, disturbed, configs = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), sys.argv[5:]
T95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26}
print(f"| configuration | torch class | measured step() (ms) | predicted (ms) | error | 95% interval | runs kept | optimizer step after it (ms) |")
print(f"|---|---|---|---|---|---|---|---|")
errors = []
for config in configs:
    name, cls, _, m = config.split()
    runs, steps = [], []  # (mean step(), mean optimizer step, stolen share) per run
    for line in open(f"{out}/{name}/steps.jsonl"):
        row = json.loads(line)
        if "round_end" in row:
            kept = [s for s in steps if s["step"] >= warmup]
            if kept:
                runs.append((statistics.mean(s["schedule_time_s"] for s in kept),
                             statistics.mean(s["iteration_time_s"] - s["schedule_time_s"] for s in kept),
                             row.get("stolen_share", 0.0)))
            steps = []
        else:
            steps.append(row)
    quiet = [r for r in runs if r[2] <= steal_limit]
    typical = statistics.median(r[0] for r in quiet) if quiet else None
    kept_runs = [r for r in quiet if r[0] <= disturbed * typical]
    if not kept_runs:
        sys.exit(f"torch-accuracy: error: no undisturbed run of {name} (of {len(runs)}, {len(runs) - len(quiet)} lost more than "
                 f"{steal_limit:.0%} of the machine's time to the host): measure again when the machine is quiet")
    means = [r[0] for r in kept_runs]
    optimizer = [r[1] for r in kept_runs]
    measured = statistics.mean(means)
    predicted = json.load(open(f"{out}/{name}/predicted.json"))["iteration_time_s"]
    error = (predicted - measured) / measured
    errors.append(error)
    half = T95.get(len(means) - 1, 2.0) * statistics.stdev(means) / math.sqrt(len(means)) / measured if len(means) > 1 else float("nan")
    print(f"| {name} | {cls} | {measured * 1e3:.1f} | {predicted * 1e3:.1f} | {error * 100:+.1f}% | ±{half * 100:.1f}% | "
          f"{len(kept_runs)} of {len(runs)} | {statistics.mean(optimizer) * 1e3:.1f} |")
print(f"\nmean |error| {statistics.mean(abs(e) for e in errors) * 100:.1f}%, max |error| {max(abs(e) for e in errors) * 100:.1f}%, "
      f"{sum(abs(e) <= 0.05 for e in errors)} of {len(errors)} within 5%")
PY
