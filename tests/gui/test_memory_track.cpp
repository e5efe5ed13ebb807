// One rank's memory track (memory_track.hpp). Samples given out of order come back sorted by
// time (stable at equal times); the peak is the highest sample and 0 when all are below 0 or
// there are none; max_bytes of a range matches a plain scan, through the model too: 1,000
// samples whose bytes follow a scrambled sequence (i * 7919 mod 1009) over a sweep of ranges.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "pipescope/gui/memory_track.hpp"
#include "pipescope/gui/timeline_model.hpp"
#include "pipescope/traces/trace.hpp"

using namespace pipescope::gui;
using namespace pipescope::traces;

TEST_CASE("a memory track sorts its samples by time and knows its peak", "[memory]") {
  const MemoryTrack track({{0, 30, 5}, {0, 10, 7}, {0, 20, 3}, {0, 10, 9}});
  REQUIRE(track.samples().size() == 4);
  CHECK(track.samples()[0].bytes == 7);  // the two at 10 us keep their order
  CHECK(track.samples()[1].bytes == 9);
  CHECK(track.samples()[2].bytes == 3);
  CHECK(track.samples()[3].bytes == 5);
  CHECK(track.peak_bytes() == 9);
  CHECK(track.max_bytes(2, 4) == 5);
  CHECK(track.max_bytes(3, 3) == 0);
  CHECK(track.max_bytes(1, 100) == 9);

  CHECK(MemoryTrack({{0, 0, -4}}).peak_bytes() == 0);
  const MemoryTrack none;
  CHECK(none.empty());
  CHECK(none.peak_bytes() == 0);
  CHECK(none.max_bytes(0, 10) == 0);
}

TEST_CASE("memory_tracks_of deals a trace's samples to their ranks", "[memory]") {
  Trace t;
  t.memory = {{2, 5, 50}, {0, 1, 10}, {2, 1, 20}};
  const auto tracks = memory_tracks_of(t, 3);
  REQUIRE(tracks.size() == 3);
  CHECK(tracks[0].samples().size() == 1);
  CHECK(tracks[1].empty());
  REQUIRE(tracks[2].samples().size() == 2);
  CHECK(tracks[2].samples()[0].bytes == 20);
  CHECK(tracks[2].peak_bytes() == 50);
}

TEST_CASE("a track's range maximum matches a plain scan", "[memory]") {
  std::vector<MemorySample> samples;
  samples.reserve(300);
  for (int i = 0; i < 300; ++i)
    samples.push_back({0, static_cast<double>(i), static_cast<std::int64_t>(i) * 7919 % 1009});
  const MemoryTrack track(samples);
  for (std::size_t from = 0; from <= 300; from += 7)
    for (std::size_t length : {0, 1, 8, 9, 16, 33, 100, 300}) {
      const std::size_t to = std::min<std::size_t>(from + length, 300);
      std::int64_t expected = 0;
      if (from < to)
        expected = std::max_element(samples.begin() + from, samples.begin() + to, [](const auto& a, const auto& b) {
                     return a.bytes < b.bytes;
                   })->bytes;
      INFO("from " << from << " to " << to);
      REQUIRE(track.max_bytes(from, from + length) == expected);
    }
}

TEST_CASE("the memory pyramid gives the exact maximum of any sample range", "[memory]") {
  // A trace with 1,000 memory samples on rank 0 whose bytes follow a scrambled sequence
  // (i * 7919 mod 1009, so neighbours differ and the maxima move around): every range
  // [from, to) of a sweep of starts and lengths (including partial blocks at both ends,
  // single samples, empty ranges and ranges past the end) matches a plain scan.
  Trace trace;
  trace.meta.num_ranks = 1;
  TraceEvent e;
  e.name = "F";
  e.kind = event_kind_from_name(e.name);  // as a reader would parse it
  e.dur_us = 1;
  trace.events.push_back(e);
  for (int i = 0; i < 1000; ++i)
    trace.memory.push_back({0, static_cast<double>(i), static_cast<std::int64_t>(i) * 7919 % 1009});
  TimelineModel model;
  model.set_traces(trace);
  const auto& samples = model.memory(0, 0);
  REQUIRE(samples.size() == 1000);
  for (std::size_t from = 0; from <= 1000; from += 13)
    for (std::size_t length : {0, 1, 2, 7, 8, 9, 15, 16, 17, 63, 64, 65, 200, 511, 999, 1000, 1200}) {
      const std::size_t to = from + length;
      std::int64_t expected = 0;
      if (from < std::min<std::size_t>(to, 1000)) {
        expected = samples[from].bytes;
        for (std::size_t i = from; i < std::min<std::size_t>(to, 1000); ++i)
          expected = std::max(expected, samples[i].bytes);
      }
      INFO("from " << from << " to " << to);
      REQUIRE(model.memory_max_bytes(0, 0, from, to) == expected);
    }
  // The whole range finds the rank's peak.
  REQUIRE(model.memory_max_bytes(0, 0, 0, 1000) == model.peak_memory_bytes(0, 0));
}
