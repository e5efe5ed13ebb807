// Names from files made safe for a terminal (core/terminal_text.hpp). Scenarios and expected:
// - ASCII and UTF-8 text (é, 中) come back unchanged;
// - ESC, BEL, NUL, DEL print as \x1b, \x07, \x00, \x7f; a newline and a tab as \n and \t;
// - C1 controls (U+009B) and bidirectional overrides (U+202E, U+2066) as \u009b, \u202e, \u2066;
//   bytes that are not UTF-8 (a stray 0xff, a truncated sequence) as \xff, \xe2;
// - printable_lines keeps the line breaks of a report and escapes within each line;
// - printable_json keeps JSON valid: DEL and U+202E become \u007f and \u202e, the rest unchanged.
#include <catch2/catch.hpp>

#include <string>

#include "pipescope/core/terminal_text.hpp"

using namespace pipescope;

TEST_CASE("printable text comes back unchanged", "[terminal_text]") {
  CHECK(printable("F0 rank 3: aten::mm") == "F0 rank 3: aten::mm");
  CHECK(printable("caf\xC3\xA9 \xE4\xB8\xAD") == "caf\xC3\xA9 \xE4\xB8\xAD");
}

TEST_CASE("control characters are escaped", "[terminal_text]") {
  CHECK(printable(std::string("F\x1b[2J\x07\0\x7f", 8)) == "F\\x1b[2J\\x07\\x00\\x7f");
  CHECK(printable("a\nb\tc\r") == "a\\nb\\tc\\r");
  CHECK(printable("\xC2\x9B" "31m") == "\\u009b31m");
  CHECK(printable("abc\xE2\x80\xAE" "fdp.exe") == "abc\\u202efdp.exe");
  CHECK(printable("\xE2\x81\xA6x") == "\\u2066x");
  CHECK(printable("\xff") == "\\xff");
  CHECK(printable("\xE2\x80") == "\\xe2\\x80");
}

TEST_CASE("a report keeps its lines; JSON stays JSON", "[terminal_text]") {
  CHECK(printable_lines("one\x1b\ntwo\n") == "one\\x1b\ntwo\n");
  CHECK(printable_json("{\"name\": \"a\x7f\xE2\x80\xAE" "b\\u001b\"}") == "{\"name\": \"a\\u007f\\u202eb\\u001b\"}");
  CHECK(printable_json("{\"name\": \"caf\xC3\xA9\"}") == "{\"name\": \"caf\xC3\xA9\"}");
}
