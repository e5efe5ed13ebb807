"""Predictions from Python: 1F1B on 4 ranks, 8 micro-batches, F = B = W = 1 s takes
(m + p - 1)(F + B + W) = 33 s with a bubble of 1 - 24/33 on every rank, the same numbers
`ppsim simulate --json` prints; a Schedule object and its name give the same result; the
predicted trace is written on demand and read back with its 96 compute events; the model path
(gpt-7b on H100) fits memory; Megatron's model arguments as keywords describe Llama 3 8B as its
preset does; unknown or contradictory options raise the CLI's message; a hybrid model (Nemotron 3
Nano's config; Megatron's hybrid keywords, the same as the model file)."""

from __future__ import annotations

import json

import pytest

import pipescope as ps
from pipescope import _core


def test_1f1b_with_uniform_costs():
    r = ps.simulate("1f1b", stages=4, micro_batches=8, f_cost=1, b_cost=1, w_cost=1)
    assert r.iteration_time_s == pytest.approx(33.0)
    assert r.num_ranks == 4 and len(r.ranks) == 4
    for rank in r.ranks:
        assert rank.bubble_fraction == pytest.approx(1 - 24 / 33)
        assert rank.busy_s == pytest.approx(24.0)
    assert r.iteration_time_interval_s is None  # explicit costs: nothing measured, no interval
    cli = json.loads(_core.run_command("simulate", ["--schedule", "1f1b", "--stages", "4", "--micro-batches", "8",
                                                    "--json"]).out)
    assert cli == r.json


def test_a_schedule_object_and_its_name_agree():
    s = ps.schedule("zbv", stages=4, micro_batches=8)
    by_object = ps.simulate(s, f_cost=1, b_cost=1, w_cost=1)
    by_name = ps.simulate("zbv", stages=4, micro_batches=8, f_cost=1, b_cost=1, w_cost=1)
    assert by_object.iteration_time_s == by_name.iteration_time_s
    from_csv = ps.Schedule.from_torch_csv(s.to_torch_csv())
    assert ps.simulate(from_csv, f_cost=1, b_cost=1, w_cost=1).iteration_time_s == pytest.approx(by_name.iteration_time_s)


def test_the_predicted_trace(tmp_path):
    r = ps.simulate("1f1b", stages=4, micro_batches=8)
    path = r.to_trace(tmp_path / "pred.json")
    t = ps.read_trace(path)
    assert t.source == "predicted" and t.num_ranks == 4
    compute = [e for e in t.events if e.name in ("F", "B")]
    assert len(compute) == 2 * 4 * 8
    assert max(e.ts_us + e.dur_us for e in t.events) == pytest.approx(33e6)
    ps.simulate("1f1b", stages=4, micro_batches=8, trace=tmp_path / "direct.json")
    assert ps.read_trace(tmp_path / "direct.json").num_ranks == 4


def test_model_costs_and_memory():
    r = ps.simulate("1f1b", stages=4, micro_batches=8, model="gpt-7b", gpu="h100", tensor_parallel=2)
    assert r.iteration_time_s > 0
    assert r.fits_memory is True and r.max_mem_bytes > 0
    assert all(p > 0 for p in r.peak_memory_bytes)


def test_options_are_checked_by_the_command():
    with pytest.raises(ps.UsageError, match="unrecognised option '--no-such-option'"):
        ps.simulate("1f1b", no_such_option=1)
    with pytest.raises(ps.UsageError, match="--f-cost"):
        ps.simulate("1f1b", f_cost=-1)
    with pytest.raises(ps.UsageError, match="--model and --profile are two cost sources"):
        ps.simulate("1f1b", model="gpt-7b", profile="p.json")
    with pytest.raises(ps.UsageError, match="fixes its own sizes"):
        ps.simulate(ps.schedule("1f1b", 4, 8), stages=2)


def test_megatron_model_arguments_as_keywords():
    shape = dict(num_layers=32, hidden_size=4096, num_attention_heads=32, group_query_attention=True,
                 num_query_groups=8, ffn_hidden_size=14336, swiglu=True, vocab_size=128256, seq_length=8192,
                 untie_embeddings_and_output_weights=True, disable_bias_linear=True, hidden_dropout=0.0,
                 attention_dropout=0.0)
    megatron = ps.simulate("1f1b", stages=2, micro_batches=4, **shape)
    preset = ps.simulate("1f1b", stages=2, micro_batches=4, model="llama-3-8b")
    assert megatron.iteration_time_s == preset.iteration_time_s
    with pytest.raises(ps.UsageError, match="--seq-length"):
        ps.simulate("1f1b", stages=2, micro_batches=4, **{k: v for k, v in shape.items() if k != "seq_length"})


def test_a_hybrid_model_from_its_config_and_from_megatrons_keywords():
    """Nemotron 3 Nano's Hugging Face config (Mamba-2, attention and expert blocks) and a small
    hybrid model from Megatron's keywords, the same as its model file."""
    from pathlib import Path

    config = Path(__file__).resolve().parents[2] / "tests/sim/data/hugging_face"
    nano = ps.simulate("1f1b", stages=1, micro_batches=8, seq_length=8192, data_parallel=8, expert_parallel=8,
                       model=str(config / "nvidia__NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.json"))
    assert nano.iteration_time_s > 0
    shape = dict(num_layers=8, hidden_size=1024, num_attention_heads=16, vocab_size=32000, seq_length=2048,
                 ffn_hidden_size=4096, squared_relu=True, disable_bias_linear=True,
                 untie_embeddings_and_output_weights=True, hidden_dropout=0.0, attention_dropout=0.0,
                 hybrid_override_pattern="M-M*M-M-", mamba_num_heads=32)
    megatron = ps.simulate("1f1b", stages=2, micro_batches=4, **shape)
    model_file = json.dumps({"name": "megatron-8x1024", "layers": 8, "hidden": 1024, "heads": 16, "seq": 2048,
                             "vocab": 32000, "ffn_hidden": 4096, "tied_embeddings": False, "biases": False,
                             "dropout": False, "flash_attention": True, "hybrid_override_pattern": "M-M*M-M-",
                             "mamba_num_heads": 32})
    assert megatron.iteration_time_s == ps.simulate("1f1b", stages=2, micro_batches=4,
                                                    model=model_file).iteration_time_s
    with pytest.raises(ps.UsageError, match="hybrid_override_pattern"):
        ps.simulate("1f1b", stages=2, micro_batches=4, **{**shape, "hybrid_override_pattern": "M-M*M-M"})
