// The figures of one transformer layer on one rank that its times (layer_costs.cpp), its
// collectives (layer_collectives.cpp) and its memory share: the rank's tokens after context
// parallelism, the widths after tensor parallelism, and Megatron's split of the four linear layers.
#pragma once

#include <array>

#include "pipescope/sim/model.hpp"

namespace pipescope::sim::detail {

struct LayerShape {
  double s = 0, b = 0, h = 0, heads = 0, kv_width = 0, ffn = 0;
  // Of the attention: the queries' (and the output projection's input) width, heads x head width
  // (h but for Qwen3-like heads and MLA); the projections' outputs before the core (MLA: its
  // matrices' parameters over h, which gives their FLOPs); the core's head width.
  double attention_width = 0, attention_input_outputs = 0, core_head_dim = 0;
  // Gated attention's sigmoid gate of the output (the queries' width; 0 without one).
  double output_gate_width = 0;
  double t = 1;                 // tensor-parallel size
  double c = 1;                 // context-parallel size
  double tokens = 0;            // the rank's tokens: s x b / C
  double replicated_split = 1;  // what tensor parallelism replicates is split by T with SP
  bool gated = false, dropout = false, flash = false, fp8 = false;

  LayerShape(const ModelSpec& model, const ParallelConfig& parallel)
      : s(model.seq),
        b(parallel.micro_batch_size),
        h(model.hidden),
        heads(model.heads),
        kv_width(static_cast<double>(model.kv_width())),
        ffn(model.ffn_or_default()),
        attention_width(static_cast<double>(model.attention_width())),
        attention_input_outputs(static_cast<double>(model.attention_input_parameters()) / model.hidden),
        core_head_dim(model.attention_core_head_dim()),
        output_gate_width(model.attention_output_gate ? static_cast<double>(model.attention_width()) : 0.0),
        t(parallel.tensor_parallel),
        c(parallel.context_parallel),
        tokens(static_cast<double>(model.seq) * parallel.micro_batch_size / parallel.context_parallel),
        replicated_split(parallel.sequence_parallel ? parallel.tensor_parallel : 1),
        gated(model.gated_mlp),
        dropout(model.has_dropout()),
        flash(model.flash_attention),
        fp8(parallel.fp8 != Fp8Format::none) {}
  double head_dim() const { return core_head_dim; }
  double heads_on_rank() const { return heads / t; }
  double local_seq() const { return s / c; }  // the rank's queries of one sequence
};

// A linear layer of the rank: `inputs` x `outputs` of its weight matrix.
struct Linear {
  double inputs, outputs;
};

// Megatron's split: QKV and the MLP's first matrix (two, gated) are column-parallel (outputs
// divided by T), the attention output and the MLP's second matrix row-parallel (inputs divided).
// In this order: QKV, the attention output, the MLP's first, its second.
inline std::array<Linear, 4> linears_on_rank(const LayerShape& l) {
  return {{{l.h, l.attention_input_outputs / l.t},
           {l.attention_width / l.t, l.h},
           {l.h, (l.gated ? 2 : 1) * l.ffn / l.t},
           {l.ffn / l.t, l.h}}};
}
inline bool column_parallel(std::size_t linear) { return linear == 0 || linear == 2; }

// Seconds of the four linear layers' products on the rank, in the layer's precision: forward
// (tokens, out, in), input gradient (tokens, in, out), weight gradient (in, out, tokens).
struct LinearTimes {
  std::array<double, 4> forward_s{}, input_gradient_s{}, weight_gradient_s{};
};
inline LinearTimes linear_times(const LayerShape& l, const DeviceSpec& device) {
  const GemmPrecision precision = l.fp8 ? GemmPrecision::fp8 : GemmPrecision::bf16;
  const std::array<Linear, 4> linears = linears_on_rank(l);
  LinearTimes out;
  for (std::size_t i = 0; i < linears.size(); ++i) {
    if (linears[i].inputs <= 0 || linears[i].outputs <= 0) continue;  // a MoE layer's absent MLP
    out.forward_s[i] = gemm_time_s({l.tokens, linears[i].outputs, linears[i].inputs}, device, precision);
    out.input_gradient_s[i] = gemm_time_s({l.tokens, linears[i].inputs, linears[i].outputs}, device, precision);
    out.weight_gradient_s[i] = gemm_time_s({linears[i].inputs, linears[i].outputs, l.tokens}, device, precision);
  }
  return out;
}

}  // namespace pipescope::sim::detail
