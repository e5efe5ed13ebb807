// Reading traces in the background (gui/src/widgets/trace_loading.cpp, through MainWindow's
// open_files_in_background): a real window offscreen. A read shows its traces once done, with
// the progress dialog ("loading_dialog") meanwhile; cancelling it (Esc, or the Cancel button)
// leaves the window showing what it showed before, and no trace of the cancelled read.
#include <catch2/catch.hpp>

#include <QApplication>
#include <QElapsedTimer>
#include <QLabel>
#include <QFileInfo>
#include <QKeyEvent>
#include <QMessageBox>
#include <QProgressDialog>
#include <QPushButton>

#include <atomic>
#include <filesystem>
#include <functional>
#include <unistd.h>

#include "main_window.hpp"
#include "pipescope/traces/clock_alignment.hpp"
#include "pipescope/traces/synthetic.hpp"
#include "pipescope/traces/trace_io.hpp"
#include "test_application.hpp"
#include "timeline_widget.hpp"
#include "trace_loading.hpp"

using namespace pipescope;
using namespace pipescope::gui;
namespace fs = std::filesystem;

namespace {

QString written_loading_trace(const std::string& name, int micro_batches) {
  const fs::path path =
      fs::temp_directory_path() / ("pipescope_test_trace_loading_" + std::to_string(::getpid()) + name);
  traces::SyntheticPipeline pipeline;
  pipeline.num_micro_batches = micro_batches;
  traces::write_trace(traces::make_1f1b_trace(pipeline), path.string());
  return QString::fromStdString(path.string());
}

// Runs the event loop until the window's background read has ended (at most a minute).
bool wait_for_loading(const MainWindow& window) {
  QElapsedTimer clock;
  clock.start();
  while (window.loading() && clock.elapsed() < 60000) QApplication::processEvents(QEventLoop::AllEvents, 50);
  QApplication::sendPostedEvents(nullptr, QEvent::DeferredDelete);  // the finished read's dialog
  return !window.loading();
}

bool an_error_is_shown() {
  for (QWidget* w : QApplication::topLevelWidgets())
    if (qobject_cast<QMessageBox*>(w) && w->isVisible()) return true;
  return false;
}

// Opens `small` at once, then starts reading `large` in the background and gives it up with
// `cancel` (given the progress dialog); the window must show `small` as before.
void check_cancelled_read(const std::function<void(QProgressDialog&)>& cancel) {
  const QString small = written_loading_trace("small.json", 8);
  const QString large = written_loading_trace("large.json", 2000);
  MainWindow window;
  window.show();
  REQUIRE_FALSE(window.open_files({small}));
  const TimelineModel* before = window.timeline()->model();
  const QString title = window.windowTitle();

  window.open_files_in_background({large});
  REQUIRE(window.loading());
  auto* dialog = window.findChild<QProgressDialog*>("loading_dialog");
  REQUIRE(dialog != nullptr);
  cancel(*dialog);
  REQUIRE_FALSE(dialog->isVisible());
  REQUIRE(wait_for_loading(window));
  REQUIRE(window.timeline()->model() == before);
  REQUIRE(window.windowTitle() == title);
  REQUIRE(window.timeline()->model()->trace(0).events.size() < 1000);
  REQUIRE_FALSE(an_error_is_shown());
  REQUIRE(window.findChild<QProgressDialog*>("loading_dialog") == nullptr);
  fs::remove(small.toStdString());
  fs::remove(large.toStdString());
}

}  // namespace

TEST_CASE("a trace read in the background is shown once read", "[trace_loading]") {
  testing::app();
  const QString path = written_loading_trace("background.json", 500);
  MainWindow window;
  window.show();
  window.set_background_read_bytes(0);  // every read in the background
  bool then_ran = false;
  window.open_files_interactively({path}, [&] { then_ran = true; });
  REQUIRE(window.loading());
  REQUIRE(window.findChild<QProgressDialog*>("loading_dialog") != nullptr);
  REQUIRE(window.timeline()->model() == nullptr);  // nothing shown before the read is done
  REQUIRE(wait_for_loading(window));
  REQUIRE(then_ran);
  REQUIRE(window.timeline()->model() != nullptr);
  REQUIRE(window.timeline()->model()->trace(0).events.size() > 4000);
  REQUIRE(window.windowTitle().startsWith(QFileInfo(path).fileName()));
  REQUIRE(window.recent_files().front() == path);
  REQUIRE_FALSE(an_error_is_shown());
  fs::remove(path.toStdString());
}

TEST_CASE("small inputs are read at once, large ones in the background", "[trace_loading]") {
  testing::app();
  const QString path = written_loading_trace("threshold.json", 8);
  MainWindow window;
  REQUIRE(window.background_read_bytes() == (std::uint64_t{32} << 20));
  window.open_files_interactively({path});
  REQUIRE_FALSE(window.loading());
  REQUIRE(window.timeline()->model() != nullptr);
  fs::remove(path.toStdString());
}

TEST_CASE("Esc on the progress dialog cancels the read and keeps the window as it was", "[trace_loading]") {
  testing::app();
  check_cancelled_read([](QProgressDialog& dialog) {
    QKeyEvent escape(QEvent::KeyPress, Qt::Key_Escape, Qt::NoModifier);
    QApplication::sendEvent(&dialog, &escape);
  });
}

TEST_CASE("the Cancel button of the progress dialog cancels the read", "[trace_loading]") {
  testing::app();
  check_cancelled_read([](QProgressDialog& dialog) {
    auto* button = dialog.findChild<QPushButton*>();
    REQUIRE(button != nullptr);
    button->click();
  });
}

TEST_CASE("once the files are read the dialog says the events are laid out, and Cancel still gives the read up",
          "[trace_loading]") {
  testing::app();
  QWidget parent;
  parent.show();
  std::atomic<bool> release{false};
  bool done_ran = false;
  // A read that has read its files and then lays out until the test lets it go.
  TraceLoading loading(
      &parent, "Reading big.json", 1000,
      [&release](traces::ReadProgress& progress) {
        progress.file_bytes_done = 1000;
        progress.files_read = true;
        while (!release.load() && !progress.cancel_requested.load()) ::usleep(1000);
      },
      [&done_ran] { done_ran = true; });
  QProgressDialog* dialog = loading.dialog();
  REQUIRE(dialog != nullptr);
  QElapsedTimer clock;
  clock.start();
  while (dialog->labelText() != "Laying out the events" && clock.elapsed() < 10000)
    QApplication::processEvents(QEventLoop::AllEvents, 20);
  REQUIRE(dialog->labelText() == "Laying out the events");
  REQUIRE(dialog->maximum() == 0);  // a busy bar: nothing to count
  loading.cancel();
  REQUIRE(loading.cancelled());
  clock.restart();
  while (!loading.finished() && clock.elapsed() < 10000) QApplication::processEvents(QEventLoop::AllEvents, 20);
  REQUIRE(loading.finished());
  REQUIRE_FALSE(done_ran);
}

TEST_CASE("the view of a read is prepared off the window: clocks aligned, model laid out, or nothing once cancelled",
          "[trace_loading]") {
  traces::SyntheticPipeline pipeline;
  pipeline.num_micro_batches = 8;
  traces::Trace measured = traces::make_1f1b_trace(pipeline);
  measured.meta.source = "measured";
  // Rank 1's clock 5 ms behind: its receives end before the sends that fed them began.
  for (auto& e : measured.events)
    if (e.rank == 1) e.ts_us -= 5000;
  const std::size_t events = measured.events.size();

  const PreparedView view = prepare_view(measured, std::nullopt, false, nullptr);
  REQUIRE(view.model != nullptr);
  REQUIRE(view.model->trace(0).events.size() == events);
  REQUIRE(view.aligned.size() == 1);
  const PreparedView raw = prepare_view(measured, std::nullopt, true, nullptr);
  REQUIRE(raw.model != nullptr);
  REQUIRE(raw.aligned.isEmpty());

  traces::ReadProgress cancelled;
  cancelled.cancel_requested = true;
  REQUIRE(prepare_view(measured, std::nullopt, false, &cancelled).model == nullptr);
}
