// The split backward of MoE layers under expert parallelism: BackwardInput (I) keeps what its
// all-to-alls brought back, and BackwardWeight (W) takes it instead of exchanging again
// (exec/src/moe/all_to_all.cpp). pprun end to end over loopback, 4 worker processes (2
// pipeline ranks x --dp 2, --expert-parallel 2), Gloo's all-to-all.
// Model: tiny-moe, 4 MoE blocks of 4 experts (top-2, FFN 32), hidden 32, seq 32, micro-batch
// size 4, fp32, one thread per rank; 4 micro-batches, 4 steps, the last traced. The 7 layers
// split uniformly over the V's 4 stages: stage 0 embed + blocks.0, stage 1 blocks.1-2, stage 2
// blocks.3 + norm, stage 3 head; pipeline rank 0 holds stages 0 and 3 (1 block), rank 1 stages
// 1 and 2 (3 blocks).
// Expected, for zbv (every backward split) and dualpipev (its tail split, its F&B steps
// overlapped):
// - every MoE layer's backward exchanges once a micro-batch: on each rank, one
//   ALL_TO_ALL_COMBINE_B and one ALL_TO_ALL_DISPATCH_B per (layer, micro-batch) the forward
//   exchanged for, so blocks x micro-batches x 2 backward events a rank: 1 x 4 x 2 = 8 on
//   pipeline rank 0, 3 x 4 x 2 = 24 on rank 1 (before W kept them, zbv's rank 1 had 48: its Ws
//   exchanged again). No backward exchange lies inside a W of stage 1 or 2 (their I walked the
//   graph); stage 0's I computes nothing (its inputs are token ids), so its W is the whole
//   backward and exchanges there.
// - the losses of one process with the same 8 micro-batches a step within 1e-5 relative (the
//   bound of test_pprun_moe's 1f1b, for the same reasons), and bit for bit those of 1f1b over
//   the same ranks: the weight gradients do not depend on the backward being split.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "pipescope/traces/trace_io.hpp"
#include "pprun_run.hpp"

namespace fs = std::filesystem;
using pprun_test::PprunRun;
using pprun_test::run_pprun;
using pprun_test::work_dir;

namespace {

const std::string kSplitMoeModel =
    "--steps 4 --partition uniform --model tiny-moe --layers 4 --hidden 32 --seq-len 32 "
    "--micro-batch-size 4 --experts 4 --top-k 2 --moe-ffn-hidden 32 --lr 0.01 --quiet --timeout 60";
const std::string kSplitMoeGrid = "--nproc-per-node 4 --dp 2 --expert-parallel 2 --micro-batches 4 ";

struct SplitTracedRun {
  PprunRun run;
  pipescope::traces::Trace trace;
};

const SplitTracedRun& split_traced_run(const std::string& schedule) {
  static std::map<std::string, SplitTracedRun> cache;
  auto it = cache.find(schedule);
  if (it != cache.end()) return it->second;
  const std::string name = "moe-split-" + schedule;
  const fs::path trace_path = work_dir() / (name + "-trace.json");
  fs::remove(trace_path);
  SplitTracedRun out;
  out.run = run_pprun(name, kSplitMoeGrid + "--schedule " + schedule + " --trace-steps 1 --trace " +
                                trace_path.string() + " " + kSplitMoeModel);
  if (out.run.status == 0) out.trace = pipescope::traces::read_trace(trace_path.string());
  return cache.emplace(schedule, std::move(out)).first->second;
}

const PprunRun& split_reference_run(const std::string& name, const std::string& args) {
  static std::map<std::string, PprunRun> cache;
  auto it = cache.find(name);
  if (it == cache.end()) it = cache.emplace(name, run_pprun(name, args + " " + kSplitMoeModel)).first;
  return it->second;
}

// (rank, layer, micro-batch, exchange name) -> how many the trace holds.
using ExchangeKey = std::tuple<int, std::string, int, std::string>;

std::map<ExchangeKey, int> exchanges_by_layer(const pipescope::traces::Trace& trace) {
  std::map<std::size_t, std::string> layer_of;
  for (const auto& a : trace.args) {
    const auto j = nlohmann::json::parse(a.json);
    if (j.contains("layer") && j.at("layer").is_string()) layer_of[a.event] = j.at("layer").get<std::string>();
  }
  std::map<ExchangeKey, int> out;
  for (std::size_t i = 0; i < trace.events.size(); ++i) {
    const auto& e = trace.events[i];
    if (!pipescope::traces::is_all_to_all(e.kind)) continue;
    REQUIRE(layer_of.count(i) == 1);
    ++out[{e.rank, layer_of.at(i), e.micro_batch, e.name}];
  }
  return out;
}

void check_one_backward_exchange_each(const SplitTracedRun& traced) {
  const auto exchanges = exchanges_by_layer(traced.trace);
  std::map<int, int> backward_by_rank;
  for (const auto& [key, count] : exchanges) {
    const auto& [rank, layer, micro_batch, name] = key;
    INFO(fmt::format("rank {} {} micro-batch {} {}", rank, layer, micro_batch, name));
    CHECK(count == 1);
    if (name == "ALL_TO_ALL_DISPATCH_F") {
      CHECK(exchanges.count({rank, layer, micro_batch, "ALL_TO_ALL_COMBINE_B"}) == 1);
      CHECK(exchanges.count({rank, layer, micro_batch, "ALL_TO_ALL_DISPATCH_B"}) == 1);
    }
    if (name.back() == 'B') backward_by_rank[rank] += count;
  }
  REQUIRE(backward_by_rank.size() == 4);
  for (const auto& [rank, count] : backward_by_rank) {
    INFO("rank " << rank);
    CHECK(count == (rank % 2 == 0 ? 1 * 4 * 2 : 3 * 4 * 2));
  }
}

// No backward exchange inside a W whose I walked the graph (stages 1 and 2 take token states).
void check_no_exchange_in_inner_w(const SplitTracedRun& traced) {
  int inner_w = 0;
  for (const auto& w : traced.trace.events) {
    if (w.kind != pipescope::traces::EventKind::BackwardWeight || w.stage == 0) continue;
    ++inner_w;
    for (const auto& a : traced.trace.events) {
      if (!pipescope::traces::is_all_to_all(a.kind) || a.rank != w.rank || a.stage != w.stage ||
          a.micro_batch != w.micro_batch)
        continue;
      INFO(fmt::format("rank {} W{} of stage {}: {}", w.rank, w.micro_batch, w.stage, a.name));
      CHECK_FALSE((a.ts_us >= w.ts_us && a.end_us() <= w.end_us()));
    }
  }
  CHECK(inner_w > 0);
}

}  // namespace

TEST_CASE("zbv and dualpipev with experts exchange once per MoE layer and micro-batch in the backward") {
  for (const char* schedule : {"zbv", "dualpipev"}) {
    INFO(schedule);
    const SplitTracedRun& traced = split_traced_run(schedule);
    INFO(traced.run.err);
    REQUIRE(traced.run.status == 0);
    check_one_backward_exchange_each(traced);
    check_no_exchange_in_inner_w(traced);
  }
}

TEST_CASE("zbv and dualpipev with experts keep the losses of one process and of 1f1b") {
  const PprunRun& one =
      split_reference_run("moe-split-one", "--nproc-per-node 1 --schedule data-parallel --micro-batches 8");
  const PprunRun& plain = split_reference_run("moe-split-1f1b", kSplitMoeGrid + "--schedule 1f1b");
  INFO(one.err);
  INFO(plain.err);
  REQUIRE(one.status == 0);
  REQUIRE(plain.status == 0);
  REQUIRE(one.losses.size() == 4);
  REQUIRE(plain.losses.size() == 4);
  for (const char* schedule : {"zbv", "dualpipev"}) {
    INFO(schedule);
    const SplitTracedRun& traced = split_traced_run(schedule);
    INFO(traced.run.err);
    REQUIRE(traced.run.status == 0);
    REQUIRE(traced.run.losses.size() == 4);
    for (std::size_t i = 0; i < 4; ++i) {
      CHECK(traced.run.losses[i] == Approx(one.losses[i]).epsilon(1e-5));
      CHECK(traced.run.losses[i] == plain.losses[i]);
    }
  }
}
