// The metrics row's text is written by hand rather than by nlohmann::json's dump: the file has
// always had "key": value with spaces and a fixed precision per figure, which readers and old
// files share, and dump's shortest round-trip numbers would change every line.
#include "pprun/metrics_row.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace pipescope::exec {

std::string metrics_line(const MetricsRow& row) {
  std::string line =
      fmt::format(R"({{"step": {}, "loss": {:.17g}, "iteration_time_s": {:.9g}, "peak_memory_bytes": [{}])", row.step,
                  row.loss, row.iteration_time_s, fmt::join(row.peak_memory_bytes, ", "));
  if (row.recompute_layers > 0) line += fmt::format(R"(, "recompute_layers": {})", row.recompute_layers);
  if (!row.stolen_time_s.empty())
    line += fmt::format(R"(, "stolen_time_s": [{:.9g}])", fmt::join(row.stolen_time_s, ", "));
  if (row.eval_loss) line += fmt::format(R"(, "eval_loss": {:.17g})", *row.eval_loss);
  if (row.grad_norm) line += fmt::format(R"(, "grad_norm": {:.17g})", *row.grad_norm);
  line += "}\n";
  return line;
}

void from_json(const nlohmann::json& j, MetricsRow& row) {
  row = MetricsRow{};
  row.step = j.at("step").get<int>();
  if (j.contains("loss")) row.loss = j.at("loss").get<double>();
  if (j.contains("iteration_time_s")) row.iteration_time_s = j.at("iteration_time_s").get<double>();
  if (j.contains("peak_memory_bytes"))
    row.peak_memory_bytes = j.at("peak_memory_bytes").get<std::vector<std::int64_t>>();
  if (j.contains("recompute_layers")) row.recompute_layers = j.at("recompute_layers").get<int>();
  if (j.contains("stolen_time_s")) row.stolen_time_s = j.at("stolen_time_s").get<std::vector<double>>();
  if (j.contains("eval_loss")) row.eval_loss = j.at("eval_loss").get<double>();
  if (j.contains("grad_norm")) row.grad_norm = j.at("grad_norm").get<double>();
}

}  // namespace pipescope::exec
