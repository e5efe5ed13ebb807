"""pipescope from Python: pipeline-parallel schedules, simulation, planning and calibration.

::

    import pipescope as ps
    s = ps.schedule("zb-h1", stages=4, micro_batches=8)
    s.validate(); s.to_torch_csv()
    r = ps.simulate(s, f_cost=1, b_cost=1, w_cost=1)
    r.iteration_time_s, r.bubble_fraction, r.ranks

The functions take the ``ppsim`` command lines' options as keyword arguments (``_`` for ``-``)
and raise :class:`pipescope.Error` subclasses with the tools' one-line messages (SPEC.md
section 10). ``pipescope.torch`` drives torch.distributed.pipelining with any of these schedules.
"""

from __future__ import annotations

from . import _core
from .errors import Error, ScheduleError, TraceError, UsageError
from .measured import Calibration, Comparison, Trace, TraceEvent, calibrate, compare, read_trace, read_traces
from .planning import PlanRows, plan
from .schedules import Schedule, schedule, schedule_names, schedule_traits
from .simulation import RankResult, Result, simulate

__version__: str = getattr(_core, "__version__", "0.1.0")

__all__ = [
    "Calibration", "Comparison", "Error", "PlanRows", "RankResult", "Result", "Schedule", "ScheduleError", "Trace",
    "TraceError", "TraceEvent", "UsageError", "calibrate", "compare", "plan", "read_trace", "read_traces", "schedule",
    "schedule_names", "schedule_traits", "simulate",
]
