// The all-to-all of backends that have none (the in-process fake): a TransportError naming them.
#include <fmt/format.h>

#include "pipescope/exec/transport.hpp"

namespace pipescope::exec {

std::unique_ptr<PendingTransfer> Transport::all_to_all(at::Tensor /*output*/, at::Tensor /*input*/,
                                                       const std::vector<std::int64_t>& /*output_splits*/,
                                                       const std::vector<std::int64_t>& /*input_splits*/) {
  throw TransportError(fmt::format("all-to-all: the {} transport has none (expert parallelism needs Gloo or NCCL)", backend()));
}

}  // namespace pipescope::exec
