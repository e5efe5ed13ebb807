// A predicted 1F1B trace and a measured one of the same run whose rank 2 is 1.5x slower: the
// pair the timeline model, search and critical-path tests read.
#pragma once

#include <utility>

#include "pipescope/traces/synthetic.hpp"

namespace pipeline_trace_fixture {

inline std::pair<pipescope::traces::Trace, pipescope::traces::Trace> predicted_and_slow_measured_1f1b() {
  pipescope::traces::SyntheticPipeline pp;
  pipescope::traces::Trace predicted = pipescope::traces::make_1f1b_trace(pp);
  pp.slow_rank = 2;
  pp.slow_factor = 1.5;
  pp.source = "measured";
  return {predicted, pipescope::traces::make_1f1b_trace(pp)};
}

}  // namespace pipeline_trace_fixture
