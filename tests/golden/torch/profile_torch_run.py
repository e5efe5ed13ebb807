"""A small transformer trained with torch.distributed.pipelining over Gloo on the CPU, profiled
with torch.profiler: the per-rank Chrome traces pipescope reads as measured traces (ppview,
ppsim compare, ppsim calibrate), and the schedule CSV torch ran. Run under torchrun:

    torchrun --nproc-per-node 2 tests/golden/torch/profile_torch_run.py \
        --schedule ScheduleInterleaved1F1B --micro-batches 4 --steps 3 --out DIR

Writes DIR/rank<R>.pt.trace.json (one per rank; every profiled step, `ProfilerStep#N` spans),
DIR/schedule.csv (torch's `_dump_csv`: the lowered form for multi-stage classes, the
compute-only order for single-stage ones) and prints one JSON line per step from rank 0:
{"step": i, "iteration_time_s": t, "schedule_time_s": s, "profiled": p}: t the slowest rank's
time from a barrier to the end of its optimizer step, s to the end of its `schedule.step()` (what
the schedule's CSV describes, and what pipescope predicts), p whether torch.profiler ran. A
profiled run runs as many unprofiled steps after the profiled ones: their mean is the step's time
without the profiler's own cost (`ppsim calibrate --unprofiled-step-time`).
The model: token embedding, LAYERS pre-norm transformer blocks (nn.TransformerEncoderLayer), a
norm and a vocabulary head; the blocks are split evenly over the stages, the embedding on the
first, the head and the loss on the last.
"""
import argparse
import json
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed import pipelining
from torch.profiler import ProfilerActivity, profile

V_SHAPED = {"ScheduleZBVZeroBubble", "ScheduleDualPipeV"}
SINGLE = {"ScheduleGPipe", "Schedule1F1B"}


class Stage(nn.Module):
    def __init__(self, args, blocks, first, last):
        super().__init__()
        self.embed = nn.Embedding(args.vocab, args.hidden) if first else None
        self.blocks = nn.ModuleList(
            nn.TransformerEncoderLayer(args.hidden, args.heads, 4 * args.hidden, dropout=0.0,
                                       batch_first=True, norm_first=True)
            for _ in range(blocks))
        self.norm = nn.LayerNorm(args.hidden) if last else None
        self.head = nn.Linear(args.hidden, args.vocab) if last else None

    def forward(self, x):
        if self.embed is not None:
            x = self.embed(x)
        for block in self.blocks:
            x = block(x, is_causal=False)
        if self.head is not None:
            x = self.head(self.norm(x))
        return x


def stage_indices(name, rank, ranks, per_rank):
    if name in V_SHAPED:
        return [rank, 2 * ranks - 1 - rank]
    return [rank + i * ranks for i in range(per_rank)]


def loss_fn(logits, labels):
    return F.cross_entropy(logits.flatten(0, 1), labels.flatten())


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--schedule", default="ScheduleInterleaved1F1B")
    parser.add_argument("--stages-per-rank", type=int, default=2)
    parser.add_argument("--micro-batches", type=int, default=4)
    parser.add_argument("--micro-batch-size", type=int, default=4)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--seq", type=int, default=32)
    parser.add_argument("--vocab", type=int, default=256)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1, help="steps run before profiling starts")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--no-profile", action="store_true")
    parser.add_argument("--timing-only", action="store_true",
                        help="profile without shapes and memory events: the profiler's own cost stays out of the timings")
    parser.add_argument("--load-csv", metavar="FILE",
                        help="run this compute-only order (torch's _load_csv) in the class's runtime instead of its own")
    parser.add_argument("--no-step-marks", action="store_true",
                        help="profile without a profiler schedule, as most users do: torch marks no ProfilerStep#N")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(1234)
    rank = int(os.environ["RANK"])
    ranks = int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=ranks)
    os.makedirs(args.out, exist_ok=True)

    per_rank = 1 if args.schedule in SINGLE else (2 if args.schedule in V_SHAPED else args.stages_per_rank)
    num_stages = ranks * per_rank
    if args.layers % num_stages:
        raise SystemExit(f"--layers {args.layers} must divide into {num_stages} stages")
    blocks = args.layers // num_stages
    example = torch.zeros(args.micro_batch_size, args.seq, dtype=torch.long)
    hidden_example = torch.zeros(args.micro_batch_size, args.seq, args.hidden)
    stages, modules = [], []
    for index in stage_indices(args.schedule, rank, ranks, per_rank):
        torch.manual_seed(1000 + index)
        module = Stage(args, blocks, index == 0, index == num_stages - 1)
        modules.append(module)
        stages.append(pipelining.PipelineStage(
            module, index, num_stages, torch.device("cpu"),
            input_args=(example if index == 0 else hidden_example,)))
    schedule_class = getattr(pipelining, args.schedule)
    if args.schedule in SINGLE:
        schedule = schedule_class(stages[0], args.micro_batches, loss_fn=loss_fn)
        if rank == 0:  # the compute-only order (single-stage classes have no lowered form)
            pipelining.schedules.PipelineScheduleMulti._dump_csv(schedule, os.path.join(args.out, "schedule.csv"))
    else:
        schedule = schedule_class(stages, args.micro_batches, loss_fn=loss_fn)
        if args.load_csv:
            schedule._load_csv(args.load_csv, format="compute_only")
        if rank == 0:
            schedule._dump_csv(os.path.join(args.out, "schedule.csv"))
    parameters = [p for m in modules for p in m.parameters()]
    optimizer = torch.optim.AdamW(parameters, lr=1e-3)

    generator = torch.Generator().manual_seed(7)
    batch = args.micro_batches * args.micro_batch_size
    tokens = torch.randint(0, args.vocab, (batch, args.seq + 1), generator=generator)
    inputs, labels = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    holds_first = any(s.is_first for s in stages)
    holds_last = any(s.is_last for s in stages)

    slowest = torch.zeros(2, dtype=torch.float64)

    def timed_step(step, profiled=False):
        dist.barrier()
        start = time.perf_counter()
        optimizer.zero_grad()
        kwargs = {}
        if holds_last:
            kwargs = {"target": labels, "losses": []}
        if holds_first:
            schedule.step(inputs, **kwargs)
        else:
            schedule.step(**kwargs)
        slowest[1] = time.perf_counter() - start
        optimizer.step()
        slowest[0] = time.perf_counter() - start
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        if rank == 0:
            print(json.dumps({"step": step, "iteration_time_s": float(slowest[0]), "schedule_time_s": float(slowest[1]),
                              "profiled": profiled}), flush=True)

    for step in range(args.warmup):
        timed_step(step)
    if args.no_profile:
        for step in range(args.steps):
            timed_step(args.warmup + step)
    elif args.no_step_marks:
        # No profiler schedule: the steps are recorded, unmarked, into one trace.
        path = os.path.join(args.out, f"rank{rank}.pt.trace.json")
        with profile(activities=[ProfilerActivity.CPU], profile_memory=not args.timing_only,
                     record_shapes=not args.timing_only) as profiler:
            for step in range(args.steps):
                timed_step(args.warmup + step, profiled=True)
        profiler.export_chrome_trace(path)
        for step in range(args.steps):
            timed_step(args.warmup + args.steps + step)
    else:
        # A profiler schedule is what makes step() mark each step with a `ProfilerStep#N` span
        # (without one torch records the steps unmarked); every step is active.
        path = os.path.join(args.out, f"rank{rank}.pt.trace.json")
        with profile(activities=[ProfilerActivity.CPU], profile_memory=not args.timing_only, record_shapes=not args.timing_only,
                     schedule=torch.profiler.schedule(wait=0, warmup=0, active=args.steps, repeat=1),
                     on_trace_ready=lambda done: done.export_chrome_trace(path)) as profiler:
            for step in range(args.steps):
                timed_step(args.warmup + step, profiled=True)
                profiler.step()
        for step in range(args.steps):
            timed_step(args.warmup + args.steps + step)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
