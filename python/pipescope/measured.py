"""Measured runs: ``read_trace``, ``compare`` (``ppsim compare``) and ``calibrate`` (``ppsim calibrate``).

A measured run is a pipescope trace file (``pprun --trace``) or the per-rank torch.profiler
files of one torch.distributed.pipelining run (several files, or their folder).
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence, Union

from . import _core, _options
from .errors import UsageError
from .schedules import PathLike

Trace = _core.Trace
TraceEvent = _core.TraceEvent
Paths = Union[PathLike, Sequence[PathLike]]


def _paths(paths: Paths) -> list[str]:
    if isinstance(paths, (str, os.PathLike)):
        return [os.fspath(paths)]
    return [os.fspath(p) for p in paths]


def read_traces(paths: Paths, *, step: Optional[int] = None) -> tuple[list[tuple[str, "_core.Trace"]], list[str]]:
    """Every trace ``paths`` name (a folder or the files of one torch run are one trace), with
    their names, and the note lines of what a torch run lacks."""
    read = _core.read_traces(_paths(paths), step, False)
    return list(read.traces), list(read.notes)


def read_trace(paths: Paths, *, step: Optional[int] = None) -> "_core.Trace":
    """One trace: a pipescope/Chrome trace file, or one torch.profiler run (its files or its folder).
    ``step`` picks the torch run's ``ProfilerStep#N`` (default: the last)."""
    traces, _ = read_traces(paths, step=step)
    if len(traces) != 1:
        raise UsageError(f"read_trace: {len(traces)} traces in {', '.join(_paths(paths))}: give one run (read_traces reads several)")
    return traces[0][1]


@dataclass(frozen=True)
class Comparison:
    """``ppsim compare --json`` (SPEC.md section 7): errors are signed fractions of the measured value."""

    iteration_time_predicted_s: float
    iteration_time_measured_s: float
    iteration_time_error: float
    op_duration_mape: Optional[float]
    bubble_fraction_predicted: float
    bubble_fraction_measured: float
    peak_memory_error: list
    json: dict = field(default_factory=dict, repr=False)
    #: sum |predicted - measured| / sum measured over the matched operations (long ones weigh more)
    op_duration_weighted_error: Optional[float] = None

    @classmethod
    def from_json(cls, data: dict) -> "Comparison":
        return cls(data["iteration_time_predicted_s"], data["iteration_time_measured_s"], data["iteration_time_error"],
                   data.get("op_duration_mape"), data.get("bubble_fraction_predicted", 0.0),
                   data.get("bubble_fraction_measured", 0.0), list(data.get("peak_memory_error", [])), data,
                   data.get("op_duration_weighted_error"))


def compare(predicted: Any, measured: Paths, *, step: Optional[int] = None, **options: Any) -> Comparison:
    """How far a prediction is from a measured run (``ppsim compare PREDICTED MEASURED... --json``).

    ``predicted`` is a trace file or a :class:`pipescope.Result`; ``measured`` a trace file or a
    torch.profiler run's files or folder; ``step`` its ``ProfilerStep#N``."""
    from .simulation import Result

    with tempfile.TemporaryDirectory(prefix="pipescope-") as folder:
        if isinstance(predicted, Result):
            predicted = predicted.to_trace(os.path.join(folder, "predicted.json"))
        args = [os.fspath(predicted)] + _paths(measured) + _options.option_args(dict(options, step=step)) + ["--json"]
        data, _ = _options.run_json("compare", args)
    return Comparison.from_json(data)


@dataclass(frozen=True)
class Calibration:
    """What ``calibrate`` learnt: the profile (``pipescope.profile/1`` as a dict), the file it was
    written to (None when none was asked for), the report ``ppsim calibrate`` prints, and its notes."""

    profile: dict
    path: Optional[str]
    report: str
    notes: list[str]

    @property
    def estimated(self) -> list[str]:
        """What the profile estimated instead of measuring, one line each (the split of full backwards)."""
        if self.profile.get("backward_split") != "estimated":
            return []
        e = self.profile.get("backward_split_estimate", {})
        stages = ", ".join(str(s) for s in e.get("stages", []))
        return [f"backward split of stage(s) {stages}: input share {e.get('input_share', 0):.2f} +- "
                f"{e.get('input_share_uncertainty', 0):.2f}, I + W over B {e.get('overhead', 0):.2f} +- "
                f"{e.get('overhead_uncertainty', 0):.2f} ({e.get('basis', '')})"]

    @property
    def step_speed_spread(self) -> Optional[float]:
        """The relative standard deviation of the calibration's step speeds (None: one step)."""
        spread = self.profile.get("step_speed_spread")
        return spread["relative_sd"] if spread else None


def calibrate(measured: Paths, output: Optional[PathLike] = None, **options: Any) -> Calibration:
    """Learns per-stage costs from measured runs (``ppsim calibrate MEASURED... -o PROFILE``).

    ``measured``: trace files of pprun, or torch.profiler runs (each folder a run). ``output``:
    where to write the profile (default: nowhere; ``simulate(profile=calibration)`` takes the
    returned object). Every option of ``ppsim calibrate --help`` is a keyword argument:
    ``statistic="median"``, ``step=3``, ``unprofiled_step_time=[0.41, 0.39]``.
    """
    with tempfile.TemporaryDirectory(prefix="pipescope-") as folder:
        path = os.fspath(output) if output is not None else os.path.join(folder, "profile.json")
        out = _options.run("calibrate", _paths(measured) + ["-o", path] + _options.option_args(options))
        with open(path) as f:
            profile = json.load(f)
    report = out.out.removesuffix(f"wrote {path}\n")
    return Calibration(profile, os.fspath(output) if output is not None else None, report, _options.notes_of(out.err))


# Where profiles held only in memory are written for ppsim to read: one folder for the whole
# interpreter, removed when it exits (TemporaryDirectory's finalizer), not one left per call.
_written_profiles: Optional[tempfile.TemporaryDirectory] = None


def _written_profiles_folder() -> str:
    global _written_profiles
    if _written_profiles is None:
        _written_profiles = tempfile.TemporaryDirectory(prefix="pipescope-profiles-")
    return _written_profiles.name


def profile_path(profile: Any) -> str:
    """A profile argument as a file ppsim reads: a path, or a Calibration (written out when it has no file)."""
    if isinstance(profile, Calibration):
        if profile.path is not None:
            return profile.path
        handle, path = tempfile.mkstemp(prefix="profile-", suffix=".json", dir=_written_profiles_folder())
        with os.fdopen(handle, "w") as f:
            json.dump(profile.profile, f)
        object.__setattr__(profile, "path", path)  # written once, reused
        return path
    if isinstance(profile, dict):
        return profile_path(Calibration(profile, None, "", []))
    return os.fspath(profile)
