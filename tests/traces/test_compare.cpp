// compare_traces on hand-made two-rank traces.
// Predicted (iteration 0..80 us): rank 0 F0 [0,10] F1 [10,20] B0 [40,60] B1 [60,80];
// rank 1 F0 [10,20] B0 [20,40] F1 [40,50] B1 [50,70], plus a RECV_F [5,10] that was not measured.
// Measured (iteration 0..100 us): rank 0 F 12 us each, B 22 us each; rank 1 F 10 us, B 24 us,
// plus an OPTIMIZER [80,100] on the collectives lane that was not predicted.
// Expected: iteration 80 vs 100 us, error -0.2; 8 matched, 1 unmatched each way;
// MAPE = (2/12 * 2 + 2/22 * 2 + 0 + 4/24 + 0 + 4/24) / 8 = 0.1060606; weighted by duration
// (2 * 2 + 2 * 2 + 0 + 4 * 2) / (12 * 2 + 22 * 2 + 10 * 2 + 24 * 2) = 16 / 136 = 0.117647;
// bubbles: predicted 20/80 = 0.25 on both ranks, measured 32/100 = 0.32 on both;
// peak memory predicted 300 and 200 bytes, measured 400 and 200: errors -0.25 and 0.
// The largest differences are rank 1's backwards (4 us longer than predicted: difference -4 us,
// predicted - measured like the error), in predicted start order. Events are matched by kind,
// and events of no kind (plain traces' operators) by name.
#include <catch2/catch.hpp>

#include "pipescope/traces/compare.hpp"
#include "pipescope/traces/trace_io.hpp"

using namespace pipescope::traces;

namespace {

void add(Trace& t, int rank, int lane, const std::string& name, int mb, double start, double end) {
  TraceEvent e;
  e.rank = rank;
  e.lane = lane;
  e.name = name;
  e.kind = event_kind_from_name(e.name);  // as a reader would parse it
  e.stage = name == "OPTIMIZER" ? -1 : rank;
  e.micro_batch = mb;
  e.ts_us = start;
  e.dur_us = end - start;
  t.events.push_back(e);
}

Trace predicted_trace() {
  Trace t;
  t.meta.source = "predicted";
  t.meta.num_ranks = 2;
  add(t, 0, 0, "F", 0, 0, 10);
  add(t, 0, 0, "F", 1, 10, 20);
  add(t, 0, 0, "B", 0, 40, 60);
  add(t, 0, 0, "B", 1, 60, 80);
  add(t, 1, 0, "F", 0, 10, 20);
  add(t, 1, 0, "B", 0, 20, 40);
  add(t, 1, 0, "F", 1, 40, 50);
  add(t, 1, 0, "B", 1, 50, 70);
  add(t, 1, 2, "RECV_F", 0, 5, 10);
  t.memory = {{0, 0, 100}, {0, 10, 300}, {0, 80, 0}, {1, 10, 200}};
  return t;
}

Trace measured_trace() {
  Trace t;
  t.meta.source = "measured";
  t.meta.num_ranks = 2;
  // Written in a shuffled order: matching goes by start time, not by file order.
  add(t, 1, 3, "OPTIMIZER", -1, 80, 100);
  add(t, 0, 0, "B", 1, 66, 88);
  add(t, 0, 0, "F", 0, 0, 12);
  add(t, 0, 0, "F", 1, 12, 24);
  add(t, 0, 0, "B", 0, 44, 66);
  add(t, 1, 0, "F", 0, 12, 22);
  add(t, 1, 0, "B", 0, 22, 46);
  add(t, 1, 0, "F", 1, 46, 56);
  add(t, 1, 0, "B", 1, 56, 80);
  t.memory = {{0, 0, 400}, {0, 88, 0}, {1, 12, 200}};
  return t;
}

}  // namespace

TEST_CASE("compare_traces reports the hand-computed errors", "[compare]") {
  const Trace p = predicted_trace(), m = measured_trace();
  const Comparison c = compare_traces(p, m, 2);
  REQUIRE(c.iteration_time_predicted_s == Approx(80e-6));
  REQUIRE(c.iteration_time_measured_s == Approx(100e-6));
  REQUIRE(c.iteration_time_error == Approx(-0.2));
  REQUIRE(c.matched.size() == 8);
  REQUIRE(c.unmatched_predicted == 1);
  REQUIRE(c.unmatched_measured == 1);
  REQUIRE(c.mape_operations == 8);
  REQUIRE(c.op_duration_mape == Approx((2.0 / 12 * 2 + 2.0 / 22 * 2 + 4.0 / 24 * 2) / 8));
  REQUIRE(c.op_duration_mape == Approx(0.1060606).epsilon(1e-6));
  REQUIRE(c.op_duration_weighted_error == Approx(16.0 / 136));
  REQUIRE(c.bubble_fraction_predicted == Approx(0.25));
  REQUIRE(c.bubble_fraction_measured == Approx(0.32));
  REQUIRE(c.ranks.size() == 2);
  REQUIRE(c.ranks[0].peak_memory_predicted_bytes == 300);
  REQUIRE(c.ranks[0].peak_memory_measured_bytes == 400);
  REQUIRE(c.ranks[0].peak_memory_error == Approx(-0.25));
  REQUIRE(c.ranks[1].peak_memory_error == 0);
  REQUIRE(c.ranks[1].bubble_fraction_measured == Approx(0.32));

  REQUIRE(c.top_differences.size() == 2);
  const TraceEvent& first = p.events[c.top_differences[0].predicted_index];
  const TraceEvent& second = p.events[c.top_differences[1].predicted_index];
  REQUIRE((first.rank == 1 && first.name == "B" && first.micro_batch == 0));
  REQUIRE((second.rank == 1 && second.name == "B" && second.micro_batch == 1));
  REQUIRE(c.top_differences[0].difference_us() == Approx(-4));  // predicted - measured
  REQUIRE(c.top_differences[0].duration_error() == Approx(-1.0 / 6));
  // Each matched pair joins the same key.
  for (const auto& op : c.matched) {
    const auto &a = p.events[op.predicted_index], &b = m.events[op.measured_index];
    REQUIRE((a.rank == b.rank && a.name == b.name && a.stage == b.stage && a.micro_batch == b.micro_batch));
  }
}

TEST_CASE("the k-th occurrence of a key matches the k-th", "[compare]") {
  // Plain traces without stage or micro-batch: "step" at 0 and 10 predicted, at 11 and 1 measured
  // (file order reversed). The first predicted (5 us) pairs with the measured one at 1 (6 us).
  Trace p, m;
  add(p, 0, 0, "step", -1, 0, 5);
  add(p, 0, 0, "step", -1, 10, 20);
  add(m, 0, 0, "step", -1, 11, 23);
  add(m, 0, 0, "step", -1, 1, 7);
  for (auto* t : {&p, &m})
    for (auto& e : t->events) e.stage = -1;
  const Comparison c = compare_traces(p, m);
  REQUIRE(c.matched.size() == 2);
  REQUIRE(c.matched[0].predicted_dur_us == 5);
  REQUIRE(c.matched[0].measured_dur_us == 6);
  REQUIRE(c.matched[1].measured_dur_us == 12);
  REQUIRE(c.op_duration_mape == Approx((1.0 / 6 + 2.0 / 12) / 2));
}

TEST_CASE("events match by their kind, and events of no kind by their name", "[compare]") {
  // Rank 0, stage 0: predicted F, RECV_F and the operators "zeta" and "alpha" (no kind);
  // measured the same four in another order plus an operator "beta" nobody predicted. The
  // kind-less names sort among the kinds as they like: all four pair, each with its own name,
  // and "beta" is the one unmatched.
  Trace p, m;
  add(p, 0, 0, "zeta", -1, 0, 1);
  add(p, 0, 0, "F", 0, 1, 3);
  add(p, 0, 0, "alpha", -1, 3, 6);
  add(p, 0, 2, "RECV_F", 0, 6, 10);
  add(m, 0, 2, "RECV_F", 0, 0, 5);
  add(m, 0, 0, "beta", -1, 5, 6);
  add(m, 0, 0, "alpha", -1, 6, 10);
  add(m, 0, 0, "F", 0, 10, 13);
  add(m, 0, 0, "zeta", -1, 13, 15);
  const Comparison c = compare_traces(p, m);
  REQUIRE(c.matched.size() == 4);
  CHECK(c.unmatched_predicted == 0);
  CHECK(c.unmatched_measured == 1);
  for (const auto& op : c.matched) {
    const auto &a = p.events[op.predicted_index], &b = m.events[op.measured_index];
    CHECK(a.name == b.name);
    CHECK(a.kind == b.kind);
  }
  CHECK(p.events[c.matched[0].predicted_index].name == "zeta");  // in predicted start order
  CHECK(c.matched[0].measured_dur_us == 2);
}

TEST_CASE("bubble fraction counts overlapping compute events once", "[compare]") {
  // Compute [0,10] and [5,15] on rank 0 over a 20 us iteration: busy 15, bubble 0.25.
  // Rank 1 has no compute events: bubble 1.
  Trace t;
  add(t, 0, 0, "F", 0, 0, 10);
  add(t, 0, 0, "W", 0, 5, 15);
  add(t, 1, 1, "SEND_F", 0, 15, 20);
  REQUIRE(iteration_time_us(t) == 20);
  REQUIRE(bubble_fraction(t, 0, 20) == Approx(0.25));
  REQUIRE(bubble_fraction(t, 1, 20) == 1);
}

TEST_CASE("a trace's recorded step time is its iteration time", "[compare]") {
  // pprun records the step's wall time (events, then gathering its figures): 25 us against
  // events spanning 20 us; without it, or with a value that is not a positive number, the span
  // (a value that is not a number does not read: test_run_description.cpp).
  Trace t;
  add(t, 0, 0, "F", 0, 0, 10);
  add(t, 1, 0, "F", 0, 10, 20);
  t.meta.run.step_time_s = 25e-6;
  CHECK(event_span_us(t) == 20);
  CHECK(iteration_time_us(t) == Approx(25));
  t.meta.run.step_time_s.reset();
  CHECK(iteration_time_us(t) == 20);
  t.meta.run.step_time_s = 0;
  CHECK(iteration_time_us(t) == 20);
}

TEST_CASE("comparison_to_json has the SPEC.md section 7 fields", "[compare]") {
  const Trace p = predicted_trace(), m = measured_trace();
  Trace m_no_memory = m;
  m_no_memory.memory.clear();
  const auto j = comparison_to_json(compare_traces(p, m), p, m);
  for (const char* key :
       {"iteration_time_predicted_s", "iteration_time_measured_s", "iteration_time_error", "op_duration_mape",
        "op_duration_weighted_error", "peak_memory_error", "bubble_fraction_predicted", "bubble_fraction_measured"})
    REQUIRE(j.contains(key));
  REQUIRE(j["iteration_time_error"].get<double>() == Approx(-0.2));
  REQUIRE(j["peak_memory_error"].size() == 2);
  REQUIRE(j["peak_memory_error"][0].get<double>() == Approx(-0.25));
  REQUIRE(j["top_differences"][0]["name"] == "B");
  REQUIRE(j["top_differences"][0]["rank"] == 1);
  // Predicted 300 bytes against nothing measured: the error is undefined, written as null.
  const auto k = comparison_to_json(compare_traces(p, m_no_memory), p, m_no_memory);
  REQUIRE(k["peak_memory_error"][0].is_null());
  REQUIRE(nlohmann::json::parse(k.dump()) == k);
}
