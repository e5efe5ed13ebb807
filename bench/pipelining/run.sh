#!/usr/bin/env bash
# pipescope's executor against torch.distributed.pipelining: the same model (pprun's mlp: N
# blocks x + gelu(W x + b), then a linear head, cross entropy, AdamW), the same batch, the same
# schedule, 2 ranks over Gloo on this machine's CPU, one thread per rank. Also times each in one
# process (gradient accumulation over the same micro-batches), which separates the speed of the
# compute libraries from the pipeline runtimes. pprun runs twice: with the system BLAS (Debian's
# LibTorch + OpenBLAS) and with Intel oneMKL as its BLAS (scripts/with-mkl.sh), the BLAS inside
# PyPI's PyTorch, which makes the two runtimes' comparison like for like in matrix products.
# Each figure is the median step time over STEPS steps after WARMUP steps.
#
#   bench/pipelining/run.sh                  # pprun from $PIPESCOPE_BUILD_DIR or build/release
#   LAYERS=8 HIDDEN=1024 MBS=32 M=8 SCHEDULE=1f1b STEPS=12 bench/pipelining/run.sh
#
# Needs the PyTorch virtual environment of scripts/setup-torch-venv.sh (made when missing).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${PIPESCOPE_BUILD_DIR:-$root/build/release}
[[ $build = /* ]] || build=$root/$build
pprun=$build/exec/pprun
layers=${LAYERS:-8} hidden=${HIDDEN:-1024} vocab=${VOCAB:-1024} mbs=${MBS:-32} m=${M:-8}
schedule=${SCHEDULE:-1f1b} steps=${STEPS:-12} warmup=${WARMUP:-2}
[[ -x $pprun ]] || { echo "pipelining: building pprun in $build" >&2; cmake --build "$build" -j2 --target pprun >&2; }
python=$(bash "$root/scripts/setup-torch-venv.sh" | tail -n 1)
torchrun="$(dirname "$python")/torchrun"
out=$(mktemp -d /tmp/pipescope-pipelining.XXXXXX)
trap 'rm -rf "$out"' EXIT

# The median of the iteration_time_s fields of a JSON-lines file, warm-up steps left out.
median() {
  "$python" - "$1" "$warmup" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
print(f"{statistics.median(r['iteration_time_s'] for r in rows[int(sys.argv[2]):]):.4f}")
PY
}

model=(--layers "$layers" --hidden "$hidden" --vocab "$vocab" --micro-batch-size "$mbs" --micro-batches "$m")
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
"$pprun" --nproc-per-node 1 --schedule data-parallel --model mlp "${model[@]}" --steps "$steps" --quiet --metrics "$out/pp1.jsonl"
"$pprun" --nproc-per-node 2 --schedule "$schedule" --model mlp "${model[@]}" --steps "$steps" --quiet --metrics "$out/pp2.jsonl"
with_mkl="$root/scripts/with-mkl.sh"
"$with_mkl" "$pprun" --nproc-per-node 1 --schedule data-parallel --model mlp "${model[@]}" --steps "$steps" --quiet --metrics "$out/pm1.jsonl"
"$with_mkl" "$pprun" --nproc-per-node 2 --schedule "$schedule" --model mlp "${model[@]}" --steps "$steps" --quiet --metrics "$out/pm2.jsonl"
"$python" "$root/bench/pipelining/torch_pipelining.py" "${model[@]}" --steps "$steps" > "$out/tp1.jsonl"
"$torchrun" --nproc-per-node 2 --master-port "${MASTER_PORT:-29531}" "$root/bench/pipelining/torch_pipelining.py" \
  --schedule "$schedule" "${model[@]}" --steps "$steps" > "$out/tp2.jsonl" 2> "$out/torchrun.log" \
  || { cat "$out/torchrun.log" >&2; exit 1; }

pp1=$(median "$out/pp1.jsonl") pp2=$(median "$out/pp2.jsonl") tp1=$(median "$out/tp1.jsonl") tp2=$(median "$out/tp2.jsonl")
pm1=$(median "$out/pm1.jsonl") pm2=$(median "$out/pm2.jsonl")
echo "mlp, $layers blocks, hidden $hidden, vocab $vocab, micro-batch size $mbs, $m micro-batches, $schedule, 2 ranks (Gloo, CPU, 1 thread each)"
"$python" - "$pp1" "$pp2" "$pm1" "$pm2" "$tp1" "$tp2" <<'PY'
import sys
pp1, pp2, pm1, pm2, tp1, tp2 = map(float, sys.argv[1:])
print(f"{'':40} {'one process':>12} {'2 ranks':>10} {'speed-up':>9}")
print(f"{'pipescope (pprun), OpenBLAS':40} {pp1:11.3f}s {pp2:9.3f}s {pp1 / pp2:8.2f}x")
print(f"{'pipescope (pprun), MKL':40} {pm1:11.3f}s {pm2:9.3f}s {pm1 / pm2:8.2f}x")
print(f"{'torch.distributed.pipelining, MKL':40} {tp1:11.3f}s {tp2:9.3f}s {tp1 / tp2:8.2f}x")
def versus(label, ours, theirs):
    verdict = f"{theirs / ours:.2f}x faster" if ours <= theirs else f"{ours / theirs:.2f}x slower"
    print(f"pipescope ({label}) vs torch.distributed.pipelining, 2 ranks: {verdict}")
versus("same BLAS, MKL", pm2, tp2)
versus("system BLAS, OpenBLAS", pp2, tp2)
PY
