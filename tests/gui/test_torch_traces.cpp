// ppview on torch.profiler traces (tests/golden/torch/traces/interleaved-1f1b, a 2-rank
// ScheduleInterleaved1F1B run that torch 2.15 profiled): the two ranks' files, or their folder,
// are the two ranks of ONE measured trace, not a predicted and a measured trace; the
// operators run inside each action are a lane of nested sub-rows; --step picks the step.
#include <catch2/catch.hpp>

#include <QStatusBar>

#include <filesystem>

#include "main_window.hpp"
#include "pipescope/gui/timeline_model.hpp"
#include "pipescope/traces/torch_profiler.hpp"
#include "test_application.hpp"
#include "timeline_widget.hpp"

using namespace pipescope::gui;
namespace fs = std::filesystem;

namespace {

QString torch_run(const char* file = nullptr) {
  fs::path p = fs::path(PIPESCOPE_SOURCE_DIR) / "tests/golden/torch/traces/interleaved-1f1b";
  if (file) p /= file;
  return QString::fromStdString(p.string());
}

}  // namespace

TEST_CASE("ppview shows a torch run's two rank files as one trace of two ranks", "[torch]") {
  testing::app();
  MainWindow window;
  REQUIRE_FALSE(window.open_files({torch_run("rank0.pt.trace.json.gz"), torch_run("rank1.pt.trace.json.gz")}));
  const TimelineModel* model = window.timeline()->model();
  REQUIRE(model);
  CHECK(model->series_count() == 1);
  CHECK(model->rank_count() == 2);
  CHECK(model->has_pipeline(0));
  CHECK(model->trace(0).meta.iteration == 1);
  // The operators lane nests aten calls inside their callers.
  bool nested_operators = false;
  for (const Row& row : model->rows())
    if (row.lane == pipescope::traces::kOperatorsLane && row.depth_count > 1) nested_operators = true;
  CHECK(nested_operators);
  CHECK(window.statusBar()->currentMessage().isEmpty());  // nothing missing
}

TEST_CASE("ppview reads a torch run's folder at the step asked for, and names a missing one", "[torch]") {
  testing::app();
  MainWindow window;
  window.set_torch_step(0);
  REQUIRE_FALSE(window.open_files({torch_run()}));
  CHECK(window.timeline()->model()->trace(0).meta.iteration == 0);
  CHECK(window.timeline()->model()->rank_count() == 2);
  window.set_torch_step(4);
  const auto error = window.open_files({torch_run()});
  REQUIRE(error);
  CHECK(error->contains("no ProfilerStep#4 (steps there: 0, 1)"));
}
