// The main window's frame: its docks, menus and toolbar, the view toggles and the search's
// next/previous. Opening files, the summary, the details pane and exports are in
// main_window_files.cpp, main_window_summary.cpp, main_window_details.cpp and
// main_window_export.cpp.
#include "main_window.hpp"

#include <QAction>
#include <QApplication>
#include <QDockWidget>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QMenuBar>
#include <QMessageBox>
#include <QScrollArea>
#include <QTableWidget>
#include <QToolBar>

#include <algorithm>

#include "rank_summary_table.hpp"
#include "timeline_widget.hpp"

namespace pipescope::gui {

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

}  // namespace pipescope::gui
