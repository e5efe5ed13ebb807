// zb-auto's promises, p = 4, m = 8, f = b = w = 1, c = 0, f_mem = 2, b_mem = w_mem = -1:
// - under every limit from one micro-batch's need up to unlimited, the chosen schedule's
//   simulated peak never exceeds the limit;
// - with the memory zb-h1 needs, it is at least as fast as zb-h1 (27);
// - with the memory zb-h2 needs, it is as fast as zb-h2 (27 for one iteration) and no rank
//   waits between its first and last compute (zero bubble once the pipeline is full);
// - in V placement (--chunks 2) it never exceeds limits from 6 to 24 bytes, and with zbv's
//   memory it is at least as fast as zbv;
// - below one micro-batch's memory it is refused, naming the limit;
// - with a limit in micro-batches (--max-mem-micro-batches N) each rank stays under its static
//   memory plus N of the largest micro-batch's activations; on stages of unequal size the lighter
//   ranks hold more micro-batches than the heaviest, so the same N runs faster than the heaviest
//   rank's bytes applied to every rank; both limits together take the smaller per rank;
// - once registered it is reachable through make_schedule("zb-auto").
#include <catch2/catch.hpp>

#include <limits>

#include "pipescope/core/errors.hpp"
#include "pipescope/core/registry.hpp"
#include "pipescope/core/validator.hpp"
#include "pipescope/sim/simulator.hpp"
#include "pipescope/sim/zb_auto.hpp"
#include "sim_test_support.hpp"

using namespace pipescope;
using namespace pipescope::sim;

namespace {

ZbAutoRequest request(int p, int m, int chunks, std::int64_t limit) {
  ZbAutoRequest r;
  r.params.num_ranks = p;
  r.params.num_micro_batches = m;
  r.params.chunks = chunks;
  r.params.chunks_given = chunks != 1;
  r.costs = default_zb_auto_costs();
  r.max_mem_bytes = limit;
  return r;
}

Summary simulate_named(const std::string& name, int p, int m, int chunks) {
  ScheduleParams params;
  params.num_ranks = p;
  params.num_micro_batches = m;
  params.chunks = chunks;
  params.chunks_given = chunks != 1;
  SimOptions options;
  options.build_trace = false;
  return simulate(make_schedule(name, params), default_zb_auto_costs(), Topology{}, options).summary;
}

}  // namespace

TEST_CASE("zb-auto never exceeds its memory limit") {
  SimOptions options;
  options.build_trace = false;
  for (std::int64_t limit : {2, 3, 4, 6, 8, 10, 14, 20}) {
    const Schedule s = zb_auto_schedule(request(4, 8, 1, limit));
    INFO("limit " << limit);
    CHECK_NOTHROW(validate(s));
    CHECK(simulate(s, default_zb_auto_costs(), Topology{}, options).summary.max_peak_memory_bytes() <= limit);
  }
}

TEST_CASE("zb-auto in V placement never exceeds its memory limit either") {
  SimOptions options;
  options.build_trace = false;
  // One micro-batch holds 2 + 2 bytes on rank 0 (both chunks); larger limits allow more
  // micro-batches in flight.
  for (std::int64_t limit : {6, 8, 12, 16, 24}) {
    const Schedule s = zb_auto_schedule(request(4, 8, 2, limit));
    INFO("limit " << limit);
    CHECK_NOTHROW(validate(s));
    CHECK(simulate(s, default_zb_auto_costs(), Topology{}, options).summary.max_peak_memory_bytes() <= limit);
  }
}

TEST_CASE("zb-auto matches zb-h1 with zb-h1's memory and zb-h2 with zb-h2's") {
  const Summary h1 = simulate_named("zb-h1", 4, 8, 1);
  const Summary h2 = simulate_named("zb-h2", 4, 8, 1);
  REQUIRE(h1.iteration_time_s == 27.0);
  REQUIRE(h2.iteration_time_s == 27.0);
  SimOptions options;
  options.build_trace = false;
  const Schedule with_h1_memory = zb_auto_schedule(request(4, 8, 1, h1.max_peak_memory_bytes()));
  CHECK(simulate(with_h1_memory, default_zb_auto_costs(), Topology{}, options).summary.iteration_time_s <= 27.0);
  const Schedule with_h2_memory = zb_auto_schedule(request(4, 8, 1, h2.max_peak_memory_bytes()));
  const SimResult auto_h2 = simulate(with_h2_memory, default_zb_auto_costs());
  CHECK(auto_h2.summary.iteration_time_s <= 27.0);
  CHECK(sim_test::largest_internal_gap_s(auto_h2.trace) == 0.0);
  CHECK(with_h2_memory.name == "zb-auto");
}

TEST_CASE("zb-auto in V placement") {
  const Summary zbv = simulate_named("zbv", 4, 8, 2);
  SimOptions options;
  options.build_trace = false;
  const Schedule v = zb_auto_schedule(request(4, 8, 2, zbv.max_peak_memory_bytes()));
  CHECK(v.stage_to_rank == v_placement(4));
  const Summary s = simulate(v, default_zb_auto_costs(), Topology{}, options).summary;
  CHECK(s.iteration_time_s <= zbv.iteration_time_s);
  CHECK(s.max_peak_memory_bytes() <= zbv.max_peak_memory_bytes());
}

TEST_CASE("zb-auto refuses what cannot fit and chunk counts it does not know") {
  CHECK_THROWS_WITH(zb_auto_schedule(request(4, 8, 1, 1)), Catch::Contains("--max-mem 1"));
  CHECK_THROWS_AS(zb_auto_schedule(request(4, 8, 3, 100)), ScheduleError);
  ZbAutoRequest both = request(4, 8, 1, 1);
  both.max_mem_micro_batches = 4;
  CHECK_THROWS_WITH(zb_auto_schedule(both), Catch::Contains("--max-mem-micro-batches 4 and --max-mem 1 (1 bytes)"));
  ZbAutoRequest negative = request(4, 8, 1, 0);
  negative.max_mem_micro_batches = -1;
  CHECK_THROWS_WITH(zb_auto_schedule(negative), Catch::Contains("--max-mem-micro-batches must be at least 1"));
}

namespace {

// Four ranks whose stages differ as a padded model's do: the first and the last hold two layers'
// activations (4 bytes a micro-batch), the middle ones three (6), each with its own static memory.
ZbAutoRequest uneven_request(int micro_batches_limit, std::int64_t bytes_limit) {
  ZbAutoRequest r = request(4, 16, 1, bytes_limit);
  r.costs = CostModel::uniform(1.0, 1.0, 1.0, 0.0, 6, -3, -3);
  r.costs.stages.resize(4, r.costs.stages[0]);
  for (int s : {0, 3}) {
    r.costs.stages[s].f_mem_bytes = 4;
    r.costs.stages[s].b_mem_bytes = -2;
    r.costs.stages[s].w_mem_bytes = -2;
  }
  for (int s = 0; s < 4; ++s) r.costs.stages[s].static_bytes = 100 * (s + 1);
  r.max_mem_micro_batches = micro_batches_limit;
  return r;
}

}  // namespace

TEST_CASE("zb-auto's limit in micro-batches holds every rank to its static memory plus N of the largest") {
  SimOptions options;
  options.build_trace = false;
  for (int n = 1; n <= 8; ++n) {
    const ZbAutoRequest r = uneven_request(n, 0);
    const std::vector<std::int64_t> limits = zb_auto_rank_limits(r);
    REQUIRE(limits.size() == 4);
    for (int rank = 0; rank < 4; ++rank) CHECK(limits[rank] == 100 * (rank + 1) + n * 6);
    const Summary s = simulate(zb_auto_schedule(r), r.costs, Topology{}, options).summary;
    INFO("N = " << n);
    for (const RankSummary& rank : s.ranks) CHECK(rank.peak_memory_bytes <= limits[rank.rank]);
  }
  // A limit past 64 bits is none.
  ZbAutoRequest huge = uneven_request(std::numeric_limits<int>::max(), 0);
  huge.costs.stages[1].f_mem_bytes = std::int64_t{1} << 40;
  CHECK(zb_auto_rank_limits(huge) == std::vector<std::int64_t>(4, std::numeric_limits<std::int64_t>::max()));
  // With --max-mem as well, each rank takes the smaller.
  CHECK(zb_auto_rank_limits(uneven_request(4, 330)) == std::vector<std::int64_t>{124, 224, 324, 330});
  // Neither: the default, the same for every rank.
  const ZbAutoRequest none = uneven_request(0, 0);
  CHECK(zb_auto_rank_limits(none) == std::vector<std::int64_t>(4, default_zb_auto_limit(none.params, none.costs)));
}

TEST_CASE("zb-auto's limit in micro-batches lets the lighter ranks hold more, as bytes for all do not") {
  SimOptions options;
  options.build_trace = false;
  // p = 4: the Zero Bubble paper's ZB-1p. The light first rank may hold 6 micro-batches of its
  // 4 bytes under 4 x 6; 1F1B's peak in bytes on every rank holds it to what the heaviest needs.
  const ZbAutoRequest per_micro_batch = uneven_request(4, 0);
  const Summary by_micro_batches = simulate(zb_auto_schedule(per_micro_batch), per_micro_batch.costs, Topology{}, options).summary;
  const Summary one_f_one_b = simulate(make_schedule("1f1b", per_micro_batch.params), per_micro_batch.costs, Topology{}, options).summary;
  const ZbAutoRequest per_byte = uneven_request(0, one_f_one_b.max_peak_memory_bytes());
  const Summary by_bytes = simulate(zb_auto_schedule(per_byte), per_byte.costs, Topology{}, options).summary;
  CHECK(by_micro_batches.iteration_time_s < by_bytes.iteration_time_s);
  CHECK(by_micro_batches.ranks[0].peak_memory_bytes > by_bytes.ranks[0].peak_memory_bytes);
}

TEST_CASE("zb-auto is registered under its name") {
  register_sim_schedules();
  ScheduleParams params;
  params.num_ranks = 4;
  params.num_micro_batches = 8;
  const Schedule s = make_schedule("zb-auto", params);
  CHECK(s.name == "zb-auto");
  CHECK(s.num_ranks == 4);
}
