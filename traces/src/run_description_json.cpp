// Reading and writing the run description's otherData fields: one table of keys
// (for_each_field), one reader and one writer per JSON type.
#include "run_description_json.hpp"

#include <cstdint>
#include <limits>

#include <fmt/format.h>

#include "pipescope/traces/trace.hpp"

namespace pipescope::traces {
namespace {

using json = nlohmann::json;

// Every field with its otherData key, in one place.
template <class Run, class F>
void for_each_field(Run& run, F&& f) {
  f("model", run.model);
  f("data_parallel", run.data_parallel);
  f("pipeline_ranks", run.pipeline_ranks);
  f("micro_batch_size", run.micro_batch_size);
  f("gradient_clipping", run.gradient_clipping);
  f("device", run.device);
  f("dtype", run.dtype);
  f("clock", run.clock);
  f("threads_per_rank", run.threads_per_rank);
  f("blas", run.blas);
  f("bind_cores", run.bind_cores);
  f("cores_per_rank", run.cores_per_rank);
  f("transport_cores_per_rank", run.transport_cores_per_rank);
  f("layers", run.layers);
  f("stage_bounds", run.stage_bounds);
  f("partition_method", run.partition_method);
  f("recompute_layers", run.recompute_layers);
  f("overlapped_steps", run.overlapped_steps);
  f("step_time_s", run.step_time_s);
  f("stolen_time_s", run.stolen_time_s);
  f("transport_cpu_s", run.transport_cpu_s);
  f("backward_split_probe", run.backward_split_probe);
  f("expert_call_probe", run.expert_call_probe);
  f("torch_profiler", run.torch_profiler);
}

[[noreturn]] void bad(const std::string& where, const char* what) {
  throw TraceError(fmt::format("{} must be {}", where, what));
}

// `where` names the value: "run.json: otherData.layers[2].name".
const json& member(const json& object, const char* key, const std::string& where) {
  static const json missing;
  if (!object.is_object()) bad(where, "an object");
  const auto it = object.find(key);
  return it == object.end() ? missing : *it;
}

void read_value(const json& j, const std::string& where, std::string& out) {
  if (!j.is_string()) bad(where, "a string");
  out = j.get<std::string>();
}
void read_value(const json& j, const std::string& where, bool& out) {
  if (!j.is_boolean()) bad(where, "true or false");
  out = j.get<bool>();
}
void read_value(const json& j, const std::string& where, double& out) {
  if (!j.is_number()) bad(where, "a number");
  out = j.get<double>();
}
void read_value(const json& j, const std::string& where, std::int64_t& out) {
  if (!j.is_number_integer() ||
      (j.is_number_unsigned() && j.get<std::uint64_t>() > std::numeric_limits<std::int64_t>::max()))
    bad(where, "an integer");
  out = j.get<std::int64_t>();
}
void read_value(const json& j, const std::string& where, int& out) {
  std::int64_t wide = 0;
  read_value(j, where, wide);
  if (wide < std::numeric_limits<int>::min() || wide > std::numeric_limits<int>::max()) bad(where, "an integer");
  out = static_cast<int>(wide);
}
void read_value(const json& j, const std::string& where, LayerDescription& out);
void read_value(const json& j, const std::string& where, BackwardSplitProbe& out);
void read_value(const json& j, const std::string& where, ExpertCallProbe& out);
void read_value(const json& j, const std::string& where, TorchProfilerRun& out);
// A member that may be absent or null (then `out` stays empty).
template <class T>
void read_optional(const json& object, const char* key, const std::string& where, std::optional<T>& out) {
  if (const json& value = member(object, key, where); !value.is_null())
    read_value(value, fmt::format("{}.{}", where, key), out.emplace());
}
template <class T>
void read_value(const json& j, const std::string& where, std::vector<T>& out) {
  if (!j.is_array()) bad(where, "an array");
  out.resize(j.size());
  for (std::size_t i = 0; i < j.size(); ++i) read_value(j[i], fmt::format("{}[{}]", where, i), out[i]);
}
void read_value(const json& j, const std::string& where, LayerDescription& out) {
  read_value(member(j, "name", where), where + ".name", out.name);
  read_value(member(j, "type", where), where + ".type", out.type);
  read_value(member(j, "parameters", where), where + ".parameters", out.parameters);
  read_optional(j, "experts", where, out.experts);
  read_optional(j, "expert_parameters", where, out.expert_parameters);
}
void read_value(const json& j, const std::string& where, BackwardSplitTimes& out) {
  read_value(member(j, "full_us", where), where + ".full_us", out.full_us);
  read_value(member(j, "input_us", where), where + ".input_us", out.input_us);
  read_value(member(j, "weight_us", where), where + ".weight_us", out.weight_us);
}
void read_value(const json& j, const std::string& where, BackwardSplitProbe& out) {
  read_value(member(j, "stage", where), where + ".stage", out.stage);
  read_value(j, where, out.own);
  if (const json& inner = member(j, "inner", where); !inner.is_null())
    read_value(inner, where + ".inner", out.inner.emplace());
}
void read_value(const json& j, const std::string& where, ExpertCallProbe& out) {
  read_value(member(j, "stage", where), where + ".stage", out.stage);
  read_value(member(j, "layer", where), where + ".layer", out.layer);
  read_value(member(j, "backward", where), where + ".backward", out.backward);
  read_value(member(j, "rows", where), where + ".rows", out.rows);
  read_value(member(j, "us", where), where + ".us", out.us);
}
void read_value(const json& j, const std::string& where, TorchProfilerRun& out) {
  read_value(member(j, "files", where), where + ".files", out.files);
  read_optional(j, "step", where, out.step);
  read_optional(j, "step_duration_us", where, out.step_duration_us);
  read_optional(j, "operators_per_rank", where, out.operators_per_rank);
}

json to_json(const LayerDescription& l) {
  json j = {{"name", l.name}, {"type", l.type}, {"parameters", l.parameters}};
  if (l.experts) j["experts"] = *l.experts;
  if (l.expert_parameters) j["expert_parameters"] = *l.expert_parameters;
  return j;
}
json to_json(const BackwardSplitTimes& t) {
  return {{"full_us", t.full_us}, {"input_us", t.input_us}, {"weight_us", t.weight_us}};
}
json to_json(const BackwardSplitProbe& p) {
  json j = to_json(p.own);
  j["stage"] = p.stage;
  if (p.inner) j["inner"] = to_json(*p.inner);
  return j;
}
json to_json(const ExpertCallProbe& p) {
  return {{"stage", p.stage}, {"layer", p.layer}, {"backward", p.backward}, {"rows", p.rows}, {"us", p.us}};
}
// The step is written when absent too (null): the layout torch runs have always had.
json to_json(const TorchProfilerRun& t) {
  json j = {{"files", t.files}, {"step", t.step ? json(*t.step) : json()}};
  if (t.step_duration_us) j["step_duration_us"] = *t.step_duration_us;
  if (t.operators_per_rank) j["operators_per_rank"] = *t.operators_per_rank;
  return j;
}
template <class T>
json to_json(const T& value) {
  return json(value);
}
template <class T>
json to_json(const std::vector<T>& values) {
  json j = json::array();
  for (const auto& v : values) j.push_back(to_json(v));
  return j;
}

}  // namespace

RunDescription take_run_description(json& other_data, const std::string& source) {
  RunDescription run;
  if (!other_data.is_object()) return run;
  for_each_field(run, [&](const char* key, auto& field) {
    const auto it = other_data.find(key);
    if (it == other_data.end()) return;
    if (!it->is_null()) read_value(*it, fmt::format("{}: otherData.{}", source, key), field.emplace());
    other_data.erase(it);
  });
  return run;
}

void put_run_description(const RunDescription& run, json& other_data) {
  for_each_field(run, [&](const char* key, const auto& field) {
    if (field) other_data[key] = to_json(*field);
  });
}

}  // namespace pipescope::traces
