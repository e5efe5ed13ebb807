"""Predictions: ``simulate`` (``ppsim simulate``) and its :class:`Result`."""

from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator, Optional, Union

from . import _options
from .errors import UsageError
from .schedules import PathLike, Schedule


@dataclass(frozen=True)
class RankResult:
    """One rank of a prediction (the ``ranks`` rows of ``ppsim simulate --json``)."""

    rank: int
    busy_s: float
    bubble_fraction: float
    peak_memory_bytes: int
    internal_idle_s: float = 0.0


@dataclass(frozen=True)
class Result:
    """A predicted iteration: ``ppsim simulate --json`` (SPEC.md section 6) as typed fields.

    ``iteration_time_interval_s`` is the interval the measured time is expected in, for a
    prediction from a measured profile (its samples' spread and what was estimated rather than
    measured); None when the costs were given or derived, not measured. ``estimated`` names what
    the prediction took from estimates instead of measurements.
    """

    schedule: str
    num_ranks: int
    num_stages: int
    num_micro_batches: int
    iteration_time_s: float
    bubble_fraction: float
    throughput_samples_per_s: float
    ranks: list[RankResult]
    max_mem_bytes: Optional[int] = None
    fits_memory: Optional[bool] = None
    iteration_time_interval_s: Optional[tuple[float, float]] = None
    estimated: list[str] = field(default_factory=list)
    json: dict = field(default_factory=dict, repr=False)
    _args: tuple = field(default=(), repr=False, compare=False)
    _schedule_json: Optional[str] = field(default=None, repr=False, compare=False)

    @property
    def peak_memory_bytes(self) -> list[int]:
        """Each rank's peak memory, in rank order."""
        return [r.peak_memory_bytes for r in self.ranks]

    def to_trace(self, path: PathLike) -> str:
        """Writes the predicted trace (SPEC.md section 5; ``.gz`` compresses) to ``path`` and returns it.

        The simulation runs again with ``--trace`` (it is deterministic: the same iteration)."""
        path = os.fspath(path)
        with _schedule_file(list(self._args), self._schedule_json) as args:
            _options.run("simulate", args + ["--trace", path])
        return path

    def trace(self) -> Any:
        """The predicted trace as a :class:`pipescope.Trace`."""
        from .measured import read_trace

        with tempfile.TemporaryDirectory() as folder:
            return read_trace(self.to_trace(os.path.join(folder, "predicted.json")))

    @classmethod
    def from_json(cls, data: dict, args: tuple = (), schedule_json: Optional[str] = None) -> "Result":
        interval = data.get("iteration_time_interval_s")
        return cls(
            schedule=data.get("schedule", ""),
            num_ranks=data.get("num_ranks", 0),
            num_stages=data.get("num_stages", 0),
            num_micro_batches=data.get("num_micro_batches", 0),
            iteration_time_s=data["iteration_time_s"],
            bubble_fraction=data.get("bubble_fraction", 0.0),
            throughput_samples_per_s=data.get("throughput_samples_per_s", 0.0),
            ranks=[RankResult(r["rank"], r.get("busy_s", 0.0), r.get("bubble_fraction", 0.0), r.get("peak_memory_bytes", 0),
                              r.get("internal_idle_s", 0.0)) for r in data.get("ranks", [])],
            max_mem_bytes=data.get("max_mem_bytes"),
            fits_memory=data.get("fits_memory"),
            iteration_time_interval_s=tuple(interval) if interval else None,
            estimated=list(data.get("estimated", [])),
            json=data,
            _args=args,
            _schedule_json=schedule_json,
        )


def simulate(
    schedule: Union[Schedule, str] = "1f1b",
    *,
    stages: Optional[int] = None,
    micro_batches: Optional[int] = None,
    chunks: Optional[int] = None,
    profile: Optional[object] = None,
    trace: Optional[PathLike] = None,
    **options: Any,
) -> Result:
    """Predicts one iteration of ``schedule`` (``ppsim simulate``).

    ``schedule`` is a :class:`Schedule` or a name (SPEC.md section 2; then ``stages``,
    ``micro_batches`` and ``chunks`` size it). The costs come from one of: the explicit options
    (``f_cost``, ``b_cost``, ``w_cost``, ``c_cost`` seconds, ``f_mem``... bytes; default 1, 1, 1, 0),
    ``model=`` with ``gpu=``, ``tensor_parallel=``, ``micro_batch_size=``... (first principles),
    or ``profile=`` (a profile file, or the :class:`pipescope.Calibration` that ``calibrate``
    returned). Every other option of ``ppsim simulate --help`` is a keyword argument with ``_``
    for ``-`` (``max_mem="80GB"``, ``steady_state=True``, ``recompute=True``). ``trace`` also
    writes the predicted trace to that path (``Result.to_trace`` does it later).
    """
    args, schedule_json = _schedule_args(schedule, stages, micro_batches, chunks)
    if profile is not None:
        from .measured import profile_path

        args += ["--profile", profile_path(profile)]
    args += _options.option_args(options)
    if trace is not None:
        with _schedule_file(args, schedule_json) as run_args:
            _options.run("simulate", run_args + ["--trace", os.fspath(trace)])
    with _schedule_file(args, schedule_json) as run_args:
        data, _ = _options.run_json("simulate", run_args + ["--json"])
    return Result.from_json(data, tuple(args), schedule_json)


def _schedule_args(schedule: Union[Schedule, str], stages: Optional[int], micro_batches: Optional[int],
                   chunks: Optional[int]) -> tuple[list[str], Optional[str]]:
    sizes = {"stages": stages, "micro_batches": micro_batches, "chunks": chunks}
    if isinstance(schedule, Schedule):
        for key, value in sizes.items():
            if value is not None:
                raise UsageError(f"--{key.replace('_', '-')}: the Schedule {schedule.name} fixes its own sizes (leave it out)")
        return schedule.ppsim_args()
    if not isinstance(schedule, str):
        raise UsageError(f"--schedule: a Schedule or a name, not {type(schedule).__name__}")
    return ["--schedule", schedule] + _options.option_args(sizes), None


@contextmanager
def _schedule_file(args: list[str], schedule_json: Optional[str]) -> Iterator[list[str]]:
    """``args`` with ``--schedule file:PATH`` of a temporary file holding ``schedule_json``, when given."""
    if schedule_json is None:
        yield list(args)
        return
    with tempfile.TemporaryDirectory(prefix="pipescope-") as folder:
        path = os.path.join(folder, "schedule.json")
        with open(path, "w") as out:
            out.write(schedule_json)
        yield ["--schedule", "file:" + path] + list(args)
