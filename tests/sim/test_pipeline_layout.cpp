// Which layers each stage holds, Megatron-Core's way (pipeline_layout.hpp):
// - the Llama 3 paper's 405B: 126 layers on 16 ranks with the embedding and the loss counted as
//   layers: 128 / 16 = 8 per rank, the first and the last 7; with 8 chunks on 8 ranks (NeMo's
//   recipe) 2 per stage, the first and the last 1;
// - uneven first/last stage: 30 layers on 4 ranks, first 6, last 6 -> the middle two 9 each; with
//   3 chunks the first rank's 6 are 2 per chunk and each middle chunk holds 3;
// - a layout string "Et*3|(t*4|)*6t*3L" is 8 stages: 3, 4 x 6, 3 (30 layers);
// - what does not describe the model is refused naming the option and, for a string, the stage:
//   28 layers in a string for a 30-layer model, E on stage 2, a stage count other than P x V,
//   unbalanced parentheses, an unknown letter;
// - Megatron's refusals: uneven first/last with accounting, a layout string with either, first
//   layers not dividing by the chunks;
// - multi-token prediction layers `m`: on the last stage, after its decoder layers and before the
//   loss, as many as the model has ("Et*15|t*15mL" for 30 layers and one MTP layer; a layout
//   without `m` leaves them on the last stage); refused on another stage, in another number,
//   before a decoder layer or after the loss, each naming the stage;
// - with nothing given pipescope's split (22 layers on 8 stages: 2, 3 x 6, 2), whose Megatron
//   options megatron_layout_of_split names: none (even), the loss (one short), both (two short),
//   else a layout string.
#include <catch2/catch.hpp>

#include "pipescope/core/errors.hpp"
#include "pipescope/sim/pipeline_layout.hpp"

using namespace pipescope;
using namespace pipescope::sim;

namespace {

LayoutOptions accounting_both() {
  LayoutOptions o;
  o.account_for_embedding = true;
  o.account_for_loss = true;
  return o;
}

}  // namespace

TEST_CASE("counting the embedding and the loss as layers: the Llama 3 405B layouts") {
  const std::vector<int> meta = stage_layer_counts(accounting_both(), 126, 16, 1);
  REQUIRE(meta.size() == 16);
  CHECK(meta.front() == 7);
  CHECK(meta.back() == 7);
  for (std::size_t i = 1; i + 1 < meta.size(); ++i) CHECK(meta[i] == 8);
  const std::vector<int> nemo = stage_layer_counts(accounting_both(), 126, 8, 8);
  REQUIRE(nemo.size() == 64);
  CHECK(nemo.front() == 1);
  CHECK(nemo.back() == 1);
  CHECK(std::count(nemo.begin(), nemo.end(), 2) == 62);
  // 30 layers on 4 ranks x 8 chunks: one each, the first and the last stage only E and L.
  const std::vector<int> proxy = stage_layer_counts(accounting_both(), 30, 4, 8);
  CHECK(proxy.front() == 0);
  CHECK(proxy.back() == 0);
  LayoutOptions loss_only;
  loss_only.account_for_loss = true;
  CHECK(stage_layer_counts(loss_only, 31, 4, 1) == std::vector<int>{8, 8, 8, 7});
  CHECK_THROWS_WITH(stage_layer_counts(accounting_both(), 126, 5, 1), Catch::Contains("do not divide by --stages 5"));
  CHECK_THROWS_WITH(stage_layer_counts(accounting_both(), 126, 16, 3), Catch::Contains("do not divide by --chunks 3"));
}

TEST_CASE("Megatron's uneven first and last stage") {
  LayoutOptions o;
  o.first_stage_layers = 6;
  o.last_stage_layers = 6;
  CHECK(stage_layer_counts(o, 30, 4, 1) == std::vector<int>{6, 9, 9, 6});
  // Three chunks: stage i on rank i mod 4; rank 0's and rank 3's chunks hold 2 each, the middle 3.
  CHECK(stage_layer_counts(o, 30, 4, 3) == std::vector<int>{2, 3, 3, 2, 2, 3, 3, 2, 2, 3, 3, 2});
  LayoutOptions first_only;
  first_only.first_stage_layers = 2;
  CHECK(stage_layer_counts(first_only, 32, 4, 1) == std::vector<int>{2, 10, 10, 10});
  o.first_stage_layers = 5;
  CHECK_THROWS_WITH(stage_layer_counts(o, 30, 4, 3),
                    Catch::Contains("--decoder-first-pipeline-num-layers 5: must divide by --chunks 3"));
  o.first_stage_layers = 7;
  CHECK_THROWS_WITH(stage_layer_counts(o, 30, 4, 1), Catch::Contains("do not divide over the 2 middle pipeline ranks"));
  CHECK_THROWS_WITH(stage_layer_counts(first_only, 32, 1, 1), Catch::Contains("needs --stages 2 or more"));
  first_only.account_for_loss = true;
  CHECK_THROWS_WITH(stage_layer_counts(first_only, 32, 4, 1), Catch::Contains("Megatron refuses"));
}

TEST_CASE("a layout string in Megatron's grammar") {
  LayoutOptions o;
  o.layout = "Et*3|(t*4|)*6t*3L";
  CHECK(stage_layer_counts(o, 30, 8, 1) == std::vector<int>{3, 4, 4, 4, 4, 4, 4, 3});
  CHECK(stage_layer_counts(o, 30, 4, 2) == std::vector<int>{3, 4, 4, 4, 4, 4, 4, 3});
  // Commas are cosmetic; a stage may be empty.
  o.layout = "E,tt|,|ttL";
  CHECK(stage_layer_counts(o, 4, 3, 1) == std::vector<int>{2, 0, 2});
  const std::vector<LayoutStage> parsed = parse_pipeline_layout("E(t|)*2tL");
  REQUIRE(parsed.size() == 3);
  CHECK(parsed[0] == LayoutStage{1, true, false});
  CHECK(parsed[2] == LayoutStage{1, false, true});
}

TEST_CASE("a layout that does not describe the model is refused at the stage it fails") {
  LayoutOptions o;
  o.layout = "Et*3|(t*4|)*6tL";  // 28 layers
  CHECK_THROWS_WITH(stage_layer_counts(o, 30, 8, 1), Catch::Contains("hold 28 transformer layers, the model has 30") &&
                                                         Catch::Contains("stage, 7, ends 2 short"));
  o.layout = "Et*8|t*8|t*8|t*8L";
  CHECK_THROWS_WITH(stage_layer_counts(o, 30, 4, 1),
                    Catch::Contains("stage 3 (t*8L, rank 3, chunk 0) brings the transformer layers to 32"));
  o.layout = "t*8|t*8|Et*8|t*6L";
  CHECK_THROWS_WITH(stage_layer_counts(o, 30, 4, 1),
                    Catch::Contains("stage 0 (t*8, rank 0, chunk 0) lacks the embedding E"));
  o.layout = "Et*8|t*8|t*8|t*6L";
  CHECK_THROWS_WITH(
      stage_layer_counts(o, 30, 2, 1),
      Catch::Contains("has 4 stages, but --stages 2 x --chunks 1 is 2") && Catch::Contains("give --chunks 2"));
  CHECK_THROWS_WITH(parse_pipeline_layout("Et*3|(t*4|*6tL"), Catch::Contains("a '(' is never closed"));
  CHECK_THROWS_WITH(parse_pipeline_layout("Et*3|x|tL"),
                    Catch::Contains("'x' is not a layer") && Catch::Contains("character 6"));
  CHECK_THROWS_WITH(parse_pipeline_layout("Et|(t)|L"), Catch::Contains("must be followed by *N"));
  CHECK_THROWS_WITH(parse_pipeline_layout("t*3|tL"), Catch::Contains("exactly one E"));
  CHECK_THROWS_WITH(parse_pipeline_layout("(t)*99999999999"), Catch::Contains("unroll to more than"));
  o.layout = "Et|tL";
  o.account_for_loss = true;
  CHECK_THROWS_WITH(stage_layer_counts(o, 2, 2, 1), Catch::Contains("cannot be combined"));
}

TEST_CASE("multi-token prediction layers m sit on the last stage, with the loss") {
  LayoutOptions o;
  o.layout = "Et*15|t*15mL";
  CHECK(parse_pipeline_layout(o.layout).back() == LayoutStage{15, false, true, 1});
  CHECK(stage_layer_counts(o, 30, 2, 1, 1) == std::vector<int>{15, 15});
  o.layout = "Et*15|t*15L";  // the model's MTP layer left out: Megatron refuses it, so does pipescope
  CHECK_THROWS_WITH(stage_layer_counts(o, 30, 2, 1, 1),
                    Catch::Contains("stage 1 (t*15L, rank 1, chunk 0) holds 0 multi-token prediction layer(s) m, "
                                    "the model has 1 (mtp_num_layers)"));
  CHECK(stage_layer_counts(o, 30, 2, 1, 0) == std::vector<int>{15, 15});
  o.layout = "Et*15m|t*15L";
  CHECK_THROWS_WITH(stage_layer_counts(o, 30, 2, 1, 1),
                    Catch::Contains("stage 0 (Et*15m, rank 0, chunk 0) holds multi-token prediction layers m"));
  o.layout = "Et*15|t*15m*2L";
  CHECK_THROWS_WITH(stage_layer_counts(o, 30, 2, 1, 1),
                    Catch::Contains("holds 2 multi-token prediction layer(s) m, the model has 1 (mtp_num_layers)"));
  CHECK_THROWS_WITH(parse_pipeline_layout("Et*15|t*14mtL"),
                    Catch::Contains("stage 1: a decoder layer t after a multi-token"));
  CHECK_THROWS_WITH(parse_pipeline_layout("Et*15|t*15Lm"),
                    Catch::Contains("stage 1: a transformer layer after the loss L"));
  CHECK_THROWS_WITH(parse_pipeline_layout("Et*3|x|tL"), Catch::Contains("m multi-token prediction layer"));
}

TEST_CASE("pipescope's split where nothing is given, and the Megatron options that name it") {
  CHECK(stage_layer_counts(LayoutOptions{}, 22, 8, 1) == std::vector<int>{2, 3, 3, 3, 3, 3, 3, 2});
  CHECK(split_layers(32, 4) == std::vector<int>{8, 8, 8, 8});
  CHECK(megatron_layout_of_split(32, 4, 1).is_default());
  CHECK(megatron_layout_of_split(126, 16, 1) == accounting_both());
  LayoutOptions loss_only;
  loss_only.account_for_loss = true;
  CHECK(megatron_layout_of_split(31, 4, 1) == loss_only);
  // 13 layers on 8 stages leave three short: only a layout string says so.
  CHECK(megatron_layout_of_split(13, 8, 1).layout == "Et|t|t*2|t*2|t*2|t*2|t*2|tL");
  CHECK(layout_string({1, 2, 0}) == "Et|t*2|L");
}
