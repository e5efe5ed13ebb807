// Reading traces off the GUI thread, with a progress dialog: a gigabyte of JSON takes seconds
// to read, and the window stays drawn meanwhile. The dialog (object name "loading_dialog")
// shows the bytes of the files read, then that the events are being laid out (ReadProgress's
// files_read); its Cancel button or Esc gives the read up, and the
// window stays as it was: nothing read is shown.
#pragma once

#include <QObject>
#include <QPointer>
#include <QProgressDialog>
#include <QString>

#include <cstdint>
#include <functional>
#include <memory>

#include "pipescope/traces/read_progress.hpp"

class QThread;
class QTimer;
class QWidget;

namespace pipescope::gui {

class TraceLoading : public QObject {
  Q_OBJECT

 public:
  // Runs `read` on a thread of its own, reporting to the ReadProgress it is given;
  // `total_bytes` (the files' sizes, 0 when unknown) scales the bar. `done` runs on the GUI
  // thread once `read` has returned, unless the read was cancelled first.
  TraceLoading(QWidget* parent, const QString& label, std::uint64_t total_bytes,
               std::function<void(traces::ReadProgress&)> read, std::function<void()> done);
  // Cancels a read still running and waits for its thread (it stops at its next report).
  ~TraceLoading() override;

  // Gives the read up: the dialog closes, `done` never runs.
  void cancel();
  bool cancelled() const { return cancelled_; }
  bool finished() const { return finished_; }
  QProgressDialog* dialog() const { return dialog_; }

 signals:
  // The read's thread has ended (read, failed or cancelled); `done` has run if it was to.
  void ended();

 private:
  void show_progress();
  void on_thread_finished();

  std::shared_ptr<traces::ReadProgress> progress_;
  std::uint64_t total_bytes_ = 0;
  std::function<void()> done_;
  QThread* thread_ = nullptr;
  QPointer<QProgressDialog> dialog_;  // a child of the parent window, which may delete it first
  QTimer* timer_ = nullptr;
  bool laying_out_ = false;  // the dialog says the files are read
  bool cancelled_ = false;
  bool finished_ = false;
};

}  // namespace pipescope::gui
