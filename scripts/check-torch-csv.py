"""Loads a schedule CSV that `ppsim schedule --format torch-csv` wrote with torch's own
`_load_csv(..., format="compute_comms")` into a torch schedule class and runs one training step
of a tiny model with it, on the CPU over Gloo. Run under torchrun (scripts/check-torch-csv.sh
does that for several schedules):

    torchrun --nproc-per-node 2 scripts/check-torch-csv.py --csv s.csv --class ScheduleInterleaved1F1B \
        --stages-per-rank 2 --micro-batches 8 [--v-placement]

Rank 0 prints one line: the class, the file, the actions torch loaded per rank, and the loss.
Any failure (torch refusing the file, a hang caught by the Gloo timeout, a wrong gradient) exits
non-zero. The gradients are checked against the same model run without pipelining.
"""
import argparse
import datetime
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed import pipelining

HIDDEN = 16


def stage_indices(rank, ranks, per_rank, v_placement):
    if v_placement:
        return [rank, 2 * ranks - 1 - rank]
    return [rank + i * ranks for i in range(per_rank)]


def make_stage_module(index):
    torch.manual_seed(100 + index)
    return nn.Sequential(nn.Linear(HIDDEN, HIDDEN), nn.Tanh())


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--csv", required=True)
    parser.add_argument("--class", dest="class_name", required=True)
    parser.add_argument("--stages-per-rank", type=int, default=1)
    parser.add_argument("--micro-batches", type=int, required=True)
    parser.add_argument("--v-placement", action="store_true")
    args = parser.parse_args()

    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    ranks = int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=ranks, timeout=datetime.timedelta(seconds=60))
    per_rank = 2 if args.v_placement else args.stages_per_rank
    num_stages = ranks * per_rank

    micro_batch_size = 2
    batch = args.micro_batches * micro_batch_size
    generator = torch.Generator().manual_seed(7)
    inputs = torch.randn(batch, HIDDEN, generator=generator)
    target = torch.randn(batch, HIDDEN, generator=generator)
    example = torch.zeros(micro_batch_size, HIDDEN)

    indices = stage_indices(rank, ranks, per_rank, args.v_placement)
    modules = {index: make_stage_module(index) for index in indices}
    stages = [pipelining.PipelineStage(modules[index], index, num_stages, torch.device("cpu"), input_args=(example,))
              for index in indices]

    def loss_fn(output, labels):
        return F.mse_loss(output, labels, reduction="sum")

    schedule_class = getattr(pipelining, args.class_name)
    schedule = schedule_class(stages, args.micro_batches, loss_fn=loss_fn, scale_grads=False)  # losses are summed
    # What this check is about: torch's own reader takes pipescope's file as it is.
    schedule._load_csv(args.csv, format="compute_comms")
    loaded = [len(schedule.pipeline_order_with_comms[r]) for r in sorted(schedule.pipeline_order_with_comms)]

    kwargs = {}
    holds_last = any(s.is_last for s in stages)
    if holds_last:
        losses = []
        kwargs = {"target": target, "losses": losses}
    if any(s.is_first for s in stages):
        schedule.step(inputs, **kwargs)
    else:
        schedule.step(**kwargs)

    # The same model without pipelining, on every rank: each stage's gradients must agree.
    reference = nn.Sequential(*[make_stage_module(i) for i in range(num_stages)])
    loss = loss_fn(reference(inputs), target)
    loss.backward()
    for index in indices:
        for got, want in zip(modules[index].parameters(), reference[index].parameters()):
            if got.grad is None or not torch.allclose(got.grad, want.grad, rtol=1e-4, atol=1e-5):
                print(f"rank {rank}: stage {index}: gradients differ from the unpipelined model", file=sys.stderr)
                sys.exit(1)

    total = torch.tensor([sum(float(l) for l in losses) if holds_last else 0.0])
    dist.all_reduce(total)
    if rank == 0:
        print(f"{args.class_name} {os.path.basename(args.csv)}: loaded {loaded} actions per rank, one step run, "
              f"loss {total.item():.4f} (unpipelined {loss.item():.4f}), gradients of every stage match", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
