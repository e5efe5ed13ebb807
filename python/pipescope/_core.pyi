"""Types of pipescope's C++ extension module (python/src/). Use the pipescope package instead."""

from typing import Any, Optional

__version__: str

class Schedule:
    name: str
    num_ranks: int
    num_stages: int
    num_micro_batches: int
    stage_to_rank: list[int]
    communication: str
    is_training: bool
    def instruction_count(self) -> int: ...
    def program(self, rank: int) -> list[list[str]]: ...
    def validate(self, blocking_sends: bool = False) -> None: ...
    def to_json(self) -> str: ...
    def to_torch_csv(self) -> str: ...
    def to_text(self) -> str: ...
    def __eq__(self, other: object) -> bool: ...

def make_schedule(name: str, stages: int, micro_batches: int, chunks: Optional[int] = None) -> Schedule: ...
def parse_schedule_json(text: str, source: str) -> Schedule: ...
def parse_torch_csv(text: str, source: str) -> Schedule: ...
def read_schedule_file(path: str) -> Schedule: ...
def schedule_names() -> list[str]: ...
def schedule_traits(name: str) -> Optional[dict[str, Any]]: ...
def use_uniform_costs(name: str, f_s: float, b_s: float, w_s: float, c_s: float, f_bytes: int, b_bytes: int,
                      w_bytes: int, max_mem_bytes: int, max_mem_micro_batches: int) -> None: ...
def use_profile_costs(name: str, profile: str, max_mem_bytes: int, max_mem_micro_batches: int) -> None: ...
def parse_bytes(text: str, option: str, allow_negative: bool) -> int: ...

class CommandOutput:
    status: int
    out: str
    err: str

def run_command(name: str, args: list[str]) -> CommandOutput: ...
def command_names() -> list[str]: ...

class TraceEvent:
    rank: int
    lane: int
    name: str
    category: str
    ts_us: float
    dur_us: float
    stage: int
    micro_batch: int
    peer_rank: int
    bytes: int

class MemorySample:
    rank: int
    ts_us: float
    bytes: int

class Trace:
    source: str
    schedule: str
    num_ranks: int
    num_stages: int
    num_micro_batches: int
    iteration: int
    step_time_s: Optional[float]
    events: list[TraceEvent]
    memory: list[MemorySample]
    def end_us(self) -> float: ...
    def to_json(self) -> str: ...
    def write(self, path: str) -> None: ...

class ReadTraces:
    traces: list[tuple[str, Trace]]
    notes: list[str]

def read_traces(paths: list[str], step: Optional[int] = None, every_step: bool = False) -> ReadTraces: ...
