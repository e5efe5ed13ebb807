"""Trains a small model over 2 ranks (Gloo, CPU) with pipescope.torch.PipescopeSchedule, once per
schedule family, and checks each step against the same model without pipelining: the loss of
every step and every stage's gradients after the first step. Run under torchrun (run.sh does):

    torchrun --nproc-per-node 2 bench/torch-adapter/train_with_adapter.py [--steps 3] [--micro-batches 8]

Rank 0 prints one line per schedule (its loss per step, and that the gradients matched) and a
closing "N passed, N failed" line; any mismatch exits non-zero.
"""
import argparse
import datetime
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.pipelining import PipelineStage

import pipescope as ps
from pipescope.torch import PipescopeSchedule, stage_indices

HIDDEN = 16
MICRO_BATCH_SIZE = 2
# name, stages per rank, extra arguments of pipescope.schedule
FAMILIES = [
    ("gpipe", 1, {}),
    ("1f1b", 1, {}),
    ("interleaved-1f1b", 2, {}),
    ("looped-bfs", 2, {}),
    ("zb-h1", 1, {}),
    ("zb-h2", 1, {}),
    ("zbv", 2, {}),
    ("dualpipev", 2, {}),
    ("zb-auto", 1, {"f_cost": 1, "b_cost": 1, "w_cost": 1, "max_mem_micro_batches": 2}),
    ("zb-auto", 2, {"f_cost": 1, "b_cost": 1, "w_cost": 1}),
    # zb-auto searched with the costs of a calibrated torch run (4 stages, 2 per rank) under a
    # limit of 3 micro-batches of activations per rank.
    ("zb-auto", 2, {"profile": "calibrated", "max_mem_micro_batches": 3}),
]
GOLDEN_RUN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "golden", "torch", "traces",
                          "interleaved-1f1b")


def make_stage_module(index):
    torch.manual_seed(100 + index)
    return nn.Sequential(nn.Linear(HIDDEN, HIDDEN), nn.Tanh())


def loss_fn(output, labels):
    return F.mse_loss(output, labels, reduction="sum")


def batches(steps, micro_batches):
    generator = torch.Generator().manual_seed(7)
    batch = micro_batches * MICRO_BATCH_SIZE
    return [(torch.randn(batch, HIDDEN, generator=generator), torch.randn(batch, HIDDEN, generator=generator))
            for _ in range(steps)]


def reference_run(num_stages, data, lr):
    """The same model and optimizer without pipelining: the loss of each step, and the first step's gradients."""
    model = nn.Sequential(*[make_stage_module(i) for i in range(num_stages)])
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    losses, first_grads = [], None
    for inputs, target in data:
        optimizer.zero_grad()
        loss = loss_fn(model(inputs), target)
        loss.backward()
        if first_grads is None:
            first_grads = [[p.grad.clone() for p in stage.parameters()] for stage in model]
        optimizer.step()
        losses.append(loss.item())
    return losses, first_grads


def run_family(name, per_rank, options, args, rank, ranks):
    num_stages = ranks * per_rank
    chunks = per_rank if name not in ("zbv", "dualpipev") else None
    if name == "zb-auto" and per_rank == 2:
        chunks = 2
    if options.get("profile") == "calibrated":
        options = dict(options, profile=ps.calibrate(GOLDEN_RUN))
    schedule = ps.schedule(name, stages=ranks, micro_batches=args.micro_batches, chunks=chunks, **options)
    indices = stage_indices(schedule, ranks, rank)
    modules = {i: make_stage_module(i) for i in indices}
    example = torch.zeros(MICRO_BATCH_SIZE, HIDDEN)
    stages = [PipelineStage(modules[i], i, num_stages, torch.device("cpu"), input_args=(example,)) for i in indices]
    runner = PipescopeSchedule(stages, args.micro_batches, loss_fn=loss_fn, schedule=schedule, scale_grads=False)
    params = [p for m in modules.values() for p in m.parameters()]
    optimizer = torch.optim.SGD(params, lr=args.lr)
    data = batches(args.steps, args.micro_batches)
    want_losses, want_grads = reference_run(num_stages, data, args.lr)
    holds_last = any(s.is_last for s in stages)
    got_losses = []
    for step, (inputs, target) in enumerate(data):
        optimizer.zero_grad()
        losses = [] if holds_last else None
        kwargs = {"target": target, "losses": losses} if holds_last else {}
        if any(s.is_first for s in stages):
            runner.step(inputs, **kwargs)
        else:
            runner.step(**kwargs)
        if step == 0:
            for i in indices:
                for got, want in zip(modules[i].parameters(), want_grads[i]):
                    if got.grad is None or not torch.allclose(got.grad, want, rtol=1e-4, atol=1e-5):
                        return f"rank {rank}: stage {i}: gradients differ from the unpipelined model"
        optimizer.step()
        total = torch.tensor([sum(float(l.detach()) for l in losses) if holds_last else 0.0])
        dist.all_reduce(total)
        got_losses.append(total.item())
    for step, (got, want) in enumerate(zip(got_losses, want_losses)):
        if abs(got - want) > 1e-4 * max(1.0, abs(want)):
            return f"step {step}: loss {got:.6f}, unpipelined {want:.6f}"
    label = f"{name} (V={per_rank}{', profile' if 'profile' in options else ''})" if name == "zb-auto" else name
    return (f"{label:<26} {schedule.num_stages} stages on {ranks} ranks, m={args.micro_batches}: losses "
            f"{' '.join(f'{l:.4f}' for l in got_losses)} = unpipelined, first step's gradients match")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--micro-batches", type=int, default=8)
    parser.add_argument("--lr", type=float, default=0.01)
    args = parser.parse_args()
    torch.set_num_threads(1)
    rank, ranks = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=ranks, timeout=datetime.timedelta(seconds=120))
    passed = failed = 0
    for name, per_rank, options in FAMILIES:
        try:
            line = run_family(name, per_rank, options, args, rank, ranks)
            ok = not (line.startswith("rank ") or line.startswith("step "))
        except Exception as e:  # noqa: BLE001: one family's failure is reported, the others still run
            line, ok = f"{name}: {type(e).__name__}: {e}", False
        verdict = torch.tensor([0.0 if ok else 1.0])
        dist.all_reduce(verdict)
        if verdict.item() == 0:
            passed += 1
        else:
            failed += 1
        if rank == 0 or not ok:
            print(("" if ok else "FAILED ") + line, flush=True, file=sys.stdout if ok else sys.stderr)
        dist.barrier()
    if rank == 0:
        print(f"torch-adapter: {passed} passed, {failed} failed", flush=True)
    dist.destroy_process_group()
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
