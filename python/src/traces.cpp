// Traces from Python: pipescope's own files, plain Chrome traces and torch.profiler runs (one
// run's files or folder), read as ppview and ppsim compare read them, with their events.
#include <pybind11/stl.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bindings.hpp"
#include "pipescope/traces/trace.hpp"
#include "pipescope/traces/trace_arguments.hpp"
#include "pipescope/traces/trace_io.hpp"

namespace py = pybind11;

namespace pipescope::python {

namespace {

struct ReadTraces {
  std::vector<std::pair<std::string, traces::Trace>> traces;  // (name, trace) in order of mention
  std::vector<std::string> notes;                              // what a torch run lacks
};

ReadTraces read_traces(const std::vector<std::string>& paths, std::optional<int> step, bool every_step) {
  traces::TorchReadOptions options;
  options.step = step;
  options.every_step = every_step;
  ReadTraces read;
  for (auto& named : traces::read_trace_arguments(paths, options, read.notes))
    read.traces.emplace_back(std::move(named.name), std::move(named.trace));
  return read;
}

}  // namespace

void bind_traces(py::module_& m) {
  py::class_<traces::TraceEvent>(m, "TraceEvent")
      .def_readonly("rank", &traces::TraceEvent::rank)
      .def_readonly("lane", &traces::TraceEvent::lane)
      .def_readonly("name", &traces::TraceEvent::name)
      .def_readonly("category", &traces::TraceEvent::category)
      .def_readonly("ts_us", &traces::TraceEvent::ts_us)
      .def_readonly("dur_us", &traces::TraceEvent::dur_us)
      .def_readonly("stage", &traces::TraceEvent::stage)
      .def_readonly("micro_batch", &traces::TraceEvent::micro_batch)
      .def_readonly("peer_rank", &traces::TraceEvent::peer_rank)
      .def_readonly("bytes", &traces::TraceEvent::bytes)
      .def("__repr__", [](const traces::TraceEvent& e) {
        return "TraceEvent(rank=" + std::to_string(e.rank) + ", name='" + e.name + "', stage=" + std::to_string(e.stage) +
               ", micro_batch=" + std::to_string(e.micro_batch) + ", ts_us=" + std::to_string(e.ts_us) +
               ", dur_us=" + std::to_string(e.dur_us) + ")";
      });
  py::class_<traces::MemorySample>(m, "MemorySample")
      .def_readonly("rank", &traces::MemorySample::rank)
      .def_readonly("ts_us", &traces::MemorySample::ts_us)
      .def_readonly("bytes", &traces::MemorySample::bytes);
  py::class_<traces::Trace>(m, "Trace")
      .def_property_readonly("source", [](const traces::Trace& t) { return t.meta.source; })
      .def_property_readonly("schedule", [](const traces::Trace& t) { return t.meta.schedule; })
      .def_property_readonly("num_ranks", &traces::Trace::rank_count)
      .def_property_readonly("num_stages", [](const traces::Trace& t) { return t.meta.num_stages; })
      .def_property_readonly("num_micro_batches", [](const traces::Trace& t) { return t.meta.num_micro_batches; })
      .def_property_readonly("iteration", [](const traces::Trace& t) { return t.meta.iteration; })
      .def_property_readonly("step_time_s", [](const traces::Trace& t) { return t.meta.run.step_time_s; })
      .def_readonly("events", &traces::Trace::events)
      .def_readonly("memory", &traces::Trace::memory)
      .def("end_us", &traces::Trace::end_us)
      .def("to_json", [](const traces::Trace& t) { return traces::to_trace_json(t); })
      .def("write", [](const traces::Trace& t, const std::string& path) { traces::write_trace(t, path); }, py::arg("path"));

  py::class_<ReadTraces>(m, "ReadTraces")
      .def_readonly("traces", &ReadTraces::traces)
      .def_readonly("notes", &ReadTraces::notes);
  m.def("read_traces", &read_traces, py::arg("paths"), py::arg("step") = py::none(), py::arg("every_step") = false);
}

}  // namespace pipescope::python
