#include "pipescope/core/terminal_text.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace pipescope {
namespace {

// The length of the UTF-8 sequence starting at text[i] and its code point, or 0 when the bytes
// there are not one (a stray continuation byte, a truncated or overlong sequence, a surrogate).
std::size_t utf8_sequence(std::string_view text, std::size_t i, char32_t& code_point) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(i);
  std::size_t length = 0;
  char32_t minimum = 0;
  if (lead >= 0xC2 && lead <= 0xDF) length = 2, code_point = lead & 0x1F, minimum = 0x80;
  else if (lead >= 0xE0 && lead <= 0xEF) length = 3, code_point = lead & 0x0F, minimum = 0x800;
  else if (lead >= 0xF0 && lead <= 0xF4) length = 4, code_point = lead & 0x07, minimum = 0x10000;
  else return 0;
  if (i + length > text.size()) return 0;
  for (std::size_t k = 1; k < length; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    code_point = (code_point << 6) | (byte(i + k) & 0x3F);
  }
  if (code_point < minimum || code_point > 0x10FFFF || (code_point >= 0xD800 && code_point <= 0xDFFF)) return 0;
  return length;
}

bool is_hidden_control(char32_t c) {
  return (c >= 0x80 && c <= 0x9F) || c == 0x061C || c == 0x200E || c == 0x200F || (c >= 0x202A && c <= 0x202E) ||
         (c >= 0x2066 && c <= 0x2069);
}

}  // namespace

std::string printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7F) {
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    if (c == '\n') out += "\\n", ++i;
    else if (c == '\r') out += "\\r", ++i;
    else if (c == '\t') out += "\\t", ++i;
    else if (c < 0x80) out += fmt::format("\\x{:02x}", c), ++i;
    else {
      char32_t code_point = 0;
      const std::size_t length = utf8_sequence(text, i, code_point);
      if (length == 0) {
        out += fmt::format("\\x{:02x}", c);
        ++i;
      } else if (is_hidden_control(code_point)) {
        out += fmt::format("\\u{:04x}", static_cast<std::uint32_t>(code_point));
        i += length;
      } else {
        out.append(text.substr(i, length));
        i += length;
      }
    }
  }
  return out;
}

std::string printable_lines(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t start = 0; start <= text.size();) {
    const std::size_t end = std::min(text.find('\n', start), text.size());
    out += printable(text.substr(start, end - start));
    if (end == text.size()) break;
    out += '\n';
    start = end + 1;
  }
  return out;
}

std::string printable_json(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c == 0x7F) {
      out += "\\u007f";
      ++i;
      continue;
    }
    char32_t code_point = 0;
    const std::size_t length = c >= 0x80 ? utf8_sequence(text, i, code_point) : 0;
    if (length > 0 && is_hidden_control(code_point)) {
      out += fmt::format("\\u{:04x}", static_cast<std::uint32_t>(code_point));
      i += length;
    } else {
      const std::size_t n = length > 0 ? length : 1;
      out.append(text.substr(i, n));
      i += n;
    }
  }
  return out;
}

}  // namespace pipescope
