// The human-readable account of a calibration (calibration_report).
#include <string>

#include <fmt/format.h>

#include "pipescope/sim/calibration.hpp"

namespace pipescope::sim {
namespace {

// Two lines of what was learnt of a MoE run's all-to-all (Profile::all_to_all).
std::string all_to_all_lines(const AllToAllProfile& a, const std::vector<StageProfile>& stages) {
  std::string costs;
  for (const AllToAllCost& c : a.costs)
    costs += fmt::format("; {} ranks: {:.1f} us + bytes / {} ({} events)", c.group_size, c.latency_s * 1e6,
                         c.bandwidth_bytes_per_s > 0 ? fmt::format("{:.4g} B/s", c.bandwidth_bytes_per_s)
                                                     : std::string("(no byte term)"),
                         c.samples);
  std::string layers;
  for (const StageProfile& s : stages) layers += fmt::format("{}{}", layers.empty() ? "" : "/", s.moe_layers);
  return fmt::format(
             "all-to-all: E={}, MoE layers per stage {}, bytes per layer dispatch/combine F {:.0f}/{:.0f}, B "
             "{:.0f}/{:.0f}{}; F and B above are net of it\n",
             a.expert_parallel, layers, a.dispatch_f_bytes, a.combine_f_bytes, a.dispatch_b_bytes, a.combine_b_bytes,
             costs) +
         fmt::format(
             "routing: {} experts, the busiest expert {:.3f}x the mean, the busiest expert-parallel rank {:.3f}x; "
             "overlapped F&B steps {}\n",
             a.experts, a.imbalance, a.rank_load,
             a.overlapped_steps ? "run two passes at once" : "run one pass after the other");
}

std::string statistic_of(const Calibration& c) {
  const auto& info = c.profile.calibration;
  return info && info->duration_statistic ? *info->duration_statistic : std::string("median");
}

}  // namespace

std::string calibration_report(const Calibration& c) {
  std::string out;
  const Profile& p = c.profile;
  out +=
      fmt::format("{:<7}{:>11}{:>11}{:>11}{:>11}{:>10}{:>10}{:>10}{:>10}{:>12}{:>12}{:>12}\n", "stage", "F us", "B us",
                  "W us", "full us", "load us", "send us", "recv us", "optim us", "f mem B", "grad buf B", "static B");
  for (const StageProfile& s : p.stages)
    out += fmt::format(
        "{:<7}{:>11.1f}{:>11.1f}{:>11.1f}{:>11.1f}{:>10.1f}{:>10.1f}{:>10.1f}{:>10.1f}{:>12}{:>12}{:>12}\n", s.stage,
        s.f_s * 1e6, s.b_s * 1e6, s.w_s * 1e6, s.full_backward_s * 1e6, s.load_s * 1e6, s.send_s * 1e6, s.recv_s * 1e6,
        s.optimizer_s * 1e6, s.f_mem_bytes, s.grad_buffer_bytes, s.static_bytes);
  out += fmt::format("transfer: latency {:.1f} us, bandwidth {:.4g} B/s; backward split {}\n",
                     p.transfer.latency_s * 1e6, p.transfer.bandwidth_bytes_per_s,
                     p.backward_split_measured   ? "measured"
                     : p.backward_split_estimate ? "estimated"
                                                 : "unmeasured");
  out += fmt::format(
      "program: {:.1f} us between instructions, {:.1f} us after the last; optimizer steps {}; tied reductions {}; "
      "sends drawn until {}\n",
      p.instruction_overhead_s * 1e6, p.step_overhead_s * 1e6,
      p.optimizer_sync ? "wait for every rank (global-norm clipping)" : "independent",
      p.reduce_tied_sync ? "wait for both ends" : "independent",
      p.send_ends_at_receive ? "their receive completes" : "their data arrives");
  if (p.all_to_all) out += all_to_all_lines(*p.all_to_all, p.stages);
  out += fmt::format("durations: {} of the samples\n", statistic_of(c));
  out += fmt::format("\n{:<44}{:>8}{:>14}{:>14}{:>14}{:>14}{:>14}\n", "quantity", "samples", "median", "mean", "MAD",
                     "min", "max");
  for (const auto& q : c.quantities) {
    if (q.samples == 0) continue;
    const double scale = q.unit == "s" ? 1e6 : 1.0;
    const std::string unit = q.unit == "s" ? " us" : " B";
    out += fmt::format("{:<44}{:>8}{:>14}{:>14}{:>14}{:>14}{:>14}\n", q.name, q.samples,
                       fmt::format("{:.1f}{}", q.median * scale, unit), fmt::format("{:.1f}", q.mean * scale),
                       fmt::format("{:.1f}", q.mad * scale), fmt::format("{:.1f}", q.min * scale),
                       fmt::format("{:.1f}", q.max * scale));
  }
  if (!c.outliers.empty()) {
    out += fmt::format("\noutliers ({}; {}):\n", c.outliers.size(),
                       statistic_of(c) == "mean" ? "durations: included in the means"
                                                 : "reported only: the medians are robust to them");
    for (const auto& o : c.outliers) {
      const bool seconds =
          o.quantity.find("memory") == std::string::npos && o.quantity.find("buffer") == std::string::npos;
      out += fmt::format("  {}: {} rank {} micro-batch {}: {:.1f}{} (median {:.1f})\n", o.quantity, o.source, o.rank,
                         o.micro_batch, seconds ? o.value * 1e6 : o.value, seconds ? " us" : " B",
                         seconds ? o.median * 1e6 : o.median);
    }
  }
  for (const auto& n : c.notes) out += "note: " + n + "\n";
  return out;
}

}  // namespace pipescope::sim
