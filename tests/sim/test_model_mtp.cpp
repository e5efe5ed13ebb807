// Multi-token prediction layers (ModelSpec::mtp_num_layers; model.cpp's last stage).
// A small MoE model (4 layers of 256, 8 experts, top-2, untied embeddings, vocabulary 32000) on
// 2 pipeline stages, with one MTP layer against the same model with one more decoder layer on
// the last stage ("Et*2|t*3L"):
// - the last stage's forward, backward and weight-gradient times differ by exactly one more pass
//   of the head and the MTP projection (mtp_projection_times); its all-to-all counts the MTP
//   layer (a MoE layer: the decoder's last is one); the first stage is the same;
// - the last stage holds the embedding too (its MTP layers embed the next tokens), so the first
//   and the last stage all-reduce its gradients (none without MTP);
// - parameters: DeepSeek-V3 with one MTP layer counts one MoE layer (256 experts), the 2h x h
//   projection and three norms more than the 671B preset: about 11.5B (its report's 14B module
//   holds its own embedding and head, which Megatron shares);
// - model files: `mtp_num_layers` (Megatron's) and `num_nextn_predict_layers` (DeepSeek-V3's
//   config) are read, a negative count refused naming the field.
#include <catch2/catch.hpp>

#include "pipescope/core/errors.hpp"
#include "pipescope/sim/efficiency.hpp"
#include "pipescope/sim/layer_costs.hpp"
#include "pipescope/sim/model.hpp"

using namespace pipescope;
using namespace pipescope::sim;

namespace {

ModelSpec small_moe(int layers, int mtp_layers) {
  ModelSpec m;
  m.name = "small-moe";
  m.layers = layers;
  m.hidden = 256;
  m.heads = 8;
  m.seq = 512;
  m.vocab = 32000;
  m.gated_mlp = true;
  m.tied_embeddings = false;
  m.flash_attention = true;
  m.num_experts = 8;
  m.top_k = 2;
  m.moe_ffn_hidden = 512;
  m.mtp_num_layers = mtp_layers;
  return m;
}

ParallelConfig two_stages(const std::string& layout) {
  ParallelConfig p;
  p.pipeline = 2;
  p.data_parallel = 2;
  p.layout.layout = layout;
  return p;
}

}  // namespace

TEST_CASE("an MTP layer is a decoder layer more on the last stage, with another head pass and its projection") {
  const DeviceSpec h100 = device_preset("h100");
  const CostModel with_mtp = derive_costs(small_moe(4, 1), h100, Topology{}, two_stages("Et*2|t*2mL"));
  const CostModel layer_more = derive_costs(small_moe(5, 0), h100, Topology{}, two_stages("Et*2|t*3L"));
  const CostModel without = derive_costs(small_moe(4, 0), h100, Topology{}, two_stages("Et*2|t*2L"));
  REQUIRE(with_mtp.stages.size() == 2);
  const HeadTimes head = head_times(small_moe(4, 1), h100, two_stages("Et*2|t*2mL"));
  const HeadTimes projection = mtp_projection_times(small_moe(4, 1), h100, two_stages("Et*2|t*2mL"));
  CHECK(projection.f_s > 0);
  const StageCost& last = with_mtp.stages[1];
  CHECK(last.f_s == Approx(layer_more.stages[1].f_s + head.f_s + projection.f_s).epsilon(1e-12));
  CHECK(last.b_s == Approx(layer_more.stages[1].b_s + head.b_s + projection.b_s).epsilon(1e-12));
  CHECK(last.w_s == Approx(layer_more.stages[1].w_s + head.w_s + projection.w_s).epsilon(1e-12));
  CHECK(last.all_to_all.moe_layers == 3);
  CHECK(with_mtp.stages[0].f_s == without.stages[0].f_s);
  CHECK(with_mtp.stages[0].b_s == without.stages[0].b_s);
  // The embedding on both ends: its gradients all-reduced between them; more held on the last.
  CHECK(with_mtp.stages[0].reduce_tied_s > 0);
  CHECK(last.reduce_tied_s > 0);
  CHECK(without.stages[1].reduce_tied_s == 0);
  CHECK(last.static_bytes > layer_more.stages[1].static_bytes);
  CHECK(last.f_mem_bytes > layer_more.stages[1].f_mem_bytes);
  // Without a layout the MTP layer goes on the last stage all the same; a layout must name it.
  const CostModel unnamed = derive_costs(small_moe(4, 1), h100, Topology{}, two_stages(""));
  CHECK(unnamed.stages[1].f_s == last.f_s);
  CHECK_THROWS_WITH(derive_costs(small_moe(4, 1), h100, Topology{}, two_stages("Et*2|t*2L")),
                    Catch::Contains("holds 0 multi-token prediction layer(s) m, the model has 1"));
}

TEST_CASE("DeepSeek-V3's MTP layer counts a MoE layer, its projection and norms") {
  const ModelSpec base = resolve_model("deepseek-v3");
  ModelSpec mtp = base;
  mtp.mtp_num_layers = 1;
  CHECK(mtp.mtp_layer_is_moe());
  const std::int64_t moe_layer = base.moe_layer_dense_part().layer_parameters() + base.router_parameters() +
                                 base.num_experts * base.expert_parameters();
  const std::int64_t h = base.hidden;
  CHECK(mtp.total_parameters() - base.total_parameters() == moe_layer + 2 * h * h + 3 * h);
  const double added = static_cast<double>(mtp.total_parameters() - base.total_parameters());
  CHECK(added > 11.0e9);
  CHECK(added < 12.5e9);
  CHECK(mtp.active_parameters() > base.active_parameters());
}

TEST_CASE("model files give MTP layers by Megatron's and DeepSeek's names") {
  const std::string shape = R"("layers": 4, "hidden": 256, "heads": 8, "seq": 512, "vocab": 32000)";
  CHECK(parse_model_json("{" + shape + R"(, "mtp_num_layers": 2})", "a.json").mtp_num_layers == 2);
  CHECK(parse_model_json("{" + shape + R"(, "num_nextn_predict_layers": 1})", "b.json").mtp_num_layers == 1);
  CHECK_THROWS_WITH(parse_model_json("{" + shape + R"(, "mtp_num_layers": -1})", "c.json"),
                    Catch::Contains("c.json") && Catch::Contains("mtp_num_layers"));
}
