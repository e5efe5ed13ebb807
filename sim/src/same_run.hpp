// What makes two of the planner's configurations the same run (the same sizes, precision,
// layout and order of forwards and backwards on every rank, the same time and memory), and the
// folding of such rows into one that names the other choices (planner.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "pipescope/sim/planner.hpp"

namespace pipescope::sim {

// Every size (the experts' and the context-parallel exchange included), the precision, the
// layout and the program signature: two configurations with the same key, time and memory are
// one run; the schedule and the recomputation may differ (at one
// pipeline rank 1f1b, zb-h1 and zb-h2 are one program; with a fused attention core selective
// recomputation drops nothing).
std::string fold_key(const PlanCandidate& c, std::uint64_t program);

// Two times of one run: the same sums added in another order (a backward as B + W or whole)
// differ in their last bits.
bool same_time(double a, double b);

// The runs seen so far, by fold_key and peak memory, with their times.
class RunIndex {
 public:
  // The position given when `time_s` was first recorded for this key and memory, or nothing (and
  // it is recorded at `position`).
  std::optional<std::size_t> find_or_add(const std::string& key, std::int64_t memory, double time_s,
                                         std::size_t position);

 private:
  std::map<std::pair<std::string, std::int64_t>, std::vector<std::pair<double, std::size_t>>> runs_;
};

// A choice's place in the request's order (its schedule's, its recomputation's, then its
// recomputed modules'): lower first.
using Preference = std::tuple<std::size_t, std::size_t, std::size_t>;

// Rows with the same fold_key, time and memory become one, at the place of the best placed
// (fastest to the last bit) of them. The choice that stands for the run is the one `preferred`
// puts first; the others are named as its equivalents ("zb-h1", "recompute selective"), in that
// order. Adds the rows folded away to result.folded.
void fold_equal_runs(PlanResult& result, const std::function<Preference(const PlanCandidate&)>& preferred);

}  // namespace pipescope::sim
