// The real ppsim binary (PPSIM_PATH) for the command-line tests: `ppsim ARGS` run through the
// shell in a folder, its exit status, standard output and standard error captured.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace ppsim_test {

namespace fs = std::filesystem;

inline std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// `text` in single quotes for the shell.
inline std::string quoted(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

struct PpsimRun {
  int status = -1;  // exit status; -1 when killed by a signal
  std::string out, err;
  // Exactly one line on stderr, of the form `ppsim: error: ...`.
  bool one_error_line() const {
    return err.rfind("ppsim: error: ", 0) == 0 && std::count(err.begin(), err.end(), '\n') == 1 && err.back() == '\n';
  }
};

// Runs `ppsim ARGS` in `dir` (the current folder when empty). The output goes through files in
// the system's temporary folder, removed afterwards, so `dir` holds only what ppsim wrote.
inline PpsimRun run_ppsim(const std::string& args, const fs::path& dir = {}) {
  static int counter = 0;
  const fs::path stem = fs::temp_directory_path() /
                        ("pipescope-ppsim-run-" + std::to_string(::getpid()) + "-" + std::to_string(++counter));
  const fs::path out = stem.string() + ".out", err = stem.string() + ".err";
  const std::string in_dir = dir.empty() ? std::string() : "cd " + quoted(dir.string()) + " && ";
  const std::string command =
      in_dir + quoted(PPSIM_PATH) + " " + args + " >" + quoted(out.string()) + " 2>" + quoted(err.string());
  const int raw = std::system(command.c_str());
  PpsimRun run;
  run.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  run.out = read_text(out);
  run.err = read_text(err);
  fs::remove(out);
  fs::remove(err);
  return run;
}

}  // namespace ppsim_test
