// The per-rank table beside the timeline (rank_summary.hpp): one row per rank with its busy,
// idle and communication time, the prediction against the measurement with the CLI's error,
// and the bottleneck rank flagged. Sortable by every column, by value (not by text). A view
// over a model that formats each cell when it is shown: a million ranks are a million entries
// of RankSummary, not seven million widget items.
#pragma once

#include <QTableView>
#include <QTableWidgetItem>

#include <memory>
#include <optional>
#include <vector>

#include "pipescope/gui/rank_summary.hpp"

namespace pipescope::gui {

class RankSummaryModel;

class RankSummaryTable : public QTableView {
  Q_OBJECT

 public:
  explicit RankSummaryTable(QWidget* parent = nullptr);

  // Fills the table from the model (empty without one).
  void show_model(const TimelineModel* model);
  const std::vector<RankSummary>& ranks() const;
  bool with_prediction() const;
  // The column of the error, or -1 when the table shows one trace.
  int error_column() const;
  // The table as CSV (rank_summary_csv), in rank order whatever the sorting.
  std::string csv() const;
  // The height that shows every row without scrolling (header and frame included).
  int content_height() const;

  // The table as a QTableWidget reads (what the window's tests read): the rows and columns
  // shown, and a copy of a cell or of a column's header as an item (text, alignment, tooltip,
  // font), in the order the table is sorted.
  int rowCount() const;
  int columnCount() const;
  std::unique_ptr<QTableWidgetItem> item(int row, int column) const;
  std::unique_ptr<QTableWidgetItem> horizontalHeaderItem(int column) const;

 private:
  RankSummaryModel* model_;
};

}  // namespace pipescope::gui
