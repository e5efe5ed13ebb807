// Files for the hostile-input cases of issue 34: a small torch.profiler run written by hand
// (two ranks of a 2-stage pipeline, each rank one stage, 2 micro-batches, one ProfilerStep),
// a pipescope trace of a few events, FIFOs, and nesting deep enough to exhaust a recursive
// parser's stack. Shared by the case files (tests/reliability/test_*.cpp).
#pragma once

#include <sys/stat.h>

#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "reliability_support.hpp"

namespace reliability {

// One complete event of a torch.profiler trace: a cpu_op or user_annotation span of process 100.
inline std::string torch_span(const std::string& name, double ts_us, double dur_us, const std::string& cat = "user_annotation") {
  char times[64];
  std::snprintf(times, sizeof times, "\"ts\": %.17g, \"dur\": %.17g", ts_us, dur_us);
  return "{\"ph\": \"X\", \"cat\": \"" + cat + "\", \"name\": \"" + name + "\", \"pid\": 100, \"tid\": 1, " + times + "}";
}

// Rank `rank`'s spans: ProfilerStep#1, and the forwards and backwards of its stage (= its rank)
// for micro-batches 0 and 1, each with an operator inside. `extra` spans go after them.
inline std::vector<std::string> torch_rank_spans(int rank, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> spans = {torch_span("ProfilerStep#1", 1000, 1000)};
  double t = 1010;
  for (const char* action : {"F0", "F1", "B0", "B1"}) {
    spans.push_back(torch_span("PP:" + std::to_string(rank) + action, t, 40));
    spans.push_back(torch_span("aten::mm", t + 5, 20, "cpu_op"));
    t += 50;
  }
  spans.insert(spans.end(), extra.begin(), extra.end());
  return spans;
}

// A torch.profiler file of rank `rank` of a run of `world` ranks, with torch's header (without
// distributedInfo when `world` is 0).
inline std::string torch_rank_file(int rank, int world, const std::vector<std::string>& spans) {
  std::string text = "{\n  \"schemaVersion\": 1,\n";
  if (world > 0)
    text += "  \"distributedInfo\": {\"backend\": \"gloo\", \"rank\": " + std::to_string(rank) + ", \"world_size\": " +
            std::to_string(world) + "},\n";
  text += "  \"host_name\": \"test\",\n  \"traceEvents\": [\n";
  for (std::size_t i = 0; i < spans.size(); ++i) text += (i ? ",\n    " : "    ") + spans[i];
  return text + "\n  ]\n}\n";
}

// A folder `run` in `dir` holding the two rank files of a run; rank 1's spans get `rank1_extra`.
inline void write_torch_run(const fs::path& dir, const std::vector<std::string>& rank1_extra = {}) {
  fs::create_directories(dir / "run");
  write_text(dir / "run" / "rank0.pt.trace.json", torch_rank_file(0, 2, torch_rank_spans(0)));
  write_text(dir / "run" / "rank1.pt.trace.json", torch_rank_file(1, 2, torch_rank_spans(1, rank1_extra)));
}

// A pipescope trace of `ranks` ranks (predicted or measured): one forward per rank, and
// `extra_events` (JSON objects) after them.
inline std::string pipescope_trace(int ranks, const std::string& source, const std::vector<std::string>& extra_events = {}) {
  std::string text = "{\"traceEvents\": [";
  for (int r = 0; r < ranks; ++r)
    text += std::string(r ? ", " : "") + "{\"name\": \"F\", \"ph\": \"X\", \"pid\": " + std::to_string(r) +
            ", \"tid\": 0, \"ts\": " + std::to_string(10 * r) + ", \"dur\": 10, \"args\": {\"stage\": " + std::to_string(r) +
            ", \"micro_batch\": 0}}";
  for (const auto& e : extra_events) text += ", " + e;
  return text + "], \"otherData\": {\"format\": \"pipescope.trace/1\", \"source\": \"" + source +
         "\", \"num_ranks\": " + std::to_string(ranks) + "}}\n";
}

// `depth` nested arrays (or objects, {"a": {"a": ... 1}}): 200,000 levels overflow the stack of
// any recursive reader, printer or copier.
inline std::string deep_json(int depth, bool objects) {
  std::string text;
  text.reserve(static_cast<std::size_t>(depth) * 6 + 2);
  for (int i = 0; i < depth; ++i) text += objects ? "{\"a\":" : "[";
  text += objects ? "1" : "";
  for (int i = 0; i < depth; ++i) text += objects ? "}" : "]";
  return text;
}

inline void make_fifo(const fs::path& path) { REQUIRE(::mkfifo(path.c_str(), 0600) == 0); }

// A refusal as the contract has it: quickly, exit 2, one line `PROGRAM: error: ...` holding
// every one of `parts`.
inline void check_refused(const CliRun& run, const std::string& program, const std::vector<std::string>& parts) {
  INFO(run.err);
  CHECK_FALSE(run.timed_out);
  CHECK(run.status == 2);
  CHECK(run.one_error_line(program));
  for (const auto& part : parts) CHECK(contains(run.err, part));
}

}  // namespace reliability
