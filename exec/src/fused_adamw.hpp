// AdamW with the update of each parameter done in one pass over its memory.
//
// LibTorch's AdamW::step runs about eight whole-tensor operations per parameter (decay, two
// moment updates, a square root, a division, a temporary for the denominator, the update); on a
// CPU rank the optimizer step is memory-bound, so that is eight passes where one will do. This
// subclass keeps AdamW's options, state objects and serialization (checkpoints written with one
// load into the other) and only replaces step() for dense, contiguous float32 CPU parameters;
// anything else (GPU tensors, amsgrad, other dtypes) goes through AdamW::step unchanged.
#pragma once

#include <torch/optim/adamw.h>

#include <vector>

namespace pipescope::exec {

class FusedAdamW : public torch::optim::AdamW {
 public:
  using torch::optim::AdamW::AdamW;

  torch::Tensor step(LossClosure closure = nullptr) override;

 private:
  bool fusable() const;
};

}  // namespace pipescope::exec
