// ppview: the desktop timeline viewer. `ppview [TRACE ...] [--screenshot FILE.png]`: with two
// traces, the first is the prediction and the second the measurement. The per-rank
// torch.profiler files of one run (several files or their folder) are one measured trace;
// --step N picks its ProfilerStep#N. --screenshot renders
// the window without a display and exits (status 2 and one stderr line for a broken trace).
// The screenshot is written like every other output (pipescope/core/atomic_file.hpp): a full
// disk leaves the old file as it was; help and version text that cannot be written is an error.
#include <QApplication>
#include <QBuffer>
#include <QByteArray>
#include <QCommandLineParser>
#include <QFile>
#include <QFileInfo>
#include <QImage>
#include <QImageWriter>
#include <QPixmap>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <new>
#include <optional>
#include <string_view>
#include <utility>

#include "main_window.hpp"
#include "pipescope/core/atomic_file.hpp"
#include "pipescope/core/terminal_text.hpp"
#include "pipescope/traces/synthetic.hpp"
#include "timeline_widget.hpp"

namespace {

// A screenshot, the help or the version: the run opens no window.
bool shows_no_window(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const char* arg = argv[i];
    if (std::strncmp(arg, "--screenshot", 12) == 0 || std::strncmp(arg, "--help", 6) == 0 ||
        std::strcmp(arg, "--version") == 0 || std::strcmp(arg, "-h") == 0 || std::strcmp(arg, "-?") == 0 ||
        std::strcmp(arg, "-v") == 0)
      return true;
  }
  return false;
}

// The image format a screenshot's name asks for ("png" for shot.png, "jpg" for shot.JPG), when
// this Qt can write it; nothing otherwise (no extension, or one Qt has no writer for).
std::optional<QByteArray> screenshot_format(const QString& path) {
  const QByteArray suffix = QFileInfo(path).suffix().toLower().toLatin1();
  if (suffix.isEmpty() || !QImageWriter::supportedImageFormats().contains(suffix)) return std::nullopt;
  return suffix;
}

// The image is encoded in memory, in the format its name says, and handed to the one write
// path, so a failure at any byte (a full disk, a file size limit) costs the new screenshot,
// never the old one.
int write_screenshot(const QImage& image, const QString& path, const QByteArray& format) {
  QByteArray encoded;
  QBuffer buffer(&encoded);
  buffer.open(QIODevice::WriteOnly);
  if (!image.save(&buffer, format.constData())) {
    std::cerr << "ppview: error: cannot encode the screenshot " << pipescope::printable(path.toStdString()) << " as "
              << format.toUpper().toStdString() << "\n";
    return 1;
  }
  try {
    pipescope::write_file_atomic(QFile::encodeName(path).toStdString(),
                                 std::string_view(encoded.constData(), static_cast<std::size_t>(encoded.size())));
  } catch (const std::exception& e) {
    std::cerr << "ppview: error: " << pipescope::printable(e.what()) << "\n";
    return 1;
  }
  return 0;
}

// ppview's options past --help and --version.
struct ViewerOptions {
  QCommandLineOption screenshot{"screenshot",
                                "render the window into FILE without a display and exit (its format from its name: "
                                ".png, .jpg, .bmp, ...)",
                                "FILE.png"};
  QCommandLineOption size{"size", "window size for --screenshot (default: 1600x1000)", "WxH", "1600x1000"};
  QCommandLineOption no_difference{"no-difference",
                                   "start without the difference view (measured blocks in kind colours)"};
  QCommandLineOption arrows{"arrows", "start with send-to-receive arrows shown"};
  QCommandLineOption critical{"critical-path", "start with the critical path highlighted"};
  QCommandLineOption zoom{"zoom", "start showing only [START_US, END_US], e.g. 0,2500", "START_US,END_US"};
  QCommandLineOption step{"step", "torch.profiler traces: the ProfilerStep#N to show (default: the last)", "N"};
  QCommandLineOption demo{"demo",
                          "show a generated pair instead of files: a 1F1B prediction (4 ranks, 8 micro-batches) and "
                          "a measurement with 15% jitter and rank 2 running 1.3x slower"};
  QCommandLineOption raw_clocks{"raw-clocks", "keep each rank's times as written (no alignment of the ranks' clocks)"};
};

int fail(const QString& message) {
  std::cerr << "ppview: error: " << pipescope::printable(message.toStdString()) << "\n";
  return 2;
}

int show_viewer(QApplication& app, const QCommandLineParser& parser, const ViewerOptions& o);

int run_ppview(int argc, char** argv) {
  // Without a display (or when no window is wanted) render offscreen.
  const bool headless = shows_no_window(argc, argv);
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
  const QCommandLineOption help = parser.addHelpOption();
  const QCommandLineOption version = parser.addVersionOption();
  parser.addPositionalArgument("TRACE",
                               "trace files (.json or .json.gz): one, or predicted then measured; the torch.profiler "
                               "files of one run (or their folder) are one trace",
                               "[TRACE ...]");
  const ViewerOptions o;
  parser.addOptions(
      {o.screenshot, o.size, o.no_difference, o.arrows, o.critical, o.zoom, o.step, o.demo, o.raw_clocks});

  // parse() rather than process(): process() prints and exits by itself, past the check of
  // stdout and the one-line error format.
  if (!parser.parse(QApplication::arguments())) return fail(parser.errorText());
  if (parser.isSet(help) || parser.optionNames().contains("help-all")) {
    std::cout << parser.helpText().toStdString();
    return 0;
  }
  if (parser.isSet(version)) {
    std::cout << "ppview " << PIPESCOPE_VERSION << "\n";
    return 0;
  }
  return show_viewer(app, parser, o);
}

// Past --help and --version: the window, its traces, and the screenshot or the event loop.
int show_viewer(QApplication& app, const QCommandLineParser& parser, const ViewerOptions& o) {
  const QStringList files = parser.positionalArguments();
  // The format comes from the name, checked before anything is read: shot.jpg holds a JPEG,
  // never PNG bytes under another name.
  QByteArray format;
  if (parser.isSet(o.screenshot)) {
    const auto from_name = screenshot_format(parser.value(o.screenshot));
    if (!from_name) {
      QStringList known;
      for (const QByteArray& f : QImageWriter::supportedImageFormats()) known << QString::fromLatin1(f);
      return fail("--screenshot " + parser.value(o.screenshot) +
                  ": the file name must end in an image format this ppview writes (" + known.join(", ") + ")");
    }
    format = *from_name;
  }
  int width = 1600, height = 1000;
  {
    const QStringList parts = parser.value(o.size).split('x');
    bool ok_w = false, ok_h = false;
    if (parts.size() == 2) {
      width = parts[0].toInt(&ok_w);
      height = parts[1].toInt(&ok_h);
    }
    if (!ok_w || !ok_h || width < 200 || height < 200 || width > 10000 || height > 10000)
      return fail("--size: expected WxH between 200x200 and 10000x10000, not '" + parser.value(o.size) + "'");
  }

  pipescope::gui::MainWindow window;
  window.resize(width, height);
  if (parser.isSet(o.step)) {
    bool ok = false;
    const int n = parser.value(o.step).toInt(&ok);
    if (!ok || n < 0) return fail("--step: expected a step number (0 or more), not '" + parser.value(o.step) + "'");
    window.set_torch_step(n);
  }
  window.set_raw_clocks(parser.isSet(o.raw_clocks));
  window.set_difference(!parser.isSet(o.no_difference));
  window.set_flows(parser.isSet(o.arrows));
  window.set_critical_path(parser.isSet(o.critical));
  if (parser.isSet(o.demo)) {
    if (!files.isEmpty()) return fail("--demo shows generated traces; give either --demo or trace files");
    pipescope::traces::SyntheticPipeline pipeline;
    pipescope::traces::Trace predicted = pipescope::traces::make_1f1b_trace(pipeline);
    pipeline.jitter = 0.15;
    pipeline.slow_rank = 2;
    pipeline.slow_factor = 1.3;
    pipeline.source = "measured";
    window.show_traces(std::move(predicted), pipescope::traces::make_1f1b_trace(pipeline),
                       "demo: predicted vs measured");
  }
  if (!files.isEmpty() && parser.isSet(o.screenshot)) {
    if (auto error = window.open_files(files)) return fail(*error);
  }
  std::optional<std::pair<double, double>> zoom_range;
  if (parser.isSet(o.zoom)) {
    const QStringList parts = parser.value(o.zoom).split(',');
    bool ok_a = false, ok_b = false;
    const double a = parts.size() == 2 ? parts[0].toDouble(&ok_a) : 0,
                 b = parts.size() == 2 ? parts[1].toDouble(&ok_b) : 0;
    if (!ok_a || !ok_b || !(b > a))
      return fail("--zoom: expected START_US,END_US with START_US < END_US, not '" + parser.value(o.zoom) + "'");
    zoom_range = std::make_pair(a, b);
  }
  auto apply_zoom = [&window, zoom_range] {
    if (zoom_range) window.timeline()->zoom_to(zoom_range->first, zoom_range->second);
  };
  // With a window, large files are read behind a progress bar: the zoom waits for them.
  if (!files.isEmpty() && !parser.isSet(o.screenshot))
    window.open_files_interactively(files, apply_zoom);
  else
    apply_zoom();

  if (parser.isSet(o.screenshot)) {
    window.show();
    QApplication::processEvents();
    const QString path = parser.value(o.screenshot);
    return write_screenshot(window.grab().toImage(), path, format);
  }
  window.show();
  return app.exec();
}

// The size checks refuse what cannot fit before reading it; running out of memory anyway (a
// trace too large for this machine) is one line, as every other failure.
int run_ppview_within_memory(int argc, char** argv) {
  try {
    return run_ppview(argc, argv);
  } catch (const std::bad_alloc&) {
    std::cerr << "ppview: error: out of memory: the traces do not fit in this machine's memory\n";
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  return pipescope::finish_standard_output("ppview", run_ppview_within_memory(argc, argv));
}
