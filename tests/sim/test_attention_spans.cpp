// What a layer's query attends to: sliding windows (ModelSpec's window_size and
// window_attn_skip_freq, Megatron's --window-size and --window-attn-skip-freq) and chunks
// (Llama 4's attention_chunk_size and nope_layer_interval):
// - which layers are windowed: Megatron's is_layer_window_attention, layer numbers from 1, every
//   N-th full (GPT-OSS alternates, the first windowed); no skip frequency: every layer;
// - a windowed query meets w - w^2 / (2s) keys under the causal mask against a full one's s/2,
//   and the layers' mean share prices the fused attention core and the MFU's FLOPs;
// - a fused core's windowed layers cost what a model of windowed layers alone costs, in their
//   share; an unfused core computes every score whatever the window;
// - context parallelism with a window is refused naming the option, in the model and through
//   `ppsim simulate`, unless its exchange is the all-to-all (--cp-comm-type a2a), which runs it
//   and which `ppsim plan` takes for such a model unless told otherwise;
// - model files: Megatron's window_size (an integer or its [left, right] pair, -1 none) and
//   Hugging Face's sliding_window (the span, the query included: one more) are read; a right side,
//   a left side below -1, an empty span, a skip frequency without a window or below 0, and the two
//   fields disagreeing are refused naming the field; the windowed layers listed one by one
//   (Megatron's list form of window_attn_skip_freq, Hugging Face's layer_types), a list of
//   another length, another entry, another kind of attention, and two lists or a list and a
//   frequency that disagree refused;
// - chunks: Llama 4's presets chunk 3 layers of 4, which at their 8192 is full attention (no CP
//   refusal); at 32768 a chunked query meets 4096 keys, a ragged last chunk its own r/2; the core
//   costs a chunk-long causal core per chunk; context parallelism with real chunks refused; the
//   fields in Hugging Face's and Megatron-Bridge's names, and a window and chunks on every layer
//   at once refused.
#include <catch2/catch.hpp>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "pipescope/core/errors.hpp"
#include "pipescope/sim/layer_costs.hpp"
#include "pipescope/sim/model.hpp"
#include "ppsim_run.hpp"

using namespace pipescope;
using namespace pipescope::sim;

namespace {

ModelSpec with_window(ModelSpec m, int window, int skip_freq) {
  m.window_size = window;
  m.window_attn_skip_freq = skip_freq;
  return m;
}

ParallelConfig one_gpu() {
  ParallelConfig p;
  p.pipeline = 1;
  return p;
}

std::string model_file(const std::string& window_fields) {
  return R"({"layers": 4, "hidden": 256, "heads": 4, "seq": 1024, "vocab": 1000, "flash_attention": true)" +
         window_fields + "}";
}

// What reading a model file with these fields says: its refusal, or "accepted".
std::string refusal(const std::string& fields) {
  try {
    parse_model_json(model_file(fields), "m.json");
  } catch (const UsageError& e) {
    return e.what();
  }
  return "accepted";
}

}  // namespace

TEST_CASE("Megatron's window_attn_skip_freq keeps every N-th layer full, counted from 1") {
  const ModelSpec gpt_oss = resolve_model("gpt-oss-120b");
  CHECK(gpt_oss.attention_span(0) == AttentionSpan::window);
  CHECK(gpt_oss.attention_span(1) == AttentionSpan::full);
  CHECK(gpt_oss.attention_span(34) == AttentionSpan::window);
  CHECK(gpt_oss.attention_span(35) == AttentionSpan::full);
  CHECK(gpt_oss.layers_with(AttentionSpan::window) == 18);
  const ModelSpec llama = resolve_model("llama-3-8b");
  CHECK(llama.layers_with(AttentionSpan::window) == 0);
  CHECK(with_window(llama, 4096, 0).layers_with(AttentionSpan::window) == 32);  // no skip frequency: every layer
  CHECK(with_window(llama, 4096, 4).layers_with(AttentionSpan::window) == 24);  // layers 4, 8, ... full
  CHECK(with_window(llama, 4096, 1).layers_with(AttentionSpan::window) == 0);
  CHECK(with_window(llama, 0, 0).layers_with(AttentionSpan::window) == 32);  // Megatron's (0, 0): each query alone
  CHECK(with_window(llama, -1, 0).layers_with(AttentionSpan::window) == 0);
}

TEST_CASE("a windowed query meets w - w^2 / 2s keys, and the layers' mean share follows") {
  // s = 4096; Megatron's window (127, 0): a span of w = 128 keys, the query's own included.
  const ModelSpec gpt_oss = resolve_model("gpt-oss-120b");
  CHECK(gpt_oss.window_size == 127);
  CHECK(gpt_oss.causal_keys_per_query(AttentionSpan::full) == 2048);
  CHECK(gpt_oss.causal_keys_per_query(AttentionSpan::window) == Approx(128 - 128.0 * 128 / 8192));
  CHECK(gpt_oss.attention_span_share() == Approx(0.5 + 0.5 * 126.0 / 2048));
  CHECK(resolve_model("mixtral-8x7b").attention_span_share() == 1.0);
  // A window as long as the sequence is full attention.
  const ModelSpec wide = with_window(resolve_model("llama-3-8b"), 8192, 0);
  CHECK(wide.causal_keys_per_query(AttentionSpan::window) == wide.causal_keys_per_query(AttentionSpan::full));
  CHECK(wide.attention_span_share() == 1.0);

  // The MFU's FLOPs: the attention core's term at its share, the products unchanged.
  const ModelSpec full = with_window(gpt_oss, -1, 0);
  const LayerFigures windowed_figures = layer_figures(gpt_oss, 1);
  const LayerFigures full_figures = layer_figures(full, 1);
  const double core = 4096.0 * 4096 * 64 * 64;  // s^2 b x heads x head width
  CHECK(full_figures.f_flops - windowed_figures.f_flops == Approx(4 * core * (1 - gpt_oss.attention_span_share())));
  CHECK(full_figures.w_flops == windowed_figures.w_flops);
}

TEST_CASE("a fused core prices its windowed layers as a model of windowed layers alone, in their share") {
  const ModelSpec gpt_oss = resolve_model("gpt-oss-120b");
  const ModelSpec full = with_window(gpt_oss, -1, 0);
  const ModelSpec all_windowed = with_window(gpt_oss, 127, 0);
  for (const char* gpu : {"h100", "a100"}) {
    INFO(gpu);
    const DeviceSpec device = device_preset(gpu);
    for (const bool backward : {false, true}) {
      auto core_s = [&](const ModelSpec& m) {
        return backward ? attention_core_backward_s(m, device, one_gpu())
                        : attention_core_forward_s(m, device, one_gpu());
      };
      const double full_s = core_s(full), windowed_s = core_s(all_windowed);
      CHECK(core_s(gpt_oss) == Approx((full_s + windowed_s) / 2));
      // Its queries meet 126 of the 2048 keys; at so few keys a kernel runs below its rate at 4096.
      CHECK(windowed_s > full_s * 126 / 2048);
      CHECK(windowed_s < full_s * 0.25);
    }
  }
  // An unfused core computes every score and masks them: the window saves nothing.
  ModelSpec unfused = gpt_oss;
  unfused.flash_attention = false;
  const DeviceSpec h100 = device_preset("h100");
  CHECK(attention_core_forward_s(unfused, h100, one_gpu()) ==
        attention_core_forward_s(with_window(unfused, -1, 0), h100, one_gpu()));
}

TEST_CASE("context parallelism with a sliding window is refused naming the option, but for a2a's") {
  ParallelConfig cp = one_gpu();
  cp.context_parallel = 2;
  const auto problem = context_parallel_problem(resolve_model("gpt-oss-20b"), cp);
  REQUIRE(problem);
  CHECK(problem->find("--context-parallel 2") == 0);
  CHECK(problem->find("sliding-window") != std::string::npos);
  CHECK_FALSE(context_parallel_problem(resolve_model("mixtral-8x7b"), cp));

  const ppsim_test::PpsimRun run = ppsim_test::run_ppsim(
      "simulate --model gpt-oss-20b --schedule 1f1b --stages 2 --micro-batches 4 --context-parallel 2");
  CHECK(run.status == 2);
  CHECK(run.one_error_line());
  CHECK(run.err.find("--context-parallel 2") != std::string::npos);
  CHECK(run.err.find("--cp-comm-type a2a") != std::string::npos);
  // With the all-to-all every query meets its window on its own rank: priced.
  const ppsim_test::PpsimRun ulysses = ppsim_test::run_ppsim(
      "simulate --model gpt-oss-20b --schedule 1f1b --stages 2 --micro-batches 4 --context-parallel 2 "
      "--cp-comm-type a2a");
  CHECK(ulysses.status == 0);
}

TEST_CASE("a model file lists its windowed layers in Megatron's or Hugging Face's form") {
  // Megatron's list form of window_attn_skip_freq: 1 windowed, 0 full, one entry a layer.
  const ModelSpec listed =
      parse_model_json(model_file(R"(, "window_size": 127, "window_attn_skip_freq": [1, 1, 1, 0])"), "m.json");
  CHECK(listed.layers_with(AttentionSpan::window) == 3);
  CHECK(listed.attention_span(3) == AttentionSpan::full);
  const ModelSpec hugging_face = parse_model_json(
      model_file(
          R"(, "sliding_window": 128, "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"])"),
      "m.json");
  CHECK(hugging_face.layers_with(AttentionSpan::window) == 2);
  CHECK(hugging_face.attention_span(0) == AttentionSpan::window);
  CHECK(hugging_face.attention_span(1) == AttentionSpan::full);
  // Every layer full, and no window: nothing to refuse.
  CHECK(parse_model_json(
            model_file(R"(, "layer_types": ["full_attention", "full_attention", "full_attention", "full_attention"])"),
            "m.json")
            .layers_with(AttentionSpan::window) == 0);

  CHECK(refusal(R"(, "window_size": 127, "window_attn_skip_freq": [1, 0])") ==
        "m.json: the layers' attention pattern has 2 entries for 4 layers: one a layer, as Megatron requires");
  CHECK(refusal(R"(, "window_size": 127, "layer_types": [])") ==
        "m.json: the layers' attention pattern has 0 entries for 4 layers: one a layer, as Megatron requires");
  CHECK(refusal(R"(, "window_size": 127, "window_attn_skip_freq": [1, 2, 1, 0])") ==
        "m.json: model field 'window_attn_skip_freq' entry 1 is 2: 1 (a windowed layer) or 0 (a full one)");
  CHECK(
      refusal(
          R"(, "sliding_window": 128, "layer_types": ["sliding_attention", "linear_attention", "full_attention", "full_attention"])") ==
      "m.json: model field 'layer_types' entry 1 is 'linear_attention': pipescope prices 'full_attention', "
      "'sliding_attention' and 'chunked_attention' layers");
  CHECK(refusal(R"(, "layer_types": ["sliding_attention", "full_attention", "full_attention", "full_attention"])") ==
        "m.json: windowed layers (window_attn_skip_freq or layer_types) need a window ('window_size' or "
        "'sliding_window')");
  CHECK(
      refusal(
          R"(, "window_size": 127, "window_attn_skip_freq": [1, 0, 1, 0], "layer_types": ["full_attention", "sliding_attention", "full_attention", "sliding_attention"])") ==
      "m.json: model fields 'window_attn_skip_freq' and 'layer_types' disagree on which layers are windowed");
  CHECK(
      refusal(
          R"(, "window_size": 127, "window_attn_skip_freq": 2, "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"])") ==
      "m.json: an integer 'window_attn_skip_freq' or 'nope_layer_interval', and a list of the layers' attention "
      "too: give one");
}

TEST_CASE("model files give the window in Megatron's or Hugging Face's form") {
  CHECK(parse_model_json(model_file(R"(, "window_size": [128, 0], "window_attn_skip_freq": 2)"), "m.json")
            .layers_with(AttentionSpan::window) == 2);
  // Hugging Face's span counts the query itself: Megatron's left side plus one.
  const ModelSpec hugging_face = parse_model_json(model_file(R"(, "sliding_window": 256)"), "m.json");
  CHECK(hugging_face.window_size == 255);
  CHECK(hugging_face.layers_with(AttentionSpan::window) == 4);
  CHECK(parse_model_json(model_file(R"(, "window_size": [-1, 0])"), "m.json").layers_with(AttentionSpan::window) == 0);
  CHECK(parse_model_json(model_file(R"(, "sliding_window": null)"), "m.json").layers_with(AttentionSpan::window) == 0);
  CHECK(parse_model_json(model_file(R"(, "window_size": 127, "sliding_window": 128)"), "m.json").window_size == 127);

  CHECK(refusal(R"(, "window_size": [128, 4])") ==
        "m.json: model field 'window_size' is [128,4]: its right side must be 0 (a causal decoder attends to no "
        "later key)");
  CHECK(refusal(R"(, "window_size": [128])") ==
        "m.json: model field 'window_size' must be an integer or a pair [left, right]");
  CHECK(refusal(R"(, "window_size": -2)") ==
        "m.json: model field 'window_size' is -2: its left side is -1 (no window) or 0 to 2^28 keys before the query");
  CHECK(refusal(R"(, "sliding_window": 0)") ==
        "m.json: model field 'sliding_window' is 0: it must be the keys a query attends to, itself included (1 to "
        "2^28), or null");
  CHECK(refusal(R"(, "window_attn_skip_freq": 2)") ==
        "m.json: windowed layers (window_attn_skip_freq or layer_types) need a window ('window_size' or "
        "'sliding_window')");
  CHECK(refusal(R"(, "window_size": 128, "window_attn_skip_freq": -1)") ==
        "m.json: model field 'window_attn_skip_freq' is -1: it must be >= 0");
  CHECK(refusal(R"(, "window_size": 128, "sliding_window": 128)") ==
        "m.json: model fields 'window_size' (128) and 'sliding_window' (128) disagree: a window of w keys before the "
        "query is a sliding_window of w + 1");
}

TEST_CASE("chunked layers meet their chunk's keys, and a chunk as long as the sequence is full attention") {
  // Llama 4: chunks of 8192 in 3 layers of 4, every 4th full (no_rope_layer_interval 4).
  const ModelSpec scout = resolve_model("llama4-scout");
  CHECK(scout.attention_span(0) == AttentionSpan::chunk);
  CHECK(scout.attention_span(3) == AttentionSpan::full);
  CHECK(scout.layers_with(AttentionSpan::chunk) == 36);
  // At the preset's 8192 a chunk is the sequence: nothing changes, nor is context parallelism refused.
  CHECK(scout.attention_span_share() == 1.0);
  ParallelConfig cp = one_gpu();
  cp.context_parallel = 2;
  CHECK_FALSE(context_parallel_problem(scout, cp));
  // At 32768: four chunks a sequence, a chunked query meets 4096 keys against a full one's 16384.
  ModelSpec long_scout = scout;
  long_scout.seq = 32768;
  CHECK(long_scout.causal_keys_per_query(AttentionSpan::chunk) == 4096);
  CHECK(long_scout.attention_span_share() == Approx(0.25 + 0.75 * 0.25));
  // A last chunk shorter than the others: 20000 = 2 x 8192 + 3616.
  ModelSpec ragged = scout;
  ragged.seq = 20000;
  CHECK(ragged.causal_keys_per_query(AttentionSpan::chunk) ==
        Approx((2.0 * 8192 * 8192 / 2 + 3616.0 * 3616 / 2) / 20000));
  const auto problem = context_parallel_problem(long_scout, cp);
  REQUIRE(problem);
  CHECK(*problem ==
        "--context-parallel 2: llama4-scout's chunked attention (attention_chunk_size 8192) is not modelled with "
        "this --cp-comm-type (give --cp-comm-type a2a)");
  ParallelConfig ulysses = cp;
  ulysses.context_parallel_comm = ContextParallelComm::a2a;
  CHECK_FALSE(context_parallel_problem(long_scout, ulysses));
  // The fused core: the chunked layers cost a causal core of one chunk's length, four times over.
  ModelSpec all_chunked = long_scout;
  all_chunked.nope_layer_interval = 0;
  ModelSpec full = long_scout;
  full.attention_chunk_size = 0;
  const DeviceSpec h100 = device_preset("h100");
  const double full_s = attention_core_forward_s(full, h100, one_gpu());
  const double chunked_s = attention_core_forward_s(all_chunked, h100, one_gpu());
  CHECK(attention_core_forward_s(long_scout, h100, one_gpu()) == Approx(0.25 * full_s + 0.75 * chunked_s));
  CHECK(chunked_s < full_s * 0.3);
  CHECK(chunked_s > full_s * 0.25 * 0.9);
}

TEST_CASE("model files give chunks in Hugging Face's and Megatron-Bridge's names") {
  const ModelSpec chunked =
      parse_model_json(model_file(R"(, "attention_chunk_size": 256, "no_rope_layer_interval": 2)"), "m.json");
  CHECK(chunked.layers_with(AttentionSpan::chunk) == 2);
  CHECK(parse_model_json(model_file(R"(, "attention_chunk_size": 256, "nope_layer_interval": 4)"), "m.json")
            .layers_with(AttentionSpan::chunk) == 3);
  const ModelSpec listed = parse_model_json(
      model_file(
          R"(, "attention_chunk_size": 256, "sliding_window": 128, "layer_types": ["chunked_attention", "sliding_attention", "full_attention", "chunked_attention"])"),
      "m.json");
  CHECK(listed.layers_with(AttentionSpan::chunk) == 2);
  CHECK(listed.layers_with(AttentionSpan::window) == 1);
  CHECK(refusal(R"(, "nope_layer_interval": 4)") ==
        "m.json: chunked layers (nope_layer_interval or layer_types) need 'attention_chunk_size'");
  CHECK(refusal(R"(, "attention_chunk_size": -1)") ==
        "m.json: model field 'attention_chunk_size' is -1: it must be >= 0");
  CHECK(refusal(R"(, "attention_chunk_size": 256, "sliding_window": 128)") ==
        "m.json: model fields 'window_size' and 'attention_chunk_size' both limit every layer's attention: list which "
        "layers do which in 'layer_types'");
  CHECK(refusal(R"(, "nope_layer_interval": 4, "no_rope_layer_interval": 2, "attention_chunk_size": 256)") ==
        "m.json: model fields 'nope_layer_interval' (4) and 'no_rope_layer_interval' (2) are one field and disagree");
}

TEST_CASE("ppsim plan's context-parallel rows of a windowed model take the all-to-all exchange", "[cli][plan]") {
  const std::string search =
      "plan --model gpt-oss-20b --gpus 16 --global-batch 32 --context-parallel-sizes 1,2 --tensor-parallel-sizes 1 "
      "--schedules 1f1b --micro-batch-sizes 1 --recompute none --top 0 --format json --quiet";
  auto context_parallel_rows = [](const std::string& out) {
    const nlohmann::json plan = nlohmann::json::parse(out);
    int rows = 0;
    for (const auto& row : plan["configurations"]) rows += row["context_parallel"] == 2 ? 1 : 0;
    return rows;
  };
  const ppsim_test::PpsimRun planned = ppsim_test::run_ppsim(search);
  REQUIRE(planned.status == 0);
  CHECK(context_parallel_rows(planned.out) > 0);
  // The ring, asked for, cannot run the windows: every CP row refused.
  const ppsim_test::PpsimRun ring = ppsim_test::run_ppsim(search + " --cp-comm-type p2p");
  REQUIRE(ring.status == 0);
  CHECK(context_parallel_rows(ring.out) == 0);
  const ppsim_test::PpsimRun table = ppsim_test::run_ppsim(
      "plan --model gpt-oss-20b --gpus 16 --global-batch 32 --context-parallel-sizes 1,2 --top 1 --quiet");
  CHECK(table.out.find("; context parallelism by all-to-all (--cp-comm-type a2a)") != std::string::npos);
}
