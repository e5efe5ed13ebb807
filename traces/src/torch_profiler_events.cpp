// The compact store of a torch.profiler file's events (torch_profiler_events.hpp), and its
// filling from the reference parser's checked document.
#include "torch_profiler_events.hpp"

#include "torch_profiler_actions.hpp"

namespace pipescope::traces::detail {

std::uint32_t StringPool::intern(std::string_view text) {
  if (const auto it = ids_.find(text); it != ids_.end()) return it->second;
  const auto id = static_cast<std::uint32_t>(texts_.size());
  texts_.emplace_back(text);
  ids_.emplace(texts_.back(), id);
  return id;
}

bool torch_activity_of(std::string_view cat, TorchActivity& activity) {
  if (is_gpu_activity(cat))
    activity = TorchActivity::GpuActivity;
  else if (cat == "cuda_runtime" || cat == "cuda_driver")
    activity = TorchActivity::Launch;
  else if (cat == "cpu_op")
    activity = TorchActivity::CpuOperator;
  else if (cat == "user_annotation")
    activity = TorchActivity::UserAnnotation;
  else
    return false;
  return true;
}

const std::string& TorchEvents::shapes_of(const TorchSpan& s) const {
  static const std::string none;
  return s.shapes == kNoShapes ? none : shapes[s.shapes];
}

void TorchEvents::set_shapes(TorchSpan& s, const nlohmann::json& shapes_object) {
  s.has_input_dims = shapes_object.contains("Input Dims");
  s.shapes = static_cast<std::uint32_t>(shapes.size());
  shapes.push_back(shapes_object.dump());
}

namespace {

using nlohmann::json;

// A `[memory]` sample as the reader takes it: a numeric "Total Allocated" and a time.
void add_memory_sample(const json& e, TorchEvents& out) {
  if (text_field(e, "name") != kMemorySampleName || !e.contains("args") || !e.contains("ts")) return;
  const json& a = e["args"];
  if (!a.contains("Total Allocated") || !a["Total Allocated"].is_number()) return;
  out.memory.push_back({e["ts"].get<double>(), a["Total Allocated"].get<std::int64_t>(), is_host_memory(a)});
}

// A complete event of a process track (an integer pid) in a category the reader uses.
void add_span(const json& e, TorchEvents& out) {
  if (text_field(e, "ph") != "X" || !e.contains("pid") || !e["pid"].is_number_integer()) return;
  if (!e.contains("ts") || !e.contains("dur") || !e.contains("name")) return;
  TorchSpan s;
  if (!torch_activity_of(text_field(e, "cat"), s.activity)) return;
  s.ts_us = e["ts"].get<double>();
  s.dur_us = e["dur"].get<double>();
  s.pid = e["pid"].get<std::int64_t>();
  s.name = out.strings.intern(e["name"].get_ref<const std::string&>());
  s.tid = out.strings.intern(id_text(e, "tid"));
  if (const auto args = e.find("args"); args != e.end() && args->is_object()) {
    if (const auto c = args->find("correlation"); c != args->end() && c->is_number_integer())
      s.has_correlation = true, s.correlation = c->get<std::int64_t>();
    const bool cpu = s.activity == TorchActivity::CpuOperator || s.activity == TorchActivity::UserAnnotation;
    if (cpu && (args->contains("Input Dims") || args->contains("Input type"))) {
      json shapes = json::object();
      for (const char* key : {"Input Dims", "Input type"})
        if (args->contains(key)) shapes[key] = (*args)[key];
      out.set_shapes(s, shapes);
    }
  }
  out.spans.push_back(s);
}

}  // namespace

TorchEvents torch_events_of_document(const json& doc) {
  TorchEvents out;
  for (const auto& e : doc["traceEvents"]) {
    if (!e.is_object()) continue;
    add_memory_sample(e, out);
    add_span(e, out);
  }
  return out;
}

}  // namespace pipescope::traces::detail
