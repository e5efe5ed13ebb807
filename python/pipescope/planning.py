"""Planning: ``plan`` (``ppsim plan``) and its rows."""

from __future__ import annotations

from typing import Any, Optional

from . import _options


class PlanRows(list):
    """The configurations ``ppsim plan --format json`` ranks, best throughput first: a list of
    plain dicts (``schedule``, ``tensor_parallel``, ``pipeline``, ``data_parallel``, ``chunks``,
    ``micro_batch_size``, ``num_micro_batches``, ``iteration_time_s``, ``throughput_samples_per_s``,
    ``bubble_fraction``, ``peak_memory_bytes``, ...). The search's counts are attributes."""

    def __init__(self, data: dict):
        super().__init__(data.get("configurations", []))
        self.json: dict = data
        self.model: str = data.get("model", "")
        self.gpus: int = data.get("gpus", 0)
        self.global_batch: int = data.get("global_batch", 0)
        self.max_mem_bytes: Optional[int] = data.get("max_mem_bytes")
        self.considered: int = data.get("considered", 0)
        self.simulated: int = data.get("simulated", 0)
        self.fitting: int = data.get("fitting", 0)
        self.dropped_for_memory: int = data.get("dropped_for_memory", 0)
        self.refused: int = data.get("refused", 0)
        self.pruned: int = data.get("pruned", 0)
        self.refusals: list[str] = list(data.get("refusals", []))

    def to_pandas(self) -> Any:
        """The rows as a pandas DataFrame (pandas must be installed: ``pip install pipescope[pandas]``)."""
        try:
            import pandas
        except ImportError as e:
            raise ImportError("PlanRows.to_pandas needs pandas (pip install pandas)") from e
        return pandas.DataFrame(list(self))


def plan(**options: Any) -> PlanRows:
    """Ranks layouts, schedules and micro-batching of a model on a cluster (``ppsim plan``).

    Every option of ``ppsim plan --help`` is a keyword argument with ``_`` for ``-``:
    ``model="gpt-7b"``, ``gpus=64``, ``gpu="h100"``, ``max_mem="80GB"``, ``top=10`` (0: all rows),
    ``schedules=["1f1b", "zb-h1"]`` (lists for the comma-separated ones), ``profile=`` (a profile
    file or a :class:`pipescope.Calibration`: plan with measured costs). Defaults are ppsim's.
    Selective recomputation's module sets: ``recompute_modules="auto"`` (the model's ladder), one
    set as a list, or several as a list of lists (``[["moe_act"], ["moe_act", "layernorm"]]``).
    """
    profile = options.pop("profile", None)
    args = _options.option_args(options)
    if profile is not None:
        from .measured import profile_path

        args += ["--profile", profile_path(profile)]
    data, _ = _options.run_json("plan", args + ["--format", "json", "--quiet"])
    return PlanRows(data)
