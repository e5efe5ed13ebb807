// The torch reader's fast path (traces/src/torch_profiler_stream.cpp): where it reads a file,
// it fills the event store as the reference parser's document does (the same spans, names,
// ids, shapes, memory samples and header), for torch's own golden traces (gzip, 2 runs of 2
// ranks), the fuzz corpus's torch files and a file of every kind of event; it gives way (false) for what the reference parser must judge: an event
// that is not an object, invalid JSON in a field nobody reads, a repeated key, an escaped
// top-level key, an X event whose ts is a string, text after the top-level object, traceEvents
// missing. A text that comes by chunks (gzip) reads the same, cut anywhere. Without simdjson in
// the build it always gives way.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "file_progress.hpp"
#include "pipescope/core/json_limits.hpp"
#include "file_text.hpp"
#include "torch_profiler_document.hpp"
#include "torch_profiler_stream.hpp"

using namespace pipescope::traces;
using namespace pipescope::traces::detail;
namespace fs = std::filesystem;

namespace {

// The text with the padding the fast path reads past its end.
struct PaddedText {
  std::string bytes;
  explicit PaddedText(std::string text) : bytes(std::move(text)) { bytes.reserve(bytes.size() + kTextPadding); }
  std::string_view view() const { return bytes; }
};

bool fast_reads(const std::string& text, RankFile& f) {
  const PaddedText padded(text);
  FileProgress progress(nullptr, text.size());
  return read_torch_text_fast(padded.view(), f, progress, [](std::uint64_t) {});
}

bool fast_reads(const std::string& text) {
  RankFile f;
  return fast_reads(text, f);
}

RankFile reference_read(const std::string& text) {
  RankFile f;
  FileProgress progress(nullptr, text.size());
  const nlohmann::json doc = parse_torch_document(text, progress);
  read_torch_header(doc, f);
  f.events = torch_events_of_document(doc);
  return f;
}

// The store as text, one line per span and sample: what the two paths must agree on.
std::string listing(const RankFile& f) {
  std::ostringstream out;
  out << "rank " << f.rank << " of " << f.world_size << (f.has_distributed_info ? " named" : "") << " host " << f.host
      << "\n";
  for (const TorchSpan& s : f.events.spans)
    out << static_cast<int>(s.activity) << " " << f.events.name_of(s) << " pid " << s.pid << " tid "
        << f.events.tid_of(s) << " ts " << s.ts_us << " dur " << s.dur_us << " corr "
        << (s.has_correlation ? std::to_string(s.correlation) : "-") << " dims " << s.has_input_dims << " "
        << f.events.shapes_of(s) << "\n";
  for (const TorchMemorySample& m : f.events.memory)
    out << "memory " << m.ts_us << " " << m.bytes << (m.host ? " host" : " gpu") << "\n";
  return out.str();
}

const std::string kHeader = R"("schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": 1, "world_size": 2},
  "deviceProperties": [{"id": 0, "name": "H100", "totalGlobalMem": 85000000000}], "host_name": "node7", )";

std::string torch_text(const std::string& events) { return "{" + kHeader + "\"traceEvents\": [" + events + "]}"; }

const std::string kEveryKind = torch_text(R"json(
  {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "pid": 11, "tid": 11, "ts": 100, "dur": 900},
  {"ph": "X", "cat": "user_annotation", "name": "PP:0F1", "pid": 11, "tid": 11, "ts": 110.5, "dur": 50},
  {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 11, "tid": 11, "ts": 120, "dur": 5,
   "args": {"External id": 7, "Input Dims": [[2, 3], [3, 4]], "Input type": ["float", "c10::BFloat16"],
            "Input Strides": [[3, 1], [4, 1]], "Concrete Inputs": ["", "1.5e-3"]}},
  {"ph": "X", "cat": "cpu_op", "name": "nccl:send", "pid": 11, "tid": "11", "ts": 130, "dur": 5,
   "args": {"Input type": ["float"]}},
  {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 11, "tid": 11, "ts": 121, "dur": 2,
   "args": {"correlation": 42, "cbid": 211}},
  {"ph": "X", "cat": "kernel", "name": "void at::native::\"quoted\"\\kernel<float>()", "pid": 0, "tid": 7,
   "ts": 140, "dur": 3.25, "args": {
  "correlation" : 42, "grid" : [ 1, 2, 3 ], "stream" : 7, "occupancy" : 0.5}
},
  {"ph": "X", "cat": "kernel", "name": "void at::native::\"quoted\"\\kernel<float>()", "pid": 0, "tid": 7,
   "ts": 150, "dur": 3, "args": {"correlation": 2.5}},
  {"ph": "X", "cat": "gpu_user_annotation", "name": "skipped", "pid": 0, "tid": 7, "ts": 140, "dur": 3},
  {"ph": "X", "cat": "cpu_op", "name": "profiler track", "pid": "Spans", "tid": "x", "ts": 90, "dur": 1},
  {"ph": "X", "cat": 5, "name": "no category", "pid": 11, "ts": 95, "dur": 1},
  {"ph": "f", "id": 42, "pid": 0, "tid": 7, "ts": 140, "cat": "ac2g", "name": "ac2g", "bp": "e"},
  {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 11, "tid": 11, "ts": 125, "s": "t",
   "args": {"Total Allocated": 4096, "Device Type": 1, "Device Id": 0}},
  {"ph": "i", "name": "[memory]", "pid": 11, "ts": 126, "args": {"Total Allocated": 2048.0}},
  {"ph": "i", "name": "[memory]", "pid": 11, "ts": 127, "args": {"Bytes": 1}},
  {"ph": "M", "name": "process_name", "pid": 11, "args": {"name": "python"}}
)json");

}  // namespace

TEST_CASE("torch fast path: fills the store as the reference parser's document does", "[torch][stream]") {
  RankFile fast;
  if (!fast_reads(kEveryKind, fast))
    SUCCEED("no simdjson in this build: the reference parser reads every file");
  else {
    const std::string expected = listing(reference_read(kEveryKind));
    CHECK(listing(fast) == expected);
    // 5 spans of the process (the profiler's track, "skipped" and the string-category one are not kept),
    // 2 kernels, 2 samples (the third has no Total Allocated); names interned once.
    CHECK(fast.events.spans.size() == 7);
    CHECK(fast.events.memory.size() == 2);
    CHECK(fast.rank == 1);
    CHECK(fast.world_size == 2);
    CHECK(fast.host == "node7");
    CHECK(fast.first_us == 90);
    CHECK(fast.last_us == 150);
    CHECK(fast.events.strings.size() < fast.events.spans.size() + 4);
  }
}

namespace {

// A text handed over `piece` bytes at a time: values, strings and escapes cut anywhere.
class TextInPieces : public TextChunks {
 public:
  TextInPieces(std::string text, std::size_t piece) : text_(std::move(text)), piece_(piece) {}
  bool append_to(std::string& window) override {
    if (at_ == text_.size()) return false;
    const std::size_t n = std::min(piece_, text_.size() - at_);
    window.append(text_, at_, n);
    at_ += n;
    return true;
  }

 private:
  std::string text_;
  std::size_t piece_;
  std::size_t at_ = 0;
};

}  // namespace

TEST_CASE("torch fast path: a text that comes by chunks of any size reads as the whole text", "[torch][stream]") {
  RankFile whole;
  if (!fast_reads(kEveryKind, whole)) return;  // a build without simdjson: nothing to hold
  for (const std::size_t piece : {1, 2, 3, 7, 64, 1000}) {
    INFO("pieces of " << piece);
    TextInPieces chunks("\xEF\xBB\xBF" + kEveryKind, piece);  // with a byte order mark
    RankFile f;
    FileProgress progress(nullptr, kEveryKind.size());
    REQUIRE(read_torch_chunks_fast(chunks, f, progress));
    CHECK(listing(f) == listing(whole));
    CHECK(f.first_us == whole.first_us);
  }
  TextInPieces cut(kEveryKind.substr(0, kEveryKind.size() - 3), 5);  // ends inside the object
  RankFile f;
  FileProgress progress(nullptr, kEveryKind.size());
  CHECK_FALSE(read_torch_chunks_fast(cut, f, progress));
}

TEST_CASE("torch fast path: the fuzz corpus's torch files read as the reference parser reads them", "[torch][stream]") {
  const fs::path corpus = fs::path(PIPESCOPE_SOURCE_DIR) / "tests/fuzz/corpus/torch";
  int compared = 0;
  for (const auto& entry : fs::directory_iterator(corpus)) {
    std::ifstream in(entry.path());
    std::stringstream whole;
    whole << in.rdbuf();
    std::string text = whole.str();
    text = text.substr(0, text.find("\n--8<--\n"));  // the first rank's file of a two-rank input
    RankFile fast;
    if (!fast_reads(text, fast)) continue;
    INFO(entry.path().string());
    CHECK(listing(fast) == listing(reference_read(text)));
    ++compared;
  }
  if (fast_reads(kEveryKind)) CHECK(compared >= 5);
}

TEST_CASE("torch fast path: torch's own golden traces (gzip) read in one pass, as the reference parser reads them",
          "[torch][stream]") {
  if (!fast_reads(kEveryKind)) return;  // a build without simdjson: nothing to hold
  const fs::path golden = fs::path(PIPESCOPE_SOURCE_DIR) / "tests/golden/torch/traces";
  int compared = 0;
  for (const auto& run : fs::directory_iterator(golden)) {
    if (!run.is_directory()) continue;
    for (const auto& entry : fs::directory_iterator(run.path())) {
      if (entry.path().extension() != ".gz") continue;
      FileText file(entry.path().string(), "a torch.profiler trace file");
      INFO(entry.path().string());
      CHECK(file.gzipped());
      RankFile fast;
      FileProgress progress(nullptr, file.file_bytes());
      GzipChunks chunks(file.compressed());
      REQUIRE(read_torch_chunks_fast(chunks, fast, progress));
      CHECK(listing(fast) == listing(reference_read(std::string(file.text()))));
      CHECK(fast.events.strings.size() * 4 < fast.events.spans.size());  // names are shared
      ++compared;
    }
  }
  CHECK(compared >= 4);
}

TEST_CASE("torch fast path: gives way where the reference parser must judge", "[torch][stream]") {
  if (!fast_reads(kEveryKind)) return;  // a build without simdjson: nothing to hold
  const std::string good = R"({"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1})";
  CHECK(fast_reads(torch_text(good)));
  CHECK_FALSE(fast_reads(torch_text(good + ", 7")));  // an event that is not an object
  CHECK_FALSE(fast_reads(torch_text(R"({"ph": "X", "name": "a", "ts": 1, "dur": 1, "x": [1,]})")));
  CHECK_FALSE(fast_reads(torch_text(R"({"ph": "X", "name": "a", "ts": 1, "dur": 1, "x": tru})")));
  CHECK_FALSE(fast_reads(torch_text(R"({"ph": "X", "name": "a", "name": "b", "ts": 1, "dur": 1})")));
  CHECK_FALSE(fast_reads(torch_text(R"({"ph": "X", "name": "a", "ts": "1", "dur": 1})")));
  CHECK_FALSE(fast_reads(torch_text(R"({"ph": "X", "name": "a", "ts": 1, "dur": -1})")));
  CHECK_FALSE(fast_reads(torch_text(R"({"ph": "X", "name": "a", "pid": 1.5, "ts": 1, "dur": 1})")));
  CHECK_FALSE(fast_reads(torch_text(R"({"name": "[memory]", "ts": 1, "args": {"Total Allocated": 1}})")));
  CHECK_FALSE(fast_reads(torch_text(R"({"ph": "i", "name": "[memory]", "ts": 1, "args": {"Total Allocated": "1"}})")));
  CHECK_FALSE(fast_reads(torch_text(good) + " {}"));  // text after the top-level object
  CHECK_FALSE(fast_reads("{" + kHeader + R"("trace\u0045vents": [])" + "}"));
  CHECK_FALSE(fast_reads("{" + kHeader + R"("traceEvents": {}})"));
  CHECK_FALSE(fast_reads(R"({"schemaVersion": 1})"));
  CHECK_FALSE(fast_reads(R"({"schemaVersion": 1, "distributedInfo": {"rank": -1}, "traceEvents": []})"));
  // Nested past kMaxJsonDepth: the reference path's depth check names the place.
  const std::size_t deep = static_cast<std::size_t>(pipescope::kMaxJsonDepth);
  CHECK_FALSE(fast_reads(torch_text(R"({"ph": "X", "name": "a", "ts": 1, "dur": 1, "x": )" + std::string(deep, '[') +
                                    std::string(deep, ']') + "}")));
  CHECK(fast_reads(torch_text(R"({"ph": "X", "name": "a", "ts": 1, "dur": 1, "x": )" + std::string(deep - 4, '[') +
                              std::string(deep - 4, ']') + "}")));
  CHECK_FALSE(fast_reads(torch_text(good + R"(, {"ph": "X", "name": "\u00", "ts": 1, "dur": 1})")));
}
