// Gradient clipping with expert parallelism, end to end (pprun --clip-grad over loopback, Gloo;
// runtime/collectives.cpp's clip_gradients): the global norm counts every expert of the model
// once, wherever it is held.
// Model: tiny-moe as test_pprun_moe.cpp's (2 MoE blocks of 4 experts, top-2, a shared expert),
// 8 micro-batches a step in all, 3 steps, --clip-grad 0.05 (below every step's norm: each clips).
// Expected:
// - one process, 2 replicas holding every expert (--dp 2 --expert-parallel 1) and 2 replicas
//   holding half of them each (--expert-parallel 2), with and without a pipeline of 2: each
//   metrics row has grad_norm, above 0.05, and the runs' norms and losses agree within 1e-5
//   relative (not bitwise: the experts' and the replicas' gradients are summed in other
//   orders, as test_pprun_moe.cpp says). A rank that counted only its own experts would give a
//   norm below the one process's by the other half's share.
// - without --clip-grad the rows have no grad_norm; --clip-grad -1 is refused in one line, exit 2,
//   before any worker starts.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "pprun_run.hpp"

using pprun_test::PprunRun;
using pprun_test::run_pprun;

namespace {

const std::string kClippedMoe =
    "--model tiny-moe --layers 2 --hidden 32 --seq-len 32 --micro-batch-size 4 --experts 4 --top-k 2 --moe-ffn-hidden "
    "32 --shared-expert-ffn-hidden 16 --lr 0.01 --quiet --timeout 30 --steps 3 ";
constexpr double kClipNorm = 0.05;

std::vector<double> grad_norms(const PprunRun& run) {
  std::vector<double> norms;
  for (const auto& row : run.metrics) norms.push_back(row.value("grad_norm", -1.0));
  return norms;
}

}  // namespace

TEST_CASE("pprun --clip-grad counts every expert once, whichever replica holds it") {
  const std::string clip = "--clip-grad " + std::to_string(kClipNorm) + " ";
  const PprunRun one =
      run_pprun("clip-one", "--nproc-per-node 1 --schedule data-parallel --micro-batches 8 " + clip + kClippedMoe);
  INFO(one.err);
  REQUIRE(one.status == 0);
  const std::vector<double> expected = grad_norms(one);
  REQUIRE(expected.size() == 3);
  for (double norm : expected) CHECK(norm > kClipNorm);

  const std::map<std::string, std::string> layouts = {
      {"clip-dp2-ep1", "--nproc-per-node 2 --dp 2 --expert-parallel 1 --schedule data-parallel --micro-batches 4 "},
      {"clip-dp2-ep2", "--nproc-per-node 2 --dp 2 --expert-parallel 2 --schedule data-parallel --micro-batches 4 "},
      {"clip-dp2-ep2-pp2", "--nproc-per-node 4 --dp 2 --expert-parallel 2 --schedule 1f1b --micro-batches 4 "},
  };
  for (const auto& [name, layout] : layouts) {
    const PprunRun run = run_pprun(name, layout + clip + kClippedMoe);
    INFO(name << ": " << run.err);
    REQUIRE(run.status == 0);
    const std::vector<double> norms = grad_norms(run);
    REQUIRE(norms.size() == expected.size());
    for (std::size_t step = 0; step < norms.size(); ++step) {
      INFO("step " << step);
      CHECK(norms[step] == Approx(expected[step]).epsilon(1e-5));
      CHECK(run.losses[step] == Approx(one.losses[step]).epsilon(1e-5));
    }
  }
}

TEST_CASE("pprun --clip-grad: no grad_norm without it, and a negative norm refused") {
  const PprunRun plain =
      run_pprun("clip-none", "--nproc-per-node 1 --schedule data-parallel --micro-batches 2 " + kClippedMoe);
  INFO(plain.err);
  REQUIRE(plain.status == 0);
  REQUIRE_FALSE(plain.metrics.empty());
  for (const auto& row : plain.metrics) CHECK_FALSE(row.contains("grad_norm"));

  const PprunRun refused = run_pprun("clip-refused", "--nproc-per-node 1 --clip-grad -1 " + kClippedMoe);
  CHECK(refused.status == 2);
  CHECK(refused.err.find("option --clip-grad: -1 must be a finite norm >= 0 (0: no clipping)") != std::string::npos);
  CHECK(std::count(refused.err.begin(), refused.err.end(), '\n') == 1);
  CHECK(refused.metrics.empty());
}
