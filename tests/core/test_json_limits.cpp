// The bounds every JSON reader holds (core/json_limits.hpp). Scenarios and expected:
// - 1000 nested arrays pass; 1001 are refused at line 1, column 1001; brackets inside strings
//   (escaped quotes included) do not count; the refusal names the line of a later line;
// - a key twice in one object is named ("key 'hidden' appears twice in one object"); the same key
//   in two sibling objects is not a duplicate;
// - json_integer_in keeps 2^32 + 4096 as it is (no 32-bit wrap) and refuses 2.0, 2^64 - 1 and
//   values outside the range; integer_field names the key, its range and the value.
#include <catch2/catch.hpp>

#include <climits>
#include <stdexcept>
#include <string>

#include "pipescope/core/json_limits.hpp"

using namespace pipescope;

TEST_CASE("JSON nested deeper than the limit is refused where it passes the limit", "[json_limits]") {
  CHECK_FALSE(json_depth_problem(std::string(1000, '[') + std::string(1000, ']')));
  const auto deep = json_depth_problem(std::string(1001, '[') + std::string(1001, ']'));
  REQUIRE(deep);
  CHECK(*deep == "line 1, column 1001: arrays and objects nested deeper than 1000 levels (the limit of pipescope's readers)");
  CHECK_FALSE(json_depth_problem("[\"" + std::string(5000, '[') + "\\\"" + std::string(5000, '{') + "\"]"));
  const auto later_line = json_depth_problem("{\"a\":\n" + std::string(1000, '['));
  REQUIRE(later_line);
  CHECK(later_line->rfind("line 2, column 1000:", 0) == 0);
}

TEST_CASE("a key given twice in one object is named", "[json_limits]") {
  CHECK(json_duplicate_key_problem(R"({"hidden": 4096, "layers": 2, "hidden": 2048})") ==
        std::optional<std::string>("key 'hidden' appears twice in one object"));
  CHECK_FALSE(json_duplicate_key_problem(R"({"a": {"x": 1}, "b": {"x": 2}, "c": [{"x": 3}, {"x": 4}]})"));
  CHECK_FALSE(json_duplicate_key_problem("not json"));  // left to the parser
}

TEST_CASE("integers are read as written, within their range", "[json_limits]") {
  CHECK(json_integer_in(nlohmann::json(4294971392LL), 0, INT64_MAX) == 4294971392LL);
  CHECK_FALSE(json_integer_in(nlohmann::json(4294971392LL), 0, INT_MAX));
  CHECK_FALSE(json_integer_in(nlohmann::json(2.0), 0, 10));
  CHECK_FALSE(json_integer_in(nlohmann::json(UINT64_MAX), 0, INT64_MAX));
  CHECK_FALSE(json_integer_in(nlohmann::json("3"), 0, 10));
  CHECK(json_integer_in(nlohmann::json(-3), -5, 5) == -3);
  const nlohmann::json manifest = {{"step", 3567587328LL}};
  CHECK_THROWS_WITH(integer_field(manifest, "step", 0, INT_MAX), "'step' must be an integer from 0 to 2147483647, not 3567587328");
  CHECK_THROWS_WITH(integer_field(manifest, "world_size", 1, INT_MAX), "'world_size' is missing");
  CHECK(integer_field(nlohmann::json{{"step", 7}}, "step", 0, INT_MAX) == 7);
}
