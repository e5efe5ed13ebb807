// pprun's check that the model can be held on this machine (pprun/model_memory.cpp). Expected:
// - the state counted is 16 bytes a parameter of the model's spec, times --dp replicas;
// - tiny-moe with --dp 2: expert parallelism 2 halves the experts each replica holds, so the
//   machine holds one replica's experts fewer (16 bytes x layers x the block's experts);
// - a memory below that state refuses the run naming the model and the sizes given; --device cuda
//   is not checked against the host's memory.
#include <catch2/catch.hpp>

#include "moe/moe_model.hpp"
#include "pipescope/core/errors.hpp"
#include "pprun/model_memory.hpp"
#include "pprun/options.hpp"
#include "pprun/run_plan.hpp"

using namespace pipescope::exec;

namespace {

double spec_parameters(const RunPlan& plan) {
  double total = 0;
  for (const auto& layer : plan.model.layers) total += static_cast<double>(layer.parameters);
  return total;
}

}  // namespace

TEST_CASE("the machine holds 16 bytes a parameter for each replica, the experts split over E") {
  const RunPlan gpt = make_run_plan(parse_run_options({"--nproc-per-node", "2", "--data", "synthetic"}), 2);
  CHECK(machine_state_bytes(gpt) == 16 * spec_parameters(gpt));

  const std::vector<std::string> moe = {"--nproc-per-node", "2",      "--dp",      "2",          "--model",
                                        "tiny-moe",         "--data", "synthetic", "--schedule", "gpipe",
                                        "--micro-batches",  "2"};
  std::vector<std::string> sharded = moe;
  sharded.insert(sharded.end(), {"--expert-parallel", "2"});
  const RunPlan whole = make_run_plan(parse_run_options(moe), 2);
  const RunPlan split = make_run_plan(parse_run_options(sharded), 2);
  CHECK(machine_state_bytes(whole) == 16 * 2 * spec_parameters(whole));
  const double one_replica_experts =
      static_cast<double>(whole.options.layers) * static_cast<double>(moe_block_expert_parameters(whole.model.config));
  CHECK(machine_state_bytes(whole) - machine_state_bytes(split) == Approx(16 * one_replica_experts));
}

TEST_CASE("a model beyond the machine's memory is refused naming its sizes") {
  const RunPlan plan = make_run_plan(
      parse_run_options({"--nproc-per-node", "2", "--data", "synthetic", "--hidden", "128", "--layers", "6"}), 2);
  const double needed = machine_state_bytes(plan);
  CHECK_NOTHROW(check_model_fits_machine(plan, needed));
  CHECK_THROWS_WITH(check_model_fits_machine(plan, needed / 2),
                    Catch::Contains("--model tiny-gpt with --layers 6, --hidden 128: its weights, gradients and AdamW "
                                    "state need") &&
                        Catch::Contains("more than its"));
  RunPlan on_gpu = plan;
  on_gpu.options.device = "cuda";
  CHECK_NOTHROW(check_model_fits_machine(on_gpu, needed / 2));
  CHECK(physical_memory_bytes() > 1e8);
}
