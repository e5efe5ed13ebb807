// The dependencies between a step's events as the trace shows them: each rank's computes in
// order, each receive's send, and for every event the one that let it start (its predecessor:
// the previous compute when the rank was busy, the receive it waited for, the send that fed a
// receive that waited). Shared by the attribution and its equal-cost replay.
#pragma once

#include <cstddef>
#include <limits>
#include <vector>

#include "pipescope/traces/trace.hpp"

namespace pipescope::traces::step_graph {

inline constexpr std::size_t kNone = std::numeric_limits<std::size_t>::max();
// Events this close count as back to back: timestamps carry fractions of a microsecond.
inline constexpr double kTouchUs = 1.0;

// Work that occupies a rank's compute stream (and is compared across ranks).
bool is_compute(const TraceEvent& e);

struct Graph {
  const Trace* trace = nullptr;
  std::vector<std::vector<std::size_t>> computes;  // per rank, in start order
  std::vector<std::vector<std::size_t>> receives;  // per rank, in end order
  std::vector<std::vector<std::size_t>> sends;     // per rank, in trace order
  std::vector<std::size_t> send_of;                // per event: its paired send (receives), else kNone
  std::vector<std::size_t> position;               // per compute: its place in computes[rank]
  double start_us = 0;
  double end_us = 0;
  std::size_t last_event = kNone;  // the event that ends last (a compute when there is one)
};

Graph build_graph(const Trace& trace);

// The compute before `compute` on its rank, or kNone.
std::size_t previous_compute(const Graph& g, std::size_t compute);
// The latest compute on `rank` ending by `t_us`, or kNone.
std::size_t compute_ending_by(const Graph& g, int rank, double t_us);
// The receive on `rank` that ended last in (after_us, by_us], or kNone.
std::size_t receive_ending_in(const Graph& g, int rank, double after_us, double by_us);
// What let `event` start (see the header comment); kNone at the step's start.
std::size_t predecessor(const Graph& g, std::size_t event);

}  // namespace pipescope::traces::step_graph
