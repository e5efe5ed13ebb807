// A rank's traced step as JSON between processes. The events carry their name, not their kind:
// the kind is parsed from the name at this edge, once, as every reader of traces does.
#include "pprun/rank_trace_record.hpp"

#include <utility>

#include "pipescope/traces/event_kind.hpp"

namespace pipescope::exec {
namespace {

nlohmann::json rank_record_times_json(const traces::BackwardSplitTimes& t) {
  return {{"full_us", t.full_us}, {"input_us", t.input_us}, {"weight_us", t.weight_us}};
}

traces::BackwardSplitTimes rank_record_times(const nlohmann::json& j) {
  return {j.at("full_us").get<std::vector<double>>(), j.at("input_us").get<std::vector<double>>(),
          j.at("weight_us").get<std::vector<double>>()};
}

nlohmann::json rank_record_expert_call_json(const traces::ExpertCallProbe& p) {
  return {{"stage", p.stage}, {"layer", p.layer}, {"backward", p.backward}, {"rows", p.rows}, {"us", p.us}};
}

traces::ExpertCallProbe rank_record_expert_call(const nlohmann::json& j) {
  return {j.at("stage").get<int>(), j.at("layer").get<std::string>(), j.at("backward").get<bool>(),
          j.at("rows").get<std::int64_t>(), j.at("us").get<std::vector<double>>()};
}

nlohmann::json rank_record_event_json(const traces::TraceEvent& e) {
  return {{"rank", e.rank},           {"lane", e.lane},     {"name", e.name},   {"category", e.category},
          {"ts_us", e.ts_us},         {"dur_us", e.dur_us}, {"stage", e.stage}, {"micro_batch", e.micro_batch},
          {"peer_rank", e.peer_rank}, {"bytes", e.bytes}};
}

traces::TraceEvent rank_record_event(const nlohmann::json& j) {
  traces::TraceEvent e;
  e.rank = j.at("rank").get<int>();
  e.lane = j.at("lane").get<int>();
  e.name = j.at("name").get<std::string>();
  e.kind = traces::event_kind_from_name(e.name);
  e.category = j.at("category").get<std::string>();
  e.ts_us = j.at("ts_us").get<double>();
  e.dur_us = j.at("dur_us").get<double>();
  e.stage = j.at("stage").get<int>();
  e.micro_batch = j.at("micro_batch").get<int>();
  e.peer_rank = j.at("peer_rank").get<int>();
  e.bytes = j.at("bytes").get<std::int64_t>();
  return e;
}

}  // namespace

void to_json(nlohmann::json& j, const RankTraceRecord& record) {
  nlohmann::json events = nlohmann::json::array();
  for (const traces::TraceEvent& e : record.events) events.push_back(rank_record_event_json(e));
  nlohmann::json args = nlohmann::json::array();
  for (const traces::EventArgs& a : record.args) args.push_back({{"event", a.event}, {"json", a.json}});
  nlohmann::json memory = nlohmann::json::array();
  for (const traces::MemorySample& m : record.memory)
    memory.push_back({{"rank", m.rank}, {"ts_us", m.ts_us}, {"bytes", m.bytes}});
  nlohmann::json probe = nlohmann::json::array();
  for (const traces::BackwardSplitProbe& p : record.backward_split_probe) {
    nlohmann::json entry = rank_record_times_json(p.own);
    entry["stage"] = p.stage;
    if (p.inner) entry["inner"] = rank_record_times_json(*p.inner);
    probe.push_back(std::move(entry));
  }
  nlohmann::json expert_calls = nlohmann::json::array();
  for (const traces::ExpertCallProbe& p : record.expert_call_probe)
    expert_calls.push_back(rank_record_expert_call_json(p));
  j = {{"events", std::move(events)},
       {"args", std::move(args)},
       {"memory", std::move(memory)},
       {"backward_split_probe", std::move(probe)},
       {"expert_call_probe", std::move(expert_calls)},
       {"cores", record.cores},
       {"transport_cores", record.transport_cores}};
}

void from_json(const nlohmann::json& j, RankTraceRecord& record) {
  record = RankTraceRecord{};
  for (const auto& e : j.at("events")) record.events.push_back(rank_record_event(e));
  for (const auto& a : j.at("args"))
    record.args.push_back({a.at("event").get<std::size_t>(), a.at("json").get<std::string>()});
  for (const auto& m : j.at("memory"))
    record.memory.push_back({m.at("rank").get<int>(), m.at("ts_us").get<double>(), m.at("bytes").get<std::int64_t>()});
  for (const auto& p : j.at("backward_split_probe")) {
    traces::BackwardSplitProbe probe{p.at("stage").get<int>(), rank_record_times(p), std::nullopt};
    if (p.contains("inner")) probe.inner = rank_record_times(p.at("inner"));
    record.backward_split_probe.push_back(std::move(probe));
  }
  for (const auto& p : j.at("expert_call_probe")) record.expert_call_probe.push_back(rank_record_expert_call(p));
  record.cores = j.at("cores").get<std::string>();
  record.transport_cores = j.at("transport_cores").get<std::string>();
}

void append_rank_trace(traces::Trace& trace, const RankTraceRecord& record) {
  const std::size_t first = trace.events.size();
  for (const traces::EventArgs& a : record.args) trace.args.push_back({first + a.event, a.json});
  trace.events.insert(trace.events.end(), record.events.begin(), record.events.end());
  trace.memory.insert(trace.memory.end(), record.memory.begin(), record.memory.end());
}

}  // namespace pipescope::exec
