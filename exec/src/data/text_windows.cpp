#include "data/text_windows.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cassert>

#include "pipescope/core/errors.hpp"
#include "splitmix64.hpp"

namespace pipescope::exec {
namespace {

constexpr int kFeistelRounds = 4;

}  // namespace

TextWindows::TextWindows(std::int64_t corpus_bytes, int seq_len, std::uint64_t seed, const std::string& corpus_name)
    : seq_len_(seq_len), seed_(seed) {
  const std::int64_t window = seq_len + 1;
  if (corpus_bytes < 2 * window)
    throw UsageError(fmt::format("option --data {}: {} bytes are too few for a training window and a held-out one of "
                                 "--seq-len {} + 1 bytes (at least {})",
                                 corpus_name, corpus_bytes, seq_len, 2 * window));
  const std::int64_t held_out_bytes = std::max<std::int64_t>(window, corpus_bytes / kHeldOutShare);
  training_end_ = corpus_bytes - held_out_bytes;
  // Windows start every seq_len bytes: consecutive windows share one byte, the last target of
  // one being the first input of the next.
  training_windows_ = (training_end_ - window) / seq_len + 1;
  held_out_windows_ = (held_out_bytes - window) / seq_len + 1;
  half_bits_ = 0;
  while ((std::int64_t{1} << (2 * half_bits_)) < training_windows_) ++half_bits_;
}

std::int64_t TextWindows::shuffled(std::int64_t index, std::int64_t epoch) const {
  const std::uint64_t mask = (std::uint64_t{1} << half_bits_) - 1;
  const std::uint64_t epoch_key = splitmix64(seed_ ^ splitmix64(static_cast<std::uint64_t>(epoch)));
  std::uint64_t x = static_cast<std::uint64_t>(index);
  // Cycle walking: the network permutes [0, 4^half_bits_); applied again to a value outside
  // [0, W) it stays a bijection of [0, W), and ends within a few rounds (4^half_bits_ < 4 W).
  do {
    std::uint64_t left = x >> half_bits_, right = x & mask;
    for (int round = 0; round < kFeistelRounds; ++round) {
      const std::uint64_t next = left ^ (splitmix64(right ^ splitmix64(epoch_key + static_cast<std::uint64_t>(round))) & mask);
      left = right;
      right = next;
    }
    x = (left << half_bits_) | right;
  } while (x >= static_cast<std::uint64_t>(training_windows_));
  return static_cast<std::int64_t>(x);
}

std::int64_t TextWindows::training_window_start(std::int64_t sample) const {
  assert(sample >= 0);
  const std::int64_t epoch = sample / training_windows_;
  return shuffled(sample % training_windows_, epoch) * seq_len_;
}

std::int64_t TextWindows::held_out_window_start(std::int64_t index) const {
  assert(index >= 0);
  return training_end_ + (index % held_out_windows_) * seq_len_;
}

}  // namespace pipescope::exec
