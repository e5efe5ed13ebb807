// A ppsim command run in this process: the Python functions pass their keyword arguments as the
// command's options, so that one parser checks them (the same defaults, the same refusals, the
// same one-line messages) and a new option of the command line is a new keyword argument with
// no code here. What the command prints is handed back as text; --json output is what the
// Python side reads.
#include <pybind11/stl.h>

#include <algorithm>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "command.hpp"
#include "pipescope/core/errors.hpp"

namespace py = pybind11;

namespace pipescope::python {

namespace {

// Sends std::cout and std::cerr to strings while it lives; the streams are restored however
// the command ends.
class CapturedOutput {
 public:
  CapturedOutput() : out_(std::cout.rdbuf(out_text_.rdbuf())), err_(std::cerr.rdbuf(err_text_.rdbuf())) {}
  ~CapturedOutput() {
    std::cout.rdbuf(out_);
    std::cerr.rdbuf(err_);
  }
  CapturedOutput(const CapturedOutput&) = delete;
  CapturedOutput& operator=(const CapturedOutput&) = delete;
  std::string out() const { return out_text_.str(); }
  std::string err() const { return err_text_.str(); }

 private:
  std::ostringstream out_text_, err_text_;
  std::streambuf* out_;
  std::streambuf* err_;
};

struct CommandOutput {
  int status = 0;
  std::string out;
  std::string err;
};

CommandOutput run_command(const std::string& name, const std::vector<std::string>& args) {
  const auto& all = cli::commands();
  const auto it = std::find_if(all.begin(), all.end(), [&](const cli::Command& c) { return c.name == name; });
  if (it == all.end()) throw UsageError("unknown command '" + name + "'");
  CapturedOutput captured;
  const int status = it->run(args);  // errors propagate as the commands throw them
  return {status, captured.out(), captured.err()};
}

}  // namespace

void bind_commands(py::module_& m) {
  py::class_<CommandOutput>(m, "CommandOutput")
      .def_readonly("status", &CommandOutput::status)
      .def_readonly("out", &CommandOutput::out)
      .def_readonly("err", &CommandOutput::err);
  m.def("run_command", &run_command, py::arg("name"), py::arg("args"),
        "Runs `ppsim NAME ARGS...` in this process; raises pipescope.errors' classes as ppsim exits 2 or 1.");
  m.def("command_names", [] {
    std::vector<std::string> names;
    for (const cli::Command& c : cli::commands()) names.push_back(c.name);
    std::sort(names.begin(), names.end());
    return names;
  });
}

}  // namespace pipescope::python
