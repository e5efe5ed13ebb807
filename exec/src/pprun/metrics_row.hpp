// One row of pprun's --metrics file (SPEC.md section 8): a step's figures as rank 0 gathers
// them. Written in one place, with the number formats the file has always had, and read back
// in one place (a resumed run keeps the rows before its checkpoint).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace pipescope::exec {

struct MetricsRow {
  int step = 0;
  double loss = 0;                              // the step's mean loss over every replica
  double iteration_time_s = 0;                  // rank 0's wall time of the step
  std::vector<std::int64_t> peak_memory_bytes;  // per rank
  int recompute_layers = 0;                     // the peaks depend on it: written when > 0
  std::vector<double> stolen_time_s;            // per rank; written when measured (not empty)
  std::optional<double> eval_loss;              // evaluated steps only
  std::optional<double> grad_norm;              // with --clip-grad: the global norm before clipping
};

// The row as one line of the file, newline included: "step", "loss" (%.17g),
// "iteration_time_s" (%.9g), "peak_memory_bytes", then the optional keys in that order
// ("grad_norm" %.17g).
std::string metrics_line(const MetricsRow& row);

// A row read back: "step" is required (an integer); the other keys are read when present, as
// rows of older runs may lack them. Throws nlohmann::json's errors for what is not a row.
void from_json(const nlohmann::json& j, MetricsRow& row);

}  // namespace pipescope::exec
