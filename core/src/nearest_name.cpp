#include "pipescope/core/nearest_name.hpp"

#include <algorithm>
#include <cctype>

namespace pipescope {
namespace {

// Optimal string alignment distance, case-insensitive: a swap of two neighbours is one edit.
std::size_t edit_distance(std::string_view a, std::string_view b) {
  auto same = [](char x, char y) {
    return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
  };
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i)
    for (std::size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (same(a[i - 1], b[j - 1]) ? 0 : 1)});
      if (i > 1 && j > 1 && same(a[i - 1], b[j - 2]) && same(a[i - 2], b[j - 1])) d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

}  // namespace

std::optional<std::string> nearest_name(std::string_view name, const std::vector<std::string>& known) {
  if (name.size() > 200) return std::nullopt;  // no slip makes a name that long
  std::optional<std::string> best;
  std::size_t best_distance = 3;
  for (const auto& k : known) {
    const std::size_t distance = edit_distance(name, k);
    if (distance < best_distance && 2 * distance < std::max(name.size(), k.size())) {
      best_distance = distance;
      best = k;
    }
  }
  return best;
}

}  // namespace pipescope
