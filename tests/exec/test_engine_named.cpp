// PipelineEngine with named tensors (dict layers) and non-adjacent skip connections, on in-process
// ranks over the fake transport, fp32, one thread per rank, 4 micro-batches of 2 sequences of 6
// tokens (vocab 24, hidden 16), 3 steps, compared with 1-rank gradient accumulation.
// Expected:
// - dicts: embed | block0 block1 block2 | head, each a dict layer; embed takes {tokens, mask} (the
//   data loader's unnamed tensors take the keys in order) and gives {hidden (float), mask (bool),
//   ids (long)}; the head gives {logits}. 2-rank 1f1b split at block1 gives bit for bit the
//   single-process losses, with shape headers (names travel in them) and with declared static
//   shapes that name the entries. block0 giving {hidden, attention_mask, ids} fails on rank 1
//   with "stage 1 (layers 2..4, 'block1' .. 'head') receives the keys [hidden, attention_mask, ids]
//   from stage 0, but its layer 'block1' takes [hidden, mask, ids]: no key 'mask'", and in one
//   process with "layer 'block1' (layer 2) takes the keys ...: no key 'mask'".
// - skips: embed stashes 'early' (float) and 'ids' (long), popped by block2; block0 stashes 'mid',
//   popped by block1; block2 stashes 'late', popped by the head. Split {embed block0 | block1 |
//   block2 head} on 3 ranks: 'early' and 'ids' go Direct from stage 0 to stage 2, 'mid' rides with
//   the activation to stage 1, 'late' stays in stage 2. 3-rank 1f1b and gpipe give bit for bit
//   the single-process losses (eval_batch first: the first step's loss); rank 0's program has 4
//   SendActivation(stage 0, peer 2) and 4 RecvGrad(stage 0, peer 2); its trace 4 SEND_F and 4
//   RECV_B with peer rank 2, rank 2's 4 RECV_F and 4 SEND_B with peer rank 0; rank 1 receives
//   only hidden + mask (780 bytes) and 'mid' (768 bytes) per micro-batch, plus the shape headers
//   on micro-batch 0 (96 + 64 bytes): 1708, 1548, 1548, 1548. With 'early' popped by block1
//   instead (stage 0 to 1 adjacent, on 2 ranks), nothing is added to the schedule. zb-h1 on 3
//   ranks (split backward) matches within 1e-6 relative; zbv on 2 ranks (stages 0, 3 on rank 0,
//   1, 2 on rank 1) keeps every skip in memory (schedule unchanged), within 1e-6.
// - the same over real processes (Gloo on loopback, this test program started as its workers),
//   with the sequence length 5, 6, 7 in steps 0, 1, 2 (shape headers once per batch): 3-process
//   1f1b and gpipe with the skip model, 2-process 1f1b with the dict model, losses bit for bit
//   those of one in-process rank; rank 0 of the skip runs counts 4 SEND_F to rank 2 per step.
//   The dict model with sequence length 6 + (sample index % 2) (shapes changing inside a batch)
//   fails with exit status 1 and rank 0's "micro-batch 1: output tensor 0 'hidden' is [2, 7, 16]
//   Float, but ... says [2, 6, 16] Float 'hidden'" naming EngineOptions::shapes_per_micro_batch;
//   with that option on it trains bit for bit like one in-process rank.
// - skip declaration errors: a pop with no stash, a stash never popped, and activation
//   checkpointing with skips are refused naming the layer and the skip.
#include <catch2/catch.hpp>

#include <ATen/Parallel.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>

#include "pipescope/core/errors.hpp"
#include "pipescope/core/registry.hpp"
#include "pipescope/exec/distributed.hpp"
#include "pipescope/exec/engine.hpp"

#include "in_process_ranks.hpp"

using namespace pipescope;
using namespace pipescope::exec;
using namespace std::chrono_literals;

namespace {

constexpr int kNamedVocab = 24, kNamedHidden = 16, kNamedBatch = 2, kSeq = 6;

MicroBatch named_sample(std::int64_t index, int seq_len = kSeq) {
  auto row = at::arange(kNamedBatch, at::kLong).unsqueeze(1), pos = at::arange(seq_len + 1, at::kLong).unsqueeze(0);
  auto tokens = (row * 7 + index * 5 + pos * (row + 1 + index % 3)).remainder(kNamedVocab);
  auto mask = (pos.slice(1, 0, seq_len) < seq_len - index % 2).expand({kNamedBatch, seq_len}).contiguous();
  return {{tokens.slice(1, 0, seq_len).contiguous(), mask}, tokens.slice(1, 1, seq_len + 1).contiguous()};
}

at::Tensor loss_of(const TensorList& out, const at::Tensor& labels) {
  return at::cross_entropy_loss(out[0].reshape({-1, kNamedVocab}), labels.reshape({-1}));
}

// ---- dict model ---------------------------------------------------------------------------
PipelineModule dict_module(const std::string& block0_mask_key = "mask") {
  PipelineModule m(21);
  m.add("embed", [] {
    return make_dict_layer(torch::nn::Embedding(kNamedVocab, kNamedHidden), {"tokens", "mask"},
                           [](torch::nn::Embedding& e, const TensorDict& x) {
                             TensorDict out;
                             out.insert("hidden", e(x["tokens"]));
                             out.insert("mask", x["mask"]);
                             out.insert("ids", x["tokens"]);
                             return out;
                           });
  });
  for (int i = 0; i < 3; ++i)
    m.add("block" + std::to_string(i), [mask_key = i == 0 ? block0_mask_key : std::string("mask")] {
      return make_dict_layer(torch::nn::Linear(kNamedHidden, kNamedHidden), {"hidden", "mask", "ids"},
                             [mask_key](torch::nn::Linear& fc, const TensorDict& x) {
                               const at::Tensor& h = x["hidden"];
                               TensorDict out;
                               out.insert("hidden", h + at::tanh(fc(h)) * x["mask"].unsqueeze(-1) +
                                                        0.01 * x["ids"].remainder(3).to(at::kFloat).unsqueeze(-1));
                               out.insert(mask_key, x["mask"]);
                               out.insert("ids", x["ids"]);
                               return out;
                             });
    });
  m.add("head", [] {
    return make_dict_layer(torch::nn::Linear(kNamedHidden, kNamedVocab), {"hidden", "mask", "ids"},
                           [](torch::nn::Linear& fc, const TensorDict& x) {
                             TensorDict out;
                             out.insert("logits", fc(x["hidden"]));
                             return out;
                           });
  });
  m.set_loss(loss_of);
  return m;
}

// The dict model's boundaries, named.
std::vector<std::vector<TensorSpec>> dict_shapes() {
  std::vector<std::vector<TensorSpec>> shapes;
  shapes.push_back({{{kNamedBatch, kSeq}, at::kLong, "tokens"}, {{kNamedBatch, kSeq}, at::kBool, "mask"}});
  for (int b = 1; b <= 4; ++b)
    shapes.push_back({{{kNamedBatch, kSeq, kNamedHidden}, at::kFloat, "hidden"}, {{kNamedBatch, kSeq}, at::kBool, "mask"}, {{kNamedBatch, kSeq}, at::kLong, "ids"}});
  shapes.push_back({{{kNamedBatch, kSeq, kNamedVocab}, at::kFloat, "logits"}});
  return shapes;
}

// ---- skip model ---------------------------------------------------------------------------
// `early_to`: the layer that pops 'early' ("block2": stage 0 to 2; "block1": adjacent).
PipelineModule skip_module(const std::string& early_to = "block2") {
  PipelineModule m(31);
  LayerOptions embed_options;
  embed_options.stash = {"early", "ids"};
  m.add("embed", [] {
    return make_layer(torch::nn::Embedding(kNamedVocab, kNamedHidden), [](torch::nn::Embedding& e, const TensorList& x) {
      at::Tensor h = e(x[0]);
      return TensorList{h, x[1], at::tanh(h), x[0]};
    });
  }, embed_options);
  LayerOptions block0_options;
  block0_options.stash = {"mid"};
  m.add("block0", [] {
    return make_layer(torch::nn::Linear(kNamedHidden, kNamedHidden), [](torch::nn::Linear& fc, const TensorList& x) {
      at::Tensor h = x[0] + at::tanh(fc(x[0])) * x[1].unsqueeze(-1);
      return TensorList{h, x[1], at::sigmoid(h)};
    });
  }, block0_options);
  LayerOptions block1_options;
  block1_options.pop = {"mid"};
  if (early_to == "block1") block1_options.pop.push_back("early");
  m.add("block1", [pops_early = early_to == "block1"] {
    return make_layer(torch::nn::Linear(kNamedHidden, kNamedHidden), [pops_early](torch::nn::Linear& fc, const TensorList& x) {
      at::Tensor h = x[0] + at::tanh(fc(x[0])) * x[2];
      if (pops_early) h = h + x[3];
      return TensorList{h, x[1]};
    });
  }, block1_options);
  LayerOptions block2_options;
  if (early_to == "block2") block2_options.pop = {"early", "ids"};
  else block2_options.pop = {"ids"};
  block2_options.stash = {"late"};
  m.add("block2", [pops_early = early_to == "block2"] {
    return make_layer(torch::nn::Linear(kNamedHidden, kNamedHidden), [pops_early](torch::nn::Linear& fc, const TensorList& x) {
      const at::Tensor& ids = pops_early ? x[3] : x[2];
      at::Tensor h = x[0] + at::tanh(fc(x[0])) * x[1].unsqueeze(-1) + 0.01 * ids.remainder(3).to(at::kFloat).unsqueeze(-1);
      if (pops_early) h = h + x[2];
      return TensorList{h, x[1], h * 0.5};
    });
  }, block2_options);
  LayerOptions head_options;
  head_options.pop = {"late"};
  m.add("head", [] {
    return make_layer(torch::nn::Linear(kNamedHidden, kNamedVocab),
                      [](torch::nn::Linear& fc, const TensorList& x) { return fc(x[0] + x[2]); });
  }, head_options);
  m.set_loss(loss_of);
  return m;
}

struct NamedRankRun {
  std::vector<double> losses;
  double eval_loss = 0;
  std::vector<traces::TraceEvent> last_events;
  Schedule schedule;
  std::vector<SkipRoute> routes;
  std::string error;
};

// The sequence length of sample `index` of step `step`.
using NamedSeqLenOf = std::function<int(int step, std::int64_t index)>;

std::vector<NamedRankRun> train(int ranks, const std::string& schedule, const std::function<PipelineModule()>& make_module,
                           EngineOptions options, int steps, bool eval_first = false,
                           const NamedSeqLenOf& seq_len_of = [](int, std::int64_t) { return kSeq; }) {
  return testing::run_in_process_ranks<NamedRankRun>(ranks, [&](int, Transport& transport, NamedRankRun& run) {
    PipelineEngine engine(make_module(), schedule, transport, options);
    run.schedule = engine.schedule();
    run.routes = engine.skip_routes();
    if (eval_first) {
      std::int64_t next = 0;
      run.eval_loss = engine.eval_batch([&] { return named_sample(next++); }).loss;
    }
    std::int64_t next = 0;
    for (int step = 0; step < steps; ++step) {
      run.losses.push_back(engine.train_batch([&] {
        const std::int64_t index = next++;
        return named_sample(index, seq_len_of(step, index));
      }));
      run.last_events = engine.last_step().events;
    }
  });
}

EngineOptions named_base_options() {
  EngineOptions o;
  o.micro_batches = 4;
  o.micro_batch_size = kNamedBatch;
  o.timeout = 5000ms;
  return o;
}

int count_events(const NamedRankRun& run, const std::string& name, int peer_rank) {
  int n = 0;
  for (const auto& e : run.last_events) n += e.name == name && e.peer_rank == peer_rank ? 1 : 0;
  return n;
}

int count_instructions(const Schedule& s, int rank, Op op, int stage, int peer_stage) {
  int n = 0;
  for (const auto& step : s.programs.at(static_cast<std::size_t>(rank)))
    for (const auto& in : step) n += in.op == op && in.stage == stage && in.peer_stage == peer_stage ? 1 : 0;
  return n;
}

}  // namespace

TEST_CASE("engine: dict layers between stages reproduce single-process training bit for bit") {
  EngineOptions o = named_base_options();
  o.split_points = {"block1"};
  EngineOptions single_options = named_base_options();
  for (const bool declared : {false, true}) {
    INFO((declared ? "declared named shapes" : "shape headers with names"));
    auto make = [declared] {
      PipelineModule m = dict_module();
      if (declared) m.set_static_shapes(dict_shapes());
      return m;
    };
    const auto single = train(1, "data-parallel", make, single_options, 3);
    const auto piped = train(2, "1f1b", make, o, 3);
    REQUIRE(single[0].error.empty());
    INFO(piped[0].error << " | " << piped[1].error);
    REQUIRE(piped[0].error.empty());
    REQUIRE(piped[1].error.empty());
    REQUIRE(single[0].losses.size() == 3);
    for (int step = 0; step < 3; ++step) {
      CHECK(piped[0].losses[step] == single[0].losses[step]);
      CHECK(piped[1].losses[step] == single[0].losses[step]);
    }
    CHECK(single[0].losses[2] < single[0].losses[0]);
  }
}

TEST_CASE("engine: a stage receiving other keys fails naming the stage and the key") {
  EngineOptions o = named_base_options();
  o.split_points = {"block1"};
  o.timeout = 1000ms;
  auto make = [] { return dict_module("attention_mask"); };
  const auto piped = train(2, "1f1b", make, o, 1);
  CHECK_THAT(piped[1].error, Catch::Contains("stage 1 (layers 2..4, 'block1' .. 'head') receives the keys [hidden, attention_mask, ids] "
                                             "from stage 0, but its layer 'block1' takes [hidden, mask, ids]: no key 'mask'"));
  CHECK_FALSE(piped[0].error.empty());
  const auto single = train(1, "data-parallel", make, named_base_options(), 1);
  CHECK_THAT(single[0].error, Catch::Contains("layer 'block1' (layer 2) takes the keys [hidden, mask, ids], but gets "
                                              "[hidden, attention_mask, ids]: no key 'mask'"));
}

TEST_CASE("engine: a skip from stage 0 to stage 2 travels directly and trains bit for bit") {
  auto make = [] { return skip_module(); };
  EngineOptions o = named_base_options();
  o.split_points = {"block1", "block2"};
  const auto single = train(1, "data-parallel", make, named_base_options(), 3, true);
  REQUIRE(single[0].error.empty());
  CHECK(single[0].losses[2] < single[0].losses[0]);
  for (const std::string schedule : {"1f1b", "gpipe"}) {
    INFO(schedule);
    const auto piped = train(3, schedule, make, o, 3, true);
    INFO(piped[0].error << " | " << piped[1].error << " | " << piped[2].error);
    for (const auto& run : piped) REQUIRE(run.error.empty());
    for (int r = 0; r < 3; ++r) {
      CHECK(piped[r].eval_loss == single[0].losses[0]);
      for (int step = 0; step < 3; ++step) CHECK(piped[r].losses[step] == single[0].losses[step]);
    }
    // How each skip travels.
    std::map<std::string, SkipCarrier> carriers;
    for (const auto& route : piped[0].routes) carriers[route.name] = route.carrier;
    CHECK((carriers == std::map<std::string, SkipCarrier>{{"early", SkipCarrier::Direct},
                                                          {"ids", SkipCarrier::Direct},
                                                          {"late", SkipCarrier::SameStage},
                                                          {"mid", SkipCarrier::WithActivation}}));
    // The schedule's added transfers and the measured trace: stage 0 <-> stage 2 directly.
    const Schedule& s = piped[0].schedule;
    CHECK(count_instructions(s, 0, Op::SendActivation, 0, 2) == 4);
    CHECK(count_instructions(s, 0, Op::RecvGrad, 0, 2) == 4);
    CHECK(count_instructions(s, 2, Op::RecvActivation, 2, 0) == 4);
    CHECK(count_instructions(s, 2, Op::SendGrad, 2, 0) == 4);
    CHECK(count_instructions(s, 1, Op::SendActivation, 1, 2) == 0);  // stage 1 only has its default transfers
    CHECK(count_events(piped[0], "SEND_F", 2) == 4);
    CHECK(count_events(piped[0], "RECV_B", 2) == 4);
    CHECK(count_events(piped[2], "RECV_F", 0) == 4);
    CHECK(count_events(piped[2], "SEND_B", 0) == 4);
    std::map<int, std::int64_t> rank1_received;
    for (const auto& e : piped[1].last_events)
      if (e.name == "RECV_F") rank1_received[e.micro_batch] = e.bytes;
    CHECK(rank1_received == std::map<int, std::int64_t>{{0, 1708}, {1, 1548}, {2, 1548}, {3, 1548}});
  }
}

TEST_CASE("engine: a skip between neighbouring stages rides with the activation") {
  auto make = [] { return skip_module("block1"); };
  EngineOptions o = named_base_options();
  o.split_points = {"block1"};
  const auto single = train(1, "data-parallel", make, named_base_options(), 2);
  const auto piped = train(2, "1f1b", make, o, 2);
  REQUIRE(single[0].error.empty());
  INFO(piped[0].error << " | " << piped[1].error);
  REQUIRE(piped[0].error.empty());
  REQUIRE(piped[1].error.empty());
  for (int step = 0; step < 2; ++step) CHECK(piped[1].losses[step] == single[0].losses[step]);
  const Schedule plain = make_schedule("1f1b", ScheduleParams{2, 4, 1, false});
  CHECK((piped[0].schedule.programs == plain.programs));
}

TEST_CASE("engine: skips with split backward, and between stages of one rank") {
  auto make = [] { return skip_module(); };
  const auto single = train(1, "data-parallel", make, named_base_options(), 3);
  REQUIRE(single[0].error.empty());
  SECTION("zb-h1 on 3 ranks: direct transfers around BackwardInput, within 1e-6") {
    EngineOptions o = named_base_options();
    o.split_points = {"block1", "block2"};
    const auto piped = train(3, "zb-h1", make, o, 3);
    INFO(piped[0].error << " | " << piped[1].error << " | " << piped[2].error);
    for (const auto& run : piped) REQUIRE(run.error.empty());
    for (int step = 0; step < 3; ++step) CHECK(piped[2].losses[step] == Approx(single[0].losses[step]).epsilon(1e-6));
    CHECK(count_instructions(piped[0].schedule, 0, Op::RecvGrad, 0, 2) == 4);
  }
  SECTION("zbv on 2 ranks (rank 0 holds stages 0 and 3, rank 1 stages 1 and 2): every skip stays in memory") {
    EngineOptions o = named_base_options();
    o.split_points = {"block0", "block1", "block2"};
    const auto piped = train(2, "zbv", make, o, 3);
    INFO(piped[0].error << " | " << piped[1].error);
    for (const auto& run : piped) REQUIRE(run.error.empty());
    for (int step = 0; step < 3; ++step) CHECK(piped[0].losses[step] == Approx(single[0].losses[step]).epsilon(1e-6));
    for (const auto& route : piped[0].routes)
      CHECK((route.carrier == (route.name == "late" ? SkipCarrier::SameStage : SkipCarrier::Memory)));
    const Schedule plain = make_schedule("zbv", ScheduleParams{2, 4, 1, false});
    CHECK((piped[0].schedule.programs == plain.programs));
  }
}

TEST_CASE("engine: badly declared skips are refused naming the layer and the skip") {
  auto net = make_fake_network(1);
  auto transport = make_fake_transport(net, 0);
  auto identity = [] { return make_layer([](const TensorList& x) { return x; }); };
  EngineOptions o = named_base_options();
  o.partition = "uniform";  // the identity layers have no parameters to balance
  SECTION("a pop without a stash") {
    PipelineModule m;
    m.add("a", identity);
    LayerOptions pops;
    pops.pop = {"x"};
    m.add("b", identity, pops);
    m.set_loss(loss_of);
    CHECK_THROWS_WITH(PipelineEngine(m, "data-parallel", *transport, o),
                      Catch::Contains("layer 'b' (layer 1) pops the skip tensor 'x', which no earlier layer stashes"));
  }
  SECTION("a stash never popped") {
    PipelineModule m;
    LayerOptions stashes;
    stashes.stash = {"x"};
    m.add("a", identity, stashes);
    m.add("b", identity);
    m.set_loss(loss_of);
    CHECK_THROWS_WITH(PipelineEngine(m, "data-parallel", *transport, o),
                      Catch::Contains("layer 'a' (layer 0) stashes the skip tensor 'x', but no later layer pops it"));
  }
  SECTION("activation checkpointing with skips") {
    o.activation_checkpoint_interval = 1;
    CHECK_THROWS_AS(PipelineEngine(skip_module(), "data-parallel", *transport, o), UsageError);
    CHECK_THROWS_WITH(PipelineEngine(skip_module(), "data-parallel", *transport, o),
                      Catch::Contains("activation checkpointing (every 1 layers) cannot recompute layers that stash or pop skip tensors"));
  }
}

// ---- the same over real processes ----------------------------------------------------------
namespace {

std::filesystem::path result_file(const std::string& scenario, int rank) {
  const auto dir = std::filesystem::path(PIPESCOPE_BINARY_DIR) / "tests" / "exec-work";
  std::filesystem::create_directories(dir);
  return dir / ("engine-" + scenario + "-rank" + std::to_string(rank) + ".txt");
}

// Shapes that change between batches, and (the "varying" scenarios) inside a batch.
int seq_len_of_step(int step, std::int64_t) { return 5 + step; }
int seq_len_varying(int, std::int64_t index) { return 6 + static_cast<int>(index % 2); }

// One worker of `scenario`: 3 steps on its Gloo world; writes its losses (exact, as hex floats)
// and the number of SEND_F events to rank 2 in its last step.
void run_worker(const std::string& scenario) {
  // The launching test reads files, not this output (Catch's summary would clutter its own).
  if (std::freopen("/dev/null", "w", stdout) == nullptr) std::perror("engine worker: /dev/null");
  const char* argv[] = {"test_exec"};
  const int status = run_pipeline_processes(1, const_cast<char**>(argv), [&](ProcessContext& context) {
    const bool skips = scenario.rfind("skips-", 0) == 0, varying = scenario.rfind("dicts-varying", 0) == 0;
    EngineOptions o = named_base_options();
    o.shapes_per_micro_batch = scenario == "dicts-varying-per-micro-batch";
    o.timeout = 10000ms;
    o.split_points = skips ? std::vector<std::string>{"block1", "block2"} : std::vector<std::string>{"block1"};
    PipelineEngine engine(skips ? skip_module() : dict_module(), skips ? scenario.substr(6) : std::string("1f1b"), *context.world, o);
    std::ofstream out(result_file(scenario, context.rank));
    std::int64_t next = 0;
    for (int step = 0; step < 3; ++step) {
      const double loss = engine.train_batch([&] {
        const std::int64_t index = next++;
        return named_sample(index, varying ? seq_len_varying(step, index) : seq_len_of_step(step, index));
      });
      char text[64];
      std::snprintf(text, sizeof text, "%a", loss);
      out << "loss " << text << "\n";
    }
    int sends_to_2 = 0;
    for (const auto& e : engine.last_step().events) sends_to_2 += e.name == "SEND_F" && e.peer_rank == 2 ? 1 : 0;
    out << "sends_to_2 " << sends_to_2 << "\n";
  });
  REQUIRE(status == 0);
}

struct ProcessResult {
  std::vector<double> losses;
  int sends_to_2 = -1;
};

struct ProcessRun {
  int status = -1;
  std::string err;  // what the launcher and its workers wrote to stderr
  std::vector<ProcessResult> results;
};

// Starts `nproc` workers of `scenario` (this program, running the hidden test case of that
// name) and reads what each wrote.
ProcessRun run_processes(const std::string& scenario, int nproc) {
  for (int r = 0; r < nproc; ++r) std::filesystem::remove(result_file(scenario, r));
  const std::string nproc_text = std::to_string(nproc), filter = "engine worker: " + scenario;
  const char* argv[] = {"test_exec", "--nproc-per-node", nproc_text.c_str(), filter.c_str()};
  // The workers inherit this process's stderr: send it to a file for the run.
  const auto err_path = result_file(scenario, -1).replace_extension(".err");
  std::fflush(stderr);
  const int saved_stderr = dup(STDERR_FILENO);
  const int err_fd = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  REQUIRE(saved_stderr >= 0);
  REQUIRE(err_fd >= 0);
  dup2(err_fd, STDERR_FILENO);
  close(err_fd);
  ProcessRun run;
  run.status = run_pipeline_processes(4, const_cast<char**>(argv), [](ProcessContext&) {
    throw std::runtime_error("the launching process runs no pipeline body");
  });
  std::fflush(stderr);
  dup2(saved_stderr, STDERR_FILENO);
  close(saved_stderr);
  std::ifstream err(err_path);
  run.err.assign(std::istreambuf_iterator<char>(err), {});
  run.results.resize(static_cast<std::size_t>(nproc));
  for (int r = 0; r < nproc; ++r) {
    std::ifstream in(result_file(scenario, r));
    for (std::string key, value; in >> key >> value;) {
      if (key == "loss") run.results[static_cast<std::size_t>(r)].losses.push_back(std::strtod(value.c_str(), nullptr));
      if (key == "sends_to_2") run.results[static_cast<std::size_t>(r)].sends_to_2 = std::stoi(value);
    }
  }
  return run;
}

}  // namespace

TEST_CASE("engine worker: skips-1f1b", "[.]") { run_worker("skips-1f1b"); }
TEST_CASE("engine worker: skips-gpipe", "[.]") { run_worker("skips-gpipe"); }
TEST_CASE("engine worker: dicts", "[.]") { run_worker("dicts"); }
TEST_CASE("engine worker: dicts-varying", "[.]") { run_worker("dicts-varying"); }
TEST_CASE("engine worker: dicts-varying-per-micro-batch", "[.]") { run_worker("dicts-varying-per-micro-batch"); }

TEST_CASE("engine: skips and dicts over real processes reproduce one process bit for bit") {
  const auto single_skips = train(1, "data-parallel", [] { return skip_module(); }, named_base_options(), 3, false, seq_len_of_step);
  const auto single_dicts = train(1, "data-parallel", [] { return dict_module(); }, named_base_options(), 3, false, seq_len_of_step);
  REQUIRE(single_skips[0].error.empty());
  REQUIRE(single_dicts[0].error.empty());
  for (const std::string scenario : {"skips-1f1b", "skips-gpipe"}) {
    INFO(scenario);
    const auto run = run_processes(scenario, 3);
    INFO(run.err);
    REQUIRE(run.status == 0);
    for (const auto& result : run.results) CHECK(result.losses == single_skips[0].losses);
    CHECK(run.results[0].sends_to_2 == 4);
    CHECK(run.results[1].sends_to_2 == 4);  // its activations go to stage 2 (rank 2) as usual
  }
  const auto dicts = run_processes("dicts", 2);
  INFO(dicts.err);
  REQUIRE(dicts.status == 0);
  for (const auto& result : dicts.results) CHECK(result.losses == single_dicts[0].losses);
}

TEST_CASE("engine: shapes varying inside a batch over real processes need per-micro-batch headers") {
  const auto failed = run_processes("dicts-varying", 2);
  CHECK(failed.status == 1);
  CHECK_THAT(failed.err, Catch::Contains("rank 0") && Catch::Contains("micro-batch 1: output tensor 0 'hidden' is [2, 7, 16] Float") &&
                             Catch::Contains("says [2, 6, 16] Float 'hidden'") && Catch::Contains("EngineOptions::shapes_per_micro_batch"));
  const auto single = train(1, "data-parallel", [] { return dict_module(); }, named_base_options(), 3, false, seq_len_varying);
  REQUIRE(single[0].error.empty());
  const auto run = run_processes("dicts-varying-per-micro-batch", 2);
  INFO(run.err);
  REQUIRE(run.status == 0);
  for (const auto& result : run.results) CHECK(result.losses == single[0].losses);
}
