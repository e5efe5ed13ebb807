#include "rank_summary_table.hpp"

#include <QHeaderView>
#include <QScrollBar>

#include <cmath>

#include "pipescope/gui/time_ticks.hpp"

namespace pipescope::gui {
namespace {

// A cell shown as text and sorted by its number (NaN sorts first).
class NumberItem : public QTableWidgetItem {
 public:
  NumberItem(const QString& text, double value) : QTableWidgetItem(text), value_(value) {
    setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
  }
  bool operator<(const QTableWidgetItem& other) const override {
    const auto* number = dynamic_cast<const NumberItem*>(&other);
    if (!number) return QTableWidgetItem::operator<(other);
    if (std::isnan(value_)) return !std::isnan(number->value_);
    return !std::isnan(number->value_) && value_ < number->value_;
  }

 private:
  double value_;
};

QString duration_or_na(double us) { return std::isfinite(us) ? QString::fromStdString(format_duration_us(us)) : QString("n/a"); }

QString signed_percent(double fraction) {
  if (!std::isfinite(fraction)) return "n/a";
  return QString("%1%2%").arg(fraction >= 0 ? "+" : "").arg(fraction * 100, 0, 'f', 1);
}

}  // namespace

RankSummaryTable::RankSummaryTable(QWidget* parent) : QTableWidget(parent) {
  setObjectName("rank_summary_table");
  verticalHeader()->hide();
  setEditTriggers(QAbstractItemView::NoEditTriggers);
  setSelectionBehavior(QAbstractItemView::SelectRows);
  setAlternatingRowColors(true);
  // The figures keep their width; the rank names give way (elided, whole in the tooltip).
  horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  horizontalHeader()->setStretchLastSection(false);
  setTextElideMode(Qt::ElideRight);
  setSortingEnabled(true);
}

int RankSummaryTable::error_column() const { return with_prediction_ ? 6 : -1; }

void RankSummaryTable::show_model(const TimelineModel* model) {
  setSortingEnabled(false);  // rows are filled in rank order, then sorted as the user last asked
  setRowCount(0);
  ranks_ = model ? rank_summaries(*model) : std::vector<RankSummary>{};
  with_prediction_ = model && model->series_count() == 2;
  // Short headers, whole words in the tooltips: the error column must fit a narrow window.
  QStringList headers{"rank", "busy", "idle", "comm."};
  if (with_prediction_) headers << "pred. busy" << "meas. busy" << "error";
  setColumnCount(static_cast<int>(headers.size()));
  setHorizontalHeaderLabels(headers);
  horizontalHeader()->setSectionResizeMode(0, QHeaderView::Stretch);
  const QString shown = with_prediction_ ? "measured" : "the trace";
  horizontalHeaderItem(1)->setToolTip("time the rank computed (" + shown + "); the busiest rank is the bottleneck");
  horizontalHeaderItem(2)->setToolTip("the iteration less the busy time (" + shown + ")");
  horizontalHeaderItem(3)->setToolTip("communication: time in sends, receives and collectives (" + shown + ")");
  if (with_prediction_) {
    horizontalHeaderItem(4)->setToolTip("predicted busy time");
    horizontalHeaderItem(5)->setToolTip("measured busy time");
  }
  if (with_prediction_)
    horizontalHeaderItem(6)->setToolTip("(predicted - measured) / measured busy time, as ppsim compare states it: "
                                        "negative where the run took longer than predicted");
  setRowCount(static_cast<int>(ranks_.size()));
  for (int row = 0; row < static_cast<int>(ranks_.size()); ++row) {
    const RankSummary& r = ranks_[static_cast<std::size_t>(row)];
    QString name = QString::fromStdString(r.name);
    auto* rank = new NumberItem(r.bottleneck ? name + "  (bottleneck)" : name, r.rank);
    rank->setTextAlignment(Qt::AlignLeft | Qt::AlignVCenter);
    rank->setToolTip(rank->text());
    if (r.bottleneck) {
      QFont bold = font();
      bold.setBold(true);
      rank->setFont(bold);
      rank->setToolTip("the busiest rank: the others wait for it");
    }
    setItem(row, 0, rank);
    setItem(row, 1, new NumberItem(duration_or_na(r.busy_us), r.busy_us));
    setItem(row, 2, new NumberItem(duration_or_na(r.idle_us), r.idle_us));
    setItem(row, 3, new NumberItem(duration_or_na(r.communication_us), r.communication_us));
    if (with_prediction_) {
      setItem(row, 4, new NumberItem(duration_or_na(r.predicted_busy_us), r.predicted_busy_us));
      setItem(row, 5, new NumberItem(duration_or_na(r.measured_busy_us), r.measured_busy_us));
      setItem(row, 6, new NumberItem(signed_percent(r.error), r.error));
    }
  }
  setSortingEnabled(true);
}

int RankSummaryTable::content_height() const {
  int height = horizontalHeader()->height() + 2 * frameWidth();
  for (int row = 0; row < rowCount(); ++row) height += rowHeight(row);
  if (horizontalScrollBar()->isVisible()) height += horizontalScrollBar()->height();
  return height;
}

}  // namespace pipescope::gui
