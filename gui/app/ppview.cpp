// ppview: the desktop timeline viewer. `ppview [TRACE ...] [--screenshot FILE.png]`: with two
// traces, the first is the prediction and the second the measurement. --screenshot renders
// the window without a display and exits (status 2 and one stderr line for a broken trace).
#include <QApplication>
#include <QCommandLineParser>
#include <QImage>
#include <QPixmap>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>

#include "main_window.hpp"
#include "pipescope/traces/synthetic.hpp"
#include "timeline_widget.hpp"

namespace {

bool wants_screenshot(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], "--screenshot", 12) == 0) return true;
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  // Without a display (or when only a screenshot is wanted) render offscreen.
  const bool headless = wants_screenshot(argc, argv);
  if (std::getenv("QT_QPA_PLATFORM") == nullptr &&
      (headless || (std::getenv("DISPLAY") == nullptr && std::getenv("WAYLAND_DISPLAY") == nullptr)))
    setenv("QT_QPA_PLATFORM", "offscreen", 1);

  // Headless, Qt's own notices about the platform (runtime directory, window hints) would
  // break the promise of one stderr line per error.
  if (headless)
    qInstallMessageHandler([](QtMsgType type, const QMessageLogContext&, const QString& message) {
      if (type == QtCriticalMsg || type == QtFatalMsg) std::cerr << message.toStdString() << "\n";
    });
  QApplication app(argc, argv);
  QApplication::setApplicationName("ppview");
  QApplication::setOrganizationName("pipescope");
  QApplication::setApplicationVersion(PIPESCOPE_VERSION);

  QCommandLineParser parser;
  parser.setApplicationDescription(
      "Pipeline trace viewer (pipescope). With two traces, the first is the prediction and the second\n"
      "the measurement, shown on one time axis with their differences.\n"
      "Keys: W/S zoom, A/D pan, 0 show all, Z zoom to selection, Ctrl+F search, F3 next match.\n"
      "Mouse: wheel zooms around the cursor, drag pans, shift-drag (or right-drag) selects a range.");
  parser.addHelpOption();
  parser.addVersionOption();
  parser.addPositionalArgument("TRACE", "trace files (.json or .json.gz): one, or predicted then measured", "[TRACE ...]");
  QCommandLineOption screenshot("screenshot", "render the window into FILE.png without a display and exit", "FILE.png");
  QCommandLineOption size("size", "window size for --screenshot (default: 1600x1000)", "WxH", "1600x1000");
  QCommandLineOption no_difference("no-difference", "start without the difference view (measured blocks in kind colours)");
  QCommandLineOption arrows("arrows", "start with send-to-receive arrows shown");
  QCommandLineOption critical("critical-path", "start with the critical path highlighted");
  QCommandLineOption zoom("zoom", "start showing only [START_US, END_US], e.g. 0,2500", "START_US,END_US");
  QCommandLineOption demo("demo",
                          "show a generated pair instead of files: a 1F1B prediction (4 ranks, 8 micro-batches) and a "
                          "measurement with 15% jitter and rank 2 running 1.3x slower");
  parser.addOptions({screenshot, size, no_difference, arrows, critical, zoom, demo});
  parser.process(app);

  auto fail = [](const QString& message) {
    std::cerr << "ppview: error: " << message.toStdString() << "\n";
    return 2;
  };
  const QStringList files = parser.positionalArguments();
  int width = 1600, height = 1000;
  {
    const QStringList parts = parser.value(size).split('x');
    bool ok_w = false, ok_h = false;
    if (parts.size() == 2) {
      width = parts[0].toInt(&ok_w);
      height = parts[1].toInt(&ok_h);
    }
    if (!ok_w || !ok_h || width < 200 || height < 200 || width > 10000 || height > 10000)
      return fail("--size: expected WxH between 200x200 and 10000x10000, not '" + parser.value(size) + "'");
  }

  pipescope::gui::MainWindow window;
  window.resize(width, height);
  window.set_difference(!parser.isSet(no_difference));
  window.set_flows(parser.isSet(arrows));
  window.set_critical_path(parser.isSet(critical));
  if (parser.isSet(demo)) {
    if (!files.isEmpty()) return fail("--demo shows generated traces; give either --demo or trace files");
    pipescope::traces::SyntheticPipeline pipeline;
    pipescope::traces::Trace predicted = pipescope::traces::make_1f1b_trace(pipeline);
    pipeline.jitter = 0.15;
    pipeline.slow_rank = 2;
    pipeline.slow_factor = 1.3;
    pipeline.source = "measured";
    window.show_traces(std::move(predicted), pipescope::traces::make_1f1b_trace(pipeline), "demo: predicted vs measured");
  }
  if (!files.isEmpty()) {
    if (parser.isSet(screenshot)) {
      if (auto error = window.open_files(files)) return fail(*error);
    } else {
      window.open_files_interactively(files);
    }
  }
  if (parser.isSet(zoom)) {
    const QStringList parts = parser.value(zoom).split(',');
    bool ok_a = false, ok_b = false;
    const double a = parts.size() == 2 ? parts[0].toDouble(&ok_a) : 0, b = parts.size() == 2 ? parts[1].toDouble(&ok_b) : 0;
    if (!ok_a || !ok_b || !(b > a)) return fail("--zoom: expected START_US,END_US with START_US < END_US, not '" + parser.value(zoom) + "'");
    window.timeline()->zoom_to(a, b);
  }

  if (parser.isSet(screenshot)) {
    window.show();
    QApplication::processEvents();
    const QString path = parser.value(screenshot);
    const QImage image = window.grab().toImage();
    if (!image.save(path, "PNG")) {
      std::cerr << "ppview: error: cannot write screenshot " << path.toStdString() << "\n";
      return 1;
    }
    return 0;
  }
  window.show();
  return app.exec();
}
