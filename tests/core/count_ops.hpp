// How many instructions of one kind a schedule holds, over every rank and step.
#pragma once

#include "pipescope/core/schedule.hpp"

namespace pipescope::testing {

inline int count_op(const Schedule& schedule, Op op) {
  int n = 0;
  for (const auto& program : schedule.programs)
    for (const auto& step : program)
      for (const auto& instr : step) n += instr.op == op;
  return n;
}

}  // namespace pipescope::testing
