"""Shared paths of the Python tests: the checkout's golden files."""

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden"


@pytest.fixture
def torch_run() -> Path:
    """torch 2.15's profiler traces of a 2-rank Gloo run of ScheduleInterleaved1F1B (2 stages per rank, m = 4)."""
    return GOLDEN / "torch" / "traces" / "interleaved-1f1b"
