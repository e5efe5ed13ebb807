#include "pipescope/sim/summary.hpp"

#include <algorithm>

namespace pipescope::sim {

std::int64_t Summary::max_peak_memory_bytes() const {
  std::int64_t peak = 0;
  for (const auto& r : ranks) peak = std::max(peak, r.peak_memory_bytes);
  return peak;
}

double Summary::total_internal_idle_s() const {
  double idle = 0;
  for (const auto& r : ranks) idle += r.internal_idle_s;
  return idle;
}

nlohmann::json to_json(const Summary& summary) {
  nlohmann::json ranks = nlohmann::json::array();
  for (const auto& r : summary.ranks)
    ranks.push_back({{"rank", r.rank},
                     {"busy_s", r.busy_s},
                     {"bubble_fraction", r.bubble_fraction},
                     {"peak_memory_bytes", r.peak_memory_bytes},
                     {"internal_idle_s", r.internal_idle_s}});
  nlohmann::json j = {{"schedule", summary.schedule},
                      {"num_ranks", summary.num_ranks},
                      {"num_stages", summary.num_stages},
                      {"num_micro_batches", summary.num_micro_batches},
                      {"iteration_time_s", summary.iteration_time_s},
                      {"bubble_fraction", summary.bubble_fraction},
                      {"throughput_samples_per_s", summary.throughput_samples_per_s},
                      {"ranks", std::move(ranks)}};
  if (summary.steady_state_iterations > 0) j["steady_state_iterations"] = summary.steady_state_iterations;
  return j;
}

}  // namespace pipescope::sim
