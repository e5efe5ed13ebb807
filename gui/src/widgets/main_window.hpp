// ppview's window: the timeline in the middle, a toolbar (open, zoom, difference, arrows,
// critical path, search with next/previous) and, in docks below it that can be resized,
// closed and reopened from the View menu, a details pane for the clicked event or the
// selected range, the summary of prediction against measurement and the per-rank table.
// Opens files given on the command line, from a dialog, by drag and drop and from a
// recent-files list; exports the view (PNG, SVG) and the rank table (CSV).
#pragma once

#include <QMainWindow>
#include <QStringList>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "pipescope/gui/timeline_model.hpp"
#include "prepared_view.hpp"
#include "trace_inputs.hpp"

class QAction;
class QDockWidget;
class QLabel;
class QLineEdit;
class QMenu;
class QTableWidget;

namespace pipescope::gui {

class RankSummaryTable;
class TimelineWidget;
class TraceLoading;

class MainWindow : public QMainWindow {
  Q_OBJECT

 public:
  explicit MainWindow(QWidget* parent = nullptr);

  // Reads one trace, or a predicted and a measured one (in either order when their
  // otherData.source says which is which). Returns the error message of a trace that cannot
  // be read, leaving the window as it was; on success the files join the recent list.
  // torch.profiler traces (files or folders) among the paths are the ranks of one measured
  // trace (pipescope/traces/torch_profiler.hpp); what such a trace lacks is said in the status bar.
  std::optional<QString> open_files(const QStringList& paths);
  // The ProfilerStep#N that torch.profiler traces open at (default: the last).
  void set_torch_step(std::optional<int> step) { torch_step_ = step; }
  // Keep each rank's times as written instead of aligning the ranks' clocks (ppview --raw-clocks).
  void set_raw_clocks(bool raw) { raw_clocks_ = raw; }
  // Shows two traces already in memory (a predicted and a measured one), titled `title`.
  void show_traces(traces::Trace predicted, std::optional<traces::Trace> measured, const QString& title);
  // Like open_files, and shows a dialog on error; `then` runs once the traces are shown.
  // Inputs of background_read_bytes() or more are read off the GUI thread
  // (open_files_in_background), the others at once.
  void open_files_interactively(const QStringList& paths, std::function<void()> then = {});
  // Reads the files on a thread of its own behind a progress dialog (trace_loading.hpp, object
  // name "loading_dialog") and shows them once read, then runs `then`; an error is shown in a
  // dialog. Cancelling (the dialog's Cancel, Esc) leaves the window as it was.
  void open_files_in_background(const QStringList& paths, std::function<void()> then = {});
  // Whether a read started by open_files_in_background is still running.
  bool loading() const;
  // The size of the inputs, in bytes, from which open_files_interactively reads in the
  // background (default 32 MiB: a smaller read takes well under a second).
  std::uint64_t background_read_bytes() const { return background_read_bytes_; }
  void set_background_read_bytes(std::uint64_t bytes) { background_read_bytes_ = bytes; }
  // File > Open: a file dialog (object name "open_traces_dialog") for one or two existing
  // traces, starting in the folder of the most recent one; accepting it opens them.
  void open_with_dialog();

  TimelineWidget* timeline() const { return timeline_; }
  QTableWidget* summary_table() const { return summary_; }
  RankSummaryTable* rank_table() const { return ranks_; }
  QDockWidget* details_dock() const { return details_dock_; }
  QDockWidget* summary_dock() const { return summary_dock_; }
  QDockWidget* ranks_dock() const { return ranks_dock_; }
  // Writes the timeline as it is shown: SVG when the path ends in .svg (where Qt Svg is
  // available), PNG otherwise; the per-rank table as CSV. Atomic writes (temp + rename);
  // returns the error message, naming the file, of a write that failed.
  std::optional<QString> export_view(const QString& path) const;
  std::optional<QString> export_rank_table(const QString& path) const;
  static bool can_export_svg();
  QLabel* details() const { return details_; }
  QLineEdit* search_box() const { return search_; }
  const std::vector<SearchHit>& search_hits() const { return hits_; }
  int current_hit() const { return current_hit_; }
  void find_next();
  void find_previous();
  void set_difference(bool on);
  void set_flows(bool on);
  void set_critical_path(bool on);
  // Most recent first; a predicted/measured pair is one entry, its two paths joined by '|'.
  // Kept in QSettings under the application's organization name ("pipescope" unless set)
  // and "ppview", so they outlive the window.
  QStringList recent_files() const;
  QMenu* recent_menu() const { return recent_menu_; }

 protected:
  void dragEnterEvent(QDragEnterEvent* event) override;
  void dropEvent(QDropEvent* event) override;

 private:
  void show_inputs(TraceInputs read, const QStringList& paths);
  // Shows a read's prepared view, its notes, and remembers its files.
  void show_read(PreparedView view, const TraceInputs& read, const QStringList& paths);
  // Swaps a prepared model in (prepared_view.hpp) and brings the docks and title up to date.
  void show_view(PreparedView view, const QString& title);
  std::optional<int> torch_step_;
  TraceLoading* loading_ = nullptr;  // the read in the background, if any (a child of the window)
  std::uint64_t background_read_bytes_ = std::uint64_t{32} << 20;
  bool raw_clocks_ = false;
  void build_actions();
  void build_docks();
  // Gives the docks the height their content needs, at most a third of the window: with one
  // or two ranks the timeline keeps the space.
  void fit_docks();
  void export_view_with_dialog(const QString& format);
  void export_rank_table_with_dialog();
  void refresh_summary();
  void refresh_recent_menu();
  void remember(const QStringList& paths);
  void run_search();
  void show_hit();
  void show_event_details(int series, std::size_t event);
  void show_range_details(double start_us, double end_us);
  QString wait_root_text(int series, std::size_t event) const;

  std::shared_ptr<TimelineModel> model_;
  TimelineWidget* timeline_ = nullptr;
  QTableWidget* summary_ = nullptr;
  RankSummaryTable* ranks_ = nullptr;
  QLabel* details_ = nullptr;
  QDockWidget* details_dock_ = nullptr;
  QDockWidget* summary_dock_ = nullptr;
  QDockWidget* ranks_dock_ = nullptr;
  QLineEdit* search_ = nullptr;
  QLabel* hit_label_ = nullptr;
  QMenu* recent_menu_ = nullptr;
  QAction* difference_action_ = nullptr;
  QAction* flows_action_ = nullptr;
  QAction* critical_action_ = nullptr;
  QAction* compact_action_ = nullptr;
  std::vector<SearchHit> hits_;
  int current_hit_ = -1;
  QString searched_text_;
};

}  // namespace pipescope::gui
