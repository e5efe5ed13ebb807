#include "recurrent_block.hpp"

#include <string>

#include "pipescope/sim/efficiency.hpp"

namespace pipescope::sim::detail {

LayerTimes recurrent_block_times(const RecurrentBlock& block, const DeviceSpec& device,
                                 const ParallelConfig& parallel) {
  const RecurrentBlock& l = block;
  const GemmPrecision precision = l.fp8 ? GemmPrecision::fp8 : GemmPrecision::bf16;
  LayerTimes out;
  out.f_s = gemm_time_s({l.tokens, l.in_outputs, l.h}, device, precision) +
            gemm_time_s({l.tokens, l.h, l.out_inputs}, device, precision);
  out.b_s = gemm_time_s({l.tokens, l.h, l.in_outputs}, device, precision) +
            gemm_time_s({l.tokens, l.out_inputs, l.h}, device, precision);
  out.w_s = gemm_time_s({l.h, l.in_outputs, l.tokens}, device, precision) +
            gemm_time_s({l.out_inputs, l.h, l.tokens}, device, precision);
  const double fp8_forward = l.fp8 ? 4.0 * l.tokens * l.out_inputs : 0.0;
  const double fp8_backward = l.fp8 ? 4.0 * l.tokens * (l.in_outputs + l.h) : 0.0;
  const double elementwise = 10.0 * l.tokens * l.h / l.replicated_split + l.elementwise_forward_bytes;
  out.f_s += l.kernel_forward_s + memory_bound_time_s(elementwise + fp8_forward, device);
  out.b_s += 2.0 * l.kernel_forward_s + memory_bound_time_s(2.0 * elementwise + fp8_backward, device);
  switch (parallel.recomputation) {
    case Recomputation::none: break;
    case Recomputation::selective:
      // Of Megatron's modules only the norm's output is such a block's to drop.
      if (parallel.recomputes(kRecomputeLayernorm))
        out.recompute_s = memory_bound_time_s(4.0 * l.tokens * l.h / l.replicated_split, device);
      break;
    case Recomputation::full: out.recompute_s = out.f_s; break;
  }
  return out;
}

LayerMemory recurrent_block_memory(const RecurrentBlock& block, std::string_view what, const ModelSpec& model,
                                   const ParallelConfig& parallel) {
  const RecurrentBlock& l = block;
  const std::string activations = "one " + std::string(what) + "'s activations";
  const double fp8_saved = l.fp8 ? 1.0 : 0.0;
  const double norm_output = (2 - fp8_saved) * l.tokens * l.h / l.replicated_split;
  const double replicated = 2.0 * l.tokens * l.h / l.replicated_split + norm_output;
  const double without_recomputation = replicated + l.kept_bytes + (2 - fp8_saved) * l.tokens * l.out_inputs;
  LayerMemory out;
  out.weight_stash_bytes =
      memory_figure_bytes(2.0 * l.tokens * (2 * l.h + l.in_outputs + l.out_inputs),
                          "one " + std::string(what) + "'s weight-gradient inputs", model, parallel);
  switch (parallel.recomputation) {
    case Recomputation::none:
      out.held_bytes = memory_figure_bytes(without_recomputation, activations, model, parallel);
      break;
    case Recomputation::selective: {
      const double dropped = parallel.recomputes(kRecomputeLayernorm) ? norm_output : 0.0;
      out.held_bytes = memory_figure_bytes(without_recomputation - dropped, activations, model, parallel);
      out.rebuilt_bytes = memory_figure_bytes(dropped, activations, model, parallel);
      break;
    }
    case Recomputation::full:
      out.held_bytes = memory_figure_bytes(2.0 * l.tokens * l.h / l.replicated_split, activations, model, parallel);
      out.rebuilt_bytes = memory_figure_bytes(without_recomputation, activations, model, parallel);
      break;
  }
  return out;
}

}  // namespace pipescope::sim::detail
