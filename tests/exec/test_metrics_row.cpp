// pprun's metrics row (pprun/metrics_row.hpp), the text of SPEC.md section 8.
// Expected:
// - A row of every key is the line the file has always had, byte for byte: "step", "loss"
//   (%.17g), "iteration_time_s" (%.9g), "peak_memory_bytes", "recompute_layers",
//   "stolen_time_s" (%.9g), "eval_loss" (%.17g), "grad_norm" (%.17g), spaces after ':' and ',',
//   one newline.
// - The optional keys are left out when there is nothing to say (no recomputation, stolen time
//   not measured, no evaluation, no clipping).
// - Read back, a written row gives its figures again (the JSON parser's doubles of %.17g are
//   exact); a row of an older run with "step" alone reads; a line without "step" is refused.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "pprun/metrics_row.hpp"

using namespace pipescope::exec;

namespace {

MetricsRow full_row() {
  MetricsRow row;
  row.step = 7;
  row.loss = 2.5;
  row.iteration_time_s = 0.125;
  row.peak_memory_bytes = {1000, 2000};
  row.recompute_layers = 2;
  row.stolen_time_s = {0.0, 0.25};
  row.eval_loss = 1.75;
  row.grad_norm = 0.5;
  return row;
}

}  // namespace

TEST_CASE("metrics row: every key in the file's order and number formats") {
  CHECK(metrics_line(full_row()) ==
        R"({"step": 7, "loss": 2.5, "iteration_time_s": 0.125, "peak_memory_bytes": [1000, 2000], )"
        R"("recompute_layers": 2, "stolen_time_s": [0, 0.25], "eval_loss": 1.75, "grad_norm": 0.5})"
        "\n");
  MetricsRow row = full_row();
  row.loss = 1.0 / 3.0;
  row.iteration_time_s = 1.0 / 3.0;
  row.stolen_time_s.clear();
  row.recompute_layers = 0;
  row.eval_loss.reset();
  row.grad_norm.reset();
  CHECK(
      metrics_line(row) ==
      R"({"step": 7, "loss": 0.33333333333333331, "iteration_time_s": 0.333333333, "peak_memory_bytes": [1000, 2000]})"
      "\n");
}

TEST_CASE("metrics row: read back as written; older rows read; a line without a step is refused") {
  const MetricsRow written = full_row();
  const auto read = nlohmann::json::parse(metrics_line(written)).get<MetricsRow>();
  CHECK(read.step == written.step);
  CHECK(read.loss == written.loss);
  CHECK(read.iteration_time_s == written.iteration_time_s);
  CHECK(read.peak_memory_bytes == written.peak_memory_bytes);
  CHECK(read.recompute_layers == written.recompute_layers);
  CHECK(read.stolen_time_s == written.stolen_time_s);
  CHECK(read.eval_loss == written.eval_loss);
  CHECK(read.grad_norm == written.grad_norm);

  const auto old = nlohmann::json::parse(R"({"step": 3, "loss": 4.0})").get<MetricsRow>();
  CHECK(old.step == 3);
  CHECK(old.loss == 4.0);
  CHECK(old.peak_memory_bytes.empty());
  CHECK_FALSE(old.eval_loss.has_value());

  CHECK_THROWS(nlohmann::json::parse(R"({"loss": 4.0})").get<MetricsRow>());
  CHECK_THROWS(nlohmann::json::parse(R"({"step": "three"})").get<MetricsRow>());
}
