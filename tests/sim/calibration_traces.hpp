// The calibration tests' hand-made traces (test_calibration.cpp, test_calibration_profile.cpp).
//
// Hand-made traces, laid out the way pprun records them (an event per instruction, the memory
// counter sampled after each one): 2 ranks, 2 stages, 5 micro-batches, GPipe order.
//   every instruction but a send is followed by 1 us of the runtime's bookkeeping (the
//            program time between instructions: 1 us);
//   stage 0: LOAD 10 us (+100 B), F 100/98/102/101/400 us (+1000 B; median 101 us, 400 us is an
//            outlier), SEND_F posting 20 us (19 us of its own after the 1 us between instructions), RECV_B (+512 B), B 150 us (frees 1612 B; the first
//            one also allocates the 4000 B gradient buffer), OPTIMIZER 30 us (frees the buffer);
//            10000 B held at the start.
//   stage 1: LOAD 10 us (+64 B), RECV_F (+512 B), F 200 us (+2000 B), B 300 us (frees 2576 B,
//            first one +6000 B buffer), SEND_B posting 20 us, OPTIMIZER 30 us; 20000 B at start.
//   transfers: the first RECV_F waits and ends 50 us after its send starts (latency 50 us);
//            receives of data already there take 5 us.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "pipescope/sim/calibration.hpp"
#include "pipescope/traces/event_kind.hpp"
#include "pipescope/traces/trace.hpp"

namespace calibration_test {

namespace traces = pipescope::traces;
using pipescope::sim::Calibration;
using pipescope::sim::CalibrationOutlier;
using pipescope::traces::Lane;

struct RankWriter {
  traces::Trace& trace;
  int rank;
  double now_us = 0;
  std::int64_t memory_bytes = 0;

  void start(std::int64_t static_bytes) {
    memory_bytes = static_bytes;
    trace.memory.push_back({rank, now_us, memory_bytes});
    now_us += 1;
  }
  traces::TraceEvent& op(const char* name, Lane lane, int stage, int micro_batch, double dur_us,
                         std::int64_t delta = 0) {
    traces::TraceEvent e;
    e.rank = rank;
    e.lane = static_cast<int>(lane);
    e.name = name;
    e.kind = traces::event_kind_from_name(e.name);  // as a reader would parse it
    e.ts_us = now_us;
    e.dur_us = dur_us;
    e.stage = stage;
    e.micro_batch = micro_batch;
    trace.events.push_back(e);
    now_us += dur_us;
    if (delta != 0) {
      memory_bytes += delta;
      trace.memory.push_back({rank, now_us + 0.5, memory_bytes});
    }
    now_us += 1;  // the runtime's bookkeeping between instructions
    return trace.events.back();
  }
  // A send: the program moves on `post_us` after starting it; the transfer ends later.
  traces::TraceEvent& send(const char* name, int stage, int micro_batch, double post_us, double transfer_us) {
    traces::TraceEvent e;
    e.rank = rank;
    e.lane = static_cast<int>(Lane::Send);
    e.name = name;
    e.kind = traces::event_kind_from_name(e.name);  // as a reader would parse it
    e.ts_us = now_us;
    e.dur_us = transfer_us;
    e.stage = stage;
    e.micro_batch = micro_batch;
    e.peer_rank = 1 - rank;
    e.bytes = 512;
    trace.events.push_back(e);
    now_us += post_us;
    return trace.events.back();
  }
};

inline constexpr int kMicroBatches = 5;
inline constexpr double kLatencyUs = 50;
inline constexpr double kLateRecvUs = 5;

// GPipe on 2 ranks. `split`: I and W instead of B.
inline traces::Trace hand_made_trace(bool split, double stage0_forward_us = -1,
                                     double stage0_late_recv_us = kLateRecvUs) {
  traces::Trace t;
  t.meta.source = "measured";
  t.meta.schedule = split ? "zb-h1" : "gpipe";
  t.meta.num_ranks = 2;
  t.meta.num_stages = 2;
  t.meta.num_micro_batches = kMicroBatches;
  RankWriter r0{t, 0}, r1{t, 1};
  r0.start(10000);
  r1.start(20000);
  const double forward0[kMicroBatches] = {100, 98, 102, 101, 400};
  std::vector<double> send_f_at(kMicroBatches);
  for (int k = 0; k < kMicroBatches; ++k) {
    r0.op("LOAD", Lane::Compute, 0, k, 10, 100);
    r0.op("F", Lane::Compute, 0, k, stage0_forward_us > 0 ? stage0_forward_us : forward0[k], 1000);
    send_f_at[k] = r0.now_us;
    r0.send("SEND_F", 0, k, 20, kLatencyUs);
  }
  std::vector<double> send_b_at(kMicroBatches);
  bool first1 = true;
  for (int k = 0; k < kMicroBatches; ++k) {
    r1.op("LOAD", Lane::Compute, 1, k, 10, 64);
    const double data_at = send_f_at[k] + kLatencyUs;
    if (r1.now_us <= send_f_at[k]) {
      r1.op("RECV_F", Lane::Recv, 1, k, data_at - r1.now_us, 512);
    } else {
      REQUIRE(data_at <= r1.now_us);
      r1.op("RECV_F", Lane::Recv, 1, k, kLateRecvUs, 512);
    }
    r1.op("F", Lane::Compute, 1, k, 200, 2000);
    const std::int64_t buffer = first1 ? 6000 : 0;
    first1 = false;
    if (split) {
      r1.op("I", Lane::Compute, 1, k, 120, 0);
      r1.op("W", Lane::Compute, 1, k, 180, -2576 + buffer);
    } else {
      r1.op("B", Lane::Compute, 1, k, 300, -2576 + buffer);
    }
    send_b_at[k] = r1.now_us;
    r1.send("SEND_B", 1, k, 20, kLatencyUs);
  }
  bool first0 = true;
  for (int k = 0; k < kMicroBatches; ++k) {
    r0.now_us = std::max(r0.now_us, send_b_at[k] + kLatencyUs);
    r0.op("RECV_B", Lane::Recv, 0, k, stage0_late_recv_us, 512);
    const std::int64_t buffer = first0 ? 4000 : 0;
    first0 = false;
    if (split) {
      r0.op("I", Lane::Compute, 0, k, 60, 0);
      r0.op("W", Lane::Compute, 0, k, 90, -1612 + buffer);
    } else {
      r0.op("B", Lane::Compute, 0, k, 150, -1612 + buffer);
    }
  }
  r0.op("OPTIMIZER", Lane::Collective, 0, -1, 30, -4000);
  r1.op("OPTIMIZER", Lane::Collective, 1, -1, 30, -6000);
  return t;
}

inline bool has_outlier(const Calibration& c, const std::string& quantity, double value) {
  return std::any_of(c.outliers.begin(), c.outliers.end(),
                     [&](const CalibrationOutlier& o) { return o.quantity == quantity && o.value == Approx(value); });
}

}  // namespace calibration_test
