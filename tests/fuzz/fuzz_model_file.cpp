// Fuzzes the model-file reader (and its Hugging Face config.json translation, at a sequence of
// 4096 where the file gives none) and the first-principles costs made from what it accepts: bad
// input and sizes no device holds must end in a UsageError and nothing else (no wrapped integer,
// no float-to-integer overflow: UndefinedBehaviorSanitizer traps on both), on a 4-stage pipeline
// of 8 GPUs per node at micro-batch sizes 1 and 2^20.
#include <cstddef>
#include <cstdint>
#include <string>

#include "pipescope/core/errors.hpp"
#include "pipescope/sim/efficiency.hpp"
#include "pipescope/sim/model.hpp"
#include "pipescope/sim/topology.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace pipescope;
  const std::string text(reinterpret_cast<const char*>(data), size);
  sim::ModelSpec model;
  try {
    model = sim::parse_model_json(text, "fuzz.json");
  } catch (const UsageError&) {
    // A Hugging Face config needs the sequence to train at: read it again with one.
    try {
      model = sim::parse_model_json(text, "fuzz.json", 4096);
    } catch (const UsageError&) {
      return 0;
    }
  }
  if (model.total_parameters() <= 0) __builtin_trap();  // a count that wrapped
  for (const int micro_batch_size : {1, 1 << 20}) {
    sim::ParallelConfig parallel;
    parallel.micro_batch_size = micro_batch_size;
    sim::Topology topology;
    try {
      const sim::CostModel costs = sim::derive_costs(model, sim::device_preset("h100"), topology, parallel);
      for (const auto& stage : costs.stages)
        if (stage.f_mem_bytes < 0 || stage.static_bytes < 0 || stage.activation_bytes < 0) __builtin_trap();
    } catch (const UsageError&) {
    }
  }
  return 0;
}
