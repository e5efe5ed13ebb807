"""pipescope's schedules in torch.distributed.pipelining's runtime.

``PipescopeSchedule`` is a ``torch.distributed.pipelining`` schedule class (a subclass of torch's
``_PipelineScheduleRuntime``, the runtime ``PipelineScheduleMulti`` classes such as
``ScheduleInterleavedZeroBubble`` use) that runs any pipescope schedule with the user's own
``PipelineStage``\\ s: a built-in name, a :class:`pipescope.Schedule` (``zb-auto`` searched under a
memory limit from a calibrated profile included), or a schedule file::

    from pipescope.torch import PipescopeSchedule, stage_indices
    stages = [PipelineStage(build_stage(i), i, num_stages, device) for i in stage_indices("zbv", pp_size, rank)]
    schedule = PipescopeSchedule(stages, n_microbatches=8, loss_fn=loss_fn, schedule="zbv")
    schedule.step(inputs, target=labels, losses=losses)

torch is imported when this module is (it is not imported by ``import pipescope``). The
schedule runs as pipescope writes it for torch (SPEC.md section 4: torch's ``compute_comms``
form, every send and receive where pipescope placed it); ``format="compute_only"`` hands torch
the compute order alone and lets torch's own lowering add the communication.
"""

from __future__ import annotations

import csv
import io
from typing import Any, Optional, Union

import torch  # noqa: F401  (the runtime below needs it; importing it here says so early)
from torch.distributed.pipelining.schedules import _Action, _PipelineScheduleRuntime

from .errors import UsageError
from .schedules import Schedule, schedule as make_schedule

__all__ = ["PipescopeSchedule", "stage_indices", "torch_actions"]


def stage_indices(schedule: Union[Schedule, str], pp_size: int, rank: int, *, chunks: Optional[int] = None,
                  n_microbatches: Optional[int] = None) -> list[int]:
    """The stages rank ``rank`` of ``pp_size`` builds ``PipelineStage``\\ s for under ``schedule``
    (loop placement ``[r, r + p, ...]``, or V placement ``[r, 2p - 1 - r]`` for zbv and dualpipev)."""
    s = _as_schedule(schedule, pp_size, n_microbatches or 2 * pp_size, chunks)
    return s.stages_of_rank(rank)


def torch_actions(schedule: Schedule, *, compute_only: bool = False) -> dict[int, list[Any]]:
    """Each rank's program as torch ``_Action``\\ s: torch's ``compute_comms`` form (what
    ``to_torch_csv()`` writes), or its forwards and backwards alone."""
    rows = list(csv.reader(io.StringIO(schedule.to_torch_csv())))
    actions: dict[int, list[Any]] = {}
    for rank in range(schedule.num_ranks):
        row = rows[rank] if rank < len(rows) else []
        parsed = [_Action.from_str(cell) for cell in row if cell]
        actions[rank] = [a for a in parsed if a.is_compute_op] if compute_only else parsed
    return actions


class PipescopeSchedule(_PipelineScheduleRuntime):
    """A torch.distributed.pipelining schedule that runs a pipescope schedule.

    ``stages``: this rank's ``PipelineStage``\\ s (the stages ``stage_indices`` names).
    ``schedule``: a :class:`pipescope.Schedule`, a schedule name (sized from the stages: P ranks,
    ``n_microbatches``, V = stages per rank), or a schedule file. ``schedule_options`` go to
    :func:`pipescope.schedule` with a name (``profile=``, ``max_mem_micro_batches=`` for zb-auto).
    ``format``: ``"compute_comms"`` (pipescope's communication, the default) or ``"compute_only"``
    (torch's lowering). The other keyword arguments are torch's (``scale_grads``,
    ``args_chunk_spec``, ...).
    """

    def __init__(self, stages: list[Any], n_microbatches: Optional[int] = None, loss_fn: Any = None, *,
                 schedule: Union[Schedule, str], format: str = "compute_comms",
                 schedule_options: Optional[dict] = None, **torch_kwargs: Any):
        if not stages:
            raise UsageError("PipescopeSchedule: give this rank's PipelineStages")
        if format not in ("compute_comms", "compute_only"):
            raise UsageError(f"format: '{format}' is neither compute_comms nor compute_only")
        pp_size = stages[0].group_size
        num_stages = stages[0].num_stages
        if num_stages % pp_size:
            raise UsageError(f"{num_stages} stages do not divide over {pp_size} pipeline ranks")
        s = _as_schedule(schedule, pp_size, n_microbatches, num_stages // pp_size, **(schedule_options or {}))
        _check_fits(s, stages, pp_size, num_stages, n_microbatches)
        super().__init__(stages, s.num_micro_batches, loss_fn=loss_fn, **torch_kwargs)
        self.pipescope_schedule = s
        self.pipeline_order = torch_actions(s, compute_only=True)
        if format == "compute_only":
            self._prepare_schedule_with_comms(self.pipeline_order)
        else:
            self._prepare_schedule_with_comms(torch_actions(s), format="compute_comms")


def _as_schedule(schedule: Union[Schedule, str], pp_size: int, n_microbatches: Optional[int], chunks: Optional[int],
                 **options: Any) -> Schedule:
    if isinstance(schedule, Schedule):
        return schedule
    if n_microbatches is None and not (schedule.startswith("file:") or schedule.endswith((".csv", ".json"))):
        raise UsageError(f"PipescopeSchedule: schedule {schedule} needs n_microbatches")
    file_like = schedule.startswith("file:") or schedule.endswith((".csv", ".json"))
    if file_like:
        return make_schedule(schedule)
    # A name's own stage count: V-placed schedules always hold 2 stages per rank; looped ones
    # take V from the stages given.
    return make_schedule(schedule, pp_size, n_microbatches, chunks=chunks if chunks and chunks > 1 else None, **options)


def _check_fits(s: Schedule, stages: list[Any], pp_size: int, num_stages: int, n_microbatches: Optional[int]) -> None:
    if s.num_ranks != pp_size:
        raise UsageError(f"schedule {s.name} is for {s.num_ranks} pipeline ranks, the stages' group has {pp_size}")
    if s.num_stages != num_stages:
        raise UsageError(f"schedule {s.name} has {s.num_stages} stages, the PipelineStages say {num_stages}")
    if n_microbatches is not None and s.num_micro_batches != n_microbatches:
        raise UsageError(f"schedule {s.name} runs {s.num_micro_batches} micro-batches, n_microbatches is {n_microbatches}")
    rank = stages[0].group_rank
    held = sorted(stage.stage_index for stage in stages)
    if held != sorted(s.stages_of_rank(rank)):
        raise UsageError(f"rank {rank} holds stages {held}, but schedule {s.name} places {s.stages_of_rank(rank)} there "
                         f"(pipescope.torch.stage_indices names them)")
