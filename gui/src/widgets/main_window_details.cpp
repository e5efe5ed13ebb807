// The main window's details pane: what the clicked event is and did (for a receive, whom it
// waited for; for an all-to-all, whom with and how many bytes; for a measured event, its
// prediction and error; for a plain trace, its args),
// or the span of the selected range.
#include <QLabel>

#include <nlohmann/json.hpp>

#include <string_view>

#include "figure_text.hpp"
#include "main_window.hpp"
#include "pipescope/gui/all_to_all_detail.hpp"
#include "pipescope/gui/kinds.hpp"

namespace pipescope::gui {

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
  if (e.bytes >= 0) text += QString("<br>%1 bytes (%2)").arg(e.bytes).arg(mib_text(e.bytes));
  if (e.peer_rank >= 0) text += QString(", peer rank %1").arg(e.peer_rank);
  if (const auto exchange = all_to_all_detail(t, index)) text += "<br>" + html(all_to_all_text(*exchange));
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
  text += wait_root_text(series, index);
  if (model_->series_count() == 2) {
    if (series == 1) {
      if (auto p = model_->matched_predicted(index)) {
        const auto& pe = model_->trace(0).events[*p];
        text +=
            QString("<br>predicted: start %1, duration %2; error %3 (predicted - measured, relative to measured)")
                .arg(duration_text(pe.ts_us), duration_text(pe.dur_us), percent_text(model_->prediction_error(index)));
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

// A wait's root: the chain of waits that ended in this event (a receive, or the compute right
// after one) followed back to the rank that was busy, as `ppsim compare --explain` follows it.
QString MainWindow::wait_root_text(int series, std::size_t index) const {
  const traces::StepAttribution* attribution = model_->step_attribution(series);
  if (!attribution) return {};
  const traces::Trace& t = model_->trace(series);
  const traces::IdleGap* gap = traces::gap_ended_by(*attribution, t, index);
  if (!gap || !gap->waited || gap->cause.root_rank < 0) return {};
  const auto html = [](const std::string& text) { return QString::fromStdString(text).toHtmlEscaped(); };
  QString text =
      QString("<br>the wait (%1 idle on %2) leads back to <b>%3</b>: %4")
          .arg(duration_text(gap->end_us - gap->start_us), html(model_->rank_name(gap->rank)),
               html(model_->rank_name(gap->cause.root_rank)), html(traces::describe_action(t, gap->cause.root_event)));
  if (gap->cause.root_via != gap->cause.root_event)
    text += QString(", through %1").arg(html(traces::describe_action(t, gap->cause.root_via)));
  if (gap->cause.slow_transfer) text += "; the transfer itself was slow for its bytes";
  return text;
}

void MainWindow::show_range_details(double start_us, double end_us) {
  details_->setText(
      QString("<b>selection</b> %1 &ndash; %2: <b>%3</b><br>double-click inside it, or press Z, to zoom to it")
          .arg(duration_text(start_us), duration_text(end_us), duration_text(end_us - start_us)));
}

}  // namespace pipescope::gui
