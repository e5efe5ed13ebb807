// The real pprun binary (PPRUN_PATH) for the tests that run it as a user would: a command line
// through the shell, its exit status, standard error, and the rows of its --metrics file.
#pragma once

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace pprun_test {

// Where the runs write their metrics, errors and checkpoints (in the build folder).
inline std::filesystem::path work_dir() {
  std::filesystem::path dir = std::filesystem::path(PIPESCOPE_BINARY_DIR) / "tests" / "exec-work";
  std::filesystem::create_directories(dir);
  return dir;
}

struct PprunRun {
  int status = -1;  // exit status; -1 when killed by a signal
  std::string err;
  std::vector<double> losses;           // per step, from the metrics rows
  std::vector<int> steps;               // the rows' step numbers
  std::vector<nlohmann::json> metrics;  // the rows themselves
};

// Runs `pprun ARGS --metrics work_dir()/NAME.jsonl`, with `env` (assignments) before it.
inline PprunRun run_pprun(const std::string& name, const std::string& args, const std::string& env = "") {
  const std::filesystem::path metrics = work_dir() / (name + ".jsonl"), err = work_dir() / (name + ".err");
  std::filesystem::remove(metrics);
  const std::string command = env + " " + PPRUN_PATH + " " + args + " --metrics " + metrics.string() + " 2> " + err.string();
  PprunRun out;
  const int raw = std::system(command.c_str());
  out.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  std::ifstream e(err);
  out.err.assign(std::istreambuf_iterator<char>(e), {});
  std::ifstream m(metrics);
  for (std::string line; std::getline(m, line);) {
    auto row = nlohmann::json::parse(line);
    out.losses.push_back(row.at("loss").get<double>());
    out.steps.push_back(row.at("step").get<int>());
    out.metrics.push_back(std::move(row));
  }
  return out;
}

}  // namespace pprun_test
