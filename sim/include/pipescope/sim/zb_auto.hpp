// zb-auto: the memory-limited automatic zero-bubble schedule. A greedy constructor (backward
// first, forwards up to an in-flight cap and the memory limit, weight gradients filling the
// idle time) is run over a family of caps and weight-gradient policies, and so are the Zero
// Bubble authors' own constructions (their greedy search with one stage per rank; ZB-V, V-Half
// and V-Min in V placement); every candidate, and the hand-made zb-h1 / zb-h2 / zbv / 1f1b when
// they apply, is simulated with the real costs, and the fastest one whose simulated peak memory
// stays under the limit wins.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "pipescope/core/passes.hpp"
#include "pipescope/core/registry.hpp"
#include "pipescope/sim/costs.hpp"
#include "pipescope/sim/topology.hpp"

namespace pipescope::sim {

struct ZbAutoRequest {
  ScheduleParams params;  // num_ranks, num_micro_batches, chunks 1 (one stage per rank) or 2 (V)
  CostModel costs;
  Topology topology;
  std::int64_t max_mem_bytes = 0;  // per rank, everything it holds
  // Per rank, activations only, in micro-batches: each rank may hold, beyond its static memory,
  // N times the largest activations one micro-batch leaves on any rank. This is how the Zero
  // Bubble paper's implementation sets its limit (ZB-1p: N = p, ZB-2p: N = 2p); with stages of
  // unequal size it lets the lighter ranks hold more micro-batches, as that implementation does.
  int max_mem_micro_batches = 0;
  // Neither given: default_zb_auto_limit(...).
};

// The limit used when none is given: on the rank that needs most, its static memory plus the
// activations of 2p - 1 micro-batches (ZB-H2's budget).
std::int64_t default_zb_auto_limit(const ScheduleParams& params, const CostModel& costs);

// Each rank's limit in bytes: the smaller of max_mem_bytes and the micro-batch limit where both
// are given, the default where neither is.
std::vector<std::int64_t> zb_auto_rank_limits(const ZbAutoRequest& request);

// The costs `ppsim schedule zb-auto` uses: f = b = w = 1, c = 0, f_mem = 2, b_mem = w_mem = -1.
CostModel default_zb_auto_costs();

// Throws ScheduleError naming the limit and the least memory any candidate needed when no
// schedule fits, and for chunks other than 1 and 2.
Schedule zb_auto_schedule(const ZbAutoRequest& request);

// One greedy construction (exposed for tests): per-rank in-flight caps and whether W runs
// right after its B (eager) or only when nothing else is ready (lazy). Returns an order with
// an empty per_rank when the construction cannot finish under the limit.
ComputeOrder zb_auto_greedy_order(const ZbAutoRequest& request, const std::vector<int>& cap_per_rank, bool eager_w,
                                  const std::vector<std::int64_t>& rank_limit_bytes);

// The Zero Bubble authors' greedy scheduler (their zb.py, `Graph.manual_order`; one stage per
// rank), which zb-auto also runs: its three switches, each of the eight settings one candidate.
struct ZbAuthorsGreedyFlags {
  bool allow_bubble_before_first_b = true;  // warm-up forwards may overrun the first gradient's arrival
  bool prioritize_b = true;                 // a stage two forwards ahead of the next may wait for its backward
  bool no_bubble_greedy = true;             // a weight pass may overrun the input it waits for
};
std::vector<ZbAuthorsGreedyFlags> zb_authors_greedy_flag_sets();  // the eight, in the authors' order
// Its order under each rank's limit, or an order with an empty per_rank when a rank runs out of
// weight passes to free memory with (the authors' "Cannot fit memory").
ComputeOrder zb_authors_greedy_order(const ZbAutoRequest& request, const std::vector<std::int64_t>& rank_limit_bytes,
                                     const ZbAuthorsGreedyFlags& flags);

// The Zero Bubble authors' ZB-V construction (their zbv.py; V placement), which zb-auto also
// runs with --chunks 2. Its inputs are one figure each, as the authors' runtime gives it (the
// median stage's); max_mem bounds what a rank's activations may take (the authors' default is
// 2p times f_mem: 1F1B's).
struct ZbAuthorsVCosts {
  double f_s = 1, b_s = 1, w_s = 1, c_s = 0;
  std::int64_t f_mem = 2, b_mem = -1, w_mem = -1;
  std::int64_t max_mem = 0;
};
// The order of the four settings the authors try whose worst bubble is smallest, or one with an
// empty per_rank when none can be built.
ComputeOrder zb_authors_v_order(int num_ranks, int num_micro_batches, const ZbAuthorsVCosts& costs);

// The authors' V-Half and V-Min (their zbv_greedy.py; V placement): fixed patterns squeezed in
// unit time, then timed with `costs` (only its times are used; the patterns set the memory).
enum class ZbAuthorsVPattern { v_half, v_min };
ComputeOrder zb_authors_v_pattern_order(ZbAuthorsVPattern kind, int num_ranks, int num_micro_batches,
                                        const ZbAuthorsVCosts& costs);

// The schedules whose order is searched from the costs (ScheduleTraits::cost_dependent): core
// knows no costs, so the simulator builds them, each from one function of its table
// (zb_auto.cpp; zb-auto is the one today). Throws ScheduleError for a name not in the table.
Schedule make_cost_dependent_schedule(std::string_view name, const ZbAutoRequest& request);
// The traits of NAME: the registry's, or, for a cost-dependent schedule not registered yet, its
// table's; nullptr for a name neither knows.
const ScheduleTraits* schedule_traits(std::string_view name);

// Registers the cost-dependent schedule NAME in ScheduleRegistry::instance() with these costs and
// limits (replacing a previous registration), so that make_schedule(NAME) builds it for them.
void register_with_costs(std::string_view name, const CostModel& costs, const Topology& topology,
                         std::int64_t max_mem_bytes, int max_mem_micro_batches = 0);
// register_with_costs("zb-auto", ...); `register_sim_schedules` uses the default costs.
void register_zb_auto(const CostModel& costs, const Topology& topology, std::int64_t max_mem_bytes,
                      int max_mem_micro_batches = 0);
void register_sim_schedules();

}  // namespace pipescope::sim
