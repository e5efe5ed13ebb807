// Costs from first principles against the formulas of reference/ANCHORS.md.
// - gpt-7b layer (s=2048, b=1, h=4096, a=32): F = sbh(24h + 4s) = 893,353,197,568 FLOPs,
//   B = sbh(24h + 8s) = 962,072,674,304, W = sbh 24h = 824,633,720,832; activations
//   sb(34h + 5as) = 956,301,312 bytes, weight stash 32sbh = 268,435,456 bytes.
// - Parameter counts: gpt-1.3b about 1.3e9, gpt-7b about 6.7e9, llama-70b about 69e9.
// - Parameter counts of the newer presets: llama-3-8b 8.03e9, llama-3-70b 70.6e9, llama-3-405b
//   405.9e9 (their model cards), gpt3-175b 175e9 (Brown et al. 2020).
// - gpt-7b on 4 stages of 8 layers, H100 at a constant 50% (--efficiency 0.5; without it each
//   product is priced by its shape, test_efficiency.cpp): stage 1's f is 8 F / (989e12 x 0.5); the
//   last stage adds the head (2 sbhV per pass) and holds fp32 logits (4 sbV); the first and
//   last hold the embedding (V h parameters); 20 bytes per parameter (16-bit weights and
//   gradients, 16 bytes of Adam state); memory deltas sum to zero; ZeRO-1 over 8 replicas
//   shrinks static memory to 4 + 16/8 = 6 bytes per parameter.
#include <catch2/catch.hpp>

#include <algorithm>

#include "pipescope/core/errors.hpp"
#include "pipescope/sim/layer_costs.hpp"
#include "pipescope/sim/model.hpp"

using namespace pipescope;
using namespace pipescope::sim;

TEST_CASE("per-layer FLOPs and activation bytes follow the Zero Bubble formulas") {
  const ModelSpec gpt7 = resolve_model("gpt-7b");
  const double s = 2048, b = 1, h = 4096, a = 32;
  const LayerFigures f = layer_figures(gpt7, 1);
  CHECK(f.f_flops == s * b * h * (24 * h + 4 * s));
  CHECK(f.b_flops == s * b * h * (24 * h + 8 * s));
  CHECK(f.w_flops == s * b * h * 24 * h);
  CHECK(f.f_flops == 893353197568.0);
  CHECK(f.activation_bytes == static_cast<std::int64_t>(s * b * (34 * h + 5 * a * s)));
  CHECK(f.weight_stash_bytes == 268435456);
  const LayerFigures twice = layer_figures(gpt7, 2);
  CHECK(twice.f_flops == 2 * f.f_flops);
}

TEST_CASE("presets have the advertised sizes") {
  CHECK(resolve_model("gpt-1.3b").total_parameters() == Approx(1.3e9).epsilon(0.05));
  CHECK(resolve_model("gpt-7b").total_parameters() == Approx(6.7e9).epsilon(0.05));
  CHECK(resolve_model("llama-70b").total_parameters() == Approx(69e9).epsilon(0.03));
  CHECK(resolve_model("llama-3-8b").total_parameters() == Approx(8.03e9).epsilon(0.01));
  CHECK(resolve_model("llama-3-70b").total_parameters() == Approx(70.6e9).epsilon(0.01));
  CHECK(resolve_model("llama-3-405b").total_parameters() == Approx(405.9e9).epsilon(0.01));
  CHECK(resolve_model("gpt3-175b").total_parameters() == Approx(175e9).epsilon(0.01));
  CHECK(resolve_model("llama-3-8b").kv_width() == 1024);
  CHECK_THROWS_WITH(resolve_model("gpt-9000"), Catch::Contains("gpt-7b"));
  CHECK_THROWS_AS(device_preset("tpu"), UsageError);
}

TEST_CASE("stage costs of gpt-7b on four H100 stages") {
  const ModelSpec gpt7 = resolve_model("gpt-7b");
  DeviceSpec h100 = device_preset("h100");
  h100.efficiency = 0.5;
  ParallelConfig parallel;
  parallel.pipeline = 4;
  const CostModel costs = derive_costs(gpt7, h100, Topology{}, parallel);
  REQUIRE(costs.stages.size() == 4);
  const LayerFigures layer = layer_figures(gpt7, 1);
  const double rate = 989e12 * 0.5;
  CHECK(costs.stages[1].f_s == Approx(8 * layer.f_flops / rate));
  const double head = 2.0 * 2048 * 4096 * 50257;
  CHECK(costs.stages[3].f_s == Approx((8 * layer.f_flops + head) / rate));
  CHECK(costs.stages[3].w_s == Approx((8 * layer.w_flops + head) / rate));
  for (const auto& st : costs.stages) CHECK(st.f_mem_bytes + st.b_mem_bytes + st.w_mem_bytes == 0);
  CHECK(costs.stages[1].f_mem_bytes == 8 * layer.activation_bytes);
  CHECK(costs.stages[1].activation_bytes == 2 * 2048 * 4096);
  CHECK(costs.stages[1].static_bytes == 8 * gpt7.layer_parameters() * 20);
  CHECK(costs.stages[1].reduce_grads_s == 0.0);  // no data parallelism
  // The first stage also holds the embedding, the last a copy of it (tied) and the final norm.
  const std::int64_t embedding = 50257LL * 4096;
  CHECK(costs.stages[0].static_bytes == (8 * gpt7.layer_parameters() + embedding) * 20);
  CHECK(costs.stages[3].static_bytes == (8 * gpt7.layer_parameters() + embedding + 2 * 4096) * 20);
  CHECK(costs.stages[3].f_mem_bytes == 8 * layer.activation_bytes + 4LL * 2048 * 50257);

  parallel.data_parallel = 8;
  parallel.zero1 = true;
  parallel.recomputation = Recomputation::full;
  const CostModel sharded = derive_costs(gpt7, h100, Topology{}, parallel);
  CHECK(sharded.stages[1].static_bytes == 8 * gpt7.layer_parameters() * 6 + layer.activation_bytes);
  CHECK(sharded.stages[1].f_mem_bytes == 8 * 2 * 2048 * 4096);
  CHECK(sharded.stages[1].b_s == Approx(8 * (layer.b_flops + layer.f_flops) / rate));
  CHECK(sharded.stages[1].reduce_grads_s > 0);
  CHECK_FALSE(sharded.stages[1].reduce_grads_overlapped());

  // Overlapped with the backward: a bucket per layer; the embedding's share of the first stage
  // is final only at the end of its backward.
  parallel.overlap_grad_reduce = true;
  const CostModel overlapped = derive_costs(gpt7, h100, Topology{}, parallel);
  CHECK(overlapped.stages[1].reduce_grads_s == sharded.stages[1].reduce_grads_s);
  CHECK(overlapped.stages[1].reduce_grads_buckets == 8);
  CHECK(overlapped.stages[1].reduce_grads_last_s == 0.0);
  const double first_parameters = 8.0 * gpt7.layer_parameters() + embedding;
  CHECK(overlapped.stages[0].reduce_grads_last_s ==
        Approx(overlapped.stages[0].reduce_grads_s * static_cast<double>(embedding) / first_parameters));
  // Without replicas there is nothing to overlap.
  parallel.data_parallel = 1;
  CHECK_FALSE(derive_costs(gpt7, h100, Topology{}, parallel).stages[1].reduce_grads_overlapped());
}

TEST_CASE("layers are split as Megatron-LM splits them: evenly, else one fewer on the last, the first, the second...") {
  CHECK(split_layers(32, 4) == std::vector<int>{8, 8, 8, 8});
  CHECK(split_layers(10, 4) == std::vector<int>{2, 3, 3, 2});
  // The Zero Bubble runs: 22 layers on 8 ranks, the first and last one layer fewer (the paper's
  // layout); with one layer per chunk (24 virtual stages) the first and the last chunk hold only
  // the embedding and the head.
  CHECK(split_layers(22, 8) == std::vector<int>{2, 3, 3, 3, 3, 3, 3, 2});
  const std::vector<int> one_per_chunk = split_layers(22, 24);
  CHECK(one_per_chunk.front() == 0);
  CHECK(one_per_chunk.back() == 0);
  CHECK(std::count(one_per_chunk.begin(), one_per_chunk.end(), 1) == 22);
  // One short: the head's stage gives the layer up; three short: then the first and the second.
  CHECK(split_layers(11, 4) == std::vector<int>{3, 3, 3, 2});
  CHECK(split_layers(13, 8) == std::vector<int>{1, 1, 2, 2, 2, 2, 2, 1});
  CHECK(split_layers(3, 4) == std::vector<int>{1, 1, 1, 0});
  // An empty stage in the middle would run nothing at all.
  CHECK_THROWS_AS(split_layers(3, 6), UsageError);
  CHECK_THROWS_AS(split_layers(0, 1), UsageError);
}

TEST_CASE("one layer per chunk: the first and the last chunk run only the embedding and the head") {
  // 22 layers on 8 ranks x 3 chunks, as the Zero Bubble paper's 1F1B-I ran its 1.5B model.
  const ModelSpec m = parse_model_json(
      R"({"name": "zb-1.5b", "layers": 22, "hidden": 2304, "heads": 24, "seq": 1024, "vocab": 32000, "tied_embeddings": false})",
      "zb.json");
  ParallelConfig parallel;
  parallel.pipeline = 8;
  parallel.chunks = 3;
  parallel.micro_batch_size = 6;
  parallel.recomputation = Recomputation::full;
  const CostModel costs = derive_costs(m, device_preset("a100"), Topology{}, parallel);
  REQUIRE(costs.stages.size() == 24);
  const StageCost& embedding_only = costs.stages.front();
  const StageCost& one_layer = costs.stages[1];
  const StageCost& head_only = costs.stages.back();
  CHECK(embedding_only.f_s == 0.0);
  CHECK(embedding_only.f_mem_bytes == 0);
  CHECK(one_layer.f_s > 0.0);
  // The head costs about a layer: that is why the paper's models have two layers fewer.
  CHECK(head_only.f_s == Approx(one_layer.f_s).epsilon(0.5));
  // A stage without layers rebuilds none: its static memory is its parameters' alone.
  const std::int64_t embedding_parameters = 2304LL * 32000;
  CHECK(embedding_only.static_bytes == embedding_parameters * 20);
  CHECK(one_layer.static_bytes > layer_parameters_on_rank(m, 1) * 20);
}

TEST_CASE("a model file is read and bad fields are named") {
  const ModelSpec m = parse_model_json(R"({"name": "tiny", "layers": 4, "hidden": 256, "heads": 4, "seq": 128, "vocab": 1000})", "tiny.json");
  CHECK(m.name == "tiny");
  CHECK(m.layer_matrix_parameters() == 12 * 256 * 256);
  CHECK_THROWS_WITH(parse_model_json(R"({"layers": 4, "hidden": 256, "heads": 4, "seq": 128})", "m.json"),
                    Catch::Contains("m.json") && Catch::Contains("vocab"));
  CHECK_THROWS_WITH(parse_model_json(R"({"layers": "4", "hidden": 256, "heads": 4, "seq": 128, "vocab": 9})", "m.json"),
                    Catch::Contains("layers"));
  // A number beyond double is nlohmann's out_of_range, not its parse_error: still "not JSON".
  CHECK_THROWS_AS(parse_model_json(R"({"layers": 26E8435456, "hidden": 256, "heads": 4, "seq": 128, "vocab": 9})", "m.json"),
                  UsageError);
}

// A measured stage of 4 layers (pprun's mlp: 1 MB per hidden-state tensor) that held 9 MB per
// micro-batch from F to B (its input, then two tensors per layer) and 2 MB from B to W:
// recomputing every layer keeps the 4 layers' inputs and the stage's output (5 MB), charges one
// layer's share of the activations (9/4 MB) throughout, and runs the forward again in B. Runs
// of 2 layers keep 3 MB and rebuild 2 layers' share at a time; runs longer than the stage are
// the stage as one run.
TEST_CASE("recomputation applied to a measured stage keeps the runs' inputs and rebuilds one run at a time") {
  constexpr std::int64_t MB = 1'000'000;
  StageCost measured;
  measured.f_s = 0.002;
  measured.b_s = 0.003;
  measured.w_s = 0.001;
  measured.full_backward_s = 0.0035;
  measured.f_mem_bytes = 9 * MB;
  measured.w_mem_bytes = -2 * MB;
  measured.b_mem_bytes = -7 * MB;
  measured.static_bytes = 100 * MB;
  measured.activation_bytes = MB;

  const StageCost every_layer = recompute_measured_stage(measured, 4, 1);
  CHECK(every_layer.f_mem_bytes == 5 * MB);
  CHECK(every_layer.b_mem_bytes == -3 * MB);
  CHECK(every_layer.w_mem_bytes == -2 * MB);
  CHECK(every_layer.f_mem_bytes + every_layer.b_mem_bytes + every_layer.w_mem_bytes == 0);
  CHECK(every_layer.static_bytes == 100 * MB + 9 * MB / 4);
  CHECK(every_layer.b_s == Approx(0.005));
  CHECK(every_layer.full_backward_s == Approx(0.0055));
  CHECK(every_layer.w_s == measured.w_s);

  const StageCost pairs = recompute_measured_stage(measured, 4, 2);
  CHECK(pairs.f_mem_bytes == 3 * MB);
  CHECK(pairs.static_bytes == 100 * MB + 9 * MB / 2);
  CHECK(recompute_measured_stage(measured, 4, 7).f_mem_bytes == 2 * MB);
  CHECK(recompute_measured_stage(measured, 4, 7).static_bytes == 109 * MB);

  StageCost lone = measured;  // a profile of one stage measured no transfer
  lone.activation_bytes = 0;
  CHECK_THROWS_WITH(recompute_measured_stage(lone, 4, 1), Catch::Contains("no stage-to-stage transfer size"));
  CHECK_THROWS_AS(recompute_measured_stage(measured, 4, 0), UsageError);
}
