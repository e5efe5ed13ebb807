#!/usr/bin/env bash
# Builds pipescope's libFuzzer targets (tests/fuzz) with clang, AddressSanitizer and
# UndefinedBehaviorSanitizer in their own build directory, and runs each target for SECONDS
# (default 10) starting from the seed corpus in tests/fuzz/corpus/{json,csv,trace,torch,model}:
# schedules as JSON and torch CSV, traces (read, and read by both parsers, which must agree),
# torch.profiler runs, model files. Exits non-zero when a target crashes, leaks, trips a
# sanitizer or times out; the input that did it is left in $BUILD/fuzz-artifacts/ and the
# command to replay it is printed.
#
#   scripts/run-fuzzers.sh            # ~10 s per target, as CI runs it
#   scripts/run-fuzzers.sh 3600       # an hour per target
#   JOBS=8 scripts/run-fuzzers.sh 600 # 10 minutes per target, built with 8 jobs and run 8 at once
#
# Longer runs: pass more seconds. New inputs that reach new code are kept between runs in
# $BUILD/fuzz-corpus/ (the seed corpus in the repository is never modified); to keep the
# interesting ones, minimise them into the seeds with
#   $BUILD/tests/fuzz/fuzz_schedule_json -merge=1 tests/fuzz/corpus/json $BUILD/fuzz-corpus/json
# Environment: BUILD (default build-fuzz; a tree configured with PIPESCOPE_WITH_FUZZERS=ON, such as
# build/sanitize, is reused as it is), JOBS (default 2: build jobs, and targets run at once), CXX
# (default clang++).
set -euo pipefail

seconds="${1:-10}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD:-$root/build-fuzz}"
jobs="${JOBS:-2}"
cxx="${CXX:-clang++}"

if ! command -v "$cxx" >/dev/null; then
  echo "run-fuzzers: $cxx not found; install clang (scripts/install-deps.sh)" >&2
  exit 2
fi

# A tree configured with the fuzzers already (the sanitize preset, as CI builds it: one clang
# build serves the sanitizer tests and the fuzzers) is used as it is; otherwise one is made.
if grep -qs '^PIPESCOPE_WITH_FUZZERS:BOOL=ON' "$build/CMakeCache.txt"; then
  echo "run-fuzzers: using the fuzzer targets of $build"
else
  # -O1 with line tables: what libFuzzer's and ASan's documentation advise (exact reports with
  # file and line), at about half the compile time of -O2 -g; the sanitizers' own cost dominates.
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER="$cxx" \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only -DNDEBUG" -DPIPESCOPE_WITH_PYTHON=OFF \
    -DPIPESCOPE_WITH_FUZZERS=ON -DPIPESCOPE_WITH_TESTS=OFF -DPIPESCOPE_WITH_BENCH=OFF \
    -DPIPESCOPE_WITH_EXEC=OFF -DPIPESCOPE_WITH_GUI=OFF >/dev/null
fi
cmake --build "$build" -j "$jobs" --target fuzz_schedule_json fuzz_torch_csv fuzz_trace fuzz_trace_parsers fuzz_torch_profiler fuzz_model_file

# Each target runs on its own core, JOBS at a time: libFuzzer is single-threaded, so two targets
# side by side take the time of one on a 2-core machine, each for its full SECONDS.
fuzz_one() {
  local kind="$1" target
  case "$kind" in
    json) target=fuzz_schedule_json ;;
    csv) target=fuzz_torch_csv ;;
    trace) target=fuzz_trace ;;
    trace-parsers) target=fuzz_trace_parsers ;;
    torch) target=fuzz_torch_profiler ;;
    model) target=fuzz_model_file ;;
  esac
  local corpus="$build/fuzz-corpus/$kind"
  local artifacts="$build/fuzz-artifacts/$kind/"
  local seeds="$root/tests/fuzz/corpus/${kind%-parsers}"  # trace-parsers starts from the trace seeds
  mkdir -p "$corpus" "$artifacts"
  # The first corpus directory collects new inputs; the seeds are read only.
  if ! "$build/tests/fuzz/$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
      -max_len=16384 -print_final_stats=1 -artifact_prefix="$artifacts" \
      "$corpus" "$seeds" 2>"$build/fuzz-$kind.log"; then
    {
      echo "run-fuzzers: $target FAILED; last lines of $build/fuzz-$kind.log:"
      tail -n 40 "$build/fuzz-$kind.log"
      for crash in "$artifacts"*; do
        [ -e "$crash" ] && echo "run-fuzzers: replay with: $build/tests/fuzz/$target $crash"
      done
    } >&2
    return 1
  fi
  echo "run-fuzzers: $target ran ${seconds}s: $(grep -E "Done [0-9]+ runs" "$build/fuzz-$kind.log" | tail -n 1)"
}

status=0
pids=()
for kind in json csv trace trace-parsers torch model; do
  if [ "${#pids[@]}" -ge "$jobs" ]; then
    wait "${pids[0]}" || status=1
    pids=("${pids[@]:1}")
  fi
  fuzz_one "$kind" &
  pids+=("$!")
done
for pid in "${pids[@]}"; do
  wait "$pid" || status=1
done
exit "$status"
