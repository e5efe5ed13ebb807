// The main window's inputs: files opened from the command line, a dialog, the recent list
// or a drop, read at once or on a thread of their own, and shown; the recent-files list kept
// in QSettings.
#include <QCoreApplication>
#include <QDockWidget>
#include <QDragEnterEvent>
#include <QDropEvent>
#include <QFileDialog>
#include <QFileInfo>
#include <QFontMetrics>
#include <QLabel>
#include <QMenu>
#include <QMessageBox>
#include <QMimeData>
#include <QSettings>
#include <QStatusBar>
#include <QUrl>

#include <algorithm>
#include <functional>

#include "main_window.hpp"
#include "rank_summary_table.hpp"
#include "timeline_widget.hpp"
#include "trace_inputs.hpp"
#include "trace_loading.hpp"

namespace pipescope::gui {
namespace {

constexpr int kMaxRecent = 8;
// Recent entries show their paths, elided in the middle to this width (the full text is the
// entry's tooltip).
constexpr int kRecentEntryWidthPx = 520;

// ppview sets the organization "pipescope"; tests set their own, so their recent files never
// mix with a user's.
QString settings_organization() {
  const QString name = QCoreApplication::organizationName();
  return name.isEmpty() ? QString("pipescope") : name;
}

}  // namespace

std::optional<QString> MainWindow::open_files(const QStringList& paths) {
  TraceInputs read = read_trace_inputs(paths, torch_step_, nullptr);
  if (read.error) return read.error;
  show_inputs(std::move(read), paths);
  return std::nullopt;
}

void MainWindow::show_inputs(TraceInputs read, const QStringList& paths) {
  show_read(prepare_view(std::move(read.first), std::move(read.second), raw_clocks_, nullptr), read, paths);
}

void MainWindow::show_read(PreparedView view, const TraceInputs& read, const QStringList& paths) {
  show_view(std::move(view), read.title);
  if (!read.notes.isEmpty()) statusBar()->showMessage(read.notes.join("; "));
  remember(paths);
}

void MainWindow::open_files_in_background(const QStringList& paths, std::function<void()> then) {
  // A new read replaces one still running (its dialog is modal, so only a program asks).
  if (loading_) {
    loading_->cancel();
    loading_->deleteLater();
  }
  // The thread reads the files and lays the model out; the GUI thread only swaps it in.
  auto read = std::make_shared<TraceInputs>();
  auto prepared = std::make_shared<PreparedView>();
  const std::optional<int> step = torch_step_;
  const bool raw_clocks = raw_clocks_;
  const QString label =
      QString("Reading %1")
          .arg(paths.size() == 1 ? QFileInfo(paths.front()).fileName() : QString("%1 files").arg(paths.size()));
  loading_ = new TraceLoading(
      this, label, trace_input_bytes(paths),
      [read, prepared, paths, step, raw_clocks](traces::ReadProgress& progress) {
        *read = read_trace_inputs(paths, step, &progress);
        if (read->cancelled || read->error) return;
        progress.files_read = true;
        *prepared = prepare_view(std::move(read->first), std::move(read->second), raw_clocks, &progress);
      },
      [this, read, prepared, paths, then = std::move(then)] {
        if (read->cancelled) return;
        if (read->error) {
          QMessageBox::critical(this, "ppview: cannot open trace", *read->error);
          return;
        }
        if (!prepared->model) return;  // cancelled while laying out
        show_read(std::move(*prepared), *read, paths);
        if (then) then();
      });
  TraceLoading* started = loading_;
  connect(started, &TraceLoading::ended, this, [this, started] {
    if (loading_ == started) loading_ = nullptr;
    started->deleteLater();
  });
}

bool MainWindow::loading() const { return loading_ != nullptr; }

void MainWindow::show_traces(traces::Trace predicted, std::optional<traces::Trace> measured, const QString& title) {
  show_view(prepare_view(std::move(predicted), std::move(measured), raw_clocks_, nullptr), title);
}

void MainWindow::show_view(PreparedView view, const QString& title) {
  const QStringList& aligned = view.aligned;
  model_ = std::move(view.model);
  timeline_->set_model(model_);
  hits_.clear();
  current_hit_ = -1;
  searched_text_.clear();
  hit_label_->clear();
  refresh_summary();
  ranks_->show_model(model_.get());
  // A pair's comparison is what one looks at first; a single trace of many ranks, its ranks.
  if (!aligned.isEmpty()) statusBar()->showMessage(aligned.join("; "));
  if (model_->series_count() == 2)
    summary_dock_->raise();
  else
    ranks_dock_->raise();
  fit_docks();
  setWindowTitle(title + " - ppview");
}

void MainWindow::open_files_interactively(const QStringList& paths, std::function<void()> then) {
  if (trace_input_bytes(paths) >= background_read_bytes_) {
    open_files_in_background(paths, std::move(then));
    return;
  }
  if (auto error = open_files(paths)) {
    QMessageBox::critical(this, "ppview: cannot open trace", *error);
    return;
  }
  if (then) then();
}

void MainWindow::open_with_dialog() {
  const QStringList recent = recent_files();
  const QString start = recent.isEmpty() ? QString() : QFileInfo(recent.front().split('|').front()).absolutePath();
  QFileDialog dialog(this, "Open one trace, or a predicted and a measured trace", start,
                     "Traces (*.json *.json.gz *.gz);;All files (*)");
  dialog.setObjectName("open_traces_dialog");
  dialog.setAcceptMode(QFileDialog::AcceptOpen);
  dialog.setFileMode(QFileDialog::ExistingFiles);
  if (dialog.exec() != QDialog::Accepted) return;
  const QStringList paths = dialog.selectedFiles();
  if (!paths.isEmpty()) open_files_interactively(paths);
}

QStringList MainWindow::recent_files() const {
  QSettings settings(settings_organization(), "ppview");
  return settings.value("recent_files").toStringList();
}

void MainWindow::remember(const QStringList& paths) {
  QSettings settings(settings_organization(), "ppview");
  QStringList recent = settings.value("recent_files").toStringList();
  QStringList absolute;
  for (const auto& p : paths) absolute << QFileInfo(p).absoluteFilePath();
  const QString entry = absolute.join("|");  // a predicted/measured pair is one entry
  recent.removeAll(entry);
  recent.prepend(entry);
  while (recent.size() > kMaxRecent) recent.removeLast();
  settings.setValue("recent_files", recent);
  refresh_recent_menu();
}

void MainWindow::refresh_recent_menu() {
  recent_menu_->clear();
  const QStringList recent = recent_files();
  const QFontMetrics metrics(recent_menu_->font());
  for (const QString& entry : recent) {
    const QStringList paths = entry.split('|');
    // The paths, so two files of one name in different folders are told apart; elided in
    // the middle, where the folders are, and whole in the tooltip.
    const QString full = paths.join(" vs ");
    QString shown = metrics.elidedText(full, Qt::ElideMiddle, kRecentEntryWidthPx);
    QAction* action =
        recent_menu_->addAction(shown.replace('&', "&&"), this, [this, paths] { open_files_interactively(paths); });
    action->setToolTip(full);
  }
  recent_menu_->setEnabled(!recent.isEmpty());
}

// Only local files can be opened: a dragged link or text is refused at the door.
void MainWindow::dragEnterEvent(QDragEnterEvent* event) {
  const QList<QUrl> urls = event->mimeData()->urls();
  if (std::any_of(urls.begin(), urls.end(), [](const QUrl& url) { return url.isLocalFile(); }))
    event->acceptProposedAction();
}

void MainWindow::dropEvent(QDropEvent* event) {
  QStringList paths;
  for (const QUrl& url : event->mimeData()->urls())
    if (url.isLocalFile()) paths << url.toLocalFile();
  if (!paths.isEmpty()) {
    event->acceptProposedAction();
    open_files_interactively(paths);
  }
}

}  // namespace pipescope::gui
