// SplitMix64's finaliser: a well-mixed 64-bit function of its input, the same on every machine
// (std::shuffle and the standard distributions are not). Seeds the built-in models' layers and
// orders pprun's text windows.
#pragma once

#include <cstdint>

namespace pipescope::exec {

inline std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace pipescope::exec
