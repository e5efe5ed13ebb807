#include "pprun/model_memory.hpp"

#include <unistd.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "moe/moe_model.hpp"
#include "pipescope/core/errors.hpp"

namespace pipescope::exec {

double machine_state_bytes(const RunPlan& plan) {
  const RunOptions& o = plan.options;
  double parameters = 0;
  for (const auto& layer : plan.model.layers) parameters += static_cast<double>(layer.parameters);
  if (o.model == "tiny-moe") {
    // Each replica holds an E-th of every block's experts.
    const double experts =
        static_cast<double>(o.layers) * static_cast<double>(moe_block_expert_parameters(plan.model.config));
    parameters -= experts * (1.0 - 1.0 / o.expert_parallel);
  }
  const double here = static_cast<double>(std::min(o.nproc_per_node, plan.world_size)) / plan.world_size;
  return kStateBytesPerParameter * parameters * o.data_parallel * here;
}

void check_model_fits_machine(const RunPlan& plan, double memory_bytes) {
  const RunOptions& o = plan.options;
  if (o.device != "cpu") return;
  const double needed = machine_state_bytes(plan);
  if (needed <= memory_bytes) return;
  const std::pair<const char*, int> size_options[] = {{"--layers", o.layers},
                                                      {"--hidden", o.hidden},
                                                      {"--seq-len", o.seq_len},
                                                      {"--vocab", o.vocab},
                                                      {"--experts", o.experts},
                                                      {"--moe-ffn-hidden", o.moe_ffn_hidden},
                                                      {"--shared-expert-ffn-hidden", o.shared_expert_ffn_hidden},
                                                      {"--dp", o.data_parallel}};
  std::vector<std::string> sizes;
  for (const auto& [option, value] : size_options)
    if (o.was_given(option)) sizes.push_back(fmt::format("{} {}", option, value));
  throw UsageError(fmt::format(
      "--model {}{}: its weights, gradients and AdamW state need {:.3g} bytes on this machine ({:g} bytes a "
      "parameter), more than its {:.3g} bytes of memory",
      o.model, sizes.empty() ? std::string() : fmt::format(" with {}", fmt::join(sizes, ", ")), needed,
      kStateBytesPerParameter, memory_bytes));
}

double physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page_size <= 0) return 1e300;  // unknown: nothing refused
  return static_cast<double>(pages) * static_cast<double>(page_size);
}

}  // namespace pipescope::exec
