"""Schedules: built by name (SPEC.md section 2), read from a file, validated, written back.

A :class:`Schedule` holds every rank's program: a list of steps, each a list of actions in
torch's notation (``"0F1"``, ``"1SEND_F4"``, ``"2I3"``), as torch.distributed.pipelining writes
them. ``to_torch_csv()`` is what torch's ``_load_csv`` reads; ``to_json()`` is pipescope's own
format (``pipescope.schedule/1``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional, Union

from . import _core
from .errors import UsageError

PathLike = Union[str, "os.PathLike[str]"]


class Schedule:
    """One schedule: every rank's program, in pipescope's instruction form."""

    def __init__(self, core: "_core.Schedule", *, source_args: Optional[list[str]] = None, path: Optional[str] = None):
        self._core = core
        # How ppsim names this schedule again: its name and sizes (a built-in generator), or
        # file:PATH (a file that was read as it is); None: it is written out when simulated.
        self._source_args = source_args
        self._path = path

    @property
    def name(self) -> str:
        """The schedule's name (``"1f1b"``, or the file it came from)."""
        return self._core.name

    @property
    def num_ranks(self) -> int:
        return self._core.num_ranks

    @property
    def num_stages(self) -> int:
        return self._core.num_stages

    @property
    def num_micro_batches(self) -> int:
        return self._core.num_micro_batches

    @property
    def stage_to_rank(self) -> list[int]:
        """The rank that holds each stage."""
        return list(self._core.stage_to_rank)

    @property
    def communication(self) -> str:
        """``"torch"`` (a receive is posted, the compute needing it waits: SPEC section 4) or ``"pipescope"``."""
        return self._core.communication

    def stages_of_rank(self, rank: int) -> list[int]:
        return [stage for stage, r in enumerate(self.stage_to_rank) if r == rank]

    def program(self, rank: int) -> list[list[str]]:
        """Rank ``rank``'s program: its steps, each a list of actions (``"0F1"``)."""
        return self._core.program(rank)

    def actions(self, rank: int) -> list[str]:
        """Rank ``rank``'s actions in order, steps flattened."""
        return [action for step in self._core.program(rank) for action in step]

    @property
    def programs(self) -> list[list[list[str]]]:
        """Every rank's program (``programs[rank][step]`` is a list of actions)."""
        return [self._core.program(rank) for rank in range(self.num_ranks)]

    def compute_actions(self, rank: int) -> list[str]:
        """Rank ``rank``'s forwards and backwards (F, B, I, W) in order: what torch's compute-only CSV holds."""
        return [a for a in self.actions(rank) if _is_compute_action(a)]

    def instruction_count(self) -> int:
        return self._core.instruction_count()

    def validate(self, *, blocking_sends: bool = False) -> None:
        """Raises ScheduleError naming rank, step and instruction of the first problem (``ppsim validate``)."""
        self._core.validate(blocking_sends)

    def to_json(self) -> str:
        """pipescope's schedule file (``pipescope.schedule/1``)."""
        return self._core.to_json()

    def to_torch_csv(self) -> str:
        """torch.distributed.pipelining's CSV, as torch 2.15's ``_load_csv(path, format="compute_comms")`` reads it."""
        return self._core.to_torch_csv()

    def to_text(self) -> str:
        """The step x rank grid ``ppsim schedule`` prints."""
        return self._core.to_text()

    def save(self, path: PathLike, format: Optional[str] = None) -> Path:
        """Writes the schedule: ``json``, ``torch-csv`` or ``text`` (default: from the suffix, ``.csv`` is torch's CSV)."""
        path = Path(path)
        format = format or ("torch-csv" if path.suffix == ".csv" else "text" if path.suffix == ".txt" else "json")
        writers = {"json": self.to_json, "torch-csv": self.to_torch_csv, "text": self.to_text}
        if format not in writers:
            raise UsageError(f"--format: unknown format '{format}' (json, torch-csv, text)")
        path.write_text(writers[format]())
        return path

    @classmethod
    def from_json(cls, text: str, source: str = "<json>") -> "Schedule":
        return cls(_core.parse_schedule_json(text, source))

    @classmethod
    def from_torch_csv(cls, text: str, source: str = "<csv>") -> "Schedule":
        return cls(_core.parse_torch_csv(text, source))

    def ppsim_args(self) -> tuple[list[str], Optional[str]]:
        """``--schedule ...`` naming this schedule for a ppsim command, and the JSON text to write
        into a file for it when no name or file reproduces it (None otherwise)."""
        if self._source_args is not None:
            return list(self._source_args), None
        if self._path is not None:
            return ["--schedule", "file:" + self._path], None
        return [], self.to_json()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Schedule) and self._core == other._core

    def __repr__(self) -> str:
        return (f"Schedule({self.name!r}, ranks={self.num_ranks}, stages={self.num_stages}, "
                f"micro_batches={self.num_micro_batches})")

    def __str__(self) -> str:
        return self.to_text()


def _is_compute_action(action: str) -> bool:
    body = action.lstrip("0123456789")
    kind = body.rstrip("0123456789")
    return kind in ("F", "B", "I", "W") or kind == "OVERLAP_F_B" or action.startswith("(")


def schedule(
    name: str,
    stages: Optional[int] = None,
    micro_batches: Optional[int] = None,
    *,
    chunks: Optional[int] = None,
    profile: Optional[object] = None,
    f_cost: Optional[float] = None,
    b_cost: Optional[float] = None,
    w_cost: Optional[float] = None,
    c_cost: Optional[float] = None,
    f_mem: Union[int, str, None] = None,
    b_mem: Union[int, str, None] = None,
    w_mem: Union[int, str, None] = None,
    max_mem: Union[int, str, None] = None,
    max_mem_micro_batches: Optional[int] = None,
) -> Schedule:
    """The schedule ``name`` (``ppsim schedule NAME``) for ``stages`` pipeline ranks and ``micro_batches``.

    ``name`` is any name of SPEC.md section 2 (``"1f1b"``, ``"zbv"``, ``"deepspeed-train@0.14"``),
    ``"file:PATH"`` or the path of a schedule file (pipescope JSON or torch CSV); a file fixes its
    own sizes, and ``stages``, ``micro_batches`` or ``chunks`` that contradict it are refused.
    ``chunks`` is V, stages per rank (looped schedules). Defaults as ``ppsim``'s: 4 ranks, 8 micro-batches.

    ``zb-auto`` searches under a memory limit with costs: ``profile`` (a calibrated profile: a
    path or a :class:`pipescope.Calibration`), or the explicit ``f_cost``/``b_cost``/``w_cost``/
    ``c_cost`` and ``f_mem``/``b_mem``/``w_mem`` (bytes, ``"2GB"`` allowed); the limit is
    ``max_mem`` bytes per rank and/or ``max_mem_micro_batches`` (default: 2p-1 micro-batches of
    activations). These options are zb-auto's only.
    """
    costs = dict(f_cost=f_cost, b_cost=b_cost, w_cost=w_cost, c_cost=c_cost, f_mem=f_mem, b_mem=b_mem, w_mem=w_mem)
    given_costs = {k: v for k, v in costs.items() if v is not None}
    zb_auto_only = dict(given_costs, profile=profile, max_mem=max_mem, max_mem_micro_batches=max_mem_micro_batches)
    path = _file_of(name)
    if path is not None:
        return _read_file(path, stages, micro_batches, chunks)
    # A name neither knows gets its error from make_schedule below.
    cost_dependent = bool((schedule_traits(name) or {}).get("cost_dependent"))
    if not cost_dependent:
        for key, value in zb_auto_only.items():
            if value is not None:
                raise UsageError(f"--{key.replace('_', '-')} is zb-auto's: not with schedule {name}")
    stages = 4 if stages is None else stages
    micro_batches = 8 if micro_batches is None else micro_batches
    source_args = ["--schedule", name, "--stages", str(stages), "--micro-batches", str(micro_batches)]
    if chunks is not None:
        source_args += ["--chunks", str(chunks)]
    if cost_dependent:
        _set_costs(name, profile, given_costs, max_mem, max_mem_micro_batches)
        source_args = None  # its order depends on the costs: simulated from its file
    return Schedule(_core.make_schedule(name, stages, micro_batches, chunks), source_args=source_args)


def _file_of(name: str) -> Optional[str]:
    if name.startswith("file:"):
        return name[5:]
    if name.endswith((".json", ".csv")) or os.sep in name:
        return name
    return None


def _read_file(path: str, stages: Optional[int], micro_batches: Optional[int], chunks: Optional[int]) -> Schedule:
    core = _core.read_schedule_file(path)

    def refuse(option: str, value: int, file_has: str) -> None:
        raise UsageError(f"--{option} {value} contradicts the schedule file {path}, which has {file_has} (leave --{option} out)")

    if stages is not None and stages != core.num_ranks:
        refuse("stages", stages, f"{core.num_ranks} ranks")
    if micro_batches is not None and micro_batches != core.num_micro_batches:
        refuse("micro-batches", micro_batches, f"{core.num_micro_batches} micro-batches")
    if chunks is not None and chunks * core.num_ranks != core.num_stages:
        refuse("chunks", chunks, f"{core.num_stages} stages on {core.num_ranks} ranks")
    return Schedule(core, path=os.path.abspath(path))


def _set_costs(name: str, profile: Optional[object], costs: dict, max_mem: Union[int, str, None],
               max_mem_micro_batches: Optional[int]) -> None:
    limit = _core.parse_bytes(str(max_mem if max_mem is not None else 0), "--max-mem", False)
    per_micro_batch = 0 if max_mem_micro_batches is None else max_mem_micro_batches
    if max_mem_micro_batches is not None and max_mem_micro_batches < 1:
        raise UsageError(f"--max-mem-micro-batches must be at least 1, got {max_mem_micro_batches}")
    if profile is not None:
        if costs:
            raise UsageError(f"--{next(iter(costs)).replace('_', '-')} cannot be combined with --profile")
        from .measured import profile_path  # a Calibration or a path

        _core.use_profile_costs(name, profile_path(profile), limit, per_micro_batch)
        return
    value = {"f_cost": 1.0, "b_cost": 1.0, "w_cost": 1.0, "c_cost": 0.0, "f_mem": "2", "b_mem": "-1", "w_mem": "-1"}
    value.update(costs)
    for key in ("f_cost", "b_cost", "w_cost", "c_cost"):
        number = float(value[key])
        if not (number >= 0 and number != float("inf")):
            raise UsageError(f"--{key.replace('_', '-')}: must be a finite number >= 0, not {number:g}")
    memory = [_core.parse_bytes(str(value[key]), "--" + key.replace("_", "-"), True) for key in ("f_mem", "b_mem", "w_mem")]
    _core.use_uniform_costs(name, float(value["f_cost"]), float(value["b_cost"]), float(value["w_cost"]),
                            float(value["c_cost"]), *memory, limit, per_micro_batch)


def schedule_names() -> list[str]:
    """Every schedule name ``schedule()`` knows (SPEC.md section 2; ``file:PATH`` besides)."""
    return list(_core.schedule_names())


def schedule_traits(name: str) -> Optional[dict]:
    """What the schedule ``name`` is, or None for a name pipescope does not know: ``placement``
    (``"loop"`` or ``"v"``), ``chunks`` (the stages per rank it runs; empty: any), ``split_backward``
    (separate input and weight gradients), ``cost_dependent`` (its order is searched from costs:
    ``profile`` or the ``*_cost`` options apply), ``memory_limited`` (``max_mem`` applies) and
    ``takes_microbatch_group_size``."""
    return _core.schedule_traits(name)
