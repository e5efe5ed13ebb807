// pipescope.schedule/1 JSON: every built-in schedule (p = 4, m = 8, chunks 2 where it applies)
// and hand-written ones with skip peers, buffers and idle steps survive write -> read equal;
// unknown top-level fields are kept and written back; unknown instruction fields are accepted
// unless they contradict known ones; errors name the source and the JSON path. A rank-level
// ReduceGrads/OptimizerStep without `stage` (DeepSpeed's form) means every stage of its rank;
// "communication": "torch" is read and written, and absent for pipescope's own semantics.
#include <catch2/catch.hpp>

#include "pipescope/core/errors.hpp"
#include "pipescope/core/registry.hpp"
#include "pipescope/core/schedule_io.hpp"
#include "test_validator_support.hpp"

using namespace pipescope;

namespace {

std::string json_error_of(const std::string& text) {
  try {
    parse_schedule_json(text, "x.json");
  } catch (const ScheduleError& e) {
    return e.what();
  }
  return "";
}

const char* kMinimal = R"({
  "format": "pipescope.schedule/1", "schedule": "tiny", "num_ranks": 1, "num_stages": 1,
  "num_micro_batches": 1, "stage_to_rank": [0],
  "programs": [[[{"op": "ForwardPass", "stage": 0, "micro_batch": 0, "comment": "free text"}], []]]
})";

}  // namespace

TEST_CASE("built-in schedules round-trip through JSON") {
  int round_trips = 0;
  for (const std::string& name : ScheduleRegistry::instance().names()) {
    ScheduleParams params;
    params.num_ranks = 4;
    params.num_micro_batches = 8;
    if (name == "interleaved-1f1b" || name == "looped-bfs") {
      params.chunks = 2;
      params.chunks_given = true;
    }
    if (name == "data-parallel") params.num_ranks = 1;
    Schedule schedule;
    try {
      schedule = make_schedule(name, params);
    } catch (const ScheduleError&) {
      continue;
    }
    INFO(name);
    const Schedule back = parse_schedule_json(to_schedule_json(schedule), "round-trip.json");
    CHECK(back == schedule);
    ++round_trips;
  }
  CHECK(round_trips >= 8);
}

TEST_CASE("peers, buffers, idle steps and extra fields round-trip") {
  Schedule schedule = testing::make_schedule_from_text(
      1, {0, 1, 2},
      {{"0F0#3 0SEND_F0#3 0SEND_F0@2#3", "", "0RECV_B0 0RECV_B0@2 0B0"},
       {"1RECV_F0 1F0 1SEND_F0", "1RECV_B0 1B0 1SEND_B0", ""},
       {"2RECV_F0 2RECV_F0@0 2F0", "2B0 2SEND_B0 2SEND_B0@0", "2REDUCE_GRAD 2OPTIMIZER"}});
  schedule.extra_fields["planner"] = {{"max_mem", 1e9}, {"note", "line\nbreak \"quoted\""}};
  schedule.extra_fields["tags"] = nlohmann::json::array({"a", 1, nullptr});
  const std::string text = to_schedule_json(schedule);
  const Schedule back = parse_schedule_json(text, "x.json");
  CHECK(back == schedule);
  CHECK(back.programs[0][1].empty());
  CHECK(back.programs[0][0][2].peer_stage == 2);
  CHECK(back.programs[0][0][2].buffer == 3);
  CHECK(back.extra_fields["planner"]["note"] == "line\nbreak \"quoted\"");
  // Written back unchanged: the second rewrite is byte-identical.
  CHECK(to_schedule_json(back) == text);
}

TEST_CASE("unknown instruction fields are accepted unless they contradict") {
  const Schedule schedule = parse_schedule_json(kMinimal, "x.json");
  CHECK(schedule.name == "tiny");
  REQUIRE(schedule.programs.size() == 1);
  REQUIRE(schedule.programs[0].size() == 2);
  CHECK(schedule.programs[0][0][0] == Instruction{Op::ForwardPass, 0, 0});
  CHECK(schedule.programs[0][1].empty());

  std::string agreeing = kMinimal;
  agreeing.replace(agreeing.find("\"comment\": \"free text\""), 22, "\"action\": \"0F0\", \"micro_batch_id\": 0");
  CHECK(json_error_of(agreeing) == "");
  std::string contradicting = kMinimal;
  contradicting.replace(contradicting.find("\"comment\": \"free text\""), 22, "\"action\": \"0B0\"");
  CHECK(json_error_of(contradicting) == "x.json: programs[0][0][0].action: '0B0' contradicts op/stage/micro_batch (0F0)");
}

TEST_CASE("JSON errors name the source and the path") {
  auto with = [](const std::string& from, const std::string& to) {
    std::string text = kMinimal;
    text.replace(text.find(from), from.size(), to);
    return text;
  };
  CHECK(json_error_of(with("\"ForwardPass\"", "\"Forwrd\"")) == "x.json: programs[0][0][0].op: unknown op 'Forwrd'");
  CHECK(json_error_of(with("\"stage\": 0", "\"stage\": -1")) == "x.json: programs[0][0][0].stage: expected a non-negative integer, got -1");
  CHECK(json_error_of(with("\"stage\": 0", "\"stage\": 4294967296")) == "x.json: programs[0][0][0].stage: number 4294967296 is too large");
  CHECK(json_error_of(with("\"stage\": 0", "\"stage\": \"0\"")) ==
        "x.json: programs[0][0][0].stage: expected a non-negative integer, got a string");
  CHECK(json_error_of(with("\"micro_batch\": 0", "\"micro_batch\": 1")) ==
        "x.json: programs[0][0][0].micro_batch: micro-batch 1 out of range (num_micro_batches is 1)");
  CHECK(json_error_of(with("\"num_ranks\": 1", "\"num_ranks\": 0")) == "x.json: num_ranks: must be at least 1");
  CHECK(json_error_of(with("[[[{", "[[\"step\", [{")) == "x.json: programs[0][0]: expected an array of instructions, got a string");
  CHECK(json_error_of(with("\"stage_to_rank\": [0]", "\"stage_to_rank\": [1]")) ==
        "x.json: stage_to_rank[0]: rank 1 out of range (num_ranks is 1)");
  CHECK(json_error_of(with("\"op\": \"ForwardPass\"", "\"op\": \"Forward\\nPass\"")) ==
        "x.json: programs[0][0][0].op: unknown op 'Forward\\x0aPass'");
  const std::string truncated = std::string(kMinimal).substr(0, 50);
  CHECK(json_error_of(truncated).rfind("x.json: not valid JSON: line ", 0) == 0);
  CHECK(json_error_of("").rfind("x.json: not valid JSON", 0) == 0);
  CHECK(json_error_of("null") == "x.json: expected a JSON object, got null");
}

TEST_CASE("a rank-level collective without a stage stands for every stage of its rank") {
  // DeepSpeed's form: rank 0 holds stages 0 and 2; its ReduceGrads and OptimizerStep name none.
  const Schedule schedule = parse_schedule_json(R"({
    "format": "pipescope.schedule/1", "schedule": "ds", "num_ranks": 2, "num_stages": 3,
    "num_micro_batches": 1, "stage_to_rank": [0, 1, 0],
    "programs": [[[{"op": "ReduceGrads"}, {"op": "OptimizerStep", "buffer": null}]], [[{"op": "ReduceGrads"}]]]
  })", "x.json");
  const Step& rank0 = schedule.programs[0][0];
  REQUIRE(rank0.size() == 4u);
  CHECK(rank0[0] == Instruction{Op::ReduceGrads, 0, kNone});
  CHECK(rank0[1] == Instruction{Op::ReduceGrads, 2, kNone});
  CHECK(rank0[2] == Instruction{Op::OptimizerStep, 0, kNone});
  CHECK(rank0[3] == Instruction{Op::OptimizerStep, 2, kNone});
  CHECK(schedule.programs[1][0] == Step{Instruction{Op::ReduceGrads, 1, kNone}});
  // Per-micro-batch ops still need their stage.
  CHECK(json_error_of(R"({"format": "pipescope.schedule/1", "schedule": "x", "num_ranks": 1, "num_stages": 1,
    "num_micro_batches": 1, "stage_to_rank": [0], "programs": [[[{"op": "ForwardPass", "micro_batch": 0}]]]})") ==
        "x.json: programs[0][0][0].stage: missing");
}

TEST_CASE("torch's communication semantics are kept in JSON, and pipescope's files stay as they were") {
  Schedule schedule = parse_schedule_json(kMinimal, "x.json");
  CHECK(schedule.communication == Communication::Pipescope);
  CHECK(to_schedule_json(schedule).find("communication") == std::string::npos);
  schedule.communication = Communication::Torch;
  const std::string text = to_schedule_json(schedule);
  CHECK(text.find("\"communication\": \"torch\"") != std::string::npos);
  CHECK(parse_schedule_json(text, "x.json") == schedule);
  std::string wrong = text;
  wrong.replace(wrong.find("\"torch\""), 7, "\"nccl\"");
  CHECK(json_error_of(wrong) == "x.json: communication: expected \"pipescope\" or \"torch\", got 'nccl'");
}
