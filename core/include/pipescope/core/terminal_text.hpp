// Text read from a file (an event name, an action, a path in a manifest) made safe to show on a
// terminal: a trace can hold escape sequences that move the cursor or retitle the window, a NUL,
// or right-to-left overrides that make a line read differently from what it says.
#pragma once

#include <string>
#include <string_view>

namespace pipescope {

// `text` with every control character escaped: C0 controls and DEL as \xNN (\n, \r and \t as
// themselves escaped: "\\n"), C1 controls and the Unicode bidirectional controls (U+061C, U+200E,
// U+200F, U+202A..U+202E, U+2066..U+2069) as \uNNNN, and bytes that are not UTF-8 as \xNN.
// Printable text, ASCII or UTF-8, comes back unchanged.
std::string printable(std::string_view text);

// The same for text of several lines (a report): each line made printable, the line breaks kept.
std::string printable_lines(std::string_view text);

// JSON text (nlohmann's dump, which escapes C0 controls itself) with DEL, the C1 controls and the
// bidirectional controls escaped as \u007f, \u0080 ... \u202e: the same JSON value, safe on a
// terminal. Other text, ASCII or UTF-8, comes back unchanged.
std::string printable_json(std::string_view json_text);

}  // namespace pipescope
