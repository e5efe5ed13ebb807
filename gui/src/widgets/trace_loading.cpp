#include "trace_loading.hpp"

#include <QProgressDialog>
#include <QThread>
#include <QTimer>

#include <algorithm>

namespace pipescope::gui {
namespace {

// The bar's resolution: it moves in thousandths of the files.
constexpr int kLoadingBarSteps = 1000;
// How often the bar looks at the read's progress.
constexpr int kLoadingRefreshMs = 100;
// A read quicker than this never shows the dialog.
constexpr int kLoadingDialogDelayMs = 400;

}  // namespace

TraceLoading::TraceLoading(QWidget* parent, const QString& label, std::uint64_t total_bytes,
                           std::function<void(traces::ReadProgress&)> read, std::function<void()> done)
    : QObject(parent),
      progress_(std::make_shared<traces::ReadProgress>()),
      total_bytes_(total_bytes),
      done_(std::move(done)) {
  dialog_ = new QProgressDialog(label, "Cancel", 0, total_bytes_ > 0 ? kLoadingBarSteps : 0, parent);
  dialog_->setObjectName("loading_dialog");
  dialog_->setWindowTitle("ppview: reading");
  dialog_->setWindowModality(Qt::WindowModal);
  dialog_->setMinimumDuration(kLoadingDialogDelayMs);
  dialog_->setAutoClose(false);
  dialog_->setAutoReset(false);
  dialog_->setValue(0);
  // The Cancel button and Esc (a rejected dialog) both give the read up.
  connect(dialog_, &QProgressDialog::canceled, this, &TraceLoading::cancel);
  connect(dialog_, &QDialog::rejected, this, &TraceLoading::cancel);

  timer_ = new QTimer(this);
  connect(timer_, &QTimer::timeout, this, &TraceLoading::show_progress);
  timer_->start(kLoadingRefreshMs);

  // The thread holds its own share of the progress: it may outlive nothing, but owns nothing.
  thread_ = QThread::create([progress = progress_, read = std::move(read)] { read(*progress); });
  connect(thread_, &QThread::finished, this, &TraceLoading::on_thread_finished);
  thread_->start();
}

TraceLoading::~TraceLoading() {
  progress_->cancel_requested = true;
  thread_->wait();
  delete thread_;
  delete dialog_.data();
}

void TraceLoading::cancel() {
  if (cancelled_ || finished_) return;
  cancelled_ = true;
  progress_->cancel_requested = true;
  timer_->stop();
  // QProgressDialog::cancel hides it and stops its own timer, which would show it later.
  if (dialog_) dialog_->cancel();
}

void TraceLoading::show_progress() {
  if (progress_->files_read.load()) {
    if (!laying_out_ && dialog_) {
      laying_out_ = true;
      dialog_->setLabelText("Laying out the events");
      dialog_->setRange(0, 0);  // no count to show: a busy bar
    }
    return;
  }
  if (total_bytes_ == 0) return;
  const double done = static_cast<double>(progress_->file_bytes_done.load()) / static_cast<double>(total_bytes_);
  dialog_->setValue(static_cast<int>(std::clamp(done, 0.0, 1.0) * (kLoadingBarSteps - 1)));
}

void TraceLoading::on_thread_finished() {
  finished_ = true;
  timer_->stop();
  if (dialog_) dialog_->cancel();
  if (!cancelled_ && done_) done_();
  emit ended();
}

}  // namespace pipescope::gui
