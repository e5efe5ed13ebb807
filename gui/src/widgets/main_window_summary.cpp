// The main window's summary table: for a predicted and a measured trace the comparison's
// figures side by side with their errors; for one trace its iteration, bubbles and memory, or
// for a plain trace its span and counts; past kSummaryRankRows ranks only the extremes.
#include <QHeaderView>
#include <QTableWidget>

#include <algorithm>
#include <cmath>
#include <functional>

#include "figure_text.hpp"
#include "main_window.hpp"
#include "pipescope/traces/compare.hpp"

namespace pipescope::gui {
namespace {

// Ranks listed one by one in the summary; past this, the least and the most of each figure.
constexpr int kSummaryRankRows = 1024;

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
           duration_text(c.iteration_time_measured_s * 1e6), percent_text(c.iteration_time_error));
  rows.add("bubble (mean)", share_text(c.bubble_fraction_predicted), share_text(c.bubble_fraction_measured),
           percent_text(c.bubble_fraction_predicted - c.bubble_fraction_measured) + " pts");
  rows.add("op duration MAPE", "", "", share_text(c.op_duration_mape));
  rows.add("op duration error, weighted", "", "", share_text(c.op_duration_weighted_error));
  rows.add("matched / unmatched", QString::number(c.matched.size()),
           QString("%1 / %2").arg(c.unmatched_predicted).arg(c.unmatched_measured));
  rows.add_per_rank(
      "bubble", compared, [&](int i) { return c.ranks[static_cast<std::size_t>(i)].bubble_fraction_measured; },
      [&](int i, const QString& label) {
        const auto& r = c.ranks[static_cast<std::size_t>(i)];
        rows.add(label, share_text(r.bubble_fraction_predicted), share_text(r.bubble_fraction_measured),
                 percent_text(r.bubble_fraction_predicted - r.bubble_fraction_measured) + " pts");
      });
  rows.add_per_rank(
      "peak memory", compared,
      [&](int i) { return static_cast<double>(c.ranks[static_cast<std::size_t>(i)].peak_memory_measured_bytes); },
      [&](int i, const QString& label) {
        const auto& r = c.ranks[static_cast<std::size_t>(i)];
        rows.add(label, mib_text(r.peak_memory_predicted_bytes), mib_text(r.peak_memory_measured_bytes),
                 percent_text(r.peak_memory_error));
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
          rows.add(label, "", share_text(r.stolen_fraction_measured),
                   r.stolen_fraction_measured > traces::kDisturbedStolenFraction ? "disturbed" : "");
        });
  // What a receive costs when its data was sent before it (the transport's own work) and
  // what a message took when the receive waited for it: where a communication model is off.
  // A mean is NaN where a side has no such receive: the cell stays empty.
  auto add_means = [&](const QString& what, double predicted_us, double measured_us) {
    if (std::isnan(predicted_us) && std::isnan(measured_us)) return;
    rows.add(what, std::isnan(predicted_us) ? QString() : duration_text(predicted_us),
             std::isnan(measured_us) ? QString() : duration_text(measured_us),
             std::isnan(predicted_us) || std::isnan(measured_us)
                 ? QString()
                 : percent_text((predicted_us - measured_us) / measured_us));
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
        [&](int r, const QString& label) { rows.add(label, share_text(model_->bubble_fraction(0, r))); });
    rows.add_per_rank(
        "peak memory", ranks,
        [&](int r) {
          return model_->memory(0, r).empty() ? std::nan("") : static_cast<double>(model_->peak_memory_bytes(0, r));
        },
        [&](int r, const QString& label) {
          if (!model_->memory(0, r).empty()) rows.add(label, mib_text(model_->peak_memory_bytes(0, r)));
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
                   mib_text(model_->peak_memory_bytes(0, r)));
        });
  }
}

}  // namespace pipescope::gui
