"""Planning from Python: gpt-7b on 64 H100s ranks its fitting layouts best throughput first, the
same rows `ppsim plan --format json` gives, each a plain dict; a schedule list is passed as a
Python list; a bad option raises the CLI's message; several recomputed module sets are a list of lists, each
selective row naming its set; a Hugging Face config.json plans at seq_length's sequence, its
expert-parallel sizes searched; to_pandas needs pandas; with a profile
calibrated from full backwards each row carries an interval, and the split-backward ones name
the estimated split."""

from __future__ import annotations

import pytest

import pipescope as ps

from conftest import ROOT


def test_plan_rows_are_dicts_best_first():
    rows = ps.plan(model="gpt-7b", gpus=64, top=5, schedules=["1f1b", "zb-h1"], recompute="none")
    assert 0 < len(rows) <= 5
    assert rows.considered >= rows.simulated > 0
    throughputs = [r["throughput_samples_per_s"] for r in rows]
    assert throughputs == sorted(throughputs, reverse=True)
    assert {r["schedule"] for r in rows} <= {"1f1b", "zb-h1"}
    for row in rows:
        assert row["tensor_parallel"] * row["context_parallel"] * row["pipeline"] * row["data_parallel"] == 64
        assert "iteration_time_interval_s" not in row  # no profile: no measured spread


def test_plan_reads_a_hugging_face_config():
    config = ROOT / "tests" / "sim" / "data" / "hugging_face" / "Qwen__Qwen3-30B-A3B.json"
    rows = ps.plan(model=config, seq_length=4096, gpu="h100", gpus=16, global_batch=64, top=3)
    assert 0 < len(rows) <= 3
    assert rows.model == "Qwen__Qwen3-30B-A3B"
    assert any(r["expert_parallel"] > 1 for r in rows)  # a MoE model's EP searched without being asked
    with pytest.raises(ps.UsageError, match="give --seq-length"):
        ps.plan(model=config, gpus=16, global_batch=64)


def test_plan_refuses_what_the_cli_refuses():
    with pytest.raises(ps.UsageError, match="--format"):
        ps.plan(format="xml")
    with pytest.raises(ps.UsageError, match="--micro-batch-sizes: 'x' is not a positive integer"):
        ps.plan(micro_batch_sizes=["x"])


def test_plan_searches_several_module_sets():
    sets = [["core_attn"], ["core_attn", "moe_act", "layernorm"]]
    rows = ps.plan(model="mixtral-8x7b", gpus=32, global_batch=64, tensor_parallel_sizes=[1],
                   context_parallel_sizes=[1], expert_parallel_sizes=[8], schedules=["1f1b"],
                   micro_batch_sizes=[1], recompute="selective", recompute_modules=sets, top=0)
    named = {tuple(r["recompute_modules"]) for r in rows}
    assert named <= {tuple(s) for s in sets}
    assert ("core_attn", "moe_act", "layernorm") in named
    with pytest.raises(ps.UsageError, match="--recompute-modules mla_up_proj: mixtral-8x7b has no multi-latent"):
        ps.plan(model="mixtral-8x7b", recompute="selective", recompute_modules=[["moe_act"], ["mla_up_proj"]])


def test_plan_searches_the_context_parallel_exchange():
    rows = ps.plan(model="llama-3-8b", gpus=16, global_batch=32, tensor_parallel_sizes=[1],
                   context_parallel_sizes=[2], cp_comm_types=["p2p", "a2a"], schedules=["1f1b"],
                   micro_batch_sizes=[1], recompute="none", top=0)
    assert {r["context_parallel_comm"] for r in rows} == {"p2p", "a2a"}
    with pytest.raises(ps.UsageError, match="--cp-comm-types: 'ring'"):
        ps.plan(model="llama-3-8b", cp_comm_types=["ring"])


def test_to_pandas():
    rows = ps.plan(model="gpt-7b", gpus=8, top=3, schedules=["1f1b"], recompute="none")
    try:
        import pandas  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="pandas"):
            rows.to_pandas()
    else:
        assert list(rows.to_pandas()["schedule"]) == [r["schedule"] for r in rows]


def test_plan_with_a_calibrated_profile_gives_each_row_its_interval(torch_run):
    # torch's ScheduleInterleaved1F1B run (2 ranks, full backwards only): every row has an
    # interval; only the schedules that split their backwards say the split was estimated.
    c = ps.calibrate(torch_run)
    rows = ps.plan(profile=c, top=0, schedules=["1f1b", "zb-h1", "zbv"])
    assert {r["schedule"] for r in rows} == {"1f1b", "zb-h1", "zbv"}
    for row in rows:
        low, high = row["iteration_time_interval_s"]
        assert low <= row["iteration_time_s"] <= high
        assert ("estimated" in row) == (row["schedule"] != "1f1b"), row["schedule"]
