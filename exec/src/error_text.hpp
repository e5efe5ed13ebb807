// Transports and LibTorch put details on the lines after the first; an error the executor
// passes on keeps one line per cause so that the message naming rank, step and instruction
// stays readable.
#pragma once

#include <string>

namespace pipescope::exec {

inline std::string first_line(std::string text) {
  if (auto nl = text.find('\n'); nl != std::string::npos) text.resize(nl);
  return text;
}

}  // namespace pipescope::exec
