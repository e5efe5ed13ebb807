// dualpipev's overlapped F&B steps run for real (exec/src/runtime/compute_baton.cpp,
// paired_steps.cpp): pprun end to end over loopback, 4 worker processes (2 pipeline ranks x
// --dp 2, --expert-parallel 2), Gloo's all-to-all.
// Model: tiny-moe, 4 MoE blocks of 4 experts (top-2, FFN 32), hidden 32, seq 32, micro-batch
// size 4, fp32, one thread per rank; dualpipev, 4 micro-batches, 4 steps, the last traced; the
// 7 layers split uniformly over the 4 stages, so rank 1's stages (1 and 2) hold MoE blocks.
// Expected:
// - the losses with the pairs overlapped equal those with --no-overlap-moe-comm bit for bit:
//   each pass computes what it computed alone, and the weight gradients are summed in
//   micro-batch order whatever order the passes end in.
// - the overlapped run's trace: run description overlapped_steps true; every rank ran its
//   pairs (3 per rank here), each pass of a pair naming the other and when it computed; on a
//   rank no two of those compute intervals overlap (one pass computes at a time), each lies in
//   its pass; on some rank an all-to-all of one micro-batch's pass lies inside the span of the
//   other pass of its pair, and that other pass computed while the exchange was on the wire.
//   All-to-all events name the stage and micro-batch of their pass. (That an exchange's event
//   ends when its bytes are in, not when its pass computes again, depends here on the machine's
//   load; test_moe_overlapped_exchange.cpp settles it.)
// - --no-overlap-moe-comm: overlapped_steps false, no compute events overlap on a rank.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "pipescope/traces/trace_io.hpp"
#include "pprun_run.hpp"

namespace fs = std::filesystem;
using pprun_test::PprunRun;
using pprun_test::run_pprun;
using pprun_test::work_dir;

namespace {

const std::string kOverlapRun =
    "--nproc-per-node 4 --dp 2 --expert-parallel 2 --schedule dualpipev --micro-batches 4 --steps 4 --trace-steps 1 "
    "--partition uniform --model tiny-moe --layers 4 --hidden 32 --seq-len 32 --micro-batch-size 4 --experts 4 "
    "--top-k 2 --moe-ffn-hidden 32 --lr 0.01 --quiet --timeout 60";

struct TracedRun {
  PprunRun run;
  pipescope::traces::Trace trace;
};

const TracedRun& traced_run(bool overlapped) {
  static std::map<bool, TracedRun> cache;
  auto it = cache.find(overlapped);
  if (it != cache.end()) return it->second;
  const std::string name = overlapped ? "moe-dualpipev-overlapped" : "moe-dualpipev-serial";
  const fs::path trace_path = work_dir() / (name + "-trace.json");
  fs::remove(trace_path);
  TracedRun out;
  out.run = run_pprun(name, kOverlapRun + " --trace " + trace_path.string() +
                                (overlapped ? std::string() : std::string(" --no-overlap-moe-comm")));
  if (out.run.status == 0) out.trace = pipescope::traces::read_trace(trace_path.string());
  return cache.emplace(overlapped, std::move(out)).first->second;
}

bool is_pass(const pipescope::traces::TraceEvent& e) {
  return e.lane == static_cast<int>(pipescope::traces::Lane::Compute) &&
         (e.name == "F" || e.name == "B" || e.name == "I" || e.name == "W");
}

using Interval = std::pair<double, double>;

// The overlapped passes of a trace: event index -> its args.
std::map<std::size_t, nlohmann::json> overlapped_passes(const pipescope::traces::Trace& trace) {
  std::map<std::size_t, nlohmann::json> out;
  for (const auto& a : trace.args) {
    auto j = nlohmann::json::parse(a.json);
    if (j.contains("computing_us")) out[a.event] = std::move(j);
  }
  return out;
}

}  // namespace

TEST_CASE("dualpipev's overlapped F&B steps give the losses of the passes run one after the other, bit for bit") {
  const TracedRun& overlapped = traced_run(true);
  const TracedRun& serial = traced_run(false);
  INFO(overlapped.run.err);
  INFO(serial.run.err);
  REQUIRE(overlapped.run.status == 0);
  REQUIRE(serial.run.status == 0);
  REQUIRE(overlapped.run.losses.size() == 4);
  REQUIRE(serial.run.losses.size() == 4);
  for (std::size_t i = 0; i < 4; ++i) CHECK(overlapped.run.losses[i] == serial.run.losses[i]);
  CHECK(overlapped.run.losses.front() > overlapped.run.losses.back());
}

TEST_CASE("an overlapped step computes one pass at a time, the other pass computing while an all-to-all is out") {
  const TracedRun& overlapped = traced_run(true);
  INFO(overlapped.run.err);
  REQUIRE(overlapped.run.status == 0);
  const auto& trace = overlapped.trace;
  REQUIRE(trace.meta.run.overlapped_steps == true);
  const auto passes = overlapped_passes(trace);
  // 3 pairs on each of the 4 ranks.
  CHECK(passes.size() == 4 * 3 * 2);
  std::map<int, std::vector<Interval>> computing_by_rank;
  for (const auto& [index, args] : passes) {
    const auto& e = trace.events.at(index);
    REQUIRE(is_pass(e));
    CHECK(args.at("overlapped_with").get<std::string>().size() >= 3);
    REQUIRE_FALSE(args.at("computing_us").empty());
    for (const auto& span : args.at("computing_us")) {
      const Interval at{e.ts_us + span.at(0).get<double>(), e.ts_us + span.at(1).get<double>()};
      CHECK(at.first <= at.second);
      CHECK(at.first >= e.ts_us - 1);
      CHECK(at.second <= e.end_us() + 1);
      computing_by_rank[e.rank].push_back(at);
    }
  }
  for (auto& [rank, intervals] : computing_by_rank) {
    INFO("rank " << rank);
    std::sort(intervals.begin(), intervals.end());
    for (std::size_t i = 1; i < intervals.size(); ++i) CHECK(intervals[i].first >= intervals[i - 1].second);
  }
  // An exchange of one pass inside the span of its pair's other pass, which computed meanwhile.
  int hidden = 0;
  for (const auto& a : trace.events) {
    if (!pipescope::traces::is_all_to_all(a.kind)) continue;
    REQUIRE(a.stage >= 0);
    REQUIRE(a.micro_batch >= 0);
    const bool forward = a.name.back() == 'F';
    const auto own = std::find_if(passes.begin(), passes.end(), [&](const auto& pass) {
      const auto& e = trace.events.at(pass.first);
      return e.rank == a.rank && e.stage == a.stage && e.micro_batch == a.micro_batch && (e.name == "F") == forward &&
             e.ts_us <= a.ts_us + 1 && a.end_us() <= e.end_us() + 1;
    });
    if (own == passes.end()) continue;  // a pass run alone
    for (const auto& [index, args] : passes) {
      const auto& other = trace.events.at(index);
      if (index == own->first || other.rank != a.rank) continue;
      if (!(other.ts_us <= a.ts_us && a.end_us() <= other.end_us())) continue;
      for (const auto& span : args.at("computing_us"))
        if (other.ts_us + span.at(0).get<double>() < a.end_us() && other.ts_us + span.at(1).get<double>() > a.ts_us)
          ++hidden;
    }
  }
  CHECK(hidden > 0);
}

TEST_CASE("--no-overlap-moe-comm runs the pairs one pass after the other, and says so") {
  const TracedRun& serial = traced_run(false);
  INFO(serial.run.err);
  REQUIRE(serial.run.status == 0);
  const auto& trace = serial.trace;
  CHECK(trace.meta.run.overlapped_steps == false);
  CHECK(overlapped_passes(trace).empty());
  std::map<int, std::vector<Interval>> by_rank;
  for (const auto& e : trace.events)
    if (is_pass(e)) by_rank[e.rank].push_back({e.ts_us, e.end_us()});
  for (auto& [rank, spans] : by_rank) {
    INFO("rank " << rank);
    std::sort(spans.begin(), spans.end());
    for (std::size_t i = 1; i < spans.size(); ++i) CHECK(spans[i].first >= spans[i - 1].second - 1);
  }
}
