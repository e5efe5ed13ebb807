// The known name a slip meant (core/nearest_name.hpp). Scenarios and expected: "kv_head" ->
// "kv_heads" (a deletion), "ffn_hiden" -> "ffn_hidden", "hiddne" -> "hidden" (a swap), "LAYERS" ->
// "layers" (case); "num_experts" and "xyz" are near nothing (more than 2 edits, or half the name).
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "pipescope/core/nearest_name.hpp"

using namespace pipescope;

TEST_CASE("a slip gets the name it meant; a different name gets none", "[nearest_name]") {
  const std::vector<std::string> fields = {"name", "layers", "hidden", "heads", "seq", "vocab", "kv_heads", "ffn_hidden"};
  CHECK(nearest_name("kv_head", fields) == std::optional<std::string>("kv_heads"));
  CHECK(nearest_name("ffn_hiden", fields) == std::optional<std::string>("ffn_hidden"));
  CHECK(nearest_name("hiddne", fields) == std::optional<std::string>("hidden"));
  CHECK(nearest_name("LAYERS", fields) == std::optional<std::string>("layers"));
  CHECK_FALSE(nearest_name("num_experts", fields));
  CHECK_FALSE(nearest_name("xyz", fields));
  CHECK_FALSE(nearest_name(std::string(300, 'a'), fields));
}
