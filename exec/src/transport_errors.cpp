#include "transport_errors.hpp"

#include <c10/util/Logging.h>

#include <cstdlib>

#include <array>
#include <utility>

namespace pipescope::exec {
namespace {

std::string_view trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t' || text.back() == '\r')) text.remove_suffix(1);
  return text;
}

bool contains(std::string_view text, std::string_view part) { return text.find(part) != std::string_view::npos; }

// The library's reason: the first line, without a leading "[path/file.cc:N]" and without the
// advice c10d appends ("This is typically caused by ...").
std::string_view library_reason(std::string_view message) {
  message = message.substr(0, message.find('\n'));
  message = trim(message);
  if (message.starts_with('[')) {
    const std::size_t close = message.find(']');
    if (close != std::string_view::npos && contains(message.substr(0, close), ":")) message = trim(message.substr(close + 1));
  }
  for (std::string_view advice : {std::string_view(" This is typically caused"), std::string_view(" Check the logs")}) {
    const std::size_t at = message.find(advice);
    if (at != std::string_view::npos) message = message.substr(0, at);
  }
  message = trim(message);
  while (!message.empty() && message.back() == '.') message.remove_suffix(1);
  return message;
}

}  // namespace

std::string plain_transport_message(std::string_view message) {
  const std::string_view reason = library_reason(message);
  // What happened, by the words the socket layer and c10d use for it.
  static constexpr std::array<std::pair<std::string_view, std::string_view>, 7> kinds{{
      {"Connection reset by peer", "the connection was lost: the peer stopped or closed it"},
      {"Connection closed by peer", "the connection was lost: the peer stopped or closed it"},
      {"Broken pipe", "the connection was lost: the peer stopped or closed it"},
      {"Connection refused", "the connection was refused: nothing listens at the peer's address"},
      {"Timed out", "timed out waiting for the peer"},
      {"timed out", "timed out waiting for the peer"},
      {"Timeout", "timed out waiting for the peer"},
  }};
  for (const auto& [words, what] : kinds)
    if (contains(reason, words)) return std::string(what) + " (" + std::string(reason) + ")";
  return std::string(reason.empty() ? trim(message.substr(0, message.find('\n'))) : reason);
}

void keep_library_logs_quiet() {
  if (std::getenv("TORCH_CPP_LOG_LEVEL")) return;
  ::FLAGS_caffe2_log_level = 3;  // c10's FATAL: c10d's warnings and errors (its isLogLevelEnabled) are off
}

}  // namespace pipescope::exec
