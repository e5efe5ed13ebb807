#include "pipescope/gui/memory_track.hpp"

#include <algorithm>
#include <limits>
#include <utility>

namespace pipescope::gui {

MemoryTrack::MemoryTrack(std::vector<traces::MemorySample> samples) : samples_(std::move(samples)) { index_samples(); }

void MemoryTrack::index_samples() {
  if (samples_.empty()) return;
  // Traces write samples in time order: checking first spares the sort's buffer (a million
  // ranks of one sample each would allocate one per rank).
  const auto by_time = [](const traces::MemorySample& a, const traces::MemorySample& b) { return a.ts_us < b.ts_us; };
  if (!std::is_sorted(samples_.begin(), samples_.end(), by_time))
    std::stable_sort(samples_.begin(), samples_.end(), by_time);
  build_pyramid();
}

void MemoryTrack::build_pyramid() {
  const std::size_t blocks = samples_.size() / kBlock;  // whole blocks only
  pyramid_.assign(1, std::vector<std::int64_t>(blocks, std::numeric_limits<std::int64_t>::min()));
  for (std::size_t i = 0; i < samples_.size(); ++i) {
    const std::int64_t bytes = samples_[i].bytes;
    peak_bytes_ = std::max(peak_bytes_, bytes);
    if (i / kBlock < blocks) pyramid_[0][i / kBlock] = std::max(pyramid_[0][i / kBlock], bytes);
  }
  for (std::size_t span = 2; span <= blocks; span *= 2) {
    const auto& below = pyramid_.back();
    std::vector<std::int64_t> level(blocks - span + 1);
    for (std::size_t b = 0; b < level.size(); ++b) level[b] = std::max(below[b], below[b + span / 2]);
    pyramid_.push_back(std::move(level));
  }
}

std::int64_t MemoryTrack::max_bytes(std::size_t from, std::size_t to) const {
  to = std::min(to, samples_.size());
  if (from >= to) return 0;
  std::int64_t highest = std::numeric_limits<std::int64_t>::min();
  while (from < to && from % kBlock != 0) highest = std::max(highest, samples_[from++].bytes);
  while (to > from && to % kBlock != 0) highest = std::max(highest, samples_[--to].bytes);
  if (from < to) {
    const std::size_t first = from / kBlock, count = (to - from) / kBlock;
    std::size_t level = 0;
    while ((std::size_t{2} << level) <= count) ++level;
    highest = std::max({highest, pyramid_[level][first], pyramid_[level][first + count - (std::size_t{1} << level)]});
  }
  return highest;
}

std::vector<MemoryTrack> memory_tracks_of(const traces::Trace& trace, int rank_count) {
  // The samples straight into their tracks, then each track indexed: no copy per rank.
  std::vector<MemoryTrack> tracks(static_cast<std::size_t>(std::max(rank_count, 0)));
  for (const auto& m : trace.memory) tracks[static_cast<std::size_t>(m.rank)].samples_.push_back(m);
  for (MemoryTrack& track : tracks) track.index_samples();
  return tracks;
}

}  // namespace pipescope::gui
