// The main window's ways of opening traces, offscreen. A predicted and a measured synthetic
// 1F1B trace (4 ranks, 8 micro-batches) are written to a temporary folder.
// Drag and drop: a QDropEvent carrying the two files' URLs opens them as a pair (2 series,
// the second "measured", title "predicted.json vs measured.json.gz"); a drop of a web link and
// text is refused at the drag-enter and ignored at the drop (no model, no recent entry).
// File > Open: the real QFileDialog (object name "open_traces_dialog", existing files) is
// found while modal, the two names are typed into its file name box and it is accepted: the
// pair opens; the next dialog starts in the traces' folder; cancelling leaves the model as is.
// Recent files: opening "predicted.json" then the pair leaves two entries, pair first, in the
// test organization's ppview.conf; a new window lists them (their paths) in Open Recent and reopens the pair
// from there; ten different files keep only the 8 newest.
#include <catch2/catch.hpp>

#include <QAction>
#include <QDialogButtonBox>
#include <QPushButton>
#include <QApplication>
#include <QDragEnterEvent>
#include <QDropEvent>
#include <QFileDialog>
#include <QLineEdit>
#include <QMenu>
#include <QMimeData>
#include <QSettings>
#include <QTimer>
#include <QUrl>

#include <filesystem>
#include <functional>

#include "main_window.hpp"
#include "pipescope/traces/synthetic.hpp"
#include "pipescope/traces/trace_io.hpp"
#include "test_application.hpp"
#include "timeline_widget.hpp"

using namespace pipescope::gui;
using namespace pipescope::traces;
namespace fs = std::filesystem;

namespace {

struct PairFiles {
  QString dir, predicted, measured;
};

const PairFiles& pair_files() {
  static const PairFiles files = [] {
    const fs::path dir = fs::temp_directory_path() / ("pipescope_test_main_window_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    SyntheticPipeline pp;
    write_trace(make_1f1b_trace(pp), (dir / "predicted.json").string());
    pp.jitter = 0.05;
    pp.source = "measured";
    write_trace(make_1f1b_trace(pp), (dir / "measured.json.gz").string());
    return PairFiles{QString::fromStdString(dir.string()), QString::fromStdString((dir / "predicted.json").string()),
                     QString::fromStdString((dir / "measured.json.gz").string())};
  }();
  return files;
}

void clear_recent_files() {
  QSettings settings(testing::kTestOrganization, "ppview");
  settings.clear();
  settings.sync();
}

// Runs `trigger` (which opens a modal file dialog) and, once the dialog shows, hands it to
// `drive`. Gives up after 10 s, closing whatever is modal, so a missing dialog fails the test
// instead of hanging it. Returns whether a QFileDialog was found.
bool drive_file_dialog(const std::function<void()>& trigger, const std::function<void(QFileDialog&)>& drive) {
  bool found = false;
  int ticks = 0;
  QTimer poll;
  poll.setInterval(10);
  QObject::connect(&poll, &QTimer::timeout, [&] {
    QWidget* modal = QApplication::activeModalWidget();
    if (auto* dialog = qobject_cast<QFileDialog*>(modal); dialog && dialog->isVisible()) {
      poll.stop();
      found = true;
      drive(*dialog);
    } else if (++ticks > 1000) {
      poll.stop();
      if (modal) modal->close();
    }
  });
  poll.start();
  trigger();
  poll.stop();
  return found;
}

QAction* open_action(MainWindow& window) {
  for (QAction* action : window.findChildren<QAction*>())
    if (action->text() == "&Open...") return action;
  return nullptr;
}

}  // namespace

TEST_CASE("dropping trace files on the window opens them as a pair", "[main_window]") {
  testing::app();
  clear_recent_files();
  MainWindow window;
  window.show();
  QMimeData mime;
  mime.setUrls({QUrl::fromLocalFile(pair_files().predicted), QUrl::fromLocalFile(pair_files().measured)});

  QDragEnterEvent enter(QPoint(200, 200), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
  QApplication::sendEvent(&window, &enter);
  REQUIRE(enter.isAccepted());
  QDropEvent drop(QPointF(200, 200), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
  QApplication::sendEvent(&window, &drop);
  REQUIRE(drop.isAccepted());

  const TimelineModel* model = window.timeline()->model();
  REQUIRE(model != nullptr);
  REQUIRE(model->series_count() == 2);
  REQUIRE(model->trace(1).meta.source == "measured");
  REQUIRE(model->rank_count() == 4);
  REQUIRE(window.windowTitle().startsWith("predicted.json vs measured.json.gz"));
  REQUIRE(window.recent_files().size() == 1);
}

TEST_CASE("a drop of a web link and text is ignored", "[main_window]") {
  testing::app();
  clear_recent_files();
  MainWindow window;
  window.show();
  QMimeData mime;
  mime.setUrls({QUrl("https://example.com/trace.json")});
  mime.setText("predicted.json");

  QDragEnterEvent enter(QPoint(200, 200), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
  enter.ignore();
  QApplication::sendEvent(&window, &enter);
  REQUIRE_FALSE(enter.isAccepted());
  QDropEvent drop(QPointF(200, 200), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
  drop.ignore();
  QApplication::sendEvent(&window, &drop);
  REQUIRE_FALSE(drop.isAccepted());
  REQUIRE(window.timeline()->model() == nullptr);
  REQUIRE(window.recent_files().isEmpty());
}

TEST_CASE("File > Open asks with a real file dialog and opens what it returns", "[main_window]") {
  testing::app();
  clear_recent_files();
  MainWindow window;
  window.show();
  QAction* open = open_action(window);
  REQUIRE(open != nullptr);

  QString name, typed_into;
  bool existing_files = false, clicked_open = false;
  const bool found = drive_file_dialog([&] { open->trigger(); }, [&](QFileDialog& dialog) {
    name = dialog.objectName();
    existing_files = dialog.fileMode() == QFileDialog::ExistingFiles;
    dialog.setDirectory(pair_files().dir);
    if (auto* edit = dialog.findChild<QLineEdit*>("fileNameEdit")) {
      edit->setText("\"predicted.json\" \"measured.json.gz\"");
      typed_into = edit->objectName();
    }
    // The user's way out: the dialog's Open button.
    auto* buttons = dialog.findChild<QDialogButtonBox*>("buttonBox");
    if (buttons && buttons->button(QDialogButtonBox::Open)) {
      clicked_open = true;
      buttons->button(QDialogButtonBox::Open)->click();
    } else {
      dialog.close();
    }
  });
  REQUIRE(found);
  REQUIRE(name == "open_traces_dialog");
  REQUIRE(existing_files);
  REQUIRE(typed_into == "fileNameEdit");
  REQUIRE(clicked_open);
  const TimelineModel* model = window.timeline()->model();
  REQUIRE(model != nullptr);
  REQUIRE(model->series_count() == 2);
  REQUIRE(model->trace(0).meta.source == "predicted");
  REQUIRE(model->trace(1).meta.source == "measured");

  // The next dialog starts where the last traces were; cancelling it changes nothing.
  QString start_dir;
  REQUIRE(drive_file_dialog([&] { window.open_with_dialog(); }, [&](QFileDialog& dialog) {
    start_dir = dialog.directory().absolutePath();
    dialog.close();
  }));
  REQUIRE(fs::equivalent(start_dir.toStdString(), pair_files().dir.toStdString()));
  REQUIRE(window.timeline()->model() == model);
}

TEST_CASE("recent files outlive the window and reopen from the menu", "[main_window]") {
  testing::app();
  clear_recent_files();
  {
    MainWindow first;
    REQUIRE_FALSE(first.open_files({pair_files().predicted}));
    REQUIRE_FALSE(first.open_files({pair_files().predicted, pair_files().measured}));
  }
  const fs::path conf = testing::settings_dir() / testing::kTestOrganization / "ppview.conf";
  REQUIRE(fs::exists(conf));

  MainWindow second;
  const QStringList recent = second.recent_files();
  REQUIRE(recent.size() == 2);
  REQUIRE(recent[0] == pair_files().predicted + "|" + pair_files().measured);
  REQUIRE(recent[1] == pair_files().predicted);
  const QList<QAction*> entries = second.recent_menu()->actions();
  REQUIRE(entries.size() == 2);
  // Entries show their paths (elided in the middle when long), whole in the tooltip.
  REQUIRE(entries[0]->toolTip() == pair_files().predicted + " vs " + pair_files().measured);
  REQUIRE(entries[0]->text().startsWith(pair_files().dir.left(4)));
  REQUIRE(entries[0]->text().endsWith("measured.json.gz"));
  REQUIRE(entries[1]->toolTip() == pair_files().predicted);
  REQUIRE(entries[1]->text().startsWith(pair_files().dir.left(4)));
  REQUIRE(entries[1]->text().endsWith("predicted.json"));
  entries[0]->trigger();
  REQUIRE(second.timeline()->model() != nullptr);
  REQUIRE(second.timeline()->model()->series_count() == 2);
  // Reopening moved nothing: the pair was already the newest, and is not listed twice.
  REQUIRE(second.recent_files().size() == 2);

  // Ten more files: only the 8 newest stay, newest first.
  for (int i = 0; i < 10; ++i) {
    const QString copy = pair_files().dir + QString("/copy%1.json").arg(i);
    fs::copy_file(pair_files().predicted.toStdString(), copy.toStdString(), fs::copy_options::overwrite_existing);
    REQUIRE_FALSE(second.open_files({copy}));
  }
  const QStringList capped = MainWindow().recent_files();
  REQUIRE(capped.size() == 8);
  REQUIRE(capped.front().endsWith("copy9.json"));
  REQUIRE(capped.back().endsWith("copy2.json"));
  clear_recent_files();
}

TEST_CASE("View > Compact ranks switches the timeline's compact mode and reads its state", "[window][compact]") {
  testing::app();
  MainWindow window;
  REQUIRE_FALSE(window.open_files({pair_files().predicted}));
  QAction* compact = nullptr;
  for (QAction* action : window.findChildren<QAction*>())
    if (action->text() == "Compact &ranks") compact = action;
  REQUIRE(compact != nullptr);
  REQUIRE(compact->isCheckable());
  const bool before = window.timeline()->compact();
  compact->trigger();  // a checkable action toggles, then calls set_compact with the new state
  REQUIRE(window.timeline()->compact() != before);
  compact->trigger();
  REQUIRE(window.timeline()->compact() == before);
}
