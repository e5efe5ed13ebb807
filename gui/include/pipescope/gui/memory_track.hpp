// One rank's memory curve in the viewer: its samples in time order, their peak, and the
// highest sample of any index range in a few reads, from a pyramid of block maxima, so a
// memory row's pixel column costs the same whether it holds ten samples or a million.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "pipescope/traces/trace.hpp"

namespace pipescope::gui {

class MemoryTrack {
 public:
  // Samples per block at the pyramid's lowest level.
  static constexpr std::size_t kBlock = 8;

  MemoryTrack() = default;
  // Takes one rank's samples in any order and sorts them by time (stable: samples of one
  // time keep their order).
  explicit MemoryTrack(std::vector<traces::MemorySample> samples);

  const std::vector<traces::MemorySample>& samples() const { return samples_; }  // time-sorted
  bool empty() const { return samples_.empty(); }
  // The highest sample, and 0 when none is above 0 (or there are none).
  std::int64_t peak_bytes() const { return peak_bytes_; }
  // The highest of samples()[from, to) (0 for an empty range; `to` past the end is the end):
  // the partial blocks at both ends sample by sample, the whole blocks between from two
  // overlapping power-of-two runs of the pyramid, at most 2 * kBlock + 2 reads in all.
  std::int64_t max_bytes(std::size_t from, std::size_t to) const;

 private:
  friend std::vector<MemoryTrack> memory_tracks_of(const traces::Trace& trace, int rank_count);
  // Sorts the samples by time (unless they already are) and builds the peak and the pyramid.
  void index_samples();
  void build_pyramid();

  std::vector<traces::MemorySample> samples_;
  std::int64_t peak_bytes_ = 0;
  // pyramid_[level][first block]: the maximum of blocks [first, first + 2^level), over the
  // whole blocks of kBlock samples only (a trailing partial block is read sample by sample).
  std::vector<std::vector<std::int64_t>> pyramid_;
};

// Every rank's memory track of a trace, indexed by rank (0 .. rank_count - 1); a rank without
// samples has an empty track (which allocates nothing: a wide plain trace has many).
std::vector<MemoryTrack> memory_tracks_of(const traces::Trace& trace, int rank_count);

}  // namespace pipescope::gui
