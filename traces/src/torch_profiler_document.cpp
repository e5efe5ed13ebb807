// The slim document of a torch.profiler trace (torch_profiler_document.hpp): a SAX handler that
// builds nlohmann values as json::parse does, leaving out what the reader never reads. (A parse
// callback cannot do it: nlohmann then scans the parent of every object it closes for discarded
// values, which makes an array of millions of events quadratic.)
#include "torch_profiler_document.hpp"

#include <cstdint>
#include <iterator>
#include <string>
#include <vector>

#include "torch_profiler_actions.hpp"

namespace pipescope::traces::detail {
namespace {

using json = nlohmann::json;

bool is_read_event_field(std::string_view key) {
  return key == "ph" || key == "name" || key == "cat" || key == "pid" || key == "tid" || key == "ts" || key == "dur" ||
         key == "args";
}

bool is_read_torch_arg(std::string_view key) {
  return key == "correlation" || key == "Input Dims" || key == "Input type" || key == "Device Type" ||
         key == "Total Allocated";
}

// An event that is neither complete nor a `[memory]` sample: check_events looks at its ph, pid,
// tid and name only, and the reader not at all.
void slim_unread_event(json& e) {
  if (!e.is_object()) return;
  const auto ph = e.find("ph");
  if (ph == e.end() || !ph->is_string() || ph->get_ref<const std::string&>() == "X") return;
  const auto name = e.find("name");
  if (name != e.end() && name->is_string() && name->get_ref<const std::string&>() == kMemorySampleName) return;
  for (const char* unread : {"ts", "dur", "cat", "args"}) e.erase(unread);
}

// The text's characters one by one (what nlohmann's parser reads), leaving where the parser is
// in `*cursor` for the progress reports.
class TextCursor {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;
  TextCursor(const char* at, const char** cursor) : at_(at), cursor_(cursor) {}
  reference operator*() const { return *at_; }
  TextCursor& operator++() {
    *cursor_ = ++at_;
    return *this;
  }
  bool operator==(const TextCursor& o) const { return at_ == o.at_; }
  bool operator!=(const TextCursor& o) const { return at_ != o.at_; }

 private:
  const char* at_;
  const char** cursor_;
};

// The SAX handler: values go where json::parse would put them, except in a skipped key's value
// or container (a null on the stack), which is parsed and dropped.
class SlimDocumentBuilder {
 public:
  SlimDocumentBuilder(FileProgress& progress, const char* text, const char* const* cursor)
      : progress_(progress), text_(text), cursor_(cursor) {}

  json take() { return std::move(root_); }

  bool null() { return add(json(nullptr)); }
  bool boolean(bool value) { return add(json(value)); }
  bool number_integer(json::number_integer_t value) { return add(json(value)); }
  bool number_unsigned(json::number_unsigned_t value) { return add(json(value)); }
  bool number_float(json::number_float_t value, const json::string_t& /*text*/) { return add(json(value)); }
  bool string(json::string_t& value) { return add(json(std::move(value))); }
  bool binary(json::binary_t& value) { return add(json(std::move(value))); }
  bool start_object(std::size_t /*size*/) {
    if (stack_.size() == 2 && in_events_) event_key_.clear();
    stack_.push_back(place(json::object()));
    return true;
  }
  bool end_object() {
    if (stack_.size() == 3 && in_events_) {
      if (stack_.back()) slim_unread_event(*stack_.back());
      if (++events_ % kEventsPerReport == 0) progress_.at(static_cast<std::uint64_t>(*cursor_ - text_));
    }
    stack_.pop_back();
    return true;
  }
  bool start_array(std::size_t /*size*/) {
    stack_.push_back(place(json::array()));
    return true;
  }
  bool end_array() {
    stack_.pop_back();
    return true;
  }
  bool key(json::string_t& key) {
    json* object = stack_.back();
    if (!object) return true;
    const std::size_t depth = stack_.size();
    bool keep = true;
    if (depth == 1) in_events_ = key == "traceEvents";
    if (depth == 3 && in_events_) event_key_ = key, keep = is_read_event_field(key);
    if (depth == 4 && in_events_ && event_key_ == "args") keep = is_read_torch_arg(key);
    slot_ = keep ? &(*object)[key] : nullptr;
    return true;
  }
  template <class Exception>
  bool parse_error(std::size_t /*position*/, const std::string& /*last_token*/, const Exception& error) {
    throw error;  // as json::parse throws it
  }

 private:
  static constexpr std::size_t kEventsPerReport = 1 << 12;

  // Where a value goes: the root, the end of an array, an object's key's slot; null when it is
  // dropped (a skipped key, or inside a dropped container).
  json* place(json&& value) {
    if (stack_.empty()) {
      root_ = std::move(value);
      return &root_;
    }
    json* parent = stack_.back();
    if (!parent) return nullptr;
    if (parent->is_array()) {
      parent->push_back(std::move(value));
      return &parent->back();
    }
    json* slot = slot_;
    slot_ = nullptr;
    if (slot) *slot = std::move(value);
    return slot;
  }
  bool add(json&& value) {
    place(std::move(value));
    return true;
  }

  FileProgress& progress_;
  const char* text_;
  const char* const* cursor_;
  json root_;
  std::vector<json*> stack_;  // the open containers; null for a dropped one
  json* slot_ = nullptr;      // the value of the key just read, in the open object
  std::size_t events_ = 0;
  bool in_events_ = false;  // inside the top-level traceEvents
  std::string event_key_;   // the key of the current event's field being read
};

}  // namespace

json parse_torch_document(std::string_view text, FileProgress& progress) {
  const char* cursor = text.data();
  SlimDocumentBuilder builder(progress, text.data(), &cursor);
  json::sax_parse(TextCursor(text.data(), &cursor), TextCursor(text.data() + text.size(), &cursor), &builder);
  return builder.take();
}

}  // namespace pipescope::traces::detail
