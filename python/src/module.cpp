// pipescope._core: the C++ libraries (core, traces, sim) seen from Python. The public API is
// the pure-Python package around it (python/pipescope/); this module stays small and typed
// (_core.pyi).
#include "bindings.hpp"

PYBIND11_MODULE(_core, m) {
  m.doc() = "pipescope's C++ core, traces and simulator (use the pipescope package, not this module)";
  pipescope::python::bind_errors(m);
  pipescope::python::bind_schedule(m);
  pipescope::python::bind_commands(m);
  pipescope::python::bind_traces(m);
#ifdef PIPESCOPE_VERSION
  m.attr("__version__") = PIPESCOPE_VERSION;
#endif
}
