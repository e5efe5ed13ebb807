// Models built from layer specs. Scenario: tiny-gpt with 2 blocks, hidden 32, vocab 50, seq 8 has
// 5 layers (embed, 2 blocks, norm, head) whose spec parameter counts equal the built modules'
// (embed 50*32 + 8*32 = 1856, head 50*32 = 1600); weights do not depend on the split (layers 0-4 in
// one stage equal layers 0-1 and 2-4 built apart); the tied embedding and head start identical; the
// synthetic data is the same for the same index and differs between indices; an mlp of 3 layers
// has 4 layers and a forward of a [8, 16] batch gives [8, 10] logits.
#include <catch2/catch.hpp>

#include "pipescope/exec/model.hpp"

using namespace pipescope::exec;

namespace {
ModelConfig gpt_config() {
  ModelConfig c;
  c.name = "tiny-gpt";
  c.layers = 2;
  c.hidden = 32;
  c.vocab = 50;
  c.seq_len = 8;
  c.micro_batch_size = 4;
  c.seed = 11;
  return c;
}
}  // namespace

TEST_CASE("spec parameter counts match the built layers") {
  const ModelSpec spec = make_model_spec(gpt_config());
  REQUIRE(spec.layers.size() == 5);
  CHECK(spec.layers[0].parameters == 50 * 32 + 8 * 32);
  CHECK(spec.layers[4].parameters == 50 * 32);
  for (int l = 0; l < 5; ++l) {
    StageModule one(spec, l, l + 1);
    std::int64_t n = 0;
    for (const auto& p : one.parameters()) n += p.tensor.numel();
    CHECK(n == spec.layers[l].parameters);
  }
}

TEST_CASE("weights depend on (seed, layer), not on the split") {
  const ModelSpec spec = make_model_spec(gpt_config());
  StageModule whole(spec, 0, 5);
  StageModule first(spec, 0, 2), second(spec, 2, 5);
  std::vector<StageModule::Parameter> split = first.parameters();
  for (const auto& p : second.parameters()) split.push_back(p);
  REQUIRE(split.size() == whole.parameters().size());
  for (std::size_t i = 0; i < split.size(); ++i) {
    CHECK(split[i].name == whole.parameters()[i].name);
    CHECK(at::equal(split[i].tensor, whole.parameters()[i].tensor));
  }
  // The tied copies: the embedding's weight and the head's weight.
  at::Tensor embed, head;
  for (const auto& p : whole.parameters())
    if (p.tied_key == "embed") (p.layer == 0 ? embed : head) = p.tensor;
  REQUIRE(embed.defined());
  REQUIRE(head.defined());
  CHECK(at::equal(embed, head));
  CHECK(embed.abs().max().item<float>() > 0);
}

TEST_CASE("synthetic data is deterministic") {
  const ModelConfig c = gpt_config();
  const MicroBatch a = make_micro_batch(c, 3), b = make_micro_batch(c, 3), other = make_micro_batch(c, 4);
  CHECK(at::equal(a.inputs[0], b.inputs[0]));
  CHECK(at::equal(a.labels, b.labels));
  CHECK_FALSE(at::equal(a.inputs[0], other.inputs[0]));
  // Labels are the next tokens.
  CHECK(at::equal(a.inputs[0].slice(1, 1), a.labels.slice(1, 0, c.seq_len - 1)));
}

// The first stage asks for inputs only: the same inputs, and no labels (for the mlp, no
// teacher product).
TEST_CASE("synthetic data without labels has the same inputs") {
  for (const char* model : {"mlp", "tiny-gpt"}) {
    ModelConfig c = gpt_config();
    c.name = model;
    const MicroBatch full = make_micro_batch(c, 5), inputs_only = make_micro_batch(c, 5, /*with_labels=*/false);
    INFO(model);
    REQUIRE(inputs_only.inputs.size() == full.inputs.size());
    CHECK(at::equal(inputs_only.inputs[0], full.inputs[0]));
    CHECK(full.labels.defined());
    if (c.name == "mlp") CHECK_FALSE(inputs_only.labels.defined());
  }
}

TEST_CASE("mlp forward shapes and loss") {
  ModelConfig c;
  c.name = "mlp";
  c.layers = 3;
  c.hidden = 16;
  c.vocab = 10;
  c.micro_batch_size = 8;
  const ModelSpec spec = make_model_spec(c);
  REQUIRE(spec.layers.size() == 4);
  StageModule all(spec, 0, 4);
  const MicroBatch batch = make_micro_batch(c, 0);
  const TensorList out = all.forward(batch.inputs);
  REQUIRE(out.size() == 1);
  CHECK(out[0].sizes().vec() == std::vector<std::int64_t>{8, 10});
  const double loss = spec.loss(out, batch.labels).item<double>();
  CHECK(loss > 0);
  CHECK(loss < 20);
}
