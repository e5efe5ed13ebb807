// The profile file (pipescope.profile/1): a two-stage profile round-trips through text and
// through an atomic write; bad fields are named ("p.json: stages[1].f_s"); costs built from it
// use the measured link (25 GB/s, 5 us) for every transfer.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "pipescope/core/errors.hpp"
#include "pipescope/sim/profile.hpp"

using namespace pipescope;
using namespace pipescope::sim;

namespace {

Profile two_stages() {
  Profile p;
  p.micro_batch_size = 2;
  p.transfer = {25e9, 5e-6};
  for (int s = 0; s < 2; ++s) {
    StageProfile sp;
    sp.stage = s;
    sp.f_s = 0.01 * (s + 1);
    sp.b_s = 0.02;
    sp.w_s = 0.015;
    sp.f_mem_bytes = 1000;
    sp.b_mem_bytes = -600;
    sp.w_mem_bytes = -400;
    sp.static_bytes = 1 << 20;
    sp.activation_bytes = 4096;
    sp.optimizer_s = 0.003;
    sp.reduce_grads_s = 0.004;
    p.stages.push_back(sp);
  }
  p.extra["measured_from"] = "run.json";
  return p;
}

}  // namespace

TEST_CASE("a profile round-trips through JSON and an atomic file") {
  const Profile p = two_stages();
  CHECK(parse_profile(to_profile_json(p), "mem") == p);
  const auto dir = std::filesystem::temp_directory_path() / "pipescope_test_profile";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "p.json").string();
  write_profile(p, path);
  CHECK(read_profile(path) == p);
  std::filesystem::remove_all(dir);
  CHECK_THROWS(write_profile(p, (dir / "missing" / "p.json").string()));
  CHECK_FALSE(std::filesystem::exists(dir / "missing" / "p.json"));
}

TEST_CASE("bad profiles are refused with the field named") {
  nlohmann::json j = nlohmann::json::parse(to_profile_json(two_stages()));
  j["stages"][1]["f_s"] = -1;
  CHECK_THROWS_WITH(parse_profile(j.dump(), "p.json"), Catch::Contains("p.json: stages[1].f_s"));
  j = nlohmann::json::parse(to_profile_json(two_stages()));
  j["stages"][0]["w_mem_bytes"] = 0;
  CHECK_THROWS_WITH(parse_profile(j.dump(), "p.json"), Catch::Contains("stages[0]"));
  j = nlohmann::json::parse(to_profile_json(two_stages()));
  j["format"] = "something/2";
  CHECK_THROWS_AS(parse_profile(j.dump(), "p.json"), UsageError);
  CHECK_THROWS_AS(parse_profile("{", "p.json"), UsageError);
}

TEST_CASE("costs and topology from a profile") {
  const Profile p = two_stages();
  const CostModel costs = cost_model_from_profile(p);
  CHECK(costs.transfer_model == TransferModel::Links);
  CHECK(costs.stages.size() == 2);
  CHECK(costs.stages[1].f_s == 0.02);
  CHECK(costs.micro_batch_size == 2);
  const Topology t = topology_from_profile(p);
  CHECK(t.link_between(0, 1).bandwidth_bytes_per_s == 25e9);
  Topology far = t;
  far.pipeline_rank_stride = 64;
  CHECK(far.link_between(0, 1).latency_s == 5e-6);
}

// The runtime fields (optional, top level): a profile with 12 us between instructions, 300 us
// after the last, the
// optimizer and tied-reduction syncs and rendezvous sends round-trips, hands all three to the cost model, and
// reads with all three off when they are absent; a flag that is not a boolean or a negative
// overhead is refused with the field named.
TEST_CASE("the runtime fields of a profile round-trip and reach the cost model") {
  Profile p = two_stages();
  p.instruction_overhead_s = 12e-6;
  p.step_overhead_s = 300e-6;
  p.optimizer_sync = true;
  p.reduce_tied_sync = true;
  p.send_ends_at_receive = true;
  const Profile back = parse_profile(to_profile_json(p), "mem");
  CHECK(back == p);
  CHECK(back.extra.size() == p.extra.size());  // known fields do not leak into extra
  const CostModel costs = cost_model_from_profile(back);
  CHECK(costs.runtime.instruction_overhead_s == 12e-6);
  CHECK(costs.runtime.step_overhead_s == 300e-6);
  CHECK(costs.runtime.optimizer_sync);
  CHECK(costs.runtime.reduce_tied_sync);
  CHECK(costs.runtime.send_ends_at_receive);

  nlohmann::json j = nlohmann::json::parse(to_profile_json(two_stages()));
  j.erase("instruction_overhead_s");
  j.erase("step_overhead_s");
  j.erase("optimizer_sync");
  j.erase("reduce_tied_sync");
  j.erase("send_ends_at_receive");
  const Profile old = parse_profile(j.dump(), "old.json");
  CHECK(old.instruction_overhead_s == 0);
  CHECK(old.step_overhead_s == 0);
  CHECK_FALSE(old.optimizer_sync);
  CHECK_FALSE(old.reduce_tied_sync);
  CHECK_FALSE(old.send_ends_at_receive);
  j["optimizer_sync"] = "yes";
  CHECK_THROWS_WITH(parse_profile(j.dump(), "p.json"), Catch::Contains("p.json: profile.optimizer_sync"));
  j["optimizer_sync"] = false;
  j["instruction_overhead_s"] = -1;
  CHECK_THROWS_WITH(parse_profile(j.dump(), "p.json"), Catch::Contains("p.json: profile.instruction_overhead_s"));
  j["instruction_overhead_s"] = 0;
  j["step_overhead_s"] = "slow";
  CHECK_THROWS_WITH(parse_profile(j.dump(), "p.json"), Catch::Contains("p.json: profile.step_overhead_s"));
}

// What calibration records of the run (the model's layers, their split into stages, the model,
// the calibration's inputs, the inner backward split) are typed fields: the two example
// profiles that an earlier version of ppsim calibrate wrote read into them and leave nothing in
// `extra`; written back, every top-level field but the stages (where this version adds
// recv_contended_s and grad_accumulate_s) is the file's own, value and type, and what this
// version writes reads and writes back byte for byte. A field this version does not know, or a
// known one of another shape (a "model" that is not a string, a calibration record's unknown
// key), stays as it was.
TEST_CASE("a profile's run record is typed and written back byte for byte") {
  for (const char* example : {"traces/examples/profile.json", "traces/examples/h100-tiny-gpt/profile.json"}) {
    INFO(example);
    const std::string path = (std::filesystem::path(PIPESCOPE_SOURCE_DIR) / example).string();
    const Profile p = read_profile(path);
    CHECK(p.extra.empty());
    REQUIRE(p.layers);
    REQUIRE(p.stage_bounds);
    CHECK(p.stage_bounds->front() == 0);
    CHECK(p.stage_bounds->back() == static_cast<int>(p.layers->size()));
    CHECK(p.partition_method);
    CHECK(p.model);
    REQUIRE(p.calibration);
    CHECK(p.calibration->duration_statistic == "mean");
    CHECK(p.calibration->micro_batches == std::vector<int>{4});
    CHECK(p.calibration->num_ranks == static_cast<int>(p.stages.size()));
    CHECK(p.calibration->extra.empty());
    CHECK(p.inner_backward_split);
    std::ifstream in(path, std::ios::binary);
    const nlohmann::json original = nlohmann::json::parse(in);
    const std::string text = to_profile_json(p);
    const nlohmann::json written = nlohmann::json::parse(text);
    REQUIRE(written.size() == original.size());
    for (auto it = original.begin(); it != original.end(); ++it) {
      INFO(it.key());
      if (it.key() != "stages") CHECK(written.at(it.key()).dump() == it.value().dump());
    }
    CHECK(to_profile_json(parse_profile(text, "written.json")) == text);
  }

  nlohmann::json j = nlohmann::json::parse(to_profile_json(two_stages()));
  j["model"] = 42;
  j["calibration"] = {{"num_ranks", 2}, {"duration_statistic", 7}, {"later_field", "kept"}};
  const std::string text = j.dump(2) + "\n";
  const Profile odd = parse_profile(text, "odd.json");
  CHECK_FALSE(odd.model);
  CHECK(odd.extra.at("model") == 42);
  REQUIRE(odd.calibration);
  CHECK(odd.calibration->num_ranks == 2);
  CHECK_FALSE(odd.calibration->duration_statistic);
  CHECK(odd.calibration->extra.size() == 2);
  CHECK(to_profile_json(odd) == text);
}
