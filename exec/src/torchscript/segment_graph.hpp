// One segment of a ForwardSplit as a graph of its own, which the TorchScript interpreter runs on
// the module: (self, incoming Tensors...) -> a tuple of outgoing Tensors, where tuples that cross
// a boundary travel flattened and are packed again on the other side.
#pragma once

#include <cstddef>
#include <memory>

#include "torchscript/forward_split.hpp"

namespace pipescope::exec::torchscript {

// Segment `s` of `split`: its nodes cloned, with the constants and attribute reads it uses
// repeated in it.
std::shared_ptr<torch::jit::Graph> segment_graph(const ForwardSplit& split, std::size_t s);

}  // namespace pipescope::exec::torchscript
