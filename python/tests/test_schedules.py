"""Schedules from Python: ZB-H1 on 4 ranks with 8 micro-batches has 4 programs of 8 F, 8 I and
8 W each (plus their sends and receives), validates, and round-trips through torch's CSV and
pipescope's JSON unchanged; the golden torch CSVs (tests/golden/schedules) read back to the
same CSV; zb-auto is searched under a limit in micro-batches from explicit costs; bad names,
sizes and files raise the tools' one-line messages."""

from __future__ import annotations

import pytest

import pipescope as ps
from conftest import GOLDEN


def test_a_named_schedule_has_every_rank_program_in_torch_notation():
    s = ps.schedule("zb-h1", stages=4, micro_batches=8)
    assert (s.name, s.num_ranks, s.num_stages, s.num_micro_batches) == ("zb-h1", 4, 4, 8)
    assert s.stage_to_rank == [0, 1, 2, 3]
    for rank in range(4):
        compute = s.compute_actions(rank)
        assert [a for a in compute if a.startswith(f"{rank}F")] == [f"{rank}F{m}" for m in range(8)]
        assert sum(f"{rank}I" in a for a in compute) == 8
        assert sum(f"{rank}W" in a for a in compute) == 8
    assert s.actions(0)[:2] == ["0F0", "0SEND_F0"] or s.actions(0)[1] == "0F0"
    s.validate()
    assert "rank" in s.to_text() or s.to_text()


def test_torch_csv_and_json_round_trip():
    s = ps.schedule("interleaved-1f1b", stages=2, micro_batches=4, chunks=2)
    csv = s.to_torch_csv()
    back = ps.Schedule.from_torch_csv(csv)
    assert back.to_torch_csv() == csv
    assert back.num_stages == 4 and back.stage_to_rank == [0, 1, 0, 1]
    assert back.communication == "torch"
    again = ps.Schedule.from_json(s.to_json())
    assert again == s


@pytest.mark.parametrize("name", ["1f1b_p4_m8", "zb-h1_p4_m8", "zbv_p4_m8_v2", "dualpipev_p4_m8_v2"])
def test_golden_torch_csv_files_read_and_write_back(name, tmp_path):
    path = GOLDEN / "schedules" / f"{name}.csv"
    s = ps.schedule(str(path))
    s.validate()
    written = s.save(tmp_path / "again.csv")
    assert ps.schedule(str(written)).to_torch_csv() == s.to_torch_csv()
    with pytest.raises(ps.UsageError, match=r"--stages 3 contradicts the schedule file .*, which has 4 ranks"):
        ps.schedule(str(path), stages=3)


def test_zb_auto_searches_under_a_limit_from_explicit_costs():
    s = ps.schedule("zb-auto", stages=4, micro_batches=8, f_cost=1, b_cost=1, w_cost=1, max_mem_micro_batches=4)
    s.validate()
    assert s.num_ranks == 4
    assert any("W" in a for a in s.compute_actions(0))
    r = ps.simulate(s, f_cost=1, b_cost=1, w_cost=1)
    assert r.iteration_time_s >= 24  # 8 micro-batches x (F + B + W) on the busiest rank


def test_bad_names_and_sizes_raise_the_tools_messages():
    with pytest.raises(ps.ScheduleError, match="no-such"):
        ps.schedule("no-such", stages=4, micro_batches=8)
    with pytest.raises(ps.ScheduleError):
        ps.schedule("interleaved-1f1b", stages=4, micro_batches=8, chunks=0)
    with pytest.raises(ps.UsageError, match="zb-auto"):
        ps.schedule("1f1b", stages=4, micro_batches=8, max_mem_micro_batches=2)
    with pytest.raises(ps.Error):
        ps.schedule("file:/no/such/schedule.json")
    assert issubclass(ps.ScheduleError, ValueError)


def test_an_invalid_schedule_names_its_rank_and_instruction():
    s = ps.schedule("1f1b", stages=2, micro_batches=2)
    text = s.to_torch_csv().replace("1F0,1B0", "1B0,1F0", 1)  # a backward before its forward
    broken = ps.Schedule.from_torch_csv(text, "broken.csv")
    with pytest.raises(ps.ScheduleError, match="rank 1") as refused:
        broken.validate()
    assert "\n" not in str(refused.value)
    with pytest.raises(ps.ScheduleError, match="micro-batches go up to 9"):
        ps.Schedule.from_torch_csv(s.to_torch_csv().replace("1B0", "1B9", 1), "broken.csv")


def test_every_section_2_name_is_known():
    names = ps.schedule_names()
    for name in ("gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zb-h2", "zbv", "dualpipev", "zb-auto", "deepspeed-train"):
        assert name in names


def test_traits_say_what_a_schedule_is_and_which_options_it_takes():
    assert ps.schedule_traits("zbv") == {"placement": "v", "chunks": [2], "split_backward": True,
                                         "cost_dependent": False, "memory_limited": False,
                                         "takes_microbatch_group_size": False}
    zb_auto = ps.schedule_traits("zb-auto")
    assert zb_auto["cost_dependent"] and zb_auto["memory_limited"] and zb_auto["split_backward"]
    assert ps.schedule_traits("interleaved-1f1b")["chunks"] == []
    assert ps.schedule_traits("no-such-schedule") is None
    # The cost options follow the traits, not the name: refused for a schedule that is not
    # cost-dependent, taken by one that is.
    with pytest.raises(ps.UsageError, match="--f-cost is zb-auto's: not with schedule zbv"):
        ps.schedule("zbv", f_cost=2.0)
    assert ps.schedule("zb-auto", stages=4, micro_batches=8, f_cost=1.0, b_cost=1.0, w_cost=1.0,
                       max_mem_micro_batches=4).validate() is None
