// Ranks on different clocks: each rank's profiler writes its own clock, so a trace merged from
// several hosts can show a receive ending before its send began. The pairs and the collectives
// bound how far apart two ranks' clocks can be; when the times as written break those bounds,
// each rank gets an offset (NTP-style: the middle of the bounds from both directions) that is
// added to its times. A trace whose times already keep every bound is left as it is.
#pragma once

#include <string>
#include <vector>

#include "pipescope/traces/trace.hpp"

namespace pipescope::traces {

// What two ranks' events say about their clocks: with o_r the offset added to rank r's times,
// o_to - o_from must lie in [lower_us, upper_us] (infinite where nothing bounds it), and
// estimate_us is the best single value (the middle of both bounds, a collective's end, or the
// one bound there is).
struct ClockBound {
  int from_rank = 0;
  int to_rank = 0;  // from_rank < to_rank
  double lower_us = 0;
  double upper_us = 0;
  double estimate_us = 0;
  int transfers = 0;    // send/receive pairs behind the bounds
  int collectives = 0;  // matched collectives behind the bounds
};

struct ClockAlignment {
  std::vector<double> offset_us;  // per rank, added to its times; all 0 when not applied
  bool applied = false;           // the times broke a bound, so the offsets were applied
  double worst_violation_us = 0;  // how far the times as written broke the bounds (0: they keep them)
  std::vector<ClockBound> bounds;
};

// Below this the bounds count as kept: timestamps are written to fractions of a microsecond.
inline constexpr double kClockToleranceUs = 1.0;

// The bounds between each two ranks that exchanged data or took part in one collective. A
// receive cannot end before its send began. A collective cannot end on one rank before it began
// on another, and ends on all ranks at about the same time, but only if it waited for every
// rank (one with nothing to reduce returns at once): collectives bound only ranks that
// exchanged no data. Collectives are matched by kind, stage (a gradient reduction joins the
// replicas of one stage) and occurrence on each rank.
std::vector<ClockBound> clock_bounds(const Trace& trace);

// Whether the trace's transfers mark when the data was there. A torch.profiler trace's
// SEND_/RECV_ spans are the posting of batched isend/irecv (on one host they "end" milliseconds
// before their sends begin), so they bound nothing: its clocks are aligned only when asked
// (`force`).
bool transfers_bound_clocks(const Trace& trace);

// The offsets that bring the trace's ranks onto one clock (rank 0's, or the lowest rank of each
// group of ranks that exchanged nothing with rank 0), or all zeros when the times as written
// keep every bound within kClockToleranceUs, or when !transfers_bound_clocks and not `force`.
ClockAlignment estimate_clock_alignment(const Trace& trace, bool force = false);

// Adds the offsets to every time of each rank (events, flows, memory and counter samples,
// instants) and records them in meta.extra["clock_offsets_us"] (an array, one per rank) when
// applied. Returns the alignment.
ClockAlignment align_clocks(Trace& trace, bool force = false);

// One line for people: "clocks: ranks' offsets 0, +1520.0, -33.2 us (a receive ended 1.5 ms
// before its send began)", or "clocks: consistent (no offsets)".
std::string describe_clock_alignment(const ClockAlignment& alignment);

}  // namespace pipescope::traces
