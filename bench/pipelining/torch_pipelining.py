"""The same model, batch and schedule as `pprun --model mlp`, under torch.distributed.pipelining
with the Gloo backend on CPU, one thread per rank: the baseline pipescope's executor is compared
with (bench/pipelining/run.sh). Run under torchrun:

    torchrun --nproc-per-node 2 bench/pipelining/torch_pipelining.py --schedule 1f1b \
        --layers 8 --hidden 1024 --vocab 1024 --micro-batch-size 32 --micro-batches 8 --steps 12

With --nproc-per-node 1 it trains the whole model in one process with gradient accumulation over
the same micro-batches (the single-process reference). Prints one JSON line per step from rank 0:
{"step": i, "iteration_time_s": t} where t is the slowest rank's time for the step.
"""
import argparse
import json
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


class MlpBlock(nn.Module):
    """x + gelu(W x + b): pipescope's mlp hidden layer."""

    def __init__(self, hidden):
        super().__init__()
        self.fc = nn.Linear(hidden, hidden)

    def forward(self, x):
        return x + F.gelu(self.fc(x))


def build_layers(args):
    layers = [MlpBlock(args.hidden) for _ in range(args.layers)]
    layers.append(nn.Linear(args.hidden, args.vocab))
    return layers


def stage_layers(layers, stage, stages):
    """Contiguous split by parameter count, as pprun's default `--partition parameters`."""
    counts = [sum(p.numel() for p in layer.parameters()) for layer in layers]
    total = sum(counts)
    bounds, acc, start = [], 0, 0
    for s in range(stages):
        target = total * (s + 1) / stages
        end = start
        while end < len(layers) and (acc + counts[end] <= target or end == start) and len(layers) - end > stages - s - 1:
            acc += counts[end]
            end += 1
        if s == stages - 1:
            end = len(layers)
        bounds.append((start, end))
        start = end
    first, end = bounds[stage]
    return nn.Sequential(*layers[first:end])


def micro_batches(args, generator):
    teacher = torch.randn(args.hidden, args.vocab, generator=generator)
    xs, ys = [], []
    for _ in range(args.micro_batches):
        x = torch.randn(args.micro_batch_size, args.hidden, generator=generator)
        xs.append(x)
        ys.append((x @ teacher).argmax(1))
    return torch.cat(xs), torch.cat(ys)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--schedule", default="1f1b", choices=["1f1b", "gpipe"])
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--vocab", type=int, default=1024)
    parser.add_argument("--micro-batch-size", type=int, default=32)
    parser.add_argument("--micro-batches", type=int, default=8)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--lr", type=float, default=1e-3)
    args = parser.parse_args()

    torch.set_num_threads(1)
    torch.manual_seed(1234)
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    generator = torch.Generator().manual_seed(99)
    inputs, labels = micro_batches(args, generator)

    if world == 1:
        model = nn.Sequential(*build_layers(args))
        optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
        for step in range(args.steps):
            start = time.perf_counter()
            optimizer.zero_grad()
            for x, y in zip(inputs.chunk(args.micro_batches), labels.chunk(args.micro_batches)):
                (F.cross_entropy(model(x), y) / args.micro_batches).backward()
            optimizer.step()
            print(json.dumps({"step": step, "iteration_time_s": time.perf_counter() - start}), flush=True)
        return

    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    dist.init_process_group("gloo", rank=rank, world_size=world)
    module = stage_layers(build_layers(args), rank, world)
    example = torch.empty(args.micro_batch_size, args.hidden)
    stage = PipelineStage(module, rank, world, torch.device("cpu"), input_args=(example,))
    schedule_type = Schedule1F1B if args.schedule == "1f1b" else ScheduleGPipe
    schedule = schedule_type(stage, args.micro_batches, loss_fn=F.cross_entropy)
    optimizer = torch.optim.AdamW(module.parameters(), lr=args.lr, weight_decay=0.01)
    slowest = torch.zeros(1, dtype=torch.float64)
    for step in range(args.steps):
        dist.barrier()
        start = time.perf_counter()
        optimizer.zero_grad()
        if rank == 0:
            schedule.step(inputs)
        elif rank == world - 1:
            schedule.step(target=labels, losses=[])
        else:
            schedule.step()
        optimizer.step()
        slowest[0] = time.perf_counter() - start
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        if rank == 0:
            print(json.dumps({"step": step, "iteration_time_s": float(slowest[0])}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
