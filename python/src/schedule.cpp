// Schedules from Python: built by name through the registry (zb-auto after its costs were set),
// read from the two file formats, validated, and written back; one rank's program is a list of
// steps of actions in torch's notation ("0F1", "1SEND_F4").
#include <pybind11/operators.h>
#include <pybind11/stl.h>

#include <optional>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "pipescope/core/errors.hpp"
#include "pipescope/core/registry.hpp"
#include "pipescope/core/schedule.hpp"
#include "pipescope/core/schedule_io.hpp"
#include "pipescope/core/validator.hpp"
#include "pipescope/sim/costs.hpp"
#include "pipescope/sim/profile.hpp"
#include "pipescope/sim/units.hpp"
#include "pipescope/sim/zb_auto.hpp"

namespace py = pybind11;

namespace pipescope::python {

namespace {

using ActionSteps = std::vector<std::vector<std::string>>;

ActionSteps program_actions(const Schedule& schedule, int rank) {
  if (rank < 0 || rank >= schedule.num_ranks)
    throw py::index_error("rank " + std::to_string(rank) + " is not one of the schedule's " +
                          std::to_string(schedule.num_ranks) + " ranks");
  ActionSteps steps;
  for (const Step& step : schedule.programs[static_cast<std::size_t>(rank)]) {
    std::vector<std::string>& actions = steps.emplace_back();
    for (const Instruction& instruction : step) actions.push_back(to_string(instruction));
  }
  return steps;
}

Schedule make_named_schedule(const std::string& name, int stages, int micro_batches, std::optional<int> chunks) {
  ScheduleParams params;
  params.num_ranks = stages;
  params.num_micro_batches = micro_batches;
  if (chunks) {
    params.chunks = *chunks;
    params.chunks_given = true;
  }
  return make_schedule(name, params);
}

// A cost-dependent schedule (ScheduleTraits::cost_dependent: zb-auto) searches with the costs it is
// given; the simulate command sets them from its own options each time, a Python caller through
// one of these two before making the schedule.
void use_uniform_costs(const std::string& name, double f_s, double b_s, double w_s, double c_s, std::int64_t f_bytes,
                       std::int64_t b_bytes, std::int64_t w_bytes, std::int64_t max_mem_bytes,
                       int max_mem_micro_batches) {
  if (f_bytes + b_bytes + w_bytes != 0)
    throw UsageError("--f-mem + --b-mem + --w-mem must be 0 (got " + std::to_string(f_bytes) + " + " +
                     std::to_string(b_bytes) + " + " + std::to_string(w_bytes) + ")");
  sim::CostModel costs = sim::CostModel::uniform(f_s, b_s, w_s, c_s, f_bytes, b_bytes, w_bytes);
  costs.check(1);
  sim::register_with_costs(name, costs, sim::Topology{}, max_mem_bytes, max_mem_micro_batches);
}

void use_profile_costs(const std::string& name, const std::string& profile_path, std::int64_t max_mem_bytes,
                       int max_mem_micro_batches) {
  const sim::Profile profile = sim::read_profile(profile_path);
  sim::register_with_costs(name, sim::cost_model_from_profile(profile), sim::topology_from_profile(profile),
                           max_mem_bytes, max_mem_micro_batches);
}

// What a schedule is, so that Python asks instead of comparing names; None for a name neither the
// registry nor the simulator's cost-dependent table knows.
py::object traits_of(const std::string& name) {
  const ScheduleTraits* traits = sim::schedule_traits(name);
  if (!traits) return py::none();
  py::dict out;
  out["placement"] = traits->placement == StagePlacement::v ? "v" : "loop";
  out["chunks"] = traits->chunks;
  out["split_backward"] = traits->split_backward;
  out["cost_dependent"] = traits->cost_dependent;
  out["memory_limited"] = traits->memory_limited;
  out["takes_microbatch_group_size"] = traits->takes_microbatch_group_size;
  return out;
}

}  // namespace

void bind_schedule(py::module_& m) {
  // The simulator's schedules (zb-auto) join the registry once, as ppsim's do at start-up.
  sim::register_sim_schedules();

  py::class_<Schedule>(m, "Schedule")
      .def_readonly("name", &Schedule::name)
      .def_readonly("num_ranks", &Schedule::num_ranks)
      .def_readonly("num_stages", &Schedule::num_stages)
      .def_readonly("num_micro_batches", &Schedule::num_micro_batches)
      .def_readonly("stage_to_rank", &Schedule::stage_to_rank)
      .def_property_readonly(
          "communication",
          [](const Schedule& s) { return s.communication == Communication::Torch ? "torch" : "pipescope"; })
      .def_property_readonly("is_training", &Schedule::is_training)
      .def("instruction_count", &Schedule::instruction_count)
      .def("program", &program_actions, py::arg("rank"))
      .def(
          "validate",
          [](const Schedule& s, bool blocking_sends) {
            validate(s, ValidationOptions{.blocking_sends = blocking_sends});
          },
          py::arg("blocking_sends") = false)
      .def("to_json", [](const Schedule& s) { return to_schedule_json(s); })
      .def("to_torch_csv", [](const Schedule& s) { return to_torch_csv(s); })
      .def("to_text", [](const Schedule& s) { return to_text_grid(s); })
      .def(py::self == py::self);

  m.def("make_schedule", &make_named_schedule, py::arg("name"), py::arg("stages"), py::arg("micro_batches"),
        py::arg("chunks") = py::none());
  m.def("parse_schedule_json", &parse_schedule_json, py::arg("text"), py::arg("source"));
  m.def("parse_torch_csv", &parse_torch_csv, py::arg("text"), py::arg("source"));
  m.def("read_schedule_file", &read_schedule_file, py::arg("path"));
  m.def("schedule_names", [] { return ScheduleRegistry::instance().names(); });
  m.def("schedule_traits", &traits_of, py::arg("name"));
  m.def("use_uniform_costs", &use_uniform_costs, py::arg("name"), py::arg("f_s"), py::arg("b_s"), py::arg("w_s"),
        py::arg("c_s"), py::arg("f_bytes"), py::arg("b_bytes"), py::arg("w_bytes"), py::arg("max_mem_bytes"),
        py::arg("max_mem_micro_batches"));
  m.def("use_profile_costs", &use_profile_costs, py::arg("name"), py::arg("profile"), py::arg("max_mem_bytes"),
        py::arg("max_mem_micro_batches"));
  m.def("parse_bytes", &sim::parse_bytes, py::arg("text"), py::arg("option"), py::arg("allow_negative"));
}

}  // namespace pipescope::python
