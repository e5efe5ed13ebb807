#!/usr/bin/env bash
# pprun's CUDA path, end to end, on the GPU machine at hand (one GPU is enough): the runs that
# the CPU tests make over Gloo, made over NCCL on the GPU, and their losses set side by side.
#
#   scripts/with-python-torch.sh scripts/gpu-checks.sh build/cuda-2.11/exec-cuda/pprun OUT_DIR
#
# With fewer GPUs than ranks, the ranks share them and NCCL connects them over sockets
# (exec/src/shared_gpu.hpp): what is checked is the program and its numbers, not its speed.
# Runs (tiny-moe: 2 MoE blocks of 4 experts, top 2, a shared expert; fp32):
#   moe-one-cpu        1 process on the CPU (Gloo): the reference
#   moe-one-cuda       the same on the GPU: the losses of the CPU within 1e-4 relative (other kernels)
#   moe-ep2xpp2-cuda   expert parallel 2 x pipeline 2 (4 ranks, NCCL all-to-all with per-rank
#                      splits, expert gradients over the expert data-parallel group): the losses
#                      of moe-one-cuda within 1e-4 relative (sums in another order)
#   moe-dualpipev-*    dualpipev with its overlapped F&B steps (a communication thread) and the
#                      same passes one after the other: the same losses, bit for bit
#   gpt-one-cuda, gpt-1f1b-cuda   a dense model in one process and over 2 pipeline ranks
#                      (NCCL send/receive): the same losses, bit for bit
# DEVICE=cpu makes the same runs on the CPU (Gloo), to try the script where there is no GPU.
# Writes OUT_DIR/NAME.jsonl (metrics), NAME.err, the traced steps as JSON, and summary.txt; exits
# non-zero when a run fails or a comparison misses.
set -uo pipefail

(( $# == 2 )) || { echo "usage: gpu-checks.sh PPRUN OUT_DIR" >&2; exit 2; }
pprun=$1
out=$2
mkdir -p "$out"
failed=0
device=${DEVICE:-cuda}

moe="--model tiny-moe --layers 2 --hidden 32 --seq-len 32 --micro-batch-size 4 --experts 4 --top-k 2"
moe+=" --moe-ffn-hidden 32 --shared-expert-ffn-hidden 16 --lr 0.01 --quiet --timeout 120"
overlap="--nproc-per-node 4 --dp 2 --expert-parallel 2 --schedule dualpipev --micro-batches 4 --steps 4"
overlap+=" --trace-steps 1 --partition uniform --model tiny-moe --layers 4 --hidden 32 --seq-len 32"
overlap+=" --micro-batch-size 4 --experts 4 --top-k 2 --moe-ffn-hidden 32 --lr 0.01 --quiet --timeout 120"
gpt="--model tiny-gpt --layers 4 --hidden 64 --seq-len 32 --micro-batch-size 4 --micro-batches 4 --steps 4"
gpt+=" --lr 0.01 --quiet --timeout 120"

run() {
  local name=$1
  shift
  local started=$SECONDS
  # shellcheck disable=SC2068 # the option strings above are meant to split into words
  timeout 180 "$pprun" $@ --metrics "$out/$name.jsonl" 2> "$out/$name.err"
  local status=$?
  echo "$name: exit $status in $((SECONDS - started)) s" | tee -a "$out/summary.txt"
  if ((status != 0)); then
    failed=1
    tail -5 "$out/$name.err"
  fi
}

nvidia-smi -L 2>&1 | tee "$out/summary.txt"
run moe-one-cpu --device cpu --nproc-per-node 1 --schedule data-parallel --micro-batches 8 --steps 4 $moe
run moe-one-cuda --device $device --nproc-per-node 1 --schedule data-parallel --micro-batches 8 --steps 4 $moe
run moe-ep2xpp2-cuda --device $device --nproc-per-node 4 --dp 2 --expert-parallel 2 --schedule 1f1b \
  --micro-batches 4 --steps 4 --trace-steps 1 --trace "$out/moe-ep2xpp2-cuda-trace.json" $moe
run moe-dualpipev-overlapped-cuda --device $device $overlap --trace "$out/moe-dualpipev-cuda-trace.json"
run moe-dualpipev-serial-cuda --device $device $overlap --no-overlap-moe-comm
run gpt-one-cuda --device $device --nproc-per-node 1 --schedule data-parallel $gpt
run gpt-1f1b-cuda --device $device --nproc-per-node 2 --schedule 1f1b $gpt
grep -h "share" "$out"/*.err | sort -u | tee -a "$out/summary.txt"

python3 - "$out" <<'EOF' | tee -a "$out/summary.txt" || failed=1
import json, os, sys
out = sys.argv[1]

def losses(name):
    path = os.path.join(out, name + ".jsonl")
    if not os.path.exists(path):
        return None
    return [json.loads(line)["loss"] for line in open(path) if line.strip()]

def compare(name, reference, bound):
    a, b = losses(name), losses(reference)
    if not a or not b or len(a) != len(b):
        print(f"{name} against {reference}: no losses to compare ({a}, {b})")
        return False
    worst = max(abs(x - y) / abs(y) for x, y in zip(a, b))
    ok = worst <= bound
    print(f"{name} against {reference}: largest relative difference {worst:.3g} (bound {bound:g}) "
          f"{'ok' if ok else 'MISSED'}; losses {[round(x, 6) for x in a]}")
    return ok

checks = [
    compare("moe-one-cuda", "moe-one-cpu", 1e-4),
    compare("moe-ep2xpp2-cuda", "moe-one-cuda", 1e-4),
    compare("moe-dualpipev-overlapped-cuda", "moe-dualpipev-serial-cuda", 0.0),
    compare("gpt-1f1b-cuda", "gpt-one-cuda", 0.0),
]
learned = losses("moe-ep2xpp2-cuda")
checks.append(bool(learned) and learned[-1] < learned[0])
print("moe-ep2xpp2-cuda learns:", checks[-1])
sys.exit(0 if all(checks) else 1)
EOF
exit "$failed"
