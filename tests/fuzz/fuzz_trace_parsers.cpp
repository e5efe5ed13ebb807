// Holds the two trace parsers to one meaning: each input goes to the fast path (simdjson) and
// to the reference parser (nlohmann's SAX) on their own (traces/trace_parsers.hpp). The fast
// path may give way (it reads only what it is sure of), but where it reads the text the
// reference parser must read it too, to the same trace, or refuse it with the same message.
// Anything else (one accepts what the other refuses, or the traces differ) stops the fuzzer.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>

#include "pipescope/traces/trace_difference.hpp"
#include "pipescope/traces/trace_parsers.hpp"

namespace {

using pipescope::traces::Trace;
using pipescope::traces::TraceError;

// A parser's answer: its trace, or the message it refused the text with.
struct Outcome {
  std::optional<Trace> trace;
  std::string refusal;
};

[[noreturn]] void disagree(const std::string& what) {
  std::fprintf(stderr, "fuzz_trace_parsers: the parsers disagree: %s\n", what.c_str());
  __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace pipescope::traces;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  Outcome fast;
  try {
    fast.trace = parse_trace_fast(text, "fuzz.json");
    if (!fast.trace) return 0;  // the fast path gave way: the reference parser's answer is the only one
  } catch (const TraceError& e) {
    fast.refusal = e.what();
  }
  Outcome reference;
  try {
    reference.trace = parse_trace_reference(text, "fuzz.json");
  } catch (const TraceError& e) {
    reference.refusal = e.what();
  }
  if (fast.trace && !reference.trace) disagree("the fast path reads it, the reference parser refuses: " + reference.refusal);
  if (!fast.trace && reference.trace) disagree("the fast path refuses, the reference parser reads it: " + fast.refusal);
  if (!fast.trace) {
    if (fast.refusal != reference.refusal) disagree("refusals differ: '" + fast.refusal + "' vs '" + reference.refusal + "'");
    return 0;
  }
  if (auto difference = trace_difference(*fast.trace, *reference.trace)) disagree("fast vs reference: " + *difference);
  return 0;
}
