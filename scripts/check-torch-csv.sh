#!/usr/bin/env bash
# Checks that what `ppsim schedule --format torch-csv` writes is torch's: for a few of
# pipescope's schedules, torch 2.15's own `_load_csv(..., format="compute_comms")` loads the file
# into the matching torch schedule class and one training step of a tiny model runs with it over
# 2 Gloo processes on the CPU (torchrun), with the gradients of every stage checked against the
# same model run without pipelining (scripts/check-torch-csv.py). CI does not run it: it needs
# PyPI's torch (scripts/setup-torch-venv.sh).
#
#   scripts/check-torch-csv.sh        # PYTHON (default: scripts/setup-torch-venv.sh's python),
#                                     # PPSIM (default build/ci/sim/ppsim)
#
# 1f1b has one stage per rank; torch's Schedule1F1B (a single-stage class) has no lowered-CSV
# reader, so its file goes into ScheduleInterleaved1F1B with one stage per rank, which runs
# whatever lowered order it is given.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ppsim="${PPSIM:-${repo}/build/ci/sim/ppsim}"
python="${PYTHON:-$("${repo}/scripts/setup-torch-venv.sh" | tail -n 1)}"
[[ -x "${ppsim}" ]] || { echo "check-torch-csv: error: no ppsim at ${ppsim} (build it, or set PPSIM)" >&2; exit 1; }
torchrun="$(dirname "${python}")/torchrun"
work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT

ranks=2
micro_batches=8
# pipescope schedule | --chunks | torch class | per rank | placement
checks=(
  "1f1b              1 ScheduleInterleaved1F1B       1 loop"
  "interleaved-1f1b  2 ScheduleInterleaved1F1B       2 loop"
  "looped-bfs        2 ScheduleLoopedBFS             2 loop"
  "zb-h1             1 ScheduleInterleavedZeroBubble 1 loop"
  "zbv               2 ScheduleZBVZeroBubble         2 v"
  "dualpipev         2 ScheduleDualPipeV             2 v"
)
failed=0
for check in "${checks[@]}"; do
  read -r name chunks class per_rank placement <<<"${check}"
  csv="${work}/${name}.csv"
  chunk_option=()
  [[ "${placement}" == loop && "${chunks}" -gt 1 ]] && chunk_option=(--chunks "${chunks}")
  "${ppsim}" schedule "${name}" --stages "${ranks}" --micro-batches "${micro_batches}" "${chunk_option[@]}" \
      --format torch-csv -o "${csv}"
  v_option=()
  [[ "${placement}" == v ]] && v_option=(--v-placement)
  echo "== ${name} ($(wc -l <"${csv}") rows) -> ${class}"
  if ! OMP_NUM_THREADS=1 "${torchrun}" --nproc-per-node "${ranks}" --master-port $((29500 + RANDOM % 1000)) \
      "${repo}/scripts/check-torch-csv.py" --csv "${csv}" --class "${class}" --stages-per-rank "${per_rank}" \
      --micro-batches "${micro_batches}" "${v_option[@]}" 2>"${work}/err.txt"; then
    echo "check-torch-csv: ${name}: torch refused or failed to run it:" >&2
    grep -v "^W[0-9]\|^ *$" "${work}/err.txt" | tail -n 8 >&2
    failed=1
  fi
done
exit "${failed}"
