"""The torch adapter without a process group (skipped where torch is not installed): ZBV on 2
ranks places stages 0 and 3 on rank 0, interleaved 1F1B stages 0 and 2; every action of
pipescope's torch CSV is one of torch's _Actions and prints back the same; the compute-only
program keeps the forwards and backwards alone. bench/torch-adapter/run.sh trains with it."""

from __future__ import annotations

import pytest

import pipescope as ps

pytest.importorskip(
    "torch.distributed.pipelining",
    reason="no torch in this Python (the build unpacks its torch wheel for LibTorch alone, build/libtorch); "
    "with PyPI's torch: PYTHONPATH=<build folder>/python <python with torch and pytest> -m pytest python/tests",
)
from pipescope.torch import stage_indices, torch_actions  # noqa: E402


def test_stage_placement():
    assert stage_indices("zbv", 2, 0) == [0, 3]
    assert stage_indices("zbv", 2, 1) == [1, 2]
    assert stage_indices("interleaved-1f1b", 2, 0, chunks=2, n_microbatches=4) == [0, 2]


@pytest.mark.parametrize("name", ["zb-h1", "zbv", "dualpipev", "interleaved-1f1b"])
def test_torch_actions_round_trip(name):
    s = ps.schedule(name, stages=2, micro_batches=4)
    rows = [row.split(",") for row in s.to_torch_csv().splitlines()]
    actions = torch_actions(s)
    for rank in range(2):
        assert [str(a) for a in actions[rank]] == rows[rank]
    compute = torch_actions(s, compute_only=True)
    assert all(a.is_compute_op for rank in compute for a in compute[rank])
