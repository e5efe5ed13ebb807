#include "pipescope/gui/all_to_all_detail.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <nlohmann/json.hpp>

#include "pipescope/gui/memory_scale.hpp"
#include "pipescope/traces/event_kind.hpp"

namespace pipescope::gui {
namespace {

// The fields of an all-to-all event's args that the detail shows; others are kept as written.
void read_all_to_all_args(const std::string& text, AllToAllDetail& out) {
  const nlohmann::json args = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!args.is_object()) return;
  if (const auto it = args.find("peers"); it != args.end() && it->is_array()) {
    for (const auto& peer : *it)
      if (peer.is_number_integer()) out.peers.push_back(peer.get<int>());
    out.group_size = static_cast<int>(out.peers.size());
  }
  if (const auto it = args.find("group_size"); it != args.end() && it->is_number_integer() && out.peers.empty())
    out.group_size = it->get<int>();
  if (const auto it = args.find("bytes_received"); it != args.end() && it->is_number_integer())
    out.bytes_received = it->get<std::int64_t>();
  if (const auto it = args.find("layer"); it != args.end() && it->is_string()) out.layer = it->get<std::string>();
}

}  // namespace

std::optional<AllToAllDetail> all_to_all_detail(const traces::Trace& trace, std::size_t event) {
  if (event >= trace.events.size() || !traces::is_all_to_all(trace.events[event].kind)) return std::nullopt;
  AllToAllDetail out;
  out.bytes_sent = trace.events[event].bytes;
  if (const std::string* args = trace.args_of(event)) read_all_to_all_args(*args, out);
  return out;
}

std::string all_to_all_text(const AllToAllDetail& detail) {
  std::string text = "all-to-all";
  if (!detail.peers.empty()) {
    text += " with ranks " + fmt::format("{}", fmt::join(detail.peers, ", "));
    text += fmt::format(" (group of {})", detail.group_size);
  } else if (detail.group_size > 0) {
    text += fmt::format(" in an expert-parallel group of {}", detail.group_size);
  }
  if (detail.bytes_sent >= 0) text += ", sent " + format_bytes(static_cast<double>(detail.bytes_sent));
  if (detail.bytes_received >= 0) text += ", received " + format_bytes(static_cast<double>(detail.bytes_received));
  if (!detail.layer.empty()) text += ", layer " + detail.layer;
  return text;
}

}  // namespace pipescope::gui
