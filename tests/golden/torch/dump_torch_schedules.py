"""Writes the schedule CSVs of torch.distributed.pipelining's own schedule classes, as torch
itself dumps them, for pipescope's tests (tests/golden/torch/schedules/).

    scripts/setup-torch-venv.sh                     # PyPI torch 2.15.0 in build/venv-torch
    build/venv-torch/bin/python tests/golden/torch/dump_torch_schedules.py [OUT_DIR]

Each class is built for every (ranks, micro-batches) below on rank 0 (the order torch computes is
the whole pipeline's, whatever the rank) and dumped by its own `_dump_csv`:
  CLASS-pP-mM.csv          the compute-only form (`pipeline_order`; single-stage classes are
                           written by the multi-stage classes' `_dump_csv`, which reads only it)
  CLASS-pP-mM.lowered.csv  the form torch's runtime executes, with sends, receives and waits
                           (`pipeline_order_with_comms`; multi-stage classes only)
No process group is needed: a schedule's constructor reads only its stages' indices and sizes.
"""
import os
import sys

import torch
import torch.distributed.pipelining.schedules as schedules


class StageShape:
    """What a schedule constructor reads of a PipelineStage: its place in the pipeline."""

    def __init__(self, index, num_stages, ranks, rank):
        self.stage_index = index
        self.num_stages = num_stages
        self.group_size = ranks
        self.group_rank = rank
        self.is_first = index == 0
        self.is_last = index == num_stages - 1
        self.stage_index_to_group_rank = None
        self.has_backward = True
        self.submod = torch.nn.Identity()


# (class, stages per rank, V placement)
CLASSES = [
    (schedules.ScheduleGPipe, 1, False),
    (schedules.Schedule1F1B, 1, False),
    (schedules.ScheduleInterleaved1F1B, 2, False),
    (schedules.ScheduleLoopedBFS, 2, False),
    (schedules.ScheduleInterleavedZeroBubble, 2, False),
    (schedules.ScheduleZBVZeroBubble, 2, True),
    (schedules.ScheduleDualPipeV, 2, True),
]
SIZES = [(2, 4), (2, 8), (4, 8), (4, 16), (8, 16)]


def stages_of_rank0(ranks, per_rank, v_shape):
    num_stages = ranks * per_rank
    if v_shape:
        indices = [0, num_stages - 1]
    else:
        indices = [i * ranks for i in range(per_rank)]
    return [StageShape(i, num_stages, ranks, 0) for i in indices]


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "schedules")
    os.makedirs(out, exist_ok=True)
    for cls, per_rank, v_shape in CLASSES:
        for ranks, micro_batches in SIZES:
            if micro_batches < ranks * per_rank and cls is schedules.ScheduleDualPipeV:
                continue
            stages = stages_of_rank0(ranks, per_rank, v_shape)
            base = os.path.join(out, f"{cls.__name__}-p{ranks}-m{micro_batches}")
            if per_rank == 1:
                schedule = cls(stages[0], micro_batches)
                # Single-stage classes keep the same `pipeline_order` but no `_dump_csv` of their
                # own: the multi-stage classes' compute-only writer is the one that serves both.
                schedules.PipelineScheduleMulti._dump_csv(schedule, base + ".csv")
            else:
                schedule = cls(stages, micro_batches)
                schedule._dump_csv(base + ".csv", "compute_only")
                schedule._dump_csv(base + ".lowered.csv", "compute_comms")
    print(f"torch {torch.__version__}: wrote {len(os.listdir(out))} files to {out}")


if __name__ == "__main__":
    main()
