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
# 10), WARMUP (first steps of a run left out of the measurement; default 3), ROUNDS (every
# configuration runs once per round, rounds one after the other; default 12), MODEL_ARGS (pprun
# model options), STATISTIC (what a duration becomes in the profile, ppsim calibrate
# --statistic: mean, the default, or median; the table shows the median profile's error too),
# BIND_CORES (1, the default: pprun --bind-cores, each rank on a core of its own; 0: pprun --no-bind-cores, ranks
# share the cores), RANKS (pipeline ranks, default 2; 1 runs every stage on one rank, as on a
# machine with one GPU), DEVICE (cpu, the default, or cuda: pprun --device cuda, NCCL, rank r
# on GPU r), PIPESCOPE_PPRUN (a pprun to run instead of the build folder's, e.g. the CUDA build
# of scripts/build-cuda.sh), MEASURE_ONLY (1: run and record, no analysis: for a machine that
# has pprun but not ppsim; REUSE=1 analyses the folder elsewhere), MOE (1: the mixture-of-experts
# loop: tiny-moe on DP (default 2) replicas of each pipeline rank, calibrated on 1F1B m=4 at
# expert parallelism 2, predicting 1f1b, interleaved-1f1b, zbv and dualpipev at E = 1 and 2;
# ROUNDS defaults to 3 and BIND_CORES to 0 there), DP (data-parallel replicas, default 1; the
# runs have RANKS x DP processes, and the profile predicts one pipeline of them).
#
# The calibration configuration runs once more per round, apart from its measured row, with
# every step after WARMUP traced (pprun --trace-steps); all those traces calibrate the profile
# together, so that it learns from the same population of steps the measurements come from.
# The measured iteration time of a configuration is the mean over the steps after WARMUP of
# all its runs (pprun --metrics, rank 0's wall time of a step), the quantity a profile of mean
# durations predicts. Rounds spread every configuration over the same stretch of time, so a
# burst of other work on the machine does not fall on one configuration alone; and since on a
# shared machine a whole run is faster or slower than the next, the table gives each error a
# 95% interval from the spread of the runs' means. The last round's trace gives the
# per-operation comparison and the memory. Timing needs a quiet machine: the script prints the
# load average before and after. On a virtual machine the host may also take the cores away
# (steal): pprun records it per rank and step (--metrics stolen_time_s), and a run that lost
# more than STEAL_LIMIT (default 0.02) of a rank's time to it is left out, as are the traced
# steps calibration would have learnt from (ppsim calibrate --max-stolen); such a run is first
# measured again, up to RETRIES (default 2) times, so that a passing burst costs a rerun rather
# than the round's run.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${PIPESCOPE_BUILD_DIR:-$root/build/release}
[[ $build = /* ]] || build=$root/$build
out=${ACCURACY_OUT:-$(mktemp -d /tmp/pipescope-accuracy.XXXXXX)}
moe=${MOE:-0}
steps=${STEPS:-10}
warmup=${WARMUP:-3}
rounds=${ROUNDS:-12}
dp=${DP:-1}
default_model_args="--model mlp --layers 8 --hidden 512 --micro-batch-size 32"
if [[ $moe == 1 ]]; then
  rounds=${ROUNDS:-3}
  dp=${DP:-2}
  default_model_args="--model tiny-moe --layers 4 --hidden 64 --seq-len 32 --micro-batch-size 4 --experts 4 --top-k 2 --moe-ffn-hidden 128"
fi
statistic=${STATISTIC:-mean}
disturbed=${DISTURBED:-1.3}
steal_limit=${STEAL_LIMIT:-0.02}
retries=${RETRIES:-2}
bind_args=(--bind-cores)
[[ ${BIND_CORES:-$((moe == 1 ? 0 : 1))} == 1 ]] || bind_args=(--no-bind-cores)
read -r -a model_args <<< "${MODEL_ARGS:-$default_model_args}"
ranks=${RANKS:-2}
device=${DEVICE:-cpu}
command -v jq > /dev/null || { echo "accuracy: error: jq is needed (scripts/install-deps.sh installs it)" >&2; exit 1; }
mkdir -p "$out"
# What the runs were made with travels with them: a re-analysis (REUSE=1), perhaps on another
# machine, simulates the same ranks and leaves out the same warm-up.
settings=$out/accuracy-settings.json
if [[ ${REUSE:-0} == 1 && -f $settings ]]; then
  read -r ranks steps warmup device dp < <(jq -r '"\(.ranks) \(.steps) \(.warmup) \(.device) \(.dp // 1)"' "$settings")
  read -r -a model_args < <(jq -r .model_args "$settings")
fi
(( steps > warmup )) || { echo "accuracy: error: STEPS ($steps) must exceed WARMUP ($warmup)" >&2; exit 2; }
(( ranks >= 1 )) || { echo "accuracy: error: RANKS ($ranks) must be at least 1" >&2; exit 2; }
[[ $device == cpu || $device == cuda ]] || { echo "accuracy: error: DEVICE must be cpu or cuda, not '$device'" >&2; exit 2; }

ppsim=$build/sim/ppsim
pprun=${PIPESCOPE_PPRUN:-$build/exec/pprun}
if [[ ${MEASURE_ONLY:-0} == 1 ]]; then
  [[ -x $pprun ]] || { echo "accuracy: error: no pprun at $pprun" >&2; exit 1; }
elif [[ ! -x $ppsim || ( ${REUSE:-0} != 1 && ! -x $pprun ) ]]; then
  echo "accuracy: building ppsim and pprun in $build" >&2
  cmake --build "$build" -j2 --target ppsim pprun >&2
fi

# name schedule micro-batches chunks [expert-parallel]; the first line is the calibration
# configuration.
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
if [[ $moe == 1 ]]; then
  configs=(
    "calib-1f1b-m4-e2 1f1b 4 1 2"
    "1f1b-m4-e1 1f1b 4 1 1"
    "1f1b-m8-e2 1f1b 8 1 2"
    "1f1b-m8-e1 1f1b 8 1 1"
    "interleaved-v2-m4-e2 interleaved-1f1b 4 2 2"
    "interleaved-v2-m4-e1 interleaved-1f1b 4 2 1"
    "zbv-m4-e2 zbv 4 2 2"
    "zbv-m4-e1 zbv 4 2 1"
    "dualpipev-m4-e2 dualpipev 4 2 2"
    "dualpipev-m4-e1 dualpipev 4 2 1"
  )
fi
# A configuration's expert-parallel options for pprun and ppsim (none for a dense one).
ep_args() {  # E (empty: none)
  [[ -z ${1:-} ]] || printf '%s\n' --expert-parallel "$1"
}

# The figures are timings: the models train on their synthetic data (any vocabulary) unless
# MODEL_ARGS names other data.
data_args=(--data synthetic)
[[ " ${model_args[*]} " == *" --data "* ]] && data_args=()

# The most time the host took from any rank of a run over its steps after the warm-up, as a
# fraction of those steps' time: what step_times_s below leaves a run out for.
run_stolen_fraction() {  # METRICS-JSONL
  jq -s --argjson warmup "$warmup" '[.[] | select(.step >= $warmup)] |
    if length == 0 then 0 else (map(.stolen_time_s // []) | transpose | map(add) | max // 0) / (map(.iteration_time_s) | add) end' "$1"
}

# A run the host took more than STEAL_LIMIT from is measured again at once, up to RETRIES
# times: on a virtual machine the host's other guests come and go within minutes, and a run
# left out would leave its round without that configuration. The last try counts, disturbed
# or not (the analysis then leaves it out); its traces replace the earlier tries'.
measure() {  # name schedule m chunks trace-file traced-steps [E]: appends the run's steps to NAME.metrics.jsonl
  local run_ep_args attempt stolen
  mapfile -t run_ep_args < <(ep_args "${7:-}")
  for (( attempt = 0; ; ++attempt )); do
    "$pprun" --nproc-per-node "$((ranks * dp))" --dp "$dp" "${run_ep_args[@]}" --schedule "$2" --micro-batches "$3" \
      --chunks "$4" "${model_args[@]}" "${data_args[@]}" \
      --threads-per-rank 1 --device "$device" "${bind_args[@]}" --steps "$steps" --trace "$5" --trace-steps "${6:-1}" --metrics "$out/run.metrics.jsonl" --quiet
    stolen=$(run_stolen_fraction "$out/run.metrics.jsonl")
    (( attempt < retries )) && jq -e --argjson limit "$steal_limit" ". > \$limit" <<< "$stolen" > /dev/null || break
    echo "accuracy: round $round: $1 lost $(jq -n "$stolen * 100 | . * 10 | round / 10")% of a rank's time to the host, measuring it again" >&2
  done
  jq -c --argjson run "$round" --argjson retries "$attempt" '. + {run: $run, retries: $retries}' "$out/run.metrics.jsonl" >> "$out/$1.metrics.jsonl"
}

# jq definitions of the statistics below: the median, and the relative standard error of the
# mean of a list.
jq_statistics='
  def median: sort | if length == 0 then null elif length % 2 == 1 then .[length / 2 | floor] else (.[length / 2 - 1] + .[length / 2]) / 2 end;
  def relative_se: length as $n |
    if $n < 2 then 0 else (add / $n) as $m | ((map((. - $m) * (. - $m)) | add) / ($n - 1) | sqrt) / ($n | sqrt) / $m end;'

# Iteration times (seconds) of the steps after the warm-up: mean, median, fastest, and the
# relative standard error of the mean from the spread of the runs' own means (on a shared
# machine a run as a whole is faster or slower than the next: steps of one run are not
# independent samples; runs are). A run that lost more than STEAL_LIMIT of a rank's time to
# the host (the most any rank lost over its steps, over the steps' time), or whose mean step
# is more than DISTURBED times the median of the other runs', was slowed down by other work
# and is left out (kept: the runs that count; runs: all of them; stolen: the runs left out for
# steal; an older measurement without stolen_time_s counts as steal-free).
step_times_s() {
  jq -s -c --argjson warmup "$warmup" --argjson disturbed "$disturbed" --argjson steal_limit "$steal_limit" "$jq_statistics"'
    [.[] | select(.step >= $warmup)] as $all |
    ($all | group_by(.run) | map({run: .[0].run, mean: (map(.iteration_time_s) | add / length),
      stolen: ((map(.stolen_time_s // []) | transpose | map(add) | max // 0) / (map(.iteration_time_s) | add))})) as $all_runs |
    ($all_runs | map(select(.stolen <= $steal_limit))) as $quiet_runs |
    ($quiet_runs | map(.mean) | median) as $typical |
    ($quiet_runs | map(select(.mean <= $disturbed * $typical))) as $runs |
    ($runs | map(.run)) as $kept |
    ($all | map(select(.run as $r | $kept | index($r))) | map(.iteration_time_s)) as $t |
    {mean: ($t | if length > 0 then add / length else null end), fastest: ($t | min), median: ($t | median),
     runs: ($all_runs | length), stolen: (($all_runs | length) - ($quiet_runs | length)),
     kept: $kept, relative_se: ($runs | map(.mean) | relative_se)}' "$1"
}

# Stops with a clear message when every run of a configuration was left out.
require_kept() {  # NAME STEPS-JSON
  if [[ $(jq '.kept | length' <<< "$2") == 0 ]]; then
    echo "accuracy: error: no undisturbed run of $1 ($(jq -r '"\(.stolen) of \(.runs)"' <<< "$2") run(s) lost more than" \
      "$(jq -n "$steal_limit * 100")% of a rank's time to the host (steal), the others were over $disturbed times their median):" \
      "measure again when the machine is quiet, or raise STEAL_LIMIT" >&2
    exit 1
  fi
}

# The same measurement paired round by round with the calibration run measured just before
# (none, "n/a", where no round kept both):
# each run's mean step over that calibration run's, averaged over the rounds where both were
# kept and scaled by the calibration runs' mean. The machine's speed drifts over seconds (the
# run right after a calibration run follows it with a correlation of 0.9, later runs of a round
# 0.4-0.8): the pairing takes much of that drift out of the comparison. Relative standard error
# from the spread of the ratios.
paired_measurement() {  # NAME CALIBRATION-STEPS-JSON CONFIGURATION-STEPS-JSON
  jq -n -c --argjson warmup "$warmup" --argjson kept_cal "$(jq -c .kept <<< "$2")" --argjson kept "$(jq -c .kept <<< "$3")" \
      --slurpfile cal "$out/$calib_name.calibration.metrics.jsonl" --slurpfile cfg "$out/$1.metrics.jsonl" "$jq_statistics"'
    def run_means: [.[] | select(.step >= $warmup)] | group_by(.run) |
      map({key: (.[0].run | tostring), value: (map(.iteration_time_s) | add / length)}) | from_entries;
    ($cal | run_means) as $c | ($cfg | run_means) as $m |
    ($kept_cal | map($c[tostring]) | add / length) as $calibration_mean |
    [$kept_cal[] | select(. as $r | $kept | index($r)) | tostring | $m[.] / $c[.]] as $ratios |
    {rounds: ($ratios | length), measured: (if ($ratios | length) > 0 then $calibration_mean * ($ratios | add / length) else null end),
     relative_se: ($ratios | relative_se)}'
}

read -r calib_name calib_schedule calib_m calib_chunks calib_ep <<< "${configs[0]}"
if [[ ${REUSE:-0} == 1 ]]; then
  [[ -f $out/$calib_name.calibration.metrics.jsonl ]] || { echo "accuracy: error: REUSE=1 but $out holds no earlier measurement" >&2; exit 2; }
  rounds=$(jq -s 'map(.run) | max' "$out/$calib_name.calibration.metrics.jsonl")
  echo "accuracy: analysing the $rounds round(s) measured earlier in $out" >&2
else
  echo "accuracy: ${model_args[*]}, $ranks rank(s) x $dp replica(s) on $device, $rounds round(s) of $steps steps per run ($warmup warm-up);" \
    "calibration: $calib_schedule m=$calib_m; load average before: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
  rm -f "$out"/*.metrics.jsonl
  jq -n --argjson ranks "$ranks" --argjson steps "$steps" --argjson warmup "$warmup" --arg device "$device" \
    --arg model_args "${model_args[*]}" --argjson dp "$dp" \
    '{ranks: $ranks, steps: $steps, warmup: $warmup, device: $device, model_args: $model_args, dp: $dp}' > "$settings"
  for (( round = 1; round <= rounds; ++round )); do
    echo "accuracy: round $round: measuring $calib_name for the calibration" >&2
    measure "$calib_name.calibration" "$calib_schedule" "$calib_m" "$calib_chunks" "$out/$calib_name.calibration$round.json" \
      "$((steps - warmup))" "${calib_ep:-}"
    for config in "${configs[@]}"; do
      read -r name schedule m chunks ep <<< "$config"
      echo "accuracy: round $round: measuring $name" >&2
      measure "$name" "$schedule" "$m" "$chunks" "$out/$name.measured.json" 1 "${ep:-}"
    done
  done
  if [[ ${MEASURE_ONLY:-0} == 1 ]]; then
    echo "accuracy: measured $rounds round(s) into $out; analyse with REUSE=1 ACCURACY_OUT=$out" >&2
    exit 0
  fi
fi

# The calibration learns from the traced steps of the calibration runs that were not disturbed.
calibration_steps=$(step_times_s "$out/$calib_name.calibration.metrics.jsonl")
require_kept "$calib_name (calibration)" "$calibration_steps"
calibration_inputs=()
for round in $(jq -r '.kept[]' <<< "$calibration_steps"); do
  for (( step = warmup; step < steps - 1; ++step )); do
    calibration_inputs+=("$out/$calib_name.calibration$round.step$step.json")
  done
  calibration_inputs+=("$out/$calib_name.calibration$round.json")
done

calibrate() {  # calibrates profile.json (the chosen statistic) and profile.median.json
  "$ppsim" calibrate "${calibration_inputs[@]}" -o "$out/profile.json" --statistic "$statistic" \
    --max-stolen "$steal_limit" --report "$out/calibration.txt" --quiet
  "$ppsim" calibrate "${calibration_inputs[@]}" -o "$out/profile.median.json" --statistic median \
    --max-stolen "$steal_limit" --quiet
}
calibrate
if [[ $(jq -r .backward_split "$out/profile.json") == unmeasured ]]; then
  # The calibration trace did not time the backward's two halves apart: take the split from
  # the measured split-backward run (which then is no longer an independent check).
  echo "accuracy: the calibration trace has no backward split; adding zb-h1-m4's trace to the calibration" >&2
  calibration_inputs+=("$out/zb-h1-m4.measured.json")
  calibrate
fi

# The measured trace's first pipeline (world ranks 0 .. RANKS-1, replica 0), which the prediction
# is of: the trace itself without data parallelism.
first_pipeline() {  # TRACE: prints the file to compare
  if (( dp == 1 )); then
    echo "$1"
    return
  fi
  jq --argjson n "$ranks" '.traceEvents |= map(select((.pid // 0) < $n)) | .otherData.num_ranks = $n |
    .otherData |= with_entries(if (.value | type) == "array" and (.key | IN("layers", "stage_bounds") | not)
                               then .value |= .[0:$n] else . end)' "$1" > "${1%.json}.pipeline0.json"
  echo "${1%.json}.pipeline0.json"
}

rows=()
for config in "${configs[@]}"; do
  read -r name schedule m chunks ep <<< "$config"
  mapfile -t sim_ep_args < <(ep_args "${ep:-}")
  "$ppsim" simulate --schedule "$schedule" --stages "$ranks" --micro-batches "$m" --chunks "$chunks" "${sim_ep_args[@]}" \
    --profile "$out/profile.json" --trace "$out/$name.predicted.json" --json > "$out/$name.simulate.json"
  "$ppsim" compare "$out/$name.predicted.json" "$(first_pipeline "$out/$name.measured.json")" --json > "$out/$name.compare.json"
  "$ppsim" simulate --schedule "$schedule" --stages "$ranks" --micro-batches "$m" --chunks "$chunks" "${sim_ep_args[@]}" \
    --profile "$out/profile.median.json" --json > "$out/$name.simulate.median.json"
  rows+=("$name")
done

echo "calibrated from: $(jq '.calibration.traces | length' "$out/profile.json") traces of $calib_name (steps" \
  "$warmup..$((steps - 1)) of $(jq '.kept | length' <<< "$calibration_steps") of $rounds run(s)," \
  "$(jq '.calibration.traces_left_out // 0' "$out/profile.json") more traced steps left out for steal;" \
  "their runs' mean step $(jq -r '.mean * 1e5 | round / 100' <<< "$calibration_steps") ms ± $(jq -r '.relative_se * 1e3 | round / 10' <<< "$calibration_steps")% standard error)"
echo "measured: mean (and median) of steps $warmup..$((steps - 1)) of $rounds run(s) each, less the disturbed" \
  "ones (runs: the runs kept; a disturbed run lost over $(jq -n "$steal_limit * 100")% of a rank's time to the host (steal; stolen: how" \
  "many runs) or its mean step is over $disturbed times the median run's);" \
  "±: 95% interval of the error from the spread of the calibration's and the configuration's runs;" \
  "paired: the error against the runs paired round by round with the calibration run before them (±: its 95% interval);" \
  "op MAPE: per operation, against the last run's traced step; op error: the same weighted by duration" \
  "(sum |predicted - measured| / sum measured)"
echo "predicted: durations calibrated as the $statistic of their samples; median profile: as their median"
printf '%-20s %10s %10s %8s %7s %6s %7s %8s %7s %10s %8s %8s %14s %s\n' "configuration" "predicted" "measured" "error" "±" "runs" \
  "stolen" "paired" "±" "median" "op MAPE" "op error" "median profile" "peak memory error per rank"
for name in "${rows[@]}"; do
  median_profile_s=$(jq .iteration_time_s "$out/$name.simulate.median.json")
  config_steps=$(step_times_s "$out/$name.metrics.jsonl")
  require_kept "$name" "$config_steps"
  jq -r --arg name "$name" --argjson steps "$config_steps" --argjson calibration "$calibration_steps" \
      --argjson paired "$(paired_measurement "$name" "$calibration_steps" "$config_steps")" \
      --argjson median_profile "$median_profile_s" '
      def ms: (. * 100000 | round) / 100 | tostring + " ms";
      def pct: (. * 1000 | round) / 10 | tostring + "%";
      # Student t, 97.5% quantile, for the fewer runs of the two sides.
      def t975: [12.71, 4.30, 3.18, 2.78, 2.57, 2.45, 2.36, 2.31, 2.26, 2.23, 2.20, 2.18, 2.16, 2.14, 2.13,
                 2.12, 2.11, 2.10, 2.09, 2.09] as $table | if . < 1 then 0 elif . <= 20 then $table[. - 1] else 2.05 end;
      .iteration_time_predicted_s as $predicted |
      ([$steps.kept, $calibration.kept] | map(length) | min - 1 | t975) as $t |
      [$name, ($predicted | ms), ($steps.mean | ms), (($predicted - $steps.mean) / $steps.mean | pct),
       ($t * ((($steps.relative_se | . * .) + ($calibration.relative_se | . * .)) | sqrt) | pct),
       ("\($steps.kept | length)/\($steps.runs)"), ($steps.stolen | tostring),
       (if $paired.measured == null then "n/a" else (($predicted - $paired.measured) / $paired.measured | pct) end),
       (if $paired.rounds < 1 then "n/a" else (($paired.rounds - 1 | t975) * $paired.relative_se | pct) end),
       ($steps.median | ms), (.op_duration_mape | pct), (.op_duration_weighted_error // 0 | pct),
       (($median_profile - $steps.mean) / $steps.mean | pct),
       ([.peak_memory_error[] | if . == null then "n/a" else pct end] | join(" "))]
    | @tsv' "$out/$name.compare.json" |
    awk -F'\t' '{ printf "%-20s %10s %10s %8s %7s %6s %7s %8s %7s %10s %8s %8s %14s %s\n", $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14 }'
done
# The MoE loop also shows each prediction's interval (ppsim simulate's iteration_time_interval_s:
# the calibration's step spread) and whether the measured mean fell inside it.
if [[ $moe == 1 ]]; then
  echo
  printf '%-22s %22s %10s %7s\n' "configuration" "predicted interval" "measured" "inside"
  for name in "${rows[@]}"; do
    measured_s=$(step_times_s "$out/$name.metrics.jsonl" | jq .mean)
    jq -r --arg name "$name" --argjson measured "$measured_s" '
        def ms: (. * 100000 | round) / 100 | tostring;
        .iteration_time_interval_s as $i |
        if $i == null then [$name, "none", ($measured | ms), "n/a"]
        else [$name, "\($i[0] | ms)..\($i[1] | ms) ms", ($measured | ms), (if $measured >= $i[0] and $measured <= $i[1] then "yes" else "no" end)]
        end | @tsv' "$out/$name.simulate.json" |
      awk -F'\t' '{ printf "%-22s %22s %10s %7s\n", $1, $2, $3, $4 }'
  done
fi
# What each modelled effect contributes: the prediction again from the profile with that effect
# taken out (deterministic: no measurement involved).
declare -A without=(
  [overhead]='.instruction_overhead_s = 0'
  [step]='.step_overhead_s = 0'
  [send-recv]='.stages[] |= (.send_s = 0 | .recv_s = 0 | .recv_contended_s = 0)'
  [both-ways]='.stages[] |= (.recv_contended_s = .recv_s)'
  [latency]='.transfer.latency_s = 0'
  [optimizer]='.stages[] |= (.optimizer_s = 0 | .reduce_grads_s = 0 | .reduce_tied_s = 0)'
  [load]='.stages[] |= (.load_s = 0)'
  [all-to-all]='if .all_to_all then .all_to_all.costs |= map(.latency_s = 0 | .bandwidth_bytes_per_s = 0) else . end'
)
effects=(overhead step send-recv both-ways latency optimizer load)
[[ $moe == 1 ]] && effects+=(all-to-all)
for effect in "${effects[@]}"; do
  jq "${without[$effect]}" "$out/profile.json" > "$out/profile.without-$effect.json"
done
echo
echo "predicted iteration time less the prediction without each effect (ms):"
printf '%-20s %10s' "configuration" "predicted"
printf ' %10s' "${effects[@]}"
printf '\n'
for config in "${configs[@]}"; do
  read -r name schedule m chunks ep <<< "$config"
  mapfile -t sim_ep_args < <(ep_args "${ep:-}")
  predict() {
    "$ppsim" simulate --schedule "$schedule" --stages "$ranks" --micro-batches "$m" --chunks "$chunks" "${sim_ep_args[@]}" \
      --profile "$1" --json |
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
