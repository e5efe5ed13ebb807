#include "rank_summary_table.hpp"

#include <QAbstractTableModel>
#include <QFont>
#include <QHeaderView>
#include <QScrollBar>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "pipescope/gui/time_ticks.hpp"

namespace pipescope::gui {
namespace {

QString duration_or_na(double us) {
  return std::isfinite(us) ? QString::fromStdString(format_duration_us(us)) : QString("n/a");
}

QString signed_percent(double fraction) {
  if (!std::isfinite(fraction)) return "n/a";
  return QString("%1%2%").arg(fraction >= 0 ? "+" : "").arg(fraction * 100, 0, 'f', 1);
}

// The waits column of a single trace (a pair has the prediction's columns there instead).
constexpr int kWaitedOnColumn = 4;

QString waited_on(const RankSummary& r) {
  if (r.waited_most_on < 0) return "-";
  return QString("rank %1 (%2)")
      .arg(r.waited_most_on)
      .arg(QString::fromStdString(format_duration_us(r.waited_most_us)));
}

QString name_tooltip(const RankSummary& r) {
  QString tip = QString::fromStdString(r.name);
  if (r.bottleneck) tip = "the busiest rank: the others wait for it";
  if (r.held_step_back)
    tip += QString("\nheld the step back by %1 (ppsim compare --explain)")
               .arg(QString::fromStdString(format_duration_us(r.held_back_us)));
  if (r.waited_most_on >= 0) tip += "\nwaited longest on " + waited_on(r);
  return tip;
}

// Cells sort by their number; NaN sorts first.
bool number_less(double a, double b) {
  if (std::isnan(a)) return !std::isnan(b);
  return !std::isnan(b) && a < b;
}

}  // namespace

// The rows of the table: the ranks' summaries in the order shown (a permutation, sorted on
// request), each cell formatted when the view asks for it.
class RankSummaryModel : public QAbstractTableModel {
 public:
  using QAbstractTableModel::QAbstractTableModel;

  void set_ranks(std::vector<RankSummary> ranks, bool with_prediction) {
    beginResetModel();
    ranks_ = std::move(ranks);
    with_prediction_ = with_prediction;
    order_.resize(ranks_.size());
    std::iota(order_.begin(), order_.end(), std::size_t{0});
    endResetModel();
  }
  const std::vector<RankSummary>& ranks() const { return ranks_; }
  bool with_prediction() const { return with_prediction_; }

  int rowCount(const QModelIndex& parent = {}) const override {
    return parent.isValid() ? 0 : static_cast<int>(ranks_.size());
  }
  int columnCount(const QModelIndex& parent = {}) const override {
    return parent.isValid() ? 0 : with_prediction_ ? 7 : 5;
  }

  QVariant data(const QModelIndex& index, int role) const override {
    if (!index.isValid() || index.row() >= rowCount()) return {};
    const RankSummary& r = ranks_[order_[static_cast<std::size_t>(index.row())]];
    const int column = index.column();
    if (column == 0) {
      const QString name = QString::fromStdString(r.name);
      switch (role) {
        case Qt::DisplayRole:
          return r.bottleneck ? name + "  (bottleneck)" : r.held_step_back ? name + "  (held the step back)" : name;
        case Qt::ToolTipRole: return name_tooltip(r);
        case Qt::TextAlignmentRole: return static_cast<int>(Qt::AlignLeft | Qt::AlignVCenter);
        case Qt::FontRole: {
          if (!r.bottleneck && !r.held_step_back) return {};
          QFont bold;
          bold.setBold(true);
          return bold;
        }
        default: return {};
      }
    }
    if (role == Qt::TextAlignmentRole) return static_cast<int>(Qt::AlignRight | Qt::AlignVCenter);
    if (role != Qt::DisplayRole) return {};
    if (!with_prediction_ && column == kWaitedOnColumn) return waited_on(r);
    return column == 6 ? signed_percent(r.error) : duration_or_na(value(r, column));
  }

  QVariant headerData(int section, Qt::Orientation orientation, int role) const override {
    if (orientation != Qt::Horizontal || section < 0 || section >= columnCount()) return {};
    static const char* const kHeaders[] = {"rank", "busy", "idle", "comm.", "pred. busy", "meas. busy", "error"};
    const bool waits = !with_prediction_ && section == kWaitedOnColumn;
    // Short headers, whole words in the tooltips: the error column must fit a narrow window.
    const QString shown = with_prediction_ ? "measured" : "the trace";
    switch (role) {
      case Qt::DisplayRole: return waits ? QString("waited on") : QString(kHeaders[section]);
      case Qt::ToolTipRole:
        switch (section) {
          case 1: return "time the rank computed (" + shown + "); the busiest rank is the bottleneck";
          case 2: return "the iteration less the busy time (" + shown + ")";
          case 3: return "communication: time in sends, receives and collectives (" + shown + ")";
          case 4:
            return waits
                       ? QString("the rank this rank's waits led back to most, and how long (ppsim compare --explain)")
                       : QString("predicted busy time");
          case 5: return QString("measured busy time");
          case 6:
            return QString(
                "(predicted - measured) / measured busy time, as ppsim compare states it: negative where the run "
                "took longer than predicted");
          default: return {};
        }
      default: return {};
    }
  }

  void sort(int column, Qt::SortOrder order) override {
    if (column < 0 || column >= columnCount()) return;
    emit layoutAboutToBeChanged({}, QAbstractItemModel::VerticalSortHint);
    const QModelIndexList before = persistentIndexList();
    std::vector<std::size_t> rank_at_before;
    for (const QModelIndex& i : before) rank_at_before.push_back(order_[static_cast<std::size_t>(i.row())]);
    auto less = [&](std::size_t a, std::size_t b) {
      return number_less(value(ranks_[a], column), value(ranks_[b], column));
    };
    if (order == Qt::AscendingOrder)
      std::stable_sort(order_.begin(), order_.end(), less);
    else
      std::stable_sort(order_.begin(), order_.end(), [&](std::size_t a, std::size_t b) { return less(b, a); });
    // Selections and the current cell follow their rank.
    std::vector<std::size_t> row_of(order_.size());
    for (std::size_t row = 0; row < order_.size(); ++row) row_of[order_[row]] = row;
    QModelIndexList after;
    for (std::size_t k = 0; k < static_cast<std::size_t>(before.size()); ++k)
      after << index(static_cast<int>(row_of[rank_at_before[k]]), before[static_cast<int>(k)].column());
    changePersistentIndexList(before, after);
    emit layoutChanged({}, QAbstractItemModel::VerticalSortHint);
  }

 private:
  // The number a cell sorts by: the rank for its name, else the figure shown.
  double value(const RankSummary& r, int column) const {
    if (!with_prediction_ && column == kWaitedOnColumn) return r.waited_most_on;
    switch (column) {
      case 0: return r.rank;
      case 1: return r.busy_us;
      case 2: return r.idle_us;
      case 3: return r.communication_us;
      case 4: return r.predicted_busy_us;
      case 5: return r.measured_busy_us;
      case 6: return r.error;
      default: return std::nan("");
    }
  }

  std::vector<RankSummary> ranks_;
  std::vector<std::size_t> order_;  // row -> index into ranks_
  bool with_prediction_ = false;
};

RankSummaryTable::RankSummaryTable(QWidget* parent) : QTableView(parent), model_(new RankSummaryModel(this)) {
  setObjectName("rank_summary_table");
  setModel(model_);
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

const std::vector<RankSummary>& RankSummaryTable::ranks() const { return model_->ranks(); }
bool RankSummaryTable::with_prediction() const { return model_->with_prediction(); }
int RankSummaryTable::error_column() const { return with_prediction() ? 6 : -1; }
std::string RankSummaryTable::csv() const { return rank_summary_csv(ranks(), with_prediction()); }
int RankSummaryTable::rowCount() const { return model_->rowCount(); }
int RankSummaryTable::columnCount() const { return model_->columnCount(); }

void RankSummaryTable::show_model(const TimelineModel* model) {
  setSortingEnabled(false);  // rows are filled in rank order, then sorted as the user last asked
  model_->set_ranks(model ? rank_summaries(*model) : std::vector<RankSummary>{}, model && model->series_count() == 2);
  if (model_->columnCount() > 0) horizontalHeader()->setSectionResizeMode(0, QHeaderView::Stretch);
  setSortingEnabled(true);
}

std::unique_ptr<QTableWidgetItem> RankSummaryTable::item(int row, int column) const {
  const QModelIndex index = model_->index(row, column);
  if (!index.isValid()) return nullptr;
  auto cell = std::make_unique<QTableWidgetItem>(index.data(Qt::DisplayRole).toString());
  cell->setToolTip(index.data(Qt::ToolTipRole).toString());
  cell->setTextAlignment(Qt::Alignment(index.data(Qt::TextAlignmentRole).toInt()));
  if (const QVariant font = index.data(Qt::FontRole); font.isValid()) cell->setFont(font.value<QFont>());
  return cell;
}

std::unique_ptr<QTableWidgetItem> RankSummaryTable::horizontalHeaderItem(int column) const {
  if (column < 0 || column >= columnCount()) return nullptr;
  auto header =
      std::make_unique<QTableWidgetItem>(model_->headerData(column, Qt::Horizontal, Qt::DisplayRole).toString());
  header->setToolTip(model_->headerData(column, Qt::Horizontal, Qt::ToolTipRole).toString());
  return header;
}

int RankSummaryTable::content_height() const {
  // Rows are of one height: a million ranks cost one multiplication, not a million calls.
  const int rows = rowCount();
  int height = horizontalHeader()->height() + 2 * frameWidth();
  if (rows > 0) height += static_cast<int>(std::min<long long>(static_cast<long long>(rows) * rowHeight(0), 1 << 24));
  if (horizontalScrollBar()->isVisible()) height += horizontalScrollBar()->height();
  return height;
}

}  // namespace pipescope::gui
