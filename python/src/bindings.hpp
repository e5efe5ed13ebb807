// The parts of the extension module pipescope._core, each bound in its own file; module.cpp
// calls them in order.
#pragma once

#include <pybind11/pybind11.h>

namespace pipescope::python {

void bind_errors(pybind11::module_& m);     // C++ exceptions -> pipescope.errors' classes
void bind_schedule(pybind11::module_& m);   // Schedule, make_schedule, schedule files, zb-auto
void bind_commands(pybind11::module_& m);   // run_command: a ppsim command in this process
void bind_traces(pybind11::module_& m);     // Trace and its events, read_trace

}  // namespace pipescope::python
