#include "pipescope/core/json_limits.hpp"

#include <cstdint>
#include <set>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

namespace pipescope {

std::string json_depth_refusal() {
  return fmt::format("arrays and objects nested deeper than {} levels (the limit of pipescope's readers)", kMaxJsonDepth);
}

std::optional<std::string> json_depth_problem(std::string_view text) {
  int depth = 0;
  bool in_string = false;
  std::size_t line = 1, line_start = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;  // the escaped character cannot end the string
      else if (c == '"') in_string = false;
      continue;
    }
    switch (c) {
      case '"': in_string = true; break;
      case '\n': ++line, line_start = i + 1; break;
      case '[':
      case '{':
        if (++depth > kMaxJsonDepth) return fmt::format("line {}, column {}: {}", line, i - line_start + 1, json_depth_refusal());
        break;
      case ']':
      case '}': --depth; break;
      default: break;
    }
  }
  return std::nullopt;
}

namespace {

// Collects the keys of every open object; stops at the first one seen twice.
class DuplicateKeyFinder : public nlohmann::json::json_sax_t {
 public:
  std::optional<std::string> duplicate;

  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override {
    keys_.emplace_back();
    return keys_.size() <= static_cast<std::size_t>(kMaxJsonDepth);
  }
  bool end_object() override {
    keys_.pop_back();
    return true;
  }
  bool start_array(std::size_t) override {
    keys_.emplace_back();  // a level without keys, so that depth stays bounded as above
    return keys_.size() <= static_cast<std::size_t>(kMaxJsonDepth);
  }
  bool end_array() override {
    keys_.pop_back();
    return true;
  }
  bool key(string_t& key) override {
    if (keys_.back().insert(key).second) return true;
    duplicate = key;
    return false;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }

 private:
  std::vector<std::set<std::string>> keys_;
};

}  // namespace

std::optional<std::string> json_duplicate_key_problem(std::string_view text) {
  DuplicateKeyFinder finder;
  nlohmann::json::sax_parse(text.begin(), text.end(), &finder, nlohmann::json::input_format_t::json, false);
  if (!finder.duplicate) return std::nullopt;
  return fmt::format("key '{}' appears twice in one object", *finder.duplicate);
}

std::optional<std::int64_t> json_integer_in(const nlohmann::json& value, std::int64_t lo, std::int64_t hi) {
  std::int64_t v = 0;
  if (value.is_number_unsigned()) {
    const auto u = value.get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(INT64_MAX)) return std::nullopt;
    v = static_cast<std::int64_t>(u);
  } else if (value.is_number_integer()) {
    v = value.get<std::int64_t>();
  } else {
    return std::nullopt;
  }
  if (v < lo || v > hi) return std::nullopt;
  return v;
}

std::int64_t integer_field(const nlohmann::json& object, const char* key, std::int64_t lo, std::int64_t hi) {
  const auto it = object.is_object() ? object.find(key) : object.end();
  if (it == object.end()) throw std::out_of_range(fmt::format("'{}' is missing", key));
  if (auto v = json_integer_in(*it, lo, hi)) return *v;
  throw std::out_of_range(fmt::format("'{}' must be an integer from {} to {}, not {}", key, lo, hi, it->dump()));
}

}  // namespace pipescope
