// The events of one torch.profiler file that the torch reader uses, in a compact store: of each
// complete event of a process track only its times, ids, its name interned (a trace has a few
// hundred distinct kernel and operator names and millions of events) and its recorded shapes,
// and of each `[memory]` sample its time, bytes and device. Filled from the text by the
// streaming reader (torch_profiler_stream.cpp) or, where that gives way, from the checked
// document of the reference parser (torch_profiler_document.cpp). Private to the traces library.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <limits>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

namespace pipescope::traces::detail {

// One copy of each distinct text, named by its index in the order first seen.
class StringPool {
 public:
  std::uint32_t intern(std::string_view text);
  const std::string& operator[](std::uint32_t id) const { return texts_[id]; }
  std::size_t size() const { return texts_.size(); }

 private:
  std::deque<std::string> texts_;  // a deque: the map's views stay valid as it grows
  std::unordered_map<std::string_view, std::uint32_t> ids_;
};

// What an event's category ("cat") says it is; events of other categories are not kept.
enum class TorchActivity : std::uint8_t {
  CpuOperator,     // "cpu_op"
  UserAnnotation,  // "user_annotation" (PP: actions, ProfilerStep#N)
  Launch,          // "cuda_runtime", "cuda_driver": kernel launches
  GpuActivity,     // "kernel", "gpu_memcpy", "gpu_memset"
};

// The activity of a category, or false for one the reader does not use.
bool torch_activity_of(std::string_view cat, TorchActivity& activity);

inline constexpr std::uint32_t kNoShapes = std::numeric_limits<std::uint32_t>::max();

// A complete ("X") event with an integer pid and a category the reader uses, in file order.
struct TorchSpan {
  double ts_us = 0;
  double dur_us = 0;
  std::int64_t pid = 0;
  std::int64_t correlation = 0;      // args.correlation, when has_correlation
  std::uint32_t name = 0;            // in TorchEvents::strings
  std::uint32_t tid = 0;             // the tid as text ("7", "stream 7"; "0" when absent), in strings
  std::uint32_t shapes = kNoShapes;  // in TorchEvents::shapes
  TorchActivity activity = TorchActivity::CpuOperator;
  bool has_correlation = false;  // args.correlation is an integer
  bool has_input_dims = false;   // args has "Input Dims" (record_shapes)
  double end_us() const { return ts_us + dur_us; }
};

// A `[memory]` sample with a numeric "Total Allocated".
struct TorchMemorySample {
  double ts_us = 0;
  std::int64_t bytes = 0;
  bool host = true;  // Device Type 0 or none said; else a GPU's
};

struct TorchEvents {
  StringPool strings;
  std::vector<TorchSpan> spans;
  // {"Input Dims": ..., "Input type": ...} of an event's args (the keys it has), as the JSON
  // text nlohmann writes: the operator's args in the trace, and a transport call's bytes.
  std::vector<std::string> shapes;
  std::vector<TorchMemorySample> memory;

  const std::string& name_of(const TorchSpan& s) const { return strings[s.name]; }
  const std::string& tid_of(const TorchSpan& s) const { return strings[s.tid]; }
  // The shapes' JSON text, or "" when the event has none.
  const std::string& shapes_of(const TorchSpan& s) const;
  // Adds the span's args' shapes (an object holding "Input Dims" and/or "Input type").
  void set_shapes(TorchSpan& s, const nlohmann::json& shapes_object);
};

// The events of a checked document of the reference parser (load_rank_file's checks passed).
TorchEvents torch_events_of_document(const nlohmann::json& doc);

}  // namespace pipescope::traces::detail
