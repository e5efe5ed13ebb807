// The bound every JSON reader puts on nesting. Readers build documents (or walk them) with
// recursive code, whose stack a hostile file could exhaust with a few hundred thousand brackets;
// no file pipescope or torch writes nests more than a dozen levels.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace pipescope {

// Arrays and objects nested deeper than this are refused, by every reader, naming the limit.
inline constexpr int kMaxJsonDepth = 1000;

// "line L, column C: arrays and objects nested deeper than 1000 levels (the limit of pipescope's
// readers)" for the first bracket of `text` (outside strings) that opens level kMaxJsonDepth + 1,
// or nothing. A linear scan that does not parse: invalid JSON is left to the parser.
std::optional<std::string> json_depth_problem(std::string_view text);

// The same words for a reader that counts the depth itself: "arrays and objects nested deeper
// than 1000 levels (the limit of pipescope's readers)".
std::string json_depth_refusal();

// "key 'hidden' appears twice in one object" for the first key of `text` repeated within one
// object (a JSON parser keeps the last silently: {"hidden": 4096, "hidden": 2048} would plan a
// model of 2048), or nothing; invalid JSON is left to the parser. For small files (models,
// profiles): one more pass over the text.
std::optional<std::string> json_duplicate_key_problem(std::string_view text);

// The integer a JSON value holds, when it is one (not 2.0) within [lo, hi]; nothing otherwise.
// nlohmann's get<int>() would wrap 2^32 + 4096 to 4096.
std::optional<std::int64_t> json_integer_in(const nlohmann::json& value, std::int64_t lo, std::int64_t hi);

// object[key] as an integer within [lo, hi]; throws std::out_of_range naming the key ("'step'
// must be an integer from 0 to 2147483647, not 3567587328") when it is missing, of another type,
// fractional or outside.
std::int64_t integer_field(const nlohmann::json& object, const char* key, std::int64_t lo, std::int64_t hi);

}  // namespace pipescope
