// The simulator's answer in numbers (SPEC.md section 6): iteration time, bubble and peak
// memory per rank, and the JSON object `ppsim simulate --json` prints.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace pipescope::sim {

struct RankSummary {
  int rank = 0;
  double busy_s = 0;           // time on the compute lane: F, B, I, W and loads (traces/bubble.hpp)
  double bubble_fraction = 0;  // 1 - busy_s / iteration time
  std::int64_t peak_memory_bytes = 0;
  // Idle time between the rank's first and last F/B/I/W: the bubble that remains when the
  // warm-up and drain of consecutive iterations overlap (Zero Bubble's post-validation).
  double internal_idle_s = 0;
};

struct Summary {
  std::string schedule;
  int num_ranks = 0;
  int num_stages = 0;
  int num_micro_batches = 0;
  double iteration_time_s = 0;
  double bubble_fraction = 0;  // mean over ranks
  double throughput_samples_per_s = 0;
  std::vector<RankSummary> ranks;
  std::int64_t instructions = 0;  // simulated instructions
  // 0: one isolated iteration. k: the steady state of back-to-back iterations, from k simulated
  // in a row (steady_state.hpp).
  int steady_state_iterations = 0;

  std::int64_t max_peak_memory_bytes() const;
  double total_internal_idle_s() const;
};

// The SPEC.md section 6 object (plus num_stages).
nlohmann::json to_json(const Summary& summary);

}  // namespace pipescope::sim
