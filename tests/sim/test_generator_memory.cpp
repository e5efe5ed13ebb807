// The memory the built-in schedules promise, under the simulator's model (F allocates f_mem at
// its start, I and W free b_mem and w_mem at their end), with zb-auto's default costs f_mem 2,
// b_mem = w_mem = -1 (half of a micro-batch's activations stay until its weight pass):
// - zb-h1 keeps 1F1B's peak for p = 2..16 and m = 1..3p: rank r peaks at no more than 2p - r
//   (p - r micro-batches of activations and at most r weight passes pending), never above
//   1F1B's 2 min(p, m) on rank 0 (p = 6, m = 12: 12, where it used to reach 17); and with
//   b_mem = -2, w_mem = 0 (W needs nothing) no more than 1F1B's on any rank, 2 min(p - r, m).
// - 1f1b with m < p holds min(p - r, m) micro-batches: 2 min(p - r, m).
#include <catch2/catch.hpp>

#include <algorithm>

#include "pipescope/core/registry.hpp"
#include "pipescope/sim/simulator.hpp"

using namespace pipescope;
using namespace pipescope::sim;

namespace {

Summary simulated(const std::string& name, int p, int m, const CostModel& costs) {
  ScheduleParams params;
  params.num_ranks = p;
  params.num_micro_batches = m;
  SimOptions options;
  options.build_trace = false;
  return simulate(make_schedule(name, params), costs, Topology{}, options).summary;
}

}  // namespace

TEST_CASE("zb-h1 keeps 1F1B's peak memory for p = 2..16", "[memory]") {
  const CostModel half_kept = CostModel::uniform(1, 1, 1, 0, 2, -1, -1);
  const CostModel nothing_kept = CostModel::uniform(1, 1, 1, 0, 2, -2, 0);
  for (int p = 2; p <= 16; ++p)
    for (int m = 1; m <= 3 * p; ++m) {
      INFO("p=" << p << " m=" << m);
      const Summary h1 = simulated("zb-h1", p, m, half_kept);
      const Summary one_f_one_b = simulated("1f1b", p, m, half_kept);
      CHECK(h1.max_peak_memory_bytes() == one_f_one_b.max_peak_memory_bytes());
      for (int r = 0; r < p; ++r) {
        CHECK(h1.ranks[r].peak_memory_bytes <= 2 * p - r);
        CHECK(one_f_one_b.ranks[r].peak_memory_bytes == 2 * std::min(p - r, m));
      }
      const Summary h1_nothing_kept = simulated("zb-h1", p, m, nothing_kept);
      CHECK(h1_nothing_kept.max_peak_memory_bytes() == 2 * std::min(p, m));
      for (int r = 0; r < p; ++r) CHECK(h1_nothing_kept.ranks[r].peak_memory_bytes <= 2 * std::min(p - r, m));
    }
  CHECK(simulated("zb-h1", 6, 12, half_kept).ranks[0].peak_memory_bytes == 12);
}
