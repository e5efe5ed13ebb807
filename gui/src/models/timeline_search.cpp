#include "pipescope/gui/timeline_search.hpp"

#include <algorithm>
#include <cctype>
#include <string_view>

namespace pipescope::gui {
namespace {

void lower_case_into(std::string_view text, std::string& out) {
  out.resize(text.size());
  std::transform(text.begin(), text.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
}

std::string lower_case_copy(std::string_view text) {
  std::string out;
  lower_case_into(text, out);
  return out;
}

std::vector<std::string> query_words(const std::string& text) {
  std::vector<std::string> words;
  std::string word;
  for (const char c : lower_case_copy(text) + " ") {
    if (std::isspace(static_cast<unsigned char>(c)) || c == '=' || c == ':') {
      if (!word.empty()) words.push_back(word);
      word.clear();
    } else {
      word += c;
    }
  }
  return words;
}

// The word's value when it is all digits, else -1.
int query_number(const std::string& word) {
  if (word.empty() || !std::all_of(word.begin(), word.end(), [](unsigned char c) { return std::isdigit(c); }))
    return -1;
  return std::stoi(word);
}

}  // namespace

bool SearchQuery::matches_fields(const traces::TraceEvent& event) const {
  return (stage < 0 || event.stage == stage) && (micro_batch < 0 || event.micro_batch == micro_batch) &&
         (rank < 0 || event.rank == rank);
}

bool SearchQuery::matches_name(std::string_view lower_case_name) const {
  return std::all_of(name_parts.begin(), name_parts.end(), [lower_case_name](const std::string& part) {
    return lower_case_name.find(part) != std::string_view::npos;
  });
}

bool SearchQuery::matches(const traces::TraceEvent& event) const {
  return matches_fields(event) && matches_name(lower_case_copy(event.name));
}

SearchQuery parse_search_query(const std::string& text) {
  SearchQuery q;
  const std::vector<std::string> words = query_words(text);
  for (std::size_t i = 0; i < words.size(); ++i) {
    const std::string& w = words[i];
    const bool has_number = i + 1 < words.size() && query_number(words[i + 1]) >= 0;
    if (has_number && w == "stage")
      q.stage = query_number(words[++i]);
    else if (has_number && (w == "mb" || w == "micro_batch" || w == "micro-batch"))
      q.micro_batch = query_number(words[++i]);
    else if (has_number && w == "rank")
      q.rank = query_number(words[++i]);
    else
      q.name_parts.push_back(w);
  }
  q.valid = !words.empty();
  return q;
}

std::vector<SearchHit> search_events(std::span<const traces::Trace* const> series, const std::string& text) {
  std::vector<SearchHit> hits;
  const SearchQuery q = parse_search_query(text);
  if (!q.valid) return hits;
  std::string name;  // one buffer for every event's lower-case name
  for (std::size_t s = 0; s < series.size(); ++s) {
    const auto& events = series[s]->events;
    for (std::size_t i = 0; i < events.size(); ++i) {
      if (!q.matches_fields(events[i])) continue;
      lower_case_into(events[i].name, name);
      if (q.matches_name(name)) hits.push_back({static_cast<int>(s), i});
    }
  }
  std::stable_sort(hits.begin(), hits.end(), [&series](const SearchHit& a, const SearchHit& b) {
    return series[static_cast<std::size_t>(a.series)]->events[a.event].ts_us <
           series[static_cast<std::size_t>(b.series)]->events[b.event].ts_us;
  });
  return hits;
}

}  // namespace pipescope::gui
