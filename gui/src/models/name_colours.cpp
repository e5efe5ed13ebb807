#include "pipescope/gui/name_colours.hpp"

#include <cmath>

namespace pipescope::gui {
namespace {

std::uint32_t fnv1a(std::string_view text) {
  std::uint32_t hash = 2166136261u;
  for (const char c : text) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 16777619u;
  }
  return hash;
}

// HSL (hue in degrees, saturation and lightness in [0, 1]) to 0xRRGGBB.
std::uint32_t hsl_rgb(double hue, double saturation, double lightness) {
  const double chroma = (1 - std::fabs(2 * lightness - 1)) * saturation;
  const double h = hue / 60;
  const double x = chroma * (1 - std::fabs(std::fmod(h, 2.0) - 1));
  double r = 0, g = 0, b = 0;
  if (h < 1) { r = chroma; g = x; }
  else if (h < 2) { r = x; g = chroma; }
  else if (h < 3) { g = chroma; b = x; }
  else if (h < 4) { g = x; b = chroma; }
  else if (h < 5) { r = x; b = chroma; }
  else { r = chroma; b = x; }
  const double m = lightness - chroma / 2;
  auto byte = [&](double v) { return static_cast<std::uint32_t>(std::lround(std::fmin(1.0, std::fmax(0.0, v + m)) * 255)); };
  return byte(r) << 16 | byte(g) << 8 | byte(b);
}

}  // namespace

std::uint32_t name_rgb(std::string_view name) {
  const std::uint32_t hash = fnv1a(name);
  // Hue from the low bits, a little spread of saturation and lightness from the high ones, so
  // names with neighbouring hues still differ.
  const double hue = static_cast<double>(hash % 360);
  const double saturation = 0.45 + static_cast<double>((hash >> 16) % 4) * 0.07;
  const double lightness = 0.58 + static_cast<double>((hash >> 24) % 3) * 0.06;
  return hsl_rgb(hue, saturation, lightness);
}

}  // namespace pipescope::gui
