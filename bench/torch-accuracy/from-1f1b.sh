#!/usr/bin/env bash
# What a torch user has: one torch.profiler trace of their 1F1B run, profiled without a profiler
# schedule (no ProfilerStep#N spans, the common case). Each round runs ScheduleInterleaved1F1B
# (2 stages per rank, m = CALIB_M) under torch.profiler --timing-only --no-step-marks, then the
# split-backward classes for real (ScheduleInterleavedZeroBubble, ScheduleZBVZeroBubble,
# ScheduleDualPipeV at m = 4 and 8, no profiler). `ppsim calibrate` with no option but the run's
# own unprofiled step time learns a profile (the steps found where the actions repeat; the
# backward split estimated, since 1F1B runs full backwards only) and each configuration is
# predicted from the CSV torch dumped for it, with its interval, and compared with its run (the
# mean schedule.step() after WARMUP). The 1F1B run itself is predicted too (its own schedule).
#
#   bench/torch-accuracy/from-1f1b.sh           # ROUNDS (3), STEPS (6), WARMUP (2), CALIB_M (4), OUT, VENV
#
# ppsim from $PIPESCOPE_BUILD_DIR (default build/release). One line per configuration and round
# (JSON, in $OUT/errors.jsonl), then a table: error per round, interval per round, coverage.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${PIPESCOPE_BUILD_DIR:-$root/build/release}
[[ $build = /* ]] || build=$root/$build
out=${OUT:-$(mktemp -d /tmp/pipescope-from-1f1b.XXXXXX)}
rounds=${ROUNDS:-3} steps=${STEPS:-6} warmup=${WARMUP:-2} calib_m=${CALIB_M:-4}
read -r -a model_args <<< "${MODEL_ARGS:---layers 8 --hidden 256 --heads 4 --seq 64 --micro-batch-size 4 --vocab 256}"
ppsim=$build/sim/ppsim
python=$(VENV=${VENV:-$root/build/venv-torch} bash "$root/scripts/setup-torch-venv.sh" | tail -n 1)
torchrun="$(dirname "$python")/torchrun"
script=$root/tests/golden/torch/profile_torch_run.py
export OMP_NUM_THREADS=1
mkdir -p "$out"
: > "$out/errors.jsonl"

run() {  # NAME CLASS M [PROFILER_ARGS...]: one 2-rank run into $out/NAME
  local dir=$out/$1 class=$2 m=$3
  shift 3
  mkdir -p "$dir"
  "$torchrun" --nproc-per-node 2 --master-port "${MASTER_PORT:-29641}" "$script" --schedule "$class" --stages-per-rank 2 \
    --micro-batches "$m" "${model_args[@]}" --warmup "$warmup" --steps "$steps" "$@" --out "$dir" 2> "$dir/torchrun.err" |
    grep '^{' > "$dir/steps.jsonl" || { echo "from-1f1b: error: $1 failed ($dir/torchrun.err)" >&2; tail -3 "$dir/torchrun.err" >&2; exit 1; }
}

mean_of() {  # STEPS.JSONL PROFILED(true|false): the mean schedule.step() after the warm-up
  "$python" -c 'import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(statistics.mean(r["schedule_time_s"] for r in rows if r["step"] >= int(sys.argv[2]) and r["profiled"] == (sys.argv[3] == "true")))' \
    "$1" "$warmup" "$2"
}

configs=()
for m in 4 8; do
  configs+=("interleaved-zb-m$m ScheduleInterleavedZeroBubble $m" "zbv-m$m ScheduleZBVZeroBubble $m" "dualpipev-m$m ScheduleDualPipeV $m")
done
echo "from-1f1b: load average before: $(cut -d' ' -f1-3 /proc/loadavg); output in $out"
for (( round = 1; round <= rounds; ++round )); do
  calib=calib-r$round
  run "$calib" ScheduleInterleaved1F1B "$calib_m" --timing-only --no-step-marks
  # The run's steps without the profiler (those after the profiled ones) scale out its cost.
  unprofiled=$("$python" -c 'import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(statistics.mean(r["iteration_time_s"] for r in rows if not r["profiled"] and r["step"] >= int(sys.argv[2])))' \
    "$out/$calib/steps.jsonl" "$(( warmup + steps ))")
  "$ppsim" calibrate "$out/$calib" -o "$out/$calib/profile.json" --unprofiled-step-time "$unprofiled" \
    > "$out/$calib/calibration.txt" 2>&1
  predict() {  # NAME MEASURED_S
    "$ppsim" simulate --schedule "file:$out/$1/schedule.csv" --profile "$out/$calib/profile.json" --json > "$out/$1/predicted.json"
    "$python" -c 'import json, sys
p = json.load(open(sys.argv[1])); measured = float(sys.argv[2]); low, high = p.get("iteration_time_interval_s") or (None, None)
print(json.dumps({"name": sys.argv[3], "round": int(sys.argv[4]), "predicted_s": p["iteration_time_s"], "measured_s": measured,
                  "error": (p["iteration_time_s"] - measured) / measured, "interval_s": [low, high],
                  "inside": low is not None and low <= measured <= high, "estimated": bool(p.get("estimated"))}))' \
      "$out/$1/predicted.json" "$2" "$1" "$round" >> "$out/errors.jsonl"
  }
  cp -r "$out/$calib" "$out/1f1b-self-r$round"
  predict "1f1b-self-r$round" "$(mean_of "$out/$calib/steps.jsonl" false)"
  for config in "${configs[@]}"; do
    read -r name class m <<< "$config"
    run "$name-r$round" "$class" "$m" --no-profile
    predict "$name-r$round" "$(mean_of "$out/$name-r$round/steps.jsonl" false)"
  done
done
echo "from-1f1b: load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
"$python" - "$out/errors.jsonl" <<'PY'
import collections, json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
by = collections.defaultdict(list)
for r in rows:
    by[r["name"].rsplit("-r", 1)[0]].append(r)
print("| configuration | error per round | interval per round | inside |")
print("|---|---|---|---|")
for name, rs in by.items():
    errors = ", ".join("%+.1f%%" % (r["error"] * 100) for r in rs)
    halves = ", ".join("±%.1f%%" % ((r["interval_s"][1] - r["interval_s"][0]) / 2 / r["predicted_s"] * 100)
                       if r["interval_s"][0] else "none" for r in rs)
    print(f"| {name} | {errors} | {halves} | {sum(r['inside'] for r in rs)} of {len(rs)} |")
print(f"\nall: {len(rows)} tries, mean |error| {sum(abs(r['error']) for r in rows) / len(rows) * 100:.1f}%, "
      f"{sum(abs(r['error']) <= 0.05 for r in rows)} within 5%, inside the interval in {sum(r['inside'] for r in rows)} of {len(rows)}")
PY
