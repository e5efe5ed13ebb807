// Megatron's combined 1F1B step with and without delay_wgrad_compute (sim/src/megatron_combined_step.cpp;
// docs/MODEL.md, "Overlapped F&B steps").
// - The worked example of docs/MODEL.md, one MoE layer each, nothing slowed: F compute 4,
//   dispatch 3, combine 3; B compute 8 of which 4 weight gradients, combine 3, dispatch 3.
//   Without the option (the weight gradients inside mlp_b and pre_dispatch_b): link combine_b
//   0-3, dispatch_f 3-6, dispatch_b 7-10 (after mlp_b 3-7), combine_f 10-13; compute pre_dispatch_f
//   0-2, mlp_b 3-7, mlp_f 7-9, pre_dispatch_b 10-14: the step takes 14, F's output leaves at 13.
//   With it: mlp_b's data gradients 3-5, its weight gradients 5-7 beside dispatch_b 6-9 (which
//   waits for dispatch_f on the stream, not for them), mlp_f 7-9, combine_f 9-12,
//   pre_dispatch_b's data gradients 9-11 and, the backward's last layer, its weight gradients
//   last, 11-13: the step takes 13 and F's output leaves at 12.
// - The issue order of two layers each: the weight gradients of mlp_b right before dispatch_b, of
//   pre_dispatch_b at the end of each layer pair but the backward's last, whose come after
//   everything; off the backward's chain.
// - Without weight gradients delayed the step is the one before the option existed (docs/MODEL.md's
//   first example: 12, F leaving at 9), and a lone backward is its compute plus its all-to-all.
// - ppsim simulate --delay-wgrad-compute: only with the overlapped steps of
//   --overlap-moe-expert-parallel-comm or dualpipev, only for a MoE model, in one line; Mixtral
//   8x7B's interleaved run hides at least as much with it and is no slower.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "megatron_combined_step.hpp"
#include "ppsim_run.hpp"

using namespace pipescope;
using namespace pipescope::sim;
using detail::CombinedStepPasses;
using detail::PairResource;

namespace {

ExpertAllToAll combined_layers(double dispatch_s, double combine_s, int layers) {
  ExpertAllToAll a;
  a.dispatch_f_s = a.dispatch_b_s = dispatch_s * layers;
  a.combine_f_s = a.combine_b_s = combine_s * layers;
  a.moe_layers = layers;
  a.group_size = 8;
  return a;
}

CombinedStepPasses worked_example(double backward_weight_s) {
  return {4, combined_layers(3, 3, 1), 8, combined_layers(3, 3, 1), backward_weight_s};
}

// "C"/"L" for the resource, "f"/"b" for the pass, "w" for a delayed weight gradient.
std::string issue_text(const std::vector<detail::PairPiece>& pieces) {
  std::string text;
  for (const detail::PairPiece& p : pieces) {
    if (!text.empty()) text += ' ';
    text += p.resource == PairResource::Compute ? 'C' : 'L';
    text += p.backward_pass ? 'b' : 'f';
    if (p.off_chain) text += 'w';
  }
  return text;
}

}  // namespace

TEST_CASE("delay_wgrad_compute lets the backward's dispatch start after the experts' data gradients") {
  const OverlappedStep plain = detail::megatron_combined_step(worked_example(0));
  CHECK(plain.length_s() == 14);
  CHECK(plain.forward_end_s == 13);
  REQUIRE(plain.pieces.size() == 4);
  CHECK(plain.pieces[2].kind == AllToAllPiece::Kind::DispatchB);
  CHECK(plain.pieces[2].start_s == 7);

  const OverlappedStep delayed = detail::megatron_combined_step(worked_example(4));
  CHECK(delayed.length_s() == 13);
  CHECK(delayed.forward_end_s == 12);
  REQUIRE(delayed.pieces.size() == 4);
  CHECK(delayed.pieces[1].kind == AllToAllPiece::Kind::DispatchF);
  CHECK(delayed.pieces[1].end_s == 6);
  CHECK(delayed.pieces[2].kind == AllToAllPiece::Kind::DispatchB);
  CHECK(delayed.pieces[2].start_s == 6);
  CHECK(delayed.pieces[2].end_s == 9);
  CHECK(delayed.pieces[3].kind == AllToAllPiece::Kind::CombineF);
  CHECK(delayed.pieces[3].start_s == 9);
}

TEST_CASE("Megatron issues the delayed weight gradients where its layer plan calls backward_dw") {
  const CombinedStepPasses two_layers{4, combined_layers(1, 1, 2), 8, combined_layers(1, 1, 2), 4};
  // Per layer pair: combine_b, pre_dispatch_f, mlp_b, dispatch_f, mlp_b's dw, dispatch_b, mlp_f,
  // combine_f, pre_dispatch_b, and pre_dispatch_b's dw but in the backward's last layer.
  CHECK(issue_text(detail::megatron_combined_issue_order(two_layers)) ==
        "Lb Cf Cb Lf Cbw Lb Cf Lf Cb Cbw "
        "Lb Cf Cb Lf Cbw Lb Cf Lf Cb "
        "Cbw");
  CHECK(issue_text(detail::megatron_combined_issue_order({4, combined_layers(1, 1, 2), 8, combined_layers(1, 1, 2),
                                                          0})) == "Lb Cf Cb Lf Lb Cf Lf Cb Lb Cf Cb Lf Lb Cf Lf Cb");
  // The delayed pieces sum to the weight gradients given; the others to the rest.
  double weight_s = 0, data_s = 0;
  for (const detail::PairPiece& p : detail::megatron_combined_issue_order(two_layers))
    if (p.resource == PairResource::Compute && p.backward_pass) (p.off_chain ? weight_s : data_s) += p.work_s;
  CHECK(weight_s == 4);
  CHECK(data_s == 4);
}

TEST_CASE("without delayed weight gradients the combined step is the one docs/MODEL.md works through first") {
  const OverlappedStep step =
      detail::megatron_combined_step({4, combined_layers(1, 1, 1), 8, combined_layers(1, 1, 1), 0});
  CHECK(step.length_s() == 12);
  CHECK(step.forward_end_s == 9);
  // A backward alone: with delayed weight gradients its own dispatch hides behind them.
  CHECK(detail::megatron_combined_step({0, {}, 8, combined_layers(1, 1, 1), 0}).length_s() == 10);
  CHECK(detail::megatron_combined_step({0, {}, 8, combined_layers(1, 1, 1), 4}).length_s() == 9);
}

TEST_CASE("ppsim simulate --delay-wgrad-compute: with the overlapped steps of a MoE model only, said in one line",
          "[cli]") {
  const std::string mixtral =
      "simulate --stages 4 --micro-batches 16 --model mixtral-8x7b --data-parallel 8 --expert-parallel 8 "
      "--gpus-per-node 4 --json ";
  const std::string overlap = "--schedule interleaved-1f1b --overlap-moe-expert-parallel-comm ";
  const ppsim_test::PpsimRun plain = ppsim_test::run_ppsim(mixtral + overlap);
  const ppsim_test::PpsimRun delayed = ppsim_test::run_ppsim(mixtral + overlap + "--delay-wgrad-compute");
  const ppsim_test::PpsimRun dualpipev = ppsim_test::run_ppsim(mixtral + "--schedule dualpipev --delay-wgrad-compute");
  INFO(plain.err << delayed.err << dualpipev.err);
  REQUIRE(plain.status == 0);
  REQUIRE(delayed.status == 0);
  REQUIRE(dualpipev.status == 0);
  const auto number = [](const std::string& json, const std::string& key) {
    const std::size_t at = json.find("\"" + key + "\":");
    REQUIRE(at != std::string::npos);
    return std::stod(json.substr(at + key.size() + 3));
  };
  CHECK(number(delayed.out, "all_to_all_hidden_per_rank_s") >= number(plain.out, "all_to_all_hidden_per_rank_s"));
  CHECK(number(delayed.out, "iteration_time_s") <= number(plain.out, "iteration_time_s"));

  const ppsim_test::PpsimRun help = ppsim_test::run_ppsim("simulate --help");
  CHECK(help.out.find("--delay-wgrad-compute") != std::string::npos);

  for (const std::string& bad :
       {mixtral + "--schedule interleaved-1f1b --delay-wgrad-compute", mixtral + "--schedule zbv --delay-wgrad-compute",
        std::string("simulate --schedule interleaved-1f1b --stages 4 --micro-batches 8 --model llama-3-8b "
                    "--overlap-moe-expert-parallel-comm --delay-wgrad-compute"),
        std::string("simulate --schedule dualpipev --stages 4 --micro-batches 8 --delay-wgrad-compute")}) {
    const ppsim_test::PpsimRun refused = ppsim_test::run_ppsim(bad);
    INFO(bad << " -> " << refused.err);
    CHECK(refused.status == 2);
    CHECK(refused.err.find("--delay-wgrad-compute") != std::string::npos);
    CHECK(refused.one_error_line());
  }
}
