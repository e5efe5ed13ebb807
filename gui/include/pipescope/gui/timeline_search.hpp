// The viewer's search: a query of words (`stage N`, `mb N`, `rank N` pin those fields; every
// other word must occur in the event's name, ignoring case) and the events of one or two
// traces that match it, in start order.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "pipescope/traces/trace.hpp"

namespace pipescope::gui {

struct SearchHit {
  int series = 0;
  std::size_t event = 0;
};

struct SearchQuery {
  std::vector<std::string> name_parts;          // lower case
  int stage = -1, micro_batch = -1, rank = -1;  // -1: any
  bool valid = false;                           // false for a query of no words (it matches nothing)

  // Whether the event's stage, micro-batch and rank are the pinned ones.
  bool matches_fields(const traces::TraceEvent& event) const;
  // Whether every name part occurs in a name already in lower case.
  bool matches_name(std::string_view lower_case_name) const;
  bool matches(const traces::TraceEvent& event) const;
};

// Words part at spaces, '=' and ':' ("stage=2", "rank:1"); `mb`, `micro_batch` and
// `micro-batch` name the micro-batch. A field word not followed by a number is a name part.
SearchQuery parse_search_query(const std::string& text);

// The events of every series (series[i] is series i) matching `text`, ordered by start
// (stable: at one start, series 0 before series 1, then event order).
std::vector<SearchHit> search_events(std::span<const traces::Trace* const> series, const std::string& text);

}  // namespace pipescope::gui
