// The small synthetic model and engine options the in-process engine tests share: an mlp of
// 4 layers, hidden 16, vocabulary 8, 4 samples a micro-batch; 2 micro-batches a step.
#pragma once

#include "pipescope/exec/engine.hpp"
#include "pipescope/exec/model.hpp"

namespace pipescope::exec::testing {

inline ModelSpec small_mlp() {
  ModelConfig c;
  c.layers = 4;
  c.hidden = 16;
  c.vocab = 8;
  c.micro_batch_size = 4;
  return make_model_spec(c);
}

inline EngineOptions two_micro_batches() {
  EngineOptions o;
  o.micro_batches = 2;
  o.retain_freed_cpu_memory = false;
  return o;
}

}  // namespace pipescope::exec::testing
