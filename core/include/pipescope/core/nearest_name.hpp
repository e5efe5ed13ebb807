// The known name a misspelt one most likely meant ("kv_head" -> "kv_heads", "ffn_hiden" ->
// "ffn_hidden"), for refusals that say what to write instead.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pipescope {

// The name of `known` closest to `name` in edits (insertions, deletions, substitutions, swaps of
// neighbours), when it is close enough to be a slip: at most 2 edits, and fewer than half the
// name's length. Nothing otherwise.
std::optional<std::string> nearest_name(std::string_view name, const std::vector<std::string>& known);

}  // namespace pipescope
