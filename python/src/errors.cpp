// Every error the libraries throw becomes one of pipescope.errors' classes with the message the
// command line prints after "ppsim: error: ", so a script sees the same one line as a shell.
#include <boost/program_options/errors.hpp>
#include <new>

#include "bindings.hpp"
#include "pipescope/core/errors.hpp"
#include "pipescope/traces/trace.hpp"

namespace py = pybind11;

namespace pipescope::python {

namespace {

void raise(const char* class_name, const char* message) {
  const py::object error_class = py::module_::import("pipescope.errors").attr(class_name);
  PyErr_SetString(error_class.ptr(), message);
}

}  // namespace

void bind_errors(py::module_&) {
  py::register_exception_translator([](std::exception_ptr thrown) {
    try {
      if (thrown) std::rethrow_exception(thrown);
    } catch (const py::error_already_set&) {
      throw;  // a Python error on its way back: pybind11's own translator restores it
    } catch (const py::builtin_exception&) {
      throw;  // TypeError, ValueError, ... raised by the bindings themselves
    } catch (const UsageError& e) {
      raise("UsageError", e.what());
    } catch (const boost::program_options::error& e) {
      raise("UsageError", e.what());
    } catch (const ScheduleError& e) {
      // ValidationError is a ScheduleError: its message names rank, step and instruction.
      raise("ScheduleError", e.what());
    } catch (const traces::TraceError& e) {
      raise("TraceError", e.what());
    } catch (const std::bad_alloc&) {
      raise("Error", "out of memory: the sizes asked for do not fit in this machine's memory");
    } catch (const std::exception& e) {
      raise("Error", e.what());
    }
  });
}

}  // namespace pipescope::python
