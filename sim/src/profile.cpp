#include "pipescope/sim/profile.hpp"

#include <climits>
#include <cmath>

#include <fmt/format.h>
#include <optional>
#include <set>

#include "pipescope/core/atomic_file.hpp"
#include "pipescope/core/errors.hpp"
#include "pipescope/core/input_file.hpp"
#include "pipescope/core/json_limits.hpp"
#include "profile_all_to_all.hpp"
#include "profile_expert_compute.hpp"

namespace pipescope::sim {
namespace {

using nlohmann::json;

// Bounds on a profile's figures: a time beyond 1e6 s (about 11.6 days) for one operation, or
// bytes beyond 2^60 (1 EiB), is a broken file, not a measurement.
constexpr double kMaxProfileValue = 1e6;
constexpr std::int64_t kMaxProfileBytes = std::int64_t{1} << 60;

double get_seconds(const json& object, const char* field, const std::string& where, double limit = kMaxProfileValue) {
  if (!object.contains(field)) throw UsageError(where + "." + field + ": missing");
  const json& v = object[field];
  if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0)
    throw UsageError(where + "." + field + ": must be a number >= 0");
  // Times: the same bound as a trace's durations (traces/trace_limits.hpp), 1e6 s, about 11.6 days.
  if (v.get<double>() > limit)
    throw UsageError(fmt::format("{}.{}: {:g} is beyond the limit of {:g}", where, field, v.get<double>(), limit));
  return v.get<double>();
}

std::int64_t get_bytes(const json& object, const char* field, const std::string& where, bool may_be_negative) {
  if (!object.contains(field)) throw UsageError(where + "." + field + ": missing");
  const json& v = object[field];
  if (!v.is_number_integer()) throw UsageError(where + "." + field + ": must be an integer number of bytes");
  const auto value = json_integer_in(v, -kMaxProfileBytes, kMaxProfileBytes);
  if (!value)
    throw UsageError(fmt::format("{}.{}: {} is beyond the limit of 2^60 bytes either way", where, field, v.dump()));
  const std::int64_t bytes = *value;
  if (!may_be_negative && bytes < 0) throw UsageError(where + "." + field + ": must be >= 0");
  return bytes;
}

double get_optional_seconds(const json& object, const char* field, const std::string& where) {
  return object.contains(field) ? get_seconds(object, field, where) : 0.0;
}

int get_count(const json& object, const char* field, const std::string& where, int fallback) {
  if (!object.contains(field)) return fallback;
  const json& v = object[field];
  const auto count = json_integer_in(v, 1, INT_MAX);
  if (!count) throw UsageError(fmt::format("{}.{}: must be an integer from 1 to {}", where, field, INT_MAX));
  return static_cast<int>(*count);
}

bool get_optional_flag(const json& object, const char* field, const std::string& where) {
  if (!object.contains(field)) return false;
  if (!object[field].is_boolean()) throw UsageError(where + "." + field + ": must be true or false");
  return object[field].get<bool>();
}

// "backward_split_estimate": {"input_share": 0.5, "overhead": 0.13, ..., "stages": [0, 1], "basis": "..."}
BackwardSplitEstimate parse_split_estimate(const json& profile, const std::string& source) {
  const std::string where = source + ": backward_split_estimate";
  if (!profile.contains("backward_split_estimate") || !profile["backward_split_estimate"].is_object())
    throw UsageError(where + ": missing object (backward_split is \"estimated\")");
  const json& e = profile["backward_split_estimate"];
  BackwardSplitEstimate estimate;
  estimate.input_share = get_seconds(e, "input_share", where);
  if (!(estimate.input_share > 0 && estimate.input_share < 1))
    throw UsageError(where + ".input_share: must be between 0 and 1");
  estimate.overhead = get_seconds(e, "overhead", where);
  estimate.input_share_uncertainty = get_optional_seconds(e, "input_share_uncertainty", where);
  estimate.overhead_uncertainty = get_optional_seconds(e, "overhead_uncertainty", where);
  if (e.contains("stages")) {
    if (!e["stages"].is_array()) throw UsageError(where + ".stages: must be an array of stages");
    for (const json& stage : e["stages"]) {
      if (!stage.is_number_integer() || stage.get<int>() < 0)
        throw UsageError(where + ".stages: must be an array of stages");
      estimate.stages.push_back(stage.get<int>());
    }
  }
  if (e.contains("basis") && e["basis"].is_string()) estimate.basis = e["basis"].get<std::string>();
  return estimate;
}

// The run record's fields (Profile::layers .. inner_backward_split). Each reader returns
// nothing for a value of another shape, which then stays in `extra` as an unknown field does:
// profiles that older versions or other tools wrote keep reading, and write back unchanged.
std::optional<std::int64_t> integer_of(const json& v, std::int64_t lo, std::int64_t hi) {
  return v.is_number_integer() ? json_integer_in(v, lo, hi) : std::nullopt;
}

std::optional<std::vector<std::string>> strings_of(const json& v) {
  if (!v.is_array()) return std::nullopt;
  std::vector<std::string> out;
  for (const json& item : v) {
    if (!item.is_string()) return std::nullopt;
    out.push_back(item.get<std::string>());
  }
  return out;
}

std::optional<std::vector<int>> ints_of(const json& v) {
  if (!v.is_array()) return std::nullopt;
  std::vector<int> out;
  for (const json& item : v) {
    const auto value = integer_of(item, INT_MIN, INT_MAX);
    if (!value) return std::nullopt;
    out.push_back(static_cast<int>(*value));
  }
  return out;
}

std::optional<std::string> string_of(const json& v) {
  return v.is_string() ? std::optional<std::string>(v.get<std::string>()) : std::nullopt;
}

// [{"name": "embed", "type": "Embedding", "parameters": 1024}, ...]
std::optional<std::vector<ProfileLayer>> layers_of(const json& v) {
  if (!v.is_array()) return std::nullopt;
  std::vector<ProfileLayer> out;
  for (const json& l : v) {
    if (!l.is_object() || l.size() != 3 || !l.contains("name") || !l["name"].is_string() || !l.contains("type") ||
        !l["type"].is_string() || !l.contains("parameters"))
      return std::nullopt;
    const auto parameters = integer_of(l["parameters"], INT64_MIN, INT64_MAX);
    if (!parameters) return std::nullopt;
    out.push_back({l["name"].get<std::string>(), l["type"].get<std::string>(), *parameters});
  }
  return out;
}

// {"input": 0.375, "weight": 0.75}
std::optional<InnerBackwardSplit> inner_split_of(const json& v) {
  if (!v.is_object() || v.size() != 2 || !v.contains("input") || !v["input"].is_number() || !v.contains("weight") ||
      !v["weight"].is_number())
    return std::nullopt;
  return InnerBackwardSplit{v["input"].get<double>(), v["weight"].get<double>()};
}

// Sets `field` from record[key] when it has the field's shape; true when it was taken.
template <typename T, typename Reader>
bool take(const json& value, std::optional<T>& field, Reader read) {
  field = read(value);
  return field.has_value();
}

// {"traces": [...], "schedules": [...], "micro_batches": [...], "num_ranks": 2, ...}
std::optional<CalibrationRecord> calibration_record_of(const json& v) {
  if (!v.is_object()) return std::nullopt;
  CalibrationRecord r;
  const auto int64 = [](const json& x) { return integer_of(x, INT64_MIN, INT64_MAX); };
  for (auto it = v.begin(); it != v.end(); ++it) {
    const std::string& key = it.key();
    const json& value = it.value();
    bool taken = false;
    if (key == "traces")
      taken = take(value, r.traces, strings_of);
    else if (key == "traces_left_out")
      taken = take(value, r.traces_left_out, int64);
    else if (key == "schedules")
      taken = take(value, r.schedules, strings_of);
    else if (key == "micro_batches")
      taken = take(value, r.micro_batches, ints_of);
    else if (key == "num_ranks")
      taken = take(value, r.num_ranks, [](const json& x) -> std::optional<int> {
        const auto n = integer_of(x, INT_MIN, INT_MAX);
        return n ? std::optional<int>(static_cast<int>(*n)) : std::nullopt;
      });
    else if (key == "outliers")
      taken = take(value, r.outliers, int64);
    else if (key == "duration_statistic")
      taken = take(value, r.duration_statistic, string_of);
    else if (key == "profiler_overhead_factor")
      taken = take(value, r.profiler_overhead_factor, [](const json& x) -> std::optional<double> {
        return x.is_number_float() ? std::optional<double>(x.get<double>()) : std::nullopt;
      });
    if (!taken) r.extra[key] = value;
  }
  return r;
}

json calibration_record_json(const CalibrationRecord& r) {
  json j = r.extra.is_object() ? r.extra : json::object();
  if (r.traces) j["traces"] = *r.traces;
  if (r.traces_left_out) j["traces_left_out"] = *r.traces_left_out;
  if (r.schedules) j["schedules"] = *r.schedules;
  if (r.micro_batches) j["micro_batches"] = *r.micro_batches;
  if (r.num_ranks) j["num_ranks"] = *r.num_ranks;
  if (r.outliers) j["outliers"] = *r.outliers;
  if (r.duration_statistic) j["duration_statistic"] = *r.duration_statistic;
  if (r.profiler_overhead_factor) j["profiler_overhead_factor"] = *r.profiler_overhead_factor;
  return j;
}

// A top-level field of the run record taken into its typed member; false for any other key,
// or a value of another shape (the caller keeps it in `extra`).
bool take_run_record_field(const std::string& key, const json& value, Profile& p) {
  if (key == "layers") return take(value, p.layers, layers_of);
  if (key == "stage_bounds") return take(value, p.stage_bounds, ints_of);
  if (key == "partition_method") return take(value, p.partition_method, string_of);
  if (key == "model") return take(value, p.model, string_of);
  if (key == "calibration") return take(value, p.calibration, calibration_record_of);
  if (key == "inner_backward_split") return take(value, p.inner_backward_split, inner_split_of);
  return false;
}

void write_run_record(const Profile& p, json& j) {
  if (p.layers) {
    json layers = json::array();
    for (const ProfileLayer& l : *p.layers)
      layers.push_back({{"name", l.name}, {"type", l.type}, {"parameters", l.parameters}});
    j["layers"] = std::move(layers);
  }
  if (p.stage_bounds) j["stage_bounds"] = *p.stage_bounds;
  if (p.partition_method) j["partition_method"] = *p.partition_method;
  if (p.model) j["model"] = *p.model;
  if (p.calibration) j["calibration"] = calibration_record_json(*p.calibration);
  if (p.inner_backward_split)
    j["inner_backward_split"] = {{"input", p.inner_backward_split->input}, {"weight", p.inner_backward_split->weight}};
}

// stages[i] of a profile, its fields checked where they are named.
StageProfile parse_stage(const json& s, std::size_t i, const std::string& source) {
  const std::string where = source + ": stages[" + std::to_string(i) + "]";
  if (!s.is_object()) throw UsageError(where + ": must be an object");
  StageProfile sp;
  if (s.contains("stage") && !json_integer_in(s["stage"], 0, INT_MAX))
    throw UsageError(where + ".stage: must be an integer");
  sp.stage = s.contains("stage") ? static_cast<int>(s["stage"].get<std::int64_t>()) : static_cast<int>(i);
  if (sp.stage != static_cast<int>(i)) throw UsageError(where + ".stage: expected " + std::to_string(i));
  sp.f_s = get_seconds(s, "f_s", where);
  sp.b_s = get_seconds(s, "b_s", where);
  sp.w_s = get_seconds(s, "w_s", where);
  sp.f_mem_bytes = get_bytes(s, "f_mem_bytes", where, true);
  sp.b_mem_bytes = get_bytes(s, "b_mem_bytes", where, true);
  sp.w_mem_bytes = get_bytes(s, "w_mem_bytes", where, true);
  if (sp.f_mem_bytes + sp.b_mem_bytes + sp.w_mem_bytes != 0)
    throw UsageError(where + ": f_mem_bytes + b_mem_bytes + w_mem_bytes must be 0");
  sp.static_bytes = get_bytes(s, "static_bytes", where, false);
  sp.activation_bytes = get_bytes(s, "activation_bytes", where, false);
  sp.optimizer_s = get_seconds(s, "optimizer_s", where);
  sp.reduce_grads_s = get_seconds(s, "reduce_grads_s", where);
  sp.load_s = get_optional_seconds(s, "load_s", where);
  sp.reduce_tied_s = get_optional_seconds(s, "reduce_tied_s", where);
  sp.full_backward_s = get_optional_seconds(s, "full_backward_s", where);
  sp.send_s = get_optional_seconds(s, "send_s", where);
  sp.recv_s = get_optional_seconds(s, "recv_s", where);
  sp.recv_contended_s = s.contains("recv_contended_s") ? get_seconds(s, "recv_contended_s", where) : sp.recv_s;
  sp.grad_buffer_bytes = s.contains("grad_buffer_bytes") ? get_bytes(s, "grad_buffer_bytes", where, false) : 0;
  sp.grad_accumulate_s = get_optional_seconds(s, "grad_accumulate_s", where);
  if (s.contains("moe_layers")) {
    const auto moe_layers = json_integer_in(s["moe_layers"], 0, INT_MAX);
    if (!moe_layers) throw UsageError(where + ".moe_layers: must be an integer >= 0");
    sp.moe_layers = static_cast<int>(*moe_layers);
  }
  return sp;
}

// The two spreads a prediction's interval is made from, when the profile has them.
void parse_speed_spreads(const json& j, const std::string& source, Profile& p) {
  if (j.contains("step_speed_spread")) {
    const std::string where = source + ": step_speed_spread";
    const json& spread = j["step_speed_spread"];
    if (!spread.is_object()) throw UsageError(where + ": must be an object");
    p.step_speed_spread =
        StepSpeedSpread{get_seconds(spread, "relative_sd", where), get_count(spread, "steps", where, 1)};
  }
  if (j.contains("run_speed_spread")) {
    const std::string where = source + ": run_speed_spread";
    const json& spread = j["run_speed_spread"];
    if (!spread.is_object()) throw UsageError(where + ": must be an object");
    p.run_speed_spread = RunSpeedSpread{get_seconds(spread, "relative_sd", where), get_count(spread, "runs", where, 1)};
  }
}

}  // namespace

Profile parse_profile(std::string_view text, const std::string& source) {
  if (auto problem = json_depth_problem(text)) throw UsageError(source + ": not JSON: " + *problem);
  if (auto problem = json_duplicate_key_problem(text)) throw UsageError(source + ": " + *problem);
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number beyond double
    throw UsageError(source + ": not JSON: " + e.what());
  }
  if (!j.is_object()) throw UsageError(source + ": a profile is one JSON object");
  if (!j.contains("format") || j["format"] != std::string(kProfileFormat))
    throw UsageError(source + ": format: expected \"" + std::string(kProfileFormat) + "\"");
  Profile p;
  p.micro_batch_size = get_count(j, "micro_batch_size", source, 1);
  p.data_parallel = get_count(j, "data_parallel", source, 1);
  if (!j.contains("transfer") || !j["transfer"].is_object()) throw UsageError(source + ": transfer: missing object");
  const std::string transfer_where = source + ": transfer";
  p.transfer.latency_s = get_seconds(j["transfer"], "latency_s", transfer_where);
  // 2^60 bytes a second at most (an exbibyte a second: no link comes near).
  p.transfer.bandwidth_bytes_per_s = get_seconds(j["transfer"], "bandwidth_bytes_per_s", transfer_where, 0x1p60);
  if (!(p.transfer.bandwidth_bytes_per_s > 0)) throw UsageError(transfer_where + ".bandwidth_bytes_per_s: must be > 0");
  if (!j.contains("stages") || !j["stages"].is_array() || j["stages"].empty())
    throw UsageError(source + ": stages: must be a non-empty array");
  const json& stages = j["stages"];
  for (std::size_t i = 0; i < stages.size(); ++i) p.stages.push_back(parse_stage(stages[i], i, source));
  if (j.contains("backward_split")) {
    const json& split = j["backward_split"];
    if (split != "measured" && split != "unmeasured" && split != "estimated")
      throw UsageError(source + ": backward_split: must be \"measured\", \"unmeasured\" or \"estimated\"");
    p.backward_split_measured = split == "measured";
    if (split == "estimated") p.backward_split_estimate = parse_split_estimate(j, source);
  }
  parse_speed_spreads(j, source, p);
  const std::string top_where = source + ": profile";  // "p.json: profile.optimizer_sync: ..."
  p.instruction_overhead_s = get_optional_seconds(j, "instruction_overhead_s", top_where);
  p.step_overhead_s = get_optional_seconds(j, "step_overhead_s", top_where);
  p.optimizer_sync = get_optional_flag(j, "optimizer_sync", top_where);
  p.reduce_tied_sync = get_optional_flag(j, "reduce_tied_sync", top_where);
  p.send_ends_at_receive = get_optional_flag(j, "send_ends_at_receive", top_where);
  if (j.contains("all_to_all")) p.all_to_all = detail::parse_all_to_all(j["all_to_all"], source + ": all_to_all");
  if (j.contains("expert_compute"))
    p.expert_compute = detail::parse_expert_compute(j["expert_compute"], source + ": expert_compute");
  static const std::set<std::string> known = {"format",
                                              "micro_batch_size",
                                              "data_parallel",
                                              "transfer",
                                              "stages",
                                              "backward_split",
                                              "backward_split_estimate",
                                              "step_speed_spread",
                                              "run_speed_spread",
                                              "instruction_overhead_s",
                                              "step_overhead_s",
                                              "optimizer_sync",
                                              "reduce_tied_sync",
                                              "send_ends_at_receive",
                                              "all_to_all",
                                              "expert_compute"};
  for (auto it = j.begin(); it != j.end(); ++it)
    if (!known.count(it.key()) && !take_run_record_field(it.key(), it.value(), p)) p.extra[it.key()] = it.value();
  return p;
}

Profile read_profile(const std::string& path) {
  if (auto problem = input_file_problem(path, "a profile file")) throw UsageError("--profile: " + *problem);
  std::string text;
  try {
    text = read_file(path);
  } catch (const std::exception& e) {
    throw UsageError(std::string("--profile: ") + e.what());
  }
  return parse_profile(text, path);
}

std::string to_profile_json(const Profile& profile) {
  json j = profile.extra.is_object() ? profile.extra : json::object();
  j["format"] = std::string(kProfileFormat);
  j["micro_batch_size"] = profile.micro_batch_size;
  j["data_parallel"] = profile.data_parallel;
  j["transfer"] = {{"latency_s", profile.transfer.latency_s},
                   {"bandwidth_bytes_per_s", profile.transfer.bandwidth_bytes_per_s}};
  json stages = json::array();
  for (const StageProfile& s : profile.stages) {
    stages.push_back({{"stage", s.stage},
                      {"f_s", s.f_s},
                      {"b_s", s.b_s},
                      {"w_s", s.w_s},
                      {"f_mem_bytes", s.f_mem_bytes},
                      {"b_mem_bytes", s.b_mem_bytes},
                      {"w_mem_bytes", s.w_mem_bytes},
                      {"static_bytes", s.static_bytes},
                      {"activation_bytes", s.activation_bytes},
                      {"optimizer_s", s.optimizer_s},
                      {"reduce_grads_s", s.reduce_grads_s},
                      {"load_s", s.load_s},
                      {"reduce_tied_s", s.reduce_tied_s},
                      {"full_backward_s", s.full_backward_s},
                      {"send_s", s.send_s},
                      {"recv_s", s.recv_s},
                      {"recv_contended_s", s.recv_contended_s},
                      {"grad_buffer_bytes", s.grad_buffer_bytes},
                      {"grad_accumulate_s", s.grad_accumulate_s}});
    if (s.moe_layers > 0) stages.back()["moe_layers"] = s.moe_layers;  // a dense profile's stages stay as they were
  }
  j["stages"] = std::move(stages);
  j["backward_split"] = profile.backward_split_measured   ? "measured"
                        : profile.backward_split_estimate ? "estimated"
                                                          : "unmeasured";
  if (const auto& e = profile.backward_split_estimate)
    j["backward_split_estimate"] = {{"input_share", e->input_share},
                                    {"overhead", e->overhead},
                                    {"input_share_uncertainty", e->input_share_uncertainty},
                                    {"overhead_uncertainty", e->overhead_uncertainty},
                                    {"stages", e->stages},
                                    {"basis", e->basis}};
  if (const auto& spread = profile.step_speed_spread)
    j["step_speed_spread"] = {{"relative_sd", spread->relative_sd}, {"steps", spread->steps}};
  if (const auto& spread = profile.run_speed_spread)
    j["run_speed_spread"] = {{"relative_sd", spread->relative_sd}, {"runs", spread->runs}};
  j["instruction_overhead_s"] = profile.instruction_overhead_s;
  j["step_overhead_s"] = profile.step_overhead_s;
  j["optimizer_sync"] = profile.optimizer_sync;
  j["reduce_tied_sync"] = profile.reduce_tied_sync;
  j["send_ends_at_receive"] = profile.send_ends_at_receive;
  if (profile.all_to_all) j["all_to_all"] = detail::all_to_all_json(*profile.all_to_all);
  if (profile.expert_compute) j["expert_compute"] = detail::expert_compute_json(*profile.expert_compute);
  write_run_record(profile, j);
  return j.dump(2) + "\n";
}

void write_profile(const Profile& profile, const std::string& path) {
  write_file_atomic(path, to_profile_json(profile));
}

CostModel cost_model_from_profile(const Profile& profile, int expert_parallel) {
  CostModel costs;
  costs.transfer_model = TransferModel::Links;
  costs.micro_batch_size = profile.micro_batch_size;
  costs.data_parallel = profile.data_parallel;
  RuntimeEffects& runtime = costs.runtime;
  runtime.instruction_overhead_s = profile.instruction_overhead_s;
  runtime.step_overhead_s = profile.step_overhead_s;
  runtime.optimizer_sync = profile.optimizer_sync;
  runtime.reduce_tied_sync = profile.reduce_tied_sync;
  runtime.send_ends_at_receive = profile.send_ends_at_receive;
  for (const StageProfile& s : profile.stages) {
    StageCost c;
    c.f_s = s.f_s;
    c.b_s = s.b_s;
    c.w_s = s.w_s;
    c.f_mem_bytes = s.f_mem_bytes;
    c.b_mem_bytes = s.b_mem_bytes;
    c.w_mem_bytes = s.w_mem_bytes;
    c.static_bytes = s.static_bytes;
    c.activation_bytes = s.activation_bytes;
    c.optimizer_s = s.optimizer_s;
    c.reduce_grads_s = s.reduce_grads_s;
    c.load_s = s.load_s;
    c.reduce_tied_s = s.reduce_tied_s;
    c.full_backward_s = s.full_backward_s;
    c.grad_buffer_bytes = s.grad_buffer_bytes;
    costs.stages.push_back(c);
    runtime.stages.push_back({s.send_s, s.recv_s, s.recv_contended_s, s.grad_accumulate_s});
  }
  detail::add_expert_compute_costs(profile, expert_parallel, costs);
  detail::add_all_to_all_costs(profile, expert_parallel, costs);
  return costs;
}

Topology topology_from_profile(const Profile& profile) {
  Topology t;
  t.intra_node = profile.transfer;
  t.inter_node = profile.transfer;
  t.data_parallel = profile.data_parallel;
  return t;
}

}  // namespace pipescope::sim
