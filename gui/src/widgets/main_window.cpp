#include "main_window.hpp"

#include <QAction>
#include <QApplication>
#include <QBuffer>
#include <QDockWidget>
#include <QDragEnterEvent>
#include <QDropEvent>
#include <QFileDialog>
#include <QFontMetrics>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QMenuBar>
#include <QMessageBox>
#include <QMimeData>
#include <QPainter>
#include <QScrollArea>
#include <QSettings>
#include <QStatusBar>
#include <QTableWidget>
#include <QToolBar>
#include <QUrl>

#ifdef PIPESCOPE_HAVE_QT_SVG
#include <QSvgGenerator>
#endif

#include <algorithm>
#include <cmath>
#include <functional>

#include "pipescope/core/atomic_file.hpp"
#include "pipescope/gui/kinds.hpp"
#include "pipescope/gui/time_ticks.hpp"
#include "pipescope/traces/clock_alignment.hpp"
#include "pipescope/traces/compare.hpp"
#include "pipescope/traces/trace_io.hpp"
#include "rank_summary_table.hpp"
#include "timeline_widget.hpp"
#include "trace_inputs.hpp"
#include "trace_loading.hpp"

namespace pipescope::gui {
namespace {

// Ranks listed one by one in the summary; past this, the least and the most of each figure.
constexpr int kSummaryRankRows = 1024;

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

// Errors as the CLI states them: (predicted - measured) / measured, signed.
QString percent(double fraction) {
  if (!std::isfinite(fraction)) return "n/a";
  return QString("%1%2%").arg(fraction >= 0 ? "+" : "").arg(fraction * 100, 0, 'f', 1);
}

QString share(double fraction) { return QString::number(fraction * 100, 'f', 1) + "%"; }

QString mib(std::int64_t bytes) {
  return QString::number(static_cast<double>(bytes) / (1024.0 * 1024.0), 'f', 1) + " MiB";
}

QString duration_text(double us) { return QString::fromStdString(format_duration_us(us)); }

}  // namespace

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent) {
  setWindowTitle("ppview");
  setAcceptDrops(true);
  timeline_ = new TimelineWidget;
  setCentralWidget(timeline_);
  build_docks();
  build_actions();
  connect(timeline_, &TimelineWidget::event_clicked, this,
          [this](int series, qulonglong event) { show_event_details(series, static_cast<std::size_t>(event)); });
  connect(timeline_, &TimelineWidget::range_selected, this, &MainWindow::show_range_details);
  refresh_recent_menu();
  resize(1400, 900);
}

void MainWindow::build_docks() {
  details_ = new QLabel("Click an operation for its details; shift-drag to measure a range.");
  details_->setObjectName("details");
  details_->setAlignment(Qt::AlignTop | Qt::AlignLeft);
  details_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  details_->setMargin(6);
  details_->setWordWrap(true);
  auto* details_scroll = new QScrollArea;
  details_scroll->setWidget(details_);
  details_scroll->setWidgetResizable(true);
  details_scroll->setFrameShape(QFrame::NoFrame);

  summary_ = new QTableWidget(0, 4);
  summary_->setObjectName("summary_table");
  summary_->setHorizontalHeaderLabels({"", "predicted", "measured", "error"});
  summary_->verticalHeader()->hide();
  // The figures keep their width; the row names give way (elided, whole in the tooltip), so
  // the error column stays in view in a narrow window.
  summary_->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  summary_->horizontalHeader()->setSectionResizeMode(0, QHeaderView::Stretch);
  summary_->setTextElideMode(Qt::ElideRight);
  summary_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  ranks_ = new RankSummaryTable;

  auto dock = [this](const QString& title, const QString& name, QWidget* content) {
    auto* d = new QDockWidget(title, this);
    d->setObjectName(name);
    d->setWidget(content);
    d->setFeatures(QDockWidget::DockWidgetClosable | QDockWidget::DockWidgetMovable | QDockWidget::DockWidgetFloatable);
    d->setAllowedAreas(Qt::BottomDockWidgetArea | Qt::RightDockWidgetArea | Qt::LeftDockWidgetArea);
    content->setMinimumSize(120, 60);
    return d;
  };
  details_dock_ = dock("Details", "details_dock", details_scroll);
  summary_dock_ = dock("Summary", "summary_dock", summary_);
  ranks_dock_ = dock("Ranks", "ranks_dock", ranks_);
  addDockWidget(Qt::BottomDockWidgetArea, details_dock_);
  addDockWidget(Qt::BottomDockWidgetArea, ranks_dock_);
  splitDockWidget(details_dock_, ranks_dock_, Qt::Horizontal);
  tabifyDockWidget(ranks_dock_, summary_dock_);
  ranks_dock_->raise();
}

void MainWindow::fit_docks() {
  const int most = std::max(120, height() / 3);
  const int table_height =
      std::max(ranks_->content_height(),
               summary_->horizontalHeader()->height() + 2 * summary_->frameWidth() +
                   std::min(summary_->rowCount(), 4) * summary_->verticalHeader()->defaultSectionSize());
  // The dock's title bar and tab bar come on top of the table.
  const int wanted = std::clamp(table_height + 48, 100, most);
  resizeDocks({ranks_dock_, details_dock_}, {wanted, wanted}, Qt::Vertical);
  resizeDocks({details_dock_, ranks_dock_}, {width() / 3, width() * 2 / 3}, Qt::Horizontal);
}

void MainWindow::build_actions() {
  QMenu* file = menuBar()->addMenu("&File");
  QAction* open = file->addAction("&Open...", this, &MainWindow::open_with_dialog);
  open->setShortcut(QKeySequence::Open);
  recent_menu_ = file->addMenu("Open &Recent");
  recent_menu_->setToolTipsVisible(true);
  file->addSeparator();
  QAction* export_png = file->addAction("Export view as &PNG...", this, [this] { export_view_with_dialog("png"); });
  export_png->setObjectName("export_png");
  QAction* export_svg = file->addAction("Export view as &SVG...", this, [this] { export_view_with_dialog("svg"); });
  export_svg->setObjectName("export_svg");
  export_svg->setEnabled(can_export_svg());
  if (!can_export_svg()) export_svg->setToolTip("this ppview was built without Qt Svg (Debian: qt6-svg-dev)");
  QAction* export_csv =
      file->addAction("Export rank table as &CSV...", this, &MainWindow::export_rank_table_with_dialog);
  export_csv->setObjectName("export_csv");
  file->addSeparator();
  file->addAction("&Quit", QKeySequence::Quit, qApp, &QApplication::quit);

  QMenu* view = menuBar()->addMenu("&View");
  QToolBar* bar = addToolBar("main");
  bar->setMovable(false);
  bar->addAction(open);
  QAction* all = view->addAction("Show &all", this, [this] { timeline_->show_all(); });
  all->setShortcut(QKeySequence(Qt::Key_0));
  QAction* to_selection = view->addAction("&Zoom to selection", this, [this] { timeline_->zoom_to_selection(); });
  bar->addAction(all);
  bar->addAction(to_selection);
  bar->addSeparator();
  difference_action_ =
      view->addAction("&Difference view", this, [this](bool on) { timeline_->set_show_difference(on); });
  difference_action_->setCheckable(true);
  difference_action_->setChecked(timeline_->show_difference());
  difference_action_->setToolTip(
      "Shade measured operations by how much longer (red) or shorter (blue) they ran than predicted");
  flows_action_ = view->addAction("Send/receive &arrows", this, [this](bool on) { timeline_->set_show_flows(on); });
  flows_action_->setCheckable(true);
  critical_action_ =
      view->addAction("&Critical path", this, [this](bool on) { timeline_->set_show_critical_path(on); });
  critical_action_->setCheckable(true);
  bar->addAction(difference_action_);
  bar->addAction(flows_action_);
  bar->addAction(critical_action_);
  bar->addSeparator();
  // C in the timeline and traces of many ranks change the mode too: the tick is read when
  // the menu opens rather than kept in step by hand.
  compact_action_ = view->addAction("Compact &ranks", this, [this](bool on) { timeline_->set_compact(on); });
  compact_action_->setCheckable(true);
  compact_action_->setToolTip("Every rank as one row (its compute and collectives merged); C in the timeline");
  connect(view, &QMenu::aboutToShow, this, [this] { compact_action_->setChecked(timeline_->compact()); });
  view->addSeparator();
  view->addAction(details_dock_->toggleViewAction());
  view->addAction(summary_dock_->toggleViewAction());
  view->addAction(ranks_dock_->toggleViewAction());

  search_ = new QLineEdit;
  search_->setPlaceholderText("search: F, B mb 3, SEND, rank 2 ...");
  search_->setClearButtonEnabled(true);
  search_->setMaximumWidth(260);
  bar->addWidget(search_);
  QAction* previous = bar->addAction("◀", this, &MainWindow::find_previous);
  previous->setToolTip("previous match (Shift+F3)");
  previous->setShortcut(QKeySequence(Qt::SHIFT | Qt::Key_F3));
  QAction* next = bar->addAction("▶", this, &MainWindow::find_next);
  next->setToolTip("next match (F3, Enter)");
  next->setShortcut(QKeySequence(Qt::Key_F3));
  hit_label_ = new QLabel;
  hit_label_->setMinimumWidth(90);
  bar->addWidget(hit_label_);
  connect(search_, &QLineEdit::returnPressed, this, &MainWindow::find_next);
  QAction* find = new QAction(this);
  find->setShortcut(QKeySequence::Find);
  connect(find, &QAction::triggered, this, [this] {
    search_->setFocus();
    search_->selectAll();
  });
  addAction(find);

  QMenu* help = menuBar()->addMenu("&Help");
  help->addAction("&Keys and mouse", this,
                  [this] { QMessageBox::information(this, "Keys and mouse", TimelineWidget::help_text()); });
}

std::optional<QString> MainWindow::open_files(const QStringList& paths) {
  TraceInputs read = read_trace_inputs(paths, torch_step_, nullptr);
  if (read.error) return read.error;
  show_inputs(std::move(read), paths);
  return std::nullopt;
}

void MainWindow::show_inputs(TraceInputs read, const QStringList& paths) {
  show_traces(std::move(read.first), std::move(read.second), read.title);
  if (!read.notes.isEmpty()) statusBar()->showMessage(read.notes.join("; "));
  remember(paths);
}

void MainWindow::open_files_in_background(const QStringList& paths, std::function<void()> then) {
  // A new read replaces one still running (its dialog is modal, so only a program asks).
  if (loading_) {
    loading_->cancel();
    loading_->deleteLater();
  }
  auto read = std::make_shared<TraceInputs>();
  const std::optional<int> step = torch_step_;
  const QString label =
      QString("Reading %1")
          .arg(paths.size() == 1 ? QFileInfo(paths.front()).fileName() : QString("%1 files").arg(paths.size()));
  loading_ = new TraceLoading(
      this, label, trace_input_bytes(paths),
      [read, paths, step](traces::ReadProgress& progress) { *read = read_trace_inputs(paths, step, &progress); },
      [this, read, paths, then = std::move(then)] {
        if (read->cancelled) return;
        if (read->error) {
          QMessageBox::critical(this, "ppview: cannot open trace", *read->error);
          return;
        }
        show_inputs(std::move(*read), paths);
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
  // Ranks on different clocks are put on one first (docs/EXPLAIN.md), unless --raw-clocks.
  QStringList aligned;
  for (traces::Trace* t : {&predicted, measured ? &*measured : nullptr})
    if (t && !raw_clocks_ && t->meta.source != "predicted")
      if (const auto a = traces::align_clocks(*t); a.applied)
        aligned << QString::fromStdString(traces::describe_clock_alignment(a));
  auto model = std::make_shared<TimelineModel>();
  model->set_traces(std::move(predicted), std::move(measured));
  model_ = model;
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

void MainWindow::set_difference(bool on) {
  difference_action_->setChecked(on);
  timeline_->set_show_difference(on);
}
void MainWindow::set_flows(bool on) {
  flows_action_->setChecked(on);
  timeline_->set_show_flows(on);
}
void MainWindow::set_critical_path(bool on) {
  critical_action_->setChecked(on);
  timeline_->set_show_critical_path(on);
}

namespace {

// The summary table's rows: a name and a value, or (a pair) predicted, measured and error.
class SummaryRows {
 public:
  SummaryRows(QTableWidget* table, bool pair) : table_(table), pair_(pair) {}

  void add(const QString& what, const QString& a, const QString& b = {}, const QString& error = {}) const {
    const int row = table_->rowCount();
    table_->insertRow(row);
    auto* name = new QTableWidgetItem(what);
    name->setToolTip(what);
    table_->setItem(row, 0, name);
    table_->setItem(row, 1, new QTableWidgetItem(a));
    if (pair_) {
      table_->setItem(row, 2, new QTableWidgetItem(b));
      auto* item = new QTableWidgetItem(error);
      table_->setItem(row, 3, item);
    }
  }

  // A row per rank up to kSummaryRankRows ranks; past that (a million ranks) the least and the
  // most of the figure, each naming its rank: the per-rank detail is the Ranks table's.
  void add_per_rank(const QString& what, int ranks, const std::function<double(int)>& key,
                    const std::function<void(int, const QString&)>& add_rank) const {
    if (ranks <= kSummaryRankRows) {
      for (int r = 0; r < ranks; ++r) add_rank(r, QString("rank %1 %2").arg(r).arg(what));
      return;
    }
    int least = -1, most = -1;
    for (int r = 0; r < ranks; ++r) {
      const double v = key(r);
      if (std::isnan(v)) continue;
      if (least < 0 || v < key(least)) least = r;
      if (most < 0 || v > key(most)) most = r;
    }
    if (least < 0) return;
    add_rank(least, QString("%1, least: rank %2 of %3").arg(what).arg(least).arg(ranks));
    add_rank(most, QString("%1, most: rank %2 of %3").arg(what).arg(most).arg(ranks));
  }

 private:
  QTableWidget* table_;
  bool pair_;
};

// A predicted and a measured trace: the comparison's figures, and where it is off.
void add_comparison_rows(const SummaryRows& rows, const traces::Comparison& c) {
  const int compared = static_cast<int>(c.ranks.size());
  rows.add("iteration time", duration_text(c.iteration_time_predicted_s * 1e6),
           duration_text(c.iteration_time_measured_s * 1e6), percent(c.iteration_time_error));
  rows.add("bubble (mean)", share(c.bubble_fraction_predicted), share(c.bubble_fraction_measured),
           percent(c.bubble_fraction_predicted - c.bubble_fraction_measured) + " pts");
  rows.add("op duration MAPE", "", "", share(c.op_duration_mape));
  rows.add("matched / unmatched", QString::number(c.matched.size()),
           QString("%1 / %2").arg(c.unmatched_predicted).arg(c.unmatched_measured));
  rows.add_per_rank(
      "bubble", compared, [&](int i) { return c.ranks[static_cast<std::size_t>(i)].bubble_fraction_measured; },
      [&](int i, const QString& label) {
        const auto& r = c.ranks[static_cast<std::size_t>(i)];
        rows.add(label, share(r.bubble_fraction_predicted), share(r.bubble_fraction_measured),
                 percent(r.bubble_fraction_predicted - r.bubble_fraction_measured) + " pts");
      });
  rows.add_per_rank(
      "peak memory", compared,
      [&](int i) { return static_cast<double>(c.ranks[static_cast<std::size_t>(i)].peak_memory_measured_bytes); },
      [&](int i, const QString& label) {
        const auto& r = c.ranks[static_cast<std::size_t>(i)];
        rows.add(label, mib(r.peak_memory_predicted_bytes), mib(r.peak_memory_measured_bytes),
                 percent(r.peak_memory_error));
      });
  // Time the host took from a rank's cores during the measured step (steal on a virtual
  // machine): above a few percent, the measurement is slower for reasons outside the run.
  const bool any_stolen = std::any_of(c.ranks.begin(), c.ranks.end(),
                                      [](const auto& r) { return std::isfinite(r.stolen_fraction_measured); });
  if (any_stolen)
    rows.add_per_rank(
        "stolen by the host", compared,
        [&](int i) {
          const double f = c.ranks[static_cast<std::size_t>(i)].stolen_fraction_measured;
          return std::isfinite(f) ? f : std::nan("");
        },
        [&](int i, const QString& label) {
          const auto& r = c.ranks[static_cast<std::size_t>(i)];
          if (!std::isfinite(r.stolen_fraction_measured)) return;
          rows.add(label, "", share(r.stolen_fraction_measured),
                   r.stolen_fraction_measured > traces::kDisturbedStolenFraction ? "disturbed" : "");
        });
  // What a receive costs when its data was sent before it (the transport's own work) and
  // what a message took when the receive waited for it: where a communication model is off.
  // A mean is NaN where a side has no such receive: the cell stays empty.
  auto add_means = [&](const QString& what, double predicted_us, double measured_us) {
    if (std::isnan(predicted_us) && std::isnan(measured_us)) return;
    rows.add(what, std::isnan(predicted_us) ? QString() : duration_text(predicted_us),
             std::isnan(measured_us) ? QString() : duration_text(measured_us),
             std::isnan(predicted_us) || std::isnan(measured_us) ? QString()
                                                                 : percent((predicted_us - measured_us) / measured_us));
  };
  add_means("receive, data sent before (mean)", c.receives_predicted.ready_mean_us(),
            c.receives_measured.ready_mean_us());
  add_means("receive that waited, send to data (mean)", c.receives_predicted.waited_mean_us(),
            c.receives_measured.waited_mean_us());
}

}  // namespace

void MainWindow::refresh_summary() {
  summary_->setRowCount(0);
  if (!model_) return;
  const bool pair = model_->series_count() == 2;
  summary_->setColumnCount(pair ? 4 : 2);
  summary_->setHorizontalHeaderLabels(pair ? QStringList{"", "predicted", "measured", "error"}
                                           : QStringList{"", "value"});
  if (pair)
    summary_->horizontalHeaderItem(3)->setToolTip(
        "(predicted - measured) / measured, as ppsim compare states it: negative where "
        "the run took longer than predicted; bubbles in percentage points");
  const SummaryRows rows(summary_, pair);
  if (pair) {
    add_comparison_rows(rows, *model_->comparison());
  } else if (model_->has_pipeline(0)) {
    const auto& t = model_->trace(0);
    rows.add("iteration time", duration_text(traces::iteration_time_us(t)));
    const int ranks = model_->rank_count();
    rows.add_per_rank(
        "bubble", ranks, [&](int r) { return model_->bubble_fraction(0, r); },
        [&](int r, const QString& label) { rows.add(label, share(model_->bubble_fraction(0, r))); });
    rows.add_per_rank(
        "peak memory", ranks,
        [&](int r) {
          return model_->memory(0, r).empty() ? std::nan("") : static_cast<double>(model_->peak_memory_bytes(0, r));
        },
        [&](int r, const QString& label) {
          if (!model_->memory(0, r).empty()) rows.add(label, mib(model_->peak_memory_bytes(0, r)));
        });
  } else {
    // A plain Chrome or profiler trace has no pipeline: no iteration, no bubble.
    const auto& t = model_->trace(0);
    rows.add("time span", duration_text(t.end_us()));
    rows.add("slices", QString::number(t.events.size()));
    if (!t.instants.empty()) rows.add("instant events", QString::number(t.instants.size()));
    if (!t.counters.empty()) rows.add("counter samples", QString::number(t.counters.size()));
    const int ranks = model_->rank_count();
    rows.add_per_rank(
        "peak memory", ranks,
        [&](int r) {
          return model_->memory(0, r).empty() ? std::nan("") : static_cast<double>(model_->peak_memory_bytes(0, r));
        },
        [&](int r, const QString& label) {
          if (model_->memory(0, r).empty()) return;
          // A plain trace names its processes: the name, not "rank N", leads the row.
          rows.add(ranks <= kSummaryRankRows ? QString::fromStdString(model_->rank_name(r)) + " peak memory"
                                             : QString::fromStdString(model_->rank_name(r)) + " " + label,
                   mib(model_->peak_memory_bytes(0, r)));
        });
  }
}

void MainWindow::run_search() {
  searched_text_ = search_->text();
  hits_ = model_ ? model_->search(searched_text_.toStdString()) : std::vector<SearchHit>{};
  current_hit_ = -1;
}

void MainWindow::find_next() {
  if (!model_) return;
  if (search_->text() != searched_text_) run_search();
  if (hits_.empty()) {
    hit_label_->setText(search_->text().isEmpty() ? QString() : "no match");
    return;
  }
  current_hit_ = (current_hit_ + 1) % static_cast<int>(hits_.size());
  show_hit();
}

void MainWindow::find_previous() {
  if (!model_) return;
  if (search_->text() != searched_text_) run_search();
  if (hits_.empty()) {
    hit_label_->setText(search_->text().isEmpty() ? QString() : "no match");
    return;
  }
  current_hit_ = current_hit_ <= 0 ? static_cast<int>(hits_.size()) - 1 : current_hit_ - 1;
  show_hit();
}

void MainWindow::show_hit() {
  const SearchHit& hit = hits_[current_hit_];
  timeline_->select_event(hit.series, hit.event, true);
  hit_label_->setText(QString("%1 of %2").arg(current_hit_ + 1).arg(hits_.size()));
}

void MainWindow::show_event_details(int series, std::size_t index) {
  const auto& t = model_->trace(series);
  const auto& e = t.events[index];
  auto html = [](const std::string& text) { return QString::fromStdString(text).toHtmlEscaped(); };
  // A plain trace's blocks are named, not kinds: its category says what it is.
  const std::string_view kind = kind_label(kind_of(e.kind));
  const QString what = model_->has_pipeline(series) ? QString::fromUtf8(kind.data(), static_cast<int>(kind.size()))
                                                    : (e.category.empty() ? QString("slice") : html(e.category));
  QString text = QString("<b>%1</b> (%2) &mdash; %3, %4, %5 lane<br>")
                     .arg(html(e.name), what, html(model_->series_name(series)), html(model_->rank_name(e.rank)),
                          html(model_->lane_name(e.rank, e.lane)));
  if (e.stage >= 0) text += QString("stage %1").arg(e.stage);
  if (e.micro_batch >= 0) text += QString(", micro-batch %1").arg(e.micro_batch);
  text += QString("<br>start %1, duration %2, end %3")
              .arg(duration_text(e.ts_us), duration_text(e.dur_us), duration_text(e.end_us()));
  if (e.bytes >= 0) text += QString("<br>%1 bytes (%2)").arg(e.bytes).arg(mib(e.bytes));
  if (e.peer_rank >= 0) text += QString(", peer rank %1").arg(e.peer_rank);
  if (!e.category.empty() && model_->has_pipeline(series)) text += "<br>category " + html(e.category);
  // A receive: whom it waited for and how long, from the send paired with it.
  if (auto wait = model_->receive_wait(series, index)) {
    const auto& send = t.events[wait->send_event];
    const QString peer = html(model_->rank_name(wait->peer_rank));
    if (wait->waited_for_send_us > 0)
      text += QString(
                  "<br>waited <b>%1</b> for %2: its %3 (micro-batch %4) started %1 after this receive was posted; the "
                  "data came %5 later")
                  .arg(duration_text(wait->waited_for_send_us), peer, html(send.name))
                  .arg(send.micro_batch)
                  .arg(duration_text(wait->data_after_us));
    else
      text += QString(
                  "<br>%1 sent it first (%2, micro-batch %3, %4 before this receive was posted); the data came %5 "
                  "after the post")
                  .arg(peer, html(send.name))
                  .arg(send.micro_batch)
                  .arg(duration_text(e.ts_us - send.ts_us), duration_text(wait->data_after_us));
  } else if (auto receive = model_->transfer_partner(series, index)) {
    const auto& r = t.events[*receive];
    text += QString("<br>received by %1 (%2), its data there at %3")
                .arg(html(model_->rank_name(r.rank)), html(r.name), duration_text(r.end_us()));
  }
  if (model_->series_count() == 2) {
    if (series == 1) {
      if (auto p = model_->matched_predicted(index)) {
        const auto& pe = model_->trace(0).events[*p];
        text += QString("<br>predicted: start %1, duration %2; error %3 (predicted - measured, relative to measured)")
                    .arg(duration_text(pe.ts_us), duration_text(pe.dur_us), percent(model_->prediction_error(index)));
      } else {
        text += "<br>no predicted counterpart";
      }
    }
  }
  // What a plain trace's event carries beyond the typed fields, as written.
  if (const std::string* args = t.args_of(index)) {
    QString shown;
    try {
      const auto parsed = nlohmann::json::parse(*args);
      for (const auto& [key, value] : parsed.items())
        shown += QString("<br>&nbsp;&nbsp;%1: %2")
                     .arg(html(key), html(value.is_string() ? value.get<std::string>() : value.dump()));
    } catch (const nlohmann::json::exception&) {
      shown = "<br>" + html(*args);
    }
    text += "<br><b>args</b>" + shown;
  }
  details_->setText(text);
}

void MainWindow::show_range_details(double start_us, double end_us) {
  details_->setText(
      QString("<b>selection</b> %1 &ndash; %2: <b>%3</b><br>double-click inside it, or press Z, to zoom to it")
          .arg(duration_text(start_us), duration_text(end_us), duration_text(end_us - start_us)));
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

bool MainWindow::can_export_svg() {
#ifdef PIPESCOPE_HAVE_QT_SVG
  return true;
#else
  return false;
#endif
}

std::optional<QString> MainWindow::export_view(const QString& path) const {
  QByteArray bytes;
  QBuffer buffer(&bytes);
  buffer.open(QIODevice::WriteOnly);
  if (path.endsWith(".svg", Qt::CaseInsensitive)) {
#ifdef PIPESCOPE_HAVE_QT_SVG
    QSvgGenerator svg;
    svg.setOutputDevice(&buffer);
    svg.setSize(timeline_->size());
    svg.setViewBox(QRect(QPoint(0, 0), timeline_->size()));
    svg.setTitle(windowTitle());
    svg.setDescription("ppview timeline");
    QPainter painter(&svg);
    timeline_->render(&painter);
    painter.end();
#else
    return QString("%1: this ppview was built without Qt Svg; export as .png instead").arg(path);
#endif
  } else {
    const QImage image = timeline_->grab().toImage();
    if (image.isNull() || !image.save(&buffer, "PNG")) return QString("%1: cannot encode the view as PNG").arg(path);
  }
  try {
    write_file_atomic(path.toStdString(), std::string_view(bytes.constData(), static_cast<std::size_t>(bytes.size())));
  } catch (const std::exception& e) {
    return QString::fromStdString(e.what());
  }
  return std::nullopt;
}

std::optional<QString> MainWindow::export_rank_table(const QString& path) const {
  try {
    write_file_atomic(path.toStdString(), ranks_->csv());
  } catch (const std::exception& e) {
    return QString::fromStdString(e.what());
  }
  return std::nullopt;
}

void MainWindow::export_view_with_dialog(const QString& format) {
  const QString filter = format == "svg" ? "SVG images (*.svg)" : "PNG images (*.png)";
  QString path = QFileDialog::getSaveFileName(this, "Export the view", "timeline." + format, filter);
  if (path.isEmpty()) return;
  if (!path.endsWith("." + format, Qt::CaseInsensitive)) path += "." + format;
  if (auto error = export_view(path)) QMessageBox::critical(this, "ppview: cannot export", *error);
}

void MainWindow::export_rank_table_with_dialog() {
  QString path = QFileDialog::getSaveFileName(this, "Export the rank table", "ranks.csv", "CSV files (*.csv)");
  if (path.isEmpty()) return;
  if (!path.endsWith(".csv", Qt::CaseInsensitive)) path += ".csv";
  if (auto error = export_rank_table(path)) QMessageBox::critical(this, "ppview: cannot export", *error);
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
