// Runs an example program of exec/examples as a user would (a real process, its own workers),
// for the tests that check its losses: stdout lines "step I loss X" are collected, stderr kept.
#pragma once

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

namespace pipescope::exec::testing {

struct ExampleRun {
  int status = -1;              // exit status; -1 when killed by a signal
  std::vector<double> losses;   // one per "step I loss X" line, in order
  std::string err;
};

// `name` names the run's output files under the build folder's tests/exec-work.
inline ExampleRun run_example_program(const std::string& program, const std::string& name, const std::string& args) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(PIPESCOPE_BINARY_DIR) / "tests" / "exec-work";
  fs::create_directories(dir);
  const fs::path out = dir / (name + ".out"), err = dir / (name + ".err");
  const std::string command = program + " " + args + " > " + out.string() + " 2> " + err.string();
  ExampleRun run;
  const int raw = std::system(command.c_str());
  run.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  std::ifstream o(out), e(err);
  for (std::string line; std::getline(o, line);) {
    std::istringstream fields(line);
    std::string word;
    int step = 0;
    double loss = 0;
    if (fields >> word >> step >> word >> loss) run.losses.push_back(loss);
  }
  run.err.assign(std::istreambuf_iterator<char>(e), {});
  return run;
}

}  // namespace pipescope::exec::testing
