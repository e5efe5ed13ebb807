// Which bytes of a corpus each sample is. A sample is a window of seq_len + 1 bytes (the inputs
// and, shifted by one, the next-byte targets). The corpus splits into a training part and a
// held-out part (its last 5%, at least one window), never trained on. Training windows start at
// multiples of seq_len (each byte is a target once per epoch) and are visited in a different
// seeded order each epoch; held-out windows in corpus order.
//
// Global sample s is window order_e[s mod W] of epoch e = s / W (W training windows): the order
// depends only on the seed and the epoch, so any rank, replica count or resumed run finds the
// same window for the same s. No LibTorch here.
#pragma once

#include <cstdint>
#include <string>

namespace pipescope::exec {

class TextWindows {
 public:
  static constexpr std::int64_t kHeldOutShare = 20;  // the held-out part: the last 1/20 (5%)

  // Throws UsageError naming --data and --seq-len when `corpus_bytes` holds too few bytes for a
  // training window and a held-out one.
  TextWindows(std::int64_t corpus_bytes, int seq_len, std::uint64_t seed, const std::string& corpus_name);

  int window_bytes() const { return seq_len_ + 1; }
  std::int64_t training_end() const { return training_end_; }  // held-out bytes are [this, corpus end)
  std::int64_t training_windows() const { return training_windows_; }
  std::int64_t held_out_windows() const { return held_out_windows_; }

  // The offset of the first byte of global training sample `sample` (>= 0).
  std::int64_t training_window_start(std::int64_t sample) const;
  // The offset of held-out window `index` modulo held_out_windows().
  std::int64_t held_out_window_start(std::int64_t index) const;

 private:
  // The position of `index` in the seeded order of epoch `epoch`: a bijection of
  // [0, training_windows_) computed in O(1) memory (a Feistel network over the next power of 4,
  // walked until it lands inside), so a corpus of any size needs no table.
  std::int64_t shuffled(std::int64_t index, std::int64_t epoch) const;

  int seq_len_;
  std::uint64_t seed_;
  std::int64_t training_end_;
  std::int64_t training_windows_;
  std::int64_t held_out_windows_;
  int half_bits_;  // the Feistel network permutes numbers of 2 x half_bits_ bits
};

}  // namespace pipescope::exec
