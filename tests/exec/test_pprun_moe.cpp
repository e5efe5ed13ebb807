// tiny-moe and expert parallelism: the model on its own (one process, in memory) and pprun end
// to end (real worker processes over loopback, Gloo's all-to-all).
// Model: tiny-moe, 2 MoE blocks of 4 experts (top-2, FFN 32) and a shared expert (FFN 16),
// hidden 32, on the default corpus (byte tokens), seq 32, micro-batch size 4, fp32, one thread
// per rank.
// Expected:
// - the spec: 5 layers; a block holds the router, the shared expert and every expert by id
//   (layer1.expert3.fc1.weight) when E = 1, and only its half (experts 2 and 3 on ep rank 1) when
//   E = 2; the forward of the whole model gives a finite loss near ln(256) at initialisation; an
//   unconnected E = 2 block refuses to run, naming itself.
// - is_expert_parameter: expert<ID> parameters only (not the shared expert, not the router).
// - learning, over 2 ranks (1f1b): the losses of one process bit for bit (E = 1 changes nothing
//   between micro-batches), and the last of 8 steps more than 0.5 below the first.
// - expert parallelism, EP = 2 x pipeline 2 (4 ranks, --dp 2 --expert-parallel 2): the losses of
//   one process with the same 8 micro-batches per step within 1e-5 relative. Not bitwise: each
//   expert's weight gradient is one matrix product over the tokens of both replicas (the
//   single process sums one per micro-batch), and the replicas' dense gradients are summed by
//   an all-reduce (as --dp without experts, which test_pprun checks to the same bound).
// - its trace: ALL_TO_ALL_DISPATCH_F, ALL_TO_ALL_COMBINE_F, ALL_TO_ALL_DISPATCH_B and
//   ALL_TO_ALL_COMBINE_B, 16 each (2 replicas x 4 micro-batches x 2 blocks), on the Collective
//   lane, category collective, with bytes; their further args (read back into Trace::args)
//   name the 2 peers and hold the routing histogram (4 experts, summing to the 4 x 32 x 2 assignments of a
//   micro-batch); the expert-call probe from every rank (4), each holding one MoE layer (blocks.0
//   on stage 0, blocks.1 on stage 1, as the trace's stage bounds say): its first local expert
//   forward and backward at the same 4 distinct row counts, the largest 8 times the smallest
//   (within rounding), 5 timings above 0 at each.
// - a checkpoint saved at E = 2 (2 ranks, --dp 2) resumes at E = 1 with the losses of the
//   uninterrupted E = 2 run within 1e-5 (experts are stored by id, found in the file of the
//   replica that held them).
// - refusals, one line and exit 2 before any worker: E that does not divide --dp or --experts,
//   top-k above the experts, expert options on another model.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "pipescope/core/errors.hpp"
#include "pipescope/exec/expert_parallel.hpp"
#include "pipescope/exec/model.hpp"
#include "pipescope/traces/trace_io.hpp"
#include "pprun_run.hpp"

namespace fs = std::filesystem;
using pipescope::exec::is_expert_parameter;
using pipescope::exec::ModelConfig;
using pipescope::exec::StageModule;
using pprun_test::PprunRun;
using pprun_test::run_pprun;
using pprun_test::work_dir;

namespace {

const std::string kMoe =
    "--model tiny-moe --layers 2 --hidden 32 --seq-len 32 --micro-batch-size 4 --experts 4 --top-k 2 --moe-ffn-hidden "
    "32 "
    "--shared-expert-ffn-hidden 16 --lr 0.01 --quiet --timeout 30";

const PprunRun& cached_moe_run(const std::string& name, const std::string& args) {
  static std::map<std::string, PprunRun> cache;
  auto it = cache.find(name);
  if (it == cache.end()) it = cache.emplace(name, run_pprun(name, args)).first;
  return it->second;
}

ModelConfig moe_config(int expert_parallel) {
  ModelConfig c;
  c.name = "tiny-moe";
  c.layers = 2;
  c.hidden = 32;
  c.seq_len = 8;
  c.vocab = 64;
  c.micro_batch_size = 2;
  c.experts = 4;
  c.top_k = 2;
  c.moe_ffn_hidden = 32;
  c.shared_expert_ffn_hidden = 16;
  c.expert_parallel = expert_parallel;
  return c;
}

bool holds_parameter_named(const StageModule& module, const std::string& name) {
  for (const auto& p : module.parameters())
    if (p.name == name) return true;
  return false;
}

int moe_refusal_lines(const std::string& text) { return static_cast<int>(std::count(text.begin(), text.end(), '\n')); }

}  // namespace

TEST_CASE("tiny-moe: experts by id, a finite loss, and an unconnected expert parallelism refused") {
  const auto spec = pipescope::exec::make_model_spec(moe_config(1));
  REQUIRE(spec.layers.size() == 5);
  REQUIRE(spec.expert_parallel);
  StageModule whole(spec, 0, 5);
  for (int e = 0; e < 4; ++e) CHECK(holds_parameter_named(whole, fmt::format("layer1.expert{}.fc1.weight", e)));
  CHECK(holds_parameter_named(whole, "layer2.router.weight"));
  CHECK(holds_parameter_named(whole, "layer2.shared_expert.fc2.bias"));
  const auto batch = pipescope::exec::make_micro_batch(spec.config, 0);
  const double loss = spec.loss(whole.forward(batch.inputs), batch.labels).item<double>();
  CHECK(std::isfinite(loss));
  CHECK(loss == Approx(std::log(64.0)).epsilon(0.2));

  const auto halves = pipescope::exec::make_model_spec(moe_config(2));
  StageModule block(halves, 1, 2);
  CHECK(holds_parameter_named(block, "layer1.expert0.fc1.weight"));  // ep rank 0 until connected
  CHECK_FALSE(holds_parameter_named(block, "layer1.expert2.fc1.weight"));
  // Its experts are those of E = 1, seeded by id.
  StageModule whole_block(spec, 1, 2);
  for (const auto& p : block.parameters())
    for (const auto& q : whole_block.parameters())
      if (p.name == q.name) CHECK(at::equal(p.tensor, q.tensor));
  auto hidden = at::randn({2, 8, 32});
  CHECK_THROWS_WITH(block.forward({hidden}),
                    Catch::Contains("MoE layer 'blocks.0': expert parallelism 2 is not connected"));
}

TEST_CASE("is_expert_parameter tells the experts from the dense parameters") {
  CHECK(is_expert_parameter("layer3.expert5.fc1.weight"));
  CHECK(is_expert_parameter("layer10.expert12.fc2.bias"));
  CHECK_FALSE(is_expert_parameter("layer3.shared_expert.fc1.weight"));
  CHECK_FALSE(is_expert_parameter("layer3.router.weight"));
  CHECK_FALSE(is_expert_parameter("layer3.experts"));
}

TEST_CASE("pprun --model tiny-moe learns on the default corpus, pipelined as in one process") {
  const PprunRun& one =
      cached_moe_run("moe-one", "--nproc-per-node 1 --schedule data-parallel --micro-batches 4 --steps 8 " + kMoe);
  INFO(one.err);
  REQUIRE(one.status == 0);
  REQUIRE(one.losses.size() == 8);
  CHECK(one.losses.front() - one.losses.back() > 0.5);
  const PprunRun& two =
      cached_moe_run("moe-1f1b-2", "--nproc-per-node 2 --schedule 1f1b --micro-batches 4 --steps 8 " + kMoe);
  INFO(two.err);
  REQUIRE(two.status == 0);
  REQUIRE(two.losses.size() == 8);
  for (std::size_t i = 0; i < 8; ++i) CHECK(two.losses[i] == one.losses[i]);
  CHECK(two.losses.front() - two.losses.back() > 0.5);
}

TEST_CASE("pprun --expert-parallel 2 x pipeline 2 gives the losses of one process, and traces its all-to-all") {
  const PprunRun& one =
      cached_moe_run("moe-one-8", "--nproc-per-node 1 --schedule data-parallel --micro-batches 8 --steps 4 " + kMoe);
  INFO(one.err);
  REQUIRE(one.status == 0);
  const fs::path trace_path = work_dir() / "moe-ep2-trace.json";
  fs::remove(trace_path);
  const PprunRun& ep = cached_moe_run("moe-ep2xpp2",
                                      "--nproc-per-node 4 --dp 2 --expert-parallel 2 --schedule 1f1b --micro-batches 4 "
                                      "--steps 4 --trace-steps 1 --trace " +
                                          trace_path.string() + " " + kMoe);
  INFO(ep.err);
  REQUIRE(ep.status == 0);
  REQUIRE(ep.losses.size() == 4);
  REQUIRE(one.losses.size() == 4);
  for (std::size_t i = 0; i < 4; ++i) CHECK(ep.losses[i] == Approx(one.losses[i]).epsilon(1e-5));
  CHECK(ep.losses.front() > ep.losses.back());

  const auto trace = pipescope::traces::read_trace(trace_path.string());
  // The args beyond the typed fields, by event, as the reader gives them back.
  std::map<std::size_t, nlohmann::json> args_by_event;
  for (const auto& a : trace.args) args_by_event[a.event] = nlohmann::json::parse(a.json);
  // The 64 exchanges, and the 32 passes (4 ranks x 4 F and 4 B) with their experts' calls.
  CHECK(args_by_event.size() == 64 + 32);
  std::map<std::string, int> counts;
  for (std::size_t i = 0; i < trace.events.size(); ++i) {
    const auto& e = trace.events[i];
    if (e.name == "F" || e.name == "B") {
      REQUIRE(args_by_event.count(i) == 1);
      const auto& calls = args_by_event.at(i).at("expert_calls");
      CHECK_FALSE(calls.empty());
      for (const auto& call : calls) CHECK(call.at("us").get<double>() >= 0);
      ++counts[e.name];
    }
    if (e.name.rfind("ALL_TO_ALL_", 0) != 0) continue;
    ++counts[e.name];
    CHECK(e.lane == static_cast<int>(pipescope::traces::Lane::AllToAll));
    CHECK(e.category == "collective");
    CHECK(pipescope::traces::is_all_to_all(e.kind));
    CHECK(e.bytes >= 0);
    REQUIRE(args_by_event.count(i) == 1);
    const auto& j = args_by_event.at(i);
    CHECK(j.at("peers").size() == 2);
    CHECK(j.at("rows_sent").size() == 2);
    const auto histogram = j.at("tokens_per_expert").get<std::vector<std::int64_t>>();
    REQUIRE(histogram.size() == 4);
    std::int64_t assignments = 0;
    for (auto c : histogram) assignments += c;
    CHECK(assignments == 4 * 32 * 2);
  }
  for (const char* name :
       {"ALL_TO_ALL_DISPATCH_F", "ALL_TO_ALL_COMBINE_F", "ALL_TO_ALL_DISPATCH_B", "ALL_TO_ALL_COMBINE_B"}) {
    INFO(name);
    CHECK(counts[name] == 16);
  }
  CHECK(counts["F"] == 16);
  CHECK(counts["B"] == 16);

  // The expert-call probe: each rank's entries follow the previous rank's, one MoE layer a rank.
  const auto& run = trace.meta.run;
  REQUIRE(run.expert_call_probe);
  REQUIRE(run.layers);
  REQUIRE(run.stage_bounds);
  std::map<std::string, int> stage_of_layer;
  for (std::size_t s = 0; s + 1 < run.stage_bounds->size(); ++s)
    for (int l = run.stage_bounds->at(s); l < run.stage_bounds->at(s + 1); ++l)
      stage_of_layer[run.layers->at(static_cast<std::size_t>(l)).name] = static_cast<int>(s);
  CHECK(stage_of_layer.at("blocks.0") == 0);
  CHECK(stage_of_layer.at("blocks.1") == 1);
  struct RanksProbe {
    int stage;
    std::string layer;
    std::vector<std::int64_t> forward_rows, backward_rows;
  };
  std::vector<RanksProbe> by_rank;
  for (const auto& p : *run.expert_call_probe) {
    INFO(p.layer << (p.backward ? " backward " : " forward ") << p.rows);
    CHECK(p.stage == stage_of_layer.at(p.layer));
    CHECK(p.us.size() == 5);
    for (const double us : p.us) CHECK(us > 0);
    if (by_rank.empty() || by_rank.back().stage != p.stage || by_rank.back().layer != p.layer)
      by_rank.push_back({p.stage, p.layer, {}, {}});
    (p.backward ? by_rank.back().backward_rows : by_rank.back().forward_rows).push_back(p.rows);
  }
  REQUIRE(by_rank.size() == 4);
  std::map<std::string, int> ranks_of_layer;
  for (const auto& rank : by_rank) {
    INFO(rank.layer);
    ++ranks_of_layer[rank.layer];
    CHECK(rank.backward_rows == rank.forward_rows);
    REQUIRE(rank.forward_rows.size() == 4);
    for (std::size_t i = 1; i < 4; ++i) CHECK(rank.forward_rows[i] > rank.forward_rows[i - 1]);
    const double spread =
        static_cast<double>(rank.forward_rows.back()) / static_cast<double>(rank.forward_rows.front());
    CHECK(spread == Approx(8).epsilon(0.1));
  }
  CHECK(ranks_of_layer == std::map<std::string, int>{{"blocks.0", 2}, {"blocks.1", 2}});
}

TEST_CASE("a checkpoint saved at --expert-parallel 2 resumes at 1 with the same losses") {
  const std::string grid = "--nproc-per-node 2 --dp 2 --schedule data-parallel --micro-batches 2 ";
  const PprunRun& full = cached_moe_run("moe-ep2-full", grid + "--expert-parallel 2 --steps 4 " + kMoe);
  INFO(full.err);
  REQUIRE(full.status == 0);
  REQUIRE(full.losses.size() == 4);
  const fs::path dir = work_dir() / "moe-ep-checkpoints";
  fs::remove_all(dir);
  const PprunRun first =
      run_pprun("moe-ep2-first", grid + "--expert-parallel 2 --steps 2 --checkpoint-dir " + dir.string() + " " + kMoe);
  INFO(first.err);
  REQUIRE(first.status == 0);
  REQUIRE(first.losses.size() == 2);
  for (std::size_t i = 0; i < 2; ++i) CHECK(first.losses[i] == full.losses[i]);
  const PprunRun resumed = run_pprun(
      "moe-ep1-resumed", grid + "--expert-parallel 1 --steps 4 --resume --checkpoint-dir " + dir.string() + " " + kMoe);
  INFO(resumed.err);
  REQUIRE(resumed.status == 0);
  REQUIRE(resumed.losses.size() == 2);
  CHECK(resumed.steps.front() == 2);
  for (std::size_t i = 0; i < 2; ++i) CHECK(resumed.losses[i] == Approx(full.losses[i + 2]).epsilon(1e-5));
}

TEST_CASE("expert options that do not fit are refused before any worker starts") {
  struct Refusal {
    std::string args, expected;
  };
  const std::vector<Refusal> cases = {
      {"--nproc-per-node 2 --model tiny-moe --expert-parallel 2",
       "option --expert-parallel 2: does not divide the data-parallel size --dp 1"},
      {"--nproc-per-node 2 --dp 2 --model tiny-moe --experts 3 --top-k 1 --expert-parallel 2",
       "option --expert-parallel 2: does not divide --experts 3"},
      {"--nproc-per-node 1 --model tiny-moe --experts 4 --top-k 5", "option --top-k 5: more than the 4 expert(s)"},
      {"--nproc-per-node 1 --model tiny-gpt --experts 4", "option --experts: only --model tiny-moe has experts"},
  };
  for (const auto& [args, expected] : cases) {
    const PprunRun run = run_pprun("moe-refused", args);
    INFO(args);
    CHECK(run.status == 2);
    CHECK_THAT(run.err, Catch::StartsWith("pprun: error: "));
    CHECK_THAT(run.err, Catch::Contains(expected));
    CHECK(moe_refusal_lines(run.err) == 1);
  }
}
