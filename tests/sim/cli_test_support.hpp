// What ppsim's end-to-end tests share (test_cli*.cpp): a temporary folder per test process
// (temp_directory_path()/pipescope-test-cli-<pid>, one subfolder per test case), the real binary
// run in it, and readers of what it wrote.
#pragma once

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "ppsim_run.hpp"
#include "scratch_folder.hpp"

namespace cli_test {

namespace fs = std::filesystem;
using nlohmann::json;

// The temporary folder of this test process (scratch_folder.hpp).
inline const test_support::ScratchFolder& scratch() {
  static const test_support::ScratchFolder folder("cli");
  return folder;
}

inline const fs::path& work_root() { return scratch().path(); }

// A fresh, empty folder for one test case.
inline fs::path case_dir(const std::string& name) { return scratch().case_dir(name); }

using ppsim_test::quoted;
using ppsim_test::read_text;

inline void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

inline json read_json(const fs::path& path) { return json::parse(read_text(path)); }

using CliRun = ppsim_test::PpsimRun;

// Runs `ppsim ARGS` in `dir`; the case folder holds only what ppsim wrote.
inline CliRun ppsim(const fs::path& dir, const std::string& args) { return ppsim_test::run_ppsim(args, dir); }

inline std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

inline int count_events(const json& trace, const std::string& name) {
  int n = 0;
  for (const auto& e : trace.at("traceEvents"))
    if (e.value("ph", "") == "X" && e.value("name", "") == name) ++n;
  return n;
}

inline double trace_end_us(const json& trace) {
  double end = 0;
  for (const auto& e : trace.at("traceEvents"))
    if (e.value("ph", "") == "X") end = std::max(end, e.at("ts").get<double>() + e.at("dur").get<double>());
  return end;
}

inline const std::string kSmall1f1b = "--schedule 1f1b --stages 2 --micro-batches 4";
inline const std::string kCosts = "--f-cost 100e-6 --b-cost 150e-6 --w-cost 100e-6";
inline const std::string kDoubledCosts = "--f-cost 200e-6 --b-cost 300e-6 --w-cost 200e-6";

}  // namespace cli_test
