// The trace reader (traces/src/trace_reader.cpp) and its two parsers on their own
// (trace_parsers.hpp): on every trace of traces/examples and of the trace fuzzer's seeds, the
// fast path (where the build has it) reads what the reference parser reads, to the same trace,
// and parse_trace gives that trace. An empty text is refused by both ("the file is empty").
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "pipescope/traces/trace_difference.hpp"
#include "pipescope/traces/trace_io.hpp"
#include "pipescope/traces/trace_parsers.hpp"

using namespace pipescope::traces;
namespace fs = std::filesystem;

namespace {

std::string whole_file_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

TEST_CASE("trace reader: both parsers give the example traces one meaning", "[reader]") {
  const fs::path root(PIPESCOPE_SOURCE_DIR);
  int compared = 0, read_fast = 0;
  for (const fs::path& folder : {root / "traces/examples", root / "tests/fuzz/corpus/trace"}) {
    for (const auto& entry : fs::directory_iterator(folder)) {
      if (entry.path().extension() != ".json") continue;
      const std::string text = whole_file_text(entry.path());
      const std::string source = entry.path().filename().string();
      INFO(source);
      std::optional<Trace> reference;
      try {
        reference = parse_trace_reference(text, source);
      } catch (const TraceError&) {
        // A seed the reader refuses: the fast path must not read it either.
        std::optional<Trace> fast;
        try {
          fast = parse_trace_fast(text, source);
        } catch (const TraceError&) {
        }
        REQUIRE_FALSE(fast);
        continue;
      }
      const std::optional<Trace> fast = parse_trace_fast(text, source);
      if (fast) {
        ++read_fast;
        const auto difference = trace_difference(*fast, *reference);
        INFO(difference.value_or("none"));
        REQUIRE_FALSE(difference);
      }
      REQUIRE_FALSE(trace_difference(parse_trace(text, source), *reference));
      ++compared;
    }
  }
  REQUIRE(compared >= 10);
  if (have_fast_trace_parser()) REQUIRE(read_fast >= 8);
}

TEST_CASE("trace reader: an empty text is refused by both parsers", "[reader]") {
  REQUIRE_THROWS_WITH(parse_trace_reference(" \n", "empty.json"), "empty.json: the file is empty");
  REQUIRE_THROWS_WITH(parse_trace_fast("", "empty.json"), "empty.json: the file is empty");
  REQUIRE_THROWS_WITH(parse_trace("", "empty.json"), "empty.json: the file is empty");
}
