#include "compare_explain.hpp"

#include <fmt/format.h>

#include "pipescope/core/terminal_text.hpp"

namespace pipescope::cli {

void print_explanation(const traces::StepAttribution& a, const traces::Trace& measured, std::ostream& out) {
  out << printable(traces::explain_step(a, measured)) << "\n\n";
  out << fmt::format("{:<6}{:>10}{:>12}{:>14}{:>14}{:>10}{:>16}{:>12}\n", "rank", "idle ms", "bubble ms",
                     "slow rank ms", "transfers ms", "own ms", "waited most on", "compute x");
  for (const auto& r : a.ranks) {
    const std::string waited = r.waited_most_on < 0 ? std::string("-") : fmt::format("rank {}", r.waited_most_on);
    const bool culprit = a.culprit.found && !a.culprit.transfer && r.rank == a.culprit.rank;
    out << fmt::format("{:<6}{:>10.3f}{:>12.3f}{:>14.3f}{:>14.3f}{:>10.3f}{:>16}{:>12.2f}\n",
                       fmt::format("{}{}", r.rank, culprit ? " *" : ""), r.idle_us * 1e-3, r.schedule_bubble_us * 1e-3,
                       r.waited_on_slow_rank_us * 1e-3, r.waited_on_transfer_us * 1e-3, r.own_us * 1e-3, waited,
                       r.compute_ratio);
  }
  out << fmt::format(
      "\nidle = bubble (the schedule's own: the same work with equal costs on every rank) + waits on a\n"
      "slow rank + waits on slow transfers + own (no peer caused it). The step took {:.3f} ms, with\n"
      "equal costs on every rank {:.3f} ms.\n",
      a.step_us * 1e-3, a.replay_step_us * 1e-3);
  if (a.culprit.found && !a.culprit.transfer) out << "* the rank that held the step back\n";
}

nlohmann::json explanation_json(const traces::StepAttribution& a, const traces::Trace& measured,
                                const traces::ClockAlignment& clocks) {
  nlohmann::json out = traces::attribution_to_json(a, measured);
  out["clocks"] = {
      {"aligned", clocks.applied}, {"offset_us", clocks.offset_us}, {"violation_us", clocks.worst_violation_us}};
  return out;
}

}  // namespace pipescope::cli
