// Torch's communication semantics in the simulator (Schedule::communication == Torch, every
// schedule read from torch's CSV): a RECV only posts the receive and the compute that needs its
// data waits; a send is waited at its WAIT_SEND_* (or, implicitly, at the end of the step).
// - With free transfers (F = B = W = 1, c = 0) every lowered fixture of tests/golden/torch/
//   schedules (each multi-stage class at p = 2, 4, 8) takes exactly as long as its compute-only
//   order; under pipescope's rule (a receive waits where it stands) some take longer, which is
//   what torch's lowered order would wrongly cost without these semantics.
// - With a cost per transfer (c = 0.5), torch's semantics are never slower than pipescope's rule.
// - A WAIT_SEND_F holds the sender until its data has arrived: with c = 5 the forward after it
//   starts at 6, not 1.
#include <catch2/catch.hpp>

#include <filesystem>

#include "pipescope/core/schedule_io.hpp"
#include "pipescope/sim/simulator.hpp"

using namespace pipescope;
using namespace pipescope::sim;

namespace {

const std::filesystem::path kFixtures = std::filesystem::path(PIPESCOPE_SOURCE_DIR) / "tests/golden/torch/schedules";

// (lowered file, its compute-only twin), sorted by name.
std::vector<std::pair<std::filesystem::path, std::filesystem::path>> lowered_fixtures() {
  std::vector<std::pair<std::filesystem::path, std::filesystem::path>> pairs;
  const std::string suffix = ".lowered.csv";
  for (const auto& entry : std::filesystem::directory_iterator(kFixtures)) {
    const std::string name = entry.path().filename().string();
    if (name.size() <= suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) continue;
    pairs.emplace_back(entry.path(), kFixtures / (name.substr(0, name.size() - suffix.size()) + ".csv"));
  }
  std::sort(pairs.begin(), pairs.end());
  return pairs;
}

double iteration_of(const Schedule& schedule, const CostModel& costs) {
  return simulate(schedule, costs).summary.iteration_time_s;
}

}  // namespace

TEST_CASE("with free transfers a lowered torch schedule takes as long as its compute-only order") {
  const CostModel free_transfers = CostModel::uniform(1, 1, 1, 0);
  const auto fixtures = lowered_fixtures();
  REQUIRE(fixtures.size() == 25u);
  int slower_under_pipescope_rule = 0;
  for (const auto& [lowered_file, compute_only_file] : fixtures) {
    INFO(lowered_file.filename().string());
    Schedule lowered = read_schedule_file(lowered_file.string());
    const Schedule compute_only = read_schedule_file(compute_only_file.string());
    REQUIRE(lowered.communication == Communication::Torch);
    const double torch_time = iteration_of(lowered, free_transfers);
    CHECK(torch_time == iteration_of(compute_only, free_transfers));
    lowered.communication = Communication::Pipescope;
    const double blocking_time = iteration_of(lowered, free_transfers);
    CHECK(blocking_time >= torch_time);
    slower_under_pipescope_rule += blocking_time > torch_time;
  }
  CHECK(slower_under_pipescope_rule > 0);
}

TEST_CASE("with costly transfers torch's semantics are never slower than pipescope's rule") {
  const CostModel costly = CostModel::uniform(1, 1, 1, 0.5);
  for (const auto& [lowered_file, compute_only_file] : lowered_fixtures()) {
    INFO(lowered_file.filename().string());
    Schedule lowered = read_schedule_file(lowered_file.string());
    const double torch_time = iteration_of(lowered, costly);
    lowered.communication = Communication::Pipescope;
    CHECK(torch_time <= iteration_of(lowered, costly));
  }
}

TEST_CASE("a WAIT_SEND holds the sender until its data has arrived") {
  const CostModel slow_link = CostModel::uniform(1, 1, 1, 5);
  const Schedule waits = parse_torch_csv("0F0,0SEND_F0,0WAIT_SEND_F0,0F1,0SEND_F1\n1RECV_F0,1RECV_F1,1F0,1F1\n", "w.csv");
  const Schedule posts = parse_torch_csv("0F0,0SEND_F0,0F1,0SEND_F1\n1RECV_F0,1RECV_F1,1F0,1F1\n", "p.csv");
  auto second_forward_start = [](const SimResult& result) {
    for (const auto& e : result.trace.events)
      if (e.rank == 0 && e.name == "F" && e.micro_batch == 1) return e.ts_us / 1e6;
    return -1.0;
  };
  // Inference: F0 ends at 1, its data arrives at 6; F1 runs 6..7 (waiting) or 1..2 (not).
  const SimResult waited = simulate(waits, slow_link);
  const SimResult posted = simulate(posts, slow_link);
  CHECK(second_forward_start(waited) == 6.0);
  CHECK(second_forward_start(posted) == 1.0);
  // Rank 1's receives are posted at once; its forwards wait for the data: 6..7 and 12..13 or 7..8.
  CHECK(waited.summary.iteration_time_s == 13.0);
  CHECK(posted.summary.iteration_time_s == 8.0);
}
