"""Measured runs from Python, on torch 2.15's traces of a 2-rank ScheduleInterleaved1F1B run (4
stages, m = 4, two profiled steps): read as one trace with 4 forwards of each stage; calibrated
into a profile of 4 stages whose split of the backward is estimated (the run has full backwards
only), so that a ZB schedule is predicted with the estimate named and an interval; the torch
CSV the run dumped is simulated from the profile and compared with the run; a predicted trace
is refused as calibration input."""

from __future__ import annotations

import json

import pytest

import pipescope as ps


def test_read_a_torch_run_folder(torch_run):
    t = ps.read_trace(torch_run)
    assert t.num_ranks == 2
    forwards = [e for e in t.events if e.name == "F"]
    assert sorted({e.stage for e in forwards}) == [0, 1, 2, 3]
    assert sum(e.stage == 0 for e in forwards) == 4
    t0 = ps.read_trace(torch_run, step=0)
    assert t0.iteration == 0
    with pytest.raises(ps.TraceError, match="--step 7: no ProfilerStep#7"):
        ps.read_trace(torch_run, step=7)


def test_calibrate_then_predict_with_the_estimated_split(torch_run, tmp_path):
    c = ps.calibrate(torch_run, output=tmp_path / "profile.json")
    assert c.path == str(tmp_path / "profile.json")
    assert json.loads((tmp_path / "profile.json").read_text()) == c.profile
    assert len(c.profile["stages"]) == 4
    assert c.profile["backward_split"] == "estimated"
    assert any("backward split estimated" in n for n in c.report.splitlines() + c.notes)
    assert c.estimated and c.estimated[0].startswith("backward split of stage(s) 0, 1, 2, 3: input share 0.50 +- 0.10")
    assert 0 < c.step_speed_spread < 1  # two profiled steps
    zb = ps.simulate("interleaved-1f1b", stages=2, micro_batches=4, chunks=2, profile=c)
    assert zb.iteration_time_s > 0
    split = ps.simulate(ps.schedule("zbv", stages=2, micro_batches=4), profile=c)
    assert split.estimated and "backward split" in split.estimated[0]
    low, high = split.iteration_time_interval_s
    assert low < split.iteration_time_s < high


def test_a_calibration_kept_in_memory_is_a_profile(torch_run):
    c = ps.calibrate(torch_run)
    assert c.path is None
    r = ps.simulate(ps.schedule(str(torch_run / "schedule.csv")), profile=c)
    assert r.num_stages == 4


def test_compare_a_prediction_with_the_run(torch_run, tmp_path):
    c = ps.calibrate(torch_run)
    predicted = ps.simulate(ps.schedule(str(torch_run / "schedule.csv")), profile=c)
    comparison = ps.compare(predicted, torch_run)
    assert comparison.iteration_time_predicted_s == pytest.approx(predicted.iteration_time_s, rel=1e-6)
    assert comparison.iteration_time_measured_s > 0
    assert comparison.iteration_time_error == pytest.approx(
        (comparison.iteration_time_predicted_s - comparison.iteration_time_measured_s) / comparison.iteration_time_measured_s)
    assert len(comparison.peak_memory_error) == 2
    # Both per-operation figures, each of the matched operations' durations.
    assert comparison.op_duration_mape > 0
    assert comparison.op_duration_weighted_error > 0
    assert comparison.op_duration_weighted_error == comparison.json["op_duration_weighted_error"]


def test_a_predicted_trace_does_not_calibrate(tmp_path):
    path = ps.simulate("1f1b", stages=2, micro_batches=4).to_trace(tmp_path / "pred.json")
    with pytest.raises(ps.UsageError, match="a predicted trace"):
        ps.calibrate(path)
