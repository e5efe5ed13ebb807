// The JSON object of `ppsim simulate --json` (SPEC.md section 6): 1F1B with p = 2, m = 2 and
// F = B = W = 1 runs 3 x 3 = 9 s, both ranks busy 6 s (bubble 1/3), throughput 2/9 samples/s;
// the object carries schedule, num_ranks, num_micro_batches, iteration_time_s,
// bubble_fraction, throughput_samples_per_s and per-rank rank, busy_s, bubble_fraction,
// peak_memory_bytes.
#include <catch2/catch.hpp>

#include "pipescope/core/registry.hpp"
#include "pipescope/sim/simulator.hpp"

using namespace pipescope;
using namespace pipescope::sim;

TEST_CASE("the summary JSON has the SPEC.md fields") {
  ScheduleParams params;
  params.num_ranks = 2;
  params.num_micro_batches = 2;
  SimOptions options;
  options.build_trace = false;
  const Summary s = simulate(make_schedule("1f1b", params), CostModel::uniform(1, 1, 1, 0, 4, -2, -2), Topology{}, options).summary;
  const nlohmann::json j = to_json(s);
  CHECK(j["schedule"] == "1f1b");
  CHECK(j["num_ranks"] == 2);
  CHECK(j["num_micro_batches"] == 2);
  CHECK(j["iteration_time_s"] == 9.0);
  CHECK(j["bubble_fraction"].get<double>() == Approx(1.0 / 3.0));
  CHECK(j["throughput_samples_per_s"].get<double>() == Approx(2.0 / 9.0));
  REQUIRE(j["ranks"].size() == 2);
  CHECK(j["ranks"][0]["rank"] == 0);
  CHECK(j["ranks"][0]["busy_s"] == 6.0);
  CHECK(j["ranks"][0]["bubble_fraction"].get<double>() == Approx(1.0 / 3.0));
  CHECK(j["ranks"][0]["peak_memory_bytes"] == 8);
  CHECK(j["ranks"][1]["peak_memory_bytes"] == 4);
}
