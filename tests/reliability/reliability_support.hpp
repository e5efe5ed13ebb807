// The fault-injection suite's tools: each case runs a real binary (ppsim, pprun, ppview) through
// the shell as a user would, in its own fresh folder, under a hard time limit so that a hang is a
// failed case, never a stuck CI. See docs/RELIABILITY.md for the cases and their tally.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "scratch_folder.hpp"

namespace reliability {

namespace fs = std::filesystem;

// The temporary folder of this test process (scratch_folder.hpp).
inline const test_support::ScratchFolder& scratch() {
  static const test_support::ScratchFolder folder("reliability");
  return folder;
}

inline const fs::path& work_root() { return scratch().path(); }

// A fresh, empty folder for one test case.
inline fs::path case_dir(const std::string& name) { return scratch().case_dir(name); }

inline std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

// Single-quoted for the shell.
inline std::string quoted(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

struct CliRun {
  int status = -1;  // exit status; -1 when killed by a signal
  bool timed_out = false;
  std::string out, err;
  // Exactly one line on stderr, starting with `PROGRAM: error: `.
  bool one_error_line(const std::string& program) const {
    return err.rfind(program + ": error: ", 0) == 0 && std::count(err.begin(), err.end(), '\n') == 1 &&
           err.back() == '\n';
  }
};

// Runs `ENV PROGRAM ARGS` in `dir` through the shell under `timeout limit_s`; stdout and stderr
// land in files beside the case folders unless ARGS redirects them itself.
inline CliRun run_cli(const std::string& program, const fs::path& dir, const std::string& args, int limit_s = 60,
                      const std::string& env = "") {
  static int counter = 0;
  const std::string stem = "run" + std::to_string(++counter);
  const fs::path out = work_root() / (stem + ".out"), err = work_root() / (stem + ".err");
  const std::string command = "cd " + quoted(dir.string()) + " && " + env + " timeout -s KILL " +
                              std::to_string(limit_s) + " " + quoted(program) + " " + args + " >" +
                              quoted(out.string()) + " 2>" + quoted(err.string());
  const int raw = std::system(command.c_str());
  CliRun run;
  run.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  run.timed_out = run.status == 137 || run.status == 124;
  run.out = read_text(out);
  run.err = read_text(err);
  return run;
}

}  // namespace reliability
