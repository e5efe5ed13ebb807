// What a recurrent mixer block (Mamba-2's, the Gated DeltaNet's) is priced from, on one rank, and
// the pricing they share: a norm, an input projection (column-parallel) and an output projection
// (row-parallel) priced by shape and precision, a chunked kernel and element-wise work between
// them; the activations under each recomputation. mamba_layer.cpp and gated_delta_net_layer.cpp
// say what their kernel costs and keeps.
#pragma once

#include <string_view>

#include "pipescope/sim/layer_costs.hpp"
#include "pipescope/sim/model.hpp"

namespace pipescope::sim::detail {

struct RecurrentBlock {
  double tokens = 0;            // the rank's tokens: s x b / C
  double h = 0;                 // the hidden width
  double replicated_split = 1;  // the norm's input and output: split by T with sequence parallelism
  bool fp8 = false;
  double in_outputs = 0;        // the input projection's outputs on the rank
  double out_inputs = 0;        // the output projection's inputs on the rank (the gated norm's output)
  double kernel_forward_s = 0;  // the chunked kernel's forward, its own bytes included
  // The mixer's element-wise work beside the kernel (the block's norm and residual add are added).
  double elementwise_forward_bytes = 0;
  // What the block keeps for its backward beside the norm's input and output and the output
  // projection's input: the projection's outputs, the convolution's, the kernel's.
  double kept_bytes = 0;

  RecurrentBlock(const ModelSpec& model, const ParallelConfig& parallel)
      : tokens(static_cast<double>(model.seq) * parallel.micro_batch_size / parallel.context_parallel),
        h(model.hidden),
        replicated_split(parallel.sequence_parallel ? parallel.tensor_parallel : 1),
        fp8(parallel.fp8 != Fp8Format::none) {}
};

// The block's passes: the products, the kernel (its backward at twice its forward: the chunked
// kernels recompute their states and run each product's two gradients), the element-wise work
// with the block's norm and residual add (half a transformer layer's two; twice in the backward) and, under FP8, the casts Transformer Engine adds (the output
// projection's input in the forward, both products' output gradients in the backward, 4 bytes an
// element: read in 16 bits, written in FP8 with the transpose). Selective recomputation's
// `layernorm` runs the norm again; full recomputation the whole forward.
LayerTimes recurrent_block_times(const RecurrentBlock& block, const DeviceSpec& device, const ParallelConfig& parallel);

// The block's activations: the norm's input and output (FP8 under FP8), the kept bytes and the
// output projection's input (FP8 under FP8); the weight-gradient stash (both products' inputs and
// output gradients). Full recomputation keeps the block's input; `layernorm` drops the norm's output.
LayerMemory recurrent_block_memory(const RecurrentBlock& block, std::string_view what, const ModelSpec& model,
                                   const ParallelConfig& parallel);

}  // namespace pipescope::sim::detail
