// The time base of every trace event of the runtime: the steady clock in microseconds.
#pragma once

#include <chrono>

namespace pipescope::exec::runtime {

inline double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace pipescope::exec::runtime
