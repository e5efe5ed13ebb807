// The timeline's lanes: what the painting keeps per model (sub-rows, tallies, chunks, compact
// rows), and each row of blocks painted with the honest level of detail of
// lane_detail.hpp (merged spans coloured by what fills their time, wide blocks whole with
// labels), overlapping blocks in sub-rows, collapsed ranks as one merged row per series.
#include <QFontMetrics>
#include <QPainter>
#include <QStaticText>

#include <algorithm>
#include <functional>

#include "pipescope/gui/kinds.hpp"
#include "timeline_paint_support.hpp"
#include "timeline_widget.hpp"

namespace pipescope::gui {

using namespace timeline_paint;

// Everything per model that the painting reads: overlapping blocks dealt to sub-rows, the
// running sums of every painted row, the stages (chunks) each rank holds, the memory ranges.
void TimelineWidget::build_painted_lanes() {
  painted_.clear();
  stage_chunks_.clear();
  memory_ranges_.clear();
  if (!model_ || model_->empty()) return;
  const bool pair = model_->series_count() == 2;
  const TimelineModel* model = model_.get();
  const std::function<double(std::uint32_t)> measured_error = [model](std::uint32_t event) {
    return model->measured_error(event);
  };
  painted_.resize(model_->rows().size());
  for (std::size_t i = 0; i < model_->rows().size(); ++i) {
    const Row& row = model_->rows()[i];
    const auto& error_of = pair && row.series == 1 ? measured_error : std::function<double(std::uint32_t)>();
    PaintedLane& painted = painted_[i];
    // Nested slices of a plain trace by depth (a call stack); overlaps elsewhere first come.
    painted.sub_rows = row.depth_count > 1 ? split_by_depth(row) : stack_overlaps(row);
    if (painted.sub_rows.empty()) {
      painted.tallies.emplace_back(row, error_of);
    } else {
      for (const Row& sub : painted.sub_rows) painted.tallies.emplace_back(sub, error_of);
    }
  }
  stage_chunks_.assign(model_->series_count(), std::vector<std::vector<int>>(model_->rank_count()));
  for (int s = 0; s < model_->series_count(); ++s) {
    auto& chunks = stage_chunks_[s];
    for (const auto& e : model_->trace(s).events) {
      if (e.stage < 0 || e.lane != static_cast<int>(traces::Lane::Compute)) continue;
      auto& stages = chunks[e.rank];
      if (std::find(stages.begin(), stages.end(), e.stage) == stages.end()) {
        stages.push_back(e.stage);
        std::sort(stages.begin(), stages.end());
      }
    }
  }
  for (int r = 0; r < model_->rank_count(); ++r) {
    std::vector<const std::vector<traces::MemorySample>*> curves;
    curves.reserve(static_cast<std::size_t>(model_->series_count()));
    for (int s = 0; s < model_->series_count(); ++s) curves.push_back(&model_->memory(s, r));
    memory_ranges_.push_back(memory_range(curves));
  }
}

const TimelineWidget::CompactRow& TimelineWidget::compact_row(int rank, int series) const {
  if (compact_rows_.empty()) compact_rows_.resize(static_cast<std::size_t>(model_->rank_count()));
  auto& per_series = compact_rows_[static_cast<std::size_t>(rank)];
  if (per_series.empty()) per_series.resize(static_cast<std::size_t>(model_->series_count()));
  auto& compact = per_series[static_cast<std::size_t>(series)];
  if (!compact) {
    // The rank's work: compute and collectives. Sends, receives and the all-to-all stay out: a
    // receive waiting for its data would paint an idle rank as busy communicating (unless that
    // is all it has), and an all-to-all beside another micro-batch's compute would cover it.
    std::vector<const Row*> lanes, transfers;
    for (const Row& row : model_->rank_rows(rank, series)) {
      const bool transfer = row.lane == static_cast<int>(traces::Lane::Send) ||
                            row.lane == static_cast<int>(traces::Lane::Recv) ||
                            row.lane == static_cast<int>(traces::Lane::AllToAll);
      (transfer ? transfers : lanes).push_back(&row);
    }
    if (lanes.empty()) lanes = transfers;
    compact = std::make_unique<CompactRow>();
    compact->row = merge_rows(lanes);
    compact->row.rank = rank;
    compact->row.series = series;
    const TimelineModel* model = model_.get();
    std::function<double(std::uint32_t)> error_of;
    if (model->series_count() == 2 && series == 1)
      error_of = [model](std::uint32_t event) { return model->measured_error(event); };
    compact->tally = RowTally(compact->row, error_of);
  }
  return *compact;
}

int TimelineWidget::chunk_of(int series, int rank, int stage) const {
  if (stage < 0 || series >= static_cast<int>(stage_chunks_.size()) ||
      rank >= static_cast<int>(stage_chunks_[series].size()))
    return -1;
  const auto& stages = stage_chunks_[series][rank];
  if (stages.size() < 2) return -1;  // one stage per rank: no chunk to tell apart
  const auto it = std::lower_bound(stages.begin(), stages.end(), stage);
  return it == stages.end() || *it != stage ? -1 : static_cast<int>(it - stages.begin());
}

// Level 0: "F3.c1" (name, micro-batch, chunk of an interleaved or ZBV rank), 1: "F3", 2: "3".
// The same for every kind, so F, B, I and W read alike.
QString TimelineWidget::block_label(int series, std::size_t event, int level) const {
  const auto& e = model_->trace(series).events.at(event);
  // A plain trace's slice is its name (elided by the painter); it has no micro-batch or chunk.
  if (!model_->has_pipeline(series)) return level == 0 ? QString::fromStdString(e.name) : QString();
  QString micro_batch = e.micro_batch >= 0 ? QString::number(e.micro_batch) : QString();
  if (level >= 2) return micro_batch;
  QString text = QString::fromStdString(e.name) + micro_batch;
  if (level == 0) {
    const int chunk = chunk_of(series, e.rank, e.stage);
    if (chunk >= 0) text += ".c" + QString::number(chunk);
  }
  return text;
}

namespace {

// Merged spans go into one row of pixels drawn down the box in one blit; a column whose span
// mixes two kinds gives its lower rows to the second, in proportion to its time (so the
// forwards between longer backwards stay visible far out). Kept per thread and reused, so a
// repaint allocates nothing once the widths are seen.
class MergedSpanStrip {
 public:
  void reset(int width_px) {
    width_px_ = width_px;
    top_.assign(static_cast<std::size_t>(width_px), 0u);
    lower_.assign(static_cast<std::size_t>(width_px), 0u);
    lower_rows_.assign(static_cast<std::size_t>(width_px), 0);
    split_columns_.clear();
    used_ = false;
  }
  // Columns [from, to) in one colour (0xAARRGGBB).
  void fill(int from, int to, std::uint32_t argb) {
    std::fill(top_.begin() + from, top_.begin() + to, argb);
    used_ = true;
  }
  // Columns [from, to) give their lowest `rows` rows to a second colour.
  void split(int from, int to, int rows, std::uint32_t argb) {
    for (int x = from; x < to; ++x) {
      lower_[static_cast<std::size_t>(x)] = argb;
      if (lower_rows_[static_cast<std::size_t>(x)] == 0) split_columns_.push_back(x);
      lower_rows_[static_cast<std::size_t>(x)] = rows;
    }
  }
  // The strip stretched down `height` rows at `at`, in one blit (nothing when unused).
  void draw(QPainter& p, QPoint at, int height) {
    if (!used_) return;
    const auto width = static_cast<std::size_t>(width_px_);
    block_.resize(width * static_cast<std::size_t>(height));
    for (int y = 0; y < height; ++y) {
      auto line = block_.begin() + static_cast<std::ptrdiff_t>(width * static_cast<std::size_t>(y));
      std::copy(top_.begin(), top_.end(), line);
      for (const int x : split_columns_)
        if (y >= height - lower_rows_[static_cast<std::size_t>(x)]) line[x] = lower_[static_cast<std::size_t>(x)];
    }
    const QImage image(reinterpret_cast<const uchar*>(block_.data()), width_px_, height, width_px_ * 4,
                       QImage::Format_ARGB32_Premultiplied);
    p.drawImage(at, image);
  }

 private:
  int width_px_ = 0;
  bool used_ = false;
  std::vector<std::uint32_t> top_, lower_, block_;
  std::vector<int> lower_rows_, split_columns_;
};

// A merged span of a plain trace takes the colour of the name that fills most of its time,
// judged on at most kNameSamples of its blocks so a far-out repaint of a million slices stays
// within the repaint budget.
std::uint32_t dominant_name_rgb(const TimelineModel& model, const Row& row, std::size_t first, std::size_t count) {
  constexpr std::size_t kNameSamples = 64;
  thread_local std::vector<std::pair<std::uint32_t, double>> filled;
  filled.clear();
  const std::size_t step = std::max<std::size_t>(1, count / kNameSamples);
  for (std::size_t i = first; i < first + count; i += step) {
    const Block& b = row.blocks[i];
    const std::uint32_t colour = model.event_rgb(row.series, b.event);
    auto it = std::find_if(filled.begin(), filled.end(), [colour](const auto& f) { return f.first == colour; });
    if (it == filled.end()) it = filled.insert(filled.end(), {colour, 0.0});
    it->second += std::max(0.0, b.end_us - b.start_us);
  }
  return std::max_element(filled.begin(), filled.end(),
                          [](const auto& a, const auto& b) { return a.second < b.second; })
      ->first;
}

}  // namespace

void TimelineWidget::paint_row(QPainter& p, const Row& row, const RowTally& tally, const QRect& area,
                               bool difference) const {
  const int width_px = time_area_width();
  const auto& events = model_->trace(row.series).events;
  const int box_top = area.top() + (area.height() >= 10 ? 1 : 0);
  const int box_height = std::max(1, area.height() - (area.height() >= 10 ? 2 : 0));
  const bool labels = box_height >= 10;
  thread_local MergedSpanStrip strip;
  strip.reset(width_px);
  thread_local std::vector<LaneSpan> whole;
  whole.clear();
  // A plain trace colours by name (its kinds are all "other").
  const bool by_name = !model_->has_pipeline(row.series);
  visit_lane(row, tally, view_, kMinBlockPx, [&](const LaneSpan& span) {
    if (span.whole()) {
      whole.push_back(span);
      return;
    }
    // What fills the merged span's time decides its colour; zero-length blocks (a LOAD
    // marker) weigh nothing, so they never colour a span with real work in it.
    const BlockMix mix = tally.mix(row, span.first, span.first + span.count);
    const Kind kind = mix.dominant_kind(row.blocks[span.first].kind);
    // A lone narrow block is itself (its chunk's shade); only a merge of several is darker.
    std::uint32_t color = difference ? difference_rgb(mix.mean_error())
                          : by_name  ? dominant_name_rgb(*model_, row, span.first, span.count)
                                     : kind_rgb(kind);
    if (!span.merged() && !difference && !by_name) {
      const auto& e = events[row.blocks[span.first].event];
      color = chunk_rgb(color, chunk_of(row.series, e.rank, e.stage));
    }
    const double x0 = std::max(span.x0, -2.0), x1 = std::min(span.x1, width_px + 2.0);
    const int from = std::clamp(pixel(x0), 0, width_px - 1);
    const int to = std::clamp(pixel(std::max(x1, x0 + 1)), from + 1, width_px);
    strip.fill(from, to, 0xff000000u | (span.merged() ? merged_rgb(color) : color));
    double share = 0;
    const Kind second = difference || by_name ? kind : mix.second_kind(kind, share);
    const int rows = static_cast<int>(std::lround(share * box_height));
    if (rows > 0 && span.merged()) strip.split(from, to, rows, 0xff000000u | merged_rgb(kind_rgb(second)));
  });
  // Merged spans under whole blocks: a marker that shares a pixel with a forward loses it.
  strip.draw(p, QPoint(area.left(), box_top), box_height);
  QFont small = p.font();
  for (const LaneSpan& span : whole) {
    const Block& block = row.blocks[span.first];
    const auto& e = events[block.event];
    const double x0 = std::max(span.x0, -2.0), x1 = std::min(span.x1, width_px + 2.0);
    const int chunk = chunk_of(row.series, e.rank, e.stage);
    const std::uint32_t fill = difference ? difference_rgb(tally.error(span.first))
                               : by_name  ? model_->event_rgb(row.series, block.event)
                                          : chunk_rgb(kind_rgb(block.kind), chunk);
    const QRect box = pixel_rect(area.left() + x0, box_top, area.left() + x1, box_top + box_height);
    p.fillRect(box, rgb(fill));
    if (box.width() >= 5) {
      // A light right edge parts neighbours of one colour; the difference view outlines them.
      p.fillRect(QRect(box.right(), box.top(), 1, box.height()),
                 difference ? QColor(120, 120, 120) : QColor(255, 255, 255, 170));
    }
    if (!labels || box.width() < 8) continue;
    if (by_name) {
      // A name: whole when it fits, elided ("convolu…") when a few letters do.
      const QFontMetrics metrics(small);
      const QString name = metrics.elidedText(block_label(row.series, block.event, 0), Qt::ElideRight, box.width() - 4);
      if (name.isEmpty() || name == QStringLiteral("…") || metrics.height() > box.height() + 3) continue;
      const QStaticText& laid_out = static_text(name, small);
      const QSizeF size = laid_out.size();
      p.setPen(rgb(text_rgb_on(fill)));
      p.drawStaticText(
          QPointF(box.left() + (box.width() - size.width()) / 2, box.top() + (box.height() - size.height()) / 2),
          laid_out);
      continue;
    }
    for (int level = 0; level < 3; ++level) {
      const QString label = block_label(row.series, block.event, level);
      if (label.isEmpty()) break;
      const QStaticText& laid_out = static_text(label, small);
      const QSizeF size = laid_out.size();
      if (size.width() + 3 > box.width() || size.height() > box.height() + 3) continue;
      p.setPen(rgb(text_rgb_on(fill)));
      p.drawStaticText(
          QPointF(box.left() + (box.width() - size.width()) / 2, box.top() + (box.height() - size.height()) / 2),
          laid_out);
      break;
    }
  }
}

void TimelineWidget::paint_lanes(QPainter& p, const QRect& dirty) const {
  const int top = content_top() - scroll_offset();
  const int left = header_width();
  const int visible_top = std::max(dirty.top(), content_top()),
            visible_bottom = std::min(dirty.bottom() + 1, content_bottom());
  QFont small = font();
  small.setPointSizeF(std::max(6.0, small.pointSizeF() - 1.5));
  p.setFont(small);

  QBrush bubble(rgb(0xc9bfae), Qt::BDiagPattern);
  const auto& rows = model_->rows();
  for (const auto& r : ranks_) {
    const int y = top + r.header_y;
    if (r.collapsed || y > visible_bottom || y + r.header_height < visible_top) continue;
    p.fillRect(QRect(0, y, width(), r.header_height), rgb(0xeef1f5));
  }
  for (const auto& l : lanes_) {
    const int y = top + l.y;
    if (y > visible_bottom || y + l.height < visible_top) continue;
    const QRect lane_area(left, y, time_area_width(), l.height);
    p.fillRect(lane_area, l.series == 1 ? rgb(0xfbf8f3) : rgb(0xf7f9fc));
    const bool difference = show_difference_ && l.series == 1 && model_->series_count() == 2;
    if (l.lane < 0) {
      const CompactRow& compact = compact_row(l.rank, l.series);
      paint_row(p, compact.row, compact.tally, lane_area, difference);
      paint_instants(p, l.rank, l.series, l.lane, lane_area);
      continue;
    }
    // The bubble: idle time of the compute lane within the series' iteration, hatched.
    if (l.lane == static_cast<int>(traces::Lane::Compute) && model_->has_pipeline(l.series)) {
      const double end = model_->iteration_us(l.series);
      const double x0 = std::max(0.0, view_.time_to_x(0)),
                   x1 = std::min<double>(time_area_width(), view_.time_to_x(end));
      if (x1 > x0) {
        p.fillRect(QRectF(left + x0, y + 1, x1 - x0, l.height - 2), rgb(kBubbleRgb));
        p.fillRect(QRectF(left + x0, y + 1, x1 - x0, l.height - 2), bubble);
      }
    }
    const Row* row = model_->row(l.rank, l.series, l.lane);
    if (!row) continue;
    const PaintedLane& painted = painted_[static_cast<std::size_t>(row - rows.data())];
    if (painted.sub_rows.empty()) {
      paint_row(p, *row, painted.tallies.front(), lane_area.adjusted(0, 1, 0, -1), difference);
    } else {
      // Overlapping blocks, one sub-row each, top to bottom in the order they were dealt.
      const int count = static_cast<int>(painted.sub_rows.size());
      const double sub_height = (l.height - 2) / static_cast<double>(count);
      for (int i = 0; i < count; ++i) {
        const int sub_top = y + 1 + static_cast<int>(i * sub_height),
                  sub_bottom = y + 1 + static_cast<int>((i + 1) * sub_height);
        paint_row(p, painted.sub_rows[i], painted.tallies[i],
                  QRect(left, sub_top, time_area_width(), sub_bottom - sub_top), difference);
      }
    }
    paint_instants(p, l.rank, l.series, l.lane, lane_area);
    if (selected_ && selected_->first == l.series) {
      const auto& e = model_->trace(l.series).events[selected_->second];
      if (e.rank == l.rank && e.lane == l.lane) {
        const double x0 = view_.time_to_x(e.ts_us), x1 = view_.time_to_x(e.end_us());
        p.setPen(QPen(Qt::black, 2));
        p.setBrush(Qt::NoBrush);
        p.drawRect(QRectF(left + x0, y + 1, std::max(2.0, x1 - x0), l.height - 2));
      }
    }
  }
  p.setFont(font());
}

// Instant events ("ph": "i") of a plain trace as marks: a dark line down the lane with a
// small triangle on top. A rank-wide instant (lane -1) marks every lane of its rank; a compact
// row (lane -1) shows all of its rank's.
void TimelineWidget::paint_instants(QPainter& p, int rank, int series, int lane, const QRect& area) const {
  const auto& instants = model_->instants(series);
  if (instants.empty()) return;
  const auto first = std::lower_bound(instants.begin(), instants.end(), view_.visible_start_us(),
                                      [](const traces::InstantEvent& e, double t) { return e.ts_us < t; });
  p.save();
  p.setRenderHint(QPainter::Antialiasing, false);
  for (auto it = first; it != instants.end() && it->ts_us <= view_.visible_end_us(); ++it) {
    if (it->rank != rank || (lane >= 0 && it->lane >= 0 && it->lane != lane)) continue;
    const int x = area.left() + static_cast<int>(std::lround(view_.time_to_x(it->ts_us)));
    p.fillRect(QRect(x, area.top(), 1, area.height()), rgb(kInstantRgb));
    const QPoint tip[3] = {QPoint(x - 3, area.top()), QPoint(x + 4, area.top()), QPoint(x, area.top() + 4)};
    p.setPen(Qt::NoPen);
    p.setBrush(rgb(kInstantRgb));
    p.drawPolygon(tip, 3);
  }
  p.restore();
}

}  // namespace pipescope::gui
