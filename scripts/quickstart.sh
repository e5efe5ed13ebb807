#!/usr/bin/env bash
# The README's first command: installs what the tools need (install-deps.sh --tools; .ci/run
# installs the rest), builds the three tools (ppsim, pprun, ppview: nothing else, no tests), and
# runs the main job on its built-in default configuration (scripts/main-job.sh: a validated 1F1B
# schedule, the planner's example, a real 2-process training run with its trace in out/). Run it
# again at any time: every step is idempotent, and a second run only rebuilds what changed
# (`cmake --build --preset release` builds the rest: tests, benchmarks, examples).
set -euo pipefail
cd "$(dirname "$0")/.."

started=$(date +%s)
bash scripts/install-deps.sh --tools
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)" --target tools
echo "quickstart: dependencies and the three tools ready in $(( $(date +%s) - started )) s"
echo
bash scripts/main-job.sh build/release
