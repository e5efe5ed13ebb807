// The threads a rank computes with: set_rank_threads (public, distributed.hpp) and what a trace
// says about them.
#pragma once

#include "pipescope/exec/distributed.hpp"

namespace pipescope::exec {

// The BLAS the process calls: "OpenBLAS <config>" when it is OpenBLAS, else "unknown".
const char* blas_description();

}  // namespace pipescope::exec
