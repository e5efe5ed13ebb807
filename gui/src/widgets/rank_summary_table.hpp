// The per-rank table beside the timeline (rank_summary.hpp): one row per rank with its busy,
// idle and communication time, the prediction against the measurement with the CLI's error,
// and the bottleneck rank flagged. Sortable by every column, by value (not by text).
#pragma once

#include <QTableWidget>

#include <optional>
#include <vector>

#include "pipescope/gui/rank_summary.hpp"

namespace pipescope::gui {

class RankSummaryTable : public QTableWidget {
  Q_OBJECT

 public:
  explicit RankSummaryTable(QWidget* parent = nullptr);

  // Fills the table from the model (empty without one).
  void show_model(const TimelineModel* model);
  const std::vector<RankSummary>& ranks() const { return ranks_; }
  bool with_prediction() const { return with_prediction_; }
  // The column of the error, or -1 when the table shows one trace.
  int error_column() const;
  // The table as CSV (rank_summary_csv), in rank order whatever the sorting.
  std::string csv() const { return rank_summary_csv(ranks_, with_prediction_); }
  // The height that shows every row without scrolling (header and frame included).
  int content_height() const;

 private:
  std::vector<RankSummary> ranks_;
  bool with_prediction_ = false;
};

}  // namespace pipescope::gui
